//! The values every executor, backend and the API share: static values and the contents
//! of static slices, the pure hosts setup code may call, the budgets of one
//! specialization and the errors it can end with, and promotion sites.

use dyc_templates::ops::Const;
use dyc_templates::types::{Scalar, SrcLoc};

use super::entities::{Block, HostId};

/// A static value: what a static register holds while stitching.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SVal {
    Scalar(Const),
    /// The static slice that is parameter `k` of the region (a key parameter); its
    /// contents are `slices[k]` of the specialization.
    Slice(u32),
}

impl SVal {
    /// A hashable, exact encoding (a tag and a word; floats by their bits), the unit of
    /// memo keys.
    pub fn key_bits(&self) -> (u8, u64) {
        match *self {
            SVal::Scalar(Const::Int(t, x)) => (t as u8, x),
            SVal::Scalar(Const::F64(x)) => (100, x.to_bits()),
            SVal::Scalar(Const::Bool(b)) => (101, b as u64),
            SVal::Slice(k) => (102, k as u64),
        }
    }

    /// The value [`SVal::key_bits`] encodes as `(tag, bits)`, if any.
    pub fn from_key_bits(tag: u8, bits: u64) -> Option<SVal> {
        let int = |t| Some(SVal::Scalar(Const::Int(t, bits)));
        match tag {
            0 => int(Scalar::I8),
            1 => int(Scalar::I16),
            2 => int(Scalar::I32),
            3 => int(Scalar::I64),
            4 => int(Scalar::U8),
            5 => int(Scalar::U16),
            6 => int(Scalar::U32),
            7 => int(Scalar::U64),
            100 => Some(SVal::Scalar(Const::F64(f64::from_bits(bits)))),
            101 => Some(SVal::Scalar(Const::Bool(bits != 0))),
            102 => u32::try_from(bits).ok().map(SVal::Slice),
            _ => None,
        }
    }
}

impl std::fmt::Display for SVal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SVal::Scalar(c) => write!(f, "{c}"),
            SVal::Slice(k) => write!(f, "slice{k}"),
        }
    }
}

/// The contents of a static slice, read by static loads.
#[derive(Clone, Debug)]
pub struct SliceData {
    pub elem: Scalar,
    pub data: Vec<Const>,
    /// The elements' words ([`SVal::key_bits`]), made the first time compiled code reads
    /// the slice (once for all the units of a specialization).
    words: std::sync::OnceLock<Vec<u64>>,
}

impl SliceData {
    pub fn new(elem: Scalar, data: Vec<Const>) -> SliceData {
        SliceData {
            elem,
            data,
            words: std::sync::OnceLock::new(),
        }
    }

    /// The elements as the words of their [`SVal::key_bits`] encoding.
    pub(crate) fn words(&self) -> &[u64] {
        self.words.get_or_init(|| {
            self.data
                .iter()
                .map(|&c| SVal::Scalar(c).key_bits().1)
                .collect()
        })
    }
}

impl PartialEq for SliceData {
    fn eq(&self, other: &SliceData) -> bool {
        (self.elem, &self.data) == (other.elem, &other.data)
    }
}

/// Pure host functions, callable at specialization time (`@f(args)`). Implementations
/// must not call back into the runtime that is specializing (it may hold the
/// specialization's own lock, never a global one).
pub trait PureHosts {
    fn call(&self, host: HostId, args: &[Const]) -> Result<Option<Const>, String>;
}

/// No host functions.
pub struct NoHosts;
impl PureHosts for NoHosts {
    fn call(&self, _: HostId, _: &[Const]) -> Result<Option<Const>, String> {
        Err("no host functions are registered".into())
    }
}

/// Limits on one specialization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Specialized block copies per unit.
    pub max_blocks: usize,
    /// Setup and template operations processed per unit.
    pub max_ops: usize,
    /// Units (lazily stitched promotion continuations) of one specialization.
    pub max_units: usize,
}

impl Default for Budget {
    /// 20,000 block copies and 1,000,000 operations per unit; 10,000 units per
    /// specialization.
    fn default() -> Budget {
        Budget {
            max_blocks: 20_000,
            max_ops: 1_000_000,
            max_units: 10_000,
        }
    }
}

/// Which budget ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BudgetKind {
    /// [`Budget::max_blocks`].
    Blocks,
    /// [`Budget::max_ops`].
    Ops,
    /// [`Budget::max_units`].
    Units,
    /// Versions of a promotion site (the runtime's `Limits::max_versions`).
    Versions,
}

impl BudgetKind {
    pub fn name(self) -> &'static str {
        match self {
            BudgetKind::Blocks => "specialized blocks",
            BudgetKind::Ops => "operations",
            BudgetKind::Units => "units",
            BudgetKind::Versions => "versions at a promotion site",
        }
    }
}

/// Why a specialization failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A budget ran out: the static computation does not terminate, or unrolls too far.
    /// `block` names the template block being stitched and `loc` the source position of
    /// its first located operation (unknown for blocks without one).
    BudgetExceeded {
        budget: BudgetKind,
        limit: usize,
        block: String,
        loc: SrcLoc,
    },
    /// Ill-formed input: a bug in the static compiler, or a stitch program that does not
    /// check.
    Internal(String),
}

/// How the message of a [`SpecError::BudgetExceeded`] begins (a failed lazy unit's
/// [`crate::runtime::RunError`] carries the message).
pub const BUDGET_EXCEEDED: &str = "specialization budget exceeded";

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::BudgetExceeded {
                budget,
                limit,
                block,
                loc,
            } => {
                write!(
                    f,
                    "{BUDGET_EXCEEDED}: more than {limit} {} (stitching {block}",
                    budget.name()
                )?;
                if loc.is_known() {
                    write!(f, ", line {loc}")?;
                }
                write!(f, ")")
            }
            SpecError::Internal(m) => write!(f, "internal specializer error (a bug): {m}"),
        }
    }
}

impl std::error::Error for SpecError {}

/// A promotion site met while specializing: entering `block` with these static values for
/// its static parameters and static live-ins; the promoted values complete the key.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub block: Block,
    pub params: Vec<SVal>,
    pub live: Vec<SVal>,
}

impl Site {
    /// The key of the continuation for `promoted` values, in
    /// [`super::BlockData::key_regs`] order.
    pub fn key(&self, promoted: &[Const]) -> Vec<SVal> {
        let mut k = self.params.clone();
        k.extend(promoted.iter().map(|&c| SVal::Scalar(c)));
        k.extend_from_slice(&self.live);
        k
    }

    /// The site's identity (block and static values) as hashable words.
    pub fn ident(&self) -> (Block, Vec<(u8, u64)>) {
        (
            self.block,
            self.params
                .iter()
                .chain(&self.live)
                .map(SVal::key_bits)
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every static value comes back from its key encoding, and unknown tags give none.
    #[test]
    fn key_bits_round_trip() {
        let mut vals: Vec<SVal> = Scalar::ALL
            .iter()
            .filter(|t| t.int_bits().is_some())
            .map(|&t| SVal::Scalar(Const::Int(t, 0x8000_0000_0000_0001)))
            .collect();
        vals.extend([
            SVal::Scalar(Const::F64(-2.5)),
            SVal::Scalar(Const::Bool(true)),
            SVal::Scalar(Const::Bool(false)),
            SVal::Slice(7),
        ]);
        for v in vals {
            let (t, b) = v.key_bits();
            assert_eq!(SVal::from_key_bits(t, b), Some(v));
        }
        assert_eq!(SVal::from_key_bits(8, 0), None);
        assert_eq!(SVal::from_key_bits(255, 0), None);
    }
}

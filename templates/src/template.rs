//! The template format and the [`Emitter`] trait.
//!
//! A **template** is the dynamic part of one block of a region: a sequence of [`TOp`]s
//! whose operands are dynamic values, or **holes** that the stitcher fills with static
//! values (constants, static slices). The stitcher instantiates templates by calling an
//! [`Emitter`], the abstract sink of specialized code: one emitter builds residual IR (in
//! `dyc`, so a specialization can be run by the reference interpreter), another builds
//! Cranelift IR.

use crate::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use crate::types::{Scalar, SrcLoc, Type};

/// A dynamic operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TOp {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Cmp(CmpOp),
    /// `select c, a, b`.
    Select,
    Cast(Scalar),
    /// The length of a slice, as `i64`.
    Len,
    /// Bounds-checked read `s[i]` (operands: slice, index).
    Load,
    /// Bounds-checked write `s[i] = v` (operands: slice, index, value).
    Store,
    /// A call: `callee` indexes the program's callee table.
    Call {
        callee: u32,
        ret: Option<Type>,
    },
}

impl TOp {
    /// Whether the operation can fault at run time (and so needs its source position).
    pub fn can_fault(&self) -> bool {
        matches!(
            self,
            TOp::Binary(BinaryOp::Div | BinaryOp::Rem) | TOp::Load | TOp::Store | TOp::Call { .. }
        )
    }
}

/// The kind of a runtime fault that specialized code reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    OutOfBounds,
    DivisionByZero,
    Trap,
    CallDepthExceeded,
    FuelExhausted,
    Host,
    /// A lazy specialization (a promotion's continuation) failed, e.g. its budget ran out.
    Specialization,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::OutOfBounds => "out of bounds",
            FaultKind::DivisionByZero => "division by zero",
            FaultKind::Trap => "trap",
            FaultKind::CallDepthExceeded => "call depth exceeded",
            FaultKind::FuelExhausted => "fuel exhausted",
            FaultKind::Host => "host function error",
            FaultKind::Specialization => "lazy specialization failed",
        }
    }
}

/// A case of a [`Emitter::switch`]: value, target block, arguments.
pub type Case<E> = (u64, <E as Emitter>::Block, Vec<<E as Emitter>::Value>);

/// The sink of specialized code.
///
/// Blocks are created with their parameter types and filled one at a time after
/// [`Emitter::switch_to_block`]; every block ends with exactly one terminator (`jump`,
/// `brif`, `switch`, `ret`, `trap`, `promote`).
pub trait Emitter {
    type Value: Copy + std::fmt::Debug + 'static;
    type Block: Copy + Eq + std::fmt::Debug + 'static;

    fn create_block(&mut self, params: &[Type]) -> Self::Block;
    /// A new block with parameter types `params`, which are those of block `like`, made
    /// earlier by this emitter: an emitter that keeps its blocks' type lists may take
    /// `like`'s instead of comparing `params` with the lists it has (executors make many
    /// copies of a template block, all with its list).
    fn create_block_like(&mut self, like: Self::Block, params: &[Type]) -> Self::Block {
        let _ = like;
        self.create_block(params)
    }
    /// Told by the executor, before it fills block `b`, that `b` is the copy of template
    /// block `template` for static context `context` (an exact encoding of the static
    /// values). For recording and tracing; emitters need not care.
    fn note_copy(&mut self, b: Self::Block, template: u32, context: &[(u8, u64)]) {
        let _ = (b, template, context);
    }
    /// Whether [`Emitter::note_copy`] does anything (executors skip building the context
    /// otherwise).
    fn notes_copies(&self) -> bool {
        false
    }
    /// Told, before `b` is filled, that a jump from a block filled after it enters it: `b`
    /// heads a loop; `reads`, per parameter of `b`, whether the loop may read its value
    /// (`false` for one the loop only carries around, to be read after it, if at all).
    /// Only a replay knows this ahead ([`crate::tape::Tape::replay`]); a hint, emitters
    /// need not care.
    fn loop_head(&mut self, b: Self::Block, reads: &[bool]) {
        let _ = (b, reads);
    }
    /// Appends the parameters of `b` to `out`.
    fn block_params(&mut self, b: Self::Block, out: &mut Vec<Self::Value>);
    fn switch_to_block(&mut self, b: Self::Block);

    /// A hole filled with a constant.
    fn constant(&mut self, c: Const) -> Self::Value;
    /// A hole filled with static slice `id` (a key parameter of the region), of type `ty`.
    fn static_slice(&mut self, id: u32, ty: Type) -> Self::Value;
    /// A dynamic operation; `None` for operations without a result.
    fn op(&mut self, op: &TOp, args: &[Self::Value], loc: SrcLoc) -> Option<Self::Value>;

    /// `a[index]` of a local array whose elements (of type `elem`) are `elems`, the executor
    /// keeping the elements as values: bounds-checked, faulting at `loc`.
    fn array_load(
        &mut self,
        elem: Scalar,
        elems: &[Self::Value],
        index: Self::Value,
        loc: SrcLoc,
    ) -> Self::Value;
    /// `a[index] = value` (bounds-checked) on the local array whose elements are `elems`,
    /// which are updated in place to the elements after the store.
    fn array_store(
        &mut self,
        elem: Scalar,
        elems: &mut [Self::Value],
        index: Self::Value,
        value: Self::Value,
        loc: SrcLoc,
    );

    /// A local array of `len` elements of type `elem` kept in memory rather than as
    /// values: a mutable slice of static length `len`, read and written with [`TOp::Load`]
    /// and [`TOp::Store`], its first `init.len()` elements set to `init` and the others
    /// left unset (an executor writes every element before any is read). The executor
    /// makes it in the unit's first block, so that the value is valid in every block of
    /// the unit and no edge passes it.
    fn local_array(&mut self, elem: Scalar, len: u32, init: &[Self::Value]) -> Self::Value;

    /// `v` is read by later blocks of the unit without being passed to them (the
    /// executor's unit invariants, which the unit's first block receives or computes):
    /// where `v` is kept must hold `v` for the rest of the unit. An emitter that moves
    /// values between blocks only through parameters needs nothing.
    fn keep(&mut self, _v: Self::Value) {}

    /// A hint: no later code of the current block reads `v`, and no edge passes it on (the
    /// operation just emitted read it for the last time), so where it is held may be
    /// reused. Code that reads `v` after all must still get it (a hint, never a promise).
    fn dead(&mut self, _v: Self::Value) {}

    /// A promise about the next call, a remainder (`op` with [`crate::ops::BinaryOp::Rem`]):
    /// only comparisons for equality or inequality with zero read its result. So it may
    /// make, for a divisor that is a constant power of two `2^s`, the dividend's low `s`
    /// bits instead (zero exactly when the remainder is, whatever the dividend's sign).
    /// Recorded runs make it ([`crate::tape::Tape::note_low_bits`]).
    fn low_bits_only(&mut self) {}

    fn jump(&mut self, dest: Self::Block, args: &[Self::Value]);
    fn brif(
        &mut self,
        cond: Self::Value,
        then_dest: (Self::Block, &[Self::Value]),
        else_dest: (Self::Block, &[Self::Value]),
    );
    /// `cases` are `(value, block, arguments)`; values are canonical bits of `arg`'s type.
    fn switch(
        &mut self,
        arg: Self::Value,
        cases: &[Case<Self>],
        default: (Self::Block, &[Self::Value]),
    );
    fn ret(&mut self, value: Option<Self::Value>);
    /// An explicit `trap`, raised if the code gets here.
    fn trap(&mut self, loc: SrcLoc);
    /// Leaves the unit at promotion site `site` (the runtime's site id): the runtime looks
    /// the `promoted` values up, stitching the continuation on a miss, and continues there
    /// with `live`.
    fn promote(&mut self, site: u32, promoted: &[Self::Value], live: &[Self::Value]);
    /// A promotion miss in inline mode: reports `site` and the `promoted` values and stops.
    fn promote_miss(&mut self, site: u32, promoted: &[Self::Value]);

    /// Whether [`Emitter::restart`] can forget every call made so far (executors that may
    /// give up part way, as the compiled stitcher does, run only with such emitters).
    fn restartable(&self) -> bool {
        false
    }
    /// Forgets every call made so far, as if the emitter were new (only if
    /// [`Emitter::restartable`]).
    fn restart(&mut self) {}
}

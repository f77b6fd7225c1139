//! Stitch-time optimizations, in one layer between the executor and any backend.
//!
//! [`Fold`] is the [`Emitter`] executors drive; it keeps what is known at stitch time and
//! hands a [`Backend`] only what must be lowered:
//! - **constant folding**: holes filled with static values stay constants ([`FVal::Const`])
//!   until an operation needs them in code; operations on constants are evaluated by
//!   [`crate::semantics`] (the one definition of the operators), except those that would
//!   fault, which are emitted to fault when the code runs;
//! - **branch folding**: a branch or switch on a constant becomes a jump; a `select` on a
//!   constant picks its operand;
//! - **strength reduction** of integer operations with a constant operand: adding,
//!   subtracting, or-ing, xor-ing or shifting by 0 and multiplying or dividing by 1 vanish;
//!   multiplying by 0 and and-ing with 0 give 0; multiplying by 2^s becomes a left shift;
//!   unsigned division and remainder by 2^s become a right shift and a mask; signed
//!   division by 2^s becomes a biased arithmetic shift (rounding toward zero), and signed
//!   remainder by 2^s the dividend minus that quotient shifted back, or just a mask when
//!   only tests for zero read it ([`Emitter::low_bits_only`]: a multiple of 2^s has its
//!   low bits zero whatever its sign); remainder by 1 is 0;
//! - **bounds checks**: the length of a static slice is a constant; an access with a
//!   constant index below a static slice's length needs no check; within one emitted
//!   block, a check already made (same slice and index, or a constant index not above one
//!   already checked against the same slice) is not made again, nor in a block that one
//!   edge from it alone enters (as a recorded run tells, [`Known::entered_once`]), when
//!   that edge passes the slice and the index, or they are unit invariants: every path
//!   into that block made the check (a stack machine's push after a pop of the same
//!   slot). Every other access gets an explicit [`Backend::bounds_check`] before the
//!   backend's (unchecked) load or store.
//! - **local arrays in memory** ([`Emitter::local_array`]: memory that no other slice and
//!   no call reaches): within a block, a load at a constant index reads the value last
//!   stored there (or the array's initial element), and stores at constant indices wait for the block's end, where the
//!   last one per element is made before a jump or a branch (other blocks read the
//!   memory: with [`Fold::set_live_memory`], only those of elements later code may read)
//!   and none before a return, a trap or a promotion (nothing reads a unit's arrays after
//!   it); an access at an index not known now makes the waiting stores of its array
//!   first;
//! - **constant block parameters**: with [`Fold::set_constant_params`], the parameters
//!   found constant on every path of a recorded run ([`crate::params`]) are read as
//!   constants, and left out of the backend's blocks and of the jumps into them.
//!
//! **Invariant.** A backend's `Load` and `Store` do not check bounds: the layer has checked
//! them, or proved them in range, before. So a backend is only ever driven through
//! `Fold`.
//!
//! The layer is backend-neutral: the Cranelift backend, the stitch tier's stencil emitter
//! and the residual-IR backend of the tests share it, so the residual-IR differential
//! tests check these rewrites against the interpreter.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::ops::{BinaryOp, Const};
use crate::params::{Known, LiveMemory};
use crate::pool::{self, Kept};
use crate::semantics;
use crate::template::{Case, Emitter, TOp};
use crate::types::{Scalar, SrcLoc, Type};

/// A case of a [`Backend::switch`]: value, target block, arguments.
pub type BCase<B> = (u64, <B as Backend>::Block, Vec<<B as Backend>::Value>);

/// What lowers specialized code: the target of the [`Fold`] layer. Same protocol as
/// [`Emitter`] (blocks created with their parameter types and filled one at a time, one
/// terminator each), but values are always in code, and loads and stores are unchecked.
pub trait Backend {
    type Value: Copy + Eq + Hash + std::fmt::Debug + 'static;
    type Block: Copy + Eq + std::fmt::Debug + 'static;

    fn create_block(&mut self, params: &[Type]) -> Self::Block;
    /// The number of block `b` (blocks are numbered densely from 0).
    fn block_index(b: Self::Block) -> usize;
    /// Appends to `out` the parameters of `b`, created with parameter types `types` (the
    /// fold layer keeps the types, so that backends need not).
    fn block_params(&mut self, b: Self::Block, types: &[Type], out: &mut Vec<Self::Value>);
    fn switch_to_block(&mut self, b: Self::Block);
    /// See [`Emitter::note_copy`].
    fn note_copy(&mut self, b: Self::Block, template: u32, context: &[(u8, u64)]) {
        let _ = (b, template, context);
    }
    /// See [`Emitter::notes_copies`].
    fn notes_copies(&self) -> bool {
        false
    }
    /// See [`Emitter::loop_head`] (`reads`: per parameter the backend's block has).
    fn loop_head(&mut self, b: Self::Block, reads: &[bool]) {
        let _ = (b, reads);
    }

    /// A constant in code, in the current block.
    fn constant(&mut self, c: Const) -> Self::Value;
    /// Static slice `id` (a key parameter of the region) of type `ty`.
    fn static_slice(&mut self, id: u32, ty: Type) -> Self::Value;
    /// A dynamic operation on values of the given types (`Load`/`Store` unchecked);
    /// `None` for operations without a result.
    fn op(
        &mut self,
        op: &TOp,
        args: &[Self::Value],
        types: &[Type],
        loc: SrcLoc,
    ) -> Option<Self::Value>;
    /// Whether [`Backend::op`] takes a signed division or remainder by a constant power of
    /// two from 2 to 128 as it is (and makes it without a division instruction); otherwise
    /// the fold layer rewrites it into shifts and adds.
    fn divides_by_powers_of_two(&self) -> bool {
        false
    }
    /// A fresh local array in memory of `len` elements of type `elem`, the first
    /// `elems.len()` of them set to `elems` (the others unset), as a mutable slice of
    /// `len` elements: where an array whose elements the executor keeps as values is
    /// accessed at an index known only at run time, and a local array kept in memory
    /// ([`Emitter::local_array`]).
    fn array_slot(&mut self, elem: Scalar, len: u32, elems: &[Self::Value]) -> Self::Value;
    /// Faults (out of bounds, with the index and the length) unless `index` (of integer
    /// type `ty`) is below the length of `slice`.
    fn bounds_check(&mut self, slice: Self::Value, index: Self::Value, ty: Scalar, loc: SrcLoc);
    /// See [`Emitter::keep`].
    fn keep(&mut self, _v: Self::Value) {}
    /// See [`Emitter::dead`].
    fn dead(&mut self, _v: Self::Value) {}

    fn jump(&mut self, dest: Self::Block, args: &[Self::Value]);
    fn brif(
        &mut self,
        cond: Self::Value,
        then_dest: (Self::Block, &[Self::Value]),
        else_dest: (Self::Block, &[Self::Value]),
    );
    fn switch(
        &mut self,
        arg: Self::Value,
        ty: Scalar,
        cases: &[BCase<Self>],
        default: (Self::Block, &[Self::Value]),
    );
    fn ret(&mut self, value: Option<Self::Value>);
    fn trap(&mut self, loc: SrcLoc);
    /// See [`Emitter::promote`].
    fn promote(&mut self, site: u32, promoted: &[(Self::Value, Scalar)], live: &[Self::Value]);
    /// See [`Emitter::promote_miss`].
    fn promote_miss(&mut self, site: u32, promoted: &[Self::Value]);
}

/// A value as the fold layer knows it.
#[derive(Clone, Copy, Debug)]
pub enum FVal<V> {
    /// Known at stitch time.
    Const(Const),
    /// In code, of this type; `static_len` is the length of a static slice (one of
    /// more than `u32::MAX` elements counts as unknown: values are moved often, and
    /// this keeps them small).
    Dyn {
        v: V,
        ty: Type,
        static_len: Option<u32>,
    },
}

impl<V> FVal<V> {
    fn ty(&self) -> Type {
        match self {
            FVal::Const(c) => Type::Scalar(c.ty()),
            FVal::Dyn { ty, .. } => *ty,
        }
    }
}

/// An index as the check cache keys it: a constant, or a value in code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum IndexKey<V> {
    Const(i128),
    Dyn(V),
}

/// A value of the block being filled as a block that one of its edges enters sees it:
/// that block's parameter `j` (the edge passes the value there), or the value itself (a
/// unit invariant, which every block reads unpassed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen<V> {
    Param(u32),
    Same(V),
}

/// A bounds check made in a block, carried along an edge to a block that edge alone
/// enters (by [`Backend::block_index`]): the slice, and the index checked or the largest
/// constant index checked.
type Carried<V> = (usize, Seen<V>, Carry<V>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carry<V> {
    Index(IndexKey<Seen<V>>),
    UpTo(i128),
}

/// Values of the operands of one operation, kept inline.
type Vals<V> = SmallVec<[V; 4]>;

/// The hasher of the layer's maps (keys are block and value numbers and type lists).
type Hasher = FxBuildHasher;

/// The fold layer over backend `B`.
pub struct Fold<B: Backend> {
    pub backend: B,
    /// Each created block (by [`Backend::block_index`]) and the interned type lists: the
    /// thread's, kept from unit to unit ([`Kept`]).
    t: Kept<TypeTables>,
    /// The list last found for a slice at each address (direct-mapped by address), checked
    /// by comparing before it is used: callers mostly pass the same few slices (the
    /// executors pass a program's own lists), and comparing is cheaper than hashing.
    recent: [(usize, u32); 16],
    /// The layer's buffers, the thread's, kept from unit to unit ([`Kept`]).
    b: Kept<Buffers<B::Value>>,
    /// Constant block parameters read off a recorded run ([`crate::params`]), the blocks
    /// created so far (a block's number in that order is its number in the recording),
    /// and the lists of types kept without constant parameters ([`Fold::kept_list`]).
    known: Option<Known>,
    made: u32,
    /// What later code may read of the local arrays in memory, at each block's end
    /// ([`Fold::set_live_memory`]), and the number (in the order of creation) of the block
    /// being filled.
    live: Option<LiveMemory>,
    current: u32,
    /// The block being filled (by [`Backend::block_index`]).
    filling: usize,
    /// Only tests for zero read the next operation's result ([`Emitter::low_bits_only`]).
    low_bits: bool,
}

/// What the fold layer knows of an element of a local array: the block it learned it in,
/// the value, and whether storing it waits for the block's end.
type Held<V> = (u32, Option<FVal<V>>, bool);

/// The fold layer's buffers and per-block sets.
struct Buffers<V> {
    /// Lengths of the static slices (by key parameter), for `len` and bounds checks.
    static_lens: Vec<Option<u64>>,
    /// The backend's block parameters, and the lowered arguments of the two edges of a
    /// branch.
    raw_params: Vec<V>,
    lowered: [Vec<V>; 2],
    /// An operation's lowered operands and their types ([`Fold::backend_op`]).
    op_vals: Vec<V>,
    op_types: Vec<Type>,
    /// Bounds checks made in the current block: (slice, index) pairs, and per slice the
    /// largest constant index checked.
    checked: HashSet<(V, IndexKey<V>), Hasher>,
    checked_const: HashMap<V, i128, Hasher>,
    /// The checks carried to blocks not yet filled that one edge alone enters, and the
    /// unit invariants ([`Emitter::keep`]).
    carried: Vec<Carried<V>>,
    kept: Vec<V>,
    /// The local arrays in memory of the unit ([`Emitter::local_array`]: memory no other
    /// slice and no call reaches), numbered in the order made (as [`LiveMemory`] numbers
    /// them): the slice, element type and length, and per element what
    /// the current block knows it holds (valid if stamped with `block`) and whether that
    /// is still to be stored; and those stores, in order ([`Fold::flush`]).
    locals: Vec<(V, Scalar, u32)>,
    elems: Vec<Vec<Held<V>>>,
    pending: Vec<(u32, u32)>,
    /// The current block's stamp (the number of blocks switched to).
    block: u32,
}

impl<V> Default for Buffers<V> {
    fn default() -> Self {
        Buffers {
            static_lens: Vec::new(),
            raw_params: Vec::new(),
            lowered: [Vec::new(), Vec::new()],
            op_vals: Vec::new(),
            op_types: Vec::new(),
            checked: HashSet::default(),
            checked_const: HashMap::default(),
            carried: Vec::new(),
            kept: Vec::new(),
            locals: Vec::new(),
            elems: Vec::new(),
            pending: Vec::new(),
            block: 0,
        }
    }
}

impl<V: 'static> pool::Reuse for Buffers<V> {
    /// Empties every buffer; `false` if one grew past [`KEPT_BUFFER`] (not worth keeping).
    fn reset(&mut self) -> bool {
        self.static_lens.clear();
        self.raw_params.clear();
        self.lowered.iter_mut().for_each(Vec::clear);
        self.op_vals.clear();
        self.op_types.clear();
        self.checked.clear();
        self.checked_const.clear();
        self.carried.clear();
        self.kept.clear();
        self.locals.clear();
        self.elems.iter_mut().for_each(Vec::clear);
        self.pending.clear();
        let room = [
            self.static_lens.capacity(),
            self.raw_params.capacity(),
            self.lowered[0].capacity(),
            self.lowered[1].capacity(),
            self.op_vals.capacity(),
            self.op_types.capacity(),
            self.checked.capacity(),
            self.checked_const.capacity(),
            self.carried.capacity(),
            self.kept.capacity(),
            self.locals.capacity(),
            self.elems.iter().map(Vec::capacity).sum(),
            self.pending.capacity(),
        ];
        room.iter().all(|&n| n <= KEPT_BUFFER)
    }
}

/// The largest buffer of [`Buffers`] a thread keeps between units (in elements).
const KEPT_BUFFER: usize = 1 << 12;

thread_local! {
    /// Each thread's [`TypeTables`] and [`Buffers`] (one set per value type), kept from
    /// one fold layer to the next ([`Kept`]).
    static KEPT: pool::Pool = const { std::cell::RefCell::new(Vec::new()) };
}

/// At most this many sets in a thread's [`KEPT`] (the tables and a few value types).
const KEPT_SETS: usize = 8;

/// The thread's value of `T` while a fold layer uses it (a fold layer inside another's
/// lifetime on the same thread gets its own).
fn kept<T: pool::Reuse>() -> Kept<T> {
    Kept::take(&KEPT, KEPT_SETS)
}

/// What the fold layer keeps of blocks and their parameter types. The lists a unit's
/// blocks have are those of its program's blocks, few and the same in every
/// specialization, so the lists stay interned on the thread from unit to unit (interning
/// them anew cost two allocations per list and unit); the block table is emptied per
/// unit.
#[derive(Default)]
struct TypeTables {
    blocks: Vec<BlockInfo>,
    /// The parameter type lists of blocks, each distinct list kept once (copies of one
    /// template block share theirs).
    type_lists: Vec<Vec<Type>>,
    type_index: HashMap<Vec<Type>, u32, Hasher>,
    /// The lists of the types of a list without some of them ([`Fold::kept_list`]), by
    /// list and the bits of those kept.
    kept_index: HashMap<(u32, u128), u32, Hasher>,
}

/// The most type lists a thread keeps interned between units, and the most blocks its
/// block table keeps room for: past them, a unit starts afresh (a thread that
/// specializes many programs, or once a huge unit, holds bounded tables).
const KEPT_TYPE_LISTS: usize = 4096;
const KEPT_BLOCKS: usize = 1 << 16;

impl pool::Reuse for TypeTables {
    /// Empties the block table, and the interned lists past their bound.
    fn reset(&mut self) -> bool {
        self.blocks.clear();
        if self.blocks.capacity() > KEPT_BLOCKS {
            self.blocks = Vec::new();
        }
        if self.type_lists.len() > KEPT_TYPE_LISTS {
            self.type_lists.clear();
            self.type_index.clear();
            self.kept_index.clear();
        }
        true
    }
}

/// What the layer keeps of a created block: its parameter types (an index into
/// `type_lists`), those the backend's block has (without constant parameters), and its
/// number in the order of creation.
#[derive(Clone, Copy)]
struct BlockInfo {
    types: u32,
    backend_types: u32,
    made: u32,
}

impl<B: Backend> Fold<B> {
    /// A fold layer over `backend`; the `k`-th of `static_lens` is the length of static
    /// slice `k`.
    pub fn new(backend: B, static_lens: impl IntoIterator<Item = Option<u64>>) -> Fold<B> {
        let mut b: Kept<Buffers<B::Value>> = kept();
        b.static_lens.extend(static_lens);
        Fold {
            backend,
            t: kept(),
            recent: [(0, u32::MAX); 16],
            b,
            known: None,
            made: 0,
            live: None,
            current: 0,
            filling: usize::MAX,
            low_bits: false,
        }
    }

    /// Reads the block parameters `known` finds constant as those constants, and leaves
    /// them out of the backend's blocks and of the jumps into them. `known` must be read
    /// off the recorded run this layer is then given ([`crate::tape::Tape::shape`],
    /// [`crate::tape::Tape::replay`]); a block whose parameters are not those recorded
    /// gets no constants.
    pub fn set_constant_params(&mut self, known: Known) {
        self.known = Some(known);
    }

    /// What later code may read of the local arrays in memory at each block's end, read
    /// off a recorded run ([`crate::params::Shape::live_memory`]): a store still waiting at
    /// a block's end to an element no later code reads is not made. Sound because the
    /// replay makes the recorded calls: every load of such an element after this block is
    /// preceded, on every path, by a store to it.
    pub fn set_live_memory(&mut self, live: Option<LiveMemory>) {
        self.live = live;
    }

    /// The constant parameters given, if any parameter is constant or dead (else they
    /// change nothing, and are only kept to be taken back).
    fn known(&self) -> Option<&Known> {
        self.known.as_ref().filter(|k| k.any())
    }

    /// The constant parameters [`Fold::set_constant_params`] gave, taken back.
    pub fn take_constant_params(&mut self) -> Option<Known> {
        self.known.take()
    }

    /// The index in `type_lists` of the list `params` (interned if new).
    fn intern(&mut self, params: &[Type]) -> u32 {
        match self.t.type_index.get(params) {
            Some(&k) => k,
            None => {
                let k = self.t.type_lists.len() as u32;
                self.t.type_lists.push(params.to_vec());
                self.t.type_index.insert(params.to_vec(), k);
                k
            }
        }
    }

    /// The list of the types of list `types` that `keep` keeps (interned, and remembered
    /// by the pair for up to 128 types: copies of one block mostly keep the same).
    fn kept_list(&mut self, types: u32, keep: &[bool]) -> u32 {
        let bits = (keep.len() <= 128).then(|| {
            keep.iter()
                .enumerate()
                .fold(0u128, |m, (j, &k)| m | u128::from(k) << j)
        });
        if let Some(&k) = bits.and_then(|m| self.t.kept_index.get(&(types, m))) {
            return k;
        }
        let kept: SmallVec<[Type; 16]> = self.t.type_lists[types as usize]
            .iter()
            .zip(keep)
            .filter(|(_, &k)| k)
            .map(|(t, _)| *t)
            .collect();
        let k = self.intern(&kept);
        if let Some(m) = bits {
            self.t.kept_index.insert((types, m), k);
        }
        k
    }

    /// The constant parameters of block `b` (by backend number), if it has some.
    fn consts_of(&self, b: usize) -> Option<&[Option<Const>]> {
        let known = self.known()?;
        let info = self.t.blocks.get(b)?;
        if info.types == info.backend_types {
            return None;
        }
        known.block(info.made)
    }

    /// The value in code.
    fn lower(&mut self, v: FVal<B::Value>) -> B::Value {
        match v {
            FVal::Const(c) => self.backend.constant(c),
            FVal::Dyn { v, .. } => v,
        }
    }

    fn lower_all(&mut self, vs: &[FVal<B::Value>]) -> Vals<B::Value> {
        // (Pushed one by one: collecting a few values into a small vector cost about a
        // hundred instructions.)
        let mut out = Vals::new();
        for &v in vs {
            let v = self.lower(v);
            out.push(v);
        }
        out
    }

    /// Buffer `k` of [`Fold::lowered`] holding the values of `vs`, the arguments of a jump
    /// to `dest`, in code (without those of `dest`'s constant parameters); give it back
    /// with [`Fold::give_back`].
    fn lower_into(&mut self, k: usize, dest: B::Block, vs: &[FVal<B::Value>]) -> Vec<B::Value> {
        let mut out = std::mem::take(&mut self.b.lowered[k]);
        out.clear();
        match self.consts_of(B::block_index(dest)) {
            None => {
                for &v in vs {
                    let v = self.lower(v);
                    out.push(v);
                }
            }
            Some(cs) => {
                let keep: SmallVec<[bool; 16]> = cs.iter().map(Option::is_none).collect();
                for (&v, keep) in vs.iter().zip(keep) {
                    if keep {
                        let v = self.lower(v);
                        out.push(v);
                    }
                }
            }
        }
        out
    }

    fn give_back(&mut self, k: usize, buf: Vec<B::Value>) {
        self.b.lowered[k] = buf;
    }

    /// A new block whose parameters have the types of list `types`, with its constant and
    /// dead parameters left out of the backend's block.
    fn make_block(&mut self, types: u32) -> B::Block {
        let made = self.made;
        self.made += 1;
        let n = self.t.type_lists[types as usize].len();
        let backend_types = match self.known().and_then(|k| k.block(made)) {
            Some(cs) if cs.len() == n && cs.iter().any(Option::is_some) => {
                let keep: SmallVec<[bool; 16]> = cs.iter().map(Option::is_none).collect();
                self.kept_list(types, &keep)
            }
            _ => types,
        };
        let b = self
            .backend
            .create_block(&self.t.type_lists[backend_types as usize]);
        let i = B::block_index(b);
        if i >= self.t.blocks.len() {
            self.t.blocks.resize(
                i + 1,
                BlockInfo {
                    types: u32::MAX,
                    backend_types: u32::MAX,
                    made: u32::MAX,
                },
            );
        }
        self.t.blocks[i] = BlockInfo {
            types,
            backend_types,
            made,
        };
        b
    }

    /// The backend's operation `op` on `args`, lowered, with their types (through the
    /// layer's buffers: collecting an operation's two or three operands and types into
    /// small vectors cost about 140 instructions).
    fn backend_op(&mut self, op: &TOp, args: &[FVal<B::Value>], loc: SrcLoc) -> Option<B::Value> {
        let (mut vals, mut types) = (
            std::mem::take(&mut self.b.op_vals),
            std::mem::take(&mut self.b.op_types),
        );
        vals.clear();
        types.clear();
        for &a in args {
            types.push(a.ty());
            let v = self.lower(a);
            vals.push(v);
        }
        let v = self.backend.op(op, &vals, &types, loc);
        (self.b.op_vals, self.b.op_types) = (vals, types);
        v
    }

    fn dynamic(
        &mut self,
        op: &TOp,
        args: &[FVal<B::Value>],
        ty: Type,
        loc: SrcLoc,
    ) -> FVal<B::Value> {
        let v = self
            .backend_op(op, args, loc)
            .expect("an operation with a result");
        FVal::Dyn {
            v,
            ty,
            static_len: None,
        }
    }

    /// Strength reduction of `x op k` for an integer constant `k`; `None` if nothing
    /// applies.
    fn reduce(&mut self, op: BinaryOp, x: FVal<B::Value>, k: Const) -> Option<FVal<B::Value>> {
        let Const::Int(t, bits) = k else { return None };
        let w = t.int_bits()? as i64;
        let value = semantics::int_value(k)?;
        let pow2 = (value > 0 && (value as u128).is_power_of_two())
            .then(|| (value as u128).trailing_zeros() as i64);
        let ty = Type::Scalar(t);
        let int = |v: i64| FVal::Const(semantics::int(t, v as u64));
        let loc = SrcLoc::default();
        Some(match (op, value, pow2) {
            (
                BinaryOp::Add
                | BinaryOp::Sub
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::Shl
                | BinaryOp::Shr,
                0,
                _,
            ) => x,
            (BinaryOp::Mul | BinaryOp::And, 0, _) => int(0),
            (BinaryOp::Mul | BinaryOp::Div, 1, _) => x,
            (BinaryOp::Mul, _, Some(s)) => {
                self.dynamic(&TOp::Binary(BinaryOp::Shl), &[x, int(s)], ty, loc)
            }
            (BinaryOp::Div, _, Some(s)) if !t.is_signed() => {
                self.dynamic(&TOp::Binary(BinaryOp::Shr), &[x, int(s)], ty, loc)
            }
            (BinaryOp::Rem, _, Some(_)) if !t.is_signed() => {
                let mask = FVal::Const(semantics::int(t, bits - 1));
                self.dynamic(&TOp::Binary(BinaryOp::And), &[x, mask], ty, loc)
            }
            (BinaryOp::Rem, 1, _) => int(0),
            (BinaryOp::Div | BinaryOp::Rem, 2..=128, Some(s))
                if t.is_signed() && s < w - 1 && self.backend.divides_by_powers_of_two() =>
            {
                self.dynamic(&TOp::Binary(op), &[x, FVal::Const(k)], ty, loc)
            }
            (BinaryOp::Div | BinaryOp::Rem, _, Some(s)) if t.is_signed() && s < w - 1 => {
                // Round toward zero: add 2^s - 1 to negative dividends before shifting.
                // sign = x >> (w-1) is 0 or -1; as unsigned, shifted right by w - s, it is
                // 0 or 2^s - 1.
                let u = unsigned_of(t);
                let uty = Type::Scalar(u);
                let shr = TOp::Binary(BinaryOp::Shr);
                let sign = self.dynamic(&shr, &[x, int(w - 1)], ty, loc);
                let usign = self.dynamic(&TOp::Cast(u), &[sign], uty, loc);
                let ubias = self.dynamic(
                    &shr,
                    &[usign, FVal::Const(semantics::int(u, (w - s) as u64))],
                    uty,
                    loc,
                );
                let bias = self.dynamic(&TOp::Cast(t), &[ubias], ty, loc);
                let sum = self.dynamic(&TOp::Binary(BinaryOp::Add), &[x, bias], ty, loc);
                if op == BinaryOp::Div {
                    self.dynamic(&shr, &[sum, int(s)], ty, loc)
                } else {
                    // x - (x / 2^s) * 2^s (shifts: a mask of high bits is a wide constant).
                    let q = self.dynamic(&shr, &[sum, int(s)], ty, loc);
                    let shl = TOp::Binary(BinaryOp::Shl);
                    let multiple = self.dynamic(&shl, &[q, int(s)], ty, loc);
                    self.dynamic(&TOp::Binary(BinaryOp::Sub), &[x, multiple], ty, loc)
                }
            }
            _ => return None,
        })
    }

    fn binary(
        &mut self,
        op: BinaryOp,
        a: FVal<B::Value>,
        b: FVal<B::Value>,
        loc: SrcLoc,
    ) -> FVal<B::Value> {
        if let (FVal::Const(x), FVal::Const(y)) = (a, b) {
            if let Ok(r) = semantics::binary(op, x, y) {
                return FVal::Const(r);
            }
        }
        if a.ty().is_int() {
            if let FVal::Const(k) = b {
                if let Some(r) = self.reduce(op, a, k) {
                    return r;
                }
            }
            if let FVal::Const(k) = a {
                let commutes = matches!(
                    op,
                    BinaryOp::Add | BinaryOp::Mul | BinaryOp::And | BinaryOp::Or | BinaryOp::Xor
                );
                if commutes {
                    if let Some(r) = self.reduce(op, b, k) {
                        return r;
                    }
                }
            }
        }
        let ty = a.ty();
        self.dynamic(&TOp::Binary(op), &[a, b], ty, loc)
    }

    /// If `s` is a local array in memory ([`Buffers::locals`]): its number, and `i` if a
    /// constant index in bounds (`None` for any other index).
    fn local_index(&self, s: FVal<B::Value>, i: FVal<B::Value>) -> Option<(u32, Option<u32>)> {
        let FVal::Dyn { v: s, .. } = s else {
            return None;
        };
        let n = self.b.locals.iter().position(|l| l.0 == s)?;
        let len = self.b.locals[n].2;
        let k = match i {
            FVal::Const(c) => semantics::int_value(c)
                .and_then(|k| u32::try_from(k).ok())
                .filter(|&k| k < len),
            FVal::Dyn { .. } => None,
        };
        Some((n as u32, k))
    }

    /// What the current block knows element `k` of local array `n` holds.
    fn held(&self, n: u32, k: u32) -> Option<FVal<B::Value>> {
        match self.b.elems[n as usize].get(k as usize) {
            Some(&(at, v, _)) if at == self.b.block => v,
            _ => None,
        }
    }

    /// Element `k` of local array `n` holds `v` in the current block, to be stored at its
    /// end ([`Fold::flush`]).
    fn store_later(&mut self, n: u32, k: u32, v: FVal<B::Value>) {
        let b = &mut *self.b;
        let e = &mut b.elems[n as usize][k as usize];
        if !(e.0 == b.block && e.2) {
            b.pending.push((n, k));
        }
        *e = (b.block, Some(v), true);
    }

    /// Makes the stores still pending in the current block (to local array `only`, or to
    /// all): before a jump or a branch (other blocks read the memory), and before an
    /// access at an index not known now. A block that leaves the unit (a return, a trap, a
    /// promotion) drops them: nothing reads a unit's local arrays after it.
    #[inline]
    fn flush(&mut self, only: Option<u32>) {
        if !self.b.pending.is_empty() {
            self.flush_pending(only);
        }
    }

    #[inline(never)]
    fn flush_pending(&mut self, only: Option<u32>) {
        let mut pending = std::mem::take(&mut self.b.pending);
        let mut kept = 0;
        for j in 0..pending.len() {
            let (n, k) = pending[j];
            if only.is_some_and(|o| o != n) {
                pending[kept] = (n, k);
                kept += 1;
                continue;
            }
            let (s, elem, len) = self.b.locals[n as usize];
            let e = &mut self.b.elems[n as usize][k as usize];
            let (Some(v), true) = (e.1, std::mem::replace(&mut e.2, false)) else {
                continue;
            };
            // (At the block's end, a store no later code reads is left out.)
            let dead = |live: &LiveMemory| !live.live_out(self.current, n, k);
            if only.is_none() && self.live.as_ref().is_some_and(dead) {
                continue;
            }
            let slice = FVal::Dyn {
                v: s,
                ty: Type::Slice {
                    elem,
                    mutable: true,
                },
                static_len: Some(len),
            };
            let i = FVal::Const(Const::Int(Scalar::I64, u64::from(k)));
            self.backend_op(&TOp::Store, &[slice, i, v], SrcLoc::default());
        }
        pending.truncate(kept);
        self.b.pending = pending;
    }

    /// Whether block `b` (by [`Backend::block_index`]) is entered by one edge of the unit
    /// and by nothing else, as the recording found ([`Known::entered_once`]).
    fn entered_once(&self, b: usize) -> bool {
        match (&self.known, self.t.blocks.get(b)) {
            (Some(known), Some(info)) => known.entered_once(info.made),
            _ => false,
        }
    }

    /// Carries the bounds checks made in the current block along its edge to `dest`
    /// (passing it `args`, lowered), if that edge alone enters `dest`: every path into
    /// `dest` made them. A check carries when its slice and its index (unless a constant)
    /// are passed to `dest` or are unit invariants.
    fn carry(&mut self, dest: B::Block, args: &[B::Value]) {
        let b = B::block_index(dest);
        if self.b.checked.is_empty() && self.b.checked_const.is_empty() || !self.entered_once(b) {
            return;
        }
        let Buffers {
            checked,
            checked_const,
            carried,
            kept,
            ..
        } = &mut *self.b;
        let seen = |v: B::Value| match args.iter().position(|&a| a == v) {
            Some(j) => Some(Seen::Param(j as u32)),
            None => kept.contains(&v).then_some(Seen::Same(v)),
        };
        for &(s, key) in checked.iter() {
            let key = match key {
                IndexKey::Const(x) => Some(IndexKey::Const(x)),
                IndexKey::Dyn(i) => seen(i).map(IndexKey::Dyn),
            };
            if let (Some(s), Some(key)) = (seen(s), key) {
                carried.push((b, s, Carry::Index(key)));
            }
        }
        for (&s, &x) in checked_const.iter() {
            if let Some(s) = seen(s) {
                carried.push((b, s, Carry::UpTo(x)));
            }
        }
    }

    /// Takes in the checks carried to the block being filled, given its parameters (those
    /// that need none, with `None`, which leaves the others for later).
    fn arrive(&mut self, params: Option<&[B::Value]>) {
        let b = self.filling;
        let Buffers {
            checked,
            checked_const,
            carried,
            ..
        } = &mut *self.b;
        let value = |s: Seen<B::Value>| match s {
            Seen::Same(v) => Some(v),
            Seen::Param(j) => params.and_then(|p| p.get(j as usize).copied()),
        };
        carried.retain(|&(to, s, carry)| {
            if to != b {
                return true;
            }
            let Some(s) = value(s) else {
                return params.is_none();
            };
            match carry {
                Carry::Index(IndexKey::Const(x)) => {
                    checked.insert((s, IndexKey::Const(x)));
                }
                Carry::Index(IndexKey::Dyn(i)) => match value(i) {
                    Some(i) => {
                        checked.insert((s, IndexKey::Dyn(i)));
                    }
                    None => return params.is_none(),
                },
                Carry::UpTo(x) => {
                    let k = checked_const.entry(s).or_insert(x);
                    *k = (*k).max(x);
                }
            }
            false
        });
    }

    /// Checks `s[i]` unless it is known to be in bounds.
    fn check(&mut self, s: FVal<B::Value>, i: FVal<B::Value>, loc: SrcLoc) {
        let FVal::Dyn {
            v: sv, static_len, ..
        } = s
        else {
            unreachable!("a slice is never a constant")
        };
        let ci = match i {
            FVal::Const(c) => semantics::int_value(c),
            FVal::Dyn { .. } => None,
        };
        if let (Some(x), Some(n)) = (ci, static_len) {
            if x >= 0 && x < i128::from(n) {
                return;
            }
        }
        if let Some(x) = ci {
            if x >= 0 && self.b.checked_const.get(&sv).is_some_and(|&k| x <= k) {
                return;
            }
        }
        let key = match (ci, i) {
            (Some(x), _) => IndexKey::Const(x),
            (None, FVal::Dyn { v, .. }) => IndexKey::Dyn(v),
            (None, FVal::Const(_)) => unreachable!("a constant index is an integer"),
        };
        if self.b.checked.contains(&(sv, key)) {
            return;
        }
        let ty = i.ty().scalar().expect("an integer index");
        let iv = self.lower(i);
        self.backend.bounds_check(sv, iv, ty, loc);
        self.b.checked.insert((sv, key));
        if let Some(x) = ci.filter(|&x| x >= 0) {
            let k = self.b.checked_const.entry(sv).or_insert(x);
            *k = (*k).max(x);
        }
    }

    /// A fresh slot of the backend for `len` elements, the first set to `elems`, as a
    /// slice of static length (so constant indices below it need no check).
    fn array_slot(&mut self, elem: Scalar, len: u32, elems: &[FVal<B::Value>]) -> FVal<B::Value> {
        let vals = self.lower_all(elems);
        let v = self.backend.array_slot(elem, len, &vals);
        FVal::Dyn {
            v,
            ty: Type::Slice {
                elem,
                mutable: true,
            },
            static_len: Some(len),
        }
    }
}

/// A constant index below `len`, as a position.
fn const_index<V>(index: FVal<V>, len: usize) -> Option<usize> {
    match index {
        FVal::Const(c) => index_in(c, len),
        FVal::Dyn { .. } => None,
    }
}

/// Constant `c` as an index below `len`, if it is one: where the layer keeps a local
/// array's element as a value instead of going through memory.
pub fn index_in(c: Const, len: usize) -> Option<usize> {
    semantics::int_value(c)
        .and_then(|x| usize::try_from(x).ok())
        .filter(|&k| k < len)
}

/// The unsigned type of an integer type's width.
pub(crate) fn unsigned_of(t: Scalar) -> Scalar {
    match t.int_bits() {
        Some(8) => Scalar::U8,
        Some(16) => Scalar::U16,
        Some(32) => Scalar::U32,
        _ => Scalar::U64,
    }
}

impl<B: Backend> Emitter for Fold<B> {
    type Value = FVal<B::Value>;
    type Block = B::Block;

    fn create_block(&mut self, params: &[Type]) -> B::Block {
        let addr = params.as_ptr() as usize;
        let slot = (addr >> 3) % self.recent.len();
        let types = match self.recent[slot] {
            (a, k) if a == addr && self.t.type_lists[k as usize] == params => k,
            _ => {
                let k = self.intern(params);
                self.recent[slot] = (addr, k);
                k
            }
        };
        self.make_block(types)
    }

    fn create_block_like(&mut self, like: B::Block, params: &[Type]) -> B::Block {
        match self.t.blocks.get(B::block_index(like)) {
            Some(info)
                if self
                    .t
                    .type_lists
                    .get(info.types as usize)
                    .is_some_and(|l| l.len() == params.len()) =>
            {
                debug_assert_eq!(&self.t.type_lists[info.types as usize][..], params);
                self.make_block(info.types)
            }
            _ => self.create_block(params),
        }
    }

    fn note_copy(&mut self, b: B::Block, template: u32, context: &[(u8, u64)]) {
        self.backend.note_copy(b, template, context);
    }

    fn notes_copies(&self) -> bool {
        self.backend.notes_copies()
    }

    fn loop_head(&mut self, b: B::Block, reads: &[bool]) {
        // (The backend's block has the parameters not constant: see `make_block`.)
        match self.consts_of(B::block_index(b)) {
            Some(cs) if cs.len() == reads.len() => {
                let kept: SmallVec<[bool; 16]> = (cs.iter().zip(reads))
                    .filter(|(c, _)| c.is_none())
                    .map(|(_, &r)| r)
                    .collect();
                self.backend.loop_head(b, &kept);
            }
            _ => self.backend.loop_head(b, reads),
        }
    }

    fn block_params(&mut self, b: B::Block, out: &mut Vec<Self::Value>) {
        let i = B::block_index(b);
        let info = self.t.blocks.get(i).copied();
        let list = |k: u32| {
            self.t
                .type_lists
                .get(k as usize)
                .map_or(&[][..], Vec::as_slice)
        };
        let (types, kept) = info.map_or((&[][..], &[][..]), |info| {
            (list(info.types), list(info.backend_types))
        });
        self.b.raw_params.clear();
        self.backend.block_params(b, kept, &mut self.b.raw_params);
        let dynamic = |(&v, &ty): (&B::Value, &Type)| FVal::Dyn {
            v,
            ty,
            static_len: None,
        };
        match self.consts_of(i) {
            None => out.extend(self.b.raw_params.iter().zip(types).map(dynamic)),
            Some(cs) => {
                let mut raw = self.b.raw_params.iter();
                out.extend(types.iter().zip(cs).map(|(ty, c)| match c {
                    Some(c) => FVal::Const(*c),
                    None => dynamic((raw.next().expect("a kept parameter"), ty)),
                }));
            }
        }
        if i == self.filling && !self.b.carried.is_empty() {
            let params = std::mem::take(&mut self.b.raw_params);
            self.arrive(Some(&params));
            self.b.raw_params = params;
        }
    }

    fn switch_to_block(&mut self, b: B::Block) {
        self.b.checked.clear();
        self.b.checked_const.clear();
        self.filling = B::block_index(b);
        if !self.b.carried.is_empty() {
            self.arrive(None);
        }
        // (The last block ended in a terminator, which stored what was pending.)
        debug_assert!(self.b.pending.is_empty(), "stores left pending");
        self.b.pending.clear();
        self.b.block += 1;
        if self.live.is_some() {
            self.current = self
                .t
                .blocks
                .get(B::block_index(b))
                .map_or(u32::MAX, |i| i.made);
        }
        self.backend.switch_to_block(b);
    }

    fn constant(&mut self, c: Const) -> Self::Value {
        FVal::Const(c)
    }

    fn static_slice(&mut self, id: u32, ty: Type) -> Self::Value {
        let v = self.backend.static_slice(id, ty);
        FVal::Dyn {
            v,
            ty,
            static_len: (self.b.static_lens.get(id as usize).copied().flatten())
                .and_then(|n| u32::try_from(n).ok()),
        }
    }

    fn op(&mut self, op: &TOp, args: &[Self::Value], loc: SrcLoc) -> Option<Self::Value> {
        if std::mem::take(&mut self.low_bits) {
            // Only tests for zero read this remainder: by `2^s`, the low `s` bits will do.
            if let (TOp::Binary(BinaryOp::Rem), &[x, FVal::Const(d)]) = (op, args) {
                let t = x.ty().scalar().filter(|t| t.is_int());
                if let (Some(t), Some(d)) = (t, semantics::int_value(d)) {
                    if d > 0 && d.count_ones() == 1 {
                        let mask = FVal::Const(Const::Int(t, (d - 1) as u64));
                        return self.op(&TOp::Binary(BinaryOp::And), &[x, mask], loc);
                    }
                }
            }
        }
        let c = |k: usize| match args.get(k) {
            Some(FVal::Const(c)) => Some(*c),
            _ => None,
        };
        Some(match op {
            TOp::Unary(o) => {
                if let Some(Ok(r)) = c(0).map(|a| semantics::unary(*o, a)) {
                    return Some(FVal::Const(r));
                }
                let ty = args[0].ty();
                self.dynamic(op, args, ty, loc)
            }
            TOp::Binary(o) => self.binary(*o, args[0], args[1], loc),
            TOp::Cmp(o) => {
                if let (Some(a), Some(b)) = (c(0), c(1)) {
                    if let Ok(r) = semantics::cmp(*o, a, b) {
                        return Some(FVal::Const(Const::Bool(r)));
                    }
                }
                self.dynamic(op, args, Type::BOOL, loc)
            }
            TOp::Select => match args[0] {
                FVal::Const(Const::Bool(c)) => args[if c { 1 } else { 2 }],
                _ => {
                    let ty = args[1].ty();
                    let mut r = self.dynamic(op, args, ty, loc);
                    // Both arms of one static slice keep its length.
                    if let (
                        FVal::Dyn {
                            static_len: Some(a),
                            ..
                        },
                        FVal::Dyn {
                            static_len: Some(b),
                            ..
                        },
                        FVal::Dyn { static_len, .. },
                    ) = (args[1], args[2], &mut r)
                    {
                        if a == b {
                            *static_len = Some(a);
                        }
                    }
                    r
                }
            },
            TOp::Cast(to) => match c(0) {
                Some(a) => FVal::Const(semantics::cast(*to, a)),
                None if args[0].ty() == Type::Scalar(*to) => args[0],
                None => self.dynamic(op, args, Type::Scalar(*to), loc),
            },
            TOp::Len => match args[0] {
                FVal::Dyn {
                    static_len: Some(n),
                    ..
                } => FVal::Const(Const::Int(Scalar::I64, u64::from(n))),
                _ => self.dynamic(op, args, Type::I64, loc),
            },
            TOp::Load => {
                match self.local_index(args[0], args[1]) {
                    Some((n, Some(k))) => {
                        if let Some(v) = self.held(n, k) {
                            return Some(v);
                        }
                    }
                    Some((n, None)) => self.flush(Some(n)),
                    None => {}
                }
                self.check(args[0], args[1], loc);
                let elem = args[0].ty().elem().expect("a slice");
                self.dynamic(op, args, Type::Scalar(elem), loc)
            }
            TOp::Store => {
                match self.local_index(args[0], args[1]) {
                    // A store at a constant index of a local array waits for the end of the
                    // block (a later one there replaces it).
                    Some((n, Some(k))) => {
                        self.store_later(n, k, args[2]);
                        return None;
                    }
                    // At an index not known now, after the stores waiting: what it holds
                    // anywhere is no longer known.
                    Some((n, None)) => {
                        self.flush(Some(n));
                        self.b.elems[n as usize].iter_mut().for_each(|e| e.1 = None);
                    }
                    None => {}
                }
                self.check(args[0], args[1], loc);
                self.backend_op(op, args, loc);
                return None;
            }
            TOp::Call { ret, .. } => {
                let v = self.backend_op(op, args, loc)?;
                FVal::Dyn {
                    v,
                    ty: ret.expect("a call with a result"),
                    static_len: None,
                }
            }
        })
    }

    fn array_load(
        &mut self,
        elem: Scalar,
        elems: &[Self::Value],
        index: Self::Value,
        loc: SrcLoc,
    ) -> Self::Value {
        if let Some(k) = const_index(index, elems.len()) {
            return elems[k];
        }
        let slot = self.array_slot(elem, elems.len() as u32, elems);
        self.op(&TOp::Load, &[slot, index], loc)
            .expect("a load has a result")
    }

    fn array_store(
        &mut self,
        elem: Scalar,
        elems: &mut [Self::Value],
        index: Self::Value,
        value: Self::Value,
        loc: SrcLoc,
    ) {
        if let Some(k) = const_index(index, elems.len()) {
            elems[k] = value;
            return;
        }
        let slot = self.array_slot(elem, elems.len() as u32, elems);
        self.op(&TOp::Store, &[slot, index, value], loc);
        for (k, e) in elems.iter_mut().enumerate() {
            let i = FVal::Const(Const::Int(Scalar::I64, k as u64));
            *e = self
                .op(&TOp::Load, &[slot, i], loc)
                .expect("a load has a result");
        }
    }

    fn local_array(&mut self, elem: Scalar, len: u32, init: &[Self::Value]) -> Self::Value {
        let a = self.array_slot(elem, len, init);
        let FVal::Dyn { v, .. } = a else {
            unreachable!("a slot is a value in code")
        };
        let n = self.b.locals.len();
        self.b.locals.push((v, elem, len));
        if self.b.elems.len() <= n {
            self.b.elems.resize_with(n + 1, Vec::new);
        }
        let block = self.b.block;
        let known = &mut self.b.elems[n];
        known.clear();
        known.extend(init.iter().map(|&e| (block, Some(e), false)));
        known.resize(len as usize, (0, None, false));
        a
    }

    fn keep(&mut self, v: Self::Value) {
        // (A constant is made again where it is read.)
        if let FVal::Dyn { v, .. } = v {
            self.b.kept.push(v);
            self.backend.keep(v);
        }
    }

    fn dead(&mut self, v: Self::Value) {
        if let FVal::Dyn { v, .. } = v {
            self.backend.dead(v);
        }
    }

    fn low_bits_only(&mut self) {
        self.low_bits = true;
    }

    fn jump(&mut self, dest: B::Block, args: &[Self::Value]) {
        self.flush(None);
        let a = self.lower_into(0, dest, args);
        self.carry(dest, &a);
        self.backend.jump(dest, &a);
        self.give_back(0, a);
    }

    fn brif(
        &mut self,
        cond: Self::Value,
        then_dest: (B::Block, &[Self::Value]),
        else_dest: (B::Block, &[Self::Value]),
    ) {
        if let FVal::Const(Const::Bool(c)) = cond {
            let (b, args) = if c { then_dest } else { else_dest };
            return self.jump(b, args);
        }
        self.flush(None);
        let c = self.lower(cond);
        let ta = self.lower_into(0, then_dest.0, then_dest.1);
        let ea = self.lower_into(1, else_dest.0, else_dest.1);
        self.carry(then_dest.0, &ta);
        self.carry(else_dest.0, &ea);
        self.backend.brif(c, (then_dest.0, &ta), (else_dest.0, &ea));
        self.give_back(0, ta);
        self.give_back(1, ea);
    }

    fn switch(
        &mut self,
        arg: Self::Value,
        cases: &[Case<Self>],
        default: (B::Block, &[Self::Value]),
    ) {
        if let FVal::Const(Const::Int(_, k)) = arg {
            return match cases.iter().find(|(v, _, _)| *v == k) {
                Some((_, b, args)) => self.jump(*b, args),
                None => self.jump(default.0, default.1),
            };
        }
        self.flush(None);
        let ty = arg.ty().scalar().expect("a scalar");
        let a = self.lower(arg);
        let cs: Vec<BCase<B>> = cases
            .iter()
            .map(|(k, b, args)| (*k, *b, self.lower_into(0, *b, args)))
            .collect();
        let d = self.lower_into(1, default.0, default.1);
        for (_, b, args) in &cs {
            self.carry(*b, args);
        }
        self.carry(default.0, &d);
        self.backend.switch(a, ty, &cs, (default.0, &d));
        self.give_back(1, d);
    }

    fn ret(&mut self, value: Option<Self::Value>) {
        self.b.pending.clear();
        let v = value.map(|v| self.lower(v));
        self.backend.ret(v);
    }

    fn trap(&mut self, loc: SrcLoc) {
        self.b.pending.clear();
        self.backend.trap(loc);
    }

    fn promote(&mut self, site: u32, promoted: &[Self::Value], live: &[Self::Value]) {
        let p: Vals<(B::Value, Scalar)> = promoted
            .iter()
            .map(|&v| {
                let s = v.ty().scalar().expect("promoted values are scalars");
                (self.lower(v), s)
            })
            .collect();
        let l = self.lower_all(live);
        self.b.pending.clear();
        self.backend.promote(site, &p, &l);
    }

    fn promote_miss(&mut self, site: u32, promoted: &[Self::Value]) {
        self.b.pending.clear();
        let p = self.lower_all(promoted);
        self.backend.promote_miss(site, &p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer's buffers go back to the thread emptied, with their room, and the next
    /// layer with the same value type gets them; a set that grew too large is not kept.
    #[test]
    fn buffers_come_back_empty_and_a_large_set_is_dropped() {
        // (A value type of its own: no other test on this thread shares the set.)
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        struct V(u8);
        let mut b = kept::<Buffers<V>>();
        b.raw_params.extend([V(1), V(2)]);
        b.lowered[1].push(V(3));
        b.op_types.push(Type::I64);
        b.checked_const.insert(V(4), 7);
        drop(b);
        let mut b = kept::<Buffers<V>>();
        assert!(b.raw_params.is_empty() && b.lowered[1].is_empty() && b.op_types.is_empty());
        assert!(b.checked_const.is_empty());
        assert!(b.raw_params.capacity() >= 2, "the set was kept");
        b.op_vals.reserve(KEPT_BUFFER + 1);
        drop(b);
        let b = kept::<Buffers<V>>();
        assert_eq!(b.raw_params.capacity(), 0, "a new set");
    }

    /// The type tables stay with the thread from one fold layer to the next, up to their
    /// bounds; a layer made while another holds them gets tables of its own.
    #[test]
    fn type_tables_are_kept_per_thread_within_bounds() {
        let lists = |n: usize| {
            let mut t = kept::<TypeTables>();
            t.type_lists.clear();
            t.type_index.clear();
            for k in 0..n {
                let list = vec![Type::I64; k % 7];
                t.type_index.insert(list.clone(), k as u32);
                t.type_lists.push(list);
            }
            t.blocks.push(BlockInfo {
                types: 0,
                backend_types: 0,
                made: 0,
            });
        };
        lists(3);
        let t = kept::<TypeTables>();
        assert_eq!(t.type_lists.len(), 3, "kept");
        assert!(t.blocks.is_empty(), "the blocks are the unit's");
        // Nested: the inner layer's tables are fresh, the outer's come back.
        let inner = kept::<TypeTables>();
        assert!(inner.type_lists.is_empty());
        drop(inner);
        drop(t);
        assert_eq!(kept::<TypeTables>().type_lists.len(), 3);
        lists(KEPT_TYPE_LISTS + 1);
        assert!(
            kept::<TypeTables>().type_lists.is_empty(),
            "past the bound: afresh"
        );
    }
}

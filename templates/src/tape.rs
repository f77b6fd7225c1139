//! A tape: an [`Emitter`] that records what an executor asks for, values and blocks as
//! numbers, to replay it into any emitter later, as often as needed, without running the
//! executor again.
//!
//! An executor never looks into the values an emitter gives it: it keeps them, passes them
//! back, and decides only on static values. So the calls it makes are the same whatever
//! the emitter, and a recorded run replayed into an emitter is that emitter's run: value
//! `k` stands for the `k`th value the emitter made, block `k` for the `k`th block. The
//! stitch tier records a unit once, reads its constant block parameters off the recording
//! ([`Tape::shape`], [`crate::params`]), then replays it into the fold layer over the
//! stencil emitter with them. Having the whole unit, the replay also merges each block
//! that only the jump right before it enters into the jumping block ([`Tape::replay`]),
//! which a stitcher, seeing a block before the edges that enter it later, cannot do.
//! The recording also knows which blocks head loops (an edge recorded into a block
//! already filled) and which of their parameters each loop reads (`LoopReads`), and the
//! replay says so before the block is made ([`Emitter::loop_head`]): the stencil emitter
//! keeps the values such a loop reads in registers. And it knows, for each operation's
//! result, the operation that reads it last (`LastReads`), and says so after replaying
//! it ([`Emitter::dead`]): the stencil emitter then puts the next result in its register
//! rather than in one whose value later code still reads.
//! Blocks recorded with one list of parameter types (the copies of one template block)
//! are replayed each like the last made with it ([`Emitter::create_block_like`]), so that
//! the replaying emitter need not compare the list again.
//!
//! One call needs care: [`Emitter::array_store`] updates the executor's copy of a local
//! array's elements in place, and which element changes is the replaying emitter's
//! business (the fold layer keeps an element as a value when the index is a constant). So
//! the tape gives every element a new number after a store, and a replay binds each to
//! what its emitter left there.

use crate::fold::index_in;
use crate::ops::{BinaryOp, CmpOp, Const};
use crate::params::{Known, Shape, Tag};
use crate::pool;
use crate::template::{Case, Emitter, TOp};
use crate::types::{Scalar, SrcLoc, Type};

/// A run of numbers in [`Tape::nums`].
type Run = (u32, u32);

/// One recorded call.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    CreateBlock(Run),
    BlockParams(u32),
    SwitchTo(u32),
    Constant(Const),
    StaticSlice(u32, Type),
    Op {
        op: TOp,
        args: Run,
        loc: SrcLoc,
        result: bool,
    },
    ArrayLoad {
        elem: Scalar,
        elems: Run,
        index: u32,
        loc: SrcLoc,
    },
    ArrayStore {
        elem: Scalar,
        elems: Run,
        index: u32,
        value: u32,
        loc: SrcLoc,
    },
    LocalArray(Scalar, u32, Run),
    Keep(u32),
    Jump(u32, Run),
    Brif(u32, (u32, Run), (u32, Run)),
    /// Argument, the run of cases in [`Tape::cases`], default.
    Switch(u32, Run, (u32, Run)),
    Ret(Option<u32>),
    Trap(SrcLoc),
    Promote(u32, Run, Run),
    PromoteMiss(u32, Run),
}

/// A recorded run of an executor.
#[derive(Default)]
pub struct Tape {
    calls: Vec<Call>,
    /// Value and block numbers the calls refer to.
    nums: Vec<u32>,
    types: Vec<Type>,
    cases: Vec<(u64, u32, Run)>,
    /// Per block, its run of `types` (its parameter types, and their number), the number
    /// of edges recorded into it, and whether the recording stitched it right after a jump
    /// to it with as many arguments (the calls `Jump(b)`, `SwitchTo(b)`, `BlockParams(b)`
    /// in a row).
    runs: Vec<Run>,
    ins: Vec<u32>,
    follows: Vec<bool>,
    /// Per block, [`FILLED`] once the recording switched to it, and [`HEAD`] once an edge
    /// recorded after that entered it (it heads a loop: see [`Emitter::loop_head`]).
    marks: Vec<u8>,
    values: u32,
    /// The run of `types` last recorded for a parameter list at an address (executors pass
    /// a program's own lists): copies of one block share their list, so a replay passes
    /// one slice for all of them, which emitters cache by address.
    lists: Vec<(usize, Run)>,
    /// Local arrays in memory made ([`Emitter::local_array`]).
    local_arrays: u32,
    /// Per block, the call that first switched to it and the number of values made
    /// before it (`u32::MAX` until then), and the last call that jumped back into it
    /// (an edge into it recorded after that switch). For [`LoopReads`].
    fills: Vec<(u32, u32)>,
    backs: Vec<u32>,
    /// The remainders recorded, and those whose results only comparisons with zero read,
    /// by call, in order ([`Tape::note_low_bits`], with its working vectors).
    rems: u32,
    low_bits: Vec<u32>,
    low: LowBits,
}

/// The working vectors of [`Tape::note_low_bits`]: per value its root (a merged block's
/// parameters are the jump's arguments), per root the remainder call that made it
/// (`u32::MAX` if none), whether it is zero and whether anything but a test for zero
/// reads it; per recorded block, its number among those a replay makes (`u32::MAX` if
/// merged).
#[derive(Default)]
struct LowBits {
    root: Vec<u32>,
    roots: Vec<(u32, bool, bool)>,
    replayed: Vec<u32>,
}

impl LowBits {
    /// A new value and root: made by remainder call `rem` (or none), zero or not.
    fn new_value(&mut self, rem: u32, zero: bool) {
        self.root.push(self.roots.len() as u32);
        self.roots.push((rem, zero, false));
    }

    /// The root of value `v`.
    fn of(&self, v: u32) -> Option<&(u32, bool, bool)> {
        self.roots.get(*self.root.get(v as usize)? as usize)
    }

    /// Something other than a test for zero reads `vs`.
    fn read(&mut self, vs: &[u32]) {
        for &v in vs {
            if let Some(&r) = self.root.get(v as usize) {
                if let Some(root) = self.roots.get_mut(r as usize) {
                    root.2 = true;
                }
            }
        }
    }
}

/// The working vectors of a replay into emitters of one type (values, blocks, and the
/// arguments of a call), kept per thread for the next replay: a short unit's replay
/// otherwise allocated four vectors and grew them.
struct Buffers<V, B> {
    vals: Vec<V>,
    blocks: Vec<Option<B>>,
    buf: Vec<V>,
    buf2: Vec<V>,
    loops: LoopReads,
    reads: LastReads,
}

thread_local! {
    static BUFFERS: pool::Pool = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most buffer sets a thread keeps (one per emitter type in use, in practice), and
/// the most elements a kept set may have room for.
const BUFFER_SETS: usize = 4;
const BUFFER_ROOM: usize = 1 << 16;

impl<V: 'static, B: 'static> Buffers<V, B> {
    /// This thread's set for these types, emptied, or a new one. (A replay inside another
    /// on the same thread gets a new one.)
    fn take() -> Box<Buffers<V, B>> {
        let mut b = pool::take::<Buffers<V, B>>(&BUFFERS).unwrap_or_else(|| {
            Box::new(Buffers {
                vals: Vec::new(),
                blocks: Vec::new(),
                buf: Vec::new(),
                buf2: Vec::new(),
                loops: LoopReads::default(),
                reads: LastReads::default(),
            })
        });
        b.vals.clear();
        b.blocks.clear();
        b
    }

    /// Keeps the set for the next replay on this thread, unless it grew too large.
    fn give_back(self: Box<Self>) {
        let room = self.vals.capacity()
            + self.blocks.capacity()
            + self.buf.capacity()
            + self.buf2.capacity()
            + self.loops.room()
            + self.reads.room();
        if room > BUFFER_ROOM {
            return;
        }
        pool::give(&BUFFERS, self, BUFFER_SETS);
    }
}

/// The call after which nothing reads each operation's result, found on a recording for
/// [`Emitter::dead`]: per value the recording made, its root (the value it is: a merged
/// block's parameter is the jump's argument), and per root the last call that reads it,
/// or [`LastReads::NEVER`] for a value that is not an operation's result (a parameter,
/// a constant, an array's element after a store) or that later blocks read unpassed (a
/// kept value). A value whose last read is a terminator is passed on, and gets no hint.
#[derive(Default)]
struct LastReads {
    root: Vec<u32>,
    last: Vec<u32>,
}

impl LastReads {
    const NEVER: u32 = u32::MAX;

    fn room(&self) -> usize {
        self.root.capacity() + self.last.capacity()
    }

    /// Whether call `i` is the last to read value `v`, an operation's result.
    fn dies_at(&self, v: u32, i: u32) -> bool {
        let r = self.root.get(v as usize).copied().unwrap_or(u32::MAX);
        self.last.get(r as usize) == Some(&i)
    }

    /// One pass over `tape`'s calls, numbering values as the replay does.
    fn find(&mut self, tape: &Tape) {
        self.root.clear();
        self.last.clear();
        let nums = |r: Run| &tape.nums[r.0 as usize..(r.0 + r.1) as usize];
        fn made(s: &mut LastReads, n: u32, hint: bool) {
            for _ in 0..n {
                s.root.push(s.last.len() as u32);
                s.last.push(if hint { 0 } else { LastReads::NEVER });
            }
        }
        fn read(s: &mut LastReads, i: u32, vs: &[u32]) {
            for &v in vs {
                let r = s.root.get(v as usize).copied().unwrap_or(u32::MAX);
                if let Some(l) = s.last.get_mut(r as usize) {
                    if *l != LastReads::NEVER {
                        *l = i;
                    }
                }
            }
        }
        fn never(s: &mut LastReads, vs: &[u32]) {
            for &v in vs {
                let r = s.root.get(v as usize).copied().unwrap_or(u32::MAX);
                if let Some(l) = s.last.get_mut(r as usize) {
                    *l = LastReads::NEVER;
                }
            }
        }
        let mut calls = tape.calls.iter().zip(0u32..);
        while let Some((call, i)) = calls.next() {
            match call {
                Call::BlockParams(b) => made(self, tape.params_of(*b), false),
                Call::Constant(_) | Call::StaticSlice(..) => made(self, 1, false),
                Call::LocalArray(_, _, init) => {
                    read(self, i, nums(*init));
                    made(self, 1, false);
                }
                Call::Op { args, result, .. } => {
                    read(self, i, nums(*args));
                    made(self, u32::from(*result), true);
                }
                Call::ArrayLoad { elems, index, .. } => {
                    read(self, i, nums(*elems));
                    read(self, i, &[*index]);
                    made(self, 1, true);
                }
                Call::ArrayStore {
                    elems,
                    index,
                    value,
                    ..
                } => {
                    // (The elements made again may be the same values.)
                    read(self, i, &[*index, *value]);
                    never(self, nums(*elems));
                    never(self, &[*value]);
                    made(self, elems.1, false);
                }
                Call::Keep(v) => never(self, &[*v]),
                Call::Jump(b, args) if tape.merges(*b) => {
                    for &k in nums(*args) {
                        let r = self.root.get(k as usize).copied().unwrap_or(u32::MAX);
                        self.root.push(r);
                    }
                    calls.next();
                    calls.next();
                }
                Call::Jump(_, args) => read(self, i, nums(*args)),
                Call::Brif(c, (_, ta), (_, ea)) => {
                    read(self, i, &[*c]);
                    read(self, i, nums(*ta));
                    read(self, i, nums(*ea));
                }
                Call::Switch(a, (s, n), (_, da)) => {
                    read(self, i, &[*a]);
                    for &(_, _, args) in &tape.cases[*s as usize..(s + n) as usize] {
                        read(self, i, nums(args));
                    }
                    read(self, i, nums(*da));
                }
                Call::Ret(v) => read(self, i, v.as_slice()),
                Call::Promote(_, p, l) => {
                    read(self, i, nums(*p));
                    read(self, i, nums(*l));
                }
                Call::PromoteMiss(_, p) => read(self, i, nums(*p)),
                Call::CreateBlock(_) | Call::SwitchTo(_) | Call::Trap(_) => {}
            }
        }
    }
}

const FILLED: u8 = 1;
const HEAD: u8 = 2;

/// Why a replay stopped: the emitter did not make a value where the recording did.
#[derive(Debug)]
pub struct ReplayError(pub String);

impl Tape {
    /// Whether `other` recorded the same calls, with the same arguments, in the same
    /// order.
    pub fn same_run(&self, other: &Tape) -> bool {
        // (Runs are places in `nums`: equal calls over equal numbers are equal runs.
        // Calls compare by their text, so that a NaN constant equals itself.)
        self.calls.len() == other.calls.len()
            && self
                .calls
                .iter()
                .zip(&other.calls)
                .all(|(a, b)| a == b || format!("{a:?}") == format!("{b:?}"))
            && self.nums == other.nums
            && self.types == other.types
            && self.cases == other.cases
    }

    /// The calls recorded, one per line (for diagnostics).
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for (k, c) in self.calls.iter().enumerate() {
            let nums = |r: Run| &self.nums[r.0 as usize..(r.0 + r.1) as usize];
            let extra = match c {
                Call::Op { args, .. } => format!(" {:?}", nums(*args)),
                Call::Jump(_, a) => format!(" {:?}", nums(*a)),
                Call::Brif(_, (_, a), (_, b)) => format!(" {:?} {:?}", nums(*a), nums(*b)),
                Call::ArrayLoad { elems, .. } | Call::ArrayStore { elems, .. } => {
                    format!(" {:?}", nums(*elems))
                }
                _ => String::new(),
            };
            out.push_str(&format!("{k}: {c:?}{extra}\n"));
        }
        out
    }

    /// Forgets the run recorded (keeping the buffers for the next).
    pub fn clear(&mut self) {
        self.calls.clear();
        self.nums.clear();
        self.types.clear();
        self.cases.clear();
        self.ins.clear();
        self.follows.clear();
        self.marks.clear();
        self.runs.clear();
        self.values = 0;
        self.lists.clear();
        self.local_arrays = 0;
        self.fills.clear();
        self.backs.clear();
        self.rems = 0;
        self.low_bits.clear();
    }

    /// A new block whose parameter types are `run`.
    fn block(&mut self, run: Run) -> u32 {
        self.calls.push(Call::CreateBlock(run));
        self.ins.push(0);
        self.follows.push(false);
        self.marks.push(0);
        self.fills.push((u32::MAX, u32::MAX));
        self.backs.push(u32::MAX);
        self.runs.push(run);
        self.runs.len() as u32 - 1
    }

    /// The number of parameters of block `b` (none for a block not recorded).
    fn params_of(&self, b: u32) -> u32 {
        self.runs.get(b as usize).map_or(0, |r| r.1)
    }

    /// The number of calls recorded.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether no call was recorded.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    fn value(&mut self) -> u32 {
        self.values += 1;
        self.values - 1
    }

    /// Whether block `b` merges into the block that jumps to it ([`Tape::replay`]): one
    /// recorded edge enters it, a jump the recording followed at once by stitching it,
    /// and it is not the entry (block 0, the first block created: executors make their
    /// start block's copy first), which the function's caller enters too.
    fn merges(&self, b: u32) -> bool {
        let b = b as usize;
        b != 0 && self.ins.get(b) == Some(&1) && self.follows.get(b) == Some(&true)
    }

    /// The number of blocks [`Tape::replay`] merges into the block jumping to them.
    pub fn merged(&self) -> usize {
        (0..self.runs.len() as u32)
            .filter(|&b| self.merges(b))
            .count()
    }

    /// Counts an edge into block `b`.
    fn enter(&mut self, b: u32) {
        if let Some(n) = self.ins.get_mut(b as usize) {
            *n += 1;
        }
        if let Some(m) = self.marks.get_mut(b as usize) {
            if *m & FILLED != 0 {
                *m |= HEAD;
                // (The call about to be recorded.)
                self.backs[b as usize] = self.calls.len() as u32;
            }
        }
    }

    fn run(&mut self, xs: impl IntoIterator<Item = u32>) -> Run {
        let start = self.nums.len() as u32;
        self.nums.extend(xs);
        (start, self.nums.len() as u32 - start)
    }

    /// Fills `shape` with what the recorded run's edges pass to block parameters, as the
    /// fold layer sees the values ([`crate::params`]): a constant the executor asked for,
    /// a parameter, a local array's element kept as a value where the index is a
    /// constant in bounds (as the fold layer keeps it), or anything else. Everything else
    /// the fold layer might make constant (a product by 0) counts as anything else, which
    /// can only make fewer parameters constant; every branch's edges count, also those
    /// the fold layer drops, which can only do the same. It also records the parameters
    /// whose values an operation or a terminator reads (an operand, an index, the elements
    /// of an array accessed where the index is not a constant in bounds, a stored value
    /// that does not stay an element, a condition, a returned or promoted value, an
    /// argument into a block it does not know): more than the fold layer may read, which
    /// can only make fewer parameters dead.
    pub fn shape(&self, shape: &mut Shape) {
        shape.clear();
        let mut tags = std::mem::take(&mut shape.tags);
        tags.reserve(self.values as usize);
        let nums = |r: Run| &self.nums[r.0 as usize..(r.0 + r.1) as usize];
        let tag = |tags: &[Tag], v: u32| tags.get(v as usize).copied().unwrap_or(Tag::OTHER);
        let edge = |shape: &mut Shape, tags: &[Tag], b: u32, args: Run| {
            shape.memory_edge(b);
            let first = shape.first_param(b);
            for (j, &a) in nums(args).iter().enumerate() {
                match first {
                    u32::MAX => shape.read(tag(tags, a)),
                    f => shape.input(f + j as u32, tag(tags, a)),
                }
            }
        };
        let read_all = |shape: &mut Shape, tags: &[Tag], vs: &[u32]| {
            for &v in vs {
                shape.read(tag(tags, v));
            }
        };
        let index = |shape: &Shape, tags: &[Tag], v: u32, len: usize| {
            shape
                .constant_of(tag(tags, v))
                .and_then(|c| index_in(c, len))
        };
        // A merged block has no parameters: its values are the jump's arguments.
        let mut made = 0;
        // The local arrays in memory: what each block reads and writes of them, and where
        // it goes on (for [`Shape::live_memory`]), only if the run made any.
        let memory = self.local_arrays > 0;
        let mut calls = self.calls.iter();
        while let Some(call) = calls.next() {
            match call {
                Call::CreateBlock((s, n)) => {
                    let types = &self.types[*s as usize..(s + n) as usize];
                    if self.merges(made) {
                        shape.merged_block();
                    } else {
                        shape.block(types);
                        shape.entered_once(made != 0 && self.ins.get(made as usize) == Some(&1));
                    }
                    if memory {
                        shape.memory_block(self.merges(made));
                    }
                    made += 1;
                }
                Call::BlockParams(b) => {
                    let first = shape.first_param(*b);
                    let n = self.params_of(*b);
                    tags.extend((0..n).map(|j| match first {
                        u32::MAX => Tag::OTHER,
                        f => Tag::param(f + j),
                    }));
                }
                Call::SwitchTo(b) => {
                    if memory {
                        shape.memory_switch(*b);
                    }
                }
                Call::Constant(c) => tags.push(shape.constant(*c)),
                Call::StaticSlice(..) => tags.push(Tag::OTHER),
                Call::Op {
                    op, args, result, ..
                } => {
                    let a = nums(*args);
                    read_all(shape, &tags, a);
                    if memory && matches!(op, TOp::Load | TOp::Store) {
                        let index = a.get(1).map(|&i| tag(&tags, i));
                        shape.memory_access(a[0], index, matches!(op, TOp::Store));
                    }
                    if *result {
                        tags.push(Tag::OTHER);
                    }
                }
                Call::ArrayLoad {
                    elems, index: i, ..
                } => {
                    let es = nums(*elems);
                    shape.read(tag(&tags, *i));
                    let t = match index(shape, &tags, *i, es.len()) {
                        Some(k) => tag(&tags, es[k]),
                        None => {
                            read_all(shape, &tags, es);
                            Tag::OTHER
                        }
                    };
                    tags.push(t);
                }
                Call::ArrayStore {
                    elems,
                    index: i,
                    value,
                    ..
                } => {
                    let es = nums(*elems);
                    shape.read(tag(&tags, *i));
                    match index(shape, &tags, *i, es.len()) {
                        Some(k) => {
                            let v = tag(&tags, *value);
                            for (j, &e) in es.iter().enumerate() {
                                let t = if j == k { v } else { tag(&tags, e) };
                                tags.push(t);
                            }
                        }
                        None => {
                            shape.read(tag(&tags, *value));
                            read_all(shape, &tags, es);
                            tags.extend(es.iter().map(|_| Tag::OTHER));
                        }
                    }
                }
                Call::LocalArray(_, _, init) => {
                    read_all(shape, &tags, nums(*init));
                    shape.memory_array(tags.len() as u32);
                    tags.push(Tag::OTHER);
                }
                // (Nothing to shape: later blocks read a value kept directly, never
                // through their parameters.)
                Call::Keep(_) => {}
                Call::Jump(b, args) if self.merges(*b) => {
                    // Its `SwitchTo` and `BlockParams`, the next two calls.
                    for &a in nums(*args) {
                        tags.push(tag(&tags, a));
                    }
                    calls.next();
                    calls.next();
                }
                Call::Jump(b, args) => edge(shape, &tags, *b, *args),
                Call::Brif(c, (t, ta), (e, ea)) => {
                    shape.read(tag(&tags, *c));
                    edge(shape, &tags, *t, *ta);
                    edge(shape, &tags, *e, *ea);
                }
                Call::Switch(a, (s, n), (d, da)) => {
                    shape.read(tag(&tags, *a));
                    for &(_, b, args) in &self.cases[*s as usize..(s + n) as usize] {
                        edge(shape, &tags, b, args);
                    }
                    edge(shape, &tags, *d, *da);
                }
                Call::Ret(v) => {
                    if let Some(v) = v {
                        shape.read(tag(&tags, *v));
                    }
                }
                Call::Trap(_) => {}
                Call::Promote(_, p, l) => {
                    read_all(shape, &tags, nums(*p));
                    read_all(shape, &tags, nums(*l));
                }
                Call::PromoteMiss(_, p) => read_all(shape, &tags, nums(*p)),
            }
        }
        shape.tags = tags;
    }

    /// Notes the remainders (`Rem` operations) whose results nothing reads but comparisons
    /// for equality or inequality with zero, as the fold layer will see the replay with
    /// the constant and dead parameters `known`: a replay tells its emitter so before each
    /// ([`Emitter::low_bits_only`]). Values are followed as the replay binds them (a
    /// merged block's parameters are the jump's arguments); a value is zero if a
    /// `Constant` call made it zero or `known` reads its parameter as zero. Every other
    /// read of a remainder's result counts: an operand of any other operation, a
    /// condition, an index, an array's element or stored value, a kept, returned or
    /// promoted value, and an argument of an edge unless `known` leaves the parameter it
    /// goes to out (the fold layer drops those arguments). So the promise holds for every
    /// read the replay makes.
    pub fn note_low_bits(&mut self, known: &Known) {
        const NONE: u32 = u32::MAX;
        self.low_bits.clear();
        if self.rems == 0 {
            return;
        }
        let mut low = std::mem::take(&mut self.low);
        low.root.clear();
        low.roots.clear();
        low.replayed.clear();
        let nums = |r: Run| &self.nums[r.0 as usize..(r.0 + r.1) as usize];
        // What `known` reads the parameters of block `b` as (none left out if empty).
        let consts = |low: &LowBits, b: u32| -> &[Option<Const>] {
            low.replayed
                .get(b as usize)
                .and_then(|&n| known.block(n))
                .unwrap_or(&[])
        };
        let edge = |low: &mut LowBits, b: u32, args: Run| {
            let cs = consts(low, b);
            for (j, &a) in nums(args).iter().enumerate() {
                if !matches!(cs.get(j), Some(Some(_))) {
                    low.read(&[a]);
                }
            }
        };
        let mut made = 0;
        let mut calls = self.calls.iter().zip(0u32..);
        while let Some((call, i)) = calls.next() {
            match call {
                Call::CreateBlock(_) => {
                    let b = low.replayed.len() as u32;
                    low.replayed.push(if self.merges(b) { NONE } else { made });
                    made += u32::from(!self.merges(b));
                }
                Call::BlockParams(b) => {
                    let cs = consts(&low, *b);
                    for j in 0..self.params_of(*b) as usize {
                        let zero = matches!(cs.get(j), Some(Some(Const::Int(_, 0))));
                        low.new_value(NONE, zero);
                    }
                }
                Call::Constant(c) => low.new_value(NONE, matches!(c, Const::Int(_, 0))),
                Call::StaticSlice(..) => low.new_value(NONE, false),
                Call::LocalArray(_, _, init) => {
                    low.read(nums(*init));
                    low.new_value(NONE, false);
                }
                Call::Op {
                    op, args, result, ..
                } => {
                    let a = nums(*args);
                    let tests = |x: u32, y: u32| {
                        low.of(x).is_some_and(|r| r.0 != NONE) && low.of(y).is_some_and(|r| r.1)
                    };
                    let tested = match (op, a) {
                        (TOp::Cmp(CmpOp::Eq | CmpOp::Ne), &[x, y]) => tests(x, y) || tests(y, x),
                        _ => false,
                    };
                    if !tested {
                        low.read(a);
                    }
                    if *result {
                        let rem = matches!(op, TOp::Binary(BinaryOp::Rem)) && a.len() == 2;
                        low.new_value(if rem { i } else { NONE }, false);
                    }
                }
                Call::ArrayLoad { elems, index, .. } => {
                    low.read(nums(*elems));
                    low.read(&[*index]);
                    low.new_value(NONE, false);
                }
                Call::ArrayStore {
                    elems,
                    index,
                    value,
                    ..
                } => {
                    low.read(nums(*elems));
                    low.read(&[*index, *value]);
                    for _ in 0..elems.1 {
                        low.new_value(NONE, false);
                    }
                }
                Call::Keep(v) | Call::Ret(Some(v)) => low.read(&[*v]),
                Call::Jump(b, args) if self.merges(*b) => {
                    for &a in nums(*args) {
                        let r = low.root.get(a as usize).copied().unwrap_or(NONE);
                        low.root.push(r);
                    }
                    // Its `SwitchTo` and `BlockParams`, the next two calls.
                    calls.next();
                    calls.next();
                }
                Call::Jump(b, args) => edge(&mut low, *b, *args),
                Call::Brif(c, (t, ta), (e, ea)) => {
                    low.read(&[*c]);
                    edge(&mut low, *t, *ta);
                    edge(&mut low, *e, *ea);
                }
                Call::Switch(a, (s, k), (d, da)) => {
                    low.read(&[*a]);
                    for &(_, t, args) in &self.cases[*s as usize..(s + k) as usize] {
                        edge(&mut low, t, args);
                    }
                    edge(&mut low, *d, *da);
                }
                Call::Promote(_, p, l) => {
                    low.read(nums(*p));
                    low.read(nums(*l));
                }
                Call::PromoteMiss(_, p) => low.read(nums(*p)),
                Call::SwitchTo(_) | Call::Ret(None) | Call::Trap(_) => {}
            }
        }
        // (Roots are made in call order, so the calls come out in order.)
        self.low_bits.extend(
            low.roots
                .iter()
                .filter(|&&(rem, _, other)| rem != NONE && !other)
                .map(|&(rem, ..)| rem),
        );
        self.low = low;
    }

    /// Replays the recording into `em`; returns the block the entry (block 0) became.
    ///
    /// **Straight-line chains merge.** A block that one recorded edge enters, a jump that
    /// the recording followed at once by stitching that block, and not the entry, is not
    /// a block of its own in the replay: the jump is left out, and the block's code goes
    /// on in the jumping block with its parameters bound to the jump's arguments. (So an
    /// unrolled interpreter's handlers, each a root copy the jump ending the last one
    /// asked for, become one block per straight run of the interpreted program; every
    /// later layer sees fewer blocks and edges, and keeps what it knows, a value in a
    /// register or a bounds check made, across them.) No block is created for the merged
    /// block, so an emitter's `n`th block is the `n`th the recording made that did not
    /// merge (as [`crate::params::Known`] numbers them).
    pub fn replay<E: Emitter>(&self, em: &mut E) -> Result<E::Block, ReplayError>
    where
        E::Value: 'static,
        E::Block: 'static,
    {
        let mut bufs = Buffers::take();
        let replayed = self.replay_with(em, &mut bufs);
        bufs.give_back();
        replayed
    }

    fn replay_with<E: Emitter>(
        &self,
        em: &mut E,
        bufs: &mut Buffers<E::Value, E::Block>,
    ) -> Result<E::Block, ReplayError> {
        let Buffers {
            vals,
            blocks,
            buf,
            buf2,
            loops,
            reads,
        } = bufs;
        loops.find(self);
        reads.find(self);
        vals.reserve(self.values as usize);
        // Per recorded block, the emitter's (`None` for a merged block).
        blocks.reserve(self.runs.len());
        let nums = |r: Run| &self.nums[r.0 as usize..(r.0 + r.1) as usize];
        fn get<T: Copy>(xs: &[T], k: u32) -> Result<T, ReplayError> {
            xs.get(k as usize)
                .copied()
                .ok_or_else(|| ReplayError(format!("number {k} made by no call")))
        }
        let block = |blocks: &[Option<E::Block>], b: u32| {
            get(blocks, b)?.ok_or_else(|| ReplayError(format!("block {b} was merged")))
        };
        // (The numbers are checked first, so that the copies build no `Result` each.)
        fn check(ks: &[u32], n: usize) -> Result<(), ReplayError> {
            match ks.iter().find(|&&k| k as usize >= n) {
                Some(k) => Err(ReplayError(format!("number {k} made by no call"))),
                None => Ok(()),
            }
        }
        fn fill<T: Copy>(out: &mut Vec<T>, xs: &[T], ks: &[u32]) -> Result<(), ReplayError> {
            out.clear();
            check(ks, xs.len())?;
            out.extend(ks.iter().map(|&k| xs[k as usize]));
            Ok(())
        }
        // The last emitter block made per run of types (direct-mapped by its start).
        const LIKE: usize = 16;
        let mut like = [None::<(Run, E::Block)>; LIKE];
        // Tells `em` which values call `i` (an operation or an array access) read for the
        // last time.
        let dead = |em: &mut E, vals: &[E::Value], i: u32, vs: &[u32]| {
            for &v in vs {
                if reads.dies_at(v, i) {
                    em.dead(vals[v as usize]);
                }
            }
        };
        // The remainders still to be told of ([`Tape::note_low_bits`]), in call order.
        let low_bits = &mut &self.low_bits[..];
        let mut calls = self.calls.iter().zip(0u32..);
        while let Some((call, i)) = calls.next() {
            match call {
                Call::CreateBlock((s, n)) => {
                    let merged = self.merges(blocks.len() as u32);
                    let types = &self.types[*s as usize..(s + n) as usize];
                    // Copies of one template block share their run: the last block made
                    // with it is `like` for the next.
                    let slot = *s as usize % LIKE;
                    blocks.push((!merged).then(|| {
                        let b = match like[slot] {
                            Some((r, b)) if r == (*s, *n) => em.create_block_like(b, types),
                            _ => em.create_block(types),
                        };
                        like[slot] = Some(((*s, *n), b));
                        if self.marks.get(blocks.len()).is_some_and(|m| m & HEAD != 0) {
                            em.loop_head(b, loops.reads(blocks.len() as u32));
                        }
                        b
                    }));
                }
                Call::BlockParams(b) => em.block_params(block(blocks, *b)?, vals),
                Call::SwitchTo(b) => em.switch_to_block(block(blocks, *b)?),
                Call::Constant(c) => vals.push(em.constant(*c)),
                Call::StaticSlice(id, ty) => vals.push(em.static_slice(*id, *ty)),
                Call::Op {
                    op,
                    args,
                    loc,
                    result,
                } => {
                    fill(buf, vals, nums(*args))?;
                    if low_bits.first() == Some(&i) {
                        *low_bits = &low_bits[1..];
                        em.low_bits_only();
                    }
                    match (em.op(op, buf, *loc), result) {
                        (Some(v), true) => vals.push(v),
                        (None, false) => {}
                        _ => return Err(ReplayError(format!("{op:?}: a result differs"))),
                    }
                    dead(em, vals, i, nums(*args));
                }
                Call::ArrayLoad {
                    elem,
                    elems,
                    index,
                    loc,
                } => {
                    fill(buf, vals, nums(*elems))?;
                    let v = em.array_load(*elem, buf, get(vals, *index)?, *loc);
                    vals.push(v);
                    dead(em, vals, i, nums(*elems));
                    dead(em, vals, i, &[*index]);
                }
                Call::ArrayStore {
                    elem,
                    elems,
                    index,
                    value,
                    loc,
                } => {
                    fill(buf, vals, nums(*elems))?;
                    let (k, v) = (get(vals, *index)?, get(vals, *value)?);
                    em.array_store(*elem, buf, k, v, *loc);
                    vals.extend_from_slice(buf);
                    dead(em, vals, i, &[*index]);
                }
                Call::LocalArray(elem, len, init) => {
                    fill(buf, vals, nums(*init))?;
                    vals.push(em.local_array(*elem, *len, buf));
                }
                Call::Keep(v) => em.keep(get(vals, *v)?),
                Call::Jump(b, args) if self.merges(*b) => {
                    // The block's parameters are the arguments; its `SwitchTo` and
                    // `BlockParams`, the next two calls, are left out.
                    let ks = nums(*args);
                    check(ks, vals.len())?;
                    vals.reserve(ks.len());
                    for &k in ks {
                        vals.push(vals[k as usize]);
                    }
                    calls.next();
                    calls.next();
                }
                Call::Jump(b, args) => {
                    fill(buf, vals, nums(*args))?;
                    em.jump(block(blocks, *b)?, buf);
                }
                Call::Brif(c, (t, ta), (e, ea)) => {
                    fill(buf, vals, nums(*ta))?;
                    fill(buf2, vals, nums(*ea))?;
                    let (t, e) = (block(blocks, *t)?, block(blocks, *e)?);
                    em.brif(get(vals, *c)?, (t, buf), (e, buf2));
                }
                Call::Switch(a, (s, n), (d, da)) => {
                    let mut cases: Vec<Case<E>> = Vec::with_capacity(*n as usize);
                    for &(k, b, args) in &self.cases[*s as usize..(s + n) as usize] {
                        let mut xs = Vec::new();
                        fill(&mut xs, vals, nums(args))?;
                        cases.push((k, block(blocks, b)?, xs));
                    }
                    fill(buf, vals, nums(*da))?;
                    em.switch(get(vals, *a)?, &cases, (block(blocks, *d)?, buf));
                }
                Call::Ret(v) => {
                    let v = v.map(|v| get(vals, v)).transpose()?;
                    em.ret(v);
                }
                Call::Trap(loc) => em.trap(*loc),
                Call::Promote(site, p, l) => {
                    fill(buf, vals, nums(*p))?;
                    fill(buf2, vals, nums(*l))?;
                    em.promote(*site, buf, buf2);
                }
                Call::PromoteMiss(site, p) => {
                    fill(buf, vals, nums(*p))?;
                    em.promote_miss(*site, buf);
                }
            }
        }
        block(blocks, 0)
    }
}

/// Which parameters of each loop head the loop reads, found on a recording
/// ([`Emitter::loop_head`]'s `reads`), with its working vectors (kept with a replay's
/// buffers).
///
/// A loop is taken to be the calls from the head's first switch to the last jump back
/// into it (an edge recorded into the head after that switch), or on to the last jump
/// back into an inner loop whose head those calls fill: executors fill a loop's blocks
/// after its head, and the blocks a loop reaches only after those jumps are its exits.
/// A parameter of a block filled there is read if an operation, a condition, an array
/// access, a return, a keep or a promotion there reads its value, or if a jump there,
/// not into the head, passes it to a parameter of a block filled there that is read. A
/// parameter the loop only carries around (and its exits pass on) is not. One pass over
/// the loop's calls, numbering its values as the recording did. A hint: a block filled
/// in that stretch that is not the loop's (an exit stitched before the last jump back)
/// only adds reads, and an emitter that takes a read parameter for unread only loads it
/// from memory where it is read.
#[derive(Default)]
struct LoopReads {
    /// Per recorded block, the number of its first parameter (a running count), and
    /// one more entry: the count of all.
    first: Vec<u32>,
    /// Per parameter, whether the loop it heads reads it (`true` for a parameter of a
    /// block that heads no loop).
    reads: Vec<bool>,
    /// The loop heads: where each was first filled, its last jump back, the block.
    heads: Vec<(u32, u32, u32)>,
    /// The loop being looked at: per value made in it, the parameter it is (`u32::MAX`
    /// if none); the parameters found read, and the list of them; what jumps in it pass
    /// on (parameter to parameter).
    owner: Vec<u32>,
    read: Vec<bool>,
    touched: Vec<u32>,
    flows: Vec<(u32, u32)>,
}

impl LoopReads {
    /// The room its vectors hold (for the buffers' bound).
    fn room(&self) -> usize {
        self.first.capacity()
            + self.reads.capacity()
            + self.owner.capacity()
            + self.heads.capacity()
            + self.read.capacity()
            + self.touched.capacity()
            + self.flows.capacity()
    }

    /// What the loop block `b` heads reads of its parameters (none if the recording has
    /// no loop).
    fn reads(&self, b: u32) -> &[bool] {
        let at = |k: u32| self.first.get(k as usize).map_or(0, |&x| x as usize);
        self.reads.get(at(b)..at(b + 1)).unwrap_or(&[])
    }

    /// Finds, for every loop head of `tape`, the parameters its loop reads.
    fn find(&mut self, tape: &Tape) {
        self.first.clear();
        if !tape.marks.iter().any(|&m| m & HEAD != 0) {
            return;
        }
        let mut count = 0;
        for r in &tape.runs {
            self.first.push(count);
            count += r.1;
        }
        self.first.push(count);
        self.reads.clear();
        self.reads.resize(count as usize, true);
        self.read.clear();
        self.read.resize(count as usize, false);
        // The heads by their fill: a loop's calls run to its last jump back, or further
        // to that of a loop whose head they hold (an inner loop whose last jump back was
        // recorded after the outer loop's).
        self.heads.clear();
        for h in 0..tape.runs.len() {
            if tape.marks[h] & HEAD != 0 && tape.fills[h].0 < tape.backs[h] {
                self.heads.push((tape.fills[h].0, tape.backs[h], h as u32));
            }
        }
        self.heads.sort_unstable();
        for i in 0..self.heads.len() {
            let (_, mut end, h) = self.heads[i];
            for &(fill, back, _) in &self.heads[i + 1..] {
                if fill > end {
                    break;
                }
                end = end.max(back);
            }
            self.find_in(tape, h, end);
        }
    }

    /// What the loop `h` heads, whose calls end at call `end`, reads of `h`'s parameters
    /// (into `reads`), leaving `read` cleared.
    fn find_in(&mut self, tape: &Tape, h: u32, end: u32) {
        let (start, base) = tape.fills[h as usize];
        let Some(calls) = tape.calls.get(start as usize..=end as usize) else {
            return;
        };
        // Whether block `t` was filled in the loop (not the head).
        let within = |t: u32| {
            let f = tape.fills.get(t as usize).map_or(u32::MAX, |f| f.0);
            t != h && f > start && f <= end
        };
        let nums = |r: Run| &tape.nums[r.0 as usize..(r.0 + r.1) as usize];
        let owner = |s: &Self, v: u32| {
            let p = *s.owner.get(v.wrapping_sub(base) as usize)?;
            (p != u32::MAX).then_some(p)
        };
        let read = |s: &mut Self, v: u32| {
            if let Some(p) = owner(s, v) {
                if !s.read[p as usize] {
                    s.read[p as usize] = true;
                    s.touched.push(p);
                }
            }
        };
        // (`back`: a jump to a block filled no later than the jumping one, `at`, as in
        // an inner loop.)
        let mut back = false;
        let mut pass = |s: &mut Self, at: u32, t: u32, args: Run| {
            if !within(t) {
                return;
            }
            back |= tape.fills[t as usize].0 <= at;
            let f = s.first[t as usize];
            for (j, &v) in nums(args).iter().enumerate() {
                if let Some(p) = owner(s, v) {
                    s.flows.push((p, f + j as u32));
                }
            }
        };
        self.owner.clear();
        self.flows.clear();
        self.touched.clear();
        let made = |s: &mut Self, n: u32| s.owner.extend(std::iter::repeat_n(u32::MAX, n as usize));
        // (Where the block being read was first switched to.)
        let mut at = start;
        for call in calls {
            match call {
                Call::SwitchTo(b) => at = tape.fills.get(*b as usize).map_or(end, |f| f.0),
                Call::BlockParams(b) => match self.first.get(*b as usize) {
                    Some(&f) => self.owner.extend(f..f + tape.params_of(*b)),
                    None => made(self, tape.params_of(*b)),
                },
                Call::Constant(_) | Call::StaticSlice(..) => made(self, 1),
                Call::Op { args, result, .. } => {
                    nums(*args).iter().for_each(|&v| read(self, v));
                    made(self, u32::from(*result));
                }
                Call::ArrayLoad { elems, index, .. } => {
                    nums(*elems).iter().for_each(|&v| read(self, v));
                    read(self, *index);
                    made(self, 1);
                }
                Call::ArrayStore {
                    elems,
                    index,
                    value,
                    ..
                } => {
                    nums(*elems).iter().for_each(|&v| read(self, v));
                    read(self, *index);
                    read(self, *value);
                    made(self, elems.1);
                }
                Call::LocalArray(_, _, init) => {
                    nums(*init).iter().for_each(|&v| read(self, v));
                    made(self, 1);
                }
                Call::Keep(v) | Call::Ret(Some(v)) => read(self, *v),
                Call::Promote(_, p, l) => {
                    nums(*p).iter().chain(nums(*l)).for_each(|&v| read(self, v));
                }
                Call::PromoteMiss(_, p) => nums(*p).iter().for_each(|&v| read(self, v)),
                Call::Jump(t, args) => pass(self, at, *t, *args),
                Call::Brif(c, (t, ta), (e, ea)) => {
                    read(self, *c);
                    pass(self, at, *t, *ta);
                    pass(self, at, *e, *ea);
                }
                Call::Switch(a, (s, k), (d, da)) => {
                    read(self, *a);
                    for &(_, t, args) in &tape.cases[*s as usize..(s + k) as usize] {
                        pass(self, at, t, args);
                    }
                    pass(self, at, *d, *da);
                }
                Call::CreateBlock(_) | Call::Ret(None) | Call::Trap(_) => {}
            }
        }
        // A parameter passed on to a read one is read: the jumps recorded later first,
        // so that when every jump goes to a block filled after the jumping one, one pass
        // settles it (else to a fixed point).
        loop {
            let mut changed = false;
            for &(p, q) in self.flows.iter().rev() {
                if self.read[q as usize] && !self.read[p as usize] {
                    self.read[p as usize] = true;
                    self.touched.push(p);
                    changed = true;
                }
            }
            if !changed || !back {
                break;
            }
        }
        let (a, b) = (
            self.first[h as usize] as usize,
            self.first[h as usize + 1] as usize,
        );
        self.reads[a..b].copy_from_slice(&self.read[a..b]);
        for &p in &self.touched {
            self.read[p as usize] = false;
        }
    }
}

impl Emitter for Tape {
    fn restartable(&self) -> bool {
        true
    }

    fn restart(&mut self) {
        self.clear();
    }

    type Value = u32;
    type Block = u32;

    fn create_block(&mut self, params: &[Type]) -> u32 {
        const LISTS: usize = 64;
        if self.lists.is_empty() {
            self.lists.resize(LISTS, (0, (0, u32::MAX)));
        }
        let addr = params.as_ptr() as usize;
        let slot = (addr >> 3) % LISTS;
        let run = match self.lists[slot] {
            (a, (s, n))
                if a == addr && self.types.get(s as usize..(s + n) as usize) == Some(params) =>
            {
                (s, n)
            }
            _ => {
                let run = (self.types.len() as u32, params.len() as u32);
                self.types.extend_from_slice(params);
                self.lists[slot] = (addr, run);
                run
            }
        };
        self.block(run)
    }

    fn create_block_like(&mut self, like: u32, params: &[Type]) -> u32 {
        match self.runs.get(like as usize) {
            Some(&(s, n)) if n as usize == params.len() => {
                debug_assert_eq!(&self.types[s as usize..(s + n) as usize], params);
                self.block((s, n))
            }
            _ => self.create_block(params),
        }
    }

    fn block_params(&mut self, b: u32, out: &mut Vec<u32>) {
        if let [.., Call::Jump(j, (_, n)), Call::SwitchTo(s)] = self.calls[..] {
            if j == b && s == b && self.runs.get(b as usize).map(|r| r.1) == Some(n) {
                self.follows[b as usize] = true;
            }
        }
        self.calls.push(Call::BlockParams(b));
        let n = self.params_of(b);
        out.extend(self.values..self.values + n);
        self.values += n;
    }

    fn switch_to_block(&mut self, b: u32) {
        if let Some(m) = self.marks.get_mut(b as usize) {
            *m |= FILLED;
        }
        if let Some(f) = self.fills.get_mut(b as usize) {
            if f.0 == u32::MAX {
                *f = (self.calls.len() as u32, self.values);
            }
        }
        self.calls.push(Call::SwitchTo(b));
    }

    fn constant(&mut self, c: Const) -> u32 {
        self.calls.push(Call::Constant(c));
        self.value()
    }

    fn static_slice(&mut self, id: u32, ty: Type) -> u32 {
        self.calls.push(Call::StaticSlice(id, ty));
        self.value()
    }

    fn op(&mut self, op: &TOp, args: &[u32], loc: SrcLoc) -> Option<u32> {
        // The fold layer gives a result for every operation but stores and calls of
        // nothing (what it lowers them to, its backends too).
        let result = !matches!(op, TOp::Store | TOp::Call { ret: None, .. });
        if matches!(op, TOp::Binary(BinaryOp::Rem)) {
            self.rems += 1;
        }
        let args = self.run(args.iter().copied());
        self.calls.push(Call::Op {
            op: op.clone(),
            args,
            loc,
            result,
        });
        result.then(|| self.value())
    }

    fn array_load(&mut self, elem: Scalar, elems: &[u32], index: u32, loc: SrcLoc) -> u32 {
        let elems = self.run(elems.iter().copied());
        self.calls.push(Call::ArrayLoad {
            elem,
            elems,
            index,
            loc,
        });
        self.value()
    }

    fn array_store(
        &mut self,
        elem: Scalar,
        elems: &mut [u32],
        index: u32,
        value: u32,
        loc: SrcLoc,
    ) {
        let run = self.run(elems.iter().copied());
        self.calls.push(Call::ArrayStore {
            elem,
            elems: run,
            index,
            value,
            loc,
        });
        for e in elems {
            *e = self.value();
        }
    }

    fn local_array(&mut self, elem: Scalar, len: u32, init: &[u32]) -> u32 {
        self.local_arrays += 1;
        let init = self.run(init.iter().copied());
        self.calls.push(Call::LocalArray(elem, len, init));
        self.value()
    }

    fn keep(&mut self, v: u32) {
        self.calls.push(Call::Keep(v));
    }

    fn jump(&mut self, dest: u32, args: &[u32]) {
        self.enter(dest);
        let args = self.run(args.iter().copied());
        self.calls.push(Call::Jump(dest, args));
    }

    fn brif(&mut self, cond: u32, then_dest: (u32, &[u32]), else_dest: (u32, &[u32])) {
        self.enter(then_dest.0);
        self.enter(else_dest.0);
        let t = self.run(then_dest.1.iter().copied());
        let e = self.run(else_dest.1.iter().copied());
        self.calls
            .push(Call::Brif(cond, (then_dest.0, t), (else_dest.0, e)));
    }

    fn switch(&mut self, arg: u32, cases: &[Case<Self>], default: (u32, &[u32])) {
        let start = self.cases.len() as u32;
        for (k, b, args) in cases {
            self.enter(*b);
            let r = self.run(args.iter().copied());
            self.cases.push((*k, *b, r));
        }
        self.enter(default.0);
        let d = self.run(default.1.iter().copied());
        self.calls.push(Call::Switch(
            arg,
            (start, cases.len() as u32),
            (default.0, d),
        ));
    }

    fn ret(&mut self, value: Option<u32>) {
        self.calls.push(Call::Ret(value));
    }

    fn trap(&mut self, loc: SrcLoc) {
        self.calls.push(Call::Trap(loc));
    }

    fn promote(&mut self, site: u32, promoted: &[u32], live: &[u32]) {
        let p = self.run(promoted.iter().copied());
        let l = self.run(live.iter().copied());
        self.calls.push(Call::Promote(site, p, l));
    }

    fn promote_miss(&mut self, site: u32, promoted: &[u32]) {
        let p = self.run(promoted.iter().copied());
        self.calls.push(Call::PromoteMiss(site, p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::BinaryOp;

    /// An emitter that writes down every call, values numbered as it makes them, and keeps
    /// a local array's element after a store with a constant index as the stored value (as
    /// the fold layer does), else makes new values.
    #[derive(Default)]
    struct Log {
        lines: Vec<String>,
        values: u32,
        blocks: Vec<usize>,
        consts: std::collections::HashMap<u32, Const>,
        /// The loop heads it was told of, with what their loops read (not in `lines`:
        /// a run told none).
        heads: Vec<(usize, Vec<bool>)>,
        /// The values it was told are dead, after the line it had written then.
        dead: Vec<(usize, u32)>,
    }

    impl Log {
        fn v(&mut self) -> u32 {
            self.values += 1;
            self.values
        }
    }

    impl Emitter for Log {
        type Value = u32;
        type Block = usize;
        fn create_block(&mut self, params: &[Type]) -> usize {
            self.blocks.push(params.len());
            self.lines.push(format!("block {params:?}"));
            self.blocks.len() - 1
        }
        fn loop_head(&mut self, b: usize, reads: &[bool]) {
            self.heads.push((b, reads.to_vec()));
        }
        fn dead(&mut self, v: u32) {
            self.dead.push((self.lines.len(), v));
        }
        fn create_block_like(&mut self, like: usize, params: &[Type]) -> usize {
            self.blocks.push(params.len());
            self.lines.push(format!("block like {like} {params:?}"));
            self.blocks.len() - 1
        }
        fn block_params(&mut self, b: usize, out: &mut Vec<u32>) {
            let from = out.len();
            for _ in 0..self.blocks[b] {
                let v = self.v();
                out.push(v);
            }
            self.lines.push(format!("params {b} {:?}", &out[from..]));
        }
        fn switch_to_block(&mut self, b: usize) {
            self.lines.push(format!("at {b}"));
        }
        fn constant(&mut self, c: Const) -> u32 {
            let v = self.v();
            self.consts.insert(v, c);
            v
        }
        fn static_slice(&mut self, id: u32, _: Type) -> u32 {
            let v = self.v();
            self.lines.push(format!("slice {id} = {v}"));
            v
        }
        fn op(&mut self, op: &TOp, args: &[u32], _: SrcLoc) -> Option<u32> {
            let v = (!matches!(op, TOp::Store)).then(|| self.v());
            self.lines.push(format!("{v:?} = {op:?} {args:?}"));
            v
        }
        fn array_load(&mut self, _: Scalar, elems: &[u32], index: u32, _: SrcLoc) -> u32 {
            let v = self.v();
            self.lines.push(format!("{v} = load {elems:?}[{index}]"));
            v
        }
        fn array_store(&mut self, _: Scalar, elems: &mut [u32], i: u32, v: u32, _: SrcLoc) {
            match self.consts.get(&i) {
                Some(Const::Int(_, k)) => elems[*k as usize] = v,
                _ => {
                    for e in elems.iter_mut() {
                        *e = self.v();
                    }
                }
            }
            self.lines.push(format!("store -> {elems:?}"));
        }
        fn local_array(&mut self, _: Scalar, len: u32, init: &[u32]) -> u32 {
            let v = self.v();
            self.lines.push(format!("{v} = array {len} {init:?}"));
            v
        }
        fn jump(&mut self, dest: usize, args: &[u32]) {
            self.lines.push(format!("jump {dest} {args:?}"));
        }
        fn brif(&mut self, c: u32, t: (usize, &[u32]), e: (usize, &[u32])) {
            self.lines.push(format!("brif {c} {t:?} {e:?}"));
        }
        fn switch(&mut self, a: u32, cases: &[Case<Self>], d: (usize, &[u32])) {
            self.lines.push(format!("switch {a} {cases:?} {d:?}"));
        }
        fn ret(&mut self, v: Option<u32>) {
            self.lines.push(format!("ret {v:?}"));
        }
        fn trap(&mut self, _: SrcLoc) {
            self.lines.push("trap".into());
        }
        fn promote(&mut self, site: u32, p: &[u32], l: &[u32]) {
            self.lines.push(format!("promote {site} {p:?} {l:?}"));
        }
        fn promote_miss(&mut self, site: u32, p: &[u32]) {
            self.lines.push(format!("miss {site} {p:?}"));
        }
        fn low_bits_only(&mut self) {
            self.lines.push("low bits only".into());
        }
    }

    /// What an executor might do: it keeps the values it is given and passes them back.
    fn script<E: Emitter>(em: &mut E) -> E::Block {
        let i = Type::I64;
        let entry = em.create_block(&[i, i]);
        let next = em.create_block(&[i, i, i]);
        let last = em.create_block(&[i]);
        em.switch_to_block(entry);
        let mut p = Vec::new();
        em.block_params(entry, &mut p);
        let two = em.constant(Const::Int(Scalar::I64, 2));
        let one = em.constant(Const::Int(Scalar::I64, 1));
        let mut arr = vec![p[0], p[1], two];
        em.array_store(Scalar::I64, &mut arr, one, p[0], SrcLoc::default());
        em.array_store(Scalar::I64, &mut arr, p[1], two, SrcLoc::default());
        let x = em.array_load(Scalar::I64, &arr, p[0], SrcLoc::default());
        let sum = em.op(&TOp::Binary(BinaryOp::Add), &[x, arr[1]], SrcLoc::default());
        let s = em.static_slice(0, Type::I64);
        em.op(&TOp::Store, &[s, x, two], SrcLoc::default());
        em.brif(
            x,
            (next, &[arr[0], arr[1], arr[2]]),
            (last, &[sum.unwrap()]),
        );
        em.switch_to_block(next);
        let mut q = Vec::new();
        em.block_params(next, &mut q);
        let cases = vec![(3, last, vec![q[2]]), (4, entry, vec![q[0], q[1]])];
        em.switch(q[1], &cases, (last, &[q[0]]));
        em.switch_to_block(last);
        let mut r = Vec::new();
        em.block_params(last, &mut r);
        em.promote(7, &[r[0]], &[q[0], two]);
        entry
    }

    /// Three remainders by 4: the first only tested for zero, the second compared with 1,
    /// the third tested for zero and passed on to a block that returns it.
    fn remainders<E: Emitter>(em: &mut E) -> E::Block {
        let i = Type::I64;
        let loc = SrcLoc::default();
        let entry = em.create_block(&[i]);
        let out = em.create_block(&[i]);
        em.switch_to_block(entry);
        let mut p = Vec::new();
        em.block_params(entry, &mut p);
        let [four, zero, one] = [4, 0, 1].map(|k| em.constant(Const::Int(Scalar::I64, k)));
        let rem = TOp::Binary(BinaryOp::Rem);
        let mut tested = Vec::new();
        for (cmp, with) in [(CmpOp::Eq, zero), (CmpOp::Ne, one), (CmpOp::Eq, zero)] {
            let r = em.op(&rem, &[p[0], four], loc).unwrap();
            tested.push(r);
            let c = em.op(&TOp::Cmp(cmp), &[with, r], loc).unwrap();
            tested.push(c);
        }
        let and = TOp::Binary(BinaryOp::And);
        let c = em.op(&and, &[tested[1], tested[3]], loc).unwrap();
        let c = em.op(&and, &[c, tested[5]], loc).unwrap();
        em.brif(c, (out, &[tested[4]]), (out, &[p[0]]));
        em.switch_to_block(out);
        let mut q = Vec::new();
        em.block_params(out, &mut q);
        em.ret(Some(q[0]));
        entry
    }

    #[test]
    fn a_remainder_only_tested_for_zero_is_told_of_before_it_is_made() {
        let mut tape = Tape::default();
        remainders(&mut tape);
        let mut shape = Shape::default();
        tape.shape(&mut shape);
        tape.note_low_bits(&shape.solve());
        let mut log = Log::default();
        tape.replay(&mut log).expect("replays");
        let told: Vec<usize> = (log.lines.iter().enumerate())
            .filter(|(_, l)| *l == "low bits only")
            .map(|(k, _)| k)
            .collect();
        assert_eq!(told.len(), 1, "{:#?}", log.lines);
        let rems: Vec<usize> = (log.lines.iter().enumerate())
            .filter(|(_, l)| l.contains("Binary(Rem)"))
            .map(|(k, _)| k)
            .collect();
        assert_eq!(told[0] + 1, rems[0], "{:#?}", log.lines);
        // Without the note, a replay tells nothing.
        tape.low_bits.clear();
        let mut log = Log::default();
        tape.replay(&mut log).expect("replays");
        assert!(!log.lines.iter().any(|l| l == "low bits only"));
    }

    #[test]
    fn a_replay_makes_the_calls_the_run_made() {
        let mut direct = Log::default();
        let entry = script(&mut direct);
        let mut tape = Tape::default();
        script(&mut tape);
        let mut replayed = Log::default();
        let block = tape.replay(&mut replayed).expect("replays");
        assert_eq!(block, entry);
        assert_eq!(direct.lines, replayed.lines);
        // Twice, into a fresh emitter each time.
        let mut again = Log::default();
        tape.replay(&mut again).expect("replays");
        assert_eq!(direct.lines, again.lines);
    }

    /// entry -> a (stitched right after the jump, entered once) -> b (stitched right after,
    /// but entered twice) -> a loop back into b; c is entered once but stitched after
    /// another block, and d once but by a branch.
    fn chain<E: Emitter>(em: &mut E) -> E::Block {
        let i = Type::I64;
        let entry = em.create_block(&[i]);
        em.switch_to_block(entry);
        let mut p = Vec::new();
        em.block_params(entry, &mut p);
        let a = em.create_block(&[i, i]);
        let one = em.constant(Const::Int(Scalar::I64, 1));
        em.jump(a, &[p[0], one]);
        em.switch_to_block(a);
        let mut q = Vec::new();
        em.block_params(a, &mut q);
        let sum = em
            .op(&TOp::Binary(BinaryOp::Add), &q, SrcLoc::default())
            .unwrap();
        let b = em.create_block(&[i]);
        em.jump(b, &[sum]);
        em.switch_to_block(b);
        let mut r = Vec::new();
        em.block_params(b, &mut r);
        let (c, d) = (em.create_block(&[i]), em.create_block(&[]));
        em.brif(r[0], (c, &[r[0]]), (d, &[]));
        em.switch_to_block(d);
        em.block_params(d, &mut Vec::new());
        em.jump(b, &[one]);
        em.switch_to_block(c);
        let mut s = Vec::new();
        em.block_params(c, &mut s);
        em.ret(Some(s[0]));
        entry
    }

    /// A block made like another records the other's types (once for both), and the
    /// replay makes a block like the last one it made with those types; a block made
    /// afresh with equal types from another list is made afresh.
    /// `entry(n) -> head(n, i, acc, k)`; `head`: `i < n` to `body(n, i, acc, k)` or
    /// `exit(acc, k)`; `body` steps `i` and passes the rest to `mid`, which adds 1 to
    /// `acc` and jumps back to `head`; `exit` returns `acc + k`. Then a second loop,
    /// `inner(x, y)`, reading neither, which `exit` falls into by a branch on `k`.
    fn two_loops(tape: &mut Tape) -> [u32; 2] {
        let t = Type::I64;
        let add = TOp::Binary(BinaryOp::Add);
        let loc = SrcLoc::default();
        let params = |tape: &mut Tape, b: u32| {
            let mut p = Vec::new();
            tape.switch_to_block(b);
            tape.block_params(b, &mut p);
            p
        };
        let entry = tape.create_block(&[t]);
        let head = tape.create_block(&[t; 4]);
        let body = tape.create_block(&[t; 4]);
        let mid = tape.create_block(&[t; 4]);
        let exit = tape.create_block(&[t; 2]);
        let inner = tape.create_block(&[t; 2]);
        let done = tape.create_block(&[t]);
        let n = params(tape, entry)[0];
        let zero = tape.constant(Const::Int(Scalar::I64, 0));
        let one = tape.constant(Const::Int(Scalar::I64, 1));
        let k = tape.op(&add, &[n, one], loc).expect("a sum");
        tape.jump(head, &[n, zero, zero, k]);
        let h = params(tape, head);
        let c = tape.op(&TOp::Cmp(crate::ops::CmpOp::Lt), &[h[1], h[0]], loc);
        tape.brif(c.expect("a test"), (body, &h), (exit, &[h[2], h[3]]));
        let v = params(tape, body);
        let i = tape.op(&add, &[v[1], one], loc).expect("a sum");
        tape.jump(mid, &[v[0], i, v[2], v[3]]);
        let m = params(tape, mid);
        let acc = tape.op(&add, &[m[2], one], loc).expect("a sum");
        tape.jump(head, &[m[0], m[1], acc, m[3]]);
        let x = params(tape, exit);
        let r = tape.op(&add, &[x[0], x[1]], loc).expect("a sum");
        tape.brif(x[1], (inner, &[r, x[1]]), (done, &[r]));
        let y = params(tape, inner);
        tape.brif(one, (inner, &[y[1], y[0]]), (done, &[y[0]]));
        let d = params(tape, done);
        tape.ret(Some(d[0]));
        [head, inner]
    }

    /// A loop reads the parameters of its head that an operation or a condition in it
    /// reads, also through jumps within it (`acc`, read only in `mid`); not one it only
    /// carries around (`k`, read after the loop), nor those of a loop that only swaps
    /// its values.
    #[test]
    fn a_loop_reads_what_its_blocks_read() {
        let mut tape = Tape::default();
        let [head, inner] = two_loops(&mut tape);
        let mut loops = LoopReads::default();
        loops.find(&tape);
        assert_eq!(loops.reads(head), [true, true, true, false]);
        assert_eq!(loops.reads(inner), [false, false]);
        // Blocks that head no loop read all of theirs.
        assert_eq!(loops.reads(0), [true]);
        // A replay tells an emitter the same.
        let mut replayed = Log::default();
        tape.replay(&mut replayed).expect("replays");
        // (`mid` merges into `body`: the emitter's blocks after it are numbered one less.)
        assert_eq!(
            replayed.heads,
            [
                (head as usize, vec![true, true, true, false]),
                (inner as usize - 1, vec![false, false])
            ]
        );
    }

    /// An outer loop `outer(n, acc)` around `inner(n, acc, j)`, recorded as a planned
    /// stitcher orders them: the inner loop's exit (the outer loop's jump back) before
    /// its body, which alone reads `acc`. The outer loop reads `acc` all the same.
    #[test]
    fn an_outer_loop_reads_what_its_inner_loop_reads_after_the_outer_jump_back() {
        let t = Type::I64;
        let add = TOp::Binary(BinaryOp::Add);
        let loc = SrcLoc::default();
        let mut tape = Tape::default();
        let params = |tape: &mut Tape, b: u32| {
            let mut p = Vec::new();
            tape.switch_to_block(b);
            tape.block_params(b, &mut p);
            p
        };
        let [entry, outer, inner, exit, body] =
            [&[t][..], &[t; 2], &[t; 3], &[t; 2], &[t; 3]].map(|ts| tape.create_block(ts));
        let n = params(&mut tape, entry)[0];
        let zero = tape.constant(Const::Int(Scalar::I64, 0));
        tape.jump(outer, &[n, zero]);
        let o = params(&mut tape, outer);
        tape.jump(inner, &[o[0], o[1], zero]);
        let i = params(&mut tape, inner);
        let c = tape.op(&TOp::Cmp(crate::ops::CmpOp::Lt), &[i[2], i[0]], loc);
        tape.brif(c.expect("a test"), (body, &i), (exit, &[i[0], i[1]]));
        let x = params(&mut tape, exit);
        tape.jump(outer, &x);
        let b = params(&mut tape, body);
        let acc = tape.op(&add, &[b[1], b[2]], loc).expect("a sum");
        tape.jump(inner, &[b[0], acc, b[2]]);
        let mut loops = LoopReads::default();
        loops.find(&tape);
        assert_eq!(loops.reads(outer), [true, true]);
        assert_eq!(loops.reads(inner), [true, true, true]);
    }

    #[test]
    fn blocks_made_like_another_are_replayed_like_the_last_with_their_types() {
        let (i, f) = (Type::I64, Type::F64);
        let (first, other) = (vec![i, f], vec![i, f]);
        let mut tape = Tape::default();
        let a = tape.create_block(&first);
        let b = tape.create_block_like(a, &first);
        let c = tape.create_block_like(b, &first);
        let d = tape.create_block(&other);
        assert_eq!(tape.types.len(), 4, "a, b and c share one list");
        for x in [a, b, c, d] {
            tape.switch_to_block(x);
            let mut p = Vec::new();
            tape.block_params(x, &mut p);
            tape.ret(Some(p[0]));
        }
        let mut replayed = Log::default();
        tape.replay(&mut replayed).expect("replays");
        let made: Vec<&str> = replayed
            .lines
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("block"))
            .collect();
        assert_eq!(
            made,
            [
                "block [Scalar(I64), Scalar(F64)]",
                "block like 0 [Scalar(I64), Scalar(F64)]",
                "block like 1 [Scalar(I64), Scalar(F64)]",
                "block [Scalar(I64), Scalar(F64)]",
            ]
        );
    }

    #[test]
    fn a_replay_merges_a_block_one_jump_enters_right_before_it() {
        let mut tape = Tape::default();
        chain(&mut tape);
        let mut replayed = Log::default();
        tape.replay(&mut replayed).expect("replays");
        // (Whether a block is made like an earlier one depends on where the compiler put
        // the type lists of `chain`: not what this test is about.)
        let unlike = |lines: &[String]| -> Vec<String> {
            lines
                .iter()
                .map(|l| match l.strip_prefix("block like ") {
                    Some(rest) => format!("block {}", rest.split_once(' ').map_or("", |r| r.1)),
                    None => l.clone(),
                })
                .collect()
        };
        let expected = [
            "block [Scalar(I64)]",
            "at 0",
            "params 0 [1]",
            // No block 1, no jump to it: its parameters are 1 and the constant 2.
            "Some(3) = Binary(Add) [1, 2]",
            "block [Scalar(I64)]",
            "jump 1 [3]",
            "at 1",
            "params 1 [4]",
            "block [Scalar(I64)]",
            "block []",
            "brif 4 (2, [4]) (3, [])",
            "at 3",
            "params 3 []",
            "jump 1 [2]",
            "at 2",
            "params 2 [5]",
            "ret Some(5)",
        ];
        assert_eq!(unlike(&replayed.lines), expected);
        // The entry is never merged, even when one jump enters it right before it.
        let mut direct = Log::default();
        let mut tape = Tape::default();
        let e = tape.create_block(&[]);
        tape.jump(e, &[]);
        tape.switch_to_block(e);
        tape.block_params(e, &mut Vec::new());
        tape.ret(None);
        tape.replay(&mut direct).expect("replays");
        assert!(direct.lines.contains(&"jump 0 []".to_string()));
    }

    /// An operation's result is dead after the operation that reads it last in its block
    /// (a merged block's reads count as its jumping block's), and never if an edge passes
    /// it on, a later block reads it unpassed, or it is stored in an array; nor is a
    /// parameter or a constant.
    #[test]
    fn a_replay_tells_which_results_an_operation_read_last() {
        let t = Type::I64;
        let add = TOp::Binary(BinaryOp::Add);
        let loc = SrcLoc::default();
        let mut tape = Tape::default();
        let [entry, merged, next] = [&[t][..], &[t; 2], &[t; 2]].map(|ts| tape.create_block(ts));
        tape.switch_to_block(entry);
        let mut p = Vec::new();
        tape.block_params(entry, &mut p);
        let one = tape.constant(Const::Int(Scalar::I64, 1));
        let a = tape.op(&add, &[p[0], one], loc).expect("a"); // dead after `c`
        let b = tape.op(&add, &[a, one], loc).expect("b"); // read last in the merged block
        let c = tape.op(&add, &[a, p[0]], loc).expect("c"); // passed on
        let k = tape.op(&add, &[c, one], loc).expect("k"); // kept
        tape.keep(k);
        tape.jump(merged, &[b, c]);
        tape.switch_to_block(merged);
        let mut q = Vec::new();
        tape.block_params(merged, &mut q);
        let d = tape.op(&add, &[q[0], k], loc).expect("d"); // `b` dead after this
        let e = tape.op(&add, &[d, q[1]], loc).expect("e"); // `d` dead after this
                                                            // (Two edges: `next` is not merged, and the edges pass `c` on.)
        tape.brif(k, (next, &[e, q[1]]), (next, &[e, q[1]]));
        tape.switch_to_block(next);
        let mut r = Vec::new();
        tape.block_params(next, &mut r);
        tape.ret(Some(r[0]));
        let mut log = Log::default();
        tape.replay(&mut log).expect("replays");
        let dead: Vec<(String, u32)> = (log.dead.iter())
            .map(|&(line, v)| (log.lines[line - 1].clone(), v))
            .collect();
        // Values as the log numbers them: the parameter 1, the constant 2, a = 3, b = 4,
        // c = 5, k = 6, d = 7, e = 8.
        assert_eq!(
            dead,
            [
                ("Some(5) = Binary(Add) [3, 1]".to_string(), 3),
                ("Some(7) = Binary(Add) [4, 6]".to_string(), 4),
                ("Some(8) = Binary(Add) [7, 5]".to_string(), 7),
            ],
            "{:#?}",
            log.lines
        );
    }
}

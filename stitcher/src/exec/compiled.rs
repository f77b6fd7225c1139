//! The compiled generating extension: the planned stitcher's plan compiled into machine
//! code, so that stitching a tree runs its setup code, its static branches and its edges
//! as native code instead of interpreting them operation by operation.
//!
//! **What is compiled.** One function per program ([`gen`]), made the first time a
//! specialization asks for it: its steps are the plan's steps (a `Stitch` step is the
//! code that stitches that block: its setup operations, its template operations, its
//! terminator and the edges it takes; a `Fork` a branch on the arm the last static branch
//! took; a `Goto` a jump), entered at the first step of a root's tree. The decisions the
//! interpreted stitcher takes per copy from the plan (which edges fuse, which target a
//! root, which arm a fork follows for a static branch's edge) are taken once, when the
//! function is made. What stays dynamic is what the static values decide: the outcome of
//! static branches, the slots of one run of a tree (words of the frame), and everything
//! the emitter and the memo do.
//!
//! **The frame.** Static registers are words in memory with a tag each (an
//! [`SVal::key_bits`] encoding; [`UNSET`] for none), dynamic variables and the elements
//! of local arrays are numbers of the emitter's values (this module keeps the values
//! and blocks the emitter returns in tables: [`Rt`]). The frame is one block of memory:
//! its head (the context, the slices, the shims) and then each part at an offset fixed
//! when the code is made ([`Layout`]), so that the code keeps one pointer. Its sizes are
//! the compiled function's own ([`CompiledGe`]), never read from the program again, so
//! that a changed program cannot make the code reach outside them. Where the program's
//! types decide a register's tag, the code does not check it ([`gen`]'s `known_tags`).
//!
//! **Calls out.** Everything that touches the emitter, the memo or the budget goes
//! through [`Shims`]: functions in Rust, generic over the emitter, that the code calls
//! with the runtime context. A shim that meets something wrong (or a panic in the
//! emitter, caught) marks the run failed and returns a harmless value; the driver checks
//! after each tree.
//!
//! **What falls back.** The code handles the common cases natively (the setup code's
//! constants, copies, `i64` arithmetic, shifts, `min`/`max` and comparisons, `bool` and
//! `i64` not, `select`, `len` and static loads; accesses to local arrays at static indices
//! in bounds) and the rest through shims (a division by zero or of the least `i64` by
//! minus one, other types, casts, pure host calls; a jump into a promotion, whose
//! dispatch over the values known and exit out of the unit one shim emits; a jump into
//! a lazy root, to the copy the unit made or out through a promotion of no values; a
//! dynamic branch's edge into either, whose dispatch block is filled after the branch; a
//! static fault, which the setup shim emits as the interpreted stitcher does, the
//! faulting operation on its constants and a trap, after which the code ends the block;
//! a dynamic `switch`, each case's target and arguments kept by one shim and the switch
//! emitted by another; an edge back into the unit's first copy, whose arguments the shim
//! that emits it widens with the unit's invariants; a local array in memory, which is a
//! dynamic value, the array, made by a shim in the unit's first copy, read and written
//! through another, and passed as its elements, which the shims load, where the unit is
//! left or its first copy entered). A budget that runs out ends the run with the
//! interpreted stitcher's error: the frame keeps the block being stitched and the last
//! one with a source position, which the error names. The run gives up (it *aborts*)
//! only where the interpreted stitcher would report an internal error. An aborted run
//! leaves the emitter with part of a unit, and
//! the interpreted planned stitcher makes the unit instead, with the same result: on the
//! same emitter restarted ([`Emitter::restart`]: the recording tape), or on a new one
//! (the stencil emitter of a unit not recorded: [`super::ExecutorKind::run_once`] says the
//! run gave up, and the runtime makes the emitter again). The optimizing tier's emitter
//! gets the interpreted stitcher only.

mod gen;

use std::any::Any;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cranelift_codegen::entity::EntityRef;
use dyc_templates::ops::Const;
use dyc_templates::template::{Emitter, TOp};
use dyc_templates::types::{Scalar, SrcLoc};

use super::memo::{Memo, Word};
use super::planned::Queue;
use super::worklist::{
    dispatch_known, eval_setup, fault_op, load_elems, narrow_key, promoted_values, widenings,
    zero_home, Widening,
};
use super::{Context, PromotionMode, Unit};
use crate::ge::{Block, BudgetKind, Op, Plan, Reg, SVal, Site, SpecError, StitchProgram, Term};
use crate::runtime::heap::Extent;
use dyc_templates::pool::{Kept, Pool, Reuse};

pub(crate) use gen::compile;

/// No value, block or copy.
const NONE: u32 = u32::MAX;

/// What the compiled code returns when the budget of operations runs out (0: the tree
/// was stitched; 1: it gave up).
const OPS_EXCEEDED: u32 = 2;

/// Marks the copy [`shim_root`] returns for an edge into the unit's first copy, whose
/// arguments the shim emitting the edge widens ([`Rt::widen`]).
const ENTRY_EDGE: u64 = 1 << 32;

/// Units made by compiled code, and runs that gave up (this process).
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static ABORTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The units compiled generating extensions made in this process, and the runs that gave
/// up (the interpreted planned stitcher made those units).
pub fn counts() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (RUNS.load(Relaxed), ABORTS.load(Relaxed))
}

/// Set by [`inject_give_up`].
static INJECTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the next run of a compiled plan in this process give up after it made its unit
/// (the emitter holding all of it), as if it had met something it does not take: a test
/// of the path that makes the unit again.
pub fn inject_give_up() {
    INJECTED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The tag of a static register that holds nothing.
const UNSET: u8 = 255;

/// The tag of an `i64` ([`SVal::key_bits`]).
const TAG_I64: u8 = Scalar::I64 as u8;
const TAG_BOOL: u8 = 101;
const TAG_SLICE: u8 = 102;

/// A program's compiled generating extension: its code and the sizes of the frame it
/// reads.
pub(crate) struct CompiledGe {
    /// Keeps the code.
    _code: Extent,
    /// The address of `fn(frame: *mut u8, root: u32, res: u32, first: u32) -> u32` (the
    /// target's C convention): runs the tree of root block `root` for its copy `res`
    /// (`first`: the unit's first copy) on the frame ([`Layout`]), 0 when it ran, 1 when
    /// it aborted.
    entry: usize,
    /// Where the parts of the frame lie.
    layout: Layout,
    /// The program's blocks (the slots of a tree's run).
    blocks: usize,
    /// Static registers and dynamic variables.
    regs: usize,
    /// Per register, where a local array's elements lie in the array pool, how many
    /// there are and their type.
    arrays: Vec<Option<(u32, u32, Scalar)>>,
    /// Per static register, the tag its values have where the program's types decide it
    /// ([`UNSET`] elsewhere): the code does not check those, so the driver checks every
    /// key it starts a tree with.
    tags: Vec<u8>,
    pool: usize,
    /// The longest list of values an edge passes or a block receives, and the longest
    /// key of a root (the buffers' sizes).
    buf: usize,
    key: usize,
}

impl std::fmt::Debug for CompiledGe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGe")
            .field("regs", &self.regs)
            .field("pool", &self.pool)
            .finish()
    }
}

/// The start of a run's frame: what the code reaches through the frame's address, at
/// fixed offsets (known to [`gen`]), before the parts [`Layout`] places.
#[repr(C)]
struct Head {
    rt: *mut c_void,
    slices: *const SliceRef,
    nslices: u64,
    shims: Shims,
}

/// Where each part of a run's frame lies, in bytes from its start: everything the code
/// reads and writes is at a constant offset from the one address it is given (so that
/// the code keeps one pointer, not one per part, across the calls it makes). The
/// offsets are the compiled code's own, fixed when it is made.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    /// Static registers' words (8 bytes each) and tags (1 byte each).
    s: i32,
    st: i32,
    /// Operations run, tests made, the most operations the budget allows, the block being
    /// stitched and the last block stitched that has a source position ([`NONE`] if
    /// none) (8 bytes each): the budget's error says where it ran out.
    counters: i32,
    /// Key words: a tag and a word per value (16 bytes each).
    key: i32,
    /// Dynamic variables and the local arrays' elements: value numbers (4 bytes each).
    d: i32,
    a: i32,
    /// The two buffers of value numbers (4 bytes each).
    buf: i32,
    buf2: i32,
    /// Per block, its copy in this run of the tree ([`NONE`] if none) and whether it was
    /// stitched (4 bytes each).
    slots: i32,
    /// The frame's size, in 8-byte words.
    words: usize,
}

impl Layout {
    /// The layout of a frame of `regs` registers, a pool of `pool` array elements,
    /// buffers of `buf` values, keys of `key` values and `blocks` blocks; `None` if it
    /// would not fit the code's 32-bit offsets.
    fn new(regs: usize, pool: usize, buf: usize, key: usize, blocks: usize) -> Option<Layout> {
        let mut at = std::mem::size_of::<Head>().next_multiple_of(8);
        let mut put = |bytes: usize| {
            let o = at;
            at = at.checked_add(bytes.checked_next_multiple_of(8)?)?;
            i32::try_from(o).ok()
        };
        let l = Layout {
            s: put(regs.checked_mul(8)?)?,
            counters: put(40)?,
            key: put(key.checked_mul(16)?)?,
            d: put(regs.checked_mul(4)?)?,
            a: put(pool.checked_mul(4)?)?,
            buf: put(buf.checked_mul(4)?)?,
            buf2: put(buf.checked_mul(4)?)?,
            slots: put(blocks.checked_mul(8)?)?,
            st: put(regs)?,
            words: 0,
        };
        i32::try_from(at).ok()?;
        Some(Layout { words: at / 8, ..l })
    }
}

/// The Rust side's pointers into a run's frame (see [`Layout`]).
struct Frame {
    head: *mut Head,
    s: *mut u64,
    st: *mut u8,
    d: *mut u32,
    a: *mut u32,
    buf: *mut u32,
    buf2: *mut u32,
    key: *mut u64,
    counters: *mut u64,
    slots: *mut u32,
}

/// A static slice's contents as words, and the tag of its elements.
#[repr(C)]
struct SliceRef {
    ptr: *const u64,
    len: u64,
    tag: u64,
}

type Shim1 = extern "C" fn(*mut c_void, u64) -> u64;
type Shim2 = extern "C" fn(*mut c_void, u64, u64) -> u64;
type Shim3 = extern "C" fn(*mut c_void, u64, u64, u64) -> u64;
type Shim4 = extern "C" fn(*mut c_void, u64, u64, u64, u64) -> u64;
type Shim5 = extern "C" fn(*mut c_void, u64, u64, u64, u64, u64) -> u64;

/// The functions compiled code calls, in the order [`gen::Shim`] numbers them. Each takes
/// the runtime context first; arguments and results are words.
#[repr(C)]
struct Shims {
    /// `(tag, bits) -> value`: a static operand made a value (a constant, a static slice).
    stat: Shim2,
    /// `(block, op) -> ok`: setup operation `op` of `block`, run on the frame.
    setup: Shim2,
    /// `(block, op, n) -> value`: template operation `op` of `block` on the `n` values in
    /// the buffer (its result, or [`NONE`]).
    op: Shim3,
    /// `(copy) -> n`: starts filling a copy; its parameters, into the buffer.
    enter: Shim1,
    /// `(block) -> copy`: a new copy of `block` (not the unit's first), counted against
    /// the budget.
    create: Shim1,
    /// `(block, n) -> copy`: the copy of root `block` for the key of `n` tagged words in
    /// the key buffer, made and queued if new.
    root: Shim2,
    /// `(copy, n, which)`: a jump to `copy` with the `n` values of buffer `which`.
    jump: Shim3,
    /// `(cond, then, n, else, m)`: a branch, the arguments in the two buffers.
    brif: Shim5,
    /// `(has, value)`: a return.
    ret: Shim2,
    /// `(block)`: the trap that ends `block`.
    trap: Shim1,
    /// `(block, op, index) -> value`: a load from a local array (the general operation).
    array_load: Shim3,
    /// `(block, op, index, value)`: a store to a local array (the general operation).
    array_store: Shim4,
    /// `(value)`: a value later copies read unpassed (a unit invariant).
    keep: Shim1,
    /// `() -> ok`: one more copy, against the budget.
    count: extern "C" fn(*mut c_void) -> u64,
    /// `(block, params, statics, n)`: the jump into promotion block or lazy root `block`,
    /// whose static inputs are the first `statics` key words (its static parameters, the
    /// first `params`, then its static live-ins) and its dynamic inputs the `n` values in
    /// the buffer: into a promotion block, the dispatch over the values known, then the
    /// exit out of the unit; into a lazy root, the jump to the copy the unit made of it
    /// for those values, or else the exit through a promotion of no values.
    dispatch: Shim4,
    /// `(block, params, statics, n, which) -> copy | n << 32`: the target of a dynamic
    /// branch's edge into promotion block or lazy block `block`, its inputs as for
    /// `dispatch` but in buffer `which`: the copy of a lazy block this unit made (its
    /// arguments narrowed in the buffer), or a dispatch block filled by `stubs`.
    stub: Shim5,
    /// `()`: fills the dispatch blocks `stub` made, once their branch is emitted.
    stubs: extern "C" fn(*mut c_void) -> u64,
    /// `(value, copy, n)`: a case of a dynamic `switch`, to `copy` with the `n` values of
    /// the buffer (kept until `switch`).
    case: Shim3,
    /// `(arg, default, n)`: a dynamic `switch` on `arg` over the cases `case` kept, else
    /// to `default` with the `n` values of the buffer.
    switch: Shim3,
    /// `(reg, at) -> array`: local array `reg` in memory made (in the unit's first copy),
    /// its elements the buffer's values from `at` on, or empty for `at` [`NONE`].
    home: Shim2,
    /// `(block, op, index, value) -> value`: operation `op` of `block`, a declaration of,
    /// load from or store to a local array in memory.
    home_op: Shim4,
}

impl Shims {
    fn of<E: Emitter>() -> Shims {
        Shims {
            stat: shim_stat::<E>,
            setup: shim_setup::<E>,
            op: shim_op::<E>,
            enter: shim_enter::<E>,
            create: shim_create::<E>,
            root: shim_root::<E>,
            jump: shim_jump::<E>,
            brif: shim_brif::<E>,
            ret: shim_ret::<E>,
            trap: shim_trap::<E>,
            array_load: shim_array_load::<E>,
            array_store: shim_array_store::<E>,
            keep: shim_keep::<E>,
            count: shim_count::<E>,
            dispatch: shim_dispatch::<E>,
            stub: shim_stub::<E>,
            stubs: shim_stubs::<E>,
            case: shim_case::<E>,
            switch: shim_switch::<E>,
            home: shim_home::<E>,
            home_op: shim_home_op::<E>,
        }
    }
}

/// What a compiled run works with besides the emitter, kept per thread for the next run
/// ([`Kept`]): the frame's memory (owned here and reached only through raw pointers: the
/// compiled code and the shims write it), the memo of copies, the work list, the queue
/// of roots, the last copy of each block (for [`Emitter::create_block_like`]) and two
/// buffers of the emitter's values.
struct Work<V> {
    /// The frame, in words (so aligned for the words it holds).
    frame: Vec<u64>,
    /// Per static slice, where its words lie (in `Context::slices`, which outlives the
    /// run).
    slices: Vec<SliceRef>,
    memo: Memo<u32, Word>,
    work: Vec<u32>,
    queue: Queue,
    like: Vec<Option<u32>>,
    scratch: Vec<V>,
    scratch2: Vec<V>,
}

impl<V> Default for Work<V> {
    fn default() -> Work<V> {
        Work {
            frame: Vec::new(),
            slices: Vec::new(),
            memo: Memo::new(),
            work: Vec::new(),
            queue: Queue::default(),
            like: Vec::new(),
            scratch: Vec::new(),
            scratch2: Vec::new(),
        }
    }
}

impl<V: 'static> Reuse for Work<V> {
    fn reset(&mut self) -> bool {
        self.slices.clear();
        self.memo.clear();
        self.work.clear();
        self.scratch.clear();
        self.scratch2.clear();
        let room = self.frame.capacity()
            + self.slices.capacity()
            + self.memo.room()
            + self.work.capacity()
            + self.queue.room()
            + self.like.capacity()
            + self.scratch.capacity()
            + self.scratch2.capacity();
        room <= KEEP_WORDS
    }
}

thread_local! {
    /// The [`Work`] finished runs left on this thread.
    static WORK: Pool = const { std::cell::RefCell::new(Vec::new()) };
}

/// A [`Work`] of more words and entries than this is not kept for the next run.
const KEEP_WORDS: usize = 1 << 14;

impl<V: 'static> Work<V> {
    /// This thread's kept work, or new, with the frame of a run of `ge` made (every
    /// register unset, every slot empty), and the pointers to its parts.
    fn take(ge: &CompiledGe, max_ops: usize) -> (Kept<Work<V>>, Frame) {
        let mut w: Kept<Work<V>> = Kept::take(&WORK, 4);
        let l = &ge.layout;
        w.frame.clear();
        w.frame.resize(l.words, 0);
        w.like.clear();
        w.like.resize(ge.blocks, None);
        let base = w.frame.as_mut_ptr() as *mut u8;
        // SAFETY: `Layout::new` placed each part inside the frame's `words` words, at an
        // offset aligned for its elements, with room for the counts given here (the
        // sizes `ge` was made with).
        let f = unsafe {
            let at = |o: i32| base.add(o as usize);
            Frame {
                head: base as *mut Head,
                s: at(l.s) as *mut u64,
                st: at(l.st),
                d: at(l.d) as *mut u32,
                a: at(l.a) as *mut u32,
                buf: at(l.buf) as *mut u32,
                buf2: at(l.buf2) as *mut u32,
                key: at(l.key) as *mut u64,
                counters: at(l.counters) as *mut u64,
                slots: at(l.slots) as *mut u32,
            }
        };
        // SAFETY: as above; each run written lies in its part.
        unsafe {
            f.st.write_bytes(UNSET, ge.regs);
            std::slice::from_raw_parts_mut(f.d, ge.regs).fill(NONE);
            std::slice::from_raw_parts_mut(f.a, ge.pool).fill(NONE);
            for b in 0..ge.blocks {
                *f.slots.add(2 * b) = NONE;
            }
            *f.counters.add(2) = max_ops as u64;
            *f.counters.add(4) = u64::from(NONE);
        }
        (w, f)
    }
}

/// The state of one unit's compiled specialization (the shims' context).
struct Rt<'a, 'c, E: Emitter> {
    prog: &'a StitchProgram,
    plan: &'a Plan,
    cx: &'a Context<'c>,
    ge: &'a CompiledGe,
    em: &'a mut E,
    frame: Frame,
    /// The emitter's values and blocks, by the numbers the code holds.
    vals: Vec<E::Value>,
    copies: Vec<E::Block>,
    /// The frame's memory, the memo, the work list, the queue and the last copies.
    w: Kept<Work<E::Value>>,
    entry: Option<u32>,
    entry_key: Vec<Word>,
    /// The template block of the unit's first copy.
    entry_block: Block,
    /// Promotion sites met, in the order of the unit's local numbering.
    sites: Vec<Site>,
    /// Dispatch blocks made for a branch's edges, to fill once the branch is emitted:
    /// the block (by number), the promotion or lazy block, and the static parameters and
    /// live-ins of the site.
    stubs: Vec<(u32, Block, Vec<SVal>, Vec<SVal>)>,
    /// The cases of the dynamic `switch` being emitted so far ([`shim_case`]).
    cases: Vec<(u64, E::Block, Vec<E::Value>)>,
    blocks: usize,
    lookups: usize,
    failed: Option<String>,
    /// The error of the budget that ran out, if one did (the run failed for it).
    over: Option<SpecError>,
    panic: Option<Box<dyn Any + Send>>,
    scratch: Vec<E::Value>,
    scratch2: Vec<E::Value>,
}

/// Why a compiled run did not make the unit.
pub(super) enum Failed {
    /// A budget ran out: the error the interpreted stitcher reports.
    Budget(SpecError),
    /// Something the compiled code does not handle: the interpreted stitcher runs it.
    Abort,
    /// A panic in the emitter, to be raised again.
    Panic(Box<dyn Any + Send>),
}

/// Runs the unit that starts at `start` through `ge`; see the module documentation.
pub(super) fn run<E: Emitter>(
    ge: &CompiledGe,
    cx: &Context,
    plan: &Plan,
    start: Block,
    key: &[SVal],
    em: &mut E,
) -> Result<Unit<E::Block>, Failed> {
    let prog = cx.prog;
    let (mut w, frame) = Work::take(ge, cx.budget.max_ops);
    for &(r, c) in prog.constants() {
        if r.index() < ge.regs {
            let (t, b) = SVal::Scalar(c).key_bits();
            // SAFETY: `r` is below the frame's number of registers.
            unsafe {
                *frame.st.add(r.index()) = t;
                *frame.s.add(r.index()) = b;
            }
        }
    }
    for s in cx.slices {
        w.slices.push(match s {
            Some(d) => {
                let words = d.words();
                SliceRef {
                    ptr: words.as_ptr(),
                    len: words.len() as u64,
                    tag: u64::from(SVal::Scalar(Const::zero(d.elem)).key_bits().0),
                }
            }
            None => SliceRef {
                ptr: std::ptr::null(),
                len: 0,
                tag: u64::from(UNSET),
            },
        });
    }
    // SAFETY: the head lies at the frame's start, aligned and sized for it.
    unsafe {
        frame.head.write(Head {
            rt: std::ptr::null_mut(),
            slices: w.slices.as_ptr(),
            nslices: w.slices.len() as u64,
            shims: Shims::of::<E>(),
        });
    }
    let mut rt = Rt {
        prog,
        plan,
        cx,
        ge,
        em,
        frame,
        vals: Vec::new(),
        copies: Vec::new(),
        scratch: std::mem::take(&mut w.scratch),
        scratch2: std::mem::take(&mut w.scratch2),
        w,
        entry: None,
        entry_key: Vec::new(),
        entry_block: start,
        sites: Vec::new(),
        stubs: Vec::new(),
        cases: Vec::new(),
        blocks: 0,
        lookups: 0,
        failed: None,
        over: None,
        panic: None,
    };
    let mut result = rt.drive(start, key);
    // (Read before it is swapped: no locked instruction on every run.)
    let injected = || {
        use std::sync::atomic::Ordering::Relaxed;
        INJECTED.load(Relaxed) && INJECTED.swap(false, Relaxed)
    };
    if result.is_ok() && injected() {
        result = Err(Failed::Abort);
    }
    (rt.w.scratch, rt.w.scratch2) = (rt.scratch, rt.scratch2);
    let counter = match result {
        Ok(_) | Err(Failed::Budget(_)) => &RUNS,
        Err(_) => &ABORTS,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    result
}

impl<'a, 'c, E: Emitter> Rt<'a, 'c, E> {
    /// Why a run that returned `status` (or whose shims failed) stopped: a budget ran
    /// out ([`OPS_EXCEEDED`], or a shim counting a block), or it gave up.
    fn gave_up(&self, status: u32) -> Failed {
        match (status, &self.over) {
            (OPS_EXCEEDED, _) if self.failed.is_none() => {
                Failed::Budget(self.exceeded(BudgetKind::Ops))
            }
            (_, Some(e)) => Failed::Budget(e.clone()),
            _ => Failed::Abort,
        }
    }

    fn fail(&mut self, why: impl Into<String>) {
        if self.failed.is_none() {
            self.failed = Some(why.into());
        }
    }

    fn drive(&mut self, start: Block, key: &[SVal]) -> Result<Unit<E::Block>, Failed> {
        let prog = self.prog;
        // The unit's first copy, as `Spec::entry_copy` makes it.
        self.entry_key = key.iter().map(|&v| Word::of(v)).collect();
        let narrow: Vec<Word> = narrow_key(prog, start, key)
            .iter()
            .map(|&v| Word::of(v))
            .collect();
        // SAFETY: the counters are five words of the frame.
        unsafe { *self.frame.counters.add(3) = u64::from(start.as_u32()) };
        let entry = self.copy_of(start, &narrow);
        let Some(entry) = entry else {
            return Err(self.gave_up(0));
        };
        let ranks = self.plan.rank.len();
        self.w.queue.reset(ranks);
        let w = &mut *self.w;
        let mut next = w.queue.add_but_next(self.plan, &w.memo, &mut w.work);
        let f: extern "C" fn(*mut u8, u32, u32, u32) -> u32 =
            // SAFETY: `entry` is the address of a function of this signature in the
            // target's C convention, made by `gen::compile` and kept alive by `self.ge`.
            unsafe { std::mem::transmute::<usize, _>(self.ge.entry) };
        while let Some(k) = next.take().or_else(|| self.w.queue.pop()) {
            let (root, key, res) = self.w.memo.copy(k);
            let first = Some(res) == self.entry;
            let lay = prog.layout(root);
            let (regs, key) = match first {
                true => (&lay.key_regs, &self.entry_key[..]),
                false => (&lay.copy_key_regs, key),
            };
            if regs.len() != key.len() {
                return Err(Failed::Abort);
            }
            for (&r, v) in regs.iter().zip(key) {
                if r.index() >= self.ge.regs {
                    return Err(Failed::Abort);
                }
                match self.ge.tags.get(r.index()) {
                    Some(&t) if t == UNSET || u64::from(t) == v.tag => {}
                    _ => return Err(Failed::Abort),
                }
                // SAFETY: `r` is below the frame's number of registers, checked above.
                unsafe {
                    *self.frame.st.add(r.index()) = v.tag as u8;
                    *self.frame.s.add(r.index()) = v.bits;
                }
            }
            // SAFETY: the head is the frame's start.
            unsafe { (*self.frame.head).rt = self as *mut Self as *mut c_void };
            // SAFETY: the frame is memory of the layout `self.ge` was compiled for, owned
            // by the caller for the whole run; `self` outlives the call and is reached
            // only through the head's `rt` while it runs.
            let status = f(
                self.frame.head as *mut u8,
                root.as_u32(),
                res,
                u32::from(first),
            );
            if let Some(p) = self.panic.take() {
                return Err(Failed::Panic(p));
            }
            if status != 0 || self.failed.is_some() {
                return Err(self.gave_up(status));
            }
            let w = &mut *self.w;
            next = w.queue.add_but_next(self.plan, &w.memo, &mut w.work);
        }
        // SAFETY: the counters are three words of the frame.
        let (ops, tests) = unsafe { (*self.frame.counters, *self.frame.counters.add(1)) };
        let Some(entry) = self.copy(u64::from(entry)) else {
            return Err(Failed::Abort);
        };
        Ok(Unit {
            entry,
            sites: std::mem::take(&mut self.sites),
            blocks: self.blocks,
            ops: ops as usize,
            lookups: self.lookups,
            tests: tests as usize,
        })
    }

    fn count_block(&mut self) -> bool {
        self.blocks += 1;
        if self.blocks > self.cx.budget.max_blocks {
            // (The code goes on after a shim fails: where it ran out is taken now.)
            if self.failed.is_none() {
                self.over = Some(self.exceeded(BudgetKind::Blocks));
            }
            self.fail("over the budget of blocks");
            return false;
        }
        true
    }

    /// `Spec::exceeded`: the error for budget `budget` running out while stitching the
    /// block the frame names (its source position, or the last one met).
    fn exceeded(&self, budget: BudgetKind) -> SpecError {
        let prog = self.prog;
        // SAFETY: the counters are five words of the frame.
        let (current, located) =
            unsafe { (*self.frame.counters.add(3), *self.frame.counters.add(4)) };
        let block = |k: u64| {
            u32::try_from(k)
                .ok()
                .map(Block::from_u32)
                .filter(|b| b.index() < prog.blocks.len())
        };
        let current = block(current).unwrap_or(self.entry_block);
        let loc = match prog.layout(current).first_loc {
            l if l.is_known() => l,
            _ => block(located).map_or(SrcLoc::default(), |b| prog.layout(b).first_loc),
        };
        let limit = match budget {
            BudgetKind::Blocks => self.cx.budget.max_blocks,
            _ => self.cx.budget.max_ops,
        };
        SpecError::BudgetExceeded {
            budget,
            limit,
            block: prog.blocks[current].name.clone(),
            loc,
        }
    }

    // Values and blocks the code holds by number: an emitter whose values (or blocks)
    // are numbers already (the tape) has them held as they are, others through a table.
    // (The type tests are decided when the shims are compiled.)

    fn copy_block(&mut self, b: E::Block) -> u32 {
        number(&mut self.copies, b)
    }

    fn value(&mut self, v: E::Value) -> u32 {
        number(&mut self.vals, v)
    }

    fn val(&mut self, id: u64) -> Option<E::Value> {
        let v = numbered(&self.vals, id);
        if v.is_none() {
            self.fail(format!("no value {id}"));
        }
        v
    }

    /// The copy an edge's target `id` names ([`shim_root`] marks the unit's first copy
    /// with [`ENTRY_EDGE`]).
    fn edge_copy(&mut self, id: u64) -> Option<E::Block> {
        self.copy(id & !ENTRY_EDGE)
    }

    /// `Spec::widen_args`: `args`, the arguments of an edge to `id` without the unit
    /// invariants and the local arrays in memory, made all of the inputs of the unit's
    /// first copy if [`shim_root`] marked `id` as that copy. `false` when something is wrong
    /// (marked failed).
    #[inline(always)]
    fn widen(&mut self, id: u64, args: &mut Vec<E::Value>) -> bool {
        id & ENTRY_EDGE == 0 || self.widen_entry(args)
    }

    /// [`Rt::widen`] for an edge into the unit's first copy.
    #[cold]
    #[inline(never)]
    fn widen_entry(&mut self, args: &mut Vec<E::Value>) -> bool {
        for w in widenings(self.prog.layout(self.entry_block)) {
            let at = match w {
                Widening::Invariant(at, _) => at,
                Widening::Home(h) => h.at,
            } as usize;
            if at > args.len() {
                self.fail("too few arguments");
                return false;
            }
            let ok = match w {
                Widening::Invariant(_, r) => self.dyn_value(r).map(|v| args.insert(at, v)),
                Widening::Home(h) => self.load_home(h.reg, h.len, args, at),
            };
            if ok.is_none() {
                return false;
            }
        }
        true
    }

    /// The emitter's value that dynamic register `r` holds in the frame (for a local
    /// array in memory, the array).
    fn dyn_value(&mut self, r: Reg) -> Option<E::Value> {
        if r.index() >= self.ge.regs {
            self.fail(format!("register {r} out of the frame"));
            return None;
        }
        // SAFETY: `r` is below the frame's number of registers.
        let v = unsafe { *self.frame.d.add(r.index()) };
        self.val(u64::from(v))
    }

    /// `Spec::load_home`: the `len` elements of local array `r`, which lives in memory,
    /// loaded and put in `args` from `at` on.
    fn load_home(&mut self, r: Reg, len: u32, args: &mut Vec<E::Value>, at: usize) -> Option<()> {
        let a = self.dyn_value(r)?;
        let Some(elems) = load_elems(self.em, a, len) else {
            self.fail("a load without a result");
            return None;
        };
        args.splice(at..at, elems);
        Some(())
    }

    /// `Spec::with_homes`: `args`, `b`'s inputs in a dispatch block, made all of its
    /// inputs, the elements of its local arrays in memory loaded and put in their places.
    fn with_homes(&mut self, b: Block, args: &mut Vec<E::Value>) -> Option<()> {
        for h in &self.prog.layout(b).homes {
            if h.at as usize > args.len() {
                self.fail("too few arguments");
                return None;
            }
            self.load_home(h.reg, h.len, args, h.at as usize)?;
        }
        Some(())
    }

    fn copy(&mut self, id: u64) -> Option<E::Block> {
        let b = numbered(&self.copies, id);
        if b.is_none() {
            self.fail(format!("no copy {id}"));
        }
        b
    }

    /// `Spec::create_copy`.
    fn create_copy(&mut self, b: Block) -> u32 {
        let lay = self.prog.layout(b);
        match self.entry {
            Some(_) => {
                let made = match self.w.like.get(b.index()).copied().flatten() {
                    Some(l) => match self.copy(u64::from(l)) {
                        Some(l) => self.em.create_block_like(l, &lay.copy_types),
                        None => self.em.create_block(&lay.copy_types),
                    },
                    None => self.em.create_block(&lay.copy_types),
                };
                let id = self.copy_block(made);
                if let Some(l) = self.w.like.get_mut(b.index()) {
                    *l = Some(id);
                }
                id
            }
            None => {
                let res = self.em.create_block(&lay.input_types);
                let id = self.copy_block(res);
                self.entry = Some(id);
                id
            }
        }
    }

    /// `Spec::copy_of`: `None` over the budget.
    fn copy_of(&mut self, b: Block, key: &[Word]) -> Option<u32> {
        self.lookups += 1;
        let at = match self.w.memo.get(b, key) {
            Ok(res) => return Some(res),
            Err(at) => at,
        };
        if !self.count_block() {
            return None;
        }
        let res = self.create_copy(b);
        let k = self.w.memo.insert(at, b, key, res);
        self.w.work.push(k);
        Some(res)
    }

    /// `Spec::promotion`: the dispatch of block `b`'s promoted values over the values
    /// known for its site, then the exit out of the unit, in the current block; `inputs`
    /// are `b`'s dynamic inputs. `None` when something is wrong (marked failed).
    fn promotion(
        &mut self,
        b: Block,
        params: Vec<SVal>,
        live: Vec<SVal>,
        inputs: &[E::Value],
    ) -> Option<()> {
        let prog = self.prog;
        let promoted = match promoted_values(prog, b, inputs) {
            Ok(p) => p,
            Err(src) => {
                self.fail(format!("promoted variable {src} is not an input"));
                return None;
            }
        };
        let site = Site {
            block: b,
            params,
            live,
        };
        let ident = site.ident();
        if !self.sites.iter().any(|s| s.ident() == ident) {
            self.sites.push(site.clone());
        }
        let PromotionMode::Units { resolve, known } = &self.cx.mode else {
            self.fail("promotions inline");
            return None;
        };
        let global = resolve(&site);
        let known = known(global);
        if !promoted.is_empty() {
            self.inline_dispatch(b, &site, &promoted, inputs, known)?;
        }
        // The unit is left: its local arrays in memory go as their elements.
        if prog.layout(b).homes.is_empty() {
            self.em.promote(global, &promoted, inputs);
        } else {
            let mut all = inputs.to_vec();
            self.with_homes(b, &mut all)?;
            self.em.promote(global, &promoted, &all);
        }
        Some(())
    }

    /// `Spec::edge` into lazy root `b` with static inputs `key` (all of `b`'s) and dynamic
    /// inputs `inputs`: a jump to the copy this unit made for them (`Spec::made_for`), or
    /// else a promotion of no values out of the unit.
    fn lazy_jump(&mut self, b: Block, key: Vec<SVal>, inputs: &mut Vec<E::Value>) -> Option<()> {
        if let Some(copy) = self.made_for(b, &key, inputs)? {
            let target = self.copy(u64::from(copy))?;
            self.em.jump(target, inputs);
            return Some(());
        }
        self.promotion(b, key, Vec::new(), inputs)
    }

    /// `Spec::made_for`: the copy of `b` this unit made for static inputs `key` (all of
    /// `b`'s), with `inputs` made its arguments, if any.
    fn made_for(
        &mut self,
        b: Block,
        key: &[SVal],
        inputs: &mut Vec<E::Value>,
    ) -> Option<Option<u32>> {
        let narrow: Vec<Word> = narrow_key(self.prog, b, key)
            .iter()
            .map(|&v| Word::of(v))
            .collect();
        self.lookups += 1;
        match self.w.memo.get(b, &narrow) {
            Ok(copy) => {
                self.narrow_args(b, copy, inputs)?;
                Some(Some(copy))
            }
            Err(_) => Some(None),
        }
    }

    /// `Spec::narrow_args`: `b`'s dispatch inputs made the arguments of its copy `copy`:
    /// without the unit invariants, or, for the unit's first copy, with the elements of
    /// the local arrays in memory.
    fn narrow_args(&mut self, b: Block, copy: u32, args: &mut Vec<E::Value>) -> Option<()> {
        if self.entry == Some(copy) {
            return self.with_homes(b, args);
        }
        for &at in self.prog.layout(b).invariant_dispatch.iter().rev() {
            if at as usize >= args.len() {
                self.fail("too few arguments");
                return None;
            }
            args.remove(at as usize);
        }
        Some(())
    }

    /// `Spec::inline_dispatch`: `promoted` dispatched over the tuples in `known`, each to
    /// the copy of `b` with those values static; goes on in a fresh block for others.
    fn inline_dispatch(
        &mut self,
        b: Block,
        site: &Site,
        promoted: &[E::Value],
        inputs: &[E::Value],
        known: Vec<Vec<Const>>,
    ) -> Option<()> {
        // `b`'s copy for promoted values `values` (made if new), and its arguments: all
        // of `b`'s inputs for the unit's first copy, else without the unit invariants.
        let copy = |rt: &mut Self, values: &[Const]| {
            let key: Vec<Word> = narrow_key(rt.prog, b, &site.key(values))
                .iter()
                .map(|&v| Word::of(v))
                .collect();
            let mut made = || {
                let target = rt.copy_of(b, &key)?;
                let mut args = inputs.to_vec();
                rt.narrow_args(b, target, &mut args)?;
                Some((rt.copy(u64::from(target))?, args))
            };
            made().ok_or_else(|| SpecError::Internal("no copy for known values".into()))
        };
        let switch_to = |rt: &mut Self, b| rt.em.switch_to_block(b);
        match dispatch_known(self, |rt| &mut *rt.em, switch_to, promoted, known, copy) {
            Ok(()) => Some(()),
            Err(e) => {
                self.fail(e.to_string());
                None
            }
        }
    }

    fn op_at(&mut self, b: u64, i: u64) -> Option<&'a Op> {
        let op = u32::try_from(b)
            .ok()
            .map(Block::from_u32)
            .and_then(|b| self.prog.blocks.get(b))
            .and_then(|d| d.ops.get(i as usize));
        if op.is_none() {
            self.fail(format!("no operation {i} in block {b}"));
        }
        op
    }

    /// The static value of register `r` in the frame.
    /// The emitter's value for static value `v` (as an operand of an operation), or a
    /// failed run for none.
    #[inline(always)]
    fn static_operand(&mut self, v: Option<SVal>) -> Option<E::Value> {
        match v {
            Some(SVal::Scalar(c)) => Some(self.em.constant(c)),
            Some(SVal::Slice(k)) => match self.prog.header.param_types.get(k as usize) {
                Some(&ty) => Some(self.em.static_slice(k, ty)),
                None => {
                    self.fail(format!("static slice {k} is not a parameter"));
                    None
                }
            },
            None => {
                self.fail("a static operand unset");
                None
            }
        }
    }

    fn get_s(&self, r: Reg) -> Result<SVal, SpecError> {
        if r.index() >= self.ge.regs {
            return Err(SpecError::Internal(format!(
                "register {r} out of the frame"
            )));
        }
        // SAFETY: `r` is below the frame's number of registers.
        let (t, b) = unsafe { (*self.frame.st.add(r.index()), *self.frame.s.add(r.index())) };
        SVal::from_key_bits(t, b)
            .ok_or_else(|| SpecError::Internal(format!("static register {r} unset")))
    }

    /// The elements of local array `r` in the pool: where they start, and how many.
    fn elems(&mut self, r: Reg) -> Option<(usize, usize)> {
        let e = self.ge.arrays.get(r.index()).copied().flatten();
        if e.is_none() {
            self.fail(format!("{r} is not a local array"));
        }
        e.map(|(o, n, _)| (o as usize, n as usize))
    }

    /// The element type of the local array operation `op` reads or writes.
    fn elem_of(&mut self, op: &Op) -> Option<Scalar> {
        let arr = match *op {
            Op::ArrayLoad { arr, .. } | Op::ArrayStore { arr, .. } => arr,
            _ => return None,
        };
        self.ge
            .arrays
            .get(arr.index())
            .copied()
            .flatten()
            .map(|(_, _, e)| e)
    }

    /// The values of the `n` numbers at `src`, which holds `room` words, into `out`.
    fn load_vals(&mut self, src: *const u32, room: usize, n: u64, out: &mut Vec<E::Value>) -> bool {
        out.clear();
        if n as usize > room {
            self.fail("too many values");
            return false;
        }
        for k in 0..n as usize {
            // SAFETY: callers pass a buffer or a run of the pool of `room` words, and
            // `k < n <= room`.
            let id = unsafe { *src.add(k) };
            match self.val(u64::from(id)) {
                Some(v) => out.push(v),
                None => return false,
            }
        }
        true
    }
}

/// The number the code holds for `x`, a value or a block of the emitter: `x` itself if
/// it is a number already (the tape's), else its place in `table`. (The type test is
/// decided when the function is compiled.)
fn number<T: Copy + 'static>(table: &mut Vec<T>, x: T) -> u32 {
    if let Some(&n) = (&x as &dyn Any).downcast_ref::<u32>() {
        return n;
    }
    table.push(x);
    (table.len() - 1) as u32
}

/// The value or block [`number`] gave number `id`.
fn numbered<T: Copy + 'static>(table: &[T], id: u64) -> Option<T> {
    let n = u32::try_from(id).ok()?;
    match (&n as &dyn Any).downcast_ref::<T>() {
        Some(&x) => Some(x),
        None => table.get(n as usize).copied(),
    }
}

/// Runs `f` on the context behind `rt`, catching a panic (kept for the driver to raise
/// again) so that none unwinds into compiled code.
fn with_rt<'x, E: Emitter + 'x>(rt: *mut c_void, f: impl FnOnce(&mut Rt<'x, 'x, E>) -> u64) -> u64 {
    // SAFETY: compiled code passes back the head's `rt`, which the driver set to its
    // `Rt<E>`, which lives for the whole call and is not otherwise used while the code
    // runs (the lifetimes, erased in the pointer, are those of that call).
    let rt = unsafe { &mut *(rt as *mut Rt<'x, 'x, E>) };
    // (After a failure the run's work is thrown away: the emitter sees no more calls.)
    if rt.panic.is_some() || rt.failed.is_some() {
        return 0;
    }
    match catch_unwind(AssertUnwindSafe(|| f(&mut *rt))) {
        Ok(v) => v,
        Err(p) => {
            rt.panic = Some(p);
            0
        }
    }
}

extern "C" fn shim_stat<E: Emitter>(rt: *mut c_void, tag: u64, bits: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        match rt.static_operand(SVal::from_key_bits(tag as u8, bits)) {
            Some(v) => u64::from(rt.value(v)),
            None => 0,
        }
    })
}

/// What [`shim_setup`] returns: the run failed; the operation's result is in its
/// register; the operation faulted, and the fault was emitted, which ends the block.
const SETUP_FAILED: u64 = 0;
const SETUP_DONE: u64 = 1;
const SETUP_FAULT: u64 = 2;

extern "C" fn shim_setup<E: Emitter>(rt: *mut c_void, b: u64, i: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(&Op::Setup { dst, ref op, loc }) = rt.op_at(b, i) else {
            rt.fail("not a setup operation");
            return SETUP_FAILED;
        };
        let value = eval_setup(op, |r| rt.get_s(r), rt.cx.slices, rt.cx.hosts);
        match value {
            Ok(Some(v)) if dst.index() < rt.ge.regs => {
                let (t, w) = v.key_bits();
                // SAFETY: `dst` is below the frame's number of registers.
                unsafe {
                    *rt.frame.st.add(dst.index()) = t;
                    *rt.frame.s.add(dst.index()) = w;
                }
                SETUP_DONE
            }
            // A static fault: emitted as the interpreted stitcher does (`emit_fault`).
            Ok(None) => {
                let (top, regs) = match fault_op(rt.prog, op) {
                    Ok(x) => x,
                    Err(e) => {
                        rt.fail(e.to_string());
                        return SETUP_FAILED;
                    }
                };
                let mut args = std::mem::take(&mut rt.scratch);
                args.clear();
                for &r in &regs {
                    match rt.static_operand(rt.get_s(r).ok()) {
                        Some(v) => args.push(v),
                        None => break,
                    }
                }
                let made = args.len() == regs.len();
                if made {
                    rt.em.op(&top, &args, loc);
                    rt.em.trap(loc);
                }
                rt.scratch = args;
                if made {
                    SETUP_FAULT
                } else {
                    SETUP_FAILED
                }
            }
            Ok(Some(_)) => {
                rt.fail("a register out of the frame");
                SETUP_FAILED
            }
            Err(e) => {
                rt.fail(e.to_string());
                SETUP_FAILED
            }
        }
    })
}

extern "C" fn shim_op<E: Emitter>(rt: *mut c_void, b: u64, i: u64, n: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(Op::Emit { op, loc, .. }) = rt.op_at(b, i) else {
            rt.fail("not a template operation");
            return u64::from(NONE);
        };
        let mut args = std::mem::take(&mut rt.scratch);
        let ok = rt.load_vals(rt.frame.buf, rt.ge.buf, n, &mut args);
        let r = match ok {
            true => rt.em.op(op, &args, *loc),
            false => None,
        };
        rt.scratch = args;
        r.map_or(u64::from(NONE), |v| u64::from(rt.value(v)))
    })
}

extern "C" fn shim_enter<E: Emitter>(rt: *mut c_void, copy: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(b) = rt.copy(copy) else { return 0 };
        rt.em.switch_to_block(b);
        let mut params = std::mem::take(&mut rt.scratch);
        params.clear();
        rt.em.block_params(b, &mut params);
        let n = params.len();
        if n > rt.ge.buf {
            rt.fail("too many block parameters");
        } else {
            for (k, &v) in params.iter().enumerate() {
                let id = rt.value(v);
                // SAFETY: the buffer holds `ge.buf` words, and `k < n <= ge.buf`.
                unsafe { *rt.frame.buf.add(k) = id };
            }
        }
        rt.scratch = params;
        n as u64
    })
}

extern "C" fn shim_create<E: Emitter>(rt: *mut c_void, b: u64) -> u64 {
    with_rt::<E>(rt, |rt| match u32::try_from(b) {
        Ok(b) if (b as usize) < rt.prog.blocks.len() => match rt.count_block() {
            true => u64::from(rt.create_copy(Block::from_u32(b))),
            false => 0,
        },
        _ => {
            rt.fail("no such block");
            0
        }
    })
}

extern "C" fn shim_root<E: Emitter>(rt: *mut c_void, b: u64, n: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let b = match u32::try_from(b) {
            Ok(b) if (b as usize) < rt.prog.blocks.len() => Block::from_u32(b),
            _ => {
                rt.fail("no such block");
                return 0;
            }
        };
        if n as usize > rt.ge.key {
            rt.fail("key too long");
            return 0;
        }
        // SAFETY: the key buffer holds `ge.key` pairs of words, the layout of `Word`,
        // and `n <= ge.key`; nothing writes it while the slice is read.
        let key = unsafe { std::slice::from_raw_parts(rt.frame.key as *const Word, n as usize) };
        if key.iter().any(|w| w.tag == u64::from(UNSET)) {
            rt.fail("a key value unset");
            return 0;
        }
        // (An edge back into the unit's first copy passes its invariants too: the shim
        // that emits the edge adds them, `Rt::widen`. A lazy block's copy, which
        // `shim_stub` returns, has its arguments in full already.)
        match rt.copy_of(b, key) {
            Some(c) if rt.entry == Some(c) => u64::from(c) | ENTRY_EDGE,
            Some(c) => u64::from(c),
            None => {
                rt.fail("over the budget");
                0
            }
        }
    })
}

extern "C" fn shim_jump<E: Emitter>(rt: *mut c_void, copy: u64, n: u64, which: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(t) = rt.edge_copy(copy) else {
            return 0;
        };
        let src = if which == 0 {
            rt.frame.buf
        } else {
            rt.frame.buf2
        };
        let mut args = std::mem::take(&mut rt.scratch);
        if rt.load_vals(src, rt.ge.buf, n, &mut args) && rt.widen(copy, &mut args) {
            rt.em.jump(t, &args);
        } else {
            rt.fail("bad jump");
        }
        rt.scratch = args;
        0
    })
}

extern "C" fn shim_brif<E: Emitter>(
    rt: *mut c_void,
    cond: u64,
    t: u64,
    n: u64,
    e: u64,
    m: u64,
) -> u64 {
    with_rt::<E>(rt, |rt| {
        let (t_id, e_id) = (t, e);
        let (Some(c), Some(t), Some(e)) = (rt.val(cond), rt.edge_copy(t), rt.edge_copy(e)) else {
            return 0;
        };
        let (mut a1, mut a2) = (
            std::mem::take(&mut rt.scratch),
            std::mem::take(&mut rt.scratch2),
        );
        let ok = rt.load_vals(rt.frame.buf, rt.ge.buf, n, &mut a1)
            && rt.load_vals(rt.frame.buf2, rt.ge.buf, m, &mut a2)
            && rt.widen(t_id, &mut a1)
            && rt.widen(e_id, &mut a2);
        if ok {
            rt.em.brif(c, (t, &a1), (e, &a2));
        } else {
            rt.fail("bad branch");
        }
        (rt.scratch, rt.scratch2) = (a1, a2);
        0
    })
}

extern "C" fn shim_case<E: Emitter>(rt: *mut c_void, k: u64, t: u64, n: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(c) = rt.edge_copy(t) else {
            return 0;
        };
        let mut args = Vec::new();
        if rt.load_vals(rt.frame.buf, rt.ge.buf, n, &mut args) && rt.widen(t, &mut args) {
            rt.cases.push((k, c, args));
        } else {
            rt.fail("bad case");
        }
        0
    })
}

extern "C" fn shim_switch<E: Emitter>(rt: *mut c_void, arg: u64, d: u64, n: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let d_id = d;
        let (Some(a), Some(d)) = (rt.val(arg), rt.edge_copy(d)) else {
            return 0;
        };
        let mut args = std::mem::take(&mut rt.scratch);
        if rt.load_vals(rt.frame.buf, rt.ge.buf, n, &mut args) && rt.widen(d_id, &mut args) {
            let cases = std::mem::take(&mut rt.cases);
            rt.em.switch(a, &cases, (d, &args));
        } else {
            rt.fail("bad switch");
        }
        rt.scratch = args;
        0
    })
}

extern "C" fn shim_home<E: Emitter>(rt: *mut c_void, r: u64, at: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let home = u32::try_from(r)
            .ok()
            .map(Reg::from_u32)
            .and_then(|r| rt.prog.home(r));
        let Some((elem, len)) = home else {
            rt.fail(format!("register {r} is not a local array in memory"));
            return 0;
        };
        let mut init = std::mem::take(&mut rt.scratch);
        init.clear();
        let ok = if at == u64::from(NONE) {
            true
        } else {
            let fits = (at as usize)
                .checked_add(len as usize)
                .is_some_and(|end| end <= rt.ge.buf);
            // SAFETY: `at + len` is within the buffer's `ge.buf` words (checked first).
            fits && rt.load_vals(
                unsafe { rt.frame.buf.add(at as usize) },
                len as usize,
                u64::from(len),
                &mut init,
            )
        };
        let a = match ok {
            true => Some(rt.em.local_array(elem, len, &init)),
            false => {
                rt.fail("bad local array");
                None
            }
        };
        rt.scratch = init;
        a.map_or(0, |a| u64::from(rt.value(a)))
    })
}

extern "C" fn shim_home_op<E: Emitter>(
    rt: *mut c_void,
    b: u64,
    i: u64,
    index: u64,
    value: u64,
) -> u64 {
    with_rt::<E>(rt, |rt| {
        // (`Spec::home_op`, with the operands the code made.)
        let Some(op) = rt.op_at(b, i) else {
            return 0;
        };
        match *op {
            Op::ArrayNew { dst, elem, len } => {
                if let Some(a) = rt.dyn_value(dst) {
                    zero_home(rt.em, a, elem, len);
                }
                0
            }
            Op::ArrayLoad { arr, loc, .. } => {
                let (Some(a), Some(i)) = (rt.dyn_value(arr), rt.val(index)) else {
                    return 0;
                };
                match rt.em.op(&TOp::Load, &[a, i], loc) {
                    Some(v) => u64::from(rt.value(v)),
                    None => {
                        rt.fail("a load without a result");
                        0
                    }
                }
            }
            Op::ArrayStore { arr, loc, .. } => {
                let (Some(a), Some(i), Some(v)) = (rt.dyn_value(arr), rt.val(index), rt.val(value))
                else {
                    return 0;
                };
                rt.em.op(&TOp::Store, &[a, i, v], loc);
                0
            }
            _ => {
                rt.fail("not an access to a local array");
                0
            }
        }
    })
}

extern "C" fn shim_ret<E: Emitter>(rt: *mut c_void, has: u64, v: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let v = match has {
            0 => None,
            _ => match rt.val(v) {
                Some(v) => Some(v),
                None => return 0,
            },
        };
        rt.em.ret(v);
        0
    })
}

extern "C" fn shim_trap<E: Emitter>(rt: *mut c_void, b: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let term = u32::try_from(b)
            .ok()
            .map(Block::from_u32)
            .and_then(|b| rt.prog.blocks.get(b))
            .map(|d| &d.term);
        match term {
            Some(Term::Trap(loc)) => rt.em.trap(*loc),
            _ => rt.fail("not a trap"),
        }
        0
    })
}

extern "C" fn shim_array_load<E: Emitter>(rt: *mut c_void, b: u64, i: u64, index: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(op) = rt.op_at(b, i) else { return 0 };
        let (
            Op::ArrayLoad {
                dst: _, arr, loc, ..
            },
            Some(elem),
        ) = (op, rt.elem_of(op))
        else {
            rt.fail("not an array load");
            return 0;
        };
        let (Some((at, n)), Some(k)) = (rt.elems(*arr), rt.val(index)) else {
            return 0;
        };
        let mut elems = std::mem::take(&mut rt.scratch);
        // SAFETY: `at..at + n` lies in the pool ([`CompiledGe::arrays`]).
        let ok = rt.load_vals(unsafe { rt.frame.a.add(at) }, n, n as u64, &mut elems);
        let v = ok.then(|| rt.em.array_load(elem, &elems, k, *loc));
        rt.scratch = elems;
        v.map_or(0, |v| u64::from(rt.value(v)))
    })
}

extern "C" fn shim_array_store<E: Emitter>(
    rt: *mut c_void,
    b: u64,
    i: u64,
    index: u64,
    value: u64,
) -> u64 {
    with_rt::<E>(rt, |rt| {
        let Some(op) = rt.op_at(b, i) else { return 0 };
        let (Op::ArrayStore { arr, loc, .. }, Some(elem)) = (op, rt.elem_of(op)) else {
            rt.fail("not an array store");
            return 0;
        };
        let (Some((at, n)), Some(k), Some(v)) = (rt.elems(*arr), rt.val(index), rt.val(value))
        else {
            return 0;
        };
        let mut elems = std::mem::take(&mut rt.scratch);
        // SAFETY: `at..at + n` lies in the pool ([`CompiledGe::arrays`]).
        if rt.load_vals(unsafe { rt.frame.a.add(at) }, n, n as u64, &mut elems) {
            rt.em.array_store(elem, &mut elems, k, v, *loc);
            for (j, &e) in elems.iter().enumerate() {
                let id = rt.value(e);
                // SAFETY: `j < n`, within the array's run of the pool.
                unsafe { *rt.frame.a.add(at + j) = id };
            }
        }
        rt.scratch = elems;
        0
    })
}

extern "C" fn shim_keep<E: Emitter>(rt: *mut c_void, v: u64) -> u64 {
    with_rt::<E>(rt, |rt| {
        if let Some(v) = rt.val(v) {
            rt.em.keep(v);
        }
        0
    })
}

extern "C" fn shim_count<E: Emitter>(rt: *mut c_void) -> u64 {
    with_rt::<E>(rt, |rt| u64::from(rt.count_block()))
}

/// The static inputs (`statics` key words, the first `params` of them parameters) and
/// the `n` dynamic inputs in the buffer of block `b`, as `shim_dispatch` and `shim_stub`
/// receive them; `None` (the run marked failed) if they are not well formed.
fn dispatch_inputs<E: Emitter>(
    rt: &mut Rt<E>,
    b: u64,
    params: u64,
    statics: u64,
    (n, src): (u64, *const u32),
    inputs: &mut Vec<E::Value>,
) -> Option<(Block, Vec<SVal>, Vec<SVal>)> {
    let b = match u32::try_from(b) {
        Ok(b) if (b as usize) < rt.prog.blocks.len() => Block::from_u32(b),
        _ => {
            rt.fail("no such block");
            return None;
        }
    };
    if statics as usize > rt.ge.key || params > statics {
        rt.fail("key too long");
        return None;
    }
    let mut key = Vec::with_capacity(statics as usize);
    for k in 0..statics as usize {
        // SAFETY: the key buffer holds `2 * ge.key` words, and `k < statics <= ge.key`.
        let (t, w) = unsafe { (*rt.frame.key.add(2 * k), *rt.frame.key.add(2 * k + 1)) };
        match SVal::from_key_bits(t as u8, w) {
            Some(v) => key.push(v),
            None => {
                rt.fail("a key value unset");
                return None;
            }
        }
    }
    let live = key.split_off(params as usize);
    if !rt.load_vals(src, rt.ge.buf, n, inputs) {
        return None;
    }
    Some((b, key, live))
}

extern "C" fn shim_dispatch<E: Emitter>(
    rt: *mut c_void,
    b: u64,
    params: u64,
    statics: u64,
    n: u64,
) -> u64 {
    with_rt::<E>(rt, |rt| {
        let mut inputs = std::mem::take(&mut rt.scratch2);
        let buf = (n, rt.frame.buf as *const u32);
        if let Some((b, mut params, mut live)) =
            dispatch_inputs(rt, b, params, statics, buf, &mut inputs)
        {
            if rt.prog.blocks[b].promote.is_empty() {
                params.append(&mut live);
                rt.lazy_jump(b, params, &mut inputs);
            } else {
                rt.promotion(b, params, live, &inputs);
            }
        }
        rt.scratch2 = inputs;
        0
    })
}

extern "C" fn shim_stub<E: Emitter>(
    rt: *mut c_void,
    b: u64,
    params: u64,
    statics: u64,
    n: u64,
    which: u64,
) -> u64 {
    with_rt::<E>(rt, |rt| {
        let dst = if which == 0 {
            rt.frame.buf
        } else {
            rt.frame.buf2
        };
        let mut inputs = std::mem::take(&mut rt.scratch2);
        let made = (|| {
            let (b, mut params, mut live) =
                dispatch_inputs(rt, b, params, statics, (n, dst as *const u32), &mut inputs)?;
            if rt.prog.blocks[b].promote.is_empty() {
                // A lazy block: the copy this unit made, or a promotion of no values.
                params.append(&mut live);
                if let Some(copy) = rt.made_for(b, &params, &mut inputs)? {
                    return Some(copy);
                }
            }
            let stub = rt.em.create_block(&rt.prog.layout(b).dispatch_types);
            let stub = rt.copy_block(stub);
            rt.stubs.push((stub, b, params, live));
            Some(stub)
        })();
        let r = match made {
            // The arguments (narrowed for a copy made) back into the buffer.
            Some(copy) if inputs.len() <= rt.ge.buf => {
                for (k, &v) in inputs.iter().enumerate() {
                    let id = rt.value(v);
                    // SAFETY: the buffer holds `ge.buf` words, and `k < ge.buf`.
                    unsafe { *dst.add(k) = id };
                }
                u64::from(copy) | (inputs.len() as u64) << 32
            }
            _ => {
                rt.fail("bad dispatch");
                0
            }
        };
        rt.scratch2 = inputs;
        r
    })
}

extern "C" fn shim_stubs<E: Emitter>(rt: *mut c_void) -> u64 {
    with_rt::<E>(rt, |rt| {
        for (stub, b, params, live) in std::mem::take(&mut rt.stubs) {
            let Some(block) = rt.copy(u64::from(stub)) else {
                return 0;
            };
            rt.em.switch_to_block(block);
            let mut args = Vec::new();
            rt.em.block_params(block, &mut args);
            if rt.promotion(b, params, live, &args).is_none() {
                return 0;
            }
        }
        0
    })
}

//! The stitch tier: specialized code made by copying **stencils** (machine code compiled
//! ahead by Cranelift) and patching their **holes**, with no Cranelift call per unit.
//!
//! **Values live in a frame.** A stitch-tier unit keeps every value in a word of a frame
//! (the call context's `frame`: 128 words on the caller's stack to begin with, grown by a
//! unit's prologue through `dyc_frame` when it needs more); a
//! stencil reads its operands from frame words, writes its result to one, and continues
//! with the next stencil. A stencil is a Cranelift function in the `tail` convention,
//! `(ctx, frame, acc, facc, r1, r2, r3) -> (value, value2, status)`, that ends in a tail
//! call of a colocated name (`jmp rel32`, an `X86CallPCRel4` relocation): its
//! **continuation**, to which it passes the **cache registers** on (`acc`, `r1` to `r3`:
//! `rdx`, `rcx`, `r8`, `r9`; `facc`, `xmm0`, for `f64`) unchanged, but the one its result
//! is left in. The emitter knows which frame word each register holds a copy of, reads an
//! operand from the register instead of its word, and carries what they hold into a block
//! entered by falling through or by one jump; a loop head (told by the replay, with the
//! parameters its loop reads) has those parameters loaded into registers before the
//! loop, and the loop's back edges put the new values there, so a value carried around a
//! loop stays in a register (see `StencilEmitter::establish`), and those the loop only
//! carries leave their registers to the values it makes. Copied stencils are
//! chained by patching those displacements; a stencil whose code ends with the jump to the
//! next one copied loses those five bytes and falls through, and a block whose only code
//! would be a jump moving nothing gets none (jumps to it go where it leads; see
//! `StencilEmitter::jump`); a jump back to a loop's small test copies the test instead
//! (`StencilEmitter::copy_block`), and the stores and jumps found dead once the unit is
//! complete are cut out of its code (`StencilEmitter::compact`); then a small loop that
//! straddles two 64-byte fetch windows is moved to start on one
//! (`StencilEmitter::align_loops`). Faults return the status, as in the optimizing tier:
//! a stencil's body is built by the same lowering ([`crate::clif::ClifEmitter`]), so both
//! tiers share one definition of every operation, its checks and its faults.
//!
//! **Holes.** A frame word's byte offset is a load or store displacement; a constant
//! operand is an immediate; a fault site record, an inline cache or a site number is a
//! constant in code. Each is built from a *magic* value, and the stencil is compiled twice
//! with two different sets of magic values: the bytes where the two compilations differ
//! must be exactly the places where each hole's two magic values stand (4 or 8 bytes,
//! little-endian), or the stencil is refused. This finds every hole, including a constant
//! Cranelift used twice, and refuses any stencil in which Cranelift transformed a hole's
//! value (negated it, folded it into another constant) instead of trusting a single
//! compilation. A 4-byte hole is only patched with a value in `0..2^31`, on which sign and
//! zero extension agree; larger constants use a stencil variant with an 8-byte hole
//! (`movabs`), narrow types and faulting operations go through frame words. Calls of the
//! runtime's helpers and of generic code are absolute addresses (`Abs8` relocations).
//!
//! **Stencils are made once per process** (the runtime keeps one [`StencilLib`] for all its
//! instances) and kept (a few hundred per program: one per operation, operand types,
//! operand forms and result register). The runtime makes ahead, when a program is
//! compiled, what its generic code copies with the common variants of each
//! ([`StencilLib::make_variants`]: operands in frame words, in the accumulator, as
//! constants; and what strength reduction turns its multiplications and divisions
//! into), its regions' entries, and the moves every unit uses
//! ([`StencilLib::make_moves`]). A unit that needs a stencil not made (a variant with its
//! operands or result in other cache registers) does what the library's [`Misses`] says;
//! by default it copies the variant made ahead instead (operands read from their frame
//! words, which a register only ever holds a copy of, and constants put in frame words
//! where no variant with them was made: `StencilEmitter::in_words`; the result in the
//! register it was to go to if that variant is made, which the worker makes first, for
//! the operations of the generic code, else in the accumulator), and the library's
//! worker thread makes the missing one, so that units do not wait for Cranelift and the
//! units stitched after it get their registers. A unit that falls back may change what
//! the registers hold after it, so the next ones may miss other variants: the
//! interpreter's six programs stop falling back after three rounds of specializations,
//! and then make exactly the code they make with every stencil made at once
//! (`tests/stencils.rs`). A unit is made by
//! [`StencilEmitter`], a [`Backend`] behind the fold layer like the Cranelift backend; its
//! code is position-independent (continuations are relative within the unit, everything
//! else absolute), so the runtime copies it into executable memory of its own.
//!
//! x86-64 only: elsewhere [`StencilLib::supported`] is false and the runtime uses the
//! Cranelift tier.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, RwLock};

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::ir::{
    self, types, ExternalName, InstBuilder, MemFlagsData, UserExternalName, UserFuncName,
};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::FinalizedRelocTarget;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

use crate::abi::{self, abi_types, ctx, unit_signature};
use crate::clif::{clif_type, elem_size, CVal, ClifEmitter, ClifOptions, Hooks};
use crate::fold::{BCase, Backend};
use crate::ops::{BinaryOp, Const};
use crate::template::{FaultKind, TOp};
use crate::types::{Scalar, SrcLoc, Type};

/// How an operand reaches a stencil.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// A scalar in a frame word.
    Slot(Scalar),
    /// A constant scalar in code: a 4-byte hole (`false`) or an 8-byte one (`true`).
    Imm(Scalar, bool),
    /// A slice in two frame words (pointer, length).
    Slice(Scalar),
    /// A slice whose pointer and length are constants (8-byte holes).
    ConstSlice(Scalar),
    /// A scalar in the accumulator: the register the stencil before left its result in
    /// (`f64` results have an accumulator of their own).
    Acc(Scalar),
    /// A small constant compiled into the stencil, no hole: a shift's amount, which x86
    /// encodes in one byte (too small for a hole), so one stencil per amount (at most 64
    /// per operation and type, made when first used).
    Baked(Scalar, u8),
    /// A scalar in cache register `k` (`1..=3`; register 0 is the accumulator, [`Form::Acc`]):
    /// every stencil passes the cache registers on unchanged unless it writes one.
    Reg(Scalar, u8),
}

/// The operand forms of a stencil (inline: keys are made for every copy).
pub type Forms = smallvec::SmallVec<[Form; 3]>;

/// The operand words of a stencil copy (inline, for the same reason).
type Words = smallvec::SmallVec<[u64; 4]>;

/// A callee, as a stencil that calls it is keyed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CalleeKey {
    /// Generic code of a module function taking these types (its address is patched).
    Func(Vec<Type>),
    /// Host function number `n`.
    Host(u32),
}

/// What a stencil does: the key of the stencil library.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A template operation (calls of module functions with callee 0: the callee is a
    /// patched address).
    Op {
        op: TOp,
        forms: Forms,
        callee: Option<CalleeKey>,
        /// The cache register a scalar result is left in besides its frame word (0: the
        /// accumulator; an `f64` result is always left in its own).
        dst: u8,
    },
    /// A frame word set to a constant (4- or 8-byte hole).
    Set(bool),
    /// A frame word copied to another.
    Move,
    /// A frame word loaded into cache register `k` (before a jump to a block that
    /// expects it there).
    Reload(u8),
    /// Cache register `k` stored into a frame word (a move whose source it holds).
    Spill(u8),
    /// Cache register `j` copied into cache register `k` (before a jump to a block that
    /// expects the word `j` holds in `k`).
    Xfer(u8, u8),
    /// A constant (4- or 8-byte hole) put in cache register `k`, stored nowhere (a loop
    /// head's parameter whose frame word was just set to it).
    SetReg(u8, bool),
    /// A scalar of this type copied from a frame word to a frame byte offset (an element
    /// of an array in the frame).
    MoveTo(Scalar),
    /// A frame word set to the frame's address plus a constant.
    FrameAddr,
    /// A branch on a `bool` (a frame word or the accumulator): continuation 1 when true,
    /// 0 when false.
    Branch(Form),
    /// A comparison branched on, its `bool` written nowhere (a compare and a conditional
    /// jump): continuation 1 when true, 0 when false.
    CmpBranch {
        op: TOp,
        forms: Forms,
    },
    /// Continuation 1 when a scalar (a frame word or the accumulator; zero-extended)
    /// equals a constant (4- or 8-byte hole), else 0.
    CaseEq(Form, bool),
    Ret(Option<Form>),
    Trap,
    BoundsCheck(Form, Form),
    /// Counts one block entry against the context's fuel.
    Fuel,
    /// Leaves the unit at a promotion site: `promoted` scalars and `live` values (in frame
    /// words, or scalars in the cache registers that hold them); `inline`: probe the
    /// site's inline cache first.
    Promote {
        promoted: Vec<Form>,
        live: Vec<Form>,
        inline: bool,
    },
    /// A unit's entry: takes the unit signature of these types, makes room in the frame
    /// and stores the inputs' words at its start.
    Prologue(Vec<Type>),
}

impl Form {
    /// The form in 16 bits, never 0: kind (3 bits, from 1), scalar type (5), and the
    /// hole's width or the baked amount (8).
    fn pack(self) -> u128 {
        let (kind, s, extra) = match self {
            Form::Slot(s) => (1, s, 0),
            Form::Imm(s, wide) => (2, s, u8::from(wide)),
            Form::Slice(s) => (3, s, 0),
            Form::ConstSlice(s) => (4, s, 0),
            Form::Acc(s) => (5, s, 0),
            Form::Baked(s, amount) => (6, s, amount),
            Form::Reg(s, k) => (7, s, k),
        };
        kind | u128::from(s as u8) << 3 | u128::from(extra) << 8
    }

    /// Up to four forms in 64 bits (an absent form is 0).
    fn pack_all(forms: &[Form]) -> Option<u128> {
        (forms.len() <= 4).then(|| {
            forms
                .iter()
                .enumerate()
                .fold(0, |m, (k, f)| m | f.pack() << (16 * k))
        })
    }
}

impl TOp {
    /// The operation in 12 bits (not calls): kind (4 bits) and operator or type (8).
    fn pack(&self) -> Option<u128> {
        let (kind, sub) = match self {
            TOp::Unary(o) => (1, *o as u8),
            TOp::Binary(o) => (2, *o as u8),
            TOp::Cmp(o) => (3, *o as u8),
            TOp::Select => (4, 0),
            TOp::Cast(s) => (5, *s as u8),
            TOp::Len => (6, 0),
            TOp::Load => (7, 0),
            TOp::Store => (8, 0),
            TOp::Call { .. } => return None,
        };
        Some(kind | u128::from(sub) << 4)
    }
}

impl Key {
    /// The key in one number, for the keys of the copies a unit makes most (operations
    /// that call nothing, moves, branches): a thread looks those up by the number, with
    /// no walk of the key's parts to hash or compare it. Distinct keys pack to distinct
    /// numbers (the low 5 bits are the variant); `None` for the others.
    fn pack(&self) -> Option<u128> {
        let (variant, payload) = match self {
            Key::Op {
                op,
                forms,
                callee: None,
                dst,
            } => (
                1,
                op.pack()? | Form::pack_all(forms)? << 12 | u128::from(*dst) << 76,
            ),
            Key::Set(wide) => (2, u128::from(*wide)),
            Key::Move => (3, 0),
            Key::Reload(k) => (4, u128::from(*k)),
            Key::Spill(k) => (5, u128::from(*k)),
            Key::Xfer(j, k) => (16, u128::from(*j) | u128::from(*k) << 8),
            Key::SetReg(k, wide) => (17, u128::from(*k) | u128::from(*wide) << 8),
            Key::MoveTo(s) => (6, u128::from(*s as u8)),
            Key::FrameAddr => (7, 0),
            Key::Branch(f) => (8, f.pack()),
            Key::CmpBranch { op, forms } => (9, op.pack()? | Form::pack_all(forms)? << 12),
            Key::CaseEq(f, wide) => (10, f.pack() | u128::from(*wide) << 16),
            Key::Ret(None) => (11, 0),
            Key::Ret(Some(f)) => (12, f.pack()),
            Key::Trap => (13, 0),
            Key::BoundsCheck(a, b) => (14, a.pack() | b.pack() << 16),
            Key::Fuel => (15, 0),
            _ => return None,
        };
        Some(variant | payload << 5)
    }
}

/// What a hole is filled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Word `k` of the operands (a frame word's byte offset, or a constant).
    Arg(u16),
    /// Word `k` of the result (a frame word's byte offset).
    Res(u16),
    /// A fault site record of this kind, at the instance's source position.
    Fault(FaultKind),
    /// The inline cache of the instance's promotion site.
    InlineCache,
    /// The instance's promotion site number.
    Site,
    /// The frame words the unit needs.
    FrameWords,
}

/// A runtime helper a stencil calls (system ABI), or a callee's generic code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Import {
    HostCall,
    Promote,
    Fmod,
    Frame,
    Callee,
}

const IMPORTS: [Import; 5] = [
    Import::HostCall,
    Import::Promote,
    Import::Fmod,
    Import::Frame,
    Import::Callee,
];

/// The namespace of continuation names and of imports in stencil functions.
const CONT_NS: u32 = 1;
const IMPORT_NS: u32 = 2;

/// One place a hole stands (a hole Cranelift used twice stands in two places).
#[derive(Clone, Copy, Debug)]
struct Hole {
    at: u32,
    /// Which hole: the order the stencil's builder asked for them.
    index: u16,
    wide: bool,
    role: Role,
}

/// One stencil: code, holes, continuations and imports.
#[derive(Clone, Debug)]
pub struct Stencil {
    code: Box<[u8]>,
    holes: Vec<Hole>,
    /// Holes asked for (some may stand nowhere).
    nholes: usize,
    /// `rel32` fields of continuation `k`.
    conts: Vec<(u32, u8)>,
    /// `Abs8` fields: import and addend.
    imports: Vec<(u32, Import, i64)>,
    /// Bytes at the end that only go to continuation `tail_cont` (its `jmp`, and the
    /// `nop` left of the epilogue before it in a stencil without frame), dropped when
    /// that continuation is the code that follows; 0 if the code does not end so.
    tail: u8,
    tail_cont: u8,
    /// Machine instructions in those bytes.
    tail_insts: u8,
    /// A two-way branch whose conditional jump alone leads to continuation 1: the offset
    /// of that jump's `rel32` and of its end. Copied up to that end, with the `rel32`
    /// patched to continuation 1's block, the stencil goes there in one jump and falls
    /// through to the code that follows otherwise (see [`branch_cut`]).
    cut: Option<(u32, u32)>,
    /// A check whose failure path is cold: the offset of the `rel32` of the conditional
    /// jump to it, and where the cold code starts (it runs to the end). Copied with the
    /// code that follows as its continuation, the hot part (up to that jump) falls through
    /// to it, and the cold part goes to the end of the unit (see [`cold_split`]).
    cold: Option<(u32, u32)>,
    /// Machine instructions (for statistics).
    pub insts: u32,
}

/// Why a stencil or a stitch-tier unit could not be made (the runtime then uses the
/// Cranelift tier for the unit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StencilError(pub String);

impl std::fmt::Display for StencilError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stitch tier: {}", self.0)
    }
}

/// What a unit being stitched does when it needs a stencil that was not made ahead (a
/// variant of an operation with its operands and result in cache registers other than
/// the ones made with the program, or an operation the generic code never copied).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Misses {
    /// It uses a variant made ahead (operands read from their frame words, constants too
    /// if need be, the result in its register or the accumulator), and the library's
    /// worker thread makes the missing one for later units: specializing never waits for
    /// Cranelift (unless no variant was made ahead either: an operation neither the
    /// generic code nor its strength reductions have), and the code gets its registers
    /// back once the worker is done.
    #[default]
    Background,
    /// It makes the missing stencil at once (about 100 us of Cranelift each): the best
    /// code from the first unit, at the cost of that unit's latency.
    Make,
    /// It uses a variant made ahead and nothing makes the missing one: the code a unit
    /// gets does not depend on what was stitched before or on timing.
    Fallback,
}

/// How many stencils a library made, and where ([`StencilLib::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StencilCounts {
    /// Made ahead: with a program's generic code, a region's entries, the library's
    /// register moves.
    pub ahead: usize,
    /// Made by a unit being stitched, which waited for them.
    pub while_stitching: usize,
    /// Made by the worker thread, for units stitched later.
    pub background: usize,
    /// Stencil copies that used a variant made ahead because the one asked for was
    /// missing or refused.
    pub fallbacks: usize,
}

/// A library's locks, held across a fork ([`StencilLib::hold_for_fork`]).
pub struct ForkGuard<'a> {
    _wanted: std::sync::MutexGuard<'a, Wanted>,
    _stencils: std::sync::RwLockWriteGuard<'a, Made>,
}

/// A library's stencils by key, made or refused. (Keys are the library's own, so a fast
/// hash does: with the standard one, hashing keys took about 3% of the instructions of
/// the units the indirect-jumps program's promotions stitched while it ran.)
type Made = HashMap<Key, Result<Arc<Stencil>, StencilError>, rustc_hash::FxBuildHasher>;

/// The keys units asked for and did not find, waiting for the worker thread.
#[derive(Default)]
struct Wanted {
    /// The keys units wanted, oldest first.
    /// The keys units wanted, then those made ahead in the background (see
    /// `StencilLib::make_variants`), each oldest first: the worker takes the first before
    /// the second.
    queues: [std::collections::VecDeque<Key>; 2],
    /// The keys queued or being made (each is queued once; the worker takes a key off
    /// its queue when it starts making it, and out of this set when it is made).
    queued: std::collections::HashSet<Key, rustc_hash::FxBuildHasher>,
    /// The process the worker thread runs in, if it runs.
    worker: Option<u32>,
    /// The library was dropped: the worker ends.
    closed: bool,
    /// The worker found nothing to do for a while and waits to be woken (by the next key
    /// queued, [`StencilLib::settle`] or the library's drop), not polling.
    asleep: bool,
}

/// The stencils of one runtime, made ahead or on first use, and kept.
pub struct StencilLib {
    shared: Arc<Shared>,
    /// A number no other library of the process has (threads' [`Scratch`] caches say
    /// which library their stencils came from).
    id: u64,
    misses: Misses,
}

/// How soon the worker thread looks at the queue after making a stencil, and at most how
/// long it waits before it looks again when the queue stays empty (after a wait this long
/// finds it empty, the worker sleeps until a key is queued).
const POLL_MIN: std::time::Duration = std::time::Duration::from_millis(1);
const POLL_MAX: std::time::Duration = std::time::Duration::from_millis(64);

/// What a library shares with its worker thread.
struct Shared {
    isa: OwnedTargetIsa,
    stencils: RwLock<Made>,
    wanted: std::sync::Mutex<Wanted>,
    /// Signalled when the worker made a stencil, when a thread waits for it to finish
    /// ([`StencilLib::settle`]), and when the library is dropped.
    changed: std::sync::Condvar,
    /// [`StencilCounts`], by [`AHEAD`], [`WHILE_STITCHING`], [`BACKGROUND`], [`FALLBACKS`].
    counts: [std::sync::atomic::AtomicUsize; 4],
}

/// The counts of [`Shared::counts`].
const AHEAD: usize = 0;
const WHILE_STITCHING: usize = 1;
const BACKGROUND: usize = 2;
const FALLBACKS: usize = 3;

impl Shared {
    fn find(&self, key: &Key) -> Option<Result<Arc<Stencil>, StencilError>> {
        self.stencils
            .read()
            .expect("not poisoned")
            .get(key)
            .cloned()
    }

    /// Makes `key` (a panic in Cranelift refuses it), keeps it, and counts it as `k` (one
    /// of [`AHEAD`], [`WHILE_STITCHING`], [`BACKGROUND`]).
    fn make(&self, key: &Key, k: usize) -> Result<Arc<Stencil>, StencilError> {
        let made = if StencilLib::supported() {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make(&*self.isa, key)))
                .unwrap_or_else(|_| Err(StencilError(format!("{key:?}: Cranelift panicked"))))
                .map(Arc::new)
        } else {
            Err(StencilError("not built for this target".into()))
        };
        self.counts[k].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.stencils
            .write()
            .expect("not poisoned")
            .entry(key.clone())
            .or_insert(made)
            .clone()
    }

    /// The worker thread: makes the keys units wanted, oldest first, until the library
    /// is dropped. While it is busy, units queue keys without waking it (a wake-up is a
    /// system call that cost a first specialization about 40 us here): it looks at the
    /// queue after [`POLL_MIN`], and waits twice as long each time it finds it empty, up
    /// to [`POLL_MAX`]. When a wait that long found nothing, it sleeps (`asleep`) until the
    /// next key queued wakes it: an idle process's worker does not wake at all, and the
    /// first key wanted after an idle period is made at once, at the price of one wake-up
    /// for the unit that wanted it.
    fn work(&self) {
        let mut poll = POLL_MIN;
        loop {
            let key = {
                let mut w = self.wanted.lock().expect("not poisoned");
                loop {
                    if w.closed {
                        return;
                    }
                    if let Some(k) = w.queues.iter_mut().find_map(|q| q.pop_front()) {
                        break k;
                    }
                    if w.asleep {
                        w = self.changed.wait(w).expect("not poisoned");
                        continue;
                    }
                    let (g, waited) = self.changed.wait_timeout(w, poll).expect("not poisoned");
                    w = g;
                    if waited.timed_out() && w.queues.iter().all(|q| q.is_empty()) {
                        w.asleep = poll == POLL_MAX;
                        poll = (poll * 2).min(POLL_MAX);
                    }
                }
            };
            poll = POLL_MIN;
            let _ = self.make(&key, BACKGROUND);
            self.wanted
                .lock()
                .expect("not poisoned")
                .queued
                .remove(&key);
            self.changed.notify_all();
        }
    }
}

impl Drop for StencilLib {
    /// Ends the worker thread (after the stencil it is making, if any).
    fn drop(&mut self) {
        self.shared.wanted.lock().expect("not poisoned").closed = true;
        self.shared.changed.notify_all();
    }
}

impl StencilLib {
    /// A library compiling stencils with `isa` (optimizing, frame pointers preserved,
    /// not position-independent). Units stitched with it make what they miss at once
    /// ([`Misses::Make`]).
    pub fn new(isa: OwnedTargetIsa) -> StencilLib {
        Self::with_misses(isa, Misses::Make)
    }

    /// A library whose units handle a missing stencil as `misses` says. With
    /// [`Misses::Background`], its worker thread starts now (so that no unit waits for
    /// the thread to be made), and ends when the library is dropped.
    pub fn with_misses(isa: OwnedTargetIsa, misses: Misses) -> StencilLib {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let lib = StencilLib {
            shared: Arc::new(Shared {
                isa,
                stencils: RwLock::new(Made::default()),
                wanted: Default::default(),
                changed: Default::default(),
                counts: Default::default(),
            }),
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            misses,
        };
        if misses == Misses::Background && Self::supported() {
            let mut w = lib.shared.wanted.lock().expect("not poisoned");
            lib.start_worker(&mut w);
        }
        lib
    }

    /// Starts the worker thread of this process: the first time, and in a process forked
    /// from one that had it (a child has only the thread that forked; what the parent's
    /// worker had queued is forgotten, and units want it again). Without a thread, units
    /// keep falling back (`want` queues nothing).
    fn start_worker(&self, w: &mut Wanted) {
        let pid = std::process::id();
        if w.worker == Some(pid) {
            return;
        }
        w.queues.iter_mut().for_each(|q| q.clear());
        w.queued.clear();
        w.asleep = false;
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("dyc-stencils".into())
            .spawn(move || shared.work());
        w.worker = started.is_ok().then_some(pid);
    }

    /// Whether this target has the stitch tier (x86-64).
    pub fn supported() -> bool {
        cfg!(target_arch = "x86_64")
    }

    /// How many stencils it made, and where, and how many copies fell back.
    pub fn counts(&self) -> StencilCounts {
        let [ahead, while_stitching, background, fallbacks] = self
            .shared
            .counts
            .each_ref()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
        StencilCounts {
            ahead,
            while_stitching,
            background,
            fallbacks,
        }
    }

    /// The stencil for `key` if it was made (or refused), without making it.
    pub fn find(&self, key: &Key) -> Option<Result<Arc<Stencil>, StencilError>> {
        self.shared.find(key)
    }

    /// Hands `key`, which a unit wanted and did not find, to the worker thread (with
    /// [`Misses::Background`]; otherwise nothing). A key is queued once; the queues hold
    /// at most the keys not made yet.
    fn want(&self, key: &Key) {
        self.queue(key, 0);
    }

    /// Queues `key` for the worker, in queue `q` (0: units' wants; 1: the background's).
    fn queue(&self, key: &Key, q: usize) {
        if self.misses != Misses::Background || !Self::supported() {
            return;
        }
        let mut w = self.shared.wanted.lock().expect("not poisoned");
        self.start_worker(&mut w);
        if w.worker.is_none() || w.queued.contains(key) || self.find(key).is_some() {
            return;
        }
        w.queued.insert(key.clone());
        w.queues[q].push_back(key.clone());
        if w.asleep {
            w.asleep = false;
            self.shared.changed.notify_all();
        }
    }

    /// Holds the library's locks until the guard is dropped. A process about to fork
    /// takes them (the runtime's `pthread_atfork` handler), so that the child, which has
    /// no worker thread, does not inherit a lock the worker held at the fork.
    pub fn hold_for_fork(&self) -> ForkGuard<'_> {
        let wanted = self.shared.wanted.lock().expect("not poisoned");
        let stencils = self.shared.stencils.write().expect("not poisoned");
        ForkGuard {
            _wanted: wanted,
            _stencils: stencils,
        }
    }

    /// How many keys units wanted (or the library queued) that the worker has not made
    /// yet.
    pub fn pending(&self) -> usize {
        self.shared
            .wanted
            .lock()
            .expect("not poisoned")
            .queued
            .len()
    }

    /// Waits until the worker thread has made every key units wanted so far (at once
    /// with the other policies): what follows (a benchmark's timed runs, say) gets the
    /// code those stencils make.
    pub fn settle(&self) {
        let mut w = self.shared.wanted.lock().expect("not poisoned");
        if w.worker != Some(std::process::id()) {
            // No worker in this process (a forked child that wanted nothing yet, or no
            // thread could be made): nothing it queued will be made here.
            return;
        }
        // The worker may be waiting out its poll (notified under the lock, so that it is
        // either waiting now or looks at the queue before it waits again).
        self.shared.changed.notify_all();
        while !w.queued.is_empty() {
            w = self.shared.changed.wait(w).expect("not poisoned");
        }
    }

    /// The stencil for `key`, compiled the first time.
    pub fn get(&self, key: &Key) -> Result<Arc<Stencil>, StencilError> {
        self.get_as(key, false)
    }

    /// [`StencilLib::get`], counting a stencil made as made while stitching a unit
    /// (`stitching`) or ahead.
    fn get_as(&self, key: &Key, stitching: bool) -> Result<Arc<Stencil>, StencilError> {
        match self.find(key) {
            Some(s) => s,
            None => self
                .shared
                .make(key, if stitching { WHILE_STITCHING } else { AHEAD }),
        }
    }

    /// The keys of the stencils made so far (refused ones too).
    pub fn keys(&self) -> Vec<Key> {
        let map = self.shared.stencils.read().expect("not poisoned");
        map.keys().cloned().collect()
    }

    /// Makes ahead what entering a unit that starts at a block with inputs `inputs` takes:
    /// its prologue, and, with `promoted`, the promotion that leaves a unit for it (the
    /// promoted scalars, and the inputs in frame words), keyed as the emitter keys them
    /// when it has no variant reading them from cache registers.
    /// (So the first promotion of a specialization compiles no stencil; inputs the
    /// emitter passes otherwise, as constants, get theirs on first use.)
    pub fn make_entry(&self, inputs: &[Type], promoted: Option<&[Scalar]>) {
        let _ = self.get(&Key::Prologue(inputs.to_vec()));
        let Some(promoted) = promoted else {
            return;
        };
        let live = inputs
            .iter()
            .map(|t| match *t {
                Type::Slice { elem, .. } => Form::Slice(elem),
                t => Form::Slot(t.scalar().unwrap_or(Scalar::I64)),
            })
            .collect();
        let _ = self.get(&Key::Promote {
            promoted: promoted.iter().map(|&s| Form::Slot(s)).collect(),
            live,
            // A site with at most one promoted value has an inline cache.
            inline: promoted.len() <= 1,
        });
    }

    /// Makes ahead the stencils that units use whatever their program: moves between
    /// frame words and cache registers, constants into frame words, a frame array's
    /// address and element stores, fuel, traps, branches on a `bool`. (A unit that misses
    /// one of these has no variant of it to fall back on.)
    pub fn make_moves(&self) {
        let regs = 0..CACHE_REGS as u8;
        let mut keys = vec![Key::Set(false), Key::Set(true), Key::Move, Key::FrameAddr];
        keys.extend([Key::Fuel, Key::Trap]);
        // A branch on a comparison whose fused stencil is missing.
        keys.extend([Form::Slot(Scalar::Bool), Form::Acc(Scalar::Bool)].map(Key::Branch));
        keys.extend(Scalar::ALL.map(Key::MoveTo));
        keys.extend(regs.clone().flat_map(|k| [Key::Reload(k), Key::Spill(k)]));
        keys.extend(
            regs.clone()
                .flat_map(|k| [Key::SetReg(k, false), Key::SetReg(k, true)]),
        );
        for j in regs.clone() {
            keys.extend(regs.clone().filter(|&k| k != j).map(|k| Key::Xfer(j, k)));
        }
        for key in &keys {
            let _ = self.get(key);
        }
    }

    /// Makes the variants of `key` that specialization commonly asks for (refused ones
    /// are kept as refused): each operand in frame words taken from the accumulator, or
    /// as a constant where the operation allows one, and both together; and hands the
    /// worker thread, if any, those with an integer result in each other cache register.
    pub fn make_variants(&self, key: &Key) {
        let scalar = |f: Form| match f {
            Form::Slot(t) => Some(t),
            _ => None,
        };
        // From the form with every accumulator operand in its frame word.
        let words = |f: Form| match f {
            Form::Acc(t) | Form::Reg(t, _) => Form::Slot(t),
            f => f,
        };
        let key = match key {
            Key::Op {
                op, forms, callee, ..
            } => Key::Op {
                op: op.clone(),
                forms: forms.iter().map(|&f| words(f)).collect(),
                callee: callee.clone(),
                dst: 0,
            },
            Key::Branch(f) => Key::Branch(words(*f)),
            Key::CmpBranch { op, forms } => Key::Op {
                op: op.clone(),
                forms: forms.iter().map(|&f| words(f)).collect(),
                callee: None,
                dst: 0,
            },
            Key::CaseEq(f, w) => Key::CaseEq(words(*f), *w),
            Key::BoundsCheck(sl, i) => Key::BoundsCheck(*sl, words(*i)),
            Key::Ret(f) => Key::Ret(f.map(words)),
            k => k.clone(),
        };
        let mut variants = vec![key.clone()];
        variants.extend(reductions(&key));
        match &key {
            Key::Op {
                op, forms, callee, ..
            } => {
                let with = |changes: &[(usize, Form)]| {
                    let mut forms = forms.clone();
                    for &(k, f) in changes {
                        forms[k] = f;
                    }
                    Key::Op {
                        op: op.clone(),
                        forms,
                        callee: callee.clone(),
                        dst: 0,
                    }
                };
                let imms = |k: usize, t: Scalar| match t {
                    _ if !imm_ok(op, k) => Vec::new(),
                    Scalar::I64 | Scalar::U64 => vec![Form::Imm(t, false), Form::Imm(t, true)],
                    Scalar::I32 | Scalar::U32 => vec![Form::Imm(t, false)],
                    Scalar::F64 => vec![Form::Imm(t, true)],
                    _ => Vec::new(),
                };
                let slots: Vec<(usize, Scalar)> = forms
                    .iter()
                    .enumerate()
                    .filter_map(|(k, &f)| Some((k, scalar(f)?)))
                    .collect();
                for &(k, t) in &slots {
                    variants.push(with(&[(k, Form::Acc(t))]));
                    for imm in imms(k, t) {
                        variants.push(with(&[(k, imm)]));
                        for &(j, u) in slots.iter().filter(|&&(j, _)| j != k) {
                            variants.push(with(&[(k, imm), (j, Form::Acc(u))]));
                        }
                    }
                }
            }
            Key::Branch(Form::Slot(t)) => variants.push(Key::Branch(Form::Acc(*t))),
            Key::CaseEq(Form::Slot(t), _) => {
                for f in [Form::Slot(*t), Form::Acc(*t)] {
                    variants.extend([Key::CaseEq(f, false), Key::CaseEq(f, true)]);
                }
            }
            Key::BoundsCheck(sl, Form::Slot(t)) => {
                variants.push(Key::BoundsCheck(*sl, Form::Acc(*t)));
                variants.push(Key::BoundsCheck(*sl, Form::Imm(*t, false)));
            }
            Key::Set(_) => variants.extend([Key::Set(false), Key::Set(true)]),
            Key::Ret(Some(Form::Slot(t))) => variants.push(Key::Ret(Some(Form::Acc(*t)))),
            _ => {}
        }
        // A comparison's variants are also made fused with the branch on its result.
        let fused: Vec<Key> = variants
            .iter()
            .filter_map(|v| match v {
                Key::Op {
                    op: op @ TOp::Cmp(_),
                    forms,
                    callee: None,
                    ..
                } => Some(Key::CmpBranch {
                    op: op.clone(),
                    forms: forms.clone(),
                }),
                _ => None,
            })
            .collect();
        // The variants with the result in another cache register, for the worker to make
        // (see `StencilEmitter::op`): a unit that misses a variant of its operands keeps
        // its choice of result register, and the registers hold what they would.
        let results: Vec<Key> = variants
            .iter()
            .filter_map(|v| match v {
                Key::Op {
                    op,
                    forms,
                    callee: None,
                    dst: 0,
                } if int_result(op, forms) => Some((op, forms)),
                _ => None,
            })
            .flat_map(|(op, forms)| {
                (1..CACHE_REGS as u8).map(|dst| Key::Op {
                    op: op.clone(),
                    forms: forms.clone(),
                    callee: None,
                    dst,
                })
            })
            .collect();
        for v in variants.into_iter().chain(fused) {
            let _ = self.get(&v);
        }
        for v in &results {
            self.queue(v, 1);
        }
    }
}

/// What the fold layer's strength reduction may turn `key` into when an operand is a
/// constant (see [`crate::fold`]), with its operands in frame words: the operations that
/// a unit copying a variant made ahead in place of a missing one (`StencilEmitter::
/// in_words`) falls back to, which a program's generic code may not have (a
/// multiplication by 8 becomes a shift; a signed division by 4 shifts, casts and adds).
fn reductions(key: &Key) -> Vec<Key> {
    let Key::Op {
        op: TOp::Binary(BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem),
        forms,
        callee: None,
        ..
    } = key
    else {
        return Vec::new();
    };
    let Some(&Form::Slot(t)) = forms.first() else {
        return Vec::new();
    };
    if t.int_bits().is_none() {
        return Vec::new();
    }
    let op = |op: TOp, forms: &[Form]| Key::Op {
        op,
        forms: forms.iter().copied().collect(),
        callee: None,
        dst: 0,
    };
    let binary = |o, t| op(TOp::Binary(o), &[Form::Slot(t), Form::Slot(t)]);
    let mut keys: Vec<Key> = [
        BinaryOp::Shl,
        BinaryOp::Shr,
        BinaryOp::And,
        BinaryOp::Add,
        BinaryOp::Sub,
    ]
    .into_iter()
    .map(|o| binary(o, t))
    .collect();
    if t.is_signed() {
        let u = crate::fold::unsigned_of(t);
        keys.push(binary(BinaryOp::Shr, u));
        keys.push(op(TOp::Cast(u), &[Form::Slot(t)]));
        keys.push(op(TOp::Cast(t), &[Form::Slot(u)]));
    }
    keys
}

/// Whether operation `op` on operands of `forms` leaves an integer (or `bool`) result in
/// a cache register (one it chooses: not a store, not a floating-point value).
fn int_result(op: &TOp, forms: &[Form]) -> bool {
    let f64_operand = forms.iter().any(|f| {
        matches!(
            f,
            Form::Slot(Scalar::F64)
                | Form::Imm(Scalar::F64, _)
                | Form::Acc(Scalar::F64)
                | Form::Slice(Scalar::F64)
                | Form::ConstSlice(Scalar::F64)
        )
    });
    match op {
        TOp::Store | TOp::Call { .. } | TOp::Cast(Scalar::F64) => false,
        TOp::Cmp(_) | TOp::Cast(_) | TOp::Len => true,
        _ => !f64_operand,
    }
}

/// Whether operand `k` of `op` may be an immediate.
fn imm_ok(op: &TOp, k: usize) -> bool {
    match op {
        TOp::Binary(
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::And
            | BinaryOp::Or
            | BinaryOp::Xor
            | BinaryOp::Min
            | BinaryOp::Max,
        )
        | TOp::Cmp(_) => true,
        TOp::Select => k > 0,
        // A load's index (a static offset into a dynamic slice: a packet filter's fields).
        TOp::Load => k == 1,
        TOp::Store => k == 2,
        _ => false,
    }
}

/// Whether operand `k` of `op`, the constant `bits` of type `t`, is compiled into the
/// stencil ([`Form::Baked`]): a shift's amount, and the divisor of a signed division or
/// remainder by a power of two from 2 to 128 (made with shifts, see [`pow2_divide`]).
fn bakes(op: &TOp, k: usize, bits: u64, t: Scalar) -> bool {
    match op {
        TOp::Binary(BinaryOp::Shl | BinaryOp::Shr) => k == 1 && bits < 64,
        TOp::Binary(BinaryOp::Div | BinaryOp::Rem) => {
            k == 1 && bits <= 128 && pow2_divisor(t, bits as u8).is_some()
        }
        _ => false,
    }
}

/// The exponent `s` of a divisor `2^s` of signed integer type `t` that [`pow2_divide`]
/// makes (`1 <= s < bits of t - 1`).
fn pow2_divisor(t: Scalar, v: u8) -> Option<u32> {
    let w = t.int_bits()?;
    let s = v.trailing_zeros();
    (t.is_signed() && v.is_power_of_two() && s >= 1 && s + 1 < w).then_some(s)
}

/// `x / 2^s` (`rem`: `x % 2^s`) for signed `x` of type `t`, rounding toward zero like
/// the interpreter: `2^s - 1` added to a negative dividend before the arithmetic shift, and
/// the remainder the dividend minus the quotient shifted back.
fn pow2_divide(b: &mut FunctionBuilder, x: ir::Value, t: Scalar, s: u32, rem: bool) -> ir::Value {
    let w = i64::from(t.int_bits().unwrap_or(64));
    let s = i64::from(s);
    // The bias, 2^s - 1 for a negative x and 0 otherwise: the sign spread and shifted
    // down, or for s = 1 the sign bit alone (one shift; Cranelift does not fold the two).
    let bias = match s {
        1 => b.ins().ushr_imm_u(x, w - 1),
        _ => {
            let sign = b.ins().sshr_imm_u(x, w - 1);
            b.ins().ushr_imm_u(sign, w - s)
        }
    };
    let sum = b.ins().iadd(x, bias);
    let q = b.ins().sshr_imm_u(sum, s);
    if !rem {
        return q;
    }
    let multiple = b.ins().ishl_imm_u(q, s);
    b.ins().isub(x, multiple)
}

/// `x + c` (or `c + x`) as `x - (-c)`, and `x - c` as `x + (-c)`, when the integer
/// constant `c` takes an 8-byte hole and `-c` a 4-byte one (a 4-byte hole holds
/// `0..2^31`): so `x + -1` is a `lea` or `sub` with an immediate, not a `movabs` and an
/// add. Exact, as integers wrap.
fn negate_imm(op: &TOp, args: &[SVal]) -> Option<(TOp, [SVal; 2])> {
    let TOp::Binary(o @ (BinaryOp::Add | BinaryOp::Sub)) = op else {
        return None;
    };
    let (x, c, s) = match (o, args) {
        (_, &[x, SVal::Imm(c, s)]) => (x, c, s),
        (BinaryOp::Add, &[SVal::Imm(c, s), x]) => (x, c, s),
        _ => return None,
    };
    let neg = match s {
        Scalar::I64 | Scalar::U64 => c.wrapping_neg(),
        Scalar::I32 | Scalar::U32 => u64::from((c as u32).wrapping_neg()),
        _ => return None,
    };
    if c < 1 << 31 || neg >= 1 << 31 {
        return None;
    }
    let flipped = match o {
        BinaryOp::Add => BinaryOp::Sub,
        _ => BinaryOp::Add,
    };
    Some((TOp::Binary(flipped), [x, SVal::Imm(neg, s)]))
}

// ---------------------------------------------------------------------------------------
// Making stencils.

/// The magic value of hole `i` in compilation `pass` (0 or 1): 4-byte ones are positive
/// and below 2^31; 8-byte ones need all 64 bits.
fn magic(i: usize, pass: u8, wide: bool) -> u64 {
    let i = i as u64;
    let low = if pass == 0 { 0x2b1e_3a57 } else { 0x3c2f_4b69 } + i * 0x0001_0a0d;
    if wide {
        let high = 0x4d5e_6f17u64 + u64::from(pass) * 0x0102_0000 + i;
        (high << 32) | (low ^ 0x0f0f_0f0f)
    } else {
        low
    }
}

/// The holes one compilation asked for, in order.
struct Gen {
    pass: u8,
    holes: Vec<(bool, Role)>,
}

impl Gen {
    fn hole(&mut self, wide: bool, role: Role) -> u64 {
        let i = self.holes.len();
        self.holes.push((wide, role));
        magic(i, self.pass, wide)
    }

    /// A hole used as a displacement (a frame word's offset).
    fn disp(&mut self, role: Role) -> i32 {
        self.hole(false, role) as i32
    }
}

/// Declares an import (not colocated: an absolute address, `Abs8`).
fn import(func: &mut ir::Function, what: Import, sig: ir::Signature) -> ir::FuncRef {
    let index = IMPORTS.iter().position(|&i| i == what).expect("listed") as u32;
    let name = func.declare_imported_user_function(UserExternalName::new(IMPORT_NS, index));
    let signature = func.import_signature(sig);
    func.import_function(ir::ExtFuncData {
        name: ExternalName::user(name),
        signature,
        colocated: false,
        patchable: false,
    })
}

/// Hooks of the Cranelift lowering while a stencil's body is built: every service is a
/// hole or an import.
struct GenHooks<'g> {
    gen: &'g std::cell::RefCell<Gen>,
    callee: Option<CalleeKey>,
    inline: bool,
    isa: &'g dyn cranelift_codegen::isa::TargetIsa,
}

impl Hooks for GenHooks<'_> {
    fn fault_site(&mut self, kind: FaultKind, _loc: SrcLoc) -> u64 {
        self.gen.borrow_mut().hole(true, Role::Fault(kind))
    }
    fn func_ref(&mut self, func: &mut ir::Function, _callee: u32) -> Option<ir::FuncRef> {
        match &self.callee {
            Some(CalleeKey::Func(params)) => {
                Some(import(func, Import::Callee, unit_signature(params)))
            }
            _ => None,
        }
    }
    fn host_index(&self, _callee: u32) -> Option<u32> {
        match self.callee {
            Some(CalleeKey::Host(h)) => Some(h),
            _ => None,
        }
    }
    fn host_call(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.isa, &[types::I64; 5], &[types::I64]);
        import(func, Import::HostCall, sig)
    }
    fn promote(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.isa, &[types::I64; 3], &[types::I64]);
        import(func, Import::Promote, sig)
    }
    fn inline_cache(&mut self, _site: u32) -> Option<u64> {
        self.inline
            .then(|| self.gen.borrow_mut().hole(true, Role::InlineCache))
    }
    fn fmod(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.isa, &[types::F64; 2], &[types::F64]);
        import(func, Import::Fmod, sig)
    }
}

const TRUSTED: fn() -> MemFlagsData = MemFlagsData::trusted;

/// The stencil signature: `(ctx, frame, acc, facc) -> (value, value2, status)`, `tail`;
/// `acc` is the accumulator, the word of the last integer result, `facc` the last `f64`
/// result.
fn stencil_signature() -> ir::Signature {
    unit_signature(&STENCIL_INPUTS)
}

/// The values a stencil receives after the context: the frame, the accumulators (integer
/// and `f64`) and cache registers 1 to 3 (in the `tail` convention: `rsi`, `rdx`, `xmm0`,
/// then `rcx`, `r8`, `r9`; the context is in `rdi`).
const STENCIL_INPUTS: [Type; 6] = [
    Type::I64,
    Type::I64,
    Type::Scalar(Scalar::F64),
    Type::I64,
    Type::I64,
    Type::I64,
];

/// Cache registers: the accumulator (0) and three more.
const CACHE_REGS: usize = 4;

/// The frame word each cache register holds, if known.
type Regs = [Option<u32>; CACHE_REGS];

/// Builds the body of one stencil for compilation `pass`; returns the function and the
/// holes asked for.
fn build(
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    key: &Key,
    pass: u8,
) -> (ir::Function, Vec<(bool, Role)>) {
    let gen = std::cell::RefCell::new(Gen {
        pass,
        holes: Vec::new(),
    });
    let sig = match key {
        Key::Prologue(tys) => unit_signature(tys),
        _ => stencil_signature(),
    };
    let mut func = ir::Function::with_name_signature(UserFuncName::user(0, 0), sig);
    let mut fctx = FunctionBuilderContext::new();
    let frontend = isa.frontend_config();
    let b = FunctionBuilder::new(&mut func, &mut fctx);
    if let Key::Prologue(tys) = key {
        build_prologue(b, isa, &gen, tys);
        return (func, gen.into_inner().holes);
    }
    let (callee, inline) = match key {
        Key::Op { callee, .. } => (callee.clone(), false),
        Key::Promote { inline, .. } => (None, *inline),
        _ => (None, false),
    };
    let mut hooks = GenHooks {
        gen: &gen,
        callee,
        inline,
        isa,
    };
    let opts = ClifOptions {
        fuel: matches!(key, Key::Fuel),
    };
    let mut em = ClifEmitter::new(b, &mut hooks, opts, Vec::new(), &STENCIL_INPUTS);
    let first = em.create_block(&STENCIL_INPUTS);
    em.switch_to_block(first);
    let p = em.b.block_params(first).to_vec();
    let (fp, facc) = (p[0], p[2]);
    // The cache registers (0: the accumulator).
    let regs = [p[1], p[3], p[4], p[5]];
    let acc = regs[0];
    let cx = em.ctx_param();
    // Continuation `k`, with `out` in the cache registers and the `f64` accumulator.
    let cont = |em: &mut ClifEmitter, k: u32, out: ([ir::Value; CACHE_REGS], ir::Value)| {
        let name =
            em.b.func
                .declare_imported_user_function(UserExternalName::new(CONT_NS, k));
        let signature = em.b.func.import_signature(stencil_signature());
        let f = em.b.func.import_function(ir::ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: true,
            patchable: false,
        });
        let (r, f64acc) = out;
        em.b.ins()
            .return_call(f, &[cx, fp, r[0], f64acc, r[1], r[2], r[3]]);
    };
    let same = (regs, facc);
    // `same` with register `k` holding `v`.
    let with_reg = |k: u8, v: ir::Value| {
        let mut r = regs;
        r[usize::from(k)] = v;
        (r, facc)
    };
    // The 64-bit word of a scalar (narrow integers zero-extended, `f64` bit-cast).
    let word = |em: &mut ClifEmitter, v: ir::Value| {
        let ty = em.b.func.dfg.value_type(v);
        if ty == types::F64 {
            em.b.ins().bitcast(types::I64, MemFlagsData::new(), v)
        } else if ty.bits() < 64 {
            em.b.ins().uextend(types::I64, v)
        } else {
            v
        }
    };
    let load = |em: &mut ClifEmitter, ty: ir::Type, role: Role| {
        let d = gen.borrow_mut().disp(role);
        em.b.ins().load(ty, TRUSTED(), fp, d)
    };
    // A frame word is always written whole (narrow integers zero-extended), so that a
    // later load of the word, of any width, is forwarded from the store. An `f64` is
    // stored from its own register: moving it to an integer register first would cost an
    // instruction on the port the floating-point arithmetic needs.
    let store = |em: &mut ClifEmitter, v: ir::Value, role: Role| {
        let d = gen.borrow_mut().disp(role);
        let v = match em.b.func.dfg.value_type(v) {
            types::F64 => v,
            _ => word(em, v),
        };
        em.b.ins().store(TRUSTED(), v, fp, d);
    };
    // Operand `f` as words `k..`; returns the value and the next word. Of a slice, only
    // the halves `halves` says are read are loaded (Cranelift keeps a load nothing uses).
    let operand = |em: &mut ClifEmitter, f: Form, k: u16, halves: (bool, bool)| -> (CVal, u16) {
        match f {
            Form::Slot(s) => (CVal::Val(load(em, clif_type(s), Role::Arg(k)), s), k + 1),
            Form::Imm(s, wide) => {
                let m = gen.borrow_mut().hole(wide, Role::Arg(k));
                let v = match s {
                    Scalar::F64 => {
                        let w = em.b.ins().iconst(types::I64, m as i64);
                        em.b.ins().bitcast(types::F64, MemFlagsData::new(), w)
                    }
                    s => em.b.ins().iconst(clif_type(s), m as i64),
                };
                (CVal::Val(v, s), k + 1)
            }
            Form::Slice(elem) => {
                let mut half = |needed: bool, role: Role| match needed {
                    true => load(em, types::I64, role),
                    false => em.b.ins().iconst(types::I64, 0),
                };
                let ptr = half(halves.0, Role::Arg(k));
                let len = half(halves.1, Role::Arg(k + 1));
                (CVal::Slice { ptr, len, elem }, k + 2)
            }
            Form::ConstSlice(elem) => {
                let p = gen.borrow_mut().hole(true, Role::Arg(k));
                let l = gen.borrow_mut().hole(true, Role::Arg(k + 1));
                let ptr = em.b.ins().iconst(types::I64, p as i64);
                let len = em.b.ins().iconst(types::I64, l as i64);
                (CVal::Slice { ptr, len, elem }, k + 2)
            }
            Form::Baked(s, v) => (
                CVal::Val(em.b.ins().iconst(clif_type(s), i64::from(v)), s),
                k,
            ),
            // No word: the value is the accumulator's, or a cache register's.
            Form::Acc(Scalar::F64) => (CVal::Val(facc, Scalar::F64), k),
            Form::Acc(s) | Form::Reg(s, _) => {
                let r = match f {
                    Form::Reg(_, j) => regs[usize::from(j)],
                    _ => acc,
                };
                let v = match s {
                    Scalar::I64 | Scalar::U64 => r,
                    s => em.b.ins().ireduce(clif_type(s), r),
                };
                (CVal::Val(v, s), k)
            }
        }
    };
    // Continuation 1 when `c` is nonzero, else 0.
    let two_way = |em: &mut ClifEmitter, c: ir::Value| {
        let t = em.b.create_block();
        let e = em.b.create_block();
        em.b.ins().brif(c, t, &[], e, &[]);
        em.b.switch_to_block(t);
        cont(em, 1, same);
        em.b.switch_to_block(e);
        cont(em, 0, same);
    };
    // The operands of `forms`; `halves(n)` says which halves of a slice operand `n` the
    // stencil reads.
    let operands =
        |em: &mut ClifEmitter, forms: &[Form], halves: &dyn Fn(usize) -> (bool, bool)| {
            let mut k = 0;
            forms
                .iter()
                .enumerate()
                .map(|(n, &f)| {
                    let (v, next) = operand(em, f, k, halves(n));
                    k = next;
                    v
                })
                .collect::<Vec<CVal>>()
        };
    let both = |_: usize| (true, true);
    match key {
        Key::Op { op, forms, .. } => {
            // Unchecked loads and stores read a slice's pointer, `len` its length.
            let halves = |n: usize| match (op, n) {
                (TOp::Load | TOp::Store, 0) => (true, false),
                (TOp::Len, 0) => (false, true),
                _ => (true, true),
            };
            let args = operands(&mut em, forms, &halves);
            let tys: Vec<Type> = forms.iter().map(|&f| form_type(f)).collect();
            // A signed division by a baked power of two is made with shifts here.
            let pow2 = match (op, &forms[..], &args[..]) {
                (
                    TOp::Binary(o @ (BinaryOp::Div | BinaryOp::Rem)),
                    [_, Form::Baked(t, v)],
                    [CVal::Val(x, _), _],
                ) => pow2_divisor(*t, *v).map(|s| (*o == BinaryOp::Rem, *x, *t, s)),
                _ => None,
            };
            let made = match pow2 {
                Some((rem, x, t, s)) => Some(CVal::Val(pow2_divide(&mut em.b, x, t, s, rem), t)),
                None => em.op(op, &args, &tys, SrcLoc::default()),
            };
            // A scalar result goes to its frame word and to register `dst` (an `f64` to
            // its own); the other registers are passed on.
            let dst = match key {
                Key::Op { dst, .. } => *dst,
                _ => 0,
            };
            let out = match made {
                Some(CVal::Val(v, Scalar::F64)) => {
                    store(&mut em, v, Role::Res(0));
                    (regs, v)
                }
                Some(CVal::Val(v, _)) => {
                    store(&mut em, v, Role::Res(0));
                    with_reg(dst, word(&mut em, v))
                }
                Some(CVal::Slice { ptr, len, .. }) => {
                    store(&mut em, ptr, Role::Res(0));
                    store(&mut em, len, Role::Res(1));
                    same
                }
                Some(CVal::StaticSlice { .. }) => unreachable!("no static slice reaches here"),
                None => same,
            };
            cont(&mut em, 0, out);
        }
        Key::Set(wide) => {
            let m = gen.borrow_mut().hole(*wide, Role::Arg(0));
            let v = em.b.ins().iconst(types::I64, m as i64);
            store(&mut em, v, Role::Res(0));
            cont(&mut em, 0, same);
        }
        Key::Move => {
            let v = load(&mut em, types::I64, Role::Arg(0));
            store(&mut em, v, Role::Res(0));
            cont(&mut em, 0, same);
        }
        Key::Reload(k) => {
            let v = load(&mut em, types::I64, Role::Arg(0));
            cont(&mut em, 0, with_reg(*k, v));
        }
        Key::Spill(k) => {
            store(&mut em, regs[usize::from(*k)], Role::Res(0));
            cont(&mut em, 0, same);
        }
        Key::Xfer(j, k) => cont(&mut em, 0, with_reg(*k, regs[usize::from(*j)])),
        Key::SetReg(k, wide) => {
            let m = gen.borrow_mut().hole(*wide, Role::Arg(0));
            let v = em.b.ins().iconst(types::I64, m as i64);
            cont(&mut em, 0, with_reg(*k, v));
        }
        Key::MoveTo(s) => {
            // An element of an array in the frame: written at its own width.
            let v = load(&mut em, clif_type(*s), Role::Arg(0));
            let d = gen.borrow_mut().disp(Role::Res(0));
            em.b.ins().store(TRUSTED(), v, fp, d);
            cont(&mut em, 0, same);
        }
        Key::FrameAddr => {
            let m = gen.borrow_mut().hole(false, Role::Arg(0));
            let off = em.b.ins().iconst(types::I64, m as i64);
            let a = em.b.ins().iadd(fp, off);
            store(&mut em, a, Role::Res(0));
            cont(&mut em, 0, same);
        }
        Key::Branch(f) => {
            let CVal::Val(c, _) = operand(&mut em, *f, 0, (true, true)).0 else {
                unreachable!("a condition is a scalar")
            };
            two_way(&mut em, c);
        }
        Key::CmpBranch { op, forms } => {
            let args = operands(&mut em, forms, &both);
            let tys: Vec<Type> = forms.iter().map(|&f| form_type(f)).collect();
            let Some(CVal::Val(c, _)) = em.op(op, &args, &tys, SrcLoc::default()) else {
                unreachable!("a comparison is a scalar")
            };
            two_way(&mut em, c);
        }
        Key::CaseEq(f, wide) => {
            let (CVal::Val(x, _), k) = operand(&mut em, *f, 0, (true, true)) else {
                unreachable!("a switch value is a scalar")
            };
            let x = word(&mut em, x);
            let m = gen.borrow_mut().hole(*wide, Role::Arg(k));
            let k = em.b.ins().iconst(types::I64, m as i64);
            let eq = em.b.ins().icmp(ir::condcodes::IntCC::Equal, x, k);
            two_way(&mut em, eq);
        }
        Key::Ret(form) => {
            let v = form.map(|f| operand(&mut em, f, 0, (true, true)).0);
            em.ret(v);
        }
        Key::Trap => em.trap(SrcLoc::default()),
        Key::BoundsCheck(s, i) => {
            // A bounds check reads the slice's length only.
            let args = operands(&mut em, &[*s, *i], &|n| (n != 0, true));
            let ty = match i {
                Form::Slot(t)
                | Form::Imm(t, _)
                | Form::Acc(t)
                | Form::Baked(t, _)
                | Form::Reg(t, _) => *t,
                _ => Scalar::I64,
            };
            em.bounds_check(args[0], args[1], ty, SrcLoc::default());
            cont(&mut em, 0, same);
        }
        Key::Fuel => cont(&mut em, 0, same),
        Key::Promote { promoted, live, .. } => {
            // (The operands' words are numbered on from the promoted ones to the live
            // ones; one in a cache register has none.)
            let mut k = 0;
            let mut next = |em: &mut ClifEmitter, f: Form| {
                let (v, n) = operand(em, f, k, (true, true));
                k = n;
                v
            };
            let p: Vec<CVal> = promoted.iter().map(|&f| next(&mut em, f)).collect();
            let l: Vec<CVal> = live.iter().map(|&f| next(&mut em, f)).collect();
            let site = gen.borrow_mut().hole(false, Role::Site) as u32;
            let pv: Vec<(CVal, Scalar)> = (p.iter().zip(promoted))
                .map(|(&v, &f)| (v, form_type(f).scalar().unwrap_or(Scalar::I64)))
                .collect();
            em.promote(site, &pv, &l);
        }
        Key::Prologue(_) => unreachable!("built above"),
    }
    em.finish(first, frontend);
    (func, gen.into_inner().holes)
}

/// A unit's prologue: makes room for the unit's frame words (a hole) and stores the
/// inputs' words at the frame's start, then continues.
fn build_prologue(
    mut b: FunctionBuilder,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    gen: &std::cell::RefCell<Gen>,
    tys: &[Type],
) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let params = b.block_params(entry).to_vec();
    let cx = params[0];
    let fp0 = b.ins().load(types::I64, TRUSTED(), cx, ctx::FRAME);
    let have = b.ins().load(types::I64, TRUSTED(), cx, ctx::FRAME_WORDS);
    let m = gen.borrow_mut().hole(false, Role::FrameWords);
    let need = b.ins().iconst(types::I64, m as i64);
    let small = b
        .ins()
        .icmp(ir::condcodes::IntCC::UnsignedLessThan, have, need);
    let grow = b.create_block();
    let go = b.create_block();
    b.append_block_param(go, types::I64);
    b.set_cold_block(grow);
    b.ins().brif(small, grow, &[], go, &[fp0.into()]);
    b.switch_to_block(grow);
    let sig = abi::host_signature(isa, &[types::I64; 2], &[types::I64]);
    let f = import(b.func, Import::Frame, sig);
    let call = b.ins().call(f, &[cx, need]);
    let fp1 = b.inst_results(call)[0];
    b.ins().jump(go, &[fp1.into()]);
    b.switch_to_block(go);
    let fp = b.block_params(go)[0];
    debug_assert_eq!(abi_types(tys).len(), params.len() - 1);
    for (k, &w) in params[1..].iter().enumerate() {
        let ty = b.func.dfg.value_type(w);
        let w = if ty.is_int() && ty.bits() < 64 {
            b.ins().uextend(types::I64, w)
        } else {
            w
        };
        b.ins().store(TRUSTED(), w, fp, 8 * k as i32);
    }
    let name = b
        .func
        .declare_imported_user_function(UserExternalName::new(CONT_NS, 0));
    let signature = b.func.import_signature(stencil_signature());
    let f = b.func.import_function(ir::ExtFuncData {
        name: ExternalName::user(name),
        signature,
        colocated: true,
        patchable: false,
    });
    let acc = b.ins().iconst(types::I64, 0);
    let facc = b.ins().f64const(0.0);
    b.ins().return_call(f, &[cx, fp, acc, facc, acc, acc, acc]);
    b.seal_all_blocks();
    b.finalize(isa.frontend_config());
}

/// The type of an operand form.
fn form_type(f: Form) -> Type {
    match f {
        Form::Slot(s) | Form::Imm(s, _) | Form::Acc(s) | Form::Baked(s, _) | Form::Reg(s, _) => {
            Type::Scalar(s)
        }
        Form::Slice(elem) | Form::ConstSlice(elem) => Type::Slice {
            elem,
            mutable: true,
        },
    }
}

/// One compilation: code bytes, relocations (offset, kind, name, addend) and Cranelift's
/// listing of the machine code (empty unless `listing`: Cranelift prints it instruction by
/// instruction, about 8% of a stencil's compilation).
type Compiled = (Vec<u8>, Vec<(u32, Reloc, UserExternalName, i64)>, String);

fn compile(
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    func: ir::Function,
    listing: bool,
) -> Result<Compiled, StencilError> {
    // (In the thread's spare context, as units are: `clif::take_context`.)
    let mut cctx = crate::clif::take_context();
    let size = func.dfg.num_insts();
    cctx.func = func;
    let compiled = compile_in(&mut cctx, isa, listing);
    crate::clif::give_context(cctx, size);
    compiled
}

fn compile_in(
    cctx: &mut cranelift_codegen::Context,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    listing: bool,
) -> Result<Compiled, StencilError> {
    cctx.set_disasm(listing);
    let code = cctx
        .compile(isa, &mut Default::default())
        .map_err(|e| StencilError(format!("Cranelift: {:?}", e.inner)))?;
    let listing = code.vcode.clone().unwrap_or_default();
    let bytes = code.code_buffer().to_vec();
    let mut refs = Vec::new();
    for r in code.buffer.relocs() {
        let FinalizedRelocTarget::ExternalName(ExternalName::User(name)) = r.target else {
            return Err(StencilError(format!("an unexpected relocation {r:?}")));
        };
        refs.push((r.offset, r.kind, name, r.addend));
    }
    let names = cctx.func.params.user_named_funcs();
    let relocs = refs
        .into_iter()
        .map(|(at, kind, name, addend)| (at, kind, names[name].clone(), addend))
        .collect();
    Ok((bytes, relocs, listing))
}

/// Machine instructions in Cranelift's listing of a compiled function: a jump to the next
/// block is elided when emitted, a two-way branch is two jumps, a tail call also restores
/// the frame (three instructions; a return's epilogue is listed). An estimate, for statistics only.
fn count_insts(listing: &str) -> u32 {
    listing
        .lines()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty() && !l.ends_with(':') && !l.starts_with("unwind"))
        .filter(|l| !(l.starts_with("jmp") && l.contains("label")))
        .map(|l| {
            if l.starts_with("return_call") {
                3
            } else if l.contains("; j label") {
                2
            } else {
                1
            }
        })
        .sum()
}

/// Compiles the stencil of `key` twice and locates its holes (see the module doc).
fn make(isa: &dyn cranelift_codegen::isa::TargetIsa, key: &Key) -> Result<Stencil, StencilError> {
    let (fa, holes) = build(isa, key, 0);
    let (fb, holes_b) = build(isa, key, 1);
    if holes != holes_b {
        return Err(StencilError(format!(
            "{key:?}: holes differ between builds"
        )));
    }
    let (a, relocs, listing) = compile(isa, fa, true)?;
    let insts = count_insts(&listing);
    // (The second compilation is only compared: no listing.)
    let (b, relocs_b, _) = compile(isa, fb, false)?;
    if a.len() != b.len() || relocs != relocs_b {
        return Err(StencilError(format!(
            "{key:?}: the two compilations differ in shape"
        )));
    }
    let mut covered = vec![false; a.len()];
    let mut found = Vec::new();
    for (i, &(wide, role)) in holes.iter().enumerate() {
        let w = if wide { 8 } else { 4 };
        let ma = &magic(i, 0, wide).to_le_bytes()[..w];
        let mb = &magic(i, 1, wide).to_le_bytes()[..w];
        for p in 0..a.len().saturating_sub(w - 1) {
            if &a[p..p + w] == ma && &b[p..p + w] == mb {
                found.push(Hole {
                    at: p as u32,
                    index: i as u16,
                    wide,
                    role,
                });
                covered[p..p + w].iter_mut().for_each(|c| *c = true);
            }
        }
    }
    if let Some(p) = (0..a.len()).find(|&p| a[p] != b[p] && !covered[p]) {
        return Err(StencilError(format!(
            "{key:?}: byte {p} depends on a hole in a way patching cannot reproduce"
        )));
    }
    let mut conts = Vec::new();
    let mut imports = Vec::new();
    for (at, kind, name, addend) in relocs {
        match (name.namespace, kind) {
            (CONT_NS, Reloc::X86CallPCRel4) if addend == -4 => conts.push((at, name.index as u8)),
            (IMPORT_NS, Reloc::Abs8) => imports.push((at, IMPORTS[name.index as usize], addend)),
            _ => {
                return Err(StencilError(format!(
                    "{key:?}: relocation {kind:?} of {name:?} not supported"
                )))
            }
        }
    }
    let mut st = Stencil {
        code: a.into_boxed_slice(),
        holes: found,
        nholes: holes.len(),
        conts,
        imports,
        tail: 0,
        tail_cont: 0,
        tail_insts: 0,
        cut: None,
        cold: None,
        insts,
    };
    let n = st.code.len() as u32;
    let last = st
        .conts
        .iter()
        .find(|&&(at, _)| at == n - 4)
        .map(|&(_, k)| k);
    if let (true, Some(k)) = (n >= 5 && st.code[n as usize - 5] == 0xe9, last) {
        st.tail = 5;
        st.tail_cont = k;
        st.tail_insts = 1;
    }
    drop_frame(&mut st, &listing, &covered);
    if matches!(
        key,
        Key::Branch(_) | Key::CmpBranch { .. } | Key::CaseEq(..)
    ) {
        st.cut = branch_cut(&st, &listing);
    }
    if matches!(key, Key::BoundsCheck(..)) {
        st.cold = cold_split(&st, &listing);
    }
    Ok(st)
}

/// Where a frameless check stencil splits into a hot and a cold part (see
/// [`Stencil::cold`]): its code must be `hot; jcc L; nop4; jmp cont0; L: cold` with the
/// `jcc` the listing's only conditional jump, continuation 0's `jmp` the only one, the
/// cold part ending in `ret`, nothing addressed relative to `rip` (the parts move apart),
/// and no hole or import in the `nop` and the `jmp`, which are dropped.
fn cold_split(st: &Stencil, listing: &str) -> Option<(u32, u32)> {
    let code = &st.code;
    let single = conditional_jumps(listing).len() == 1;
    if !single || listing.contains("%rip") || code.last() != Some(&0xc3) {
        return None;
    }
    let [(at, 0)] = st.conts[..] else {
        return None;
    };
    let j = at.checked_sub(1)? as usize;
    let p = j.checked_sub(10)?;
    let rel = i32::from_le_bytes([code[p + 2], code[p + 3], code[p + 4], code[p + 5]]);
    let shape = code[j] == 0xe9
        && code[j - 4..j] == NOP4
        && code[p] == 0x0f
        && (0x80..=0x8f).contains(&code[p + 1])
        && rel == 9;
    let split = j + 5;
    let outside = |at: u32, len: u32| at + len <= p as u32 + 6 || at >= split as u32;
    let clear = st
        .holes
        .iter()
        .all(|h| h.role != Role::FrameWords && outside(h.at, if h.wide { 8 } else { 4 }))
        && st.imports.iter().all(|&(at, _, _)| outside(at, 8));
    (shape && clear && split < code.len()).then_some(((p + 2) as u32, split as u32))
}

/// The lines of Cranelift's listing that are conditional jumps.
fn conditional_jumps(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('j') && !l.starts_with("jmp"))
        .collect()
}

/// Where a frameless two-way branch stencil can be cut (see [`Stencil::cut`]): its code
/// must end `jcc L1; nop4; jmp cont0; L1: nop4; jmp cont1` (the `nop`s are the dropped
/// epilogues), with the `jcc` the listing's only conditional jump (a float comparison
/// that needs two, such as `jp,nz`, is not cut: its other jump may go to `L1` too), and
/// no hole or import in the bytes cut off.
fn branch_cut(st: &Stencil, listing: &str) -> Option<(u32, u32)> {
    let code = &st.code;
    let n = code.len();
    let [line] = conditional_jumps(listing)[..] else {
        return None;
    };
    let cond = line.split_whitespace().next().unwrap_or("");
    if cond.contains(',') || !line.contains("; j ") || n < 24 {
        return None;
    }
    let (c0, c1) = ((n - 13) as u32, (n - 4) as u32);
    let tails = code[n - 9..n - 5] == NOP4
        && code[n - 5] == 0xe9
        && code[n - 18..n - 14] == NOP4
        && code[n - 14] == 0xe9;
    if !tails || st.conts.len() != 2 || !st.conts.contains(&(c1, 1)) || !st.conts.contains(&(c0, 0))
    {
        return None;
    }
    let p = n - 24;
    let rel = i32::from_le_bytes([code[p + 2], code[p + 3], code[p + 4], code[p + 5]]);
    if code[p] != 0x0f || !(0x80..=0x8f).contains(&code[p + 1]) || rel != 9 {
        return None;
    }
    let end = (p + 6) as u32;
    let before = |at: u32, len: u32| at + len <= p as u32;
    let clear = st
        .holes
        .iter()
        .all(|h| before(h.at, if h.wide { 8 } else { 4 }))
        && st.imports.iter().all(|&(at, _, _)| before(at, 8));
    clear.then_some(((p + 2) as u32, end))
}

/// `push rbp; mov rbp, rsp` and `mov rsp, rbp; pop rbp`, as Cranelift emits them.
const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
const EPILOGUE: [u8; 4] = [0x48, 0x89, 0xec, 0x5d];
/// A four-byte `nop`.
const NOP4: [u8; 4] = [0x0f, 0x1f, 0x40, 0x00];

/// The recommended multi-byte `nop`s, of 1 to 11 bytes (`NOPS[n - 1]` is `n` bytes long):
/// `nop`, `xchg %ax,%ax`, `nopl` with a growing memory operand, then operand-size and
/// segment prefixes. Each decodes as one instruction.
const NOPS: [&[u8]; 11] = [
    &[0x90],
    &[0x66, 0x90],
    &[0x0f, 0x1f, 0x00],
    &NOP4,
    &[0x0f, 0x1f, 0x44, 0, 0],
    &[0x66, 0x0f, 0x1f, 0x44, 0, 0],
    &[0x0f, 0x1f, 0x80, 0, 0, 0, 0],
    &[0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
    &[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
    &[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
    &[0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
];

/// Fills `out` with `nop`s, the longest first (x86-64).
pub fn fill_nops(out: &mut [u8]) {
    let mut at = 0;
    while at < out.len() {
        let nop = NOPS[(out.len() - at).min(NOPS.len()) - 1];
        out[at..at + nop.len()].copy_from_slice(nop);
        at += nop.len();
    }
}

/// The bytes of the windows the processor fetches and caches decoded code by (a cache line
/// on current x86-64 processors: see `StencilEmitter::align_loops`).
pub const FETCH_WINDOW: u32 = 64;

/// Drops the frame of a stencil that does not need one: nothing in it calls, and no
/// instruction but its prologue and epilogues touches `rsp` or `rbp` (Cranelift keeps
/// frame pointers for tail calls, so every stencil has a frame). The prologue goes
/// (everything after it keeps its relative distances) and each epilogue becomes a `nop`
/// (a branch may jump to it). Checked against Cranelift's listing: its `rsp`/`rbp`
/// lines must be exactly one prologue and one epilogue per `retq`, and the bytes must
/// show the prologue at the start, an epilogue before each continuation's `jmp` and
/// before exactly as many `ret`s as the listing has; otherwise the stencil keeps its
/// frame.
fn drop_frame(st: &mut Stencil, listing: &str, holes: &[bool]) {
    let lines: Vec<&str> = listing.lines().map(str::trim).collect();
    let touches = |l: &&&str| l.contains("%rsp") || l.contains("%rbp");
    let frame_lines: Vec<&&str> = lines.iter().filter(touches).collect();
    let rets = lines
        .iter()
        .filter(|l| l.starts_with("ret") && !l.starts_with("return_call"))
        .count();
    let calls = lines.iter().any(|l| l.starts_with("call"));
    let expected = 2 + 2 * rets;
    let shape_ok = frame_lines.len() == expected
        && frame_lines[..2] == [&"pushq %rbp", &"movq %rsp, %rbp"]
        && frame_lines[2..]
            .chunks(2)
            .all(|c| c == [&"movq %rbp, %rsp", &"popq %rbp"]);
    if calls || !shape_ok || !st.code.starts_with(&PROLOGUE) {
        return;
    }
    let code = &st.code;
    let free = |p: usize| (p..p + 5).all(|q| !holes[q]);
    let mut epilogues: Vec<usize> = Vec::new();
    for &(at, _) in &st.conts {
        let Some(p) = (at as usize).checked_sub(5) else {
            return;
        };
        if code[p..p + 4] != EPILOGUE {
            return;
        }
        epilogues.push(p);
    }
    let ret_epilogues: Vec<usize> = (0..code.len().saturating_sub(4))
        .filter(|&p| code[p..p + 4] == EPILOGUE && code[p + 4] == 0xc3 && free(p))
        .collect();
    if ret_epilogues.len() != rets {
        return;
    }
    epilogues.extend(ret_epilogues);
    let mut code = code.to_vec();
    for p in epilogues {
        code[p..p + 4].copy_from_slice(&NOP4);
    }
    st.code = code[4..].into();
    for h in &mut st.holes {
        h.at -= 4;
    }
    for c in &mut st.conts {
        c.0 -= 4;
    }
    for i in &mut st.imports {
        i.0 -= 4;
    }
    // The prologue's two instructions are gone; each epilogue's two are one `nop`.
    st.insts -= 2 + (st.conts.len() + rets) as u32;
    if st.tail > 0 {
        // Falling through drops the `nop` too.
        st.tail = 9;
        st.tail_insts = 2;
    }
}

// ---------------------------------------------------------------------------------------
// The backend.

/// A value of a stitch-tier unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SVal {
    /// A scalar in frame word `n`.
    Slot(u32, Scalar),
    /// A slice in two frame words.
    Slice { ptr: u32, len: u32, elem: Scalar },
    /// A constant (its canonical bits).
    Imm(u64, Scalar),
    /// A slice known now. (Its length in 32 bits keeps every value in two words: values
    /// are moved often. A longer static slice is refused, for Cranelift to compile.)
    StaticSlice { ptr: u64, len: u32, elem: Scalar },
}

/// A word of a value: in a frame word, or a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Word {
    Slot(u32),
    Imm(u64),
}

/// A callee of a unit, as the runtime knows it.
#[derive(Clone, Debug)]
pub enum Callee {
    /// Generic code at `addr` of a module function taking `params`.
    Func { params: Vec<Type>, addr: u64 },
    /// Host function number `n`.
    Host(u32),
}

/// What a stitch-tier unit needs from the runtime.
pub trait Services {
    /// A fault site record; the word the code stores when it faults.
    fn fault_site(&mut self, kind: FaultKind, loc: SrcLoc) -> u64;
    /// The inline cache of promotion site `site`, if it has one.
    fn inline_cache(&mut self, site: u32) -> Option<u64>;
    fn callee(&self, callee: u32) -> Option<Callee>;
    /// The address of a helper (`HostCall`, `Promote`, `Fmod`, `Frame`).
    fn helper(&self, h: Import) -> u64;
}

/// What an instance of a stencil refers to besides its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extra {
    None,
    /// A promotion site.
    Site(u32),
    /// The address of a callee's generic code.
    Callee(u64),
}

/// What the operands of one stencil use already: a constant (at most one, see
/// `StencilEmitter::form`). (The accumulators and cache registers hold one word each,
/// which any number of operands may read: `x * x` reads it twice.)
#[derive(Clone, Copy, Default)]
struct Used {
    consts: bool,
}

/// A block of a unit being stitched.
struct BlockInfo {
    /// Where its parameters stand in the emitter's `params`: start and number.
    params: (u32, u32),
    at: Option<u32>,
    /// The parameters' frame words are final: the block was entered, placed, or its
    /// parameters handed out. Until then the first jump to it binds them (see
    /// `pass_args`).
    fixed: bool,
    /// The block this one stands for: it has no code of its own (it only jumps there,
    /// moving nothing), so jumps to it go there directly.
    alias: Option<u32>,
    /// Jumps to the block copied so far (through aliases too).
    entries: u32,
    /// The frame word each cache register holds on entry, when the block was placed
    /// where the code before falls into it and nothing else had jumped to it: its code
    /// may read that word from the register, and a later jump to it puts the word there
    /// first.
    acc_in: Regs,
    /// The registers whose `acc_in` its code, or the code of a block it falls into still
    /// holding that word there, read from the register (a bit each).
    acc_used: u8,
    /// Per register, the block that fell into this one with the register still holding
    /// its own `acc_in`: reading the register's `acc_in` here reads that block's too.
    acc_from: [Option<u32>; CACHE_REGS],
    /// Its code, once complete (another block was placed after it), if a jump to it may
    /// copy it instead (see `copy_block`).
    copy: Option<Copyable>,
    /// It heads a loop ([`crate::template::Emitter::loop_head`]): placed where the code
    /// before falls into it, its parameters the loop reads are loaded into cache
    /// registers first.
    head: bool,
    /// Of a loop head, the parameters the loop does not read (a bit each, the first 64):
    /// they are not loaded, and a register holding one on entry is left free (see
    /// `place`).
    unread: u64,
    /// What the cache registers held at every jump to it so far, if known (see `enter`),
    /// and per register the block the one jump was copied in if the register then still
    /// held that block's `acc_in` (after two jumps, none: those blocks were told the
    /// register is read): placed, it takes them as its `acc_in`.
    first_in: Option<(Regs, [Option<u32>; CACHE_REGS])>,
    /// Its `entries` when it was placed: more now, and jumps into it were copied since,
    /// which put no word in a register it did not read there yet (see `may_use`).
    placed_entries: u32,
}

/// A block's complete code that a jump to it may copy instead ([`StencilEmitter::copy_block`]):
/// where it ends, the block it falls into (if its code does not end in a jump), its
/// machine instructions, and the ranges of `fixups` and `locals` within it.
#[derive(Clone, Copy)]
struct Copyable {
    end: u32,
    falls: Option<u32>,
    insts: u32,
    fixups: (u32, u32),
    locals: (u32, u32),
    /// The cache registers its code leaves as they were on entry (a bit each).
    keeps: u8,
}

/// The most bytes of code a block copied in place of a jump to it may have: a
/// comparison's loads, the comparison and its two jumps (about 30 bytes).
const COPY_LIMIT: u32 = 48;

/// An operation with an integer result just copied, while nothing follows it. A
/// comparison: if a branch on its result comes next and nothing else reads the result,
/// its copy is taken back and a [`Key::CmpBranch`] copied instead (`fused_compare`).
/// Any: if the jump that comes next wants its result in another register, it is copied
/// again with its result there (`remake_in`).
struct LastOp {
    op: TOp,
    forms: Forms,
    words: Words,
    /// Its result's frame word, and the cache register it was left in, with what the
    /// emitter knew of that register before (its word, and its bits in `inherited`,
    /// `temps`, `read_here` and `stale`), true again once the copy is taken back.
    res: u32,
    dst: usize,
    before: (Option<u32>, [bool; 4]),
    /// Where its code starts and ends, and the counts before it.
    start: usize,
    end: usize,
    fixups: usize,
    frame_holes: usize,
    copies: usize,
    insts: usize,
    /// Its copy's jumps and cold part (none, if equal to `fixups` and `cold_fixups` after
    /// it), and its source position.
    cold_fixups: usize,
    loc: SrcLoc,
}

/// An operation's result copied into the current run of fall-through blocks: its frame
/// word, the stamp of the copy, where the copy's result holes (4-byte frame offsets)
/// stand in the code, and how many blocks of the run were placed before it.
struct Def {
    word: u32,
    seq: u32,
    sites: smallvec::SmallVec<[u32; 2]>,
    run: u32,
}

/// A branch's edges that pass arguments, placed after it: (the block made for the edge,
/// its target, the range of its arguments in `args`). Inline: a branch has a few.
#[derive(Default)]
struct Pending {
    edges: smallvec::SmallVec<[(u32, u32, u32, u32); 2]>,
    args: smallvec::SmallVec<[SVal; 16]>,
}

/// What a thread's stitching keeps from one unit to the next: the emitter's buffers
/// (emptied, their room kept, so a unit allocates little), and the stencils it used, in
/// front of the shared library (looked up without its lock). The thread keeps its own
/// copy of each stencil, counted by `Rc`: an `Arc` shared by every thread would have its
/// count's cache line bounce between the cores at every stencil copied (with eight
/// threads, the atomic increment alone took 4% of the rule service's time).
#[derive(Default)]
struct Scratch {
    /// The library the stencils are from ([`StencilLib::id`]).
    lib: u64,
    stencils: HashMap<Key, Rc<Stencil>, rustc_hash::FxBuildHasher>,
    /// The same, for the keys that pack into a number ([`Key::pack`]).
    packed: HashMap<u128, Rc<Stencil>, rustc_hash::FxBuildHasher>,
    /// The code buffer of the last unit, given back with [`recycle_code`] once installed.
    code: Vec<u8>,
    inputs: Vec<SVal>,
    blocks: Vec<BlockInfo>,
    params: Vec<SVal>,
    taken: Vec<u32>,
    fixups: Vec<(u32, u32)>,
    cuts: Vec<(u32, u32)>,
    cold: Vec<u8>,
    cold_fixups: Vec<(u32, u32)>,
    frame_holes: Vec<u32>,
    hole_values: Vec<Option<u64>>,
    moves: Vec<(u32, Word)>,
    read_at: Vec<u32>,
    written_at: Vec<u32>,
    defs: Vec<Def>,
    run: Vec<u32>,
    passes: Vec<(u32, u32)>,
    also: Vec<u32>,
    loaded: Vec<bool>,
    pinned: Vec<bool>,
    stores: Vec<(u32, u32)>,
    locals: Vec<(u32, u32)>,
    cut_out: Vec<(u32, u32)>,
    chain: Vec<u32>,
    /// The key of the last unit's prologue (the next unit mostly takes the same inputs).
    prologue: Option<Key>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
}

/// Gives the code [`StencilEmitter::finish`] returned back to this thread's scratch once
/// it is installed, so that the next unit copies into the same buffer (one kept, of at
/// most 64 KiB).
pub fn recycle_code(code: Vec<u8>) {
    if code.capacity() > 1 << 16 {
        return;
    }
    // (`try_with`: a thread being torn down just frees it.)
    let _ = SCRATCH.try_with(|c| {
        if let Some(mut sc) = c.take() {
            if sc.code.capacity() < code.capacity() {
                sc.code = code;
            }
            c.set(Some(sc));
        }
    });
}

/// In a cut branch's record ([`StencilEmitter`]'s `cuts`): the false side's jump was
/// dropped, and so was the jump of the block placed there, and maybe more: several blocks
/// share the address of the jump that remains, and any of them may be jumped to.
const CHAINED: u32 = u32::MAX - 1;

/// The stitch-tier backend: builds one unit by copying stencils (see the module doc).
pub struct StencilEmitter<'a> {
    lib: &'a StencilLib,
    services: &'a mut dyn Services,
    fuel: bool,
    static_slices: &'a [Option<(u64, u64, Scalar)>],
    code: Vec<u8>,
    blocks: Vec<BlockInfo>,
    /// The parameters of every block, each block's in one run (see [`BlockInfo::params`]).
    params: Vec<SVal>,
    /// Per frame word, the binding of parameters that last took it (bindings are
    /// numbered by `binding`; see `pass_args`).
    taken: Vec<u32>,
    binding: u32,
    /// `rel32` fields to patch with the address of a block.
    fixups: Vec<(u32, u32)>,
    /// The entries of `fixups` that are cut branches' conditional jumps followed by the
    /// branch's jump to its false side, and the block placed there when that jump was
    /// dropped (`u32::MAX` while it stands, [`CHAINED`] when that block's own jump was
    /// dropped too; see `invert_cuts`).
    cuts: Vec<(u32, u32)>,
    /// Cold parts of checks, placed after the code by `finish`, and the `rel32` fields
    /// (in `code`) of the jumps to them with their offsets in `cold`.
    cold: Vec<u8>,
    cold_fixups: Vec<(u32, u32)>,
    /// Frame words in use.
    slots: u32,
    inputs: Vec<SVal>,
    /// The block the prologue continues to (it jumps to the entry, whose parameters are the
    /// inputs' words when the entry takes exactly the inputs; see `create_block`).
    start: u32,
    /// Where the prologue's frame-size hole stands.
    frame_holes: Vec<u32>,
    /// The frame word whose value each cache register holds here, if known (register 0
    /// is the accumulator): set by an operation's result, forgotten at every label,
    /// jump, terminator and write of that word. A register only ever holds a copy: the
    /// word is written too (until `drop_dead_stores` finds no load of it).
    regs: Regs,
    /// Per cache register, when it was last written or read (the least recently used
    /// one takes the next result).
    reg_age: [u32; CACHE_REGS],
    /// The cache registers holding a result made in the current block (a bit each): an
    /// operation reading one leaves its result there (most such results are read once).
    temps: u8,
    /// The cache registers read since they were written or the current block placed (a
    /// bit each): a word read once is more often dead than one not read yet.
    read_here: u8,
    /// The cache registers holding, since the current block was placed, a word that is
    /// none of its parameters, not read here (a bit each): values come into a block as
    /// its parameters, so such a word is most likely dead here, and its register is the
    /// first taken for a result after the free ones.
    stale: u8,
    /// Words that no later code of the current block reads and no edge passes on
    /// ([`Backend::dead`]), the latest last: a register holding one is as good as free
    /// for the next result.
    dead: smallvec::SmallVec<[u32; 8]>,
    /// The same for the `f64` accumulator.
    facc: Option<u32>,
    /// The raw jump that ends the code, if any: its offset (dropped when its target is
    /// placed right after).
    last_jump: Option<u32>,
    /// The last stencil copied, while nothing follows it, if it was an operation with an
    /// integer result (see [`LastOp`]).
    last_op: Option<LastOp>,
    /// The frame words set to constants ([`Key::Set`]) by the code copied last, with
    /// their constants: every stencil copied since was a `Set` of another word, and no
    /// block was placed since (see `prefetch`).
    just_set: smallvec::SmallVec<[(u32, u64); CACHE_REGS]>,
    /// The block being copied into, and the registers that still hold what they held on
    /// entry (the block's `acc_in`; a bit each).
    current: Option<u32>,
    inherited: u8,
    /// What the registers held at the last raw jump, and per register the block it was
    /// copied in if the register then still held that block's `acc_in`.
    jump_acc: Regs,
    jump_inherited: [Option<u32>; CACHE_REGS],
    /// Where the last raw jump's code ends, and the registers that still held what they
    /// held on entry to the block it ends (`inherited` there, which the jump forgets).
    jump_kept: (u32, u8),
    /// The block placed last and where, while nothing has been copied after it, and
    /// whether the code before it falls into it (its jump there was dropped).
    empty: Option<(u32, u32, bool)>,
    /// The values of the holes of the stencil being copied.
    hole_values: Vec<Option<u64>>,
    /// The moves of the edge being passed.
    moves: Vec<(u32, Word)>,
    /// The stamp of the next stencil copied (copies are stamped 1, 2, ... in order), and
    /// per frame word the stamp of the last copy that read it and of the last that wrote
    /// it (0: none). Reads are stamped as operands are formed, before their copy.
    seq: u32,
    read_at: Vec<u32>,
    written_at: Vec<u32>,
    /// The results of operations copied into the current run of blocks, for retargeting
    /// (see `retarget`): a run is a block placed after a jump and the blocks placed after
    /// it that the code before falls into and nothing had jumped to (`run` lists those).
    defs: Vec<Def>,
    run: Vec<u32>,
    /// The words jumps of the current run passed, and the block each jump went to.
    passes: Vec<(u32, u32)>,
    /// Per frame word `s`, the word `d` that a retargeted result meant for `s` was
    /// written to (`u32::MAX`: none): a later jump that writes `s` as a parameter writes
    /// `d` too (see `retarget`).
    also: Vec<u32>,
    /// Per frame word, whether a copied stencil may load it: it is an operand word of the
    /// copy (a constant operand equal to a word's offset counts too, which can only keep
    /// more stores), or a word of an array in the frame (read through its address).
    loaded: Vec<bool>,
    /// Per frame word, whether it holds a value kept ([`crate::template::Emitter::keep`]: a unit invariant,
    /// which other blocks read without its being passed to them): no parameter is bound to
    /// it (see `pass_args`), no result retargeted from it (`retarget`), and a comparison
    /// writing it is not fused into its branch (`fused_compare`).
    pinned: Vec<bool>,
    /// Where the result store of each operation copied stands (the offset in `code` of
    /// its displacement) and where that copy ends, ascending, for `drop_dead_stores`.
    stores: Vec<(u32, u32)>,
    /// `rel32` fields of jumps within a copy to the code that follows it, and that code's
    /// offset (patched at once; again by `compact`).
    locals: Vec<(u32, u32)>,
    /// Byte ranges of `code` that `compact` removes: instructions that became dead.
    cut_out: Vec<(u32, u32)>,
    /// The blocks placed since the last one the code before did not fall into, in order
    /// (the current block last): one straight run of code.
    chain: Vec<u32>,
    /// The local arrays in the frame ([`Backend::array_slot`]): the word holding each one's
    /// address, its first word, element type and length, so that an access at a constant
    /// index reads or writes the element's word directly.
    frame_arrays: smallvec::SmallVec<[(u32, u32, Scalar, u32); 2]>,
    /// Also make each stencil's common variants ([`StencilLib::make_variants`]).
    variants: bool,
    /// Copies of a variant made ahead in place of a missing one (see `in_words`).
    fallbacks: usize,
    /// Stencils copied and their machine instructions.
    copies: usize,
    insts: usize,
    error: Option<StencilError>,
    /// The thread's scratch while this emitter has its buffers (given back on drop).
    scratch: Option<Box<Scratch>>,
    /// When the current block was placed: the instructions copied, and the lengths of
    /// `fixups`, `locals`, `cold_fixups`, `stores` and `frame_holes` (see `complete`).
    block_start: [u32; 6],
    /// The block last found copyable (see `complete`; `place` may drop its last jump).
    last_copyable: Option<u32>,
}

impl Drop for StencilEmitter<'_> {
    /// Gives the buffers back to the thread's scratch, emptied.
    fn drop(&mut self) {
        let Some(mut sc) = self.scratch.take() else {
            return;
        };
        macro_rules! give {
            ($($f:ident),*) => {$(
                sc.$f = std::mem::take(&mut self.$f);
                sc.$f.clear();
                // A big unit's room is not kept: at most 4,096 items a buffer (well
                // above what a unit of a few hundred copies needs; some hundreds of KiB
                // a thread at most).
                sc.$f.shrink_to(1 << 12);
            )*};
        }
        give!(
            inputs,
            blocks,
            params,
            taken,
            fixups,
            cuts,
            cold,
            cold_fixups,
            frame_holes,
            hole_values,
            moves,
            read_at,
            written_at,
            defs,
            run,
            passes,
            also,
            loaded,
            pinned,
            stores,
            locals,
            cut_out,
            chain
        );
        SCRATCH.with(|c| c.set(Some(sc)));
    }
}

impl<'a> StencilEmitter<'a> {
    /// Starts a unit taking `inputs` (the unit signature's types).
    pub fn new(
        lib: &'a StencilLib,
        services: &'a mut dyn Services,
        fuel: bool,
        static_slices: &'a [Option<(u64, u64, Scalar)>],
        inputs: &[Type],
    ) -> StencilEmitter<'a> {
        let mut sc = SCRATCH.with(|c| c.take()).unwrap_or_default();
        if sc.lib != lib.id {
            sc.lib = lib.id;
            sc.stencils.clear();
            sc.packed.clear();
        }
        let mut e = StencilEmitter {
            lib,
            services,
            fuel,
            static_slices,
            code: {
                let mut code = std::mem::take(&mut sc.code);
                code.clear();
                code.reserve(4096);
                code
            },
            blocks: std::mem::take(&mut sc.blocks),
            cold: std::mem::take(&mut sc.cold),
            cold_fixups: std::mem::take(&mut sc.cold_fixups),
            params: std::mem::take(&mut sc.params),
            taken: std::mem::take(&mut sc.taken),
            binding: 0,
            fixups: std::mem::take(&mut sc.fixups),
            cuts: std::mem::take(&mut sc.cuts),
            slots: 0,
            inputs: std::mem::take(&mut sc.inputs),
            start: 0,
            frame_holes: std::mem::take(&mut sc.frame_holes),
            regs: [None; CACHE_REGS],
            reg_age: [0; CACHE_REGS],
            temps: 0,
            read_here: 0,
            stale: 0,
            dead: smallvec::SmallVec::new(),
            facc: None,
            last_jump: None,
            last_op: None,
            just_set: smallvec::SmallVec::new(),
            current: None,
            inherited: 0,
            jump_acc: [None; CACHE_REGS],
            jump_inherited: [None; CACHE_REGS],
            jump_kept: (u32::MAX, 0),
            empty: None,
            hole_values: std::mem::take(&mut sc.hole_values),
            moves: std::mem::take(&mut sc.moves),
            seq: 1,
            read_at: std::mem::take(&mut sc.read_at),
            written_at: std::mem::take(&mut sc.written_at),
            defs: std::mem::take(&mut sc.defs),
            run: std::mem::take(&mut sc.run),
            passes: std::mem::take(&mut sc.passes),
            also: std::mem::take(&mut sc.also),
            loaded: std::mem::take(&mut sc.loaded),
            pinned: std::mem::take(&mut sc.pinned),
            stores: std::mem::take(&mut sc.stores),
            locals: std::mem::take(&mut sc.locals),
            cut_out: std::mem::take(&mut sc.cut_out),
            chain: std::mem::take(&mut sc.chain),
            frame_arrays: smallvec::SmallVec::new(),
            variants: false,
            fallbacks: 0,
            copies: 0,
            insts: 0,
            error: None,
            scratch: None,
            block_start: [0; 6],
            last_copyable: None,
        };
        e.scratch = Some(sc);
        // The inputs take the first frame words, in order.
        let (at, n) = e.new_params(inputs);
        e.inputs.clear();
        let params = &e.params[at as usize..(at + n) as usize];
        e.inputs.extend_from_slice(params);
        e.start = e.new_block((0, 0));
        let prologue = match e.scratch.as_mut().and_then(|sc| sc.prologue.take()) {
            Some(Key::Prologue(t)) if t[..] == *inputs => Key::Prologue(t),
            _ => Key::Prologue(inputs.to_vec()),
        };
        e.emit(
            &prologue,
            &[],
            &[],
            SrcLoc::default(),
            Extra::None,
            &[Some(e.start)],
        );
        if let Some(sc) = e.scratch.as_mut() {
            sc.prologue = Some(prologue);
        }
        e
    }

    /// How many stencils this unit copied in place of missing ones (each a variant made
    /// ahead: see [`Misses`]).
    pub fn fallbacks(&self) -> usize {
        self.fallbacks
    }

    /// Makes this emitter also make the common variants of every stencil it copies (to
    /// make a program's stencils ahead of its specializations).
    pub fn with_variants(mut self) -> Self {
        self.variants = true;
        self
    }

    /// Machine code of the unit, once the executor is done (`entry` is its first block);
    /// the stencils copied and their machine instructions.
    pub fn finish(mut self, entry: u32) -> Result<(Vec<u8>, usize, usize), StencilError> {
        self.place(self.start);
        let inputs = std::mem::take(&mut self.inputs);
        self.jump_with(entry, &inputs, false);
        self.inputs = inputs;
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.invert_cuts();
        self.drop_dead_stores();
        self.compact();
        self.align_loops();
        let cold_at = self.code.len() as i64;
        self.code.extend_from_slice(&self.cold);
        for &(at, off) in &self.cold_fixups {
            let rel = cold_at + i64::from(off) - (i64::from(at) + 4);
            let at = at as usize;
            self.code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
        }
        for &(at, b) in &self.fixups {
            let Some(target) = self.blocks[self.resolve(b) as usize].at else {
                return Err(StencilError(format!("block {b} was never placed")));
            };
            let rel = i64::from(target) - (i64::from(at) + 4);
            let at = at as usize;
            self.code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
        }
        let words = u64::from(self.slots);
        if words >= 1 << 28 {
            return Err(StencilError("the frame is too large".into()));
        }
        for &at in &self.frame_holes {
            let at = at as usize;
            self.code[at..at + 4].copy_from_slice(&(words as u32).to_le_bytes());
        }
        Ok((std::mem::take(&mut self.code), self.copies, self.insts))
    }

    /// Cut branches whose true side was placed right after them. Such a branch is `jcc T;
    /// jmp F; T: ...`, or `jcc T; F: jmp G; T: ...` when the false side `F` was placed
    /// next and its only code is a jump. Once every block is placed, the condition is
    /// negated (a near `jcc` is `0f 8c` with `c` a condition code whose lowest bit negates
    /// it), the `jcc` goes where the `jmp` went and the `jmp` becomes a five-byte `nop`:
    /// the true side falls through and the false side takes the one jump. In the second
    /// shape only if nothing jumps to `F` (its code is then reached only from the branch),
    /// and not when `F` itself fell into a block placed after it: every block of such a
    /// chain stands at the jump's address, and one another block jumps to would run into
    /// the true side instead of reaching `G`.
    /// (Done here, not when `T` is placed: a block placed next may turn out to have no
    /// code, an alias of another, and jumps to `F` may come later.)
    fn invert_cuts(&mut self) {
        const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        for &(i, f_block) in &self.cuts {
            let i = i as usize;
            let (Some(&(j, t)), Some(&(m, f))) = (self.fixups.get(i), self.fixups.get(i + 1))
            else {
                continue;
            };
            let (ju, mu) = (j as usize, m as usize);
            let shape = ju >= 2
                && m == j + 5
                && self.code.get(mu - 1) == Some(&0xe9)
                && self.code[ju - 2] == 0x0f
                && self.code[ju - 1] & 0xf0 == 0x80;
            let alone = match f_block {
                u32::MAX => true,
                CHAINED => false,
                f_block => {
                    let fb = &self.blocks[f_block as usize];
                    fb.alias.is_none() && fb.at == Some(j + 4) && fb.entries == 0
                }
            };
            if !shape || !alone || self.blocks[self.resolve(t) as usize].at != Some(m + 4) {
                continue;
            }
            self.code[ju - 1] ^= 1;
            self.code[mu - 1..mu + 4].copy_from_slice(&NOP5);
            // Nothing jumps to the `nop`: only the `jcc` came before it.
            self.cut_out.push((m - 1, m + 4));
            self.fixups[i] = (j, f);
            // (The jump's own entry now patches the `jcc`'s displacement again.)
            self.fixups[i + 1] = (j, f);
        }
    }

    /// The stencil of `key`: from the thread's scratch, or the library (and kept in the
    /// scratch).
    fn stencil(&mut self, key: &Key) -> Result<Rc<Stencil>, StencilError> {
        let sc = self.scratch.as_mut().expect("the emitter has the scratch");
        if let Some(p) = key.pack() {
            if let Some(st) = sc.packed.get(&p) {
                return Ok(st.clone());
            }
            let st = Rc::new(Stencil::clone(&*self.lib.get_as(key, !self.variants)?));
            sc.packed.insert(p, st.clone());
            return Ok(st);
        }
        if let Some(st) = sc.stencils.get(key) {
            return Ok(st.clone());
        }
        let st = Rc::new(Stencil::clone(&*self.lib.get_as(key, !self.variants)?));
        sc.stencils.insert(key.clone(), st.clone());
        Ok(st)
    }

    /// The stencil of `key` if it can be copied without waiting for Cranelift: it is in
    /// the thread's scratch or made, and not refused; or units make what they miss
    /// ([`Misses::Make`], and the emitter that makes a program's stencils ahead), and it
    /// is not refused. A key that is not ready is handed to the worker thread, if any,
    /// and counted as a fallback: the caller copies a variant made ahead instead (see
    /// `in_words`), or copies apart what the stencil would have fused (a comparison and
    /// its branch, an operation and the move of its result).
    fn ready(&mut self, key: &Key) -> Option<Rc<Stencil>> {
        let st = self.lookup(key, true);
        if st.is_none() {
            self.lib.shared.counts[FALLBACKS].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.fallbacks += 1;
        }
        st
    }

    /// `ready`, without handing a missing key to the worker.
    fn made(&mut self, key: &Key) -> bool {
        self.lookup(key, false).is_some()
    }

    /// The stencil of `key` if it can be copied now (see `ready`), kept in the thread's
    /// scratch; `want`: a missing one is handed to the worker.
    fn lookup(&mut self, key: &Key, want: bool) -> Option<Rc<Stencil>> {
        if self.variants || self.lib.misses == Misses::Make {
            return self.stencil(key).ok();
        }
        let sc = self.scratch.as_mut().expect("the emitter has the scratch");
        let packed = key.pack();
        let cached = match packed {
            Some(p) => sc.packed.get(&p),
            None => sc.stencils.get(key),
        };
        if let Some(st) = cached {
            return Some(st.clone());
        }
        match self.lib.find(key) {
            Some(Ok(st)) => {
                let st = Rc::new(Stencil::clone(&st));
                match packed {
                    Some(p) => sc.packed.insert(p, st.clone()),
                    None => sc.stencils.insert(key.clone(), st.clone()),
                };
                Some(st)
            }
            Some(Err(_)) => None,
            None => {
                if want {
                    self.lib.want(key);
                }
                None
            }
        }
    }

    /// `forms` (with their operand `words`) with every operand a cache register holds
    /// read from its frame word instead (a register only ever holds a copy of a word that
    /// is written), and a baked constant put in a frame word: the forms of the variants
    /// made ahead with a program's generic code and its common variants (see
    /// [`StencilLib::make_variants`]). If the variant of those forms that `make` keys is
    /// not made either (a constant operand or a static slice that the generic code,
    /// which has neither, made no variant of; an operation only strength reduction
    /// makes), every constant goes in frame words too: the forms of the generic code's
    /// own. (The caller's `ready` counted the fallback.)
    fn in_words(
        &mut self,
        forms: &[Form],
        words: &[u64],
        make: impl Fn(&[Form]) -> Key,
    ) -> (Forms, Words) {
        let (forms, words) = self.words_of(forms, words, false);
        if self.made(&make(&forms)) {
            return (forms, words);
        }
        self.words_of(&forms, &words, true)
    }

    /// `forms` with their `words`, each operand a register holds and each baked constant
    /// in a frame word, and with `constants`, each immediate and constant slice too (see
    /// `in_words`).
    fn words_of(&mut self, forms: &[Form], words: &[u64], constants: bool) -> (Forms, Words) {
        let (mut out, mut out_words) = (Forms::new(), Words::new());
        let mut old = words.iter().copied();
        for &f in forms {
            let n = match f {
                Form::Slice(_) | Form::ConstSlice(_) => 2,
                Form::Slot(_) | Form::Imm(..) => 1,
                Form::Acc(_) | Form::Reg(..) | Form::Baked(..) => 0,
            };
            let mut own = old.by_ref().take(n);
            let value = match f {
                Form::Acc(Scalar::F64) => self.facc.map(|w| SVal::Slot(w, Scalar::F64)),
                Form::Acc(t) => self.regs[0].map(|w| SVal::Slot(w, t)),
                Form::Reg(t, k) => self.regs[usize::from(k)].map(|w| SVal::Slot(w, t)),
                Form::Baked(t, bits) => Some(self.materialize(SVal::Imm(u64::from(bits), t))),
                Form::Imm(t, _) if constants => {
                    own.next().map(|bits| self.materialize(SVal::Imm(bits, t)))
                }
                Form::ConstSlice(elem) if constants => match (own.next(), own.next()) {
                    (Some(ptr), Some(len)) => u32::try_from(len)
                        .ok()
                        .map(|len| self.materialize(SVal::StaticSlice { ptr, len, elem })),
                    _ => None,
                },
                f => {
                    out_words.extend(own);
                    out.push(f);
                    continue;
                }
            };
            match value {
                Some(SVal::Slot(w, t)) => {
                    out_words.push(8 * u64::from(w));
                    out.push(Form::Slot(t));
                }
                Some(SVal::Slice { ptr, len, elem }) => {
                    out_words.extend([8 * u64::from(ptr), 8 * u64::from(len)]);
                    out.push(Form::Slice(elem));
                }
                _ => {
                    self.fail(StencilError(format!("{f:?}: the register holds no word")));
                    return (
                        forms.iter().copied().collect(),
                        words.iter().copied().collect(),
                    );
                }
            }
        }
        (out, out_words)
    }

    /// `key` (of operand forms `forms` and words `words`) and its stencil if that is
    /// ready; else the key `make` builds from the forms of the variant made ahead (see
    /// `in_words`), with its words, to be looked up when copied.
    fn ready_or_in_words(
        &mut self,
        key: Key,
        forms: &[Form],
        words: Words,
        make: impl Fn(&[Form]) -> Key,
    ) -> (Key, Words, Option<Rc<Stencil>>) {
        if let Some(st) = self.ready(&key) {
            return (key, words, Some(st));
        }
        let (forms, words) = self.in_words(forms, &words, &make);
        (make(&forms), words, None)
    }

    fn fail(&mut self, e: StencilError) {
        self.error.get_or_insert(e);
    }

    fn slot(&mut self) -> u32 {
        self.slots += 1;
        self.slots - 1
    }

    /// A fresh frame word (two for a slice) for a value of type `t`, not an array.
    fn new_value(&mut self, t: Type) -> SVal {
        match t {
            Type::Scalar(s) => SVal::Slot(self.slot(), s),
            Type::Slice { elem, .. } => {
                let ptr = self.slot();
                let len = self.slot();
                SVal::Slice { ptr, len, elem }
            }
            Type::Array { .. } => unreachable!("arrays are passed as their elements"),
        }
    }

    /// Fresh frame words for parameters of types `tys` (arrays as their elements),
    /// appended to `params`: where they start and how many.
    fn new_params(&mut self, tys: &[Type]) -> (u32, u32) {
        let at = self.params.len();
        for &t in tys {
            match t {
                Type::Array { elem, len } => {
                    for _ in 0..len {
                        let v = SVal::Slot(self.slot(), elem);
                        self.params.push(v);
                    }
                }
                t => {
                    let v = self.new_value(t);
                    self.params.push(v);
                }
            }
        }
        (at as u32, (self.params.len() - at) as u32)
    }

    /// Whether parameters of types `tys` (arrays as their elements) are, value for value,
    /// of the unit's inputs' types.
    fn takes_inputs(&self, tys: &[Type]) -> bool {
        let mut inputs = self.inputs.iter();
        let mut next = |t: Type| match (t, inputs.next()) {
            (Type::Scalar(s), Some(&SVal::Slot(_, x))) => s == x,
            (Type::Slice { elem, .. }, Some(&SVal::Slice { elem: x, .. })) => elem == x,
            _ => false,
        };
        for &t in tys {
            let ok = match t {
                Type::Array { elem, len } => (0..len).all(|_| next(Type::Scalar(elem))),
                t => next(t),
            };
            if !ok {
                return false;
            }
        }
        inputs.next().is_none()
    }

    /// The parameters of block `b`.
    fn params_of(&self, b: u32) -> &[SVal] {
        let (at, n) = self.blocks[b as usize].params;
        &self.params[at as usize..(at + n) as usize]
    }

    fn new_block(&mut self, params: (u32, u32)) -> u32 {
        self.blocks.push(BlockInfo {
            params,
            at: None,
            fixed: false,
            alias: None,
            entries: 0,
            acc_in: [None; CACHE_REGS],
            acc_used: 0,
            acc_from: [None; CACHE_REGS],
            copy: None,
            head: false,
            unread: 0,
            first_in: None,
            placed_entries: 0,
        });
        self.blocks.len() as u32 - 1
    }

    /// Places block `b` here (dropping a jump to it that ends the code).
    fn place(&mut self, b: u32) {
        // The raw jump that ends the code, if it goes to `b`, is dropped: `b` follows. (A
        // block placed meanwhile that got no code, being an alias, leaves it the last.)
        let mut falls = false;
        let mut cut_side = false;
        if let Some(at) = self.last_jump {
            let to_b = self
                .fixups
                .last()
                .is_some_and(|&(f, t)| f == at + 1 && self.resolve(t) == b);
            if at as usize + 5 == self.code.len() && to_b {
                self.code.truncate(at as usize);
                self.fixups.pop();
                // The block the jump ended now falls into `b` (blocks placed since got no
                // code): its copy too.
                if let Some(c) = self.last_copyable {
                    if let Some(cp) = &mut self.blocks[c as usize].copy {
                        if cp.end == at + 5 {
                            cp.end = at;
                            cp.falls = Some(b);
                            cp.fixups.1 = cp.fixups.1.min(self.fixups.len() as u32);
                        }
                    }
                }
                // The dropped jump was a cut branch's jump to its false side: `b` is that
                // side. A second such drop (the false side's own jump, to a block placed
                // next too) makes a chain of blocks at one address, any of which other
                // code may jump to: the cut is then left alone (see `invert_cuts`).
                if let Some(cut) = self.cuts.last_mut() {
                    if cut.0 as usize + 1 == self.fixups.len() {
                        cut.1 = match cut.1 {
                            u32::MAX => b,
                            _ => CHAINED,
                        };
                        cut_side = true;
                    }
                }
                let info = &mut self.blocks[b as usize];
                info.entries = info.entries.saturating_sub(1);
                self.last_jump = None;
                falls = true;
            }
        }
        // (Not at a cut branch's false side: inverting the branch would have it jump past
        // the loads.)
        if falls
            && !cut_side
            && self.blocks[b as usize].head
            && self.blocks[b as usize].entries == 0
        {
            self.prefetch(b);
        }
        self.just_set.clear();
        self.complete(b, falls);
        if !falls {
            self.chain.clear();
        }
        self.chain.push(b);
        self.empty = Some((b, self.code.len() as u32, falls));
        self.last_op = None;
        let info = &mut self.blocks[b as usize];
        info.at = Some(self.code.len() as u32);
        info.fixed = true;
        // Jumps from elsewhere may enter here: what the cache registers hold is known only
        // when the code before falls in and nothing else has jumped here yet (a later
        // jump here puts the words there first, see `establish`).
        // So is it when the block's only entry so far is a jump from code whose registers
        // were known there.
        let inherit = falls && info.entries == 0;
        if inherit {
            info.acc_in = self.jump_acc;
            info.acc_from = self.jump_inherited;
            self.run.push(b);
        } else {
            match (falls, info.entries, info.first_in) {
                (_, 0, _) | (_, _, None) => {}
                (false, _, Some((regs, from))) => {
                    info.acc_in = regs;
                    info.acc_from = from;
                }
                (true, _, Some(_)) => self.meet_entries(b),
            }
            self.defs.clear();
            self.run.clear();
            self.passes.clear();
        }
        // A loop head does not keep what its loop does not read in registers: those
        // are free for the values the loop makes (its jumps back put nothing there).
        if self.blocks[b as usize].unread != 0 {
            for k in 0..CACHE_REGS {
                if self.blocks[b as usize].acc_in[k].is_some_and(|w| self.is_unread(b, w)) {
                    self.blocks[b as usize].acc_in[k] = None;
                }
            }
        }
        let info = &mut self.blocks[b as usize];
        let acc_in = info.acc_in;
        info.placed_entries = info.entries;
        self.forget_accs();
        self.current = Some(b);
        self.dead.clear();
        if acc_in.iter().any(Option::is_some) {
            self.regs = acc_in;
            self.inherited = (0..CACHE_REGS)
                .filter(|&k| self.regs[k].is_some())
                .fold(0, |m, k| m | 1 << k);
            self.stale = (0..CACHE_REGS)
                .filter(|&k| self.regs[k].is_some_and(|w| !self.is_param(b, w)))
                .fold(0, |m, k| m | 1 << k);
            // A loop head relies on its parameters' registers at once: every jump into
            // it puts them there, the loop's back edges too, whichever later block of the
            // loop reads them first (a jump copied before that read would not).
            if self.blocks[b as usize].head {
                for k in 0..CACHE_REGS {
                    let param = self.regs[k].is_some_and(|w| self.is_param(b, w));
                    if param && self.may_use(k) {
                        self.use_inherited(k);
                    }
                }
            }
        }
    }

    /// The registers block `b`, about to be placed, takes from its entries so far: the
    /// code before, falling into it, and jumps whose registers were known (a loop's exit,
    /// from its first test and from its last): those that hold the same word at all of
    /// them, if all may read them (read now on the jumps' side; on the side falling
    /// through when they are read, as for any block that inherits).
    fn meet_entries(&mut self, b: u32) {
        let Some((regs, from)) = self.blocks[b as usize].first_in else {
            return;
        };
        for k in 0..CACHE_REGS {
            let same = self.jump_acc[k].is_some() && self.jump_acc[k] == regs[k];
            if same && self.may_use_from(from[k], k) {
                self.use_from(from[k], k);
                let info = &mut self.blocks[b as usize];
                info.acc_in[k] = regs[k];
                info.acc_from[k] = self.jump_inherited[k];
            }
        }
    }

    /// Loads the parameters of loop head `b`, about to be placed where the code before
    /// falls into it, into the cache registers that hold none of them (as many as there
    /// are registers): `b` inherits them, its code reads them there, and the jumps back
    /// into it put the new values there (see `establish`), most often from the registers
    /// they were made in, so that a value carried around the loop stays in registers.
    ///
    /// A parameter whose frame word the code just before set to a constant (the
    /// constant a loop starts from) gets the constant in its register instead, and its
    /// word is not read: when nothing else in the unit reads it, the stores into it in
    /// the loop are dead (see `drop_dead_stores`). Sound because the word holds that
    /// constant where `b` begins: the `Set`s are the last code copied, which falls into
    /// `b`, and `b` has no other entry yet (later ones put the word in the register,
    /// see `establish`).
    fn prefetch(&mut self, b: u32) {
        let (at, n) = self.blocks[b as usize].params;
        let unread = self.blocks[b as usize].unread;
        let just_set = std::mem::take(&mut self.just_set);
        for p in at..at + n {
            let SVal::Slot(w, t) = self.params[p as usize] else {
                continue;
            };
            if (p - at) < 64 && unread & 1 << (p - at) != 0 {
                continue;
            }
            // (Not a word of an array in the frame: stores through its address would not
            // reach the register.)
            if t == Scalar::F64 || self.in_frame_array(w) || self.jump_acc.contains(&Some(w)) {
                continue;
            }
            // A register holding no parameter of `b`, empty ones first.
            let Some(k) = (0..CACHE_REGS)
                .filter(|&k| !self.jump_acc[k].is_some_and(|r| self.is_param(b, r)))
                .min_by_key(|&k| self.jump_acc[k].is_some())
            else {
                return;
            };
            // (What `reload` says the registers hold is forgotten when `b` is placed.)
            match just_set.iter().find(|&&(x, _)| x == w) {
                Some(&(_, v)) => {
                    self.emit(
                        &Key::SetReg(k as u8, v >= 1 << 31),
                        &[v],
                        &[],
                        SrcLoc::default(),
                        Extra::None,
                        &[None],
                    );
                    self.hold(k, Some(w));
                }
                None => self.reload(k, w),
            }
            self.jump_acc[k] = Some(w);
            self.jump_inherited[k] = None;
        }
    }

    /// Records that the current block reads its `acc_in` of register `k` from the
    /// register, and so do the blocks that fell into it holding the same word there.
    fn use_inherited(&mut self, k: usize) {
        self.use_from(self.current.filter(|_| self.inherited & 1 << k != 0), k);
    }

    /// Records that register `k`'s `acc_in` of block `b` is read (by `b`'s code, or by
    /// code `b`'s falls into or jumps from with the register still holding it), and so
    /// on up its `acc_from`.
    fn use_from(&mut self, mut b: Option<u32>, k: usize) {
        while let Some(x) = b {
            let info = &mut self.blocks[x as usize];
            if info.acc_used & 1 << k != 0 {
                break;
            }
            info.acc_used |= 1 << k;
            b = info.acc_from[k];
        }
    }

    /// Whether cache register `k` may be read here: unless it still holds what the
    /// current block inherited, or the blocks that block inherited it from (`acc_from`)
    /// already read it, no jump into any of them was copied since it was placed (such a
    /// jump put nothing in the register).
    fn may_use(&self, k: usize) -> bool {
        self.may_use_from(self.current.filter(|_| self.inherited & 1 << k != 0), k)
    }

    /// `may_use`, for a register that still holds `b`'s `acc_in` (`None`: written since).
    fn may_use_from(&self, mut b: Option<u32>, k: usize) -> bool {
        while let Some(x) = b {
            let info = &self.blocks[x as usize];
            if info.acc_used & 1 << k != 0 {
                return true;
            }
            if info.entries > info.placed_entries {
                return false;
            }
            b = info.acc_from[k];
        }
        true
    }

    /// A register holding word `w` here that may be read, if any (read now: see
    /// `use_inherited`).
    fn reg_of(&mut self, w: u32) -> Option<usize> {
        let k = (0..CACHE_REGS).find(|&k| self.regs[k] == Some(w) && self.may_use(k))?;
        self.use_inherited(k);
        self.reg_age[k] = self.seq;
        self.read_here |= 1 << k;
        self.stale &= !(1 << k);
        Some(k)
    }

    /// Register `k` now holds word `w` (no longer what it held on entry).
    fn hold(&mut self, k: usize, w: Option<u32>) {
        self.regs[k] = w;
        self.reg_age[k] = self.seq;
        self.inherited &= !(1 << k);
        self.temps &= !(1 << k);
        self.read_here &= !(1 << k);
        self.stale &= !(1 << k);
    }

    /// The register the next result goes to: a free one, else the least recently used
    /// of those holding a word this block most likely does not need (`stale`), else of
    /// those read here already, else the least recently used.
    fn free_reg(&self) -> usize {
        (0..CACHE_REGS)
            .min_by_key(|&k| {
                let held = self.regs[k].is_some_and(|w| !self.dead.contains(&w));
                let needed = self.stale & 1 << k == 0;
                let unread = self.read_here & 1 << k == 0;
                (held, needed, unread, self.reg_age[k])
            })
            .unwrap_or(0)
    }

    /// Counts a jump to `b` (to the block it stands for); `known`: the cache registers
    /// hold what `regs` says where it jumps.
    ///
    /// Until `b` is placed, `first_in` keeps what the registers hold at every jump so far
    /// (a register holding different words at two of them holds none; a jump whose
    /// registers are unknown, none). From the second jump on, the blocks each register's
    /// word was inherited from are asked at once whether it may be read there, and told
    /// that it is read (as `place` does for the jump that is the only one), so that the
    /// registers `b` takes on need no one to ask them later.
    fn enter(&mut self, b: u32, known: bool) {
        let r = self.resolve(b) as usize;
        let info = &mut self.blocks[r];
        info.entries += 1;
        if info.at.is_some() {
            return;
        }
        if !known {
            info.first_in = None;
            return;
        }
        if info.entries == 1 {
            self.blocks[r].first_in = Some((self.regs, self.inherited_from()));
            return;
        }
        let Some((mut regs, mut from)) = info.first_in else {
            return;
        };
        if regs.iter().all(Option::is_none) {
            return;
        }
        let here = self.inherited_from();
        for k in 0..CACHE_REGS {
            let keep = regs[k].is_some()
                && regs[k] == self.regs[k]
                && self.may_use_from(from[k], k)
                && self.may_use_from(here[k], k);
            if keep {
                self.use_from(from[k], k);
                self.use_from(here[k], k);
            } else {
                regs[k] = None;
            }
            from[k] = None;
        }
        self.blocks[r].first_in = Some((regs, from));
    }

    /// The words a jump to `b` must leave in the cache registers, where `b`'s code reads
    /// them there.
    fn acc_for(&self, b: u32) -> Regs {
        let info = &self.blocks[self.resolve(b) as usize];
        let mut r = info.acc_in;
        for (k, w) in r.iter_mut().enumerate() {
            if info.acc_used & 1 << k == 0 {
                *w = None;
            }
        }
        r
    }

    /// Whether a jump to `b` must leave words in cache registers.
    fn needs_regs(&self, b: u32) -> bool {
        self.acc_for(b).iter().any(Option::is_some)
    }

    /// The block `b` stands for (itself unless it only jumps on).
    fn resolve(&self, mut b: u32) -> u32 {
        // A block is aliased to the end of its target's chain, never to itself: chains
        // have no cycles.
        while let Some(a) = self.blocks[b as usize].alias {
            b = a;
        }
        b
    }

    /// Records the code of the block being copied into as complete, `next` placed after
    /// it (and falling into it if `falls`), and whether a jump to it may copy it instead
    /// (see `copy_block`): at most [`COPY_LIMIT`] bytes that jump somewhere, with no cold
    /// part, no result store (nothing for `drop_dead_stores` and `retarget` to find
    /// twice) and no frame-size hole (a jump copying it puts the words its code reads from
    /// cache registers on entry there first, as a jump to it would).
    fn complete(&mut self, next: u32, falls: bool) {
        let counts = [
            self.insts as u32,
            self.fixups.len() as u32,
            self.locals.len() as u32,
            self.cold_fixups.len() as u32,
            self.stores.len() as u32,
            self.frame_holes.len() as u32,
        ];
        let start = std::mem::replace(&mut self.block_start, counts);
        let Some(c) = self.current else {
            return;
        };
        let info = &self.blocks[c as usize];
        let (Some(at), end) = (info.at, self.code.len() as u32) else {
            return;
        };
        // The registers its code leaves as they were on entry: if it ends in a raw jump
        // (dropped if `falls`), those the jump found so.
        let keeps = match self.jump_kept {
            (j, bits) if j == end || (falls && j == end + 5) => bits,
            _ => self.inherited,
        };
        if end > at && end - at <= COPY_LIMIT && counts[1] > start[1] && counts[3..] == start[3..] {
            self.blocks[c as usize].copy = Some(Copyable {
                end,
                falls: falls.then_some(next),
                insts: counts[0] - start[0],
                fixups: (start[1], counts[1]),
                locals: (start[2], counts[2]),
                keeps,
            });
            self.last_copyable = Some(c);
        }
    }

    /// **Block copies** (loop rotation by tail duplication). A jump to a block whose code
    /// is complete and small (see `complete`) and jumps back into the run of code the jump
    /// ends (see `closes_loop`): a loop's test, that the loop's body jumps back to,
    /// copied in place of the jump, with its jumps (their `fixups` and `locals`
    /// repeated at the copy's offsets), then jumps to the block it fell into, if any. So
    /// the body of a loop ends in the test and a conditional jump back to itself, one
    /// taken jump an iteration where there were two (the body's jump to the test, and
    /// the test's to the body). Sound because the block's code is all that a jump to it
    /// runs before reaching one of those jumps or the block it falls into, and the
    /// registers it reads on entry hold what it reads there (see `raw_jump`).
    fn copy_block(&mut self, h: u32, cp: Copyable) {
        let Some(at) = self.blocks[h as usize].at else {
            return self.jump_to(h);
        };
        let base = self.code.len() as u32;
        self.last_op = None;
        self.just_set.clear();
        // The registers the block's code leaves alone hold what they held before the copy
        // (a loop's test only compares), throughout the copy: its jumps leave them so.
        for k in 0..CACHE_REGS {
            if cp.keeps & 1 << k == 0 {
                self.hold(k, None);
            }
        }
        self.facc = None;
        self.code.extend_from_within(at as usize..cp.end as usize);
        for k in cp.fixups.0..cp.fixups.1 {
            let (p, t) = self.fixups[k as usize];
            self.fixups.push((p - at + base, t));
            self.enter(t, true);
        }
        for k in cp.locals.0..cp.locals.1 {
            let (p, t) = self.locals[k as usize];
            self.locals.push((p - at + base, t - at + base));
        }
        self.copies += 1;
        self.insts += cp.insts as usize;
        match cp.falls {
            // (To where `f` jumps, if that is all its code: the false side of a branch.)
            Some(f) => self.jump_to(self.only_jumps_to(f).unwrap_or(f)),
            None => {
                // The code ends as the block's did: in a jump (the last one recorded), a
                // return or a trap.
                let n = self.code.len();
                let jumps = n >= 5
                    && self.code[n - 5] == 0xe9
                    && self
                        .fixups
                        .last()
                        .is_some_and(|&(p, _)| p as usize + 4 == n);
                // (Its registers there: those the code leaves alone, as for a jump.)
                self.last_jump = jumps.then_some(n as u32 - 5);
                self.jump_acc = self.regs;
                self.jump_inherited = self.inherited_from();
                self.jump_kept = (n as u32, self.inherited);
                self.forget_accs();
            }
        }
    }

    /// The block that block `f`'s code, one `jmp` and nothing else, goes to.
    fn only_jumps_to(&self, f: u32) -> Option<u32> {
        let fc = self.blocks[f as usize].copy?;
        let (p, g) = *self.fixups.get(fc.fixups.0 as usize)?;
        let one = fc.fixups.1 == fc.fixups.0 + 1 && p + 4 == fc.end;
        (one && self.blocks[f as usize].at == Some(p - 1) && self.code[p as usize - 1] == 0xe9)
            .then_some(g)
    }

    /// A jump to block `b`: a copy of its code if it may be copied (see `copy_block`),
    /// else a raw `jmp rel32`.
    fn raw_jump(&mut self, b: u32) {
        let r = self.resolve(b);
        match self.blocks[r as usize].copy {
            Some(cp) if self.current != Some(r) && self.closes_loop(cp) => {
                // The copy reads what the block reads from cache registers on entry.
                self.establish(r);
                self.copy_block(r, cp)
            }
            _ => self.jump_to(b),
        }
    }

    /// Whether a copy of a block's code here would jump back into the straight run of
    /// code it ends (`chain`): a loop's test copied at the end of its body. Only then is
    /// a block copied: a test copied into each arm of a branch that both jump back to it
    /// saves no taken jump (each arm still jumps, to the body instead of the test), and
    /// the copies make the loop larger.
    fn closes_loop(&self, cp: Copyable) -> bool {
        (cp.fixups.0..cp.fixups.1).any(|k| {
            let t = self.resolve(self.fixups[k as usize].1);
            self.chain.contains(&t)
        })
    }

    /// A raw `jmp rel32` to block `b`.
    fn jump_to(&mut self, b: u32) {
        self.establish(b);
        self.last_op = None;
        let at = self.code.len() as u32;
        self.code.extend_from_slice(&[0xe9, 0, 0, 0, 0]);
        self.fixups.push((at + 1, b));
        self.enter(b, true);
        self.jump_kept = (at + 5, self.inherited);
        self.last_jump = Some(at);
        self.jump_acc = self.regs;
        self.jump_inherited = self.inherited_from();
        self.forget_accs();
    }

    /// Per cache register, the current block if the register still holds what it held
    /// on entry (a block entered from here with it takes it from that block).
    fn inherited_from(&self) -> [Option<u32>; CACHE_REGS] {
        std::array::from_fn(|k| self.current.filter(|_| self.inherited & 1 << k != 0))
    }

    /// Whether frame word `w` is a parameter of loop head `b` that its loop does not
    /// read.
    fn is_unread(&self, b: u32, w: u32) -> bool {
        let unread = self.blocks[b as usize].unread;
        (self.params_of(b).iter().take(64).enumerate())
            .any(|(j, &p)| unread & 1 << j != 0 && matches!(p, SVal::Slot(x, _) if x == w))
    }

    /// Whether frame word `w` is one of block `b`'s (scalar) parameters.
    fn is_param(&self, b: u32, w: u32) -> bool {
        let (at, n) = self.blocks[b as usize].params;
        self.params[at as usize..(at + n) as usize]
            .iter()
            .any(|&p| matches!(p, SVal::Slot(x, _) if x == w))
    }

    /// Puts the words block `b`'s code reads from cache registers on entry there (a
    /// parallel move: from the register holding a word, else from its frame word).
    fn establish(&mut self, b: u32) {
        let need = self.acc_for(b);
        self.remake_in(&need);
        let mut pending: smallvec::SmallVec<[(usize, u32); CACHE_REGS]> = smallvec::SmallVec::new();
        for (k, w) in need.iter().enumerate() {
            match *w {
                // The word is there: if only because this block inherited it, the jump
                // reads it, and jumps into this block must put it there first.
                Some(w) if self.regs[k] == Some(w) && self.may_use(k) => self.use_inherited(k),
                Some(w) => pending.push((k, w)),
                None => {}
            }
        }
        while !pending.is_empty() {
            // A move whose destination holds no word another move still needs (or holds
            // one another register holds too).
            let i = (0..pending.len()).find(|&i| self.clobberable(pending[i].0, &pending));
            let Some(i) = i else {
                // A cycle (registers swapping words): the first destination's word is
                // saved in a register `b` does not read on entry, else that move loads
                // its word from the frame.
                let (k, w) = pending[0];
                let spare =
                    (0..CACHE_REGS).find(|&t| need[t].is_none() && self.clobberable(t, &pending));
                match spare {
                    Some(t) if self.may_use(k) => {
                        self.use_inherited(k);
                        self.xfer(k, t);
                        self.hold(t, self.regs[k]);
                    }
                    _ => {
                        pending.remove(0);
                        self.reload(k, w);
                    }
                }
                continue;
            };
            let (k, w) = pending.remove(i);
            let from =
                (0..CACHE_REGS).find(|&j| j != k && self.regs[j] == Some(w) && self.may_use(j));
            match from {
                Some(j) => {
                    self.use_inherited(j);
                    self.xfer(j, k);
                    self.hold(k, Some(w));
                }
                None => self.reload(k, w),
            }
        }
    }

    /// Whether register `k` may be overwritten while the `pending` moves are still to
    /// be made: no other of them needs its word, or a register that may be read holds
    /// that word too.
    fn clobberable(&self, k: usize, pending: &[(usize, u32)]) -> bool {
        let Some(x) = self.regs[k] else {
            return true;
        };
        !pending.iter().any(|&(j, w)| j != k && w == x)
            || (0..CACHE_REGS).any(|j| j != k && self.regs[j] == Some(x) && self.may_use(j))
    }

    /// Register `j` copied into register `k` (the caller says what `k` holds now).
    fn xfer(&mut self, j: usize, k: usize) {
        self.emit(
            &Key::Xfer(j as u8, k as u8),
            &[],
            &[],
            SrcLoc::default(),
            Extra::None,
            &[None],
        );
    }

    /// Word `w` loaded into register `k` from its frame word.
    fn reload(&mut self, k: usize, w: u32) {
        self.note_read(w);
        self.emit(
            &Key::Reload(k as u8),
            &[8 * u64::from(w)],
            &[],
            SrcLoc::default(),
            Extra::None,
            &[None],
        );
        self.hold(k, Some(w));
    }

    fn forget_accs(&mut self) {
        self.regs = [None; CACHE_REGS];
        self.facc = None;
        self.inherited = 0;
        self.temps = 0;
        self.read_here = 0;
        self.stale = 0;
    }

    /// Pins the frame words of `v` (see `pinned`).
    fn pin(&mut self, v: SVal) {
        let (words, n) = Self::words(v);
        for w in &words[..n] {
            if let Word::Slot(w) = *w {
                let w = w as usize;
                if w >= self.pinned.len() {
                    self.pinned.resize(w + 1, false);
                }
                self.pinned[w] = true;
            }
        }
    }

    fn is_pinned(&self, w: u32) -> bool {
        self.pinned.get(w as usize).copied().unwrap_or(false)
    }

    /// Frame words `w..w + n` may be loaded (see `loaded`).
    fn mark_loaded(&mut self, w: u64, n: u32) {
        let (w, end) = (w as usize, w as usize + n as usize);
        if end > self.loaded.len() {
            self.loaded.resize(end, false);
        }
        self.loaded[w..end].fill(true);
    }

    /// **Dead stores.** An operation's stencil leaves its result in a cache register and
    /// stores it into its frame word; when no stencil copied into the unit loads that
    /// word (the result was used only from registers, or not at all), the store is
    /// dead, and becomes a `nop` of the same length (removed by `compact` when it ends
    /// its copy, as it mostly does; see there). So is a constant's store (`Key::Set`).
    /// Only the forms such a store takes are rewritten, recognized by their bytes: `mov
    /// r64, disp32(%rsi)`, `movq $imm32, disp32(%rsi)` and `movsd xmm, disp32(%rsi)` (SSE
    /// or VEX; the frame is `%rsi`); anything else stays. Sound because every load of a
    /// frame word is a copy's operand word (`loaded`), or a word of an array in the
    /// frame, which all count as loaded; the final displacement is read from the code,
    /// after any retargeting.
    fn drop_dead_stores(&mut self) {
        let code = &mut self.code;
        let mut removed = 0;
        for &(at, end) in &self.stores {
            let at = at as usize;
            let Some(&[d0, d1, d2, d3]) = code.get(at..at + 4) else {
                continue;
            };
            let disp = u32::from_le_bytes([d0, d1, d2, d3]);
            let word = (disp / 8) as usize;
            if disp % 8 != 0 || self.loaded.get(word).copied().unwrap_or(false) {
                continue;
            }
            let byte = |k: usize| at.checked_sub(k).map(|i| code[i]);
            // The ModRM byte: mod 10 (disp32), r/m 110 (`%rsi`, with no REX.B).
            if byte(1).is_none_or(|m| m & 0xc7 != 0x86) {
                continue;
            }
            // Where the store starts; it ends at the displacement's end but for `movq $imm32`,
            // whose immediate follows it.
            let mut stop = at + 4;
            let start = match (byte(2), byte(3), byte(4), byte(5)) {
                // REX.W (no REX.X, REX.B), `89`: mov r64 to memory.
                (Some(0x89), Some(rex), ..) if rex & 0xfb == 0x48 => at - 3,
                // REX.W, `c7 /0` (the ModRM's reg field 000): movq $imm32 to memory (a
                // `Key::Set`).
                (Some(0xc7), Some(rex), ..) if rex & 0xfb == 0x48 && byte(1) == Some(0x86) => {
                    stop = at + 8;
                    at - 3
                }
                // `f2 0f 11`: movsd to memory, without and with a REX prefix (no W, X, B).
                (Some(0x11), Some(0x0f), Some(0xf2), _) => at - 4,
                (Some(0x11), Some(0x0f), Some(rex), Some(0xf2)) if rex & 0xfb == 0x40 => at - 5,
                // `vmovsd` to memory, with a two- and a three-byte VEX prefix (`f2`, map
                // `0f`, no vector length, no VEX.X or VEX.B; VEX.R and W free).
                (Some(0x11), Some(v), Some(0xc5), _) if v & 0x7f == 0x7b => at - 4,
                (Some(0x11), Some(v2), Some(v1), Some(0xc4))
                    if v1 & 0x7f == 0x61 && v2 & 0x7f == 0x7b =>
                {
                    at - 5
                }
                _ => continue,
            };
            let Some(nop) = code.get_mut(start..stop) else {
                continue;
            };
            nop.copy_from_slice(NOPS[stop - start - 1]);
            if stop == end as usize {
                self.cut_out.push((start as u32, end));
                removed += 1;
            }
        }
        // (Counted as an instruction of its stencil; the jumps of cut branches never were.)
        self.insts -= removed;
    }

    /// **Compaction.** Removes the instructions `cut_out` lists from the code, and moves
    /// every offset that refers to the code after them: the blocks' places, the `rel32`
    /// fields of jumps to blocks, to the cold part and to the code that follows a copy,
    /// and the prologue's frame-size holes. Listed are the `nop`s a dead store left at the
    /// very end of its copy, and those of inverted cut branches: a `nop` costs a slot of
    /// the decoder and the scheduler like any instruction, and in a loop of a dozen
    /// instructions, three of them cost far more than their share. Sound because no jump
    /// enters one of them other than at its start (taking it there lands where its end
    /// led): a store that ends its copy shares its Cranelift block with the tail call that
    /// followed it, and only blocks are jumped to (the jumps within a copy to the code
    /// that follows are `locals`, moved too); a cut's `nop` is the jump to its false side,
    /// reached by falling through from its conditional jump only. Linear in the code.
    fn compact(&mut self) {
        let mut cut = std::mem::take(&mut self.cut_out);
        if cut.is_empty() {
            self.cut_out = cut;
            return;
        }
        cut.sort_unstable();
        // Removed bytes before each range (ranges are distinct instructions: disjoint).
        let mut before = Vec::with_capacity(cut.len() + 1);
        let mut total = 0;
        before.push(0);
        for &(start, end) in &cut {
            total += end - start;
            before.push(total);
        }
        // An offset in the new code: one within a range lands at its start. (A cursor:
        // offsets asked in ascending order, as `fixups` and `locals` mostly are, cost a
        // step or two each; any other, a binary search.)
        let mut k = 0;
        let map = |p: u32| -> u32 {
            if k > 0 && cut[k - 1].0 >= p {
                k = cut.partition_point(|&(start, _)| start < p);
            }
            while k < cut.len() && cut[k].0 < p {
                k += 1;
            }
            match k.checked_sub(1).map(|j| (j, cut[j])) {
                Some((j, (start, end))) if p < end => start - before[j],
                _ => p - before[k],
            }
        };
        let mut w = cut[0].0 as usize;
        for (i, &(_, end)) in cut.iter().enumerate() {
            let next = cut.get(i + 1).map_or(self.code.len(), |r| r.0 as usize);
            self.code.copy_within(end as usize..next, w);
            w += next - end as usize;
        }
        self.code.truncate(w);
        self.move_offsets(map);
        cut.clear();
        self.cut_out = cut;
    }

    /// Moves every offset that refers to the code as `map` says (the code itself was just
    /// rewritten so): the blocks' places, the `rel32` fields of jumps to blocks and to the
    /// cold part, the prologue's frame-size holes, and the jumps within a copy to the code
    /// that follows it, whose displacements are patched again here (the others are
    /// patched by `finish`).
    fn move_offsets(&mut self, mut map: impl FnMut(u32) -> u32) {
        for f in self.fixups.iter_mut().chain(self.cold_fixups.iter_mut()) {
            f.0 = map(f.0);
        }
        for h in &mut self.frame_holes {
            *h = map(*h);
        }
        for b in &mut self.blocks {
            b.at = b.at.map(&mut map);
        }
        for l in &mut self.locals {
            let (at, target) = (map(l.0), map(l.1));
            *l = (at, target);
            let rel = i64::from(target) - (i64::from(at) + 4);
            let at = at as usize;
            self.code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
        }
    }

    /// **Loop alignment.** The processor fetches code, and caches it decoded, by aligned
    /// windows of [`FETCH_WINDOW`] bytes; a loop that fits in one window but straddles two
    /// takes at least two fetches per iteration, where one would do. (Measured on the
    /// machine of `docs/benchmarks.md`, a 29-byte loop of six instructions ran one
    /// iteration per cycle from starts up to byte 32 of a window, and half as fast from
    /// byte 36 on, where it straddles two.) So each loop of the placed code, from the block a
    /// jump goes back to (its head) to the end of the last jump back to it, is moved to
    /// start on a window boundary when that makes it span fewer windows, by `nop`s put
    /// before its head: at most `FETCH_WINDOW - 1` bytes, which the code before runs
    /// once per entry into the loop if it falls in. Loops are taken by their heads'
    /// places in order, each at its place after the padding of those before it (an inner
    /// loop's padding may make the loop around it one window longer; the inner one runs
    /// more often). A unit starts on a window boundary (see the code heap), so the places
    /// here are the places in memory modulo the window. Linear in the code, plus sorting
    /// the loops.
    fn align_loops(&mut self) {
        // Each loop: its head and where its last jump back ends.
        let mut loops: smallvec::SmallVec<[(u32, u32); 8]> = smallvec::SmallVec::new();
        for &(at, b) in &self.fixups {
            match self.blocks[self.resolve(b) as usize].at {
                Some(head) if head <= at => loops.push((head, at + 4)),
                _ => {}
            }
        }
        if loops.is_empty() {
            return;
        }
        loops.sort_unstable();
        let windows = |start: u32, len: u32| (start % FETCH_WINDOW + len).div_ceil(FETCH_WINDOW);
        // Where padding goes (a head's place before padding) and its bytes.
        let mut pads: smallvec::SmallVec<[(u32, u32); 8]> = smallvec::SmallVec::new();
        let mut added = 0;
        for (k, &(head, end)) in loops.iter().enumerate() {
            if loops.get(k + 1).is_some_and(|&(next, _)| next == head) {
                continue;
            }
            let (at, len) = (head + added, end - head);
            if windows(at, len) > len.div_ceil(FETCH_WINDOW) {
                let pad = FETCH_WINDOW - at % FETCH_WINDOW;
                pads.push((head, pad));
                added += pad;
            }
        }
        if pads.is_empty() {
            return;
        }
        // In place, from the end: the code from each head on moves by the padding up to
        // it, which goes right before it.
        let mut end = self.code.len();
        self.code.resize(end + added as usize, 0);
        let mut shift = added as usize;
        for &(head, pad) in pads.iter().rev() {
            let head = head as usize;
            self.code.copy_within(head..end, head + shift);
            shift -= pad as usize;
            let at = head + shift;
            fill_nops(&mut self.code[at..at + pad as usize]);
            end = head;
        }
        // An offset moves by the padding at or before it (a head's own place too: its
        // code follows its padding). A cursor, as in `compact`.
        let (mut k, mut moved) = (0, 0);
        self.move_offsets(|p| {
            if k > 0 && pads[k - 1].0 > p {
                k = pads.partition_point(|&(head, _)| head <= p);
                moved = pads[..k].iter().map(|&(_, pad)| pad).sum();
            }
            while k < pads.len() && pads[k].0 <= p {
                moved += pads[k].1;
                k += 1;
            }
            p + moved
        });
    }

    /// Stamps frame word `w` read by the next copy.
    fn note_read(&mut self, w: u32) {
        Self::stamp(&mut self.read_at, w, self.seq);
    }

    fn stamp(table: &mut Vec<u32>, w: u32, seq: u32) {
        let w = w as usize;
        if w >= table.len() {
            table.resize(w + 1, 0);
        }
        table[w] = seq;
    }

    fn stamp_of(table: &[u32], w: u32) -> u32 {
        table.get(w as usize).copied().unwrap_or(0)
    }

    /// Result retargeting, for the moves of a jump to `b` that ends a block: a move
    /// `d <- s` where `s` is the result of an operation copied into the current run of
    /// fall-through blocks is dropped, and that copy's result holes are patched to write
    /// `d` instead, when that is the same:
    /// - the code from the operation to here is all that runs between them (the blocks
    ///   of the run placed after it were entered only by falling through, and `b` is not
    ///   one of them); a block of the run entered later by a jump that writes `s` as its
    ///   parameter gets `d` written too (`also`, see `pass_args`);
    /// - nothing read `s` after the operation (nor will: of the jump's `args`, only this
    ///   move's reads `s`, and no parameter was bound to `s`), where passing `s` to a
    ///   block counts as a read unless that block is one of the run placed after it (its
    ///   own reads count);
    /// - nothing read or wrote `d` after it (a read by the operation itself comes before
    ///   its write) nor will (`d` is the source of no move: `moves` are the jump's).
    ///
    /// So a loop's back edge moves nothing for values computed in its body. Never for a
    /// value kept (`pinned`: other blocks may read `s` unpassed).
    /// Returns whether the move was dropped.
    fn retarget(&mut self, b: u32, d: u32, s: u32, args: &[SVal], moves: &[(u32, Word)]) -> bool {
        // (A value kept may be read later without being passed.)
        if self.is_pinned(s) {
            return false;
        }
        let Some(k) = self.defs.iter().rposition(|def| def.word == s) else {
            return false;
        };
        let (seq, from) = (self.defs[k].seq, self.defs[k].run as usize);
        // The cheap tests first: stamps, then this jump's words, then the run's jumps.
        if Self::stamp_of(&self.read_at, s) > seq
            || Self::stamp_of(&self.read_at, d) > seq
            || Self::stamp_of(&self.written_at, d) > seq
        {
            return false;
        }
        let once = args
            .iter()
            .flat_map(|&a| {
                let (ws, n) = Self::words(a);
                ws.into_iter().take(n)
            })
            .filter(|&w| w == Word::Slot(s))
            .count()
            == 1;
        let d_source = moves.iter().any(|&(_, w)| w == Word::Slot(d));
        if !once || d_source {
            return false;
        }
        let after = &self.run[from..];
        let in_run = |c: u32| after.contains(&c) || after.contains(&self.resolve(c));
        if in_run(b)
            || after.iter().any(|&c| self.blocks[c as usize].entries > 0)
            || self.passes.iter().any(|&(w, to)| w == s && !in_run(to))
        {
            return false;
        }
        let def = self.defs.swap_remove(k);
        let disp = (8 * d).to_le_bytes();
        for &at in &def.sites {
            let at = at as usize;
            self.code[at..at + 4].copy_from_slice(&disp);
        }
        Self::stamp(&mut self.written_at, d, seq);
        if s as usize >= self.also.len() {
            self.also.resize(s as usize + 1, u32::MAX);
        }
        self.also[s as usize] = d;
        // The registers holding `s` hold `d` now; one still holding the old value of `d`
        // holds nothing known.
        for k in 0..CACHE_REGS {
            if self.regs[k] == Some(d) {
                self.hold(k, None);
            }
        }
        for r in &mut self.regs {
            if *r == Some(s) {
                *r = Some(d);
            }
        }
        if self.facc == Some(s) {
            self.facc = Some(d);
        }
        true
    }

    /// Copies the stencil of `key` and patches it: `args` and `res` are the operand and
    /// result words, `conts[k]` the block continuation `k` goes to (`None`: the code that
    /// follows).
    fn emit(
        &mut self,
        key: &Key,
        args: &[u64],
        res: &[u64],
        loc: SrcLoc,
        extra: Extra,
        conts: &[Option<u32>],
    ) {
        self.emit_with(None, key, args, res, loc, extra, conts);
    }

    /// `emit`, with the stencil of `key` if the caller has it (`ready` gave it).
    #[allow(clippy::too_many_arguments)]
    fn emit_with(
        &mut self,
        st: Option<Rc<Stencil>>,
        key: &Key,
        args: &[u64],
        res: &[u64],
        loc: SrcLoc,
        extra: Extra,
        conts: &[Option<u32>],
    ) {
        if args.len() > usize::from(u16::MAX) {
            return self.fail(StencilError(
                "too many operand words for one stencil".into(),
            ));
        }
        if self.variants {
            self.lib.make_variants(key);
        }
        let st = match st.map_or_else(|| self.stencil(key), Ok) {
            Ok(s) => s,
            Err(e) => return self.fail(e),
        };
        self.last_jump = None;
        self.last_op = None;
        if !matches!(key, Key::Set(_)) {
            self.just_set.clear();
        }
        let drop_tail = st.tail > 0 && conts.get(usize::from(st.tail_cont)) == Some(&None);
        // A cut branch: its conditional jump goes to continuation 1's block, and it falls
        // through to the code that follows (continuation 0) otherwise.
        let cut = match (st.cut, conts) {
            (Some((jcc, end)), [None, Some(b)]) => Some((jcc, end, *b)),
            _ => None,
        };
        // A check followed by its continuation: the cold part goes to `cold`.
        let cold = match (st.cold, conts) {
            (Some((jcc, split)), [None]) => Some((jcc, split)),
            _ => None,
        };
        self.copies += 1;
        let base = self.code.len();
        let cold_base = self.cold.len();
        let len = match (cut, cold) {
            (Some((_, end, _)), _) => {
                // Two `nop`s and two jumps are gone.
                self.insts += (st.insts as usize).saturating_sub(4);
                end as usize
            }
            (None, Some((jcc, split))) => {
                // The `nop` and the `jmp` are gone.
                self.insts += (st.insts as usize).saturating_sub(2);
                self.cold.extend_from_slice(&st.code[split as usize..]);
                self.cold_fixups.push((base as u32 + jcc, cold_base as u32));
                jcc as usize + 4
            }
            (None, None) => {
                self.insts +=
                    st.insts as usize - if drop_tail { st.tail_insts as usize } else { 0 };
                st.code.len() - if drop_tail { st.tail as usize } else { 0 }
            }
        };
        self.code.extend_from_slice(&st.code[..len]);
        // Where a field of the stencil at `at` stands: in `code`, or in `cold`.
        let split = cold.map_or(u32::MAX, |(_, s)| s);
        let field = |at: u32| -> (bool, usize) {
            if at >= split {
                (true, cold_base + (at - split) as usize)
            } else {
                (false, base + at as usize)
            }
        };
        if let Some((jcc, _, b)) = cut {
            self.fixups.push((base as u32 + jcc, b));
            self.enter(b, true);
        }
        let end = (base + len) as u32;
        let site = match extra {
            Extra::Site(s) => Some(s),
            _ => None,
        };
        // One value per hole, however many places it stands in (a buffer reused by every
        // copy).
        let mut values = std::mem::take(&mut self.hole_values);
        values.clear();
        values.resize(st.nholes, None);
        for h in &st.holes {
            if h.role == Role::FrameWords {
                self.frame_holes.push(base as u32 + h.at);
                continue;
            }
            let v = match values[h.index as usize] {
                Some(v) => Some(v),
                None => match h.role {
                    Role::Arg(k) => args.get(k as usize).copied(),
                    Role::Res(k) => res.get(k as usize).copied(),
                    Role::Fault(kind) => Some(self.services.fault_site(kind, loc)),
                    Role::InlineCache => site.and_then(|s| self.services.inline_cache(s)),
                    Role::Site => site.map(u64::from),
                    Role::FrameWords => unreachable!("filled by `finish`"),
                },
            };
            values[h.index as usize] = v;
            let Some(v) = v else {
                return self.fail(StencilError(format!("{key:?}: no value for {:?}", h.role)));
            };
            let (in_cold, at) = field(h.at);
            let buf = if in_cold {
                &mut self.cold
            } else {
                &mut self.code
            };
            if h.wide {
                buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
            } else if v < 1 << 31 {
                buf[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
            } else {
                return self.fail(StencilError(format!(
                    "{key:?}: {v:#x} does not fit a 4-byte hole"
                )));
            }
        }
        self.hole_values = values;
        for &a in args {
            if a % 8 == 0 && a / 8 < u64::from(self.slots) {
                self.mark_loaded(a / 8, 1);
            }
        }
        for &r in res {
            if r % 8 == 0 {
                Self::stamp(&mut self.written_at, (r / 8) as u32, self.seq);
            }
        }
        if let (Key::Op { .. } | Key::Set(false) | Key::Spill(_), [r]) = (&key, res) {
            let sites: smallvec::SmallVec<[u32; 2]> = st
                .holes
                .iter()
                .filter(|h| h.role == Role::Res(0))
                .map(|h| (!h.wide).then_some(base as u32 + h.at))
                .collect::<Option<_>>()
                .unwrap_or_default();
            if let ([at], 0, None) = (&sites[..], r % 8, cold) {
                self.stores.push((*at, end));
            }
            let op = matches!(key, Key::Op { .. });
            if op && !sites.is_empty() && r % 8 == 0 && cold.is_none() {
                self.defs.push(Def {
                    word: (r / 8) as u32,
                    seq: self.seq,
                    sites,
                    run: self.run.len() as u32,
                });
            }
        }
        self.seq += 1;
        let written = |a: Option<u32>| a.is_some_and(|a| res.contains(&(8 * u64::from(a))));
        for k in 0..CACHE_REGS {
            if written(self.regs[k]) {
                self.hold(k, None);
            }
        }
        if written(self.facc) {
            self.facc = None;
        }
        for &(at, k) in &st.conts {
            let at = base as u32 + at;
            if at + 4 > end {
                continue; // the dropped jump to the next stencil
            }
            match conts.get(k as usize) {
                Some(Some(b)) => {
                    self.fixups.push((at, *b));
                    self.enter(*b, true);
                }
                Some(None) => {
                    let rel = i64::from(end) - (i64::from(at) + 4);
                    self.locals.push((at, end));
                    let at = at as usize;
                    self.code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
                }
                None => return self.fail(StencilError(format!("{key:?}: no continuation {k}"))),
            }
        }
        for &(at, what, addend) in &st.imports {
            let addr = match (what, extra) {
                (Import::Callee, Extra::Callee(a)) => a,
                (Import::Callee, _) => {
                    return self.fail(StencilError(format!("{key:?}: no callee address")))
                }
                (h, _) => self.services.helper(h),
            };
            let (in_cold, at) = field(at);
            let buf = if in_cold {
                &mut self.cold
            } else {
                &mut self.code
            };
            let v = addr.wrapping_add(addend as u64);
            buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// The words of a value.
    fn words(v: SVal) -> ([Word; 2], usize) {
        match v {
            SVal::Slot(s, _) => ([Word::Slot(s), Word::Imm(0)], 1),
            SVal::Slice { ptr, len, .. } => ([Word::Slot(ptr), Word::Slot(len)], 2),
            SVal::Imm(bits, _) => ([Word::Imm(bits), Word::Imm(0)], 1),
            SVal::StaticSlice { ptr, len, .. } => ([Word::Imm(ptr), Word::Imm(u64::from(len))], 2),
        }
    }

    /// Frame word `dst` set to constant `v`.
    fn set(&mut self, dst: u32, v: u64) {
        let wide = v >= 1 << 31;
        self.emit(
            &Key::Set(wide),
            &[v],
            &[8 * u64::from(dst)],
            SrcLoc::default(),
            Extra::None,
            &[None],
        );
        self.just_set.retain(|&mut (w, _)| w != dst);
        self.just_set.push((dst, v));
    }

    /// A load or a store at a constant index of a local array in the frame whose elements
    /// are words ([`StencilEmitter::frame_arrays`]): a move from or to the element's word
    /// (a constant stored is set there), with no address computed. `None` for any other
    /// operation (unchecked, as every backend's: the fold layer checked the index).
    fn frame_access(&mut self, op: &TOp, args: &[SVal]) -> Option<Option<SVal>> {
        let (TOp::Load | TOp::Store, [SVal::Slice { ptr, .. }, SVal::Imm(k, _), rest @ ..]) =
            (op, args)
        else {
            return None;
        };
        // (The last made first: a slot for an access at a dynamic index is used at once.)
        let &(_, base, elem, len) = self.frame_arrays.iter().rev().find(|a| a.0 == *ptr)?;
        if elem_size(elem) != 8 || *k >= u64::from(len) {
            return None;
        }
        let w = base + *k as u32;
        match (op, rest) {
            (TOp::Load, []) => {
                let d = self.slot();
                self.move_word(w, d);
                Some(Some(SVal::Slot(d, elem)))
            }
            (TOp::Store, [SVal::Slot(s, _)]) => {
                self.move_word(*s, w);
                Some(None)
            }
            (TOp::Store, [SVal::Imm(bits, _)]) => {
                self.set(w, *bits);
                Some(None)
            }
            _ => None,
        }
    }

    fn move_word(&mut self, src: u32, dst: u32) {
        if src != dst {
            self.note_read(src);
            let (a, r) = (8 * u64::from(src), 8 * u64::from(dst));
            // From a cache register that holds the word (frame words are written whole, and
            // registers hold them widened to 64 bits).
            match self.reg_of(src) {
                Some(k) => {
                    self.emit(
                        &Key::Spill(k as u8),
                        &[],
                        &[r],
                        SrcLoc::default(),
                        Extra::None,
                        &[None],
                    );
                    // The register holds `dst` now (a jump's moves leave the words its
                    // target reads, and their sources die with the block), unless `dst`
                    // is an element of an array in the frame, which stores through its
                    // address would not keep in step.
                    if !self.in_frame_array(dst) {
                        self.hold(k, Some(dst));
                    }
                }
                None => self.emit(
                    &Key::Move,
                    &[a],
                    &[r],
                    SrcLoc::default(),
                    Extra::None,
                    &[None],
                ),
            }
        }
    }

    /// Whether frame word `w` is an element of an array in the frame.
    fn in_frame_array(&self, w: u32) -> bool {
        self.frame_arrays
            .iter()
            .any(|&(_, first, _, len)| (first..first + len).contains(&w))
    }

    /// `v` in frame words.
    fn materialize(&mut self, v: SVal) -> SVal {
        match v {
            SVal::Imm(bits, s) => {
                let d = self.slot();
                self.set(d, bits);
                SVal::Slot(d, s)
            }
            SVal::StaticSlice { ptr, len, elem } => {
                let (p, l) = (self.slot(), self.slot());
                self.set(p, ptr);
                self.set(l, u64::from(len));
                SVal::Slice {
                    ptr: p,
                    len: l,
                    elem,
                }
            }
            v => v,
        }
    }

    /// The form of operand `v` and its words; a constant becomes an immediate when
    /// `imm` allows it and it fits, otherwise it goes through a frame word.
    ///
    /// At most one operand of a stencil is a constant (`used` says whether one is
    /// already): Cranelift would fold an operation between two constants (a bounds check
    /// of a constant index against a constant length) the same way for both sets of
    /// magic values, and the stencil would be wrong for the values patched in. A value a
    /// cache register holds is taken from it (it has no word), by every operand that
    /// reads it: a square reads its operand from the register, not once from the register
    /// and once from a frame word just stored (a store-to-load round trip in a chain of
    /// squares).
    fn form(&mut self, v: SVal, imm: bool, used: &mut Used, words: &mut Words) -> Form {
        let v = match v {
            SVal::Slot(s, Scalar::F64) if self.facc == Some(s) => {
                self.note_read(s);
                return Form::Acc(Scalar::F64);
            }
            SVal::Slot(s, t) if t != Scalar::F64 => {
                if let Some(k) = self.reg_of(s) {
                    self.note_read(s);
                    return match k {
                        0 => Form::Acc(t),
                        k => Form::Reg(t, k as u8),
                    };
                }
                v
            }
            SVal::Imm(bits, s) if imm && !used.consts => {
                let wide = bits >= 1 << 31;
                let ok = match s {
                    Scalar::I64 | Scalar::U64 | Scalar::F64 => true,
                    Scalar::I32 | Scalar::U32 => !wide,
                    _ => false,
                };
                if ok {
                    used.consts = true;
                    words.push(bits);
                    return Form::Imm(s, wide || s == Scalar::F64);
                }
                self.materialize(v)
            }
            SVal::Imm(..) => self.materialize(v),
            SVal::StaticSlice { .. } if used.consts => self.materialize(v),
            SVal::StaticSlice { .. } => {
                used.consts = true;
                v
            }
            v => v,
        };
        match v {
            SVal::Slot(s, t) => {
                self.note_read(s);
                words.push(8 * u64::from(s));
                Form::Slot(t)
            }
            SVal::Slice { ptr, len, elem } => {
                self.note_read(ptr);
                self.note_read(len);
                words.push(8 * u64::from(ptr));
                words.push(8 * u64::from(len));
                Form::Slice(elem)
            }
            SVal::StaticSlice { ptr, len, elem } => {
                words.push(ptr);
                words.push(u64::from(len));
                Form::ConstSlice(elem)
            }
            SVal::Imm(..) => unreachable!("materialized"),
        }
    }

    /// A jump to `dest` passing `args`; `retarget`: it ends a block that has no other
    /// exit, so its moves may be dropped by retargeting results (see `retarget`).
    fn jump_with(&mut self, dest: u32, args: &[SVal], retarget: bool) {
        self.pass_args(dest, args, retarget);
        // A block with no code that moves nothing stands for `dest` (jump threading): jumps
        // to it are patched to go to `dest`'s code, and it gets none.
        // (Not a block the code before falls into: that needs the jump.)
        // (Nor when `dest` reads cache registers on entry: jumps here must fill them.)
        if let Some((b, at, false)) = self.empty {
            let target = self.resolve(dest);
            if at as usize == self.code.len() && target != b && !self.needs_regs(target) {
                let entries = self.blocks[b as usize].entries;
                self.blocks[b as usize].alias = Some(target);
                self.blocks[b as usize].at = None;
                // Its entries jump to `dest` now: with what the registers held there, if
                // `dest` had none.
                let first = self.blocks[b as usize].first_in;
                let t = &mut self.blocks[target as usize];
                t.first_in = if t.entries == 0 { first } else { None };
                t.entries += entries;
                self.empty = None;
                return;
            }
        }
        self.raw_jump(dest);
    }

    /// Moves `args` into the parameters of block `b` (a parallel move: through fresh
    /// words when a source is also a destination).
    ///
    /// **Coalescing.** The first jump to a block not yet placed, whose parameters nobody
    /// has asked for, gives each parameter the frame words of the value it passes (when
    /// no other parameter took them, and they are not `pinned`), so that edge moves
    /// nothing. This is sound because a stitched block reads only its parameters and the
    /// values it defines (every value another block needs is passed as an argument): a
    /// frame word shared by a value and the parameters bound to it is written only where
    /// one of them is defined (an operation's result, a jump into a block), and each of
    /// them is read only after that write on every path, before control leaves its
    /// block. The values kept are the exception (the executor's unit invariants: other
    /// blocks read them unpassed), and their words are pinned: a parameter bound to one
    /// would have later jumps into its block overwrite it.
    fn pass_args(&mut self, b: u32, args: &[SVal], retarget: bool) {
        let info = &mut self.blocks[b as usize];
        let (at, n) = info.params;
        let params = &mut self.params[at as usize..(at + n) as usize];
        if !std::mem::replace(&mut info.fixed, true) {
            self.binding += 1;
            let (taken, stamp, pinned) = (&mut self.taken, self.binding, &self.pinned);
            let mut free = |s: u32| {
                let s = s as usize;
                if pinned.get(s).copied().unwrap_or(false) {
                    return false;
                }
                if s >= taken.len() {
                    taken.resize(s + 1, 0);
                }
                std::mem::replace(&mut taken[s], stamp) != stamp
            };
            for (p, &a) in params.iter_mut().zip(args) {
                *p = match (*p, a) {
                    (SVal::Slot(_, t), SVal::Slot(s, _)) if free(s) => SVal::Slot(s, t),
                    (SVal::Slice { elem, .. }, SVal::Slice { ptr, len, .. })
                        if free(ptr) & free(len) =>
                    {
                        SVal::Slice { ptr, len, elem }
                    }
                    (p, _) => p,
                };
            }
        }
        // The words that must move (a buffer reused by every edge).
        let mut pairs = std::mem::take(&mut self.moves);
        pairs.clear();
        let mut doubled = false;
        for (p, a) in params.iter().zip(args) {
            let ((dst, n), (src, _)) = (Self::words(*p), Self::words(*a));
            for k in 0..n {
                let Word::Slot(d) = dst[k] else {
                    unreachable!("parameters are frame words")
                };
                if src[k] != Word::Slot(d) {
                    pairs.push((d, src[k]));
                }
                // A result meant for `d` was written elsewhere (retargeted): so is this.
                let also = self.also.get(d as usize).copied().unwrap_or(u32::MAX);
                if also != u32::MAX && src[k] != Word::Slot(also) {
                    pairs.push((also, src[k]));
                    doubled = true;
                }
            }
        }
        if doubled
            && pairs
                .iter()
                .enumerate()
                .any(|(k, &(d, _))| pairs[..k].iter().any(|&(e, _)| e == d))
        {
            self.moves = pairs;
            return self.fail(StencilError(format!(
                "a frame word written twice by one jump to block {b}"
            )));
        }
        if retarget && !self.defs.is_empty() {
            let mut k = 0;
            while k < pairs.len() {
                match pairs[k] {
                    (d, Word::Slot(s)) if self.retarget(b, d, s, args, &pairs) => {
                        pairs.swap_remove(k);
                    }
                    _ => k += 1,
                }
            }
        }
        // (A run too long to check cheaply retargets nothing more.)
        if self.passes.len() > 4096 {
            self.defs.clear();
            self.passes.clear();
        }
        for &a in args {
            let (ws, n) = Self::words(a);
            for &w in &ws[..n] {
                if let Word::Slot(w) = w {
                    self.passes.push((w, b));
                }
            }
        }
        let clash = pairs
            .iter()
            .any(|&(_, w)| matches!(w, Word::Slot(s) if pairs.iter().any(|&(d, _)| d == s)));
        if clash {
            for pair in pairs.iter_mut() {
                if let (d, Word::Slot(s)) = *pair {
                    if s != d {
                        let t = self.slot();
                        self.move_word(s, t);
                        *pair = (d, Word::Slot(t));
                    }
                }
            }
        }
        for &(d, w) in &pairs {
            match w {
                Word::Slot(s) => self.move_word(s, d),
                Word::Imm(v) => self.set(d, v),
            }
        }
        self.moves = pairs;
    }

    /// A branch on `cond` fused with the comparison that made it, when that comparison is
    /// the last code copied and its result is read nowhere else (a stitched block reads
    /// only its own values and its parameters, so the branch's edge arguments are the
    /// only other readers): the comparison's copy is taken back, and the fused stencil
    /// and its operand words are returned to be copied instead. Never for a value kept,
    /// which other blocks read unpassed (a unit invariant: a `make_dynamic` of a
    /// comparison in a region's entry block).
    fn fused_compare(
        &mut self,
        cond: SVal,
        then_args: &[SVal],
        else_args: &[SVal],
    ) -> Option<(Key, Words, Rc<Stencil>)> {
        let SVal::Slot(s, _) = cond else {
            return None;
        };
        let lc = self.last_op.take()?;
        // (A value kept is read later from its frame word, unpassed.)
        if self.is_pinned(s) || !matches!(lc.op, TOp::Cmp(_)) {
            return None;
        }
        let passed = then_args
            .iter()
            .chain(else_args)
            .any(|&a| Self::words(a).0.contains(&Word::Slot(s)));
        if lc.res != s || lc.end != self.code.len() || passed {
            return None;
        }
        let key = Key::CmpBranch {
            op: lc.op.clone(),
            forms: lc.forms.clone(),
        };
        // (Not ready: a fallback, and the comparison and its branch are copied apart.)
        let st = self.ready(&key)?;
        self.take_back(&lc);
        // The result never reaches its register now: it holds what it held before.
        let (k, (w, [inherited, temp, read, stale])) = (lc.dst, lc.before);
        self.regs[k] = w;
        for (mask, on) in [
            (&mut self.inherited, inherited),
            (&mut self.temps, temp),
            (&mut self.read_here, read),
            (&mut self.stale, stale),
        ] {
            *mask = *mask & !(1 << k) | u8::from(on) << k;
        }
        Some((key, lc.words, st))
    }

    /// Takes back the copy `lc` describes, the last code copied.
    fn take_back(&mut self, lc: &LastOp) {
        self.code.truncate(lc.start);
        self.defs
            .retain(|d| d.sites.iter().all(|&at| (at as usize) < lc.start));
        // (`stores` ascends: code only grows, but for this truncation.)
        let kept = self
            .stores
            .partition_point(|&(at, _)| (at as usize) < lc.start);
        self.stores.truncate(kept);
        let kept = self
            .locals
            .partition_point(|&(at, _)| (at as usize) < lc.start);
        self.locals.truncate(kept);
        self.fixups.truncate(lc.fixups);
        self.frame_holes.truncate(lc.frame_holes);
        self.copies = lc.copies;
        self.insts = lc.insts;
    }

    /// **Results made where a jump wants them.** Before a jump's parallel move
    /// (`establish`, with `need` what it must leave in each register): when the last code
    /// copied is an operation whose result a register `j` holds, and the jump wants that
    /// word in another register `k` whose own word it does not want anywhere, the
    /// operation is copied again with its result in `k` (if that variant is made; if
    /// not, a fallback), and no move is needed: a loop's counter is stepped in its own
    /// register (`add $1, %rcx`, not `lea 1(%rcx), %r8; mov %r8, %rcx`), which takes the
    /// move off the loop's chain of dependences. The copy again writes the word the first
    /// one wrote (its result holes may have been retargeted since: the word `j` holds).
    /// Sound because nothing was copied after the operation (the jump's moves come after
    /// this), so no code read `k` since, and its copy had no jump and no cold part.
    fn remake_in(&mut self, need: &Regs) {
        let Some(lo) = self.last_op.take() else {
            return;
        };
        let j = lo.dst;
        let Some(w) = self.regs[j] else {
            return;
        };
        let Some(k) = (0..CACHE_REGS).find(|&k| k != j && need[k] == Some(w)) else {
            return;
        };
        let clear = lo.end == self.code.len()
            && lo.fixups == self.fixups.len()
            && lo.cold_fixups == self.cold_fixups.len()
            && need[j] != Some(w)
            && !need.iter().any(|&n| n.is_some() && n == self.regs[k]);
        if !clear {
            return;
        }
        let key = Key::Op {
            op: lo.op.clone(),
            forms: lo.forms.clone(),
            callee: None,
            dst: k as u8,
        };
        // (Not ready: a fallback, and the move stays.)
        let Some(st) = self.ready(&key) else {
            return;
        };
        // (The copy writes `w`, so `emit_with` forgets that `j` holds it.)
        self.take_back(&lo);
        self.emit_with(
            Some(st),
            &key,
            &lo.words,
            &[8 * u64::from(w)],
            lo.loc,
            Extra::None,
            &[None],
        );
        self.hold(k, Some(w));
        self.temps |= 1 << k;
    }

    /// The target of an edge: `b` itself when no arguments need passing, else a fresh
    /// block that passes them (placed by `edges`).
    fn edge(&mut self, b: u32, args: &[SVal], pending: &mut Pending) -> u32 {
        // (A block that reads cache registers on entry is entered through a jump, which
        // fills them.)
        if args.is_empty() && !self.needs_regs(b) {
            return b;
        }
        let t = self.new_block((0, 0));
        let start = pending.args.len() as u32;
        pending.args.extend_from_slice(args);
        pending.edges.push((t, b, start, pending.args.len() as u32));
        t
    }

    fn edges(&mut self, pending: Pending) {
        for &(t, b, start, end) in &pending.edges {
            self.place(t);
            self.jump_with(b, &pending.args[start as usize..end as usize], false);
        }
    }

    /// The shape of an operation's result.
    fn result_type(op: &TOp, args: &[SVal]) -> Option<Type> {
        let ty = |v: SVal| match v {
            SVal::Slot(_, s) | SVal::Imm(_, s) => Type::Scalar(s),
            SVal::Slice { elem, .. } | SVal::StaticSlice { elem, .. } => Type::Slice {
                elem,
                mutable: true,
            },
        };
        Some(match op {
            TOp::Unary(_) | TOp::Binary(_) => ty(args[0]),
            TOp::Cmp(_) => Type::BOOL,
            TOp::Select => ty(args[1]),
            TOp::Cast(to) => Type::Scalar(*to),
            TOp::Len => Type::I64,
            TOp::Load => match ty(args[0]) {
                Type::Slice { elem, .. } => Type::Scalar(elem),
                _ => return None,
            },
            TOp::Store => return None,
            TOp::Call { ret, .. } => return *ret,
        })
    }
}

impl Backend for StencilEmitter<'_> {
    type Value = SVal;
    type Block = u32;

    fn divides_by_powers_of_two(&self) -> bool {
        true
    }

    fn block_index(b: u32) -> usize {
        b as usize
    }

    fn loop_head(&mut self, b: u32, reads: &[bool]) {
        let info = &mut self.blocks[b as usize];
        info.head = true;
        info.unread = (reads.iter().take(64).enumerate())
            .filter(|&(_, &r)| !r)
            .fold(0, |m, (j, _)| m | 1 << j);
    }

    fn create_block(&mut self, params: &[Type]) -> u32 {
        // The unit's entry (the first block made, taking the unit's inputs) gets the
        // inputs' own words as its parameters, so the prologue's jump into it moves
        // nothing: what coalescing does for the first jump into a block (see
        // `pass_args`), which the prologue's jump, made last, never is.
        if self.blocks.len() == self.start as usize + 1 && self.takes_inputs(params) {
            let at = self.params.len() as u32;
            self.params.extend_from_slice(&self.inputs);
            return self.new_block((at, self.inputs.len() as u32));
        }
        let vals = self.new_params(params);
        self.new_block(vals)
    }

    fn block_params(&mut self, b: u32, _types: &[Type], out: &mut Vec<SVal>) {
        self.blocks[b as usize].fixed = true;
        out.extend_from_slice(self.params_of(b));
    }

    fn switch_to_block(&mut self, b: u32) {
        self.place(b);
        if self.fuel {
            self.emit(
                &Key::Fuel,
                &[],
                &[],
                SrcLoc::default(),
                Extra::None,
                &[None],
            );
        }
    }

    fn constant(&mut self, c: Const) -> SVal {
        let bits = match c {
            Const::Int(_, x) => x,
            Const::F64(x) => x.to_bits(),
            Const::Bool(b) => u64::from(b),
        };
        SVal::Imm(bits, c.ty())
    }

    fn static_slice(&mut self, id: u32, ty: Type) -> SVal {
        let elem = ty.elem().expect("a slice type");
        match self.static_slices.get(id as usize).copied().flatten() {
            Some((ptr, len, _)) => match u32::try_from(len) {
                Ok(len) => SVal::StaticSlice { ptr, len, elem },
                Err(_) => {
                    let m = format!("static slice {id} has more than 2^32 elements");
                    self.fail(StencilError(m));
                    SVal::Imm(0, Scalar::I64)
                }
            },
            None => {
                self.fail(StencilError(format!("static slice {id} has no storage")));
                SVal::Imm(0, Scalar::I64)
            }
        }
    }

    fn op(&mut self, op: &TOp, args: &[SVal], _types: &[Type], loc: SrcLoc) -> Option<SVal> {
        if let Some(r) = self.frame_access(op, args) {
            return r;
        }
        // A cast between 64-bit integers changes no bit of the word: the same word, typed
        // anew (reads of it are reads of the word).
        if let (
            TOp::Cast(to @ (Scalar::I64 | Scalar::U64)),
            [SVal::Slot(w, Scalar::I64 | Scalar::U64)],
        ) = (op, args)
        {
            return Some(SVal::Slot(*w, *to));
        }
        let negated = negate_imm(op, args);
        let (op, args) = match &negated {
            Some((op, args)) => (op, &args[..]),
            None => (op, args),
        };
        let mut words = Words::new();
        let mut used = Used::default();
        // (Pushed one by one: collecting into a small vector cost about a hundred
        // instructions for an operation's few operands.)
        let mut forms = Forms::new();
        for (k, &a) in args.iter().enumerate() {
            forms.push(match a {
                SVal::Imm(bits, s) if bakes(op, k, bits, s) => Form::Baked(s, bits as u8),
                a => self.form(a, imm_ok(op, k), &mut used, &mut words),
            });
        }
        let mut extra = Extra::None;
        let (op, callee) = match op {
            TOp::Call { callee, ret } => match self.services.callee(*callee) {
                Some(Callee::Func { params, addr }) => {
                    extra = Extra::Callee(addr);
                    (
                        TOp::Call {
                            callee: 0,
                            ret: *ret,
                        },
                        Some(CalleeKey::Func(params)),
                    )
                }
                Some(Callee::Host(h)) => (op.clone(), Some(CalleeKey::Host(h))),
                None => {
                    self.fail(StencilError(format!("unknown callee {callee}")));
                    return None;
                }
            },
            op => (op.clone(), None),
        };
        let ty = Self::result_type(&op, args);
        let result = ty.map(|t| self.new_value(t));
        let mut res = [0u64; 2];
        let nres = result.map_or(0, |r| {
            let (ws, n) = Self::words(r);
            for k in 0..n {
                let Word::Slot(s) = ws[k] else {
                    unreachable!("results are frame words")
                };
                res[k] = 8 * u64::from(s);
            }
            n
        });
        let res = &res[..nres];
        // A scalar result is left in a cache register too (an `f64` in its own): one
        // holding a result this one reads, else the one `free_reg` picks. (Not a load's
        // index: an index, a stack pointer or a counter, is most often read again.)
        let reused = match op {
            TOp::Load => &[][..],
            _ => &forms[..],
        };
        let temp = reused.iter().rev().find_map(|&f| {
            let k = match f {
                Form::Acc(t) if t != Scalar::F64 => 0,
                Form::Reg(_, k) => usize::from(k),
                _ => return None,
            };
            (self.temps & 1 << k != 0).then_some(k)
        });
        let mut dst = match result {
            Some(SVal::Slot(_, t)) if t != Scalar::F64 => temp.unwrap_or_else(|| self.free_reg()),
            _ => 0,
        };
        let mut key = Key::Op {
            op,
            forms,
            callee,
            dst: dst as u8,
        };
        let found = self.ready(&key);
        if found.is_none() {
            let Key::Op {
                op, forms, callee, ..
            } = key
            else {
                unreachable!("an operation's key")
            };
            let fallback;
            (fallback, words) = self.in_words(&forms, &words, |forms| Key::Op {
                op: op.clone(),
                forms: forms.iter().copied().collect(),
                callee: callee.clone(),
                dst: 0,
            });
            key = Key::Op {
                op,
                forms: fallback,
                callee,
                dst: dst as u8,
            };
            // The result where it was to go, if that variant is made; else in the
            // accumulator.
            if dst != 0 && !self.made(&key) {
                dst = 0;
                if let Key::Op { dst, .. } = &mut key {
                    *dst = 0;
                }
            }
        }
        let before = (
            self.code.len(),
            self.fixups.len(),
            self.frame_holes.len(),
            self.copies,
            self.insts,
            self.cold_fixups.len(),
        );
        // (Recorded as the last operation: one with an integer result in a frame word.)
        let recorded = match (result, &key) {
            (Some(SVal::Slot(s, t)), Key::Op { callee: None, .. }) if t != Scalar::F64 => Some(s),
            _ => None,
        };
        let bit = |m: u8| m & 1 << dst != 0;
        let held = (
            self.regs[dst],
            [
                bit(self.inherited),
                bit(self.temps),
                bit(self.read_here),
                bit(self.stale),
            ],
        );
        self.emit_with(found, &key, &words, res, loc, extra, &[None]);
        if let (Some(res), Key::Op { op, forms, .. }) = (recorded, key) {
            let (start, fixups, frame_holes, copies, insts, cold_fixups) = before;
            self.last_op = Some(LastOp {
                op,
                forms,
                words,
                res,
                dst,
                before: held,
                start,
                end: self.code.len(),
                fixups,
                frame_holes,
                copies,
                insts,
                cold_fixups,
                loc,
            });
        }
        match result {
            Some(SVal::Slot(s, Scalar::F64)) => self.facc = Some(s),
            Some(SVal::Slot(s, _)) => {
                self.hold(dst, Some(s));
                self.temps |= 1 << dst;
            }
            _ => {}
        }
        result
    }

    fn array_slot(&mut self, elem: Scalar, len: u32, elems: &[SVal]) -> SVal {
        let size = elem_size(elem) as u64;
        let words = (size * u64::from(len)).div_ceil(8).max(1) as u32;
        let base = self.slots;
        self.slots += words;
        self.mark_loaded(u64::from(base), words);
        let (ptr, len_word) = (self.slot(), self.slot());
        self.frame_arrays.push((ptr, base, elem, len));
        self.emit(
            &Key::FrameAddr,
            &[8 * u64::from(base)],
            &[8 * u64::from(ptr)],
            SrcLoc::default(),
            Extra::None,
            &[None],
        );
        self.set(len_word, u64::from(len));
        for (k, &e) in elems.iter().enumerate() {
            let SVal::Slot(s, _) = self.materialize(e) else {
                unreachable!("elements are scalars")
            };
            self.note_read(s);
            let dst = 8 * u64::from(base) + k as u64 * size;
            self.emit(
                &Key::MoveTo(elem),
                &[8 * u64::from(s)],
                &[dst],
                SrcLoc::default(),
                Extra::None,
                &[None],
            );
        }
        SVal::Slice {
            ptr,
            len: len_word,
            elem,
        }
    }

    fn keep(&mut self, v: SVal) {
        self.pin(v);
    }

    fn dead(&mut self, v: SVal) {
        if let SVal::Slot(w, t) = v {
            if t != Scalar::F64 && !self.is_pinned(w) && !self.dead.contains(&w) {
                if self.dead.len() == self.dead.inline_size() {
                    self.dead.remove(0);
                }
                self.dead.push(w);
            }
        }
    }

    fn bounds_check(&mut self, slice: SVal, index: SVal, _ty: Scalar, loc: SrcLoc) {
        let mut words = Words::new();
        let mut used = Used::default();
        let s = self.form(slice, false, &mut used, &mut words);
        let i = self.form(index, true, &mut used, &mut words);
        let (key, words, st) =
            self.ready_or_in_words(Key::BoundsCheck(s, i), &[s, i], words, |f| {
                Key::BoundsCheck(f[0], f[1])
            });
        self.emit_with(st, &key, &words, &[], loc, Extra::None, &[None]);
    }

    fn jump(&mut self, dest: u32, args: &[SVal]) {
        self.jump_with(dest, args, true);
    }

    fn brif(&mut self, cond: SVal, t: (u32, &[SVal]), e: (u32, &[SVal])) {
        let (key, words, st) = match self.fused_compare(cond, t.1, e.1) {
            Some((key, words, st)) => (key, words, Some(st)),
            None => {
                let mut words = Words::new();
                let c = self.form(cond, false, &mut Used::default(), &mut words);
                self.ready_or_in_words(Key::Branch(c), &[c], words, |f| Key::Branch(f[0]))
            }
        };
        let mut pending = Pending::default();
        // Cut: the conditional jump goes to the then edge and the else edge follows, so
        // each path takes at most one jump. Otherwise the then edge follows: the branch's
        // last jump (to continuation 1, as Cranelift lays out a two-way branch) is
        // dropped, so the true path takes one jump, not two; its own jump goes when the
        // then block is placed next.
        let st = st.or_else(|| self.stencil(&key).ok());
        let cut = st.as_ref().is_some_and(|st| st.cut.is_some());
        let ((near, near_args), far) = if cut { (e, t) } else { (t, e) };
        let target = self.edge(far.0, far.1, &mut pending);
        let conts = if cut {
            [None, Some(target)]
        } else {
            [Some(target), None]
        };
        self.emit_with(
            st,
            &key,
            &words,
            &[],
            SrcLoc::default(),
            Extra::None,
            &conts,
        );
        self.jump_with(near, near_args, false);
        // A cut branch whose jump to the false side follows its conditional jump: a
        // candidate for `invert_cuts` (forgotten if the false side is placed next).
        let n = self.fixups.len();
        if let (true, Some(at), true) = (cut, self.last_jump, n >= 2) {
            if self.fixups[n - 2].0 + 4 == at && at as usize + 5 == self.code.len() {
                self.cuts.push((n as u32 - 2, u32::MAX));
            }
        }
        self.edges(pending);
    }

    fn switch(&mut self, arg: SVal, t: Scalar, cases: &[BCase<Self>], default: (u32, &[SVal])) {
        let mut words = Words::new();
        let mut x = self.form(arg, false, &mut Used::default(), &mut words);
        let mask = match t.int_bits() {
            Some(64) | None => u64::MAX,
            Some(w) => (1u64 << w) - 1,
        };
        let mut pending = Pending::default();
        for (k, b, args) in cases {
            let v = *k & mask;
            let target = self.edge(*b, args, &mut pending);
            let wide = v >= 1 << 31;
            words.truncate(usize::from(matches!(x, Form::Slot(_))));
            let (key, kept, st) = match x {
                Form::Slot(_) => (Key::CaseEq(x, wide), words, None),
                _ => self.ready_or_in_words(Key::CaseEq(x, wide), &[x], words, |f| {
                    Key::CaseEq(f[0], wide)
                }),
            };
            if let Key::CaseEq(f, _) = key {
                x = f;
            }
            words = kept;
            words.push(v);
            self.emit_with(
                st,
                &key,
                &words,
                &[],
                SrcLoc::default(),
                Extra::None,
                &[None, Some(target)],
            );
        }
        self.jump_with(default.0, default.1, false);
        self.edges(pending);
    }

    fn ret(&mut self, value: Option<SVal>) {
        let mut words = Words::new();
        let form = value.map(|v| self.form(v, false, &mut Used::default(), &mut words));
        let (key, words, st) = match form {
            Some(f) => {
                self.ready_or_in_words(Key::Ret(form), &[f], words, |g| Key::Ret(Some(g[0])))
            }
            None => (Key::Ret(None), words, None),
        };
        self.emit_with(st, &key, &words, &[], SrcLoc::default(), Extra::None, &[]);
        self.forget_accs();
    }

    fn trap(&mut self, loc: SrcLoc) {
        self.emit(&Key::Trap, &[], &[], loc, Extra::None, &[]);
        self.forget_accs();
    }

    /// Leaves the unit at a promotion: the promoted values and the live ones are read
    /// from the cache registers that hold them, if a stencil that does is made (so that
    /// their frame words need no store on the paths that do not leave: see
    /// `drop_dead_stores`), else from their frame words.
    fn promote(&mut self, site: u32, promoted: &[(SVal, Scalar)], live: &[SVal]) {
        let mut words = Words::new();
        let mut forms = Forms::new();
        // (A promoted value as the site's type.)
        let values = (promoted.iter())
            .map(|&(v, s)| match v {
                SVal::Slot(w, _) => SVal::Slot(w, s),
                v => v,
            })
            .chain(live.iter().copied());
        for v in values {
            let v = self.materialize(v);
            forms.push(self.form(v, false, &mut Used::default(), &mut words));
        }
        let n = promoted.len();
        let inline = n <= 1 && self.services.inline_cache(site).is_some();
        let make = |f: &[Form]| Key::Promote {
            promoted: f[..n].to_vec(),
            live: f[n..].to_vec(),
            inline,
        };
        let (key, words, st) = self.ready_or_in_words(make(&forms), &forms, words, make);
        self.emit_with(
            st,
            &key,
            &words,
            &[],
            SrcLoc::default(),
            Extra::Site(site),
            &[],
        );
        self.forget_accs();
    }

    fn promote_miss(&mut self, _site: u32, _promoted: &[SVal]) {
        self.fail(StencilError(
            "machine code leaves the unit at promotions".into(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed keys are equal exactly when the keys are: every operation that packs,
    /// with no form, every form, and a sample of pairs of forms; every other key variant
    /// that packs, on every form.
    #[test]
    fn packed_keys_are_distinct_for_distinct_keys() {
        use crate::ops::{CmpOp, UnaryOp};
        let scalars = Scalar::ALL;
        let mut forms = Vec::new();
        for s in scalars {
            forms.extend([
                Form::Slot(s),
                Form::Slice(s),
                Form::ConstSlice(s),
                Form::Acc(s),
                Form::Reg(s, 1),
                Form::Reg(s, 3),
            ]);
            forms.extend([Form::Imm(s, false), Form::Imm(s, true)]);
            forms.extend([Form::Baked(s, 0), Form::Baked(s, 1), Form::Baked(s, 63)]);
        }
        let mut ops: Vec<TOp> = [TOp::Select, TOp::Len, TOp::Load, TOp::Store].into();
        ops.extend(UnaryOp::ALL.iter().map(|&o| TOp::Unary(o)));
        ops.extend(BinaryOp::ALL.iter().map(|&o| TOp::Binary(o)));
        ops.extend(CmpOp::ALL.iter().map(|&o| TOp::Cmp(o)));
        ops.extend(scalars.map(TOp::Cast));
        let lists: Vec<Forms> = std::iter::once(Forms::new())
            .chain(forms.iter().map(|&f| Forms::from_slice(&[f])))
            .chain(forms.iter().step_by(3).flat_map(|&a| {
                forms
                    .iter()
                    .step_by(2)
                    .map(move |&b| Forms::from_slice(&[a, b]))
            }))
            .chain([Forms::from_slice(&[forms[0], forms[1], forms[2]])])
            .collect();
        let mut keys = Vec::new();
        for op in &ops {
            for f in &lists {
                for dst in [0, 2] {
                    keys.push(Key::Op {
                        op: op.clone(),
                        forms: f.clone(),
                        callee: None,
                        dst,
                    });
                }
                keys.push(Key::CmpBranch {
                    op: op.clone(),
                    forms: f.clone(),
                });
            }
        }
        keys.extend([
            Key::Set(false),
            Key::Set(true),
            Key::Move,
            Key::Reload(0),
            Key::Reload(3),
            Key::Spill(0),
            Key::Spill(2),
            Key::Xfer(1, 2),
            Key::Xfer(2, 1),
        ]);
        keys.extend([Key::FrameAddr, Key::Ret(None), Key::Trap, Key::Fuel]);
        for (k, &f) in forms.iter().enumerate() {
            keys.extend([Key::Branch(f), Key::CaseEq(f, false), Key::CaseEq(f, true)]);
            keys.push(Key::Ret(Some(f)));
            keys.push(Key::BoundsCheck(f, forms[(k * 7) % forms.len()]));
        }
        keys.extend(scalars.map(Key::MoveTo));
        let mut seen = HashMap::new();
        for key in &keys {
            let p = key.pack().expect("the key packs");
            if let Some(other) = seen.insert(p, key) {
                assert_eq!(other, key, "two keys pack to {p:#x}");
            }
        }
        let call = Key::Op {
            op: TOp::Call {
                callee: 0,
                ret: None,
            },
            forms: Forms::new(),
            callee: Some(CalleeKey::Host(0)),
            dst: 0,
        };
        assert_eq!(call.pack(), None);
        assert_eq!(Key::Prologue(vec![]).pack(), None);
    }

    /// The parameters of block `b` (of types `tys`).
    fn params(em: &mut StencilEmitter, b: u32, tys: &[Type]) -> Vec<SVal> {
        let mut out = Vec::new();
        em.block_params(b, tys, &mut out);
        out
    }
    use cranelift_codegen::settings::{self, Configurable};

    /// The host target as the runtime sets it up for stencils.
    fn test_isa() -> OwnedTargetIsa {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").unwrap();
        flags.set("preserve_frame_pointers", "true").unwrap();
        flags.set("is_pic", "false").unwrap();
        cranelift_native::builder()
            .expect("host ISA")
            .finish(settings::Flags::new(flags))
            .expect("ISA")
    }
    fn int(op: TOp, forms: &[Form]) -> Key {
        Key::Op {
            op,
            forms: forms.into(),
            callee: None,
            dst: 0,
        }
    }

    /// The variants the worker makes ahead with the result in other registers are those
    /// of operations whose result the emitter leaves in a cache register: integers and
    /// `bool`s, not `f64` values (which have their own register), not stores.
    #[test]
    fn only_integer_results_get_result_register_variants() {
        use crate::ops::CmpOp;
        use Scalar::{F64, I64};
        let add = TOp::Binary(BinaryOp::Add);
        assert!(int_result(&add, &[Form::Slot(I64), Form::Imm(I64, false)]));
        assert!(!int_result(&add, &[Form::Slot(F64), Form::Acc(F64)]));
        assert!(int_result(
            &TOp::Cmp(CmpOp::Lt),
            &[Form::Slot(F64), Form::Slot(F64)]
        ));
        assert!(int_result(&TOp::Load, &[Form::Slice(I64), Form::Slot(I64)]));
        assert!(!int_result(
            &TOp::Load,
            &[Form::ConstSlice(F64), Form::Slot(I64)]
        ));
        let store = [Form::Slice(I64), Form::Slot(I64), Form::Slot(I64)];
        assert!(!int_result(&TOp::Store, &store));
        assert!(int_result(&TOp::Cast(I64), &[Form::Slot(F64)]));
        assert!(!int_result(&TOp::Cast(F64), &[Form::Slot(I64)]));
    }

    /// A key a unit wants is made by the worker thread, for later units; in a process
    /// whose library's worker is another process's (a child forked while it ran, with
    /// keys queued), waiting for the worker returns at once, and the first key wanted
    /// starts a worker of its own, which makes it.
    #[test]
    fn wanted_stencils_are_made_by_the_worker_of_this_process() {
        if !StencilLib::supported() {
            return;
        }
        let lib = StencilLib::with_misses(test_isa(), Misses::Background);
        let add = |a, b| {
            int(
                TOp::Binary(BinaryOp::Add),
                &[Form::Reg(Scalar::I64, a), Form::Reg(Scalar::I64, b)],
            )
        };
        lib.want(&add(1, 2));
        lib.settle();
        assert!(lib.find(&add(1, 2)).is_some_and(|s| s.is_ok()));
        assert_eq!(lib.counts().background, 1);
        // A forked child: the library as the parent left it, without its thread.
        let child = StencilLib {
            shared: Arc::new(Shared {
                isa: test_isa(),
                stencils: RwLock::new(Made::default()),
                wanted: std::sync::Mutex::new(Wanted {
                    queues: [[Key::Trap].into(), Default::default()],
                    queued: [Key::Trap].into_iter().collect(),
                    worker: Some(std::process::id().wrapping_add(1)),
                    closed: false,
                    asleep: false,
                }),
                changed: Default::default(),
                counts: Default::default(),
            }),
            id: 0,
            misses: Misses::Background,
        };
        child.settle();
        child.want(&add(2, 3));
        child.settle();
        assert!(child.find(&add(2, 3)).is_some_and(|s| s.is_ok()));
        assert!(
            child.find(&Key::Trap).is_none(),
            "the parent's queue is forgotten"
        );
        let counts = child.counts();
        assert_eq!((counts.background, counts.while_stitching), (1, 0));
    }

    /// An idle worker sleeps (it stops polling), and the next key a unit wants wakes it:
    /// the key is made without anyone waiting for the worker.
    #[test]
    fn an_idle_worker_sleeps_and_a_wanted_key_wakes_it() {
        if !StencilLib::supported() {
            return;
        }
        let lib = StencilLib::with_misses(test_isa(), Misses::Background);
        lib.settle();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let until = |what: &str, done: &dyn Fn() -> bool| {
            while !done() {
                assert!(std::time::Instant::now() < deadline, "{what}");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        let asleep = || lib.shared.wanted.lock().expect("not poisoned").asleep;
        until("the idle worker goes to sleep", &asleep);
        let key = int(
            TOp::Binary(BinaryOp::Xor),
            &[Form::Reg(Scalar::I64, 3), Form::Reg(Scalar::I64, 1)],
        );
        lib.want(&key);
        until("the wanted key is made", &|| lib.find(&key).is_some());
        assert!(lib.find(&key).is_some_and(|s| s.is_ok()));
        until("the worker sleeps again", &asleep);
    }

    /// Every kind of stencil is made (its holes located) for typical forms; those that
    /// call nothing lose their frame, those that call keep it.
    #[test]
    fn stencils_are_made_and_leaves_lose_their_frame() {
        use crate::ops::CmpOp;
        let lib = StencilLib::new(test_isa());
        let (i, f) = (Scalar::I64, Scalar::F64);
        let slot = Form::Slot(i);
        let leaves = [
            int(TOp::Binary(BinaryOp::Add), &[slot, slot]),
            int(TOp::Binary(BinaryOp::Add), &[slot, Form::Imm(i, false)]),
            int(TOp::Binary(BinaryOp::Sub), &[Form::Imm(i, true), slot]),
            int(TOp::Cmp(CmpOp::Lt), &[slot, Form::Imm(i, false)]),
            int(
                TOp::Binary(BinaryOp::Mul),
                &[Form::Slot(f), Form::Imm(f, true)],
            ),
            int(TOp::Load, &[Form::Slice(i), slot]),
            int(TOp::Store, &[Form::Slice(i), slot, Form::Imm(i, false)]),
            Key::Set(false),
            Key::Set(true),
            Key::Move,
            Key::MoveTo(Scalar::U8),
            Key::FrameAddr,
            Key::Branch(Form::Slot(Scalar::Bool)),
            Key::Branch(Form::Acc(Scalar::Bool)),
            Key::CaseEq(Form::Acc(Scalar::U8), true),
            Key::CaseEq(Form::Slot(i), false),
            int(
                TOp::Binary(BinaryOp::Add),
                &[Form::Acc(i), Form::Imm(i, false)],
            ),
            int(TOp::Binary(BinaryOp::Mul), &[Form::Slot(f), Form::Acc(f)]),
            int(
                TOp::Cmp(CmpOp::Lt),
                &[Form::Acc(Scalar::I32), Form::Slot(Scalar::I32)],
            ),
            Key::Ret(Some(slot)),
            Key::Ret(Some(Form::Slice(i))),
            Key::Trap,
            Key::BoundsCheck(Form::ConstSlice(i), slot),
            Key::Fuel,
        ];
        for k in &leaves {
            let st = lib.get(k).unwrap_or_else(|e| panic!("{e}"));
            assert!(!st.code.starts_with(&PROLOGUE), "{k:?} keeps its frame");
            // Every stencil but these has an operand in a word or a constant.
            let wordless = matches!(k, Key::Ret(None) | Key::Branch(Form::Acc(_)));
            assert!(!st.holes.is_empty() || wordless, "{k:?}");
        }
        let callers = [
            int(TOp::Binary(BinaryOp::Rem), &[Form::Slot(f), Form::Slot(f)]),
            Key::Promote {
                promoted: vec![Form::Slot(i)],
                live: vec![slot, Form::Slice(i)],
                inline: true,
            },
            Key::Prologue(vec![Type::I64]),
        ];
        // A signed division of two words needs one register more than the stencil has
        // free beside the cache registers it passes on: it saves one in a frame.
        let div = int(TOp::Binary(BinaryOp::Div), &[slot, slot]);
        assert!(lib.get(&div).is_ok_and(|st| !st.holes.is_empty()));
        for k in &callers {
            let st = lib.get(k).unwrap_or_else(|e| panic!("{e}"));
            assert!(st.code.starts_with(&PROLOGUE), "{k:?} lost its frame");
            assert!(!st.imports.is_empty(), "{k:?}");
        }
    }

    struct NoServices;

    impl Services for NoServices {
        fn fault_site(&mut self, _: FaultKind, _: SrcLoc) -> u64 {
            0
        }
        fn inline_cache(&mut self, _: u32) -> Option<u64> {
            None
        }
        fn callee(&self, _: u32) -> Option<Callee> {
            None
        }
        fn helper(&self, _: Import) -> u64 {
            0
        }
    }

    /// The code of a unit of `hops + 1` blocks: each of the first `hops` only jumps on to
    /// the next; the last returns, or jumps to itself with `spin`. Blocks are placed
    /// first, last, then the others backwards, so that no block is followed by its
    /// target (which would drop its jump anyway).
    fn chain(lib: &StencilLib, hops: usize, spin: bool) -> Vec<u8> {
        let mut services = NoServices;
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &[]);
        let blocks: Vec<u32> = (0..=hops).map(|_| em.create_block(&[])).collect();
        let order = std::iter::once(0).chain((1..=hops).rev());
        for k in order {
            let b = blocks[k];
            em.switch_to_block(b);
            match blocks.get(k + 1) {
                Some(&next) => em.jump(next, &[]),
                None if spin => em.jump(b, &[]),
                None => em.ret(None),
            }
        }
        em.finish(blocks[0]).expect("stitched").0
    }

    /// Whether `code` stores into frame word `w`: `mov r64, disp32(%rsi)`, `movq $imm32,
    /// disp32(%rsi)`, or `(v)movsd xmm, disp32(%rsi)` (opcode `11` after any prefix).
    fn stores_to(code: &[u8], w: u32) -> bool {
        let disp = (8 * w).to_le_bytes();
        // (`mov r64` or `movq $imm32`: `89 /r` or `c7 /0`.)
        let int = code.windows(7).any(|c| {
            let opcode = c[1] == 0x89 && c[2] & 0xc7 == 0x86 || c[1] == 0xc7 && c[2] == 0x86;
            c[0] & 0xfb == 0x48 && opcode && c[3..] == disp
        });
        let float = code
            .windows(6)
            .any(|c| c[0] == 0x11 && c[1] & 0xc7 == 0x86 && c[2..] == disp);
        int || float
    }

    /// The loads of frame word `w` (`mov disp32(%rsi), r64`).
    fn loads_of(code: &[u8], w: u32) -> usize {
        let disp = (8 * w).to_le_bytes();
        code.windows(7)
            .filter(|c| {
                c[0] & 0xfb == 0x48 && c[1] == 0x8b && c[2] & 0xc7 == 0x86 && c[3..] == disp
            })
            .count()
    }

    /// The register-to-register moves (`mov r64, r64`) in the code's one loop: from the
    /// target of its conditional jump back (`0f 8x` with a negative displacement) to that
    /// jump.
    fn moves_in_loop(code: &[u8]) -> usize {
        let Some((top, end)) = back_jump(code) else {
            return usize::MAX;
        };
        code[top..end]
            .windows(3)
            .filter(|c| c[0] & 0xf0 == 0x40 && c[0] & 0x08 != 0 && c[1] == 0x89 && c[2] >= 0xc0)
            .count()
    }

    /// The first conditional jump back in `code`: where it goes, and where it stands.
    fn back_jump(code: &[u8]) -> Option<(usize, usize)> {
        (0..code.len().saturating_sub(6)).find_map(|at| {
            let rel = i32::from_le_bytes(code[at + 2..at + 6].try_into().ok()?);
            let jcc = code[at] == 0x0f && code[at + 1] & 0xf0 == 0x80;
            (jcc && rel < 0).then(|| ((at as i64 + 6 + i64::from(rel)) as usize, at))
        })
    }

    /// `i = 0; acc = 0; while i < n { acc = acc + i * 3; i = i + 1 }; ret acc`, its head
    /// told a loop head (or not), and `n` first stepped `pre` times (code before the
    /// loop): its code, and the frame words of `i` and `acc`.
    fn counted_loop(lib: &StencilLib, hint: bool, pre: usize) -> (Vec<u8>, u32, u32) {
        use crate::ops::CmpOp;
        let mut services = NoServices;
        let (t, t3) = ([Type::I64], [Type::I64; 3]);
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let [entry, head, body, exit] = [&t[..], &t3, &t3, &t3].map(|p| em.create_block(p));
        if hint {
            em.loop_head(head, &[true; 3]);
        }
        let loc = SrcLoc::default();
        let int = |em: &mut StencilEmitter, v: u64| em.constant(Const::Int(Scalar::I64, v));
        em.switch_to_block(entry);
        let mut n = params(&mut em, entry, &t)[0];
        for k in 0..pre {
            let step = int(&mut em, k as u64 + 2);
            let add = TOp::Binary(BinaryOp::Add);
            n = em.op(&add, &[n, step], &t, loc).expect("a result");
        }
        let zero = int(&mut em, 0);
        em.jump(head, &[n, zero, zero]);
        em.switch_to_block(head);
        let h = params(&mut em, head, &t3);
        let c = em.op(&TOp::Cmp(CmpOp::Lt), &[h[1], h[0]], &t3, loc);
        em.brif(c.expect("a result"), (body, &h), (exit, &h));
        em.switch_to_block(body);
        let v = params(&mut em, body, &t3);
        let (three, one) = (int(&mut em, 3), int(&mut em, 1));
        let (add, mul) = (TOp::Binary(BinaryOp::Add), TOp::Binary(BinaryOp::Mul));
        let m = em.op(&mul, &[v[1], three], &t3, loc).expect("a result");
        let acc = em.op(&add, &[v[2], m], &t3, loc).expect("a result");
        let i = em.op(&add, &[v[1], one], &t3, loc).expect("a result");
        em.jump(head, &[v[0], i, acc]);
        em.switch_to_block(exit);
        let x = params(&mut em, exit, &t3);
        em.ret(Some(x[2]));
        let [SVal::Slot(wi, _), SVal::Slot(wacc, _)] =
            [em.params_of(head)[1], em.params_of(head)[2]]
        else {
            panic!("the head's parameters are frame words")
        };
        (em.finish(entry).expect("stitched").0, wi, wacc)
    }

    /// A loop head's parameters are put in cache registers before the loop, and the
    /// values carried around it stay there: `i` and `acc` start from constants put in
    /// their registers, and the loop's exit (entered from its first test and from the
    /// copy of the test that ends its body) returns `acc` from its register, so neither
    /// word is ever read, and the loop stores neither; `i` is stepped in its own
    /// register. Untold that the head heads a loop, the loop loads both.
    #[test]
    fn a_loops_carried_values_stay_in_cache_registers() {
        let lib = StencilLib::new(test_isa());
        let (code, i, acc) = counted_loop(&lib, true, 0);
        assert_eq!(loads_of(&code, i), 0, "{code:x?}");
        assert!(!stores_to(&code, i), "{code:x?}");
        assert_eq!(loads_of(&code, acc), 0, "{code:x?}");
        assert!(!stores_to(&code, acc), "{code:x?}");
        // The counter is stepped in its own register, not made in another and moved back
        // (`remake_in`): of the two values, only the sum moves at the jump back.
        assert!(moves_in_loop(&code) <= 1, "{code:x?}");
        let (code, i, acc) = counted_loop(&lib, false, 0);
        assert!(loads_of(&code, i) >= 2, "{code:x?}");
        assert!(loads_of(&code, acc) >= 2, "{code:x?}");
    }

    /// `a = x + 1; b = x + 2; c = x + 3; d = x + 4; p = a + b; q = c + d; f = x + 5;
    /// ret a + p + q + f`, told (with `hint`) that `c` is dead after `q`: its code, and
    /// `a`'s frame word.
    fn pressure(lib: &StencilLib, hint: bool) -> (Vec<u8>, u32) {
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let loc = SrcLoc::default();
        let tt = [Type::I64; 2];
        let add = |em: &mut StencilEmitter, l: SVal, r: SVal| {
            em.op(&TOp::Binary(BinaryOp::Add), &[l, r], &tt, loc)
                .expect("a sum")
        };
        let imm = |k| SVal::Imm(k, Scalar::I64);
        let [a, b, c, d] = [1, 2, 3, 4].map(|k| add(&mut em, x, imm(k)));
        let p = add(&mut em, a, b);
        let q = add(&mut em, c, d);
        if hint {
            em.dead(c);
        }
        let f = add(&mut em, x, imm(5));
        let ap = add(&mut em, a, p);
        let apq = add(&mut em, ap, q);
        let r = add(&mut em, apq, f);
        em.ret(Some(r));
        let SVal::Slot(wa, _) = a else {
            panic!("a is in a frame word")
        };
        (em.finish(entry).expect("stitched").0, wa)
    }

    /// A result goes in the register of a value no later code reads (`Backend::dead`),
    /// rather than in the least recently used one: `f` takes `c`'s, and `a` stays in its
    /// register until `a + p` reads it; untold, `f` takes `a`'s, and `a` is loaded
    /// again.
    #[test]
    fn a_result_takes_the_register_of_a_dead_value() {
        let lib = StencilLib::new(test_isa());
        let (told, a) = pressure(&lib, true);
        assert_eq!(loads_of(&told, a), 0, "{told:x?}");
        let (untold, a) = pressure(&lib, false);
        assert!(loads_of(&untold, a) > 0, "{untold:x?}");
    }

    /// The code of `a = x + 1; b = x * 3` leaving the unit at a promotion of `a` with `b`
    /// live, and the frame words of `a` and `b`.
    fn promoting(lib: &StencilLib) -> (Vec<u8>, [u32; 2]) {
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let with = |em: &mut StencilEmitter, op: BinaryOp, k: u64| {
            let args = [x, SVal::Imm(k, Scalar::I64)];
            em.op(&TOp::Binary(op), &args, &[Type::I64; 2], SrcLoc::default())
                .expect("a result")
        };
        let a = with(&mut em, BinaryOp::Add, 1);
        let b = with(&mut em, BinaryOp::Mul, 3);
        em.promote(0, &[(a, Scalar::I64)], &[b]);
        let words = [a, b].map(|v| match v {
            SVal::Slot(w, _) => w,
            _ => panic!("results are in frame words"),
        });
        (em.finish(entry).expect("stitched").0, words)
    }

    /// A promotion reads the values it passes from the cache registers that hold them,
    /// so that the operations that made them store nothing (their words are not loaded:
    /// `drop_dead_stores`); with only the variant made ahead (values in frame words), it
    /// loads them, and the results are stored.
    #[test]
    fn a_promotion_reads_its_values_from_the_registers_that_hold_them() {
        if !StencilLib::supported() {
            return;
        }
        // `r64 -> disp32(%rsi)` stores of word `w`.
        let stores_of = |code: &[u8], w: u32| {
            let disp = (8 * w).to_le_bytes();
            code.windows(7)
                .filter(|c| {
                    c[0] & 0xfb == 0x48 && c[1] == 0x89 && c[2] & 0xc7 == 0x86 && c[3..] == disp
                })
                .count()
        };
        let all = StencilLib::with_misses(test_isa(), Misses::Make);
        let (code, [a, b]) = promoting(&all);
        assert_eq!(
            (stores_of(&code, a), stores_of(&code, b)),
            (0, 0),
            "{code:x?}"
        );
        assert_eq!(
            (loads_of(&code, a), loads_of(&code, b)),
            (0, 0),
            "{code:x?}"
        );
        let ahead = StencilLib::with_misses(test_isa(), Misses::Fallback);
        let (code, [a, b]) = promoting(&ahead);
        assert!(
            loads_of(&code, a) > 0 && stores_of(&code, a) > 0,
            "{code:x?}"
        );
        assert!(
            loads_of(&code, b) > 0 && stores_of(&code, b) > 0,
            "{code:x?}"
        );
    }

    /// A unit whose copies count no fallback has the code it has with every stencil made:
    /// a copy that does not get the stencil it asks for (a variant, a comparison fused
    /// with its branch, a result made in the register a jump wants it in) counts one,
    /// and wants it, so that a caller stitching again until none is counted gets the
    /// best code.
    #[test]
    fn a_unit_without_fallbacks_has_the_code_of_every_stencil_made() {
        if !StencilLib::supported() {
            return;
        }
        let all = StencilLib::with_misses(test_isa(), Misses::Make);
        type Unit = fn(&StencilLib) -> Vec<u8>;
        let units: [(&str, Unit); 8] = [
            ("counted loop", |lib| counted_loop(lib, true, 0).0),
            ("counted loop after code", |lib| {
                counted_loop(lib, true, 3).0
            }),
            ("carried loop", |lib| {
                carried_loop(lib, &[true, true, true, false]).0
            }),
            ("compare and branch", |lib| {
                compare_and_branch(lib, false, false)
            }),
            ("a chain of jumps", |lib| chain(lib, 3, true)),
            ("sums", |lib| sums(lib, Scalar::I32, true).0),
            ("carried values", |lib| carried(lib, true, true)),
            ("a division by a constant", |lib| {
                with_const(lib, BinaryOp::Div, 7, Scalar::I64)
            }),
        ];
        for (name, unit) in units {
            let lib = StencilLib::with_misses(test_isa(), Misses::Background);
            let best = unit(&all);
            for round in 0.. {
                assert!(round < 10, "{name}: still falling back");
                let before = lib.counts().fallbacks;
                let code = unit(&lib);
                if lib.counts().fallbacks == before {
                    assert_eq!(code, best, "{name}, round {round}");
                    break;
                }
                lib.settle();
            }
        }
    }

    /// `k = n + 5; i = 0; acc = 0; while i < n { acc = acc + (i * 3 + i); i = i + 1 };
    /// ret acc + k`, its head told a loop head whose loop reads `reads` of `(n, i, acc,
    /// k)`: its code, and the frame words of `n`, `i` and `acc`.
    fn carried_loop(lib: &StencilLib, reads: &[bool; 4]) -> (Vec<u8>, [u32; 3]) {
        use crate::ops::CmpOp;
        let mut services = NoServices;
        let (t, t4) = ([Type::I64], [Type::I64; 4]);
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let [entry, head, body, exit] = [&t[..], &t4, &t4, &t4].map(|p| em.create_block(p));
        em.loop_head(head, reads);
        let loc = SrcLoc::default();
        let int = |em: &mut StencilEmitter, v: u64| em.constant(Const::Int(Scalar::I64, v));
        let (add, mul) = (TOp::Binary(BinaryOp::Add), TOp::Binary(BinaryOp::Mul));
        em.switch_to_block(entry);
        let n = params(&mut em, entry, &t)[0];
        let five = int(&mut em, 5);
        let k = em.op(&add, &[n, five], &t, loc).expect("a result");
        let zero = int(&mut em, 0);
        em.jump(head, &[n, zero, zero, k]);
        em.switch_to_block(head);
        let h = params(&mut em, head, &t4);
        let c = em.op(&TOp::Cmp(CmpOp::Lt), &[h[1], h[0]], &t4, loc);
        em.brif(c.expect("a result"), (body, &h), (exit, &h));
        em.switch_to_block(body);
        let v = params(&mut em, body, &t4);
        let (three, one) = (int(&mut em, 3), int(&mut em, 1));
        let m = em.op(&mul, &[v[1], three], &t4, loc).expect("a result");
        let q = em.op(&add, &[m, v[1]], &t4, loc).expect("a result");
        let acc = em.op(&add, &[v[2], q], &t4, loc).expect("a result");
        let i = em.op(&add, &[v[1], one], &t4, loc).expect("a result");
        em.jump(head, &[v[0], i, acc, v[3]]);
        em.switch_to_block(exit);
        let x = params(&mut em, exit, &t4);
        let r = em.op(&add, &[x[2], x[3]], &t4, loc).expect("a result");
        em.ret(Some(r));
        let word = |p: SVal| match p {
            SVal::Slot(w, _) => w,
            p => panic!("the head's parameters are frame words, not {p:?}"),
        };
        let ws = [0, 1, 2].map(|j| word(em.params_of(head)[j]));
        (em.finish(entry).expect("stitched").0, ws)
    }

    /// A switch's cases are tests that each jump straight to their case's block when
    /// equal and fall through to the next test otherwise: no case leaves the jump to the
    /// next test and the jump to its block behind its conditional jump (two jumps a case,
    /// one taken on every path).
    #[test]
    fn a_switchs_cases_fall_through_to_the_next() {
        let lib = StencilLib::new(test_isa());
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        let arms: Vec<u32> = (0..4).map(|_| em.create_block(&[])).collect();
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let cases: Vec<BCase<StencilEmitter>> = (0..3)
            .map(|k| (10 * k as u64 + 3, arms[k], Vec::new()))
            .collect();
        em.switch(x, Scalar::I64, &cases, (arms[3], &[]));
        for (k, &b) in arms.iter().enumerate() {
            em.switch_to_block(b);
            let r = em.constant(Const::Int(Scalar::I64, k as u64));
            em.ret(Some(r));
        }
        let code = em.finish(entry).expect("stitched").0;
        let (jumps, nop_jumps) = (0..code.len().saturating_sub(5)).fold((0, 0), |(j, n), i| {
            let jcc = code[i] == 0x0f && code[i + 1] == 0x84;
            let nop_jmp = code[i..i + 4] == NOP4 && code[i + 4] == 0xe9;
            (j + usize::from(jcc), n + usize::from(nop_jmp))
        });
        assert_eq!(jumps, 3, "{code:x?}");
        assert_eq!(nop_jumps, 0, "{code:x?}");
    }

    /// A loop head's parameter the loop does not read (one it only carries to its exit)
    /// is not put in a cache register before the loop: the loop's values and those it
    /// makes fit in the registers, and it loads none from its frame word. With every
    /// parameter read, the four take the four registers, and the loop's intermediate
    /// results push one out of its register each time round.
    #[test]
    fn a_loop_keeps_registers_for_what_it_reads() {
        let lib = StencilLib::new(test_isa());
        let loads_in_loop = |code: &[u8], ws: &[u32]| {
            let (top, end) = back_jump(code).expect("a loop");
            ws.iter()
                .map(|&w| loads_of(&code[top..end], w))
                .sum::<usize>()
        };
        let (code, ws) = carried_loop(&lib, &[true, true, true, false]);
        assert_eq!(loads_in_loop(&code, &ws), 0, "{code:x?}");
        let (code, ws) = carried_loop(&lib, &[true; 4]);
        assert!(loads_in_loop(&code, &ws) > 0, "{code:x?}");
    }

    /// A loop that fits in a fetch window is placed within one (`align_loops`), however
    /// much code comes before it; some of those loops start on a window boundary after
    /// `nop`s.
    #[test]
    fn small_loops_are_placed_within_one_fetch_window() {
        let lib = StencilLib::new(test_isa());
        let mut padded = 0;
        let mut starts = std::collections::BTreeSet::new();
        for pre in 0..12 {
            let (code, _, _) = counted_loop(&lib, true, pre);
            let (top, end) = back_jump(&code).expect("a loop");
            let (len, window) = (end + 6 - top, FETCH_WINDOW as usize);
            assert!(len <= window, "{code:x?}");
            assert!(
                top % window + len <= window,
                "{pre}: loop at {top:#x}..{:#x}",
                end + 6
            );
            starts.insert(top);
            if top % window == 0 && NOPS.iter().any(|n| code[..top].ends_with(n)) {
                padded += 1;
            }
        }
        assert!(starts.len() > 1, "the code before the loop moved it");
        assert!(padded > 0, "some loop was moved to a window boundary");
    }

    /// A register taken through a block that was jumped into since it was placed is not
    /// read: `e(x)` makes `y = x + 1` in a register and falls into `h(y, 0)`, which tests
    /// only its second parameter, `c` jumps back into `h` (putting nothing in a register:
    /// `h` read none), and `b(p)`, entered from `h`'s branch and placed after `c`, must
    /// load `p` (that is, `y`) from its frame word, which stays stored. (Reading the
    /// register, `b` would read what the last pass through `c` left there.)
    #[test]
    fn a_register_taken_through_a_block_jumped_into_since_is_not_read() {
        use crate::ops::CmpOp;
        let lib = StencilLib::new(test_isa());
        let mut services = NoServices;
        let (t, t1, t2) = ([Type::I64], [Type::I64], [Type::I64; 2]);
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
        let [e, h, c, b] = [&t[..], &t2, &t2, &t1].map(|p| em.create_block(p));
        let loc = SrcLoc::default();
        let add = TOp::Binary(BinaryOp::Add);
        let int = |em: &mut StencilEmitter, v: u64| em.constant(Const::Int(Scalar::I64, v));
        em.switch_to_block(e);
        let x = params(&mut em, e, &t)[0];
        let one = int(&mut em, 1);
        let y = em.op(&add, &[x, one], &t2, loc).expect("a result");
        let zero = int(&mut em, 0);
        em.jump(h, &[y, zero]);
        em.switch_to_block(h);
        let pq = params(&mut em, h, &t2);
        // (A result stored: `h`'s code is not copied into `c` as a loop's test, which
        // would be a second entry into `b`.)
        let two = int(&mut em, 2);
        let q2 = em.op(&add, &[pq[1], two], &t2, loc).expect("a result");
        let five = int(&mut em, 5);
        let lt = em.op(&TOp::Cmp(CmpOp::Lt), &[q2, five], &t2, loc);
        em.brif(lt.expect("a result"), (c, &pq), (b, &pq[..1]));
        em.switch_to_block(c);
        let pq = params(&mut em, c, &t2);
        let one = int(&mut em, 1);
        let q = em.op(&add, &[pq[1], one], &t2, loc).expect("a result");
        em.jump(h, &[pq[0], q]);
        em.switch_to_block(b);
        let p = params(&mut em, b, &t1)[0];
        let r = em.op(&add, &[p, one], &t2, loc).expect("a result");
        em.ret(Some(r));
        let SVal::Slot(w, _) = p else {
            panic!("{p:?} is not in a frame word")
        };
        let code = em.finish(e).expect("stitched").0;
        assert!(loads_of(&code, w) >= 1, "{code:x?}");
        assert!(stores_to(&code, w), "{code:x?}");
    }

    /// A unit of `x` of type `s`: `y = x + 1`, `z = y + 5`, then `ret z`, or (`reuse`)
    /// `ret z + y`; its code and `y`'s frame word.
    fn sums(lib: &StencilLib, s: Scalar, reuse: bool) -> (Vec<u8>, u32) {
        let mut services = NoServices;
        let i = Type::Scalar(s);
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &[i]);
        let b = em.create_block(&[i]);
        em.switch_to_block(b);
        let x = params(&mut em, b, &[i])[0];
        let add = TOp::Binary(BinaryOp::Add);
        let c = |n: u8| match s {
            Scalar::F64 => Const::F64(f64::from(n)),
            s => Const::Int(s, u64::from(n)),
        };
        let (one, five) = (em.constant(c(1)), em.constant(c(5)));
        let loc = SrcLoc::default();
        let y = em.op(&add, &[x, one], &[i, i], loc).expect("a result");
        let z = em.op(&add, &[y, five], &[i, i], loc).expect("a result");
        // Reused after three more results: four cache registers no longer hold `y`.
        let r = match reuse {
            true => {
                let mut r = z;
                for _ in 0..3 {
                    r = em.op(&add, &[r, five], &[i, i], loc).expect("a result");
                }
                em.op(&add, &[r, y], &[i, i], loc).expect("a result")
            }
            false => z,
        };
        em.ret(Some(r));
        let SVal::Slot(w, _) = y else {
            panic!("{y:?} is not in a frame word")
        };
        (em.finish(b).expect("stitched").0, w)
    }

    /// A result that only the next operation reads, from the accumulator, is not stored:
    /// its store is removed, leaving no `nop` (it ended its copy). One read from its
    /// frame word (once the cache registers hold other words) keeps the store. The same for `f64` results, which are stored from
    /// their own register (in either encoding, SSE or VEX).
    #[test]
    fn results_read_only_from_the_accumulator_are_not_stored() {
        // `nopl disp32(%rax)`, `nopl disp32(%rax,%rax)` and the same with `66`.
        const NOPS: [&[u8]; 3] = [
            &[0x0f, 0x1f, 0x80, 0, 0, 0, 0],
            &[0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
            &[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0],
        ];
        let lib = StencilLib::new(test_isa());
        let nops = |code: &[u8]| -> usize {
            NOPS.iter()
                .map(|n| code.windows(n.len()).filter(|c| c == n).count())
                .sum()
        };
        // `movq xmm, r64` (`66 REX.W 0f 7e`, or VEX.W1 `66 0f 7e`: `... f9 7e`): only
        // the return of an `f64` moves it to an integer register (the unit's result).
        let to_int = |code: &[u8]| {
            code.windows(2)
                .filter(|c| *c == [0x0f, 0x7e] || *c == [0xf9, 0x7e])
                .count()
        };
        for s in [Scalar::I64, Scalar::F64] {
            let (code, y) = sums(&lib, s, false);
            let returns = usize::from(s == Scalar::F64);
            assert_eq!(to_int(&code), returns, "{s:?}: {code:x?}");
            assert!(!stores_to(&code, y), "{s:?}: {code:x?}");
            assert_eq!(nops(&code), 0, "{s:?}: y and z are not stored: {code:x?}");
            let (code, y) = sums(&lib, s, true);
            assert!(stores_to(&code, y), "{s:?}: {code:x?}");
            assert_eq!(nops(&code), 0, "{s:?}: only y is stored: {code:x?}");
        }
    }

    /// A square of the value the accumulator holds reads it from there twice: `y = x + 1;
    /// ret y * y` loads `y` from no frame word, and so does not store it either.
    #[test]
    fn a_square_reads_the_accumulator_twice() {
        let lib = StencilLib::new(test_isa());
        let mut services = NoServices;
        let i = Type::I64;
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &[i]);
        let b = em.create_block(&[i]);
        em.switch_to_block(b);
        let x = params(&mut em, b, &[i])[0];
        let loc = SrcLoc::default();
        let one = em.constant(Const::Int(Scalar::I64, 1));
        let y = em
            .op(&TOp::Binary(BinaryOp::Add), &[x, one], &[i, i], loc)
            .expect("a result");
        let z = em
            .op(&TOp::Binary(BinaryOp::Mul), &[y, y], &[i, i], loc)
            .expect("a result");
        em.ret(Some(z));
        let SVal::Slot(w, _) = y else {
            panic!("{y:?} is not in a frame word")
        };
        let code = em.finish(b).expect("stitched").0;
        // `mov disp32(%rsi), r64`.
        let disp = (8 * w).to_le_bytes();
        let loads = code
            .windows(7)
            .any(|c| c[0] & 0xfb == 0x48 && c[1] == 0x8b && c[2] & 0xc7 == 0x86 && c[3..] == disp);
        assert!(!loads && !stores_to(&code, w), "{code:x?}");
    }

    /// A loop `head(i): if i < x { body(i) } else { exit(i) }`, `body(i): head(i + 1)`:
    /// the body's jump back copies the head's test, so the body ends in a conditional
    /// jump back to itself (backwards), and the loop has no unconditional jump. With a
    /// body that jumps to a block placed after the exit (`body(i): step(i - x)`,
    /// `step(i): head(i + 1)`), the step's jump back is not copied: the copy would not
    /// jump into the step's own code (nor into any code that falls into it).
    #[test]
    fn a_loops_test_is_copied_where_its_body_jumps_back() {
        use crate::ops::CmpOp;
        let lib = StencilLib::new(test_isa());
        let unit = |via_step: bool| {
            let mut services = NoServices;
            let (t, t2) = ([Type::I64], [Type::I64, Type::I64]);
            let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
            let [entry, head, body, exit, step] =
                [&t[..], &t2, &t2, &t2, &t2].map(|p| em.create_block(p));
            let loc = SrcLoc::default();
            em.switch_to_block(entry);
            let x = params(&mut em, entry, &t)[0];
            let zero = em.constant(Const::Int(Scalar::I64, 0));
            em.jump(head, &[zero, x]);
            em.switch_to_block(head);
            let ix = params(&mut em, head, &t2);
            let c = em
                .op(&TOp::Cmp(CmpOp::Lt), &ix, &t2, loc)
                .expect("a result");
            em.brif(c, (body, &ix), (exit, &ix));
            let increment = |em: &mut StencilEmitter, b: u32| {
                em.switch_to_block(b);
                let ix = params(em, b, &t2);
                let one = em.constant(Const::Int(Scalar::I64, 1));
                let add = TOp::Binary(BinaryOp::Add);
                let i = em.op(&add, &[ix[0], one], &t2, loc).expect("a result");
                em.jump(head, &[i, ix[1]]);
            };
            match via_step {
                false => increment(&mut em, body),
                true => {
                    em.switch_to_block(body);
                    let ix = params(&mut em, body, &t2);
                    let sub = TOp::Binary(BinaryOp::Sub);
                    let i = em.op(&sub, &[ix[0], ix[1]], &t2, loc).expect("a result");
                    em.jump(step, &[i, ix[1]]);
                }
            }
            em.switch_to_block(exit);
            let ix = params(&mut em, exit, &t2);
            em.ret(Some(ix[0]));
            if via_step {
                increment(&mut em, step);
            }
            em.finish(entry).expect("stitched").0
        };
        // The displacements of the conditional jumps (`0f 8x rel32`).
        let jcc = |code: &[u8]| -> Vec<i32> {
            (0..code.len().saturating_sub(6))
                .filter(|&p| code[p] == 0x0f && code[p + 1] & 0xf0 == 0x80)
                .map(|p| i32::from_le_bytes(code[p + 2..p + 6].try_into().expect("4 bytes")))
                .collect()
        };
        let code = unit(false);
        // The prologue's frame check, the head's test, and its copy, which jumps back.
        let js = jcc(&code);
        assert_eq!(js.len(), 3, "{code:x?}");
        assert!(js[2] < 0, "{code:x?}");
        // The prologue's two jumps (around its call of `dyc_frame`), and no other.
        assert_eq!(code.iter().filter(|&&b| b == 0xe9).count(), 2, "{code:x?}");
        let code = unit(true);
        assert_eq!(jcc(&code).len(), 2, "{code:x?}");
    }

    /// Blocks that only jump on get no code: jumps to them go where they lead (jump
    /// threading), however long the chain; a block that jumps to itself keeps its jump.
    #[test]
    fn blocks_that_only_jump_on_get_no_code() {
        let lib = StencilLib::new(test_isa());
        let direct = chain(&lib, 0, false).len();
        for hops in 1..6 {
            assert_eq!(chain(&lib, hops, false).len(), direct, "{hops} hops");
        }
        let spin = chain(&lib, 4, true);
        assert_eq!(spin[spin.len() - 5], 0xe9, "{spin:x?}");
        assert_eq!(spin.len(), chain(&lib, 0, true).len());
    }

    /// The code of a unit taking an `i64` `x` that branches on `x < 5`, each side
    /// returning `x`; with `pass`, the true side also takes the comparison's result as a
    /// parameter (so the result is read after the branch); with `keep`, the result is
    /// kept (a unit invariant, read later unpassed). The branch is in a block the entry
    /// jumps to.
    fn compare_and_branch(lib: &StencilLib, pass: bool, keep: bool) -> Vec<u8> {
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        let test = em.create_block(&t);
        let yes_params = if pass {
            vec![Type::I64, Type::BOOL]
        } else {
            vec![Type::I64]
        };
        let yes = em.create_block(&yes_params);
        let no = em.create_block(&t);
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        em.jump(test, &[x]);
        em.switch_to_block(test);
        let x = params(&mut em, test, &t)[0];
        let lt = TOp::Cmp(crate::ops::CmpOp::Lt);
        let five = SVal::Imm(5, Scalar::I64);
        let c = em
            .op(&lt, &[x, five], &[Type::I64, Type::I64], SrcLoc::default())
            .expect("a result");
        if keep {
            em.keep(c);
        }
        let yes_args = if pass { vec![x, c] } else { vec![x] };
        em.brif(c, (yes, &yes_args), (no, &[x]));
        for (b, tys) in [(yes, &yes_params[..]), (no, &t[..])] {
            em.switch_to_block(b);
            let p = params(&mut em, b, tys);
            em.ret(Some(p[0]));
        }
        em.finish(entry).expect("stitched").0
    }

    /// A branch on a comparison nothing else reads is one stencil (compare and jump),
    /// which neither makes the `bool` nor stores it; but not when the comparison is kept.
    #[test]
    fn a_comparison_branched_on_is_fused_with_the_branch() {
        let lib = StencilLib::new(test_isa());
        let fused = compare_and_branch(&lib, false, false);
        let kept = compare_and_branch(&lib, true, false);
        // The fused stencil saves the `setcc`, its widening, the store and the `test`.
        assert!(
            fused.len() < kept.len(),
            "{} vs {}",
            fused.len(),
            kept.len()
        );
        let setcc = |code: &[u8]| {
            code.windows(2)
                .any(|w| w[0] == 0x0f && (0x90..0xa0).contains(&w[1]))
        };
        assert!(setcc(&kept), "{kept:x?}");
        assert!(!setcc(&fused), "{fused:x?}");
        // Not for a value kept, which later blocks read unpassed.
        let kept_alive = compare_and_branch(&lib, false, true);
        assert!(setcc(&kept_alive), "{kept_alive:x?}");
    }

    /// A branch on a comparison whose fused stencil is not made yet copies the two apart
    /// and counts a fallback (so that a version is stitched again once it is made, and a
    /// caller settling the stencils waits for it); once made, it is copied, uncounted.
    #[test]
    fn a_fused_comparison_not_made_counts_a_fallback() {
        if !StencilLib::supported() {
            return;
        }
        // Every stencil of the comparison and the branch apart made (with the result
        // passed on, nothing is fused), and then the library's units wait for nothing.
        let made = StencilLib::with_misses(test_isa(), Misses::Make);
        compare_and_branch(&made, true, false);
        let lib = StencilLib {
            shared: made.shared.clone(),
            id: made.id,
            misses: Misses::Background,
        };
        let setcc = |code: &[u8]| {
            code.windows(2)
                .any(|w| w[0] == 0x0f && (0x90..0xa0).contains(&w[1]))
        };
        let before = lib.counts().fallbacks;
        let apart = compare_and_branch(&lib, false, false);
        assert!(setcc(&apart), "{apart:x?}");
        assert_eq!(lib.counts().fallbacks, before + 1);
        lib.settle();
        let fused = compare_and_branch(&lib, false, false);
        assert!(!setcc(&fused), "{fused:x?}");
        assert_eq!(lib.counts().fallbacks, before + 1);
    }

    /// A unit returning `x op c` for a constant `c` of type `s`.
    fn with_const(lib: &StencilLib, op: BinaryOp, c: u64, s: Scalar) -> Vec<u8> {
        let mut services = NoServices;
        let t = [Type::Scalar(s)];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let r = em
            .op(
                &TOp::Binary(op),
                &[x, SVal::Imm(c, s)],
                &[t[0], t[0]],
                SrcLoc::default(),
            )
            .expect("a result");
        em.ret(Some(r));
        em.finish(entry).expect("stitched").0
    }

    /// Adding a small negative constant is subtracting its negation, with a 4-byte hole
    /// (the same code as `x - 1`), and so the other way; a constant whose negation does
    /// not fit a 4-byte hole either keeps its 8-byte one.
    #[test]
    fn small_negative_constants_take_four_byte_holes() {
        use BinaryOp::{Add, Sub};
        let lib = StencilLib::new(test_isa());
        let minus_one = 1u64.wrapping_neg();
        for s in [Scalar::I64, Scalar::U64] {
            assert_eq!(
                with_const(&lib, Add, minus_one, s),
                with_const(&lib, Sub, 1, s)
            );
            assert_eq!(
                with_const(&lib, Sub, minus_one, s),
                with_const(&lib, Add, 1, s)
            );
        }
        assert_eq!(
            with_const(&lib, Add, 0xffff_fffe, Scalar::I32),
            with_const(&lib, Sub, 2, Scalar::I32)
        );
        // -(2^31 + 1) stays an addition of an 8-byte constant (a `movabs`).
        let far = (1u64 << 31).wrapping_add(1).wrapping_neg();
        let code = with_const(&lib, Add, far, Scalar::I64);
        assert!(code.len() > with_const(&lib, Sub, 1, Scalar::I64).len());
        assert!(code.windows(8).any(|w| w == far.to_le_bytes()));
    }

    /// A two-way branch on one condition, and a switch's case, can be cut (its
    /// conditional jump goes straight to the true side's block); a float equality, which
    /// Cranelift branches on with two conditional jumps, cannot.
    #[test]
    fn branches_on_one_condition_can_be_cut() {
        use crate::ops::CmpOp;
        let lib = StencilLib::new(test_isa());
        let (i, f) = (Scalar::I64, Scalar::F64);
        let cmp = |op, t| Key::CmpBranch {
            op: TOp::Cmp(op),
            forms: [Form::Slot(t), Form::Slot(t)].into_iter().collect(),
        };
        for k in [
            Key::Branch(Form::Slot(Scalar::Bool)),
            Key::Branch(Form::Acc(Scalar::Bool)),
            cmp(CmpOp::Lt, i),
            cmp(CmpOp::Eq, i),
            // A case of a switch: equal, to its block; else on to the next case.
            Key::CaseEq(Form::Slot(i), false),
            Key::CaseEq(Form::Acc(i), false),
            Key::CaseEq(Form::Reg(i, 2), false),
        ] {
            let st = lib.get(&k).unwrap_or_else(|e| panic!("{e}"));
            let (jcc, end) = st.cut.unwrap_or_else(|| panic!("{k:?} is not cut"));
            assert_eq!(end, jcc + 4, "{k:?}");
            assert_eq!(st.code[jcc as usize - 2], 0x0f, "{k:?}");
        }
        // (Nor a case whose value is wider than 32 bits: Cranelift compares with it in the
        // constant pool after the jumps, which a cut would drop.)
        for k in [
            cmp(CmpOp::Eq, f),
            cmp(CmpOp::Ne, f),
            Key::CaseEq(Form::Acc(i), true),
        ] {
            let st = lib.get(&k).unwrap_or_else(|e| panic!("{e}"));
            assert!(st.cut.is_none(), "{k:?}");
        }
    }

    /// A branch on `x < y` whose true side is placed right after it: the cut branch's
    /// condition is inverted (its conditional jump goes to the false side) and its jump
    /// is removed, so the true side falls through; with the false side placed next,
    /// the condition stays, the true side is jumped to, and the false side follows with
    /// no jump. A false side placed next whose only code is a jump elsewhere is bypassed
    /// the same way, unless something else jumps to it, or it falls into more blocks
    /// that only jump (which share its address), one of which the true side jumps to.
    #[test]
    fn a_cut_branch_is_inverted_when_its_true_side_follows() {
        use crate::ops::CmpOp;
        #[derive(Clone, Copy, PartialEq)]
        enum Shape {
            TrueFirst,
            FalseFirst,
            FalseOnlyJumps,
            FalseOnlyJumpsAndIsEntered,
            /// `no` jumps to `mid`, `mid` to `last`, `last` to `exit`, all placed one
            /// after the other (no code of their own but `last`'s jump), and the true
            /// side adds 1 and jumps to `mid`.
            FalseChainIsEntered,
        }
        let lib = StencilLib::new(test_isa());
        let unit = |shape: Shape| {
            let mut services = NoServices;
            let (t, t2) = ([Type::I64], [Type::I64, Type::I64]);
            let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t2);
            // (The unit's first block only jumps on: its values are pinned.)
            let first = em.create_block(&t2);
            let (entry, yes, no, exit) = (
                em.create_block(&t2),
                em.create_block(&t),
                em.create_block(&t),
                em.create_block(&t),
            );
            let (mid, last) = (em.create_block(&t), em.create_block(&t));
            em.switch_to_block(first);
            let xy0 = params(&mut em, first, &t2);
            em.jump(entry, &xy0);
            em.switch_to_block(entry);
            let xy = params(&mut em, entry, &t2);
            let x = xy[0];
            let c = em
                .op(&TOp::Cmp(CmpOp::Lt), &xy, &t2, SrcLoc::default())
                .expect("a result");
            em.brif(c, (yes, &[x]), (no, &[x]));
            let order = match shape {
                Shape::TrueFirst => vec![yes, no],
                Shape::FalseFirst => vec![no, yes],
                Shape::FalseChainIsEntered => vec![no, mid, last, yes, exit],
                _ => vec![no, yes, exit],
            };
            for b in order {
                em.switch_to_block(b);
                let v = params(&mut em, b, &t)[0];
                match shape {
                    Shape::FalseOnlyJumps | Shape::FalseOnlyJumpsAndIsEntered if b == no => {
                        em.jump(exit, &[v])
                    }
                    Shape::FalseOnlyJumpsAndIsEntered if b == yes => em.jump(no, &[v]),
                    Shape::FalseChainIsEntered if b == no => em.jump(mid, &[v]),
                    Shape::FalseChainIsEntered if b == mid => em.jump(last, &[v]),
                    Shape::FalseChainIsEntered if b == last => em.jump(exit, &[v]),
                    Shape::FalseChainIsEntered if b == yes => {
                        let one = em.constant(Const::Int(Scalar::I64, 1));
                        let add = TOp::Binary(BinaryOp::Add);
                        let w = em.op(&add, &[v, one], &t2, SrcLoc::default());
                        em.jump(mid, &[w.expect("a result")])
                    }
                    _ => em.ret(Some(v)),
                }
            }
            em.finish(first).expect("stitched").0
        };
        // The last conditional jump (`0f 8x`) of a unit (the prologue's frame check has
        // one of its own, first) and the instruction after it.
        let last_jcc = |code: &[u8]| {
            let at = code
                .windows(2)
                .rposition(|w| w[0] == 0x0f && w[1] & 0xf0 == 0x80)
                .expect("a conditional jump");
            (code[at + 1], code[at + 6])
        };
        let (op, _) = last_jcc(&unit(Shape::FalseFirst));
        for (shape, inverted) in [
            (Shape::TrueFirst, true),
            (Shape::FalseOnlyJumps, true),
            (Shape::FalseOnlyJumpsAndIsEntered, false),
            (Shape::FalseChainIsEntered, false),
        ] {
            let code = unit(shape);
            let (got, next) = last_jcc(&code);
            if inverted {
                assert_eq!(got, op ^ 1, "the condition is negated");
                // Neither the jump nor a `nop` in its place: the true side's code.
                assert!(next != 0x0f && next != 0xe9, "{code:x?}");
                let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
                assert!(!code.windows(5).any(|w| w == nop5), "{code:x?}");
            } else {
                assert_eq!(got, op, "the condition stays");
                assert_ne!(next, 0x0f, "no `nop` follows");
            }
        }
    }

    /// A unit taking `x`: its entry computes `y = x + 1` and falls into block `b(y)`
    /// (through `hop(y)`, which only jumps on to `b`, with `hop`), which returns `y * 3`,
    /// reading `y` from the accumulator; with `rejoin`, a last block jumps to `b(x)` (to
    /// `hop(x)` with `hop`).
    fn carried(lib: &StencilLib, hop: bool, rejoin: bool) -> Vec<u8> {
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        // (The unit's first block only jumps on: its values are pinned.)
        let first = em.create_block(&t);
        let (entry, h, b, c) = (
            em.create_block(&t),
            em.create_block(&t),
            em.create_block(&t),
            em.create_block(&t),
        );
        em.switch_to_block(first);
        let x0 = params(&mut em, first, &t);
        em.jump(entry, &x0);
        // `v op k` for a constant `k`.
        let op_k = |em: &mut StencilEmitter, op: BinaryOp, v: SVal, k: u64| {
            let tys = [Type::I64, Type::I64];
            let args = [v, SVal::Imm(k, Scalar::I64)];
            em.op(&TOp::Binary(op), &args, &tys, SrcLoc::default())
                .expect("a result")
        };
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let y = op_k(&mut em, BinaryOp::Add, x, 1);
        if hop {
            em.jump(h, &[y]);
            em.switch_to_block(h);
            let y = params(&mut em, h, &t)[0];
            em.jump(b, &[y]);
        } else {
            em.jump(b, &[y]);
        }
        em.switch_to_block(b);
        let y = params(&mut em, b, &t)[0];
        let z = op_k(&mut em, BinaryOp::Mul, y, 3);
        em.ret(Some(z));
        em.switch_to_block(c);
        let x = params(&mut em, c, &t)[0];
        match (rejoin, hop) {
            (true, true) => em.jump(h, &[x]),
            (true, false) => em.jump(b, &[x]),
            (false, _) => em.ret(Some(x)),
        }
        em.finish(first).expect("stitched").0
    }

    /// A block that relies on the accumulator it inherited only to jump on: `b(p)`
    /// branches on `p` from the accumulator to `e` or (falling through) `c`; `c(q)` jumps
    /// back to `b(q)`, and so leaves `p`'s word in the accumulator only because it
    /// inherited it. A later jump to `c` from `e`, after an operation that wrote the
    /// accumulator, must load that word first (a load into `rdx`, the accumulator's
    /// register): else `b` would read another value as `p`.
    #[test]
    fn a_block_that_jumps_on_with_its_inherited_accumulator_is_entered_with_it() {
        use crate::ops::CmpOp;
        let lib = StencilLib::new(test_isa());
        let mut services = NoServices;
        let (i, t, bt) = (Type::I64, [Type::I64], [Type::Scalar(Scalar::Bool)]);
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
        let [first, entry] = [&t, &t].map(|p| em.create_block(p));
        let [b, c, e] = [&bt, &bt, &bt].map(|p| em.create_block(p));
        let loc = SrcLoc::default();
        em.switch_to_block(first);
        let x0 = params(&mut em, first, &t);
        em.jump(entry, &x0);
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        let five = em.constant(Const::Int(Scalar::I64, 5));
        let p = em
            .op(&TOp::Cmp(CmpOp::Lt), &[x, five], &[i, i], loc)
            .expect("a result");
        em.jump(b, &[p]);
        em.switch_to_block(b);
        let p = params(&mut em, b, &bt)[0];
        em.brif(p, (e, &[p]), (c, &[p]));
        em.switch_to_block(c);
        let q = params(&mut em, c, &bt)[0];
        em.jump(b, &[q]);
        em.switch_to_block(e);
        let r = params(&mut em, e, &bt)[0];
        let b1 = Type::Scalar(Scalar::Bool);
        let one = em.constant(Const::Int(Scalar::Bool, 1));
        let s = em
            .op(&TOp::Binary(BinaryOp::Xor), &[r, one], &[b1, b1], loc)
            .expect("a result");
        let u = em
            .op(&TOp::Binary(BinaryOp::Or), &[r, s], &[b1, b1], loc)
            .expect("a result");
        em.keep(u);
        em.jump(c, &[s]);
        let SVal::Slot(w, _) = params(&mut em, c, &bt)[0] else {
            panic!("a parameter in a frame word")
        };
        let code = em.finish(first).expect("stitched").0;
        // `mov disp32(%rsi), %rdx` of `c`'s word, right before a `jmp`.
        let disp = (8 * w).to_le_bytes();
        let reload = code
            .windows(12)
            .any(|k| k[..3] == [0x48, 0x8b, 0x96] && k[3..7] == disp && k[7] == 0xe9);
        assert!(reload, "{code:x?}");
    }

    /// The accumulator is carried into a block the code before falls into, and a later
    /// jump to that block, or to one that falls into it, loads the word it expects there
    /// first (`Key::Reload`: a load into `rdx`, the accumulator's register).
    #[test]
    fn a_block_entered_by_falling_through_reads_the_accumulator() {
        let lib = StencilLib::new(test_isa());
        let reloads = |code: &[u8]| code.windows(3).filter(|w| w == &[0x48, 0x8b, 0x96]).count();
        // Also when the block falls in through one that only jumps on, and the later
        // jump goes to that one.
        for hop in [false, true] {
            let alone = carried(&lib, hop, false);
            let rejoined = carried(&lib, hop, true);
            assert_eq!(
                reloads(&rejoined),
                reloads(&alone) + 1,
                "{hop}: {rejoined:x?}"
            );
        }
    }

    /// The stencils copied for a unit taking `x` that jumps to a loop `head`, which
    /// computes `q = p + 1` from its parameter `p` and jumps back passing `q`.
    /// `read_after`: the loop also computes `p * 2` after `q` (reading `p` after `q` is
    /// made). `twice`: the loop jumps instead to a block `next(a, b)` entered first there,
    /// passing `q` to both (the first jump binds `a` to `q`'s word, so `b` needs a move).
    fn back_edge(lib: &StencilLib, read_after: bool, twice: bool) -> usize {
        let mut services = NoServices;
        let t = [Type::I64];
        let two = [Type::I64; 2];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let (entry, head, next) = (
            em.create_block(&t),
            em.create_block(&t),
            em.create_block(&two),
        );
        let k = |em: &mut StencilEmitter, op: BinaryOp, v: SVal, k: u64| {
            let tys = [Type::I64, Type::I64];
            em.op(
                &TOp::Binary(op),
                &[v, SVal::Imm(k, Scalar::I64)],
                &tys,
                SrcLoc::default(),
            )
            .expect("a result")
        };
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        em.jump(head, &[x]);
        em.switch_to_block(head);
        let p = params(&mut em, head, &t)[0];
        let q = k(&mut em, BinaryOp::Add, p, 1);
        if read_after {
            k(&mut em, BinaryOp::Mul, p, 2);
        }
        if twice {
            em.jump(next, &[q, q]);
            em.switch_to_block(next);
            let ab = params(&mut em, next, &two);
            em.ret(Some(ab[1]));
        } else {
            em.jump(head, &[q]);
        }
        em.finish(entry).expect("stitched").1
    }

    /// The stencils copied for a unit taking `x` that jumps to a loop `head(p)`, which
    /// computes `q = p + 1` and jumps to `y(q)`, placed next (so `y`'s parameter is `q`'s
    /// word and the code falls into it), which jumps back to `head` passing its
    /// parameter; with `late`, a block placed last jumps to `y(x)`.
    fn through_run(lib: &StencilLib, late: bool) -> usize {
        let mut services = NoServices;
        let t = [Type::I64];
        let mut em = StencilEmitter::new(lib, &mut services, false, &[], &t);
        let [entry, head, y, other] = [(); 4].map(|_| em.create_block(&t));
        em.switch_to_block(entry);
        let x = params(&mut em, entry, &t)[0];
        em.jump(head, &[x]);
        em.switch_to_block(head);
        let p = params(&mut em, head, &t)[0];
        let tys = [Type::I64, Type::I64];
        let one = SVal::Imm(1, Scalar::I64);
        let add = TOp::Binary(BinaryOp::Add);
        let q = em.op(&add, &[p, one], &tys, SrcLoc::default());
        em.jump(y, &[q.expect("a result")]);
        em.switch_to_block(y);
        let v = params(&mut em, y, &t)[0];
        em.jump(head, &[v]);
        em.switch_to_block(other);
        let o = params(&mut em, other, &t)[0];
        if late {
            em.jump(y, &[o]);
        } else {
            em.ret(Some(o));
        }
        em.finish(entry).expect("stitched").1
    }

    /// A value computed in a block and passed to a parameter by the jump that ends it is
    /// written straight into the parameter's frame word (its copy's result hole is
    /// retargeted), so the jump moves nothing; not when the parameter's old value is
    /// read after the value is made, nor when the value goes to two parameters (one of
    /// them bound to the value's own word).
    #[test]
    fn results_are_written_where_the_jump_passes_them() {
        let lib = StencilLib::new(test_isa());
        // Every unit copies the prologue and `p + 1`. Neither the prologue's jump (the
        // entry's parameter is `x`'s own word) nor the loop's jump back moves anything.
        assert_eq!(back_edge(&lib, false, false), 2);
        // Also `p * 2`, and the move of `q`.
        assert_eq!(back_edge(&lib, true, false), 4);
        // Also the move of `q` into `b`; and `ret`.
        assert_eq!(back_edge(&lib, false, true), 4);
        // Also through a block the code falls into, which passes `q` on: `p + 1` writes
        // `p`'s word. A later jump into that block then writes both `q`'s word (the
        // block's parameter) and `p`'s.
        assert_eq!(through_run(&lib, false), 3);
        assert_eq!(through_run(&lib, true), 4);
    }

    /// A bounds check's failure path is cold: the check falls through to the code that
    /// follows (its `nop` and `jmp` are dropped), and its conditional jump goes to the
    /// failure path, copied after everything else at the end of the unit.
    #[test]
    fn a_check_falls_through_and_its_failure_path_goes_last() {
        let lib = StencilLib::new(test_isa());
        let i = Scalar::I64;
        let st = lib
            .get(&Key::BoundsCheck(Form::Slice(i), Form::Slot(i)))
            .unwrap_or_else(|e| panic!("{e}"));
        let (_, split) = st.cold.expect("a bounds check splits");
        let cold_len = st.code.len() - split as usize;
        let mut services = NoServices;
        let t = [
            Type::Slice {
                elem: i,
                mutable: false,
            },
            Type::I64,
        ];
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        em.switch_to_block(entry);
        let p = params(&mut em, entry, &t);
        em.bounds_check(p[0], p[1], i, SrcLoc::default());
        em.ret(Some(p[1]));
        let code = em.finish(entry).expect("stitched").0;
        let cold_at = code.len() - cold_len;
        assert_eq!(code[code.len() - 1], 0xc3);
        let jcc = (0..cold_at - 6)
            .find(|&k| {
                let rel = i32::from_le_bytes([code[k + 2], code[k + 3], code[k + 4], code[k + 5]]);
                code[k] == 0x0f
                    && (0x80..=0x8f).contains(&code[k + 1])
                    && (k + 6) as i64 + i64::from(rel) == cold_at as i64
            })
            .unwrap_or_else(|| panic!("no jump to the cold part: {code:x?}"));
        assert_ne!(code[jcc + 6..jcc + 10], NOP4, "{code:x?}");
    }

    /// A load's result does not take the register of the index it was computed into:
    /// `j = n - 1; v = xs[j]; ret j + v` reads `j` from its register, never from its
    /// frame word.
    #[test]
    fn a_loads_index_keeps_its_register() {
        let lib = StencilLib::new(test_isa());
        let i = Scalar::I64;
        let mut services = NoServices;
        let slice = Type::Slice {
            elem: i,
            mutable: false,
        };
        let t = [slice, Type::I64];
        let mut em = StencilEmitter::new(&lib, &mut services, false, &[], &t);
        let entry = em.create_block(&t);
        em.switch_to_block(entry);
        let p = params(&mut em, entry, &t);
        let loc = SrcLoc::default();
        let one = em.constant(Const::Int(i, 1));
        let sub = TOp::Binary(BinaryOp::Sub);
        let j = em
            .op(&sub, &[p[1], one], &[Type::I64; 2], loc)
            .expect("a result");
        let v = em.op(&TOp::Load, &[p[0], j], &t, loc).expect("a result");
        let add = TOp::Binary(BinaryOp::Add);
        let w = em
            .op(&add, &[j, v], &[Type::I64; 2], loc)
            .expect("a result");
        em.ret(Some(w));
        let SVal::Slot(word, _) = j else {
            panic!("a result in a frame word, not {j:?}")
        };
        let code = em.finish(entry).expect("stitched").0;
        assert_eq!(loads_of(&code, word), 0, "{code:x?}");
    }

    /// A hole Cranelift does not keep as it is (a constant divisor becomes a
    /// multiplication by its reciprocal) is found out and the stencil refused.
    #[test]
    fn a_transformed_hole_refuses_the_stencil() {
        let lib = StencilLib::new(test_isa());
        let k = int(
            TOp::Binary(BinaryOp::Div),
            &[Form::Slot(Scalar::U64), Form::Imm(Scalar::U64, false)],
        );
        // Either the code's length or its bytes differ outside the holes.
        let e = lib.get(&k).expect_err("refused");
        assert!(
            e.0.contains("depends on a hole") || e.0.contains("differ in shape"),
            "{e}"
        );
    }
}

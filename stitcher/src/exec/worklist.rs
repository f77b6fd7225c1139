//! The work-list executor: the simple reference machinery that runs a stitch program in
//! CFG form.
//!
//! It specializes one **unit** at a time: from a start block and the static values of its
//! key, it produces specialized copies of blocks through an [`Emitter`], memoized on
//! (block, static values of the block's key). For each copy it runs the setup operations
//! on the static values, instantiates the template operations with their holes filled,
//! and then:
//! - follows a static branch to its one successor;
//! - for a dynamic branch, stitches every successor;
//! - at an edge into a block with a promotion, dispatches inline on the values already known
//!   for that site (their continuations stitched into this unit), then, for other values,
//!   leaves the unit ([`PromotionMode::Units`]: the runtime dispatches on the value and
//!   stitches the continuation as a new unit on a miss) or takes a miss exit
//!   ([`PromotionMode::Inline`]).
//!
//! Loops whose induction variables are static unroll, because each iteration reaches the
//! loop header with different static values; an interpreter's dispatch loop unrolls
//! multi-way over its program. A [`Budget`] bounds the copies and operations of one unit:
//! exceeding it is an error, never a hang or runaway memory.
//!
//! Faults that setup code meets (a static division by zero, a static load out of bounds,
//! a failing pure host) are not errors of the specialization: the code reaching them must
//! raise them when it runs, so the specializer emits the faulting operation as a dynamic
//! one on its constant operands (which faults when executed, with the right kind,
//! location and details) and ends the block.

use std::collections::HashMap;

use smallvec::SmallVec;

use cranelift_codegen::entity::EntityRef;
use dyc_templates::fold::index_in;
use dyc_templates::ops::{BinaryOp, CmpOp, Const};
use dyc_templates::semantics::{self, Fault};
use dyc_templates::template::{Emitter, TOp};
use dyc_templates::types::{Scalar, SrcLoc, Type};

use super::scratch::Scratch;
use super::{Context, Executor, PromotionMode, Unit};
use crate::ge::{
    Block, Budget, BudgetKind, CalleeDecl, Edge, Fast, Home, Layout, Op, Operand, Param, Plan,
    PureHosts, Reg, SVal, SetupOp, Site, SliceData, SpecError, Step, StitchProgram, Term,
};

/// The work-list executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct WorkList;

impl Executor for WorkList {
    fn run<E: Emitter>(
        &self,
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Unit<E::Block>, SpecError> {
        let mut s = Spec::new(cx, start, emitter, None)?;
        let entry = s.entry_copy(start, key)?;
        while let Some(k) = s.sc.work.pop() {
            let (b, key, res) = s.sc.memo.copy(k);
            let key = Key::from_slice(key);
            s.current = b;
            s.stitch(b, Some(&key), res)?;
        }
        Ok(s.unit(entry))
    }
}

/// The static values of a copy's key, inline up to a few.
pub(super) type Key = SmallVec<[SVal; 4]>;

/// Values of the operands of an operation, kept inline.
type Vals<V> = SmallVec<[V; 4]>;

/// What an edge gives its target besides its dynamic inputs: its static key (the static
/// parameters, then the static live-ins: `params` values, then the rest).
///
/// (The functions that follow an edge write its target's arguments into a buffer their
/// caller passes, [`Spec::buffer`], and return only the target block: a block and its
/// arguments returned together in a `Result` were written to memory in pieces and read
/// back in overlapping words, a store-forwarding stall on every edge.)
#[derive(Default)]
struct Inputs {
    key: Key,
    params: usize,
}

impl Inputs {
    /// The static parameters and the static live-ins apart (for promotions).
    fn split(&self) -> (Key, Key) {
        let (p, l) = self.key.split_at(self.params);
        (Key::from_slice(p), Key::from_slice(l))
    }
}

pub(super) struct Spec<'a, E: Emitter> {
    pub(super) prog: &'a StitchProgram,
    /// The plan, when the planned stitcher runs: copies of non-root blocks live in
    /// `slots` for one run of a tree, and only roots go through `memo` and `work`.
    pub(super) plan: Option<&'a Plan>,
    slices: &'a [Option<SliceData>],
    hosts: &'a dyn PureHosts,
    em: &'a mut E,
    mode: &'a PromotionMode<'a>,
    budget: Budget,
    /// The memo, work list, slots, register files and buffers ([`Scratch`]).
    pub(super) sc: Scratch<E::Value, E::Block>,
    /// The edge the last stitched block's static branch took (its index in
    /// [`Term::edges`] order), `None` if it did not end in one or did not reach it.
    pub(super) taken: Option<usize>,
    /// Lookups of `memo` (has-been-stitched lookups under the planned stitcher) and
    /// blocks stitched only if needed (NTBS tests).
    pub(super) lookups: usize,
    pub(super) tests: usize,
    sites: Vec<Site>,
    site_index: HashMap<(Block, Vec<(u8, u64)>), u32>,
    blocks: usize,
    ops: usize,
    /// Per register, whether it holds one value throughout the unit
    /// ([`StitchProgram::is_fixed`]: one of the program's constants, set once in `new`,
    /// or a unit invariant, set by the unit's first copy), so that a copy starting from
    /// a key leaves it set.
    fixed: &'a [bool],
    /// Whether the program has local arrays in memory ([`StitchProgram::home`]).
    homes: bool,
    /// The unit's first copy (the only one whose parameters and key hold the unit
    /// invariants), and its whole key.
    entry: Option<E::Block>,
    entry_key: Key,
    /// Dispatch blocks for promotion edges of dynamic branches, filled after the current
    /// block: (block, promotion block, static parameters, static live-ins).
    stubs: Vec<Stub<E::Block>>,
    /// Planned stitcher: the step after the one stitching the current block, and the block
    /// whose copy an edge of the current block fused into it (see [`Spec::fuses`]), to be
    /// stitched next with its inputs already bound.
    pub(super) next_step: u32,
    pub(super) fused: Option<Block>,
    /// The emitter's block the current copy is being stitched into.
    cur: Option<E::Block>,
    /// The template block being stitched and the first source position of the last block
    /// stitched that has one (for budget errors).
    pub(super) current: Block,
    last_loc: SrcLoc,
}

type Stub<B> = (B, Block, Key, Key);

impl<E: Emitter> Drop for Spec<'_, E> {
    /// Leaves the working state to the next specialization on this thread.
    fn drop(&mut self) {
        std::mem::replace(&mut self.sc, Scratch::empty()).give_back();
    }
}

/// A copy of a block in one run of a tree (planned stitcher).
pub(super) struct Slot<B> {
    pub(super) block: B,
    pub(super) stitched: bool,
}

fn internal<T>(m: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError::Internal(m.into()))
}

impl<'a, E: Emitter> Spec<'a, E> {
    /// A specialization of the unit that starts at `start`.
    pub(super) fn new(
        cx: &'a Context,
        start: Block,
        em: &'a mut E,
        plan: Option<&'a Plan>,
    ) -> Result<Spec<'a, E>, SpecError> {
        let prog = cx.prog;
        if prog.blocks.get(start).is_none() {
            return internal(format!("start block {start} does not exist"));
        }
        let mut sc = Scratch::take(
            prog.header.num_regs as usize,
            prog.blocks.len(),
            plan.is_some(),
        );
        for &(r, c) in prog.constants() {
            if let Some(v) = sc.env_s.get_mut(r.index()) {
                *v = Some(SVal::Scalar(c));
            }
        }
        Ok(Spec {
            prog,
            plan,
            slices: cx.slices,
            hosts: cx.hosts,
            em,
            mode: &cx.mode,
            budget: cx.budget,
            sc,
            taken: None,
            lookups: 0,
            tests: 0,
            sites: Vec::new(),
            site_index: HashMap::new(),
            blocks: 0,
            ops: 0,
            fixed: prog.is_fixed(),
            homes: !prog.all_homes().is_empty(),
            entry: None,
            entry_key: Key::new(),
            stubs: Vec::new(),
            next_step: 0,
            fused: None,
            cur: None,
            current: start,
            last_loc: SrcLoc::default(),
        })
    }

    /// What the unit produced.
    pub(super) fn unit(mut self, entry: E::Block) -> Unit<E::Block> {
        Unit {
            entry,
            sites: std::mem::take(&mut self.sites),
            blocks: self.blocks,
            ops: self.ops,
            lookups: self.lookups,
            tests: self.tests,
        }
    }

    /// An empty buffer for values.
    fn buffer(&mut self) -> Vec<E::Value> {
        self.sc.buffers.pop().unwrap_or_default()
    }

    /// Gives back a buffer [`Spec::buffer`] gave.
    fn give_back(&mut self, mut buf: Vec<E::Value>) {
        buf.clear();
        self.sc.buffers.push(buf);
    }

    /// Counts one more block copy against the budget.
    fn count_block(&mut self) -> Result<(), SpecError> {
        self.blocks += 1;
        if self.blocks > self.budget.max_blocks {
            return Err(self.exceeded(BudgetKind::Blocks, self.budget.max_blocks));
        }
        Ok(())
    }

    /// The unit's first copy: of `b` for static values `key` (all of `b`'s key,
    /// [`crate::ge::Layout::key_regs`]).
    pub(super) fn entry_copy(&mut self, b: Block, key: &[SVal]) -> Result<E::Block, SpecError> {
        if self.entry.is_some() {
            return internal("a second first copy of the unit");
        }
        self.entry_key = Key::from_slice(key);
        let key = self.narrow_key(b, key);
        self.copy_of(b, &key)
    }

    /// The specialized copy of `b` for static values `key` (its memo key, without the
    /// unit invariants: [`crate::ge::Layout::copy_key_regs`]), created (and queued) if
    /// new. Under a plan, only roots are looked up (see [`Spec::tree_edge`]).
    pub(super) fn copy_of(&mut self, b: Block, key: &[SVal]) -> Result<E::Block, SpecError> {
        if self.plan.is_some_and(|plan| !plan.is_root(b)) {
            return internal(format!("a lookup of {b}, which is not a root of the plan"));
        }
        self.lookups += 1;
        let at = match self.sc.memo.get(b, key) {
            Ok(res) => return Ok(res),
            Err(at) => at,
        };
        self.count_block()?;
        let res = self.create_copy(b);
        let k = self.sc.memo.insert(at, b, key, res);
        self.sc.work.push(k);
        Ok(res)
    }

    /// The copy of `b` for static values `key` this unit has made, if any (a lookup that
    /// creates nothing).
    fn made(&mut self, b: Block, key: &[SVal]) -> Option<E::Block> {
        self.lookups += 1;
        self.sc.memo.get(b, key).ok()
    }

    /// The copy of `b` this unit has made for `inputs` and `args` (all of `b`'s key and
    /// inputs), if any, with `args` made its arguments ([`Spec::narrow_args`]).
    fn made_for(
        &mut self,
        b: Block,
        inputs: &Inputs,
        args: &mut Vec<E::Value>,
    ) -> Result<Option<E::Block>, SpecError> {
        let key = self.narrow_key(b, &inputs.key);
        let Some(copy) = self.made(b, &key) else {
            return Ok(None);
        };
        self.narrow_args(b, copy, args)?;
        Ok(Some(copy))
    }

    /// A new emitter block with all the inputs of `b` but the local arrays in memory
    /// ([`crate::ge::Layout::dispatch_types`]): a dispatch block.
    fn create_block(&mut self, b: Block) -> E::Block {
        self.em.create_block(&self.prog.layout(b).dispatch_types)
    }

    /// A new emitter block for a copy of `b`: with all its inputs if it is the unit's
    /// first copy, else without the unit invariants.
    fn create_copy(&mut self, b: Block) -> E::Block {
        let lay = self.prog.layout(b);
        match self.entry {
            Some(_) => {
                let made = match self.sc.like.get(b.index()).copied().flatten() {
                    Some(l) => self.em.create_block_like(l, &lay.copy_types),
                    None => self.em.create_block(&lay.copy_types),
                };
                if let Some(l) = self.sc.like.get_mut(b.index()) {
                    *l = Some(made);
                }
                made
            }
            None => {
                let res = self.em.create_block(&lay.input_types);
                self.entry = Some(res);
                res
            }
        }
    }

    /// `key`, all of `b`'s key, without the unit invariants.
    fn narrow_key(&self, b: Block, key: &[SVal]) -> Key {
        narrow_key(self.prog, b, key)
    }

    /// `args`, `b`'s inputs in a dispatch block ([`crate::ge::Layout::dispatch_types`]),
    /// made the arguments of `b`'s copy `copy`: without the unit invariants, or, if `copy`
    /// is the unit's first, all of `b`'s inputs ([`Spec::with_homes`]).
    fn narrow_args(
        &mut self,
        b: Block,
        copy: E::Block,
        args: &mut Vec<E::Value>,
    ) -> Result<(), SpecError> {
        if self.entry == Some(copy) {
            return self.with_homes(b, args);
        }
        for &at in self.prog.layout(b).invariant_dispatch.iter().rev() {
            if at as usize >= args.len() {
                return internal(format!("{}: too few arguments", self.prog.blocks[b].name));
            }
            args.remove(at as usize);
        }
        Ok(())
    }

    /// `args`, the arguments of a copy of `b` other than the unit's first, made all of
    /// `b`'s inputs (for the unit's first copy): the unit invariants and the elements of
    /// the local arrays in memory put back, in the order of their places.
    fn widen_args(&mut self, b: Block, args: &mut Vec<E::Value>) -> Result<(), SpecError> {
        for w in widenings(self.prog.layout(b)) {
            let at = match w {
                Widening::Invariant(at, _) => at,
                Widening::Home(h) => h.at,
            } as usize;
            if at > args.len() {
                return internal(format!("{}: too few arguments", self.prog.blocks[b].name));
            }
            match w {
                Widening::Invariant(_, r) => {
                    let Some(&Some(v)) = self.sc.env_d.get(r.index()) else {
                        return internal(format!("unit invariant {r} read before it was set"));
                    };
                    args.insert(at, v);
                }
                Widening::Home(h) => {
                    let elems = self.load_home(h.reg, h.len)?;
                    args.splice(at..at, elems);
                }
            }
        }
        Ok(())
    }

    /// `args`, `b`'s inputs in a dispatch block, made all of its inputs: the elements of
    /// the local arrays in memory loaded and put in their places (where a unit is left,
    /// or its first copy entered again).
    fn with_homes(&mut self, b: Block, args: &mut Vec<E::Value>) -> Result<(), SpecError> {
        for h in &self.prog.layout(b).homes {
            if h.at as usize > args.len() {
                return internal(format!("{}: too few arguments", self.prog.blocks[b].name));
            }
            let elems = self.load_home(h.reg, h.len)?;
            args.splice(h.at as usize..h.at as usize, elems);
        }
        Ok(())
    }

    /// The `len` elements of local array `r`, which lives in memory, loaded.
    fn load_home(&mut self, r: Reg, len: u32) -> Result<Vec<E::Value>, SpecError> {
        let a = self.operand(Operand::Dyn(r))?;
        match load_elems(self.em, a, len) {
            Some(elems) => Ok(elems),
            None => internal("a load without a result"),
        }
    }

    /// The error for budget `budget` running out while stitching the current block.
    fn exceeded(&self, budget: BudgetKind, limit: usize) -> SpecError {
        let b = &self.prog.blocks[self.current];
        let loc = match self.prog.layout(self.current).first_loc {
            l if l.is_known() => l,
            _ => self.last_loc,
        };
        SpecError::BudgetExceeded {
            budget,
            limit,
            block: b.name.clone(),
            loc,
        }
    }

    fn set_s(&mut self, r: Reg, v: SVal) {
        self.sc.env_s[r.index()] = Some(v);
        if self.fixed.get(r.index()) != Some(&true) {
            self.sc.touched.push(r);
        }
    }

    fn set_d(&mut self, r: Reg, v: E::Value) {
        self.sc.env_d[r.index()] = Some(v);
    }

    /// Makes local array `r` hold `elems` (of type `elem`), in the buffer the register
    /// already has.
    fn set_a(&mut self, r: Reg, elem: Scalar, elems: impl IntoIterator<Item = E::Value>) {
        let slot = &mut self.sc.env_a[r.index()];
        slot.0 = Some(elem);
        slot.1.clear();
        slot.1.extend(elems);
    }

    /// The elements of local array `r`.
    fn array(&self, r: Reg) -> Result<&[E::Value], SpecError> {
        match self.sc.env_a.get(r.index()) {
            Some((Some(_), elems)) => Ok(elems),
            _ => internal(format!("array {r} read before it was made")),
        }
    }

    fn switch_to(&mut self, b: E::Block) {
        self.em.switch_to_block(b);
        self.cur = Some(b);
    }

    // (The accessors match on references: copying an `Option<SVal>` out whole made the
    // compiler store it in pieces and load it back whole, a store-forwarding stall on
    // every read of a static register.)
    #[inline]
    fn get_s(&self, r: Reg) -> Result<SVal, SpecError> {
        match self.sc.env_s.get(r.index()) {
            Some(Some(v)) => Ok(*v),
            _ => Self::unset(r),
        }
    }

    #[inline]
    fn get_c(&self, r: Reg) -> Result<Const, SpecError> {
        match self.sc.env_s.get(r.index()) {
            Some(Some(SVal::Scalar(c))) => Ok(*c),
            Some(Some(SVal::Slice(_))) => internal(format!("register {r} holds a slice")),
            _ => Self::unset(r),
        }
    }

    #[cold]
    fn unset<T>(r: Reg) -> Result<T, SpecError> {
        internal(format!("static register {r} read before it was set"))
    }

    fn operand(&mut self, o: Operand) -> Result<E::Value, SpecError> {
        match o {
            // (Matched on a reference, like the static accessors: a value of the stencil
            // emitter is five words, and copying the `Option` out whole made the compiler
            // store it in pieces and read it back whole, a store-forwarding stall.)
            Operand::Dyn(r) => match self.sc.env_d.get(r.index()) {
                Some(Some(v)) => Ok(*v),
                _ => internal(format!("dynamic variable {r} read before it was set")),
            },
            Operand::Static(r) => Ok(match self.get_s(r)? {
                SVal::Scalar(c) => self.em.constant(c),
                SVal::Slice(k) => {
                    let ty = self.prog.header.param_types.get(k as usize).copied();
                    match ty {
                        Some(ty) => self.em.static_slice(k, ty),
                        None => return internal(format!("static slice {k} is not a parameter")),
                    }
                }
            }),
        }
    }

    /// Specializes block `b` for its static values into the emitter's block `res`: those
    /// in `key` (which starts afresh: what earlier blocks set is cleared), or, with `None`,
    /// those the registers hold (the planned stitcher within one run of a tree, where
    /// registers are set once, so every static value a block reads is still there).
    pub(super) fn stitch(
        &mut self,
        b: Block,
        key: Option<&[SVal]>,
        res: E::Block,
    ) -> Result<(), SpecError> {
        self.taken = None;
        let prog = self.prog;
        let sb = &prog.blocks[b];
        let lay = prog.layout(b);
        // The unit's first copy receives the unit invariants; other copies read them from
        // it.
        let first = self.entry == Some(res) && self.fused.is_none();
        if let Some(key) = key {
            // Clear what earlier blocks set (not the whole register file: this runs once
            // per copy or run of a tree).
            // (A constant in a key keeps its value: its operation is skipped; a unit
            // invariant keeps the value the unit's first copy gave it: `set_s` does not
            // count either as touched.)
            for r in self.sc.touched.drain(..) {
                self.sc.env_s[r.index()] = None;
            }
            let entry_key;
            let (regs, key) = if first {
                entry_key = std::mem::take(&mut self.entry_key);
                (&lay.key_regs, &entry_key[..])
            } else {
                (&lay.copy_key_regs, key)
            };
            if regs.len() != key.len() {
                return internal(format!(
                    "{}: key of {} values for {} registers",
                    sb.name,
                    key.len(),
                    regs.len(),
                ));
            }
            for (&r, &v) in regs.iter().zip(key) {
                self.set_s(r, v);
            }
        }
        if self.em.notes_copies() {
            let context = lay
                .key_regs
                .iter()
                .map(|&r| Ok(self.get_s(r)?.key_bits()))
                .collect::<Result<Vec<_>, SpecError>>()?;
            self.em.note_copy(res, b.as_u32(), &context);
        }
        // A fused copy goes on in the emitter's current block with its inputs bound (see
        // `fuse_edge`); any other starts a block of its own and reads its parameters.
        match self.fused.take() {
            Some(f) if f == b => {}
            Some(f) => return internal(format!("{f} was fused, and {b} stitched next")),
            None => {
                self.switch_to(res);
                let mut params = std::mem::take(&mut self.sc.params);
                params.clear();
                self.em.block_params(res, &mut params);
                // (Only a unit's first copy receives or makes local arrays in memory: the
                // other copies bind their inputs without asking.)
                let bound = match first && self.homes {
                    true => self.bind_first(b, &params),
                    false => self.bind(b, first, &params, false),
                };
                self.sc.params = params;
                bound?;
            }
        }
        // The budget of operations is checked once per block, before any of them runs;
        // a block with no source position of its own has the last one met.
        if self.ops + lay.run.len() > self.budget.max_ops {
            return Err(self.exceeded(BudgetKind::Ops, self.budget.max_ops));
        }
        if lay.first_loc.is_known() {
            self.last_loc = lay.first_loc;
        }
        // (The program's constants are not among the operations a copy runs.)
        for run in &lay.run {
            self.ops += 1;
            if self.fast(run.fast) {
                continue;
            }
            let i = run.at;
            let Some(op) = sb.ops.get(i as usize) else {
                return internal(format!("{}: no operation {i}", sb.name));
            };
            match op {
                Op::Setup { dst, op, loc } => {
                    if !self.setup(*dst, op)? {
                        self.emit_fault(op, *loc)?;
                        return Ok(());
                    }
                }
                Op::Emit { dst, op, args, loc } => {
                    // (Pushed one by one: collecting into a small vector through
                    // `Result` cost about 150 instructions for an operation's operands.)
                    let mut vals = Vals::new();
                    for &a in args.iter() {
                        vals.push(self.operand(a)?);
                    }
                    let r = self.em.op(op, &vals, *loc);
                    if let (Some(d), Some(r)) = (dst, r) {
                        self.set_d(*d, r);
                    }
                }
                Op::Lift { dst, src } => {
                    let v = self.operand(*src)?;
                    self.set_d(*dst, v);
                }
                Op::ArrayNew { dst, elem, len } => {
                    // (A local array in memory: stores and loads of the slice the unit's
                    // first copy made, here and below.)
                    if prog.home(*dst).is_some() {
                        self.home_op(op)?;
                        continue;
                    }
                    let zero = self.em.constant(Const::zero(*elem));
                    self.set_a(*dst, *elem, std::iter::repeat_n(zero, *len as usize));
                }
                Op::ArrayLoad {
                    dst,
                    arr,
                    index,
                    loc,
                } => {
                    if prog.home(*arr).is_some() {
                        self.home_op(op)?;
                        continue;
                    }
                    // (A static index in bounds was taken by `Fast::Element`: what the
                    // fold layer makes of a constant index, done before any emitter sees
                    // it. Any other index goes to the emitter, which bounds-checks it.)
                    let i = self.operand(*index)?;
                    let (elem, elems) = match self.sc.env_a.get(arr.index()) {
                        Some((Some(elem), elems)) => (*elem, elems),
                        _ => return internal(format!("array {arr} read before it was made")),
                    };
                    let v = self.em.array_load(elem, elems, i, *loc);
                    self.set_d(*dst, v);
                }
                Op::ArrayStore {
                    arr,
                    index,
                    value,
                    loc,
                } => {
                    if prog.home(*arr).is_some() {
                        self.home_op(op)?;
                        continue;
                    }
                    // (A static index in bounds was taken by `Fast::SetElement`.)
                    let i = self.operand(*index)?;
                    let v = self.operand(*value)?;
                    let (elem, elems) = match self.sc.env_a.get_mut(arr.index()) {
                        Some((Some(elem), elems)) => (*elem, elems),
                        _ => return internal(format!("array {arr} read before it was made")),
                    };
                    self.em.array_store(elem, elems, i, v, *loc);
                }
            }
        }
        if first {
            self.keep_invariants(b);
        }
        match &sb.term {
            Term::Jump(e) => self.jump(e)?,
            Term::Branch {
                cond,
                then_edge,
                else_edge,
            } => match cond {
                Operand::Static(r) => {
                    let taken = match self.get_c(*r)? {
                        Const::Bool(b) => b,
                        c => return internal(format!("branch on {c:?}")),
                    };
                    let e = if taken { then_edge } else { else_edge };
                    self.taken = Some(usize::from(!taken));
                    self.jump(e)?;
                }
                Operand::Dyn(_) => {
                    let c = self.operand(*cond)?;
                    let (mut a1, mut a2) = (self.buffer(), self.buffer());
                    let t1 = self.edge_block(then_edge, true, &mut a1)?;
                    let t2 = self.edge_block(else_edge, true, &mut a2)?;
                    self.em.brif(c, (t1, &a1), (t2, &a2));
                    self.give_back(a1);
                    self.give_back(a2);
                }
            },
            Term::Switch {
                arg,
                cases,
                default,
            } => match arg {
                Operand::Static(r) => {
                    let k = match self.get_c(*r)? {
                        Const::Int(_, k) => k,
                        c => return internal(format!("switch on {c:?}")),
                    };
                    let arm = cases.iter().position(|(c, _)| *c == k);
                    let e = arm.map_or(default, |a| &cases[a].1);
                    self.taken = Some(arm.unwrap_or(cases.len()));
                    self.jump(e)?;
                }
                Operand::Dyn(_) => {
                    let a = self.operand(*arg)?;
                    let mut cs = Vec::new();
                    for (k, e) in cases {
                        let mut args = self.buffer();
                        let t = self.edge_block(e, true, &mut args)?;
                        cs.push((*k, t, args));
                    }
                    let mut dargs = self.buffer();
                    let d = self.edge_block(default, true, &mut dargs)?;
                    self.em.switch(a, &cs, (d, &dargs));
                    for (_, _, args) in cs {
                        self.give_back(args);
                    }
                    self.give_back(dargs);
                }
            },
            Term::Return(v) => {
                let v = match v {
                    Some(o) => Some(self.operand(*o)?),
                    None => None,
                };
                self.em.ret(v);
            }
            Term::Trap(loc) => self.em.trap(*loc),
        }
        for (stub, b, params, live) in std::mem::take(&mut self.stubs) {
            self.switch_to(stub);
            let mut args = Vec::new();
            self.em.block_params(stub, &mut args);
            self.promotion(b, params, live, &args)?;
        }
        Ok(())
    }

    /// Tells the emitter the values of the unit's first copy, a copy of `b`, that later
    /// copies read without their being passed (the dynamic unit invariants among its
    /// inputs and results, [`crate::ge::Layout::kept`]), before its terminator.
    fn keep_invariants(&mut self, b: Block) {
        for &r in &self.prog.layout(b).kept {
            if let Some(&Some(v)) = self.sc.env_d.get(r.index()) {
                self.em.keep(v);
            }
        }
    }

    /// Binds the dynamic inputs of a copy of `b` (the unit's first if `first`) to `params`,
    /// its block parameters; `homes`: making the local arrays in memory among them.
    #[inline(always)]
    fn bind(
        &mut self,
        b: Block,
        first: bool,
        params: &[E::Value],
        homes: bool,
    ) -> Result<(), SpecError> {
        let prog = self.prog;
        let lay = prog.layout(b);
        let inputs = if first {
            &lay.dyn_inputs
        } else {
            &lay.copy_inputs
        };
        let mut next = 0;
        for &(r, ty) in inputs {
            let n = ty.flat_len();
            let Some(vals) = params.get(next..next + n) else {
                return internal(format!("{}: too few block parameters", prog.blocks[b].name));
            };
            next += n;
            match ty {
                Type::Array { elem, len } if homes && prog.home(r).is_some() => {
                    self.make_home(r, elem, len, vals);
                }
                Type::Array { elem, .. } => self.set_a(r, elem, vals.iter().copied()),
                _ => self.set_d(r, vals[0]),
            }
        }
        Ok(())
    }

    /// [`Spec::bind`] for the unit's first copy, a copy of `b`, in a program with local
    /// arrays in memory: it makes all of them.
    #[inline(never)]
    fn bind_first(&mut self, b: Block, params: &[E::Value]) -> Result<(), SpecError> {
        self.bind(b, true, params, true)?;
        self.make_other_homes(b);
        Ok(())
    }

    /// Makes local array `r` in memory ([`StitchProgram::home`]) of `len` elements of type
    /// `elem`, the first `init`: in the unit's first copy, so that every copy reads it.
    #[inline(never)]
    fn make_home(&mut self, r: Reg, elem: Scalar, len: u32, init: &[E::Value]) {
        let a = self.em.local_array(elem, len, init);
        self.set_d(r, a);
    }

    /// Makes the unit's local arrays in memory that are not inputs of its first copy, a copy
    /// of `b` (each is set before it is read: its declaration zeroes it).
    #[inline(never)]
    fn make_other_homes(&mut self, b: Block) {
        let prog = self.prog;
        for h in prog.all_homes() {
            if !prog.layout(b).homes.iter().any(|i| i.reg == h.reg) {
                self.make_home(h.reg, h.elem, h.len, &[]);
            }
        }
    }

    /// Runs `op`, a declaration of, a load from or a store to a local array in memory.
    #[inline(never)]
    fn home_op(&mut self, op: &Op) -> Result<(), SpecError> {
        match *op {
            Op::ArrayNew { dst, elem, len } => {
                let a = self.operand(Operand::Dyn(dst))?;
                zero_home(self.em, a, elem, len);
            }
            Op::ArrayLoad {
                dst,
                arr,
                index,
                loc,
            } => {
                let a = self.operand(Operand::Dyn(arr))?;
                let i = self.operand(index)?;
                let Some(v) = self.em.op(&TOp::Load, &[a, i], loc) else {
                    return internal("a load without a result");
                };
                self.set_d(dst, v);
            }
            Op::ArrayStore {
                arr,
                index,
                value,
                loc,
            } => {
                let a = self.operand(Operand::Dyn(arr))?;
                let i = self.operand(index)?;
                let v = self.operand(value)?;
                self.em.op(&TOp::Store, &[a, i, v], loc);
            }
            _ => return internal("not an access to a local array"),
        }
        Ok(())
    }

    /// Runs a decoded operation ([`Fast`]: a setup operation, or an access to a local
    /// array at a static index) if its operands are of the kinds its fast path reads, it
    /// does not fault and the index is in bounds; `false` (having set and emitted
    /// nothing) otherwise, for the general operation to run (and report what went wrong,
    /// or go through the emitter) instead.
    #[inline]
    fn fast(&mut self, fast: Fast) -> bool {
        // (Operands are read through references: a `Const` copied out of its register
        // whole was stored in pieces and read back in overlapping words, a
        // store-forwarding stall that took a third of the executor's samples.)
        fn scalar<V, B>(sc: &Scratch<V, B>, r: Reg) -> Option<&Const> {
            match sc.env_s.get(r.index()) {
                Some(Some(SVal::Scalar(c))) => Some(c),
                _ => None,
            }
        }
        let (dst, v, fixed) = match fast {
            Fast::None => return false,
            Fast::Element { dst, arr, index } => {
                let Some(&c) = scalar(&self.sc, index) else {
                    return false;
                };
                let v = match self.sc.env_a.get(arr.index()) {
                    Some((Some(_), elems)) => index_in(c, elems.len()).map(|k| elems[k]),
                    _ => None,
                };
                let Some(v) = v else { return false };
                self.set_d(dst, v);
                return true;
            }
            Fast::SetElement { arr, index, value } => {
                let Some(&c) = scalar(&self.sc, index) else {
                    return false;
                };
                let k = match self.sc.env_a.get(arr.index()) {
                    Some((Some(_), elems)) => index_in(c, elems.len()),
                    _ => None,
                };
                // (The value last: reading a static one makes a constant.)
                let Some(k) = k else { return false };
                let Ok(v) = self.operand(value) else {
                    return false;
                };
                self.sc.env_a[arr.index()].1[k] = v;
                return true;
            }
            Fast::Load {
                dst,
                slice,
                index,
                fixed,
            } => {
                let (Some(Some(SVal::Slice(k))), Some(&Const::Int(_, i))) =
                    (self.sc.env_s.get(slice.index()), scalar(&self.sc, index))
                else {
                    return false;
                };
                let data = self.slices.get(*k as usize).and_then(Option::as_ref);
                let Some(&v) = data.and_then(|d| d.data.get(usize::try_from(i).ok()?)) else {
                    return false;
                };
                (dst, v, fixed)
            }
            Fast::Binary {
                op,
                dst,
                a,
                b,
                fixed,
            } => {
                let (Some(x), Some(y)) = (scalar(&self.sc, a), scalar(&self.sc, b)) else {
                    return false;
                };
                // (Steps of a program counter, inline.)
                let v = match (op, x, y) {
                    (BinaryOp::Add, &Const::Int(t, x), &Const::Int(u, y)) if t == u => {
                        semantics::int(t, x.wrapping_add(y))
                    }
                    _ => match semantics::binary(op, *x, *y) {
                        Ok(v) => v,
                        Err(_) => return false,
                    },
                };
                (dst, v, fixed)
            }
        };
        self.sc.env_s[dst.index()] = Some(SVal::Scalar(v));
        if !fixed {
            self.sc.touched.push(dst);
        }
        true
    }

    /// Runs one setup operation, setting register `dst` to its static value; `false` if
    /// it faults (and sets nothing).
    fn setup(&mut self, dst: Reg, op: &SetupOp) -> Result<bool, SpecError> {
        match eval_setup(op, |r| self.get_s(r), self.slices, self.hosts)? {
            Some(v) => {
                self.set_s(dst, v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Emits a setup operation that faults as a dynamic operation on its static operands,
    /// so that the fault happens (with its kind and details) when the code runs, and ends
    /// the block, which cannot go on.
    fn emit_fault(&mut self, op: &SetupOp, loc: SrcLoc) -> Result<(), SpecError> {
        let (top, regs) = fault_op(self.prog, op)?;
        let args = regs
            .iter()
            .map(|&r| self.operand(Operand::Static(r)))
            .collect::<Result<Vec<_>, _>>()?;
        self.em.op(&top, &args, loc);
        self.em.trap(loc);
        Ok(())
    }

    /// The static key of an edge's target, and its dynamic arguments appended to `args`;
    /// static arguments of dynamic parameters are emitted as constants in the current
    /// block. All of them when `all` (for a dispatch block), else without the unit
    /// invariants (for a copy of the target other than the unit's first: its memo key and
    /// parameters).
    fn target_inputs(
        &mut self,
        e: &Edge,
        all: bool,
        inputs: &mut Inputs,
        args: &mut Vec<E::Value>,
    ) -> Result<(), SpecError> {
        let tb = &self.prog.blocks[e.block];
        if tb.params.len() != e.args.len() {
            return internal(format!(
                "edge to {} with {} arguments",
                tb.name,
                e.args.len()
            ));
        }
        for (p, &a) in tb.params.iter().zip(&e.args) {
            match (p, a) {
                (Param::Static(_), Operand::Static(r)) => inputs.key.push(self.get_s(r)?),
                (Param::Static(_), Operand::Dyn(_)) => {
                    return internal(format!(
                        "dynamic argument for a static parameter of {}",
                        tb.name
                    ))
                }
                (Param::Dyn(..), a) => args.push(self.operand(a)?),
            }
        }
        inputs.params = inputs.key.len();
        let statics = match all {
            true => &tb.static_live_in,
            false => &self.prog.layout(e.block).copy_static_live_in,
        };
        for &r in statics {
            inputs.key.push(self.get_s(r)?);
        }
        self.live_args(e.block, args, all)
    }

    /// Appends the values of `b`'s dynamic live-ins (arrays element by element; never the
    /// local arrays in memory), the unit invariants only if `all`.
    fn live_args(
        &mut self,
        b: Block,
        args: &mut Vec<E::Value>,
        all: bool,
    ) -> Result<(), SpecError> {
        let prog = self.prog;
        let live = match all {
            true => &prog.layout(b).dispatch_live_in,
            false => &prog.layout(b).copy_dyn_live_in,
        };
        for &(r, ty) in live {
            if ty.is_array() {
                args.extend_from_slice(self.array(r)?);
            } else {
                args.push(self.operand(Operand::Dyn(r))?);
            }
        }
        Ok(())
    }

    /// Planned stitcher: the copy and arguments of an edge to a non-root block, which is in
    /// the current tree. Its copy in this run of the tree is its slot (created here, stitched
    /// when the tree's step reaches it); its static values are the registers this run set,
    /// so no key is built and nothing is looked up: the edge only sets the block's static
    /// parameters (a non-root block with static parameters has this one in-edge).
    fn tree_edge(&mut self, e: &Edge, args: &mut Vec<E::Value>) -> Result<E::Block, SpecError> {
        let i = e.block.index();
        let fresh = matches!(self.sc.slots.get(i), Some(None));
        let mut dyns = Vals::new();
        self.tree_params(e, fresh, &mut dyns)?;
        args.extend(dyns.iter().map(|&(_, v)| v));
        self.live_args(e.block, args, false)?;
        if let Some(Some(slot)) = self.sc.slots.get(i) {
            return Ok(slot.block);
        }
        let block = self.create_copy(e.block);
        self.fill_slot(e.block, block)?;
        Ok(block)
    }

    /// Planned stitcher: the parameters edge `e` to a block of the current tree passes.
    /// Static ones are set in the registers (when `set`: the edge is the first to ask for
    /// the copy, and a non-root block with static parameters has one in-edge); dynamic
    /// ones are appended to `dyns` with the values of the edge's arguments.
    fn tree_params(
        &mut self,
        e: &Edge,
        set: bool,
        dyns: &mut Vals<(Reg, E::Value)>,
    ) -> Result<(), SpecError> {
        let prog = self.prog;
        let tb = &prog.blocks[e.block];
        if tb.params.len() != e.args.len() {
            return internal(format!(
                "edge to {} with {} arguments",
                tb.name,
                e.args.len()
            ));
        }
        for (p, &a) in tb.params.iter().zip(&e.args) {
            match (p, a) {
                (Param::Static(r), Operand::Static(src)) => {
                    if set {
                        let v = self.get_s(src)?;
                        self.set_s(*r, v);
                    }
                }
                (Param::Static(_), Operand::Dyn(_)) => {
                    return internal(format!(
                        "dynamic argument for a static parameter of {}",
                        tb.name
                    ))
                }
                (Param::Dyn(r, _), a) => dyns.push((*r, self.operand(a)?)),
            }
        }
        Ok(())
    }

    /// Planned stitcher: whether the copy that edge `e` (which ends the current block: a
    /// jump, or the edge its static branch took) asks for is stitched in the emitter's
    /// current block, straight after the current copy, with no jump and no block of its
    /// own (DyC's static branches leave no code, and what they select follows). So it is
    /// when `e` leads to a block that is not a root, that no other edge of the program
    /// enters (so nothing else in this run of the tree asks for its copy), whose copy no
    /// edge asked for yet, and that the plan stitches next: the next step, past the arm of
    /// a fork this branch takes and past gotos, stitches it.
    fn fuses(&self, e: &Edge) -> bool {
        let Some(plan) = self.plan else {
            return false;
        };
        let tb = &self.prog.blocks[e.block];
        if plan.is_root(e.block)
            || self.prog.in_edges(e.block) != 1
            || !matches!(self.sc.slots.get(e.block.index()), Some(None))
            || self.cur.is_none()
            || tb
                .params
                .iter()
                .any(|p| matches!(p, Param::Dyn(_, t) if t.is_array()))
        {
            return false;
        }
        let mut pc = self.next_step;
        // (Bounded: a plan's gotos and forks lead forward, and a few are ever chained.)
        for _ in 0..8 {
            match plan.steps.get(pc as usize) {
                Some(Step::Stitch { block, .. }) => return *block == e.block,
                Some(Step::Fork { arms, .. }) => match (self.taken, arms) {
                    (Some(k), arms) if k < arms.len() => pc = arms[k],
                    _ => return false,
                },
                Some(Step::Goto(t)) => pc = *t,
                Some(Step::End) | None => return false,
            }
        }
        false
    }

    /// Planned stitcher: takes edge `e` into the copy [`Spec::fuses`] allowed. It binds the
    /// target's parameters (static ones as [`Spec::tree_edge`] does, dynamic ones to the
    /// values of the edge's arguments, all read before any is bound); its live-ins are
    /// the same registers, which already hold their values. So the copy's inputs need no
    /// block parameters, no arguments and no copying.
    fn fuse_edge(&mut self, e: &Edge) -> Result<(), SpecError> {
        let mut bind = Vals::new();
        self.tree_params(e, true, &mut bind)?;
        for (r, v) in bind {
            self.set_d(r, v);
        }
        let Some(cur) = self.cur else {
            return internal("a fused copy with no block open");
        };
        self.fill_slot(e.block, cur)?;
        self.fused = Some(e.block);
        Ok(())
    }

    /// Planned stitcher: a new copy of `b` in this run of the tree, in the emitter's block
    /// `block`, to be stitched when the tree's step reaches it.
    fn fill_slot(&mut self, b: Block, block: E::Block) -> Result<(), SpecError> {
        self.count_block()?;
        self.sc.slots[b.index()] = Some(Slot {
            block,
            stitched: false,
        });
        self.sc.filled.push(b);
        Ok(())
    }

    /// The copy an edge leads to and its arguments, for a branch from the current block
    /// (`dynamic`: a dynamic branch). An edge into a promotion block, and a dynamic
    /// branch's edge into a lazy block whose copy this unit has not made (when units are
    /// stitched lazily: [`PromotionMode::Units`]), get a dispatch block of their own: a
    /// lazy block is entered like a promotion of no values.
    fn edge_block(
        &mut self,
        e: &Edge,
        dynamic: bool,
        args: &mut Vec<E::Value>,
    ) -> Result<E::Block, SpecError> {
        if self.plan.is_some_and(|plan| !plan.is_root(e.block)) {
            return self.tree_edge(e, args);
        }
        let tb = &self.prog.blocks[e.block];
        let mut inputs = Inputs::default();
        if tb.promote.is_empty() {
            let lazy =
                tb.lazy.enters_lazily(dynamic) && matches!(self.mode, PromotionMode::Units { .. });
            if !lazy {
                self.target_inputs(e, false, &mut inputs, args)?;
                let copy = self.copy_of(e.block, &inputs.key)?;
                if self.entry == Some(copy) {
                    self.widen_args(e.block, args)?;
                }
                return Ok(copy);
            }
            self.target_inputs(e, true, &mut inputs, args)?;
            if let Some(copy) = self.made_for(e.block, &inputs, args)? {
                return Ok(copy);
            }
            let stub = self.create_block(e.block);
            self.stubs.push((stub, e.block, inputs.key, Key::new()));
            return Ok(stub);
        }
        // A dispatch block with the promotion block's inputs, filled once the current
        // block is finished (emitters fill one block at a time).
        self.target_inputs(e, true, &mut inputs, args)?;
        let stub = self.create_block(e.block);
        let (params, live) = inputs.split();
        self.stubs.push((stub, e.block, params, live));
        Ok(stub)
    }

    /// Ends the current block along `e`: a plain jump to its target, or the dispatch
    /// into a promotion (or the copy an edge fused into the current block: no jump).
    fn jump(&mut self, e: &Edge) -> Result<(), SpecError> {
        let mut args = self.buffer();
        if let Some(t) = self.edge(e, &mut args)? {
            self.em.jump(t, &args);
        }
        self.give_back(args);
        Ok(())
    }

    /// Ends the current block along `e`: returns the target of a plain jump (its
    /// arguments appended to `args`), or `None` when a promotion dispatch was emitted
    /// instead, or the copy fused into the current block.
    fn edge(&mut self, e: &Edge, args: &mut Vec<E::Value>) -> Result<Option<E::Block>, SpecError> {
        let tb = &self.prog.blocks[e.block];
        let lazy = tb.lazy.enters_lazily(false)
            && tb.promote.is_empty()
            && matches!(self.mode, PromotionMode::Units { .. });
        let mut inputs = Inputs::default();
        if lazy && self.plan.is_none_or(|plan| plan.is_root(e.block)) {
            // A lazy block entered by a jump: its copy in this unit, or a promotion of no
            // values emitted here.
            self.target_inputs(e, true, &mut inputs, args)?;
            if let Some(copy) = self.made_for(e.block, &inputs, args)? {
                return Ok(Some(copy));
            }
            self.promotion(e.block, inputs.key, Key::new(), args)?;
            return Ok(None);
        }
        if tb.promote.is_empty() {
            if self.fuses(e) {
                self.fuse_edge(e)?;
                return Ok(None);
            }
            return Ok(Some(self.edge_block(e, false, args)?));
        }
        self.target_inputs(e, true, &mut inputs, args)?;
        let (params, live) = inputs.split();
        self.promotion(e.block, params, live, args)?;
        Ok(None)
    }

    /// Emits the dispatch into promotion block `b`, in the current block; `inputs` are
    /// the values of `b`'s dynamic inputs.
    fn promotion(
        &mut self,
        b: Block,
        params_s: Key,
        live_s: Key,
        inputs: &[E::Value],
    ) -> Result<(), SpecError> {
        let prog = self.prog;
        let promoted = match promoted_values(prog, b, inputs) {
            Ok(p) => p,
            Err(src) => {
                return internal(format!(
                    "promoted variable {src} is not an input of {}",
                    prog.blocks[b].name
                ))
            }
        };
        let site = Site {
            block: b,
            params: params_s.into_vec(),
            live: live_s.into_vec(),
        };
        let ident = site.ident();
        let id = match self.site_index.get(&ident) {
            Some(&id) => id,
            None => {
                let id = self.sites.len() as u32;
                self.sites.push(site.clone());
                self.site_index.insert(ident, id);
                id
            }
        };
        let (known, global) = match &self.mode {
            PromotionMode::Units { resolve, known } => {
                let global = resolve(&site);
                (known(global), Some(global))
            }
            PromotionMode::Inline(known) => (known(&site), None),
        };
        // A lazy block (no promoted values) has one continuation, reached through the
        // site's slot once stitched.
        if !promoted.is_empty() {
            self.inline_dispatch(b, &site, &promoted, inputs, known)?;
        }
        match global {
            Some(global) => {
                // The unit is left: its local arrays in memory go as their elements.
                if prog.layout(b).homes.is_empty() {
                    self.em.promote(global, &promoted, inputs);
                } else {
                    let mut all = inputs.to_vec();
                    self.with_homes(b, &mut all)?;
                    self.em.promote(global, &promoted, &all);
                }
            }
            None => self.em.promote_miss(id, &promoted),
        }
        Ok(())
    }

    /// Dispatches the `promoted` values of promotion block `b` over the tuples in `known`,
    /// each to the copy of `b` with those values static (stitched into this unit), and
    /// goes on in a fresh block for the other values.
    fn inline_dispatch(
        &mut self,
        b: Block,
        site: &Site,
        promoted: &[E::Value],
        inputs: &[E::Value],
        known: Vec<Vec<Const>>,
    ) -> Result<(), SpecError> {
        // `b`'s copy for promoted values `values` (created if new), and its arguments.
        let copy = |s: &mut Self, values: &[Const]| {
            let key = s.narrow_key(b, &site.key(values));
            let target = s.copy_of(b, &key)?;
            let mut args = inputs.to_vec();
            s.narrow_args(b, target, &mut args)?;
            Ok((target, args))
        };
        dispatch_known(self, |s| &mut *s.em, Self::switch_to, promoted, known, copy)
    }
}

/// The values of promotion block `b`'s promoted variables among `inputs`, the values of
/// its dynamic inputs (an array's elements one by one, a local array in memory none):
/// `Err(r)` names a promoted variable that is not among them. Both executors' promotions
/// read them so.
pub(super) fn promoted_values<V: Copy>(
    prog: &StitchProgram,
    b: Block,
    inputs: &[V],
) -> Result<Vec<V>, Reg> {
    let tb = &prog.blocks[b];
    // The register of each input value.
    let order: Vec<Option<Reg>> = tb
        .dyn_inputs()
        .filter(|&(r, _)| prog.home(r).is_none())
        .flat_map(|(r, t)| std::iter::repeat_n((!t.is_array()).then_some(r), t.flat_len()))
        .collect();
    tb.promote
        .iter()
        .map(
            |&(src, _)| match order.iter().position(|&r| r == Some(src)) {
                Some(k) if k < inputs.len() => Ok(inputs[k]),
                _ => Err(src),
            },
        )
        .collect()
}

/// Emits the stores of zero into the `len` elements (of type `elem`) of local array `a`
/// in memory: its declaration.
pub(super) fn zero_home<E: Emitter>(em: &mut E, a: E::Value, elem: Scalar, len: u32) {
    let zero = em.constant(Const::zero(elem));
    for k in 0..len {
        let i = em.constant(Const::Int(Scalar::I64, u64::from(k)));
        em.op(&TOp::Store, &[a, i, zero], SrcLoc::default());
    }
}

/// The `len` elements of local array `a` in memory, loaded in order; `None` if a load
/// made no value.
pub(super) fn load_elems<E: Emitter>(em: &mut E, a: E::Value, len: u32) -> Option<Vec<E::Value>> {
    (0..len)
        .map(|k| {
            let i = em.constant(Const::Int(Scalar::I64, u64::from(k)));
            em.op(&TOp::Load, &[a, i], SrcLoc::default())
        })
        .collect()
}

/// What an edge into a unit's first copy passes besides the arguments of the block's
/// other copies ([`Spec::widen_args`]): a unit invariant (its place among the inputs, and
/// its register), or a local array in memory (as its elements).
#[derive(Clone, Copy)]
pub(super) enum Widening {
    Invariant(u32, Reg),
    Home(Home),
}

/// The [`Widening`]s of block layout `lay`, in the order of their places, which is the
/// order in which they are put into the arguments.
pub(super) fn widenings(lay: &Layout) -> impl Iterator<Item = Widening> + '_ {
    let (inv, homes) = (&lay.invariant_inputs, &lay.homes);
    let (mut i, mut h) = (0, 0);
    std::iter::from_fn(move || {
        let invariant = match (inv.get(i), homes.get(h)) {
            (None, None) => return None,
            (Some(a), Some(b)) => a.0 < b.at,
            (a, _) => a.is_some(),
        };
        Some(if invariant {
            i += 1;
            Widening::Invariant(inv[i - 1].0, inv[i - 1].1)
        } else {
            h += 1;
            Widening::Home(homes[h - 1])
        })
    })
}

/// The dynamic operation that makes a faulting setup operation's fault happen when the
/// code runs, and the static registers it reads (as operands, in order): what an
/// executor emits, then a trap, for a static fault ([`Spec::emit_fault`]).
pub(super) fn fault_op(prog: &StitchProgram, op: &SetupOp) -> Result<(TOp, Vec<Reg>), SpecError> {
    Ok(match op {
        SetupOp::Binary(o, a, b) => (TOp::Binary(*o), vec![*a, *b]),
        SetupOp::StaticLoad(s, i) => (TOp::Load, vec![*s, *i]),
        SetupOp::CallPure { callee, args, .. } => {
            let ret = match prog.header.callees.get(*callee) {
                Some(CalleeDecl::Host { host }) => prog.header.hosts.get(*host).and_then(|h| h.ret),
                _ => return internal("a static call of a non-host"),
            };
            let callee = callee.as_u32();
            (TOp::Call { callee, ret }, args.clone())
        }
        _ => return internal("a setup operation that cannot fault faulted"),
    })
}

/// Emits the dispatch of a promotion's `promoted` values over the tuples in `known`: a
/// `switch` when one integer is promoted, else a chain of tests, each known tuple going
/// to the block and arguments `target` gives for it (on executor `x`, whose emitter `em`
/// reaches); then goes on in a fresh block (entered by `switch_to`) for the other values.
/// The executors and the compiled plan's shims share it, so they emit the same calls.
pub(super) fn dispatch_known<X, E: Emitter>(
    x: &mut X,
    em: fn(&mut X) -> &mut E,
    switch_to: fn(&mut X, E::Block),
    promoted: &[E::Value],
    known: Vec<Vec<Const>>,
    mut target: impl FnMut(&mut X, &[Const]) -> Result<(E::Block, Vec<E::Value>), SpecError>,
) -> Result<(), SpecError> {
    if known.is_empty() {
        return Ok(());
    }
    if known.iter().any(|values| values.len() != promoted.len()) {
        return internal("known promoted values of the wrong arity");
    }
    let word = |c: &Const| match *c {
        Const::Int(_, x) => Some(x),
        Const::Bool(_) | Const::F64(_) => None,
    };
    if let ([v], true) = (promoted, known.iter().all(|vs| word(&vs[0]).is_some())) {
        let mut cases = Vec::with_capacity(known.len());
        for values in &known {
            let (t, args) = target(x, values)?;
            cases.push((word(&values[0]).expect("checked"), t, args));
        }
        let miss = em(x).create_block(&[]);
        em(x).switch(*v, &cases, (miss, &[]));
        switch_to(x, miss);
        return Ok(());
    }
    // A chain of tests, one per known tuple of promoted values.
    let no_result = || SpecError::Internal("a test without a result".into());
    for values in known {
        let (t, args) = target(x, &values)?;
        let e = em(x);
        let mut cond = None;
        for (&v, &k) in promoted.iter().zip(&values) {
            let kv = e.constant(k);
            let eq = e
                .op(&TOp::Cmp(CmpOp::Eq), &[v, kv], SrcLoc::default())
                .ok_or_else(no_result)?;
            cond = Some(match cond {
                None => eq,
                Some(c) => e
                    .op(&TOp::Binary(BinaryOp::And), &[c, eq], SrcLoc::default())
                    .ok_or_else(no_result)?,
            });
        }
        let Some(cond) = cond else {
            return internal("a dispatch of no promoted values");
        };
        let next = e.create_block(&[]);
        e.brif(cond, (t, &args), (next, &[]));
        switch_to(x, next);
    }
    Ok(())
}

/// `key`, all of block `b`'s key in `prog`, without the unit invariants (the memo key of a
/// copy of `b`).
pub(super) fn narrow_key(prog: &StitchProgram, b: Block, key: &[SVal]) -> Key {
    let drop = &prog.layout(b).invariant_keys;
    if drop.is_empty() {
        return Key::from_slice(key);
    }
    (0u32..)
        .zip(key)
        .filter(|(k, _)| drop.binary_search(k).is_err())
        .map(|(_, &v)| v)
        .collect()
}

/// The static value of setup operation `op`, reading registers through `get` (static
/// slices' contents in `slices`): `None` if it faults (a division by zero, a load out of
/// bounds, a pure host that fails).
pub(super) fn eval_setup(
    op: &SetupOp,
    get: impl Fn(Reg) -> Result<SVal, SpecError>,
    slices: &[Option<SliceData>],
    hosts: &dyn PureHosts,
) -> Result<Option<SVal>, SpecError> {
    let get_c = |r: Reg| match get(r)? {
        SVal::Scalar(c) => Ok(c),
        SVal::Slice(_) => internal(format!("register {r} holds a slice")),
    };
    let slice = |r: Reg| match get(r)? {
        SVal::Slice(k) => match slices.get(k as usize).and_then(Option::as_ref) {
            Some(d) => Ok(d),
            None => internal(format!("no contents for static slice {k}")),
        },
        SVal::Scalar(_) => internal(format!("register {r} is not a slice")),
    };
    let fault = |f: Fault| match f {
        Fault::DivisionByZero => Ok(None),
        Fault::IllTyped => internal("ill-typed setup operation"),
    };
    let c = match op {
        SetupOp::Const(k) => *k,
        SetupOp::Copy(r) => return get(*r).map(Some),
        SetupOp::Unary(o, a) => match semantics::unary(*o, get_c(*a)?) {
            Ok(v) => v,
            Err(f) => return fault(f),
        },
        SetupOp::Binary(o, a, b) => match semantics::binary(*o, get_c(*a)?, get_c(*b)?) {
            Ok(v) => v,
            Err(f) => return fault(f),
        },
        SetupOp::Cmp(o, a, b) => match semantics::cmp(*o, get_c(*a)?, get_c(*b)?) {
            Ok(v) => Const::Bool(v),
            Err(f) => return fault(f),
        },
        SetupOp::Select(cond, a, b) => {
            let pick = matches!(get_c(*cond)?, Const::Bool(true));
            return get(if pick { *a } else { *b }).map(Some);
        }
        SetupOp::Cast(t, a) => semantics::cast(*t, get_c(*a)?),
        SetupOp::Len(s) => Const::Int(Scalar::I64, slice(*s)?.data.len() as u64),
        SetupOp::StaticLoad(s, i) => {
            let idx = match semantics::int_value(get_c(*i)?) {
                Some(x) => x,
                None => return internal("non-integer index"),
            };
            let data = slice(*s)?;
            match usize::try_from(idx).ok().and_then(|k| data.data.get(k)) {
                Some(&v) => v,
                None => return Ok(None),
            }
        }
        SetupOp::CallPure { host, args, .. } => {
            let vals = args
                .iter()
                .map(|&a| get_c(a))
                .collect::<Result<Vec<_>, _>>()?;
            match hosts.call(*host, &vals) {
                Ok(Some(v)) => v,
                Ok(None) => return internal("a static call without a result"),
                Err(_) => return Ok(None),
            }
        }
    };
    Ok(Some(SVal::Scalar(c)))
}

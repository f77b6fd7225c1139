//! The planned stitcher: runs a stitch program by following its plan (the linearized form
//! of [`crate::ge::linear`]), with no work list inside a tree and no memo lookup except at
//! roots.
//!
//! A unit begins with a has-been-stitched lookup of its start block (a root) for its key;
//! the miss queues it. Queued roots run least topological number first ([`Plan::rank`]),
//! so a root is stitched after every block of other trees that leads to it through
//! forward edges; copies of one root (which reach each other only through back edges) run
//! most recent first, so the copy that the jump ending the last stitched block made is
//! stitched, and placed, right after it: an unrolled interpreter's handlers follow each
//! other in the order the interpreted program runs them, and its loops fall through
//! instead of jumping from handler to handler. Each runs one tree from its root's first
//! step:
//! - `stitch b`: if an edge stitched in this run asked for `b` (its slot holds a copy), the
//!   copy is stitched for the static values stored with it, exactly as the work-list
//!   executor would (setup code, templates, terminator); edges to non-root blocks fill
//!   their slots, edges to roots are has-been-stitched lookups on (root, static values)
//!   whose misses create the copy and queue it. A block whose slot is empty is
//!   not needed in this run (a static fault ended the block that led to it, or the plan
//!   inserted it without proof) and is skipped;
//!   When the edge that ends a copy (a jump, or the edge its static branch took) leads to
//!   a block that is not a root, that no other edge of the program enters, and that the
//!   plan stitches next, the copy it asks for is **fused**: stitched into the emitter's
//!   block that is still open, its dynamic inputs bound to the values the edge passes,
//!   with no jump and no block of its own. A static branch leaves no code, and what it
//!   selects follows it, as in DyC's stitched code. (The work-list executor cannot know
//!   what it stitches next, and makes a block per copy.)
//! - `fork b`: goes on at the arm of the edge `b`'s static branch took;
//! - `goto`, `end`: shared suffixes and the end of the run, after which every slot must
//!   have been stitched (a slot left over is an internal error: the plan missed a block).
//!
//! So each block copy is made once per unit (roots through the lookup, other blocks
//! because the plan gives each at most one copy per run of a tree, and a block reached by
//! several trees or runs is a root), the same copies the work-list executor makes, in
//! topological order within each run.
//!
//! With an emitter that can start again ([`Emitter::restartable`]: the recording tape),
//! the plan runs compiled to machine code ([`super::compiled`]), which makes the same
//! calls; where the compiled code gives up, the emitter restarts and this interpreter
//! makes the unit ([`Planned::interpreted`]).

use cranelift_codegen::entity::EntityRef;
use dyc_templates::template::Emitter;

use super::memo::{KeyPart, Memo};
use super::worklist::Spec;
use super::{Context, Executor, Unit, WorkList};
use crate::ge::{Block, Plan, SVal, SpecError, Step};

/// Roots waiting to run, least rank first and, among copies of one root, the last made
/// first: a stack of copies per rank (copies are numbered in the order they are made and
/// queued in that order, so a stack's top is its last made) and a bit set of the ranks
/// with copies waiting. (A binary heap did the same at about 170 instructions per copy,
/// a tenth of a binary search's specialization, where most copies are roots.) Ranks are
/// below the plan's number of blocks (the checker makes sure); a block without one goes
/// after them all.
#[derive(Default)]
pub(super) struct Queue {
    stacks: Vec<Vec<u32>>,
    waiting: Vec<u64>,
    /// No rank below word `first` of `waiting` has copies waiting.
    first: usize,
    /// The stack of the copies of blocks of no known rank, past the plan's ranks.
    last: usize,
}

impl Queue {
    /// Empties the queue (also of what a specialization that failed left) for a plan of
    /// `ranks` blocks (a block of no known rank goes after them all).
    pub(super) fn reset(&mut self, ranks: usize) {
        for (w, bits) in self.waiting.iter_mut().enumerate() {
            while *bits != 0 {
                let r = w * 64 + bits.trailing_zeros() as usize;
                self.stacks[r].clear();
                *bits &= *bits - 1;
            }
        }
        if self.stacks.len() <= ranks {
            self.stacks.resize_with(ranks + 1, Vec::new);
        }
        self.waiting.resize((ranks + 1).div_ceil(64), 0);
        self.first = 0;
        self.last = ranks;
    }

    /// Room the queue holds, in elements (for [`super::scratch::KEEP_LIMIT`]).
    pub(super) fn room(&self) -> usize {
        self.stacks.capacity()
            + self.stacks.iter().map(Vec::capacity).sum::<usize>()
            + self.waiting.capacity()
    }

    /// The rank copy `k` waits at.
    fn rank_of<B: Copy, K: KeyPart>(&self, plan: &Plan, memo: &Memo<B, K>, k: u32) -> usize {
        let b = memo.copy(k).0;
        plan.rank
            .get(b.index())
            .map_or(self.last, |&r| (r as usize).min(self.last))
    }

    fn push(&mut self, r: usize, k: u32) {
        self.stacks[r].push(k);
        self.waiting[r / 64] |= 1 << (r % 64);
        self.first = self.first.min(r / 64);
    }

    /// Moves the copies `made` of roots into the queue.
    fn add<B: Copy, K: KeyPart>(&mut self, plan: &Plan, memo: &Memo<B, K>, made: &mut Vec<u32>) {
        for &k in made.iter() {
            let r = self.rank_of(plan, memo, k);
            self.push(r, k);
        }
        made.clear();
    }

    /// Moves the copies `made` of roots into the queue, but for the one it would pop
    /// next if that is the last made, which is returned instead (the common case: the
    /// jump that ended the last stitched block made the copy that runs next).
    pub(super) fn add_but_next<B: Copy, K: KeyPart>(
        &mut self,
        plan: &Plan,
        memo: &Memo<B, K>,
        made: &mut Vec<u32>,
    ) -> Option<u32> {
        let k = made.pop()?;
        self.add(plan, memo, made);
        let r = self.rank_of(plan, memo, k);
        // (A copy of the least rank waiting goes first: it was made last.)
        if self.least().is_none_or(|least| r <= least) {
            return Some(k);
        }
        self.push(r, k);
        None
    }

    /// The least rank with copies waiting.
    fn least(&mut self) -> Option<usize> {
        let w = self.first + self.waiting[self.first..].iter().position(|&w| w != 0)?;
        self.first = w;
        Some(w * 64 + self.waiting[w].trailing_zeros() as usize)
    }

    pub(super) fn pop(&mut self) -> Option<u32> {
        let r = self.least()?;
        let w = r / 64;
        let stack = &mut self.stacks[r];
        let k = stack.pop();
        if stack.is_empty() {
            self.waiting[w] &= !(1 << (r % 64));
        }
        k
    }
}

/// The planned stitcher. A program without a plan is run by the work-list executor.
#[derive(Clone, Copy, Debug, Default)]
pub struct Planned;

impl Executor for Planned {
    fn run<E: Emitter>(
        &self,
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Unit<E::Block>, SpecError> {
        // The compiled plan, where the emitter can start again if it gives up.
        if emitter.restartable() {
            match Planned::compiled(cx, start, key, emitter) {
                Some(Ok(unit)) => return Ok(unit),
                Some(Err(Some(e))) => return Err(e),
                Some(Err(None)) => emitter.restart(),
                None => {}
            }
        }
        Planned::interpreted(cx, start, key, emitter)
    }
}

impl Planned {
    /// The unit made by the compiled plan: `None` if there is none for this unit (the
    /// emitter has seen no call), `Some(Err(Some(e)))` if a budget ran out (`e` is the
    /// interpreted stitcher's error), `Some(Err(None))` if it gave up (the emitter holds
    /// part of a unit: it must start again, or be replaced, before the interpreted
    /// stitcher runs the unit).
    pub(super) fn compiled<E: Emitter>(
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Option<Result<Unit<E::Block>, Option<SpecError>>> {
        let plan = cx.prog.plan.as_ref()?;
        if !plan.is_root(start) || !matches!(cx.mode, super::PromotionMode::Units { .. }) {
            return None;
        }
        let ge = cx.prog.compiled_ge()?;
        let made = super::compiled::run(ge, cx, plan, start, key, emitter);
        use super::compiled::Failed;
        cx.prog
            .note_compiled_run(!matches!(made, Err(Failed::Abort | Failed::Panic(_))));
        match made {
            Ok(unit) => Some(Ok(unit)),
            Err(Failed::Budget(e)) => Some(Err(Some(e))),
            Err(Failed::Panic(p)) => std::panic::resume_unwind(p),
            Err(Failed::Abort) => Some(Err(None)),
        }
    }

    /// The planned stitcher interpreting its plan.
    pub fn interpreted<E: Emitter>(
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Unit<E::Block>, SpecError> {
        let Some(plan) = cx.prog.plan.as_ref() else {
            return WorkList.run(cx, start, key, emitter);
        };
        if !plan.is_root(start) {
            return Err(SpecError::Internal(format!(
                "the unit starts at {start}, which is not a root of the plan"
            )));
        }
        let mut s = Spec::new(cx, start, emitter, Some(plan))?;
        let entry = s.entry_copy(start, key)?;
        s.sc.queue.reset(plan.rank.len());
        let mut next = s.sc.queue.add_but_next(plan, &s.sc.memo, &mut s.sc.work);
        // (The root's key is copied into a buffer kept with the scratch: as a small
        // vector moved in and out of an `Option`, with the queue's drain of the copies
        // made, it cost about 45 more instructions a root.)
        let mut root_key = std::mem::take(&mut s.sc.root_key);
        while let Some(k) = next.take().or_else(|| s.sc.queue.pop()) {
            let (root, key, res) = s.sc.memo.copy(k);
            root_key.clear();
            root_key.extend_from_slice(key);
            let Some(mut pc) = plan.root(root) else {
                return Err(SpecError::Internal(format!("{root} is not a root")));
            };
            s.sc.slots[root.index()] = Some(super::worklist::Slot {
                block: res,
                stitched: false,
            });
            s.sc.filled.push(root);
            // The root starts the run from its key; the other blocks of the tree read the
            // registers the run sets.
            let mut key = Some(&root_key[..]);
            loop {
                match plan.steps.get(pc as usize) {
                    Some(Step::Stitch { block, test }) => {
                        s.tests += usize::from(*test);
                        s.taken = None;
                        let copy = match s.sc.slots.get_mut(block.index()) {
                            Some(Some(slot)) if !slot.stitched => {
                                slot.stitched = true;
                                Some(slot.block)
                            }
                            _ => None,
                        };
                        if let Some(res) = copy {
                            s.current = *block;
                            let start = match (*block == root, key.is_some()) {
                                (true, _) => key.take(),
                                (false, false) => None,
                                (false, true) => {
                                    return Err(SpecError::Internal(format!(
                                        "the tree of {root} stitches {block} before its root"
                                    )))
                                }
                            };
                            s.next_step = pc + 1;
                            s.stitch(*block, start, res)?;
                        }
                        pc += 1;
                    }
                    Some(Step::Fork { arms, .. }) => {
                        pc = match arms.get(s.taken.unwrap_or(0)) {
                            Some(&a) => a,
                            None => return Err(SpecError::Internal(format!("fork at {pc}"))),
                        };
                    }
                    Some(Step::Goto(t)) => pc = *t,
                    Some(Step::End) => {
                        if let Some(b) = s.fused.take() {
                            return Err(SpecError::Internal(format!(
                                "the tree of {root} fused {b} and did not stitch it"
                            )));
                        }
                        break;
                    }
                    None => return Err(SpecError::Internal(format!("no step {pc}"))),
                }
            }
            for b in s.sc.filled.drain(..) {
                match s.sc.slots[b.index()].take() {
                    Some(slot) if slot.stitched => {}
                    _ => {
                        return Err(SpecError::Internal(format!(
                            "the plan of the tree of {root} left {b} unstitched"
                        )))
                    }
                }
            }
            next = s.sc.queue.add_but_next(plan, &s.sc.memo, &mut s.sc.work);
        }
        s.sc.root_key = root_key;
        Ok(s.unit(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dyc_templates::ops::Const;
    use dyc_templates::types::Scalar;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The queue pops copies in the order a binary heap on (rank, last made first) does,
    /// however adds and pops interleave (and hands back at once the copy it would pop
    /// next when that is the last added), over plans of up to 200 blocks (several words of
    /// ranks), with blocks of no known rank last; and a reset empties what a failed
    /// specialization left.
    #[test]
    fn the_queue_pops_least_rank_first_and_the_last_made_first() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut queue = Queue::default();
        for _ in 0..200 {
            let blocks = 1 + next(200) as usize;
            // Ranks below the number of ranked blocks (topological numbers, some equal),
            // and a last block without one.
            let ranked = blocks - usize::from(blocks > 2);
            let plan = Plan {
                rank: (0..ranked).map(|_| next(ranked as u64) as u32).collect(),
                ..Plan::default()
            };
            let mut memo = Memo::new();
            let mut heap = BinaryHeap::new();
            let mut made = Vec::new();
            queue.reset(plan.rank.len());
            for step in 0..300u64 {
                if next(3) == 0 {
                    assert_eq!(
                        queue.pop(),
                        heap.pop().map(|Reverse((_, k))| u32::MAX - k),
                        "pop {step}"
                    );
                    continue;
                }
                for _ in 0..next(4) {
                    let b = Block::from_u32(next(blocks as u64) as u32);
                    let key = [SVal::Scalar(Const::Int(Scalar::I64, step))];
                    // (A copy is queued once, when it is made.)
                    let Err(at) = memo.get(b, &key) else {
                        continue;
                    };
                    let k = memo.insert(at, b, &key, 0u32);
                    let r = plan.rank.get(b.index()).copied().unwrap_or(u32::MAX);
                    heap.push(Reverse((r, u32::MAX - k)));
                    made.push(k);
                }
                // Half the time, the copy the queue would pop next comes back at once,
                // if it is the last made.
                if next(2) == 0 {
                    queue.add(&plan, &memo, &mut made);
                } else if let Some(k) = queue.add_but_next(&plan, &memo, &mut made) {
                    let popped = heap.pop().map(|Reverse((_, k))| u32::MAX - k);
                    assert_eq!(Some(k), popped, "step {step}");
                }
                assert!(made.is_empty());
            }
        }
        // Left with copies waiting, then reset: empty.
        queue.reset(3);
        assert_eq!(queue.pop(), None);
    }
}

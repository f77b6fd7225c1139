//! The buffers of one specialization, kept per thread for the next.
//!
//! An executor's working state (register files, the memo of copies, the slots of a tree's
//! run, the work list, buffers for edge arguments) is a dozen vectors and a hash table
//! sized by the program. Allocating them afresh cost a small unit's specialization about
//! a twelfth of the executor's instructions, so a finished specialization leaves them,
//! emptied but with their capacity, in a per-thread pool for the next one with the same
//! emitter types. The pool holds [`POOL`] sets per thread at most, and a set with room
//! for more than [`KEEP_LIMIT`] elements is dropped rather than kept, so a thread holds a
//! few small sets however large a unit it once specialized.

use std::cell::RefCell;

use dyc_templates::pool::{self, Pool};
use dyc_templates::types::Scalar;

use super::memo::Memo;
use super::planned::Queue;
use super::worklist::Slot;
use crate::ge::{Block, Reg, SVal};

/// The most sets a thread keeps (one per emitter type in use, in practice).
const POOL: usize = 4;

/// A set whose vectors have room for more elements than this in all is not kept (a few
/// hundred KiB at most: a thread keeps at most [`POOL`] sets).
pub(super) const KEEP_LIMIT: usize = 1 << 13;

thread_local! {
    static SETS: Pool = const { RefCell::new(Vec::new()) };
}

/// The working state of a specialization with emitter values `V` and blocks `B`.
pub(super) struct Scratch<V, B> {
    /// Copies by (block, static values), numbered in the order they were made.
    pub(super) memo: Memo<B>,
    /// Copies made and not yet stitched, by number in `memo`.
    pub(super) work: Vec<u32>,
    /// Planned stitcher: per block, its copy in the current run of a tree, with its static
    /// key and whether it was stitched; `filled` lists the blocks with a slot.
    pub(super) slots: Vec<Option<Slot<B>>>,
    pub(super) filled: Vec<Block>,
    /// Planned stitcher: the roots' copies waiting to run, and the key of the one running
    /// (copied out of `memo`, which the run adds to).
    pub(super) queue: Queue,
    pub(super) root_key: Vec<SVal>,
    /// Static registers and dynamic variables.
    pub(super) env_s: Vec<Option<SVal>>,
    pub(super) env_d: Vec<Option<V>>,
    /// Local arrays: element type and the values of the elements (`None` once cleared;
    /// the buffers are kept for the next array set in the register).
    pub(super) env_a: Vec<(Option<Scalar>, Vec<V>)>,
    /// The parameters of the block being stitched (a buffer reused by every copy).
    pub(super) params: Vec<V>,
    /// Empty buffers for the arguments of edges (so that edges allocate nothing).
    pub(super) buffers: Vec<Vec<V>>,
    /// Static registers set since the last start from a key. (Dynamic registers and
    /// arrays need no clearing: a checked program defines them in every block that reads
    /// them, from its parameters or its own operations, so a stale one is never read.)
    pub(super) touched: Vec<Reg>,
    /// Per template block, the last copy made with the parameters of a copy other than the
    /// unit's first ([`crate::ge::Layout::copy_types`]), for
    /// [`dyc_templates::template::Emitter::create_block_like`].
    pub(super) like: Vec<Option<B>>,
}

impl<V, B: Copy> Scratch<V, B> {
    /// A set that holds no memory (what a finished specialization leaves in its place).
    pub(super) fn empty() -> Scratch<V, B> {
        Scratch {
            memo: Memo::empty(),
            work: Vec::new(),
            slots: Vec::new(),
            filled: Vec::new(),
            queue: Queue::default(),
            root_key: Vec::new(),
            env_s: Vec::new(),
            env_d: Vec::new(),
            env_a: Vec::new(),
            params: Vec::new(),
            buffers: Vec::new(),
            touched: Vec::new(),
            like: Vec::new(),
        }
    }
}

impl<V: Copy + 'static, B: Copy + 'static> Scratch<V, B> {
    /// A set from this thread's pool, or a new one, ready for a program of `regs` registers
    /// and `blocks` blocks (`slots`: with a slot per block, for the planned stitcher).
    pub(super) fn take(regs: usize, blocks: usize, slots: bool) -> Scratch<V, B> {
        // (A thread being torn down, or a specialization inside another, just gets a new
        // set.)
        let mut s = match pool::take::<Scratch<V, B>>(&SETS) {
            Some(s) => *s,
            None => Scratch {
                memo: Memo::new(),
                ..Scratch::empty()
            },
        };
        // Emptied here rather than when given back, so that a set left in any state (by a
        // specialization that ended in an error or a panic) is still right.
        s.memo.clear();
        s.work.clear();
        s.filled.clear();
        s.params.clear();
        s.touched.clear();
        for b in &mut s.buffers {
            b.clear();
        }
        s.like.clear();
        s.like.resize(blocks, None);
        s.slots.clear();
        if slots {
            s.slots.resize_with(blocks, || None);
        }
        s.env_s.clear();
        s.env_s.resize(regs, None);
        s.env_d.clear();
        s.env_d.resize(regs, None);
        s.env_a.truncate(regs);
        for a in &mut s.env_a {
            a.0 = None;
            a.1.clear();
        }
        s.env_a.resize_with(regs, || (None, Vec::new()));
        s
    }

    /// Gives the set back to this thread's pool, unless it grew too large or the pool is
    /// full.
    pub(super) fn give_back(self) {
        let size = self.memo.room()
            + self.work.capacity()
            + self.slots.capacity()
            + self.filled.capacity()
            + self.queue.room()
            + self.root_key.capacity()
            + self.env_s.capacity()
            + self.env_d.capacity()
            + self.env_a.capacity()
            + self.env_a.iter().map(|a| a.1.capacity()).sum::<usize>()
            + self.params.capacity()
            + self.buffers.iter().map(Vec::capacity).sum::<usize>()
            + self.touched.capacity()
            + self.like.capacity();
        if size > KEEP_LIMIT {
            return;
        }
        pool::give(&SETS, Box::new(self), POOL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::entity::EntityRef;
    use dyc_templates::ops::Const;

    /// A set given back dirty comes back empty and sized for the next program; one that
    /// grew too large is not kept.
    #[test]
    fn a_set_comes_back_empty_and_a_large_one_is_dropped() {
        let mut s = Scratch::<u32, u32>::take(8, 4, true);
        let at = s.memo.get(Block::new(1), &[]).expect_err("empty");
        s.memo.insert(at, Block::new(1), &[], 7);
        s.work.push(0);
        s.env_s[3] = Some(SVal::Scalar(Const::Bool(true)));
        s.env_d[2] = Some(5);
        s.env_a[1] = (Some(Scalar::I64), vec![1, 2, 3]);
        s.touched.push(Reg::new(3));
        s.buffers.push(vec![9]);
        s.give_back();
        let s = Scratch::<u32, u32>::take(16, 2, false);
        assert!(s.memo.get(Block::new(1), &[]).is_err(), "the memo is empty");
        assert!(s.work.is_empty() && s.touched.is_empty() && s.slots.is_empty());
        assert_eq!(s.env_s.len(), 16);
        assert!(s.env_s.iter().all(Option::is_none));
        assert!(s.env_d.iter().all(Option::is_none));
        assert!(s.env_a.iter().all(|a| a.0.is_none() && a.1.is_empty()));
        assert!(s.buffers.iter().all(Vec::is_empty));
        assert_eq!(s.buffers.len(), 1, "the set was reused");
        // Too large to keep: the next set is a new one.
        let mut s = s;
        s.env_a[0].1.reserve(KEEP_LIMIT + 1);
        s.give_back();
        let s = Scratch::<u32, u32>::take(16, 2, false);
        assert!(s.buffers.is_empty(), "a new set");
    }
}

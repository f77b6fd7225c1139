//! The linearized form of a stitch program: a **plan** that the DyC static transform lays
//! over the CFG form (see the [module documentation](super) for the overview), so that the
//! planned stitcher follows it with no work list.
//!
//! A plan is a forest of **trees**, one per **root**: a block where stitching may begin or
//! must look up what was already stitched (the region entry, promotion blocks, special
//! merges, loop heads that need it, and blocks that several trees or several runs of one
//! tree reach with the same key). A tree is a sequence of [`Step`]s in topological order
//! of the region's acyclic graph: `Stitch` copies one block for the current static values
//! (its setup code, templates and terminator come from the CFG form), `Fork` follows the
//! static branch that ended the last stitched block, so each outcome of the static
//! branches runs exactly the steps of the blocks it reaches; identical suffixes are shared
//! (`Goto`), which is tail merging.
//!
//! At stitch time, within one run of a tree every non-root block has at most one copy, so
//! an edge to a non-root block names a **slot** (an array indexed by block, cleared after
//! the run) instead of a memo entry; the slot being filled is the block's NTBS flag (an
//! edge that needs it was stitched). An edge to a root is a **has-been-stitched lookup**
//! on (root, static values): a hit links to the copy, a miss creates it and queues the
//! root (multi-way unrolling, specialization at special merges); queued roots run in
//! topological order ([`Plan::rank`]), copies of one root the last made first.

use super::entities::Block;

/// Why a block is a root of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RootKind {
    /// The region entry.
    Entry,
    /// A promotion block: the start of a promotion unit and the target of inline
    /// dispatch on known promoted values.
    Promotion,
    /// A special merge: static parameters with two or more in-edges (their values differ
    /// by path), e.g. the head of a multi-way unrolled loop.
    Special,
    /// A loop head whose loop is entered other than through it, or contains another
    /// root, so that the back edge cannot rely on the copy made earlier in the same run.
    LoopHead,
    /// A block reached from the trees of two roots (its copies must be shared).
    Shared,
    /// A block reached by a tree that runs several times per unit, whose key does not
    /// include the tree root's key (two runs could reach the same copy).
    Key,
    /// A block entered lazily by dynamic branches ([`super::BlockData::lazy`]): the start
    /// of the units its stubs stitch.
    Lazy,
}

impl RootKind {
    pub fn name(self) -> &'static str {
        match self {
            RootKind::Entry => "entry",
            RootKind::Promotion => "promotion",
            RootKind::Lazy => "lazy",
            RootKind::Special => "special",
            RootKind::LoopHead => "loop head",
            RootKind::Shared => "shared",
            RootKind::Key => "key",
        }
    }
}

/// One step of a plan, at a position (`pc`) of [`Plan::steps`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Stitches the copy of `block` for the current static values, if an edge stitched in
    /// this run of the tree asked for it (its slot is filled); then goes on at the next
    /// step. `test` marks the blocks the plan inserted without proving them needed (loop
    /// heads inserted by the reachability test), counted as NTBS tests.
    Stitch { block: Block, test: bool },
    /// Follows the static branch that ended the copy of `block`: goes on at `arms[k]` for
    /// the branch's `k`-th edge (in [`super::Term::edges`] order). If the copy was not
    /// stitched or did not reach its branch (a static fault), goes on at `arms[0]`.
    Fork { block: Block, arms: Vec<u32> },
    /// Goes on at a shared suffix.
    Goto(u32),
    /// Ends the run of the tree.
    End,
}

/// The plan of a stitch program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// Per block (by index): `(first step of its tree, why)` if the block is a root.
    pub roots: Vec<Option<(u32, RootKind)>>,
    /// Per block (by index): its topological number. Pending roots run least first, so
    /// that a root is stitched after the blocks of other trees that lead to it.
    pub rank: Vec<u32>,
    /// The number of steps the trees would have without tail merging (saturating).
    pub unshared_steps: u64,
}

impl Plan {
    /// The first step of `b`'s tree, if `b` is a root.
    #[inline]
    pub fn root(&self, b: Block) -> Option<u32> {
        self.roots
            .get(b.as_u32() as usize)
            .copied()
            .flatten()
            .map(|(pc, _)| pc)
    }

    /// Whether `b` is a root.
    #[inline]
    pub fn is_root(&self, b: Block) -> bool {
        matches!(self.roots.get(b.as_u32() as usize), Some(Some(_)))
    }

    /// The roots with their kinds, in block order.
    pub fn root_blocks(&self) -> impl Iterator<Item = (Block, RootKind)> + '_ {
        self.roots
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.map(|(_, k)| (Block::from_u32(i as u32), k)))
    }
}

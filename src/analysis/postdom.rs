//! Post-dominators.
//!
//! Block `a` **post-dominates** `b` when every path from `b` to the function's exit goes
//! through `a`. Computed as the dominators (Lengauer–Tarjan, see [`super::dominators`]) of
//! the reversed CFG augmented with a virtual exit node whose predecessors are the blocks
//! without successors (`return`, `trap`).
//!
//! Limits: a block that cannot reach any exit (it sits in, or only leads into, an infinite
//! loop) is not in the post-dominator tree: it post-dominates nothing, nothing
//! post-dominates it, and [`PostDominatorTree::reaches_exit`] is false for it. A block whose
//! immediate post-dominator is the virtual exit has `ipdom == None`.

use super::cfg::{BlockNumbering, ControlFlowGraph, Graph};
use super::dominators::{idoms_lengauer_tarjan, DomTree};
use crate::ir::Block;

#[derive(Clone, Debug)]
pub struct PostDominatorTree {
    tree: DomTree,
    nums: BlockNumbering,
    exit: usize,
}

/// `g` reversed, with a virtual exit node (the number returned, one past `g`'s nodes) that
/// has an edge to every node without successors in `g`: post-dominators are the
/// dominators of this graph from the exit.
pub fn reversed_with_exit(g: &Graph) -> (Graph, usize) {
    let exit = g.len();
    let mut edges: Vec<(usize, usize)> = g.edges().map(|(a, b)| (b, a)).collect();
    edges.extend(
        (0..exit)
            .filter(|&n| g.succs[n].is_empty())
            .map(|n| (exit, n)),
    );
    (Graph::from_unique_edges(exit + 1, &edges), exit)
}

impl PostDominatorTree {
    pub fn compute(cfg: &ControlFlowGraph) -> PostDominatorTree {
        let (g, exit) = reversed_with_exit(cfg.graph());
        let idoms = idoms_lengauer_tarjan(&g, exit);
        PostDominatorTree {
            tree: DomTree::from_idoms(idoms, exit),
            nums: cfg.numbering().clone(),
            exit,
        }
    }

    fn node(&self, b: Block) -> Option<usize> {
        self.nums.node(b)
    }

    /// The immediate post-dominator of `b`; `None` if it is the virtual exit or `b` cannot
    /// reach an exit.
    pub fn ipdom(&self, b: Block) -> Option<Block> {
        let n = self.node(b)?;
        match self.tree.idom(n) {
            Some(p) if p != self.exit => Some(self.nums.block(p)),
            _ => None,
        }
    }

    /// Whether `a` post-dominates `b` (reflexive).
    pub fn post_dominates(&self, a: Block, b: Block) -> bool {
        match (self.node(a), self.node(b)) {
            (Some(x), Some(y)) => self.tree.dominates(x, y),
            _ => false,
        }
    }

    /// Whether some path leads from `b` to a `return` or `trap`.
    pub fn reaches_exit(&self, b: Block) -> bool {
        self.node(b).is_some_and(|n| self.tree.contains(n))
    }
}

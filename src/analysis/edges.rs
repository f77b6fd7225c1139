//! DFS edge classification: tree, forward, cross and back edges.
//!
//! The definitions are those of the DyC design notes on eager stitching (`docs/design.md`;
//! "Identifying predecessors in the CFG" and the notes on DFS terminology), from one depth-first search from the entry that visits
//! successors in branch order:
//! - a **tree** edge reaches a block for the first time (it is the block's DFS parent);
//! - a **forward** edge goes to a proper descendant in the DFS tree that was already
//!   reached (an n-th edge into a merge from above);
//! - a **back** edge goes to an ancestor (the block itself included: a self loop);
//! - a **cross** edge goes to a block that is neither an ancestor nor a descendant.
//!
//! Ancestry is decided in O(1) from preorder and postorder numbers. Back edges are the only
//! ones that matter for the CFG transform: removing them leaves an acyclic graph (for any
//! CFG, reducible or not), which [`super::topo`] numbers. Edges out of unreachable blocks
//! are not classified. Cost: O(blocks + edges).

use super::cfg::{ControlFlowGraph, Graph};
use super::order::DfsOrder;
use crate::ir::Block;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    Tree,
    Forward,
    Back,
    Cross,
}

impl EdgeKind {
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Tree => "tree",
            EdgeKind::Forward => "forward",
            EdgeKind::Back => "back",
            EdgeKind::Cross => "cross",
        }
    }
}

/// Classifies the edge `a -> b` of `g` with respect to `dfs`; `None` if `a` is unreachable.
pub fn classify(dfs: &DfsOrder, a: usize, b: usize) -> Option<EdgeKind> {
    if !dfs.is_reachable(a) {
        return None;
    }
    Some(if dfs.parent[b] == Some(a) {
        EdgeKind::Tree
    } else if dfs.is_ancestor(b, a) {
        EdgeKind::Back
    } else if dfs.is_ancestor(a, b) {
        EdgeKind::Forward
    } else {
        EdgeKind::Cross
    })
}

/// Every reachable edge of `g` with its kind, in node order then successor order.
pub fn classify_all(g: &Graph, root: usize) -> Vec<(usize, usize, EdgeKind)> {
    let dfs = DfsOrder::compute(g, root);
    g.edges()
        .filter_map(|(a, b)| classify(&dfs, a, b).map(|k| (a, b, k)))
        .collect()
}

/// The classified edges of a function's CFG.
#[derive(Clone, Debug)]
pub struct EdgeClasses {
    pub edges: Vec<(Block, Block, EdgeKind)>,
}

impl EdgeClasses {
    pub fn compute(cfg: &ControlFlowGraph) -> EdgeClasses {
        let edges = classify_all(cfg.graph(), 0)
            .into_iter()
            .map(|(a, b, k)| (cfg.block(a), cfg.block(b), k))
            .collect();
        EdgeClasses { edges }
    }

    pub fn kind(&self, a: Block, b: Block) -> Option<EdgeKind> {
        self.edges
            .iter()
            .find(|&&(x, y, _)| x == a && y == b)
            .map(|&(_, _, k)| k)
    }

    pub fn back_edges(&self) -> impl Iterator<Item = (Block, Block)> + '_ {
        self.edges
            .iter()
            .filter(|e| e.2 == EdgeKind::Back)
            .map(|&(a, b, _)| (a, b))
    }
}

//! CFG analyses, one file each; every module doc gives the algorithm, its
//! source, its limits and its cost.
//!
//! All of them work on the dense [`cfg::Graph`] of a [`cfg::ControlFlowGraph`] (block `n`
//! in layout order is node `n`, the entry is node 0) and wrap their results for blocks.

pub mod bdd;
pub mod cfg;
pub mod dominators;
pub mod edges;
pub mod liveness;
pub mod loops;
pub mod order;
pub mod postdom;
pub mod reach;
pub mod topo;

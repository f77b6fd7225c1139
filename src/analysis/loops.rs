//! The loop nesting forest, with detection of irreducible loops.
//!
//! Algorithm: Steensgaard's SCC-based construction of a loop nesting forest (as surveyed
//! by Ramalingam, "On loops, dominators, and dominance frontiers", TOPLAS 2002):
//! 1. Find the strongly connected components of the reachable part of the CFG (Tarjan's
//!    algorithm, iterative). Every SCC with a cycle (more than one block, or a self loop) is
//!    a loop.
//! 2. The **entries** of a loop are its blocks with a predecessor outside it. One entry:
//!    the loop is reducible and the entry is its header, which dominates the loop. Several
//!    entries: the loop is **irreducible** (it has side entrances); its header is the entry
//!    first in reverse post-order, and all entries are recorded.
//! 3. Remove the loop's back edges (edges from inside the loop to its entries) and repeat
//!    inside the loop to find the nested loops.
//!
//! On reducible CFGs this is the classic forest of natural loops merged by header. Unlike
//! Havlak's algorithm it needs no union-find and stays simple; its cost is O(d · (V + E))
//! for nesting depth `d`. Unreachable blocks belong to no loop.

use super::cfg::{ControlFlowGraph, Graph};
use super::order::DfsOrder;
use crate::ir::Block;

/// Index of a loop in [`LoopForest::loops`].
pub type LoopId = usize;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loop {
    /// The entry first in reverse post-order.
    pub header: Block,
    /// All entries, in reverse post-order; more than one means irreducible.
    pub entries: Vec<Block>,
    /// Every block of the loop, nested loops included, in reverse post-order.
    pub blocks: Vec<Block>,
    pub parent: Option<LoopId>,
    pub children: Vec<LoopId>,
    /// 1 for outermost loops.
    pub depth: u32,
}

impl Loop {
    pub fn is_irreducible(&self) -> bool {
        self.entries.len() > 1
    }
}

/// Loops on dense nodes, as computed by [`find_loops`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseLoop {
    pub entries: Vec<usize>,
    pub nodes: Vec<usize>,
    pub parent: Option<usize>,
}

/// Finds the loops of `g` reachable from `root`, outer loops before the loops they
/// contain. Entries and nodes are sorted in reverse post-order.
pub fn find_loops(g: &Graph, root: usize) -> Vec<DenseLoop> {
    let dfs = DfsOrder::compute(g, root);
    let n = g.len();
    let mut rpo_num = vec![usize::MAX; n];
    for (i, x) in dfs.rpo().into_iter().enumerate() {
        rpo_num[x] = i;
    }
    let mut loops = Vec::new();
    // Work list of (node set, parent loop). `cut` marks the entries of the loops found so
    // far: edges into them are back edges of their loops.
    let mut cut = vec![false; n];
    let reachable: Vec<usize> = dfs.rpo();
    let mut work: Vec<(Vec<usize>, Option<usize>)> = vec![(reachable, None)];
    let mut member = vec![usize::MAX; n];
    let mut gen = 0usize;
    while let Some((nodes, parent)) = work.pop() {
        gen += 1;
        for &x in &nodes {
            member[x] = gen;
        }
        // Edges leaving the node set, and edges into entries of enclosing loops (their back
        // edges), are ignored.
        let comps = sccs(g, &nodes, |_, b| member[b] == gen && !cut[b]);
        for scc in comps {
            let cyclic = scc.len() > 1 || g.succs[scc[0]].iter().any(|&s| s == scc[0] && !cut[s]);
            if !cyclic {
                continue;
            }
            let mut in_scc = vec![false; n];
            for &x in &scc {
                in_scc[x] = true;
            }
            let mut entries: Vec<usize> = scc
                .iter()
                .copied()
                .filter(|&x| {
                    x == root
                        || g.preds[x]
                            .iter()
                            .any(|&p| !in_scc[p] && dfs.is_reachable(p))
                })
                .collect();
            entries.sort_by_key(|&x| rpo_num[x]);
            let mut nodes_sorted = scc.clone();
            nodes_sorted.sort_by_key(|&x| rpo_num[x]);
            let id = loops.len();
            loops.push(DenseLoop {
                entries: entries.clone(),
                nodes: nodes_sorted.clone(),
                parent,
            });
            for &e in &entries {
                cut[e] = true;
            }
            work.push((nodes_sorted, Some(id)));
        }
    }
    loops
}

/// Strongly connected components of the subgraph induced by `nodes` whose edges satisfy
/// `keep(a, b)`; Tarjan's algorithm with an explicit stack.
fn sccs(g: &Graph, nodes: &[usize], keep: impl Fn(usize, usize) -> bool) -> Vec<Vec<usize>> {
    let n = g.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut counter = 0;
    for &start in nodes {
        if index[start] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, usize)> = vec![(start, 0)];
        index[start] = counter;
        low[start] = counter;
        counter += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (v, ref mut next)) = call.last_mut() {
            let succs = &g.succs[v];
            if *next < succs.len() {
                let w = succs[*next];
                *next += 1;
                if !keep(v, w) {
                    continue;
                }
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    loop {
                        let w = stack.pop().expect("scc stack");
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}

/// The loop nesting forest of a function.
#[derive(Clone, Debug)]
pub struct LoopForest {
    pub loops: Vec<Loop>,
    innermost: cranelift_entity::SecondaryMap<Block, Option<LoopId>>,
}

impl LoopForest {
    pub fn compute(cfg: &ControlFlowGraph) -> LoopForest {
        let dense = find_loops(cfg.graph(), 0);
        let mut loops: Vec<Loop> = dense
            .iter()
            .map(|l| Loop {
                header: cfg.block(l.entries[0]),
                entries: l.entries.iter().map(|&x| cfg.block(x)).collect(),
                blocks: l.nodes.iter().map(|&x| cfg.block(x)).collect(),
                parent: l.parent,
                children: Vec::new(),
                depth: 1,
            })
            .collect();
        let mut innermost = cranelift_entity::SecondaryMap::new();
        // Parents come before children, so one pass fixes depths and innermost loops.
        for id in 0..loops.len() {
            if let Some(p) = loops[id].parent {
                loops[id].depth = loops[p].depth + 1;
                loops[p].children.push(id);
            }
            for &b in &loops[id].blocks {
                innermost[b] = Some(id);
            }
        }
        LoopForest { loops, innermost }
    }

    /// The innermost loop containing `b`.
    pub fn innermost(&self, b: Block) -> Option<LoopId> {
        self.innermost.get(b).copied().flatten()
    }

    /// Loop depth of `b` (0 outside loops).
    pub fn depth(&self, b: Block) -> u32 {
        self.innermost(b).map_or(0, |l| self.loops[l].depth)
    }
}

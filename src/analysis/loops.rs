//! The loop nesting forest, with detection of irreducible loops.
//!
//! The forest is Steensgaard's (as surveyed by Ramalingam, "On loops, dominators, and
//! dominance frontiers", TOPLAS 2002): a loop is a strongly connected component with a
//! cycle; its **entries** are its blocks with a predecessor outside it (one entry: the loop
//! is reducible and the entry, its header, dominates it; several: it is **irreducible** and
//! all entries are recorded, the header being the first in reverse post-order); the loops
//! nested in it are the components found inside it once the edges into its entries are
//! removed. Unreachable blocks belong to no loop.
//!
//! Two constructions give that forest:
//! 1. **Reducible CFGs** (every program written without `goto` into a loop, and every
//!    region once reducified): Tarjan's loop nesting with union-find ("Testing flow graph
//!    reducibility", JCSS 1974; the form Havlak's algorithm extends). Visit the blocks in
//!    reverse DFS preorder; a block with a predecessor among its DFS descendants is a
//!    header; its body is collected backwards from those predecessors, each block already
//!    claimed by an inner loop standing for that loop (`find` on a union-find with path
//!    halving), and then merged into the header. A predecessor that is not a DFS
//!    descendant of the header proves a side entrance: the CFG is irreducible and this
//!    construction gives up. Each block joins one body and its predecessors are scanned
//!    once, so the cost is O((V + E) · α(V)), whatever the nesting depth.
//! 2. **Irreducible CFGs**: Steensgaard's construction proper: Tarjan's SCC algorithm
//!    (iterative), then again inside each loop with the edges into its entries cut. Its cost
//!    is O(d · (V + E)) for nesting depth `d`; it runs only when the first construction has
//!    found a side entrance.
//!
//! On reducible CFGs both give the same forest (a property test checks it), the classic
//! forest of natural loops merged by header. The forest stores, per block, its innermost
//! loop and, per loop, its parent, so its size is linear whatever the nesting depth; the
//! blocks of a loop with its nested loops are listed on demand by [`LoopForest::blocks`].

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

/// One loop on dense nodes, as computed by [`find_loops`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseLoop {
    /// Sorted in reverse post-order; the first is the header.
    pub entries: Vec<usize>,
    pub parent: Option<usize>,
}

/// The loop forest on dense nodes: loops ordered by the reverse post-order number of their
/// headers (so a loop comes before the loops nested in it), and each node's innermost loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseForest {
    pub loops: Vec<DenseLoop>,
    pub innermost: Vec<Option<usize>>,
}

impl DenseForest {
    /// Whether node `x` belongs to loop `l` or to a loop nested in it.
    pub fn contains(&self, l: usize, x: usize) -> bool {
        on_chain(self.innermost[x], l, |c| self.loops[c].parent)
    }
}

/// Whether loop `l` is on the chain of parents from `inner`. Parents have smaller ids than
/// their children, so the walk stops at the first id not above `l`.
fn on_chain(inner: Option<usize>, l: usize, parent: impl Fn(usize) -> Option<usize>) -> bool {
    let mut cur = inner;
    while let Some(c) = cur {
        if c <= l {
            return c == l;
        }
        cur = parent(c);
    }
    false
}

/// Finds the loops of `g` reachable from `root`.
pub fn find_loops(g: &Graph, root: usize) -> DenseForest {
    forest_of(g, root, &DfsOrder::compute(g, root))
}

/// The forest, given the depth-first search from `root`: the union-find construction, or
/// Steensgaard's when it finds a side entrance.
fn forest_of(g: &Graph, root: usize, dfs: &DfsOrder) -> DenseForest {
    reducible_loops(g, dfs).unwrap_or_else(|| steensgaard_loops(g, root, dfs))
}

/// Reverse post-order numbers (`usize::MAX` for unreachable nodes).
fn rpo_numbers(dfs: &DfsOrder, n: usize) -> Vec<usize> {
    let mut num = vec![usize::MAX; n];
    for (i, &x) in dfs.postorder.iter().rev().enumerate() {
        num[x] = i;
    }
    num
}

/// Tarjan's loop nesting with union-find; `None` if the CFG is irreducible.
pub(crate) fn reducible_loops(g: &Graph, dfs: &DfsOrder) -> Option<DenseForest> {
    let n = g.len();
    // Union-find over nodes: a node's representative is the outermost header found so far
    // whose body contains it.
    let mut uf: Vec<usize> = (0..n).collect();
    fn find(uf: &mut [usize], mut x: usize) -> usize {
        while uf[x] != x {
            uf[x] = uf[uf[x]];
            x = uf[x];
        }
        x
    }
    // `header_of[x]`: the header whose body directly contains `x` (a plain block, or the
    // header of a nested loop).
    let mut header_of: Vec<Option<usize>> = vec![None; n];
    let mut is_header = vec![false; n];
    let mut mark = vec![usize::MAX; n];
    let mut body: Vec<usize> = Vec::new();
    for &w in dfs.preorder.iter().rev() {
        body.clear();
        for &p in &g.preds[w] {
            if dfs.is_ancestor(w, p) {
                is_header[w] = true;
                let r = find(&mut uf, p);
                if r != w && mark[r] != w {
                    mark[r] = w;
                    body.push(r);
                }
            }
        }
        if !is_header[w] {
            continue;
        }
        let mut k = 0;
        while k < body.len() {
            let x = body[k];
            k += 1;
            for &y in &g.preds[x] {
                if !dfs.is_reachable(y) {
                    continue;
                }
                let r = find(&mut uf, y);
                if r == w || mark[r] == w {
                    continue;
                }
                if !dfs.is_ancestor(w, r) {
                    return None;
                }
                mark[r] = w;
                body.push(r);
            }
        }
        for &x in &body {
            header_of[x] = Some(w);
            uf[x] = w;
        }
    }
    let rpo_num = rpo_numbers(dfs, n);
    let mut headers: Vec<usize> = (0..n).filter(|&x| is_header[x]).collect();
    headers.sort_unstable_by_key(|&x| rpo_num[x]);
    let mut loop_of = vec![usize::MAX; n];
    for (id, &h) in headers.iter().enumerate() {
        loop_of[h] = id;
    }
    let loops = headers
        .iter()
        .map(|&h| DenseLoop {
            entries: vec![h],
            parent: header_of[h].map(|p| loop_of[p]),
        })
        .collect();
    let innermost = (0..n)
        .map(|x| {
            if is_header[x] {
                Some(loop_of[x])
            } else {
                header_of[x].map(|h| loop_of[h])
            }
        })
        .collect();
    Some(DenseForest { loops, innermost })
}

/// Steensgaard's construction: components, then components inside each with the edges into
/// its entries cut.
pub(crate) fn steensgaard_loops(g: &Graph, root: usize, dfs: &DfsOrder) -> DenseForest {
    let n = g.len();
    let rpo_num = rpo_numbers(dfs, n);
    // Loops as found: (entries, nodes, parent), a parent before its children.
    let mut found: Vec<(Vec<usize>, Vec<usize>, Option<usize>)> = Vec::new();
    // Work list of (node set, parent loop). `cut` marks the entries of the loops found so
    // far: edges into them are back edges of their loops.
    let mut cut = vec![false; n];
    let mut work: Vec<(Vec<usize>, Option<usize>)> = vec![(dfs.rpo(), None)];
    let mut member = vec![usize::MAX; n];
    let mut in_scc = vec![false; n];
    let mut gen = 0usize;
    while let Some((nodes, parent)) = work.pop() {
        gen += 1;
        for &x in &nodes {
            member[x] = gen;
        }
        // Edges leaving the node set, and edges into entries of enclosing loops (their back
        // edges), are ignored.
        let comps = sccs(g, &nodes, |_, b| member[b] == gen && !cut[b]);
        for mut scc in comps {
            let cyclic = scc.len() > 1 || g.succs[scc[0]].iter().any(|&s| s == scc[0] && !cut[s]);
            if !cyclic {
                continue;
            }
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
            for &x in &scc {
                in_scc[x] = false;
            }
            entries.sort_by_key(|&x| rpo_num[x]);
            scc.sort_by_key(|&x| rpo_num[x]);
            for &e in &entries {
                cut[e] = true;
            }
            let id = found.len();
            found.push((entries, scc.clone(), parent));
            work.push((scc, Some(id)));
        }
    }
    // Renumber by header; parents have smaller headers than their children, so a parent's
    // nodes are written before its children's overwrite the inner ones.
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_unstable_by_key(|&i| rpo_num[found[i].0[0]]);
    let mut new_id = vec![0; found.len()];
    for (id, &i) in order.iter().enumerate() {
        new_id[i] = id;
    }
    let mut innermost = vec![None; n];
    let mut loops = Vec::with_capacity(found.len());
    for &i in &order {
        let (entries, nodes, parent) = &found[i];
        for &x in nodes {
            innermost[x] = Some(new_id[i]);
        }
        loops.push(DenseLoop {
            entries: entries.clone(),
            parent: parent.map(|p| new_id[p]),
        });
    }
    DenseForest { loops, innermost }
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
    /// The reachable blocks in reverse post-order.
    rpo: Vec<Block>,
}

impl LoopForest {
    pub fn compute(cfg: &ControlFlowGraph) -> LoopForest {
        let g = cfg.graph();
        let dfs = DfsOrder::compute(g, 0);
        let dense = forest_of(g, 0, &dfs);
        let mut loops: Vec<Loop> = dense
            .loops
            .iter()
            .map(|l| Loop {
                header: cfg.block(l.entries[0]),
                entries: l.entries.iter().map(|&x| cfg.block(x)).collect(),
                parent: l.parent,
                children: Vec::new(),
                depth: 1,
            })
            .collect();
        // Parents come before children, so one pass fixes depths and children.
        for id in 0..loops.len() {
            if let Some(p) = loops[id].parent {
                loops[id].depth = loops[p].depth + 1;
                loops[p].children.push(id);
            }
        }
        let mut innermost = cranelift_entity::SecondaryMap::new();
        for (x, l) in dense.innermost.iter().enumerate() {
            if l.is_some() {
                innermost[cfg.block(x)] = *l;
            }
        }
        let rpo = dfs.postorder.iter().rev().map(|&x| cfg.block(x)).collect();
        LoopForest {
            loops,
            innermost,
            rpo,
        }
    }

    /// The reachable blocks in reverse post-order (of the search the forest was built on).
    pub fn rpo(&self) -> &[Block] {
        &self.rpo
    }

    /// The innermost loop containing `b`.
    pub fn innermost(&self, b: Block) -> Option<LoopId> {
        self.innermost.get(b).copied().flatten()
    }

    /// Loop depth of `b` (0 outside loops).
    pub fn depth(&self, b: Block) -> u32 {
        self.innermost(b).map_or(0, |l| self.loops[l].depth)
    }

    /// Whether `b` belongs to loop `l` or to a loop nested in it.
    pub fn contains(&self, l: LoopId, b: Block) -> bool {
        on_chain(self.innermost(b), l, |c| self.loops[c].parent)
    }

    /// Every block of loop `l`, nested loops included, in reverse post-order. Costs a walk
    /// over the function's blocks.
    pub fn blocks(&self, l: LoopId) -> Vec<Block> {
        self.rpo
            .iter()
            .copied()
            .filter(|&b| self.contains(l, b))
            .collect()
    }
}

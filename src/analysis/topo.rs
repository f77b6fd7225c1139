//! Topological numbers with begin/end times, for O(1) "is N1 a predecessor of N2" queries.
//!
//! From the DyC design notes on eager stitching (`docs/design.md`), "Identifying
//! predecessors in the CFG":
//! 1. identify back edges by DFS ([`super::edges`]) and remove them;
//! 2. a **depth-first topological traversal** (a node is traversed once all its
//!    predecessors have been, the most recently readied node first) counts the nodes: these
//!    are the topological numbers, also the **begin** times;
//! 3. traverse again over the reversed edges, from the bottom of the graph to the top,
//!    continuing the count: these are the **end** times;
//! 4. `is_predecessor(n1, n2)` (n1 reaches n2, or n1 == n2, in the graph without back
//!    edges) when the range `[begin, end]` of n2 lies within that of n1.
//!
//! Step 4 never misses a real predecessor: a path n1 → n2 puts n1 first in both
//! traversals. It can, however, answer yes for two unrelated nodes: two linear orders
//! capture exactly the reachability of a DAG only when that order has dimension at most 2
//! (planar st-graphs such as structured code do; general DAGs do not). We make the query
//! exact everywhere:
//! - the first traversal readies successors left to right, the reversed one readies
//!   predecessors in the order of their begin numbers: the leftmost-first / rightmost-first
//!   pair that makes the ranges exact on planar graphs drawn in branch order;
//! - [`TopoNumbers::compute_graph`] checks the ranges against the transitive closure (bit sets,
//!   O(V · E / 64)); if they are not exact it keeps the closure and answers from it, still in
//!   O(1). [`TopoNumbers::ranges_exact`] says which case holds.
//!
//! Unreachable blocks get no numbers; queries involving them answer false.

use super::cfg::{ControlFlowGraph, Graph};
use super::edges::{classify_all, EdgeKind};
use crate::ir::Block;

#[derive(Clone, Debug)]
pub struct TopoNumbers {
    /// Begin time (topological number) per node, `None` if unreachable.
    pub begin: Vec<Option<u32>>,
    /// End time per node.
    pub end: Vec<Option<u32>>,
    /// Node order by topological number.
    pub order: Vec<usize>,
    /// The transitive closure, kept only when the ranges are not exact.
    closure: Option<Vec<Vec<u64>>>,
    /// The acyclic graph (back edges removed).
    pub dag: Graph,
}

/// Depth-first topological traversal of the acyclic `g` (Kahn's algorithm with a stack).
/// `roots` and the nodes readied by one traversal step are taken in the order
/// `arrange` puts them in (first taken first). Nodes not `live` are ignored.
fn depth_first_topo(
    g: &Graph,
    roots: &[usize],
    arrange: impl Fn(&mut Vec<usize>),
    live: &[bool],
) -> Vec<usize> {
    let mut indeg: Vec<usize> = (0..g.len())
        .map(|n| g.preds[n].iter().filter(|&&p| live[p]).count())
        .collect();
    let mut stack: Vec<usize> = roots.to_vec();
    arrange(&mut stack);
    stack.reverse();
    let mut order = Vec::new();
    while let Some(n) = stack.pop() {
        order.push(n);
        let mut ready: Vec<usize> = Vec::new();
        for &s in &g.succs[n] {
            if live[s] {
                indeg[s] -= 1;
                if indeg[s] == 0 {
                    ready.push(s);
                }
            }
        }
        arrange(&mut ready);
        stack.extend(ready.into_iter().rev());
    }
    order
}

impl TopoNumbers {
    /// Numbers the graph `g` (rooted at `root`) with its back edges removed.
    pub fn compute_graph(g: &Graph, root: usize) -> TopoNumbers {
        let n = g.len();
        let classes = classify_all(g, root);
        let mut live = vec![false; n];
        let mut edges = Vec::new();
        for &(a, b, k) in &classes {
            live[a] = true;
            live[b] = true;
            if k != EdgeKind::Back {
                edges.push((a, b));
            }
        }
        let dag = Graph::from_unique_edges(n, &edges);
        if root < n {
            live[root] = true;
        }
        let mut begin = vec![None; n];
        let mut end = vec![None; n];
        let roots: Vec<usize> = if root < n { vec![root] } else { vec![] };
        // Successors in branch order: the first successor is traversed first.
        let order = depth_first_topo(&dag, &roots, |_| {}, &live);
        for (i, &x) in order.iter().enumerate() {
            begin[x] = Some(i as u32);
        }
        let sinks: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&x| dag.succs[x].is_empty())
            .collect();
        let rev = dag.reversed();
        let count = order.len() as u32;
        // Predecessors leftmost (lowest begin time) first.
        let rorder = depth_first_topo(&rev, &sinks, |v| v.sort_by_key(|&x| begin[x]), &live);
        for (i, &x) in rorder.iter().enumerate() {
            end[x] = Some(count + i as u32);
        }
        let mut t = TopoNumbers {
            begin,
            end,
            order,
            closure: None,
            dag,
        };
        let closure = t.closure_bits();
        if !t.ranges_match(&closure) {
            t.closure = Some(closure);
        }
        t
    }

    /// Reflexive reachability in the DAG, as bit sets, by one pass in reverse topological
    /// order.
    fn closure_bits(&self) -> Vec<Vec<u64>> {
        let n = self.dag.len();
        let words = n.div_ceil(64).max(1);
        let mut reach = vec![vec![0u64; words]; n];
        for &x in self.order.iter().rev() {
            let mut set = vec![0u64; words];
            set[x / 64] |= 1 << (x % 64);
            for &s in &self.dag.succs[x] {
                for (a, b) in set.iter_mut().zip(&reach[s]) {
                    *a |= b;
                }
            }
            reach[x] = set;
        }
        reach
    }

    fn ranges_contain(&self, a: usize, b: usize) -> bool {
        match (self.begin[a], self.end[a], self.begin[b], self.end[b]) {
            (Some(ba), Some(ea), Some(bb), Some(eb)) => ba <= bb && eb <= ea,
            _ => false,
        }
    }

    fn ranges_match(&self, closure: &[Vec<u64>]) -> bool {
        self.order.iter().all(|&a| {
            self.order
                .iter()
                .all(|&b| self.ranges_contain(a, b) == (closure[a][b / 64] >> (b % 64) & 1 == 1))
        })
    }

    /// Whether the begin/end ranges alone answer every query exactly.
    pub fn ranges_exact(&self) -> bool {
        self.closure.is_none()
    }

    /// The design notes' `IsPredecessor(n1, n2)`: `n1 == n2` or a path leads from `n1` to `n2`
    /// without back edges. O(1).
    pub fn is_predecessor(&self, n1: usize, n2: usize) -> bool {
        match &self.closure {
            None => self.ranges_contain(n1, n2),
            Some(c) => {
                self.begin[n1].is_some()
                    && self.begin[n2].is_some()
                    && c[n1][n2 / 64] >> (n2 % 64) & 1 == 1
            }
        }
    }
}

/// Topological numbers of a function's blocks.
#[derive(Clone, Debug)]
pub struct BlockTopo {
    pub numbers: TopoNumbers,
    nums: super::cfg::BlockNumbering,
}

impl BlockTopo {
    pub fn compute(cfg: &ControlFlowGraph) -> BlockTopo {
        BlockTopo {
            numbers: TopoNumbers::compute_graph(cfg.graph(), 0),
            nums: cfg.numbering().clone(),
        }
    }

    pub fn begin(&self, b: Block) -> Option<u32> {
        self.nums.node(b).and_then(|n| self.numbers.begin[n])
    }

    pub fn end(&self, b: Block) -> Option<u32> {
        self.nums.node(b).and_then(|n| self.numbers.end[n])
    }

    pub fn is_predecessor(&self, a: Block, b: Block) -> bool {
        match (self.nums.node(a), self.nums.node(b)) {
            (Some(x), Some(y)) => self.numbers.is_predecessor(x, y),
            _ => false,
        }
    }

    /// Blocks in topological order.
    pub fn order(&self) -> Vec<Block> {
        self.numbers
            .order
            .iter()
            .map(|&n| self.nums.block(n))
            .collect()
    }
}

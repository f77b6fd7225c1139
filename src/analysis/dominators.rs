//! Dominators: a fast algorithm and a simple reference one, on any [`Graph`].
//!
//! Node `a` **dominates** `b` when every path from the root to `b` goes through `a`; the
//! **immediate dominator** `idom(b)` is the closest strict dominator, and the idoms form
//! the dominator tree.
//!
//! - [`idoms_lengauer_tarjan`]: Lengauer and Tarjan, "A fast algorithm for finding
//!   dominators in a flowgraph" (TOPLAS 1979), the "simple" version with path compression:
//!   semidominators computed in reverse DFS preorder through a link-eval forest, then the
//!   idoms fixed in preorder. O(E log V). The path compression is iterative.
//! - [`idoms_reference`]: the textbook data-flow definition, iterated to a fixed point:
//!   `Dom(root) = {root}`, `Dom(n) = {n} ∪ ⋂ Dom(p)` over the reachable predecessors `p`,
//!   with bit sets; `idom(n)` is the strict dominator with the most dominators of its own.
//!   O(V² · E / 64); only for tests.
//!
//! [`DomTree`] answers "does `a` dominate `b`" in O(1) from the preorder/postorder
//! intervals of the tree. [`DominatorTree`] wraps it for the blocks of a function;
//! post-dominators are in [`super::postdom`]. Unreachable nodes have no idom, dominate
//! nothing and are dominated by nothing.

use super::cfg::{Adjacency, BlockNumbering, ControlFlowGraph, Graph};
use super::order::DfsOrder;
use crate::ir::Block;

/// Immediate dominators by Lengauer–Tarjan. `None` for the root and unreachable nodes.
pub fn idoms_lengauer_tarjan(g: &Graph, root: usize) -> Vec<Option<usize>> {
    let n = g.len();
    let mut idom = vec![None; n];
    if root >= n {
        return idom;
    }
    // Numbers are u32 with NIL for "none": nine words per node, not twice that.
    const NIL: u32 = u32::MAX;
    // Depth-first preorder numbering: vertex[i] is the node numbered i, num[x] the number
    // of node x (NIL if unreachable), parent[i] the number of i's DFS-tree parent.
    let mut vertex: Vec<u32> = Vec::with_capacity(n);
    let mut num = vec![NIL; n];
    let mut parent: Vec<u32> = Vec::with_capacity(n);
    {
        let mut stack: Vec<(u32, u32)> = vec![(root as u32, 0)];
        num[root] = 0;
        vertex.push(root as u32);
        parent.push(0);
        while let Some(&mut (x, ref mut next)) = stack.last_mut() {
            let succs = &g.succs[x as usize];
            if let Some(&s) = succs.get(*next as usize) {
                *next += 1;
                if num[s] == NIL {
                    num[s] = vertex.len() as u32;
                    parent.push(num[x as usize]);
                    vertex.push(s as u32);
                    stack.push((s as u32, 0));
                }
            } else {
                stack.pop();
            }
        }
    }
    let r = vertex.len();
    let mut semi: Vec<u32> = (0..r as u32).collect();
    let mut label: Vec<u32> = (0..r as u32).collect();
    let mut ancestor = vec![NIL; r];
    let mut dom = vec![0u32; r];
    // The bucket of each vertex as a linked list (every vertex is in at most one).
    let mut bucket = vec![NIL; r];
    let mut next_in_bucket = vec![NIL; r];
    let mut path: Vec<u32> = Vec::new();

    // eval(v): the vertex of minimum semi on the forest path above v (v itself if a root).
    let eval = |v: u32,
                ancestor: &mut [u32],
                label: &mut [u32],
                semi: &[u32],
                path: &mut Vec<u32>|
     -> u32 {
        if ancestor[v as usize] == NIL {
            return v;
        }
        // Compress the path from v to just below the forest root.
        path.clear();
        let mut x = v;
        loop {
            let a = ancestor[x as usize];
            if a == NIL || ancestor[a as usize] == NIL {
                break;
            }
            path.push(x);
            x = a;
        }
        for &x in path.iter().rev() {
            let (x, a) = (x as usize, ancestor[x as usize] as usize);
            if semi[label[a] as usize] < semi[label[x] as usize] {
                label[x] = label[a];
            }
            ancestor[x] = ancestor[a];
        }
        label[v as usize]
    };

    for w in (1..r).rev() {
        for &p in &g.preds[vertex[w] as usize] {
            let v = num[p];
            if v == NIL {
                continue;
            }
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            if semi[u as usize] < semi[w] {
                semi[w] = semi[u as usize];
            }
        }
        next_in_bucket[w] = std::mem::replace(&mut bucket[semi[w] as usize], w as u32);
        let pw = parent[w];
        ancestor[w] = pw;
        let mut v = std::mem::replace(&mut bucket[pw as usize], NIL);
        while v != NIL {
            let u = eval(v, &mut ancestor, &mut label, &semi, &mut path);
            dom[v as usize] = if semi[u as usize] < semi[v as usize] {
                u
            } else {
                pw
            };
            v = next_in_bucket[v as usize];
        }
    }
    for w in 1..r {
        if dom[w] != semi[w] {
            dom[w] = dom[dom[w] as usize];
        }
        idom[vertex[w] as usize] = Some(vertex[dom[w] as usize] as usize);
    }
    idom
}

/// Immediate dominators from the data-flow definition (reference for tests).
pub fn idoms_reference(g: &Graph, root: usize) -> Vec<Option<usize>> {
    let n = g.len();
    let mut idom = vec![None; n];
    if root >= n {
        return idom;
    }
    let dfs = DfsOrder::compute(g, root);
    let words = n.div_ceil(64);
    let full = vec![u64::MAX; words];
    let mut dom: Vec<Vec<u64>> = vec![full; n];
    dom[root] = vec![0; words];
    dom[root][root / 64] |= 1 << (root % 64);
    let mut changed = true;
    while changed {
        changed = false;
        for &x in dfs.preorder.iter().skip(1) {
            let mut set = vec![u64::MAX; words];
            for &p in &g.preds[x] {
                if dfs.is_reachable(p) {
                    for (s, d) in set.iter_mut().zip(&dom[p]) {
                        *s &= d;
                    }
                }
            }
            set[x / 64] |= 1 << (x % 64);
            if set != dom[x] {
                dom[x] = set;
                changed = true;
            }
        }
    }
    let has = |set: &[u64], y: usize| set[y / 64] >> (y % 64) & 1 == 1;
    let count = |set: &[u64]| set.iter().map(|w| w.count_ones()).sum::<u32>();
    for &x in dfs.preorder.iter().skip(1) {
        idom[x] = (0..n)
            .filter(|&d| d != x && dfs.is_reachable(d) && has(&dom[x], d))
            .max_by_key(|&d| count(&dom[d]));
    }
    idom
}

/// A dominator tree over dense nodes with O(1) dominance queries.
#[derive(Clone, Debug)]
pub struct DomTree {
    idom: Vec<Option<usize>>,
    children: Adjacency,
    /// Preorder and postorder numbers in the tree, `None` when not in the tree.
    enter: Vec<Option<u32>>,
    exit: Vec<u32>,
    root: usize,
}

impl DomTree {
    /// Builds the tree from immediate dominators (`idom[root] == None`).
    pub fn from_idoms(idom: Vec<Option<usize>>, root: usize) -> DomTree {
        let n = idom.len();
        let children = Adjacency::build(
            n,
            idom.iter()
                .enumerate()
                .filter_map(|(x, d)| d.map(|d| (d, x))),
        );
        let mut enter = vec![None; n];
        let mut exit = vec![0; n];
        if root < n {
            let mut clock = 0u32;
            let mut stack = vec![(root, 0usize)];
            enter[root] = Some(clock);
            while let Some(&mut (x, ref mut next)) = stack.last_mut() {
                if let Some(&c) = children[x].get(*next) {
                    *next += 1;
                    clock += 1;
                    enter[c] = Some(clock);
                    stack.push((c, 0));
                } else {
                    clock += 1;
                    exit[x] = clock;
                    stack.pop();
                }
            }
        }
        DomTree {
            idom,
            children,
            enter,
            exit,
            root,
        }
    }

    pub fn root(&self) -> usize {
        self.root
    }

    pub fn idom(&self, x: usize) -> Option<usize> {
        self.idom[x]
    }

    pub fn idoms(&self) -> &[Option<usize>] {
        &self.idom
    }

    pub fn children(&self, x: usize) -> &[usize] {
        &self.children[x]
    }

    /// Whether `x` is in the tree (reachable from the root).
    pub fn contains(&self, x: usize) -> bool {
        self.enter[x].is_some()
    }

    /// Whether `a` dominates `b` (reflexive). False when either is not in the tree.
    pub fn dominates(&self, a: usize, b: usize) -> bool {
        match (self.enter[a], self.enter[b]) {
            (Some(ea), Some(eb)) => ea <= eb && self.exit[b] <= self.exit[a],
            _ => false,
        }
    }
}

/// Dominators of the blocks of a function (root: the entry block).
#[derive(Clone, Debug)]
pub struct DominatorTree {
    tree: DomTree,
    nums: BlockNumbering,
}

impl DominatorTree {
    pub fn compute(cfg: &ControlFlowGraph) -> DominatorTree {
        let idoms = idoms_lengauer_tarjan(cfg.graph(), 0);
        DominatorTree {
            tree: DomTree::from_idoms(idoms, 0),
            nums: cfg.numbering().clone(),
        }
    }

    fn node(&self, b: Block) -> Option<usize> {
        self.nums.node(b)
    }

    /// The immediate dominator of `b`; `None` for the entry and unreachable blocks.
    pub fn idom(&self, b: Block) -> Option<Block> {
        self.node(b)
            .and_then(|n| self.tree.idom(n))
            .map(|n| self.nums.block(n))
    }

    /// Whether `a` dominates `b` (reflexive), both reachable.
    pub fn dominates(&self, a: Block, b: Block) -> bool {
        match (self.node(a), self.node(b)) {
            (Some(x), Some(y)) => self.tree.dominates(x, y),
            _ => false,
        }
    }

    pub fn is_reachable(&self, b: Block) -> bool {
        self.node(b).is_some_and(|n| self.tree.contains(n))
    }

    /// Children of `b` in the dominator tree.
    pub fn children(&self, b: Block) -> Vec<Block> {
        self.node(b)
            .map(|n| {
                self.tree
                    .children(n)
                    .iter()
                    .map(|&c| self.nums.block(c))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn tree(&self) -> &DomTree {
        &self.tree
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_lengauer_tarjan_example() {
        // The flowgraph of Lengauer & Tarjan's paper (R=0, A..L = 1..12).
        let (r, a, b, c, d, e, f, g, h, i, j, k, l) = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
        let edges = [
            (r, a),
            (r, b),
            (r, c),
            (a, d),
            (b, a),
            (b, d),
            (b, e),
            (c, f),
            (c, g),
            (d, l),
            (e, h),
            (f, i),
            (g, i),
            (g, j),
            (h, e),
            (h, k),
            (i, k),
            (j, i),
            (k, i),
            (k, r),
            (l, h),
        ];
        let gr = Graph::from_edges(13, edges);
        let expect = [
            None,
            Some(r),
            Some(r),
            Some(r),
            Some(r),
            Some(r),
            Some(c),
            Some(c),
            Some(r),
            Some(r),
            Some(g),
            Some(r),
            Some(d),
        ];
        assert_eq!(idoms_lengauer_tarjan(&gr, r), expect);
        assert_eq!(idoms_reference(&gr, r), expect);
        let t = DomTree::from_idoms(expect.to_vec(), r);
        assert!(t.dominates(c, j) && t.dominates(g, j) && !t.dominates(f, i));
    }
}

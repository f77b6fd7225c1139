//! Depth-first orders: preorder, postorder and reverse post-order (RPO).
//!
//! One iterative depth-first search from the root (no recursion, so deep CFGs cannot
//! overflow the stack), visiting successors in their order. In RPO every node comes before
//! its successors except along back edges; in an acyclic graph RPO is a topological order.
//! Nodes not reachable from the root get no number. Cost: O(nodes + edges).

use super::cfg::Graph;

/// The numbering of one depth-first search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DfsOrder {
    /// Nodes in the order they were first reached.
    pub preorder: Vec<usize>,
    /// Nodes in the order they were finished.
    pub postorder: Vec<usize>,
    /// `pre[n]`: position of `n` in `preorder`, `None` if unreachable.
    pub pre: Vec<Option<usize>>,
    /// `post[n]`: position of `n` in `postorder`, `None` if unreachable.
    pub post: Vec<Option<usize>>,
    /// `parent[n]`: the node from which `n` was first reached (its DFS-tree parent).
    pub parent: Vec<Option<usize>>,
}

impl DfsOrder {
    /// Depth-first search from `root` visiting successors in order.
    pub fn compute(g: &Graph, root: usize) -> DfsOrder {
        Self::compute_with(g, root, false)
    }

    /// Depth-first search from `root`, visiting successors last-first when `reverse_succs`.
    pub fn compute_with(g: &Graph, root: usize, reverse_succs: bool) -> DfsOrder {
        let n = g.len();
        let mut d = DfsOrder {
            preorder: Vec::with_capacity(n),
            postorder: Vec::with_capacity(n),
            pre: vec![None; n],
            post: vec![None; n],
            parent: vec![None; n],
        };
        if root >= n {
            return d;
        }
        // Stack of (node, index of the next successor to visit).
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        d.pre[root] = Some(0);
        d.preorder.push(root);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let succs = &g.succs[node];
            if *next < succs.len() {
                let k = if reverse_succs {
                    succs.len() - 1 - *next
                } else {
                    *next
                };
                *next += 1;
                let s = succs[k];
                if d.pre[s].is_none() {
                    d.pre[s] = Some(d.preorder.len());
                    d.parent[s] = Some(node);
                    d.preorder.push(s);
                    stack.push((s, 0));
                }
            } else {
                d.post[node] = Some(d.postorder.len());
                d.postorder.push(node);
                stack.pop();
            }
        }
        d
    }

    /// Reverse post-order.
    pub fn rpo(&self) -> Vec<usize> {
        self.postorder.iter().rev().copied().collect()
    }

    pub fn is_reachable(&self, n: usize) -> bool {
        self.pre[n].is_some()
    }

    /// Whether `a` is an ancestor of `b` in the DFS tree (reflexive).
    pub fn is_ancestor(&self, a: usize, b: usize) -> bool {
        match (self.pre[a], self.pre[b], self.post[a], self.post[b]) {
            (Some(pa), Some(pb), Some(qa), Some(qb)) => pa <= pb && qb <= qa,
            _ => false,
        }
    }
}

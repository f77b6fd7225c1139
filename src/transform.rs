//! The DyC static transform: splitting with topological linearization, from the CFG form
//! of a stitch program to its plan ([`dyc_stitcher::ge::linear`]), which the planned
//! stitcher follows with no work list.
//!
//! From the DyC design notes ("Splitting and Merging + Topological Sort + Equivalence
//! Classes on Kconst"; `docs/design.md` and `docs/transform.md` say it in our words). The
//! result is a forest: one tree per **root**, each a sequence of steps that stitches the
//! blocks the root reaches in topological order, forking at static branches.
//!
//! # Algorithm
//!
//! 1. **Back edges** by one depth-first search from the entry, last successor first;
//!    **topological numbers** are the positions in its reverse post-order, a topological
//!    order of the graph without back edges in which a branch's `then` side comes before
//!    its `else` side (so `if (D && S) A else B; M` is laid out D S A B M).
//! 2. **Roots**: the entry; promotion blocks (units start there); special merges (static
//!    parameters and two or more in-edges, back edges included: their values differ by
//!    path, so a copy per value is looked up, e.g. the heads of multi-way unrolled loops);
//!    heads of loops with several entries (the head does not dominate the tail). Then, to
//!    a fixed point, over the trees (blocks reached from a root through forward edges
//!    without entering another root): a block reached by two trees becomes a root
//!    (*shared*), a block reached by the tree of a root that may run several times per
//!    unit whose key does not include that root's key becomes a root (*key*: two runs could
//!    reach the same copy), and a loop head whose tail lies in another tree becomes a root
//!    (*loop head*). So within one run of a tree every non-root block has at most one copy,
//!    and every copy is made once per unit, the same copies the work-list executor makes.
//! 3. **Linearization**, per root in topological order: a branch of the tree holds the
//!    sorted list of blocks still to stitch (`NextNodeList`) and the loop list (the
//!    (head, tail) pairs of the tree's loops, `LoopHeadList`). Until the list is empty:
//!    prune the loop list and insert a loop head whenever the next block's condition implies
//!    RC(head) ∧ RC(tail) (cyclic conditions, those that follow back edges); take the
//!    least block; emit `stitch`; a static branch forks the tree, each arm with a copy of
//!    the lists plus its edge's target; a dynamic branch or plain edge inserts every
//!    successor. Roots and back-edge targets are never inserted: edges to them are
//!    has-been-stitched lookups or links to the copy made earlier in the run.
//! 4. **Tail merging** by hash-consing: the steps after a point depend only on the two lists,
//!    so each (list, loop list) state is built once and reached again by `goto`; then the
//!    step graph's identical suffixes are shared bottom-up.
//! 5. **Near-identical tails** (`merge_near_identical`): where an arm of a fork stitches a
//!    subsequence of what another arm stitches from the same block on, it jumps into that
//!    arm, and the blocks it passes over become NTBS tests (`stitch .. if needed`: the
//!    block's slot, filled by the edges that need it, is its flag). Accepted when the tests
//!    added are no more than the steps saved, and only where sound: the passed-over blocks
//!    have no other step in the plan, and a fork after the tail reads the same block.
//!
//! # Decisions where the design notes are silent or ambiguous
//!
//! - *DFS successor order*: last successor first, which numbers `then` before `else` and
//!   cases before the default. (The reachability conditions number their variables by
//!   their own search; the loop-head test uses the cyclic conditions, which do not depend
//!   on any search.)
//! - *Which in-edge is "last"*: not needed; merges are stitched once all their forward
//!   predecessors on the branch are, because the list is sorted by topological number.
//! - *The assertion on the loop-head list* (`Topo#(head) > Topo#(next)`): not asserted. A
//!   head behind the next block with its tail ahead only arises when a tree starts inside
//!   the loop or the loop has several entries, and both make the head a root.
//! - *Copying the loop lists at forks*: each arm gets its own copy (they are part of the
//!   state that tail merging compares).
//! - *An empty list after a special root*: the branch ends (`end`); the root's own tree is
//!   run when an edge's has-been-stitched lookup misses.
//! - *How trees are linked*: an edge to a root is a has-been-stitched lookup on (root,
//!   static values of its key); a miss pushes the root on a stitch-time stack, and the
//!   stitcher runs the trees on the stack until it is empty. Units (promotions) are linked
//!   by the runtime's caches as before.
//! - *Static faults*: a block whose setup code faults ends with the fault, so its
//!   successors' slots are never filled; the stitcher skips a `stitch` whose slot is empty.
//! - The begin/end predecessor test is not used: tree membership is plain reachability.
//!
//! Budget: a plan over [`MAX_STEPS_PER_BLOCK`] steps per block (tail merging keeps common
//! programs far below) is not made; such programs, and programs with blocks the entry
//! does not reach, are run by the work-list executor.

use std::collections::HashMap;

use dyc_stitcher::ge::{
    Block, Lazy, Op, Operand, Param, Plan, RootKind, SetupOp, Step, StitchProgram, Term,
};
use dyc_templates::ops::{BinaryOp, Const, UnaryOp};

use crate::analysis::cfg::Graph;
use crate::analysis::dominators::{idoms_lengauer_tarjan, DomTree};
use crate::analysis::edges::{classify, EdgeKind};
use crate::analysis::order::DfsOrder;
use crate::analysis::reach::Reach;

/// Most steps per block a plan may have.
pub const MAX_STEPS_PER_BLOCK: usize = 64;

/// The shape of a stitch program that the transform reads.
struct Shape {
    /// Out-edge targets per node, in branch order, repeats kept.
    succs: Vec<Vec<usize>>,
    static_branch: Vec<bool>,
    topo: Vec<u32>,
    back: std::collections::HashSet<(usize, usize)>,
    /// Back edges `(tail, head)`, in node order.
    back_edges: Vec<(usize, usize)>,
    in_degree: Vec<usize>,
    /// Sorted key registers per node.
    keys: Vec<Vec<u32>>,
}

impl Shape {
    fn new(p: &StitchProgram) -> Option<(Shape, Graph)> {
        let n = p.blocks.len();
        if p.entry.as_u32() != 0 {
            return None;
        }
        let mut succs = vec![Vec::new(); n];
        let mut static_branch = vec![false; n];
        let mut in_degree = vec![0; n];
        let mut keys = vec![Vec::new(); n];
        for (b, d) in p.blocks.iter() {
            let i = b.as_u32() as usize;
            for e in d.term.edges() {
                let t = e.block.as_u32() as usize;
                if t >= n {
                    return None;
                }
                succs[i].push(t);
                in_degree[t] += 1;
            }
            static_branch[i] = matches!(
                d.term,
                Term::Branch {
                    cond: Operand::Static(_),
                    ..
                } | Term::Switch {
                    arg: Operand::Static(_),
                    ..
                }
            );
            let mut k: Vec<u32> = d.key_regs().map(|r| r.as_u32()).collect();
            k.sort_unstable();
            keys[i] = k;
        }
        let g = Graph::from_edges(
            n,
            succs
                .iter()
                .enumerate()
                .flat_map(|(a, ss)| ss.iter().map(move |&b| (a, b))),
        );
        // Last successor first, so that the reverse post-order numbers the `then` side of
        // a branch before its `else` side.
        let dfs = DfsOrder::compute_with(&g, 0, true);
        if (0..n).any(|v| !dfs.is_reachable(v)) {
            return None;
        }
        let mut topo = vec![0; n];
        for (k, v) in dfs.rpo().into_iter().enumerate() {
            topo[v] = k as u32;
        }
        let back_edges: Vec<(usize, usize)> = g
            .edges()
            .filter(|&(a, b)| classify(&dfs, a, b) == Some(EdgeKind::Back))
            .collect();
        let shape = Shape {
            succs,
            static_branch,
            topo,
            back: back_edges.iter().copied().collect(),
            back_edges,
            in_degree,
            keys,
        };
        Some((shape, g))
    }

    fn forward(&self, a: usize) -> impl Iterator<Item = usize> + '_ {
        self.succs[a]
            .iter()
            .copied()
            .filter(move |&b| !self.back.contains(&(a, b)))
    }
}

/// Chooses the roots (step 2 of the module documentation). Returns the kind of each root
/// and the owner (root) of each other block.
fn roots(p: &StitchProgram, s: &Shape, g: &Graph) -> (Vec<Option<RootKind>>, Vec<usize>) {
    let n = s.succs.len();
    let mut kind: Vec<Option<RootKind>> = vec![None; n];
    kind[0] = Some(RootKind::Entry);
    for (b, d) in p.blocks.iter() {
        let i = b.as_u32() as usize;
        if kind[i].is_some() {
            continue;
        }
        if !d.promote.is_empty() {
            kind[i] = Some(RootKind::Promotion);
        } else if d.lazy != Lazy::No {
            kind[i] = Some(RootKind::Lazy);
        } else if s.in_degree[i] >= 2 && d.params.iter().any(|p| matches!(p, Param::Static(_))) {
            kind[i] = Some(RootKind::Special);
        }
    }
    let dom = DomTree::from_idoms(idoms_lengauer_tarjan(g, 0), 0);
    for &(t, h) in &s.back_edges {
        if kind[h].is_none() && !dom.dominates(h, t) {
            kind[h] = Some(RootKind::LoopHead);
        }
    }
    // Runs once per unit: the entry when nothing jumps to it.
    let multi = |r: usize| !(r == 0 && s.in_degree[0] == 0);
    let defs = Defs::new(p, s);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&v| s.topo[v]);
    loop {
        let mut owner = vec![usize::MAX; n];
        let mut changed = false;
        for &r in &order {
            if kind[r].is_none() {
                continue;
            }
            owner[r] = r;
            let mut stack = vec![r];
            while let Some(x) = stack.pop() {
                for y in s.forward(x) {
                    if kind[y].is_some() || owner[y] == r {
                        continue;
                    }
                    if owner[y] != usize::MAX {
                        kind[y] = Some(RootKind::Shared);
                        changed = true;
                    } else if multi(r) && !defs.key_determines(&s.keys[y], r, &s.keys[r], &owner) {
                        kind[y] = Some(RootKind::Key);
                        changed = true;
                    } else {
                        owner[y] = r;
                        stack.push(y);
                    }
                }
            }
        }
        if !changed {
            for &(t, h) in &s.back_edges {
                if kind[h].is_none() && owner[t] != owner[h] {
                    kind[h] = Some(RootKind::LoopHead);
                    changed = true;
                }
            }
        }
        if !changed {
            return (kind, owner);
        }
    }
}

/// How the static registers of a stitch program are defined, as far as the *key* rule
/// needs: the operand an injective setup operation (or the one in-edge of a block, for a
/// static parameter) computes each register from.
struct Defs {
    /// Per register: the register it is an injective function of, and the block that
    /// computes it.
    from: HashMap<u32, (u32, usize)>,
}

impl Defs {
    fn new(p: &StitchProgram, s: &Shape) -> Defs {
        let mut from = HashMap::new();
        let consts: std::collections::HashSet<u32> = p
            .constants()
            .iter()
            .filter(|(_, c)| matches!(c, Const::Int(..)))
            .map(|(r, _)| r.as_u32())
            .collect();
        for (b, d) in p.blocks.iter() {
            let x = b.as_u32() as usize;
            for op in &d.ops {
                let Op::Setup { dst, op, .. } = op else {
                    continue;
                };
                // Injective in one operand whatever it holds (integers wrap; `not` is
                // bitwise or logical); `add`/`sub`/`xor` only with an integer constant.
                let src = match *op {
                    SetupOp::Copy(a) | SetupOp::Unary(UnaryOp::Not, a) => Some(a),
                    SetupOp::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Xor, a, c)
                        if consts.contains(&c.as_u32()) =>
                    {
                        Some(a)
                    }
                    SetupOp::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Xor, c, a)
                        if consts.contains(&c.as_u32()) =>
                    {
                        Some(a)
                    }
                    _ => None,
                };
                if let Some(a) = src {
                    from.insert(dst.as_u32(), (a.as_u32(), x));
                }
            }
            for e in d.term.edges() {
                let t = &p.blocks[e.block];
                if s.in_degree[e.block.as_u32() as usize] != 1 {
                    continue;
                }
                for (param, arg) in t.params.iter().zip(&e.args) {
                    if let (Param::Static(r), Operand::Static(a)) = (param, arg) {
                        from.insert(r.as_u32(), (a.as_u32(), x));
                    }
                }
            }
        }
        Defs { from }
    }

    /// Whether the static values of a key with registers `key` determine those of root
    /// `r`'s key `root_key`: each register of `root_key` is in `key` or is the origin of a
    /// chain of injective computations, all made in `r`'s tree (`owner`), that ends in a
    /// register of `key`. Then two runs of the tree with different root keys reach the
    /// block with different keys, so no copy is shared between runs and no lookup is
    /// needed (an interpreter's handler whose key holds `pc + 4` rather than `pc`).
    fn key_determines(&self, key: &[u32], r: usize, root_key: &[u32], owner: &[usize]) -> bool {
        let origin = |mut v: u32| {
            // Chains are acyclic (single assignment) and at most as long as the program.
            for _ in 0..=self.from.len() {
                if root_key.binary_search(&v).is_ok() {
                    return Some(v);
                }
                match self.from.get(&v) {
                    Some(&(a, x)) if owner[x] == r => v = a,
                    _ => return None,
                }
            }
            None
        };
        let reached: Vec<u32> = key.iter().filter_map(|&v| origin(v)).collect();
        root_key.iter().all(|k| reached.contains(k))
    }
}

/// A branch of a tree under construction: the blocks still to stitch, sorted by
/// topological number (with whether each was inserted without proof that it is needed),
/// and the loop list.
#[derive(Clone, PartialEq, Eq, Hash)]
struct State {
    pending: Vec<(u32, u32, bool)>,
    loops: Vec<(u32, u32)>,
}

impl State {
    fn insert(&mut self, topo: u32, node: usize, test: bool) {
        match self.pending.binary_search_by_key(&topo, |e| e.0) {
            Ok(k) => self.pending[k].2 &= test,
            Err(k) => self.pending.insert(k, (topo, node as u32, test)),
        }
    }
}

/// Where a sequence's first position goes.
enum Patch {
    Root(usize),
    Arm(usize, usize),
}

struct Builder<'a> {
    shape: &'a Shape,
    kind: &'a [Option<RootKind>],
    reach: Option<Reach>,
    steps: Vec<Step>,
    memo: HashMap<State, u32>,
    root_pc: Vec<u32>,
    max_steps: usize,
}

impl Builder<'_> {
    /// Whether RC(next) implies RC(head) ∧ RC(tail), on the cyclic conditions (false when
    /// the conditions are over their budget).
    fn implies(&mut self, next: usize, head: usize, tail: usize) -> bool {
        let Some(r) = self.reach.as_mut() else {
            return false;
        };
        let (a, h, t) = (r.cyclic[next], r.cyclic[head], r.cyclic[tail]);
        match r.mgr.and(h, t) {
            Some(ht) => r.mgr.implies(a, ht).unwrap_or(false),
            None => false,
        }
    }

    /// Builds the tree of root `root`; `None` over the budget.
    fn tree(&mut self, root: usize, owner: &[usize]) -> Option<()> {
        let s = self.shape;
        let mut loops: Vec<(u32, u32)> = s
            .back_edges
            .iter()
            .filter(|&&(t, h)| self.kind[h].is_none() && owner[t] == root && owner[h] == root)
            .map(|&(t, h)| (h as u32, t as u32))
            .collect();
        loops.sort_by_key(|&(h, t)| (s.topo[h as usize], s.topo[t as usize]));
        let start = State {
            pending: vec![(s.topo[root], root as u32, false)],
            loops,
        };
        let mut stack = vec![(start, Patch::Root(root))];
        while let Some((mut st, patch)) = stack.pop() {
            let mut first = Some(patch);
            loop {
                if self.steps.len() > self.max_steps {
                    return None;
                }
                let known = self.memo.get(&st).copied();
                if let Some(patch) = first.take() {
                    let pc = known.unwrap_or(self.steps.len() as u32);
                    match patch {
                        Patch::Root(r) => self.root_pc[r] = pc,
                        Patch::Arm(fork, k) => {
                            if let Step::Fork { arms, .. } = &mut self.steps[fork] {
                                arms[k] = pc;
                            }
                        }
                    }
                    if known.is_some() {
                        break;
                    }
                } else if let Some(pc) = known {
                    let step = match self.steps[pc as usize] {
                        Step::End => Step::End,
                        _ => Step::Goto(pc),
                    };
                    self.steps.push(step);
                    break;
                }
                if st.pending.is_empty() {
                    self.memo.insert(st, self.steps.len() as u32);
                    self.steps.push(Step::End);
                    break;
                }
                self.memo.insert(st.clone(), self.steps.len() as u32);
                self.loop_heads(&mut st);
                let (_, next, test) = st.pending.remove(0);
                let next = next as usize;
                if self.kind[next].is_some() && next != root {
                    // A root is reached through has-been-stitched lookups, not here.
                    continue;
                }
                let block = Block::from_u32(next as u32);
                self.steps.push(Step::Stitch { block, test });
                let insertable = |b: usize| !s.back.contains(&(next, b)) && self.kind[b].is_none();
                if s.static_branch[next] {
                    let arms: Vec<State> = s.succs[next]
                        .iter()
                        .map(|&b| {
                            let mut a = st.clone();
                            if insertable(b) {
                                a.insert(s.topo[b], b, false);
                            }
                            a
                        })
                        .collect();
                    if arms.iter().all(|a| *a == arms[0]) {
                        st = arms.into_iter().next().unwrap_or(st);
                        continue;
                    }
                    let fork = self.steps.len();
                    self.steps.push(Step::Fork {
                        block,
                        arms: vec![0; arms.len()],
                    });
                    // Arm 0 is built first (pushed last).
                    for (k, a) in arms.into_iter().enumerate().rev() {
                        stack.push((a, Patch::Arm(fork, k)));
                    }
                    break;
                }
                for b in s.forward(next) {
                    if self.kind[b].is_none() {
                        st.insert(s.topo[b], b, false);
                    }
                }
            }
        }
        Some(())
    }

    /// Prunes the loop list before the next block and inserts the loop heads the next
    /// block may need (step 3 of the module documentation).
    fn loop_heads(&mut self, st: &mut State) {
        let s = self.shape;
        let next = st.pending[0].1 as usize;
        let mut dropped: Vec<u32> = Vec::new();
        let mut keep = Vec::with_capacity(st.loops.len());
        for (h, t) in std::mem::take(&mut st.loops) {
            if dropped.contains(&h) {
                continue;
            }
            if h as usize == next {
                dropped.push(h);
            } else if s.topo[t as usize] < s.topo[next] {
                // The tail is behind: this pair no longer matters on this branch.
            } else if self.implies(next, h as usize, t as usize) {
                st.insert(s.topo[h as usize], h as usize, true);
                dropped.push(h);
            } else {
                keep.push((h, t));
            }
        }
        keep.retain(|(h, _)| !dropped.contains(h));
        st.loops = keep;
    }
}

/// The steps a step continues at.
fn continuations(steps: &[Step], pc: usize) -> Vec<usize> {
    match &steps[pc] {
        Step::Stitch { .. } => vec![pc + 1],
        Step::Fork { arms, .. } => arms.iter().map(|&a| a as usize).collect(),
        Step::Goto(t) => vec![*t as usize],
        Step::End => vec![],
    }
}

/// The steps reachable from `starts`, each once, every step after all its continuations
/// (the step graph is acyclic).
fn post_order(steps: &[Step], starts: impl Iterator<Item = u32>) -> Vec<usize> {
    let mut done = vec![false; steps.len()];
    let mut out = Vec::new();
    for s in starts {
        let mut stack = vec![s as usize];
        while let Some(&pc) = stack.last() {
            if done[pc] {
                stack.pop();
                continue;
            }
            let missing: Vec<usize> = continuations(steps, pc)
                .into_iter()
                .filter(|&d| !done[d])
                .collect();
            if missing.is_empty() {
                done[pc] = true;
                out.push(pc);
                stack.pop();
            } else {
                stack.extend(missing);
            }
        }
    }
    out
}

/// The number of steps of the trees without tail merging (every shared suffix counted
/// each time it is reached), saturating.
fn unshared(steps: &[Step], roots: impl Iterator<Item = u32> + Clone) -> u64 {
    let mut size = vec![0u64; steps.len()];
    for pc in post_order(steps, roots.clone()) {
        let sum = continuations(steps, pc)
            .into_iter()
            .fold(0u64, |acc, d| acc.saturating_add(size[d]));
        size[pc] = match &steps[pc] {
            Step::Goto(_) => sum,
            _ => sum.saturating_add(1),
        };
    }
    roots.fold(0u64, |acc, r| acc.saturating_add(size[r as usize]))
}

/// A step with its continuations as canonical node numbers (`goto`s resolved).
#[derive(Clone, PartialEq, Eq, Hash)]
enum Node {
    Stitch(Block, bool, usize),
    Fork(Block, Vec<usize>),
    End,
}

/// Merges near-identical tails: where one arm of a fork stitches a subsequence of what
/// another arm stitches from the same block on, before one shared continuation, the
/// shorter arm jumps into the longer one, and the blocks only the longer one needs become
/// NTBS tests (the planned stitcher stitches a block only if an edge filled its slot, so on
/// the shorter arm's path they are skipped).
///
/// Acceptance rule: merge when the tests added (blocks the shorter arm now passes over)
/// are no more than the steps saved (the shorter arm's own steps). Conditions that keep it
/// sound: the shorter arm's steps are reached from nowhere else (so they do go away), and
/// every block passed over has one `stitch` step in the whole plan (so its slot cannot be
/// filled on the shorter arm's path: a block reached there would be in that path's list).
/// A fork whose arms all merge disappears. Returns the roots' nodes (a root's first node
/// may be such a fork).
fn merge_near_identical(nodes: &mut [Node], roots: &[usize]) -> Vec<usize> {
    let mut indegree = vec![0u32; nodes.len()];
    let mut steps_of: HashMap<Block, u32> = HashMap::new();
    let mut seen = vec![false; nodes.len()];
    let mut stack: Vec<usize> = roots.to_vec();
    for &r in roots {
        indegree[r] += 1;
    }
    while let Some(k) = stack.pop() {
        if std::mem::replace(&mut seen[k], true) {
            continue;
        }
        let next: Vec<usize> = match &nodes[k] {
            Node::Stitch(b, _, n) => {
                *steps_of.entry(*b).or_default() += 1;
                vec![*n]
            }
            Node::Fork(_, arms) => arms.clone(),
            Node::End => Vec::new(),
        };
        for n in next {
            indegree[n] += 1;
            stack.push(n);
        }
    }
    // The chain of `stitch` nodes from `k`: (node, block) up to the first other node.
    let chain = |nodes: &[Node], mut k: usize| {
        let mut out = Vec::new();
        while let Node::Stitch(b, _, n) = &nodes[k] {
            out.push((k, *b));
            k = *n;
        }
        (out, k)
    };
    for f in 0..nodes.len() {
        let Node::Fork(_, arms) = &nodes[f] else {
            continue;
        };
        if !seen[f] {
            continue;
        }
        let mut arms = arms.clone();
        for j in 0..arms.len() {
            // The shorter arm's own steps: up to its first shared node.
            let (mut short, after) = chain(nodes, arms[j]);
            let own = short
                .iter()
                .position(|&(k, _)| indegree[k] != 1)
                .unwrap_or(short.len());
            let tail = short.get(own).map_or(after, |&(k, _)| k);
            short.truncate(own);
            // The shorter arm keeps `short[..p]` and jumps into the longer arm where
            // `short[p]` is stitched; the earliest split that is accepted wins.
            'split: for p in 0..short.len() {
                let rest = &short[p..];
                let first = rest[0].1;
                for i in (0..arms.len()).filter(|&i| i != j && arms[i] != arms[j]) {
                    let (long, long_tail) = chain(nodes, arms[i]);
                    let Some(start) = long.iter().position(|&(_, b)| b == first) else {
                        continue;
                    };
                    // The shorter arm's continuation must be where the longer one goes
                    // on: inside the longer chain, or the same node after it.
                    let end = long
                        .iter()
                        .position(|&(k, _)| k == tail)
                        .unwrap_or(long.len());
                    if end == long.len() && long_tail != tail || end <= start {
                        continue;
                    }
                    let long = &long[start..end];
                    // The blocks the shorter arm passes over, if it is a subsequence.
                    let mut extra = Vec::new();
                    let mut want = rest.iter().map(|&(_, b)| b).peekable();
                    for &(k, b) in long {
                        if want.peek() == Some(&b) {
                            want.next();
                        } else {
                            extra.push(k);
                        }
                    }
                    if want.peek().is_some() || extra.len() > rest.len() {
                        continue;
                    }
                    let sound = extra.iter().all(|&k| match &nodes[k] {
                        Node::Stitch(b, _, _) => steps_of.get(b) == Some(&1),
                        _ => false,
                    });
                    // A fork at the end reads the branch of the block stitched last: both
                    // arms must end with the same block.
                    let same_last = !matches!(nodes[tail], Node::Fork(..))
                        || long.last().map(|&(_, b)| b) == rest.last().map(|&(_, b)| b);
                    if !sound || !same_last {
                        continue;
                    }
                    for &k in &extra {
                        if let Node::Stitch(_, test, _) = &mut nodes[k] {
                            *test = true;
                        }
                    }
                    for &(k, b) in rest {
                        indegree[k] = 0;
                        if let Some(c) = steps_of.get_mut(&b) {
                            *c -= 1;
                        }
                    }
                    let target = long[0].0;
                    indegree[target] += 1;
                    match p {
                        0 => arms[j] = target,
                        _ => {
                            if let Node::Stitch(_, _, next) = &mut nodes[short[p - 1].0] {
                                *next = target;
                            }
                        }
                    }
                    break 'split;
                }
            }
        }
        if let Node::Fork(_, a) = &mut nodes[f] {
            *a = arms;
        }
    }
    // A fork whose arms all merged is no fork any more: its users go to the arm.
    let resolve = |nodes: &[Node], mut k: usize| {
        while let Node::Fork(_, arms) = &nodes[k] {
            if arms.iter().any(|&a| a != arms[0]) {
                break;
            }
            k = arms[0];
        }
        k
    };
    for k in 0..nodes.len() {
        match nodes[k].clone() {
            Node::Stitch(b, t, n) => nodes[k] = Node::Stitch(b, t, resolve(nodes, n)),
            Node::Fork(b, arms) => {
                nodes[k] = Node::Fork(b, arms.iter().map(|&a| resolve(nodes, a)).collect())
            }
            Node::End => {}
        }
    }
    roots.iter().map(|&r| resolve(nodes, r)).collect()
}

/// Tail merging proper: shares every identical suffix of the step graph (the states of
/// the builder tell apart some suffixes whose steps are the same), by hash-consing its
/// nodes bottom-up, then lays the nodes out again from the roots, falling through to a
/// `stitch`'s continuation where it is not laid out yet and jumping to it otherwise.
/// Returns the steps and the new first step of each root (indexed like `root_pc`).
fn merge_tails(steps: &[Step], order: &[usize], root_pc: &[u32]) -> (Vec<Step>, Vec<u32>) {
    // Canonical node of each step, in post-order (the step graph is acyclic).
    let mut canon: Vec<usize> = vec![0; steps.len()];
    let mut nodes: Vec<Node> = Vec::new();
    let mut intern: HashMap<Node, usize> = HashMap::new();
    for pc in post_order(steps, order.iter().map(|&r| root_pc[r])) {
        let node = match &steps[pc] {
            Step::Stitch { block, test } => Node::Stitch(*block, *test, canon[pc + 1]),
            Step::Fork { block, arms } => {
                Node::Fork(*block, arms.iter().map(|&a| canon[a as usize]).collect())
            }
            Step::Goto(t) => {
                canon[pc] = canon[*t as usize];
                continue;
            }
            Step::End => Node::End,
        };
        canon[pc] = *intern.entry(node.clone()).or_insert_with(|| {
            nodes.push(node);
            nodes.len() - 1
        });
    }
    let roots: Vec<usize> = order.iter().map(|&r| canon[root_pc[r] as usize]).collect();
    let roots = merge_near_identical(&mut nodes, &roots);
    // Lay out from the roots.
    let mut at: Vec<Option<u32>> = vec![None; nodes.len()];
    let mut out: Vec<Step> = Vec::new();
    let mut patches: Vec<(usize, usize, usize)> = Vec::new(); // (fork step, arm, node)
    let mut new_root = vec![0u32; root_pc.len()];
    let mut queue: Vec<usize> = Vec::new();
    for (&r, &node) in order.iter().zip(&roots) {
        queue.push(node);
        while let Some(mut k) = queue.pop() {
            while at[k].is_none() {
                at[k] = Some(out.len() as u32);
                match &nodes[k] {
                    Node::Stitch(block, test, next) => {
                        out.push(Step::Stitch {
                            block: *block,
                            test: *test,
                        });
                        if let Some(pc) = at[*next] {
                            out.push(match nodes[*next] {
                                Node::End => Step::End,
                                _ => Step::Goto(pc),
                            });
                        }
                        k = *next;
                    }
                    Node::Fork(block, arms) => {
                        let fork = out.len();
                        out.push(Step::Fork {
                            block: *block,
                            arms: vec![0; arms.len()],
                        });
                        for (j, &a) in arms.iter().enumerate().rev() {
                            patches.push((fork, j, a));
                            queue.push(a);
                        }
                    }
                    Node::End => out.push(Step::End),
                }
            }
        }
        new_root[r] = at[node].unwrap_or(0);
    }
    for (fork, j, a) in patches {
        if let Step::Fork { arms, .. } = &mut out[fork] {
            arms[j] = at[a].unwrap_or(0);
        }
    }
    (out, new_root)
}

/// The plan of a stitch program; `None` when the work-list executor must run it (blocks
/// the entry does not reach, or a plan over its budget).
pub fn plan(p: &StitchProgram) -> Option<Plan> {
    let (shape, g) = Shape::new(p)?;
    let n = shape.succs.len();
    let (kind, owner) = roots(p, &shape, &g);
    let outcomes: Vec<Option<Vec<usize>>> = (0..n)
        .map(|v| shape.static_branch[v].then(|| shape.succs[v].clone()))
        .collect();
    let special: Vec<bool> = kind
        .iter()
        .map(|k| matches!(k, Some(RootKind::Special)))
        .collect();
    let reach = Reach::compute_graph(&g, &outcomes, &special);
    let mut b = Builder {
        shape: &shape,
        kind: &kind,
        reach,
        steps: Vec::new(),
        memo: HashMap::new(),
        root_pc: vec![0; n],
        max_steps: MAX_STEPS_PER_BLOCK.saturating_mul(n).max(1024),
    };
    let mut order: Vec<usize> = (0..n).filter(|&v| kind[v].is_some()).collect();
    order.sort_by_key(|&v| shape.topo[v]);
    for &r in &order {
        b.tree(r, &owner)?;
    }
    let unshared_steps = unshared(&b.steps, order.iter().map(|&r| b.root_pc[r]));
    let (steps, root_pc) = merge_tails(&b.steps, &order, &b.root_pc);
    let roots: Vec<Option<(u32, RootKind)>> =
        (0..n).map(|v| kind[v].map(|k| (root_pc[v], k))).collect();
    Some(Plan {
        steps,
        roots,
        rank: shape.topo.clone(),
        unshared_steps,
    })
}

#[cfg(test)]
mod tests;

//! Reachability conditions: for each block, the outcomes of static branches under which
//! specialization reaches it, as exact boolean functions ([`super::bdd`]).
//!
//! From the DyC design notes on eager stitching (`docs/design.md`, "reachability
//! conditions" and the merge classes). A static branch is decided at specialization time,
//! so which blocks a specialization stitches depends on its outcomes; a dynamic branch
//! stitches all its successors. So:
//! - each static branch with `n` outcomes (`then`, `else`; or a switch's cases, then its
//!   default) gets `⌈log2 n⌉` **outcome variables**, the bits of a number: outcome `j < n - 1`
//!   is the number `n - 1 - j`, and the last outcome (`else`, the default) is every number
//!   no other outcome has, so that the outcomes are exclusive and exhaustive. A two-way
//!   branch thus has one variable, true for `then`. Variables are numbered in reverse
//!   post-order, which keeps the diagrams small;
//! - the condition of an edge out of a static branch is the disjunction of the outcomes
//!   that take it; out of any other block it is `true`;
//! - `RC(entry) = true`, `RC(v) = ∨ over in-edges u → v of RC(u) ∧ cond(u → v)`.
//!
//! Two flavours:
//! - **acyclic**: back edges (of one depth-first search from the entry in branch order,
//!   [`super::edges`]) removed; one pass in reverse post-order. This is what merge
//!   classification and splitting reason about;
//! - **cyclic**: back edges followed, the least fixed point by round-robin passes in reverse
//!   post-order (at most one pass per block, usually two or three). This is what stitching
//!   reaches: a loop head entered only through its back edge has `false` acyclically.
//!
//! **Merges** (blocks with two or more in-edges, back edges aside, and specialization
//! points with two or more in-edges counting back edges: the heads of unrolled loops) are
//! classified on the acyclic conditions of their in-edges: **constant** when those are
//! pairwise mutually
//! exclusive (one specialization takes at most one of them), **nonconstant** otherwise;
//! **weird** when the merge introduces a disjunction, `RC(v) ≠ RC(idom(v))` with the
//! dominator tree of the acyclic graph; and **special** when the binding-time analysis made
//! it a specialization point (given by the caller).
//!
//! Cost: `O(E)` BDD operations per pass. The manager has a node budget and the number of
//! variables is capped: beyond either, [`Reach::compute_graph`] returns `None` (callers treat
//! every block as reachable).

use super::bdd::{Bdd, Manager};
use super::cfg::{ControlFlowGraph, Graph};
use super::dominators::idoms_lengauer_tarjan;
use super::edges::{classify, EdgeKind};
use super::order::DfsOrder;
use crate::bta::Bta;
use crate::ir::{Block, Function, InstData};

/// Most outcome variables a function may have.
pub const MAX_VARS: u32 = 1024;
/// Most BDD nodes.
pub const MAX_NODES: usize = 1 << 20;

/// How a merge's in-edges relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Merge {
    /// In-edge conditions pairwise exclusive.
    pub constant: bool,
    /// The merge introduces a disjunction.
    pub weird: bool,
    /// A specialization point of the binding-time analysis.
    pub special: bool,
}

impl Merge {
    pub fn name(self) -> String {
        let kind = if self.constant {
            "constant"
        } else {
            "nonconstant"
        };
        let weird = if self.weird { " weird" } else { "" };
        let special = if self.special { " special" } else { "" };
        format!("{kind}{weird}{special}")
    }
}

/// Reachability conditions of a graph (dense nodes, entry 0).
#[derive(Clone, Debug)]
pub struct Reach {
    pub mgr: Manager,
    /// Per node with a static branch: its first variable and number of variables.
    pub vars: Vec<Option<(u32, u32)>>,
    /// The node each variable belongs to.
    pub var_node: Vec<usize>,
    /// Per node, its out-edges with their local conditions.
    pub out: Vec<Vec<(usize, Bdd)>>,
    /// The back edges `(from, to)`, sorted.
    back: Vec<(usize, usize)>,
    /// Acyclic reachability condition per node (`false` if unreachable).
    pub acyclic: Vec<Bdd>,
    /// Reachability condition with back edges followed.
    pub cyclic: Vec<Bdd>,
    /// Merge class per node (`None` if not a merge).
    pub merges: Vec<Option<Merge>>,
}

impl Reach {
    /// `outcomes[n]`: for a node ending in a static branch, the successor each outcome
    /// takes, in order (two or more; repeats allowed); `None` for any other node.
    /// `special[n]`: node `n` is a specialization point. `None` over the budget.
    pub fn compute_graph(
        g: &Graph,
        outcomes: &[Option<Vec<usize>>],
        special: &[bool],
    ) -> Option<Reach> {
        let n = g.len();
        let dfs = DfsOrder::compute(g, 0);
        let rpo = dfs.rpo();
        let mut mgr = Manager::new(MAX_NODES);
        // Variables in reverse post-order.
        let mut vars = vec![None; n];
        let mut var_node = Vec::new();
        for &v in &rpo {
            if let Some(o) = outcomes.get(v).and_then(Option::as_ref) {
                if o.len() >= 2 {
                    let bits = usize::BITS - (o.len() - 1).leading_zeros();
                    vars[v] = Some((var_node.len() as u32, bits));
                    var_node.extend(std::iter::repeat_n(v, bits as usize));
                }
            }
        }
        if var_node.len() as u32 > MAX_VARS {
            return None;
        }
        // Local edge conditions.
        let mut out: Vec<Vec<(usize, Bdd)>> = vec![Vec::new(); n];
        for v in 0..n {
            match (vars[v], outcomes.get(v).and_then(Option::as_ref)) {
                (Some((first, bits)), Some(o)) => {
                    let mut codes = Vec::with_capacity(o.len());
                    let mut any = Bdd::FALSE;
                    for j in 0..o.len() - 1 {
                        let mut code = Bdd::TRUE;
                        let number = o.len() - 1 - j;
                        for k in 0..bits {
                            let x = mgr.var(first + k)?;
                            let lit = if number >> k & 1 == 1 { x } else { mgr.not(x)? };
                            code = mgr.and(code, lit)?;
                        }
                        any = mgr.or(any, code)?;
                        codes.push(code);
                    }
                    codes.push(mgr.not(any)?);
                    for &s in &g.succs[v] {
                        let mut c = Bdd::FALSE;
                        for (j, &t) in o.iter().enumerate() {
                            if t == s {
                                c = mgr.or(c, codes[j])?;
                            }
                        }
                        out[v].push((s, c));
                    }
                }
                _ => out[v] = g.succs[v].iter().map(|&s| (s, Bdd::TRUE)).collect(),
            }
        }
        let mut back: Vec<(usize, usize)> = g
            .edges()
            .filter(|&(a, b)| classify(&dfs, a, b) == Some(EdgeKind::Back))
            .collect();
        back.sort_unstable();
        let is_back = |a: usize, b: usize| back.binary_search(&(a, b)).is_ok();
        // Acyclic conditions: one pass in reverse post-order.
        let mut acyclic = vec![Bdd::FALSE; n];
        if n > 0 {
            acyclic[0] = Bdd::TRUE;
        }
        for &v in &rpo {
            for &(s, c) in &out[v] {
                if !is_back(v, s) {
                    let e = mgr.and(acyclic[v], c)?;
                    acyclic[s] = mgr.or(acyclic[s], e)?;
                }
            }
        }
        // Cyclic conditions: round-robin to the fixed point.
        let mut cyclic = acyclic.clone();
        loop {
            let mut changed = false;
            for &v in &rpo {
                for &(s, c) in &out[v] {
                    let e = mgr.and(cyclic[v], c)?;
                    let r = mgr.or(cyclic[s], e)?;
                    if r != cyclic[s] {
                        cyclic[s] = r;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        // Merges, on the acyclic graph and its dominator tree.
        let forward: Vec<(usize, usize)> = g
            .edges()
            .filter(|&(a, b)| dfs.is_reachable(a) && !is_back(a, b))
            .collect();
        let acyclic_graph = Graph::from_unique_edges(n, &forward);
        let idom = if n > 0 {
            idoms_lengauer_tarjan(&acyclic_graph, 0)
        } else {
            Vec::new()
        };
        let mut merges = vec![None; n];
        for v in 0..n {
            let ins: Vec<Bdd> = acyclic_graph.preds[v]
                .iter()
                .map(|&u| {
                    let c = out[u]
                        .iter()
                        .find(|&&(s, _)| s == v)
                        .map_or(Bdd::FALSE, |e| e.1);
                    mgr.and(acyclic[u], c)
                })
                .collect::<Option<_>>()?;
            let is_special = special.get(v).copied().unwrap_or(false);
            let all_ins = g.preds[v].iter().filter(|&&u| dfs.is_reachable(u)).count();
            if ins.len() < 2 && !(is_special && all_ins >= 2) {
                continue;
            }
            let mut constant = true;
            'pairs: for (i, &a) in ins.iter().enumerate() {
                for &b in &ins[i + 1..] {
                    if !mgr.exclusive(a, b)? {
                        constant = false;
                        break 'pairs;
                    }
                }
            }
            let weird = idom[v].is_some_and(|d| acyclic[d] != acyclic[v]);
            merges[v] = Some(Merge {
                constant,
                weird,
                special: is_special,
            });
        }
        Some(Reach {
            mgr,
            vars,
            var_node,
            out,
            back,
            acyclic,
            cyclic,
            merges,
        })
    }

    /// Whether `a -> b` is a back edge.
    pub fn is_back(&self, a: usize, b: usize) -> bool {
        self.back.binary_search(&(a, b)).is_ok()
    }
}

/// Reachability conditions of a function under its binding-time analysis.
#[derive(Clone, Debug)]
pub struct FunctionReach {
    pub cfg: ControlFlowGraph,
    pub reach: Reach,
}

impl FunctionReach {
    /// `None` if the function has more static outcomes than [`MAX_VARS`] or its conditions
    /// exceed [`MAX_NODES`].
    pub fn compute(f: &Function, bta: &Bta) -> Option<FunctionReach> {
        let cfg = ControlFlowGraph::compute(f);
        let node = |b: Block| cfg.node(b);
        let mut outcomes = vec![None; cfg.num_blocks()];
        let mut special = vec![false; cfg.num_blocks()];
        for (n, &b) in cfg.blocks().iter().enumerate() {
            special[n] = bta.is_spec_point(b);
            let Some(term) = f.terminator(b) else {
                continue;
            };
            let data = &f.insts[term];
            if !matches!(data, InstData::Brif { .. } | InstData::Switch { .. })
                || !bta.branch_is_static(f, b)
            {
                continue;
            }
            // Brif: then, else; switch: the cases, then the default.
            let targets: Vec<Block> = match data {
                InstData::Switch { cases, default, .. } => cases
                    .iter()
                    .map(|(_, c)| c.block)
                    .chain([default.block])
                    .collect(),
                _ => data.branch_targets().map(|c| c.block).collect(),
            };
            outcomes[n] = targets
                .into_iter()
                .map(node)
                .collect::<Option<Vec<usize>>>();
        }
        let reach = Reach::compute_graph(cfg.graph(), &outcomes, &special)?;
        Some(FunctionReach { cfg, reach })
    }

    /// The name of variable `v`: the block of its static branch, with the bit for a switch.
    pub fn var_name(&self, v: u32) -> String {
        let n = self.reach.var_node[v as usize];
        let b = self.cfg.block(n);
        match self.reach.vars[n] {
            Some((first, bits)) if bits > 1 => format!("{b}#{}", v - first),
            _ => b.to_string(),
        }
    }

    /// A condition as text over the branches' names.
    pub fn text(&self, c: Bdd) -> String {
        self.reach.mgr.to_text(c, &|v| self.var_name(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph from named edges; `statics` are two-way static branches (then, else).
    fn build(
        names: &[&str],
        edges: &[(&str, &str)],
        statics: &[(&str, &str, &str)],
    ) -> (Reach, impl Fn(&str) -> usize) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let id = move |s: &str| names.iter().position(|n| n == s).expect("named node");
        let g = Graph::from_edges(
            names_len(&id, edges),
            edges.iter().map(|&(a, b)| (id(a), id(b))),
        );
        let mut outcomes = vec![None; g.len()];
        for &(v, t, e) in statics {
            outcomes[id(v)] = Some(vec![id(t), id(e)]);
        }
        let r = Reach::compute_graph(&g, &outcomes, &vec![false; g.len()]).expect("budget");
        (r, id)
    }

    fn names_len(id: &dyn Fn(&str) -> usize, edges: &[(&str, &str)]) -> usize {
        edges
            .iter()
            .map(|&(a, b)| id(a).max(id(b)) + 1)
            .max()
            .unwrap_or(1)
    }

    fn class(r: &Reach, n: usize) -> Option<String> {
        r.merges[n].map(Merge::name)
    }

    /// `if (D && S) {A} else {B} M`: B and M are nonconstant merges, not weird; A is
    /// reached only when S is true.
    #[test]
    fn d_and_s() {
        let (mut r, id) = build(
            &["D", "S", "A", "B", "M"],
            &[
                ("D", "S"),
                ("D", "B"),
                ("S", "A"),
                ("S", "B"),
                ("A", "M"),
                ("B", "M"),
            ],
            &[("S", "A", "B")],
        );
        let s = r.mgr.var(0).unwrap();
        assert_eq!(r.acyclic[id("A")], s);
        assert!(r.acyclic[id("B")].is_true() && r.acyclic[id("M")].is_true());
        assert_eq!(class(&r, id("B")).as_deref(), Some("nonconstant"));
        assert_eq!(class(&r, id("M")).as_deref(), Some("nonconstant"));
    }

    /// S over D: B is a constant merge, M a nonconstant one.
    #[test]
    fn s_over_d() {
        let (r, id) = build(
            &["S", "D", "A", "B", "M"],
            &[
                ("S", "D"),
                ("S", "B"),
                ("D", "A"),
                ("D", "B"),
                ("A", "M"),
                ("B", "M"),
            ],
            &[("S", "D", "B")],
        );
        assert_eq!(class(&r, id("B")).as_deref(), Some("constant"));
        assert_eq!(class(&r, id("M")).as_deref(), Some("nonconstant"));
    }

    /// S1 over S2: B and M are constant merges and B is weird (its condition is an OR).
    #[test]
    fn s1_over_s2() {
        let (r, id) = build(
            &["S1", "S2", "A", "B", "M"],
            &[
                ("S1", "S2"),
                ("S1", "B"),
                ("S2", "A"),
                ("S2", "B"),
                ("A", "M"),
                ("B", "M"),
            ],
            &[("S1", "S2", "B"), ("S2", "A", "B")],
        );
        assert_eq!(class(&r, id("B")).as_deref(), Some("constant weird"));
        assert_eq!(class(&r, id("M")).as_deref(), Some("constant"));
    }

    /// The ENTRY/1…10/EXIT graph: with a static branch at 1, merges 8 and 9 are constant
    /// weird merges and 10 a constant merge; with a dynamic branch at 1 instead, 8 is a
    /// nonconstant weird merge and 9 and 10 nonconstant merges.
    #[test]
    fn entry_one_to_ten_exit() {
        let names = [
            "ENTRY", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "EXIT",
        ];
        let edges = [
            ("ENTRY", "1"),
            ("1", "2"),
            ("1", "3"),
            ("2", "4"),
            ("2", "5"),
            ("3", "6"),
            ("3", "7"),
            ("4", "9"),
            ("5", "8"),
            ("6", "8"),
            ("7", "10"),
            ("8", "9"),
            ("9", "10"),
            ("10", "EXIT"),
        ];
        let (r, id) = build(
            &names,
            &edges,
            &[("1", "2", "3"), ("2", "4", "5"), ("3", "6", "7")],
        );
        assert_eq!(class(&r, id("8")).as_deref(), Some("constant weird"));
        assert_eq!(class(&r, id("9")).as_deref(), Some("constant weird"));
        assert_eq!(class(&r, id("10")).as_deref(), Some("constant"));
        assert!(r.acyclic[id("EXIT")].is_true());
        let (r, id) = build(&names, &edges, &[("2", "4", "5"), ("3", "6", "7")]);
        assert_eq!(class(&r, id("8")).as_deref(), Some("nonconstant weird"));
        assert_eq!(class(&r, id("9")).as_deref(), Some("nonconstant"));
        assert_eq!(class(&r, id("10")).as_deref(), Some("nonconstant"));
    }

    /// A loop entered at its side (the multiple-entry example): under `¬S` the head H is
    /// reached only through the back edge T -> H, so its acyclic condition is `S` and its
    /// cyclic one `true`.
    #[test]
    fn cyclic_conditions_follow_back_edges() {
        let (r, id) = build(
            &["E", "S", "A", "B", "H", "T", "X"],
            &[
                ("E", "S"),
                ("S", "A"),
                ("S", "B"),
                ("A", "H"),
                ("H", "T"),
                ("B", "T"),
                ("T", "H"),
                ("T", "X"),
            ],
            &[("S", "A", "B")],
        );
        assert!(r.is_back(id("T"), id("H")));
        assert_eq!(r.acyclic[id("H")], r.acyclic[id("A")]);
        assert!(!r.acyclic[id("H")].is_true());
        assert!(r.cyclic[id("H")].is_true());
        assert_eq!(class(&r, id("T")).as_deref(), Some("constant"));
    }
}

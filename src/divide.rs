//! Polyvariant division (DyC's `poly_divide`): where a variable annotated `poly_divide`
//! reaches a merge static on some paths and dynamic on others, the merge and the code after
//! it are duplicated per division, so that the paths that bring a static value keep it
//! static; under `mono_divide` (the default) the variable is dynamic after such a merge.
//!
//! **How.** The binding-time analysis finds a *mixed merge*: a block parameter of a
//! `poly_divide` variable whose incoming arguments are static on some edges and dynamic on
//! others. The blocks reachable from the merge (`R`, closed under successors) get a second
//! instance, the *static division*; edges into the merge whose argument is static go to the
//! merge's copy, the others to the original, and every edge inside the copy stays in the
//! copy. Because `R` is closed under successors no copy ever rejoins the original, so no
//! value needs new block parameters: a value defined before the merge dominates both
//! instances, and a value defined in `R` is renamed in the copy (the elaboration of
//! [`crate::reducify`], whose instances are here the two divisions). Then the analysis runs
//! again; a merge that is still mixed (a loop whose back edge brings a dynamic value into
//! the copy too) is divided again within the budget, and left to generalize beyond it.
//!
//! **Budget.** Duplication doubles the code after the merge each time. The pass divides at
//! most [`MAX_ROUNDS`] merges and stops before the function would exceed
//! [`crate::reducify::max_blocks`] of its original size; past either, remaining mixed
//! merges generalize to dynamic as under `mono_divide` (a correct, less specialized result).

use std::collections::HashSet;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::dominators::DominatorTree;
use crate::bta::{self, Mode};
use crate::ir::{Block, Function, InstData, Module, Policy, PolicyGroup, Var};
use crate::reducify::{elaborate, Instances};

/// Merges divided at most per function.
pub const MAX_ROUNDS: usize = 8;

/// Divides the mixed merges of `poly_divide` variables in `f` (a function of `m`);
/// returns how many merges were divided.
pub fn poly_divide(m: &Module, f: &mut Function) -> usize {
    let vars = poly_vars(f);
    if vars.is_empty() {
        return 0;
    }
    let limit = crate::reducify::max_blocks(f.layout.blocks().len());
    let mut divided = 0;
    for _ in 0..MAX_ROUNDS {
        let bta = bta::analyze(m, f, Mode::Specialize);
        if !bta.errors.is_empty() {
            break;
        }
        let cfg = ControlFlowGraph::compute(f);
        let Some((merge, param)) = mixed_merge(f, &cfg, &vars, |v| bta.is_static(v)) else {
            break;
        };
        let region = dominated(&cfg, merge);
        if cfg.num_blocks() + region.len() > limit {
            break;
        }
        let inst = divisions(f, &cfg, merge, param, &region, |v| bta.is_static(v));
        elaborate(f, &cfg, &inst);
        divided += 1;
    }
    divided
}

/// The variables whose first annotation giving a division policy gives `poly_divide`.
fn poly_vars(f: &Function) -> HashSet<Var> {
    let mut seen = HashSet::new();
    let mut poly = HashSet::new();
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            if let InstData::MakeStatic { args, policies } = &f.insts[i] {
                if let Some(p) = policies.get(PolicyGroup::Division) {
                    for &(_, v) in args.iter() {
                        if seen.insert(v) && p == Policy::PolyDivide {
                            poly.insert(v);
                        }
                    }
                }
            }
        }
    }
    poly
}

/// The first block (in layout order, the entry excepted) with a parameter of a `poly_divide` variable whose
/// incoming arguments are static on some edges and dynamic on others: (block, parameter
/// position).
fn mixed_merge(
    f: &Function,
    cfg: &ControlFlowGraph,
    vars: &HashSet<Var>,
    is_static: impl Fn(crate::ir::Value) -> bool,
) -> Option<(Block, usize)> {
    // The entry block's parameters are the function's: it is never divided.
    for &b in f.layout.blocks().iter().skip(1) {
        for (k, &p) in f.block_params(b).iter().enumerate() {
            if !f.values[p].var.is_some_and(|v| vars.contains(&v)) || is_static(p) {
                continue;
            }
            let (mut st, mut dy) = (false, false);
            for pred in cfg.preds(b) {
                let t = f.terminator(pred).expect("a terminator");
                for call in f.insts[t].branch_targets().filter(|c| c.block == b) {
                    if is_static(call.args[k]) {
                        st = true;
                    } else {
                        dy = true;
                    }
                }
            }
            if st && dy {
                return Some((b, k));
            }
        }
    }
    None
}

/// The blocks `b` dominates, `b` included (each reachable from `b`).
fn dominated(cfg: &ControlFlowGraph, b: Block) -> HashSet<Block> {
    let dt = DominatorTree::compute(cfg);
    let mut seen = HashSet::new();
    let mut stack = vec![b];
    while let Some(x) = stack.pop() {
        if seen.insert(x) {
            stack.extend(dt.children(x));
        }
    }
    seen
}

/// The instances of the division at `merge`: context 0 is the original (and the dynamic
/// division), context 1 the static division's copy of `region`. An edge into `merge` whose
/// argument for `param` is static (every such branch target of its source) enters the
/// copy; an edge from the copy stays in it while its target is in `region`.
fn divisions(
    f: &Function,
    cfg: &ControlFlowGraph,
    merge: Block,
    param: usize,
    region: &HashSet<Block>,
    is_static: impl Fn(crate::ir::Value) -> bool,
) -> Instances {
    let g = cfg.graph();
    let entry = 0;
    let mut index = std::collections::HashMap::from([((0usize, entry), 0usize)]);
    let mut out = Instances {
        order: vec![(0, entry)],
        targets: Vec::new(),
    };
    let m = cfg.node(merge).expect("a reachable block");
    let mut k = 0;
    while k < out.order.len() {
        let (ctx, x) = out.order[k];
        let xb = cfg.block(x);
        let mut to = Vec::with_capacity(g.succs[x].len());
        for &s in &g.succs[x] {
            let next = if ctx == 1 && region.contains(&cfg.block(s)) {
                1
            } else if s == m {
                let t = f.terminator(xb).expect("a terminator");
                let all_static = f.insts[t]
                    .branch_targets()
                    .filter(|c| c.block == merge)
                    .all(|c| is_static(c.args[param]));
                usize::from(all_static)
            } else {
                0
            };
            let id = *index.entry((next, s)).or_insert_with(|| {
                out.order.push((next, s));
                out.order.len() - 1
            });
            to.push(id);
        }
        out.targets.push(to);
        k += 1;
    }
    out
}

//! Automatic promotion (DyC's `auto_promote`, the default promotion policy): wherever an
//! annotated variable may receive a dynamic value, a promotion is inserted, so that the
//! variable stays a run-time constant instead of becoming dynamic. With `manual_promote`,
//! only the programmer's `make_static` annotations promote.
//!
//! **Where.** A variable receives a value at an assignment, but the IR records the variable
//! only where values of it merge: block parameters (`v4: u64 as pc`). So the pass looks at
//! the edges into those parameters: an edge whose argument for the parameter of an
//! annotated variable is dynamic (by the binding-time analysis), reached after an
//! annotation of that variable, is split by a block that promotes the argument
//! (`make_static a as pc`, with the policies of the variable's first annotation) and then
//! jumps on with the promoted value. Promoting on the edge, not at the merge, keeps the
//! merge itself a specialization point when its other edges bring static values (an
//! interpreter's loop head over `pc`: only the indirect jump's edge dispatches).
//!
//! **Iteration.** Inserting promotions makes more values static, which may change the
//! analysis elsewhere; the pass analyzes again until no edge qualifies (each round only
//! adds promotions, and an edge's promoted argument is static, so it ends after at most as
//! many rounds as there are such edges; a small bound guards it).
//!
//! Only scalar values are promoted: slices and local arrays cannot be run-time constants
//! by promotion.

use std::collections::{HashMap, HashSet};

use crate::analysis::cfg::ControlFlowGraph;
use crate::bta::{self, Mode};
use crate::ir::{
    Block, BlockCall, Function, InstData, Module, Policies, Policy, PolicyGroup, Value, Var,
};

/// Rounds of analysis and insertion at most.
const MAX_ROUNDS: usize = 8;

/// Inserts the promotions `auto_promote` asks for into `f` (a function of `m`); returns
/// how many were inserted.
pub fn auto_promote(m: &Module, f: &mut Function) -> usize {
    let mut inserted = 0;
    for _ in 0..MAX_ROUNDS {
        let bta = bta::analyze(m, f, Mode::Specialize);
        if !bta.errors.is_empty() {
            // The annotations are in error: the caller reports it with its own analysis.
            return inserted;
        }
        let edges = qualifying_edges(f, |v| bta.is_static(v));
        if edges.is_empty() {
            break;
        }
        inserted += edges.len();
        for e in edges {
            insert(f, e);
        }
    }
    inserted
}

/// An edge to promote on: the source block, the index of the edge among its
/// terminator's branch targets, and the (parameter position, variable, policies) to
/// promote.
struct PromoteEdge {
    from: Block,
    target: usize,
    params: Vec<(usize, Var, Policies)>,
}

/// Per annotated variable with `auto_promote` (the default), the policies of its first
/// annotation and the blocks that annotations of it reach (successors of the annotated
/// blocks, transitively).
fn annotated(f: &Function) -> HashMap<Var, (Policies, HashSet<Block>)> {
    let cfg = ControlFlowGraph::compute(f);
    let mut first: HashMap<Var, (Policies, Vec<Block>)> = HashMap::new();
    let mut manual: HashSet<Var> = HashSet::new();
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            if let InstData::MakeStatic { args, policies } = &f.insts[i] {
                for &(_, v) in args.iter() {
                    if policies.get(PolicyGroup::Promotion) == Some(Policy::ManualPromote) {
                        manual.insert(v);
                    }
                    first
                        .entry(v)
                        .or_insert_with(|| (policies.clone(), Vec::new()))
                        .1
                        .push(b);
                }
            }
        }
    }
    first
        .into_iter()
        .filter(|(v, _)| !manual.contains(v))
        .map(|(v, (policies, blocks))| {
            let mut reached = HashSet::new();
            let mut stack: Vec<Block> = blocks.iter().flat_map(|&b| cfg.succs(b)).collect();
            while let Some(b) = stack.pop() {
                if reached.insert(b) {
                    stack.extend(cfg.succs(b));
                }
            }
            (v, (policies, reached))
        })
        .collect()
}

/// The edges that bring a dynamic scalar into a parameter of an annotated variable.
fn qualifying_edges(f: &Function, is_static: impl Fn(Value) -> bool) -> Vec<PromoteEdge> {
    let vars = annotated(f);
    if vars.is_empty() {
        return Vec::new();
    }
    let mut edges = Vec::new();
    for &from in f.layout.blocks() {
        let Some(t) = f.terminator(from) else {
            continue;
        };
        for (target, call) in f.insts[t].branch_targets().enumerate() {
            let mut params = Vec::new();
            for (k, (&p, &a)) in f
                .block_params(call.block)
                .iter()
                .zip(call.args.iter())
                .enumerate()
            {
                let Some(var) = f.values[p].var else {
                    continue;
                };
                let Some((policies, reached)) = vars.get(&var) else {
                    continue;
                };
                if reached.contains(&call.block)
                    && !is_static(a)
                    && f.value_type(a).scalar().is_some()
                {
                    params.push((k, var, policies.clone()));
                }
            }
            if !params.is_empty() {
                edges.push(PromoteEdge {
                    from,
                    target,
                    params,
                });
            }
        }
    }
    edges
}

/// Splits edge `e` with a block that promotes its arguments and jumps on.
fn insert(f: &mut Function, e: PromoteEdge) {
    let t = f.terminator(e.from).expect("a terminator");
    let loc = f.srclocs[t];
    let call = f.insts[t]
        .branch_targets()
        .nth(e.target)
        .expect("the edge")
        .clone();
    let mid = f.append_new_block();
    let mut args: Vec<Value> = call.args.iter().copied().collect();
    // One annotation per parameter: an edge may carry two parameters of one variable,
    // and an annotation names a variable once.
    for (k, var, policies) in e.params {
        let ms = f.append_inst(
            mid,
            InstData::MakeStatic {
                args: [(args[k], var)].into_iter().collect(),
                policies,
            },
            None,
        );
        f.srclocs[ms] = loc;
        args[k] = f.inst_results(ms)[0];
    }
    let j = f.append_inst(
        mid,
        InstData::Jump {
            dest: BlockCall::new(call.block, args),
        },
        None,
    );
    f.srclocs[j] = loc;
    let slot = f.insts[t]
        .branch_targets_mut()
        .nth(e.target)
        .expect("the edge");
    *slot = BlockCall::new(mid, Vec::new());
}

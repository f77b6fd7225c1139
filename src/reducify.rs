//! Reducify: makes every loop of a function single-entry by duplicating code, so that the
//! static transform ([`crate::transform`]) sees only reducible control flow.
//!
//! A region written with `goto` can enter a loop at its side. The splitting algorithm of
//! the transform assumes that a loop is entered through its head (the head dominates its
//! tail); on a loop entered at its side it would stitch a block twice and out of order.
//! This pass removes side entries by *context-sensitive duplication* (the scheme of the
//! waffle compiler's reducifier):
//!
//! 1. **Header sets.** The loop nesting forest ([`crate::analysis::loops`], Steensgaard's:
//!    loops are strongly connected components, nested ones found with the edges into the
//!    entries cut) gives each block the headers (first entry in reverse post-order) of the
//!    loops containing it. (The waffle pass takes every block numbered between a header and
//!    a latch in reverse post-order instead; that range also holds blocks outside the
//!    loop, and copying them too made 37% more blocks instead of 25% on 10,000 random
//!    modules.)
//! 2. **Side entries.** An edge `b → s` enters the loop of header `h` at its side when
//!    `h ∈ headers(s) \ headers(b)` and `h ≠ s`. Without one, the function is left
//!    unchanged.
//! 3. **Max-SSA cut.** Copies of one block made in different contexts rejoin at the targets
//!    of loop exits and of side entries. At those *cut* blocks every value defined in a
//!    block that will have copies, and used at or after them, is passed as a block
//!    parameter, so that after duplication each copy hands its own version along (a value
//!    defined in a block with one instance still dominates all its uses). Elsewhere a value keeps flowing directly; a
//!    parameter created on the way is removed again when all predecessors pass the same
//!    value (the usual trivial-φ elimination). A new parameter carries the source variable
//!    of the value it replaces, so the binding-time analysis treats it like the original.
//! 4. **Elaboration.** A block is instantiated per *context*: the set of loop headers that
//!    were skipped by a side entry and not left since. Following an edge `b → s` from
//!    context `C` gives `headers(s) ∩ (C ∪ ¬headers(b)) \ {s}`: entering a loop at its side
//!    adds its header, passing its header or leaving it removes it. The empty context is the
//!    original block; every other context is a fresh copy with fresh values. A copy reached
//!    through a side entry runs until it reaches the header, where it rejoins the original
//!    loop, which is now entered only through the header.
//! 5. **Rounds.** A loop nested in a loop with a side entry can keep a side entry of its
//!    own in the copies (its forest is only visible once the outer loop is single-entry),
//!    so the steps repeat until no loop has one: two rounds at most on 10,000 random
//!    modules, eight allowed.
//!
//! A local array (`array`) lives in its block's frame and cannot be a block parameter. If
//! one made in a copied block would have to be passed to a cut block, the pass refuses with
//! [`ReducifyError::ArrayAcrossCopies`] (declaring the array before the loop avoids it).
//!
//! Duplication can grow a function exponentially (a state machine whose states all jump to
//! each other). The pass counts the blocks it makes and stops with
//! [`ReducifyError::TooLarge`] beyond the budget ([`max_blocks`]). Unreachable blocks are
//! dropped first (they never run, and the cut needs every block's predecessors to lead to
//! the entry).

use std::collections::{BTreeSet, HashMap};

use cranelift_entity::SecondaryMap;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::dominators::DominatorTree;
use crate::analysis::loops::LoopForest;
use crate::analysis::order::DfsOrder;
use crate::ir::{Block, Function, Inst, Value, ValueDef};

/// Why a function could not be made reducible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReducifyError {
    /// Duplication would make more than `limit` blocks out of `blocks`.
    TooLarge {
        blocks: usize,
        limit: usize,
        /// The branch of a side entry into a loop, for the location of the error.
        side_entry: Inst,
    },
    /// A local array (made by `array`, which cannot be passed between blocks) would have to
    /// flow into a block from different copies.
    ArrayAcrossCopies { array: Inst },
}

impl std::fmt::Display for ReducifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReducifyError::TooLarge { blocks, limit, .. } => write!(
                f,
                "a loop here is entered at its side (not through its first block); making \
                 every loop single-entry would copy the function's {blocks} blocks into more \
                 than {limit}: restructure the loop so that it has one entry"
            ),
            ReducifyError::ArrayAcrossCopies { .. } => write!(
                f,
                "this local array is made inside a loop that is entered at its side and is \
                 used where copies of that loop rejoin; arrays cannot be passed between \
                 blocks: declare it before the loop, or give the loop one entry"
            ),
        }
    }
}

/// The default budget: a function of `n` reachable blocks may grow to `4n + 64` blocks.
pub fn max_blocks(n: usize) -> usize {
    4 * n + 64
}

/// Rounds of duplication before giving up (one suffices unless a loop nested in a loop
/// with a side entry has its own; two were the most on 10,000 random modules).
const MAX_ROUNDS: usize = 8;

/// Makes the loops of `f` single-entry, with at most `limit` blocks in the result: the new
/// function, or `None` if no loop has a side entry. `f` itself is left alone, also on
/// error.
pub fn reducify(f: &Function, limit: usize) -> Result<Option<Function>, ReducifyError> {
    let mut out: Option<Function> = None;
    let blocks = f.layout.blocks().len();
    for _ in 0..MAX_ROUNDS {
        let round = step(out.as_ref().unwrap_or(f), limit).map_err(|e| match e {
            ReducifyError::TooLarge {
                limit, side_entry, ..
            } => ReducifyError::TooLarge {
                blocks,
                limit,
                side_entry,
            },
            e => e,
        })?;
        match round {
            Some(g) => out = Some(g),
            None => return Ok(out),
        }
    }
    // Not converged: refused like a function that grows too much.
    let cfg = ControlFlowGraph::compute(f);
    let first = side_entries(&cfg, &header_sets(&cfg)).1.unwrap_or(0);
    Err(ReducifyError::TooLarge {
        blocks: cfg.num_blocks(),
        limit,
        side_entry: f.terminator(cfg.block(first)).expect("verified"),
    })
}

fn step(f: &Function, limit: usize) -> Result<Option<Function>, ReducifyError> {
    let cfg = ControlFlowGraph::compute(f);
    if !has_side_entry(&cfg) {
        return Ok(None);
    }
    let mut f = f.clone();
    let dfs = DfsOrder::compute(cfg.graph(), 0);
    if (0..cfg.num_blocks()).any(|n| !dfs.is_reachable(n)) {
        let mut keep: SecondaryMap<Block, bool> = SecondaryMap::new();
        for n in (0..cfg.num_blocks()).filter(|&n| dfs.is_reachable(n)) {
            keep[cfg.block(n)] = true;
        }
        f.layout.retain_blocks(|b| keep[b]);
    }
    let cfg = ControlFlowGraph::compute(&f);
    let headers = header_sets(&cfg);
    let n = cfg.num_blocks();
    let g = cfg.graph();
    let (irreducible, side_entry) = side_entries(&cfg, &headers);
    // An irreducible loop of the forest has an entry besides its header, so a CFG with a
    // side entry by dominance has one by header sets too.
    let Some(side_entry) = side_entry.and_then(|b| f.terminator(cfg.block(b))) else {
        return Ok(None);
    };
    let inst = instances(&cfg, &headers);
    if inst.order.len() > limit {
        return Err(ReducifyError::TooLarge {
            blocks: n,
            limit,
            side_entry,
        });
    }
    // Cut blocks: targets of exits from loops with side entries, and of side entries.
    let mut cut = vec![false; n];
    for (b, s) in g.edges() {
        let exits = headers[b]
            .iter()
            .any(|h| irreducible[*h] && !headers[s].contains(h));
        let enters_side = headers[s]
            .iter()
            .any(|&h| h != s && !headers[b].contains(&h));
        if exits || enters_side {
            cut[s] = true;
        }
    }
    let mut copied: SecondaryMap<Block, bool> = SecondaryMap::new();
    for &(ctx, x) in &inst.order {
        if ctx != 0 {
            copied[cfg.block(x)] = true;
        }
    }
    max_ssa(&mut f, &cfg, &cut, &copied)?;
    elaborate(&mut f, &cfg, &inst);
    Ok(Some(f))
}

/// Whether a retreating edge of the reachable part of the CFG enters a block that does not
/// dominate its source (a loop with more than one entry).
pub fn has_side_entry(cfg: &ControlFlowGraph) -> bool {
    let dfs = DfsOrder::compute(cfg.graph(), 0);
    let mut rpo = vec![usize::MAX; cfg.num_blocks()];
    for (k, x) in dfs.rpo().into_iter().enumerate() {
        rpo[x] = k;
    }
    let mut doms = None;
    for (a, b) in cfg.graph().edges() {
        if rpo[a] != usize::MAX && rpo[b] <= rpo[a] {
            let d = doms.get_or_insert_with(|| DominatorTree::compute(cfg));
            if !d.dominates(cfg.block(b), cfg.block(a)) {
                return true;
            }
        }
    }
    false
}

/// The loop headers of each node: the header (first entry in reverse post-order) of every
/// loop of the nesting forest that contains it; sorted.
fn header_sets(cfg: &ControlFlowGraph) -> Vec<Vec<usize>> {
    let forest = LoopForest::compute(cfg);
    (0..cfg.num_blocks())
        .map(|x| {
            let mut hs = Vec::new();
            let mut l = forest.innermost(cfg.block(x));
            while let Some(id) = l {
                hs.push(cfg.node(forest.loops[id].header).expect("in the layout"));
                l = forest.loops[id].parent;
            }
            hs.sort_unstable();
            hs
        })
        .collect()
}

/// The headers entered at their side (as a mask over nodes), and the source of the first
/// side entry.
fn side_entries(cfg: &ControlFlowGraph, headers: &[Vec<usize>]) -> (Vec<bool>, Option<usize>) {
    let mut irreducible = vec![false; cfg.num_blocks()];
    let mut first = None;
    for (b, s) in cfg.graph().edges() {
        for &h in &headers[s] {
            if h != s && !headers[b].contains(&h) {
                irreducible[h] = true;
                first.get_or_insert(b);
            }
        }
    }
    (irreducible, first)
}

/// The instances of blocks the elaboration makes, found before anything changes.
pub(crate) struct Instances {
    /// `(context, node)` in breadth-first order from `(0, entry)`; context 0 (empty) is
    /// the original block.
    pub(crate) order: Vec<(usize, usize)>,
    /// Per instance of `order`, the instance each branch target goes to, in the order of
    /// the terminator's targets.
    pub(crate) targets: Vec<Vec<usize>>,
}

/// Follows the edges from the entry, computing the context of each target (see the module
/// doc) and numbering each new `(context, node)`.
fn instances(cfg: &ControlFlowGraph, headers: &[Vec<usize>]) -> Instances {
    let g = cfg.graph();
    let mut contexts: HashMap<Vec<usize>, usize> = HashMap::from([(Vec::new(), 0)]);
    let mut by_id: Vec<Vec<usize>> = vec![Vec::new()];
    let mut index: HashMap<(usize, usize), usize> = HashMap::from([((0, 0), 0)]);
    let mut out = Instances {
        order: vec![(0, 0)],
        targets: Vec::new(),
    };
    // `g` has one edge per successor; a terminator's targets may repeat a block, with one
    // context per (source, target) pair, so per successor node is enough.
    let mut k = 0;
    while k < out.order.len() {
        let (ctx, x) = out.order[k];
        let mut to = Vec::with_capacity(g.succs[x].len());
        for &s in &g.succs[x] {
            let next: Vec<usize> = headers[s]
                .iter()
                .copied()
                .filter(|&h| h != s && (by_id[ctx].contains(&h) || !headers[x].contains(&h)))
                .collect();
            let c = *contexts.entry(next).or_insert_with_key(|key| {
                by_id.push(key.clone());
                by_id.len() - 1
            });
            let id = *index.entry((c, s)).or_insert_with(|| {
                out.order.push((c, s));
                out.order.len() - 1
            });
            to.push(id);
        }
        out.targets.push(to);
        k += 1;
    }
    out
}

/// The block that defines each value.
fn def_block(f: &Function, v: Value) -> Option<Block> {
    match f.values[v].def {
        ValueDef::Param(b, _) => Some(b),
        ValueDef::Result(i, _) => f.layout.inst_block(i),
        ValueDef::Unused => None,
    }
}

/// Max-SSA conversion at the `cut` nodes for the values defined in `copied` blocks (a
/// value defined in a block with one instance still dominates its uses after
/// elaboration): every such value used in a block it is not defined in reaches it through
/// parameters placed on the way back to its definition; at cut blocks those parameters
/// stay, elsewhere they are removed when all predecessors agree.
fn max_ssa(
    f: &mut Function,
    cfg: &ControlFlowGraph,
    cut: &[bool],
    copied: &SecondaryMap<Block, bool>,
) -> Result<(), ReducifyError> {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Phase {
        Pre,
        Post(Value),
    }
    let blocks = cfg.blocks().to_vec();
    // `avail[(b, v)]`: what stands for `v` in block `b` (a parameter of `b`, or what the
    // predecessors agreed on).
    let mut avail: HashMap<(Block, Value), Value> = HashMap::new();
    let mut alias: HashMap<Value, Value> = HashMap::new();
    let mut new_args: SecondaryMap<Block, Vec<Value>> = SecondaryMap::new();
    let resolve = |alias: &HashMap<Value, Value>, mut v: Value| {
        while let Some(&w) = alias.get(&v) {
            v = w;
        }
        v
    };
    for &b in &blocks {
        let mut uses = BTreeSet::new();
        for &i in f.layout.block_insts(b) {
            f.insts[i].visit_operands(|&v| {
                if def_block(f, v).is_some_and(|d| d != b && copied[d]) {
                    uses.insert(v);
                }
            });
        }
        for v in uses {
            let def = def_block(f, v);
            let mut stack = vec![(b, Phase::Pre)];
            while let Some((x, phase)) = stack.pop() {
                match phase {
                    Phase::Pre => {
                        if avail.contains_key(&(x, v)) || def == Some(x) {
                            continue;
                        }
                        let data = &f.values[v];
                        let (ty, var) = (data.ty, data.var);
                        let p = f.append_block_param(x, ty, var);
                        new_args[x].push(v);
                        avail.insert((x, v), p);
                        stack.push((x, Phase::Post(p)));
                        stack.extend(cfg.preds(x).map(|pred| (pred, Phase::Pre)));
                    }
                    Phase::Post(p) => {
                        if cut[cfg.node(x).expect("in the layout")] {
                            continue;
                        }
                        let mut same = None;
                        let mut agree = true;
                        for pred in cfg.preds(x) {
                            let w = resolve(&alias, avail.get(&(pred, v)).copied().unwrap_or(v));
                            if w != p && *same.get_or_insert(w) != w {
                                agree = false;
                            }
                        }
                        if let (true, Some(w)) = (agree, same) {
                            // `p` is the last parameter of `x`: one value is visited at a
                            // time, and each block gets at most one parameter for it.
                            f.blocks[x].params.pop();
                            f.values[p].def = ValueDef::Unused;
                            new_args[x].pop();
                            alias.insert(p, w);
                            avail.insert((x, v), w);
                        }
                    }
                }
            }
        }
    }
    // Arrays live in their block's frame and cannot be parameters.
    for &b in &blocks {
        if let Some(&v) = new_args[b]
            .iter()
            .find(|&&v| matches!(f.values[v].ty, crate::ir::Type::Array { .. }))
        {
            let ValueDef::Result(array, _) = f.values[v].def else {
                unreachable!("arrays are made by `array`, never parameters")
            };
            return Err(ReducifyError::ArrayAcrossCopies { array });
        }
    }
    // Uses become the local version; then each branch passes the new parameters' values.
    for &b in &blocks {
        let insts: Vec<Inst> = f.layout.block_insts(b).to_vec();
        for i in insts {
            f.insts[i].visit_operands_mut(|u| {
                *u = resolve(&alias, avail.get(&(b, *u)).copied().unwrap_or(*u));
            });
        }
        let Some(term) = f.terminator(b) else {
            continue;
        };
        let mut data = std::mem::replace(&mut f.insts[term], crate::ir::InstData::Trap);
        for call in data.branch_targets_mut() {
            for &v in &new_args[call.block] {
                call.args
                    .push(resolve(&alias, avail.get(&(b, v)).copied().unwrap_or(v)));
            }
        }
        f.insts[term] = data;
    }
    Ok(())
}

/// Makes the instances (copies with fresh values for non-empty contexts), retargets every
/// branch to the instance its context gives, and drops originals no longer reached.
pub(crate) fn elaborate(f: &mut Function, cfg: &ControlFlowGraph, inst: &Instances) {
    let mut values: HashMap<(usize, Value), Value> = HashMap::new();
    let blocks: Vec<Block> = inst
        .order
        .iter()
        .map(|&(ctx, x)| {
            if ctx == 0 {
                cfg.block(x)
            } else {
                copy_block(f, cfg.block(x), ctx, &mut values)
            }
        })
        .collect();
    for (k, &(ctx, _)) in inst.order.iter().enumerate() {
        let insts: Vec<Inst> = f.layout.block_insts(blocks[k]).to_vec();
        if ctx != 0 {
            for &i in &insts {
                f.insts[i].visit_operands_mut(|u| {
                    if let Some(&w) = values.get(&(ctx, *u)) {
                        *u = w;
                    }
                });
            }
        }
        let term = *insts.last().expect("terminated");
        let g = cfg.graph();
        let x = inst.order[k].1;
        for call in f.insts[term].branch_targets_mut() {
            let s = cfg.node(call.block).expect("a reachable block");
            let j = g.succs[x].iter().position(|&t| t == s).expect("an edge");
            call.block = blocks[inst.targets[k][j]];
        }
    }
    let mut keep: SecondaryMap<Block, bool> = SecondaryMap::new();
    for &b in &blocks {
        keep[b] = true;
    }
    f.layout.retain_blocks(|b| keep[b]);
}

/// A copy of `b` for context `ctx` (appended to the layout): fresh parameters and results,
/// recorded in `values`; operands and targets are rewritten by the caller.
fn copy_block(
    f: &mut Function,
    b: Block,
    ctx: usize,
    values: &mut HashMap<(usize, Value), Value>,
) -> Block {
    let copy = f.append_new_block();
    for p in f.block_params(b).to_vec() {
        let (ty, var) = (f.values[p].ty, f.values[p].var);
        let q = f.append_block_param(copy, ty, var);
        values.insert((ctx, p), q);
    }
    for i in f.layout.block_insts(b).to_vec() {
        let results = f.inst_results(i).to_vec();
        let types: Vec<_> = results.iter().map(|&r| f.values[r].ty).collect();
        let j = f.create_inst_with_types(f.insts[i].clone(), &types);
        f.srclocs[j] = f.srclocs[i];
        f.layout.append_inst(j, copy);
        for (&r, &s) in results.iter().zip(f.inst_results(j)) {
            values.insert((ctx, r), s);
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{cases, func, Rng};
    use crate::interp::Memory;
    use crate::ir::printer::print_module;
    use crate::verifier::verify_module;

    /// On random modules whose CFGs have random extra edges (most of them irreducible),
    /// every function is reducible after the pass, still verifies, and computes what it
    /// computed before, errors included.
    #[test]
    fn reducified_functions_are_reducible_and_compute_the_same() {
        let config = func::Config {
            irreducible_percent: 100,
            ..func::Config::default()
        };
        let (mut changed, mut too_large, mut arrays) = (0, 0, 0);
        let (mut before, mut grown) = (0, 0);
        for seed in 0..cases(1000) {
            let mut rng = Rng::new(seed);
            let m = func::module(&mut rng, &config);
            let mut r = m.clone();
            let mut kept = Vec::new();
            for (id, f) in r.funcs.iter_mut() {
                match reducify(f, max_blocks(f.layout.blocks().len())) {
                    Ok(Some(g)) => {
                        grown += g.layout.blocks().len();
                        before += f.layout.blocks().len();
                        *f = g;
                        changed += 1
                    }
                    Ok(None) => {}
                    Err(ReducifyError::TooLarge { .. }) => {
                        too_large += 1;
                        kept.push(id);
                    }
                    Err(ReducifyError::ArrayAcrossCopies { .. }) => {
                        arrays += 1;
                        kept.push(id);
                    }
                }
            }
            if let Err(e) = verify_module(&r) {
                panic!(
                    "seed {seed}: does not verify after reducify:\n{e}\nbefore:\n{}\nafter:\n{}",
                    print_module(&m),
                    print_module(&r)
                );
            }
            for (_, f) in r.funcs.iter().filter(|(id, _)| !kept.contains(id)) {
                let cfg = ControlFlowGraph::compute(f);
                let forest = LoopForest::compute(&cfg);
                let multi = forest.loops.iter().any(|l| l.is_irreducible());
                assert!(
                    !multi && !has_side_entry(&cfg),
                    "seed {seed}: still irreducible:\n{}",
                    print_module(&r)
                );
            }
            for (id, f) in m.funcs.iter() {
                for _ in 0..3 {
                    let mut mem = Memory::default();
                    let args = crate::gen::tests::random_args(&mut rng, &f.sig.params, &mut mem);
                    let mut mem2 = mem.clone();
                    let (want, _) = crate::gen::tests::outcome(&m, id, &args, &mut mem);
                    let (got, _) = crate::gen::tests::outcome(&r, id, &args, &mut mem2);
                    assert_eq!(got, want, "seed {seed}:\n{}", print_module(&r));
                }
            }
        }
        println!(
            "reducify: {changed} functions changed ({before} blocks before, {grown} after); \
             refused: {too_large} over the budget, {arrays} with an array across copies"
        );
        assert!(
            changed > 0 && (too_large + arrays) * 10 <= changed,
            "{changed} changed, {too_large} over the budget, {arrays} with arrays"
        );
    }
}

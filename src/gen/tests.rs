//! Property tests over generated functions and CFGs. Each runs `DYC_PROPTEST_CASES`
//! cases (default 1,000); a failure names the seed that reproduces it.

use super::{cases, cfg, func, Rng};
use crate::analysis::cfg::{ControlFlowGraph, Graph};
use crate::analysis::dominators::{idoms_lengauer_tarjan, idoms_reference, DomTree};
use crate::analysis::edges::{classify_all, EdgeKind};
use crate::analysis::liveness::Liveness;
use crate::analysis::loops::{find_loops, reducible_loops, steensgaard_loops};
use crate::analysis::order::DfsOrder;
use crate::analysis::postdom::PostDominatorTree;
use crate::analysis::topo::TopoNumbers;
use crate::interp::{ErrorKind, Interpreter, Memory, Val};
use crate::ir::parser::parse_module;
use crate::ir::printer::print_module;
use crate::ir::{Module, Scalar, Type, ValueDef};
use crate::verifier::verify_module;

const DEFAULT_CASES: u64 = 1000;

/// A random CFG of one of the three kinds, as a dense graph rooted at 0.
fn random_graph(seed: u64) -> Graph {
    let mut rng = Rng::new(seed);
    let size = 1 + rng.below(12);
    let extra = 1 + rng.below(4);
    let m = match seed % 3 {
        0 => cfg::structured(&mut rng, size),
        1 => cfg::with_random_edges(&mut rng, size, extra),
        _ => cfg::random(&mut rng, 1 + size),
    };
    let f = m.funcs.values().next().expect("one function");
    ControlFlowGraph::compute(f).graph().clone()
}

/// Nodes reachable from `a` in `g` (reflexive).
fn reach(g: &Graph, a: usize) -> Vec<bool> {
    let mut seen = vec![false; g.len()];
    let mut stack = vec![a];
    seen[a] = true;
    while let Some(x) = stack.pop() {
        for &s in &g.succs[x] {
            if !seen[s] {
                seen[s] = true;
                stack.push(s);
            }
        }
    }
    seen
}

#[test]
fn generated_modules_verify_and_round_trip() {
    for seed in 0..cases(DEFAULT_CASES) {
        let m = func::module(&mut Rng::new(seed), &func::Config::default());
        if let Err(e) = verify_module(&m) {
            panic!(
                "seed {seed}: generated module does not verify:\n{e}\n{}",
                print_module(&m)
            );
        }
        let text = print_module(&m);
        let parsed = parse_module(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{text}"));
        assert_eq!(
            print_module(&parsed),
            text,
            "seed {seed}: round trip differs"
        );
        verify_module(&parsed).unwrap_or_else(|e| panic!("seed {seed}: parsed module: {e}"));
    }
}

#[test]
fn fast_dominators_match_reference_and_definition() {
    for seed in 0..cases(DEFAULT_CASES) {
        let g = random_graph(seed);
        let fast = idoms_lengauer_tarjan(&g, 0);
        assert_eq!(fast, idoms_reference(&g, 0), "seed {seed}: {g:?}");
        let tree = DomTree::from_idoms(fast.clone(), 0);
        // The definition: on random paths from the root, every dominator of a node
        // appears on the path before it.
        let mut rng = Rng::new(seed ^ 0xd0d0);
        for _ in 0..8 {
            let mut path = vec![0usize];
            for _ in 0..40 {
                let x = *path.last().expect("non-empty");
                if g.succs[x].is_empty() {
                    break;
                }
                path.push(*rng.pick(&g.succs[x]));
            }
            for (k, &x) in path.iter().enumerate() {
                let mut d = fast[x];
                while let Some(dd) = d {
                    assert!(
                        path[..k].contains(&dd),
                        "seed {seed}: {dd} dominates {x} but is not on {path:?}"
                    );
                    d = fast[dd];
                }
            }
        }
        // And the converse: a node that is not a dominator is avoidable — removing it
        // leaves the node reachable.
        let reachable = reach(&g, 0);
        for x in 0..g.len() {
            for d in 0..g.len() {
                if !reachable[x] || !reachable[d] || d == x || d == 0 {
                    continue;
                }
                let cut = Graph::from_unique_edges(
                    g.len(),
                    &g.edges().filter(|&(a, _)| a != d).collect::<Vec<_>>(),
                );
                let still = reach(&cut, 0)[x];
                assert_eq!(
                    tree.dominates(d, x),
                    !still,
                    "seed {seed}: dominates({d}, {x})"
                );
            }
        }
    }
}

#[test]
fn post_dominators_match_reference_on_reversed_graph() {
    for seed in 0..cases(DEFAULT_CASES) {
        let mut rng = Rng::new(seed);
        let m = cfg::with_random_edges(&mut rng, 1 + (seed as usize % 10), seed as usize % 3);
        let f = m.funcs.values().next().expect("one function");
        let cfgraph = ControlFlowGraph::compute(f);
        let pdt = PostDominatorTree::compute(&cfgraph);
        let (rev, exit) = crate::analysis::postdom::reversed_with_exit(cfgraph.graph());
        let reference = idoms_reference(&rev, exit);
        let from_exit = reach(&rev, exit);
        for (n, idom) in reference.iter().enumerate().take(cfgraph.num_blocks()) {
            let b = cfgraph.block(n);
            let expect = idom.filter(|&p| p != exit).map(|p| cfgraph.block(p));
            assert_eq!(pdt.ipdom(b), expect, "seed {seed}: ipdom({b})");
            assert_eq!(pdt.reaches_exit(b), from_exit[n], "seed {seed}");
        }
    }
}

#[test]
fn topological_predecessor_query_is_reachability_without_back_edges() {
    let mut exact = 0;
    let total = cases(DEFAULT_CASES);
    for seed in 0..total {
        let g = random_graph(seed);
        let topo = TopoNumbers::compute_graph(&g, 0);
        let back_free: Vec<(usize, usize)> = classify_all(&g, 0)
            .into_iter()
            .filter(|&(_, _, k)| k != EdgeKind::Back)
            .map(|(a, b, _)| (a, b))
            .collect();
        let dag = Graph::from_unique_edges(g.len(), &back_free);
        let reachable = reach(&g, 0);
        for a in 0..g.len() {
            let r = reach(&dag, a);
            for b in 0..g.len() {
                let expect = reachable[a] && reachable[b] && r[b];
                assert_eq!(
                    topo.is_predecessor(a, b),
                    expect,
                    "seed {seed}: is_predecessor({a}, {b})"
                );
            }
            // Begin times are a topological order of the DAG.
            for &s in &dag.succs[a] {
                if reachable[a] {
                    assert!(topo.begin[a] < topo.begin[s], "seed {seed}: edge {a}->{s}");
                    assert!(topo.end[a] > topo.end[s], "seed {seed}: edge {a}->{s}");
                }
            }
        }
        exact += topo.ranges_exact() as u64;
    }
    // The ranges alone must be exact on most of these small graphs.
    assert!(
        exact * 2 > total,
        "only {exact} of {total} graphs had exact ranges"
    );
}

#[test]
fn structured_cfgs_are_reducible_and_irreducibility_matches_dominance() {
    for seed in 0..cases(DEFAULT_CASES) {
        let g = random_graph(seed);
        let loops = find_loops(&g, 0);
        let idom = idoms_lengauer_tarjan(&g, 0);
        let tree = DomTree::from_idoms(idom, 0);
        // A CFG is reducible iff the target of every DFS back edge dominates its source.
        let reducible = classify_all(&g, 0)
            .iter()
            .all(|&(a, b, k)| k != EdgeKind::Back || tree.dominates(b, a));
        let irreducible_loop = loops.loops.iter().any(|l| l.entries.len() > 1);
        assert_eq!(
            reducible, !irreducible_loop,
            "seed {seed}: {g:?}\n{loops:?}"
        );
        if seed % 3 == 0 {
            assert!(reducible, "seed {seed}: structured CFG is irreducible");
        }
        // On reducible CFGs the union-find construction succeeds and agrees with
        // Steensgaard's; on irreducible ones it gives up.
        let dfs = DfsOrder::compute(&g, 0);
        let fast = reducible_loops(&g, &dfs);
        assert_eq!(fast.is_some(), reducible, "seed {seed}: {g:?}");
        if let Some(fast) = fast {
            assert_eq!(fast, steensgaard_loops(&g, 0, &dfs), "seed {seed}: {g:?}");
        }
        let nodes =
            |l: usize| -> Vec<usize> { (0..g.len()).filter(|&x| loops.contains(l, x)).collect() };
        for (id, l) in loops.loops.iter().enumerate() {
            let inside = nodes(id);
            // Every loop is strongly connected once nested loops are included: its header
            // reaches every node and is reached from every node without leaving it.
            let within = Graph::from_edges(
                g.len(),
                g.edges()
                    .filter(|&(a, b)| inside.contains(&a) && inside.contains(&b)),
            );
            let header = l.entries[0];
            let from = reach(&within, header);
            let to = reach(&within.reversed(), header);
            assert!(
                inside.iter().all(|&x| from[x] && to[x]),
                "seed {seed}: loop {id}"
            );
            // A single-entry loop's header dominates it.
            if l.entries.len() == 1 {
                for &x in &inside {
                    assert!(tree.dominates(header, x), "seed {seed}");
                }
            }
            if let Some(p) = l.parent {
                assert!(p < id, "seed {seed}: parent after child");
                assert!(
                    inside.iter().all(|&x| loops.contains(p, x)),
                    "seed {seed}: nesting"
                );
            }
        }
        // Every cycle is inside some loop: each back edge's ends share a loop.
        for (a, b, k) in classify_all(&g, 0) {
            if k == EdgeKind::Back {
                assert!(
                    (0..loops.loops.len()).any(|l| loops.contains(l, a) && loops.contains(l, b)),
                    "seed {seed}: back edge {a}->{b} in no loop"
                );
            }
        }
    }
}

#[test]
fn liveness_matches_path_definition() {
    for seed in 0..cases(DEFAULT_CASES) {
        let m = func::module(&mut Rng::new(seed), &func::Config::default());
        for f in m.funcs.values() {
            let cfgraph = ControlFlowGraph::compute(f);
            let live = Liveness::compute(f, &cfgraph);
            let g = cfgraph.graph();
            // Upward-exposed uses per block.
            let uses: Vec<Vec<crate::ir::Value>> = cfgraph
                .blocks()
                .iter()
                .map(|&b| {
                    let mut defined: Vec<_> = f.block_params(b).to_vec();
                    let mut u = Vec::new();
                    for &i in f.layout.block_insts(b) {
                        for v in f.insts[i].operands() {
                            if !defined.contains(&v) {
                                u.push(v);
                            }
                        }
                        defined.extend_from_slice(f.inst_results(i));
                    }
                    u
                })
                .collect();
            for v in f.values.keys() {
                let def_block = match f.values[v].def {
                    ValueDef::Param(b, _) => Some(b),
                    ValueDef::Result(i, _) => f.layout.inst_block(i),
                    ValueDef::Unused => None,
                };
                let Some(d) = def_block.and_then(|b| cfgraph.node(b)) else {
                    continue;
                };
                for n in 0..g.len() {
                    // Live-in at n: a path from n avoiding the definition reaches a use.
                    let mut seen = vec![false; g.len()];
                    let mut stack = vec![];
                    if n != d {
                        stack.push(n);
                        seen[n] = true;
                    }
                    let mut found = false;
                    while let Some(x) = stack.pop() {
                        if uses[x].contains(&v) {
                            found = true;
                            break;
                        }
                        for &s in &g.succs[x] {
                            if s != d && !seen[s] {
                                seen[s] = true;
                                stack.push(s);
                            }
                        }
                    }
                    let b = cfgraph.block(n);
                    assert_eq!(
                        live.is_live_in(b, v),
                        found,
                        "seed {seed}: {v} live-in at {b}"
                    );
                }
            }
        }
    }
}

/// The property every CFG pass keeps: on `cases(1000)` random modules, `pass` (run on
/// each function; it returns how much it changed) leaves every function verified and
/// computing what the original does (results, errors by kind and place, memory). Returns
/// the total change; panics if nothing changed or if more than a tenth of the runs
/// compared ran out of fuel (fuel counts instructions, which passes change).
pub fn pass_keeps_semantics(
    name: &str,
    mut pass: impl FnMut(&mut crate::ir::Function) -> usize,
) -> usize {
    let (mut changed, mut compared, mut out_of_fuel) = (0, 0, 0);
    for seed in 0..cases(1000) {
        let mut rng = Rng::new(seed);
        let m = func::module(&mut rng, &func::Config::default());
        let mut p = m.clone();
        for f in p.funcs.values_mut() {
            changed += pass(f);
        }
        if let Err(e) = verify_module(&p) {
            panic!(
                "seed {seed}: does not verify after {name}:\n{e}\nbefore:\n{}\nafter:\n{}",
                print_module(&m),
                print_module(&p)
            );
        }
        for (id, f) in m.funcs.iter() {
            let mut mem = Memory::default();
            let args = random_args(&mut rng, &f.sig.params, &mut mem);
            let mut mem2 = mem.clone();
            let (want, fuel_a) = outcome(&m, id, &args, &mut mem);
            let (got, fuel_b) = outcome(&p, id, &args, &mut mem2);
            if fuel_a || fuel_b {
                out_of_fuel += 1;
                continue;
            }
            compared += 1;
            assert_eq!(got, want, "seed {seed}:\n{}", print_module(&p));
        }
    }
    assert!(
        changed > 0 && out_of_fuel * 10 <= compared,
        "{name}: {changed} changes, {out_of_fuel} runs out of fuel, {compared} compared"
    );
    changed
}

/// Runs function `id` of `m` on the interpreter with the property tests' limits (fuel
/// 20,000, depth 50) and describes the outcome so that it compares across transformed
/// copies of `m`: a result through `Debug` (which compares NaNs equal), an error by kind
/// and source position (a transformed function numbers its blocks and instructions its own
/// way), then the memory. Also says whether the fuel ran out.
pub fn outcome(
    m: &Module,
    id: crate::ir::FuncId,
    args: &[Val],
    mem: &mut Memory,
) -> (String, bool) {
    let mut interp = Interpreter::new(m);
    interp.hosts = func::hosts();
    interp.fuel = 20_000;
    interp.max_depth = 50;
    let r = interp.call(id, args, mem);
    let fuel = matches!(&r, Err(e) if e.kind == ErrorKind::FuelExhausted);
    let r = match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("{:?} in {} at {:?}", e.kind, e.func, e.loc),
    };
    (format!("{r} {mem:?}"), fuel)
}

/// Random arguments for a signature: small integers, a few floats, short slices.
pub fn random_args(rng: &mut Rng, params: &[Type], mem: &mut Memory) -> Vec<Val> {
    params
        .iter()
        .map(|&p| match p {
            Type::Scalar(s) => Val::Scalar(random_scalar_value(rng, s)),
            Type::Slice { elem, mutable } => {
                let data = (0..rng.below(5))
                    .map(|_| random_scalar_value(rng, elem))
                    .collect();
                mem.add(elem, data, mutable)
            }
            Type::Array { .. } => unreachable!("no parameter is an array"),
        })
        .collect()
}

fn random_scalar_value(rng: &mut Rng, s: Scalar) -> crate::ir::Const {
    use crate::ir::Const;
    match s {
        Scalar::F64 => {
            Const::F64(*rng.pick(&[0.0, -0.0, -1.5, 2.0, f64::NAN, 1e18, f64::NEG_INFINITY]))
        }
        Scalar::Bool => Const::Bool(rng.chance(50)),
        t => crate::semantics::int(t, rng.range(-3, 5) as u64),
    }
}

#[test]
fn interpreter_never_panics_and_reports_only_runtime_faults() {
    for seed in 0..cases(DEFAULT_CASES) {
        let mut rng = Rng::new(seed);
        let m: Module = func::module(&mut rng, &func::Config::default());
        for (id, f) in m.funcs.iter() {
            let mut mem = Memory::default();
            let args = random_args(&mut rng, &f.sig.params, &mut mem);
            let mut interp = Interpreter::new(&m);
            interp.hosts = func::hosts();
            interp.fuel = 20_000;
            interp.max_depth = 50;
            match interp.call(id, &args, &mut mem) {
                Ok(v) => {
                    let ok = match (v, f.sig.ret) {
                        (None, None) => true,
                        (Some(Val::Scalar(c)), Some(t)) => Type::Scalar(c.ty()) == t,
                        (Some(Val::Slice(s)), Some(Type::Slice { elem, .. })) => {
                            mem.bufs[s.buf].elem == elem
                        }
                        _ => false,
                    };
                    assert!(ok, "seed {seed}: result {v:?} does not match the signature");
                }
                Err(e) => assert!(
                    !matches!(
                        e.kind,
                        ErrorKind::Internal(_) | ErrorKind::BadArguments(_) | ErrorKind::Host(_)
                    ),
                    "seed {seed}: {e}\n{}",
                    print_module(&m)
                ),
            }
        }
    }
}

#[test]
fn dfs_orders_are_consistent() {
    for seed in 0..cases(DEFAULT_CASES) {
        let g = random_graph(seed);
        let d = DfsOrder::compute(&g, 0);
        let reachable = reach(&g, 0);
        for (x, &r) in reachable.iter().enumerate() {
            assert_eq!(d.is_reachable(x), r, "seed {seed}");
        }
        // Every non-back edge goes forward in RPO.
        let rpo = d.rpo();
        let pos = |x: usize| rpo.iter().position(|&y| y == x);
        for (a, b, k) in classify_all(&g, 0) {
            assert_eq!(
                k == EdgeKind::Back,
                pos(b) <= pos(a),
                "seed {seed}: {a}->{b} {k:?}"
            );
        }
    }
}

/// Applies one random edit to `text`: delete a span, duplicate a line, swap two lines,
/// or insert a token from the IR's vocabulary.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    match rng.below(4) {
        0 => {
            let a = rng.below(chars.len());
            let b = (a + 1 + rng.below(8)).min(chars.len());
            chars.drain(a..b);
            chars.into_iter().collect()
        }
        1 | 2 => {
            let mut lines: Vec<&str> = text.lines().collect();
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            if rng.chance(50) {
                lines.swap(a, b);
            } else {
                let l = lines[a];
                lines.insert(b, l);
            }
            lines.join("\n")
        }
        _ => {
            const TOKENS: [&str; 16] = [
                "v0",
                "v999",
                "block0",
                "block7",
                ",",
                "(",
                ")",
                "[",
                "]",
                ":",
                "=",
                "-1",
                "18446744073709551616",
                "make_static",
                "i8",
                "@",
            ];
            let at = rng.below(chars.len());
            let tok = format!(" {} ", rng.pick(&TOKENS));
            chars.splice(at..at, tok.chars());
            chars.into_iter().collect()
        }
    }
}

#[test]
fn mutated_text_never_panics_parser_verifier_or_interpreter() {
    for seed in 0..cases(DEFAULT_CASES) {
        let mut rng = Rng::new(seed);
        let m = func::module(&mut rng, &func::Config::default());
        let mut text = print_module(&m);
        for _ in 0..1 + rng.below(3) {
            text = mutate(&mut rng, &text);
        }
        let Ok(parsed) = parse_module(&text) else {
            continue;
        };
        let printed = print_module(&parsed);
        if let Err(e) = verify_module(&parsed) {
            let _ = e.to_string();
            continue;
        }
        assert_eq!(
            print_module(&parse_module(&printed).expect("reparses")),
            printed,
            "seed {seed}"
        );
        for (id, f) in parsed.funcs.iter() {
            let mut mem = Memory::default();
            let args = random_args(&mut rng, &f.sig.params, &mut mem);
            let mut interp = Interpreter::new(&parsed);
            interp.hosts = func::hosts();
            interp.fuel = 5_000;
            interp.max_depth = 20;
            if let Err(e) = interp.call(id, &args, &mut mem) {
                assert!(
                    !matches!(e.kind, ErrorKind::Internal(_)),
                    "seed {seed}: {e}\n{printed}"
                );
            }
        }
    }
}

/// Congruence of the binding-time analysis on random annotated programs: a static
/// instruction is pure (or a static load or static call) and its operands are static; a
/// static block parameter only ever receives static arguments; a static branch is one on a
/// static condition; `make_static` results are static, `make_dynamic` results dynamic; a
/// static value is defined by a static instruction, an annotation, a static parameter or a
/// key parameter, never by a dynamic instruction.
#[test]
fn binding_times_are_congruent_on_random_programs() {
    use crate::bta::{analyze, Mode};
    use crate::ir::{Callee, InstData, ValueDef};
    let mut checked = 0;
    for seed in 0..cases(DEFAULT_CASES) {
        let m = func::module(&mut Rng::new(seed), &func::Config::default());
        for (_, f) in m.funcs.iter() {
            let bta = analyze(&m, f, Mode::Specialize);
            if !bta.errors.is_empty() {
                continue;
            }
            let cfg = ControlFlowGraph::compute(f);
            let reachable = reach(cfg.graph(), 0);
            for (n, &b) in f.layout.blocks().iter().enumerate() {
                if !reachable[n] {
                    continue;
                }
                for &i in f.layout.block_insts(b) {
                    let data = &f.insts[i];
                    let results = f.inst_results(i);
                    match data {
                        InstData::MakeStatic { .. } => {
                            for &r in results {
                                assert!(bta.is_static(r), "seed {seed}: make_static result {r}");
                            }
                        }
                        InstData::MakeDynamic { .. } => {
                            for &r in results {
                                assert!(!bta.is_static(r), "seed {seed}: make_dynamic result {r}");
                            }
                        }
                        _ if bta.inst_is_static(f, i) => {
                            let pure = match data {
                                InstData::Load { .. } | InstData::Store { .. } => false,
                                InstData::Call {
                                    callee: Callee::Extern(e),
                                    is_static,
                                    ..
                                } => *is_static && m.externs[*e].pure,
                                InstData::Call { .. } => false,
                                _ => !data.is_terminator(),
                            };
                            assert!(pure, "seed {seed}: static impure instruction {i}");
                            for v in data.operands() {
                                assert!(
                                    bta.is_static(v),
                                    "seed {seed}: static {i} reads dynamic {v}"
                                );
                            }
                        }
                        _ => {
                            for &r in results {
                                assert!(
                                    !bta.is_static(r),
                                    "seed {seed}: dynamic instruction {i} defines static {r}"
                                );
                            }
                        }
                    }
                    for t in data.branch_targets() {
                        for (&p, &a) in f.block_params(t.block).iter().zip(&t.args) {
                            if bta.is_static(p) {
                                assert!(
                                    bta.is_static(a),
                                    "seed {seed}: static parameter {p} receives dynamic {a}"
                                );
                            }
                        }
                    }
                }
                if bta.branch_is_static(f, b) {
                    let t = f.terminator(b).expect("a terminator");
                    let cond = f.insts[t].operands()[0];
                    assert!(bta.is_static(cond), "seed {seed}: static branch on {cond}");
                    checked += 1;
                }
            }
            for (k, &p) in f.block_params(f.layout.blocks()[0]).iter().enumerate() {
                if bta.is_static(p) {
                    assert!(bta.key_params.contains(&k), "seed {seed}: parameter {k}");
                }
                assert!(matches!(f.values[p].def, ValueDef::Param(..)));
            }
        }
    }
    assert!(checked > 0, "no static branch in any program");
}

/// The binding times of the plain round-robin fixed point (every block in reverse
/// post-order until nothing changes, each transfer function read from the whole function):
/// the oracle for the work-list analysis of [`crate::bta::analyze`]. It shares the rule for
/// one instruction ([`crate::bta::inst_binding_time`]) and checks the solving: merges,
/// policies, loops under dynamic control.
fn round_robin_binding_times(
    m: &Module,
    f: &crate::ir::Function,
    key_params: &[usize],
) -> cranelift_entity::SecondaryMap<crate::ir::Value, crate::bta::BindingTime> {
    use crate::analysis::loops::LoopForest;
    use crate::bta::BindingTime::{self, *};
    use crate::bta::Mode;
    use crate::ir::{Block, InstData, Policy, PolicyGroup, Value, Var};
    use cranelift_entity::SecondaryMap;
    let mode = Mode::Specialize;
    let mut bt: SecondaryMap<Value, BindingTime> = SecondaryMap::new();
    let entry = f.entry_block().expect("an entry");
    for (k, &p) in f.block_params(entry).iter().enumerate() {
        bt[p] = if key_params.contains(&k) {
            Static
        } else {
            Dynamic
        };
    }
    let cfg = ControlFlowGraph::compute(f);
    // Loop entries and, per loop, the blocks that branch.
    let forest = LoopForest::compute(&cfg);
    let loop_branches: Vec<Vec<Block>> = (0..forest.loops.len())
        .map(|l| {
            forest
                .blocks(l)
                .into_iter()
                .filter(|&b| cfg.succs(b).nth(1).is_some())
                .collect()
        })
        .collect();
    let annotated: Vec<Var> = f
        .layout
        .blocks()
        .iter()
        .flat_map(|&b| f.layout.block_insts(b))
        .filter_map(|&i| match &f.insts[i] {
            InstData::MakeStatic { args, .. } => {
                Some(args.iter().map(|&(_, v)| v).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect();
    let rpo: Vec<Block> = DfsOrder::compute(cfg.graph(), 0)
        .rpo()
        .into_iter()
        .map(|n| cfg.block(n))
        .collect();
    let ty_join = |bt: &SecondaryMap<Value, BindingTime>, vs: &[Value]| {
        vs.iter().fold(Bottom, |a, &v| a.join(bt[v]))
    };
    let mut changed = true;
    while changed {
        changed = false;
        let mut set = |bt: &mut SecondaryMap<Value, BindingTime>, v: Value, t: BindingTime| {
            let t = if mode == Mode::Generic { Dynamic } else { t };
            let new = bt[v].join(t);
            if new != bt[v] {
                bt[v] = new;
                changed = true;
            }
        };
        for &b in &rpo {
            if b != entry {
                // Block parameters: join of the incoming arguments.
                for (k, &p) in f.block_params(b).iter().enumerate() {
                    let mut t = Bottom;
                    let mut incoming: Vec<Value> = Vec::new();
                    for pred in cfg.preds(b) {
                        let term = f.terminator(pred).expect("verified");
                        for call in f.insts[term].branch_targets() {
                            if call.block == b {
                                t = t.join(bt[call.args[k]]);
                                incoming.push(call.args[k]);
                            }
                        }
                    }
                    incoming.sort();
                    incoming.dedup();
                    if t == Static && incoming.len() > 1 {
                        let var = f.values[p].var;
                        let mono = var.and_then(|v| var_policy(f, v, PolicyGroup::Specialization));
                        if mono == Some(Policy::MonoSpecialize) {
                            t = Dynamic;
                        }
                        let user = var.is_some_and(|v| annotated.contains(&v));
                        let entered: Vec<usize> = (0..forest.loops.len())
                            .filter(|&l| forest.loops[l].entries.contains(&b))
                            .collect();
                        let dynamic_control = entered.iter().any(|&l| {
                            loop_branches[l].iter().any(|&x| {
                                match f.terminator(x).map(|t| &f.insts[t]) {
                                    Some(InstData::Brif { cond, .. }) => bt[*cond] == Dynamic,
                                    Some(InstData::Switch { arg, .. }) => bt[*arg] == Dynamic,
                                    _ => false,
                                }
                            })
                        });
                        if !user && dynamic_control {
                            t = Dynamic;
                        }
                    }
                    set(&mut bt, p, t);
                }
            }
            for &i in f.layout.block_insts(b) {
                let data = &f.insts[i];
                let ops = ty_join(&bt, &data.operands());
                let Some(t) = crate::bta::inst_binding_time(m, data, ops) else {
                    continue;
                };
                for &r in f.inst_results(i) {
                    set(&mut bt, r, t);
                }
            }
        }
    }
    bt
}

fn var_policy(
    f: &crate::ir::Function,
    var: crate::ir::Var,
    group: crate::ir::PolicyGroup,
) -> Option<crate::ir::Policy> {
    f.layout
        .blocks()
        .iter()
        .flat_map(|&b| f.layout.block_insts(b))
        .find_map(|&i| match &f.insts[i] {
            crate::ir::InstData::MakeStatic { args, policies }
                if args.iter().any(|&(_, v)| v == var) =>
            {
                policies.get(group)
            }
            _ => None,
        })
}

#[test]
fn work_list_binding_times_equal_the_round_robin_fixed_point() {
    use crate::bta::{analyze, Mode};
    let mut compared = 0;
    for seed in 0..cases(DEFAULT_CASES) {
        let m = func::module(&mut Rng::new(seed), &func::Config::default());
        for (_, f) in m.funcs.iter() {
            let bta = analyze(&m, f, Mode::Specialize);
            let reference = round_robin_binding_times(&m, f, &bta.key_params);
            for v in f.values.keys() {
                let why = || crate::bta::explain(&m, f, &bta);
                assert_eq!(bta.value[v], reference[v], "seed {seed}: {v}\n{}", why());
                compared += 1;
            }
        }
    }
    assert!(compared > 0);
}

/// Reachability conditions against brute force: on random CFGs (structured, with random
/// edges, random) with a random half of the branching blocks static (some with repeated
/// targets or three or more outcomes), for every assignment of static outcomes, a block's
/// condition holds exactly when the block is reachable taking only the chosen outcome at
/// each static branch, with back edges followed (cyclic) or removed (acyclic); and the
/// merge classes agree with their definitions over all assignments.
#[test]
fn reachability_conditions_agree_with_brute_force() {
    use crate::analysis::reach::Reach;
    for seed in 0..cases(DEFAULT_CASES) {
        let g = random_graph(seed);
        let n = g.len();
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut outcomes: Vec<Option<Vec<usize>>> = vec![None; n];
        let mut combos = 1usize;
        for (v, o) in outcomes.iter_mut().enumerate() {
            let succs = g.succs[v].to_vec();
            if succs.len() >= 2 && rng.chance(50) && combos * (succs.len() + 1) <= 4096 {
                let mut list = succs.clone();
                if rng.chance(30) {
                    list.push(*rng.pick(&succs));
                }
                combos *= list.len();
                *o = Some(list);
            }
        }
        let special: Vec<bool> = (0..n).map(|_| rng.chance(10)).collect();
        let mut r = Reach::compute_graph(&g, &outcomes, &special).expect("within budget");
        let statics: Vec<usize> = (0..n).filter(|&v| outcomes[v].is_some()).collect();
        // Per assignment: which nodes are reached, and which acyclic edges are taken.
        let mut edge_taken_together = vec![false; n];
        let mut differs_from_idom = vec![false; n];
        let reachable = reach(&g, 0);
        let acyclic_edges: Vec<(usize, usize)> = g
            .edges()
            .filter(|&(a, b)| reachable[a] && !r.is_back(a, b))
            .collect();
        let acyclic_graph = Graph::from_unique_edges(n, &acyclic_edges);
        let idom = idoms_reference(&acyclic_graph, 0);
        let mut choice = vec![0usize; n];
        for mut k in 0..combos {
            for &v in &statics {
                let m = outcomes[v].as_ref().unwrap().len();
                choice[v] = k % m;
                k /= m;
            }
            let taken = |v: usize, s: usize| match &outcomes[v] {
                Some(o) => o[choice[v]] == s,
                None => true,
            };
            let walk = |follow_back: bool| {
                let mut seen = vec![false; n];
                let mut stack = vec![0];
                seen[0] = true;
                while let Some(v) = stack.pop() {
                    for &s in g.succs[v].iter() {
                        if taken(v, s) && (follow_back || !r.is_back(v, s)) && !seen[s] {
                            seen[s] = true;
                            stack.push(s);
                        }
                    }
                }
                seen
            };
            let (cyc, acyc) = (walk(true), walk(false));
            // Outcome j of a branch with m outcomes is the number m - 1 - j in its bits.
            let bits = |var: u32| {
                let v = r.var_node[var as usize];
                let (first, _) = r.vars[v].unwrap();
                let m = outcomes[v].as_ref().unwrap().len();
                (m - 1 - choice[v]) >> (var - first) & 1 == 1
            };
            for v in 0..n {
                assert_eq!(
                    r.mgr.eval(r.cyclic[v], bits),
                    cyc[v],
                    "seed {seed}: cyclic RC of {v}"
                );
                assert_eq!(
                    r.mgr.eval(r.acyclic[v], bits),
                    acyc[v],
                    "seed {seed}: acyclic RC of {v}"
                );
                let ins = acyclic_graph.preds[v]
                    .iter()
                    .filter(|&&u| acyc[u] && taken(u, v))
                    .count();
                edge_taken_together[v] |= ins >= 2;
                if let Some(d) = idom[v] {
                    differs_from_idom[v] |= acyc[d] != acyc[v];
                }
            }
        }
        for v in 0..n {
            let all_ins = g.preds[v].iter().filter(|&&u| reachable[u]).count();
            let merge = acyclic_graph.preds[v].len() >= 2 || (special[v] && all_ins >= 2);
            assert_eq!(r.merges[v].is_some(), merge, "seed {seed}: merge {v}");
            if let Some(m) = r.merges[v] {
                assert_eq!(
                    m.constant, !edge_taken_together[v],
                    "seed {seed}: constant {v}"
                );
                assert_eq!(m.weird, differs_from_idom[v], "seed {seed}: weird {v}");
                assert_eq!(m.special, special[v], "seed {seed}: special {v}");
            }
            // Merges are of reachable blocks; following back edges only adds.
            let (a, c) = (r.acyclic[v], r.cyclic[v]);
            assert_eq!(r.mgr.implies(a, c), Some(true), "seed {seed}: {v}");
        }
    }
}

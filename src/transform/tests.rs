//! The transform's guarantee, checked on random CFGs (reducible and irreducible, through
//! reducify) for every assignment of the static branch outcomes: the planned stitcher
//! stitches exactly the blocks whose reachability condition holds, each once, and each
//! after every predecessor through a forward edge; the work-list executor stitches the
//! same blocks.
//!
//! The CFGs branch on three static booleans and a static selector (the region's key) or
//! on dynamic ones, so that each block has one static context and a block's condition
//! holds exactly when specialization reaches it. Two oracles: the cyclic reachability
//! conditions of the plan's graph evaluated on the outcomes, and a plain search of the
//! stitch program that follows only the taken side of static branches.

use std::collections::HashMap;
use std::fmt::Write;

use cranelift_entity::EntityRef;
use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Record};
use dyc_stitcher::ge::{
    Block, Budget, NoHosts, Op, Operand, Param, SVal, SetupOp, StitchProgram, Term,
};
use dyc_templates::fold::Fold;
use dyc_templates::ops::Const;
use dyc_templates::types::Scalar;

use crate::analysis::cfg::Graph;
use crate::analysis::reach::Reach;
use crate::bta::Mode;
use crate::gen::{cases, Rng};
use crate::residual::ResidualEmitter;

/// The static and dynamic conditions and selectors of the generated functions.
const STATIC_CONDS: [&str; 3] = ["v6", "v7", "v8"];
const STATIC_SEL: &str = "v9";
const DYN_COND: &str = "v4";
const DYN_SEL: &str = "v5";

/// A function of `n + 1` blocks in IR text: block 0 makes `a`, `b`, `c`, `k` static and
/// jumps to block 1; every other block is reached from a block before it (a spanning
/// tree) and has up to two more edges to any block, so loops, side entries and
/// self-loops occur. One target: `jump`; two: `brif`; more: `switch`; none: `return`.
/// About a third of the blocks take `a` as a parameter (every edge passes it): merges of
/// those are special, so plans have several roots, whose trees share blocks.
fn random_cfg(rng: &mut Rng, n: usize) -> String {
    let mut targets: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    for b in 2..=n {
        let parent = 1 + rng.below(b - 1);
        targets[parent].push(b);
    }
    for ts in targets.iter_mut().skip(1) {
        for _ in 0..rng.below(3) {
            ts.push(1 + rng.below(n));
        }
        // Shuffle, so that tree edges are not always first.
        for i in (1..ts.len()).rev() {
            ts.swap(i, rng.below(i + 1));
        }
    }
    let param: Vec<bool> = (0..=n).map(|b| b > 0 && rng.chance(33)).collect();
    let to = |t: usize| {
        if param[t] {
            format!("block{t}(v6)")
        } else {
            format!("block{t}")
        }
    };
    let mut s = format!(
        "fn f(bool, bool, bool, i64, bool, i64) {{\n\
         block0(v0: bool, v1: bool, v2: bool, v3: i64, v4: bool, v5: i64):\n    \
         v6, v7, v8, v9 = make_static v0 as a, v1 as b, v2 as c, v3 as k\n    \
         jump {}\n",
        to(1)
    );
    for (b, ts) in targets.iter().enumerate().skip(1) {
        let own = format!("v{}", 100 + b);
        if param[b] {
            let _ = writeln!(s, "block{b}({own}: bool):");
        } else {
            let _ = writeln!(s, "block{b}:");
        }
        let is_static = rng.chance(50);
        match ts.as_slice() {
            [] => s.push_str("    return\n"),
            [t] => {
                let _ = writeln!(s, "    jump {}", to(*t));
            }
            [t, e] => {
                let cond = match (is_static, param[b] && rng.chance(50)) {
                    (true, true) => own.as_str(),
                    (true, false) => *rng.pick(&STATIC_CONDS),
                    (false, _) => DYN_COND,
                };
                let _ = writeln!(s, "    brif {cond}, {}, {}", to(*t), to(*e));
            }
            [cases @ .., default] => {
                let sel = if is_static { STATIC_SEL } else { DYN_SEL };
                let cases: Vec<String> = cases
                    .iter()
                    .enumerate()
                    .map(|(k, &t)| format!("{k}: {}", to(t)))
                    .collect();
                let _ = writeln!(
                    s,
                    "    switch {sel}, [{}], default {}",
                    cases.join(", "),
                    to(*default)
                );
            }
        }
    }
    s.push_str("}\n");
    s
}

/// The static values of the stitch program's registers that hold a key value: copies in
/// setup code and static parameters, to a fixed point (every edge into a block with a
/// static parameter passes the same register, so each has one value).
fn static_values(p: &StitchProgram, key: &[SVal]) -> HashMap<u32, Const> {
    let mut env = HashMap::new();
    for (r, v) in p.blocks[p.entry].key_regs().zip(key) {
        if let SVal::Scalar(c) = v {
            env.insert(r.as_u32(), *c);
        }
    }
    loop {
        let before = env.len();
        for d in p.blocks.values() {
            for op in &d.ops {
                if let Op::Setup {
                    dst,
                    op: SetupOp::Copy(src),
                    ..
                } = op
                {
                    if let Some(&c) = env.get(&src.as_u32()) {
                        env.insert(dst.as_u32(), c);
                    }
                }
            }
            for e in d.term.edges() {
                for (param, arg) in p.blocks[e.block].params.iter().zip(&e.args) {
                    if let (Param::Static(r), Operand::Static(a)) = (param, arg) {
                        if let Some(&c) = env.get(&a.as_u32()) {
                            env.insert(r.as_u32(), c);
                        }
                    }
                }
            }
        }
        if env.len() == before {
            return env;
        }
    }
}

/// The edge each block's static branch takes under `env` (its index in [`Term::edges`]
/// order), `None` for other blocks.
fn taken(p: &StitchProgram, env: &HashMap<u32, Const>) -> Vec<Option<usize>> {
    let value = |r: &dyc_stitcher::ge::Reg| match env.get(&r.as_u32()) {
        Some(c) => *c,
        None => panic!("static condition {r} does not copy the key"),
    };
    p.blocks
        .values()
        .map(|d| match &d.term {
            Term::Branch {
                cond: Operand::Static(r),
                ..
            } => Some(usize::from(value(r) != Const::Bool(true))),
            Term::Switch {
                arg: Operand::Static(r),
                cases,
                ..
            } => {
                let Const::Int(_, k) = value(r) else {
                    panic!("switch on a non-integer")
                };
                Some(
                    cases
                        .iter()
                        .position(|(c, _)| *c == k)
                        .unwrap_or(cases.len()),
                )
            }
            _ => None,
        })
        .collect()
}

/// The blocks a search from the entry reaches following only the taken edges of static
/// branches.
fn reached(p: &StitchProgram, taken: &[Option<usize>]) -> Vec<bool> {
    let mut seen = vec![false; p.blocks.len()];
    let mut stack = vec![p.entry.index()];
    seen[p.entry.index()] = true;
    while let Some(b) = stack.pop() {
        let edges = p.blocks[Block::new(b)].term.edges();
        for (k, e) in edges.iter().enumerate() {
            if taken[b].is_some_and(|t| t != k) {
                continue;
            }
            let t = e.block.index();
            if !seen[t] {
                seen[t] = true;
                stack.push(t);
            }
        }
    }
    seen
}

/// The cyclic reachability conditions of the program's graph, evaluated on the outcomes:
/// each static branch's variables are set to a value under which the taken edge's local
/// condition holds.
fn conditions(p: &StitchProgram, taken: &[Option<usize>]) -> Vec<bool> {
    let n = p.blocks.len();
    let succs: Vec<Vec<usize>> = p
        .blocks
        .values()
        .map(|d| d.term.edges().iter().map(|e| e.block.index()).collect())
        .collect();
    let g = Graph::from_edges(
        n,
        succs
            .iter()
            .enumerate()
            .flat_map(|(a, ss)| ss.iter().map(move |&b| (a, b))),
    );
    let outcomes: Vec<Option<Vec<usize>>> =
        (0..n).map(|v| taken[v].map(|_| succs[v].clone())).collect();
    let reach = Reach::compute_graph(&g, &outcomes, &vec![false; n]).expect("within budget");
    let mut bits = vec![false; reach.var_node.len()];
    for v in 0..n {
        let (Some((first, count)), Some(t)) = (reach.vars[v], taken[v]) else {
            continue;
        };
        let target = succs[v][t];
        // The local condition of the edge to the taken target (repeated targets share one
        // condition), and an assignment of this branch's variables under which it holds.
        let cond = reach.out[v]
            .iter()
            .find(|(b, _)| *b == target)
            .map(|&(_, c)| c)
            .expect("an out-edge to the taken target");
        let found = (0..1u32 << count).find(|&code| {
            reach.mgr.eval(cond, |var| {
                if (first..first + count).contains(&var) {
                    code >> (var - first) & 1 == 1
                } else {
                    false
                }
            })
        });
        let code = found.expect("the taken edge's condition is satisfiable");
        for i in 0..count {
            bits[(first + i) as usize] = code >> i & 1 == 1;
        }
    }
    (0..n)
        .map(|v| reach.mgr.eval(reach.cyclic[v], |var| bits[var as usize]))
        .collect()
}

/// The (block, context) copies an executor stitches, in order.
fn stitched(
    m: &crate::ir::Module,
    p: &StitchProgram,
    key: &[SVal],
    executor: ExecutorKind,
) -> Vec<(Block, Vec<(u8, u64)>)> {
    let f = &m.funcs[crate::ir::FuncId::new(0)];
    let backend = ResidualEmitter::new(m, "spec", f.sig.clone(), Vec::new());
    let mut em = Record::new(Fold::new(backend, Vec::new()));
    let cx = Context {
        prog: p,
        slices: &[],
        hosts: &NoHosts,
        mode: PromotionMode::Inline(&|_| Vec::new()),
        budget: Budget::default(),
    };
    executor
        .run(&cx, p.entry, key, &mut em)
        .expect("specializes");
    em.stitched
}

#[test]
fn planned_stitching_reaches_exactly_the_blocks_whose_condition_holds_in_order() {
    let n_cases = cases(1_000);
    let (mut planned, mut unplanned, mut refused) = (0, 0, 0);
    let (mut side_entries, mut several_roots) = (0, 0);
    for seed in 0..n_cases {
        let mut rng = Rng::new(seed);
        let n = 2 + rng.below(14);
        let src = random_cfg(&mut rng, n);
        let m = crate::ir::parser::parse_module(&src)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let f = &m.funcs[crate::ir::FuncId::new(0)];
        if crate::reducify::has_side_entry(&crate::analysis::cfg::ControlFlowGraph::compute(f)) {
            side_entries += 1;
        }
        let ge = match crate::ge::build(&m, crate::ir::FuncId::new(0), Mode::Specialize) {
            Ok(ge) => ge,
            Err(crate::ge::GeError::Reducify(_)) => {
                refused += 1;
                continue;
            }
            Err(e) => panic!("seed {seed}: {e}\n{src}"),
        };
        let p = &ge.program;
        // Over the plan's step budget (splitting on many static branches), the work-list
        // executor runs the region.
        let Some(plan) = p.plan.as_ref() else {
            unplanned += 1;
            continue;
        };
        planned += 1;
        if plan.root_blocks().count() > 1 {
            several_roots += 1;
        }
        for assignment in 0..32u64 {
            let bool_of = |i: u32| SVal::Scalar(Const::Bool(assignment >> i & 1 == 1));
            let key = [
                bool_of(0),
                bool_of(1),
                bool_of(2),
                SVal::Scalar(Const::Int(Scalar::I64, assignment >> 3)),
            ];
            let env = static_values(p, &key);
            let taken = taken(p, &env);
            let want = reached(p, &taken);
            let rc = conditions(p, &taken);
            assert_eq!(
                rc, want,
                "seed {seed}, outcome {assignment}: conditions\n{src}"
            );
            let copies = stitched(&m, p, &key, ExecutorKind::Planned);
            let what = || {
                format!(
                    "seed {seed}, outcome {assignment}:\n{src}\n{}\nstitched {:?}",
                    dyc_stitcher::ge::print_plan(p),
                    copies.iter().map(|c| c.0).collect::<Vec<_>>()
                )
            };
            // Each block once, and exactly the blocks whose condition holds.
            let mut pos = vec![usize::MAX; p.blocks.len()];
            for (k, (b, _)) in copies.iter().enumerate() {
                assert_eq!(pos[b.index()], usize::MAX, "{b} twice: {}", what());
                pos[b.index()] = k;
            }
            let got: Vec<bool> = pos.iter().map(|&k| k != usize::MAX).collect();
            assert_eq!(got, want, "stitched set: {}", what());
            // Every predecessor through a forward edge it takes comes first (back edges:
            // those of the plan's topological order).
            for (b, d) in p.blocks.iter() {
                if pos[b.index()] == usize::MAX {
                    continue;
                }
                for (k, e) in d.term.edges().iter().enumerate() {
                    let t = e.block.index();
                    let forward = plan.rank[t] > plan.rank[b.index()];
                    if forward && taken[b.index()].is_none_or(|x| x == k) {
                        assert!(
                            pos[b.index()] < pos[t],
                            "{b} after its successor {}: {}",
                            e.block,
                            what()
                        );
                    }
                }
            }
            // The reference stitches the same copies.
            let mut reference = stitched(&m, p, &key, ExecutorKind::WorkList);
            let mut copies = copies.clone();
            copies.sort();
            reference.sort();
            assert_eq!(copies, reference, "seed {seed}, outcome {assignment}");
        }
    }
    eprintln!(
        "{n_cases} CFGs: {planned} planned and checked on 32 outcomes each \
         ({several_roots} with several roots), {side_entries} with a side entry, {refused} refused by reducify, \
         {unplanned} over the plan's budget"
    );
    assert!(planned * 10 >= n_cases * 9, "too few planned: {planned}");
    assert!(
        several_roots * 4 >= planned,
        "too few with several roots: {several_roots}"
    );
}

//! The generating extension as an interface: stitch programs built by the static compiler
//! check, broken ones are refused with errors that name the entity, plans print and check,
//! and the recording emitter shows that both executors stitch the same copies.

use dyc::bta::Mode;
use dyc::residual::ResidualEmitter;
use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Record};
use dyc_stitcher::ge::{
    check_cfg, check_plan, print_plan, Block, Budget, NoHosts, Operand, Reg, SVal, SetupOp, Step,
    StitchProgram, Term,
};
use dyc_templates::fold::Fold;
use dyc_templates::ops::Const;
use dyc_templates::types::{Scalar, SrcLoc};

const POWER: &str = "fn power(x: i64, n: i64) -> i64 {
    make_static(n);
    var r = 1;
    while n > 0 {
        r = r * x;
        n = n - 1;
    }
    return r;
}
";

fn power() -> (dyc::ir::Module, StitchProgram) {
    let m = dyc::lang::compile("power.dyc", POWER).expect("compiles");
    let id = m.func_by_name("power").expect("power");
    let ge = dyc::ge::build(&m, id, Mode::Specialize).expect("builds");
    (m, ge.program)
}

#[test]
fn built_programs_check_and_broken_ones_name_the_entity() {
    let (_, p) = power();
    check_cfg(&p).expect("checks");
    // A static register read before any definition.
    let mut bad = p.clone();
    let (b, data) = bad
        .blocks
        .iter_mut()
        .find(|(_, d)| !d.ops.is_empty())
        .expect("a block with operations");
    data.ops.insert(
        0,
        dyc_stitcher::ge::Op::Setup {
            dst: Reg::from_u32(p.header.num_regs - 1),
            op: SetupOp::Copy(Reg::from_u32(p.header.num_regs + 5)),
            loc: SrcLoc::default(),
        },
    );
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(
        e.contains(&format!("{b}: r{} is beyond", p.header.num_regs + 5)),
        "{e}"
    );
    // An edge with one argument too many.
    let mut bad = p.clone();
    let (b, data) = bad
        .blocks
        .iter_mut()
        .find(|(_, d)| matches!(d.term, Term::Jump(_)))
        .expect("a jump");
    if let Term::Jump(e) = &mut data.term {
        e.args.push(Operand::Dyn(Reg::from_u32(0)));
    }
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(
        e.contains(&format!("{b}: edge to")) && e.contains("arguments"),
        "{e}"
    );
    // A branch to a block that does not exist.
    let mut bad = p.clone();
    let entry = bad.entry;
    if let Term::Jump(e) = &mut bad.blocks[entry].term {
        e.block = Block::from_u32(999);
    }
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(e.contains("branch to b999, which does not exist"), "{e}");
}

/// The static transform's plan for `power`: the loop header has a static parameter and
/// two in-edges, so it is a root (one tree per value of `n`); its tree forks on `n > 0`.
#[test]
fn the_plan_prints_and_checks() {
    let (_, mut p) = power();
    check_plan(&p).expect("checks");
    let text = print_plan(&p);
    assert_eq!(
        text,
        "plan power: 8 steps (9 without tail merging)
  root b0 (entry) at 0
  root b1 (special) at 2
  root b3 (key) at 6
  0: stitch b0  ; block0
  1: end
  2: stitch b1  ; block1
  3: fork b1 -> 4, 1
  4: stitch b2  ; block2
  5: end
  6: stitch b3  ; block3
  7: end
"
    );
    // A root missing, then a fork whose arm leads back to its own block.
    let good = p.plan.clone();
    let plan = p.plan.as_mut().expect("a plan");
    plan.roots[0] = None;
    let e = check_plan(&p).expect_err("refused").to_string();
    assert_eq!(e, "b0: the entry and promotion blocks must be roots\n");
    // A rank out of range (the planned stitcher queues roots by rank).
    p.plan = good.clone();
    let plan = p.plan.as_mut().expect("a plan");
    plan.rank[1] = 99;
    let e = check_plan(&p).expect_err("refused").to_string();
    assert_eq!(e, format!("power: rank 99 for {} blocks\n", p.blocks.len()));
    p.plan = good;
    let plan = p.plan.as_mut().expect("a plan");
    let fork = plan
        .steps
        .iter()
        .position(|s| matches!(s, Step::Fork { .. }))
        .expect("a fork");
    if let Step::Fork { arms, .. } = &mut plan.steps[fork] {
        arms[0] = fork as u32 - 1;
    }
    let e = check_plan(&p).expect_err("refused").to_string();
    assert_eq!(e, "step 2: steps form a cycle\n");
}

/// The recording emitter shows the copies each executor stitched: `power` with `n = 3`
/// stitches the loop header for n = 3, 2, 1, 0 and the body three times, each (block,
/// static context) once; the two executors make the same copies.
#[test]
fn the_recording_emitter_sees_every_copy_once() {
    let mut sets = Vec::new();
    for executor in [ExecutorKind::WorkList, ExecutorKind::Planned] {
        sets.push(record_power(executor));
    }
    assert_eq!(sets[0], sets[1]);
}

/// `power`'s program `p` (of module `m`) specialized on `n = 3` by `executor` into a
/// recording emitter: the recording, and the number of operations the executor processed.
fn run_power<'m>(
    m: &'m dyc::ir::Module,
    p: &StitchProgram,
    executor: ExecutorKind,
) -> (Record<Fold<ResidualEmitter<'m>>>, usize) {
    run_recorded(m, p, "power", 3, executor)
}

/// Function `func`'s program `p` (of module `m`), whose key is one `i64`, specialized on
/// `key` by `executor` into a recording emitter: the recording, and the number of
/// operations the executor processed.
fn run_recorded<'m>(
    m: &'m dyc::ir::Module,
    p: &StitchProgram,
    func: &str,
    key: u64,
    executor: ExecutorKind,
) -> (Record<Fold<ResidualEmitter<'m>>>, usize) {
    let id = m.func_by_name(func).expect("the function");
    let backend = ResidualEmitter::new(m, "spec", m.funcs[id].sig.clone(), vec![]);
    let mut em = Record::new(Fold::new(backend, vec![]));
    let cx = Context {
        prog: p,
        slices: &[],
        hosts: &NoHosts,
        mode: PromotionMode::Inline(&|_| Vec::new()),
        budget: Budget::default(),
    };
    let key = [SVal::Scalar(Const::Int(Scalar::I64, key))];
    let unit = executor
        .run(&cx, p.entry, &key, &mut em)
        .expect("specializes");
    (em, unit.ops)
}

fn record_power(executor: ExecutorKind) -> std::collections::BTreeSet<(Block, Vec<(u8, u64)>)> {
    let (m, p) = power();
    let (em, _) = run_power(&m, &p, executor);
    let mut seen = std::collections::HashSet::new();
    for s in &em.stitched {
        assert!(seen.insert(s.clone()), "{s:?} stitched twice");
    }
    let count = |b: Block| em.blocks().iter().filter(|&&x| x == b).count();
    let header = p
        .blocks
        .iter()
        .find(|(_, d)| matches!(d.term, Term::Branch { .. }))
        .map(|(b, _)| b)
        .expect("the loop header");
    assert_eq!(count(header), 4, "{:?}", em.stitched);
    assert_eq!(em.stitched[0].0, p.entry);
    em.stitched.iter().cloned().collect()
}

/// A plan with near-identical tails merged (`tests/filetests/plan/near_identical_tails.ir`:
/// one arm jumps into another, passing over a block it does not need): on every outcome
/// the planned stitcher makes the work-list executor's copies, and the code computes what
/// the interpreter does; on the arm that jumped, the block passed over is a test that finds
/// its slot empty.
#[test]
fn merged_near_identical_tails_stitch_what_the_work_list_stitches() {
    use dyc::interp::{Interpreter, Memory, Val};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/filetests/plan/near_identical_tails.ir"
    );
    let src = std::fs::read_to_string(path).expect("readable");
    let m = dyc::ir::parser::parse_module(&src).expect("parses");
    let id = m.func_by_name("f").expect("f");
    // The file's merges are blocks of their own (see the file tests' `plan` kind).
    let prep = dyc::ge::Prepare { thread: false };
    let ge = dyc::ge::build_with(&m, id, Mode::Specialize, prep).expect("builds");
    let plan = ge.program.plan.as_ref().expect("a plan");
    assert!(
        plan.steps
            .iter()
            .any(|s| matches!(s, Step::Stitch { test: true, .. })),
        "no merged tail:\n{}",
        print_plan(&ge.program)
    );
    for s in 0..3i64 {
        for d in [false, true] {
            let args = [
                Val::Scalar(Const::Int(Scalar::I64, s as u64)),
                Val::Scalar(Const::Bool(d)),
                Val::Scalar(Const::Int(Scalar::I64, 10)),
            ];
            let want = Interpreter::new(&m)
                .call(id, &args, &mut Memory::default())
                .expect("runs");
            let planned = residual(&m, id, &args, ExecutorKind::Planned);
            let reference = residual(&m, id, &args, ExecutorKind::WorkList);
            assert_eq!(planned.result, want, "s = {s}, d = {d}");
            let set = |r: &dyc::residual::ResidualRun| {
                let mut v = r.stitched.clone();
                v.sort();
                v
            };
            assert_eq!(set(&planned), set(&reference), "s = {s}, d = {d}");
        }
    }
}

/// The planned stitcher stitches the copy a static branch selects into the block that
/// branched, when nothing else enters it (no jump, no block of its own), so the residual
/// code of `power` on n = 3 has fewer blocks than the work-list executor's, for the same
/// copies and the same result.
#[test]
fn the_planned_stitcher_fuses_what_static_branches_select() {
    use dyc::interp::Val;
    let (m, _) = power();
    let id = m.func_by_name("power").expect("power");
    let args = [
        Val::Scalar(Const::Int(Scalar::I64, 5)),
        Val::Scalar(Const::Int(Scalar::I64, 3)),
    ];
    let planned = residual(&m, id, &args, ExecutorKind::Planned);
    let reference = residual(&m, id, &args, ExecutorKind::WorkList);
    let want = Some(Val::Scalar(Const::Int(Scalar::I64, 125)));
    assert_eq!((&planned.result, &reference.result), (&want, &want));
    assert_eq!(planned.stitched, reference.stitched);
    let blocks = |r: &dyc::residual::ResidualRun| {
        let f = r.module.funcs.values().last().expect("the specialization");
        f.blocks.len()
    };
    // The reference has a block per copy (and the function's entry). The loop header is
    // a root (its copies are looked up), as is the exit; the three copies of the body,
    // which only the header's static branch enters, are fused into the header's copies.
    assert_eq!(blocks(&reference), planned.stitched.len() + 1);
    assert_eq!(blocks(&planned) + 3, blocks(&reference));
}

/// Specializes `id` on `args` with `executor` and runs the residual code.
fn residual(
    m: &dyc::ir::Module,
    id: dyc::ir::FuncId,
    args: &[dyc::interp::Val],
    executor: ExecutorKind,
) -> dyc::residual::ResidualRun {
    dyc::residual::run_with(
        m,
        id,
        args,
        &mut dyc::interp::Memory::default(),
        &mut Default::default(),
        10_000,
        Budget::default(),
        executor,
        dyc_stitcher::ge::MAX_ARRAY_VALUES,
    )
    .expect("specializes")
}

/// The constants of setup code, which executors set once per unit, are the registers that
/// a setup constant and no other static operation defines, and no copy runs their
/// operations. (That skipping them changes no result is shown by the random-program
/// properties of `dyc`.)
#[test]
fn setup_constants_are_set_once_per_unit() {
    let (m, p) = power();
    let mut twice = p.clone();
    let consts = p.constants().to_vec();
    assert!(!consts.is_empty());
    for &(r, c) in &consts {
        let defs: Vec<&SetupOp> = p
            .blocks
            .values()
            .flat_map(|d| &d.ops)
            .filter_map(|op| match op {
                dyc_stitcher::ge::Op::Setup { dst, op, .. } if *dst == r => Some(op),
                _ => None,
            })
            .collect();
        assert_eq!(defs, [&SetupOp::Const(c)]);
    }
    // A second static definition of the first constant's register.
    let (r, _) = consts[0];
    let data = twice.blocks.values_mut().last().expect("a block");
    data.ops.push(dyc_stitcher::ge::Op::Setup {
        dst: r,
        op: SetupOp::Copy(r),
        loc: SrcLoc::default(),
    });
    assert!(twice.constants().iter().all(|&(x, _)| x != r));
    assert!(!twice.is_constant()[r.as_u32() as usize]);
    // Each executor processes every operation of every copy it stitches but the
    // constants', whose registers it set once.
    let per_copy = |b: Block| {
        p.blocks[b]
            .ops
            .iter()
            .filter(|op| !matches!(op, dyc_stitcher::ge::Op::Setup { dst, .. } if p.is_constant()[dst.as_u32() as usize]))
            .count()
    };
    for executor in [ExecutorKind::WorkList, ExecutorKind::Planned] {
        let (em, ops) = run_power(&m, &p, executor);
        let expected: usize = em.blocks().into_iter().map(per_copy).sum();
        assert_eq!(ops, expected, "{executor:?}");
        let all: usize = em.blocks().into_iter().map(|b| p.blocks[b].ops.len()).sum();
        assert!(
            ops < all,
            "{executor:?}: the constants' operations were skipped"
        );
    }
}

/// The unit invariants of `power` are what its entry block (which no edge enters) defines:
/// `x`, `n`, `n`'s copy and the constant `1`. Copies other than a unit's first leave `x`
/// out of their parameters; an edge into the entry block makes nothing invariant. (That
/// leaving them out changes no result is shown by the random-program properties of
/// `dyc` and the differential tests of every tier.)
#[test]
fn unit_invariants_are_what_an_entry_block_no_edge_enters_defines() {
    let (m, p) = power();
    let invariant = |p: &StitchProgram| -> Vec<u32> {
        (0..p.header.num_regs)
            .filter(|&r| p.is_invariant()[r as usize])
            .collect()
    };
    assert_eq!(invariant(&p), [0, 1, 2, 3]);
    let head = match &p.blocks[p.entry].term {
        Term::Jump(e) => e.block,
        t => panic!("the entry jumps to the loop head: {t:?}"),
    };
    let lay = p.layout(head);
    assert_eq!(lay.input_types.len(), 2, "the accumulator and x");
    assert_eq!(lay.copy_types.len(), 1, "the accumulator");
    assert_eq!(
        lay.copy_key_regs, lay.key_regs,
        "no invariant in the head's key"
    );
    let x = dyc::interp::Val::Scalar(Const::Int(Scalar::I64, 3));
    let n = dyc::interp::Val::Scalar(Const::Int(Scalar::I64, 4));
    let id = m.func_by_name("power").expect("power");
    for executor in [ExecutorKind::WorkList, ExecutorKind::Planned] {
        let run = residual(&m, id, &[x, n], executor);
        assert_eq!(
            run.result,
            Some(dyc::interp::Val::Scalar(Const::Int(Scalar::I64, 81)))
        );
        // The specialization: the function's entry (x and n), the unit's first copy (x),
        // then the unrolled copies, which take the accumulator alone and read x from the
        // first copy.
        let f = run
            .module
            .funcs
            .values()
            .last()
            .expect("the specialization");
        let params: Vec<usize> = f
            .layout
            .blocks()
            .iter()
            .map(|&b| f.block_params(b).len())
            .collect();
        assert!(params.len() > 4, "{executor:?}: {params:?}");
        assert_eq!(params[..2], [2, 1], "{executor:?}");
        assert!(
            params[2..].iter().all(|&k| k <= 1),
            "{executor:?}: {params:?}"
        );
    }
    let mut entered = p.clone();
    let last = entered.blocks.keys().next_back().expect("a block");
    entered.blocks[last].term = Term::Jump(dyc_stitcher::ge::Edge {
        block: p.entry,
        args: vec![
            Operand::Dyn(Reg::from_u32(0)),
            Operand::Static(Reg::from_u32(1)),
        ],
    });
    assert!(invariant(&entered).is_empty());
}

/// A local array access whose index is static and in bounds reaches no emitter: the
/// executor reads or rebinds the element itself. A static index out of bounds (which must
/// fault when the code runs) and a dynamic index go to the emitter.
#[test]
fn static_indices_in_bounds_reach_no_emitter() {
    let src = "fn f(i: i64, x: i64) -> i64 {
    make_static(i);
    var a: [i64; 4];
    a[1] = x;
    a[2] = a[1] + x;
    a[i] = x;
    return a[2] + a[x];
}
";
    let m = dyc::lang::compile("f.dyc", src).expect("compiles");
    let id = m.func_by_name("f").expect("f");
    let p = dyc::ge::build(&m, id, Mode::Specialize)
        .expect("builds")
        .program;
    for executor in [ExecutorKind::WorkList, ExecutorKind::Planned] {
        // i = 3: only `a[x]` is handed on; i = 9: `a[i] = x` too.
        for (i, accesses) in [(3, 1), (9, 2)] {
            let (em, _) = run_recorded(&m, &p, "f", i, executor);
            assert_eq!(em.array_accesses, accesses, "{executor:?}, i = {i}");
        }
    }
}

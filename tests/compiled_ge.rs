//! The compiled generating extension against the interpreted planned stitcher: every
//! specialization this process makes checks, call for call, that the unit the compiled
//! code recorded is the one the interpreted stitcher records (`DYC_CHECK_COMPILED_GE=1`,
//! set before the first specialization, with plans compiled at their first use), on the
//! main job's byte-code programs and on random byte-code programs, on a region whose
//! setup code takes every operation the compiled code runs natively to its edge cases,
//! on random static setup code (its results also against the reference interpreter), on
//! lazy and promoting regions, on static faults, on dynamic switches, on edges back into
//! a unit's first copy, on narrow static indices and on local arrays in memory; and the
//! compiled code made those units (the check is not vacuous). Units not recorded, which
//! the compiled code writes into the stencil emitter directly, are checked by their
//! results; units over their budget by their errors, against the optimizing tier's.

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bench_programs;
mod common;
#[path = "common/random_bytecode.rs"]
mod random_bytecode;

use dyc::interp::{parse_args, Interpreter, Memory, Val};
use dyc::ir::Const;
use dyc::{Arg, Program, RuntimeOptions, Tier, Tiers};
use random_bytecode::{random_bytecode, Rng};

/// Held by each test, so that the units each counts are its own.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Turns the check on for this process, and has plans compiled at their first use
/// (before any specialization reads either).
fn check_every_unit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::env::set_var("DYC_CHECK_COMPILED_GE", "1");
        std::env::set_var("DYC_COMPILED_GE", "now");
    });
}

fn interpreter() -> Program {
    stitch_tier("bytecode.dyc", include_str!("../examples/bytecode.dyc"))
}

/// `src` compiled to specialize in the stitch tier only.
fn stitch_tier(name: &str, src: &str) -> Program {
    let opts = RuntimeOptions {
        tiers: Tiers {
            first: Tier::Stitch,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        ..RuntimeOptions::default()
    };
    Program::compile_with(name, src, opts).expect("compiles")
}

/// Asserts that since `compiled_counts` gave `before`, compiled code made at least
/// `at_least` units and gave up on none.
fn made_without_giving_up(before: (u64, u64), at_least: u64) {
    let (made, gave_up) = dyc_stitcher::exec::compiled_counts();
    assert!(
        made - before.0 >= at_least && gave_up == before.1,
        "{} units made by compiled code (at least {at_least} expected), {} given up",
        made - before.0,
        gave_up - before.1
    );
}

/// Specializes the interpreter on `code` in the stitch tier and checks its results.
fn run(program: &Program, code: &[i64], mem: usize, what: &str) {
    let s = program
        .region("run")
        .expect("region")
        .specialize_in(&[Arg::from(code)], Tier::Stitch)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    for n in [0, 3, 11] {
        let mut want_mem = vec![0i64; mem.max(1)];
        let want = bench_programs::interpret(code, n, &mut want_mem);
        let mut got_mem = vec![0i64; mem.max(1)];
        let got = s
            .call(&mut [Arg::from(n), Arg::from(&mut got_mem[..])])
            .unwrap_or_else(|e| panic!("{what}, n = {n}: {e}"))
            .and_then(|c| c.as_i64());
        assert_eq!(got, Some(want), "{what}, n = {n}");
        assert_eq!(got_mem, want_mem, "{what}, n = {n}");
    }
}

#[test]
fn compiled_and_interpreted_stitchers_record_the_same_units() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let program = interpreter();
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let mut units = 0;
    for b in bench_programs::benches() {
        run(&program, &b.code, b.mem, b.name);
        units += 1;
    }
    for seed in 0..common::cases(300) {
        let code = random_bytecode(&mut Rng(seed));
        run(&program, &code, 1, &format!("seed {seed}\n{code:?}"));
        units += 1;
    }
    // (Every unit of these programs is one the compiled code makes: the promotions of
    // indirect jumps too.)
    made_without_giving_up((runs, aborts), units);
}

/// Static `i64` arithmetic, comparisons, shifts, `min`/`max`, negation and not (of an
/// integer and of a `bool`), `len` and loads, on the values where each is easy to get
/// wrong natively: zero and minus one divisors of the least `i64`, shift amounts past the
/// width and negative, equal operands.
const SETUP_OPS: &str = "
fn mix(ks: [i64], x: i64) -> i64 {
    make_static(ks);
    var acc = x;
    var i = 0;
    while i < len(ks) {
        let k = ks@[i];
        let j = ks@[(i + 1) % len(ks)];
        var s = (k << j) ^ (k >> j) ^ min(k, j) ^ max(k, j) ^ -k ^ !j;
        s = s + (k - j) * (k + j) + (k & j) - (k | j);
        if k < j { s = s + 1; }
        if k <= j { s = s + 2; }
        if k > j { s = s + 4; }
        if k >= j { s = s + 8; }
        if k == j { s = s + 16; }
        if k != j { s = s + 32; }
        let neg = !(k < 0);
        if neg { s = s * 3; }
        if j != 0 { s = s + k / j + k % j; }
        acc = acc * 31 + s;
        i += 1;
    }
    return acc;
}
";

#[test]
fn setup_operations_agree_at_their_edge_cases() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let program = stitch_tier("mix.dyc", SETUP_OPS);
    let m = dyc::lang::compile("mix.dyc", SETUP_OPS).expect("compiles");
    let id = m.func_by_name("mix").expect("mix");
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let edges = [
        i64::MIN,
        -1,
        0,
        1,
        2,
        63,
        64,
        65,
        -65,
        -64,
        7,
        i64::MAX,
        -7,
        1 << 40,
    ];
    let mut units = 0;
    for (n, w) in edges.windows(3).enumerate() {
        let mut ks = w.to_vec();
        ks.extend(&edges[..n % 4]);
        let spec = program
            .region("mix")
            .expect("region")
            .specialize_in(&[Arg::from(&ks[..])], Tier::Stitch)
            .unwrap_or_else(|e| panic!("{ks:?}: {e}"));
        units += 1;
        for x in [0i64, -3, 1 << 33] {
            let mut mem = Memory::default();
            let args = parse_args(&m.funcs[id].sig.params, &format!("{ks:?}, {x}"), &mut mem)
                .expect("arguments");
            let want = match Interpreter::new(&m).call(id, &args, &mut mem) {
                Ok(Some(Val::Scalar(Const::Int(_, v)))) => v as i64,
                r => panic!("{ks:?}, {x}: the interpreter gave {r:?}"),
            };
            let got = spec
                .call(&mut [Arg::from(x)])
                .unwrap_or_else(|e| panic!("{ks:?}, {x}: {e}"))
                .and_then(|c| c.as_i64());
            assert_eq!(got, Some(want), "{ks:?}, {x}");
        }
    }
    made_without_giving_up((runs, aborts), units);
}

/// A static expression over `names` (integers), at most `depth` operators deep, drawn
/// from every operation the compiled code runs natively.
fn static_expr(rng: &mut common::Rng, names: &[&str], depth: u32) -> String {
    if depth == 0 || rng.below(3) == 0 {
        return match rng.below(4) {
            0 => format!("{}", rng.below(130) as i64 - 65),
            _ => names[rng.below(names.len() as u64) as usize].to_string(),
        };
    }
    let (a, b) = (
        static_expr(rng, names, depth - 1),
        static_expr(rng, names, depth - 1),
    );
    match rng.below(14) {
        0 => format!("min({a}, {b})"),
        1 => format!("max({a}, {b})"),
        2 => format!("(-{a})"),
        3 => format!("(!{a})"),
        k => {
            let op = ["+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"][k as usize - 4];
            format!("({a} {op} {b})")
        }
    }
}

/// A static comparison over `names`.
fn static_cond(rng: &mut common::Rng, names: &[&str]) -> String {
    let op = ["<", "<=", ">", ">=", "==", "!="][rng.below(6) as usize];
    format!(
        "{} {op} {}",
        static_expr(rng, names, 1),
        static_expr(rng, names, 1)
    )
}

/// A function `f(k, j, x)` with `k` and `j` run-time constants: a static loop whose
/// static variables change by random static expressions and conditions (values, `bool`s
/// and their negations flow through block parameters), mixed into a dynamic result.
fn random_setup(rng: &mut common::Rng) -> String {
    let names = ["s", "t", "i", "k", "j"];
    let mut src = String::from(
        "fn f(k: i64, j: i64, x: i64) -> i64 {\n    make_static(k, j);\n    var acc = x;\n    var s = k;\n    var t = j;\n    var i = 0;\n    while i < 3 {\n",
    );
    src += &format!("        let e = {};\n", static_expr(rng, &names, 3));
    src += &format!("        let b = {};\n", static_cond(rng, &names));
    src += &format!(
        "        if b {{ s = {}; }} else {{ t = {}; }}\n",
        static_expr(rng, &names, 2),
        static_expr(rng, &names, 2)
    );
    src += "        let c = !b;\n";
    src += &format!(
        "        if c || ({}) {{ acc = acc + e; }} else {{ acc = acc * 3 - e; }}\n",
        static_cond(rng, &names)
    );
    src += "        i += 1;\n    }\n    return acc + s - t;\n}\n";
    src
}

#[test]
fn random_setup_code_agrees_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let edges = [i64::MIN, -65, -1, 0, 1, 2, 7, 63, 64, i64::MAX];
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let mut programs = 0;
    for seed in 0..common::cases(200) {
        let mut rng = common::Rng(seed);
        let src = random_setup(&mut rng);
        let m = dyc::lang::compile("setup.dyc", &src).expect("a random function compiles");
        let id = m.func_by_name("f").expect("f");
        let program = stitch_tier("setup.dyc", &src);
        let region = program.region("f").expect("region");
        programs += 1;
        for _ in 0..3 {
            let (k, j) = (
                edges[rng.below(edges.len() as u64) as usize],
                edges[rng.below(edges.len() as u64) as usize],
            );
            for x in [0, 5] {
                let args =
                    [k, j, x].map(|v| Val::Scalar(Const::Int(dyc::ir::Scalar::I64, v as u64)));
                let want = common::interpreted(Interpreter::new(&m).call(
                    id,
                    &args,
                    &mut Memory::default(),
                ));
                let got =
                    common::outcome(region.call(&mut [Arg::from(k), Arg::from(j), Arg::from(x)]));
                assert_eq!(got, want, "seed {seed}, f({k}, {j}, {x}):\n{src}");
            }
        }
    }
    // (Static faults, divisions by zero among them, are made by compiled code too.)
    made_without_giving_up((runs, aborts), programs);
}

/// A loop unrolled lazily, one iteration per unit (`loop_specialize_lazy`), a lazy
/// specialization point, the lazy arms of dynamic branches (`lazy`) and a promotion in
/// a dynamic branch's arm: the jumps and branches into lazy and promotion blocks are
/// compiled (none of the units gives up), and the results are the interpreter's.
const LAZY: &str = "
fn g(n: i64, x: i64) -> i64 {
    make_static(n: loop_specialize_lazy);
    var acc = x;
    var i = 0;
    while i < n {
        acc = acc * 2 + i;
        i += 1;
    }
    return acc;
}

fn h(k: i64, x: i64) -> i64 {
    make_static(k: specialize_lazy);
    var s = k;
    if x > 0 { s = s + 1; } else { s = s * 2; }
    return x * s;
}

fn l(k: i64, x: i64) -> i64 {
    make_static(k: lazy);
    var r = k;
    if x > 0 { r = r * 2 + x; } else { r = r - x; }
    if x > 3 { r = r + k; }
    return r * k;
}

fn p(k: i64, x: i64) -> i64 {
    make_static(k);
    var y = x * 3 + k;
    if x > 2 {
        make_static(y);
        return y * y + k;
    }
    return y - 1;
}
";

/// Each function `name` of `m` (specialized in `program`) called with `(k, x)` for every
/// `(name, k)` of `calls` and `x` of `xs` returns, or faults, as the interpreter does.
fn agree_on_pairs(m: &dyc::ir::Module, program: &Program, calls: &[(&str, i64)], xs: &[i64]) {
    for &(name, k) in calls {
        let id = m.func_by_name(name).expect("function");
        let region = program.region(name).expect("region");
        for &x in xs {
            let args = [k, x].map(|v| Val::Scalar(Const::Int(dyc::ir::Scalar::I64, v as u64)));
            let want =
                common::interpreted(Interpreter::new(m).call(id, &args, &mut Memory::default()));
            let got = common::outcome(region.call(&mut [Arg::from(k), Arg::from(x)]));
            assert_eq!(got, want, "{name}({k}, {x})");
        }
    }
}

#[test]
fn lazy_jumps_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let m = dyc::lang::compile("lazy.dyc", LAZY).expect("compiles");
    let program = stitch_tier("lazy.dyc", LAZY);
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let calls = [
        ("g", 0i64),
        ("g", 1),
        ("g", 6),
        ("h", 3),
        ("h", -2),
        ("l", 2),
        ("l", -5),
        ("p", 1),
        ("p", 4),
    ];
    agree_on_pairs(&m, &program, &calls, &[-3i64, 0, 5, 5, 9]);
    made_without_giving_up((runs, aborts), calls.len() as u64);
}

/// Static faults: a static load past the end of the key, a static division and a
/// remainder by zero, in a dynamic branch's arm and after its merge, with operations
/// after them in the block. The compiled code emits each fault (the faulting operation
/// on its constants, then a trap) and ends the block there, as the interpreted stitcher
/// does: none of the units gives up, and each call faults where the interpreter does, or
/// returns what it returns.
const FAULTS: &str = "
fn f(ks: [i64], x: i64) -> i64 {
    make_static(ks);
    var acc = x;
    var i = 0;
    make_static(i);
    while i < 4 {
        let k = ks@[i];
        if x > k {
            let d = 100 / (k - 2);
            acc = acc + d;
        } else {
            acc = acc - 1;
        }
        acc = acc * 3 + x % (k + 5);
        let r = 7 % (k + 9);
        acc = acc + r;
        i += 1;
    }
    return acc;
}
";

#[test]
fn static_faults_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let m = dyc::lang::compile("faults.dyc", FAULTS).expect("compiles");
    let id = m.func_by_name("f").expect("f");
    let program = stitch_tier("faults.dyc", FAULTS);
    let region = program.region("f").expect("region");
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let keys: [&[i64]; 6] = [
        &[1, 3, 4, 6],
        &[1, 2, 3, 4],
        &[0, -5, 1, 1],
        &[3, -9, 0, 0],
        &[1, 3],
        &[],
    ];
    let mut faults = 0;
    for ks in keys {
        for x in [-20i64, 0, 2, 10] {
            let mut mem = Memory::default();
            let args = parse_args(&m.funcs[id].sig.params, &format!("{ks:?}, {x}"), &mut mem)
                .expect("arguments");
            let want = common::interpreted(Interpreter::new(&m).call(id, &args, &mut mem));
            let got = common::outcome(region.call(&mut [Arg::from(ks), Arg::from(x)]));
            assert_eq!(got, want, "f({ks:?}, {x})");
            faults += usize::from(want.starts_with("->"));
        }
    }
    assert!(faults >= 8, "only {faults} calls fault");
    made_without_giving_up((runs, aborts), keys.len() as u64);
}

/// Dynamic `switch`es: cases listing several values, a case into a promotion, lazy arms,
/// no `default`, and a switch in a loop unrolled on a static counter. None of the units
/// gives up, and the results are the interpreter's.
const SWITCHES: &str = "
fn s(k: i64, x: i64) -> i64 {
    make_static(k);
    var r = k;
    switch x {
        case 0: r = r * 2;
        case 1, 5: r = r + x;
        case -3: r = r - k;
        default: r = r * x;
    }
    return r + k;
}

fn t(k: i64, x: i64) -> i64 {
    make_static(k);
    var y = x * 3 + k;
    switch x & 3 {
        case 0:
            make_static(y);
            return y * y + k;
        case 2: y = y + k;
        default: y = y - 1;
    }
    return y;
}

fn u(k: i64, x: i64) -> i64 {
    make_static(k: lazy);
    var r = k;
    switch x {
        case 1: r = r * 2 + x;
        case 2: r = r - x;
    }
    return r * k;
}

fn v(k: i64, x: i64) -> i64 {
    make_static(k);
    var acc = x;
    var i = 0;
    make_static(i);
    while i < k {
        switch (acc + i) % 3 {
            case 0: acc = acc + i;
            case 1: acc = acc * 2;
            default: acc = acc - k;
        }
        i += 1;
    }
    return acc;
}
";

#[test]
fn dynamic_switches_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let m = dyc::lang::compile("switches.dyc", SWITCHES).expect("compiles");
    let program = stitch_tier("switches.dyc", SWITCHES);
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let calls = [
        ("s", 2i64),
        ("s", -1),
        ("t", 1),
        ("t", 6),
        ("u", 3),
        ("u", -2),
        ("v", 0),
        ("v", 4),
    ];
    agree_on_pairs(&m, &program, &calls, &[-3i64, 0, 1, 2, 4, 5, 5, 8]);
    made_without_giving_up((runs, aborts), calls.len() as u64);
}

/// Edges back into a unit's first copy: a lazy point ahead of a loop whose static value
/// comes back to the first one after two rounds, so that the loop's plain jump enters
/// the unit's first copy again, passing the unit's invariants (the slice) as well; the
/// loop ending, and faulting. None of the units gives up, and the results (and faults)
/// are the interpreter's.
const ENTRY_EDGES: &str = "
fn walk(xs: [i64], x: i64) -> i64 {
    var s = 0;
    make_static(s: lazy);
    var i = x - x;
    var acc = 0;
    if x > 0 {
        acc = 10;
    }
    while i < len(xs) {
        acc = acc + xs[i] * (s + 1);
        i = i + 1;
        s = 1 - s;
    }
    return acc;
}

fn run(xs: [i64], x: i64) -> i64 {
    var s = 0;
    make_static(s: lazy);
    var i = x - x;
    var acc = 0;
    if x > 0 {
        acc = 10;
    }
    loop {
        acc = acc + xs[i] * (s + 1);
        i = i + 1;
        s = 1 - s;
    }
}
";

#[test]
fn edges_into_a_units_first_copy_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let m = dyc::lang::compile("entry.dyc", ENTRY_EDGES).expect("compiles");
    let program = stitch_tier("entry.dyc", ENTRY_EDGES);
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    for name in ["walk", "run"] {
        let id = m.func_by_name(name).expect("function");
        let region = program.region(name).expect("region");
        for xs in [&[1i64, 2, 3][..], &[4, 5, 6, 7], &[]] {
            for x in [-1i64, 0, 2] {
                let mut mem = Memory::default();
                let args = parse_args(&m.funcs[id].sig.params, &format!("{xs:?}, {x}"), &mut mem)
                    .expect("arguments");
                let want = common::interpreted(Interpreter::new(&m).call(id, &args, &mut mem));
                let got = common::outcome(region.call(&mut [Arg::from(xs), Arg::from(x)]));
                assert_eq!(got, want, "{name}({xs:?}, {x})");
            }
        }
    }
    made_without_giving_up((runs, aborts), 4);
}

/// `src` compiled to specialize in the stitch tier only, with no unit recorded: the
/// compiled plan writes each unit into the stencil emitter directly.
fn unrecorded(name: &str, src: &str, budget: dyc_stitcher::ge::Budget) -> Program {
    let opts = RuntimeOptions {
        tiers: Tiers {
            first: Tier::Stitch,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        constant_params: false,
        budget,
        ..RuntimeOptions::default()
    };
    Program::compile_with(name, src, opts).expect("compiles")
}

/// Units stitched without a recording (where recording finds nothing, and after a
/// program's first units) are made by the compiled plan straight into the stencil
/// emitter, which cannot start again: on the main job's programs and random byte-code
/// programs, their code computes what the interpreter does, and the compiled plan made
/// every unit.
#[test]
fn unrecorded_units_are_made_by_the_compiled_plan() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let program = unrecorded(
        "bytecode.dyc",
        include_str!("../examples/bytecode.dyc"),
        dyc_stitcher::ge::Budget::default(),
    );
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let mut units = 0;
    for b in bench_programs::benches() {
        run(&program, &b.code, b.mem, b.name);
        units += 1;
    }
    for seed in 0..common::cases(300) {
        let code = random_bytecode(&mut Rng(seed));
        run(&program, &code, 1, &format!("seed {seed}\n{code:?}"));
        units += 1;
    }
    made_without_giving_up((runs, aborts), units);
}

/// Units over their budget of block copies or of operations, recorded or not: the
/// compiled plan stops where the interpreted stitcher would and reports the same error
/// (the budget, the block and its source position, compared with the optimizing tier's,
/// whose emitter the compiled plan does not write to), without giving up.
#[test]
fn units_over_their_budget_fail_as_the_interpreted_stitcher_does() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    const SRC: &str = "
fn f(n: i64, x: i64) -> i64 {
    make_static(n);
    var acc = x;
    var i = 0;
    make_static(i);
    while i < n {
        acc = acc * 3 + i;
        if acc > 1000 { acc = acc - 999; }
        i += 1;
    }
    return acc;
}
";
    let budgets = [
        dyc_stitcher::ge::Budget {
            max_blocks: 40,
            ..dyc_stitcher::ge::Budget::default()
        },
        dyc_stitcher::ge::Budget {
            max_ops: 300,
            ..dyc_stitcher::ge::Budget::default()
        },
    ];
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    for budget in budgets {
        let opts = |constant_params| RuntimeOptions {
            tiers: common::no_tier_up(),
            constant_params,
            budget,
            ..RuntimeOptions::default()
        };
        for constant_params in [true, false] {
            let program =
                Program::compile_with("budget.dyc", SRC, opts(constant_params)).expect("compiles");
            let region = program.region("f").expect("region");
            let fits = region
                .specialize_in(&[Arg::from(5i64)], Tier::Stitch)
                .expect("five rounds fit the budget");
            assert_eq!(
                fits.call(&mut [Arg::from(1i64)])
                    .expect("runs")
                    .and_then(|c| c.as_i64()),
                Some((0..5).fold(1i64, |acc, i| {
                    let a = acc * 3 + i;
                    if a > 1000 {
                        a - 999
                    } else {
                        a
                    }
                }))
            );
            for n in [60i64, 200] {
                let over = |tier| match region.specialize_in(&[Arg::from(n)], tier) {
                    Ok(_) => panic!("{n} rounds fit {budget:?} in {tier:?}"),
                    Err(e) => e.to_string(),
                };
                let (stitch, optimizing) = (over(Tier::Stitch), over(Tier::Optimizing));
                assert_eq!(stitch, optimizing, "{budget:?}");
                assert!(stitch.contains("budget exceeded"), "{stitch}");
            }
        }
    }
    made_without_giving_up((runs, aborts), 12);
}

/// Static indices of integer types narrower than 64 bits, in bounds and out (negative,
/// past the end): the compiled plan takes them natively, in units recorded (checked
/// call for call) and not, and none of the units gives up; the results (and the faults)
/// are the interpreter's.
#[test]
fn narrow_static_indices_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    const SRC: &str = "
fn g(k: i32, x: i64) -> i64 {
    make_static(k);
    var a: [i64; 4];
    a[k] = x;
    let j = (k + 1) as u8;
    a[j % 4] = x * 2;
    return a[k] + a[j % 4] + x;
}
";
    let m = dyc::lang::compile("narrow.dyc", SRC).expect("compiles");
    let id = m.func_by_name("g").expect("g");
    let programs = [
        stitch_tier("narrow.dyc", SRC),
        unrecorded("narrow.dyc", SRC, dyc_stitcher::ge::Budget::default()),
    ];
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    for program in &programs {
        let region = program.region("g").expect("region");
        for k in [0i64, 1, 3, 4, -1] {
            for x in [-5i64, 0, 7] {
                let mut mem = Memory::default();
                let args = parse_args(&m.funcs[id].sig.params, &format!("{k}, {x}"), &mut mem)
                    .expect("arguments");
                let want = common::interpreted(Interpreter::new(&m).call(id, &args, &mut mem));
                let got = common::outcome(region.call(&mut [Arg::from(k as i32), Arg::from(x)]));
                assert_eq!(got, want, "g({k}, {x})");
            }
        }
    }
    made_without_giving_up((runs, aborts), 10);
}

/// Local arrays in memory (more elements than are kept as values): a promotion with
/// such an array live, whose unit receives it as its elements; and a stack machine's
/// stack of 64 slots, read and written at dynamic indices, in a loop that a dynamic
/// branch closes. The compiled plan makes every unit (none gives up), each checked call
/// for call, and the results are the interpreter's.
const HOMES: &str = "
fn hp(x: i64, n: i64) -> i64 {
    var a: [i64; 40];
    var i = 0;
    while i < n {
        a[i % 40] = a[i % 40] + x * i;
        i += 1;
    }
    var y = a[3] & 7;
    make_static(y);
    a[y] = a[y] + 1;
    return a[y] * 10 + a[(y + 1) % 40] + y;
}

fn sm(code: [i64], x: i64) -> i64 {
    var pc = 0;
    make_static(code, pc);
    var stack: [i64; 64];
    stack[0] = x;
    var sp = 1;
    while pc < len(code) {
        let op = code@[pc];
        if op == 0 {
            stack[sp] = code@[pc + 1];
            sp += 1;
            pc += 2;
        } else if op == 1 {
            sp -= 1;
            stack[sp - 1] = stack[sp - 1] + stack[sp];
            pc += 1;
        } else if op == 2 {
            if stack[sp - 1] > 100 { pc = len(code); } else { pc = 0; }
        } else {
            pc += 1;
        }
    }
    return stack[sp - 1] * 1000 + sp;
}
";

/// The interpreter's outcome of `name` in `file` on the arguments `args` (in the
/// source syntax), against the stitch tier's on `call` (the same arguments).
fn against_interpreter(
    file: &str,
    src: &str,
    name: &str,
    args: &str,
    call: impl FnOnce(&dyc::Region) -> Result<Option<Const>, dyc::Error>,
) {
    let m = dyc::lang::compile(file, src).expect("compiles");
    let id = m.func_by_name(name).expect("function");
    let mut mem = Memory::default();
    let vals = parse_args(&m.funcs[id].sig.params, args, &mut mem).expect("arguments");
    let want = common::interpreted(Interpreter::new(&m).call(id, &vals, &mut mem));
    let program = stitch_tier(file, src);
    let got = common::outcome(call(&program.region(name).expect("region")));
    assert_eq!(got, want, "{name}({args})");
}

#[test]
fn local_arrays_in_memory_agree_with_the_interpreter() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let (runs, aborts) = dyc_stitcher::exec::compiled_counts();
    let mut calls = 0;
    for (x, n) in [(3i64, 10i64), (-2, 50), (5, 0)] {
        against_interpreter("homes.dyc", HOMES, "hp", &format!("{x}, {n}"), |r| {
            r.call(&mut [Arg::from(x), Arg::from(n)])
        });
        calls += 1;
    }
    let codes: [&[i64]; 3] = [&[0, 5, 1, 2], &[0, 30, 1, 0, 2, 1, 2], &[3, 0, 7, 1]];
    for code in codes {
        for x in [-4i64, 1, 200] {
            against_interpreter("homes.dyc", HOMES, "sm", &format!("{code:?}, {x}"), |r| {
                r.call(&mut [Arg::from(code), Arg::from(x)])
            });
            calls += 1;
        }
    }
    made_without_giving_up((runs, aborts), calls);
}

/// A unit the compiled plan gives up on after making all of it (a give-up injected by the
/// test), recorded or not: the interpreted plan makes it again (on the tape started
/// again, or on a new stencil emitter), and the code computes what the interpreter does.
/// (A tape not started again fails the check; a stencil emitter used again, holding the
/// whole first unit, happens to make working code, so this test cannot tell that the
/// runtime made a new one.)
#[test]
fn a_unit_given_up_is_made_again() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    check_every_unit();
    let src = include_str!("../examples/bytecode.dyc");
    let programs = [
        stitch_tier("bytecode.dyc", src),
        unrecorded("bytecode.dyc", src, dyc_stitcher::ge::Budget::default()),
    ];
    for program in &programs {
        for b in bench_programs::benches().into_iter().take(3) {
            let (_, aborts) = dyc_stitcher::exec::compiled_counts();
            dyc_stitcher::exec::inject_compiled_give_up();
            run(program, &b.code, b.mem, b.name);
            let (_, gave_up) = dyc_stitcher::exec::compiled_counts();
            assert_eq!(
                gave_up,
                aborts + 1,
                "{}: the injected give-up was not met",
                b.name
            );
        }
    }
}

//! The compiled generating extension against the interpreted planned stitcher: every
//! specialization this process makes checks, call for call, that the unit the compiled
//! code recorded is the one the interpreted stitcher records (`DYC_CHECK_COMPILED_GE=1`,
//! set before the first specialization, with plans compiled at their first use), on the
//! main job's byte-code programs and on
//! random byte-code programs; and the compiled code made most of those units (the check
//! is not vacuous).

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bench_programs;
mod common;
#[path = "common/random_bytecode.rs"]
mod random_bytecode;

use dyc::{Arg, Program, RuntimeOptions, Tier, Tiers};
use random_bytecode::{random_bytecode, Rng};

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
    let src = include_str!("../examples/bytecode.dyc");
    let opts = RuntimeOptions {
        tiers: Tiers {
            first: Tier::Stitch,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        ..RuntimeOptions::default()
    };
    Program::compile_with("bytecode.dyc", src, opts).expect("compiles")
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
    check_every_unit();
    let program = interpreter();
    let (runs, _) = dyc_stitcher::exec::compiled_counts();
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
    // (Programs with an indirect jump give up at its promotion, as the compiled code
    // does not stitch promotions: about a third of the random ones.)
    let (made, _) = dyc_stitcher::exec::compiled_counts();
    assert!(
        (made - runs) * 2 >= units,
        "{} units of {units} programs made by compiled code",
        made - runs
    );
}

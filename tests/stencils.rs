//! The stitch tier makes its stencils when a program and its regions are made, not when
//! they specialize: a region's entry, its promotions and the units they start compile no
//! stencil; a variant not made ahead (an operation's or a promotion's with operands in
//! cache registers) is made by the library's worker thread while units
//! copy one made ahead, and once it is done units make the code they make when every
//! stencil is made at once. (A binary of its own: the stencil library is the process's,
//! shared by every runtime in it.)

use dyc::{Arg, Misses, Program, RuntimeOptions, Tier};
use dyc_templates::stencil::{Form, Key};

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bytecode;

/// The stencils that enter units: prologues, and promotions with their values in frame
/// words (a variant reading some from cache registers is made by the worker when a unit
/// wants it, as any other).
fn entries() -> Vec<Key> {
    let in_words = |forms: &[Form]| {
        forms
            .iter()
            .all(|f| matches!(f, Form::Slot(_) | Form::Slice(_)))
    };
    dyc_stitcher::runtime::stencil_keys()
        .into_iter()
        .filter(|k| match k {
            Key::Prologue(_) => true,
            Key::Promote { promoted, live, .. } => in_words(promoted) && in_words(live),
            _ => false,
        })
        .collect()
}

#[test]
fn specializing_and_promoting_make_no_stencils() {
    let opts = RuntimeOptions::default();
    assert_eq!(
        opts.tiers.first,
        Tier::Stitch,
        "the stitch tier is the first tier"
    );
    let src = include_str!("../examples/bytecode.dyc");
    let program = Program::compile_with("bytecode.dyc", src, opts).expect("compiles");
    let region = program.region("run").expect("region `run`");
    let before = entries();
    assert!(!before.is_empty());

    // Through the region's cache (the first thing this process stitches, so its units
    // miss register variants): the cached version is stitched again at a call once the
    // worker has made what its units missed, until a version misses nothing.
    let collatz = bytecode::benches()
        .into_iter()
        .find(|b| b.name == "collatz")
        .expect("collatz");
    let call = || {
        let mut mem = vec![0i64; collatz.mem.max(1)];
        let got = region
            .call(&mut [
                Arg::from(&collatz.code[..]),
                Arg::from(7i64),
                Arg::from(&mut mem[..]),
            ])
            .expect("runs");
        let want = bytecode::interpret(&collatz.code, 7, &mut vec![0; collatz.mem.max(1)]);
        assert_eq!(got.and_then(|c| c.as_i64()), Some(want));
    };
    // And a program whose indirect jumps stitch units at promotions, through a region of
    // a program of its own: its version is stitched again with the targets its promotions
    // saw dispatched inline, so that once it misses nothing its calls reach no promotion.
    let jumps_program = Program::compile_with("bytecode.dyc", src, opts).expect("compiles");
    let jumps_region = jumps_program.region("run").expect("region `run`");
    let jumps = bytecode::benches()
        .into_iter()
        .find(|b| b.name == "indirect jumps")
        .expect("indirect jumps");
    let call_jumps = || {
        let got = jumps_region
            .call(&mut [
                Arg::from(&jumps.code[..]),
                Arg::from(40i64),
                Arg::from(&mut [0i64][..]),
            ])
            .expect("runs");
        let want = bytecode::interpret(&jumps.code, 40, &mut [0]);
        assert_eq!(got.and_then(|c| c.as_i64()), Some(want));
    };
    let site_calls = || -> u64 { jumps_region.site_stats().iter().map(|s| s.calls).sum() };
    call();
    let fallbacks = dyc::stencil_counts().fallbacks;
    call_jumps();
    assert!(
        dyc::stencil_counts().fallbacks > fallbacks,
        "the jumps fell back"
    );
    assert!(site_calls() > 0);
    assert_eq!(region.stats().restitches, 0);
    let mut restitches = Vec::new();
    for _ in 0..10 {
        dyc::settle_stencils();
        call();
        call_jumps();
        restitches.push(region.stats().restitches);
    }
    let jumps_stats = jumps_region.stats();
    assert!((1..8).contains(&jumps_stats.restitches), "{jumps_stats}");
    let calls = site_calls();
    call_jumps();
    assert_eq!(
        site_calls(),
        calls,
        "the version made again dispatches inline"
    );
    let last = *restitches.last().expect("ten calls");
    // (At most eight times: fewer means a version missed nothing.)
    assert!((1..8).contains(&last), "stitched again: {restitches:?}");
    assert_eq!(
        restitches[restitches.len() - 2],
        last,
        "still stitched again: {restitches:?}"
    );
    let stats = region.stats();
    assert_eq!((stats.versions, stats.tier_ups), (1, 0), "{stats}");

    // Every benchmark program; the one with indirect jumps promotes its `pc` at each
    // `JMPR`, which stitches a unit per target.
    let mut promoted_units = 0;
    for b in bytecode::benches() {
        let spec = region
            .specialize_in(&[Arg::from(&b.code[..])], Tier::Stitch)
            .expect("specializes");
        let mut mem = vec![0i64; b.mem.max(1)];
        let mut args = [Arg::from(b.n.min(50)), Arg::from(&mut mem[..])];
        spec.call(&mut args).expect("runs");
        promoted_units += spec.lazy_stats().0;
    }
    assert!(
        promoted_units >= 4,
        "{promoted_units} units stitched at promotions"
    );
    let after = entries();
    let new: Vec<&Key> = after.iter().filter(|k| !before.contains(k)).collect();
    assert!(new.is_empty(), "made while specializing: {new:?}");
    // Nor any other stencil: units copied variants made ahead where theirs were missing.
    let counts = dyc::stencil_counts();
    assert_eq!(counts.while_stitching, 0, "{counts:?}");
    assert!(counts.fallbacks > 0, "{counts:?}");

    // Nor another interpreter's (a stack machine: static slices, constant indices checked
    // against them, multiplications and divisions by constants strength-reduced into
    // operations its generic code has none of), on random words as programs.
    let vm_src = include_str!("lang/programs/stack_vm_calls.dyc");
    // (With fuel: some of these programs loop forever.)
    let vm_opts = RuntimeOptions {
        fuel: Some(10_000),
        ..RuntimeOptions::default()
    };
    let vm = Program::compile_with("stack_vm_calls.dyc", vm_src, vm_opts).expect("compiles");
    let vm_region = vm.region("run").expect("region `run`");
    let (mut seed, mut specialized) = (7u64, 0);
    for _ in 0..200 {
        let code: Vec<i64> = (0..12)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                (seed >> 33) as i64 % 16
            })
            .collect();
        // (Some specialize without end, a call in a loop, and stop at the budget; most
        // of the others fault when they run: a fault is an error returned.)
        if let Ok(spec) = vm_region.specialize_in(&[Arg::from(&code[..])], Tier::Stitch) {
            let _ = spec.call(&mut [Arg::from(3i64)]);
            specialized += 1;
        }
    }
    assert!(specialized > 100, "{specialized} specialized");
    let counts = dyc::stencil_counts();
    assert_eq!(counts.while_stitching, 0, "{counts:?}");

    // Once the worker has made what units missed, round after round, units stop falling
    // back, and make the code a program whose units make every stencil at once makes.
    let made_at_once = Program::compile_with(
        "bytecode.dyc",
        src,
        RuntimeOptions {
            stencil_misses: Misses::Make,
            ..RuntimeOptions::default()
        },
    )
    .expect("compiles");
    let code = |region: &dyc::Region| -> Vec<usize> {
        bytecode::benches()
            .iter()
            .map(|b| {
                let spec = region
                    .specialize_in(&[Arg::from(&b.code[..])], Tier::Stitch)
                    .expect("specializes");
                let mut mem = vec![0i64; b.mem.max(1)];
                let got = spec
                    .call(&mut [Arg::from(b.n.min(50)), Arg::from(&mut mem[..])])
                    .expect("runs");
                let want = bytecode::interpret(&b.code, b.n.min(50), &mut vec![0; b.mem.max(1)]);
                assert_eq!(got.and_then(|c| c.as_i64()), Some(want), "{}", b.name);
                spec.stats().insts
            })
            .collect()
    };
    let mut rounds = 0;
    let settled = loop {
        dyc::settle_stencils();
        let before = dyc::stencil_counts().fallbacks;
        let insts = code(&region);
        if dyc::stencil_counts().fallbacks == before {
            break insts;
        }
        rounds += 1;
        assert!(rounds < 20, "units still fall back after {rounds} rounds");
    };
    let at_once = code(&made_at_once.region("run").expect("region `run`"));
    assert_eq!(settled, at_once, "machine instructions per program");
}

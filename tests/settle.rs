//! A region's cache settles on the code of every stencil made: each of the interpreter's
//! benchmark programs, called through a region of its own in a process whose stencil
//! library starts empty, is stitched again while its units fall back, and the version it
//! keeps has the code a program whose units make every stencil at once has. So no copy
//! is left worse without counting a fallback (a comparison and its branch copied apart
//! while their fused stencil is missing, a result left in a register the jump after it
//! does not want). (A binary of its own: the stencil library is the process's, and must
//! start empty.)

use dyc::{Arg, Misses, Program, RuntimeOptions};

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bytecode;

#[test]
fn a_regions_cache_settles_on_the_code_of_every_stencil_made() {
    let src = include_str!("../examples/bytecode.dyc");
    // (Nothing moves up a tier.)
    let mut stay = RuntimeOptions::default();
    stay.tiers.hot_calls = u64::MAX;
    stay.tiers.hot_time = std::time::Duration::MAX;
    let call = |region: &dyc::Region, b: &bytecode::Bench| {
        let mut mem = vec![0i64; b.mem.max(1)];
        let got = region
            .call(&mut [
                Arg::from(&b.code[..]),
                Arg::from(b.n.min(50)),
                Arg::from(&mut mem[..]),
            ])
            .expect("runs");
        let want = bytecode::interpret(&b.code, b.n.min(50), &mut vec![0; b.mem.max(1)]);
        assert_eq!(got.and_then(|c| c.as_i64()), Some(want), "{}", b.name);
    };
    // Each program through the cache of a region of its own, stitched again as the
    // worker makes what its units missed (at most eight times).
    let mut settled = Vec::new();
    for b in bytecode::benches() {
        let program = Program::compile_with("bytecode.dyc", src, stay).expect("compiles");
        let region = program.region("run").expect("region `run`");
        call(&region, &b);
        for _ in 0..10 {
            dyc::settle_stencils();
            call(&region, &b);
        }
        let stats = region.stats();
        assert_eq!(
            (stats.versions, stats.tier_ups),
            (1, 0),
            "{}: {stats}",
            b.name
        );
        settled.push((b.name, stats.code_bytes));
    }
    // The same programs with every stencil made while stitching.
    let made = Program::compile_with(
        "bytecode.dyc",
        src,
        RuntimeOptions {
            stencil_misses: Misses::Make,
            ..stay
        },
    )
    .expect("compiles");
    // (A version whose promotions stitched units is made again with what they saw when
    // it is stitched again, and the version made at once is not: only the others
    // compare.)
    let mut compared = 0;
    for (b, &(name, bytes)) in bytecode::benches().iter().zip(&settled) {
        let region = made.region("run").expect("region `run`");
        let before = region.stats().code_bytes;
        call(&region, b);
        if region.site_stats().iter().all(|s| s.calls == 0) {
            let made_bytes = region.stats().code_bytes - before;
            assert_eq!(bytes, made_bytes, "{name}: code bytes of its version");
            compared += 1;
        }
    }
    assert_eq!(compared, 5, "the programs without promotions");
}

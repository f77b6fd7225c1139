//! Code and metadata are owned and freed: building and dropping many specializations and
//! programs gives back every code region, code byte, byte of the code heap, fault site
//! record and promotion site (the runtime's live counts return to where they started).
//! One test in its own binary, since the counts are process-wide.

use dyc::runtime_live as live;
use dyc::{Arg, Program, Tier};

const SRC: &str = "fn f(k: i64, x: i64, xs: [i64]) -> i64 {
    make_static(k);
    var acc = 0;
    var i = 0;
    while i < k {
        acc = acc + xs[i % len(xs)] * x;
        i += 1;
    }
    var p = x % 4;
    make_static(p);
    return acc / (p + 1);
}
fn g(x: i64) -> i64 {
    return x + 1;
}
";

#[test]
fn dropping_specializations_and_programs_frees_their_code_and_metadata() {
    let start = live();
    let xs = [1i64, 2, 3];
    {
        let p = Program::compile(SRC).expect("compiles");
        let f = p.region("f").expect("region");
        let compiled = live();
        assert!(compiled.regions > start.regions && compiled.code_bytes > start.code_bytes);
        // The first specialization also makes the runtime's entry wrapper for the region's
        // dynamic inputs, which stays with the program (one per list of input types); and
        // where plans are compiled at their first use (`DYC_COMPILED_GE=now`), the first
        // in the stitch tier the program's compiled plan, which stays with it too.
        drop(f.specialize(&[Arg::from(0i64)]).expect("specializes"));
        drop(
            f.specialize_in(&[Arg::from(0i64)], Tier::Stitch)
                .expect("specializes"),
        );
        let with_program = live();
        assert_eq!(with_program.regions, compiled.regions);
        for k in 0..10_000i64 {
            let spec = f.specialize(&[Arg::from(k % 7)]).expect("specializes");
            // Run it (twice, so that a promotion continuation is stitched and then hit).
            for x in [k, k] {
                let r = spec
                    .call(&mut [Arg::from(x), Arg::from(&xs[..])])
                    .expect("runs");
                assert!(r.is_some());
            }
            assert!(live().promotion_sites > with_program.promotion_sites);
            drop(spec);
            assert_eq!(live(), with_program, "after specialization {k}");
        }
        // A stitch-tier unit holds space of the code heap, at least its code, until its
        // specialization goes. (Elsewhere than on x86-64 the tier falls back to Cranelift.)
        let spec = f
            .specialize_in(&[Arg::from(3i64)], Tier::Stitch)
            .expect("specializes");
        if cfg!(target_arch = "x86_64") {
            let held = live().heap_bytes - with_program.heap_bytes;
            assert!(held > 0 && held >= spec.code_bytes(), "{held} bytes held");
        }
        drop(spec);
        assert_eq!(live(), with_program);
    }
    assert_eq!(live(), start);
    for k in 0..1_000i64 {
        let p = Program::compile(SRC).expect("compiles");
        let r = p
            .region("f")
            .expect("region")
            .call(&mut [Arg::from(3i64), Arg::from(k), Arg::from(&xs[..])])
            .expect("runs");
        assert!(r.is_some());
        drop(p);
        assert_eq!(live(), start, "after program {k}");
    }
}

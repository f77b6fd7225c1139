//! The stitch tier makes its stencils when a program and its regions are made, not when
//! they specialize: a region's entry, its promotions and the units they start compile no
//! stencil. (A binary of its own: the stencil library is the process's, shared by every
//! runtime in it.)

use dyc::{Arg, Program, RuntimeOptions, Tier};
use dyc_templates::stencil::Key;

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bytecode;

/// The stencils that enter units: prologues and promotions.
fn entries() -> Vec<Key> {
    dyc_stitcher::runtime::stencil_keys()
        .into_iter()
        .filter(|k| matches!(k, Key::Prologue(_) | Key::Promote { .. }))
        .collect()
}

#[test]
fn specializing_and_promoting_make_no_entry_stencils() {
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
}

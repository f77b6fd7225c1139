//! A short soak of the rule service (`examples/service.rs`): four threads call one region
//! on hundreds of changing rule sets under a code-byte limit small enough that versions
//! are evicted all the time. Every result matches plain Rust (and some the interpreter),
//! the cached code never exceeds the limit, and once the program is dropped every code
//! region and byte is given back, evicted ones included (the runtime's live counts are
//! process-wide, hence one test in its own binary), in the optimizing tier and in the
//! stitch tier. The long soak is
//! `cargo run --release --example service -- --seconds N --threads 8`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use dyc::{Limits, Program, RuntimeOptions, Tier, Tiers};

#[allow(dead_code)]
#[path = "../examples/service/rules.rs"]
mod rules;

#[test]
fn the_rule_service_stays_correct_and_bounded_and_gives_everything_back() {
    for tier in [Tier::Optimizing, Tier::Stitch] {
        soak(tier);
    }
}

fn soak(tier: Tier) {
    let start = dyc::runtime_live();
    let limit = 24 << 10;
    let opts = RuntimeOptions {
        limits: Limits {
            max_code_bytes: limit,
            max_versions: usize::MAX,
            ..Limits::default()
        },
        tiers: Tiers {
            first: tier,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        ..RuntimeOptions::default()
    };
    let program = Program::compile_with("rules.dyc", rules::SOURCE, opts).expect("compiles");
    let load = rules::Load {
        threads: 4,
        rule_sets: 400,
        calls_per_generation: 500,
        records: 4,
        interpret_every: 50,
    };
    let region = program.region("score").expect("the region");
    let over = std::sync::atomic::AtomicBool::new(false);
    let tally = rules::run(
        &program,
        load,
        Duration::ZERO,
        &|_, calls| calls >= 2_000,
        &|_, _| {
            let s = region.stats();
            if s.code_bytes > limit {
                eprintln!("over: {s}");
                over.store(true, Ordering::Relaxed);
            }
        },
    );
    let s = region.stats();
    assert_eq!(
        tally.checked.load(Ordering::Relaxed),
        s.hits + s.misses,
        "{s}"
    );
    assert!(tally.interpreted.load(Ordering::Relaxed) >= 40);
    assert!(
        !over.load(Ordering::Relaxed) && s.code_bytes <= limit,
        "{s}"
    );
    assert!(s.evictions > 100 && s.hits > 0, "{tier:?}: {s}");
    drop((region, program));
    // Deferred frees run as the epoch advances.
    let mut live = dyc::runtime_live();
    for _ in 0..10_000 {
        if live == start {
            break;
        }
        dyc::epoch::flush();
        std::thread::yield_now();
        live = dyc::runtime_live();
    }
    assert_eq!(
        live, start,
        "{tier:?}: live counts after dropping the program"
    );
}

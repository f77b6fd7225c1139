//! A long-running service: a rule evaluator (the region of `examples/service/rules.rs`)
//! specialized on thousands of rule sets that change over time, from several threads,
//! under a small code-byte limit. Every result is checked against plain Rust, some against
//! the reference interpreter. A progress line each second shows throughput, hit rate,
//! specializations, evictions, cached and live code bytes (and the code heap's bytes that
//! units hold), and resident memory.
//!
//! ```text
//! cargo run --release --example service                 # 10 s, 4 threads
//! cargo run --release --example service -- --seconds 600 --threads 8 --rule-sets 20000
//! ```
//!
//! Options: `--seconds N` (run time; the soak), `--calls N` (stop after N calls instead),
//! `--threads N`, `--rule-sets N` (in use at once), `--code-kib N` (the code-byte limit),
//! `--records N` (records per call), `--tier stitch|quick|optimizing` (the tier new
//! versions are specialized in, default the library's, stitch; hot ones move to the
//! optimizing tier).

use std::time::Duration;

use dyc::{Limits, Program, RuntimeOptions, Tier, Tiers};

#[path = "service/rules.rs"]
mod rules;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v}"))
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds = arg(&args, "--seconds", 10);
    let max_calls = arg(&args, "--calls", u64::MAX);
    let code_limit = arg(&args, "--code-kib", 256) as usize * 1024;
    let load = rules::Load {
        threads: arg(&args, "--threads", 4) as usize,
        rule_sets: arg(&args, "--rule-sets", 5_000),
        calls_per_generation: 20_000,
        records: arg(&args, "--records", 16) as usize,
        interpret_every: 1_000,
    };
    let tier = match args
        .iter()
        .position(|a| a == "--tier")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
    {
        None => Tiers::default().first,
        Some("optimizing") => Tier::Optimizing,
        Some("quick") => Tier::Quick,
        Some("stitch") => Tier::Stitch,
        Some(other) => {
            eprintln!("--tier takes stitch, quick or optimizing, not `{other}`");
            std::process::exit(2);
        }
    };
    let opts = RuntimeOptions {
        // The code-byte limit governs: versions per entry and specializations in all are
        // left unbounded for practical purposes.
        limits: Limits {
            max_code_bytes: code_limit,
            max_versions: usize::MAX,
            max_specializations: usize::MAX,
            ..Limits::default()
        },
        tiers: Tiers {
            first: tier,
            ..Tiers::default()
        },
        ..RuntimeOptions::default()
    };
    let program = Program::compile_with("rules.dyc", rules::SOURCE, opts).expect("compiles");
    println!(
        "rule service: {tier:?} tier, {} threads, {} rule sets, {} records per call, code limit {} KiB, {} s",
        load.threads,
        load.rule_sets,
        load.records,
        code_limit / 1024,
        seconds
    );
    let region = program.region("score").expect("the region");
    // Calls and time at the last progress line.
    let progress = std::sync::Mutex::new((0u64, Duration::ZERO));
    let tally = rules::run(
        &program,
        load,
        Duration::from_secs(1),
        &|t, calls| t.as_secs() >= seconds || calls >= max_calls,
        &|t, tally| {
            let calls = tally.calls.load(std::sync::atomic::Ordering::Relaxed);
            let mut p = progress.lock().expect("not poisoned");
            let rate = (calls - p.0) as f64 / (t - p.1).as_secs_f64().max(1e-9);
            *p = (calls, t);
            let s = region.stats();
            let live = dyc::runtime_live();
            println!(
                "{:>5.1} s  {:>9.0} calls/s  hits {:>5.1}%  specializations {:>8}  evictions {:>8}  fallbacks {:>5}  cached {:>6} KiB in {:>5} versions  live code {:>6} KiB ({:>6} KiB in the heap)  resident {:>6} MiB",
                t.as_secs_f64(),
                rate,
                100.0 * s.hits as f64 / (s.hits + s.misses).max(1) as f64,
                s.specializations,
                s.evictions,
                s.fallbacks,
                s.code_bytes / 1024,
                s.versions,
                live.code_bytes / 1024,
                live.heap_bytes / 1024,
                rules::resident_bytes() >> 20,
            );
        },
    );
    let s = region.stats();
    println!(
        "done: {} calls checked ({} also against the interpreter); {s}",
        tally.checked.into_inner(),
        tally.interpreted.into_inner(),
    );
    assert!(s.code_bytes <= code_limit, "cached code over the limit");
}

//! Compile throughput of the static compiler, per phase, on generated sources of four
//! shapes at three sizes each (each twice the one before), so that the cost of a doubling
//! shows as a ratio in one run.
//!
//! `cargo bench --bench compile` runs every benchmark under criterion (MB/s of source per
//! phase), then prints one table: for each shape, size and phase, the mean time, MB/s of
//! source, nanoseconds per IR instruction, and the ratio of the time to the time at half
//! the size (2.0 is linear). Criterion's usual arguments apply (a filter such as
//! `cargo bench --bench compile -- if-chain` runs one shape).
//!
//! Phases: `lex` (the lexer alone), `parse` (lexing and parsing, which pulls its tokens
//! from the lexer), `lower` (names, types, SSA construction, trivial-parameter
//! removal), `verify`, `bta` (binding-time analysis of every function), `ge` (the
//! generating extension of every function, BTA included), `generic` (the generic stitch
//! programs of every function), and `total`: `Program::compile_with` then a region for
//! every function, as a user does it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use dyc::bta::Mode;
use dyc::ir::{FuncId, Module};
use dyc::lang::{ast, lexer, lower, parser, SourceMap};
use dyc::{Program, RuntimeOptions};

#[allow(dead_code)]
mod sources;

/// The shapes measured and their sizes.
const BENCHED: [(&str, sources::Generator, [usize; 3]); 4] = [
    (
        "straight-line",
        sources::straight_line,
        [10_000, 20_000, 40_000],
    ),
    ("if-chain", sources::if_chain, [2_000, 4_000, 8_000]),
    ("loop-nest", sources::loop_nest, [1_000, 2_000, 4_000]),
    (
        "many-functions",
        sources::many_functions,
        [500, 1_000, 2_000],
    ),
];

/// One source and what the earlier phases made of it.
struct Input {
    name: String,
    src: &'static str,
    ast: ast::Program<'static>,
    module: Module,
    insts: usize,
}

impl Input {
    fn new(src: String) -> Input {
        // Leaked so that the syntax tree, which borrows its names from the source, can
        // live beside it (a few megabytes per benchmark process).
        let src: &'static str = src.leak();
        let (ast, errors) = parser::parse(src);
        assert!(errors.is_empty(), "the generated source parses");
        let module = dyc::lang::compile("bench.dyc", src).expect("the generated source compiles");
        let insts = module
            .funcs
            .values()
            .map(|f| {
                f.layout
                    .blocks()
                    .iter()
                    .map(|&b| f.layout.block_insts(b).len())
                    .sum::<usize>()
            })
            .sum();
        Input {
            name: "bench.dyc".into(),
            src,
            ast,
            module,
            insts,
        }
    }

    fn funcs(&self) -> impl Iterator<Item = FuncId> + '_ {
        self.module.funcs.keys()
    }
}

/// Times one run of a phase on `input`.
type Phase = fn(&Input) -> Duration;

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = f();
    (start.elapsed(), out)
}

const PHASES: [(&str, Phase); 8] = [
    ("lex", |i| {
        timed(|| {
            // As the parser pulls them: one token at a time, no array.
            let mut lexer = lexer::Lexer::new(i.src);
            let mut n = 0usize;
            while lexer.next_token().tok != lexer::Tok::Eof {
                n += 1;
            }
            n
        })
        .0
    }),
    ("parse", |i| timed(|| parser::parse(i.src)).0),
    ("lower", |i| {
        let map = SourceMap::new(&i.name, i.src);
        timed(|| lower::lower(&i.ast, &map).expect("lowers")).0
    }),
    ("verify", |i| {
        timed(|| dyc::verifier::verify_module(&i.module).expect("verifies")).0
    }),
    ("bta", |i| {
        timed(|| {
            i.funcs()
                .map(|id| dyc::bta::analyze(&i.module, &i.module.funcs[id], Mode::Specialize))
                .collect::<Vec<_>>()
        })
        .0
    }),
    ("ge", |i| {
        timed(|| {
            i.funcs()
                .map(|id| dyc::ge::build(&i.module, id, Mode::Specialize).expect("builds"))
                .collect::<Vec<_>>()
        })
        .0
    }),
    ("generic", |i| {
        timed(|| {
            i.funcs()
                .map(|id| dyc::ge::build(&i.module, id, Mode::Generic).expect("builds"))
                .collect::<Vec<_>>()
        })
        .0
    }),
    ("total", |i| {
        timed(|| {
            let p =
                Program::compile_with(&i.name, i.src, RuntimeOptions::default()).expect("compiles");
            let regions: Vec<_> = i
                .module
                .funcs
                .values()
                .map(|f| p.region(&f.name).expect("a region"))
                .collect();
            (p, regions)
        })
        .0
    }),
];

/// (shape, size, phase) -> (bytes, IR instructions, total time, runs), over every run
/// criterion made.
type Key = (usize, usize, usize);
static RESULTS: Mutex<BTreeMap<Key, (usize, usize, Duration, u64)>> = Mutex::new(BTreeMap::new());

fn bench(c: &mut Criterion) {
    for (s, &(shape, make, sizes)) in BENCHED.iter().enumerate() {
        let mut group = c.benchmark_group(shape);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for (z, &n) in sizes.iter().enumerate() {
            let input = Input::new(make(n));
            group.throughput(Throughput::Bytes(input.src.len() as u64));
            for (p, &(phase, run)) in PHASES.iter().enumerate() {
                group.bench_function(BenchmarkId::new(phase, n), |b| {
                    b.iter_custom(|iters| {
                        let total: Duration = (0..iters).map(|_| run(&input)).sum();
                        let mut results = RESULTS.lock().expect("not poisoned");
                        let row = results.entry((s, z, p)).or_insert((
                            input.src.len(),
                            input.insts,
                            Duration::ZERO,
                            0,
                        ));
                        row.2 += total;
                        row.3 += iters;
                        total
                    })
                });
            }
        }
        group.finish();
    }
}

fn print_table() {
    let results = RESULTS.lock().expect("not poisoned");
    if results.is_empty() {
        return;
    }
    println!();
    println!(
        "{:<15} {:>7} {:>9} {:>9} {:<8} {:>10} {:>8} {:>9} {:>7}",
        "shape", "size", "bytes", "IR insts", "phase", "mean ms", "MB/s", "ns/inst", "x2 cost"
    );
    for (&(s, z, p), &(bytes, insts, total, runs)) in results.iter() {
        let mean = total.as_secs_f64() / runs.max(1) as f64;
        let ratio = z
            .checked_sub(1)
            .and_then(|h| results.get(&(s, h, p)))
            .map(|&(_, _, t, r)| format!("{:.2}", mean / (t.as_secs_f64() / r.max(1) as f64)))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<15} {:>7} {:>9} {:>9} {:<8} {:>10.3} {:>8.1} {:>9.0} {:>7}",
            BENCHED[s].0,
            BENCHED[s].2[z],
            bytes,
            insts,
            PHASES[p].0,
            mean * 1e3,
            bytes as f64 / mean / 1e6,
            mean * 1e9 / insts.max(1) as f64,
            ratio
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    print_table();
}

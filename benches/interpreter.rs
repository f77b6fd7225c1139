//! The byte-code interpreter benchmark under criterion: the region-language interpreter
//! of `examples/bytecode.dyc` on the six programs of `benches/bytecode.rs`, run
//! - by the same interpreter in plain Rust,
//! - as the region's generic code (Cranelift, no specialization),
//! - specialized on the program,
//! - as a hand translation of the program to Cranelift IR,
//! - as the program written directly in Rust;
//!
//! and the cost of making code for each program: specializing (the entry unit; programs
//! whose indirect jumps stitch units lazily are measured once warm, see the main job for
//! that cost) against translating and compiling by hand.
//!
//! `cargo bench --bench interpreter` runs it all (a filter such as `-- sieve` runs one
//! program), then prints a table of mean times and ratios, and draws the speedups over the
//! Rust interpreter as an SVG bar chart (log scale) into `target/dyc-plots/interpreter.svg`
//! (or the directory `DYC_PLOTS` names).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::Criterion;
use dyc::{Arg, Program, RuntimeOptions};

#[allow(dead_code)]
mod bytecode;
use bytecode::{benches, hand, interpret};

/// The ways each program runs, in table order.
const VARIANTS: [&str; 5] = [
    "Rust interpreter",
    "generic",
    "specialized",
    "hand translation",
    "hand-written Rust",
];
const COSTS: [&str; 2] = ["specialize", "hand compile"];

/// (program index, what) -> (total time, runs), over every run criterion made.
type Results = BTreeMap<(usize, &'static str), (Duration, u64)>;
static RESULTS: Mutex<Results> = Mutex::new(BTreeMap::new());

fn record(p: usize, what: &'static str, total: Duration, iters: u64) {
    let mut r = RESULTS.lock().expect("not poisoned");
    let e = r.entry((p, what)).or_insert((Duration::ZERO, 0));
    e.0 += total;
    e.1 += iters;
}

fn bench(c: &mut Criterion) {
    let src = include_str!("../examples/bytecode.dyc");
    let program = Program::compile_with("bytecode.dyc", src, RuntimeOptions::default())
        .expect("the example compiles");
    let region = program.region("run").expect("region `run`");
    let generic = region.generic().expect("generic code");
    for (p, b) in benches().into_iter().enumerate() {
        let code = &b.code[..];
        let spec = region.specialize(&[Arg::from(code)]).expect("specializes");
        let translated = hand::compile(code);
        let mut mem = vec![0i64; b.mem.max(1)];
        let expected = interpret(code, b.n, &mut mem);
        let mut group = c.benchmark_group(b.name);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2));
        for what in VARIANTS {
            group.bench_function(what, |bch| {
                bch.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        mem.fill(0);
                        let t = Instant::now();
                        let r = match what {
                            "Rust interpreter" => interpret(code, b.n, &mut mem),
                            "generic" => generic
                                .call(&mut [
                                    Arg::from(code),
                                    Arg::from(b.n),
                                    Arg::from(&mut mem[..]),
                                ])
                                .expect("runs")
                                .and_then(|c| c.as_i64())
                                .expect("i64"),
                            "specialized" => spec
                                .call(&mut [Arg::from(b.n), Arg::from(&mut mem[..])])
                                .expect("runs")
                                .and_then(|c| c.as_i64())
                                .expect("i64"),
                            "hand translation" => translated.run(b.n, &mut mem).expect("runs"),
                            _ => (b.native)(std::hint::black_box(b.n)),
                        };
                        total += t.elapsed();
                        assert_eq!(r, expected, "{}: {what}", b.name);
                    }
                    record(p, what, total, iters);
                    total
                })
            });
        }
        for what in COSTS {
            group.bench_function(what, |bch| {
                bch.iter_custom(|iters| {
                    let t = Instant::now();
                    for _ in 0..iters {
                        if what == "specialize" {
                            let s = region.specialize(&[Arg::from(code)]).expect("specializes");
                            std::hint::black_box(&s);
                        } else {
                            std::hint::black_box(hand::compile(code));
                        }
                    }
                    let total = t.elapsed();
                    record(p, what, total, iters);
                    total
                })
            });
        }
        group.finish();
    }
}

fn mean(r: &Results, p: usize, what: &str) -> Option<f64> {
    r.iter()
        .find(|((q, w), _)| *q == p && *w == what)
        .map(|(_, &(t, n))| t.as_secs_f64() / n.max(1) as f64)
}

fn geomean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len().max(1) as f64).exp()
}

fn report() {
    let r = RESULTS.lock().expect("not poisoned");
    let names: Vec<&str> = benches().iter().map(|b| b.name).collect();
    let measured: Vec<usize> = (0..names.len())
        .filter(|&p| VARIANTS.iter().all(|w| mean(&r, p, w).is_some()))
        .collect();
    if measured.is_empty() {
        return;
    }
    println!("\nMean time per run (ms), and specialized code's speedup over each:\n");
    println!(
        "| program | {} | vs Rust interpreter | vs generic | vs hand translation | vs hand-written Rust | specialize / hand compile |",
        VARIANTS.join(" | ")
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut ratios: [Vec<f64>; 5] = Default::default();
    for &p in &measured {
        let t: Vec<f64> = VARIANTS
            .iter()
            .map(|w| mean(&r, p, w).expect("measured"))
            .collect();
        let s = t[2];
        let cost = match (mean(&r, p, COSTS[0]), mean(&r, p, COSTS[1])) {
            (Some(a), Some(b)) => {
                ratios[4].push(a / b);
                format!("{:.3} / {:.3} ms = {:.2}", a * 1e3, b * 1e3, a / b)
            }
            _ => "-".into(),
        };
        let mut row = format!("| {} |", names[p]);
        for x in &t {
            write!(row, " {:.2} |", x * 1e3).expect("string");
        }
        for (k, i) in [0, 1, 3, 4].into_iter().enumerate() {
            ratios[k].push(t[i] / s);
            write!(row, " {:.2}x |", t[i] / s).expect("string");
        }
        println!("{row} {cost} |");
    }
    println!(
        "| geomean | | | | | | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2} |",
        geomean(&ratios[0]),
        geomean(&ratios[1]),
        geomean(&ratios[2]),
        geomean(&ratios[3]),
        geomean(&ratios[4])
    );
    let dir = std::env::var("DYC_PLOTS").unwrap_or_else(|_| "target/dyc-plots".into());
    let path = std::path::Path::new(&dir).join("interpreter.svg");
    let bars: Vec<(&str, Vec<f64>)> = measured
        .iter()
        .map(|&p| {
            let base = mean(&r, p, VARIANTS[0]).expect("measured");
            let v = VARIANTS[1..]
                .iter()
                .map(|w| base / mean(&r, p, w).expect("measured"))
                .collect();
            (names[p], v)
        })
        .collect();
    let svg = bar_chart(
        "Speedup over the Rust interpreter (log scale)",
        &VARIANTS[1..],
        &bars,
    );
    match std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, svg)) {
        Ok(()) => println!("\nPlot: {}", path.display()),
        Err(e) => println!("\nPlot not written ({}): {e}", path.display()),
    }
}

/// A grouped bar chart with a log-scale y axis, as SVG.
fn bar_chart(title: &str, series: &[&str], groups: &[(&str, Vec<f64>)]) -> String {
    const COLORS: [&str; 4] = ["#9e9e9e", "#1f77b4", "#ff7f0e", "#2ca02c"];
    let (w, h, left, top, bottom) = (900.0, 420.0, 60.0, 50.0, 70.0);
    let plot_h = h - top - bottom;
    let max = groups
        .iter()
        .flat_map(|g| g.1.iter().copied())
        .fold(1.0f64, f64::max);
    let decades = max.log10().ceil().max(1.0);
    let y = |v: f64| top + plot_h * (1.0 - v.max(1e-3).log10().max(0.0) / decades);
    let gw = (w - left - 20.0) / groups.len() as f64;
    let bw = gw * 0.8 / series.len() as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{title}</text>\n",
        w / 2.0
    );
    for d in 0..=decades as i32 {
        let v = 10f64.powi(d);
        let yy = y(v);
        writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}x</text>",
            w - 20.0,
            left - 6.0,
            yy + 4.0
        )
        .expect("string");
    }
    for (g, (name, vals)) in groups.iter().enumerate() {
        let x0 = left + gw * g as f64 + gw * 0.1;
        for (k, &v) in vals.iter().enumerate() {
            let x = x0 + bw * k as f64;
            let yy = y(v);
            writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{yy:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {v:.2}x</title></rect>",
                bw - 2.0,
                (top + plot_h - yy).max(0.0),
                COLORS[k % COLORS.len()],
                series[k]
            )
            .expect("string");
        }
        writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{name}</text>",
            x0 + gw * 0.4,
            top + plot_h + 18.0
        )
        .expect("string");
    }
    for (k, name) in series.iter().enumerate() {
        let x = left + 160.0 * k as f64;
        writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            h - 28.0,
            COLORS[k % COLORS.len()],
            x + 16.0,
            h - 18.0
        )
        .expect("string");
    }
    s.push_str("</svg>\n");
    s
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    report();
}

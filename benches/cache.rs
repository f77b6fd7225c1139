//! Cache-hit cost of region entries: the time of a `Region::call` round trip (key from the
//! arguments, cache lookup, call) against `Specialized::call` on the same specialization
//! (argument checks, call context, entry wrapper, the code itself), for a key of two
//! scalars and for a 1,000-element static slice. Run with
//! `cargo bench --bench cache`; each figure is the median of 7 runs of 2,000,000 calls
//! (200,000 for the slice), with the range. `--profile-scalars` instead runs 50,000,000
//! scalar-key hits and nothing else, for a profiler.

use std::hint::black_box;
use std::time::Instant;

use dyc::{Arg, Program};

const SRC: &str = "
fn scalars(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b);
    return x + a * b;
}
fn slice(w: [i64], x: i64) -> i64 {
    make_static(w);
    return x + len(w);
}
";

/// Median and range of `runs` timings of `n` calls of `f`, in ns per call.
fn measure(runs: usize, n: u64, mut f: impl FnMut(u64)) -> (f64, f64, f64) {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            for i in 0..n {
                f(i);
            }
            start.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    t.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    (t[runs / 2], t[0], t[runs - 1])
}

fn row(what: &str, (m, lo, hi): (f64, f64, f64)) {
    println!("| {what} | {m:.1} | {lo:.1}-{hi:.1} |");
}

/// The difference of two medians (a range of differences would mean nothing).
fn diff(what: &str, a: (f64, f64, f64), b: (f64, f64, f64)) {
    println!("| {what} | {:.1} | |", a.0 - b.0);
}

fn main() {
    let p = Program::compile(SRC).expect("compiles");
    let scalars = p.region("scalars").expect("region");
    let slice = p.region("slice").expect("region");
    let w: Vec<i64> = (0..1000).collect();
    let spec_scalars = scalars
        .specialize(&[Arg::from(6i64), Arg::from(7i64)])
        .expect("specializes");
    let spec_slice = slice.specialize(&[Arg::from(&w[..])]).expect("specializes");
    // Warm the caches.
    scalars
        .call(&mut [Arg::from(6i64), Arg::from(7i64), Arg::from(1i64)])
        .expect("runs");
    slice
        .call(&mut [Arg::from(&w[..]), Arg::from(1i64)])
        .expect("runs");

    let n = 2_000_000;
    if std::env::args().any(|a| a == "--profile-scalars") {
        for i in 0..50_000_000i64 {
            black_box(
                scalars
                    .call(&mut [Arg::from(6i64), Arg::from(7i64), Arg::from(i)])
                    .expect("runs"),
            );
        }
        return;
    }
    let spec2 = measure(7, n, |i| {
        black_box(spec_scalars.call(&mut [Arg::from(i as i64)]).expect("runs"));
    });
    let region2 = measure(7, n, |i| {
        black_box(
            scalars
                .call(&mut [Arg::from(6i64), Arg::from(7i64), Arg::from(i as i64)])
                .expect("runs"),
        );
    });
    let ns = n / 10;
    let spec_s = measure(7, ns, |i| {
        black_box(spec_slice.call(&mut [Arg::from(i as i64)]).expect("runs"));
    });
    let region_s = measure(7, ns, |i| {
        black_box(
            slice
                .call(&mut [Arg::from(&w[..]), Arg::from(i as i64)])
                .expect("runs"),
        );
    });
    println!("| call | median ns | range ns |");
    println!("|---|---|---|");
    row("`Specialized::call`, 1 scalar argument", spec2);
    row("`Region::call`, key of 2 scalars", region2);
    diff(
        "cache hit beyond `Specialized::call`, 2 scalars",
        region2,
        spec2,
    );
    row("`Specialized::call`, static slice region", spec_s);
    row("`Region::call`, static slice of 1,000 i64", region_s);
    diff(
        "cache hit beyond `Specialized::call`, 1,000-element slice",
        region_s,
        spec_s,
    );
}

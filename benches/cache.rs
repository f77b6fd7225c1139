//! Cache-hit cost of region entries, per caching policy: the time of a `Region::call`
//! round trip (key from the arguments, cache lookup, call) against `Specialized::call` on
//! the same specialization (argument checks, call context, entry wrapper, the code
//! itself), for a key of two scalars and for a 1,000-element static slice; then the cost
//! of a miss that specializes (`replicate`) and of one that also evicts and reclaims a
//! version (a program limited to one specialization, alternating two keys); and the
//! first hit of a lazy stub (stitching and compiling the arm, patching its slot) against
//! a call through the patched slot; and `Specialized::call` of a stitch-tier unit that
//! keeps values in frame words (a slice argument). Run with
//! `cargo bench --bench cache`; each figure is the median of 7 runs of 2,000,000 calls
//! (200,000 for the slice, 300 for misses), with the range. `--profile-scalars` instead
//! runs 50,000,000 scalar-key hits and nothing else, for a profiler
//! (`--profile-one-unchecked`: 100,000,000 hits of the `cache_one_unchecked` region;
//! `--profile-miss N` and `--profile-evict N`: N misses of `replicate`, and N misses that
//! evict, 200,000 unless given; with two values of N under `valgrind --tool=callgrind`,
//! the difference of the counts is the instructions of that many misses).

use std::hint::black_box;
use std::time::Instant;

use dyc::{Arg, Limits, Program, Region, RuntimeOptions, Specialized, Tier};

const SRC: &str = "
fn scalars(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b);
    return x + a * b;
}
fn all_unchecked(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b: cache_all_unchecked);
    return x + a * b;
}
fn one(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b: cache_one);
    return x + a * b;
}
fn one_unchecked(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b: cache_one_unchecked);
    return x + a * b;
}
fn replicate(a: i64, b: i64, x: i64) -> i64 {
    make_static(a, b: replicate);
    return x + a * b;
}
fn slice(w: [i64], x: i64) -> i64 {
    make_static(w);
    return x + len(w);
}
fn slice_unchecked(w: [i64], x: i64) -> i64 {
    make_static(w: cache_all_unchecked);
    return x + len(w);
}
fn framed(k: i64, xs: [i64]) -> i64 {
    make_static(k);
    return xs[k] + len(xs);
}
fn branchy(k: i64, x: i64) -> i64 {
    make_static(k: lazy);
    var r = 0;
    if x > 0 { r = k * x + 1; } else { r = k - x; }
    return r + k;
}
";

/// `Region::call` of a two-scalar region on key (6, 7). Not inlined, like [`direct`], so
/// that both pay the same for handling the result.
#[inline(never)]
fn hit(r: &Region, i: u64) {
    black_box(
        r.call(&mut [Arg::from(6i64), Arg::from(7i64), Arg::from(i as i64)])
            .expect("runs"),
    );
}

/// `Specialized::call` with one scalar argument, built with the two key arguments a
/// region's call takes (so that both measure the same arguments made by the caller).
#[inline(never)]
fn direct(s: &Specialized, i: u64) {
    let args = &mut [Arg::from(6i64), Arg::from(7i64), Arg::from(i as i64)];
    black_box(s.call(&mut args[2..]).expect("runs"));
}

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

/// The `scalars` region of a program limited to one specialization: calls alternating
/// two keys each evict the other's version.
fn evicting_region() -> Region {
    let one_spec = Program::compile_with(
        "cache.dyc",
        SRC,
        RuntimeOptions {
            limits: Limits {
                max_specializations: 1,
                ..Limits::default()
            },
            ..RuntimeOptions::default()
        },
    )
    .expect("compiles");
    one_spec.region("scalars").expect("region")
}

/// Call `i` of the evicting region: a miss that evicts the version of the other key.
fn evict_call(evicting: &Region, i: u64) {
    black_box(
        evicting
            .call(&mut [Arg::from((i % 2) as i64), Arg::from(7i64), Arg::from(1i64)])
            .expect("runs"),
    );
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
    if std::env::args().any(|a| a == "--profile-one-unchecked") {
        let r = p.region("one_unchecked").expect("region");
        for i in 0..100_000_000 {
            hit(&r, i);
        }
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let profile = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        Some(
            args.get(i + 1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(200_000),
        )
    };
    if let Some(runs) = profile("--profile-miss") {
        let replicate = p.region("replicate").expect("region");
        for i in 0..runs {
            hit(&replicate, i);
        }
        return;
    }
    if let Some(runs) = profile("--profile-evict") {
        let evicting = evicting_region();
        for i in 0..runs {
            evict_call(&evicting, i);
        }
        return;
    }
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
        direct(&spec_scalars, i);
    });
    let region = |name: &str| {
        let r = p.region(name).expect("region");
        hit(&r, 0);
        r
    };
    let policies = [
        ("cache_all", region("scalars")),
        ("cache_all_unchecked", region("all_unchecked")),
        ("cache_one", region("one")),
        ("cache_one_unchecked", region("one_unchecked")),
    ]
    .map(|(name, r)| (name, measure(7, n, |i| hit(&r, i))));
    let ns = n / 10;
    let spec_s = measure(7, ns, |i| {
        direct(&spec_slice, i);
    });
    let slice_call = |r: &Region| {
        measure(7, ns, |i| {
            black_box(
                r.call(&mut [Arg::from(&w[..]), Arg::from(i as i64)])
                    .expect("runs"),
            );
        })
    };
    let region_s = slice_call(&slice);
    let slice_unchecked = p.region("slice_unchecked").expect("region");
    let region_su = slice_call(&slice_unchecked);
    // A stitch-tier unit that keeps values in frame words (a slice argument's two words).
    let xs = [5i64; 4];
    let spec_f = p
        .region("framed")
        .expect("region")
        .specialize_in(&[Arg::from(1i64)], Tier::Stitch)
        .expect("specializes");
    let framed = measure(7, n, |_| {
        black_box(spec_f.call(&mut [Arg::from(&xs[..])]).expect("runs"));
    });
    // Misses: a specialization per call, then one that also evicts a version.
    let replicate = p.region("replicate").expect("region");
    let miss = measure(7, 300, |i| hit(&replicate, i));
    let evicting = evicting_region();
    let evict = measure(7, 300, |i| evict_call(&evicting, i));
    assert!(evicting.stats().evictions >= 2_000);
    // A lazy arm: its first execution stitches and compiles it and patches the slot.
    let branchy = p.region("branchy").expect("region");
    let lazy_first = measure(7, 300, |i| {
        let s = branchy
            .specialize(&[Arg::from(i as i64)])
            .expect("specializes");
        black_box(s.call(&mut [Arg::from(-1i64)]).expect("runs"));
    });
    let lazy_spec = measure(7, 300, |i| {
        black_box(
            branchy
                .specialize(&[Arg::from(i as i64)])
                .expect("specializes"),
        );
    });
    let warm = branchy.specialize(&[Arg::from(3i64)]).expect("specializes");
    warm.call(&mut [Arg::from(-1i64)]).expect("runs");
    let lazy_warm = measure(7, n, |i| {
        black_box(warm.call(&mut [Arg::from(-(i as i64) - 1)]).expect("runs"));
    });
    println!("| call | median ns | range ns |");
    println!("|---|---|---|");
    row("`Specialized::call`, 1 scalar argument", spec2);
    for (name, t) in policies {
        row(&format!("`Region::call`, key of 2 scalars, `{name}`"), t);
        diff(
            &format!("cache hit beyond `Specialized::call`, `{name}`"),
            t,
            spec2,
        );
    }
    row("`Specialized::call`, static slice region", spec_s);
    row(
        "`Region::call`, static slice of 1,000 i64, `cache_all`",
        region_s,
    );
    diff(
        "cache hit beyond `Specialized::call`, 1,000-element slice, `cache_all`",
        region_s,
        spec_s,
    );
    row(
        "`Region::call`, static slice of 1,000 i64, `cache_all_unchecked`",
        region_su,
    );
    diff(
        "cache hit beyond `Specialized::call`, 1,000-element slice, `cache_all_unchecked`",
        region_su,
        spec_s,
    );
    row(
        "`Specialized::call`, 1 slice argument, stitch tier (a unit with frame words)",
        framed,
    );
    row("miss: specialize and call (`replicate`)", miss);
    row("miss: specialize, evict the other version, call", evict);
    diff("eviction and reclamation beyond a miss", evict, miss);
    row("lazy region: specialize (both arms stubs)", lazy_spec);
    row(
        "lazy region: specialize, then the first call through a stub",
        lazy_first,
    );
    diff(
        "lazy stub, first hit (stitch, compile, patch, run)",
        lazy_first,
        lazy_spec,
    );
    row("lazy region: a call through the patched slot", lazy_warm);
}

//! DyC's kernels (`examples/kernels.dyc`) under criterion: each kernel's region
//! specialized on its run-time constants, against the region's generic code and against
//! the same algorithm in plain Rust (generic over its inputs), plus the time to specialize
//! and the break-even point: the number of calls after which specializing and running the
//! specialized code costs less than running the generic code,
//! `specialize / (generic - specialized)`.
//!
//! `cargo bench --bench kernels` runs it all (`-- power` runs one kernel), then prints the
//! table of means, ratios and break-even points.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::Criterion;
use dyc::{Arg, Program, RuntimeOptions, Tier};

/// An argument, owned.
#[derive(Clone)]
enum Val {
    I64(i64),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    MutInts(Vec<i64>),
    Bytes(Vec<u8>),
}

impl Val {
    fn arg(&mut self) -> Arg<'_> {
        match self {
            Val::I64(x) => Arg::from(*x),
            Val::Ints(v) => Arg::from(&v[..]),
            Val::Floats(v) => Arg::from(&v[..]),
            Val::MutInts(v) => Arg::from(&mut v[..]),
            Val::Bytes(v) => Arg::from(&v[..]),
        }
    }
}

struct Kernel {
    name: &'static str,
    /// The run-time constants (the region's key).
    keys: Vec<Val>,
    /// The other arguments; mutable ones are restored before every call.
    dyns: Vec<Val>,
    /// The same computation in plain Rust, on the same arguments.
    rust: fn(&[Val], &mut [Val]) -> f64,
}

/// Numbers from a linear congruential generator (deterministic inputs).
fn lcg(n: usize, seed: u64) -> impl Iterator<Item = u64> {
    let mut x = seed;
    (0..n).map(move |_| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    })
}

fn ints(v: &Val) -> &[i64] {
    match v {
        Val::Ints(v) | Val::MutInts(v) => v,
        _ => panic!("not integers"),
    }
}

fn floats(v: &Val) -> &[f64] {
    match v {
        Val::Floats(v) => v,
        _ => panic!("not floats"),
    }
}

fn int(v: &Val) -> i64 {
    match v {
        Val::I64(x) => *x,
        _ => panic!("not an integer"),
    }
}

fn kernels() -> Vec<Kernel> {
    vec![
        Kernel {
            name: "bsearch",
            keys: vec![Val::Ints((0..64).map(|k| 3 * k).collect())],
            dyns: vec![Val::Ints(
                lcg(10_000, 1).map(|x| (x % 200) as i64).collect(),
            )],
            rust: |k, d| {
                let keys = ints(&k[0]);
                let mut total = 0;
                for &x in ints(&d[0]) {
                    let (mut lo, mut hi, mut found) = (0, keys.len(), -1);
                    while lo < hi {
                        let mid = (lo + hi) / 2;
                        if x == keys[mid] {
                            found = mid as i64;
                            break;
                        }
                        if x < keys[mid] {
                            hi = mid
                        } else {
                            lo = mid + 1
                        }
                    }
                    total += found;
                }
                total as f64
            },
        },
        Kernel {
            name: "sparse_dot",
            keys: vec![Val::Ints(
                (0..64)
                    .map(|i| if i % 8 == 3 { i as i64 - 20 } else { 0 })
                    .collect(),
            )],
            dyns: vec![Val::Ints(
                lcg(64 * 2_000, 2).map(|x| (x % 1000) as i64).collect(),
            )],
            rust: |k, d| {
                let w = ints(&k[0]);
                let rows = ints(&d[0]);
                let mut total = 0i64;
                for row in rows.chunks_exact(w.len()) {
                    let mut sum = 0i64;
                    for (c, x) in w.iter().zip(row) {
                        if *c != 0 {
                            sum = sum.wrapping_add(c.wrapping_mul(*x));
                        }
                    }
                    total = total.wrapping_add(sum);
                }
                total as f64
            },
        },
        Kernel {
            name: "chebyshev",
            keys: vec![Val::Floats(
                (0..16).map(|i| 1.0 / (1.0 + i as f64)).collect(),
            )],
            dyns: vec![Val::Floats(
                lcg(10_000, 3)
                    .map(|x| (x % 2001) as f64 / 1000.0 - 1.0)
                    .collect(),
            )],
            rust: |k, d| {
                let c = floats(&k[0]);
                let mut total = 0.0;
                for &x in floats(&d[0]) {
                    let (mut b1, mut b2) = (0.0, 0.0);
                    for i in (1..c.len()).rev() {
                        let t = 2.0 * x * b1 - b2 + c[i];
                        b2 = b1;
                        b1 = t;
                    }
                    total += x * b1 - b2 + c[0];
                }
                total
            },
        },
        Kernel {
            name: "query",
            keys: vec![Val::Ints(vec![0, 2, 300, 2, 0, 700, 1, 1, 5])],
            dyns: vec![Val::Ints(
                lcg(4 * 20_000, 4)
                    .enumerate()
                    .map(|(i, x)| (x % if i % 4 == 1 { 8 } else { 1000 }) as i64)
                    .collect(),
            )],
            rust: |k, d| {
                let preds = ints(&k[0]);
                let mut count = 0;
                for rec in ints(&d[0]).chunks_exact(4) {
                    let ok = preds.chunks_exact(3).all(|p| {
                        let v = rec[p[0] as usize];
                        match p[1] {
                            0 => v < p[2],
                            1 => v == p[2],
                            _ => v > p[2],
                        }
                    });
                    count += ok as i64;
                }
                count as f64
            },
        },
        Kernel {
            name: "romberg",
            keys: vec![Val::I64(8)],
            dyns: vec![Val::Floats(
                lcg(4 * 500, 5).map(|x| (x % 1000) as f64 / 250.0).collect(),
            )],
            rust: |k, d| {
                let m = int(&k[0]) as usize;
                let f = |a: f64, b: f64, x: f64| a * x * x + b / (1.0 + x * x);
                let mut total = 0.0;
                for p in floats(&d[0]).chunks_exact(4) {
                    let (a, b, lo, hi) = (p[0], p[1], p[2], p[3]);
                    let (mut prev, mut cur) = ([0.0f64; 12], [0.0f64; 12]);
                    let mut h = hi - lo;
                    prev[0] = 0.5 * h * (f(a, b, lo) + f(a, b, hi));
                    for i in 1..m {
                        h *= 0.5;
                        let sum: f64 = (1..=1usize << (i - 1))
                            .map(|k| f(a, b, lo + (2 * k - 1) as f64 * h))
                            .sum();
                        cur[0] = 0.5 * prev[0] + h * sum;
                        let mut p4 = 4.0;
                        for j in 1..=i {
                            cur[j] = cur[j - 1] + (cur[j - 1] - prev[j - 1]) / (p4 - 1.0);
                            p4 *= 4.0;
                        }
                        prev[..=i].copy_from_slice(&cur[..=i]);
                    }
                    total += prev[m - 1];
                }
                total
            },
        },
        Kernel {
            name: "convolve",
            keys: vec![Val::Ints(vec![0, 1, 0, 1, -4, 1, 0, 1, 0]), Val::I64(3)],
            dyns: vec![
                Val::Ints(lcg(128 * 128, 6).map(|x| (x % 256) as i64).collect()),
                Val::MutInts(vec![0; 128 * 128]),
                Val::I64(128),
            ],
            rust: |k, d| {
                let (kern, kw) = (ints(&k[0]), int(&k[1]) as usize);
                let (first, rest) = d.split_at_mut(1);
                let (img, w) = (ints(&first[0]), int(&rest[1]) as usize);
                let Val::MutInts(out) = &mut rest[0] else {
                    panic!("out")
                };
                let mut total = 0i64;
                let mut y = 0;
                while (y + kw) * w <= img.len() {
                    for x in 0..=w - kw {
                        let mut acc = 0i64;
                        for ky in 0..kw {
                            for kx in 0..kw {
                                let c = kern[ky * kw + kx];
                                if c != 0 {
                                    acc += c * img[(y + ky) * w + x + kx];
                                }
                            }
                        }
                        out[y * w + x] = acc;
                        total += acc;
                    }
                    y += 1;
                }
                total as f64
            },
        },
        Kernel {
            name: "power",
            keys: vec![Val::I64(13)],
            dyns: vec![Val::Ints(
                lcg(10_000, 7).map(|x| (x % 21) as i64 - 10).collect(),
            )],
            rust: |k, d| {
                let e = int(&k[0]);
                let mut total = 0i64;
                for &x in ints(&d[0]) {
                    let (mut r, mut b, mut k) = (1i64, x, e);
                    while k > 0 {
                        if k % 2 == 1 {
                            r = r.wrapping_mul(b);
                        }
                        b = b.wrapping_mul(b);
                        k /= 2;
                    }
                    total = total.wrapping_add(r);
                }
                total as f64
            },
        },
        Kernel {
            name: "cache_sim",
            keys: vec![Val::I64(64), Val::I64(4), Val::I64(32)],
            dyns: vec![
                Val::Ints(
                    lcg(20_000, 8)
                        .map(|x| ((x % 4096) * 8 + (x >> 20) % 3 * 65536) as i64)
                        .collect(),
                ),
                Val::MutInts(vec![-1; 64 * 4]),
                Val::MutInts(vec![0; 64 * 4]),
            ],
            rust: |k, d| {
                let (sets, ways, block) = (int(&k[0]), int(&k[1]), int(&k[2]));
                let [Val::Ints(addrs), Val::MutInts(tags), Val::MutInts(ages)] = d else {
                    panic!("addresses, tags and ages")
                };
                let mut hits = 0;
                for (t, &a) in addrs.iter().enumerate() {
                    let t = t as i64;
                    let blk = a / block;
                    let (set, tag) = (blk % sets, blk / sets);
                    let base = (set * ways) as usize;
                    let (mut way, mut victim, mut oldest) = (-1i64, 0i64, t + 1);
                    for w in 0..ways {
                        let age = ages[base + w as usize];
                        if tags[base + w as usize] == tag {
                            way = w;
                        }
                        if age < oldest {
                            oldest = age;
                            victim = w;
                        }
                    }
                    if way >= 0 {
                        hits += 1;
                    } else {
                        way = victim;
                        tags[base + way as usize] = tag;
                    }
                    ages[base + way as usize] = t + 1;
                }
                hits as f64
            },
        },
        Kernel {
            name: "packet_filter",
            keys: vec![Val::Ints(tcp_port_filter(80))],
            dyns: {
                let (pkts, ends) = packets(2_000);
                vec![Val::Bytes(pkts), Val::Ints(ends)]
            },
            rust: |k, d| {
                let code = ints(&k[0]);
                let [Val::Bytes(pkts), Val::Ints(ends)] = d else {
                    panic!("packets and their ends")
                };
                let mut total = 0;
                let mut start = 0;
                for &end in ends.iter() {
                    let pkt = &pkts[start as usize..end as usize];
                    total += run_filter(code, pkt);
                    start = end;
                }
                total as f64
            },
        },
    ]
}

/// `tcpdump -d "tcp port P"` as (op, jt, jf, k) instructions of `packet_filter`, its jumps
/// relative to the next instruction.
fn tcp_port_filter(port: i64) -> Vec<i64> {
    let listing: [(i64, i64, i64, i64); 20] = [
        (1, 0, 0, 12),
        (22, 2, 8, 0x86dd),
        (0, 0, 0, 20),
        (22, 4, 19, 6),
        (1, 0, 0, 54),
        (22, 18, 6, port),
        (1, 0, 0, 56),
        (22, 18, 19, port),
        (22, 9, 19, 0x800),
        (0, 0, 0, 23),
        (22, 11, 19, 6),
        (1, 0, 0, 20),
        (25, 19, 13, 0x1fff),
        (7, 0, 0, 14),
        (4, 0, 0, 14),
        (22, 18, 16, port),
        (4, 0, 0, 16),
        (22, 18, 19, port),
        (27, 0, 0, 262144),
        (27, 0, 0, 0),
    ];
    let mut code = Vec::new();
    for (pc, &(op, jt, jf, k)) in (0i64..).zip(&listing) {
        let rel = |t| {
            if (22..=26).contains(&op) {
                t - pc - 1
            } else {
                t
            }
        };
        code.extend([op, rel(jt), rel(jf), k]);
    }
    code
}

/// `n` Ethernet frames of 42 to 101 bytes, one after the other, and where each ends: IPv4
/// and IPv6, TCP and UDP, to and from port 80 or others, some fragments.
fn packets(n: usize) -> (Vec<u8>, Vec<i64>) {
    let mut pkts = Vec::new();
    let mut ends = Vec::new();
    let mut r = lcg(4 * n, 9);
    for _ in 0..n {
        let mut p = vec![0u8; 42 + (r.next().expect("endless") % 60) as usize];
        let x = r.next().expect("endless");
        let port = if x.is_multiple_of(3) {
            80u16
        } else {
            1024 + (x % 5000) as u16
        };
        let tcp = !x.is_multiple_of(5);
        if x.is_multiple_of(4) {
            p[12..14].copy_from_slice(&[0x86, 0xdd]);
            p[20] = if tcp { 6 } else { 17 };
            if p.len() >= 58 {
                p[56..58].copy_from_slice(&port.to_be_bytes());
            }
        } else {
            p[12..14].copy_from_slice(&[8, 0]);
            p[14] = 0x45;
            p[23] = if tcp { 6 } else { 17 };
            p[20] = u8::from(x.is_multiple_of(7)); // a fragment
            p[36..38].copy_from_slice(&port.to_be_bytes());
        }
        pkts.extend(p);
        ends.push(pkts.len() as i64);
    }
    (pkts, ends)
}

/// The filter machine of `packet_filter` in plain Rust, on one packet.
fn run_filter(code: &[i64], pkt: &[u8]) -> i64 {
    let (mut a, mut x) = (0u32, 0u32);
    let n = pkt.len() as i64;
    let mut pc = 0;
    loop {
        let (op, jt, jf, k) = (code[pc], code[pc + 1], code[pc + 2], code[pc + 3]);
        pc += 4;
        let half = |i: i64| (pkt[i as usize] as u32) << 8 | pkt[i as usize + 1] as u32;
        let skip = |c: bool| 4 * if c { jt } else { jf } as usize;
        match op {
            0 if k >= n => return 0,
            0 => a = pkt[k as usize] as u32,
            1 if k + 1 >= n => return 0,
            1 => a = half(k),
            4 if x as i64 + k + 1 >= n => return 0,
            4 => a = half(x as i64 + k),
            7 if k >= n => return 0,
            7 => x = ((pkt[k as usize] & 15) as u32) << 2,
            14 => a &= k as u32,
            22 => pc += skip(a == k as u32),
            25 => pc += skip(a & k as u32 != 0),
            27 => return k,
            28 => return a as i64,
            _ => panic!("operation {op}"),
        }
    }
}

/// Plain Rust, generic code, then for the optimizing tier and the stitch tier: a call of
/// the specialized code and a specialization.
const VARIANTS: [&str; 6] = [
    "Rust",
    "generic",
    "specialized",
    "specialize",
    "stitched",
    "stitch",
];

/// (kernel index, variant) -> (total time, runs), over every run criterion made.
type Results = BTreeMap<(usize, usize), (Duration, u64)>;
static RESULTS: Mutex<Results> = Mutex::new(BTreeMap::new());

fn result_f64(r: Option<dyc::ir::Const>) -> f64 {
    let c = r.expect("a result");
    c.as_f64()
        .or_else(|| c.as_i64().map(|x| x as f64))
        .expect("a number")
}

fn bench(c: &mut Criterion) {
    let src = include_str!("../examples/kernels.dyc");
    let program = Program::compile_with("kernels.dyc", src, RuntimeOptions::default())
        .expect("the kernels compile");
    for (n, k) in kernels().into_iter().enumerate() {
        let region = program.region(k.name).expect("a region per kernel");
        let generic = region.generic().expect("generic code");
        let mut keys = k.keys.clone();
        let key_args: Vec<Arg> = keys.iter_mut().map(Val::arg).collect();
        let spec = region.specialize(&key_args).expect("specializes");
        // The stencils a stitch-tier unit misses are made by the library's worker thread
        // (it copies variants made ahead meanwhile, which may make the next unit miss
        // others): the code measured is the code once a unit misses none.
        for _ in 0..20 {
            let before = dyc::stencil_counts().fallbacks;
            drop(region.specialize_in(&key_args, Tier::Stitch));
            dyc::settle_stencils();
            if dyc::stencil_counts().fallbacks == before {
                break;
            }
        }
        let stitched = region
            .specialize_in(&key_args, Tier::Stitch)
            .expect("specializes");
        drop(key_args);
        let mut dyns = k.dyns.clone();
        let expected = (k.rust)(&k.keys, &mut dyns);
        let mut group = c.benchmark_group(k.name);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1));
        for (v, what) in VARIANTS.into_iter().enumerate() {
            group.bench_function(what, |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        dyns.clone_from(&k.dyns);
                        let mut keys = k.keys.clone();
                        let t = Instant::now();
                        let r = match v {
                            0 => (k.rust)(&k.keys, &mut dyns),
                            1 => {
                                let mut args: Vec<Arg> = keys
                                    .iter_mut()
                                    .chain(dyns.iter_mut())
                                    .map(Val::arg)
                                    .collect();
                                result_f64(generic.call(&mut args).expect("runs"))
                            }
                            2 | 4 => {
                                let mut args: Vec<Arg> = dyns.iter_mut().map(Val::arg).collect();
                                let s = if v == 2 { &spec } else { &stitched };
                                result_f64(s.call(&mut args).expect("runs"))
                            }
                            _ => {
                                let args: Vec<Arg> = keys.iter_mut().map(Val::arg).collect();
                                let tier = if v == 3 {
                                    Tier::Optimizing
                                } else {
                                    Tier::Stitch
                                };
                                let s = region.specialize_in(&args, tier).expect("specializes");
                                std::hint::black_box(&s);
                                expected
                            }
                        };
                        total += t.elapsed();
                        assert_eq!(r.to_bits(), expected.to_bits(), "{}: {what}", k.name);
                    }
                    let mut res = RESULTS.lock().expect("not poisoned");
                    let e = res.entry((n, v)).or_insert((Duration::ZERO, 0));
                    e.0 += total;
                    e.1 += iters;
                    total
                })
            });
        }
        group.finish();
    }
}

fn report() {
    let r = RESULTS.lock().expect("not poisoned");
    let mean = |n: usize, v: usize| {
        r.get(&(n, v))
            .map(|&(t, k)| t.as_secs_f64() / k.max(1) as f64)
    };
    let names: Vec<&str> = kernels().iter().map(|k| k.name).collect();
    println!("\nMean time per call (us), ratios, and break-even in calls:\n");
    println!(
        "| kernel | plain Rust | generic | specialized | specialized vs generic | specialized vs Rust | specialize (us) | break-even calls |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut speedups = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let (Some(rust), Some(gen), Some(spec), Some(cost)) =
            (mean(n, 0), mean(n, 1), mean(n, 2), mean(n, 3))
        else {
            continue;
        };
        speedups.push(gen / spec);
        let even = break_even(cost, gen, spec);
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.0} | {even} |",
            rust * 1e6,
            gen * 1e6,
            spec * 1e6,
            gen / spec,
            rust / spec,
            cost * 1e6
        );
    }
    let geomean = |xs: &[f64]| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
    if !speedups.is_empty() {
        println!(
            "\nGeometric mean of specialized over generic: {:.2}x",
            geomean(&speedups)
        );
    }
    println!("\nThe stitch tier: mean time per call (us), ratios, and break-even in calls:\n");
    println!(
        "| kernel | generic | stitched | stitched vs generic | stitched vs optimizing | stitch (us) | stitch vs optimizing specialization | break-even calls |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut speedups = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let (Some(gen), Some(spec), Some(cost), Some(st), Some(st_cost)) =
            (mean(n, 1), mean(n, 2), mean(n, 3), mean(n, 4), mean(n, 5))
        else {
            continue;
        };
        speedups.push(gen / st);
        let even = break_even(st_cost, gen, st);
        println!(
            "| {name} | {:.1} | {:.1} | {:.2}x | {:.2}x | {:.0} | {:.1}x faster | {even} |",
            gen * 1e6,
            st * 1e6,
            gen / st,
            spec / st,
            st_cost * 1e6,
            cost / st_cost
        );
    }
    if !speedups.is_empty() {
        println!(
            "\nGeometric mean of stitched over generic: {:.2}x",
            geomean(&speedups)
        );
    }
}

/// Calls until specializing (at `cost`) and running code of time `t` per call beats
/// running generic code of time `generic` per call.
fn break_even(cost: f64, generic: f64, t: f64) -> String {
    if generic > t {
        format!("{:.1}", cost / (generic - t))
    } else {
        "never".into()
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    report();
}

//! The caching policies of region entries and the limits on what they keep, tested by
//! their observable behaviour: results, versions kept, specializations made, hits,
//! evictions and fallbacks (see `docs/language.md`, "Policies").

use dyc::{Arg, Caching, Limits, OnExceeded, Program, RuntimeOptions, Tier, Tiers};

/// `f(k, x) = k * 1000 + x`, specialized on `k`, with the caching policy `policy`.
fn keyed(policy: &str) -> Program {
    Program::compile(&format!(
        "fn f(k: i64, x: i64) -> i64 {{ make_static(k{policy}); return k * 1000 + x; }}"
    ))
    .expect("compiles")
}

fn call(p: &Program, k: i64, x: i64) -> i64 {
    p.region("f")
        .expect("region")
        .call(&mut [Arg::from(k), Arg::from(x)])
        .expect("runs")
        .and_then(|c| c.as_i64())
        .expect("a result")
}

#[test]
fn cache_all_keeps_every_version() {
    let p = keyed("");
    let f = p.region("f").unwrap();
    assert_eq!(f.caching(), Caching::All);
    for round in 0..2 {
        for k in 1..=3 {
            assert_eq!(call(&p, k, round), k * 1000 + round);
        }
    }
    let s = f.stats();
    assert_eq!(
        (s.versions, s.specializations, s.hits, s.misses),
        (3, 3, 3, 3),
        "{s}"
    );
    assert!(s.code_bytes > 0 && s.stitch_ns > 0, "{s}");
}

#[test]
fn cache_one_keeps_one_version_and_specializes_again_when_the_key_changes() {
    let p = keyed(": cache_one");
    let f = p.region("f").unwrap();
    assert_eq!(f.caching(), Caching::One);
    for (n, k) in [1, 1, 2, 2, 1, 3].into_iter().enumerate() {
        assert_eq!(call(&p, k, n as i64), k * 1000 + n as i64);
        assert_eq!(f.cached(), 1);
    }
    let s = f.stats();
    // Misses at 1, 2, 1, 3; the replaced versions count as evictions.
    assert_eq!((s.specializations, s.hits, s.evictions), (4, 2, 3), "{s}");
}

#[test]
fn cache_one_unchecked_never_looks_at_the_key() {
    let p = keyed(": cache_one_unchecked");
    let f = p.region("f").unwrap();
    assert_eq!(call(&p, 7, 1), 7001);
    // The caller promised the key would not change: the first version serves.
    assert_eq!(call(&p, 8, 2), 7002);
    let s = f.stats();
    assert_eq!((s.specializations, s.hits, s.versions), (1, 1, 1), "{s}");
}

#[test]
fn replicate_specializes_on_every_call_and_keeps_nothing() {
    let p = keyed(": replicate");
    let f = p.region("f").unwrap();
    for n in 0..3 {
        assert_eq!(call(&p, 4, n), 4000 + n);
    }
    let s = f.stats();
    assert_eq!((s.specializations, s.hits, s.versions), (3, 0, 0), "{s}");
}

/// `sum(w)`, specialized on the contents of `w`, with caching policy `policy`.
fn summed(policy: &str) -> Program {
    Program::compile(&format!(
        "fn sum(w: [i64]) -> i64 {{ make_static(w{policy}); var s = 0; var i = 0; while i < len(w) {{ s = s + w@[i]; i += 1; }} return s; }}"
    ))
    .expect("compiles")
}

fn sum(p: &Program, w: &[i64]) -> i64 {
    p.region("sum")
        .unwrap()
        .call(&mut [Arg::from(w)])
        .expect("runs")
        .and_then(|c| c.as_i64())
        .expect("a result")
}

#[test]
fn cache_all_checks_slice_contents_and_cache_all_unchecked_does_not() {
    let checked = summed("");
    let unchecked = summed(": cache_all_unchecked");
    assert_eq!(
        unchecked.region("sum").unwrap().caching(),
        Caching::AllUnchecked
    );
    let mut w = vec![1i64, 2, 3];
    assert_eq!(sum(&checked, &w), 6);
    assert_eq!(sum(&unchecked, &w), 6);
    // The same buffer with new contents.
    w[0] = 100;
    assert_eq!(sum(&checked, &w), 105);
    // Unchecked: keyed by the slice's address and length, the old version serves.
    assert_eq!(sum(&unchecked, &w), 6);
    assert_eq!(checked.region("sum").unwrap().stats().specializations, 2);
    assert_eq!(unchecked.region("sum").unwrap().stats().specializations, 1);
}

fn limited(limits: Limits, src: &str) -> Program {
    let opts = RuntimeOptions {
        limits,
        ..RuntimeOptions::default()
    };
    Program::compile_with("limits.dyc", src, opts).expect("compiles")
}

#[test]
fn past_the_version_cap_new_keys_run_generic_code() {
    let src = "fn f(k: i64, x: i64) -> i64 { make_static(k); return k * 1000 + x; }";
    let p = limited(
        Limits {
            max_versions: 2,
            ..Limits::default()
        },
        src,
    );
    for k in 1..=5 {
        assert_eq!(call(&p, k, 3), k * 1000 + 3);
    }
    // Keys 1 and 2 still hit their versions.
    assert_eq!(call(&p, 1, 4), 1004);
    let s = p.region("f").unwrap().stats();
    assert_eq!(
        (s.versions, s.specializations, s.fallbacks, s.hits),
        (2, 2, 3, 1),
        "{s}"
    );
}

#[test]
fn the_least_recently_used_versions_of_any_region_are_evicted() {
    let src = "
        fn f(k: i64, x: i64) -> i64 { make_static(k); return k * 1000 + x; }
        fn g(k: i64, x: i64) -> i64 { make_static(k); return k * 2000 + x; }";
    let p = limited(
        Limits {
            max_specializations: 3,
            ..Limits::default()
        },
        src,
    );
    let run = |name: &str, k: i64| {
        p.region(name)
            .unwrap()
            .call(&mut [Arg::from(k), Arg::from(1i64)])
            .unwrap()
            .and_then(|c| c.as_i64())
            .unwrap()
    };
    assert_eq!(run("f", 1), 1001);
    assert_eq!(run("g", 1), 2001);
    assert_eq!(run("f", 2), 2001);
    // f(1) is used again: g(1) is now the least recently used, and goes first.
    assert_eq!(run("f", 1), 1001);
    assert_eq!(run("g", 2), 4001);
    let (f, g) = (
        p.region("f").unwrap().stats(),
        p.region("g").unwrap().stats(),
    );
    assert_eq!(f.versions + g.versions, 3);
    assert_eq!((f.evictions, g.evictions), (0, 1), "{f} / {g}");
    // g(1) specializes again; f(2), now the least recent, goes.
    assert_eq!(run("g", 1), 2001);
    let (f, g) = (
        p.region("f").unwrap().stats(),
        p.region("g").unwrap().stats(),
    );
    assert_eq!((f.evictions, g.evictions, g.specializations), (1, 1, 3));
}

#[test]
fn cached_code_stays_within_the_byte_limit() {
    let p = summed("");
    let one = {
        sum(&p, &[1, 2, 3, 4]);
        p.region("sum").unwrap().stats().code_bytes
    };
    let limit = one * 5 / 2;
    let p = limited(
        Limits {
            max_code_bytes: limit,
            ..Limits::default()
        },
        "fn sum(w: [i64]) -> i64 { make_static(w); var s = 0; var i = 0; while i < len(w) { s = s + w@[i]; i += 1; } return s; }",
    );
    for n in 0..20i64 {
        let w = [n, n + 1, n + 2, n + 3];
        assert_eq!(sum(&p, &w), 4 * n + 6);
        let s = p.region("sum").unwrap().stats();
        assert!(s.code_bytes <= limit, "{s} over {limit}");
    }
    let s = p.region("sum").unwrap().stats();
    assert_eq!(s.versions, 2, "{s}");
    assert_eq!(s.evictions, 18, "{s}");
}

#[test]
fn quick_tier_versions_move_to_the_optimizing_tier_once_hot() {
    let src = "fn f(k: i64, x: i64) -> i64 { make_static(k); var s = 0; var i = 0; while i < k { s = s + x * i; i += 1; } return s; }";
    let opts = RuntimeOptions {
        tiers: Tiers {
            first: Tier::Quick,
            hot_calls: 3,
            hot_time: std::time::Duration::MAX,
        },
        ..RuntimeOptions::default()
    };
    let p = Program::compile_with("tiers.dyc", src, opts).expect("compiles");
    let f = p.region("f").unwrap();
    let expect = |k: i64, x: i64| (0..k).map(|i| x * i).sum::<i64>();
    for n in 0..6 {
        for k in [4, 9] {
            assert_eq!(call(&p, k, n), expect(k, n));
        }
    }
    // Per key: a miss (quick), hits; the third hit tiers up.
    let s = f.stats();
    assert_eq!(
        (s.specializations, s.tier_ups, s.versions),
        (4, 2, 2),
        "{s}"
    );
    // Both tiers agree on every key.
    let quick = f.specialize_in(&[Arg::from(7i64)], Tier::Quick).unwrap();
    let optimizing = f.specialize(&[Arg::from(7i64)]).unwrap();
    assert_eq!(
        (quick.tier(), optimizing.tier()),
        (Tier::Quick, Tier::Optimizing)
    );
    for x in -3..3i64 {
        let q = quick.call(&mut [Arg::from(x)]).unwrap();
        let o = optimizing.call(&mut [Arg::from(x)]).unwrap();
        assert_eq!(q, o);
        assert_eq!(q.and_then(|c| c.as_i64()), Some(expect(7, x)));
    }
}

#[test]
fn a_first_tier_version_whose_calls_ran_long_enough_moves_up() {
    let src = "fn f(k: i64, x: i64) -> i64 { make_static(k); var s = 0; var i = 0; while i < x { s = s + k * i; i += 1; } return s; }";
    let program = |hot_time| {
        let opts = RuntimeOptions {
            tiers: Tiers {
                first: Tier::Stitch,
                hot_calls: u64::MAX,
                hot_time,
            },
            ..RuntimeOptions::default()
        };
        Program::compile_with("tiers.dyc", src, opts).expect("compiles")
    };
    let expect = |k: i64, x: i64| (0..x).map(|i| k * i).sum::<i64>();
    // Any call runs for a nanosecond: the second call moves the version up.
    let p = program(std::time::Duration::from_nanos(1));
    for n in 0..4 {
        assert_eq!(call(&p, 3, 100 + n), expect(3, 100 + n));
    }
    let s = p.region("f").unwrap().stats();
    assert_eq!(
        (s.specializations, s.tier_ups, s.versions),
        (2, 1, 1),
        "{s}"
    );
    // No call count or run time reached: the version stays.
    let p = program(std::time::Duration::MAX);
    for n in 0..4 {
        assert_eq!(call(&p, 3, 100 + n), expect(3, 100 + n));
    }
    let s = p.region("f").unwrap().stats();
    assert_eq!((s.specializations, s.tier_ups), (1, 0), "{s}");
}

#[test]
fn a_cache_one_unchecked_version_of_a_first_tier_still_moves_up_and_serves() {
    // Hits of optimizing-tier versions take the fast path; others count calls to tier up.
    for first in [Tier::Quick, Tier::Stitch] {
        let src = "fn f(k: i64, x: i64) -> i64 { make_static(k: cache_one_unchecked); return k * 1000 + x; }";
        let opts = RuntimeOptions {
            tiers: Tiers {
                first,
                hot_calls: 3,
                hot_time: std::time::Duration::MAX,
            },
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with("tiers.dyc", src, opts).expect("compiles");
        let f = p.region("f").unwrap();
        for x in 0..8 {
            assert_eq!(call(&p, 5, x), 5000 + x, "{first:?}");
        }
        let s = f.stats();
        assert_eq!(
            (s.specializations, s.tier_ups, s.versions, s.hits, s.misses),
            (2, 1, 1, 7, 1),
            "{first:?}: {s}"
        );
    }
}

/// `f(k, x)` with a dynamic branch on `x`, stitched with laziness policy `policy`.
fn branchy(policy: &str) -> Program {
    Program::compile(&format!(
        "fn f(k: i64, x: i64) -> i64 {{
            make_static(k{policy});
            var r = 0;
            if x > 0 {{ r = k * x + 1; }} else {{ r = k - x; }}
            return r + k;
        }}"
    ))
    .expect("compiles")
}

#[test]
fn a_lazy_successor_is_stitched_the_first_time_it_runs_and_never_if_never_taken() {
    let eager = branchy("");
    let lazy = branchy(": lazy");
    let spec = |p: &Program| {
        p.region("f")
            .unwrap()
            .specialize(&[Arg::from(5i64)])
            .unwrap()
    };
    let (e, l) = (spec(&eager), spec(&lazy));
    let run = |s: &dyc::Specialized, x: i64| {
        s.call(&mut [Arg::from(x)])
            .unwrap()
            .and_then(|c| c.as_i64())
            .unwrap()
    };
    // Eager: both arms in the entry unit; lazy: neither, until taken.
    assert!(
        l.stats().blocks < e.stats().blocks,
        "{:?} / {:?}",
        l.stats(),
        e.stats()
    );
    for x in [3, 4, 5] {
        assert_eq!(run(&l, x), 5 * x + 1 + 5);
        assert_eq!(run(&e, x), 5 * x + 1 + 5);
    }
    // The then arm was stitched once, as a unit of its own; the else arm never ran.
    assert_eq!(l.lazy_stats().0, 1);
    assert_eq!(e.lazy_stats().0, 0);
    assert_eq!(run(&l, -2), 5 + 2 + 5);
    assert_eq!(l.lazy_stats().0, 2);
    for x in [-7, 7] {
        run(&l, x);
    }
    assert_eq!(l.lazy_stats().0, 2, "each arm is stitched once");
}

#[test]
fn lazy_arms_stitched_from_many_threads_are_stitched_once() {
    let p = branchy(": lazy");
    let s = p
        .region("f")
        .unwrap()
        .specialize(&[Arg::from(3i64)])
        .unwrap();
    std::thread::scope(|scope| {
        for t in 0..4i64 {
            let s = &s;
            scope.spawn(move || {
                for x in -50..50i64 {
                    let x = x * (t + 1);
                    let want = if x > 0 { 3 * x + 1 } else { 3 - x } + 3;
                    let got = s
                        .call(&mut [Arg::from(x)])
                        .unwrap()
                        .and_then(|c| c.as_i64());
                    assert_eq!(got, Some(want));
                }
            });
        }
    });
    assert_eq!(s.lazy_stats().0, 2);
}

#[test]
fn registering_a_host_drops_versions_made_without_it() {
    let p = Program::compile(
        "extern pure fn double(x: i64) -> i64;
         fn f(k: i64, x: i64) -> i64 { make_static(k); return @double(k) + x; }",
    )
    .expect("compiles");
    let f = p.region("f").unwrap();
    let r = f.call(&mut [Arg::from(5i64), Arg::from(1i64)]);
    assert!(r.is_err(), "{r:?}");
    p.register_host("double", |a| {
        Ok(Some(dyc::Const::Int(
            dyc::ir::Scalar::I64,
            a[0].as_u64().unwrap_or(0).wrapping_mul(2),
        )))
    })
    .unwrap();
    assert_eq!(f.cached(), 0);
    assert_eq!(call(&p, 5, 1), 11);
}

/// A host registered while a specialization runs (here: while it is inside a pure host)
/// may be one that specialization already found missing, so the version it makes is used
/// for its call but not cached.
#[test]
fn a_version_specialized_across_a_host_registration_is_not_cached() {
    use std::sync::mpsc;
    let p = Program::compile(
        "extern pure fn slow(x: i64) -> i64;
         extern pure fn other(x: i64) -> i64;
         fn f(k: i64, x: i64) -> i64 { make_static(k); return @slow(k) + x; }",
    )
    .expect("compiles");
    let (inside, wait_inside) = mpsc::channel::<()>();
    let (go_on, wait_go_on) = mpsc::channel::<()>();
    let wait_go_on = std::sync::Mutex::new(wait_go_on);
    p.register_host("slow", move |a| {
        inside.send(()).ok();
        wait_go_on.lock().unwrap().recv().ok();
        Ok(Some(dyc::Const::Int(
            dyc::ir::Scalar::I64,
            a[0].as_u64().unwrap_or(0).wrapping_mul(2),
        )))
    })
    .unwrap();
    let p2 = p.clone();
    let caller = std::thread::spawn(move || call(&p2, 5, 1));
    wait_inside
        .recv()
        .expect("the specialization reaches the host");
    p.register_host("other", |a| Ok(Some(a[0]))).unwrap();
    go_on.send(()).unwrap();
    assert_eq!(caller.join().unwrap(), 11);
    let f = p.region("f").unwrap();
    assert_eq!(f.cached(), 0, "{}", f.stats());
    // The next call specializes again, and that version is kept.
    let (ok, _) = std::thread::scope(|s| {
        let h = s.spawn(|| call(&p, 5, 2));
        wait_inside.recv().ok();
        go_on.send(()).unwrap();
        (h.join().unwrap(), ())
    });
    assert_eq!(ok, 12);
    assert_eq!(f.cached(), 1, "{}", f.stats());
}

/// `f(x) = (x % 4) * 100 + x`, with `x % 4` promoted under caching policy `policy`.
fn promoting(policy: &str, limits: Limits) -> dyc::Specialized {
    let src = format!(
        "fn f(x: i64) -> i64 {{ var y = x % 4; make_static(y{policy}); return y * 100 + x; }}"
    );
    let opts = RuntimeOptions {
        limits,
        ..RuntimeOptions::default()
    };
    let p = Program::compile_with("promote.dyc", &src, opts).expect("compiles");
    let f = p.region("f").unwrap();
    f.specialize(&[]).expect("specializes")
}

fn promote_call(s: &dyc::Specialized, x: i64) -> Result<i64, dyc::Error> {
    Ok(s.call(&mut [Arg::from(x)])?
        .and_then(|c| c.as_i64())
        .expect("a result"))
}

#[test]
fn promotion_sites_follow_their_caching_policy() {
    let xs = [1i64, 5, 2, 6, 1, 3, 9];
    let want = |x: i64| (x % 4) * 100 + x;
    // cache_all: one continuation per value (1, 2, 3).
    let s = promoting("", Limits::default());
    for x in xs {
        assert_eq!(promote_call(&s, x).unwrap(), want(x));
    }
    assert_eq!(s.lazy_stats().0, 3);
    let sites = s.site_stats();
    assert_eq!(sites.len(), 1);
    assert_eq!((sites[0].stitched, sites[0].cached), (3, 3), "{sites:?}");
    // Every value's first execution called back; later ones were served by the code.
    assert!(
        sites[0].calls >= 3 && sites[0].calls < xs.len() as u64,
        "{sites:?}"
    );
    // cache_one: a new continuation whenever the value changes (1, 2, 1, 3, 1).
    let s = promoting(": cache_one", Limits::default());
    for x in xs {
        assert_eq!(promote_call(&s, x).unwrap(), want(x));
    }
    assert_eq!(s.lazy_stats().0, 5);
    let sites = s.site_stats();
    assert_eq!((sites[0].stitched, sites[0].cached), (5, 1), "{sites:?}");
    // replicate: a continuation per execution.
    let s = promoting(": replicate", Limits::default());
    for x in xs {
        assert_eq!(promote_call(&s, x).unwrap(), want(x));
    }
    assert_eq!(s.lazy_stats().0, xs.len());
    let sites = s.site_stats();
    assert_eq!((sites[0].stitched, sites[0].cached), (xs.len() as u64, 0));
    // cache_one_unchecked: the first value's continuation serves every value.
    let s = promoting(": cache_one_unchecked", Limits::default());
    for x in xs {
        assert_eq!(promote_call(&s, x).unwrap(), 100 + x);
    }
    assert_eq!(s.lazy_stats().0, 1);
    // cache_all past the version cap: the call fails with a budget error.
    let s = promoting(
        "",
        Limits {
            max_versions: 2,
            ..Limits::default()
        },
    );
    assert_eq!(promote_call(&s, 1).unwrap(), 101);
    assert_eq!(promote_call(&s, 2).unwrap(), 202);
    let e = promote_call(&s, 3).expect_err("a third value");
    assert!(
        e.to_string().contains("versions at a promotion site"),
        "{e}"
    );
    assert_eq!(promote_call(&s, 5).unwrap(), 105);
}

/// Through a region's cache, a promotion past its site's version cap fails that call, and
/// under `OnExceeded::Fallback` (the default) the key's later calls run the generic code,
/// every value alike; under `OnExceeded::Error` each new value fails.
#[test]
fn a_promotion_past_its_versions_moves_its_key_to_generic_code() {
    let src = "fn f(x: i64) -> i64 { var y = x % 4; make_static(y); return y * 100 + x; }";
    for (on_exceeded, third_later) in [(OnExceeded::Fallback, Some(303)), (OnExceeded::Error, None)]
    {
        let opts = RuntimeOptions {
            limits: Limits {
                max_versions: 2,
                on_exceeded,
                ..Limits::default()
            },
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with("promote.dyc", src, opts).expect("compiles");
        let f = p.region("f").unwrap();
        let call = |x: i64| {
            f.call(&mut [Arg::from(x)])
                .map(|r| r.and_then(|c| c.as_i64()).expect("a result"))
        };
        assert_eq!(call(1).unwrap(), 101);
        assert_eq!(call(2).unwrap(), 202);
        let e = call(3).expect_err("a third value");
        assert!(
            e.to_string().contains("versions at a promotion site"),
            "{e}"
        );
        assert_eq!(call(3).ok(), third_later, "{on_exceeded:?}");
        assert_eq!(call(5).unwrap(), 105);
        let fallbacks = u64::from(on_exceeded == OnExceeded::Fallback);
        assert_eq!(f.stats().fallbacks, fallbacks, "{}", f.stats());
    }
}

#[test]
fn specialize_lazy_stitches_specialization_points_when_reached() {
    let src = |policy: &str| {
        format!(
            "fn f(k: i64, x: i64) -> i64 {{
                make_static(k{policy});
                var s = 0;
                if x > 0 {{ s = k; }} else {{ s = k + 1; }}
                return s * 10 + x;
            }}"
        )
    };
    let spec = |policy: &str| {
        let p = Program::compile(&src(policy)).expect("compiles");
        let f = p.region("f").unwrap();
        f.specialize(&[Arg::from(4i64)]).unwrap()
    };
    let (eager, lazy) = (spec(""), spec(": specialize_lazy"));
    let run = |s: &dyc::Specialized, x: i64| {
        s.call(&mut [Arg::from(x)])
            .unwrap()
            .and_then(|c| c.as_i64())
            .unwrap()
    };
    for x in [1, 2] {
        assert_eq!(run(&lazy, x), 40 + x);
        assert_eq!(run(&eager, x), 40 + x);
    }
    // The merge, specialized on s = 4, was stitched when first reached; not yet on s = 5.
    assert_eq!(lazy.lazy_stats().0, 1);
    assert_eq!(run(&lazy, -1), 49);
    assert_eq!(lazy.lazy_stats().0, 2);
    assert_eq!(eager.lazy_stats().0, 0);
}

#[test]
fn loop_specialize_lazy_unrolls_one_iteration_at_a_time() {
    let src = |policy: &str| {
        format!(
            "fn g(n: i64, x: i64) -> i64 {{
                make_static(n{policy});
                var i = 0;
                var acc = x;
                while i < n {{ acc = acc * 2 + i; i += 1; }}
                return acc;
            }}"
        )
    };
    let want = |n: i64, x: i64| (0..n).fold(x, |a, i| a * 2 + i);
    for (policy, units) in [("", 0), (": loop_specialize_lazy", 6)] {
        let p = Program::compile(&src(policy)).expect("compiles");
        let s = p
            .region("g")
            .unwrap()
            .specialize(&[Arg::from(5i64)])
            .unwrap();
        for x in [0, 3, -7] {
            let got = s
                .call(&mut [Arg::from(x)])
                .unwrap()
                .and_then(|c| c.as_i64());
            assert_eq!(got, Some(want(5, x)), "{policy}");
        }
        // Lazily: the loop head for i = 0 to 5, each a unit stitched when reached.
        assert_eq!(s.lazy_stats().0, units, "{policy}");
    }
}

#[test]
fn auto_promote_keeps_an_annotated_variable_static_where_it_receives_a_dynamic_value() {
    let src = |policy: &str| {
        format!(
            "fn f(x: i64) -> i64 {{
                var y = 1;
                make_static(y{policy});
                if x > 10 {{ y = x; }}
                return y * 2 + x;
            }}"
        )
    };
    for (policy, promotes) in [
        ("", true),
        (": auto_promote", true),
        (": manual_promote", false),
    ] {
        let p = Program::compile(&src(policy)).expect("compiles");
        let f = p.region("f").unwrap();
        // Under auto_promote, `y` is promoted on the edge that brings `x`, so it stays
        // static after the merge and each value of `x` above 10 gets a continuation;
        // under manual_promote it is dynamic there and nothing is promoted.
        let s = f.specialize(&[]).unwrap();
        for x in [3, 20, 30, 20, 4] {
            let got = s
                .call(&mut [Arg::from(x)])
                .unwrap()
                .and_then(|c| c.as_i64());
            let y = if x > 10 { x } else { 1 };
            assert_eq!(got, Some(y * 2 + x), "{policy}");
        }
        assert_eq!(s.lazy_stats().0, if promotes { 2 } else { 0 }, "{policy}");
    }
}

#[test]
fn racing_threads_specialize_a_key_once_and_hosts_run_outside_runtime_locks() {
    // Specializations of different keys run at once, with no runtime lock held while the
    // pure host runs: each thread's host call waits at a barrier for all the others, which
    // would never be met if specializations were serialized.
    let p = Program::compile(
        "extern pure fn slow(x: i64) -> i64;
         fn f(k: i64, x: i64) -> i64 { make_static(k); return @slow(k) + x; }",
    )
    .expect("compiles");
    let threads = 4;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(threads));
    let b = barrier.clone();
    p.register_host("slow", move |a| {
        b.wait();
        Ok(Some(a[0]))
    })
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..threads as i64 {
            let p = &p;
            s.spawn(move || assert_eq!(call(p, t, 1), t + 1));
        }
    });
    // Then every thread races on one key: it is specialized once.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let q = Program::compile(
        "extern pure fn count(x: i64) -> i64;
         fn f(k: i64, x: i64) -> i64 { make_static(k); return @count(k) + x; }",
    )
    .expect("compiles");
    let calls = std::sync::Arc::new(calls);
    let c = calls.clone();
    q.register_host("count", move |a| {
        c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(20));
        Ok(Some(a[0]))
    })
    .unwrap();
    std::thread::scope(|s| {
        for _ in 0..threads {
            let q = &q;
            s.spawn(move || assert_eq!(call(q, 9, 1), 10));
        }
    });
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(q.region("f").unwrap().stats().specializations, 1);
}

#[test]
fn poly_divide_keeps_a_variable_static_on_the_paths_that_bring_a_static_value() {
    let src = |policy: &str| {
        format!(
            "fn f(x: i64, d: bool) -> i64 {{
                var v = 0;
                make_static(v: manual_promote{policy});
                if d {{ v = x; }} else {{ v = 4; }}
                var s = 0;
                var i = 0;
                while i < v {{ s = s + i * x; i += 1; }}
                return s;
            }}"
        )
    };
    let want = |x: i64, d: bool| {
        let v = if d { x } else { 4 };
        (0..v).map(|i| i * x).sum::<i64>()
    };
    let mut blocks = Vec::new();
    for policy in ["", ", mono_divide", ", poly_divide"] {
        let p = Program::compile(&src(policy)).expect("compiles");
        let s = p.region("f").unwrap().specialize(&[]).unwrap();
        for x in [0, 3, 7] {
            for d in [false, true] {
                let got = s
                    .call(&mut [Arg::from(x), Arg::from(d)])
                    .unwrap()
                    .and_then(|c| c.as_i64());
                assert_eq!(got, Some(want(x, d)), "{policy}: f({x}, {d})");
            }
        }
        blocks.push(s.stats().blocks);
    }
    // mono_divide (the default): v is dynamic after the merge, one dynamic loop. Under
    // poly_divide the path that sets v = 4 keeps it static: its copy of the loop unrolls.
    assert_eq!(blocks[0], blocks[1]);
    assert!(blocks[2] > blocks[1] + 4, "{blocks:?}");
}

#[test]
fn code_that_promotions_add_to_cached_versions_counts_against_the_limit_at_once() {
    let src = "fn f(k: i64, x: i64) -> i64 { make_static(k); var y = x % 64; make_static(y); return y * k + x; }";
    // The entry unit and a few continuations fit; thirty promoted values do not.
    let entry = {
        let p = Program::compile(src).expect("compiles");
        let f = p.region("f").unwrap();
        call(&p, 2, 1);
        f.stats().code_bytes
    };
    let p = limited(
        Limits {
            max_code_bytes: entry * 4,
            ..Limits::default()
        },
        src,
    );
    let f = p.region("f").unwrap();
    for x in 0..30i64 {
        for k in [2, 3] {
            assert_eq!(call(&p, k, x), (x % 64) * k + x);
            let s = f.stats();
            assert!(s.code_bytes <= entry * 4, "{s} over {}", entry * 4);
        }
    }
    assert!(f.stats().evictions > 0);
}

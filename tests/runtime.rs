//! The runtime as a service sees it: one cache per region shared by every handle, cache
//! keys that follow the contents of static slices, panics that come back as internal
//! errors, native-stack limits that hold whatever `max_depth` says, and arguments that do
//! not fit refused with what was expected and what was given.

mod common;

use common::on_small_stack;
use dyc::{Arg, Error, Program, RuntimeOptions};
use dyc_templates::template::FaultKind;

const DOT: &str = "fn dot(w: [i64], v: [i64]) -> i64 {
    make_static(w);
    var sum = 0;
    var i = 0;
    while i < len(w) {
        sum = sum + w@[i] * v[i];
        i += 1;
    }
    return sum;
}
fn scale(k: i64, x: i64) -> i64 {
    make_static(k);
    return k * x;
}
";

/// Every way a call's arguments can fail to fit is an error naming the argument (its
/// position in the call), the parameter's type and what was given; nothing runs.
#[test]
fn arguments_that_do_not_fit_are_refused_with_what_was_given() {
    let p = Program::compile(
        "fn f(k: i64, xs: [mut i32], y: u8) -> i64 {
            make_static(k);
            xs[0] = 7;
            return k + y as i64;
        }",
    )
    .expect("compiles");
    let r = p.region("f").expect("region");
    let msg = |e: Result<Option<dyc::Const>, Error>| match e {
        Err(Error::Arguments(m)) => m,
        other => panic!("not an argument error: {other:?}"),
    };
    let (mut v, mut v2) = (vec![1i32, 2], vec![1i32, 2]);
    let mut w = [1i64];
    let ro = [1i32];
    let cases: [(Vec<Arg>, &str); 5] = [
        (
            vec![Arg::from(1i64)],
            "3 arguments expected (i64, [mut i32], u8), 1 given",
        ),
        (
            vec![Arg::from(1i32), Arg::from(&mut v[..]), Arg::from(3u8)],
            "argument 0 has type i32, where the parameter has type i64",
        ),
        (
            vec![Arg::from(1i64), Arg::from(&mut w[..]), Arg::from(3u8)],
            "argument 1 has type [mut i64], where the parameter has type [mut i32]",
        ),
        (
            vec![Arg::from(1i64), Arg::from(&ro[..]), Arg::from(3u8)],
            "argument 1 has type [i32], where the parameter has type [mut i32]",
        ),
        (
            // (After the key: the position in the call, not among the other arguments.)
            vec![Arg::from(1i64), Arg::from(&mut v2[..]), Arg::from(3i64)],
            "argument 2 has type i64, where the parameter has type u8",
        ),
    ];
    for (mut args, want) in cases {
        assert_eq!(msg(r.call(&mut args)), want);
    }
    assert_eq!((&v, &v2), (&vec![1, 2], &vec![1, 2]), "nothing ran");
    // A specialization takes the arguments other than the key.
    let s = r.specialize(&[Arg::from(1i64)]).expect("specializes");
    assert_eq!(
        msg(s.call(&mut [Arg::from(1i64), Arg::from(&mut v[..]), Arg::from(3u8)])),
        "2 arguments expected ([mut i32], u8), 3 given"
    );
    assert_eq!(
        msg(s.call(&mut [Arg::from(&mut v[..]), Arg::from(3i8)])),
        "argument 1 has type i8, where the parameter has type u8"
    );
    assert_eq!(
        s.call(&mut [Arg::from(&mut v[..]), Arg::from(3u8)]).ok(),
        Some(Some(dyc::Const::from(4i64)))
    );
    assert_eq!(v, [7, 2]);
    match r.specialize(&[]) {
        Err(Error::Arguments(m)) => {
            assert_eq!(
                m,
                "1 run-time constant expected (the region's key), 0 given"
            )
        }
        other => panic!("{:?}", other.err()),
    }
    match r.specialize(&[Arg::from(1u64)]) {
        Err(Error::Arguments(m)) => assert_eq!(
            m,
            "run-time constant 0 (parameter 0) has type u64, where the parameter has type i64"
        ),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn handles_share_one_cache_and_a_loop_of_calls_specializes_once() {
    let p = Program::compile(DOT).expect("compiles");
    for k in 0..100i64 {
        let r = p
            .region("scale")
            .expect("region")
            .call(&mut [Arg::from(7i64), Arg::from(k)])
            .expect("runs");
        assert_eq!(r.and_then(|c| c.as_i64()), Some(7 * k));
    }
    let scale = p.region("scale").expect("region");
    assert_eq!(scale.cached(), 1);
    scale
        .call(&mut [Arg::from(8i64), Arg::from(1i64)])
        .expect("runs");
    assert_eq!(p.region("scale").expect("region").cached(), 2);
}

#[test]
fn a_static_slice_changed_between_calls_gets_code_for_its_new_contents() {
    let p = Program::compile(DOT).expect("compiles");
    let dot = p.region("dot").expect("region");
    let v = [1i64, 10, 100];
    let mut w = vec![1i64, 2, 3];
    let call = |w: &[i64]| {
        dot.call(&mut [Arg::from(w), Arg::from(&v[..])])
            .expect("runs")
            .and_then(|c| c.as_i64())
    };
    assert_eq!(call(&w), Some(321));
    assert_eq!(call(&w), Some(321));
    assert_eq!(dot.cached(), 1);
    w[2] = 5;
    assert_eq!(call(&w), Some(521));
    assert_eq!(dot.cached(), 2);
    w[2] = 3;
    assert_eq!(call(&w), Some(321));
    assert_eq!(dot.cached(), 2);
}

#[test]
fn a_panic_while_specializing_is_an_internal_error_and_the_runtime_goes_on() {
    let p = Program::compile(DOT).expect("compiles");
    let scale = p.region("scale").expect("region");
    p.inject_panic();
    match scale.call(&mut [Arg::from(3i64), Arg::from(5i64)]) {
        Err(Error::Internal(m)) => assert!(m.contains("injected"), "{m}"),
        other => panic!("expected an internal error, got {other:?}"),
    }
    assert_eq!(scale.cached(), 0);
    let r = scale
        .call(&mut [Arg::from(3i64), Arg::from(5i64)])
        .expect("runs after the panic");
    assert_eq!(r.and_then(|c| c.as_i64()), Some(15));
}

#[test]
fn a_panicking_pure_host_is_a_host_fault_when_the_code_runs() {
    let p = Program::compile(
        "extern pure fn boom(x: i64) -> i64;
fn f(k: i64, x: i64) -> i64 {
    make_static(k);
    return @boom(k) + x;
}
",
    )
    .expect("compiles");
    p.register_host("boom", |_| panic!("boom"))
        .expect("declared");
    match p
        .region("f")
        .expect("region")
        .call(&mut [Arg::from(1i64), Arg::from(2i64)])
    {
        Err(Error::Run(e)) => {
            assert_eq!(e.kind, FaultKind::Host);
            assert!(
                e.message.as_deref().unwrap_or("").contains("panicked"),
                "{e}"
            );
        }
        other => panic!("expected a host fault, got {other:?}"),
    }
}

/// With a call depth far beyond what the stack holds, the native-stack bound stops the
/// recursion with a call-depth fault, on a thread with a 2 MiB stack.
#[test]
fn the_native_stack_is_bounded_whatever_max_depth_says() {
    let run = || {
        let opts = RuntimeOptions {
            max_depth: u64::MAX,
            max_stack: 256 << 10,
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with(
            "rec.dyc",
            "fn down(n: i64) -> i64 {\n    if n == 0 { return 0; }\n    return down(n - 1) + 1;\n}\n",
            opts,
        )
        .expect("compiles");
        let down = p.region("down").expect("region");
        let r = down.call(&mut [Arg::from(10i64)]).expect("runs");
        assert_eq!(r.and_then(|c| c.as_i64()), Some(10));
        match down.call(&mut [Arg::from(100_000_000i64)]) {
            Err(Error::Run(e)) => assert_eq!(e.kind, FaultKind::CallDepthExceeded, "{e}"),
            other => panic!("expected a call-depth fault, got {other:?}"),
        }
    };
    on_small_stack(run);
}

/// A flat chain of 100,000 terms compiles, specializes and runs on a thread with a 2 MiB
/// stack (Rust's default for spawned threads), with the dynamic operand first or last and
/// with a static operand that makes the chain fold; 200 nested parentheses compile too.
#[test]
fn long_flat_chains_compile_on_a_small_stack() {
    let run = || {
        let terms = 100_000;
        let chains = [
            format!("x{}", " + 1".repeat(terms - 1)),
            format!("{}x", "1 + ".repeat(terms - 1)),
            format!("x{}", " + k".repeat(terms - 1)),
            format!("{}x{}", "(".repeat(200), ")".repeat(200)),
        ];
        let expect = [
            terms as i64 + 4,
            terms as i64 + 4,
            5 + 3 * (terms as i64 - 1),
            5,
        ];
        for (chain, want) in chains.iter().zip(expect) {
            let src = format!(
                "fn f(k: i64, x: i64) -> i64 {{\n    make_static(k);\n    return {chain};\n}}\n"
            );
            // Cranelift's own verifier and optimizer on 100,000 instructions would dominate
            // the test's time; they are not what it is about.
            let opts = RuntimeOptions {
                jit: dyc_stitcher::jit::JitOptions {
                    optimize: false,
                    verify: false,
                },
                ..RuntimeOptions::default()
            };
            let p = Program::compile_with("chain.dyc", &src, opts).expect("compiles");
            let f = p.region("f").expect("region");
            let r = f
                .call(&mut [Arg::from(3i64), Arg::from(5i64)])
                .expect("runs");
            assert_eq!(r.and_then(|c| c.as_i64()), Some(want), "{}", &chain[..20]);
            let g = f.generic().expect("generic code");
            let r = g
                .call(&mut [Arg::from(3i64), Arg::from(5i64)])
                .expect("runs");
            assert_eq!(r.and_then(|c| c.as_i64()), Some(want));
        }
    };
    on_small_stack(run);
}

//! The static compiler on large inputs of every shape, on a thread with a 2 MiB stack (Rust's
//! default for spawned threads, where a service compiles): each source compiles through
//! `Program::compile`, a region is made for `f`, and its generic and specialized code
//! agree with the reference interpreter; sources nested beyond the parser's limit are one
//! located error. Timing is the benchmark's business
//! (`benches/compile.rs`); here a quadratic pass shows as a slow test and a recursion on
//! the input as a stack overflow.

use dyc::interp::{Interpreter, Memory, Val};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Error, Program, RuntimeOptions};

mod common;
#[allow(dead_code)]
#[path = "../benches/sources.rs"]
mod sources;

use common::on_small_stack;

/// Sizes large enough that a recursion on the input would overflow 2 MiB, small enough
/// for Cranelift (which compiles the generic code) to stay quick.
fn size(shape: &str) -> usize {
    match shape {
        "untouched-variable" => 30_000,
        "flat-sum-left" | "flat-sum-right" => 100_000,
        "loop-nest" | "many-functions" => 1_000,
        // Four blocks a level: within the specializer's default budget of blocks.
        "nested-gotos" => 4_000,
        _ => 5_000,
    }
}

#[test]
fn every_shape_compiles_and_runs_on_a_small_stack() {
    on_small_stack(|| {
        let opts = RuntimeOptions {
            jit: dyc_stitcher::jit::JitOptions {
                optimize: false,
                verify: false,
            },
            ..RuntimeOptions::default()
        };
        for (shape, make) in sources::SHAPES {
            let n = size(shape);
            let src = make(n);
            let p = Program::compile_with("shape.dyc", &src, opts).unwrap_or_else(|e| {
                panic!("{shape}: {e}");
            });
            let f = p.region("f").unwrap_or_else(|e| panic!("{shape}: {e}"));
            let m = p.module();
            let id = m.func_by_name("f").expect("f");
            for x in [-1i64, 2, 3] {
                let want = Interpreter::new(m)
                    .call(
                        id,
                        &[Val::Scalar(Const::Int(Scalar::I64, x as u64))],
                        &mut Memory::default(),
                    )
                    .unwrap_or_else(|e| panic!("{shape}: interpreter: {e:?}"));
                let Some(Val::Scalar(Const::Int(_, want))) = want else {
                    panic!("{shape}: no integer result");
                };
                let want = want as i64;
                if let Some(direct) = sources::expected(shape, n, x) {
                    assert_eq!(want, direct, "{shape}: the interpreter for x = {x}");
                }
                let generic = f.generic().expect("generic code");
                let got = generic.call(&mut [Arg::from(x)]).expect("runs");
                assert_eq!(got.and_then(|c| c.as_i64()), Some(want), "{shape}, x = {x}");
                // In these shapes `a` is static (a constant changed by constants) across
                // thousands of dynamic merges, each a specialization point on its value:
                // the specializer's budget ends that with a clean error. Every other shape
                // must run specialized.
                let merges_on_static = ["if-chain", "untouched-variable", "gotos"];
                match f.call(&mut [Arg::from(x)]) {
                    Ok(got) => {
                        assert_eq!(got.and_then(|c| c.as_i64()), Some(want), "{shape}, x = {x}")
                    }
                    Err(Error::Budget { .. }) if merges_on_static.contains(&shape) => {}
                    Err(e) => panic!("{shape}, x = {x}: {e}"),
                }
            }
        }
    });
}

/// Sources nested beyond the parser's nesting limit (256 levels) are one located error, not a stack
/// overflow; nesting within the limit compiles. Run on a thread with a 2 MiB stack, the
/// default of spawned threads, where a service compiles.
#[test]
fn deep_nesting_is_a_located_error() {
    let run = || {
        let n = 100_000;
        let parens = format!(
            "fn f(x: i64) -> i64 {{ return {}x{}; }}",
            "(".repeat(n),
            ")".repeat(n)
        );
        let nots = format!("fn f(x: bool) -> bool {{ return {}x; }}", "!".repeat(n));
        let negs = format!("fn f(x: i64) -> i64 {{ return {}x; }}", "- ".repeat(n));
        let ifs = format!(
            "fn f(x: i64) -> i64 {{ {} return x; {} return x; }}",
            "if x > 0 { ".repeat(20_000),
            "} ".repeat(20_000)
        );
        for (what, src) in [
            ("parentheses", parens),
            ("!", nots),
            ("-", negs),
            ("if", ifs),
        ] {
            let d = dyc::lang::compile("deep.dyc", &src).expect_err(what);
            assert_eq!(d.errors.len(), 1, "{what}: {d}");
            let text = d.to_string();
            assert!(
                text.contains("nesting too deep: more than 256 levels")
                    && text.contains("deep.dyc:1:"),
                "{what}: {text}"
            );
            // The snippet of a 100,000-character line is a window around the mark.
            assert!(text.len() < 600, "{what}: {} characters", text.len());
        }
        // Within the limit: 200 nested parentheses, and 200 nested `if`, compile and run.
        let parens = format!(
            "fn f(x: i64) -> i64 {{ return {}x + 1{}; }}",
            "(".repeat(200),
            ")".repeat(200)
        );
        let ifs = format!(
            "fn f(x: i64) -> i64 {{ {} return x + 1; {} return 0; }}",
            "if x > 0 { ".repeat(200),
            "} ".repeat(200)
        );
        for src in [parens, ifs] {
            let m = dyc::lang::compile("ok.dyc", &src).expect("200 levels compile");
            let id = m.func_by_name("f").expect("f");
            let mut mem = Memory::default();
            let x = Val::Scalar(Const::Int(Scalar::I64, 4));
            let r = Interpreter::new(&m).call(id, &[x], &mut mem);
            assert_eq!(
                r.expect("runs"),
                Some(Val::Scalar(Const::Int(Scalar::I64, 5)))
            );
        }
    };
    on_small_stack(run);
}

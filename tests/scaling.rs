//! The static compiler on large inputs of every shape, on a thread with a 2 MiB stack (Rust's
//! default for spawned threads, where a service compiles): each source compiles through
//! `Program::compile`, a region is made for `f`, and its generic and specialized code
//! agree with the reference interpreter. Timing is the benchmark's business
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

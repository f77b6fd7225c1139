//! Differential tests of the compiled code: for every program of `tests/lang` and
//! `examples` and every `// run:` line, the reference interpreter on the original program
//! and the JIT-compiled specialized code (and generic code) agree on results, errors (kind
//! and source position) and the final contents of mutable slices, in every tier and in a
//! version of the stitch tier that moves up to the optimizing tier. Also: many threads
//! specializing and calling one region, an indirect jump dispatching inline over the
//! targets it has seen (and without, when they do not fit a unit's budget), and a runaway
//! specialization ending with the budget error.

mod common;

#[path = "../benches/bytecode.rs"]
#[allow(dead_code)]
mod bench_programs;
#[path = "common/random_bytecode.rs"]
mod random_bytecode;
use random_bytecode::{random_bytecode, Rng};

use std::path::Path;
use std::sync::Arc;

use dyc::interp::{parse_args, ErrorKind, Interpreter, Memory, Val};
use dyc::ir::{Const, Module, Scalar};
use dyc::{
    Arg, Error, Limits, Misses, OnExceeded, Program, RuntimeOptions, Specialized, Tier, Tiers,
};

/// Typed Rust storage for a slice argument.
enum Storage {
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

macro_rules! storage {
    ($($v:ident => $t:ty),*) => {
        impl Storage {
            fn new(elem: Scalar, data: &[Const]) -> Storage {
                match elem {
                    $(Scalar::$v => Storage::$v(data.iter().map(|c| storage!(@get $v c)).collect()),)*
                }
            }
            fn arg(&mut self, mutable: bool) -> Arg<'_> {
                match self {
                    $(Storage::$v(v) => if mutable { Arg::from(&mut v[..]) } else { Arg::from(&v[..]) },)*
                }
            }
            fn consts(&self) -> Vec<Const> {
                match self {
                    $(Storage::$v(v) => v.iter().map(|&x| Const::from(x)).collect(),)*
                }
            }
        }
    };
    (@get F64 $c:ident) => { $c.as_f64().expect("f64") };
    (@get Bool $c:ident) => { $c.as_bool().expect("bool") };
    (@get $v:ident $c:ident) => { $c.as_u64().expect("int") as _ };
}

storage!(I8 => i8, I16 => i16, I32 => i32, I64 => i64, U8 => u8, U16 => u16, U32 => u32, U64 => u64, F64 => f64, Bool => bool);

fn jit_hosts(p: &Program) {
    for (_, e) in p.module().externs.iter() {
        if let Some(&(name, f)) = common::HOSTS.iter().find(|(n, _)| *n == e.name) {
            p.register_host(name, f).expect("declared");
        }
    }
}

/// A comparable outcome: result or error kind and position, and memory after.
fn interp_outcome(r: Result<Option<Val>, dyc::interp::RuntimeError>, mem: &Memory) -> String {
    let bufs: Vec<Vec<Const>> = mem.bufs.iter().map(|b| b.data.clone()).collect();
    match r {
        Ok(Some(Val::Scalar(c))) => format!("= {c:?} / {bufs:?}"),
        Ok(None) => format!("= () / {bufs:?}"),
        Ok(Some(v)) => format!("= {v:?} / {bufs:?}"),
        Err(e) => format!("-> {} at {} / {bufs:?}", e.kind.name(), e.loc),
    }
}

fn jit_outcome(r: Result<Option<Const>, Error>, stores: &[Storage]) -> String {
    let bufs: Vec<Vec<Const>> = stores.iter().map(Storage::consts).collect();
    match r {
        Ok(Some(c)) => format!("= {c:?} / {bufs:?}"),
        Ok(None) => format!("= () / {bufs:?}"),
        Err(Error::Run(e)) => format!("-> {} at {} / {bufs:?}", e.kind.name(), e.loc),
        Err(e) => format!("error: {e}"),
    }
}

const FUEL: u64 = 1_000_000;

fn options() -> RuntimeOptions {
    RuntimeOptions {
        fuel: Some(FUEL),
        max_depth: 199,
        ..RuntimeOptions::default()
    }
}

/// Runs `name(args_text)` on the interpreter and on compiled code (specialized through the
/// region cache `calls` times, each on fresh copies of the arguments, and generic); returns
/// (interpreter, specialized, generic) outcomes, or `None` when the interpreter ran out of
/// fuel. Specialized calls that disagree with each other are shown one after the other.
fn compare(
    m: &Module,
    p: &Program,
    name: &str,
    args_text: &str,
    calls: usize,
) -> Option<(String, String, String)> {
    let id = m.func_by_name(name)?;
    let mut mem = Memory::default();
    let args = parse_args(&m.funcs[id].sig.params, args_text, &mut mem).ok()?;
    let original = mem.clone();
    let mut interp = Interpreter::new(m);
    interp.hosts = common::hosts();
    interp.fuel = FUEL;
    interp.max_depth = 200;
    let r = interp.call(id, &args, &mut mem);
    if matches!(&r, Err(e) if e.kind == ErrorKind::FuelExhausted) {
        return None;
    }
    let expected = interp_outcome(r, &mem);
    let region = p.region(name).ok()?;
    let run = |generic: bool| {
        let mut stores: Vec<Storage> = original
            .bufs
            .iter()
            .map(|b| Storage::new(b.elem, &b.data))
            .collect();
        let mutable: Vec<bool> = args
            .iter()
            .filter_map(|a| match a {
                Val::Slice(s) => Some(s.mutable),
                Val::Scalar(_) | Val::Array(_) => None,
            })
            .collect();
        let r = {
            let mut slots = stores.iter_mut().zip(&mutable);
            let mut jargs: Vec<Arg> = args
                .iter()
                .map(|a| match a {
                    Val::Scalar(c) => Arg::Scalar(*c),
                    Val::Slice(_) => {
                        let (s, &mutable) = slots.next().expect("one storage per slice");
                        s.arg(mutable)
                    }
                    Val::Array(_) => unreachable!("no parameter is an array"),
                })
                .collect();
            if generic {
                region.generic().and_then(|g| g.call(&mut jargs))
            } else {
                region.call(&mut jargs)
            }
        };
        jit_outcome(r, &stores)
    };
    let mut outcomes: Vec<String> = (0..calls).map(|_| run(false)).collect();
    outcomes.dedup();
    Some((expected, outcomes.join(" then "), run(true)))
}

#[test]
fn compiled_code_agrees_with_the_interpreter_on_every_test_program() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = common::files(&root.join("tests/lang"), "dyc");
    files.extend(common::files(&root.join("examples"), "dyc"));
    let mut compared = 0;
    let mut lazy_compared = 0;
    let mut tier_ups = 0;
    let mut failures = Vec::new();
    // Runs every `// run:` line of `src` on module `m` under `opts`; returns the number
    // compared and records disagreements, labelled `what`.
    let mut check = |m: &Module, src: &str, opts: RuntimeOptions, what: &str, path: &Path| {
        let calls = match opts.tiers.hot_calls {
            1 => 3,
            _ => 1,
        };
        let p = Program::from_module(m.clone(), opts).expect("program");
        jit_hosts(&p);
        let mut n = 0;
        let mut names = std::collections::BTreeSet::new();
        for call in common::directive(src, "//", "run:") {
            let (name, rest) = call.split_once('(').expect("run line");
            let args_text = rest.strip_suffix(')').expect("run line");
            let Some((expected, spec, generic)) = compare(m, &p, name.trim(), args_text, calls)
            else {
                continue;
            };
            n += 1;
            names.insert(name.trim().to_string());
            if spec != expected || generic != expected {
                failures.push(format!(
                    "{}: {call} ({what})\n  interpreter: {expected}\n  specialized: {spec}\n  generic:     {generic}",
                    path.display()
                ));
            }
        }
        for name in names {
            tier_ups += p.region(&name).map_or(0, |r| r.stats().tier_ups);
        }
        n
    };
    for path in files {
        let src = std::fs::read_to_string(&path).expect("readable");
        let Ok(m) = dyc::lang::compile("t.dyc", &src) else {
            continue;
        };
        // Every tier: specializations in the optimizing tier, the quick tier and the
        // stitch tier.
        let (quick, stitch) = (in_tier(Tier::Quick), in_tier(Tier::Stitch));
        compared += check(
            &m,
            &src,
            in_tier(Tier::Optimizing),
            "optimizing tier",
            &path,
        );
        compared += check(&m, &src, quick, "quick tier", &path);
        compared += check(&m, &src, stitch, "stitch tier", &path);
        // The stitch tier with every stencil a unit asks for made before it is copied, so
        // that no copy falls back to a stencil made for any operands.
        let made = RuntimeOptions {
            stencil_misses: Misses::Make,
            ..in_tier(Tier::Stitch)
        };
        compared += check(&m, &src, made, "stitch tier, stencils made", &path);
        // A version of the stitch tier found hot at its second call: made again in the
        // optimizing tier with what its promotions saw dispatched inline, which serves the
        // third.
        let moving_up = RuntimeOptions {
            tiers: Tiers {
                hot_calls: 1,
                ..in_tier(Tier::Stitch).tiers
            },
            ..options()
        };
        compared += check(&m, &src, moving_up, "stitch tier moving up", &path);
        // The same program under each lazy policy, when its first annotation gives no
        // policy (the region's laziness is the first one given).
        for policy in ["lazy", "specialize_lazy", "loop_specialize_lazy"] {
            let Some(lazy) = lazy_variant(&src, policy) else {
                continue;
            };
            if let Ok(lm) = dyc::lang::compile("t.dyc", &lazy) {
                lazy_compared += check(&lm, &src, in_tier(Tier::Optimizing), policy, &path);
                lazy_compared += check(&lm, &src, stitch, policy, &path);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compared >= 1200, "only {compared} runs compared");
    assert!(tier_ups >= 150, "only {tier_ups} versions moved up");
    assert!(
        lazy_compared >= 600,
        "only {lazy_compared} lazy runs compared"
    );
}

/// `src` with `: policy` added to its first `make_static`, if that gives no policy.
fn lazy_variant(src: &str, policy: &str) -> Option<String> {
    let at = src.find("make_static(")?;
    let close = at + src[at..].find(')')?;
    if src[at..close].contains(':') {
        return None;
    }
    Some(format!("{}: {policy}{}", &src[..close], &src[close..]))
}

/// [`options`] with region entries specialized in `tier` (no tiering up).
fn in_tier(tier: Tier) -> RuntimeOptions {
    RuntimeOptions {
        tiers: Tiers {
            first: tier,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        ..options()
    }
}

#[test]
fn threads_specialize_and_call_one_region_with_overlapping_keys() {
    for tier in [Tier::Optimizing, Tier::Stitch] {
        threads_on_overlapping_keys(tier);
    }
}

fn threads_on_overlapping_keys(tier: Tier) {
    let p = bytecode(in_tier(tier));
    let region = Arc::new(p.region("run").expect("region"));
    // Programs sum 1..n (n >= 1), with a trailing word that makes four distinct keys.
    let sum = |tag: i64| -> Vec<i64> {
        vec![
            1, 1, 0, 0, 1, 2, 1, 0, 1, 3, 1, 0, 2, 1, 1, 2, 2, 2, 2, 3, 5, 0, 2, 28, 6, 12, 0, 0,
            0, 1, 0, 0, tag,
        ]
    };
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let region = region.clone();
            std::thread::spawn(move || {
                for k in 0..40i64 {
                    // Four distinct programs shared by all threads (they differ in a word
                    // the interpreter never reads), and distinct dynamic inputs.
                    let prog = sum((k + t) % 4);
                    let n = 10 * (k % 7) + t + 1;
                    let r = region
                        .call(&mut [
                            Arg::from(&prog[..]),
                            Arg::from(n),
                            Arg::from(&mut [0i64][..]),
                        ])
                        .expect("runs")
                        .and_then(|c| c.as_i64());
                    assert_eq!(r, Some(n * (n + 1) / 2), "{tier:?}: thread {t}, n = {n}");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread finished");
    }
    assert_eq!(region.cached(), 4);
}

#[test]
fn promotions_stitch_targets_lazily_from_many_threads() {
    for tier in [Tier::Optimizing, Tier::Stitch] {
        promotions_from_many_threads(tier);
    }
}

/// Threads calling a region whose first-tier version promotes at an indirect jump, while
/// the version moves up (made again from what its promotions saw, while other threads
/// still run it and stitch continuations): every call gets the right result, and the
/// version moved up once.
#[test]
fn a_version_moves_up_while_threads_promote_through_it() {
    let mut opts = options();
    opts.tiers = Tiers {
        first: Tier::Stitch,
        hot_calls: 40,
        hot_time: std::time::Duration::MAX,
    };
    let p = bytecode(opts);
    let region = Arc::new(p.region("run").expect("region"));
    let code = Arc::new(dispatch_program(6));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (region, code) = (region.clone(), code.clone());
            std::thread::spawn(move || {
                for k in 0..40i64 {
                    let n = 1 + (k * 7 + t) % 13;
                    let r = region.call(&mut [
                        Arg::from(&code[..]),
                        Arg::from(n),
                        Arg::from(&mut [0i64][..]),
                    ]);
                    let want = (0..n).map(|i| i % 6 + 1).sum::<i64>();
                    assert_eq!(r.expect("runs").and_then(|c| c.as_i64()), Some(want));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread finished");
    }
    let s = region.stats();
    assert_eq!((s.tier_ups, s.versions), (1, 1), "{s}");
}

fn promotions_from_many_threads(tier: Tier) {
    // An indirect jump through a register: each thread jumps to a different target.
    let p = bytecode(in_tier(tier));
    let region = Arc::new(p.region("run").expect("region"));
    // r1 = regs[0] * 8 + 20 (computed dynamically); JMPR r1; from slot 20, eight-slot
    // targets: LOADI r2, 100 + k; HALT r2.
    let prog: Arc<Vec<i64>> = Arc::new({
        let mut v = vec![1, 3, 8, 0, 4, 1, 0, 3, 1, 4, 20, 0, 2, 1, 1, 4, 7, 1, 0, 0];
        for k in 0..6 {
            v.extend([1, 2, 100 + k, 0, 0, 2, 0, 0]);
        }
        v
    });
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (region, prog) = (region.clone(), prog.clone());
            std::thread::spawn(move || {
                for k in 0..30i64 {
                    let target = (k + t) % 6;
                    let r = region.call(&mut [
                        Arg::from(&prog[..]),
                        Arg::from(target),
                        Arg::from(&mut [0i64][..]),
                    ]);
                    assert_eq!(
                        r.expect("runs").and_then(|c| c.as_i64()),
                        Some(100 + target),
                        "{tier:?}: thread {t}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread finished");
    }
}

/// The byte-code example's dispatch loop through `JMPR` over `targets` targets: each
/// iteration jumps to target `i % targets`, which adds `i % targets + 1` to the result.
/// The byte-code interpreter of `examples/bytecode.dyc`, compiled with `opts`.
fn bytecode(opts: RuntimeOptions) -> Program {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/bytecode.dyc"
    ))
    .expect("example");
    Program::compile_with("bytecode.dyc", &src, opts).expect("compiles")
}

fn dispatch_program(targets: i64) -> Vec<i64> {
    let t0 = 48;
    let mut code = vec![
        1, 1, 0, 0, // LOADI r1 0
        1, 2, 0, 0, // LOADI r2 0
        1, 3, targets, 0, // LOADI r3 targets
        1, 4, 8, 0, // LOADI r4 8
        1, 6, t0, 0, // LOADI r6 t0
        5, 1, 0, 28, // top: JLT r1 r0 body
        0, 2, 0, 0, // HALT r2
        12, 5, 1, 3, // body: MOD r5 r1 r3
        4, 5, 5, 4, // MUL r5 r5 r4
        2, 5, 5, 6, // ADD r5 r5 r6
        10, 1, 1, 1, // ADDI r1 r1 1
        7, 5, 0, 0, // JMPR r5
    ];
    for k in 0..targets {
        code.extend([10, 2, 2, k + 1, 6, 20, 0, 0]); // ADDI r2 r2 k+1; JMP top
    }
    code
}

#[test]
fn an_indirect_jump_dispatches_inline_once_its_targets_are_seen() {
    let p = bytecode(options());
    let region = p.region("run").expect("region");
    // Up to 8 targets are dispatched inline; beyond, the others go through the site's cache.
    let mut one = None;
    for targets in [1, 4, 8, 12] {
        let code = dispatch_program(targets);
        let spec = region
            .specialize(&[Arg::from(&code[..])])
            .expect("specializes");
        let expected = |n: i64| (0..n).map(|i| i % targets + 1).sum::<i64>();
        let run = |n: i64| {
            spec.call(&mut [Arg::from(n), Arg::from(&mut [0i64][..])])
                .expect("runs")
                .and_then(|c| c.as_i64())
        };
        assert_eq!(run(3 * targets), Some(expected(3 * targets)), "{targets}");
        // One continuation per target, each stitched once.
        let (units, lazy) = spec.lazy_stats();
        assert_eq!(units, targets as usize, "{targets} targets");
        // Every target's continuation alone has the same shape (`one` blocks, measured
        // with one target); units stitched after the first also hold the continuations of
        // the targets seen before them, dispatched inline, so they are larger.
        let one = *one.get_or_insert(lazy.blocks);
        if targets > 1 {
            assert!(
                lazy.blocks > targets as usize * one,
                "{targets} targets: {} blocks, {one} for one target",
                lazy.blocks
            );
        }
        let bytes = spec.code_bytes();
        assert_eq!(run(1000), Some(expected(1000)), "{targets}");
        assert_eq!(
            spec.lazy_stats().0,
            targets as usize,
            "nothing more is stitched"
        );
        assert_eq!(spec.code_bytes(), bytes);
    }
}

/// A specialization made again from one whose indirect jump has seen its targets
/// dispatches on them inline from its entry: running as far again stitches no unit, in
/// every tier; targets beyond the eight dispatched inline still get units of their own.
/// A region refuses another region's specialization as `seen`.
#[test]
fn a_respecialization_dispatches_inline_from_its_entry_what_its_promotions_saw() {
    // (Also from the stitch tier into the optimizing tier, whose program keeps the
    // register file as values where the stitch tier's has it in memory.)
    let pairs = [
        (Tier::Stitch, Tier::Stitch, 32),
        (Tier::Quick, Tier::Quick, 32),
        (Tier::Optimizing, Tier::Optimizing, 32),
        (Tier::Stitch, Tier::Optimizing, 0),
    ];
    for (tier, again_in, max_array_values) in pairs {
        let p = bytecode(RuntimeOptions {
            max_array_values,
            ..options()
        });
        let region = p.region("run").expect("region");
        for targets in [1, 4, 8, 12] {
            let code = dispatch_program(targets);
            let key = [Arg::from(&code[..])];
            let expected = |n: i64| (0..n).map(|i| i % targets + 1).sum::<i64>();
            let run = |spec: &Specialized, n: i64| {
                spec.call(&mut [Arg::from(n), Arg::from(&mut [0i64][..])])
                    .expect("runs")
                    .and_then(|c| c.as_i64())
            };
            let first = region.specialize_in(&key, tier).expect("specializes");
            assert_eq!(run(&first, 3 * targets), Some(expected(3 * targets)));
            assert_eq!(first.lazy_stats().0, targets as usize, "{tier:?}");
            let again = region.respecialize(&key, again_in, &first).expect("again");
            assert!(again.stats().blocks > first.stats().blocks, "{tier:?}");
            assert_eq!(run(&again, 1000), Some(expected(1000)), "{tier:?}");
            let beyond = (targets - 8).max(0) as usize;
            assert_eq!(again.lazy_stats().0, beyond, "{tier:?}, {targets} targets");
        }
    }
    let p = bytecode(options());
    let region = p.region("run").expect("region");
    let other = bytecode(options());
    let foreign = other
        .region("run")
        .expect("region")
        .specialize(&[Arg::from(&dispatch_program(2)[..])])
        .expect("specializes");
    let code = dispatch_program(2);
    match region.respecialize(&[Arg::from(&code[..])], Tier::Stitch, &foreign) {
        Err(Error::Arguments(m)) => assert!(m.contains("not a specialization"), "{m}"),
        r => panic!("{:?}", r.map(|s| s.stats())),
    }
}

/// A first-tier version whose indirect jump has seen its targets moves up to the
/// optimizing tier with them dispatched inline from its entry ([`Region::respecialize`]):
/// the optimizing version stitches no continuation and never calls back into the runtime.
/// So does, once, a version made in the optimizing tier whose promotions stitched units;
/// one whose promotions stitched nothing, and any version of a region without promotion
/// points, stays.
#[test]
fn a_version_moves_up_with_what_its_promotions_saw() {
    for first in [Tier::Stitch, Tier::Quick, Tier::Optimizing] {
        let mut opts = options();
        opts.tiers = Tiers {
            first,
            hot_calls: 3,
            hot_time: std::time::Duration::MAX,
        };
        let p = bytecode(opts);
        let region = p.region("run").expect("region");
        let code = dispatch_program(4);
        for n in [40i64, 41, 42, 43, 44, 45] {
            let mut mem = [0i64];
            let args = &mut [Arg::from(&code[..]), Arg::from(n), Arg::from(&mut mem[..])];
            let r = region.call(args).expect("runs").and_then(|c| c.as_i64());
            assert_eq!(r, Some((0..n).map(|i| i % 4 + 1).sum::<i64>()), "{first:?}");
        }
        let s = region.stats();
        assert_eq!((s.tier_ups, s.versions), (1, 1), "{first:?}: {s}");
        let sites = region.site_stats();
        assert!(!sites.is_empty(), "{first:?}");
        for site in sites {
            assert_eq!((site.stitched, site.calls), (0, 0), "{first:?}: {site:?}");
        }
        // Many more calls: nothing moves again.
        for n in 0..20i64 {
            let mut mem = [0i64];
            let args = &mut [Arg::from(&code[..]), Arg::from(n), Arg::from(&mut mem[..])];
            region.call(args).expect("runs");
        }
        assert_eq!(region.stats().tier_ups, 1, "{first:?}");
    }
    // A version of the optimizing tier that stitched no unit (a program without indirect
    // jumps), and a region without promotion points, stay.
    let mut opts = options();
    opts.tiers = Tiers {
        first: Tier::Optimizing,
        hot_calls: 3,
        hot_time: std::time::Duration::MAX,
    };
    let p = bytecode(opts);
    let region = p.region("run").expect("region");
    let code = [1i64, 1, 42, 0, 0, 1, 0, 0]; // LOADI r1 42; HALT r1
    for _ in 0..10 {
        let mut mem = [0i64];
        let args = &mut [
            Arg::from(&code[..]),
            Arg::from(0i64),
            Arg::from(&mut mem[..]),
        ];
        let r = region.call(args).expect("runs").and_then(|c| c.as_i64());
        assert_eq!(r, Some(42));
    }
    assert_eq!(region.stats().tier_ups, 0);
    let p = Program::compile_with(
        "k.dyc",
        "fn f(k: i64, x: i64) -> i64 { make_static(k); return k * x; }",
        opts,
    )
    .expect("compiles");
    for x in 0..10i64 {
        let r = p
            .region("f")
            .expect("f")
            .call(&mut [Arg::from(3i64), Arg::from(x)]);
        assert_eq!(r.expect("runs").and_then(|c| c.as_i64()), Some(3 * x));
    }
    assert_eq!(p.region("f").expect("f").stats().tier_ups, 0);
}

#[test]
fn a_continuation_too_large_to_dispatch_inline_is_stitched_without() {
    // Each target's continuation is about 20 block copies: with a budget of 60 per unit,
    // the unit for the fourth target cannot hold the continuations of all four inline.
    let mut opts = options();
    opts.budget.max_blocks = 60;
    let p = bytecode(opts);
    let region = p.region("run").expect("region");
    let code = dispatch_program(6);
    let spec = region
        .specialize(&[Arg::from(&code[..])])
        .expect("specializes");
    for n in [6, 100] {
        let r = spec
            .call(&mut [Arg::from(n), Arg::from(&mut [0i64][..])])
            .expect("runs")
            .and_then(|c| c.as_i64());
        assert_eq!(r, Some((0..n).map(|i| i % 6 + 1).sum::<i64>()));
    }
    assert_eq!(spec.lazy_stats().0, 6);
    // Made again with the six targets seen, its entry holds them inline (their
    // continuations share its loop); with a budget of 40 it cannot, and is stitched
    // without them, but the first continuation unit holds them all.
    for (max_blocks, inline) in [(60, true), (40, false)] {
        let mut opts = options();
        opts.budget.max_blocks = max_blocks;
        let p = bytecode(opts);
        let region = p.region("run").expect("region");
        let key = [Arg::from(&code[..])];
        let run = |spec: &Specialized, n: i64| {
            let r = spec.call(&mut [Arg::from(n), Arg::from(&mut [0i64][..])]);
            assert_eq!(
                r.expect("runs").and_then(|c| c.as_i64()),
                Some((0..n).map(|i| i % 6 + 1).sum::<i64>())
            );
        };
        let spec = region.specialize(&key).expect("specializes");
        run(&spec, 6);
        let again = region
            .respecialize(&key, Tier::Optimizing, &spec)
            .expect("specializes");
        run(&again, 100);
        let (blocks, units) = (again.stats().blocks, again.lazy_stats().0);
        match inline {
            true => assert!(blocks > spec.stats().blocks && units == 0, "{blocks}"),
            false => assert!(
                blocks == spec.stats().blocks && units == 1,
                "{blocks} {units}"
            ),
        }
    }
}

#[test]
fn runaway_specialization_ends_with_the_budget_error_or_falls_back_to_generic_code() {
    let src = "fn spin(x: i64) -> i64 {\n    var i = 0;\n    make_static(i);\n    loop {\n        i = i + 1;\n        if x == i { return i; }\n    }\n}\n";
    let opts = RuntimeOptions {
        limits: Limits {
            on_exceeded: OnExceeded::Error,
            ..Limits::default()
        },
        ..RuntimeOptions::default()
    };
    let p = Program::compile_with("spin.dyc", src, opts).expect("compiles");
    let r = p
        .region("spin")
        .expect("region")
        .call(&mut [Arg::from(5i64)]);
    match r {
        Err(e @ Error::Budget { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("budget exceeded") && m.contains(", line "),
                "{m}"
            );
        }
        other => panic!("expected the budget error, got {other:?}"),
    }
    // By default the key whose specialization ran out of budget runs the generic code,
    // and keeps doing so without specializing again.
    let p = Program::compile(src).expect("compiles");
    let spin = p.region("spin").expect("region");
    for _ in 0..3 {
        let r = spin.call(&mut [Arg::from(5i64)]).expect("runs");
        assert_eq!(r.and_then(|c| c.as_i64()), Some(5));
    }
    let s = spin.stats();
    assert_eq!(
        (s.misses, s.hits, s.fallbacks, s.specializations),
        (1, 2, 1, 0),
        "{s}"
    );
}

/// A promotion whose continuation unrolls a dynamic loop without end (the promoted
/// variable changes on every iteration): the call that stitches it fails with the budget
/// error, whatever `on_exceeded` says (the code before it ran, and may have written to a
/// slice); by default the key then runs the generic code, which gives the interpreter's
/// results at once, and the same unit is not stitched again; under `OnExceeded::Error`
/// every call returns the error.
#[test]
fn a_promotion_over_budget_fails_its_call_and_its_key_moves_to_generic_code() {
    let src = "fn shrink(a: [mut i64]) -> i64 {
        var n = len(a);
        var again = true;
        while again {
            again = false;
            var i = 1;
            while i < n {
                if a[i - 1] > a[i] {
                    make_static(n);
                    let t = a[i];
                    a[i] = a[i - 1];
                    a[i - 1] = t;
                    again = true;
                }
                i = i + 1;
            }
            n = n - 1;
        }
        return n;
    }";
    let budget_error = |r: Result<Option<Const>, Error>| match r {
        Err(Error::Run(e)) if e.is_budget() => e.to_string(),
        other => panic!("expected the budget error, got {other:?}"),
    };
    for tier in [Tier::Stitch, Tier::Optimizing] {
        let p = Program::compile_with("shrink.dyc", src, in_tier(tier)).expect("compiles");
        let region = p.region("shrink").expect("region");
        let mut v = [3i64, 1, 2];
        let m = budget_error(region.call(&mut [Arg::from(&mut v[..])]));
        assert!(m.contains(", line "), "{m}");
        for _ in 0..3 {
            let mut v = vec![3i64, 1, 2];
            let r = region.call(&mut [Arg::from(&mut v[..])]).expect("runs");
            assert_eq!((r, v), (Some(Const::from(1i64)), vec![1, 2, 3]));
        }
        let s = region.stats();
        assert_eq!(
            (s.misses, s.hits, s.fallbacks, s.specializations),
            (1, 3, 1, 1),
            "{tier:?}: {s}"
        );
        let opts = RuntimeOptions {
            limits: Limits {
                on_exceeded: OnExceeded::Error,
                ..Limits::default()
            },
            ..in_tier(tier)
        };
        let p = Program::compile_with("shrink.dyc", src, opts).expect("compiles");
        let region = p.region("shrink").expect("region");
        for _ in 0..2 {
            let mut v = [2i64, 1];
            budget_error(region.call(&mut [Arg::from(&mut v[..])]));
        }
        assert_eq!(region.stats().fallbacks, 0);
    }
}

#[test]
fn strength_reduced_divisions_agree_with_the_interpreter() {
    let src = "
        fn d8(x: i8) -> i8 { return x / 4 + x % 4 * 3 + x / 64 + x % 64 * 5 + x / 2 - x % 2; }
        fn d32(x: i32) -> i32 { return x / 2 + x / 1024 + x % 8 + x % 2 * 7 + x % 1 + x / 128 * x % 128; }
        fn d16(x: i16) -> i16 { return x / 32 + x % 64 * 3 - x / 16384 + x % 2 * 9 - x / 2; }
        fn du(x: u16) -> u16 { return x / 8 + x % 16 + x * 32; }
        fn d64(x: i64) -> i64 {
            return x / 4611686018427387904 + x / 16 * 3 + x % 1073741824 * 11 + x % 2;
        }
    ";
    let m = dyc::lang::compile("div.dyc", src).expect("compiles");
    let mut values: Vec<i64> = (-300..300).collect();
    values.extend([
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        i64::MAX - 1,
        -(1 << 40) - 3,
        1 << 40,
    ]);
    // (The stitch tier makes a signed division or remainder by 2 to 128 with one stencil
    // of shifts; the optimizing tier gets it rewritten into shifts and adds.)
    // (The stitch tier also with every stencil made, so that none is a variant made ahead.)
    let made = RuntimeOptions {
        stencil_misses: Misses::Make,
        ..in_tier(Tier::Stitch)
    };
    for (tier, opts) in [
        (Tier::Stitch, in_tier(Tier::Stitch)),
        (Tier::Stitch, made),
        (Tier::Optimizing, in_tier(Tier::Optimizing)),
    ] {
        let p = Program::from_module(m.clone(), opts).expect("program");
        for name in ["d8", "d16", "d32", "du", "d64"] {
            let id = m.func_by_name(name).expect("function");
            let region = p.region(name).expect("region");
            let t = m.funcs[id].sig.params[0].scalar().expect("scalar");
            for &x in &values {
                let c = dyc_templates::semantics::int(t, x as u64);
                let mut interp = Interpreter::new(&m);
                let expected = interp
                    .call(id, &[Val::Scalar(c)], &mut Memory::default())
                    .expect("runs");
                let got = region.call(&mut [Arg::Scalar(c)]).expect("runs");
                assert_eq!(expected, got.map(Val::Scalar), "{tier:?} {name}({x})");
            }
        }
    }
}

/// Values of a region's entry block that later blocks read without their being passed to
/// them (unit invariants: its parameters, what it computes from them and keeps with
/// `make_dynamic`). In the stitch tier, a comparison among them that a branch tests was
/// fused into the branch and never stored (`f`, `g`); and a loop's parameter whose first
/// value was one of them was given its frame word, so the loop's jumps back overwrote it
/// (`h`: `x` after the loop was the loop's last `p`; `k`: the same with a computed
/// value). Every tier returns what the interpreter does.
#[test]
fn the_values_of_a_units_first_block_keep_their_words() {
    let src = "
        fn f(x: i32) -> bool {
            let c = x != 7;
            make_dynamic(c);
            if c {
                return c;
            }
            return true;
        }
        fn g(x: i64, y: i64) -> i64 {
            let lt = x < y;
            make_dynamic(lt);
            var r = 0;
            if lt {
                r = 1;
            }
            if lt {
                r = r + 10;
            }
            return r;
        }
        fn h(x: i64, n: i64) -> i64 {
            var p = x;
            var i = 0;
            while i < n {
                p = p + 1;
                i += 1;
            }
            return p * 1000 + x;
        }
        fn k(x: i64, n: i64) -> i64 {
            let c = x + 1;
            make_dynamic(c);
            var p = c;
            var i = 0;
            while i < n {
                p = p + 1;
                i += 1;
            }
            return p * 1000 + c;
        }
    ";
    let m = dyc::lang::compile("inv.dyc", src).expect("compiles");
    for tier in [Tier::Stitch, Tier::Quick, Tier::Optimizing] {
        let p = Program::from_module(m.clone(), in_tier(tier)).expect("program");
        for (name, args) in [
            ("f", vec![5i64, 7, -1]),
            ("g", vec![-3, 0, 9]),
            ("h", vec![5, 0, -4]),
            ("k", vec![5, 0, -4]),
        ] {
            let id = m.func_by_name(name).expect("function");
            let region = p.region(name).expect("region");
            let params = &m.funcs[id].sig.params;
            for &x in &args {
                let vals: Vec<Val> = params
                    .iter()
                    .enumerate()
                    .map(|(k, t)| {
                        let v = if k == 0 { x } else { 2 };
                        Val::Scalar(dyc_templates::semantics::int(
                            t.scalar().expect("int"),
                            v as u64,
                        ))
                    })
                    .collect();
                let expected = Interpreter::new(&m)
                    .call(id, &vals, &mut Memory::default())
                    .expect("runs");
                let s = region.specialize_in(&[], tier).expect("specializes");
                let mut args: Vec<Arg> = vals
                    .iter()
                    .map(|v| match v {
                        Val::Scalar(c) => Arg::Scalar(*c),
                        _ => unreachable!("scalars"),
                    })
                    .collect();
                let got = s.call(&mut args).expect("runs");
                assert_eq!(expected, got.map(Val::Scalar), "{tier:?} {name}({x})");
            }
        }
    }
}

/// A loop with a side entry is copied until it has one entry before specialization, and
/// the specialized code computes what the interpreter does; a state machine whose copies
/// would outgrow the budget is refused with an error at the branch of a side entry.
#[test]
fn loops_with_side_entries_specialize_or_are_refused_clearly() {
    let src = "fn zigzag(start_a: bool, n: i64) -> i64 {
    make_static(start_a);
    var acc = 0;
    if start_a { goto a; } else { goto b; }
a:
    if n == 0 { return acc; }
    acc = acc * 10 + 1;
    n -= 1;
    goto b;
b:
    if n == 0 { return acc; }
    acc = acc * 10 + 2;
    n -= 1;
    goto a;
}
";
    let p = Program::compile(src).expect("compiles");
    let r = p.region("zigzag").expect("region");
    for (start, want) in [(true, 12121), (false, 21212)] {
        let s = r.specialize(&[Arg::from(start)]).expect("specializes");
        let got = s.call(&mut [Arg::from(5i64)]).expect("runs");
        assert_eq!(got, Some(Const::Int(Scalar::I64, want as u64)));
    }
    // Eight states that all branch to each other (seven fit in the budget).
    let mut src = String::from("fn machine(x: i64) -> i64 {\n    var n = 0;\n    goto s1;\n");
    for k in 1..=8 {
        src.push_str(&format!(
            "s{k}:\n    n += 1;\n    if n > 50 {{ return n; }}\n"
        ));
        for j in (1..=8).filter(|&j| j != k) {
            src.push_str(&format!("    if x % {j} == {k} % {j} {{ goto s{j}; }}\n"));
        }
        src.push_str("    return n;\n");
    }
    src.push_str("}\n");
    let p = Program::compile(&src).expect("compiles");
    match p.region("machine") {
        Err(Error::Unsupported(es)) => {
            assert!(es[0].0.is_known(), "{es:?}");
            assert!(es[0].1.contains("entered at its side"), "{es:?}");
        }
        other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
    }
}

/// Specializes `run` of `p` on main-job program `b` in `tier`, runs it (on a smaller input
/// where the program's memory allows), checks the result against the program written in
/// Rust, and returns the specialization.
fn run_main_job(p: &Program, b: &bench_programs::Bench, tier: Tier) -> dyc::Specialized {
    let n = if b.mem > 0 { b.n } else { b.n.min(300) };
    let s = p
        .region("run")
        .expect("region")
        .specialize_in(&[Arg::from(&b.code[..])], tier)
        .expect("specializes");
    let mut mem = vec![0i64; b.mem.max(1)];
    let r = s
        .call(&mut [Arg::from(n), Arg::from(&mut mem[..])])
        .unwrap_or_else(|e| panic!("{} in {tier:?}: {e}", b.name));
    assert_eq!(
        r.and_then(|c| c.as_i64()),
        Some((b.native)(n)),
        "{} in {tier:?}",
        b.name
    );
    s
}

/// The interpreter on the main job's byte-code programs (loops entered through chains of
/// blocks the static dispatch leaves empty, a stack in memory) agrees with the programs
/// written in Rust in every tier.
#[test]
fn the_main_jobs_programs_agree_in_every_tier() {
    let p = bytecode(RuntimeOptions::default());
    for b in bench_programs::benches() {
        for tier in [Tier::Optimizing, Tier::Quick, Tier::Stitch] {
            run_main_job(&p, &b, tier);
        }
    }
}

/// The stitch tier reads the interpreter's registers that a program loads with a
/// constant before its loops (and never changes) as constants, and leaves out those that
/// nothing reads, and merges the handlers of each straight run of byte-codes into one
/// block: every main-job program has some of each, and computes the same with them as
/// without.
#[test]
fn the_stitch_tier_reads_loop_invariant_registers_as_constants() {
    let with = bytecode(RuntimeOptions::default());
    let without = bytecode(RuntimeOptions {
        constant_params: false,
        ..RuntimeOptions::default()
    });
    for b in bench_programs::benches() {
        let counts = [&with, &without].map(|p| {
            let s = run_main_job(p, &b, Tier::Stitch);
            assert_eq!(s.tier(), Tier::Stitch);
            let (entry, lazy) = (s.stats(), s.lazy_stats().1);
            (
                entry.constant_params + lazy.constant_params,
                entry.dead_params + lazy.dead_params,
                entry.merged_blocks + lazy.merged_blocks,
            )
        });
        let c = counts[0];
        assert!(c.0 > 0 && c.1 > 0 && c.2 > 0, "{}: {counts:?}", b.name);
        assert_eq!(counts[1], (0, 0, 0), "{}", b.name);
    }
}

/// The stitch tier records a program's units while recording finds constant or dead
/// parameters (every unit of the interpreter on a main-job program), and past the first
/// units of a program where it finds none (rule sets unrolled in a loop over records),
/// only one unit in every few hundred; the code computes the same either way.
#[test]
fn the_stitch_tier_records_units_while_recording_finds_something() {
    const SRC: &str = "fn score(rules: [i64], recs: [i64]) -> i64 {
        make_static(rules);
        var total = 0;
        var r = 0;
        while r + 2 <= len(recs) {
            var p = 0;
            make_static(p);
            while p + 3 <= len(rules) {
                let v = recs[r + rules@[p]];
                if v < rules@[p + 1] { total += rules@[p + 2]; }
                p += 3;
            }
            r += 2;
        }
        return total;
    }";
    let p = Program::compile(SRC).expect("compiles");
    let region = p.region("score").expect("region");
    let recs = [3i64, 9, 4, 1, 7, 7];
    let mut recorded = Vec::new();
    for i in 0..300i64 {
        let rules = [i % 2, i % 10, i, 1 - i % 2, 5, 1];
        let s = region
            .specialize_in(&[Arg::from(&rules[..])], Tier::Stitch)
            .expect("specializes");
        let st = s.stats();
        assert_eq!((st.constant_params, st.dead_params), (0, 0), "unit {i}");
        if st.merged_blocks > 0 {
            recorded.push(i);
        }
        let want: i64 = recs
            .chunks_exact(2)
            .flat_map(|rec| rules.chunks_exact(3).map(move |r| (rec, r)))
            .map(|(rec, r)| if rec[r[0] as usize] < r[1] { r[2] } else { 0 })
            .sum();
        let got = s.call(&mut [Arg::from(&recs[..])]).expect("runs");
        assert_eq!(got.and_then(|c| c.as_i64()), Some(want), "unit {i}");
    }
    let mut expected: Vec<i64> = (0..32).collect();
    expected.push(256);
    assert_eq!(recorded, expected);

    let p = bytecode(RuntimeOptions::default());
    let b = &bench_programs::benches()[0];
    for i in 0..40 {
        let s = run_main_job(&p, b, Tier::Stitch);
        assert!(s.stats().constant_params > 0, "unit {i}: {:?}", s.stats());
    }
}

/// The stitch tier copies stencils for the byte-code interpreter's units (the entry and
/// every continuation a promotion stitches lazily, each dispatching the targets seen
/// before inline) with no fallback to Cranelift, and its code computes what the optimizing
/// tier's does, faults included.
#[test]
fn the_stitch_tier_makes_the_interpreters_units_by_copying_stencils() {
    let p = bytecode(options());
    let region = p.region("run").expect("region");
    let mut programs: Vec<Vec<i64>> = (1..=6).map(dispatch_program).collect();
    // Division by zero at the fourth instruction.
    programs.push(vec![1, 0, 9, 0, 1, 1, 0, 0, 13, 2, 0, 1, 0, 2, 0, 0]);
    for code in programs {
        let stitched = region
            .specialize_in(&[Arg::from(&code[..])], Tier::Stitch)
            .expect("specializes");
        let optimized = region
            .specialize_in(&[Arg::from(&code[..])], Tier::Optimizing)
            .expect("specializes");
        assert_eq!(stitched.tier(), Tier::Stitch);
        assert!(stitched.stats().stencils > 0, "{:?}", stitched.stats());
        assert_eq!(optimized.stats().stencils, 0);
        for n in [0i64, 1, 5, 40] {
            let run = |s: &dyc::Specialized| {
                s.call(&mut [Arg::from(n), Arg::from(&mut [0i64][..])])
                    .map(|r| r.and_then(|c| c.as_i64()))
                    .map_err(|e| e.to_string())
            };
            assert_eq!(run(&stitched), run(&optimized), "{code:?} on {n}");
        }
        let (units, lazy) = stitched.lazy_stats();
        assert_eq!(units, optimized.lazy_stats().0, "{code:?}");
        if units > 0 {
            assert!(lazy.stencils > 0, "{lazy:?}");
        }
    }
}

/// The interpreter specialized in the stitch tier alone (no tier-up) on random byte-code
/// programs agrees with the same interpreter in plain Rust: interpreter-shaped code (runs
/// of blocks the code falls into, loop heads entered first by falling in and later by back
/// edges, promotions at indirect jumps) that random region programs seldom make. Every
/// other program runs with the register file in memory
/// ([`RuntimeOptions::max_array_values`] 0) rather than as values; every other pair with
/// units that never make a stencil they miss ([`Misses::Fallback`]: they copy the
/// variants made ahead) rather than the default.
#[test]
fn the_stitch_tier_agrees_with_plain_rust_on_random_byte_code() {
    let opts = |max_array_values, stencil_misses| RuntimeOptions {
        tiers: Tiers {
            first: Tier::Stitch,
            hot_calls: u64::MAX,
            hot_time: std::time::Duration::MAX,
        },
        max_array_values,
        stencil_misses,
        ..RuntimeOptions::default()
    };
    let programs = [
        bytecode(opts(32, Misses::Background)),
        bytecode(opts(0, Misses::Background)),
        bytecode(opts(32, Misses::Fallback)),
        bytecode(opts(0, Misses::Fallback)),
    ];
    let regions = programs
        .each_ref()
        .map(|p| p.region("run").expect("region"));
    let cases = common::cases(1000);
    for seed in 0..cases {
        let mut rng = Rng(seed);
        let code = random_bytecode(&mut rng);
        let region = &regions[seed as usize % 4];
        let s = region
            .specialize_in(&[Arg::from(&code[..])], Tier::Stitch)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{code:?}"));
        for n in [0, 3, -5, 11] {
            let want = bench_programs::interpret(&code, n, &mut []);
            let mut mem = [0i64; 1];
            let got = s
                .call(&mut [Arg::from(n), Arg::from(&mut mem[..])])
                .unwrap_or_else(|e| panic!("seed {seed}, n = {n}: {e}\n{code:?}"))
                .and_then(|c| c.as_i64());
            assert_eq!(got, Some(want), "seed {seed}, n = {n}\n{code:?}");
        }
        // Made again with the values its indirect jumps saw dispatched inline from the
        // entry; at every fourth program in the optimizing tier, whose program keeps the
        // register file as values where the stitch tier's had it in memory.
        let tier = [Tier::Stitch, Tier::Optimizing][usize::from(seed % 4 == 1)];
        let again = region
            .respecialize(&[Arg::from(&code[..])], tier, &s)
            .unwrap_or_else(|e| panic!("seed {seed}, again: {e}\n{code:?}"));
        for n in [11, -5, 3, 0] {
            let want = bench_programs::interpret(&code, n, &mut []);
            let mut mem = [0i64; 1];
            let got = again
                .call(&mut [Arg::from(n), Arg::from(&mut mem[..])])
                .unwrap_or_else(|e| panic!("seed {seed}, again, n = {n}: {e}\n{code:?}"))
                .and_then(|c| c.as_i64());
            assert_eq!(got, Some(want), "seed {seed}, again, n = {n}\n{code:?}");
        }
    }
}

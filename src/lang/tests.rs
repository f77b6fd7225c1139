//! Robustness of the front end: random token streams and random mutations of the test
//! programs never make it panic; what still compiles verifies (the front end checks) and
//! runs in the interpreter without internal errors. `DYC_PROPTEST_CASES` cases each
//! (default 1,000).

use super::compile;
use crate::gen::{cases, func, Rng};
use crate::interp::{ErrorKind, Interpreter, Memory, Val};
use crate::ir::{Const, Scalar, Type};

/// The keyword test the parser uses agrees with the keyword list.
#[test]
fn keywords_are_exactly_the_listed_ones() {
    for k in super::parser::KEYWORDS {
        assert!(super::parser::is_keyword(k), "{k}");
    }
    for name in ["x", "fnx", "If", "lenx", "i64", "_", "make", "statics"] {
        assert!(!super::parser::is_keyword(name), "{name}");
    }
}

/// Tokens random streams are made of: the keywords, and names, numbers and punctuation.
fn vocabulary() -> Vec<&'static str> {
    let mut v = super::parser::KEYWORDS.to_vec();
    v.extend([
        "i64",
        "u8",
        "f64",
        "bool",
        "x",
        "y",
        "f",
        "lbl",
        "0",
        "1",
        "-1",
        "255",
        "1.5",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        ",",
        ";",
        ":",
        "=",
        "->",
        "+",
        "-",
        "*",
        "/",
        "%",
        "<",
        "<=",
        "==",
        "&&",
        "||",
        "!",
        "@",
        "cache_all",
        "<<",
    ]);
    v
}

/// Every `.dyc` file under `tests/lang` and `examples`.
fn corpus() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut dirs = vec![root.join("tests/lang"), root.join("examples")];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "dyc") {
                out.push(std::fs::read_to_string(&p).expect("readable"));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 40, "corpus of {} programs", out.len());
    out
}

fn mutate(rng: &mut Rng, text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return String::new();
    }
    match rng.below(4) {
        0 => {
            let a = rng.below(chars.len());
            let b = (a + 1 + rng.below(12)).min(chars.len());
            chars[..a].iter().chain(&chars[b..]).collect()
        }
        1 => {
            let mut lines: Vec<&str> = text.lines().collect();
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            lines.swap(a, b);
            lines.join("\n")
        }
        2 => {
            let mut lines: Vec<&str> = text.lines().collect();
            let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
            let l = lines[a];
            lines.insert(b, l);
            lines.join("\n")
        }
        _ => {
            let at = rng.below(chars.len());
            let tok = format!(" {} ", rng.pick(&vocabulary()));
            chars[..at]
                .iter()
                .copied()
                .chain(tok.chars())
                .chain(chars[at..].iter().copied())
                .collect()
        }
    }
}

/// Runs every function of a compiled module on small arguments.
fn run_all(m: &crate::ir::Module, rng: &mut Rng, what: &str) {
    for (id, f) in m.funcs.iter() {
        let mut mem = Memory::default();
        let args: Vec<Val> = f
            .sig
            .params
            .iter()
            .map(|&p| match p {
                Type::Scalar(s) => Val::Scalar(small(rng, s)),
                Type::Slice { elem, mutable } => {
                    let data = (0..rng.below(6)).map(|_| small(rng, elem)).collect();
                    mem.add(elem, data, mutable)
                }
                Type::Array { .. } => unreachable!("no parameter is an array"),
            })
            .collect();
        let mut interp = Interpreter::new(m);
        interp.hosts = func::hosts();
        for name in ["double", "fail", "observe", "log_value"] {
            interp.hosts.register(name, |_| Ok(None));
        }
        interp.fuel = 5_000;
        interp.max_depth = 30;
        if let Err(e) = interp.call(id, &args, &mut mem) {
            assert!(!matches!(e.kind, ErrorKind::Internal(_)), "{what}: {e}");
        }
    }
}

fn small(rng: &mut Rng, s: Scalar) -> Const {
    match s {
        Scalar::F64 => Const::F64(rng.range(-2, 3) as f64),
        Scalar::Bool => Const::Bool(rng.chance(50)),
        t => crate::semantics::int(t, rng.range(-1, 8) as u64),
    }
}

#[test]
fn random_token_streams_never_panic() {
    for seed in 0..cases(1000) {
        let mut rng = Rng::new(seed);
        let n = 1 + rng.below(60);
        let vocabulary = vocabulary();
        let src: Vec<&str> = (0..n).map(|_| *rng.pick(&vocabulary)).collect();
        let src = src.join(" ");
        if let Ok(m) = compile("random.dyc", &src) {
            run_all(&m, &mut rng, &format!("seed {seed}: {src}"));
        } else if let Err(d) = compile("random.dyc", &src) {
            assert!(!d.errors.is_empty());
            let _ = d.to_string();
        }
    }
}

#[test]
fn mutated_programs_never_panic() {
    let corpus = corpus();
    let mut compiled = 0;
    for seed in 0..cases(1000) {
        let mut rng = Rng::new(seed);
        let mut src = corpus[rng.below(corpus.len())].clone();
        for _ in 0..1 + rng.below(3) {
            src = mutate(&mut rng, &src);
        }
        match compile("mutated.dyc", &src) {
            Ok(m) => {
                compiled += 1;
                run_all(&m, &mut rng, &format!("seed {seed}:\n{src}"));
                // Every fifth one also through compiled code, against the interpreter.
                if seed % 5 == 0 {
                    let _ = crate::api::tests::differential(
                        &m,
                        &mut rng,
                        2,
                        &format!("seed {seed}:\n{src}"),
                    );
                }
            }
            Err(d) => {
                assert!(
                    !d.errors.is_empty(),
                    "seed {seed}: an error without diagnostics"
                );
                let text = d.to_string();
                assert!(
                    !text.contains("internal error"),
                    "seed {seed}: {text}\n{src}"
                );
            }
        }
    }
    // Some mutations must still compile (about one in seven does), or the interpreter half
    // tests nothing.
    assert!(
        compiled * 20 >= cases(1000),
        "only {compiled} mutated programs compiled"
    );
}

/// A flat chain of operators (kept flat in the syntax tree) lowers exactly like the same
/// chain with explicit parentheses (nested nodes): same IR, or the same errors. Random
/// chains mix literals and variables of several types, so literal typing, comparisons and
/// type errors all occur.
#[test]
fn flat_chains_lower_like_nested_operations() {
    // Operators of one precedence level each.
    let levels: [&[&str]; 6] = [
        &["||"],
        &["&&"],
        &["==", "!="],
        &["<", ">="],
        &["+", "-"],
        &["*", "/", "%"],
    ];
    let operands = ["1", "2", "x", "y", "b", "7", "c"];
    let strip = |m: &crate::ir::Module| -> String {
        crate::ir::printer::print_module(m)
            .lines()
            .map(|l| match l.trim_start().strip_prefix('@') {
                Some(rest) => rest.split_once(' ').map_or("", |(_, r)| r).to_string(),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let messages = |d: &super::Diagnostics| -> Vec<String> {
        d.errors.iter().map(|e| e.message.clone()).collect()
    };
    let (mut same_ok, mut same_err) = (0, 0);
    for seed in 0..cases(300) {
        let mut rng = Rng::new(seed);
        let ops = levels[rng.below(levels.len())];
        let n = 3 + rng.below(4);
        let terms: Vec<&str> = (0..n)
            .map(|_| operands[rng.below(operands.len())])
            .collect();
        let syms: Vec<&str> = (1..n).map(|_| ops[rng.below(ops.len())]).collect();
        let mut flat = terms[0].to_string();
        let mut nested = terms[0].to_string();
        for (t, o) in terms[1..].iter().zip(&syms) {
            flat = format!("{flat} {o} {t}");
            nested = format!("({nested} {o} {t})");
        }
        let src = |e: &str| {
            format!(
                "fn f(x: u8, y: i64, b: bool, c: f64) -> bool {{\n    let r = {e};\n    return true;\n}}\n"
            )
        };
        match (
            compile("t.dyc", &src(&flat)),
            compile("t.dyc", &src(&nested)),
        ) {
            (Ok(a), Ok(b)) => {
                assert_eq!(strip(&a), strip(&b), "seed {seed}: {flat}");
                same_ok += 1;
            }
            (Err(a), Err(b)) => {
                assert_eq!(messages(&a), messages(&b), "seed {seed}: {flat}");
                same_err += 1;
            }
            (a, b) => panic!("seed {seed}: {flat}: {:?} vs {:?}", a.is_ok(), b.is_ok()),
        }
    }
    assert!(
        same_ok > 10 && same_err > 10,
        "{same_ok} compiled, {same_err} errors"
    );
}

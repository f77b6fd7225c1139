//! File tests: IR text files under `tests/filetests/` that carry their expectations.
//!
//! A file starts with `; test: KIND` and ends with its expected output as `; check:` lines.
//! The harness parses the file (comments are ignored by the parser), computes the output of
//! KIND, and compares it with the check lines. `DYC_BLESS=1 cargo test --test filetests`
//! rewrites the check lines from the actual output (review the diff before committing).
//!
//! Kinds:
//! - `print`: the printed module (and `print(parse(print(m))) == print(m)`);
//! - `parse-error`: the parse error, `line:col: message`;
//! - `verify`: `ok`, or one line per verifier error (`entity: message`);
//! - `interpret`: one line per `; run: f(args)` line: `f(args) = result` or
//!   `f(args) -> error`, followed by the final contents of mutable slice arguments;
//! - `cfg`, `domtree`, `postdom`, `loops`, `edges`, `topo`, `liveness`: the analysis,
//!   one line per block, loop or edge.
//!
//! Every file that parses is also checked to round-trip, and every analysis file must
//! verify.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use dyc::analysis::cfg::ControlFlowGraph;
use dyc::analysis::dominators::DominatorTree;
use dyc::analysis::edges::EdgeClasses;
use dyc::analysis::liveness::Liveness;
use dyc::analysis::loops::LoopForest;
use dyc::analysis::order::DfsOrder;
use dyc::analysis::postdom::PostDominatorTree;
use dyc::analysis::topo::BlockTopo;
use dyc::interp::{format_val, parse_args, Interpreter, Memory, Val};
use dyc::ir::parser::parse_module;
use dyc::ir::printer::print_module;
use dyc::ir::{Block, Const, Function, Module, Scalar};
use dyc::verifier::verify_module;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|e| e == "ir") {
            out.push(p);
        }
    }
}

/// The text after `; KEY` on every line that has it: one space after the key is dropped,
/// the rest (indentation included) is kept.
fn directive<'a>(src: &'a str, key: &str) -> Vec<&'a str> {
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix(';').map(str::trim_start))
        .filter_map(|l| l.strip_prefix(key))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect()
}

fn names(bs: impl IntoIterator<Item = Block>) -> String {
    bs.into_iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn per_function(m: &Module, out: &mut String, mut f: impl FnMut(&Function, &mut String)) {
    for func in m.funcs.values() {
        if m.funcs.len() > 1 {
            let _ = writeln!(out, "fn {}:", func.name);
        }
        f(func, out);
    }
}

/// A small set of host functions for `interpret` tests.
fn hosts() -> dyc::interp::HostFns {
    let mut h = dyc::interp::HostFns::default();
    h.register("double", |a| match a {
        [Const::Int(Scalar::I64, x)] => Ok(Some(Const::Int(Scalar::I64, x.wrapping_mul(2)))),
        _ => Err("double takes an i64".into()),
    });
    h.register("fail", |_| Err("the host refused".into()));
    h.register("observe", |_| Ok(None));
    h
}

fn run(kind: &str, src: &str) -> Result<String, String> {
    let mut out = String::new();
    if kind == "parse-error" {
        return match parse_module(src) {
            Ok(_) => Err("the file parsed without error".into()),
            Err(e) => Ok(format!("{e}\n")),
        };
    }
    let m = parse_module(src).map_err(|e| format!("parse error: {e}"))?;
    let printed = print_module(&m);
    let again = parse_module(&printed)
        .map_err(|e| format!("printed text does not parse: {e}\n{printed}"))?;
    if print_module(&again) != printed {
        return Err(format!(
            "round trip changed the text:\n{printed}\n---\n{}",
            print_module(&again)
        ));
    }
    if kind == "verify" {
        match verify_module(&m) {
            Ok(()) => out.push_str("ok\n"),
            Err(errs) => {
                for e in errs.0 {
                    let _ = writeln!(out, "{}: {}: {}", e.func, e.entity, e.message);
                }
            }
        }
        return Ok(out);
    }
    if kind == "print" {
        return Ok(printed);
    }
    verify_module(&m).map_err(|e| format!("does not verify:\n{e}"))?;
    match kind {
        "interpret" => {
            for call in directive(src, "run:") {
                let (name, rest) = call
                    .split_once('(')
                    .ok_or(format!("bad run line `{call}`"))?;
                let args_text = rest
                    .strip_suffix(')')
                    .ok_or(format!("bad run line `{call}`"))?;
                let id = m
                    .func_by_name(name.trim())
                    .ok_or(format!("no function `{name}`"))?;
                let mut mem = Memory::default();
                let args = match parse_args(&m.funcs[id].sig.params, args_text, &mut mem) {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = writeln!(out, "{call} -> bad arguments: {e}");
                        continue;
                    }
                };
                let mut interp = Interpreter::new(&m);
                interp.hosts = hosts();
                interp.fuel = 100_000;
                interp.max_depth = 100;
                match interp.call(id, &args, &mut mem) {
                    Ok(Some(v)) => {
                        let _ = write!(out, "{call} = {}", format_val(v, &mem));
                    }
                    Ok(None) => {
                        let _ = write!(out, "{call} = ()");
                    }
                    Err(e) => {
                        let _ = write!(out, "{call} -> {e}");
                    }
                }
                for a in &args {
                    if let Val::Slice(s) = a {
                        if s.mutable {
                            let _ = write!(out, "; after: {}", format_val(*a, &mem));
                        }
                    }
                }
                out.push('\n');
            }
        }
        "cfg" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            for &b in cfg.blocks() {
                let _ = writeln!(
                    out,
                    "{b}: succs [{}] preds [{}]",
                    names(cfg.succs(b)),
                    names(cfg.preds(b))
                );
            }
            let rpo = DfsOrder::compute(cfg.graph(), 0).rpo();
            let _ = writeln!(out, "rpo: {}", names(rpo.into_iter().map(|n| cfg.block(n))));
        }),
        "domtree" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            let dt = DominatorTree::compute(&cfg);
            for &b in cfg.blocks() {
                let _ = match dt.idom(b) {
                    Some(d) => writeln!(out, "{b}: idom {d}"),
                    None if dt.is_reachable(b) => writeln!(out, "{b}: entry"),
                    None => writeln!(out, "{b}: unreachable"),
                };
            }
        }),
        "postdom" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            let pdt = PostDominatorTree::compute(&cfg);
            for &b in cfg.blocks() {
                let _ = match pdt.ipdom(b) {
                    Some(d) => writeln!(out, "{b}: ipdom {d}"),
                    None if pdt.reaches_exit(b) => writeln!(out, "{b}: ipdom exit"),
                    None => writeln!(out, "{b}: never reaches an exit"),
                };
            }
        }),
        "loops" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            let lf = LoopForest::compute(&cfg);
            if lf.loops.is_empty() {
                out.push_str("no loops\n");
            }
            for (i, l) in lf.loops.iter().enumerate() {
                let parent = l.parent.map_or("none".to_string(), |p| format!("loop{p}"));
                let kind = if l.is_irreducible() {
                    format!(
                        "irreducible, entries [{}]",
                        names(l.entries.iter().copied())
                    )
                } else {
                    "reducible".to_string()
                };
                let _ = writeln!(
                    out,
                    "loop{i}: header {} depth {} parent {parent}, {kind}: [{}]",
                    l.header,
                    l.depth,
                    names(l.blocks.iter().copied())
                );
            }
        }),
        "edges" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            for (a, b, k) in EdgeClasses::compute(&cfg).edges {
                let _ = writeln!(out, "{a} -> {b}: {}", k.name());
            }
        }),
        "topo" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            let t = BlockTopo::compute(&cfg);
            for b in t.order() {
                let preds: Vec<Block> = t
                    .order()
                    .into_iter()
                    .filter(|&a| a != b && t.is_predecessor(a, b))
                    .collect();
                let _ = writeln!(
                    out,
                    "{b}: begin {} end {}, after [{}]",
                    t.begin(b).expect("numbered"),
                    t.end(b).expect("numbered"),
                    names(preds)
                );
            }
            let _ = writeln!(out, "ranges exact: {}", t.numbers.ranges_exact());
        }),
        "liveness" => per_function(&m, &mut out, |f, out| {
            let cfg = ControlFlowGraph::compute(f);
            let l = Liveness::compute(f, &cfg);
            let list = |s: &std::collections::BTreeSet<dyc::ir::Value>| {
                s.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            for &b in cfg.blocks() {
                let _ = writeln!(
                    out,
                    "{b}: in [{}] out [{}]",
                    list(l.live_in(b)),
                    list(l.live_out(b))
                );
            }
        }),
        other => return Err(format!("unknown test kind `{other}`")),
    }
    Ok(out)
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut all = Vec::new();
    files(&root, &mut all);
    let bless = std::env::var("DYC_BLESS").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for path in &all {
        let src = std::fs::read_to_string(path).expect("readable test file");
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let Some(kind) = directive(&src, "test:").first().copied() else {
            failures.push(format!("{name}: no `; test:` line"));
            continue;
        };
        let actual = match run(kind, &src) {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let expected: Vec<&str> = directive(&src, "check:");
        let actual_lines: Vec<&str> = actual.lines().collect();
        if expected == actual_lines {
            continue;
        }
        if bless {
            let mut body: String = src
                .lines()
                .filter(|l| !l.trim().starts_with("; check:"))
                .map(|l| format!("{l}\n"))
                .collect();
            while body.ends_with("\n\n") {
                body.pop();
            }
            for l in &actual_lines {
                body.push_str(format!("; check: {l}").trim_end());
                body.push('\n');
            }
            std::fs::write(path, body).expect("writable test file");
        } else {
            failures.push(format!(
                "{name}: output differs\n--- expected\n{}\n--- actual\n{}",
                expected.join("\n"),
                actual
            ));
        }
    }
    println!("{} file tests run", all.len());
    assert!(!all.is_empty(), "no file tests found");
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
}

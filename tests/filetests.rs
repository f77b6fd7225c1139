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
//!   one line per block, loop or edge;
//! - `reducify`: each function after making its loops single-entry (or the error), which
//!   must verify, be reducible, and (with `; run:` lines) compute what the original does;
//! - `plan`: the plan of each function's specialization (`dyc ge`'s second part), on its
//!   blocks as written (forwarding blocks not threaded: these files draw the design notes'
//!   graphs, whose merges are blocks of their own);
//! - `thread`: each function after threading its forwarding blocks, with the number of
//!   blocks removed; it must verify and compute what the original does;
//! - `place`: each function after code placement, with the number of instructions moved;
//!   it must verify and compute what the original does.
//!
//! Every file that parses is also checked to round-trip, and every analysis file must
//! verify.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use dyc::analysis::cfg::ControlFlowGraph;
use dyc::analysis::dominators::DominatorTree;
use dyc::analysis::edges::EdgeClasses;
use dyc::analysis::liveness::Liveness;
use dyc::analysis::loops::LoopForest;
use dyc::analysis::order::DfsOrder;
use dyc::analysis::postdom::PostDominatorTree;
use dyc::analysis::topo::BlockTopo;
use dyc::ir::parser::parse_module;
use dyc::ir::printer::print_module;
use dyc::ir::{Block, Function, Module};
use dyc::verifier::verify_module;

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

/// Checks a module transformed by `pass` against the original `m` (it verifies, and the
/// `; run:` lines give the same output) and prints it with that output.
fn transformed(
    m: &Module,
    r: &Module,
    src: &str,
    pass: &str,
    out: &mut String,
) -> Result<(), String> {
    verify_module(r).map_err(|e| format!("does not verify after {pass}:\n{e}"))?;
    let before = common::run_lines(m, src, ";")?;
    let after = common::run_lines(r, src, ";")?;
    if before != after {
        return Err(format!("results differ:\n{before}---\n{after}"));
    }
    out.push_str(&print_module(r));
    out.push_str(&after);
    Ok(())
}

/// Runs `pass` on every function of `m` (a line each with what it counted, as `what`),
/// then checks and prints the result as [`transformed`] does.
fn counted_pass(
    m: &Module,
    src: &str,
    pass_name: &str,
    what: &str,
    pass: impl Fn(&mut Function) -> usize,
    out: &mut String,
) -> Result<(), String> {
    let mut r = m.clone();
    for f in r.funcs.values_mut() {
        let n = pass(f);
        let _ = writeln!(out, "; {}: {n} {what}", f.name);
    }
    transformed(m, &r, src, pass_name, out)
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
        "interpret" => out = common::run_lines(&m, src, ";")?,
        "plan" => {
            for (id, _) in m.funcs.iter() {
                let prep = dyc::ge::Prepare { thread: false };
                let ge = dyc::ge::build_with(&m, id, dyc::bta::Mode::Specialize, prep)
                    .map_err(|e| e.to_string())?;
                out.push_str(&dyc_stitcher::ge::print_plan(&ge.program));
            }
        }
        "thread" => counted_pass(
            &m,
            src,
            "threading",
            "blocks removed",
            dyc::forward::thread,
            &mut out,
        )?,
        "place" => counted_pass(
            &m,
            src,
            "placement",
            "moved",
            dyc::placement::place,
            &mut out,
        )?,
        "reducify" => {
            let mut r = m.clone();
            for f in r.funcs.values_mut() {
                let limit = dyc::reducify::max_blocks(f.layout.blocks().len());
                match dyc::reducify::reducify(f, limit) {
                    Ok(Some(g)) => *f = g,
                    Ok(None) => {
                        let _ = writeln!(out, "; {}: unchanged", f.name);
                    }
                    Err(e) => {
                        let _ = writeln!(out, "; {}: {e}", f.name);
                    }
                }
            }
            for f in r.funcs.values() {
                let cfg = ControlFlowGraph::compute(f);
                if LoopForest::compute(&cfg)
                    .loops
                    .iter()
                    .any(|l| l.is_irreducible())
                {
                    let _ = writeln!(out, "; {}: still irreducible", f.name);
                }
            }
            transformed(&m, &r, src, "reducify", &mut out)?;
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
                    names(lf.blocks(i).into_iter())
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
    let n = common::run_suite(&root, "ir", ";", |_, src| {
        let kind = common::directive(src, ";", "test:")
            .first()
            .copied()
            .ok_or("no `; test:` line")?;
        run(kind, src)
    });
    println!("{n} file tests run");
}

//! The `dyc` command-line tool.
//!
//! ```text
//! dyc check FILE              compile (or parse and verify); print `ok` or the diagnostics
//! dyc ir FILE                 print the IR of the module
//! dyc analyze FILE            print each function annotated with its CFG analyses
//! dyc explain FILE FN         print FN with its binding-time analysis
//! dyc dot FILE FN [--stage S]  Graphviz of FN's CFG: S = cfg (edges and back edges), bta
//!                             (static branches bold, dynamic dashed, specialization
//!                             points and promotions marked) or rc (the default: bta plus
//!                             each block's reachability condition and merge class)
//! dyc ge FILE FN              print FN's generating extension (its stitch program)
//! dyc spec FILE FN ARGS...    specialize FN on its run-time constants among ARGS, print
//!                             the residual IR, and run it
//! dyc run FILE FN ARGS... [--fuel N]
//!                             interpret FN on ARGS; print the result or the error (at
//!                             most N instructions, 10^9 by default)
//! dyc stats FILE FN ARGS... [--calls N]
//!                             call FN's region (compiled, through its entry cache) on
//!                             ARGS N times (3); print the result and the region's
//!                             statistics
//! ```
//!
//! FILE is a region-language source (`.dyc`, `docs/language.md`) or IR text (`.ir`).
//!
//! Arguments of `run`: integers (`-3`), floats (`1.5`), `true`/`false`, and slices as
//! bracketed lists (`[1,2,3]`; quote them if they contain spaces). A slice passed to a
//! `[mut T]` parameter is printed again after the call. Exit status: 0 on success, 1 on a
//! parse, verifier or runtime error, 2 on bad usage.

use std::process::ExitCode;
use std::time::Instant;

use dyc::analysis::cfg::ControlFlowGraph;
use dyc::analysis::dominators::DominatorTree;
use dyc::analysis::liveness::Liveness;
use dyc::analysis::loops::LoopForest;
use dyc::analysis::topo::BlockTopo;
use dyc::interp::HostFns;
use dyc::interp::{format_val, parse_args, Interpreter, Memory, Val};
use dyc::ir::parser::parse_module;
use dyc::ir::printer::{print_function_with, print_module, Annotate};
use dyc::ir::{Block, Const, FuncId, Module};
use dyc::lang::compile;
use dyc::verifier::verify_module;

/// `println!` that ends the tool quietly when standard output is closed (a pipe into
/// `head`, say) instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout().lock(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// `print!` with the same behaviour as [`out!`].
macro_rules! out_nonl {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout().lock(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

const USAGE: &str = "usage: dyc check FILE | dyc ir FILE | dyc analyze FILE | dyc explain FILE FN | dyc dot FILE FN [--stage cfg|bta|rc|plan] | dyc ge FILE FN | dyc spec FILE FN ARGS... | dyc run FILE FN ARGS... [--fuel N] | dyc stats FILE FN ARGS... [--calls N]\n(FILE: region source, or IR text ending in .ir)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("{m}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Error(m)) => {
            eprintln!("{m}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    Usage(String),
    Error(String),
}

/// Loads a module: IR text (`.ir`, parsed and verified) or region source (compiled).
fn load(path: &str) -> Result<Module, Failure> {
    let src = std::fs::read_to_string(path).map_err(|e| Failure::Error(format!("{path}: {e}")))?;
    if path.ends_with(".ir") {
        let m = parse_module(&src).map_err(|e| Failure::Error(format!("{path}:{e}")))?;
        verify_module(&m).map_err(|e| Failure::Error(format!("{path}: verifier errors:\n{e}")))?;
        Ok(m)
    } else {
        compile(path, &src).map_err(|d| Failure::Error(d.to_string().trim_end().to_string()))
    }
}

/// The function named by the command's second operand.
fn function(
    m: &Module,
    cmd: &str,
    file: &str,
    rest: &[String],
) -> Result<(FuncId, String), Failure> {
    let name = rest
        .get(1)
        .ok_or_else(|| Failure::Usage(format!("`{cmd}` needs a function name")))?;
    let id = m
        .func_by_name(name)
        .ok_or_else(|| Failure::Error(format!("{file}: no function `{name}`")))?;
    Ok((id, name.clone()))
}

/// The call arguments after the function name, parsed for `id`'s parameters.
fn call_args(
    m: &Module,
    id: FuncId,
    name: &str,
    rest: &[String],
    mem: &mut Memory,
) -> Result<Vec<Val>, Failure> {
    parse_args(&m.funcs[id].sig.params, &rest[2..].join(","), mem)
        .map_err(|e| Failure::Usage(format!("arguments of `{name}`: {e}")))
}

fn run(args: &[String]) -> Result<(), Failure> {
    let (cmd, rest) = args
        .split_first()
        .ok_or(Failure::Usage("no command".into()))?;
    let file = rest
        .first()
        .ok_or(Failure::Usage(format!("`{cmd}` needs a file")))?;
    match cmd.as_str() {
        "check" => {
            load(file)?;
            out!("ok");
        }
        "ir" => out_nonl!("{}", print_module(&load(file)?)),
        "analyze" => {
            let m = load(file)?;
            for f in m.funcs.values() {
                out_nonl!("{}", print_function_with(&m, f, &Analyses::new(f)));
            }
        }
        "explain" => {
            let m = load(file)?;
            let (id, _) = function(&m, "explain", file, rest)?;
            let f = &m.funcs[id];
            let bta = dyc::bta::analyze(&m, f, dyc::bta::Mode::Specialize);
            out_nonl!("{}", dyc::bta::explain(&m, f, &bta));
        }
        "dot" => {
            let m = load(file)?;
            let (id, _) = function(&m, "dot", file, rest)?;
            let stage = match rest.get(2).map(String::as_str) {
                None => "rc",
                Some("--stage") => rest.get(3).map(String::as_str).unwrap_or(""),
                Some(other) => other.strip_prefix("--stage=").unwrap_or(""),
            };
            if !matches!(stage, "cfg" | "bta" | "rc" | "plan") {
                return Err(Failure::Usage(format!(
                    "`dot` stages are cfg, bta, rc and plan, not `{stage}`"
                )));
            }
            if stage == "plan" {
                let ge = dyc::ge::build(&m, id, dyc::bta::Mode::Specialize)
                    .map_err(|e| Failure::Error(format!("{file}: {e}")))?;
                out_nonl!("{}", dot_plan(&ge.program));
                return Ok(());
            }
            let f = &m.funcs[id];
            let bta = dyc::bta::analyze(&m, f, dyc::bta::Mode::Specialize);
            out_nonl!("{}", dot(f, &bta, stage));
        }
        "ge" => {
            let m = load(file)?;
            let (id, _) = function(&m, "ge", file, rest)?;
            let ge = dyc::ge::build(&m, id, dyc::bta::Mode::Specialize)
                .map_err(|e| Failure::Error(format!("{file}: {e}")))?;
            out_nonl!("{}", dyc_stitcher::ge::print_cfg(&ge.program));
            out_nonl!("{}", dyc_stitcher::ge::print_plan(&ge.program));
        }
        "spec" => {
            let m = load(file)?;
            let (id, name) = function(&m, "spec", file, rest)?;
            let mut mem = Memory::default();
            let vals = call_args(&m, id, &name, rest, &mut mem)?;
            let mut hosts = builtin_hosts();
            let run = dyc::residual::run(
                &m,
                id,
                &vals,
                &mut mem,
                &mut hosts,
                u64::MAX,
                Default::default(),
            );
            match run {
                Ok(r) => {
                    let spec = r.module.funcs.values().last().expect("the specialization");
                    out_nonl!(
                        "{}",
                        dyc::ir::printer::print_function_with(
                            &r.module,
                            spec,
                            &dyc::ir::printer::Plain
                        )
                    );
                    match r.result {
                        Some(v) => out!("result: {}", format_val(v, &mem)),
                        None => out!("result: ()"),
                    }
                }
                Err(dyc::residual::ResidualError::Runtime(e)) => {
                    return Err(Failure::Error(format!("runtime error: {e}")))
                }
                Err(e) => return Err(Failure::Error(e.to_string())),
            }
        }
        "stats" => {
            let m = load(file)?;
            let mut rest = rest.to_vec();
            let calls = count_option(&mut rest, "--calls", 3)?;
            let rest = &rest[..];
            let (id, name) = function(&m, "stats", file, rest)?;
            let mut mem = Memory::default();
            let vals = call_args(&m, id, &name, rest, &mut mem)?;
            let program = dyc::Program::from_module(m.clone(), Default::default())
                .map_err(|e| Failure::Error(e.to_string()))?;
            for (_, e) in m.externs.iter() {
                let hosts = std::sync::Mutex::new(builtin_hosts());
                let host = e.name.clone();
                program
                    .register_host(&e.name, move |a| {
                        hosts
                            .lock()
                            .map_err(|_| "a host panicked".to_string())?
                            .call(&host, a)
                    })
                    .map_err(|e| Failure::Error(e.to_string()))?;
            }
            let region = program
                .region(&name)
                .map_err(|e| Failure::Error(e.to_string()))?;
            let mut last = None;
            for _ in 0..calls {
                let mut mem = mem.clone();
                let r = region
                    .call_values(&vals, &mut mem, false)
                    .map_err(|e| Failure::Error(format!("runtime error: {e}")))?;
                last = Some(r);
            }
            match last.flatten() {
                Some(c) => out!("{c}"),
                None => out!("()"),
            }
            out!("{name} ({:?}): {}", region.caching(), region.stats());
            for s in region.site_stats() {
                out!(
                    "  promotion at {}: {} calls back, {} continuations stitched, {} kept",
                    s.block,
                    s.calls,
                    s.stitched,
                    s.cached
                );
            }
        }
        "run" => {
            let m = load(file)?;
            let mut rest = rest.to_vec();
            let fuel = count_option(&mut rest, "--fuel", DEFAULT_FUEL)?;
            let rest = &rest[..];
            let (id, name) = function(&m, "run", file, rest)?;
            let mut mem = Memory::default();
            let vals = call_args(&m, id, &name, rest, &mut mem)?;
            let mut interp = Interpreter::new(&m);
            interp.hosts = builtin_hosts();
            interp.fuel = fuel;
            let start = Instant::now();
            let result = interp.call(id, &vals, &mut mem);
            let elapsed = start.elapsed();
            match result {
                Ok(Some(v)) => out!("{}", format_val(v, &mem)),
                Ok(None) => out!("()"),
                Err(e) => return Err(Failure::Error(format!("runtime error: {e}"))),
            }
            for (k, v) in vals.iter().enumerate() {
                if matches!(v, Val::Slice(s) if s.mutable) {
                    out!("argument {k} after the call: {}", format_val(*v, &mem));
                }
            }
            eprintln!(
                "interpreted {} IR instructions in {:.3} ms",
                interp.executed,
                elapsed.as_secs_f64() * 1e3
            );
        }
        other => return Err(Failure::Usage(format!("unknown command `{other}`"))),
    }
    Ok(())
}

/// Instructions `dyc run` interprets before it gives up with a fuel error (a few seconds
/// of interpretation), unless `--fuel N` says otherwise.
const DEFAULT_FUEL: u64 = 1_000_000_000;

/// Removes `name N` from `rest` and returns N, or `default` when absent.
fn count_option(rest: &mut Vec<String>, name: &str, default: u64) -> Result<u64, Failure> {
    match rest.iter().position(|a| a == name) {
        Some(k) if k + 1 < rest.len() => {
            let n = rest.remove(k + 1);
            rest.remove(k);
            n.parse::<u64>()
                .map_err(|_| Failure::Usage(format!("{name} takes a count, not `{n}`")))
        }
        Some(_) => Err(Failure::Usage(format!("{name} takes a count"))),
        None => Ok(default),
    }
}

/// Per-block comments: dominator, loop, topological numbers and live-in values.
struct Analyses {
    text: cranelift_entity::SecondaryMap<Block, String>,
}

impl Analyses {
    fn new(f: &dyc::ir::Function) -> Analyses {
        let cfg = ControlFlowGraph::compute(f);
        let dt = DominatorTree::compute(&cfg);
        let loops = LoopForest::compute(&cfg);
        let topo = BlockTopo::compute(&cfg);
        let live = Liveness::compute(f, &cfg);
        let mut text = cranelift_entity::SecondaryMap::new();
        for &b in cfg.blocks() {
            let mut parts = Vec::new();
            match dt.idom(b) {
                Some(d) => parts.push(format!("idom {d}")),
                None if dt.is_reachable(b) => parts.push("entry".into()),
                None => parts.push("unreachable".into()),
            }
            if let Some(l) = loops.innermost(b) {
                let lp = &loops.loops[l];
                let kind = if lp.is_irreducible() {
                    ", irreducible"
                } else {
                    ""
                };
                parts.push(format!(
                    "loop depth {} (header {}{kind})",
                    lp.depth, lp.header
                ));
            }
            if let (Some(bg), Some(en)) = (topo.begin(b), topo.end(b)) {
                parts.push(format!("topo [{bg}, {en}]"));
            }
            let li: Vec<String> = live.live_in(b).iter().map(|v| v.to_string()).collect();
            parts.push(format!("live-in [{}]", li.join(" ")));
            text[b] = parts.join(", ");
        }
        Analyses { text }
    }
}

impl Annotate for Analyses {
    fn block(&self, b: Block) -> Option<String> {
        Some(self.text[b].clone())
    }
}

/// Host functions `dyc run` provides to programs that declare them: `print_i64(x: i64)`
/// and `print_f64(x: f64)` print a line; `abs_i64` is pure.
fn builtin_hosts() -> HostFns {
    let mut h = HostFns::default();
    h.register("print_i64", |a| match a {
        [Const::Int(_, x)] => {
            out!("{}", *x as i64);
            Ok(None)
        }
        _ => Err("print_i64 takes an i64".into()),
    });
    h.register("print_f64", |a| match a {
        [Const::F64(x)] => {
            out!("{x}");
            Ok(None)
        }
        _ => Err("print_f64 takes an f64".into()),
    });
    h.register("abs_i64", |a| match a {
        [Const::Int(t, x)] => Ok(Some(Const::Int(*t, (*x as i64).wrapping_abs() as u64))),
        _ => Err("abs_i64 takes an i64".into()),
    });
    h
}

/// Graphviz text of `f`'s CFG at `stage` (`cfg`, `bta` or `rc`; see the module doc).
/// The plan of a stitch program as Graphviz: one node per step (`stitch` boxes named by
/// their block, roots with a double border and their kind, blocks stitched only if needed
/// dashed, `fork` diamonds with one edge per arm, `end` points), edges for fall-through,
/// arms and shared suffixes (`goto`, dotted), and, dashed red, the has-been-stitched
/// lookups: from each stitched block to the roots its edges lead to.
fn dot_plan(p: &dyc_stitcher::ge::StitchProgram) -> String {
    use dyc_stitcher::ge::Step;
    let Some(plan) = &p.plan else {
        return format!(
            "digraph \"{}\" {{\n  label=\"no plan: the work-list executor runs it\";\n}}\n",
            p.header.name
        );
    };
    let mut out = format!(
        "digraph \"plan {}\" {{\n  node [shape=box];\n",
        p.header.name.replace('"', "\\\"")
    );
    let name = |b: dyc_stitcher::ge::Block| p.blocks.get(b).map_or("?", |d| d.name.as_str());
    for (pc, step) in plan.steps.iter().enumerate() {
        let node = match step {
            Step::Stitch { block, test } => {
                let mut attrs = vec![format!("label=\"{pc}: {block} ({})", name(*block))];
                if plan.root(*block) == Some(pc as u32) {
                    let kind = plan.roots[block.as_u32() as usize].map_or("", |(_, k)| k.name());
                    attrs[0].push_str(&format!("\\nroot: {kind}"));
                    attrs.push("peripheries=2".to_string());
                }
                attrs[0].push('"');
                if *test {
                    attrs.push("style=dashed".to_string());
                }
                format!("[{}]", attrs.join(", "))
            }
            Step::Fork { block, .. } => format!("[shape=diamond, label=\"{pc}: fork {block}\"]"),
            Step::Goto(_) => "[shape=point]".to_string(),
            Step::End => "[shape=point, label=\"\"]".to_string(),
        };
        out.push_str(&format!("  s{pc} {node};\n"));
    }
    for (pc, step) in plan.steps.iter().enumerate() {
        match step {
            Step::Stitch { block, .. } => {
                out.push_str(&format!("  s{pc} -> s{};\n", pc + 1));
                if let Some(d) = p.blocks.get(*block) {
                    let mut seen = Vec::new();
                    for e in d.term.edges() {
                        if let Some(r) = plan.root(e.block) {
                            if !seen.contains(&r) {
                                seen.push(r);
                                out.push_str(&format!(
                                    "  s{pc} -> s{r} [style=dashed, color=red, constraint=false, label=\"HBS\"];\n"
                                ));
                            }
                        }
                    }
                }
            }
            Step::Fork { arms, .. } => {
                for (k, a) in arms.iter().enumerate() {
                    out.push_str(&format!("  s{pc} -> s{a} [style=bold, label=\"{k}\"];\n"));
                }
            }
            Step::Goto(t) => out.push_str(&format!("  s{pc} -> s{t} [style=dotted];\n")),
            Step::End => {}
        }
    }
    out.push_str("}\n");
    out
}

fn dot(f: &dyc::ir::Function, bta: &dyc::bta::Bta, stage: &str) -> String {
    use dyc::analysis::cfg::ControlFlowGraph;
    use dyc::analysis::edges::EdgeClasses;
    use dyc::analysis::reach::FunctionReach;
    use std::collections::HashSet;
    let with_bta = stage != "cfg";
    let fr = (stage == "rc")
        .then(|| FunctionReach::compute(f, bta))
        .flatten();
    let cfg = ControlFlowGraph::compute(f);
    let back: HashSet<_> = EdgeClasses::compute(&cfg).back_edges().collect();
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    // ` [a, b]`, or nothing without attributes.
    let list = |attrs: &[String]| match attrs {
        [] => String::new(),
        _ => format!(" [{}]", attrs.join(", ")),
    };
    let mut out = format!("digraph \"{}\" {{\n  node [shape=box];\n", quote(&f.name));
    for &b in cfg.blocks() {
        let mut label = b.to_string();
        let mut attrs = Vec::new();
        if with_bta {
            if bta.is_spec_point(b) {
                label.push_str("\\nspecialization point");
                attrs.push("peripheries=2".to_string());
            }
            if f.layout.block_insts(b).iter().any(|&i| bta.is_promotion(i)) {
                label.push_str("\\npromotion");
                attrs.push("color=red".to_string());
            }
        }
        if let Some(fr) = &fr {
            let (r, k) = (&fr.reach, fr.cfg.node(b).expect("in the layout"));
            label.push_str(&format!("\\nRC: {}", quote(&fr.text(r.acyclic[k]))));
            if r.acyclic[k] != r.cyclic[k] {
                label.push_str(&format!(
                    "\\nwith back edges: {}",
                    quote(&fr.text(r.cyclic[k]))
                ));
            }
            if let Some(m) = r.merges[k] {
                label.push_str(&format!("\\n{} merge", m.name()));
                let style = if m.constant {
                    "rounded"
                } else {
                    "\"rounded,filled\""
                };
                attrs.push(format!("style={style}"));
            }
        }
        attrs.insert(0, format!("label=\"{label}\""));
        out.push_str(&format!("  \"{b}\"{};\n", list(&attrs)));
    }
    for &b in cfg.blocks() {
        let branches = cfg.succs(b).nth(1).is_some();
        let style = if bta.branch_is_static(f, b) {
            "style=bold"
        } else {
            "style=dashed"
        };
        for s in cfg.succs(b) {
            let mut attrs = Vec::new();
            if back.contains(&(b, s)) {
                attrs.push("constraint=false, color=blue, label=\"back\"".to_string());
            }
            if with_bta && branches {
                attrs.push(style.to_string());
            }
            out.push_str(&format!("  \"{b}\" -> \"{s}\"{};\n", list(&attrs)));
        }
    }
    out.push_str("}\n");
    out
}

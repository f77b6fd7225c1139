//! The text form of stitch programs, both forms, for `dyc ge`, file tests and errors.
//!
//! Registers print as `r7`; an operand is `s r7` (a hole: static register) or `d r7` (a
//! dynamic variable). Setup operations are `r7 = add r5, r6`; template operations start
//! with `emit`, lifts with `lift`. Source positions follow as `@line:col`.
//!
//! ```text
//! stitch dot(s [i64], d [i64]) -> i64
//!   host h0 hash(i64) -> i64 pure
//!   callee c0 = fn0(i64) -> i64
//! b0(s r0, d r1: [i64]):
//!     r2 = const 0:i64
//!     jump b1(s r2)
//! b1(s r3) live(s r0; d r1: [i64]):
//!     r4 = len r0 @5:15
//!     r5 = lt r3, r4 @5:11
//!     br s r5 ? b2 : b3
//! ```

use std::fmt::{self, Write};

use dyc_templates::template::TOp;
use dyc_templates::types::{SrcLoc, Type};

use super::cfg::{
    BlockData, CalleeDecl, Edge, Lazy, Op, Operand, Param, ProgramHeader, SetupOp, Term,
};
use super::linear::Step;
use super::StitchProgram;

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operand::Static(r) => write!(f, "s {r}"),
            Operand::Dyn(r) => write!(f, "d {r}"),
        }
    }
}

fn list<T: fmt::Display>(xs: &[T]) -> String {
    xs.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn loc(l: SrcLoc) -> String {
    if l.is_known() {
        format!(" @{l}")
    } else {
        String::new()
    }
}

fn sig(params: &[Type], ret: Option<Type>) -> String {
    let mut s = format!("({})", list(params));
    if let Some(t) = ret {
        let _ = write!(s, " -> {t}");
    }
    s
}

/// The text of a setup operation (without its destination).
pub fn setup_text(op: &SetupOp) -> String {
    match op {
        SetupOp::Const(c) => format!("const {c}"),
        SetupOp::Unary(o, a) => format!("{} {a}", o.name()),
        SetupOp::Binary(o, a, b) => format!("{} {a}, {b}", o.name()),
        SetupOp::Cmp(o, a, b) => format!("{} {a}, {b}", o.name()),
        SetupOp::Select(c, a, b) => format!("select {c}, {a}, {b}"),
        SetupOp::Cast(t, a) => format!("cast.{t} {a}"),
        SetupOp::Len(a) => format!("len {a}"),
        SetupOp::StaticLoad(s, i) => format!("load_static {s}, {i}"),
        SetupOp::CallPure { host, callee, args } => {
            format!("call_pure {host} ({callee}) ({})", list(args))
        }
        SetupOp::Copy(a) => format!("copy {a}"),
    }
}

/// The name of a template operation.
pub fn top_text(op: &TOp) -> String {
    match op {
        TOp::Unary(o) => o.name().to_string(),
        TOp::Binary(o) => o.name().to_string(),
        TOp::Cmp(o) => o.name().to_string(),
        TOp::Select => "select".into(),
        TOp::Cast(t) => format!("cast.{t}"),
        TOp::Len => "len".into(),
        TOp::Load => "load".into(),
        TOp::Store => "store".into(),
        TOp::Call { callee, ret } => match ret {
            Some(t) => format!("call c{callee} -> {t}"),
            None => format!("call c{callee}"),
        },
    }
}

fn emit_text(dst: Option<impl fmt::Display>, op: &TOp, args: &[Operand], l: SrcLoc) -> String {
    let lhs = dst.map(|d| format!("d {d} = ")).unwrap_or_default();
    format!("{lhs}emit {} {}{}", top_text(op), list(args), loc(l))
}

fn edge_text(e: &Edge) -> String {
    if e.args.is_empty() {
        e.block.to_string()
    } else {
        format!("{}({})", e.block, list(&e.args))
    }
}

/// `switch ARG [k => target, ...] default target`, for both forms.
fn switch_text<T>(
    arg: &str,
    cases: &[(u64, T)],
    default: &T,
    text: impl Fn(&T) -> String,
) -> String {
    let cs: Vec<String> = cases
        .iter()
        .map(|(k, t)| format!("{k} => {}", text(t)))
        .collect();
    format!("switch {arg} [{}] default {}", cs.join(", "), text(default))
}

/// The host and callee tables.
fn tables(s: &mut String, header: &ProgramHeader) {
    for (h, d) in header.hosts.iter() {
        let pure = if d.pure { " pure" } else { "" };
        let _ = writeln!(s, "  host {h} {}{}{pure}", d.name, sig(&d.params, d.ret));
    }
    for (c, d) in header.callees.iter() {
        let _ = match d {
            CalleeDecl::Func { index, params, ret } => {
                writeln!(s, "  callee {c} = fn{index}{}", sig(params, *ret))
            }
            CalleeDecl::Host { host } => writeln!(s, "  callee {c} = host {host}"),
        };
    }
}

/// The signature line: `stitch f(d i64, s i64) -> i64` (`s` marks the key parameters).
fn header(s: &mut String, h: &ProgramHeader, what: &str) {
    let ps: Vec<String> = h
        .param_types
        .iter()
        .enumerate()
        .map(|(k, t)| format!("{} {t}", if h.key_params.contains(&k) { "s" } else { "d" }))
        .collect();
    let _ = write!(s, "{what} {}({})", h.name, ps.join(", "));
    if let Some(t) = h.ret {
        let _ = write!(s, " -> {t}");
    }
    s.push('\n');
}

/// The block header line: `b1(s r3, d r4: i64) promote(r5 -> r6) live(s r0; d r1: i64):`.
fn block_header(name: impl fmt::Display, b: &BlockData) -> String {
    let ps: Vec<String> = b
        .params
        .iter()
        .map(|p| match p {
            Param::Static(r) => format!("s {r}"),
            Param::Dyn(r, t) => format!("d {r}: {t}"),
        })
        .collect();
    let mut s = format!("{name}({})", ps.join(", "));
    match b.lazy {
        Lazy::No => {}
        Lazy::DynamicBranches => s.push_str(" lazy"),
        Lazy::AllEdges => s.push_str(" lazy(all edges)"),
    }
    if !b.promote.is_empty() {
        let p: Vec<String> = b
            .promote
            .iter()
            .map(|(d, st)| format!("{d} -> {st}"))
            .collect();
        let _ = write!(s, " promote({})", p.join(", "));
    }
    if !b.static_live_in.is_empty() || !b.dyn_live_in.is_empty() {
        let mut l: Vec<String> = b.static_live_in.iter().map(|r| format!("s {r}")).collect();
        l.extend(b.dyn_live_in.iter().map(|(r, t)| format!("d {r}: {t}")));
        let _ = write!(s, " live({})", l.join(", "));
    }
    let _ = write!(s, ":  ; {}", b.name);
    s
}

/// Prints a stitch program in CFG form.
pub fn print_cfg(p: &StitchProgram) -> String {
    let mut s = String::new();
    header(&mut s, &p.header, "stitch");
    tables(&mut s, &p.header);
    for (id, b) in p.blocks.iter() {
        let entry = if id == p.entry { "entry " } else { "" };
        let _ = writeln!(s, "{entry}{}", block_header(id, b));
        for op in &b.ops {
            let line = match op {
                Op::Setup { dst, op, loc: l } => format!("{dst} = {}{}", setup_text(op), loc(*l)),
                Op::Emit {
                    dst,
                    op,
                    args,
                    loc: l,
                } => emit_text(*dst, op, args, *l),
                Op::Lift { dst, src } => format!("d {dst} = lift {src}"),
                Op::ArrayNew { dst, elem, len } => format!("d {dst} = array.{elem} {len}"),
                Op::ArrayLoad {
                    dst,
                    arr,
                    index,
                    loc: l,
                } => format!("d {dst} = aload {arr}[{index}]{}", loc(*l)),
                Op::ArrayStore {
                    arr,
                    index,
                    value,
                    loc: l,
                } => format!("astore {arr}[{index}] = {value}{}", loc(*l)),
            };
            let _ = writeln!(s, "    {line}");
        }
        let t = match &b.term {
            Term::Jump(e) => format!("jump {}", edge_text(e)),
            Term::Branch {
                cond,
                then_edge,
                else_edge,
            } => format!(
                "br {cond} ? {} : {}",
                edge_text(then_edge),
                edge_text(else_edge)
            ),
            Term::Switch {
                arg,
                cases,
                default,
            } => switch_text(&arg.to_string(), cases, default, edge_text),
            Term::Return(Some(v)) => format!("return {v}"),
            Term::Return(None) => "return".into(),
            Term::Trap(l) => format!("trap{}", loc(*l)),
        };
        let _ = writeln!(s, "    {t}");
    }
    s
}

/// Prints the plan of a stitch program (`no plan` if it has none): its roots with the first
/// step of their trees, then every step with its position.
pub fn print_plan(p: &StitchProgram) -> String {
    let Some(plan) = &p.plan else {
        return format!(
            "plan {}: none (the work-list executor runs it)\n",
            p.header.name
        );
    };
    let mut s = format!(
        "plan {}: {} steps ({} without tail merging)\n",
        p.header.name,
        plan.steps.len(),
        plan.unshared_steps
    );
    for (b, kind) in plan.root_blocks() {
        let _ = writeln!(
            s,
            "  root {b} ({}) at {}",
            kind.name(),
            plan.root(b).unwrap_or(0)
        );
    }
    for (pc, step) in plan.steps.iter().enumerate() {
        let text = match step {
            Step::Stitch { block, test } => {
                let name = p.blocks.get(*block).map_or("?", |d| d.name.as_str());
                let t = if *test { " if needed" } else { "" };
                format!("stitch {block}{t}  ; {name}")
            }
            Step::Fork { block, arms } => format!("fork {block} -> {}", list(arms)),
            Step::Goto(pc) => format!("goto {pc}"),
            Step::End => "end".to_string(),
        };
        let _ = writeln!(s, "  {pc}: {text}");
    }
    s
}

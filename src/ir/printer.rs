//! The text format, printing side. See [`crate::ir::parser`] for the grammar; the two
//! round-trip: `print(parse(print(m))) == print(m)`.
//!
//! Entity numbers are printed as they are (`v7`, `block3`), so the text of a function names
//! the same entities as the verifier's errors and the analyses' side tables.

use std::fmt::Write;

use super::entities::{Block, FuncId, Inst};
use super::function::{Function, Module, Signature};
use super::inst::{BlockCall, Callee, Const, InstData};
use super::types::Type;

/// Comments attached to blocks and instructions when printing (used by the verifier's
/// context, analyses' file tests and `explain`).
pub trait Annotate {
    fn block(&self, _b: Block) -> Option<String> {
        None
    }
    fn inst(&self, _i: Inst) -> Option<String> {
        None
    }
}

/// No annotations.
pub struct Plain;
impl Annotate for Plain {}

/// Prints a whole module: host declarations, then functions, separated by blank lines.
pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    for (_, e) in m.externs.iter() {
        let pure = if e.pure { "pure " } else { "" };
        let _ = writeln!(out, "extern {pure}fn {}{}", e.name, sig_text(&e.sig));
    }
    for (id, _) in m.funcs.iter() {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&print_function(m, id));
    }
    out
}

pub fn print_function(m: &Module, id: FuncId) -> String {
    print_function_with(m, &m.funcs[id], &Plain)
}

fn sig_text(sig: &Signature) -> String {
    let params: Vec<String> = sig.params.iter().map(Type::to_string).collect();
    match sig.ret {
        Some(t) => format!("({}) -> {t}", params.join(", ")),
        None => format!("({})", params.join(", ")),
    }
}

/// Prints `f` (a function of `m`, or built against `m`'s declarations) with comments.
pub fn print_function_with(m: &Module, f: &Function, ann: &dyn Annotate) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "fn {}{} {{", f.name, sig_text(&f.sig));
    for &b in f.layout.blocks() {
        out.push_str(&block_header(f, b));
        if let Some(c) = ann.block(b) {
            let _ = write!(out, "  ; {c}");
        }
        out.push('\n');
        for &i in f.layout.block_insts(b) {
            out.push_str("    ");
            out.push_str(&inst_text(m, f, i));
            if let Some(c) = ann.inst(i) {
                let _ = write!(out, "  ; {c}");
            }
            out.push('\n');
        }
    }
    out.push_str("}\n");
    out
}

/// `block3(v4: i64 as x, v5: bool):`
pub fn block_header(f: &Function, b: Block) -> String {
    let mut s = b.to_string();
    let params = f.block_params(b);
    if !params.is_empty() {
        let ps: Vec<String> = params
            .iter()
            .map(|&v| {
                let d = &f.values[v];
                match d.var {
                    Some(var) => format!("{v}: {} as {}", d.ty, var_text(f, var)),
                    None => format!("{v}: {}", d.ty),
                }
            })
            .collect();
        let _ = write!(s, "({})", ps.join(", "));
    }
    s.push(':');
    s
}

fn list(vs: &[super::entities::Value]) -> String {
    vs.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn block_call(c: &BlockCall) -> String {
    if c.args.is_empty() {
        c.block.to_string()
    } else {
        format!("{}({})", c.block, list(&c.args))
    }
}

/// Prints a constant as the text format writes it (`iconst.i8 -1`, `fconst 0.5`).
pub fn const_text(c: Const) -> String {
    match c {
        Const::Int(t, x) if t.is_signed() => format!("iconst.{t} {}", x as i64),
        Const::Int(t, x) => format!("iconst.{t} {x}"),
        Const::F64(x) => format!("fconst {x:?}"),
        Const::Bool(b) => format!("bconst {b}"),
    }
}

/// One instruction as a line of text, without indentation.
pub fn inst_text(m: &Module, f: &Function, i: Inst) -> String {
    let mut s = String::new();
    let loc = f.srclocs[i];
    if loc.is_known() {
        let _ = write!(s, "@{loc} ");
    }
    let results = f.inst_results(i);
    if !results.is_empty() {
        let _ = write!(s, "{} = ", list(results));
    }
    let data = &f.insts[i];
    let name = data.opcode_name();
    let _ = match data {
        InstData::Const(c) => write!(s, "{}", const_text(*c)),
        InstData::Unary { arg, .. } | InstData::Len { arg } => write!(s, "{name} {arg}"),
        InstData::Binary { args, .. } => write!(s, "{name} {}, {}", args[0], args[1]),
        InstData::Cmp { op, args } => write!(s, "cmp.{} {}, {}", op.name(), args[0], args[1]),
        InstData::Select { cond, args } => write!(s, "select {cond}, {}, {}", args[0], args[1]),
        InstData::Cast { to, arg } => write!(s, "cast.{to} {arg}"),
        InstData::ArrayNew { elem, len } => write!(s, "array.{elem} {len}"),
        InstData::Load { slice, index } | InstData::StaticLoad { slice, index } => {
            write!(s, "{name} {slice}, {index}")
        }
        InstData::Store {
            slice,
            index,
            value,
        } => write!(s, "store {slice}, {index}, {value}"),
        InstData::Call { callee, args, .. } => {
            let known = match callee {
                Callee::Func(id) => m.funcs.is_valid(*id),
                Callee::Extern(e) => m.externs.is_valid(*e),
            };
            let callee = if known {
                m.callee_name(*callee).to_string()
            } else {
                format!("<unknown {callee:?}>")
            };
            write!(s, "{name} {callee}({})", list(args))
        }
        InstData::MakeStatic { args, policies } => {
            let vars: Vec<String> = args
                .iter()
                .map(|(v, x)| format!("{v} as {}", var_text(f, *x)))
                .collect();
            let _ = write!(s, "{name} {}", vars.join(", "));
            if !policies.is_empty() {
                let ps: Vec<&str> = policies.iter().map(|p| p.name()).collect();
                let _ = write!(s, ": {}", ps.join(", "));
            }
            Ok(())
        }
        InstData::MakeDynamic { args } => {
            let vars: Vec<String> = args
                .iter()
                .map(|(v, x)| format!("{v} as {}", var_text(f, *x)))
                .collect();
            write!(s, "{name} {}", vars.join(", "))
        }
        InstData::Jump { dest } => write!(s, "jump {}", block_call(dest)),
        InstData::Brif {
            cond,
            then_dest,
            else_dest,
        } => write!(
            s,
            "brif {cond}, {}, {}",
            block_call(then_dest),
            block_call(else_dest)
        ),
        InstData::Switch {
            arg,
            cases,
            default,
        } => {
            let signed = f
                .values
                .get(*arg)
                .and_then(|d| d.ty.scalar())
                .is_some_and(|t| t.is_signed());
            let cs: Vec<String> = cases
                .iter()
                .map(|(k, c)| {
                    if signed {
                        format!("{}: {}", *k as i64, block_call(c))
                    } else {
                        format!("{k}: {}", block_call(c))
                    }
                })
                .collect();
            write!(
                s,
                "switch {arg}, [{}], default {}",
                cs.join(", "),
                block_call(default)
            )
        }
        InstData::Return { value: Some(v) } => write!(s, "return {v}"),
        InstData::Return { value: None } => write!(s, "return"),
        InstData::Trap => write!(s, "trap"),
    };
    s
}

/// A variable's name, or its entity name if it does not exist (in IR under construction).
fn var_text(f: &Function, var: super::entities::Var) -> String {
    match f.vars.get(var) {
        Some(d) => d.name.clone(),
        None => format!("<unknown {var}>"),
    }
}

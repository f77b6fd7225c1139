//! The IR verifier: the checklist of IR invariants. Every transformation must leave a
//! function that passes it, and tests run it after each one.
//!
//! Per function:
//! 1. **Entry.** The layout has at least one block; the first one is the entry. Its
//!    parameters have the types of the signature, and no branch targets it.
//! 2. **Blocks.** Every block in the layout is non-empty and ends with exactly one
//!    terminator (`jump`, `brif`, `switch`, `return`, `trap`); no terminator appears before
//!    the end. Block parameters that name a source variable name an existing one.
//! 3. **Branches.** Every target is a block in the layout, given exactly as many arguments
//!    as it has parameters, each of the parameter's type.
//! 4. **Definitions.** Every operand is a defined value whose definition is consistent
//!    (result `n` of an instruction in the layout, or parameter `n` of a block in the
//!    layout), and every instruction's results are fresh values of the types its opcode
//!    produces.
//! 5. **Dominance.** In a block reachable from the entry, every use is dominated by its
//!    definition: a parameter of a dominating block, an earlier instruction of the same
//!    block, or an instruction of a strictly dominating block. Branch arguments are uses at
//!    the terminator. Uses in unreachable blocks only need a definition (rule 4).
//! 6. **Types.** Operands have the types the instruction requires: integer or `f64`
//!    arithmetic (`rem` and `min`/`max` too), `and`/`or`/`xor` on integers or `bool`, shifts
//!    on integers, comparisons on two operands of one scalar type, `select` on a `bool` and
//!    two values of one type, casts from a scalar, `len` of a slice, loads from a slice with
//!    an integer index, stores into a `[mut T]` of a `T`, `brif` on a `bool`, `switch` on an
//!    integer with distinct case values representable in its type, `return` of the declared
//!    type (or nothing), integer constants in canonical form.
//! 7. **Calls.** The callee exists; arguments match its signature in number and type;
//!    `call_static` names a pure host function. Host functions take and return scalars.
//! 8. **Annotations.** `make_static` and `make_dynamic` name at least one variable, each at
//!    most once, each a valid variable; their results copy their operands' types. (Policies
//!    are well formed by construction: [`crate::ir::Policies::new`] refuses conflicts.)
//! 9. **Arrays.** `array.T N` has `1 <= N <= MAX_ARRAY_LEN`. An array value is only the
//!    first operand of `load`, `store` and `len` (read and written in place, never copied,
//!    passed or returned): no array is a block parameter, function parameter or result.
//!
//! Errors name the entity and show the IR around it.

use std::collections::HashSet;
use std::fmt;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::dominators::DominatorTree;
use crate::ir::printer::{block_header, inst_text};
use crate::ir::{
    BinaryOp, Block, Callee, Const, FuncId, Function, Inst, InstData, Module, Type, UnaryOp, Value,
    ValueDef,
};
use cranelift_entity::SecondaryMap;

/// The most elements a local array may have: its elements are passed between the blocks
/// of stitched code, so an array is a small thing (a register file, an operand stack).
pub const MAX_ARRAY_LEN: u32 = 256;

/// One violated invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierError {
    /// The function.
    pub func: String,
    /// The entity at fault (`inst7`, `block2`, `v3`, or the function).
    pub entity: String,
    pub message: String,
    /// The IR around the entity, the faulty line marked with `>`.
    pub context: String,
}

impl fmt::Display for VerifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fn {}: {}: {}", self.func, self.entity, self.message)?;
        if !self.context.is_empty() {
            write!(f, "\n{}", self.context)?;
        }
        Ok(())
    }
}

/// All the errors found in a module or function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierErrors(pub Vec<VerifierError>);

impl fmt::Display for VerifierErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifierErrors {}

/// Verifies every host declaration and function of `m`.
pub fn verify_module(m: &Module) -> Result<(), VerifierErrors> {
    let mut errors = Vec::new();
    for (_, e) in m.externs.iter() {
        if e.sig
            .params
            .iter()
            .chain(e.sig.ret.iter())
            .any(|t| t.is_slice())
        {
            errors.push(VerifierError {
                func: e.name.clone(),
                entity: format!("extern {}", e.name),
                message: "host functions take and return scalars only".into(),
                context: String::new(),
            });
        }
    }
    for (id, _) in m.funcs.iter() {
        if let Err(VerifierErrors(es)) = verify_function(m, id) {
            errors.extend(es);
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(VerifierErrors(errors))
    }
}

/// Verifies function `id` of `m`.
pub fn verify_function(m: &Module, id: FuncId) -> Result<(), VerifierErrors> {
    verify_function_in(m, &m.funcs[id])
}

/// Verifies `f` against the declarations of `m` (`f` need not be in `m` yet).
pub fn verify_function_in(m: &Module, f: &Function) -> Result<(), VerifierErrors> {
    let mut v = Verifier {
        m,
        f,
        errors: Vec::new(),
    };
    v.run();
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(VerifierErrors(v.errors))
    }
}

/// Where an error points.
#[derive(Clone, Copy)]
enum At {
    Func,
    Block(Block),
    Inst(Inst),
}

struct Verifier<'a> {
    m: &'a Module,
    f: &'a Function,
    errors: Vec<VerifierError>,
}

impl Verifier<'_> {
    fn error(&mut self, at: At, message: impl Into<String>) {
        let (entity, context) = match at {
            At::Func => (format!("fn {}", self.f.name), String::new()),
            At::Block(b) => (b.to_string(), self.context(Some(b), None)),
            At::Inst(i) => (
                i.to_string(),
                self.context(self.f.layout.inst_block(i), Some(i)),
            ),
        };
        self.errors.push(VerifierError {
            func: self.f.name.clone(),
            entity,
            message: message.into(),
            context,
        });
    }

    /// The block around the faulty entity, at most 3 lines either side of the fault.
    fn context(&self, b: Option<Block>, mark: Option<Inst>) -> String {
        let Some(b) = b else {
            return mark
                .map(|i| format!("> {}", inst_text(self.m, self.f, i)))
                .unwrap_or_default();
        };
        let insts = self.f.layout.block_insts(b);
        let pos = mark.and_then(|i| insts.iter().position(|&x| x == i));
        let (lo, hi) = match pos {
            Some(p) => (p.saturating_sub(3), (p + 4).min(insts.len())),
            None => (0, insts.len().min(4)),
        };
        let mut out = String::new();
        let marker = if mark.is_none() { "> " } else { "  " };
        out.push_str(&format!("{marker}{}\n", block_header(self.f, b)));
        if lo > 0 {
            out.push_str("      ...\n");
        }
        for (k, &i) in insts.iter().enumerate().take(hi).skip(lo) {
            let marker = if Some(k) == pos { "> " } else { "  " };
            out.push_str(&format!("{marker}    {}\n", inst_text(self.m, self.f, i)));
        }
        if hi < insts.len() {
            out.push_str("      ...\n");
        }
        out.pop();
        out
    }

    fn run(&mut self) {
        let f = self.f;
        let Some(entry) = f.entry_block() else {
            self.error(At::Func, "the function has no blocks");
            return;
        };
        let entry_types: Vec<Type> = f
            .block_params(entry)
            .iter()
            .map(|&v| f.value_type(v))
            .collect();
        if entry_types != f.sig.params {
            self.error(
                At::Block(entry),
                format!(
                    "entry block parameters ({}) differ from the signature ({})",
                    types_text(&entry_types),
                    types_text(&f.sig.params)
                ),
            );
        }
        if f.sig.params.iter().chain(&f.sig.ret).any(|t| t.is_array()) {
            self.error(
                At::Func,
                "an array cannot be a parameter or the result of a function",
            );
        }
        // Structural checks first: dominance needs a sane CFG.
        for &b in f.layout.blocks() {
            self.check_block_structure(b, entry);
        }
        let cfg = ControlFlowGraph::compute(f);
        let domtree = DominatorTree::compute(&cfg);
        // Each instruction's position in its block, for same-block uses (O(1) each).
        let mut positions: SecondaryMap<Inst, u32> = SecondaryMap::with_capacity(f.insts.len());
        for &b in f.layout.blocks() {
            for (k, &i) in f.layout.block_insts(b).iter().enumerate() {
                positions[i] = k as u32;
            }
        }
        let mut defined_results: SecondaryMap<Value, bool> =
            SecondaryMap::with_capacity(f.values.len());
        let mut operands = Vec::new();
        for &b in f.layout.blocks() {
            for (n, &p) in f.block_params(b).iter().enumerate() {
                if f.values.get(p).is_some_and(|d| d.ty.is_array()) {
                    self.error(
                        At::Block(b),
                        format!(
                            "parameter {p} is an array (arrays do not cross blocks as arguments)"
                        ),
                    );
                }
                match f.values.get(p) {
                    Some(d) if d.def == ValueDef::Param(b, n as u32) => {
                        if let Some(var) = d.var {
                            if !f.vars.is_valid(var) {
                                self.error(
                                    At::Block(b),
                                    format!("parameter {p} names unknown {var}"),
                                );
                            }
                        }
                    }
                    _ => self.error(
                        At::Block(b),
                        format!("parameter {p} is not recorded as parameter {n} of {b}"),
                    ),
                }
            }
            for (pos, &i) in f.layout.block_insts(b).iter().enumerate() {
                self.check_results(i, &mut defined_results);
                self.check_operands(i, b, pos, &domtree, &positions, &mut operands);
                self.check_types(i);
            }
        }
    }

    fn check_block_structure(&mut self, b: Block, entry: Block) {
        let f = self.f;
        let insts = f.layout.block_insts(b);
        if insts.is_empty() {
            self.error(
                At::Block(b),
                "empty block (a block must end with a terminator)",
            );
            return;
        }
        let last = insts.len() - 1;
        for (k, &i) in insts.iter().enumerate() {
            let term = f.insts[i].is_terminator();
            if term && k != last {
                self.error(At::Inst(i), "terminator before the end of its block");
            }
            if !term && k == last {
                self.error(At::Inst(i), "the block does not end with a terminator");
            }
        }
        for call in f.insts[insts[last]].branch_targets() {
            let t = call.block;
            if !f.blocks.is_valid(t) || !f.layout.is_block_inserted(t) {
                self.error(
                    At::Inst(insts[last]),
                    format!("branch to {t}, which is not in the layout"),
                );
                continue;
            }
            if t == entry {
                self.error(
                    At::Inst(insts[last]),
                    format!("branch to the entry block {t}"),
                );
            }
            let params = f.block_params(t);
            if params.len() != call.args.len() {
                self.error(
                    At::Inst(insts[last]),
                    format!(
                        "{t} takes {} argument(s), {} given",
                        params.len(),
                        call.args.len()
                    ),
                );
                continue;
            }
            for (k, (&a, &p)) in call.args.iter().zip(params).enumerate() {
                if let Some(ta) = self.ty(a) {
                    let tp = f.value_type(p);
                    if ta != tp {
                        self.error(
                            At::Inst(insts[last]),
                            format!("argument {k} of {t} is {a}: {ta}, the parameter {p} is {tp}"),
                        );
                    }
                }
            }
        }
    }

    /// The type of an operand if it is a defined value (errors are reported elsewhere).
    fn ty(&self, v: Value) -> Option<Type> {
        self.f
            .values
            .get(v)
            .filter(|d| d.def != ValueDef::Unused)
            .map(|d| d.ty)
    }

    fn check_results(&mut self, i: Inst, seen: &mut SecondaryMap<Value, bool>) {
        let f = self.f;
        let callee_ret = match &f.insts[i] {
            InstData::Call { callee, .. } if self.callee_valid(*callee) => {
                self.m.callee_sig(*callee).ret
            }
            _ => None,
        };
        let expected = f.result_types(&f.insts[i], callee_ret);
        let results = f.inst_results(i);
        if results.len() != expected.len() {
            self.error(
                At::Inst(i),
                format!(
                    "{} result(s) where the instruction produces {}",
                    results.len(),
                    expected.len()
                ),
            );
            return;
        }
        for (n, (&r, &t)) in results.iter().zip(&expected).enumerate() {
            match f.values.get(r) {
                Some(d) if d.def == ValueDef::Result(i, n as u32) => {
                    if d.ty != t {
                        self.error(
                            At::Inst(i),
                            format!("result {r} has type {}, the instruction produces {t}", d.ty),
                        );
                    }
                }
                _ => self.error(
                    At::Inst(i),
                    format!("result {r} is not recorded as result {n} of {i}"),
                ),
            }
            if std::mem::replace(&mut seen[r], true) {
                self.error(At::Inst(i), format!("{r} is defined twice"));
            }
        }
    }

    fn check_operands(
        &mut self,
        i: Inst,
        b: Block,
        pos: usize,
        domtree: &DominatorTree,
        positions: &SecondaryMap<Inst, u32>,
        operands: &mut Vec<Value>,
    ) {
        let f = self.f;
        let reachable = domtree.is_reachable(b);
        // Each operand once (a buffer reused across instructions).
        operands.clear();
        f.insts[i].visit_operands(|&v| operands.push(v));
        operands.sort_unstable();
        operands.dedup();
        for &v in operands.iter() {
            let Some(d) = f.values.get(v) else {
                self.error(At::Inst(i), format!("use of {v}, which does not exist"));
                continue;
            };
            let def_block = match d.def {
                ValueDef::Unused => {
                    self.error(At::Inst(i), format!("use of undefined value {v}"));
                    continue;
                }
                ValueDef::Param(pb, _) => {
                    if !f.layout.is_block_inserted(pb) {
                        self.error(
                            At::Inst(i),
                            format!("use of {v}, a parameter of {pb}, which is not in the layout"),
                        );
                        continue;
                    }
                    pb
                }
                ValueDef::Result(di, _) => match f.layout.inst_block(di) {
                    None => {
                        self.error(
                            At::Inst(i),
                            format!("use of {v}, defined by {di}, which is not in the layout"),
                        );
                        continue;
                    }
                    Some(db) => {
                        if db == b && reachable {
                            if positions[di] as usize >= pos {
                                self.error(
                                    At::Inst(i),
                                    format!("use of {v} before its definition"),
                                );
                            }
                            continue;
                        }
                        db
                    }
                },
            };
            if reachable && !domtree.dominates(def_block, b) {
                self.error(
                    At::Inst(i),
                    format!(
                        "use of {v} (defined in {def_block}) is not dominated by its definition"
                    ),
                );
            }
        }
    }

    fn callee_valid(&self, c: Callee) -> bool {
        match c {
            Callee::Func(id) => self.m.funcs.is_valid(id),
            Callee::Extern(id) => self.m.externs.is_valid(id),
        }
    }

    fn check_types(&mut self, i: Inst) {
        let f = self.f;
        let data = &f.insts[i];
        // Operand types; undefined operands were reported by `check_operands`.
        let t = |v: Value| self.ty(v);
        let sc = |v: Value| t(v).and_then(Type::scalar);
        let mut errs: Vec<String> = Vec::new();
        // Arrays are a function's own variables, read and written in place: an array value
        // is only the first operand of `load`, `store` and `len`.
        let in_place = matches!(
            data,
            InstData::Load { .. } | InstData::Store { .. } | InstData::Len { .. }
        );
        let mut k = 0;
        data.visit_operands(|&v| {
            if let Some(ty) = t(v).filter(|ty| ty.is_array() && !(in_place && k == 0)) {
                errs.push(format!(
                    "array {v}: {ty} used by `{}`; an array is only read and written with `load`, `store` and `len`",
                    data.opcode_name()
                ));
            }
            k += 1;
        });
        match data {
            InstData::ArrayNew { len, .. } => {
                if !(1..=MAX_ARRAY_LEN).contains(len) {
                    errs.push(format!(
                        "array length {len} is not between 1 and {MAX_ARRAY_LEN}"
                    ));
                }
            }
            InstData::Const(Const::Int(ty, x)) => {
                if !ty.is_int() {
                    errs.push(format!("integer constant of type {ty}"));
                } else if crate::semantics::canon(*ty, *x) != *x {
                    errs.push(format!("constant bits {x:#x} are not canonical for {ty}"));
                }
            }
            InstData::Const(_) => {}
            InstData::Unary { op, arg } => {
                if let Some(ty) = t(*arg) {
                    let ok = match op {
                        UnaryOp::Neg => ty.is_int() || ty == Type::F64,
                        UnaryOp::Not => ty.is_int() || ty == Type::BOOL,
                    };
                    if !ok {
                        errs.push(format!("`{}` does not apply to {ty}", op.name()));
                    }
                }
            }
            InstData::Binary { op, args } => {
                if let (Some(a), Some(b)) = (t(args[0]), t(args[1])) {
                    if a != b {
                        errs.push(format!(
                            "operands of `{}` have different types {a} and {b}",
                            op.name()
                        ));
                    } else {
                        use BinaryOp::*;
                        let ok = match op {
                            Add | Sub | Mul | Div | Rem | Min | Max => a.is_int() || a == Type::F64,
                            And | Or | Xor => a.is_int() || a == Type::BOOL,
                            Shl | Shr => a.is_int(),
                        };
                        if !ok {
                            errs.push(format!("`{}` does not apply to {a}", op.name()));
                        }
                    }
                }
            }
            InstData::Cmp { args, .. } => {
                if let (Some(a), Some(b)) = (t(args[0]), t(args[1])) {
                    if a != b || a.is_slice() {
                        errs.push(format!(
                            "`cmp` needs two operands of one scalar type, found {a} and {b}"
                        ));
                    }
                }
            }
            InstData::Select { cond, args } => {
                if t(*cond).is_some_and(|c| c != Type::BOOL) {
                    errs.push(format!("`select` condition {cond} is not a bool"));
                }
                if let (Some(a), Some(b)) = (t(args[0]), t(args[1])) {
                    if a != b {
                        errs.push(format!(
                            "`select` operands have different types {a} and {b}"
                        ));
                    }
                }
            }
            InstData::Cast { arg, .. } => {
                if let Some(ty) = t(*arg).filter(|ty| ty.is_slice()) {
                    errs.push(format!("`cast` of a slice ({ty})"));
                }
            }
            InstData::Len { arg } => {
                if let Some(ty) = t(*arg).filter(|ty| !ty.is_slice() && !ty.is_array()) {
                    errs.push(format!("`len` of {arg}: {ty}, not a slice or array"));
                }
            }
            InstData::Load { slice, index } | InstData::StaticLoad { slice, index } => {
                self.slice_access(data.opcode_name(), *slice, *index, false, &mut errs);
            }
            InstData::Store {
                slice,
                index,
                value,
            } => {
                self.slice_access("store", *slice, *index, true, &mut errs);
                if let (Some(Type::Slice { elem, .. } | Type::Array { elem, .. }), Some(vt)) =
                    (t(*slice), t(*value))
                {
                    if vt != Type::Scalar(elem) {
                        errs.push(format!("`store` of {value}: {vt} into a slice of {elem}"));
                    }
                }
            }
            InstData::Call {
                callee,
                args,
                is_static,
            } => {
                if !self.callee_valid(*callee) {
                    errs.push(format!("call to unknown {callee:?}"));
                } else {
                    let sig = self.m.callee_sig(*callee);
                    let name = self.m.callee_name(*callee);
                    if sig.params.len() != args.len() {
                        errs.push(format!(
                            "`{name}` takes {} argument(s), {} given",
                            sig.params.len(),
                            args.len()
                        ));
                    } else {
                        for (k, (&a, &p)) in args.iter().zip(&sig.params).enumerate() {
                            if let Some(ta) = t(a).filter(|ta| *ta != p) {
                                errs.push(format!(
                                    "argument {k} of `{name}` is {a}: {ta}, expected {p}"
                                ));
                            }
                        }
                    }
                    if *is_static && !self.m.is_pure(*callee) {
                        errs.push(format!(
                            "static call of `{name}`, which is not a pure host function"
                        ));
                    }
                }
            }
            InstData::MakeStatic { args, .. } | InstData::MakeDynamic { args } => {
                if args.is_empty() {
                    errs.push(format!("`{}` names no variable", data.opcode_name()));
                }
                let mut seen = HashSet::new();
                for &(_, var) in args {
                    if !f.vars.is_valid(var) {
                        errs.push(format!("annotation names unknown {var}"));
                    } else if !seen.insert(var) {
                        errs.push(format!(
                            "annotation names variable `{}` twice",
                            f.var_name(var)
                        ));
                    }
                }
            }
            InstData::Brif { cond, .. } => {
                if let Some(ty) = t(*cond).filter(|ty| *ty != Type::BOOL) {
                    errs.push(format!("`brif` condition {cond}: {ty} is not a bool"));
                }
            }
            InstData::Switch { arg, cases, .. } => match sc(*arg) {
                Some(ty) if ty.is_int() => {
                    let mut seen = HashSet::new();
                    for (k, _) in cases {
                        if crate::semantics::canon(ty, *k) != *k {
                            errs.push(format!("case {} is not a value of {ty}", *k as i64));
                        } else if !seen.insert(*k) {
                            errs.push(format!("case {} appears twice", *k as i64));
                        }
                    }
                }
                None if t(*arg).is_none() => {}
                _ => errs.push(format!("`switch` on {arg}, which is not an integer")),
            },
            InstData::Return { value } => match (value, f.sig.ret) {
                (None, None) => {}
                (Some(v), Some(r)) => {
                    if let Some(ty) = t(*v).filter(|ty| *ty != r) {
                        errs.push(format!(
                            "`return` of {v}: {ty} from a function returning {r}"
                        ));
                    }
                }
                (None, Some(r)) => errs.push(format!(
                    "`return` without a value from a function returning {r}"
                )),
                (Some(_), None) => {
                    errs.push("`return` of a value from a function returning nothing".into())
                }
            },
            InstData::Jump { .. } | InstData::Trap => {}
        }
        for e in errs {
            self.error(At::Inst(i), e);
        }
    }

    fn slice_access(
        &self,
        op: &str,
        slice: Value,
        index: Value,
        store: bool,
        errs: &mut Vec<String>,
    ) {
        match self.ty(slice) {
            Some(Type::Slice { mutable: false, .. }) if store => {
                errs.push(format!("`store` into {slice}, which is not a [mut T]"))
            }
            Some(Type::Slice { .. }) => {}
            Some(Type::Array { .. }) if op != "load_static" => {}
            Some(ty) => errs.push(format!("`{op}` from {slice}: {ty}, not a slice")),
            None => {}
        }
        if let Some(ty) = self.ty(index).filter(|ty| !ty.is_int()) {
            errs.push(format!("`{op}` index {index}: {ty} is not an integer"));
        }
    }
}

fn types_text(ts: &[Type]) -> String {
    ts.iter()
        .map(Type::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parser::parse_module;

    #[test]
    fn errors_name_the_entity_and_show_the_ir_around_it() {
        let m = parse_module(
            "fn f(bool) -> i64 {\nblock0(v0: bool):\n    brif v0, block1, block2\nblock1:\n    v1 = iconst.i64 1\n    jump block2\nblock2:\n    v2 = add v1, v1\n    return v2\n}\n",
        )
        .expect("parses");
        let err = verify_module(&m).expect_err("v1 does not dominate block2");
        assert_eq!(err.0.len(), 1);
        let text = err.to_string();
        assert_eq!(
            text,
            "fn f: inst3: use of v1 (defined in block1) is not dominated by its definition\n  block2:\n>     v2 = add v1, v1\n      return v2"
        );
    }
}

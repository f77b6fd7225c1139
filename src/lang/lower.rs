//! Lowering of the syntax tree to the IR: name resolution, type checking and SSA
//! construction ([`super::ssa`]) in one walk per function.
//!
//! - Every variable, parameter included, is an SSA variable: definitions are recorded per
//!   block and merges become block parameters tagged with the variable's name, so that a
//!   `make_static` variable can be followed through merges and loops.
//! - `make_static(x, ...)` emits a `make_static` instruction and rebinds each variable to
//!   its result; `make_dynamic` likewise.
//! - Integer literals take the type their context expects (a declared type, the other
//!   operand, a parameter), `i64` otherwise; `f64` contexts accept integer literals.
//! - `&&` and `||` branch: the right operand runs only when needed.
//! - Instructions carry the source position of the expression or statement they come
//!   from, so runtime faults (`load`/`store` out of bounds, division by zero, `trap`)
//!   report it.
//! - Errors are collected; lowering goes on after one, so a run reports several. A
//!   function with errors produces no IR.
//!
//! Afterwards unreachable blocks are removed and trivial block parameters are replaced;
//! [`super::compile`] then verifies the module (a failure there is an internal error,
//! reported as such).

use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

use super::ast::*;
use super::diag::{Diagnostic, SourceMap, Span};
use super::ssa::{remove_trivial_params, remove_unreachable_blocks, SsaBuilder, VarId, VarInfo};
use crate::ir::{
    BinaryOp, Block, BlockCall, Callee, CmpOp, Const, ExternFunc, FuncId, Function, Inst, InstData,
    Module, Policies, Policy, Scalar, Signature, SrcLoc, Type, UnaryOp, Value, Var, VarData,
};
use crate::semantics;

/// An error was reported; the statement being lowered is abandoned.
struct Reported;
type LResult<T> = Result<T, Reported>;

/// Lowers a parsed program to a module (not verified yet: see [`super::compile`]).
pub fn lower(prog: &Program<'_>, map: &SourceMap) -> Result<Module, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let mut m = Module::default();
    let mut first: HashMap<&str, Span> = HashMap::default();
    let mut fns: Vec<(FuncId, &FnDecl<'_>)> = Vec::new();
    for item in &prog.items {
        let (name, params, ret) = match item {
            Item::Extern(e) => (&e.name, &e.params, &e.ret),
            Item::Fn(f) => (&f.name, &f.params, &f.ret),
        };
        if let Some(prev) = first.get(name.name) {
            let (l, c) = map.line_col(prev.start);
            errors.push(
                Diagnostic::new(
                    name.span,
                    format!("`{}` is defined twice", name.name),
                    "second definition",
                )
                .note(format!("first defined at {l}:{c}")),
            );
            continue;
        }
        first.insert(name.name, name.span);
        if matches!(item, Item::Extern(_)) {
            // (A function's parameters are declared as variables, which reports repeats.)
            check_params(params, &mut errors);
        }
        let sig = Signature {
            params: params.iter().map(|p| p.ty.ty).collect(),
            ret: ret.as_ref().map(|t| t.ty),
        };
        match item {
            Item::Extern(e) => {
                for t in e.params.iter().map(|p| &p.ty).chain(e.ret.iter()) {
                    if t.ty.is_slice() {
                        errors.push(Diagnostic::new(
                            t.span,
                            "host functions take and return scalars only",
                            "a slice",
                        ));
                    }
                }
                m.externs.push(ExternFunc {
                    name: e.name.name.to_string(),
                    sig,
                    pure: e.pure,
                });
            }
            Item::Fn(f) => fns.push((m.funcs.push(Function::new(f.name.name, sig)), f)),
        }
    }
    let mut built = Vec::new();
    for (id, decl) in fns {
        let mut l = FnLowerer::new(&m, map, id, decl);
        l.run(decl);
        if l.errors.is_empty() {
            built.push((id, l.f));
        } else {
            errors.append(&mut l.errors);
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    for (id, f) in built {
        m.funcs[id] = f;
    }
    Ok(m)
}

fn check_params(params: &[Param<'_>], errors: &mut Vec<Diagnostic>) {
    for (i, p) in params.iter().enumerate() {
        if params[..i].iter().any(|q| q.name.name == p.name.name) {
            errors.push(Diagnostic::new(
                p.name.span,
                format!("parameter `{}` is defined twice", p.name.name),
                "duplicate parameter",
            ));
        }
    }
}

struct VarDecl<'a> {
    name: &'a str,
    mutable: bool,
    span: Span,
    /// Its initializer had an error: uses fail silently instead of cascading.
    poisoned: bool,
}

/// A statement label: its block, where it is defined (once seen), and the first `goto`
/// naming it.
#[derive(Clone, Copy)]
struct Label {
    block: Block,
    defined: Option<Span>,
    first_goto: Option<Span>,
}

struct LoopCtx<'a> {
    label: Option<&'a str>,
    continue_to: Block,
    break_to: Block,
}

struct FnLowerer<'a> {
    m: &'a Module,
    map: &'a SourceMap<'a>,
    me: FuncId,
    f: Function,
    ssa: SsaBuilder,
    vars: Vec<VarInfo>,
    decls: Vec<VarDecl<'a>>,
    scopes: Vec<HashMap<&'a str, VarId>>,
    /// The IR variable of each source name (one per name, shared by its declarations).
    ir_vars: HashMap<&'a str, Var>,
    cur: Option<Block>,
    loops: Vec<LoopCtx<'a>>,
    labels: HashMap<&'a str, Label>,
    loc: SrcLoc,
    errors: Vec<Diagnostic>,
}

/// A lowered expression: its value and type, or nothing (a call of a function returning
/// nothing).
type Typed = (Value, Type);

impl<'a> FnLowerer<'a> {
    fn new(m: &'a Module, map: &'a SourceMap<'a>, me: FuncId, decl: &FnDecl<'a>) -> FnLowerer<'a> {
        let sig = m.funcs[me].sig.clone();
        // About one instruction per five bytes of body (statements like `a = a + x * 3;`
        // make three instructions from 16 bytes), up to a million (a hint: a body of
        // comments must not reserve a gigabyte).
        let body_bytes = decl.body.close.end.saturating_sub(decl.name.span.end) as usize;
        let insts = (body_bytes / 5).min(1 << 20);
        let mut f = Function::with_capacity(decl.name.name, sig, insts);
        let entry = f.append_new_block();
        FnLowerer {
            m,
            map,
            me,
            f,
            ssa: SsaBuilder::new(entry),
            vars: Vec::new(),
            decls: Vec::new(),
            scopes: vec![HashMap::default()],
            ir_vars: HashMap::default(),
            cur: Some(entry),
            loops: Vec::new(),
            labels: HashMap::default(),
            loc: SrcLoc::default(),
            errors: Vec::new(),
        }
    }

    fn err(
        &mut self,
        span: Span,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> Reported {
        self.errors.push(Diagnostic::new(span, message, label));
        Reported
    }

    fn set_loc(&mut self, span: Span) {
        let (line, col) = self.map.line_col(span.start);
        self.loc = SrcLoc::new(line, col);
    }

    /// The current block; after a jump, code goes to a fresh block with no predecessors
    /// (unreachable, removed at the end).
    fn block(&mut self) -> Block {
        match self.cur {
            Some(b) => b,
            None => {
                let b = self.new_block();
                self.ssa.seal(&mut self.f, &self.vars, b);
                self.cur = Some(b);
                b
            }
        }
    }

    fn new_block(&mut self) -> Block {
        self.f.append_new_block()
    }

    fn inst(&mut self, data: InstData, callee_ret: Option<Type>) -> Inst {
        let b = self.block();
        let i = self.f.append_inst(b, data, callee_ret);
        self.f.srclocs[i] = self.loc;
        i
    }

    fn val(&mut self, data: InstData) -> Value {
        let i = self.inst(data, None);
        self.f.first_result(i)
    }

    fn konst(&mut self, c: Const) -> Value {
        self.val(InstData::Const(c))
    }

    /// Ends the current block with a branch.
    fn branch(&mut self, data: InstData) {
        let from = self.block();
        let mut targets: SmallVec<[Block; 2]> = data.branch_targets().map(|c| c.block).collect();
        self.inst(data, None);
        // One edge per target block (a switch may name a block many times).
        targets.sort_unstable();
        targets.dedup();
        for t in targets {
            self.ssa.add_pred(t, from);
        }
        self.cur = None;
    }

    fn jump(&mut self, to: Block) {
        self.branch(InstData::Jump {
            dest: BlockCall::new(to, vec![]),
        });
    }

    fn seal(&mut self, b: Block) {
        self.ssa.seal(&mut self.f, &self.vars, b);
    }

    /// Seals `b`, whose predecessors are all known, and continues there; if no edge
    /// reaches it (every path returned, jumped or trapped), what follows is unreachable.
    fn continue_at(&mut self, b: Block) {
        self.seal(b);
        self.cur = self.ssa.has_preds(b).then_some(b);
    }

    fn declare(&mut self, name: &Ident<'a>, ty: Type, mutable: bool) -> LResult<VarId> {
        if self
            .scopes
            .last()
            .is_some_and(|s| s.contains_key(&name.name))
        {
            let prev = self.decls[self.scopes.last().expect("a scope")[&name.name]].span;
            let (l, c) = self.map.line_col(prev.start);
            self.errors.push(
                Diagnostic::new(
                    name.span,
                    format!("`{}` is already defined in this scope", name.name),
                    "second definition",
                )
                .note(format!("first defined at {l}:{c}")),
            );
            return Err(Reported);
        }
        let id = self.vars.len();
        let ir_var = self.ir_var(name.name);
        self.vars.push(VarInfo { ty, ir_var });
        self.decls.push(VarDecl {
            name: name.name,
            mutable,
            span: name.span,
            poisoned: false,
        });
        self.scopes
            .last_mut()
            .expect("a scope")
            .insert(name.name, id);
        Ok(id)
    }

    fn ir_var(&mut self, name: &'a str) -> Var {
        if let Some(&v) = self.ir_vars.get(name) {
            return v;
        }
        let v = self.f.vars.push(VarData {
            name: name.to_string(),
        });
        self.ir_vars.insert(name, v);
        v
    }

    fn lookup(&mut self, name: &str, span: Span) -> LResult<VarId> {
        match self.scopes.iter().rev().find_map(|s| s.get(name)) {
            Some(&id) if self.decls[id].poisoned => Err(Reported),
            Some(&id) => Ok(id),
            None => Err(self.err(
                span,
                format!("undefined variable `{name}`"),
                "not found in this scope",
            )),
        }
    }

    fn read(&mut self, var: VarId) -> Value {
        let b = self.block();
        self.ssa.read(&mut self.f, &self.vars, var, b)
    }

    fn write(&mut self, var: VarId, v: Value) {
        let b = self.block();
        self.ssa.write(var, b, v);
    }

    fn run(&mut self, decl: &FnDecl<'a>) {
        let entry = self.block();
        for p in &decl.params {
            let ir_var = self.ir_var(p.name.name);
            let v = self.f.append_block_param(entry, p.ty.ty, Some(ir_var));
            if let Ok(id) = self.declare(&p.name, p.ty.ty, true) {
                self.ssa.write(id, entry, v);
            }
        }
        self.block_stmts(&decl.body);
        if self.cur.is_some() {
            match self.f.sig.ret {
                // After other errors the end may only look reachable: stay quiet then.
                Some(_) if !self.errors.is_empty() => {}
                Some(t) => {
                    self.err(
                        decl.body.close,
                        format!("missing return in `{}`, which returns {t}", decl.name.name),
                        "control reaches the end of the function",
                    );
                }
                None => {
                    self.set_loc(decl.body.close);
                    self.branch(InstData::Return { value: None });
                }
            }
        }
        let mut labels: Vec<(&str, Label)> = self.labels.drain().collect();
        labels.sort_by_key(|(_, l)| l.defined.or(l.first_goto).map(|s| s.start));
        for (name, l) in labels {
            self.seal(l.block);
            if let (None, Some(span)) = (l.defined, l.first_goto) {
                self.err(
                    span,
                    format!("`goto` to undefined label `{name}`"),
                    "no statement has this label",
                );
            }
        }
        for b in self.f.layout.blocks().to_vec() {
            self.seal(b);
        }
        let mut uninit = std::mem::take(&mut self.ssa.uninitialized);
        uninit.sort();
        uninit.dedup();
        for var in uninit {
            let d = &self.decls[var];
            let msg = format!(
                "`{}` may be used before it is initialized: a `goto` jumps past its declaration",
                d.name
            );
            let span = d.span;
            self.err(span, msg, "declared here");
        }
        if self.errors.is_empty() {
            remove_unreachable_blocks(&mut self.f);
            remove_trivial_params(&mut self.f);
        }
    }

    fn block_stmts(&mut self, b: &super::ast::Block<'a>) {
        self.scopes.push(HashMap::default());
        self.stmt_list(&b.stmts);
        self.scopes.pop();
    }

    /// Lowers statements, going on after an error. A failed `return`, `break`,
    /// `continue`, `goto` or `trap` still ends its block, so that no spurious "missing
    /// return" follows.
    fn stmt_list(&mut self, stmts: &[Stmt<'a>]) {
        for s in stmts {
            let ends = matches!(
                s.kind,
                StmtKind::Return(_)
                    | StmtKind::Break(_)
                    | StmtKind::Continue(_)
                    | StmtKind::Goto(_)
                    | StmtKind::Trap
            );
            if self.stmt(s, None).is_err() && ends {
                self.cur = None;
            }
        }
    }

    fn stmt(&mut self, s: &Stmt<'a>, label: Option<&Ident<'a>>) -> LResult<()> {
        self.set_loc(s.span);
        match &s.kind {
            StmtKind::Let {
                name,
                mutable,
                ty,
                init,
            } => {
                let hint = ty.as_ref().map(|t| t.ty);
                let typed = self.value(init, hint).and_then(|(v, t)| match ty {
                    Some(want) => self.expect_type(t, want.ty, init.span).map(|()| (v, t)),
                    None => Ok((v, t)),
                });
                match typed {
                    Ok((v, t)) => {
                        let id = self.declare(name, t, *mutable)?;
                        self.write(id, v);
                    }
                    Err(r) => {
                        // Declared all the same, so that its uses report nothing more.
                        let id = self.declare(name, hint.unwrap_or(Type::I64), *mutable)?;
                        self.decls[id].poisoned = true;
                        return Err(r);
                    }
                }
            }
            StmtKind::Array { name, ty } => {
                let Type::Array { elem, len } = ty.ty else {
                    unreachable!("the parser makes array declarations of array types")
                };
                let v = self.val(InstData::ArrayNew { elem, len });
                let id = self.declare(name, ty.ty, true)?;
                self.write(id, v);
            }
            StmtKind::Assign { name, value } => {
                let id = self.lookup(name.name, name.span)?;
                if !self.decls[id].mutable {
                    return Err(self.err(
                        name.span,
                        format!(
                            "cannot assign to `{}`: it is declared with `let`",
                            name.name
                        ),
                        "declare it with `var` to assign it",
                    ));
                }
                let want = self.vars[id].ty;
                let (v, t) = self.value(value, Some(want))?;
                self.expect_type(t, want, value.span)?;
                self.write(id, v);
            }
            StmtKind::Store {
                slice,
                index,
                value,
            } => {
                let (sv, st) = self.place(slice)?;
                let elem = match st {
                    Type::Slice {
                        elem,
                        mutable: true,
                    }
                    | Type::Array { elem, .. } => elem,
                    Type::Slice { .. } => {
                        return Err(self.err(
                            slice.span,
                            format!("cannot store into a read-only slice `{st}`"),
                            "declare it `[mut T]` to store into it",
                        ))
                    }
                    _ => {
                        return Err(self.err(
                            slice.span,
                            format!("cannot index into a value of type `{st}`"),
                            "not a slice",
                        ))
                    }
                };
                let iv = self.index(index)?;
                let (vv, vt) = self.value(value, Some(Type::Scalar(elem)))?;
                self.expect_type(vt, Type::Scalar(elem), value.span)?;
                self.set_loc(s.span);
                self.inst(
                    InstData::Store {
                        slice: sv,
                        index: iv,
                        value: vv,
                    },
                    None,
                );
            }
            StmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let (tb, eb, join) = (self.new_block(), self.new_block(), self.new_block());
                // An error is reported; the arms are still lowered for their own errors.
                let _ = self.branch_on(cond, tb, eb);
                self.seal(tb);
                self.seal(eb);
                self.cur = Some(tb);
                self.block_stmts(then);
                if self.cur.is_some() {
                    self.jump(join);
                }
                self.cur = Some(eb);
                if let Some(o) = otherwise {
                    self.block_stmts(o);
                }
                if self.cur.is_some() {
                    self.jump(join);
                }
                self.continue_at(join);
            }
            StmtKind::While { cond, body } => {
                let (header, bodyb, exit) = (self.new_block(), self.new_block(), self.new_block());
                self.jump(header);
                self.cur = Some(header);
                let _ = self.branch_on(cond, bodyb, exit);
                self.seal(bodyb);
                self.cur = Some(bodyb);
                self.loop_body(body, label, header, exit);
                self.seal(header);
                self.continue_at(exit);
            }
            StmtKind::Loop { body } => {
                let (header, exit) = (self.new_block(), self.new_block());
                self.jump(header);
                self.cur = Some(header);
                self.loop_body(body, label, header, exit);
                self.seal(header);
                self.continue_at(exit);
            }
            StmtKind::Break(l) | StmtKind::Continue(l) => {
                let is_break = matches!(s.kind, StmtKind::Break(_));
                let word = if is_break { "break" } else { "continue" };
                let target = match l {
                    None => match self.loops.last() {
                        Some(c) => Some(if is_break { c.break_to } else { c.continue_to }),
                        None => {
                            return Err(self.err(
                                s.span,
                                format!("`{word}` outside a loop"),
                                "not inside `while` or `loop`",
                            ))
                        }
                    },
                    Some(l) => self
                        .loops
                        .iter()
                        .rev()
                        .find(|c| c.label == Some(l.name))
                        .map(|c| if is_break { c.break_to } else { c.continue_to }),
                };
                let Some(target) = target else {
                    let l = l.as_ref().expect("labeled");
                    return Err(self.err(
                        l.span,
                        format!("no loop labeled `{}` encloses this `{word}`", l.name),
                        "unknown loop label",
                    ));
                };
                self.jump(target);
            }
            StmtKind::Return(value) => {
                let v = match (value, self.f.sig.ret) {
                    (None, None) => None,
                    (Some(e), Some(t)) => {
                        let (v, vt) = self.value(e, Some(t))?;
                        self.expect_type(vt, t, e.span)?;
                        Some(v)
                    }
                    (None, Some(t)) => {
                        return Err(self.err(
                            s.span,
                            format!("`return` without a value in a function returning {t}"),
                            "expected a value",
                        ))
                    }
                    (Some(e), None) => {
                        return Err(self.err(
                            e.span,
                            "`return` with a value in a function returning nothing",
                            "unexpected value",
                        ))
                    }
                };
                self.set_loc(s.span);
                self.branch(InstData::Return { value: v });
            }
            StmtKind::Switch(sw) => self.switch(&sw.scrutinee, &sw.cases, sw.default.as_deref())?,
            StmtKind::Labeled { label: l, stmt } => {
                let lab = self.label(l.name);
                if let Some(prev) = lab.defined {
                    let (line, col) = self.map.line_col(prev.start);
                    self.errors.push(
                        Diagnostic::new(
                            l.span,
                            format!("label `{}` is defined twice", l.name),
                            "second definition",
                        )
                        .note(format!("first defined at {line}:{col}")),
                    );
                    return Err(Reported);
                }
                lab.defined = Some(l.span);
                let b = lab.block;
                if self.cur.is_some() {
                    self.jump(b);
                }
                self.cur = Some(b);
                self.stmt(stmt, Some(l))?;
            }
            StmtKind::Goto(l) => {
                let lab = self.label(l.name);
                lab.first_goto.get_or_insert(l.span);
                let b = lab.block;
                self.jump(b);
            }
            StmtKind::Trap => self.branch(InstData::Trap),
            StmtKind::MakeStatic { vars, policies } => {
                let mut list = Vec::new();
                for p in policies {
                    let Some(pol) = Policy::from_name(p.name) else {
                        let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                        self.errors.push(
                            Diagnostic::new(
                                p.span,
                                format!("unknown policy `{}`", p.name),
                                "not a policy",
                            )
                            .note(format!("the policies are {}", names.join(", "))),
                        );
                        return Err(Reported);
                    };
                    if let Some(q) = list.iter().find(|q: &&Policy| q.group() == pol.group()) {
                        let msg = format!("policies `{q}` and `{pol}` conflict");
                        return Err(self.err(
                            p.span,
                            msg,
                            "only one policy of each kind per annotation",
                        ));
                    }
                    list.push(pol);
                }
                let policies = Policies::new(&list).expect("conflicts refused above");
                self.annotation(vars, "make_static", |args| InstData::MakeStatic {
                    args: args.into(),
                    policies,
                })?;
            }
            StmtKind::MakeDynamic { vars } => self.annotation(vars, "make_dynamic", |args| {
                InstData::MakeDynamic { args: args.into() }
            })?,
            StmtKind::Expr(e) => {
                self.expr(e, None)?;
            }
            StmtKind::Block(b) => self.block_stmts(b),
        }
        Ok(())
    }

    /// The label named `name`, created (with its block) at its first mention.
    fn label(&mut self, name: &'a str) -> &mut Label {
        if !self.labels.contains_key(name) {
            let block = self.new_block();
            let label = Label {
                block,
                defined: None,
                first_goto: None,
            };
            self.labels.insert(name, label);
        }
        self.labels.get_mut(name).expect("inserted above")
    }

    fn loop_body(
        &mut self,
        body: &super::ast::Block<'a>,
        label: Option<&Ident<'a>>,
        header: Block,
        exit: Block,
    ) {
        self.loops.push(LoopCtx {
            label: label.map(|l| l.name),
            continue_to: header,
            break_to: exit,
        });
        self.block_stmts(body);
        if self.cur.is_some() {
            self.jump(header);
        }
        self.loops.pop();
    }

    fn annotation(
        &mut self,
        vars: &[Ident<'a>],
        what: &str,
        make: impl FnOnce(Vec<(Value, crate::ir::Var)>) -> InstData,
    ) -> LResult<()> {
        let mut ids = Vec::new();
        for (i, v) in vars.iter().enumerate() {
            if vars[..i].iter().any(|w| w.name == v.name) {
                return Err(self.err(
                    v.span,
                    format!("`{}` appears twice in `{what}`", v.name),
                    "repeated variable",
                ));
            }
            let Some(&id) = self.scopes.iter().rev().find_map(|s| s.get(&v.name)) else {
                return Err(self.err(
                    v.span,
                    format!("`{what}` names undefined variable `{}`", v.name),
                    "not found in this scope",
                ));
            };
            if self.vars[id].ty.is_array() {
                return Err(self.err(
                    v.span,
                    format!("`{what}` of array `{}`", v.name),
                    "an array cannot be a run-time constant",
                ));
            }
            ids.push(id);
        }
        let args: Vec<(Value, crate::ir::Var)> = ids
            .iter()
            .map(|&id| (self.read(id), self.vars[id].ir_var))
            .collect();
        let i = self.inst(make(args), None);
        let results = self.f.inst_results(i).to_vec();
        for (id, r) in ids.into_iter().zip(results) {
            self.write(id, r);
        }
        Ok(())
    }

    fn switch(
        &mut self,
        scrutinee: &Expr<'a>,
        cases: &[Case<'a>],
        default: Option<&[Stmt<'a>]>,
    ) -> LResult<()> {
        let (v, t) = self.value(scrutinee, None)?;
        let Some(st) = t.scalar().filter(|s| s.is_int()) else {
            return Err(self.err(
                scrutinee.span,
                format!("`switch` needs an integer, found `{t}`"),
                "not an integer",
            ));
        };
        let join = self.new_block();
        let mut seen: HashMap<u64, Span> = HashMap::default();
        let mut arms = Vec::new();
        let mut bodies = Vec::new();
        let mut ok = true;
        for c in cases {
            let b = self.new_block();
            bodies.push(b);
            for &(x, span) in &c.values {
                match int_in_range(st, x) {
                    None => {
                        self.err(
                            span,
                            format!("case value {x} is out of range for `{st}`"),
                            "out of range",
                        );
                        ok = false;
                    }
                    Some(k) => {
                        if let Some(prev) = seen.insert(k, span) {
                            let (l, col) = self.map.line_col(prev.start);
                            self.errors.push(
                                Diagnostic::new(
                                    span,
                                    format!("case value {x} appears twice"),
                                    "repeated case",
                                )
                                .note(format!("first at {l}:{col}")),
                            );
                            ok = false;
                        }
                        arms.push((k, BlockCall::new(b, vec![])));
                    }
                }
            }
        }
        if !ok {
            return Err(Reported);
        }
        let default_block = if default.is_some() {
            self.new_block()
        } else {
            join
        };
        self.branch(InstData::Switch {
            arg: v,
            cases: arms.into(),
            default: BlockCall::new(default_block, vec![]),
        });
        for (b, c) in bodies.iter().zip(cases) {
            self.seal(*b);
            self.cur = Some(*b);
            self.scopes.push(HashMap::default());
            self.stmt_list(&c.body);
            self.scopes.pop();
            if self.cur.is_some() {
                self.jump(join);
            }
        }
        if let Some(d) = default {
            self.seal(default_block);
            self.cur = Some(default_block);
            self.scopes.push(HashMap::default());
            self.stmt_list(d);
            self.scopes.pop();
            if self.cur.is_some() {
                self.jump(join);
            }
        }
        self.continue_at(join);
        Ok(())
    }

    fn expect_type(&mut self, got: Type, want: Type, span: Span) -> LResult<()> {
        if got == want {
            Ok(())
        } else {
            Err(self.err(
                span,
                format!("mismatched types: expected `{want}`, found `{got}`"),
                format!("this is `{got}`"),
            ))
        }
    }

    /// Ends the current block by branching on condition `e` to `then` or `otherwise`, as
    /// **jumping code**: `&&`, `||` and `!` become branches rather than values, so that
    /// each operand is tested by a branch of its own. A static operand is then a static
    /// branch even when another operand is dynamic (`if d && s { A }` tests `d`, then `s`,
    /// and specialization drops `A` when `s` is false), instead of one dynamic boolean.
    /// The caller seals `then` and `otherwise`. On an error in an operand, the block goes
    /// to `otherwise`.
    fn branch_on(&mut self, e: &Expr<'a>, then: Block, otherwise: Block) -> LResult<()> {
        let to = |b: Block| BlockCall::new(b, vec![]);
        match &e.kind {
            ExprKind::Unary(UnOp::Not, inner) => self.branch_on(inner, otherwise, then),
            ExprKind::AndAlso(ab) | ExprKind::OrElse(ab) => {
                let and = matches!(e.kind, ExprKind::AndAlso(..));
                let [a, b] = &**ab;
                self.branch_on_chain(and, [a, b].into_iter(), then, otherwise)
            }
            ExprKind::Logic { and, operands } => {
                self.branch_on_chain(*and, operands.iter(), then, otherwise)
            }
            _ => match self.condition(e) {
                Ok(c) => {
                    self.branch(InstData::Brif {
                        cond: c,
                        then_dest: to(then),
                        else_dest: to(otherwise),
                    });
                    Ok(())
                }
                Err(r) => {
                    if self.cur.is_some() {
                        self.jump(otherwise);
                    }
                    Err(r)
                }
            },
        }
    }

    /// [`Self::branch_on`] for `e1 && e2 && ...` (`and`) or `e1 || e2 || ...`: each
    /// operand but the last branches to the next operand's block or out.
    fn branch_on_chain<'e>(
        &mut self,
        and: bool,
        operands: impl ExactSizeIterator<Item = &'e Expr<'a>>,
        then: Block,
        otherwise: Block,
    ) -> LResult<()>
    where
        'a: 'e,
    {
        let last = operands.len().saturating_sub(1);
        for (k, x) in operands.enumerate() {
            if k == last {
                return self.branch_on(x, then, otherwise);
            }
            let next = self.new_block();
            let r = if and {
                self.branch_on(x, next, otherwise)
            } else {
                self.branch_on(x, then, next)
            };
            self.seal(next);
            self.cur = Some(next);
            if r.is_err() {
                // Not reached: end it where the whole condition would go on failure.
                self.jump(otherwise);
                return r;
            }
        }
        Ok(())
    }

    fn condition(&mut self, e: &Expr<'a>) -> LResult<Value> {
        let (v, t) = self.value(e, Some(Type::BOOL))?;
        if t != Type::BOOL {
            return Err(self.err(
                e.span,
                format!("a condition must be `bool`, found `{t}`"),
                "not a bool",
            ));
        }
        Ok(v)
    }

    fn index(&mut self, e: &Expr<'a>) -> LResult<Value> {
        let (v, t) = self.value(e, Some(Type::I64))?;
        if !t.is_int() {
            return Err(self.err(
                e.span,
                format!("an index must be an integer, found `{t}`"),
                "not an integer",
            ));
        }
        Ok(v)
    }

    /// An expression that must produce a value.
    fn value(&mut self, e: &Expr<'a>, hint: Option<Type>) -> LResult<Typed> {
        match self.expr(e, hint)? {
            Some(tv) => Ok(tv),
            None => Err(self.err(e.span, "this call returns nothing", "used as a value")),
        }
    }

    fn expr(&mut self, e: &Expr<'a>, hint: Option<Type>) -> LResult<Option<Typed>> {
        self.set_loc(e.span);
        let tv = match &e.kind {
            ExprKind::Int(x) => self.int_literal(i128::from(*x), false, hint, e.span)?,
            ExprKind::Unary(UnOp::Neg, inner) if matches!(inner.kind, ExprKind::Int(_)) => {
                let ExprKind::Int(x) = inner.kind else {
                    unreachable!()
                };
                self.int_literal(i128::from(x), true, hint, e.span)?
            }
            ExprKind::Float(x) => {
                if let Some(t) = hint.filter(|t| *t != Type::F64 && t.is_int()) {
                    return Err(self.err(
                        e.span,
                        format!("mismatched types: expected `{t}`, found a float literal"),
                        "a float",
                    ));
                }
                (self.konst(Const::F64(*x)), Type::F64)
            }
            ExprKind::Bool(b) => (self.konst(Const::Bool(*b)), Type::BOOL),
            ExprKind::Var(name) => {
                let id = self.lookup(name, e.span)?;
                let ty = self.vars[id].ty;
                if ty.is_array() {
                    return Err(self.err(
                        e.span,
                        format!("array `{name}` used as a value"),
                        "an array is only indexed (`a[i]`, `a[i] = v`) or measured (`len(a)`)",
                    ));
                }
                (self.read(id), ty)
            }
            ExprKind::Unary(op, inner) => {
                let (v, t) = self.value(inner, hint)?;
                let ok = match op {
                    UnOp::Neg => t.is_int() || t == Type::F64,
                    UnOp::Not => t.is_int() || t == Type::BOOL,
                };
                if !ok {
                    let sym = if *op == UnOp::Neg { "-" } else { "!" };
                    return Err(self.err(
                        e.span,
                        format!("`{sym}` does not apply to `{t}`"),
                        format!("this is `{t}`"),
                    ));
                }
                self.set_loc(e.span);
                let op = if *op == UnOp::Neg {
                    UnaryOp::Neg
                } else {
                    UnaryOp::Not
                };
                (self.val(InstData::Unary { op, arg: v }), t)
            }
            ExprKind::Binary(op, ab) => self.chain(&ab[0], &[(*op, &ab[1])], hint)?,
            ExprKind::Chain(c) => {
                let rest: Vec<(BinOp, &Expr<'a>)> = c.rest.iter().map(|(op, e)| (*op, e)).collect();
                self.chain(&c.first, &rest, hint)?
            }
            ExprKind::MinMax { max, args } => {
                let op = if *max { BinOp::Gt } else { BinOp::Lt };
                let ((av, at), (bv, _)) = self.operands(&args.0, &args.1, hint, e.span, op)?;
                if !(at.is_int() || at == Type::F64) {
                    return Err(self.err(
                        e.span,
                        format!("`min`/`max` need integers or `f64`, found `{at}`"),
                        "not a number",
                    ));
                }
                let op = if *max { BinaryOp::Max } else { BinaryOp::Min };
                self.set_loc(e.span);
                (self.val(InstData::Binary { op, args: [av, bv] }), at)
            }
            ExprKind::AndAlso(ab) | ExprKind::OrElse(ab) => {
                let is_and = matches!(e.kind, ExprKind::AndAlso(..));
                let [a, b] = &**ab;
                let av = self.condition(a)?;
                (self.short_circuit(is_and, av, b)?, Type::BOOL)
            }
            ExprKind::Logic { and, operands } => {
                let mut av = self.condition(&operands[0])?;
                for b in &operands[1..] {
                    av = self.short_circuit(*and, av, b)?;
                }
                (av, Type::BOOL)
            }
            ExprKind::Cast(inner, to) => {
                let (v, t) = self.value(inner, None)?;
                match (t.scalar(), to.ty.scalar()) {
                    (Some(_), Some(s)) => {
                        self.set_loc(e.span);
                        (self.val(InstData::Cast { to: s, arg: v }), to.ty)
                    }
                    _ => {
                        return Err(self.err(
                            e.span,
                            format!("cannot cast `{t}` to `{}`", to.ty),
                            "casts convert between scalar types",
                        ))
                    }
                }
            }
            ExprKind::Len(inner) => {
                let (v, t) = self.place(inner)?;
                if let Type::Array { len, .. } = t {
                    let n = Const::Int(Scalar::I64, u64::from(len));
                    return Ok(Some((self.val(InstData::Const(n)), Type::I64)));
                }
                if !t.is_slice() {
                    return Err(self.err(
                        inner.span,
                        format!("`len` needs a slice, found `{t}`"),
                        "not a slice",
                    ));
                }
                self.set_loc(e.span);
                (self.val(InstData::Len { arg: v }), Type::I64)
            }
            ExprKind::Index {
                slice,
                index,
                is_static,
            } => {
                let (sv, st) = self.place(slice)?;
                if *is_static && st.is_array() {
                    return Err(self.err(
                        e.span,
                        "static load from an array".to_string(),
                        "`@` reads static data; read an array's elements with `a[i]`",
                    ));
                }
                let Some(elem) = st.elem() else {
                    let msg = if *is_static {
                        format!("static load from a value of type `{st}`, which is not a slice")
                    } else {
                        format!("cannot index into a value of type `{st}`")
                    };
                    return Err(self.err(slice.span, msg, "not a slice"));
                };
                let iv = self.index(index)?;
                self.set_loc(e.span);
                let data = if *is_static {
                    InstData::StaticLoad {
                        slice: sv,
                        index: iv,
                    }
                } else {
                    InstData::Load {
                        slice: sv,
                        index: iv,
                    }
                };
                (self.val(data), Type::Scalar(elem))
            }
            ExprKind::Call(call) => {
                return self.call(&call.name, &call.args, call.is_static, e.span)
            }
        };
        Ok(Some(tv))
    }

    /// The slice or array an access or `len` names: an array variable is read here, the
    /// one place where its value may be used.
    fn place(&mut self, e: &Expr<'a>) -> LResult<(Value, Type)> {
        match &e.kind {
            ExprKind::Var(name) => {
                let id = self.lookup(name, e.span)?;
                Ok((self.read(id), self.vars[id].ty))
            }
            _ => self.value(e, None),
        }
    }

    fn int_literal(
        &mut self,
        x: i128,
        negate: bool,
        hint: Option<Type>,
        span: Span,
    ) -> LResult<Typed> {
        let x = if negate { -x } else { x };
        match hint {
            Some(Type::F64) => Ok((self.konst(Const::F64(x as f64)), Type::F64)),
            Some(Type::Scalar(s)) if s.is_int() => match int_in_range(s, x) {
                Some(bits) => Ok((self.konst(Const::Int(s, bits)), Type::Scalar(s))),
                None => Err(self.err(
                    span,
                    format!("literal {x} is out of range for `{s}`"),
                    format!("does not fit in `{s}`"),
                )),
            },
            _ => match int_in_range(Scalar::I64, x) {
                Some(bits) => Ok((self.konst(Const::Int(Scalar::I64, bits)), Type::I64)),
                None => Err(self.err(
                    span,
                    format!("literal {x} is out of range for `i64`"),
                    "add a cast or a typed context",
                )),
            },
        }
    }

    /// Lowers two operands that must have one type; a literal-only operand takes the type
    /// of the other.
    fn operands(
        &mut self,
        a: &Expr<'a>,
        b: &Expr<'a>,
        hint: Option<Type>,
        span: Span,
        op: BinOp,
    ) -> LResult<(Typed, Typed)> {
        let hint = if op.is_comparison() { None } else { hint };
        let (x, y) = if a.is_literal() && !b.is_literal() {
            let y = self.value(b, hint)?;
            let x = self.value(a, Some(y.1))?;
            (x, y)
        } else {
            let x = self.value(a, hint)?;
            let y = self.value(b, Some(x.1))?;
            (x, y)
        };
        if x.1 != y.1 {
            return Err(self.err(
                span,
                format!("mismatched types: `{}` {} `{}`", x.1, op.symbol(), y.1),
                "both operands must have the same type",
            ));
        }
        Ok((x, y))
    }

    /// `av && b` (`and`) or `av || b`, where `av` is the left operand's value: `b` is
    /// evaluated only when it decides.
    fn short_circuit(&mut self, and: bool, av: Value, b: &Expr<'a>) -> LResult<Value> {
        let (rhs, join) = (self.new_block(), self.new_block());
        let param = self.f.append_block_param(join, Type::BOOL, None);
        let (then_dest, else_dest) = if and {
            (BlockCall::new(rhs, vec![]), BlockCall::new(join, vec![av]))
        } else {
            (BlockCall::new(join, vec![av]), BlockCall::new(rhs, vec![]))
        };
        self.branch(InstData::Brif {
            cond: av,
            then_dest,
            else_dest,
        });
        self.seal(rhs);
        self.cur = Some(rhs);
        let bv = self.condition(b);
        let bv = match bv {
            Ok(v) => v,
            Err(r) => {
                self.seal(join);
                self.cur = Some(join);
                return Err(r);
            }
        };
        self.branch(InstData::Jump {
            dest: BlockCall::new(join, vec![bv]),
        });
        self.seal(join);
        self.cur = Some(join);
        Ok(param)
    }

    /// Lowers `first op1 e1 op2 e2 ...`, left-associative, without recursing on its length:
    /// the same code, types and errors as the nested binary operations it stands for.
    ///
    /// The nested form lowers node `i` (`partial(i-1) op_i e_i`) by lowering its left
    /// operand first with the node's hint (none below a comparison), then its right
    /// operand with the left's type; except that a literal-only left operand facing a
    /// non-literal right one takes the right's type, so the right one goes first. That
    /// can only happen at the first non-literal operand of a literal prefix.
    fn chain(
        &mut self,
        first: &Expr<'a>,
        rest: &[(BinOp, &Expr<'a>)],
        hint: Option<Type>,
    ) -> LResult<Typed> {
        // The hint each node passes to its operands, from the top down: none below a
        // comparison.
        let last_cmp = rest.iter().rposition(|(op, _)| op.is_comparison());
        let hints = |i: usize| {
            if last_cmp.is_some_and(|c| i <= c) {
                None
            } else {
                hint
            }
        };
        let span_of = |i: usize| first.span.to(rest[i].1.span);
        // Node j is the literal-first case when operands 0..j are literal and joined by
        // non-comparisons (so its left operand is literal) and operand j is not.
        let mut start = 0;
        let mut x = None;
        if first.is_literal() {
            for (j, &(op, b)) in rest.iter().enumerate() {
                if !b.is_literal() {
                    let y = self.value(b, hints(j))?;
                    let mut acc = self.value(first, Some(y.1))?;
                    for (i, &(op_i, e_i)) in rest[..j].iter().enumerate() {
                        let yi = self.value(e_i, Some(acc.1))?;
                        acc = self.binary_op(op_i, acc, yi, span_of(i))?;
                    }
                    x = Some(self.binary_op(op, acc, y, span_of(j))?);
                    start = j + 1;
                    break;
                }
                if op.is_comparison() {
                    break;
                }
            }
        }
        let mut acc = match x {
            Some(acc) => acc,
            None => self.value(first, hints(0))?,
        };
        for (i, &(op, b)) in rest.iter().enumerate().skip(start) {
            let y = self.value(b, Some(acc.1))?;
            acc = self.binary_op(op, acc, y, span_of(i))?;
        }
        Ok(acc)
    }

    /// `x op y` on lowered operands, which must have one type.
    fn binary_op(&mut self, op: BinOp, x: Typed, y: Typed, span: Span) -> LResult<Typed> {
        if x.1 != y.1 {
            return Err(self.err(
                span,
                format!("mismatched types: `{}` {} `{}`", x.1, op.symbol(), y.1),
                "both operands must have the same type",
            ));
        }
        let ((av, t), (bv, _)) = (x, y);
        self.set_loc(span);
        if op.is_comparison() {
            if t.is_slice() {
                return Err(self.err(
                    span,
                    format!("cannot compare slices (`{t}`)"),
                    "compare elements instead",
                ));
            }
            let cmp = match op {
                BinOp::Eq => CmpOp::Eq,
                BinOp::Ne => CmpOp::Ne,
                BinOp::Lt => CmpOp::Lt,
                BinOp::Le => CmpOp::Le,
                BinOp::Gt => CmpOp::Gt,
                _ => CmpOp::Ge,
            };
            return Ok((
                self.val(InstData::Cmp {
                    op: cmp,
                    args: [av, bv],
                }),
                Type::BOOL,
            ));
        }
        let (irop, ok) = match op {
            BinOp::Add => (BinaryOp::Add, t.is_int() || t == Type::F64),
            BinOp::Sub => (BinaryOp::Sub, t.is_int() || t == Type::F64),
            BinOp::Mul => (BinaryOp::Mul, t.is_int() || t == Type::F64),
            BinOp::Div => (BinaryOp::Div, t.is_int() || t == Type::F64),
            BinOp::Rem => (BinaryOp::Rem, t.is_int() || t == Type::F64),
            BinOp::And => (BinaryOp::And, t.is_int() || t == Type::BOOL),
            BinOp::Or => (BinaryOp::Or, t.is_int() || t == Type::BOOL),
            BinOp::Xor => (BinaryOp::Xor, t.is_int() || t == Type::BOOL),
            BinOp::Shl => (BinaryOp::Shl, t.is_int()),
            _ => (BinaryOp::Shr, t.is_int()),
        };
        if !ok {
            return Err(self.err(
                span,
                format!("`{}` does not apply to `{t}`", op.symbol()),
                format!("operands are `{t}`"),
            ));
        }
        Ok((
            self.val(InstData::Binary {
                op: irop,
                args: [av, bv],
            }),
            t,
        ))
    }

    fn call(
        &mut self,
        name: &Ident<'a>,
        args: &[Expr<'a>],
        is_static: bool,
        span: Span,
    ) -> LResult<Option<Typed>> {
        let callee = if let Some(id) = self.m.func_by_name(name.name) {
            Callee::Func(id)
        } else if let Some(id) = self.m.extern_by_name(name.name) {
            Callee::Extern(id)
        } else {
            return Err(self.err(
                name.span,
                format!("call to undefined function `{}`", name.name),
                "not declared",
            ));
        };
        if is_static && !self.m.is_pure(callee) {
            return Err(self.err(
                name.span,
                format!(
                    "static call of `{}`, which is not a pure host function",
                    name.name
                ),
                "only `extern pure fn` can be called with `@`",
            ));
        }
        let sig = if callee == Callee::Func(self.me) {
            self.f.sig.clone()
        } else {
            self.m.callee_sig(callee).clone()
        };
        if sig.params.len() != args.len() {
            return Err(self.err(
                span,
                format!(
                    "`{}` takes {} argument(s), {} given",
                    name.name,
                    sig.params.len(),
                    args.len()
                ),
                "wrong number of arguments",
            ));
        }
        let mut vals = Vec::new();
        for (a, &p) in args.iter().zip(&sig.params) {
            let (v, t) = self.value(a, Some(p))?;
            self.expect_type(t, p, a.span)?;
            vals.push(v);
        }
        self.set_loc(span);
        let i = self.inst(
            InstData::Call {
                callee,
                args: vals.into(),
                is_static,
            },
            sig.ret,
        );
        Ok(sig.ret.map(|t| (self.f.first_result(i), t)))
    }
}

/// `x` as canonical bits of `s`, if it is a value of `s`.
fn int_in_range(s: Scalar, x: i128) -> Option<u64> {
    let (lo, hi) = semantics::int_range(s);
    let (lo, hi) = if s.is_signed() {
        (lo as i64 as i128, hi as i64 as i128)
    } else {
        (lo as i128, hi as i128)
    };
    (lo..=hi).contains(&x).then_some(x as u64)
}

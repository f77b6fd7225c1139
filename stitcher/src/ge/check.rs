//! The checker of stitch programs, both forms. A program that checks can be run by an
//! executor without internal errors (budgets aside); tests run the checker on every stitch
//! program the static compiler builds. Each error names the entity (`b3`, `u1`, `r7`).
//!
//! CFG form:
//! - the entry block exists; its parameters are the function's, static exactly at the key
//!   parameters (which are increasing and in range), dynamic ones with the parameter type;
//! - every register is below `num_regs`; callee and host references are in the tables;
//! - in each block, in order: a register is read only after it is defined as what the use
//!   needs (static for holes and setup operands, dynamic for dynamic operands); a block's
//!   definitions are its parameters, its promoted values (static) and their sources
//!   (dynamic inputs), its live-ins, and its operations' results; nothing is defined twice;
//! - every edge passes one argument per target parameter, static for static parameters,
//!   and the target's live-ins are defined, with the same binding time, at the edge;
//! - a static branch condition is static; `return` matches the function's result.
//!
//! Linearized form (each unit walked in order, static branches on every path):
//! - a unit begins with an open block bound to its inputs, with its key registers static;
//! - `emit` and `lift` need an open block; a `label` needs none and opens one whose only
//!   dynamic values are its parameters (static registers carry on); every terminator
//!   directive needs an open block and closes it; a unit ends with no open block;
//! - the two sides of a static branch or has-been-stitched lookup leave the block equally
//!   open or closed, and only what both define is defined after; the body of `if_flag`
//!   leaves the block as it found it;
//! - a `loop` holds a `break`; falling off its end leaves the block as it was at its top;
//!   after it, the registers defined before it are defined, and the block is open as the
//!   `break`s (which agree) leave it. Registers are setup-code variables here: redefining
//!   one is allowed;
//! - targets name blocks that the same unit labels, with as many arguments as the label
//!   has parameters; lazy points and promotions name existing units, with as many
//!   arguments as the unit has inputs; flags are below `num_flags`.

use std::collections::{HashMap, HashSet};

use dyc_templates::template::TOp;

use super::cfg::{CalleeDecl, Edge, Op, Operand, Param, ProgramHeader, SetupOp, Term};
use super::entities::{Block, Reg};
use super::linear::{Dir, LinearProgram, LinearUnit, Target};
use super::{CalleeId, StitchProgram};

/// A violated invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckError {
    /// The entity where it was found (`b3`, `u1`, or the program's name).
    pub entity: String,
    pub message: String,
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.entity, self.message)
    }
}

/// All errors of one program, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckErrors(pub Vec<CheckError>);

impl std::fmt::Display for CheckErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for e in &self.0 {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CheckErrors {}

/// Binding times defined so far.
#[derive(Clone, Default)]
struct Env {
    statics: HashSet<Reg>,
    dyns: HashSet<Reg>,
}

struct Checker {
    num_regs: u32,
    /// Registers are variables (the linearized form's setup code), not SSA values.
    redefine: bool,
    errors: Vec<CheckError>,
    entity: String,
}

impl Checker {
    fn err(&mut self, message: String) {
        self.errors.push(CheckError {
            entity: self.entity.clone(),
            message,
        });
    }

    fn reg(&mut self, r: Reg) -> bool {
        let ok = r.as_u32() < self.num_regs;
        if !ok {
            self.err(format!("{r} is beyond the {} registers", self.num_regs));
        }
        ok
    }

    /// A checker for a program with header `h`, whose key and tables it checks first
    /// (both forms share them).
    fn new(h: &ProgramHeader, redefine: bool) -> Checker {
        let mut c = Checker {
            num_regs: h.num_regs,
            redefine,
            errors: Vec::new(),
            entity: h.name.clone(),
        };
        if h.key_params.windows(2).any(|w| w[0] >= w[1])
            || h.key_params.iter().any(|&k| k >= h.param_types.len())
        {
            c.err(format!(
                "key parameters {:?} are not increasing positions of parameters",
                h.key_params
            ));
        }
        for (callee, d) in h.callees.iter() {
            if let CalleeDecl::Host { host } = d {
                if h.hosts.get(*host).is_none() {
                    c.entity = callee.to_string();
                    c.err(format!("host {host} does not exist"));
                }
            }
        }
        c.entity = h.name.clone();
        c
    }

    fn def_static(&mut self, env: &mut Env, r: Reg) {
        env.dyns.remove(&r);
        if self.reg(r) && !self.redefine && (env.statics.contains(&r) || env.dyns.contains(&r)) {
            self.err(format!("{r} is defined twice"));
        }
        env.statics.insert(r);
    }

    fn def_dyn(&mut self, env: &mut Env, r: Reg) {
        env.statics.remove(&r);
        if self.reg(r) && !self.redefine && (env.statics.contains(&r) || env.dyns.contains(&r)) {
            self.err(format!("{r} is defined twice"));
        }
        env.dyns.insert(r);
    }

    fn use_static(&mut self, env: &Env, r: Reg, what: &str) {
        if self.reg(r) && !env.statics.contains(&r) {
            let why = if env.dyns.contains(&r) {
                "is dynamic"
            } else {
                "is not defined"
            };
            self.err(format!("{what} {r} {why}, a static register is needed"));
        }
    }

    fn use_dyn(&mut self, env: &Env, r: Reg, what: &str) {
        if self.reg(r) && !env.dyns.contains(&r) {
            let why = if env.statics.contains(&r) {
                "is static"
            } else {
                "is not defined"
            };
            self.err(format!("{what} {r} {why}, a dynamic variable is needed"));
        }
    }

    fn operand(&mut self, env: &Env, o: Operand, what: &str) {
        match o {
            Operand::Static(r) => self.use_static(env, r, what),
            Operand::Dyn(r) => self.use_dyn(env, r, what),
        }
    }

    fn setup(&mut self, env: &Env, op: &SetupOp, callees: &dyn Fn(CalleeId) -> Option<bool>) {
        for r in op.uses() {
            self.use_static(env, r, "setup operand");
        }
        if let SetupOp::CallPure { host, callee, .. } = op {
            match callees(*callee) {
                None => self.err(format!("callee {callee} does not exist")),
                Some(false) => self.err(format!("static call of {callee}, which is not {host}")),
                Some(true) => {}
            }
        }
    }

    fn emit(&mut self, env: &Env, op: &TOp, args: &[Operand], ncallees: usize) {
        for &a in args {
            self.operand(env, a, "operand");
        }
        if let TOp::Call { callee, .. } = op {
            if *callee as usize >= ncallees {
                self.err(format!("callee c{callee} does not exist"));
            }
        }
    }
}

/// Checks a stitch program in CFG form.
pub fn check_cfg(p: &StitchProgram) -> Result<(), CheckErrors> {
    let mut c = Checker::new(&p.header, false);
    match p.blocks.get(p.entry) {
        None => c.err(format!("entry block {} does not exist", p.entry)),
        Some(b) => {
            c.entity = p.entry.to_string();
            if b.params.len() != p.header.param_types.len()
                || !b.static_live_in.is_empty()
                || !b.dyn_live_in.is_empty()
            {
                c.err("the entry block's parameters are not the function's".into());
            }
            for (k, (param, &ty)) in b.params.iter().zip(&p.header.param_types).enumerate() {
                match param {
                    Param::Static(_) if p.header.key_params.contains(&k) => {}
                    Param::Dyn(_, t) if !p.header.key_params.contains(&k) && *t == ty => {}
                    _ => c.err(format!(
                        "parameter {k} is not {} of type {ty}",
                        if p.header.key_params.contains(&k) {
                            "static"
                        } else {
                            "dynamic"
                        }
                    )),
                }
            }
        }
    }
    let is_host = |callee| p.header.callee_is_host(callee);
    // Definitions at each block's end, for the live-ins its successors expect.
    for (id, b) in p.blocks.iter() {
        c.entity = id.to_string();
        let mut env = Env::default();
        for param in &b.params {
            match *param {
                Param::Static(r) => c.def_static(&mut env, r),
                Param::Dyn(r, _) => c.def_dyn(&mut env, r),
            }
        }
        for &r in &b.static_live_in {
            c.def_static(&mut env, r);
        }
        for &(r, _) in &b.dyn_live_in {
            c.def_dyn(&mut env, r);
        }
        for &(src, dst) in &b.promote {
            c.use_dyn(&env, src, "promoted variable");
            c.def_static(&mut env, dst);
        }
        for op in &b.ops {
            match op {
                Op::Setup { dst, op, .. } => {
                    c.setup(&env, op, &is_host);
                    c.def_static(&mut env, *dst);
                }
                Op::Emit { dst, op, args, .. } => {
                    c.emit(&env, op, args, p.header.callees.len());
                    if let Some(d) = dst {
                        c.def_dyn(&mut env, *d);
                    }
                }
                Op::Lift { dst, src } => {
                    c.operand(&env, *src, "lifted operand");
                    c.def_dyn(&mut env, *dst);
                }
                Op::ArrayNew { dst, .. } => c.def_dyn(&mut env, *dst),
                Op::ArrayLoad {
                    dst, arr, index, ..
                } => {
                    c.use_dyn(&env, *arr, "array");
                    c.operand(&env, *index, "index");
                    c.def_dyn(&mut env, *dst);
                }
                Op::ArrayStore {
                    arr, index, value, ..
                } => {
                    c.use_dyn(&env, *arr, "array");
                    c.operand(&env, *index, "index");
                    c.operand(&env, *value, "stored value");
                }
            }
        }
        let edge = |c: &mut Checker, e: &Edge| {
            let Some(t) = p.blocks.get(e.block) else {
                c.err(format!("branch to {}, which does not exist", e.block));
                return;
            };
            if t.params.len() != e.args.len() {
                c.err(format!(
                    "edge to {} passes {} arguments for {} parameters",
                    e.block,
                    e.args.len(),
                    t.params.len()
                ));
            }
            for (param, &a) in t.params.iter().zip(&e.args) {
                match (param, a) {
                    (Param::Static(r), Operand::Dyn(_)) => c.err(format!(
                        "edge to {} passes a dynamic value for static parameter {r}",
                        e.block
                    )),
                    _ => c.operand(&env, a, "argument"),
                }
            }
            for &r in &t.static_live_in {
                c.use_static(&env, r, &format!("live-in of {}", e.block));
            }
            for &(r, _) in &t.dyn_live_in {
                c.use_dyn(&env, r, &format!("live-in of {}", e.block));
            }
        };
        match &b.term {
            Term::Branch { cond, .. } => c.operand(&env, *cond, "condition"),
            Term::Switch { arg, .. } => c.operand(&env, *arg, "switch operand"),
            Term::Return(v) => {
                if v.is_some() != p.header.ret.is_some() {
                    c.err("return does not match the function's result".into());
                }
                if let Some(v) = v {
                    c.operand(&env, *v, "returned value");
                }
            }
            Term::Jump(_) | Term::Trap(_) => {}
        }
        for e in b.term.edges() {
            edge(&mut c, e);
        }
    }
    if c.errors.is_empty() {
        Ok(())
    } else {
        Err(CheckErrors(c.errors))
    }
}

/// The state of the walk through a unit.
#[derive(Clone)]
struct LState {
    env: Env,
    open: bool,
}

struct LinearChecker<'a> {
    c: Checker,
    p: &'a LinearProgram,
    /// Parameter counts of the blocks each unit labels.
    labels: HashMap<Block, usize>,
    /// For each enclosing loop, the states at its `break`s.
    breaks: Vec<Vec<LState>>,
}

impl LinearChecker<'_> {
    fn need_open(&mut self, st: &LState, what: &str) {
        if !st.open {
            self.c.err(format!("{what} without an open block"));
        }
    }

    fn target(&mut self, st: &LState, t: &Target) {
        for &r in &t.key {
            self.c.use_static(&st.env, r, "key register");
        }
        for &a in &t.args {
            self.c.operand(&st.env, a, "argument");
        }
        match self.labels.get(&t.block) {
            None => self
                .c
                .err(format!("target {} is not labelled in this unit", t.block)),
            Some(&n) if n != t.args.len() => self.c.err(format!(
                "target {} passes {} arguments for {n} parameters",
                t.block,
                t.args.len()
            )),
            Some(_) => {}
        }
    }

    fn unit_args(&mut self, st: &LState, unit: super::UnitId, args: &[Operand]) {
        for &a in args {
            self.c.operand(&st.env, a, "argument");
        }
        match self.p.units.get(unit) {
            None => self.c.err(format!("unit {unit} does not exist")),
            Some(u) if u.inputs.len() != args.len() => self.c.err(format!(
                "{unit} takes {} inputs, {} given",
                u.inputs.len(),
                args.len()
            )),
            Some(_) => {}
        }
    }

    /// Joins the states after two alternatives.
    fn join(&mut self, a: LState, b: LState, what: &str) -> LState {
        if a.open != b.open {
            self.c.err(format!(
                "the sides of {what} leave the block differently open"
            ));
        }
        LState {
            open: a.open,
            env: Env {
                statics: a
                    .env
                    .statics
                    .intersection(&b.env.statics)
                    .copied()
                    .collect(),
                dyns: a.env.dyns.intersection(&b.env.dyns).copied().collect(),
            },
        }
    }

    fn flag(&mut self, f: super::FlagId) {
        if f.as_u32() >= self.p.num_flags {
            self.c
                .err(format!("flag {f} is beyond the {} flags", self.p.num_flags));
        }
    }

    fn seq(&mut self, mut st: LState, ds: &[Dir]) -> LState {
        let is_host = |callee| self.p.header.callee_is_host(callee);
        for d in ds {
            match d {
                Dir::Setup { dst, op, .. } => {
                    self.c.setup(&st.env, op, &is_host);
                    self.c.def_static(&mut st.env, *dst);
                }
                Dir::Label { key, params, .. } => {
                    if st.open {
                        self.c.err("label while a block is open".into());
                    }
                    for &r in key {
                        self.c.use_static(&st.env, r, "key register");
                    }
                    st.env.dyns.clear();
                    for &(r, _) in params {
                        self.c.def_dyn(&mut st.env, r);
                    }
                    st.open = true;
                }
                Dir::Emit { dst, op, args, .. } => {
                    self.need_open(&st, "emit");
                    self.c.emit(&st.env, op, args, self.p.header.callees.len());
                    if let Some(r) = dst {
                        self.c.def_dyn(&mut st.env, *r);
                    }
                }
                Dir::Lift { dst, src } => {
                    self.need_open(&st, "lift");
                    self.c.operand(&st.env, *src, "lifted operand");
                    self.c.def_dyn(&mut st.env, *dst);
                }
                Dir::If {
                    cond,
                    then_dirs,
                    else_dirs,
                } => {
                    self.c.use_static(&st.env, *cond, "condition");
                    let a = self.seq(st.clone(), then_dirs);
                    let b = self.seq(st, else_dirs);
                    st = self.join(a, b, "a static branch");
                }
                Dir::Switch {
                    arg,
                    cases,
                    default,
                } => {
                    self.c.use_static(&st.env, *arg, "switch operand");
                    let mut out = self.seq(st.clone(), default);
                    for (_, body) in cases {
                        let s = self.seq(st.clone(), body);
                        out = self.join(out, s, "a static switch");
                    }
                    st = out;
                }
                Dir::Loop { dirs } => {
                    self.breaks.push(Vec::new());
                    let end = self.seq(st.clone(), dirs);
                    if end.open != st.open {
                        self.c
                            .err("a loop iteration leaves the block differently open".into());
                    }
                    let mut outs = self.breaks.pop().unwrap_or_default().into_iter();
                    match outs.next() {
                        None => self.c.err("a loop without a break".into()),
                        Some(first) => {
                            // After the loop: what was defined before it, and whether the
                            // breaks (which must agree) leave a block open.
                            let mut out = first;
                            for o in outs {
                                out = self.join(out, o, "the breaks of a loop");
                            }
                            st = LState {
                                env: st.env,
                                open: out.open,
                            };
                        }
                    }
                }
                Dir::Break => match self.breaks.last_mut() {
                    Some(b) => b.push(st.clone()),
                    None => self.c.err("break outside a loop".into()),
                },
                Dir::SetFlag(f) => self.flag(*f),
                Dir::IfFlag { flag, dirs } => {
                    self.flag(*flag);
                    let s = self.seq(st.clone(), dirs);
                    st = self.join(st, s, "a flag test");
                }
                Dir::Stitched { key, hit, miss, .. } => {
                    for &r in key {
                        self.c.use_static(&st.env, r, "key register");
                    }
                    let a = self.seq(st.clone(), hit);
                    let b = self.seq(st, miss);
                    st = self.join(a, b, "a has-been-stitched lookup");
                }
                Dir::Jump(t) => {
                    self.need_open(&st, "jump");
                    self.target(&st, t);
                    st.open = false;
                }
                Dir::Branch {
                    cond,
                    then_target,
                    else_target,
                } => {
                    self.need_open(&st, "branch");
                    self.c.use_dyn(&st.env, *cond, "condition");
                    self.target(&st, then_target);
                    self.target(&st, else_target);
                    st.open = false;
                }
                Dir::SwitchDyn {
                    arg,
                    cases,
                    default,
                } => {
                    self.need_open(&st, "switch");
                    self.c.use_dyn(&st.env, *arg, "switch operand");
                    for (_, t) in cases {
                        self.target(&st, t);
                    }
                    self.target(&st, default);
                    st.open = false;
                }
                Dir::Return(v) => {
                    self.need_open(&st, "return");
                    if v.is_some() != self.p.header.ret.is_some() {
                        self.c
                            .err("return does not match the function's result".into());
                    }
                    if let Some(v) = v {
                        self.c.operand(&st.env, *v, "returned value");
                    }
                    st.open = false;
                }
                Dir::Trap(_) => {
                    self.need_open(&st, "trap");
                    st.open = false;
                }
                Dir::Lazy { unit, args } => {
                    self.need_open(&st, "lazy point");
                    self.unit_args(&st, *unit, args);
                    if let Some(u) = self.p.units.get(*unit) {
                        for &r in &u.key {
                            self.c
                                .use_static(&st.env, r, "key register of the lazy unit");
                        }
                    }
                    st.open = false;
                }
                Dir::Promote {
                    unit,
                    promoted,
                    args,
                } => {
                    self.need_open(&st, "promotion");
                    for &r in promoted {
                        self.c.use_dyn(&st.env, r, "promoted variable");
                    }
                    self.unit_args(&st, *unit, args);
                    st.open = false;
                }
            }
        }
        st
    }
}

fn labels(ds: &[Dir], out: &mut HashMap<Block, usize>) {
    for d in ds {
        match d {
            Dir::Label { block, params, .. } => {
                out.insert(*block, params.len());
            }
            Dir::If {
                then_dirs,
                else_dirs,
                ..
            } => {
                labels(then_dirs, out);
                labels(else_dirs, out);
            }
            Dir::Switch { cases, default, .. } => {
                for (_, b) in cases {
                    labels(b, out);
                }
                labels(default, out);
            }
            Dir::IfFlag { dirs, .. } | Dir::Loop { dirs } => labels(dirs, out),
            Dir::Stitched { hit, miss, .. } => {
                labels(hit, out);
                labels(miss, out);
            }
            _ => {}
        }
    }
}

/// Checks a stitch program in linearized form.
pub fn check_linear(p: &LinearProgram) -> Result<(), CheckErrors> {
    let mut lc = LinearChecker {
        c: Checker::new(&p.header, true),
        p,
        labels: HashMap::new(),
        breaks: Vec::new(),
    };
    if p.units.get(p.entry).is_none() {
        lc.c.err(format!("entry unit {} does not exist", p.entry));
    }
    for (id, u) in p.units.iter() {
        lc.c.entity = id.to_string();
        check_unit(&mut lc, u);
    }
    if lc.c.errors.is_empty() {
        Ok(())
    } else {
        Err(CheckErrors(lc.c.errors))
    }
}

fn check_unit(lc: &mut LinearChecker, u: &LinearUnit) {
    lc.labels.clear();
    labels(&u.body, &mut lc.labels);
    let mut st = LState {
        env: Env::default(),
        open: true,
    };
    for &r in &u.key {
        lc.c.def_static(&mut st.env, r);
    }
    for &(r, _) in &u.inputs {
        lc.c.def_dyn(&mut st.env, r);
    }
    let end = lc.seq(st, &u.body);
    if end.open {
        lc.c.err("the unit ends with an open block".into());
    }
}

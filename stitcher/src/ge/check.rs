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

use std::collections::HashSet;

use dyc_templates::template::TOp;

use super::cfg::{CalleeDecl, Edge, Op, Operand, Param, ProgramHeader, SetupOp, Term};
use super::entities::Reg;
use super::linear::Step;
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
    fn new(h: &ProgramHeader) -> Checker {
        let mut c = Checker {
            num_regs: h.num_regs,
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
        if self.reg(r) && (env.statics.contains(&r) || env.dyns.contains(&r)) {
            self.err(format!("{r} is defined twice"));
        }
        env.statics.insert(r);
    }

    fn def_dyn(&mut self, env: &mut Env, r: Reg) {
        env.statics.remove(&r);
        if self.reg(r) && (env.statics.contains(&r) || env.dyns.contains(&r)) {
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
    let mut c = Checker::new(&p.header);
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

/// Checks the plan of a stitch program (nothing to check without one): every block has
/// a root entry, the entry and every promotion block are roots, every step position is in
/// range, `stitch` names existing non-root blocks or roots at their tree's first step,
/// `fork` follows a `stitch` of the same block, which ends in a static branch with one arm
/// per edge, and every tree ends (the steps form no cycle, so every path reaches `end`).
pub fn check_plan(p: &StitchProgram) -> Result<(), CheckErrors> {
    let Some(plan) = &p.plan else {
        return Ok(());
    };
    let mut c = Checker::new(&p.header);
    let n = plan.steps.len() as u32;
    if plan.roots.len() != p.blocks.len() || plan.rank.len() != p.blocks.len() {
        c.err(format!(
            "{} root entries and {} ranks for {} blocks",
            plan.roots.len(),
            plan.rank.len(),
            p.blocks.len()
        ));
        return Err(CheckErrors(c.errors));
    }
    if let Some(r) = plan.rank.iter().find(|&&r| r as usize >= p.blocks.len()) {
        c.err(format!("rank {r} for {} blocks", p.blocks.len()));
    }
    for (b, d) in p.blocks.iter() {
        c.entity = b.to_string();
        if (b == p.entry || !d.promote.is_empty()) && !plan.is_root(b) {
            c.err("the entry and promotion blocks must be roots".to_string());
        }
        if let Some(pc) = plan.root(b) {
            if !matches!(plan.steps.get(pc as usize), Some(Step::Stitch { block, .. }) if *block == b)
            {
                c.err(format!("its tree starts at {pc}, which does not stitch it"));
            }
        }
    }
    for (pc, step) in plan.steps.iter().enumerate() {
        c.entity = format!("step {pc}");
        match step {
            Step::Stitch { block, .. } => {
                if p.blocks.get(*block).is_none() {
                    c.err(format!("{block} does not exist"));
                } else if plan.is_root(*block) && plan.root(*block) != Some(pc as u32) {
                    c.err(format!("root {block} stitched inside a tree"));
                }
                if pc as u32 + 1 >= n {
                    c.err("the last step stitches".to_string());
                }
            }
            Step::Fork { block, arms } => {
                let prev = pc.checked_sub(1).and_then(|k| plan.steps.get(k));
                if !matches!(prev, Some(Step::Stitch { block: b, .. }) if b == block) {
                    c.err(format!("fork on {block} does not follow its stitch"));
                }
                match p.blocks.get(*block).map(|d| &d.term) {
                    Some(
                        t @ Term::Branch {
                            cond: Operand::Static(_),
                            ..
                        },
                    )
                    | Some(
                        t @ Term::Switch {
                            arg: Operand::Static(_),
                            ..
                        },
                    ) => {
                        if t.edges().len() != arms.len() {
                            c.err(format!("{} arms for {} edges", arms.len(), t.edges().len()));
                        }
                    }
                    _ => c.err(format!("{block} does not end in a static branch")),
                }
                for &a in arms {
                    if a >= n {
                        c.err(format!("arm {a} is out of range"));
                    }
                }
            }
            Step::Goto(t) => {
                if *t >= n {
                    c.err(format!("goto {t} is out of range"));
                }
            }
            Step::End => {}
        }
    }
    if c.errors.is_empty() {
        // Every path ends: no cycle (arms and `goto`s may lead to shared suffixes).
        let mut state = vec![0u8; n as usize]; // 0 new, 1 on the stack, 2 done
        for start in 0..n as usize {
            let mut stack = vec![(start, false)];
            while let Some((pc, leaving)) = stack.pop() {
                if leaving {
                    state[pc] = 2;
                    continue;
                }
                match state[pc] {
                    2 => continue,
                    1 => {
                        c.entity = format!("step {pc}");
                        c.err("steps form a cycle".to_string());
                        return Err(CheckErrors(c.errors));
                    }
                    _ => {}
                }
                state[pc] = 1;
                stack.push((pc, true));
                match &plan.steps[pc] {
                    Step::Stitch { .. } => stack.push((pc + 1, false)),
                    Step::Fork { arms, .. } => {
                        stack.extend(arms.iter().map(|&a| (a as usize, false)))
                    }
                    Step::Goto(t) => stack.push((*t as usize, false)),
                    Step::End => {}
                }
            }
        }
    }
    if c.errors.is_empty() {
        Ok(())
    } else {
        Err(CheckErrors(c.errors))
    }
}

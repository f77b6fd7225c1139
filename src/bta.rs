//! Binding-time analysis: which values, instructions and branches are **static**
//! (computable when specializing, from run-time constants) and which are **dynamic**.
//!
//! ## Lattice
//!
//! Per SSA value: `⊥ (not reached) < Static < Dynamic`; the analysis only moves values up,
//! so it terminates (each value changes at most twice).
//!
//! ## Transfer functions
//!
//! | definition | binding time |
//! |---|---|
//! | parameter of the entry block | `Static` if it is a **key parameter**, else `Dynamic` |
//! | constant | `Static` |
//! | `neg`, `not`, binary ops, `cmp`, `select`, `cast`, `len` | join (max) of the operands |
//! | `load_static s, i` (`s@[i]`) | join of `s` and `i` |
//! | `call_static f(args)` of a pure host (`@f`) | join of the arguments |
//! | `load`, `call`, any call of a module function | `Dynamic` |
//! | `make_static` results | `Static` |
//! | `make_dynamic` results | `Dynamic` |
//! | block parameter | join over the incoming arguments (`mono_divide`: dynamic on one path makes it dynamic); `Dynamic` if its variable asks for `mono_specialize` and the incoming values may differ, or if it is a loop variable that would unroll without bound (below) |
//!
//! **Key parameters** are the entry parameters named by a `make_static` in the entry
//! block: they are the region's run-time constants, given when a specialization is made.
//! Every other `make_static` whose operand may be dynamic is a **promotion point**: the
//! specialized code dispatches on the value at run time.
//!
//! An instruction is static when all its results are static (it runs as setup code at
//! specialization time), a branch when its condition is. A block with a static parameter
//! whose incoming arguments may differ is a **specialization point** (`poly_specialize`,
//! the default): it is specialized once per incoming static value, which unrolls loops
//! with static induction variables and, in an interpreter, unrolls the dispatch loop
//! multi-way over the program.
//!
//! **Loop variables.** A parameter of a loop entry whose incoming values are static is
//! specialized per value, which unrolls the loop. That terminates when the loop's control
//! is decided at specialization time (`while i < len(w)` with `w` static), but a loop with
//! a dynamic exit (`while i < n` with `n` dynamic), or whose variable changes along
//! dynamically chosen paths (`if d { sp = sp - 1 } else { sp = sp + 2 }`), would unroll
//! without bound. So a loop entry's parameter stays static only if every branch inside the
//! loop is static, or if its variable is named by a `make_static` (the user asked for it:
//! the interpreter's `pc`, which changes under dynamic branches of the interpreted
//! program); otherwise it is dynamic. A loop that does not end at specialization time
//! exhausts the specializer's budget, which is an error.
//!
//! ## Solving
//!
//! The least fixed point is found with a work list over def-use chains, the sparse form of
//! the usual data-flow iteration (as in Wegman and Zadeck's sparse propagation): every
//! definition is evaluated once in reverse post-order, then each value whose binding time
//! rises is popped and its users (instructions, the parameters it is passed to, and the
//! entries of loops one of whose branches it decides) are evaluated again. A value rises
//! at most twice, a merge keeps the join of its incoming arguments up to date instead of
//! re-reading them, and a loop under dynamic control marks its enclosing loops once; so
//! the work is linear in the size of the function. A property test checks the result
//! against the plain round-robin iteration on random programs.
//!
//! ## Restrictions (errors)
//!
//! A `[mut T]` slice cannot be a run-time constant (stores into it must reach the caller's
//! memory), and promoting a slice (a `make_static` of a dynamic slice) is not supported:
//! slices are run-time constants only as key parameters.
//!
//! The generic mode ([`Mode::Generic`]) makes everything dynamic: it describes the region
//! compiled without specialization.

use cranelift_entity::SecondaryMap;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::loops::LoopForest;
use crate::ir::{
    Block, Callee, Function, Inst, InstData, Module, Policy, PolicyGroup, Type, Value, Var,
};

/// The binding time of a value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum BindingTime {
    /// Not reached (yet) by the analysis.
    #[default]
    Bottom,
    Static,
    Dynamic,
}

impl BindingTime {
    pub fn join(self, other: BindingTime) -> BindingTime {
        self.max(other)
    }
    pub fn is_static(self) -> bool {
        self == BindingTime::Static
    }
}

/// Specialize (the annotations act) or generic (everything dynamic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Specialize,
    Generic,
}

/// A binding-time error: the variable and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BtaError {
    pub inst: Inst,
    pub message: String,
}

/// The result of the analysis for one function.
#[derive(Clone, Debug)]
pub struct Bta {
    pub value: SecondaryMap<Value, BindingTime>,
    /// Entry parameter positions that are run-time constants of the region.
    pub key_params: Vec<usize>,
    /// `make_static` instructions whose operands may be dynamic.
    pub promotions: Vec<Inst>,
    /// Blocks with a static parameter whose incoming values may differ.
    pub spec_points: Vec<Block>,
    pub errors: Vec<BtaError>,
    is_promotion: SecondaryMap<Inst, bool>,
    is_spec_point: SecondaryMap<Block, bool>,
}

impl Bta {
    pub fn is_static(&self, v: Value) -> bool {
        self.value[v].is_static()
    }

    /// Whether `i` runs at specialization time (all its results static; annotations on
    /// static operands are copies).
    pub fn inst_is_static(&self, f: &Function, i: Inst) -> bool {
        let results = f.inst_results(i);
        !results.is_empty() && results.iter().all(|&r| self.is_static(r)) && !self.is_promotion(i)
    }

    /// Whether `i` is one of [`Bta::promotions`] (constant time).
    pub fn is_promotion(&self, i: Inst) -> bool {
        self.is_promotion[i]
    }

    /// Whether `b` is one of [`Bta::spec_points`] (constant time).
    pub fn is_spec_point(&self, b: Block) -> bool {
        self.is_spec_point[b]
    }

    /// Whether the terminator of `b` branches on a static condition.
    pub fn branch_is_static(&self, f: &Function, b: Block) -> bool {
        match f.terminator(b).map(|t| &f.insts[t]) {
            Some(InstData::Brif { cond, .. }) => self.is_static(*cond),
            Some(InstData::Switch { arg, .. }) => self.is_static(*arg),
            _ => false,
        }
    }
}

/// Runs the analysis on `f`, a function of `m`.
pub fn analyze(m: &Module, f: &Function, mode: Mode) -> Bta {
    use BindingTime::*;
    let mut bt: SecondaryMap<Value, BindingTime> = SecondaryMap::new();
    let mut key_params = Vec::new();
    let mut errors = Vec::new();
    let entry = f.entry_block().expect("a verified function has an entry");
    let params = f.block_params(entry);
    if mode == Mode::Specialize {
        for &i in f.layout.block_insts(entry) {
            if let InstData::MakeStatic { args, .. } = &f.insts[i] {
                for &(v, _) in args {
                    if let Some(k) = params.iter().position(|&p| p == v) {
                        if !key_params.contains(&k) {
                            key_params.push(k);
                        }
                    }
                }
            }
        }
        key_params.sort();
    }
    for (k, &p) in params.iter().enumerate() {
        bt[p] = if key_params.contains(&k) {
            Static
        } else {
            Dynamic
        };
    }
    let cfg = ControlFlowGraph::compute(f);
    let forest = LoopForest::compute(&cfg);
    let rpo: Vec<Block> = forest.rpo().to_vec();
    // What the annotations ask for, per variable, in one scan: whether it is annotated,
    // and the specialization policy of its first annotation that names one.
    let mut annotated: SecondaryMap<Var, bool> = SecondaryMap::new();
    let mut policy: SecondaryMap<Var, Option<Policy>> = SecondaryMap::new();
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            if let InstData::MakeStatic { args, policies } = &f.insts[i] {
                for &(_, v) in args {
                    annotated[v] = true;
                    if policy[v].is_none() {
                        policy[v] = policies.get(PolicyGroup::Specialization);
                    }
                }
            }
        }
    }
    // Def-use: the instructions using each value, and the parameters (with their
    // incoming arguments) it is passed to.
    let mut inst_users: SecondaryMap<Value, Vec<Inst>> = SecondaryMap::new();
    let mut param_users: SecondaryMap<Value, Vec<Value>> = SecondaryMap::new();
    let mut incoming: SecondaryMap<Value, Vec<Value>> = SecondaryMap::new();
    for &b in &rpo {
        for &i in f.layout.block_insts(b) {
            if !f.insts[i].is_terminator() {
                f.insts[i].visit_operands(|&v| inst_users[v].push(i));
            }
        }
        if b == entry {
            continue;
        }
        for pred in cfg.preds(b) {
            let term = f.terminator(pred).expect("verified");
            for call in f.insts[term].branch_targets().filter(|c| c.block == b) {
                for (&p, &a) in f.block_params(b).iter().zip(&call.args) {
                    incoming[p].push(a);
                    param_users[a].push(p);
                }
            }
        }
    }
    // Whether the incoming arguments of each parameter may differ (fixed by the IR).
    let mut merges: SecondaryMap<Value, bool> = SecondaryMap::new();
    for &b in rpo.iter().filter(|&&b| b != entry) {
        for &p in f.block_params(b) {
            let ins = &mut incoming[p];
            ins.sort_unstable();
            ins.dedup();
            merges[p] = ins.len() > 1;
        }
    }
    // Loops: the loops each block enters, and the loops of each branch condition (the
    // innermost loop of its block; enclosing loops follow through `parent`).
    let mut entered: SecondaryMap<Block, Vec<usize>> = SecondaryMap::new();
    for (l, lp) in forest.loops.iter().enumerate() {
        for &e in &lp.entries {
            entered[e].push(l);
        }
    }
    let mut cond_loops: SecondaryMap<Value, Vec<usize>> = SecondaryMap::new();
    for &b in &rpo {
        let cond = match f.terminator(b).map(|t| &f.insts[t]) {
            Some(InstData::Brif { cond, .. }) => *cond,
            Some(InstData::Switch { arg, .. }) => *arg,
            _ => continue,
        };
        if let Some(l) = forest
            .innermost(b)
            .filter(|_| cfg.succs(b).nth(1).is_some())
        {
            cond_loops[cond].push(l);
        }
    }
    // A loop is under dynamic control once one of its branches (its nested loops'
    // included) is dynamic.
    let mut dynamic_loop = vec![false; forest.loops.len()];

    let mut state = Solver {
        bt,
        // The entry parameters are set: their users are examined like any change.
        work: params.to_vec(),
        generic: mode == Mode::Generic,
    };
    // The join of the incoming arguments of each parameter, kept up to date as they
    // change (so a merge of many edges costs one step per change, not per edge).
    let mut joined: SecondaryMap<Value, BindingTime> = SecondaryMap::new();
    // The transfer function of a block parameter: the join of its incoming arguments;
    // `Dynamic` instead of a static merge under `mono_specialize`, or at the entry of a
    // loop under dynamic control unless its variable is annotated.
    let param = |st: &mut Solver, dynamic_loop: &[bool], p: Value, joined: BindingTime| {
        let mut t = joined;
        if t == Static && merges[p] {
            let var = f.values[p].var;
            if var.is_some_and(|v| policy[v] == Some(Policy::MonoSpecialize)) {
                t = Dynamic;
            }
            let user = var.is_some_and(|v| annotated[v]);
            let b = match f.values[p].def {
                crate::ir::ValueDef::Param(b, _) => b,
                _ => unreachable!("a block parameter"),
            };
            if !user && entered[b].iter().any(|&l| dynamic_loop[l]) {
                t = Dynamic;
            }
        }
        st.set(p, t);
    };
    let inst = |st: &mut Solver, i: Inst| {
        let data = &f.insts[i];
        let mut operands = Bottom;
        data.visit_operands(|&v| operands = operands.join(st.bt[v]));
        if let Some(t) = inst_binding_time(m, data, operands) {
            for &r in f.inst_results(i) {
                st.set(r, t);
            }
        }
    };
    // Every definition once, then the users of each value that changes: each value changes
    // at most twice, so the work is linear in the number of uses.
    for &b in &rpo {
        if b != entry {
            for &p in f.block_params(b) {
                joined[p] = incoming[p].iter().fold(Bottom, |a, &v| a.join(state.bt[v]));
                param(&mut state, &dynamic_loop, p, joined[p]);
            }
        }
        for &i in f.layout.block_insts(b) {
            inst(&mut state, i);
        }
    }
    while let Some(v) = state.work.pop() {
        for &i in &inst_users[v] {
            inst(&mut state, i);
        }
        for &p in &param_users[v] {
            joined[p] = joined[p].join(state.bt[v]);
            param(&mut state, &dynamic_loop, p, joined[p]);
        }
        if state.bt[v] == Dynamic {
            for &inner in &cond_loops[v] {
                let mut l = Some(inner);
                while let Some(x) = l.filter(|&x| !dynamic_loop[x]) {
                    dynamic_loop[x] = true;
                    for &e in &forest.loops[x].entries {
                        for &p in f.block_params(e) {
                            param(&mut state, &dynamic_loop, p, joined[p]);
                        }
                    }
                    l = forest.loops[x].parent;
                }
            }
        }
    }
    let bt = state.bt;
    // Promotion points, specialization points and restrictions.
    let mut promotions = Vec::new();
    let mut spec_points = Vec::new();
    if mode == Mode::Specialize {
        for &b in &rpo {
            for &i in f.layout.block_insts(b) {
                let InstData::MakeStatic { args, .. } = &f.insts[i] else {
                    continue;
                };
                for &(v, var) in args {
                    let name = f.var_name(var);
                    match f.value_type(v) {
                        Type::Slice { mutable: true, .. } => errors.push(BtaError {
                            inst: i,
                            message: format!("`{name}` is a mutable slice and cannot be a run-time constant"),
                        }),
                        Type::Slice { .. } if bt[v] == Dynamic && !(b == entry && params.contains(&v)) => {
                            errors.push(BtaError {
                                inst: i,
                                message: format!(
                                    "`{name}` is a slice that may be dynamic here: promoting slices is not supported (make it static at the region entry)"
                                ),
                            })
                        }
                        _ => {}
                    }
                }
                if args.iter().any(|&(v, _)| bt[v] == Dynamic) {
                    promotions.push(i);
                }
            }
            if b != entry
                && f.block_params(b)
                    .iter()
                    .any(|&p| bt[p] == Static && merges[p])
            {
                spec_points.push(b);
            }
        }
    }
    let mut is_promotion = SecondaryMap::new();
    for &i in &promotions {
        is_promotion[i] = true;
    }
    let mut is_spec_point = SecondaryMap::new();
    for &b in &spec_points {
        is_spec_point[b] = true;
    }
    Bta {
        value: bt,
        key_params,
        promotions,
        spec_points,
        errors,
        is_promotion,
        is_spec_point,
    }
}

/// The binding times being solved and the values whose binding time changed.
struct Solver {
    bt: SecondaryMap<Value, BindingTime>,
    work: Vec<Value>,
    generic: bool,
}

impl Solver {
    /// Raises `v` to at least `t` (everything is dynamic in the generic mode).
    fn set(&mut self, v: Value, t: BindingTime) {
        let t = if self.generic {
            BindingTime::Dynamic
        } else {
            t
        };
        let new = self.bt[v].join(t);
        if new != self.bt[v] {
            self.bt[v] = new;
            self.work.push(v);
        }
    }
}

/// The IR of `f` with every value, instruction and branch marked static (`S`) or dynamic
/// (`D`), then the key parameters, specialization points, promotion points and errors.
/// The binding time of the results of an instruction whose operands join to `operands`
/// (`None` for instructions without results).
pub(crate) fn inst_binding_time(
    m: &Module,
    data: &InstData,
    operands: BindingTime,
) -> Option<BindingTime> {
    use BindingTime::{Dynamic, Static};
    Some(match data {
        InstData::Const(_) => Static,
        InstData::Unary { .. }
        | InstData::Binary { .. }
        | InstData::Cmp { .. }
        | InstData::Select { .. }
        | InstData::Cast { .. }
        | InstData::Len { .. }
        | InstData::StaticLoad { .. } => operands,
        InstData::Call {
            callee, is_static, ..
        } => {
            if *is_static && matches!(callee, Callee::Extern(_)) && m.is_pure(*callee) {
                operands.join(Static)
            } else {
                Dynamic
            }
        }
        // A local array is dynamic; the specializer keeps its elements as values, so an
        // access at a static index costs nothing in the code.
        InstData::Load { .. } | InstData::MakeDynamic { .. } | InstData::ArrayNew { .. } => Dynamic,
        InstData::MakeStatic { .. } => Static,
        _ => return None,
    })
}

pub fn explain(m: &Module, f: &Function, bta: &Bta) -> String {
    use crate::ir::printer::{print_function_with, Annotate};
    struct Marks<'a>(&'a Function, &'a Bta);
    impl Annotate for Marks<'_> {
        fn block(&self, b: Block) -> Option<String> {
            let (f, bta) = (self.0, self.1);
            let mut parts: Vec<String> = f
                .block_params(b)
                .iter()
                .map(|&p| format!("{p}:{}", mark_of(bta.value[p])))
                .collect();
            if bta.is_spec_point(b) {
                parts.push("specialization point".into());
            }
            (!parts.is_empty()).then(|| parts.join(" "))
        }
        fn inst(&self, i: Inst) -> Option<String> {
            let (f, bta) = (self.0, self.1);
            let data = &f.insts[i];
            Some(if bta.is_promotion(i) {
                "promotion point".to_string()
            } else if data.is_terminator() {
                let b = f.layout.inst_block(i).expect("in layout");
                match data {
                    InstData::Brif { .. } | InstData::Switch { .. }
                        if bta.branch_is_static(f, b) =>
                    {
                        "static branch".into()
                    }
                    InstData::Brif { .. } | InstData::Switch { .. } => "dynamic branch".into(),
                    _ => "D".into(),
                }
            } else if bta.inst_is_static(f, i) {
                "S".into()
            } else {
                "D".into()
            })
        }
    }
    fn mark_of(t: BindingTime) -> &'static str {
        match t {
            BindingTime::Static => "S",
            BindingTime::Dynamic => "D",
            BindingTime::Bottom => "-",
        }
    }
    let mut out = print_function_with(m, f, &Marks(f, bta));
    let list = |xs: Vec<String>| {
        if xs.is_empty() {
            "none".to_string()
        } else {
            xs.join(", ")
        }
    };
    let entry = f.entry_block().expect("entry");
    let keys: Vec<String> = bta
        .key_params
        .iter()
        .map(|&k| {
            let p = f.block_params(entry)[k];
            match f.values[p].var {
                Some(v) => format!("{p} ({})", f.var_name(v)),
                None => p.to_string(),
            }
        })
        .collect();
    out.push_str(&format!("key parameters: {}\n", list(keys)));
    out.push_str(&format!(
        "specialization points: {}\n",
        list(bta.spec_points.iter().map(|b| b.to_string()).collect())
    ));
    out.push_str(&format!(
        "promotion points: {}\n",
        list(
            bta.promotions
                .iter()
                .map(|&i| format!("{i} in {}", f.layout.inst_block(i).expect("in layout")))
                .collect()
        )
    ));
    out.push_str(&explain_reach(f, bta));
    out.push_str(&explain_arrays(f, bta));
    for e in &bta.errors {
        out.push_str(&format!("error at {}: {}\n", e.inst, e.message));
    }
    out
}

/// The reachability part of [`explain`]: each block's reachability condition that is not
/// `true` (over the static branches, named by their blocks; for a switch, the bits of its
/// outcome number), with back edges removed and, where that differs, followed; then the
/// merges and their classes (see [`crate::analysis::reach`]).
fn explain_reach(f: &Function, bta: &Bta) -> String {
    use crate::analysis::reach::FunctionReach;
    let Some(fr) = FunctionReach::compute(f, bta) else {
        return "reachability conditions: not computed (too many static branches)\n".into();
    };
    let r = &fr.reach;
    let mut out = String::new();
    let mut merges = Vec::new();
    for (n, &b) in fr.cfg.blocks().iter().enumerate() {
        let (a, c) = (r.acyclic[n], r.cyclic[n]);
        if !a.is_true() || !c.is_true() {
            out.push_str(&format!("  {b}: {}", fr.text(a)));
            if a != c {
                out.push_str(&format!(" (with back edges: {})", fr.text(c)));
            }
            out.push('\n');
        }
        if let Some(m) = r.merges[n] {
            merges.push(format!("{b} {}", m.name()));
        }
    }
    let mut text = if out.is_empty() {
        "reachability conditions: true everywhere\n".to_string()
    } else {
        format!("reachability conditions (elsewhere true):\n{out}")
    };
    text.push_str(&format!(
        "merges: {}\n",
        if merges.is_empty() {
            "none".to_string()
        } else {
            merges.join(", ")
        }
    ));
    text
}

/// The `local arrays` part of [`explain`]: for each local array (an `array` instruction;
/// arrays do not cross blocks as arguments, so its accesses name it directly), where it is
/// made and what its accesses cost. The specializer keeps every element of a local array as
/// a value of its environment: an access at a static index is that value (nothing in the
/// code), while an access at a dynamic index materializes the array (the elements are
/// stored to a stack slot, the access goes through memory, and after a write the elements
/// are read back as values). An array of more than
/// [`dyc_stitcher::ge::MAX_ARRAY_VALUES`] elements (the runtime's default) lives in memory
/// in the first tiers instead ([`dyc_stitcher::ge::StitchProgram::home`]).
fn explain_arrays(f: &Function, bta: &Bta) -> String {
    // Per array: its instruction, the accesses at static indices, those at dynamic ones.
    let mut arrays: Vec<(Value, Inst, usize, Vec<String>)> = Vec::new();
    let mut of: SecondaryMap<Value, Option<usize>> = SecondaryMap::new();
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            match f.insts[i] {
                InstData::ArrayNew { .. } => {
                    of[f.first_result(i)] = Some(arrays.len());
                    arrays.push((f.first_result(i), i, 0, Vec::new()));
                }
                InstData::Load { slice, index } | InstData::Store { slice, index, .. } => {
                    if let Some(k) = of[slice] {
                        if bta.value[index].is_static() {
                            arrays[k].2 += 1;
                        } else {
                            arrays[k].3.push(i.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if arrays.is_empty() {
        return String::new();
    }
    let max = dyc_stitcher::ge::MAX_ARRAY_VALUES;
    let in_memory = |v: Value| match f.value_type(v) {
        Type::Array { len, .. } => len > max,
        _ => false,
    };
    let mut out = match arrays.iter().any(|a| in_memory(a.0)) {
        false => String::from("local arrays (elements kept as values):\n"),
        true => String::from("local arrays:\n"),
    };
    for (v, i, at_static, at_dynamic) in arrays {
        let accesses = |n: usize| format!("{n} access{}", if n == 1 { "" } else { "es" });
        let how = match (at_static, at_dynamic.len()) {
            _ if in_memory(v) => format!(
                "more than {max} elements: in memory in the stitch and quick tiers ({} at \
                 static indices, each a load or a store at a fixed place; {} at dynamic \
                 indices, checked against its length), as values in the optimizing tier",
                accesses(at_static),
                at_dynamic.len()
            ),
            (0, 0) => "never accessed".to_string(),
            (s, 0) => format!(
                "{}, all at static indices: no memory, no checks",
                accesses(s)
            ),
            (s, d) => format!(
                "{} at static indices (no memory), {d} at dynamic indices ({}): {}, \
                 the elements stored to a stack slot for the access and read back after a write",
                accesses(s),
                at_dynamic.join(", "),
                if s == 0 {
                    "every access goes through memory"
                } else {
                    "those go through memory"
                },
            ),
        };
        let line = match f.srclocs[i] {
            l if l.is_known() => format!(" (line {})", l.line),
            _ => String::new(),
        };
        out.push_str(&format!(
            "  {v}: {} made at {i}{line}; {how}\n",
            f.value_type(v)
        ));
    }
    out
}

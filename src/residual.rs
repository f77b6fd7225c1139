//! The residual-IR emitter: specialized code as IR of our own, so that any specialization
//! can be run by the reference interpreter and compared with the original program.
//!
//! The residual module is a copy of the source module (its functions are the generic code
//! that specialized code calls) plus one function: the specialization, with the source
//! function's signature (static scalar arguments are ignored; static slices that
//! specialized code reads dynamically are taken from their parameters). Promotions are
//! dispatched inline ([`PromotionMode::Inline`]): the values seen so far at a site are
//! tested in turn, and a miss calls the host function `__dyc_miss_<site>` with the
//! promoted values and traps. [`run`] drives this like a lazy stitcher would: on a miss it
//! records the values, specializes again with them known, and runs again from the start
//! on fresh copies of the arguments.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Record};
use dyc_stitcher::ge::{
    self as sge, Budget, CalleeDecl, HostId, PureHosts, SVal, Site, SliceData, SpecError,
};
use dyc_templates::fold::{Backend, Fold};
use dyc_templates::template::TOp;

use crate::bta::Mode;
use crate::ge;
use crate::interp::{ErrorKind, HostFns, Interpreter, Memory, RuntimeError, Val};
use crate::ir::{
    Block, BlockCall, Callee, Const, ExternFunc, ExternId, FuncId, Function, InstData, Module,
    Scalar, Signature, SrcLoc, Type, Value,
};

/// Builds residual IR into a function.
pub struct ResidualEmitter<'m> {
    pub func: Function,
    module: &'m Module,
    cur: Option<Block>,
    /// Host declarations added for promotion misses: (site, extern name, signature).
    pub misses: Vec<(u32, ExternFunc)>,
    callees: Vec<Callee>,
}

impl<'m> ResidualEmitter<'m> {
    /// A residual function named `name` with signature `sig`, calling into `module`;
    /// `callees` maps the stitch program's callee indices to callees of `module`.
    pub fn new(
        module: &'m Module,
        name: &str,
        sig: Signature,
        callees: Vec<Callee>,
    ) -> ResidualEmitter<'m> {
        let mut func = Function::new(name, sig.clone());
        let entry = func.append_new_block();
        for &t in &sig.params {
            func.append_block_param(entry, t, None);
        }
        ResidualEmitter {
            func,
            module,
            cur: None,
            misses: Vec::new(),
            callees,
        }
    }

    fn ins(&mut self, data: InstData, ret: Option<Type>, loc: SrcLoc) -> Option<Value> {
        let b = self.cur.expect("a current block");
        let i = self.func.append_inst(b, data, ret);
        self.func.srclocs[i] = loc;
        self.func.inst_results(i).first().copied()
    }

    fn call(b: Block, args: &[Value]) -> BlockCall {
        BlockCall::new(b, args.to_vec())
    }
}

/// A backend of the fold layer ([`Fold`]): the layer's rewrites end up in residual IR, so
/// the differential tests check them against the interpreter.
impl Backend for ResidualEmitter<'_> {
    type Value = Value;
    type Block = Block;

    fn block_index(b: Block) -> usize {
        cranelift_entity::EntityRef::index(b)
    }

    fn create_block(&mut self, params: &[Type]) -> Block {
        let b = self.func.append_new_block();
        for &t in params {
            self.func.append_block_param(b, t, None);
        }
        b
    }

    fn block_params(&mut self, b: Block, _types: &[Type], out: &mut Vec<Value>) {
        out.extend_from_slice(self.func.block_params(b));
    }

    fn switch_to_block(&mut self, b: Block) {
        self.cur = Some(b);
    }

    fn constant(&mut self, c: Const) -> Value {
        self.ins(InstData::Const(c), None, SrcLoc::default())
            .expect("a constant")
    }

    fn static_slice(&mut self, id: u32, _ty: Type) -> Value {
        let entry = self.func.entry_block().expect("entry");
        self.func.block_params(entry)[id as usize]
    }

    fn op(&mut self, op: &TOp, args: &[Value], _types: &[Type], loc: SrcLoc) -> Option<Value> {
        let (data, ret) = match op {
            TOp::Unary(o) => (
                InstData::Unary {
                    op: *o,
                    arg: args[0],
                },
                None,
            ),
            TOp::Binary(o) => (
                InstData::Binary {
                    op: *o,
                    args: [args[0], args[1]],
                },
                None,
            ),
            TOp::Cmp(o) => (
                InstData::Cmp {
                    op: *o,
                    args: [args[0], args[1]],
                },
                None,
            ),
            TOp::Select => (
                InstData::Select {
                    cond: args[0],
                    args: [args[1], args[2]],
                },
                None,
            ),
            TOp::Cast(t) => (
                InstData::Cast {
                    to: *t,
                    arg: args[0],
                },
                None,
            ),
            TOp::Len => (InstData::Len { arg: args[0] }, None),
            TOp::Load => (
                InstData::Load {
                    slice: args[0],
                    index: args[1],
                },
                None,
            ),
            TOp::Store => (
                InstData::Store {
                    slice: args[0],
                    index: args[1],
                    value: args[2],
                },
                None,
            ),
            TOp::Call { callee, ret } => {
                let c = self.callees[*callee as usize];
                (
                    InstData::Call {
                        callee: c,
                        args: args.into(),
                        is_static: false,
                    },
                    *ret,
                )
            }
        };
        self.ins(data, ret, loc)
    }

    /// `array.T len` and a store of each element given.
    fn array_slot(&mut self, elem: Scalar, len: u32, elems: &[Value]) -> Value {
        let a = self
            .ins(InstData::ArrayNew { elem, len }, None, SrcLoc::default())
            .expect("an array");
        for (k, &v) in elems.iter().enumerate() {
            let i = self.constant(Const::Int(Scalar::I64, k as u64));
            let store = InstData::Store {
                slice: a,
                index: i,
                value: v,
            };
            self.ins(store, None, SrcLoc::default());
        }
        a
    }

    /// A load of the element, whose result is unused: it faults exactly as the check must.
    fn bounds_check(&mut self, slice: Value, index: Value, _ty: Scalar, loc: SrcLoc) {
        self.ins(InstData::Load { slice, index }, None, loc);
    }

    fn jump(&mut self, dest: Block, args: &[Value]) {
        self.ins(
            InstData::Jump {
                dest: Self::call(dest, args),
            },
            None,
            SrcLoc::default(),
        );
    }

    fn brif(&mut self, cond: Value, t: (Block, &[Value]), e: (Block, &[Value])) {
        let data = InstData::Brif {
            cond,
            then_dest: Self::call(t.0, t.1),
            else_dest: Self::call(e.0, e.1),
        };
        self.ins(data, None, SrcLoc::default());
    }

    fn switch(
        &mut self,
        arg: Value,
        _ty: Scalar,
        cases: &[(u64, Block, Vec<Value>)],
        default: (Block, &[Value]),
    ) {
        let cases = cases
            .iter()
            .map(|(k, b, a)| (*k, Self::call(*b, a)))
            .collect();
        let data = InstData::Switch {
            arg,
            cases,
            default: Self::call(default.0, default.1),
        };
        self.ins(data, None, SrcLoc::default());
    }

    fn ret(&mut self, value: Option<Value>) {
        self.ins(InstData::Return { value }, None, SrcLoc::default());
    }

    fn trap(&mut self, loc: SrcLoc) {
        self.ins(InstData::Trap, None, loc);
    }

    fn promote(&mut self, _site: u32, _promoted: &[(Value, Scalar)], _live: &[Value]) {
        unreachable!("residual code dispatches promotions inline");
    }

    fn promote_miss(&mut self, site: u32, promoted: &[Value]) {
        let name = format!("__dyc_miss_{site}");
        let sig = Signature {
            params: promoted.iter().map(|&v| self.func.value_type(v)).collect(),
            ret: None,
        };
        let id = match self.misses.iter().position(|(s, _)| *s == site) {
            Some(k) => k,
            None => {
                self.misses.push((
                    site,
                    ExternFunc {
                        name,
                        sig,
                        pure: false,
                    },
                ));
                self.misses.len() - 1
            }
        };
        let callee = Callee::Extern(ExternId::from_u32((self.module.externs.len() + id) as u32));
        self.ins(
            InstData::Call {
                callee,
                args: promoted.into(),
                is_static: false,
            },
            None,
            SrcLoc::default(),
        );
        self.ins(InstData::Trap, None, SrcLoc::default());
    }
}

/// Pure host functions of the interpreter's registry, for static calls.
struct InterpHosts<'a> {
    module: &'a Module,
    hosts: RefCell<&'a mut HostFns>,
}

impl PureHosts for InterpHosts<'_> {
    fn call(&self, index: HostId, args: &[Const]) -> Result<Option<Const>, String> {
        let name = &self.module.externs[ExternId::from_u32(index.as_u32())].name;
        self.hosts.borrow_mut().call(name, args)
    }
}

/// A promotion miss: the site and the promoted values.
type Miss = (u32, Vec<Const>);

/// Why running specialized code failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResidualError {
    /// The binding-time analysis refuses the annotations.
    Unsupported(String),
    /// A budget ran out: the executor's, or the driver's limit on promotion misses.
    Budget(String),
    /// A bug: a stitch program that does not check, residual IR that does not verify.
    Internal(String),
    /// The specialized code raised a runtime error.
    Runtime(RuntimeError),
}

impl std::fmt::Display for ResidualError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResidualError::Unsupported(m) | ResidualError::Budget(m) => write!(f, "{m}"),
            ResidualError::Internal(m) => write!(f, "internal error (a bug): {m}"),
            ResidualError::Runtime(e) => write!(f, "{e:?}"),
        }
    }
}

/// What [`run`] produced besides the result.
#[derive(Clone, Debug)]
pub struct ResidualRun {
    pub result: Option<Val>,
    /// The residual module of the last attempt; its last function is the specialization.
    pub module: Module,
    /// Promotion misses that led to a new specialization.
    pub restarts: usize,
    /// The (template block, static context) copies the last attempt stitched, in order.
    pub stitched: Vec<(sge::Block, Vec<(u8, u64)>)>,
    /// Setup and template operations the last attempt processed.
    pub ops: usize,
}

/// Specializes function `fid` of `m` on the key parameters in `args` and runs the residual
/// code on `args` (slices in `mem`, which receives the effects of the final run), with the
/// default executor.
pub fn run(
    m: &Module,
    fid: FuncId,
    args: &[Val],
    mem: &mut Memory,
    hosts: &mut HostFns,
    fuel: u64,
    budget: Budget,
) -> Result<ResidualRun, ResidualError> {
    run_with(
        m,
        fid,
        args,
        mem,
        hosts,
        fuel,
        budget,
        ExecutorKind::default(),
        dyc_stitcher::ge::MAX_ARRAY_VALUES,
    )
}

/// [`run`] with a chosen executor, and local arrays of more than `max_array_values`
/// elements in memory ([`dyc_stitcher::ge::StitchProgram::home`]).
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    m: &Module,
    fid: FuncId,
    args: &[Val],
    mem: &mut Memory,
    hosts: &mut HostFns,
    fuel: u64,
    budget: Budget,
    executor: ExecutorKind,
    max_array_values: u32,
) -> Result<ResidualRun, ResidualError> {
    let mut ge = ge::build(m, fid, Mode::Specialize).map_err(|e| match e {
        ge::GeError::Internal(m) => ResidualError::Internal(m),
        e => ResidualError::Unsupported(e.to_string()),
    })?;
    ge.program.set_max_array_values(max_array_values);
    let prog = &ge.program;
    let mut key = Vec::new();
    let mut slices: Vec<Option<SliceData>> = vec![None; args.len()];
    for &k in &prog.header.key_params {
        match args.get(k) {
            Some(Val::Scalar(c)) => key.push(SVal::Scalar(*c)),
            Some(Val::Slice(s)) => {
                let b = &mem.bufs[s.buf];
                slices[k] = Some(SliceData::new(b.elem, b.data.clone()));
                key.push(SVal::Slice(k as u32));
            }
            Some(Val::Array(_)) => {
                return Err(ResidualError::Internal("a key argument is an array".into()))
            }
            None => return Err(ResidualError::Internal("a key argument is missing".into())),
        }
    }
    let callees: Vec<Callee> = prog
        .header
        .callees
        .values()
        .map(|c| match c {
            CalleeDecl::Func { index, .. } => Callee::Func(FuncId::from_u32(*index)),
            CalleeDecl::Host { host } => Callee::Extern(ExternId::from_u32(host.as_u32())),
        })
        .collect();
    type KnownMap = HashMap<(sge::Block, Vec<(u8, u64)>), Vec<Vec<Const>>>;
    let known: Rc<RefCell<KnownMap>> = Rc::new(RefCell::new(HashMap::new()));
    let site_key = |s: &Site| s.ident();
    let original = mem.clone();
    let mut restarts = 0;
    loop {
        let sig = m.funcs[fid].sig.clone();
        let em = ResidualEmitter::new(
            m,
            &format!("{}$spec", m.funcs[fid].name),
            sig,
            callees.clone(),
        );
        let entry_block = em.func.entry_block().expect("entry");
        let lens = slices
            .iter()
            .map(|s| s.as_ref().map(|d| d.data.len() as u64));
        let mut em = Record::new(Fold::new(em, lens));
        let lookup = |s: &Site| {
            known
                .borrow()
                .get(&site_key(s))
                .cloned()
                .unwrap_or_default()
        };
        let unit = {
            let ph = InterpHosts {
                module: m,
                hosts: RefCell::new(&mut *hosts),
            };
            let cx = Context {
                prog,
                slices: &slices,
                hosts: &ph,
                mode: PromotionMode::Inline(&lookup),
                budget,
            };
            executor
                .run(&cx, prog.entry, &key, &mut em)
                .map_err(|e: SpecError| match e {
                    SpecError::BudgetExceeded { .. } => ResidualError::Budget(e.to_string()),
                    SpecError::Internal(m) => ResidualError::Internal(m),
                })?
        };
        let stitched = std::mem::take(&mut em.stitched);
        let mut em = em.inner.backend;
        // The entry passes the dynamic parameters to the unit's first block.
        let dyn_params: Vec<Value> = em
            .func
            .block_params(entry_block)
            .iter()
            .enumerate()
            .filter(|(k, _)| !prog.header.key_params.contains(k))
            .map(|(_, &v)| v)
            .collect();
        Backend::switch_to_block(&mut em, entry_block);
        Backend::jump(&mut em, unit.entry, &dyn_params);
        let mut rm = m.clone();
        for (_, e) in &em.misses {
            rm.externs.push(e.clone());
        }
        let misses: Vec<(u32, String)> = em
            .misses
            .iter()
            .map(|(s, e)| (*s, e.name.clone()))
            .collect();
        let spec_id = rm.funcs.push(em.func);
        // Residual IR is IR like any other: it verifies (checked in debug builds).
        if cfg!(debug_assertions) {
            crate::verifier::verify_module(&rm).map_err(|e| {
                ResidualError::Internal(format!("residual IR does not verify:\n{e}"))
            })?;
        }
        // Run; a miss records its values.
        let missed: Arc<Mutex<Option<Miss>>> = Arc::new(Mutex::new(None));
        *mem = original.clone();
        let outcome = {
            let mut interp = Interpreter::new(&rm);
            interp.hosts = std::mem::take(hosts);
            for (site, name) in &misses {
                let missed = missed.clone();
                let site = *site;
                interp.hosts.register(name, move |a| {
                    *missed.lock().expect("not poisoned") = Some((site, a.to_vec()));
                    Err("promotion miss".into())
                });
            }
            interp.fuel = fuel;
            let r = interp.call(spec_id, args, mem);
            *hosts = std::mem::take(&mut interp.hosts);
            for (_, name) in &misses {
                hosts.unregister(name);
            }
            r
        };
        let miss = missed.lock().expect("not poisoned").take();
        match (outcome, miss) {
            (
                Err(RuntimeError {
                    kind: ErrorKind::Host(_),
                    ..
                }),
                Some((site, values)),
            ) => {
                let s = &unit.sites[site as usize];
                known
                    .borrow_mut()
                    .entry(site_key(s))
                    .or_default()
                    .push(values);
                restarts += 1;
                if restarts > budget.max_blocks {
                    return Err(ResidualError::Budget(format!(
                        "more than {} promotion misses",
                        budget.max_blocks
                    )));
                }
            }
            (Ok(result), _) => {
                return Ok(ResidualRun {
                    result,
                    module: rm,
                    restarts,
                    stitched,
                    ops: unit.ops,
                })
            }
            (Err(e), _) => return Err(ResidualError::Runtime(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{cases, func, Rng};
    use crate::interp::Memory;

    /// Random valid programs with annotations: the residual code of every specialization
    /// agrees with the interpreter on the original, on results, errors (kind and source
    /// position) and memory.
    #[test]
    fn residual_code_agrees_with_the_interpreter_on_random_programs() {
        let (mut compared, mut keyed, mut promoted) = (0, 0, 0);
        let (mut refused, mut over_budget, mut planned_same, mut with_plan) = (0, 0, 0, 0);
        for seed in 0..cases(1000) {
            let _seed = crate::gen::SeedGuard(seed);
            let mut rng = Rng::new(seed);
            let m = func::module(&mut rng, &func::Config::default());
            for (id, f) in m.funcs.iter() {
                let mut mem = Memory::default();
                let args = crate::gen::tests::random_args(&mut rng, &f.sig.params, &mut mem);
                let mut mem2 = mem.clone();
                let mut mem3 = mem.clone();
                let mut interp = Interpreter::new(&m);
                interp.hosts = func::hosts();
                interp.fuel = 20_000;
                interp.max_depth = 50;
                let expected = interp.call(id, &args, &mut mem);
                if matches!(&expected, Err(e) if matches!(e.kind, ErrorKind::FuelExhausted | ErrorKind::CallDepthExceeded))
                {
                    continue;
                }
                let mut hosts = func::hosts();
                let budget = Budget {
                    max_blocks: 300,
                    max_ops: 20_000,
                    max_units: 100,
                };
                // Every other seed keeps every local array in memory.
                let arrays = match seed % 2 {
                    0 => 0,
                    _ => dyc_stitcher::ge::MAX_ARRAY_VALUES,
                };
                let got = run_with(
                    &m,
                    id,
                    &args,
                    &mut mem2,
                    &mut hosts,
                    200_000,
                    budget,
                    ExecutorKind::default(),
                    arrays,
                );
                // The work-list executor (the reference) makes the same copies and the same
                // code as the planned stitcher (the default).
                let mut hosts3 = func::hosts();
                let reference = run_with(
                    &m,
                    id,
                    &args,
                    &mut mem3,
                    &mut hosts3,
                    200_000,
                    budget,
                    ExecutorKind::WorkList,
                    arrays,
                );
                match (&got, &reference) {
                    (Ok(a), Ok(b)) => {
                        let set = |r: &ResidualRun| {
                            let mut s = r.stitched.clone();
                            s.sort();
                            let n = s.len();
                            s.dedup();
                            assert_eq!(n, s.len(), "seed {seed}: a copy stitched twice");
                            s
                        };
                        if set(a) != set(b) {
                            let g = ge::build(&m, id, Mode::Specialize).expect("built before");
                            panic!(
                                "seed {seed}: planned {:?}\nwork list {:?}\n{}{}",
                                a.stitched,
                                b.stitched,
                                dyc_stitcher::ge::print_cfg(&g.program),
                                dyc_stitcher::ge::print_plan(&g.program)
                            );
                        }
                        assert_eq!(format!("{:?}", a.result), format!("{:?}", b.result));
                    }
                    // Errors agree on kind and source position (instruction numbers
                    // follow the order of stitching).
                    (a, b) => {
                        let outcome = |r: &Result<ResidualRun, ResidualError>| match r {
                            Ok(r) => format!("{:?}", r.result),
                            Err(ResidualError::Runtime(e)) => format!("{:?} {:?}", e.kind, e.loc),
                            Err(e) => format!("{e}"),
                        };
                        assert_eq!(
                            outcome(a),
                            outcome(b),
                            "seed {seed}: planned and work list disagree"
                        );
                    }
                }
                planned_same += 1;
                if matches!(ge::build(&m, id, Mode::Specialize), Ok(g) if g.program.plan.is_some())
                {
                    with_plan += 1;
                }
                let got = match got {
                    Ok(r) => {
                        promoted += (r.restarts > 0) as usize;
                        Ok(r.result)
                    }
                    Err(ResidualError::Runtime(e)) => Err(e),
                    // Annotations the analysis refuses, or loops a user annotation unrolls
                    // without bound: no code to compare. A bug fails the test.
                    Err(ResidualError::Unsupported(_)) => {
                        refused += 1;
                        continue;
                    }
                    Err(ResidualError::Budget(_)) => {
                        over_budget += 1;
                        continue;
                    }
                    Err(e @ ResidualError::Internal(_)) => panic!("seed {seed}: {e}"),
                };
                if !crate::bta::analyze(&m, f, crate::bta::Mode::Specialize)
                    .key_params
                    .is_empty()
                {
                    keyed += 1;
                }
                compared += 1;
                // Compared through `Debug`, which tells NaNs apart from nothing but keeps -0.0.
                let same_mem = format!("{mem:?}") == format!("{mem2:?}");
                let same = match (&expected, &got) {
                    (Ok(a), Ok(b)) => format!("{a:?}") == format!("{b:?}") && same_mem,
                    (Err(a), Err(b)) => {
                        std::mem::discriminant(&a.kind) == std::mem::discriminant(&b.kind)
                            && a.loc == b.loc
                            && same_mem
                    }
                    _ => false,
                };
                assert!(
                    same,
                    "seed {seed}, {}: interpreter {expected:?}, residual {got:?}\n{}",
                    f.name,
                    crate::ir::printer::print_module(&m)
                );
            }
        }
        let total = cases(1000) as usize;
        assert!(compared >= total, "only {compared} functions compared");
        // Most runs are compared: refused annotations and spent budgets stay a minority.
        println!(
            "{compared} compared ({planned_same} planned = work list, {with_plan} with a plan), \
             {refused} refused, {over_budget} over budget"
        );
        assert!(
            planned_same >= total,
            "only {planned_same} planned runs compared"
        );
        // Programs without a plan (over its budget) run on the work list: a small minority.
        assert!(
            with_plan * 10 >= planned_same * 9,
            "only {with_plan} had a plan"
        );
        assert!(
            (refused + over_budget) * 5 <= compared,
            "{refused} refused and {over_budget} over budget for {compared} compared"
        );
        assert!(
            keyed * 10 >= total,
            "only {keyed} functions had key parameters"
        );
        assert!(
            promoted * 20 >= total,
            "only {promoted} functions were promoted into"
        );
    }
}

//! Building the generating extension: a function and its binding-time analysis become a
//! [`StitchProgram`] (setup operations, templates and terminators per block), the only
//! input of the runtime.
//!
//! Steps:
//! 1. binding-time analysis ([`crate::bta`]);
//! 2. blocks are split so that every promotion point (`make_static` of a value that may be
//!    dynamic) starts a block: entering that block is where the runtime dispatches;
//! 3. liveness ([`crate::analysis::liveness`]) gives each block its static live-ins (part
//!    of the memo key of its specialized copies) and dynamic live-ins (extra parameters of
//!    the copies, so that each copy is self-contained, as in max-SSA form);
//! 4. each instruction becomes a setup operation (static), a template operation (dynamic,
//!    static operands becoming holes) or a lift (`make_dynamic`); branches become static or
//!    dynamic terminators.

use std::collections::{HashMap, HashSet};

use cranelift_entity::PrimaryMap;
use dyc_stitcher::ge::{
    self as sge, BlockData, Caching, CalleeDecl, CalleeId, Edge, HostDecl, HostId, Lazy, Op,
    Operand, Param, ProgramHeader, Reg, SetupOp, StitchProgram, Term,
};
use dyc_templates::template::TOp;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::liveness::Liveness;
use crate::analysis::loops::LoopForest;
use crate::bta::{self, Bta, BtaError, Mode};
use crate::ir::{
    Block, BlockCall, Callee, Const, FuncId, Function, Inst, InstData, Module, Policy, PolicyGroup,
    Scalar, Value,
};
use crate::reducify::ReducifyError;

/// The generating extension of a function, with the analysis it came from.
#[derive(Clone, Debug)]
pub struct GeneratingExtension {
    pub program: StitchProgram,
    pub bta: Bta,
    /// The function after splitting at promotion points (what `program` describes).
    pub function: Function,
}

/// Why a generating extension could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeError {
    /// The binding-time analysis refuses the annotations (each error names the variable
    /// and the reason).
    Annotations(Vec<BtaError>),
    /// A loop entered at its side could not be made single-entry (see
    /// [`crate::reducify`]).
    Reducify(ReducifyError),
    /// The function after splitting does not verify, or the stitch program does not check:
    /// a bug of the static compiler.
    Internal(String),
}

impl GeError {
    /// The instructions the error is about, with a message for each (for diagnostics).
    pub fn at(&self) -> Vec<(Inst, String)> {
        match self {
            GeError::Annotations(es) => es.iter().map(|e| (e.inst, e.message.clone())).collect(),
            GeError::Reducify(e) => {
                let inst = match *e {
                    ReducifyError::TooLarge { side_entry, .. } => side_entry,
                    ReducifyError::ArrayAcrossCopies { array } => array,
                };
                vec![(inst, e.to_string())]
            }
            GeError::Internal(_) => Vec::new(),
        }
    }
}

impl std::fmt::Display for GeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GeError::Annotations(es) => {
                let ms: Vec<&str> = es.iter().map(|e| e.message.as_str()).collect();
                write!(f, "{}", ms.join("; "))
            }
            GeError::Reducify(e) => write!(f, "{e}"),
            GeError::Internal(m) => write!(f, "internal error (a bug): {m}"),
        }
    }
}

/// Builds the stitch program of function `id` of `m` (a verified module). The function
/// after splitting is verified (in debug builds) and the stitch program checked before it
/// is returned.
/// The caching policy a policy names (`cache_all` for a policy of another group).
pub fn caching_of(p: Policy) -> Caching {
    match p {
        Policy::CacheAllUnchecked => Caching::AllUnchecked,
        Policy::CacheOne => Caching::One,
        Policy::CacheOneUnchecked => Caching::OneUnchecked,
        Policy::Replicate => Caching::Replicate,
        _ => Caching::All,
    }
}

/// The region's laziness policy: that of the first `make_static` (in layout order) that
/// gives one; `eager` by default.
fn laziness(f: &Function) -> Policy {
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            if let InstData::MakeStatic { policies, .. } = &f.insts[i] {
                if let Some(p) = policies.get(PolicyGroup::Laziness) {
                    return p;
                }
            }
        }
    }
    Policy::Eager
}

/// The blocks entered lazily ([`dyc_stitcher::ge::BlockData::lazy`]), as the region's
/// laziness policy says (DyC's):
/// - `lazy`: every successor of a dynamic branch, entered lazily by dynamic branches;
/// - `specialize_lazy`: specialization points (merges with a static parameter, whose
///   values may differ by path), entered lazily by every edge;
/// - `loop_specialize_lazy`: those of them that head a loop (each iteration of a loop
///   unrolled on its static variables is stitched when the previous one reaches it);
/// - `eager` and `promote_lazy`: none (promotions are always stitched lazily).
///
/// The entry block and promotion blocks are never marked (one is the unit's start, the
/// other is lazy already); generic code has no lazy blocks.
fn lazy_blocks(
    f: &Function,
    cfg: &ControlFlowGraph,
    bta: &Bta,
    mode: Mode,
) -> HashMap<Block, Lazy> {
    let policy = laziness(f);
    let mut lazy = HashMap::new();
    if mode != Mode::Specialize || matches!(policy, Policy::Eager | Policy::PromoteLazy) {
        return lazy;
    }
    let entry = f.layout.entry_block();
    let eligible = |s: Block| {
        Some(s) != entry
            && !f
                .layout
                .block_insts(s)
                .first()
                .is_some_and(|&i| bta.is_promotion(i))
    };
    if policy == Policy::Lazy {
        for &b in f.layout.blocks() {
            let Some(t) = f.terminator(b) else { continue };
            let dynamic = match &f.insts[t] {
                InstData::Brif { cond, .. } => !bta.is_static(*cond),
                InstData::Switch { arg, .. } => !bta.is_static(*arg),
                _ => false,
            };
            if dynamic {
                for s in f.successors(b).filter(|&s| eligible(s)) {
                    lazy.insert(s, Lazy::DynamicBranches);
                }
            }
        }
        return lazy;
    }
    let headers: HashSet<Block> = match policy {
        Policy::LoopSpecializeLazy => LoopForest::compute(cfg)
            .loops
            .iter()
            .map(|l| l.header)
            .collect(),
        _ => HashSet::new(),
    };
    for &s in f.layout.blocks() {
        let special =
            cfg.preds(s).count() >= 2 && f.block_params(s).iter().any(|&p| bta.is_static(p));
        let wanted = match policy {
            Policy::SpecializeLazy => special,
            _ => special && headers.contains(&s),
        };
        if wanted && eligible(s) {
            lazy.insert(s, Lazy::AllEdges);
        }
    }
    lazy
}

/// The generating extension of function `id` of `m` for `mode`, prepared as
/// [`Prepare::default`] says.
pub fn build(m: &Module, id: FuncId, mode: Mode) -> Result<GeneratingExtension, GeError> {
    build_with(m, id, mode, Prepare::default())
}

/// Which optional preparations [`build_with`] makes before specialization (the others,
/// reducify, code placement, promotion and division, are needed for correctness or by
/// the annotations and always run).
#[derive(Clone, Copy, Debug)]
pub struct Prepare {
    /// Thread forwarding blocks ([`crate::forward`]); on by default. Off, the plan is the
    /// transform's on the function's blocks as written (the file tests of the plan draw the
    /// design notes' graphs, whose merges are blocks of their own).
    pub thread: bool,
}

impl Default for Prepare {
    fn default() -> Prepare {
        Prepare { thread: true }
    }
}

/// [`build`] with the preparations `prep` says.
pub fn build_with(
    m: &Module,
    id: FuncId,
    mode: Mode,
    prep: Prepare,
) -> Result<GeneratingExtension, GeError> {
    let mut orig = &m.funcs[id];
    // Specialization follows the plan of the static transform, which needs single-entry
    // loops, and runs setup code once per copy, which placement keeps out of loops; generic
    // code goes to Cranelift as it is.
    let prepared;
    if mode == Mode::Specialize {
        let limit = crate::reducify::max_blocks(orig.layout.blocks().len());
        let mut g = orig.clone();
        if prep.thread {
            crate::forward::thread(&mut g);
        }
        if let Some(r) = crate::reducify::reducify(&g, limit).map_err(GeError::Reducify)? {
            g = r;
        }
        crate::placement::place(&mut g);
        crate::placement::number(&mut g);
        crate::promote::auto_promote(m, &mut g);
        crate::divide::poly_divide(m, &mut g);
        prepared = g;
        orig = &prepared;
    }
    let bta = bta::analyze(m, orig, mode);
    if !bta.errors.is_empty() {
        return Err(GeError::Annotations(bta.errors.clone()));
    }
    let mut f = orig.clone();
    split_at_promotions(&mut f, &bta);
    // The verifier runs in debug builds (every test); the checker below always runs.
    if cfg!(debug_assertions) {
        crate::verifier::verify_function_in(m, &f)
            .map_err(|e| GeError::Internal(format!("after splitting at promotions: {e}")))?;
    }
    let cfg = ControlFlowGraph::compute(&f);
    let live = Liveness::compute(&f, &cfg);
    let ids: HashMap<Block, sge::Block> = f
        .layout
        .blocks()
        .iter()
        .enumerate()
        .map(|(i, &b)| (b, sge::Block::from_u32(i as u32)))
        .collect();
    let mut callees: PrimaryMap<CalleeId, CalleeDecl> = PrimaryMap::new();
    let mut callee_index = |c: Callee| -> CalleeId {
        let decl = match c {
            Callee::Func(fid) => CalleeDecl::Func {
                index: fid.as_u32(),
                params: m.funcs[fid].sig.params.clone(),
                ret: m.funcs[fid].sig.ret,
            },
            Callee::Extern(e) => CalleeDecl::Host {
                host: HostId::from_u32(e.as_u32()),
            },
        };
        match callees.iter().find(|(_, d)| **d == decl) {
            Some((k, _)) => k,
            None => callees.push(decl),
        }
    };
    let r = |v: Value| Reg::from_u32(v.as_u32());
    let operand = |v: Value| {
        if bta.is_static(v) {
            Operand::Static(r(v))
        } else {
            Operand::Dyn(r(v))
        }
    };
    let edge = |c: &BlockCall| Edge {
        block: ids[&c.block],
        args: c.args.iter().map(|&a| operand(a)).collect(),
    };
    let lazy = lazy_blocks(&f, &cfg, &bta, mode);
    let mut blocks = PrimaryMap::new();
    for &b in f.layout.blocks() {
        let params: Vec<Value> = f.block_params(b).to_vec();
        let sparams: Vec<Param> = params
            .iter()
            .map(|&p| {
                if bta.is_static(p) {
                    Param::Static(r(p))
                } else {
                    Param::Dyn(r(p), f.value_type(p))
                }
            })
            .collect();
        let insts = f.layout.block_insts(b);
        let mut promote = Vec::new();
        let mut ops = Vec::new();
        let mut first = 0;
        let mut caching = Caching::All;
        if let Some(&i0) = insts.first() {
            if bta.is_promotion(i0) {
                let InstData::MakeStatic { args, policies } = &f.insts[i0] else {
                    unreachable!("promotions are make_static")
                };
                caching = policies
                    .get(PolicyGroup::Caching)
                    .map_or(Caching::All, caching_of);
                for (&(v, _), &res) in args.iter().zip(f.inst_results(i0)) {
                    if bta.is_static(v) {
                        ops.push(Op::Setup {
                            dst: r(res),
                            op: SetupOp::Copy(r(v)),
                            loc: f.srclocs[i0],
                        });
                    } else {
                        promote.push((r(v), r(res)));
                    }
                }
                first = 1;
            }
        }
        let promoted: Vec<Value> = if first == 1 {
            f.inst_results(insts[0]).to_vec()
        } else {
            Vec::new()
        };
        let mut static_live_in = Vec::new();
        let mut dyn_live_in = Vec::new();
        for &v in live.live_in(b) {
            if params.contains(&v) || promoted.contains(&v) {
                continue;
            }
            if bta.is_static(v) {
                static_live_in.push(r(v));
            } else {
                dyn_live_in.push((r(v), f.value_type(v)));
            }
        }
        let last = insts.len() - 1;
        for &i in &insts[first..last] {
            let loc = f.srclocs[i];
            let data = &f.insts[i];
            let results = f.inst_results(i);
            if bta.inst_is_static(&f, i) {
                let regs: Vec<Reg> = data.operands().into_iter().map(r).collect();
                let op = match data {
                    InstData::Const(c) => SetupOp::Const(*c),
                    InstData::Unary { op, .. } => SetupOp::Unary(*op, regs[0]),
                    InstData::Binary { op, .. } => SetupOp::Binary(*op, regs[0], regs[1]),
                    InstData::Cmp { op, .. } => SetupOp::Cmp(*op, regs[0], regs[1]),
                    InstData::Select { .. } => SetupOp::Select(regs[0], regs[1], regs[2]),
                    InstData::Cast { to, .. } => SetupOp::Cast(*to, regs[0]),
                    InstData::Len { .. } => SetupOp::Len(regs[0]),
                    InstData::StaticLoad { .. } => SetupOp::StaticLoad(regs[0], regs[1]),
                    InstData::Call {
                        callee: c @ Callee::Extern(e),
                        ..
                    } => SetupOp::CallPure {
                        host: HostId::from_u32(e.as_u32()),
                        callee: callee_index(*c),
                        args: regs,
                    },
                    InstData::MakeStatic { .. } => {
                        for (&src, &res) in regs.iter().zip(results) {
                            ops.push(Op::Setup {
                                dst: r(res),
                                op: SetupOp::Copy(src),
                                loc,
                            });
                        }
                        continue;
                    }
                    other => unreachable!("static instruction {other:?}"),
                };
                ops.push(Op::Setup {
                    dst: r(results[0]),
                    op,
                    loc,
                });
                continue;
            }
            let args: Vec<Operand> = data.operands().into_iter().map(operand).collect();
            let is_array = |v: Value| f.value_type(v).is_array();
            match *data {
                InstData::ArrayNew { elem, len } => {
                    ops.push(Op::ArrayNew {
                        dst: r(results[0]),
                        elem,
                        len,
                    });
                    continue;
                }
                InstData::Load { slice, index } if is_array(slice) => {
                    ops.push(Op::ArrayLoad {
                        dst: r(results[0]),
                        arr: r(slice),
                        index: operand(index),
                        loc,
                    });
                    continue;
                }
                InstData::Store {
                    slice,
                    index,
                    value,
                } if is_array(slice) => {
                    ops.push(Op::ArrayStore {
                        arr: r(slice),
                        index: operand(index),
                        value: operand(value),
                        loc,
                    });
                    continue;
                }
                InstData::Len { arg } if is_array(arg) => {
                    // The length of an array is its type's.
                    let n = f.value_type(arg).flat_len() as u64;
                    ops.push(Op::Setup {
                        dst: r(results[0]),
                        op: SetupOp::Const(Const::Int(Scalar::I64, n)),
                        loc,
                    });
                    ops.push(Op::Lift {
                        dst: r(results[0]),
                        src: Operand::Static(r(results[0])),
                    });
                    continue;
                }
                _ => {}
            }
            let top = match data {
                InstData::MakeStatic { .. } | InstData::MakeDynamic { .. } => {
                    for (&src, &res) in args.iter().zip(results) {
                        ops.push(Op::Lift { dst: r(res), src });
                    }
                    continue;
                }
                InstData::Const(c) => {
                    // A constant made dynamic (generic mode).
                    ops.push(Op::Setup {
                        dst: r(results[0]),
                        op: SetupOp::Const(*c),
                        loc,
                    });
                    ops.push(Op::Lift {
                        dst: r(results[0]),
                        src: Operand::Static(r(results[0])),
                    });
                    continue;
                }
                InstData::Unary { op, .. } => TOp::Unary(*op),
                InstData::Binary { op, .. } => TOp::Binary(*op),
                InstData::Cmp { op, .. } => TOp::Cmp(*op),
                InstData::Select { .. } => TOp::Select,
                InstData::Cast { to, .. } => TOp::Cast(*to),
                InstData::Len { .. } => TOp::Len,
                InstData::Load { .. } | InstData::StaticLoad { .. } => TOp::Load,
                InstData::Store { .. } => TOp::Store,
                InstData::Call { callee, .. } => TOp::Call {
                    callee: callee_index(*callee).as_u32(),
                    ret: m.callee_sig(*callee).ret,
                },
                other => unreachable!("terminator in the body: {other:?}"),
            };
            ops.push(Op::Emit {
                dst: results.first().map(|&v| r(v)),
                op: top,
                args,
                loc,
            });
        }
        let t = insts[last];
        let term = match &f.insts[t] {
            InstData::Jump { dest } => Term::Jump(edge(dest)),
            InstData::Brif {
                cond,
                then_dest,
                else_dest,
            } => Term::Branch {
                cond: operand(*cond),
                then_edge: edge(then_dest),
                else_edge: edge(else_dest),
            },
            InstData::Switch {
                arg,
                cases,
                default,
            } => Term::Switch {
                arg: operand(*arg),
                cases: cases.iter().map(|(k, c)| (*k, edge(c))).collect(),
                default: edge(default),
            },
            InstData::Return { value } => Term::Return(value.map(operand)),
            InstData::Trap => Term::Trap(f.srclocs[t]),
            other => unreachable!("not a terminator: {other:?}"),
        };
        blocks.push(BlockData {
            name: b.to_string(),
            params: sparams,
            promote,
            static_live_in,
            dyn_live_in,
            ops,
            term,
            lazy: lazy.get(&b).copied().unwrap_or_default(),
            caching,
        });
    }
    let header = ProgramHeader {
        name: f.name.clone(),
        param_types: f.sig.params.clone(),
        ret: f.sig.ret,
        key_params: bta.key_params.clone(),
        hosts: m
            .externs
            .values()
            .map(|e| HostDecl {
                name: e.name.clone(),
                params: e.sig.params.clone(),
                ret: e.sig.ret,
                pure: e.pure,
            })
            .collect(),
        callees,
        num_regs: f.values.len() as u32,
    };
    let mut program = StitchProgram::new(header, blocks, sge::Block::from_u32(0));
    dyc_stitcher::ge::check_cfg(&program)
        .map_err(|e| GeError::Internal(format!("the stitch program does not check:\n{e}")))?;
    program.plan = crate::transform::plan(&program);
    dyc_stitcher::ge::check_plan(&program)
        .map_err(|e| GeError::Internal(format!("the plan does not check:\n{e}")))?;
    Ok(GeneratingExtension {
        program,
        bta,
        function: f,
    })
}

/// Splits blocks so that every promotion point is the first instruction of its block, in
/// one pass over the layout.
fn split_at_promotions(f: &mut Function, bta: &Bta) {
    let mut at: Vec<(Inst, Block)> = Vec::new();
    for &i in &bta.promotions {
        let b = f.layout.inst_block(i).expect("in layout");
        if f.layout.block_insts(b).first() != Some(&i) {
            at.push((i, f.create_block()));
        }
    }
    for (b, nb) in f.layout.split_blocks(&at) {
        f.append_inst(
            b,
            InstData::Jump {
                dest: BlockCall::new(nb, vec![]),
            },
            None,
        );
    }
}

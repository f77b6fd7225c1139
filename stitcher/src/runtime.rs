//! The runtime: specialized code through Cranelift's JIT.
//!
//! - A [`Runtime`] serves one module: it compiles the **generic code** of every function
//!   of the module once (calls from specialized code go there) and then **units**:
//!   functions in Cranelift's `tail` convention that the work-list specializer produces
//!   through the Cranelift emitter ([`dyc_templates::clif`]).
//! - [`Runtime::specialize`] makes a [`Specialization`]: the entry unit for a region and
//!   its static values, behind a system-ABI **entry wrapper** that Rust calls.
//! - At a **promotion**, specialized code calls back into the runtime with the promoted
//!   values ([`dyc_promote`]); the runtime looks them up in the site's cache (a concurrent
//!   map) and on a miss stitches the continuation unit; the code then tail-calls it. Each
//!   unit is stitched once even when threads race to it (the site's lock is held while
//!   stitching).
//! - Faults (bounds, division by zero, `trap`, call depth, fuel, failing hosts, a failed
//!   lazy specialization) are explicit checks in the code, which records the fault site in
//!   the call context and returns a status; [`Specialization::call_words`] turns it into a
//!   [`RunError`] with kind and source position. No signal is ever raised.
//!
//! Code memory is not reclaimed in this version: units live as long as the runtime
//! (cranelift-jit frees only whole modules).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cranelift_codegen::entity::EntityRef;

use cranelift_codegen::ir::{
    self, types, AbiParam, InstBuilder, MemFlagsData, Signature, UserFuncName,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module};
use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};

use dyc_templates::clif::{self, ClifEmitter, ClifOptions, Hooks};
use dyc_templates::ops::Const;
use dyc_templates::template::FaultKind;
use dyc_templates::types::{Scalar, SrcLoc, Type};

use crate::exec::{Context, Executor, ExecutorKind, PromotionMode};
use crate::ge::{
    Block, Budget, BudgetKind, CalleeDecl, HostDecl, HostId, PureHosts, SVal, Site, SliceData,
    SpecError, StitchProgram,
};
use crate::jit::{host_isa, JitOptions};
use cranelift_codegen::entity::PrimaryMap;

/// The call context shared with generated code (layout: [`dyc_templates::clif::ctx`]).
#[repr(C)]
pub struct CallCtx {
    fault_site: u64,
    fault_a: u64,
    fault_b: u64,
    depth: u64,
    max_depth: u64,
    fuel: u64,
    status: u64,
    runtime: *const Inner,
    /// The message of a failing host function or lazy specialization.
    message: Option<String>,
}

/// A host function: scalar arguments in, an optional scalar out, or an error message.
pub type HostFn = dyn Fn(&[Const]) -> Result<Option<Const>, String> + Send + Sync;

/// Options of a runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    pub jit: JitOptions,
    /// Block entries one call may execute (`None`: unlimited, no checks in the code).
    pub fuel: Option<u64>,
    /// Nested calls of module functions one call may make (the region's own activation
    /// not counted: the interpreter's `max_depth` of `n` frames matches `n - 1` here).
    pub max_depth: u64,
    pub budget: Budget,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            jit: JitOptions::default(),
            fuel: None,
            max_depth: 1_000,
            budget: Budget::default(),
        }
    }
}

/// A runtime fault of specialized or generic code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    pub kind: FaultKind,
    /// The function (region) where it happened.
    pub func: String,
    pub loc: SrcLoc,
    /// For out-of-bounds accesses: the index and the length.
    pub index: Option<(i64, u64)>,
    /// For failing hosts and failed lazy specializations.
    pub message: Option<String>,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            FaultKind::OutOfBounds => match self.index {
                Some((i, n)) => write!(f, "index {i} out of bounds for length {n}")?,
                None => write!(f, "index out of bounds")?,
            },
            FaultKind::DivisionByZero => write!(f, "division by zero")?,
            FaultKind::Trap => write!(f, "trap")?,
            FaultKind::CallDepthExceeded => write!(f, "call depth exceeded")?,
            FaultKind::FuelExhausted => write!(f, "fuel exhausted")?,
            FaultKind::Host => write!(f, "host function error")?,
            FaultKind::Specialization => write!(f, "lazy specialization failed")?,
        }
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        write!(f, " in fn {}", self.func)?;
        if self.loc.is_known() {
            write!(f, ", line {}", self.loc)?;
        }
        Ok(())
    }
}

impl std::error::Error for RunError {}

/// Why a runtime or a specialization could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeError {
    Jit(String),
    Spec(SpecError),
    /// A bug: a panic caught inside specialization or code generation.
    Internal(String),
    /// Arguments that do not fit the region.
    Arguments(String),
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuntimeError::Jit(m) => write!(f, "code generation failed: {m}"),
            RuntimeError::Spec(e) => write!(f, "{e}"),
            RuntimeError::Internal(m) => write!(f, "internal error (a bug): {m}"),
            RuntimeError::Arguments(m) => write!(f, "bad arguments: {m}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

/// What making one unit cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitStats {
    /// Specialized block copies.
    pub blocks: usize,
    /// Setup and template operations the specializer processed.
    pub ops: usize,
    /// Cranelift IR instructions generated.
    pub insts: usize,
    /// Time specializing and building Cranelift IR (the stitcher's own work).
    pub stitch_ns: u64,
    /// Time in Cranelift compiling the IR to machine code.
    pub compile_ns: u64,
}

struct FaultSite {
    kind: FaultKind,
    loc: SrcLoc,
    func: String,
}

/// What one specialization owns: its program, static slices (copies the code may point
/// into) and the key.
struct SpecShared {
    prog: Arc<StitchProgram>,
    slices: Vec<Option<SliceData>>,
    /// Byte copies of the static slices, which specialized code reads.
    storage: Vec<Option<Box<[u64]>>>,
    /// Continuation units stitched so far (bounded by the budget's `max_units`).
    units: std::sync::atomic::AtomicUsize,
}

impl SpecShared {
    fn static_ptrs(&self) -> Vec<Option<(u64, u64, Scalar)>> {
        self.slices
            .iter()
            .zip(&self.storage)
            .map(|(s, st)| match (s, st) {
                (Some(d), Some(b)) => Some((b.as_ptr() as u64, d.data.len() as u64, d.elem)),
                _ => None,
            })
            .collect()
    }
}

struct PromoSite {
    shared: Arc<SpecShared>,
    site: Site,
    /// Types of the promoted values.
    types: Vec<Scalar>,
    cache: DashMap<Vec<u64>, usize>,
    /// Held while stitching a continuation, so that racing threads stitch it once.
    stitching: Mutex<()>,
    /// The inline cache the code reads before calling back (single-value sites): slots
    /// of pointers to immutable `[value, code]` pairs, set once and never changed, so that
    /// a reader never sees a torn entry. The pairs live as long as the runtime.
    inline: Box<[AtomicU64]>,
}

impl PromoSite {
    /// Records `code` for a one-word key in the inline cache, if its slot is free.
    fn install_inline(&self, word: u64, code: usize) {
        let slot = &self.inline[clif::inline_cache_slot(word) as usize];
        if slot.load(Ordering::Acquire) != 0 {
            return;
        }
        let pair: &'static [u64; 2] = Box::leak(Box::new([word, code as u64]));
        let _ = slot.compare_exchange(0, pair.as_ptr() as u64, Ordering::AcqRel, Ordering::Acquire);
    }
}

struct JitState {
    module: JITModule,
    helpers: HashMap<&'static str, FuncId>,
}

// SAFETY: the JIT module is only ever used under `Inner::jit`'s mutex, and the code and
// data it owns are never freed while the runtime lives; it holds no thread-bound state.
unsafe impl Send for JitState {}

struct Inner {
    jit: Mutex<JitState>,
    opts: RuntimeOptions,
    hosts_decl: PrimaryMap<HostId, HostDecl>,
    hosts: RwLock<Vec<Option<Arc<HostFn>>>>,
    /// Generic programs of the module's functions and their compiled code.
    generic: Vec<Arc<StitchProgram>>,
    generic_ids: Vec<FuncId>,
    faults: RwLock<Vec<FaultSite>>,
    sites: RwLock<Vec<Arc<PromoSite>>>,
    /// Promotion sites by (specialization, block, static key).
    site_ids: DashMap<SiteKey, u32>,
    /// The fault site of failed lazy specializations.
    lazy_fault: u64,
}

type SiteKey = (usize, Block, Vec<(u8, u64)>);

/// A runtime for one module.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

/// Pure hosts of the runtime, for static calls at specialization time.
struct RtHosts<'a>(&'a Inner);

impl PureHosts for RtHosts<'_> {
    fn call(&self, index: HostId, args: &[Const]) -> Result<Option<Const>, String> {
        let f = self.0.hosts.read().get(index.index()).cloned().flatten();
        match f {
            Some(f) => f(args),
            None => Err(format!(
                "host function `{}` is not registered",
                host_name(&self.0.hosts_decl, index)
            )),
        }
    }
}

fn host_name(decls: &PrimaryMap<HostId, HostDecl>, index: HostId) -> &str {
    decls.get(index).map_or("?", |d| d.name.as_str())
}

extern "C" fn dyc_fmod(x: f64, y: f64) -> f64 {
    x % y
}

/// Called by code at a promotion: the continuation's code for the promoted values, or 0
/// after recording a fault in the context.
extern "C" fn dyc_promote(ctx: *mut CallCtx, site: u64, values: *const u64) -> usize {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: generated code passes the context it was called with, which the entry
        // wrapper's caller (`Specialization::call_words`) keeps alive and exclusive for the
        // whole call, and whose `runtime` field points to the live runtime.
        let ctx = unsafe { &mut *ctx };
        // SAFETY: as above, `runtime` outlives every call into its code.
        let inner = unsafe { &*ctx.runtime };
        let site = match inner.sites.read().get(site as usize) {
            Some(s) => s.clone(),
            None => return Err("unknown promotion site".to_string()),
        };
        // SAFETY: the code stores one word per promoted value into a stack slot and
        // passes its address; the slot lives until this call returns.
        let words = unsafe { std::slice::from_raw_parts(values, site.types.len()) };
        inner.continuation(&site, words).map_err(|e| e.to_string())
    }));
    let fail = |ctx: *mut CallCtx, msg: String| {
        // SAFETY: as above; the context is valid for the call.
        let c = unsafe { &mut *ctx };
        // SAFETY: as above.
        let inner = unsafe { &*c.runtime };
        c.fault_site = inner.lazy_fault;
        c.message = Some(msg);
        0
    };
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(msg)) => fail(ctx, msg),
        Err(_) => fail(ctx, "the specializer panicked".into()),
    }
}

/// Called by code for a host function: arguments in `args[..n]`, result written to
/// `args[0]`; returns 0, or 1 after recording the fault at `site`.
extern "C" fn dyc_host_call(
    ctx: *mut CallCtx,
    host: u64,
    args: *mut u64,
    n: u64,
    site: u64,
) -> u64 {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: see `dyc_promote`: the context and the runtime are alive for the call.
        let inner = unsafe { &*(*ctx).runtime };
        let decl = inner
            .hosts_decl
            .get(HostId::from_u32(host as u32))
            .ok_or("unknown host")?
            .clone();
        // SAFETY: the code passes a stack slot of `n` words that lives during the call.
        let words = unsafe { std::slice::from_raw_parts_mut(args, (n as usize).max(1)) };
        let vals: Vec<Const> = decl
            .params
            .iter()
            .zip(words.iter())
            .map(|(t, &w)| word_to_const(w, t.scalar().unwrap_or(Scalar::I64)))
            .collect();
        let f = inner.hosts.read().get(host as usize).cloned().flatten();
        let f = f.ok_or_else(|| format!("`{}` is not registered", decl.name))?;
        match (f(&vals)?, decl.ret) {
            (Some(c), Some(t)) if Type::Scalar(c.ty()) == t => {
                words[0] = const_to_word(c);
                Ok(())
            }
            (None, None) => Ok(()),
            (r, t) => Err(format!(
                "`{}` returned {r:?}, its declaration says {t:?}",
                decl.name
            )),
        }
    }));
    let msg = match r {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => m,
        Err(_) => "the host function panicked".to_string(),
    };
    // SAFETY: as above.
    let c = unsafe { &mut *ctx };
    c.fault_site = site;
    c.message = Some(msg);
    1
}

/// A scalar from the word code passes (integers extended to 64 bits, `f64` bits).
pub fn word_to_const(w: u64, s: Scalar) -> Const {
    match s {
        Scalar::F64 => Const::F64(f64::from_bits(w)),
        Scalar::Bool => Const::Bool(w & 1 == 1),
        t => dyc_templates::semantics::int(t, w),
    }
}

/// The word code passes for a scalar.
pub fn const_to_word(c: Const) -> u64 {
    match c {
        Const::Int(_, x) => x,
        Const::F64(x) => x.to_bits(),
        Const::Bool(b) => b as u64,
    }
}

/// Service hooks for one unit being emitted.
struct UnitHooks<'a> {
    inner: &'a Inner,
    module: &'a mut JITModule,
    helpers: &'a HashMap<&'static str, FuncId>,
    prog: &'a StitchProgram,
    func_name: String,
}

impl Hooks for UnitHooks<'_> {
    fn fault_site(&mut self, kind: FaultKind, loc: SrcLoc) -> u64 {
        self.inner.fault_site(kind, loc, &self.func_name)
    }

    fn func_ref(&mut self, func: &mut ir::Function, callee: u32) -> Option<ir::FuncRef> {
        match self
            .prog
            .callees
            .get(crate::ge::CalleeId::from_u32(callee))?
        {
            CalleeDecl::Func { index, .. } => {
                let id = self.inner.generic_ids[*index as usize];
                Some(self.module.declare_func_in_func(id, func))
            }
            CalleeDecl::Host { .. } => None,
        }
    }

    fn host_index(&self, callee: u32) -> Option<u32> {
        match self
            .prog
            .callees
            .get(crate::ge::CalleeId::from_u32(callee))?
        {
            CalleeDecl::Host { host } => Some(host.as_u32()),
            CalleeDecl::Func { .. } => None,
        }
    }

    fn host_call(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        self.module
            .declare_func_in_func(self.helpers["dyc_host_call"], func)
    }

    fn promote(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        self.module
            .declare_func_in_func(self.helpers["dyc_promote"], func)
    }

    fn inline_cache(&mut self, site: u32) -> Option<u64> {
        let sites = self.inner.sites.read();
        let s = sites.get(site as usize)?;
        (s.types.len() == 1).then(|| s.inline.as_ptr() as u64)
    }

    fn fmod(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        self.module
            .declare_func_in_func(self.helpers["dyc_fmod"], func)
    }
}

fn sys_sig(params: &[ir::Type], rets: &[ir::Type]) -> Signature {
    let mut s = Signature::new(CallConv::SystemV);
    s.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    s.returns.extend(rets.iter().map(|&t| AbiParam::new(t)));
    s
}

impl Inner {
    fn fault_site(&self, kind: FaultKind, loc: SrcLoc, func: &str) -> u64 {
        let mut f = self.faults.write();
        f.push(FaultSite {
            kind,
            loc,
            func: func.to_string(),
        });
        f.len() as u64 - 1
    }

    /// The id of promotion site `site` of `shared`'s program, registered on first sight:
    /// units that reach one site share it, and so its cache of continuations.
    fn site_id(&self, shared: &Arc<SpecShared>, site: &Site) -> u32 {
        let (block, bits) = site.ident();
        let key = (Arc::as_ptr(shared) as usize, block, bits);
        if let Some(id) = self.site_ids.get(&key) {
            return *id;
        }
        let sb = &shared.prog.blocks[site.block];
        let inputs: Vec<_> = sb.dyn_inputs().collect();
        let types = sb
            .promote
            .iter()
            .map(|&(src, _)| {
                inputs
                    .iter()
                    .find(|&&(r, _)| r == src)
                    .and_then(|&(_, t)| t.scalar())
                    .unwrap_or(Scalar::I64)
            })
            .collect();
        let mut all = self.sites.write();
        let id = all.len() as u32;
        all.push(Arc::new(PromoSite {
            shared: shared.clone(),
            site: site.clone(),
            types,
            cache: DashMap::new(),
            stitching: Mutex::new(()),
            inline: (0..clif::INLINE_CACHE_SLOTS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }));
        self.site_ids.insert(key, id);
        id
    }

    /// Compiles one unit of `prog` from `start` with `key` into function `id`; the caller
    /// finalizes.
    fn compile_unit(
        &self,
        jit: &mut JitState,
        shared: &Arc<SpecShared>,
        start: Block,
        key: &[SVal],
        id: FuncId,
    ) -> Result<UnitStats, RuntimeError> {
        let prog = &*shared.prog;
        let t0 = std::time::Instant::now();
        let inputs: Vec<Type> = prog.blocks[start].input_types();
        let mut cctx = jit.module.make_context();
        cctx.func.signature = clif::unit_signature(&inputs);
        cctx.func.name = UserFuncName::user(0, id.as_u32());
        let frontend = jit.module.isa().frontend_config();
        let unit = {
            let mut hooks = UnitHooks {
                inner: self,
                module: &mut jit.module,
                helpers: &jit.helpers,
                prog,
                func_name: prog.name.clone(),
            };
            // A fresh builder context per unit: a specialization that fails half-way (a
            // budget) leaves no state behind for the next one.
            let mut fctx = FunctionBuilderContext::new();
            let b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
            let opts = ClifOptions {
                fuel: self.opts.fuel.is_some(),
            };
            let mut em = ClifEmitter::new(b, &mut hooks, opts, shared.static_ptrs(), &inputs);
            let resolve = |site: &Site| self.site_id(shared, site);
            let cx = Context {
                prog,
                slices: &shared.slices,
                hosts: &RtHosts(self),
                mode: PromotionMode::Units(&resolve),
                budget: self.opts.budget,
            };
            let unit = ExecutorKind::WorkList
                .run(&cx, start, key, &mut em)
                .map_err(RuntimeError::Spec)?;
            em.finish(unit.entry, frontend);
            unit
        };
        let mut stats = UnitStats {
            blocks: unit.blocks,
            ops: unit.ops,
            insts: cctx.func.dfg.num_insts(),
            stitch_ns: t0.elapsed().as_nanos() as u64,
            compile_ns: 0,
        };
        let t1 = std::time::Instant::now();
        jit.module
            .define_function(id, &mut cctx)
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        stats.compile_ns = t1.elapsed().as_nanos() as u64;
        jit.module.clear_context(&mut cctx);
        Ok(stats)
    }

    /// The code of the continuation at `site` for promoted `words`, stitched on a miss.
    fn continuation(&self, site: &Arc<PromoSite>, words: &[u64]) -> Result<usize, RuntimeError> {
        let key: Vec<u64> = words.to_vec();
        if let Some(c) = site.cache.get(&key) {
            if let [w] = words {
                site.install_inline(*w, *c);
            }
            return Ok(*c);
        }
        let _guard = site.stitching.lock();
        if let Some(c) = site.cache.get(&key) {
            return Ok(*c);
        }
        let units = site
            .shared
            .units
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if units > self.opts.budget.max_units {
            let b = &site.shared.prog.blocks[site.site.block];
            return Err(RuntimeError::Spec(SpecError::BudgetExceeded {
                budget: BudgetKind::Units,
                limit: self.opts.budget.max_units,
                block: b.name.clone(),
                loc: b.first_loc(),
            }));
        }
        let promoted: Vec<Const> = words
            .iter()
            .zip(&site.types)
            .map(|(&w, &t)| word_to_const(w, t))
            .collect();
        let full = site.site.key(&promoted);
        let mut jit = self.jit.lock();
        let inputs: Vec<Type> = site.shared.prog.blocks[site.site.block].input_types();
        let id = jit
            .module
            .declare_anonymous_function(&clif::unit_signature(&inputs))
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        self.compile_unit(&mut jit, &site.shared, site.site.block, &full, id)?;
        jit.module
            .finalize_definitions()
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        let code = jit.module.get_finalized_function(id) as usize;
        site.cache.insert(key, code);
        if let [w] = words {
            site.install_inline(*w, code);
        }
        Ok(code)
    }

    /// A system-ABI wrapper `fn(ctx, args: *const u64) -> u64` around unit `unit`.
    fn wrapper(
        &self,
        jit: &mut JitState,
        unit: FuncId,
        inputs: &[Type],
    ) -> Result<FuncId, RuntimeError> {
        let sig = sys_sig(&[types::I64, types::I64], &[types::I64]);
        let id = jit
            .module
            .declare_anonymous_function(&sig)
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        let mut cctx = jit.module.make_context();
        cctx.func.signature = sig;
        cctx.func.name = UserFuncName::user(0, id.as_u32());
        let frontend = jit.module.isa().frontend_config();
        {
            let callee = jit.module.declare_func_in_func(unit, &mut cctx.func);
            let mut fctx = FunctionBuilderContext::new();
            let mut b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
            let blk = b.create_block();
            b.append_block_params_for_function_params(blk);
            b.switch_to_block(blk);
            let (ctxv, argp) = (b.block_params(blk)[0], b.block_params(blk)[1]);
            let mut args = vec![ctxv];
            let mut k = 0i32;
            let flags = MemFlagsData::trusted;
            for t in inputs {
                match t {
                    Type::Scalar(s) => {
                        let w = b.ins().load(types::I64, flags(), argp, 8 * k);
                        let v = match s {
                            Scalar::I64 | Scalar::U64 => w,
                            Scalar::F64 => b.ins().bitcast(types::F64, MemFlagsData::new(), w),
                            s => b.ins().ireduce(clif::clif_type(*s), w),
                        };
                        args.push(v);
                        k += 1;
                    }
                    Type::Slice { .. } => {
                        args.push(b.ins().load(types::I64, flags(), argp, 8 * k));
                        args.push(b.ins().load(types::I64, flags(), argp, 8 * k + 8));
                        k += 2;
                    }
                }
            }
            let call = b.ins().call(callee, &args);
            let (v, status) = (b.inst_results(call)[0], b.inst_results(call)[2]);
            b.ins().store(flags(), status, ctxv, clif::ctx::STATUS);
            b.ins().return_(&[v]);
            b.seal_all_blocks();
            b.finalize(frontend);
        }
        jit.module
            .define_function(id, &mut cctx)
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        jit.module.clear_context(&mut cctx);
        Ok(id)
    }
}

impl Runtime {
    /// A runtime for a module whose functions have the generic programs `generic` (index =
    /// function index); their code is compiled now.
    pub fn new(generic: Vec<StitchProgram>, opts: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        let isa = host_isa(opts.jit).map_err(|e| RuntimeError::Jit(e.to_string()))?;
        let mut builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        builder.symbol("dyc_promote", dyc_promote as *const u8);
        builder.symbol("dyc_host_call", dyc_host_call as *const u8);
        builder.symbol("dyc_fmod", dyc_fmod as *const u8);
        let mut module = JITModule::new(builder);
        let mut helpers = HashMap::new();
        let decl = |m: &mut JITModule, name: &str, sig: Signature| {
            m.declare_function(name, Linkage::Import, &sig)
                .map_err(|e| RuntimeError::Jit(format!("{e:?}")))
        };
        helpers.insert(
            "dyc_promote",
            decl(
                &mut module,
                "dyc_promote",
                sys_sig(&[types::I64; 3], &[types::I64]),
            )?,
        );
        helpers.insert(
            "dyc_host_call",
            decl(
                &mut module,
                "dyc_host_call",
                sys_sig(&[types::I64; 5], &[types::I64]),
            )?,
        );
        helpers.insert(
            "dyc_fmod",
            decl(
                &mut module,
                "dyc_fmod",
                sys_sig(&[types::F64; 2], &[types::F64]),
            )?,
        );
        let hosts_decl = generic.first().map(|p| p.hosts.clone()).unwrap_or_default();
        let generic: Vec<Arc<StitchProgram>> = generic.into_iter().map(Arc::new).collect();
        let mut generic_ids = Vec::new();
        for p in &generic {
            let id = module
                .declare_anonymous_function(&clif::unit_signature(&p.param_types))
                .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
            generic_ids.push(id);
        }
        let inner = Inner {
            jit: Mutex::new(JitState { module, helpers }),
            opts,
            hosts: RwLock::new(vec![None; hosts_decl.len()]),
            hosts_decl,
            generic: generic.clone(),
            generic_ids: generic_ids.clone(),
            faults: RwLock::new(Vec::new()),
            sites: RwLock::new(Vec::new()),
            site_ids: DashMap::new(),
            lazy_fault: 0,
        };
        let mut inner = inner;
        inner.lazy_fault = inner.fault_site(
            FaultKind::Specialization,
            SrcLoc::default(),
            "lazy specialization",
        );
        {
            let mut jit = inner.jit.lock();
            for (p, &id) in generic.iter().zip(&generic_ids) {
                let shared = Arc::new(SpecShared {
                    prog: p.clone(),
                    slices: Vec::new(),
                    storage: Vec::new(),
                    units: Default::default(),
                });
                inner.compile_unit(&mut jit, &shared, p.entry, &[], id)?;
            }
            jit.module
                .finalize_definitions()
                .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        }
        Ok(Runtime {
            inner: Arc::new(inner),
        })
    }

    /// Registers host function `name` (declared by the module).
    pub fn register_host(&self, name: &str, f: Arc<HostFn>) -> Result<(), RuntimeError> {
        let k = self
            .inner
            .hosts_decl
            .values()
            .position(|h| h.name == name)
            .ok_or_else(|| {
                RuntimeError::Arguments(format!("the module declares no host function `{name}`"))
            })?;
        self.inner.hosts.write()[k] = Some(f);
        Ok(())
    }

    /// Specializes `prog` (a specializing program of this runtime's module) on the static
    /// values of its key parameters: `key[i]` for `prog.key_params[i]`, with the contents
    /// of static slices in `slices[k]` (by parameter position).
    pub fn specialize(
        &self,
        prog: Arc<StitchProgram>,
        key: Vec<SVal>,
        slices: Vec<Option<SliceData>>,
    ) -> Result<Specialization, RuntimeError> {
        let storage = slices
            .iter()
            .map(|s| {
                s.as_ref().map(|d| {
                    // One element per 8 bytes is more than enough room for any element type.
                    let mut buf = vec![0u64; d.data.len().max(1)].into_boxed_slice();
                    let size = clif::elem_size(d.elem) as usize;
                    // SAFETY: `buf` has 8 * len bytes, at least `size * len`; the writes
                    // stay inside it and the element types are plain bytes.
                    let bytes = unsafe {
                        std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, buf.len() * 8)
                    };
                    for (k, &c) in d.data.iter().enumerate() {
                        let w = const_to_word(c).to_le_bytes();
                        bytes[k * size..(k + 1) * size].copy_from_slice(&w[..size]);
                    }
                    buf
                })
            })
            .collect();
        let shared = Arc::new(SpecShared {
            prog: prog.clone(),
            slices,
            storage,
            units: Default::default(),
        });
        let inputs: Vec<Type> = prog.blocks[prog.entry].input_types();
        let mut jit = self.inner.jit.lock();
        let unit = jit
            .module
            .declare_anonymous_function(&clif::unit_signature(&inputs))
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        let mut stats = self
            .inner
            .compile_unit(&mut jit, &shared, prog.entry, &key, unit)?;
        let wrapper = self.inner.wrapper(&mut jit, unit, &inputs)?;
        let t = std::time::Instant::now();
        jit.module
            .finalize_definitions()
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        stats.compile_ns += t.elapsed().as_nanos() as u64;
        let code = jit.module.get_finalized_function(wrapper) as usize;
        Ok(Specialization {
            runtime: self.clone(),
            code,
            inputs,
            ret: prog.ret,
            name: prog.name.clone(),
            stats,
            _shared: shared,
        })
    }

    /// The generic code of function `index` behind an entry wrapper: the function compiled
    /// without specialization.
    pub fn generic(&self, index: usize) -> Result<Specialization, RuntimeError> {
        let prog = self
            .inner
            .generic
            .get(index)
            .cloned()
            .ok_or_else(|| RuntimeError::Arguments(format!("no function {index}")))?;
        let mut jit = self.inner.jit.lock();
        let wrapper =
            self.inner
                .wrapper(&mut jit, self.inner.generic_ids[index], &prog.param_types)?;
        jit.module
            .finalize_definitions()
            .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
        let code = jit.module.get_finalized_function(wrapper) as usize;
        Ok(Specialization {
            runtime: self.clone(),
            code,
            inputs: prog.param_types.clone(),
            ret: prog.ret,
            name: prog.name.clone(),
            stats: UnitStats::default(),
            _shared: Arc::new(SpecShared {
                prog,
                slices: Vec::new(),
                storage: Vec::new(),
                units: Default::default(),
            }),
        })
    }
}

/// Compiled code for a region and its static values (or generic code), callable from
/// Rust with the dynamic arguments.
pub struct Specialization {
    runtime: Runtime,
    code: usize,
    /// Types of the dynamic arguments, in order.
    pub inputs: Vec<Type>,
    pub ret: Option<Type>,
    name: String,
    /// What making the entry unit cost (zero for generic code).
    pub stats: UnitStats,
    _shared: Arc<SpecShared>,
}

impl Specialization {
    /// Calls the code with arguments as words (scalars: their word; slices: pointer then
    /// length) and returns the result's word.
    ///
    /// # Safety
    /// `words` must match [`Specialization::inputs`]: for each slice, a pointer to `len`
    /// valid, initialized elements of the slice's element type, writable if the slice is
    /// `[mut T]`, not accessed by anything else during the call. Scalars may be any bits.
    pub unsafe fn call_words(&self, words: &[u64]) -> Result<u64, RunError> {
        let opts = self.runtime.inner.opts;
        let mut ctx = CallCtx {
            fault_site: 0,
            fault_a: 0,
            fault_b: 0,
            depth: 0,
            max_depth: opts.max_depth,
            fuel: opts.fuel.unwrap_or(u64::MAX),
            status: 0,
            runtime: Arc::as_ptr(&self.runtime.inner),
            message: None,
        };
        // SAFETY: `code` is a finalized entry wrapper of this runtime with the signature
        // `extern "C" fn(*mut CallCtx, *const u64) -> u64`; the runtime (and so the code)
        // outlives the call through `self.runtime`. The caller guarantees the words.
        let f: extern "C" fn(*mut CallCtx, *const u64) -> u64 =
            unsafe { std::mem::transmute(self.code) };
        let v = f(&mut ctx, words.as_ptr());
        if ctx.status == 0 {
            return Ok(v);
        }
        let faults = self.runtime.inner.faults.read();
        let site = faults.get(ctx.fault_site as usize);
        Err(RunError {
            kind: site.map_or(FaultKind::Trap, |s| s.kind),
            func: site.map_or_else(|| self.name.clone(), |s| s.func.clone()),
            loc: site.map_or(SrcLoc::default(), |s| s.loc),
            index: (site.map(|s| s.kind) == Some(FaultKind::OutOfBounds))
                .then_some((ctx.fault_a as i64, ctx.fault_b)),
            message: ctx.message.take(),
        })
    }
}

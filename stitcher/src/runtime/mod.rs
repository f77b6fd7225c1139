//! The runtime: specialized code through Cranelift's JIT.
//!
//! - A [`Runtime`] serves one module. It compiles the **generic code** of every function
//!   of the module once, into a code region of its own (calls from specialized code go
//!   there), and then specializations.
//! - [`Runtime::specialize`] makes a [`Specialization`]: the entry unit for a region and
//!   its static values, stitched by an executor ([`crate::exec`]) through the Cranelift
//!   emitter ([`dyc_templates::clif`]) into a **code region owned by the specialization**,
//!   behind an entry wrapper ([`wrapper`]) that Rust calls.
//! - At a **promotion**, specialized code probes the site's inline cache and otherwise
//!   calls back into the runtime ([`sites`]); a miss stitches the continuation unit into
//!   the same region (once, even when threads race to it), and the code tail-calls it.
//! - Faults are explicit checks; the code records a fault site in the call context and
//!   returns a status ([`dyc_templates::abi`]); [`Specialization::call_words`] turns it
//!   into a [`RunError`] ([`faults`]). No signal is ever raised, and a panic inside
//!   specialization or code generation comes back as [`RuntimeError::Internal`].
//!
//! Files: [`cache`] (the one cache, region entries and promotions alike), [`faults`],
//! [`hosts`] (host calls), [`memory`] (code regions, reclamation, live counts), [`sites`]
//! (promotion sites, inline caches), [`wrapper`] (entry wrappers); the ABI shared with the
//! backends is [`dyc_templates::abi`].
//!
//! **Ownership.** The runtime owns its generic code region and the host table. A
//! specialization owns its code region (every unit stitched for it), its promotion sites,
//! and copies of its static slices; it keeps the runtime alive. Nothing is global but the
//! live counts ([`live`]). Dropping the last handle of a specialization frees its code.
//!
//! **Concurrency and lock order.** There is no global lock: specializations compile into
//! their own regions, so specializing one region never blocks calls or specializations of
//! another. Inside a specialization: a site's `stitching` lock, then the region's module
//! lock. Host callbacks run outside every lock of the runtime except, for pure hosts
//! called while stitching, the module lock of the specialization being stitched (a new
//! specialization's own, which no other thread can want; at a promotion, the site's and
//! the specialization's, shared with threads reaching promotions of that specialization).
//! Region entries (in `dyc::api`) hold no lock while specializing: a miss claims its key.

pub mod cache;
pub mod epoch;
pub mod faults;
pub mod heap;
pub mod hosts;
pub mod memory;
pub mod sites;
pub mod wrapper;

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use cranelift_codegen::entity::PrimaryMap;
use cranelift_codegen::ir::{self, types, UserFuncName};
use cranelift_codegen::isa::{OwnedTargetIsa, TargetIsa};
use cranelift_codegen::Context as ClifContext;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module, ModuleReloc};
use parking_lot::{Mutex, RwLock};

use dyc_templates::abi::{self, CallCtx};
use dyc_templates::clif::{self, ClifEmitter, ClifOptions, Hooks};
use dyc_templates::fold::Fold;
use dyc_templates::ops::Const;
use dyc_templates::params::Shape;
use dyc_templates::stencil::{self, StencilEmitter, StencilLib};
pub use dyc_templates::stencil::{Misses, StencilCounts};
use dyc_templates::tape::Tape;
use dyc_templates::template::{Emitter, FaultKind};
use dyc_templates::types::{Scalar, SrcLoc, Type};

use crate::exec::{Context, Executor, ExecutorKind, PromotionMode, Unit};
use crate::ge::{
    Block, Budget, BudgetKind, Caching, CalleeDecl, CalleeId, HostDecl, HostId, Lazy, SVal, Site,
    SliceData, SpecError, StitchProgram,
};
use crate::jit::{host_isa, large_unit_isa, JitOptions, LARGE_UNIT_BLOCKS};
use cache::WordHasher;

pub use faults::RunError;
pub use hosts::{const_to_word, word_to_const, HostFn};
pub use memory::{live, LiveCounts};
pub use sites::SiteStats;

use hosts::HostTable;
use memory::CodeRegion;
use sites::PromoSite;

/// Options of a runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeOptions {
    pub jit: JitOptions,
    /// Block entries one call may execute (`None`: unlimited, no checks in the code).
    pub fuel: Option<u64>,
    /// Nested calls of module functions one call may make (the region's own activation
    /// not counted: the interpreter's `max_depth` of `n` frames matches `n - 1` here).
    pub max_depth: u64,
    /// Bytes of native stack the frames of one call's nested module-function calls may
    /// use, measured from the entry; beyond it a call fails with a call-depth fault. The
    /// calling thread needs this much free stack, plus room for specializing lazily
    /// (default 512 KiB; Rust's spawned threads have 2 MiB).
    pub max_stack: u64,
    pub budget: Budget,
    /// The executor that runs stitch programs for generic code, and by default for
    /// specializations ([`Runtime::specialize`] takes one per call, so per region).
    pub executor: ExecutorKind,
    /// Bounds on what the caches of region entries keep.
    pub limits: Limits,
    /// The tier new specializations of region entries start in, and when they move up.
    pub tiers: Tiers,
    /// The stitch tier records each specialized unit's executor run on a tape, finds on it
    /// the block parameters that hold one constant on every path
    /// ([`dyc_templates::params`]: a register an interpreted program loads before a
    /// loop) and those nothing reads (a register the code after a loop head sets before
    /// it reads it), and replays it into the stencil emitter, which reads the first as
    /// constants and leaves both out of blocks and jumps; the replay also merges each
    /// block that one jump enters, stitched right after it, into the jumping block
    /// ([`dyc_templates::tape::Tape::replay`]) (default `true`). A program whose units'
    /// recordings stop finding such parameters is recorded only now and then
    /// ([`crate::ge::Recordings`]).
    pub constant_params: bool,
    /// Local arrays of more elements than this live in memory in specialized code (loaded
    /// and stored where they are accessed, never passed from block to block); shorter
    /// ones are kept as values ([`crate::ge::StitchProgram::home`]; default
    /// [`crate::ge::MAX_ARRAY_VALUES`], 32).
    pub max_array_values: u32,
    /// What a stitch-tier unit does when it needs a stencil not made ahead (a variant
    /// with its operands in other cache registers): by default it copies a variant made
    /// ahead and a worker thread makes the missing one for later units, so that
    /// specializing never waits for Cranelift ([`Misses::Background`]).
    pub stencil_misses: Misses,
}

/// A code-generation tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Copy-and-patch ([`dyc_templates::stencil`]): stencils compiled once by Cranelift,
    /// copied and patched per unit, no Cranelift call per unit; the fastest to make, the
    /// slowest code (values live in a frame in memory). A unit it cannot make (or a target
    /// other than x86-64) is compiled as in [`Tier::Quick`].
    Stitch,
    /// Cranelift at `opt_level` `none` with its single-pass register allocator: about
    /// half the compile time, slower code.
    Quick,
    /// Cranelift at `opt_level` `speed` with its backtracking register allocator.
    #[default]
    Optimizing,
}

/// Tiering of region-entry specializations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiers {
    /// The tier a region entry's new specialization is compiled in (default
    /// [`Tier::Stitch`]; [`Tier::Optimizing`]: no first tier).
    pub first: Tier,
    /// A version of a first tier ([`Tier::Stitch`], [`Tier::Quick`]) is specialized
    /// again in the optimizing tier, and replaces it in the cache, at the first call
    /// through its entry after this many calls (default 1,000); so is, once, a version of
    /// the optimizing tier whose promotions stitched continuation units, with the values
    /// they saw dispatched inline...
    pub hot_calls: u64,
    /// ...or after its calls through the entry have run this long together (default
    /// 1 ms: about what an optimizing specialization costs, so a version whose calls are
    /// long moves up before its slower code costs more than moving up would; a rent-or-buy
    /// rule that keeps the total within about twice the better of the two choices).
    pub hot_time: std::time::Duration,
}

impl Default for Tiers {
    fn default() -> Tiers {
        Tiers {
            first: Tier::Stitch,
            hot_calls: 1_000,
            hot_time: std::time::Duration::from_millis(1),
        }
    }
}

/// What to do when a specialization exceeds its [`Budget`] or a region entry has reached
/// [`Limits::max_versions`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnExceeded {
    /// Run the region's generic code for that key (the default: a service keeps serving).
    #[default]
    Fallback,
    /// Return the budget error to the caller.
    Error,
}

/// Bounds on the specializations cached at region entries, per program (one runtime).
/// Defaults: 64 versions per region entry, 4,096 specializations and 64 MiB of code in all,
/// fallback to generic code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Versions one region entry keeps (`cache_all`); a key met once this many are cached
    /// runs the region's generic code instead (as YJIT caps versions per block), until
    /// eviction makes room.
    pub max_versions: usize,
    /// Specializations kept by all region entries together; beyond it the least recently
    /// used is evicted.
    pub max_specializations: usize,
    /// Bytes of machine code kept by all region entries' specializations together (their
    /// entry units and every continuation stitched since); beyond it the least recently
    /// used are evicted.
    pub max_code_bytes: usize,
    /// What a specialization that runs out of budget does.
    pub on_exceeded: OnExceeded,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_versions: 64,
            max_specializations: 4_096,
            max_code_bytes: 64 << 20,
            on_exceeded: OnExceeded::Fallback,
        }
    }
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            jit: JitOptions::default(),
            fuel: None,
            max_depth: 1_000,
            max_stack: 512 << 10,
            budget: Budget::default(),
            executor: ExecutorKind::default(),
            limits: Limits::default(),
            tiers: Tiers::default(),
            constant_params: true,
            max_array_values: crate::ge::MAX_ARRAY_VALUES,
            stencil_misses: Misses::Background,
        }
    }
}

/// Why a runtime or a specialization could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeError {
    /// Cranelift refused the code (its verifier, or a limit).
    Jit(String),
    /// The executor failed: a budget, or an ill-formed stitch program.
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

fn jit_err(e: impl std::fmt::Debug) -> RuntimeError {
    RuntimeError::Jit(format!("{e:?}"))
}

/// What making one unit cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnitStats {
    /// Specialized block copies.
    pub blocks: usize,
    /// Setup and template operations the executor processed.
    pub ops: usize,
    /// Instructions generated: Cranelift IR instructions, or in [`Tier::Stitch`] the
    /// machine instructions of the stencils copied (as Cranelift's listings count them).
    pub insts: usize,
    /// Stencils copied ([`Tier::Stitch`]; 0 for code compiled by Cranelift).
    pub stencils: usize,
    /// Block parameters read as constants ([`Tier::Stitch`], see
    /// [`RuntimeOptions::constant_params`]).
    pub constant_params: usize,
    /// Block parameters left out because nothing reads them ([`Tier::Stitch`], see
    /// [`RuntimeOptions::constant_params`]).
    pub dead_params: usize,
    /// Block copies merged into the block that jumps to them, the one edge into them
    /// ([`Tier::Stitch`]; [`dyc_templates::tape::Tape::replay`]).
    pub merged_blocks: usize,
    /// Stencils copied in place of ones not made yet ([`Tier::Stitch`], see
    /// [`RuntimeOptions::stencil_misses`]).
    pub fallbacks: usize,
    /// Time specializing and building Cranelift IR (the stitcher's own work).
    pub stitch_ns: u64,
    /// Time in Cranelift compiling the IR to machine code.
    pub compile_ns: u64,
}

impl UnitStats {
    /// Adds `other`'s counts and times to these.
    pub fn add(&mut self, other: &UnitStats) {
        self.blocks += other.blocks;
        self.ops += other.ops;
        self.insts += other.insts;
        self.stencils += other.stencils;
        self.constant_params += other.constant_params;
        self.dead_params += other.dead_params;
        self.merged_blocks += other.merged_blocks;
        self.fallbacks += other.fallbacks;
        self.stitch_ns += other.stitch_ns;
        self.compile_ns += other.compile_ns;
    }
}

/// The runtime's state, shared by every specialization it made.
pub(crate) struct Shared {
    opts: RuntimeOptions,
    isa: OwnedTargetIsa,
    /// The same target with the linear-time register allocator, for large units.
    large_isa: OwnedTargetIsa,
    /// The same target for [`Tier::Quick`]: no optimization, single-pass allocation.
    quick_isa: OwnedTargetIsa,
    /// The stencils of [`Tier::Stitch`], made on first use and shared by every runtime of
    /// the process (see [`stencil_lib`]).
    stencils: &'static StencilLib,
    pub(crate) hosts: HostTable,
    generic: Vec<Arc<StitchProgram>>,
    /// Symbols code regions import: the helpers, and `dyc_generic_{i}` for the generic
    /// code of function `i`.
    symbols: memory::Symbols,
    /// Owns the generic code and the entry wrappers.
    code: CodeRegion,
    /// The entry wrapper for each list of unit input types made so far (compiled into
    /// `code` on first use; a handful per module).
    wrappers: Mutex<HashMap<Vec<Type>, usize, BuildHasherDefault<WordHasher>>>,
    /// Test hook: the next specialization panics inside the stitcher.
    inject_panic: AtomicBool,
    /// Called (outside every runtime lock) after a promotion stitched a continuation, so
    /// that the owner of the caches can enforce its code limits.
    growth: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// A runtime for one module.
#[derive(Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
}

/// The name under which code regions import the generic code of function `i`.
fn generic_symbol(i: u32) -> String {
    format!("dyc_generic_{i}")
}

/// Defines function `id` from `cctx` in `module` (of `region`), counting its code bytes.
/// It is compiled with `isa` (the same target with other flags: the linear-time register
/// allocator, or the quick tier) or else the module's own, through [`crate::late::compile`]
/// (our rewrites between the e-graph pass and lowering), and defined from its bytes. On
/// x86-64, code with loops starts on a fetch window's boundary, after the `nop`s that
/// [`crate::jit::loop_padding`] asks for to place its loops in as few windows as they fit.
pub(crate) fn define_function(
    region: &CodeRegion,
    module: &mut JITModule,
    id: FuncId,
    cctx: &mut ClifContext,
    isa: Option<&dyn TargetIsa>,
) -> Result<(), RuntimeError> {
    let (bytes, alignment, relocs) = {
        let isa = isa.unwrap_or_else(|| module.isa());
        crate::late::compile(cctx, isa).map_err(RuntimeError::Jit)?;
        let code = cctx.compiled_code().expect("just compiled");
        let mut alignment = u64::from(code.buffer.alignment);
        let mut bytes = Vec::new();
        let padding = match cfg!(target_arch = "x86_64") {
            true => crate::jit::loop_padding(
                &code.bb_starts,
                &code.bb_edges,
                code.code_buffer().len() as u32,
                code.buffer.alignment.max(16),
            ),
            false => None,
        };
        if let Some(pad) = padding {
            alignment = alignment.max(u64::from(dyc_templates::stencil::FETCH_WINDOW));
            bytes.resize(pad as usize, 0);
            dyc_templates::stencil::fill_nops(&mut bytes);
        }
        let pad = bytes.len() as u32;
        bytes.extend_from_slice(code.code_buffer());
        let relocs: Vec<ModuleReloc> = code
            .buffer
            .relocs()
            .iter()
            .map(|r| {
                let mut r = ModuleReloc::from_mach_reloc(r, &cctx.func, id);
                r.offset += pad;
                r
            })
            .collect();
        (bytes, alignment, relocs)
    };
    module
        .define_function_bytes(id, alignment, &bytes, &relocs)
        .map_err(jit_err)?;
    region.add_code_bytes(bytes.len());
    module.clear_context(cctx);
    Ok(())
}

/// How a unit reaches the generic code of module functions.
#[derive(Clone, Copy)]
enum Callees<'a> {
    /// Functions of the same module (the generic code itself).
    Local(&'a [FuncId]),
    /// Imports, resolved to the generic code's addresses.
    Imported,
}

/// Service hooks for one unit being emitted.
struct UnitHooks<'a> {
    region: &'a CodeRegion,
    module: &'a mut JITModule,
    prog: &'a StitchProgram,
    callees: Callees<'a>,
    /// The specialization's promotion sites (none for generic code).
    sites: Option<&'a RwLock<Vec<Arc<PromoSite>>>>,
}

impl UnitHooks<'_> {
    fn import(&mut self, func: &mut ir::Function, name: &str, sig: ir::Signature) -> ir::FuncRef {
        let id = self
            .module
            .declare_function(name, Linkage::Import, &sig)
            .expect("helper declarations are consistent");
        self.module.declare_func_in_func(id, func)
    }
}

impl Hooks for UnitHooks<'_> {
    fn fault_site(&mut self, kind: FaultKind, loc: SrcLoc) -> u64 {
        self.region.fault_site(kind, loc)
    }

    fn func_ref(&mut self, func: &mut ir::Function, callee: u32) -> Option<ir::FuncRef> {
        let CalleeDecl::Func { index, params, .. } =
            self.prog.header.callees.get(CalleeId::from_u32(callee))?
        else {
            return None;
        };
        match self.callees {
            Callees::Local(ids) => {
                Some(self.module.declare_func_in_func(ids[*index as usize], func))
            }
            Callees::Imported => {
                let sig = abi::unit_signature(params);
                Some(self.import(func, &generic_symbol(*index), sig))
            }
        }
    }

    fn host_index(&self, callee: u32) -> Option<u32> {
        match self.prog.header.callees.get(CalleeId::from_u32(callee))? {
            CalleeDecl::Host { host } => Some(host.as_u32()),
            CalleeDecl::Func { .. } => None,
        }
    }

    fn host_call(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.module.isa(), &[types::I64; 5], &[types::I64]);
        self.import(func, "dyc_host_call", sig)
    }

    fn promote(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.module.isa(), &[types::I64; 3], &[types::I64]);
        self.import(func, "dyc_promote", sig)
    }

    fn inline_cache(&mut self, site: u32) -> Option<u64> {
        self.sites?.read().get(site as usize)?.inline_table()
    }

    fn fmod(&mut self, func: &mut ir::Function) -> ir::FuncRef {
        let sig = abi::host_signature(self.module.isa(), &[types::F64; 2], &[types::F64]);
        self.import(func, "dyc_fmod", sig)
    }
}

/// A unit's machine code made by the stitch tier (not yet installed).
struct Stitched {
    code: Vec<u8>,
    /// Stencils copied, and their machine instructions.
    stencils: usize,
    insts: usize,
    /// Stencils copied in place of missing ones.
    fallbacks: usize,
    /// What the tape found: block parameters read as constants, parameters left out as
    /// dead, and blocks merged.
    tape: (usize, usize, usize),
    unit: Unit<u32>,
}

thread_local! {
    /// The tape and the shape of the stitch tier's units on this thread.
    static SCRATCH: std::cell::RefCell<(Tape, Shape)> = std::cell::RefCell::default();
}

/// The most calls a tape kept for the next unit may have held (a huge unit's room is not
/// kept).
const SCRATCH_CALLS: usize = 1 << 16;

/// What a stitch-tier unit needs from the runtime.
struct StitchServices<'a> {
    shared: &'a Shared,
    region: &'a CodeRegion,
    prog: &'a StitchProgram,
    sites: Option<&'a RwLock<Vec<Arc<PromoSite>>>>,
}

impl stencil::Services for StitchServices<'_> {
    fn fault_site(&mut self, kind: FaultKind, loc: SrcLoc) -> u64 {
        self.region.fault_site(kind, loc)
    }

    fn inline_cache(&mut self, site: u32) -> Option<u64> {
        self.sites?.read().get(site as usize)?.inline_table()
    }

    fn callee(&self, callee: u32) -> Option<stencil::Callee> {
        Some(
            match self.prog.header.callees.get(CalleeId::from_u32(callee))? {
                CalleeDecl::Func { index, params, .. } => stencil::Callee::Func {
                    params: params.clone(),
                    addr: *self.shared.symbols.get(&generic_symbol(*index))? as u64,
                },
                CalleeDecl::Host { host } => stencil::Callee::Host(host.as_u32()),
            },
        )
    }

    fn helper(&self, h: stencil::Import) -> u64 {
        // (From the table the symbol table is made of, without a lookup by name per
        // unit. A callee's address comes with its call, `Callee::Func`, never from here.)
        helpers()
            .iter()
            .find(|&&(import, _, _)| import == h)
            .map_or(0, |&(_, _, address)| address as u64)
    }
}

/// The runtime's helpers: what a stencil imports each as, the name a code region imports
/// it under, and its address.
fn helpers() -> [(stencil::Import, &'static str, usize); 4] {
    use stencil::Import;
    [
        (
            Import::HostCall,
            "dyc_host_call",
            hosts::dyc_host_call as *const () as usize,
        ),
        (
            Import::Promote,
            "dyc_promote",
            sites::dyc_promote as *const () as usize,
        ),
        (
            Import::Fmod,
            "dyc_fmod",
            hosts::dyc_fmod as *const () as usize,
        ),
        (Import::Frame, "dyc_frame", dyc_frame as *const () as usize),
    ]
}

/// The words of the frame a call of a specialization starts with, on the stack of
/// [`Specialization::call_words`]: enough for most stitch-tier units (an
/// interpreter's take 14 to 65 words, a packet filter's about 100), whose prologue then
/// needs no [`dyc_frame`].
const INLINE_FRAME_WORDS: usize = 128;

/// Makes the frame of the call `ctx` at least `words` words long (zeroed) and returns it:
/// called by a stitch-tier unit's prologue, when every live value is in a register, so
/// the old frame's contents do not matter.
///
/// # Safety
/// `ctx` is the live context of a call (see [`Specialization::call_words`]).
pub(crate) extern "C" fn dyc_frame(ctx: *mut CallCtx, words: u64) -> *mut u64 {
    // SAFETY: the code passes the context of the call it runs in, which lives on the
    // stack of `call_words` for the whole call and is only used by this thread.
    let ctx = unsafe { &mut *ctx };
    let n = (words as usize).max(ctx.frame_store.len() * 2).max(64);
    ctx.frame_store.clear();
    ctx.frame_store.resize(n, 0);
    ctx.frame = ctx.frame_store.as_mut_ptr();
    ctx.frame_words = n as u64;
    ctx.frame
}

/// `make(inline)`: a unit made with the values seen at promotion sites dispatched inline
/// if `inline`; should that exceed the specialization's budget, `make(false)`, the unit
/// without them.
fn inline_or_not<T>(
    inline: bool,
    mut make: impl FnMut(bool) -> Result<T, RuntimeError>,
) -> Result<T, RuntimeError> {
    match make(inline) {
        Err(RuntimeError::Spec(SpecError::BudgetExceeded { .. })) if inline => make(false),
        r => r,
    }
}

/// What a specialization is made with beyond its key (for
/// [`Runtime::specialize_unguarded`]).
enum Extra<'a> {
    None,
    /// Its entry unit's Cranelift IR as built goes here.
    IrText(&'a mut String),
    /// Promoted values an earlier specialization saw ([`Runtime::respecialize`]).
    Seen(&'a SpecState),
}

/// Everything one unit's compilation reads.
struct UnitInput<'a> {
    prog: &'a StitchProgram,
    start: Block,
    key: &'a [SVal],
    slices: &'a [Option<SliceData>],
    static_ptrs: Vec<Option<(u64, u64, Scalar)>>,
    callees: Callees<'a>,
    /// The specialization the unit belongs to (promotion sites), if any.
    spec: Option<&'a SpecState>,
    /// Receives the unit's Cranelift IR as built (before Cranelift optimizes it), if any.
    ir_text: Option<&'a mut String>,
    /// Dispatch inline on the values seen so far at promotion sites (see
    /// [`SpecState::known_values`]).
    inline_dispatch: bool,
}

impl UnitInput<'_> {
    /// The lengths of the static slices, which the fold layer checks bounds against.
    fn static_lens(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        self.static_ptrs.iter().map(|p| p.map(|(_, len, _)| len))
    }
}

impl Shared {
    /// The entry wrapper for units taking `inputs`, compiled into the runtime's region
    /// the first time (lock order: the wrapper table, then that region's module).
    fn wrapper(&self, inputs: &[Type]) -> Result<usize, RuntimeError> {
        let mut wrappers = self.wrappers.lock();
        if let Some(&w) = wrappers.get(inputs) {
            return Ok(w);
        }
        let w = self.code.with_module(|module| {
            let id = wrapper::define(&self.code, module, inputs)?;
            module.finalize_definitions().map_err(jit_err)?;
            Ok::<_, RuntimeError>(module.get_finalized_function(id) as usize)
        })?;
        wrappers.insert(inputs.to_vec(), w);
        Ok(w)
    }

    /// Panics once after [`Runtime::inject_panic`] (a test of recovery from a panic while
    /// making a unit, in any tier).
    fn panic_if_injected(&self) {
        if self.inject_panic.swap(false, Ordering::Relaxed) {
            panic!("a panic injected by a test");
        }
    }

    /// Compiles one unit into function `id` of `module` (the module of `region`); the
    /// caller finalizes.
    fn compile_unit(
        &self,
        region: &CodeRegion,
        module: &mut JITModule,
        input: UnitInput,
        id: FuncId,
    ) -> Result<UnitStats, RuntimeError> {
        self.panic_if_injected();
        let prog = input.prog;
        let t0 = std::time::Instant::now();
        let inputs = prog.input_types(input.start);
        let mut cctx = clif::take_context();
        cctx.func.signature = abi::unit_signature(inputs);
        cctx.func.name = UserFuncName::user(0, id.as_u32());
        let frontend = module.isa().frontend_config();
        let unit = {
            let mut hooks = UnitHooks {
                region,
                module: &mut *module,
                prog,
                callees: input.callees,
                sites: input.spec.map(|s| &s.sites),
            };
            // A fresh builder context per unit: a specialization that fails half-way (a
            // budget) leaves no state behind for the next one.
            let mut fctx = FunctionBuilderContext::new();
            let b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
            let opts = ClifOptions {
                fuel: self.opts.fuel.is_some(),
            };
            let em = ClifEmitter::new(b, &mut hooks, opts, input.static_ptrs.clone(), inputs);
            let mut em = Fold::new(em, input.static_lens());
            let unit = self.run_executor(&input, &mut em)?;
            em.backend.finish(unit.entry, frontend);
            clif::simplify_cfg(&mut cctx.func);
            unit
        };
        let mut stats = UnitStats {
            blocks: unit.blocks,
            ops: unit.ops,
            insts: cctx
                .func
                .layout
                .blocks()
                .map(|b| cctx.func.layout.block_insts(b).count())
                .sum(),
            stencils: 0,
            constant_params: 0,
            dead_params: 0,
            merged_blocks: 0,
            fallbacks: 0,
            stitch_ns: t0.elapsed().as_nanos() as u64,
            compile_ns: 0,
        };
        if let Some(out) = input.ir_text {
            *out = cctx.func.display().to_string();
        }
        let t1 = std::time::Instant::now();
        // The quick tier's ISA for its specializations; the linear-time allocator for
        // large units (more than [`LARGE_UNIT_BLOCKS`] blocks) of the optimizing tier.
        let isa: Option<&dyn TargetIsa> = match input.spec.map(|s| s.tier) {
            Some(Tier::Quick | Tier::Stitch) => Some(&*self.quick_isa),
            _ if cctx.func.dfg.num_blocks() > LARGE_UNIT_BLOCKS => Some(&*self.large_isa),
            _ => None,
        };
        let size = cctx.func.dfg.num_insts();
        define_function(region, module, id, &mut cctx, isa)?;
        clif::give_context(cctx, size);
        stats.compile_ns = t1.elapsed().as_nanos() as u64;
        Ok(stats)
    }

    /// Runs the unit's executor over `em` (the fold layer over a backend): setup code,
    /// promotion sites and the budget as the unit's specialization says.
    fn run_executor<E: Emitter>(
        &self,
        input: &UnitInput,
        em: &mut E,
    ) -> Result<Unit<E::Block>, RuntimeError> {
        let executor = input.spec.map_or(self.opts.executor, |s| s.executor);
        self.run_executor_with(input, em, executor)
    }

    /// [`Shared::run_executor`] with `executor`.
    fn run_executor_with<E: Emitter>(
        &self,
        input: &UnitInput,
        em: &mut E,
        executor: ExecutorKind,
    ) -> Result<Unit<E::Block>, RuntimeError> {
        self.in_context(input, |cx| executor.run(cx, input.start, input.key, em))
    }

    /// [`Shared::run_executor`] through [`ExecutorKind::run_once`]: `None` when the
    /// compiled plan gave up on `em`, which cannot start again.
    fn run_executor_once<E: Emitter>(
        &self,
        input: &UnitInput,
        em: &mut E,
    ) -> Result<Option<Unit<E::Block>>, RuntimeError> {
        let executor = input.spec.map_or(self.opts.executor, |s| s.executor);
        self.in_context(input, |cx| {
            executor.run_once(cx, input.start, input.key, em)
        })
    }

    /// `run` in the executors' context for the unit: setup code, promotion sites and the
    /// budget as the unit's specialization says.
    fn in_context<T>(
        &self,
        input: &UnitInput,
        run: impl FnOnce(&Context) -> Result<T, SpecError>,
    ) -> Result<T, RuntimeError> {
        let resolve = |site: &Site| match input.spec {
            Some(s) => s.site_id(site),
            None => 0,
        };
        let known = |id: u32| match input.spec {
            Some(s) if input.inline_dispatch => s.known_values(id),
            _ => Vec::new(),
        };
        // Generic code has no static context: every block is copied once, so its size
        // is the program's, and the budget (which bounds specialization) does not apply.
        let budget = match input.spec {
            Some(_) => self.opts.budget,
            None => Budget {
                max_blocks: usize::MAX,
                max_ops: usize::MAX,
                ..self.opts.budget
            },
        };
        let cx = Context {
            prog: input.prog,
            slices: input.slices,
            hosts: &self.hosts,
            mode: PromotionMode::Units {
                resolve: &resolve,
                known: &known,
            },
            budget,
        };
        run(&cx).map_err(RuntimeError::Spec)
    }

    /// Makes the stencils of the stitch tier that the module's functions use, by
    /// stitching each function's generic code through the stencil emitter once (the code
    /// is thrown away): every operation in frame words, moves, branches, returns, checks
    /// and prologues, with their common variants (operands as constants or in the
    /// accumulator). Forms beyond those are made when first used.
    fn make_stencils(&self) -> Result<(), RuntimeError> {
        let region = self.region("stencils");
        for prog in &self.generic {
            let input = UnitInput {
                prog,
                start: prog.entry,
                key: &[],
                slices: &[],
                static_ptrs: Vec::new(),
                callees: Callees::Imported,
                spec: None,
                ir_text: None,
                inline_dispatch: false,
            };
            self.stitch(&region, &input, true)?;
        }
        Ok(())
    }

    /// Stitches one unit's machine code through the stencil emitter (fault sites go to
    /// `region`), making the common variants of every stencil too when `variants`;
    /// `None` when a stencil was refused.
    fn stitch(
        &self,
        region: &CodeRegion,
        input: &UnitInput,
        variants: bool,
    ) -> Result<Option<Stitched>, RuntimeError> {
        match self.stitch_with(region, input, variants, false)? {
            Some(made) => Ok(made),
            // (The compiled plan gave up on an emitter that cannot start again: the unit
            // is made on a new one, by the interpreted stitcher, which does not give up.)
            None => Ok(self.stitch_with(region, input, variants, true)?.flatten()),
        }
    }

    /// [`Shared::stitch`]: `None` when a unit not recorded was given to the compiled plan,
    /// which gave up (then `interpreted` runs it with the interpreted planned stitcher).
    fn stitch_with(
        &self,
        region: &CodeRegion,
        input: &UnitInput,
        variants: bool,
        interpreted: bool,
    ) -> Result<Option<Option<Stitched>>, RuntimeError> {
        let prog = input.prog;
        let inputs = prog.input_types(input.start);
        let mut services = StitchServices {
            shared: self,
            region,
            prog,
            sites: input.spec.map(|s| &s.sites),
        };
        if variants {
            // (Made ahead, as the stencils the emitter makes with their variants.)
            self.stencils.make_entry(inputs, None);
        }
        let mut em = StencilEmitter::new(
            self.stencils,
            &mut services,
            self.opts.fuel.is_some(),
            &input.static_ptrs,
            inputs,
        );
        if variants {
            em = em.with_variants();
        }
        let mut em = Fold::new(em, input.static_lens());
        // A specialization (generic code has no constants to find) is recorded, its
        // constant and dead block parameters, its merged blocks and the stores to its local
        // arrays in memory that nothing reads read off the recording, and replayed with
        // them into the stencil emitter. (A program with local arrays in memory has each
        // unit recorded: the stores it saves pay for it.)
        let (unit, found) = match input.spec {
            Some(_)
                if self.opts.constant_params
                    && !variants
                    && (!input.prog.all_homes().is_empty()
                        || input.prog.recordings().record_next()) =>
            {
                // The tape and the shape are the thread's, reused from unit to unit.
                let (mut tape, mut shape) = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
                tape.clear();
                let unit = self.run_executor(input, &mut tape)?;
                if input.spec.map_or(self.opts.executor, |s| s.executor) == ExecutorKind::Planned {
                    check_compiled(
                        |t| self.run_executor_with(input, t, ExecutorKind::Interpreted),
                        &tape,
                        &unit,
                    );
                }
                if unit.entry != 0 {
                    let m = "the tape's entry is not its first block";
                    return Err(RuntimeError::Spec(SpecError::Internal(m.into())));
                }
                tape.shape(&mut shape);
                em.set_live_memory(shape.live_memory());
                let known = shape.solve();
                let counts = (known.count(), known.dead(), tape.merged());
                input.prog.recordings().note(known.any());
                tape.note_low_bits(&known);
                em.set_constant_params(known);
                let replayed = tape.replay(&mut em);
                if let Some(known) = em.take_constant_params() {
                    shape.recycle(known);
                }
                if tape.len() <= SCRATCH_CALLS {
                    SCRATCH.with(|s| *s.borrow_mut() = (tape, shape));
                }
                let Ok(entry) = replayed else {
                    // The stencil emitter failed and made no value (a refused stencil).
                    return Ok(Some(None));
                };
                (Unit { entry, ..unit }, counts)
            }
            // (Unrecorded, the compiled plan writes into the stencil emitter directly.)
            _ if interpreted => (
                self.run_executor_with(input, &mut em, ExecutorKind::Interpreted)?,
                (0, 0, 0),
            ),
            _ => match self.run_executor_once(input, &mut em)? {
                Some(unit) => (unit, (0, 0, 0)),
                None => return Ok(None),
            },
        };
        let fallbacks = em.backend.fallbacks();
        Ok(Some(em.backend.finish(unit.entry).ok().map(
            |(code, stencils, insts)| Stitched {
                code,
                stencils,
                insts,
                fallbacks,
                tape: found,
                unit,
            },
        )))
    }

    /// Stitches one unit in [`Tier::Stitch`] into `region`: its address and what it cost,
    /// or `None` when the stitch tier cannot make it (the caller compiles it with
    /// Cranelift instead).
    fn stitch_unit(
        &self,
        region: &CodeRegion,
        input: UnitInput,
    ) -> Result<Option<(usize, UnitStats)>, RuntimeError> {
        self.panic_if_injected();
        if !StencilLib::supported() {
            return Ok(None);
        }
        let t0 = std::time::Instant::now();
        let Some(made) = self.stitch(region, &input, false)? else {
            return Ok(None);
        };
        let stitch_ns = t0.elapsed().as_nanos() as u64;
        let t1 = std::time::Instant::now();
        let addr = region.install(&made.code).map_err(RuntimeError::Jit)?;
        dyc_templates::stencil::recycle_code(made.code);
        Ok(Some((
            addr,
            UnitStats {
                blocks: made.unit.blocks,
                ops: made.unit.ops,
                insts: made.insts,
                stencils: made.stencils,
                constant_params: made.tape.0,
                dead_params: made.tape.1,
                merged_blocks: made.tape.2,
                fallbacks: made.fallbacks,
                stitch_ns,
                compile_ns: t1.elapsed().as_nanos() as u64,
            },
        )))
    }

    /// A new code region that imports the runtime's symbols.
    fn region(&self, func: &str) -> CodeRegion {
        CodeRegion::new(self.isa.clone(), func.into(), self.symbols.clone())
    }
}

/// The stencil libraries of the process, by `verify` (whether Cranelift's verifier runs).
/// A stencil depends only on its key and on the host ISA, which every runtime sets up the
/// same way (optimizing, frame pointers kept, not position-independent), so runtimes
/// share their stencils: a program compiled after another makes only the stencils no
/// earlier program used. The library lives as long as the process and holds one stencil
/// per key ever used (keys are operations by operand forms, and signatures of units).
/// One library per way of handling missing stencils ([`Misses`]) too, as units copy what
/// their library holds.
static STENCIL_LIBS: [std::sync::OnceLock<StencilLib>; 6] =
    [const { std::sync::OnceLock::new() }; 6];

/// The stencil library of runtimes with the verifier `verify` whose units handle a
/// missing stencil as `misses` says (see [`STENCIL_LIBS`]); made with the stencils every
/// unit may use ([`StencilLib::make_moves`]).
fn stencil_lib(verify: bool, misses: Misses) -> Result<&'static StencilLib, RuntimeError> {
    let m = match misses {
        Misses::Background => 0,
        Misses::Make => 1,
        Misses::Fallback => 2,
    };
    let cell = &STENCIL_LIBS[3 * usize::from(verify) + m];
    if let Some(lib) = cell.get() {
        return Ok(lib);
    }
    let isa = host_isa(JitOptions {
        optimize: true,
        verify,
    })
    .map_err(|e| RuntimeError::Jit(e.to_string()))?;
    Ok(cell.get_or_init(|| {
        hold_stencils_across_forks();
        let lib = StencilLib::with_misses(isa, misses);
        if StencilLib::supported() {
            lib.make_moves();
        }
        lib
    }))
}

thread_local! {
    /// The stencil libraries' locks, held by the thread that forks from just before the
    /// fork to just after it, in the parent and in the child.
    static FORK_GUARDS: std::cell::RefCell<Vec<stencil::ForkGuard<'static>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Registers, once, `pthread_atfork` handlers that hold every stencil library's locks
/// across a fork: a library's worker thread takes them briefly, and the child of a fork
/// has no such thread to release them (it starts a worker of its own when it needs one).
fn hold_stencils_across_forks() {
    #[cfg(unix)]
    {
        extern "C" fn before() {
            let held: Vec<_> = STENCIL_LIBS
                .iter()
                .filter_map(|c| c.get())
                .map(StencilLib::hold_for_fork)
                .collect();
            FORK_GUARDS.with(|g| *g.borrow_mut() = held);
        }
        extern "C" fn after() {
            FORK_GUARDS.with(|g| g.borrow_mut().clear());
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        // SAFETY: the handlers only take and release the libraries' locks, in the thread
        // that forks (before the fork, as any thread may; after it, in each process, the
        // guards that thread holds).
        REGISTERED.call_once(|| unsafe {
            libc::pthread_atfork(Some(before), Some(after), Some(after));
        });
    }
}

/// How many stencils the process's libraries made, and where, and how many stencil
/// copies fell back on a variant made ahead (see [`Misses`]).
pub fn stencil_counts() -> StencilCounts {
    let mut all = StencilCounts::default();
    for c in STENCIL_LIBS
        .iter()
        .filter_map(|c| c.get())
        .map(StencilLib::counts)
    {
        all.ahead += c.ahead;
        all.while_stitching += c.while_stitching;
        all.background += c.background;
        all.fallbacks += c.fallbacks;
    }
    all
}

/// Waits until the worker threads of the process's libraries have made every stencil
/// units wanted so far ([`Misses::Background`]), so that the units stitched next copy
/// them.
pub fn settle_stencils() {
    STENCIL_LIBS
        .iter()
        .filter_map(|c| c.get())
        .for_each(StencilLib::settle);
}

/// The keys of the stitch tier's stencils made so far in this process (runtimes share
/// their stencils), for tests and statistics.
pub fn stencil_keys() -> Vec<stencil::Key> {
    STENCIL_LIBS
        .iter()
        .filter_map(|cell| cell.get())
        .flat_map(StencilLib::keys)
        .collect()
}

/// Runs `f`, turning a panic into an internal error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, RuntimeError>) -> Result<T, RuntimeError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(RuntimeError::Internal(format!(
                "panicked while {what}: {msg}"
            )))
        }
    }
}

impl Runtime {
    /// A runtime for a module whose functions have the generic programs `generic` (index =
    /// function index); their code is compiled now.
    pub fn new(generic: Vec<StitchProgram>, opts: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        epoch::init_mode();
        if opts.tiers.first == Tier::Stitch && StencilLib::supported() {
            heap::reserve();
        }
        guarded("compiling generic code", || Runtime::build(generic, opts))
    }

    fn build(generic: Vec<StitchProgram>, opts: RuntimeOptions) -> Result<Runtime, RuntimeError> {
        let isa = host_isa(opts.jit).map_err(|e| RuntimeError::Jit(e.to_string()))?;
        let large_isa = large_unit_isa(opts.jit).map_err(|e| RuntimeError::Jit(e.to_string()))?;
        let quick_isa = large_unit_isa(JitOptions {
            optimize: false,
            ..opts.jit
        })
        .map_err(|e| RuntimeError::Jit(e.to_string()))?;
        let hosts = HostTable::new(
            generic
                .first()
                .map(|p| p.header.hosts.clone())
                .unwrap_or_default(),
        );
        let mut symbols: HashMap<String, usize> = helpers()
            .iter()
            .map(|&(_, name, address)| (name.to_string(), address))
            .collect();
        let code = CodeRegion::new(
            isa.clone(),
            "generic code".into(),
            Arc::new(symbols.clone()),
        );
        let generic: Vec<Arc<StitchProgram>> = generic.into_iter().map(Arc::new).collect();
        let mut shared = Shared {
            opts,
            isa,
            large_isa,
            quick_isa,
            stencils: stencil_lib(opts.jit.verify, opts.stencil_misses)?,
            hosts,
            generic: generic.clone(),
            symbols: Arc::new(HashMap::new()),
            code,
            wrappers: Mutex::new(HashMap::default()),
            inject_panic: AtomicBool::new(false),
            growth: std::sync::OnceLock::new(),
        };
        let addrs = shared.code.with_module(|module| {
            let mut ids = Vec::new();
            for p in &generic {
                let id = module
                    .declare_anonymous_function(&abi::unit_signature(&p.header.param_types))
                    .map_err(jit_err)?;
                ids.push(id);
            }
            for (p, &id) in generic.iter().zip(&ids) {
                let input = UnitInput {
                    prog: p,
                    start: p.entry,
                    key: &[],
                    slices: &[],
                    static_ptrs: Vec::new(),
                    callees: Callees::Local(&ids),
                    spec: None,
                    ir_text: None,
                    inline_dispatch: false,
                };
                shared.compile_unit(&shared.code, module, input, id)?;
            }
            module.finalize_definitions().map_err(jit_err)?;
            Ok::<_, RuntimeError>(
                ids.iter()
                    .map(|&id| module.get_finalized_function(id) as usize)
                    .collect::<Vec<_>>(),
            )
        })?;
        for (i, a) in addrs.into_iter().enumerate() {
            symbols.insert(generic_symbol(i as u32), a);
        }
        shared.symbols = Arc::new(symbols);
        if shared.opts.tiers.first == Tier::Stitch {
            shared.make_stencils()?;
        }
        Ok(Runtime {
            shared: Arc::new(shared),
        })
    }

    /// Makes ahead what specializing program `prog` takes besides its units: the wrapper
    /// that calls its entry units from Rust (compiled by Cranelift); and when the stitch
    /// tier is the first tier, the stencils that entering its units takes: the prologues
    /// of its entry, of its promotion blocks and of its lazy blocks, and the promotions into
    /// them (the stencils of operations were made with the generic code). A region calls
    /// this when it is made, so that a stitch-tier specialization, and its first
    /// promotions, call no Cranelift. (An error here is met again by the specialization.)
    pub fn prepare(&self, prog: &StitchProgram) {
        let _ = self.shared.wrapper(prog.input_types(prog.entry));
        if self.shared.opts.tiers.first != Tier::Stitch || !StencilLib::supported() {
            return;
        }
        let lib = self.shared.stencils;
        lib.make_entry(prog.input_types(prog.entry), None);
        for (b, data) in prog.blocks.iter() {
            let promoted: Option<Vec<Scalar>> = if !data.promote.is_empty() {
                data.promote
                    .iter()
                    .map(|&(d, _)| {
                        data.dyn_inputs()
                            .find(|&(r, _)| r == d)
                            .and_then(|(_, t)| t.scalar())
                    })
                    .collect()
            } else if data.lazy != Lazy::No {
                Some(Vec::new())
            } else {
                continue;
            };
            lib.make_entry(prog.input_types(b), promoted.as_deref());
        }
    }

    /// How many stencils units of this runtime wanted that its library's worker has not
    /// made yet ([`Misses::Background`]).
    pub fn stencils_pending(&self) -> usize {
        self.shared.stencils.pending()
    }

    /// The options the runtime was made with.
    pub fn options(&self) -> &RuntimeOptions {
        &self.shared.opts
    }

    /// The host functions the module declares.
    pub fn host_decls(&self) -> &PrimaryMap<HostId, HostDecl> {
        &self.shared.hosts.decls
    }

    /// Registers host function `name` (declared by the module).
    pub fn register_host(&self, name: &str, f: Arc<HostFn>) -> Result<(), RuntimeError> {
        if self.shared.hosts.register(name, f) {
            Ok(())
        } else {
            Err(RuntimeError::Arguments(format!(
                "the module declares no host function `{name}`"
            )))
        }
    }

    /// Sets the function called after a promotion has stitched a continuation into some
    /// specialization (outside every runtime lock; at most once per runtime).
    pub fn on_code_growth(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.shared.growth.set(Box::new(f));
    }

    /// Calls the growth hook, if any.
    pub(crate) fn code_grew(shared: &Shared) {
        if let Some(f) = shared.growth.get() {
            f();
        }
    }

    /// Test hook: makes the next specialization panic inside the stitcher, to check that
    /// the panic comes back as an internal error and the runtime stays usable.
    #[doc(hidden)]
    pub fn inject_panic(&self) {
        self.shared.inject_panic.store(true, Ordering::Relaxed);
    }

    /// Specializes `prog` (a specializing program of this runtime's module) on the static
    /// values of its key parameters: `key[i]` for `prog.key_params[i]`, with the contents
    /// of static slices in `slices[k]` (by parameter position); every unit of it is
    /// stitched by `executor` and compiled in `tier`.
    pub fn specialize(
        &self,
        prog: Arc<StitchProgram>,
        key: &[SVal],
        slices: Vec<Option<SliceData>>,
        executor: ExecutorKind,
        tier: Tier,
    ) -> Result<Specialization, RuntimeError> {
        guarded("specializing", || {
            self.specialize_unguarded(prog, key, slices, executor, tier, Extra::None)
        })
    }

    /// [`Runtime::specialize`], starting from what the promotions of `seen` (an earlier
    /// specialization of the same function: of either of its programs, whose blocks are
    /// the same) have seen: every unit, the entry included, dispatches inline on those
    /// values from the start, with their continuations stitched into it. An interpreter
    /// whose indirect jumps made continuation units, each entered through the runtime
    /// with its live values as arguments, gets one unit in which the jumps' targets are
    /// blocks and the constants its registers held before the first jump flow into its
    /// loop. (Should the entry with them exceed the unit's budget, it is stitched without
    /// them, as [`Runtime::specialize`] would.) Sites of `seen` whose block is not the
    /// same in `prog` are ignored.
    pub fn respecialize(
        &self,
        prog: Arc<StitchProgram>,
        key: &[SVal],
        slices: Vec<Option<SliceData>>,
        executor: ExecutorKind,
        tier: Tier,
        seen: &Specialization,
    ) -> Result<Specialization, RuntimeError> {
        guarded("specializing", || {
            let seen = Extra::Seen(&seen.state);
            self.specialize_unguarded(prog, key, slices, executor, tier, seen)
        })
    }

    /// The Cranelift IR of the entry unit of a specialization (arguments as for
    /// [`Runtime::specialize`]), as the stitcher builds it, before Cranelift optimizes it:
    /// what the stitch-time optimizations left. For tests and tuning; nothing is kept.
    pub fn entry_unit_ir(
        &self,
        prog: Arc<StitchProgram>,
        key: &[SVal],
        slices: Vec<Option<SliceData>>,
        executor: ExecutorKind,
    ) -> Result<String, RuntimeError> {
        let mut text = String::new();
        guarded("specializing", || {
            self.specialize_unguarded(
                prog,
                key,
                slices,
                executor,
                Tier::Optimizing,
                Extra::IrText(&mut text),
            )
        })?;
        Ok(text)
    }

    fn specialize_unguarded(
        &self,
        prog: Arc<StitchProgram>,
        key: &[SVal],
        slices: Vec<Option<SliceData>>,
        executor: ExecutorKind,
        tier: Tier,
        extra: Extra,
    ) -> Result<Specialization, RuntimeError> {
        let state = SpecState::new(&self.shared, prog.clone(), slices, executor, tier);
        let (mut ir_text, seeded) = match extra {
            Extra::None => (None, false),
            Extra::IrText(text) => (Some(text), false),
            Extra::Seen(seen) => (None, state.see_as(seen)),
        };
        let inputs = prog.input_types(prog.entry);
        let input = |inline_dispatch| UnitInput {
            prog: &prog,
            start: prog.entry,
            key,
            slices: &state.slices,
            static_ptrs: state.static_ptrs(),
            callees: Callees::Imported,
            spec: Some(&state),
            ir_text: None,
            inline_dispatch,
        };
        let stitched = match tier {
            Tier::Stitch => inline_or_not(seeded, |inline| {
                self.shared.stitch_unit(&state.region, input(inline))
            })?,
            _ => None,
        };
        let (entry, stats) = match stitched {
            Some(made) => made,
            None => state.region.with_module(|module| {
                let unit = module
                    .declare_anonymous_function(&abi::unit_signature(inputs))
                    .map_err(jit_err)?;
                let compile = |inline| {
                    let mut input = input(inline);
                    input.ir_text = ir_text.as_deref_mut();
                    self.shared.compile_unit(&state.region, module, input, unit)
                };
                let mut stats = inline_or_not(seeded, compile)?;
                let t = std::time::Instant::now();
                module.finalize_definitions().map_err(jit_err)?;
                stats.compile_ns += t.elapsed().as_nanos() as u64;
                Ok::<_, RuntimeError>((module.get_finalized_function(unit) as usize, stats))
            })?,
        };
        Ok(Specialization {
            tier: state.tier,
            state: Arc::new(state),
            wrapper: self.shared.wrapper(inputs)?,
            entry,
            ret: prog.header.ret,
            stats,
        })
    }

    /// The generic code of function `index` behind an entry wrapper: the function compiled
    /// without specialization.
    pub fn generic(&self, index: usize) -> Result<Specialization, RuntimeError> {
        let prog = self
            .shared
            .generic
            .get(index)
            .cloned()
            .ok_or_else(|| RuntimeError::Arguments(format!("no function {index}")))?;
        guarded("making an entry", || {
            let executor = self.shared.opts.executor;
            let state = SpecState::new(
                &self.shared,
                prog.clone(),
                Vec::new(),
                executor,
                Tier::Optimizing,
            );
            let entry = *self
                .shared
                .symbols
                .get(&generic_symbol(index as u32))
                .ok_or_else(|| RuntimeError::Internal(format!("no generic code for {index}")))?;
            Ok(Specialization {
                tier: Tier::Optimizing,
                state: Arc::new(state),
                wrapper: self.shared.wrapper(&prog.header.param_types)?,
                entry,
                ret: prog.header.ret,
                stats: UnitStats::default(),
            })
        })
    }
}

/// A promotion site's identity: its block and the exact bits of its static values.
type SiteIdent = (Block, Vec<(u8, u64)>);

/// What one specialization owns: its program, static slices (copies the code may point
/// into), its code region and its promotion sites.
pub(crate) struct SpecState {
    pub(crate) runtime: Arc<Shared>,
    prog: Arc<StitchProgram>,
    slices: Vec<Option<SliceData>>,
    /// Byte copies of the static slices, which specialized code reads.
    storage: Vec<Option<Box<[u64]>>>,
    region: CodeRegion,
    sites: RwLock<Vec<Arc<PromoSite>>>,
    /// Promotion sites by (block, static values).
    site_ids: Mutex<HashMap<SiteIdent, u32>>,
    /// Continuation units stitched so far (bounded by the budget's `max_units`).
    units: AtomicUsize,
    /// What the continuation units cost, summed.
    lazy_stats: Mutex<UnitStats>,
    /// Of which copies of a stencil variant made ahead in place of a missing one
    /// (`lazy_stats.fallbacks`, read without the lock at every call through a cache).
    lazy_fallbacks: AtomicUsize,
    /// The fault site of failed lazy specializations, made at the first (most
    /// specializations have none).
    lazy_fault: std::sync::OnceLock<u64>,
    /// The executor of this specialization's units.
    executor: ExecutorKind,
    /// The tier every unit of this specialization is compiled in.
    tier: Tier,
}

impl SpecState {
    fn new(
        runtime: &Arc<Shared>,
        prog: Arc<StitchProgram>,
        slices: Vec<Option<SliceData>>,
        executor: ExecutorKind,
        tier: Tier,
    ) -> SpecState {
        let storage = slices
            .iter()
            .map(|s| {
                s.as_ref().map(|d| {
                    fn write<const N: usize>(data: &[Const], bytes: &mut [u8]) {
                        for (c, to) in data.iter().zip(bytes.chunks_exact_mut(N)) {
                            to.copy_from_slice(&const_to_word(*c).to_le_bytes()[..N]);
                        }
                    }
                    let size = clif::elem_size(d.elem) as usize;
                    let mut buf = vec![0u64; (d.data.len() * size).div_ceil(8).max(1)];
                    let bytes = bytes_of(&mut buf);
                    // (One loop per element size, each copying a fixed number of bytes.)
                    match size {
                        1 => write::<1>(&d.data, bytes),
                        2 => write::<2>(&d.data, bytes),
                        4 => write::<4>(&d.data, bytes),
                        _ => write::<8>(&d.data, bytes),
                    }
                    buf.into_boxed_slice()
                })
            })
            .collect();
        let region = runtime.region(&prog.header.name);
        SpecState {
            runtime: runtime.clone(),
            prog,
            slices,
            storage,
            region,
            sites: RwLock::new(Vec::new()),
            site_ids: Mutex::new(HashMap::new()),
            units: AtomicUsize::new(0),
            lazy_stats: Mutex::new(UnitStats::default()),
            lazy_fallbacks: AtomicUsize::new(0),
            lazy_fault: std::sync::OnceLock::new(),
            executor,
            tier,
        }
    }

    /// Takes the promoted values `seed`'s sites have seen as seen at the same sites of this
    /// specialization (for [`Runtime::respecialize`]); whether there were any. A site of
    /// `seed` whose block is not the same block here (by index and name) is left out.
    fn see_as(&self, seed: &SpecState) -> bool {
        let mut any = false;
        // (The sites copied out first: no lock of `seed` is held while this one's are
        // taken.)
        let old_sites = seed.sites.read().clone();
        for old in &old_sites {
            let b = old.site.block;
            let same = match (self.prog.blocks.get(b), seed.prog.blocks.get(b)) {
                (Some(new), Some(was)) => new.name == was.name && new.promote == was.promote,
                _ => false,
            };
            let words = old.seen_words();
            if !same || words.is_empty() {
                continue;
            }
            let id = self.site_id(&old.site);
            let sites = self.sites.read();
            for w in &words {
                sites[id as usize].see(w);
            }
            any = true;
        }
        any
    }

    /// The specialization a call context belongs to.
    ///
    /// # Safety
    /// `ctx` must be the live context of a call into code of a live specialization (its
    /// `owner` is set by [`Specialization::call_words`] for the duration of the call).
    pub(crate) unsafe fn of<'a>(ctx: *mut CallCtx) -> &'a SpecState {
        // SAFETY: guaranteed by the caller.
        unsafe { &*((*ctx).owner as *const SpecState) }
    }

    /// The fault site of failed lazy specializations.
    pub(crate) fn lazy_fault(&self) -> u64 {
        *self.lazy_fault.get_or_init(|| {
            self.region
                .fault_site(FaultKind::Specialization, SrcLoc::default())
        })
    }

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

    /// The number of promotion site `site`, registered on first sight: units that reach
    /// one site share it, and so its cache of continuations.
    fn site_id(&self, site: &Site) -> u32 {
        let ident = site.ident();
        let mut ids = self.site_ids.lock();
        if let Some(&id) = ids.get(&ident) {
            return id;
        }
        let sb = &self.prog.blocks[site.block];
        let types = sb
            .promote
            .iter()
            .map(|&(src, _)| {
                sb.dyn_inputs()
                    .find(|&(r, _)| r == src)
                    .and_then(|(_, t)| t.scalar())
                    .unwrap_or(Scalar::I64)
            })
            .collect();
        let mut all = self.sites.write();
        let id = all.len() as u32;
        all.push(Arc::new(PromoSite::new(site.clone(), types)));
        ids.insert(ident, id);
        id
    }

    /// The promoted values seen so far at site `id` (see [`PromoSite::see`]), which units
    /// stitched from now on dispatch inline.
    fn known_values(&self, id: u32) -> Vec<Vec<Const>> {
        let sites = self.sites.read();
        let Some(site) = sites.get(id as usize) else {
            return Vec::new();
        };
        // Only a site that keeps every value's continuation has them all to dispatch on.
        match self.prog.blocks[site.site.block].caching {
            Caching::All | Caching::AllUnchecked => site.seen(),
            _ => Vec::new(),
        }
    }

    /// The code of the continuation at `site` for promoted `words`, stitched on a miss,
    /// as the site's caching policy says ([`crate::ge::Caching`]): `cache_all` keeps one
    /// continuation per value, up to [`Limits::max_versions`] (then the call fails with
    /// a budget error: a promotion has no generic continuation to fall back to);
    /// `cache_one` keeps the last value's; `cache_one_unchecked` the first, which then
    /// serves every value; `replicate` stitches every time (bounded by the units budget).
    fn continuation(&self, site: &Arc<PromoSite>, words: &[u64]) -> Result<usize, RuntimeError> {
        let caching = self.prog.blocks[site.site.block].caching;
        // The guard protects site entries `cache_one` replaces (their code stays with the
        // specialization); the tick is unused (no eviction at sites).
        let g = epoch::pin();
        let cached = |site: &PromoSite| match caching {
            Caching::Replicate => None,
            Caching::OneUnchecked => site.only(),
            _ => site.cache.get(words, 0, &g).copied(),
        };
        if let Some(c) = cached(site) {
            if caching != Caching::OneUnchecked {
                site.install_inline(words, c);
            }
            return Ok(c);
        }
        let _guard = site.stitching.lock();
        if let Some(c) = cached(site) {
            return Ok(c);
        }
        let opts = &self.runtime.opts;
        let b = &self.prog.blocks[site.site.block];
        let exceeded = |budget, limit| {
            Err(RuntimeError::Spec(SpecError::BudgetExceeded {
                budget,
                limit,
                block: b.name.clone(),
                loc: b.first_loc(),
            }))
        };
        let keeps_all = matches!(caching, Caching::All | Caching::AllUnchecked);
        if keeps_all && site.cache.len() >= opts.limits.max_versions {
            return exceeded(BudgetKind::Versions, opts.limits.max_versions);
        }
        let units = self.units.fetch_add(1, Ordering::Relaxed) + 1;
        if units > opts.budget.max_units {
            return exceeded(BudgetKind::Units, opts.budget.max_units);
        }
        let promoted: Vec<_> = words
            .iter()
            .zip(&site.types)
            .map(|(&w, &t)| word_to_const(w, t))
            .collect();
        let full = site.site.key(&promoted);
        site.see(words);
        // The continuation's unit, with the values seen at promotion sites dispatched
        // inline, or without (should their continuations not fit the budget of one unit).
        let input = |inline_dispatch| UnitInput {
            prog: &self.prog,
            start: site.site.block,
            key: &full,
            slices: &self.slices,
            static_ptrs: self.static_ptrs(),
            callees: Callees::Imported,
            spec: Some(self),
            ir_text: None,
            inline_dispatch,
        };
        let code = guarded("stitching a continuation", || {
            if self.tier == Tier::Stitch {
                let stitch = |inline_dispatch| {
                    self.runtime
                        .stitch_unit(&self.region, input(inline_dispatch))
                };
                let made = inline_or_not(true, stitch)?;
                if let Some((code, stats)) = made {
                    self.lazy_stats.lock().add(&stats);
                    self.lazy_fallbacks
                        .fetch_add(stats.fallbacks, Ordering::Relaxed);
                    return Ok(code);
                }
            }
            self.region.with_module(|module| {
                let inputs = self.prog.input_types(site.site.block);
                let id = module
                    .declare_anonymous_function(&abi::unit_signature(inputs))
                    .map_err(jit_err)?;
                let compile = |inline_dispatch| {
                    self.runtime
                        .compile_unit(&self.region, module, input(inline_dispatch), id)
                };
                let mut stats = inline_or_not(true, compile)?;
                let t = std::time::Instant::now();
                module.finalize_definitions().map_err(jit_err)?;
                stats.compile_ns += t.elapsed().as_nanos() as u64;
                self.lazy_stats.lock().add(&stats);
                Ok(module.get_finalized_function(id) as usize)
            })
        })?;
        site.stitched.fetch_add(1, Ordering::Relaxed);
        match caching {
            Caching::Replicate => {}
            Caching::OneUnchecked => site.set_only(code),
            Caching::One => {
                site.clear(&g);
                site.cache.insert(words, code, 0, &g);
                site.install_inline(words, code);
            }
            Caching::All | Caching::AllUnchecked => {
                site.cache.insert(words, code, 0, &g);
                site.install_inline(words, code);
            }
        }
        Ok(code)
    }
}

/// The bytes of a word buffer.
fn bytes_of(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: `u64` has no padding and every byte pattern is valid for `u8`; the length is
    // the buffer's size in bytes, and the borrow is tied to `words`.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) }
}

/// Compiled code for a region and its static values (or generic code), callable from
/// Rust with the dynamic arguments. Owns its code: dropping the last handle frees it.
pub struct Specialization {
    /// The tier of its code (also in `state`; here, a cache hit reads it without a load).
    tier: Tier,
    state: Arc<SpecState>,
    /// The entry wrapper (in the runtime's region) and the entry unit it calls.
    wrapper: usize,
    entry: usize,
    pub ret: Option<Type>,
    /// What making the entry unit cost (zero for generic code).
    pub stats: UnitStats,
}

impl Specialization {
    /// Whether it is a specialization of `prog` (the very program, not an equal one).
    pub fn specializes(&self, prog: &Arc<StitchProgram>) -> bool {
        Arc::ptr_eq(&self.state.prog, prog)
    }

    /// The tier its code is compiled in.
    #[inline]
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// What each promotion site met so far did, in the order the sites were met.
    pub fn site_stats(&self) -> Vec<SiteStats> {
        self.state
            .sites
            .read()
            .iter()
            .map(|s| SiteStats {
                block: self.state.prog.blocks[s.site.block].name.clone(),
                calls: s.calls.load(Ordering::Relaxed),
                stitched: s.stitched.load(Ordering::Relaxed),
                cached: s.cache.len() + usize::from(s.only().is_some()),
            })
            .collect()
    }

    /// Bytes of machine code this specialization owns so far (entry unit and the
    /// continuations stitched lazily; the entry wrapper is the runtime's).
    pub fn code_bytes(&self) -> usize {
        self.state.region.code_bytes()
    }

    /// How many of its stencil copies, in its entry unit and in the continuation units
    /// stitched so far, were of a variant made ahead in place of one not made then
    /// ([`Misses::Background`]): code that stitching it again, once the library's worker
    /// has made them, makes better.
    pub fn fallbacks(&self) -> usize {
        self.stats.fallbacks + self.state.lazy_fallbacks.load(Ordering::Relaxed)
    }

    /// The continuation units stitched lazily so far (at promotions), and what they cost
    /// together.
    pub fn lazy_stats(&self) -> (usize, UnitStats) {
        (
            self.state.units.load(Ordering::Relaxed),
            *self.state.lazy_stats.lock(),
        )
    }

    /// The contents of static slice `k` (by parameter position) this specialization was
    /// made for, as bytes in the element layout.
    pub fn static_slice_bytes(&self, k: usize) -> Option<&[u8]> {
        let st = self.state.storage.get(k)?.as_ref()?;
        let d = self.state.slices.get(k)?.as_ref()?;
        let n = d.data.len() * clif::elem_size(d.elem) as usize;
        // SAFETY: the storage holds at least `n` initialized bytes (see `SpecState::new`)
        // and lives as long as `self`.
        Some(unsafe { std::slice::from_raw_parts(st.as_ptr() as *const u8, n) })
    }

    /// Calls the code with arguments as words (scalars: their word; slices: pointer then
    /// length) and returns the result's word.
    ///
    /// # Safety
    /// `words` must match the specialization's dynamic inputs (the entry unit's input
    /// types: the parameters that are not run-time constants, in order; for generic code,
    /// all of them): for each slice, a pointer to `len`
    /// valid, initialized elements of the slice's element type, writable if the slice is
    /// `[mut T]`, not accessed by anything else during the call. Scalars may be any bits.
    pub unsafe fn call_words(&self, words: &[u64]) -> Result<u64, RunError> {
        let opts = &self.state.runtime.opts;
        let mut ctx = CallCtx {
            fault_site: 0,
            fault_a: 0,
            fault_b: 0,
            depth: 0,
            max_depth: opts.max_depth,
            fuel: opts.fuel.unwrap_or(u64::MAX),
            status: 0,
            stack_limit: 0,
            owner: Arc::as_ptr(&self.state) as *const (),
            frame: std::ptr::null_mut(),
            frame_words: 0,
            message: None,
            frame_store: Vec::new(),
        };
        ctx.stack_limit = (&ctx as *const CallCtx as u64).saturating_sub(opts.max_stack);
        // The frame of stitch-tier units, on this stack while it is large enough: a frame
        // allocated per call (and freed after it) cost a call more than its code, and
        // zeroing this one cost a small call a third more. A unit writes every word it
        // reads, so it is left as it is. (Debug builds fill it, with zeros and with a
        // pattern on alternate calls, so that code reading a word it did not write gives
        // a wrong result in the tests whatever the right one: a `bool` read as the pattern
        // is `true`.)
        let mut frame = std::mem::MaybeUninit::<[u64; INLINE_FRAME_WORDS]>::uninit();
        #[cfg(debug_assertions)]
        {
            static CALLS: AtomicUsize = AtomicUsize::new(0);
            let fill = match CALLS.fetch_add(1, Ordering::Relaxed) % 2 {
                0 => 0,
                _ => 0xa5a5_a5a5_a5a5_a5a5,
            };
            frame.write([fill; INLINE_FRAME_WORDS]);
        }
        ctx.frame = frame.as_mut_ptr().cast::<u64>();
        ctx.frame_words = INLINE_FRAME_WORDS as u64;
        // SAFETY: `wrapper` is a finalized entry wrapper in the runtime's region for units
        // taking this specialization's dynamic inputs (made for them when it was made), with
        // the signature `extern "C" fn(*mut CallCtx, *const u64, *const u8) -> u64`; `entry`
        // is a finalized unit taking those inputs, in this specialization's region or the
        // runtime's. Both regions (and every region the code can reach: the runtime's
        // generic code) outlive the call through `self`, which keeps the runtime alive. The
        // caller guarantees the words. `frame` lives on this stack until the call returns,
        // and only this call's code (on this thread) writes it.
        let f: extern "C" fn(*mut CallCtx, *const u64, *const u8) -> u64 =
            unsafe { std::mem::transmute(self.wrapper) };
        let v = f(&mut ctx, words.as_ptr(), self.entry as *const u8);
        if ctx.status == 0 {
            return Ok(v);
        }
        // SAFETY: the fault site, if any, was stored by code of a region `self` keeps
        // alive.
        Err(unsafe { faults::fault_of(&mut ctx, &self.state.prog.header.name) })
    }
}

/// With `DYC_CHECK_COMPILED_GE=1` in the environment (read once), checks that a unit the
/// compiled generating extension recorded into `tape` is the one the interpreted planned
/// stitcher records (`interpreted` runs it), call for call; panics if not. For tests.
fn check_compiled(
    interpreted: impl FnOnce(&mut Tape) -> Result<Unit<u32>, RuntimeError>,
    tape: &Tape,
    unit: &Unit<u32>,
) {
    static CHECK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*CHECK.get_or_init(|| std::env::var("DYC_CHECK_COMPILED_GE").is_ok_and(|v| v == "1")) {
        return;
    }
    let mut other = Tape::default();
    let theirs = interpreted(&mut other).expect("the interpreted stitcher makes the unit");
    assert!(
        tape.same_run(&other) && format!("{unit:?}") == format!("{theirs:?}"),
        "the compiled and the interpreted planned stitcher record different units:\n{}\n---\n{}\n{unit:?}\n{theirs:?}",
        tape.listing(),
        other.listing()
    );
}

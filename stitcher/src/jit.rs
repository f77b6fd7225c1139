//! Cranelift set-up for the runtime: the host ISA with the flags units need.
//!
//! Facts of Cranelift 0.135 this relies on:
//! - units are functions in the `tail` calling convention linked by `return_call`; that
//!   needs `preserve_frame_pointers=true`, without which compilation panics instead of
//!   failing;
//! - the Cranelift verifier costs 1.4-1.8x compile time: on in tests, off for release
//!   specialization ([`JitOptions::verify`]);
//! - `opt_level` `none` compiles fastest, `speed` gives the best code;
//! - `opt_level` decides only whether `Context::optimize` runs the e-graph pass (lowering
//!   and register allocation do not read it), and `Context::compile` runs `optimize`
//!   again: a function optimized beforehand (as [`crate::late`] does) is lowered with the
//!   same flags at `none` ([`lowering_isa`]) to keep what was done to it.

use std::sync::{Arc, OnceLock};

use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::settings::{self, Configurable};

/// Code-generation options of a JIT module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JitOptions {
    /// Optimize for speed (`true`) or compile fastest (`false`).
    pub optimize: bool,
    /// Run Cranelift's IR verifier on every function.
    pub verify: bool,
}

impl Default for JitOptions {
    fn default() -> JitOptions {
        JitOptions {
            optimize: true,
            verify: cfg!(debug_assertions),
        }
    }
}

/// Why the JIT could not be set up.
#[derive(Debug)]
pub struct JitError(pub String);

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JIT set-up failed: {}", self.0)
    }
}

impl std::error::Error for JitError {}

/// Units with more blocks than this are register-allocated by Cranelift's single-pass
/// allocator, whose cost is linear: the default backtracking allocator grows
/// super-linearly on long branchy functions (24,000 blocks of if/else took seconds), while
/// below this size it compiles quickly and gives better code.
pub const LARGE_UNIT_BLOCKS: usize = 4096;

/// The ISA of the host CPU with the flags the runtime needs.
pub fn host_isa(opts: JitOptions) -> Result<Arc<dyn TargetIsa>, JitError> {
    isa_with(opts, "backtracking")
}

/// [`host_isa`] with the single-pass register allocator, for units larger than
/// [`LARGE_UNIT_BLOCKS`].
pub fn large_unit_isa(opts: JitOptions) -> Result<Arc<dyn TargetIsa>, JitError> {
    isa_with(opts, "single_pass")
}

/// `isa` with `opt_level` `none`, for lowering a function that the runtime has run
/// through `isa`'s e-graph pass (and [`crate::late`]) itself: the same flags otherwise,
/// so the same code. One per process for each verifier setting and register allocator.
pub fn lowering_isa(isa: &dyn TargetIsa) -> Result<&'static dyn TargetIsa, JitError> {
    static ISAS: [OnceLock<Arc<dyn TargetIsa>>; 4] = [const { OnceLock::new() }; 4];
    let flags = isa.flags();
    let verify = flags.enable_verifier();
    let (k, regalloc) = match flags.regalloc_algorithm() {
        settings::RegallocAlgorithm::Backtracking => (0, "backtracking"),
        settings::RegallocAlgorithm::SinglePass => (1, "single_pass"),
    };
    let cell = &ISAS[k + 2 * usize::from(verify)];
    if let Some(isa) = cell.get() {
        return Ok(&**isa);
    }
    let made = isa_with(
        JitOptions {
            optimize: false,
            verify,
        },
        regalloc,
    )?;
    Ok(&**cell.get_or_init(|| made))
}

fn isa_with(opts: JitOptions, regalloc: &str) -> Result<Arc<dyn TargetIsa>, JitError> {
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v)
            .map_err(|e| JitError(format!("setting {k}={v}: {e}")))
    };
    set(
        &mut flags,
        "opt_level",
        if opts.optimize { "speed" } else { "none" },
    )?;
    set(
        &mut flags,
        "enable_verifier",
        if opts.verify { "true" } else { "false" },
    )?;
    set(&mut flags, "regalloc_algorithm", regalloc)?;
    set(&mut flags, "preserve_frame_pointers", "true")?;
    set(&mut flags, "is_pic", "false")?;
    // Block offsets and edges of the machine code, for `loop_padding`.
    set(&mut flags, "machine_code_cfg_info", "true")?;
    let builder = cranelift_native::builder().map_err(|e| JitError(e.to_string()))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError(e.to_string()))
}

/// Where a function's loops fall in the processor's fetch windows
/// ([`dyc_templates::stencil::FETCH_WINDOW`] bytes, aligned): the bytes of padding to put
/// before its code (which then starts on a window boundary) so that its loops straddle as
/// few windows as their lengths allow, innermost first. A loop that fits in one window but
/// straddles two runs at up to half speed on Zen 3 (the stitch tier aligns its own loops
/// the same way, by `nop`s before each loop head); Cranelift places blocks one after
/// another, so a unit's hot loop fell wherever the code before it ended, and the same
/// unit ran twice as fast in one process as in another.
///
/// `starts` are the code's block offsets and `edges` its control-flow edges between them
/// (Cranelift's `machine_code_cfg_info`), `len` its length; the padding is a multiple of
/// `step` (the code's alignment, so that its constants stay aligned). A loop is an edge
/// back to a block at or before its source, spanning from that block to the end of the
/// source block; loops are taken shortest first, and a padding is better if the first
/// loop on which two differ straddles fewer windows beyond the fewest its length needs.
/// `None` when the code has no loop.
pub fn loop_padding(starts: &[u32], edges: &[(u32, u32)], len: u32, step: u32) -> Option<u32> {
    const W: u32 = dyc_templates::stencil::FETCH_WINDOW;
    if !edges.iter().any(|&(from, to)| to <= from) {
        return None;
    }
    // (Cranelift lists the offsets in layout order, ascending; sorted here all the same,
    // so that a unit of thousands of blocks and loops costs a search per loop.)
    let mut sorted = starts.to_vec();
    sorted.sort_unstable();
    let end_of = |from: u32| {
        let k = sorted.partition_point(|&s| s <= from);
        sorted.get(k).copied().unwrap_or(len)
    };
    let mut loops: Vec<(u32, u32)> = edges
        .iter()
        .filter(|&&(from, to)| to <= from)
        .map(|&(from, to)| (to, end_of(from).max(to + 1)))
        .collect();
    if step == 0 || step >= W {
        return Some(0);
    }
    // One loop per head, to the end of its last jump back; shortest first.
    loops.sort_unstable();
    loops.dedup_by(|b, a| {
        let same = a.0 == b.0;
        if same {
            a.1 = a.1.max(b.1);
        }
        same
    });
    loops.sort_by_key(|&(s, e)| (e - s, s));
    let excess = |pad: u32| -> Vec<u32> {
        loops
            .iter()
            .map(|&(s, e)| {
                let spans = (e + pad - 1) / W - (s + pad) / W + 1;
                spans - (e - s).div_ceil(W)
            })
            .collect()
    };
    (0..W)
        .step_by(step as usize)
        .min_by_key(|&pad| (excess(pad), pad))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{types, AbiParam, InstBuilder, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
    use cranelift_jit::{JITBuilder, JITModule};
    use cranelift_module::{Linkage, Module};

    /// A new JIT module for the host.
    fn new_module(opts: JitOptions) -> Result<JITModule, JitError> {
        let isa = host_isa(opts)?;
        let builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
        Ok(JITModule::new(builder))
    }

    /// A `tail`-convention function reached through a system-ABI wrapper, compiled with
    /// the runtime's flags, runs and returns the right value.
    #[test]
    fn tail_call_unit_behind_a_system_abi_wrapper_runs() {
        let mut module = new_module(JitOptions {
            optimize: true,
            verify: true,
        })
        .expect("JIT module");
        let frontend = module.isa().frontend_config();
        let mut ctx = module.make_context();
        let mut fctx = FunctionBuilderContext::new();

        // unit(x) = x * 3 + 1, in the tail convention.
        let mut unit_sig = module.make_signature();
        unit_sig.call_conv = CallConv::Tail;
        unit_sig.params.push(AbiParam::new(types::I64));
        unit_sig.returns.push(AbiParam::new(types::I64));
        let unit = module
            .declare_function("unit", Linkage::Local, &unit_sig)
            .expect("declare unit");
        ctx.func.signature = unit_sig.clone();
        ctx.func.name = UserFuncName::user(0, unit.as_u32());
        {
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let blk = b.create_block();
            b.append_block_params_for_function_params(blk);
            b.switch_to_block(blk);
            let x = b.block_params(blk)[0];
            let three = b.ins().iconst(types::I64, 3);
            let m = b.ins().imul(x, three);
            let one = b.ins().iconst(types::I64, 1);
            let r = b.ins().iadd(m, one);
            b.ins().return_(&[r]);
            b.seal_all_blocks();
            b.finalize(frontend);
        }
        module.define_function(unit, &mut ctx).expect("define unit");
        module.clear_context(&mut ctx);

        // entry(x) = unit(x), in the system ABI.
        let mut entry_sig = module.make_signature();
        entry_sig.params.push(AbiParam::new(types::I64));
        entry_sig.returns.push(AbiParam::new(types::I64));
        let entry = module
            .declare_function("entry", Linkage::Local, &entry_sig)
            .expect("declare entry");
        ctx.func.signature = entry_sig;
        ctx.func.name = UserFuncName::user(0, entry.as_u32());
        {
            let callee = module.declare_func_in_func(unit, &mut ctx.func);
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let blk = b.create_block();
            b.append_block_params_for_function_params(blk);
            b.switch_to_block(blk);
            let x = b.block_params(blk)[0];
            let call = b.ins().call(callee, &[x]);
            let r = b.inst_results(call)[0];
            b.ins().return_(&[r]);
            b.seal_all_blocks();
            b.finalize(frontend);
        }
        module
            .define_function(entry, &mut ctx)
            .expect("define entry");
        module.finalize_definitions().expect("finalize");
        let ptr = module.get_finalized_function(entry);
        // SAFETY: `ptr` is the finalized code of `entry`, compiled above with the system-ABI
        // signature `fn(i64) -> i64`; the module that owns the code outlives the call.
        let f: extern "C" fn(i64) -> i64 = unsafe { std::mem::transmute(ptr) };
        assert_eq!(f(14), 43);
        assert_eq!(f(-1), -2);
    }

    /// Loops are placed in as few fetch windows as their lengths allow, innermost first,
    /// by padding in steps of the code's alignment.
    #[test]
    fn loop_padding_places_the_innermost_loop_in_one_window() {
        // No edge back: no loop, no padding.
        assert_eq!(loop_padding(&[10, 20], &[(0, 10), (10, 20)], 30, 16), None);
        // A loop of 40 bytes from byte 40 (its jump back ends the block at 70, which runs
        // to 80): at 0 or 16 it straddles two windows, at 32 it sits in the second.
        let starts = [40, 70, 80];
        let edges = [(0, 40), (40, 70), (70, 40), (70, 80)];
        assert_eq!(loop_padding(&starts, &edges, 90, 16), Some(32));
        // A loop that already sits in one window needs none.
        assert_eq!(loop_padding(&[8, 30, 40], &[(30, 8)], 50, 16), Some(0));
        // A block that jumps to itself is a loop: bytes 60 to 70.
        assert_eq!(loop_padding(&[60, 70], &[(60, 60)], 80, 16), Some(16));
        // Two jumps back to one head are one loop, to the end of the last: bytes 40 to
        // 100, which straddle two windows wherever they start, so no padding. (Taken
        // apart, the shorter, bytes 40 to 70, would ask for 32.)
        let starts = [40, 60, 70, 100];
        let edges = [(60, 40), (70, 40)];
        assert_eq!(loop_padding(&starts, &edges, 110, 16), Some(0));
        // Innermost first: an inner loop of bytes 110 to 140 inside an outer one of 10 to
        // 150. Pad 32 puts the inner loop in the third window; the outer one spans three
        // windows at any padding.
        let starts = [10, 110, 130, 140, 150];
        let edges = [(130, 110), (140, 10)];
        assert_eq!(loop_padding(&starts, &edges, 160, 16), Some(32));
        // And the inner loop comes first where the two disagree: inner 50 to 70 fits in
        // one window at pad 16, 32 or 48; outer 10 to 120 spans its two windows only at
        // pad 0, and three at 16.
        let starts = [10, 50, 65, 70, 115, 120];
        let edges = [(65, 50), (115, 10)];
        assert_eq!(loop_padding(&starts, &edges, 130, 16), Some(16));
        // Code that must keep a 64-byte alignment cannot move.
        assert_eq!(loop_padding(&[40, 70], &[(40, 40)], 80, 64), Some(0));
    }
}

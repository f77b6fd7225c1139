//! Cranelift set-up for the runtime: the host ISA with the flags units need.
//!
//! Facts of Cranelift 0.135 this relies on:
//! - units are functions in the `tail` calling convention linked by `return_call`; that
//!   needs `preserve_frame_pointers=true`, without which compilation panics instead of
//!   failing;
//! - the Cranelift verifier costs 1.4-1.8x compile time: on in tests, off for release
//!   specialization ([`JitOptions::verify`]);
//! - `opt_level` `none` compiles fastest, `speed` gives the best code.

use std::sync::Arc;

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
    let builder = cranelift_native::builder().map_err(|e| JitError(e.to_string()))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| JitError(e.to_string()))
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
}

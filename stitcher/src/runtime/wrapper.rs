//! Entry wrappers: the functions Rust calls. A wrapper has the target's C calling
//! convention and the signature `fn(ctx: *mut CallCtx, args: *const u64, unit: *const u8)
//! -> u64`: it loads the dynamic arguments from `args` (one word per scalar, two per
//! slice), calls the unit at `unit` in the `tail` convention, stores the unit's status into
//! the context and returns the result's word (ABI in [`dyc_templates::abi`]).
//!
//! A wrapper depends only on the unit's input types, so the runtime keeps one per list of
//! input types in its own code region, shared by every specialization and the generic
//! entries: making a specialization compiles its entry unit and nothing else.

use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, UserFuncName};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Module};

use dyc_templates::abi::{ctx, host_signature, unit_signature};
use dyc_templates::clif;
use dyc_templates::types::{Scalar, Type};

use super::memory::CodeRegion;
use super::RuntimeError;

/// Defines (not finalizes) in `module` (the module of `region`) a wrapper for units taking
/// `inputs`.
pub(crate) fn define(
    region: &CodeRegion,
    module: &mut JITModule,
    inputs: &[Type],
) -> Result<FuncId, RuntimeError> {
    let sig = host_signature(
        module.isa(),
        &[types::I64, types::I64, types::I64],
        &[types::I64],
    );
    let id = module
        .declare_anonymous_function(&sig)
        .map_err(|e| RuntimeError::Jit(format!("{e:?}")))?;
    let mut cctx = module.make_context();
    cctx.func.signature = sig;
    cctx.func.name = UserFuncName::user(0, id.as_u32());
    let frontend = module.isa().frontend_config();
    {
        let callee = cctx.func.import_signature(unit_signature(inputs));
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
        let blk = b.create_block();
        b.append_block_params_for_function_params(blk);
        b.switch_to_block(blk);
        let (ctxv, argp, unit) = (
            b.block_params(blk)[0],
            b.block_params(blk)[1],
            b.block_params(blk)[2],
        );
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
                Type::Array { .. } => unreachable!("the verifier rejects array parameters"),
            }
        }
        let call = b.ins().call_indirect(callee, unit, &args);
        let (v, status) = (b.inst_results(call)[0], b.inst_results(call)[2]);
        b.ins().store(flags(), status, ctxv, ctx::STATUS);
        b.ins().return_(&[v]);
        b.seal_all_blocks();
        b.finalize(frontend);
    }
    super::define_function(region, module, id, &mut cctx, None)?;
    Ok(id)
}

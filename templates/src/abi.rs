//! The run-time ABI: the one definition of how generated code and the runtime talk, used
//! by every backend and by the entry-wrapper generator.
//!
//! - **Call context** ([`CallCtx`]): one per call from Rust, passed to every unit as its
//!   first argument. Generated code reads and writes the fields at the offsets below,
//!   which are computed from the struct itself (`offset_of!`), so they cannot drift.
//! - **Unit signature** ([`unit_signature`]): `(ctx, inputs...) -> (value, value2,
//!   status)` in Cranelift's `tail` convention (units tail-call each other); slices take
//!   two words (pointer, length). `value` is the result's bits (integers extended by
//!   signedness to 64 bits, `f64` bit-cast, `bool` 0/1, a slice's pointer with its length
//!   in `value2`).
//! - **Status protocol**: `status` is 0 on success; nonzero after a fault, whose details
//!   the code stored into the context first: `fault_site` (the address of a fault site
//!   record owned by the code region that emitted the check), and for bounds faults the
//!   index and the length in `fault_a` and `fault_b`. A callee's nonzero status is
//!   returned unchanged by every caller.
//! - **Entry wrappers** use the target's default calling convention
//!   ([`host_call_conv`]): `fn(ctx, args: *const u64) -> u64`, storing the unit's status
//!   into the context.
//! - **Inline caches** of promotion sites: [`INLINE_CACHE_SLOTS`] words, each 0 or the
//!   address of an immutable pair `[promoted value, code address]`, at slot
//!   [`inline_cache_slot`] of the value; a slot is written once (atomically) and the pair
//!   it points to never changes while the code that reads it lives.
//! - **Call depth and stack**: a call of a module function increments `depth` and fails
//!   with a call-depth fault when it would exceed `max_depth` or when the caller's frame
//!   is below `stack_limit` (the native stack the call may use is bounded too).

use std::mem::offset_of;

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::isa::{CallConv, TargetIsa};

use crate::types::Type;

/// The call context shared by generated code and the runtime.
#[repr(C)]
pub struct CallCtx {
    /// The fault site record of the fault that happened (an address), or 0.
    pub fault_site: u64,
    /// First fault detail (an index).
    pub fault_a: u64,
    /// Second fault detail (a length).
    pub fault_b: u64,
    /// Current depth of nested calls of module functions.
    pub depth: u64,
    pub max_depth: u64,
    /// Remaining fuel (block entries), when fuel is counted.
    pub fuel: u64,
    /// Status written by the entry wrapper.
    pub status: u64,
    /// The lowest frame address a call of a module function may start from.
    pub stack_limit: u64,
    /// The runtime object of the specialization being called (opaque to the code).
    pub owner: *const (),
    /// The frame of stitch-tier units: their values live in its words. A call starts with
    /// a frame on the caller's stack; a unit's prologue that needs more words makes room
    /// through `dyc_frame`.
    pub frame: *mut u64,
    pub frame_words: u64,
    /// The message of a failing host function or lazy specialization.
    pub message: Option<String>,
    /// Owns the frame's words (the code reads `frame` and `frame_words` only).
    pub frame_store: Vec<u64>,
}

/// Offsets of the context's fields, as generated code addresses them.
pub mod ctx {
    use super::*;
    pub const FAULT_SITE: i32 = offset_of!(CallCtx, fault_site) as i32;
    pub const FAULT_A: i32 = offset_of!(CallCtx, fault_a) as i32;
    pub const FAULT_B: i32 = offset_of!(CallCtx, fault_b) as i32;
    pub const DEPTH: i32 = offset_of!(CallCtx, depth) as i32;
    pub const MAX_DEPTH: i32 = offset_of!(CallCtx, max_depth) as i32;
    pub const FUEL: i32 = offset_of!(CallCtx, fuel) as i32;
    pub const STATUS: i32 = offset_of!(CallCtx, status) as i32;
    pub const STACK_LIMIT: i32 = offset_of!(CallCtx, stack_limit) as i32;
    pub const FRAME: i32 = offset_of!(CallCtx, frame) as i32;
    pub const FRAME_WORDS: i32 = offset_of!(CallCtx, frame_words) as i32;
}

// The code loads and stores these fields as 64-bit words.
const _: () = assert!(ctx::FAULT_SITE % 8 == 0 && ctx::STACK_LIMIT % 8 == 0);
const _: () = assert!(std::mem::size_of::<usize>() == 8, "64-bit targets only");

/// The Cranelift parameter types of a list of our types (slices take two words, arrays
/// one per element).
pub fn abi_types(tys: &[Type]) -> Vec<cranelift_codegen::ir::Type> {
    let words = |t: &Type| match *t {
        Type::Slice { .. } => 2,
        Type::Array { len, .. } => len as usize,
        Type::Scalar(_) => 1,
    };
    let mut v = Vec::with_capacity(tys.iter().map(words).sum());
    for t in tys {
        match t {
            Type::Scalar(s) => v.push(crate::clif::clif_type(*s)),
            Type::Slice { .. } => {
                v.push(types::I64);
                v.push(types::I64);
            }
            Type::Array { elem, len } => v.extend(std::iter::repeat_n(
                crate::clif::clif_type(*elem),
                *len as usize,
            )),
        }
    }
    v
}

/// The signature of a unit (or generic function) taking `inputs`.
pub fn unit_signature(inputs: &[Type]) -> Signature {
    let mut sig = Signature::new(CallConv::Tail);
    sig.params.push(AbiParam::new(types::I64));
    for t in abi_types(inputs) {
        sig.params.push(AbiParam::new(t));
    }
    for _ in 0..3 {
        sig.returns.push(AbiParam::new(types::I64));
    }
    sig
}

/// The calling convention Rust uses for `extern "C"` functions on the target: entry
/// wrappers and the runtime's helpers.
pub fn host_call_conv(isa: &dyn TargetIsa) -> CallConv {
    isa.default_call_conv()
}

/// A signature in the target's C calling convention.
pub fn host_signature(
    isa: &dyn TargetIsa,
    params: &[cranelift_codegen::ir::Type],
    rets: &[cranelift_codegen::ir::Type],
) -> Signature {
    let mut s = Signature::new(host_call_conv(isa));
    s.params.extend(params.iter().map(|&t| AbiParam::new(t)));
    s.returns.extend(rets.iter().map(|&t| AbiParam::new(t)));
    s
}

/// Slots of a promotion site's inline cache (a power of two).
pub const INLINE_CACHE_SLOTS: u64 = 16;

/// Multiplier of the inline cache's hash (Fibonacci hashing).
pub const CACHE_HASH: u64 = 0x9e37_79b9_7f4a_7c15;

/// The right shift that turns a hashed word into a slot number.
pub const CACHE_SHIFT: i64 = 64 - INLINE_CACHE_SLOTS.trailing_zeros() as i64;

/// The inline cache slot of a promoted value's word.
pub fn inline_cache_slot(word: u64) -> u64 {
    word.wrapping_mul(CACHE_HASH) >> CACHE_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_the_structs() {
        assert_eq!(ctx::FAULT_SITE, 0);
        assert_eq!(ctx::STATUS, 48);
        assert_eq!(ctx::STACK_LIMIT, 56);
        assert!(inline_cache_slot(u64::MAX) < INLINE_CACHE_SLOTS);
    }
}

//! The Cranelift emitter: template instances become Cranelift IR, with the stitch-time
//! peepholes of DyC's stitcher.
//!
//! **Values.** A value is a Cranelift value of its scalar type (`bool` is an `i8` holding 0
//! or 1; integers keep their width), a slice (two `i64`: pointer and length), or a
//! **constant** that is not materialized until needed: holes filled with static values stay
//! constants, so that
//! - operations on constants fold (through [`crate::semantics`], the one definition of the
//!   operators), except those that would fault, which stay to fault at run time;
//! - branches and switches on constants become jumps (branch folding);
//! - multiplications by 0, 1 and powers of two, unsigned divisions and remainders by powers
//!   of two and signed divisions by powers of two become shifts, masks or nothing
//!   (strength reduction); additions and subtractions of 0 vanish;
//! - a bounds check of a constant index against a static slice's length folds away.
//!
//! **Units** follow the run-time ABI of [`crate::abi`] (signature, call context, status
//! protocol, inline caches). Faults are explicit checks, never signals: bounds checks, zero
//! divisors, `trap`, optional fuel, call depth and native stack.
//!
//! **Services** the code needs from the runtime (fault sites, callees, the promotion
//! callback, host calls, `fmod`) come through [`Hooks`].

use std::collections::HashMap;

use cranelift_codegen::entity::{EntitySet, SecondaryMap};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    self, types, BlockArg, FuncRef, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
};
use cranelift_frontend::{FunctionBuilder, Switch};

use crate::abi::{abi_types, ctx, unit_signature, CACHE_HASH, CACHE_SHIFT};
use crate::fold::{BCase, Backend};
use crate::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use crate::semantics;
use crate::template::{FaultKind, TOp};
use crate::types::{Scalar, SrcLoc, Type};

/// The Cranelift type of a scalar.
pub fn clif_type(s: Scalar) -> ir::Type {
    match s {
        Scalar::I8 | Scalar::U8 | Scalar::Bool => types::I8,
        Scalar::I16 | Scalar::U16 => types::I16,
        Scalar::I32 | Scalar::U32 => types::I32,
        Scalar::I64 | Scalar::U64 => types::I64,
        Scalar::F64 => types::F64,
    }
}

/// Size in bytes of a slice element.
pub fn elem_size(s: Scalar) -> i64 {
    clif_type(s).bytes() as i64
}

/// Runtime services the emitted code uses.
pub trait Hooks {
    /// Registers a fault site; the code stores the returned word (the site record's
    /// address) into the context when it faults.
    fn fault_site(&mut self, kind: FaultKind, loc: SrcLoc) -> u64;
    /// A reference to the generic code of callee `callee` (a module function), if it is one.
    fn func_ref(&mut self, func: &mut ir::Function, callee: u32) -> Option<FuncRef>;
    /// The host index of callee `callee`, if it is a host function.
    fn host_index(&self, callee: u32) -> Option<u32>;
    /// `dyc_host_call(ctx, host, args: *mut u64, nargs) -> status`, system ABI; the result
    /// is written to `args[0]`.
    fn host_call(&mut self, func: &mut ir::Function) -> FuncRef;
    /// `dyc_promote(ctx, site, values: *const u64) -> code pointer or 0`, system ABI.
    fn promote(&mut self, func: &mut ir::Function) -> FuncRef;
    /// The inline cache of promotion site `site`, if it has one: its address (layout in
    /// [`crate::abi`]).
    fn inline_cache(&mut self, site: u32) -> Option<u64>;
    /// `fmod(x, y) -> f64`, system ABI.
    fn fmod(&mut self, func: &mut ir::Function) -> FuncRef;
}

/// Emitter options. (Calls between module functions always count against the context's
/// call depth, checked at the call site.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClifOptions {
    /// Count block entries against the context's fuel.
    pub fuel: bool,
}

/// A value during emission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CVal {
    Val(ir::Value, Scalar),
    Slice {
        ptr: ir::Value,
        len: ir::Value,
        elem: Scalar,
    },
    /// A static slice: a pointer and length known now.
    StaticSlice {
        ptr: u64,
        len: u64,
        elem: Scalar,
    },
}

/// Emits one unit into a [`FunctionBuilder`].
pub struct ClifEmitter<'a, 'h> {
    pub b: FunctionBuilder<'a>,
    hooks: &'h mut dyn Hooks,
    opts: ClifOptions,
    ctx: ir::Value,
    /// An empty block after the prologue, where `finish` jumps to the unit's first block.
    body: ir::Block,
    inputs: Vec<CVal>,
    /// Blocks already started (fuel is counted once, at the top).
    started: EntitySet<ir::Block>,
    /// Static slices: key parameter -> (pointer, length, element).
    static_slices: Vec<Option<(u64, u64, Scalar)>>,
    host_ref: Option<FuncRef>,
    promote_ref: Option<FuncRef>,
    fmod_ref: Option<FuncRef>,
    /// The unit's shared fault exits, created on first use and filled by `finish`:
    /// `[site]` and `[site, a, b]` (the details of an out-of-bounds access).
    fault_exits: [Option<ir::Block>; 2],
}

const TRUSTED: fn() -> MemFlagsData = MemFlagsData::trusted;

impl<'a, 'h> ClifEmitter<'a, 'h> {
    /// Starts a unit whose function signature is [`unit_signature`] of `inputs`; the
    /// function's entry block holds the parameters (and the call-depth prologue).
    /// `static_slices[k]` gives the (pointer, length, element type) of static slice `k`.
    pub fn new(
        mut b: FunctionBuilder<'a>,
        hooks: &'h mut dyn Hooks,
        opts: ClifOptions,
        static_slices: Vec<Option<(u64, u64, Scalar)>>,
        inputs: &[Type],
    ) -> ClifEmitter<'a, 'h> {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let ctx = b.block_params(entry)[0];
        let params = b.block_params(entry)[1..].to_vec();
        let inputs = Self::group(&params, inputs);
        let body = b.create_block();
        let mut started = EntitySet::new();
        started.insert(entry);
        started.insert(body);
        let mut e = ClifEmitter {
            b,
            hooks,
            opts,
            ctx,
            body,
            inputs,
            started,
            static_slices,
            host_ref: None,
            promote_ref: None,
            fmod_ref: None,
            fault_exits: [None, None],
        };
        e.b.ins().jump(body, &[]);
        e
    }

    /// Jumps from the prologue to `first` (the specialized start block) with the inputs,
    /// seals every block and finalizes the function.
    pub fn finish(
        mut self,
        first: ir::Block,
        frontend: cranelift_codegen::isa::TargetFrontendConfig,
    ) {
        self.b.switch_to_block(self.body);
        let inputs = self.inputs.clone();
        self.jump(first, &inputs);
        self.fill_fault_exits();
        self.b.seal_all_blocks();
        self.b.finalize(frontend);
    }

    /// The call context parameter of the function being built.
    pub fn ctx_param(&self) -> ir::Value {
        self.ctx
    }

    fn group(params: &[ir::Value], tys: &[Type]) -> Vec<CVal> {
        let mut out = Vec::with_capacity(params.len());
        let mut k = 0;
        for t in tys {
            match *t {
                Type::Scalar(s) => {
                    out.push(CVal::Val(params[k], s));
                    k += 1;
                }
                Type::Slice { elem, .. } => {
                    out.push(CVal::Slice {
                        ptr: params[k],
                        len: params[k + 1],
                        elem,
                    });
                    k += 2;
                }
                Type::Array { elem, len } => {
                    for _ in 0..len {
                        out.push(CVal::Val(params[k], elem));
                        k += 1;
                    }
                }
            }
        }
        out
    }

    /// The Cranelift value of a scalar `CVal`.
    fn val(&mut self, v: CVal) -> ir::Value {
        match v {
            CVal::Val(x, _) => x,
            CVal::Slice { .. } | CVal::StaticSlice { .. } => panic!("a slice used as a scalar"),
        }
    }

    fn materialize(&mut self, c: Const) -> ir::Value {
        match c {
            Const::Int(t, x) => self.b.ins().iconst(clif_type(t), x as i64),
            Const::F64(x) => self.b.ins().f64const(x),
            Const::Bool(b) => self.b.ins().iconst(types::I8, b as i64),
        }
    }

    /// The Cranelift values of a `CVal` (two for slices; inline: every block argument of
    /// every edge goes through here).
    fn words(&mut self, v: CVal) -> smallvec::SmallVec<[ir::Value; 2]> {
        match v {
            CVal::Slice { ptr, len, .. } => smallvec::smallvec![ptr, len],
            CVal::StaticSlice { ptr, len, .. } => {
                smallvec::smallvec![
                    self.b.ins().iconst(types::I64, ptr as i64),
                    self.b.ins().iconst(types::I64, len as i64),
                ]
            }
            s => smallvec::smallvec![self.val(s)],
        }
    }

    /// An edge's arguments (inline up to 16 words: built for every edge).
    fn args(&mut self, vs: &[CVal]) -> smallvec::SmallVec<[BlockArg; 16]> {
        let mut out = smallvec::SmallVec::new();
        for &v in vs {
            for w in self.words(v) {
                out.push(BlockArg::from(w));
            }
        }
        out
    }

    fn scalar_of(v: CVal) -> Scalar {
        match v {
            CVal::Val(_, s) => s,
            CVal::Slice { .. } | CVal::StaticSlice { .. } => Scalar::I64,
        }
    }

    /// The 64-bit word of a scalar: integers extended by signedness, `f64` bit-cast.
    fn word_of(&mut self, v: CVal) -> ir::Value {
        let s = Self::scalar_of(v);
        let x = self.val(v);
        match s {
            Scalar::I64 | Scalar::U64 => x,
            Scalar::F64 => self.b.ins().bitcast(types::I64, MemFlagsData::new(), x),
            s if s.is_signed() => self.b.ins().sextend(types::I64, x),
            _ => self.b.ins().uextend(types::I64, x),
        }
    }

    /// A scalar of type `s` from its 64-bit word.
    fn scalar_of_word(&mut self, w: ir::Value, s: Scalar) -> ir::Value {
        match s {
            Scalar::I64 | Scalar::U64 => w,
            Scalar::F64 => self.b.ins().bitcast(types::F64, MemFlagsData::new(), w),
            s => self.b.ins().ireduce(clif_type(s), w),
        }
    }

    /// An index as an `i64` (sign- or zero-extended by its type).
    fn index64(&mut self, v: CVal) -> ir::Value {
        self.word_of(v)
    }

    /// Branches to a fault exit when `cond` holds, and goes on in a fresh block. Every
    /// check of a unit shares one exit (per arity), which receives the fault site as an
    /// argument from a cold block of the check's own: a check costs a branch, and the
    /// site's 64-bit constant is made only on the way to the exit (made before the
    /// branch, as an argument of it, it took a 10-byte instruction on the hot path).
    fn fault_if(
        &mut self,
        cond: ir::Value,
        kind: FaultKind,
        loc: SrcLoc,
        details: Option<(ir::Value, ir::Value)>,
    ) {
        let site = self.hooks.fault_site(kind, loc);
        let cold = self.b.create_block();
        self.b.set_cold_block(cold);
        let cont = self.b.create_block();
        self.b.ins().brif(cond, cold, &[], cont, &[]);
        self.b.switch_to_block(cold);
        let s = self.b.ins().iconst(types::I64, site as i64);
        let (k, args) = match details {
            Some((a, b)) => (1, vec![s.into(), a.into(), b.into()]),
            None => (0, vec![s.into()]),
        };
        let exit = match self.fault_exits[k] {
            Some(exit) => exit,
            None => {
                let exit = self.b.create_block();
                for _ in 0..args.len() {
                    self.b.append_block_param(exit, types::I64);
                }
                self.b.set_cold_block(exit);
                self.fault_exits[k] = Some(exit);
                exit
            }
        };
        self.b.ins().jump(exit, &args);
        self.b.switch_to_block(cont);
        self.started.insert(cont);
    }

    /// Fills the shared fault exits: record the fault site (and details) in the context,
    /// return with status 1.
    fn fill_fault_exits(&mut self) {
        for exit in self.fault_exits.into_iter().flatten() {
            self.b.switch_to_block(exit);
            let params = self.b.block_params(exit).to_vec();
            self.b
                .ins()
                .store(TRUSTED(), params[0], self.ctx, ctx::FAULT_SITE);
            if let [_, a, b] = params[..] {
                self.b.ins().store(TRUSTED(), a, self.ctx, ctx::FAULT_A);
                self.b.ins().store(TRUSTED(), b, self.ctx, ctx::FAULT_B);
            }
            let zero = self.b.ins().iconst(types::I64, 0);
            let one = self.b.ins().iconst(types::I64, 1);
            self.b.ins().return_(&[zero, zero, one]);
        }
    }

    /// Records a fault in the context and returns with status 1.
    fn fault_here(
        &mut self,
        kind: FaultKind,
        loc: SrcLoc,
        details: Option<(ir::Value, ir::Value)>,
    ) {
        let site = self.hooks.fault_site(kind, loc);
        let s = self.b.ins().iconst(types::I64, site as i64);
        self.b.ins().store(TRUSTED(), s, self.ctx, ctx::FAULT_SITE);
        if let Some((a, b)) = details {
            self.b.ins().store(TRUSTED(), a, self.ctx, ctx::FAULT_A);
            self.b.ins().store(TRUSTED(), b, self.ctx, ctx::FAULT_B);
        }
        let zero = self.b.ins().iconst(types::I64, 0);
        let one = self.b.ins().iconst(types::I64, 1);
        self.b.ins().return_(&[zero, zero, one]);
    }

    /// Returns `(0, status)` when `status` is nonzero (a callee faulted), else goes on.
    fn propagate(&mut self, status: ir::Value) {
        let exit = self.b.create_block();
        let cont = self.b.create_block();
        self.b.set_cold_block(exit);
        self.b.ins().brif(status, exit, &[], cont, &[]);
        self.b.switch_to_block(exit);
        let zero = self.b.ins().iconst(types::I64, 0);
        self.b.ins().return_(&[zero, zero, status]);
        self.b.switch_to_block(cont);
        self.started.insert(cont);
    }

    fn slot_of_words(&mut self, words: &[ir::Value]) -> ir::Value {
        let n = words.len().max(1) as u32;
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            8 * n,
            3,
        ));
        for (k, &w) in words.iter().enumerate() {
            self.b.ins().stack_store(types::I64, w, slot, 8 * k as i32);
        }
        self.b.ins().stack_addr(types::I64, slot, 0)
    }

    fn icc(op: CmpOp, signed: bool) -> IntCC {
        match (op, signed) {
            (CmpOp::Eq, _) => IntCC::Equal,
            (CmpOp::Ne, _) => IntCC::NotEqual,
            (CmpOp::Lt, true) => IntCC::SignedLessThan,
            (CmpOp::Le, true) => IntCC::SignedLessThanOrEqual,
            (CmpOp::Gt, true) => IntCC::SignedGreaterThan,
            (CmpOp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
            (CmpOp::Lt, false) => IntCC::UnsignedLessThan,
            (CmpOp::Le, false) => IntCC::UnsignedLessThanOrEqual,
            (CmpOp::Gt, false) => IntCC::UnsignedGreaterThan,
            (CmpOp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
        }
    }

    fn fcc(op: CmpOp) -> FloatCC {
        match op {
            CmpOp::Eq => FloatCC::Equal,
            CmpOp::Ne => FloatCC::NotEqual,
            CmpOp::Lt => FloatCC::LessThan,
            CmpOp::Le => FloatCC::LessThanOrEqual,
            CmpOp::Gt => FloatCC::GreaterThan,
            CmpOp::Ge => FloatCC::GreaterThanOrEqual,
        }
    }

    fn binary(&mut self, op: BinaryOp, a: CVal, b: CVal, loc: SrcLoc) -> CVal {
        let t = Self::scalar_of(a);
        let x = self.val(a);
        let y = self.val(b);
        let r = match (op, t) {
            (BinaryOp::Add, Scalar::F64) => self.b.ins().fadd(x, y),
            (BinaryOp::Sub, Scalar::F64) => self.b.ins().fsub(x, y),
            (BinaryOp::Mul, Scalar::F64) => self.b.ins().fmul(x, y),
            (BinaryOp::Div, Scalar::F64) => self.b.ins().fdiv(x, y),
            (BinaryOp::Rem, Scalar::F64) => {
                let f = match self.fmod_ref {
                    Some(f) => f,
                    None => {
                        let f = self.hooks.fmod(self.b.func);
                        self.fmod_ref = Some(f);
                        f
                    }
                };
                let call = self.b.ins().call(f, &[x, y]);
                self.b.inst_results(call)[0]
            }
            (BinaryOp::Min | BinaryOp::Max, Scalar::F64) => {
                // x if x < y (x > y for max) or y is NaN, else y: the semantics' formula.
                let cc = if op == BinaryOp::Min {
                    FloatCC::LessThan
                } else {
                    FloatCC::GreaterThan
                };
                let better = self.b.ins().fcmp(cc, x, y);
                let y_nan = self.b.ins().fcmp(FloatCC::Unordered, y, y);
                let pick_x = self.b.ins().bor(better, y_nan);
                self.b.ins().select(pick_x, x, y)
            }
            (BinaryOp::Add, _) => self.b.ins().iadd(x, y),
            (BinaryOp::Sub, _) => self.b.ins().isub(x, y),
            (BinaryOp::Mul, _) => self.b.ins().imul(x, y),
            (BinaryOp::And, _) => self.b.ins().band(x, y),
            (BinaryOp::Or, _) => self.b.ins().bor(x, y),
            (BinaryOp::Xor, _) => self.b.ins().bxor(x, y),
            (BinaryOp::Shl, _) => self.b.ins().ishl(x, y),
            (BinaryOp::Shr, t) if t.is_signed() => self.b.ins().sshr(x, y),
            (BinaryOp::Shr, _) => self.b.ins().ushr(x, y),
            (BinaryOp::Min, t) if t.is_signed() => self.b.ins().smin(x, y),
            (BinaryOp::Min, _) => self.b.ins().umin(x, y),
            (BinaryOp::Max, t) if t.is_signed() => self.b.ins().smax(x, y),
            (BinaryOp::Max, _) => self.b.ins().umax(x, y),
            (BinaryOp::Div | BinaryOp::Rem, t) => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
                self.fault_if(zero, FaultKind::DivisionByZero, loc, None);
                let ty = clif_type(t);
                if t.is_signed() {
                    // MIN / -1 wraps to MIN (remainder 0) instead of trapping.
                    let m1 = self.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                    let one = self.b.ins().iconst(ty, 1);
                    let safe = self.b.ins().select(m1, one, y);
                    if op == BinaryOp::Div {
                        let q = self.b.ins().sdiv(x, safe);
                        let neg = self.b.ins().ineg(x);
                        self.b.ins().select(m1, neg, q)
                    } else {
                        let r = self.b.ins().srem(x, safe);
                        let z = self.b.ins().iconst(ty, 0);
                        self.b.ins().select(m1, z, r)
                    }
                } else if op == BinaryOp::Div {
                    self.b.ins().udiv(x, y)
                } else {
                    self.b.ins().urem(x, y)
                }
            }
        };
        CVal::Val(r, t)
    }

    fn cast(&mut self, to: Scalar, a: CVal) -> CVal {
        let from = Self::scalar_of(a);
        let x = self.val(a);
        let r = match (from, to) {
            _ if from == to => x,
            (Scalar::Bool, Scalar::F64) => {
                let w = self.b.ins().uextend(types::I64, x);
                self.b.ins().fcvt_from_uint(types::F64, w)
            }
            (Scalar::F64, Scalar::Bool) => {
                let z = self.b.ins().f64const(0.0);
                self.b.ins().fcmp(FloatCC::NotEqual, x, z)
            }
            (_, Scalar::Bool) => self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
            (Scalar::Bool, t) => {
                if t == Scalar::I8 || t == Scalar::U8 {
                    x
                } else {
                    self.b.ins().uextend(clif_type(t), x)
                }
            }
            (f, Scalar::F64) => {
                let w = self.word_of(CVal::Val(x, f));
                if f.is_signed() {
                    self.b.ins().fcvt_from_sint(types::F64, w)
                } else {
                    self.b.ins().fcvt_from_uint(types::F64, w)
                }
            }
            (Scalar::F64, t) => {
                // Saturate to 64 bits, then clamp to the target's range; NaN gives 0.
                let (lo, hi) = semantics::int_range(t);
                let w = if t.is_signed() {
                    let w = self.b.ins().fcvt_to_sint_sat(types::I64, x);
                    let lo = self.b.ins().iconst(types::I64, lo as i64);
                    let hi = self.b.ins().iconst(types::I64, hi as i64);
                    let w = self.b.ins().smax(w, lo);
                    self.b.ins().smin(w, hi)
                } else {
                    let w = self.b.ins().fcvt_to_uint_sat(types::I64, x);
                    let hi = self.b.ins().iconst(types::I64, hi as i64);
                    self.b.ins().umin(w, hi)
                };
                self.scalar_of_word(w, t)
            }
            (f, t) => {
                // Integer to integer: extend by the source's signedness, then truncate.
                let w = self.word_of(CVal::Val(x, f));
                self.scalar_of_word(w, t)
            }
        };
        CVal::Val(r, to)
    }

    /// The pointer and length of a slice.
    fn slice_words(&mut self, s: CVal) -> (ir::Value, ir::Value, Scalar) {
        match s {
            CVal::Slice { ptr, len, elem } => (ptr, len, elem),
            CVal::StaticSlice { ptr, len, elem } => {
                let p = self.b.ins().iconst(types::I64, ptr as i64);
                let l = self.b.ins().iconst(types::I64, len as i64);
                (p, l, elem)
            }
            other => panic!("not a slice: {other:?}"),
        }
    }

    /// The address of element `i` of slice `s` (the fold layer has checked the bounds), as
    /// a base and a constant offset: a constant index (put in code by the fold layer)
    /// becomes the offset, and a static slice's address then folds into the base.
    fn element(&mut self, s: CVal, i: CVal) -> (ir::Value, i32, Scalar) {
        let elem = match s {
            CVal::Slice { elem, .. } | CVal::StaticSlice { elem, .. } => elem,
            other => panic!("not a slice: {other:?}"),
        };
        let size = elem_size(elem);
        // A constant index becomes an immediate offset, up to 1 GiB: Cranelift folds the
        // offset of an access to a stack slot (a local array) into the slot's frame offset,
        // which must stay below 2 GiB, and an index that large is out of bounds of any array
        // (its access faults first; the quick tier still lowers it).
        let offset = match i {
            CVal::Val(v, t) => self
                .iconst_of(v, t)
                .and_then(|k| k.checked_mul(size))
                .filter(|o| (0..=1 << 30).contains(o))
                .and_then(|o| i32::try_from(o).ok()),
            _ => None,
        };
        let base = match (s, offset) {
            (CVal::StaticSlice { ptr, .. }, Some(o)) => {
                let a = (ptr as i64).wrapping_add(i64::from(o));
                return (self.b.ins().iconst(types::I64, a), 0, elem);
            }
            (CVal::StaticSlice { ptr, .. }, None) => self.b.ins().iconst(types::I64, ptr as i64),
            (CVal::Slice { ptr, .. }, _) => ptr,
            _ => unreachable!("checked above"),
        };
        match offset {
            Some(o) => (base, o, elem),
            None => {
                let idx = self.index64(i);
                let off = self.b.ins().imul_imm_s(idx, size);
                (self.b.ins().iadd(base, off), 0, elem)
            }
        }
    }

    /// The value of `v` (of integer type `t`) as [`Self::index64`] widens it, if an
    /// `iconst` defines it.
    fn iconst_of(&self, v: ir::Value, t: Scalar) -> Option<i64> {
        let inst = self.b.func.dfg.value_def(v).inst()?;
        match self.b.func.dfg.insts[inst] {
            ir::InstructionData::UnaryImm {
                opcode: ir::Opcode::Iconst,
                imm,
            } => {
                let shift = 64 - self.b.func.dfg.value_type(v).bits();
                let x = imm.bits() << shift;
                Some(if t.is_signed() {
                    x >> shift
                } else {
                    ((x as u64) >> shift) as i64
                })
            }
            _ => None,
        }
    }
}

impl Backend for ClifEmitter<'_, '_> {
    type Value = CVal;
    type Block = ir::Block;

    fn block_index(b: ir::Block) -> usize {
        b.as_u32() as usize
    }

    fn create_block(&mut self, params: &[Type]) -> ir::Block {
        let blk = self.b.create_block();
        for t in abi_types(params) {
            self.b.append_block_param(blk, t);
        }
        blk
    }

    fn block_params(&mut self, blk: ir::Block, types: &[Type], out: &mut Vec<CVal>) {
        out.extend(Self::group(self.b.block_params(blk), types));
    }

    fn switch_to_block(&mut self, blk: ir::Block) {
        self.b.switch_to_block(blk);
        // Fuel is counted once, when a block is first entered.
        if self.started.insert(blk) && self.opts.fuel {
            let f = self
                .b
                .ins()
                .load(types::I64, TRUSTED(), self.ctx, ctx::FUEL);
            let out = self.b.ins().icmp_imm_s(IntCC::Equal, f, 0);
            self.fault_if(out, FaultKind::FuelExhausted, SrcLoc::default(), None);
            let f1 = self.b.ins().iadd_imm_s(f, -1);
            self.b.ins().store(TRUSTED(), f1, self.ctx, ctx::FUEL);
        }
    }

    fn constant(&mut self, c: Const) -> CVal {
        CVal::Val(self.materialize(c), c.ty())
    }

    fn static_slice(&mut self, id: u32, ty: Type) -> CVal {
        let elem = ty.elem().expect("a slice type");
        match self.static_slices.get(id as usize).copied().flatten() {
            Some((ptr, len, _)) => CVal::StaticSlice { ptr, len, elem },
            None => panic!("static slice {id} has no storage"),
        }
    }

    fn op(&mut self, op: &TOp, args: &[CVal], _types: &[Type], loc: SrcLoc) -> Option<CVal> {
        Some(match op {
            TOp::Unary(o) => {
                let t = Self::scalar_of(args[0]);
                let x = self.val(args[0]);
                let r = match (o, t) {
                    (UnaryOp::Neg, Scalar::F64) => self.b.ins().fneg(x),
                    (UnaryOp::Neg, _) => self.b.ins().ineg(x),
                    (UnaryOp::Not, Scalar::Bool) => self.b.ins().bxor_imm_u(x, 1),
                    (UnaryOp::Not, _) => self.b.ins().bnot(x),
                };
                CVal::Val(r, t)
            }
            TOp::Binary(o) => self.binary(*o, args[0], args[1], loc),
            TOp::Cmp(o) => {
                let t = Self::scalar_of(args[0]);
                let x = self.val(args[0]);
                let y = self.val(args[1]);
                let r = if t == Scalar::F64 {
                    self.b.ins().fcmp(Self::fcc(*o), x, y)
                } else {
                    self.b.ins().icmp(Self::icc(*o, t.is_signed()), x, y)
                };
                CVal::Val(r, Scalar::Bool)
            }
            TOp::Select => {
                let cond = args[0];
                {
                    let c = self.val(cond);
                    match (args[1], args[2]) {
                        (a @ (CVal::Slice { .. } | CVal::StaticSlice { .. }), b) => {
                            let elem = match a {
                                CVal::Slice { elem, .. } | CVal::StaticSlice { elem, .. } => elem,
                                _ => unreachable!(),
                            };
                            let aw = self.words(a);
                            let bw = self.words(b);
                            let ptr = self.b.ins().select(c, aw[0], bw[0]);
                            let len = self.b.ins().select(c, aw[1], bw[1]);
                            CVal::Slice { ptr, len, elem }
                        }
                        (a, b) => {
                            let t = Self::scalar_of(a);
                            let x = self.val(a);
                            let y = self.val(b);
                            CVal::Val(self.b.ins().select(c, x, y), t)
                        }
                    }
                }
            }
            TOp::Cast(to) => self.cast(*to, args[0]),
            TOp::Len => match args[0] {
                CVal::StaticSlice { len, .. } => {
                    CVal::Val(self.b.ins().iconst(types::I64, len as i64), Scalar::I64)
                }
                CVal::Slice { len, .. } => CVal::Val(len, Scalar::I64),
                other => panic!("len of {other:?}"),
            },
            TOp::Load => {
                let (addr, offset, elem) = self.element(args[0], args[1]);
                CVal::Val(
                    self.b.ins().load(clif_type(elem), TRUSTED(), addr, offset),
                    elem,
                )
            }
            TOp::Store => {
                let (addr, offset, _) = self.element(args[0], args[1]);
                let v = self.val(args[2]);
                self.b.ins().store(TRUSTED(), v, addr, offset);
                return None;
            }
            TOp::Call { callee, ret } => {
                if let Some(f) = self.hooks.func_ref(self.b.func, *callee) {
                    let mut words = vec![self.ctx];
                    for &a in args {
                        words.extend(self.words(a));
                    }
                    // The call depth is checked at the call site, as the interpreter does.
                    let d = self
                        .b
                        .ins()
                        .load(types::I64, TRUSTED(), self.ctx, ctx::DEPTH);
                    let d1 = self.b.ins().iadd_imm_s(d, 1);
                    let max = self
                        .b
                        .ins()
                        .load(types::I64, TRUSTED(), self.ctx, ctx::MAX_DEPTH);
                    let over = self.b.ins().icmp(IntCC::UnsignedGreaterThan, d1, max);
                    // The native stack is bounded too: the caller's frame must be above
                    // the context's stack limit.
                    let fp = self.b.ins().get_frame_pointer(types::I64);
                    let limit =
                        self.b
                            .ins()
                            .load(types::I64, TRUSTED(), self.ctx, ctx::STACK_LIMIT);
                    let low = self.b.ins().icmp(IntCC::UnsignedLessThan, fp, limit);
                    let over = self.b.ins().bor(over, low);
                    self.fault_if(over, FaultKind::CallDepthExceeded, loc, None);
                    self.b.ins().store(TRUSTED(), d1, self.ctx, ctx::DEPTH);
                    let call = self.b.ins().call(f, &words);
                    let r = self.b.inst_results(call).to_vec();
                    self.propagate(r[2]);
                    self.b.ins().store(TRUSTED(), d, self.ctx, ctx::DEPTH);
                    match (*ret)? {
                        Type::Scalar(s) => CVal::Val(self.scalar_of_word(r[0], s), s),
                        Type::Slice { elem, .. } => CVal::Slice {
                            ptr: r[0],
                            len: r[1],
                            elem,
                        },
                        Type::Array { .. } => unreachable!("the verifier rejects array results"),
                    }
                } else {
                    let host = self
                        .hooks
                        .host_index(*callee)
                        .expect("a callee is a function or a host");
                    let words: Vec<ir::Value> = args.iter().map(|&a| self.word_of(a)).collect();
                    let addr = self.slot_of_words(&words);
                    let f = match self.host_ref {
                        Some(f) => f,
                        None => {
                            let f = self.hooks.host_call(self.b.func);
                            self.host_ref = Some(f);
                            f
                        }
                    };
                    let h = self.b.ins().iconst(types::I64, host as i64);
                    let n = self.b.ins().iconst(types::I64, words.len() as i64);
                    let site = self.hooks.fault_site(FaultKind::Host, loc);
                    let site = self.b.ins().iconst(types::I64, site as i64);
                    let call = self.b.ins().call(f, &[self.ctx, h, addr, n, site]);
                    let status = self.b.inst_results(call)[0];
                    self.propagate(status);
                    let s = ret.and_then(|t| t.scalar())?;
                    let w = self.b.ins().load(types::I64, TRUSTED(), addr, 0);
                    CVal::Val(self.scalar_of_word(w, s), s)
                }
            }
        })
    }

    fn array_slot(&mut self, elem: Scalar, len: u32, elems: &[CVal]) -> CVal {
        let size = elem_size(elem);
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (size as u32) * len.max(1),
            size.trailing_zeros() as u8,
        ));
        for (k, &e) in elems.iter().enumerate() {
            let v = self.val(e);
            self.b
                .ins()
                .stack_store(types::I64, v, slot, (size * k as i64) as i32);
        }
        CVal::Slice {
            ptr: self.b.ins().stack_addr(types::I64, slot, 0),
            len: self.b.ins().iconst(types::I64, i64::from(len)),
            elem,
        }
    }

    fn jump(&mut self, dest: ir::Block, args: &[CVal]) {
        let a = self.args(args);
        self.b.ins().jump(dest, &a);
    }

    fn bounds_check(&mut self, slice: CVal, index: CVal, _ty: Scalar, loc: SrcLoc) {
        let (_, len, _) = self.slice_words(slice);
        let idx = self.index64(index);
        let out = self
            .b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, idx, len);
        self.fault_if(out, FaultKind::OutOfBounds, loc, Some((idx, len)));
    }

    fn brif(&mut self, cond: CVal, t: (ir::Block, &[CVal]), e: (ir::Block, &[CVal])) {
        let c = self.val(cond);
        let ta = self.args(t.1);
        let ea = self.args(e.1);
        self.b.ins().brif(c, t.0, &ta, e.0, &ea);
    }

    fn switch(
        &mut self,
        arg: CVal,
        t: Scalar,
        cases: &[BCase<Self>],
        default: (ir::Block, &[CVal]),
    ) {
        let mask = match t.int_bits() {
            Some(64) | None => u64::MAX,
            Some(w) => (1u64 << w) - 1,
        };
        let x = self.val(arg);
        let mut sw = Switch::new();
        // Each case goes through a block of its own that passes the arguments.
        let mut trampolines = Vec::new();
        for (k, blk, args) in cases {
            let tb = self.b.create_block();
            sw.set_entry((*k & mask) as u128, tb);
            trampolines.push((tb, *blk, args.clone()));
        }
        let db = self.b.create_block();
        sw.emit(&mut self.b, x, db);
        for (tb, blk, args) in trampolines {
            self.b.switch_to_block(tb);
            self.jump(blk, &args);
        }
        self.b.switch_to_block(db);
        self.jump(default.0, default.1);
    }

    fn ret(&mut self, value: Option<CVal>) {
        let zero = self.b.ins().iconst(types::I64, 0);
        let (w0, w1) = match value {
            Some(v @ (CVal::Slice { .. } | CVal::StaticSlice { .. })) => {
                let w = self.words(v);
                (w[0], w[1])
            }
            Some(v) => (self.word_of(v), zero),
            None => (zero, zero),
        };
        self.b.ins().return_(&[w0, w1, zero]);
    }

    fn trap(&mut self, loc: SrcLoc) {
        self.fault_here(FaultKind::Trap, loc, None);
    }

    fn promote(&mut self, site: u32, promoted: &[(CVal, Scalar)], live: &[CVal]) {
        let words: Vec<ir::Value> = promoted.iter().map(|&(v, _)| self.word_of(v)).collect();
        let tys: Vec<Type> = live
            .iter()
            .map(|v| match *v {
                CVal::Slice { elem, .. } | CVal::StaticSlice { elem, .. } => Type::Slice {
                    elem,
                    mutable: true,
                },
                other => Type::Scalar(Self::scalar_of(other)),
            })
            .collect();
        let sig = self.b.import_signature(unit_signature(&tys));
        let mut args = vec![self.ctx];
        for &v in live {
            args.extend(self.words(v));
        }
        // Fast path: the site's inline cache, for one promoted value or none (a lazy block:
        // its one slot, keyed by 0, is patched once the continuation is stitched).
        let table = self.hooks.inline_cache(site).filter(|_| words.len() <= 1);
        if let Some(table) = table {
            let w = match words.as_slice() {
                [w] => *w,
                _ => self.b.ins().iconst(types::I64, 0),
            };
            let h = self.b.ins().imul_imm_s(w, CACHE_HASH as i64);
            let slot = self.b.ins().ushr_imm_u(h, CACHE_SHIFT);
            let off = self.b.ins().ishl_imm_u(slot, 3);
            let base = self.b.ins().iconst(types::I64, table as i64);
            let addr = self.b.ins().iadd(base, off);
            // Entries are written once (atomically) and never change afterwards.
            let pair = self
                .b
                .ins()
                .atomic_load(types::I64, MemFlagsData::trusted(), addr);
            let have = self.b.create_block();
            let hit = self.b.create_block();
            let slow = self.b.create_block();
            self.b.set_cold_block(slow);
            self.b.ins().brif(pair, have, &[], slow, &[]);
            self.b.switch_to_block(have);
            let key = self.b.ins().load(types::I64, TRUSTED(), pair, 0);
            let same = self.b.ins().icmp(IntCC::Equal, key, w);
            self.b.ins().brif(same, hit, &[], slow, &[]);
            self.b.switch_to_block(hit);
            let code = self.b.ins().load(types::I64, TRUSTED(), pair, 8);
            self.b.ins().return_call_indirect(sig, code, &args);
            self.b.switch_to_block(slow);
        }
        let addr = self.slot_of_words(&words);
        let f = match self.promote_ref {
            Some(f) => f,
            None => {
                let f = self.hooks.promote(self.b.func);
                self.promote_ref = Some(f);
                f
            }
        };
        let s = self.b.ins().iconst(types::I64, site as i64);
        let call = self.b.ins().call(f, &[self.ctx, s, addr]);
        let code = self.b.inst_results(call)[0];
        let fail = self.b.create_block();
        let go = self.b.create_block();
        self.b.set_cold_block(fail);
        self.b.ins().brif(code, go, &[], fail, &[]);
        self.b.switch_to_block(fail);
        let zero = self.b.ins().iconst(types::I64, 0);
        let one = self.b.ins().iconst(types::I64, 1);
        self.b.ins().return_(&[zero, zero, one]);
        self.b.switch_to_block(go);
        self.b.ins().return_call_indirect(sig, code, &args);
    }

    fn promote_miss(&mut self, _site: u32, _promoted: &[CVal]) {
        unreachable!("machine code leaves the unit at promotions")
    }
}

thread_local! {
    /// This thread's spare Cranelift context (see [`take_context`]).
    static SPARE_CONTEXT: std::cell::RefCell<Option<cranelift_codegen::Context>> =
        const { std::cell::RefCell::new(None) };
}

/// A cleared Cranelift context for one function: this thread's spare if it has one.
/// Cranelift keeps its register allocator's working memory in the context and asks that
/// contexts be reused: a fresh one per function allocated that memory and freed it again.
/// (Taken out rather than borrowed: a function compiled while another is, on the same
/// thread, gets a fresh one.) Give it back with [`give_context`].
pub fn take_context() -> cranelift_codegen::Context {
    let mut cctx = SPARE_CONTEXT
        .with_borrow_mut(Option::take)
        .unwrap_or_else(cranelift_codegen::Context::new);
    cctx.clear();
    cctx
}

/// Keeps `cctx` as this thread's spare, unless the function it compiled, of `size`
/// instructions, was large (what a context keeps grows with the largest function it
/// compiled).
pub fn give_context(cctx: cranelift_codegen::Context, size: usize) {
    if size <= KEEP_CONTEXT_INSTS {
        SPARE_CONTEXT.with_borrow_mut(|spare| *spare = Some(cctx));
    }
}

/// The largest function (in Cranelift instructions) whose context a thread keeps.
const KEEP_CONTEXT_INSTS: usize = 20_000;

/// Simplifies the stitched function's control flow and data flow, in linear passes:
/// - **jump threading**: an edge into a block that holds nothing but a jump goes straight
///   to that jump's target (with the arguments substituted), and the block goes;
/// - **merging**: a block whose only predecessor ends in an unconditional jump to it moves
///   into that predecessor, its parameters becoming aliases of the jump's arguments;
/// - **dead parameters**: a block parameter that no instruction reads, other than to pass
///   it on to parameters that are themselves dead, goes, with the arguments every edge
///   passes for it;
/// - **rotation**: a jump into a small block that ends in a conditional branch (a loop's
///   head: its test) becomes a copy of that block (see `duplicate_tests`), so a loop
///   whose body jumped back to its test now branches back to itself, one taken branch an
///   iteration instead of two;
/// - **constant sharing** within a block.
///
/// Stitching copies one template per static block, so straight-line code, static branches
/// and region-entry and promotion glue arrive as chains of small blocks passing every live
/// value along; afterwards a path that runs straight is one block, and only the values
/// (and the elements of local arrays) some later instruction reads cross a block boundary.
pub fn simplify_cfg(func: &mut ir::Function) {
    thread_jumps(func);
    merge_jump_chains(func);
    duplicate_tests(func);
    drop_dead_params(func);
    share_constants(func);
}

/// The most instructions, besides its branch, a block copied into the blocks that jump to
/// it may have (`duplicate_tests`).
const TEST_COPY_LIMIT: usize = 4;

/// The rotation pass of [`simplify_cfg`] (tail duplication): a block `p` ending in `jump
/// h(args)` into another block `h` that ends in `brif`, with at most [`TEST_COPY_LIMIT`]
/// other instructions and no call, gets a copy of `h`'s instructions and branch in place
/// of the jump, with `h`'s parameters replaced by `args`. Sound because `p` runs `h` next
/// in any case, and `h` qualifies only if neither its parameters nor its results are read
/// outside it (so no other block depended on passing through `h`: its successors receive
/// everything through their parameters, which the copy passes too). A loop whose body
/// jumped back to its head now tests and branches back from the body itself; Cranelift
/// does not rotate loops, and in a loop of a few instructions the second taken branch
/// costs about as much as the body. Linear: one pass to find the values read outside
/// their block, one over the jumps; `h` may have become unreachable, which Cranelift
/// removes. (`h` is checked as it is when its jump is met, so a block that received a
/// copy may be copied in turn, within the limit.)
fn duplicate_tests(func: &mut ir::Function) {
    let home = |func: &ir::Function, v: ir::Value| match func.dfg.value_def(v) {
        ir::ValueDef::Param(b, _) => Some(b),
        ir::ValueDef::Result(i, _) => func.layout.inst_block(i),
        ir::ValueDef::Union(..) => None,
    };
    // Blocks some other block reads a parameter or a result of.
    let mut read_outside: EntitySet<ir::Block> = EntitySet::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                match home(func, v) {
                    Some(b) if b != block => {
                        read_outside.insert(b);
                    }
                    _ => {}
                }
            }
        }
    }
    let copyable = |func: &ir::Function, h: ir::Block| {
        let Some(last) = func.layout.last_inst(h) else {
            return false;
        };
        func.dfg.insts[last].opcode() == ir::Opcode::Brif
            && !read_outside.contains(h)
            && func.layout.block_insts(h).count() <= TEST_COPY_LIMIT + 1
            && func.layout.block_insts(h).all(|i| {
                let op = func.dfg.insts[i].opcode();
                i == last || !(op.is_call() || op.is_branch() || op.is_terminator())
            })
    };
    let blocks: Vec<ir::Block> = func.layout.blocks().collect();
    let mut map: HashMap<ir::Value, ir::Value> = HashMap::new();
    for p in blocks {
        let Some(jump) = func.layout.last_inst(p) else {
            continue;
        };
        if func.dfg.insts[jump].opcode() != ir::Opcode::Jump {
            continue;
        }
        let dfg = &func.dfg;
        let Some(dest) = dfg.insts[jump]
            .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
            .first()
            .copied()
        else {
            continue;
        };
        let h = dest.block(&dfg.value_lists);
        if h == p || !copyable(func, h) {
            continue;
        }
        map.clear();
        let args = dest.args(&dfg.value_lists).map(|a| a.as_value());
        for (&param, arg) in dfg.block_params(h).iter().zip(args) {
            match arg {
                Some(arg) => map.insert(param, dfg.resolve_aliases(arg)),
                None => break,
            };
        }
        if map.len() != dfg.block_params(h).len() {
            continue;
        }
        func.layout.remove_inst(jump);
        let insts: Vec<ir::Inst> = func.layout.block_insts(h).collect();
        for inst in insts {
            let copy = func.dfg.clone_inst(inst);
            // (Its operands, aliases resolved, in the order `overwrite_inst_values` takes.)
            let operands: Vec<ir::Value> = (func.dfg.inst_values(copy))
                .map(|v| {
                    let v = func.dfg.resolve_aliases(v);
                    map.get(&v).copied().unwrap_or(v)
                })
                .collect();
            func.dfg.overwrite_inst_values(copy, operands.into_iter());
            let (old, new) = (func.dfg.inst_results(inst), func.dfg.inst_results(copy));
            for (&o, &n) in old.iter().zip(new) {
                map.insert(o, n);
            }
            func.layout.append_inst(copy, p);
        }
    }
}

/// The dead-parameter pass of [`simplify_cfg`]: a work list from the parameters some
/// instruction reads backwards along the edges that feed them; what it never reaches is
/// dead. The entry block's parameters are the signature and stay.
fn drop_dead_params(func: &mut ir::Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    let dfg = &func.dfg;
    let is_param =
        |v: ir::Value| matches!(dfg.value_def(v), ir::ValueDef::Param(b, _) if b != entry);
    let mut live: EntitySet<ir::Value> = EntitySet::new();
    let mut work: Vec<ir::Value> = Vec::new();
    // The edges into each block, as (block, branch) sorted by block.
    let mut edges: Vec<(ir::Block, ir::Inst)> = Vec::new();
    let mut any_param = false;
    for block in func.layout.blocks() {
        any_param |= block != entry && !dfg.block_params(block).is_empty();
        for inst in func.layout.block_insts(block) {
            for &v in dfg.inst_args(inst) {
                let v = dfg.resolve_aliases(v);
                if is_param(v) && live.insert(v) {
                    work.push(v);
                }
            }
            for dest in dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables)
            {
                edges.push((dest.block(&dfg.value_lists), inst));
            }
        }
    }
    if !any_param {
        return;
    }
    edges.sort_unstable();
    edges.dedup();
    while let Some(p) = work.pop() {
        let ir::ValueDef::Param(block, k) = dfg.value_def(p) else {
            continue;
        };
        let from = edges.partition_point(|&(b, _)| b < block);
        for &(_, inst) in edges[from..].iter().take_while(|&&(b, _)| b == block) {
            for dest in dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables)
            {
                if dest.block(&dfg.value_lists) != block {
                    continue;
                }
                if let Some(a) = dest
                    .args(&dfg.value_lists)
                    .nth(k)
                    .and_then(|a| a.as_value())
                {
                    let a = dfg.resolve_aliases(a);
                    if is_param(a) && live.insert(a) {
                        work.push(a);
                    }
                }
            }
        }
    }
    // The dead parameters' positions, per block, last first.
    let mut dead: SecondaryMap<ir::Block, Vec<usize>> = SecondaryMap::new();
    dead.resize(func.dfg.num_blocks());
    let mut found = false;
    for block in func.layout.blocks() {
        if block == entry {
            continue;
        }
        for (k, &p) in dfg.block_params(block).iter().enumerate().rev() {
            if !live.contains(p) {
                dead[block].push(k);
                found = true;
            }
        }
    }
    if !found {
        return;
    }
    let blocks: Vec<ir::Block> = func.layout.blocks().collect();
    for &block in &blocks {
        let Some(term) = func.layout.last_inst(block) else {
            continue;
        };
        let dfg = &mut func.dfg;
        for dest in
            dfg.insts[term].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
        {
            for &k in &dead[dest.block(&dfg.value_lists)] {
                dest.remove(k, &mut dfg.value_lists);
            }
        }
    }
    for block in blocks {
        for &k in &dead[block] {
            let p = func.dfg.block_params(block)[k];
            func.dfg.remove_block_param(p);
        }
    }
}

/// After merging, a block may hold the same constant several times (one per block it was
/// made of, and the backend's own): later copies become aliases of the first.
fn share_constants(func: &mut ir::Function) {
    let mut seen: HashMap<(ir::Type, u64), ir::Value> = HashMap::new();
    let blocks: Vec<ir::Block> = func.layout.blocks().collect();
    for block in blocks {
        seen.clear();
        let mut next = func.layout.first_inst(block);
        while let Some(inst) = next {
            next = func.layout.next_inst(inst);
            let bits = match func.dfg.insts[inst] {
                ir::InstructionData::UnaryImm {
                    opcode: ir::Opcode::Iconst,
                    imm,
                } => imm.bits() as u64,
                ir::InstructionData::UnaryIeee64 {
                    opcode: ir::Opcode::F64const,
                    imm,
                } => imm.bits(),
                _ => continue,
            };
            let v = func.dfg.first_result(inst);
            let key = (func.dfg.value_type(v), bits);
            match seen.get(&key) {
                Some(&first) => {
                    func.layout.remove_inst(inst);
                    func.dfg.clear_results(inst);
                    func.dfg.change_to_alias(v, first);
                }
                None => {
                    seen.insert(key, v);
                }
            }
        }
    }
}

/// The jump-threading pass of [`simplify_cfg`]. Each lone jump's final destination (past
/// any further lone jumps, with the arguments composed) is found once, following a chain
/// and then composing backwards along it, so that every edge is rewritten once: linear in
/// the size of the function. A cycle of lone jumps (a loop doing nothing) is left alone.
fn thread_jumps(func: &mut ir::Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    // Blocks whose parameters some other block reads (a unit invariant: the executor's
    // unit's first copy receives it, and later copies read it there) stay: only their
    // own jump may stand for them.
    let mut read_elsewhere: EntitySet<ir::Block> = EntitySet::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let dfg = &func.dfg;
            let passed = dfg.insts[inst]
                .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
                .iter()
                .flat_map(|dest| dest.args(&dfg.value_lists))
                .filter_map(|a| a.as_value());
            for v in dfg.inst_args(inst).iter().copied().chain(passed) {
                if let ir::ValueDef::Param(b, _) = dfg.value_def(dfg.resolve_aliases(v)) {
                    if b != block {
                        read_elsewhere.insert(b);
                    }
                }
            }
        }
    }
    // Blocks that are a lone jump: the target and the jump's arguments (values only).
    let mut lone: SecondaryMap<ir::Block, Option<(ir::Block, Vec<ir::Value>)>> =
        SecondaryMap::new();
    lone.resize(func.dfg.num_blocks());
    let mut any = false;
    for block in func.layout.blocks() {
        if read_elsewhere.contains(block) {
            continue;
        }
        let Some(term) = func.layout.first_inst(block) else {
            continue;
        };
        let ir::InstructionData::Jump { destination, .. } = func.dfg.insts[term] else {
            continue;
        };
        let target = destination.block(&func.dfg.value_lists);
        let args: Option<Vec<ir::Value>> = destination
            .args(&func.dfg.value_lists)
            .map(|a| a.as_value())
            .collect();
        if block != entry && target != block {
            if let Some(args) = args {
                lone[block] = Some((target, args));
                any = true;
            }
        }
    }
    if !any {
        return;
    }
    // `args` (passed to `block`'s parameters) substituted into `values` (in terms of those
    // parameters and of values defined elsewhere).
    let substitute = |dfg: &ir::DataFlowGraph,
                      block: ir::Block,
                      args: &[ir::Value],
                      values: &[ir::Value]|
     -> Vec<ir::Value> {
        values
            .iter()
            .map(|&v| match dfg.value_def(v) {
                ir::ValueDef::Param(b, k) if b == block => args[k],
                _ => v,
            })
            .collect()
    };
    // Resolve every lone block's final destination: 0 = not yet, 1 = on the current chain,
    // 2 = resolved (`lone` then holds the final destination).
    let mut state: SecondaryMap<ir::Block, u8> = SecondaryMap::new();
    state.resize(func.dfg.num_blocks());
    let blocks: Vec<ir::Block> = func.layout.blocks().collect();
    let mut chain = Vec::new();
    for &start in &blocks {
        if lone[start].is_none() || state[start] != 0 {
            continue;
        }
        let mut b = start;
        while let Some((t, _)) = lone[b] {
            if state[b] != 0 {
                break;
            }
            state[b] = 1;
            chain.push(b);
            b = t;
        }
        // `b` ends the chain: not lone, resolved, or on the chain (a cycle, which stops
        // the composing there).
        let stop = (state[b] == 1).then_some(b);
        while let Some(x) = chain.pop() {
            state[x] = 2;
            let (t, ref args) = *lone[x].as_ref().expect("lone");
            if Some(t) == stop || Some(x) == stop {
                continue;
            }
            if let Some((final_t, ref through)) = lone[t] {
                let composed = substitute(&func.dfg, t, args, through);
                lone[x] = Some((final_t, composed));
            }
        }
    }
    let mut threaded = false;
    let mut new: Vec<Option<(ir::Block, Vec<ir::Value>)>> = Vec::new();
    for &block in &blocks {
        let Some(term) = func.layout.last_inst(block) else {
            continue;
        };
        let dfg = &func.dfg;
        new.clear();
        for dest in dfg.insts[term].branch_destination(&dfg.jump_tables, &dfg.exception_tables) {
            let b = dest.block(&dfg.value_lists);
            new.push(lone[b].as_ref().and_then(|(target, through)| {
                let args: Vec<ir::Value> = dest
                    .args(&dfg.value_lists)
                    .map(|a| a.as_value())
                    .collect::<Option<_>>()?;
                Some((*target, substitute(dfg, b, &args, through)))
            }));
        }
        if new.iter().all(Option::is_none) {
            continue;
        }
        threaded = true;
        let dfg = &mut func.dfg;
        let dests =
            dfg.insts[term].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables);
        for (dest, n) in dests.iter_mut().zip(new.drain(..)) {
            if let Some((target, args)) = n {
                *dest = ir::BlockCall::new(
                    target,
                    args.into_iter().map(ir::BlockArg::from),
                    &mut dfg.value_lists,
                );
            }
        }
    }
    if !threaded {
        return;
    }
    let mut referenced: EntitySet<ir::Block> = EntitySet::new();
    for &block in &blocks {
        for d in successors(func, block) {
            referenced.insert(d);
        }
    }
    for block in blocks {
        if lone[block].is_some() && !referenced.contains(block) {
            let term = func.layout.first_inst(block).expect("a jump");
            func.layout.remove_inst(term);
            func.layout.remove_block(block);
        }
    }
}

/// The blocks `block`'s terminator branches to (with repeats).
fn successors(func: &ir::Function, block: ir::Block) -> impl Iterator<Item = ir::Block> + '_ {
    let dfg = &func.dfg;
    func.layout
        .last_inst(block)
        .into_iter()
        .flat_map(|term| {
            dfg.insts[term].branch_destination(&dfg.jump_tables, &dfg.exception_tables)
        })
        .map(|dest| dest.block(&dfg.value_lists))
}

/// The merging pass of [`simplify_cfg`].
fn merge_jump_chains(func: &mut ir::Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    let mut preds: SecondaryMap<ir::Block, u32> = SecondaryMap::new();
    preds.resize(func.dfg.num_blocks());
    for block in func.layout.blocks() {
        for d in successors(func, block) {
            preds[d] += 1;
        }
    }
    // The blocks reachable from the entry, in depth-first preorder (only those merge: in
    // an unreachable cycle a block may pass its own parameter).
    let mut reached: EntitySet<ir::Block> = EntitySet::new();
    let mut blocks = Vec::new();
    let mut stack = vec![entry];
    reached.insert(entry);
    while let Some(block) = stack.pop() {
        blocks.push(block);
        for d in successors(func, block) {
            if reached.insert(d) {
                stack.push(d);
            }
        }
    }
    for a in blocks {
        if !func.layout.is_block_inserted(a) {
            continue;
        }
        while let Some(term) = func.layout.last_inst(a) {
            let ir::InstructionData::Jump { destination, .. } = func.dfg.insts[term] else {
                break;
            };
            let b = destination.block(&func.dfg.value_lists);
            if b == a || b == entry || preds[b] != 1 {
                break;
            }
            let args: Vec<ir::Value> = destination
                .args(&func.dfg.value_lists)
                .map(|arg| arg.as_value().expect("jump arguments are values"))
                .collect();
            let params = func.dfg.block_params(b).to_vec();
            func.layout.remove_inst(term);
            func.dfg.detach_block_params(b);
            for (p, v) in params.into_iter().zip(args) {
                func.dfg.change_to_alias(p, v);
            }
            while let Some(inst) = func.layout.first_inst(b) {
                func.layout.remove_inst(inst);
                func.layout.append_inst(inst, a);
            }
            func.layout.remove_block(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::{FVal, Fold};
    use crate::template::Emitter;
    use cranelift_codegen::ir::{Function, UserFuncName};
    use cranelift_frontend::FunctionBuilderContext;

    /// The parameters of block `b`.
    fn params<E: Emitter>(em: &mut E, b: E::Block) -> Vec<E::Value> {
        let mut out = Vec::new();
        em.block_params(b, &mut out);
        out
    }

    /// Hooks for emitting without a runtime.
    struct NoRuntime;
    impl Hooks for NoRuntime {
        fn fault_site(&mut self, _: FaultKind, _: SrcLoc) -> u64 {
            0
        }
        fn func_ref(&mut self, _: &mut ir::Function, _: u32) -> Option<FuncRef> {
            None
        }
        fn host_index(&self, _: u32) -> Option<u32> {
            None
        }
        fn host_call(&mut self, _: &mut ir::Function) -> FuncRef {
            unreachable!()
        }
        fn promote(&mut self, _: &mut ir::Function) -> FuncRef {
            unreachable!()
        }
        fn inline_cache(&mut self, _: u32) -> Option<u64> {
            None
        }
        fn fmod(&mut self, _: &mut ir::Function) -> FuncRef {
            unreachable!()
        }
    }

    /// The host ISA's front-end configuration, which finishing a function needs.
    fn frontend_config() -> cranelift_codegen::isa::TargetFrontendConfig {
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        let isa = cranelift_native::builder().expect("host ISA").finish(flags);
        isa.expect("ISA").frontend_config()
    }

    /// Emits a unit with inputs `tys` through `body` (which gets the emitter and the
    /// inputs, and must end its block) and returns the Cranelift IR as text.
    fn emit(tys: &[Type], body: impl FnOnce(&mut Fold<ClifEmitter>, Vec<FVal<CVal>>)) -> String {
        let mut func = Function::with_name_signature(UserFuncName::user(0, 0), unit_signature(tys));
        let mut fctx = FunctionBuilderContext::new();
        let mut hooks = NoRuntime;
        {
            let b = FunctionBuilder::new(&mut func, &mut fctx);
            let slices = vec![Some((0x1000, 4, Scalar::I64))];
            let em = ClifEmitter::new(b, &mut hooks, ClifOptions::default(), slices, tys);
            let mut em = Fold::new(em, vec![Some(4)]);
            let first = em.create_block(tys);
            em.switch_to_block(first);
            let inputs = params(&mut em, first);
            body(&mut em, inputs);
            em.backend.finish(first, frontend_config());
        }
        func.display().to_string()
    }

    const I64: Type = Type::Scalar(Scalar::I64);

    #[test]
    fn parameters_only_passed_around_a_loop_are_dropped() {
        // entry(x): jump b1(x, 7)
        // b1(p, q): brif p, b2(p, q), b3(q)
        // b2(r, s): jump b1(r - 1, s)
        // b3(t):    return p
        let mut sig = ir::Signature::new(cranelift_codegen::isa::CallConv::SystemV);
        sig.params.push(ir::AbiParam::new(types::I64));
        sig.returns.push(ir::AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::user(0, 0), sig);
        let (b1, b2, b3);
        {
            let mut fctx = FunctionBuilderContext::new();
            let mut b = FunctionBuilder::new(&mut func, &mut fctx);
            let entry = b.create_block();
            b1 = b.create_block();
            b2 = b.create_block();
            b3 = b.create_block();
            b.append_block_params_for_function_params(entry);
            for (block, n) in [(b1, 2), (b2, 2), (b3, 1)] {
                for _ in 0..n {
                    b.append_block_param(block, types::I64);
                }
            }
            b.switch_to_block(entry);
            let x = b.block_params(entry)[0];
            let seven = b.ins().iconst(types::I64, 7);
            b.ins().jump(b1, &[x.into(), seven.into()]);
            b.switch_to_block(b1);
            let (p, q) = (b.block_params(b1)[0], b.block_params(b1)[1]);
            b.ins().brif(p, b2, &[p.into(), q.into()], b3, &[q.into()]);
            b.switch_to_block(b2);
            let (r, s) = (b.block_params(b2)[0], b.block_params(b2)[1]);
            let r1 = b.ins().iadd_imm_s(r, -1);
            b.ins().jump(b1, &[r1.into(), s.into()]);
            b.switch_to_block(b3);
            b.ins().return_(&[p]);
            b.seal_all_blocks();
            b.finalize(frontend_config());
        }
        simplify_cfg(&mut func);
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verify_function(&func, &flags).expect("valid after simplifying");
        let params = |b| func.dfg.block_params(b).len();
        assert_eq!(
            (params(b1), params(b2), params(b3)),
            (1, 1, 0),
            "{}",
            func.display()
        );
        // `b3` reads `b1`'s parameter: `b1` is not copied into `b2`.
        let last = |b| func.dfg.insts[func.layout.last_inst(b).expect("a branch")].opcode();
        assert_eq!(last(b2), ir::Opcode::Jump, "{}", func.display());
    }

    /// A loop whose body jumps back to its test: the test is copied into the body (and into
    /// the entry, which jumped to it too), so the body branches back to itself; the
    /// function still verifies, and the test block is left with no predecessor.
    #[test]
    fn a_loops_test_is_copied_into_the_blocks_that_jump_to_it() {
        // entry(n):      jump b1(0, 0, n)
        // b1(i, a, m):   c = i < m; brif c, b2(i, a, m), b3(a)
        // b2(j, s, k):   jump b1(j + 1, s + j, k)
        // b3(r):         return r
        let mut sig = ir::Signature::new(cranelift_codegen::isa::CallConv::SystemV);
        sig.params.push(ir::AbiParam::new(types::I64));
        sig.returns.push(ir::AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::user(0, 0), sig);
        let (entry, b1, b2, b3);
        {
            let mut fctx = FunctionBuilderContext::new();
            let mut b = FunctionBuilder::new(&mut func, &mut fctx);
            entry = b.create_block();
            b1 = b.create_block();
            b2 = b.create_block();
            b3 = b.create_block();
            b.append_block_params_for_function_params(entry);
            for (block, n) in [(b1, 3), (b2, 3), (b3, 1)] {
                for _ in 0..n {
                    b.append_block_param(block, types::I64);
                }
            }
            b.switch_to_block(entry);
            let n = b.block_params(entry)[0];
            let zero = b.ins().iconst(types::I64, 0);
            b.ins().jump(b1, &[zero.into(), zero.into(), n.into()]);
            b.switch_to_block(b1);
            let [i, a, m] = [0, 1, 2].map(|k| b.block_params(b1)[k]);
            let c = b.ins().icmp(IntCC::SignedLessThan, i, m);
            b.ins()
                .brif(c, b2, &[i.into(), a.into(), m.into()], b3, &[a.into()]);
            b.switch_to_block(b2);
            let [j, s, k] = [0, 1, 2].map(|x| b.block_params(b2)[x]);
            let j1 = b.ins().iadd_imm_s(j, 1);
            let s1 = b.ins().iadd(s, j);
            b.ins().jump(b1, &[j1.into(), s1.into(), k.into()]);
            b.switch_to_block(b3);
            let r = b.block_params(b3)[0];
            b.ins().return_(&[r]);
            b.seal_all_blocks();
            b.finalize(frontend_config());
        }
        simplify_cfg(&mut func);
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verify_function(&func, &flags).expect("valid after rotating");
        let last = |b| func.dfg.insts[func.layout.last_inst(b).expect("a branch")].opcode();
        assert_eq!(
            (last(entry), last(b2)),
            (ir::Opcode::Brif, ir::Opcode::Brif)
        );
        // The body branches back to itself, and no block branches to the test any more.
        let targets = |b: ir::Block| -> Vec<ir::Block> {
            let t = func.layout.last_inst(b).expect("a branch");
            let dfg = &func.dfg;
            (dfg.insts[t].branch_destination(&dfg.jump_tables, &dfg.exception_tables))
                .iter()
                .map(|d| d.block(&dfg.value_lists))
                .collect()
        };
        assert!(targets(b2).contains(&b2), "{}", func.display());
        assert!(
            [entry, b2].iter().all(|&b| !targets(b).contains(&b1)),
            "{}",
            func.display()
        );
    }

    #[test]
    fn constants_fold_and_faults_do_not() {
        let ir = emit(&[], |em, _| {
            let a = em.constant(Const::Int(Scalar::I64, 20));
            let b = em.constant(Const::Int(Scalar::I64, 22));
            let s = em
                .op(&TOp::Binary(BinaryOp::Add), &[a, b], SrcLoc::default())
                .unwrap();
            assert!(matches!(s, FVal::Const(Const::Int(_, 42))));
            em.ret(Some(s));
        });
        assert!(!ir.contains("iadd"), "{ir}");
        // Division by a constant zero stays, to fault when it runs.
        let ir = emit(&[], |em, _| {
            let a = em.constant(Const::Int(Scalar::I64, 1));
            let z = em.constant(Const::Int(Scalar::I64, 0));
            let q = em
                .op(&TOp::Binary(BinaryOp::Div), &[a, z], SrcLoc::default())
                .unwrap();
            em.ret(Some(q));
        });
        assert!(ir.contains("sdiv"), "{ir}");
    }

    #[test]
    fn multiplications_and_divisions_by_powers_of_two_become_shifts() {
        let ir = emit(&[I64, Type::Scalar(Scalar::U32)], |em, xs| {
            let eight = em.constant(Const::Int(Scalar::I64, 8));
            let m = em
                .op(
                    &TOp::Binary(BinaryOp::Mul),
                    &[xs[0], eight],
                    SrcLoc::default(),
                )
                .unwrap();
            let sixteen = em.constant(Const::Int(Scalar::U32, 16));
            let d = em
                .op(
                    &TOp::Binary(BinaryOp::Div),
                    &[xs[1], sixteen],
                    SrcLoc::default(),
                )
                .unwrap();
            let r = em
                .op(
                    &TOp::Binary(BinaryOp::Rem),
                    &[xs[1], sixteen],
                    SrcLoc::default(),
                )
                .unwrap();
            let one = em.constant(Const::Int(Scalar::I64, 1));
            let same = em
                .op(&TOp::Binary(BinaryOp::Mul), &[m, one], SrcLoc::default())
                .unwrap();
            let d64 = em
                .op(&TOp::Cast(Scalar::I64), &[d], SrcLoc::default())
                .unwrap();
            let r64 = em
                .op(&TOp::Cast(Scalar::I64), &[r], SrcLoc::default())
                .unwrap();
            let s = em
                .op(&TOp::Binary(BinaryOp::Add), &[same, d64], SrcLoc::default())
                .unwrap();
            let s = em
                .op(&TOp::Binary(BinaryOp::Add), &[s, r64], SrcLoc::default())
                .unwrap();
            em.ret(Some(s));
        });
        assert!(
            !ir.contains("imul") && !ir.contains("udiv") && !ir.contains("urem"),
            "{ir}"
        );
        assert!(
            ir.contains("ishl") && ir.contains("ushr") && ir.contains("band"),
            "{ir}"
        );
    }

    #[test]
    fn branches_on_constants_become_jumps() {
        let ir = emit(&[I64], |em, xs| {
            let t = em.create_block(&[I64]);
            let e = em.create_block(&[I64]);
            let c = em.constant(Const::Bool(false));
            em.brif(c, (t, &[xs[0]]), (e, &[xs[0]]));
            for b in [t, e] {
                em.switch_to_block(b);
                let p = params(em, b)[0];
                em.ret(Some(p));
            }
        });
        assert!(!ir.contains("brif"), "{ir}");
    }

    #[test]
    fn bounds_checks_of_constant_indices_into_static_slices_fold() {
        let slice = Type::Slice {
            elem: Scalar::I64,
            mutable: false,
        };
        let ir = emit(&[], |em, _| {
            let s = em.static_slice(0, slice);
            let i = em.constant(Const::Int(Scalar::I64, 3));
            let v = em.op(&TOp::Load, &[s, i], SrcLoc::default()).unwrap();
            em.ret(Some(v));
        });
        assert!(!ir.contains("icmp"), "{ir}");
        // Out of the static length: the check stays (and always faults).
        let ir = emit(&[], |em, _| {
            let s = em.static_slice(0, slice);
            let i = em.constant(Const::Int(Scalar::I64, 4));
            let v = em.op(&TOp::Load, &[s, i], SrcLoc::default()).unwrap();
            em.ret(Some(v));
        });
        assert!(ir.contains("icmp"), "{ir}");
    }

    /// A stack machine's pop and push, recorded: `s[i]` read in the entry, written in the
    /// block that the entry's branch alone enters (`once`), and read in a block that both
    /// enter (`join`).
    fn pop_push<E: Emitter>(em: &mut E) -> E::Block {
        let slice = Type::Slice {
            elem: Scalar::I64,
            mutable: true,
        };
        let loc = SrcLoc::default();
        let entry = em.create_block(&[slice, I64]);
        let once = em.create_block(&[slice, I64, I64]);
        let join = em.create_block(&[slice, I64]);
        em.switch_to_block(entry);
        let p = params(em, entry);
        let x = em.op(&TOp::Load, &p, loc).unwrap();
        em.brif(x, (once, &[p[0], p[1], x]), (join, &p));
        em.switch_to_block(once);
        let q = params(em, once);
        em.op(&TOp::Store, &q, loc);
        em.jump(join, &q[..2]);
        em.switch_to_block(join);
        let r = params(em, join);
        let y = em.op(&TOp::Load, &r, loc).unwrap();
        em.ret(Some(y));
        entry
    }

    /// A bounds check made in a block carries along the only edge into another (as the
    /// recording tells the fold layer), and not along an edge into a block that another
    /// edge enters too: `pop_push` checks in the entry and in `join`, not in `once`.
    #[test]
    fn a_check_carries_along_the_only_edge_into_a_block() {
        let mut tape = crate::tape::Tape::default();
        pop_push(&mut tape);
        let mut shape = crate::params::Shape::default();
        tape.shape(&mut shape);
        let slice = Type::Slice {
            elem: Scalar::I64,
            mutable: true,
        };
        let tys = [slice, I64];
        // The recording replayed, with what it found or (every access checked) without.
        let replayed = |known: Option<crate::params::Known>| {
            let mut func =
                Function::with_name_signature(UserFuncName::user(0, 0), unit_signature(&tys));
            let mut fctx = FunctionBuilderContext::new();
            let mut hooks = NoRuntime;
            {
                let b = FunctionBuilder::new(&mut func, &mut fctx);
                let em = ClifEmitter::new(b, &mut hooks, ClifOptions::default(), vec![], &tys);
                let mut em = Fold::new(em, vec![]);
                if let Some(known) = known {
                    em.set_constant_params(known);
                }
                let entry = tape.replay(&mut em).expect("replays");
                em.backend.finish(entry, frontend_config());
            }
            func.display().to_string()
        };
        let ir = replayed(Some(shape.solve()));
        assert_eq!(ir.matches("icmp uge").count(), 2, "{ir}");
        let ir = replayed(None);
        assert_eq!(ir.matches("icmp uge").count(), 3, "{ir}");
    }
}

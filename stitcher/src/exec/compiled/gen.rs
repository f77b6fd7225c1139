//! The Cranelift code of a compiled generating extension (see the parent module).
//!
//! One function: an entry that sets every slot empty and goes to the first step of the
//! tree of the root it is given, and one block of code per step of the plan. The
//! decisions `Spec` takes per copy from the plan are taken here once: which edges fuse
//! (`Spec::fuses`: the next step, past the arm the edge's static branch selects, stitches
//! the edge's target), which edges go to roots, what each block binds and passes.

use std::collections::HashSet;

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    self, types, AbiParam, InstBuilder, MemFlagsData, Signature, UserFuncName, Value,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};

use dyc_templates::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use dyc_templates::types::{Scalar, Type};

use super::{
    CompiledGe, Layout, NONE, OPS_EXCEEDED, SETUP_FAILED, SETUP_FAULT, TAG_BOOL, TAG_I64,
    TAG_SLICE, UNSET,
};
use crate::ge::{
    Block, Edge, Fast, Op, Operand, Param, Plan, Reg, SetupOp, Step, StitchProgram, Term,
};

/// The shims, by their place in [`super::Shims`].
#[derive(Clone, Copy)]
enum Shim {
    Stat = 0,
    Setup,
    Op,
    Enter,
    Create,
    Root,
    Jump,
    Brif,
    Ret,
    Trap,
    ArrayLoad,
    ArrayStore,
    Keep,
    Count,
    Dispatch,
    Stub,
    Stubs,
    Case,
    Switch,
    Home,
    HomeOp,
}

/// Offsets of [`Head`]'s fields.
mod head {
    use super::super::Head;
    pub const RT: i32 = std::mem::offset_of!(Head, rt) as i32;
    pub const SLICES: i32 = std::mem::offset_of!(Head, slices) as i32;
    pub const NSLICES: i32 = std::mem::offset_of!(Head, nslices) as i32;
    pub const SHIMS: i32 = std::mem::offset_of!(Head, shims) as i32;
}

/// Programs with more registers or array elements than this are not compiled (their
/// frame offsets must fit the code's 32-bit displacements).
const MAX_REGS: usize = 1 << 20;

/// Programs whose plan has more steps, or more operations in all, than these are not
/// compiled: the function's size is about proportional to both, and compiling it is
/// paid by the program's first specialization in the stitch tier.
const MAX_STEPS: usize = 512;
const MAX_OPS: usize = 4096;

/// Compiles `prog`'s plan for `isa` (x86-64 only), or `None` when the program has no plan
/// or is too large.
pub(crate) fn compile(prog: &StitchProgram, isa: &dyn TargetIsa) -> Option<CompiledGe> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let plan = prog.plan.as_ref()?;
    let ops: usize = prog.blocks.values().map(|d| d.ops.len()).sum();
    if plan.steps.len() > MAX_STEPS || ops > MAX_OPS {
        return None;
    }
    let regs = prog.header.num_regs as usize;
    if regs > MAX_REGS {
        return None;
    }
    let (arrays, pool) = arrays(prog)?;
    if pool > MAX_REGS {
        return None;
    }
    let (mut buf, mut key) = (0usize, 0usize);
    for b in prog.blocks.keys() {
        let lay = prog.layout(b);
        buf = buf.max(Type::flatten(lay.input_types.iter().copied()).len());
        buf = buf.max(Type::flatten(lay.copy_types.iter().copied()).len());
        key = key.max(lay.key_regs.len());
        for op in &prog.blocks[b].ops {
            if let Op::Emit { args, .. } = op {
                buf = buf.max(args.len());
            }
        }
        for e in prog.blocks[b].term.edges() {
            let t = &prog.blocks[e.block];
            let tl = prog.layout(e.block);
            let live = |l: &[(Reg, Type)]| l.iter().map(|(_, t)| t.flat_len()).sum::<usize>();
            let live = live(&tl.copy_dyn_live_in).max(live(&tl.dispatch_live_in));
            buf = buf.max(e.args.len() + live);
            key = key.max(e.args.len() + t.static_live_in.len());
        }
    }
    let mut func = ir::Function::with_name_signature(UserFuncName::user(0, 0), {
        let mut sig = Signature::new(isa.default_call_conv());
        sig.params.push(AbiParam::new(types::I64));
        sig.params.extend([AbiParam::new(types::I32); 3]);
        sig.returns.push(AbiParam::new(types::I32));
        sig
    });
    let tags = known_tags(prog);
    let (buf, key) = (buf.max(1), key.max(1));
    let layout = Layout::new(regs, pool, buf, key, prog.blocks.len())?;
    let mut fctx = FunctionBuilderContext::new();
    {
        let b = FunctionBuilder::new(&mut func, &mut fctx);
        let mut g = Gen::new(prog, plan, &arrays, &tags, layout, b, isa);
        g.every_step()?;
        if g.bad || g.most_buf > buf || g.most_key > key {
            return None;
        }
        g.b.seal_all_blocks();
        g.b.finalize(isa.frontend_config());
    }
    let mut cctx = cranelift_codegen::Context::for_function(func);
    let code = cctx.compile(isa, &mut ControlPlane::default()).ok()?;
    if !code.buffer.relocs().is_empty() {
        return None;
    }
    let bytes = code.code_buffer().to_vec();
    let mut extent = crate::runtime::heap::alloc(bytes.len()).ok()?;
    extent.write_and_seal(&bytes).ok()?;
    let entry = extent.base() as usize;
    Some(CompiledGe {
        _code: extent,
        entry,
        layout,
        blocks: prog.blocks.len(),
        regs,
        arrays,
        tags,
        pool,
        buf,
        key,
    })
}

/// The tag ([`crate::ge::SVal::key_bits`]) of a static value of type `t`.
fn tag_of(t: Type) -> u8 {
    match t {
        Type::Scalar(s) => zero_bits(s).0,
        Type::Slice { .. } | Type::Array { .. } => TAG_SLICE,
    }
}

/// Per static register, the tag every value it can hold has, where the program's types
/// decide it ([`UNSET`] where they do not: a register of two types, or of a value the
/// program does not type, such as a pure host's result). A forward analysis to a fixed
/// point: the entry's static parameters take their parameters' types, a promoted
/// register its dynamic variable's, a block's static parameter the tags of the arguments
/// of every edge into it, and each setup operation the tag its operation gives its
/// operands' tags (a comparison a `bool`; arithmetic the tag of its operands when they
/// agree; a load from a static slice the element type shared by every static slice
/// parameter). The compiled code checks no tag it knows: it writes only well-typed
/// values into registers, and the driver checks the tags of every key it runs a tree
/// from, so a register only ever holds a value of its known tag.
fn known_tags(prog: &StitchProgram) -> Vec<u8> {
    #[derive(Clone, Copy, PartialEq)]
    enum T {
        None,
        One(u8),
        Many,
    }
    fn join(a: T, b: T) -> T {
        match (a, b) {
            (T::None, x) | (x, T::None) => x,
            (T::One(x), T::One(y)) if x == y => a,
            _ => T::Many,
        }
    }
    let n = prog.header.num_regs as usize;
    let mut tags = vec![T::None; n];
    let of = |t: Type| T::One(tag_of(t));
    let slices = prog
        .header
        .key_params
        .iter()
        .filter_map(|&k| match prog.header.param_types.get(k) {
            Some(&Type::Slice { elem, .. }) => Some(T::One(zero_bits(elem).0)),
            _ => None,
        })
        .fold(T::None, join);
    let slices = if slices == T::None { T::Many } else { slices };
    for &(r, c) in prog.constants() {
        if let Some(t) = tags.get_mut(r.index()) {
            *t = join(*t, T::One(crate::ge::SVal::Scalar(c).key_bits().0));
        }
    }
    let entry = &prog.blocks[prog.entry];
    let types = &prog.header.param_types;
    for (k, p) in entry.params.iter().enumerate() {
        if let Param::Static(r) = *p {
            let x = match entry.params.len() == types.len() {
                true => types.get(k).map_or(T::Many, |&ty| of(ty)),
                false => T::Many,
            };
            if let Some(t) = tags.get_mut(r.index()) {
                *t = join(*t, x);
            }
        }
    }
    let get = |tags: &[T], r: Reg| tags.get(r.index()).copied().unwrap_or(T::Many);
    loop {
        let mut changed = false;
        let mut set = |tags: &mut Vec<T>, r: Reg, x: T| {
            if let Some(t) = tags.get_mut(r.index()) {
                let j = join(*t, x);
                if j != *t {
                    *t = j;
                    changed = true;
                }
            }
        };
        for data in prog.blocks.values() {
            for &(src, dst) in &data.promote {
                let ty = data.dyn_inputs().find(|&(r, _)| r == src).map(|(_, t)| t);
                set(&mut tags, dst, ty.map_or(T::Many, of));
            }
            for op in &data.ops {
                let Op::Setup { dst, op, .. } = op else {
                    continue;
                };
                let same = |a: Reg, b: Reg| match (get(&tags, a), get(&tags, b)) {
                    (T::One(x), T::One(y)) if x == y => T::One(x),
                    (T::None, _) | (_, T::None) => T::None,
                    _ => T::Many,
                };
                let x = match *op {
                    SetupOp::Const(c) => T::One(crate::ge::SVal::Scalar(c).key_bits().0),
                    SetupOp::Copy(a) | SetupOp::Unary(_, a) => get(&tags, a),
                    SetupOp::Binary(_, a, b) | SetupOp::Select(_, a, b) => same(a, b),
                    SetupOp::Cmp(..) => T::One(TAG_BOOL),
                    SetupOp::Cast(t, _) => T::One(zero_bits(t).0),
                    SetupOp::Len(_) => T::One(TAG_I64),
                    SetupOp::StaticLoad(..) => slices,
                    SetupOp::CallPure { .. } => T::Many,
                };
                set(&mut tags, *dst, x);
            }
            for e in data.term.edges() {
                let tb = &prog.blocks[e.block];
                for (p, a) in tb.params.iter().zip(&e.args) {
                    if let (Param::Static(r), Operand::Static(src)) = (p, a) {
                        let x = get(&tags, *src);
                        set(&mut tags, *r, x);
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    tags.into_iter()
        .map(|t| match t {
            T::One(x) => x,
            T::None | T::Many => UNSET,
        })
        .collect()
}

/// Per register, where its local array's elements lie in the pool, how many there are
/// and their type; and the pool's size. `None` if a register is an array of two lengths.
#[allow(clippy::type_complexity)]
fn arrays(prog: &StitchProgram) -> Option<(Vec<Option<(u32, u32, Scalar)>>, usize)> {
    let mut shape: Vec<Option<(u32, Scalar)>> = vec![None; prog.header.num_regs as usize];
    let mut note = |r: Reg, len: u32, elem: Scalar| -> Option<()> {
        let s = shape.get_mut(r.index())?;
        match *s {
            None => *s = Some((len, elem)),
            Some(x) if x == (len, elem) => {}
            Some(_) => return None,
        }
        Some(())
    };
    for b in prog.blocks.keys() {
        let data = &prog.blocks[b];
        for p in &data.params {
            if let Param::Dyn(r, Type::Array { elem, len }) = *p {
                note(r, len, elem)?;
            }
        }
        for &(r, t) in &data.dyn_live_in {
            if let Type::Array { elem, len } = t {
                note(r, len, elem)?;
            }
        }
        for op in &data.ops {
            if let Op::ArrayNew { dst, elem, len } = *op {
                note(dst, len, elem)?;
            }
        }
        let lay = prog.layout(b);
        for &(r, t) in lay.dyn_inputs.iter().chain(&lay.copy_dyn_live_in) {
            if let Type::Array { elem, len } = t {
                note(r, len, elem)?;
            }
        }
    }
    // (A local array in memory is a dynamic value, the array, not elements in the pool.)
    for h in prog.all_homes() {
        if let Some(s) = shape.get_mut(h.reg.index()) {
            *s = None;
        }
    }
    let mut pool = 0u32;
    let arrays = shape
        .into_iter()
        .map(|s| {
            s.map(|(len, elem)| {
                let at = pool;
                pool = pool.saturating_add(len);
                (at, len, elem)
            })
        })
        .collect();
    Some((arrays, pool as usize))
}

struct Gen<'a, 'f> {
    prog: &'a StitchProgram,
    plan: &'a Plan,
    arrays: &'a [Option<(u32, u32, Scalar)>],
    b: FunctionBuilder<'f>,
    /// Signatures of shims taking `k` words besides the context.
    sigs: Vec<ir::SigRef>,
    /// The frame's address (the function's first parameter) and where its parts lie.
    fr: Value,
    o: Layout,
    first: Value,
    /// The arm the last static branch took; the block fused into the current copy; the
    /// copy being filled.
    taken: Variable,
    fused: Variable,
    cur: Variable,
    steps: Vec<ir::Block>,
    abort: ir::Block,
    /// Where the block being stitched ends (the next step).
    end: ir::Block,
    /// The most values the code writes to a buffer and reads from the first, and the
    /// most key values it writes (checked against the frame's sizes: the code never
    /// reaches past them).
    most_buf: usize,
    most_key: usize,
    /// A register past the program's count was met: the program is refused.
    bad: bool,
    /// Per static register, its tag where the program's types decide it ([`known_tags`]).
    tags: &'a [u8],
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

impl<'a, 'f> Gen<'a, 'f> {
    fn new(
        prog: &'a StitchProgram,
        plan: &'a Plan,
        arrays: &'a [Option<(u32, u32, Scalar)>],
        tags: &'a [u8],
        o: Layout,
        mut b: FunctionBuilder<'f>,
        isa: &dyn TargetIsa,
    ) -> Gen<'a, 'f> {
        let sigs = (0..6)
            .map(|k| {
                let mut sig = Signature::new(isa.default_call_conv());
                sig.params
                    .extend(std::iter::repeat_n(AbiParam::new(types::I64), k + 1));
                sig.returns.push(AbiParam::new(types::I64));
                b.import_signature(sig)
            })
            .collect();
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let p = b.block_params(entry).to_vec();
        let fr = p[0];
        let none = b.ins().iconst(types::I64, i64::from(NONE));
        let mut var = |init: Value| {
            let v = b.declare_var(types::I64);
            b.def_var(v, init);
            v
        };
        let (taken, fused, cur) = (var(none), var(none), var(none));
        let steps = plan.steps.iter().map(|_| b.create_block()).collect();
        let abort = b.create_block();
        Gen {
            prog,
            plan,
            arrays,
            tags,
            b,
            sigs,
            fr,
            o,
            first: p[3],
            taken,
            fused,
            cur,
            steps,
            abort,
            end: abort,
            most_buf: 0,
            most_key: 0,
            bad: false,
        }
        .dispatch(p[1], p[2])
    }

    /// The entry's dispatch on the root: its slot holds the copy `res`, and its tree's
    /// first step follows.
    fn dispatch(mut self, root: Value, res: Value) -> Self {
        let res = self.b.ins().uextend(types::I64, res);
        let mut sw = Switch::new();
        let mut inits = Vec::new();
        for (i, r) in self.plan.roots.iter().enumerate() {
            let Some((pc, _)) = *r else { continue };
            let Some(&step) = self.steps.get(pc as usize) else {
                continue;
            };
            let blk = self.b.create_block();
            sw.set_entry(i as u128, blk);
            inits.push((blk, i, step));
        }
        sw.emit(&mut self.b, root, self.abort);
        for (blk, i, step) in inits {
            self.b.switch_to_block(blk);
            self.set_slot(i, res);
            self.b.ins().jump(step, &[]);
        }
        self.b.switch_to_block(self.abort);
        let one = self.b.ins().iconst(types::I32, 1);
        self.b.ins().return_(&[one]);
        self
    }

    /// Block `b`'s copy in this run of the tree, and whether it was stitched (0 or 1).
    fn slot(&mut self, b: usize) -> Value {
        self.bad |= b >= self.prog.blocks.len();
        self.b
            .ins()
            .uload32(flags(), self.fr, self.o.slots + (8 * b) as i32)
    }

    fn set_slot(&mut self, b: usize, v: Value) {
        self.bad |= b >= self.prog.blocks.len();
        self.b
            .ins()
            .istore32(flags(), v, self.fr, self.o.slots + (8 * b) as i32);
    }

    fn stitched(&mut self, b: usize) -> Value {
        self.bad |= b >= self.prog.blocks.len();
        self.b
            .ins()
            .uload32(flags(), self.fr, self.o.slots + (8 * b + 4) as i32)
    }

    fn set_stitched(&mut self, b: usize, v: Value) {
        self.bad |= b >= self.prog.blocks.len();
        self.b
            .ins()
            .istore32(flags(), v, self.fr, self.o.slots + (8 * b + 4) as i32);
    }

    fn iconst(&mut self, x: u64) -> Value {
        self.b.ins().iconst(types::I64, x as i64)
    }

    fn call(&mut self, shim: Shim, args: &[Value]) -> Value {
        let f = self
            .b
            .ins()
            .load(types::I64, flags(), self.fr, head::SHIMS + 8 * shim as i32);
        let rt = self.b.ins().load(types::I64, flags(), self.fr, head::RT);
        let mut all = vec![rt];
        all.extend_from_slice(args);
        let call = self.b.ins().call_indirect(self.sigs[args.len()], f, &all);
        self.b.inst_results(call)[0]
    }

    /// Ends the current block with a jump to `to`.
    fn goto(&mut self, to: ir::Block) {
        self.b.ins().jump(to, &[]);
    }

    /// Goes on in a new block when `cond` is true, to `to` otherwise.
    fn check(&mut self, cond: Value, to: ir::Block) {
        let go = self.b.create_block();
        self.b.ins().brif(cond, go, &[], to, &[]);
        self.b.switch_to_block(go);
    }

    /// Where register `r` lies in a frame of `size`-byte words (a register past the
    /// program's count makes the program refused).
    fn reg_off(&mut self, r: Reg, size: usize) -> i32 {
        if r.index() >= self.prog.header.num_regs as usize {
            self.bad = true;
        }
        (r.index() * size) as i32
    }

    /// Register `r`'s tag: a constant where it is known.
    fn tag(&mut self, r: Reg) -> Value {
        if let Some(t) = self.known(r) {
            return self.iconst(u64::from(t));
        }
        let off = self.o.st + self.reg_off(r, 1);
        self.b.ins().uload8(types::I64, flags(), self.fr, off)
    }

    fn known(&self, r: Reg) -> Option<u8> {
        self.tags.get(r.index()).copied().filter(|&t| t != UNSET)
    }

    /// Goes on when register `r`'s tag passes `test`, to `to` otherwise (decided here,
    /// with no code, where the tag is known).
    fn check_tag(&mut self, r: Reg, test: TagTest, to: ir::Block) {
        if let Some(t) = self.known(r) {
            if !test.holds(t) {
                self.goto(to);
                let dead = self.b.create_block();
                self.b.switch_to_block(dead);
            }
            return;
        }
        let t = self.tag(r);
        let ok = match test {
            TagTest::Is(x) => self.b.ins().icmp_imm_s(IntCC::Equal, t, i64::from(x)),
            TagTest::Int => self
                .b
                .ins()
                .icmp_imm_s(IntCC::UnsignedLessThanOrEqual, t, 7),
            TagTest::Set => self
                .b
                .ins()
                .icmp_imm_s(IntCC::NotEqual, t, i64::from(UNSET)),
        };
        self.check(ok, to);
    }

    fn bits(&mut self, r: Reg) -> Value {
        let off = self.o.s + self.reg_off(r, 8);
        self.b.ins().load(types::I64, flags(), self.fr, off)
    }

    fn set_s(&mut self, r: Reg, tag: Value, bits: Value) {
        let (o1, o8) = (
            self.o.st + self.reg_off(r, 1),
            self.o.s + self.reg_off(r, 8),
        );
        self.b.ins().istore8(flags(), tag, self.fr, o1);
        self.b.ins().store(flags(), bits, self.fr, o8);
    }

    fn copy_s(&mut self, dst: Reg, src: Reg) {
        let (t, w) = (self.tag(src), self.bits(src));
        self.set_s(dst, t, w);
    }

    fn get_d(&mut self, r: Reg) -> Value {
        let off = self.o.d + self.reg_off(r, 4);
        self.b.ins().uload32(flags(), self.fr, off)
    }

    fn set_d(&mut self, r: Reg, v: Value) {
        let off = self.o.d + self.reg_off(r, 4);
        self.b.ins().istore32(flags(), v, self.fr, off);
    }

    fn array(&self, r: Reg) -> Option<(u32, u32)> {
        self.arrays
            .get(r.index())
            .copied()
            .flatten()
            .map(|(o, n, _)| (o, n))
    }

    fn get_elem(&mut self, k: u32) -> Value {
        self.b
            .ins()
            .uload32(flags(), self.fr, self.o.a + (4 * k as usize) as i32)
    }

    fn set_elem(&mut self, k: u32, v: Value) {
        self.b
            .ins()
            .istore32(flags(), v, self.fr, self.o.a + (4 * k as usize) as i32);
    }

    /// `Spec::operand`: a dynamic variable's value, or a static one made a value.
    fn operand(&mut self, o: Operand) -> Value {
        match o {
            Operand::Dyn(r) => self.get_d(r),
            Operand::Static(r) => {
                let (t, w) = (self.tag(r), self.bits(r));
                self.call(Shim::Stat, &[t, w])
            }
        }
    }

    /// Where buffer `which` lies.
    fn buf_at(&self, which: usize) -> i32 {
        match which {
            0 => self.o.buf,
            _ => self.o.buf2,
        }
    }

    fn put(&mut self, which: usize, k: usize, v: Value) {
        let at = self.buf_at(which) + (4 * k) as i32;
        self.most_buf = self.most_buf.max(k + 1);
        self.b.ins().istore32(flags(), v, self.fr, at);
    }

    fn every_step(&mut self) -> Option<()> {
        let trees = self.trees();
        for pc in 0..self.plan.steps.len() {
            self.b.switch_to_block(self.steps[pc]);
            let next = self.steps.get(pc + 1).copied().unwrap_or(self.abort);
            match &self.plan.steps[pc] {
                Step::Stitch { block, test } => self.stitch_step(pc, *block, *test, next)?,
                Step::Fork { arms, .. } => {
                    let taken = self.b.use_var(self.taken);
                    let none = self.iconst(u64::from(NONE));
                    let is_none = self.b.ins().icmp(IntCC::Equal, taken, none);
                    let zero = self.iconst(0);
                    let k = self.b.ins().select(is_none, zero, taken);
                    let mut sw = Switch::new();
                    for (i, &arm) in arms.iter().enumerate() {
                        let to = self.steps.get(arm as usize).copied()?;
                        sw.set_entry(i as u128, to);
                    }
                    sw.emit(&mut self.b, k, self.abort);
                }
                Step::Goto(t) => {
                    let to = self.steps.get(*t as usize).copied()?;
                    self.goto(to);
                }
                Step::End => {
                    let fz = self.b.use_var(self.fused);
                    let none = self.iconst(u64::from(NONE));
                    let ok = self.b.ins().icmp(IntCC::Equal, fz, none);
                    self.check(ok, self.abort);
                    // Every copy an edge asked for in this run was stitched; the slots
                    // are left empty for the next run.
                    let blocks: Vec<usize> =
                        trees.get(&pc).into_iter().flatten().copied().collect();
                    for &b in &blocks {
                        let slot = self.slot(b);
                        let done = self.stitched(b);
                        let empty = self.b.ins().icmp(IntCC::Equal, slot, none);
                        let done = done_bool(&mut self.b, done);
                        let ok = self.b.ins().bor(empty, done);
                        self.check(ok, self.abort);
                    }
                    let zero = self.iconst(0);
                    for &b in &blocks {
                        self.set_slot(b, none);
                        self.set_stitched(b, zero);
                    }
                    let zero = self.b.ins().iconst(types::I32, 0);
                    self.b.ins().return_(&[zero]);
                }
            }
        }
        Some(())
    }

    /// Per `End` step, the blocks of the trees that reach it.
    fn trees(&self) -> std::collections::HashMap<usize, Vec<usize>> {
        let mut out: std::collections::HashMap<usize, HashSet<usize>> = Default::default();
        for r in self.plan.roots.iter().flatten() {
            let (mut seen, mut work, mut blocks, mut ends) = (
                HashSet::new(),
                vec![r.0 as usize],
                HashSet::new(),
                Vec::new(),
            );
            while let Some(pc) = work.pop() {
                if !seen.insert(pc) {
                    continue;
                }
                match self.plan.steps.get(pc) {
                    Some(Step::Stitch { block, .. }) => {
                        blocks.insert(block.index());
                        work.push(pc + 1);
                    }
                    Some(Step::Fork { arms, .. }) => work.extend(arms.iter().map(|&a| a as usize)),
                    Some(Step::Goto(t)) => work.push(*t as usize),
                    Some(Step::End) => ends.push(pc),
                    None => {}
                }
            }
            for e in ends {
                out.entry(e).or_default().extend(&blocks);
            }
        }
        out.into_iter()
            .map(|(k, v)| {
                let mut v: Vec<usize> = v.into_iter().collect();
                v.sort_unstable();
                (k, v)
            })
            .collect()
    }

    fn stitch_step(&mut self, pc: usize, bl: Block, test: bool, next: ir::Block) -> Option<()> {
        let prog = self.prog;
        let i = bl.index();
        if test {
            let t = self
                .b
                .ins()
                .load(types::I64, flags(), self.fr, self.o.counters + 8);
            let t = self.b.ins().iadd_imm_s(t, 1);
            self.b.ins().store(flags(), t, self.fr, self.o.counters + 8);
        }
        let none = self.iconst(u64::from(NONE));
        self.b.def_var(self.taken, none);
        let slot = self.slot(i);
        let done = self.stitched(i);
        let empty = self.b.ins().icmp(IntCC::Equal, slot, none);
        let done = done_bool(&mut self.b, done);
        let skip = self.b.ins().bor(empty, done);
        let body = self.b.create_block();
        self.b.ins().brif(skip, next, &[], body, &[]);
        self.b.switch_to_block(body);
        let one = self.iconst(1);
        self.set_stitched(i, one);
        // (The block being stitched, for the budget's error.)
        let iv = self.iconst(i as u64);
        self.b
            .ins()
            .store(flags(), iv, self.fr, self.o.counters + 24);
        let lay = prog.layout(bl);
        let root = self.plan.is_root(bl);
        // The fused copy goes on in the current block; any other starts its own and
        // binds its parameters (the unit's first copy all its inputs).
        let fz = self.b.use_var(self.fused);
        let this = self.iconst(i as u64);
        let is_fused = self.b.ins().icmp(IntCC::Equal, fz, this);
        let (fused_blk, own, ops) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(is_fused, fused_blk, &[], own, &[]);
        self.b.switch_to_block(fused_blk);
        self.b.def_var(self.fused, none);
        self.goto(ops);
        self.b.switch_to_block(own);
        let fz = self.b.use_var(self.fused);
        let ok = self.b.ins().icmp(IntCC::Equal, fz, none);
        self.check(ok, self.abort);
        self.call(Shim::Enter, &[slot]);
        self.b.def_var(self.cur, slot);
        let homes = !prog.all_homes().is_empty();
        if root && (lay.dyn_inputs != lay.copy_inputs || homes) {
            let (f, c) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(self.first, f, &[], c, &[]);
            self.b.switch_to_block(f);
            self.bind(&lay.dyn_inputs)?;
            // The unit's first copy makes the local arrays in memory: those among its
            // inputs from their elements (in `bind`), the others empty.
            for h in prog.all_homes() {
                if !lay.homes.iter().any(|i| i.reg == h.reg) {
                    let (rv, none) = (
                        self.iconst(h.reg.index() as u64),
                        self.iconst(u64::from(NONE)),
                    );
                    let a = self.call(Shim::Home, &[rv, none]);
                    self.set_d(h.reg, a);
                }
            }
            self.goto(ops);
            self.b.switch_to_block(c);
        }
        self.bind(&lay.copy_inputs)?;
        self.goto(ops);
        self.b.switch_to_block(ops);
        // The budget of operations, checked once per block.
        let n = lay.run.len() as i64;
        let c = self.o.counters;
        let o = self.b.ins().load(types::I64, flags(), self.fr, c);
        let o = self.b.ins().iadd_imm_s(o, n);
        let max = self.b.ins().load(types::I64, flags(), self.fr, c + 16);
        let ok = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, o, max);
        let (go, over) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(ok, go, &[], over, &[]);
        self.b.switch_to_block(over);
        let status = self.b.ins().iconst(types::I32, i64::from(OPS_EXCEEDED));
        self.b.ins().return_(&[status]);
        self.b.switch_to_block(go);
        self.b.ins().store(flags(), o, self.fr, c);
        if lay.first_loc.is_known() {
            self.b.ins().store(flags(), iv, self.fr, c + 32);
        }
        self.end = next;
        for (k, run) in lay.run.iter().enumerate() {
            self.op(bl, run.at, run.fast, lay.run.len() - k - 1)?;
        }
        if root && !lay.kept.is_empty() {
            let (k, after) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(self.first, k, &[], after, &[]);
            self.b.switch_to_block(k);
            for &r in &lay.kept {
                let v = self.get_d(r);
                let none = self.iconst(u64::from(NONE));
                let set = self.b.ins().icmp(IntCC::NotEqual, v, none);
                let (y, n) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(set, y, &[], n, &[]);
                self.b.switch_to_block(y);
                self.call(Shim::Keep, &[v]);
                self.goto(n);
                self.b.switch_to_block(n);
            }
            self.goto(after);
            self.b.switch_to_block(after);
        }
        self.term(pc, bl, next)
    }

    /// `Spec::bind`: the parameters in the buffer (a local array in memory, which only
    /// the unit's first copy receives, made from its elements).
    fn bind(&mut self, inputs: &[(Reg, Type)]) -> Option<()> {
        let mut next = 0;
        for &(r, ty) in inputs {
            match ty {
                // (Only the unit's first copy has a local array in memory as an input.)
                Type::Array { len, .. } if self.prog.home(r).is_some() => {
                    self.most_buf = self.most_buf.max(next + len as usize);
                    let (rv, at) = (self.iconst(r.index() as u64), self.iconst(next as u64));
                    let a = self.call(Shim::Home, &[rv, at]);
                    self.set_d(r, a);
                    next += len as usize;
                }
                Type::Array { len, .. } => {
                    let (at, n) = self.array(r)?;
                    if n != len {
                        return None;
                    }
                    self.most_buf = self.most_buf.max(next + len as usize);
                    for k in 0..len {
                        let v = self.b.ins().uload32(
                            flags(),
                            self.fr,
                            self.o.buf + (4 * (next + k as usize)) as i32,
                        );
                        self.set_elem(at + k, v);
                    }
                    next += len as usize;
                }
                _ => {
                    self.most_buf = self.most_buf.max(next + 1);
                    let v = self
                        .b
                        .ins()
                        .uload32(flags(), self.fr, self.o.buf + (4 * next) as i32);
                    self.set_d(r, v);
                    next += 1;
                }
            }
        }
        Some(())
    }

    /// Stitches operation `at` of block `bl`, which `rest` more operations follow.
    fn op(&mut self, bl: Block, at: u32, fast: Fast, rest: usize) -> Option<()> {
        let op = self.prog.blocks[bl].ops.get(at as usize)?;
        let general = self.b.create_block();
        let after = self.b.create_block();
        match fast {
            Fast::None | Fast::Binary { .. } => match self.setup(op, general) {
                true => self.goto(after),
                false => self.goto(general),
            },
            Fast::Load {
                dst, slice, index, ..
            } => {
                let r = self.slice_ref(slice, general);
                self.check_tag(index, TagTest::Int, general);
                let i = self.bits(index);
                let len = self.b.ins().load(types::I64, flags(), r, 8);
                let ok = self.b.ins().icmp(IntCC::UnsignedLessThan, i, len);
                self.check(ok, general);
                let p = self.b.ins().load(types::I64, flags(), r, 0);
                let off = self.b.ins().ishl_imm_u(i, 3);
                let p = self.b.ins().iadd(p, off);
                let v = self.b.ins().load(types::I64, flags(), p, 0);
                let t = match self.known(dst) {
                    Some(t) => self.iconst(u64::from(t)),
                    None => self.b.ins().load(types::I64, flags(), r, 16),
                };
                self.set_s(dst, t, v);
                self.goto(after);
            }
            // (The elements of a local array in memory are the emitter's: the general
            // operation.)
            Fast::Element { arr, .. } | Fast::SetElement { arr, .. }
                if self.prog.home(arr).is_some() =>
            {
                self.goto(general);
            }
            Fast::Element { dst, arr, index } => {
                let (base, len) = self.array(arr)?;
                let i = self.static_index(index, len, general);
                let v = self.elem_at(base, i);
                self.set_d(dst, v);
                self.goto(after);
            }
            Fast::SetElement { arr, index, value } => {
                let (base, len) = self.array(arr)?;
                let i = self.static_index(index, len, general);
                let v = self.operand(value);
                self.set_elem_at(base, i, v);
                self.goto(after);
            }
        }
        self.b.switch_to_block(general);
        let (bv, atv) = (self.iconst(bl.index() as u64), self.iconst(u64::from(at)));
        match op {
            Op::Setup { .. } => {
                let r = self.call(Shim::Setup, &[bv, atv]);
                let ok = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::NotEqual, r, SETUP_FAILED as i64);
                self.check(ok, self.abort);
                // A static fault ends the block: the operations after it are not run
                // (nor counted), nor is the terminator; the successors' slots stay empty.
                let fault = self.b.ins().icmp_imm_s(IntCC::Equal, r, SETUP_FAULT as i64);
                let (f, go) = (self.b.create_block(), self.b.create_block());
                self.b.ins().brif(fault, f, &[], go, &[]);
                self.b.switch_to_block(f);
                let c = self.o.counters;
                let o = self.b.ins().load(types::I64, flags(), self.fr, c);
                let o = self.b.ins().iadd_imm_s(o, -(rest as i64));
                self.b.ins().store(flags(), o, self.fr, c);
                self.goto(self.end);
                self.b.switch_to_block(go);
            }
            Op::Emit { dst, args, .. } => {
                for (k, &o) in args.iter().enumerate() {
                    let v = self.operand(o);
                    self.put(0, k, v);
                }
                let n = self.iconst(args.len() as u64);
                let r = self.call(Shim::Op, &[bv, atv, n]);
                if let Some(d) = dst {
                    self.set_d(*d, r);
                }
            }
            Op::Lift { dst, src } => {
                let v = self.operand(*src);
                self.set_d(*dst, v);
            }
            Op::ArrayNew { dst, .. } if self.prog.home(*dst).is_some() => {
                let zero = self.iconst(0);
                self.call(Shim::HomeOp, &[bv, atv, zero, zero]);
            }
            Op::ArrayLoad {
                dst, arr, index, ..
            } if self.prog.home(*arr).is_some() => {
                let i = self.operand(*index);
                let zero = self.iconst(0);
                let v = self.call(Shim::HomeOp, &[bv, atv, i, zero]);
                self.set_d(*dst, v);
            }
            Op::ArrayStore {
                arr, index, value, ..
            } if self.prog.home(*arr).is_some() => {
                let i = self.operand(*index);
                let v = self.operand(*value);
                self.call(Shim::HomeOp, &[bv, atv, i, v]);
            }
            Op::ArrayNew { dst, elem, len } => {
                let (base, n) = self.array(*dst)?;
                if n != *len {
                    return None;
                }
                let (t, w) = zero_bits(*elem);
                let (t, w) = (self.iconst(u64::from(t)), self.iconst(w));
                let z = self.call(Shim::Stat, &[t, w]);
                for k in 0..*len {
                    self.set_elem(base + k, z);
                }
            }
            Op::ArrayLoad { dst, index, .. } => {
                let i = self.operand(*index);
                let v = self.call(Shim::ArrayLoad, &[bv, atv, i]);
                self.set_d(*dst, v);
            }
            Op::ArrayStore { index, value, .. } => {
                let i = self.operand(*index);
                let v = self.operand(*value);
                self.call(Shim::ArrayStore, &[bv, atv, i, v]);
            }
        }
        self.goto(after);
        self.b.switch_to_block(after);
        Some(())
    }

    /// The setup operations other than [`Fast`]'s, natively where their operands have the
    /// types the code expects (`i64` for arithmetic and comparisons, `bool` for
    /// conditions), else by going to `general`. Emits nothing and returns `false` for an
    /// operation it does not take.
    fn setup(&mut self, op: &Op, general: ir::Block) -> bool {
        let &Op::Setup { dst, ref op, .. } = op else {
            return false;
        };
        match *op {
            SetupOp::Const(c) => {
                let (t, w) = crate::ge::SVal::Scalar(c).key_bits();
                let (t, w) = (self.iconst(u64::from(t)), self.iconst(w));
                self.set_s(dst, t, w);
            }
            SetupOp::Copy(a) => {
                self.check_tag(a, TagTest::Set, general);
                let t = self.tag(a);
                let w = self.bits(a);
                self.set_s(dst, t, w);
            }
            SetupOp::Cmp(o, a, b) => {
                let (x, y) = self.i64_operands(a, b, general);
                let cc = match o {
                    CmpOp::Eq => IntCC::Equal,
                    CmpOp::Ne => IntCC::NotEqual,
                    CmpOp::Lt => IntCC::SignedLessThan,
                    CmpOp::Le => IntCC::SignedLessThanOrEqual,
                    CmpOp::Gt => IntCC::SignedGreaterThan,
                    CmpOp::Ge => IntCC::SignedGreaterThanOrEqual,
                };
                let c = self.b.ins().icmp(cc, x, y);
                let c = self.b.ins().uextend(types::I64, c);
                let t = self.iconst(u64::from(TAG_BOOL));
                self.set_s(dst, t, c);
            }
            SetupOp::Binary(o, a, b) => {
                let (x, y) = self.i64_operands(a, b, general);
                let v = match o {
                    BinaryOp::Div | BinaryOp::Rem => {
                        // (A zero divisor faults and `MIN / -1` wraps: the general
                        // operation takes both.)
                        let z = self.b.ins().icmp_imm_s(IntCC::NotEqual, y, 0);
                        let m = self.b.ins().icmp_imm_s(IntCC::NotEqual, y, -1);
                        let ok = self.b.ins().band(z, m);
                        self.check(ok, general);
                        match o {
                            BinaryOp::Div => self.b.ins().sdiv(x, y),
                            _ => self.b.ins().srem(x, y),
                        }
                    }
                    // (Cranelift takes the amount modulo the width, as the language does.)
                    BinaryOp::Shl => self.b.ins().ishl(x, y),
                    BinaryOp::Shr => self.b.ins().sshr(x, y),
                    BinaryOp::Min => self.b.ins().smin(x, y),
                    BinaryOp::Max => self.b.ins().smax(x, y),
                    BinaryOp::Add => self.b.ins().iadd(x, y),
                    BinaryOp::Sub => self.b.ins().isub(x, y),
                    BinaryOp::Mul => self.b.ins().imul(x, y),
                    BinaryOp::And => self.b.ins().band(x, y),
                    BinaryOp::Or => self.b.ins().bor(x, y),
                    BinaryOp::Xor => self.b.ins().bxor(x, y),
                };
                let t = self.iconst(u64::from(TAG_I64));
                self.set_s(dst, t, v);
            }
            SetupOp::Unary(o, a) if self.known(a).is_some() => {
                let t = self.known(a).unwrap_or(UNSET);
                let x = self.bits(a);
                let v = match (o, t) {
                    (UnaryOp::Neg, TAG_I64) => self.b.ins().ineg(x),
                    (UnaryOp::Not, TAG_I64) => self.b.ins().bnot(x),
                    (UnaryOp::Not, TAG_BOOL) => self.b.ins().bxor_imm_u(x, 1),
                    _ => return false,
                };
                let t = self.iconst(u64::from(t));
                self.set_s(dst, t, v);
            }
            SetupOp::Unary(o, a) => {
                // `i64` negation and not, and `bool` not.
                let t = self.tag(a);
                let int = self.b.ins().icmp_imm_s(IntCC::Equal, t, i64::from(TAG_I64));
                let ok = match o {
                    UnaryOp::Neg => int,
                    UnaryOp::Not => {
                        let bool = self
                            .b
                            .ins()
                            .icmp_imm_s(IntCC::Equal, t, i64::from(TAG_BOOL));
                        self.b.ins().bor(int, bool)
                    }
                };
                self.check(ok, general);
                let x = self.bits(a);
                let v = match o {
                    UnaryOp::Neg => self.b.ins().ineg(x),
                    UnaryOp::Not => {
                        let flip = self.b.ins().bxor_imm_u(x, 1);
                        let not = self.b.ins().bnot(x);
                        self.b.ins().select(int, not, flip)
                    }
                };
                self.set_s(dst, t, v);
            }
            SetupOp::Select(c, a, b) => {
                self.check_tag(c, TagTest::Is(TAG_BOOL), general);
                let pick = self.bits(c);
                let t = match (self.known(a), self.known(b)) {
                    (Some(x), Some(y)) if x == y => self.iconst(u64::from(x)),
                    _ => {
                        let (ta, tb) = (self.tag(a), self.tag(b));
                        let t = self.b.ins().select(pick, ta, tb);
                        let ok = self
                            .b
                            .ins()
                            .icmp_imm_s(IntCC::NotEqual, t, i64::from(UNSET));
                        self.check(ok, general);
                        t
                    }
                };
                let (wa, wb) = (self.bits(a), self.bits(b));
                let w = self.b.ins().select(pick, wa, wb);
                self.set_s(dst, t, w);
            }
            SetupOp::Len(sl) => {
                let r = self.slice_ref(sl, general);
                let t = self.b.ins().load(types::I64, flags(), r, 16);
                let ok = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::NotEqual, t, i64::from(UNSET));
                self.check(ok, general);
                let len = self.b.ins().load(types::I64, flags(), r, 8);
                let t = self.iconst(u64::from(TAG_I64));
                self.set_s(dst, t, len);
            }
            _ => return false,
        }
        true
    }

    /// The words of `i64` registers `a` and `b`; other types go to `general`.
    fn i64_operands(&mut self, a: Reg, b: Reg, general: ir::Block) -> (Value, Value) {
        self.check_tag(a, TagTest::Is(TAG_I64), general);
        self.check_tag(b, TagTest::Is(TAG_I64), general);
        (self.bits(a), self.bits(b))
    }

    /// A static slice's [`super::SliceRef`], for register `r` holding a static slice (else
    /// `general`).
    fn slice_ref(&mut self, r: Reg, general: ir::Block) -> Value {
        self.check_tag(r, TagTest::Is(TAG_SLICE), general);
        let k = self.bits(r);
        let n = self
            .b
            .ins()
            .load(types::I64, flags(), self.fr, head::NSLICES);
        let ok = self.b.ins().icmp(IntCC::UnsignedLessThan, k, n);
        self.check(ok, general);
        let r = self.b.ins().imul_imm_u(k, 24);
        let slices = self
            .b
            .ins()
            .load(types::I64, flags(), self.fr, head::SLICES);
        self.b.ins().iadd(slices, r)
    }

    /// A static index of an integer (the fast path of `Spec::fast`), checked below `len`;
    /// an index out of bounds, or not an integer, goes to `general`. (The word of an
    /// integer of any type is below `len` exactly where `fold::index_in` finds it in
    /// bounds: a word whose signed value is negative is at least 2^63 unsigned.)
    fn static_index(&mut self, index: Reg, len: u32, general: ir::Block) -> Value {
        self.check_tag(index, TagTest::Int, general);
        let i = self.bits(index);
        let inb = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, i, i64::from(len));
        self.check(inb, general);
        i
    }

    fn elem_addr(&mut self, base: u32, i: Value) -> Value {
        let off = self.b.ins().ishl_imm_u(i, 2);
        let p = self.b.ins().iadd(self.fr, off);
        self.b
            .ins()
            .iadd_imm_s(p, i64::from(self.o.a) + i64::from(4 * base))
    }

    fn elem_at(&mut self, base: u32, i: Value) -> Value {
        let p = self.elem_addr(base, i);
        self.b.ins().uload32(flags(), p, 0)
    }

    fn set_elem_at(&mut self, base: u32, i: Value, v: Value) {
        let p = self.elem_addr(base, i);
        self.b.ins().istore32(flags(), v, p, 0);
    }

    fn term(&mut self, pc: usize, bl: Block, next: ir::Block) -> Option<()> {
        let term = &self.prog.blocks[bl].term;
        match term {
            Term::Jump(e) => self.jump_edge(pc, e, None)?,
            Term::Branch {
                cond: Operand::Static(r),
                then_edge,
                else_edge,
            } => {
                self.check_tag(*r, TagTest::Is(TAG_BOOL), self.abort);
                let w = self.bits(*r);
                let (y, n, after) = (
                    self.b.create_block(),
                    self.b.create_block(),
                    self.b.create_block(),
                );
                self.b.ins().brif(w, y, &[], n, &[]);
                for (blk, e, k) in [(y, then_edge, 0), (n, else_edge, 1)] {
                    self.b.switch_to_block(blk);
                    let kv = self.iconst(k);
                    self.b.def_var(self.taken, kv);
                    self.jump_edge(pc, e, Some(k as usize))?;
                    self.goto(after);
                }
                self.b.switch_to_block(after);
            }
            Term::Branch {
                cond: Operand::Dyn(c),
                then_edge,
                else_edge,
            } => {
                let cv = self.get_d(*c);
                let mut stubs = false;
                let (t1, n1) = self.branch_edge(then_edge, 0, &mut stubs)?;
                let (t2, n2) = self.branch_edge(else_edge, 1, &mut stubs)?;
                self.call(Shim::Brif, &[cv, t1, n1, t2, n2]);
                if stubs {
                    self.call(Shim::Stubs, &[]);
                }
            }
            Term::Switch {
                arg: Operand::Static(r),
                cases,
                default,
            } => {
                self.check_tag(*r, TagTest::Int, self.abort);
                let w = self.bits(*r);
                let after = self.b.create_block();
                let mut sw = Switch::new();
                let mut seen = HashSet::new();
                let mut arms = Vec::new();
                for (k, (c, e)) in cases.iter().enumerate() {
                    if seen.insert(*c) {
                        let blk = self.b.create_block();
                        sw.set_entry(u128::from(*c), blk);
                        arms.push((blk, e, k));
                    }
                }
                let dblk = self.b.create_block();
                sw.emit(&mut self.b, w, dblk);
                arms.push((dblk, default, cases.len()));
                for (blk, e, k) in arms {
                    self.b.switch_to_block(blk);
                    let kv = self.iconst(k as u64);
                    self.b.def_var(self.taken, kv);
                    self.jump_edge(pc, e, Some(k))?;
                    self.goto(after);
                }
                self.b.switch_to_block(after);
            }
            Term::Switch {
                arg: Operand::Dyn(a),
                cases,
                default,
            } => {
                // Each case's target and arguments are kept by the `case` shim before the
                // next edge reuses the buffer; the `switch` shim emits them all.
                let mut stubs = false;
                for (k, e) in cases {
                    let (t, n) = self.branch_edge(e, 0, &mut stubs)?;
                    let kv = self.iconst(*k);
                    self.call(Shim::Case, &[kv, t, n]);
                }
                let (d, n) = self.branch_edge(default, 0, &mut stubs)?;
                let av = self.get_d(*a);
                self.call(Shim::Switch, &[av, d, n]);
                if stubs {
                    self.call(Shim::Stubs, &[]);
                }
            }
            Term::Return(v) => {
                let (has, v) = match v {
                    Some(o) => (self.iconst(1), self.operand(*o)),
                    None => (self.iconst(0), self.iconst(0)),
                };
                self.call(Shim::Ret, &[has, v]);
            }
            Term::Trap(_) => {
                let bv = self.iconst(bl.index() as u64);
                self.call(Shim::Trap, &[bv]);
            }
        }
        self.goto(next);
        Some(())
    }

    /// Aborts, and goes on in an unreachable block (so that the caller may go on
    /// emitting).
    fn goto_abort(&mut self) {
        self.goto(self.abort);
        let dead = self.b.create_block();
        self.b.switch_to_block(dead);
    }

    /// `Spec::fuses`, for the edge `e` that the copy stitched at step `pc` takes, after a
    /// static branch's arm `taken`: all but whether the target's slot is empty.
    fn fuses(&self, pc: usize, e: &Edge, taken: Option<usize>) -> bool {
        let tb = &self.prog.blocks[e.block];
        if self.plan.is_root(e.block)
            || self.prog.in_edges(e.block) != 1
            || tb
                .params
                .iter()
                .any(|p| matches!(p, Param::Dyn(_, t) if t.is_array()))
        {
            return false;
        }
        let mut at = pc + 1;
        for _ in 0..8 {
            match self.plan.steps.get(at) {
                Some(Step::Stitch { block, .. }) => return *block == e.block,
                Some(Step::Fork { arms, .. }) => match taken {
                    Some(k) if k < arms.len() => at = arms[k] as usize,
                    _ => return false,
                },
                Some(Step::Goto(t)) => at = *t as usize,
                Some(Step::End) | None => return false,
            }
        }
        false
    }

    /// `Spec::edge` and the jump: a fused copy, or a jump to the copy the edge asks for.
    fn jump_edge(&mut self, pc: usize, e: &Edge, taken: Option<usize>) -> Option<()> {
        let tb = &self.prog.blocks[e.block];
        if !tb.promote.is_empty() || (tb.lazy.enters_lazily(false) && self.plan.is_root(e.block)) {
            return self.dispatch_edge(e);
        }
        let after = self.b.create_block();
        if self.fuses(pc, e, taken) {
            let i = e.block.index();
            let slot = self.slot(i);
            let none = self.iconst(u64::from(NONE));
            let empty = self.b.ins().icmp(IntCC::Equal, slot, none);
            let (fuse, plain) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(empty, fuse, &[], plain, &[]);
            self.b.switch_to_block(fuse);
            // `Spec::fuse_edge`: the target's parameters bound, its slot the current block.
            let dyns = self.tree_params(e, None)?;
            for (r, v) in dyns {
                self.set_d(r, v);
            }
            self.call(Shim::Count, &[]);
            let cur = self.b.use_var(self.cur);
            self.set_slot(i, cur);
            let fv = self.iconst(i as u64);
            self.b.def_var(self.fused, fv);
            self.goto(after);
            self.b.switch_to_block(plain);
        }
        let (t, n) = self.edge_block(e, false, 0)?;
        let (n, which) = (self.iconst(n as u64), self.iconst(0));
        self.call(Shim::Jump, &[t, n, which]);
        self.goto(after);
        self.b.switch_to_block(after);
        Some(())
    }

    /// `Spec::tree_params`: sets the target's static parameters (always if `fresh` is
    /// `None`, else when it is true) and returns its dynamic ones with their values.
    fn tree_params(&mut self, e: &Edge, fresh: Option<Value>) -> Option<Vec<(Reg, Value)>> {
        let tb = &self.prog.blocks[e.block];
        if tb.params.len() != e.args.len() {
            return None;
        }
        let mut dyns = Vec::new();
        for (p, &a) in tb.params.iter().zip(&e.args) {
            match (p, a) {
                (Param::Static(r), Operand::Static(src)) => match fresh {
                    None => self.copy_s(*r, src),
                    Some(f) => {
                        let (y, n) = (self.b.create_block(), self.b.create_block());
                        self.b.ins().brif(f, y, &[], n, &[]);
                        self.b.switch_to_block(y);
                        self.copy_s(*r, src);
                        self.goto(n);
                        self.b.switch_to_block(n);
                    }
                },
                (Param::Static(_), Operand::Dyn(_)) => return None,
                (Param::Dyn(r, _), a) => {
                    let v = self.operand(a);
                    dyns.push((*r, v));
                }
            }
        }
        Some(dyns)
    }

    /// `Spec::edge` into a promotion block, or into a lazy root: the block's static
    /// inputs (its static parameters, then its static live-ins) into the key buffer and
    /// all its dynamic inputs into the buffer, and the shim that emits the jump (to a
    /// copy this unit made of a lazy block) or the dispatch and the exit out of the unit.
    fn dispatch_edge(&mut self, e: &Edge) -> Option<()> {
        let args = self.target_inputs(e, true, 0)?;
        let args = args.map(|x| self.iconst(x as u64));
        self.call(Shim::Dispatch, &args);
        Some(())
    }

    /// `Spec::target_inputs`: the static inputs of `e.block` (its static parameters, then
    /// its static live-ins) into the key buffer and its dynamic arguments into buffer
    /// `which`; all of them when `all` (for a dispatch into a promotion block or a lazy
    /// root), else without the unit invariants (for a copy other than the unit's first).
    /// Returns the block, the number of static parameters, of static inputs, and of
    /// dynamic arguments.
    fn target_inputs(&mut self, e: &Edge, all: bool, which: usize) -> Option<[usize; 4]> {
        let tb = &self.prog.blocks[e.block];
        if tb.params.len() != e.args.len() {
            return None;
        }
        let (mut nkey, mut n) = (0, 0);
        for (p, &a) in tb.params.iter().zip(&e.args) {
            match (p, a) {
                (Param::Static(_), Operand::Static(r)) => {
                    self.key_word(nkey, r);
                    nkey += 1;
                }
                (Param::Static(_), Operand::Dyn(_)) => return None,
                (Param::Dyn(..), a) => {
                    let v = self.operand(a);
                    self.put(which, n, v);
                    n += 1;
                }
            }
        }
        let params = nkey;
        let lay = self.prog.layout(e.block);
        let (statics, live) = match all {
            true => (tb.static_live_in.clone(), lay.dispatch_live_in.clone()),
            false => (
                lay.copy_static_live_in.clone(),
                lay.copy_dyn_live_in.clone(),
            ),
        };
        for r in statics {
            self.key_word(nkey, r);
            nkey += 1;
        }
        let n = self.put_live(&live, which, n)?;
        Some([e.block.index(), params, nkey, n])
    }

    /// The target of a dynamic branch's edge and the number of its arguments, in buffer
    /// `which`: `edge_block`, or, for an edge into a promotion block or a lazy block, the
    /// shim that returns the copy the unit made of the lazy block or a dispatch block to
    /// fill once the branch is emitted (`stubs` is then set).
    fn branch_edge(&mut self, e: &Edge, which: usize, stubs: &mut bool) -> Option<(Value, Value)> {
        let tb = &self.prog.blocks[e.block];
        if self.plan.is_root(e.block) && (!tb.promote.is_empty() || tb.lazy.enters_lazily(true)) {
            *stubs = true;
            let [b, params, nkey, n] = self.target_inputs(e, true, which)?;
            let args = [b, params, nkey, n, which].map(|x| self.iconst(x as u64));
            let r = self.call(Shim::Stub, &args);
            let copy = self.b.ins().band_imm_s(r, i64::from(u32::MAX));
            let n = self.b.ins().ushr_imm_u(r, 32);
            return Some((copy, n));
        }
        let (t, n) = self.edge_block(e, true, which)?;
        Some((t, self.iconst(n as u64)))
    }

    /// `Spec::live_args` (without the unit invariants) into buffer `which` from `k` on.
    fn live_args(&mut self, b: Block, which: usize, k: usize) -> Option<usize> {
        let live = self.prog.layout(b).copy_dyn_live_in.clone();
        self.put_live(&live, which, k)
    }

    /// The values of dynamic registers `live` (arrays element by element) into buffer
    /// `which` from `k` on.
    fn put_live(&mut self, live: &[(Reg, Type)], which: usize, mut k: usize) -> Option<usize> {
        for &(r, ty) in live {
            if ty.is_array() {
                let (base, n) = self.array(r)?;
                for j in 0..n {
                    let v = self.get_elem(base + j);
                    self.put(which, k, v);
                    k += 1;
                }
            } else {
                let v = self.get_d(r);
                self.put(which, k, v);
                k += 1;
            }
        }
        Some(k)
    }

    /// `Spec::edge_block`: the copy edge `e` leads to (a tree's slot, or a root's copy
    /// from the memo), with its arguments in buffer `which`, and their number.
    fn edge_block(&mut self, e: &Edge, dynamic: bool, which: usize) -> Option<(Value, usize)> {
        let i = e.block.index();
        let none = self.iconst(u64::from(NONE));
        if !self.plan.is_root(e.block) {
            let slot = self.slot(i);
            let fresh = self.b.ins().icmp(IntCC::Equal, slot, none);
            let dyns = self.tree_params(e, Some(fresh))?;
            for (k, &(_, v)) in dyns.iter().enumerate() {
                self.put(which, k, v);
            }
            let n = self.live_args(e.block, which, dyns.len())?;
            let (make, after) = (self.b.create_block(), self.b.create_block());
            self.b.append_block_param(after, types::I64);
            self.b.ins().brif(fresh, make, &[], after, &[slot.into()]);
            self.b.switch_to_block(make);
            let bv = self.iconst(i as u64);
            let copy = self.call(Shim::Create, &[bv]);
            self.set_slot(i, copy);
            self.b.ins().jump(after, &[copy.into()]);
            self.b.switch_to_block(after);
            let copy = self.b.block_params(after)[0];
            return Some((copy, n));
        }
        let tb = &self.prog.blocks[e.block];
        if !tb.promote.is_empty()
            || tb.lazy.enters_lazily(dynamic)
            || tb.params.len() != e.args.len()
        {
            self.goto_abort();
            return Some((none, 0));
        }
        let [_, _, nkey, n] = self.target_inputs(e, false, which)?;
        let (bv, kv) = (self.iconst(i as u64), self.iconst(nkey as u64));
        let copy = self.call(Shim::Root, &[bv, kv]);
        Some((copy, n))
    }

    fn key_word(&mut self, k: usize, r: Reg) {
        self.most_key = self.most_key.max(k + 1);
        let (t, w) = (self.tag(r), self.bits(r));
        let at = self.o.key + (16 * k) as i32;
        self.b.ins().store(flags(), t, self.fr, at);
        self.b.ins().store(flags(), w, self.fr, at + 8);
    }
}

/// What a tag is checked for.
#[derive(Clone, Copy)]
enum TagTest {
    Is(u8),
    /// An integer of any width.
    Int,
    /// Any value.
    Set,
}

impl TagTest {
    fn holds(self, t: u8) -> bool {
        match self {
            TagTest::Is(x) => t == x,
            TagTest::Int => t <= 7,
            TagTest::Set => t != UNSET,
        }
    }
}

/// A stitched flag (0 or 1) as a condition.
fn done_bool(b: &mut FunctionBuilder, v: Value) -> Value {
    b.ins().icmp_imm_s(IntCC::NotEqual, v, 0)
}

/// The tag and word of the zero of type `t` ([`crate::ge::SVal::key_bits`]).
fn zero_bits(t: Scalar) -> (u8, u64) {
    crate::ge::SVal::Scalar(Const::zero(t)).key_bits()
}

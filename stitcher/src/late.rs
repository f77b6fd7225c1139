//! Rewrites between Cranelift's e-graph pass and its lowering, for every function an
//! optimizing ISA compiles (the optimizing tier's units, generic code and wrappers):
//! [`compile`] runs the e-graph pass, then these, then the lowering with the e-graph pass
//! off ([`crate::jit::lowering_isa`]), which would otherwise place the instructions again.
//!
//! **Decided tests** ([`known_branches`]). A `brif` on a value that a dominating `brif`
//! already tested is decided: in the blocks that one side of a `brif` dominates, when no
//! other edge enters that side, its condition has that side's truth (values never change).
//! Such a later `brif` becomes a `jump` to the side the condition takes. Cranelift does not
//! do this, and bounds checks repeat it: a stack machine's pop reads `m[sp]`, and the
//! push that follows in another block writes `m[sp]` again, a second test of the one
//! value `sp >= len` (the e-graph pass shares the comparison) that can only pass. The
//! side that is no longer reached goes with the lowering's removal of unreachable code.
//!
//! **Low bits tested** ([`low_bits_tests`]). The e-graph pass turns a signed `x % 2^s` into
//! `x - ((x + bias) & -2^s)` (the bias rounds toward zero: `x >>> (w-1)` for `s` = 1, else
//! `(x >> (s-1)) >>> (w-s)`), and comparing that with 0 then costs five instructions
//! before the test. A multiple of `2^s` in two's complement is one whose low `s` bits are
//! zero, whatever its sign, so `x % 2^s == 0` (or `!=`) becomes `x & (2^s - 1) == 0`, one
//! `test` (`collatz`'s parity test). The remainder's instructions stay for any other
//! reader; lowering leaves them out if there is none.
//!
//! **Sinking** ([`sink_pure`]). Cranelift's e-graph pass places each pure instruction
//! where the instruction that first needs it is elaborated, and it elaborates a
//! terminator's operands in order: a loop's condition first, then the values the back
//! edge passes. So in
//!
//! ```text
//! block1(i, j, acc):
//!     j1 = iadd j, 1
//!     c = icmp slt j1, n
//!     p = imul i, j
//!     acc1 = iadd acc, p
//!     brif c, block1(i, j1, acc1), block2(acc1)
//! ```
//!
//! `j` is still live when `j1` is made (the `imul` reads it after), so the two cannot
//! share a register, and every iteration moves `j1` back into `j`'s register on the back
//! edge (and likewise `acc1`, whose `iadd` reads `acc` in a two-address instruction).
//!
//! This pass moves each pure instruction of a block down to just before the first
//! instruction of the block that reads its result (or the terminator, if none does),
//! last instructions first, when that makes no more values live across the
//! instructions it moves over: at most one of its operands (not counting constants)
//! dies at it. Before the move its result is live across them; after, the operands that
//! die at it are, and the operands that live on are live either way. In the example,
//! `c` and `j1` move after `acc1`; `j` then dies at `j1 = iadd j, 1`, which the register
//! allocator gives `j`'s register, and the back edge moves nothing.
//!
//! An operand dies at an instruction when no later instruction of the block reads it and
//! it is not live out of the block; a value that a block other than its own reads is
//! never taken to die (a conservative answer: some instructions that could move stay,
//! none moves that would make more values live). A move looks for the first reader over
//! at most `WINDOW` (64) instructions, so the pass is linear in the function's size.
//! Only pure instructions (one result, no memory access, no trap, no other effect) move,
//! and only downwards past instructions that do not read their result, so the program's
//! meaning is unchanged.

use std::collections::HashMap;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::entity::{EntityRef, SecondaryMap};
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    Block, Function, Inst, InstBuilder, InstructionData, Opcode, Value, ValueDef,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_codegen::settings::OptLevel;
use cranelift_codegen::Context;

/// The most instructions one moves past (so that a long block costs linear time).
const WINDOW: usize = 64;

/// Whether `inst` may move: one result and no effect but computing it (the instructions,
/// loads aside, that the e-graph pass itself places wherever it likes).
fn pure(func: &Function, inst: Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    func.dfg.inst_results(inst).len() == 1
        && !op.can_load()
        && !op.can_store()
        && !op.can_trap()
        && !op.other_side_effects()
        && !op.is_call()
        && !op.is_branch()
        && !op.is_terminator()
}

/// Whether `v` is a constant (which lowering makes where it is used).
fn constant(func: &Function, v: Value) -> bool {
    match func.dfg.value_def(v) {
        ValueDef::Result(i, _) => matches!(
            func.dfg.insts[i].opcode(),
            Opcode::Iconst | Opcode::F32const | Opcode::F64const
        ),
        _ => false,
    }
}

/// Compiles `cctx`'s function with `isa`; with an optimizing ISA, its e-graph pass runs
/// first, then [`known_branches`], [`low_bits_tests`] and [`sink_pure`], then the
/// lowering, with the same flags but the e-graph pass (which would undo the sinking) off.
pub fn compile(cctx: &mut Context, isa: &dyn TargetIsa) -> Result<(), String> {
    let lower = match isa.flags().opt_level() {
        OptLevel::None => isa,
        _ => {
            cctx.optimize(isa, &mut Default::default())
                .map_err(|e| format!("{e:?}"))?;
            if known_branches(&mut cctx.func, &cctx.cfg, &cctx.domtree) {
                // (Stale now; the lowering's start computes both again.)
                cctx.cfg.clear();
                cctx.domtree.clear();
            }
            low_bits_tests(&mut cctx.func);
            sink_pure(&mut cctx.func);
            crate::jit::lowering_isa(isa).map_err(|e| e.to_string())?
        }
    };
    cctx.compile(lower, &mut Default::default())
        .map_err(|e| format!("{:?}", e.inner))?;
    Ok(())
}

/// The value of `v`, sign-extended from its type, if an `iconst` makes it (an `iconst`
/// of a narrower type may hold its bits zero-extended).
fn iconst(func: &Function, v: Value) -> Option<i64> {
    let ValueDef::Result(i, _) = func.dfg.value_def(v) else {
        return None;
    };
    let InstructionData::UnaryImm {
        opcode: Opcode::Iconst,
        imm,
    } = func.dfg.insts[i]
    else {
        return None;
    };
    let unused = 64 - func.dfg.value_type(v).bits().min(64);
    Some(imm.bits() << unused >> unused)
}

/// The opcode and operands of the instruction that makes `v`.
fn def_of(func: &Function, v: Value) -> Option<(Opcode, &[Value])> {
    let ValueDef::Result(i, _) = func.dfg.value_def(v) else {
        return None;
    };
    Some((func.dfg.insts[i].opcode(), func.dfg.inst_args(i)))
}

/// If `r` is the signed remainder `x % 2^s` as the e-graph pass leaves it, `x - ((x +
/// bias) & -2^s)` with the bias `x >>> (w-1)` (`s` = 1) or `(x >> k) >>> (w-s)` for a `k`
/// from `s - 1` to `w - 1` (both `2^s - 1` for negative `x`, else 0): `x` and `s`.
fn pow2_remainder(func: &Function, r: Value) -> Option<(Value, u32)> {
    let w = i64::from(func.dfg.value_type(r).bits());
    let (Opcode::Isub, &[x, m]) = def_of(func, r)? else {
        return None;
    };
    let (Opcode::Band, &[y, c]) = def_of(func, m)? else {
        return None;
    };
    let low = iconst(func, c)?.wrapping_neg();
    if low <= 1 || (low as u64).count_ones() != 1 {
        return None;
    }
    let s = low.trailing_zeros();
    let (Opcode::Iadd, &[p, q]) = def_of(func, y)? else {
        return None;
    };
    let bias = match (p == x, q == x) {
        (true, _) => q,
        (_, true) => p,
        _ => return None,
    };
    let (Opcode::Ushr, &[t, k]) = def_of(func, bias)? else {
        return None;
    };
    let spread = match s {
        1 => t == x,
        // (The sign spread over the top `s` bits at least: the e-graph pass shifts by
        // `s - 1`.)
        _ => matches!(def_of(func, t), Some((Opcode::Sshr, &[u, k1]))
            if u == x && iconst(func, k1).is_some_and(|k1| (i64::from(s) - 1..w).contains(&k1))),
    };
    (spread && iconst(func, k) == Some(w - i64::from(s))).then_some((x, s))
}

/// `x % 2^s == 0` (or `!=`) tests `x & (2^s - 1)` instead: a multiple of `2^s` in two's
/// complement is one whose low `s` bits are zero, whatever its sign. The remainder's
/// instructions stay, for lowering to leave out if nothing else reads them.
pub fn low_bits_tests(func: &mut Function) {
    let mut found = Vec::new();
    for b in func.layout.blocks() {
        for inst in func.layout.block_insts(b) {
            let InstructionData::IntCompare {
                cond: IntCC::Equal | IntCC::NotEqual,
                args: [a, c],
                ..
            } = func.dfg.insts[inst]
            else {
                continue;
            };
            for (k, r, z) in [(0, a, c), (1, c, a)] {
                if iconst(func, z) == Some(0) {
                    if let Some((x, s)) = pow2_remainder(func, r) {
                        found.push((inst, k, x, s));
                        break;
                    }
                }
            }
        }
    }
    for (inst, k, x, s) in found {
        let ty = func.dfg.value_type(x);
        let mut pos = FuncCursor::new(func).at_inst(inst);
        let mask = pos.ins().iconst(ty, (1i64 << s) - 1);
        let low = pos.ins().band(x, mask);
        func.dfg.inst_args_mut(inst)[k] = low;
    }
}

/// Resolves every `brif` whose condition a dominating `brif` on the same value decided
/// (see the module documentation): it becomes a `jump` to the side that condition takes.
/// `cfg` and `domtree` are those of `func` as it is (the e-graph pass leaves both valid);
/// they stay sound answers while branches become jumps, since removing edges only makes
/// blocks unreachable or dominated by more. Says whether it changed anything.
pub fn known_branches(
    func: &mut Function,
    cfg: &ControlFlowGraph,
    domtree: &DominatorTree,
) -> bool {
    // Per condition, the blocks in which it is known, with its truth there: a side of a
    // `brif` that no other edge enters.
    let mut known: HashMap<Value, Vec<(Block, bool)>> = HashMap::new();
    let mut branches = Vec::new();
    for b in domtree.cfg_rpo().copied() {
        let Some(inst) = func.layout.last_inst(b) else {
            continue;
        };
        let InstructionData::Brif { arg, blocks, .. } = func.dfg.insts[inst] else {
            continue;
        };
        let [t, f] = blocks.map(|c| c.block(&func.dfg.value_lists));
        if t == f {
            continue;
        }
        let c = func.dfg.resolve_aliases(arg);
        branches.push((b, inst, c));
        for (side, truth) in [(t, true), (f, false)] {
            if cfg.pred_iter(side).count() == 1 {
                known.entry(c).or_default().push((side, truth));
            }
        }
    }
    let mut changed = false;
    for (b, inst, c) in branches {
        let Some(truth) = known.get(&c).and_then(|facts| {
            facts
                .iter()
                .find(|&&(at, _)| domtree.block_dominates(at, b))
                .map(|&(_, truth)| truth)
        }) else {
            continue;
        };
        let InstructionData::Brif { blocks, .. } = func.dfg.insts[inst] else {
            unreachable!("collected as a brif");
        };
        func.dfg.insts[inst] = InstructionData::Jump {
            opcode: Opcode::Jump,
            destination: blocks[usize::from(!truth)],
        };
        changed = true;
    }
    changed
}

/// Sinks the pure instructions of every block of `func` (see the module documentation).
pub fn sink_pure(func: &mut Function) {
    // Per value, whether an instruction outside the block defining it reads it (then it
    // may be live out of any block reading it).
    let mut outside: SecondaryMap<Value, bool> = SecondaryMap::new();
    outside.resize(func.dfg.num_values());
    let def_block = |func: &Function, v: Value| match func.dfg.value_def(v) {
        ValueDef::Result(i, _) => func.layout.inst_block(i),
        ValueDef::Param(b, _) => Some(b),
        _ => None,
    };
    for b in func.layout.blocks() {
        for inst in func.layout.block_insts(b) {
            for v in func.dfg.inst_values(inst) {
                let v = func.dfg.resolve_aliases(v);
                if def_block(func, v) != Some(b) {
                    outside[v] = true;
                }
            }
        }
    }
    // Per value, the block (its number plus one) and the position in it of the last
    // instruction of that block that reads it.
    let mut last_read: SecondaryMap<Value, (u32, u32)> = SecondaryMap::new();
    last_read.resize(func.dfg.num_values());
    let blocks: Vec<Block> = func.layout.blocks().collect();
    let mut insts: Vec<Inst> = Vec::new();
    let mut args: Vec<Value> = Vec::new();
    for b in blocks {
        let tag = b.index() as u32 + 1;
        insts.clear();
        insts.extend(func.layout.block_insts(b));
        // (Moves only reorder the instructions after the one being moved, so whether a
        // value is read after it does not change.)
        for (n, &i) in insts.iter().enumerate() {
            for v in func.dfg.inst_values(i) {
                last_read[func.dfg.resolve_aliases(v)] = (tag, n as u32);
            }
        }
        // Last first, so that what an instruction moves past is already in place.
        let mut k = insts.len().saturating_sub(1);
        while k > 0 {
            k -= 1;
            let inst = insts[k];
            if !pure(func, inst) {
                continue;
            }
            let r = func.dfg.inst_results(inst)[0];
            let reads = |i: Inst, v: Value| {
                func.dfg
                    .inst_values(i)
                    .any(|u| func.dfg.resolve_aliases(u) == v)
            };
            // The first later instruction that reads the result (the terminator at last),
            // looked for over at most `WINDOW` instructions.
            let last = insts.len() - 1;
            let Some(to) =
                (k + 1..=last.min(k + WINDOW)).find(|&j| j == last || reads(insts[j], r))
            else {
                continue;
            };
            if to == k + 1 {
                continue;
            }
            args.clear();
            args.extend(
                func.dfg
                    .inst_args(inst)
                    .iter()
                    .map(|&v| func.dfg.resolve_aliases(v)),
            );
            // The operands that die here: read by nothing after, and not live out.
            let dying = args
                .iter()
                .enumerate()
                .filter(|&(n, &v)| {
                    !constant(func, v)
                        && !args[..n].contains(&v)
                        && last_read[v] == (tag, k as u32)
                        && !outside[v]
                })
                .count();
            if dying > 1 {
                continue;
            }
            func.layout.remove_inst(inst);
            func.layout.insert_inst(inst, insts[to]);
            insts[k..to].rotate_left(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::{types, AbiParam, Signature, Type, UserFuncName};
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    /// A function of `params` to `returns` whose entry block `body` fills and ends (given
    /// the entry's parameters), and what `body` returns.
    fn function<R>(
        params: &[Type],
        returns: &[Type],
        body: impl FnOnce(&mut FunctionBuilder, &[Value]) -> R,
    ) -> (Function, R) {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns
            .extend(returns.iter().map(|&t| AbiParam::new(t)));
        let mut func = Function::with_name_signature(UserFuncName::default(), sig);
        let mut fcx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fcx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let args = b.block_params(entry).to_vec();
        let r = body(&mut b, &args);
        b.seal_all_blocks();
        let frontend = crate::jit::host_isa(crate::jit::JitOptions::default())
            .expect("host ISA")
            .frontend_config();
        b.finalize(frontend);
        (func, r)
    }

    /// Fails unless Cranelift's verifier accepts `func`.
    fn verified(func: &Function) {
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verify_function(func, &flags).expect("still valid");
    }

    /// The bytes of code of the function `func` makes, compiled by Cranelift alone and
    /// through [`compile`].
    fn code_sizes(func: impl Fn() -> Function) -> (usize, usize) {
        let isa = crate::jit::host_isa(crate::jit::JitOptions {
            optimize: true,
            verify: true,
        })
        .expect("host ISA");
        let mut plain = Context::for_function(func());
        let plain = plain
            .compile(&*isa, &mut Default::default())
            .expect("compiles");
        let plain = plain.code_buffer().len();
        let mut ours = Context::for_function(func());
        compile(&mut ours, &*isa).expect("compiles");
        let ours = ours.compiled_code().expect("compiled").code_buffer().len();
        (plain, ours)
    }

    /// The loop of the module documentation (`n` and `i` the function's arguments), in the
    /// order the e-graph pass leaves it.
    fn nested_loop() -> (Function, [Inst; 4]) {
        let i64 = types::I64;
        let (func, values) = function(&[i64, i64], &[i64], |b, args| {
            let (n, i0) = (args[0], args[1]);
            let (body, exit) = (b.create_block(), b.create_block());
            for _ in 0..3 {
                b.append_block_param(body, i64);
            }
            b.append_block_param(exit, i64);
            let zero = b.ins().iconst(i64, 0);
            b.ins().jump(body, &[i0.into(), zero.into(), zero.into()]);
            b.switch_to_block(body);
            let [i, j, acc] = [0, 1, 2].map(|k| b.block_params(body)[k]);
            let one = b.ins().iconst(i64, 1);
            let j1 = b.ins().iadd(j, one);
            let c = b.ins().icmp(IntCC::SignedLessThan, j1, n);
            let p = b.ins().imul(i, j);
            let acc1 = b.ins().iadd(acc, p);
            let back = [i.into(), j1.into(), acc1.into()];
            b.ins().brif(c, body, &back, exit, &[acc1.into()]);
            b.switch_to_block(exit);
            let r = b.block_params(exit)[0];
            b.ins().return_(&[r]);
            [j1, c, p, acc1]
        });
        let def = |v: Value| match func.dfg.value_def(v) {
            ValueDef::Result(inst, _) => inst,
            _ => unreachable!("instructions make them"),
        };
        let insts = values.map(def);
        (func, insts)
    }

    #[test]
    fn a_loop_counter_step_moves_after_the_last_read_of_the_counter() {
        let (mut func, [j1, c, p, acc1]) = nested_loop();
        sink_pure(&mut func);
        let order: Vec<Inst> = func
            .layout
            .block_insts(func.layout.inst_block(p).unwrap())
            .collect();
        let at = |i: Inst| order.iter().position(|&x| x == i).unwrap();
        assert!(at(p) < at(j1), "{}", func.display());
        assert!(at(acc1) < at(j1));
        assert_eq!(
            at(c) + 1,
            order.len() - 1,
            "the compare stays by its branch"
        );
        verified(&func);
    }

    /// Compiled, the loop moves nothing on its back edge: its code is shorter than
    /// Cranelift's own.
    #[test]
    fn the_sunk_loop_compiles_to_less_code() {
        let (plain, sunk) = code_sizes(|| nested_loop().0);
        assert!(sunk < plain, "{sunk} bytes sunk, {plain} not");
    }

    /// `f(x) = x % 2^s == 0` (for `s` of 1 and 3, at 64 and 32 bits), compiled: the low
    /// bits tested take less code than Cranelift's own. (That the answers stay right is
    /// the differential tests' part: `tests/lang/mixed/multiples.dyc` in every tier.)
    #[test]
    fn a_remainder_by_a_power_of_two_compared_with_zero_tests_low_bits() {
        for (ty, s) in [
            (types::I64, 1),
            (types::I64, 3),
            (types::I32, 1),
            (types::I32, 3),
        ] {
            let (plain, tested) = code_sizes(|| {
                let (func, ()) = function(&[ty], &[types::I8], |b, args| {
                    let d = b.ins().iconst(ty, 1 << s);
                    let r = b.ins().srem(args[0], d);
                    let zero = b.ins().iconst(ty, 0);
                    let c = b.ins().icmp(IntCC::Equal, r, zero);
                    b.ins().return_(&[c]);
                });
                func
            });
            assert!(
                tested < plain,
                "{ty} % {}: {tested} bytes tested, {plain} not",
                1 << s
            );
        }
    }

    #[test]
    fn an_instruction_at_which_two_operands_die_stays() {
        // x = a + b (both die there) read only by the return: moving it would keep both
        // live across the multiplication.
        let i64 = types::I64;
        let (mut func, ()) = function(&[i64; 3], &[i64; 2], |b, args| {
            let x = b.ins().iadd(args[0], args[1]);
            let y = b.ins().imul(args[2], args[2]);
            b.ins().return_(&[x, y]);
        });
        let entry = func.layout.entry_block().unwrap();
        let first = func.layout.first_inst(entry).unwrap();
        sink_pure(&mut func);
        assert_eq!(func.layout.first_inst(entry), Some(first));
    }

    /// `f(i, n)`: `i >= n` is tested in the entry, whose false side (`ok`) tests it again;
    /// its true side (`high`) tests it again and joins a block of the false side
    /// (`join`), which tests it once more. The blocks, in that order.
    fn repeated_tests() -> (Function, [Block; 3]) {
        let i64 = types::I64;
        function(&[i64, i64], &[i64], |b, args| {
            let (i, n) = (args[0], args[1]);
            let [ok, high, join, again, out] = [(); 5].map(|()| b.create_block());
            let c = b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, i, n);
            b.ins().brif(c, high, &[], ok, &[]);
            b.switch_to_block(ok);
            let x = b.ins().iadd(i, n);
            b.ins().brif(c, out, &[i.into()], join, &[x.into()]);
            b.switch_to_block(high);
            b.ins().brif(c, join, &[n.into()], out, &[i.into()]);
            b.append_block_param(join, i64);
            b.switch_to_block(join);
            let y = b.block_params(join)[0];
            b.ins().brif(c, again, &[], out, &[y.into()]);
            b.switch_to_block(again);
            b.ins().return_(&[n]);
            b.append_block_param(out, i64);
            b.switch_to_block(out);
            let r = b.block_params(out)[0];
            b.ins().return_(&[r]);
            [ok, high, join]
        })
    }

    #[test]
    fn a_test_a_dominating_test_decided_becomes_a_jump() {
        let (mut func, [ok, high, join]) = repeated_tests();
        let cfg = ControlFlowGraph::with_function(&func);
        let domtree = DominatorTree::with_function(&func, &cfg);
        known_branches(&mut func, &cfg, &domtree);
        let target = |b: Block| {
            let inst = func.layout.last_inst(b).unwrap();
            match func.dfg.insts[inst] {
                InstructionData::Jump { destination, .. } => {
                    Some(destination.block(&func.dfg.value_lists))
                }
                _ => None,
            }
        };
        // `ok` knows the test false, `high` true; `join` is entered from both.
        assert_eq!(target(ok), Some(join), "{}", func.display());
        assert_eq!(target(high), Some(join));
        assert_eq!(target(join), None, "{}", func.display());
        verified(&func);
    }

    /// Compiled, the tests decided leave no code.
    #[test]
    fn decided_tests_compile_to_less_code() {
        let (plain, ours) = code_sizes(|| repeated_tests().0);
        assert!(
            ours < plain,
            "{ours} bytes with decided tests, {plain} without"
        );
    }
}

//! Threading of forwarding blocks: a block whose only instruction is `jump T(args)` is
//! bypassed, its predecessors branching straight to `T` with the arguments composed.
//!
//! Why it matters for specialization: the front end makes such blocks wherever control
//! flow merges only to go on (the latch of a loop whose body ends in many places, the join
//! of an `if` whose arms set a variable and fall through to the loop's end). Each is a
//! merge of its own, so under specialization every path through it stitches one more
//! block copy, and when it merges static values (a byte-code interpreter's next `pc`) it
//! is a special merge: a specialization root with a has-been-stitched lookup of its own,
//! before the loop head's lookup of the same values. Threaded, the interpreter's handlers
//! jump straight to the loop head: one copy and one lookup per interpreted instruction
//! fewer. Cranelift's CFG clean-up does the same for the code it compiles; here it is done
//! before the binding-time analysis, so the plan of the static transform never sees the
//! block.
//!
//! The algorithm, linear in the size of the function (composing arguments goes through a
//! table from parameter to position, and a branch's targets are counted in a table):
//! 1. A block other than the entry whose instructions are one `jump`, and whose parameters
//!    nothing else reads (a block's parameters may be read in the blocks it dominates),
//!    is *forwarding*.
//! 2. Each forwarding block's own jump is resolved first (depth first, with an explicit
//!    stack): if its target forwards too, the target's resolved jump is composed into it
//!    (the target's parameters replaced by the arguments passed). A cycle of forwarding
//!    blocks (an empty infinite loop) is left alone where it closes.
//! 3. Every branch target that names a forwarding block is replaced by that block's
//!    resolved jump with the arguments composed; one step suffices, since the jump is
//!    already final. A terminator never gets the same target twice (a two-way branch with
//!    both arms at one block would need its arguments moved on the edges, which not every
//!    backend does): such an edge keeps its forwarding block.
//! 4. Blocks no longer reached are removed from the layout.
//!
//! SSA stays valid: a forwarding block's parameters are read only by its jump, and an
//! argument of that jump that is not one of its parameters is defined in a block `D` that
//! dominates the forwarding block; every path to a predecessor `P` extends through the
//! edge to a path to the forwarding block, on which `D` comes before it, so `D`
//! dominates `P`.

use cranelift_entity::SecondaryMap;

use crate::ir::inst::ValueList;
use crate::ir::{Block, BlockCall, Function, InstData, Value, ValueDef};

/// What the pass knows of a block.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum State {
    /// Not forwarding (or not looked at).
    #[default]
    Other,
    /// Forwarding, its jump not resolved yet.
    Forwarding,
    /// Forwarding, being resolved (on the stack).
    Resolving,
    /// Forwarding, its jump final.
    Resolved,
}

/// `call` with the parameters of `via` replaced by `args` (the arguments of a jump to
/// `via`), in time linear in both; `index` is scratch (every entry `u32::MAX`, left so).
fn compose(
    f: &Function,
    via: Block,
    args: &[Value],
    call: &BlockCall,
    index: &mut SecondaryMap<Value, u32>,
) -> BlockCall {
    let params = f.block_params(via);
    for (k, &p) in params.iter().enumerate() {
        index[p] = k as u32;
    }
    let composed = BlockCall {
        block: call.block,
        args: call
            .args
            .iter()
            .map(|&v| match index[v] {
                u32::MAX => v,
                k => args[k as usize],
            })
            .collect::<ValueList>(),
    };
    for &p in params {
        index[p] = u32::MAX;
    }
    composed
}

/// The jump that ends forwarding block `b`.
fn jump_of(f: &Function, b: Block) -> &BlockCall {
    let i = f.layout.block_insts(b)[0];
    match &f.insts[i] {
        InstData::Jump { dest } => dest,
        _ => unreachable!("a forwarding block ends in a jump"),
    }
}

/// Threads every forwarding block of `f` (see the module doc). Returns the number of
/// blocks removed.
pub fn thread(f: &mut Function) -> usize {
    let Some(entry) = f.layout.entry_block() else {
        return 0;
    };
    let mut state: SecondaryMap<Block, State> = SecondaryMap::with_capacity(f.blocks.len());
    let mut any = false;
    for &b in f.layout.blocks() {
        let insts = f.layout.block_insts(b);
        if b != entry
            && insts.len() == 1
            && matches!(&f.insts[insts[0]], InstData::Jump { dest } if dest.block != b)
        {
            state[b] = State::Forwarding;
            any = true;
        }
    }
    if !any {
        return 0;
    }
    // A block whose parameters are read anywhere but in its own jump (they may be, in
    // the blocks it dominates) must stay.
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            f.insts[i].visit_operands(|&v| {
                if let ValueDef::Param(p, _) = f.values[v].def {
                    if p != b && state[p] == State::Forwarding {
                        state[p] = State::Other;
                    }
                }
            });
        }
    }
    let mut index: SecondaryMap<Value, u32> = SecondaryMap::with_default(u32::MAX);
    // 2. Resolve each forwarding block's jump, targets first.
    let blocks: Vec<Block> = f.layout.blocks().to_vec();
    let mut stack: Vec<Block> = Vec::new();
    for &b in &blocks {
        if state[b] != State::Forwarding {
            continue;
        }
        stack.push(b);
        state[b] = State::Resolving;
        while let Some(&top) = stack.last() {
            let t = jump_of(f, top).block;
            if state[t] == State::Forwarding {
                state[t] = State::Resolving;
                stack.push(t);
                continue;
            }
            // The target is final (not forwarding, resolved, or on the stack: a cycle,
            // left closed here).
            if state[t] == State::Resolved {
                let via = jump_of(f, top).clone();
                let composed = compose(f, via.block, &via.args, jump_of(f, t), &mut index);
                if composed.block != top {
                    let i = f.layout.block_insts(top)[0];
                    f.insts[i] = InstData::Jump { dest: composed };
                }
            }
            state[top] = State::Resolved;
            stack.pop();
        }
    }
    // 3. Thread every branch target that names a forwarding block (`uses` counts the
    // edges of the terminator at hand to each block, so that a clash costs no scan).
    let mut removed = false;
    let mut uses: SecondaryMap<Block, u32> = SecondaryMap::with_capacity(f.blocks.len());
    for &b in &blocks {
        let Some(term) = f.layout.last_inst(b) else {
            continue;
        };
        for c in f.insts[term].branch_targets() {
            uses[c.block] += 1;
        }
        let n = f.insts[term].branch_targets().count();
        for k in 0..n {
            let Some(call) = f.insts[term].branch_target(k) else {
                break;
            };
            let via = call.block;
            if state[via] != State::Resolved {
                continue;
            }
            let new = compose(f, via, &call.args, jump_of(f, via), &mut index);
            if new.block == entry || uses[new.block] > 0 {
                continue;
            }
            uses[via] -= 1;
            uses[new.block] += 1;
            if let Some(slot) = f.insts[term].branch_target_mut(k) {
                *slot = new;
                removed = true;
            }
        }
        for c in f.insts[term].branch_targets() {
            uses[c.block] = 0;
        }
    }
    if !removed {
        return 0;
    }
    // 4. Drop the blocks nothing reaches any more.
    let before = f.layout.blocks().len();
    crate::lang::ssa::remove_unreachable_blocks(f);
    before - f.layout.blocks().len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::Memory;
    use crate::ir::printer::print_module;
    use crate::verifier::verify_module;

    /// The byte-code interpreter's shape: handlers jump to a latch that only jumps to the
    /// loop head, and a conditional's arms (which only pass a value computed before the
    /// branch) meet in a join that only jumps to the latch. Threaded, every handler jumps
    /// to the head; of the conditional's arms, the first goes to the head and the second
    /// keeps its block (a branch never gets one target twice), which jumps to the head.
    #[test]
    fn handlers_jump_straight_to_the_loop_head() {
        let src = "fn f(n: i64) -> i64 {
    var pc = 0;
    var acc = 0;
    loop {
        if pc > n { return acc; }
        switch pc % 3 {
            case 0:
                acc = acc + 1;
                pc = pc + 1;
            case 1:
                let far = pc + 2;
                let near = pc + 1;
                if acc < 5 { pc = far; } else { pc = near; }
            default:
                pc = pc + 1;
        }
    }
}";
        let m = crate::lang::compile("t.dyc", src).expect("compiles");
        let id = m.func_by_name("f").expect("f");
        let mut g = m.funcs[id].clone();
        let before = g.layout.blocks().len();
        let removed = thread(&mut g);
        assert!(removed >= 3, "removed {removed} of {before} blocks");
        let mut t = m.clone();
        t.funcs[id] = g.clone();
        verify_module(&t).expect("verifies");
        let text = print_module(&t);
        // The blocks that jump into the loop head: all do work but one, the conditional's
        // else arm.
        let head = g.layout.blocks()[1];
        let lone: Vec<Block> = g.layout.blocks()[1..]
            .iter()
            .copied()
            .filter(|&b| {
                let insts = g.layout.block_insts(b);
                insts.len() == 1
                    && matches!(&g.insts[insts[0]], InstData::Jump { dest } if dest.block == head)
            })
            .collect();
        assert_eq!(lone.len(), 1, "{text}");
        let else_arm = g.layout.blocks().iter().any(|&p| {
            let l = g.layout.last_inst(p).expect("terminated");
            matches!(&g.insts[l], InstData::Brif { then_dest, else_dest, .. }
                if then_dest.block == head && else_dest.block == lone[0])
        });
        assert!(else_arm, "{text}");
        for n in 0..12 {
            let args = [crate::interp::Val::Scalar(crate::ir::Const::Int(
                crate::ir::Scalar::I64,
                n,
            ))];
            let want = crate::gen::tests::outcome(&m, id, &args, &mut Memory::default());
            let got = crate::gen::tests::outcome(&t, id, &args, &mut Memory::default());
            assert_eq!(got.0, want.0, "n = {n}");
        }
    }

    /// A cycle of blocks that only jump to each other (an empty infinite loop) is left
    /// alone, and so is a block that jumps to itself.
    #[test]
    fn forwarding_cycles_are_left_closed() {
        let m = crate::ir::parser::parse_module(
            "fn f(bool) -> i64 {
block0(v0: bool):
    brif v0, block1, block3
block1:
    jump block2
block2:
    jump block1
block3:
    jump block3
}",
        )
        .expect("parses");
        let id = m.func_by_name("f").expect("f");
        let mut g = m.funcs[id].clone();
        thread(&mut g);
        let mut t = m.clone();
        t.funcs[id] = g;
        verify_module(&t).expect("verifies");
        let text = print_module(&t);
        assert!(text.contains("jump block3"), "{text}");
        assert!(
            text.contains("jump block1") || text.contains("jump block2"),
            "{text}"
        );
    }

    /// On random valid modules, threading keeps every function verified and computing
    /// the same results and faults.
    #[test]
    fn threaded_functions_verify_and_compute_the_same() {
        crate::gen::tests::pass_keeps_semantics("threading", thread);
    }
}

//! Code placement: global code motion of pure instructions, so that setup computations run
//! once per specialization instead of once per unrolled iteration, and template
//! computations sit in the least frequently executed block where they are legal.
//!
//! The algorithm is Click's global code motion ("Global Code Motion / Global Value
//! Numbering", PLDI 1995) on our SSA form with block parameters:
//!
//! 1. **Schedule early.** Blocks in reverse post-order, instructions in order: a movable
//!    instruction's earliest block is the deepest (in the dominator tree) of the blocks
//!    defining its operands (for a moved operand, its earliest block); with no operands,
//!    the entry. Every operand's definition dominates the instruction, so those blocks lie
//!    on one dominator chain and the deepest is dominated by all of them.
//! 2. **Schedule late.** Blocks in post-order, instructions in reverse: the latest block is
//!    the lowest common dominator ancestor of its uses (a use as a branch argument is in
//!    the branching block; a moved user counts at its new block).
//! 3. **Choose.** On the dominator-tree path from the latest block up to the earliest, the
//!    block of the smallest loop depth (the loop nesting forest's), the latest among equals:
//!    out of every loop the operands allow, otherwise as deep into conditional code as the
//!    uses allow. The original block is on that path, so nothing moves into a deeper loop.
//!
//! What this means for specialization: a static computation in a loop unrolled at
//! specialization time that depends only on values from outside the loop moves before the
//! loop and runs once; one used in one arm of a static branch moves into that arm and runs
//! only when the arm is stitched. A dynamic computation invariant in a loop moves out of it
//! (the template is instantiated once, outside the loop, and its code runs once per entry).
//!
//! **Movable** are the instructions without effects that cannot fault: constants, unary
//! operators, comparisons, selects, casts, `len`, and binary operators except integer
//! division and remainder (a fault moved onto a path that did not have it would change
//! the result). Moving one into a block that runs on paths where it did not run before is
//! then harmless. Loads (which can fault), stores, calls, annotations, arrays and
//! terminators stay where they are. An instruction without uses stays too.
//!
//! In the moved-to block an instruction goes right before its first user there (or before
//! the terminator), moved operands before moved users; each block's list is rebuilt once.
//! Common dominators and the search up the dominator path use jump pointers, so the pass
//! costs O((n + uses) log n) whatever the depth of the dominator tree.
//!
//! **Value numbering in each block** ([`number`], after placement): placement gathers
//! copies of one computation into one block (an interpreter's handlers each compute
//! `len(input)` for a bounds test, and all of them move before the dispatch loop), where
//! the later ones compute what the first already has. Within each block, a movable
//! instruction (but a constant) with the same operator and operands as an earlier one is
//! removed and its result replaced by the earlier one's everywhere (the earlier dominates
//! every use of the later). This is the local part of Click's global value numbering, the
//! half of the paper placement does not do; it never makes a value live longer than one of
//! the copies already was. Each merged value is one dynamic value fewer passed between the
//! specialized blocks. Constants are left alone: placement remakes them where they are
//! needed, and `0.0 == -0.0` would merge two different ones. One pass in reverse
//! post-order, a hash table per block: linear in the function.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use cranelift_entity::packed_option::PackedOption;
use cranelift_entity::SecondaryMap;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::dominators::DominatorTree;
use crate::analysis::loops::LoopForest;
use crate::analysis::order::DfsOrder;
use crate::ir::{
    BinaryOp, Block, CmpOp, Function, Inst, InstData, Scalar, Type, UnaryOp, Value, ValueDef,
};

/// The largest loop (in blocks, nested loops included) code is hoisted out of: a value
/// moved out of a loop is live across all of its blocks, and each copy of a block carries
/// its live values (static ones in its key, dynamic ones as parameters), so hoisting out
/// of large nests would grow every copy; in a nest of thousands of loops it would make
/// the work quadratic.
pub const MAX_LOOP_BLOCKS: usize = 64;

/// Whether code placement may move `data` (see the module doc).
fn movable(f: &Function, data: &InstData) -> bool {
    match data {
        InstData::Const(_)
        | InstData::Unary { .. }
        | InstData::Cmp { .. }
        | InstData::Select { .. }
        | InstData::Cast { .. }
        | InstData::Len { .. } => true,
        InstData::Binary { op, args } => {
            !matches!(op, BinaryOp::Div | BinaryOp::Rem) || f.value_type(args[0]) == Type::F64
        }
        _ => false,
    }
}

/// Moves the movable instructions of `f` (verified) to the blocks global code motion
/// chooses; code in unreachable blocks stays. Returns how many moved.
pub fn place(f: &mut Function) -> usize {
    let cfg = ControlFlowGraph::compute(f);
    let doms = DominatorTree::compute(&cfg);
    let forest = LoopForest::compute(&cfg);
    let rpo: Vec<Block> = forest.rpo().to_vec();
    let Some(&entry) = rpo.first() else {
        return 0;
    };
    let tree = Lifting::new(&rpo, &doms);
    // Blocks per loop, nested loops included (children come after their parents).
    let mut loop_blocks = vec![0usize; forest.loops.len()];
    for &b in &rpo {
        if let Some(l) = forest.innermost(b) {
            loop_blocks[l] += 1;
        }
    }
    for id in (0..forest.loops.len()).rev() {
        if let Some(p) = forest.loops[id].parent {
            loop_blocks[p] += loop_blocks[id];
        }
    }
    let mut is_movable: SecondaryMap<Inst, bool> = SecondaryMap::new();
    let mut users: SecondaryMap<Value, Vec<Inst>> = SecondaryMap::new();
    for &b in &rpo {
        for &i in f.layout.block_insts(b) {
            is_movable[i] = movable(f, &f.insts[i]);
            f.insts[i].visit_operands(|&v| users[v].push(i));
        }
    }
    let block_of = |f: &Function, i: Inst| f.layout.inst_block(i).expect("in the layout");
    // 1. Early.
    let mut early: SecondaryMap<Inst, Option<Block>> = SecondaryMap::new();
    for &b in &rpo {
        for &i in f.layout.block_insts(b) {
            if !is_movable[i] {
                continue;
            }
            let mut e = entry;
            f.insts[i].visit_operands(|&v| {
                let d = match f.values[v].def {
                    ValueDef::Param(pb, _) => pb,
                    ValueDef::Result(j, _) if is_movable[j] => early[j].expect("earlier"),
                    ValueDef::Result(j, _) => block_of(f, j),
                    ValueDef::Unused => unreachable!("a verified operand"),
                };
                if tree.depth[d] > tree.depth[e] {
                    e = d;
                }
            });
            early[i] = Some(e);
        }
    }
    // 2 and 3. Late, then the choice, users first.
    let mut chosen: SecondaryMap<Inst, Option<Block>> = SecondaryMap::new();
    let mut late_order = Vec::new();
    for &b in rpo.iter().rev() {
        for &i in f.layout.block_insts(b).iter().rev() {
            if !is_movable[i] {
                continue;
            }
            let mut late: Option<Block> = None;
            for &r in f.inst_results(i) {
                for &u in &users[r] {
                    let ub = chosen[u].unwrap_or_else(|| block_of(f, u));
                    late = Some(late.map_or(ub, |l| tree.lca(l, ub)));
                }
            }
            let Some(late) = late else {
                continue;
            };
            let best = if matches!(f.insts[i], InstData::Const(_)) {
                // Constants are remade where they are needed, not kept live across loops.
                late
            } else {
                let e = early[i].expect("computed");
                // Out of every loop the operands allow whose blocks are few enough (the
                // outermost loop left is the largest).
                let mut k = forest.depth(late);
                let mut l = forest.innermost(late);
                while let Some(id) = l {
                    let lp = &forest.loops[id];
                    if lp.depth <= forest.depth(e) {
                        break;
                    }
                    if loop_blocks[id] > MAX_LOOP_BLOCKS {
                        break;
                    }
                    k = lp.depth - 1;
                    l = lp.parent;
                }
                // Loop depth does not grow going up the dominator tree of a reducible CFG,
                // so the block is the deepest ancestor of `late` at most `k` loops deep;
                // clamped to `e` where irreducible loops break that order.
                let best = tree.deepest_ancestor(late, |x| forest.depth(x) <= k);
                if tree.depth[best] < tree.depth[e] {
                    e
                } else {
                    best
                }
            };
            if best != b {
                chosen[i] = Some(best);
                late_order.push(i);
            }
        }
    }
    if late_order.is_empty() {
        return 0;
    }
    // Move, in one pass per block: out of the old blocks, then into each new block right
    // before the first user there (operands before users among the moved).
    let mut moved_out: SecondaryMap<Block, bool> = SecondaryMap::new();
    let mut moved_in: SecondaryMap<Block, Vec<Inst>> = SecondaryMap::new();
    for &i in &late_order {
        moved_out[block_of(f, i)] = true;
        moved_in[chosen[i].expect("chosen")].push(i);
    }
    for &b in &rpo {
        if moved_out[b] {
            let keep: Vec<Inst> = f
                .layout
                .block_insts(b)
                .iter()
                .copied()
                .filter(|&i| chosen[i].is_none())
                .collect();
            f.layout.set_block_insts(b, &keep);
        }
    }
    for &b in &rpo {
        let incoming = std::mem::take(&mut moved_in[b]);
        if incoming.is_empty() {
            continue;
        }
        let staying = f.layout.block_insts(b).to_vec();
        let mut pos: SecondaryMap<Inst, u32> = SecondaryMap::new();
        for (k, &i) in staying.iter().enumerate() {
            pos[i] = k as u32;
        }
        // The position of the staying instruction each moved one goes before: its first
        // user there, directly or through moved users (known first: late order).
        let mut anchor: SecondaryMap<Inst, u32> = SecondaryMap::new();
        for &i in &incoming {
            let mut a = staying.len() as u32 - 1;
            for &r in f.inst_results(i) {
                for &u in &users[r] {
                    if chosen[u] == Some(b) {
                        a = a.min(anchor[u]);
                    } else if chosen[u].is_none() && f.layout.inst_block(u) == Some(b) {
                        a = a.min(pos[u]);
                    }
                }
            }
            anchor[i] = a;
        }
        let mut incoming = incoming;
        incoming.reverse(); // operands before users
        incoming.sort_by_key(|&i| anchor[i]); // stable
        let mut out = Vec::with_capacity(staying.len() + incoming.len());
        let mut next = incoming.iter().peekable();
        for (k, &s) in staying.iter().enumerate() {
            while let Some(&&i) = next.peek().filter(|&&&i| anchor[i] == k as u32) {
                out.push(i);
                next.next();
            }
            out.push(s);
        }
        f.layout.set_block_insts(b, &out);
    }
    late_order.len()
}

/// A movable computation other than a constant, by operator and operands (see
/// [`number`]).
#[derive(PartialEq, Eq, Hash)]
enum Computation {
    Unary(UnaryOp, Value),
    Binary(BinaryOp, [Value; 2]),
    Cmp(CmpOp, [Value; 2]),
    Select(Value, [Value; 2]),
    Cast(Scalar, Value),
    Len(Value),
}

impl Computation {
    fn of(f: &Function, data: &InstData) -> Option<Computation> {
        if !movable(f, data) {
            return None;
        }
        Some(match *data {
            InstData::Unary { op, arg } => Computation::Unary(op, arg),
            InstData::Binary { op, args } => Computation::Binary(op, args),
            InstData::Cmp { op, args } => Computation::Cmp(op, args),
            InstData::Select { cond, args } => Computation::Select(cond, args),
            InstData::Cast { to, arg } => Computation::Cast(to, arg),
            InstData::Len { arg } => Computation::Len(arg),
            _ => return None,
        })
    }
}

/// Value numbering within each block (see the module doc): removes the movable
/// instructions (but constants) that repeat an earlier one of their block, their results
/// replaced by its. Returns how many were removed. Run after [`place`].
pub fn number(f: &mut Function) -> usize {
    let cfg = ControlFlowGraph::compute(f);
    let dfs = DfsOrder::compute(cfg.graph(), 0);
    let mut alias: SecondaryMap<Value, PackedOption<Value>> = SecondaryMap::new();
    let mut seen: HashMap<Computation, Value> = HashMap::new();
    let mut removed = 0;
    // Reverse post-order: a definition's block before every block that uses it.
    for b in dfs.rpo().into_iter().map(|n| cfg.block(n)) {
        seen.clear();
        let mut keep = Vec::new();
        let mut dropped = false;
        for &i in f.layout.block_insts(b) {
            f.insts[i].visit_operands_mut(|v| {
                if let Some(a) = alias[*v].expand() {
                    *v = a;
                }
            });
            if let Some(c) = Computation::of(f, &f.insts[i]) {
                let r = f.first_result(i);
                match seen.entry(c) {
                    Entry::Occupied(e) => {
                        alias[r] = (*e.get()).into();
                        dropped = true;
                        removed += 1;
                        continue;
                    }
                    Entry::Vacant(e) => {
                        e.insert(r);
                    }
                }
            }
            keep.push(i);
        }
        if dropped {
            f.layout.set_block_insts(b, &keep);
        }
    }
    if removed > 0 {
        // Blocks no path reaches were not visited: their uses too.
        let unreached = (0..cfg.num_blocks()).filter(|&n| !dfs.is_reachable(n));
        for b in unreached.map(|n| cfg.block(n)).collect::<Vec<_>>() {
            for k in 0..f.layout.block_insts(b).len() {
                let i = f.layout.block_insts(b)[k];
                f.insts[i].visit_operands_mut(|v| {
                    if let Some(a) = alias[*v].expand() {
                        *v = a;
                    }
                });
            }
        }
    }
    removed
}

/// The dominator tree with jump pointers (binary lifting): common ancestors and searches up
/// a path in O(log n), however deep the tree (a chain of 100,000 blocks is one).
struct Lifting {
    depth: SecondaryMap<Block, u32>,
    /// `up[k][b]`: the ancestor `2^k` levels above `b` (the root for beyond).
    up: Vec<SecondaryMap<Block, Block>>,
}

impl Lifting {
    fn new(rpo: &[Block], doms: &DominatorTree) -> Lifting {
        let root = rpo[0];
        let mut depth = SecondaryMap::new();
        let mut parent: SecondaryMap<Block, Block> = SecondaryMap::with_default(root);
        let mut max = 0;
        for &b in &rpo[1..] {
            let d = doms.idom(b).expect("reachable");
            parent[b] = d;
            depth[b] = depth[d] + 1;
            max = max.max(depth[b]);
        }
        let mut up = vec![parent];
        while (1u32 << up.len()) <= max {
            let last = up.last().expect("one level");
            let mut next = SecondaryMap::with_default(root);
            for &b in rpo {
                next[b] = last[last[b]];
            }
            up.push(next);
        }
        Lifting { depth, up }
    }

    fn lca(&self, mut a: Block, mut b: Block) -> Block {
        if self.depth[a] < self.depth[b] {
            std::mem::swap(&mut a, &mut b);
        }
        let diff = self.depth[a] - self.depth[b];
        for (k, up) in self.up.iter().enumerate() {
            if diff >> k & 1 == 1 {
                a = up[a];
            }
        }
        if a == b {
            return a;
        }
        for up in self.up.iter().rev() {
            if up[a] != up[b] {
                a = up[a];
                b = up[b];
            }
        }
        self.up[0][a]
    }

    /// The deepest ancestor of `x` (itself included) where `ok` holds, for an `ok` that
    /// holds from some ancestor up to the root and nowhere below it.
    fn deepest_ancestor(&self, mut x: Block, ok: impl Fn(Block) -> bool) -> Block {
        if ok(x) {
            return x;
        }
        for up in self.up.iter().rev() {
            if !ok(up[x]) {
                x = up[x];
            }
        }
        self.up[0][x]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::func;
    use crate::interp::Memory;

    /// Specializes `f` of `src` on `args` (through the residual backend): the result and
    /// the operations the stitcher processed.
    fn specialize(src: &str, args: &[i64]) -> (Option<crate::interp::Val>, usize) {
        let m = crate::lang::compile("t.dyc", src).expect("compiles");
        let id = m.func_by_name("f").expect("f");
        let args: Vec<crate::interp::Val> = args
            .iter()
            .map(|&a| {
                crate::interp::Val::Scalar(crate::ir::Const::Int(crate::ir::Scalar::I64, a as u64))
            })
            .collect();
        let budget = dyc_stitcher::ge::Budget::default();
        let r = crate::residual::run(
            &m,
            id,
            &args,
            &mut Memory::default(),
            &mut func::hosts(),
            1_000_000,
            budget,
        )
        .expect("specializes and runs");
        (r.result, r.ops)
    }

    /// A static computation inside a loop unrolled at specialization time, invariant in
    /// it, runs once per specialization: exactly as many operations as with the
    /// computation written before the loop (without placement, four more per iteration).
    #[test]
    fn invariant_setup_code_leaves_unrolled_loops() {
        let inside = "fn f(n: i64, k: i64, x: i64) -> i64 {
    make_static(n, k);
    var acc = x;
    var i = 0;
    while i < n {
        acc = acc + (k * 3 + 1) * i;
        i += 1;
    }
    return acc;
}";
        let before = "fn f(n: i64, k: i64, x: i64) -> i64 {
    make_static(n, k);
    var acc = x;
    var i = 0;
    let t = k * 3 + 1;
    while i < n {
        acc = acc + t * i;
        i += 1;
    }
    return acc;
}";
        let (a, ops_inside) = specialize(inside, &[20, 5, 7]);
        let (b, ops_before) = specialize(before, &[20, 5, 7]);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(ops_inside, ops_before);
    }

    /// On random modules, the placed functions verify and compute what the originals do
    /// (results, errors by kind and place, memory).
    #[test]
    fn placed_functions_verify_and_compute_the_same() {
        crate::gen::tests::pass_keeps_semantics("placement", place);
    }

    /// The same with value numbering after placement.
    #[test]
    fn numbered_functions_verify_and_compute_the_same() {
        crate::gen::tests::pass_keeps_semantics("placement and numbering", |f| {
            place(f);
            number(f)
        });
    }

    /// Two handlers of an interpreter loop that each test `len(input)`: placement moves
    /// both out of the loop, into one block, and numbering leaves one, which every copy
    /// of the loop's blocks then passes on as one value instead of two; the stitcher
    /// processes fewer operations for the same result.
    #[test]
    fn repeated_computations_placement_gathers_become_one() {
        let src = "fn f(code: [i64], input: [i64]) -> i64 {
    var pc = 0;
    var acc = 0;
    make_static(code, pc);
    loop {
        let op = code@[pc];
        pc += 1;
        switch op {
            case 0: return acc;
            case 1: if 3 < len(input) { acc = acc + input[3]; }
            case 2: if 5 < len(input) { acc = acc * input[5]; }
            default: trap;
        }
    }
}";
        let m = crate::lang::compile("t.dyc", src).expect("compiles");
        let id = m.func_by_name("f").expect("f");
        let lens = |f: &Function| {
            let blocks = f.layout.blocks().iter();
            blocks
                .flat_map(|&b| f.layout.block_insts(b))
                .filter(|&&i| matches!(f.insts[i], InstData::Len { .. }))
                .count()
        };
        let mut f = m.funcs[id].clone();
        assert_eq!(lens(&f), 2);
        place(&mut f);
        assert_eq!(lens(&f), 2);
        assert_eq!(number(&mut f), 1);
        assert_eq!(lens(&f), 1);
        crate::verifier::verify_function_in(&m, &f).expect("verifies");
    }
}

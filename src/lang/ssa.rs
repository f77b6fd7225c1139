//! SSA construction for the front end, with block parameters as φ-functions.
//!
//! Algorithm: Braun, Buchwald, Hack, Leißa, Mallon, Zwinkau, "Simple and Efficient
//! Construction of Static Single Assignment Form" (CC 2013), the on-the-fly variant:
//! - `write(var, block, value)` records the current definition of a source variable;
//! - `read(var, block)` returns it, or looks it up in the predecessors: through a single
//!   predecessor directly, at a merge by adding a block parameter tagged with the variable
//!   and passing the variable's value from every predecessor as a branch argument;
//! - a block whose predecessors are not all known yet (a loop header, a `goto` label) is
//!   **unsealed**: a read there adds an *incomplete* parameter, whose arguments are filled
//!   in when the block is sealed.
//!
//! A new merge parameter whose arguments all come out as one value, when filling them made
//! no other merge, is taken back at once (a variable that no branch assigns, read after an
//! `if`: the common case). Every other trivial φ is left to [`remove_trivial_params`],
//! which removes them afterwards to a fixed point, in linear time with a work list: a
//! parameter whose incoming arguments are all one value `v` (or the parameter itself) is
//! replaced by `v`. Unreachable blocks are removed first
//! ([`remove_unreachable_blocks`]), so their arguments do not keep parameters alive. The
//! result is minimal SSA on reducible CFGs, and correct (if not always minimal) on
//! irreducible ones.
//!
//! A read that reaches the entry block without a definition means a `goto` jumped past the
//! variable's declaration: the builder records it in [`SsaBuilder::uninitialized`] and the
//! front end reports it.

use rustc_hash::FxHashMap as HashMap;

use cranelift_entity::packed_option::PackedOption;
use cranelift_entity::{EntityRef, SecondaryMap};
use smallvec::SmallVec;

use crate::analysis::cfg::ControlFlowGraph;
use crate::ir::{Block, Function, Inst, Type, Value, ValueDef, Var};

/// The identity of a declared variable (declarations with one name are distinct).
pub type VarId = usize;

/// What the builder needs to know of a variable.
#[derive(Clone, Debug)]
pub struct VarInfo {
    pub ty: Type,
    pub ir_var: Var,
}

#[derive(Default)]
pub struct SsaBuilder {
    defs: HashMap<(VarId, Block), Value>,
    sealed: SecondaryMap<Block, bool>,
    /// The incomplete parameters of unsealed blocks (few: loop headers and labels).
    incomplete: HashMap<Block, Vec<(VarId, Value)>>,
    /// The predecessors of each block (inline up to four).
    preds: SecondaryMap<Block, SmallVec<[Block; 4]>>,
    /// Scratch lists of `walk` and `fill_args`, kept to reuse their memory.
    chain: Vec<Block>,
    stack: Vec<(Block, usize, usize)>,
    /// The number of merge parameters made so far.
    merges: usize,
    /// Variables read before any definition on some path from the entry.
    pub uninitialized: Vec<VarId>,
    entry: Option<Block>,
}

impl SsaBuilder {
    pub fn new(entry: Block) -> SsaBuilder {
        let mut b = SsaBuilder {
            entry: Some(entry),
            ..SsaBuilder::default()
        };
        b.sealed[entry] = true;
        b
    }

    /// Records an edge `from -> to`; the caller records each edge once.
    pub fn add_pred(&mut self, to: Block, from: Block) {
        debug_assert!(!self.sealed[to], "edge into sealed {to}");
        self.preds[to].push(from);
    }

    /// Whether some edge into `b` has been recorded.
    pub fn has_preds(&self, b: Block) -> bool {
        !self.preds[b].is_empty()
    }

    pub fn is_sealed(&self, b: Block) -> bool {
        self.sealed[b]
    }

    pub fn write(&mut self, var: VarId, block: Block, value: Value) {
        self.defs.insert((var, block), value);
    }

    /// The value of `var` at the end of `block`.
    ///
    /// Iterative: the predecessors of every merge met on the way are visited from an
    /// explicit stack, so a variable read after a long chain of merges costs no native
    /// stack.
    ///
    /// A new merge parameter whose arguments all turn out to be one value, with no other
    /// merge made on the way, is taken back at once (the common case of a variable that no
    /// branch assigns); the others are left to [`remove_trivial_params`].
    pub fn read(&mut self, f: &mut Function, vars: &[VarInfo], var: VarId, block: Block) -> Value {
        let (value, merge) = self.walk(f, vars, var, block);
        let Some((b, p)) = merge else {
            return value;
        };
        let merges = self.merges;
        self.fill_args(f, vars, var, b, p);
        if self.merges != merges {
            return value;
        }
        // The arguments of `p`, the last parameter of `b`: one value `v`, or keep `p`.
        let mut same = None;
        for &pred in &self.preds[b] {
            let term = f
                .terminator(pred)
                .expect("a predecessor ends with its branch");
            for call in f.insts[term].branch_targets() {
                if call.block == b {
                    let a = *call.args.last().expect("the argument of `p`");
                    if a == p || same.is_some_and(|v| v != a) {
                        return value;
                    }
                    same = Some(a);
                }
            }
        }
        let Some(v) = same else {
            return value;
        };
        debug_assert_eq!(f.blocks[b].params.last(), Some(&p));
        f.blocks[b].params.pop();
        f.values[p].def = ValueDef::Unused;
        for &pred in &self.preds[b] {
            let term = f
                .terminator(pred)
                .expect("a predecessor ends with its branch");
            for call in f.insts[term].branch_targets_mut() {
                if call.block == b {
                    call.args.pop();
                }
            }
        }
        // `p` was recorded as the definition in `b` and in the blocks walked to it.
        let mut c = block;
        loop {
            self.defs.insert((var, c), v);
            if c == b {
                break;
            }
            c = self.preds[c][0];
        }
        v
    }

    /// Follows single-predecessor chains from `block` to a definition of `var`, or to a
    /// merge, where it adds a parameter and returns it with its block: its arguments are
    /// still to be passed ([`SsaBuilder::fill_args`]).
    fn walk(
        &mut self,
        f: &mut Function,
        vars: &[VarInfo],
        var: VarId,
        block: Block,
    ) -> (Value, Option<(Block, Value)>) {
        // Remember the blocks passed, to record the definition in each.
        let mut chain = std::mem::take(&mut self.chain);
        let mut b = block;
        let mut merge = None;
        let value = loop {
            if let Some(&v) = self.defs.get(&(var, b)) {
                break v;
            }
            if !self.sealed[b] {
                let p = f.append_block_param(b, vars[var].ty, Some(vars[var].ir_var));
                self.incomplete.entry(b).or_default().push((var, p));
                break p;
            }
            match self.preds[b].len() {
                1 => {
                    chain.push(b);
                    b = self.preds[b][0];
                }
                0 => {
                    if Some(b) == self.entry {
                        self.uninitialized.push(var);
                        // A stand-in: the front end reports the error and emits no IR.
                        let dummy = f.create_block();
                        break f.append_block_param(dummy, vars[var].ty, None);
                    }
                    // Unreachable code: a parameter of a block without predecessors.
                    break f.append_block_param(b, vars[var].ty, Some(vars[var].ir_var));
                }
                _ => {
                    let p = f.append_block_param(b, vars[var].ty, Some(vars[var].ir_var));
                    self.merges += 1;
                    merge = Some((b, p));
                    break p;
                }
            }
        };
        self.defs.insert((var, b), value);
        for c in chain.drain(..) {
            self.defs.insert((var, c), value);
        }
        self.chain = chain;
        (value, merge)
    }

    /// Passes `var` from every predecessor of `b` to its new parameter `p`, and so on for
    /// the parameters this adds at other merges, depth first from an explicit stack.
    fn fill_args(&mut self, f: &mut Function, vars: &[VarInfo], var: VarId, b: Block, p: Value) {
        let index_of = |f: &Function, p: Value| match f.values[p].def {
            ValueDef::Param(_, n) => n as usize,
            _ => unreachable!("a block parameter"),
        };
        // (merge block, its parameter's index, the next predecessor to visit)
        let mut stack = std::mem::take(&mut self.stack);
        stack.push((b, index_of(f, p), 0usize));
        while let Some(top) = stack.last_mut() {
            let (b, index, next) = *top;
            let Some(&pred) = self.preds[b].get(next) else {
                stack.pop();
                continue;
            };
            top.2 += 1;
            let (v, merge) = self.walk(f, vars, var, pred);
            let term = f
                .terminator(pred)
                .expect("a predecessor ends with its branch");
            for call in f.insts[term].branch_targets_mut() {
                if call.block == b {
                    debug_assert_eq!(call.args.len(), index, "arguments in parameter order");
                    call.args.push(v);
                }
            }
            if let Some((mb, mp)) = merge {
                stack.push((mb, index_of(f, mp), 0));
            }
        }
        self.stack = stack;
    }

    /// Declares that every predecessor of `b` is known.
    pub fn seal(&mut self, f: &mut Function, vars: &[VarInfo], b: Block) {
        if self.sealed[b] {
            return;
        }
        self.sealed[b] = true;
        for (var, p) in self.incomplete.remove(&b).unwrap_or_default() {
            self.fill_args(f, vars, var, b, p);
        }
    }
}

/// Removes the blocks not reachable from the entry from the layout.
pub fn remove_unreachable_blocks(f: &mut Function) {
    let cfg = ControlFlowGraph::compute(f);
    let g = cfg.graph();
    let mut reachable = vec![false; g.len()];
    let mut stack = Vec::new();
    if !g.is_empty() {
        reachable[0] = true;
        stack.push(0);
    }
    while let Some(n) = stack.pop() {
        for &s in &g.succs[n] {
            if !reachable[s] {
                reachable[s] = true;
                stack.push(s);
            }
        }
    }
    f.layout
        .retain_blocks(|b| cfg.node(b).is_some_and(|n| reachable[n]));
}

/// Replaces every block parameter whose incoming arguments are a single other value by
/// that value, to a fixed point, and rewrites all uses.
///
/// Cost: linear in the size of the function (up to the near-constant factor of the alias
/// resolution). The incoming edges of every block are indexed once; a work list holds the
/// parameters to examine; when a parameter is replaced, only the parameters that receive it
/// as an argument are examined again. Removed parameters and their arguments are deleted
/// in one pass at the end. The tables are flat arrays (no allocation per block or value):
/// the edges into each block in compressed rows, the parameters numbered from a per-block
/// base, and the receivers of each value as a linked list in one array.
pub fn remove_trivial_params(f: &mut Function) {
    let entry = f.entry_block();
    let blocks = f.layout.blocks().to_vec();
    // The branches into each block, as (terminator, index among its targets), in rows
    // `incoming[start[b]..start[b + 1]]` (a block's row is `start[b.index()]..`).
    let row = |b: Block| b.index();
    let mut start = vec![0u32; f.blocks.len() + 1];
    for &b in &blocks {
        if let Some(t) = f.terminator(b) {
            for call in f.insts[t].branch_targets() {
                start[row(call.block) + 1] += 1;
            }
        }
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut fill = start.clone();
    let mut incoming = vec![(Inst::from_u32(0), 0usize); start[start.len() - 1] as usize];
    for &b in &blocks {
        if let Some(t) = f.terminator(b) {
            for (n, call) in f.insts[t].branch_targets().enumerate() {
                let slot = &mut fill[row(call.block)];
                incoming[*slot as usize] = (t, n);
                *slot += 1;
            }
        }
    }
    let edges = |b: Block| &incoming[start[row(b)] as usize..start[row(b) + 1] as usize];
    let edge_arg = |f: &Function, (t, n): (Inst, usize), k: usize| -> Value {
        f.insts[t].branch_target(n).expect("an edge").args[k]
    };
    // Parameter `k` of block `b` is number `base[b] + k`.
    let mut base = vec![0u32; f.blocks.len()];
    let mut params = 0u32;
    for &b in &blocks {
        base[row(b)] = params;
        params += f.block_params(b).len() as u32;
    }
    let mut removed = vec![false; params as usize];
    let id = |b: Block, k: usize| base[row(b)] as usize + k;
    // The parameters (block, index) that receive each value as an argument: a linked list
    // per value through `links`, from `head[value]`.
    const NIL: u32 = u32::MAX;
    let mut head: SecondaryMap<Value, u32> = SecondaryMap::with_default(NIL);
    let mut links: Vec<((Block, usize), u32)> = Vec::new();
    for &b in &blocks {
        for &(t, n) in edges(b) {
            let call = f.insts[t].branch_target(n).expect("an edge");
            for (k, &a) in call.args.iter().enumerate() {
                links.push(((b, k), head[a]));
                head[a] = links.len() as u32 - 1;
            }
        }
    }
    let mut alias: SecondaryMap<Value, PackedOption<Value>> = SecondaryMap::new();
    let mut any_removed = false;
    // Examined in layout order (the work list pops from its end), so that a parameter is
    // usually examined after those it receives: aliases then point at their final value
    // directly and few parameters need a second look.
    let mut work: Vec<(Block, usize)> = Vec::with_capacity(params as usize);
    for &b in blocks.iter().rev() {
        if Some(b) != entry {
            work.extend((0..f.block_params(b).len()).rev().map(|k| (b, k)));
        }
    }
    while let Some((b, k)) = work.pop() {
        if removed[id(b, k)] || edges(b).is_empty() {
            continue;
        }
        let p = f.block_params(b)[k];
        let mut same: Option<Value> = None;
        let mut trivial = true;
        for &e in edges(b) {
            let v = resolve(&mut alias, edge_arg(f, e, k));
            if v == p || Some(v) == same {
                continue;
            }
            if same.is_some() {
                trivial = false;
                break;
            }
            same = Some(v);
        }
        let Some(v) = same.filter(|_| trivial) else {
            continue;
        };
        alias[p] = v.into();
        any_removed = true;
        removed[id(b, k)] = true;
        // Parameters that received `p` now receive `v`: look at them again, and move them
        // to `v`'s list (those already removed need nothing more and are dropped, so the
        // lists stay short).
        let mut at = std::mem::replace(&mut head[p], NIL);
        while at != NIL {
            let ((ub, uk), next) = links[at as usize];
            if !removed[id(ub, uk)] {
                work.push((ub, uk));
                links[at as usize].1 = head[v];
                head[v] = at;
            }
            at = next;
        }
    }
    if !any_removed {
        return;
    }
    for &b in &blocks {
        let gone = &removed[id(b, 0)..id(b, f.block_params(b).len())];
        if !gone.contains(&true) {
            continue;
        }
        let mut n = 0;
        let mut kept = 0;
        let values = &mut f.values;
        f.blocks[b].params.retain(|&p| {
            n += 1;
            if gone[n - 1] {
                values[p].def = ValueDef::Unused;
                false
            } else {
                values[p].def = ValueDef::Param(b, kept);
                kept += 1;
                true
            }
        });
        for &(t, e) in edges(b) {
            let call = f.insts[t].branch_target_mut(e).expect("an edge");
            let mut k = 0;
            call.args.retain(|_| {
                k += 1;
                !gone[k - 1]
            });
        }
    }
    for &b in &blocks {
        for &i in f.layout.block_insts(b) {
            f.insts[i].visit_operands_mut(|v| *v = resolve(&mut alias, *v));
        }
    }
}

/// The value `v` stands for, shortening the alias chain it walked.
fn resolve(alias: &mut SecondaryMap<Value, PackedOption<Value>>, v: Value) -> Value {
    let mut root = v;
    while let Some(w) = alias[root].expand() {
        root = w;
    }
    let mut x = v;
    while let Some(w) = alias[x].expand() {
        if w == root {
            break;
        }
        alias[x] = root.into();
        x = w;
    }
    root
}

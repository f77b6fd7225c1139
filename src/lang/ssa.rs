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
//! Instead of removing trivial φs during construction, [`remove_trivial_params`] does it
//! afterwards to a fixed point: a parameter whose incoming arguments are all one value `v`
//! (or the parameter itself) is replaced by `v`. Unreachable blocks are removed first
//! ([`remove_unreachable_blocks`]), so their arguments do not keep parameters alive. The
//! result is minimal SSA on reducible CFGs, and correct (if not always minimal) on
//! irreducible ones.
//!
//! A read that reaches the entry block without a definition means a `goto` jumped past the
//! variable's declaration: the builder records it in [`SsaBuilder::uninitialized`] and the
//! front end reports it.

use std::collections::HashMap;

use cranelift_entity::SecondaryMap;

use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::order::DfsOrder;
use crate::ir::{Block, Function, Type, Value, ValueDef, Var};

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
    incomplete: SecondaryMap<Block, Vec<(VarId, Value)>>,
    preds: SecondaryMap<Block, Vec<Block>>,
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

    /// Records an edge `from -> to` (call once per edge; repeated edges are kept once).
    pub fn add_pred(&mut self, to: Block, from: Block) {
        debug_assert!(!self.sealed[to], "edge into sealed {to}");
        if !self.preds[to].contains(&from) {
            self.preds[to].push(from);
        }
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

    pub fn read(&mut self, f: &mut Function, vars: &[VarInfo], var: VarId, block: Block) -> Value {
        // Walk single-predecessor chains iteratively; remember the blocks passed.
        let mut chain = Vec::new();
        let mut b = block;
        let value = loop {
            if let Some(&v) = self.defs.get(&(var, b)) {
                break v;
            }
            if !self.sealed[b] {
                let p = f.append_block_param(b, vars[var].ty, Some(vars[var].ir_var));
                self.incomplete[b].push((var, p));
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
                    self.defs.insert((var, b), p);
                    self.fill_args(f, vars, var, b, p);
                    break p;
                }
            }
        };
        self.defs.insert((var, b), value);
        for c in chain {
            self.defs.insert((var, c), value);
        }
        value
    }

    /// Passes `var` from every predecessor of `b` to its new parameter `p`.
    fn fill_args(&mut self, f: &mut Function, vars: &[VarInfo], var: VarId, b: Block, p: Value) {
        let index = f
            .block_params(b)
            .iter()
            .position(|&x| x == p)
            .expect("parameter of b");
        for pred in self.preds[b].clone() {
            let v = self.read(f, vars, var, pred);
            let term = f
                .terminator(pred)
                .expect("a predecessor ends with its branch");
            for call in f.insts[term].branch_targets_mut() {
                if call.block == b {
                    debug_assert_eq!(call.args.len(), index, "arguments in parameter order");
                    call.args.push(v);
                }
            }
        }
    }

    /// Declares that every predecessor of `b` is known.
    pub fn seal(&mut self, f: &mut Function, vars: &[VarInfo], b: Block) {
        if self.sealed[b] {
            return;
        }
        self.sealed[b] = true;
        for (var, p) in std::mem::take(&mut self.incomplete[b]) {
            self.fill_args(f, vars, var, b, p);
        }
    }
}

/// Removes the blocks not reachable from the entry from the layout.
pub fn remove_unreachable_blocks(f: &mut Function) {
    let cfg = ControlFlowGraph::compute(f);
    let dfs = DfsOrder::compute(cfg.graph(), 0);
    for n in 0..cfg.num_blocks() {
        if !dfs.is_reachable(n) {
            f.layout.remove_block(cfg.block(n));
        }
    }
}

/// Replaces every block parameter whose incoming arguments are a single other value by
/// that value, to a fixed point, and rewrites all uses.
pub fn remove_trivial_params(f: &mut Function) {
    let mut alias: HashMap<Value, Value> = HashMap::new();
    let resolve = |alias: &HashMap<Value, Value>, mut v: Value| {
        while let Some(&w) = alias.get(&v) {
            v = w;
        }
        v
    };
    let entry = f.entry_block();
    loop {
        // Incoming argument lists per block.
        let mut incoming: SecondaryMap<Block, Vec<Vec<Value>>> = SecondaryMap::new();
        for &b in f.layout.blocks() {
            if let Some(t) = f.terminator(b) {
                for call in f.insts[t].branch_targets() {
                    incoming[call.block].push(call.args.clone());
                }
            }
        }
        let mut removed = Vec::new();
        for &b in f.layout.blocks() {
            if Some(b) == entry {
                continue;
            }
            for (k, &p) in f.block_params(b).iter().enumerate() {
                let mut same: Option<Value> = None;
                let mut trivial = !incoming[b].is_empty();
                for args in &incoming[b] {
                    let v = resolve(&alias, args[k]);
                    if v == p || Some(v) == same {
                        continue;
                    }
                    if same.is_some() {
                        trivial = false;
                        break;
                    }
                    same = Some(v);
                }
                // (A value that resolves back to `p` would make an alias cycle.)
                if let (true, Some(v)) = (trivial, same.filter(|&v| resolve(&alias, v) != p)) {
                    alias.insert(p, v);
                    removed.push((b, k));
                }
            }
        }
        if removed.is_empty() {
            break;
        }
        // Remove from the highest index down so the lower indices stay valid.
        removed.sort_by_key(|&(_, k)| std::cmp::Reverse(k));
        for (b, k) in removed {
            remove_block_param(f, b, k);
        }
    }
    if alias.is_empty() {
        return;
    }
    let blocks = f.layout.blocks().to_vec();
    for b in blocks {
        for i in f.layout.block_insts(b).to_vec() {
            f.insts[i].visit_operands_mut(|v| *v = resolve(&alias, *v));
        }
    }
}

/// Removes parameter `k` of `b` and the matching argument of every branch to `b`.
fn remove_block_param(f: &mut Function, b: Block, k: usize) {
    let p = f.blocks[b].params.remove(k);
    f.values[p].def = ValueDef::Unused;
    for (n, &q) in f.blocks[b].params.iter().enumerate().skip(k) {
        f.values[q].def = ValueDef::Param(b, n);
    }
    for &x in f.layout.blocks() {
        if let Some(t) = f.terminator(x) {
            for call in f.insts[t].branch_targets_mut() {
                if call.block == b {
                    call.args.remove(k);
                }
            }
        }
    }
}

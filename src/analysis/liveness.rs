//! Liveness of SSA values at block boundaries.
//!
//! A value is **live-in** at block `b` if some path from the start of `b` uses it before
//! any redefinition (in SSA: before leaving its definition's dominance, i.e. it is used on
//! some path and not defined in `b`). Block parameters are defined at the top of their
//! block; branch arguments are uses at the end of the branching block. The classic backward
//! data-flow equations, iterated over the blocks in post-order until stable:
//!
//! ```text
//! live_out(b) = ⋃ { live_in(s) \ params(s) : s ∈ succ(b) }
//! live_in(b)  = uses(b) ∪ (live_out(b) \ defs(b))
//! ```
//!
//! where `uses(b)` are the operands of `b` (branch arguments included) not defined earlier
//! in `b`, and `defs(b)` are its parameters and instruction results. Cost: O(iterations ·
//! (blocks + edges) · live values); iterations are bounded by the loop nesting depth + 2 on
//! reducible CFGs. Computed for every block of the layout, reachable or not.

use std::collections::BTreeSet;

use cranelift_entity::SecondaryMap;

use super::cfg::ControlFlowGraph;
use super::order::DfsOrder;
use crate::ir::{Block, Function, Value};

#[derive(Clone, Debug, Default)]
pub struct Liveness {
    live_in: SecondaryMap<Block, BTreeSet<Value>>,
    live_out: SecondaryMap<Block, BTreeSet<Value>>,
}

impl Liveness {
    pub fn compute(f: &Function, cfg: &ControlFlowGraph) -> Liveness {
        let mut uses: SecondaryMap<Block, BTreeSet<Value>> = SecondaryMap::new();
        let mut defs: SecondaryMap<Block, BTreeSet<Value>> = SecondaryMap::new();
        for &b in f.layout.blocks() {
            let mut d: BTreeSet<Value> = f.block_params(b).iter().copied().collect();
            let mut u = BTreeSet::new();
            for &i in f.layout.block_insts(b) {
                f.insts[i].visit_operands(|v| {
                    if !d.contains(v) {
                        u.insert(*v);
                    }
                });
                d.extend(f.inst_results(i).iter().copied());
            }
            uses[b] = u;
            defs[b] = d;
        }
        // Post-order of the reachable blocks, then the unreachable ones.
        let dfs = DfsOrder::compute(cfg.graph(), 0);
        let mut order: Vec<Block> = dfs.postorder.iter().map(|&n| cfg.block(n)).collect();
        order.extend(
            (0..cfg.num_blocks())
                .filter(|&n| !dfs.is_reachable(n))
                .map(|n| cfg.block(n)),
        );
        let mut l = Liveness::default();
        let mut changed = true;
        while changed {
            changed = false;
            for &b in &order {
                let mut out = BTreeSet::new();
                for s in cfg.succs(b) {
                    let params = f.block_params(s);
                    out.extend(l.live_in[s].iter().filter(|v| !params.contains(v)).copied());
                }
                let mut inn = uses[b].clone();
                inn.extend(out.iter().filter(|v| !defs[b].contains(v)).copied());
                if inn != l.live_in[b] || out != l.live_out[b] {
                    l.live_in[b] = inn;
                    l.live_out[b] = out;
                    changed = true;
                }
            }
        }
        l
    }

    pub fn live_in(&self, b: Block) -> &BTreeSet<Value> {
        &self.live_in[b]
    }

    pub fn live_out(&self, b: Block) -> &BTreeSet<Value> {
        &self.live_out[b]
    }

    pub fn is_live_in(&self, b: Block, v: Value) -> bool {
        self.live_in[b].contains(&v)
    }
}

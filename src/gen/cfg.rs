//! Random CFGs, as functions `fn cfg(bool, i64)` whose branches test the parameters.
//!
//! [`structured`] builds nested sequences, `if`/`else`, loops with `break` and `continue`,
//! `switch`es and early returns: every loop has one entry, so the CFG is reducible by
//! construction. [`with_random_edges`] then turns some jumps into branches to arbitrary
//! blocks, which makes side entrances into loops (irreducible loops) likely, and
//! [`random`] wires blocks at random (unreachable blocks included).

use super::Rng;
use crate::ir::{Block, BlockCall, Function, InstData, Module, Signature, Type, Value};

struct Ctx<'a> {
    f: &'a mut Function,
    rng: &'a mut Rng,
    cond: Value,
    sel: Value,
    budget: usize,
}

fn call(b: Block) -> BlockCall {
    BlockCall::new(b, Vec::new())
}

fn new_fn() -> (Function, Value, Value) {
    let mut f = Function::new(
        "cfg",
        Signature {
            params: vec![Type::BOOL, Type::I64],
            ret: None,
        },
    );
    let entry = f.append_new_block();
    let cond = f.append_block_param(entry, Type::BOOL, None);
    let sel = f.append_block_param(entry, Type::I64, None);
    (f, cond, sel)
}

impl Ctx<'_> {
    fn term(&mut self, b: Block, data: InstData) {
        self.f.append_inst(b, data, None);
    }

    fn brif(&mut self, b: Block, t: Block, e: Block) {
        let cond = self.cond;
        self.term(
            b,
            InstData::Brif {
                cond,
                then_dest: call(t),
                else_dest: call(e),
            },
        );
    }

    /// Generates a region starting at `cur`; returns the block where control continues,
    /// or `None` if every path left the region (return, break, continue).
    fn region(&mut self, cur: Block, depth: u32, loops: &mut Vec<(Block, Block)>) -> Option<Block> {
        let mut cur = cur;
        let steps = 1 + self.rng.below(3);
        for _ in 0..steps {
            if self.budget == 0 {
                return Some(cur);
            }
            self.budget -= 1;
            let choice = if depth > 3 { 0 } else { self.rng.below(10) };
            match choice {
                0 | 1 => {
                    let next = self.f.append_new_block();
                    self.term(cur, InstData::Jump { dest: call(next) });
                    cur = next;
                }
                2 | 3 => {
                    // if / else
                    let (t, e, join) = (
                        self.f.append_new_block(),
                        self.f.append_new_block(),
                        self.f.append_new_block(),
                    );
                    self.brif(cur, t, e);
                    let te = self.region(t, depth + 1, loops);
                    let ee = if self.rng.chance(70) {
                        self.region(e, depth + 1, loops)
                    } else {
                        Some(e)
                    };
                    for x in [te, ee].into_iter().flatten() {
                        self.term(x, InstData::Jump { dest: call(join) });
                    }
                    cur = join;
                }
                4 | 5 => {
                    // while loop: header tests, body, back edge, exit
                    let (h, body, exit) = (
                        self.f.append_new_block(),
                        self.f.append_new_block(),
                        self.f.append_new_block(),
                    );
                    self.term(cur, InstData::Jump { dest: call(h) });
                    self.brif(h, body, exit);
                    loops.push((h, exit));
                    if let Some(end) = self.region(body, depth + 1, loops) {
                        self.term(end, InstData::Jump { dest: call(h) });
                    }
                    loops.pop();
                    cur = exit;
                }
                6 => {
                    // switch with 1-4 cases
                    let n = 1 + self.rng.below(4);
                    let join = self.f.create_block();
                    let mut cases = Vec::new();
                    let mut ends = Vec::new();
                    for k in 0..n {
                        let c = self.f.append_new_block();
                        cases.push((k as u64, call(c)));
                        ends.push(self.region(c, depth + 1, loops));
                    }
                    let d = self.f.append_new_block();
                    ends.push(Some(d));
                    let sel = self.sel;
                    self.term(
                        cur,
                        InstData::Switch {
                            arg: sel,
                            cases: cases.into(),
                            default: call(d),
                        },
                    );
                    self.f.layout.append_block(join);
                    for x in ends.into_iter().flatten() {
                        self.term(x, InstData::Jump { dest: call(join) });
                    }
                    cur = join;
                }
                7 if !loops.is_empty() => {
                    // conditional break or continue out of the innermost (or an outer) loop
                    let &(h, exit) = self.rng.pick(loops);
                    let target = if self.rng.chance(50) { h } else { exit };
                    let next = self.f.append_new_block();
                    self.brif(cur, target, next);
                    cur = next;
                }
                8 => {
                    // early return on one arm
                    let (r, next) = (self.f.append_new_block(), self.f.append_new_block());
                    self.brif(cur, r, next);
                    self.term(r, InstData::Return { value: None });
                    cur = next;
                }
                _ => {
                    let next = self.f.append_new_block();
                    self.term(cur, InstData::Jump { dest: call(next) });
                    cur = next;
                }
            }
        }
        Some(cur)
    }
}

/// A reducible CFG of about `size` constructs.
pub fn structured(rng: &mut Rng, size: usize) -> Module {
    let (mut f, cond, sel) = new_fn();
    let entry = f.entry_block().expect("entry");
    let start = f.append_new_block();
    f.append_inst(entry, InstData::Jump { dest: call(start) }, None);
    let mut ctx = Ctx {
        f: &mut f,
        rng,
        cond,
        sel,
        budget: size,
    };
    if let Some(end) = ctx.region(start, 0, &mut Vec::new()) {
        ctx.term(end, InstData::Return { value: None });
    }
    let mut m = Module::default();
    m.funcs.push(f);
    m
}

/// A structured CFG in which some jumps become branches to random blocks.
pub fn with_random_edges(rng: &mut Rng, size: usize, extra: usize) -> Module {
    let mut m = structured(rng, size);
    let f = &mut m.funcs[crate::ir::FuncId::from_u32(0)];
    let cond = f.block_params(f.entry_block().expect("entry"))[0];
    let blocks: Vec<Block> = f.layout.blocks()[1..].to_vec();
    for _ in 0..extra {
        let b = *rng.pick(&blocks);
        let t = *rng.pick(&blocks);
        let term = f.terminator(b).expect("terminated");
        if let InstData::Jump { dest } = &f.insts[term] {
            let other = dest.clone();
            let (then_dest, else_dest) = if rng.chance(50) {
                (call(t), other)
            } else {
                (other, call(t))
            };
            f.insts[term] = InstData::Brif {
                cond,
                then_dest,
                else_dest,
            };
        }
    }
    m
}

/// `n` blocks wired at random: each ends in a return, a jump, a branch or a switch to
/// random non-entry blocks. Blocks may be unreachable.
pub fn random(rng: &mut Rng, n: usize) -> Module {
    let (mut f, cond, sel) = new_fn();
    let mut blocks = vec![f.entry_block().expect("entry")];
    for _ in 1..n.max(2) {
        blocks.push(f.append_new_block());
    }
    let targets = blocks[1..].to_vec();
    for &b in &blocks {
        let kind = rng.below(10);
        let mut pick = || call(*rng.pick(&targets));
        let data = match kind {
            0 => InstData::Return { value: None },
            1..=3 => InstData::Jump { dest: pick() },
            4..=8 => InstData::Brif {
                cond,
                then_dest: pick(),
                else_dest: pick(),
            },
            _ => InstData::Switch {
                arg: sel,
                cases: vec![(0, pick()), (1, pick())].into(),
                default: pick(),
            },
        };
        f.append_inst(b, data, None);
    }
    let mut m = Module::default();
    m.funcs.push(f);
    m
}

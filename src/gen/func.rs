//! Random valid modules.
//!
//! A module has three host functions (see [`hosts`]) and one to three functions; each
//! function may call itself and the functions before it. A function's CFG comes from
//! [`super::cfg`] (structured, or with random extra edges); its blocks get random typed
//! parameters carrying source variables, and its bodies are filled in reverse post-order
//! with random instructions over the values that dominate them, so the result verifies by
//! construction. Every instruction kind appears: constants, arithmetic on every type,
//! comparisons, selects, casts, `len`, loads, stores, static loads, local arrays (declared
//! in any block, read and written at constant, in-range, out-of-range and computed
//! indices), calls (module, pure and impure host, static), `make_static` with policies and
//! `make_dynamic`.

use cranelift_entity::{EntityRef, SecondaryMap};

use super::Rng;
use crate::analysis::cfg::ControlFlowGraph;
use crate::analysis::dominators::DominatorTree;
use crate::analysis::order::DfsOrder;
use crate::interp::HostFns;
use crate::ir::{
    BinaryOp, Block, BlockCall, Callee, CmpOp, Const, ExternFunc, ExternId, FuncId, Function,
    InstData, Module, Policies, Policy, Scalar, Signature, Type, UnaryOp, Value,
};
use crate::semantics;

/// Size limits of generated modules.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub max_funcs: usize,
    /// Constructs of the CFG generator (about 2-4 blocks each).
    pub cfg_size: usize,
    pub max_insts_per_block: usize,
    /// Percentage of functions whose CFG gets random extra edges.
    pub irreducible_percent: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_funcs: 3,
            cfg_size: 8,
            max_insts_per_block: 6,
            irreducible_percent: 30,
        }
    }
}

const PARAM_TYPES: [Type; 10] = [
    Type::I64,
    Type::I64,
    Type::Scalar(Scalar::I32),
    Type::Scalar(Scalar::U8),
    Type::Scalar(Scalar::U64),
    Type::F64,
    Type::BOOL,
    Type::Slice {
        elem: Scalar::I64,
        mutable: false,
    },
    Type::Slice {
        elem: Scalar::I64,
        mutable: true,
    },
    Type::Slice {
        elem: Scalar::U8,
        mutable: false,
    },
];

const VAR_NAMES: [&str; 6] = ["a", "b", "c", "i", "pc", "acc"];

/// The host functions generated modules declare: `hash` (pure), `fmix` (pure) and
/// `observe` (impure, returns nothing).
pub fn declare_hosts(m: &mut Module) -> [ExternId; 3] {
    let hash = m.externs.push(ExternFunc {
        name: "hash".into(),
        sig: Signature {
            params: vec![Type::I64],
            ret: Some(Type::I64),
        },
        pure: true,
    });
    let fmix = m.externs.push(ExternFunc {
        name: "fmix".into(),
        sig: Signature {
            params: vec![Type::F64, Type::F64],
            ret: Some(Type::F64),
        },
        pure: true,
    });
    let observe = m.externs.push(ExternFunc {
        name: "observe".into(),
        sig: Signature {
            params: vec![Type::I64],
            ret: None,
        },
        pure: false,
    });
    [hash, fmix, observe]
}

/// Implementations of the hosts of [`declare_hosts`] for the interpreter.
pub fn hosts() -> HostFns {
    let mut h = HostFns::default();
    h.register("hash", |a| match a {
        [Const::Int(Scalar::I64, x)] => Ok(Some(Const::Int(
            Scalar::I64,
            x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17),
        ))),
        _ => Err("hash takes one i64".into()),
    });
    h.register("fmix", |a| match a {
        [Const::F64(x), Const::F64(y)] => Ok(Some(Const::F64(x * 0.5 + y))),
        _ => Err("fmix takes two f64".into()),
    });
    h.register("observe", |_| Ok(None));
    h
}

/// A random valid module.
pub fn module(rng: &mut Rng, cfg: &Config) -> Module {
    let mut m = Module::default();
    let externs = declare_hosts(&mut m);
    let n = 1 + rng.below(cfg.max_funcs.max(1));
    let sigs: Vec<Signature> = (0..n)
        .map(|_| {
            let params: Vec<Type> = (0..rng.below(4)).map(|_| *rng.pick(&PARAM_TYPES)).collect();
            // Sometimes return the type of one of the slice parameters.
            let slice = params.iter().copied().find(|t| t.is_slice());
            let ret = match slice {
                Some(t) if rng.chance(20) => Some(t),
                _ if rng.chance(80) => Some(Type::Scalar(random_scalar(rng))),
                _ => None,
            };
            Signature { params, ret }
        })
        .collect();
    for (k, sig) in sigs.iter().enumerate() {
        let f = function(rng, cfg, &m, &sigs, &externs, k);
        debug_assert_eq!(&f.sig, sig);
        m.funcs.push(f);
    }
    m
}

fn random_scalar(rng: &mut Rng) -> Scalar {
    *rng.pick(&Scalar::ALL)
}

/// The CFG skeleton of one function: per block its terminator, with targets.
fn skeleton(rng: &mut Rng, cfg: &Config) -> Function {
    let size = 1 + rng.below(cfg.cfg_size.max(1));
    let mut m = if rng.chance(cfg.irreducible_percent) {
        let extra = 1 + rng.below(3);
        super::cfg::with_random_edges(rng, size, extra)
    } else {
        super::cfg::structured(rng, size)
    };
    m.funcs
        .values_mut()
        .next()
        .map(std::mem::take)
        .expect("one function")
}

struct Gen<'a> {
    rng: &'a mut Rng,
    m: &'a Module,
    sigs: &'a [Signature],
    externs: &'a [ExternId; 3],
    me: usize,
    f: Function,
}

fn function(
    rng: &mut Rng,
    cfg: &Config,
    m: &Module,
    sigs: &[Signature],
    externs: &[ExternId; 3],
    me: usize,
) -> Function {
    let shape = skeleton(rng, cfg);
    let mut g = Gen {
        rng,
        m,
        sigs,
        externs,
        me,
        f: Function::new(format!("f{me}"), sigs[me].clone()),
    };
    // Same blocks, same layout.
    let mut map: SecondaryMap<Block, Option<Block>> = SecondaryMap::new();
    for &b in shape.layout.blocks() {
        map[b] = Some(g.f.append_new_block());
    }
    let blocks: Vec<Block> = g.f.layout.blocks().to_vec();
    let entry = blocks[0];
    for &t in &sigs[me].params {
        g.f.append_block_param(entry, t, None);
    }
    for &b in &blocks[1..] {
        for _ in 0..g.rng.below(3) {
            let ty = Type::Scalar(random_scalar(g.rng));
            let var = if g.rng.chance(60) {
                Some(g.f.var(VAR_NAMES[g.rng.below(VAR_NAMES.len())]))
            } else {
                None
            };
            g.f.append_block_param(b, ty, var);
        }
    }
    // Terminator templates from the skeleton, with targets mapped.
    let terms: Vec<InstData> = shape
        .layout
        .blocks()
        .iter()
        .map(|&b| {
            let mut t = shape.insts[shape.terminator(b).expect("skeleton terminator")].clone();
            for c in t.branch_targets_mut() {
                c.block = map[c.block].expect("mapped");
            }
            t
        })
        .collect();
    for (&b, t) in blocks.iter().zip(&terms) {
        g.f.append_inst(b, t.clone(), None); // placeholder, replaced below
        let _ = b;
    }
    // Bodies in reverse post-order; pools inherited from the immediate dominator.
    let cfgraph = ControlFlowGraph::compute(&g.f);
    let dom = DominatorTree::compute(&cfgraph);
    let dfs = DfsOrder::compute(cfgraph.graph(), 0);
    let mut order: Vec<Block> = dfs.rpo().into_iter().map(|n| cfgraph.block(n)).collect();
    order.extend(blocks.iter().copied().filter(|&b| !dom.is_reachable(b)));
    let mut pool_end: SecondaryMap<Block, Vec<Value>> = SecondaryMap::new();
    for &b in &order {
        let mut pool: Vec<Value> = dom.idom(b).map(|d| pool_end[d].clone()).unwrap_or_default();
        pool.extend_from_slice(g.f.block_params(b));
        let term = g.f.layout.last_inst(b).expect("placeholder terminator");
        g.f.layout.remove_inst(term);
        let n = g.rng.below(cfg.max_insts_per_block + 1);
        for _ in 0..n {
            g.random_inst(b, &mut pool);
        }
        pool_end[b] = pool;
    }
    for (&b, t) in blocks.iter().zip(terms) {
        let mut pool = pool_end[b].clone();
        g.terminator(b, t, &mut pool);
    }
    g.f
}

impl Gen<'_> {
    fn of_type(&self, pool: &[Value], pred: impl Fn(Type) -> bool) -> Vec<Value> {
        pool.iter()
            .copied()
            .filter(|&v| pred(self.f.value_type(v)))
            .collect()
    }

    /// A value of exactly type `ty` from the pool, or a new constant (scalars only).
    fn value_of(&mut self, b: Block, pool: &mut Vec<Value>, ty: Type) -> Option<Value> {
        let cands = self.of_type(pool, |t| t == ty);
        if !cands.is_empty() && self.rng.chance(75) {
            return Some(*self.rng.pick(&cands));
        }
        let s = ty.scalar()?;
        let v = self.constant(b, s);
        pool.push(v);
        Some(v)
    }

    fn constant(&mut self, b: Block, s: Scalar) -> Value {
        let c = match s {
            Scalar::F64 => Const::F64(*self.rng.pick(&[
                0.0,
                -0.0,
                1.5,
                -2.0,
                1e300,
                f64::NAN,
                f64::INFINITY,
                3.25,
            ])),
            Scalar::Bool => Const::Bool(self.rng.chance(50)),
            t => {
                let (lo, hi) = semantics::int_range(t);
                let x = *self.rng.pick(&[
                    0u64,
                    1,
                    2,
                    3,
                    7,
                    u64::MAX,
                    lo,
                    hi,
                    self.rng.clone().next_u64(),
                ]);
                semantics::int(t, x)
            }
        };
        self.f.ins(b, InstData::Const(c))
    }

    fn small_index(&mut self, b: Block, pool: &mut Vec<Value>) -> Value {
        let ints = self.of_type(pool, Type::is_int);
        if !ints.is_empty() && self.rng.chance(30) {
            return *self.rng.pick(&ints);
        }
        let k = self.rng.range(-1, 4);
        let v = self.f.iconst(b, Scalar::I64, k);
        pool.push(v);
        v
    }

    /// An index into an array of `len` elements: mostly a constant in range, sometimes one
    /// just out of range, sometimes an integer computed by the program.
    fn array_index(&mut self, b: Block, pool: &mut Vec<Value>, len: usize) -> Value {
        let ints = self.of_type(pool, Type::is_int);
        if !ints.is_empty() && self.rng.chance(25) {
            return *self.rng.pick(&ints);
        }
        let k = if self.rng.chance(90) {
            self.rng.below(len.min(8)) as i64
        } else {
            *self.rng.pick(&[-1, len as i64])
        };
        let v = self.f.iconst(b, Scalar::I64, k);
        pool.push(v);
        v
    }

    fn random_inst(&mut self, b: Block, pool: &mut Vec<Value>) {
        let data = match self.rng.below(19) {
            0 | 1 => {
                let s = random_scalar(self.rng);
                let v = self.constant(b, s);
                pool.push(v);
                return;
            }
            2 => {
                let cands = self.of_type(pool, |t| t.scalar().is_some());
                if cands.is_empty() {
                    return;
                }
                let v = *self.rng.pick(&cands);
                let ty = self.f.value_type(v);
                let op = if ty == Type::BOOL || (ty.is_int() && self.rng.chance(30)) {
                    UnaryOp::Not
                } else {
                    UnaryOp::Neg
                };
                InstData::Unary { op, arg: v }
            }
            3..=5 => {
                let op = *self.rng.pick(BinaryOp::ALL);
                let ok = |t: Type| match op {
                    BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => t.is_int() || t == Type::BOOL,
                    BinaryOp::Shl | BinaryOp::Shr => t.is_int(),
                    _ => t.is_int() || t == Type::F64,
                };
                let cands = self.of_type(pool, ok);
                if cands.is_empty() {
                    return;
                }
                let a = *self.rng.pick(&cands);
                let ty = self.f.value_type(a);
                let bv = self.value_of(b, pool, ty).expect("scalar");
                InstData::Binary { op, args: [a, bv] }
            }
            6 => {
                let cands = self.of_type(pool, |t| t.scalar().is_some());
                if cands.is_empty() {
                    return;
                }
                let a = *self.rng.pick(&cands);
                let ty = self.f.value_type(a);
                let bv = self.value_of(b, pool, ty).expect("scalar");
                InstData::Cmp {
                    op: *self.rng.pick(CmpOp::ALL),
                    args: [a, bv],
                }
            }
            7 => {
                let cands = self.of_type(pool, |t| !t.is_array());
                if cands.is_empty() {
                    return;
                }
                let a = *self.rng.pick(&cands);
                let ty = self.f.value_type(a);
                let Some(bv) = self.value_of(b, pool, ty).or(Some(a)) else {
                    return;
                };
                let cond = self.value_of(b, pool, Type::BOOL).expect("bool");
                InstData::Select {
                    cond,
                    args: [a, bv],
                }
            }
            8 => {
                let cands = self.of_type(pool, |t| t.scalar().is_some());
                if cands.is_empty() {
                    return;
                }
                InstData::Cast {
                    to: random_scalar(self.rng),
                    arg: *self.rng.pick(&cands),
                }
            }
            9 => {
                let cands = self.of_type(pool, |t| t.is_slice() || t.is_array());
                if cands.is_empty() {
                    return;
                }
                InstData::Len {
                    arg: *self.rng.pick(&cands),
                }
            }
            10 | 11 => {
                let cands = self.of_type(pool, Type::is_slice);
                if cands.is_empty() {
                    return;
                }
                let slice = *self.rng.pick(&cands);
                let index = self.small_index(b, pool);
                if self.rng.chance(30) {
                    InstData::StaticLoad { slice, index }
                } else {
                    InstData::Load { slice, index }
                }
            }
            12 => {
                let cands = self.of_type(pool, |t| matches!(t, Type::Slice { mutable: true, .. }));
                if cands.is_empty() {
                    return;
                }
                let slice = *self.rng.pick(&cands);
                let elem = self.f.value_type(slice).elem().expect("slice");
                let index = self.small_index(b, pool);
                let value = self.value_of(b, pool, Type::Scalar(elem)).expect("scalar");
                InstData::Store {
                    slice,
                    index,
                    value,
                }
            }
            13 => {
                // host or module call
                let (callee, ret) = match self.rng.below(4) {
                    0 => (Callee::Extern(self.externs[0]), Some(Type::I64)),
                    1 => (Callee::Extern(self.externs[1]), Some(Type::F64)),
                    2 => (Callee::Extern(self.externs[2]), None),
                    _ => {
                        let j = self.rng.below(self.me + 1);
                        (Callee::Func(FuncId::new(j)), self.sigs[j].ret)
                    }
                };
                let params = match callee {
                    Callee::Extern(e) => self.m.externs[e].sig.params.clone(),
                    Callee::Func(j) => self.sigs[j.index()].params.clone(),
                };
                let mut args = Vec::new();
                for p in params {
                    match self.value_of(b, pool, p) {
                        Some(v) => args.push(v),
                        None => return,
                    }
                }
                let is_static = matches!(callee, Callee::Extern(e) if self.m.externs[e].pure)
                    && self.rng.chance(50);
                let i = self.f.append_inst(
                    b,
                    InstData::Call {
                        callee,
                        args: args.into(),
                        is_static,
                    },
                    ret,
                );
                pool.extend_from_slice(self.f.inst_results(i));
                return;
            }
            14 => {
                let cands = self.of_type(pool, |t| !t.is_array());
                if cands.is_empty() {
                    return;
                }
                let mut args = Vec::new();
                let mut names: Vec<&str> = VAR_NAMES.to_vec();
                for _ in 0..1 + self.rng.below(2) {
                    let v = *self.rng.pick(&cands);
                    let name = names.remove(self.rng.below(names.len()));
                    args.push((v, self.f.var(name)));
                }
                let mut list = Vec::new();
                for group in [
                    &Policy::ALL[0..5],
                    &Policy::ALL[5..7],
                    &Policy::ALL[7..9],
                    &Policy::ALL[9..11],
                    &Policy::ALL[11..16],
                ] {
                    if self.rng.chance(30) {
                        list.push(*self.rng.pick(group));
                    }
                }
                let policies = Policies::new(&list).expect("one policy per group");
                InstData::MakeStatic {
                    args: args.into(),
                    policies,
                }
            }
            16 => {
                let elem = random_scalar(self.rng);
                let len = *self.rng.pick(&[1, 2, 4, 8, 8, 16, 256]);
                InstData::ArrayNew { elem, len }
            }
            17 | 18 => {
                let arrays = self.of_type(pool, Type::is_array);
                if arrays.is_empty() {
                    return;
                }
                let array = *self.rng.pick(&arrays);
                let ty = self.f.value_type(array);
                let index = self.array_index(b, pool, ty.flat_len());
                if self.rng.chance(50) {
                    InstData::Load {
                        slice: array,
                        index,
                    }
                } else {
                    let elem = ty.elem().expect("array");
                    let value = self.value_of(b, pool, Type::Scalar(elem)).expect("scalar");
                    InstData::Store {
                        slice: array,
                        index,
                        value,
                    }
                }
            }
            _ => {
                let cands = self.of_type(pool, |t| !t.is_array());
                if cands.is_empty() {
                    return;
                }
                let v = *self.rng.pick(&cands);
                let var = self.f.var(VAR_NAMES[self.rng.below(VAR_NAMES.len())]);
                InstData::MakeDynamic {
                    args: vec![(v, var)].into(),
                }
            }
        };
        let i = self.f.append_inst(b, data, None);
        pool.extend_from_slice(self.f.inst_results(i));
    }

    /// `c` with arguments for its block's parameters, taken in `b`.
    fn fill(&mut self, b: Block, pool: &mut Vec<Value>, c: &BlockCall) -> BlockCall {
        let types: Vec<Type> = self
            .f
            .block_params(c.block)
            .iter()
            .map(|&p| self.f.value_type(p))
            .collect();
        let args: Vec<_> = types
            .into_iter()
            .map(|t| {
                self.value_of(b, pool, t)
                    .expect("block parameters are scalars")
            })
            .collect();
        BlockCall::new(c.block, args)
    }

    fn terminator(&mut self, b: Block, t: InstData, pool: &mut Vec<Value>) {
        let data = match t {
            InstData::Jump { dest } => InstData::Jump {
                dest: self.fill(b, pool, &dest),
            },
            InstData::Brif {
                then_dest,
                else_dest,
                ..
            } => {
                let then_dest = self.fill(b, pool, &then_dest);
                let else_dest = self.fill(b, pool, &else_dest);
                let cond = self.value_of(b, pool, Type::BOOL).expect("bool");
                InstData::Brif {
                    cond,
                    then_dest,
                    else_dest,
                }
            }
            InstData::Switch { cases, default, .. } => {
                let cases: Vec<(u64, BlockCall)> = cases
                    .iter()
                    .map(|(k, c)| (*k, self.fill(b, pool, c)))
                    .collect();
                let default = self.fill(b, pool, &default);
                let ints = self.of_type(pool, Type::is_int);
                let arg = if ints.is_empty() || self.rng.chance(20) {
                    let v = self.f.iconst(b, Scalar::I64, self.rng.range(-1, 4));
                    pool.push(v);
                    v
                } else {
                    *self.rng.pick(&ints)
                };
                let ty = self.f.value_type(arg).scalar().expect("int");
                // Keep the cases that are values of the switch's type (all are small).
                let cases = cases
                    .into_iter()
                    .filter(|(k, _)| semantics::canon(ty, *k) == *k)
                    .collect();
                InstData::Switch {
                    arg,
                    cases,
                    default,
                }
            }
            _ if self.rng.chance(10) => InstData::Trap,
            _ => match self.f.sig.ret.map(|t| self.value_of(b, pool, t)) {
                None => InstData::Return { value: None },
                Some(Some(v)) => InstData::Return { value: Some(v) },
                // A slice return where no slice of the type is at hand.
                Some(None) => InstData::Trap,
            },
        };
        self.f.append_inst(b, data, None);
    }
}

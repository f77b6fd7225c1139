//! Functions and modules: definitions (the data-flow graph) kept apart from the layout.
//!
//! A [`Function`] owns primary maps of values, instructions, blocks and source variables.
//! Where a block or an instruction sits in the program is the business of [`Layout`] alone:
//! a block can exist without being placed (a clone under construction, a block removed by a
//! pass), and moving it renumbers nothing.

use cranelift_entity::packed_option::PackedOption;
use cranelift_entity::{PrimaryMap, SecondaryMap};
use smallvec::{smallvec, SmallVec};

use super::entities::{Block, ExternId, FuncId, Inst, Value, Var};
use super::inst::{Callee, Const, InstData, FALLBACK_TYPE};
use super::types::{Scalar, Type};

/// Parameter and return types of a function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signature {
    pub params: Vec<Type>,
    pub ret: Option<Type>,
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueDef {
    /// Result number `n` of an instruction.
    Result(Inst, u32),
    /// Parameter number `n` of a block.
    Param(Block, u32),
    /// A number left unused (the parser keeps the numbers of the text, so gaps exist).
    Unused,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    pub ty: Type,
    pub def: ValueDef,
    /// For a block parameter: the source variable it carries, if any (used by the
    /// binding-time analysis to follow annotated variables through merges and loops).
    pub var: Option<Var>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockData {
    pub params: Vec<Value>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarData {
    pub name: String,
}

pub use dyc_templates::types::SrcLoc;

type BlockInsts = SmallVec<[Inst; 4]>;

/// The order of blocks and of the instructions inside them.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    blocks: Vec<Block>,
    /// The instructions of each block (inline up to four: most blocks allocate nothing).
    insts: SecondaryMap<Block, BlockInsts>,
    inst_block: SecondaryMap<Inst, PackedOption<Block>>,
    block_inserted: SecondaryMap<Block, bool>,
}

impl Layout {
    /// Blocks in layout order; the first is the entry block.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    pub fn entry_block(&self) -> Option<Block> {
        self.blocks.first().copied()
    }

    pub fn is_block_inserted(&self, b: Block) -> bool {
        self.block_inserted[b]
    }

    /// Appends `b` at the end of the layout.
    pub fn append_block(&mut self, b: Block) {
        assert!(!self.block_inserted[b], "{b} is already in the layout");
        self.blocks.push(b);
        self.block_inserted[b] = true;
    }

    /// Inserts `b` right after `after`.
    pub fn insert_block_after(&mut self, b: Block, after: Block) {
        assert!(!self.block_inserted[b], "{b} is already in the layout");
        let pos = self
            .blocks
            .iter()
            .position(|&x| x == after)
            .expect("anchor block in layout");
        self.blocks.insert(pos + 1, b);
        self.block_inserted[b] = true;
    }

    /// Removes every block for which `keep` is false, with its instructions, from the
    /// layout (their definitions stay), in one pass.
    pub fn retain_blocks(&mut self, mut keep: impl FnMut(Block) -> bool) {
        let mut blocks = std::mem::take(&mut self.blocks);
        blocks.retain(|&b| {
            if keep(b) {
                return true;
            }
            self.block_inserted[b] = false;
            for i in std::mem::take(&mut self.insts[b]) {
                self.inst_block[i] = None.into();
            }
            false
        });
        self.blocks = blocks;
    }

    /// Splits blocks before the given instructions, in one pass over the layout: for each
    /// `(inst, new)`, the instructions from `inst` to the end of its block move to the
    /// empty block `new` (not in the layout yet), placed right after. An instruction
    /// first in its block, or not in the layout, is left alone. Returns the `(block,
    /// new)` pairs made, in layout order; `block` is left without a terminator.
    pub fn split_blocks(&mut self, at: &[(Inst, Block)]) -> Vec<(Block, Block)> {
        let mut new_at: SecondaryMap<Inst, PackedOption<Block>> = SecondaryMap::new();
        for &(i, nb) in at {
            new_at[i] = nb.into();
        }
        let mut order = Vec::with_capacity(self.blocks.len() + at.len());
        let mut made = Vec::new();
        for b in std::mem::take(&mut self.blocks) {
            order.push(b);
            let insts = std::mem::take(&mut self.insts[b]);
            let mut cur = b;
            let mut segment = BlockInsts::new();
            for (pos, i) in insts.into_iter().enumerate() {
                if let Some(nb) = new_at[i].expand().filter(|_| pos > 0) {
                    assert!(!self.block_inserted[nb], "{nb} is already in the layout");
                    self.insts[cur] = std::mem::take(&mut segment);
                    made.push((cur, nb));
                    order.push(nb);
                    self.block_inserted[nb] = true;
                    cur = nb;
                }
                self.inst_block[i] = cur.into();
                segment.push(i);
            }
            self.insts[cur] = segment;
        }
        self.blocks = order;
        made
    }

    /// Instructions of `b` in order.
    pub fn block_insts(&self, b: Block) -> &[Inst] {
        &self.insts[b]
    }

    pub fn inst_block(&self, i: Inst) -> Option<Block> {
        self.inst_block[i].expand()
    }

    /// The last instruction of `b` (its terminator in a verified function).
    pub fn last_inst(&self, b: Block) -> Option<Inst> {
        self.insts[b].last().copied()
    }

    pub fn append_inst(&mut self, i: Inst, b: Block) {
        assert!(self.inst_block[i].is_none(), "{i} is already in the layout");
        self.insts[b].push(i);
        self.inst_block[i] = b.into();
    }

    /// Replaces the instructions of `b` by `insts` (each either in `b` already or in no
    /// block), in one pass.
    pub fn set_block_insts(&mut self, b: Block, insts: &[Inst]) {
        for i in std::mem::take(&mut self.insts[b]) {
            self.inst_block[i] = None.into();
        }
        for &i in insts {
            assert!(self.inst_block[i].is_none(), "{i} is already in the layout");
            self.inst_block[i] = b.into();
        }
        self.insts[b] = insts.iter().copied().collect();
    }

    pub fn remove_inst(&mut self, i: Inst) {
        if let Some(b) = self.inst_block(i) {
            self.insts[b].retain(|x| *x != i);
            self.inst_block[i] = None.into();
        }
    }
}

/// The results of an instruction: none, one inline, or a list kept aside in
/// [`Function`] (8 bytes per instruction; only annotations have several results).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Results {
    #[default]
    None,
    One(Value),
    /// An index into the function's lists of results.
    Many(u32),
}

/// The result types of an instruction, as [`Function::result_types`] computes them.
pub type ResultTypes = SmallVec<[Type; 4]>;

/// A function: its signature, its definitions and its layout.
#[derive(Clone, Debug, Default)]
pub struct Function {
    pub name: String,
    pub sig: Signature,
    pub values: PrimaryMap<Value, ValueData>,
    pub insts: PrimaryMap<Inst, InstData>,
    results: SecondaryMap<Inst, Results>,
    /// The results of instructions with more than one.
    result_lists: Vec<Vec<Value>>,
    pub blocks: PrimaryMap<Block, BlockData>,
    pub vars: PrimaryMap<Var, VarData>,
    pub srclocs: SecondaryMap<Inst, SrcLoc>,
    pub layout: Layout,
}

impl Function {
    pub fn new(name: impl Into<String>, sig: Signature) -> Function {
        Function {
            name: name.into(),
            sig,
            ..Function::default()
        }
    }

    /// A function with room for about `insts` instructions and as many values: a hint
    /// (tables grow past it as usual), so that building a large function does not copy its
    /// tables over and over as they grow.
    pub fn with_capacity(name: impl Into<String>, sig: Signature, insts: usize) -> Function {
        let mut f = Function::new(name, sig);
        f.insts = PrimaryMap::with_capacity(insts);
        f.values = PrimaryMap::with_capacity(insts);
        f.results = SecondaryMap::with_capacity(insts);
        f.srclocs = SecondaryMap::with_capacity(insts);
        f.layout.inst_block = SecondaryMap::with_capacity(insts);
        f
    }

    pub fn entry_block(&self) -> Option<Block> {
        self.layout.entry_block()
    }

    /// Creates a block (not yet in the layout).
    pub fn create_block(&mut self) -> Block {
        self.blocks.push(BlockData::default())
    }

    /// Creates a block and appends it to the layout.
    pub fn append_new_block(&mut self) -> Block {
        let b = self.create_block();
        self.layout.append_block(b);
        b
    }

    /// Adds a parameter of type `ty` carrying source variable `var` to `b`.
    pub fn append_block_param(&mut self, b: Block, ty: Type, var: Option<Var>) -> Value {
        let n = self.blocks[b].params.len();
        let v = self.values.push(ValueData {
            ty,
            def: ValueDef::Param(b, n as u32),
            var,
        });
        self.blocks[b].params.push(v);
        v
    }

    /// The variable named `name`, created if new.
    pub fn var(&mut self, name: &str) -> Var {
        match self.vars.iter().find(|(_, d)| d.name == name) {
            Some((v, _)) => v,
            None => self.vars.push(VarData {
                name: name.to_string(),
            }),
        }
    }

    pub fn var_name(&self, v: Var) -> &str {
        &self.vars[v].name
    }

    pub fn value_type(&self, v: Value) -> Type {
        self.values[v].ty
    }

    pub fn block_params(&self, b: Block) -> &[Value] {
        &self.blocks[b].params
    }

    pub fn inst_results(&self, i: Inst) -> &[Value] {
        match &self.results[i] {
            Results::None => &[],
            Results::One(v) => std::slice::from_ref(v),
            Results::Many(k) => &self.result_lists[*k as usize],
        }
    }

    /// Sets the results of `i` (their definitions are the caller's).
    pub fn set_inst_results(&mut self, i: Inst, results: &[Value]) {
        self.results[i] = match *results {
            [] => Results::None,
            [v] => Results::One(v),
            _ => {
                if let Results::Many(k) = self.results[i] {
                    self.result_lists[k as usize] = results.to_vec();
                    return;
                }
                self.result_lists.push(results.to_vec());
                Results::Many(self.result_lists.len() as u32 - 1)
            }
        };
    }

    /// The single result of `i`; panics if it has none (an internal error).
    pub fn first_result(&self, i: Inst) -> Value {
        self.inst_results(i)[0]
    }

    /// The result types `data` produces, given the return type of a called function.
    ///
    /// Ill-typed operands give `i64` results; the verifier reports them.
    pub fn result_types(&self, data: &InstData, callee_ret: Option<Type>) -> ResultTypes {
        let ty = |v: crate::ir::Value| self.values.get(v).map(|d| d.ty).unwrap_or(FALLBACK_TYPE);
        match data {
            InstData::Const(c) => smallvec![Type::Scalar(c.ty())],
            InstData::Unary { arg, .. } => smallvec![ty(*arg)],
            InstData::Binary { args, .. } => smallvec![ty(args[0])],
            InstData::Cmp { .. } => smallvec![Type::BOOL],
            InstData::Select { args, .. } => smallvec![ty(args[0])],
            InstData::Cast { to, .. } => smallvec![Type::Scalar(*to)],
            InstData::Len { .. } => smallvec![Type::I64],
            InstData::ArrayNew { elem, len } => smallvec![Type::Array {
                elem: *elem,
                len: *len
            }],
            InstData::Load { slice, .. } | InstData::StaticLoad { slice, .. } => {
                smallvec![ty(*slice).elem().map(Type::Scalar).unwrap_or(FALLBACK_TYPE)]
            }
            InstData::Call { .. } => callee_ret.into_iter().collect(),
            InstData::MakeStatic { args, .. } | InstData::MakeDynamic { args } => {
                args.iter().map(|(v, _)| ty(*v)).collect()
            }
            InstData::Store { .. }
            | InstData::Jump { .. }
            | InstData::Brif { .. }
            | InstData::Switch { .. }
            | InstData::Return { .. }
            | InstData::Trap => ResultTypes::new(),
        }
    }

    /// Creates an instruction with results of the given types (not yet in the layout).
    pub fn create_inst_with_types(&mut self, data: InstData, types: &[Type]) -> Inst {
        let inst = self.insts.push(data);
        let results: SmallVec<[Value; 4]> = types
            .iter()
            .enumerate()
            .map(|(n, &ty)| {
                self.values.push(ValueData {
                    ty,
                    def: ValueDef::Result(inst, n as u32),
                    var: None,
                })
            })
            .collect();
        self.set_inst_results(inst, &results);
        inst
    }

    /// Creates an instruction and appends it to `b`. `callee_ret` is the return type of
    /// the callee for calls, ignored otherwise.
    pub fn append_inst(&mut self, b: Block, data: InstData, callee_ret: Option<Type>) -> Inst {
        let types = self.result_types(&data, callee_ret);
        let inst = self.create_inst_with_types(data, &types);
        self.layout.append_inst(inst, b);
        inst
    }

    /// Appends a non-call instruction with one result and returns that result.
    pub fn ins(&mut self, b: Block, data: InstData) -> Value {
        let i = self.append_inst(b, data, None);
        self.first_result(i)
    }

    /// Appends an integer constant of type `ty`, canonicalizing `x`.
    pub fn iconst(&mut self, b: Block, ty: Scalar, x: i64) -> Value {
        self.ins(
            b,
            InstData::Const(Const::Int(ty, crate::semantics::canon(ty, x as u64))),
        )
    }

    /// The terminator of `b`, if its last instruction is one.
    pub fn terminator(&self, b: Block) -> Option<Inst> {
        self.layout
            .last_inst(b)
            .filter(|&i| self.insts[i].is_terminator())
    }

    /// Successor blocks of `b` in branch order (with repetitions, e.g. both arms of a
    /// `brif` to one block).
    pub fn successors(&self, b: Block) -> impl Iterator<Item = Block> + '_ {
        self.terminator(b)
            .into_iter()
            .flat_map(|i| self.insts[i].branch_targets().map(|c| c.block))
    }
}

/// A host function declared in a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternFunc {
    pub name: String,
    pub sig: Signature,
    /// Declared `extern pure fn`: no side effects, same result for the same arguments, so
    /// it may be called at specialization time.
    pub pure: bool,
}

/// A module: host declarations and functions that may call each other.
#[derive(Clone, Debug, Default)]
pub struct Module {
    pub externs: PrimaryMap<ExternId, ExternFunc>,
    pub funcs: PrimaryMap<FuncId, Function>,
}

impl Module {
    pub fn func_by_name(&self, name: &str) -> Option<FuncId> {
        self.funcs
            .iter()
            .find(|(_, f)| f.name == name)
            .map(|(id, _)| id)
    }

    pub fn extern_by_name(&self, name: &str) -> Option<ExternId> {
        self.externs
            .iter()
            .find(|(_, f)| f.name == name)
            .map(|(id, _)| id)
    }

    pub fn callee_sig(&self, c: Callee) -> &Signature {
        match c {
            Callee::Func(f) => &self.funcs[f].sig,
            Callee::Extern(e) => &self.externs[e].sig,
        }
    }

    pub fn callee_name(&self, c: Callee) -> &str {
        match c {
            Callee::Func(f) => &self.funcs[f].name,
            Callee::Extern(e) => &self.externs[e].name,
        }
    }

    /// Whether a call to `c` has no side effects (a pure host function). Calls to module
    /// functions count as impure: they may store, trap or not terminate.
    pub fn is_pure(&self, c: Callee) -> bool {
        matches!(c, Callee::Extern(e) if self.externs[e].pure)
    }
}

//! The CFG form of a stitch program: the annotated CFG of the region. Per block: its
//! parameters (each a static register or a dynamic variable), the static values live into
//! it (part of the memo key of its specialized copies), the dynamic values live into it
//! (extra parameters of its copies, so that each copy is self-contained as in max-SSA
//! form), an optional promotion at its entry, its setup and template operations in order,
//! and its terminator. The work-list executor runs this form directly.

use cranelift_codegen::entity::{EntityRef, PrimaryMap};
use dyc_templates::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use dyc_templates::template::TOp;
use dyc_templates::types::{Scalar, SrcLoc, Type};

use super::entities::{Block, CalleeId, HostId, Reg};

/// An operand of a template operation or a branch argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A hole: the value of a static register.
    Static(Reg),
    /// A dynamic variable.
    Dyn(Reg),
}

/// A setup operation, run at specialization time on static registers.
#[derive(Clone, Debug, PartialEq)]
pub enum SetupOp {
    Const(Const),
    Unary(UnaryOp, Reg),
    Binary(BinaryOp, Reg, Reg),
    Cmp(CmpOp, Reg, Reg),
    Select(Reg, Reg, Reg),
    Cast(Scalar, Reg),
    Len(Reg),
    /// `s@[i]`: read a static slice.
    StaticLoad(Reg, Reg),
    /// A static call of pure host function `host`; `callee` is the same function in the
    /// callee table (used when the call faults and is emitted to fault at run time).
    CallPure {
        host: HostId,
        callee: CalleeId,
        args: Vec<Reg>,
    },
    Copy(Reg),
}

impl SetupOp {
    /// The registers the operation reads.
    pub fn uses(&self) -> Vec<Reg> {
        match self {
            SetupOp::Const(_) => vec![],
            SetupOp::Unary(_, a) | SetupOp::Cast(_, a) | SetupOp::Len(a) | SetupOp::Copy(a) => {
                vec![*a]
            }
            SetupOp::Binary(_, a, b) | SetupOp::Cmp(_, a, b) | SetupOp::StaticLoad(a, b) => {
                vec![*a, *b]
            }
            SetupOp::Select(c, a, b) => vec![*c, *a, *b],
            SetupOp::CallPure { args, .. } => args.clone(),
        }
    }
}

/// An operation of a block.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Setup code: computes static register `dst`.
    Setup { dst: Reg, op: SetupOp, loc: SrcLoc },
    /// A template operation: emitted with its holes filled.
    Emit {
        dst: Option<Reg>,
        op: TOp,
        args: Vec<Operand>,
        loc: SrcLoc,
    },
    /// A dynamic copy of an operand (`make_dynamic`, or a copy of a dynamic value).
    Lift { dst: Reg, src: Operand },
    /// A new local array `[elem; len]`, every element zero. The executor keeps a local
    /// array's elements as values (see the module documentation of [`crate::ge`]).
    ArrayNew { dst: Reg, elem: Scalar, len: u32 },
    /// `dst = arr[index]`: no code when the index is static and in bounds.
    ArrayLoad {
        dst: Reg,
        arr: Reg,
        index: Operand,
        loc: SrcLoc,
    },
    /// `arr[index] = value`: no code when the index is static and in bounds.
    ArrayStore {
        arr: Reg,
        index: Operand,
        value: Operand,
        loc: SrcLoc,
    },
}

/// A branch target: a block and the arguments for its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub block: Block,
    pub args: Vec<Operand>,
}

/// How a block ends. A branch on a static operand is a static branch (resolved while
/// stitching); on a dynamic operand it is kept in the code.
#[derive(Clone, Debug, PartialEq)]
pub enum Term {
    Jump(Edge),
    Branch {
        cond: Operand,
        then_edge: Edge,
        else_edge: Edge,
    },
    Switch {
        arg: Operand,
        cases: Vec<(u64, Edge)>,
        default: Edge,
    },
    Return(Option<Operand>),
    Trap(SrcLoc),
}

impl Term {
    /// The edges out of the block, in order.
    pub fn edges(&self) -> Vec<&Edge> {
        match self {
            Term::Jump(e) => vec![e],
            Term::Branch {
                then_edge,
                else_edge,
                ..
            } => vec![then_edge, else_edge],
            Term::Switch { cases, default, .. } => {
                cases.iter().map(|(_, e)| e).chain([default]).collect()
            }
            Term::Return(_) | Term::Trap(_) => vec![],
        }
    }
}

/// A block parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Static(Reg),
    Dyn(Reg, Type),
}

/// A template block with its setup code.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockData {
    /// The source block's name, for diagnostics.
    pub name: String,
    pub params: Vec<Param>,
    /// Entering this block promotes dynamic values to static registers (`make_static` of a
    /// value that may be dynamic): `(dynamic variable, static result)`.
    pub promote: Vec<(Reg, Reg)>,
    /// Static registers live on entry that are not parameters nor promoted.
    pub static_live_in: Vec<Reg>,
    /// Dynamic variables live on entry that are not parameters, with their types.
    pub dyn_live_in: Vec<(Reg, Type)>,
    pub ops: Vec<Op>,
    pub term: Term,
    /// Which edges enter this block lazily (a laziness policy): such an edge jumps to a
    /// copy already made in the unit, or else leaves the unit through a stub that
    /// stitches the copy (as a unit of its own) the first time it runs and patches the
    /// slot it jumps through.
    pub lazy: Lazy,
    /// How the promotion of this block caches its continuations (promotion blocks only).
    pub caching: Caching,
}

/// Which edges enter a block lazily.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Lazy {
    /// None: the block is stitched eagerly.
    #[default]
    No,
    /// Edges of dynamic branches (`lazy`).
    DynamicBranches,
    /// Every edge (`specialize_lazy`, `loop_specialize_lazy`: a specialization point).
    AllEdges,
}

impl Lazy {
    /// Whether an edge (of a dynamic branch if `dynamic`) enters lazily.
    pub fn enters_lazily(self, dynamic: bool) -> bool {
        match self {
            Lazy::No => false,
            Lazy::DynamicBranches => dynamic,
            Lazy::AllEdges => true,
        }
    }
}

/// How a region entry or a promotion site caches its specializations: DyC's caching
/// policies (`docs/language.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Caching {
    /// Every version, looked up by the key's values (a static slice by its contents).
    #[default]
    All,
    /// Every version, looked up without checking contents: at a region entry a static
    /// slice is keyed by address and length (the caller promises the contents behind it
    /// never change); at a promotion site, the same as `All`.
    AllUnchecked,
    /// One version, checked: another key specializes again and replaces it.
    One,
    /// One version, unchecked: the first specialization serves whatever the key.
    OneUnchecked,
    /// No reuse: every execution specializes afresh.
    Replicate,
}

impl Caching {
    /// Whether a lookup checks its key against the version it finds.
    pub fn checked(self) -> bool {
        matches!(self, Caching::All | Caching::One)
    }

    /// Whether one version is kept at most.
    pub fn single(self) -> bool {
        matches!(self, Caching::One | Caching::OneUnchecked)
    }
}

impl BlockData {
    /// The static registers that make up the memo key of a specialized copy, in order:
    /// static parameters, promoted values, static live-ins.
    pub fn key_regs(&self) -> impl Iterator<Item = Reg> + '_ {
        self.params
            .iter()
            .filter_map(|p| match p {
                Param::Static(r) => Some(*r),
                Param::Dyn(..) => None,
            })
            .chain(self.promote.iter().map(|&(_, r)| r))
            .chain(self.static_live_in.iter().copied())
    }

    /// The dynamic variables a specialized copy receives as parameters, in order: dynamic
    /// parameters, then dynamic live-ins.
    pub fn dyn_inputs(&self) -> impl Iterator<Item = (Reg, Type)> + '_ {
        self.params
            .iter()
            .filter_map(|p| match p {
                Param::Dyn(r, t) => Some((*r, *t)),
                Param::Static(_) => None,
            })
            .chain(self.dyn_live_in.iter().copied())
    }

    /// The types of the values a copy of the block receives: those of
    /// [`BlockData::dyn_inputs`], each array replaced by its elements.
    pub fn input_types(&self) -> Vec<Type> {
        Type::flatten(self.dyn_inputs().map(|(_, t)| t))
    }

    /// The source position of the block's first located operation (unknown if none).
    pub fn first_loc(&self) -> SrcLoc {
        self.ops
            .iter()
            .filter_map(|op| match op {
                Op::Setup { loc, .. }
                | Op::Emit { loc, .. }
                | Op::ArrayLoad { loc, .. }
                | Op::ArrayStore { loc, .. } => Some(*loc),
                Op::Lift { .. } | Op::ArrayNew { .. } => None,
            })
            .find(|l| l.is_known())
            .unwrap_or_default()
    }
}

/// A host function the program may call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDecl {
    pub name: String,
    pub params: Vec<Type>,
    pub ret: Option<Type>,
    pub pure: bool,
}

/// What a template `call` calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CalleeDecl {
    /// Function `index` of the source module (its generic code).
    Func {
        index: u32,
        params: Vec<Type>,
        ret: Option<Type>,
    },
    /// A host function.
    Host { host: HostId },
}

/// What both forms of a stitch program share: the function's signature and key, the
/// tables its directives refer to, and the size of its register file.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramHeader {
    pub name: String,
    /// Types of the function's parameters (the entry's parameters, in order).
    pub param_types: Vec<Type>,
    pub ret: Option<Type>,
    /// Positions of the parameters that are run-time constants (the key of a
    /// specialization), increasing.
    pub key_params: Vec<usize>,
    pub hosts: PrimaryMap<HostId, HostDecl>,
    pub callees: PrimaryMap<CalleeId, CalleeDecl>,
    /// One more than the largest register number.
    pub num_regs: u32,
}

impl ProgramHeader {
    /// Whether `callee` is a host function (`None` if it is not in the table).
    pub fn callee_is_host(&self, callee: CalleeId) -> Option<bool> {
        self.callees
            .get(callee)
            .map(|d| matches!(d, CalleeDecl::Host { .. }))
    }
}

/// The generating extension of one function, in CFG form.
#[derive(Clone, Debug, PartialEq)]
pub struct StitchProgram {
    pub header: ProgramHeader,
    pub blocks: PrimaryMap<Block, BlockData>,
    pub entry: Block,
    /// The linearized form laid over the blocks, if the static transform made one.
    pub plan: Option<super::linear::Plan>,
    /// Local arrays of more elements than this live in memory ([`StitchProgram::home`]);
    /// [`StitchProgram::set_max_array_values`] changes it.
    max_array_values: u32,
    /// Per block, its [`Layout`] and the number of edges into it, and the program's
    /// constants, made on first use (executors read them on every copy).
    derived: Derived,
}

/// The default of [`StitchProgram::max_array_values`]: a register file of 32 is kept as
/// values; an operand stack of 64 lives in memory.
pub const MAX_ARRAY_VALUES: u32 = 32;

impl StitchProgram {
    /// A program of these blocks, without a plan.
    pub fn new(
        header: ProgramHeader,
        blocks: PrimaryMap<Block, BlockData>,
        entry: Block,
    ) -> StitchProgram {
        StitchProgram {
            header,
            blocks,
            entry,
            plan: None,
            max_array_values: MAX_ARRAY_VALUES,
            derived: Derived::default(),
        }
    }

    /// The most elements a local array may have and still be kept as values (each
    /// element a value of the specialized code, passed from block to block); a longer one
    /// lives in memory ([`StitchProgram::home`]).
    pub fn max_array_values(&self) -> u32 {
        self.max_array_values
    }

    /// Sets [`StitchProgram::max_array_values`] (and forgets what was derived from the old
    /// one).
    pub fn set_max_array_values(&mut self, n: u32) {
        if n != self.max_array_values {
            self.max_array_values = n;
            self.derived = Derived::default();
        }
    }

    /// Per register, `Some((elem, len))` if it is a local array that lives in memory: one of
    /// more than [`StitchProgram::max_array_values`] elements, never passed as a block's
    /// parameter or an edge's argument (so one register holds it wherever it is live).
    ///
    /// **Why.** An array kept as values crosses every edge whole: each element is an
    /// argument and a block parameter, and stitching pays per element and per edge (an
    /// interpreter's operand stack of 128 slots cost four times a register file of 8 per
    /// byte-code, for the same code). An array in memory is made once per unit, in the
    /// unit's first block, as a slice of static length (so a static index needs no
    /// bounds check and a dynamic one is checked against it); its elements are loaded and
    /// stored where the program reads and writes them, and no edge inside the unit passes
    /// it. Where a unit is left (a promotion, a lazy edge) or entered, the array crosses
    /// as its elements, as an array of values does ([`Layout::homes`]).
    pub fn home(&self, r: Reg) -> Option<(Scalar, u32)> {
        self.homes().0.get(r.index()).copied().flatten()
    }

    /// The local arrays in memory ([`StitchProgram::home`]): register, element type and
    /// length, by register.
    pub fn all_homes(&self) -> &[Home] {
        &self.homes().1
    }

    fn homes(&self) -> &Homes {
        self.derived.homes.get_or_init(|| {
            let n = self.header.num_regs as usize;
            let mut home: Vec<Option<(Scalar, u32)>> = vec![None; n];
            let mut excluded = vec![false; n];
            let mut exclude = |r: Reg| {
                if let Some(x) = excluded.get_mut(r.index()) {
                    *x = true;
                }
            };
            for data in self.blocks.values() {
                for p in &data.params {
                    if let Param::Dyn(r, _) = *p {
                        exclude(r);
                    }
                }
                for &(src, dst) in &data.promote {
                    exclude(src);
                    exclude(dst);
                }
                for e in data.term.edges() {
                    for a in &e.args {
                        let (Operand::Dyn(r) | Operand::Static(r)) = *a;
                        exclude(r);
                    }
                }
            }
            for data in self.blocks.values() {
                for op in &data.ops {
                    if let Op::ArrayNew { dst, elem, len } = *op {
                        let Some(h) = home.get_mut(dst.index()) else {
                            continue;
                        };
                        match *h {
                            None if len > self.max_array_values => *h = Some((elem, len)),
                            Some(was) if was == (elem, len) => {}
                            _ => excluded[dst.index()] = true,
                        }
                    }
                }
            }
            for (h, x) in home.iter_mut().zip(&excluded) {
                if *x {
                    *h = None;
                }
            }
            let all = (0u32..)
                .zip(&home)
                .filter_map(|(r, h)| {
                    let (elem, len) = (*h)?;
                    Some(Home {
                        at: 0,
                        reg: Reg::from_u32(r),
                        elem,
                        len,
                    })
                })
                .collect();
            (home, all)
        })
    }

    /// What recording this program's units found, which decides whether the runtime
    /// records the next ([`Recordings`]). Not part of the program: a clone starts afresh.
    pub fn recordings(&self) -> &Recordings {
        &self.derived.recordings
    }

    /// The program's plan compiled to machine code ([`crate::exec::compiled`]), if it is
    /// ready. Compiling it costs about as much as a few hundred small specializations
    /// (10-20 ms for the byte-code interpreter), so it is made on a thread of its own,
    /// from a copy of the program, once the program has been asked for it
    /// [`COMPILE_AFTER`] times; until it is ready (and where it cannot be made: no plan, a
    /// kind of program it does not take, a target other than x86-64) the interpreted
    /// planned stitcher runs. `DYC_COMPILED_GE=0` in the environment turns it off, and
    /// `DYC_COMPILED_GE=now` makes it at the first ask, on the asking thread, and runs it
    /// for every unit (for tests).
    pub(crate) fn compiled_ge(&self) -> Option<&crate::exec::compiled::CompiledGe> {
        #[derive(PartialEq)]
        enum When {
            Never,
            Now,
            Later,
        }
        static WHEN: std::sync::OnceLock<When> = std::sync::OnceLock::new();
        let when = WHEN.get_or_init(|| match std::env::var("DYC_COMPILED_GE").as_deref() {
            Ok("0") => When::Never,
            Ok("now") => When::Now,
            _ => When::Later,
        });
        use std::sync::atomic::Ordering::Relaxed;
        let cell = &self.derived.compiled;
        if let Some(ge) = cell.get() {
            // (Skipped for a while after runs that gave up: see `note_compiled_run`; never
            // with `now`, for tests.)
            let skip = &self.derived.skip;
            if *when == When::Later && skip.load(Relaxed) > 0 {
                skip.fetch_sub(1, Relaxed);
                return None;
            }
            return ge.as_ref();
        }
        match when {
            When::Never => None,
            When::Now => cell.get_or_init(|| compile_ge(self)).as_ref(),
            When::Later => {
                if self.derived.asked.fetch_add(1, Relaxed) + 1 == COMPILE_AFTER {
                    let (prog, shared) = (self.clone(), cell.clone());
                    let made = std::thread::Builder::new()
                        .name("dyc-ge".into())
                        .spawn(move || {
                            shared.get_or_init(|| compile_ge(&prog));
                        });
                    if made.is_err() {
                        // (No thread: never compiled, rather than a stall here.)
                        let _ = cell.set(None);
                    }
                }
                None
            }
        }
    }

    /// Notes whether a run of the compiled plan made its unit (`false`: it gave up, and
    /// the interpreted stitcher made it again). After [`GIVE_UP_RUNS`] runs in a row that
    /// gave up (the compiled code gives up only where the interpreted stitcher would
    /// report an internal error: a program it cannot take), the next [`SKIPPED_RUNS`]
    /// units go to the interpreted stitcher directly.
    pub(crate) fn note_compiled_run(&self, made: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let d = &self.derived;
        if made {
            d.gave_up.store(0, Relaxed);
        } else if d.gave_up.fetch_add(1, Relaxed) + 1 >= GIVE_UP_RUNS {
            d.gave_up.store(0, Relaxed);
            d.skip.store(SKIPPED_RUNS, Relaxed);
        }
    }

    /// The types of the values a copy of block `b` receives ([`BlockData::input_types`]).
    /// (Made once for all blocks: the blocks must not change after this is first asked;
    /// a clone asks anew.)
    pub fn input_types(&self, b: Block) -> &[Type] {
        &self.layout(b).input_types
    }

    /// What executors read of block `b` on every copy ([`Layout`]), made once for all
    /// blocks like [`StitchProgram::input_types`] (an unknown block has an empty one).
    pub fn layout(&self, b: Block) -> &Layout {
        static EMPTY: Layout = Layout {
            input_types: Vec::new(),
            key_regs: Vec::new(),
            dyn_inputs: Vec::new(),
            first_loc: SrcLoc { line: 0, col: 0 },
            run: Vec::new(),
            copy_types: Vec::new(),
            copy_key_regs: Vec::new(),
            copy_inputs: Vec::new(),
            invariant_keys: Vec::new(),
            invariant_inputs: Vec::new(),
            kept: Vec::new(),
            copy_static_live_in: Vec::new(),
            copy_dyn_live_in: Vec::new(),
            homes: Vec::new(),
            dispatch_types: Vec::new(),
            dispatch_live_in: Vec::new(),
            invariant_dispatch: Vec::new(),
        };
        let all = self.derived.layouts.get_or_init(|| {
            let constant = self.is_constant();
            let invariant = self.is_invariant();
            let fixed = self.is_fixed();
            let inv = |r: Reg| invariant.get(r.index()) == Some(&true);
            let home = |r: Reg| self.home(r).is_some();
            self.blocks
                .values()
                .map(|data| {
                    let dyn_inputs: Vec<(Reg, Type)> = data.dyn_inputs().collect();
                    let key_regs: Vec<Reg> = data.key_regs().collect();
                    let (mut invariant_inputs, mut invariant_dispatch) = (Vec::new(), Vec::new());
                    let mut homes = Vec::new();
                    let (mut at, mut dispatch_at) = (0, 0);
                    for &(r, t) in &dyn_inputs {
                        if inv(r) {
                            invariant_inputs.push((at, r));
                            invariant_dispatch.push(dispatch_at);
                        }
                        match self.home(r) {
                            Some((elem, len)) => homes.push(Home {
                                at,
                                reg: r,
                                elem,
                                len,
                            }),
                            None => dispatch_at += t.flat_len() as u32,
                        }
                        at += t.flat_len() as u32;
                    }
                    let results = data.ops.iter().filter_map(|op| match *op {
                        Op::Lift { dst, .. }
                        | Op::ArrayLoad { dst, .. }
                        | Op::Emit { dst: Some(dst), .. } => Some(dst),
                        _ => None,
                    });
                    let kept = invariant_inputs
                        .iter()
                        .map(|&(_, r)| r)
                        .chain(results.filter(|&r| inv(r)))
                        .collect();
                    let copy_inputs: Vec<(Reg, Type)> = dyn_inputs
                        .iter()
                        .copied()
                        .filter(|&(r, _)| !inv(r) && !home(r))
                        .collect();
                    Layout {
                        input_types: data.input_types(),
                        dispatch_types: Type::flatten(
                            dyn_inputs
                                .iter()
                                .filter(|&&(r, _)| !home(r))
                                .map(|&(_, t)| t),
                        ),
                        dispatch_live_in: data
                            .dyn_live_in
                            .iter()
                            .copied()
                            .filter(|&(r, _)| !home(r))
                            .collect(),
                        homes,
                        invariant_dispatch,
                        copy_types: Type::flatten(copy_inputs.iter().map(|&(_, t)| t)),
                        copy_key_regs: key_regs.iter().copied().filter(|&r| !inv(r)).collect(),
                        invariant_keys: (0u32..)
                            .zip(&key_regs)
                            .filter(|&(_, &r)| inv(r))
                            .map(|(k, _)| k)
                            .collect(),
                        invariant_inputs,
                        kept,
                        copy_inputs,
                        copy_static_live_in: data
                            .static_live_in
                            .iter()
                            .copied()
                            .filter(|&r| !inv(r))
                            .collect(),
                        copy_dyn_live_in: data
                            .dyn_live_in
                            .iter()
                            .copied()
                            .filter(|&(r, _)| !inv(r) && !home(r))
                            .collect(),
                        key_regs,
                        dyn_inputs,
                        first_loc: data.first_loc(),
                        run: (0u32..)
                            .zip(&data.ops)
                            .filter(|(_, op)| match op {
                                Op::Setup { dst, .. } => constant.get(dst.index()) != Some(&true),
                                _ => true,
                            })
                            .map(|(at, op)| Run {
                                at,
                                fast: Fast::of(op, fixed, &home),
                            })
                            .collect(),
                    }
                })
                .collect()
        });
        all.get(b.index()).unwrap_or(&EMPTY)
    }

    /// Per register, whether it is a **unit invariant**: defined once in the whole
    /// program, in the entry block (one of its parameters or the result of one of its
    /// operations), not a local array, and no edge enters the entry block (made once,
    /// like [`StitchProgram::input_types`]).
    ///
    /// Within one unit such a register holds one value throughout: a unit that starts at
    /// the entry copies it once (nothing else leads there) and sets the register there;
    /// a unit that starts elsewhere never reaches the entry, so the register is one of
    /// its inputs, set by its first copy. So executors leave these registers out of the
    /// keys and block parameters of every copy but a unit's first ([`Layout::copy_types`]):
    /// a region's read-only inputs (an interpreter's program and memory, a kernel's
    /// vectors) are not passed from block to block, the values of the unit's first copy
    /// are used wherever they are read.
    pub fn is_invariant(&self) -> &[bool] {
        self.derived.invariant.get_or_init(|| {
            let n = self.header.num_regs as usize;
            let mut defs = vec![0u32; n];
            let mut arrays = vec![false; n];
            let mut in_entry = vec![false; n];
            for (b, data) in self.blocks.iter() {
                let mut def = |r: Reg, array: bool| {
                    if let Some(k) = defs.get_mut(r.index()) {
                        *k += 1;
                        arrays[r.index()] |= array;
                        in_entry[r.index()] |= b == self.entry;
                    }
                };
                for p in &data.params {
                    match *p {
                        Param::Static(r) => def(r, false),
                        Param::Dyn(r, t) => def(r, t.is_array()),
                    }
                }
                for &(_, r) in &data.promote {
                    def(r, false);
                }
                for op in &data.ops {
                    match *op {
                        Op::Setup { dst, .. }
                        | Op::Lift { dst, .. }
                        | Op::ArrayLoad { dst, .. }
                        | Op::Emit { dst: Some(dst), .. } => def(dst, false),
                        Op::ArrayNew { dst, .. } => def(dst, true),
                        Op::Emit { dst: None, .. } | Op::ArrayStore { .. } => {}
                    }
                }
            }
            let entered = self.in_edges(self.entry) > 0;
            (0..n)
                .map(|r| !entered && defs[r] == 1 && in_entry[r] && !arrays[r])
                .collect()
        })
    }

    /// Per register, whether it holds one value throughout a unit: one of the
    /// [`StitchProgram::constants`] or a unit invariant ([`StitchProgram::is_invariant`])
    /// (made once, like [`StitchProgram::input_types`]).
    pub fn is_fixed(&self) -> &[bool] {
        self.derived.fixed.get_or_init(|| {
            let (constant, invariant) = (self.is_constant(), self.is_invariant());
            (0..self.header.num_regs as usize)
                .map(|r| constant.get(r) == Some(&true) || invariant.get(r) == Some(&true))
                .collect()
        })
    }

    /// The number of edges into block `b` from the terminators of all blocks (made once
    /// for all blocks, like [`StitchProgram::input_types`]).
    pub fn in_edges(&self, b: Block) -> u32 {
        let all = self.derived.in_edges.get_or_init(|| {
            let mut n = vec![0u32; self.blocks.len()];
            for data in self.blocks.values() {
                for e in data.term.edges() {
                    if let Some(k) = n.get_mut(e.block.index()) {
                        *k += 1;
                    }
                }
            }
            n
        });
        all.get(b.index()).copied().unwrap_or(0)
    }

    /// The static registers that setup constants define, with their values (made once,
    /// like [`StitchProgram::input_types`]): those with no other static definition (every
    /// register of the CFG form is defined once, which this checks). Such a register holds
    /// its constant wherever it is read, so executors set these registers once per unit,
    /// before any block, and skip the constants' operations: setup code with no inputs,
    /// placed as early as it can be, costs nothing per block copy.
    pub fn constants(&self) -> &[(Reg, Const)] {
        &self.constant_regs().0
    }

    /// Per register, whether it is one of [`StitchProgram::constants`].
    pub fn is_constant(&self) -> &[bool] {
        &self.constant_regs().1
    }

    fn constant_regs(&self) -> &Constants {
        self.derived.constants.get_or_init(|| {
            // Static definitions per register (checked here rather than assumed, so that
            // a register defined twice is never taken for a constant).
            let mut defs = vec![0u32; self.header.num_regs as usize];
            let mut def = |r: Reg| {
                if let Some(n) = defs.get_mut(r.index()) {
                    *n += 1;
                }
            };
            for data in self.blocks.values() {
                for p in &data.params {
                    if let Param::Static(r) = p {
                        def(*r);
                    }
                }
                for &(_, r) in &data.promote {
                    def(r);
                }
                for op in &data.ops {
                    if let Op::Setup { dst, .. } = op {
                        def(*dst);
                    }
                }
            }
            let list = self
                .blocks
                .values()
                .flat_map(|data| &data.ops)
                .filter_map(|op| match op {
                    Op::Setup {
                        dst,
                        op: SetupOp::Const(c),
                        ..
                    } if defs.get(dst.index()) == Some(&1) => Some((*dst, *c)),
                    _ => None,
                })
                .collect::<Vec<_>>();
            let mut is = vec![false; defs.len()];
            for &(r, _) in &list {
                is[r.index()] = true;
            }
            (list, is)
        })
    }
}

/// An operation a copy runs ([`Layout::run`]): its index among the block's operations,
/// and, if it is one of those executors run most, its decoded form.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub at: u32,
    pub fast: Fast,
}

/// A setup operation, or an access to a local array at a static index, decoded once per
/// program, so that executors run it without going through the general operation (an
/// interpreter's reads of its code, the steps of its program counter and the accesses to
/// its registers are most of what a copy of its dispatch and handler blocks runs).
/// `fixed`: the destination is one of the registers [`StitchProgram::is_fixed`] (not
/// cleared between copies). An executor runs the general operation instead whenever the
/// fast path does not apply: an operand of another kind than the fast path reads, a
/// fault, or an index out of bounds.
#[derive(Clone, Copy, Debug)]
pub enum Fast {
    /// Run the general operation.
    None,
    /// `dst = slice@[index]`.
    Load {
        dst: Reg,
        slice: Reg,
        index: Reg,
        fixed: bool,
    },
    /// `dst = a op b`.
    Binary {
        op: BinaryOp,
        dst: Reg,
        a: Reg,
        b: Reg,
        fixed: bool,
    },
    /// `dst = arr[index]`, a local array's element at a static index.
    Element { dst: Reg, arr: Reg, index: Reg },
    /// `arr[index] = value`, at a static index.
    SetElement {
        arr: Reg,
        index: Reg,
        value: Operand,
    },
}

impl Fast {
    /// (`home`: whether a register is a local array in memory, whose accesses take the
    /// general operation.)
    fn of(op: &Op, fixed: &[bool], home: &dyn Fn(Reg) -> bool) -> Fast {
        let fixed = |r: Reg| fixed.get(r.index()) == Some(&true);
        match *op {
            Op::Setup {
                dst,
                op: SetupOp::StaticLoad(slice, index),
                ..
            } => Fast::Load {
                dst,
                slice,
                index,
                fixed: fixed(dst),
            },
            Op::Setup {
                dst,
                op: SetupOp::Binary(op, a, b),
                ..
            } => Fast::Binary {
                op,
                dst,
                a,
                b,
                fixed: fixed(dst),
            },
            Op::ArrayLoad {
                dst,
                arr,
                index: Operand::Static(index),
                ..
            } if !home(arr) => Fast::Element { dst, arr, index },
            Op::ArrayStore {
                arr,
                index: Operand::Static(index),
                value,
                ..
            } if !home(arr) => Fast::SetElement { arr, index, value },
            _ => Fast::None,
        }
    }
}

/// What executors read of a block on every copy, computed once per program.
#[derive(Debug)]
pub struct Layout {
    /// [`BlockData::input_types`].
    pub input_types: Vec<Type>,
    /// [`BlockData::key_regs`].
    pub key_regs: Vec<Reg>,
    /// [`BlockData::dyn_inputs`].
    pub dyn_inputs: Vec<(Reg, Type)>,
    /// [`BlockData::first_loc`].
    pub first_loc: SrcLoc,
    /// The operations a copy runs, in order: all but those of the program's constants
    /// ([`StitchProgram::constants`]), which are set once per unit.
    pub run: Vec<Run>,
    /// The parameter types of a copy other than its unit's first: [`Layout::input_types`]
    /// without the unit invariants ([`StitchProgram::is_invariant`]), which such a copy
    /// reads from the unit's first copy instead.
    pub copy_types: Vec<Type>,
    /// [`Layout::key_regs`] without the unit invariants: the memo key of a copy.
    pub copy_key_regs: Vec<Reg>,
    /// [`Layout::dyn_inputs`] without the unit invariants.
    pub copy_inputs: Vec<(Reg, Type)>,
    /// The positions of the unit invariants in [`Layout::key_regs`], ascending.
    pub invariant_keys: Vec<u32>,
    /// The unit invariants among the dynamic inputs: their positions in
    /// [`Layout::input_types`] (ascending) and registers.
    pub invariant_inputs: Vec<(u32, Reg)>,
    /// The dynamic unit invariants among the block's inputs and results: what a unit's
    /// first copy of it names to the emitter ([`dyc_templates::template::Emitter::keep`]).
    pub kept: Vec<Reg>,
    /// [`BlockData::static_live_in`] and [`BlockData::dyn_live_in`] without the unit
    /// invariants and the local arrays in memory.
    pub copy_static_live_in: Vec<Reg>,
    pub copy_dyn_live_in: Vec<(Reg, Type)>,
    /// The local arrays in memory ([`StitchProgram::home`]) among the dynamic inputs, in
    /// order. They cross the edges that enter or leave a unit as their elements, at their
    /// places in [`Layout::input_types`] (what a unit's first copy receives and a
    /// promotion passes on); inside a unit no edge passes them (the unit's first copy
    /// makes them, and every copy reads them there).
    pub homes: Vec<Home>,
    /// The inputs a block receives inside its unit (a dispatch block into a promotion or a
    /// lazy block): [`Layout::input_types`] and [`BlockData::dyn_live_in`] without the
    /// local arrays in memory. The same as those when there are none.
    pub dispatch_types: Vec<Type>,
    pub dispatch_live_in: Vec<(Reg, Type)>,
    /// The positions of the unit invariants ([`Layout::invariant_inputs`]) among the
    /// values of [`Layout::dispatch_types`].
    pub invariant_dispatch: Vec<u32>,
}

/// A local array in memory among a block's inputs ([`Layout::homes`]): its position in
/// [`Layout::input_types`] (0 in [`StitchProgram::all_homes`]), register, element type and
/// length.
#[derive(Clone, Copy, Debug)]
pub struct Home {
    pub at: u32,
    pub reg: Reg,
    pub elem: Scalar,
    pub len: u32,
}

/// Caches that equal every other (programs compare by what they say), and that a clone
/// starts without (a cloned program may be changed before it is first asked).
#[derive(Debug, Default)]
struct Derived {
    layouts: std::sync::OnceLock<Vec<Layout>>,
    in_edges: std::sync::OnceLock<Vec<u32>>,
    constants: std::sync::OnceLock<Constants>,
    invariant: std::sync::OnceLock<Vec<bool>>,
    fixed: std::sync::OnceLock<Vec<bool>>,
    homes: std::sync::OnceLock<Homes>,
    recordings: Recordings,
    /// The compiled plan (shared with the thread that makes it), and how many times it
    /// was asked for ([`StitchProgram::compiled_ge`]).
    compiled: std::sync::Arc<std::sync::OnceLock<Option<crate::exec::compiled::CompiledGe>>>,
    asked: std::sync::atomic::AtomicU32,
    /// Runs of the compiled plan in a row that gave up, and units left to skip it
    /// ([`StitchProgram::note_compiled_run`]).
    gave_up: std::sync::atomic::AtomicU32,
    skip: std::sync::atomic::AtomicU32,
}

/// Runs of a compiled plan in a row that gave up, after which it is skipped for
/// [`SKIPPED_RUNS`] units.
pub const GIVE_UP_RUNS: u32 = 4;
pub const SKIPPED_RUNS: u32 = 64;

/// How many times a program's compiled plan is asked for before it is made.
pub const COMPILE_AFTER: u32 = 16;

/// `prog`'s plan compiled for the host, if it can be.
fn compile_ge(prog: &StitchProgram) -> Option<crate::exec::compiled::CompiledGe> {
    static ISA: std::sync::OnceLock<Option<std::sync::Arc<dyn cranelift_codegen::isa::TargetIsa>>> =
        std::sync::OnceLock::new();
    let isa = ISA.get_or_init(|| {
        crate::jit::host_isa(crate::jit::JitOptions {
            optimize: true,
            verify: false,
        })
        .ok()
    });
    crate::exec::compiled::compile(prog, &**isa.as_ref()?)
}

/// What recording this program's units found, for the runtime's choice of recording the
/// next ([`StitchProgram::recordings`]). Recording a unit (a tape, its shape, the solver,
/// the replay) pays where it finds constant or dead block parameters: fewer values moved
/// between blocks and faster code (an interpreter's registers loaded before a loop). Where
/// it finds none, it costs without giving: the rule service's units never have one, and
/// stitching them without a recording made 6% more calls. So every unit of the first
/// [`Recordings::PROBE`] is recorded; after them a unit is recorded if one of the last 16
/// recordings found something, and else only every [`Recordings::REPROBE`]th unit (so that
/// a program whose inputs change is looked at again).
#[derive(Debug, Default)]
pub struct Recordings {
    /// Units asked about.
    units: std::sync::atomic::AtomicU64,
    /// One bit per recording, the last in the lowest: whether it found a constant or dead
    /// parameter.
    found: std::sync::atomic::AtomicU64,
}

impl Recordings {
    /// Units recorded whatever the findings, from a program's first.
    pub const PROBE: u64 = 32;
    /// After the first units, one unit in this many is recorded even if the last
    /// recordings found nothing.
    pub const REPROBE: u64 = 256;

    /// Whether to record the next unit (counted as asked).
    pub fn record_next(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.units.fetch_add(1, Relaxed);
        n < Self::PROBE || self.found.load(Relaxed) & 0xffff != 0 || n.is_multiple_of(Self::REPROBE)
    }

    /// Notes what a recording found. (Threads recording at once may lose one another's
    /// note: the choice is a heuristic, and any choice is correct.)
    pub fn note(&self, found: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        let bits = self.found.load(Relaxed);
        self.found.store(bits << 1 | u64::from(found), Relaxed);
    }
}

/// The constant registers and, per register, whether it is one.
type Constants = (Vec<(Reg, Const)>, Vec<bool>);

/// Per register, the element type and length of a local array in memory; and those
/// arrays ([`StitchProgram::home`], [`StitchProgram::all_homes`]).
type Homes = (Vec<Option<(Scalar, u32)>>, Vec<Home>);

impl Clone for Derived {
    fn clone(&self) -> Derived {
        Derived::default()
    }
}

impl PartialEq for Derived {
    fn eq(&self, _: &Derived) -> bool {
        true
    }
}

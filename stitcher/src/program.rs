//! The stitch program: the generating extension of one region, the only thing (with the
//! templates) that the runtime receives from the static compiler.
//!
//! In this version the stitch program is the annotated CFG (BRIEF §3 allows it until the
//! DyC transform produces a linearized form): per block, its parameters (each a static
//! register or a dynamic variable), the static values live into it (part of the memo
//! key), the dynamic values live into it (extra parameters of its specialized copies), an
//! optional promotion at its entry, its setup and template operations in order, and its
//! terminator. Static registers and dynamic variables are numbered in one space (`u32`),
//! the SSA values of the source.

use dyc_templates::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use dyc_templates::template::TOp;
use dyc_templates::types::{Scalar, SrcLoc, Type};

/// A static register or a dynamic variable (the number of a source SSA value).
pub type Reg = u32;

/// Index of a block in [`StitchProgram::blocks`].
pub type BlockId = u32;

/// An operand of a template operation or a branch argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A hole: the value of a static register.
    Static(Reg),
    /// A dynamic variable.
    Dyn(Reg),
}

/// A setup operation, run at specialization time.
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
    /// A static call of pure host function `host` (index into [`StitchProgram::hosts`]);
    /// `callee` is the same function in [`StitchProgram::callees`].
    CallPure {
        host: u32,
        callee: u32,
        args: Vec<Reg>,
    },
    Copy(Reg),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Setup {
        dst: Reg,
        op: SetupOp,
        loc: SrcLoc,
    },
    Emit {
        dst: Option<Reg>,
        op: TOp,
        args: Vec<Operand>,
        loc: SrcLoc,
    },
    /// A dynamic copy of an operand (`make_dynamic`, or a copy of a dynamic value).
    Lift {
        dst: Reg,
        src: Operand,
    },
}

/// A branch target: a block and the arguments for its parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Edge {
    pub block: BlockId,
    pub args: Vec<Operand>,
}

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

/// A block parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Static(Reg),
    Dyn(Reg, Type),
}

#[derive(Clone, Debug, PartialEq)]
pub struct SBlock {
    /// The source block's name, for diagnostics.
    pub name: String,
    pub params: Vec<Param>,
    /// Entering this block promotes dynamic values to static registers (`make_static` of a
    /// value that may be dynamic): `(dynamic operand, static result)`.
    pub promote: Vec<(Reg, Reg)>,
    /// Static registers live on entry that are not parameters nor promoted.
    pub static_live_in: Vec<Reg>,
    /// Dynamic variables live on entry that are not parameters, with their types.
    pub dyn_live_in: Vec<(Reg, Type)>,
    pub ops: Vec<Op>,
    pub term: Term,
}

impl SBlock {
    /// The static registers that make up the memo key of a specialized copy, in order:
    /// static parameters, promoted values, static live-ins.
    pub fn key_regs(&self) -> Vec<Reg> {
        let mut k: Vec<Reg> = self
            .params
            .iter()
            .filter_map(|p| match p {
                Param::Static(r) => Some(*r),
                Param::Dyn(..) => None,
            })
            .collect();
        k.extend(self.promote.iter().map(|&(_, r)| r));
        k.extend_from_slice(&self.static_live_in);
        k
    }

    /// The dynamic variables a specialized copy receives as parameters, in order: dynamic
    /// parameters, then dynamic live-ins.
    pub fn dyn_inputs(&self) -> Vec<(Reg, Type)> {
        let mut d: Vec<(Reg, Type)> = self
            .params
            .iter()
            .filter_map(|p| match p {
                Param::Dyn(r, t) => Some((*r, *t)),
                Param::Static(_) => None,
            })
            .collect();
        d.extend_from_slice(&self.dyn_live_in);
        d
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

/// What a `TOp::Call` calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CalleeDecl {
    /// Function `index` of the source module (its generic code).
    Func {
        index: u32,
        params: Vec<Type>,
        ret: Option<Type>,
    },
    /// Host function `index` of [`StitchProgram::hosts`].
    Host { index: u32 },
}

/// The generating extension of one function.
#[derive(Clone, Debug, PartialEq)]
pub struct StitchProgram {
    pub name: String,
    pub blocks: Vec<SBlock>,
    pub entry: BlockId,
    /// Types of the function's parameters (the entry block's parameters, in order).
    pub param_types: Vec<Type>,
    pub ret: Option<Type>,
    /// Positions of the parameters that are run-time constants (the key of a
    /// specialization).
    pub key_params: Vec<usize>,
    pub hosts: Vec<HostDecl>,
    pub callees: Vec<CalleeDecl>,
    /// One more than the largest register number.
    pub num_regs: u32,
}

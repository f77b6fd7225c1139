//! The linearized form of a stitch program (the form the DyC static transform produces;
//! see the [module documentation](super) for its semantics). A program is a set of
//! **units**; a unit is a sequence of [`Dir`]ectives that the planned stitcher follows
//! from top to bottom, with no work list: straight runs of setup and emit operations,
//! static branches that choose between nested sequences, NTBS flags, has-been-stitched
//! lookups, and unit boundaries (lazy points and promotions).

use cranelift_codegen::entity::PrimaryMap;
use dyc_templates::template::TOp;
use dyc_templates::types::{SrcLoc, Type};

use super::cfg::{Operand, ProgramHeader, SetupOp};
use super::entities::{Block, FlagId, Reg, UnitId};

/// A reference to the specialized copy of template block `block` for the current values
/// of its `key` registers, with the arguments for the copy's dynamic parameters. The copy
/// is created at its first reference and stitched when its [`Dir::Label`] is reached.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub block: Block,
    pub key: Vec<Reg>,
    pub args: Vec<Operand>,
}

/// One directive of a unit.
#[derive(Clone, Debug, PartialEq)]
pub enum Dir {
    /// Setup code: computes static register `dst`.
    Setup { dst: Reg, op: SetupOp, loc: SrcLoc },
    /// Starts stitching the copy of `block` for the current values of `key`; its dynamic
    /// parameters are bound to `params`. No emitted block may be open.
    Label {
        block: Block,
        key: Vec<Reg>,
        params: Vec<(Reg, Type)>,
    },
    /// A template operation with its holes filled, into the open block.
    Emit {
        dst: Option<Reg>,
        op: TOp,
        args: Vec<Operand>,
        loc: SrcLoc,
    },
    /// A dynamic copy of an operand.
    Lift { dst: Reg, src: Operand },
    /// A static branch: runs `then_dirs` if static `cond` is true, else `else_dirs`.
    If {
        cond: Reg,
        then_dirs: Vec<Dir>,
        else_dirs: Vec<Dir>,
    },
    /// A static multi-way branch on static integer `arg`.
    Switch {
        arg: Reg,
        cases: Vec<(u64, Vec<Dir>)>,
        default: Vec<Dir>,
    },
    /// Setup code's own loop (a static back edge): runs `dirs` again and again until a
    /// [`Dir::Break`] in them runs; falling off the end starts the next iteration. Static
    /// registers are variables of the setup code, redefined by each iteration.
    Loop { dirs: Vec<Dir> },
    /// Leaves the innermost [`Dir::Loop`].
    Break,
    /// Sets NTBS flag `flag` (an edge that makes a later block needed was taken).
    SetFlag(FlagId),
    /// Runs `dirs` only if `flag` is set (a block that only some paths need).
    IfFlag { flag: FlagId, dirs: Vec<Dir> },
    /// A has-been-stitched lookup: `hit` runs if the copy of `block` for the current values
    /// of `key` was already stitched in this specialization, `miss` otherwise (loop heads
    /// under multi-way unrolling, specialization roots).
    Stitched {
        block: Block,
        key: Vec<Reg>,
        hit: Vec<Dir>,
        miss: Vec<Dir>,
    },
    /// Ends the open block with a jump.
    Jump(Target),
    /// Ends the open block with a dynamic two-way branch.
    Branch {
        cond: Reg,
        then_target: Target,
        else_target: Target,
    },
    /// Ends the open block with a dynamic multi-way branch.
    SwitchDyn {
        arg: Reg,
        cases: Vec<(u64, Target)>,
        default: Target,
    },
    /// Ends the open block with a return.
    Return(Option<Operand>),
    /// Ends the open block with a fault.
    Trap(SrcLoc),
    /// Ends the open block with a lazy edge: a stub that stitches `unit` for the current
    /// values of its key registers the first time it runs, then patches itself to jump
    /// there; `args` are the unit's dynamic inputs.
    Lazy { unit: UnitId, args: Vec<Operand> },
    /// Ends the open block with a promotion: a cache check of dynamic `promoted` values
    /// (with the current values of the unit's other key registers); a miss stitches
    /// `unit`, whose key starts with the promoted values.
    Promote {
        unit: UnitId,
        promoted: Vec<Reg>,
        args: Vec<Operand>,
    },
}

/// A unit: what one run of the stitcher produces.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearUnit {
    /// For diagnostics.
    pub name: String,
    /// The static registers the unit is specialized on (its cache key), set before the
    /// body runs.
    pub key: Vec<Reg>,
    /// The unit's dynamic inputs, bound to the parameters of its code.
    pub inputs: Vec<(Reg, Type)>,
    pub body: Vec<Dir>,
}

/// A stitch program in linearized form.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearProgram {
    pub header: ProgramHeader,
    pub units: PrimaryMap<UnitId, LinearUnit>,
    /// The unit of the region entry; its key is the key parameters' registers.
    pub entry: UnitId,
    pub num_flags: u32,
}

//! The executor seam: what runs a generating extension for one unit.
//!
//! An [`Executor`] takes a [`Context`] (the stitch program, the contents of static slices,
//! pure hosts, how promotions are emitted, the budget), a start block and the static values
//! of its key, and drives an [`Emitter`] (any backend, or the residual-IR emitter of the
//! tests). Executors: the planned stitcher that follows the linearized form ([`planned`],
//! the default) and the work-list executor ([`worklist`], the reference). [`ExecutorKind`]
//! selects one per region; [`Record`] wraps any emitter and records which (block, static context)
//! pairs an executor stitched, in order, so that tests can assert properties of stitching.

pub(crate) mod compiled;
mod memo;
pub mod planned;
pub mod record;
mod scratch;
pub mod worklist;

use dyc_templates::ops::Const;
use dyc_templates::template::Emitter;

use crate::ge::{Block, Budget, PureHosts, SVal, Site, SliceData, SpecError, StitchProgram};

pub use compiled::counts as compiled_counts;
pub use compiled::inject_give_up as inject_compiled_give_up;
pub use planned::Planned;
pub use record::Record;
pub use worklist::WorkList;

/// How edges into promotion blocks are specialized. In both modes the promoted values
/// known for the site (tuples, in the order of the block's promotions) are dispatched
/// inline first: their continuations are stitched into the same unit (a `switch` on a
/// single integer value, else a chain of tests), so that a loop through the promotion
/// stays inside the unit.
pub enum PromotionMode<'a> {
    /// Other values leave the unit through [`Emitter::promote`], with the site number
    /// `resolve` gives (the runtime's number: every unit of a specialization that reaches
    /// a site shares its cache); `known` gives the values known for a site by that number.
    Units {
        resolve: &'a dyn Fn(&Site) -> u32,
        known: &'a dyn Fn(u32) -> Vec<Vec<Const>>,
    },
    /// Values `known(site)` gives are dispatched inline; others take an
    /// [`Emitter::promote_miss`] exit.
    Inline(&'a dyn Fn(&Site) -> Vec<Vec<Const>>),
}

/// What one unit's specialization produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit<B> {
    /// The unit's first block; its parameters are the start block's dynamic inputs.
    pub entry: B,
    /// Promotion sites met, in the order of the unit's local numbering.
    pub sites: Vec<Site>,
    /// Specialized block copies.
    pub blocks: usize,
    /// Setup and template operations processed.
    pub ops: usize,
    /// Memo lookups (the work-list executor: one per edge stitched; the planned stitcher:
    /// has-been-stitched lookups at roots only).
    pub lookups: usize,
    /// Blocks the planned stitcher stitched only if needed (NTBS tests).
    pub tests: usize,
}

/// Everything a specialization reads besides its start: the program, the contents of its
/// static slices (`slices[k]` for parameter `k`), pure hosts, promotion mode, budget.
pub struct Context<'a> {
    pub prog: &'a StitchProgram,
    pub slices: &'a [Option<SliceData>],
    pub hosts: &'a dyn PureHosts,
    pub mode: PromotionMode<'a>,
    pub budget: Budget,
}

/// Runs a generating extension for one unit.
pub trait Executor {
    /// Specializes the unit that starts at `start` with static values `key` (in the start
    /// block's [`crate::ge::BlockData::key_regs`] order) into `emitter`.
    fn run<E: Emitter>(
        &self,
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Unit<E::Block>, SpecError>;
}

/// The executors, selectable per region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ExecutorKind {
    /// The planned stitcher over the linearized form (the work-list executor when the
    /// program has no plan), its plan compiled to machine code where it can be
    /// ([`compiled`]).
    #[default]
    Planned,
    /// The planned stitcher, interpreting its plan.
    Interpreted,
    /// The work-list executor over the CFG form.
    WorkList,
}

impl ExecutorKind {
    /// Runs the unit as [`Executor::run`] does, but lets the compiled plan (of
    /// [`ExecutorKind::Planned`]) run with an emitter that cannot start again
    /// ([`Emitter::restartable`]): `Ok(None)` when it gave up, the emitter holding part of
    /// a unit, and the caller runs the unit again on a new emitter with
    /// [`ExecutorKind::Interpreted`].
    pub fn run_once<E: Emitter>(
        &self,
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Option<Unit<E::Block>>, SpecError> {
        if *self == ExecutorKind::Planned && !emitter.restartable() {
            match Planned::compiled(cx, start, key, emitter) {
                Some(Ok(unit)) => return Ok(Some(unit)),
                Some(Err(Some(e))) => return Err(e),
                Some(Err(None)) => return Ok(None),
                None => {}
            }
        }
        self.run(cx, start, key, emitter).map(Some)
    }
}

impl Executor for ExecutorKind {
    fn run<E: Emitter>(
        &self,
        cx: &Context,
        start: Block,
        key: &[SVal],
        emitter: &mut E,
    ) -> Result<Unit<E::Block>, SpecError> {
        match self {
            ExecutorKind::Planned => Planned.run(cx, start, key, emitter),
            ExecutorKind::Interpreted => Planned::interpreted(cx, start, key, emitter),
            ExecutorKind::WorkList => WorkList.run(cx, start, key, emitter),
        }
    }
}

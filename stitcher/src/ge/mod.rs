//! The generating extension (GE): what the static compiler hands the runtime for one
//! region, and the only thing besides the templates' operator vocabulary that the runtime
//! knows of the region.
//!
//! # Two forms
//!
//! **CFG form** ([`mod@cfg`], [`StitchProgram`]): the annotated CFG. Each template block lists
//! its parameters and live-ins with their binding times, an optional promotion at its
//! entry, its operations (setup operations on static registers, template operations whose
//! static operands are holes, lifts of static values into dynamic ones) and a terminator
//! that is a static branch (resolved while stitching) or a dynamic one (kept in the code).
//! An executor that runs this form must discover at stitch time which blocks to stitch: the
//! work-list executor memoizes (block, static values of the block's key) and keeps a work
//! list of copies still to fill.
//!
//! **Linearized form** ([`linear`], [`Plan`]): what the DyC static transform lays over the
//! CFG form, so that stitching needs no work list and few checks. A plan is a forest of
//! trees of [`Step`]s, one tree per **root** (the region entry, promotion blocks, special
//! merges, and the loop heads and shared blocks that need a has-been-stitched lookup).
//! A tree stitches blocks in topological order; `fork` follows a static branch, so each
//! outcome of the static branches runs exactly the blocks it reaches; identical suffixes
//! are shared. Edges to non-root blocks name a slot of the tree's run (no lookup); edges to
//! roots are has-been-stitched lookups whose misses go on the stitch-time stack. The
//! planned stitcher ([`crate::exec::planned`]) runs it; a program without a plan (over the
//! plan's budget) is run by the work-list executor. A promotion unit starts at its
//! promotion block's tree; the runtime's caches at region entries and promotions are
//! unchanged.
//!
//! Both forms share a [`ProgramHeader`]: the function's name, parameter types and return
//! type, the positions of its key parameters, the host and callee tables, and the size of
//! the register file; the checker checks it the same way for both.
//!
//! Both forms have a printer ([`mod@print`]) and a checker ([`check`]): `dyc ge FILE FN`
//! prints the CFG form of a region and its plan, file tests compare printed programs, and
//! tests run the checkers on every program the static compiler builds.
//!
//! # Registers and binding times
//!
//! Registers ([`Reg`]) are numbered in one space, the SSA values of the source function. A
//! use says whether it reads a static register or a dynamic variable ([`Operand`]); a
//! definition makes a register static (setup operations, static block parameters, promoted
//! values) or dynamic (template operations, lifts, dynamic parameters). In the CFG form
//! every register is defined once; in the linearized form registers are variables of the
//! setup code, redefined by each copy of a block.
//!
//! # Local arrays
//!
//! A local array `[T; N]` of the region is a dynamic register whose **elements the
//! executor keeps as values** while stitching (they are never memory unless an access
//! needs it):
//! - `ArrayNew { dst, elem, len }` binds every element to the constant zero;
//! - `ArrayLoad` and `ArrayStore` with a static index in bounds (the common case of an
//!   interpreter's register file) are no code at all, and the executor handles them
//!   itself: a read is the element's value, a write rebinds the element;
//! - any other `ArrayLoad` and `ArrayStore` hands the elements, the index and the value
//!   to the emitter ([`dyc_templates::template::Emitter::array_load`] and `array_store`).
//!   Through the fold layer, a constant index in bounds (one the emitter folded) is no
//!   code either. A constant index out of bounds faults when the code runs, like a static
//!   load. An index known only at run time stores the elements to a fresh
//!   stack slot, does a bounds-checked load or store there, and (after a store) reloads the
//!   elements: always correct, and the array is back in values for the accesses after it;
//! - across block copies and unit boundaries a live array is its elements: a copy's inputs
//!   ([`BlockData::input_types`]) list one value per element, so elements flow as block
//!   parameters within a unit and as arguments into promotion continuations.
//!
//! Static elements are not part of a copy's key: an element holding a constant is passed
//! as a value (the fold layer keeps constants it can see within a block). All elements of
//! a live array cross, live or not.
//!
//! **Arrays in memory.** So an array kept as values costs stitching per element and per
//! edge, however few elements the code touches (an operand stack of 128 slots cost four
//! times a register file of 8 per byte-code). An array longer than
//! [`StitchProgram::max_array_values`] (32 unless the runtime says otherwise) that one
//! register holds wherever it is live ([`StitchProgram::home`]) instead lives in memory in
//! the first tiers: the unit's first copy makes it
//! ([`dyc_templates::template::Emitter::local_array`]: a mutable slice of static length,
//! with the elements it received, if any), every copy reads that value, no edge inside
//! the unit passes it ([`Layout::copy_types`] and [`Layout::dispatch_types`] leave it out),
//! `ArrayNew` stores zeros, and accesses are loads and stores through it (the fold layer
//! checks a dynamic index against the static length, forwards a store to a load of the
//! same constant index within a block, and delays such stores to the block's end, where a
//! block that leaves the unit drops them, and a recorded unit's liveness drops those no
//! later code reads). Where a unit is entered or left (its first
//! copy's inputs, a promotion, a lazy edge), the array crosses as its elements at its
//! place in [`BlockData::input_types`], as before ([`Layout::homes`]). The optimizing
//! tier's programs keep every array as values.
//!
//! **Unit invariants** ([`StitchProgram::is_invariant`]) do not cross: a register defined
//! once, in an entry block that no edge enters, and not a local array (a region's
//! parameters, what its entry block computes from them) holds one value throughout a
//! unit. The unit's first copy receives it (a parameter of its block, or in its key);
//! every other copy leaves it out of its key and parameters ([`Layout::copy_key_regs`],
//! [`Layout::copy_types`]) and reads the first copy's value. So a read-only input of an
//! unrolled loop (an interpreter's program and memory, a kernel's vectors) is neither
//! hashed into every memo key nor passed along every edge.
//!
//! # Values shared by executors, backends and the API
//!
//! [`values`]: static values ([`SVal`]), static slice contents ([`SliceData`]), pure hosts
//! ([`PureHosts`]), budgets ([`Budget`]) and specialization errors ([`SpecError`]), and
//! promotion sites ([`Site`]).

pub mod cfg;
pub mod check;
mod entities;
pub mod linear;
pub mod print;
pub mod values;

pub use cfg::{
    BlockData, Caching, CalleeDecl, Edge, Fast, Home, HostDecl, Layout, Lazy, Op, Operand, Param,
    ProgramHeader, Recordings, Run, SetupOp, StitchProgram, Term, MAX_ARRAY_VALUES,
};
pub use check::{check_cfg, check_plan, CheckError, CheckErrors};
pub use entities::{Block, CalleeId, HostId, Reg, SiteId};
pub use linear::{Plan, RootKind, Step};
pub use print::{print_cfg, print_plan};
pub use values::{
    Budget, BudgetKind, NoHosts, PureHosts, SVal, Site, SliceData, SpecError, BUDGET_EXCEEDED,
};

//! `dyc-stitcher`: the run-time side of the specializer (BRIEF §3, §7).
//!
//! This crate owns:
//! - the **stitch program** format ([`program`]), the generating extension of a region;
//!   in this version the annotated CFG (per block: setup operations, template operations,
//!   terminator, promotion); the linearized form with NTBS/HBS flags is to come;
//! - its executor, the **work-list specializer** ([`specialize`]), which runs setup code
//!   and instantiates templates into an emitter, with budgets;
//! - the **runtime** ([`runtime`], [`jit`]): JIT modules, units linked by tail calls,
//!   entry wrappers, promotion sites with their caches, host calls, faults reported as
//!   errors, thread safety. Not yet: caching policies other than `cache_all`, code
//!   reclamation.
//!
//! The stitch program and the templates are its only input: it never sees the source IR.

pub mod jit;
pub mod program;
pub mod runtime;
pub mod specialize;

pub use dyc_templates;

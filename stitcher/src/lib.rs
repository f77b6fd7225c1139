//! `dyc-stitcher`: the run-time side of the specializer.
//!
//! This crate owns:
//! - the **generating extension** format ([`ge`]): the stitch program of a region in CFG
//!   form and in linearized form, each with a printer and a checker, and the values every
//!   executor, backend and the API share;
//! - the **executors** that run it ([`exec`]): the work-list executor today, behind a seam
//!   where the planned stitcher plugs in, and a recording emitter for tests;
//! - the **runtime** ([`runtime`], [`jit`]): code regions, units linked by tail calls,
//!   entry wrappers, promotion sites with their caches, host calls, faults reported as
//!   errors, thread safety.
//!
//! The generating extension and the templates are its only input: it never sees the
//! source IR.

pub mod exec;
pub mod ge;
pub mod jit;
pub mod late;
pub mod runtime;

//! `dyc-stitcher`: the run-time side of the specializer (BRIEF §3, §7).
//!
//! This crate owns:
//! - the **stitch program** format (the generating extension): setup operations on a
//!   register file, emit directives naming templates, static branches, NTBS/HBS flag
//!   operations, lazy points and cache checks;
//! - its **executor**, which runs setup code and instantiates templates into an emitter;
//! - the **runtime**: JIT modules ([`jit`]), units linked by tail calls, lazy stubs, the
//!   specialization cache and its policies, budgets, code reclamation and thread safety.
//!
//! The stitch program and the templates are its only input: it never sees the source IR.
//!
//! Status: [`jit`] sets up Cranelift for the runtime (the host ISA with the flags tail
//! calls need, JIT modules); the stitch program and its executor arrive with the
//! end-to-end specialization work.

pub mod jit;
pub mod program;
pub mod runtime;
pub mod specialize;

pub use dyc_templates;

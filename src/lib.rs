//! `dyc`: a run-time specializer for Rust hosts, in the lineage of DyC.
//!
//! This crate is the static compiler (BRIEF §3): the region IR and its text format
//! ([`ir`]), the [`verifier`], the reference interpreter ([`interp`]) with the operator
//! semantics it shares with constant folding ([`semantics`]), and the CFG analyses
//! ([`analysis`]). See `docs/ARCHITECTURE.md` for the pipeline and the code map.

pub mod analysis;
pub mod api;
pub mod bta;
pub mod ge;
#[cfg(any(test, feature = "gen"))]
pub mod gen;
pub mod interp;
pub mod ir;
pub mod lang;
pub mod residual;
pub mod semantics;
pub mod verifier;

pub use api::{Arg, Error, Program, Region, Specialized};
pub use dyc_stitcher::runtime::{RunError, RuntimeOptions};
pub use ir::Const;

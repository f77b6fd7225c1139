//! `dyc`: a run-time specializer for Rust hosts, in the lineage of DyC.
//!
//! This crate is the static compiler and the public API: the region language
//! ([`lang`]), the region IR and its text format ([`ir`]), the [`verifier`], the reference
//! interpreter ([`interp`]) with the operator semantics it shares with constant folding
//! ([`semantics`]), the CFG analyses ([`analysis`]), the binding-time analysis ([`bta`]),
//! the generating-extension builder ([`ge`]), the residual-IR emitter ([`residual`]) and
//! the API ([`api`]: [`Program`], [`Region`], [`Specialized`]). See `docs/ARCHITECTURE.md`
//! for the pipeline and the code map.

pub mod analysis;
pub mod api;
pub mod bta;
pub mod divide;
pub mod forward;
pub mod ge;
#[cfg(any(test, feature = "gen"))]
pub mod gen;
pub mod interp;
pub mod ir;
pub mod lang;
pub mod placement;
pub mod promote;
pub mod reducify;
pub mod residual;
pub mod semantics;
pub mod transform;
pub mod verifier;

pub use api::{Arg, Caching, Error, Program, Region, RegionStats, Specialized};
pub use dyc_stitcher::runtime::{
    epoch, live as runtime_live, settle_stencils, stencil_counts, Limits, LiveCounts, Misses,
    OnExceeded, RunError, RuntimeOptions, StencilCounts, Tier, Tiers,
};
pub use ir::Const;

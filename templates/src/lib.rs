//! `dyc-templates`: the code side of the specializer's static/run-time split.
//!
//! This crate owns:
//! - the **operator vocabulary** shared by every layer ([`types`], [`ops`]) and its one
//!   definition ([`semantics`]): the reference interpreter, the stitcher's setup code and
//!   the emitters' constant folding all evaluate operators through it;
//! - the **template format**: the dynamic operations of one block of a region, whose
//!   operands are local dynamic values, **holes** filled with static values at stitch time,
//!   or constants;
//! - the **`Emitter` trait**, the abstract sink into which the stitcher instantiates
//!   templates (one implementation builds residual IR in the `dyc` crate for tests, another
//!   builds Cranelift IR);
//! - the **Cranelift emitter**, which lowers template instances to Cranelift IR and applies
//!   the stitch-time peepholes (constant folding once holes are filled, branch folding,
//!   strength reduction of multiplications and divisions by constants).
//!
//! It depends only on `cranelift-codegen` and `cranelift-frontend`, and knows nothing of the
//! source IR: the static compiler (`dyc`) produces templates, the runtime
//! (`dyc-stitcher`) consumes them.

pub mod abi;
pub mod clif;
pub mod fold;
pub mod ops;
pub mod params;
pub mod pool;
pub mod semantics;
pub mod stencil;
pub mod tape;
pub mod template;
pub mod types;

pub use cranelift_codegen;
pub use cranelift_frontend;

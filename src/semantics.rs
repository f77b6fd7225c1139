//! The semantics of every operator: defined once in `dyc-templates` (so that the stitcher's
//! setup code and the emitters' constant folding share it) and re-exported here.

pub use dyc_templates::semantics::*;

//! Value types of the IR: defined in `dyc-templates` (shared with templates and the
//! stitcher) and re-exported here.

pub use dyc_templates::types::{Scalar, Type};

//! The region IR: SSA with block parameters.
//!
//! - [`entities`]: typed indices of blocks, values, instructions, variables, functions.
//! - [`types`]: value types (signedness carried by the type).
//! - [`inst`]: the instruction set.
//! - [`policy`]: `make_static` policies.
//! - [`function`]: definitions and layout of functions; modules.
//! - [`printer`] and [`parser`]: the text format, which round-trips.

pub mod entities;
pub mod function;
pub mod inst;
pub mod parser;
pub mod policy;
pub mod printer;
pub mod types;

pub use entities::{Block, ExternId, FuncId, Inst, Value, Var};
pub use function::{
    BlockData, ExternFunc, Function, Layout, Module, Signature, SrcLoc, ValueData, ValueDef,
    VarData,
};
pub use inst::{BinaryOp, BlockCall, Callee, CmpOp, Const, InstData, UnaryOp};
pub use policy::{Policies, Policy, PolicyConflict, PolicyGroup};
pub use types::{Scalar, Type};

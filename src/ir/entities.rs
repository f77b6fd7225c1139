//! Entity references of the IR.
//!
//! Every IR object with an identity is a typed `u32` index into a primary map
//! (`cranelift_entity::PrimaryMap`); facts computed by analyses live in side tables
//! (`SecondaryMap`) keyed by the same indices. Indices are never reused or renumbered: a
//! block can be cloned or moved in the layout without touching any other entity.

use cranelift_entity::entity_impl;

/// A basic block of a function.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Block(u32);
entity_impl!(Block, "block");

/// An SSA value: an instruction result or a block parameter.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");

/// An instruction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Inst(u32);
entity_impl!(Inst, "inst");

/// A source variable of a function (the name a block parameter or an annotation carries).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(u32);
entity_impl!(Var, "var");

/// A function of a module.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncId(u32);
entity_impl!(FuncId, "fn");

/// A host function declared by `extern fn` in a module.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExternId(u32);
entity_impl!(ExternId, "extern");

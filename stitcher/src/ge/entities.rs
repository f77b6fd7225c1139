//! Entity references of the generating extension: typed indices, so that a register can
//! never be passed where a block is expected. Each prints with its own prefix (`r3`, `b2`,
//! `site1`, `u0`, `c4`, `h1`, `f0`), the names the printer and the checker's errors use.

use cranelift_codegen::entity::entity_impl;

/// A register: a static register (a value known at specialization time) or a dynamic
/// variable (a value of the specialized code). Numbered in one space, the SSA values of
/// the source function; whether a register is static is a fact of each use and
/// definition (see [`super::Operand`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(u32);
entity_impl!(Reg, "r");

/// A block of a stitch program's CFG form (a template block).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Block(u32);
entity_impl!(Block, "b");

/// A promotion site: a promotion block entered with particular static values. Numbered by
/// the executor per unit (the runtime keeps its own site objects).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(u32);
entity_impl!(SiteId, "site");

/// An entry of a program's callee table (what a template `call` calls).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CalleeId(u32);
entity_impl!(CalleeId, "c");

/// A host function of the module.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(u32);
entity_impl!(HostId, "h");

//! The recording emitter: wraps any emitter, forwards everything to it, and records the
//! (template block, static context) pairs the executor stitched, in order
//! ([`Emitter::note_copy`]), and counts the local-array accesses handed to it. Tests use it
//! to assert what stitching did: which copies exist, that none is stitched twice, in what
//! order they were filled, and which array accesses the executor resolved itself.

use dyc_templates::ops::Const;
use dyc_templates::template::{Case, Emitter, TOp};
use dyc_templates::types::{Scalar, SrcLoc, Type};

use crate::ge::Block;

/// An emitter that records the copies stitched through it.
pub struct Record<E> {
    pub inner: E,
    /// (template block, exact encoding of its static context), in stitching order.
    pub stitched: Vec<(Block, Vec<(u8, u64)>)>,
    /// The local-array accesses (`array_load`, `array_store`) handed to the emitter.
    pub array_accesses: usize,
}

impl<E> Record<E> {
    pub fn new(inner: E) -> Record<E> {
        Record {
            inner,
            stitched: Vec::new(),
            array_accesses: 0,
        }
    }

    /// The template blocks stitched, in order (a block appears once per static context).
    pub fn blocks(&self) -> Vec<Block> {
        self.stitched.iter().map(|(b, _)| *b).collect()
    }
}

impl<E: Emitter> Emitter for Record<E> {
    type Value = E::Value;
    type Block = E::Block;

    fn note_copy(&mut self, b: E::Block, template: u32, context: &[(u8, u64)]) {
        self.stitched
            .push((Block::from_u32(template), context.to_vec()));
        self.inner.note_copy(b, template, context);
    }
    fn notes_copies(&self) -> bool {
        true
    }
    fn create_block(&mut self, params: &[Type]) -> E::Block {
        self.inner.create_block(params)
    }
    fn create_block_like(&mut self, like: E::Block, params: &[Type]) -> E::Block {
        self.inner.create_block_like(like, params)
    }
    fn block_params(&mut self, b: E::Block, out: &mut Vec<E::Value>) {
        self.inner.block_params(b, out)
    }
    fn switch_to_block(&mut self, b: E::Block) {
        self.inner.switch_to_block(b)
    }
    fn constant(&mut self, c: Const) -> E::Value {
        self.inner.constant(c)
    }
    fn static_slice(&mut self, id: u32, ty: Type) -> E::Value {
        self.inner.static_slice(id, ty)
    }
    fn op(&mut self, op: &TOp, args: &[E::Value], loc: SrcLoc) -> Option<E::Value> {
        self.inner.op(op, args, loc)
    }
    fn array_load(
        &mut self,
        elem: Scalar,
        elems: &[E::Value],
        index: E::Value,
        loc: SrcLoc,
    ) -> E::Value {
        self.array_accesses += 1;
        self.inner.array_load(elem, elems, index, loc)
    }
    fn array_store(
        &mut self,
        elem: Scalar,
        elems: &mut [E::Value],
        index: E::Value,
        value: E::Value,
        loc: SrcLoc,
    ) {
        self.array_accesses += 1;
        self.inner.array_store(elem, elems, index, value, loc)
    }
    fn local_array(&mut self, elem: Scalar, len: u32, init: &[E::Value]) -> E::Value {
        self.inner.local_array(elem, len, init)
    }
    fn keep(&mut self, v: E::Value) {
        self.inner.keep(v)
    }
    fn jump(&mut self, dest: E::Block, args: &[E::Value]) {
        self.inner.jump(dest, args)
    }
    fn brif(
        &mut self,
        cond: E::Value,
        then_dest: (E::Block, &[E::Value]),
        else_dest: (E::Block, &[E::Value]),
    ) {
        self.inner.brif(cond, then_dest, else_dest)
    }
    fn switch(&mut self, arg: E::Value, cases: &[Case<Self>], default: (E::Block, &[E::Value])) {
        self.inner.switch(arg, cases, default)
    }
    fn ret(&mut self, value: Option<E::Value>) {
        self.inner.ret(value)
    }
    fn trap(&mut self, loc: SrcLoc) {
        self.inner.trap(loc)
    }
    fn promote(&mut self, site: u32, promoted: &[E::Value], live: &[E::Value]) {
        self.inner.promote(site, promoted, live)
    }
    fn promote_miss(&mut self, site: u32, promoted: &[E::Value]) {
        self.inner.promote_miss(site, promoted)
    }
}

//! Constant block parameters: which parameters of a unit's blocks hold the same constant on
//! every path, found by a first stitching pass, so that the real pass treats them as
//! constants.
//!
//! **Why.** Stitching follows edges one at a time: when a block is stitched, the edges that
//! enter it later (a loop's back edge) are not known yet, so every block parameter is a
//! value in code. An interpreter whose program loads a register with a constant before a
//! loop (`LOADI r5, 2`) passes that register around the loop as a parameter of every
//! handler copy, and the stitched code divides by a frame word where an optimizer, which
//! sees the whole function, divides by 2.
//!
//! **How.** The unit is stitched once through the fold layer over [`Shape`], a backend that
//! makes no code and only records, for every block parameter, what each edge passes to it:
//! a constant, a parameter of the block the edge leaves (passed on unchanged), or anything
//! else. [`Shape::solve`] then finds, optimistically, the parameters that hold one
//! constant `c` on every incoming edge, directly or through parameters that do (the
//! classic removal of constant phis, as Cranelift's `remove_constant_phis` pass does on a
//! whole function): every parameter starts unknown; an edge passing a constant meets it
//! with that constant, an edge passing anything else makes it variable, and an edge
//! passing parameter `q` meets it with `q`'s value, to a fixpoint on a work list (each
//! parameter changes at most twice). The unit's entry takes its inputs from its caller,
//! so they are variable; a parameter no edge reaches stays unknown and is treated as
//! variable.
//!
//! **Why it is sound.** Both passes run the same executor on the same static values, so
//! they create the same blocks in the same order and follow the same edges (the executor
//! decides only on static values; the fold layer's folding of a dynamic branch on a
//! constant drops an edge, which only removes a constraint). A value is only ever more
//! constant in the second pass, never different. So every edge into a parameter found
//! constant passes that constant at run time, and the second pass may read the parameter
//! as the constant and drop it from the block ([`crate::fold::Fold::with_constant_params`]).
//! The fold layer checks that the second pass creates blocks with the parameter counts the
//! first pass recorded; where it does not, the caller stitches again without constants.

use smallvec::SmallVec;

use crate::fold::{BCase, Backend};
use crate::ops::Const;
use crate::template::TOp;
use crate::types::{Scalar, SrcLoc, Type};

/// What a value of the first pass is, as far as its block's successors care.
#[derive(Clone, Copy, Debug)]
enum Tag {
    Const(Const),
    /// Parameter number `k` of the unit (blocks' parameters numbered one after another).
    Param(u32),
    Other,
}

/// The backend of the first pass: records what edges pass to block parameters.
#[derive(Default)]
pub struct Shape {
    tags: Vec<Tag>,
    /// Per block, the number of its first parameter (and one past the last block: the
    /// number of parameters).
    start: Vec<u32>,
    /// Per edge and parameter of its target: (parameter, what the edge passes).
    inputs: Vec<(u32, Tag)>,
}

impl Shape {
    fn value(&mut self, t: Tag) -> u32 {
        self.tags.push(t);
        self.tags.len() as u32 - 1
    }

    fn edge(&mut self, dest: u32, args: &[u32]) {
        let first = self.start[dest as usize];
        for (j, &a) in args.iter().enumerate() {
            let t = self.tags[a as usize];
            self.inputs.push((first + j as u32, t));
        }
    }

    /// The constant parameters of the unit just stitched, by block in the order of their
    /// creation.
    pub fn solve(self) -> Known {
        #[derive(Clone, Copy)]
        enum Lat {
            Unknown,
            Const(Const),
            Variable,
        }
        fn meet(a: Lat, b: Lat) -> Lat {
            match (a, b) {
                (Lat::Unknown, x) | (x, Lat::Unknown) => x,
                (Lat::Const(x), Lat::Const(y)) if same(x, y) => a,
                _ => Lat::Variable,
            }
        }
        let nparams = self.start.last().copied().unwrap_or(0) as usize;
        let mut lat = vec![Lat::Unknown; nparams];
        // The entry's parameters come from the caller.
        if let Some(&end) = self.start.get(1) {
            lat[..end as usize].fill(Lat::Variable);
        }
        // Parameter q is passed on to the parameters users[q].
        let mut users: Vec<SmallVec<[u32; 2]>> = vec![SmallVec::new(); nparams];
        for &(p, t) in &self.inputs {
            let p = p as usize;
            match t {
                Tag::Const(c) => lat[p] = meet(lat[p], Lat::Const(c)),
                Tag::Other => lat[p] = Lat::Variable,
                Tag::Param(q) if q as usize != p => users[q as usize].push(p as u32),
                Tag::Param(_) => {}
            }
        }
        let mut work: Vec<u32> = (0..nparams as u32)
            .filter(|&q| !matches!(lat[q as usize], Lat::Unknown))
            .collect();
        while let Some(q) = work.pop() {
            let from = lat[q as usize];
            for &p in &users[q as usize] {
                let old = lat[p as usize];
                let new = meet(old, from);
                // The lattice only descends: a change is a change of level.
                let level = |l: Lat| match l {
                    Lat::Unknown => 0,
                    Lat::Const(_) => 1,
                    Lat::Variable => 2,
                };
                if level(new) != level(old) {
                    lat[p as usize] = new;
                    work.push(p);
                }
            }
        }
        let consts: Vec<Option<Const>> = lat
            .into_iter()
            .map(|l| match l {
                Lat::Const(c) => Some(c),
                _ => None,
            })
            .collect();
        let any = consts.iter().any(Option::is_some);
        Known {
            start: self.start,
            consts,
            any,
        }
    }
}

/// Two constants are the same value: same type and same bits (so `0.0` and `-0.0`
/// differ, and a NaN is itself).
fn same(a: Const, b: Const) -> bool {
    match (a, b) {
        (Const::F64(x), Const::F64(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// The constant parameters of a unit's blocks, by block in the order of their creation.
#[derive(Clone, Debug, Default)]
pub struct Known {
    start: Vec<u32>,
    consts: Vec<Option<Const>>,
    any: bool,
}

impl Known {
    /// Whether any parameter is constant (else the second pass gains nothing).
    pub fn any(&self) -> bool {
        self.any
    }

    /// The parameters of the `n`th block created, each its constant or `None`; `None` if
    /// the first pass made fewer blocks.
    pub fn block(&self, n: u32) -> Option<&[Option<Const>]> {
        let (a, b) = (self.start.get(n as usize)?, self.start.get(n as usize + 1)?);
        self.consts.get(*a as usize..*b as usize)
    }

    /// The number of blocks the first pass made.
    pub fn blocks(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// The number of constant parameters.
    pub fn count(&self) -> usize {
        self.consts.iter().filter(|c| c.is_some()).count()
    }
}

impl Backend for Shape {
    type Value = u32;
    type Block = u32;

    fn create_block(&mut self, params: &[Type]) -> u32 {
        if self.start.is_empty() {
            self.start.push(0);
        }
        let last = *self.start.last().expect("one entry at least");
        self.start.push(last + params.len() as u32);
        self.start.len() as u32 - 2
    }

    fn block_index(b: u32) -> usize {
        b as usize
    }

    fn block_params(&mut self, b: u32, types: &[Type], out: &mut Vec<u32>) {
        let first = self.start[b as usize];
        for j in 0..types.len() as u32 {
            let v = self.value(Tag::Param(first + j));
            out.push(v);
        }
    }

    fn switch_to_block(&mut self, _: u32) {}

    fn constant(&mut self, c: Const) -> u32 {
        self.value(Tag::Const(c))
    }

    fn static_slice(&mut self, _: u32, _: Type) -> u32 {
        self.value(Tag::Other)
    }

    fn op(&mut self, op: &TOp, _: &[u32], _: &[Type], _: SrcLoc) -> Option<u32> {
        match op {
            TOp::Store | TOp::Call { ret: None, .. } => None,
            _ => Some(self.value(Tag::Other)),
        }
    }

    fn array_slot(&mut self, _: Scalar, _: &[u32]) -> u32 {
        self.value(Tag::Other)
    }

    fn bounds_check(&mut self, _: u32, _: u32, _: Scalar, _: SrcLoc) {}

    fn jump(&mut self, dest: u32, args: &[u32]) {
        self.edge(dest, args);
    }

    fn brif(&mut self, _: u32, then_dest: (u32, &[u32]), else_dest: (u32, &[u32])) {
        self.edge(then_dest.0, then_dest.1);
        self.edge(else_dest.0, else_dest.1);
    }

    fn switch(&mut self, _: u32, _: Scalar, cases: &[BCase<Self>], default: (u32, &[u32])) {
        for (_, b, args) in cases {
            self.edge(*b, args);
        }
        self.edge(default.0, default.1);
    }

    fn ret(&mut self, _: Option<u32>) {}
    fn trap(&mut self, _: SrcLoc) {}
    fn promote(&mut self, _: u32, _: &[(u32, Scalar)], _: &[u32]) {}
    fn promote_miss(&mut self, _: u32, _: &[u32]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(v: i64) -> Const {
        Const::Int(Scalar::I64, v as u64)
    }

    /// A unit of blocks with `n[k]` parameters each, block 0 its entry.
    fn unit(n: &[usize]) -> Shape {
        let mut s = Shape::default();
        for &k in n {
            s.create_block(&vec![Type::I64; k]);
        }
        s
    }

    fn params(s: &mut Shape, b: u32, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        s.block_params(b, &vec![Type::I64; n], &mut out);
        out
    }

    /// entry(x) -> head(a, b, c) with a = 3, b = 0, c = x; head -> body;
    /// body -> head(a, b + 1, c): a is 3 everywhere, b varies, c is the caller's.
    #[test]
    fn a_loop_invariant_constant_is_found_and_a_counter_is_not() {
        let mut s = unit(&[1, 3, 3]);
        let x = params(&mut s, 0, 1)[0];
        let (three, zero) = (s.constant(int(3)), s.constant(int(0)));
        s.jump(1, &[three, zero, x]);
        let h = params(&mut s, 1, 3);
        s.jump(2, &h);
        let b = params(&mut s, 2, 3);
        let one = s.constant(int(1));
        let next = s.op(
            &TOp::Binary(crate::ops::BinaryOp::Add),
            &[b[1], one],
            &[],
            SrcLoc::default(),
        );
        s.brif(
            b[0],
            (1, &[b[0], next.unwrap(), b[2]]),
            (1, &[b[0], b[1], b[2]]),
        );
        let k = s.solve();
        assert_eq!(k.blocks(), 3);
        assert_eq!(k.block(0), Some(&[None][..]));
        let head = k.block(1).unwrap();
        let body = k.block(2).unwrap();
        assert!(
            matches!(head, [Some(c), None, None] if same(*c, int(3))),
            "{head:?}"
        );
        assert!(
            matches!(body, [Some(c), None, None] if same(*c, int(3))),
            "{body:?}"
        );
        assert_eq!(k.count(), 2);
        assert!(k.block(3).is_none());
    }

    /// Different constants on two paths, `0.0` against `-0.0`, and a NaN met with itself.
    #[test]
    fn constants_meet_by_their_bits() {
        let mut s = unit(&[0, 3]);
        params(&mut s, 0, 0);
        let vals = [int(1), Const::F64(0.0), Const::F64(f64::NAN)];
        let a: Vec<u32> = vals.iter().map(|&c| s.constant(c)).collect();
        let other = [int(2), Const::F64(-0.0), Const::F64(f64::NAN)];
        let b: Vec<u32> = other.iter().map(|&c| s.constant(c)).collect();
        s.jump(1, &a);
        s.jump(1, &b);
        let k = s.solve();
        assert!(matches!(k.block(1).unwrap(), [None, None, Some(Const::F64(x))] if x.is_nan()));
    }

    /// A constant reaches a parameter through a chain of parameters that pass it on; a
    /// parameter that only ever receives itself (no edge from outside reaches it) stays
    /// unknown, so it is not read as a constant.
    #[test]
    fn constants_flow_along_parameters_passed_on() {
        let mut s = unit(&[0, 1, 1, 1, 1]);
        params(&mut s, 0, 0);
        let seven = s.constant(int(7));
        s.jump(1, &[seven]);
        let p1 = params(&mut s, 1, 1);
        s.jump(2, &p1);
        let p2 = params(&mut s, 2, 1);
        s.jump(3, &p2);
        let p3 = params(&mut s, 3, 1);
        s.jump(1, &p3);
        let p4 = params(&mut s, 4, 1);
        s.jump(4, &p4);
        let k = s.solve();
        for b in 1..=3 {
            assert!(
                matches!(k.block(b).unwrap(), [Some(c)] if same(*c, int(7))),
                "{b}"
            );
        }
        assert_eq!(k.block(4), Some(&[None][..]));
    }

    /// Something other than a constant or a parameter on one edge makes the parameter
    /// variable, and what it passes on too.
    #[test]
    fn one_variable_edge_makes_the_chain_variable() {
        let mut s = unit(&[1, 1, 1]);
        let x = params(&mut s, 0, 1)[0];
        let five = s.constant(int(5));
        s.jump(1, &[five]);
        let p1 = params(&mut s, 1, 1);
        s.jump(2, &p1);
        s.jump(2, &[x]);
        let p2 = params(&mut s, 2, 1);
        s.jump(1, &p2);
        let k = s.solve();
        assert!(!k.any());
    }
}

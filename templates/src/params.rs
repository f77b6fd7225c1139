//! Constant and dead block parameters: which parameters of a unit's blocks hold the same
//! constant on every path, and which nothing reads, found on a recording of the executor's
//! run before the code is made, so that the fold layer treats them as constants and leaves
//! both out of blocks and jumps.
//!
//! **Why.** Stitching follows edges one at a time: when a block is stitched, the edges that
//! enter it later (a loop's back edge) are not known yet, so every block parameter is a
//! value in code. An interpreter whose program loads a register with a constant before a
//! loop (`LOADI r5, 2`) passes that register around the loop as a parameter of every
//! handler copy, and the stitched code divides by a frame word where an optimizer, which
//! sees the whole function, divides by 2.
//!
//! **How.** The executor runs once, into a [`crate::tape::Tape`]. [`crate::tape::Tape::shape`]
//! walks the recording and fills a [`Shape`]: for every block parameter, what each edge
//! passes to it, as the fold layer will see the value: a constant, a parameter (passed on
//! unchanged, or kept as a local array's element), or anything else. [`Shape::solve`]
//! then finds, optimistically, the parameters that hold one constant `c` on every
//! incoming edge, directly or through parameters that do (the classic removal of
//! constant phis, as Cranelift's `remove_constant_phis` pass does on a whole function):
//! every parameter starts unknown; an edge passing a constant meets it with that
//! constant, an edge passing anything else makes it variable, and an edge passing
//! parameter `q` meets it with `q`'s value, to a fixpoint on a work list over the edges
//! between parameters (each parameter changes at most twice). The unit's entry takes its
//! inputs from its caller, so they are variable; a parameter no edge reaches stays
//! unknown and is treated as variable. The tape is then replayed into the fold layer over
//! the real backend with the result ([`crate::fold::Fold::set_constant_params`]).
//!
//! **Why it is sound.** The replay makes the calls the executor made (but for the jumps
//! into merged blocks, which the shape leaves out too), so its blocks and
//! edges are those the shape was read from. What the shape calls a constant is one the
//! fold layer also has (a constant the executor asked for, or an array element the fold
//! layer keeps as a value, for the same constant index); what it calls a parameter is that
//! parameter's value. Anything the fold layer makes constant beyond that (a product by
//! 0) counts as variable, and an edge the fold layer drops (a branch on a constant)
//! still counts: both only make fewer parameters constant. So every edge into a parameter
//! found constant passes that constant at run time, and the fold layer may read the
//! parameter as the constant and leave it out of the block.
//!
//! **Dead parameters.** An interpreter's local array crosses every edge whole, so a
//! register that the code after a loop head always sets before reading it (a scratch
//! register of the loop body) is still a parameter of the head, moved into on every
//! back edge. The shape also records which parameters an operation or a terminator reads
//! (an operand, a branch condition, a returned value, an index, the elements of an array
//! accessed at an index not known now, a promoted value or a promotion's input): what
//! the fold layer hands on to its backend. The solver then marks live, backwards over
//! the edges, those read, the entry's (the caller passes them), and those passed on to a
//! live parameter (dead-phi elimination, the liveness of SSA block parameters). A dead
//! parameter of scalar type is read as zero and left out like a constant: whatever reads
//! it would have made it live, so no code sees the zero; only jumps to dead parameters
//! pass it on, and those arguments are left out too.
//!
//! **Blocks entered once.** The shape also notes, per block the replay creates, whether
//! one recorded edge enters it and nothing else (not the entry, which the caller enters):
//! [`Known::entered_once`]. What holds at the end of the block that edge leaves holds at
//! its start, so the fold layer carries its bounds checks along it.
//!
//! **Merged blocks.** A block the replay merges into the block that jumps to it
//! ([`crate::tape::Tape::replay`]) has no parameters in the shape: its values take the
//! tags of the jump's arguments, so what flows through it is what was passed in, and a
//! read of one of them is a read of what was passed. [`Known`] numbers only the blocks
//! the replay creates.

use crate::ops::Const;
use crate::types::{Scalar, Type};

/// What a value of a recorded run is, as far as its block's successors care, in one word
/// (the shape holds one per value and per edge argument): parameter number `p` of the
/// unit (blocks' parameters numbered one after another), constant number `k` of the
/// shape's constants, or anything else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tag(u32);

/// The bit that marks a constant's number in a [`Tag`].
const CONST_BIT: u32 = 1 << 31;

impl Tag {
    pub(crate) const OTHER: Tag = Tag(u32::MAX);

    /// Parameter `p` (anything else if `p` does not fit).
    pub(crate) fn param(p: u32) -> Tag {
        if p < CONST_BIT {
            Tag(p)
        } else {
            Tag::OTHER
        }
    }

    fn as_param(self) -> Option<u32> {
        (self.0 < CONST_BIT).then_some(self.0)
    }

    /// The number of the constant, if a constant.
    fn as_const(self) -> Option<u32> {
        (self.0 != u32::MAX && self.0 >= CONST_BIT).then_some(self.0 & !CONST_BIT)
    }
}

/// No constant, in the solver's per-parameter constant numbers.
const NONE: u32 = u32::MAX;

/// What the edges of a unit pass to its blocks' parameters (filled from a recorded run by
/// [`crate::tape::Tape::shape`]), and the solver's buffers.
#[derive(Default)]
pub struct Shape {
    /// Per block, the number of its first parameter (and one past the last block: the
    /// number of parameters).
    start: Vec<u32>,
    /// The blocks the replay merges into the block jumping to them, in order (they have
    /// no parameters, and the replay creates no block for them).
    merged: Vec<u32>,
    /// Per block the replay creates, whether one recorded edge enters it and nothing else
    /// does (it is not the entry).
    once: Vec<bool>,
    /// Per edge and parameter of its target: (parameter, what the edge passes).
    inputs: Vec<(u32, Tag)>,
    /// The constants tags refer to, by number.
    consts: Vec<Const>,
    /// Per value of the recorded run, its tag (a buffer of [`crate::tape::Tape::shape`]).
    pub(crate) tags: Vec<Tag>,
    /// Per parameter, its type if a scalar (only those can be left out when dead).
    scalar: Vec<Option<Scalar>>,
    /// Parameters read by an operation or a terminator, other than by being passed on.
    used: Vec<u32>,
    live: Vec<bool>,
    level: Vec<u8>,
    /// Per parameter at level CONST, the number of its constant.
    val: Vec<u32>,
    offsets: Vec<u32>,
    users: Vec<u32>,
    work: Vec<u32>,
    /// The edges that pass a parameter on to another: (from, to).
    passes: Vec<(u32, u32)>,
    /// The buffers of a [`Known`] given back ([`Shape::recycle`]), for the next.
    spare: (Vec<u32>, Vec<Option<Const>>, Vec<bool>),
    /// What the run does with its local arrays in memory ([`Shape::live_memory`]).
    memory: Memory,
}

/// An element index standing for every element of an array (an access at an index not
/// known now).
const ALL: u32 = u32::MAX;

/// What a recorded run does with its local arrays in memory ([`crate::template::Emitter::
/// local_array`]), filled by [`crate::tape::Tape::shape`] when it made any.
#[derive(Default)]
struct Memory {
    /// Per recorded block, its number among the blocks the replay makes (`u32::MAX` for a
    /// merged one; empty when the run made no local array in memory), and how many those
    /// are.
    replayed: Vec<u32>,
    blocks: u32,
    /// The replayed block the calls being read fill.
    current: u32,
    /// The values that are local arrays in memory, by number.
    arrays: Vec<u32>,
    /// Accesses in the order made: block, array, element (or [`ALL`]), whether a store.
    accesses: Vec<(u32, u32, u32, bool)>,
    /// Edges: from a replayed block to a recorded one.
    edges: Vec<(u32, u32)>,
}

impl Shape {
    /// A new block with parameters of types `types`; returns the number of its first.
    pub(crate) fn block(&mut self, types: &[Type]) -> u32 {
        if self.start.is_empty() {
            self.start.push(0);
        }
        let first = *self.start.last().expect("one entry at least");
        self.start.push(first + types.len() as u32);
        self.scalar.extend(types.iter().map(|t| match t {
            Type::Scalar(s) => Some(*s),
            _ => None,
        }));
        first
    }

    /// A block the replay merges into the one jumping to it: no parameters (its values are
    /// the jump's arguments), and no block of [`Known`].
    pub(crate) fn merged_block(&mut self) {
        let b = self.start.len().saturating_sub(1) as u32;
        self.merged.push(b);
        self.block(&[]);
    }

    /// Whether the block just made (not a merged one) is entered by one recorded edge and
    /// nothing else.
    pub(crate) fn entered_once(&mut self, once: bool) {
        self.once.push(once);
    }

    /// An operation or a terminator reads the value tagged `t`.
    #[inline]
    pub(crate) fn read(&mut self, t: Tag) {
        if let Some(p) = t.as_param() {
            self.used.push(p);
        }
    }

    /// The number of block `b`'s first parameter.
    pub(crate) fn first_param(&self, b: u32) -> u32 {
        self.start.get(b as usize).copied().unwrap_or(u32::MAX)
    }

    /// An edge passes `t` to parameter `p`.
    #[inline]
    pub(crate) fn input(&mut self, p: u32, t: Tag) {
        self.inputs.push((p, t));
    }

    /// The tag of constant `c` (anything else once the numbers run out).
    pub(crate) fn constant(&mut self, c: Const) -> Tag {
        let k = self.consts.len() as u32;
        if k >= CONST_BIT - 1 {
            return Tag::OTHER;
        }
        self.consts.push(c);
        Tag(k | CONST_BIT)
    }

    /// The constant tag `t` stands for, if any.
    pub(crate) fn constant_of(&self, t: Tag) -> Option<Const> {
        t.as_const()
            .and_then(|k| self.consts.get(k as usize).copied())
    }

    /// Forgets the unit recorded (keeping the buffers for the next).
    pub fn clear(&mut self) {
        self.start.clear();
        self.merged.clear();
        self.once.clear();
        self.inputs.clear();
        self.consts.clear();
        self.tags.clear();
        self.scalar.clear();
        self.used.clear();
        let m = &mut self.memory;
        m.replayed.clear();
        m.blocks = 0;
        m.arrays.clear();
        m.accesses.clear();
        m.edges.clear();
    }

    /// A recorded block (merged into the one jumping to it or not), for the memory.
    pub(crate) fn memory_block(&mut self, merged: bool) {
        let m = &mut self.memory;
        match merged {
            true => m.replayed.push(u32::MAX),
            false => {
                m.replayed.push(m.blocks);
                m.blocks += 1;
            }
        }
    }

    /// The recording goes on in recorded block `b`.
    pub(crate) fn memory_switch(&mut self, b: u32) {
        if let Some(&r) = self.memory.replayed.get(b as usize) {
            if r != u32::MAX {
                self.memory.current = r;
            }
        }
    }

    /// Value `v` is a local array in memory.
    pub(crate) fn memory_array(&mut self, v: u32) {
        self.memory.arrays.push(v);
    }

    /// A load or (`store`) a store of slice value `slice` at the index tagged `index`.
    pub(crate) fn memory_access(&mut self, slice: u32, index: Option<Tag>, store: bool) {
        let Some(a) = self.memory.arrays.iter().position(|&v| v == slice) else {
            return;
        };
        let k = index
            .and_then(|t| self.constant_of(t))
            .and_then(crate::semantics::int_value)
            .and_then(|k| u32::try_from(k).ok())
            .filter(|&k| k != ALL);
        // A store at an index not known now writes nothing for certain (and the fold
        // layer makes what waits before it).
        let k = match (k, store) {
            (Some(k), _) => k,
            (None, true) => return,
            (None, false) => ALL,
        };
        let m = &mut self.memory;
        m.accesses.push((m.current, a as u32, k, store));
    }

    /// An edge from the block being recorded to recorded block `b`.
    #[inline]
    pub(crate) fn memory_edge(&mut self, b: u32) {
        if !self.memory.replayed.is_empty() {
            let m = &mut self.memory;
            if let Some(&r) = m.replayed.get(b as usize) {
                m.edges.push((m.current, r));
            }
        }
    }

    /// The elements of local arrays in memory that may be read after the end of each
    /// block the replay makes before they are written (`None` if the run made no such
    /// array): a store still waiting at a block's end to an element not among them is
    /// one no later code reads ([`crate::fold::Fold::set_live_memory`]).
    ///
    /// Backward liveness on the blocks the replay makes, an element a variable: a block
    /// reads what it loads before storing it (every element, for a load at an index not
    /// known now) and kills what it stores at a constant index; a return, a trap or a
    /// promotion ends a block with nothing live (what a promotion passes on, the block
    /// loads first). Merged blocks are part of the block they are merged into, as for the
    /// fold layer, which keeps what it knows across them.
    pub fn live_memory(&self) -> Option<LiveMemory> {
        let m = &self.memory;
        if m.arrays.is_empty() {
            return None;
        }
        let n = m.blocks as usize;
        let key = |a: u32, k: u32| u64::from(a) << 32 | u64::from(k);
        let (mut reads, mut kills) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        for &(b, a, k, store) in &m.accesses {
            let (Some(r), Some(w)) = (reads.get_mut(b as usize), kills.get_mut(b as usize)) else {
                continue;
            };
            match store {
                true => w.push(key(a, k)),
                false if w.contains(&key(a, k)) => {}
                false => r.push(key(a, k)),
            }
        }
        for v in reads.iter_mut().chain(kills.iter_mut()) {
            v.sort_unstable();
            v.dedup();
        }
        let mut succ = vec![Vec::new(); n];
        for &(from, to) in &m.edges {
            if let (Some(s), true) = (succ.get_mut(from as usize), (to as usize) < n) {
                s.push(to);
            }
        }
        let mut live_in: Vec<Vec<u64>> = reads.clone();
        let mut live_out: Vec<Vec<u64>> = vec![Vec::new(); n];
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..n).rev() {
                let mut out: Vec<u64> = succ[b]
                    .iter()
                    .flat_map(|&s| live_in[s as usize].iter().copied())
                    .collect();
                out.sort_unstable();
                out.dedup();
                let mut inn: Vec<u64> = out
                    .iter()
                    .copied()
                    .filter(|x| kills[b].binary_search(x).is_err())
                    .chain(reads[b].iter().copied())
                    .collect();
                inn.sort_unstable();
                inn.dedup();
                if inn != live_in[b] {
                    live_in[b] = inn;
                    changed = true;
                }
                live_out[b] = out;
            }
        }
        let mut start = Vec::with_capacity(n + 1);
        let mut pairs = Vec::new();
        for out in live_out {
            start.push(pairs.len() as u32);
            pairs.extend(out);
        }
        start.push(pairs.len() as u32);
        Some(LiveMemory { start, pairs })
    }

    /// The constant parameters of the unit just stitched, by block in the order of their
    /// creation.
    pub fn solve(&mut self) -> Known {
        // Per parameter, its level (UNKNOWN, CONST or VARIABLE: the lattice only
        // descends) and, at CONST, the number of its constant.
        const UNKNOWN: u8 = 0;
        const CONST: u8 = 1;
        const VARIABLE: u8 = 2;
        let nparams = self.start.last().copied().unwrap_or(0) as usize;
        let (level, val, consts) = (&mut self.level, &mut self.val, &self.consts);
        level.clear();
        level.resize(nparams, UNKNOWN);
        val.clear();
        val.resize(nparams, NONE);
        // Meets parameter p with constant number c (NONE: variable); whether p changed.
        let meet = |level: &mut [u8], val: &mut [u32], p: usize, c: u32| {
            let new = match level[p] {
                VARIABLE => return false,
                UNKNOWN if c != NONE => {
                    val[p] = c;
                    CONST
                }
                CONST
                    if c != NONE
                        && (c == val[p] || same(consts[c as usize], consts[val[p] as usize])) =>
                {
                    return false
                }
                _ => {
                    val[p] = NONE;
                    VARIABLE
                }
            };
            level[p] = new;
            true
        };
        // The entry's parameters come from the caller.
        if let Some(&end) = self.start.get(1) {
            level[..end as usize].fill(VARIABLE);
        }
        let passes = &mut self.passes;
        passes.clear();
        for &(p, t) in &self.inputs {
            match t.as_param() {
                Some(q) if q != p => passes.push((q, p)),
                Some(_) => {}
                None => {
                    meet(level, val, p as usize, t.as_const().unwrap_or(NONE));
                }
            }
        }
        // Parameter q is passed on to the parameters users[offsets[q]..offsets[q + 1]].
        let (offsets, users) = (&mut self.offsets, &mut self.users);
        adjacency(
            nparams,
            passes.iter().copied(),
            offsets,
            users,
            &mut self.work,
        );
        let work = &mut self.work;
        work.clear();
        work.extend((0..nparams as u32).filter(|&q| level[q as usize] != UNKNOWN));
        while let Some(q) = work.pop() {
            let from = val[q as usize];
            let (a, b) = (
                offsets[q as usize] as usize,
                offsets[q as usize + 1] as usize,
            );
            for &p in &users[a..b] {
                if meet(level, val, p as usize, from) {
                    work.push(p);
                }
            }
        }
        // Liveness, backwards: a parameter is live if something reads it, if it belongs to
        // the entry (the caller passes it), or if it is passed on to a live parameter.
        // Parameter p receives from the parameters sources[offsets[p]..offsets[p + 1]].
        let live = &mut self.live;
        live.clear();
        live.resize(nparams, false);
        let sources = users;
        adjacency(
            nparams,
            passes.iter().map(|&(q, p)| (p, q)),
            offsets,
            sources,
            &mut self.work,
        );
        let work = &mut self.work;
        work.clear();
        let entry = self.start.get(1).map_or(0, |&e| e as usize);
        work.extend(0..entry.min(nparams) as u32);
        work.extend(
            self.used
                .iter()
                .copied()
                .filter(|&p| (p as usize) < nparams),
        );
        while let Some(p) = work.pop() {
            if std::mem::replace(&mut live[p as usize], true) {
                continue;
            }
            let (a, b) = (
                offsets[p as usize] as usize,
                offsets[p as usize + 1] as usize,
            );
            work.extend(sources[a..b].iter().copied().filter(|&q| !live[q as usize]));
        }
        // A constant parameter is read as its constant; a dead scalar one as zero, which
        // nothing reads.
        let (mut constant, mut dead) = (0, 0);
        let (mut start, mut known, mut once) = std::mem::take(&mut self.spare);
        start.clear();
        known.clear();
        once.clear();
        once.extend_from_slice(&self.once);
        known.extend((0..nparams).map(|p| {
            match (consts.get(val[p] as usize), live[p], self.scalar.get(p)) {
                (Some(&c), ..) => {
                    constant += 1;
                    Some(c)
                }
                (None, false, Some(&Some(s))) => {
                    dead += 1;
                    Some(Const::zero(s))
                }
                _ => None,
            }
        }));
        // The blocks the replay creates: merged ones left out (each is empty, so the
        // others' ranges stay as they are).
        let mut merged = self.merged.iter().peekable();
        start.extend(
            (self.start.iter().enumerate())
                .filter(|&(b, _)| merged.next_if_eq(&&(b as u32)).is_none())
                .map(|(_, &s)| s),
        );
        Known {
            start,
            consts: known,
            once,
            constant,
            dead,
        }
    }

    /// Takes back the buffers of `known`, which [`Shape::solve`] made, for the next unit.
    pub fn recycle(&mut self, known: Known) {
        self.spare = (known.start, known.consts, known.once);
    }
}

/// Fills `offsets` and `adj` with the adjacency lists of the pairs `(from, to)` over `n`
/// nodes: the `to`s of `from` are `adj[offsets[from]..offsets[from + 1]]` (`fill` is a
/// buffer).
fn adjacency(
    n: usize,
    pairs: impl Iterator<Item = (u32, u32)> + Clone,
    offsets: &mut Vec<u32>,
    adj: &mut Vec<u32>,
    fill: &mut Vec<u32>,
) {
    offsets.clear();
    offsets.resize(n + 1, 0);
    for (from, _) in pairs.clone() {
        offsets[from as usize + 1] += 1;
    }
    for k in 0..n {
        offsets[k + 1] += offsets[k];
    }
    adj.clear();
    adj.resize(offsets[n] as usize, 0);
    fill.clear();
    fill.extend_from_slice(&offsets[..n]);
    // (Through slices: the vectors' lengths are not reloaded at every store.)
    let (adj, fill) = (&mut adj[..], &mut fill[..]);
    for (from, to) in pairs {
        let at = &mut fill[from as usize];
        adj[*at as usize] = to;
        *at += 1;
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

/// The elements of a unit's local arrays in memory that later code may read, at the end of
/// each block, by block in the order of their creation ([`Shape::live_memory`]).
#[derive(Clone, Debug, Default)]
pub struct LiveMemory {
    start: Vec<u32>,
    /// Per block, sorted: array number (in the order made) and element, or every element.
    pairs: Vec<u64>,
}

impl LiveMemory {
    /// Whether element `k` of array `a` (numbered in the order made) may be read after the
    /// end of the `n`th block created (true for a block the run did not record).
    pub fn live_out(&self, n: u32, a: u32, k: u32) -> bool {
        let (Some(&s), Some(&e)) = (self.start.get(n as usize), self.start.get(n as usize + 1))
        else {
            return true;
        };
        let live = &self.pairs[s as usize..e as usize];
        let key = |k: u32| u64::from(a) << 32 | u64::from(k);
        live.binary_search(&key(k)).is_ok() || live.binary_search(&key(ALL)).is_ok()
    }
}

/// The constant parameters of a unit's blocks, by block in the order of their creation
/// (of the blocks the replay creates: those it merges are left out).
#[derive(Clone, Debug, Default)]
pub struct Known {
    start: Vec<u32>,
    /// Per parameter, the constant the fold layer reads it as (zero for a dead one).
    consts: Vec<Option<Const>>,
    /// Per block, whether one edge enters it and nothing else does.
    once: Vec<bool>,
    constant: usize,
    dead: usize,
}

impl Known {
    /// Whether any parameter is constant or dead (else the fold layer gains nothing).
    pub fn any(&self) -> bool {
        self.constant + self.dead > 0
    }

    /// The parameters of the `n`th block created, each its constant or `None`; `None` if
    /// the recording has fewer blocks.
    pub fn block(&self, n: u32) -> Option<&[Option<Const>]> {
        let (a, b) = (self.start.get(n as usize)?, self.start.get(n as usize + 1)?);
        self.consts.get(*a as usize..*b as usize)
    }

    /// Whether the `n`th block created is entered by one edge of the unit and by nothing
    /// else (what is known at the end of the block that edge leaves is known at its start).
    pub fn entered_once(&self, n: u32) -> bool {
        self.once.get(n as usize).copied().unwrap_or(false)
    }

    /// The number of blocks recorded.
    pub fn blocks(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// The number of constant parameters.
    pub fn count(&self) -> usize {
        self.constant
    }

    /// The number of dead parameters (of scalar type and not constant): no operation or
    /// terminator reads them, and they are passed on only to dead parameters.
    pub fn dead(&self) -> usize {
        self.dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::BinaryOp;
    use crate::tape::Tape;
    use crate::template::{Emitter, TOp};
    use crate::types::{Scalar, SrcLoc, Type};

    fn int(v: i64) -> Const {
        Const::Int(Scalar::I64, v as u64)
    }

    /// A recorded unit of blocks with `n[k]` parameters each, block 0 its entry.
    fn unit(n: &[usize]) -> Tape {
        let mut t = Tape::default();
        for &k in n {
            t.create_block(&vec![Type::I64; k]);
        }
        t
    }

    fn params(t: &mut Tape, b: u32) -> Vec<u32> {
        let mut out = Vec::new();
        t.switch_to_block(b);
        t.block_params(b, &mut out);
        out
    }

    /// Block `b`'s parameters, the block stitched apart from the jump into it (as if other
    /// code came between), so that it stays a block of its own even when that jump is its
    /// only edge ([`Tape::replay`] merges such a block into the jumping one).
    fn apart(t: &mut Tape, b: u32) -> Vec<u32> {
        t.switch_to_block(b);
        params(t, b)
    }

    /// Reads each of `vs` (an operation on it), so that parameters among them are live.
    fn read(t: &mut Tape, vs: &[u32]) {
        for &v in vs {
            t.op(&TOp::Binary(BinaryOp::Add), &[v, v], SrcLoc::default());
        }
    }

    fn solve(t: &Tape) -> Known {
        let mut shape = Shape::default();
        t.shape(&mut shape);
        shape.solve()
    }

    /// entry(x) -> head(a, b, c) with a = 3, b = 0, c = x; head -> body;
    /// body -> head(a, b + 1, c): a is 3 everywhere, b varies, c is the caller's.
    #[test]
    fn a_loop_invariant_constant_is_found_and_a_counter_is_not() {
        let mut t = unit(&[1, 3, 3]);
        let x = params(&mut t, 0)[0];
        let (three, zero) = (t.constant(int(3)), t.constant(int(0)));
        t.jump(1, &[three, zero, x]);
        let h = params(&mut t, 1);
        t.jump(2, &h);
        let b = apart(&mut t, 2);
        read(&mut t, &[b[2]]);
        let one = t.constant(int(1));
        let add = TOp::Binary(BinaryOp::Add);
        let next = t.op(&add, &[b[1], one], SrcLoc::default()).unwrap();
        t.brif(b[0], (1, &[b[0], next, b[2]]), (1, &[b[0], b[1], b[2]]));
        let k = solve(&t);
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

    /// entry makes a local array in memory, stores elements 0, 1 and 2, and branches to a
    /// block that reads element 0 and returns, or to one that stores element 0, then reads
    /// elements 0 and 2 and returns: at the entry's end 0 and 2 are live and 1 and 3 are
    /// not. With the first block's read at an index not known now, every element is.
    #[test]
    fn the_elements_later_code_reads_are_live_at_a_blocks_end() {
        let store = |t: &mut Tape, a: u32, k: i64, v: u32| {
            let i = t.constant(int(k));
            t.op(&TOp::Store, &[a, i, v], SrcLoc::default());
        };
        let load = |t: &mut Tape, a: u32, i: u32| t.op(&TOp::Load, &[a, i], SrcLoc::default());
        let live = |t: &Tape| {
            let mut shape = Shape::default();
            t.shape(&mut shape);
            shape.live_memory().expect("a local array in memory")
        };
        for dynamic in [false, true] {
            let mut t = unit(&[1, 0, 0]);
            let x = params(&mut t, 0)[0];
            let a = t.local_array(Scalar::I64, 4, &[]);
            for k in 0..3 {
                store(&mut t, a, k, x);
            }
            t.brif(x, (1, &[]), (2, &[]));
            apart(&mut t, 1);
            let i = if dynamic { x } else { t.constant(int(0)) };
            let v = load(&mut t, a, i).expect("a load's result");
            t.ret(Some(v));
            apart(&mut t, 2);
            store(&mut t, a, 0, x);
            let (i0, i2) = (t.constant(int(0)), t.constant(int(2)));
            let (v0, v2) = (load(&mut t, a, i0), load(&mut t, a, i2));
            read(&mut t, &[v0.expect("a result"), v2.expect("a result")]);
            t.ret(None);
            let m = live(&t);
            assert!(m.live_out(0, 0, 0) && m.live_out(0, 0, 2));
            assert_eq!(m.live_out(0, 0, 1), dynamic, "element 1");
            assert_eq!(m.live_out(0, 0, 3), dynamic, "element 3");
            // Blocks that return leave nothing live.
            assert!(!m.live_out(1, 0, 0) && !m.live_out(2, 0, 0));
        }
        // A run without local arrays in memory has nothing to say.
        let mut t = unit(&[0]);
        params(&mut t, 0);
        t.ret(None);
        let mut shape = Shape::default();
        t.shape(&mut shape);
        assert!(shape.live_memory().is_none());
    }

    /// Different constants on two paths, `0.0` against `-0.0`, and a NaN met with itself.
    #[test]
    fn constants_meet_by_their_bits() {
        let mut t = unit(&[0, 3]);
        params(&mut t, 0);
        let vals = [int(1), Const::F64(0.0), Const::F64(f64::NAN)];
        let a: Vec<u32> = vals.iter().map(|&c| t.constant(c)).collect();
        let other = [int(2), Const::F64(-0.0), Const::F64(f64::NAN)];
        let b: Vec<u32> = other.iter().map(|&c| t.constant(c)).collect();
        t.jump(1, &a);
        t.jump(1, &b);
        let p = params(&mut t, 1);
        read(&mut t, &p);
        let k = solve(&t);
        assert!(matches!(k.block(1).unwrap(), [None, None, Some(Const::F64(x))] if x.is_nan()));
    }

    /// A constant reaches a parameter through a chain of parameters that pass it on; a
    /// parameter that only ever receives itself (no edge from outside reaches it) stays
    /// unknown, so it is not read as a constant.
    #[test]
    fn constants_flow_along_parameters_passed_on() {
        let mut t = unit(&[0, 1, 1, 1, 1]);
        params(&mut t, 0);
        let seven = t.constant(int(7));
        t.jump(1, &[seven]);
        let p1 = params(&mut t, 1);
        t.jump(2, &p1);
        let p2 = apart(&mut t, 2);
        t.jump(3, &p2);
        let p3 = apart(&mut t, 3);
        t.jump(1, &p3);
        let p4 = params(&mut t, 4);
        read(&mut t, &p4);
        t.jump(4, &p4);
        let k = solve(&t);
        for b in 1..=3 {
            assert!(
                matches!(k.block(b).unwrap(), [Some(c)] if same(*c, int(7))),
                "{b}"
            );
        }
        assert_eq!(k.block(4), Some(&[None][..]));
    }

    /// A block merged into the one jumping to it has no parameters of its own: its values
    /// are the jump's arguments, so a constant passed in flows on through them, and a
    /// read of them is a read of what was passed.
    #[test]
    fn a_merged_block_passes_on_what_it_was_given() {
        let mut t = unit(&[0, 2, 2, 1]);
        params(&mut t, 0);
        let seven = t.constant(int(7));
        t.jump(1, &[seven, seven]);
        t.jump(1, &[seven, seven]);
        let p1 = params(&mut t, 1);
        // Block 2: one jump, and stitched right after it.
        t.jump(2, &p1);
        let p2 = params(&mut t, 2);
        read(&mut t, &p2[1..]);
        t.jump(3, &p2[..1]);
        t.jump(3, &p2[..1]);
        let p3 = params(&mut t, 3);
        read(&mut t, &p3);
        let k = solve(&t);
        // Block 2 is left out: the replay creates blocks 0, 1 and 3.
        assert_eq!(k.blocks(), 3);
        for b in [1, 2] {
            assert!(
                matches!(k.block(b).unwrap(), [Some(c), ..] if same(*c, int(7))),
                "{b}"
            );
        }
        // Block 1's second parameter is read through block 2's value: live.
        assert_eq!(k.dead(), 0);
    }

    /// Something other than a constant or a parameter on one edge makes the parameter
    /// variable, and what it passes on too.
    #[test]
    fn one_variable_edge_makes_the_chain_variable() {
        let mut t = unit(&[1, 1, 1]);
        let x = params(&mut t, 0)[0];
        let five = t.constant(int(5));
        t.jump(1, &[five]);
        let p1 = params(&mut t, 1);
        t.jump(2, &p1);
        t.jump(2, &[x]);
        let p2 = params(&mut t, 2);
        read(&mut t, &p2);
        t.jump(1, &p2);
        assert!(!solve(&t).any());
    }

    /// A local array's element stored at a constant index keeps the stored value (as the
    /// fold layer keeps it); a store at an index known only at run time, or out of
    /// bounds, makes every element anything.
    #[test]
    fn array_elements_follow_stores_at_constant_indices() {
        let mut t = unit(&[1, 3, 3, 3]);
        let x = params(&mut t, 0)[0];
        let (zero, one, nine) = (t.constant(int(0)), t.constant(int(1)), t.constant(int(9)));
        let mut arr = vec![zero, zero, zero];
        t.array_store(Scalar::I64, &mut arr, one, nine, SrcLoc::default());
        let got = t.array_load(Scalar::I64, &arr, one, SrcLoc::default());
        t.jump(1, &[arr[0], got, arr[2]]);
        let mut arr2 = arr.clone();
        t.array_store(Scalar::I64, &mut arr2, x, nine, SrcLoc::default());
        t.jump(2, &arr2);
        let mut arr3 = arr.clone();
        let three = t.constant(int(3));
        t.array_store(Scalar::I64, &mut arr3, three, nine, SrcLoc::default());
        t.jump(3, &arr3);
        for b in 1..=3 {
            let p = params(&mut t, b);
            read(&mut t, &p);
        }
        let k = solve(&t);
        assert!(matches!(
            k.block(1).unwrap(),
            [Some(a), Some(b), Some(c)] if same(*a, int(0)) && same(*b, int(9)) && same(*c, int(0))
        ));
        assert_eq!(k.block(2), Some(&[None, None, None][..]));
        assert_eq!(k.block(3), Some(&[None, None, None][..]));
    }

    /// Liveness: a parameter that nothing reads, passed on only to such parameters, is
    /// dead and read as zero (a loop-carried one included); one passed on to a parameter
    /// that is read is live; the entry's parameters and parameters of other than scalar
    /// type never are dead.
    #[test]
    fn parameters_nothing_reads_are_dead() {
        let mut t = Tape::default();
        let slice = Type::Slice {
            elem: Scalar::I64,
            mutable: false,
        };
        t.create_block(&[Type::I64, Type::I64]);
        t.create_block(&[Type::I64, Type::I64, Type::I64, slice]);
        t.create_block(&[Type::I64]);
        let x = params(&mut t, 0);
        let s = t.static_slice(0, slice);
        t.jump(1, &[x[0], x[1], x[0], s]);
        // head(a, b, c, s): reads a; passes b around the loop, c to the exit, which reads
        // it; s is never read.
        let h = params(&mut t, 1);
        read(&mut t, &[h[0]]);
        t.brif(h[0], (1, &[h[0], h[1], h[2], h[3]]), (2, &[h[2]]));
        let e = params(&mut t, 2);
        t.ret(Some(e[0]));
        let k = solve(&t);
        assert_eq!(k.block(0), Some(&[None, None][..]));
        assert!(
            matches!(k.block(1).unwrap(), [None, Some(z), None, None] if same(*z, int(0))),
            "{:?}",
            k.block(1)
        );
        assert_eq!(k.block(2), Some(&[None][..]));
        assert_eq!((k.count(), k.dead()), (0, 1));
        assert!(k.any());
    }
}

//! The memo of block copies: (template block, static values) to the emitter's copy, with
//! every key kept once in one arena.
//!
//! A lookup hashes the block and the static values' exact encodings
//! ([`SVal::key_bits`], so floats compare by their bits) and follows the chain of copies
//! with that hash. Entries are a few words, so growing the table moves little; keys are
//! never copied after they are stored.

use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHasher};

use crate::ge::{Block, SVal};

/// No copy (the end of a chain).
const NONE: u32 = u32::MAX;

/// A part of a memo key: a static value, or the tagged word compiled code holds for one
/// (both hash and compare by [`SVal::key_bits`]).
pub(super) trait KeyPart: Copy {
    fn bits(&self) -> (u8, u64);
}

impl KeyPart for SVal {
    #[inline]
    fn bits(&self) -> (u8, u64) {
        self.key_bits()
    }
}

/// A static value as compiled code holds it in a key: its tag and its word
/// ([`SVal::key_bits`]), two words each.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(super) struct Word {
    pub(super) tag: u64,
    pub(super) bits: u64,
}

impl Word {
    pub(super) fn of(v: SVal) -> Word {
        let (tag, bits) = v.key_bits();
        Word {
            tag: u64::from(tag),
            bits,
        }
    }
}

impl KeyPart for Word {
    #[inline]
    fn bits(&self) -> (u8, u64) {
        (self.tag as u8, self.bits)
    }
}

/// One copy: its template block, its key (`at..at + len` in the arena), the emitter's
/// block, and the previous copy with the same hash.
struct Entry<B> {
    block: Block,
    at: u32,
    len: u32,
    res: B,
    next: u32,
}

/// Where a copy [`Memo::get`] did not find goes: the hash of its block and key.
pub(super) struct Vacant(u64);

/// Copies by (block, static values), numbered in the order they were made.
pub(super) struct Memo<B, K = SVal> {
    heads: FxHashMap<u64, u32>,
    entries: Vec<Entry<B>>,
    vals: Vec<K>,
}

impl<B: Copy, K: KeyPart> Memo<B, K> {
    pub(super) fn new() -> Memo<B, K> {
        // Room for a typical unit's copies, so that the memo does not grow step by step.
        Memo {
            heads: FxHashMap::with_capacity_and_hasher(64, Default::default()),
            entries: Vec::with_capacity(64),
            vals: Vec::with_capacity(256),
        }
    }

    /// A memo that holds no memory yet.
    pub(super) fn empty() -> Memo<B, K> {
        Memo {
            heads: FxHashMap::default(),
            entries: Vec::new(),
            vals: Vec::new(),
        }
    }

    /// Forgets every copy, keeping the memory.
    pub(super) fn clear(&mut self) {
        self.heads.clear();
        self.entries.clear();
        self.vals.clear();
    }

    /// The room its tables have, in entries (copies, chain heads and static values).
    pub(super) fn room(&self) -> usize {
        self.heads.capacity() + self.entries.capacity() + self.vals.capacity()
    }

    fn hash(b: Block, key: &[K]) -> u64 {
        let mut h = FxHasher::default();
        h.write_u32(b.as_u32());
        for v in key {
            let (tag, bits) = v.bits();
            h.write_u8(tag);
            h.write_u64(bits);
        }
        h.finish()
    }

    /// The copy of `b` for `key`, or, if none was made, where to insert it.
    pub(super) fn get(&self, b: Block, key: &[K]) -> Result<B, Vacant> {
        let h = Self::hash(b, key);
        let mut k = self.heads.get(&h).copied().unwrap_or(NONE);
        while let Some(e) = self.entries.get(k as usize) {
            let stored = &self.vals[e.at as usize..(e.at + e.len) as usize];
            let same = e.block == b
                && stored.len() == key.len()
                && stored.iter().zip(key).all(|(x, y)| x.bits() == y.bits());
            if same {
                return Ok(e.res);
            }
            k = e.next;
        }
        Err(Vacant(h))
    }

    /// Stores `res` as the copy of `b` for `key`, which [`Memo::get`] did not find (and
    /// gave `at`); returns the copy's number.
    pub(super) fn insert(&mut self, at: Vacant, b: Block, key: &[K], res: B) -> u32 {
        let k = self.entries.len() as u32;
        let next = self.heads.insert(at.0, k).unwrap_or(NONE);
        self.entries.push(Entry {
            block: b,
            at: self.vals.len() as u32,
            len: key.len() as u32,
            res,
            next,
        });
        self.vals.extend_from_slice(key);
        k
    }

    /// Copy number `k`: its template block, static values and the emitter's block.
    pub(super) fn copy(&self, k: u32) -> (Block, &[K], B) {
        let e = &self.entries[k as usize];
        (
            e.block,
            &self.vals[e.at as usize..(e.at + e.len) as usize],
            e.res,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::entity::EntityRef;
    use dyc_templates::ops::Const;
    use dyc_templates::types::Scalar;

    fn int(x: u64) -> SVal {
        SVal::Scalar(Const::Int(Scalar::I64, x))
    }

    /// Copies are found by block and exact values (a float NaN finds its own copy; equal
    /// bits of different types do not collide), and numbered in the order they were made.
    #[test]
    fn copies_are_found_by_block_and_exact_values() {
        let mut m = Memo::new();
        let (b0, b1) = (Block::new(0), Block::new(1));
        let nan = SVal::Scalar(Const::F64(f64::NAN));
        let keys = [
            (b0, vec![int(1), int(2)]),
            (b1, vec![int(1), int(2)]),
            (b0, vec![int(2), int(1)]),
            (b0, vec![nan]),
            (b0, vec![SVal::Scalar(Const::Int(Scalar::U64, 1)), int(2)]),
            (b0, vec![]),
        ];
        for (n, (b, key)) in keys.iter().enumerate() {
            let at = m.get(*b, key).expect_err("not made yet");
            assert_eq!(m.insert(at, *b, key, n * 10), n as u32);
        }
        for (n, (b, key)) in keys.iter().enumerate() {
            assert_eq!(m.get(*b, key).ok(), Some(n * 10));
            let (cb, ck, res) = m.copy(n as u32);
            assert_eq!((cb, res), (*b, n * 10));
            assert!(ck
                .iter()
                .zip(key)
                .all(|(x, y)| x.key_bits() == y.key_bits()));
        }
        assert!(m.get(b1, &[int(2), int(1)]).is_err());
    }

    /// Keys of the words compiled code writes are told apart exactly as the static values
    /// they encode.
    #[test]
    fn word_keys_are_found_as_their_values_are() {
        let mut m: Memo<usize, Word> = Memo::new();
        let b = Block::new(0);
        let keys: Vec<Vec<SVal>> = vec![
            vec![int(1), int(2)],
            vec![SVal::Scalar(Const::Int(Scalar::U64, 1)), int(2)],
            vec![SVal::Scalar(Const::F64(f64::NAN))],
            vec![SVal::Scalar(Const::Bool(true))],
            vec![SVal::Slice(1)],
            vec![],
        ];
        let words = |k: &[SVal]| k.iter().map(|&v| Word::of(v)).collect::<Vec<_>>();
        for (n, k) in keys.iter().enumerate() {
            let at = m.get(b, &words(k)).expect_err("not made yet");
            m.insert(at, b, &words(k), n);
        }
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(m.get(b, &words(k)).ok(), Some(n));
        }
        assert!(m.get(b, &words(&[int(2), int(1)])).is_err());
    }
}

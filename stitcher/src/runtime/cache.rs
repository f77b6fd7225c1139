//! The one cache of specialized code, used at region entries and at promotion sites alike:
//! a concurrent map from key words to cached values (DyC's `cache_all` policy; the other
//! caching policies will live here too).
//!
//! **Keys** are sequences of 64-bit words: a scalar run-time constant is its word; a
//! static slice is its length and a hash of its contents ([`hash_bytes`]), so a caller
//! computes its key once per call, in a fixed buffer, without allocating. A lookup borrows
//! the words (`&[u64]`); only an insertion copies them into the map. A content hash can
//! collide: whoever keys by one verifies the contents of what it finds (the region entry
//! compares the slice with the one the specialization was made for), so a collision costs a
//! miss, never a wrong answer.
//!
//! **Thread safety.** Lookups take a shard's read lock for the duration of the probe only;
//! the first insertion for a key wins and every racer gets the winner's value. Nothing here
//! runs user code.

use std::borrow::Borrow;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use dashmap::DashMap;

/// Keys of up to this many words are stored inline.
const INLINE: usize = 4;

/// A key as stored in the map.
#[derive(Clone, Debug)]
enum Key {
    Inline(u8, [u64; INLINE]),
    Heap(Box<[u64]>),
}

impl Key {
    fn new(words: &[u64]) -> Key {
        if words.len() <= INLINE {
            let mut a = [0; INLINE];
            a[..words.len()].copy_from_slice(words);
            Key::Inline(words.len() as u8, a)
        } else {
            Key::Heap(words.into())
        }
    }

    fn words(&self) -> &[u64] {
        match self {
            Key::Inline(n, a) => &a[..*n as usize],
            Key::Heap(b) => b,
        }
    }
}

impl Borrow<[u64]> for Key {
    fn borrow(&self) -> &[u64] {
        self.words()
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.words().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.words() == other.words()
    }
}

impl Eq for Key {}

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// A fast hasher for word keys (multiply-rotate over 64-bit words; keys are not chosen by
/// an adversary: they are the host's own run-time constants).
#[derive(Default, Clone, Copy)]
pub struct WordHasher(u64);

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("eight bytes"));
            self.write_u64(w);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(MUL);
    }

    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }

    fn finish(&self) -> u64 {
        // A final avalanche so that DashMap's shard and bucket bits both vary.
        let mut x = self.0;
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 32)
    }
}

/// A hash of a byte string (the contents of a static slice), for keys.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = WordHasher(bytes.len() as u64);
    h.write(bytes);
    h.finish()
}

/// A concurrent cache from key words to values.
pub struct Cache<V> {
    map: DashMap<Key, V, BuildHasherDefault<WordHasher>>,
}

impl<V: Clone> Default for Cache<V> {
    fn default() -> Cache<V> {
        Cache {
            map: DashMap::default(),
        }
    }
}

impl<V: Clone> Cache<V> {
    /// The value cached for `key`, if any. Allocates nothing.
    pub fn get(&self, key: &[u64]) -> Option<V> {
        self.map.get(key).map(|v| v.clone())
    }

    /// Caches `value` for `key` unless a value is already there; returns the cached value.
    pub fn insert(&self, key: &[u64], value: V) -> V {
        self.map.entry(Key::new(key)).or_insert(value).clone()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_length_round_trip_and_first_insert_wins() {
        let c: Cache<u32> = Cache::default();
        let keys: Vec<Vec<u64>> = (0..10)
            .map(|n| (0..n).map(|k| k * 7 + n).collect())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.get(k), None);
            assert_eq!(c.insert(k, i as u32), i as u32);
            assert_eq!(c.insert(k, 99), i as u32);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.get(k), Some(i as u32));
        }
        assert_eq!(c.len(), 10);
        assert_ne!(hash_bytes(&[1, 2, 3]), hash_bytes(&[1, 2, 3, 0]));
    }
}

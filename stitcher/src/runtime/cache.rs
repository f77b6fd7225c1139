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
//! **Thread safety and lifetime.** Entries are immutable and live as long as the cache, so
//! lookups return references and a warm hit takes no lock (see [`Cache`]); the first
//! insertion for a key wins and every racer gets the winner's value. Nothing here runs
//! user code. (Evicting entries, for the bounded policies, will need the runtime's
//! reclamation scheme: readers may hold references without a lock.)

use std::borrow::Borrow;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::marker::PhantomData;

use std::sync::atomic::{AtomicPtr, Ordering};

use dashmap::DashMap;
use parking_lot::Mutex;

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
    #[inline]
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
    #[inline]
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

    #[inline]
    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(23) ^ w).wrapping_mul(MUL);
    }

    #[inline]
    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // A final avalanche so that DashMap's shard and bucket bits both vary.
        let mut x = self.0;
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 32)
    }
}

/// A hash of a byte string (the contents of a static slice), for keys. Four independent
/// lanes of 64-bit words, so that long slices hash at several bytes per cycle.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut lanes = [
        bytes.len() as u64,
        0x2545_f491_4f6c_dd1d,
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
    ];
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("eight bytes"));
            *lane = (lane.rotate_left(23) ^ w).wrapping_mul(MUL);
        }
    }
    let mut h = WordHasher(lanes[0]);
    for &l in &lanes[1..] {
        h.write_u64(l);
    }
    h.write(blocks.remainder());
    h.finish()
}

/// Slots of a cache's front table (a power of two).
const FRONT_SLOTS: usize = 64;

/// An entry: its key and value, allocated once and kept until the cache goes.
struct Entry<V> {
    key: Key,
    value: V,
}

/// A concurrent cache from key words to values.
///
/// Entries are immutable and live as long as the cache (no eviction), so a lookup can
/// return a plain reference. A hit usually never touches a lock: a direct-mapped **front
/// table** of atomic pointers to entries is probed first (one hash, one load, one key
/// comparison); only a front miss looks in the map (a shard's read lock), and then points
/// the front slot at the entry it found.
pub struct Cache<V> {
    front: Box<[AtomicPtr<Entry<V>>]>,
    /// Key to entry (the address of a boxed entry in `entries`).
    map: DashMap<Key, usize, BuildHasherDefault<WordHasher>>,
    /// Owns the entries (boxed: their addresses must not move).
    #[allow(clippy::vec_box)]
    entries: Mutex<Vec<Box<Entry<V>>>>,
    /// Lookups hand out `&V` to any thread: the cache is `Sync` only if `V` is.
    _values: PhantomData<V>,
}

impl<V> Default for Cache<V> {
    fn default() -> Cache<V> {
        Cache {
            front: (0..FRONT_SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            map: DashMap::default(),
            entries: Mutex::new(Vec::new()),
            _values: PhantomData,
        }
    }
}

/// The front slot of a key.
fn front_slot(key: &[u64]) -> usize {
    let mut h = WordHasher(key.len() as u64);
    for &w in key {
        h.write_u64(w);
    }
    (h.finish() as usize) & (FRONT_SLOTS - 1)
}

impl<V> Cache<V> {
    /// The value cached for `key`, if any. Allocates nothing and, when the front table
    /// holds the key, takes no lock.
    pub fn get(&self, key: &[u64]) -> Option<&V> {
        let slot = &self.front[front_slot(key)];
        let e = slot.load(Ordering::Acquire);
        if !e.is_null() {
            // SAFETY: front slots only ever hold addresses of boxed entries owned by
            // `self.entries`, which are never removed or moved while `self` lives; the
            // Acquire load pairs with the Release store that published the entry.
            let e = unsafe { &*e };
            if e.key.words() == key {
                return Some(&e.value);
            }
        }
        let addr = *self.map.get(key)?;
        slot.store(addr as *mut Entry<V>, Ordering::Release);
        // SAFETY: map values are addresses of boxed entries owned by `self.entries`, as
        // above.
        Some(unsafe { &(*(addr as *const Entry<V>)).value })
    }

    /// Caches `value` for `key` unless a value is already there; returns the cached value.
    pub fn insert(&self, key: &[u64], value: V) -> &V {
        let mut entries = self.entries.lock();
        let addr = match self.map.get(key) {
            Some(a) => *a,
            None => {
                let e = Box::new(Entry {
                    key: Key::new(key),
                    value,
                });
                let addr = &*e as *const Entry<V> as usize;
                entries.push(e);
                self.map.insert(Key::new(key), addr);
                addr
            }
        };
        self.front[front_slot(key)].store(addr as *mut Entry<V>, Ordering::Release);
        // SAFETY: as in `get`.
        unsafe { &(*(addr as *const Entry<V>)).value }
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
        // More keys than front slots, so that front slots are overwritten; lengths 0 to 10.
        let mut keys: Vec<Vec<u64>> = (0..199)
            .map(|n| (0..n % 10 + 1).map(|k| k * 7 + n).collect())
            .collect();
        keys.push(vec![]);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.get(k), None, "{k:?}");
            assert_eq!(*c.insert(k, i as u32), i as u32);
            assert_eq!(*c.insert(k, 99), i as u32);
        }
        for _ in 0..2 {
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(c.get(k), Some(&(i as u32)));
            }
        }
        assert_eq!(c.len(), 200);
        assert_ne!(hash_bytes(&[1, 2, 3]), hash_bytes(&[1, 2, 3, 0]));
    }
}

//! The one cache of specialized code, used at region entries and at promotion sites alike:
//! a concurrent map from key words to cached values, with last-use ticks for eviction.
//!
//! **Keys** are sequences of 64-bit words: a scalar run-time constant is its word; a
//! static slice is its length and a hash of its contents ([`hash_bytes`]), so a caller
//! computes its key once per call, in a fixed buffer, without allocating. A lookup borrows
//! the words (`&[u64]`); only an insertion copies them into the map. A content hash can
//! collide: whoever keys by one verifies the contents of what it finds (the region entry
//! compares the slice with the one the specialization was made for), so a collision costs a
//! miss, never a wrong answer.
//!
//! **Thread safety and lifetime.** Entries are immutable; lookups return references that
//! live as long as the caller's epoch guard, and a warm hit takes no lock (see [`Cache`]);
//! the first insertion for a key wins and every racer gets the winner's value. A removed
//! entry is unlinked at once and freed only when no thread can still hold it (epoch-based
//! reclamation, [`Cache::remove`]). Nothing here runs user code.

use std::borrow::Borrow;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::marker::PhantomData;

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::epoch::{self, Guard};
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

    #[inline]
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

/// An entry: its key, its value, and when it was last used (a tick of the owner's clock).
struct Entry<V> {
    key: Key,
    value: V,
    used: AtomicU64,
    /// The entry's number in this cache (in the order entries were inserted), so that an
    /// entry replaced under the same key is told apart from it.
    born: u64,
    /// What the entry counts in [`Cache::weight`].
    weight: AtomicUsize,
    /// The thread that inserted it (and made its value, in practice), which frees it if
    /// still alive: see [`epoch::defer_to`].
    home: epoch::Home,
}

/// A pointer to a removed entry, moved into the epoch collector's deferred function.
struct Retired<V>(*mut Entry<V>);

// SAFETY: a retired entry is reachable from nowhere else (removed from the map and the
// front table under the cache's lock): the deferred function is its only owner, and moving
// it to the collecting thread moves a `Box<Entry<V>>`, which is `Send` when `V` is.
unsafe impl<V: Send> Send for Retired<V> {}

/// A concurrent cache from key words to values, with removal.
///
/// A hit usually never touches a lock: a direct-mapped **front table** of atomic pointers
/// to entries is probed first (one hash, one load, one key comparison); only a front miss
/// looks in the map (a shard's read lock), and then points the front slot at the entry it
/// found. Insertions and removals are serialized by one mutex (they follow a
/// specialization, which costs far more).
///
/// **Reclamation.** Lookups take an epoch [`Guard`] and return references that live as long
/// as it: a removed entry is unlinked at once (from the map and every front slot) and
/// freed by the epoch collector only once every thread that was pinned when it was removed
/// has unpinned, so no reader ever sees a freed entry.
pub struct Cache<V> {
    front: Arc<[AtomicPtr<Entry<V>>; FRONT_SLOTS]>,
    /// Key to entry (the address of a boxed entry this cache owns).
    map: DashMap<Key, usize, BuildHasherDefault<WordHasher>>,
    /// Serializes insertions and removals.
    writers: Mutex<()>,
    /// Entries inserted so far, the number cached and the sum of their weights (kept
    /// here, not asked of the map: its length locks every shard in turn, and the
    /// program's eviction asks for it at every step).
    born: AtomicU64,
    count: AtomicUsize,
    weight: AtomicUsize,
    /// Lookups hand out `&V` to any thread: the cache is `Sync` only if `V` is.
    _values: PhantomData<V>,
}

impl<V> Default for Cache<V> {
    fn default() -> Cache<V> {
        Cache {
            front: Arc::new(std::array::from_fn(
                |_| AtomicPtr::new(std::ptr::null_mut()),
            )),
            map: DashMap::default(),
            writers: Mutex::new(()),
            born: AtomicU64::new(0),
            count: AtomicUsize::new(0),
            weight: AtomicUsize::new(0),
            _values: PhantomData,
        }
    }
}

/// Clears front slot `slot` if it points at `e` (comparing addresses only). An entry is
/// only ever stored in the slot of its own key ([`front_slot`]), by an insertion or by a
/// lookup that found it in the map under that key, so that slot is the only one to clear.
/// (Clearing all 64 slots, an atomic compare-and-swap each, twice per removal, was a
/// noticeable part of a removal.)
fn unlink<V>(front: &[AtomicPtr<Entry<V>>], slot: usize, e: *mut Entry<V>) {
    let _ =
        front[slot].compare_exchange(e, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed);
}

/// Whether two keys are equal, compared inline (slice equality calls `memcmp`, which
/// costs more than the compare for keys of a few words).
#[inline]
fn same_words(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The front slot of a key.
#[inline(always)]
fn front_slot(key: &[u64]) -> usize {
    let mut h = WordHasher(key.len() as u64);
    for &w in key {
        h.write_u64(w);
    }
    (h.finish() as usize) & (FRONT_SLOTS - 1)
}

impl<V> Cache<V> {
    /// The entry cached for `key`, if any. Allocates nothing and, when the front table
    /// holds the key, takes no lock.
    #[inline(always)]
    fn entry<'a>(&'a self, key: &[u64], guard: &'a Guard) -> Option<&'a Entry<V>> {
        let slot = &self.front[front_slot(key)];
        let e = slot.load(Ordering::Acquire);
        if !e.is_null() {
            // SAFETY: front slots hold null or addresses of boxed entries this cache
            // allocated; an entry is freed only after it was unlinked from its slot (the
            // only one it can be in, see `unlink`) and every thread pinned at that time
            // unpinned, and `guard` pins this thread, so `e` (loaded while pinned) is
            // alive for the guard's lifetime. The Acquire load pairs with the Release
            // store that published the entry.
            let e = unsafe { &*e };
            if same_words(e.key.words(), key) {
                return Some(e);
            }
        }
        self.entry_in_map(key, slot, guard)
    }

    /// [`Cache::entry`] when the front table does not hold `key`.
    #[cold]
    #[inline(never)]
    fn entry_in_map<'a>(
        &'a self,
        key: &[u64],
        slot: &AtomicPtr<Entry<V>>,
        _guard: &'a Guard,
    ) -> Option<&'a Entry<V>> {
        let addr = *self.map.get(key)?;
        slot.store(addr as *mut Entry<V>, Ordering::Release);
        // SAFETY: map values are addresses of live boxed entries, protected by the guard as
        // above. The store above may put an entry into its front slot after a removal of
        // it cleared the slot: [`Cache::remove`] clears it again once every thread pinned
        // at the removal (so every thread that could make such a store) has unpinned, and
        // frees the entry only one grace period after that.
        Some(unsafe { &*(addr as *const Entry<V>) })
    }

    /// The value cached for `key`, if any, marked used at tick `now`.
    #[inline(always)]
    pub fn get<'a>(&'a self, key: &[u64], now: u64, guard: &'a Guard) -> Option<&'a V> {
        let e = self.entry(key, guard)?;
        if e.used.load(Ordering::Relaxed) != now {
            e.used.store(now, Ordering::Relaxed);
        }
        Some(&e.value)
    }

    /// Caches `value` for `key` unless a value is already there; returns the cached value
    /// and whether it is `value` (false: a racer's value was there first).
    pub fn insert<'a>(
        &'a self,
        key: &[u64],
        value: V,
        now: u64,
        guard: &'a Guard,
    ) -> (&'a V, bool) {
        self.insert_weighted(key, value, now, 0, guard)
    }

    /// [`Cache::insert`], the entry counting `weight` in [`Cache::weight`].
    pub fn insert_weighted<'a>(
        &'a self,
        key: &[u64],
        value: V,
        now: u64,
        weight: usize,
        _guard: &'a Guard,
    ) -> (&'a V, bool) {
        let _w = self.writers.lock();
        // The map, not the front table, says what is cached: a front slot may still point
        // at an entry removed a moment ago.
        if let Some(addr) = self.map.get(key).map(|a| *a) {
            // SAFETY: a map value is a live entry, and `guard` keeps it so (see `entry`).
            return (unsafe { &(*(addr as *const Entry<V>)).value }, false);
        }
        let e = Box::into_raw(Box::new(Entry {
            key: Key::new(key),
            value,
            used: AtomicU64::new(now),
            born: self.born.fetch_add(1, Ordering::Relaxed),
            weight: AtomicUsize::new(weight),
            home: epoch::home(),
        }));
        self.weight.fetch_add(weight, Ordering::Relaxed);
        self.map.insert(Key::new(key), e as usize);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.front[front_slot(key)].store(e, Ordering::Release);
        // SAFETY: just allocated and published; freed only by `remove` or `drop`, as above.
        (unsafe { &(*e).value }, true)
    }

    /// Removes the entry for `key`, if any, and returns a reference to its value that is
    /// valid while `guard` lives. The entry is unlinked at once (from the map, then from
    /// the front table) and freed in two steps, each after a grace period of the epoch
    /// scheme: after the first, no thread can still be storing it into a front slot (only
    /// threads that found it in the map before the removal do, while pinned), so the front
    /// table is cleared of it for good; after the second, no thread can still hold it
    /// from a front slot, so it is freed.
    pub fn remove<'a>(&'a self, key: &[u64], _guard: &'a Guard) -> Option<&'a V>
    where
        V: Send + 'static,
    {
        let _w = self.writers.lock();
        let (_, addr) = self.map.remove(key)?;
        self.count.fetch_sub(1, Ordering::Relaxed);
        let e = addr as *mut Entry<V>;
        let slot = front_slot(key);
        unlink(&self.front[..], slot, e);
        // SAFETY: `e` is live until the deferred functions below run (after `_guard`).
        let (weight, home) = unsafe { ((*e).weight.load(Ordering::Relaxed), (*e).home) };
        self.weight.fetch_sub(weight, Ordering::Relaxed);
        let front = self.front.clone();
        let retired = Retired(e);
        epoch::defer(move || {
            let r = retired;
            unlink(&front[..], slot, r.0);
            epoch::defer_to(home, move || {
                let r = r;
                // SAFETY: see `Retired` and above: the entry is in no map or front slot,
                // and every thread that could hold it has unpinned since it left the last
                // one; this closure is its only owner and runs once.
                drop(unsafe { Box::from_raw(r.0) });
            });
        });
        // SAFETY: the entry is freed only after `_guard` (pinned now) is dropped.
        Some(unsafe { &(*e).value })
    }

    /// Calls `f` on every entry's key, value and last-use tick (entries inserted or
    /// removed meanwhile may or may not be seen).
    pub fn for_each(&self, mut f: impl FnMut(&[u64], &V, u64)) {
        for r in self.map.iter() {
            // SAFETY: map values are live entries; the shard's read lock held by the
            // iterator keeps `remove` (which takes the shard's write lock) from retiring
            // this one meanwhile.
            let e = unsafe { &*(*r.value() as *const Entry<V>) };
            f(r.key().words(), &e.value, e.used.load(Ordering::Relaxed));
        }
    }

    /// The number and last-use tick of the entry cached for `key`, if any.
    pub fn stamp(&self, key: &[u64]) -> Option<(u64, u64)> {
        let r = self.map.get(key)?;
        // SAFETY: map values are live entries; the shard's read lock held by `r` keeps
        // `remove` from retiring this one meanwhile.
        let e = unsafe { &*(*r.value() as *const Entry<V>) };
        Some((e.born, e.used.load(Ordering::Relaxed)))
    }

    /// Calls `f` on every entry's key, number and last-use tick.
    pub fn for_each_stamp(&self, mut f: impl FnMut(&[u64], u64, u64)) {
        for r in self.map.iter() {
            // SAFETY: as in `for_each`.
            let e = unsafe { &*(*r.value() as *const Entry<V>) };
            f(r.key().words(), e.born, e.used.load(Ordering::Relaxed));
        }
    }

    /// The sum of the weights of the entries cached.
    pub fn weight(&self) -> usize {
        self.weight.load(Ordering::Relaxed)
    }

    /// Sets every entry's weight to `weigh` of its value (weights that changed since the
    /// entries were inserted).
    pub fn reweigh(&self, weigh: impl Fn(&V) -> usize) {
        let _w = self.writers.lock();
        let mut total = 0;
        for r in self.map.iter() {
            // SAFETY: as in `for_each`; the writers' lock keeps every entry in the map.
            let e = unsafe { &*(*r.value() as *const Entry<V>) };
            let w = weigh(&e.value);
            e.weight.store(w, Ordering::Relaxed);
            total += w;
        }
        self.weight.store(total, Ordering::Relaxed);
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V> Drop for Cache<V> {
    fn drop(&mut self) {
        for r in self.map.iter() {
            // SAFETY: dropping the cache: no reader holds a reference (they borrow the
            // cache), and entries still in the map were never retired, so each is freed
            // exactly once, here.
            drop(unsafe { Box::from_raw(*r.value() as *mut Entry<V>) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The weight of a cache is the sum of its entries' (as inserted, or as reweighed), and
    /// an entry put back under a key removed before gets a new number.
    #[test]
    fn weights_add_up_and_entries_are_numbered() {
        let c: Cache<u64> = Cache::default();
        let g = epoch::pin();
        for k in 0..10u64 {
            c.insert_weighted(&[k], k, 2 * k, k as usize * 10, &g);
        }
        assert_eq!(c.weight(), 450);
        let (born, used) = c.stamp(&[3]).expect("cached");
        assert_eq!(used, 6);
        assert!(c.remove(&[3], &g).is_some());
        assert_eq!(c.weight(), 420);
        assert!(c.stamp(&[3]).is_none());
        c.insert_weighted(&[3], 3, 40, 5, &g);
        assert_ne!(c.stamp(&[3]).map(|s| s.0), Some(born));
        assert_eq!(c.weight(), 425);
        c.reweigh(|&v| v as usize);
        assert_eq!(c.weight(), 45);
        let mut stamps = 0;
        c.for_each_stamp(|_, _, _| stamps += 1);
        assert_eq!(stamps, 10);
    }

    #[test]
    fn keys_of_every_length_round_trip_and_first_insert_wins() {
        let c: Cache<u32> = Cache::default();
        let g = epoch::pin();
        // More keys than front slots, so that front slots are overwritten; lengths 0 to 10.
        let mut keys: Vec<Vec<u64>> = (0..199)
            .map(|n| (0..n % 10 + 1).map(|k| k * 7 + n).collect())
            .collect();
        keys.push(vec![]);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.get(k, 0, &g), None, "{k:?}");
            assert_eq!(c.insert(k, i as u32, 0, &g), (&(i as u32), true));
            assert_eq!(c.insert(k, 99, 0, &g), (&(i as u32), false));
        }
        for _ in 0..2 {
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(c.get(k, 0, &g), Some(&(i as u32)));
            }
        }
        assert_eq!(c.len(), 200);
        assert_ne!(hash_bytes(&[1, 2, 3]), hash_bytes(&[1, 2, 3, 0]));
    }

    #[test]
    fn removed_entries_are_gone_and_the_least_recent_is_found() {
        let c: Cache<Arc<u32>> = Cache::default();
        let g = epoch::pin();
        let least_recent = |c: &Cache<Arc<u32>>| {
            let mut best: Option<(Vec<u64>, u64)> = None;
            c.for_each_stamp(|key, _, used| {
                if best.as_ref().is_none_or(|(_, u)| used < *u) {
                    best = Some((key.to_vec(), used));
                }
            });
            best
        };
        for k in 0..10u64 {
            c.insert(&[k], Arc::new(k as u32), k, &g);
        }
        // Touch key 0 late: key 1 becomes the least recent.
        assert_eq!(c.get(&[0], 20, &g).map(|v| **v), Some(0));
        assert_eq!(least_recent(&c), Some((vec![1], 1)));
        let v = c.remove(&[1], &g).expect("present");
        // The removed value stays readable while the guard lives.
        assert_eq!(**v, 1);
        assert_eq!(c.get(&[1], 21, &g), None);
        assert_eq!(c.len(), 9);
        assert_eq!(least_recent(&c), Some((vec![2], 2)));
        assert!(c.remove(&[1], &g).is_none());
    }

    #[test]
    fn racing_readers_and_removers_never_see_a_freed_entry() {
        // Values own a heap allocation whose contents are checked on every hit: reading a
        // freed entry would (very likely) show a different value, and Miri or a sanitizer
        // would flag it.
        let c: Arc<Cache<Box<[u64; 4]>>> = Arc::new(Cache::default());
        let keys = 32u64;
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let c = c.clone();
                s.spawn(move || {
                    for round in 0..2_000u64 {
                        let k = (round * 7 + t) % keys;
                        let g = epoch::pin();
                        if let Some(v) = c.get(&[k], round, &g) {
                            assert_eq!(**v, [k, k + 1, k + 2, k + 3]);
                        }
                        if round % 3 == t % 3 {
                            c.remove(&[k], &g);
                        } else {
                            let (v, _) =
                                c.insert(&[k], Box::new([k, k + 1, k + 2, k + 3]), round, &g);
                            assert_eq!(**v, [k, k + 1, k + 2, k + 3]);
                        }
                    }
                });
            }
        });
        // The count kept beside the map agrees with it after racing inserts and removals.
        assert!(c.len() <= keys as usize);
        assert_eq!(c.len(), c.map.len());
    }
}

//! Epoch-based reclamation with asymmetric fences: what keeps evicted code and cache
//! entries alive while a call may still use them, at a cost of a few plain instructions
//! per call.
//!
//! **The scheme.** Each thread has a record holding the global epoch it read when it
//! pinned, or 0 when it is not pinned. [`pin`] stores the epoch into the thread's record
//! (nested pins keep the outer one) and [`Guard`]'s drop stores 0. A writer unlinks an
//! object (no new reader can reach it), then [`defer`]s its destruction: the deferred
//! function is tagged with the epoch `e` it advances from. [`collect`] runs a deferred
//! function tagged `e` once no record holds an epoch `<= e`: a reader pinned at a later
//! epoch read it after the unlink, and an unpinned reader holds nothing.
//!
//! **Asymmetric fences.** The classic scheme (Fraser's epochs, as in `crossbeam-epoch`)
//! puts a full fence in every pin, so that the record's store is visible before the pinned
//! thread's first load of a shared pointer; on x86-64 that is a locked instruction of about
//! twenty cycles, most of the cost of a cache hit. Here a pin orders its store with a
//! compiler fence only, and the rare side, [`collect`], makes every running thread of the
//! process execute a full barrier before it reads the records (Linux's `membarrier`,
//! private expedited command, as in userspace RCU's `memb` flavour). After that barrier,
//! any reader whose load could still have seen the unlinked object has its record's store
//! visible; any reader whose load comes later sees the unlink. Where `membarrier` is not
//! available (another system, an old kernel, a sandbox that forbids it) pins use a full
//! fence instead, decided once per process before the first pin.
//!
//! **When garbage is freed.** Deferred functions wait in one global list. Once
//! [`COLLECT_AT`] more have gathered than the last collection left waiting, the thread
//! whose [`defer`] saw it collects when it next unpins (drops its outermost [`Guard`]), or
//! at once if it is not pinned. So a collection never runs under the locks a deferring
//! caller holds (a cache's eviction holds two), nor while the collector's own pin keeps
//! back what it just deferred; and a collection that frees little is not repeated at
//! every defer. (On a virtual machine a `membarrier` with another thread running took
//! 8-16 us; made under a program's eviction lock, it stalled every thread that missed.)
//! A collection also waits until [`MIN_INTERVAL`] has passed since the last one (the rule
//! service, evicting 40,000 versions a second on two threads, made a `membarrier` every
//! nine evictions, 6% of its samples): the barrier costs the same however much it frees,
//! so under heavy eviction a collection takes what a millisecond retired, and there is at
//! most one barrier a millisecond whatever the rate of evictions. [`HARD_LIMIT`] waiting
//! makes a thread collect at once, even pinned (one that stays pinned for long holds back
//! only what was deferred while it was pinned), and [`flush`] collects at once.
//!
//! **Which thread frees.** A function deferred with [`defer_to`] names a thread (its
//! [`Home`]: in practice, the one that allocated what it frees). When a collection finds it
//! ready and that thread alive and not the collector, it goes into that thread's mail,
//! which the thread runs when it next unpins (a load of a flag in its record, which it has
//! just written, per unpin). Mail still unread at the next collection (a thread that
//! stopped calling, or exited) is run by that collection, so it waits at most one
//! collection longer. The C library's allocator keeps an arena per thread, and a block
//! freed by another thread goes back under its arena's lock, which the owner takes for its
//! own allocations: with two threads evicting each other's versions, those frees were the
//! most contended locks of the rule service.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{
    compiler_fence, fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{const_mutex, Mutex};

/// The global epoch, advanced by every [`defer`]; it starts above 0, which marks an
/// unpinned record.
static EPOCH: AtomicU64 = AtomicU64::new(1);

/// How pins order their store: [`UNKNOWN`] until the first thread registers (and never
/// changes after).
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
/// `membarrier` is registered: pins use a compiler fence, collections the system barrier.
const ASYMMETRIC: u8 = 1;
/// No `membarrier`: pins and collections both use a full fence.
const FENCES: u8 = 2;

/// Every record ever made (records are never freed: a thread's record goes back to the
/// pool when the thread exits and serves the next thread, so there are as many as threads
/// ever pinned at once).
static REGISTRY: Mutex<Vec<&'static Record>> = const_mutex(Vec::new());

/// Deferred functions with the epoch each waits for and the thread that should run it.
static GARBAGE: Mutex<Vec<(u64, Option<Home>, Deferred)>> = const_mutex(Vec::new());

/// Collections (and flushes) made so far: each takes the next number, which dates the
/// mail it hands out (see [`Mail::since`]).
static COLLECTIONS: AtomicU64 = AtomicU64::new(0);

/// Number of entries in [`GARBAGE`] (read without its lock).
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// A collection is due once this many more functions wait than the last one left.
pub const COLLECT_AT: usize = 16;

/// A pinned thread collects at once when this many functions wait.
pub const HARD_LIMIT: usize = 1024;

/// The number of waiting functions at which a collection is due.
static DUE: AtomicUsize = AtomicUsize::new(COLLECT_AT);

/// A collection that is due waits until this long after the last one began (unless
/// [`HARD_LIMIT`] functions wait).
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// When the last collection began, in nanoseconds since [`clock`]'s origin.
static LAST: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds since the first call (a monotonic clock).
fn clock() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let ns = ORIGIN.get_or_init(Instant::now).elapsed().as_nanos();
    u64::try_from(ns).unwrap_or(u64::MAX)
}

type Deferred = Box<dyn FnOnce() + Send>;

/// A thread's pinned epoch, 0 when unpinned, alone on its cache line (written on every
/// pin by its thread, read only by collections).
#[repr(align(64))]
#[derive(Default)]
struct Record {
    pinned: AtomicU64,
    /// Whether a live thread owns the record.
    owned: AtomicBool,
    /// Whether `mail` holds functions (read by the owner at every unpin, set by
    /// collections).
    has_mail: AtomicBool,
    /// Ready functions a collection handed to the owner (see [`defer_to`]).
    mail: Mutex<Mail>,
}

/// Functions a collection found ready and handed to the thread that should run them.
#[derive(Default)]
struct Mail {
    items: Vec<Deferred>,
    /// The collection that posted the first of them: a later collection that finds them
    /// still there runs them itself, so a thread that stopped unpinning holds them only
    /// until then.
    since: u64,
}

/// A thread that should run a deferred function, if it is still alive when the function
/// is ready: see [`defer_to`].
#[derive(Clone, Copy)]
pub struct Home(&'static Record);

impl Home {
    fn is(self, r: Option<&'static Record>) -> bool {
        r.is_some_and(|r| std::ptr::eq(self.0, r))
    }
}

/// The calling thread, as the home of what it allocates.
pub fn home() -> Home {
    Home(RECORD.with(Cell::get).unwrap_or_else(register))
}

thread_local! {
    /// The calling thread's record: a constant-initialized thread-local without a
    /// destructor, so a pin reads it with one thread-pointer-relative load.
    static RECORD: Cell<Option<&'static Record>> = const { Cell::new(None) };
    /// Whether this thread owes a collection when it unpins.
    static OWED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is running the functions a collection freed (which may defer
    /// more: those wait for the next collection).
    static COLLECTING: Cell<bool> = const { Cell::new(false) };
    /// Gives the record back when the thread exits.
    static OWNER: Owner = const { Owner };
}

/// Gives the calling thread's record back to the pool on thread exit.
struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(r) = RECORD.with(|c| c.take()) {
            // No guard of this thread is alive: guards do not outlive the frames that made
            // them, and a thread-local destructor runs after every frame returned.
            r.owned.store(false, Ordering::Release);
        }
    }
}

/// The calling thread's record, taken from the pool (or made) on first use.
#[cold]
fn register() -> &'static Record {
    init_mode();
    let r = {
        let mut all = REGISTRY.lock();
        match all.iter().find(|r| {
            r.owned
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        }) {
            Some(r) => *r,
            None => {
                let r: &'static Record = Box::leak(Box::new(Record {
                    owned: AtomicBool::new(true),
                    ..Record::default()
                }));
                all.push(r);
                r
            }
        }
    };
    RECORD.with(|c| c.set(Some(r)));
    // Registers the destructor that gives the record back; during thread-local
    // destruction that is no longer possible, and the record stays owned (a pin made
    // by another thread-local's destructor, a rare leak of one cache line).
    let _ = OWNER.try_with(|_| ());
    r
}

/// Registers the process with `membarrier` once, or settles on fences. The runtime calls
/// this when it is made: registering costs a kernel-wide synchronization (5-7 ms here)
/// once the process has more than one thread, which a first pin would otherwise pay in
/// the middle of a call (the first promotion of a process).
pub fn init_mode() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mode = if membarrier::register() {
            ASYMMETRIC
        } else {
            FENCES
        };
        MODE.store(mode, Ordering::Release);
    });
}

/// A pinned epoch: while it lives, nothing unlinked after it was taken is freed. Not
/// `Send`: it is the calling thread's.
pub struct Guard {
    /// The record this guard pinned; `None` for a pin nested in another of the thread's.
    record: Option<&'static Record>,
    _not_send: PhantomData<*mut ()>,
}

/// Pins the calling thread's epoch.
#[inline]
pub fn pin() -> Guard {
    let r = RECORD.with(Cell::get).unwrap_or_else(register);
    // Only this thread writes its record: a nonzero value is an outer pin of its own.
    if r.pinned.load(Ordering::Relaxed) != 0 {
        return Guard {
            record: None,
            _not_send: PhantomData,
        };
    }
    // Acquire: a reader that sees an epoch advanced past an unlink sees the unlink.
    let e = EPOCH.load(Ordering::Acquire);
    r.pinned.store(e, Ordering::Relaxed);
    if MODE.load(Ordering::Relaxed) == ASYMMETRIC {
        // The store may still sit in this core's store buffer; a collection's
        // `membarrier` drains it before reading the records.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    Guard {
        record: Some(r),
        _not_send: PhantomData,
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        if let Some(r) = self.record {
            // Release: every access made while pinned happens before a collection that
            // reads 0 here.
            r.pinned.store(0, Ordering::Release);
            if r.has_mail.load(Ordering::Relaxed) {
                read_mail(r);
            }
            if OWED.with(Cell::get) {
                collect_owed();
            }
        }
    }
}

/// The collection a [`defer`] made while this thread was pinned asked for.
#[cold]
fn collect_owed() {
    OWED.with(|o| o.set(false));
    collect();
}

/// Runs the functions a collection handed to this thread.
#[cold]
fn read_mail(r: &'static Record) {
    r.has_mail.store(false, Ordering::Relaxed);
    let items = std::mem::take(&mut r.mail.lock().items);
    run(items);
}

/// Runs `f` once every thread that may have read what the caller just unlinked has
/// unpinned. The caller must have unlinked it already: this advances the epoch.
pub fn defer(f: impl FnOnce() + Send + 'static) {
    push(None, Box::new(f));
}

/// [`defer`], with `f` run by the thread `home` if that thread is still alive when `f`
/// is ready (when it next unpins, or by the next collection if it has not by then): for
/// what frees memory `home` allocated (see the module documentation).
pub fn defer_to(home: Home, f: impl FnOnce() + Send + 'static) {
    push(Some(home), Box::new(f));
}

fn push(home: Option<Home>, f: Deferred) {
    let e = EPOCH.fetch_add(1, Ordering::SeqCst);
    let n = {
        let mut g = GARBAGE.lock();
        g.push((e, home, f));
        g.len()
    };
    PENDING.store(n, Ordering::Relaxed);
    if n < DUE.load(Ordering::Relaxed) || COLLECTING.with(Cell::get) {
        return;
    }
    let recent = clock().saturating_sub(LAST.load(Ordering::Relaxed));
    if n < HARD_LIMIT && recent < MIN_INTERVAL.as_nanos() as u64 {
        return;
    }
    let pinned = RECORD
        .with(Cell::get)
        .is_some_and(|r| r.pinned.load(Ordering::Relaxed) != 0);
    if pinned && n < HARD_LIMIT {
        OWED.with(|o| o.set(true));
    } else {
        collect();
    }
}

/// Number of deferred functions still waiting.
fn pending() -> usize {
    PENDING.load(Ordering::Relaxed)
}

/// Runs the deferred functions no pinned thread can still need, if any wait.
pub fn collect() {
    // Take the candidates first: a function deferred after the records are read may
    // belong to an epoch a thread pinned after that read.
    let mut candidates = {
        let mut g = GARBAGE.lock();
        PENDING.store(0, Ordering::Relaxed);
        std::mem::take(&mut *g)
    };
    // Mail a thread has not read since an earlier collection (it stopped unpinning, or
    // exited) is run here.
    let number = COLLECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut ready = sweep(number, false);
    if candidates.is_empty() {
        run(ready);
        return;
    }
    LAST.store(clock(), Ordering::Relaxed);
    let oldest = if barrier() {
        REGISTRY
            .lock()
            .iter()
            .map(|r| r.pinned.load(Ordering::Acquire))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX)
    } else {
        0
    };
    let me = RECORD.with(Cell::get);
    let mut mail: Vec<(Home, Deferred)> = Vec::new();
    candidates.retain_mut(|(e, home, f)| {
        if *e >= oldest {
            return true;
        }
        let f = std::mem::replace(f, Box::new(|| {}));
        match *home {
            Some(h) if !h.is(me) && h.0.owned.load(Ordering::Relaxed) => mail.push((h, f)),
            _ => ready.push(f),
        }
        false
    });
    post(mail, number);
    // The next collection is due once as many more wait again. (What waits goes back
    // in the buffer taken, with the room it grew to: the list would otherwise grow from
    // nothing again after every collection.)
    let left = {
        let mut g = GARBAGE.lock();
        candidates.append(&mut g);
        std::mem::swap(&mut *g, &mut candidates);
        PENDING.store(g.len(), Ordering::Relaxed);
        g.len()
    };
    DUE.store(left + COLLECT_AT, Ordering::Relaxed);
    run(ready);
}

/// Takes the functions waiting in threads' mail since before collection `number` or for
/// threads that exited (`all`: all of them).
fn sweep(number: u64, all: bool) -> Vec<Deferred> {
    let mut ready = Vec::new();
    for r in REGISTRY.lock().iter() {
        if r.has_mail.load(Ordering::Relaxed) {
            let mut m = r.mail.lock();
            if all || m.since < number || !r.owned.load(Ordering::Relaxed) {
                r.has_mail.store(false, Ordering::Relaxed);
                ready.append(&mut m.items);
            }
        }
    }
    ready
}

/// Hands each function to its home thread's mail.
fn post(mut mail: Vec<(Home, Deferred)>, number: u64) {
    // (Few threads: one pass per home thread, taking its lock once.)
    while let Some(&(h, _)) = mail.last() {
        let mut m = h.0.mail.lock();
        if m.items.is_empty() {
            m.since = number;
        }
        let mut i = 0;
        while i < mail.len() {
            if std::ptr::eq(mail[i].0 .0, h.0) {
                m.items.push(mail.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        h.0.has_mail.store(true, Ordering::Release);
    }
}

/// Runs ready functions, marking the thread as collecting meanwhile (what they defer
/// waits for the next collection).
fn run(ready: Vec<Deferred>) {
    // (Restored however the functions end.)
    struct Collecting(bool);
    impl Drop for Collecting {
        fn drop(&mut self) {
            COLLECTING.with(|c| c.set(self.0));
        }
    }
    let _outer = Collecting(COLLECTING.with(|c| c.replace(true)));
    for f in ready {
        f();
    }
}

/// Collects until nothing waits that can run now (deferred functions may defer more).
pub fn flush() {
    for _ in 0..4 {
        let before = pending();
        collect();
        // (What the collection handed to other threads runs here.)
        let number = COLLECTIONS.fetch_add(1, Ordering::Relaxed) + 1;
        run(sweep(number, true));
        if pending() == 0 || pending() >= before {
            break;
        }
    }
}

/// Makes every thread's earlier stores visible to the caller's later loads; false if the
/// system refused the barrier (then nothing may be freed).
fn barrier() -> bool {
    init_mode();
    if MODE.load(Ordering::Acquire) == ASYMMETRIC {
        // Pins rely on this barrier; the kernel refuses it only to an unregistered process.
        return membarrier::run();
    }
    fence(Ordering::SeqCst);
    true
}

#[cfg(target_os = "linux")]
mod membarrier {
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> bool {
        // SAFETY: `membarrier(cmd, flags = 0)` takes no pointers; it either performs the
        // barrier or registration and returns 0, or returns -1 with errno set.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) == 0 }
    }

    /// Registers the process for private expedited barriers.
    pub fn register() -> bool {
        call(CMD_REGISTER_PRIVATE_EXPEDITED)
    }

    /// A full memory barrier on every running thread of the process.
    pub fn run() -> bool {
        call(CMD_PRIVATE_EXPEDITED)
    }
}

#[cfg(not(target_os = "linux"))]
mod membarrier {
    pub fn register() -> bool {
        false
    }
    pub fn run() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_deferred_function_waits_for_the_threads_pinned_before_it() {
        let done = Arc::new(AtomicBool::new(false));
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let _g = pin();
            pinned_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        pinned_rx.recv().unwrap();
        let d = done.clone();
        defer(move || d.store(true, Ordering::SeqCst));
        for _ in 0..3 {
            collect();
        }
        assert!(!done.load(Ordering::SeqCst), "freed under a pinned reader");
        // A pin made after the defer does not hold it back.
        let later = pin();
        release_tx.send(()).unwrap();
        reader.join().unwrap();
        // Other tests pin and defer meanwhile: collect until it has run.
        for _ in 0..100_000 {
            if done.load(Ordering::SeqCst) {
                break;
            }
            flush();
            std::thread::yield_now();
        }
        assert!(done.load(Ordering::SeqCst), "the reader unpinned");
        drop(later);
    }

    /// The calling thread's pinned epoch (0: unpinned).
    fn pinned() -> u64 {
        RECORD
            .with(Cell::get)
            .map_or(0, |r| r.pinned.load(Ordering::Relaxed))
    }

    /// What a pinned thread defers waits under its pins (its own pin holds it back); once
    /// its outermost guard goes, no collection is owed any more and everything runs.
    #[test]
    fn a_pinned_thread_collects_when_it_unpins() {
        let ran = Arc::new(AtomicUsize::new(0));
        let n = 4 * COLLECT_AT;
        let outer = pin();
        let inner = pin();
        for _ in 0..n {
            let r = ran.clone();
            defer(move || {
                r.fetch_add(1, Ordering::SeqCst);
            });
        }
        assert_eq!(ran.load(Ordering::SeqCst), 0, "ran under the deferring pin");
        drop(inner);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "ran under the outer pin");
        drop(outer);
        assert!(!OWED.with(Cell::get), "the owed collection was made");
        // Other tests pin meanwhile and may hold some back: collect until all have run.
        for _ in 0..100_000 {
            if ran.load(Ordering::SeqCst) == n {
                break;
            }
            flush();
            std::thread::yield_now();
        }
        assert_eq!(ran.load(Ordering::SeqCst), n);
    }

    #[test]
    fn nested_pins_keep_the_outer_epoch_and_unpin_once() {
        let outer = pin();
        let e = pinned();
        assert_ne!(e, 0);
        defer(|| {});
        let inner = pin();
        assert_eq!(pinned(), e);
        drop(inner);
        assert_eq!(pinned(), e);
        drop(outer);
        assert_eq!(pinned(), 0);
    }

    #[test]
    fn readers_racing_with_reclamation_never_see_a_retired_object() {
        // Objects are slots of `alive`; the shared index names the current one. A writer
        // publishes a new object, then defers retiring the old one; a pinned reader that
        // read an index must find its object alive for as long as it stays pinned.
        const N: usize = 4096;
        let alive: Arc<Vec<AtomicBool>> =
            Arc::new((0..N).map(|_| AtomicBool::new(false)).collect());
        let current = Arc::new(AtomicUsize::new(0));
        alive[0].store(true, Ordering::SeqCst);
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (alive, current, stop) = (alive.clone(), current.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let _g = pin();
                        let i = current.load(Ordering::Acquire);
                        for _ in 0..4 {
                            assert!(
                                alive[i].load(Ordering::Acquire),
                                "object {i} retired under a reader"
                            );
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for round in 1..50_000usize {
            let new = round % N;
            // Reuse a slot only once its retirement has run.
            while alive[new].load(Ordering::Acquire) {
                flush();
                std::thread::yield_now();
            }
            alive[new].store(true, Ordering::Release);
            let old = current.swap(new, Ordering::AcqRel);
            let a = alive.clone();
            defer(move || a[old].store(false, Ordering::Release));
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
        assert!(alive[current.load(Ordering::SeqCst)].load(Ordering::SeqCst));
    }
}

//! The stitch tier's code heap: space for units, carved out of larger mappings and reused,
//! so that installing a unit costs no system call (or one protection change where the
//! memory cannot be mapped twice) instead of a mapping, a page fault, a protection change
//! and, later, an unmapping.
//!
//! **No page is ever writable and executable through the same address.** Two kinds of
//! chunk keep this:
//! - **Dual** (Linux on x86-64, the default): the chunk is a memory file mapped twice,
//!   read+execute where code runs and read+write where the heap writes it. The writable
//!   view's address never leaves this module. [`Extent::write_and_seal`] copies a unit
//!   through it and needs no system call; freed space is free at once. Nothing flips, so
//!   units are packed: space is handed out in [`LINE`]-byte lines, and a page holds
//!   several small units (a whole 4 KiB page for a unit of a few hundred bytes would be
//!   four times or more the memory its code needs). (A protection
//!   change costs more than 2 us on the virtual machine we measured, with its TLB
//!   shootdown: as much as stitching a few byte-codes, and the largest fixed cost of a
//!   short specialization.)
//! - **Flip** (other systems, a kernel that refuses executable memory files, a process
//!   under valgrind unless `DYC_CODE_HEAP=dual`, or `DYC_CODE_HEAP=flip` in the
//!   environment): one anonymous mapping whose pages flip.
//!   [`alloc`] takes whole free pages that are read+write, the caller writes the unit into
//!   them, and [`Extent::write_and_seal`] makes them read+execute. When the owner drops the
//!   [`Extent`] (once no thread can still run the code: see the reclamation rules of
//!   [`super::memory`]), they are free but still read+execute ("dirty"): no protection
//!   change is made then. When no clean run of free pages fits an allocation, each chunk's
//!   dirty pages are made read+write again, a run of adjacent pages at a time (units freed
//!   in the order they were made lie side by side), before a new chunk is mapped. So
//!   freeing costs no system call, and one change, with the shootdown of every other
//!   thread's TLB that it causes, serves many units.
//!
//! **Fork.** A dual chunk's memory is shared with a child made by `fork`, where private
//! memory would be copied. So that neither process writes code the other may run, a
//! `fork` retires every dual chunk in both: none of its space is handed out again, and it is
//! unmapped (in each process on its own) once its last unit goes. Handlers registered
//! with `pthread_atfork` count forks, and hold allocation back from just before a fork to
//! just after it, so that no chunk is mapped, and no space reused, in between. (As with any
//! lock, the child of a process with other threads may find the heap's lock held by a
//! thread it does not have: such a child should only `exec`, as POSIX asks. The child of
//! a single-threaded process uses the heap freely.) (`posix_spawn`, which `std::process::Command`
//! uses where it can, runs no such handler and needs none: its child runs another program
//! before it could touch the heap.)
//!
//! **Chunks.** Space comes from chunks of [`CHUNK_PAGES`] pages mapped on demand; a unit
//! larger than a chunk gets a chunk of its own. Each chunk has a bitmap of its grains
//! (lines in a dual chunk, pages in a flip chunk): allocation is next fit over the
//! bitmaps (from where the last allocation ended, round the chunks and back), a word of
//! 64 grains at a time, under one lock; writing and sealing a unit happens outside it,
//! the batched return of dirty pages under it. A chunk with nothing in use is unmapped,
//! unless it is the only such chunk left (kept for the next units).
//!
//! Only x86-64 runs stitch-tier code, and its instruction cache is coherent with stores
//! (through any mapping of the memory), so reusing space needs no cache flush. A unit
//! starts on a line boundary, so any alignment its code assumes up to 64 bytes holds, as
//! at a page boundary.

use std::sync::Arc;

use parking_lot::{const_mutex, Mutex};

use super::memory::Counter;

/// Pages per chunk (1 MiB of 4 KiB pages).
pub const CHUNK_PAGES: usize = 256;

/// The grain of a dual chunk: bytes per bit of its bitmap (a cache line).
pub const LINE: usize = 64;

/// One mapping and which of its grains are in use.
struct Chunk {
    map: Arc<Mapping>,
    /// A bit per grain, set while the grain is free but still read+execute (flip chunks).
    dirty: Vec<u64>,
    /// A bit per grain, set while the grain belongs to an [`Extent`].
    used: Vec<u64>,
    /// Grains in use.
    in_use: usize,
    /// The count of forks when the chunk was mapped: a dual chunk mapped before the last
    /// fork is retired.
    forks: usize,
}

impl Chunk {
    fn new(map: Mapping) -> Chunk {
        let words = map.grains().div_ceil(64);
        Chunk {
            map: Arc::new(map),
            dirty: vec![0; words],
            used: vec![0; words],
            in_use: 0,
            forks: dual::forks(),
        }
    }

    /// Whether space in the chunk may be handed out: not a dual chunk shared with a
    /// process forked since it was mapped.
    fn open(&self) -> bool {
        !matches!(*self.map, Mapping::Dual(_)) || self.forks == dual::forks()
    }
}

/// A mapping, unmapped when the last [`Extent`] in it and the heap let go of it.
enum Mapping {
    /// Anonymous memory whose pages flip between read+write and read+execute.
    Flip(region::Allocation),
    /// A memory file mapped read+execute and read+write.
    Dual(dual::Views),
}

impl Mapping {
    /// A new mapping of `pages` pages, all free: dual if the system allows it and
    /// `DYC_CODE_HEAP` is `dual`, or is unset and the process does not run under valgrind
    /// (read once per process); else flip.
    fn new(pages: usize) -> Result<Mapping, String> {
        static DUAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let bytes = pages * page();
        let wanted = *DUAL.get_or_init(|| match std::env::var_os("DYC_CODE_HEAP") {
            Some(v) => v == "dual",
            None => !under_valgrind(),
        });
        if wanted {
            if let Some(views) = dual::Views::map(bytes) {
                return Ok(Mapping::Dual(views));
            }
        }
        Mapping::flip(bytes)
    }

    fn flip(bytes: usize) -> Result<Mapping, String> {
        region::alloc(bytes, region::Protection::READ_WRITE)
            .map(Mapping::Flip)
            .map_err(|e| format!("mapping code pages: {e}"))
    }

    /// Where the code runs.
    fn base(&self) -> *mut u8 {
        match self {
            Mapping::Flip(a) => a.as_ptr::<u8>() as *mut u8,
            Mapping::Dual(v) => v.exec,
        }
    }

    /// Where the code is written.
    fn write_base(&self) -> *mut u8 {
        match self {
            Mapping::Flip(a) => a.as_ptr::<u8>() as *mut u8,
            Mapping::Dual(v) => v.write,
        }
    }

    /// Bytes per bit of the chunk's bitmaps: a page where pages flip, else a line.
    fn grain(&self) -> usize {
        match self {
            Mapping::Flip(_) => page(),
            Mapping::Dual(_) => LINE,
        }
    }

    fn grains(&self) -> usize {
        match self {
            Mapping::Flip(a) => a.len() / page(),
            Mapping::Dual(v) => v.len / LINE,
        }
    }
}

// SAFETY: the mapping is only written through `Extent`s that own disjoint ranges of it
// (the heap's bitmap hands each grain to one `Extent` at a time), and is unmapped only when
// the last reference goes, from whichever thread drops it.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared references only read the base addresses and length.
unsafe impl Sync for Mapping {}

/// Bytes of the heap that units hold (their grains: lines, or pages where pages flip).
static IN_USE: Counter = Counter::new();

/// Bytes of the code heap that units hold now: the memory their code takes (each unit's
/// code rounded up to its grains), not counting free space in the chunks.
pub fn in_use_bytes() -> usize {
    IN_USE.get()
}

/// The chunks, and where the last allocation ended: the next search starts there.
struct Heap {
    chunks: Vec<Chunk>,
    /// A chunk's index and a word of its bitmaps (a hint: chunks come and go).
    rover: (usize, usize),
}

static HEAP: Mutex<Heap> = const_mutex(Heap {
    chunks: Vec::new(),
    rover: (0, 0),
});

fn page() -> usize {
    region::page::size()
}

/// Whether the process runs under valgrind (its core is preloaded into every process it
/// runs). Valgrind translates the code it runs and, by default, looks for code changed
/// under its translations only in memory no file backs: a dual chunk is a memory file,
/// so reused space would run a stale translation of the unit freed there (seen as wrong
/// results of the rule service under callgrind once evictions begin). Flip chunks are
/// anonymous memory, which it does check. (`DYC_CODE_HEAP=dual` keeps dual chunks, for
/// counting instructions of the dual heap's code; code then runs correctly only with
/// valgrind's `--smc-check=all`.)
fn under_valgrind() -> bool {
    std::env::var_os("LD_PRELOAD").is_some_and(|v| v.to_string_lossy().contains("vgpreload"))
}

/// The space of one unit of machine code (grains of one chunk: lines, or pages where
/// pages flip); given back to the heap when dropped.
pub struct Extent {
    map: Arc<Mapping>,
    first: usize,
    count: usize,
    sealed: bool,
}

impl Extent {
    /// The address of the first byte.
    pub fn base(&self) -> *mut u8 {
        // `first` is a grain index within the mapping.
        self.map.base().wrapping_add(self.first * self.map.grain())
    }

    /// Bytes the extent spans.
    fn len(&self) -> usize {
        self.count * self.map.grain()
    }

    /// Copies `code` to the start of the extent (which must be free) and makes it
    /// executable at [`Extent::base`]: through a dual chunk's writable view, or by making
    /// a flip chunk's pages read+execute.
    pub fn write_and_seal(&mut self, code: &[u8]) -> Result<(), String> {
        if self.sealed || code.len() > self.len() {
            return Err("code space already sealed, or too small".into());
        }
        let at = self
            .map
            .write_base()
            .wrapping_add(self.first * self.map.grain());
        // SAFETY: the extent is writable at `at` (a dual chunk's writable view, or free
        // pages of a flip chunk, which are read+write: these were just taken from the free
        // list), at least `code.len()` bytes long, owned by `self` alone, and does not
        // overlap `code`. Nothing runs it yet: its address is published only once this
        // returns.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), at, code.len()) };
        if let Mapping::Flip(_) = *self.map {
            // SAFETY: the range is exactly this extent's pages (a flip chunk's grain is a
            // page), inside a live mapping.
            unsafe { region::protect(self.base(), self.len(), region::Protection::READ_EXECUTE) }
                .map_err(|e| format!("protecting code pages: {e}"))?;
        }
        self.sealed = true;
        Ok(())
    }
}

impl Drop for Extent {
    fn drop(&mut self) {
        IN_USE.sub(self.len());
        let heap = &mut HEAP.lock().chunks;
        if let Some(i) = heap.iter().position(|c| Arc::ptr_eq(&c.map, &self.map)) {
            let c = &mut heap[i];
            // (Dual space is free as soon as it is given back.)
            let dirty = self.sealed && matches!(*c.map, Mapping::Flip(_));
            for_words(self.first, self.count, |w, bits| {
                c.used[w] &= !bits;
                if dirty {
                    c.dirty[w] |= bits;
                }
            });
            c.in_use -= self.count;
            // A retired chunk goes when its last unit does; an idle one when another is.
            let idle = heap.iter().filter(|c| c.in_use == 0 && c.open()).count();
            if heap[i].in_use == 0 && (!heap[i].open() || idle > 1) {
                heap.swap_remove(i);
            }
        }
    }
}

/// Maps a chunk ahead when the heap has no open one, so that a process's first unit does
/// not wait for the mappings (a runtime whose first tier is the stitch tier calls this when
/// it is made; the chunk stays while it is the only idle one). A failure is met again,
/// and reported, by the first allocation.
pub fn reserve() {
    let mut heap = HEAP.lock();
    if dual::forking() || heap.chunks.iter().any(Chunk::open) {
        return;
    }
    if let Ok(map) = Mapping::new(CHUNK_PAGES) {
        heap.chunks.push(Chunk::new(map));
    }
}

/// Free space for `bytes` of code (at least one grain).
pub fn alloc(bytes: usize) -> Result<Extent, String> {
    let bytes = bytes.max(1);
    let mut heap = loop {
        let heap = HEAP.lock();
        if !dual::forking() {
            break heap;
        }
        drop(heap);
        std::thread::yield_now();
    };
    for pass in 0..2 {
        if let Some((i, first, count)) = next_fit(&heap, bytes) {
            return Ok(heap.take(i, first, count));
        }
        if pass == 0 {
            heap.chunks.iter_mut().for_each(clean);
        }
    }
    // Retired chunks nothing uses any more go (a fork since their last unit went).
    heap.chunks.retain(|c| c.open() || c.in_use > 0);
    heap.chunks.push(Chunk::new(Mapping::new(
        bytes.div_ceil(page()).max(CHUNK_PAGES),
    )?));
    let i = heap.chunks.len() - 1;
    let count = bytes.div_ceil(heap.chunks[i].map.grain());
    Ok(heap.take(i, 0, count))
}

impl Heap {
    /// Takes grains `first..first + count` of chunk `i`; the next search starts after them.
    fn take(&mut self, i: usize, first: usize, count: usize) -> Extent {
        self.rover = (i, (first + count) / 64);
        take(&mut self.chunks[i], first, count)
    }
}

/// Where `bytes` of code fit (chunk, first grain, grains), by next fit: from the rover
/// on, through the chunks after it, and round to the rover's chunk again, whole. Units
/// mostly go in the order they came (a cache evicts its least recently used first), so
/// the space freed lies ahead of the rover, which then finds it in a step or two, where
/// a search from the heap's start would pass over every word of the live units before
/// it each time (a quarter of the rule service's throughput with 16 MiB of code in lines).
fn next_fit(heap: &Heap, bytes: usize) -> Option<(usize, usize, usize)> {
    let n = heap.chunks.len();
    let (start, word) = match heap.rover {
        (i, w) if i < n => (i, w),
        _ => (0, 0),
    };
    for k in 0..=n {
        let i = (start + k) % n.max(1);
        let Some(c) = heap.chunks.get(i).filter(|c| c.open()) else {
            continue;
        };
        let count = bytes.div_ceil(c.map.grain());
        if c.map.grains() - c.in_use < count {
            continue;
        }
        let from = if k == 0 { word } else { 0 };
        if let Some(first) = first_fit(&c.used, &c.dirty, c.map.grains(), count, from) {
            return Some((i, first, count));
        }
    }
    None
}

/// Calls `f` with each word of a bitmap that grains `first..first + count` touch, and
/// the mask of those grains in it.
fn for_words(first: usize, count: usize, mut f: impl FnMut(usize, u64)) {
    let (mut g, end) = (first, first + count);
    while g < end {
        let n = (64 - g % 64).min(end - g);
        let bits = if n == 64 {
            u64::MAX
        } else {
            ((1 << n) - 1) << (g % 64)
        };
        f(g / 64, bits);
        g += n;
    }
}

fn take(c: &mut Chunk, first: usize, count: usize) -> Extent {
    for_words(first, count, |w, bits| c.used[w] |= bits);
    c.in_use += count;
    IN_USE.add(count * c.map.grain());
    Extent {
        map: c.map.clone(),
        first,
        count,
        sealed: false,
    }
}

/// Makes the dirty pages of chunk `c` read+write again, one protection change per run of
/// adjacent dirty pages. A run that cannot be made writable stays out of the free list
/// (counted in use until the chunk goes) rather than be handed out unwritable.
fn clean(c: &mut Chunk) {
    if !matches!(*c.map, Mapping::Flip(_)) {
        return;
    }
    // (A flip chunk's grain is a page.)
    let pages = c.map.grains();
    let mut p = 0;
    while p < pages {
        let dirty = |c: &Chunk, p: usize| c.dirty[p / 64] & (1 << (p % 64)) != 0;
        if !dirty(c, p) {
            p += 1;
            continue;
        }
        let start = p;
        while p < pages && dirty(c, p) {
            c.dirty[p / 64] &= !(1 << (p % 64));
            p += 1;
        }
        let base = c.map.base().wrapping_add(start * page());
        // SAFETY: pages `start..p` lie inside the chunk's live mapping and are free: no
        // `Extent` owns them, and their code was given back only once no thread could run
        // it, so nothing reads, writes or executes them while their protection changes.
        let back =
            unsafe { region::protect(base, (p - start) * page(), region::Protection::READ_WRITE) };
        if back.is_err() {
            for_words(start, p - start, |w, bits| c.used[w] |= bits);
            c.in_use += p - start;
        }
    }
}

/// The first run of `count` grains free and clean (not `dirty`) among the first `grains`
/// of the bitmaps that starts at word `from` or later, a word of 64 grains at a time: a
/// run that starts in earlier words and goes on into this one (the free grains at the top
/// of the words before, and at the bottom of this one), else, for `count` up to 64, the
/// lowest run within the word (the free bits ANDed with themselves shifted, doubling the
/// length checked each time).
fn first_fit(
    used: &[u64],
    dirty: &[u64],
    grains: usize,
    count: usize,
    from: usize,
) -> Option<usize> {
    let mut run = 0;
    for w in from..grains.div_ceil(64) {
        let mut free = !(used[w] | dirty[w]);
        if (w + 1) * 64 > grains {
            free &= (1u64 << (grains % 64)) - 1;
        }
        let low = free.trailing_ones() as usize;
        if run + low >= count {
            return Some(w * 64 - run);
        }
        if low == 64 {
            run += 64;
            continue;
        }
        if count <= 64 {
            let (mut starts, mut have) = (free, 1);
            while have < count {
                let s = have.min(count - have);
                starts &= starts >> s;
                have += s;
            }
            if starts != 0 {
                return Some(w * 64 + starts.trailing_zeros() as usize);
            }
        }
        run = free.leading_ones() as usize;
    }
    None
}

/// Memory files mapped twice, and the count of forks.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod dual {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::OnceLock;

    /// The two views of one memory file.
    pub(super) struct Views {
        pub(super) exec: *mut u8,
        pub(super) write: *mut u8,
        pub(super) len: usize,
    }

    static FORKS: AtomicUsize = AtomicUsize::new(0);
    /// Whether forks are counted (the handler is registered).
    static WATCHED: OnceLock<bool> = OnceLock::new();

    /// Forks since the process started (as far as the heap knows: counted from the first
    /// dual chunk on).
    pub(super) fn forks() -> usize {
        FORKS.load(Ordering::Acquire)
    }

    /// Set from just before a fork until just after it, in both processes: no space is
    /// handed out meanwhile, so no chunk is mapped (or space reused) between the count and
    /// the fork.
    static FORKING: AtomicBool = AtomicBool::new(false);

    extern "C" fn before_fork() {
        // Under the heap's lock: an allocation under way finishes first.
        let _heap = super::HEAP.lock();
        FORKING.store(true, Ordering::Release);
        FORKS.fetch_add(1, Ordering::AcqRel);
    }

    extern "C" fn after_fork() {
        FORKING.store(false, Ordering::Release);
    }

    /// Whether a fork is under way (allocation waits).
    pub(super) fn forking() -> bool {
        FORKING.load(Ordering::Acquire)
    }

    /// Counts a fork as if one had happened (for tests).
    #[cfg(test)]
    pub(super) fn count_fork() {
        before_fork();
        after_fork();
    }

    impl Views {
        /// `len` bytes (whole pages) of a new memory file, mapped read+execute and
        /// read+write; `None` if the system refuses any step (the caller flips instead).
        pub(super) fn map(len: usize) -> Option<Views> {
            // Counting starts before the first dual chunk exists, so no fork is missed;
            // without it, no chunk may be shared with a child.
            // SAFETY: the handlers only take the heap's lock (in the parent, before the
            // fork, as any thread may) and store atomics.
            let watched = *WATCHED.get_or_init(|| unsafe {
                libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) == 0
            });
            if !watched {
                return None;
            }
            // (Kernels since 6.3 may require asking for an executable file; older ones
            // refuse the flag.)
            const MFD_EXEC: libc::c_uint = 0x10;
            let name = c"dyc-code";
            // SAFETY: `name` is a valid C string; the flags are defined by the kernel.
            let mut fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | MFD_EXEC) };
            if fd < 0 {
                // SAFETY: as above.
                fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
            }
            if fd < 0 {
                return None;
            }
            let map = |prot| {
                // SAFETY: a new shared mapping of the file `fd`, `len` bytes long, at an
                // address the kernel chooses: it aliases nothing Rust knows of.
                let at =
                    unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
                (at != libc::MAP_FAILED).then_some(at as *mut u8)
            };
            // SAFETY: `fd` is the file just made, which nothing else uses.
            let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
            let exec = sized
                .then(|| map(libc::PROT_READ | libc::PROT_EXEC))
                .flatten();
            let write = exec.and_then(|_| map(libc::PROT_READ | libc::PROT_WRITE));
            // SAFETY: the mappings keep the file alive; the descriptor is not needed.
            unsafe { libc::close(fd) };
            match (exec, write) {
                (Some(exec), Some(write)) => Some(Views { exec, write, len }),
                (Some(exec), None) => {
                    // SAFETY: the mapping just made, which nothing uses.
                    unsafe { libc::munmap(exec.cast(), len) };
                    None
                }
                _ => None,
            }
        }
    }

    impl Drop for Views {
        fn drop(&mut self) {
            // SAFETY: the two mappings `map` made; the last owner of the chunk drops them,
            // once no unit in it can run (the reclamation rules of `super::super::memory`).
            unsafe {
                libc::munmap(self.exec.cast(), self.len);
                libc::munmap(self.write.cast(), self.len);
            }
        }
    }
}

/// Elsewhere, every chunk flips.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod dual {
    /// (Never made.)
    #[allow(dead_code)]
    pub(super) struct Views {
        pub(super) exec: *mut u8,
        pub(super) write: *mut u8,
        pub(super) len: usize,
    }

    impl Views {
        pub(super) fn map(_: usize) -> Option<Views> {
            None
        }
    }

    pub(super) fn forks() -> usize {
        0
    }

    pub(super) fn forking() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_runs_across_words() {
        let mut used = vec![u64::MAX, 0b0111];
        let clean = [0u64; 2];
        assert_eq!(first_fit(&used, &clean, 128, 1, 0), Some(67));
        assert_eq!(first_fit(&used, &clean, 68, 2, 0), None);
        used[0] = !(0b11 << 62);
        assert_eq!(first_fit(&used, &clean, 128, 2, 0), Some(62));
        assert_eq!(first_fit(&used, &clean, 128, 3, 0), Some(67));
        // Dirty pages (free, not yet writable) are not handed out.
        assert_eq!(first_fit(&used, &[0b11 << 62, 0b1000], 128, 1, 0), Some(68));
    }

    /// The masks of a run of grains, word by word, are its grains.
    #[test]
    fn for_words_covers_exactly_the_run() {
        for first in [0, 1, 5, 63, 64, 100] {
            for count in [1, 2, 63, 64, 65, 130, 200] {
                let mut bits = [0u64; 6];
                for_words(first, count, |w, m| {
                    assert_eq!(bits[w] & m, 0, "each grain once");
                    bits[w] |= m;
                });
                for g in 0..6 * 64 {
                    let set = bits[g / 64] & (1 << (g % 64)) != 0;
                    assert_eq!(
                        set,
                        (first..first + count).contains(&g),
                        "{first} {count} {g}"
                    );
                }
            }
        }
    }

    /// The search by words finds what a search grain by grain finds, on bitmaps of whole
    /// words taken or free and of mixed ones, for any size and bound.
    #[test]
    fn first_fit_by_words_agrees_with_grain_by_grain() {
        let slow = |used: &[u64], dirty: &[u64], grains: usize, count: usize, from: usize| {
            let mut run = 0;
            for p in from * 64..grains {
                if (used[p / 64] | dirty[p / 64]) & (1 << (p % 64)) != 0 {
                    run = 0;
                    continue;
                }
                run += 1;
                if run == count {
                    return Some(p + 1 - count);
                }
            }
            None
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut word = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 5 {
                0 => 0,
                1 => u64::MAX,
                // Sparse: runs of free bits of a few dozen within a word.
                2 => x & (x >> 3) & (x >> 11) & (x >> 29),
                _ => x & (x >> 3),
            }
        };
        for _ in 0..2000 {
            let used: Vec<u64> = (0..4).map(|_| word()).collect();
            let dirty: Vec<u64> = (0..4).map(|_| word() & word()).collect();
            for grains in [1, 63, 64, 65, 128, 200, 256] {
                for count in [1, 2, 3, 5, 17, 33, 63, 64, 65, 130] {
                    for from in [0, 1, 3] {
                        assert_eq!(
                            first_fit(&used, &dirty, grains, count, from),
                            slow(&used, &dirty, grains, count, from),
                            "{used:x?} {dirty:x?} {grains} {count} {from}"
                        );
                    }
                }
            }
        }
    }

    /// Next fit: the search starts where the last allocation ended, so space freed
    /// behind the rover waits until the rover comes round to it, past the last chunk.
    #[test]
    fn next_fit_goes_on_from_the_last_allocation_and_wraps_round() {
        let grains = |c: &Chunk| c.map.grains();
        let chunk = || Chunk::new(Mapping::flip(2 * 64 * page()).expect("mapped"));
        let mut heap = Heap {
            chunks: vec![chunk(), chunk()],
            rover: (0, 0),
        };
        let g = heap.chunks[0].map.grain();
        let fit = |heap: &mut Heap, n: usize| {
            let (i, first, count) = next_fit(heap, n * g).expect("space");
            heap.take(i, first, count);
            (i, first)
        };
        // Word 0 of chunk 0 taken; grains 0-9 given back (by hand: these chunks are the
        // test's); the next unit goes on from word 1, not into them.
        assert_eq!(fit(&mut heap, 64), (0, 0));
        heap.chunks[0].used[0] &= !((1 << 10) - 1);
        heap.chunks[0].in_use -= 10;
        assert_eq!(fit(&mut heap, 4), (0, 64));
        // The rest of chunk 0 taken: chunk 1, then round to the freed grains of chunk 0.
        let rest = grains(&heap.chunks[0]) - 68;
        assert_eq!(fit(&mut heap, rest), (0, 68));
        assert_eq!(fit(&mut heap, 128), (1, 0));
        assert_eq!(fit(&mut heap, 3), (0, 0));
        // No run of 11 anywhere: none found.
        assert!(next_fit(&heap, 11 * g).is_none());
        // A stale rover (a chunk gone) starts at the first chunk.
        heap.chunks.truncate(1);
        heap.rover = (5, 3);
        assert_eq!(next_fit(&heap, 7 * g), Some((0, 3, 7)));
    }

    /// Freed code pages stay read+execute until a clean makes each run of them writable
    /// again, after which they are handed out (and written) like any free page.
    #[test]
    fn dirty_pages_are_made_writable_in_runs() {
        let pages = 8;
        let mut c = Chunk {
            dirty: vec![0b0110_1100],
            used: vec![0b0000_0001],
            in_use: 1,
            ..Chunk::new(Mapping::flip(pages * page()).expect("mapped"))
        };
        // Pages 2-3 and 5-6 held sealed code, now freed.
        for (first, n) in [(2, 2), (5, 2)] {
            let base = c.map.base().wrapping_add(first * page());
            // SAFETY: pages of the test's own mapping, which nothing else uses.
            unsafe { region::protect(base, n * page(), region::Protection::READ_EXECUTE) }
                .expect("sealed");
        }
        // Free pages 1, 4 and 7 are clean, none two in a row.
        assert_eq!(first_fit(&c.used, &c.dirty, pages, 2, 0), None);
        clean(&mut c);
        assert_eq!(c.dirty, vec![0]);
        assert_eq!(first_fit(&c.used, &c.dirty, pages, 2, 0), Some(1));
        for p in [2, 3, 5, 6] {
            // SAFETY: as above; the clean made the page read+write (a fault here fails the
            // test).
            unsafe { c.map.base().wrapping_add(p * page()).write(0xc3) };
        }
    }

    #[test]
    fn sealed_code_runs_and_is_not_written_again() {
        // `ret` with 42 in eax; sealed, it is not written again.
        let code = [0xb8, 42, 0, 0, 0, 0xc3];
        let mut b = alloc(code.len()).expect("space");
        b.write_and_seal(&code).expect("sealed");
        assert!(
            b.write_and_seal(&code).is_err(),
            "sealed code is not written"
        );
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the extent holds the six bytes above, a complete function of the C
            // ABI returning an `i32`, and is executable at its base.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(b.base()) };
            assert_eq!(f(), 42);
        }
        // Units of several pages take a run of free grains, the fewest that hold them.
        let big = alloc(3 * page() + 1).expect("space");
        let grain = big.map.grain();
        assert_eq!(big.len(), (3 * page() + 1).div_ceil(grain) * grain);
        assert_ne!(big.base() as usize, b.base() as usize);
    }

    /// Code written through a dual chunk's writable view runs at its executable view, and
    /// space given back is handed out again with no protection change (it is never
    /// dirty).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn dual_chunks_run_what_their_writable_view_holds() {
        let Some(views) = dual::Views::map(4 * page()) else {
            // (A kernel that refuses executable memory files: the heap flips instead,
            // which the other tests cover.)
            eprintln!("no executable memory files here");
            return;
        };
        assert_ne!(views.exec, views.write);
        let mut c = Chunk::new(Mapping::Dual(views));
        for answer in [42u8, 43] {
            let code = [0xb8, answer, 0, 0, 0, 0xc3];
            let first = first_fit(&c.used, &c.dirty, c.map.grains(), 1, 0).expect("a free line");
            assert_eq!(first, 0, "the line given back is free again at once");
            let mut line = take(&mut c, first, 1);
            line.write_and_seal(&code).expect("sealed");
            // SAFETY: the line holds a complete C-ABI function returning an `i32`, and the
            // executable view maps it read+execute.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(line.base()) };
            assert_eq!(f(), i32::from(answer));
            // (Given back by hand: this chunk is the test's, not in the heap.)
            c.used[0] &= !1;
            c.in_use -= 1;
            drop(line);
        }
        assert!(c.dirty.iter().all(|&w| w == 0));
    }

    /// A line of the heap, if its chunks are dual here.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    fn dual_line() -> Option<Extent> {
        let line = alloc(1).expect("space");
        if matches!(*line.map, Mapping::Dual(_)) {
            return Some(line);
        }
        eprintln!("no dual chunks here");
        None
    }

    /// Small units share pages in a dual chunk: each starts on a line, holds the lines its
    /// code needs and no more, runs, and is handed out again once given back.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn dual_chunks_pack_units_in_lines() {
        let Some(views) = dual::Views::map(CHUNK_PAGES * page()) else {
            eprintln!("no executable memory files here");
            return;
        };
        let mut c = Chunk::new(Mapping::Dual(views));
        // Units of 1, 2 and 3 lines: `mov eax, k; ret` at the start, padded with `int3`.
        let mut units = Vec::new();
        for (k, lines) in [(1u8, 1), (2, 2), (3, 3), (4, 1)] {
            let mut code = vec![0xcc; lines * LINE - 10];
            code[..6].copy_from_slice(&[0xb8, k, 0, 0, 0, 0xc3]);
            let count = code.len().div_ceil(c.map.grain());
            assert_eq!(count, lines);
            let first = first_fit(&c.used, &c.dirty, c.map.grains(), count, 0).expect("space");
            let mut unit = take(&mut c, first, count);
            unit.write_and_seal(&code).expect("sealed");
            assert_eq!(unit.base() as usize % LINE, 0);
            units.push((k, unit));
        }
        let bases: Vec<usize> = units.iter().map(|(_, u)| u.base() as usize).collect();
        assert_eq!(
            bases.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(),
            [LINE, 2 * LINE, 3 * LINE],
            "packed line after line, seven lines in one page"
        );
        for (k, unit) in &units {
            // SAFETY: each unit starts with a complete C-ABI function returning an `i32`,
            // and the executable view maps it read+execute.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(unit.base()) };
            assert_eq!(f(), i32::from(*k));
        }
        // The two-line unit given back (by hand: this chunk is the test's): a unit of two
        // lines goes there, one of three after the last.
        let (_, two) = units.remove(1);
        c.used[0] &= !(0b11 << 1);
        c.in_use -= 2;
        drop(two);
        assert_eq!(first_fit(&c.used, &c.dirty, c.map.grains(), 2, 0), Some(1));
        assert_eq!(first_fit(&c.used, &c.dirty, c.map.grains(), 3, 0), Some(7));
        assert!(c.dirty.iter().all(|&w| w == 0));
    }

    /// After a fork, a dual chunk hands out no space again (the child shares its memory)
    /// and goes once its last unit does; units allocated after the fork come from a new
    /// chunk.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn a_fork_retires_dual_chunks() {
        let Some(before) = dual_line() else { return };
        let old = Arc::downgrade(&before.map);
        dual::count_fork();
        let after = alloc(1).expect("space");
        assert!(!Arc::ptr_eq(&before.map, &after.map));
        drop(before);
        // Other tests may hold units of the retired chunk still; once they are gone, so is
        // the chunk, and its mapping.
        let heap = HEAP.lock();
        match heap
            .chunks
            .iter()
            .find(|c| Arc::as_ptr(&c.map) == old.as_ptr())
        {
            Some(c) => assert!(!c.open() && c.in_use > 0, "kept only while it has units"),
            None => assert_eq!(old.strong_count(), 0, "unmapped once out of the heap"),
        }
    }

    /// A real fork is counted, in the parent and in the child (which only reads the count
    /// and exits: nothing else is safe in the child of a threaded process).
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    #[test]
    fn a_fork_is_counted_in_both_processes() {
        let Some(line) = dual_line() else { return };
        let before = dual::forks();
        // SAFETY: the child calls only an atomic load and `_exit`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let counted = dual::forks() > before;
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if counted { 0 } else { 1 }) };
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(dual::forks() > before);
        assert!(!HEAP
            .lock()
            .chunks
            .iter()
            .any(|c| Arc::ptr_eq(&c.map, &line.map) && c.open()));
    }
}

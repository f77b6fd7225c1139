//! The stitch tier's code heap: pages for units, carved out of larger mappings and reused,
//! so that installing a unit costs one protection change instead of a mapping, a page
//! fault, a protection change and, later, an unmapping.
//!
//! **Pages are never writable and executable at once.** [`alloc`] takes whole free pages
//! that are read+write, the caller writes the unit into them, and
//! [`Pages::write_and_seal`] makes them read+execute. When the owner drops the [`Pages`]
//! (once no thread can still run the code: see the reclamation rules of
//! [`super::memory`]), they are free but still read+execute ("dirty"): no protection
//! change is made then. When no clean run of free pages fits an allocation, each chunk's
//! dirty pages are made read+write again, a run of adjacent pages at a time (units freed
//! in the order they were made lie side by side), before a new chunk is mapped. So
//! freeing costs no system call, and one change, with the shootdown of every other
//! thread's TLB that it causes, serves many units.
//!
//! **Chunks.** Pages come from chunks of [`CHUNK_PAGES`] pages mapped read+write on
//! demand; a unit larger than a chunk gets a chunk of its own. Allocation is first fit
//! over each chunk's free bitmap, under one lock (a scan of a few words); sealing a unit
//! happens outside it, the batched return of dirty pages under it. A chunk with no page in
//! use is unmapped, unless it is the only such chunk left (kept for the next units).
//!
//! Only x86-64 runs stitch-tier code, and its instruction cache is coherent with stores,
//! so reusing a page needs no cache flush.

use std::sync::Arc;

use parking_lot::{const_mutex, Mutex};

/// Pages per chunk (1 MiB of 4 KiB pages).
pub const CHUNK_PAGES: usize = 256;

/// One mapping and which of its pages are in use.
struct Chunk {
    map: Arc<Mapping>,
    /// A bit per page, set while the page is free but still read+execute.
    dirty: Vec<u64>,
    /// A bit per page, set while the page belongs to a [`Pages`].
    used: Vec<u64>,
    in_use: usize,
}

/// A mapping, unmapped when the last [`Pages`] in it and the heap let go of it.
struct Mapping(region::Allocation);

impl Mapping {
    fn base(&self) -> *mut u8 {
        self.0.as_ptr::<u8>() as *mut u8
    }
    fn pages(&self) -> usize {
        self.0.len() / page()
    }
}

// SAFETY: the mapping is only written through `Pages` that own disjoint page ranges of it
// (the heap's bitmap hands each page to one `Pages` at a time), and is unmapped only when
// the last reference goes, from whichever thread drops it.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared references only read the base address and length.
unsafe impl Sync for Mapping {}

static HEAP: Mutex<Vec<Chunk>> = const_mutex(Vec::new());

fn page() -> usize {
    region::page::size()
}

/// Pages holding one unit of machine code; given back to the heap when dropped.
pub struct Pages {
    map: Arc<Mapping>,
    first: usize,
    count: usize,
    sealed: bool,
}

impl Pages {
    /// The address of the first page.
    pub fn base(&self) -> *mut u8 {
        // `first` is a page index within the mapping.
        self.map.base().wrapping_add(self.first * page())
    }

    /// Bytes the pages span.
    fn len(&self) -> usize {
        self.count * page()
    }

    /// Copies `code` to the start of the pages (which must be free, read+write) and makes
    /// them read+execute.
    pub fn write_and_seal(&mut self, code: &[u8]) -> Result<(), String> {
        if self.sealed || code.len() > self.len() {
            return Err("code pages already sealed, or too small".into());
        }
        // SAFETY: the pages are read+write (free pages are, and these were just taken
        // from the free list), at least `code.len()` bytes long, owned by `self` alone,
        // and do not overlap `code`.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), self.base(), code.len()) };
        // SAFETY: the range is exactly this `Pages`' pages, inside a live mapping.
        unsafe { region::protect(self.base(), self.len(), region::Protection::READ_EXECUTE) }
            .map_err(|e| format!("protecting code pages: {e}"))?;
        self.sealed = true;
        Ok(())
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        let mut heap = HEAP.lock();
        if let Some(i) = heap.iter().position(|c| Arc::ptr_eq(&c.map, &self.map)) {
            let c = &mut heap[i];
            for p in self.first..self.first + self.count {
                c.used[p / 64] &= !(1 << (p % 64));
                if self.sealed {
                    c.dirty[p / 64] |= 1 << (p % 64);
                }
            }
            c.in_use -= self.count;
            let idle = heap.iter().filter(|c| c.in_use == 0).count();
            if heap[i].in_use == 0 && idle > 1 {
                heap.swap_remove(i);
            }
        }
    }
}

/// Free pages for `bytes` of code (at least one page).
pub fn alloc(bytes: usize) -> Result<Pages, String> {
    let count = bytes.max(1).div_ceil(page());
    let mut heap = HEAP.lock();
    for pass in 0..2 {
        for c in heap.iter_mut() {
            if let Some(first) = first_fit(&c.used, &c.dirty, c.map.pages(), count) {
                return Ok(take(c, first, count));
            }
        }
        if pass == 0 {
            heap.iter_mut().for_each(clean);
        }
    }
    let pages = count.max(CHUNK_PAGES);
    let map = region::alloc(pages * page(), region::Protection::READ_WRITE)
        .map_err(|e| format!("mapping code pages: {e}"))?;
    heap.push(Chunk {
        map: Arc::new(Mapping(map)),
        dirty: vec![0; pages.div_ceil(64)],
        used: vec![0; pages.div_ceil(64)],
        in_use: 0,
    });
    let c = heap.last_mut().expect("just pushed");
    Ok(take(c, 0, count))
}

fn take(c: &mut Chunk, first: usize, count: usize) -> Pages {
    for p in first..first + count {
        c.used[p / 64] |= 1 << (p % 64);
    }
    c.in_use += count;
    Pages {
        map: c.map.clone(),
        first,
        count,
        sealed: false,
    }
}

/// The first run of `count` free pages among `pages`, if any.
/// Makes the dirty pages of chunk `c` read+write again, one protection change per run of
/// adjacent dirty pages. A run that cannot be made writable stays out of the free list
/// (counted in use until the chunk goes) rather than be handed out unwritable.
fn clean(c: &mut Chunk) {
    let pages = c.map.pages();
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
        // `Pages` owns them, and their code was given back only once no thread could run
        // it, so nothing reads, writes or executes them while their protection changes.
        let back =
            unsafe { region::protect(base, (p - start) * page(), region::Protection::READ_WRITE) };
        if back.is_err() {
            for q in start..p {
                c.used[q / 64] |= 1 << (q % 64);
            }
            c.in_use += p - start;
        }
    }
}

/// The first run of `count` pages free and clean (not `dirty`) among `pages`. Whole
/// words of 64 pages all taken, or all free, are passed in one step (freed units leave
/// long stretches of dirty pages before the clean ones).
fn first_fit(used: &[u64], dirty: &[u64], pages: usize, count: usize) -> Option<usize> {
    let mut run = 0;
    let mut p = 0;
    while p < pages {
        let busy = used[p / 64] | dirty[p / 64];
        if p % 64 == 0 && p + 64 <= pages && (busy == 0 || busy == u64::MAX) {
            if busy == u64::MAX {
                run = 0;
            } else if run + 64 >= count {
                return Some(p - run);
            } else {
                run += 64;
            }
            p += 64;
            continue;
        }
        if busy & (1 << (p % 64)) != 0 {
            run = 0;
        } else {
            run += 1;
            if run == count {
                return Some(p + 1 - count);
            }
        }
        p += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_runs_across_words() {
        let mut used = vec![u64::MAX, 0b0111];
        let clean = [0u64; 2];
        assert_eq!(first_fit(&used, &clean, 128, 1), Some(67));
        assert_eq!(first_fit(&used, &clean, 68, 2), None);
        used[0] = !(0b11 << 62);
        assert_eq!(first_fit(&used, &clean, 128, 2), Some(62));
        assert_eq!(first_fit(&used, &clean, 128, 3), Some(67));
        // Dirty pages (free, not yet writable) are not handed out.
        assert_eq!(first_fit(&used, &[0b11 << 62, 0b1000], 128, 1), Some(68));
    }

    /// The search by words finds what a search page by page finds, on bitmaps of whole
    /// words taken or free and of mixed ones, for any size and bound.
    #[test]
    fn first_fit_by_words_agrees_with_page_by_page() {
        let slow = |used: &[u64], dirty: &[u64], pages: usize, count: usize| {
            let mut run = 0;
            for p in 0..pages {
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
            match x % 4 {
                0 => 0,
                1 => u64::MAX,
                _ => x & (x >> 3),
            }
        };
        for _ in 0..2000 {
            let used: Vec<u64> = (0..4).map(|_| word()).collect();
            let dirty: Vec<u64> = (0..4).map(|_| word() & word()).collect();
            for pages in [1, 63, 64, 65, 128, 200, 256] {
                for count in [1, 2, 3, 63, 64, 65, 130] {
                    assert_eq!(
                        first_fit(&used, &dirty, pages, count),
                        slow(&used, &dirty, pages, count),
                        "{used:x?} {dirty:x?} {pages} {count}"
                    );
                }
            }
        }
    }

    /// Freed code pages stay read+execute until a clean makes each run of them writable
    /// again, after which they are handed out (and written) like any free page.
    #[test]
    fn dirty_pages_are_made_writable_in_runs() {
        let pages = 8;
        let map = region::alloc(pages * page(), region::Protection::READ_WRITE).expect("mapped");
        let mut c = Chunk {
            map: Arc::new(Mapping(map)),
            dirty: vec![0b0110_1100],
            used: vec![0b0000_0001],
            in_use: 1,
        };
        // Pages 2-3 and 5-6 held sealed code, now freed.
        for (first, n) in [(2, 2), (5, 2)] {
            let base = c.map.base().wrapping_add(first * page());
            // SAFETY: pages of the test's own mapping, which nothing else uses.
            unsafe { region::protect(base, n * page(), region::Protection::READ_EXECUTE) }
                .expect("sealed");
        }
        // Free pages 1, 4 and 7 are clean, none two in a row.
        assert_eq!(first_fit(&c.used, &c.dirty, pages, 2), None);
        clean(&mut c);
        assert_eq!(c.dirty, vec![0]);
        assert_eq!(first_fit(&c.used, &c.dirty, pages, 2), Some(1));
        for p in [2, 3, 5, 6] {
            // SAFETY: as above; the clean made the page read+write (a fault here fails the
            // test).
            unsafe { c.map.base().wrapping_add(p * page()).write(0xc3) };
        }
    }

    #[test]
    fn sealed_code_runs_and_is_not_written_again() {
        // `ret` with 42 in eax, then the same page serves another unit.
        let code = [0xb8, 42, 0, 0, 0, 0xc3];
        let mut b = alloc(code.len()).expect("pages");
        b.write_and_seal(&code).expect("sealed");
        assert!(
            b.write_and_seal(&code).is_err(),
            "sealed pages are not written"
        );
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the pages hold the six bytes above, a complete function of the C
            // ABI returning an `i32`, and are read+execute.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(b.base()) };
            assert_eq!(f(), 42);
        }
        // Units of several pages take a run of free pages.
        let big = alloc(3 * page() + 1).expect("pages");
        assert_eq!(big.len(), 4 * page());
        assert_ne!(big.base() as usize, b.base() as usize);
    }
}

//! The stitch tier's code heap: pages for units, carved out of larger mappings and reused,
//! so that installing a unit costs one protection change instead of a mapping, a page
//! fault, a protection change and, later, an unmapping.
//!
//! **Pages are never writable and executable at once.** A free page is read+write and
//! holds no reachable code. [`alloc`] takes whole free pages, the caller writes the unit
//! into them, and [`Pages::seal`] makes them read+execute. When the owner drops the
//! [`Pages`] (once no thread can still run the code: see the reclamation rules of
//! [`super::memory`]), they are made read+write again and go back to the free list.
//!
//! **Chunks.** Pages come from chunks of [`CHUNK_PAGES`] pages mapped read+write on
//! demand; a unit larger than a chunk gets a chunk of its own. Allocation is first fit
//! over each chunk's free bitmap, under one lock (a scan of a few words); protection
//! changes happen outside it. A chunk with no page in use is unmapped, unless it is the
//! only such chunk left (kept for the next units).
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
        if self.sealed {
            // SAFETY: the range is exactly this `Pages`' pages, inside a live mapping; no
            // thread runs their code any more (the owner is gone).
            let back =
                unsafe { region::protect(self.base(), self.len(), region::Protection::READ_WRITE) };
            if back.is_err() {
                // Not writable again: the pages stay out of the free list (leaked until
                // their mapping goes) rather than handed out unwritable.
                return;
            }
        }
        let mut heap = HEAP.lock();
        if let Some(i) = heap.iter().position(|c| Arc::ptr_eq(&c.map, &self.map)) {
            let c = &mut heap[i];
            for p in self.first..self.first + self.count {
                c.used[p / 64] &= !(1 << (p % 64));
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
    for c in heap.iter_mut() {
        if let Some(first) = first_fit(&c.used, c.map.pages(), count) {
            return Ok(take(c, first, count));
        }
    }
    let pages = count.max(CHUNK_PAGES);
    let map = region::alloc(pages * page(), region::Protection::READ_WRITE)
        .map_err(|e| format!("mapping code pages: {e}"))?;
    heap.push(Chunk {
        map: Arc::new(Mapping(map)),
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
fn first_fit(used: &[u64], pages: usize, count: usize) -> Option<usize> {
    let mut run = 0;
    for p in 0..pages {
        if used[p / 64] & (1 << (p % 64)) != 0 {
            run = 0;
            continue;
        }
        run += 1;
        if run == count {
            return Some(p + 1 - count);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_finds_runs_across_words() {
        let mut used = vec![u64::MAX, 0b0111];
        assert_eq!(first_fit(&used, 128, 1), Some(67));
        assert_eq!(first_fit(&used, 68, 2), None);
        used[0] = !(0b11 << 62);
        assert_eq!(first_fit(&used, 128, 2), Some(62));
        assert_eq!(first_fit(&used, 128, 3), Some(67));
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

//! Code memory and its reclamation, and the live counts the runtime exposes.
//!
//! A [`CodeRegion`] is one cranelift-jit module (made when the first code goes in), the
//! space of stitch-tier units (taken from the code heap, [`super::heap`]: each unit is
//! written into free space, executable and never writable at the address it runs at,
//! which goes back to the heap with the region), and the metadata
//! its code refers to (the fault site records whose addresses the code stores when it
//! faults). It is owned by what its code belongs to: the runtime (generic code and the
//! entry wrappers) or one specialization (its entry unit and every continuation stitched
//! later). When its owner goes, the region frees its code (`JITModule::free_memory`, and
//! its units' space goes back to the heap) and its metadata.
//!
//! **Invariant (reclamation).** Code of a region runs only while its owner is alive: a
//! call into specialized code borrows the specialization's handle for the whole call, and
//! the handle owns the region; generic code is owned by the runtime, which every
//! specialization keeps alive. So when a region is dropped no thread can be running its
//! code or hold a pointer into it, and freeing is safe. Regions never share space (their
//! units may share a page of the heap, where pages never change protection).
//!
//! **Lock order.** A region's module mutex is taken while a unit is compiled into it; no
//! other runtime lock is taken under it except a promotion site's `stitching` lock, which
//! is always taken first (site lock, then module lock).
//!
//! [`live`] reports the process-wide counts of regions, code bytes, fault site records and
//! promotion sites, so that tests can assert that dropping what was made gives everything
//! back (counts, not timings).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_jit::{JITBuilder, JITModule};
use parking_lot::Mutex;
use smallvec::SmallVec;

use dyc_templates::template::FaultKind;
use dyc_templates::types::SrcLoc;

use super::faults::FaultSite;
use super::heap::{self, Extent};

static REGIONS: Counter = Counter::new();
static CODE_BYTES: Counter = Counter::new();
static FAULT_SITES: Counter = Counter::new();
pub(crate) static PROMOTION_SITES: Counter = Counter::new();

/// A process-wide count that every stitching thread changes: a cache line per shard, each
/// thread adding to and taking from a shard of its own, so that threads do not contend
/// for one line (one shared atomic counted every fault site of every unit: with eight
/// threads, 0.6% of the rule service's samples, nearly half the time of making a record).
/// Read by summing the shards; a shard may hold less than nothing (a record freed by
/// another thread than the one that made it), the sum is exact.
pub(crate) struct Counter([Shard; SHARDS]);

#[repr(align(64))]
struct Shard(AtomicUsize);

const SHARDS: usize = 16;

impl Counter {
    pub(crate) const fn new() -> Counter {
        Counter([const { Shard(AtomicUsize::new(0)) }; SHARDS])
    }

    /// The calling thread's shard (threads take shards in turn).
    #[inline]
    fn shard(&self) -> &AtomicUsize {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
        }
        let k = SHARD.try_with(|k| *k).unwrap_or(0);
        &self.0[k].0
    }

    #[inline]
    pub(crate) fn add(&self, n: usize) {
        self.shard().fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn sub(&self, n: usize) {
        self.shard().fetch_sub(n, Ordering::Relaxed);
    }

    /// The count (exact once no thread changes it).
    pub(crate) fn get(&self) -> usize {
        (self.0.iter()).fold(0usize, |sum, s| {
            sum.wrapping_add(s.0.load(Ordering::Relaxed))
        })
    }
}

/// Process-wide counts of what the runtimes hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Code regions (JIT modules) not yet freed.
    pub regions: usize,
    /// Bytes of machine code in those regions (function bodies as compiled).
    pub code_bytes: usize,
    /// Bytes of the stitch tier's code heap its units hold: their code rounded up to
    /// 64-byte lines (to pages where the heap's pages flip), the memory it takes.
    pub heap_bytes: usize,
    /// Fault site records.
    pub fault_sites: usize,
    /// Promotion sites.
    pub promotion_sites: usize,
}

/// The live counts now.
pub fn live() -> LiveCounts {
    LiveCounts {
        regions: REGIONS.get(),
        code_bytes: CODE_BYTES.get(),
        heap_bytes: heap::in_use_bytes(),
        fault_sites: FAULT_SITES.get(),
        promotion_sites: PROMOTION_SITES.get(),
    }
}

/// A cranelift-jit module owned by the region; `Send` so that the region can move between
/// threads.
pub(crate) struct Module(pub JITModule);

// SAFETY: the JIT module is only used under `CodeRegion::module`'s mutex, so never from
// two threads at once; it holds no thread-bound state (its raw pointers point into its own
// code pages and into the process, which every thread may read).
unsafe impl Send for Module {}

/// A region's module: made on first use (a region that never receives code, such as a
/// generic entry's, which calls code of the runtime's region, costs no JIT module), then
/// freed with the region. One per region, moved once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum ModuleState {
    /// No Cranelift unit yet: what making the module takes (a stitch-tier specialization
    /// never makes one).
    Pending(OwnedTargetIsa, Symbols),
    Ready(Module),
}

/// The addresses of the symbols a module's code imports, by name.
pub(crate) type Symbols = Arc<HashMap<String, usize>>;

/// One module of code with the fault sites its code refers to.
pub struct CodeRegion {
    module: Mutex<Option<ModuleState>>,
    /// Stitch-tier units, space of the code heap each (most regions have one: the entry
    /// unit, kept inline).
    units: Mutex<SmallVec<[Extent; 1]>>,
    bytes: AtomicUsize,
    /// In chunks, each filled up to its capacity and never grown, so that a record's
    /// address, which the code stores, never moves (one allocation per chunk, not one per
    /// record).
    faults: Mutex<Vec<Vec<FaultSite>>>,
    /// The region's function, named in its faults.
    pub(crate) func: Arc<str>,
}

impl CodeRegion {
    /// A new region for code of function `func`; symbols it imports are resolved in
    /// `symbols` (the runtime's helpers and generic functions).
    pub(crate) fn new(isa: OwnedTargetIsa, func: Arc<str>, symbols: Symbols) -> CodeRegion {
        REGIONS.add(1);
        CodeRegion {
            module: Mutex::new(Some(ModuleState::Pending(isa, symbols))),
            units: Mutex::new(SmallVec::new()),
            bytes: AtomicUsize::new(0),
            faults: Mutex::new(Vec::new()),
            func,
        }
    }

    /// Runs `f` on the module, under the region's lock.
    pub(crate) fn with_module<T>(&self, f: impl FnOnce(&mut JITModule) -> T) -> T {
        let mut state = self.module.lock();
        if let Some(ModuleState::Pending(..)) = &*state {
            if let Some(ModuleState::Pending(isa, symbols)) = state.take() {
                let mut builder =
                    JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
                builder.symbol_lookup_fn(Box::new(move |name| {
                    symbols.get(name).map(|&a| a as *const u8)
                }));
                *state = Some(ModuleState::Ready(Module(JITModule::new(builder))));
            }
        }
        match state.as_mut() {
            Some(ModuleState::Ready(m)) => f(&mut m.0),
            _ => unreachable!("a live region has its module"),
        }
    }

    /// Copies position-independent machine code into free space of the code heap
    /// ([`super::heap`]), executable and never writable at the address returned (never
    /// writable and executable at once), and keeps the space with the region.
    pub(crate) fn install(&self, code: &[u8]) -> Result<usize, String> {
        let mut unit = heap::alloc(code.len())?;
        unit.write_and_seal(code)?;
        let base = unit.base() as usize;
        self.units.lock().push(unit);
        self.add_code_bytes(code.len());
        Ok(base)
    }

    /// Records `n` more bytes of code.
    pub(crate) fn add_code_bytes(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
        CODE_BYTES.add(n);
    }

    /// Bytes of code in the region.
    pub fn code_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// A new fault site record; the returned word is what the code stores into the call
    /// context when the fault happens (the record's address, valid while the region
    /// lives).
    pub(crate) fn fault_site(&self, kind: FaultKind, loc: SrcLoc) -> u64 {
        let mut faults = self.faults.lock();
        if faults.last().is_none_or(|c| c.len() == c.capacity()) {
            let room = faults.last().map_or(8, |c| (2 * c.capacity()).min(256));
            faults.push(Vec::with_capacity(room));
        }
        let chunk = faults.last_mut().expect("a chunk with room");
        chunk.push(FaultSite {
            kind,
            loc,
            func: self.func.clone(),
        });
        FAULT_SITES.add(1);
        let site = chunk.last().expect("just pushed");
        site as *const FaultSite as u64
    }
}

impl Drop for CodeRegion {
    fn drop(&mut self) {
        if let Some(ModuleState::Ready(m)) = self.module.get_mut().take() {
            // SAFETY: see the reclamation invariant in the module doc: the region's owner
            // is being dropped, so no thread runs its code or holds a pointer into it.
            unsafe { m.0.free_memory() };
        }
        REGIONS.sub(1);
        CODE_BYTES.sub(*self.bytes.get_mut());
        let sites = self.faults.get_mut().iter().map(Vec::len).sum();
        FAULT_SITES.sub(sites);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that add, and others that take away what they did not add themselves (as a
    /// record freed on another thread than the one that made it), leave the exact count.
    #[test]
    fn a_counter_sums_its_shards_exactly() {
        static C: Counter = Counter::new();
        let adders: Vec<_> = (0..20)
            .map(|t| std::thread::spawn(move || (0..1000).for_each(|_| C.add(t + 1))))
            .collect();
        adders.into_iter().for_each(|h| h.join().unwrap());
        let added: usize = (1..=20).map(|t| 1000 * t).sum();
        assert_eq!(C.get(), added);
        let takers: Vec<_> = (0..7)
            .map(|_| std::thread::spawn(|| (0..1000).for_each(|_| C.sub(3))))
            .collect();
        takers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(C.get(), added - 21_000);
    }
}

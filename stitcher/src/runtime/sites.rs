//! Promotion sites and their inline caches.
//!
//! A promotion site is a promotion block entered with particular static values; every unit
//! of one specialization that reaches it shares the site, so a continuation is stitched
//! once per (site, promoted values). The site belongs to its specialization (numbered in
//! the specialization's site table; the code passes that number to `dyc_promote`) and goes
//! away with it.
//!
//! **Inline cache.** Single-value sites also have an inline cache the code probes before
//! calling back: [`dyc_templates::abi::INLINE_CACHE_SLOTS`] words, each 0 or the address of
//! an immutable `[value, code]` pair. A slot is set once, by compare-and-swap, to a pair
//! the site owns; pairs are never changed or freed while the site lives, so a reader never
//! sees a torn or dangling entry.
//!
//! **Inline dispatch.** The first values a site promotes are recorded
//! (`PromoSite::see`); every unit stitched afterwards that reaches the site dispatches on
//! them inline, with their continuations in the same unit (see
//! [`crate::exec::PromotionMode`]). An interpreter's indirect jump thus becomes, after its
//! targets have been seen once, a switch inside one unit: the first units leave through the
//! site's cache, and execution moves into the last one stitched, which covers every target.
//!
//! **Locks.** `stitching` is held while a continuation is stitched, so that racing threads
//! stitch it once; under it the specialization's module lock is taken (never the other
//! way round). User callbacks (pure hosts) may run under `stitching`: a callback must not
//! re-enter the same specialization.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use dyc_templates::abi::{inline_cache_slot, CallCtx, INLINE_CACHE_SLOTS};
use dyc_templates::ops::Const;
use dyc_templates::types::Scalar;

use super::cache::Cache;
use super::hosts::word_to_const;
use super::memory::PROMOTION_SITES;
use crate::ge::Site;

/// One promotion site of a specialization.
pub(crate) struct PromoSite {
    pub site: Site,
    /// Types of the promoted values.
    pub types: Vec<Scalar>,
    /// Continuations by promoted values (code addresses in the specialization's region).
    pub cache: Cache<usize>,
    pub stitching: Mutex<()>,
    inline: Box<[AtomicU64]>,
    /// The pairs the inline cache points to (boxed: their addresses must not move).
    #[allow(clippy::vec_box)]
    pairs: Mutex<Vec<Box<[u64; 2]>>>,
    /// The first [`INLINE_DISPATCH_VALUES`] promoted values seen, in order.
    seen: Mutex<Vec<Box<[u64]>>>,
    /// `cache_one_unchecked`: the one continuation (0 until stitched).
    only: AtomicU64,
    /// Calls back into the runtime (every execution the inline cache does not serve),
    /// and continuations stitched.
    pub calls: AtomicU64,
    pub stitched: AtomicU64,
}

/// What one promotion site of a specialization did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// The promotion block (its source block's name).
    pub block: String,
    /// Executions that called back into the runtime: those the code's inline dispatch and
    /// inline cache did not serve.
    pub calls: u64,
    /// Continuations stitched (each a unit).
    pub stitched: u64,
    /// Continuations kept now.
    pub cached: usize,
}

/// How many promoted values a site dispatches inline, at most (the first ones seen).
/// Continuations for them are stitched into every later unit that reaches the site, so
/// this bounds that code; other values go through the site's cache.
pub const INLINE_DISPATCH_VALUES: usize = 8;

impl PromoSite {
    pub fn new(site: Site, types: Vec<Scalar>) -> PromoSite {
        PROMOTION_SITES.add(1);
        PromoSite {
            site,
            types,
            cache: Cache::default(),
            stitching: Mutex::new(()),
            inline: (0..INLINE_CACHE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            pairs: Mutex::new(Vec::new()),
            seen: Mutex::new(Vec::new()),
            only: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            stitched: AtomicU64::new(0),
        }
    }

    /// Records promoted `words` as seen (before their continuation is stitched, so that
    /// it dispatches inline on them too), if fewer than [`INLINE_DISPATCH_VALUES`] are.
    pub fn see(&self, words: &[u64]) {
        let mut seen = self.seen.lock();
        if seen.len() < INLINE_DISPATCH_VALUES && !seen.iter().any(|w| **w == *words) {
            seen.push(words.into());
        }
    }

    /// The promoted values seen, in order, as words.
    pub fn seen_words(&self) -> Vec<Box<[u64]>> {
        self.seen.lock().clone()
    }

    /// The promoted values seen, in order, as constants of their types.
    pub fn seen(&self) -> Vec<Vec<Const>> {
        self.seen
            .lock()
            .iter()
            .map(|words| {
                words
                    .iter()
                    .zip(&self.types)
                    .map(|(&w, &t)| word_to_const(w, t))
                    .collect()
            })
            .collect()
    }

    /// The inline cache's address, for single-value sites.
    pub fn inline_table(&self) -> Option<u64> {
        (self.types.len() <= 1).then_some(self.inline.as_ptr() as u64)
    }

    /// Records `code` for the promoted `words` in the inline cache, when the site has
    /// one (one promoted value, or none: a lazy block, whose key word is 0).
    pub fn install_inline(&self, words: &[u64], code: usize) {
        match words {
            [w] => self.install_word(*w, code),
            [] => self.install_word(0, code),
            _ => {}
        }
    }

    /// The continuation a `cache_one_unchecked` site keeps, once stitched.
    pub fn only(&self) -> Option<usize> {
        match self.only.load(Ordering::Acquire) {
            0 => None,
            c => Some(c as usize),
        }
    }

    pub fn set_only(&self, code: usize) {
        self.only.store(code as u64, Ordering::Release);
    }

    /// Forgets every continuation (`cache_one`, before keeping a new one): cache entries
    /// are removed and inline slots emptied. The code stays in the specialization's region
    /// and the pairs the slots pointed to stay with the site, so a thread that read them
    /// still jumps to valid code.
    pub fn clear(&self, guard: &super::epoch::Guard) {
        let mut keys = Vec::new();
        self.cache.for_each(|k, _, _| keys.push(k.to_vec()));
        for k in keys {
            self.cache.remove(&k, guard);
        }
        for slot in self.inline.iter() {
            slot.store(0, Ordering::Release);
        }
    }

    /// Records `code` for a one-word key in the inline cache, if its slot is free.
    fn install_word(&self, word: u64, code: usize) {
        let slot = &self.inline[inline_cache_slot(word) as usize];
        if slot.load(Ordering::Acquire) != 0 {
            return;
        }
        let mut pairs = self.pairs.lock();
        let pair = Box::new([word, code as u64]);
        let addr = pair.as_ptr() as u64;
        if slot
            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            pairs.push(pair);
        }
    }
}

impl Drop for PromoSite {
    fn drop(&mut self) {
        PROMOTION_SITES.sub(1);
    }
}

/// Called by code at a promotion: the continuation's code for the promoted values, or 0
/// after recording a fault (a failed lazy specialization) in the context.
pub(crate) extern "C" fn dyc_promote(ctx: *mut CallCtx, site: u64, values: *const u64) -> usize {
    // SAFETY: generated code passes the context it was called with, which the entry point
    // keeps alive and exclusive for the whole call, and whose owner is the live
    // specialization the code belongs to.
    let spec = unsafe { super::SpecState::of(ctx) };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let site = match spec.sites.read().get(site as usize) {
            Some(s) => s.clone(),
            None => return Err("unknown promotion site".to_string()),
        };
        // SAFETY: the code stores one word per promoted value into a stack slot and
        // passes its address; the slot lives until this call returns.
        let words = unsafe { std::slice::from_raw_parts(values, site.types.len()) };
        site.calls.fetch_add(1, Ordering::Relaxed);
        let before = site.stitched.load(Ordering::Relaxed);
        let code = spec.continuation(&site, words).map_err(|e| e.to_string())?;
        if site.stitched.load(Ordering::Relaxed) != before {
            super::Runtime::code_grew(&spec.runtime);
        }
        Ok(code)
    }));
    let msg = match result {
        Ok(Ok(code)) => return code,
        Ok(Err(msg)) => msg,
        Err(_) => "internal error (a bug): the specializer panicked".into(),
    };
    // SAFETY: as above.
    let c = unsafe { &mut *ctx };
    c.fault_site = spec.lazy_fault();
    c.message = Some(msg);
    0
}

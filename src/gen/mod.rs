//! Generators of random valid IR, for property tests and fuzzing (regalloc2's habit:
//! build valid inputs by construction, inside the library).
//!
//! - [`cfg`]: random control-flow graphs as functions, both structured (reducible by
//!   construction) and with arbitrary extra edges (often irreducible);
//! - [`func`]: random valid modules: typed values, every instruction kind, calls between
//!   functions and to host functions, annotations with policies, block parameters carrying
//!   source variables.
//!
//! Everything is driven by [`Rng`], a small deterministic generator, so that a failing case
//! is reproduced by its seed. Compiled for the crate's tests and behind the `gen` feature.

pub mod cfg;
pub mod func;

/// SplitMix64: small, fast, and good enough for test-case generation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo) as u64 + 1)) as i64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Names the seed of a property-test case if the case panics (a panic deep inside the
/// code under test carries no seed of its own): keep one alive for the case's duration.
pub struct SeedGuard(pub u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the failing case is seed {}", self.0);
        }
    }
}

/// The number of cases a property test runs: `DYC_PROPTEST_CASES` if set, else `default`.
pub fn cases(default: u64) -> u64 {
    std::env::var("DYC_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[cfg(test)]
pub mod tests;

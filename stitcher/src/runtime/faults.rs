//! Runtime faults: the records code points at when it faults, and the errors Rust callers
//! receive.
//!
//! Every check the code makes (bounds, zero divisors, `trap`, fuel, call depth and stack,
//! failing hosts, failed lazy specializations) has a [`FaultSite`] record, owned by the
//! [`super::memory::CodeRegion`] of the code that makes the check. On a fault the code
//! stores the record's address (and, for bounds, the index and the length) into the call
//! context and returns a nonzero status (protocol in [`dyc_templates::abi`]); the entry
//! point turns the context into a [`RunError`].
//!
//! **Lifetime.** A record lives as long as its region; the region outlives every call that
//! can run its code (see the reclamation invariant in [`super::memory`]), so the address
//! the context holds after a call is valid when the entry point reads it.

use std::sync::Arc;

use dyc_templates::abi::CallCtx;
use dyc_templates::template::FaultKind;
use dyc_templates::types::SrcLoc;

/// What the code knows statically about one of its checks.
#[derive(Debug)]
pub struct FaultSite {
    pub kind: FaultKind,
    pub loc: SrcLoc,
    /// The function (region) the check is in.
    pub func: Arc<str>,
}

/// A runtime fault of specialized or generic code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    pub kind: FaultKind,
    /// The function (region) where it happened.
    pub func: String,
    pub loc: SrcLoc,
    /// For out-of-bounds accesses: the index and the length.
    pub index: Option<(i64, u64)>,
    /// For failing hosts and failed lazy specializations.
    pub message: Option<String>,
}

impl RunError {
    /// Whether the call failed because a unit stitched while the code ran (a promotion's
    /// continuation, a lazily stitched block) ran out of its specialization budget.
    pub fn is_budget(&self) -> bool {
        self.kind == FaultKind::Specialization
            && self
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(crate::ge::BUDGET_EXCEEDED))
    }
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            FaultKind::OutOfBounds => match self.index {
                Some((i, n)) => write!(f, "index {i} out of bounds for length {n}")?,
                None => write!(f, "index out of bounds")?,
            },
            kind => write!(f, "{}", kind.name())?,
        }
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        write!(f, " in fn {}", self.func)?;
        if self.loc.is_known() {
            write!(f, ", line {}", self.loc)?;
        }
        Ok(())
    }
}

impl std::error::Error for RunError {}

/// The error a call ended with, from its context after a nonzero status.
///
/// # Safety
/// `ctx.fault_site` must be 0 or the address of a live [`FaultSite`]: the context of a
/// call whose code (and so every region it could run) is still alive.
pub(crate) unsafe fn fault_of(ctx: &mut CallCtx, func: &str) -> RunError {
    let site = if ctx.fault_site == 0 {
        None
    } else {
        // SAFETY: the caller guarantees the address is that of a live record.
        Some(unsafe { &*(ctx.fault_site as *const FaultSite) })
    };
    RunError {
        kind: site.map_or(FaultKind::Trap, |s| s.kind),
        func: site.map_or_else(|| func.to_string(), |s| s.func.to_string()),
        loc: site.map_or(SrcLoc::default(), |s| s.loc),
        index: (site.map(|s| s.kind) == Some(FaultKind::OutOfBounds))
            .then_some((ctx.fault_a as i64, ctx.fault_b)),
        message: ctx.message.take(),
    }
}

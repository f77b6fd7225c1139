//! Host functions: the table of functions a module declares and the host registers, the
//! call path from generated code (`dyc_host_call`), and static calls of pure hosts at
//! specialization time.
//!
//! **Invariants.** A host callback never runs under a runtime lock: the table's read lock
//! is held only to clone the callback's `Arc`. A panicking callback is caught and becomes
//! a host fault (at run time) or a failing static call (at specialization time, emitted to
//! fault when the code runs), never an unwinding into generated code.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cranelift_codegen::entity::{EntityRef, PrimaryMap};
use parking_lot::RwLock;

use dyc_templates::abi::CallCtx;
use dyc_templates::ops::Const;
use dyc_templates::types::{Scalar, Type};

use crate::ge::{HostDecl, HostId, PureHosts};

/// A host function: scalar arguments in, an optional scalar out, or an error message.
pub type HostFn = dyn Fn(&[Const]) -> Result<Option<Const>, String> + Send + Sync;

/// The host functions of a module: declarations, and the callbacks registered so far.
pub(crate) struct HostTable {
    pub decls: PrimaryMap<HostId, HostDecl>,
    fns: RwLock<Vec<Option<Arc<HostFn>>>>,
}

impl HostTable {
    pub fn new(decls: PrimaryMap<HostId, HostDecl>) -> HostTable {
        let n = decls.len();
        HostTable {
            decls,
            fns: RwLock::new(vec![None; n]),
        }
    }

    /// Registers the callback of host `name`; `false` if the module declares no such host.
    pub fn register(&self, name: &str, f: Arc<HostFn>) -> bool {
        match self.decls.iter().find(|(_, d)| d.name == name) {
            Some((h, _)) => {
                self.fns.write()[h.index()] = Some(f);
                true
            }
            None => false,
        }
    }

    /// Calls host `h`, outside any lock, catching a panic.
    pub fn call(&self, h: HostId, args: &[Const]) -> Result<Option<Const>, String> {
        let name = self.decls.get(h).map_or("?", |d| d.name.as_str());
        let f = self.fns.read().get(h.index()).cloned().flatten();
        let f = f.ok_or_else(|| format!("host function `{name}` is not registered"))?;
        match catch_unwind(AssertUnwindSafe(|| f(args))) {
            Ok(r) => r,
            Err(_) => Err(format!("host function `{name}` panicked")),
        }
    }
}

impl PureHosts for HostTable {
    fn call(&self, host: HostId, args: &[Const]) -> Result<Option<Const>, String> {
        HostTable::call(self, host, args)
    }
}

pub(crate) extern "C" fn dyc_fmod(x: f64, y: f64) -> f64 {
    x % y
}

/// Called by code for a host function: arguments in `args[..n]`, result written to
/// `args[0]`; returns 0, or 1 after recording the fault at `site` (a fault site record's
/// address) with the message.
pub(crate) extern "C" fn dyc_host_call(
    ctx: *mut CallCtx,
    host: u64,
    args: *mut u64,
    n: u64,
    site: u64,
) -> u64 {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: generated code passes the context it was called with, which the entry
        // point keeps alive and exclusive for the whole call; `owner` points to the live
        // specialization, which keeps its runtime (and so the host table) alive.
        let hosts = unsafe { &super::SpecState::of(ctx).runtime.hosts };
        let h = HostId::new(host as usize);
        let decl = hosts.decls.get(h).ok_or("unknown host")?;
        // SAFETY: the code passes a stack slot of `max(n, 1)` words that lives during the
        // call.
        let words = unsafe { std::slice::from_raw_parts_mut(args, (n as usize).max(1)) };
        let vals: Vec<Const> = decl
            .params
            .iter()
            .zip(words.iter())
            .map(|(t, &w)| word_to_const(w, t.scalar().unwrap_or(Scalar::I64)))
            .collect();
        match (hosts.call(h, &vals)?, decl.ret) {
            (Some(c), Some(t)) if Type::Scalar(c.ty()) == t => {
                words[0] = const_to_word(c);
                Ok(())
            }
            (None, None) => Ok(()),
            (r, t) => Err(format!(
                "`{}` returned {r:?}, its declaration says {t:?}",
                decl.name
            )),
        }
    }));
    let msg = match r {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => m,
        Err(_) => "the host function panicked".to_string(),
    };
    // SAFETY: as above, the context is valid and exclusive for the call.
    let c = unsafe { &mut *ctx };
    c.fault_site = site;
    c.message = Some(msg);
    1
}

/// A scalar from the word code passes (integers extended to 64 bits, `f64` bits).
pub fn word_to_const(w: u64, s: Scalar) -> Const {
    match s {
        Scalar::F64 => Const::F64(f64::from_bits(w)),
        Scalar::Bool => Const::Bool(w & 1 == 1),
        t => dyc_templates::semantics::int(t, w),
    }
}

/// The word code passes for a scalar.
pub fn const_to_word(c: Const) -> u64 {
    match c {
        Const::Int(_, x) => x,
        Const::F64(x) => x.to_bits(),
        Const::Bool(b) => b as u64,
    }
}

//! The public API: compile a module from source, take a region, specialize it on its
//! run-time constants, and call the specialized code.
//!
//! ```
//! use dyc::{Arg, Program};
//!
//! let program = Program::compile(r#"
//!     fn dot(w: [i64], v: [i64]) -> i64 {
//!         make_static(w);
//!         var sum = 0;
//!         var i = 0;
//!         while i < len(w) {
//!             let c = w@[i];
//!             if c != 0 { sum = sum + c * v[i]; }
//!             i += 1;
//!         }
//!         return sum;
//!     }
//! "#).unwrap();
//! let dot = program.region("dot").unwrap();
//!
//! // Specialize on the static weights, then call with the dynamic vector only.
//! let weights = [2i64, 0, 3];
//! let spec = dot.specialize(&[Arg::from(&weights[..])]).unwrap();
//! let v = [10i64, 20, 30];
//! assert_eq!(spec.call(&mut [Arg::from(&v[..])]).unwrap().unwrap().as_i64(), Some(110));
//!
//! // Or call with all arguments: the specialization is looked up in the region's cache.
//! let r = dot.call(&mut [Arg::from(&weights[..]), Arg::from(&v[..])]).unwrap();
//! assert_eq!(r.unwrap().as_i64(), Some(110));
//! ```
//!
//! Runtime faults come back as errors with their kind and source position:
//!
//! ```
//! use dyc::{Arg, Error, Program};
//!
//! let program = Program::compile("fn at(xs: [i64], i: i64) -> i64 { return xs[i]; }").unwrap();
//! let at = program.region("at").unwrap();
//! let xs = [1i64, 2, 3];
//! match at.call(&mut [Arg::from(&xs[..]), Arg::from(7i64)]) {
//!     Err(Error::Run(e)) => assert_eq!(e.to_string(), "index 7 out of bounds for length 3 in fn at, line 1:42"),
//!     other => panic!("{other:?}"),
//! }
//! ```

use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use dyc_stitcher::runtime::epoch::{self, Guard};
use parking_lot::{Condvar, Mutex};

use dyc_stitcher::exec::ExecutorKind;
pub use dyc_stitcher::ge::Caching;
use dyc_stitcher::ge::StitchProgram;
use dyc_stitcher::ge::{BudgetKind, SVal, SliceData, SpecError};
use dyc_stitcher::runtime::cache::{hash_bytes, Cache, WordHasher};
use dyc_stitcher::runtime::{
    self, const_to_word, Misses, OnExceeded, RunError, Runtime, RuntimeOptions, Specialization,
    Tier,
};

use crate::bta::Mode;
use crate::ge::{self, GeneratingExtension};
use crate::interp::{Memory, Val};
use crate::ir::{Const, FuncId, InstData, Module, PolicyGroup, Scalar, SrcLoc, Type};
use crate::lang::{self, Diagnostics};

/// Everything that can go wrong. Each variant says what kind of failure it is, so that a
/// service can tell a bad input from a spent budget from a bug.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The source does not compile.
    Compile(Diagnostics),
    /// The annotations ask for something the specializer does not support; each message
    /// names the variable and the reason, with the annotation's source position.
    Unsupported(Vec<(SrcLoc, String)>),
    /// A specialization budget ran out (which one, and where in the source).
    Budget {
        budget: BudgetKind,
        limit: usize,
        /// The block being stitched.
        block: String,
        loc: SrcLoc,
    },
    /// Code generation failed: Cranelift refused the code (its verifier, or a limit).
    CodeGen(String),
    /// An internal error: a bug of this library (a stitch program that does not check, a
    /// panic caught while specializing). The runtime stays usable.
    Internal(String),
    /// The arguments do not fit the region.
    Arguments(String),
    /// The code raised a runtime fault.
    Run(RunError),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Compile(d) => write!(f, "{d}"),
            Error::Unsupported(es) => {
                for (k, (loc, m)) in es.iter().enumerate() {
                    if k > 0 {
                        writeln!(f)?;
                    }
                    write!(f, "cannot specialize")?;
                    if loc.is_known() {
                        write!(f, " at line {loc}")?;
                    }
                    write!(f, ": {m}")?;
                }
                Ok(())
            }
            Error::Budget {
                budget,
                limit,
                block,
                loc,
            } => {
                let e = SpecError::BudgetExceeded {
                    budget: *budget,
                    limit: *limit,
                    block: block.clone(),
                    loc: *loc,
                };
                write!(f, "{e}")
            }
            Error::CodeGen(m) => write!(f, "code generation failed: {m}"),
            Error::Internal(m) => write!(f, "internal error (a bug of dyc, please report): {m}"),
            Error::Arguments(m) => write!(f, "bad arguments: {m}"),
            Error::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<runtime::RuntimeError> for Error {
    fn from(e: runtime::RuntimeError) -> Error {
        match e {
            runtime::RuntimeError::Arguments(m) => Error::Arguments(m),
            runtime::RuntimeError::Jit(m) => Error::CodeGen(m),
            runtime::RuntimeError::Internal(m) => Error::Internal(m),
            runtime::RuntimeError::Spec(SpecError::Internal(m)) => Error::Internal(m),
            runtime::RuntimeError::Spec(SpecError::BudgetExceeded {
                budget,
                limit,
                block,
                loc,
            }) => Error::Budget {
                budget,
                limit,
                block,
                loc,
            },
        }
    }
}

impl Error {
    fn from_ge(e: ge::GeError, f: &crate::ir::Function) -> Error {
        match e {
            ge::GeError::Internal(m) => Error::Internal(m),
            e => Error::Unsupported(e.at().into_iter().map(|(i, m)| (f.srclocs[i], m)).collect()),
        }
    }
}

/// An argument: a scalar, or a slice borrowed from the caller (mutably for `[mut T]`
/// parameters). Built with `From`: `Arg::from(5i64)`, `Arg::from(&v[..])`,
/// `Arg::from(&mut v[..])`.
#[derive(Debug)]
pub enum Arg<'a> {
    Scalar(Const),
    Slice(SliceArg<'a>),
}

/// A slice argument; only `From` conversions of Rust slices make one.
#[derive(Debug)]
pub struct SliceArg<'a> {
    elem: Scalar,
    ptr: *const u8,
    len: usize,
    mutable: bool,
    _borrow: PhantomData<&'a mut [u8]>,
}

macro_rules! arg_from {
    ($($t:ty => $s:ident;)*) => {$(
        impl<'a> From<$t> for Arg<'a> {
            fn from(x: $t) -> Arg<'a> {
                Arg::Scalar(Const::from(x))
            }
        }
        impl<'a> From<&'a [$t]> for Arg<'a> {
            fn from(x: &'a [$t]) -> Arg<'a> {
                Arg::Slice(SliceArg { elem: Scalar::$s, ptr: x.as_ptr() as *const u8, len: x.len(), mutable: false, _borrow: PhantomData })
            }
        }
        impl<'a> From<&'a mut [$t]> for Arg<'a> {
            fn from(x: &'a mut [$t]) -> Arg<'a> {
                Arg::Slice(SliceArg { elem: Scalar::$s, ptr: x.as_mut_ptr() as *const u8, len: x.len(), mutable: true, _borrow: PhantomData })
            }
        }
    )*};
}

arg_from! {
    i8 => I8; i16 => I16; i32 => I32; i64 => I64; u8 => U8; u16 => U16; u32 => U32; u64 => U64;
    f64 => F64; bool => Bool;
}

impl SliceArg<'_> {
    /// The elements' bytes.
    fn bytes(&self) -> &[u8] {
        let size = dyc_templates::clif::elem_size(self.elem) as usize;
        // SAFETY: `ptr` and `len` come from a live Rust slice of `elem`'s type (the `From`
        // conversions, or `call_values`' buffers), borrowed for `'a`, so `len * size`
        // bytes are readable.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len * size) }
    }

    /// The elements, read as constants.
    fn contents(&self) -> Vec<Const> {
        fn read<const N: usize>(bytes: &[u8], elem: Scalar) -> Vec<Const> {
            bytes
                .chunks_exact(N)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w[..N].copy_from_slice(c);
                    runtime::word_to_const(u64::from_le_bytes(w), elem)
                })
                .collect()
        }
        // (One loop per element size, so that each copies a fixed number of bytes: a
        // program handed in as a key is read once per specialization.)
        let bytes = self.bytes();
        match dyc_templates::clif::elem_size(self.elem) {
            1 => read::<1>(bytes, self.elem),
            2 => read::<2>(bytes, self.elem),
            4 => read::<4>(bytes, self.elem),
            _ => read::<8>(bytes, self.elem),
        }
    }
}

/// Checks that `arg` fits a parameter of type `ty`; `what` names the argument in the
/// error ("argument 2"), which also says what was given.
fn check(arg: &Arg, ty: Type, what: impl FnOnce() -> String) -> Result<(), Error> {
    let given = match arg {
        Arg::Scalar(c) => Type::Scalar(c.ty()),
        Arg::Slice(s) => Type::Slice {
            elem: s.elem,
            mutable: s.mutable,
        },
    };
    let fits = match (given, ty) {
        (
            Type::Slice { elem, mutable },
            Type::Slice {
                elem: want,
                mutable: want_mut,
            },
        ) => elem == want && (mutable || !want_mut),
        _ => given == ty,
    };
    if fits {
        Ok(())
    } else {
        Err(Error::Arguments(format!(
            "{} has type {given}, where the parameter has type {ty}",
            what()
        )))
    }
}

/// "i64, [mut u8]".
fn list(types: &[Type]) -> String {
    let names: Vec<String> = types.iter().map(Type::to_string).collect();
    names.join(", ")
}

/// "1 argument", "3 arguments".
fn count(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        _ => format!("{n} {what}s"),
    }
}

/// A compiled module, with the runtime that specializes its regions.
#[derive(Clone)]
pub struct Program {
    inner: Arc<ProgramInner>,
}

struct ProgramInner {
    module: Module,
    runtime: Runtime,
    /// Per function: its region state, made on first use and shared by every handle.
    regions: Vec<OnceLock<Arc<RegionState>>>,
    /// The clock of last uses: counts the versions cached. A version cached as the `n`th
    /// is stamped `2n`; a hit after it (and before the next) stamps `2n + 1`, so a hit is
    /// more recent than every version made before it.
    tick: AtomicU64,
    /// Serializes caching and eviction, and orders the cached versions by last use.
    evicting: Mutex<Lru>,
    /// Host registrations so far: a version specialized across one is not cached (it may
    /// hold the absence of the host).
    hosts_gen: AtomicU64,
}

impl Program {
    /// Compiles region source with the default options.
    pub fn compile(source: &str) -> Result<Program, Error> {
        Program::compile_with("<source>", source, RuntimeOptions::default())
    }

    /// Compiles region source named `file` (in diagnostics) with runtime options.
    pub fn compile_with(file: &str, source: &str, opts: RuntimeOptions) -> Result<Program, Error> {
        let module = lang::compile(file, source).map_err(Error::Compile)?;
        Program::from_verified(module, opts)
    }

    /// A program from a module, which is verified first (a module that does not verify is
    /// an [`Error::Arguments`] listing the verifier's errors).
    pub fn from_module(module: Module, opts: RuntimeOptions) -> Result<Program, Error> {
        crate::verifier::verify_module(&module)
            .map_err(|e| Error::Arguments(format!("the module does not verify:\n{e}")))?;
        Program::from_verified(module, opts)
    }

    fn from_verified(module: Module, opts: RuntimeOptions) -> Result<Program, Error> {
        let mut generic = Vec::new();
        for (id, f) in module.funcs.iter() {
            let mut g = ge::build(&module, id, Mode::Generic).map_err(|e| Error::from_ge(e, f))?;
            g.program.set_max_array_values(opts.max_array_values);
            generic.push(g.program);
        }
        let runtime = Runtime::new(generic, opts)?;
        let regions = (0..module.funcs.len()).map(|_| OnceLock::new()).collect();
        let inner = Arc::new(ProgramInner {
            module,
            runtime,
            regions,
            tick: AtomicU64::new(0),
            evicting: Mutex::new(Lru::default()),
            hosts_gen: AtomicU64::new(0),
        });
        // Code a promotion stitches into a cached version counts at once: the limits are
        // enforced again (the running version, if evicted, is freed once its call ends).
        let weak = Arc::downgrade(&inner);
        inner.runtime.on_code_growth(move || {
            if let Some(inner) = weak.upgrade() {
                let guard = epoch::pin();
                let mut lru = inner.evicting.lock();
                for r in inner.regions.iter().filter_map(OnceLock::get) {
                    r.cache.reweigh(Version::code_bytes);
                }
                evict_to_fit(&inner, &mut lru, 0, 0, &guard);
            }
        });
        Ok(Program { inner })
    }

    pub fn module(&self) -> &Module {
        &self.inner.module
    }

    /// Provides host function `name`, which the source declares with `extern fn`. The
    /// versions the regions' caches hold are dropped (a pure host runs at specialization
    /// time, so code made before it was registered may hold its absence).
    pub fn register_host(
        &self,
        name: &str,
        f: impl Fn(&[Const]) -> Result<Option<Const>, String> + Send + Sync + 'static,
    ) -> Result<(), Error> {
        self.inner.runtime.register_host(name, Arc::new(f))?;
        // A version made before may have called the host at specialization time and
        // baked its absence in as a fault: every cached version goes (freed once no call
        // still runs it), and calls specialize again.
        let guard = epoch::pin();
        let mut lru = self.inner.evicting.lock();
        self.inner.hosts_gen.fetch_add(1, Ordering::SeqCst);
        for st in self.inner.regions.iter().filter_map(OnceLock::get) {
            let mut keys = Vec::new();
            st.cache.for_each(|k, _, _| keys.push(k.to_vec()));
            for k in keys {
                st.cache.remove(&k, &guard);
            }
        }
        lru.heap.clear();
        Ok(())
    }

    /// Test hook: the next specialization of this program panics inside the stitcher.
    #[doc(hidden)]
    pub fn inject_panic(&self) {
        self.inner.runtime.inject_panic();
    }

    /// Caches `version` for `key` in region `st`'s entry, first evicting least recently
    /// used versions of any region entry until the program's cached specializations, the
    /// new one included, fit [`runtime::Limits::max_specializations`] and
    /// [`runtime::Limits::max_code_bytes`]. Eviction and insertion happen under one lock,
    /// so the cached totals never exceed the limits (code that promotions add to a cached
    /// specialization later is checked when it is stitched). The totals are sums over the
    /// regions and the victims come from the program's LRU heap (see [`Lru`]): no cached
    /// version is visited unless it goes. Returns the cached version (a racer's, if it was first), or gives the
    /// version back, not cached, when it alone exceeds the code limit, the entry has
    /// reached [`runtime::Limits::max_versions`] meanwhile, or a host was registered since
    /// `hosts_gen` (read before specializing).
    fn cache_version<'g>(
        &self,
        st: &'g RegionState,
        key: &[u64],
        version: Version,
        hosts_gen: u64,
        guard: &'g Guard,
    ) -> Result<&'g Version, Version> {
        let inner = &*self.inner;
        let limits = inner.runtime.options().limits;
        let new_bytes = version.code_bytes();
        if new_bytes > limits.max_code_bytes {
            return Err(version);
        }
        let mut lru = inner.evicting.lock();
        // A host registered while this version was made: it may hold the host's absence.
        if inner.hosts_gen.load(Ordering::SeqCst) != hosts_gen {
            return Err(version);
        }
        if st.caching.single() {
            // The one version goes (it is freed once no call still runs it); another key
            // specialized meanwhile may have replaced it already.
            let mut old = Vec::new();
            st.cache.for_each(|k, _, _| old.push(k.to_vec()));
            for k in old {
                if st.cache.remove(&k, guard).is_some() {
                    st.counters.evictions.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else if st.cache.len() >= limits.max_versions {
            // Racers on other keys may have filled the entry since the miss looked.
            return Err(version);
        }
        evict_to_fit(inner, &mut lru, 1, new_bytes, guard);
        let tick = 2 * (inner.tick.fetch_add(1, Ordering::Relaxed) + 1);
        let (v, new) = st
            .cache
            .insert_weighted(key, version, tick, new_bytes, guard);
        if new {
            if let Some((born, used)) = st.cache.stamp(key) {
                lru.heap
                    .push(Reverse((used, born, st.id.as_u32(), key.into())));
            }
            if lru.heap.len() > 2 * cached_versions(inner) + 64 {
                lru.rebuild(inner);
            }
        }
        Ok(v)
    }

    /// Statistics of every region used so far, by name.
    pub fn stats(&self) -> Vec<(String, RegionStats)> {
        let m = &self.inner.module;
        m.funcs
            .iter()
            .filter_map(|(id, f)| {
                self.inner.regions[id.as_u32() as usize].get()?;
                let r = self.region(&f.name).ok()?;
                Some((f.name.clone(), r.stats()))
            })
            .collect()
    }

    /// The region (function) `name`. Every handle of one region shares its state: its
    /// generating extension, its cache of specializations and its generic code.
    pub fn region(&self, name: &str) -> Result<Region, Error> {
        let m = &self.inner.module;
        let id = m
            .func_by_name(name)
            .ok_or_else(|| Error::Arguments(format!("no function `{name}`")))?;
        let slot = &self.inner.regions[id.as_u32() as usize];
        let state = match slot.get() {
            Some(s) => s.clone(),
            None => {
                let opts = self.inner.runtime.options();
                let s = Arc::new(RegionState::new(
                    m,
                    id,
                    opts.executor,
                    opts.max_array_values,
                )?);
                self.inner.runtime.prepare(&s.prog);
                slot.get_or_init(|| s).clone()
            }
        };
        Ok(Region {
            program: self.clone(),
            state,
        })
    }
}

/// The cached versions of a program by last use, least recent first: (last-use tick,
/// entry number, region, key), one item per version cached and stale ones besides. An item
/// is checked when it comes first: a version gone or replaced (another entry number) is
/// dropped, one used since is put back with its tick now. So the first item that checks
/// out is the least recently used version, and a hit costs the heap nothing.
#[derive(Default)]
struct Lru {
    heap: BinaryHeap<Reverse<LruItem>>,
}

/// An item of [`Lru`]: last-use tick, entry number, region (function index), key.
type LruItem = (u64, u64, u32, Box<[u64]>);

impl Lru {
    /// Rebuilt from the caches (dropping stale items).
    fn rebuild(&mut self, inner: &ProgramInner) {
        let mut items = Vec::new();
        for r in inner.regions.iter().filter_map(OnceLock::get) {
            let id = r.id.as_u32();
            r.cache.for_each_stamp(|key, born, used| {
                items.push(Reverse((used, born, id, key.into())));
            });
        }
        self.heap = BinaryHeap::from(items);
    }
}

/// Versions cached in every region entry of `inner`.
fn cached_versions(inner: &ProgramInner) -> usize {
    (inner.regions.iter().filter_map(OnceLock::get))
        .map(|r| r.cache.len())
        .sum()
}

/// Evicts least recently used versions of any region entry of `inner` until the cached
/// specializations plus `extra` more (and `extra_bytes` more code) fit the program's
/// limits, or nothing is left to evict. The caller holds `inner.evicting` (`lru`).
///
/// The counts are sums over the regions (each cache keeps its number of entries and the
/// sum of their code bytes), and the victim comes from `lru`: no version is visited unless
/// it goes.
fn evict_to_fit(
    inner: &ProgramInner,
    lru: &mut Lru,
    extra: usize,
    extra_bytes: usize,
    guard: &Guard,
) {
    let limits = inner.runtime.options().limits;
    let mut rebuilt = false;
    loop {
        let count = cached_versions(inner).saturating_add(extra);
        let bytes: usize = (inner.regions.iter().filter_map(OnceLock::get))
            .map(|r| r.cache.weight())
            .sum();
        let bytes = bytes.saturating_add(extra_bytes);
        if count <= limits.max_specializations && bytes <= limits.max_code_bytes {
            return;
        }
        let Some(Reverse((tick, born, id, key))) = lru.heap.pop() else {
            // Every version cached has an item: none is left to evict (rebuilt once, in
            // case an item was missing).
            if rebuilt {
                return;
            }
            lru.rebuild(inner);
            rebuilt = true;
            continue;
        };
        let Some(r) = inner.regions.get(id as usize).and_then(OnceLock::get) else {
            continue;
        };
        match r.cache.stamp(&key) {
            Some((b, used)) if b == born && used != tick => {
                lru.heap.push(Reverse((used, born, id, key)));
            }
            Some((b, _)) if b == born => {
                if let Some(v) = r.cache.remove(&key, guard) {
                    r.counters.evictions.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        region = %inner.module.funcs[r.id].name,
                        code_bytes = v.code_bytes(),
                        cached_bytes = bytes,
                        "evicted"
                    );
                }
            }
            _ => {}
        }
    }
}

/// What every handle of one region shares.
struct RegionState {
    id: FuncId,
    ge: GeneratingExtension,
    /// The stitch program, shared (not copied) by every specialization of a first tier;
    /// `optimizing` the one of the optimizing tier, which keeps every local array as
    /// values (the same program if none is in memory: [`StitchProgram::home`]).
    prog: Arc<StitchProgram>,
    optimizing: Arc<StitchProgram>,
    params: Vec<Type>,
    /// Positions of the key parameters, increasing.
    keys: Vec<usize>,
    /// Positions of the other parameters (the specialized code's), increasing.
    values: Vec<usize>,
    /// Whether a key parameter is a slice (keyed by a content hash).
    slice_keys: bool,
    /// Whether the function has promotion points: then a version of the optimizing tier
    /// whose promotions stitched continuation units is made again once hot
    /// ([`Region::respecialize`]).
    promotes: bool,
    /// The caching policy of the region entry.
    caching: Caching,
    /// Versions by key words: see [`Region::call`].
    cache: Cache<Version>,
    /// Keys being specialized: racing misses on one key wait for the first instead of
    /// specializing it again, without any lock held while specializing (which runs pure
    /// host functions).
    /// (By key, whether a thread waits for it, on `landed`.)
    in_flight: Mutex<HashMap<smallvec::SmallVec<[u64; 4]>, bool, BuildHasherDefault<WordHasher>>>,
    /// Signalled when a key that threads wait for leaves `in_flight`.
    landed: Condvar,
    counters: Counters,
    /// The generic code's entry, made on first use.
    generic: OnceLock<Arc<Specialized>>,
    /// The executor of new specializations.
    executor: RwLock<ExecutorKind>,
}

/// Stripes of a region entry's hit counter.
const STRIPES: usize = 16;

/// How many times a region entry's version is stitched again, at most, because its units
/// copied stencils in place of missing ones (see `Region::restitch_due`).
const MAX_RESTITCHES: u32 = 8;

/// A claim on specializing one key of a region entry: dropping it (whatever happened)
/// removes the key from the entry's in-flight set and wakes the threads waiting for it.
struct Claim<'a> {
    st: &'a RegionState,
    key: &'a [u64],
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let waited = self.st.in_flight.lock().remove(self.key);
        if waited == Some(true) {
            self.st.landed.notify_all();
        }
    }
}

/// A cached version of a region entry: a specialization, or the generic code (for a key
/// whose specialization ran out of budget under [`OnExceeded::Fallback`]).
enum Version {
    Spec(Arc<Specialized>),
    Generic,
}

impl Version {
    fn code_bytes(&self) -> usize {
        match self {
            Version::Spec(s) => s.code_bytes(),
            Version::Generic => 0,
        }
    }
}

/// What a region entry did, counted as it goes (see [`RegionStats`]).
#[derive(Default)]
struct Counters {
    hits: Striped,
    misses: AtomicU64,
    specializations: AtomicU64,
    tier_ups: AtomicU64,
    restitches: AtomicU64,
    evictions: AtomicU64,
    fallbacks: AtomicU64,
    stitch_ns: AtomicU64,
    compile_ns: AtomicU64,
}

/// A counter bumped on every hit: one cache line per stripe, a thread bumping the stripe
/// of its own index, so that threads hitting one region do not contend for one line.
#[derive(Default)]
struct Striped([Padded; STRIPES]);

#[derive(Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

thread_local! {
    /// This thread's stripe, [`STRIPES`] until its first count.
    static STRIPE: Cell<usize> = const { Cell::new(STRIPES) };
}

/// The next thread's stripe.
#[cold]
fn new_stripe() -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed) as usize % STRIPES;
    STRIPE.with(|s| s.set(k));
    k
}

impl Striped {
    /// Counts one; a load and a store, not a read-modify-write (no locked instruction on
    /// a hit): exact while no two threads that call at once share a stripe (the first
    /// [`STRIPES`] threads to call get stripes of their own), a lost count otherwise.
    #[inline]
    fn bump(&self) {
        let mut k = STRIPE.with(Cell::get);
        if k == STRIPES {
            k = new_stripe();
        }
        let c = &self.0[k % STRIPES].0;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    fn sum(&self) -> u64 {
        self.0.iter().map(|p| p.0.load(Ordering::Relaxed)).sum()
    }
}

/// What one region entry did since the region was first used, and what it keeps now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionStats {
    /// Calls that found their version in the cache.
    pub hits: u64,
    /// Calls that did not (each specialized, or fell back to generic code).
    pub misses: u64,
    /// Specializations made (`replicate`: one per call; tier-ups included).
    pub specializations: u64,
    /// Versions specialized again in the optimizing tier once hot: first-tier versions,
    /// and optimizing-tier versions whose promotions stitched continuation units (made
    /// again with what they saw, [`Region::respecialize`]).
    pub tier_ups: u64,
    /// First-tier versions stitched again once the stencils their units had missed were
    /// made ([`crate::Misses::Background`]; not counted in `specializations`).
    pub restitches: u64,
    /// Versions evicted to stay within the limits.
    pub evictions: u64,
    /// Calls that ran generic code because a limit or a budget was reached.
    pub fallbacks: u64,
    /// Time spent stitching and compiling the specializations' entry units.
    pub stitch_ns: u64,
    pub compile_ns: u64,
    /// Versions cached now, and the bytes of code they hold.
    pub versions: usize,
    pub code_bytes: usize,
}

impl std::fmt::Display for RegionStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = self.hits + self.misses;
        let rate = if calls == 0 {
            0.0
        } else {
            100.0 * self.hits as f64 / calls as f64
        };
        write!(
            f,
            "{} calls, {} hits ({rate:.1}%), {} misses, {} specializations ({} tier-ups, {} stitched again), {} evictions, {} fallbacks; {} versions cached, {} code bytes; stitch {:.3} ms, compile {:.3} ms",
            calls,
            self.hits,
            self.misses,
            self.specializations,
            self.tier_ups,
            self.restitches,
            self.evictions,
            self.fallbacks,
            self.versions,
            self.code_bytes,
            self.stitch_ns as f64 / 1e6,
            self.compile_ns as f64 / 1e6,
        )
    }
}

/// The caching policy of function `id`'s region entry: that of the first `make_static`
/// naming one of the entry block's parameters and giving a caching policy (`cache_all` by
/// default).
fn entry_caching(m: &Module, id: FuncId) -> Caching {
    let f = &m.funcs[id];
    let Some(entry) = f.layout.entry_block() else {
        return Caching::All;
    };
    let params = f.block_params(entry);
    for &b in f.layout.blocks() {
        for &i in f.layout.block_insts(b) {
            if let InstData::MakeStatic { args, policies } = &f.insts[i] {
                if args.iter().any(|(v, _)| params.contains(v)) {
                    if let Some(p) = policies.get(PolicyGroup::Caching) {
                        return ge::caching_of(p);
                    }
                }
            }
        }
    }
    Caching::All
}

impl RegionState {
    fn new(
        m: &Module,
        id: FuncId,
        executor: ExecutorKind,
        max_array_values: u32,
    ) -> Result<RegionState, Error> {
        let f = &m.funcs[id];
        let mut ge = ge::build(m, id, Mode::Specialize).map_err(|e| Error::from_ge(e, f))?;
        ge.program.set_max_array_values(max_array_values);
        let prog = Arc::new(ge.program.clone());
        // The optimizing tier keeps large local arrays as values too: its code is what
        // runs long, and Cranelift allocates the elements to registers.
        let optimizing = match prog.all_homes().is_empty() {
            true => prog.clone(),
            false => {
                let mut p = ge.program.clone();
                p.set_max_array_values(u32::MAX);
                Arc::new(p)
            }
        };
        if f.sig.ret.is_some_and(|t| t.is_slice()) {
            return Err(Error::Unsupported(vec![(
                SrcLoc::default(),
                format!(
                    "`{}` returns a slice: a region called from Rust returns a scalar or nothing",
                    f.name
                ),
            )]));
        }
        Ok(RegionState {
            id,
            prog,
            optimizing,
            keys: ge.program.header.key_params.clone(),
            values: (0..f.sig.params.len())
                .filter(|i| !ge.program.header.key_params.contains(i))
                .collect(),
            slice_keys: ge
                .program
                .header
                .key_params
                .iter()
                .any(|&k| f.sig.params[k].is_slice()),
            promotes: ge.program.blocks.values().any(|b| !b.promote.is_empty()),
            params: f.sig.params.clone(),
            ge,
            caching: entry_caching(m, id),
            cache: Cache::default(),
            in_flight: Mutex::new(HashMap::default()),
            landed: Condvar::new(),
            counters: Counters::default(),
            generic: OnceLock::new(),
            executor: RwLock::new(executor),
        })
    }
}

/// A region of a program: a function whose `make_static` annotations at entry name its
/// run-time constants (the **key parameters**). Cloning a handle, or asking the program
/// for the region again, gives a handle on the same state.
#[derive(Clone)]
pub struct Region {
    program: Program,
    state: Arc<RegionState>,
}

/// Key words of up to this many are kept on the stack by [`Region::call`].
const INLINE_WORDS: usize = 16;

/// Words collected on the stack, spilling to the heap past [`INLINE_WORDS`].
struct Words {
    inline: [u64; INLINE_WORDS],
    len: usize,
    spill: Vec<u64>,
}

impl Words {
    fn new() -> Words {
        Words {
            inline: [0; INLINE_WORDS],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn push(&mut self, w: u64) {
        if self.len < INLINE_WORDS {
            self.inline[self.len] = w;
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.inline);
            }
            self.spill.push(w);
        }
        self.len += 1;
    }

    fn as_slice(&self) -> &[u64] {
        if self.len <= INLINE_WORDS {
            &self.inline[..self.len]
        } else {
            &self.spill
        }
    }
}

impl Region {
    /// Positions of the parameters that are run-time constants.
    pub fn key_params(&self) -> &[usize] {
        &self.state.keys
    }

    /// The generating extension (stitch program and analysis) of the region.
    pub fn generating_extension(&self) -> &GeneratingExtension {
        &self.state.ge
    }

    fn params(&self) -> &[Type] {
        &self.state.params
    }

    /// The executor that stitches this region's new specializations.
    pub fn executor(&self) -> ExecutorKind {
        *self
            .state
            .executor
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Selects the executor for this region's new specializations (every handle of the
    /// region sees it; specializations already cached stay).
    pub fn set_executor(&self, executor: ExecutorKind) {
        *self
            .state
            .executor
            .write()
            .unwrap_or_else(|e| e.into_inner()) = executor;
    }

    /// The key values and static slice contents of `key_args`, checked.
    fn key_of(&self, key_args: &[Arg]) -> Result<(KeyVals, Vec<Option<SliceData>>), Error> {
        let keys = &self.state.keys;
        if key_args.len() != keys.len() {
            return Err(Error::Arguments(format!(
                "{} expected (the region's key), {} given",
                count(keys.len(), "run-time constant"),
                key_args.len()
            )));
        }
        let params = self.params();
        let mut key = KeyVals::new();
        // (By parameter, up to the last slice: every reader looks a slice up with `get`,
        // and a region keyed by scalars allocates nothing here.)
        let mut slices: Vec<Option<SliceData>> = Vec::new();
        for (j, (a, &k)) in key_args.iter().zip(keys).enumerate() {
            check(a, params[k], || {
                format!("run-time constant {j} (parameter {k})")
            })?;
            match a {
                Arg::Scalar(c) => key.push(SVal::Scalar(*c)),
                Arg::Slice(s) => {
                    if slices.len() <= k {
                        slices.resize(k + 1, None);
                    }
                    slices[k] = Some(SliceData::new(s.elem, s.contents()));
                    key.push(SVal::Slice(k as u32));
                }
            }
        }
        Ok((key, slices))
    }

    /// Specializes the region on the values of its key parameters, given in order, in the
    /// optimizing tier. The result is not cached; [`Region::call`] caches.
    pub fn specialize(&self, key_args: &[Arg]) -> Result<Specialized, Error> {
        self.specialize_in(key_args, Tier::Optimizing)
    }

    /// [`Region::specialize`] with every unit compiled in `tier`.
    pub fn specialize_in(&self, key_args: &[Arg], tier: Tier) -> Result<Specialized, Error> {
        let (key, slices) = self.key_of(key_args)?;
        let prog = match tier {
            Tier::Optimizing => &self.state.optimizing,
            Tier::Stitch | Tier::Quick => &self.state.prog,
        };
        let spec = self.program.inner.runtime.specialize(
            prog.clone(),
            &key,
            slices,
            self.executor(),
            tier,
        )?;
        Ok(self.specialized(spec))
    }

    /// `spec` behind the region's dynamic parameters.
    fn specialized(&self, spec: Specialization) -> Specialized {
        let keys = &self.state.keys;
        let params = self.params();
        let dynamic: Vec<Type> = (0..params.len())
            .filter(|k| !keys.contains(k))
            .map(|k| params[k])
            .collect();
        Specialized::new(spec, dynamic)
    }

    /// [`Region::specialize_in`], starting from what the promotions of `seen` (a
    /// specialization of this region, in any tier) have seen so far: every unit, the entry
    /// included, dispatches inline on those values from the start, with their
    /// continuations stitched into it. A specialization whose promotions stitched
    /// continuation units while it ran (an interpreter's indirect jumps, say) is made
    /// again as one unit, in which the jumps' targets are blocks of one function and
    /// what the code knew before the first jump (constants in registers) flows into the
    /// loop. Values seen later are promoted as usual. The region's cache does this when a
    /// version moves up a tier.
    pub fn respecialize(
        &self,
        key_args: &[Arg],
        tier: Tier,
        seen: &Specialized,
    ) -> Result<Specialized, Error> {
        let st = &self.state;
        if !seen.spec.specializes(&st.prog) && !seen.spec.specializes(&st.optimizing) {
            return Err(Error::Arguments(format!(
                "`seen` is not a specialization of region `{}`",
                self.name()
            )));
        }
        let (key, slices) = self.key_of(key_args)?;
        let prog = match tier {
            Tier::Optimizing => &st.optimizing,
            Tier::Stitch | Tier::Quick => &st.prog,
        };
        let spec = self.program.inner.runtime.respecialize(
            prog.clone(),
            &key,
            slices,
            self.executor(),
            tier,
            &seen.spec,
        )?;
        Ok(self.specialized(spec))
    }

    /// The Cranelift IR of the entry unit the region's specialization on `key_args` would
    /// have, before Cranelift optimizes it (what the stitch-time optimizations left).
    pub fn entry_unit_ir(&self, key_args: &[Arg]) -> Result<String, Error> {
        let (key, slices) = self.key_of(key_args)?;
        Ok(self.program.inner.runtime.entry_unit_ir(
            self.state.optimizing.clone(),
            &key,
            slices,
            self.executor(),
        )?)
    }

    /// The region compiled without specialization (its generic code).
    pub fn generic(&self) -> Result<Arc<Specialized>, Error> {
        if let Some(g) = self.state.generic.get() {
            return Ok(g.clone());
        }
        let spec = self
            .program
            .inner
            .runtime
            .generic(self.state.id.as_u32() as usize)?;
        let g = Arc::new(Specialized::new(spec, self.params().to_vec()));
        Ok(self.state.generic.get_or_init(|| g).clone())
    }

    /// Calls the region with all its arguments: the version for the key arguments' values
    /// is taken from the region entry's cache, or made and cached, as the entry's caching
    /// policy says ([`Caching`]).
    ///
    /// The cache key is computed on every call without allocating: a scalar run-time
    /// constant is its word; a static slice is its length and a hash of its contents, and a
    /// hit compares the contents with the copy the specialization was made for. So a
    /// caller may change a slice's contents between calls and get code specialized to the
    /// new contents (correct by default), at a cost linear in the slice's length per call.
    /// A caller that knows the contents do not change can use `cache_all_unchecked`, or
    /// keep the [`Specialized`] handle of [`Region::specialize`] and call it directly.
    ///
    /// The cache is bounded ([`runtime::Limits`]): past `max_versions` versions of this
    /// entry a new key runs the generic code; past the program's `max_specializations` or
    /// `max_code_bytes` the least recently used versions of any region are evicted (their
    /// code freed once no call can still be running it). A specialization that runs out of
    /// budget runs the generic code instead under [`OnExceeded::Fallback`] (the default).
    #[inline]
    pub fn call(&self, args: &mut [Arg]) -> Result<Option<Const>, Error> {
        let st = &*self.state;
        if st.caching == Caching::OneUnchecked && args.len() == st.params.len() {
            // The one version, optimized: a pin, a load, a count and the call.
            let guard = epoch::pin();
            let now = 2 * self.program.inner.tick.load(Ordering::Relaxed) + 1;
            if let Some(Version::Spec(v)) = st.cache.get(&[], now, &guard) {
                if v.tier() == Tier::Optimizing && !v.may_move(st) {
                    st.counters.hits.bump();
                    return v.call_at(args, &st.values);
                }
            }
        }
        self.call_cached(args)
    }

    /// [`Region::call`] for every policy and version.
    #[inline(never)]
    fn call_cached(&self, args: &mut [Arg]) -> Result<Option<Const>, Error> {
        let params = self.params();
        if args.len() != params.len() {
            return Err(Error::Arguments(format!(
                "{} expected ({}), {} given",
                count(params.len(), "argument"),
                list(params),
                args.len()
            )));
        }
        let st = &*self.state;
        let keys = &st.keys;
        let mut key = Words::new();
        for &k in keys {
            if st.caching == Caching::OneUnchecked {
                // Key arguments are neither read nor passed to the code.
                break;
            }
            check(&args[k], params[k], || format!("argument {k}"))?;
            match (&args[k], st.caching) {
                (_, Caching::OneUnchecked | Caching::Replicate) => {}
                (Arg::Scalar(c), _) => key.push(const_to_word(*c)),
                (Arg::Slice(s), Caching::AllUnchecked) => {
                    key.push(s.ptr as u64);
                    key.push(s.len as u64);
                }
                (Arg::Slice(s), _) => {
                    key.push(s.len as u64);
                    key.push(hash_bytes(s.bytes()));
                }
            }
        }
        // Pinned for the whole call: a version evicted meanwhile is freed only after.
        let guard = epoch::pin();
        if st.caching != Caching::Replicate {
            let now = 2 * self.program.inner.tick.load(Ordering::Relaxed) + 1;
            if let Some(v) = st.cache.get(key.as_slice(), now, &guard) {
                if !st.caching.checked() || self.fits(v, args) {
                    st.counters.hits.bump();
                    if let Version::Spec(first) = v {
                        if first.tier() != Tier::Optimizing || first.may_move(st) {
                            if self.restitch_due(first) {
                                return self.restitch(first, key.as_slice(), args, &guard);
                            }
                            if self.hot(first) {
                                return self.tier_up(first, key.as_slice(), args, &guard);
                            }
                            let t = Instant::now();
                            let r = first.call_at(args, &st.values);
                            first.run_ns.fetch_add(
                                t.elapsed().as_nanos().try_into().unwrap_or(u64::MAX),
                                Ordering::Relaxed,
                            );
                            if let Err(e) = &r {
                                self.check_lazy_budget(first, key.as_slice(), e, &guard);
                            }
                            return r;
                        }
                    }
                    return self.run_cached(v, key.as_slice(), args, &guard);
                }
            }
        }
        st.counters.misses.fetch_add(1, Ordering::Relaxed);
        self.miss(args, key.as_slice(), &guard)
    }

    /// Whether version `v` was made for the contents of `args`' static slices (a hit keyed
    /// by a slice's hash is checked against the contents it was made for).
    fn fits(&self, v: &Version, args: &[Arg]) -> bool {
        match v {
            Version::Spec(spec) => {
                !self.state.slice_keys
                    || self.state.keys.iter().all(|&k| match &args[k] {
                        Arg::Slice(s) => spec.spec.static_slice_bytes(k) == Some(s.bytes()),
                        Arg::Scalar(_) => true,
                    })
            }
            Version::Generic => true,
        }
    }

    /// Runs version `v` on all of the region's arguments.
    fn run(&self, v: &Version, args: &mut [Arg]) -> Result<Option<Const>, Error> {
        match v {
            Version::Spec(s) => s.call_at(args, &self.state.values),
            Version::Generic => self.generic()?.call(args),
        }
    }

    /// Runs version `v`, cached for `key` (see [`Region::check_lazy_budget`]).
    fn run_cached(
        &self,
        v: &Version,
        key: &[u64],
        args: &mut [Arg],
        guard: &Guard,
    ) -> Result<Option<Const>, Error> {
        let r = self.run(v, args);
        if let (Version::Spec(s), Err(e)) = (v, &r) {
            self.check_lazy_budget(s, key, e, guard);
        }
        r
    }

    /// After a call of `v`, the version cached for `key`, failed with `e`: if a unit
    /// stitched while it ran (a promotion's continuation, a lazily stitched block) ran out
    /// of its budget, and the runtime falls back on budgets ([`OnExceeded::Fallback`]),
    /// the key's calls run the generic code from now on, as they do when the key's entry
    /// unit runs out: the call that met it returns the budget error (the code that ran
    /// before may have written to its slices, so it cannot start again), and the next
    /// ones do not stitch the same unit again only to fail again.
    fn check_lazy_budget(&self, v: &Arc<Specialized>, key: &[u64], e: &Error, guard: &Guard) {
        let inner = &*self.program.inner;
        if !matches!(e, Error::Run(e) if e.is_budget())
            || inner.runtime.options().limits.on_exceeded != OnExceeded::Fallback
        {
            return;
        }
        let st = &*self.state;
        if !self.still_cached(v, key, guard) {
            return;
        }
        st.cache.remove(key, guard);
        let hosts_gen = inner.hosts_gen.load(Ordering::SeqCst);
        let _ = self
            .program
            .cache_version(st, key, Version::Generic, hosts_gen, guard);
        st.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(region = %self.name(), "a lazy unit's budget exceeded: generic code for this key");
    }

    /// The generic code, run because a limit or budget was reached.
    fn fall_back(&self, args: &mut [Arg], why: &str) -> Result<Option<Const>, Error> {
        self.state
            .counters
            .fallbacks
            .fetch_add(1, Ordering::Relaxed);
        tracing::debug!(region = %self.name(), why, "running generic code");
        self.generic()?.call(args)
    }

    /// A call whose version was not cached: specializes (once per key, even when threads
    /// race), caches as the policy says, evicts what the limits require, and runs.
    fn miss(&self, args: &mut [Arg], key: &[u64], guard: &Guard) -> Result<Option<Const>, Error> {
        let st = &*self.state;
        let inner = &*self.program.inner;
        let limits = inner.runtime.options().limits;
        let mut _claim = None;
        if st.caching != Caching::Replicate {
            loop {
                let now = 2 * inner.tick.load(Ordering::Relaxed) + 1;
                if let Some(v) = st.cache.get(key, now, guard) {
                    if !st.caching.checked() || self.fits(v, args) {
                        return self.run(v, args);
                    }
                }
                if !st.caching.single() && st.cache.len() >= limits.max_versions {
                    return self.fall_back(args, "the region entry has its maximum of versions");
                }
                // Claim the key, or wait for the thread that has and look again. (Waiters
                // of every key share one condition: one that wakes for another key's
                // landing waits again.)
                let mut in_flight = st.in_flight.lock();
                if in_flight.contains_key(key) {
                    while let Some(waited) = in_flight.get_mut(key) {
                        *waited = true;
                        st.landed.wait(&mut in_flight);
                    }
                } else {
                    in_flight.insert(smallvec::SmallVec::from_slice(key), false);
                    _claim = Some(Claim { st, key });
                    break;
                }
            }
        }
        let hosts_gen = inner.hosts_gen.load(Ordering::SeqCst);
        let specialized = {
            let key_args: KeyArgs = st.keys.iter().map(|&k| reborrow(&args[k])).collect();
            self.specialize_in(&key_args, inner.runtime.options().tiers.first)
        };
        let version = match specialized {
            Ok(s) => {
                let c = &st.counters;
                c.specializations.fetch_add(1, Ordering::Relaxed);
                c.stitch_ns
                    .fetch_add(s.stats().stitch_ns, Ordering::Relaxed);
                c.compile_ns
                    .fetch_add(s.stats().compile_ns, Ordering::Relaxed);
                tracing::debug!(
                    region = %self.name(),
                    code_bytes = s.code_bytes(),
                    stitch_ns = s.stats().stitch_ns,
                    compile_ns = s.stats().compile_ns,
                    "specialized"
                );
                Version::Spec(Arc::new(s))
            }
            Err(e @ Error::Budget { .. }) if limits.on_exceeded == OnExceeded::Fallback => {
                st.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(region = %self.name(), error = %e, "budget exceeded: generic code for this key");
                Version::Generic
            }
            Err(e) => return Err(e),
        };
        if st.caching == Caching::Replicate {
            return self.run(&version, args);
        }
        match self
            .program
            .cache_version(st, key, version, hosts_gen, guard)
        {
            Ok(v) => self.run_cached(v, key, args, guard),
            Err(v) => self.run(&v, args),
        }
    }

    /// Counts a call of first-tier version `v`; true for the one call that finds it hot:
    /// called [`Tiers::hot_calls`] times, or run for [`Tiers::hot_time`] in all.
    fn hot(&self, v: &Specialized) -> bool {
        let tiers = self.program.inner.runtime.options().tiers;
        let calls = v.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let ran = v.run_ns.load(Ordering::Relaxed);
        let hot = calls >= tiers.hot_calls || u128::from(ran) >= tiers.hot_time.as_nanos();
        hot && !v.tiering.swap(true, Ordering::Relaxed)
    }

    /// Specializes `quick`'s key (a version of the quick or the stitch tier, or of the
    /// optimizing tier whose promotions stitched continuation units) again in the
    /// optimizing tier, with the values its promotions saw dispatched inline from the entry
    /// ([`Region::respecialize`]), replaces `quick` in the cache (it is freed once no call
    /// still runs it) and runs the call; if that fails, `quick` goes on serving. A version
    /// of the optimizing tier whose promotions stitched nothing stays, and is not counted
    /// again.
    fn tier_up(
        &self,
        quick: &Arc<Specialized>,
        key: &[u64],
        args: &mut [Arg],
        guard: &Guard,
    ) -> Result<Option<Const>, Error> {
        let st = &*self.state;
        if quick.tier() == Tier::Optimizing && quick.lazy_stats().0 == 0 {
            return quick.call_at(args, &st.values);
        }
        let hosts_gen = self.program.inner.hosts_gen.load(Ordering::SeqCst);
        let optimized = match self.remake(quick, Tier::Optimizing, args) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(region = %self.name(), error = %e, "tier-up failed");
                return quick.call_at(args, &st.values);
            }
        };
        // (Made again with what its promotions saw: it does not move again.)
        optimized.tiering.store(true, Ordering::Relaxed);
        let c = &st.counters;
        c.tier_ups.fetch_add(1, Ordering::Relaxed);
        c.specializations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(region = %self.name(), code_bytes = optimized.code_bytes(), "tiered up");
        self.replace(quick, optimized, key, hosts_gen, args, guard)
    }

    /// The key of cached version `old` (the key arguments among `args`) made again in
    /// `tier` from what `old`'s promotions saw ([`Region::respecialize`]: nothing, the
    /// same as a fresh specialization; else those values dispatched inline from the
    /// entry, whether its promotions stitched units or it was made again with them).
    fn remake(&self, old: &Specialized, tier: Tier, args: &[Arg]) -> Result<Specialized, Error> {
        let key_args: KeyArgs = self
            .state
            .keys
            .iter()
            .map(|&k| reborrow(&args[k]))
            .collect();
        self.respecialize(&key_args, tier, old)
    }

    /// Whether first-tier version `v` is to be stitched again, by this call: its entry
    /// unit or a unit its promotions stitched copied stencils in place of ones not made
    /// then ([`Misses::Background`]), the library's worker has made every stencil wanted
    /// since, no other call has claimed it (to stitch it again, or to move it up: the
    /// claim is both, so that a version is not both stitched again and moved up, the new
    /// version moving up again later), and its key has been stitched again fewer
    /// than [`MAX_RESTITCHES`] times (a unit that falls back leaves other words in
    /// registers, so the units after it may miss other stencils: the interpreter's
    /// programs take three rounds).
    fn restitch_due(&self, v: &Specialized) -> bool {
        let runtime = &self.program.inner.runtime;
        v.tier() == Tier::Stitch
            && v.restitched < MAX_RESTITCHES
            && v.fallbacks() > 0
            && runtime.options().stencil_misses == Misses::Background
            && runtime.stencils_pending() == 0
            && !v.restitching.swap(true, Ordering::Relaxed)
            && !v.tiering.swap(true, Ordering::Relaxed)
    }

    /// Stitches `old`'s key again, now that the stencils its units missed are made, with
    /// what its promotions saw dispatched inline from the entry (see [`Region::remake`]),
    /// replaces `old` in the cache (it is freed once no call still runs it; the new
    /// version carries on its calls and running time toward moving up) and runs the call;
    /// if that fails, `old` goes on serving.
    fn restitch(
        &self,
        old: &Arc<Specialized>,
        key: &[u64],
        args: &mut [Arg],
        guard: &Guard,
    ) -> Result<Option<Const>, Error> {
        let st = &*self.state;
        let hosts_gen = self.program.inner.hosts_gen.load(Ordering::SeqCst);
        let mut new = match self.remake(old, Tier::Stitch, args) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(region = %self.name(), error = %e, "stitching again failed");
                // (It may still move up.)
                old.tiering.store(false, Ordering::Relaxed);
                return old.call_at(args, &st.values);
            }
        };
        new.restitched = old.restitched + 1;
        for (n, o) in [(&new.calls, &old.calls), (&new.run_ns, &old.run_ns)] {
            n.store(o.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        st.counters.restitches.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(region = %self.name(), fallbacks = new.fallbacks(), "stitched again");
        self.replace(old, new, key, hosts_gen, args, guard)
    }

    /// Counts the time `new` took (a version made again for `key` in place of `old`),
    /// replaces `old` with it in the cache if `old` is still there (eviction may have come
    /// first), and runs the call.
    fn replace(
        &self,
        old: &Arc<Specialized>,
        new: Specialized,
        key: &[u64],
        hosts_gen: u64,
        args: &mut [Arg],
        guard: &Guard,
    ) -> Result<Option<Const>, Error> {
        let st = &*self.state;
        let c = &st.counters;
        c.stitch_ns
            .fetch_add(new.stats().stitch_ns, Ordering::Relaxed);
        c.compile_ns
            .fetch_add(new.stats().compile_ns, Ordering::Relaxed);
        if !self.still_cached(old, key, guard) {
            return new.call_at(args, &st.values);
        }
        st.cache.remove(key, guard);
        match self
            .program
            .cache_version(st, key, Version::Spec(Arc::new(new)), hosts_gen, guard)
        {
            Ok(v) => self.run_cached(v, key, args, guard),
            Err(v) => self.run(&v, args),
        }
    }

    /// Whether `v` is still the version cached for `key` (eviction, or another call
    /// replacing it, may have come first).
    fn still_cached(&self, v: &Arc<Specialized>, key: &[u64], guard: &Guard) -> bool {
        let now = 2 * self.program.inner.tick.load(Ordering::Relaxed) + 1;
        matches!(self.state.cache.get(key, now, guard), Some(Version::Spec(c)) if Arc::ptr_eq(c, v))
    }

    /// The region's name.
    pub fn name(&self) -> &str {
        &self.program.inner.module.funcs[self.state.id].name
    }

    /// What this region's entry did so far and what it keeps now.
    pub fn stats(&self) -> RegionStats {
        let st = &*self.state;
        let c = &st.counters;
        let mut code_bytes = 0;
        {
            // Versions are cached and evicted under this lock: the sum is a consistent one.
            let _evicting = self.program.inner.evicting.lock();
            st.cache.for_each(|_, v, _| code_bytes += v.code_bytes());
        }
        RegionStats {
            hits: c.hits.sum(),
            misses: c.misses.load(Ordering::Relaxed),
            specializations: c.specializations.load(Ordering::Relaxed),
            tier_ups: c.tier_ups.load(Ordering::Relaxed),
            restitches: c.restitches.load(Ordering::Relaxed),
            evictions: c.evictions.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            stitch_ns: c.stitch_ns.load(Ordering::Relaxed),
            compile_ns: c.compile_ns.load(Ordering::Relaxed),
            versions: st.cache.len(),
            code_bytes,
        }
    }

    /// What the promotion sites of the versions cached now did, per site, summed over the
    /// versions by promotion block.
    pub fn site_stats(&self) -> Vec<runtime::SiteStats> {
        let mut by_block: Vec<runtime::SiteStats> = Vec::new();
        self.state.cache.for_each(|_, v, _| {
            if let Version::Spec(s) = v {
                for site in s.site_stats() {
                    match by_block.iter_mut().find(|b| b.block == site.block) {
                        Some(b) => {
                            b.calls += site.calls;
                            b.stitched += site.stitched;
                            b.cached += site.cached;
                        }
                        None => by_block.push(site),
                    }
                }
            }
        });
        by_block
    }

    /// The caching policy of the region entry.
    pub fn caching(&self) -> Caching {
        self.state.caching
    }

    /// Number of cached versions.
    pub fn cached(&self) -> usize {
        self.state.cache.len()
    }

    /// Calls the region (through the cache, or its generic code if `generic`) on the
    /// interpreter's values: slices are buffers of `mem`, which receives what the code
    /// stores. This runs compiled code on the same inputs as [`crate::interp`].
    pub fn call_values(
        &self,
        args: &[Val],
        mem: &mut Memory,
        generic: bool,
    ) -> Result<Option<Const>, Error> {
        // Each buffer as bytes in its element layout, in 8-byte words (aligned for all).
        let mut storage: Vec<Vec<u64>> = mem
            .bufs
            .iter()
            .map(|b| {
                let size = dyc_templates::clif::elem_size(b.elem) as usize;
                let mut words = vec![0u64; (b.data.len() * size).div_ceil(8).max(1)];
                let bytes = bytes_mut(&mut words);
                for (k, &c) in b.data.iter().enumerate() {
                    bytes[k * size..(k + 1) * size]
                        .copy_from_slice(&const_to_word(c).to_le_bytes()[..size]);
                }
                words
            })
            .collect();
        let r = {
            let mut call_args: Vec<Arg> = Vec::new();
            for a in args {
                call_args.push(match a {
                    Val::Scalar(c) => Arg::Scalar(*c),
                    Val::Array(_) => {
                        return Err(Error::Arguments("an array cannot be an argument".into()))
                    }
                    Val::Slice(s) => {
                        let b = mem
                            .bufs
                            .get(s.buf)
                            .ok_or_else(|| Error::Arguments("a slice without a buffer".into()))?;
                        Arg::Slice(SliceArg {
                            elem: b.elem,
                            ptr: storage[s.buf].as_mut_ptr() as *const u8,
                            len: b.data.len(),
                            mutable: s.mutable,
                            _borrow: PhantomData,
                        })
                    }
                });
            }
            if generic {
                self.generic()?.call(&mut call_args)
            } else {
                self.call(&mut call_args)
            }
        };
        for (b, words) in mem.bufs.iter_mut().zip(storage.iter_mut()) {
            let size = dyc_templates::clif::elem_size(b.elem) as usize;
            let bytes = bytes_mut(words);
            for (k, c) in b.data.iter_mut().enumerate() {
                let mut w = [0u8; 8];
                w[..size].copy_from_slice(&bytes[k * size..(k + 1) * size]);
                *c = runtime::word_to_const(u64::from_le_bytes(w), b.elem);
            }
        }
        r
    }
}

/// The bytes of a word buffer.
fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: `u64` has no padding and every byte pattern is valid for `u8`; the length is
    // the buffer's size in bytes, and the borrow is tied to `words`.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) }
}

/// A shallow copy of an argument for an inner call (the original stays borrowed).
fn reborrow<'b>(a: &'b Arg) -> Arg<'b> {
    match a {
        Arg::Scalar(c) => Arg::Scalar(*c),
        Arg::Slice(s) => Arg::Slice(SliceArg {
            elem: s.elem,
            ptr: s.ptr,
            len: s.len,
            mutable: s.mutable,
            _borrow: PhantomData,
        }),
    }
}

/// A call's key arguments, inline for up to four.
type KeyArgs<'a> = smallvec::SmallVec<[Arg<'a>; 4]>;

/// A key's static values, inline for up to four.
type KeyVals = smallvec::SmallVec<[SVal; 4]>;

/// `0, 1, 2, ...`: the positions of the arguments of a specialization's own call.
static IDENTITY: [usize; 64] = {
    let mut a = [0; 64];
    let mut i = 0;
    while i < 64 {
        a[i] = i;
        i += 1;
    }
    a
};

/// Specialized (or generic) code of a region, called with the dynamic arguments.
pub struct Specialized {
    spec: Specialization,
    params: Vec<Type>,
    /// `0..params.len()`: where [`Specialized::call`] finds each argument (a slice of
    /// [`IDENTITY`] unless there are more parameters).
    positions: Cow<'static, [usize]>,
    /// Calls through a region entry's cache, counted while in a first tier, the time
    /// they took together, and whether one of them has moved the version up.
    calls: AtomicU64,
    run_ns: AtomicU64,
    tiering: AtomicBool,
    /// How many times its key was stitched again before it because units had copied
    /// stencils in place of missing ones, and whether a call has claimed stitching it
    /// again (see `Region::restitch`).
    restitched: u32,
    restitching: AtomicBool,
}

impl Specialized {
    fn new(spec: Specialization, params: Vec<Type>) -> Specialized {
        let n = params.len();
        Specialized {
            spec,
            positions: match IDENTITY.get(..n) {
                Some(p) => Cow::Borrowed(p),
                None => Cow::Owned((0..n).collect()),
            },
            params,
            calls: AtomicU64::new(0),
            run_ns: AtomicU64::new(0),
            tiering: AtomicBool::new(false),
            restitched: 0,
            restitching: AtomicBool::new(false),
        }
    }

    /// The tier its code is compiled in.
    #[inline]
    pub fn tier(&self) -> Tier {
        self.spec.tier()
    }

    /// Whether this version of the optimizing tier, in a region with promotion points,
    /// may still be made again once hot (counted through the region's cache until then).
    #[inline]
    fn may_move(&self, st: &RegionState) -> bool {
        st.promotes && !self.tiering.load(Ordering::Relaxed)
    }

    /// What each promotion site of this specialization did so far.
    pub fn site_stats(&self) -> Vec<runtime::SiteStats> {
        self.spec.site_stats()
    }

    /// Types of the arguments [`Specialized::call`] takes.
    pub fn params(&self) -> &[Type] {
        &self.params
    }

    /// What making this specialization's entry unit cost.
    pub fn stats(&self) -> dyc_stitcher::runtime::UnitStats {
        self.spec.stats
    }

    /// Bytes of machine code this specialization owns (its units and wrapper).
    pub fn code_bytes(&self) -> usize {
        self.spec.code_bytes()
    }

    /// How many continuation units promotions have stitched so far, and what they cost
    /// together (the entry unit's cost is [`Specialized::stats`]).
    pub fn lazy_stats(&self) -> (usize, dyc_stitcher::runtime::UnitStats) {
        self.spec.lazy_stats()
    }

    /// How many stencil copies of its code so far (its entry unit's and its promotions'
    /// units') were of a variant made ahead in place of one the library had not made yet
    /// ([`Misses::Background`]). Such code is correct but slower; a region's cache stitches
    /// such a version again once the library's worker has made what it missed. A
    /// specialization made with [`Region::specialize_in`] keeps its code: make it again
    /// after [`crate::settle_stencils`] if this is not 0.
    pub fn fallbacks(&self) -> usize {
        self.spec.fallbacks()
    }

    /// Calls the code; arguments are checked against [`Specialized::params`].
    pub fn call(&self, args: &mut [Arg]) -> Result<Option<Const>, Error> {
        if args.len() != self.params.len() {
            return Err(Error::Arguments(format!(
                "{} expected ({}), {} given",
                count(self.params.len(), "argument"),
                list(&self.params),
                args.len()
            )));
        }
        self.call_at(args, &self.positions)
    }

    /// Calls the code with the arguments at `positions` of `args`, one per parameter
    /// (a region's call leaves its key arguments out; the caller checked the length of
    /// `args`), without allocating for up to [`INLINE_WORDS`] argument words. Not inlined:
    /// a region's cache hit and [`Specialized::call`] run the same code after the lookup.
    #[inline(never)]
    fn call_at(&self, args: &[Arg], positions: &[usize]) -> Result<Option<Const>, Error> {
        // Not `Words`: a `SmallVec` leaves its inline words uninitialized, which measured
        // about 5 ns less per call (`benches/cache.rs`); key building is the other way round.
        let mut words = smallvec::SmallVec::<[u64; INLINE_WORDS]>::new();
        for (k, &i) in positions.iter().enumerate() {
            let a = &args[i];
            check(a, self.params[k], || format!("argument {i}"))?;
            match a {
                Arg::Scalar(c) => words.push(const_to_word(*c)),
                Arg::Slice(s) => {
                    words.push(s.ptr as u64);
                    words.push(s.len as u64);
                }
            }
        }
        // SAFETY: every argument was checked against its parameter type; slice arguments
        // come from live Rust slices of the right element type, borrowed mutably when the
        // parameter is `[mut T]` (so nothing else accesses them during the call).
        let w = unsafe { self.spec.call_words(words.as_slice()) }.map_err(Error::Run)?;
        Ok(self
            .spec
            .ret
            .and_then(|t| t.scalar())
            .map(|s| runtime::word_to_const(w, s)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gen::{cases, func, Rng};
    use crate::interp::{ErrorKind, Interpreter};
    use crate::ir::Module;
    use dyc_stitcher::ge::Budget;

    /// Host functions for checked modules: those of the generator and of the test
    /// programs, each registered if the module declares it.
    fn register_hosts(p: &Program) {
        let word = |a: &[Const]| a[0].as_u64().unwrap_or(0);
        for (_, e) in p.module().externs.iter() {
            let _ = match e.name.as_str() {
                "hash" => p.register_host("hash", move |a| {
                    Ok(Some(Const::Int(
                        Scalar::I64,
                        word(a).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17),
                    )))
                }),
                "fmix" => p.register_host("fmix", |a| {
                    Ok(Some(Const::F64(
                        a[0].as_f64().unwrap_or(0.0) * 0.5 + a[1].as_f64().unwrap_or(0.0),
                    )))
                }),
                "double" => p.register_host("double", move |a| {
                    Ok(Some(Const::Int(Scalar::I64, word(a).wrapping_mul(2))))
                }),
                "fail" => p.register_host("fail", |_| Err("the host refused".into())),
                name => p.register_host(name, |_| Ok(None)),
            };
        }
    }

    /// The interpreter's hosts matching [`register_hosts`].
    fn interp_hosts() -> crate::interp::HostFns {
        let mut h = func::hosts();
        h.register("double", |a| {
            Ok(Some(Const::Int(
                Scalar::I64,
                a[0].as_u64().unwrap_or(0).wrapping_mul(2),
            )))
        });
        h.register("fail", |_| Err("the host refused".into()));
        h.register("log_value", |_| Ok(None));
        h
    }

    /// Whether a compiled run ended on a specialization budget, eagerly or in a lazy
    /// promotion.
    fn is_budget(r: &Result<Option<Const>, Error>) -> bool {
        match r {
            Err(Error::Budget { .. }) => true,
            Err(Error::Run(e)) => e.is_budget(),
            _ => false,
        }
    }

    /// What [`differential`] did.
    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct Tally {
        /// Compiled runs compared with the interpreter.
        pub compared: usize,
        /// Regions with key parameters.
        pub keyed: usize,
        /// Compiled runs that ended on a budget (not compared).
        pub budget: usize,
        /// Compiled runs compared of functions that declare a local array.
        pub arrays: usize,
    }

    /// Runs every function of `m` on `inputs` random inputs in the interpreter and as
    /// compiled code (specialized through the region cache, and generic), and checks they
    /// agree on results, errors (kind and position) and memory. Only budget errors are not
    /// compared (and counted); any other error of the library fails.
    /// Runs compared by [`differential`] so far, in every test, and what the last one was;
    /// a thread started by the first call ends the process if the count stops for two
    /// minutes (compiled code that runs forever fails the tests instead of hanging them).
    static PROGRESS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static RUNNING: parking_lot::Mutex<String> = parking_lot::Mutex::new(String::new());

    fn watchdog() {
        static START: std::sync::Once = std::sync::Once::new();
        START.call_once(|| {
            std::thread::spawn(|| {
                let mut last = u64::MAX;
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(120));
                    let now = PROGRESS.load(std::sync::atomic::Ordering::Relaxed);
                    if now == last {
                        eprintln!("no progress for two minutes: {}", RUNNING.lock());
                        std::process::exit(101);
                    }
                    last = now;
                }
            });
        });
    }

    pub(crate) fn differential(m: &Module, rng: &mut Rng, inputs: usize, what: &str) -> Tally {
        watchdog();
        let mut tally = Tally::default();
        let opts = RuntimeOptions {
            // Half of the modules run without fuel, as programs do by default: fuel checks
            // give every block code, which hides how blocks without code are laid out. A
            // run is compared only if the interpreter finished it within its fuel, so the
            // code finishes too unless it is wrong (see `watchdog`).
            fuel: match rng.below(2) {
                0 => None,
                _ => Some(20_000),
            },
            max_depth: 49,
            budget: Budget {
                max_blocks: 300,
                max_ops: 20_000,
                max_units: 50,
            },
            // Budget errors are compared out, not run as generic code.
            limits: runtime::Limits {
                on_exceeded: OnExceeded::Error,
                ..runtime::Limits::default()
            },
            // A third of the modules specialize in the quick tier and a third in the
            // stitch tier, moving up after a few calls.
            tiers: runtime::Tiers {
                first: match rng.below(3) {
                    0 => Tier::Quick,
                    1 => Tier::Stitch,
                    _ => Tier::Optimizing,
                },
                hot_calls: 3,
                ..runtime::Tiers::default()
            },
            // Half of the modules keep every local array in memory.
            max_array_values: match rng.below(2) {
                0 => 0,
                _ => dyc_stitcher::ge::MAX_ARRAY_VALUES,
            },
            // Stencils not made ahead: made by the worker thread meanwhile, made at once,
            // or never (every unit copies the variants made ahead instead).
            stencil_misses: match rng.below(3) {
                0 => runtime::Misses::Background,
                1 => runtime::Misses::Make,
                _ => runtime::Misses::Fallback,
            },
            ..RuntimeOptions::default()
        };
        // Unchecked caching lets a call with another key run the first key's code (the
        // caller's promise, tested in `tests/policies.rs`): the random inputs here break
        // that promise, so those policies are dropped.
        let mut checked = m.clone();
        for f in checked.funcs.values_mut() {
            for data in f.insts.values_mut() {
                if let InstData::MakeStatic { policies, .. } = data {
                    use crate::ir::Policy;
                    let kept: Vec<Policy> = policies
                        .iter()
                        .filter(|p| {
                            !matches!(p, Policy::CacheAllUnchecked | Policy::CacheOneUnchecked)
                        })
                        .collect();
                    *policies = crate::ir::Policies::new(&kept).expect("a subset");
                }
            }
        }
        let p = Program::from_module(checked, opts).expect("program");
        register_hosts(&p);
        for (id, f) in m.funcs.iter() {
            let region = match p.region(&f.name) {
                Ok(r) => r,
                Err(Error::Unsupported(_)) => continue,
                Err(e) => panic!("{what}, {}: {e}", f.name),
            };
            if !region.key_params().is_empty() {
                tally.keyed += 1;
            }
            let has_array = f
                .insts
                .values()
                .any(|d| matches!(d, crate::ir::InstData::ArrayNew { .. }));
            for _ in 0..inputs {
                let mut mem = Memory::default();
                let args = crate::gen::tests::random_args(rng, &f.sig.params, &mut mem);
                let original = mem.clone();
                let mut interp = Interpreter::new(m);
                interp.hosts = interp_hosts();
                interp.fuel = 20_000;
                interp.max_depth = 50;
                let expected = interp.call(id, &args, &mut mem);
                if matches!(&expected, Err(e) if e.kind == ErrorKind::FuelExhausted) {
                    continue;
                }
                for generic in [false, true] {
                    let mut mem2 = original.clone();
                    *RUNNING.lock() = format!("{what}, {} (generic: {generic})", f.name);
                    PROGRESS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let got = region.call_values(&args, &mut mem2, generic);
                    // A user-annotated loop that unrolls, or a promotion that takes new
                    // values, without bound: the budget error is the expected outcome.
                    // Every other error (code generation, internal) fails the test.
                    if is_budget(&got) {
                        tally.budget += 1;
                        continue;
                    }
                    let same_mem = format!("{mem:?}") == format!("{mem2:?}");
                    let same = match (&expected, &got) {
                        (Ok(Some(Val::Scalar(a))), Ok(Some(b))) => {
                            format!("{a:?}") == format!("{b:?}")
                        }
                        (Ok(None), Ok(None)) => true,
                        (Err(a), Err(Error::Run(b))) => {
                            a.kind.name() == b.kind.name() && a.loc == b.loc
                        }
                        _ => false,
                    };
                    assert!(
                        same && same_mem,
                        "{what}, {} (generic: {generic}): interpreter {expected:?}, compiled {got:?}\n{}",
                        f.name,
                        crate::ir::printer::print_module(m)
                    );
                    tally.compared += 1;
                    tally.arrays += usize::from(has_array);
                }
            }
        }
        tally
    }

    /// Random valid programs with annotations, several inputs each: the interpreter on the
    /// original and the compiled code (specialized and generic) agree on results, errors
    /// (kind and position) and memory.
    #[test]
    fn compiled_code_agrees_with_the_interpreter_on_random_programs() {
        let (mut compared, mut keyed, mut budget, mut arrays) = (0, 0, 0, 0);
        for seed in 0..cases(300) {
            let _seed = crate::gen::SeedGuard(seed);
            let mut rng = Rng::new(seed);
            let m = func::module(&mut rng, &func::Config::default());
            let t = differential(&m, &mut rng, 3, &format!("seed {seed}"));
            compared += t.compared;
            keyed += t.keyed;
            budget += t.budget;
            arrays += t.arrays;
        }
        let total = cases(300) as usize;
        assert!(compared >= 2 * total, "only {compared} runs compared");
        println!(
            "{compared} compared ({arrays} with local arrays), {budget} over budget, {keyed} keyed regions"
        );
        assert!(
            arrays * 5 >= compared,
            "only {arrays} of {compared} runs compared had local arrays"
        );
        // Most runs are compared: budget errors stay a small minority.
        assert!(
            budget * 10 <= compared,
            "{budget} budget errors for {compared} runs compared"
        );
        assert!(
            keyed * 10 >= total,
            "only {keyed} regions had key parameters"
        );
    }
}

//! Differential tests on mutants of real programs: every `tests/lang` program and example
//! (with the tests' own host functions), mutated by deleting short spans and inserting
//! statements and expression fragments (annotations among them). The front end must
//! answer every mutant with a program or diagnostics, never a panic; each mutant that
//! compiles is run with random arguments by the reference interpreter and through each
//! function's region cache (a random first tier, moving up at its third call, local arrays
//! in memory or as values, and for a third of the programs limits so small that keys
//! evict each other), three calls per set of arguments, for a quarter of the programs
//! from three threads at once. Results, errors (kind and source position) and the
//! contents of mutable slices must agree.
//!
//! The random programs of the library's own properties are built from a grammar; mutants
//! keep the shapes people write (interpreter loops, promotions, labelled loops, `goto`)
//! and break them in ways no grammar would.
//!
//! `DYC_PROPTEST_CASES` sets the number of mutants (default 1,000); a long run:
//! `DYC_PROPTEST_CASES=50000 cargo test --release --test mutants` (about 90 s).

mod common;

use std::path::Path;

use common::Rng;
use dyc::interp::{parse_args, ErrorKind, Interpreter, Memory, Val};
use dyc::ir::{Const, Module, Scalar, Type};
use dyc::{Arg, Limits, Program, RuntimeOptions, Tier, Tiers};

/// What a mutation inserts.
const FRAGMENTS: &[&str] = &[
    "make_static(x);",
    "make_static(i);",
    "make_static(n);",
    "make_dynamic(i);",
    ")",
    "(",
    ";",
    "+ 1",
    "* 3",
    "- x",
    " as u8",
    " as i64",
    "!",
    "0",
    "1",
    "-1",
    "if x > 0 { x = x - 1; }",
    "x = x + 1;",
    "i += 1;",
    "n = n / 2;",
    "&& true",
    "|| false",
    "==",
    "<",
    "%",
    "/",
    "<<",
    ">>",
];

const FUEL: u64 = 200_000;

/// The corpus: every test program and example (host functions are the tests' own,
/// [`common::HOSTS`]).
fn corpus() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = common::files(&root.join("tests/lang"), "dyc");
    files.extend(common::files(&root.join("examples"), "dyc"));
    files
        .iter()
        .map(|p| std::fs::read_to_string(p).expect("readable"))
        .collect()
}

fn mutate(rng: &mut Rng, base: &str) -> String {
    let mut s = base.as_bytes().to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(s.len() as u64 + 1) as usize;
        match rng.below(3) {
            0 => {
                let end = (at + rng.below(8) as usize).min(s.len());
                s.drain(at..end);
            }
            _ => {
                let t = FRAGMENTS[rng.below(FRAGMENTS.len() as u64) as usize];
                s.splice(at..at, t.bytes());
            }
        }
    }
    String::from_utf8_lossy(&s).into_owned()
}

/// Random arguments for `params`, as text for the interpreter; `None` when a parameter has
/// a type these tests do not make.
fn arguments(rng: &mut Rng, params: &[Type]) -> Option<String> {
    let mut text = Vec::new();
    for t in params {
        text.push(match t {
            Type::Scalar(Scalar::I64) => (rng.below(20) as i64 - 5).to_string(),
            Type::Scalar(Scalar::I32) => (rng.below(40) as i64 - 20).to_string(),
            Type::Scalar(Scalar::U8) => rng.below(256).to_string(),
            Type::Scalar(Scalar::Bool) => (rng.below(2) == 0).to_string(),
            Type::Scalar(Scalar::F64) => format!("{:?}", rng.below(40) as f64 / 4.0 - 3.0),
            Type::Slice {
                elem: Scalar::I64, ..
            } => {
                let v: Vec<i64> = (0..rng.below(8))
                    .map(|_| rng.below(16) as i64 - 2)
                    .collect();
                format!("{v:?}")
            }
            Type::Slice {
                elem: Scalar::U8, ..
            } => {
                let v: Vec<u8> = (0..rng.below(8)).map(|_| rng.below(16) as u8).collect();
                format!("{v:?}")
            }
            _ => return None,
        });
    }
    Some(text.join(", "))
}

/// Rust storage for a slice argument of the interpreter's memory.
enum Storage {
    I64(Vec<i64>),
    U8(Vec<u8>),
}

impl Storage {
    fn of(data: &[Const], elem: Scalar) -> Storage {
        let words = data.iter().map(|c| c.as_u64().expect("an integer"));
        match elem {
            Scalar::U8 => Storage::U8(words.map(|w| w as u8).collect()),
            _ => Storage::I64(words.map(|w| w as i64).collect()),
        }
    }

    fn arg(&mut self, mutable: bool) -> Arg<'_> {
        match (self, mutable) {
            (Storage::I64(v), true) => Arg::from(&mut v[..]),
            (Storage::I64(v), false) => Arg::from(&v[..]),
            (Storage::U8(v), true) => Arg::from(&mut v[..]),
            (Storage::U8(v), false) => Arg::from(&v[..]),
        }
    }

    fn words(&self) -> Vec<u64> {
        match self {
            Storage::I64(v) => v.iter().map(|&x| x as u64).collect(),
            Storage::U8(v) => v.iter().map(|&x| u64::from(x)).collect(),
        }
    }
}

/// Whether a call ended on a specialization budget: a static variable that a dynamic
/// loop changes without bound (say, promoted inside it) unrolls that loop until the budget
/// runs out, which is an error when a lazy unit (a promotion's continuation) meets it, and
/// the generic code's result when the entry unit does. Such calls are not compared.
fn over_budget(r: &Result<Option<Const>, dyc::Error>) -> bool {
    match r {
        Err(dyc::Error::Budget { .. }) => true,
        Err(dyc::Error::Run(e)) => e.is_budget(),
        _ => false,
    }
}

/// Runs every function of `m` whose parameters these tests can make, on three sets of
/// arguments, in the interpreter and three times through its region; returns the calls
/// compared (counting in `tally` those that ended on a specialization budget, and the
/// versions evicted), or the first disagreement.
fn compare(rng: &mut Rng, m: &Module, tally: &mut Tally) -> Result<usize, String> {
    let opts = RuntimeOptions {
        fuel: Some(FUEL),
        max_depth: 39,
        tiers: Tiers {
            first: match rng.below(3) {
                0 => Tier::Stitch,
                1 => Tier::Quick,
                _ => Tier::Optimizing,
            },
            hot_calls: 2,
            ..Tiers::default()
        },
        max_array_values: match rng.below(2) {
            0 => 0,
            _ => dyc_stitcher::ge::MAX_ARRAY_VALUES,
        },
        // A third of the programs keep few versions and little code, so that keys evict
        // each other's versions (freed while other versions run) or run the generic code.
        limits: match rng.below(3) {
            0 => Limits {
                max_versions: 2,
                max_specializations: 3,
                max_code_bytes: 1 << 12,
                ..Limits::default()
            },
            _ => Limits::default(),
        },
        ..RuntimeOptions::default()
    };
    let tier = opts.tiers.first;
    let p = Program::from_module(m.clone(), opts).map_err(|e| format!("no program: {e}"))?;
    // The hosts the module declares with the signature the tests' own have (a mutant may
    // have changed a declaration: then the host stays unregistered, and calls of it are
    // errors in both).
    for (_, e) in m.externs.iter() {
        if let Some(&(name, f)) = common::HOSTS.iter().find(|(n, _)| *n == e.name) {
            let _ = p.register_host(name, f);
        }
    }
    let mut cases = Vec::new();
    for (id, f) in m.funcs.iter() {
        if p.region(&f.name).is_err() {
            continue;
        }
        for _ in 0..3 {
            let Some(text) = arguments(rng, &f.sig.params) else {
                break;
            };
            let mut mem = Memory::default();
            let Ok(args) = parse_args(&f.sig.params, &text, &mut mem) else {
                continue;
            };
            let original = mem.clone();
            let mut interp = Interpreter::new(m);
            interp.hosts = common::hosts();
            interp.fuel = FUEL;
            interp.max_depth = 40;
            let r = interp.call(id, &args, &mut mem);
            if matches!(&r, Err(e) if matches!(e.kind, ErrorKind::FuelExhausted | ErrorKind::CallDepthExceeded))
            {
                continue;
            }
            let want = (
                common::interpreted(r),
                mem.bufs.iter().map(|b| words(&b.data)).collect(),
            );
            cases.push(Case {
                name: f.name.clone(),
                text,
                args,
                original,
                want,
            });
        }
    }
    // A quarter of the programs are called from three threads at once, each going
    // through the cases from another one; the others from this thread.
    let threads = match rng.below(4) {
        0 => 3,
        _ => 1,
    };
    let outcomes: Vec<Result<(usize, usize), String>> = std::thread::scope(|scope| {
        let (p, cases) = (&p, &cases);
        let handles: Vec<_> = (0..threads)
            .map(|t| scope.spawn(move || run_cases(p, cases, t, tier)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let mut compared = 0;
    for o in outcomes {
        let (n, budget) = o?;
        compared += n;
        tally.budget += budget;
    }
    tally.evictions += m
        .funcs
        .values()
        .filter_map(|f| p.region(&f.name).ok())
        .map(|r| r.stats().evictions)
        .sum::<u64>();
    Ok(compared)
}

fn words(data: &[Const]) -> Vec<u64> {
    data.iter().map(|c| c.as_u64().expect("int")).collect()
}

/// A call to make, and what the interpreter made of it: the result or error, and the
/// slices after.
struct Case {
    name: String,
    text: String,
    args: Vec<Val>,
    original: Memory,
    want: (String, Vec<Vec<u64>>),
}

/// Makes every call of `cases` three times, starting at case `first`, through the
/// regions of `p`; returns the calls compared and those over a budget, or the first
/// disagreement.
fn run_cases(
    p: &Program,
    cases: &[Case],
    first: usize,
    tier: Tier,
) -> Result<(usize, usize), String> {
    let (mut compared, mut budget) = (0, 0);
    for k in 0..cases.len() {
        let case = &cases[(first + k) % cases.len()];
        let region = p.region(&case.name).map_err(|e| e.to_string())?;
        for call in 0..3 {
            common::progress(format!("{}({}), call {call}", case.name, case.text));
            let mut stores: Vec<Storage> = case
                .original
                .bufs
                .iter()
                .map(|b| Storage::of(&b.data, b.elem))
                .collect();
            let r = {
                let mut slots = stores.iter_mut();
                let mut jargs: Vec<Arg> = case
                    .args
                    .iter()
                    .map(|a| match a {
                        Val::Scalar(c) => Arg::Scalar(*c),
                        Val::Slice(s) => slots.next().expect("storage").arg(s.mutable),
                        Val::Array(_) => unreachable!("no parameter is an array"),
                    })
                    .collect();
                region.call(&mut jargs)
            };
            if over_budget(&r) {
                budget += 1;
                continue;
            }
            let got = (
                common::outcome(r),
                stores.iter().map(Storage::words).collect::<Vec<_>>(),
            );
            compared += 1;
            if got != case.want {
                return Err(format!(
                    "{}({}), call {call}, first tier {tier:?}:\n  interpreter: {:?}\n  code:        {got:?}",
                    case.name, case.text, case.want
                ));
            }
        }
    }
    Ok((compared, budget))
}

/// Calls not compared because they ended on a specialization budget, and versions
/// evicted.
#[derive(Default)]
struct Tally {
    budget: usize,
    evictions: u64,
}

#[test]
fn mutants_of_the_test_programs_compile_or_not_and_run_alike_everywhere() {
    common::watchdog();
    let files = corpus();
    assert!(files.len() >= 50, "only {} programs", files.len());
    let mut rng = Rng(0x0005_eed0_fa11_7e57);
    let (mut compiled, mut compared) = (0u64, 0usize);
    let mut tally = Tally::default();
    let cases = common::cases(1000);
    for case in 0..cases {
        let base = &files[rng.below(files.len() as u64) as usize];
        let src = mutate(&mut rng, base);
        let Ok(m) = dyc::lang::compile("mutant.dyc", &src) else {
            continue;
        };
        compiled += 1;
        match compare(&mut rng, &m, &mut tally) {
            Ok(n) => compared += n,
            Err(e) => panic!("mutant {case} disagrees: {e}\n--- mutant:\n{src}"),
        }
    }
    let Tally { budget, evictions } = tally;
    println!(
        "{cases} mutants, {compiled} compiled, {compared} calls compared, {budget} over budget, {evictions} versions evicted"
    );
    assert!(
        compiled * 10 >= cases,
        "only {compiled} of {cases} compiled"
    );
    assert!(
        compared as u64 >= compiled,
        "only {compared} calls compared"
    );
    assert!(budget * 20 <= compared, "{budget} calls over budget");
    assert!(cases < 1000 || evictions > 0, "no version was evicted");
}

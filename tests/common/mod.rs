#![allow(dead_code)] // Each test crate uses a part of these helpers.
//! Shared machinery of the test crates: for the file-test harnesses, expectations as
//! comment lines inside the test files and a bless mode (`DYC_BLESS=1`) that rewrites them
//! from the actual output; for the others, a thread with a small stack, a small random
//! number generator, and the outcome of a call as the differential tests compare it.

use std::path::{Path, PathBuf};

/// Files under `dir` (recursively) whose name ends with `.ext`, sorted.
pub fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, ext, &mut out);
    out
}

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, ext, out);
        } else if p.extension().is_some_and(|e| e == ext) {
            out.push(p);
        }
    }
}

/// The text after `COMMENT KEY` on every line that has it: one space after the key is
/// dropped, the rest (indentation included) is kept.
pub fn directive<'a>(src: &'a str, comment: &str, key: &str) -> Vec<&'a str> {
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix(comment).map(str::trim_start))
        .filter_map(|l| l.strip_prefix(key))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect()
}

/// Runs `run` on every file and compares its output with the file's `COMMENT check:`
/// lines; with `DYC_BLESS=1`, rewrites them instead. Panics listing every failure.
pub fn run_suite(
    root: &Path,
    ext: &str,
    comment: &str,
    run: impl Fn(&Path, &str) -> Result<String, String>,
) -> usize {
    let all = files(root, ext);
    let bless = std::env::var("DYC_BLESS").is_ok_and(|v| v == "1");
    let check = format!("{comment} check:");
    let mut failures = Vec::new();
    for path in &all {
        let src = std::fs::read_to_string(path).expect("readable test file");
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string();
        let actual = match run(path, &src) {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let expected = directive(&src, comment, "check:");
        let actual_lines: Vec<&str> = actual.lines().collect();
        if expected == actual_lines {
            continue;
        }
        if bless {
            let mut body: String = src
                .lines()
                .filter(|l| !l.trim_start().starts_with(&check))
                .map(|l| format!("{l}\n"))
                .collect();
            while body.ends_with("\n\n") {
                body.pop();
            }
            for l in &actual_lines {
                body.push_str(format!("{check} {l}").trim_end());
                body.push('\n');
            }
            std::fs::write(path, body).expect("writable test file");
        } else {
            failures.push(format!(
                "{name}: output differs\n--- expected\n{}\n--- actual\n{}",
                expected.join("\n"),
                actual
            ));
        }
    }
    assert!(!all.is_empty(), "no test files under {}", root.display());
    assert!(
        failures.is_empty(),
        "{} of {} file tests failed:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
    all.len()
}

/// A host function of the tests.
pub type Host = fn(&[dyc::ir::Const]) -> Result<Option<dyc::ir::Const>, String>;

/// The host functions test programs may declare, for the interpreter and compiled code.
pub const HOSTS: [(&str, Host); 5] = [
    ("double", |a| Ok(Some(int(word(a)?.wrapping_mul(2))))),
    ("hash", |a| {
        Ok(Some(int(word(a)?.wrapping_mul(31).wrapping_add(7))))
    }),
    ("fail", |_| Err("the host refused".into())),
    ("observe", |_| Ok(None)),
    ("log_value", |_| Ok(None)),
];

fn word(a: &[dyc::ir::Const]) -> Result<u64, String> {
    match a {
        [dyc::ir::Const::Int(dyc::ir::Scalar::I64, x)] => Ok(*x),
        _ => Err("expected one i64".into()),
    }
}

fn int(x: u64) -> dyc::ir::Const {
    dyc::ir::Const::Int(dyc::ir::Scalar::I64, x)
}

/// [`HOSTS`] for the interpreter.
pub fn hosts() -> dyc::interp::HostFns {
    let mut h = dyc::interp::HostFns::default();
    for (name, f) in HOSTS {
        h.register(name, f);
    }
    h
}

/// Runs every `COMMENT run: f(args)` line of `src` on `m` and returns one output line per
/// run: `f(args) = result` or `f(args) -> error`, then the final contents of mutable
/// slice arguments.
pub fn run_lines(m: &dyc::ir::Module, src: &str, comment: &str) -> Result<String, String> {
    use dyc::interp::{format_val, parse_args, Interpreter, Memory, Val};
    use std::fmt::Write as _;
    let mut out = String::new();
    for call in directive(src, comment, "run:") {
        let (name, rest) = call
            .split_once('(')
            .ok_or(format!("bad run line `{call}`"))?;
        let args_text = rest
            .strip_suffix(')')
            .ok_or(format!("bad run line `{call}`"))?;
        let id = m
            .func_by_name(name.trim())
            .ok_or(format!("no function `{name}`"))?;
        let mut mem = Memory::default();
        let args = match parse_args(&m.funcs[id].sig.params, args_text, &mut mem) {
            Ok(a) => a,
            Err(e) => {
                let _ = writeln!(out, "{call} -> bad arguments: {e}");
                continue;
            }
        };
        let mut interp = Interpreter::new(m);
        interp.hosts = hosts();
        interp.fuel = 1_000_000;
        interp.max_depth = 200;
        match interp.call(id, &args, &mut mem) {
            Ok(Some(v)) => {
                let _ = write!(out, "{call} = {}", format_val(v, &mem));
            }
            Ok(None) => {
                let _ = write!(out, "{call} = ()");
            }
            Err(e) => {
                let _ = write!(out, "{call} -> {e}");
            }
        }
        for a in &args {
            if let Val::Slice(s) = a {
                if s.mutable {
                    let _ = write!(out, "; after: {}", format_val(*a, &mem));
                }
            }
        }
        out.push('\n');
    }
    Ok(out)
}

/// Runs `f` on a thread with a 2 MiB stack, Rust's default for spawned threads (where a
/// service compiles and calls), and fails if it panics or overflows.
pub fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(f)
        .expect("thread")
        .join()
        .expect("no panic, no overflow");
}

/// The number of cases a property runs: `DYC_PROPTEST_CASES` if set, else `default` (as
/// the library's own properties read it).
pub fn cases(default: u64) -> u64 {
    std::env::var("DYC_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

static PROGRESS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static RUNNING: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Counts a run of compiled code, described by `what`, for [`watchdog`].
pub fn progress(what: String) {
    *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) = what;
    PROGRESS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Starts, once per test process, a thread that ends the process, printing the last run
/// [`progress`] counted, when no run was counted for 30 seconds: code that runs forever (a
/// jump laid out to the wrong place) fails the test instead of hanging it.
pub fn watchdog() {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        std::thread::spawn(|| {
            let mut last = u64::MAX;
            loop {
                std::thread::sleep(std::time::Duration::from_secs(30));
                let now = PROGRESS.load(std::sync::atomic::Ordering::Relaxed);
                if now == last {
                    let what = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    eprintln!("no progress for 30 s: {what}");
                    std::process::exit(101);
                }
                last = now;
            }
        });
    });
}

/// Tiers under which no version moves up: the code of the tier a version was made in is
/// what runs.
pub fn no_tier_up() -> dyc::Tiers {
    dyc::Tiers {
        hot_calls: u64::MAX,
        hot_time: std::time::Duration::MAX,
        ..dyc::Tiers::default()
    }
}

/// A linear congruential generator: deterministic inputs for the random differential
/// tests, one stream per seed.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The outcome of a call of the reference interpreter, written as [`outcome`] writes
/// compiled code's: the result, or the error's kind and source position.
pub fn interpreted(r: Result<Option<dyc::interp::Val>, dyc::interp::RuntimeError>) -> String {
    match r {
        Ok(Some(dyc::interp::Val::Scalar(c))) => format!("= {c:?}"),
        Ok(r) => format!("= {r:?}"),
        Err(e) => format!("-> {} at {}", e.kind.name(), e.loc),
    }
}

/// The outcome of a call of compiled code as the differential tests compare it with the
/// interpreter's: the result, or the error's kind and source position.
pub fn outcome(r: Result<Option<dyc::ir::Const>, dyc::Error>) -> String {
    match r {
        Ok(Some(c)) => format!("= {c:?}"),
        Ok(None) => "= None".into(),
        Err(dyc::Error::Run(e)) => format!("-> {} at {}", e.kind.name(), e.loc),
        Err(e) => format!("error: {e}"),
    }
}

//! The workload of the service example and of the soak test: a rule evaluator specialized
//! on thousands of rule sets that change over time, called from several threads.
//!
//! A rule set is a static slice of rules, four words each: (field, op, constant, weight);
//! op 0 is `<`, 1 is `==`, 2 is `>`. A record has [`FIELDS`] fields; its score is the sum
//! of the weights of the rules it satisfies, and a call scores a batch of records. The
//! specialized code has the rules as compares against constants, fully unrolled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dyc::interp::{Interpreter, Memory};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Program};

/// The region.
pub const SOURCE: &str = "
fn score(rules: [i64], recs: [i64]) -> i64 {
    make_static(rules);
    var total = 0;
    var r = 0;
    while r + 8 <= len(recs) {
        var p = 0;
        make_static(p);
        while p + 4 <= len(rules) {
            let field = rules@[p];
            let op = rules@[p + 1];
            let k = rules@[p + 2];
            let w = rules@[p + 3];
            let v = recs[r + field];
            if op == 0 {
                if v < k { total += w; }
            } else if op == 1 {
                if v == k { total += w; }
            } else {
                if v > k { total += w; }
            }
            p += 4;
        }
        r += 8;
    }
    return total;
}
";

/// Fields per record.
pub const FIELDS: usize = 8;

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Rule set `id` of generation `generation` (rule sets change between generations): 2 to
/// 9 rules, the same for every caller.
pub fn rule_set(id: u64, generation: u64) -> Vec<i64> {
    let mut rng = Rng::new(id.wrapping_mul(1_000_003) ^ generation.rotate_left(32));
    let n = 2 + rng.below(8);
    let mut rules = Vec::with_capacity(4 * n as usize);
    for _ in 0..n {
        rules.push(rng.below(FIELDS as u64) as i64);
        rules.push(rng.below(3) as i64);
        rules.push(rng.below(100) as i64);
        rules.push(1 + rng.below(9) as i64);
    }
    rules
}

/// The score in plain Rust, to check every call against.
pub fn score(rules: &[i64], recs: &[i64]) -> i64 {
    let mut total = 0i64;
    for rec in recs.chunks_exact(FIELDS) {
        for r in rules.chunks_exact(4) {
            let v = rec[r[0] as usize];
            let hit = match r[1] {
                0 => v < r[2],
                1 => v == r[2],
                _ => v > r[2],
            };
            if hit {
                total = total.wrapping_add(r[3]);
            }
        }
    }
    total
}

/// The score computed by the reference interpreter.
pub fn interpret(program: &Program, rules: &[i64], recs: &[i64]) -> i64 {
    let m = program.module();
    let id = m.func_by_name("score").expect("the region");
    let mut mem = Memory::default();
    let ints = |xs: &[i64]| {
        xs.iter()
            .map(|&x| Const::Int(Scalar::I64, x as u64))
            .collect()
    };
    let a = mem.add(Scalar::I64, ints(rules), false);
    let b = mem.add(Scalar::I64, ints(recs), false);
    let r = Interpreter::new(m)
        .call(id, &[a, b], &mut mem)
        .expect("interprets");
    match r {
        Some(dyc::interp::Val::Scalar(c)) => c.as_i64().expect("an integer"),
        other => panic!("unexpected result {other:?}"),
    }
}

/// What the threads did, shared.
#[derive(Default)]
pub struct Tally {
    pub calls: AtomicU64,
    pub checked: AtomicU64,
    pub interpreted: AtomicU64,
}

/// The shape of a run.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub threads: usize,
    /// Rule sets in use at once; a caller picks one with a skew (a few hot, many cold).
    pub rule_sets: u64,
    /// Calls between generations: every generation replaces a tenth of the rule sets.
    pub calls_per_generation: u64,
    /// Records per call.
    pub records: usize,
    /// Every this many calls, a call is also checked against the interpreter.
    pub interpret_every: u64,
}

/// Runs `load` on `program` until `stop(elapsed, calls)` says so, calling `progress` about
/// every `tick` from the first thread. Every result is checked against [`score`], some
/// against the interpreter; a mismatch panics.
pub fn run(
    program: &Program,
    load: Load,
    tick: Duration,
    stop: &(dyn Fn(Duration, u64) -> bool + Sync),
    progress: &(dyn Fn(Duration, &Tally) + Sync),
) -> Tally {
    let tally = Tally::default();
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..load.threads {
            let tally = &tally;
            s.spawn(move || {
                let region = program.region("score").expect("the region");
                let mut rng = Rng::new(t as u64 + 1);
                let mut recs = vec![0i64; load.records * FIELDS];
                let mut last = Instant::now();
                loop {
                    let calls = tally.calls.fetch_add(1, Ordering::Relaxed);
                    if stop(start.elapsed(), calls) {
                        break;
                    }
                    let generation = calls / load.calls_per_generation.max(1);
                    // Skewed: half the calls go to the first twentieth of the rule sets.
                    let id = if rng.below(2) == 0 {
                        rng.below((load.rule_sets / 20).max(1))
                    } else {
                        rng.below(load.rule_sets)
                    };
                    // A tenth of the rule sets change at each generation.
                    let rules = rule_set(
                        id,
                        if id % 10 == generation % 10 {
                            generation
                        } else {
                            0
                        },
                    );
                    for x in recs.iter_mut() {
                        *x = rng.below(110) as i64;
                    }
                    let got = region
                        .call(&mut [Arg::from(&rules[..]), Arg::from(&recs[..])])
                        .expect("the region runs")
                        .and_then(|c| c.as_i64())
                        .expect("a result");
                    assert_eq!(got, score(&rules, &recs), "rules {rules:?}");
                    tally.checked.fetch_add(1, Ordering::Relaxed);
                    if calls % load.interpret_every.max(1) == 0 {
                        assert_eq!(got, interpret(program, &rules, &recs), "rules {rules:?}");
                        tally.interpreted.fetch_add(1, Ordering::Relaxed);
                    }
                    if t == 0 && last.elapsed() >= tick {
                        last = Instant::now();
                        progress(start.elapsed(), tally);
                    }
                }
            });
        }
    });
    tally
}

/// Resident memory of this process in bytes (Linux; 0 elsewhere).
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

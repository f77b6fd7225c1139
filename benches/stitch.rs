//! Ablation of the stitcher: the planned stitcher (the default, following the plan of the
//! DyC static transform) against the work-list executor (the reference), on the byte-code
//! interpreter of `examples/bytecode.dyc` specialized to each of the six programs of
//! `benches/bytecode.rs` and to a generated program of 513 byte-codes (`long program`, the
//! one `--scale` makes with `DYC_SCALE_K=64`), and on the kernels of `examples/kernels.dyc`.
//!
//! `cargo bench --bench stitch` prints, per region: the plan (roots, steps, steps without
//! tail merging), the copies stitched and the instructions generated (the same for both
//! executors, checked), each executor's time per generated instruction with an emitter
//! that does nothing but count (so the time is the executor's own: walking the program,
//! setup code, lookups, block bookkeeping), the memo lookups each made (the work list: one per edge; the planned stitcher: the
//! has-been-stitched lookups at roots) and the NTBS tests the planned stitcher executed.
//! Times are the median of 15 batches, batches of the two executors alternating; the
//! ratio is the median of the per-batch ratios. `--profile REGION [work]` instead runs the
//! planned stitcher (or the work list) on one region for ten seconds, for a profiler;
//! `--specialize PROGRAM` makes stitch-tier specializations of the interpreter on one
//! byte-code program, through the whole runtime (fold layer, stencils, code heap), for ten
//! seconds, and prints the median time of one and of the part that installs the code
//! (`--specialize PROGRAM work`: with the work-list executor); `--code` runs each
//! byte-code program's stitch-tier code (without and with
//! `RuntimeOptions::constant_params`: constant and dead block parameters, merged blocks)
//! and optimizing-tier code, alternating, and prints the ratios of their median times;
//! `--scale` makes stitch-tier specializations of the interpreter on generated programs
//! of 17 to 1,025 byte-codes and prints the cost per byte-code and per machine
//! instruction, the median time of installing the code, and the marginal cost of one
//! more byte-code (`DYC_SCALE_K=k` runs only the program of `k` loops, for a profiler).
//! `--stack` specializes a stack machine whose operand stack has 8 to 256 slots, with the
//! stack in memory and as values, and prints the cost per byte-code, the code made and
//! the time of a call ([`stack`]).
//! `--hand` specializes the interpreter to the long program with a generating extension
//! written by hand in Rust ([`hand_ge`], for what compiling the generating extension can
//! save) and with the planned stitcher, both into the counting emitter, and prints what
//! each made (`--hand hand` or `--hand planned` runs only that one);
//! `--lazy PROGRAM [N]` makes stitch-tier specializations of the interpreter on one
//! byte-code program and runs each once with `n = N` (8 unless given), so that its
//! promotions stitch units while it runs, and prints the median cost of those units.
//! `DYC_PROFILE_RUNS=n` makes `--profile`, `--specialize`, `--scale`, `--hand` and `--lazy` do exactly `n`
//! runs (specializations per program) instead of running for a time: with two values of
//! `n` under `valgrind --tool=lackey --basic-counts=yes`, the difference of the counts is
//! the instructions of that many runs, a measure the machine's noise does not touch.

use std::time::{Duration, Instant};

use dyc::bta::Mode;
use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Unit};
use dyc_stitcher::ge::{Budget, NoHosts, SVal, SliceData, StitchProgram};
use dyc_templates::ops::Const;
use dyc_templates::template::{Case, Emitter, TOp};
use dyc_templates::types::{Scalar, SrcLoc, Type};

#[allow(dead_code)]
mod bytecode;

/// An emitter that only counts what it is given: values and blocks are numbers.
#[derive(Default)]
struct Count {
    params: Vec<usize>,
    values: u32,
    insts: usize,
}

impl Count {
    fn value(&mut self) -> u32 {
        self.values += 1;
        self.values
    }
}

impl Emitter for Count {
    type Value = u32;
    type Block = u32;

    fn create_block(&mut self, params: &[Type]) -> u32 {
        self.params.push(params.iter().map(|t| t.flat_len()).sum());
        self.params.len() as u32 - 1
    }
    fn block_params(&mut self, b: u32, out: &mut Vec<u32>) {
        out.extend(0..self.params[b as usize] as u32);
    }
    fn switch_to_block(&mut self, _: u32) {}
    fn constant(&mut self, _: Const) -> u32 {
        self.value()
    }
    fn static_slice(&mut self, _: u32, _: Type) -> u32 {
        self.value()
    }
    fn op(&mut self, _: &TOp, _: &[u32], _: SrcLoc) -> Option<u32> {
        self.insts += 1;
        Some(self.value())
    }
    fn array_load(&mut self, _: Scalar, _: &[u32], _: u32, _: SrcLoc) -> u32 {
        self.insts += 1;
        self.value()
    }
    fn array_store(&mut self, _: Scalar, _: &mut [u32], _: u32, _: u32, _: SrcLoc) {
        self.insts += 1;
    }
    fn local_array(&mut self, _: Scalar, _: u32, init: &[u32]) -> u32 {
        self.insts += init.len() + 1;
        self.value()
    }
    fn jump(&mut self, _: u32, _: &[u32]) {
        self.insts += 1;
    }
    fn brif(&mut self, _: u32, _: (u32, &[u32]), _: (u32, &[u32])) {
        self.insts += 1;
    }
    fn switch(&mut self, _: u32, _: &[Case<Self>], _: (u32, &[u32])) {
        self.insts += 1;
    }
    fn ret(&mut self, _: Option<u32>) {
        self.insts += 1;
    }
    fn trap(&mut self, _: SrcLoc) {
        self.insts += 1;
    }
    fn promote(&mut self, _: u32, _: &[u32], _: &[u32]) {
        self.insts += 1;
    }
    fn promote_miss(&mut self, _: u32, _: &[u32]) {
        self.insts += 1;
    }
    fn restartable(&self) -> bool {
        true
    }
    fn restart(&mut self) {
        self.params.clear();
        (self.values, self.insts) = (0, 0);
    }
}

thread_local! {
    /// The counting emitter's table of blocks, kept from one run to the next as the real
    /// emitters keep theirs (growing it afresh in every run cost each executor a few
    /// reallocations per unit that no real emitter makes).
    static PARAMS: std::cell::Cell<Vec<usize>> = const { std::cell::Cell::new(Vec::new()) };
}

fn run(cx: &Context, key: &[SVal], e: ExecutorKind) -> (Unit<u32>, usize) {
    let mut params = PARAMS.take();
    params.clear();
    let mut em = Count {
        params,
        ..Count::default()
    };
    let unit = e.run(cx, cx.prog.entry, key, &mut em).expect("specializes");
    PARAMS.set(em.params);
    (unit, em.insts)
}

/// Times one run of each executor: batches of the three (the work list, the planned
/// stitcher interpreting its plan, and with its plan compiled) alternate (so that a change
/// of load hits all), 15 of each sized to take about 20 ms. Returns each executor's median
/// (work list, interpreted, compiled) and the medians of the per-batch ratios over the
/// work list (interpreted, compiled).
fn time(cx: &Context, key: &[SVal]) -> ([Duration; 3], [f64; 2]) {
    let t = Instant::now();
    let mut once = 0;
    while t.elapsed() < Duration::from_millis(20) {
        std::hint::black_box(run(cx, key, ExecutorKind::WorkList));
        once += 1;
    }
    let batch = |e: ExecutorKind| {
        let t = Instant::now();
        for _ in 0..once {
            std::hint::black_box(run(cx, key, e));
        }
        t.elapsed() / once
    };
    let kinds = [
        ExecutorKind::WorkList,
        ExecutorKind::Interpreted,
        ExecutorKind::Planned,
    ];
    let mut times: [Vec<Duration>; 3] = Default::default();
    let mut ratios: [Vec<f64>; 2] = Default::default();
    for _ in 0..15 {
        let t = kinds.map(batch);
        for k in 0..2 {
            ratios[k].push(t[k + 1].as_secs_f64() / t[0].as_secs_f64());
        }
        for k in 0..3 {
            times[k].push(t[k]);
        }
    }
    for t in &mut times {
        t.sort();
    }
    for r in &mut ratios {
        r.sort_by(f64::total_cmp);
    }
    (times.map(|t| t[7]), ratios.map(|r| r[7]))
}

/// A region to specialize: its stitch program, the static values of its entry key and the
/// contents of its static slices.
struct Region {
    name: String,
    prog: StitchProgram,
    key: Vec<SVal>,
    slices: Vec<Option<SliceData>>,
}

fn ints(xs: impl IntoIterator<Item = i64>) -> SliceData {
    SliceData::new(
        Scalar::I64,
        xs.into_iter()
            .map(|x| Const::Int(Scalar::I64, x as u64))
            .collect(),
    )
}

fn int(x: i64) -> SVal {
    SVal::Scalar(Const::Int(Scalar::I64, x as u64))
}

fn program(m: &dyc::ir::Module, name: &str) -> StitchProgram {
    let id = m.func_by_name(name).expect("the region exists");
    dyc::ge::build(m, id, Mode::Specialize)
        .expect("builds")
        .program
}

/// A context for the executors on region `r`: no hosts, promotions leaving the unit
/// (none known for any site, every site number 0), as the runtime has them, the default
/// budget.
fn context(r: &Region) -> Context<'_> {
    Context {
        prog: &r.prog,
        slices: &r.slices,
        hosts: &NoHosts,
        mode: PromotionMode::Units {
            resolve: &|_| 0,
            known: &|_| Vec::new(),
        },
        budget: Budget::default(),
    }
}

/// The interpreter on each byte-code program, then the kernels of `examples/kernels.dyc` on
/// the run-time constants `benches/kernels.rs` uses.
fn regions() -> Vec<Region> {
    let src = include_str!("../examples/bytecode.dyc");
    let m = dyc::lang::compile("bytecode.dyc", src).expect("the example compiles");
    let mut regions: Vec<Region> = bytecode::benches()
        .into_iter()
        .map(|b| Region {
            name: b.name.to_string(),
            prog: program(&m, "run"),
            key: vec![SVal::Slice(0)],
            slices: vec![Some(ints(b.code.iter().copied()))],
        })
        .collect();
    // The interpreter at scale: `--scale`'s program of 64 loops, 513 byte-codes.
    regions.push(Region {
        name: "long program (513)".to_string(),
        prog: program(&m, "run"),
        key: vec![SVal::Slice(0)],
        slices: vec![Some(ints(long_program(64)))],
    });
    let src = include_str!("../examples/kernels.dyc");
    let m = dyc::lang::compile("kernels.dyc", src).expect("the kernels compile");
    let slice = |d: SliceData| (SVal::Slice(0), Some(d));
    // Per kernel, each key value with the contents of its slice if it is one.
    type Key = Vec<(SVal, Option<SliceData>)>;
    let kernels: Vec<(&str, Key)> = vec![
        ("bsearch", vec![slice(ints((0..64).map(|k| 3 * k)))]),
        (
            "sparse_dot",
            vec![slice(ints((0..64).map(|i| {
                if i % 8 == 3 {
                    i - 20
                } else {
                    0
                }
            })))],
        ),
        (
            "chebyshev",
            vec![slice(SliceData::new(
                Scalar::F64,
                (0..16)
                    .map(|i| Const::F64(1.0 / (1.0 + i as f64)))
                    .collect(),
            ))],
        ),
        ("query", vec![slice(ints([0, 2, 300, 2, 0, 700, 1, 1, 5]))]),
        ("romberg", vec![(int(8), None)]),
        (
            "convolve",
            vec![slice(ints([0, 1, 0, 1, -4, 1, 0, 1, 0])), (int(3), None)],
        ),
        ("power", vec![(int(13), None)]),
        (
            "cache_sim",
            vec![(int(64), None), (int(4), None), (int(32), None)],
        ),
    ];
    for (name, key) in kernels {
        let (key, slices): (Vec<SVal>, Vec<Option<SliceData>>) = key.into_iter().unzip();
        regions.push(Region {
            name: name.to_string(),
            prog: program(&m, name),
            key,
            slices,
        });
    }
    regions
}

/// The interpreter of `examples/bytecode.dyc` specialized to `code` by a generating
/// extension written by hand in Rust, for the byte-codes `long_program` uses: what a
/// generating extension compiled with the region would run (the setup code as native
/// code, a has-been-stitched lookup per dispatch copy, roots on a stack), making the
/// emitter calls the planned stitcher makes (the same blocks, operations and jumps, with
/// block parameters in another order; `--hand` prints both counts). `None` for a byte-code
/// it does not know (or a program that leaves its code), else the blocks it made. A
/// bound, for `--hand`, of what compiling the generating extension can save.
fn hand_ge<E: Emitter>(code: &[i64], em: &mut E) -> Option<usize> {
    use dyc_templates::ops::{BinaryOp, CmpOp};
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};
    #[derive(Default)]
    struct Mix(u64);
    impl Hasher for Mix {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
        fn write_i64(&mut self, x: i64) {
            self.0 = (x as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    let mem_ty = Type::Slice {
        elem: Scalar::I64,
        mutable: true,
    };
    let mut copy_types = vec![mem_ty];
    copy_types.extend([Type::I64; 8]);
    let mut memo: HashMap<i64, E::Block, BuildHasherDefault<Mix>> = HashMap::default();
    let mut stack: Vec<(i64, E::Block)> = Vec::new();
    let mut blocks = 0;
    let mut root = |pc: i64, em: &mut E, stack: &mut Vec<(i64, E::Block)>| {
        *memo.entry(pc).or_insert_with(|| {
            let b = em.create_block(&copy_types);
            stack.push((pc, b));
            b
        })
    };
    let entry = em.create_block(&[Type::I64, mem_ty]);
    em.switch_to_block(entry);
    let mut vals = Vec::new();
    em.block_params(entry, &mut vals);
    let zero = em.constant(Const::Int(Scalar::I64, 0));
    let mut args = vec![vals[1], vals[0]];
    args.extend([zero; 7]);
    let first = root(0, em, &mut stack);
    em.jump(first, &args);
    let binary = |o| TOp::Binary(o);
    while let Some((pc, block)) = stack.pop() {
        blocks += 1;
        em.switch_to_block(block);
        vals.clear();
        em.block_params(block, &mut vals);
        let at = |k: i64| {
            usize::try_from(pc + k)
                .ok()
                .and_then(|i| code.get(i))
                .copied()
        };
        let (op, a, b, c) = (at(0)?, at(1)?, at(2)?, at(3)?);
        let reg = |r: i64| usize::try_from(r).ok().filter(|&r| r < 8).map(|r| r + 1);
        let next = pc + 4;
        let arith = |o: BinaryOp| Some(binary(o));
        let top = match op {
            2 => arith(BinaryOp::Add),
            3 => arith(BinaryOp::Sub),
            4 => arith(BinaryOp::Mul),
            12 => arith(BinaryOp::Rem),
            13 => arith(BinaryOp::Div),
            _ => None,
        };
        match (op, top) {
            (0, _) => em.ret(Some(vals[reg(a)?])),
            (1, _) => {
                vals[reg(a)?] = em.constant(Const::Int(Scalar::I64, b as u64));
                let t = root(next, em, &mut stack);
                em.jump(t, &vals);
            }
            (10, _) => {
                let k = em.constant(Const::Int(Scalar::I64, c as u64));
                let v = em.op(
                    &binary(BinaryOp::Add),
                    &[vals[reg(b)?], k],
                    SrcLoc::default(),
                )?;
                vals[reg(a)?] = v;
                let t = root(next, em, &mut stack);
                em.jump(t, &vals);
            }
            (_, Some(top)) => {
                let v = em.op(&top, &[vals[reg(b)?], vals[reg(c)?]], SrcLoc::default())?;
                vals[reg(a)?] = v;
                let t = root(next, em, &mut stack);
                em.jump(t, &vals);
            }
            (5 | 11, _) => {
                let cmp = TOp::Cmp(if op == 5 { CmpOp::Lt } else { CmpOp::Eq });
                let cond = em.op(&cmp, &[vals[reg(a)?], vals[reg(b)?]], SrcLoc::default())?;
                let taken = root(c, em, &mut stack);
                let fall = em.create_block(&copy_types);
                blocks += 1;
                em.brif(cond, (taken, &vals), (fall, &vals));
                em.switch_to_block(fall);
                let mut fvals = Vec::new();
                em.block_params(fall, &mut fvals);
                let t = root(next, em, &mut stack);
                em.jump(t, &fvals);
            }
            (6, _) => {
                let t = root(a, em, &mut stack);
                em.jump(t, &vals);
            }
            _ => return None,
        }
    }
    Some(blocks)
}

/// `--hand`: the interpreter specialized to `long_program(64)` with the counting emitter,
/// by the planned stitcher and by [`hand_ge`]: what each makes, and (`DYC_PROFILE_RUNS=n`)
/// `n` runs of the one named after `--hand` (`planned` or `hand`), for counting
/// instructions.
fn hand(which: Option<&str>) {
    let code = long_program(64);
    let region = regions()
        .into_iter()
        .find(|r| r.name.starts_with("long program"))
        .expect("the long program's region");
    let cx = context(&region);
    let runs = profile_runs().unwrap_or(0);
    match which {
        Some("hand") => (0..runs).for_each(|_| {
            let mut em = Count::default();
            std::hint::black_box(hand_ge(&code, &mut em));
        }),
        Some("planned") => (0..runs).for_each(|_| {
            std::hint::black_box(run(&cx, &region.key, ExecutorKind::Planned));
        }),
        _ => {
            let mut em = Count::default();
            let blocks = hand_ge(&code, &mut em).expect("a program hand_ge knows");
            let (unit, insts) = run(&cx, &region.key, ExecutorKind::Planned);
            println!(
                "planned stitcher: {} copies, {insts} instructions; by hand: {blocks} blocks, {} instructions",
                unit.blocks, em.insts
            );
        }
    }
}

/// Stitch-tier specializations of the interpreter on byte-code program `name` with
/// `executor` for ten seconds; prints the median and the fastest time of one and the median
/// time of installing its code.
fn specialize(name: &str, executor: ExecutorKind) {
    use dyc::Arg;
    let (program, b) = interpreter_on(name);
    let region = program.region("run").expect("region `run`");
    region.set_executor(executor);
    let key = [Arg::from(&b.code[..])];
    // The stencils its units use made first (outside what a profiler of `stitch_times`
    // sees).
    settle(&region, &key);
    let (times, install) = stitch_times(&region, &key, Duration::from_secs(10));
    let median = times[times.len() / 2];
    println!(
        "{name} ({executor:?}): {} specializations, median {:.1} us ({:.0} ns per byte-code instruction), fastest {:.1} us ({:.0} ns), of which installing the code {:.1} us",
        times.len(),
        median.as_secs_f64() * 1e6,
        median.as_secs_f64() * 1e9 / (b.code.len() / 4) as f64,
        times[0].as_secs_f64() * 1e6,
        times[0].as_secs_f64() * 1e9 / (b.code.len() / 4) as f64,
        install.as_secs_f64() * 1e6
    );
}

/// The interpreter of `examples/bytecode.dyc`, compiled with the default options.
fn interpreter() -> dyc::Program {
    let src = include_str!("../examples/bytecode.dyc");
    dyc::Program::compile_with("bytecode.dyc", src, dyc::RuntimeOptions::default())
        .expect("the example compiles")
}

/// [`interpreter`], and the byte-code program of the benchmark named `name`.
fn interpreter_on(name: &str) -> (dyc::Program, bytecode::Bench) {
    let b = bytecode::benches()
        .into_iter()
        .find(|b| b.name == name)
        .expect("a program of the benchmark");
    (interpreter(), b)
}

/// `--lazy P N`: stitch-tier specializations of the interpreter on byte-code program `P`,
/// each called once with `n = N` and dropped, for ten seconds or `DYC_PROFILE_RUNS`
/// times: the units its promotions stitch while it runs, and their median cost.
fn lazy(name: &str, n: i64) {
    use dyc::Arg;
    let (program, b) = interpreter_on(name);
    let region = program.region("run").expect("region `run`");
    let key = [Arg::from(&b.code[..])];
    let mut mem = vec![0i64; b.mem];
    let want = bytecode::interpret(&b.code, n, &mut mem.clone());
    let runs = profile_runs();
    let (mut entry, mut units, mut lazy_ns) = (Vec::new(), 0, Vec::new());
    let t = Instant::now();
    while runs.map_or(t.elapsed() < Duration::from_secs(10), |r| entry.len() < r) {
        let t = Instant::now();
        let spec = region
            .specialize_in(&key, dyc::Tier::Stitch)
            .expect("specializes");
        entry.push(t.elapsed());
        mem.fill(0);
        let r = spec.call(&mut [Arg::from(n), Arg::from(&mut mem[..])]);
        assert_eq!(r.expect("runs").and_then(|c| c.as_i64()), Some(want));
        let (u, st) = spec.lazy_stats();
        units = u;
        lazy_ns.push(Duration::from_nanos(st.stitch_ns + st.compile_ns));
    }
    entry.sort();
    lazy_ns.sort();
    let median = |v: &[Duration]| v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6);
    println!(
        "{name} (n = {n}): {} specializations; entry unit median {:.1} us; {units} units stitched lazily, median {:.1} us in all ({:.1} us each)",
        entry.len(),
        median(&entry),
        median(&lazy_ns),
        median(&lazy_ns) / units.max(1) as f64,
    );
}

/// `DYC_PROFILE_RUNS=n`: the exact number of runs asked for (for counting instructions).
fn profile_runs() -> Option<usize> {
    std::env::var("DYC_PROFILE_RUNS").ok()?.parse().ok()
}

/// Specializes `region` for `key` in the stitch tier until its units find every stencil
/// they want made (the worker thread makes the ones a unit missed; a unit that copies a
/// variant in place of one may make the next miss others).
fn settle(region: &dyc::Region, key: &[dyc::Arg]) {
    for _ in 0..20 {
        let before = dyc::stencil_counts().fallbacks;
        drop(region.specialize_in(key, dyc::Tier::Stitch));
        dyc::settle_stencils();
        if dyc::stencil_counts().fallbacks == before {
            break;
        }
    }
}

/// The times of stitch-tier specializations of `region` on `key`, made one after another
/// for `span`, sorted; and the median time of installing the code (copying it to code
/// pages, and in a heap whose pages flip, making them read+execute), which is part of each.
fn stitch_times(
    region: &dyc::Region,
    key: &[dyc::Arg],
    span: Duration,
) -> (Vec<Duration>, Duration) {
    let (mut times, mut installs) = (Vec::new(), Vec::new());
    let t = Instant::now();
    // `DYC_PROFILE_RUNS=n`: exactly n specializations (for counting instructions).
    let runs = profile_runs();
    while runs.map_or(t.elapsed() < span, |n| times.len() < n) {
        let t = Instant::now();
        let spec = region
            .specialize_in(key, dyc::Tier::Stitch)
            .expect("specializes");
        times.push(t.elapsed());
        installs.push(spec.stats().compile_ns);
        drop(spec);
    }
    times.sort();
    installs.sort();
    let install = Duration::from_nanos(installs.get(installs.len() / 2).copied().unwrap_or(0));
    (times, install)
}

/// A byte-code program of `k` counted loops, eight instructions each (two loads of
/// constants, arithmetic, an increment, a compare-and-branch back), then `HALT`: a program
/// whose specialization grows with its length, for the marginal cost per byte-code.
fn long_program(k: usize) -> Vec<i64> {
    let mut code = Vec::new();
    for i in 0..k {
        let head = (8 * i + 2) as i64 * 4;
        code.extend_from_slice(&[
            1, 1, 0, 0, // LOADI r1, 0
            1, 2, 10, 0, // LOADI r2, 10
            2, 3, 3, 1, // ADD r3, r3, r1
            10, 1, 1, 1, // ADDI r1, r1, 1
            4, 4, 3, 3, // MUL r4, r3, r3
            3, 5, 4, 3, // SUB r5, r4, r3
            5, 1, 2, head, // JLT r1, r2, head
            10, 0, 0, 1, // ADDI r0, r0, 1
        ]);
    }
    code.extend_from_slice(&[0, 3, 0, 0]); // HALT r3
    code
}

/// Stitch-tier specializations of the interpreter on programs of growing length
/// ([`long_program`]), each for two seconds: the median time of one, per byte-code and
/// per machine instruction, the fastest time, and the marginal cost per byte-code between
/// the two longest (so that the cost of a unit, whatever its length, drops out), from the
/// medians and from the fastest times (steadier on a loaded machine).
fn scale() {
    use dyc::{Arg, Tier};
    let program = interpreter();
    let region = program.region("run").expect("region `run`");
    println!(
        "{:>10} {:>8} {:>12} {:>14} {:>14} {:>12} {:>10}",
        "byte-codes", "m-insts", "median", "per byte-code", "per m-inst", "fastest", "install"
    );
    let mut rows = Vec::new();
    let ks: Vec<usize> = match std::env::var("DYC_SCALE_K") {
        Ok(k) => vec![k.parse().expect("DYC_SCALE_K is a number")],
        Err(_) => vec![2, 8, 32, 128],
    };
    for k in ks {
        let code = long_program(k);
        let n = code.len() / 4;
        let key = [Arg::from(&code[..])];
        let spec = region
            .specialize_in(&key, Tier::Stitch)
            .expect("specializes");
        let mut mem: [i64; 0] = [];
        let r = spec.call(&mut [Arg::from(0i64), Arg::from(&mut mem[..])]);
        let want = bytecode::interpret(&code, 0, &mut []);
        assert_eq!(r.expect("runs").and_then(|c| c.as_i64()), Some(want));
        let insts = spec.stats().insts;
        drop(spec);
        // The timed runs (and a profiler's few) find every stencil made.
        settle(&region, &key);
        let (times, install) = stitch_times(&region, &key, Duration::from_secs(2));
        let median = times[times.len() / 2].as_secs_f64();
        let fastest = times[0].as_secs_f64();
        println!(
            "{n:>10} {insts:>8} {:>9.1} us {:>11.0} ns {:>11.1} ns {:>9.1} us {:>7.1} us",
            median * 1e6,
            median * 1e9 / n as f64,
            median * 1e9 / insts as f64,
            fastest * 1e6,
            install.as_secs_f64() * 1e6
        );
        rows.push((n, insts, median, fastest));
    }
    if let [.., (n0, i0, t0, f0), (n, i, t, f)] = rows[..] {
        let (dn, di) = ((n - n0) as f64, (i - i0) as f64);
        println!(
            "marginal, {n0} to {n} byte-codes: {:.0} ns per byte-code, {:.1} ns per machine instruction (medians); {:.0} ns and {:.1} ns (fastest)",
            (t - t0) * 1e9 / dn,
            (t - t0) * 1e9 / di,
            (f - f0) * 1e9 / dn,
            (f - f0) * 1e9 / di
        );
    }
}

/// The code of both tiers on every byte-code program: specializations in the stitch tier
/// (without and with the tape's uses: constant and dead block parameters, merged blocks)
/// and in the optimizing tier, none moving
/// up, 9 runs each, alternating; prints each one's median time, the stitch tier's over
/// the optimizing tier's, and their geometric means.
fn code() {
    use dyc::{Arg, Program, RuntimeOptions, Tier, Tiers};
    let src = include_str!("../examples/bytecode.dyc");
    let program = |constant_params| {
        let opts = RuntimeOptions {
            tiers: Tiers {
                hot_calls: u64::MAX,
                hot_time: Duration::MAX,
                ..Tiers::default()
            },
            constant_params,
            ..RuntimeOptions::default()
        };
        Program::compile_with("bytecode.dyc", src, opts).expect("compiles")
    };
    let (without, with) = (program(false), program(true));
    let mut ratios = [Vec::new(), Vec::new()];
    println!(
        "{:<20} {:>12} {:>12} {:>12} | stitch over optimizing",
        "program", "no consts", "stitch", "optimizing"
    );
    for b in bytecode::benches() {
        let key = [Arg::from(&b.code[..])];
        let region = |p: &Program| p.region("run").expect("region `run`");
        // The code once the worker thread has made the stencils units miss (a unit that
        // copies a variant in place of one may make the next miss others).
        for _ in 0..20 {
            let before = dyc::stencil_counts().fallbacks;
            for p in [&without, &with] {
                drop(region(p).specialize_in(&key, Tier::Stitch));
            }
            dyc::settle_stencils();
            if dyc::stencil_counts().fallbacks == before {
                break;
            }
        }
        let specs = [
            region(&without).specialize_in(&key, Tier::Stitch),
            region(&with).specialize_in(&key, Tier::Stitch),
            region(&with).specialize_in(&key, Tier::Optimizing),
        ]
        .map(|s| s.expect("specializes"));
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        let mut mem = vec![0i64; b.mem.max(1)];
        for _ in 0..9 {
            for (k, s) in specs.iter().enumerate() {
                mem.fill(0);
                let t = Instant::now();
                let r = s.call(&mut [Arg::from(b.n), Arg::from(&mut mem[..])]);
                times[k].push(t.elapsed().as_secs_f64() * 1e3);
                let r = r.expect("runs").and_then(|c| c.as_i64());
                assert_eq!(r, Some((b.native)(b.n)));
            }
        }
        let [none, st, op] = times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        });
        ratios[0].push(none / op);
        ratios[1].push(st / op);
        println!(
            "{:<20} {none:>9.2} ms {st:>9.2} ms {op:>9.2} ms | {:.2}x without constants, {:.2}x with",
            b.name,
            none / op,
            st / op
        );
    }
    let geo = |r: &[f64]| (r.iter().map(|r| r.ln()).sum::<f64>() / r.len() as f64).exp();
    println!(
        "stitch code over optimizing, geometric mean: {:.2}x without constant parameters, {:.2}x with",
        geo(&ratios[0]),
        geo(&ratios[1])
    );
}

/// A stack machine whose operand stack has `slots` elements (`sp` and `pc` static), for
/// `--stack`.
fn stack_machine(slots: usize) -> String {
    format!(
        r#"
fn run(code: [i64], x: i64) -> i64 {{
    var st: [i64; {slots}];
    var sp: i64 = 1;
    var pc: i64 = 0;
    st[0] = x;
    make_static(code, pc, sp: cache_all, eager);
    loop {{
        let op = code@[pc];
        let a = code@[pc + 1];
        pc = pc + 2;
        switch op {{
            case 0: return st[sp - 1];
            case 1: st[sp] = a; sp = sp + 1;
            case 2: st[sp - 2] = st[sp - 2] + st[sp - 1]; sp = sp - 1;
            case 4: st[sp] = st[a]; sp = sp + 1;
            case 5: st[a] = st[sp - 1]; sp = sp - 1;
            case 6:
                if st[sp - 1] < a {{
                    pc = pc + 2;
                }}
                sp = sp - 1;
            case 7: pc = a;
            default: trap;
        }}
    }}
}}
"#
    )
}

/// `--stack`: the stack machine of [`stack_machine`] with 8 to 256 slots, its stack in
/// memory and as values ([`dyc::RuntimeOptions::max_array_values`]), specialized in the
/// stitch tier on a program of 50 counted loops (651 byte-codes): the median time of a
/// specialization per byte-code, the instructions made, and the median time of a call of
/// the stitch tier's code and of the optimizing tier's (which keeps arrays as values).
fn stack() {
    use dyc::{Arg, Program, RuntimeOptions, Tier};
    let mut code = Vec::new();
    for k in 0..50i64 {
        let top = code.len() as i64 + 4;
        code.extend([1, 3, 5, 1]); // st[1] = 3
        code.extend([4, 1, 1, -1, 2, 0, 5, 1]); // top: st[1] -= 1
        code.extend([4, 1, 6, 1, 7, top]); // while st[1] >= 1
        code.extend([4, 0, 1, k, 2, 0, 5, 0]); // st[0] += k
    }
    code.extend([4, 0, 0, 0]);
    let n = code.len() / 2;
    let want = 5 + (0..50).sum::<i64>();
    println!(
        "{:>6} {:>7} | {:>12} {:>7} | {:>12} {:>12}",
        "slots", "stack", "ns/byte-code", "m-insts", "stitch call", "opt call"
    );
    for slots in [8, 16, 32, 64, 128, 256] {
        for (mode, max) in [("memory", 0), ("values", u32::MAX)] {
            let opts = RuntimeOptions {
                max_array_values: max,
                ..RuntimeOptions::default()
            };
            let p =
                Program::compile_with("stack.dyc", &stack_machine(slots), opts).expect("compiles");
            let r = p.region("run").expect("region `run`");
            let key = [Arg::from(&code[..])];
            let call = |tier| {
                let s = r.specialize_in(&key, tier).expect("specializes");
                let mut t = Vec::new();
                for _ in 0..201 {
                    let start = Instant::now();
                    let got = s.call(&mut [Arg::from(5i64)]).expect("runs");
                    t.push(start.elapsed());
                    assert_eq!(got.and_then(|c| c.as_i64()), Some(want));
                }
                t.sort();
                (t[t.len() / 2], s.stats().insts)
            };
            let ((stitch, insts), (opt, _)) = (call(Tier::Stitch), call(Tier::Optimizing));
            let mut t = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(1) || t.len() < 21 {
                let s0 = Instant::now();
                std::hint::black_box(r.specialize_in(&key, Tier::Stitch).expect("specializes"));
                t.push(s0.elapsed());
            }
            t.sort();
            println!(
                "{slots:>6} {mode:>7} | {:>12.0} {insts:>7} | {:>9.0} ns {:>9.0} ns",
                t[t.len() / 2].as_nanos() as f64 / n as f64,
                stitch.as_nanos() as f64,
                opt.as_nanos() as f64
            );
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--code") {
        code();
        return;
    }
    if args.iter().any(|a| a == "--stack") {
        stack();
        return;
    }
    if args.iter().any(|a| a == "--scale") {
        scale();
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--hand") {
        hand(args.get(i + 1).map(String::as_str));
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--specialize") {
        let e = if args.get(i + 2).is_some_and(|a| a == "work") {
            ExecutorKind::WorkList
        } else {
            ExecutorKind::Planned
        };
        specialize(
            args.get(i + 1).expect("--specialize takes a program name"),
            e,
        );
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--lazy") {
        let n = args
            .get(i + 2)
            .map_or(8, |n| n.parse().expect("--lazy P N: N is a number"));
        lazy(args.get(i + 1).expect("--lazy takes a program name"), n);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let name = args.get(i + 1).expect("--profile takes a region name");
        let e = if args.get(i + 2).is_some_and(|a| a == "work") {
            ExecutorKind::WorkList
        } else {
            ExecutorKind::Planned
        };
        let r = regions()
            .into_iter()
            .find(|r| &r.name == name)
            .expect("a region of this bench");
        let cx = context(&r);
        // `DYC_PROFILE_RUNS=n`: exactly n runs (for counting instructions), else ten seconds.
        match profile_runs() {
            Some(n) => {
                for _ in 0..n {
                    std::hint::black_box(run(&cx, &r.key, e));
                }
            }
            None => {
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(10) {
                    std::hint::black_box(run(&cx, &r.key, e));
                }
            }
        }
        return;
    }
    println!(
        "{:<20} {:>5} {:>5} {:>5} | {:>6} {:>6} {:>6} | {:>9} {:>9} {:>9} {:>6} {:>6} | {:>7} {:>7} {:>5}",
        "region",
        "roots",
        "steps",
        "unmrg",
        "copies",
        "work i",
        "plan i",
        "work ns/i",
        "intp ns/i",
        "comp ns/i",
        "intp",
        "comp",
        "work lk",
        "plan lk",
        "tests"
    );
    let mut ratios = [Vec::new(), Vec::new()];
    for r in regions() {
        let prog = &r.prog;
        let plan = prog.plan.as_ref().expect("the region has a plan");
        let cx = context(&r);
        let key = &r.key[..];
        let (wu, wi) = run(&cx, key, ExecutorKind::WorkList);
        let (pu, pi) = run(&cx, key, ExecutorKind::Planned);
        let (iu, ii) = run(&cx, key, ExecutorKind::Interpreted);
        assert_eq!(wu.blocks, pu.blocks, "{}: executors differ", r.name);
        assert_eq!(
            (iu, ii),
            (pu.clone(), pi),
            "{}: compiled and interpreted differ",
            r.name
        );
        assert!(pi <= wi, "{}: the planned stitcher emits more", r.name);
        let (t, ratio) = time(&cx, key);
        let per = |t: Duration| t.as_nanos() as f64 / wi as f64;
        for k in 0..2 {
            ratios[k].push(ratio[k]);
        }
        println!(
            "{:<20} {:>5} {:>5} {:>5} | {:>6} {:>6} {:>6} | {:>9.1} {:>9.1} {:>9.1} {:>6.2} {:>6.2} | {:>7} {:>7} {:>5}",
            r.name,
            plan.root_blocks().count(),
            plan.steps.len(),
            plan.unshared_steps,
            wu.blocks,
            wi,
            pi,
            per(t[0]),
            per(t[1]),
            per(t[2]),
            ratio[0],
            ratio[1],
            wu.lookups,
            pu.lookups,
            pu.tests
        );
    }
    let geo = |r: &[f64]| (r.iter().map(|r| r.ln()).sum::<f64>() / r.len() as f64).exp();
    println!(
        "\nover the work list, time per generated instruction, geometric mean: {:.2} interpreting the plan, {:.2} with the plan compiled",
        geo(&ratios[0]),
        geo(&ratios[1])
    );
}

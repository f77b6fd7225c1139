//! Ablation of the stitcher: the planned stitcher (the default, following the plan of the
//! DyC static transform) against the work-list executor (the reference), on the byte-code
//! interpreter of `examples/bytecode.dyc` specialized to each of the six programs of
//! `benches/bytecode.rs`.
//!
//! `cargo bench --bench stitch` prints, per program: the copies stitched and the
//! instructions generated (the same for both executors, checked), each executor's time
//! per generated instruction with an emitter that does nothing but count (so the time is
//! the executor's own: walking the program, setup code, lookups, block bookkeeping), the
//! memo lookups each made (the work list: one per edge; the planned stitcher: the
//! has-been-stitched lookups at roots), the NTBS tests the planned stitcher executed, and
//! the plan's size before and after tail merging. Times are the median of 15 batches;
//! the ratio of the two executors is taken within one run.

use std::time::{Duration, Instant};

use dyc::bta::Mode;
use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Unit};
use dyc_stitcher::ge::{Budget, NoHosts, SVal, SliceData};
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
        self.params
            .push(Type::flatten(params.iter().copied()).len());
        self.params.len() as u32 - 1
    }
    fn block_params(&self, b: u32) -> Vec<u32> {
        (0..self.params[b as usize] as u32).collect()
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
    fn array_store(&mut self, _: Scalar, elems: &[u32], _: u32, _: u32, _: SrcLoc) -> Vec<u32> {
        self.insts += 1;
        elems.to_vec()
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
}

fn run(cx: &Context, key: &[SVal], e: ExecutorKind) -> (Unit<u32>, usize) {
    let mut em = Count::default();
    let unit = e.run(cx, cx.prog.entry, key, &mut em).expect("specializes");
    (unit, em.insts)
}

/// Median time of one run, over 15 batches sized to take about 20 ms each.
fn time(cx: &Context, key: &[SVal], e: ExecutorKind) -> Duration {
    let t = Instant::now();
    let mut once = 0;
    while t.elapsed() < Duration::from_millis(20) {
        std::hint::black_box(run(cx, key, e));
        once += 1;
    }
    let mut samples: Vec<Duration> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..once {
                std::hint::black_box(run(cx, key, e));
            }
            t.elapsed() / once
        })
        .collect();
    samples.sort();
    samples[7]
}

fn main() {
    let src = include_str!("../examples/bytecode.dyc");
    let m = dyc::lang::compile("bytecode.dyc", src).expect("the example compiles");
    let id = m.func_by_name("run").expect("region `run`");
    let ge = dyc::ge::build(&m, id, Mode::Specialize).expect("builds");
    let prog = &ge.program;
    let plan = prog.plan.as_ref().expect("the interpreter has a plan");
    println!(
        "plan of `run`: {} blocks, {} roots, {} steps ({} without tail merging)\n",
        prog.blocks.len(),
        plan.root_blocks().count(),
        plan.steps.len(),
        plan.unshared_steps
    );
    println!(
        "{:<20} {:>6} {:>6} | {:>9} {:>9} {:>6} | {:>8} {:>8} {:>5}",
        "program",
        "copies",
        "insts",
        "work ns/i",
        "plan ns/i",
        "ratio",
        "work lk",
        "plan lk",
        "tests"
    );
    let mut ratios = Vec::new();
    for b in bytecode::benches() {
        let slices = [Some(SliceData {
            elem: Scalar::I64,
            data: b
                .code
                .iter()
                .map(|&w| Const::Int(Scalar::I64, w as u64))
                .collect(),
        })];
        let cx = Context {
            prog,
            slices: &slices,
            hosts: &NoHosts,
            mode: PromotionMode::Inline(&|_| Vec::new()),
            budget: Budget::default(),
        };
        let key = [SVal::Slice(0)];
        let (wu, wi) = run(&cx, &key, ExecutorKind::WorkList);
        let (pu, pi) = run(&cx, &key, ExecutorKind::Planned);
        assert_eq!(
            (wu.blocks, wi),
            (pu.blocks, pi),
            "{}: executors differ",
            b.name
        );
        let tw = time(&cx, &key, ExecutorKind::WorkList);
        let tp = time(&cx, &key, ExecutorKind::Planned);
        let per = |t: Duration| t.as_nanos() as f64 / wi as f64;
        let ratio = tp.as_secs_f64() / tw.as_secs_f64();
        ratios.push(ratio);
        println!(
            "{:<20} {:>6} {:>6} | {:>9.1} {:>9.1} {:>6.2} | {:>8} {:>8} {:>5}",
            b.name,
            wu.blocks,
            wi,
            per(tw),
            per(tp),
            ratio,
            wu.lookups,
            pu.lookups,
            pu.tests
        );
    }
    let geo = ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64;
    println!(
        "\nplanned / work list, time per generated instruction, geometric mean: {:.2}",
        geo.exp()
    );
}

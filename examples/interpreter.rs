//! The main job: a byte-code interpreter written in the region language
//! (`examples/bytecode.dyc`), specialized on byte-code programs.
//!
//! For each program it prints the result and the time of
//! - the same interpreter written in plain Rust,
//! - the region's generic code compiled by Cranelift without specialization,
//! - the region specialized on the program (the interpreter loop unrolled over it; code
//!   whose promotions stitched units while it ran is made again with the values they saw
//!   dispatched inline, as a region's cache does when a version moves up a tier),
//! - a hand translation of the program to Cranelift IR (`benches/bytecode.rs`: every
//!   register a variable, every leader a block), what a simple baseline JIT does,
//! - the program written directly in Rust (the ceiling; `black_box` keeps the compiler
//!   from replacing the loops by closed forms, which no interpreter could match),
//!
//! then the speedups, and what each program cost to compile: specialization time and CLIF
//! instructions beside the hand translation's; last, the three tiers side by side (the
//! stitch tier, which copies and patches stencils, and the quick tier against the
//! optimizing tier: specialization time and code speed; each tier's code made again as
//! above when its promotions stitched units), after each program's first
//! stitch-tier specialization in the process (timed before anything else, when the
//! stitch tier's worker thread has not yet made the stencil variants its units miss).
//! Timings are medians of several runs in one process. Code runs side by side: each round
//! runs every version of a program once, so that a burst of load on a shared machine slows
//! every version alike. A specialization's time is the median of several specializations
//! of the program in one tier, each made afresh.
//!
//! Run with `cargo run --release --example interpreter`.

use std::time::Instant;

use dyc::{Arg, Program, RuntimeOptions, Specialized, Tier};

#[path = "../benches/bytecode.rs"]
mod bytecode;
use bytecode::{benches, hand, interpret};

/// Times `fs` side by side: a warm-up round, then `rounds` rounds that each run every
/// closure once, starting one closure further each round (so that no closure always
/// follows the same one); `reset` runs before each run, untimed (it clears the memory the
/// programs use). Returns each closure's last result and its median time in seconds. On a
/// shared machine a burst of load then slows every closure's runs alike, where timing one
/// closure's runs after another's puts it on whichever closure ran during it.
fn side_by_side(
    rounds: usize,
    mut reset: impl FnMut(),
    fs: &mut [&mut dyn FnMut() -> i64],
) -> Vec<(i64, f64)> {
    let n = fs.len();
    let mut times = vec![Vec::with_capacity(rounds); n];
    let mut results = vec![0; n];
    for round in 0..=rounds {
        for k in 0..n {
            let i = (round + k) % n;
            reset();
            let t = Instant::now();
            results[i] = std::hint::black_box(fs[i]());
            if round > 0 {
                times[i].push(t.elapsed().as_secs_f64());
            }
        }
    }
    results
        .into_iter()
        .zip(times.iter_mut().map(|t| median(t)))
        .collect()
}

/// The code made again if any, else the first.
fn last<'a>(first: &'a Specialized, again: &'a Option<(Specialized, f64)>) -> &'a Specialized {
    again.as_ref().map_or(first, |a| &a.0)
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    times[times.len() / 2]
}

fn ms(s: f64) -> String {
    format!("{:.2} ms", s * 1e3)
}

fn geomean(xs: &[f64]) -> f64 {
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}

fn main() {
    let src = include_str!("bytecode.dyc");
    let program = Program::compile_with("bytecode.dyc", src, RuntimeOptions::default())
        .expect("the example compiles");
    let region = program.region("run").expect("region `run`");
    let generic = region.generic().expect("generic code");
    let runs = 7;
    println!(
        "A byte-code interpreter written in the region language, specialized on each program."
    );
    println!(
        "Times are medians of {runs} rounds after a warm-up round, in this process; each round runs every version of a program once, side by side; a specialization's time is the median of {runs} made afresh in a row; memory is cleared between runs, untimed.\n"
    );
    println!(
        "| program | result | Rust interpreter | generic (Cranelift) | specialized | hand translation to Cranelift | hand-written Rust | vs Rust interpreter | vs generic | vs hand translation | vs hand-written Rust |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut vs_interp, mut vs_hand, mut vs_rust) = (Vec::new(), Vec::new(), Vec::new());
    let mut costs = Vec::new();
    let mut tiers = Vec::new();
    let mut stitched = Vec::new();
    let mut made_again = Vec::new();
    // The stitch tier's stencils are made with the program, but for the variants a unit
    // asks for with its operands in other cache registers: a unit copies a variant made
    // ahead instead, and a worker thread makes the one it missed. Each program's first
    // specialization in this process is timed here. Then, in rounds, every program is
    // specialized and run once (so that the units its promotions stitch ask for their
    // stencils too; and made again, as timed below, if they stitched any) and the worker
    // is waited for, until a round copies no variant in place
    // of a missing one: the code timed below is the code once the worker is done.
    let t = Instant::now();
    let mut first_specs = Vec::new();
    let mut first_counts = None;
    let mut rounds = 0;
    loop {
        let before = dyc::stencil_counts().fallbacks;
        for b in benches() {
            let t = Instant::now();
            let s = region
                .specialize_in(&[Arg::from(&b.code[..])], Tier::Stitch)
                .expect("specializes");
            if rounds == 0 {
                first_specs.push((b.name, t.elapsed().as_secs_f64()));
            }
            let mut mem = vec![0i64; b.mem.max(1)];
            s.call(&mut [Arg::from(b.n), Arg::from(&mut mem[..])])
                .expect("runs");
            // (And made again as timed below, when its promotions stitched units.)
            if s.lazy_stats().0 > 0 {
                region
                    .respecialize(&[Arg::from(&b.code[..])], Tier::Stitch, &s)
                    .expect("specializes")
                    .call(&mut [Arg::from(b.n), Arg::from(&mut mem[..])])
                    .expect("runs");
            }
        }
        first_counts.get_or_insert_with(dyc::stencil_counts);
        dyc::settle_stencils();
        rounds += 1;
        if dyc::stencil_counts().fallbacks == before || rounds == 20 {
            break;
        }
    }
    let first_counts = first_counts.expect("one round");
    let t_stencils = t.elapsed().as_secs_f64();
    for b in benches() {
        let code = &b.code;
        let mem = std::cell::RefCell::new(vec![0i64; b.mem.max(1)]);
        let reset = || mem.borrow_mut().fill(0);
        let call = |spec: &Specialized| {
            let mut mem = mem.borrow_mut();
            let mut args = [Arg::from(b.n), Arg::from(&mut mem[..])];
            spec.call(&mut args)
                .expect("runs")
                .and_then(|c| c.as_i64())
                .expect("i64")
        };
        // The region specialized on the program in each tier: `runs` specializations
        // afresh in one tier after another (the last of each is kept), each tier's time
        // their median. (Made one after another, a tier's specializations find the
        // specializer's data in the caches; between other tiers' they did not, and took
        // two to three times as long in the stitch tier: the first specialization in the
        // process, below, is the cold figure.)
        let made_in = [Tier::Optimizing, Tier::Quick, Tier::Stitch];
        let mut spec_times = vec![Vec::with_capacity(runs); made_in.len()];
        let mut specs: [Option<Specialized>; 3] = Default::default();
        for (i, &tier) in made_in.iter().enumerate() {
            for _ in 0..runs {
                let t = Instant::now();
                let spec = region
                    .specialize_in(&[Arg::from(&code[..])], tier)
                    .expect("specializes");
                spec_times[i].push(t.elapsed().as_secs_f64());
                specs[i] = Some(spec);
            }
        }
        let [spec, quick, stitch] = specs.map(|s| s.expect("at least one round"));
        let [t_spec, t_quick_spec, t_stitch_spec] = [0, 1, 2].map(|i| median(&mut spec_times[i]));
        // Each runs once, so that its promotions stitch their units. Code whose promotions
        // stitched units is made again with the values they saw dispatched inline from its
        // entry, as a region's cache does when a version moves up a tier; the tables show
        // that code, in every tier, so that the tiers' code is compared alike.
        let again = |tier, spec: &Specialized| {
            reset();
            call(spec);
            if spec.lazy_stats().0 == 0 {
                return None;
            }
            let t = Instant::now();
            let again = region
                .respecialize(&[Arg::from(&code[..])], tier, spec)
                .expect("specializes");
            Some((again, t.elapsed().as_secs_f64()))
        };
        let spec_again = again(Tier::Optimizing, &spec);
        let quick_again = again(Tier::Quick, &quick);
        let stitch_again = again(Tier::Stitch, &stitch);
        let (spec_last, quick_last, stitch_last) = (
            last(&spec, &spec_again),
            last(&quick, &quick_again),
            last(&stitch, &stitch_again),
        );
        let translated = hand::compile(code);
        // Every version of the program run side by side (the optimizing tier's first code
        // too, when it was made again).
        let mut f_interp = || interpret(code, b.n, &mut mem.borrow_mut());
        let mut f_generic = || {
            let mut mem = mem.borrow_mut();
            let mut args = [
                Arg::from(&code[..]),
                Arg::from(b.n),
                Arg::from(&mut mem[..]),
            ];
            generic
                .call(&mut args)
                .expect("runs")
                .and_then(|c| c.as_i64())
                .expect("i64")
        };
        let mut f_spec = || call(spec_last);
        let mut f_quick = || call(quick_last);
        let mut f_stitch = || call(stitch_last);
        let mut f_hand = || {
            translated
                .run(b.n, &mut mem.borrow_mut())
                .expect("no fault")
        };
        let mut f_native = || (b.native)(std::hint::black_box(b.n));
        let mut f_first = || call(&spec);
        let mut fs: Vec<&mut dyn FnMut() -> i64> = vec![
            &mut f_interp,
            &mut f_generic,
            &mut f_spec,
            &mut f_quick,
            &mut f_stitch,
            &mut f_hand,
            &mut f_native,
        ];
        if spec_again.is_some() {
            fs.push(&mut f_first);
        }
        let timed = side_by_side(runs, reset, &mut fs);
        let [(r_interp, t_interp), (r_generic, t_generic), (r_spec, t_specialized), (r_quick, t_quick), (r_stitch, t_stitch), (r_hand, t_hand), (r_native, t_native)] =
            [0, 1, 2, 3, 4, 5, 6].map(|i| timed[i]);
        if let Some((again, t_make)) = &spec_again {
            let (r_first, t_first) = timed[7];
            assert_eq!(r_interp, r_first, "{}: specialized code disagrees", b.name);
            made_again.push((
                b.name,
                1 + spec.lazy_stats().0,
                t_first,
                1 + again.lazy_stats().0,
                t_specialized,
                *t_make,
            ));
        }
        for (what, r) in [
            ("generic code", r_generic),
            ("specialized code", r_spec),
            ("quick-tier code", r_quick),
            ("stitch-tier code", r_stitch),
            ("the hand translation", r_hand),
            ("the hand-written version", r_native),
        ] {
            assert_eq!(r_interp, r, "{}: {what} disagrees", b.name);
        }
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.1}x | {:.1}x | {:.2}x | {:.2}x |",
            b.name,
            r_spec,
            ms(t_interp),
            ms(t_generic),
            ms(t_specialized),
            ms(t_hand),
            ms(t_native),
            t_interp / t_specialized,
            t_generic / t_specialized,
            t_hand / t_specialized,
            t_native / t_specialized,
        );
        vs_interp.push(t_interp / t_specialized);
        vs_hand.push(t_hand / t_specialized);
        vs_rust.push(t_native / t_specialized);
        // Units stitched at promotions while the program ran count too.
        let (units, st, t_spec) = with_lazy(&spec, t_spec);
        let (_, st_quick, t_quick_spec) = with_lazy(&quick, t_quick_spec);
        let (_, st_stitch, t_stitch_spec) = with_lazy(&stitch, t_stitch_spec);
        stitched.push((
            b.name,
            code.len() / 4,
            (t_spec, t_specialized),
            (st_stitch, t_stitch_spec, t_stitch),
            t_interp,
        ));
        tiers.push((
            b.name,
            (st, t_spec, t_specialized),
            (st_quick, t_quick_spec, t_quick),
        ));
        costs.push((b.name, code.len() / 4, units, st, t_spec, translated));
    }
    println!(
        "\nGeometric means of specialized code's speedup: {:.1}x over the Rust interpreter, {:.2}x over the hand translation, {:.2}x over hand-written Rust (above 1 is faster).",
        geomean(&vs_interp),
        geomean(&vs_hand),
        geomean(&vs_rust)
    );
    if !made_again.is_empty() {
        println!(
            "\nSpecialized code whose promotions stitched units while it ran is made again with the values they saw dispatched inline from its entry (`Region::respecialize`, what a region's cache does when a version moves up to the optimizing tier); the table above, and every tier in the tables below, show the code made again:\n"
        );
        println!(
            "| program | units before | code before | units after | code after | made again in |"
        );
        println!("|---|---|---|---|---|---|");
        for (name, before, t_before, after, t_after, t_make) in &made_again {
            println!(
                "| {name} | {before} | {} | {after} | {} | {} |",
                ms(*t_before),
                ms(*t_after),
                ms(*t_make)
            );
        }
    }
    println!(
        "\nWhat each program cost to compile (per byte-code instruction in parentheses; specialization includes the units promotions stitched while it ran):\n"
    );
    println!(
        "| program | byte-code insts | specialization | units | CLIF insts | hand translation compile | hand CLIF insts | CLIF ratio | time ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut per_inst = Vec::new();
    for (name, count, units, st, t_spec, hand) in &costs {
        let k = *count as f64;
        let t_hand = hand.compile_ns as f64 * 1e-9;
        println!(
            "| {name} | {count} | {} ({:.1} us) | {units} | {} ({:.1}) | {} ({:.1} us) | {} ({:.1}) | {:.2} | {:.2} |",
            ms(*t_spec),
            t_spec * 1e6 / k,
            st.insts,
            st.insts as f64 / k,
            ms(t_hand),
            t_hand * 1e6 / k,
            hand.clif_insts,
            hand.clif_insts as f64 / k,
            st.insts as f64 / hand.clif_insts as f64,
            t_spec / t_hand,
        );
        per_inst.push((
            st.stitch_ns as f64 / st.insts as f64,
            st.compile_ns as f64 / st.insts as f64,
        ));
    }
    let stitch = per_inst.iter().map(|p| p.0).sum::<f64>() / per_inst.len() as f64;
    let compile = per_inst.iter().map(|p| p.1).sum::<f64>() / per_inst.len() as f64;
    println!(
        "\nSpecialization cost per generated Cranelift instruction (mean over programs): {stitch:.0} ns stitching + {compile:.0} ns Cranelift compilation"
    );
    println!(
        "\nThe two tiers (specialization includes the units promotions stitched while the code ran; ns per generated Cranelift instruction in parentheses):\n"
    );
    println!(
        "| program | optimizing: specialization | quick: specialization | compile speedup | optimizing: code | quick: code | quick code slowdown |"
    );
    println!("|---|---|---|---|---|---|---|");
    let (mut speedups, mut slowdowns) = (Vec::new(), Vec::new());
    for (name, (st_o, spec_o, run_o), (st_q, spec_q, run_q)) in &tiers {
        println!(
            "| {name} | {} ({:.0}) | {} ({:.0}) | {:.2}x | {} | {} | {:.2}x |",
            ms(*spec_o),
            spec_o * 1e9 / st_o.insts as f64,
            ms(*spec_q),
            spec_q * 1e9 / st_q.insts as f64,
            spec_o / spec_q,
            ms(*run_o),
            ms(*run_q),
            run_q / run_o,
        );
        speedups.push(spec_o / spec_q);
        slowdowns.push(run_q / run_o);
    }
    println!(
        "\nGeometric means: the quick tier specializes {:.2}x faster and its code runs {:.2}x slower than the optimizing tier's.",
        geomean(&speedups),
        geomean(&slowdowns)
    );
    println!(
        "\nEach program's first stitch-tier specialization in this process: {}; stencils made while stitching: {}, by the worker thread meanwhile: {}, copies of a variant made ahead instead: {}.",
        first_specs
            .iter()
            .map(|(name, t)| format!("{name} {:.0} us", t * 1e6))
            .collect::<Vec<_>>()
            .join(", "),
        first_counts.while_stitching,
        first_counts.background,
        first_counts.fallbacks,
    );
    println!(
        "\nThe stitch tier (copy-and-patch) against the optimizing tier (specialization includes the units promotions stitched; machine instructions as the stencils' Cranelift listings count them; timed once the worker had made the stencils units missed: {rounds} rounds, {} in all, mostly running):\n",
        ms(t_stencils)
    );
    println!(
        "| program | optimizing: specialization | stitch: specialization | per byte-code inst | stencils | machine insts | per machine inst | specialization speedup | optimizing: code | stitch: code | stitch code slowdown | stitch vs Rust interpreter |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut speedups, mut slowdowns, mut vs_interp) = (Vec::new(), Vec::new(), Vec::new());
    for (name, count, (spec_o, run_o), (st, spec_s, run_s), t_interp) in &stitched {
        println!(
            "| {name} | {} | {:.1} us | {:.0} ns | {} | {} | {:.1} ns | {:.0}x | {} | {} | {:.2}x | {:.2}x |",
            ms(*spec_o),
            spec_s * 1e6,
            spec_s * 1e9 / *count as f64,
            st.stencils,
            st.insts,
            spec_s * 1e9 / st.insts as f64,
            spec_o / spec_s,
            ms(*run_o),
            ms(*run_s),
            run_s / run_o,
            t_interp / run_s,
        );
        speedups.push(spec_o / spec_s);
        slowdowns.push(run_s / run_o);
        vs_interp.push(t_interp / run_s);
    }
    println!(
        "\nGeometric means: the stitch tier specializes {:.0}x faster than the optimizing tier; its code runs {:.2}x slower than the optimizing tier's and {:.2}x faster than the Rust interpreter.",
        geomean(&speedups),
        geomean(&slowdowns),
        geomean(&vs_interp)
    );
}

/// Units, cost and time of a specialization, the units promotions stitched while it ran
/// included.
fn with_lazy(spec: &Specialized, t_spec: f64) -> (usize, dyc_stitcher::runtime::UnitStats, f64) {
    let (units, lazy) = spec.lazy_stats();
    let mut st = spec.stats();
    st.add(&lazy);
    (
        1 + units,
        st,
        t_spec + (lazy.stitch_ns + lazy.compile_ns) as f64 * 1e-9,
    )
}

//! A Brainfuck interpreter (`examples/bf.dyc`: static program, dynamic tape, input and
//! output) specialized on random programs in every tier, eagerly and lazily stitched,
//! agrees with the reference interpreter (results, errors with their source positions,
//! and every byte of the tape and the output) and with the same machine in plain Rust.
//! The program's loops are dynamic branches between copies of the dispatch for static
//! `pc`s, so the specialized code has loops nested as the program's, entered and left by
//! jumps the stitcher lays out; the tape pointer is dynamic after a loop. The code runs
//! without fuel, under a watchdog; programs that do not end within a step budget in plain
//! Rust are only specialized, not run. Each program's stitch-tier specialization is also
//! made again from the first (`Region::respecialize`) half way through its inputs.

use dyc::interp::{parse_args, Interpreter, Memory, Val};
use dyc::ir::{Const, Module};
use dyc::{Arg, Program, RuntimeOptions, Tier};

mod common;
use common::{outcome, Rng};

const BF: &str = include_str!("../examples/bf.dyc");

/// A program of up to 40 operations with balanced brackets nested at most three deep, and
/// the target of each bracket.
fn random_program(rng: &mut Rng) -> (Vec<u8>, Vec<i64>) {
    let n = 1 + rng.below(40) as usize;
    let mut code = Vec::new();
    let mut open = Vec::new();
    // How far right the operations so far moved, loops taken once: `<` mostly stays on
    // the tape.
    let mut right = 0;
    while code.len() < n || !open.is_empty() {
        let c = match rng.below(16) {
            0..=3 => b'+',
            4..=5 => b'-',
            6..=8 => b'>',
            9..=10 if right > 0 || rng.below(8) == 0 => b'<',
            11 => b'.',
            12 => b',',
            13 if open.len() < 3 && code.len() < n => b'[',
            13 | 14 if !open.is_empty() => b']',
            _ => b'x', // ignored
        };
        match c {
            b'>' => right += 1,
            b'<' => right -= 1,
            b'[' => open.push(code.len()),
            b']' => {
                open.pop();
            }
            _ => {}
        }
        code.push(c);
    }
    (code.clone(), jumps(&code))
}

fn jumps(code: &[u8]) -> Vec<i64> {
    let mut jump = vec![0i64; code.len()];
    let mut open = Vec::new();
    for (k, &c) in code.iter().enumerate() {
        if c == b'[' {
            open.push(k);
        } else if c == b']' {
            let o = open.pop().expect("balanced");
            (jump[o], jump[k]) = (k as i64, o as i64);
        }
    }
    jump
}

/// What the machine does in plain Rust: `Some((bytes written, tape, output))`, or
/// `Some` of an error's name, or `None` past `steps` operations.
fn reference(
    code: &[u8],
    jump: &[i64],
    tape: &mut [u8],
    input: &[u8],
    out: &mut [u8],
    steps: u32,
) -> Option<Result<i64, &'static str>> {
    run_from(code, jump, tape, 0, input, out, steps)
}

/// [`reference`] without input or output, from cell `start`.
fn reference_from(
    code: &[u8],
    jump: &[i64],
    tape: &mut [u8],
    start: i64,
    steps: u32,
) -> Option<Result<i64, &'static str>> {
    run_from(code, jump, tape, start, &[], &mut [], steps)
}

fn run_from(
    code: &[u8],
    jump: &[i64],
    tape: &mut [u8],
    start: i64,
    input: &[u8],
    out: &mut [u8],
    mut steps: u32,
) -> Option<Result<i64, &'static str>> {
    let (mut pc, mut p, mut i, mut o) = (0usize, start, 0usize, 0usize);
    let cells = tape.len();
    let cell = |p: i64| usize::try_from(p).ok().filter(|&p| p < cells);
    while pc < code.len() {
        steps = steps.checked_sub(1)?;
        match code[pc] {
            b'+' | b'-' | b',' | b'.' | b'[' | b']' => {
                let Some(c) = cell(p) else {
                    return Some(Err("tape"));
                };
                match code[pc] {
                    b'+' => tape[c] = tape[c].wrapping_add(1),
                    b'-' => tape[c] = tape[c].wrapping_sub(1),
                    b'.' => {
                        let Some(w) = out.get_mut(o) else {
                            return Some(Err("output"));
                        };
                        *w = tape[c];
                        o += 1;
                    }
                    b',' => {
                        let Some(&b) = input.get(i) else {
                            return Some(Err("input"));
                        };
                        tape[c] = b;
                        i += 1;
                    }
                    b'[' if tape[c] == 0 => pc = jump[pc] as usize,
                    b']' if tape[c] != 0 => pc = jump[pc] as usize,
                    _ => {}
                }
            }
            b'>' => p += 1,
            b'<' => p -= 1,
            _ => {}
        }
        pc += 1;
    }
    Some(Ok(o as i64))
}

fn interpret(m: &Module, f: &str, args: &str) -> (String, String) {
    let id = m.func_by_name(f).expect("function");
    let mut mem = Memory::default();
    let vals = parse_args(&m.funcs[id].sig.params, args, &mut mem).expect("arguments");
    let got = common::interpreted(Interpreter::new(m).call(id, &vals, &mut mem));
    let after: Vec<String> = vals
        .iter()
        .filter(|v| matches!(v, Val::Slice(s) if s.mutable))
        .map(|v| dyc::interp::format_val(*v, &mem))
        .collect();
    (got, after.join(" "))
}

fn program(policy: &str) -> Program {
    let opts = RuntimeOptions {
        tiers: common::no_tier_up(),
        ..RuntimeOptions::default()
    };
    let src = BF.replace("cache_all, eager", &format!("cache_all, {policy}"));
    Program::compile_with("bf.dyc", &src, opts).expect("compiles")
}

fn text(code: &[u8]) -> String {
    String::from_utf8_lossy(code).into_owned()
}

#[test]
fn a_brainfuck_interpreter_agrees_with_the_interpreter_in_every_tier() {
    common::watchdog();
    let cases = common::cases(300);
    for policy in ["eager", "lazy"] {
        let module = dyc::lang::compile("bf.dyc", &BF.replace("eager", policy)).expect("ok");
        let program = program(policy);
        let region = program.region("run").expect("region");
        let (mut ended, mut faults, mut looped) = (0, 0, 0);
        for seed in 0..cases {
            let mut rng = Rng(seed);
            let (code, jump) = random_program(&mut rng);
            let key = [Arg::from(&code[..]), Arg::from(&jump[..])];
            let mut specs: Vec<_> = [Tier::Stitch, Tier::Quick, Tier::Optimizing]
                .map(|t| {
                    let s = region.specialize_in(&key, t);
                    s.unwrap_or_else(|e| panic!("{policy}, {:?}, {t:?}: {e}", text(&code)))
                })
                .into();
            for round in 0..4 {
                // Half way, the stitch tier's specialization (lazy: with the units its
                // branches stitched) is made again and checked too.
                if round == 2 {
                    let again = region.respecialize(&key, Tier::Stitch, &specs[0]);
                    specs.push(again.expect("specializes again"));
                }
                let cells = 4 + rng.below(28) as usize;
                let tape0: Vec<u8> = (0..cells).map(|_| rng.below(4) as u8).collect();
                let input: Vec<u8> = (0..rng.below(24)).map(|_| rng.below(256) as u8).collect();
                let room = rng.below(24) as usize;
                let (mut tape, mut out) = (tape0.clone(), vec![0u8; room]);
                let Some(want) = reference(&code, &jump, &mut tape, &input, &mut out, 5_000) else {
                    continue;
                };
                looped += usize::from(code.contains(&b'['));
                let args = format!(
                    "{code:?}, {jump:?}, {tape0:?}, {input:?}, {:?}",
                    vec![0u8; room]
                );
                let (got, after) = interpret(&module, "run", &args);
                match want {
                    Ok(n) => {
                        ended += 1;
                        assert_eq!(got, format!("= {:?}", Const::from(n)), "{:?}", text(&code));
                        assert_eq!(after, format!("{tape:?} {out:?}"), "{:?}", text(&code));
                    }
                    Err(_) => {
                        faults += 1;
                        assert!(
                            got.starts_with("-> out of bounds"),
                            "{got}: {:?}",
                            text(&code)
                        );
                    }
                }
                for (k, s) in specs.iter().enumerate() {
                    common::progress(format!(
                        "{policy}, seed {seed}, tier {k}: {:?}",
                        text(&code)
                    ));
                    let (mut t, mut o) = (tape0.clone(), vec![0u8; room]);
                    let r = s.call(&mut [
                        Arg::from(&mut t[..]),
                        Arg::from(&input[..]),
                        Arg::from(&mut o[..]),
                    ]);
                    let what = format!("{policy}, seed {seed}, tier {k}: {:?}", text(&code));
                    assert_eq!(outcome(r), got, "{what}");
                    assert_eq!(format!("{t:?} {o:?}"), after, "{what}");
                }
            }
        }
        // The machine with its tape in a local array.
        let cells = program.region("cells").expect("region");
        let mut cell_runs = 0;
        for seed in 0..cases / 4 {
            let mut rng = Rng(seed ^ 0x5eed);
            let (code, jump) = random_program(&mut rng);
            let key = [Arg::from(&code[..]), Arg::from(&jump[..])];
            let specs: Vec<_> = [Tier::Stitch, Tier::Quick, Tier::Optimizing]
                .map(|t| cells.specialize_in(&key, t).expect("specializes"))
                .into();
            for _ in 0..4 {
                let start = rng.below(18) as i64 - 1;
                // `.` and `,` do nothing in `cells`.
                let quiet: Vec<u8> = code
                    .iter()
                    .map(|&c| if c == b'.' || c == b',' { b'x' } else { c })
                    .collect();
                let mut tape = [0u8; 16];
                let Some(want) = reference_from(&quiet, &jump, &mut tape, start, 5_000) else {
                    continue;
                };
                let args = format!("{code:?}, {jump:?}, {start}");
                let (got, _) = interpret(&module, "cells", &args);
                match want {
                    Ok(_) => {
                        let sum = tape
                            .iter()
                            .fold(0i64, |s, &c| s.wrapping_mul(31).wrapping_add(c.into()));
                        assert_eq!(
                            got,
                            format!("= {:?}", Const::from(sum)),
                            "{:?}",
                            text(&code)
                        );
                    }
                    Err(_) => assert!(
                        got.starts_with("-> out of bounds"),
                        "{got}: {:?}",
                        text(&code)
                    ),
                }
                for (k, s) in specs.iter().enumerate() {
                    let what = format!("{policy}, cells, seed {seed}, tier {k}: {:?}", text(&code));
                    common::progress(what.clone());
                    let r = s.call(&mut [Arg::from(start)]);
                    assert_eq!(outcome(r), got, "{what}");
                }
                cell_runs += 1;
            }
        }
        assert!(
            cell_runs * 2 >= cases,
            "{policy}: {cell_runs} runs of cells"
        );
        // Programs that end, that fault, and that loop were all compared.
        let runs = (cases * 4) as usize;
        println!("{policy}: {ended} ended, {faults} faults, {looped} with loops of {runs}");
        assert!(ended * 4 >= runs, "{policy}: {ended} ended of {runs}");
        assert!(faults * 20 >= runs, "{policy}: {faults} faults");
        assert!(looped * 10 >= runs, "{policy}: {looped} with loops");
    }
}

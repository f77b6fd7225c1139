//! Random programs of two more interpreter shapes, in every tier (the stitch tier with
//! every way of meeting a missing stencil, the optimizing and the quick tier, each called
//! three times so that versions move up), against the reference interpreter: the result,
//! or the error and its source position.
//!
//! - `tests/lang/programs/stack_vm_calls.dyc`: a stack machine whose operand stack (16
//!   slots), return stack (8) and `f64` registers (4) are local arrays, whose stack
//!   pointers are run-time constants along with its program and program counter, and
//!   whose `RET` promotes the return address it pops (an indirect jump through a value
//!   the code stored).
//! - `tests/lang/programs/narrow_registers.dyc`: a register machine over `u32` and `i8`
//!   registers: wrapping at 32 and 8 bits, unsigned division, comparison and `min`,
//!   shifts by static amounts, sign-extending casts, remainders of `i8` (`MIN % -1`).
//!
//! Programs are generated instruction by instruction, with jump and call targets at
//! random instructions; many fault (an empty or a full stack, division by zero, a call
//! too deep), and those faults must come back alike too.

use dyc::interp::{ErrorKind, Interpreter, Memory, Val};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Error, Limits, Misses, Program, RuntimeOptions, Tier, Tiers};
use dyc_templates::template::FaultKind;

mod common;
use common::Rng;

const FUEL: u64 = 100_000;

/// A stack machine program of `2..16` instructions and a final `HALT`, mostly keeping the
/// stack deep enough for each instruction.
fn stack_program(rng: &mut Rng) -> Vec<i64> {
    let mut code = Vec::new();
    let mut starts = Vec::new();
    let mut targets = Vec::new();
    let mut depth = 0i64;
    for _ in 0..2 + rng.below(14) {
        starts.push(code.len() as i64);
        let mut op = rng.below(16) as i64;
        let needs = match op {
            2..=5 | 7 => 2,
            0 | 6 | 8 | 13 | 15 => 1,
            _ => 0,
        };
        if depth < needs && rng.below(8) != 0 {
            op = if rng.below(2) == 0 { 1 } else { 12 };
        }
        code.push(op);
        match op {
            1 => {
                code.push(rng.below(7) as i64 - 1);
                depth += 1;
            }
            8..=10 => {
                targets.push(code.len());
                code.push(0);
                depth -= i64::from(op == 8);
            }
            13 | 14 => {
                code.push(rng.below(5) as i64);
                depth += if op == 13 { -1 } else { 1 };
            }
            2..=5 | 15 => depth -= 1,
            6 | 12 => depth += 1,
            _ => {}
        }
        depth = depth.min(12);
    }
    starts.push(code.len() as i64);
    code.push(0);
    for t in targets {
        code[t] = starts[rng.below(starts.len() as u64) as usize];
    }
    code
}

/// A register machine program of `2..12` instructions (of 4 slots) and a final `HALT`:
/// shifts by 0 to 39, constants of -150 to 149 (beyond `i8` and negative as `u32`),
/// multipliers of -4 to 4, jump targets at instructions or just past the last.
fn register_program(rng: &mut Rng) -> Vec<i64> {
    let n = 2 + rng.below(10) as i64;
    let mut code = Vec::new();
    for _ in 0..n {
        let op = rng.below(16) as i64;
        let a = rng.below(8) as i64;
        let target = 4 * rng.below(n as u64 + 1) as i64;
        let constant = rng.below(300) as i64 - 150;
        let b = match op {
            1 | 6 => constant,
            11 => target,
            _ => rng.below(8) as i64,
        };
        let c = match op {
            4 | 5 => rng.below(40) as i64,
            8 => rng.below(9) as i64 - 4,
            10 => target,
            _ => rng.below(8) as i64,
        };
        code.extend([op, a, b, c]);
    }
    code.extend([0, rng.below(8) as i64, 0, 0]);
    code
}

/// Whether a call ended on a specialization budget exceeded, at its entry or in a
/// promotion's unit.
fn exceeds_budget(r: &Result<Option<Const>, Error>) -> bool {
    match r {
        Err(Error::Budget { .. }) => true,
        Err(Error::Run(e)) => {
            e.kind == FaultKind::Specialization
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("specialization budget exceeded"))
        }
        _ => false,
    }
}

/// Compiles `src` (whose region `run(code: [i64], x: i64)`) in every tier and way of
/// meeting a missing stencil, and checks `cases` random programs and inputs of `random`
/// against the interpreter.
fn agrees(file: &str, src: &str, cases: u64, mut random: impl FnMut(&mut Rng) -> (Vec<i64>, i64)) {
    common::watchdog();
    let m = dyc::lang::compile(file, src).expect("compiles");
    let id = m.func_by_name("run").expect("fn run");
    let configs = [
        (Tier::Stitch, Misses::Background),
        (Tier::Stitch, Misses::Fallback),
        (Tier::Stitch, Misses::Make),
        (Tier::Optimizing, Misses::Background),
        (Tier::Quick, Misses::Background),
    ];
    let programs: Vec<Program> = configs
        .iter()
        .map(|&(first, stencil_misses)| {
            let opts = RuntimeOptions {
                fuel: Some(FUEL),
                max_depth: 199,
                stencil_misses,
                // (Every program specialized: none runs the generic code for want of room
                // in the entry's cache; the least recently used are evicted.)
                limits: Limits {
                    max_versions: usize::MAX,
                    max_specializations: 64,
                    ..Limits::default()
                },
                tiers: Tiers {
                    first,
                    hot_calls: 2,
                    ..Tiers::default()
                },
                ..RuntimeOptions::default()
            };
            Program::compile_with(file, src, opts).expect("compiles")
        })
        .collect();
    let mut rng = Rng(0x5eed_57ac);
    let (mut results, mut faults, mut budgets) = (0, 0, 0);
    for case in 0..cases {
        let (code, x) = random(&mut rng);
        let mut mem = Memory::default();
        let words = code.iter().map(|&w| Const::Int(Scalar::I64, w as u64));
        let args = [
            mem.add(Scalar::I64, words.collect(), false),
            Val::Scalar(Const::Int(Scalar::I64, x as u64)),
        ];
        let mut interp = Interpreter::new(&m);
        interp.fuel = FUEL;
        interp.max_depth = 200;
        let r = interp.call(id, &args, &mut mem);
        if matches!(&r, Err(e) if e.kind == ErrorKind::FuelExhausted) {
            continue;
        }
        match r {
            Ok(_) => results += 1,
            Err(_) => faults += 1,
        }
        let expected = common::interpreted(r);
        for (p, config) in programs.iter().zip(&configs) {
            let region = p.region("run").expect("region");
            for call in 0..3 {
                common::progress(format!(
                    "{file}, case {case}, {config:?}, call {call}: {code:?}"
                ));
                let r = region.call(&mut [Arg::from(&code[..]), Arg::from(x)]);
                // (A program whose static state grows without end in a loop, a call in a
                // loop, specializes without end: a promotion's unit that exceeds its
                // budget is an error of its own, which the interpreter cannot give.)
                if exceeds_budget(&r) {
                    budgets += 1;
                    break;
                }
                let got = common::outcome(r);
                assert_eq!(
                    expected, got,
                    "{file}, case {case}, {config:?}, call {call}: run({code:?}, {x})"
                );
            }
        }
    }
    println!(
        "{file}: {results} results and {faults} faults agreed; {budgets} runs ended on a budget"
    );
    // (Enough of both kinds that the property says something.)
    assert!(results * 10 >= cases && faults * 10 >= cases);
}

#[test]
fn every_tier_agrees_with_the_interpreter_on_random_stack_machine_programs() {
    let src = include_str!("lang/programs/stack_vm_calls.dyc");
    agrees("stack_vm_calls.dyc", src, common::cases(300), |rng| {
        (stack_program(rng), rng.below(12) as i64 - 2)
    });
}

#[test]
fn every_tier_agrees_with_the_interpreter_on_random_narrow_register_programs() {
    let src = include_str!("lang/programs/narrow_registers.dyc");
    agrees("narrow_registers.dyc", src, common::cases(300), |rng| {
        (register_program(rng), rng.below(1000) as i64 - 500)
    });
}

//! Random programs of a second interpreter shape, `tests/lang/programs/stack_vm_calls.dyc`:
//! a stack machine whose operand stack (16 slots), return stack (8) and `f64` registers
//! (4) are local arrays, whose stack pointers are run-time constants along with its
//! program and program counter, and whose `RET` promotes the return address it pops (an
//! indirect jump through a value the code stored). Programs are generated instruction by
//! instruction, mostly keeping the stack deep enough, with jump and call targets at random
//! instructions; many still fault (an empty stack, a full one, division by zero, a call
//! too deep), and those faults must come back alike too. Every tier (the stitch tier with
//! every way of meeting a missing stencil, the optimizing and the quick tier, each called
//! three times so that versions move up) agrees with the interpreter on the result or
//! the error and its source position.

use dyc::interp::{ErrorKind, Interpreter, Memory, Val};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Misses, Program, RuntimeOptions, Tier, Tiers};

mod common;
use common::Rng;

const SRC: &str = include_str!("lang/programs/stack_vm_calls.dyc");
const FUEL: u64 = 100_000;

/// A program of `2..16` instructions and a final `HALT`, as the module doc says.
fn random_program(rng: &mut Rng) -> Vec<i64> {
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

#[test]
fn every_tier_agrees_with_the_interpreter_on_random_stack_machine_programs() {
    common::watchdog();
    let m = dyc::lang::compile("stack_vm_calls.dyc", SRC).expect("compiles");
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
                tiers: Tiers {
                    first,
                    hot_calls: 2,
                    ..Tiers::default()
                },
                ..RuntimeOptions::default()
            };
            Program::compile_with("stack_vm_calls.dyc", SRC, opts).expect("compiles")
        })
        .collect();
    let mut rng = Rng(0x5eed_57ac);
    let (mut results, mut faults) = (0, 0);
    for case in 0..common::cases(300) {
        let code = random_program(&mut rng);
        let x = rng.below(12) as i64 - 2;
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
                common::progress(format!("case {case}, {config:?}, call {call}: {code:?}"));
                let got = common::outcome(region.call(&mut [Arg::from(&code[..]), Arg::from(x)]));
                assert_eq!(
                    expected, got,
                    "case {case}, {config:?}, call {call}: run({code:?}, {x})"
                );
            }
        }
    }
    println!("{results} results and {faults} faults agreed");
    // (Enough of both kinds that the property says something.)
    assert!(results * 10 >= common::cases(300) && faults * 10 >= common::cases(300));
}

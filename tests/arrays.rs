//! Local arrays kept in memory ([`dyc::RuntimeOptions::max_array_values`]): an interpreter
//! whose operand stack has 64 slots, specialized on random stack programs in every tier,
//! with its stack in memory and as values, under eager and lazy stitching, agrees with the
//! reference interpreter on results and on errors (kind and source position); which
//! arrays live in memory; and what a unit that only returns leaves of its stores.

use dyc::bta::Mode;
use dyc::interp::{parse_args, Interpreter, Memory};
use dyc::ir::{Const, Module};
use dyc::{Arg, Misses, Program, RuntimeOptions, Tier};

mod common;
use common::{outcome, Rng};

/// A stack machine: each instruction is two slots, op and operand; `st` is the operand
/// stack and the variables (slots 8 to 15), `sp` and `pc` are static.
const STACK_VM: &str = r#"
fn run(code: [i64], x: i64) -> i64 {
    var st: [i64; 64];
    var sp: i64 = 1;
    var pc: i64 = 0;
    st[0] = x;
    make_static(code, pc, sp: cache_all, POLICY);
    loop {
        let op = code@[pc];
        let a = code@[pc + 1];
        pc = pc + 2;
        switch op {
            case 0: return st[sp - 1];
            case 1: st[sp] = a; sp = sp + 1;
            case 2: st[sp - 2] = st[sp - 2] + st[sp - 1]; sp = sp - 1;
            case 3: st[sp - 2] = st[sp - 2] * st[sp - 1]; sp = sp - 1;
            case 4: st[sp] = st[a]; sp = sp + 1;
            case 5: st[a] = st[sp - 1]; sp = sp - 1;
            case 6:
                if st[sp - 1] < a {
                    pc = pc + 2;
                }
                sp = sp - 1;
            case 7: pc = a;
            case 8: st[sp - 1] = st[st[sp - 1] & 63];
            case 9: st[st[sp - 2] & 63] = st[sp - 1]; sp = sp - 2;
            case 10: st[sp - 1] = st[sp - 1] / a;
            case 11:
                pc = st[sp - 1];
                sp = sp - 1;
                make_static(pc: promote_lazy);
            case 12: st[sp - 1] = st[st[sp - 1]];
            default: trap;
        }
    }
}
"#;

#[derive(Clone, Copy, Debug)]
enum I {
    Halt,
    Push(i64),
    Add,
    Mul,
    Load(i64),
    Store(i64),
    /// Pops; skips the next instruction if the value is below the operand.
    SkipLt(i64),
    Jmp(usize),
    /// Reads the slot the top names (masked), in place of the top.
    Pick,
    /// Pops a value and a slot (masked), and stores the value there.
    Poke,
    Div(i64),
    /// Pushes the address of a label.
    PushL(usize),
    /// Pops an address and jumps there (a promotion).
    JmpC,
    /// Reads the slot the top names, unmasked (out of bounds faults).
    Unmasked,
    Label(usize),
}

fn assemble(prog: &[I]) -> Vec<i64> {
    let mut at = Vec::new();
    let mut pc = 0;
    for i in prog {
        match i {
            I::Label(l) => {
                if at.len() <= *l {
                    at.resize(*l + 1, 0);
                }
                at[*l] = pc;
            }
            _ => pc += 2,
        }
    }
    let mut code = Vec::new();
    for &i in prog {
        let (op, a) = match i {
            I::Halt => (0, 0),
            I::Push(k) => (1, k),
            I::Add => (2, 0),
            I::Mul => (3, 0),
            I::Load(s) => (4, s),
            I::Store(s) => (5, s),
            I::SkipLt(k) => (6, k),
            I::Jmp(l) => (7, at[l]),
            I::Pick => (8, 0),
            I::Poke => (9, 0),
            I::Div(k) => (10, k),
            I::PushL(l) => (1, at[l]),
            I::JmpC => (11, 0),
            I::Unmasked => (12, 0),
            I::Label(_) => continue,
        };
        code.extend([op, a]);
    }
    code
}

/// Balanced sequences (the stack is as deep after each as before it), with nested
/// counted loops, skips, jumps through a promoted address, and accesses at indices known
/// only at run time.
fn block(rng: &mut Rng, depth: usize, labels: &mut usize, out: &mut Vec<I>) {
    let var = |rng: &mut Rng| 8 + rng.below(8) as i64;
    let label = |labels: &mut usize| {
        *labels += 1;
        *labels
    };
    for _ in 0..1 + rng.below(5) {
        match rng.below(12) {
            0 | 1 => {
                out.extend([I::Load(var(rng)), I::Push(rng.below(9) as i64 - 4)]);
                out.push([I::Add, I::Mul][rng.below(2) as usize]);
                out.push(I::Store(var(rng)));
            }
            2 => out.extend([I::Load(var(rng)), I::Load(0), I::Add, I::Store(var(rng))]),
            3 => {
                let l = label(labels);
                out.extend([I::Load(var(rng)), I::SkipLt(rng.below(5) as i64), I::Jmp(l)]);
                block(rng, depth + 1, labels, out);
                out.push(I::Label(l));
            }
            4 if depth < 2 => {
                let (c, top) = (16 + depth as i64, label(labels));
                out.extend([I::Push(1 + rng.below(3) as i64), I::Store(c), I::Label(top)]);
                block(rng, depth + 1, labels, out);
                out.extend([I::Load(c), I::Push(-1), I::Add, I::Store(c)]);
                out.extend([I::Load(c), I::SkipLt(1), I::Jmp(top)]);
            }
            5 => {
                let l = label(labels);
                out.extend([I::PushL(l), I::JmpC]);
                block(rng, depth + 1, labels, out);
                out.push(I::Label(l));
            }
            6 => out.extend([I::Load(var(rng)), I::Pick, I::Store(var(rng))]),
            7 => out.extend([I::Load(var(rng)), I::Load(var(rng)), I::Poke]),
            8 => out.extend([
                I::Load(var(rng)),
                I::Div([3, -2, 0][rng.below(3) as usize]),
                I::Store(var(rng)),
            ]),
            9 => out.extend([I::Load(var(rng)), I::Unmasked, I::Store(var(rng))]),
            _ => out.extend([I::Push(rng.below(100) as i64), I::Store(var(rng))]),
        }
    }
}

fn random_program(rng: &mut Rng) -> Vec<i64> {
    let mut prog = vec![I::Load(0), I::Store(8)];
    let mut labels = 0;
    block(rng, 0, &mut labels, &mut prog);
    prog.extend([I::Load(8 + rng.below(8) as i64), I::Halt]);
    assemble(&prog)
}

fn source(policy: &str) -> String {
    STACK_VM.replace("POLICY", policy)
}

fn program(policy: &str, max_array_values: u32) -> Program {
    let opts = RuntimeOptions {
        fuel: Some(1_000_000),
        tiers: common::no_tier_up(),
        max_array_values,
        // (Tests compare the code of two programs: every stencil made when asked for.)
        stencil_misses: Misses::Make,
        ..RuntimeOptions::default()
    };
    Program::compile_with("stack.dyc", &source(policy), opts).expect("compiles")
}

fn interpret(m: &Module, code: &[i64], x: i64) -> String {
    let id = m.func_by_name("run").expect("run");
    let mut mem = Memory::default();
    let text = format!("{code:?}, {x}");
    let args = parse_args(&m.funcs[id].sig.params, &text, &mut mem).expect("arguments");
    let mut interp = Interpreter::new(m);
    interp.fuel = 1_000_000;
    common::interpreted(interp.call(id, &args, &mut mem))
}

#[test]
fn a_stack_machine_agrees_with_the_interpreter_with_its_stack_in_memory_or_as_values() {
    let cases = common::cases(150);
    for policy in ["eager", "lazy"] {
        let module = dyc::lang::compile("stack.dyc", &source(policy)).expect("compiles");
        // The stack in memory (64 > 32, the default) and as values.
        let programs = [program(policy, 32), program(policy, 64)];
        let regions = programs
            .each_ref()
            .map(|p| p.region("run").expect("region"));
        let (mut faults, mut compared) = (0, 0);
        for seed in 0..cases {
            let code = random_program(&mut Rng(seed));
            let specs: Vec<_> = (regions.iter())
                .flat_map(|r| [Tier::Stitch, Tier::Quick, Tier::Optimizing].map(|t| (r, t)))
                .map(|(r, t)| {
                    r.specialize_in(&[Arg::from(&code[..])], t)
                        .unwrap_or_else(|e| panic!("{policy}, seed {seed}, {t:?}: {e}"))
                })
                .collect();
            for x in [0, 5, -7, 40, 70] {
                let want = interpret(&module, &code, x);
                // (A loop whose counter a store at a computed slot reset may not end: the
                // interpreter and the code count their fuel differently.)
                if want.starts_with("-> fuel exhausted") {
                    continue;
                }
                faults += usize::from(want.starts_with("->"));
                for (k, s) in specs.iter().enumerate() {
                    let got = outcome(s.call(&mut [Arg::from(x)]));
                    assert_eq!(
                        got, want,
                        "{policy}, seed {seed}, x = {x}, spec {k}: {code:?}"
                    );
                    compared += 1;
                }
            }
        }
        // Both results and faults were compared.
        assert!(faults * 20 >= compared / 6, "{policy}: {faults} faults");
        assert!(faults * 2 <= compared / 6, "{policy}: {faults} faults");
    }
}

/// Which registers are arrays in memory: those longer than the limit, each held by one
/// register wherever it is live.
#[test]
fn arrays_longer_than_the_limit_live_in_memory() {
    let src = r#"
fn f(k: i64, x: i64) -> i64 {
    var small: [i64; 8];
    var large: [i64; 64];
    make_static(k);
    small[k & 7] = x;
    large[k & 63] = x;
    return small[1] + large[1];
}
"#;
    let m = dyc::lang::compile("f.dyc", src).expect("compiles");
    let id = m.func_by_name("f").expect("f");
    let mut ge = dyc::ge::build(&m, id, Mode::Specialize).expect("builds");
    let homes = |p: &dyc_stitcher::ge::StitchProgram| {
        let mut lens: Vec<u32> = p.all_homes().iter().map(|h| h.len).collect();
        lens.sort();
        lens
    };
    assert_eq!(homes(&ge.program), vec![64]);
    ge.program.set_max_array_values(4);
    assert_eq!(homes(&ge.program), vec![8, 64]);
    ge.program.set_max_array_values(64);
    assert_eq!(homes(&ge.program), Vec::<u32>::new());
    // No copy of a block takes an array in memory as a parameter.
    ge.program.set_max_array_values(0);
    for (b, _) in ge.program.blocks.iter() {
        let lay = ge.program.layout(b);
        assert!(lay.copy_types.iter().all(|t| !t.is_array()), "{b}");
        assert!(lay.dispatch_types.iter().all(|t| !t.is_array()), "{b}");
    }
}

/// A unit that ends in a return stores nothing of what it only kept in its arrays in
/// memory: a straight-line stack program makes the same code with its stack in memory as
/// with it as values.
#[test]
fn stores_a_returning_unit_never_reads_are_not_made() {
    let mut code = Vec::new();
    for k in 0..40i64 {
        code.extend([4, 0, 1, k, 2, 0, 5, 0]);
    }
    code.extend([4, 0, 0, 0]);
    let insts = |max| {
        let p = program("eager", max);
        let s = p
            .region("run")
            .expect("region")
            .specialize_in(&[Arg::from(&code[..])], Tier::Stitch)
            .expect("specializes");
        let r = s.call(&mut [Arg::from(2i64)]).expect("runs");
        assert_eq!(r, Some(Const::from(2 + (0..40).sum::<i64>())));
        s.stats().insts
    };
    let (memory, values) = (insts(32), insts(64));
    assert!(
        memory <= values + 8,
        "{memory} instructions in memory, {values} as values"
    );
}

/// A stack in memory makes the same code whatever its size: in a program of counted loops,
/// the stack's zeroing and the temporaries above the stack pointer are stores no later
/// code reads (the recorded unit's liveness), and are left out.
#[test]
fn a_stack_in_memory_makes_the_same_code_whatever_its_size() {
    let mut code = Vec::new();
    for k in 0..10i64 {
        let top = code.len() as i64 + 4;
        code.extend([1, 3, 5, 9]); // st[9] = 3
        code.extend([4, 9, 1, -1, 2, 0, 5, 9]); // top: st[9] -= 1
        code.extend([4, 9, 6, 1, 7, top]); // while st[9] >= 1
        code.extend([4, 0, 1, k, 2, 0, 5, 0]); // st[0] += k
    }
    code.extend([4, 0, 0, 0]);
    let insts = |slots: &str| {
        let src = source("eager").replace("[i64; 64]", slots);
        let opts = RuntimeOptions {
            max_array_values: 0,
            stencil_misses: Misses::Make,
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with("stack.dyc", &src, opts).expect("compiles");
        let s = p
            .region("run")
            .expect("region")
            .specialize_in(&[Arg::from(&code[..])], Tier::Stitch)
            .expect("specializes");
        let r = s.call(&mut [Arg::from(2i64)]).expect("runs");
        assert_eq!(r, Some(Const::from(2 + (0..10).sum::<i64>())));
        s.stats().insts
    };
    assert_eq!(insts("[i64; 16]"), insts("[i64; 256]"));
}

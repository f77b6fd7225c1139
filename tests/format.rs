//! A printf-like formatter (`examples/format.dyc`: static format, dynamic arguments and
//! output buffer) specialized on random formats in every tier agrees with the reference
//! interpreter on random arguments and buffers: the result or the error (kind and source
//! position, an argument missing), and every byte of the buffer, also when it is too small
//! and the formatter stops part way.

use dyc::interp::{parse_args, Interpreter, Memory, Val};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Program, Tier};

mod common;
use common::{outcome, Rng};

const FORMAT: &str = include_str!("../examples/format.dyc");

fn random_format(rng: &mut Rng) -> Vec<u8> {
    let mut fmt = Vec::new();
    for _ in 0..rng.below(9) {
        match rng.below(7) {
            0 => fmt.extend(b"%d"),
            1 => fmt.extend(b"%x"),
            2 => fmt.extend(b"%%"),
            3 => fmt.push(b'%'),
            _ => fmt.push(b"ab,="[rng.below(4) as usize]),
        }
    }
    fmt
}

fn random_arg(rng: &mut Rng) -> i64 {
    match rng.below(5) {
        0 => rng.below(10) as i64,
        1 => -(rng.below(1000) as i64),
        2 => i64::MIN + rng.below(2) as i64,
        3 => i64::MAX - rng.below(2) as i64,
        _ => (rng.below(1 << 31) << 32 | rng.below(1 << 32)) as i64,
    }
}

/// The result (or error) and the buffer's bytes after the call.
fn interpret(m: &dyc::ir::Module, fmt: &[u8], args: &[i64], out: usize) -> (String, Vec<u8>) {
    let id = m.func_by_name("format").expect("format");
    let mut mem = Memory::default();
    let text = format!("{fmt:?}, {args:?}, {:?}", vec![0u8; out]);
    let params = &m.funcs[id].sig.params;
    let vals = parse_args(params, &text, &mut mem).expect("arguments");
    let Some(Val::Slice(buf)) = vals.get(2).cloned() else {
        panic!("the buffer is a slice")
    };
    let r = common::interpreted(Interpreter::new(m).call(id, &vals, &mut mem));
    let bytes = mem.bufs[buf.buf]
        .data
        .iter()
        .map(|c| c.as_u64().expect("a byte") as u8)
        .collect();
    (r, bytes)
}

#[test]
fn a_formatter_agrees_with_the_interpreter_in_every_tier() {
    let cases = common::cases(200);
    let module = dyc::lang::compile("format.dyc", FORMAT).expect("compiles");
    let program = Program::compile(FORMAT).expect("compiles");
    let region = program.region("format").expect("region");
    let (mut full, mut short, mut faults, mut runs) = (0, 0, 0, 0);
    for seed in 0..cases {
        let mut rng = Rng(seed);
        let fmt = random_format(&mut rng);
        let specs = [Tier::Stitch, Tier::Quick, Tier::Optimizing].map(|t| {
            region
                .specialize_in(&[Arg::from(&fmt[..])], t)
                .unwrap_or_else(|e| panic!("seed {seed}, {t:?}: {e}"))
        });
        for _ in 0..4 {
            let args: Vec<i64> = (0..rng.below(5)).map(|_| random_arg(&mut rng)).collect();
            let len = rng.below(48) as usize;
            let (want, want_out) = interpret(&module, &fmt, &args, len);
            runs += 1;
            faults += usize::from(want.starts_with("->"));
            short += usize::from(want == format!("= {:?}", Const::Int(Scalar::I64, -1i64 as u64)));
            full += usize::from(want.starts_with("= Int") && !want.contains("-1"));
            for (t, s) in specs.iter().enumerate() {
                let mut out = vec![0u8; len];
                let got = outcome(s.call(&mut [Arg::from(&args[..]), Arg::from(&mut out[..])]));
                assert_eq!(
                    (&got, &out),
                    (&want, &want_out),
                    "seed {seed}, tier {t}, format {:?}, args {args:?}",
                    String::from_utf8_lossy(&fmt)
                );
            }
        }
    }
    // Whole outputs, buffers too small and missing arguments were all compared.
    assert!(full * 5 >= runs, "{full} of {runs} written whole");
    assert!(short * 20 >= runs, "{short} of {runs} too small");
    assert!(faults * 20 >= runs, "{faults} of {runs} faults");
}

//! The main job: a byte-code interpreter written in the region language
//! (`examples/bytecode.dyc`), specialized on byte-code programs.
//!
//! For each program it prints the result and the time of
//! - the same interpreter written in plain Rust,
//! - the region's generic code compiled by Cranelift without specialization,
//! - the region specialized on the program (the interpreter loop unrolled over it),
//! - the program written directly in Rust (the ceiling; `black_box` keeps the compiler
//!   from replacing the loops by closed forms, which no interpreter could match),
//!
//! then the specialization time and the speedups. Timings are the median of several runs
//! in one process, side by side.
//!
//! Run with `cargo run --release --example interpreter`.

use std::collections::HashMap;
use std::time::Instant;

use dyc::{Arg, Program, RuntimeOptions};

/// An instruction of the byte-code, with labels for jump targets.
#[derive(Clone, Copy)]
enum I {
    Halt(i64),
    Loadi(i64, i64),
    /// `Loadi` of a label's address.
    LoadiL(i64, &'static str),
    Add(i64, i64, i64),
    Mul(i64, i64, i64),
    Jlt(i64, i64, &'static str),
    Jmp(&'static str),
    Jmpr(i64),
    Load(i64, i64),
    Store(i64, i64),
    Addi(i64, i64, i64),
    Jeq(i64, i64, &'static str),
    Mod(i64, i64, i64),
    Label(&'static str),
}

fn assemble(prog: &[I]) -> Vec<i64> {
    let mut labels = HashMap::new();
    let mut pc = 0;
    for i in prog {
        match i {
            I::Label(l) => {
                labels.insert(*l, pc);
            }
            _ => pc += 4,
        }
    }
    let l = |name: &str| labels[name];
    let mut code = Vec::new();
    for &i in prog {
        let words = match i {
            I::Halt(a) => [0, a, 0, 0],
            I::Loadi(a, k) => [1, a, k, 0],
            I::LoadiL(a, t) => [1, a, l(t), 0],
            I::Add(a, b, c) => [2, a, b, c],
            I::Mul(a, b, c) => [4, a, b, c],
            I::Jlt(a, b, t) => [5, a, b, l(t)],
            I::Jmp(t) => [6, l(t), 0, 0],
            I::Jmpr(a) => [7, a, 0, 0],
            I::Load(a, b) => [8, a, b, 0],
            I::Store(a, b) => [9, a, b, 0],
            I::Addi(a, b, k) => [10, a, b, k],
            I::Jeq(a, b, t) => [11, a, b, l(t)],
            I::Mod(a, b, c) => [12, a, b, c],
            I::Label(_) => continue,
        };
        code.extend(words);
    }
    code
}

/// The same interpreter in plain Rust.
fn interpret(code: &[i64], n: i64, mem: &mut [i64]) -> i64 {
    let mut regs = [0i64; 8];
    regs[0] = n;
    let mut pc = 0usize;
    loop {
        let (op, a, b, c) = (code[pc], code[pc + 1], code[pc + 2], code[pc + 3]);
        pc += 4;
        let (a, bu, cu) = (a as usize, b as usize, c as usize);
        match op {
            0 => return regs[a],
            1 => regs[a] = b,
            2 => regs[a] = regs[bu].wrapping_add(regs[cu]),
            3 => regs[a] = regs[bu].wrapping_sub(regs[cu]),
            4 => regs[a] = regs[bu].wrapping_mul(regs[cu]),
            5 => {
                if regs[a] < regs[bu] {
                    pc = cu
                }
            }
            6 => pc = a,
            7 => pc = regs[a] as usize,
            8 => regs[a] = mem[regs[bu] as usize],
            9 => mem[regs[a] as usize] = regs[bu],
            10 => regs[a] = regs[bu].wrapping_add(c),
            11 => {
                if regs[a] == regs[bu] {
                    pc = cu
                }
            }
            12 => regs[a] = regs[bu].wrapping_rem(regs[cu]),
            _ => panic!("bad opcode {op}"),
        }
    }
}

struct Bench {
    name: &'static str,
    code: Vec<i64>,
    n: i64,
    mem: usize,
    native: fn(i64) -> i64,
}

fn benches() -> Vec<Bench> {
    use I::*;
    vec![
        Bench {
            name: "loop",
            code: assemble(&[
                Loadi(1, 0),
                Loadi(2, 0),
                Loadi(3, 3),
                Label("top"),
                Jlt(1, 0, "body"),
                Halt(2),
                Label("body"),
                Mul(4, 1, 3),
                Add(2, 2, 4),
                Addi(2, 2, 1),
                Addi(1, 1, 1),
                Jmp("top"),
            ]),
            n: 3_000_000,
            mem: 0,
            native: |n| (0..n).map(|i| std::hint::black_box(i) * 3 + 1).sum(),
        },
        Bench {
            name: "nested loops",
            code: assemble(&[
                Loadi(1, 0),
                Loadi(3, 0),
                Label("outer"),
                Jlt(1, 0, "obody"),
                Halt(3),
                Label("obody"),
                Loadi(2, 0),
                Label("inner"),
                Jlt(2, 0, "ibody"),
                Addi(1, 1, 1),
                Jmp("outer"),
                Label("ibody"),
                Mul(4, 1, 2),
                Add(3, 3, 4),
                Addi(2, 2, 1),
                Jmp("inner"),
            ]),
            n: 1_700,
            mem: 0,
            native: |n| {
                let mut acc = 0i64;
                for i in 0..n {
                    for j in 0..n {
                        acc = acc.wrapping_add(std::hint::black_box(i) * j);
                    }
                }
                acc
            },
        },
        Bench {
            name: "fib (explicit stack)",
            code: assemble(&[
                Loadi(1, 0),
                Loadi(2, 0),
                Loadi(5, 2),
                Store(1, 0),
                Addi(1, 1, 1),
                Label("loop"),
                Loadi(6, 0),
                Jlt(6, 1, "body"),
                Halt(2),
                Label("body"),
                Addi(1, 1, -1),
                Load(3, 1),
                Jlt(3, 5, "small"),
                Addi(4, 3, -1),
                Store(1, 4),
                Addi(1, 1, 1),
                Addi(4, 3, -2),
                Store(1, 4),
                Addi(1, 1, 1),
                Jmp("loop"),
                Label("small"),
                Add(2, 2, 3),
                Jmp("loop"),
            ]),
            n: 25,
            mem: 64,
            native: |n| {
                fn fib(n: i64) -> i64 {
                    if n < 2 {
                        n
                    } else {
                        fib(n - 1) + fib(n - 2)
                    }
                }
                fib(n)
            },
        },
        Bench {
            name: "sieve",
            code: assemble(&[
                Loadi(1, 2),
                Loadi(2, 0),
                Loadi(7, 0),
                Loadi(6, 1),
                Label("iloop"),
                Jlt(1, 0, "ibody"),
                Halt(2),
                Label("ibody"),
                Load(3, 1),
                Jeq(3, 7, "prime"),
                Addi(1, 1, 1),
                Jmp("iloop"),
                Label("prime"),
                Addi(2, 2, 1),
                Mul(4, 1, 1),
                Label("jloop"),
                Jlt(4, 0, "jbody"),
                Addi(1, 1, 1),
                Jmp("iloop"),
                Label("jbody"),
                Store(4, 6),
                Add(4, 4, 1),
                Jmp("jloop"),
            ]),
            n: 2_000_000,
            mem: 2_000_000,
            native: |n| {
                let mut mem = vec![false; n as usize];
                let mut count = 0;
                for i in 2..n as usize {
                    if !mem[i] {
                        count += 1;
                        let mut j = i * i;
                        while j < n as usize {
                            mem[j] = true;
                            j += i;
                        }
                    }
                }
                count
            },
        },
        Bench {
            name: "indirect jumps",
            code: assemble(&[
                Loadi(1, 0),
                Loadi(2, 0),
                Loadi(3, 4),
                Loadi(4, 8),
                LoadiL(6, "t0"),
                Label("top"),
                Jlt(1, 0, "body"),
                Halt(2),
                Label("body"),
                Mod(5, 1, 3),
                Mul(5, 5, 4),
                Add(5, 5, 6),
                Addi(1, 1, 1),
                Jmpr(5),
                Label("t0"),
                Addi(2, 2, 1),
                Jmp("top"),
                Addi(2, 2, 10),
                Jmp("top"),
                Addi(2, 2, 100),
                Jmp("top"),
                Addi(2, 2, 1000),
                Jmp("top"),
            ]),
            n: 1_000_000,
            mem: 0,
            native: |n| {
                (0..n)
                    .map(|i| [1, 10, 100, 1000][(std::hint::black_box(i) % 4) as usize])
                    .sum()
            },
        },
    ]
}

/// Median time of `runs` runs of `f`, in seconds, and its result.
fn time(runs: usize, mut f: impl FnMut() -> i64) -> (i64, f64) {
    let mut times = Vec::new();
    let mut result = 0;
    for _ in 0..runs {
        let t = Instant::now();
        result = std::hint::black_box(f());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    (result, times[times.len() / 2])
}

fn ms(s: f64) -> String {
    format!("{:.2} ms", s * 1e3)
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
    println!("Times are medians of {runs} runs in this process.\n");
    println!(
        "| program | result | Rust interpreter | generic (Cranelift) | specialized | hand-written Rust | specialization | vs Rust interpreter | vs generic | vs hand-written |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut speedups = Vec::new();
    let mut per_inst = Vec::new();
    for b in benches() {
        let code = &b.code;
        let fresh = || vec![0i64; b.mem.max(1)];
        let (r_interp, t_interp) = time(runs, || {
            let mut mem = fresh();
            interpret(code, b.n, &mut mem)
        });
        let (r_generic, t_generic) = time(runs, || {
            let mut mem = fresh();
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
        });
        let t = Instant::now();
        let spec = region
            .specialize(&[Arg::from(&code[..])])
            .expect("specializes");
        let t_spec = t.elapsed().as_secs_f64();
        let (r_spec, t_specialized) = time(runs, || {
            let mut mem = fresh();
            let mut args = [Arg::from(b.n), Arg::from(&mut mem[..])];
            spec.call(&mut args)
                .expect("runs")
                .and_then(|c| c.as_i64())
                .expect("i64")
        });
        let (r_native, t_native) = time(runs, || (b.native)(std::hint::black_box(b.n)));
        assert_eq!(r_interp, r_generic, "{}: generic code disagrees", b.name);
        assert_eq!(r_interp, r_spec, "{}: specialized code disagrees", b.name);
        assert_eq!(
            r_interp, r_native,
            "{}: the hand-written version disagrees",
            b.name
        );
        let st = spec.stats();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} ({} insts) | {:.1}x | {:.1}x | {:.2}x |",
            b.name,
            r_spec,
            ms(t_interp),
            ms(t_generic),
            ms(t_specialized),
            ms(t_native),
            ms(t_spec),
            st.insts,
            t_interp / t_specialized,
            t_generic / t_specialized,
            t_native / t_specialized,
        );
        speedups.push(t_interp / t_specialized);
        per_inst.push((
            st.stitch_ns as f64 / st.insts as f64,
            st.compile_ns as f64 / st.insts as f64,
        ));
    }
    let geo = speedups.iter().map(|s| s.ln()).sum::<f64>() / speedups.len() as f64;
    println!(
        "\nGeometric mean speedup of specialized code over the Rust interpreter: {:.1}x",
        geo.exp()
    );
    let stitch = per_inst.iter().map(|p| p.0).sum::<f64>() / per_inst.len() as f64;
    let compile = per_inst.iter().map(|p| p.1).sum::<f64>() / per_inst.len() as f64;
    println!(
        "Specialization cost per generated Cranelift instruction (mean over programs): {stitch:.0} ns stitching + {compile:.0} ns Cranelift compilation"
    );
}

//! Random byte-code programs for `examples/bytecode.dyc` (shared by the test crates that
//! include it, next to `benches/bytecode.rs` as `bench_programs`).

/// A small deterministic random generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// A random byte-code program for `examples/bytecode.dyc` that always halts: straight-line
/// arithmetic on registers 1-3, forward conditional and unconditional jumps, jumps through
/// a register to a later label, and counted loops up to two deep whose back edge is a
/// conditional jump or a plain `JMP` (counters in registers 4 and 6, limits in 5 and 7,
/// which are set once at the start and are also the only divisors).
pub fn random_bytecode(rng: &mut Rng) -> Vec<i64> {
    use crate::bench_programs::I::{self, *};
    fn label(n: &mut usize) -> &'static str {
        *n += 1;
        Box::leak(format!("L{n}").into_boxed_str())
    }
    fn reg(rng: &mut Rng) -> i64 {
        rng.below(8) as i64
    }
    fn dst(rng: &mut Rng) -> i64 {
        1 + rng.below(3) as i64
    }
    fn block(rng: &mut Rng, depth: usize, labels: &mut usize, out: &mut Vec<I>) {
        for _ in 0..1 + rng.below(5) {
            match rng.below(14) {
                0 => out.push(Loadi(dst(rng), rng.below(21) as i64 - 10)),
                1 => out.push(Add(dst(rng), reg(rng), reg(rng))),
                2 => out.push(Mul(dst(rng), reg(rng), reg(rng))),
                3 | 4 => out.push(Addi(dst(rng), reg(rng), rng.below(7) as i64 - 3)),
                5 => out.push(Mod(dst(rng), reg(rng), [5, 7][rng.below(2)])),
                6 => out.push(Div(dst(rng), reg(rng), [5, 7][rng.below(2)])),
                7 | 8 => {
                    let l = label(labels);
                    out.push(match rng.below(2) {
                        0 => Jlt(reg(rng), reg(rng), l),
                        _ => Jeq(reg(rng), reg(rng), l),
                    });
                    block(rng, depth, labels, out);
                    out.push(Label(l));
                }
                9 => {
                    let l = label(labels);
                    out.push(Jmp(l));
                    block(rng, depth, labels, out);
                    out.push(Label(l));
                }
                10 => {
                    let l = label(labels);
                    out.push(LoadiL(3, l));
                    out.push(Jmpr(3));
                    block(rng, depth, labels, out);
                    out.push(Label(l));
                }
                11 | 12 if depth < 2 => {
                    let (c, lim) = ([4, 6][depth], [5, 7][depth]);
                    let top = label(labels);
                    out.push(Loadi(c, 0));
                    out.push(Label(top));
                    if rng.below(2) == 0 {
                        block(rng, depth + 1, labels, out);
                        out.push(Addi(c, c, 1));
                        out.push(Jlt(c, lim, top));
                    } else {
                        let exit = label(labels);
                        out.push(Jeq(c, lim, exit));
                        block(rng, depth + 1, labels, out);
                        out.push(Addi(c, c, 1));
                        out.push(Jmp(top));
                        out.push(Label(exit));
                    }
                }
                _ => out.push(Add(dst(rng), reg(rng), reg(rng))),
            }
        }
    }
    let mut prog = vec![
        Loadi(5, 2 + rng.below(3) as i64),
        Loadi(7, 2 + rng.below(2) as i64),
    ];
    let mut labels = 0;
    block(rng, 0, &mut labels, &mut prog);
    prog.push(Halt(dst(rng)));
    crate::bench_programs::assemble(&prog)
}

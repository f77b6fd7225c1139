//! The byte-code of `examples/bytecode.dyc` and everything the interpreter comparisons
//! measure it against: an assembler with labels, the six benchmark programs, the same
//! interpreter in plain Rust, each program written directly in Rust, and a hand
//! translation of byte-code to Cranelift IR.
//!
//! Shared by the main job (`examples/interpreter.rs`) and the criterion harness
//! (`benches/interpreter.rs`).
//!
//! Byte-code: each instruction is 4 words `op a b c` over eight registers (register 0
//! starts as the argument `n`) and a memory of `i64`:
//! `0 HALT a`, `1 LOADI a k`, `2 ADD`, `3 SUB`, `4 MUL a b c`, `5 JLT a b t`, `6 JMP t`,
//! `7 JMPR a` (jump to the address in a register), `8 LOAD a b` (`a = mem[b]`),
//! `9 STORE a b` (`mem[a] = b`), `10 ADDI a b k`, `11 JEQ a b t`, `12 MOD`, `13 DIV a b c`.

use std::collections::HashMap;

/// An instruction of the byte-code, with labels for jump targets.
#[derive(Clone, Copy)]
pub enum I {
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
    Div(i64, i64, i64),
    Label(&'static str),
}

pub fn assemble(prog: &[I]) -> Vec<i64> {
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
            I::Div(a, b, c) => [13, a, b, c],
            I::Label(_) => continue,
        };
        code.extend(words);
    }
    code
}

/// The same interpreter in plain Rust.
pub fn interpret(code: &[i64], n: i64, mem: &mut [i64]) -> i64 {
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
            13 => regs[a] = regs[bu].wrapping_div(regs[cu]),
            _ => panic!("bad opcode {op}"),
        }
    }
}

/// A benchmark program: its byte-code, argument, memory size, and the same computation
/// written directly in Rust.
pub struct Bench {
    pub name: &'static str,
    pub code: Vec<i64>,
    pub n: i64,
    pub mem: usize,
    pub native: fn(i64) -> i64,
}

/// The six programs: a sum-of-squares style loop, nested loops, Fibonacci with an
/// explicit stack in memory, a sieve, Collatz step counts, and dispatch through a jump
/// table indexed by a computed register.
pub fn benches() -> Vec<Bench> {
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
            name: "collatz",
            // The total number of Collatz steps of 1..n.
            code: assemble(&[
                Loadi(1, 1),
                Loadi(2, 0),
                Loadi(5, 2),
                Loadi(6, 1),
                Loadi(7, 0),
                Label("iloop"),
                Jlt(1, 0, "ibody"),
                Halt(2),
                Label("ibody"),
                Addi(3, 1, 0),
                Label("cloop"),
                Jeq(3, 6, "cdone"),
                Addi(2, 2, 1),
                Mod(4, 3, 5),
                Jeq(4, 7, "even"),
                Add(4, 3, 3),
                Add(3, 4, 3),
                Addi(3, 3, 1),
                Jmp("cloop"),
                Label("even"),
                Div(3, 3, 5),
                Jmp("cloop"),
                Label("cdone"),
                Addi(1, 1, 1),
                Jmp("iloop"),
            ]),
            n: 100_000,
            mem: 0,
            native: |n| {
                let mut steps = 0;
                for i in 1..n {
                    let mut x = std::hint::black_box(i);
                    while x != 1 {
                        steps += 1;
                        x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
                    }
                }
                steps
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

/// A hand translation of byte-code to Cranelift IR, the way one writes a simple baseline
/// JIT: every register a `cranelift_frontend::Variable`, every leader (jump target or
/// instruction after a jump) a block, memory accesses bounds-checked, `MOD`/`DIV` checked
/// for zero, `JMPR` a bounds check and a `br_table` over every instruction (a program with
/// `JMPR` makes every instruction a leader, since any may be a target). A fault returns
/// with a status word set instead of trapping. Compiled with the runtime's Cranelift flags.
pub mod hand {
    use cranelift_codegen::ir::condcodes::IntCC;
    use cranelift_codegen::ir::types::I64;
    use cranelift_codegen::ir::{AbiParam, Block, InstBuilder, MemFlagsData, UserFuncName, Value};
    use cranelift_codegen::isa::TargetIsa;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Switch, Variable};
    use cranelift_jit::{JITBuilder, JITModule};
    use cranelift_module::{default_libcall_names, Module};
    use std::sync::{Arc, OnceLock};
    use std::time::Instant;

    type Entry = unsafe extern "C" fn(i64, *mut i64, i64, *mut i64) -> i64;

    /// A translated program.
    pub struct Compiled {
        /// Owns the code; never freed (a benchmark compiles a handful of programs).
        _module: JITModule,
        entry: Entry,
        /// CLIF instructions handed to Cranelift.
        pub clif_insts: usize,
        /// Translation plus compilation, in nanoseconds.
        pub compile_ns: u64,
    }

    /// Why a run stopped early.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Fault;

    impl Compiled {
        pub fn run(&self, n: i64, mem: &mut [i64]) -> Result<i64, Fault> {
            let mut status = 0i64;
            // SAFETY: `entry` was compiled by `compile` with exactly this signature, and
            // the code lives as long as `self._module`. It reads and writes `mem` only
            // below `mem.len()` (every access is checked against the length passed here)
            // and writes `status` once.
            let r = unsafe { (self.entry)(n, mem.as_mut_ptr(), mem.len() as i64, &mut status) };
            if status == 0 {
                Ok(r)
            } else {
                Err(Fault)
            }
        }
    }

    struct Tr<'a, 'b> {
        fb: FunctionBuilder<'b>,
        regs: [Variable; 8],
        blocks: &'a [Option<Block>],
        fault: Block,
        mem: Value,
        len: Value,
    }

    impl Tr<'_, '_> {
        fn reg(&mut self, r: i64) -> Value {
            self.fb.use_var(self.regs[r as usize])
        }
        fn set(&mut self, r: i64, v: Value) {
            self.fb.def_var(self.regs[r as usize], v)
        }
        /// The block of the instruction at address `pc`, or the fault block.
        fn target(&self, pc: i64) -> Block {
            usize::try_from(pc)
                .ok()
                .filter(|pc| pc % 4 == 0)
                .and_then(|pc| self.blocks.get(pc / 4).copied().flatten())
                .unwrap_or(self.fault)
        }
        /// Continue only if `bad` is false.
        fn check(&mut self, bad: Value) {
            let ok = self.fb.create_block();
            self.fb.ins().brif(bad, self.fault, &[], ok, &[]);
            self.fb.switch_to_block(ok);
            self.fb.seal_block(ok);
        }
        fn address(&mut self, r: i64) -> Value {
            let i = self.reg(r);
            let bad = self
                .fb
                .ins()
                .icmp(IntCC::UnsignedGreaterThanOrEqual, i, self.len);
            self.check(bad);
            let off = self.fb.ins().ishl_imm_u(i, 3);
            self.fb.ins().iadd(self.mem, off)
        }
        /// `b` and a divisor that cannot trap: zero is a fault, and -1 becomes 1 (the
        /// caller fixes the result up, as wrapping division and remainder do).
        fn divisor(&mut self, c: i64) -> (Value, Value) {
            let d = self.reg(c);
            let zero = self.fb.ins().icmp_imm_s(IntCC::Equal, d, 0);
            self.check(zero);
            let minus1 = self.fb.ins().icmp_imm_s(IntCC::Equal, d, -1);
            let one = self.fb.ins().iconst(I64, 1);
            (minus1, self.fb.ins().select(minus1, one, d))
        }
    }

    /// Translates and compiles `code`.
    pub fn compile(code: &[i64]) -> Compiled {
        // The ISA is built once per process, as the runtime does.
        static ISA: OnceLock<Arc<dyn TargetIsa>> = OnceLock::new();
        let isa = ISA
            .get_or_init(|| {
                dyc_stitcher::jit::host_isa(dyc_stitcher::jit::JitOptions {
                    optimize: true,
                    verify: false,
                })
                .expect("host ISA")
            })
            .clone();
        let start = Instant::now();
        let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let mut ctx = module.make_context();
        for _ in 0..4 {
            ctx.func.signature.params.push(AbiParam::new(I64));
        }
        ctx.func.signature.returns.push(AbiParam::new(I64));
        ctx.func.name = UserFuncName::user(0, 0);
        let mut fctx = FunctionBuilderContext::new();
        let frontend = module.isa().frontend_config();

        let count = code.len() / 4;
        let word = |i: usize, k: usize| code[4 * i + k];
        let indirect = (0..count).any(|i| word(i, 0) == 7);
        let mut leader = vec![indirect; count + 1];
        leader[0] = true;
        let mut mark = |pc: i64| {
            if let Ok(pc) = usize::try_from(pc) {
                if pc % 4 == 0 && pc / 4 < count {
                    leader[pc / 4] = true;
                }
            }
        };
        for i in 0..count {
            match word(i, 0) {
                5 | 11 => mark(word(i, 3)),
                6 => mark(word(i, 1)),
                _ => {}
            }
            if matches!(word(i, 0), 0 | 5 | 6 | 7 | 11) {
                mark(4 * (i as i64 + 1));
            }
        }

        let mut fb = FunctionBuilder::new(&mut ctx.func, &mut fctx);
        let entry = fb.create_block();
        fb.append_block_params_for_function_params(entry);
        let blocks: Vec<Option<Block>> = (0..count)
            .map(|i| leader[i].then(|| fb.create_block()))
            .collect();
        let fault = fb.create_block();
        fb.set_cold_block(fault);
        let regs = [(); 8].map(|_| fb.declare_var(I64));
        fb.switch_to_block(entry);
        let [n, mem, len, status] = fb.block_params(entry).try_into().expect("four params");
        let zero = fb.ins().iconst(I64, 0);
        fb.def_var(regs[0], n);
        for &r in &regs[1..] {
            fb.def_var(r, zero);
        }
        let mut t = Tr {
            fb,
            regs,
            blocks: &blocks,
            fault,
            mem,
            len,
        };
        let first = t.target(0);
        t.fb.ins().jump(first, &[]);
        let mut open = false;
        for i in 0..count {
            if let Some(b) = blocks[i] {
                if open {
                    t.fb.ins().jump(b, &[]);
                }
                t.fb.switch_to_block(b);
                open = true;
            }
            if !open {
                continue; // unreachable: after a jump, not a target
            }
            let (op, a, b, c) = (word(i, 0), word(i, 1), word(i, 2), word(i, 3));
            let regs_ok = |r: i64| (0..8).contains(&r);
            let next = t.target(4 * (i as i64 + 1));
            match op {
                0 if regs_ok(a) => {
                    let v = t.reg(a);
                    t.fb.ins().return_(&[v]);
                    open = false;
                }
                1 if regs_ok(a) => {
                    let v = t.fb.ins().iconst(I64, b);
                    t.set(a, v);
                }
                2..=4 if regs_ok(a) && regs_ok(b) && regs_ok(c) => {
                    let (x, y) = (t.reg(b), t.reg(c));
                    let v = match op {
                        2 => t.fb.ins().iadd(x, y),
                        3 => t.fb.ins().isub(x, y),
                        _ => t.fb.ins().imul(x, y),
                    };
                    t.set(a, v);
                }
                5 | 11 if regs_ok(a) && regs_ok(b) => {
                    let (x, y) = (t.reg(a), t.reg(b));
                    let cc = if op == 5 {
                        IntCC::SignedLessThan
                    } else {
                        IntCC::Equal
                    };
                    let cond = t.fb.ins().icmp(cc, x, y);
                    let taken = t.target(c);
                    t.fb.ins().brif(cond, taken, &[], next, &[]);
                    open = false;
                }
                6 => {
                    let target = t.target(a);
                    t.fb.ins().jump(target, &[]);
                    open = false;
                }
                7 if regs_ok(a) => {
                    let pc = t.reg(a);
                    let misaligned = t.fb.ins().band_imm_u(pc, 3);
                    t.check(misaligned);
                    let index = t.fb.ins().sshr_imm_u(pc, 2);
                    let mut switch = Switch::new();
                    for (k, b) in blocks.iter().enumerate() {
                        if let Some(b) = b {
                            switch.set_entry(k as u128, *b);
                        }
                    }
                    switch.emit(&mut t.fb, index, fault);
                    open = false;
                }
                8 if regs_ok(a) && regs_ok(b) => {
                    let addr = t.address(b);
                    let v = t.fb.ins().load(I64, MemFlagsData::trusted(), addr, 0);
                    t.set(a, v);
                }
                9 if regs_ok(a) && regs_ok(b) => {
                    let addr = t.address(a);
                    let v = t.reg(b);
                    t.fb.ins().store(MemFlagsData::trusted(), v, addr, 0);
                }
                10 if regs_ok(a) && regs_ok(b) => {
                    let x = t.reg(b);
                    let k = t.fb.ins().iconst(I64, c);
                    let v = t.fb.ins().iadd(x, k);
                    t.set(a, v);
                }
                12 | 13 if regs_ok(a) && regs_ok(b) && regs_ok(c) => {
                    let x = t.reg(b);
                    let (minus1, d) = t.divisor(c);
                    let v = if op == 12 {
                        t.fb.ins().srem(x, d)
                    } else {
                        let q = t.fb.ins().sdiv(x, d);
                        let neg = t.fb.ins().ineg(x);
                        t.fb.ins().select(minus1, neg, q)
                    };
                    t.set(a, v);
                }
                _ => {
                    t.fb.ins().jump(fault, &[]);
                    open = false;
                }
            }
        }
        if open {
            t.fb.ins().jump(fault, &[]);
        }
        t.fb.switch_to_block(fault);
        let one = t.fb.ins().iconst(I64, 1);
        t.fb.ins().store(MemFlagsData::trusted(), one, status, 0);
        let zero = t.fb.ins().iconst(I64, 0);
        t.fb.ins().return_(&[zero]);
        t.fb.seal_all_blocks();
        t.fb.finalize(frontend);

        let clif_insts = ctx
            .func
            .layout
            .blocks()
            .map(|b| ctx.func.layout.block_insts(b).count())
            .sum();
        let id = module
            .declare_anonymous_function(&ctx.func.signature)
            .expect("declare");
        module.define_function(id, &mut ctx).expect("compiles");
        module.finalize_definitions().expect("finalize");
        let ptr = module.get_finalized_function(id);
        // SAFETY: the function was declared with four `i64` parameters and an `i64` result
        // in the host's default calling convention, which is `extern "C"` on the targets
        // Cranelift's native builder supports.
        let entry = unsafe { std::mem::transmute::<*const u8, Entry>(ptr) };
        Compiled {
            _module: module,
            entry,
            clif_insts,
            compile_ns: start.elapsed().as_nanos() as u64,
        }
    }
}

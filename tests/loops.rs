//! Random loops over values of a region's entry block: functions whose variables start from
//! the parameters and from what the entry computes (some kept with `make_dynamic`), change
//! in one or two dynamic loops (some of them in a dynamic branch, some loops returning
//! early, some through an inner loop that unrolls, a promotion, or a register file in a
//! local array, kept as values or in memory), and are combined with the parameters again
//! after them. The entry's values are unit invariants, read by later blocks
//! without being passed to them; the stitch tier once let a loop overwrite one (a loop
//! variable started from a parameter took the parameter's frame word). Every tier agrees
//! with the interpreter, with and without a run-time constant among the parameters.

use dyc::interp::{Interpreter, Memory, Val};
use dyc::ir::{Const, Scalar};
use dyc::{Arg, Program, RuntimeOptions, Tier};

mod common;
use common::Rng;

/// An expression over `names`, at most `depth` operators deep.
fn expr(rng: &mut Rng, names: &[&str], depth: u32) -> String {
    if depth == 0 || rng.below(3) == 0 {
        return match rng.below(5) {
            0 => format!("{}", rng.below(9) as i64 - 4),
            _ => names[rng.below(names.len() as u64) as usize].to_string(),
        };
    }
    let op = ["+", "-", "*", "^", "&", "|"][rng.below(6) as usize];
    format!(
        "({} {op} {})",
        expr(rng, names, depth - 1),
        expr(rng, names, depth - 1)
    )
}

/// A function `f(a, b, n)` as described in the module doc; `key`: `b` is a run-time
/// constant.
fn random_function(rng: &mut Rng, key: bool) -> String {
    let mut src = String::from("fn f(a: i64, b: i64, n: i64) -> i64 {\n");
    if key {
        src += "    make_static(b);\n";
    }
    src += &format!("    let c = {};\n", expr(rng, &["a", "b"], 2));
    if rng.below(2) == 0 {
        src += "    make_dynamic(c);\n";
    }
    let vars = 1 + rng.below(3) as usize;
    for k in 0..vars {
        let init = ["a", "b", "c", "0"][rng.below(4) as usize];
        src += &format!("    var v{k} = {init};\n");
    }
    // A register file, written and read at constant indices.
    src += "    var r: [i64; 4];\n    r[1] = a;\n";
    let mut names: Vec<String> = (0..vars).map(|k| format!("v{k}")).collect();
    names.extend(["r[0]", "r[1]", "r[3]"].map(String::from));
    names.extend(["a", "b", "c", "i"].map(String::from));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // One or two loops, one after the other, each counting `i` from 0 to `n`.
    src += "    var i = 0;\n";
    for l in 0..1 + rng.below(2) {
        if l > 0 {
            src += "    i = 0;\n";
        }
        src += "    while i < n {\n";
        for _ in 0..1 + rng.below(3) {
            let k = rng.below(vars as u64);
            src += &format!("        v{k} = {};\n", expr(rng, &names, 2));
        }
        if rng.below(2) == 0 {
            src += &format!("        r[{}] = {};\n", rng.below(4), expr(rng, &names, 2));
        }
        if rng.below(3) == 0 {
            let k = rng.below(vars as u64);
            // An inner loop that unrolls.
            src += &format!(
                "        var j = 0;\n        while j < 3 {{\n            v{k} = {};\n            j += 1;\n        }}\n",
                expr(rng, &names, 1)
            );
        }
        if rng.below(3) == 0 {
            // A promotion: the rest of the iteration is stitched per value of `t`.
            src += &format!(
                "        var t = {} & 3;\n        make_static(t);\n        v0 = v0 + t * {};\n",
                expr(rng, &names, 1),
                rng.below(5)
            );
        }
        match rng.below(4) {
            0 => {
                let k = rng.below(vars as u64);
                src += &format!(
                    "        if {} < {} {{\n            v{k} = {};\n        }}\n",
                    expr(rng, &names, 1),
                    expr(rng, &names, 1),
                    expr(rng, &names, 2)
                );
            }
            // An early return.
            1 => {
                src += &format!(
                    "        if {} == {} {{\n            return {};\n        }}\n",
                    expr(rng, &names, 1),
                    expr(rng, &names, 1),
                    expr(rng, &names, 2)
                );
            }
            _ => {}
        }
        src += "        i += 1;\n    }\n";
    }
    src += &format!("    return {};\n}}\n", expr(rng, &names, 3));
    src
}

#[test]
fn loops_over_a_units_first_values_agree_with_the_interpreter_in_every_tier() {
    let cases = common::cases(150);
    for seed in 0..cases {
        let mut rng = Rng(seed);
        let key = rng.below(3) == 0;
        let src = random_function(&mut rng, key);
        let m = dyc::lang::compile("loops.dyc", &src)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{src}"));
        let id = m.func_by_name("f").expect("f");
        // Half of the functions keep their local array in memory.
        let opts = RuntimeOptions {
            max_array_values: if seed % 2 == 0 { 0 } else { 32 },
            ..RuntimeOptions::default()
        };
        let p = Program::compile_with("loops.dyc", &src, opts).expect("compiles");
        let region = p.region("f").expect("region");
        let b = rng.below(20) as i64 - 10;
        let key_args: Vec<Arg> = if key { vec![Arg::from(b)] } else { vec![] };
        let specs = [Tier::Stitch, Tier::Quick, Tier::Optimizing].map(|t| {
            region
                .specialize_in(&key_args, t)
                .unwrap_or_else(|e| panic!("seed {seed}, {t:?}: {e}\n{src}"))
        });
        for _ in 0..4 {
            let a = rng.below(2000) as i64 - 1000;
            let n = rng.below(5) as i64;
            let int = |x: i64| Val::Scalar(Const::Int(Scalar::I64, x as u64));
            let want = Interpreter::new(&m)
                .call(id, &[int(a), int(b), int(n)], &mut Memory::default())
                .unwrap_or_else(|e| panic!("seed {seed}: {e:?}\n{src}"));
            for (t, s) in specs.iter().enumerate() {
                let mut args = vec![Arg::from(a)];
                if !key {
                    args.push(Arg::from(b));
                }
                args.push(Arg::from(n));
                let got = s.call(&mut args).expect("runs");
                assert_eq!(
                    got.map(Val::Scalar),
                    want,
                    "seed {seed}, tier {t}, a = {a}, b = {b}, n = {n}\n{src}"
                );
            }
        }
    }
}

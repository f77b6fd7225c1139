//! A deterministic automaton (`examples/dfa.dyc`: the automaton static, the input
//! dynamic) specialized on random automata in every tier agrees with plain Rust and with
//! the reference interpreter on random inputs, including inputs out of range (a trap).
//! Its state is promoted at every step: each state is a continuation, dispatched inline
//! once seen (the first eight values of a site) and through the site's cache beyond, with
//! automata of up to 14 states; each specialization is then made again with what its
//! promotions saw (`Region::respecialize`) and checked on the same inputs. `pair` promotes
//! two variables together (the state and a parity): a site of two values, dispatched by
//! a chain of tests.

use dyc::interp::{parse_args, Interpreter, Memory};
use dyc::ir::Module;
use dyc::{Arg, Program, RuntimeOptions, Tier};

mod common;
use common::{outcome, Rng};

const DFA: &str = include_str!("../examples/dfa.dyc");

/// What `run` returns, `count * 1000 + last state`, or with `pair`, what `pair` returns,
/// `count * 1000 + last state * 10 + odd`; `None` for an input out of range.
fn reference(k: i64, table: &[i64], accept: &[i64], input: &[i64], pair: bool) -> Option<i64> {
    let (mut state, mut count, mut odd) = (0usize, 0, false);
    for i in 0..=input.len() {
        count += i64::from(accept[state] == 1 && !(pair && odd));
        let Some(&c) = input.get(i) else {
            break;
        };
        if c < 0 || c >= k {
            return None;
        }
        odd ^= c == 0;
        state = table[state * k as usize + c as usize] as usize;
    }
    Some(match pair {
        false => count * 1000 + state as i64,
        true => count * 1000 + state as i64 * 10 + i64::from(odd),
    })
}

fn interpret(m: &Module, f: &str, args: &str) -> String {
    let id = m.func_by_name(f).expect("function");
    let mut mem = Memory::default();
    let vals = parse_args(&m.funcs[id].sig.params, args, &mut mem).expect("arguments");
    common::interpreted(Interpreter::new(m).call(id, &vals, &mut mem))
}

#[test]
fn an_automaton_promoting_its_state_agrees_with_plain_rust_in_every_tier() {
    let cases = common::cases(100);
    let opts = RuntimeOptions {
        tiers: common::no_tier_up(),
        ..RuntimeOptions::default()
    };
    let program = Program::compile_with("dfa.dyc", DFA, opts).expect("compiles");
    let module = dyc::lang::compile("dfa.dyc", DFA).expect("compiles");
    let (mut traps, mut past_eight) = (0, 0);
    for (seed, f) in (0..cases).flat_map(|seed| [(seed, "run"), (seed, "pair")]) {
        let region = program.region(f).expect("region");
        let pair = f == "pair";
        let mut rng = Rng(seed);
        let states = 1 + rng.below(14) as usize;
        let k = 1 + rng.below(4) as i64;
        let table: Vec<i64> = (0..states * k as usize)
            .map(|_| rng.below(states as u64) as i64)
            .collect();
        let accept: Vec<i64> = (0..states).map(|_| rng.below(2) as i64).collect();
        let key = [Arg::from(k), Arg::from(&table[..]), Arg::from(&accept[..])];
        let inputs: Vec<Vec<i64>> = (0..6)
            .map(|_| {
                let n = rng.below(40);
                let bad = rng.below(8) == 0;
                (0..n)
                    .map(|_| match bad && rng.below(20) == 0 {
                        true => [k, -1][rng.below(2) as usize],
                        false => rng.below(k as u64) as i64,
                    })
                    .collect()
            })
            .collect();
        let what = |tier: Tier, input: &[i64]| {
            format!(
                "{f}, seed {seed}, {tier:?}: k {k}, table {table:?}, accept {accept:?}, input {input:?}"
            )
        };
        for tier in [Tier::Stitch, Tier::Quick, Tier::Optimizing] {
            let first = region.specialize_in(&key, tier).expect("specializes");
            let mut specs = vec![first];
            for round in 0..2 {
                for input in &inputs {
                    let want = reference(k, &table, &accept, input, pair);
                    if round == 0 && tier == Tier::Stitch {
                        let args = format!("{k}, {table:?}, {accept:?}, {input:?}");
                        let got = interpret(&module, f, &args);
                        match want {
                            Some(w) => {
                                assert_eq!(got, format!("= Int(I64, {w})"), "{}", what(tier, input))
                            }
                            None => {
                                assert!(got.starts_with("-> trap"), "{got}: {}", what(tier, input));
                                traps += 1;
                            }
                        }
                    }
                    let spec = specs.last().expect("a specialization");
                    let got = outcome(spec.call(&mut [Arg::from(&input[..])]));
                    match want {
                        Some(w) => assert_eq!(
                            got,
                            format!("= Int(I64, {w})"),
                            "round {round}, {}",
                            what(tier, input)
                        ),
                        None => assert!(
                            got.starts_with("-> trap"),
                            "{got}: round {round}, {}",
                            what(tier, input)
                        ),
                    }
                }
                if round == 0 {
                    let again = region.respecialize(&key, tier, &specs[0]).expect("again");
                    specs.push(again);
                }
            }
            past_eight += usize::from(specs[0].lazy_stats().0 > 8);
        }
    }
    // Traps and sites with more values than are dispatched inline were both met.
    assert!(traps * 10 >= cases as usize, "{traps} traps");
    assert!(
        past_eight * 10 >= cases as usize,
        "{past_eight} past eight states"
    );
}

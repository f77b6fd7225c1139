//! A glob matcher (`examples/glob.dyc`: static pattern, dynamic text) specialized on
//! random patterns in every tier, eagerly and lazily stitched, agrees with a matcher in
//! plain Rust and with the reference interpreter on random texts. Its loop over the text
//! is dynamic and its state (the position in the pattern, the last `*`) static: a state
//! machine whose states are specialization points, with a condition that mixes a static
//! and a dynamic test.

use dyc::interp::{parse_args, Interpreter, Memory, Val};
use dyc::{Arg, Program, RuntimeOptions, Tier};

mod common;
use common::Rng;

const GLOB: &str = include_str!("../examples/glob.dyc");

/// Up to `max` bytes of `alphabet`.
fn bytes(rng: &mut Rng, max: u64, alphabet: &[u8]) -> Vec<u8> {
    let n = rng.below(max + 1);
    (0..n)
        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
        .collect()
}

/// The same algorithm in plain Rust.
fn glob(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        if p < pat.len() && pat[p] == b'*' {
            (star, mark, p) = (Some(p), t, p + 1);
        } else if p < pat.len() && (pat[p] == b'?' || pat[p] == text[t]) {
            (p, t) = (p + 1, t + 1);
        } else if let Some(s) = star {
            (p, mark) = (s + 1, mark + 1);
            t = mark;
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

#[test]
fn a_glob_matcher_agrees_with_plain_rust_in_every_tier() {
    let cases = common::cases(300);
    for policy in ["eager", "lazy"] {
        let src = GLOB.replace("cache_all, eager", &format!("cache_all, {policy}"));
        let opts = RuntimeOptions {
            tiers: common::no_tier_up(),
            ..RuntimeOptions::default()
        };
        let program = Program::compile_with("glob.dyc", &src, opts).expect("compiles");
        let region = program.region("glob").expect("region");
        let module = dyc::lang::compile("glob.dyc", &src).expect("compiles");
        let id = module.func_by_name("glob").expect("glob");
        let mut matched = 0;
        for seed in 0..cases {
            let mut rng = Rng(seed);
            let pat = bytes(&mut rng, 10, b"ab*?");
            let specs: Vec<_> = [Tier::Stitch, Tier::Quick, Tier::Optimizing]
                .map(|t| {
                    region
                        .specialize_in(&[Arg::from(&pat[..])], t)
                        .unwrap_or_else(|e| panic!("{policy}, pattern {pat:?}, {t:?}: {e}"))
                })
                .into();
            for k in 0..8 {
                let text = bytes(&mut rng, 12, b"abc");
                let want = glob(&pat, &text);
                matched += usize::from(want);
                if k == 0 {
                    let mut mem = Memory::default();
                    let text_args = format!("{pat:?}, {text:?}");
                    let params = &module.funcs[id].sig.params;
                    let args = parse_args(params, &text_args, &mut mem).expect("arguments");
                    let got = Interpreter::new(&module).call(id, &args, &mut mem);
                    match got {
                        Ok(Some(Val::Scalar(c))) => assert_eq!(c.as_bool(), Some(want)),
                        r => panic!("the interpreter gave {r:?} for {pat:?}, {text:?}"),
                    }
                }
                for (t, s) in specs.iter().enumerate() {
                    let got = s.call(&mut [Arg::from(&text[..])]).expect("runs");
                    assert_eq!(
                        got.and_then(|c| c.as_bool()),
                        Some(want),
                        "{policy}, tier {t}, pattern {pat:?}, text {text:?}"
                    );
                }
            }
        }
        // Both outcomes were compared.
        let runs = cases as usize * 8;
        assert!(
            matched * 20 >= runs && matched * 20 <= runs * 19,
            "{matched}"
        );
    }
}

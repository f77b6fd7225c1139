//! Differential tests of specialization: for every program of `tests/lang` and
//! `examples`, and every `// run:` line, the reference interpreter on the original program
//! and on the residual (specialized) program agree on results, errors (kind and source
//! position) and the final contents of mutable slices.

mod common;

use std::path::Path;

use dyc::interp::{parse_args, ErrorKind, Interpreter, Memory, RuntimeError};
use dyc::residual::{self, ResidualError};
use dyc_stitcher::ge::Budget;

/// What a run produced, comparable across forms: the result, or the error's kind (without
/// details) and source position; and the memory after.
fn outcome(r: Result<Option<dyc::interp::Val>, RuntimeError>, mem: &Memory) -> String {
    match r {
        Ok(Some(v)) => format!("= {} / {:?}", dyc::interp::format_val(v, mem), mem),
        Ok(None) => format!("= () / {mem:?}"),
        Err(e) => format!("-> {} at {} / {:?}", e.kind.name(), e.loc, mem),
    }
}

#[test]
fn residual_code_agrees_with_the_interpreter_on_every_test_program() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = common::files(&root.join("tests/lang"), "dyc");
    files.extend(common::files(&root.join("examples"), "dyc"));
    let mut compared = 0;
    let mut specialized_static = 0;
    let mut failures = Vec::new();
    for path in files {
        let src = std::fs::read_to_string(&path).expect("readable");
        let Ok(m) = dyc::lang::compile("t.dyc", &src) else {
            continue;
        };
        for call in common::directive(&src, "//", "run:") {
            let (name, rest) = call.split_once('(').expect("run line");
            let args_text = rest.strip_suffix(')').expect("run line");
            let id = m.func_by_name(name.trim()).expect("function");
            let mut mem = Memory::default();
            let Ok(args) = parse_args(&m.funcs[id].sig.params, args_text, &mut mem) else {
                continue;
            };
            let mut mem2 = mem.clone();
            let mut interp = Interpreter::new(&m);
            interp.hosts = common::hosts();
            interp.fuel = 1_000_000;
            interp.max_depth = 200;
            let expected = interp.call(id, &args, &mut mem);
            if matches!(&expected, Err(e) if e.kind == ErrorKind::FuelExhausted) {
                continue;
            }
            let expected = outcome(expected, &mem);
            let mut hosts = common::hosts();
            let got = match residual::run(
                &m,
                id,
                &args,
                &mut mem2,
                &mut hosts,
                1_000_000,
                Budget::default(),
            ) {
                Ok(run) => {
                    if !dyc::bta::analyze(&m, &m.funcs[id], dyc::bta::Mode::Specialize)
                        .key_params
                        .is_empty()
                    {
                        specialized_static += 1;
                    }
                    outcome(Ok(run.result), &mem2)
                }
                Err(ResidualError::Runtime(e)) => outcome(Err(e), &mem2),
                Err(e @ ResidualError::Internal(_)) => panic!("{}: {call}: {e}", path.display()),
                Err(e) => format!("specialization failed: {e}"),
            };
            compared += 1;
            if got != expected {
                failures.push(format!(
                    "{}: {call}\n  interpreter: {expected}\n  residual:    {got}",
                    path.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(compared >= 240, "only {compared} runs compared");
    assert!(
        specialized_static >= 120,
        "only {specialized_static} runs had run-time constants"
    );
    println!("{compared} runs compared, {specialized_static} with run-time constants");
}

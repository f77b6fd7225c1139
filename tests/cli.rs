//! The `dyc` command-line tool, run as a user would.

use std::process::Command;

fn dyc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dyc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("dyc runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SUM_PROGRAM: &str =
    "[1,1,0,0, 1,2,1,0, 1,3,1,0, 2,1,1,2, 2,2,2,3, 5,0,2,28, 6,12,0,0, 0,1,0,0]";

#[test]
fn runs_the_bytecode_example() {
    let (code, out, err) = dyc(&[
        "run",
        "examples/bytecode.dyc",
        "run",
        SUM_PROGRAM,
        "100",
        "[]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "5050\nargument 2 after the call: []\n");
    assert!(err.contains("interpreted"), "{err}");
}

#[test]
fn indirect_jump_in_the_bytecode_example() {
    // r1 = 12; JMPR r1 -> pc 12: r2 = 5; HALT r2. The slot at 8 would trap.
    let program = "[1,1,12,0, 7,1,0,0, 9,0,0,0, 1,2,5,0, 0,2,0,0]";
    let (code, out, err) = dyc(&["run", "examples/bytecode.dyc", "run", program, "0", "[]"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("5\n"), "{out}");
}

#[test]
fn runtime_errors_exit_with_status_1_and_a_location() {
    // HALT r9 with 8 registers: out of bounds.
    let (code, out, err) = dyc(&[
        "run",
        "examples/bytecode.dyc",
        "run",
        "[0,9,0,0]",
        "0",
        "[]",
    ]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.contains("runtime error: index 9 out of bounds for length 8 in fn run at"),
        "{err}"
    );
}

#[test]
fn check_ir_and_analyze() {
    assert_eq!(dyc(&["check", "examples/bytecode.dyc"]).1, "ok\n");
    let (code, printed, _) = dyc(&["ir", "examples/bytecode.dyc"]);
    assert_eq!(code, 0);
    assert!(printed.starts_with("fn run([i64], i64, [mut i64]) -> i64 {\n"));
    let (code, analyzed, _) = dyc(&["analyze", "examples/bytecode.dyc"]);
    assert_eq!(code, 0);
    assert!(
        analyzed.contains("block1(v9: i64 as pc):  ; idom block0, loop depth 1 (header block1)"),
        "{analyzed}"
    );
}

#[test]
fn bad_input_gives_a_located_error_or_usage() {
    let dir = std::env::temp_dir().join(format!("dyc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("bad.ir");
    std::fs::write(&bad, "fn f() {\nblock0:\n    v0 = add v1\n}\n").expect("write");
    let (code, _, err) = dyc(&["check", bad.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1);
    assert!(
        err.ends_with("bad.ir:4:1: expected `,`, found `}`\n"),
        "{err}"
    );
    let (code, _, err) = dyc(&["frobnicate", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown command"), "{err}");
    let (code, _, err) = dyc(&["run", "examples/bytecode.dyc", "run", "[1]"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn readme_example_runs_as_documented() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let after = readme
        .split("## A short example")
        .nth(1)
        .expect("example section");
    let block = after
        .split("```dyc\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("dyc block");
    let dir = std::env::temp_dir().join(format!("dyc-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("dot.dyc");
    std::fs::write(&file, block).expect("write");
    let path = file.to_str().expect("utf-8 path");
    assert_eq!(dyc(&["check", path]).1, "ok\n");
    let (code, out, err) = dyc(&["run", path, "dot", "[2,0,3]", "[10,20,30]"]);
    assert_eq!((code, out.as_str()), (0, "110\n"), "{err}");
    let (code, ir, _) = dyc(&["ir", path]);
    assert_eq!(code, 0);
    assert!(ir.contains("make_static v0 as w"), "{ir}");
}

#[test]
fn source_errors_are_rendered_with_a_snippet() {
    let dir = std::env::temp_dir().join(format!("dyc-diag-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("prog.dyc");
    std::fs::write(
        &file,
        "fn f(a: i64, b: u8) -> i64 {\n    return a + b;\n}\n",
    )
    .expect("write");
    let (code, out, err) = dyc(&["check", file.to_str().expect("utf-8 path")]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.starts_with("error: mismatched types: `i64` + `u8`\n --> "),
        "{err}"
    );
    assert!(err.ends_with("prog.dyc:2:12\n  |\n2 |     return a + b;\n  |            ^^^^^ both operands must have the same type\n"), "{err}");
}

#[test]
fn explain_marks_binding_times_and_lists_the_points() {
    let (code, out, err) = dyc(&["explain", "examples/bytecode.dyc", "run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("v0:S v1:D v2:D"), "{out}");
    assert!(out.contains("static branch"), "{out}");
    assert!(out.contains("dynamic branch"), "{out}");
    assert!(out.contains("key parameters: v0 (code)"), "{out}");
    assert!(out.contains("specialization points: block1"), "{out}");
    assert!(out.contains("promotion points: inst"), "{out}");
    assert!(
        out.contains("local arrays (elements kept as values):\n  v3: [i64; 8] made at inst0"),
        "{out}"
    );
    assert!(out.contains("all at static indices: no memory"), "{out}");
}

#[test]
fn spec_prints_the_residual_program_and_runs_it() {
    let (code, out, err) = dyc(&[
        "spec",
        "examples/bytecode.dyc",
        "run",
        SUM_PROGRAM,
        "10",
        "[]",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("fn run$spec("), "{out}");
    assert!(!out.contains("load_static"), "static loads are gone: {out}");
    assert!(
        !out.contains("load ") && !out.contains("store "),
        "the registers are values, not memory: {out}"
    );
    assert!(out.ends_with("result: 55\n"), "{out}");
}

/// Output into a pipe that is already closed ends the tool quietly: no panic message, no
/// signal.
#[test]
fn a_closed_pipe_ends_the_tool_quietly() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_dyc"))
        .args(["ir", "examples/bytecode.dyc"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dyc runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("dyc ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "ended by a signal: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn dot_draws_the_cfg_with_binding_times_and_reachability() {
    let (code, out, err) = dyc(&["dot", "examples/bytecode.dyc", "run"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("digraph \"run\" {"), "{out}");
    assert!(out.contains("specialization point"), "{out}");
    assert!(out.contains("constant weird special merge"), "{out}");
    assert!(
        out.contains("[style=bold]") && out.contains("[style=dashed]"),
        "{out}"
    );
    assert!(out.contains("label=\"back\""), "{out}");
    let (code, out, _) = dyc(&["dot", "examples/bytecode.dyc", "run", "--stage", "cfg"]);
    assert_eq!(code, 0);
    assert!(!out.contains("RC:") && !out.contains("style=bold"), "{out}");
    let (code, out, err) = dyc(&["dot", "examples/bytecode.dyc", "run", "--stage", "plan"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("digraph \"plan run\" {"), "{out}");
    assert!(
        out.contains("root: entry") && out.contains("root: special"),
        "{out}"
    );
    assert!(out.contains("label=\"HBS\""), "{out}");
    let (code, out, err) = dyc(&[
        "dot",
        "tests/stages/plan_d_and_s.dyc",
        "f",
        "--stage",
        "plan",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("[shape=diamond, label=\"2: fork b4\"]"),
        "{out}"
    );
    let (code, _, err) = dyc(&["dot", "examples/bytecode.dyc", "run", "--stage", "flow"]);
    assert_eq!(code, 2);
    assert!(err.contains("stages are cfg, bta, rc and plan"), "{err}");
}

#[test]
fn run_stops_a_loop_that_never_ends_and_stats_prints_the_cache() {
    let dir = std::env::temp_dir().join(format!("dyc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("spin.dyc");
    std::fs::write(
        &file,
        "fn spin(x: i64) -> i64 {\n    var i = 0;\n    make_static(i);\n    loop {\n        i = i + 1;\n        if x == i { return i; }\n    }\n}\n",
    )
    .expect("written");
    let f = file.to_str().expect("utf-8 path");
    let (code, _, err) = dyc(&["run", f, "spin", "-1", "--fuel", "100000"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("fuel exhausted") && err.contains("line 5"),
        "{err}"
    );
    // Compiled through the entry cache: the runaway specialization falls back to the
    // generic code, which finds 7.
    let (code, out, err) = dyc(&["stats", f, "spin", "7", "--calls", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("7"), "{out}");
    assert!(
        out.contains("2 calls") && out.contains("1 fallbacks"),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

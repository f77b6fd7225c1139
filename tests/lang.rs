//! Region-language tests: every `tests/lang/**/*.dyc` and `examples/*.dyc` file is compiled; if it compiles,
//! each `// run: f(args)` line is interpreted and the results are the output; if not, the
//! rendered diagnostics are. The output is compared with the file's `// check:` lines
//! (`DYC_BLESS=1` rewrites them). Compiled modules must also round-trip through the IR
//! text format.
//!
//! The examples of `docs/language.md` are checked the same way: every ```dyc block must
//! compile, and its `// run:` and `// check:` lines must hold.

mod common;

use std::path::Path;

use dyc::ir::parser::parse_module;
use dyc::ir::printer::print_module;

fn output(file: &str, src: &str) -> Result<String, String> {
    match dyc::lang::compile(file, src) {
        Err(d) => Ok(d.to_string()),
        Ok(m) => {
            let text = print_module(&m);
            let again =
                parse_module(&text).map_err(|e| format!("IR does not reparse: {e}\n{text}"))?;
            if print_module(&again) != text {
                return Err(format!("IR round trip changed the text:\n{text}"));
            }
            common::run_lines(&m, src, "//")
        }
    }
}

fn suite(dir: &str) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    common::run_suite(&root, "dyc", "//", |path, src| {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        output(name, src)
    })
}

#[test]
fn lang_programs() {
    println!("{} language tests run", suite("tests/lang"));
}

/// The examples carry their expected output too.
#[test]
fn example_programs() {
    println!("{} examples run", suite("examples"));
}

#[test]
fn language_doc_examples() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/language.md"))
        .expect("docs/language.md");
    let mut blocks = 0;
    let mut failures = Vec::new();
    for (k, part) in doc.split("```dyc\n").skip(1).enumerate() {
        let src = part.split("```").next().expect("closed block");
        blocks += 1;
        let expected = common::directive(src, "//", "check:");
        match output(&format!("example{k}.dyc"), src) {
            Ok(out) => {
                let actual: Vec<&str> = out.lines().collect();
                if actual != expected {
                    failures.push(format!(
                        "example {k}:\n{src}\n--- expected\n{}\n--- actual\n{out}",
                        expected.join("\n")
                    ));
                }
            }
            Err(e) => failures.push(format!("example {k}: {e}")),
        }
    }
    assert!(blocks >= 20, "only {blocks} examples in docs/language.md");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

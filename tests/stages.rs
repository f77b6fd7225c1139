//! File tests of every stage of specialization: region sources under `tests/stages/` whose
//! first line is `// test: KIND CALL` and whose expected output follows as `// check:`
//! lines. `DYC_BLESS=1 cargo test --test stages` rewrites the check lines from the actual
//! output (review the diff before committing).
//!
//! Kinds (CALL is `f` or `f(args)`, arguments as `dyc run` takes them):
//! - `explain f`: the binding-time analysis of `f` (`dyc explain`);
//! - `ge f`: the stitch program of `f` in CFG form (`dyc ge`);
//! - `plan f`: the plan the static transform lays over it (roots, trees, shared tails);
//! - `residual f(args)`: the residual IR of `f` specialized on the key arguments among
//!   `args` (`dyc spec`), then `=> result`;
//! - `clif f(args)`: the Cranelift IR of the entry unit of that specialization, as the
//!   stitcher hands it to Cranelift (the stitch-time optimizations show here); addresses
//!   (static slices, fault sites) print as `ADDR`.

mod common;

use std::path::Path;

use dyc::bta::Mode;
use dyc::interp::{format_val, parse_args, HostFns, Memory, Val};
use dyc::ir::{FuncId, Module};
use dyc::{Arg, Program};

/// The function and arguments of a call `f(args)` (or `f`).
fn call(m: &Module, text: &str, mem: &mut Memory) -> Result<(FuncId, Vec<Val>), String> {
    let (name, args) = match text.split_once('(') {
        Some((n, rest)) => (n.trim(), rest.strip_suffix(')').ok_or("unclosed call")?),
        None => (text.trim(), ""),
    };
    let id = m
        .func_by_name(name)
        .ok_or(format!("no function `{name}`"))?;
    let vals = if args.trim().is_empty() {
        Vec::new()
    } else {
        parse_args(&m.funcs[id].sig.params, args, mem)?
    };
    Ok((id, vals))
}

/// Hex constants longer than 32 bits (addresses) as `ADDR`.
fn without_addresses(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(k) = rest.find("0x") {
        out.push_str(&rest[..k]);
        let tail = &rest[k + 2..];
        let n = tail
            .find(|c: char| !(c.is_ascii_hexdigit() || c == '_'))
            .unwrap_or(tail.len());
        let digits = tail[..n].chars().filter(|&c| c != '_').count();
        if digits > 8 {
            out.push_str("ADDR");
        } else {
            out.push_str(&rest[k..k + 2 + n]);
        }
        rest = &tail[n..];
    }
    out.push_str(rest);
    out
}

fn run(path: &Path, src: &str) -> Result<String, String> {
    let test = common::directive(src, "//", "test:")
        .first()
        .copied()
        .ok_or("no `// test:` line")?;
    let (kind, what) = test.split_once(' ').ok_or("`// test: KIND CALL`")?;
    let file = path.display().to_string();
    let m = dyc::lang::compile(&file, src).map_err(|d| d.to_string())?;
    let mut mem = Memory::default();
    let (id, args) = call(&m, what, &mut mem)?;
    let f = &m.funcs[id];
    Ok(match kind {
        "explain" => dyc::bta::explain(&m, f, &dyc::bta::analyze(&m, f, Mode::Specialize)),
        "ge" => {
            let ge = dyc::ge::build(&m, id, Mode::Specialize).map_err(|e| e.to_string())?;
            dyc_stitcher::ge::print_cfg(&ge.program)
        }
        "plan" => {
            let ge = dyc::ge::build(&m, id, Mode::Specialize).map_err(|e| e.to_string())?;
            dyc_stitcher::ge::print_plan(&ge.program)
        }
        "residual" => {
            let mut hosts = HostFns::default();
            let budget = dyc_stitcher::ge::Budget::default();
            let r = dyc::residual::run(&m, id, &args, &mut mem, &mut hosts, 1_000_000, budget)
                .map_err(|e| format!("{e:?}"))?;
            let spec = r
                .module
                .funcs
                .keys()
                .next_back()
                .expect("the specialization");
            let mut out = dyc::ir::printer::print_function(&r.module, spec);
            let result = r.result.map_or("()".to_string(), |v| format_val(v, &mem));
            out.push_str(&format!("=> {result}\n"));
            out
        }
        "clif" => {
            let p = Program::from_module(m.clone(), dyc::RuntimeOptions::default())
                .map_err(|e| e.to_string())?;
            let region = p.region(&f.name).map_err(|e| e.to_string())?;
            let mut storage: Vec<Vec<i64>> = Vec::new();
            for &k in region.key_params() {
                if let Val::Slice(s) = &args[k] {
                    let data = mem.bufs[s.buf].data.iter();
                    storage.push(data.map(|c| c.as_i64().unwrap_or(0)).collect());
                }
            }
            let mut slices = storage.iter();
            let key: Vec<Arg> = region
                .key_params()
                .iter()
                .map(|&k| match &args[k] {
                    Val::Scalar(c) => Ok(Arg::Scalar(*c)),
                    Val::Slice(_) => Ok(Arg::from(&slices.next().expect("stored")[..])),
                    Val::Array(_) => Err("an array argument".to_string()),
                })
                .collect::<Result<_, String>>()?;
            let ir = region.entry_unit_ir(&key).map_err(|e| e.to_string())?;
            without_addresses(&ir)
        }
        other => return Err(format!("unknown test kind `{other}`")),
    })
}

#[test]
fn stages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stages");
    let n = common::run_suite(&root, "dyc", "//", run);
    assert!(n >= 4, "only {n} stage tests");
}

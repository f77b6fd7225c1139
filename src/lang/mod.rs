//! The region language front end: source text to IR (`docs/language.md`).
//!
//! [`lexer`] → [`parser`] (syntax tree, [`ast`]) → [`lower`] (names, types, SSA through
//! [`ssa`]) → a verified [`crate::ir::Module`]. Every error is a [`diag::Diagnostic`] with
//! the file, line, column and a source snippet; one run reports as many as it can.

pub mod ast;
pub mod diag;
pub mod lexer;
pub mod lower;
pub mod parser;
pub mod ssa;

pub use diag::{Diagnostic, Diagnostics, SourceMap, Span};

use crate::ir::Module;

/// Compiles region source `src` (named `file` in diagnostics) to a verified module.
pub fn compile(file: &str, src: &str) -> Result<Module, Diagnostics> {
    let fail = |errors: Vec<Diagnostic>| Diagnostics {
        file: file.to_string(),
        src: src.to_string(),
        errors,
    };
    let (prog, errors) = parser::parse(src);
    if !errors.is_empty() {
        return Err(fail(errors));
    }
    let map = SourceMap::new(file, src);
    let m = lower::lower(&prog, &map).map_err(fail)?;
    if let Err(e) = crate::verifier::verify_module(&m) {
        return Err(fail(vec![Diagnostic::new(
            Span::default(),
            format!("internal error: the front end produced invalid IR:\n{e}"),
            "",
        )]));
    }
    Ok(m)
}

#[cfg(test)]
mod tests;

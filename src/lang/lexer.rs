//! The lexer of the region language.
//!
//! Tokens: identifiers and keywords, integer literals (decimal, `0x` hex, `0b` binary,
//! `_` separators), float literals (`1.5`, `2e10`, `1.0e-3`), punctuation, `//` line
//! comments and `/* */` block comments. Every token carries its span. Lexical errors
//! (an unknown character, a malformed number, an unterminated comment) are reported and
//! lexing goes on, so one run reports them all.

use super::diag::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Ident(String),
    Int(u128),
    Float(f64),
    /// Punctuation or operator, e.g. `(`, `<=`, `&&`, `->`.
    Punct(&'static str),
    Eof,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(x) => write!(f, "`{x}`"),
            Tok::Float(x) => write!(f, "`{x:?}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::Eof => write!(f, "end of file"),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Longest first, so that `<=` wins over `<`.
const PUNCTS: [&str; 35] = [
    "<<=", ">>=", "->", "==", "!=", "<=", ">=", "&&", "||", "<<", ">>", "+=", "-=", "*=", "/=",
    "(", ")", "{", "}", "[", "]", ",", ";", ":", "=", "<", ">", "+", "-", "*", "/", "%", "!", "@",
    "&",
];
const PUNCTS2: [&str; 3] = ["|", "^", "."];

pub fn lex(src: &str) -> (Vec<Token>, Vec<Diagnostic>) {
    let bytes = src.as_bytes();
    let mut toks = Vec::new();
    let mut errs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if src[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if src[i..].starts_with("/*") {
            let start = i;
            match src[i + 2..].find("*/") {
                Some(k) => i += k + 4,
                None => {
                    errs.push(Diagnostic::new(
                        Span::new(start, start + 2),
                        "unterminated block comment",
                        "this comment never ends",
                    ));
                    i = bytes.len();
                }
            }
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            toks.push(Token {
                tok: Tok::Ident(src[start..i].to_string()),
                span: Span::new(start, i),
            });
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let mut is_float = false;
            let hex = src[start..i].starts_with("0x") || src[start..i].starts_with("0X");
            // A fraction: `.` followed by a digit (so that `1..` or `x.1` stay out).
            if !hex && i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                is_float = true;
                i += 1;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
            }
            if !hex
                && i < bytes.len()
                && (bytes[i] == b'+' || bytes[i] == b'-')
                && matches!(bytes[i - 1], b'e' | b'E')
            {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let text: String = src[start..i].chars().filter(|&c| c != '_').collect();
            let span = Span::new(start, i);
            let tok = if is_float || (!hex && (text.contains('e') || text.contains('E'))) {
                text.parse::<f64>().ok().map(Tok::Float)
            } else if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                u128::from_str_radix(h, 16).ok().map(Tok::Int)
            } else if let Some(b) = text.strip_prefix("0b") {
                u128::from_str_radix(b, 2).ok().map(Tok::Int)
            } else {
                text.parse::<u128>().ok().map(Tok::Int)
            };
            match tok {
                Some(tok) => toks.push(Token { tok, span }),
                None => {
                    errs.push(Diagnostic::new(
                        span,
                        format!("malformed number `{}`", &src[start..i]),
                        "not a number",
                    ));
                    toks.push(Token {
                        tok: Tok::Int(0),
                        span,
                    });
                }
            }
            continue;
        }
        match PUNCTS
            .iter()
            .chain(PUNCTS2.iter())
            .find(|p| src[i..].starts_with(**p))
        {
            Some(p) => {
                i += p.len();
                toks.push(Token {
                    tok: Tok::Punct(p),
                    span: Span::new(start, i),
                });
            }
            None => {
                let ch = src[i..].chars().next().expect("in bounds");
                i += ch.len_utf8();
                errs.push(Diagnostic::new(
                    Span::new(start, i),
                    format!("unexpected character `{ch}`"),
                    "not part of the language",
                ));
            }
        }
    }
    toks.push(Token {
        tok: Tok::Eof,
        span: Span::new(src.len(), src.len()),
    });
    (toks, errs)
}

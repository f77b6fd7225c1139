//! The lexer of the region language.
//!
//! Tokens: identifiers and keywords, integer literals (decimal, `0x` hex, `0b` binary,
//! `_` separators), float literals (`1.5`, `2e10`, `1.0e-3`), punctuation, `//` line
//! comments and `/* */` block comments. Every token carries its span. Lexical errors
//! (an unknown character, a malformed number, an unterminated comment) are reported and
//! lexing goes on, so one run reports them all.
//!
//! Cost: one pass over the bytes. Tokens are `Copy` and allocate nothing: an identifier's
//! text is its span in the source, punctuation is recognized by a `match` on bytes.

use super::diag::{Diagnostic, Span};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tok {
    /// An identifier or keyword; its text is the token's span in the source.
    Ident,
    /// An integer literal (one above `u64::MAX` is reported and reads as 0).
    Int(u64),
    Float(f64),
    /// Punctuation or operator, e.g. `(`, `<=`, `&&`, `->`.
    Punct(&'static str),
    Eof,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident => write!(f, "identifier"),
            Tok::Int(x) => write!(f, "`{x}`"),
            Tok::Float(x) => write!(f, "`{x:?}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::Eof => write!(f, "end of file"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// The punctuation at the start of `b` (longest match first, so `<=` wins over `<`).
fn punct(b: &[u8]) -> Option<&'static str> {
    let two = |second: u8, long: &'static str, short: Option<&'static str>| {
        if b.get(1) == Some(&second) {
            Some(long)
        } else {
            short
        }
    };
    match b[0] {
        b'<' if b.starts_with(b"<<=") => Some("<<="),
        b'>' if b.starts_with(b">>=") => Some(">>="),
        b'<' => match b.get(1) {
            Some(b'=') => Some("<="),
            Some(b'<') => Some("<<"),
            _ => Some("<"),
        },
        b'>' => match b.get(1) {
            Some(b'=') => Some(">="),
            Some(b'>') => Some(">>"),
            _ => Some(">"),
        },
        b'-' => match b.get(1) {
            Some(b'>') => Some("->"),
            Some(b'=') => Some("-="),
            _ => Some("-"),
        },
        b'=' => two(b'=', "==", Some("=")),
        b'!' => two(b'=', "!=", Some("!")),
        b'&' => two(b'&', "&&", Some("&")),
        b'|' => two(b'|', "||", Some("|")),
        b'+' => two(b'=', "+=", Some("+")),
        b'*' => two(b'=', "*=", Some("*")),
        b'/' => two(b'=', "/=", Some("/")),
        b'(' => Some("("),
        b')' => Some(")"),
        b'{' => Some("{"),
        b'}' => Some("}"),
        b'[' => Some("["),
        b']' => Some("]"),
        b',' => Some(","),
        b';' => Some(";"),
        b':' => Some(":"),
        b'%' => Some("%"),
        b'@' => Some("@"),
        b'^' => Some("^"),
        b'.' => Some("."),
        _ => None,
    }
}

/// A lexer that makes one token at a time, so that a parser pulling from it keeps no
/// token array (whose size would grow with the source).
pub struct Lexer<'s> {
    src: &'s str,
    /// The next byte to read.
    pos: usize,
    /// Lexical errors so far.
    pub errors: Vec<Diagnostic>,
}

impl<'s> Lexer<'s> {
    pub fn new(src: &'s str) -> Lexer<'s> {
        Lexer {
            src,
            pos: 0,
            errors: Vec::new(),
        }
    }

    /// The next token; [`Tok::Eof`] at the end, and again on every later call.
    pub fn next_token(&mut self) -> Token {
        let src = self.src;
        let bytes = src.as_bytes();
        let mut i = self.pos;
        let token = |tok, start, end: usize| Token {
            tok,
            span: Span::new(start, end),
        };
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_whitespace() {
                i += 1;
                continue;
            }
            if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
                let start = i;
                match src[i + 2..].find("*/") {
                    Some(k) => i += k + 4,
                    None => {
                        self.errors.push(Diagnostic::new(
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
                self.pos = i;
                return token(Tok::Ident, start, i);
            }
            if c.is_ascii_digit() {
                let tok = self.number(&mut i);
                self.pos = i;
                return token(tok, start, i);
            }
            match punct(&bytes[i..]) {
                Some(p) => {
                    i += p.len();
                    self.pos = i;
                    return token(Tok::Punct(p), start, i);
                }
                None => {
                    let ch = src[i..].chars().next().expect("in bounds");
                    i += ch.len_utf8();
                    self.errors.push(Diagnostic::new(
                        Span::new(start, i),
                        format!("unexpected character `{ch}`"),
                        "not part of the language",
                    ));
                }
            }
        }
        self.pos = i;
        token(Tok::Eof, src.len(), src.len())
    }

    /// The number starting at `*i` (a digit), which it passes; a malformed number is
    /// reported and reads as 0.
    fn number(&mut self, i: &mut usize) -> Tok {
        let (src, bytes) = (self.src, self.src.as_bytes());
        let start = *i;
        let word = |i: &mut usize| {
            while *i < bytes.len() && (bytes[*i].is_ascii_alphanumeric() || bytes[*i] == b'_') {
                *i += 1;
            }
        };
        word(i);
        let mut is_float = false;
        let hex = src[start..*i].starts_with("0x") || src[start..*i].starts_with("0X");
        // A fraction: `.` followed by a digit (so that `1..` or `x.1` stay out).
        if !hex && *i + 1 < bytes.len() && bytes[*i] == b'.' && bytes[*i + 1].is_ascii_digit() {
            is_float = true;
            *i += 1;
            word(i);
        }
        if !hex
            && *i < bytes.len()
            && (bytes[*i] == b'+' || bytes[*i] == b'-')
            && matches!(bytes[*i - 1], b'e' | b'E')
        {
            *i += 1;
            while *i < bytes.len() && bytes[*i].is_ascii_digit() {
                *i += 1;
            }
        }
        enum Number {
            Int(u128),
            Float(f64),
        }
        let digits = &bytes[start..*i];
        // Up to 38 decimal digits cannot overflow a u128.
        let number = if !is_float && digits.len() <= 38 && digits.iter().all(u8::is_ascii_digit) {
            let x = digits
                .iter()
                .fold(0u128, |x, &d| x * 10 + u128::from(d - b'0'));
            Some(Number::Int(x))
        } else {
            let text: String = src[start..*i].chars().filter(|&c| c != '_').collect();
            if is_float || (!hex && (text.contains('e') || text.contains('E'))) {
                text.parse::<f64>().ok().map(Number::Float)
            } else if let Some(h) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                u128::from_str_radix(h, 16).ok().map(Number::Int)
            } else if let Some(b) = text.strip_prefix("0b") {
                u128::from_str_radix(b, 2).ok().map(Number::Int)
            } else {
                text.parse::<u128>().ok().map(Number::Int)
            }
        };
        let (message, label) = match number {
            Some(Number::Float(x)) => return Tok::Float(x),
            Some(Number::Int(x)) => match u64::try_from(x) {
                Ok(x) => return Tok::Int(x),
                Err(_) => (
                    format!("literal {x} is out of range for every integer type"),
                    "more than 64 bits",
                ),
            },
            None => (
                format!("malformed number `{}`", &src[start..*i]),
                "not a number",
            ),
        };
        self.errors
            .push(Diagnostic::new(Span::new(start, *i), message, label));
        Tok::Int(0)
    }
}

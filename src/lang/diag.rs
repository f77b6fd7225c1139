//! Diagnostics: an error with a primary span, rendered with the file, line, column and a
//! source snippet with the span marked, in the style of rustc:
//!
//! ```text
//! error: unknown policy `cache_everything`
//!  --> prog.dyc:3:20
//!   |
//! 3 |     make_static(x: cache_everything);
//!   |                    ^^^^^^^^^^^^^^^^ not a policy
//! ```
//!
//! Rendering is plain text and deterministic, so tests compare exact messages.

use std::fmt;

/// A byte range of the source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// One error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Text under the marked span.
    pub label: String,
    /// Extra lines after the snippet (`= note: ...`).
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>, label: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            label: label.into(),
            notes: Vec::new(),
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}

/// Lines longer than this many characters are shown as a window around the mark.
const SNIPPET_CHARS: usize = 120;

/// Maps byte offsets to 1-based lines and columns (columns count characters).
#[derive(Clone, Debug)]
pub struct SourceMap<'a> {
    pub name: &'a str,
    pub src: &'a str,
    line_starts: Vec<usize>,
    /// Whether each line is ASCII (its columns are byte offsets).
    ascii: Vec<bool>,
    /// The line of the last lookup: positions are mostly asked for in source order, so the
    /// next is usually on that line or the one after.
    last_line: std::cell::Cell<usize>,
}

impl<'a> SourceMap<'a> {
    pub fn new(name: &'a str, src: &'a str) -> SourceMap<'a> {
        let mut line_starts = vec![0];
        line_starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        let ascii = line_starts
            .iter()
            .enumerate()
            .map(|(k, &start)| {
                let end = line_starts.get(k + 1).copied().unwrap_or(src.len());
                src.as_bytes()[start..end].is_ascii()
            })
            .collect();
        SourceMap {
            name,
            src,
            line_starts,
            ascii,
            last_line: std::cell::Cell::new(0),
        }
    }

    /// 1-based (line, column) of byte offset `pos`: the line of the last lookup or the next
    /// one, else a binary search over line starts; on ASCII lines no scan at all (so a long
    /// line costs no more per position).
    pub fn line_col(&self, pos: u32) -> (u32, u32) {
        let pos = (pos as usize).min(self.src.len());
        let starts = &self.line_starts;
        let on = |l: usize| starts[l] <= pos && starts.get(l + 1).is_none_or(|&e| pos < e);
        let hint = self.last_line.get();
        let line = if on(hint) {
            hint
        } else if hint + 1 < starts.len() && on(hint + 1) {
            hint + 1
        } else {
            starts.partition_point(|&s| s <= pos) - 1
        };
        self.last_line.set(line);
        let start = self.line_starts[line];
        if self.ascii[line] {
            return (line as u32 + 1, (pos - start) as u32 + 1);
        }
        let col = self
            .src
            .get(start..pos)
            .map_or(pos - start, |s| s.chars().count());
        (line as u32 + 1, col as u32 + 1)
    }

    fn line_text(&self, line: u32) -> &'a str {
        let i = line as usize - 1;
        let start = self.line_starts[i];
        let end = self
            .line_starts
            .get(i + 1)
            .map_or(self.src.len(), |&e| e - 1);
        self.src
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches('\r')
    }

    /// Renders one diagnostic.
    pub fn render(&self, d: &Diagnostic) -> String {
        let (line, col) = self.line_col(d.span.start);
        let text = self.line_text(line);
        let gutter = line.to_string().len();
        let pad = " ".repeat(gutter);
        // The mark covers the span on its first line (at least one character).
        let (end_line, end_col) = self.line_col(d.span.end);
        let width = if end_line == line {
            (end_col.saturating_sub(col)).max(1)
        } else {
            (text.chars().count() as u32 + 1).saturating_sub(col).max(1)
        };
        let mut out = format!(
            "error: {}\n{pad}--> {}:{line}:{col}\n{pad} |\n",
            d.message, self.name
        );
        // A long line is shown as a window around the mark.
        let chars: Vec<char> = text.chars().collect();
        let (first, shown_width) = if chars.len() <= SNIPPET_CHARS {
            (0, width as usize)
        } else {
            let w = (width as usize).min(SNIPPET_CHARS / 2);
            ((col as usize - 1).saturating_sub(SNIPPET_CHARS / 4), w)
        };
        let last = chars.len().min(first + SNIPPET_CHARS);
        let mut shown: String = chars[first..last].iter().collect();
        let mut skip = col as usize - 1 - first;
        if first > 0 {
            shown.insert_str(0, "...");
            skip += 3;
        }
        if last < chars.len() {
            shown.push_str("...");
        }
        out.push_str(format!("{line} | {shown}").trim_end());
        out.push('\n');
        let lead: String = shown
            .chars()
            .take(skip)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let label = if d.label.is_empty() {
            String::new()
        } else {
            format!(" {}", d.label)
        };
        out.push_str(&format!(
            "{pad} | {lead}{}{label}\n",
            "^".repeat(shown_width)
        ));
        for n in &d.notes {
            out.push_str(&format!("{pad} = note: {n}\n"));
        }
        out
    }
}

/// Every error of one compilation, with the source they refer to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostics {
    pub file: String,
    pub src: String,
    pub errors: Vec<Diagnostic>,
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let map = SourceMap::new(&self.file, &self.src);
        for (i, d) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", map.render(d))?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

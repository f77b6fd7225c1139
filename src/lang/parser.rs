//! The parser of the region language: recursive descent over the tokens of
//! [`super::lexer`], with error recovery at statement and item boundaries so that one run
//! reports several syntax errors. The grammar is in `docs/language.md`.
//!
//! Expression precedence, loosest first: `||`, `&&`, `|`, `^`, `&`, `==` `!=`,
//! `<` `<=` `>` `>=`, `<<` `>>`, `+` `-`, `*` `/` `%`, `as`, unary `-` `!`, postfix
//! (calls, `s[i]`, `s@[i]`).

use super::ast::*;
use super::diag::{Diagnostic, Span};
use super::lexer::{Lexer, Tok, Token};
use crate::ir::{Scalar, Type};
use crate::verifier::MAX_ARRAY_LEN;

/// Reported errors stop at this many (the rest are usually consequences).
const MAX_ERRORS: usize = 30;

/// The deepest nesting of blocks, parenthesized or bracketed expressions and unary
/// operators the parser accepts. Every later pass may recurse on nesting, so the limit
/// keeps the stack of any thread that compiles bounded; beyond it the parser reports one
/// located error and stops.
pub const MAX_NESTING: u32 = 256;

/// Keywords, which cannot name variables or functions.
pub const KEYWORDS: [&str; 26] = [
    "fn",
    "extern",
    "pure",
    "let",
    "var",
    "if",
    "else",
    "while",
    "loop",
    "break",
    "continue",
    "return",
    "switch",
    "case",
    "default",
    "goto",
    "trap",
    "make_static",
    "make_dynamic",
    "true",
    "false",
    "len",
    "min",
    "max",
    "as",
    "mut",
];

/// Whether `s` is one of [`KEYWORDS`].
pub fn is_keyword(s: &str) -> bool {
    matches!(
        s,
        "fn" | "extern"
            | "pure"
            | "let"
            | "var"
            | "if"
            | "else"
            | "while"
            | "loop"
            | "break"
            | "continue"
            | "return"
            | "switch"
            | "case"
            | "default"
            | "goto"
            | "trap"
            | "make_static"
            | "make_dynamic"
            | "true"
            | "false"
            | "len"
            | "min"
            | "max"
            | "as"
            | "mut"
    )
}

/// Parses `src`, pulling its tokens from a [`Lexer`] as it goes. The diagnostics are the
/// lexical errors (all of them), then the syntax errors.
pub fn parse<'s>(src: &'s str) -> (Program<'s>, Vec<Diagnostic>) {
    let mut lexer = Lexer::new(src);
    let cur = lexer.next_token();
    let next = lexer.next_token();
    let mut p = Parser {
        src,
        lexer,
        cur,
        next,
        prev: cur.span,
        consumed: 0,
        errors: Vec::new(),
        depth: 0,
        stopped: false,
        stmts: Vec::new(),
    };
    let prog = p.program();
    p.skip_to_end();
    let mut errors = p.lexer.errors;
    errors.append(&mut p.errors);
    (prog, errors)
}

struct Parser<'s> {
    src: &'s str,
    lexer: Lexer<'s>,
    /// The current token and the one after.
    cur: Token,
    next: Token,
    /// The span of the token before the current one.
    prev: Span,
    /// Tokens consumed so far.
    consumed: usize,
    errors: Vec<Diagnostic>,
    /// The statements of the blocks being parsed, innermost last (see `stmts_until`).
    stmts: Vec<Stmt<'s>>,
    /// Current nesting (see [`MAX_NESTING`]).
    depth: u32,
    /// Parsing stopped at a fatal error: later errors are consequences, not reported.
    stopped: bool,
}

/// A syntax error has been reported; the caller recovers.
struct Reported;

type PResult<T> = Result<T, Reported>;

impl<'s> Parser<'s> {
    fn peek(&self) -> Tok {
        self.cur.tok
    }

    /// The token after the current one.
    fn peek_next(&self) -> Tok {
        self.next.tok
    }

    /// The text of the current token.
    fn text(&self) -> &'s str {
        let span = self.cur.span;
        &self.src[span.start as usize..span.end as usize]
    }

    /// The current token for a message: an identifier's text, or the token.
    fn found(&self) -> String {
        match self.peek() {
            Tok::Ident => format!("`{}`", self.text()),
            t => t.to_string(),
        }
    }

    fn span(&self) -> Span {
        self.cur.span
    }

    fn prev_span(&self) -> Span {
        self.prev
    }

    /// Consumes the current token (not the end of the input) and returns it.
    fn bump(&mut self) -> Token {
        let t = self.cur;
        if t.tok != Tok::Eof {
            self.prev = t.span;
            self.cur = self.next;
            self.next = self.lexer.next_token();
            self.consumed += 1;
        }
        t
    }

    /// Skips the rest of the input (its lexical errors are still collected).
    fn skip_to_end(&mut self) {
        while self.cur.tok != Tok::Eof {
            self.bump();
        }
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if q == p)
    }

    fn is_kw(&self, k: &str) -> bool {
        self.peek() == Tok::Ident && self.text() == k
    }

    fn eat(&mut self, p: &str) -> bool {
        let yes = self.is(p);
        if yes {
            self.bump();
        }
        yes
    }

    fn eat_kw(&mut self, k: &str) -> bool {
        let yes = self.is_kw(k);
        if yes {
            self.bump();
        }
        yes
    }

    fn error<T>(&mut self, span: Span, message: String, label: &str) -> PResult<T> {
        if self.errors.len() < MAX_ERRORS && !self.stopped {
            self.errors.push(Diagnostic::new(span, message, label));
        }
        Err(Reported)
    }

    /// Enters one level of nesting; beyond [`MAX_NESTING`] reports the error and skips to
    /// the end of the input (the rest cannot be parsed within the limit either).
    fn nest(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth <= MAX_NESTING {
            return Ok(());
        }
        let span = self.span();
        let r = self.error(
            span,
            format!("nesting too deep: more than {MAX_NESTING} levels"),
            "nested blocks, parentheses or unary operators stop here",
        );
        self.skip_to_end();
        self.stopped = true;
        r
    }

    /// Runs `f` one nesting level deeper.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        let r = self.nest().and_then(|()| f(self));
        self.depth -= 1;
        r
    }

    fn expected<T>(&mut self, what: &str) -> PResult<T> {
        let found = self.found();
        let span = self.span();
        self.error(
            span,
            format!("expected {what}, found {found}"),
            &format!("expected {what}"),
        )
    }

    fn expect(&mut self, p: &str) -> PResult<()> {
        if self.eat(p) {
            Ok(())
        } else {
            self.expected(&format!("`{p}`"))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<Ident<'s>> {
        match self.peek() {
            Tok::Ident if !is_keyword(self.text()) => {
                let name = self.text();
                let span = self.bump().span;
                Ok(Ident { name, span })
            }
            Tok::Ident => {
                let name = self.text();
                let span = self.span();
                self.error(
                    span,
                    format!("expected {what}, found keyword `{name}`"),
                    "a keyword cannot be a name",
                )
            }
            _ => self.expected(what),
        }
    }

    fn program(&mut self) -> Program<'s> {
        let mut prog = Program::default();
        while self.peek() != Tok::Eof && self.errors.len() < MAX_ERRORS {
            let item = if self.is_kw("extern") {
                self.extern_decl().map(Item::Extern)
            } else if self.is_kw("fn") {
                self.fn_decl().map(Item::Fn)
            } else {
                self.expected("`fn` or `extern`")
            };
            match item {
                Ok(i) => prog.items.push(i),
                Err(Reported) => self.recover_item(),
            }
        }
        prog
    }

    /// Skips to the next `fn` or `extern` at the start of an item.
    fn recover_item(&mut self) {
        self.bump();
        while self.peek() != Tok::Eof && !self.is_kw("fn") && !self.is_kw("extern") {
            self.bump();
        }
    }

    fn ty(&mut self) -> PResult<TypeExpr> {
        let start = self.span();
        if self.eat("[") {
            let mutable = self.eat_kw("mut");
            let elem = self.scalar()?;
            if !mutable && self.eat(";") {
                let len_span = self.span();
                let Tok::Int(n) = self.peek() else {
                    return self.expected("the array's length");
                };
                self.bump();
                if !(1..=u64::from(MAX_ARRAY_LEN)).contains(&n) {
                    return self.error(
                        len_span,
                        format!("array length {n} is not between 1 and {MAX_ARRAY_LEN}"),
                        "the number of elements",
                    );
                }
                self.expect("]")?;
                return Ok(TypeExpr {
                    ty: Type::Array {
                        elem,
                        len: n as u32,
                    },
                    span: start.to(self.prev_span()),
                });
            }
            self.expect("]")?;
            return Ok(TypeExpr {
                ty: Type::Slice { elem, mutable },
                span: start.to(self.prev_span()),
            });
        }
        let s = self.scalar()?;
        Ok(TypeExpr {
            ty: Type::Scalar(s),
            span: start,
        })
    }

    fn scalar(&mut self) -> PResult<Scalar> {
        match self.peek() {
            Tok::Ident => match Scalar::from_name(self.text()) {
                Some(s) => {
                    self.bump();
                    Ok(s)
                }
                None => {
                    let span = self.span();
                    self.error(
                        span,
                        format!("unknown type `{}`", self.text()),
                        "expected i8, i16, i32, i64, u8, u16, u32, u64, f64, bool or a slice",
                    )
                }
            },
            _ => self.expected("a type"),
        }
    }

    fn params(&mut self) -> PResult<Vec<Param<'s>>> {
        self.expect("(")?;
        let mut params = Vec::new();
        while !self.is(")") {
            let name = self.ident("a parameter name")?;
            self.expect(":")?;
            let ty = self.ty()?;
            params.push(Param { name, ty });
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")")?;
        Ok(params)
    }

    fn ret(&mut self) -> PResult<Option<TypeExpr>> {
        if self.eat("->") {
            Ok(Some(self.ty()?))
        } else {
            Ok(None)
        }
    }

    fn extern_decl(&mut self) -> PResult<ExternDecl<'s>> {
        self.bump(); // extern
        let pure = self.eat_kw("pure");
        if !self.eat_kw("fn") {
            return self.expected("`fn`");
        }
        let name = self.ident("a function name")?;
        let params = self.params()?;
        let ret = self.ret()?;
        self.expect(";")?;
        Ok(ExternDecl {
            name,
            params,
            ret,
            pure,
        })
    }

    fn fn_decl(&mut self) -> PResult<FnDecl<'s>> {
        self.bump(); // fn
        let name = self.ident("a function name")?;
        let params = self.params()?;
        let ret = self.ret()?;
        let body = self.block()?;
        Ok(FnDecl {
            name,
            params,
            ret,
            body,
        })
    }

    fn block(&mut self) -> PResult<Block<'s>> {
        self.expect("{")?;
        let stmts = self.nested(|p| Ok(p.stmts_until(&["}"])))?;
        let close = self.span();
        self.expect("}")?;
        Ok(Block { stmts, close })
    }

    /// Statements up to (not including) one of `ends` (`}` or, in a switch, `case` and
    /// `default`), recovering from errors inside.
    fn stmts_until(&mut self, ends: &[&str]) -> Vec<Stmt<'s>> {
        // The statements collect on one stack shared by all nesting levels; a nested
        // block's move to a list of exactly their number (no growth or spare capacity per
        // block), an outermost block's keep the stack (no copy of a long body).
        let mark = self.stmts.len();
        loop {
            let at_end = ends.iter().any(|e| self.is(e) || self.is_kw(e));
            if at_end || self.peek() == Tok::Eof || self.errors.len() >= MAX_ERRORS {
                return if mark == 0 {
                    std::mem::take(&mut self.stmts)
                } else {
                    self.stmts.drain(mark..).collect()
                };
            }
            let before = self.consumed;
            match self.stmt() {
                Ok(s) => self.stmts.push(s),
                Err(Reported) => self.recover_stmt(before),
            }
        }
    }

    /// Skips past the next `;` or to the next `}` of this nesting level.
    fn recover_stmt(&mut self, start: usize) {
        if self.consumed == start {
            self.bump();
        }
        let mut depth = 0i32;
        loop {
            match self.peek() {
                Tok::Eof => return,
                Tok::Punct("{") => depth += 1,
                Tok::Punct("}") if depth == 0 => return,
                Tok::Punct("}") => depth -= 1,
                Tok::Punct(";") if depth == 0 => {
                    self.bump();
                    return;
                }
                _ => {}
            }
            self.bump();
        }
    }

    fn stmt(&mut self) -> PResult<Stmt<'s>> {
        let start = self.span();
        let kind = match self.peek() {
            Tok::Punct(";") => {
                self.bump();
                StmtKind::Block(Block {
                    stmts: Vec::new(),
                    close: start,
                })
            }
            Tok::Punct("{") => StmtKind::Block(self.block()?),
            Tok::Ident => match self.text() {
                k @ ("let" | "var") => {
                    self.bump();
                    let name = self.ident("a variable name")?;
                    let ty = if self.eat(":") {
                        Some(self.ty()?)
                    } else {
                        None
                    };
                    if let Some(t) = ty.filter(|t| t.ty.is_array()) {
                        if k == "let" {
                            return self.error(
                                name.span,
                                format!("array `{}` must be declared with `var`", name.name),
                                "its elements are written in place",
                            );
                        }
                        if !self.eat(";") {
                            return self.expected(
                                "`;` (an array has no initializer: its elements start at zero)",
                            );
                        }
                        return Ok(Stmt {
                            kind: StmtKind::Array { name, ty: t },
                            span: start.to(self.prev_span()),
                        });
                    }
                    self.expect("=")?;
                    let init = self.expr()?;
                    self.expect(";")?;
                    StmtKind::Let {
                        name,
                        mutable: k == "var",
                        ty,
                        init,
                    }
                }
                "if" => self.if_stmt()?,
                "while" => {
                    self.bump();
                    let cond = self.expr()?;
                    let body = self.block()?;
                    StmtKind::While { cond, body }
                }
                "loop" => {
                    self.bump();
                    StmtKind::Loop {
                        body: self.block()?,
                    }
                }
                k @ ("break" | "continue") => {
                    self.bump();
                    let label = if self.peek() == Tok::Ident {
                        Some(self.ident("a label")?)
                    } else {
                        None
                    };
                    self.expect(";")?;
                    if k == "break" {
                        StmtKind::Break(label)
                    } else {
                        StmtKind::Continue(label)
                    }
                }
                "return" => {
                    self.bump();
                    let value = if self.is(";") {
                        None
                    } else {
                        Some(self.expr()?)
                    };
                    self.expect(";")?;
                    StmtKind::Return(value)
                }
                "switch" => self.switch_stmt()?,
                "goto" => {
                    self.bump();
                    let label = self.ident("a label")?;
                    self.expect(";")?;
                    StmtKind::Goto(label)
                }
                "trap" => {
                    self.bump();
                    self.expect(";")?;
                    StmtKind::Trap
                }
                k @ ("make_static" | "make_dynamic") => {
                    self.bump();
                    self.expect("(")?;
                    let mut vars = vec![self.ident("a variable name")?];
                    while self.eat(",") {
                        vars.push(self.ident("a variable name")?);
                    }
                    let mut policies = Vec::new();
                    if k == "make_static" && self.eat(":") {
                        loop {
                            match self.peek() {
                                Tok::Ident => {
                                    let name = self.text();
                                    let span = self.bump().span;
                                    policies.push(Ident { name, span });
                                }
                                _ => return self.expected("a policy"),
                            }
                            if !self.eat(",") {
                                break;
                            }
                        }
                    }
                    self.expect(")")?;
                    self.expect(";")?;
                    if k == "make_static" {
                        StmtKind::MakeStatic { vars, policies }
                    } else {
                        StmtKind::MakeDynamic { vars }
                    }
                }
                k if !is_keyword(k) && self.peek_next() == Tok::Punct(":") => {
                    let label = self.ident("a label")?;
                    self.bump(); // :
                    let stmt = Box::new(self.stmt()?);
                    StmtKind::Labeled { label, stmt }
                }
                _ => self.expr_stmt()?,
            },
            _ => self.expr_stmt()?,
        };
        Ok(Stmt {
            kind,
            span: start.to(self.prev_span()),
        })
    }

    fn if_stmt(&mut self) -> PResult<StmtKind<'s>> {
        self.bump(); // if
        let cond = self.expr()?;
        let then = self.block()?;
        let otherwise = if self.eat_kw("else") {
            if self.is_kw("if") {
                let start = self.span();
                let kind = self.if_stmt()?;
                let span = start.to(self.prev_span());
                Some(Box::new(Block {
                    stmts: vec![Stmt { kind, span }],
                    close: self.prev_span(),
                }))
            } else {
                Some(Box::new(self.block()?))
            }
        } else {
            None
        };
        Ok(StmtKind::If {
            cond,
            then,
            otherwise,
        })
    }

    fn switch_stmt(&mut self) -> PResult<StmtKind<'s>> {
        self.bump(); // switch
        let scrutinee = self.expr()?;
        self.expect("{")?;
        let mut cases = Vec::new();
        let mut default = None;
        loop {
            if self.eat_kw("case") {
                let mut values = Vec::new();
                loop {
                    let start = self.span();
                    let neg = self.eat("-");
                    match self.peek() {
                        Tok::Int(x) => {
                            self.bump();
                            let v = if neg { -i128::from(x) } else { i128::from(x) };
                            values.push((v, start.to(self.prev_span())));
                        }
                        _ => return self.expected("an integer case value"),
                    }
                    if !self.eat(",") {
                        break;
                    }
                }
                self.expect(":")?;
                let body = self.stmts_until(&["case", "default", "}"]);
                cases.push(Case { values, body });
            } else if self.is_kw("default") {
                let span = self.span();
                self.bump();
                self.expect(":")?;
                let body = self.stmts_until(&["case", "default", "}"]);
                if default.is_some() {
                    return self.error(
                        span,
                        "a switch has two `default` arms".into(),
                        "second default",
                    );
                }
                default = Some(body);
            } else {
                break;
            }
        }
        self.expect("}")?;
        Ok(StmtKind::Switch(Box::new(Switch {
            scrutinee,
            cases,
            default,
        })))
    }

    fn expr_stmt(&mut self) -> PResult<StmtKind<'s>> {
        let target = self.expr()?;
        let compound = [
            ("+=", BinOp::Add),
            ("-=", BinOp::Sub),
            ("*=", BinOp::Mul),
            ("/=", BinOp::Div),
            ("<<=", BinOp::Shl),
            (">>=", BinOp::Shr),
        ];
        let op = compound.iter().find(|(p, _)| self.is(p)).map(|&(_, op)| op);
        if op.is_some() || self.is("=") {
            let eq = self.bump().span;
            let rhs = self.expr()?;
            self.expect(";")?;
            let value = match op {
                Some(op) => Expr {
                    span: target.span.to(rhs.span),
                    kind: ExprKind::Binary(op, Box::new([target.clone(), rhs])),
                },
                None => rhs,
            };
            return match target.kind {
                ExprKind::Var(name) => Ok(StmtKind::Assign {
                    name: Ident {
                        name,
                        span: target.span,
                    },
                    value,
                }),
                ExprKind::Index {
                    slice,
                    index,
                    is_static: false,
                } => Ok(StmtKind::Store {
                    slice,
                    index,
                    value: Box::new(value),
                }),
                ExprKind::Index {
                    is_static: true, ..
                } => self.error(
                    target.span,
                    "cannot store through a static load".into(),
                    "`s@[i]` only reads; write `s[i] = ...`",
                ),
                _ => self.error(
                    eq,
                    "invalid assignment target".into(),
                    "only a variable or `s[i]` can be assigned",
                ),
            };
        }
        self.expect(";")?;
        if !matches!(target.kind, ExprKind::Call(_)) {
            return self.error(
                target.span,
                "this expression statement has no effect".into(),
                "only calls can stand alone as statements",
            );
        }
        Ok(StmtKind::Expr(target))
    }

    pub fn expr(&mut self) -> PResult<Expr<'s>> {
        self.nested(|p| p.binary(0))
    }

    /// The binary operator of the current token: its precedence level (0 is `||`, 9 is
    /// `*`), its text and its operation (`None` for `||` and `&&`, which branch).
    fn binary_op(&self) -> Option<(usize, &'static str, Option<BinOp>)> {
        let Tok::Punct(p) = self.peek() else {
            return None;
        };
        let (level, op) = match p {
            "||" => (0, None),
            "&&" => (1, None),
            "|" => (2, Some(BinOp::Or)),
            "^" => (3, Some(BinOp::Xor)),
            "&" => (4, Some(BinOp::And)),
            "==" => (5, Some(BinOp::Eq)),
            "!=" => (5, Some(BinOp::Ne)),
            "<" => (6, Some(BinOp::Lt)),
            "<=" => (6, Some(BinOp::Le)),
            ">" => (6, Some(BinOp::Gt)),
            ">=" => (6, Some(BinOp::Ge)),
            "<<" => (7, Some(BinOp::Shl)),
            ">>" => (7, Some(BinOp::Shr)),
            "+" => (8, Some(BinOp::Add)),
            "-" => (8, Some(BinOp::Sub)),
            "*" => (9, Some(BinOp::Mul)),
            "/" => (9, Some(BinOp::Div)),
            "%" => (9, Some(BinOp::Rem)),
            _ => return None,
        };
        Some((level, p, op))
    }

    /// An expression whose operators all have precedence `min` or higher, by precedence
    /// climbing: the operands of one level are collected flat (see `ExprKind::Chain`), each
    /// parsed at the next level up, so the recursion depth is bounded by the number of
    /// levels, not by the length of a chain.
    fn binary(&mut self, min: usize) -> PResult<Expr<'s>> {
        let mut first = self.cast()?;
        while let Some((level, sym, op)) = self.binary_op().filter(|&(l, _, _)| l >= min) {
            self.bump();
            let rhs = self.binary(level + 1)?;
            if self.binary_op().is_none_or(|(l, _, _)| l != level) {
                // One operator (the usual case): no list.
                first = Self::pair(first, sym, op, rhs);
                continue;
            }
            let mut rest = vec![(sym, op, rhs)];
            while let Some((_, sym, op)) = self.binary_op().filter(|&(l, _, _)| l == level) {
                self.bump();
                let rhs = self.binary(level + 1)?;
                rest.push((sym, op, rhs));
            }
            first = Self::chain(level, first, rest);
        }
        Ok(first)
    }

    /// `lhs sym rhs`: one operator.
    fn pair(lhs: Expr<'s>, sym: &str, op: Option<BinOp>, rhs: Expr<'s>) -> Expr<'s> {
        let span = lhs.span.to(rhs.span);
        let operands = Box::new([lhs, rhs]);
        let kind = match (sym, op) {
            ("||", _) => ExprKind::OrElse(operands),
            ("&&", _) => ExprKind::AndAlso(operands),
            (_, Some(op)) => ExprKind::Binary(op, operands),
            _ => unreachable!("every level but the first two has an operator"),
        };
        Expr { kind, span }
    }

    /// The expression `first op1 e1 op2 e2 ...` of two or more operators of one `level`.
    fn chain(
        level: usize,
        first: Expr<'s>,
        rest: Vec<(&str, Option<BinOp>, Expr<'s>)>,
    ) -> Expr<'s> {
        let last = rest.last().expect("at least one operator");
        let span = first.span.to(last.2.span);
        let kind = if level < 2 {
            let mut operands = vec![first];
            operands.extend(rest.into_iter().map(|(_, _, e)| e));
            ExprKind::Logic {
                and: level == 1,
                operands: operands.into_boxed_slice(),
            }
        } else {
            ExprKind::Chain(Box::new(Chain {
                first,
                rest: rest
                    .into_iter()
                    .map(|(_, op, e)| (op.expect("an operator"), e))
                    .collect(),
            }))
        };
        Expr { kind, span }
    }

    fn cast(&mut self) -> PResult<Expr<'s>> {
        let mut e = self.unary()?;
        let depth = self.depth;
        while self.eat_kw("as") {
            // Each cast nests the expression one level deeper.
            if let Err(r) = self.nest() {
                self.depth = depth;
                return Err(r);
            }
            let ty = match self.ty() {
                Ok(t) => t,
                Err(r) => {
                    self.depth = depth;
                    return Err(r);
                }
            };
            let span = e.span.to(ty.span);
            e = Expr {
                kind: ExprKind::Cast(Box::new(e), ty),
                span,
            };
        }
        self.depth = depth;
        Ok(e)
    }

    fn unary(&mut self) -> PResult<Expr<'s>> {
        let start = self.span();
        let op = if self.eat("-") {
            Some(UnOp::Neg)
        } else if self.eat("!") {
            Some(UnOp::Not)
        } else {
            None
        };
        match op {
            Some(op) => {
                let e = self.nested(Self::unary)?;
                let span = start.to(e.span);
                Ok(Expr {
                    kind: ExprKind::Unary(op, Box::new(e)),
                    span,
                })
            }
            None => self.postfix(),
        }
    }

    fn postfix(&mut self) -> PResult<Expr<'s>> {
        let e = self.primary()?;
        let depth = self.depth;
        let r = self.postfix_chain(e);
        self.depth = depth;
        r
    }

    /// The indexing operations after `e`, each one nesting level deeper.
    fn postfix_chain(&mut self, mut e: Expr<'s>) -> PResult<Expr<'s>> {
        loop {
            let is_static = self.is("@") && self.peek_next() == Tok::Punct("[");
            if is_static {
                self.bump();
            }
            if self.eat("[") {
                self.nest()?;
                let index = self.expr()?;
                self.expect("]")?;
                let span = e.span.to(self.prev_span());
                e = Expr {
                    kind: ExprKind::Index {
                        slice: Box::new(e),
                        index: Box::new(index),
                        is_static,
                    },
                    span,
                };
            } else {
                return Ok(e);
            }
        }
    }

    fn args(&mut self) -> PResult<Vec<Expr<'s>>> {
        self.expect("(")?;
        let mut args = Vec::new();
        while !self.is(")") {
            args.push(self.expr()?);
            if !self.eat(",") {
                break;
            }
        }
        self.expect(")")?;
        Ok(args)
    }

    fn primary(&mut self) -> PResult<Expr<'s>> {
        let start = self.span();
        let kind = match self.peek() {
            Tok::Int(x) => {
                self.bump();
                ExprKind::Int(x)
            }
            Tok::Float(x) => {
                self.bump();
                ExprKind::Float(x)
            }
            Tok::Punct("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect(")")?;
                return Ok(Expr {
                    kind: e.kind,
                    span: start.to(self.prev_span()),
                });
            }
            Tok::Punct("@") => {
                self.bump();
                let name = self.ident("a function name after `@`")?;
                let args = self.args()?;
                ExprKind::Call(Box::new(Call {
                    name,
                    args,
                    is_static: true,
                }))
            }
            Tok::Ident => match self.text() {
                k @ ("true" | "false") => {
                    self.bump();
                    ExprKind::Bool(k == "true")
                }
                k @ ("len" | "min" | "max") => {
                    let kw = self.bump().span;
                    let mut args = self.args()?;
                    let want = if k == "len" { 1 } else { 2 };
                    if args.len() != want {
                        return self.error(
                            kw.to(self.prev_span()),
                            format!("`{k}` takes {want} argument(s), {} given", args.len()),
                            "wrong number of arguments",
                        );
                    }
                    if k == "len" {
                        ExprKind::Len(Box::new(args.remove(0)))
                    } else {
                        let b = args.pop().expect("two");
                        let a = args.pop().expect("two");
                        ExprKind::MinMax {
                            max: k == "max",
                            args: Box::new((a, b)),
                        }
                    }
                }
                _ if self.peek_next() == Tok::Punct("(") => {
                    let name = self.ident("a function name")?;
                    let args = self.args()?;
                    ExprKind::Call(Box::new(Call {
                        name,
                        args,
                        is_static: false,
                    }))
                }
                _ => {
                    let name = self.ident("an expression")?;
                    ExprKind::Var(name.name)
                }
            },
            _ => return self.expected("an expression"),
        };
        Ok(Expr {
            kind,
            span: start.to(self.prev_span()),
        })
    }
}

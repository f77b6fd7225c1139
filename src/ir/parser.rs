//! The text format, parsing side.
//!
//! ```text
//! module   := item*
//! item     := "extern" ["pure"] "fn" NAME sig
//!           | "fn" NAME sig "{" block* "}"
//! sig      := "(" [type ("," type)*] ")" ["->" type]
//! type     := SCALAR | "[" SCALAR "]" | "[" "mut" SCALAR "]"
//! block    := BLOCK ["(" param ("," param)* ")"] ":" inst*
//! param    := VALUE ":" type ["as" NAME]
//! inst     := ["@" LINE ":" COL] [VALUE ("," VALUE)* "="] op
//! op       := "iconst." SCALAR INT | "fconst" FLOAT | "bconst" ("true"|"false")
//!           | ("neg"|"not"|"len") VALUE
//!           | BINOP VALUE "," VALUE            (add sub mul div rem and or xor shl shr min max)
//!           | "cmp." COND VALUE "," VALUE      (eq ne lt le gt ge)
//!           | "select" VALUE "," VALUE "," VALUE | "cast." SCALAR VALUE | "array." SCALAR INT
//!           | ("load"|"load_static") VALUE "," VALUE | "store" VALUE "," VALUE "," VALUE
//!           | ("call"|"call_static") NAME "(" [VALUE ("," VALUE)*] ")"
//!           | "make_static" VALUE "as" NAME ("," VALUE "as" NAME)* [":" POLICY ("," POLICY)*]
//!           | "make_dynamic" VALUE "as" NAME ("," VALUE "as" NAME)*
//!           | "jump" target | "brif" VALUE "," target "," target
//!           | "switch" VALUE "," "[" [INT ":" target ("," INT ":" target)*] "]" "," "default" target
//!           | "return" [VALUE] | "trap"
//! target   := BLOCK ["(" [VALUE ("," VALUE)*] ")"]
//! ```
//!
//! `VALUE` is `v` followed by a number, `BLOCK` is `block` followed by a number; the parser
//! creates the entities with exactly these numbers (gaps become unused entries), so that
//! printing a parsed function gives back its text. Comments run from `;` to the end of the
//! line. Every error carries the line and column where it was found.

use std::collections::HashMap;
use std::fmt;

use cranelift_entity::EntityRef;

use super::entities::{Block, ExternId, FuncId, Inst, Value};
use super::function::{ExternFunc, Function, Module, Signature, SrcLoc, ValueData, ValueDef};
use super::inst::{BinaryOp, BlockCall, Callee, CmpOp, Const, InstData, UnaryOp};
use super::policy::{Policies, Policy};
use super::types::{Scalar, Type};

/// A parse error with its position (1-based line and column).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: u32,
    pub col: u32,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.col, self.message)
    }
}

impl std::error::Error for ParseError {}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(i128),
    Float(f64),
    Punct(&'static str),
    Eof,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Int(x) => write!(f, "`{x}`"),
            Tok::Float(x) => write!(f, "`{x:?}`"),
            Tok::Punct(p) => write!(f, "`{p}`"),
            Tok::Eof => write!(f, "end of input"),
        }
    }
}

struct Token {
    tok: Tok,
    line: u32,
    col: u32,
}

const PUNCTS: [&str; 12] = ["->", "(", ")", "[", "]", "{", "}", ",", ":", "=", "@", "."];

fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut out = Vec::new();
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0usize, 1u32, 1u32);
    while i < chars.len() {
        let c = chars[i];
        let (tl, tc) = (line, col);
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        if c == ';' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        let tok = if c.is_ascii_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if c.is_ascii_digit()
            || (c == '-'
                && chars
                    .get(i + 1)
                    .is_some_and(|d| d.is_ascii_digit() || *d == 'i' || *d == 'N'))
        {
            i += 1;
            let mut float = false;
            while i < chars.len() {
                let d = chars[i];
                let exp_sign = (d == '-' || d == '+') && matches!(chars[i - 1], 'e' | 'E');
                if d.is_ascii_alphanumeric() || d == '.' || exp_sign {
                    float |= d == '.' || d == 'e' || d == 'E' || d == 'n' || d == 'N';
                    i += 1;
                } else {
                    break;
                }
            }
            let text: String = chars[start..i].iter().collect();
            let bad = || ParseError {
                line: tl,
                col: tc,
                message: format!("malformed number `{text}`"),
            };
            if float {
                Tok::Float(text.parse().map_err(|_| bad())?)
            } else {
                Tok::Int(text.parse().map_err(|_| bad())?)
            }
        } else {
            let rest: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            match PUNCTS.iter().find(|p| rest.starts_with(**p)) {
                Some(p) => {
                    i += p.len();
                    Tok::Punct(p)
                }
                None => {
                    return Err(ParseError {
                        line: tl,
                        col: tc,
                        message: format!("unexpected character `{c}`"),
                    })
                }
            }
        };
        col += (i - start) as u32;
        out.push(Token {
            tok,
            line: tl,
            col: tc,
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        line,
        col,
    });
    Ok(out)
}

/// Parses a module.
pub fn parse_module(src: &str) -> Result<Module, ParseError> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        module: Module::default(),
        pending_calls: Vec::new(),
    };
    p.module()?;
    Ok(p.module)
}

/// A call whose callee is resolved once every function has been seen.
struct PendingCall {
    func: FuncId,
    inst: Inst,
    name: String,
    line: u32,
    col: u32,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    module: Module,
    pending_calls: Vec<PendingCall>,
}

/// Per-function state: where each value and block was first used, to report those never
/// defined.
#[derive(Default)]
struct FnState {
    value_uses: HashMap<Value, (u32, u32)>,
    block_uses: HashMap<Block, (u32, u32)>,
    blocks_defined: Vec<Block>,
}

type PResult<T> = Result<T, ParseError>;

/// The largest entity number the parser accepts (`v1048575`): numbers are kept, so a
/// larger one would allocate that many placeholder entities.
const MAX_ENTITY: usize = 1 << 20;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn here(&self) -> (u32, u32) {
        let t = &self.toks[self.pos];
        (t.line, t.col)
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        let (line, col) = self.here();
        Err(ParseError {
            line,
            col,
            message: message.into(),
        })
    }

    fn next(&mut self) -> Tok {
        let t = self.toks[self.pos].tok.clone();
        if t != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Tok::Ident(q) if q == s)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn expect_punct(&mut self, p: &str) -> PResult<()> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            self.err(format!("expected `{p}`, found {}", self.peek()))
        }
    }

    fn expect_keyword(&mut self, k: &str) -> PResult<()> {
        if self.is_ident(k) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!("expected `{k}`, found {}", self.peek()))
        }
    }

    fn ident(&mut self, what: &str) -> PResult<String> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.pos += 1;
                Ok(s)
            }
            t => self.err(format!("expected {what}, found {t}")),
        }
    }

    fn int(&mut self) -> PResult<i128> {
        match *self.peek() {
            Tok::Int(x) => {
                self.pos += 1;
                Ok(x)
            }
            ref t => self.err(format!("expected an integer, found {t}")),
        }
    }

    fn module(&mut self) -> PResult<()> {
        loop {
            match self.peek().clone() {
                Tok::Eof => break,
                Tok::Ident(k) if k == "extern" => self.extern_decl()?,
                Tok::Ident(k) if k == "fn" => self.function()?,
                t => return self.err(format!("expected `fn` or `extern`, found {t}")),
            }
        }
        for c in std::mem::take(&mut self.pending_calls) {
            let callee = if let Some(id) = self.module.func_by_name(&c.name) {
                Callee::Func(id)
            } else if let Some(id) = self.module.extern_by_name(&c.name) {
                Callee::Extern(id)
            } else {
                return Err(ParseError {
                    line: c.line,
                    col: c.col,
                    message: format!("call to undefined function `{}`", c.name),
                });
            };
            let ret = self.module.callee_sig(callee).ret;
            let f = &mut self.module.funcs[c.func];
            if let InstData::Call { callee: slot, .. } = &mut f.insts[c.inst] {
                *slot = callee;
            }
            let results: Vec<Value> = f.inst_results(c.inst).to_vec();
            match (results.as_slice(), ret) {
                ([], None) => {}
                ([v], Some(t)) => f.values[*v].ty = t,
                _ => {
                    return Err(ParseError {
                        line: c.line,
                        col: c.col,
                        message: format!(
                            "call to `{}` defines {} result(s), its signature returns {}",
                            c.name,
                            results.len(),
                            if ret.is_some() { 1 } else { 0 }
                        ),
                    })
                }
            }
        }
        for (_, f) in self.module.funcs.iter_mut() {
            infer_result_types(f);
        }
        Ok(())
    }

    fn scalar(&mut self) -> PResult<Scalar> {
        let name = self.ident("a type")?;
        match Scalar::from_name(&name) {
            Some(s) => Ok(s),
            None => {
                self.pos -= 1;
                self.err(format!("unknown type `{name}`"))
            }
        }
    }

    fn ty(&mut self) -> PResult<Type> {
        if self.eat_punct("[") {
            let mutable = self.is_ident("mut");
            if mutable {
                self.pos += 1;
            }
            let elem = self.scalar()?;
            self.expect_punct("]")?;
            Ok(Type::Slice { elem, mutable })
        } else {
            Ok(Type::Scalar(self.scalar()?))
        }
    }

    fn signature(&mut self) -> PResult<Signature> {
        self.expect_punct("(")?;
        let mut params = Vec::new();
        if !self.is_punct(")") {
            loop {
                params.push(self.ty()?);
                if !self.eat_punct(",") {
                    break;
                }
            }
        }
        self.expect_punct(")")?;
        let ret = if self.eat_punct("->") {
            Some(self.ty()?)
        } else {
            None
        };
        Ok(Signature { params, ret })
    }

    fn check_new_name(&self, name: &str) -> PResult<()> {
        if self.module.func_by_name(name).is_some() || self.module.extern_by_name(name).is_some() {
            self.err(format!("`{name}` is defined twice"))
        } else {
            Ok(())
        }
    }

    fn extern_decl(&mut self) -> PResult<()> {
        self.expect_keyword("extern")?;
        let pure = self.is_ident("pure");
        if pure {
            self.pos += 1;
        }
        self.expect_keyword("fn")?;
        let name = self.ident("a function name")?;
        self.pos -= 1;
        self.check_new_name(&name)?;
        self.pos += 1;
        let sig = self.signature()?;
        self.module.externs.push(ExternFunc { name, sig, pure });
        Ok(())
    }

    fn function(&mut self) -> PResult<()> {
        self.expect_keyword("fn")?;
        let name = self.ident("a function name")?;
        self.pos -= 1;
        self.check_new_name(&name)?;
        self.pos += 1;
        let sig = self.signature()?;
        let id = self.module.funcs.push(Function::new(name, sig));
        self.expect_punct("{")?;
        let mut st = FnState::default();
        while !self.is_punct("}") {
            self.block(id, &mut st)?;
        }
        self.expect_punct("}")?;
        let f = &self.module.funcs[id];
        let mut undefined: Vec<(u32, u32, String)> = Vec::new();
        for (&v, &(l, c)) in &st.value_uses {
            if f.values[v].def == ValueDef::Unused {
                undefined.push((l, c, format!("use of undefined value {v}")));
            }
        }
        for (&b, &(l, c)) in &st.block_uses {
            if !st.blocks_defined.contains(&b) {
                undefined.push((l, c, format!("branch to undefined block {b}")));
            }
        }
        if let Some((line, col, message)) = undefined.into_iter().min() {
            return Err(ParseError { line, col, message });
        }
        Ok(())
    }

    /// The entity number in `text` after `prefix` (`v12` -> 12).
    fn entity_number(text: &str, prefix: &str) -> Option<usize> {
        let digits = text.strip_prefix(prefix)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return None;
        }
        digits.parse().ok().filter(|&n: &usize| n < MAX_ENTITY)
    }

    fn value_ref(&mut self, fid: FuncId, st: &mut FnState) -> PResult<Value> {
        let here = self.here();
        let name = self.ident("a value")?;
        let Some(n) = Self::entity_number(&name, "v") else {
            self.pos -= 1;
            return self.err(format!("expected a value, found `{name}`"));
        };
        let f = &mut self.module.funcs[fid];
        while f.values.len() <= n {
            f.values.push(ValueData {
                ty: Type::I64,
                def: ValueDef::Unused,
                var: None,
            });
        }
        let v = Value::new(n);
        st.value_uses.entry(v).or_insert(here);
        Ok(v)
    }

    /// Defines value `v` (already allocated by `value_ref`).
    fn define_value(
        &mut self,
        fid: FuncId,
        v: Value,
        data: ValueData,
        at: (u32, u32),
    ) -> PResult<()> {
        let f = &mut self.module.funcs[fid];
        if f.values[v].def != ValueDef::Unused {
            return Err(ParseError {
                line: at.0,
                col: at.1,
                message: format!("value {v} is defined twice"),
            });
        }
        f.values[v] = data;
        Ok(())
    }

    fn block_ref(&mut self, fid: FuncId, st: &mut FnState) -> PResult<Block> {
        let here = self.here();
        let name = self.ident("a block")?;
        let Some(n) = Self::entity_number(&name, "block") else {
            self.pos -= 1;
            return self.err(format!("expected a block, found `{name}`"));
        };
        let f = &mut self.module.funcs[fid];
        while f.blocks.len() <= n {
            f.create_block();
        }
        let b = Block::new(n);
        st.block_uses.entry(b).or_insert(here);
        Ok(b)
    }

    fn block(&mut self, fid: FuncId, st: &mut FnState) -> PResult<()> {
        let at = self.here();
        let b = self.block_ref(fid, st)?;
        if st.blocks_defined.contains(&b) {
            return Err(ParseError {
                line: at.0,
                col: at.1,
                message: format!("block {b} is defined twice"),
            });
        }
        st.blocks_defined.push(b);
        self.module.funcs[fid].layout.append_block(b);
        if self.eat_punct("(") {
            loop {
                let at = self.here();
                let v = self.value_ref(fid, st)?;
                self.expect_punct(":")?;
                let ty = self.ty()?;
                let var = if self.is_ident("as") {
                    self.pos += 1;
                    let name = self.ident("a variable name")?;
                    Some(self.module.funcs[fid].var(&name))
                } else {
                    None
                };
                let n = self.module.funcs[fid].blocks[b].params.len();
                self.define_value(
                    fid,
                    v,
                    ValueData {
                        ty,
                        def: ValueDef::Param(b, n as u32),
                        var,
                    },
                    at,
                )?;
                self.module.funcs[fid].blocks[b].params.push(v);
                if !self.eat_punct(",") {
                    break;
                }
            }
            self.expect_punct(")")?;
        }
        self.expect_punct(":")?;
        loop {
            let block_start =
                matches!(self.peek(), Tok::Ident(s) if Self::entity_number(s, "block").is_some());
            if block_start || self.is_punct("}") || *self.peek() == Tok::Eof {
                break;
            }
            self.inst(fid, b, st)?;
        }
        Ok(())
    }

    fn block_call(&mut self, fid: FuncId, st: &mut FnState) -> PResult<BlockCall> {
        let block = self.block_ref(fid, st)?;
        let mut args = Vec::new();
        if self.eat_punct("(") {
            if !self.is_punct(")") {
                loop {
                    args.push(self.value_ref(fid, st)?);
                    if !self.eat_punct(",") {
                        break;
                    }
                }
            }
            self.expect_punct(")")?;
        }
        Ok(BlockCall {
            block,
            args: args.into(),
        })
    }

    fn values2(&mut self, fid: FuncId, st: &mut FnState) -> PResult<[Value; 2]> {
        let a = self.value_ref(fid, st)?;
        self.expect_punct(",")?;
        let b = self.value_ref(fid, st)?;
        Ok([a, b])
    }

    fn suffix(&mut self, op: &str) -> PResult<String> {
        if !self.eat_punct(".") {
            return self.err(format!("expected `.` after `{op}`"));
        }
        self.ident("a type or condition")
    }

    fn annotated_vars(
        &mut self,
        fid: FuncId,
        st: &mut FnState,
    ) -> PResult<Vec<(Value, super::entities::Var)>> {
        let mut args = Vec::new();
        loop {
            let v = self.value_ref(fid, st)?;
            self.expect_keyword("as")?;
            let name = self.ident("a variable name")?;
            args.push((v, self.module.funcs[fid].var(&name)));
            if !self.eat_punct(",") {
                break;
            }
        }
        Ok(args)
    }

    fn inst(&mut self, fid: FuncId, b: Block, st: &mut FnState) -> PResult<()> {
        let mut loc = SrcLoc::default();
        if self.eat_punct("@") {
            let line = self.int()?;
            self.expect_punct(":")?;
            let col = self.int()?;
            loc = SrcLoc::new(
                line.clamp(0, u32::MAX as i128) as u32,
                col.clamp(0, u32::MAX as i128) as u32,
            );
        }
        let at = self.here();
        let mut results = Vec::new();
        let has_results =
            matches!(self.peek(), Tok::Ident(s) if Self::entity_number(s, "v").is_some());
        if has_results {
            loop {
                let at = self.here();
                let name = self.ident("a value")?;
                let Some(n) = Self::entity_number(&name, "v") else {
                    self.pos -= 1;
                    return self.err(format!("expected a value, found `{name}`"));
                };
                results.push((n, at));
                if !self.eat_punct(",") {
                    break;
                }
            }
            self.expect_punct("=")?;
        }
        let op_at = self.here();
        let op = self.ident("an instruction")?;
        let mut call_name = None;
        let data = match op.as_str() {
            "iconst" => {
                let t = self.suffix(&op)?;
                let ty = match Scalar::from_name(&t).filter(|s| s.is_int()) {
                    Some(ty) => ty,
                    None => {
                        return self.err(format!("`iconst` needs an integer type, found `{t}`"))
                    }
                };
                let x = self.int()?;
                let (lo, hi) = crate::semantics::int_range(ty);
                let (lo, hi) = if ty.is_signed() {
                    (lo as i64 as i128, hi as i64 as i128)
                } else {
                    (lo as i128, hi as i128)
                };
                if x < lo || x > hi {
                    self.pos -= 1;
                    return self.err(format!("constant {x} is out of range for {ty}"));
                }
                InstData::Const(Const::Int(ty, x as u64))
            }
            "fconst" => match self.next() {
                Tok::Float(x) => InstData::Const(Const::F64(x)),
                Tok::Int(x) => InstData::Const(Const::F64(x as f64)),
                Tok::Ident(s) if s == "inf" || s == "NaN" => {
                    InstData::Const(Const::F64(s.parse().expect("inf or NaN")))
                }
                t => {
                    self.pos -= 1;
                    return self.err(format!("expected a float, found {t}"));
                }
            },
            "bconst" => match self.ident("`true` or `false`")?.as_str() {
                "true" => InstData::Const(Const::Bool(true)),
                "false" => InstData::Const(Const::Bool(false)),
                s => {
                    self.pos -= 1;
                    return self.err(format!("expected `true` or `false`, found `{s}`"));
                }
            },
            "len" => InstData::Len {
                arg: self.value_ref(fid, st)?,
            },
            "cmp" => {
                let c = self.suffix(&op)?;
                let Some(op) = CmpOp::from_name(&c) else {
                    self.pos -= 1;
                    return self.err(format!("unknown comparison `{c}`"));
                };
                InstData::Cmp {
                    op,
                    args: self.values2(fid, st)?,
                }
            }
            "select" => {
                let cond = self.value_ref(fid, st)?;
                self.expect_punct(",")?;
                InstData::Select {
                    cond,
                    args: self.values2(fid, st)?,
                }
            }
            "cast" => {
                let t = self.suffix(&op)?;
                let Some(to) = Scalar::from_name(&t) else {
                    self.pos -= 1;
                    return self.err(format!("unknown type `{t}`"));
                };
                InstData::Cast {
                    to,
                    arg: self.value_ref(fid, st)?,
                }
            }
            "array" => {
                let t = self.suffix(&op)?;
                let Some(elem) = Scalar::from_name(&t) else {
                    self.pos -= 1;
                    return self.err(format!("unknown type `{t}`"));
                };
                let n = self.int()?;
                let Ok(len) = u32::try_from(n) else {
                    self.pos -= 1;
                    return self.err(format!("array length {n} is out of range"));
                };
                InstData::ArrayNew { elem, len }
            }
            "load" | "load_static" => {
                let [slice, index] = self.values2(fid, st)?;
                if op == "load" {
                    InstData::Load { slice, index }
                } else {
                    InstData::StaticLoad { slice, index }
                }
            }
            "store" => {
                let [slice, index] = self.values2(fid, st)?;
                self.expect_punct(",")?;
                InstData::Store {
                    slice,
                    index,
                    value: self.value_ref(fid, st)?,
                }
            }
            "call" | "call_static" => {
                let here = self.here();
                let name = self.ident("a function name")?;
                call_name = Some((name, here));
                self.expect_punct("(")?;
                let mut args = Vec::new();
                if !self.is_punct(")") {
                    loop {
                        args.push(self.value_ref(fid, st)?);
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                }
                self.expect_punct(")")?;
                InstData::Call {
                    callee: Callee::Extern(ExternId::new(0)),
                    args: args.into(),
                    is_static: op == "call_static",
                }
            }
            "make_static" => {
                let args = self.annotated_vars(fid, st)?;
                let mut list = Vec::new();
                if self.eat_punct(":") {
                    loop {
                        let name = self.ident("a policy")?;
                        self.pos -= 1;
                        let Some(p) = Policy::from_name(&name) else {
                            return self.err(format!("unknown policy `{name}`"));
                        };
                        if let Some(q) = list.iter().find(|q: &&Policy| q.group() == p.group()) {
                            return self.err(format!("policies `{q}` and `{p}` conflict"));
                        }
                        self.pos += 1;
                        list.push(p);
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                }
                let policies = Policies::new(&list).expect("conflicts refused above");
                InstData::MakeStatic {
                    args: args.into(),
                    policies,
                }
            }
            "make_dynamic" => InstData::MakeDynamic {
                args: self.annotated_vars(fid, st)?.into(),
            },
            "jump" => InstData::Jump {
                dest: self.block_call(fid, st)?,
            },
            "brif" => {
                let cond = self.value_ref(fid, st)?;
                self.expect_punct(",")?;
                let then_dest = self.block_call(fid, st)?;
                self.expect_punct(",")?;
                InstData::Brif {
                    cond,
                    then_dest,
                    else_dest: self.block_call(fid, st)?,
                }
            }
            "switch" => {
                let arg = self.value_ref(fid, st)?;
                self.expect_punct(",")?;
                self.expect_punct("[")?;
                let mut cases = Vec::new();
                if !self.is_punct("]") {
                    loop {
                        let k = self.int()?;
                        if k < i64::MIN as i128 || k > u64::MAX as i128 {
                            self.pos -= 1;
                            return self.err(format!("case {k} does not fit in 64 bits"));
                        }
                        self.expect_punct(":")?;
                        cases.push((k as u64, self.block_call(fid, st)?));
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                }
                self.expect_punct("]")?;
                self.expect_punct(",")?;
                self.expect_keyword("default")?;
                InstData::Switch {
                    arg,
                    cases: cases.into(),
                    default: self.block_call(fid, st)?,
                }
            }
            "return" => {
                let value = if matches!(self.peek(), Tok::Ident(s) if Self::entity_number(s, "v").is_some())
                {
                    Some(self.value_ref(fid, st)?)
                } else {
                    None
                };
                InstData::Return { value }
            }
            "trap" => InstData::Trap,
            other => {
                if let Some(op) = UnaryOp::from_name(other) {
                    InstData::Unary {
                        op,
                        arg: self.value_ref(fid, st)?,
                    }
                } else if let Some(op) = BinaryOp::from_name(other) {
                    InstData::Binary {
                        op,
                        args: self.values2(fid, st)?,
                    }
                } else {
                    return Err(ParseError {
                        line: op_at.0,
                        col: op_at.1,
                        message: format!("unknown instruction `{other}`"),
                    });
                }
            }
        };
        let f = &mut self.module.funcs[fid];
        // Result types: calls get theirs when the callee is resolved.
        let types = if call_name.is_some() {
            vec![Type::I64; results.len()]
        } else {
            f.result_types(&data, None).to_vec()
        };
        if types.len() != results.len() {
            return Err(ParseError {
                line: at.0,
                col: at.1,
                message: format!(
                    "`{op}` defines {} result(s), found {}",
                    types.len(),
                    results.len()
                ),
            });
        }
        let inst = f.insts.push(data);
        f.srclocs[inst] = loc;
        f.layout.append_inst(inst, b);
        let mut vals = Vec::new();
        for (i, ((n, at), ty)) in results.into_iter().zip(types).enumerate() {
            let f = &mut self.module.funcs[fid];
            while f.values.len() <= n {
                f.values.push(ValueData {
                    ty: Type::I64,
                    def: ValueDef::Unused,
                    var: None,
                });
            }
            let v = Value::new(n);
            self.define_value(
                fid,
                v,
                ValueData {
                    ty,
                    def: ValueDef::Result(inst, i as u32),
                    var: None,
                },
                at,
            )?;
            vals.push(v);
        }
        self.module.funcs[fid].set_inst_results(inst, &vals);
        if let Some((name, (line, col))) = call_name {
            self.pending_calls.push(PendingCall {
                func: fid,
                inst,
                name,
                line,
                col,
            });
        }
        Ok(())
    }
}

/// Recomputes the result types of non-call instructions until they are stable: an operand
/// defined later in the text had a placeholder type when its user was parsed. Types flow
/// along def-use chains, which are acyclic apart from block parameters (typed in the text),
/// so this ends after at most one round per instruction.
fn infer_result_types(f: &mut Function) {
    let insts: Vec<Inst> = f.insts.keys().collect();
    for _ in 0..=insts.len() {
        let mut changed = false;
        for &i in &insts {
            if matches!(f.insts[i], InstData::Call { .. }) {
                continue;
            }
            let types = f.result_types(&f.insts[i], None);
            for (k, ty) in types.into_iter().enumerate() {
                if let Some(&v) = f.inst_results(i).get(k) {
                    if f.values[v].ty != ty {
                        f.values[v].ty = ty;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
}

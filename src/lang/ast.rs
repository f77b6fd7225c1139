//! The syntax tree of the region language, as the parser builds it. Every node keeps its
//! span for diagnostics and source locations.

use super::diag::Span;
use crate::ir::Type;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident<'s> {
    pub name: &'s str,
    pub span: Span,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TypeExpr {
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param<'s> {
    pub name: Ident<'s>,
    pub ty: TypeExpr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExternDecl<'s> {
    pub name: Ident<'s>,
    pub params: Vec<Param<'s>>,
    pub ret: Option<TypeExpr>,
    pub pure: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl<'s> {
    pub name: Ident<'s>,
    pub params: Vec<Param<'s>>,
    pub ret: Option<TypeExpr>,
    pub body: Block<'s>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item<'s> {
    Extern(ExternDecl<'s>),
    Fn(FnDecl<'s>),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program<'s> {
    pub items: Vec<Item<'s>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block<'s> {
    pub stmts: Vec<Stmt<'s>>,
    /// The closing brace (where a missing `return` is reported).
    pub close: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case<'s> {
    /// The case values with their spans (a value is a possibly negated integer literal).
    pub values: Vec<(i128, Span)>,
    pub body: Vec<Stmt<'s>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt<'s> {
    pub kind: StmtKind<'s>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind<'s> {
    /// `let x: T = e;` (`mutable == false`) or `var x: T = e;`.
    Let {
        name: Ident<'s>,
        mutable: bool,
        ty: Option<TypeExpr>,
        init: Expr<'s>,
    },
    /// `var a: [T; N];`: a local array, every element zero.
    Array {
        name: Ident<'s>,
        ty: TypeExpr,
    },
    /// `x = e;` (compound assignments are desugared to this).
    Assign {
        name: Ident<'s>,
        value: Expr<'s>,
    },
    /// `s[i] = e;` (boxed: three expressions would make every statement node large).
    Store {
        slice: Box<Expr<'s>>,
        index: Box<Expr<'s>>,
        value: Box<Expr<'s>>,
    },
    If {
        cond: Expr<'s>,
        then: Block<'s>,
        /// Boxed: most `if`s have no `else`, and the node stays small.
        otherwise: Option<Box<Block<'s>>>,
    },
    While {
        cond: Expr<'s>,
        body: Block<'s>,
    },
    Loop {
        body: Block<'s>,
    },
    Break(Option<Ident<'s>>),
    Continue(Option<Ident<'s>>),
    Return(Option<Expr<'s>>),
    Switch(Box<Switch<'s>>),
    /// `name: stmt`: a goto target, and a name for a loop's `break`/`continue`.
    Labeled {
        label: Ident<'s>,
        stmt: Box<Stmt<'s>>,
    },
    Goto(Ident<'s>),
    Trap,
    /// `make_static(x, y: policy, ...);`
    MakeStatic {
        vars: Vec<Ident<'s>>,
        policies: Vec<Ident<'s>>,
    },
    /// `make_dynamic(x, y);`
    MakeDynamic {
        vars: Vec<Ident<'s>>,
    },
    Expr(Expr<'s>),
    Block(Block<'s>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Xor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr<'s> {
    pub kind: ExprKind<'s>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind<'s> {
    /// An integer literal (a literal beyond 64 bits is a syntax error).
    Int(u64),
    Float(f64),
    Bool(bool),
    Var(&'s str),
    Unary(UnOp, Box<Expr<'s>>),
    /// Both operands in one allocation.
    Binary(BinOp, Box<[Expr<'s>; 2]>),
    /// Short-circuit `&&`.
    AndAlso(Box<[Expr<'s>; 2]>),
    /// Short-circuit `||`.
    OrElse(Box<[Expr<'s>; 2]>),
    /// `first op1 e1 op2 e2 ...`: three or more operands of one precedence level, which
    /// associate to the left. Kept flat so that a long chain does not make the tree deep
    /// (every pass over the tree may recurse on its depth, which nesting bounds).
    Chain(Box<Chain<'s>>),
    /// `e1 && e2 && ...` (`and`) or `e1 || e2 || ...`: three or more operands, flat.
    Logic {
        and: bool,
        operands: Box<[Expr<'s>]>,
    },
    Cast(Box<Expr<'s>>, TypeExpr),
    /// `f(args)`, or the static call `@f(args)` (boxed: it would make every node large).
    Call(Box<Call<'s>>),
    /// `s[i]`, or the static load `s@[i]`.
    Index {
        slice: Box<Expr<'s>>,
        index: Box<Expr<'s>>,
        is_static: bool,
    },
    Len(Box<Expr<'s>>),
    /// `min(a, b)` / `max(a, b)`.
    MinMax {
        max: bool,
        args: Box<(Expr<'s>, Expr<'s>)>,
    },
}

/// See [`ExprKind::Chain`] (boxed: the rarer large nodes stay out of every node).
#[derive(Clone, Debug, PartialEq)]
pub struct Chain<'s> {
    pub first: Expr<'s>,
    pub rest: Vec<(BinOp, Expr<'s>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Switch<'s> {
    pub scrutinee: Expr<'s>,
    pub cases: Vec<Case<'s>>,
    pub default: Option<Vec<Stmt<'s>>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Call<'s> {
    pub name: Ident<'s>,
    pub args: Vec<Expr<'s>>,
    pub is_static: bool,
}

impl Expr<'_> {
    /// Whether the expression is made of literals only (its type comes from its context).
    pub fn is_literal(&self) -> bool {
        match &self.kind {
            ExprKind::Int(_) | ExprKind::Float(_) => true,
            ExprKind::Unary(_, e) => e.is_literal(),
            ExprKind::Binary(op, ab) => {
                !op.is_comparison() && ab[0].is_literal() && ab[1].is_literal()
            }
            ExprKind::Chain(c) => {
                c.first.is_literal()
                    && c.rest
                        .iter()
                        .all(|(op, e)| !op.is_comparison() && e.is_literal())
            }
            _ => false,
        }
    }
}

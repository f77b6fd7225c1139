//! The syntax tree of the region language, as the parser builds it. Every node keeps its
//! span for diagnostics and source locations.

use super::diag::Span;
use crate::ir::Type;

#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub ty: Type,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: Ident,
    pub ty: TypeExpr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ExternDecl {
    pub name: Ident,
    pub params: Vec<Param>,
    pub ret: Option<TypeExpr>,
    pub pure: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FnDecl {
    pub name: Ident,
    pub params: Vec<Param>,
    pub ret: Option<TypeExpr>,
    pub body: Block,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Extern(ExternDecl),
    Fn(FnDecl),
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    /// The closing brace (where a missing `return` is reported).
    pub close: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The case values with their spans (a value is a possibly negated integer literal).
    pub values: Vec<(i128, Span)>,
    pub body: Vec<Stmt>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `let x: T = e;` (`mutable == false`) or `var x: T = e;`.
    Let {
        name: Ident,
        mutable: bool,
        ty: Option<TypeExpr>,
        init: Expr,
    },
    /// `x = e;` (compound assignments are desugared to this).
    Assign {
        name: Ident,
        value: Expr,
    },
    /// `s[i] = e;` (boxed: three expressions would make every statement node large).
    Store {
        slice: Box<Expr>,
        index: Box<Expr>,
        value: Box<Expr>,
    },
    If {
        cond: Expr,
        then: Block,
        otherwise: Option<Block>,
    },
    While {
        cond: Expr,
        body: Block,
    },
    Loop {
        body: Block,
    },
    Break(Option<Ident>),
    Continue(Option<Ident>),
    Return(Option<Expr>),
    Switch {
        scrutinee: Expr,
        cases: Vec<Case>,
        default: Option<Vec<Stmt>>,
    },
    /// `name: stmt`: a goto target, and a name for a loop's `break`/`continue`.
    Labeled {
        label: Ident,
        stmt: Box<Stmt>,
    },
    Goto(Ident),
    Trap,
    /// `make_static(x, y: policy, ...);`
    MakeStatic {
        vars: Vec<Ident>,
        policies: Vec<Ident>,
    },
    /// `make_dynamic(x, y);`
    MakeDynamic {
        vars: Vec<Ident>,
    },
    Expr(Expr),
    Block(Block),
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
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Int(u128),
    Float(f64),
    Bool(bool),
    Var(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// Short-circuit `&&`.
    AndAlso(Box<Expr>, Box<Expr>),
    /// Short-circuit `||`.
    OrElse(Box<Expr>, Box<Expr>),
    /// `first op1 e1 op2 e2 ...`: three or more operands of one precedence level, which
    /// associate to the left. Kept flat so that a long chain does not make the tree deep
    /// (every pass over the tree may recurse on its depth, which nesting bounds).
    Chain {
        first: Box<Expr>,
        rest: Vec<(BinOp, Expr)>,
    },
    /// `e1 && e2 && ...` (`and`) or `e1 || e2 || ...`: three or more operands, flat.
    Logic {
        and: bool,
        operands: Vec<Expr>,
    },
    Cast(Box<Expr>, TypeExpr),
    /// `f(args)`, or the static call `@f(args)`.
    Call {
        name: Ident,
        args: Vec<Expr>,
        is_static: bool,
    },
    /// `s[i]`, or the static load `s@[i]`.
    Index {
        slice: Box<Expr>,
        index: Box<Expr>,
        is_static: bool,
    },
    Len(Box<Expr>),
    /// `min(a, b)` / `max(a, b)`.
    MinMax {
        max: bool,
        args: Box<(Expr, Expr)>,
    },
}

impl Expr {
    /// Whether the expression is made of literals only (its type comes from its context).
    pub fn is_literal(&self) -> bool {
        match &self.kind {
            ExprKind::Int(_) | ExprKind::Float(_) => true,
            ExprKind::Unary(_, e) => e.is_literal(),
            ExprKind::Binary(op, a, b) => !op.is_comparison() && a.is_literal() && b.is_literal(),
            ExprKind::Chain { first, rest } => {
                first.is_literal()
                    && rest
                        .iter()
                        .all(|(op, e)| !op.is_comparison() && e.is_literal())
            }
            _ => false,
        }
    }
}

//! The operators shared by the IR, templates and the stitcher: one vocabulary, with one
//! semantics ([`crate::semantics`]).

use crate::types::Scalar;

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Integer negation (wrapping) or float negation.
    Neg,
    /// Bitwise not of an integer, logical not of a `bool`.
    Not,
}

/// Binary operators. Integer forms wrap; `div`/`rem` trap on a zero divisor and wrap on
/// `MIN / -1` (result `MIN`, remainder 0). Shifts take the amount modulo the width and
/// shift arithmetically for signed types. `and`/`or`/`xor` also apply to `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
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
    Min,
    Max,
}

/// Comparison conditions; signed, unsigned or float by the operand type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

macro_rules! op_names {
    ($ty:ident { $($v:ident = $s:literal),* $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$v),*];
            pub fn name(self) -> &'static str {
                match self { $($ty::$v => $s),* }
            }
            pub fn from_name(s: &str) -> Option<$ty> {
                match s { $($s => Some($ty::$v),)* _ => None }
            }
        }
    };
}

op_names!(UnaryOp { Neg = "neg", Not = "not" });
op_names!(BinaryOp {
    Add = "add",
    Sub = "sub",
    Mul = "mul",
    Div = "div",
    Rem = "rem",
    And = "and",
    Or = "or",
    Xor = "xor",
    Shl = "shl",
    Shr = "shr",
    Min = "min",
    Max = "max",
});
op_names!(CmpOp {
    Eq = "eq",
    Ne = "ne",
    Lt = "lt",
    Le = "le",
    Gt = "gt",
    Ge = "ge",
});

/// A constant. Integers are stored in canonical form: the value's bits truncated to the
/// type's width, then sign-extended (signed types) or zero-extended (unsigned types) to 64
/// bits, see [`crate::semantics::canon`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Const {
    Int(Scalar, u64),
    F64(f64),
    Bool(bool),
}

impl Const {
    /// The zero of type `t` (`false` for `bool`): what a new local array holds.
    pub fn zero(t: Scalar) -> Const {
        match t {
            Scalar::F64 => Const::F64(0.0),
            Scalar::Bool => Const::Bool(false),
            t => Const::Int(t, 0),
        }
    }

    pub fn ty(self) -> Scalar {
        match self {
            Const::Int(t, _) => t,
            Const::F64(_) => Scalar::F64,
            Const::Bool(_) => Scalar::Bool,
        }
    }
}

/// `42:i64`, `-1:i8`, `0.5:f64`, `true`: the value with its type (signed integers
/// printed signed).
impl std::fmt::Display for Const {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Const::Int(t, x) if t.is_signed() => write!(f, "{}:{t}", x as i64),
            Const::Int(t, x) => write!(f, "{x}:{t}"),
            Const::F64(x) => write!(f, "{x:?}:f64"),
            Const::Bool(b) => write!(f, "{b}"),
        }
    }
}

impl Const {
    /// The value as `i64`, for integer constants (the bits of unsigned ones).
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Const::Int(_, x) => Some(x as i64),
            _ => None,
        }
    }

    /// The value as `u64`, for integer constants.
    pub fn as_u64(self) -> Option<u64> {
        match self {
            Const::Int(_, x) => Some(x),
            _ => None,
        }
    }

    pub fn as_f64(self) -> Option<f64> {
        match self {
            Const::F64(x) => Some(x),
            _ => None,
        }
    }

    pub fn as_bool(self) -> Option<bool> {
        match self {
            Const::Bool(b) => Some(b),
            _ => None,
        }
    }
}

macro_rules! const_from {
    ($($t:ty => $s:ident),*) => {$(
        impl From<$t> for Const {
            fn from(x: $t) -> Const {
                Const::Int(Scalar::$s, crate::semantics::canon(Scalar::$s, x as u64))
            }
        }
    )*};
}

const_from!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64);

impl From<f64> for Const {
    fn from(x: f64) -> Const {
        Const::F64(x)
    }
}

impl From<bool> for Const {
    fn from(x: bool) -> Const {
        Const::Bool(x)
    }
}

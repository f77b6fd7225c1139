//! The semantics of every operator, in one place.
//!
//! The reference interpreter calls these functions, and so do the stitcher's setup code and
//! the emitters' constant folding: there is one definition of what `div` on `i8` or a cast
//! from `f64` to `u16` means (waffle's `const_eval` habit).
//!
//! Values are [`Const`]s. Integers are kept in **canonical form**: truncated to the type's
//! width and sign-extended (signed types) or zero-extended (unsigned types) to 64 bits, so
//! that `bits as i64` is the value of a signed integer and `bits` that of an unsigned one.
//!
//! Operand types are assumed verified (both operands of a binary operator have one type);
//! on ill-typed operands these functions return [`Fault::IllTyped`] instead of panicking.

use crate::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use crate::types::Scalar;

/// A fault raised by an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    DivisionByZero,
    /// Operands the verifier would have refused (an internal error if it ever shows).
    IllTyped,
}

/// Truncates `bits` to the width of `ty` and extends it back by `ty`'s signedness.
#[inline]
pub fn canon(ty: Scalar, bits: u64) -> u64 {
    match ty.int_bits() {
        Some(64) | None => bits,
        Some(w) => {
            let shift = 64 - w;
            if ty.is_signed() {
                (((bits << shift) as i64) >> shift) as u64
            } else {
                (bits << shift) >> shift
            }
        }
    }
}

/// Makes an integer constant of type `ty` from any 64-bit pattern.
#[inline]
pub fn int(ty: Scalar, bits: u64) -> Const {
    Const::Int(ty, canon(ty, bits))
}

/// The smallest and largest value of an integer type, as canonical bits.
pub fn int_range(ty: Scalar) -> (u64, u64) {
    let w = ty.int_bits().unwrap_or(64);
    if ty.is_signed() {
        let min = (-1i64 << (w - 1)) as u64;
        (min, canon(ty, !min))
    } else {
        (0, canon(ty, u64::MAX))
    }
}

#[inline]
pub fn unary(op: UnaryOp, a: Const) -> Result<Const, Fault> {
    Ok(match (op, a) {
        (UnaryOp::Neg, Const::Int(t, x)) => int(t, x.wrapping_neg()),
        (UnaryOp::Neg, Const::F64(x)) => Const::F64(-x),
        (UnaryOp::Not, Const::Int(t, x)) => int(t, !x),
        (UnaryOp::Not, Const::Bool(b)) => Const::Bool(!b),
        _ => return Err(Fault::IllTyped),
    })
}

#[inline]
pub fn binary(op: BinaryOp, a: Const, b: Const) -> Result<Const, Fault> {
    use BinaryOp::*;
    Ok(match (a, b) {
        (Const::Int(t, x), Const::Int(t2, y)) if t == t2 => {
            let s = t.is_signed();
            let w = t.int_bits().unwrap_or(64);
            let r = match op {
                Add => x.wrapping_add(y),
                Sub => x.wrapping_sub(y),
                Mul => x.wrapping_mul(y),
                Div | Rem if y == 0 => return Err(Fault::DivisionByZero),
                Div if s => (x as i64).wrapping_div(y as i64) as u64,
                Div => x / y,
                Rem if s => (x as i64).wrapping_rem(y as i64) as u64,
                Rem => x % y,
                And => x & y,
                Or => x | y,
                Xor => x ^ y,
                Shl => x << (y % w as u64),
                Shr if s => ((x as i64) >> (y % w as u64)) as u64,
                Shr => x >> (y % w as u64),
                Min | Max => {
                    let less = if s { (x as i64) < (y as i64) } else { x < y };
                    if less == (op == Min) {
                        x
                    } else {
                        y
                    }
                }
            };
            int(t, r)
        }
        (Const::F64(x), Const::F64(y)) => Const::F64(match op {
            Add => x + y,
            Sub => x - y,
            Mul => x * y,
            Div => x / y,
            Rem => x % y,
            // Spelled out (not `f64::min`) so that code generators can match it exactly:
            // a NaN operand yields the other one; between equals, the second.
            Min => {
                if x < y || y.is_nan() {
                    x
                } else {
                    y
                }
            }
            Max => {
                if x > y || y.is_nan() {
                    x
                } else {
                    y
                }
            }
            And | Or | Xor | Shl | Shr => return Err(Fault::IllTyped),
        }),
        (Const::Bool(x), Const::Bool(y)) => Const::Bool(match op {
            And => x & y,
            Or => x | y,
            Xor => x ^ y,
            _ => return Err(Fault::IllTyped),
        }),
        _ => return Err(Fault::IllTyped),
    })
}

#[inline]
pub fn cmp(op: CmpOp, a: Const, b: Const) -> Result<bool, Fault> {
    use std::cmp::Ordering;
    let ord = match (a, b) {
        (Const::Int(t, x), Const::Int(t2, y)) if t == t2 => Some(if t.is_signed() {
            (x as i64).cmp(&(y as i64))
        } else {
            x.cmp(&y)
        }),
        (Const::F64(x), Const::F64(y)) => x.partial_cmp(&y),
        (Const::Bool(x), Const::Bool(y)) => Some(x.cmp(&y)),
        _ => return Err(Fault::IllTyped),
    };
    Ok(match ord {
        // Unordered (a NaN operand): only `ne` holds.
        None => op == CmpOp::Ne,
        Some(o) => match op {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        },
    })
}

/// Converts `a` to scalar type `to`: integer to integer truncates or extends by the
/// source's signedness; `f64` to integer truncates toward zero and saturates (NaN gives 0);
/// `bool` converts to 0/1, and a number to `bool` tests `!= 0`.
#[inline]
pub fn cast(to: Scalar, a: Const) -> Const {
    match (a, to) {
        (Const::Int(_, x), t) if t.is_int() => int(t, x),
        (Const::Int(t, x), Scalar::F64) => Const::F64(if t.is_signed() {
            x as i64 as f64
        } else {
            x as f64
        }),
        (Const::Int(_, x), _) => Const::Bool(x != 0),
        (Const::F64(x), Scalar::F64) => Const::F64(x),
        (Const::F64(x), Scalar::Bool) => Const::Bool(x != 0.0),
        (Const::F64(x), t) => {
            // Saturating truncation toward zero; NaN gives 0.
            let (lo, hi) = int_range(t);
            if t.is_signed() {
                Const::Int(t, (x as i64).clamp(lo as i64, hi as i64) as u64)
            } else {
                Const::Int(t, (x as u64).min(hi))
            }
        }
        (Const::Bool(b), Scalar::F64) => Const::F64(if b { 1.0 } else { 0.0 }),
        (Const::Bool(b), Scalar::Bool) => Const::Bool(b),
        (Const::Bool(b), t) => Const::Int(t, b as u64),
    }
}

/// The value of an integer constant as `i128` (exact for every type).
#[inline]
pub fn int_value(c: Const) -> Option<i128> {
    match c {
        Const::Int(t, x) if t.is_signed() => Some(x as i64 as i128),
        Const::Int(_, x) => Some(x as i128),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Scalar::*;

    #[test]
    fn canonical_form() {
        assert_eq!(canon(I8, 0xff), u64::MAX);
        assert_eq!(canon(U8, 0x1ff), 0xff);
        assert_eq!(int_range(I16), ((-32768i64) as u64, 32767));
        assert_eq!(int_range(U32), (0, u32::MAX as u64));
        assert_eq!(int_range(I64), (i64::MIN as u64, i64::MAX as u64));
    }

    #[test]
    fn integer_arithmetic_wraps_and_divides_by_type() {
        let i8c = |x: i64| int(I8, x as u64);
        assert_eq!(binary(BinaryOp::Add, i8c(127), i8c(1)), Ok(i8c(-128)));
        assert_eq!(binary(BinaryOp::Div, i8c(-128), i8c(-1)), Ok(i8c(-128)));
        assert_eq!(binary(BinaryOp::Rem, i8c(-128), i8c(-1)), Ok(i8c(0)));
        assert_eq!(binary(BinaryOp::Div, i8c(-7), i8c(2)), Ok(i8c(-3)));
        assert_eq!(binary(BinaryOp::Shr, i8c(-8), i8c(1)), Ok(i8c(-4)));
        let u = |x: u64| int(U8, x);
        assert_eq!(binary(BinaryOp::Shr, u(0xf8), u(1)), Ok(u(0x7c)));
        assert_eq!(binary(BinaryOp::Div, u(200), u(3)), Ok(u(66)));
        assert_eq!(binary(BinaryOp::Shl, u(1), u(9)), Ok(u(2)));
        assert_eq!(
            binary(BinaryOp::Div, u(1), u(0)),
            Err(Fault::DivisionByZero)
        );
        assert_eq!(binary(BinaryOp::Min, i8c(-1), i8c(3)), Ok(i8c(-1)));
        assert_eq!(binary(BinaryOp::Min, u(255), u(3)), Ok(u(3)));
        assert_eq!(binary(BinaryOp::Add, u(1), i8c(1)), Err(Fault::IllTyped));
    }

    #[test]
    fn comparisons_follow_signedness_and_nan() {
        assert_eq!(
            cmp(CmpOp::Lt, int(I32, -1i64 as u64), int(I32, 1)),
            Ok(true)
        );
        assert_eq!(
            cmp(CmpOp::Lt, int(U32, -1i64 as u64), int(U32, 1)),
            Ok(false)
        );
        let nan = Const::F64(f64::NAN);
        assert_eq!(cmp(CmpOp::Eq, nan, nan), Ok(false));
        assert_eq!(cmp(CmpOp::Ne, nan, nan), Ok(true));
    }

    #[test]
    fn casts_truncate_extend_and_saturate() {
        assert_eq!(cast(U8, int(I32, 300)), int(U8, 44));
        assert_eq!(cast(I64, int(I8, -1i64 as u64)), int(I64, -1i64 as u64));
        assert_eq!(cast(U64, int(I8, -1i64 as u64)), int(U64, u64::MAX));
        assert_eq!(cast(I64, int(U8, 255)), int(I64, 255));
        assert_eq!(cast(I8, Const::F64(1e9)), int(I8, 127));
        assert_eq!(cast(U16, Const::F64(-5.0)), int(U16, 0));
        assert_eq!(cast(I32, Const::F64(f64::NAN)), int(I32, 0));
        assert_eq!(cast(F64, int(U64, u64::MAX)), Const::F64(u64::MAX as f64));
        assert_eq!(cast(Bool, int(I8, 2)), Const::Bool(true));
        assert_eq!(cast(I16, Const::Bool(true)), int(I16, 1));
    }
}

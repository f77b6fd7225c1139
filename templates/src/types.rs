//! Value types of the IR.
//!
//! Signedness is carried by the **type**, not by the operations: `i32` and `u32` are distinct
//! types, and `div`, `rem`, `shr`, comparisons and casts interpret their operands according
//! to the operand type. Integer arithmetic wraps at the type's width.
//!
//! Slices are a pair (pointer, length) over scalar elements. `[T]` may only be read, `[mut T]`
//! may be read and written. Every dynamic access is bounds-checked.

use std::fmt;

/// A scalar type: an integer, `f64` or `bool`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scalar {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F64,
    Bool,
}

impl Scalar {
    /// Every scalar type, in a fixed order (used by generators and tests).
    pub const ALL: [Scalar; 10] = [
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
        Scalar::F64,
        Scalar::Bool,
    ];

    /// Width in bits of an integer type, `None` for `f64` and `bool`.
    pub fn int_bits(self) -> Option<u32> {
        match self {
            Scalar::I8 | Scalar::U8 => Some(8),
            Scalar::I16 | Scalar::U16 => Some(16),
            Scalar::I32 | Scalar::U32 => Some(32),
            Scalar::I64 | Scalar::U64 => Some(64),
            Scalar::F64 | Scalar::Bool => None,
        }
    }

    pub fn is_int(self) -> bool {
        self.int_bits().is_some()
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64)
    }

    pub fn name(self) -> &'static str {
        match self {
            Scalar::I8 => "i8",
            Scalar::I16 => "i16",
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
            Scalar::U8 => "u8",
            Scalar::U16 => "u16",
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
            Scalar::F64 => "f64",
            Scalar::Bool => "bool",
        }
    }

    pub fn from_name(s: &str) -> Option<Scalar> {
        Scalar::ALL.iter().copied().find(|t| t.name() == s)
    }
}

/// The type of an SSA value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Scalar(Scalar),
    /// `[T]` (read-only) or `[mut T]`.
    Slice {
        elem: Scalar,
        mutable: bool,
    },
    /// A local array `[T; N]` of a function: `len` elements, zero when declared. Only a
    /// function's own variables have this type (no parameter, result or call argument
    /// does); it is read and written like a mutable slice.
    Array {
        elem: Scalar,
        len: u32,
    },
}

impl Type {
    pub const I64: Type = Type::Scalar(Scalar::I64);
    pub const BOOL: Type = Type::Scalar(Scalar::Bool);
    pub const F64: Type = Type::Scalar(Scalar::F64);

    pub fn scalar(self) -> Option<Scalar> {
        match self {
            Type::Scalar(s) => Some(s),
            Type::Slice { .. } | Type::Array { .. } => None,
        }
    }

    pub fn is_int(self) -> bool {
        self.scalar().is_some_and(Scalar::is_int)
    }

    pub fn is_slice(self) -> bool {
        matches!(self, Type::Slice { .. })
    }

    /// Whether this is a local array type `[T; N]`.
    pub fn is_array(self) -> bool {
        matches!(self, Type::Array { .. })
    }

    /// The element type of a slice or array.
    pub fn elem(self) -> Option<Scalar> {
        match self {
            Type::Slice { elem, .. } | Type::Array { elem, .. } => Some(elem),
            Type::Scalar(_) => None,
        }
    }

    /// The scalars a value of this type is made of where code stitched from a region
    /// passes it between blocks and units: an array is its elements (a slice is one value).
    pub fn flat_len(self) -> usize {
        match self {
            Type::Array { len, .. } => len as usize,
            _ => 1,
        }
    }

    /// `types` with every array replaced by its elements (see [`Type::flat_len`]).
    pub fn flatten(types: impl IntoIterator<Item = Type>) -> Vec<Type> {
        let mut out = Vec::new();
        for t in types {
            match t {
                Type::Array { elem, len } => {
                    out.extend(std::iter::repeat_n(Type::Scalar(elem), len as usize))
                }
                t => out.push(t),
            }
        }
        out
    }
}

impl From<Scalar> for Type {
    fn from(s: Scalar) -> Type {
        Type::Scalar(s)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar(s) => write!(f, "{s}"),
            Type::Slice {
                elem,
                mutable: false,
            } => write!(f, "[{elem}]"),
            Type::Slice {
                elem,
                mutable: true,
            } => write!(f, "[mut {elem}]"),
            Type::Array { elem, len } => write!(f, "[{elem}; {len}]"),
        }
    }
}

/// A position in the source text of a region (1-based); `line == 0` means unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrcLoc {
    pub line: u32,
    pub col: u32,
}

impl SrcLoc {
    pub fn new(line: u32, col: u32) -> SrcLoc {
        SrcLoc { line, col }
    }
    pub fn is_known(self) -> bool {
        self.line != 0
    }
}

impl std::fmt::Display for SrcLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

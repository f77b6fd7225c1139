//! Instructions of the IR.
//!
//! One enum, [`InstData`], holds every instruction with its operands. Result types are
//! determined by the instruction (see [`crate::ir::Function::result_types`]); operand types
//! are checked by the verifier. Terminators are the last instruction of every block.

use super::entities::{Block, ExternId, FuncId, Value, Var};
use super::policy::Policies;
use super::types::{Scalar, Type};
pub use dyc_templates::ops::{BinaryOp, CmpOp, Const, UnaryOp};
use thin_vec::ThinVec;

/// A list of operands: one pointer, no allocation when empty (most branch targets pass
/// nothing), so that instructions stay small.
pub type ValueList = ThinVec<Value>;

/// A branch target: a block and the arguments passed to its parameters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockCall {
    pub block: Block,
    pub args: ValueList,
}

impl BlockCall {
    pub fn new(block: Block, args: impl Into<ValueList>) -> BlockCall {
        BlockCall {
            block,
            args: args.into(),
        }
    }
}

/// The callee of a `call`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Callee {
    /// A function of the same module.
    Func(FuncId),
    /// A host function declared with `extern fn`.
    Extern(ExternId),
}

/// An instruction and its operands.
#[derive(Clone, Debug, PartialEq)]
pub enum InstData {
    /// `iconst.T n`, `fconst x`, `bconst b`.
    Const(Const),
    /// `neg v`, `not v`.
    Unary { op: UnaryOp, arg: Value },
    /// `add a, b` and the other binary operators; both operands have one type.
    Binary { op: BinaryOp, args: [Value; 2] },
    /// `cmp.lt a, b`: a `bool`.
    Cmp { op: CmpOp, args: [Value; 2] },
    /// `select c, a, b`: `a` if `c` else `b`.
    Select { cond: Value, args: [Value; 2] },
    /// `cast.T v`: between scalar types. Integer to integer truncates or extends by the
    /// source's signedness; `f64` to integer truncates toward zero and saturates (NaN gives
    /// 0); `bool` converts to 0/1 and an integer or float to `bool` tests `!= 0`.
    Cast { to: Scalar, arg: Value },
    /// `array.T N`: a new local array `[T; N]`, every element zero. Read and written with
    /// `load` and `store` like a mutable slice; each execution makes a fresh array.
    ArrayNew { elem: Scalar, len: u32 },
    /// `len s`: the length of a slice or array, as `i64`.
    Len { arg: Value },
    /// `load s, i`: bounds-checked read of `s[i]` (`i` any integer type).
    Load { slice: Value, index: Value },
    /// `store s, i, v`: bounds-checked write `s[i] = v` into a `[mut T]`.
    Store {
        slice: Value,
        index: Value,
        value: Value,
    },
    /// `load_static s, i`: the static load `s@[i]`: read at specialization time
    /// when `s` and `i` are static; bounds-checked like `load`.
    StaticLoad { slice: Value, index: Value },
    /// `call f(args)` / `call_static f(args)`: the static form `@f(args)` may only name a
    /// pure host function.
    Call {
        callee: Callee,
        args: ValueList,
        is_static: bool,
    },
    /// `make_static v as x, ...: policies`: from here the variables are run-time constants.
    /// Produces one result per operand, a copy of it, which the front end binds to the
    /// variable from then on.
    MakeStatic {
        args: ThinVec<(Value, Var)>,
        policies: Policies,
    },
    /// `make_dynamic v as x, ...`: ends specialization on the variables; one copy per operand.
    MakeDynamic { args: ThinVec<(Value, Var)> },
    /// `jump block(args)`.
    Jump { dest: BlockCall },
    /// `brif c, then(args), else(args)`.
    Brif {
        cond: Value,
        then_dest: BlockCall,
        else_dest: BlockCall,
    },
    /// `switch v, [k: block(args), ...], default(args)`: a jump table on an integer.
    Switch {
        arg: Value,
        cases: ThinVec<(u64, BlockCall)>,
        default: BlockCall,
    },
    /// `return` or `return v`.
    Return { value: Option<Value> },
    /// `trap`: a runtime error of kind `trap`.
    Trap,
}

/// The one operand walk behind `visit_operands` and `visit_operands_mut`: the same body
/// serves `&InstData` and `&mut InstData` through default binding modes, with `iter` or
/// `iter_mut` for the collections.
macro_rules! visit_operands {
    ($self:expr, $f:ident, $iter:ident) => {
        match $self {
            InstData::Const(_) | InstData::Trap | InstData::ArrayNew { .. } => {}
            InstData::Unary { arg, .. } | InstData::Cast { arg, .. } | InstData::Len { arg } => {
                $f(arg)
            }
            InstData::Binary { args, .. } | InstData::Cmp { args, .. } => args.$iter().for_each($f),
            InstData::Select { cond, args } => {
                $f(cond);
                args.$iter().for_each($f);
            }
            InstData::Load { slice, index } | InstData::StaticLoad { slice, index } => {
                $f(slice);
                $f(index);
            }
            InstData::Store {
                slice,
                index,
                value,
            } => {
                $f(slice);
                $f(index);
                $f(value);
            }
            InstData::Call { args, .. } => args.$iter().for_each($f),
            InstData::MakeStatic { args, .. } | InstData::MakeDynamic { args } => {
                args.$iter().for_each(|(a, _)| $f(a))
            }
            InstData::Jump { dest } => dest.args.$iter().for_each($f),
            InstData::Brif {
                cond,
                then_dest,
                else_dest,
            } => {
                $f(cond);
                then_dest.args.$iter().for_each(&mut $f);
                else_dest.args.$iter().for_each($f);
            }
            InstData::Switch {
                arg,
                cases,
                default,
            } => {
                $f(arg);
                for (_, c) in cases {
                    c.args.$iter().for_each(&mut $f);
                }
                default.args.$iter().for_each($f);
            }
            InstData::Return { value } => value.$iter().for_each($f),
        }
    };
}

impl InstData {
    pub fn is_terminator(&self) -> bool {
        matches!(
            self,
            InstData::Jump { .. }
                | InstData::Brif { .. }
                | InstData::Switch { .. }
                | InstData::Return { .. }
                | InstData::Trap
        )
    }

    /// The branch targets of a terminator, in order (then before else, cases before
    /// default). Empty for non-branches. Allocates nothing.
    pub fn branch_targets(&self) -> impl Iterator<Item = &BlockCall> + '_ {
        let (first, second, cases): (_, _, &[_]) = match self {
            InstData::Jump { dest } => (Some(dest), None, &[]),
            InstData::Brif {
                then_dest,
                else_dest,
                ..
            } => (Some(then_dest), Some(else_dest), &[]),
            InstData::Switch { cases, default, .. } => (None, Some(default), cases),
            _ => (None, None, &[]),
        };
        first
            .into_iter()
            .chain(cases.iter().map(|(_, c)| c))
            .chain(second)
    }

    /// Mutable access to the branch targets, in the order of [`InstData::branch_targets`].
    pub fn branch_targets_mut(&mut self) -> impl Iterator<Item = &mut BlockCall> + '_ {
        let (first, second, cases): (_, _, &mut [_]) = match self {
            InstData::Jump { dest } => (Some(dest), None, &mut []),
            InstData::Brif {
                then_dest,
                else_dest,
                ..
            } => (Some(then_dest), Some(else_dest), &mut []),
            InstData::Switch { cases, default, .. } => (None, Some(default), cases),
            _ => (None, None, &mut []),
        };
        first
            .into_iter()
            .chain(cases.iter_mut().map(|(_, c)| c))
            .chain(second)
    }

    /// Branch target number `n` (in the order of [`InstData::branch_targets`]), in constant
    /// time.
    pub fn branch_target(&self, n: usize) -> Option<&BlockCall> {
        match self {
            InstData::Jump { dest } if n == 0 => Some(dest),
            InstData::Brif { then_dest, .. } if n == 0 => Some(then_dest),
            InstData::Brif { else_dest, .. } if n == 1 => Some(else_dest),
            InstData::Switch { cases, default, .. } => match cases.get(n) {
                Some((_, c)) => Some(c),
                None => (n == cases.len()).then_some(default),
            },
            _ => None,
        }
    }

    /// Mutable access to branch target number `n`, in constant time.
    pub fn branch_target_mut(&mut self, n: usize) -> Option<&mut BlockCall> {
        match self {
            InstData::Jump { dest } if n == 0 => Some(dest),
            InstData::Brif { then_dest, .. } if n == 0 => Some(then_dest),
            InstData::Brif { else_dest, .. } if n == 1 => Some(else_dest),
            InstData::Switch { cases, default, .. } => {
                let k = cases.len();
                match n.cmp(&k) {
                    std::cmp::Ordering::Less => Some(&mut cases[n].1),
                    std::cmp::Ordering::Equal => Some(default),
                    std::cmp::Ordering::Greater => None,
                }
            }
            _ => None,
        }
    }

    /// Every value operand, branch arguments included, in a fixed order.
    pub fn operands(&self) -> Vec<Value> {
        let mut v = Vec::new();
        self.visit_operands(|x| v.push(*x));
        v
    }

    /// Calls `f` on every value operand (branch arguments included), in the order of
    /// [`InstData::operands`].
    pub fn visit_operands(&self, mut f: impl FnMut(&Value)) {
        visit_operands!(self, f, iter)
    }

    /// Calls `f` on a mutable reference to every value operand, in the order of
    /// [`InstData::operands`].
    pub fn visit_operands_mut(&mut self, mut f: impl FnMut(&mut Value)) {
        visit_operands!(self, f, iter_mut)
    }

    /// The mnemonic printed in the text format.
    pub fn opcode_name(&self) -> &'static str {
        match self {
            InstData::Const(Const::Int(..)) => "iconst",
            InstData::Const(Const::F64(_)) => "fconst",
            InstData::Const(Const::Bool(_)) => "bconst",
            InstData::Unary { op, .. } => op.name(),
            InstData::Binary { op, .. } => op.name(),
            InstData::Cmp { .. } => "cmp",
            InstData::Select { .. } => "select",
            InstData::Cast { .. } => "cast",
            InstData::Len { .. } => "len",
            InstData::ArrayNew { .. } => "array",
            InstData::Load { .. } => "load",
            InstData::Store { .. } => "store",
            InstData::StaticLoad { .. } => "load_static",
            InstData::Call {
                is_static: false, ..
            } => "call",
            InstData::Call {
                is_static: true, ..
            } => "call_static",
            InstData::MakeStatic { .. } => "make_static",
            InstData::MakeDynamic { .. } => "make_dynamic",
            InstData::Jump { .. } => "jump",
            InstData::Brif { .. } => "brif",
            InstData::Switch { .. } => "switch",
            InstData::Return { .. } => "return",
            InstData::Trap => "trap",
        }
    }
}

/// A type used where an instruction's result type cannot be derived from well-typed
/// operands (the verifier reports the ill-typed operand instead).
pub(crate) const FALLBACK_TYPE: Type = Type::I64;

//! The reference interpreter: the semantics of the IR, and the oracle of every test.
//!
//! It runs a function of a module on host values and host slices and returns its result
//! or a [`RuntimeError`]. Every runtime fault (out-of-bounds access, division by zero,
//! `trap`, exhausted fuel, too deep a call chain, a failing or missing host function) is an
//! `Err` with its kind and location (function, block, instruction, source position); the
//! interpreter never panics on a verified module, whatever the arguments.
//!
//! Operators are evaluated by [`crate::semantics`], shared with constant folding. Calls
//! between functions of the module use an explicit frame stack (no host recursion), bounded
//! by [`Interpreter::max_depth`]; every executed instruction costs one unit of
//! [`Interpreter::fuel`]. Annotations (`make_static`, `make_dynamic`) are copies here: they
//! steer specialization but do not change meaning.
//!
//! Slices live in a [`Memory`] of typed buffers that the caller fills before the call and
//! reads back after it (mutable slices).

use std::collections::HashMap;
use std::fmt;

use crate::ir::{
    Block, Callee, Const, FuncId, Inst, InstData, Module, Scalar, SrcLoc, Type, Value,
};
use crate::semantics::{self, Fault};

/// A runtime value: a scalar or a slice of a buffer in [`Memory`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    Scalar(Const),
    Slice(SliceRef),
    /// A local array of the running function: an index into its frame's arrays.
    Array(u32),
}

/// A slice: a whole buffer of the memory, read-only or mutable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceRef {
    pub buf: usize,
    pub mutable: bool,
}

/// A typed buffer of scalars.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub elem: Scalar,
    pub data: Vec<Const>,
}

/// The buffers slices point into.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    pub bufs: Vec<Buffer>,
}

impl Memory {
    /// Adds a buffer and returns a slice over it. Elements must be of type `elem`.
    pub fn add(&mut self, elem: Scalar, data: Vec<Const>, mutable: bool) -> Val {
        self.bufs.push(Buffer { elem, data });
        Val::Slice(SliceRef {
            buf: self.bufs.len() - 1,
            mutable,
        })
    }
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    OutOfBounds {
        index: i128,
        len: u64,
    },
    DivisionByZero,
    Trap,
    FuelExhausted,
    CallDepthExceeded,
    /// A host function failed, returned a value of the wrong type, or is not registered.
    Host(String),
    /// The arguments do not match the function's signature.
    BadArguments(String),
    /// An invariant the verifier guarantees was broken (a bug, or an unverified module).
    Internal(String),
}

impl ErrorKind {
    /// The kind without its details, as the compiled code's
    /// [`dyc_templates::template::FaultKind::name`] spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::OutOfBounds { .. } => "out of bounds",
            ErrorKind::DivisionByZero => "division by zero",
            ErrorKind::Trap => "trap",
            ErrorKind::FuelExhausted => "fuel exhausted",
            ErrorKind::CallDepthExceeded => "call depth exceeded",
            ErrorKind::Host(_) => "host function error",
            ErrorKind::BadArguments(_) => "bad arguments",
            ErrorKind::Internal(_) => "internal error",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::OutOfBounds { index, len } => {
                write!(f, "index {index} out of bounds for length {len}")
            }
            ErrorKind::DivisionByZero => write!(f, "division by zero"),
            ErrorKind::Trap => write!(f, "trap"),
            ErrorKind::FuelExhausted => write!(f, "fuel exhausted"),
            ErrorKind::CallDepthExceeded => write!(f, "call depth exceeded"),
            ErrorKind::Host(m) => write!(f, "host function error: {m}"),
            ErrorKind::BadArguments(m) => write!(f, "bad arguments: {m}"),
            ErrorKind::Internal(m) => write!(f, "internal error: {m}"),
        }
    }
}

/// A runtime fault with its location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeError {
    pub kind: ErrorKind,
    pub func: String,
    pub block: Option<Block>,
    pub inst: Option<Inst>,
    /// Source position of the faulting instruction, if it has one.
    pub loc: SrcLoc,
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in fn {}", self.kind, self.func)?;
        if let (Some(b), Some(i)) = (self.block, self.inst) {
            write!(f, " at {i} ({b})")?;
        }
        if self.loc.is_known() {
            write!(f, ", line {}", self.loc)?;
        }
        Ok(())
    }
}

impl std::error::Error for RuntimeError {}

/// A host function: scalar arguments in, an optional scalar out, or an error message.
pub type HostFn = Box<dyn FnMut(&[Const]) -> Result<Option<Const>, String> + Send>;

/// Host functions by name.
#[derive(Default)]
pub struct HostFns {
    fns: HashMap<String, HostFn>,
}

impl HostFns {
    pub fn register(
        &mut self,
        name: &str,
        f: impl FnMut(&[Const]) -> Result<Option<Const>, String> + Send + 'static,
    ) {
        self.fns.insert(name.to_string(), Box::new(f));
    }

    pub fn unregister(&mut self, name: &str) {
        self.fns.remove(name);
    }

    /// Calls host `name`; an unregistered name is an error.
    pub fn call(&mut self, name: &str, args: &[Const]) -> Result<Option<Const>, String> {
        match self.fns.get_mut(name) {
            Some(f) => f(args),
            None => Err(format!("`{name}` is not registered")),
        }
    }
}

/// Default fuel: instructions executed by one call.
pub const DEFAULT_FUEL: u64 = 10_000_000;
/// Default limit on nested calls.
pub const DEFAULT_MAX_DEPTH: usize = 1_000;

/// Runs functions of a module.
pub struct Interpreter<'m> {
    pub module: &'m Module,
    pub hosts: HostFns,
    /// Instructions one call may execute.
    pub fuel: u64,
    /// Frames one call may nest.
    pub max_depth: usize,
    /// Instructions executed by the last call.
    pub executed: u64,
}

struct Frame {
    func: FuncId,
    block: Block,
    pos: usize,
    env: Vec<Option<Val>>,
    /// The frame's local arrays. An `array` instruction executed again (in a loop) reuses
    /// the array its result names, zeroed: the previous one is dead, since arrays are never
    /// copied. So a frame holds at most one array per `array` instruction.
    arrays: Vec<Vec<Const>>,
}

impl<'m> Interpreter<'m> {
    pub fn new(module: &'m Module) -> Interpreter<'m> {
        Interpreter {
            module,
            hosts: HostFns::default(),
            fuel: DEFAULT_FUEL,
            max_depth: DEFAULT_MAX_DEPTH,
            executed: 0,
        }
    }

    /// Calls `func` with `args`; slices point into `mem`, which the call may modify.
    pub fn call(
        &mut self,
        func: FuncId,
        args: &[Val],
        mem: &mut Memory,
    ) -> Result<Option<Val>, RuntimeError> {
        let m = self.module;
        let f = &m.funcs[func];
        let fail = |kind: ErrorKind| RuntimeError {
            kind,
            func: f.name.clone(),
            block: None,
            inst: None,
            loc: SrcLoc::default(),
        };
        check_args(&f.sig.params, args, mem).map_err(|e| fail(ErrorKind::BadArguments(e)))?;
        let mut stack = vec![self.enter(func, args).map_err(fail)?];
        let mut fuel = self.fuel;
        self.executed = 0;
        loop {
            let frame = stack.last_mut().expect("a frame");
            let f = &m.funcs[frame.func];
            let Some(&inst) = f.layout.block_insts(frame.block).get(frame.pos) else {
                return Err(frame_error(
                    m,
                    frame,
                    None,
                    ErrorKind::Internal("fell off a block".into()),
                ));
            };
            if fuel == 0 {
                return Err(frame_error(m, frame, Some(inst), ErrorKind::FuelExhausted));
            }
            fuel -= 1;
            self.executed += 1;
            match self.step(frame, inst, mem) {
                Ok(Step::Next) => frame.pos += 1,
                Ok(Step::Jumped) => {}
                Ok(Step::Call(callee, vals)) => {
                    if stack.len() >= self.max_depth {
                        let frame = stack.last().expect("a frame");
                        return Err(frame_error(
                            m,
                            frame,
                            Some(inst),
                            ErrorKind::CallDepthExceeded,
                        ));
                    }
                    let new = self.enter(callee, &vals).map_err(|k| {
                        frame_error(m, stack.last().expect("a frame"), Some(inst), k)
                    })?;
                    stack.push(new);
                }
                Ok(Step::Return(v)) => {
                    stack.pop();
                    let Some(caller) = stack.last_mut() else {
                        return Ok(v);
                    };
                    let cf = &m.funcs[caller.func];
                    let call_inst = cf.layout.block_insts(caller.block)[caller.pos];
                    if let (Some(&r), Some(v)) = (cf.inst_results(call_inst).first(), v) {
                        caller.env[r.index()] = Some(v);
                    }
                    caller.pos += 1;
                }
                Err(kind) => {
                    let frame = stack.last().expect("a frame");
                    return Err(frame_error(m, frame, Some(inst), kind));
                }
            }
        }
    }

    fn enter(&self, func: FuncId, args: &[Val]) -> Result<Frame, ErrorKind> {
        let f = &self.module.funcs[func];
        let entry = f
            .entry_block()
            .ok_or_else(|| ErrorKind::Internal(format!("fn {} has no blocks", f.name)))?;
        let mut env = vec![None; f.values.len()];
        let params = f.block_params(entry);
        if params.len() != args.len() {
            return Err(ErrorKind::Internal("argument count".into()));
        }
        for (&p, &a) in params.iter().zip(args) {
            env[p.index()] = Some(a);
        }
        Ok(Frame {
            func,
            block: entry,
            pos: 0,
            env,
            arrays: Vec::new(),
        })
    }

    /// Runs `inst` if it is an `array`, or a `load`, `store` or `len` of an array; returns
    /// whether it was.
    fn array_inst(&self, frame: &mut Frame, inst: Inst) -> Result<bool, ErrorKind> {
        let f = &self.module.funcs[frame.func];
        let val = |frame: &Frame, v: Value| frame.env.get(v.index()).copied().flatten();
        let array = |frame: &Frame, v: Value| match val(frame, v) {
            Some(Val::Array(k)) if (k as usize) < frame.arrays.len() => Some(k as usize),
            _ => None,
        };
        let index = |frame: &Frame, k: usize, i: Value| match val(frame, i) {
            Some(Val::Scalar(c)) => checked_index(c, frame.arrays[k].len()),
            _ => Err(ErrorKind::Internal("non-integer index".into())),
        };
        let (result, v) = match f.insts[inst] {
            InstData::ArrayNew { elem, len } => {
                let r = f.first_result(inst);
                let zero = Const::zero(elem);
                let k = match array(frame, r) {
                    Some(k) => {
                        frame.arrays[k].fill(zero);
                        k
                    }
                    None => {
                        frame.arrays.push(vec![zero; len as usize]);
                        frame.arrays.len() - 1
                    }
                };
                (r, Val::Array(k as u32))
            }
            InstData::Load { slice, index: i } => {
                let Some(k) = array(frame, slice) else {
                    return Ok(false);
                };
                let x = index(frame, k, i)?;
                (f.first_result(inst), Val::Scalar(frame.arrays[k][x]))
            }
            InstData::Len { arg } => {
                let Some(k) = array(frame, arg) else {
                    return Ok(false);
                };
                let n = frame.arrays[k].len() as u64;
                (
                    f.first_result(inst),
                    Val::Scalar(Const::Int(Scalar::I64, n)),
                )
            }
            InstData::Store {
                slice,
                index: i,
                value,
            } => {
                let Some(k) = array(frame, slice) else {
                    return Ok(false);
                };
                let x = index(frame, k, i)?;
                match val(frame, value) {
                    Some(Val::Scalar(c)) => frame.arrays[k][x] = c,
                    _ => return Err(ErrorKind::Internal("store of a non-scalar".into())),
                }
                return Ok(true);
            }
            _ => return Ok(false),
        };
        frame.env[result.index()] = Some(v);
        Ok(true)
    }

    fn step(&mut self, frame: &mut Frame, inst: Inst, mem: &mut Memory) -> Result<Step, ErrorKind> {
        if self.array_inst(frame, inst)? {
            return Ok(Step::Next);
        }
        let m = self.module;
        let f = &m.funcs[frame.func];
        let get = |v: Value| -> Result<Val, ErrorKind> {
            frame
                .env
                .get(v.index())
                .copied()
                .flatten()
                .ok_or_else(|| ErrorKind::Internal(format!("{v} read before it was set")))
        };
        let scalar = |v: Value| -> Result<Const, ErrorKind> {
            match get(v)? {
                Val::Scalar(c) => Ok(c),
                _ => Err(ErrorKind::Internal(format!("{v} is not a scalar"))),
            }
        };
        let slice = |v: Value| -> Result<SliceRef, ErrorKind> {
            match get(v)? {
                Val::Slice(s) if s.buf < mem.bufs.len() => Ok(s),
                _ => Err(ErrorKind::Internal(format!("{v} is not a slice"))),
            }
        };
        let fault = |e: Fault| match e {
            Fault::DivisionByZero => ErrorKind::DivisionByZero,
            Fault::IllTyped => ErrorKind::Internal("ill-typed operands".into()),
        };
        let index = |s: SliceRef, i: Value, mem: &Memory| {
            checked_index(scalar(i)?, mem.bufs[s.buf].data.len())
        };
        let result: Vec<Val> = match &f.insts[inst] {
            InstData::Const(c) => vec![Val::Scalar(*c)],
            InstData::ArrayNew { .. } => {
                return Err(ErrorKind::Internal("`array` is run by `array_inst`".into()))
            }
            InstData::Unary { op, arg } => {
                vec![Val::Scalar(
                    semantics::unary(*op, scalar(*arg)?).map_err(fault)?,
                )]
            }
            InstData::Binary { op, args } => vec![Val::Scalar(
                semantics::binary(*op, scalar(args[0])?, scalar(args[1])?).map_err(fault)?,
            )],
            InstData::Cmp { op, args } => vec![Val::Scalar(Const::Bool(
                semantics::cmp(*op, scalar(args[0])?, scalar(args[1])?).map_err(fault)?,
            ))],
            InstData::Select { cond, args } => {
                let c = matches!(scalar(*cond)?, Const::Bool(true));
                vec![get(if c { args[0] } else { args[1] })?]
            }
            InstData::Cast { to, arg } => vec![Val::Scalar(semantics::cast(*to, scalar(*arg)?))],
            InstData::Len { arg } => {
                let s = slice(*arg)?;
                vec![Val::Scalar(Const::Int(
                    Scalar::I64,
                    mem.bufs[s.buf].data.len() as u64,
                ))]
            }
            InstData::Load { slice: s, index: i } | InstData::StaticLoad { slice: s, index: i } => {
                let s = slice(*s)?;
                let k = index(s, *i, mem)?;
                vec![Val::Scalar(mem.bufs[s.buf].data[k])]
            }
            InstData::Store {
                slice: s,
                index: i,
                value,
            } => {
                let s = slice(*s)?;
                let k = index(s, *i, mem)?;
                let v = scalar(*value)?;
                if !s.mutable || v.ty() != mem.bufs[s.buf].elem {
                    return Err(ErrorKind::Internal(
                        "store into a read-only or mistyped slice".into(),
                    ));
                }
                mem.bufs[s.buf].data[k] = v;
                vec![]
            }
            InstData::Call { callee, args, .. } => {
                let vals = args
                    .iter()
                    .map(|&a| get(a))
                    .collect::<Result<Vec<_>, _>>()?;
                match *callee {
                    Callee::Func(id) => return Ok(Step::Call(id, vals)),
                    Callee::Extern(e) => {
                        let decl = &m.externs[e];
                        let consts = vals
                            .iter()
                            .map(|v| match v {
                                Val::Scalar(c) => Ok(*c),
                                _ => Err(ErrorKind::Internal("non-scalar passed to a host".into())),
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        let host = self.hosts.fns.get_mut(&decl.name).ok_or_else(|| {
                            ErrorKind::Host(format!("`{}` is not registered", decl.name))
                        })?;
                        let r = host(&consts).map_err(ErrorKind::Host)?;
                        match (r, decl.sig.ret) {
                            (None, None) => vec![],
                            (Some(c), Some(t)) if Type::Scalar(c.ty()) == t => vec![Val::Scalar(c)],
                            (r, t) => {
                                return Err(ErrorKind::Host(format!(
                                    "`{}` returned {r:?}, its declaration says {t:?}",
                                    decl.name
                                )))
                            }
                        }
                    }
                }
            }
            InstData::MakeStatic { args, .. } | InstData::MakeDynamic { args } => args
                .iter()
                .map(|&(a, _)| get(a))
                .collect::<Result<_, _>>()?,
            InstData::Jump { dest } => return self.jump(frame, dest),
            InstData::Brif {
                cond,
                then_dest,
                else_dest,
            } => {
                let dest = if matches!(scalar(*cond)?, Const::Bool(true)) {
                    then_dest
                } else {
                    else_dest
                };
                return self.jump(frame, dest);
            }
            InstData::Switch {
                arg,
                cases,
                default,
            } => {
                let Const::Int(_, k) = scalar(*arg)? else {
                    return Err(ErrorKind::Internal("switch on a non-integer".into()));
                };
                let dest = cases
                    .iter()
                    .find(|(c, _)| *c == k)
                    .map(|(_, d)| d)
                    .unwrap_or(default);
                return self.jump(frame, dest);
            }
            InstData::Return { value } => {
                return Ok(Step::Return(match value {
                    Some(v) => Some(get(*v)?),
                    None => None,
                }))
            }
            InstData::Trap => return Err(ErrorKind::Trap),
        };
        for (&r, v) in f.inst_results(inst).iter().zip(result) {
            frame.env[r.index()] = Some(v);
        }
        Ok(Step::Next)
    }

    fn jump(&self, frame: &mut Frame, dest: &crate::ir::BlockCall) -> Result<Step, ErrorKind> {
        let f = &self.module.funcs[frame.func];
        let vals: Vec<Option<Val>> = dest
            .args
            .iter()
            .map(|a| frame.env.get(a.index()).copied().flatten())
            .collect();
        for (&p, v) in f.block_params(dest.block).iter().zip(vals) {
            let v = v.ok_or_else(|| {
                ErrorKind::Internal("branch argument read before it was set".into())
            })?;
            frame.env[p.index()] = Some(v);
        }
        frame.block = dest.block;
        frame.pos = 0;
        Ok(Step::Jumped)
    }
}

enum Step {
    Next,
    Jumped,
    Call(FuncId, Vec<Val>),
    Return(Option<Val>),
}

fn frame_error(m: &Module, frame: &Frame, inst: Option<Inst>, kind: ErrorKind) -> RuntimeError {
    let f = &m.funcs[frame.func];
    RuntimeError {
        kind,
        func: f.name.clone(),
        block: Some(frame.block),
        inst,
        loc: inst.map(|i| f.srclocs[i]).unwrap_or_default(),
    }
}

/// Checks that `args` have the types `params` asks for.
fn check_args(params: &[Type], args: &[Val], mem: &Memory) -> Result<(), String> {
    if params.len() != args.len() {
        return Err(format!(
            "{} argument(s) expected, {} given",
            params.len(),
            args.len()
        ));
    }
    for (k, (p, a)) in params.iter().zip(args).enumerate() {
        let ok = match (p, a) {
            (Type::Scalar(t), Val::Scalar(c)) => {
                c.ty() == *t && !matches!(c, Const::Int(t, x) if semantics::canon(*t, *x) != *x)
            }
            (Type::Slice { elem, mutable }, Val::Slice(s)) => {
                mem.bufs.get(s.buf).is_some_and(|b| {
                    b.elem == *elem
                        && (s.mutable || !mutable)
                        && b.data.iter().all(|c| c.ty() == *elem)
                })
            }
            _ => false,
        };
        if !ok {
            return Err(format!("argument {k} is not a {p}"));
        }
    }
    Ok(())
}

use cranelift_entity::EntityRef as _;

/// Parses call arguments written as text, one per parameter, separated by commas:
/// integers (`-3`), floats (`1.5`, `inf`, `NaN`), `true`/`false`, and slices as
/// bracketed lists (`[1, 2, 3]`, `[]`). A slice is mutable when its parameter is
/// `[mut T]`. Slices are added to `mem`.
pub fn parse_args(params: &[Type], text: &str, mem: &mut Memory) -> Result<Vec<Val>, String> {
    let items = split_top(text)?;
    if items.len() != params.len() {
        return Err(format!(
            "{} argument(s) expected, {} given",
            params.len(),
            items.len()
        ));
    }
    let mut out = Vec::new();
    for (p, item) in params.iter().zip(items) {
        out.push(match *p {
            Type::Scalar(t) => Val::Scalar(parse_scalar(t, &item)?),
            Type::Array { .. } => return Err(format!("{p} cannot be an argument")),
            Type::Slice { elem, mutable } => {
                let inner = item
                    .strip_prefix('[')
                    .and_then(|s| s.strip_suffix(']'))
                    .ok_or_else(|| format!("expected a slice `[...]` for {p}, found `{item}`"))?;
                let data = split_top(inner)?
                    .iter()
                    .map(|x| parse_scalar(elem, x))
                    .collect::<Result<Vec<_>, _>>()?;
                mem.add(elem, data, mutable)
            }
        });
    }
    Ok(out)
}

/// Splits at commas outside brackets; trims; an all-blank text gives no items.
fn split_top(text: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    let (mut depth, mut cur) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return Err(format!("unbalanced `]` in `{text}`"));
        }
        if c == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur).trim().to_string());
        } else {
            cur.push(c);
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced `[` in `{text}`"));
    }
    if !cur.trim().is_empty() || !items.is_empty() {
        items.push(cur.trim().to_string());
    }
    Ok(items)
}

/// Parses one scalar of type `t`; integers must be in range.
pub fn parse_scalar(t: Scalar, s: &str) -> Result<Const, String> {
    let bad = || format!("`{s}` is not a value of type {t}");
    match t {
        Scalar::Bool => match s {
            "true" => Ok(Const::Bool(true)),
            "false" => Ok(Const::Bool(false)),
            _ => Err(bad()),
        },
        Scalar::F64 => s.parse::<f64>().map(Const::F64).map_err(|_| bad()),
        _ => {
            let x: i128 = s.parse().map_err(|_| bad())?;
            let (lo, hi) = semantics::int_range(t);
            let (lo, hi) = if t.is_signed() {
                (lo as i64 as i128, hi as i64 as i128)
            } else {
                (lo as i128, hi as i128)
            };
            if x < lo || x > hi {
                return Err(format!("{x} is out of range for {t}"));
            }
            Ok(Const::Int(t, x as u64))
        }
    }
}

/// Formats a scalar as [`parse_scalar`] reads it.
pub fn format_scalar(c: Const) -> String {
    match c {
        Const::Int(t, x) if t.is_signed() => (x as i64).to_string(),
        Const::Int(_, x) => x.to_string(),
        Const::F64(x) => format!("{x:?}"),
        Const::Bool(b) => b.to_string(),
    }
}

/// Integer `i` as a position below `len`, or the out-of-bounds fault.
fn checked_index(i: Const, len: usize) -> Result<usize, ErrorKind> {
    let idx =
        semantics::int_value(i).ok_or_else(|| ErrorKind::Internal("non-integer index".into()))?;
    if idx < 0 || idx >= len as i128 {
        return Err(ErrorKind::OutOfBounds {
            index: idx,
            len: len as u64,
        });
    }
    Ok(idx as usize)
}

/// Formats a value; slices show their contents.
pub fn format_val(v: Val, mem: &Memory) -> String {
    match v {
        Val::Scalar(c) => format_scalar(c),
        Val::Array(_) => "<local array>".into(),
        Val::Slice(s) => match mem.bufs.get(s.buf) {
            Some(b) => format!(
                "[{}]",
                b.data
                    .iter()
                    .map(|&c| format_scalar(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => "<dangling slice>".into(),
        },
    }
}

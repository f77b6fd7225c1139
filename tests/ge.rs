//! The generating extension as an interface: stitch programs built by the static compiler
//! check, broken ones are refused with errors that name the entity, the linearized form
//! prints and checks, and the recording emitter shows what the work-list executor stitched.

use dyc::bta::Mode;
use dyc::residual::ResidualEmitter;
use dyc_stitcher::exec::{Context, Executor, ExecutorKind, PromotionMode, Record};
use dyc_stitcher::ge::{
    check_cfg, check_linear, print_linear, Block, Budget, Dir, LinearProgram, LinearUnit, NoHosts,
    Operand, ProgramHeader, Reg, SVal, SetupOp, StitchProgram, Target, Term, UnitId,
};
use dyc_templates::fold::Fold;
use dyc_templates::ops::{BinaryOp, Const};
use dyc_templates::template::TOp;
use dyc_templates::types::{Scalar, SrcLoc, Type};

const POWER: &str = "fn power(x: i64, n: i64) -> i64 {
    make_static(n);
    var r = 1;
    while n > 0 {
        r = r * x;
        n = n - 1;
    }
    return r;
}
";

fn power() -> (dyc::ir::Module, StitchProgram) {
    let m = dyc::lang::compile("power.dyc", POWER).expect("compiles");
    let id = m.func_by_name("power").expect("power");
    let ge = dyc::ge::build(&m, id, Mode::Specialize).expect("builds");
    (m, ge.program)
}

#[test]
fn built_programs_check_and_broken_ones_name_the_entity() {
    let (_, p) = power();
    check_cfg(&p).expect("checks");
    // A static register read before any definition.
    let mut bad = p.clone();
    let (b, data) = bad
        .blocks
        .iter_mut()
        .find(|(_, d)| !d.ops.is_empty())
        .expect("a block with operations");
    data.ops.insert(
        0,
        dyc_stitcher::ge::Op::Setup {
            dst: Reg::from_u32(p.header.num_regs - 1),
            op: SetupOp::Copy(Reg::from_u32(p.header.num_regs + 5)),
            loc: SrcLoc::default(),
        },
    );
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(
        e.contains(&format!("{b}: r{} is beyond", p.header.num_regs + 5)),
        "{e}"
    );
    // An edge with one argument too many.
    let mut bad = p.clone();
    let (b, data) = bad
        .blocks
        .iter_mut()
        .find(|(_, d)| matches!(d.term, Term::Jump(_)))
        .expect("a jump");
    if let Term::Jump(e) = &mut data.term {
        e.args.push(Operand::Dyn(Reg::from_u32(0)));
    }
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(
        e.contains(&format!("{b}: edge to")) && e.contains("arguments"),
        "{e}"
    );
    // A branch to a block that does not exist.
    let mut bad = p.clone();
    let entry = bad.entry;
    if let Term::Jump(e) = &mut bad.blocks[entry].term {
        e.block = Block::from_u32(999);
    }
    let e = check_cfg(&bad).expect_err("refused").to_string();
    assert!(e.contains("branch to b999, which does not exist"), "{e}");
}

/// A hand-written linearized program: `power` with the loop unrolled by the setup code's
/// own loop, as the DyC transform will produce it.
fn linear_power() -> LinearProgram {
    let r = Reg::from_u32;
    let (x, n, acc, zero, more, one, n1, prod, res) =
        (r(0), r(1), r(2), r(3), r(4), r(5), r(6), r(7), r(8));
    let i64c = |v: i64| SetupOp::Const(Const::Int(Scalar::I64, v as u64));
    let loc = SrcLoc::default();
    let body = vec![
        Dir::Lift {
            dst: acc,
            src: Operand::Static(one),
        },
        Dir::Setup {
            dst: one,
            op: i64c(1),
            loc,
        },
        Dir::Lift {
            dst: acc,
            src: Operand::Static(one),
        },
        Dir::Setup {
            dst: zero,
            op: i64c(0),
            loc,
        },
        Dir::Loop {
            dirs: vec![
                Dir::Setup {
                    dst: more,
                    op: SetupOp::Cmp(dyc_templates::ops::CmpOp::Gt, n, zero),
                    loc,
                },
                Dir::If {
                    cond: more,
                    then_dirs: vec![
                        Dir::Emit {
                            dst: Some(prod),
                            op: TOp::Binary(BinaryOp::Mul),
                            args: vec![Operand::Dyn(acc), Operand::Dyn(x)],
                            loc,
                        },
                        Dir::Lift {
                            dst: acc,
                            src: Operand::Dyn(prod),
                        },
                        Dir::Setup {
                            dst: n1,
                            op: SetupOp::Binary(BinaryOp::Sub, n, one),
                            loc,
                        },
                        Dir::Setup {
                            dst: n,
                            op: SetupOp::Copy(n1),
                            loc,
                        },
                    ],
                    else_dirs: vec![Dir::Break],
                },
            ],
        },
        Dir::Jump(Target {
            block: Block::from_u32(3),
            key: vec![],
            args: vec![Operand::Dyn(acc)],
        }),
        Dir::Label {
            block: Block::from_u32(3),
            key: vec![],
            params: vec![(res, Type::I64)],
        },
        Dir::Return(Some(Operand::Dyn(res))),
    ];
    let mut units = cranelift_entity::PrimaryMap::new();
    let entry = units.push(LinearUnit {
        name: "power".into(),
        key: vec![n],
        inputs: vec![(x, Type::I64)],
        body,
    });
    LinearProgram {
        header: ProgramHeader {
            name: "power".into(),
            param_types: vec![Type::I64, Type::I64],
            ret: Some(Type::I64),
            key_params: vec![1],
            hosts: Default::default(),
            callees: Default::default(),
            num_regs: 9,
        },
        units,
        entry,
        num_flags: 0,
    }
}

#[test]
fn the_linearized_form_prints_and_checks() {
    let mut p = linear_power();
    // The first lift reads r5 before the setup code defines it.
    let e = check_linear(&p).expect_err("refused").to_string();
    assert_eq!(
        e,
        "u0: lifted operand r5 is not defined, a static register is needed\n"
    );
    p.units[UnitId::from_u32(0)].body.remove(0);
    check_linear(&p).expect("checks");
    let text = print_linear(&p);
    assert_eq!(
        text,
        "linear power(d i64, s i64) -> i64
entry unit u0 [r1](r0: i64):  ; power
    r5 = const 1:i64
    d r2 = lift s r5
    r3 = const 0:i64
    loop {
        r4 = gt r1, r3
        if r4 {
            d r7 = emit mul d r2, d r0
            d r2 = lift d r7
            r6 = sub r1, r5
            r1 = copy r6
        } else {
            break
        }
    }
    jump b3[](d r2)
    label b3[](r8: i64):
    return d r8
"
    );
    // A jump with a block still open afterwards, and a lazy point to a missing unit.
    let body = &mut p.units[UnitId::from_u32(0)].body;
    body.pop();
    body.push(Dir::Lazy {
        unit: UnitId::from_u32(4),
        args: vec![],
    });
    body.push(Dir::Trap(SrcLoc::default()));
    let e = check_linear(&p).expect_err("refused").to_string();
    assert_eq!(
        e,
        "u0: unit u4 does not exist\nu0: trap without an open block\n"
    );
}

/// The recording emitter shows the copies the work-list executor stitched: `power` with
/// `n = 3` stitches the loop header for n = 3, 2, 1, 0 and the body three times, each
/// (block, static context) once.
#[test]
fn the_recording_emitter_sees_every_copy_once() {
    let (m, p) = power();
    let id = m.func_by_name("power").expect("power");
    let f = &m.funcs[id];
    let callees = vec![];
    let backend = ResidualEmitter::new(&m, "spec", f.sig.clone(), callees);
    let mut em = Record::new(Fold::new(backend, vec![]));
    let cx = Context {
        prog: &p,
        slices: &[],
        hosts: &NoHosts,
        mode: PromotionMode::Inline(&|_| Vec::new()),
        budget: Budget::default(),
    };
    let key = [SVal::Scalar(Const::Int(Scalar::I64, 3))];
    ExecutorKind::WorkList
        .run(&cx, p.entry, &key, &mut em)
        .expect("specializes");
    let mut seen = std::collections::HashSet::new();
    for s in &em.stitched {
        assert!(seen.insert(s.clone()), "{s:?} stitched twice");
    }
    let count = |b: Block| em.blocks().iter().filter(|&&x| x == b).count();
    let header = p
        .blocks
        .iter()
        .find(|(_, d)| matches!(d.term, Term::Branch { .. }))
        .map(|(b, _)| b)
        .expect("the loop header");
    assert_eq!(count(header), 4, "{:?}", em.stitched);
    assert_eq!(em.stitched[0].0, p.entry);
}

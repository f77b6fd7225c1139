//! A packet filter machine in the style of classic BPF (`examples/filter.dyc`), specialized
//! on random filter programs in every tier, eagerly and lazily stitched, with its scratch
//! memory as values and in memory, agrees with the reference interpreter on random packets:
//! results and errors (kind and source position). Its dynamic branches (a comparison of
//! the accumulator with a constant) fork the static program counter, so every filter is a
//! tree of copies that rejoin where the jumps meet; its faults are a division by a constant
//! zero, a scratch word out of range, a jump past the end and an unknown operation, all
//! known when specializing and raised only if the packet leads there.

use dyc::interp::{parse_args, Interpreter, Memory};
use dyc::ir::{Const, Module};
use dyc::{Arg, Misses, Program, RuntimeOptions, Tier};

mod common;
use common::{outcome, Rng};

const FILTER: &str = include_str!("../examples/filter.dyc");

/// A filter of 1 to 24 instructions (op, jt, jf, k), jumps forward; about one in 60
/// instructions faults if reached.
fn random_filter(rng: &mut Rng) -> Vec<i64> {
    let n = 1 + rng.below(24) as i64;
    let mut code = Vec::new();
    for pc in 0..n {
        // Instructions after this one: the targets of its jumps.
        let left = n - pc - 1;
        let target = |rng: &mut Rng| match rng.below(60) {
            0 => left, // past the end
            _ => rng.below(left.max(1) as u64) as i64,
        };
        let (op, jt, jf, k) = match rng.below(if left == 0 { 4 } else { 32 }) {
            0 => (27, 0, 0, rng.below(3) as i64),
            1 => (28, 0, 0, 0),
            2 if left > 0 => (21, 0, 0, target(rng)),
            2 | 3 => (27, 0, 0, 1),
            op @ (4..=8) => (op as i64 - 4, 0, 0, rng.below(72) as i64),
            9 => (5, 0, 0, rng.below(1 << 12) as i64),
            10 => (6, 0, 0, rng.below(40) as i64),
            11 => (7, 0, 0, rng.below(72) as i64),
            op @ (12 | 13) => (op as i64 - 4, 0, 0, rng.below(17) as i64),
            14 => (13, 0, 0, [0, 1, 2, 3, 7, 8][rng.below(6) as usize]),
            op @ (15..=19) => {
                let op = [10, 11, 12, 14, 15][op as usize - 15];
                (op, 0, 0, rng.below(300) as i64)
            }
            op @ (20 | 21) => (op as i64 - 4, 0, 0, rng.below(40) as i64),
            op @ (22..=24) => (op as i64 - 4, 0, 0, 0),
            op @ (25..=29) => {
                let k = match rng.below(3) {
                    0 => rng.below(4) as i64,
                    1 => rng.below(256) as i64,
                    _ => rng.below(1 << 16) as i64,
                };
                (op as i64 - 3, target(rng), target(rng), k)
            }
            30 => [(29, 0, 0, 0), (30, 0, 0, 0)][rng.below(2) as usize],
            _ => (40, 0, 0, 0),
        };
        code.extend([op, jt, jf, k]);
    }
    code
}

fn random_packet(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(80) as usize;
    (0..len)
        .map(|_| match rng.below(4) {
            0 => 0,
            1 => rng.below(4) as u8,
            _ => rng.below(256) as u8,
        })
        .collect()
}

fn source(policy: &str) -> String {
    FILTER.replace("cache_all, eager", &format!("cache_all, {policy}"))
}

fn program(policy: &str, max_array_values: u32) -> Program {
    // No fuel: the code is what a program without fuel runs (fuel checks make every block
    // non-empty, which hides how empty blocks are laid out). A filter's jumps go forward,
    // so any run of correct code is short; `watchdog` catches one that is not.
    let opts = RuntimeOptions {
        tiers: common::no_tier_up(),
        max_array_values,
        // (A test compares the code of two programs: every stencil made when asked for.)
        stencil_misses: Misses::Make,
        ..RuntimeOptions::default()
    };
    Program::compile_with("filter.dyc", &source(policy), opts).expect("compiles")
}

/// The eager filter specialized on `code` in the stitch tier, with local arrays of more
/// than `max_array_values` elements in memory.
fn stitched(code: &[i64], max_array_values: u32) -> dyc::Specialized {
    program("eager", max_array_values)
        .region("filter")
        .expect("region")
        .specialize_in(&[Arg::from(code)], Tier::Stitch)
        .expect("specializes")
}

fn interpret(m: &Module, code: &[i64], pkt: &[u8]) -> String {
    let id = m.func_by_name("filter").expect("filter");
    let mut mem = Memory::default();
    let text = format!("{code:?}, {pkt:?}");
    let args = parse_args(&m.funcs[id].sig.params, &text, &mut mem).expect("arguments");
    common::interpreted(Interpreter::new(m).call(id, &args, &mut mem))
}

#[test]
fn a_packet_filter_agrees_with_the_interpreter_in_every_tier() {
    common::watchdog();
    let cases = common::cases(300);
    for policy in ["eager", "lazy"] {
        let module = dyc::lang::compile("filter.dyc", &source(policy)).expect("compiles");
        // The scratch memory as values (16 elements, the default limit 32) and in memory.
        let programs = [program(policy, 32), program(policy, 0)];
        let regions = programs
            .each_ref()
            .map(|p| p.region("filter").expect("region"));
        let (mut faults, mut accepted, mut compared) = (0, 0, 0);
        for seed in 0..cases {
            let mut rng = Rng(seed);
            let code = random_filter(&mut rng);
            let specs: Vec<_> = (regions.iter())
                .flat_map(|r| [Tier::Stitch, Tier::Quick, Tier::Optimizing].map(|t| (r, t)))
                .map(|(r, t)| {
                    r.specialize_in(&[Arg::from(&code[..])], t)
                        .unwrap_or_else(|e| panic!("{policy}, seed {seed}, {t:?}: {e}"))
                })
                .collect();
            for _ in 0..6 {
                let pkt = random_packet(&mut rng);
                let want = interpret(&module, &code, &pkt);
                faults += usize::from(want.starts_with("->"));
                accepted += usize::from(want.starts_with("= Int") && !want.ends_with(", 0)"));
                for (k, s) in specs.iter().enumerate() {
                    common::progress(format!(
                        "{policy}, seed {seed}, spec {k}, packet {pkt:?}: {code:?}"
                    ));
                    let got = outcome(s.call(&mut [Arg::from(&pkt[..])]));
                    assert_eq!(
                        got, want,
                        "{policy}, seed {seed}, spec {k}, packet {pkt:?}: {code:?}"
                    );
                    compared += 1;
                }
            }
        }
        // Faults, accepted and refused packets were all compared.
        let runs = compared / 6;
        assert!(
            faults * 30 >= runs && faults * 3 <= runs,
            "{policy}: {faults} faults"
        );
        assert!(accepted * 10 >= runs, "{policy}: {accepted} accepted");
    }
}

/// A filter for one protocol and port accepts and refuses what it should; it reads no
/// scratch memory, and makes about the same code with its scratch memory as values and in
/// memory (the stores its zeroing would make are left out).
#[test]
fn a_tcp_port_filter_accepts_what_it_should() {
    // (op, jt, jf, k) with absolute jump targets, as `tcpdump -d "tcp port 80"` lists it.
    let listing: [(i64, i64, i64, i64); 20] = [
        (1, 0, 0, 12),
        (22, 2, 8, 0x86dd),
        (0, 0, 0, 20),
        (22, 4, 19, 6),
        (1, 0, 0, 54),
        (22, 18, 6, 80),
        (1, 0, 0, 56),
        (22, 18, 19, 80),
        (22, 9, 19, 0x800),
        (0, 0, 0, 23),
        (22, 11, 19, 6),
        (1, 0, 0, 20),
        (25, 19, 13, 0x1fff),
        (7, 0, 0, 14),
        (4, 0, 0, 14),
        (22, 18, 16, 80),
        (4, 0, 0, 16),
        (22, 18, 19, 80),
        (27, 0, 0, 262144),
        (27, 0, 0, 0),
    ];
    let mut code = Vec::new();
    for (pc, &(op, jt, jf, k)) in (0i64..).zip(&listing) {
        let rel = |t| {
            if (22..=26).contains(&op) {
                t - pc - 1
            } else {
                t
            }
        };
        code.extend([op, rel(jt), rel(jf), k]);
    }
    // Ethernet, IPv4 (header of 20 bytes), TCP from port 1234 to `port`, or UDP.
    let packet = |tcp: bool, port: u16| {
        let mut p = vec![0u8; 60];
        p[12..14].copy_from_slice(&[8, 0]);
        p[14] = 0x45;
        p[23] = if tcp { 6 } else { 17 };
        p[34..36].copy_from_slice(&1234u16.to_be_bytes());
        p[36..38].copy_from_slice(&port.to_be_bytes());
        p
    };
    let mut insts = Vec::new();
    for max in [32, 0] {
        let s = stitched(&code, max);
        for (tcp, port, want) in [(true, 80, 262144i64), (true, 81, 0), (false, 80, 0)] {
            let pkt = packet(tcp, port);
            let got = s.call(&mut [Arg::from(&pkt[..])]).expect("runs");
            assert_eq!(got, Some(Const::from(want)), "tcp {tcp}, port {port}");
        }
        let short = [8u8, 0, 0];
        let got = s.call(&mut [Arg::from(&short[..])]).expect("runs");
        assert_eq!(
            got,
            Some(Const::from(0i64)),
            "a packet too short is refused"
        );
        insts.push(s.stats().insts);
    }
    assert!(
        insts[1] <= insts[0] + 8,
        "{} instructions as values, {} in memory",
        insts[0],
        insts[1]
    );
}

/// A cut branch (its false side laid out first) whose false side is a chain of blocks
/// that only jump, one of which the true side jumps to after its own code: the chain's
/// blocks share one address, so the branch is not inverted (inverting it made the true
/// side's jump land on itself: the code ran forever).
#[test]
fn a_chain_of_jumps_after_a_cut_branch_keeps_its_jump() {
    common::watchdog();
    // jset #55270 (to ja, else to ld); ja 4 (to ret); ld [1] (a word); jset #1 (to add
    // #210, else to add #0); add #210; add #0; ret #1. The add of 0 makes no code: a block
    // that only jumps, as the ja's block and the last ones before the ret.
    let code: [i64; 28] = [
        25, 0, 1, 55270, 21, 0, 0, 4, 2, 0, 0, 1, 25, 0, 1, 1, 10, 0, 0, 210, 10, 0, 0, 0, 27, 0,
        0, 1,
    ];
    for max in [32, 0] {
        let s = stitched(&code, max);
        for (pkt, want) in [
            (&[0u8, 1, 2, 3, 4][..], 1i64),
            (&[0, 1, 2, 3, 5], 1),
            (&[0, 1, 2, 3], 0),
        ] {
            common::progress(format!(
                "a chain of jumps after a cut branch, packet {pkt:?}"
            ));
            let got = s.call(&mut [Arg::from(pkt)]).expect("runs");
            assert_eq!(got, Some(Const::from(want)), "{pkt:?}");
        }
    }
}

//! Generated region sources of one shape and any size, for the compile-throughput
//! benchmark (`benches/compile.rs`) and the scaling tests (`tests/scaling.rs`).
//!
//! Every source is valid, and every function is named `f` unless said otherwise, with one
//! parameter `x: i64` and an `i64` result, so a caller can run it; the shapes stress the
//! different costs of the static compiler: long blocks, many merges, loops, many functions,
//! many variables, wide switches and long operator chains.

use std::fmt::Write;

/// A generator: the source of one shape at a size.
pub type Generator = fn(usize) -> String;

/// The shapes, by name, for tables and messages.
pub const SHAPES: [(&str, Generator); 11] = [
    ("straight-line", straight_line),
    ("if-chain", if_chain),
    ("loop-nest", loop_nest),
    ("many-functions", many_functions),
    ("untouched-variable", untouched_variable),
    ("many-variables", many_variables),
    ("switch", switch),
    ("gotos", gotos),
    ("nested-gotos", nested_gotos),
    ("flat-sum-left", flat_sum),
    ("flat-sum-right", flat_sum_right),
];

fn function(body: &str) -> String {
    format!("fn f(x: i64) -> i64 {{\n    var a = 0;\n{body}    return a;\n}}\n")
}

/// `n` statements `a = a + x * K;` in one block.
pub fn straight_line(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let _ = writeln!(body, "    a = a + x * {};", i % 100 + 1);
    }
    function(&body)
}

/// `n` if/else statements on dynamic conditions, one after the other (a merge each).
pub fn if_chain(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let _ = writeln!(
            body,
            "    if x > {i} {{ a = a + {}; }} else {{ a = a - 1; }}",
            i % 5 + 1
        );
    }
    function(&body)
}

/// `n` while loops, nested four deep in groups (a loop head and a back edge each).
pub fn loop_nest(n: usize) -> String {
    let mut body = String::new();
    for g in 0..n.div_ceil(4) {
        let _ = writeln!(body, "    var i{g} = 0;");
        let _ = writeln!(body, "    while i{g} < x {{");
        let _ = writeln!(body, "        var j{g} = 0;");
        let _ = writeln!(body, "        while j{g} < x {{");
        let _ = writeln!(body, "            var k{g} = 0;");
        let _ = writeln!(body, "            while k{g} < x {{");
        let _ = writeln!(body, "                var l{g} = 0;");
        let _ = writeln!(body, "                while l{g} < x {{");
        let _ = writeln!(body, "                    a = a + l{g};");
        let _ = writeln!(body, "                    l{g} = l{g} + 1;");
        let _ = writeln!(body, "                }}");
        let _ = writeln!(body, "                k{g} = k{g} + 1;");
        let _ = writeln!(body, "            }}");
        let _ = writeln!(body, "            j{g} = j{g} + 1;");
        let _ = writeln!(body, "        }}");
        let _ = writeln!(body, "        i{g} = i{g} + 1;");
        let _ = writeln!(body, "    }}");
    }
    function(&body)
}

/// `n` small functions `g0` .. `g{n-1}`, each with a branch and a loop; `g{i}` calls
/// `g{(i-1)/2}` (so calls nest `log2 n` deep), and `f` calls the last.
pub fn many_functions(n: usize) -> String {
    let mut src = String::new();
    for i in 0..n {
        let call = if i == 0 {
            "y".to_string()
        } else {
            format!("g{}(y)", (i - 1) / 2)
        };
        let _ = writeln!(
            src,
            "fn g{i}(x: i64) -> i64 {{\n    var y = x * {};\n    if y > 3 {{ y = y - 3; }}\n    \
             var i = 0;\n    while i < 2 {{ y = y + i; i = i + 1; }}\n    return {call};\n}}",
            i % 7 + 1
        );
    }
    let _ = writeln!(
        src,
        "fn f(x: i64) -> i64 {{ return g{}(x); }}",
        n.max(1) - 1
    );
    if n == 0 {
        return function("");
    }
    src
}

/// An if/else chain of `n` merges that never touch `b`, read only at the end: looking `b`
/// up crosses every merge.
pub fn untouched_variable(n: usize) -> String {
    let mut body = String::from("    var b = 1;\n");
    for i in 0..n {
        let _ = writeln!(
            body,
            "    if x > {i} {{ a = a + 1; }} else {{ a = a - 1; }}"
        );
    }
    body.push_str("    a = a + b;\n");
    function(&body)
}

/// `n` variables with distinct names.
pub fn many_variables(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let _ = writeln!(body, "    let v{i} = x + {i};\n    a = a + v{i};");
    }
    function(&body)
}

/// One switch with `n` cases.
pub fn switch(n: usize) -> String {
    let mut body = String::from("    switch x {\n");
    for i in 0..n {
        let _ = writeln!(body, "    case {i}: a = a + {};", i % 9 + 1);
    }
    body.push_str("    default: a = 1;\n    }\n");
    function(&body)
}

/// `n` forward `goto`s to `n` labels.
pub fn gotos(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let _ = writeln!(
            body,
            "    if x > {i} {{ goto l{i}; }}\n    a = a + 1;\n    l{i}: a = a * 2;"
        );
    }
    function(&body)
}

/// `n` loops nested `n` deep, written with backward `goto`s: `n` labelled statements, then
/// the conditional jumps back to them, innermost (last label) first.
pub fn nested_gotos(n: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let _ = writeln!(body, "    l{i}: a = a + 1;");
    }
    for i in (0..n).rev() {
        let _ = writeln!(body, "    if a < x + {} {{ goto l{i}; }}", 3 * i);
    }
    function(&body)
}

/// `a = x + 1 + 1 + ... ;` with `n` terms, leaning left as written.
pub fn flat_sum(n: usize) -> String {
    function(&format!("    a = x{};\n", " + 1".repeat(n.max(1) - 1)))
}

/// `a = 1 + 1 + ... + x;` with `n` terms, the dynamic operand last.
pub fn flat_sum_right(n: usize) -> String {
    function(&format!("    a = {}x;\n", "1 + ".repeat(n.max(1) - 1)))
}

/// What `f` of the shape `name`, generated with size `n`, returns for `x` (computed
/// directly, to check compiled code without an interpreter).
pub fn expected(name: &str, n: usize, x: i64) -> Option<i64> {
    let n64 = n as i64;
    Some(match name {
        "straight-line" => (0..n64).map(|i| x.wrapping_mul(i % 100 + 1)).sum(),
        "if-chain" => (0..n64).map(|i| if x > i { i % 5 + 1 } else { -1 }).sum(),
        "untouched-variable" => (0..n64).map(|i| if x > i { 1 } else { -1 }).sum::<i64>() + 1,
        "many-variables" => (0..n64).map(|i| x + i).sum(),
        "switch" => match x {
            x if (0..n64).contains(&x) => x % 9 + 1,
            _ => 1,
        },
        "flat-sum-left" | "flat-sum-right" => x + n64.max(1) - 1,
        _ => return None,
    })
}

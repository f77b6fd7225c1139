//! Reduced ordered binary decision diagrams: exact boolean functions over numbered
//! variables, for the reachability conditions of [`super::reach`].
//!
//! The classic construction (Bryant, "Graph-Based Algorithms for Boolean Function
//! Manipulation", 1986): a function is a DAG of nodes `(var, lo, hi)` ("if `var` then `hi`
//! else `lo`") with variables increasing along every path, no node whose two children are
//! equal, and no two nodes alike (a unique table). Each function then has exactly one node,
//! so equality, implication (`a ∧ ¬b = false`) and mutual exclusion (`a ∧ b = false`) are
//! comparisons of [`Bdd`] handles after one `apply`. `apply` recurses on the top variable
//! with a memo table, so it costs at most the product of its operands' sizes.
//!
//! The manager has a node budget: an operation that would grow it beyond the budget
//! returns `None`, so a pathological function cannot make the analysis unbounded.
//! Recursion depth is at most the number of variables, which callers bound.

use std::collections::HashMap;

/// A boolean function: a node of its [`Manager`]. Equal functions have equal handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bdd(u32);

impl Bdd {
    pub const FALSE: Bdd = Bdd(0);
    pub const TRUE: Bdd = Bdd(1);

    pub fn is_false(self) -> bool {
        self == Bdd::FALSE
    }

    pub fn is_true(self) -> bool {
        self == Bdd::TRUE
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    And,
    Or,
}

/// Owns the nodes of a family of BDDs.
#[derive(Clone, Debug)]
pub struct Manager {
    /// `(var, lo, hi)`; entries 0 and 1 are the constants (their fields unused).
    nodes: Vec<(u32, Bdd, Bdd)>,
    unique: HashMap<(u32, Bdd, Bdd), Bdd>,
    memo: HashMap<(Op, Bdd, Bdd), Bdd>,
    not_memo: HashMap<Bdd, Bdd>,
    budget: usize,
}

impl Manager {
    /// A manager that holds at most `budget` nodes.
    pub fn new(budget: usize) -> Manager {
        Manager {
            nodes: vec![
                (u32::MAX, Bdd::FALSE, Bdd::FALSE),
                (u32::MAX, Bdd::TRUE, Bdd::TRUE),
            ],
            unique: HashMap::new(),
            memo: HashMap::new(),
            not_memo: HashMap::new(),
            budget,
        }
    }

    /// Nodes made so far (the constants included).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn mk(&mut self, var: u32, lo: Bdd, hi: Bdd) -> Option<Bdd> {
        if lo == hi {
            return Some(lo);
        }
        if let Some(&b) = self.unique.get(&(var, lo, hi)) {
            return Some(b);
        }
        if self.nodes.len() >= self.budget {
            return None;
        }
        let b = Bdd(self.nodes.len() as u32);
        self.nodes.push((var, lo, hi));
        self.unique.insert((var, lo, hi), b);
        Some(b)
    }

    /// The variable `var` itself.
    pub fn var(&mut self, var: u32) -> Option<Bdd> {
        self.mk(var, Bdd::FALSE, Bdd::TRUE)
    }

    /// The top variable of a non-constant function.
    fn top(&self, b: Bdd) -> u32 {
        self.nodes[b.0 as usize].0
    }

    /// The cofactors of `b` for `var` (`b` with `var` false, with `var` true).
    fn cofactors(&self, b: Bdd, var: u32) -> (Bdd, Bdd) {
        let (v, lo, hi) = self.nodes[b.0 as usize];
        if b.0 > 1 && v == var {
            (lo, hi)
        } else {
            (b, b)
        }
    }

    pub fn not(&mut self, b: Bdd) -> Option<Bdd> {
        match b {
            Bdd::FALSE => return Some(Bdd::TRUE),
            Bdd::TRUE => return Some(Bdd::FALSE),
            _ => {}
        }
        if let Some(&r) = self.not_memo.get(&b) {
            return Some(r);
        }
        let (var, lo, hi) = self.nodes[b.0 as usize];
        let (lo, hi) = (self.not(lo)?, self.not(hi)?);
        let r = self.mk(var, lo, hi)?;
        self.not_memo.insert(b, r);
        Some(r)
    }

    pub fn and(&mut self, a: Bdd, b: Bdd) -> Option<Bdd> {
        self.apply(Op::And, a, b)
    }

    pub fn or(&mut self, a: Bdd, b: Bdd) -> Option<Bdd> {
        self.apply(Op::Or, a, b)
    }

    fn apply(&mut self, op: Op, a: Bdd, b: Bdd) -> Option<Bdd> {
        // Terminal cases.
        match (op, a, b) {
            (Op::And, Bdd::FALSE, _) | (Op::And, _, Bdd::FALSE) => return Some(Bdd::FALSE),
            (Op::And, Bdd::TRUE, x) | (Op::And, x, Bdd::TRUE) => return Some(x),
            (Op::Or, Bdd::TRUE, _) | (Op::Or, _, Bdd::TRUE) => return Some(Bdd::TRUE),
            (Op::Or, Bdd::FALSE, x) | (Op::Or, x, Bdd::FALSE) => return Some(x),
            _ if a == b => return Some(a),
            _ => {}
        }
        // Both operators commute: one memo entry per unordered pair.
        let key = (op, a.min(b), a.max(b));
        if let Some(&r) = self.memo.get(&key) {
            return Some(r);
        }
        let var = self.top(a).min(self.top(b));
        let (a0, a1) = self.cofactors(a, var);
        let (b0, b1) = self.cofactors(b, var);
        let lo = self.apply(op, a0, b0)?;
        let hi = self.apply(op, a1, b1)?;
        let r = self.mk(var, lo, hi)?;
        self.memo.insert(key, r);
        Some(r)
    }

    /// Whether `a` implies `b`.
    pub fn implies(&mut self, a: Bdd, b: Bdd) -> Option<bool> {
        let nb = self.not(b)?;
        Some(self.and(a, nb)?.is_false())
    }

    /// Whether `a` and `b` are mutually exclusive (never both true).
    pub fn exclusive(&mut self, a: Bdd, b: Bdd) -> Option<bool> {
        Some(self.and(a, b)?.is_false())
    }

    /// The value of `b` under `assignment` (variable `i` is `assignment(i)`).
    pub fn eval(&self, mut b: Bdd, assignment: impl Fn(u32) -> bool) -> bool {
        while b.0 > 1 {
            let (var, lo, hi) = self.nodes[b.0 as usize];
            b = if assignment(var) { hi } else { lo };
        }
        b.is_true()
    }

    /// `b` as a sum of products over the variable names `name(i)` (`¬` for negation, `∧`
    /// within a product, `∨` between products): one product per path to true, so it is
    /// exact but not minimal. For display.
    pub fn to_text(&self, b: Bdd, name: &dyn Fn(u32) -> String) -> String {
        match b {
            Bdd::FALSE => return "false".into(),
            Bdd::TRUE => return "true".into(),
            _ => {}
        }
        let mut products = Vec::new();
        let mut path = Vec::new();
        self.paths(b, &mut path, &mut products, name);
        products.join(" ∨ ")
    }

    fn paths(
        &self,
        b: Bdd,
        path: &mut Vec<String>,
        out: &mut Vec<String>,
        name: &dyn Fn(u32) -> String,
    ) {
        match b {
            Bdd::FALSE => {}
            Bdd::TRUE => out.push(if path.is_empty() {
                "true".into()
            } else {
                path.join(" ∧ ")
            }),
            _ => {
                let (var, lo, hi) = self.nodes[b.0 as usize];
                path.push(format!("¬{}", name(var)));
                self.paths(lo, path, out, name);
                path.pop();
                path.push(name(var));
                self.paths(hi, path, out, name);
                path.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{cases, Rng};

    /// A random formula over `n` variables, as a BDD and as a truth table.
    fn random_formula(m: &mut Manager, rng: &mut Rng, n: u32, depth: u32) -> (Bdd, Vec<bool>) {
        let rows = 1usize << n;
        if depth == 0 || rng.chance(25) {
            let v = rng.below(n as usize) as u32;
            let table = (0..rows).map(|r| r >> v & 1 == 1).collect();
            return (m.var(v).expect("budget"), table);
        }
        let (a, ta) = random_formula(m, rng, n, depth - 1);
        match rng.below(3) {
            0 => (m.not(a).expect("budget"), ta.iter().map(|x| !x).collect()),
            k => {
                let (b, tb) = random_formula(m, rng, n, depth - 1);
                if k == 1 {
                    (
                        m.and(a, b).expect("budget"),
                        ta.iter().zip(&tb).map(|(x, y)| *x && *y).collect(),
                    )
                } else {
                    (
                        m.or(a, b).expect("budget"),
                        ta.iter().zip(&tb).map(|(x, y)| *x || *y).collect(),
                    )
                }
            }
        }
    }

    /// Against truth tables: every BDD evaluates like its formula, and two BDDs are the
    /// same handle exactly when their truth tables are equal (canonical form), so
    /// implication and exclusion are exact.
    #[test]
    fn bdds_agree_with_truth_tables_and_are_canonical() {
        for seed in 0..cases(300) {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.below(6) as u32;
            let mut m = Manager::new(1 << 20);
            let fs: Vec<(Bdd, Vec<bool>)> = (0..8)
                .map(|_| random_formula(&mut m, &mut rng, n, 5))
                .collect();
            for (b, t) in &fs {
                for (row, &want) in t.iter().enumerate() {
                    assert_eq!(m.eval(*b, |v| row >> v & 1 == 1), want, "seed {seed}");
                }
            }
            for (a, ta) in &fs {
                for (b, tb) in &fs {
                    assert_eq!(a == b, ta == tb, "seed {seed}: canonical form");
                    let implies = ta.iter().zip(tb).all(|(x, y)| !x || *y);
                    assert_eq!(m.implies(*a, *b), Some(implies), "seed {seed}");
                    let exclusive = ta.iter().zip(tb).all(|(x, y)| !(*x && *y));
                    assert_eq!(m.exclusive(*a, *b), Some(exclusive), "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn the_budget_bounds_the_nodes() {
        // x0 ∧ x1 ∧ ... needs a node per variable, and each variable one of its own.
        let mut m = Manager::new(8);
        let mut acc = Bdd::TRUE;
        let mut ran_out = false;
        for v in 0..16 {
            match m.var(v).and_then(|x| m.and(acc, x)) {
                Some(a) => acc = a,
                None => {
                    ran_out = true;
                    break;
                }
            }
        }
        assert!(ran_out && m.node_count() <= 8);
    }

    #[test]
    fn text_lists_the_paths_to_true() {
        let mut m = Manager::new(100);
        let (a, b) = (m.var(0).unwrap(), m.var(1).unwrap());
        let nb = m.not(b).unwrap();
        let f = m.and(a, nb).unwrap();
        let name = |v: u32| format!("x{v}");
        assert_eq!(m.to_text(f, &name), "x0 ∧ ¬x1");
        assert_eq!(m.to_text(a, &name), "x0");
        let g = m.or(a, b).unwrap();
        assert_eq!(m.to_text(g, &name), "¬x0 ∧ x1 ∨ x0");
        assert_eq!(m.to_text(Bdd::TRUE, &name), "true");
    }
}

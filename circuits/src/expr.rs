//! Signals and affine expressions over them.
//!
//! A [`Signal`] is one named dimension of the chip's residual stream. Circuits never
//! materialise linear operations: an [`Expr`] (Σ cᵢ·sᵢ + c₀) is folded into the
//! projection weights of whatever consumes it. Values are in *nominal units*: the
//! number the circuit means (a bit is 0 or 1, a nibble 0..15); the compiler maps them
//! onto the layer math's scales.

use std::collections::BTreeMap;
use std::ops::{Add, Mul, Neg, Sub};

/// A residual-stream dimension owned by the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(pub u32);

/// The integer interval a quantity is known to lie in (nominal units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub lo: i64,
    pub hi: i64,
}

impl Range {
    pub const BIT: Range = Range { lo: 0, hi: 1 };
    pub const NIBBLE: Range = Range { lo: 0, hi: 15 };

    pub fn new(lo: i64, hi: i64) -> Self {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        Self { lo, hi }
    }

    pub fn constant(v: i64) -> Self {
        Self { lo: v, hi: v }
    }
}

/// An affine combination of signals with integer-friendly coefficients.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expr {
    /// Coefficient per signal (zero coefficients are dropped).
    pub terms: BTreeMap<Signal, f64>,
    pub constant: f64,
}

impl Expr {
    pub fn zero() -> Self {
        Self::default()
    }

    pub fn constant(c: f64) -> Self {
        Self {
            terms: BTreeMap::new(),
            constant: c,
        }
    }

    pub fn signal(s: Signal) -> Self {
        Self::term(s, 1.0)
    }

    pub fn term(s: Signal, c: f64) -> Self {
        let mut terms = BTreeMap::new();
        if c != 0.0 {
            terms.insert(s, c);
        }
        Self { terms, constant: 0.0 }
    }

    /// Σ cᵢ·sᵢ.
    pub fn sum(items: impl IntoIterator<Item = (Signal, f64)>) -> Self {
        items.into_iter().fold(Self::zero(), |e, (s, c)| e + Self::term(s, c))
    }

    pub fn is_constant(&self) -> bool {
        self.terms.is_empty()
    }

    /// The signals this expression reads.
    pub fn signals(&self) -> impl Iterator<Item = Signal> + '_ {
        self.terms.keys().copied()
    }

    /// Evaluates with signal values from `value`.
    pub fn eval(&self, value: impl Fn(Signal) -> f64) -> f64 {
        self.terms.iter().fold(self.constant, |acc, (s, c)| acc + c * value(*s))
    }

    /// Interval bounds given each signal's range.
    pub fn range(&self, range_of: impl Fn(Signal) -> Range) -> (f64, f64) {
        let (mut lo, mut hi) = (self.constant, self.constant);
        for (s, c) in &self.terms {
            let r = range_of(*s);
            let (a, b) = (c * r.lo as f64, c * r.hi as f64);
            lo += a.min(b);
            hi += a.max(b);
        }
        (lo, hi)
    }
}

impl From<Signal> for Expr {
    fn from(s: Signal) -> Self {
        Expr::signal(s)
    }
}

impl From<f64> for Expr {
    fn from(c: f64) -> Self {
        Expr::constant(c)
    }
}

impl Add for Expr {
    type Output = Expr;
    fn add(mut self, rhs: Expr) -> Expr {
        for (s, c) in rhs.terms {
            let e = self.terms.entry(s).or_insert(0.0);
            *e += c;
            if *e == 0.0 {
                self.terms.remove(&s);
            }
        }
        self.constant += rhs.constant;
        self
    }
}

/// Σ of expressions, added in order (a fold from zero).
impl std::iter::Sum for Expr {
    fn sum<I: Iterator<Item = Expr>>(iter: I) -> Self {
        iter.fold(Expr::zero(), |e, x| e + x)
    }
}

impl<'a> std::iter::Sum<&'a Expr> for Expr {
    fn sum<I: Iterator<Item = &'a Expr>>(iter: I) -> Self {
        iter.fold(Expr::zero(), |e, x| e + x.clone())
    }
}

impl Sub for Expr {
    type Output = Expr;
    fn sub(self, rhs: Expr) -> Expr {
        self + rhs * -1.0
    }
}

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        self * -1.0
    }
}

impl Mul<f64> for Expr {
    type Output = Expr;
    fn mul(mut self, k: f64) -> Expr {
        if k == 0.0 {
            return Expr::zero();
        }
        for c in self.terms.values_mut() {
            *c *= k;
        }
        self.constant *= k;
        self
    }
}

impl Add<f64> for Expr {
    type Output = Expr;
    fn add(mut self, k: f64) -> Expr {
        self.constant += k;
        self
    }
}

impl Sub<f64> for Expr {
    type Output = Expr;
    fn sub(mut self, k: f64) -> Expr {
        self.constant -= k;
        self
    }
}

impl Add<Signal> for Expr {
    type Output = Expr;
    fn add(self, s: Signal) -> Expr {
        self + Expr::signal(s)
    }
}

impl Sub<Signal> for Expr {
    type Output = Expr;
    fn sub(self, s: Signal) -> Expr {
        self - Expr::signal(s)
    }
}

/// An expression read through the GDN mixer's causal conv: its value `delay` tokens
/// ago (0 = the current token, at most 3 for Qwen3.5's 4-tap conv).
#[derive(Debug, Clone, PartialEq)]
pub struct Delayed {
    pub expr: Expr,
    pub delay: usize,
}

impl Delayed {
    pub fn now(expr: impl Into<Expr>) -> Self {
        Self {
            expr: expr.into(),
            delay: 0,
        }
    }

    pub fn ago(expr: impl Into<Expr>, delay: usize) -> Self {
        Self {
            expr: expr.into(),
            delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algebra_and_ranges() {
        let (a, b) = (Signal(0), Signal(1));
        let e = Expr::signal(a) * 2.0 - Expr::signal(b) + 3.0;
        assert_eq!(e.eval(|s| if s == a { 5.0 } else { 1.0 }), 12.0);
        let r = e.range(|_| Range::BIT);
        assert_eq!(r, (2.0, 5.0));
        let cancelled = e.clone() - Expr::signal(a) * 2.0;
        assert_eq!(cancelled.terms.len(), 1);
    }
}

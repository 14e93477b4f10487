//! Exact primitives built from SwiGLU neurons. Every one takes inputs whose nominal
//! values are integers and returns outputs whose nominal values are integers, with
//! every neuron's gate at least 1/2 nominal unit (128 pre-activation) away from zero,
//! so silu acts as an exact switch: 0 below, identity above.
//!
//! Linear work (negation, sums, constants, reading bits out of one-hot codes) is free:
//! primitives return [`Expr`]s and only spend neurons on the nonlinear part.

use crate::circuit::{BlockBuilder, Circuit};
use crate::contract::GATE_SCALE;
use crate::expr::{Expr, Range, Signal};

const K: f64 = GATE_SCALE;

/// A constant gate that sits in silu's identity region: silu(IDENTITY_GATE) = IDENTITY_GATE.
pub const IDENTITY_GATE: f64 = 128.0;

/// Adds neurons to `b` contributing `coefficient · [cond > 0] · value` to each output.
///
/// Contract: `cond` takes integer values within `cond_range`. One neuron when cond is
/// at most 1 (gate K·(cond − ½) is ±K/2 or lower); otherwise two, whose difference
/// silu(K(2·cond − ½)) − silu(K(2·cond − 3/2)) is exactly K for cond ≥ 1 and exactly
/// 0 for cond ≤ 0 (both gates at or below −K/2).
pub fn add_gated(b: &mut BlockBuilder, cond: &Expr, cond_range: (f64, f64), value: &Expr, outputs: &[(Signal, f64)]) {
    let (lo, hi) = cond_range;
    if hi <= 0.0 {
        return;
    }
    let scaled = |k: f64| outputs.iter().map(|(s, c)| (*s, c * k)).collect::<Vec<_>>();
    if lo >= 1.0 {
        b.neuron(
            Expr::constant(IDENTITY_GATE),
            value.clone(),
            &scaled(1.0 / IDENTITY_GATE),
        );
    } else if hi <= 1.0 {
        b.neuron((cond.clone() - 0.5) * K, value.clone(), &scaled(2.0 / K));
    } else {
        b.neuron((cond.clone() * 2.0 - 0.5) * K, value.clone(), &scaled(1.0 / K));
        b.neuron((cond.clone() * 2.0 - 1.5) * K, value.clone(), &scaled(-1.0 / K));
    }
}

/// Adds the AND of `terms` into the outputs: one neuron (see [`all`]; each term 0/1, or at
/// most 1 wherever the others are all 1).
pub fn add_and(b: &mut BlockBuilder, terms: &[Expr], outputs: &[(Signal, f64)]) {
    let lowest = 1.0 - terms.len() as f64;
    add_gated(b, &all(terms), (lowest, 1.0), &Expr::constant(1.0), outputs);
}

/// Passes `value` through unchanged into the outputs (an identity neuron): how a
/// signal is added into dimensions another signal already occupies.
pub fn add_identity(b: &mut BlockBuilder, value: &Expr, outputs: &[(Signal, f64)]) {
    let scaled: Vec<_> = outputs.iter().map(|(s, c)| (*s, c / IDENTITY_GATE)).collect();
    b.neuron(Expr::constant(IDENTITY_GATE), value.clone(), &scaled);
}

/// The AND of 0/1 terms as one affine expression: Σ terms − (n − 1) is 1 when every term
/// is 1 and at most 0 otherwise. Every saturating place of the layer math (an MLP gate, a
/// GDN key, value, beta or z) turns such an expression into an exact decision, so ANDs
/// feeding them cost no neurons.
pub fn all(terms: &[Expr]) -> Expr {
    let n = terms.len() as f64;
    terms.iter().sum::<Expr>() - (n - 1.0)
}

/// 1 − e.
pub fn not(e: &Expr) -> Expr {
    Expr::constant(1.0) - e.clone()
}

/// The one-hot code (entries 0..=max, entry 0 implied: 1 minus the others) of a level that
/// is an integer only to within a small error (an anchored memory read). Two neurons per
/// threshold `[level ≥ v]` (v = 1..=max), whose difference is exact for errors below 0.07
/// (the lower gate stays under −89, the upper above 17); pair v adds it into entry v and
/// takes it from entry v − 1. One signal is nonzero, where the thresholds themselves would
/// be `level` signals: a consumer of the level's bits meets one input entry a pass.
pub fn level_onehot(c: &mut Circuit, name: &str, level: &Expr, max: usize) -> Vec<Expr> {
    let mut b = c.block(name);
    let outs: Vec<Signal> = (1..=max).map(|v| b.output(format!("is{v}"), Range::BIT)).collect();
    for v in 1..=max {
        let cond = level.clone() - (v as f64 - 1.0);
        let mut adds = vec![(outs[v - 1], 1.0 / K)];
        if v >= 2 {
            adds.push((outs[v - 2], -1.0 / K));
        }
        let negated: Vec<_> = adds.iter().map(|(s, w)| (*s, -w)).collect();
        b.neuron((cond.clone() * 2.0 - 0.5) * K, Expr::constant(1.0), &adds);
        b.neuron((cond * 2.0 - 1.5) * K, Expr::constant(1.0), &negated);
    }
    c.add_block(b);
    let rest: Vec<Expr> = outs.iter().map(|s| Expr::signal(*s)).collect();
    let zero = rest.iter().fold(Expr::constant(1.0), |e, x| e - x.clone());
    std::iter::once(zero).chain(rest).collect()
}

/// `[cond > 0]` for an integer-valued `cond`: a new 0/1 signal.
pub fn step(c: &mut Circuit, name: &str, cond: Expr) -> Signal {
    let range = c.expr_range(&cond);
    let mut b = c.block(name);
    let out = b.output("out", Range::BIT);
    add_gated(&mut b, &cond, range, &Expr::constant(1.0), &[(out, 1.0)]);
    c.add_block(b);
    out
}

/// Many independent steps in one block: `[condᵢ > 0]`.
pub fn steps(c: &mut Circuit, name: &str, conds: &[(String, Expr)]) -> Vec<Signal> {
    let ranges: Vec<_> = conds.iter().map(|(_, e)| c.expr_range(e)).collect();
    let mut b = c.block(name);
    let outs: Vec<Signal> = conds.iter().map(|(n, _)| b.output(n.clone(), Range::BIT)).collect();
    for ((_, cond), (range, out)) in conds.iter().zip(ranges.iter().zip(&outs)) {
        add_gated(&mut b, cond, *range, &Expr::constant(1.0), &[(*out, 1.0)]);
    }
    c.add_block(b);
    outs
}

/// Bitwise AND, OR and XOR of equal-length 0/1 vectors, one neuron per bit (the AND);
/// OR = a + b − AND and XOR = a + b − 2·AND are linear in it.
#[derive(Debug, Clone)]
pub struct Bitwise {
    pub and: Vec<Expr>,
    pub or: Vec<Expr>,
    pub xor: Vec<Expr>,
}

pub fn bitwise(c: &mut Circuit, name: &str, a: &[Expr], b: &[Expr]) -> Bitwise {
    assert_eq!(a.len(), b.len());
    let conds: Vec<(String, Expr)> = a
        .iter()
        .zip(b)
        .enumerate()
        .map(|(i, (x, y))| (format!("and{i}"), x.clone() + y.clone() - 1.0))
        .collect();
    let ands = steps(c, name, &conds);
    let and: Vec<Expr> = ands.iter().map(|s| Expr::signal(*s)).collect();
    let or = a
        .iter()
        .zip(b)
        .zip(&and)
        .map(|((x, y), n)| x.clone() + y.clone() - n.clone())
        .collect();
    let xor = a
        .iter()
        .zip(b)
        .zip(&and)
        .map(|((x, y), n)| x.clone() + y.clone() - n.clone() * 2.0)
        .collect();
    Bitwise { and, or, xor }
}

/// `if sel { a } else { b }` for each pair, with `sel` 0/1: b + [sel]·(a − b), one
/// neuron per element.
pub fn select(c: &mut Circuit, name: &str, sel: &Expr, a: &[Expr], b: &[Expr], range: Range) -> Vec<Expr> {
    assert_eq!(a.len(), b.len());
    let sel_range = c.expr_range(sel);
    let mut block = c.block(name);
    let mut out = Vec::with_capacity(a.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let diff = Range::new(range.lo - range.hi, range.hi - range.lo);
        let s = block.output(format!("d{i}"), diff);
        add_gated(&mut block, sel, sel_range, &(x.clone() - y.clone()), &[(s, 1.0)]);
        out.push(y.clone() + Expr::signal(s));
    }
    c.add_block(block);
    out
}

/// One-hot decode of 0/1 `bits` (least significant first): signal v is 1 exactly
/// when the bits spell v. One neuron per value: the match count of v's pattern
/// reaches n only for v.
pub fn decode(c: &mut Circuit, name: &str, bits: &[Expr]) -> Vec<Signal> {
    let n = bits.len();
    let conds: Vec<(String, Expr)> = (0..1usize << n)
        .map(|v| {
            let matches = bits.iter().enumerate().fold(Expr::zero(), |e, (i, bit)| {
                if v >> i & 1 == 1 {
                    e + bit.clone()
                } else {
                    e + (Expr::constant(1.0) - bit.clone())
                }
            });
            (format!("is{v}"), matches - (n as f64 - 1.0))
        })
        .collect();
    steps(c, name, &conds)
}

/// The value of a one-hot vector (linear).
pub fn encode(onehot: &[Expr]) -> Expr {
    onehot
        .iter()
        .enumerate()
        .map(|(v, s)| s.clone() * v as f64)
        .sum::<Expr>()
}

/// Bit `i` of the value a one-hot vector selects (linear).
pub fn onehot_bit(onehot: &[Expr], i: usize) -> Expr {
    onehot
        .iter()
        .enumerate()
        .filter(|(v, _)| v >> i & 1 == 1)
        .map(|(_, s)| s.clone())
        .sum::<Expr>()
}

/// A 32-bit word as eight nibble values (least significant first), each an
/// integer-valued expression in 0..15.
#[derive(Debug, Clone)]
pub struct Word {
    pub nibbles: Vec<Expr>,
}

impl Word {
    pub const NIBBLES: usize = 8;

    /// The word spelled by 32 0/1 bit expressions (least significant first).
    pub fn from_bits(bits: &[Expr]) -> Self {
        assert_eq!(bits.len(), 32);
        let nibbles = bits
            .chunks(4)
            .map(|b| {
                b.iter()
                    .enumerate()
                    .map(|(i, x)| x.clone() * (1u32 << i) as f64)
                    .sum::<Expr>()
            })
            .collect();
        Self { nibbles }
    }

    /// The word whose nibbles are the values of eight one-hot vectors.
    pub fn from_onehot_nibbles(nibbles: &[Vec<Expr>]) -> Self {
        Self {
            nibbles: nibbles.iter().map(|n| encode(n)).collect(),
        }
    }

    /// Nibble-wise complement 15 − n (linear): the bitwise NOT of the word.
    pub fn not(&self) -> Self {
        Self {
            nibbles: self.nibbles.iter().map(|n| Expr::constant(15.0) - n.clone()).collect(),
        }
    }
}

/// The result of [`add`]: the sum and the carries out of each nibble.
#[derive(Debug, Clone)]
pub struct Sum {
    pub word: Word,
    /// carries[m] is the carry into nibble m (carries[0] is the carry in,
    /// carries[n] the carry out of the word).
    pub carries: Vec<Expr>,
    /// 1 when nibble m of a and b add to exactly 15 (it propagates a carry).
    pub propagate: Vec<Expr>,
}

/// a + b + carry_in modulo 16^n (n = the words' nibble count, 8 for 32 bits), with
/// the carry out: two MLP layers.
///
/// Layer 1: per nibble, s = a + b (0..30), generate G = [s ≥ 16] and Q = [s ≥ 15]
/// (propagate P = Q − G). Layer 2: the carry into nibble m is the sign of
/// Σ_{j<m} 2^{j+1}·(G_j + Q_j − 1) + (2·carry_in − 1): the most significant nibble that
/// does not merely propagate decides, and the sum is odd, so never 0. Sum nibbles
/// s_m + c_m − 16·c_{m+1} are linear in the carries.
pub fn add(c: &mut Circuit, name: &str, a: &Word, b: &Word, carry_in: &Expr) -> Sum {
    assert_eq!(a.nibbles.len(), b.nibbles.len());
    let n = a.nibbles.len();
    let s: Vec<Expr> = a
        .nibbles
        .iter()
        .zip(&b.nibbles)
        .map(|(x, y)| x.clone() + y.clone())
        .collect();
    let mut conds = Vec::new();
    for (m, sm) in s.iter().enumerate() {
        conds.push((format!("g{m}"), sm.clone() - 15.0));
        conds.push((format!("q{m}"), sm.clone() - 14.0));
    }
    let gq = steps(c, &format!("{name}.gp"), &conds);
    let (g, q): (Vec<Expr>, Vec<Expr>) = gq.chunks(2).map(|p| (Expr::signal(p[0]), Expr::signal(p[1]))).unzip();
    let propagate: Vec<Expr> = g.iter().zip(&q).map(|(g, q)| q.clone() - g.clone()).collect();
    let cin_term = carry_in.clone() * 2.0 - 1.0;
    let carry_conds: Vec<(String, Expr)> = (1..=n)
        .map(|m| {
            let e = (0..m).fold(cin_term.clone(), |e, j| {
                e + (g[j].clone() + q[j].clone() - 1.0) * (1u64 << (j + 1)) as f64
            });
            (format!("c{m}"), e)
        })
        .collect();
    let carry_signals = steps(c, &format!("{name}.carry"), &carry_conds);
    let mut carries = vec![carry_in.clone()];
    carries.extend(carry_signals.iter().map(|s| Expr::signal(*s)));
    let nibbles = (0..n)
        .map(|m| s[m].clone() + carries[m].clone() - carries[m + 1].clone() * 16.0)
        .collect();
    Sum {
        word: Word { nibbles },
        carries,
        propagate,
    }
}

/// a − b (a + NOT b + 1); the last carry is 1 exactly when a ≥ b unsigned.
pub fn sub(c: &mut Circuit, name: &str, a: &Word, b: &Word) -> Sum {
    add(c, name, a, &b.not(), &Expr::constant(1.0))
}

/// Comparisons of two words from one subtraction.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub equal: Expr,
    pub less_unsigned: Expr,
    pub less_signed: Expr,
    pub difference: Word,
}

/// Compares a and b. Signed order is unsigned order with the sign bits flipped, which
/// for the top nibble n is (n + 8) mod 16; `a_top`/`b_top` are one-hot vectors of the
/// top nibbles (16 entries) so that flip is linear. Three MLP layers: the subtraction's
/// two, then equality (all nibbles propagate) in the second.
pub fn compare(c: &mut Circuit, name: &str, a: &Word, b: &Word, a_top: &[Expr], b_top: &[Expr]) -> Comparison {
    let unsigned = sub(c, &format!("{name}.u"), a, b);
    let flip = |top: &[Expr]| {
        top.iter()
            .enumerate()
            .map(|(v, x)| x.clone() * ((v + 8) % 16) as f64)
            .sum::<Expr>()
    };
    let mut a_s = a.clone();
    let mut b_s = b.clone();
    let top = a.nibbles.len() - 1;
    a_s.nibbles[top] = flip(a_top);
    b_s.nibbles[top] = flip(b_top);
    let signed = sub(c, &format!("{name}.s"), &a_s, &b_s);
    let all_propagate = unsigned.propagate.iter().sum::<Expr>();
    let nibbles = unsigned.propagate.len() as f64;
    let equal = Expr::signal(step(c, &format!("{name}.eq"), all_propagate - (nibbles - 1.0)));
    Comparison {
        equal,
        less_unsigned: Expr::constant(1.0) - unsigned.carries.last().unwrap().clone(),
        less_signed: Expr::constant(1.0) - signed.carries.last().unwrap().clone(),
        difference: unsigned.word,
    }
}

/// Which way [`shift`] moves bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShiftKind {
    LeftLogical,
    RightLogical,
    RightArithmetic,
}

/// Shifts 32 0/1 `bits` by an amount given as two one-hot vectors: `low` (4 entries,
/// amount mod 4) and `high` (8 entries, amount div 4). Two MLP layers (a barrel shifter
/// of radix 4 then 16); each neuron ANDs one amount choice with one input bit.
pub fn shift(c: &mut Circuit, name: &str, bits: &[Expr], low: &[Expr], high: &[Expr], kind: ShiftKind) -> Vec<Expr> {
    let fill = if kind == ShiftKind::RightArithmetic {
        bits[31].clone()
    } else {
        Expr::zero()
    };
    shift_with_fill(c, name, bits, low, high, kind != ShiftKind::LeftLogical, &fill)
}

/// As [`shift`], left or `right`, with the vacated bits taking the 0/1 value `fill`
/// (a right shift with fill = sign bit AND "arithmetic" serves SRL and SRA at once).
pub fn shift_with_fill(
    c: &mut Circuit,
    name: &str,
    bits: &[Expr],
    low: &[Expr],
    high: &[Expr],
    right: bool,
    fill: &Expr,
) -> Vec<Expr> {
    assert_eq!(bits.len(), 32);
    assert_eq!((low.len(), high.len()), (4, 8));
    // Right shifts are left shifts of the reversed word.
    let reversed = right;
    let input: Vec<Expr> = if reversed {
        bits.iter().rev().cloned().collect()
    } else {
        bits.to_vec()
    };
    let fill = fill.clone();
    let stage = |c: &mut Circuit, stage_name: &str, input: &[Expr], choice: &[Expr], unit: usize| -> Vec<Expr> {
        let mut b = c.block(stage_name);
        let outs: Vec<Signal> = (0..32).map(|i| b.output(format!("b{i}"), Range::BIT)).collect();
        for (amount, sel) in choice.iter().enumerate() {
            for (i, out) in outs.iter().enumerate() {
                let from = i as i64 - (amount * unit) as i64;
                let source = if from >= 0 {
                    input[from as usize].clone()
                } else {
                    fill.clone()
                };
                if source.is_constant() && source.constant == 0.0 {
                    continue;
                }
                let cond = sel.clone() + source - 1.0;
                add_gated(&mut b, &cond, (-1.0, 1.0), &Expr::constant(1.0), &[(*out, 1.0)]);
            }
        }
        c.add_block(b);
        outs.iter().map(|s| Expr::signal(*s)).collect()
    };
    let first = stage(c, &format!("{name}.by1"), &input, low, 1);
    let second = stage(c, &format!("{name}.by4"), &first, high, 4);
    if reversed {
        second.into_iter().rev().collect()
    } else {
        second
    }
}

/// The result of [`add_bits`].
#[derive(Debug, Clone)]
pub struct BitSum {
    /// Sum bits, least significant first.
    pub bits: Vec<Expr>,
    /// carries[i] is the carry into bit i (carries[0] the carry in, carries[n] the carry out).
    pub carries: Vec<Expr>,
}

/// a + b + carry_in on n-bit words given as 0/1 bit expressions (least significant first,
/// n a multiple of 4), with every sum bit available: two MLP layers.
///
/// Layer 1: per nibble, generate G = [s ≥ 16] and Q = [s ≥ 15] of s = a + b (as in
/// [`add`]). Layer 2: the carry into bit i is the sign of a sum in which each position
/// below i weighs more than all positions below it together: the carry in (±1), each
/// whole nibble m below i (2^{m+1}·(G + Q − 1)), then each bit j of i's own nibble below i
/// (a_j + b_j − 1, at the next powers of two). The first position from the top that does
/// not merely propagate decides; the sum is odd, so never 0. Sum bits
/// a_i + b_i + c_i − 2·c_{i+1} are linear in the carries.
pub fn add_bits(c: &mut Circuit, name: &str, a: &[Expr], b: &[Expr], carry_in: &Expr) -> BitSum {
    add_bits_with(c, name, a, b, carry_in, false).0
}

/// What [`subtract_compare`] adds to the difference's bits.
#[derive(Debug, Clone)]
pub struct Comparison32 {
    pub difference: BitSum,
    /// a == b.
    pub equal: Expr,
    /// a < b as unsigned numbers.
    pub less_unsigned: Expr,
    /// a < b as two's complement numbers.
    pub less_signed: Expr,
}

/// a + b_inverted + carry_in on 32-bit words, where the caller passes `b_inverted` =
/// NOT b and carry_in = 1 for a subtraction (and anything else for an addition). Besides
/// the sum (two MLP layers, as [`add_bits`]) it returns, in the same layers, equality
/// (every nibble propagates) and both orders: unsigned from the carry out, signed from
/// the carry out of the same sum with both top bits flipped (which maps two's
/// complement order onto unsigned order). The comparisons mean something only when the
/// caller subtracted.
pub fn subtract_compare(c: &mut Circuit, name: &str, a: &[Expr], b_inverted: &[Expr], carry_in: &Expr) -> Comparison32 {
    assert_eq!(a.len(), 32);
    let (sum, extra) = add_bits_with(c, name, a, b_inverted, carry_in, true);
    let extra = extra.expect("requested");
    Comparison32 {
        less_unsigned: Expr::constant(1.0) - sum.carries[32].clone(),
        less_signed: Expr::constant(1.0) - extra.0,
        equal: extra.1,
        difference: sum,
    }
}

/// a < b (unsigned) for 0/1 words of a multiple of four bits, where the caller passes
/// `b_inverted` = NOT b: the carry out of a + NOT b + 1 alone, in the two MLP layers of
/// [`subtract_compare`] but with one carry neuron instead of a word's (for a comparison
/// whose difference nobody reads).
pub fn less_unsigned(c: &mut Circuit, name: &str, a: &[Expr], b_inverted: &[Expr]) -> Expr {
    assert_eq!(a.len(), b_inverted.len());
    assert!(a.len().is_multiple_of(4));
    let nibbles = a.len() / 4;
    let nibble_sum = |m: usize| {
        (0..4).fold(Expr::zero(), |e, k| {
            e + (a[4 * m + k].clone() + b_inverted[4 * m + k].clone()) * (1u32 << k) as f64
        })
    };
    let conds: Vec<(String, Expr)> = (0..nibbles)
        .flat_map(|m| {
            [
                (format!("g{m}"), nibble_sum(m) - 15.0),
                (format!("q{m}"), nibble_sum(m) - 14.0),
            ]
        })
        .collect();
    let gq = steps(c, &format!("{name}.gp"), &conds);
    // The most significant nibble that does not merely propagate decides the carry out;
    // the carry in (1) decides when every nibble propagates.
    let carry = gq.chunks(2).enumerate().fold(Expr::constant(1.0), |e, (m, p)| {
        e + (Expr::signal(p[0]) + Expr::signal(p[1]) - 1.0) * (1u64 << (m + 1)) as f64
    });
    let out = steps(c, &format!("{name}.carry"), &[("c".into(), carry)]);
    Expr::constant(1.0) - Expr::signal(out[0])
}

/// The adder behind [`add_bits`] and [`subtract_compare`]; with `compare`, also the signed
/// carry out and the all-propagate flag.
fn add_bits_with(
    c: &mut Circuit,
    name: &str,
    a: &[Expr],
    b: &[Expr],
    carry_in: &Expr,
    compare: bool,
) -> (BitSum, Option<(Expr, Expr)>) {
    assert_eq!(a.len(), b.len());
    assert!(a.len().is_multiple_of(4));
    let n = a.len();
    let nibble_sum = |m: usize| {
        (0..4).fold(Expr::zero(), |e, k| {
            e + (a[4 * m + k].clone() + b[4 * m + k].clone()) * (1u32 << k) as f64
        })
    };
    let mut conds = Vec::new();
    for m in 0..n / 4 {
        conds.push((format!("g{m}"), nibble_sum(m) - 15.0));
        conds.push((format!("q{m}"), nibble_sum(m) - 14.0));
    }
    let top = n / 4 - 1;
    if compare {
        // The top nibble's sum with both top bits flipped: each flip turns x into 1 − x.
        // The flips' 1s come with the carry in, which is 1 wherever the comparisons mean
        // something (a subtraction): as constants they would open both neurons on every
        // pass, each writing a signal that is not 0 where nothing is computed.
        let flipped =
            nibble_sum(top) + (carry_in.clone() * 2.0 - a[n - 1].clone() * 2.0 - b[n - 1].clone() * 2.0) * 8.0;
        conds.push(("g.flip".into(), flipped.clone() - 15.0));
        conds.push(("q.flip".into(), flipped - 14.0));
    }
    let gq = steps(c, &format!("{name}.gp"), &conds);
    let t_nibble: Vec<Expr> = gq[..n / 2]
        .chunks(2)
        .map(|p| Expr::signal(p[0]) + Expr::signal(p[1]) - 1.0)
        .collect();
    let cin_term = carry_in.clone() * 2.0 - 1.0;
    let mut carry_conds: Vec<(String, Expr)> = (1..=n)
        .map(|i| {
            let whole = i / 4;
            let mut e = cin_term.clone();
            for (m, t) in t_nibble.iter().enumerate().take(whole) {
                e = e + t.clone() * (1u64 << (m + 1)) as f64;
            }
            for j in 4 * whole..i {
                let weight = (1u64 << (whole + 1 + j - 4 * whole)) as f64;
                e = e + (a[j].clone() + b[j].clone() - 1.0) * weight;
            }
            (format!("c{i}"), e)
        })
        .collect();
    if compare {
        let t_flip = Expr::signal(gq[n / 2]) + Expr::signal(gq[n / 2 + 1]) - 1.0;
        let mut e = cin_term.clone();
        for (m, t) in t_nibble.iter().enumerate().take(top) {
            e = e + t.clone() * (1u64 << (m + 1)) as f64;
        }
        e = e + t_flip * (1u64 << (top + 1)) as f64;
        carry_conds.push(("c.signed".into(), e));
        // Every nibble propagates: its sum is exactly 15.
        let propagate = gq[..n / 2]
            .chunks(2)
            .map(|p| Expr::signal(p[1]) - Expr::signal(p[0]))
            .sum::<Expr>();
        carry_conds.push(("equal".into(), propagate - (n / 4 - 1) as f64));
    }
    let carry_signals = steps(c, &format!("{name}.carry"), &carry_conds);
    let mut carries = vec![carry_in.clone()];
    carries.extend(carry_signals[..n].iter().map(|s| Expr::signal(*s)));
    let bits = (0..n)
        .map(|i| a[i].clone() + b[i].clone() + carries[i].clone() - carries[i + 1].clone() * 2.0)
        .collect();
    let extra = compare.then(|| (Expr::signal(carry_signals[n]), Expr::signal(carry_signals[n + 1])));
    (BitSum { bits, carries }, extra)
}

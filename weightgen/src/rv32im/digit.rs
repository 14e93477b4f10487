//! The division digit: a radix-16 step of the millicode's long division in the weights.
//!
//! Three custom-0 instructions, decoded in millicode only (`decode`):
//! - `dquo rd, rs1, rs2, k` (funct3 0, funct7 k): the quotient digit of the partial
//!   remainder R = rs1 by X = rs2 · 16^k, q = #{j in 1..15 : j·X ≤ R} (0 where X does not
//!   fit 32 bits);
//! - `dstep rd, rs1, rs2, k` (funct3 1): R − q·X, the next partial remainder;
//! - `dacc rd, rs1, rs2` (funct3 2): rs1 · 16 + (rs2 mod 16), the digit shifted into the
//!   quotient (the shifter by 4 and one more term of the value's low nibble; `alu`,
//!   `retire`).
//!
//! So a quotient digit of four bits costs three instructions where the loop over its bits
//! ran four rounds of five. The fifteen multiples are compared at once, each as the sum
//! R + NOT(j·X) + 2 over nine nibbles, whose carry out says R ≥ j·X and whose low eight
//! nibbles are R − j·X:
//! 1. (with the register read) X's one-hot nibbles shifted up by k, and R's nibbles, gated
//!    by the two classes, so on every other pass nothing after them moves;
//! 2. j·X is two rows read off X's one-hots, linearly: j·v mod 16 at each nibble and
//!    j·v div 16 at the next; each nibble's sum of R and the two complements (0..47; 0
//!    off the digit's passes) splits into a digit and a carry of 0..2;
//! 3. and 4. an adder of the digits and the carries ([`add`]);
//! 5. the digit (the multiples that fit) and the remainder of the largest that fits.

use inband_circuits::primitives::{add, add_and, add_gated, all, not, Word};
use inband_circuits::{Circuit, Expr, Range, Signal};

use super::decode::Classes;
use super::regs::RegValue;

/// Multiples compared (radix 16).
const MULTIPLES: usize = 15;
/// Nibbles of a multiple: j·X < 16^9.
const WIDE: usize = 9;

/// What the digit instructions write, valid on their passes.
pub struct Digit {
    /// dquo's digit (0..15).
    pub digit: Expr,
    /// dstep's remainder, as nibble values.
    pub remainder: Vec<Expr>,
}

pub fn build(c: &mut Circuit, k: &Classes, r: &RegValue, d: &RegValue) -> Digit {
    let comparing = k.dquo.clone() + k.dstep.clone();
    let (x, overflow, rn) = operands(c, k, &comparing, r, d);
    let multiples: Vec<(Expr, Vec<Expr>)> = (1..=MULTIPLES).map(|j| multiple(c, j, &x, &rn, &comparing)).collect();
    pick(c, k, &multiples, &Expr::signal(overflow), &rn)
}

/// X's one-hot nibbles (entries 1..15 of nibbles 0..7; rs2's shifted up by k, only on a
/// dquo or dstep pass), whether rs2 · 16^k overflows 32 bits, and R's nibbles (likewise
/// gated).
fn operands(
    c: &mut Circuit,
    k: &Classes,
    comparing: &Expr,
    r: &RegValue,
    d: &RegValue,
) -> (Vec<Vec<Signal>>, Signal, Vec<Signal>) {
    let one = Expr::constant(1.0);
    let mut blk = c.block("digit.operands");
    let x: Vec<Vec<Signal>> = (0..8)
        .map(|p| (1..16).map(|v| blk.output(format!("x{p}.{v}"), Range::BIT)).collect())
        .collect();
    for p in 0..8 {
        for shift in 0..=p {
            for v in 1..16 {
                add_and(
                    &mut blk,
                    &[k.digit_shift[shift].clone(), d.onehot[p - shift][v].clone()],
                    &[(x[p][v - 1], 1.0)],
                );
            }
        }
    }
    let overflow = blk.output("overflow", Range::BIT);
    for shift in 1..8 {
        // Nibbles 8 − shift .. 7 of rs2 that are not 0 (at most `shift`); with another
        // shift the condition is at most −1.
        let nonzero = (8 - shift..8).map(|p| not(&d.onehot[p][0])).sum::<Expr>();
        let reach = shift as f64 + 1.0;
        let cond = nonzero + (k.digit_shift[shift].clone() - 1.0) * reach;
        add_gated(&mut blk, &cond, (-reach, shift as f64), &one, &[(overflow, 1.0)]);
    }
    let rn: Vec<Signal> = (0..8).map(|i| blk.output(format!("r{i}"), Range::NIBBLE)).collect();
    for (i, n) in rn.iter().enumerate() {
        add_gated(&mut blk, comparing, (0.0, 1.0), &r.nibbles[i], &[(*n, 1.0)]);
    }
    c.add_block(blk);
    (x, overflow, rn)
}

/// R against j·X: whether R ≥ j·X (0/1) and the nibbles of R − j·X (meaningful where it is).
/// The sums' constants (the complements' 15s, the 2) come with `comparing`, so on every
/// other pass each sum is 0 and every signal after it too: a constant signal that is not
/// 0 would be written into the residual on every pass, and its columns read (measured on
/// the H200: 10–12 % fewer passes a second).
fn multiple(c: &mut Circuit, j: usize, x: &[Vec<Signal>], rn: &[Signal], comparing: &Expr) -> (Expr, Vec<Expr>) {
    // Nibble p's share of j·X: j·v mod 16 there and j·v div 16 at p + 1.
    let row = |p: usize, f: &dyn Fn(usize) -> usize| -> Expr {
        if p >= 8 {
            return Expr::zero();
        }
        (1..16).map(|v| Expr::signal(x[p][v - 1]) * f(j * v) as f64).sum()
    };
    // R + NOT(low row) + NOT(high row) + 2 = R − j·X + 2·16^9, nibble by nibble (0..47).
    let sums: Vec<Expr> = (0..WIDE)
        .map(|i| {
            let r_i = if i < 8 { Expr::signal(rn[i]) } else { Expr::zero() };
            let high = if i > 0 { row(i - 1, &|m| m / 16) } else { Expr::zero() };
            let constant = if i == 0 { 32.0 } else { 30.0 };
            r_i - row(i, &|m| m % 16) - high + comparing.clone() * constant
        })
        .collect();
    let one = Expr::constant(1.0);
    let mut blk = c.block(format!("digit.split{j}"));
    let carries: Vec<Signal> = (0..WIDE)
        .map(|i| blk.output(format!("c{i}"), Range::new(0, 2)))
        .collect();
    for (s, out) in sums.iter().zip(&carries) {
        for t in [16.0, 32.0] {
            add_gated(
                &mut blk,
                &(s.clone() - t + 1.0),
                (1.0 - t, 48.0 - t),
                &one,
                &[(*out, 1.0)],
            );
        }
    }
    c.add_block(blk);
    let digits: Vec<Expr> = (0..WIDE)
        .map(|i| sums[i].clone() - Expr::signal(carries[i]) * 16.0)
        .collect();
    let shifted: Vec<Expr> = (0..WIDE)
        .map(|i| {
            if i == 0 {
                Expr::zero()
            } else {
                Expr::signal(carries[i - 1])
            }
        })
        .collect();
    let total = add(
        c,
        &format!("digit.sub{j}"),
        &Word { nibbles: digits },
        &Word { nibbles: shifted },
        &Expr::zero(),
    );
    // The whole sum's multiples of 16^9 (the split's carry out of nibble 8 and the
    // adder's) are 2 exactly where R ≥ j·X (j·X < 16^9), 1 otherwise; 0 off the digit's
    // passes, where `fits` is then 0 too (so `not(fits)` in the pick's conditions is 1
    // there, not 2, and no gate of the pick opens at rest).
    let fits = Expr::signal(carries[WIDE - 1]) + total.carries[WIDE].clone() - comparing.clone();
    (fits, total.word.nibbles[..8].to_vec())
}

/// The digit (dquo) and the remainder of the largest multiple that fits (dstep; R itself
/// where none does or X overflows).
fn pick(c: &mut Circuit, k: &Classes, multiples: &[(Expr, Vec<Expr>)], overflow: &Expr, rn: &[Signal]) -> Digit {
    let mut blk = c.block("digit.pick");
    let digit = blk.output("q", Range::NIBBLE);
    let rem: Vec<Signal> = (0..8).map(|i| blk.output(format!("r{i}"), Range::NIBBLE)).collect();
    let fits_x = not(overflow);
    for (j, (fits, nibbles)) in multiples.iter().enumerate() {
        add_and(
            &mut blk,
            &[k.dquo.clone(), fits.clone(), fits_x.clone()],
            &[(digit, 1.0)],
        );
        let mut largest = vec![k.dstep.clone(), fits.clone(), fits_x.clone()];
        if let Some((next, _)) = multiples.get(j + 1) {
            largest.push(not(next));
        }
        let cond = all(&largest);
        for (n, out) in nibbles.iter().zip(&rem) {
            add_gated(&mut blk, &cond, (1.0 - largest.len() as f64, 1.0), n, &[(*out, 1.0)]);
        }
    }
    let first = &multiples[0].0;
    for cond in [
        all(&[k.dstep.clone(), not(first)]),
        all(&[k.dstep.clone(), first.clone(), overflow.clone()]),
    ] {
        for (n, out) in rn.iter().zip(&rem) {
            add_gated(&mut blk, &cond, (-2.0, 1.0), &Expr::signal(*n), &[(*out, 1.0)]);
        }
    }
    c.add_block(blk);
    Digit {
        digit: Expr::signal(digit),
        remainder: rem.iter().map(|s| Expr::signal(*s)).collect(),
    }
}

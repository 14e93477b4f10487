//! Execute: the adders, logic, shifts, comparisons, branches and the multiplier.
//!
//! - main adder: rs1 ± (rs2 or imm) for ADD/SUB/ADDI, SLT*/SLTI*, the branch comparisons
//!   and divisions (one subtraction gives equal, less-unsigned and less-signed), and
//!   beside it a comparator of rs1 >> 1 with rs2 (a division's quotient of 1);
//! - address adder: rs1 + imm for loads, stores and JALR;
//! - pc adder: pc + imm for AUIPC, JAL and branches;
//! - logic: one AND neuron per bit (OR and XOR are linear in it);
//! - shifter: a left and a right (logical or arithmetic) barrel shifter (millicode's
//!   `dacc` shifts left by 4);
//! - multiplier: 32×32 → 64 bits. Partial products bit(rs2)·nibble(rs1) sum into 16
//!   columns; thresholds split each column into three base-16 digits; one more threshold
//!   layer folds the three shifted rows into digits plus small carries; a final nibble
//!   adder. Signed operands are unsigned ones with two's complement corrections of the
//!   high word;
//! - the division digit (`digit`): millicode's radix-16 step.

use inband_circuits::primitives::{
    add, add_and, add_bits, add_gated, all, less_unsigned, not, shift_with_fill, subtract_compare, BitSum, Word,
};
use inband_circuits::{Circuit, Expr, Range};

use super::decode::{Classes, Decoded};
use super::front::Front;
use super::regs::RegValue;
use super::wires::{oh, pattern};

pub struct Executed {
    /// ADD/SUB/ADDI result bits.
    pub sum: Vec<Expr>,
    pub less_signed: Expr,
    pub less_unsigned: Expr,
    pub branch_taken: Expr,
    /// rs1 >> 1 < rs2 (unsigned): with rs2 ≤ rs1, a division's quotient is 1.
    pub half_below: Expr,
    /// rs1 + imm (loads, stores, jalr).
    pub address: Vec<Expr>,
    /// pc + imm.
    pub pc_imm: Vec<Expr>,
    pub and: Vec<Expr>,
    pub or: Vec<Expr>,
    pub xor: Vec<Expr>,
    pub shift_left: Vec<Expr>,
    pub shift_right: Vec<Expr>,
    /// The 64-bit product's nibble values (low word 0..7, high word 8..15).
    pub product: Vec<Expr>,
    /// The jump target's bits (jal/branch: pc + imm; jalr: rs1 + imm with bit 0 cleared).
    pub target: Vec<Expr>,
    /// The division digit's results (millicode's dquo and dstep).
    pub digit: super::digit::Digit,
}

fn gate_bits(c: &mut Circuit, name: &str, terms: &[(Expr, Vec<Expr>)]) -> Vec<Expr> {
    // Σ over (condition, bits) of condition·bit, one neuron per term.
    let n = terms[0].1.len();
    let mut b = c.block(name);
    let outs: Vec<_> = (0..n).map(|i| b.output(format!("b{i}"), Range::BIT)).collect();
    for (cond, bits) in terms {
        for (i, bit) in bits.iter().enumerate() {
            if bit.is_constant() && bit.constant == 0.0 {
                continue;
            }
            add_gated(&mut b, cond, (0.0, 1.0), bit, &[(outs[i], 1.0)]);
        }
    }
    c.add_block(b);
    oh(&outs)
}

pub fn build(c: &mut Circuit, f: &Front, d: &Decoded, a: &RegValue, b: &RegValue) -> Executed {
    let k: &Classes = &d.class;
    let imm = &d.imm;
    let sum_of = |xs: &[&Expr]| xs.iter().copied().sum::<Expr>();

    // Main adder operand: rs2 or imm, inverted for subtractions and comparisons.
    let reg_add = k.add.clone();
    // (A division compares its operands too: a quotient of 0 or 1 retires without millicode.)
    let reg_sub = sum_of(&[&k.sub, &k.slt, &k.sltu, &k.mdiv]) + k.branch.iter().sum::<Expr>();
    let imm_add = k.addi.clone();
    let imm_sub = k.slti.clone() + k.sltiu.clone();
    let inv = |bits: &[Expr]| bits.iter().map(not).collect::<Vec<_>>();
    let op2 = gate_bits(
        c,
        "alu.op2",
        &[
            (reg_add, b.bits.clone()),
            (reg_sub.clone(), inv(&b.bits)),
            (imm_add, imm.clone()),
            (imm_sub.clone(), inv(imm)),
        ],
    );
    let cmp = subtract_compare(c, "alu.add", &a.bits, &op2, &(reg_sub + imm_sub));
    let taken_terms = [
        (k.branch[0].clone(), cmp.equal.clone()),
        (k.branch[1].clone(), not(&cmp.equal)),
        (k.branch[2].clone(), cmp.less_signed.clone()),
        (k.branch[3].clone(), not(&cmp.less_signed)),
        (k.branch[4].clone(), cmp.less_unsigned.clone()),
        (k.branch[5].clone(), not(&cmp.less_unsigned)),
    ];
    let mut blk = c.block("branch.taken");
    let taken = blk.output("taken", Range::BIT);
    for (class, cond) in &taken_terms {
        add_gated(
            &mut blk,
            &all(&[class.clone(), cond.clone()]),
            (-1.0, 1.0),
            &Expr::constant(1.0),
            &[(taken, 1.0)],
        );
    }
    c.add_block(blk);

    // rs1 >> 1 against rs2, beside the main adder and from its operand (NOT rs2 on a
    // division's pass; only a division reads the result). Its sixteen threshold neurons
    // read the operands' bits on every pass: ~45 column entries, 1 % of a pass's.
    let mut halved = a.bits[1..].to_vec();
    halved.push(Expr::zero());
    let half_below = less_unsigned(c, "alu.half", &halved, &op2);

    let address = add_bits(c, "alu.address", &a.bits, imm, &Expr::zero());
    let pc_imm = add_bits(c, "alu.pc", &f.pc_bits, imm, &Expr::zero());

    // Logic: AND per bit against imm (OP-IMM) or rs2 (OP); the operand itself for OR/XOR.
    let is_op = sum_of(&[&k.and, &k.or, &k.xor]);
    let is_opimm = sum_of(&[&k.andi, &k.ori, &k.xori]);
    let mut blk = c.block("logic");
    let and_s: Vec<_> = (0..32).map(|i| blk.output(format!("and{i}"), Range::BIT)).collect();
    let op2_s: Vec<_> = (0..32).map(|i| blk.output(format!("op2.{i}"), Range::BIT)).collect();
    for i in 0..32 {
        let one = Expr::constant(1.0);
        let t1 = all(&[a.bits[i].clone(), imm[i].clone(), is_opimm.clone()]);
        let t2 = all(&[a.bits[i].clone(), b.bits[i].clone(), is_op.clone()]);
        add_gated(&mut blk, &t1, (-2.0, 1.0), &one, &[(and_s[i], 1.0)]);
        add_gated(&mut blk, &t2, (-2.0, 1.0), &one, &[(and_s[i], 1.0)]);
        add_gated(
            &mut blk,
            &all(&[b.bits[i].clone(), is_op.clone()]),
            (-1.0, 1.0),
            &one,
            &[(op2_s[i], 1.0)],
        );
    }
    c.add_block(blk);
    let logic_op2: Vec<Expr> = (0..32).map(|i| Expr::signal(op2_s[i]) + imm[i].clone()).collect();
    let and: Vec<Expr> = oh(&and_s);
    let or: Vec<Expr> = (0..32)
        .map(|i| a.bits[i].clone() + logic_op2[i].clone() - and[i].clone())
        .collect();
    let xor: Vec<Expr> = (0..32)
        .map(|i| a.bits[i].clone() + logic_op2[i].clone() - and[i].clone() * 2.0)
        .collect();

    // Shifts: the amount's one-hots from imm (shift-immediate) or rs2 (shift-register);
    // millicode's dacc shifts rs1 left by 4.
    let by_imm = sum_of(&[&k.slli, &k.srli, &k.srai]);
    let by_reg = sum_of(&[&k.sll, &k.srl, &k.sra]);
    let mut blk = c.block("shift.amount");
    let low: Vec<_> = (0..4).map(|v| blk.output(format!("lo{v}"), Range::BIT)).collect();
    let high: Vec<_> = (0..8).map(|v| blk.output(format!("hi{v}"), Range::BIT)).collect();
    let fill = blk.output("fill", Range::BIT);
    let one = Expr::constant(1.0);
    for (src, class) in [(imm, &by_imm), (&b.bits, &by_reg)] {
        for v in 0..4u64 {
            let mut t = pattern(src, 0, 2, v);
            t.push(class.clone());
            add_and(&mut blk, &t, &[(low[v as usize], 1.0)]);
        }
        for v in 0..8u64 {
            let mut t = pattern(src, 2, 3, v);
            t.push(class.clone());
            add_and(&mut blk, &t, &[(high[v as usize], 1.0)]);
        }
    }
    add_and(&mut blk, std::slice::from_ref(&k.dacc), &[(low[0], 1.0)]);
    add_and(&mut blk, std::slice::from_ref(&k.dacc), &[(high[1], 1.0)]);
    let arithmetic = k.sra.clone() + k.srai.clone();
    add_gated(
        &mut blk,
        &all(&[a.bits[31].clone(), arithmetic]),
        (-1.0, 1.0),
        &one,
        &[(fill, 1.0)],
    );
    c.add_block(blk);
    let (low, high) = (oh(&low), oh(&high));
    let shift_left = shift_with_fill(c, "shift.left", &a.bits, &low, &high, false, &Expr::zero());
    let shift_right = shift_with_fill(c, "shift.right", &a.bits, &low, &high, true, &Expr::signal(fill));

    let product = multiplier(c, k, a, b);
    let digit = super::digit::build(c, k, a, b);

    // Jump target: pc + imm for jal and branches, rs1 + imm (bit 0 cleared) for jalr.
    let relative = k.jal.clone() + k.branch.iter().sum::<Expr>();
    let mut jalr_bits = address.bits.clone();
    jalr_bits[0] = Expr::zero();
    let target = gate_bits(
        c,
        "target",
        &[(relative, pc_imm.bits.clone()), (k.jalr.clone(), jalr_bits)],
    );

    Executed {
        sum: cmp.difference.bits.clone(),
        less_signed: cmp.less_signed,
        less_unsigned: cmp.less_unsigned,
        branch_taken: Expr::signal(taken),
        half_below,
        address: address.bits,
        pc_imm: pc_imm.bits,
        and,
        or,
        xor,
        shift_left,
        shift_right,
        product,
        target,
        digit,
    }
}

/// The 64-bit product of rs1 and rs2 (signedness from the class), as 16 nibble values.
fn multiplier(c: &mut Circuit, k: &Classes, a: &RegValue, b: &RegValue) -> Vec<Expr> {
    const K: f64 = inband_circuits::contract::GATE_SCALE;
    let signed_a = k.mul[1].clone() + k.mul[2].clone(); // mulh, mulhsu
    let signed_b = k.mul[1].clone(); // mulh
    let any = k.mul.iter().sum::<Expr>();
    // Column sums (one signal per column; neurons add into them).
    let mut max = [0f64; 16];
    let mut blk = c.block("mul.pp");
    let mut column_terms: Vec<Vec<(Expr, Expr, f64)>> = vec![Vec::new(); 16];
    for j in 0..32 {
        for i in 0..8 {
            let col = i + j / 4;
            let weight = (1u64 << (j % 4)) as f64;
            // gated on the rs2 bit AND "a multiply runs" (so the columns are 0 otherwise)
            column_terms[col].push((all(&[b.bits[j].clone(), any.clone()]), a.nibbles[i].clone(), weight));
            max[col] += 15.0 * weight;
        }
    }
    // −2^32·X mod 2^64 = 2^32·(NOT X + 1): add NOT X to the high columns, and 1.
    for (cond, x) in [
        (all(&[signed_a, a.bits[31].clone()]), &b.nibbles),
        (all(&[signed_b, b.bits[31].clone()]), &a.nibbles),
    ] {
        for m in 0..8 {
            column_terms[8 + m].push((cond.clone(), Expr::constant(15.0) - x[m].clone(), 1.0));
            max[8 + m] += 15.0;
        }
        column_terms[8].push((cond, Expr::constant(1.0), 1.0));
        max[8] += 1.0;
    }
    let columns: Vec<_> = (0..16)
        .map(|col| blk.output(format!("col{col}"), Range::new(0, max[col] as i64)))
        .collect();
    for (col, terms) in column_terms.iter().enumerate() {
        for (cond, value, weight) in terms {
            add_gated(&mut blk, cond, (-1.0, 1.0), value, &[(columns[col], *weight)]);
        }
    }
    c.add_block(blk);

    // Each column S = 256u + 16v + r: q = floor(S/16) and u = floor(S/256) from thresholds.
    let mut r = Vec::new();
    let mut v = Vec::new();
    let mut u = Vec::new();
    for (col, s) in columns.iter().enumerate() {
        let top = (max[col] / 16.0).floor() as usize;
        let mut blk = c.block(format!("mul.split{col}"));
        let q = blk.output("q", Range::new(0, top as i64));
        let uu = blk.output("u", Range::new(0, (top / 16) as i64));
        for t in 1..=top {
            let cond = Expr::signal(*s) - (16 * t) as f64 + 1.0;
            let mut outs = vec![(q, 1.0 / K)];
            if t % 16 == 0 {
                outs.push((uu, 1.0 / K));
            }
            blk.neuron((cond.clone() * 2.0 - 0.5) * K, Expr::constant(1.0), &outs);
            let neg: Vec<_> = outs.iter().map(|(s, w)| (*s, -w)).collect();
            blk.neuron((cond * 2.0 - 1.5) * K, Expr::constant(1.0), &neg);
        }
        c.add_block(blk);
        r.push(Expr::signal(*s) - Expr::signal(q) * 16.0);
        v.push(Expr::signal(q) - Expr::signal(uu) * 16.0);
        u.push(Expr::signal(uu));
    }
    // Fold the three rows: s_c = r_c + v_{c-1} + u_{c-2} (≤ 15 + 15 + 7), then k_c = s_c div 16.
    let mut blk = c.block("mul.fold");
    let mut digits = Vec::new();
    let mut carries = vec![Expr::zero()];
    for col in 0..16 {
        let mut s = r[col].clone();
        if col >= 1 {
            s = s + v[col - 1].clone();
        }
        if col >= 2 {
            s = s + u[col - 2].clone();
        }
        let kk = blk.output(format!("k{col}"), Range::new(0, 2));
        for t in [16.0, 32.0] {
            let cond = s.clone() - t + 1.0;
            add_gated(&mut blk, &cond, (-60.0, 60.0), &Expr::constant(1.0), &[(kk, 1.0)]);
        }
        digits.push(s - Expr::signal(kk) * 16.0);
        carries.push(Expr::signal(kk));
    }
    c.add_block(blk);
    carries.truncate(16);
    let sum = add(
        c,
        "mul.add",
        &Word { nibbles: digits },
        &Word { nibbles: carries },
        &Expr::zero(),
    );
    let _: Option<BitSum> = None;
    sum.word.nibbles
}

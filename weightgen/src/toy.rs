//! A toy machine compiled end to end: an 8-bit accumulator CPU with a 16-instruction
//! program ROM and a 16-byte RAM, both in GDN state. It exercises every piece the
//! RV32IM chip uses (boot writes, a ROM fetch, a RAM write and read at computed
//! addresses, adders with carries, bitwise logic, jumps, the token round trip) and has
//! a plain Rust model to compare with after every step.
//!
//! Instructions are (op, arg) nibble pairs:
//!
//! | op | name | effect |
//! |---|---|---|
//! | 0 | LDI n | acc = n |
//! | 1 | LDH n | acc = n << 4 \| (acc & 15) |
//! | 2 | LD a | acc = ram\[a\] |
//! | 3 | ST a | ram\[a\] = acc |
//! | 4 | ADD a | acc += ram\[a\] |
//! | 5 | SUB a | acc -= ram\[a\] |
//! | 6 | XOR a | acc ^= ram\[a\] |
//! | 7 | AND a | acc &= ram\[a\] |
//! | 8 | JNZ t | if acc != 0 { pc = t } |
//! | 9 | JMP t | pc = t |
//! | 10 | SHL | acc <<= 1 |
//! | 11 | SHR | acc >>= 1 |
//! | 12 | ADDI n | acc += n |
//! | 13..15 | NOP | |
//!
//! All arithmetic is modulo 256, pc modulo 16.

use inband_circuits::primitives::{add, bitwise, onehot_bit, step, sub, Word};
use inband_circuits::{
    Address, ChipToken, Circuit, Delayed, Expr, FieldDef, KindDef, Output, Range, Target, TokenSpec, Write,
};

use crate::emit::standard_outputs;

/// Token kind: the machine state after a step (pc, acc high nibble, acc low nibble).
pub const STEP: usize = 0;
/// Token kind: write one ROM word (address, op, arg).
pub const BOOT: usize = 1;

/// The plain Rust model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acc8 {
    pub pc: u8,
    pub acc: u8,
    pub ram: [u8; 16],
    /// (op, arg) per ROM slot.
    pub rom: [(u8, u8); 16],
}

impl Acc8 {
    pub fn new(rom: [(u8, u8); 16]) -> Self {
        Self {
            pc: 0,
            acc: 0,
            ram: [0; 16],
            rom,
        }
    }

    pub fn step(&mut self) {
        let (op, arg) = self.rom[self.pc as usize];
        let m = self.ram[arg as usize];
        let mut next = (self.pc + 1) & 15;
        match op {
            0 => self.acc = arg,
            1 => self.acc = (arg << 4) | (self.acc & 15),
            2 => self.acc = m,
            3 => self.ram[arg as usize] = self.acc,
            4 => self.acc = self.acc.wrapping_add(m),
            5 => self.acc = self.acc.wrapping_sub(m),
            6 => self.acc ^= m,
            7 => self.acc &= m,
            8 if self.acc != 0 => next = arg,
            9 => next = arg,
            10 => self.acc <<= 1,
            11 => self.acc >>= 1,
            12 => self.acc = self.acc.wrapping_add(arg),
            _ => {}
        }
        self.pc = next;
    }

    /// The STEP token describing the current state.
    pub fn state_token(&self) -> ChipToken {
        ChipToken {
            kind: STEP,
            values: vec![self.pc as usize, (self.acc >> 4) as usize, (self.acc & 15) as usize],
        }
    }

    /// The BOOT tokens that load the ROM.
    pub fn boot_tokens(&self) -> Vec<ChipToken> {
        self.rom
            .iter()
            .enumerate()
            .map(|(a, (op, arg))| ChipToken {
                kind: BOOT,
                values: vec![a, *op as usize, *arg as usize],
            })
            .collect()
    }
}

/// The chip vocabulary: three nibble fields, two kinds.
pub fn tokens() -> TokenSpec {
    let nibble = |n: &str| FieldDef {
        name: n.into(),
        size: 16,
    };
    TokenSpec {
        fields: vec![nibble("f0"), nibble("f1"), nibble("f2")],
        kinds: vec![
            KindDef {
                name: "step".into(),
                fields: vec![0, 1, 2],
            },
            KindDef {
                name: "boot".into(),
                fields: vec![0, 1, 2],
            },
        ],
    }
}

fn onehot_exprs(signals: &[inband_circuits::Signal]) -> Vec<Expr> {
    signals.iter().map(|s| Expr::signal(*s)).collect()
}

/// An address selecting row v (of a one-head memory) when one-hot element v is 1.
fn rows_from_onehot(onehot: &[Expr], rows: usize) -> Address {
    Address::Rows(
        (0..rows)
            .map(|r| Delayed::now(onehot.get(r).cloned().unwrap_or_else(Expr::zero)))
            .collect(),
    )
}

/// Row entries holding two one-hot nibbles: `first` in entries 0..16, `second` in 16..32.
fn two_nibble_entries(first: &[Expr], second: &[Expr]) -> Vec<(usize, Delayed)> {
    let first = first.iter().enumerate().map(|(v, x)| (v, Delayed::now(x.clone())));
    let second = second
        .iter()
        .enumerate()
        .map(|(v, x)| (16 + v, Delayed::now(x.clone())));
    first.chain(second).collect()
}

/// The Acc8 circuit for a target.
pub fn circuit(target: Target) -> Circuit {
    let mut c = Circuit::new("acc8", target, tokens());
    let rows = target.rows_per_head;
    let is_step = Expr::signal(c.kind(STEP));
    let is_boot = Expr::signal(c.kind(BOOT));
    let f: Vec<Vec<Expr>> = (0..3).map(|i| onehot_exprs(c.field(i))).collect();

    // ROM: row = address, entries 0..16 op one-hot, 16..32 arg one-hot.
    let rom = c.memory(
        "rom",
        1,
        2,
        "one instruction: op one-hot (entries 0-15), arg one-hot (16-31)",
    );
    let rom_entries = two_nibble_entries(&f[1], &f[2]);
    c.write(Write {
        memory: rom,
        address: rows_from_onehot(&f[0], rows),
        entries: rom_entries,
        enable: is_boot,
    });
    let outputs = (0..32)
        .map(|e| {
            (
                if e < 16 {
                    format!("op{e}")
                } else {
                    format!("arg{}", e - 16)
                },
                Range::BIT,
                vec![(e, 1.0)],
            )
        })
        .collect();
    let fetched = c.read("fetch", rom, rows_from_onehot(&f[0], rows), None, outputs);
    let op: Vec<Expr> = onehot_exprs(&fetched[..16]);
    let arg: Vec<Expr> = onehot_exprs(&fetched[16..]);

    // RAM: row = arg, entries 0..16 high nibble one-hot, 16..32 low nibble one-hot.
    let store = step(&mut c, "store_enable", is_step.clone() + op[3].clone() - 1.0);
    let ram = c.memory(
        "ram",
        1,
        2,
        "one byte: high nibble one-hot (0-15), low nibble one-hot (16-31)",
    );
    let ram_entries = two_nibble_entries(&f[1], &f[2]);
    c.write(Write {
        memory: ram,
        address: rows_from_onehot(&arg, rows),
        entries: ram_entries,
        enable: store.into(),
    });
    let outputs = (0..32)
        .map(|e| {
            (
                if e < 16 {
                    format!("hi{e}")
                } else {
                    format!("lo{}", e - 16)
                },
                Range::BIT,
                vec![(e, 1.0)],
            )
        })
        .collect();
    let loaded = c.read("load", ram, rows_from_onehot(&arg, rows), None, outputs);
    let (m_hi, m_lo) = (onehot_exprs(&loaded[..16]), onehot_exprs(&loaded[16..]));

    // Operands as nibble values and bits (all linear in the one-hots).
    let value = |oh: &[Expr]| oh.iter().enumerate().map(|(v, x)| x.clone() * v as f64).sum::<Expr>();
    let byte = |lo: &[Expr], hi: &[Expr]| Word {
        nibbles: vec![value(lo), value(hi)],
    };
    let bits = |lo: &[Expr], hi: &[Expr]| -> Vec<Expr> {
        (0..4)
            .map(|i| onehot_bit(lo, i))
            .chain((0..4).map(|i| onehot_bit(hi, i)))
            .collect()
    };
    let acc = byte(&f[2], &f[1]);
    let mem = byte(&m_lo, &m_hi);
    let imm = Word {
        nibbles: vec![value(&arg), Expr::zero()],
    };
    let sum = add(&mut c, "add", &acc, &mem, &Expr::zero());
    let difference = sub(&mut c, "sub", &acc, &mem);
    let plus_imm = add(&mut c, "addi", &acc, &imm, &Expr::zero());
    let logic = bitwise(&mut c, "logic", &bits(&f[2], &f[1]), &bits(&m_lo, &m_hi));
    let acc_bits = bits(&f[2], &f[1]);
    let from_bits = |b: &[Expr]| -> (Expr, Expr) {
        let nib = |k: usize| (0..4).map(|i| b[4 * k + i].clone() * (1u32 << i) as f64).sum::<Expr>();
        (nib(0), nib(1))
    };
    let mut shl = vec![Expr::zero()];
    shl.extend(acc_bits[..7].iter().cloned());
    let mut shr: Vec<Expr> = acc_bits[1..].to_vec();
    shr.push(Expr::zero());

    // Result per op as (low nibble, high nibble).
    let same = (acc.nibbles[0].clone(), acc.nibbles[1].clone());
    let results: Vec<(Expr, Expr)> = vec![
        (value(&arg), Expr::zero()),
        (acc.nibbles[0].clone(), value(&arg)),
        (mem.nibbles[0].clone(), mem.nibbles[1].clone()),
        same.clone(),
        (sum.word.nibbles[0].clone(), sum.word.nibbles[1].clone()),
        (difference.word.nibbles[0].clone(), difference.word.nibbles[1].clone()),
        from_bits(&logic.xor),
        from_bits(&logic.and),
        same.clone(),
        same.clone(),
        from_bits(&shl),
        from_bits(&shr),
        (plus_imm.word.nibbles[0].clone(), plus_imm.word.nibbles[1].clone()),
        same.clone(),
        same.clone(),
        same,
    ];
    // Jumps: JNZ when acc != 0 (2·[JNZ] + [hi != 0] + [lo != 0] ≥ 3), JMP always.
    let nonzero = (Expr::constant(1.0) - f[1][0].clone()) + (Expr::constant(1.0) - f[2][0].clone());
    let jnz_taken = step(&mut c, "jnz_taken", op[8].clone() * 2.0 + nonzero - 2.0);
    let taken = Expr::signal(jnz_taken) + op[9].clone();
    let next_pc = f[0]
        .iter()
        .enumerate()
        .map(|(v, x)| x.clone() * ((v + 1) % 16) as f64)
        .sum::<Expr>();

    standard_outputs(&mut c, STEP, &[]);
    let weight = inband_circuits::contract::OUTPUT_UNIT;
    c.output(Output::FieldChoice {
        field: 0,
        choices: vec![(taken.clone(), value(&arg)), (Expr::constant(1.0) - taken, next_pc)],
        weight,
    });
    for (field, nibble) in [(2usize, 0usize), (1, 1)] {
        let choices = results
            .iter()
            .enumerate()
            .map(|(o, r)| (op[o].clone(), if nibble == 0 { r.0.clone() } else { r.1.clone() }))
            .collect();
        c.output(Output::FieldChoice { field, choices, weight });
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_model_runs_a_counter() {
        // ram[1] = 1; acc counts down from 5 by SUB 1, storing each value to ram[0].
        let mut rom = [(13u8, 0u8); 16];
        rom[..7].copy_from_slice(&[(0, 1), (3, 1), (0, 5), (3, 0), (5, 1), (8, 3), (9, 6)]);
        let mut m = Acc8::new(rom);
        for _ in 0..40 {
            m.step();
        }
        assert_eq!((m.pc, m.acc, m.ram[0], m.ram[1]), (6, 0, 1, 1));
    }
}

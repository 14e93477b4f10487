//! The register file: 64 rows (32 architectural registers, 32 millicode shadows) in
//! three memories per read port, so that one token can write a whole register.
//!
//! A pass writes the register the *previous* pass decoded (its rd digits, through the
//! conv's one-token delay) with the value the consumed token carries:
//! - `low`: nibbles 0..2 (one-hot), the value's class and, for links, nibble 3:
//!   `s` tokens (the 12-bit value sign-extended: class spos/sneg), `l` tokens (class from
//!   the `m` before: upper bits zero, ones, or from an `h`), `lk` tokens (pc + 4).
//! - `up34`: nibbles 3 and 4 from the `m` before an `l` (zero row otherwise).
//! - `up567`: nibbles 5..7 from the `h` two tokens before an `l` (zero row otherwise).
//!
//! A read sums the three: nibbles a class implies (sign fill, link's upper nibbles) are
//! linear in the class entries. A row never written reads as zero, which is x0's value.

use inband_circuits::{Address, Circuit, Delayed, Expr, Range, ReadOutput, Write};

use super::decode::RegDigits;
use super::front::Front;
use super::tokens::{field, kind, up};
use super::wires::{oh, with_implied_zero, Tok};

/// Entry layout of the `low` memory.
pub use inband_chip::rv32im::low;

/// A register's value as read: bits, nibble values and (store-data port only) one-hot nibbles.
#[derive(Clone)]
pub struct RegValue {
    pub onehot: Vec<Vec<Expr>>,
    pub nibbles: Vec<Expr>,
    pub bits: Vec<Expr>,
}

impl RegValue {
    /// A value from its 32 bit signals; `onehot` holds the one-hot nibbles only for the
    /// port whose consumers need them (store data), and is empty otherwise.
    fn from_bits(bits: Vec<Expr>, onehot: Vec<Vec<Expr>>) -> Self {
        Self {
            nibbles: super::wires::nibble_values(&bits),
            bits,
            onehot,
        }
    }
}

/// The memories of one read port (for the host's state readout).
#[derive(Debug, Clone, Copy)]
pub struct PortMemories {
    pub low: usize,
    pub up34: usize,
    pub up567: usize,
}

fn factored(d: &RegDigits, delay: usize) -> Address {
    let at = |v: &[Expr]| v.iter().map(|x| Delayed::ago(x.clone(), delay)).collect::<Vec<_>>();
    Address::Factored {
        heads: vec![Delayed::ago(Expr::constant(1.0), delay)],
        rows: vec![at(&d.bank), at(&d.high), at(&d.low)],
    }
}

/// Builds the file and reads `rs1` and `rs2`; returns their values and port A's memories.
pub fn build(
    c: &mut Circuit,
    t: &Tok,
    f: &Front,
    rd: &RegDigits,
    rs1: &RegDigits,
    rs2: &RegDigits,
) -> (RegValue, RegValue, PortMemories) {
    let (s, l, lk, m, h) = (
        t.kind(kind::S),
        t.kind(kind::L),
        t.kind(kind::LK),
        t.kind(kind::M),
        t.kind(kind::H),
    );
    let now = |e: Expr| Delayed::now(e);
    let n2 = t.field(field::N[2]);
    let neg = (8..16).fold(Expr::zero(), |e, v| e + n2[v].clone());
    let pos = (0..8).fold(Expr::zero(), |e, v| e + n2[v].clone());
    let mut low_entries = Vec::new();
    for j in 0..3 {
        for v in 0..16 {
            let link = f.link[j][v].clone();
            low_entries.push((low::NIBBLES + 16 * j + v, now(t.field(field::N[j])[v].clone() + link)));
        }
    }
    low_entries.extend([
        (low::SPOS, now(s.clone() + pos - 1.0)),
        (low::SNEG, now(s.clone() + neg - 1.0)),
        (low::LZERO, Delayed::ago(t.field(field::MUP)[up::ZERO].clone(), 1)),
        (low::LONES, Delayed::ago(t.field(field::MUP)[up::ONES].clone(), 1)),
        (low::LH, Delayed::ago(t.field(field::MUP)[up::FROM_H].clone(), 1)),
        (low::LINK, now(lk.clone())),
    ]);
    for v in 0..16 {
        low_entries.push((low::LINK_N3 + v, now(f.link[3][v].clone())));
    }
    for p in 70..73 {
        low_entries.push((p, now(Expr::constant(1.0))));
    }
    low_entries.push((73, now(s.clone() + l.clone())));
    let mut up34_entries = Vec::new();
    for (off, fl) in [(0, field::M3), (16, field::M4)] {
        for v in 0..16 {
            up34_entries.push((off + v, Delayed::ago(t.field(fl)[v].clone(), 1)));
        }
    }
    for p in 32..38 {
        up34_entries.push((p, Delayed::ago(m.clone(), 1)));
    }
    let mut up567_entries = Vec::new();
    for (j, fl) in field::H.into_iter().enumerate() {
        for v in 0..16 {
            up567_entries.push((16 * j + v, Delayed::ago(t.field(fl)[v].clone(), 2)));
        }
    }
    for p in 48..53 {
        up567_entries.push((p, Delayed::ago(h.clone(), 2)));
    }
    let enable = s.clone() + l + lk;

    // A port reads the three memories; its outputs are the value's bits (each a sum of
    // one-hot entries, so consumers see one signal per bit) and, where store data needs
    // them, the one-hot nibbles.
    let mut port = |name: &str, digits: &RegDigits, with_onehot: bool| -> (RegValue, PortMemories) {
        let bit_entries = |base: usize, i: usize| -> Vec<(usize, f64)> {
            (1..16).filter(|v| v >> i & 1 == 1).map(|v| (base + v, 1.0)).collect()
        };
        let mut memories = Vec::new();
        let mut reads: Vec<std::collections::HashMap<String, Expr>> = Vec::new();
        for (part, entries, description, nibbles) in [
            (
                "low",
                &low_entries,
                "register nibbles 0-2 one-hot (0-47), class (48-53), link nibble 3 (54-69), 4 pads",
                3usize,
            ),
            (
                "up34",
                &up34_entries,
                "register nibbles 3-4 one-hot (0-31), 6 pads; zero unless the value was long",
                2,
            ),
            (
                "up567",
                &up567_entries,
                "register nibbles 5-7 one-hot (0-47), 5 pads; zero unless the value needed an h token",
                3,
            ),
        ] {
            let mem = c.memory(format!("regs.{name}.{part}"), 1, 8, description);
            c.write(Write {
                memory: mem,
                address: factored(rd, 1),
                entries: entries.clone(),
                enable: enable.clone(),
            });
            let mut outs: Vec<ReadOutput> = Vec::new();
            for j in 0..nibbles {
                for i in 0..4 {
                    outs.push((format!("n{j}.b{i}"), Range::BIT, bit_entries(16 * j, i)));
                }
                if with_onehot {
                    for v in 1..16 {
                        outs.push((format!("n{j}.{v}"), Range::BIT, vec![(16 * j + v, 1.0)]));
                    }
                }
            }
            if part == "low" {
                for e in low::SPOS..=low::LINK {
                    outs.push((format!("e{e}"), Range::BIT, vec![(e, 1.0)]));
                }
                for i in 0..4 {
                    outs.push((format!("link3.b{i}"), Range::BIT, bit_entries(low::LINK_N3, i)));
                }
                if with_onehot {
                    for v in 1..16 {
                        outs.push((format!("link3.{v}"), Range::BIT, vec![(low::LINK_N3 + v, 1.0)]));
                    }
                }
            }
            let names: Vec<String> = outs.iter().map(|(n, _, _)| n.clone()).collect();
            let signals = c.read(&format!("{name}.{part}"), mem, factored(digits, 0), None, outs);
            memories.push(mem);
            reads.push(
                names
                    .into_iter()
                    .zip(signals.iter().map(|s| Expr::signal(*s)))
                    .collect(),
            );
        }
        let get = |m: usize, n: &str| reads[m].get(n).cloned().unwrap_or_else(Expr::zero);
        let class = |e: usize| get(0, &format!("e{e}"));
        let (spos, sneg, lones, link) = (class(low::SPOS), class(low::SNEG), class(low::LONES), class(low::LINK));
        // Each nibble: (memory, index within it, extra bits, fill when the class implies 15).
        let mut bits = Vec::new();
        let mut onehot = Vec::new();
        for j in 0..8 {
            let (m, jj) = match j {
                0..=2 => (0, j),
                3 | 4 => (1, j - 3),
                _ => (2, j - 5),
            };
            let ones = match j {
                0..=2 => Expr::zero(),
                3 | 4 => sneg.clone(),
                _ => sneg.clone() + lones.clone(),
            };
            for i in 0..4 {
                let mut b = get(m, &format!("n{jj}.b{i}")) + ones.clone();
                if j == 3 {
                    b = b + get(0, &format!("link3.b{i}"));
                }
                if j == 4 && i == 0 {
                    b = b + link.clone();
                }
                bits.push(b);
            }
            if with_onehot {
                let raw = (1..16).map(|v| {
                    let mut x = get(m, &format!("n{jj}.{v}"));
                    if v == 15 {
                        x = x + ones.clone();
                    }
                    if j == 3 {
                        x = x + get(0, &format!("link3.{v}"));
                    }
                    if j == 4 && v == 1 {
                        x = x + link.clone();
                    }
                    x
                });
                onehot.push(with_implied_zero(raw.collect()));
            }
        }
        let _ = spos;
        let value = RegValue::from_bits(bits, onehot);
        let mems = PortMemories {
            low: memories[0],
            up34: memories[1],
            up567: memories[2],
        };
        (value, mems)
    };
    let (a, mems) = port("rs1", rs1, false);
    let (b, _) = port("rs2", rs2, true);
    let _ = oh;
    (a, b, mems)
}

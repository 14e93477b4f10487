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
pub mod low {
    /// Nibble j (0..2) value v at entry 16j + v.
    pub const NIBBLES: usize = 0;
    pub const SPOS: usize = 48;
    pub const SNEG: usize = 49;
    pub const LZERO: usize = 50;
    pub const LONES: usize = 51;
    pub const LH: usize = 52;
    pub const LINK: usize = 53;
    /// Link nibble 3 value v at entry 54 + v.
    pub const LINK_N3: usize = 54;
}

/// A register's value as read: one-hot nibbles (entry 0 implied), nibble values, bits.
#[derive(Clone)]
pub struct RegValue {
    pub onehot: Vec<Vec<Expr>>,
    pub nibbles: Vec<Expr>,
    pub bits: Vec<Expr>,
}

impl RegValue {
    fn from_onehot(onehot: Vec<Vec<Expr>>) -> Self {
        let nibbles = onehot.iter().map(|n| super::wires::value(n)).collect();
        let bits = onehot.iter().flat_map(|n| super::wires::onehot_bits(n)).collect();
        Self { onehot, nibbles, bits }
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

    let mut port = |name: &str, digits: &RegDigits| -> (RegValue, PortMemories) {
        let mut memories = Vec::new();
        let mut reads = Vec::new();
        for (part, entries, description, outputs) in [
            (
                "low",
                &low_entries,
                "register nibbles 0-2 one-hot (0-47), class (48-53), link nibble 3 (54-69), 4 pads",
                (1..16)
                    .flat_map(|v| (0..3).map(move |j| (16 * j + v, format!("n{j}.{v}"))))
                    .chain((48..70).map(|e| (e, format!("e{e}"))))
                    .collect::<Vec<_>>(),
            ),
            (
                "up34",
                &up34_entries,
                "register nibbles 3-4 one-hot (0-31), 6 pads; zero unless the value was long",
                (0..32).filter(|e| e % 16 != 0).map(|e| (e, format!("e{e}"))).collect(),
            ),
            (
                "up567",
                &up567_entries,
                "register nibbles 5-7 one-hot (0-47), 5 pads; zero unless the value needed an h token",
                (0..48).filter(|e| e % 16 != 0).map(|e| (e, format!("e{e}"))).collect(),
            ),
        ] {
            let mem = c.memory(format!("regs.{name}.{part}"), 1, 8, description);
            c.write(Write {
                memory: mem,
                address: factored(rd, 1),
                entries: entries.clone(),
                enable: enable.clone(),
            });
            let outs: Vec<ReadOutput> = outputs
                .iter()
                .map(|(e, n)| (n.clone(), Range::BIT, vec![(*e, 1.0)]))
                .collect();
            let signals = c.read(&format!("{name}.{part}"), mem, factored(digits, 0), None, outs);
            let map: std::collections::HashMap<usize, Expr> = outputs
                .iter()
                .map(|(e, _)| *e)
                .zip(signals.iter().map(|s| Expr::signal(*s)))
                .collect();
            memories.push(mem);
            reads.push(map);
        }
        let get = |m: usize, e: usize| reads[m].get(&e).cloned().unwrap_or_else(Expr::zero);
        let class = |e: usize| get(0, e);
        let (spos, sneg, lzero, lones, link) = (
            class(low::SPOS),
            class(low::SNEG),
            class(low::LZERO),
            class(low::LONES),
            class(low::LINK),
        );
        let fill = |v: usize, ones: Expr, zeros: Expr| match v {
            15 => ones,
            0 => zeros,
            _ => Expr::zero(),
        };
        let mut onehot = Vec::new();
        for j in 0..3 {
            onehot.push(with_implied_zero((1..16).map(|v| get(0, 16 * j + v)).collect()));
        }
        // nibble 3: up34 + link + sign fill; nibble 4: up34 + link's 1 + sign fill.
        onehot.push(with_implied_zero(
            (1..16)
                .map(|v| get(1, v) + class(low::LINK_N3 + v) + fill(v, sneg.clone(), spos.clone()))
                .collect(),
        ));
        onehot.push(with_implied_zero(
            (1..16)
                .map(|v| {
                    let link_one = if v == 1 { link.clone() } else { Expr::zero() };
                    get(1, 16 + v) + link_one + fill(v, sneg.clone(), spos.clone())
                })
                .collect(),
        ));
        for j in 0..3 {
            onehot.push(with_implied_zero(
                (1..16)
                    .map(|v| get(2, 16 * j + v) + fill(v, sneg.clone() + lones.clone(), Expr::zero()))
                    .collect(),
            ));
        }
        let _ = lzero;
        let value = RegValue::from_onehot(onehot);
        let mems = PortMemories {
            low: memories[0],
            up34: memories[1],
            up567: memories[2],
        };
        (value, mems)
    };
    let (a, mems) = port("rs1", rs1);
    let (b, _) = port("rs2", rs2);
    let _ = oh;
    (a, b, mems)
}

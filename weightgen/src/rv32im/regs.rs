//! The register file: 64 rows (32 architectural registers, 32 millicode shadows) in
//! four memories per read port, so that one token can write a whole register, and a `u`
//! token its low bits alone.
//!
//! A pass writes the register the *previous* pass decoded (its rd row, through the
//! conv's one-token delay) with the value the consumed token carries:
//! - `low`: nibbles 0..2 (one-hot), from `s`, `l`, `lk` (pc + 4) and `u` tokens;
//! - `cls`: how nibbles 3..7 read: the value's class (`s` tokens: the 12-bit value
//!   sign-extended, spos/sneg; `l` tokens: from the `m` before, upper bits zero, ones or
//!   from an `h`; `lk` tokens: a link, with its nibble 3); `u` leaves it, and the upper
//!   memories, as they were;
//! - `up34`: nibbles 3 and 4 from the `m` before an `l` (zero row otherwise);
//! - `up567`: nibbles 5..7 from the `h` two tokens before an `l` (zero row otherwise).
//!
//! A read sums the four: nibbles a class implies (sign fill, link's upper nibbles) are
//! linear in the class entries. A row never written reads as zero, which is x0's value.
//! A third port reads rd's nibbles 3..7 before the pass's instruction writes them, so
//! that retire can send a value whose bits 12..31 stay as a single `u`.

use std::collections::HashMap;

use inband_circuits::{Address, Circuit, Delayed, Expr, Range, ReadOutput, Write};

use super::decode::RegRows;
use super::front::Front;
use super::tokens::{field, kind, up};
use super::wires::{with_implied_zero, Tok};

/// Entry layouts of the `low` and `cls` memories.
pub use inband_chip::rv32im::{cls, low};

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
    pub cls: usize,
    pub up34: usize,
    pub up567: usize,
}

/// What the register file gives the stages after it.
pub struct RegFile {
    pub rs1: RegValue,
    pub rs2: RegValue,
    /// rs1's bits 0..19 on a pass that reads or writes memory, 0 on every other: the
    /// memory unit's address digits read them in ~480 gate rows, where each nonzero bit
    /// of the rs1 port costs an entry in each on every pass.
    pub rs1_address: RegValue,
    /// rd's nibbles 3..7 (levels) before this pass's instruction writes it.
    pub rd_upper: Vec<Expr>,
    /// The rs1 port's memories.
    pub memories: PortMemories,
}

/// The address of register rows `r` (`delay` tokens ago) in a memory of `rows` rows:
/// the rows past the register file's 64 are never chosen.
fn row_address(r: &RegRows, delay: usize, rows: usize) -> Address {
    Address::Rows(
        (0..rows)
            .map(|i| Delayed::ago(r.rows.get(i).cloned().unwrap_or_else(Expr::zero), delay))
            .collect(),
    )
}

/// The four memories' parts, in the order a port's memories are listed.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Low,
    Cls,
    Up34,
    Up567,
}

/// Entries of the `up34` and `up567` rows every write of a long value sets to 1 (pads);
/// their nibbles are one-hot from entry 0.
const UP34_PADS: std::ops::Range<usize> = 32..38;
const UP567_PADS: std::ops::Range<usize> = 48..53;

/// Builds the file and reads `rs1`, `rs2` and rd's upper nibbles, and rs1's bits 0..19
/// again where `addressing` is 1 (zero elsewhere).
pub fn build(c: &mut Circuit, t: &Tok, f: &Front, [rd, rs1_rows, rs2]: [&RegRows; 3], addressing: &Expr) -> RegFile {
    let (s, l, lk, u, m, h) = (
        t.kind(kind::S),
        t.kind(kind::L),
        t.kind(kind::LK),
        t.kind(kind::U),
        t.kind(kind::M),
        t.kind(kind::H),
    );
    let now = |e: Expr| Delayed::now(e);
    let n2 = t.field(field::N[2]);
    let neg = (8..16).map(|v| n2[v].clone()).sum::<Expr>();
    let pos = (0..8).map(|v| n2[v].clone()).sum::<Expr>();
    let mut low_entries = Vec::new();
    for j in 0..3 {
        for v in 0..16 {
            let link = f.link[j][v].clone();
            low_entries.push((low::NIBBLES + 16 * j + v, now(t.field(field::N[j])[v].clone() + link)));
        }
    }
    for p in low::PADS {
        low_entries.push((p, now(Expr::constant(1.0))));
    }
    let mut cls_entries = vec![
        (cls::SPOS, now(s.clone() + pos - 1.0)),
        (cls::SNEG, now(s.clone() + neg - 1.0)),
        (cls::LZERO, Delayed::ago(t.field(field::MUP)[up::ZERO].clone(), 1)),
        (cls::LONES, Delayed::ago(t.field(field::MUP)[up::ONES].clone(), 1)),
        (cls::LH, Delayed::ago(t.field(field::MUP)[up::FROM_H].clone(), 1)),
        (cls::LINK, now(lk.clone())),
    ];
    for v in 0..16 {
        cls_entries.push((cls::LINK_N3 + v, now(f.link[3][v].clone())));
    }
    cls_entries.push((cls::NOT_LINK, now(s.clone() + l.clone())));
    for p in cls::PADS {
        cls_entries.push((p, now(Expr::constant(1.0))));
    }
    let mut up34_entries = Vec::new();
    for (off, fl) in [(0, field::M3), (16, field::M4)] {
        for v in 0..16 {
            up34_entries.push((off + v, Delayed::ago(t.field(fl)[v].clone(), 1)));
        }
    }
    for p in UP34_PADS {
        up34_entries.push((p, Delayed::ago(m.clone(), 1)));
    }
    let mut up567_entries = Vec::new();
    for (j, fl) in field::H.into_iter().enumerate() {
        for v in 0..16 {
            up567_entries.push((16 * j + v, Delayed::ago(t.field(fl)[v].clone(), 2)));
        }
    }
    for p in UP567_PADS {
        up567_entries.push((p, Delayed::ago(h.clone(), 2)));
    }
    let whole = s.clone() + l + lk;
    let enable = |part: Part| {
        if part == Part::Low {
            whole.clone() + u.clone()
        } else {
            whole.clone()
        }
    };

    // A port reads its memories; its outputs are the value's bits (each a sum of one-hot
    // entries, so consumers see one signal per bit) and, where store data needs them, the
    // one-hot nibbles. The rd port reads only the memories of nibbles 3..7: a part a port
    // does not read has no memory there and its outputs read as zero.
    let mut port = |name: &str,
                    register: &RegRows,
                    with_onehot: bool,
                    parts: &[Part],
                    gate: Option<&Expr>|
     -> (RegValue, PortParts) {
        let bit_entries = |base: usize, i: usize| -> Vec<(usize, f64)> {
            (1..16).filter(|v| v >> i & 1 == 1).map(|v| (base + v, 1.0)).collect()
        };
        let mut memories = PortParts::default();
        for &part in parts {
            let (label, entries, description, nibbles) = match part {
                Part::Low => (
                    "low",
                    &low_entries,
                    "register nibbles 0-2 one-hot (0-47), 5 pads",
                    3usize,
                ),
                Part::Cls => (
                    "cls",
                    &cls_entries,
                    "how register nibbles 3-7 read: class (0-5), link nibble 3 (6-21), not-a-link, 6 pads",
                    0,
                ),
                Part::Up34 => (
                    "up34",
                    &up34_entries,
                    "register nibbles 3-4 one-hot (0-31), 6 pads; zero unless the value was long",
                    2,
                ),
                Part::Up567 => (
                    "up567",
                    &up567_entries,
                    "register nibbles 5-7 one-hot (0-47), 5 pads; zero unless the value needed an h token",
                    3,
                ),
            };
            let mem = c.memory(format!("regs.{name}.{label}"), 1, 8, description);
            let rows = c.target.rows_per_head;
            c.write(Write {
                memory: mem,
                address: row_address(rd, 1, rows),
                entries: entries.clone(),
                enable: enable(part),
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
            if part == Part::Cls {
                for e in cls::SPOS..=cls::LINK {
                    outs.push((format!("e{e}"), Range::BIT, vec![(e, 1.0)]));
                }
                for i in 0..4 {
                    outs.push((format!("link3.b{i}"), Range::BIT, bit_entries(cls::LINK_N3, i)));
                }
                if with_onehot {
                    for v in 1..16 {
                        outs.push((format!("link3.{v}"), Range::BIT, vec![(cls::LINK_N3 + v, 1.0)]));
                    }
                }
            }
            let names: Vec<String> = outs.iter().map(|(n, _, _)| n.clone()).collect();
            let select = gate.map(|g| (0..c.target.entries_per_value_head).map(|e| (e, g.clone())).collect());
            let signals = c.read(
                &format!("{name}.{label}"),
                mem,
                row_address(register, 0, rows),
                select,
                outs,
            );
            let read = names
                .into_iter()
                .zip(signals.iter().map(|s| Expr::signal(*s)))
                .collect();
            memories.0[part as usize] = Some((mem, read));
        }
        let get = |part: Part, n: &str| memories.output(part, n);
        let class = |e: usize| get(Part::Cls, &format!("e{e}"));
        let (sneg, lones, link) = (class(cls::SNEG), class(cls::LONES), class(cls::LINK));
        // Each nibble: (part, index within it, fill when the class implies 15).
        let mut bits = Vec::new();
        let mut onehot = Vec::new();
        for j in 0..8 {
            let (m, jj) = match j {
                0..=2 => (Part::Low, j),
                3 | 4 => (Part::Up34, j - 3),
                _ => (Part::Up567, j - 5),
            };
            let ones = match j {
                0..=2 => Expr::zero(),
                3 | 4 => sneg.clone(),
                _ => sneg.clone() + lones.clone(),
            };
            for i in 0..4 {
                let mut b = get(m, &format!("n{jj}.b{i}")) + ones.clone();
                if j == 3 {
                    b = b + get(Part::Cls, &format!("link3.b{i}"));
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
                        x = x + get(Part::Cls, &format!("link3.{v}"));
                    }
                    if j == 4 && v == 1 {
                        x = x + link.clone();
                    }
                    x
                });
                onehot.push(with_implied_zero(raw.collect()));
            }
        }
        (RegValue::from_bits(bits, onehot), memories)
    };
    let all_parts = [Part::Low, Part::Cls, Part::Up34, Part::Up567];
    let (rs1, mems) = port("rs1", rs1_rows, false, &all_parts, None);
    let (rs2, _) = port("rs2", rs2, true, &all_parts, None);
    let (rd_value, _) = port("rd", rd, false, &[Part::Cls, Part::Up34, Part::Up567], None);
    let (rs1_address, _) = port(
        "rs1a",
        rs1_rows,
        false,
        &[Part::Low, Part::Cls, Part::Up34],
        Some(addressing),
    );
    RegFile {
        rs1,
        rs2,
        rs1_address,
        rd_upper: rd_value.nibbles[3..].to_vec(),
        memories: PortMemories {
            low: mems.memory(Part::Low),
            cls: mems.memory(Part::Cls),
            up34: mems.memory(Part::Up34),
            up567: mems.memory(Part::Up567),
        },
    }
}

/// A port's memories by part (indexed by `Part as usize`) and what it reads from each:
/// output name to signal.
#[derive(Default)]
struct PortParts([Option<(usize, HashMap<String, Expr>)>; 4]);

impl PortParts {
    /// Output `name` of `part`; zero where the port does not read that part.
    fn output(&self, part: Part, name: &str) -> Expr {
        self.0[part as usize]
            .as_ref()
            .and_then(|(_, read)| read.get(name).cloned())
            .unwrap_or_else(Expr::zero)
    }

    /// The memory of `part` (a part every port that reports memories reads).
    fn memory(&self, part: Part) -> usize {
        self.0[part as usize].as_ref().expect("the rs1 port reads every part").0
    }
}

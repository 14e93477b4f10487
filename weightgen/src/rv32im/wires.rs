//! Small helpers for wiring the chip: token signals as expressions, one-hot codes,
//! bit patterns, addresses.

use inband_circuits::primitives::{add_and, all};
use inband_circuits::{Address, Circuit, Delayed, Expr, Range, ReadOutput, Signal};

/// The chip token's kind and field signals as expressions.
pub struct Tok {
    kinds: Vec<Expr>,
    fields: Vec<Vec<Expr>>,
}

impl Tok {
    pub fn new(c: &Circuit) -> Self {
        Self {
            kinds: (0..c.tokens.kinds.len()).map(|k| Expr::signal(c.kind(k))).collect(),
            fields: (0..c.tokens.fields.len()).map(|f| oh(c.field(f))).collect(),
        }
    }

    /// 1 when the token is of `kind`.
    pub fn kind(&self, kind: usize) -> Expr {
        self.kinds[kind].clone()
    }

    /// Sum of several kinds (they are exclusive).
    pub fn kinds(&self, kinds: &[usize]) -> Expr {
        kinds.iter().map(|k| self.kind(*k)).sum::<Expr>()
    }

    /// The one-hot signals of a field (all 0 when the token's kind lacks it).
    pub fn field(&self, field: usize) -> &[Expr] {
        &self.fields[field]
    }

    /// The integer value of a field (0 when absent).
    pub fn value(&self, field: usize) -> Expr {
        value(&self.fields[field])
    }
}

/// Signals as expressions.
pub fn oh(signals: &[Signal]) -> Vec<Expr> {
    signals.iter().map(|s| Expr::signal(*s)).collect()
}

/// The value a one-hot vector selects.
pub fn value(onehot: &[Expr]) -> Expr {
    inband_circuits::primitives::encode(onehot)
}

/// The number spelled by 0/1 bits, least significant first.
pub fn bits_value(bits: &[Expr]) -> Expr {
    bits.iter()
        .enumerate()
        .map(|(i, b)| b.clone() * (1u64 << i) as f64)
        .sum::<Expr>()
}

/// Nibble values of a 32-bit word given as bits.
pub fn nibble_values(bits: &[Expr]) -> Vec<Expr> {
    bits.chunks(4).map(bits_value).collect()
}

/// The terms saying `bits[lo..lo+n]` spell `value` (each term 1 when that bit matches).
pub fn pattern(bits: &[Expr], lo: usize, n: usize, value: u64) -> Vec<Expr> {
    (0..n)
        .map(|i| {
            if value >> i & 1 == 1 {
                bits[lo + i].clone()
            } else {
                Expr::constant(1.0) - bits[lo + i].clone()
            }
        })
        .collect()
}

/// AND of pattern terms and extra 0/1 terms.
pub fn all_of(mut terms: Vec<Expr>, extra: &[Expr]) -> Expr {
    terms.extend(extra.iter().cloned());
    all(&terms)
}

/// The address of a register-like memory: always its row 0 (written whole every time
/// its enable is on, read back every pass).
pub fn row_zero(rows: usize) -> Address {
    one_row(rows, 0, Delayed::now(Expr::constant(1.0)))
}

/// An address of a one-head memory selecting row `r` when `select` is 1.
pub fn one_row(rows: usize, r: usize, select: Delayed) -> Address {
    Address::Rows(
        (0..rows)
            .map(|i| {
                if i == r {
                    select.clone()
                } else {
                    Delayed::now(Expr::zero())
                }
            })
            .collect(),
    )
}

/// Read outputs: one signal per listed entry (coefficient 1), named `prefix{i}`.
pub fn entry_outputs(prefix: &str, entries: impl IntoIterator<Item = usize>) -> Vec<ReadOutput> {
    entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| (format!("{prefix}{i}"), Range::BIT, vec![(e, 1.0)]))
        .collect()
}

/// A one-hot vector of `n` entries whose entry 0 is implied (1 minus the others): the
/// code of a memory row that may never have been written (it reads as value 0).
pub fn with_implied_zero(rest: Vec<Expr>) -> Vec<Expr> {
    let zero = rest.iter().fold(Expr::constant(1.0), |e, x| e - x.clone());
    std::iter::once(zero).chain(rest).collect()
}

/// The bits (least significant first) of the value a one-hot vector of 16 selects.
pub fn onehot_bits(onehot: &[Expr]) -> Vec<Expr> {
    (0..4)
        .map(|i| inband_circuits::primitives::onehot_bit(onehot, i))
        .collect()
}

/// One-hot of a constant.
pub fn onehot_constant(n: usize, v: usize) -> Vec<Expr> {
    (0..n).map(|i| Expr::constant(if i == v { 1.0 } else { 0.0 })).collect()
}

/// A 0/1 signal per (name, terms): the AND of the terms, one neuron each. Each term is at
/// most 1 (a one-hot digit, or a sum of pass kinds that exclude one another), which their
/// ranges as expressions do not show; `primitives::steps` would spend two neurons on each.
pub fn ands(c: &mut Circuit, name: &str, terms: &[(String, Vec<Expr>)]) -> Vec<Expr> {
    let mut blk = c.block(name);
    let outs = terms
        .iter()
        .map(|(n, t)| {
            let out = blk.output(n.clone(), Range::BIT);
            add_and(&mut blk, t, &[(out, 1.0)]);
            Expr::signal(out)
        })
        .collect();
    c.add_block(blk);
    outs
}

/// The one-hot of row `h · low.len() + l` from the one-hot digits `high` (h) and `low`
/// (l), one neuron a row: as a memory address's row choice, a row signal feeds one key channel
/// per head, where the two digits fed every channel of the rows sharing either (an
/// `rhi` digit 256 of a 16-head memory's 2,048, an `rlo` digit 128).
pub fn row_onehot(c: &mut Circuit, name: &str, high: &[Expr], low: &[Expr]) -> Vec<Expr> {
    let rows: Vec<(String, Vec<Expr>)> = (0..high.len() * low.len())
        .map(|r| {
            (
                format!("row{r}"),
                vec![high[r / low.len()].clone(), low[r % low.len()].clone()],
            )
        })
        .collect();
    ands(c, name, &rows)
}

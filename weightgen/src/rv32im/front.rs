//! The front end: which pass this is, the pc, the ROM and the instruction's bits.
//!
//! - `pc_base` (one row, first layer): the ROM row of the last `x`/`xm` token and the mode
//!   (user code or millicode); `pc_off` (see `row_offset`): the pc is one row further,
//!   where a slot-8 token ran on into the next row since.
//! - `rom_staging` (anchored, 32 rows): boot `bp` tokens stage a ROM row (or a RAM line)
//!   two nibbles at a time; `bc` (`bl`) reads all 32 rows at once and writes the row into
//!   the ROM (a RAM bank).
//! - `rom` (anchored, all 16 heads of a layer): 2048 rows of eight user instructions,
//!   each instruction eight nibble levels (entries 0..63); the first rows of the last head
//!   also hold millicode in entries 64..125 (see [`super::millicode`]), which `bc` adds
//!   from the chip's weights. A fetch reads the base row and keeps the eight entries of
//!   the slot in the mode's half (the read's z gate), then 15 thresholds per nibble make
//!   exact bits.
//! - `stage_lo`/`stage_hi`: the `w1 w2 w3` (`f3`) word, read back when a store commits or
//!   a line fill writes it.
//! - next pc: the sequential successor (row + 1 after slot 7) as one-hots, for `x`
//!   tokens, links and millicode returns.

use inband_circuits::circuit::{BlockBuilder, RowCode};
use inband_circuits::primitives::{add_gated, all, level_onehot, not, onehot_bit};
use inband_circuits::{Address, Circuit, Delayed, Expr, Range, Signal, Write};

use super::millicode;
use super::tokens::{field, kind, nibble, row_digits, NEXT_ROW, REBASE, ROW_PIECES, ROW_SLOTS};
use super::wires::{ands, entry_outputs, oh, onehot_bits, row_zero, Tok};

/// Anchor of the ROM's rows: levels up to 15 in 120 entries (user code and millicode)
/// read back within 0.007 (the thresholds allow 0.07).
pub const ROM_ANCHOR: f64 = 4096.0;
/// Anchor of each ROM staging row (32 rows are read at once, so their anchors add up).
pub const ROM_STAGING_ANCHOR: f64 = 128.0;

/// The ROM entry of millicode nibble 0 of slot 0 (the upper half of a row).
const MC_ENTRY: usize = 64;
/// One past the last ROM entry the millicode may use (the anchor takes the last two).
const MC_END: usize = 128 - inband_circuits::contract::ANCHOR_ENTRIES;

/// The millicode's ROM entries, added by a `bc` token that commits one of its rows: one
/// 0/1 signal per millicode row (`bc` at that row), times the word's nibble levels.
fn millicode_entries(c: &mut Circuit, t: &Tok) -> Vec<(usize, Delayed)> {
    let rows: Vec<&[u32]> = millicode::WORDS.chunks(ROW_SLOTS).collect();
    assert!(rows.len() <= millicode::ROWS, "the millicode outgrew its rows");
    let [head, rhi, _] = row_digits(millicode::FIRST_ROW);
    let mut b = c.block("millicode.rows");
    let one = Expr::constant(1.0);
    let at: Vec<_> = (0..rows.len())
        .map(|r| {
            let s = b.output(format!("row{r}"), Range::BIT);
            let [_, _, rlo] = row_digits(millicode::FIRST_ROW + r);
            let cond = all(&[
                t.kind(kind::BC),
                t.field(field::HEAD)[head].clone(),
                t.field(field::RHI)[rhi].clone(),
                t.field(field::RLO)[rlo].clone(),
            ]);
            add_gated(&mut b, &cond, (-3.0, 1.0), &one, &[(s, 1.0)]);
            Expr::signal(s)
        })
        .collect();
    c.add_block(b);
    (MC_ENTRY..MC_END)
        .map(|e| {
            let (s, k) = ((e - MC_ENTRY) / 8, (e - MC_ENTRY) % 8);
            let level = rows
                .iter()
                .zip(&at)
                .fold(Expr::zero(), |acc, (words, on)| match words.get(s) {
                    Some(w) if nibble(*w, k) > 0 => acc + on.clone() * nibble(*w, k) as f64,
                    _ => acc,
                });
            (e, Delayed::now(level))
        })
        .collect()
}

/// What the front end hands on.
pub struct Front {
    /// The pass runs the instruction at the slot (the consumed token starts one).
    pub first: Expr,
    /// The consumed token is `w3` with a slot: the byte/halfword store there commits.
    pub commit: Expr,
    /// The consumed token carries slot 9 (the row moved on since the last `x`/`xm`), or
    /// slot 8 at user code's last row: this pass only moves to the next row (or traps).
    pub rebase: Expr,
    /// One-hot of the slot whose instruction is fetched this pass (0..8; none when no
    /// instruction is fetched).
    pub slot: Vec<Expr>,
    /// 1 when an instruction is fetched (first, commit, `m` and `lk` passes).
    pub fetch: Expr,
    /// The current ROM row's digits (one-hot).
    pub head: Vec<Expr>,
    pub rhi: Vec<Expr>,
    pub rlo: Vec<Expr>,
    /// 1 in millicode (set by `xm`, cleared by `x`).
    pub mode: Expr,
    /// The sequential next pc's slot is 0 of the next row.
    pub wrap: Expr,
    /// Slot 7 runs in a row that already moved on since the last `x`/`xm` (`pc_off`): the
    /// next token's slot is 9, not 8 (its pass moves the row by an `x`).
    pub wrap_moved: Expr,
    /// The sequential next pc: row digits and slot (one-hot).
    pub next_head: Vec<Expr>,
    pub next_rhi: Vec<Expr>,
    pub next_rlo: Vec<Expr>,
    pub next_slot: Vec<Expr>,
    /// User code would run on past the ROM's last row (a fetch outside the ROM).
    pub runoff: Expr,
    /// The pc's bits (0 when nothing is fetched).
    pub pc_bits: Vec<Expr>,
    /// The instruction's nibbles (one-hot) and bits.
    pub nib: Vec<Vec<Expr>>,
    pub bits: Vec<Expr>,
    /// The link (pc + 4) as one-hot nibbles 0..3, nonzero only on `lk` passes.
    pub link: Vec<Vec<Expr>>,
    /// The staged word's nibbles (one-hot), nonzero only on commit and `f3` passes.
    pub staged: Vec<Vec<Expr>>,
    /// The staged ROM row or RAM line (64 nibble levels), nonzero only on `bc` and `bl` passes.
    pub staged_row: Vec<Expr>,
}

/// Builds the front end.
pub fn build(c: &mut Circuit, t: &Tok) -> Front {
    let rows = c.target.rows_per_head;
    let slot_field = t.field(field::SLOT);
    let jumped = t.kind(kind::X) + t.kind(kind::XM);
    let slot8 = slot_field[NEXT_ROW].clone();
    let commit = (0..ROW_SLOTS).map(|v| t.field(field::WSLOT)[v].clone()).sum::<Expr>();
    let named = named_slots(t);

    let base = pc_base(c, t, rows, &jumped);
    let (base_head, base_rhi, base_rlo) = (&base[..16], &base[16..24], &base[24..40]);
    let mode = base[41].clone();

    let off_now = row_offset(c, rows, &jumped, &slot8);
    let next_row = next_row_start(c, &slot8, &mode, [base_head, base_rhi, base_rlo]);
    let (start_user, start_millicode) = (next_row.user.clone(), next_row.millicode.clone());
    let start = start_user.clone() + start_millicode.clone();
    let rebase = slot_field[REBASE].clone() + next_row.past_rom.clone();
    let first = (0..ROW_SLOTS).fold(jumped.clone() + t.kind(kind::RR) + start.clone(), |e, v| {
        e + slot_field[v].clone()
    });
    let mut slot = named.clone();
    slot[0] = slot[0].clone() + start;
    let fetch = slot.iter().sum::<Expr>();
    let [head, rhi, rlo] = effective_row(c, [base_head, base_rhi, base_rlo], &off_now);
    let wrap_moved = ands(
        c,
        "row.wrap_moved",
        &[("slot7".into(), vec![slot[ROW_SLOTS - 1].clone(), off_now.clone()])],
    )
    .remove(0);

    // The sequential successor.
    let wrap = slot[ROW_SLOTS - 1].clone() + rebase.clone();
    let next = successor(c, [&head, &rhi, &rlo], &wrap, &mode);
    let [next_head, next_rhi, next_rlo] = next.row;
    let runoff = next.runoff + next_row.past_rom;
    let mut next_slot = vec![wrap.clone()];
    next_slot.extend((1..ROW_SLOTS).map(|v| slot[v - 1].clone()));
    let pc_bits = pc_bits(&slot, [&head, &rhi, &rlo], &fetch);

    let staged_levels = rom_staging(c, t, rows);
    let staged_row: Vec<Expr> = staged_levels.iter().map(|s| Expr::signal(*s)).collect();
    let fetch_slots = FetchSlots {
        named: &named,
        mode: &mode,
        start_user,
        start_millicode,
    };
    let base_row = [base_rhi, base_rlo];
    let levels = rom_fetch(c, t, &staged_levels, fetch_slots, &head, base_row, &off_now);
    let mut nib = Vec::new();
    let mut bits = Vec::new();
    for (k, level) in levels.iter().enumerate() {
        let onehot = level_onehot(c, &format!("inst.n{k}"), &Expr::signal(*level), 15);
        bits.extend(onehot_bits(&onehot));
        nib.push(onehot);
    }
    let link = link(c, t, &next_slot, [&next_head, &next_rhi, &next_rlo]);
    let staged = staged_word(c, t, rows, &commit);

    Front {
        first,
        commit,
        rebase,
        slot,
        fetch,
        head,
        rhi,
        rlo,
        mode,
        wrap,
        wrap_moved,
        next_head,
        next_rhi,
        next_rlo,
        next_slot,
        runoff,
        pc_bits,
        nib,
        bits,
        link,
        staged,
        staged_row,
    }
}

/// The slots the consumed token names (slots 8 and 9 aside: see `row_offset`).
fn named_slots(t: &Tok) -> Vec<Expr> {
    (0..ROW_SLOTS)
        .map(|v| {
            t.field(field::SLOT)[v].clone()
                + t.field(field::XSLOT)[v].clone()
                + t.field(field::MSLOT)[v].clone()
                + t.field(field::LKSLOT)[v].clone()
                + t.field(field::WSLOT)[v].clone()
                + t.field(field::FSLOT)[v].clone()
        })
        .collect()
}

/// `pc_base`, written by `x`/`xm` tokens and read on every pass: head one-hot (0..15), rhi
/// (16..23), rlo (24..39), user code (40) or millicode (41), four pads. An `xm` token
/// names the millicode's row rlo (head and rhi those of its first row).
fn pc_base(c: &mut Circuit, t: &Tok, rows: usize, jumped: &Expr) -> Vec<Expr> {
    let pc = c.memory(
        "pc_base",
        1,
        8,
        "the ROM row of the pc: head, rhi, rlo one-hot, user/millicode pair, 4 pads",
    );
    let xm = t.kind(kind::XM);
    let [mc_head, mc_rhi, _] = row_digits(millicode::FIRST_ROW);
    let mut entries = Vec::new();
    for (off, f) in [(0, field::HEAD), (16, field::RHI), (24, field::RLO)] {
        for (v, x) in t.field(f).iter().enumerate() {
            let implied = if (f, v) == (field::HEAD, mc_head) || (f, v) == (field::RHI, mc_rhi) {
                xm.clone()
            } else {
                Expr::zero()
            };
            entries.push((off + v, Delayed::now(x.clone() + implied)));
        }
    }
    entries.push((40, Delayed::now(t.kind(kind::X))));
    entries.push((41, Delayed::now(xm)));
    for p in 42..46 {
        entries.push((p, Delayed::now(Expr::constant(1.0))));
    }
    c.write(Write {
        memory: pc,
        address: row_zero(rows),
        entries,
        enable: jumped.clone(),
    });
    let base = c.read("pc_base", pc, row_zero(rows), None, entry_outputs("d", 0..42));
    oh(&base)
}

/// The pc's bits, ROM_BASE + 32·row + 4·slot (bit 16: an instruction is fetched; all 0
/// when none is).
fn pc_bits(slot: &[Expr], [head, rhi, rlo]: [&[Expr]; 3], fetch: &Expr) -> Vec<Expr> {
    let mut pc_bits = vec![Expr::zero(); 32];
    for i in 0..3 {
        pc_bits[2 + i] = onehot_bit(slot, i);
    }
    for (i, b) in onehot_bits(rlo).into_iter().enumerate() {
        pc_bits[5 + i] = b;
    }
    for i in 0..3 {
        pc_bits[9 + i] = onehot_bit(rhi, i);
    }
    for (i, b) in onehot_bits(head).into_iter().enumerate() {
        pc_bits[12 + i] = b;
    }
    pc_bits[16] = fetch.clone();
    pc_bits
}

/// ROM staging: boot `bp` tokens write piece p's two levels in entries 2p, 2p+1; `bc` and
/// `bl` read all 32 pieces at once. Returns the 64 staged levels.
fn rom_staging(c: &mut Circuit, t: &Tok, rows: usize) -> Vec<Signal> {
    let staging = c.add_memory(
        "rom_staging",
        1,
        RowCode::Anchored {
            anchor: ROM_STAGING_ANCHOR,
            rows_per_read: ROW_PIECES,
        },
        "one ROM row being booted: row p holds nibbles 2p and 2p+1 as levels",
    );
    let piece = t.field(field::PIECE).to_vec();
    let mut entries = Vec::new();
    for (p, sel) in piece.iter().enumerate() {
        for (k, f) in [field::P0, field::P1].into_iter().enumerate() {
            // The level, pushed far below zero (silu → 0) unless this piece is the one written.
            let level = t.value(f) + (sel.clone() - 1.0) * 32.0;
            entries.push((2 * p + k, Delayed::now(level)));
        }
    }
    c.write(Write {
        memory: staging,
        address: Address::Rows(
            (0..rows)
                .map(|r| Delayed::now(piece.get(r).cloned().unwrap_or_else(Expr::zero)))
                .collect(),
        ),
        entries,
        enable: t.kind(kind::BP),
    });
    let all_pieces = Address::Rows(
        (0..rows)
            .map(|r| Delayed::now(Expr::constant(if r < ROW_PIECES { 1.0 } else { 0.0 })))
            .collect(),
    );
    let levels: Vec<inband_circuits::ReadOutput> = (0..2 * ROW_PIECES)
        .map(|e| (format!("L{e}"), Range::NIBBLE, vec![(e, 1.0)]))
        .collect();
    let staged_read = t.kind(kind::BC) + t.kind(kind::BL);
    c.read(
        "rom_staging",
        staging,
        all_pieces,
        Some((0..2 * ROW_PIECES).map(|e| (e, staged_read.clone())).collect()),
        levels,
    )
}

/// What chooses the fetched slot's entries: the slots the token names, the mode, and the
/// slot-8 start of the next row in user code or millicode.
struct FetchSlots<'a> {
    named: &'a [Expr],
    mode: &'a Expr,
    start_user: Expr,
    start_millicode: Expr,
}

/// The ROM: row r of head h holds user instruction s's nibble k at entry 8s + k and
/// millicode word 8·(r - FIRST_ROW) + s's nibble k at entry 64 + 8s + k (below 126);
/// written by `bc` from the staged levels, read at the pc's row. Returns the fetched
/// instruction's eight nibble levels.
fn rom_fetch(
    c: &mut Circuit,
    t: &Tok,
    staged_levels: &[Signal],
    slots: FetchSlots,
    head: &[Expr],
    [base_rhi, base_rlo]: [&[Expr]; 2],
    off_now: &Expr,
) -> Vec<Signal> {
    let rom = c.add_memory(
        "rom",
        c.target.key_heads,
        RowCode::Anchored {
            anchor: ROM_ANCHOR,
            rows_per_read: 1,
        },
        "ROM: eight instructions per row, instruction s's nibble k (level) at entry 8s+k; millicode at 64+8s+k",
    );
    let now = |v: &[Expr]| v.iter().map(|x| Delayed::now(x.clone())).collect::<Vec<_>>();
    let mut entries: Vec<(usize, Delayed)> = staged_levels
        .iter()
        .enumerate()
        .map(|(e, s)| (e, Delayed::now(Expr::signal(*s))))
        .collect();
    entries.extend(millicode_entries(c, t));
    c.write(Write {
        memory: rom,
        address: Address::Factored {
            heads: now(t.field(field::HEAD)),
            rows: vec![now(t.field(field::RHI)), now(t.field(field::RLO))],
        },
        entries,
        enable: t.kind(kind::BC),
    });
    let select = slot_select(c, slots);
    let outputs = (0..8)
        .map(|k| {
            (
                format!("nibble{k}"),
                Range::NIBBLE,
                (0..ROW_SLOTS)
                    .flat_map(|s| [8 * s + k, MC_ENTRY + 8 * s + k])
                    .filter(|e| *e < MC_END)
                    .map(|e| (e, 1.0))
                    .collect(),
            )
        })
        .collect();
    // The row as one signal (see `row_onehot`; the read's digits fed ~780 input
    // projection entries a pass, the row and head ~150), and the next row's when the
    // row has moved without an `x` (`row_offset`).
    let fetch_row = fetch_row(c, base_rhi, base_rlo, off_now);
    c.read(
        "fetch",
        rom,
        Address::Factored {
            heads: now(head),
            rows: vec![now(&fetch_row)],
        },
        Some(select),
        outputs,
    )
}

/// The fetch's read select: user entries when the mode is 0, millicode entries when it is
/// 1: one signal per slot and mode, made in the layer before the read (the slot's token
/// fields and the mode, summed in the select, each fed the entries' gates in all 16 value
/// heads).
fn slot_select(c: &mut Circuit, slots: FetchSlots) -> Vec<(usize, Expr)> {
    let picks: Vec<(String, Vec<Expr>)> = (0..ROW_SLOTS)
        .flat_map(|s| {
            [
                (format!("user{s}"), vec![slots.named[s].clone(), not(slots.mode)]),
                (
                    format!("millicode{s}"),
                    vec![slots.named[s].clone(), slots.mode.clone()],
                ),
            ]
        })
        .collect();
    let mut picks = ands(c, "fetch.slot", &picks);
    picks[0] = picks[0].clone() + slots.start_user;
    picks[1] = picks[1].clone() + slots.start_millicode;
    (0..ROW_SLOTS)
        .flat_map(|s| (0..8).map(move |k| (s, 8 * s + k)))
        .flat_map(|(s, e)| {
            let user = (e, picks[2 * s].clone());
            let mc = (MC_ENTRY + e < MC_END).then(|| (MC_ENTRY + e, picks[2 * s + 1].clone()));
            std::iter::once(user).chain(mc)
        })
        .collect()
}

/// The link pc + 4, one-hot per nibble (0..3), only on `lk` passes, from the sequential
/// successor's slot and row.
fn link(c: &mut Circuit, t: &Tok, next_slot: &[Expr], [next_head, next_rhi, next_rlo]: [&[Expr]; 3]) -> Vec<Vec<Expr>> {
    let lk = t.kind(kind::LK);
    let slot_hi = (4..8).map(|v| next_slot[v].clone()).sum::<Expr>();
    let rlo_hi = (8..16).map(|v| next_rlo[v].clone()).sum::<Expr>();
    let mut b = c.block("link");
    let mut link: Vec<Vec<Expr>> = Vec::new();
    let mut add_nibble = |b: &mut BlockBuilder, name: &str, conds: Vec<Option<Expr>>| {
        let mut onehot = Vec::new();
        for (v, cond) in conds.into_iter().enumerate() {
            match cond {
                None => onehot.push(Expr::zero()),
                Some(cond) => {
                    let s = b.output(format!("{name}.{v}"), Range::BIT);
                    add_gated(b, &cond, (-3.0, 1.0), &Expr::constant(1.0), &[(s, 1.0)]);
                    onehot.push(Expr::signal(s));
                }
            }
        }
        link.push(onehot);
    };
    // n0 = 4·(slot mod 4)
    add_nibble(
        &mut b,
        "n0",
        (0..16)
            .map(|v| (v % 4 == 0).then(|| all(&[lk.clone(), next_slot[v / 4].clone() + next_slot[v / 4 + 4].clone()])))
            .collect(),
    );
    // n1 = 2·(rlo mod 8) + slot div 4
    add_nibble(
        &mut b,
        "n1",
        (0..16)
            .map(|v| {
                let (a, hi) = (v / 2, v % 2 == 1);
                let s = if hi { slot_hi.clone() } else { not(&slot_hi) };
                Some(all(&[lk.clone(), next_rlo[a].clone() + next_rlo[a + 8].clone(), s]))
            })
            .collect(),
    );
    // n2 = 2·rhi + rlo div 8
    add_nibble(
        &mut b,
        "n2",
        (0..16)
            .map(|v| {
                let (a, hi) = (v / 2, v % 2 == 1);
                let s = if hi { rlo_hi.clone() } else { not(&rlo_hi) };
                Some(all(&[lk.clone(), next_rhi[a].clone(), s]))
            })
            .collect(),
    );
    // n3 = head
    add_nibble(
        &mut b,
        "n3",
        (0..16)
            .map(|v| Some(all(&[lk.clone(), next_head[v].clone()])))
            .collect(),
    );
    c.add_block(b);
    link
}

/// The staged word (one-hot nibbles), read back on commit and `f3` passes: `stage_lo`
/// rows 0 (w1: nibbles 0..2) and 1 (w2: 3..5), `stage_hi` (w3: 6, 7).
fn staged_word(c: &mut Circuit, t: &Tok, rows: usize, commit: &Expr) -> Vec<Vec<Expr>> {
    let stage_lo = c.memory(
        "stage_lo",
        1,
        8,
        "staged word nibbles 0-5 one-hot: row 0 from w1 (entries 0-47, pad 96), row 1 from w2 (48-95, pad 97); read as a pair",
    );
    let (w1, w2) = (t.kind(kind::W1), t.kind(kind::W2));
    let mut entries = Vec::new();
    for j in 0..6 {
        for (v, x) in t.field(field::N[j]).iter().enumerate() {
            entries.push((16 * j + v, Delayed::now(x.clone())));
        }
    }
    entries.push((96, Delayed::now(w1.clone())));
    entries.push((97, Delayed::now(w2.clone())));
    let mut address = vec![Delayed::now(w1.clone()), Delayed::now(w2.clone())];
    address.resize(rows, Delayed::now(Expr::zero()));
    c.write(Write {
        memory: stage_lo,
        address: Address::Rows(address),
        entries,
        enable: w1 + w2,
    });
    let stage_read = commit.clone() + t.kind(kind::F3);
    let mut pair = vec![Delayed::now(Expr::constant(1.0)), Delayed::now(Expr::constant(1.0))];
    pair.resize(rows, Delayed::now(Expr::zero()));
    let lo = c.read(
        "stage_lo",
        stage_lo,
        Address::Rows(pair),
        Some((0..96).map(|e| (e, stage_read.clone())).collect()),
        entry_outputs("e", 0..96),
    );
    let stage_hi = c.memory(
        "stage_hi",
        1,
        8,
        "staged word nibbles 6-7 one-hot (entries 0-31) from w3, six pads",
    );
    let mut entries = Vec::new();
    for j in 6..8 {
        for (v, x) in t.field(field::N[j]).iter().enumerate() {
            entries.push((16 * (j - 6) + v, Delayed::now(x.clone())));
        }
    }
    for p in 32..38 {
        entries.push((p, Delayed::now(Expr::constant(1.0))));
    }
    c.write(Write {
        memory: stage_hi,
        address: row_zero(rows),
        entries,
        enable: t.kind(kind::W3) + t.kind(kind::F3),
    });
    let hi = c.read(
        "stage_hi",
        stage_hi,
        row_zero(rows),
        Some((0..32).map(|e| (e, stage_read.clone())).collect()),
        entry_outputs("e", 0..32),
    );
    oh(&lo)
        .chunks(16)
        .chain(oh(&hi).chunks(16))
        .map(|c| c.to_vec())
        .collect()
}

/// `pc_base` changes only on `x`/`xm` tokens, which carry a row. A token with slot 8
/// ("the next row, slot 0") moves the pc one row on without one: `pc_off` is set by a
/// slot-8 token and cleared by `x`/`xm`, so a pass reads (in the first layer) whether its
/// row is one past pc_base's. It counts to one only: the pass that runs slot 7 of a row
/// that already moved chooses slot 9 (`REBASE`) instead, whose pass moves the row by an
/// `x` (see `Front::wrap_moved`).
fn row_offset(c: &mut Circuit, rows: usize, jumped: &Expr, slot8: &Expr) -> Expr {
    let now = c.memory(
        "pc_off",
        1,
        2,
        "the pc is pc_base's row + 1: entry 0 set by a slot-8 token, entry 1 by x/xm, a pad",
    );
    c.write(Write {
        memory: now,
        address: row_zero(rows),
        entries: vec![
            (0, Delayed::now(slot8.clone())),
            (1, Delayed::now(jumped.clone())),
            (2, Delayed::now(Expr::constant(1.0))),
        ],
        enable: jumped.clone() + slot8.clone(),
    });
    Expr::signal(c.read("pc_off", now, row_zero(rows), None, entry_outputs("on", 0..1))[0])
}

/// What a slot-8 token does in the pass that consumes it (each 0/1).
struct NextRowStart {
    /// It runs slot 0 of the next row, in user code or in millicode.
    user: Expr,
    millicode: Expr,
    /// The row is user code's last: it traps (as a rebase pass that runs off the ROM).
    past_rom: Expr,
}

/// A slot-8 token runs slot 0 of the next row unless the row is user code's last (then it
/// traps). (Where the row already moved since the last `x`/`xm` the token has slot 9.)
fn next_row_start(c: &mut Circuit, slot8: &Expr, mode: &Expr, [head, rhi, rlo]: [&[Expr]; 3]) -> NextRowStart {
    let with = |more: Vec<Expr>| [&[slot8.clone()][..], &more[..]].concat();
    let nexts = ands(
        c,
        "row.next",
        &[
            ("user".into(), with(vec![not(mode)])),
            ("millicode".into(), with(vec![mode.clone()])),
            (
                "past_rom".into(),
                with(vec![not(mode), head[15].clone(), rhi[7].clone(), rlo[15].clone()]),
            ),
        ],
    );
    NextRowStart {
        user: nexts[0].clone() - nexts[2].clone(),
        millicode: nexts[1].clone(),
        past_rom: nexts[2].clone(),
    }
}

/// The pc's row as one-hot digits: pc_base's, or the row after it when `off` is 1 (the
/// row after user code's last is none: every head digit 0). One neuron per digit value
/// that moves, shared by the value it leaves and the one it enters.
fn effective_row(c: &mut Circuit, [head, rhi, rlo]: [&[Expr]; 3], off: &Expr) -> [Vec<Expr>; 3] {
    let mut terms: Vec<(String, Vec<Expr>)> = Vec::new();
    for (v, d) in rlo.iter().enumerate() {
        terms.push((format!("rlo{v}"), vec![d.clone(), off.clone()]));
    }
    for (v, d) in rhi.iter().enumerate() {
        terms.push((format!("rhi{v}"), vec![d.clone(), rlo[15].clone(), off.clone()]));
    }
    for (v, d) in head.iter().enumerate() {
        terms.push((
            format!("head{v}"),
            vec![d.clone(), rhi[7].clone(), rlo[15].clone(), off.clone()],
        ));
    }
    let moved = ands(c, "row.moved", &terms);
    let (m_rlo, rest) = moved.split_at(rlo.len());
    let (m_rhi, m_head) = rest.split_at(rhi.len());
    let shift = |digits: &[Expr], leaving: &[Expr], wraps: bool| -> Vec<Expr> {
        let n = digits.len();
        (0..n)
            .map(|v| {
                let entering = match v {
                    0 if !wraps => Expr::zero(),
                    _ => leaving[(v + n - 1) % n].clone(),
                };
                digits[v].clone() - leaving[v].clone() + entering
            })
            .collect()
    };
    [
        shift(head, m_head, false),
        shift(rhi, m_rhi, true),
        shift(rlo, m_rlo, true),
    ]
}

/// The ROM fetch's row: pc_base's row (`rhi × rlo`) when `off` is 0, the row after it
/// when 1 (row 0 after a head's last; [`effective_row`] moves the head).
fn fetch_row(c: &mut Circuit, rhi: &[Expr], rlo: &[Expr], off: &Expr) -> Vec<Expr> {
    let n = rhi.len() * rlo.len();
    let digits = |r: usize| [rhi[r / rlo.len()].clone(), rlo[r % rlo.len()].clone()];
    let terms: Vec<(String, Vec<Expr>)> = (0..n)
        .flat_map(|r| {
            let [h, l] = digits(r);
            let [ph, pl] = digits((r + n - 1) % n);
            [
                (format!("row{r}"), vec![h, l, not(off)]),
                (format!("after{r}"), vec![ph, pl, off.clone()]),
            ]
        })
        .collect();
    let pairs = ands(c, "fetch.row", &terms);
    pairs.chunks(2).map(|p| p[0].clone() + p[1].clone()).collect()
}

/// The sequential successor's row (one-hot digits) and whether user code runs off the ROM.
struct Successor {
    row: [Vec<Expr>; 3],
    runoff: Expr,
}

/// The row after `[head, rhi, rlo]` where `wrap` is 1, else the same row.
fn successor(c: &mut Circuit, [head, rhi, rlo]: [&[Expr]; 3], wrap: &Expr, mode: &Expr) -> Successor {
    let mut b = c.block("next_pc");
    let d_rlo: Vec<_> = (0..16)
        .map(|v| b.output(format!("drlo{v}"), Range::new(-1, 1)))
        .collect();
    let d_rhi: Vec<_> = (0..8)
        .map(|v| b.output(format!("drhi{v}"), Range::new(-1, 1)))
        .collect();
    let d_head: Vec<_> = (0..16)
        .map(|v| b.output(format!("dhead{v}"), Range::new(-1, 1)))
        .collect();
    let runoff_s = b.output("runoff", Range::BIT);
    let one = Expr::constant(1.0);
    for v in 0..16 {
        let prev = (v + 15) % 16;
        add_gated(
            &mut b,
            &all(&[rlo[v].clone(), wrap.clone()]),
            (-1.0, 1.0),
            &one,
            &[(d_rlo[v], -1.0)],
        );
        add_gated(
            &mut b,
            &all(&[rlo[prev].clone(), wrap.clone()]),
            (-1.0, 1.0),
            &one,
            &[(d_rlo[v], 1.0)],
        );
    }
    for v in 0..8 {
        let prev = (v + 7) % 8;
        let carry = [wrap.clone(), rlo[15].clone()];
        let here = all(&[&carry[..], &[rhi[v].clone()]].concat());
        let from = all(&[&carry[..], &[rhi[prev].clone()]].concat());
        add_gated(&mut b, &here, (-2.0, 1.0), &one, &[(d_rhi[v], -1.0)]);
        add_gated(&mut b, &from, (-2.0, 1.0), &one, &[(d_rhi[v], 1.0)]);
    }
    for v in 0..16 {
        let prev = (v + 15) % 16;
        let carry = [wrap.clone(), rlo[15].clone(), rhi[7].clone()];
        let here = all(&[&carry[..], &[head[v].clone()]].concat());
        let from = all(&[&carry[..], &[head[prev].clone()]].concat());
        add_gated(&mut b, &here, (-3.0, 1.0), &one, &[(d_head[v], -1.0)]);
        add_gated(&mut b, &from, (-3.0, 1.0), &one, &[(d_head[v], 1.0)]);
    }
    let runoff = all(&[
        not(mode),
        wrap.clone(),
        rlo[15].clone(),
        rhi[7].clone(),
        head[15].clone(),
    ]);
    add_gated(&mut b, &runoff, (-4.0, 1.0), &one, &[(runoff_s, 1.0)]);
    c.add_block(b);
    let next_rlo: Vec<Expr> = (0..16).map(|v| rlo[v].clone() + d_rlo[v]).collect();
    let next_rhi: Vec<Expr> = (0..8).map(|v| rhi[v].clone() + d_rhi[v]).collect();
    let next_head: Vec<Expr> = (0..16).map(|v| head[v].clone() + d_head[v]).collect();
    Successor {
        row: [next_head, next_rhi, next_rlo],
        runoff: Expr::signal(runoff_s),
    }
}

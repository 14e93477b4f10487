//! The RV32IM chip's token vocabulary.
//!
//! Every forward pass consumes one chip token and chooses the next. A token both
//! finishes what the previous pass started (a register write, a store's data) and says
//! which instruction to run next, so most instructions cost one pass. The kinds, and why
//! each exists:
//!
//! | kind | fields | consumed, it … |
//! |---|---|---|
//! | `s` | n0 n1 n2, slot | writes rd ← the 12-bit value sign-extended; runs the instruction at `slot` |
//! | `l` | n0 n1 n2, slot | writes rd ← a long value: these low 12 bits, the rest from the `m` (and `h`) before it; runs `slot` |
//! | `u` | n0 n1 n2, slot | writes rd's low 12 bits, keeping bits 12..31 (a value whose upper bits equal rd's old ones: `addi a5, a5, 4` on a pointer); runs `slot` |
//! | `m` | m3 m4, mup, mslot | carries bits 12..19 of a long value (mup: bits 20..31 all 0, all 1, or from the `h` before); re-decodes `mslot` for rd |
//! | `h` | h5 h6 h7 | carries bits 20..31 of a long value |
//! | `lk` | lkslot | writes rd ← pc + 4 of the jump at `lkslot` (the link) |
//! | `x` | head rhi rlo, xslot | moves the pc to another ROM row and runs `xslot` there (user code) |
//! | `n` | slot | runs `slot` (the previous instruction wrote no register) |
//! | `o` | n0 n1, slot | is a console byte (the host prints it); runs `slot` |
//! | `t` | cause | reports a trap (mcause) or the exit (cause 9); `w1 w2 w3` with its value follow |
//! | `w1 w2 w3` | n0..n2 / n3..n5 / n6 n7 wslot | stage a 32-bit word (a byte or halfword store's merged word, a trap value); `w3` with a slot commits the store at `wslot` |
//! | `bl` | bank head rhi rlo | boot: writes the staged row (the `bp` pieces) to a RAM line |
//! | `bp` | piece p0 p1 | boot: stages two nibbles of a ROM row or RAM line |
//! | `bc` | head rhi rlo | boot: commits the staged ROM row (eight instructions) |
//! | `xm` | rlo, xslot | as `x`, into millicode row `rlo` (the upper half of ROM row 15·128 + rlo) |
//! | `fz` | fslot | the store at `fslot` missed the line cache: claims the line's slot, clears it, examines word 0 |
//! | `fs` | fk, fslot | a line fill skips a zero word: examines word `fk` |
//! | `f3` | n6 n7, fw, fslot | as `w3`, and the staged word fills word `fw` of the store's line; examines `fw + 1` |
//! | `rr` | fslot | the line is filled: runs the store at `fslot` again (nothing retired meanwhile) |
//!
//! The pc is `ROM_BASE + 32·row + 4·slot`: the row lives in the chip's `pc_base` memory
//! (written by `x` and `xm`), the slot travels in every token that starts an instruction. Slot 8
//! means "the next row, slot 0": the pass that consumes it runs that instruction, the row
//! one past `pc_base`'s (the chip's `pc_off` says so until the next `x`/`xm`); slot 8 one
//! past user code's last row traps. The next row's slot 0 once more before an `x`/`xm` is
//! slot 9 (the pass that chose it read `pc_off`): its pass only moves the pc (`x`).
//! Millicode shares the pcs of the ROM's last head's first rows (`weightgen`'s `rv32im::millicode`);
//! `xm` instead of `x` says the pc is in millicode.
//!
//! A line fill (`weightgen`'s `rv32im::mem`) costs two passes, plus one per zero word but the last
//! and three per other word (`w1 w2 f3`): a missing store is fetched again by every fill pass (its
//! slot rides in `fslot`), so each pass knows the line without a memory of its own.

use crate::token::{ChipToken, FieldDef, KindDef, TokenSpec};

/// Field indices (the order of [`spec`]'s fields).
pub mod field {
    pub const N: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
    pub const SLOT: usize = 8;
    pub const M3: usize = 9;
    pub const M4: usize = 10;
    pub const MUP: usize = 11;
    pub const MSLOT: usize = 12;
    pub const H: [usize; 3] = [13, 14, 15];
    pub const LKSLOT: usize = 16;
    pub const HEAD: usize = 17;
    pub const RHI: usize = 18;
    pub const RLO: usize = 19;
    pub const XSLOT: usize = 20;
    pub const CAUSE: usize = 21;
    pub const WSLOT: usize = 22;
    pub const BBANK: usize = 23;
    pub const BHEAD: usize = 24;
    pub const BRHI: usize = 25;
    pub const BRLO: usize = 26;
    pub const PIECE: usize = 27;
    pub const P0: usize = 28;
    pub const P1: usize = 29;
    pub const FK: usize = 30;
    pub const FSLOT: usize = 31;
    pub const FW: usize = 32;
}

/// Kind indices (the order of [`spec`]'s kinds).
pub mod kind {
    pub const S: usize = 0;
    pub const L: usize = 1;
    pub const M: usize = 2;
    pub const H: usize = 3;
    pub const LK: usize = 4;
    pub const X: usize = 5;
    pub const N: usize = 6;
    pub const O: usize = 7;
    pub const T: usize = 8;
    pub const W1: usize = 9;
    pub const W2: usize = 10;
    pub const W3: usize = 11;
    pub const BL: usize = 12;
    pub const BP: usize = 13;
    pub const BC: usize = 14;
    pub const XM: usize = 15;
    pub const FZ: usize = 16;
    pub const FS: usize = 17;
    pub const F3: usize = 18;
    pub const RR: usize = 19;
    pub const U: usize = 20;
}

/// `mup` values.
pub mod up {
    pub const ZERO: usize = 0;
    pub const ONES: usize = 1;
    pub const FROM_H: usize = 2;
}

/// Slot value meaning "the next ROM row, slot 0".
pub const NEXT_ROW: usize = 8;
/// Slot value meaning "the next ROM row, slot 0" where the row already moved on by a
/// [`NEXT_ROW`] slot since the last `x`/`xm`: the pass that consumes it runs nothing and
/// moves the row by an `x` (a rebase). The pass that chooses the token knows which of the
/// two it is (it read `pc_off`); the chip counts a row's moves to one.
pub const REBASE: usize = 9;

/// The `t` cause reporting a normal exit (0..8 are mcause exception codes).
pub const CAUSE_EXIT: usize = 9;

/// ROM rows: 16 heads × 128 rows of 8 instructions (64 KiB; millicode sits beside them).
pub const ROM_ROWS: usize = 2048;
/// Instructions per ROM row.
pub const ROW_SLOTS: usize = 8;
/// Pieces (two nibbles each) that stage one ROM row.
pub const ROW_PIECES: usize = 32;
/// RAM banks (one chip layer each) of 16 heads × 128 lines.
pub const RAM_BANKS: usize = 4;
/// Words per RAM line (one GDN row of a bank).
pub const LINE_WORDS: usize = 8;

/// The chip's token vocabulary.
pub fn spec() -> TokenSpec {
    let f = |name: &str, size: usize| FieldDef {
        name: name.into(),
        size,
    };
    let mut fields: Vec<FieldDef> = (0..8).map(|i| f(&format!("n{i}"), 16)).collect();
    fields.extend([
        f("slot", 10),
        f("m3", 16),
        f("m4", 16),
        f("mup", 3),
        f("mslot", 8),
        f("h5", 16),
        f("h6", 16),
        f("h7", 16),
        f("lkslot", 8),
        f("head", 16),
        f("rhi", 8),
        f("rlo", 16),
        f("xslot", 8),
        f("cause", 10),
        f("wslot", 9),
        f("bbank", RAM_BANKS),
        f("bhead", 16),
        f("brhi", 8),
        f("brlo", 16),
        f("piece", ROW_PIECES),
        f("p0", 16),
        f("p1", 16),
        f("fk", LINE_WORDS),
        f("fslot", ROW_SLOTS),
        f("fw", LINE_WORDS),
    ]);
    let k = |name: &str, fields: &[usize]| KindDef {
        name: name.into(),
        fields: fields.to_vec(),
    };
    use field::*;
    let kinds = vec![
        k("s", &[N[0], N[1], N[2], SLOT]),
        k("l", &[N[0], N[1], N[2], SLOT]),
        k("m", &[M3, M4, MUP, MSLOT]),
        k("h", &[H[0], H[1], H[2]]),
        k("lk", &[LKSLOT]),
        k("x", &[HEAD, RHI, RLO, XSLOT]),
        k("n", &[SLOT]),
        k("o", &[N[0], N[1], SLOT]),
        k("t", &[CAUSE]),
        k("w1", &[N[0], N[1], N[2]]),
        k("w2", &[N[3], N[4], N[5]]),
        k("w3", &[N[6], N[7], WSLOT]),
        k("bl", &[BBANK, BHEAD, BRHI, BRLO]),
        k("bp", &[PIECE, P0, P1]),
        k("bc", &[HEAD, RHI, RLO]),
        k("xm", &[RLO, XSLOT]),
        k("fz", &[FSLOT]),
        k("fs", &[FK, FSLOT]),
        k("f3", &[N[6], N[7], FW, FSLOT]),
        k("rr", &[FSLOT]),
        k("u", &[N[0], N[1], N[2], SLOT]),
    ];
    TokenSpec { fields, kinds }
}

/// A token of `kind` with `values` in the kind's field order.
pub fn token(kind: usize, values: &[usize]) -> ChipToken {
    ChipToken {
        kind,
        values: values.to_vec(),
    }
}

/// A ROM row number split into the chip's (head, rhi, rlo) digits.
pub fn row_digits(row: usize) -> [usize; 3] {
    [row >> 7, (row >> 4) & 7, row & 15]
}

/// The ROM row number of (head, rhi, rlo) digits.
pub fn row_of(head: usize, rhi: usize, rlo: usize) -> usize {
    (head << 7) | (rhi << 4) | rlo
}

/// Nibble `i` of a word.
pub fn nibble(word: u32, i: usize) -> usize {
    ((word >> (4 * i)) & 15) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_consistent() {
        let s = spec();
        assert_eq!(s.kinds[kind::BC].name, "bc");
        assert_eq!(s.fields[field::P1].name, "p1");
        assert_eq!(s.fields[field::BBANK].size, RAM_BANKS);
        for r in [0, 1, 127, 128, 2047] {
            let [h, a, b] = row_digits(r);
            assert_eq!(row_of(h, a, b), r);
        }
        assert_eq!(s.kinds[kind::RR].name, "rr");
        assert_eq!(s.fields[field::FSLOT].name, "fslot");
        // Every chip token is a row of the spliced checkpoint's embedding and lm_head
        // (197,612: the slot field's tenth value, REBASE, added 12,545).
        assert!(s.vocab_size() < 200_000, "{}", s.vocab_size());
        assert_eq!(s.kinds[kind::U].name, "u");
    }
}

//! The chip's millicode: DIV, DIVU, REM and REMU as a routine kept beside user code.
//!
//! A ROM row holds eight user instructions in entries 0..63 and its anchor in the last
//! two; the millicode lives in the entries between (64..125) of the first [`ROWS`] rows
//! of the ROM's last head, so user code has the whole 64 KiB. Millicode pcs are those
//! rows' pcs: the chip's mode (kept in `pc_base`, set by `xm` tokens, cleared by `x`)
//! says which half a fetch reads. Entries 64..125 hold seven instructions and six
//! nibbles, so each row's eighth millicode instruction must have a zero top byte.
//!
//! A division whose quotient is 0 or 1 never comes here: the chip computes it in the pass
//! that runs it (`retire`; most divisions in real code have short quotients). Any other
//! division instruction in user code writes the caller's register numbers and return pc
//! into the `ctx` memories and jumps straight to its entry, slot 0 of millicode row
//! [`ENTRY_ROWS`]` · (funct3 & 3)` (DIV, DIVU, REM, REMU). The routine
//! (`firmware/millicode/division.S`) reads the operands through the register window
//! (x29, x30), writes the result to x31 (the caller's rd) and returns with `ecall`. It
//! divides by radix-16 digits from the top, each digit three instructions of the chip's
//! division digit (`dquo`, `dstep`, `dacc`: custom-0, decoded in millicode only; the
//! `digit` module), and the last long division's operands and results stay in shadow
//! registers, so a quotient and a remainder of the same operands cost one division.
//! [`WORDS`] is that file assembled; a test re-assembles it and compares. The words are
//! part of the chip's weights: a `bc` token that commits one of these rows adds them.

/// The ROM row the millicode starts in: the first row of the ROM's last head (part of
/// the token format: an `xm` token's row is this plus its `rlo` digit).
pub const FIRST_ROW: usize = inband_chip::rv32im::MILLICODE_FIRST_ROW;

/// Where the millicode sits: the pc of [`FIRST_ROW`].
pub const BASE: u32 = inband_firmware::memory_map::ROM_BASE + 32 * FIRST_ROW as u32;

/// ROM rows whose upper halves may hold millicode: an `xm` token carries the row's `rlo`
/// digit only, so they are the 16 rows from [`FIRST_ROW`] (whose `rlo` is 0).
pub const ROWS: usize = 16;

/// Millicode rows per division entry: entry `funct3 & 3` starts row `ENTRY_ROWS · (funct3
/// & 3)` (the source aligns each to 64 bytes), so the `xm` token of a division names its
/// entry's row, and no jump table costs a pass.
pub const ENTRY_ROWS: usize = 2;

// Entries DIV, DIVU, REM, REMU at rows 0, 2, 4, 6: an `xm` token's rlo names one of ROWS.
const _: () = assert!(3 * ENTRY_ROWS < ROWS, "a division entry past the millicode's rows");

/// The millicode source.
pub const SOURCE: &str = include_str!("../../../firmware/millicode/division.S");

/// The path of the source inside the repository (for re-assembling it).
pub fn source_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware/millicode/division.S")
}

/// The assembled routine, one word per instruction from [`BASE`].
pub const WORDS: &[u32] = &[
    0x000ec663, 0x000f4463, 0x0380006f, 0x000f0e63, 0x0f0000ef, 0x00c5c6b3, 0x00080f93, 0x00068463, 0x41000fb3,
    0x00000073, 0xfff00f93, 0x00000073, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0xfe0f04e3, 0x00ee9863,
    0x00ff1663, 0x00080f93, 0x00000073, 0x124000ef, 0x00080f93, 0x00000073, 0x00000013, 0x00000013, 0x00000013,
    0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x000ec663, 0x000f4463, 0x0380006f, 0x000f0e63,
    0x070000ef, 0x00058663, 0x41100fb3, 0x00000073, 0x00088f93, 0x00000073, 0x000e8f93, 0x00000073, 0x00000013,
    0x00000013, 0x00000013, 0x00000013, 0x00ee9863, 0x00ff1663, 0x00088f93, 0x00000073, 0x000f0863, 0x0a4000ef,
    0x00088f93, 0x00000073, 0x000e8f93, 0x00000073, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013,
    0x00000013, 0x000ea593, 0x000f2613, 0x00059663, 0x000e8293, 0x0080006f, 0x41d002b3, 0x00061663, 0x000f0313,
    0x0080006f, 0x41e00333, 0x00e29663, 0x00f31463, 0x00008067, 0x00028713, 0x00030793, 0x00f77863, 0x00000813,
    0x00070893, 0x00008067, 0x00175993, 0x02f9f863, 0x40f708b3, 0x00100813, 0x00008067, 0x00000013, 0x00000013,
    0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x000e8713, 0x000f0793, 0x01075913, 0x06f96463, 0x0ef7068b,
    0x0ef7188b, 0x00d0280b, 0x0cf8868b, 0x0cf8988b, 0x00d8280b, 0x0af8868b, 0x0af8988b, 0x00d8280b, 0x08f8868b,
    0x08f8988b, 0x00d8280b, 0x06f8868b, 0x00d8280b, 0x06f8988b, 0x04f8868b, 0x04f8988b, 0x00d8280b, 0x02f8868b,
    0x02f8988b, 0x00d8280b, 0x00f8868b, 0x00f8988b, 0x00d8280b, 0x00008067, 0x06f7068b, 0x06f7188b, 0x00d0280b,
    0xfcdff06f,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_entry_row_holds_code() {
        assert!(WORDS.len() > 3 * ENTRY_ROWS * 8, "the REMU entry's row is empty");
    }

    #[test]
    fn millicode_rows_differ_in_rlo_only() {
        assert_eq!(super::super::tokens::row_digits(FIRST_ROW)[2], 0);
        assert_eq!(BASE, inband_firmware::memory_map::ROM_BASE + 32 * FIRST_ROW as u32);
    }

    #[test]
    fn every_rows_eighth_instruction_has_a_zero_top_byte() {
        assert!(WORDS.len() <= ROWS * 8, "the millicode outgrew its {ROWS} rows");
        for (i, w) in WORDS.iter().enumerate().skip(7).step_by(8) {
            assert_eq!(
                w >> 24,
                0,
                "millicode word {i} ({w:#010x}) sits where only six nibbles are kept"
            );
        }
    }

    #[test]
    fn words_are_the_assembled_source() {
        let toolchain = inband_firmware::Toolchain::locate(None).expect("the RISC-V toolchain (scripts/setup.sh)");
        let mut words = toolchain
            .assemble_flat(&source_path(), BASE)
            .expect("the millicode assembles");
        // (The linked section ends in padding: zero words no row needs.)
        while words.last() == Some(&0) {
            words.pop();
        }
        assert!(
            words == WORDS,
            "firmware/millicode/division.S changed: WORDS must be\n{}",
            words
                .iter()
                .map(|w| format!("{w:#010x}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

//! The chip's millicode: DIV, DIVU, REM and REMU as a routine kept beside user code.
//!
//! A ROM row holds eight user instructions in entries 0..63 and its anchor in the last
//! two; the millicode lives in the entries between (64..125) of the first [`ROWS`] rows
//! of the ROM's last head, so user code has the whole 64 KiB. Millicode pcs are those
//! rows' pcs: the chip's mode (kept in `pc_base`, set by `xm` tokens, cleared by `x`)
//! says which half a fetch reads. Entries 64..125 hold seven instructions and six
//! nibbles, so each row's eighth millicode instruction must have a zero top byte.
//!
//! A division instruction in user code writes the caller's register numbers and return
//! pc into the `ctx` memories and jumps to entry `funct3 & 3` (a row of four jumps at
//! [`BASE`]). The routine (`firmware/millicode/division.S`) reads the operands through
//! the register window (x29, x30), writes the result to x31 (the caller's rd) and returns
//! with `ecall`. It divides over the quotient's bits only (most divisions in real code
//! have short quotients), and the last division's operands and results stay in shadow
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

/// The millicode source.
pub const SOURCE: &str = include_str!("../../../firmware/millicode/division.S");

/// The path of the source inside the repository (for re-assembling it).
pub fn source_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware/millicode/division.S")
}

/// The assembled routine, one word per instruction from [`BASE`].
pub const WORDS: &[u32] = &[
    0x0880006f, 0x01c0006f, 0x0d80006f, 0x0540006f, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x020f0063,
    0x00ee9863, 0x00ff1663, 0x00080f93, 0x00000073, 0x12c000ef, 0x00080f93, 0x00000073, 0xfff00f93, 0x00000073,
    0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x020f0063, 0x00ee9863, 0x00ff1663,
    0x00088f93, 0x00000073, 0x0ec000ef, 0x00088f93, 0x00000073, 0x000e8f93, 0x00000073, 0x000ecc63, 0x000f4a63,
    0xf91ff06f, 0x00000013, 0x00000013, 0x00000013, 0x000e8293, 0x000f0313, 0x02030863, 0x41f2d593, 0x41f35613,
    0x00b2c2b3, 0x40b282b3, 0x00c34333, 0x40c30333, 0x078000ef, 0x00c5c6b3, 0x00d843b3, 0x40d38fb3, 0x00000073,
    0xfff00f93, 0x00000073, 0x020ec063, 0x000f4e63, 0xf79ff06f, 0x00000013, 0x00000013, 0x00000013, 0x00000013,
    0x00000013, 0x000e8293, 0x000f0313, 0x02030663, 0x41f2d593, 0x41f35613, 0x00b2c2b3, 0x40b282b3, 0x00c34333,
    0x40c30333, 0x018000ef, 0x00b8c433, 0x40b40fb3, 0x00000073, 0x000e8f93, 0x00000073, 0x00e29663, 0x00f31463,
    0x00008067, 0x00028713, 0x00030793, 0x0180006f, 0x00000013, 0x00000013, 0x00000013, 0x000e8713, 0x000f0793,
    0x00000813, 0x02f76263, 0x00175913, 0x02f96263, 0x00070893, 0x00078313, 0x0088d913, 0x02696063, 0x00831313,
    0xff5ff06f, 0x00070893, 0x00008067, 0x40f708b3, 0x00100813, 0x00008067, 0x0018d913, 0x00696c63, 0x00131313,
    0xff5ff06f, 0x00000013, 0x00000013, 0x00000013, 0x00181813, 0x0068e663, 0x406888b3, 0x00186813, 0x00135313,
    0xfef376e3, 0x00008067, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
];

#[cfg(test)]
mod tests {
    use super::*;

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
        let words = toolchain
            .assemble_flat(&source_path(), BASE)
            .expect("the millicode assembles");
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

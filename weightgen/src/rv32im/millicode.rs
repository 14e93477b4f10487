//! The chip's millicode: DIV, DIVU, REM and REMU as a routine in the ROM's last head.
//!
//! A division instruction in user code writes the caller's register numbers and return
//! pc into the `ctx` memories and jumps to entry `funct3 & 3` (a row of four jumps at
//! [`BASE`]). The routine (`firmware/millicode/division.S`) reads the operands through
//! the register window (x29, x30), writes the result to x31 (the caller's rd) and returns
//! with `ecall`. It divides over the quotient's bits only (most divisions in real code
//! have short quotients), and the last division's operands and results stay in shadow
//! registers, so a quotient and a remainder of the same operands cost one division.
//! [`WORDS`] is that file assembled; a test re-assembles it and compares.

/// Where the millicode sits: the first row of the ROM's last head.
pub const BASE: u32 = inband_firmware::memory_map::ROM_BASE + 15 * 128 * 32;

/// The millicode source.
pub const SOURCE: &str = include_str!("../../../firmware/millicode/division.S");

/// The path of the source inside the repository (for re-assembling it).
pub fn source_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware/millicode/division.S")
}

/// The assembled routine, one word per instruction from [`BASE`].
pub const WORDS: &[u32] = &[
    0x0900006f, 0x01c0006f, 0x0cc0006f, 0x0540006f, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x020f0463,
    0x00ee9863, 0x00ff1663, 0x00080f93, 0x00000073, 0x000e8293, 0x000f0313, 0x104000ef, 0x00038f93, 0x00000073,
    0xfff00f93, 0x00000073, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x020f0463, 0x00ee9863, 0x00ff1663,
    0x00088f93, 0x00000073, 0x000e8293, 0x000f0313, 0x0c4000ef, 0x00040f93, 0x00000073, 0x000e8f93, 0x00000073,
    0x000e8293, 0x000f0313, 0x02030a63, 0x41f2d593, 0x41f35613, 0x00b2c2b3, 0x40b282b3, 0x00c34333, 0x40c30333,
    0x060000ef, 0x00c5c6b3, 0x00d3c3b3, 0x40d383b3, 0x00038f93, 0x00000073, 0xfff00f93, 0x00000073, 0x000e8293,
    0x000f0313, 0x02030863, 0x41f2d593, 0x41f35613, 0x00b2c2b3, 0x40b282b3, 0x00c34333, 0x40c30333, 0x01c000ef,
    0x00b44433, 0x40b40433, 0x00040f93, 0x00000073, 0x000e8f93, 0x00000073, 0x02e29663, 0x02f31463, 0x00080393,
    0x00088413, 0x00008067, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00000013, 0x00028713,
    0x00030793, 0x00000393, 0x0662e863, 0x0012d913, 0x06696c63, 0x00030513, 0x00000493, 0x0082d913, 0x00a96e63,
    0x00851513, 0x00848493, 0xff1ff06f, 0x00000013, 0x00000013, 0x00000013, 0x0012d913, 0x00a96e63, 0x00151513,
    0x00148493, 0xff1ff06f, 0x00000013, 0x00000013, 0x00000013, 0x00139393, 0x00a2e663, 0x40a282b3, 0x0013e393,
    0x00155513, 0xfff48493, 0xfe04d4e3, 0x00028413, 0x00038813, 0x00040893, 0x00008067, 0x00100393, 0x406282b3,
    0xfe9ff06f, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
];

#[cfg(test)]
mod tests {
    use super::*;

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

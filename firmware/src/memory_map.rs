//! The one memory map every engine shares: the golden reference, the chip and the
//! linker script of every program (`runtime/link.ld.in` is filled in from here).
//!
//! ```text
//! 0x0000_0000 .. 0x0001_0000   unmapped (null pointers trap)
//! 0x0001_0000 .. 0x0002_0000   ROM, 64 KiB: program code, execute-only
//! 0x0002_0000 .. 0x0004_0000   unmapped
//! 0x0004_0000 .. 0x0008_0000   RAM, 256 KiB: rodata, data, bss, heap, stack (top)
//! 0x1000_0000                  console: a byte store prints that byte
//! 0x1000_0004                  exit: a word store halts with that exit code
//! ```
//!
//! Code is execute-only so that instruction fetch and data access never touch the
//! same storage (the chip keeps them in different places). Misaligned accesses
//! trap; so does every access outside these regions.

/// First byte of ROM (`.text`). Programs start executing here.
pub const ROM_BASE: u32 = 0x0001_0000;
/// ROM size in bytes: 16384 instructions, the chip's whole ROM (its millicode sits beside
/// them, in the same rows).
pub const ROM_SIZE: u32 = 0x0001_0000;
/// First byte of RAM (aligned to its size, so the chip tests the region with one pattern).
pub const RAM_BASE: u32 = 0x0004_0000;
/// RAM size in bytes (four chip RAM banks of 2048 lines of eight words); the initial stack
/// pointer is `RAM_BASE + RAM_SIZE`.
pub const RAM_SIZE: u32 = 0x0004_0000;
/// Storing a byte here writes it to the console.
pub const MMIO_CONSOLE_TX: u32 = 0x1000_0000;
/// Storing a word here ends the program with that word as its exit code.
pub const MMIO_EXIT: u32 = 0x1000_0004;

/// One past the last byte of ROM.
pub const ROM_END: u32 = ROM_BASE + ROM_SIZE;
/// One past the last byte of RAM: the initial stack pointer.
pub const RAM_END: u32 = RAM_BASE + RAM_SIZE;

/// What an address refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Region {
    /// Byte offset into ROM.
    Rom(u32),
    /// Byte offset into RAM.
    Ram(u32),
    /// The console transmit register.
    ConsoleTx,
    /// The exit register.
    Exit,
    /// Nothing is mapped here.
    Unmapped,
}

/// Classifies a byte address.
pub fn region(addr: u32) -> Region {
    if (ROM_BASE..ROM_END).contains(&addr) {
        Region::Rom(addr - ROM_BASE)
    } else if (RAM_BASE..RAM_END).contains(&addr) {
        Region::Ram(addr - RAM_BASE)
    } else if addr == MMIO_CONSOLE_TX {
        Region::ConsoleTx
    } else if addr == MMIO_EXIT {
        Region::Exit
    } else {
        Region::Unmapped
    }
}

/// True when `[addr, addr + len)` lies inside one of ROM or RAM.
pub fn is_backed(addr: u32, len: u32) -> bool {
    let end = addr as u64 + len as u64;
    let inside = |base: u32, limit: u32| addr >= base && end <= limit as u64;
    len == 0 || inside(ROM_BASE, ROM_END) || inside(RAM_BASE, RAM_END)
}

/// The linker script for this map.
pub fn linker_script() -> String {
    include_str!("../runtime/link.ld.in")
        .replace("@ROM_BASE@", &format!("{ROM_BASE:#x}"))
        .replace("@ROM_SIZE@", &format!("{ROM_SIZE:#x}"))
        .replace("@RAM_BASE@", &format!("{RAM_BASE:#x}"))
        .replace("@RAM_SIZE@", &format!("{RAM_SIZE:#x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_classified_at_their_edges() {
        assert_eq!(region(ROM_BASE), Region::Rom(0));
        assert_eq!(region(ROM_END - 1), Region::Rom(ROM_SIZE - 1));
        assert_eq!(region(RAM_BASE), Region::Ram(0));
        assert_eq!(region(RAM_END - 1), Region::Ram(RAM_SIZE - 1));
        assert_eq!(region(RAM_END), Region::Unmapped);
        assert_eq!(region(0), Region::Unmapped);
        assert_eq!(region(MMIO_CONSOLE_TX), Region::ConsoleTx);
        assert_eq!(region(MMIO_EXIT), Region::Exit);
    }

    #[test]
    fn linker_script_has_no_placeholders_left() {
        let script = linker_script();
        for placeholder in ["@ROM_BASE@", "@ROM_SIZE@", "@RAM_BASE@", "@RAM_SIZE@"] {
            assert!(!script.contains(placeholder), "{script}");
        }
        assert!(script.contains(&format!("ORIGIN = {RAM_BASE:#x}")));
    }

    #[test]
    fn platform_sources_agree_with_the_mmio_addresses() {
        let bare = include_str!("../runtime/platform_bare.c");
        assert!(bare.contains(&format!("{MMIO_CONSOLE_TX:#010x}u")));
        assert!(bare.contains(&format!("{MMIO_EXIT:#010x}u")));
    }
}

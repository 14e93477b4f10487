//! Loading an RV32IM ELF into the memory map: each PT_LOAD segment's file bytes at
//! its physical address, the rest up to `p_memsz` zeroed, as qemu does.

use goblin::elf::{header, program_header, Elf};
use thiserror::Error;

use crate::memory_map::{self, RAM_BASE, RAM_SIZE, ROM_BASE, ROM_SIZE};

/// `e_flags` bit saying the code uses compressed (RVC) instructions.
const EF_RISCV_RVC: u32 = 0x1;

/// Why an ELF cannot run on inband.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ElfError {
    #[error("not an ELF file: {0}")]
    Malformed(String),
    #[error("a 64-bit ELF; inband runs 32-bit RISC-V (RV32IM) programs")]
    Not32Bit,
    #[error("not a RISC-V ELF (machine type {0}); build it with `inband build`")]
    NotRiscV(u16),
    #[error("the ELF uses compressed instructions (RVC); build with -march=rv32im")]
    CompressedCode,
    #[error("not an executable ELF (type {0}); link it first")]
    NotExecutable(u16),
    #[error(
        "segment at {addr:#010x} ({size} bytes) lies outside ROM {ROM_BASE:#x}..{:#x} and RAM {RAM_BASE:#x}..{:#x}",
        ROM_BASE + ROM_SIZE,
        RAM_BASE + RAM_SIZE
    )]
    SegmentOutsideMap { addr: u32, size: u32 },
    #[error("segment at {addr:#010x} has more file bytes ({filesz}) than memory bytes ({memsz})")]
    SegmentSizes { addr: u32, filesz: u32, memsz: u32 },
    #[error("segment at {addr:#010x} points past the end of the file")]
    SegmentTruncated { addr: u32 },
    #[error("entry point {0:#010x} is not in ROM")]
    EntryOutsideRom(u32),
    #[error("the ELF has no loadable segments")]
    NothingToLoad,
}

/// A program ready to boot: ROM and RAM contents and the entry point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramImage {
    pub entry: u32,
    /// `ROM_SIZE` bytes.
    pub rom: Vec<u8>,
    /// `RAM_SIZE` bytes.
    pub ram: Vec<u8>,
    /// Bytes of ROM holding code (the highest loaded ROM address minus `ROM_BASE`).
    pub code_bytes: u32,
}

impl ProgramImage {
    /// The 32-bit little-endian word at ROM byte offset `offset`.
    pub fn rom_word(&self, offset: u32) -> u32 {
        let o = offset as usize;
        u32::from_le_bytes(self.rom[o..o + 4].try_into().expect("4 bytes"))
    }
}

/// Parses and loads an ELF file's bytes.
pub fn load_elf(bytes: &[u8]) -> Result<ProgramImage, ElfError> {
    let elf = Elf::parse(bytes).map_err(|e| ElfError::Malformed(e.to_string()))?;
    if elf.is_64 {
        return Err(ElfError::Not32Bit);
    }
    if elf.header.e_machine != header::EM_RISCV {
        return Err(ElfError::NotRiscV(elf.header.e_machine));
    }
    if elf.header.e_flags & EF_RISCV_RVC != 0 {
        return Err(ElfError::CompressedCode);
    }
    if elf.header.e_type != header::ET_EXEC {
        return Err(ElfError::NotExecutable(elf.header.e_type));
    }
    let entry = elf.header.e_entry as u32;
    if !matches!(memory_map::region(entry), memory_map::Region::Rom(_)) {
        return Err(ElfError::EntryOutsideRom(entry));
    }

    let mut image = ProgramImage {
        entry,
        rom: vec![0; ROM_SIZE as usize],
        ram: vec![0; RAM_SIZE as usize],
        code_bytes: 0,
    };
    let mut loaded_any = false;
    for ph in elf
        .program_headers
        .iter()
        .filter(|ph| ph.p_type == program_header::PT_LOAD)
    {
        let addr = ph.p_paddr as u32;
        let (filesz, memsz) = (ph.p_filesz as u32, ph.p_memsz as u32);
        if filesz > memsz {
            return Err(ElfError::SegmentSizes { addr, filesz, memsz });
        }
        if memsz == 0 {
            continue;
        }
        if !memory_map::is_backed(addr, memsz) {
            return Err(ElfError::SegmentOutsideMap { addr, size: memsz });
        }
        let start = ph.p_offset as usize;
        let file_bytes = start
            .checked_add(filesz as usize)
            .and_then(|end| bytes.get(start..end))
            .ok_or(ElfError::SegmentTruncated { addr })?;
        let (memory, offset) = match memory_map::region(addr) {
            memory_map::Region::Rom(o) => {
                image.code_bytes = image.code_bytes.max(o + memsz);
                (&mut image.rom, o as usize)
            }
            memory_map::Region::Ram(o) => (&mut image.ram, o as usize),
            _ => unreachable!("is_backed checked the segment lies in ROM or RAM"),
        };
        memory[offset..offset + filesz as usize].copy_from_slice(file_bytes);
        memory[offset + filesz as usize..offset + memsz as usize].fill(0);
        loaded_any = true;
    }
    if !loaded_any {
        return Err(ElfError::NothingToLoad);
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_with_a_message() {
        let err = load_elf(b"definitely not an elf file").unwrap_err();
        assert!(matches!(err, ElfError::Malformed(_)), "{err}");
        assert!(err.to_string().starts_with("not an ELF file"));
    }

    #[test]
    fn truncated_header_is_refused() {
        let err = load_elf(&[0x7f, b'E', b'L', b'F', 1, 1, 1]).unwrap_err();
        assert!(matches!(err, ElfError::Malformed(_)), "{err}");
    }
}

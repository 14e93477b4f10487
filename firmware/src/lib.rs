//! # inband-firmware
//!
//! Everything on the program side of the machine:
//! - [`memory_map`]: the one memory map (ROM, RAM, stack, console and exit registers)
//!   shared by the golden reference, the chip and the linker script;
//! - [`elf`]: loading an RV32IM ELF into that map (goblin), with clear refusals;
//! - [`toolchain`]: building C into RV32IM ELFs with crt0, a small libc and libgcc,
//!   for the bare-metal map (what inband runs) or the Linux ABI (the qemu oracle);
//! - `examples/` and `isa/`: example C programs and our own ISA test programs.

pub mod elf;
pub mod memory_map;
pub mod sandbox;
pub mod toolchain;

use std::path::PathBuf;

pub use elf::{load_elf, ElfError, ProgramImage};
pub use toolchain::{BuildError, BuildOptions, Flavor, Libc, Toolchain};

/// The folder of example C programs in this source tree.
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// The folder of ISA test programs in this source tree.
pub fn isa_tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("isa")
}

/// Source files with the given extensions in `dir`, sorted by name.
pub fn sources_in(dir: &std::path::Path, extensions: &[&str]) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| extensions.contains(&e))
        })
        .collect();
    files.sort();
    Ok(files)
}

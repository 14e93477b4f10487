//! Resolving a program argument: a C or assembly source is built (bare-metal flavour,
//! -O2, with the C library asked for); anything else is read as an ELF.

use std::path::{Path, PathBuf};

use anyhow::Context;
use inband_firmware::{load_elf, BuildOptions, Flavor, Libc, ProgramImage, Toolchain};

/// True when `path` names a source file that `inband` builds before running.
pub fn is_source(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("c" | "S" | "s"))
}

/// The largest ELF file `inband` reads: far above any program that fits the machine's
/// ROM and RAM with its symbols and debug information, far below what would hurt.
const MAX_ELF_BYTES: u64 = 64 << 20;

/// An ELF file's bytes, refused unread when it is larger than any program can be.
fn read_elf_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size > MAX_ELF_BYTES {
        anyhow::bail!(
            "{} is {size} bytes: no program for a machine with {} KiB of ROM and {} KiB of RAM is larger than {} MiB",
            path.display(),
            inband_firmware::memory_map::ROM_SIZE / 1024,
            inband_firmware::memory_map::RAM_SIZE / 1024,
            MAX_ELF_BYTES >> 20
        );
    }
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Builds (if needed, linking `libc`) and loads the program `path` names.
pub fn load_program(path: &Path, toolchain: Option<&Path>, libc: Libc) -> anyhow::Result<ProgramImage> {
    let bytes = if is_source(path) {
        let tc = Toolchain::locate(toolchain)?.with_options(BuildOptions {
            libc,
            ..Default::default()
        });
        tc.build_to_bytes(&[PathBuf::from(path)], Flavor::BareMetal, "-O2")
            .with_context(|| format!("cannot build {}", path.display()))?
    } else {
        read_elf_file(path)?
    };
    load_elf(&bytes).with_context(|| format!("cannot load {}", path.display()))
}

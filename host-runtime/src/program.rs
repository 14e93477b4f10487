//! Resolving a program argument: a C or assembly source is built (bare-metal flavour,
//! -O2); anything else is read as an ELF.

use std::path::{Path, PathBuf};

use anyhow::Context;
use inband_firmware::{load_elf, Flavor, ProgramImage, Toolchain};

/// True when `path` names a source file that `inband` builds before running.
pub fn is_source(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("c" | "S" | "s"))
}

/// Builds (if needed) and loads the program `path` names.
pub fn load_program(path: &Path, toolchain: Option<&Path>) -> anyhow::Result<ProgramImage> {
    let bytes = if is_source(path) {
        let tc = Toolchain::locate(toolchain)?;
        tc.build_to_bytes(&[PathBuf::from(path)], Flavor::BareMetal, "-O2")
            .with_context(|| format!("cannot build {}", path.display()))?
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    load_elf(&bytes).with_context(|| format!("cannot load {}", path.display()))
}

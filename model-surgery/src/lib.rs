//! # inband-model-surgery
//!
//! Owns checkpoint surgery, behind the `weight-surgery` CLI:
//! - [`synth`]: synthetic Qwen3.5 checkpoints with the exact published layout;
//! - [`splice`]: a chip pack spliced in front of a checkpoint's layers (widened residual,
//!   zero-padded tensors, norms compensated for the wider mean, extended vocabulary and
//!   tokenizer, config.json updated with an `inband` section);
//! - [`strip`]: the base recovered bit for bit;
//! - [`inspect`] and [`verify`]: what a checkpoint is, and whether it is intact;
//! - [`st`]: streaming safetensors writing (reading is `inband_chip::tensor_files`, the one
//!   validating reader of every tool; the spliced layout is `inband_chip::spliced`).
//!
//! Every command writes into a sibling staging folder and renames it into place, so an
//! interrupted run never leaves something that looks complete, and never modifies its inputs.

pub mod inspect;
pub mod splice;
pub mod st;
pub mod strip;
pub mod synth;
pub mod tokenizer;
pub mod verify;

use std::path::{Path, PathBuf};

use inband_chip::staging::{self, StagingError};
use inband_chip::tensor_files::ReadError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum SurgeryError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Config(#[from] inband_qwen35::config::ConfigError),
    #[error(transparent)]
    Pack(#[from] inband_chip::pack::PackError),
    #[error(transparent)]
    Write(#[from] st::WriteError),
    #[error("{0} already exists; choose a new output folder (weight-surgery never overwrites)")]
    OutputExists(PathBuf),
    #[error("verification failed: {0}")]
    Mismatch(String),
}

impl From<ReadError> for SurgeryError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io { path, source } => SurgeryError::Io { path, source },
            ReadError::Invalid(m) => SurgeryError::Invalid(m),
        }
    }
}

/// Runs `fill` on a fresh staging folder beside `out`, then renames it to `out` (see
/// `inband_chip::staging`). `out` must not exist; on any error the staging folder is removed.
pub fn atomic_dir(out: &Path, fill: impl FnOnce(&Path) -> Result<(), SurgeryError>) -> Result<(), SurgeryError> {
    staging::write_dir(out, fill).map_err(|e| match e {
        StagingError::Exists(path) => SurgeryError::OutputExists(path),
        StagingError::Io { path, source } => SurgeryError::Io { path, source },
        StagingError::Fill(e) => e,
    })
}

/// Reads a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, SurgeryError> {
    let text = std::fs::read_to_string(path).map_err(|source| SurgeryError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| SurgeryError::Invalid(format!("{}: not JSON ({e})", path.display())))
}

//! A running machine saved to a file and continued later (`inband run --save-state`,
//! `--resume`): where the host stands in the token protocol, the console output and
//! counts so far, and the engine's whole state as the engine keeps it, so that the
//! continued run is the stopped one, pass for pass. A program longer than one sitting
//! (a device lent for minutes, a wall-clock limit) runs in pieces this way.
//!
//! The file is safetensors: the engine's arrays and the console bytes as tensors, the
//! rest as JSON in its `__metadata__`. It names the chip (its identity) and the program
//! (a digest of its image), and the engine's layout: a state is continued only by the
//! same program in the same chip on an engine of the same layout.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use inband_firmware::ProgramImage;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::machine::RunCounts;
use crate::engine::EngineState;
use crate::tensor_files::TensorFiles;

/// The `format` a saved machine's metadata names.
pub const FORMAT: &str = "inband saved machine";
/// The format's version (a file of another version is refused, not guessed at).
pub const VERSION: u32 = 1;

/// The metadata key holding the JSON of [`Header`].
const HEADER_KEY: &str = "inband";
/// The tensor holding the console output so far.
const CONSOLE: &str = "console";
/// The prefix of the tensors holding the engine's float arrays.
const ENGINE_PREFIX: &str = "engine.";

#[derive(Debug, Error)]
pub enum SaveError {
    #[error("cannot write the machine's state to {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot read a saved machine from {path}: {message}")]
    Read { path: PathBuf, message: String },
}

/// Where the host stands in the token protocol (the fields of the machine that follow
/// the chip's tokens), between two passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPlace {
    /// The token the next pass consumes (its id in the chip vocabulary).
    pub next: u32,
    /// Tokens the engine chose ahead of the host (ids).
    pub ahead: Vec<u32>,
    pub base_row: usize,
    pub row_moved: bool,
    pub in_millicode: bool,
    pub in_fill: bool,
    pub in_flight: Option<u32>,
    pub started_at: u64,
    pub counts: RunCounts,
}

/// The metadata of a saved machine (everything but the arrays).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    chip: String,
    program: String,
    next_pc: u32,
    host: HostPlace,
    engine_layout: String,
    /// The engine's word arrays (small: a GPU machine's control words).
    engine_words: Vec<(String, Vec<u32>)>,
}

/// A machine stopped between two instructions, as it is written to a file.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedMachine {
    /// The chip's identity ([`crate::pack::Manifest::identity`]).
    pub chip: String,
    /// The program's digest ([`program_digest`]).
    pub program: String,
    /// The pc of the instruction the machine runs next.
    pub next_pc: u32,
    pub host: HostPlace,
    pub console: Vec<u8>,
    pub engine: EngineState,
}

/// A digest of everything of a program image that its run depends on.
pub fn program_digest(image: &ProgramImage) -> String {
    let mut h = Sha256::new();
    h.update(image.entry.to_le_bytes());
    h.update(image.code_bytes.to_le_bytes());
    h.update((image.rom.len() as u64).to_le_bytes());
    h.update(&image.rom);
    h.update(&image.ram);
    format!("{:x}", h.finalize())
}

impl SavedMachine {
    /// Writes the machine to `path` whole or not at all: into a file beside it, renamed
    /// over `path` once complete (an interrupted write leaves an older file as it was).
    pub fn write(&self, path: &Path) -> Result<(), SaveError> {
        let error = |source| SaveError::Write {
            path: path.to_path_buf(),
            source,
        };
        let bytes = self.to_bytes().map_err(|e| error(std::io::Error::other(e)))?;
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        std::fs::write(&partial, bytes)
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&partial);
                error(e)
            })
    }

    fn to_bytes(&self) -> Result<Vec<u8>, safetensors::SafeTensorError> {
        let header = Header {
            format: FORMAT.to_string(),
            version: VERSION,
            chip: self.chip.clone(),
            program: self.program.clone(),
            next_pc: self.next_pc,
            host: self.host.clone(),
            engine_layout: self.engine.layout.clone(),
            engine_words: self.engine.words.clone(),
        };
        let metadata = HashMap::from([(
            HEADER_KEY.to_string(),
            serde_json::to_string(&header).expect("a header serialises"),
        )]);
        let floats: Vec<(String, Vec<u8>)> = (self.engine.floats.iter())
            .map(|(name, v)| {
                (
                    format!("{ENGINE_PREFIX}{name}"),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let mut views = vec![(
            CONSOLE.to_string(),
            TensorView::new(Dtype::U8, vec![self.console.len()], &self.console)?,
        )];
        for (name, bytes) in &floats {
            views.push((name.clone(), TensorView::new(Dtype::F32, vec![bytes.len() / 4], bytes)?));
        }
        safetensors::serialize(views, Some(metadata))
    }

    /// Reads a machine written by [`Self::write`], checking the format; nothing in the
    /// file is trusted (the checks against the chip and program come when it resumes).
    pub fn read(path: &Path) -> Result<Self, SaveError> {
        let bad = |message: String| SaveError::Read {
            path: path.to_path_buf(),
            message,
        };
        let files = TensorFiles::open_single(path).map_err(|e| bad(e.to_string()))?;
        let text = files
            .metadata
            .get(HEADER_KEY)
            .ok_or_else(|| bad("not a saved machine (no inband header)".to_string()))?;
        let header: Header =
            serde_json::from_str(text).map_err(|e| bad(format!("its header is not a saved machine's ({e})")))?;
        if header.format != FORMAT || header.version != VERSION {
            return Err(bad(format!(
                "it is {:?} version {}; this inband reads {FORMAT:?} version {VERSION}",
                header.format, header.version
            )));
        }
        let mut console = None;
        let mut floats = BTreeMap::new();
        for (name, entry) in &files.tensors {
            let bytes = files.bytes(name).map_err(|e| bad(e.to_string()))?;
            match (name.strip_prefix(ENGINE_PREFIX), entry.dtype) {
                (None, Dtype::U8) if name == CONSOLE => console = Some(bytes),
                (Some(array), Dtype::F32) => {
                    let v = bytes
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                        .collect();
                    floats.insert(array.to_string(), v);
                }
                _ => return Err(bad(format!("unexpected tensor {name} ({:?})", entry.dtype))),
            }
        }
        Ok(Self {
            chip: header.chip,
            program: header.program,
            next_pc: header.next_pc,
            host: header.host,
            console: console.ok_or_else(|| bad("no console tensor".to_string()))?,
            engine: EngineState {
                layout: header.engine_layout,
                floats: floats.into_iter().collect(),
                words: header.engine_words,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> SavedMachine {
        SavedMachine {
            chip: "c0ffee".into(),
            program: "f00d".into(),
            next_pc: 0x124,
            host: HostPlace {
                next: 7,
                ahead: vec![3, 9],
                base_row: 4,
                row_moved: true,
                in_millicode: false,
                in_fill: true,
                in_flight: None,
                started_at: 99,
                counts: RunCounts {
                    retired: 12,
                    passes: 20,
                    ..Default::default()
                },
            },
            console: b"hello\n".to_vec(),
            engine: EngineState {
                layout: "test layout".into(),
                floats: vec![("a".into(), vec![1.0, -0.0, 3.5]), ("b".into(), vec![])],
                words: vec![("ctl".into(), vec![1, 2, 3, 4])],
            },
        }
    }

    #[test]
    fn a_saved_machine_reads_back_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.state");
        let m = machine();
        m.write(&path).unwrap();
        let back = SavedMachine::read(&path).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.engine.floats[0].1[1].to_bits(), (-0.0f32).to_bits());
        assert!(!dir.path().join("m.state.partial").exists());
    }

    #[test]
    fn damaged_or_foreign_files_are_refused_with_their_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.state");
        machine().write(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let e = SavedMachine::read(&path).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        std::fs::write(&path, b"not a state").unwrap();
        assert!(SavedMachine::read(&path).is_err());
        let other = safetensors::serialize(Vec::<(String, TensorView)>::new(), None).unwrap();
        std::fs::write(&path, other).unwrap();
        let e = SavedMachine::read(&path).unwrap_err().to_string();
        assert!(e.contains("not a saved machine"), "{e}");
    }

    #[test]
    fn a_write_into_a_missing_folder_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no such folder").join("m.state");
        assert!(machine().write(&path).is_err());
        assert!(!path.exists());
    }
}

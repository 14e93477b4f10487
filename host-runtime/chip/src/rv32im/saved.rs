//! A running machine saved to a file and continued later (`inband run --save-state`,
//! `--resume`): where the host stands in the token protocol, the console output and
//! counts so far, and the engine's whole state as the engine keeps it, so that the
//! continued run is the stopped one, pass for pass. A program longer than one sitting
//! (a device lent for minutes, a wall-clock limit) runs in pieces this way.
//!
//! The file is safetensors: the engine's arrays and the console bytes as tensors, the
//! rest as JSON in its `__metadata__`. An engine's state is mostly zeros (the RAM and ROM
//! rows a program never touched, idle heads), so each array keeps only its blocks of
//! [`BLOCK`] floats that have a nonzero bit, with their block numbers beside them: a
//! saved 0.8b machine is ~1 MB instead of 12 (version 1 files, every float written out,
//! are still read). It names the chip (its identity) and the program
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
/// The format's version (a file of another version is refused, not guessed at; version
/// 1, the dense arrays, is still read).
pub const VERSION: u32 = 2;
/// The first version, whose engine arrays were written whole.
const DENSE_VERSION: u32 = 1;
/// Floats in a block of an engine array: kept where any of its floats has a bit set.
pub const BLOCK: usize = 64;
/// The longest engine array a file may name (a damaged length is refused before its
/// zeros are allocated): 1 GiB of floats, far above any shape's state.
const MAX_ARRAY_FLOATS: usize = 1 << 28;
/// The suffix of the tensor holding an engine array's kept blocks' numbers.
const BLOCKS_SUFFIX: &str = ".blocks";

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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// Each engine float array's length (version 2: the tensors hold its kept blocks).
    #[serde(default)]
    engine_lengths: Vec<(String, usize)>,
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
            engine_lengths: (self.engine.floats.iter())
                .map(|(name, v)| (name.clone(), v.len()))
                .collect(),
        };
        let metadata = HashMap::from([(
            HEADER_KEY.to_string(),
            serde_json::to_string(&header).expect("a header serialises"),
        )]);
        let arrays: Vec<(String, KeptBlocks)> = (self.engine.floats.iter())
            .map(|(name, v)| (format!("{ENGINE_PREFIX}{name}"), KeptBlocks::of(v)))
            .collect();
        let mut views = vec![(
            CONSOLE.to_string(),
            TensorView::new(Dtype::U8, vec![self.console.len()], &self.console)?,
        )];
        for (name, kept) in &arrays {
            let n = kept.numbers.len() / 4;
            views.push((name.clone(), TensorView::new(Dtype::F32, vec![n, BLOCK], &kept.floats)?));
            views.push((
                format!("{name}{BLOCKS_SUFFIX}"),
                TensorView::new(Dtype::U32, vec![n], &kept.numbers)?,
            ));
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
        if header.format != FORMAT || !(DENSE_VERSION..=VERSION).contains(&header.version) {
            return Err(bad(format!(
                "it is {:?} version {}; this inband reads {FORMAT:?} versions {DENSE_VERSION} to {VERSION}",
                header.format, header.version
            )));
        }
        let lengths: BTreeMap<&str, usize> = (header.engine_lengths.iter()).map(|(n, l)| (n.as_str(), *l)).collect();
        let mut console = None;
        let mut floats = BTreeMap::new();
        let mut numbers = BTreeMap::new();
        for (name, entry) in &files.tensors {
            let bytes = files.bytes(name).map_err(|e| bad(e.to_string()))?;
            match (name.strip_prefix(ENGINE_PREFIX), entry.dtype) {
                (None, Dtype::U8) if name == CONSOLE => console = Some(bytes),
                (Some(array), Dtype::F32) => {
                    floats.insert(
                        array.to_string(),
                        words_of(&bytes).map(f32::from_bits).collect::<Vec<_>>(),
                    );
                }
                (Some(array), Dtype::U32) if header.version > DENSE_VERSION => {
                    let array = array
                        .strip_suffix(BLOCKS_SUFFIX)
                        .ok_or_else(|| bad(format!("unexpected tensor {name}")))?;
                    numbers.insert(array.to_string(), words_of(&bytes).collect::<Vec<_>>());
                }
                _ => return Err(bad(format!("unexpected tensor {name} ({:?})", entry.dtype))),
            }
        }
        if header.version > DENSE_VERSION {
            for (array, v) in floats.iter_mut() {
                let len = *lengths
                    .get(array.as_str())
                    .ok_or_else(|| bad(format!("no length for {array}")))?;
                let blocks = numbers
                    .remove(array)
                    .ok_or_else(|| bad(format!("no block numbers for {array}")))?;
                *v = KeptBlocks::expand(v, &blocks, len).map_err(|e| bad(format!("{array}: {e}")))?;
            }
            if let Some(array) = numbers.keys().next() {
                return Err(bad(format!("block numbers without blocks: {array}")));
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

/// The little-endian words of `bytes` (a whole number of them: safetensors checks it).
fn words_of(bytes: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

/// An array's blocks of [`BLOCK`] floats that have a nonzero bit (-0.0 is kept), as
/// bytes: the floats (the last block padded with zeros) and the blocks' numbers.
struct KeptBlocks {
    floats: Vec<u8>,
    numbers: Vec<u8>,
}

impl KeptBlocks {
    fn of(v: &[f32]) -> Self {
        let mut kept = Self {
            floats: Vec::new(),
            numbers: Vec::new(),
        };
        for (i, block) in v.chunks(BLOCK).enumerate() {
            if block.iter().all(|x| x.to_bits() == 0) {
                continue;
            }
            kept.numbers.extend((i as u32).to_le_bytes());
            let padded = block.iter().chain(std::iter::repeat(&0.0)).take(BLOCK);
            kept.floats.extend(padded.flat_map(|x| x.to_le_bytes()));
        }
        kept
    }

    /// The array of `len` floats whose kept blocks are `floats`, numbered `numbers`;
    /// refuses numbers out of order or past the end, and nonzero padding.
    fn expand(floats: &[f32], numbers: &[u32], len: usize) -> Result<Vec<f32>, String> {
        if len > MAX_ARRAY_FLOATS {
            return Err(format!("{len} floats, more than any engine keeps"));
        }
        if floats.len() != numbers.len() * BLOCK {
            return Err(format!("{} floats for {} blocks", floats.len(), numbers.len()));
        }
        let mut v = vec![0.0f32; len.div_ceil(BLOCK) * BLOCK];
        let mut last = None;
        for (block, &n) in floats.chunks(BLOCK).zip(numbers) {
            let at = n as usize * BLOCK;
            if at >= len || last.is_some_and(|l| l >= n) {
                return Err(format!("block {n} out of order or past the array's {len} floats"));
            }
            last = Some(n);
            v[at..at + BLOCK].copy_from_slice(block);
        }
        if v[len..].iter().any(|x| x.to_bits() != 0) {
            return Err("nonzero floats past the array's end".to_string());
        }
        v.truncate(len);
        Ok(v)
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
    fn only_blocks_with_a_nonzero_bit_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.state");
        let mut m = machine();
        let mut big = vec![0.0f32; 100_000 * BLOCK + 5];
        big[7] = 1.5;
        big[70_000 * BLOCK] = -0.0;
        big[100_000 * BLOCK + 4] = 2.0; // in the last, partial block
        m.engine.floats.push(("big".into(), big.clone()));
        m.write(&path).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() < 4096);
        let back = SavedMachine::read(&path).unwrap();
        assert_eq!(back, m);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.engine.floats[2].1), bits(&big));
    }

    /// A file of the first version (every float written out), as session 29's inband
    /// wrote them: read as it was.
    #[test]
    fn a_dense_first_version_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.state");
        let m = machine();
        let mut header: serde_json::Value = serde_json::from_str(&header_of(&m)).unwrap();
        header["version"] = 1.into();
        header.as_object_mut().unwrap().remove("engine_lengths");
        let metadata = HashMap::from([(HEADER_KEY.to_string(), header.to_string())]);
        let bytes: Vec<(String, Vec<u8>)> = (m.engine.floats.iter())
            .map(|(n, v)| {
                (
                    format!("{ENGINE_PREFIX}{n}"),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let mut views = vec![(
            CONSOLE.to_string(),
            TensorView::new(Dtype::U8, vec![m.console.len()], &m.console).unwrap(),
        )];
        for (n, b) in &bytes {
            views.push((n.clone(), TensorView::new(Dtype::F32, vec![b.len() / 4], b).unwrap()));
        }
        std::fs::write(&path, safetensors::serialize(views, Some(metadata)).unwrap()).unwrap();
        assert_eq!(SavedMachine::read(&path).unwrap(), m);
    }

    /// The JSON header `m` is written with.
    fn header_of(m: &SavedMachine) -> String {
        let bytes = m.to_bytes().unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        meta.metadata().as_ref().unwrap()[HEADER_KEY].clone()
    }

    #[test]
    fn blocks_out_of_order_or_past_the_end_are_refused() {
        let block = vec![1.0f32; BLOCK];
        let two = [block.clone(), block].concat();
        assert!(KeptBlocks::expand(&two, &[1, 0], 4 * BLOCK).is_err());
        assert!(KeptBlocks::expand(&two, &[1, 1], 4 * BLOCK).is_err());
        assert!(KeptBlocks::expand(&two, &[0, 4], 4 * BLOCK).is_err());
        assert!(KeptBlocks::expand(&two, &[0], 4 * BLOCK).is_err());
        assert!(KeptBlocks::expand(&two, &[0, 1], BLOCK + 1).is_err()); // padding not zero
        assert!(KeptBlocks::expand(&[], &[], usize::MAX).is_err());
        assert_eq!(
            KeptBlocks::expand(&two, &[0, 3], 4 * BLOCK)
                .unwrap()
                .iter()
                .sum::<f32>(),
            128.0
        );
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

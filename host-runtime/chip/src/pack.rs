//! The chip pack: what weightgen emits and weight-surgery splices.
//!
//! A folder with
//! - `chip.safetensors`: `layers.{i}.{name}` (Qwen3.5 layer tensor names; residual axes
//!   cut to the chip's dimensions, inner axes at the base model's full size),
//!   `embed_tokens` [chip tokens, chip dims], `final_norm` [chip dims];
//! - `manifest.json`: format version, the base config it fits, the residual layout,
//!   the token map, figures and the SHA-256 of every file (and of the tensors file's
//!   256 MiB pieces, which an open checks on every core at once);
//! - `report.txt`: the allocation report.
//!
//! This module is the format and its reader: the compiler (`weightgen`) writes packs
//! through these types, `weight-surgery` splices them, and the runtime reads the
//! manifest back out of a spliced checkpoint's config.json. The manifest holds all a
//! host needs to drive the chip (token map, residual layout, where every memory
//! lives); nothing is rebuilt from the compiler.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use inband_qwen35::TextConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::rv32im::Rv32Map;
use crate::token::TokenSpec;

pub const FORMAT: &str = "inband-chip-pack";
/// 2: the manifest says where every memory lives and what the RV32IM host needs.
/// 3: a token with slot 8 runs slot 0 of the next ROM row (the chip's `pc_off`), where
/// it only moved the row before: the same tokens, another protocol.
/// 4: a second move since the last `x` is a token of its own (slot 9, `REBASE`), where
/// the chip told the two apart from the pass before.
pub const FORMAT_VERSION: u32 = 4;
pub const TENSORS_FILE: &str = "chip.safetensors";
pub const MANIFEST_FILE: &str = "manifest.json";
pub const REPORT_FILE: &str = "report.txt";

#[derive(Debug, Error)]
pub enum PackError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{file} does not match its SHA-256 in the manifest (the pack is damaged or was edited)")]
    Hash { file: String },
    #[error("the chip pack was built for another base (pack vs checkpoint: {differences}); rebuild it with `weightgen --base <checkpoint>`")]
    BaseMismatch { differences: String },
}

/// Maps an I/O error on `path` into a [`PackError`].
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a layer tensor's axes relate to the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualAxis {
    /// A vector of the residual's width, `[H]` (the zero-centred norms).
    Vector,
    /// A matrix reading the residual: its columns are residual dimensions.
    Columns,
    /// A matrix writing the residual: its rows are residual dimensions.
    Rows,
    /// No residual axis (conv taps, A_log, dt_bias, the gated-norm weight).
    None,
}

/// The residual axis of a decoder-layer tensor, by its name relative to the layer.
pub fn residual_axis(name: &str) -> ResidualAxis {
    match name {
        "input_layernorm.weight" | "post_attention_layernorm.weight" => ResidualAxis::Vector,
        "linear_attn.out_proj.weight" | "self_attn.o_proj.weight" | "mlp.down_proj.weight" => ResidualAxis::Rows,
        n if n.starts_with("linear_attn.in_proj_")
            || n.starts_with("self_attn.q_proj")
            || n.starts_with("self_attn.k_proj")
            || n.starts_with("self_attn.v_proj")
            || n == "mlp.gate_proj.weight"
            || n == "mlp.up_proj.weight" =>
        {
            ResidualAxis::Columns
        }
        _ => ResidualAxis::None,
    }
}

/// The base-config fields a pack must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseFit {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub linear_conv_kernel_dim: usize,
    pub rms_norm_eps: f64,
}

impl BaseFit {
    pub fn of(c: &TextConfig) -> Self {
        Self {
            hidden_size: c.hidden_size,
            intermediate_size: c.intermediate_size,
            linear_num_key_heads: c.linear_num_key_heads,
            linear_num_value_heads: c.linear_num_value_heads,
            linear_key_head_dim: c.linear_key_head_dim,
            linear_value_head_dim: c.linear_value_head_dim,
            linear_conv_kernel_dim: c.linear_conv_kernel_dim,
            rms_norm_eps: c.rms_norm_eps,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// The whole file's (a chip's identity is its tensors file's).
    pub sha256: String,
    pub bytes: u64,
    /// Each piece's, where the pack was written with them (since 2026-12-05): an open
    /// checks those, on every core at once, instead of the whole file's one stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pieces: Option<PieceDigests>,
}

/// The SHA-256 of each consecutive `bytes`-byte piece of a file (the last one shorter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PieceDigests {
    pub bytes: u64,
    pub sha256: Vec<String>,
}

/// The pieces a pack's files are hashed in: SHA-256 runs at ~1.2 GB/s on one core here,
/// so the 0.8b tensors file (6.9 GB) took ~6 s of every open as one stream.
pub const PIECE_BYTES: u64 = 1 << 28;
/// The smallest pieces a manifest may name (a damaged one is not followed into millions
/// of hashes).
const MIN_PIECE_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub nonzero_weights: usize,
    pub mlp_neurons: usize,
    pub key_heads: usize,
    pub non_bf16_weights: usize,
}

/// Where one GDN memory of the chip lives: its layer and key heads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlace {
    pub name: String,
    pub layer: usize,
    pub first_key_head: usize,
    pub key_heads: usize,
}

/// manifest.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub chip: String,
    pub generator: String,
    pub base: BaseFit,
    /// The config of the chip layers alone: the base's, at the full residual width
    /// (base + chip dims), every layer linear attention.
    pub layer_config: TextConfig,
    pub chip_layers: usize,
    pub chip_dims: usize,
    /// The residual's mean square is 4^norm_exponent.
    pub norm_exponent: i32,
    /// (chip dimension, value) of each anchor.
    pub anchors: Vec<(usize, f32)>,
    pub tokens: TokenSpec,
    pub chip_vocab: usize,
    /// Chip dimension of each token kind's indicator.
    pub kind_dims: Vec<usize>,
    /// Chip dimensions of each field's values.
    pub field_dims: Vec<Vec<usize>>,
    /// Name of every chip dimension.
    pub dims: Vec<String>,
    /// Storage dtype of every tensor in chip.safetensors.
    pub dtype: String,
    pub figures: Figures,
    pub files: BTreeMap<String, FileDigest>,
    /// Every GDN memory of the chip, in the circuit's order.
    pub memories: Vec<MemoryPlace>,
    /// What a host needs to drive the RV32IM chip (absent for other chips).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rv32im: Option<Rv32Map>,
}

impl Manifest {
    /// The chip's identity: the SHA-256 of its tensors as the pack stores them.
    pub fn identity(&self) -> Option<&str> {
        self.files.get(TENSORS_FILE).map(|d| d.sha256.as_str())
    }

    /// Refuses a base config the pack was not built for.
    pub fn check_base(&self, base: &TextConfig) -> Result<(), PackError> {
        let fit = BaseFit::of(base);
        if fit != self.base {
            let (pack, theirs) = (
                serde_json::to_value(&self.base).unwrap_or_default(),
                serde_json::to_value(&fit).unwrap_or_default(),
            );
            let differences: Vec<String> = pack
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| theirs.get(k.as_str()) != Some(*v))
                .map(|(k, v)| {
                    format!(
                        "{k} {v} vs {}",
                        theirs.get(k.as_str()).unwrap_or(&serde_json::Value::Null)
                    )
                })
                .collect();
            return Err(PackError::BaseMismatch {
                differences: differences.join(", "),
            });
        }
        Ok(())
    }
}

/// The SHA-256 and size of a file, read in chunks (a 9b pack is GBs).
pub fn sha256_file(path: &Path) -> Result<FileDigest, PackError> {
    let (sha256, bytes) = sha256_range(path, 0, u64::MAX)?;
    Ok(FileDigest {
        sha256,
        bytes,
        pieces: None,
    })
}

/// [`sha256_file`] with the digests of its [`PIECE_BYTES`] pieces, hashed on the other
/// cores while one hashes the whole.
pub fn digest_file(path: &Path) -> Result<FileDigest, PackError> {
    let bytes = std::fs::metadata(path).map_err(io(path))?.len();
    let (whole, pieces) = std::thread::scope(|s| {
        let whole = s.spawn(|| sha256_file(path));
        (whole.join(), piece_digests(path, bytes, PIECE_BYTES))
    });
    let mut digest = whole.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
    digest.pieces = Some(PieceDigests {
        bytes: PIECE_BYTES,
        sha256: pieces?,
    });
    Ok(digest)
}

/// The SHA-256 of `len` bytes of the file from `start` (fewer where it ends first), and
/// how many bytes that was.
fn sha256_range(path: &Path, start: u64, len: u64) -> Result<(String, u64), PackError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    file.seek(SeekFrom::Start(start)).map_err(io(path))?;
    let mut file = file.take(len);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 8 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok((format!("{:x}", hasher.finalize()), bytes))
}

/// The digests of the file's consecutive `piece`-byte pieces (its size `bytes`), hashed by
/// as many threads as there are cores, each taking the next piece left.
fn piece_digests(path: &Path, bytes: u64, piece: u64) -> Result<Vec<String>, PackError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let count = bytes.div_ceil(piece) as usize;
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(count);
    let done: Vec<Result<Vec<(usize, String)>, PackError>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= count {
                            return Ok(mine);
                        }
                        mine.push((i, sha256_range(path, i as u64 * piece, piece)?.0));
                    }
                })
            })
            .collect();
        (workers.into_iter())
            .map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut digests = vec![String::new(); count];
    for (i, digest) in done.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().flatten() {
        digests[i] = digest;
    }
    Ok(digests)
}

/// Whether the file at `path` is the one `digest` describes: its size, then its pieces'
/// hashes where the digest has them (on every core), else the whole file's.
fn file_matches(path: &Path, digest: &FileDigest) -> Result<bool, PackError> {
    let bytes = std::fs::metadata(path).map_err(io(path))?.len();
    if bytes != digest.bytes {
        return Ok(false);
    }
    match &digest.pieces {
        None => Ok(sha256_file(path)?.sha256 == digest.sha256),
        // (A damaged manifest's pieces, too small or too few for the file, are no match.)
        Some(p) if p.bytes >= MIN_PIECE_BYTES && p.sha256.len() as u64 == bytes.div_ceil(p.bytes) => {
            Ok(piece_digests(path, bytes, p.bytes)? == p.sha256)
        }
        Some(_) => Ok(false),
    }
}

/// Reads a pack's manifest and checks every file against its hash.
pub fn open_pack(dir: &Path) -> Result<Manifest, PackError> {
    let manifest = read_manifest(dir)?;
    check_files(dir, &manifest)?;
    Ok(manifest)
}

/// Reads a pack's manifest (its format checked; its files not yet: [`check_files`]).
pub fn read_manifest(dir: &Path) -> Result<Manifest, PackError> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| PackError::Invalid {
        path: path.clone(),
        message: format!("not a chip manifest: {e}"),
    })?;
    if manifest.format != FORMAT || manifest.format_version != FORMAT_VERSION {
        return Err(PackError::Invalid {
            path,
            message: format!(
                "format {} version {} (this build reads {FORMAT} version {FORMAT_VERSION})",
                manifest.format, manifest.format_version
            ),
        });
    }
    Ok(manifest)
}

/// Checks every file of the pack in `dir` against the hash its manifest gives.
pub fn check_files(dir: &Path, manifest: &Manifest) -> Result<(), PackError> {
    for (file, digest) in &manifest.files {
        if !file_matches(&dir.join(file), digest)? {
            return Err(PackError::Hash { file: file.clone() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of 3.5 pieces of the smallest size a manifest may name, not all alike.
    fn file(dir: &Path) -> (PathBuf, Vec<u8>) {
        let path = dir.join("f");
        let n = (MIN_PIECE_BYTES * 7 / 2) as u32;
        let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + i / 256) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    #[test]
    fn pieces_are_the_hashes_of_consecutive_slices() {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = file(dir.path());
        let pieces = piece_digests(&path, bytes.len() as u64, MIN_PIECE_BYTES).unwrap();
        let expected: Vec<String> = bytes
            .chunks(MIN_PIECE_BYTES as usize)
            .map(|c| format!("{:x}", Sha256::digest(c)))
            .collect();
        assert_eq!((pieces.len(), &pieces), (4, &expected));
        let whole = digest_file(&path).unwrap();
        assert_eq!(whole.sha256, format!("{:x}", Sha256::digest(&bytes)));
        assert_eq!(whole.pieces.unwrap().sha256.len(), 1);
    }

    #[test]
    fn a_file_matches_its_pieces_or_its_whole_hash_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes) = file(dir.path());
        let mut digest = sha256_file(&path).unwrap();
        let whole = digest.clone();
        digest.pieces = Some(PieceDigests {
            bytes: MIN_PIECE_BYTES,
            sha256: piece_digests(&path, bytes.len() as u64, MIN_PIECE_BYTES).unwrap(),
        });
        assert!(file_matches(&path, &digest).unwrap());
        assert!(file_matches(&path, &whole).unwrap());
        bytes[1_500_000] ^= 1; // inside the second of four pieces
        std::fs::write(&path, &bytes).unwrap();
        assert!(!file_matches(&path, &digest).unwrap());
        assert!(!file_matches(&path, &whole).unwrap());
        let mut damaged = digest.clone();
        damaged.pieces.as_mut().unwrap().bytes = 1;
        assert!(!file_matches(&path, &damaged).unwrap());
        bytes[1_500_000] ^= 1;
        bytes.push(0);
        std::fs::write(&path, &bytes).unwrap();
        assert!(!file_matches(&path, &digest).unwrap());
    }
}

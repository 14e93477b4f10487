//! The chip pack: what weightgen emits and weight-surgery splices.
//!
//! A folder with
//! - `chip.safetensors`: `layers.{i}.{name}` (Qwen3.5 layer tensor names; residual axes
//!   cut to the chip's dimensions, inner axes at the base model's full size),
//!   `embed_tokens` [chip tokens, chip dims], `final_norm` [chip dims];
//! - `manifest.json`: format version, the base config it fits, the residual layout,
//!   the token map, figures and the SHA-256 of every file;
//! - `report.txt`: the allocation report.
//!
//! Written to a sibling folder first and renamed into place, so an interrupted run
//! never leaves something that looks complete.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use inband_circuits::{ChipToken, TokenSpec};
use inband_qwen35::weights::Array;
use inband_qwen35::TextConfig;
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::emit::Chip;
use crate::layout::NORM_EXPONENT;

pub const FORMAT: &str = "inband-chip-pack";
pub const FORMAT_VERSION: u32 = 1;
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
    #[error("the chip pack was built for {pack} but the checkpoint is {base}; rebuild it with `weightgen --base <checkpoint>`")]
    BaseMismatch { pack: String, base: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PackError + '_ {
    move |source| PackError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a layer tensor's axes relate to the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualAxis {
    /// A [H] vector over the residual (the zero-centred norms).
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
    pub sha256: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub nonzero_weights: usize,
    pub mlp_neurons: usize,
    pub key_heads: usize,
    pub non_bf16_weights: usize,
}

/// manifest.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub chip: String,
    pub generator: String,
    pub base: BaseFit,
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
}

impl Manifest {
    /// Refuses a base config the pack was not built for.
    pub fn check_base(&self, base: &TextConfig) -> Result<(), PackError> {
        let fit = BaseFit::of(base);
        if fit != self.base {
            return Err(PackError::BaseMismatch {
                pack: format!("{:?}", self.base),
                base: format!("{fit:?}"),
            });
        }
        Ok(())
    }
}

fn sha256_file(path: &Path) -> Result<FileDigest, PackError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    Ok(FileDigest {
        sha256: format!("{:x}", Sha256::digest(&bytes)),
        bytes: bytes.len() as u64,
    })
}

/// Converts f32 values to little-endian bytes of `dtype` (BF16 or F32).
fn to_bytes(data: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::BF16 => data
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Cuts a full-width layer tensor down to the chip's residual dimensions, checking
/// that the base part is zero.
fn chip_slice(name: &str, a: &Array, hidden: usize) -> Array {
    match residual_axis(name) {
        ResidualAxis::Vector => {
            assert!(
                a.data[..hidden].iter().all(|v| *v == 0.0),
                "{name} touches base dimensions"
            );
            Array::from_vec(&[a.data.len() - hidden], a.data[hidden..].to_vec())
        }
        ResidualAxis::Columns => {
            let (r, c) = a.dims2();
            let mut data = Vec::with_capacity(r * (c - hidden));
            for row in 0..r {
                let full = a.row(row);
                assert!(full[..hidden].iter().all(|v| *v == 0.0), "{name} reads base dimensions");
                data.extend_from_slice(&full[hidden..]);
            }
            Array::from_vec(&[r, c - hidden], data)
        }
        ResidualAxis::Rows => {
            let (r, c) = a.dims2();
            assert!(
                a.data[..hidden * c].iter().all(|v| *v == 0.0),
                "{name} writes base dimensions"
            );
            Array::from_vec(&[r - hidden, c], a.data[hidden * c..].to_vec())
        }
        ResidualAxis::None => a.clone(),
    }
}

/// The pack's tensors, in name order, in memory (F32 values).
pub fn pack_tensors(chip: &Chip) -> Vec<(String, Array)> {
    let mut tensors: Vec<(String, Array)> = lazy_pack_tensors(chip, Dtype::F32)
        .into_iter()
        .map(|(name, t)| (name, Array::from_vec(&t.shape, (t.make)())))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

/// Writes `chip` as a pack at `dir` (replacing a previous pack there).
pub fn write_pack(chip: &Chip, dir: &Path, progress: &dyn Fn(&str)) -> Result<Manifest, PackError> {
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("pack");
    let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    let result = write_into(chip, &staging, progress);
    let manifest = match result {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    if dir.exists() {
        if !dir.join(MANIFEST_FILE).is_file() {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(PackError::Invalid {
                path: dir.to_path_buf(),
                message: "exists and is not a chip pack; refusing to replace it".into(),
            });
        }
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    std::fs::rename(&staging, dir).map_err(io(dir))?;
    Ok(manifest)
}

/// One pack tensor whose bytes are made only when the writer reaches it, so writing a
/// pack holds a single tensor's bytes beside the chip (a 4b or 9b chip's dense layers
/// are many GiB already).
struct LazyTensor<'a> {
    shape: Vec<usize>,
    dtype: Dtype,
    make: Box<dyn Fn() -> Vec<f32> + 'a>,
}

impl safetensors::View for LazyTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(to_bytes(&(self.make)(), self.dtype))
    }

    fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// A layer tensor's shape once cut to the chip's dims (see [`chip_slice`]).
fn sliced_shape(name: &str, shape: &[usize], hidden: usize) -> Vec<usize> {
    match residual_axis(name) {
        ResidualAxis::Vector => vec![shape[0] - hidden],
        ResidualAxis::Columns => vec![shape[0], shape[1] - hidden],
        ResidualAxis::Rows => vec![shape[0] - hidden, shape[1]],
        ResidualAxis::None => shape.to_vec(),
    }
}

/// The pack's tensors as lazy views (the same names and contents as [`pack_tensors`]).
fn lazy_pack_tensors(chip: &Chip, dtype: Dtype) -> Vec<(String, LazyTensor<'_>)> {
    let hidden = chip.layout.hidden;
    let mut tensors = Vec::new();
    for (i, layer) in chip.layers.iter().enumerate() {
        for (name, a, shape) in layer.named_tensor_refs() {
            let shape = sliced_shape(&name, &shape, hidden);
            let key = format!("layers.{i}.{name}");
            let make = Box::new(move || chip_slice(&name, a, hidden).data);
            tensors.push((key, LazyTensor { shape, dtype, make }));
        }
    }
    let vocab = chip.circuit.tokens.vocab_size();
    let embed = move || {
        let tokens = &chip.circuit.tokens;
        let mut data = Vec::with_capacity(vocab * chip.layout.chip_dims);
        for t in 0..vocab {
            let token: ChipToken = tokens.decode(t).expect("in range");
            data.extend(chip.embedding(&token));
        }
        data
    };
    tensors.push((
        "embed_tokens".into(),
        LazyTensor {
            shape: vec![vocab, chip.layout.chip_dims],
            dtype,
            make: Box::new(embed),
        },
    ));
    let dims = chip.layout.chip_dims;
    tensors.push((
        "final_norm".into(),
        LazyTensor {
            shape: vec![dims],
            dtype,
            make: Box::new(move || vec![0.0; dims]),
        },
    ));
    tensors
}

fn write_into(chip: &Chip, dir: &Path, progress: &dyn Fn(&str)) -> Result<Manifest, PackError> {
    let non_bf16 = chip.non_bf16_weights();
    let dtype = if non_bf16 == 0 { Dtype::BF16 } else { Dtype::F32 };
    progress("writing chip.safetensors");
    let views = lazy_pack_tensors(chip, dtype);
    let tensors_path = dir.join(TENSORS_FILE);
    safetensors::serialize_to_file(views, None, &tensors_path).map_err(|e| PackError::Invalid {
        path: tensors_path.clone(),
        message: e.to_string(),
    })?;
    progress("writing report.txt");
    let report_path = dir.join(REPORT_FILE);
    std::fs::write(&report_path, crate::report::report(chip)).map_err(io(&report_path))?;

    let c = &chip.circuit;
    let dim = |s: inband_circuits::Signal| chip.layout.signal_dim[s.0 as usize];
    let mut files = BTreeMap::new();
    files.insert(TENSORS_FILE.to_string(), sha256_file(&tensors_path)?);
    files.insert(REPORT_FILE.to_string(), sha256_file(&report_path)?);
    let manifest = Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        chip: c.name.clone(),
        generator: format!("inband-weightgen {}", env!("CARGO_PKG_VERSION")),
        base: BaseFit::of(&chip.base),
        chip_layers: chip.layers.len(),
        chip_dims: chip.layout.chip_dims,
        norm_exponent: NORM_EXPONENT,
        anchors: chip.layout.anchors.clone(),
        tokens: c.tokens.clone(),
        chip_vocab: c.tokens.vocab_size(),
        kind_dims: (0..c.tokens.kinds.len()).map(|k| dim(c.kind(k))).collect(),
        field_dims: (0..c.tokens.fields.len())
            .map(|f| c.field(f).iter().map(|s| dim(*s)).collect())
            .collect(),
        dims: chip.layout.names.clone(),
        dtype: format!("{dtype:?}"),
        figures: Figures {
            nonzero_weights: chip.nonzero_weights(),
            mlp_neurons: c.neuron_count(),
            key_heads: c.memories.iter().map(|m| m.key_heads).sum(),
            non_bf16_weights: non_bf16,
        },
        files,
    };
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = serde_json::to_string_pretty(&manifest).expect("serialisable");
    std::fs::write(&manifest_path, text).map_err(io(&manifest_path))?;
    Ok(manifest)
}

/// Reads a pack's manifest and checks every file against its hash.
pub fn open_pack(dir: &Path) -> Result<Manifest, PackError> {
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
    for (file, digest) in &manifest.files {
        if sha256_file(&dir.join(file))? != *digest {
            return Err(PackError::Hash { file: file.clone() });
        }
    }
    Ok(manifest)
}

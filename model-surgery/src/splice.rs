//! splice: put a chip pack's layers in front of a checkpoint's layers.
//!
//! The residual widens by the chip's dimensions (appended after the base's); every
//! base tensor with a residual axis is zero-padded, so the base's layers never read
//! or write chip dimensions; the base's RMSNorm gains are compensated for the wider
//! mean (text tokens have zeros in the chip dimensions, so mean(x²) over the wider
//! residual is H/H' of the base's: gains × sqrt(H/H') restore the same output, up to
//! eps); chip tokens are appended to the vocabulary and the tokenizer; the chip layers
//! become layers 0..N. Chip layers only read chip dimensions and base tokens carry none,
//! so on text the chip contributes exactly zero.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use inband_chip::pack::{self, residual_axis, Manifest, ResidualAxis};
use inband_qwen35::checkpoint::INDEX_FILE;
use inband_qwen35::config::{LayerType, TextConfig};
use safetensors::Dtype;
use sha2::{Digest, Sha256};

use crate::st::{self, PlannedTensor, WriteError};
use crate::{atomic_dir, read_json, SurgeryError};
use inband_chip::spliced::{
    classify, is_residual_norm, spliced_shape, BaseShape, InbandSection, TextTensor, BASE_FILES, BASE_NORMS,
    CHIP_FILES, CHIP_SHARD, SECTION_VERSION,
};
use inband_chip::tensor_files::TensorFiles;

/// What goes into one output tensor.
#[derive(Debug, Clone)]
enum Recipe {
    /// A base tensor copied verbatim.
    Copy(String),
    /// A base tensor zero-padded along its residual axis / vocabulary.
    Pad(String, TextTensor),
    /// A base norm, rescaled for the wider mean, then the chip's values.
    Norm(String, Option<String>),
    /// A chip-pack tensor placed in the full width.
    Chip(String, ResidualAxis),
}

/// Everything splice decided before writing a byte.
struct Plan {
    shards: Vec<(String, Vec<PlannedTensor>)>,
    recipes: BTreeMap<String, Recipe>,
    config: serde_json::Value,
    section: InbandSection,
    chip_token_names: Vec<String>,
}

fn invalid(m: impl Into<String>) -> SurgeryError {
    SurgeryError::Invalid(m.into())
}

/// The text config object inside config.json (top level for CausalLM).
fn text_config_mut(config: &mut serde_json::Value) -> &mut serde_json::Value {
    if config.get("text_config").is_some() {
        &mut config["text_config"]
    } else {
        config
    }
}

/// Whether every value of a chip tensor is exactly representable in `dtype`.
fn representable(values: &[f32], dtype: Dtype) -> bool {
    match dtype {
        Dtype::BF16 => values.iter().all(|v| half::bf16::from_f32(*v).to_f32() == *v),
        Dtype::F16 => values.iter().all(|v| half::f16::from_f32(*v).to_f32() == *v),
        _ => true,
    }
}

fn plan(base_dir: &Path, pack_dir: &Path, base: &TensorFiles, chip: &TensorFiles) -> Result<Plan, SurgeryError> {
    let raw_config = read_json(&base_dir.join("config.json"))?;
    if raw_config.get("inband").is_some() {
        return Err(invalid(format!(
            "{} already contains a chip; strip it first (weight-surgery strip)",
            base_dir.display()
        )));
    }
    let (arch, config): (_, TextConfig) = TextConfig::from_checkpoint_value(&raw_config)?;
    let manifest: Manifest = pack::open_pack(pack_dir)?;
    manifest.check_base(&config)?;
    let prefix = arch.text_prefix().to_string();
    let (n_chip, c_dims, v_chip) = (manifest.chip_layers, manifest.chip_dims, manifest.chip_vocab);
    let h = config.hidden_size;
    let embed_name = format!("{prefix}embed_tokens.weight");
    let text_dtype = base.get(&embed_name)?.dtype;
    let base_vocab = base.get(&embed_name)?.shape[0];
    if base_vocab != config.vocab_size {
        return Err(invalid(format!(
            "{embed_name} has {base_vocab} rows but config.json says vocab_size {}",
            config.vocab_size
        )));
    }

    // Base tensors: same shard, renamed and widened.
    let mut shards: BTreeMap<String, Vec<PlannedTensor>> = BTreeMap::new();
    let mut recipes = BTreeMap::new();
    for (name, entry) in &base.tensors {
        let kind = classify(name, &prefix);
        if let TextTensor::Layer(l, _) = &kind {
            if *l >= config.num_hidden_layers {
                return Err(invalid(format!(
                    "{name}: layer {l} beyond num_hidden_layers {}",
                    config.num_hidden_layers
                )));
            }
        }
        let out_name = match &kind {
            TextTensor::Layer(l, inner) => format!("{prefix}layers.{}.{inner}", l + n_chip),
            _ => name.clone(),
        };
        let shape = spliced_shape(&kind, &entry.shape, c_dims, v_chip);
        let (dtype, recipe) = if is_residual_norm(&kind) {
            let chip_part = matches!(kind, TextTensor::FinalNorm).then(|| "final_norm".to_string());
            (Dtype::F32, Recipe::Norm(name.clone(), chip_part))
        } else if kind == TextTensor::Other || shape == entry.shape {
            (entry.dtype, Recipe::Copy(name.clone()))
        } else {
            (entry.dtype, Recipe::Pad(name.clone(), kind.clone()))
        };
        let shard = base.shard_of[name].clone();
        shards.entry(shard).or_default().push(PlannedTensor {
            name: out_name.clone(),
            dtype,
            shape,
        });
        recipes.insert(out_name, recipe);
    }

    // Chip tensors: layers 0..N, in the chip shard; the chip's embedding rows must fit
    // the base's embedding dtype exactly.
    let embed_rows = chip.f32s("embed_tokens")?;
    if !representable(&embed_rows, text_dtype) {
        return Err(invalid(format!(
            "the chip's embedding rows are not exact in the base's {text_dtype:?}"
        )));
    }
    let mut chip_plan = Vec::new();
    for (name, entry) in &chip.tensors {
        let Some(rest) = name.strip_prefix("layers.") else {
            continue;
        };
        let (index, inner) = rest
            .split_once('.')
            .ok_or_else(|| invalid(format!("pack tensor {name}")))?;
        let axis = residual_axis(inner);
        let shape = match axis {
            ResidualAxis::Vector => vec![h + entry.shape[0]],
            ResidualAxis::Columns => vec![entry.shape[0], h + entry.shape[1]],
            ResidualAxis::Rows => vec![h + entry.shape[0], entry.shape[1]],
            ResidualAxis::None => entry.shape.clone(),
        };
        let dtype = if representable(&chip.f32s(name)?, text_dtype) {
            text_dtype
        } else {
            Dtype::F32
        };
        let out_name = format!("{prefix}layers.{index}.{inner}");
        chip_plan.push(PlannedTensor {
            name: out_name.clone(),
            dtype,
            shape,
        });
        recipes.insert(out_name, Recipe::Chip(name.clone(), axis));
    }
    let mut shards: Vec<(String, Vec<PlannedTensor>)> = shards.into_iter().collect();
    shards.push((CHIP_SHARD.to_string(), chip_plan));

    // config.json: wider, deeper, larger vocabulary, and the inband section.
    let mut new_config = raw_config.clone();
    let text = text_config_mut(&mut new_config);
    text["hidden_size"] = serde_json::json!(h + c_dims);
    text["num_hidden_layers"] = serde_json::json!(config.num_hidden_layers + n_chip);
    let mut layer_types = vec![LayerType::LinearAttention; n_chip];
    layer_types.extend(config.layer_types.iter().copied());
    text["layer_types"] = serde_json::to_value(&layer_types).expect("serialisable");
    text["vocab_size"] = serde_json::json!(config.vocab_size + v_chip);
    let chip_token_names: Vec<String> = (0..v_chip)
        .map(|t| {
            let token = manifest.tokens.decode(t).expect("in range");
            crate::tokenizer::chip_token_name(&manifest.tokens.kinds[token.kind].name, &token.values)
        })
        .collect();
    let section = InbandSection {
        format_version: SECTION_VERSION,
        chip: manifest.chip.clone(),
        chip_layers: n_chip,
        chip_dims: c_dims,
        chip_token_offset: config.vocab_size,
        chip_vocab: v_chip,
        text_prefix: prefix,
        base: BaseShape {
            hidden_size: h,
            num_hidden_layers: config.num_hidden_layers,
            vocab_size: config.vocab_size,
            layer_types: config.layer_types.clone(),
            tie_word_embeddings: config.tie_word_embeddings,
        },
        chip_tensors: BTreeMap::new(),
        manifest,
    };
    Ok(Plan {
        shards,
        recipes,
        config: new_config,
        section,
        chip_token_names,
    })
}

/// Streams one output tensor.
struct Producer<'a> {
    base: &'a TensorFiles,
    chip: &'a TensorFiles,
    recipes: &'a BTreeMap<String, Recipe>,
    hidden: usize,
    chip_dims: usize,
    /// sqrt(H / H'): the norm compensation.
    norm_scale: f64,
    chip_hashes: BTreeMap<String, String>,
}

fn io_err(name: &str) -> impl Fn(std::io::Error) -> WriteError + '_ {
    move |source| WriteError::Io {
        path: name.into(),
        source,
    }
}

fn surgery_to_write(e: impl std::fmt::Display) -> WriteError {
    WriteError::Source(e.to_string())
}

impl Producer<'_> {
    fn produce(&mut self, t: &PlannedTensor, out: &mut dyn Write) -> Result<(), WriteError> {
        match self.recipes[&t.name].clone() {
            Recipe::Copy(src) => {
                let e = self.base.get(&src).map_err(surgery_to_write)?;
                let mut buf = Vec::new();
                let total = e.end - e.start;
                let mut at = 0;
                while at < total {
                    let to = (at + (16 << 20)).min(total);
                    self.base.read(e, at, to, &mut buf).map_err(surgery_to_write)?;
                    out.write_all(&buf).map_err(io_err(&t.name))?;
                    at = to;
                }
            }
            Recipe::Pad(src, kind) => self.pad(&src, &kind, t, out)?,
            Recipe::Norm(src, chip_part) => {
                let values = self.base.f32s(&src).map_err(surgery_to_write)?;
                let mut scaled: Vec<f32> = values
                    .iter()
                    .map(|w| ((1.0 + *w as f64) * self.norm_scale - 1.0) as f32)
                    .collect();
                match chip_part {
                    Some(name) => scaled.extend(self.chip.f32s(&name).map_err(surgery_to_write)?),
                    None => scaled.extend(std::iter::repeat_n(0.0, self.chip_dims)),
                }
                out.write_all(&st::encode(&scaled, Dtype::F32))
                    .map_err(io_err(&t.name))?;
            }
            Recipe::Chip(src, axis) => {
                let values = self.chip.f32s(&src).map_err(surgery_to_write)?;
                let h = self.hidden;
                let mut full = Vec::with_capacity(t.shape.iter().product());
                match axis {
                    ResidualAxis::Vector => {
                        full.extend(std::iter::repeat_n(0.0, h));
                        full.extend(&values);
                    }
                    ResidualAxis::Columns => {
                        let cols = t.shape[1] - h;
                        for row in values.chunks(cols) {
                            full.extend(std::iter::repeat_n(0.0, h));
                            full.extend(row);
                        }
                    }
                    ResidualAxis::Rows => {
                        full.extend(std::iter::repeat_n(0.0, h * t.shape[1]));
                        full.extend(&values);
                    }
                    ResidualAxis::None => full.extend(&values),
                }
                let bytes = st::encode(&full, t.dtype);
                self.chip_hashes
                    .insert(t.name.clone(), format!("{:x}", Sha256::digest(&bytes)));
                out.write_all(&bytes).map_err(io_err(&t.name))?;
            }
        }
        Ok(())
    }

    /// Zero-pads a base tensor: extra columns (residual), rows (residual) and, for the
    /// embedding and lm_head, the chip tokens' rows.
    fn pad(&self, src: &str, kind: &TextTensor, t: &PlannedTensor, out: &mut dyn Write) -> Result<(), WriteError> {
        let e = self.base.get(src).map_err(surgery_to_write)?;
        let esize = st::dtype_size(e.dtype);
        let mut buf = Vec::new();
        let axis = match kind {
            TextTensor::Layer(_, inner) => residual_axis(inner),
            _ => ResidualAxis::Columns,
        };
        match axis {
            ResidualAxis::Columns => {
                let (rows, cols) = (e.shape[0], e.shape[1]);
                let row_bytes = (cols * esize) as u64;
                let zeros = vec![0u8; self.chip_dims * esize];
                let batch = ((8 << 20) / row_bytes.max(1)).max(1) as usize;
                let mut r = 0;
                while r < rows {
                    let n = batch.min(rows - r);
                    self.base
                        .read(e, r as u64 * row_bytes, (r + n) as u64 * row_bytes, &mut buf)
                        .map_err(surgery_to_write)?;
                    for row in buf.chunks(row_bytes as usize) {
                        out.write_all(row).map_err(io_err(&t.name))?;
                        out.write_all(&zeros).map_err(io_err(&t.name))?;
                    }
                    r += n;
                }
                if matches!(kind, TextTensor::Embedding | TextTensor::LmHead) {
                    // The chip tokens: zeros in the base dims, the pack's rows in the chip dims.
                    let rows = self.chip.f32s("embed_tokens").map_err(surgery_to_write)?;
                    let base_zeros = vec![0u8; cols * esize];
                    for row in rows.chunks(self.chip_dims) {
                        out.write_all(&base_zeros).map_err(io_err(&t.name))?;
                        out.write_all(&st::encode(row, e.dtype)).map_err(io_err(&t.name))?;
                    }
                }
            }
            ResidualAxis::Rows => {
                let total = e.end - e.start;
                self.base.read(e, 0, total, &mut buf).map_err(surgery_to_write)?;
                out.write_all(&buf).map_err(io_err(&t.name))?;
                out.write_all(&vec![0u8; self.chip_dims * e.shape[1] * esize])
                    .map_err(io_err(&t.name))?;
            }
            ResidualAxis::Vector | ResidualAxis::None => unreachable!("norms and unaxed tensors take other recipes"),
        }
        Ok(())
    }
}

/// Small files of the base copied into the spliced checkpoint (and restored by strip).
fn small_files(dir: &Path) -> Result<Vec<String>, SurgeryError> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|source| SurgeryError::Io {
        path: dir.to_path_buf(),
        source,
    })? {
        let entry = entry.map_err(|source| SurgeryError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && !name.ends_with(".safetensors") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn copy(from: &Path, to: &Path) -> Result<(), SurgeryError> {
    std::fs::copy(from, to).map(|_| ()).map_err(|source| SurgeryError::Io {
        path: from.to_path_buf(),
        source,
    })
}

/// What splice reports.
#[derive(Debug, Clone)]
pub struct SpliceSummary {
    pub chip: String,
    pub chip_layers: usize,
    pub width: (usize, usize),
    pub vocab: (usize, usize),
    pub bytes: u64,
}

/// Splices the pack at `pack_dir` into the checkpoint at `base_dir`, writing `out`.
pub fn splice(
    base_dir: &Path,
    pack_dir: &Path,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SpliceSummary, SurgeryError> {
    // Before reading anything large: never replace, never spend minutes to refuse.
    if out.exists() || out.is_symlink() {
        return Err(SurgeryError::OutputExists(out.to_path_buf()));
    }
    let base = TensorFiles::open(base_dir)?;
    let chip = TensorFiles::open_single(&pack_dir.join(pack::TENSORS_FILE))?;
    let Plan {
        shards,
        recipes,
        mut config,
        mut section,
        chip_token_names,
    } = plan(base_dir, pack_dir, &base, &chip)?;
    let tokenizer_path = base_dir.join("tokenizer.json");
    let tokenizer_text = if tokenizer_path.is_file() {
        crate::tokenizer::check_loads(&tokenizer_path)?;
        Some(
            std::fs::read_to_string(&tokenizer_path).map_err(|source| SurgeryError::Io {
                path: tokenizer_path,
                source,
            })?,
        )
    } else {
        None
    };
    let h = section.base.hidden_size;
    let total: u64 = shards.iter().flat_map(|(_, p)| p).map(|t| t.bytes()).sum();
    let summary = SpliceSummary {
        chip: section.chip.clone(),
        chip_layers: section.chip_layers,
        width: (h, section.width()),
        vocab: (section.base.vocab_size, section.base.vocab_size + section.chip_vocab),
        bytes: total,
    };
    atomic_dir(out, |dir| {
        let mut producer = Producer {
            base: &base,
            chip: &chip,
            recipes: &recipes,
            hidden: h,
            chip_dims: section.chip_dims,
            norm_scale: (h as f64 / section.width() as f64).sqrt(),
            chip_hashes: BTreeMap::new(),
        };
        let mut done = 0u64;
        st::write_sharded(dir, &shards, &mut |t, w| producer.produce(t, w), &mut |b| {
            done += b;
            progress(done, total);
        })?;
        section.chip_tensors = std::mem::take(&mut producer.chip_hashes);

        // The base's small files verbatim, its original norms, and the pack's manifest.
        let base_files = dir.join(BASE_FILES);
        std::fs::create_dir_all(&base_files).map_err(|source| SurgeryError::Io {
            path: base_files.clone(),
            source,
        })?;
        for name in small_files(base_dir)? {
            copy(&base_dir.join(&name), &base_files.join(&name))?;
            if name != "config.json" && name != "tokenizer.json" && name != INDEX_FILE {
                copy(&base_dir.join(&name), &dir.join(&name))?;
            }
        }
        let norms: Vec<PlannedTensor> = base
            .tensors
            .iter()
            .filter(|(n, _)| is_residual_norm(&classify(n, &section.text_prefix)))
            .map(|(n, e)| PlannedTensor {
                name: n.clone(),
                dtype: e.dtype,
                shape: e.shape.clone(),
            })
            .collect();
        st::write_file(&dir.join(BASE_NORMS), &norms, &mut |t, w| {
            w.write_all(&base.bytes(&t.name).map_err(surgery_to_write)?)
                .map_err(io_err(&t.name))
        })?;
        let chip_files = dir.join(CHIP_FILES);
        std::fs::create_dir_all(&chip_files).map_err(|source| SurgeryError::Io {
            path: chip_files.clone(),
            source,
        })?;
        for name in [pack::MANIFEST_FILE, pack::REPORT_FILE] {
            copy(&pack_dir.join(name), &chip_files.join(name))?;
        }
        if let Some(text) = &tokenizer_text {
            let extended = crate::tokenizer::with_chip_tokens(text, section.chip_token_offset, &chip_token_names)?;
            let path = dir.join("tokenizer.json");
            std::fs::write(&path, extended).map_err(|source| SurgeryError::Io { path, source })?;
        }
        config["inband"] = serde_json::to_value(&section).expect("serialisable");
        crate::synth::write_json(&dir.join("config.json"), &config)
    })?;
    Ok(summary)
}

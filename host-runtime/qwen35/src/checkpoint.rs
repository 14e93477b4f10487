//! Reading a Qwen3.5 checkpoint folder: config.json plus safetensors (one file, or
//! shards listed in model.safetensors.index.json), memory-mapped, tensors converted
//! to f32 on demand.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use thiserror::Error;

use crate::config::{Architecture, ConfigError, TextConfig};
use crate::weights::{Array, TensorSource, WeightError};

/// The single-file weights name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The shard index name.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{path}: not a valid safetensors file ({message})")]
    Safetensors { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Index { path: PathBuf, message: String },
    #[error("{0}: neither model.safetensors nor model.safetensors.index.json is present")]
    NoWeights(PathBuf),
}

/// An opened checkpoint.
pub struct Checkpoint {
    pub dir: PathBuf,
    pub architecture: Architecture,
    pub config: TextConfig,
    /// config.json as written.
    pub raw_config: serde_json::Value,
    shards: Vec<(PathBuf, Mmap)>,
    /// Tensor name -> shard index.
    locations: HashMap<String, usize>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Converts little-endian tensor bytes of `dtype` to f32.
pub fn to_f32(dtype: Dtype, bytes: &[u8]) -> Result<Vec<f32>, String> {
    Ok(match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => return Err(format!("dtype {other:?} is not a float type")),
    })
}

impl Checkpoint {
    /// Opens `dir`, reading config.json and mapping every shard.
    pub fn open(dir: &Path) -> Result<Self, CheckpointError> {
        let config_path = dir.join("config.json");
        let text = std::fs::read_to_string(&config_path).map_err(io_err(&config_path))?;
        let raw_config: serde_json::Value = serde_json::from_str(&text).map_err(ConfigError::Json)?;
        let (architecture, config) = TextConfig::from_checkpoint_value(&raw_config)?;

        let index_path = dir.join(INDEX_FILE);
        let shard_names: Vec<String> = if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path).map_err(io_err(&index_path))?;
            let index: serde_json::Value = serde_json::from_str(&text).map_err(|e| CheckpointError::Index {
                path: index_path.clone(),
                message: e.to_string(),
            })?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| CheckpointError::Index {
                    path: index_path.clone(),
                    message: "no weight_map".into(),
                })?;
            let mut names: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_string)).collect();
            names.sort();
            names.dedup();
            names
        } else if dir.join(SINGLE_FILE).is_file() {
            vec![SINGLE_FILE.to_string()]
        } else {
            return Err(CheckpointError::NoWeights(dir.to_path_buf()));
        };

        let mut shards = Vec::new();
        let mut locations = HashMap::new();
        for (i, name) in shard_names.iter().enumerate() {
            let path = dir.join(name);
            let file = std::fs::File::open(&path).map_err(io_err(&path))?;
            // SAFETY: the file is opened read-only; checkpoints are not modified while open.
            let map = unsafe { Mmap::map(&file) }.map_err(io_err(&path))?;
            let tensors = SafeTensors::deserialize(&map).map_err(|e| CheckpointError::Safetensors {
                path: path.clone(),
                message: e.to_string(),
            })?;
            for n in tensors.names() {
                locations.insert(n.to_string(), i);
            }
            shards.push((path, map));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            architecture,
            config,
            raw_config,
            shards,
            locations,
        })
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.locations.keys().cloned().collect();
        names.sort();
        names
    }

    /// dtype and shape of a tensor.
    pub fn info(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        let shard = *self.locations.get(name)?;
        let tensors = SafeTensors::deserialize(&self.shards[shard].1).ok()?;
        let view = tensors.tensor(name).ok()?;
        Some((view.dtype(), view.shape().to_vec()))
    }

    /// The raw bytes, dtype and shape of a tensor.
    pub fn raw(&self, name: &str) -> Result<(Dtype, Vec<usize>, &[u8]), WeightError> {
        let shard = *self
            .locations
            .get(name)
            .ok_or_else(|| WeightError::Missing(name.to_string()))?;
        let tensors = SafeTensors::deserialize(&self.shards[shard].1).map_err(|e| WeightError::Read {
            name: name.into(),
            message: e.to_string(),
        })?;
        let view = tensors.tensor(name).map_err(|e| WeightError::Read {
            name: name.into(),
            message: e.to_string(),
        })?;
        Ok((view.dtype(), view.shape().to_vec(), view.data()))
    }

    /// Prefix of the text model's tensors.
    pub fn text_prefix(&self) -> &'static str {
        self.architecture.text_prefix()
    }
}

impl TensorSource for Checkpoint {
    fn tensor(&self, name: &str) -> Result<Array, WeightError> {
        let (dtype, shape, bytes) = self.raw(name)?;
        let data = to_f32(dtype, bytes).map_err(|message| WeightError::Read {
            name: name.into(),
            message,
        })?;
        Ok(Array { shape, data })
    }
}

//! How a spliced checkpoint relates to its base: the `inband` section of config.json,
//! and the mapping between base and spliced tensor names and shapes.

use std::collections::BTreeMap;

use crate::pack::{residual_axis, Manifest, ResidualAxis, FORMAT_VERSION};
use inband_qwen35::config::{Architecture, LayerType, TextConfig};
use serde::{Deserialize, Serialize};

/// Version of the `inband` section written into config.json.
pub const SECTION_VERSION: u32 = 1;
/// Folder (inside a spliced checkpoint) holding the base's small files verbatim.
pub const BASE_FILES: &str = "inband/base";
/// The base's original (uncompensated) norm tensors, byte for byte.
pub const BASE_NORMS: &str = "inband/base_norms.safetensors";
/// A copy of the chip pack's manifest and report.
pub const CHIP_FILES: &str = "inband/chip";
/// The shard holding the chip layers.
pub const CHIP_SHARD: &str = "model-inband-chip.safetensors";

/// What the base looked like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaseShape {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub vocab_size: usize,
    pub layer_types: Vec<LayerType>,
    pub tie_word_embeddings: bool,
}

/// The `inband` section of a spliced config.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InbandSection {
    pub format_version: u32,
    pub chip: String,
    pub chip_layers: usize,
    pub chip_dims: usize,
    /// Chip tokens occupy ids chip_token_offset .. chip_token_offset + chip_vocab.
    pub chip_token_offset: usize,
    pub chip_vocab: usize,
    /// Prefix of the text model's tensors.
    pub text_prefix: String,
    pub base: BaseShape,
    /// SHA-256 of every chip-layer tensor as stored in this checkpoint.
    pub chip_tensors: BTreeMap<String, String>,
    /// The chip pack's manifest.
    pub manifest: Manifest,
}

impl InbandSection {
    /// The base model's text config, from the spliced checkpoint's (`spliced`): the
    /// residual, layers and vocabulary as they were before splicing.
    pub fn base_config(&self, spliced: &TextConfig) -> TextConfig {
        let mut base = spliced.clone();
        base.hidden_size = self.base.hidden_size;
        base.num_hidden_layers = self.base.num_hidden_layers;
        base.layer_types = self.base.layer_types.clone();
        base.vocab_size = self.base.vocab_size;
        base
    }

    /// The section of a config.json; None when there is none. A chip spliced from a
    /// pack of another format version is refused with what to do about it.
    pub fn from_config(config: &serde_json::Value) -> Option<Result<Self, String>> {
        let section = config.get("inband")?;
        let version = section.pointer("/manifest/format_version").and_then(|v| v.as_u64());
        if version != Some(u64::from(FORMAT_VERSION)) {
            return Some(Err(format!(
                "the chip in this checkpoint comes from a version {} chip pack; this build reads version \
                 {FORMAT_VERSION}: make a new pack with this `weightgen` and splice it into the base again",
                version.map_or("(unknown)".to_string(), |v| v.to_string())
            )));
        }
        Some(serde_json::from_value(section.clone()).map_err(|e| format!("inband section: {e}")))
    }

    pub fn width(&self) -> usize {
        self.base.hidden_size + self.chip_dims
    }
}

/// A text-tensor name split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextTensor {
    Embedding,
    LmHead,
    FinalNorm,
    /// (layer index, name within the layer).
    Layer(usize, String),
    /// Not part of the text decoder (vision tower, MTP head): copied verbatim.
    Other,
}

/// Classifies a tensor name of a checkpoint with text prefix `prefix`.
pub fn classify(name: &str, prefix: &str) -> TextTensor {
    if name == "lm_head.weight" {
        return TextTensor::LmHead;
    }
    let Some(rest) = name.strip_prefix(prefix) else {
        return TextTensor::Other;
    };
    match rest {
        "embed_tokens.weight" => TextTensor::Embedding,
        "norm.weight" => TextTensor::FinalNorm,
        _ => {
            if let Some(layer) = rest.strip_prefix("layers.") {
                if let Some((index, inner)) = layer.split_once('.') {
                    if let Ok(i) = index.parse() {
                        return TextTensor::Layer(i, inner.to_string());
                    }
                }
            }
            TextTensor::Other
        }
    }
}

/// The spliced shape of a base tensor (residual axes widened, vocabulary extended).
pub fn spliced_shape(kind: &TextTensor, shape: &[usize], chip_dims: usize, chip_vocab: usize) -> Vec<usize> {
    match kind {
        TextTensor::Embedding | TextTensor::LmHead => vec![shape[0] + chip_vocab, shape[1] + chip_dims],
        TextTensor::FinalNorm => vec![shape[0] + chip_dims],
        TextTensor::Layer(_, inner) => match residual_axis(inner) {
            ResidualAxis::Vector => vec![shape[0] + chip_dims],
            ResidualAxis::Columns => vec![shape[0], shape[1] + chip_dims],
            ResidualAxis::Rows => vec![shape[0] + chip_dims, shape[1]],
            ResidualAxis::None => shape.to_vec(),
        },
        TextTensor::Other => shape.to_vec(),
    }
}

/// True for tensors whose values splice rescales: norms over the residual.
pub fn is_residual_norm(kind: &TextTensor) -> bool {
    match kind {
        TextTensor::FinalNorm => true,
        TextTensor::Layer(_, inner) => residual_axis(inner) == ResidualAxis::Vector,
        _ => false,
    }
}

/// The text prefix for an architecture.
pub fn prefix(arch: Architecture) -> &'static str {
    arch.text_prefix()
}

//! The Qwen3.5 text configuration: the fields the layer math needs, read from a
//! checkpoint's `config.json` (multimodal `Qwen3_5ForConditionalGeneration` with a
//! `text_config`, or text-only `Qwen3_5ForCausalLM`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What kind of mixer a decoder layer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerType {
    /// Gated DeltaNet.
    LinearAttention,
    /// Gated softmax attention.
    FullAttention,
}

/// Rotary embedding parameters (`rope_parameters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeParameters {
    pub rope_theta: f64,
    #[serde(default = "default_partial_rotary_factor")]
    pub partial_rotary_factor: f64,
}

fn default_partial_rotary_factor() -> f64 {
    0.25
}

/// The text model's shape and numerics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextConfig {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub intermediate_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub linear_conv_kernel_dim: usize,
    pub layer_types: Vec<LayerType>,
    pub rms_norm_eps: f64,
    pub vocab_size: usize,
    pub tie_word_embeddings: bool,
    pub rope_parameters: RopeParameters,
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    #[serde(default)]
    pub attention_bias: bool,
}

fn default_hidden_act() -> String {
    "silu".into()
}

/// Why a configuration cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("config.json is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config.json: {0}")]
    Unsupported(String),
}

/// Which top-level architecture a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `Qwen3_5ForConditionalGeneration`: text tower under `model.language_model.`.
    ConditionalGeneration,
    /// `Qwen3_5ForCausalLM`: text-only, `model.` prefix.
    CausalLm,
}

impl Architecture {
    /// Prefix of the text model's tensors (`…embed_tokens.weight`, `…layers.N.…`, `…norm.weight`).
    pub fn text_prefix(&self) -> &'static str {
        match self {
            Architecture::ConditionalGeneration => "model.language_model.",
            Architecture::CausalLm => "model.",
        }
    }

    /// The `architectures` entry in config.json.
    pub fn name(&self) -> &'static str {
        match self {
            Architecture::ConditionalGeneration => "Qwen3_5ForConditionalGeneration",
            Architecture::CausalLm => "Qwen3_5ForCausalLM",
        }
    }
}

impl TextConfig {
    /// Parses a checkpoint's config.json, refusing what the layer math does not cover.
    pub fn from_checkpoint_json(text: &str) -> Result<(Architecture, TextConfig), ConfigError> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        Self::from_checkpoint_value(&value)
    }

    /// As [`Self::from_checkpoint_json`], from parsed JSON.
    pub fn from_checkpoint_value(value: &serde_json::Value) -> Result<(Architecture, TextConfig), ConfigError> {
        let architectures: Vec<&str> = value
            .get("architectures")
            .and_then(|a| a.as_array())
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
            .unwrap_or_default();
        let model_type = value.get("model_type").and_then(|m| m.as_str()).unwrap_or("");
        let (arch, text) = if architectures.contains(&"Qwen3_5ForConditionalGeneration") || model_type == "qwen3_5" {
            let text = value.get("text_config").ok_or_else(|| {
                ConfigError::Unsupported("a Qwen3_5ForConditionalGeneration config without text_config".into())
            })?;
            (Architecture::ConditionalGeneration, text)
        } else if architectures.contains(&"Qwen3_5ForCausalLM") || model_type == "qwen3_5_text" {
            (Architecture::CausalLm, value)
        } else {
            return Err(ConfigError::Unsupported(format!(
                "architecture {architectures:?} (model_type {model_type:?}) is not Qwen3.5; inband supports \
                 Qwen3_5ForConditionalGeneration and Qwen3_5ForCausalLM"
            )));
        };
        let text_type = text
            .get("model_type")
            .and_then(|m| m.as_str())
            .unwrap_or("qwen3_5_text");
        if text_type != "qwen3_5_text" {
            return Err(ConfigError::Unsupported(format!(
                "text model type {text_type:?} is not covered (MoE and other variants are not supported)"
            )));
        }
        let config: TextConfig = serde_json::from_value(text.clone())?;
        config.validate()?;
        Ok((arch, config))
    }

    /// Checks internal consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |m: String| Err(ConfigError::Unsupported(m));
        if self.layer_types.len() != self.num_hidden_layers {
            return fail(format!(
                "layer_types has {} entries for {} layers",
                self.layer_types.len(),
                self.num_hidden_layers
            ));
        }
        if self.hidden_act != "silu" {
            return fail(format!("hidden_act {:?} (only silu)", self.hidden_act));
        }
        if self.attention_bias {
            return fail("attention_bias true (Qwen3.5 has no biases)".into());
        }
        if !self.linear_num_value_heads.is_multiple_of(self.linear_num_key_heads) {
            return fail("linear_num_value_heads is not a multiple of linear_num_key_heads".into());
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return fail("num_attention_heads is not a multiple of num_key_value_heads".into());
        }
        if self.rotary_dim() > self.head_dim || !self.rotary_dim().is_multiple_of(2) {
            return fail(format!(
                "rotary dimension {} does not fit head_dim {}",
                self.rotary_dim(),
                self.head_dim
            ));
        }
        Ok(())
    }

    /// q/k width of a linear-attention layer: Hk * dk.
    pub fn key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }

    /// v width of a linear-attention layer: Hv * dv.
    pub fn value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }

    /// Channels of the depthwise conv: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// Value heads per key head (grouped value attention).
    pub fn value_heads_per_key_head(&self) -> usize {
        self.linear_num_value_heads / self.linear_num_key_heads
    }

    /// Dimensions of each full-attention head that RoPE rotates.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.rope_parameters.partial_rotary_factor) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_json(arch: &str) -> String {
        let text = r#"{"model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": 2,
            "intermediate_size": 96, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
            "layer_types": ["linear_attention", "full_attention"], "rms_norm_eps": 1e-6, "vocab_size": 100,
            "tie_word_embeddings": true, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true}}"#;
        match arch {
            "cg" => format!(
                r#"{{"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": {text}}}"#
            ),
            _ => text.replacen('{', r#"{"architectures": ["Qwen3_5ForCausalLM"], "#, 1),
        }
    }

    #[test]
    fn reads_both_architectures() {
        let (arch, c) = TextConfig::from_checkpoint_json(&tiny_json("cg")).unwrap();
        assert_eq!(arch, Architecture::ConditionalGeneration);
        assert_eq!(c.conv_dim(), 2 * 32 + 64);
        assert_eq!(c.value_heads_per_key_head(), 2);
        assert_eq!(c.rotary_dim(), 8);
        let (arch, _) = TextConfig::from_checkpoint_json(&tiny_json("lm")).unwrap();
        assert_eq!(arch, Architecture::CausalLm);
    }

    #[test]
    fn refuses_other_models() {
        let err = TextConfig::from_checkpoint_json(r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("is not Qwen3.5"), "{err}");
        let moe = tiny_json("cg").replace("\"qwen3_5_text\"", "\"qwen3_5_moe_text\"");
        assert!(TextConfig::from_checkpoint_json(&moe)
            .unwrap_err()
            .to_string()
            .contains("not covered"));
    }
}

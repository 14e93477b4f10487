//! The published Qwen3.5 dense shapes (config transcripts in
//! shared/reference/qwen35-layer-math.md §1.2) and our small `tiny` shape for tests.

use crate::config::{LayerType, RopeParameters, TextConfig};

/// A named model shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Small enough for CI: 4 layers of width 256 (16 GDN heads of 128, as every
    /// published size has, so the RV32IM chip fits it).
    Tiny,
    Qwen0_8b,
    Qwen2b,
    Qwen4b,
    Qwen9b,
}

/// Qwen3.5's vocabulary size.
pub const QWEN_VOCAB: usize = 248_320;

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::Tiny,
        Shape::Qwen0_8b,
        Shape::Qwen2b,
        Shape::Qwen4b,
        Shape::Qwen9b,
    ];

    /// The CLI name: tiny, 0.8b, 2b, 4b, 9b.
    pub fn name(&self) -> &'static str {
        match self {
            Shape::Tiny => "tiny",
            Shape::Qwen0_8b => "0.8b",
            Shape::Qwen2b => "2b",
            Shape::Qwen4b => "4b",
            Shape::Qwen9b => "9b",
        }
    }

    pub fn parse(name: &str) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.name() == name)
    }

    /// [`Self::parse`] for a command-line argument: an unknown name is an error that
    /// lists the known ones.
    pub fn parse_arg(name: &str) -> Result<Shape, String> {
        Self::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Shape::ALL.iter().map(|s| s.name()).collect();
            format!("unknown shape {name:?} ({})", known.join(", "))
        })
    }

    /// The text config of this shape.
    pub fn config(&self) -> TextConfig {
        // (hidden, layers, intermediate, q heads, kv heads, key heads, value heads, vocab, tied)
        let (h, layers, i, nh, kvh, hk, hv, vocab, tie) = match self {
            Shape::Tiny => (256, 4, 1024, 4, 2, 16, 16, 4096, true),
            Shape::Qwen0_8b => (1024, 24, 3584, 8, 2, 16, 16, QWEN_VOCAB, true),
            Shape::Qwen2b => (2048, 24, 6144, 8, 2, 16, 16, QWEN_VOCAB, true),
            Shape::Qwen4b => (2560, 32, 9216, 16, 4, 16, 32, QWEN_VOCAB, true),
            Shape::Qwen9b => (4096, 32, 12288, 16, 4, 16, 32, QWEN_VOCAB, false),
        };
        let head_dim = if *self == Shape::Tiny { 64 } else { 256 };
        TextConfig {
            hidden_size: h,
            num_hidden_layers: layers,
            intermediate_size: i,
            num_attention_heads: nh,
            num_key_value_heads: kvh,
            head_dim,
            linear_num_key_heads: hk,
            linear_num_value_heads: hv,
            linear_key_head_dim: 128,
            linear_value_head_dim: 128,
            linear_conv_kernel_dim: 4,
            layer_types: (0..layers)
                .map(|l| {
                    if (l + 1) % 4 == 0 {
                        LayerType::FullAttention
                    } else {
                        LayerType::LinearAttention
                    }
                })
                .collect(),
            rms_norm_eps: 1e-6,
            vocab_size: vocab,
            tie_word_embeddings: tie,
            rope_parameters: RopeParameters {
                rope_theta: 10_000_000.0,
                partial_rotary_factor: 0.25,
            },
            hidden_act: "silu".into(),
            attention_bias: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_consistent() {
        for s in Shape::ALL {
            let c = s.config();
            c.validate().unwrap();
            assert_eq!(Shape::parse(s.name()), Some(s));
        }
        let c = Shape::Qwen4b.config();
        assert_eq!(
            (c.conv_dim(), c.value_dim(), c.value_heads_per_key_head()),
            (8192, 4096, 2)
        );
        let c = Shape::Qwen0_8b.config();
        assert_eq!((c.conv_dim(), c.value_dim()), (6144, 2048));
        assert_eq!(
            c.layer_types.iter().filter(|t| **t == LayerType::FullAttention).count(),
            6
        );
    }
}

//! Decoder-layer weights in host memory (f32), named and shaped as in a Qwen3.5
//! checkpoint. Both evaluation paths (dense candle, sparse CPU) are built from these.

use std::collections::HashMap;

use thiserror::Error;

use crate::config::{LayerType, TextConfig};

/// A dense f32 array with its shape (row-major).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Array {
    pub fn zeros(shape: &[usize]) -> Self {
        Self {
            shape: shape.to_vec(),
            data: vec![0.0; shape.iter().product()],
        }
    }

    pub fn from_vec(shape: &[usize], data: Vec<f32>) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "shape {shape:?} does not fit {} values",
            data.len()
        );
        Self {
            shape: shape.to_vec(),
            data,
        }
    }

    /// Rows and columns of a 2-D array.
    pub fn dims2(&self) -> (usize, usize) {
        assert_eq!(self.shape.len(), 2, "not a matrix: {:?}", self.shape);
        (self.shape[0], self.shape[1])
    }

    pub fn row(&self, r: usize) -> &[f32] {
        let (_, c) = self.dims2();
        &self.data[r * c..(r + 1) * c]
    }

    pub fn row_mut(&mut self, r: usize) -> &mut [f32] {
        let (_, c) = self.dims2();
        &mut self.data[r * c..(r + 1) * c]
    }

    /// Number of entries that are not exactly zero.
    pub fn nonzeros(&self) -> usize {
        self.data.iter().filter(|v| **v != 0.0).count()
    }
}

#[derive(Debug, Error)]
pub enum WeightError {
    #[error("missing tensor {0}")]
    Missing(String),
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("tensor {name}: {message}")]
    Read { name: String, message: String },
}

/// Anything that can hand out named tensors as f32 arrays.
pub trait TensorSource {
    fn tensor(&self, name: &str) -> Result<Array, WeightError>;
}

impl TensorSource for HashMap<String, Array> {
    fn tensor(&self, name: &str) -> Result<Array, WeightError> {
        self.get(name)
            .cloned()
            .ok_or_else(|| WeightError::Missing(name.to_string()))
    }
}

fn load(source: &dyn TensorSource, name: &str, expected: &[usize]) -> Result<Array, WeightError> {
    let a = source.tensor(name)?;
    if a.shape != expected {
        return Err(WeightError::Shape {
            name: name.into(),
            found: a.shape,
            expected: expected.to_vec(),
        });
    }
    Ok(a)
}

/// A Gated DeltaNet mixer (`linear_attn.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttention {
    /// [2*key_dim + value_dim, H]: rows q | k | v, each head-major.
    pub in_proj_qkv: Array,
    /// [value_dim, H].
    pub in_proj_z: Array,
    /// [Hv, H].
    pub in_proj_b: Array,
    /// [Hv, H].
    pub in_proj_a: Array,
    /// [conv_dim, K]: the checkpoint's [conv_dim, 1, K] without the middle axis.
    pub conv1d: Array,
    /// [Hv].
    pub a_log: Array,
    /// [Hv].
    pub dt_bias: Array,
    /// [dv]: the gated RMSNorm's plain (not zero-centred) weight.
    pub norm: Array,
    /// [H, value_dim].
    pub out_proj: Array,
}

/// A gated softmax-attention mixer (`self_attn.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct FullAttention {
    /// [heads * head_dim * 2, H], per head: query rows then output-gate rows.
    pub q_proj: Array,
    /// [kv_heads * head_dim, H].
    pub k_proj: Array,
    /// [kv_heads * head_dim, H].
    pub v_proj: Array,
    /// [H, heads * head_dim].
    pub o_proj: Array,
    /// [head_dim], zero-centred.
    pub q_norm: Array,
    /// [head_dim], zero-centred.
    pub k_norm: Array,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Mixer {
    Linear(LinearAttention),
    Full(FullAttention),
}

/// The SwiGLU MLP: `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// [I, H].
    pub gate_proj: Array,
    /// [I, H].
    pub up_proj: Array,
    /// [H, I].
    pub down_proj: Array,
}

/// One decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderLayer {
    /// [H], zero-centred.
    pub input_layernorm: Array,
    /// [H], zero-centred.
    pub post_attention_layernorm: Array,
    pub mixer: Mixer,
    pub mlp: Mlp,
}

impl DecoderLayer {
    /// Reads layer `prefix` (e.g. `model.language_model.layers.3.`) of type `kind`.
    pub fn load(source: &dyn TensorSource, prefix: &str, kind: LayerType, c: &TextConfig) -> Result<Self, WeightError> {
        let h = c.hidden_size;
        let p = |n: &str| format!("{prefix}{n}");
        let mixer = match kind {
            LayerType::LinearAttention => {
                let hv = c.linear_num_value_heads;
                let k = c.linear_conv_kernel_dim;
                let mut conv = load(source, &p("linear_attn.conv1d.weight"), &[c.conv_dim(), 1, k])?;
                conv.shape = vec![c.conv_dim(), k];
                Mixer::Linear(LinearAttention {
                    in_proj_qkv: load(source, &p("linear_attn.in_proj_qkv.weight"), &[c.conv_dim(), h])?,
                    in_proj_z: load(source, &p("linear_attn.in_proj_z.weight"), &[c.value_dim(), h])?,
                    in_proj_b: load(source, &p("linear_attn.in_proj_b.weight"), &[hv, h])?,
                    in_proj_a: load(source, &p("linear_attn.in_proj_a.weight"), &[hv, h])?,
                    conv1d: conv,
                    a_log: load(source, &p("linear_attn.A_log"), &[hv])?,
                    dt_bias: load(source, &p("linear_attn.dt_bias"), &[hv])?,
                    norm: load(source, &p("linear_attn.norm.weight"), &[c.linear_value_head_dim])?,
                    out_proj: load(source, &p("linear_attn.out_proj.weight"), &[h, c.value_dim()])?,
                })
            }
            LayerType::FullAttention => {
                let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                Mixer::Full(FullAttention {
                    q_proj: load(source, &p("self_attn.q_proj.weight"), &[nh * hd * 2, h])?,
                    k_proj: load(source, &p("self_attn.k_proj.weight"), &[kvh * hd, h])?,
                    v_proj: load(source, &p("self_attn.v_proj.weight"), &[kvh * hd, h])?,
                    o_proj: load(source, &p("self_attn.o_proj.weight"), &[h, nh * hd])?,
                    q_norm: load(source, &p("self_attn.q_norm.weight"), &[hd])?,
                    k_norm: load(source, &p("self_attn.k_norm.weight"), &[hd])?,
                })
            }
        };
        let i = c.intermediate_size;
        Ok(Self {
            input_layernorm: load(source, &p("input_layernorm.weight"), &[h])?,
            post_attention_layernorm: load(source, &p("post_attention_layernorm.weight"), &[h])?,
            mixer,
            mlp: Mlp {
                gate_proj: load(source, &p("mlp.gate_proj.weight"), &[i, h])?,
                up_proj: load(source, &p("mlp.up_proj.weight"), &[i, h])?,
                down_proj: load(source, &p("mlp.down_proj.weight"), &[h, i])?,
            },
        })
    }

    /// Names (relative to the layer prefix) and shapes of a layer's tensors, as stored
    /// in a checkpoint, without allocating them.
    pub fn expected_shapes(kind: LayerType, c: &TextConfig) -> Vec<(String, Vec<usize>)> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let mut out = vec![
            ("input_layernorm.weight".to_string(), vec![h]),
            ("post_attention_layernorm.weight".to_string(), vec![h]),
            ("mlp.gate_proj.weight".to_string(), vec![i, h]),
            ("mlp.up_proj.weight".to_string(), vec![i, h]),
            ("mlp.down_proj.weight".to_string(), vec![h, i]),
        ];
        let layer = |n: &str, s: Vec<usize>| (n.to_string(), s);
        match kind {
            LayerType::LinearAttention => {
                let hv = c.linear_num_value_heads;
                out.extend([
                    layer("linear_attn.in_proj_qkv.weight", vec![c.conv_dim(), h]),
                    layer("linear_attn.in_proj_z.weight", vec![c.value_dim(), h]),
                    layer("linear_attn.in_proj_b.weight", vec![hv, h]),
                    layer("linear_attn.in_proj_a.weight", vec![hv, h]),
                    layer(
                        "linear_attn.conv1d.weight",
                        vec![c.conv_dim(), 1, c.linear_conv_kernel_dim],
                    ),
                    layer("linear_attn.A_log", vec![hv]),
                    layer("linear_attn.dt_bias", vec![hv]),
                    layer("linear_attn.norm.weight", vec![c.linear_value_head_dim]),
                    layer("linear_attn.out_proj.weight", vec![h, c.value_dim()]),
                ]);
            }
            LayerType::FullAttention => {
                let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                out.extend([
                    layer("self_attn.q_proj.weight", vec![nh * hd * 2, h]),
                    layer("self_attn.k_proj.weight", vec![kvh * hd, h]),
                    layer("self_attn.v_proj.weight", vec![kvh * hd, h]),
                    layer("self_attn.o_proj.weight", vec![h, nh * hd]),
                    layer("self_attn.q_norm.weight", vec![hd]),
                    layer("self_attn.k_norm.weight", vec![hd]),
                ]);
            }
        }
        out
    }

    /// An all-zero layer of the given type (every weight zero, norms at gain 1).
    pub fn zeros(kind: LayerType, c: &TextConfig) -> Self {
        let h = c.hidden_size;
        let mixer = match kind {
            LayerType::LinearAttention => {
                let hv = c.linear_num_value_heads;
                Mixer::Linear(LinearAttention {
                    in_proj_qkv: Array::zeros(&[c.conv_dim(), h]),
                    in_proj_z: Array::zeros(&[c.value_dim(), h]),
                    in_proj_b: Array::zeros(&[hv, h]),
                    in_proj_a: Array::zeros(&[hv, h]),
                    conv1d: Array::zeros(&[c.conv_dim(), c.linear_conv_kernel_dim]),
                    a_log: Array::zeros(&[hv]),
                    dt_bias: Array::zeros(&[hv]),
                    norm: Array::zeros(&[c.linear_value_head_dim]),
                    out_proj: Array::zeros(&[h, c.value_dim()]),
                })
            }
            LayerType::FullAttention => {
                let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                Mixer::Full(FullAttention {
                    q_proj: Array::zeros(&[nh * hd * 2, h]),
                    k_proj: Array::zeros(&[kvh * hd, h]),
                    v_proj: Array::zeros(&[kvh * hd, h]),
                    o_proj: Array::zeros(&[h, nh * hd]),
                    q_norm: Array::zeros(&[hd]),
                    k_norm: Array::zeros(&[hd]),
                })
            }
        };
        let i = c.intermediate_size;
        Self {
            input_layernorm: Array::zeros(&[h]),
            post_attention_layernorm: Array::zeros(&[h]),
            mixer,
            mlp: Mlp {
                gate_proj: Array::zeros(&[i, h]),
                up_proj: Array::zeros(&[i, h]),
                down_proj: Array::zeros(&[h, i]),
            },
        }
    }

    /// The layer's tensors under their checkpoint names (relative to the layer prefix).
    pub fn named_tensors(&self) -> Vec<(String, Array)> {
        self.named_tensor_refs()
            .into_iter()
            .map(|(name, a, shape)| {
                let mut a = a.clone();
                a.shape = shape;
                (name, a)
            })
            .collect()
    }

    /// As [`Self::named_tensors`], borrowed: (name, tensor, its checkpoint shape; conv1d's
    /// differs from the stored one by a middle axis of 1).
    pub fn named_tensor_refs(&self) -> Vec<(String, &Array, Vec<usize>)> {
        fn entry(name: String, a: &Array) -> (String, &Array, Vec<usize>) {
            (name, a, a.shape.clone())
        }
        let mut out = vec![
            entry("input_layernorm.weight".to_string(), &self.input_layernorm),
            entry(
                "post_attention_layernorm.weight".to_string(),
                &self.post_attention_layernorm,
            ),
        ];
        match &self.mixer {
            Mixer::Linear(l) => {
                for (n, a) in [
                    ("in_proj_qkv.weight", &l.in_proj_qkv),
                    ("in_proj_z.weight", &l.in_proj_z),
                    ("in_proj_b.weight", &l.in_proj_b),
                    ("in_proj_a.weight", &l.in_proj_a),
                    ("conv1d.weight", &l.conv1d),
                    ("A_log", &l.a_log),
                    ("dt_bias", &l.dt_bias),
                    ("norm.weight", &l.norm),
                    ("out_proj.weight", &l.out_proj),
                ] {
                    let mut e = entry(format!("linear_attn.{n}"), a);
                    if n == "conv1d.weight" {
                        e.2 = vec![a.shape[0], 1, a.shape[1]];
                    }
                    out.push(e);
                }
            }
            Mixer::Full(f) => {
                for (n, a) in [
                    ("q_proj.weight", &f.q_proj),
                    ("k_proj.weight", &f.k_proj),
                    ("v_proj.weight", &f.v_proj),
                    ("o_proj.weight", &f.o_proj),
                    ("q_norm.weight", &f.q_norm),
                    ("k_norm.weight", &f.k_norm),
                ] {
                    out.push(entry(format!("self_attn.{n}"), a));
                }
            }
        }
        for (n, a) in [
            ("gate_proj.weight", &self.mlp.gate_proj),
            ("up_proj.weight", &self.mlp.up_proj),
            ("down_proj.weight", &self.mlp.down_proj),
        ] {
            out.push(entry(format!("mlp.{n}"), a));
        }
        out
    }

    /// The layer's mixer type.
    pub fn layer_type(&self) -> LayerType {
        match self.mixer {
            Mixer::Linear(_) => LayerType::LinearAttention,
            Mixer::Full(_) => LayerType::FullAttention,
        }
    }
}

//! Synthetic Qwen3.5 checkpoints: the exact published layout for a shape (config.json
//! with text_config and vision_config, `model.language_model.*`, a small
//! `model.visual.*` stand-in, `mtp.*`, sharded safetensors with an index,
//! generation_config.json, a byte-level BPE tokenizer) with random bf16 weights
//! initialised as the reference does. Every code path a user's real checkpoint takes
//! runs on these.

use std::path::Path;

use inband_qwen35::config::LayerType;
use inband_qwen35::presets::Shape;
use inband_qwen35::TextConfig;
use safetensors::Dtype;

use crate::st::{self, PlannedTensor, WriteError};
use crate::{atomic_dir, SurgeryError};

/// Options for [`synth`].
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub shape: Shape,
    pub seed: u64,
    /// Write Qwen3_5ForCausalLM (text only, `model.*`) instead of the multimodal layout.
    pub text_only: bool,
}

/// How a tensor's random values are drawn.
#[derive(Debug, Clone, Copy)]
enum Init {
    /// Uniform with this standard deviation around zero.
    Normalish(f32),
    /// Uniform in [lo, hi).
    Uniform(f32, f32),
    /// log of uniform(lo, hi): A_log.
    LogUniform(f32, f32),
}

/// SplitMix64: fast, reproducible, one stream per tensor.
struct Rng(u64);

impl Rng {
    fn for_tensor(seed: u64, name: &str) -> Self {
        let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Rng(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Four uniform values in [0, 1).
    fn unit4(&mut self) -> [f32; 4] {
        let v = self.next();
        std::array::from_fn(|i| ((v >> (16 * i)) & 0xffff) as f32 / 65536.0)
    }
}

/// The vision tower stand-in's size (the real towers are far larger; only the layout matters).
struct VisionShape {
    depth: usize,
    hidden: usize,
    intermediate: usize,
    heads: usize,
    positions: usize,
    patch: usize,
    temporal: usize,
    merge: usize,
}

const VISION: VisionShape = VisionShape {
    depth: 2,
    hidden: 64,
    intermediate: 128,
    heads: 2,
    positions: 64,
    patch: 16,
    temporal: 2,
    merge: 2,
};

/// Special tokens and their ids for a vocabulary size (Qwen3.5's ids for the real
/// 248320-token vocabulary, the same offsets from the end for smaller ones).
pub fn special_tokens(vocab: usize) -> Vec<(&'static str, usize)> {
    let base = vocab - (248_320 - 248_043);
    vec![
        ("<|endoftext|>", base),
        ("<|im_end|>", base + 1),
        ("<|im_start|>", base + 2),
        ("<|vision_start|>", base + 10),
        ("<|vision_end|>", base + 11),
        ("<|image_pad|>", base + 13),
        ("<|video_pad|>", base + 14),
    ]
}

fn text_config_json(c: &TextConfig, eos: usize) -> serde_json::Value {
    let mrope = if c.rotary_dim() == 64 {
        vec![11, 11, 10]
    } else {
        vec![3, 3, 2]
    };
    serde_json::json!({
        "attention_bias": false,
        "attention_dropout": 0.0,
        "attn_output_gate": true,
        "dtype": "bfloat16",
        "eos_token_id": eos,
        "full_attention_interval": 4,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": c.intermediate_size,
        "layer_types": c.layer_types,
        "linear_conv_kernel_dim": c.linear_conv_kernel_dim,
        "linear_key_head_dim": c.linear_key_head_dim,
        "linear_num_key_heads": c.linear_num_key_heads,
        "linear_num_value_heads": c.linear_num_value_heads,
        "linear_value_head_dim": c.linear_value_head_dim,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144,
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": false,
        "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "num_key_value_heads": c.num_key_value_heads,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": c.rope_parameters.rope_theta,
            "partial_rotary_factor": c.rope_parameters.partial_rotary_factor,
            "mrope_section": mrope,
            "mrope_interleaved": true
        },
        "tie_word_embeddings": c.tie_word_embeddings,
        "use_cache": true,
        "vocab_size": c.vocab_size
    })
}

/// config.json for a shape.
pub fn config_json(c: &TextConfig, text_only: bool) -> serde_json::Value {
    let specials = special_tokens(c.vocab_size);
    let id = |name: &str| {
        specials
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, i)| *i)
            .expect("special token")
    };
    let eos = id("<|im_end|>");
    let text = text_config_json(c, eos);
    if text_only {
        let mut v = text;
        v["architectures"] = serde_json::json!(["Qwen3_5ForCausalLM"]);
        return v;
    }
    serde_json::json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "dtype": "bfloat16",
        "image_token_id": id("<|image_pad|>"),
        "video_token_id": id("<|video_pad|>"),
        "vision_start_token_id": id("<|vision_start|>"),
        "vision_end_token_id": id("<|vision_end|>"),
        "tie_word_embeddings": c.tie_word_embeddings,
        "text_config": text,
        "vision_config": {
            "depth": VISION.depth,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": VISION.hidden,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": VISION.intermediate,
            "model_type": "qwen3_5_vision",
            "num_heads": VISION.heads,
            "num_position_embeddings": VISION.positions,
            "out_hidden_size": c.hidden_size,
            "patch_size": VISION.patch,
            "rope_parameters": { "rope_theta": 10000.0, "rope_type": "axial" },
            "spatial_merge_size": VISION.merge,
            "temporal_patch_size": VISION.temporal
        }
    })
}

/// Tensors of one decoder layer (relative names) with their inits.
fn layer_tensors(c: &TextConfig, kind: LayerType) -> Vec<(String, Vec<usize>, Init)> {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let w = Init::Normalish(0.02);
    let gain = Init::Uniform(-0.25, 0.25);
    let mut t: Vec<(String, Vec<usize>, Init)> = vec![
        ("input_layernorm.weight".into(), vec![h], gain),
        ("post_attention_layernorm.weight".into(), vec![h], gain),
        ("mlp.gate_proj.weight".into(), vec![i, h], w),
        ("mlp.up_proj.weight".into(), vec![i, h], w),
        ("mlp.down_proj.weight".into(), vec![h, i], w),
    ];
    match kind {
        LayerType::LinearAttention => {
            let hv = c.linear_num_value_heads;
            t.extend([
                ("linear_attn.in_proj_qkv.weight".into(), vec![c.conv_dim(), h], w),
                ("linear_attn.in_proj_z.weight".into(), vec![c.value_dim(), h], w),
                ("linear_attn.in_proj_b.weight".into(), vec![hv, h], w),
                ("linear_attn.in_proj_a.weight".into(), vec![hv, h], w),
                (
                    "linear_attn.conv1d.weight".into(),
                    vec![c.conv_dim(), 1, c.linear_conv_kernel_dim],
                    Init::Uniform(-0.5, 0.5),
                ),
                ("linear_attn.A_log".into(), vec![hv], Init::LogUniform(0.01, 16.0)),
                ("linear_attn.dt_bias".into(), vec![hv], Init::Uniform(0.5, 1.5)),
                (
                    "linear_attn.norm.weight".into(),
                    vec![c.linear_value_head_dim],
                    Init::Uniform(0.9, 1.1),
                ),
                ("linear_attn.out_proj.weight".into(), vec![h, c.value_dim()], w),
            ]);
        }
        LayerType::FullAttention => {
            let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
            t.extend([
                ("self_attn.q_proj.weight".into(), vec![nh * hd * 2, h], w),
                ("self_attn.k_proj.weight".into(), vec![kvh * hd, h], w),
                ("self_attn.v_proj.weight".into(), vec![kvh * hd, h], w),
                ("self_attn.o_proj.weight".into(), vec![h, nh * hd], w),
                ("self_attn.q_norm.weight".into(), vec![hd], gain),
                ("self_attn.k_norm.weight".into(), vec![hd], gain),
            ]);
        }
    }
    t
}

/// Every tensor of the checkpoint with its shape and init, in name order.
fn all_tensors(c: &TextConfig, text_only: bool) -> Vec<(String, Vec<usize>, Init)> {
    let h = c.hidden_size;
    let w = Init::Normalish(0.02);
    let prefix = if text_only { "model." } else { "model.language_model." };
    let mut t = vec![
        (format!("{prefix}embed_tokens.weight"), vec![c.vocab_size, h], w),
        (format!("{prefix}norm.weight"), vec![h], Init::Uniform(-0.25, 0.25)),
    ];
    if !c.tie_word_embeddings {
        t.push(("lm_head.weight".into(), vec![c.vocab_size, h], w));
    }
    for (l, kind) in c.layer_types.iter().enumerate() {
        for (name, shape, init) in layer_tensors(c, *kind) {
            t.push((format!("{prefix}layers.{l}.{name}"), shape, init));
        }
    }
    if !text_only {
        let v = &VISION;
        let bias = Init::Uniform(-0.01, 0.01);
        let ln = Init::Uniform(0.9, 1.1);
        let merged = v.hidden * v.merge * v.merge;
        t.extend([
            (
                "model.visual.patch_embed.proj.weight".into(),
                vec![v.hidden, 3, v.temporal, v.patch, v.patch],
                w,
            ),
            ("model.visual.patch_embed.proj.bias".into(), vec![v.hidden], bias),
            ("model.visual.pos_embed.weight".into(), vec![v.positions, v.hidden], w),
            ("model.visual.merger.norm.weight".into(), vec![v.hidden], ln),
            ("model.visual.merger.norm.bias".into(), vec![v.hidden], bias),
            ("model.visual.merger.linear_fc1.weight".into(), vec![merged, merged], w),
            ("model.visual.merger.linear_fc1.bias".into(), vec![merged], bias),
            ("model.visual.merger.linear_fc2.weight".into(), vec![h, merged], w),
            ("model.visual.merger.linear_fc2.bias".into(), vec![h], bias),
        ]);
        for b in 0..v.depth {
            let p = format!("model.visual.blocks.{b}.");
            t.extend([
                (format!("{p}norm1.weight"), vec![v.hidden], ln),
                (format!("{p}norm1.bias"), vec![v.hidden], bias),
                (format!("{p}norm2.weight"), vec![v.hidden], ln),
                (format!("{p}norm2.bias"), vec![v.hidden], bias),
                (format!("{p}attn.qkv.weight"), vec![3 * v.hidden, v.hidden], w),
                (format!("{p}attn.qkv.bias"), vec![3 * v.hidden], bias),
                (format!("{p}attn.proj.weight"), vec![v.hidden, v.hidden], w),
                (format!("{p}attn.proj.bias"), vec![v.hidden], bias),
                (format!("{p}mlp.linear_fc1.weight"), vec![v.intermediate, v.hidden], w),
                (format!("{p}mlp.linear_fc1.bias"), vec![v.intermediate], bias),
                (format!("{p}mlp.linear_fc2.weight"), vec![v.hidden, v.intermediate], w),
                (format!("{p}mlp.linear_fc2.bias"), vec![v.hidden], bias),
            ]);
        }
        let gain = Init::Uniform(-0.25, 0.25);
        t.extend([
            ("mtp.fc.weight".into(), vec![h, 2 * h], w),
            ("mtp.pre_fc_norm_embedding.weight".into(), vec![h], gain),
            ("mtp.pre_fc_norm_hidden.weight".into(), vec![h], gain),
            ("mtp.norm.weight".into(), vec![h], gain),
        ]);
        for (name, shape, init) in layer_tensors(c, LayerType::FullAttention) {
            t.push((format!("mtp.layers.0.{name}"), shape, init));
        }
    }
    t.sort_by(|a, b| a.0.cmp(&b.0));
    t
}

/// Streams a tensor's random values as bf16.
fn produce_random(seed: u64, t: &PlannedTensor, init: Init, out: &mut dyn std::io::Write) -> Result<(), WriteError> {
    let mut rng = Rng::for_tensor(seed, &t.name);
    let n: usize = t.shape.iter().product();
    let mut buffer = Vec::with_capacity(1 << 16);
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(1 << 14);
        let mut values = Vec::with_capacity(chunk + 3);
        while values.len() < chunk {
            for u in rng.unit4() {
                values.push(match init {
                    Init::Normalish(std) => (u * 2.0 - 1.0) * std * 3f32.sqrt(),
                    Init::Uniform(lo, hi) => lo + u * (hi - lo),
                    Init::LogUniform(lo, hi) => (lo + u * (hi - lo)).ln(),
                });
            }
        }
        values.truncate(chunk);
        buffer.clear();
        buffer.extend(st::encode(&values, Dtype::BF16));
        out.write_all(&buffer).map_err(|e| WriteError::Io {
            path: t.name.clone().into(),
            source: e,
        })?;
        done += chunk;
    }
    Ok(())
}

/// Writes a synthetic checkpoint to `out` (atomically); returns the bytes of weights.
pub fn synth(options: &SynthOptions, out: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, SurgeryError> {
    let config = options.shape.config();
    let tensors = all_tensors(&config, options.text_only);
    let inits: std::collections::HashMap<String, Init> = tensors.iter().map(|(n, _, i)| (n.clone(), *i)).collect();
    let planned: Vec<PlannedTensor> = tensors
        .iter()
        .map(|(n, s, _)| PlannedTensor {
            name: n.clone(),
            dtype: Dtype::BF16,
            shape: s.clone(),
        })
        .collect();
    let total: u64 = planned.iter().map(|t| t.bytes()).sum();
    let max_shard = if options.shape == Shape::Tiny { 4 << 20 } else { 2 << 30 };
    let shards = st::shard_plan(planned, max_shard);
    atomic_dir(out, |dir| {
        let config_value = config_json(&config, options.text_only);
        write_json(&dir.join("config.json"), &config_value)?;
        let eos = special_tokens(config.vocab_size)[1].1;
        write_json(
            &dir.join("generation_config.json"),
            &serde_json::json!({ "eos_token_id": eos, "pad_token_id": special_tokens(config.vocab_size)[0].1, "do_sample": false }),
        )?;
        crate::tokenizer::write_synthetic(dir, config.vocab_size)?;
        let mut done = 0u64;
        let seed = options.seed;
        let mut produce = |t: &PlannedTensor, w: &mut dyn std::io::Write| produce_random(seed, t, inits[&t.name], w);
        st::write_sharded(dir, &shards, &mut produce, &mut |b| {
            done += b;
            progress(done, total);
        })?;
        Ok(())
    })?;
    Ok(total)
}

pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<(), SurgeryError> {
    std::fs::write(path, serde_json::to_string_pretty(value).expect("serialisable") + "\n").map_err(|source| {
        SurgeryError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

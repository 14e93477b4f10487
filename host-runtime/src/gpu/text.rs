//! Text mode on the GPU: Qwen's own decoder layers, embedding and head in GPU memory
//! (fp32), run by the small NVRTC kernels of `text_kernel.cu`, with the same math as the
//! CPU dense path (inband-qwen35 `dense`). Each token's numbers do not depend on how
//! tokens are batched, so a prefill equals token-by-token decoding, bit for bit.

use std::sync::Arc;

use anyhow::{bail, Context};
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use inband_qwen35::dense::rope_inv_freq;
use inband_qwen35::model::load_text_model;
use inband_qwen35::scalar::L2NORM_EPS;
use inband_qwen35::weights::{Array, DecoderLayer, Mixer, TensorSource};
use inband_qwen35::TextConfig;

const KERNEL: &str = include_str!("text_kernel.cu");
/// Threads per block of the per-row kernels.
const BLOCK: u32 = 128;
/// Output rows (one warp each) per block of `linear`, and tokens per warp (the kernel's TOKENS).
const LINEAR_WARPS: u32 = 8;
const LINEAR_TOKENS: u32 = 8;
/// The conv kernel's window holds at most this many taps.
const MAX_CONV_KERNEL: usize = 8;

struct Kernels {
    embed: CudaFunction,
    rms_norm: CudaFunction,
    linear: CudaFunction,
    silu_mul: CudaFunction,
    add_into: CudaFunction,
    gdn_gates: CudaFunction,
    conv_silu: CudaFunction,
    gdn_recurrent: CudaFunction,
    rope: CudaFunction,
    attend: CudaFunction,
}

/// A linear layer's weight [out, in] in GPU memory.
struct Weight {
    data: CudaSlice<f32>,
    n_out: usize,
    n_in: usize,
}

struct Gdn {
    qkv: Weight,
    z: Weight,
    b: Weight,
    a: Weight,
    /// [conv_dim, K].
    conv: CudaSlice<f32>,
    a_log_exp: CudaSlice<f32>,
    dt_bias: CudaSlice<f32>,
    norm: CudaSlice<f32>,
    out_proj: Weight,
}

struct Attention {
    q: Weight,
    k: Weight,
    v: Weight,
    o: Weight,
    q_gain: CudaSlice<f32>,
    k_gain: CudaSlice<f32>,
}

enum GpuMixer {
    Gdn(Gdn),
    Attention(Attention),
}

struct GpuLayer {
    input_gain: CudaSlice<f32>,
    post_gain: CudaSlice<f32>,
    mixer: GpuMixer,
    gate: Weight,
    up: Weight,
    down: Weight,
}

/// One layer's carried state in GPU memory.
pub enum GpuLayerState {
    Gdn {
        /// [conv_dim, K-1]: raw inputs of the last K-1 tokens, oldest first.
        conv: CudaSlice<f32>,
        /// [Hv, dk, dv].
        recurrent: CudaSlice<f32>,
    },
    Attention {
        /// [capacity, kv_heads, head_dim] after k_norm and RoPE; the first `len` positions hold keys.
        keys: CudaSlice<f32>,
        values: CudaSlice<f32>,
        len: usize,
    },
}

/// Qwen's caches for one sequence, plus the position of its next token.
pub struct GpuTextState {
    pub layers: Vec<GpuLayerState>,
    pub position: usize,
}

/// The text model on one GPU.
pub struct GpuTextModel {
    pub config: TextConfig,
    stream: Arc<CudaStream>,
    k: Kernels,
    /// [vocab, H]: the embedding table, and the head when the checkpoint ties them.
    embed: Weight,
    /// The head when it is not tied to the embedding.
    lm_head: Option<Weight>,
    final_gain: CudaSlice<f32>,
    layers: Vec<GpuLayer>,
    /// RoPE's inverse frequencies, computed as the CPU path computes them.
    inv_freq: CudaSlice<f32>,
}

/// `1 + weight`: the zero-centred norms' gain.
fn gain(a: &Array) -> Vec<f32> {
    a.data.iter().map(|w| w + 1.0).collect()
}

fn grid(n: usize, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(block).max(1), 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn rows_of(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl GpuTextModel {
    /// Uploads the text model `config` describes from `source` to GPU `ordinal`.
    pub fn from_source(
        config: &TextConfig,
        prefix: &str,
        source: &dyn TensorSource,
        ordinal: usize,
    ) -> anyhow::Result<Self> {
        super::available()?;
        if config.linear_conv_kernel_dim > MAX_CONV_KERNEL {
            bail!(
                "the GPU text kernels handle conv kernels up to {MAX_CONV_KERNEL} taps, not {}",
                config.linear_conv_kernel_dim
            );
        }
        // gdn_recurrent keeps q and k in (static-limit) shared memory; attend groups query heads.
        if (2 * config.linear_key_head_dim + 32) * 4 > 48 * 1024
            || !config.num_attention_heads.is_multiple_of(config.num_key_value_heads)
        {
            bail!("the GPU text kernels do not handle this model's head layout");
        }
        let ctx = CudaContext::new(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))?;
        let stream = ctx.default_stream();
        let module = super::compile(&ctx, KERNEL, "the text kernels", &[])?;
        let f = |name: &str| {
            module
                .load_function(name)
                .with_context(|| format!("text kernel {name}"))
        };
        let k = Kernels {
            embed: f("embed")?,
            rms_norm: f("rms_norm")?,
            linear: f("linear")?,
            silu_mul: f("silu_mul")?,
            add_into: f("add_into")?,
            gdn_gates: f("gdn_gates")?,
            conv_silu: f("conv_silu")?,
            gdn_recurrent: f("gdn_recurrent")?,
            rope: f("rope")?,
            attend: f("attend")?,
        };
        let up = |v: &[f32]| stream.clone_htod(v).context("copying weights to the GPU");
        let weight = |a: &Array| -> anyhow::Result<Weight> {
            Ok(Weight {
                data: up(&a.data)?,
                n_out: a.shape[0],
                n_in: a.shape[1],
            })
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        let outer = load_text_model(config, prefix, source, |_, layer: DecoderLayer| {
            let mixer = match &layer.mixer {
                Mixer::Linear(la) => GpuMixer::Gdn(Gdn {
                    qkv: weight(&la.in_proj_qkv)?,
                    z: weight(&la.in_proj_z)?,
                    b: weight(&la.in_proj_b)?,
                    a: weight(&la.in_proj_a)?,
                    conv: up(&la.conv1d.data)?,
                    a_log_exp: up(&la.a_log.data.iter().map(|v| v.exp()).collect::<Vec<_>>())?,
                    dt_bias: up(&la.dt_bias.data)?,
                    norm: up(&la.norm.data)?,
                    out_proj: weight(&la.out_proj)?,
                }),
                Mixer::Full(fa) => GpuMixer::Attention(Attention {
                    q: weight(&fa.q_proj)?,
                    k: weight(&fa.k_proj)?,
                    v: weight(&fa.v_proj)?,
                    o: weight(&fa.o_proj)?,
                    q_gain: up(&gain(&fa.q_norm))?,
                    k_gain: up(&gain(&fa.k_norm))?,
                }),
            };
            layers.push(GpuLayer {
                input_gain: up(&gain(&layer.input_layernorm))?,
                post_gain: up(&gain(&layer.post_attention_layernorm))?,
                mixer,
                gate: weight(&layer.mlp.gate_proj)?,
                up: weight(&layer.mlp.up_proj)?,
                down: weight(&layer.mlp.down_proj)?,
            });
            Ok(())
        })?;
        Ok(Self {
            config: config.clone(),
            embed: weight(&outer.embed)?,
            lm_head: if config.tie_word_embeddings {
                None
            } else {
                Some(weight(&outer.lm_head)?)
            },
            final_gain: up(&gain(&outer.final_norm))?,
            inv_freq: up(&rope_inv_freq(config))?,
            layers,
            k,
            stream,
        })
    }

    /// A fresh state: zero conv windows and memories, empty KV caches.
    pub fn new_state(&self) -> anyhow::Result<GpuTextState> {
        let c = &self.config;
        let layers = self
            .layers
            .iter()
            .map(|l| {
                Ok(match l.mixer {
                    GpuMixer::Gdn(_) => GpuLayerState::Gdn {
                        conv: self.stream.alloc_zeros(c.conv_dim() * (c.linear_conv_kernel_dim - 1))?,
                        recurrent: self
                            .stream
                            .alloc_zeros(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim)?,
                    },
                    GpuMixer::Attention(_) => GpuLayerState::Attention {
                        keys: self.stream.alloc_zeros(1)?,
                        values: self.stream.alloc_zeros(1)?,
                        len: 0,
                    },
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(GpuTextState { layers, position: 0 })
    }

    /// Runs every token; returns the logits of positions `first..` (one row each).
    pub fn logits_from(&self, tokens: &[u32], state: &mut GpuTextState, first: usize) -> anyhow::Result<Vec<Vec<f32>>> {
        anyhow::ensure!(first < tokens.len(), "no tokens to run");
        let c = &self.config;
        if let Some(bad) = tokens.iter().find(|&&id| id as usize >= c.vocab_size) {
            bail!("token id {bad} is outside the model's vocabulary of {}", c.vocab_size);
        }
        let (t, width) = (tokens.len(), c.hidden_size);
        let ids = self.stream.clone_htod(tokens)?;
        let mut h = self.stream.alloc_zeros::<f32>(t * width)?;
        let w = width as u32;
        let mut l = self.stream.launch_builder(&self.k.embed);
        l.arg(&ids).arg(&self.embed.data).arg(&mut h).arg(&w);
        // SAFETY: ids holds t token ids below vocab (checked), h holds t rows of width.
        unsafe { l.launch(rows_of(t)) }?;
        for (layer, layer_state) in self.layers.iter().zip(&mut state.layers) {
            self.layer(layer, layer_state, &mut h, t, state.position)?;
        }
        state.position += t;
        let normed = self.rms_norm(&h.slice(first * width..), width, &self.final_gain, width, t - first)?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let logits = self.linear(&normed.slice(..), head, t - first)?;
        let flat = self.stream.clone_dtoh(&logits)?;
        Ok(flat.chunks(c.vocab_size).map(<[f32]>::to_vec).collect())
    }

    fn layer(
        &self,
        layer: &GpuLayer,
        state: &mut GpuLayerState,
        h: &mut CudaSlice<f32>,
        t: usize,
        position: usize,
    ) -> anyhow::Result<()> {
        let c = &self.config;
        let width = c.hidden_size;
        let normed = self.rms_norm(&h.slice(..), width, &layer.input_gain, width, t)?;
        let mixed = match (&layer.mixer, state) {
            (GpuMixer::Gdn(g), GpuLayerState::Gdn { conv, recurrent }) => self.gdn(g, &normed, conv, recurrent, t)?,
            (GpuMixer::Attention(a), GpuLayerState::Attention { keys, values, len }) => {
                self.attention(a, &normed, keys, values, len, t, position)?
            }
            _ => bail!("layer state does not match the layer type"),
        };
        self.add_into(h, &mixed)?;
        let normed = self.rms_norm(&h.slice(..), width, &layer.post_gain, width, t)?;
        let mut gate = self.linear(&normed.slice(..), &layer.gate, t)?;
        let up = self.linear(&normed.slice(..), &layer.up, t)?;
        let n = gate.len() as u32;
        let mut l = self.stream.launch_builder(&self.k.silu_mul);
        l.arg(&mut gate).arg(&up).arg(&n);
        // SAFETY: gate and up hold n floats each.
        unsafe { l.launch(grid(n as usize, 256)) }?;
        let down = self.linear(&gate.slice(..), &layer.down, t)?;
        self.add_into(h, &down)
    }

    fn gdn(
        &self,
        g: &Gdn,
        x: &CudaSlice<f32>,
        conv_state: &mut CudaSlice<f32>,
        recurrent: &mut CudaSlice<f32>,
        t: usize,
    ) -> anyhow::Result<CudaSlice<f32>> {
        let c = &self.config;
        let (hk, hv, dk, dv) = (
            c.linear_num_key_heads as u32,
            c.linear_num_value_heads as u32,
            c.linear_key_head_dim as u32,
            c.linear_value_head_dim as u32,
        );
        let mixed = self.linear(&x.slice(..), &g.qkv, t)?;
        let z = self.linear(&x.slice(..), &g.z, t)?;
        let mut beta = self.linear(&x.slice(..), &g.b, t)?;
        let mut decay = self.linear(&x.slice(..), &g.a, t)?;
        let n = (t as u32) * hv;
        let mut l = self.stream.launch_builder(&self.k.gdn_gates);
        l.arg(&mut beta)
            .arg(&mut decay)
            .arg(&g.dt_bias)
            .arg(&g.a_log_exp)
            .arg(&hv)
            .arg(&n);
        // SAFETY: beta and decay hold t * hv floats; dt_bias and a_log_exp hv.
        unsafe { l.launch(grid(n as usize, 256)) }?;

        let channels = c.conv_dim() as u32;
        let (kernel, rows) = (c.linear_conv_kernel_dim as u32, t as u32);
        let mut y = self.stream.alloc_zeros::<f32>(t * c.conv_dim())?;
        let mut l = self.stream.launch_builder(&self.k.conv_silu);
        l.arg(&mixed)
            .arg(&g.conv)
            .arg(conv_state)
            .arg(&mut y)
            .arg(&channels)
            .arg(&kernel)
            .arg(&rows);
        // SAFETY: mixed and y are [t, channels]; the state [channels, K-1]; K <= the window.
        unsafe { l.launch(grid(channels as usize, BLOCK)) }?;

        let mut core = self.stream.alloc_zeros::<f32>(t * (hv * dv) as usize)?;
        let (eps, l2eps) = (c.rms_norm_eps as f32, L2NORM_EPS);
        let cfg = LaunchConfig {
            grid_dim: (hv, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: (2 * dk + 32) * 4,
        };
        let mut l = self.stream.launch_builder(&self.k.gdn_recurrent);
        l.arg(&y)
            .arg(&z)
            .arg(&beta)
            .arg(&decay)
            .arg(&g.norm)
            .arg(recurrent)
            .arg(&mut core)
            .arg(&rows)
            .arg(&hk)
            .arg(&hv)
            .arg(&dk)
            .arg(&dv)
            .arg(&eps)
            .arg(&l2eps);
        // SAFETY: y [t, conv_dim], z and core [t, hv*dv], beta/decay [t, hv], the memory [hv, dk, dv].
        unsafe { l.launch(cfg) }?;
        self.linear(&core.slice(..), &g.out_proj, t)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        a: &Attention,
        x: &CudaSlice<f32>,
        keys: &mut CudaSlice<f32>,
        values: &mut CudaSlice<f32>,
        len: &mut usize,
        t: usize,
        position: usize,
    ) -> anyhow::Result<CudaSlice<f32>> {
        let c = &self.config;
        let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let qg = self.linear(&x.slice(..), &a.q, t)?; // [t, nh, 2 hd]
        let k_raw = self.linear(&x.slice(..), &a.k, t)?;
        let v = self.linear(&x.slice(..), &a.v, t)?;
        let mut q = self.rms_norm(&qg.slice(..), 2 * hd, &a.q_gain, hd, t * nh)?;
        let mut k = self.rms_norm(&k_raw.slice(..), hd, &a.k_gain, hd, t * kvh)?;
        self.rope(&mut q, nh, t, position)?;
        self.rope(&mut k, kvh, t, position)?;
        // Append to the caches ([positions, kvh, hd]), growing them by doubling.
        let row = kvh * hd;
        let need = (*len + t) * row;
        if keys.len() < need {
            let capacity = need.max(2 * keys.len()).max(256 * row);
            for cache in [&mut *keys, &mut *values] {
                let mut grown = self.stream.alloc_zeros::<f32>(capacity)?;
                if *len > 0 {
                    self.stream
                        .memcpy_dtod(&cache.slice(..*len * row), &mut grown.slice_mut(..*len * row))?;
                }
                *cache = grown;
            }
        }
        self.stream.memcpy_dtod(&k, &mut keys.slice_mut(*len * row..need))?;
        self.stream.memcpy_dtod(&v, &mut values.slice_mut(*len * row..need))?;
        let past = *len as u32;
        *len += t;
        let stride = *len as u32;
        let mut scores = self.stream.alloc_zeros::<f32>(t * nh * *len)?;
        let mut out = self.stream.alloc_zeros::<f32>(t * nh * hd)?;
        let (nh32, kvh32, hd32) = (nh as u32, kvh as u32, hd as u32);
        let mut l = self.stream.launch_builder(&self.k.attend);
        l.arg(&q)
            .arg(&*keys)
            .arg(&*values)
            .arg(&qg)
            .arg(&mut scores)
            .arg(&mut out)
            .arg(&nh32)
            .arg(&kvh32)
            .arg(&hd32)
            .arg(&past)
            .arg(&stride);
        // SAFETY: q [t*nh, hd], the caches hold past + t positions, scores [t*nh, stride].
        unsafe { l.launch(rows_of(t * nh)) }?;
        self.linear(&out.slice(..), &a.o, t)
    }

    /// RoPE in place on x [t * heads, head_dim] for positions `position..position + t`.
    fn rope(&self, x: &mut CudaSlice<f32>, heads: usize, t: usize, position: usize) -> anyhow::Result<()> {
        let c = &self.config;
        let (heads, hd, rot, start) = (heads as u32, c.head_dim as u32, c.rotary_dim() as u32, position as u32);
        let mut l = self.stream.launch_builder(&self.k.rope);
        l.arg(x).arg(&heads).arg(&hd).arg(&rot).arg(&self.inv_freq).arg(&start);
        // SAFETY: x holds t * heads rows of hd; inv_freq rot/2 entries.
        unsafe { l.launch(rows_of(t * heads as usize)) }?;
        Ok(())
    }

    /// RMSNorm of `rows` rows of `width` read every `stride` floats from `x`, into a new
    /// dense [rows, width] buffer.
    fn rms_norm(
        &self,
        x: &CudaView<'_, f32>,
        stride: usize,
        gain: &CudaSlice<f32>,
        width: usize,
        rows: usize,
    ) -> anyhow::Result<CudaSlice<f32>> {
        let mut out = self.stream.alloc_zeros::<f32>(rows * width)?;
        let (stride, width32, eps) = (stride as u32, width as u32, self.config.rms_norm_eps as f32);
        let mut l = self.stream.launch_builder(&self.k.rms_norm);
        l.arg(x).arg(&stride).arg(gain).arg(&mut out).arg(&width32).arg(&eps);
        // SAFETY: x holds rows rows at `stride`, each `width` long; gain `width`.
        unsafe { l.launch(rows_of(rows)) }?;
        Ok(out)
    }

    /// `x @ wᵀ` for `rows` rows of x.
    fn linear(&self, x: &CudaView<'_, f32>, w: &Weight, rows: usize) -> anyhow::Result<CudaSlice<f32>> {
        let mut y = self.stream.alloc_zeros::<f32>(rows * w.n_out)?;
        let (n_in, n_out, r) = (w.n_in as u32, w.n_out as u32, rows as u32);
        let cfg = LaunchConfig {
            grid_dim: (n_out.div_ceil(LINEAR_WARPS), r.div_ceil(LINEAR_TOKENS), 1),
            block_dim: (LINEAR_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.stream.launch_builder(&self.k.linear);
        l.arg(x).arg(&w.data).arg(&mut y).arg(&n_in).arg(&n_out).arg(&r);
        // SAFETY: x holds rows * n_in floats, w n_out * n_in, y rows * n_out.
        unsafe { l.launch(cfg) }?;
        Ok(y)
    }

    fn add_into(&self, h: &mut CudaSlice<f32>, delta: &CudaSlice<f32>) -> anyhow::Result<()> {
        let n = h.len() as u32;
        let mut l = self.stream.launch_builder(&self.k.add_into);
        l.arg(h).arg(delta).arg(&n);
        // SAFETY: both hold n floats.
        unsafe { l.launch(grid(n as usize, 256)) }?;
        Ok(())
    }
}

impl GpuTextState {
    /// Every number of the carried state, copied to the host (to compare states).
    pub fn numbers(&self, model: &GpuTextModel) -> anyhow::Result<Vec<Vec<f32>>> {
        let s = &model.stream;
        let mut out = Vec::new();
        for layer in &self.layers {
            match layer {
                GpuLayerState::Gdn { conv, recurrent } => {
                    out.push(s.clone_dtoh(conv)?);
                    out.push(s.clone_dtoh(recurrent)?);
                }
                GpuLayerState::Attention { keys, values, len } => {
                    let n = *len * model.config.num_key_value_heads * model.config.head_dim;
                    out.push(s.clone_dtoh(&keys.slice(..n))?);
                    out.push(s.clone_dtoh(&values.slice(..n))?);
                }
            }
        }
        Ok(out)
    }
}

//! The dense evaluation path, on candle tensors on the CPU (the GPU runs the same math
//! in its own kernels: inband-host-runtime's `gpu::text`). Every layer type: Gated DeltaNet mixers with their
//! conv and recurrent state, gated full attention with a KV cache and partial RoPE,
//! the SwiGLU MLP and the zero-centred RMSNorms. Shapes are [B, T, H]; decode is T = 1,
//! prefill any T, with state carried between calls.

use candle_core::{DType, Device, IndexOp, Result, Tensor, D};
use rayon::prelude::*;

use crate::config::TextConfig;
use crate::weights::{Array, DecoderLayer, FullAttention, LinearAttention, Mixer, Mlp};

/// Uploads an [`Array`] as an f32 tensor.
pub fn tensor(a: &Array, device: &Device) -> Result<Tensor> {
    Tensor::from_slice(&a.data, a.shape.as_slice(), device)
}

fn silu(x: &Tensor) -> Result<Tensor> {
    // x / (1 + exp(-x)), as the reference writes it.
    x / (x.neg()?.exp()? + 1.0)?
}

fn sigmoid(x: &Tensor) -> Result<Tensor> {
    (x.neg()?.exp()? + 1.0)?.recip()
}

fn softplus(x: &Tensor) -> Result<Tensor> {
    // torch's threshold 20: linear above it.
    let soft = (x.exp()? + 1.0)?.log()?;
    x.gt(20.0)?.where_cond(x, &soft)
}

fn rsqrt(x: &Tensor) -> Result<Tensor> {
    x.sqrt()?.recip()
}

/// `x @ wᵀ` for x [.., in] and w [out, in]: candle's matmul, or (row-invariant) every
/// output a fixed-order dot product, so a token's result is the same whether it goes
/// through the model alone or in a batch (prefill equals token-by-token decoding).
fn linear(x: &Tensor, w: &Tensor, row_invariant: bool) -> Result<Tensor> {
    if !row_invariant {
        return x.broadcast_matmul(&w.t()?);
    }
    let dims = x.dims().to_vec();
    let (rows, n_in) = (x.elem_count() / dims[dims.len() - 1], dims[dims.len() - 1]);
    let (n_out, w_in) = w.dims2()?;
    if w_in != n_in {
        candle_core::bail!("linear: input width {n_in} against weight width {w_in}");
    }
    let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
    let w = w.contiguous()?;
    let (storage, layout) = w.storage_and_layout();
    let candle_core::Storage::Cpu(candle_core::CpuStorage::F32(wv)) = &*storage else {
        candle_core::bail!("row-invariant linear needs f32 weights on the CPU");
    };
    let ws = &wv[layout.start_offset()..layout.start_offset() + n_out * n_in];
    // Rows in blocks that stay in cache while every weight row passes over them once.
    const BLOCK: usize = 64;
    let mut out = vec![0f32; rows * n_out];
    for r0 in (0..rows).step_by(BLOCK) {
        let r1 = (r0 + BLOCK).min(rows);
        let mut part = vec![0f32; (r1 - r0) * n_out]; // [out, rows of the block]
        part.par_chunks_mut(r1 - r0).enumerate().for_each(|(o, dst)| {
            let wr = &ws[o * n_in..(o + 1) * n_in];
            let row = |r: usize| &xs[r * n_in..(r + 1) * n_in];
            // Four rows share each load of the weight row.
            let mut quads = dst.chunks_exact_mut(4);
            let mut r = r0;
            for d in &mut quads {
                d.copy_from_slice(&dot4([row(r), row(r + 1), row(r + 2), row(r + 3)], wr));
                r += 4;
            }
            for d in quads.into_remainder() {
                *d = dot4([row(r); 4], wr)[0];
                r += 1;
            }
        });
        for (o, col) in part.chunks(r1 - r0).enumerate() {
            for (r, v) in (r0..r1).zip(col) {
                out[r * n_out + o] = *v;
            }
        }
    }
    let mut shape = dims;
    *shape.last_mut().expect("x has an input axis") = n_out;
    Tensor::from_vec(out, shape, x.device())
}

/// Four dot products with one vector, each in a fixed order: eight strided partial sums,
/// a tail, then a fixed tree (the same order whichever rows come together).
fn dot4(a: [&[f32]; 4], b: &[f32]) -> [f32; 4] {
    let mut acc = [[0f32; 8]; 4];
    let n = b.len() / 8 * 8;
    for c in (0..n).step_by(8) {
        let w = &b[c..c + 8];
        for (acc, a) in acc.iter_mut().zip(&a) {
            let x = &a[c..c + 8];
            for j in 0..8 {
                acc[j] += x[j] * w[j];
            }
        }
    }
    let mut out = [0f32; 4];
    for ((o, acc), a) in out.iter_mut().zip(&acc).zip(&a) {
        let tail = a[n..].iter().zip(&b[n..]).map(|(x, y)| x * y).fold(0.0, |s, v| s + v);
        *o = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
    }
    out
}

/// Zero-centred RMSNorm over the last axis: `x * rsqrt(mean(x^2) + eps) * gain`,
/// where `gain` is the precomputed `1 + weight`.
fn rms_norm(x: &Tensor, gain: &Tensor, eps: f64) -> Result<Tensor> {
    let inv = rsqrt(&(x.sqr()?.mean_keepdim(D::Minus1)? + eps)?)?;
    x.broadcast_mul(&inv)?.broadcast_mul(gain)
}

/// L2 normalisation over the last axis with the GDN kernels' eps.
fn l2norm(x: &Tensor) -> Result<Tensor> {
    let inv = rsqrt(&(x.sqr()?.sum_keepdim(D::Minus1)? + crate::scalar::L2NORM_EPS as f64)?)?;
    x.broadcast_mul(&inv)
}

struct DenseGdn {
    qkv: Tensor,
    z: Tensor,
    b: Tensor,
    a: Tensor,
    /// [conv_dim, K].
    conv: Tensor,
    a_log_exp: Tensor,
    dt_bias: Tensor,
    norm: Tensor,
    out_proj: Tensor,
}

struct DenseAttention {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    q_gain: Tensor,
    k_gain: Tensor,
}

enum DenseMixer {
    Gdn(DenseGdn),
    Attention(DenseAttention),
}

struct DenseMlp {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

/// A decoder layer's weights on a device.
pub struct DenseLayer {
    config: TextConfig,
    /// Row-invariant projections and per-row attention (see [`linear`]).
    pub row_invariant: bool,
    input_gain: Tensor,
    post_gain: Tensor,
    mixer: DenseMixer,
    mlp: DenseMlp,
}

/// The carried state of one layer for a batch of sequences.
#[derive(Debug, Clone)]
pub enum DenseState {
    Gdn {
        /// [B, conv_dim, K-1]: raw inputs of the last K-1 tokens, oldest first.
        conv: Tensor,
        /// [B, Hv, dk, dv].
        recurrent: Tensor,
    },
    Attention {
        /// [B, kv_heads, T_past, head_dim] after k_norm and RoPE; None before the first token.
        keys: Option<Tensor>,
        values: Option<Tensor>,
    },
}

fn gain(a: &Array, device: &Device) -> Result<Tensor> {
    tensor(a, device)? + 1.0
}

impl DenseLayer {
    pub fn new(layer: &DecoderLayer, config: &TextConfig, device: &Device) -> Result<Self> {
        let mixer = match &layer.mixer {
            Mixer::Linear(LinearAttention {
                in_proj_qkv,
                in_proj_z,
                in_proj_b,
                in_proj_a,
                conv1d,
                a_log,
                dt_bias,
                norm,
                out_proj,
            }) => DenseMixer::Gdn(DenseGdn {
                qkv: tensor(in_proj_qkv, device)?,
                z: tensor(in_proj_z, device)?,
                b: tensor(in_proj_b, device)?,
                a: tensor(in_proj_a, device)?,
                conv: tensor(conv1d, device)?,
                a_log_exp: tensor(a_log, device)?.exp()?,
                dt_bias: tensor(dt_bias, device)?,
                norm: tensor(norm, device)?,
                out_proj: tensor(out_proj, device)?,
            }),
            Mixer::Full(FullAttention {
                q_proj,
                k_proj,
                v_proj,
                o_proj,
                q_norm,
                k_norm,
            }) => DenseMixer::Attention(DenseAttention {
                q: tensor(q_proj, device)?,
                k: tensor(k_proj, device)?,
                v: tensor(v_proj, device)?,
                o: tensor(o_proj, device)?,
                q_gain: gain(q_norm, device)?,
                k_gain: gain(k_norm, device)?,
            }),
        };
        let Mlp {
            gate_proj,
            up_proj,
            down_proj,
        } = &layer.mlp;
        Ok(Self {
            config: config.clone(),
            row_invariant: false,
            input_gain: gain(&layer.input_layernorm, device)?,
            post_gain: gain(&layer.post_attention_layernorm, device)?,
            mixer,
            mlp: DenseMlp {
                gate: tensor(gate_proj, device)?,
                up: tensor(up_proj, device)?,
                down: tensor(down_proj, device)?,
            },
        })
    }

    /// A fresh (empty) state for `batch` sequences.
    pub fn new_state(&self, batch: usize, device: &Device) -> Result<DenseState> {
        let c = &self.config;
        Ok(match self.mixer {
            DenseMixer::Gdn(_) => DenseState::Gdn {
                conv: Tensor::zeros((batch, c.conv_dim(), c.linear_conv_kernel_dim - 1), DType::F32, device)?,
                recurrent: Tensor::zeros(
                    (
                        batch,
                        c.linear_num_value_heads,
                        c.linear_key_head_dim,
                        c.linear_value_head_dim,
                    ),
                    DType::F32,
                    device,
                )?,
            },
            DenseMixer::Attention(_) => DenseState::Attention {
                keys: None,
                values: None,
            },
        })
    }

    /// Runs `x` [B, T, H] through the layer. `position` is the index of the first of
    /// the T tokens in the sequence (RoPE); the state carries everything before it.
    pub fn forward(&self, x: &Tensor, state: &mut DenseState, position: usize) -> Result<Tensor> {
        let eps = self.config.rms_norm_eps;
        let normed = rms_norm(x, &self.input_gain, eps)?;
        let mixed = match (&self.mixer, state) {
            (DenseMixer::Gdn(g), DenseState::Gdn { conv, recurrent }) => self.gdn(g, &normed, conv, recurrent)?,
            (DenseMixer::Attention(a), DenseState::Attention { keys, values }) => {
                self.attention(a, &normed, keys, values, position)?
            }
            _ => candle_core::bail!("layer state does not match the layer type"),
        };
        let h = (x + mixed)?;
        let normed = rms_norm(&h, &self.post_gain, eps)?;
        let act = (silu(&linear(&normed, &self.mlp.gate, self.row_invariant)?)?
            * linear(&normed, &self.mlp.up, self.row_invariant)?)?;
        h + linear(&act, &self.mlp.down, self.row_invariant)?
    }

    fn gdn(&self, g: &DenseGdn, x: &Tensor, conv_state: &mut Tensor, s: &mut Tensor) -> Result<Tensor> {
        let c = &self.config;
        let (batch, t, _) = x.dims3()?;
        let (hk, hv, dk, dv) = (
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
        );
        let group = c.value_heads_per_key_head();
        let kernel = c.linear_conv_kernel_dim;
        let key_dim = c.key_dim();
        let mixed = linear(x, &g.qkv, self.row_invariant)?; // [B, T, conv_dim]
        let z = linear(x, &g.z, self.row_invariant)?.reshape((batch, t, hv, dv))?;
        let beta = sigmoid(&linear(x, &g.b, self.row_invariant)?)?; // [B, T, Hv]
        let a = linear(x, &g.a, self.row_invariant)?;
        let decay = (softplus(&a.broadcast_add(&g.dt_bias)?)?
            .broadcast_mul(&g.a_log_exp)?
            .neg()?)
        .exp()?;

        let mut outputs = Vec::with_capacity(t);
        for step in 0..t {
            let raw = mixed.i((.., step, ..))?; // [B, C]
            let window = Tensor::cat(&[conv_state.clone(), raw.unsqueeze(2)?], 2)?; // [B, C, K]
            *conv_state = window.narrow(2, 1, kernel - 1)?.contiguous()?;
            let y = silu(&window.broadcast_mul(&g.conv)?.sum(2)?)?; // [B, C]
            let q = y.narrow(1, 0, key_dim)?.reshape((batch, hk, dk))?;
            let k = y.narrow(1, key_dim, key_dim)?.reshape((batch, hk, dk))?;
            let v = y.narrow(1, 2 * key_dim, hv * dv)?.reshape((batch, hv, dv))?;
            let (q, k) = if group > 1 {
                let rep = |t: &Tensor| -> Result<Tensor> {
                    t.unsqueeze(2)?.repeat((1, 1, group, 1))?.reshape((batch, hv, dk))
                };
                (rep(&q)?, rep(&k)?)
            } else {
                (q, k)
            };
            let q = (l2norm(&q)? / (dk as f64).sqrt())?;
            let k = l2norm(&k)?;
            let d = decay.i((.., step, ..))?.reshape((batch, hv, 1, 1))?;
            let b = beta.i((.., step, ..))?.reshape((batch, hv, 1))?;
            // The reference sums (S * k).sum over dk; a batched matmul is the same
            // contraction in another summation order.
            let decayed = s.broadcast_mul(&d)?;
            let kv_mem = k.unsqueeze(2)?.matmul(&decayed)?.squeeze(2)?; // [B, Hv, dv]
            let delta = (v - kv_mem)?.broadcast_mul(&b)?;
            *s = (decayed + k.unsqueeze(3)?.matmul(&delta.unsqueeze(2)?)?)?;
            let o = q.unsqueeze(2)?.matmul(s)?.squeeze(2)?; // [B, Hv, dv]
                                                            // Gated RMSNorm per value head.
            let inv = rsqrt(&(o.sqr()?.mean_keepdim(D::Minus1)? + c.rms_norm_eps)?)?;
            let n = o.broadcast_mul(&inv)?.broadcast_mul(&g.norm)?;
            let gated = (n * silu(&z.i((.., step, .., ..))?)?)?;
            outputs.push(gated.reshape((batch, 1, hv * dv))?);
        }
        let core = Tensor::cat(&outputs, 1)?;
        linear(&core, &g.out_proj, self.row_invariant)
    }

    fn attention(
        &self,
        a: &DenseAttention,
        x: &Tensor,
        keys: &mut Option<Tensor>,
        values: &mut Option<Tensor>,
        position: usize,
    ) -> Result<Tensor> {
        let c = &self.config;
        let (batch, t, _) = x.dims3()?;
        let (nh, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let qg = linear(x, &a.q, self.row_invariant)?.reshape((batch, t, nh, 2 * hd))?;
        let query = qg.narrow(3, 0, hd)?;
        let gate = qg.narrow(3, hd, hd)?.reshape((batch, t, nh * hd))?;
        let query = rms_norm(&query.contiguous()?, &a.q_gain, c.rms_norm_eps)?.transpose(1, 2)?; // [B, nh, T, hd]
        let key = rms_norm(
            &linear(x, &a.k, self.row_invariant)?.reshape((batch, t, kvh, hd))?,
            &a.k_gain,
            c.rms_norm_eps,
        )?
        .transpose(1, 2)?;
        let value = linear(x, &a.v, self.row_invariant)?
            .reshape((batch, t, kvh, hd))?
            .transpose(1, 2)?
            .contiguous()?;
        let (cos, sin) = rope_tables(c, position, t, x.device())?;
        let query = apply_rope(&query, &cos, &sin, c.rotary_dim())?;
        let key = apply_rope(&key, &cos, &sin, c.rotary_dim())?;
        let key = match keys.take() {
            Some(past) => Tensor::cat(&[past, key], 2)?,
            None => key,
        };
        let value = match values.take() {
            Some(past) => Tensor::cat(&[past, value], 2)?,
            None => value,
        };
        *keys = Some(key.clone());
        *values = Some(value.clone());
        let past = key.dim(2)? - t;
        let out = if self.row_invariant && t > 1 {
            // Each query row exactly as decoding it alone would: its keys, no mask.
            let rows = (0..t)
                .map(|i| {
                    let seen = past + i + 1;
                    attend(
                        &query.narrow(2, i, 1)?,
                        &key.narrow(2, 0, seen)?,
                        &value.narrow(2, 0, seen)?,
                        nh,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&rows, 1)?
        } else {
            attend(&query, &key, &value, nh)?
        };
        let out = (out * sigmoid(&gate)?)?;
        linear(&out, &a.o, self.row_invariant)
    }
}

/// Causal attention of `query` [B, nh, T, hd] over `key`/`value` [B, kvh, total, hd]
/// (the last T keys are the queries' own): [B, T, nh * hd].
fn attend(query: &Tensor, key: &Tensor, value: &Tensor, nh: usize) -> Result<Tensor> {
    let (batch, _, t, hd) = query.dims4()?;
    let (kvh, total) = (key.dim(1)?, key.dim(2)?);
    let rep = nh / kvh;
    let expand = |x: &Tensor| -> Result<Tensor> {
        if rep == 1 {
            return Ok(x.clone());
        }
        x.unsqueeze(2)?
            .repeat((1, 1, rep, 1, 1))?
            .reshape((batch, nh, total, hd))
    };
    let (key, value) = (expand(key)?, expand(value)?);
    let scores = (query.contiguous()?.matmul(&key.t()?.contiguous()?)? * (hd as f64).powf(-0.5))?;
    // Causal mask: query i (absolute position + i) sees keys up to it.
    let past = total - t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..total).map(move |j| if j <= past + i { 0.0 } else { f32::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(mask, (t, total), query.device())?;
    let scores = scores.broadcast_add(&mask)?;
    let max = scores.max_keepdim(D::Minus1)?;
    let e = scores.broadcast_sub(&max)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    p.matmul(&value.contiguous()?)?
        .transpose(1, 2)?
        .reshape((batch, t, nh * hd))
}

/// RoPE's rotary_dim / 2 inverse frequencies, in f32 (the GPU text kernels take these too).
pub fn rope_inv_freq(c: &TextConfig) -> Vec<f32> {
    let rot = c.rotary_dim();
    let theta = c.rope_parameters.rope_theta as f32;
    (0..rot / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / rot as f32))
        .collect()
}

/// cos and sin tables [T, rotary_dim] for positions `start..start+t` (text-only
/// positions make Qwen3.5's interleaved mRoPE ordinary RoPE).
fn rope_tables(c: &TextConfig, start: usize, t: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let rot = c.rotary_dim();
    let inv_freq = rope_inv_freq(c);
    let mut cos = Vec::with_capacity(t * rot);
    let mut sin = Vec::with_capacity(t * rot);
    for p in start..start + t {
        let freqs: Vec<f32> = inv_freq.iter().map(|f| p as f32 * f).collect();
        // The table is cat(freqs, freqs): both halves of the rotated part share frequencies.
        for _ in 0..2 {
            cos.extend(freqs.iter().map(|f| f.cos()));
            sin.extend(freqs.iter().map(|f| f.sin()));
        }
    }
    Ok((
        Tensor::from_vec(cos, (t, rot), device)?,
        Tensor::from_vec(sin, (t, rot), device)?,
    ))
}

/// NeoX-style rotation of the first `rot` dims of x [B, heads, T, hd].
fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor, rot: usize) -> Result<Tensor> {
    let hd = x.dim(3)?;
    let rotated = x.narrow(3, 0, rot)?;
    let pass = x.narrow(3, rot, hd - rot)?;
    let x1 = rotated.narrow(3, 0, rot / 2)?;
    let x2 = rotated.narrow(3, rot / 2, rot / 2)?;
    let half = Tensor::cat(&[x2.neg()?, x1], 3)?;
    let embedded = (rotated.broadcast_mul(cos)? + half.broadcast_mul(sin)?)?;
    Tensor::cat(&[embedded, pass], 3)
}

/// The final norm and the logits: `norm(h) @ lm_headᵀ`.
pub struct DenseHead {
    /// Row-invariant logits (see [`linear`]).
    pub row_invariant: bool,
    gain: Tensor,
    lm_head: Tensor,
    eps: f64,
}

impl DenseHead {
    pub fn new(final_norm: &Array, lm_head: &Array, config: &TextConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            row_invariant: false,
            gain: gain(final_norm, device)?,
            lm_head: tensor(lm_head, device)?,
            eps: config.rms_norm_eps,
        })
    }

    /// Logits [B, T, vocab] for hidden states [B, T, H].
    pub fn logits(&self, h: &Tensor) -> Result<Tensor> {
        linear(&rms_norm(h, &self.gain, self.eps)?, &self.lm_head, self.row_invariant)
    }
}

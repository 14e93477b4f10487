//! The sparse evaluation path: the same decoder-layer math as the dense path, for
//! linear-attention (GDN) layers, skipping work that provably contributes nothing:
//! zero weights (CSR matrices), conv channels with all-zero taps, MLP neurons with
//! empty rows, heads whose beta is exactly 0 (the state is untouched bit for bit) and
//! whose query is exactly 0 (the read is exactly 0). Chip layers are almost all zeros,
//! so this path runs real programs on the CPU.

use crate::config::TextConfig;
use crate::scalar::{self, rsqrt, sigmoid, silu};
use crate::weights::{Array, DecoderLayer, Mixer};

/// Order in which each row's products are accumulated. Both are faithful
/// implementations of the same math; the chip must not care which one runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SumOrder {
    /// Ascending column index.
    #[default]
    Forward,
    /// Descending column index.
    Reverse,
}

/// Bytes [`SparseRows::push`] tests for zero at once (a multiple of every
/// element size).
const ZERO_SCAN_BLOCK: usize = 64;

/// True when every byte is zero (eight at a time, which the compiler vectorises).
pub fn all_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    words.fold(0u64, |acc, w| acc | u64::from_ne_bytes(w.try_into().expect("8 bytes"))) == 0
        && tail.iter().all(|b| *b == 0)
}

/// Values [`nonzero_dims`] tests at once (whole chunks of zeros are skipped).
const NONZERO_SCAN_CHUNK: usize = 16;

/// True when every entry of `x` is ±0. Without an early exit, so it runs as a few
/// vector instructions per chunk (the sign bit shifted out of each value's bits).
#[inline]
pub fn all_signed_zeros(x: &[f32]) -> bool {
    x.iter().fold(0u32, |acc, v| acc | (v.to_bits() << 1)) == 0
}

/// The indices of `x`'s entries that are not ±0 (NaNs included), ascending, into `out`.
/// A chunk at a time: a chip's vectors are mostly zeros.
pub fn nonzero_dims(x: &[f32], out: &mut Vec<u32>) {
    out.clear();
    for (i, chunk) in x.chunks(NONZERO_SCAN_CHUNK).enumerate() {
        if all_signed_zeros(chunk) {
            continue;
        }
        let first = i * NONZERO_SCAN_CHUNK;
        out.extend(
            (0..chunk.len())
                .filter(|&j| chunk[j] != 0.0)
                .map(|j| (first + j) as u32),
        );
    }
}

/// The (index, value) slots of `v` that are not ±0, ascending, into `out`. Keys and
/// queries are mostly zero: only these slots enter their sums, in ascending order, as
/// in the dense sums (adding an exact zero to a fold from +0 changes nothing).
fn nonzero_slots(v: &[f32], out: &mut Vec<(usize, f32)>) {
    out.clear();
    out.extend(v.iter().enumerate().filter(|(_, x)| **x != 0.0).map(|(i, x)| (i, *x)));
}

/// `out[e]` = the fold from +0 over `slots` (ascending) of `rows[row·dv + e] · weight`.
/// Row by row, so each element's fold keeps the slots' order and the rows stream.
fn rows_times_slots(rows: &[f32], slots: &[(usize, f32)], dv: usize, out: &mut [f32]) {
    out.fill(0.0);
    for &(row, w) in slots {
        for (o, x) in out.iter_mut().zip(&rows[row * dv..(row + 1) * dv]) {
            *o += x * w;
        }
    }
}

/// A compressed-sparse-row f32 matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseMatrix {
    pub rows: usize,
    pub cols: usize,
    row_start: Vec<u32>,
    col: Vec<u32>,
    value: Vec<f32>,
}

impl SparseMatrix {
    pub fn from_dense(a: &Array) -> Self {
        let (rows, cols) = a.dims2();
        let mut row_start = Vec::with_capacity(rows + 1);
        let (mut col, mut value) = (Vec::new(), Vec::new());
        row_start.push(0);
        for r in 0..rows {
            for (c, &v) in a.row(r).iter().enumerate() {
                if v != 0.0 {
                    col.push(c as u32);
                    value.push(v);
                }
            }
            row_start.push(col.len() as u32);
        }
        Self {
            rows,
            cols,
            row_start,
            col,
            value,
        }
    }

    pub fn nonzeros(&self) -> usize {
        self.value.len()
    }

    /// Row `r`'s nonzero entries: (columns ascending, values).
    pub fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let (s, e) = (self.row_start[r] as usize, self.row_start[r + 1] as usize);
        (&self.col[s..e], &self.value[s..e])
    }

    /// True when row `r` has no nonzero entry.
    pub fn row_is_empty(&self, r: usize) -> bool {
        self.row_start[r] == self.row_start[r + 1]
    }

    /// The dot product of row `r` with `x`.
    #[inline]
    pub fn row_dot(&self, r: usize, x: &[f32], order: SumOrder) -> f32 {
        let (s, e) = (self.row_start[r] as usize, self.row_start[r + 1] as usize);
        let (cols, vals) = (&self.col[s..e], &self.value[s..e]);
        let mut acc = 0.0f32;
        match order {
            SumOrder::Forward => {
                for (c, v) in cols.iter().zip(vals) {
                    acc += v * x[*c as usize];
                }
            }
            SumOrder::Reverse => {
                for (c, v) in cols.iter().zip(vals).rev() {
                    acc += v * x[*c as usize];
                }
            }
        }
        acc
    }

    /// `out = self · x`.
    pub fn matvec(&self, x: &[f32], out: &mut [f32], order: SumOrder) {
        for (r, o) in out.iter_mut().enumerate().take(self.rows) {
            *o = self.row_dot(r, x, order);
        }
    }
}

/// Builds a [`SparseMatrix`] row by row from stored bytes: only nonzero values are
/// decoded, so scanning a mostly-zero tensor costs little more than reading its bytes.
pub struct SparseRows {
    matrix: SparseMatrix,
    dtype: safetensors::Dtype,
    size: usize,
}

impl SparseRows {
    /// An empty matrix of `cols` columns whose rows arrive as little-endian `dtype` values.
    pub fn new(cols: usize, dtype: safetensors::Dtype) -> Result<Self, String> {
        let size = match dtype {
            safetensors::Dtype::F32 => 4,
            safetensors::Dtype::BF16 | safetensors::Dtype::F16 => 2,
            other => return Err(format!("dtype {other:?} is not a float type")),
        };
        Ok(Self {
            matrix: SparseMatrix {
                rows: 0,
                cols,
                row_start: vec![0],
                col: Vec::new(),
                value: Vec::new(),
            },
            dtype,
            size,
        })
    }

    /// Appends a row whose stored values are columns `first_col`, `first_col + 1`, …
    /// (every other column zero).
    pub fn push(&mut self, first_col: usize, bytes: &[u8]) -> Result<(), String> {
        let m = &mut self.matrix;
        if first_col + bytes.len() / self.size > m.cols {
            return Err(format!("row {} has more than {} columns", m.rows, m.cols));
        }
        // A block at a time: most of a chip row's blocks are all zeros.
        for (block_index, block) in bytes.chunks(ZERO_SCAN_BLOCK).enumerate() {
            if all_zero(block) {
                continue;
            }
            let first = first_col + block_index * ZERO_SCAN_BLOCK / self.size;
            for (i, v) in crate::checkpoint::to_f32(self.dtype, block)?.into_iter().enumerate() {
                if v != 0.0 {
                    m.col.push((first + i) as u32);
                    m.value.push(v);
                }
            }
        }
        m.row_start.push(m.col.len() as u32);
        m.rows += 1;
        Ok(())
    }

    pub fn finish(self) -> SparseMatrix {
        self.matrix
    }
}

/// How far a step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The whole layer: the state written, the read, out_proj and the MLP added to the
    /// residual.
    Residual,
    /// Only until the state is written (the conv and GDN states end as a whole step
    /// leaves them; the residual is left as it was): for a token whose residual no
    /// later layer reads.
    State,
}

/// The recurrent state of one linear-attention layer for one sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct GdnState {
    /// Raw (pre-conv) q/k/v projections of the last K-1 tokens, oldest first:
    /// [K-1][conv_dim].
    pub conv: Vec<f32>,
    /// [Hv][dk][dv].
    pub recurrent: Vec<f32>,
}

impl GdnState {
    pub fn new(c: &TextConfig) -> Self {
        Self {
            conv: vec![0.0; (c.linear_conv_kernel_dim - 1) * c.conv_dim()],
            recurrent: vec![0.0; c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim],
        }
    }
}

/// A GDN decoder layer prepared for sparse evaluation. Its parts are public so that
/// other engines (the GPU kernel's tables) are built from the same sparse form.
#[derive(Debug, Clone)]
pub struct SparseLayer {
    pub config: TextConfig,
    /// 1 + the zero-centred input_layernorm weight.
    pub input_gain: Vec<f32>,
    /// 1 + the zero-centred post_attention_layernorm weight.
    pub post_gain: Vec<f32>,
    pub qkv: SparseMatrix,
    pub z: SparseMatrix,
    pub b: SparseMatrix,
    pub a: SparseMatrix,
    /// [conv_dim][K].
    pub conv: Vec<f32>,
    /// Channels with a nonzero tap.
    pub live_channels: Vec<usize>,
    pub a_log: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out_proj: SparseMatrix,
    pub gate: SparseMatrix,
    pub up: SparseMatrix,
    pub down: SparseMatrix,
    /// MLP neurons whose gate and up rows both have entries.
    pub live_neurons: Vec<usize>,
    pub order: SumOrder,
    /// Every input and post-attention norm gain is finite (see [`Normed`]).
    pub gains_finite: bool,
}

/// A GDN layer's tensors, matrices already sparse: what [`SparseLayer::from_parts`]
/// assembles (vectors as stored: norm weights zero-centred, conv [conv_dim][K]).
pub struct SparseParts {
    pub input_layernorm: Vec<f32>,
    pub post_attention_layernorm: Vec<f32>,
    pub qkv: SparseMatrix,
    pub z: SparseMatrix,
    pub b: SparseMatrix,
    pub a: SparseMatrix,
    pub conv: Vec<f32>,
    pub a_log: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub norm: Vec<f32>,
    pub out_proj: SparseMatrix,
    pub gate: SparseMatrix,
    pub up: SparseMatrix,
    pub down: SparseMatrix,
}

/// An RMSNorm's output, written where its input is nonzero.
///
/// Where the input is ±0 the formula gives ±0 (with a finite scale and gains); these
/// hold +0 instead. Every use of a normed vector folds products from +0, and a ±0
/// product leaves such a fold unchanged, so the zeros' signs change no result. With a
/// scale or a gain that is not finite (a zero times it is NaN) every dim is written.
#[derive(Debug, Clone, Default)]
struct Normed {
    values: Vec<f32>,
    /// The dims where `values` may be nonzero (NaNs included), ascending: ±0 elsewhere.
    nonzero: Vec<u32>,
    /// Every dim was written last time (the next write clears them all).
    dense: bool,
}

impl Normed {
    /// `values` = x · rsqrt(mean(x²) + eps) · gain. The sum of squares folds only the
    /// nonzero dims: a zero's square is +0, and adding +0 to a sum that starts at +0 and
    /// only grows leaves it unchanged, so the fold is the full left-to-right one.
    fn write(&mut self, x: &[f32], gain: &[f32], gains_finite: bool, eps: f32) {
        let clean = !self.dense && self.values.len() == x.len();
        if clean {
            for &d in &self.nonzero {
                self.values[d as usize] = 0.0;
            }
        } else {
            self.values.clear();
            self.values.resize(x.len(), 0.0);
        }
        nonzero_dims(x, &mut self.nonzero);
        let squares = self
            .nonzero
            .iter()
            .fold(0.0f32, |acc, &d| acc + x[d as usize] * x[d as usize]);
        let inv = rsqrt(squares / x.len() as f32 + eps);
        self.dense = !(inv.is_finite() && gains_finite);
        if self.dense {
            for ((o, v), g) in self.values.iter_mut().zip(x).zip(gain) {
                *o = (v * inv) * g;
            }
            // A zero input may have become NaN: list the output's nonzeros instead.
            nonzero_dims(&self.values, &mut self.nonzero);
        } else {
            for &d in &self.nonzero {
                let d = d as usize;
                self.values[d] = (x[d] * inv) * gain[d];
            }
        }
    }
}

/// Scratch buffers reused across steps.
#[derive(Debug, Clone, Default)]
pub struct Scratch {
    xn: Normed,
    mixed: Vec<f32>,
    y: Vec<f32>,
    head_out: Vec<f32>,
    neurons: Vec<f32>,
    /// Per step: which key heads' queries are nonzero; a key's or query's nonzero slots;
    /// a head's delta; a head's silu(z) gates.
    q_live: Vec<bool>,
    slots: Vec<(usize, f32)>,
    delta: Vec<f32>,
    gates: Vec<f32>,
}

impl SparseLayer {
    /// Prepares a linear-attention layer; `None` for a full-attention layer.
    pub fn new(layer: &DecoderLayer, config: &TextConfig) -> Option<Self> {
        let Mixer::Linear(l) = &layer.mixer else { return None };
        Some(Self::from_parts(
            SparseParts {
                input_layernorm: layer.input_layernorm.data.clone(),
                post_attention_layernorm: layer.post_attention_layernorm.data.clone(),
                qkv: SparseMatrix::from_dense(&l.in_proj_qkv),
                z: SparseMatrix::from_dense(&l.in_proj_z),
                b: SparseMatrix::from_dense(&l.in_proj_b),
                a: SparseMatrix::from_dense(&l.in_proj_a),
                conv: l.conv1d.data.clone(),
                a_log: l.a_log.data.clone(),
                dt_bias: l.dt_bias.data.clone(),
                norm: l.norm.data.clone(),
                out_proj: SparseMatrix::from_dense(&l.out_proj),
                gate: SparseMatrix::from_dense(&layer.mlp.gate_proj),
                up: SparseMatrix::from_dense(&layer.mlp.up_proj),
                down: SparseMatrix::from_dense(&layer.mlp.down_proj),
            },
            config,
        ))
    }

    /// Assembles a layer from its parts: the live conv channels and MLP neurons are
    /// found here, so every way of building a layer finds the same ones.
    pub fn from_parts(p: SparseParts, config: &TextConfig) -> Self {
        let k = config.linear_conv_kernel_dim;
        let live_channels = (0..config.conv_dim())
            .filter(|&c| p.conv[c * k..(c + 1) * k].iter().any(|w| *w != 0.0))
            .collect();
        let live_neurons = (0..p.gate.rows)
            .filter(|&n| !p.gate.row_is_empty(n) && !p.up.row_is_empty(n))
            .collect();
        let input_gain: Vec<f32> = p.input_layernorm.iter().map(|w| 1.0 + w).collect();
        let post_gain: Vec<f32> = p.post_attention_layernorm.iter().map(|w| 1.0 + w).collect();
        let gains_finite = input_gain.iter().chain(&post_gain).all(|g| g.is_finite());
        Self {
            config: config.clone(),
            input_gain,
            post_gain,
            qkv: p.qkv,
            z: p.z,
            b: p.b,
            a: p.a,
            conv: p.conv,
            live_channels,
            a_log: p.a_log,
            dt_bias: p.dt_bias,
            norm: p.norm,
            out_proj: p.out_proj,
            gate: p.gate,
            up: p.up,
            down: p.down,
            live_neurons,
            order: SumOrder::Forward,
            gains_finite,
        }
    }

    /// Nonzero weights of the layer's matrices.
    pub fn nonzeros(&self) -> usize {
        [
            &self.qkv,
            &self.z,
            &self.b,
            &self.a,
            &self.out_proj,
            &self.gate,
            &self.up,
            &self.down,
        ]
        .iter()
        .map(|m| m.nonzeros())
        .sum()
    }

    /// Conv channel `ch` reads an earlier token (a nonzero tap before its last).
    pub fn has_delayed_taps(&self, ch: usize) -> bool {
        let k = self.config.linear_conv_kernel_dim;
        self.conv[ch * k..(ch + 1) * k - 1].iter().any(|w| *w != 0.0)
    }

    /// Conv channel `ch`'s output before its SiLU: its taps over the K-1 cached raw
    /// inputs (`conv_state`, oldest first) and this token's `mixed`.
    pub(crate) fn conv_input(&self, ch: usize, conv_state: &[f32], mixed: f32) -> f32 {
        let (conv_dim, k) = (self.config.conv_dim(), self.config.linear_conv_kernel_dim);
        let w = &self.conv[ch * k..(ch + 1) * k];
        let mut u = 0.0f32;
        for (j, wj) in w.iter().enumerate().take(k - 1) {
            u += wj * conv_state[j * conv_dim + ch];
        }
        u + w[k - 1] * mixed
    }

    /// [`Self::conv_input`] for a channel without delayed taps ([`Self::has_delayed_taps`]
    /// false), whatever the finite cached inputs: each earlier tap's product is ±0, and a
    /// fold from +0 over ±0s stays +0, so the sum is +0 plus the last tap's product.
    pub(crate) fn conv_input_undelayed(&self, ch: usize, mixed: f32) -> f32 {
        let k = self.config.linear_conv_kernel_dim;
        0.0f32 + self.conv[ch * k + k - 1] * mixed
    }

    /// Runs one token through the layer, updating `hidden` ([H]) and `state` in place.
    pub fn step(&self, hidden: &mut [f32], state: &mut GdnState, scratch: &mut Scratch) {
        self.step_with(hidden, state, scratch, &mut RowProducts, Reach::Residual);
    }

    /// [`Self::step`] with the matrix products computed by `products` (the math around
    /// them, and so every rounding, is this one function's), as far as `reach`.
    pub(crate) fn step_with(
        &self,
        hidden: &mut [f32],
        state: &mut GdnState,
        scratch: &mut Scratch,
        products: &mut impl Products,
        reach: Reach,
    ) {
        let c = &self.config;
        let (conv_dim, k) = (c.conv_dim(), c.linear_conv_kernel_dim);
        let (hk, hv, dk, dv) = (
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
        );
        let group = c.value_heads_per_key_head();
        let order = self.order;
        scratch.mixed.resize(conv_dim, 0.0);
        scratch.y.resize(conv_dim, 0.0);
        scratch.head_out.resize(c.value_dim(), 0.0);

        // Input norm and the q/k/v projection (raw, before the conv).
        let eps = c.rms_norm_eps as f32;
        scratch.xn.write(hidden, &self.input_gain, self.gains_finite, eps);
        let (xn, nonzero) = (&scratch.xn.values, &scratch.xn.nonzero);
        // Only channels with a conv tap are ever read (from this token or the cached ones).
        products.qkv(self, xn, nonzero, &mut scratch.mixed);

        // Causal depthwise conv over [K-1 cached raw inputs, this input], then SiLU.
        products.conv(self, &state.conv, &scratch.mixed, &mut scratch.y);
        if products.keeps_conv_state() {
            state.conv.copy_within(conv_dim.., 0);
            let newest = (k - 2) * conv_dim;
            state.conv[newest..newest + conv_dim].copy_from_slice(&scratch.mixed);
        }

        // q and k per key head: L2-normalised, q scaled by 1/sqrt(dk).
        let key_dim = c.key_dim();
        let (q_all, rest) = scratch.y.split_at_mut(key_dim);
        let (k_all, v_all) = rest.split_at_mut(key_dim);
        let q_scale = (dk as f32).sqrt();
        let q_live = &mut scratch.q_live;
        q_live.clear();
        q_live.resize(hk, false);
        for head in 0..hk {
            let q = &mut q_all[head * dk..(head + 1) * dk];
            q_live[head] = !all_signed_zeros(q);
            if q_live[head] {
                scalar::l2norm_in_place(q);
                for v in q.iter_mut() {
                    *v /= q_scale;
                }
            }
            let kk = &mut k_all[head * dk..(head + 1) * dk];
            if !all_signed_zeros(kk) {
                scalar::l2norm_in_place(kk);
            }
        }

        // The delta rule and the read, per value head.
        scratch.head_out.fill(0.0);
        let Scratch {
            slots,
            delta,
            gates,
            head_out,
            ..
        } = scratch;
        delta.resize(dv, 0.0);
        gates.resize(dv, 0.0);
        for head in 0..hv {
            let key_head = head / group;
            let beta = sigmoid(self.b.row_dot(head, xn, order));
            let decay = scalar::gdn_decay(self.a_log[head], self.a.row_dot(head, xn, order), self.dt_bias[head]);
            let s = &mut state.recurrent[head * dk * dv..(head + 1) * dk * dv];
            if decay != 1.0 {
                products.decay(head, s, decay);
            }
            if beta != 0.0 {
                nonzero_slots(&k_all[key_head * dk..(key_head + 1) * dk], slots);
                // delta = (v - S·k)·β: S·k folds the key's slots in ascending order.
                rows_times_slots(s, slots, dv, delta);
                for (d, v) in delta.iter_mut().zip(&v_all[head * dv..(head + 1) * dv]) {
                    *d = (v - *d) * beta;
                }
                for &(row, kv) in slots.iter() {
                    products.wrote(head, row);
                    for (x, d) in s[row * dv..(row + 1) * dv].iter_mut().zip(delta.iter()) {
                        *x += kv * d;
                    }
                }
            }
            if reach == Reach::State || !q_live[key_head] {
                continue;
            }
            nonzero_slots(&q_all[key_head * dk..(key_head + 1) * dk], slots);
            let out = &mut head_out[head * dv..(head + 1) * dv];
            rows_times_slots(s, slots, dv, out);
            // Gated RMSNorm: per head, magnitude discarded, times weight and silu(z).
            let eps = c.rms_norm_eps as f32;
            let inv = rsqrt(scalar::sum_of_squares(out) / dv as f32 + eps);
            products.silu_z(self, xn, nonzero, head * dv, gates);
            for ((o, n), g) in out.iter_mut().zip(&self.norm).zip(gates.iter()) {
                *o = (n * (*o * inv)) * g;
            }
        }

        if reach == Reach::State {
            return;
        }

        // out_proj, then the residual.
        products.out_proj(self, &scratch.head_out, hidden);

        // MLP.
        scratch.xn.write(hidden, &self.post_gain, self.gains_finite, eps);
        scratch.neurons.clear();
        scratch.neurons.resize(self.gate.rows, 0.0);
        products.mlp(
            self,
            &scratch.xn.values,
            &scratch.xn.nonzero,
            &mut scratch.neurons,
            hidden,
        );
    }
}

/// The matrix products of a step. Every implementation computes each row's dot
/// product as [`SparseMatrix::row_dot`] does, bit for bit. `nonzero` lists the dims
/// where `xn` may be nonzero (it is ±0 everywhere else).
pub(crate) trait Products {
    /// `mixed[ch]` = qkv row `ch` · `xn`, for every live conv channel (needed only
    /// where the conv state is kept).
    fn qkv(&mut self, layer: &SparseLayer, xn: &[f32], nonzero: &[u32], mixed: &mut [f32]);
    /// False when the step leaves the conv state as it was: for a machine whose conv
    /// state nothing reads ([`crate::active::ActiveLayer::skip_unread_conv_state`]).
    fn keeps_conv_state(&self) -> bool {
        true
    }
    /// `y[ch]` = silu of conv channel `ch` over [the K-1 cached raw inputs in
    /// `conv_state`, `mixed[ch]`] for every live channel, 0 elsewhere.
    fn conv(&mut self, layer: &SparseLayer, conv_state: &[f32], mixed: &[f32], y: &mut [f32]);
    /// `gates[i]` = silu(z row `first + i` · `xn`) (the same `xn` as the last
    /// [`Self::qkv`]).
    fn silu_z(&mut self, layer: &SparseLayer, xn: &[f32], nonzero: &[u32], first: usize, gates: &mut [f32]);
    /// `hidden[r]` += out_proj row `r` · `head_out`, for every nonempty row.
    fn out_proj(&mut self, layer: &SparseLayer, head_out: &[f32], hidden: &mut [f32]);
    /// `neurons[n]` = silu(gate row n · `xn`) · (up row n · `xn`) for every live neuron,
    /// then `hidden[r]` += down row `r` · `neurons` for every nonempty row.
    fn mlp(&mut self, layer: &SparseLayer, xn: &[f32], nonzero: &[u32], neurons: &mut [f32], hidden: &mut [f32]);
    /// Multiplies value head `head`'s GDN state `s` by `decay` (not 1).
    fn decay(&mut self, _head: usize, s: &mut [f32], decay: f32) {
        for v in s.iter_mut() {
            *v *= decay;
        }
    }
    /// The step wrote GDN state row `row` of value head `head`.
    fn wrote(&mut self, _head: usize, _row: usize) {}
}

/// Products row by row (CSR dot products in the layer's [`SumOrder`]).
pub(crate) struct RowProducts;

impl Products for RowProducts {
    fn qkv(&mut self, l: &SparseLayer, xn: &[f32], _: &[u32], mixed: &mut [f32]) {
        for &ch in &l.live_channels {
            mixed[ch] = l.qkv.row_dot(ch, xn, l.order);
        }
    }

    fn conv(&mut self, l: &SparseLayer, conv_state: &[f32], mixed: &[f32], y: &mut [f32]) {
        y.fill(0.0);
        for &ch in &l.live_channels {
            y[ch] = silu(l.conv_input(ch, conv_state, mixed[ch]));
        }
    }

    fn silu_z(&mut self, l: &SparseLayer, xn: &[f32], _: &[u32], first: usize, gates: &mut [f32]) {
        for (i, g) in gates.iter_mut().enumerate() {
            *g = silu(l.z.row_dot(first + i, xn, l.order));
        }
    }

    fn out_proj(&mut self, l: &SparseLayer, head_out: &[f32], hidden: &mut [f32]) {
        for (r, hid) in hidden.iter_mut().enumerate() {
            if !l.out_proj.row_is_empty(r) {
                *hid += l.out_proj.row_dot(r, head_out, l.order);
            }
        }
    }

    fn mlp(&mut self, l: &SparseLayer, xn: &[f32], _: &[u32], neurons: &mut [f32], hidden: &mut [f32]) {
        for &n in &l.live_neurons {
            let g = l.gate.row_dot(n, xn, l.order);
            let u = l.up.row_dot(n, xn, l.order);
            neurons[n] = silu(g) * u;
        }
        for (r, hid) in hidden.iter_mut().enumerate() {
            if !l.down.row_is_empty(r) {
                *hid += l.down.row_dot(r, neurons, l.order);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full formula over every dim, as the norm was written before it went sparse.
    fn full(x: &[f32], gain: &[f32], eps: f32) -> Vec<f32> {
        let inv = rsqrt(scalar::sum_of_squares(x) / x.len() as f32 + eps);
        x.iter().zip(gain).map(|(v, g)| (v * inv) * g).collect()
    }

    /// A normed vector equals the full formula bit for bit wherever that is not ±0, is ±0
    /// where it is, and lists every dim it may be nonzero at; with a gain that is not
    /// finite (a zero input times it is NaN) it matches every dim, NaNs included.
    #[test]
    fn normed_is_the_full_formula() {
        let mut x = vec![0.0f32; 40];
        (x[3], x[17], x[18], x[39]) = (2.5, -1.0, 1e-30, 7.0);
        let mut gain: Vec<f32> = (0..40).map(|i| i as f32 * 0.25 - 3.0).collect();
        let mut normed = Normed::default();
        for gains_finite in [true, false] {
            if !gains_finite {
                gain[5] = f32::INFINITY;
            }
            normed.write(&x, &gain, gains_finite, 1e-6);
            for (d, (n, f)) in normed.values.iter().zip(full(&x, &gain, 1e-6)).enumerate() {
                if f == 0.0 {
                    assert_eq!(*n, 0.0, "dim {d}");
                } else {
                    assert_eq!(n.to_bits(), f.to_bits(), "dim {d}");
                    assert!(normed.nonzero.contains(&(d as u32)), "dim {d} not listed");
                }
            }
        }
        assert!(normed.values[5].is_nan());
    }
}

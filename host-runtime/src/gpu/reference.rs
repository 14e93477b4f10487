//! The reference kernel's tables (`chip_reference.cu`): every projection row in sliced
//! ELL, summed row by row in ascending column order as the CPU sums it. Kept, selectable
//! with `--kernel reference`, as the yardstick for the activation-sparse kernel.

use anyhow::Context;
use inband_qwen35::sparse::{SparseLayer, SparseMatrix};

use super::{Flat, LayerTables};

/// Mirrors the kernel's `Ell`: one sliced-ELL matrix.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Ell {
    slices: u32,
    base: u32,
    len: u32,
    row_out: u32,
    row_len: u32,
}

/// Mirrors the kernel's `Layer`: offsets into the index (I), weight (W) and state (S) arrays.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LayerOffsets {
    in_gain: u32,
    post_gain: u32,
    xin: Ell,
    n_live: u32,
    live: u32,
    taps: u32,
    conv_state: u32,
    z_at: u32,
    b_at: u32,
    a_at: u32,
    a_log: u32,
    dt_bias: u32,
    norm: u32,
    out: Ell,
    gate_up: Ell,
    n_neur: u32,
    down: Ell,
    rec: u32,
}

/// One projection row for the ELL builder: where its sum goes, and its nonzero
/// (column, weight) pairs in ascending column order.
type Row = (u32, Vec<(usize, f32)>);

/// The ELL entries: columns and weights, index for index.
#[derive(Default)]
pub struct EllEntries {
    pub cols: Vec<u16>,
    pub vals: Vec<f32>,
}

impl EllEntries {
    /// Sliced ELL of `rows`: sorted by length (longest first) so each slice of 32 pads
    /// little, and stored column-major within a slice so a warp's loads are coalesced.
    fn ell(&mut self, f: &mut Flat, mut rows: Vec<Row>) -> anyhow::Result<Ell> {
        rows.sort_by_key(|(_, entries)| std::cmp::Reverse(entries.len()));
        let slices = rows.len().div_ceil(32);
        let (mut base, mut len) = (Vec::new(), Vec::new());
        let (mut row_out, mut row_len) = (vec![u32::MAX; slices * 32], vec![0u32; slices * 32]);
        for (s, slice) in rows.chunks(32).enumerate() {
            let longest = slice.iter().map(|(_, e)| e.len()).max().unwrap_or(0);
            base.push(u32::try_from(self.cols.len()).context("chip projections too large for the GPU kernel")?);
            len.push(longest as u32);
            for k in 0..longest {
                for lane in 0..32 {
                    let (col, val) = slice.get(lane).and_then(|(_, e)| e.get(k)).copied().unwrap_or((0, 0.0));
                    self.cols
                        .push(u16::try_from(col).context("a projection input wider than 65536 for the GPU kernel")?);
                    self.vals.push(val);
                }
            }
            for (lane, (target, entries)) in slice.iter().enumerate() {
                row_out[s * 32 + lane] = *target;
                row_len[s * 32 + lane] = entries.len() as u32;
            }
        }
        Ok(Ell {
            slices: slices as u32,
            base: f.ints(&base),
            len: f.ints(&len),
            row_out: f.ints(&row_out),
            row_len: f.ints(&row_len),
        })
    }
}

/// Row `r` of `m` as (target, nonzeros).
fn row(m: &SparseMatrix, r: usize, target: usize) -> Row {
    let (cols, vals) = m.row(r);
    let entries = cols.iter().zip(vals).map(|(c, v)| (*c as usize, *v)).collect();
    (target as u32, entries)
}

fn nonempty_rows(m: &SparseMatrix) -> Vec<usize> {
    (0..m.rows).filter(|&r| !m.row_is_empty(r)).collect()
}

/// A layer's causal conv over its live channels: (count, channel list, their taps, their
/// ring of three cached raw inputs in S).
fn conv_tables(f: &mut Flat, layer: &SparseLayer) -> (u32, u32, u32, u32) {
    let k = layer.config.linear_conv_kernel_dim;
    let live = &layer.live_channels;
    let taps: Vec<f32> = live
        .iter()
        .flat_map(|&ch| layer.conv[ch * k..(ch + 1) * k].to_vec())
        .collect();
    (
        live.len() as u32,
        f.ints(&live.iter().map(|x| *x as u32).collect::<Vec<_>>()),
        f.floats(&taps),
        f.state(3 * live.len()),
    )
}

/// The reference kernel's per-layer tables and ELL entries.
pub fn tables(layers: &[SparseLayer], f: &mut Flat) -> anyhow::Result<(LayerTables, EllEntries)> {
    let mut e = EllEntries::default();
    let mut offsets = Vec::new();
    let (mut scratch, mut act) = (0usize, 0usize);
    let mut recurrent = Vec::new();
    for layer in layers {
        let c = &layer.config;
        let (hv, dv) = (c.linear_num_value_heads, c.linear_value_head_dim);
        let mut o = LayerOffsets {
            in_gain: f.floats(&layer.input_gain),
            post_gain: f.floats(&layer.post_gain),
            ..Default::default()
        };
        let live = &layer.live_channels;
        (o.n_live, o.live, o.taps, o.conv_state) = conv_tables(f, layer);
        // Scratch for the input projections: live qkv channels | z | b | a; every row
        // is listed (empty ones write 0) because the MLP reuses the scratch.
        (o.z_at, o.b_at, o.a_at) = (
            live.len() as u32,
            (live.len() + hv * dv) as u32,
            (live.len() + hv * dv + hv) as u32,
        );
        let mut xin: Vec<Row> = live.iter().enumerate().map(|(i, &ch)| row(&layer.qkv, ch, i)).collect();
        xin.extend((0..hv * dv).map(|r| row(&layer.z, r, o.z_at as usize + r)));
        xin.extend((0..hv).map(|r| row(&layer.b, r, o.b_at as usize + r)));
        xin.extend((0..hv).map(|r| row(&layer.a, r, o.a_at as usize + r)));
        scratch = scratch.max(xin.len());
        o.xin = e.ell(f, xin)?;
        o.a_log = f.floats(&layer.a_log);
        o.dt_bias = f.floats(&layer.dt_bias);
        o.norm = f.floats(&layer.norm);
        o.out = e.ell(
            f,
            nonempty_rows(&layer.out_proj)
                .into_iter()
                .map(|r| row(&layer.out_proj, r, r))
                .collect(),
        )?;
        // Neurons whose gate and up rows are both nonzero, numbered compactly.
        let neurons = &layer.live_neurons;
        let n = neurons.len();
        o.n_neur = n as u32;
        scratch = scratch.max(2 * n);
        act = act.max(n);
        let mut gate_up: Vec<Row> = neurons
            .iter()
            .enumerate()
            .map(|(i, &r)| row(&layer.gate, r, i))
            .collect();
        gate_up.extend(neurons.iter().enumerate().map(|(i, &r)| row(&layer.up, r, n + i)));
        o.gate_up = e.ell(f, gate_up)?;
        // Down over the compact numbering (a dead neuron's activation is 0: its terms are dropped).
        let compact = super::compact_neurons(layer);
        let down: Vec<Row> = nonempty_rows(&layer.down)
            .into_iter()
            .map(|r| {
                let (t, e) = row(&layer.down, r, r);
                (
                    t,
                    e.into_iter()
                        .filter_map(|(col, v)| compact.get(&col).map(|&i| (i, v)))
                        .collect(),
                )
            })
            .collect();
        o.down = e.ell(f, down)?;
        o.rec = f.state(hv * c.linear_key_head_dim * dv);
        recurrent.push(o.rec);
        offsets.push(o);
    }
    Ok((LayerTables::of(&offsets, recurrent, scratch, act), e))
}

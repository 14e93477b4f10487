//! The activation-sparse kernel's tables (`chip_sparse.cu`): each projection in
//! compressed sparse columns without the anchors' columns, and the anchors' share of every
//! row (its bias) computed here, once, exactly as the CPU path's ascending-column sum
//! computes its first terms.
//!
//! The bias is right only while the input RMSNorm's factor is the one the anchors pin;
//! the kernel checks that on every norm. It also relies on facts of the chip checked
//! here: the norms' gains are exactly 1 on the chip's signal dims (the kernel does not
//! multiply by them), and no layer writes an anchor dim (the anchors stay what the
//! embedding put there).

use anyhow::{bail, Context};
use inband_chip::ChipSpec;
use inband_qwen35::scalar::{gdn_decay, silu};
use inband_qwen35::sparse::{SparseLayer, SparseMatrix};

use super::{Flat, LayerTables};

/// Mirrors the kernel's `Csc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Csc {
    start: u32,
}

/// Mirrors the kernel's `Layer`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LayerOffsets {
    xin: Csc,
    codes: u32,
    zcodes: u32,
    n_delayed: u32,
    delayed: u32,
    taps: u32,
    conv_state: u32,
    z_at: u32,
    b_at: u32,
    a_at: u32,
    palette: u32,
    qk_const: u32,
    head: u32,
    n_heads: u32,
    heads: u32,
    out: Csc,
    gate_up: Csc,
    n_neur: u32,
    n_signal: u32,
    n_awake: u32,
    neuron: u32,
    n_fixed: u32,
    fixed_rows: u32,
    fixed_vals: u32,
    down: Csc,
    rec: u32,
    xin_cols: u32,
    gate_up_cols: u32,
}

/// In a head's table entry: its q and k are zero unless a signal reaches them.
const QUIET_UNLESS_REACHED: u32 = 1 << 16;
/// In a head's table entry: no signal reaches its `a` row and its decay is exactly 1.
const NO_DECAY: u32 = 1 << 17;
/// In a head's table entry: its read adds nothing unless a signal reaches its z (every
/// value column's gate or gain is then 0, or its out_proj column is empty): a read the
/// chip selects only on some passes.
const READ_UNLESS_Z: u32 = 1 << 18;
/// In a head's table entry: when no signal reaches its q and k, both are constants, each
/// with at most one nonzero channel, stored normalised at `qk_const` (see [`constant_qk`]).
const QK_CONSTANT: u32 = 1 << 19;
/// In a head's table entry, from this bit up: its key head (the kernel's integer division
/// of the head by the value heads per key head was on every head's chain).
const KEY_HEAD_SHIFT: u32 = 20;
/// In a head's table entry, bits 8-15: 1 + its kept read's slot where it keeps its reads
/// ([`keeps_reads`]), else 0 (the value head takes the low 8 bits).
const KEEP_SHIFT: u32 = 8;
/// A layer's palette entries per part (channels, z gates); in the channels' part the last
/// code means "has delayed taps" (the kernel's `DELAYED_CODE`).
const PALETTE: usize = 16;
const DELAYED_CODE: u32 = PALETTE as u32 - 1;
/// The down entries a neuron's record holds (the kernel's `INLINE_DOWN`).
const INLINE_DOWN: usize = 2;
/// A neuron's record: four words, then its first down entries (the kernel's two `uint4`s).
const NEURON_WORDS: usize = 4 + 2 * INLINE_DOWN;
/// Entries the kernel can address: its chunk tables pack an entry index into 26 bits.
const MAX_PAIRS: usize = 1 << 26;
/// The most layers the kernel may leave out (a readers byte a dim).
const GATEABLE_LAYERS: usize = 8;
/// Residual dims the kernel lists as written in one pass (its `NZ_CAP`).
pub const NZ_CAP: usize = 2048;

/// The pinned input RMSNorm: its factor, and the ulp of the anchors' sum of squares.
#[derive(Debug, Clone, Copy)]
pub struct PinnedNorm {
    pub inv: f32,
    pub anchor_ulp: f32,
}

impl PinnedNorm {
    /// The factor the CPU's RMSNorm computes when the anchors dominate the mean square:
    /// the base dims are zero and come first, the anchors are the first chip dims, and
    /// every later square is below half an ulp of their sum.
    pub fn of(spec: &ChipSpec, width: usize, eps: f32) -> anyhow::Result<Self> {
        let sum = spec.anchors.iter().fold(0.0f32, |acc, (_, v)| acc + v * v);
        if sum <= 0.0 || !sum.is_finite() {
            bail!("the chip has no anchors to pin its residual norm; use --kernel reference");
        }
        Ok(Self {
            inv: 1.0 / (sum / width as f32 + eps).sqrt(),
            anchor_ulp: sum.next_up() - sum,
        })
    }
}

/// What the sparse kernel keeps in shared memory for the whole run, so that a value
/// head's chain reads its tables there instead of waiting on L2: per layer a 4-bit code
/// per conv channel and per value column (eight a word) naming an entry of the layer's
/// palette (a layer's channel tables take a handful of distinct values: at most 7 on the
/// 0.8b chip, its z-gate tables at most 4; a channel with delayed taps has the code
/// `DELAYED_CODE`: the kernel's conv phase writes its output over its input row). Each
/// layer's palette is `PALETTE` channel entries then `PALETTE` z-gate entries, four floats
/// each.
///
/// After those, where shared memory holds them (the host decides; see
/// [`Resident::required`]), each layer's input projections' and gate/up's column starts
/// ([`resident_columns`]): a scatter then finds a listed dim's column in shared memory
/// instead of waiting on L2 for it (the wait ncu found most sampled in the scatters).
#[derive(Default)]
pub struct Resident {
    pub words: Vec<u32>,
    pub palettes: Vec<f32>,
    /// The words the kernel needs; those after them are the column starts, which it reads
    /// from global memory where they are not resident.
    pub required: usize,
    /// The layers that may be left out (a bit each; [`gateable_readers`]).
    pub gateable: u32,
    /// Each residual dim's readers byte, four a word ([`gateable_readers`]): copied into
    /// shared memory where they fit beside the required words.
    pub readers: Vec<u32>,
}

/// Which layers the kernel may leave out on a pass, and which residual dims reach them:
/// `(gateable, readers)`. A layer whose input rows are all zero does nothing if it has no
/// delayed conv channel and every head of it is quiet unless a signal reaches its q or k,
/// with decay 1 (such a head then neither writes nor reads nor decays): the 0.8b chip's ROM
/// (layer 1) and the layers its memory ports read (4-8), whose inputs are untouched on
/// 71-74 % of passes. The first `GATEABLE_LAYERS` such layers have their bit in
/// `gateable`; each dim's readers byte (four a word) has bit k set where the k-th of them
/// has a column of that dim in its input projections (`offsets[l].xin`, whose starts lie
/// in `f`, over a residual `width` dims wide), so that the kernel knows from the dims it
/// lists whether any reaches such a layer. Made here, once, rather than by the kernel from
/// the resident column bitmaps at every launch: a shape whose column starts do not fit in
/// shared memory (the 4b's) then leaves out layers too.
fn gateable_readers(offsets: &[LayerOffsets], f: &Flat, width: usize) -> (u32, Vec<u32>) {
    let quiet = QUIET_UNLESS_REACHED | NO_DECAY;
    let gateable: Vec<usize> = (0..offsets.len())
        .filter(|&l| {
            let o = &offsets[l];
            let heads = &f.i[o.heads as usize..(o.heads + o.n_heads) as usize];
            o.n_delayed == 0 && o.n_heads > 0 && heads.iter().all(|e| e & quiet == quiet)
        })
        .take(GATEABLE_LAYERS)
        .collect();
    let mut readers = vec![0u32; width.div_ceil(4)];
    for (k, &l) in gateable.iter().enumerate() {
        let start = offsets[l].xin.start as usize;
        let starts = &f.i[start..=start + width];
        for r in (0..width).filter(|&r| starts[r + 1] > starts[r]) {
            readers[r / 4] |= 1 << (8 * (r % 4) + k);
        }
    }
    (gateable.iter().fold(0, |m, l| m | 1 << l), readers)
}

/// Where a layer's resident codes lie (word offsets into [`Resident::words`]) and its
/// palette (a float4 index into [`Resident::palettes`]): the kernel's `Layer` fields of the
/// same names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ResidentAt {
    codes: u32,
    zcodes: u32,
    palette: u32,
}

impl Resident {
    /// Adds a layer's channel and z-gate tables (four floats per entry); returns where its
    /// parts lie.
    fn add(&mut self, layer: usize, channel: &[f32], zgate: &[f32]) -> anyhow::Result<ResidentAt> {
        let delayed = |i: usize| channel[4 * i + 3] != 0.0;
        let (channel_palette, channel_codes) = palette_codes(channel, delayed)
            .with_context(|| format!("layer {layer}'s conv channels; use --kernel reference"))?;
        let (z_palette, z_codes) = palette_codes(zgate, |_| false)
            .with_context(|| format!("layer {layer}'s z gates; use --kernel reference"))?;
        let mut at = ResidentAt {
            palette: (self.palettes.len() / 4) as u32,
            ..Default::default()
        };
        for part in [channel_palette, z_palette] {
            let mut part = part.concat();
            part.resize(4 * PALETTE, 0.0);
            self.palettes.extend(part);
        }
        at.codes = self.append(channel_codes);
        at.zcodes = self.append(z_codes);
        Ok(at)
    }

    /// Appends `words`; returns where they start.
    fn append(&mut self, words: Vec<u32>) -> u32 {
        let at = self.words.len() as u32;
        self.words.extend(words);
        at
    }
}

/// A projection's column starts (CSC, one per residual dim and one past the last) in the
/// form the kernel keeps in shared memory: a bitmap of the columns with entries (a word
/// per 32 dims), the count of such columns before each word, and their starts in order
/// followed by the last one's end. Column c's entries, where its bit is set, run from
/// compact start k to compact start k + 1, k its rank among the set bits: the columns
/// between two with entries are empty, so each one's end is the next one's start.
fn resident_columns(starts: &[u32]) -> Vec<u32> {
    let cols = starts.len() - 1;
    let words = cols.div_ceil(32);
    let (mut bits, mut prefix, mut compact) = (vec![0u32; words], vec![0u32; words], Vec::new());
    for c in 0..cols {
        if c % 32 == 0 {
            prefix[c / 32] = compact.len() as u32;
        }
        if starts[c + 1] > starts[c] {
            bits[c / 32] |= 1 << (c % 32);
            compact.push(starts[c]);
        }
    }
    compact.push(starts[cols]);
    [bits, prefix, compact].concat()
}

/// The distinct entries (four floats each) of `table`, at most `PALETTE - 1`, and a 4-bit
/// code per entry, eight a word: the entry's place in the palette, or `DELAYED_CODE`
/// where `skip` (the kernel reads those channels from their input rows, where its conv
/// phase wrote their outputs).
fn palette_codes(table: &[f32], skip: impl Fn(usize) -> bool) -> anyhow::Result<(Vec<[f32; 4]>, Vec<u32>)> {
    let n = table.len() / 4;
    let mut palette: Vec<[f32; 4]> = Vec::new();
    let mut words = vec![0u32; n.div_ceil(8)];
    for i in 0..n {
        let code = if skip(i) {
            DELAYED_CODE
        } else {
            let entry: [f32; 4] = table[4 * i..4 * i + 4].try_into().expect("four floats");
            let bits = |e: &[f32; 4]| e.map(f32::to_bits);
            match palette.iter().position(|p| bits(p) == bits(&entry)) {
                Some(at) => at as u32,
                None if palette.len() < DELAYED_CODE as usize => {
                    palette.push(entry);
                    palette.len() as u32 - 1
                }
                None => bail!("more than {DELAYED_CODE} distinct tables"),
            }
        };
        words[i / 8] |= code << (4 * (i % 8));
    }
    Ok((palette, words))
}

/// Compressed sparse columns: entries as (row, weight bits) pairs.
#[derive(Default)]
pub struct CscEntries {
    pub pairs: Vec<u32>,
}

impl CscEntries {
    /// `entries` (column, row, weight) as CSC over `cols` columns; column starts go into I.
    fn csc(&mut self, f: &mut Flat, cols: usize, mut entries: Vec<(usize, u32, f32)>) -> anyhow::Result<Csc> {
        entries.sort_by_key(|(c, r, _)| (*c, *r));
        if self.pairs.len() / 2 + entries.len() > MAX_PAIRS {
            bail!("chip projections too large for the GPU kernel ({MAX_PAIRS} weights at most)");
        }
        let mut start = Vec::with_capacity(cols + 1);
        let mut at = 0;
        for c in 0..=cols {
            while at < entries.len() && entries[at].0 < c {
                at += 1;
            }
            let pair = self.pairs.len() / 2 + at;
            start.push(u32::try_from(pair).context("chip projections too large for the GPU kernel")?);
        }
        for (_, row, w) in &entries {
            self.pairs.extend([*row, w.to_bits()]);
        }
        Ok(Csc { start: f.ints(&start) })
    }
}

/// Splits the rows of a projection: each row's anchors' share (folded in ascending column
/// order, as the CPU does) into `bias[target]`, its signal entries into `entries`.
struct Split<'a> {
    anchors: std::ops::Range<usize>,
    chip_base: usize,
    /// The normed input at each anchor column (anchor value × factor × gain).
    anchor_input: &'a [f32],
    bias: Vec<f32>,
    entries: Vec<(usize, u32, f32)>,
}

impl<'a> Split<'a> {
    fn new(spec: &ChipSpec, anchor_input: &'a [f32]) -> Self {
        Self {
            anchors: spec.hidden..spec.hidden + spec.anchors.len(),
            chip_base: spec.hidden,
            anchor_input,
            bias: Vec::new(),
            entries: Vec::new(),
        }
    }

    fn row(&mut self, m: &SparseMatrix, r: usize, target: usize) {
        let (cols, vals) = m.row(r);
        let mut bias = 0.0f32;
        for (&c, &w) in cols.iter().zip(vals) {
            let c = c as usize;
            if self.anchors.contains(&c) {
                bias += w * self.anchor_input[c - self.anchors.start];
            } else if c >= self.chip_base {
                // Base columns read base dims, which are zero in VM mode.
                self.entries.push((c, target as u32, w));
            }
        }
        self.bias[target] = bias;
    }
}

/// Appends the resident form of `m`'s column starts to `columns`; returns where it lies.
fn append_columns(columns: &mut Vec<u32>, f: &Flat, m: Csc, cols: usize) -> u32 {
    let at = columns.len() as u32;
    let start = m.start as usize;
    columns.extend(resident_columns(&f.i[start..=start + cols]));
    at
}

/// Residual dims that a layer's out_proj or down writes.
fn written_rows(m: &SparseMatrix) -> impl Iterator<Item = usize> + '_ {
    (0..m.rows).filter(|&r| !m.row_is_empty(r))
}

/// The sparse kernel's per-layer tables and CSC entries.
pub fn tables(
    layers: &[SparseLayer],
    spec: &ChipSpec,
    norm: PinnedNorm,
    f: &mut Flat,
) -> anyhow::Result<(LayerTables, CscEntries)> {
    let chip_base = spec.hidden;
    let anchors = chip_base..chip_base + spec.anchors.len();
    let mut e = CscEntries::default();
    let mut offsets = Vec::new();
    let (mut scratch, mut act) = (0usize, 0usize);
    let mut recurrent = Vec::new();
    let mut resident = Resident::default();
    let mut columns = Vec::new();
    let mut kept_pairs = Vec::new();
    for (l, layer) in layers.iter().enumerate() {
        let c = &layer.config;
        for (name, gain) in [("input", &layer.input_gain), ("post-attention", &layer.post_gain)] {
            if gain[anchors.end..].iter().any(|g| *g != 1.0) {
                bail!("layer {l}'s {name} norm gain is not 1 on the chip's dims; use --kernel reference");
            }
        }
        for m in [&layer.out_proj, &layer.down] {
            if written_rows(m).any(|r| anchors.contains(&r)) {
                bail!("layer {l} writes an anchor dim of the residual; use --kernel reference");
            }
        }
        let anchor_inputs = |gain: &[f32]| -> Vec<f32> {
            spec.anchors
                .iter()
                .zip(&gain[anchors.clone()])
                .map(|((_, v), g)| (v * norm.inv) * g)
                .collect()
        };
        let mut o = LayerOffsets::default();
        let input_anchors = anchor_inputs(&layer.input_gain);
        let mut xin = Split::new(spec, &input_anchors);
        let rows = mixer_tables(l, layer, &mut xin, &mut o, f, &mut resident, &mut kept_pairs)?;
        scratch = scratch.max(rows);
        o.xin = e.csc(f, c.hidden_size, std::mem::take(&mut xin.entries))?;
        o.xin_cols = append_columns(&mut columns, f, o.xin, c.hidden_size);
        let mut out = Vec::new();
        for r in written_rows(&layer.out_proj) {
            let (cols, vals) = layer.out_proj.row(r);
            out.extend(cols.iter().zip(vals).map(|(c, w)| (*c as usize, r as u32, *w)));
        }
        o.out = e.csc(f, c.value_dim(), out)?;

        let post_anchors = anchor_inputs(&layer.post_gain);
        let mut gate_up = Split::new(spec, &post_anchors);
        act = act.max(mlp_tables(layer, &mut gate_up, &mut o, &mut e, f)?);
        o.gate_up_cols = append_columns(&mut columns, f, o.gate_up, c.hidden_size);
        o.rec = f.state(c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim);
        recurrent.push(o.rec);
        offsets.push(o);
    }
    // The column starts go after every other resident word, so that the host can leave
    // them out where shared memory cannot hold them.
    resident.required = resident.words.len();
    for o in &mut offsets {
        o.xin_cols += resident.required as u32;
        o.gate_up_cols += resident.required as u32;
    }
    resident.words.extend(columns);
    (resident.gateable, resident.readers) =
        gateable_readers(&offsets, f, layers.first().map_or(0, |l| l.config.hidden_size));
    let mut tables = LayerTables::of(&offsets, recurrent, scratch, act);
    tables.resident = resident;
    tables.kept = KeptReads::of(&kept_pairs, f);
    Ok((tables, e))
}

/// The mixer's tables: the input projections' rows (conv channel c at scratch row c, then
/// z, b, a) split into anchors' share and signal entries; per channel its constant output
/// and conv; the heads that can read or write. Returns the scratch rows used.
fn mixer_tables(
    l: usize,
    layer: &SparseLayer,
    xin: &mut Split,
    o: &mut LayerOffsets,
    f: &mut Flat,
    resident: &mut Resident,
    kept_pairs: &mut Vec<usize>,
) -> anyhow::Result<usize> {
    let c = &layer.config;
    let (hk, hv, dk, k) = (
        c.linear_num_key_heads,
        c.linear_num_value_heads,
        c.linear_key_head_dim,
        c.linear_conv_kernel_dim,
    );
    let (conv_dim, key_dim, value_dim) = (c.conv_dim(), c.key_dim(), c.value_dim());
    (o.z_at, o.b_at, o.a_at) = (
        conv_dim as u32,
        (conv_dim + value_dim) as u32,
        (conv_dim + value_dim + hv) as u32,
    );
    let rows = conv_dim + value_dim + 2 * hv;
    xin.bias = vec![0.0; rows];
    for &ch in &layer.live_channels {
        xin.row(&layer.qkv, ch, ch);
    }
    for r in 0..value_dim {
        xin.row(&layer.z, r, o.z_at as usize + r);
    }
    for r in 0..hv {
        xin.row(&layer.b, r, o.b_at as usize + r);
        xin.row(&layer.a, r, o.a_at as usize + r);
    }
    // Per channel: silu(0 + w3 * bias) (the output when no signal reaches it, as the CPU's
    // conv fold computes it with zero delayed taps), w3, bias, 1 where it has delayed taps.
    let mut channel = vec![0.0f32; 4 * conv_dim];
    let (mut delayed, mut taps) = (Vec::<u32>::new(), Vec::new());
    for &ch in &layer.live_channels {
        let w = &layer.conv[ch * k..(ch + 1) * k];
        let bias = xin.bias[ch];
        let has_delayed = layer.has_delayed_taps(ch);
        channel[4 * ch..4 * ch + 4].copy_from_slice(&[
            silu(0.0 + w[k - 1] * bias),
            w[k - 1],
            bias,
            if has_delayed { 1.0 } else { 0.0 },
        ]);
        if has_delayed {
            delayed.extend([ch as u32, bias.to_bits()]);
            taps.extend_from_slice(w);
        }
    }
    // Per delayed channel: (channel, its anchors' share) and its taps, each one load.
    o.n_delayed = (delayed.len() / 2) as u32;
    o.delayed = f.ints_aligned(&delayed, 2);
    o.taps = f.floats_aligned(&taps, 4);
    o.conv_state = f.state(3 * o.n_delayed as usize);
    // Per value column, the z gate: silu(0 + its anchors' share) (the gate when no signal
    // reaches z, as the CPU engine computes it), that share, the gated norm's gain, and 1
    // where its out_proj column has entries.
    let z_bias = &xin.bias[o.z_at as usize..o.b_at as usize];
    let dv = c.linear_value_head_dim;
    let mut out_len = vec![0usize; value_dim];
    for r in written_rows(&layer.out_proj) {
        for &col in layer.out_proj.row(r).0 {
            out_len[col as usize] += 1;
        }
    }
    let out_used: Vec<bool> = out_len.iter().map(|n| *n > 0).collect();
    let zgate: Vec<f32> = (0..value_dim)
        .flat_map(|col| {
            let used = if out_used[col] { 1.0 } else { 0.0 };
            [silu(0.0 + z_bias[col]), z_bias[col], layer.norm[col % dv], used]
        })
        .collect();
    let at = resident.add(l, &channel, &zgate)?;
    (o.codes, o.zcodes, o.palette) = (at.codes, at.zcodes, at.palette);
    let head: Vec<f32> = (0..hv)
        .flat_map(|h| {
            [
                layer.a_log[h],
                layer.dt_bias[h],
                xin.bias[o.b_at as usize + h],
                xin.bias[o.a_at as usize + h],
            ]
        })
        .collect();
    o.head = f.floats_aligned(&head, 4);
    // A head whose key head's q and k channels are all dead never writes or reads: its
    // state stays zero. The others, flagged when q and k are zero unless reached, and when
    // the read adds nothing unless z is reached.
    let live: std::collections::HashSet<usize> = layer.live_channels.iter().copied().collect();
    let closed = |col: usize| zgate[4 * col] == 0.0 || zgate[4 * col + 2] == 0.0 || !out_used[col];
    let constant: Vec<Option<Vec<f32>>> = (0..hk).map(|kh| constant_qk(&channel, kh, dk, key_dim)).collect();
    let mut heads = Vec::new();
    for h in 0..hv {
        let kh = h / (hv / hk);
        let qk: Vec<usize> = (0..dk).flat_map(|e| [kh * dk + e, key_dim + kh * dk + e]).collect();
        if !qk.iter().any(|ch| live.contains(ch)) {
            continue;
        }
        let quiet = qk
            .iter()
            .all(|&ch| channel[4 * ch] == 0.0 && channel[4 * ch + 3] == 0.0);
        let a_row = o.a_at + h as u32;
        let no_decay = !xin.entries.iter().any(|(_, target, _)| *target == a_row)
            && gdn_decay(layer.a_log[h], xin.bias[a_row as usize], layer.dt_bias[h]) == 1.0;
        let read_unless_z = (0..dv).all(|e| closed(h * dv + e));
        let flag = |set: bool, bit: u32| if set { bit } else { 0 };
        let mut flags = flag(quiet, QUIET_UNLESS_REACHED)
            | flag(no_decay, NO_DECAY)
            | flag(read_unless_z, READ_UNLESS_Z)
            | flag(constant[kh].is_some(), QK_CONSTANT);
        if keeps_reads(flags) {
            kept_pairs.push(out_len[h * dv..(h + 1) * dv].iter().sum());
            if kept_pairs.len() > 0xff {
                bail!("the chip has more heads that keep their reads than the kernel's head entries can name");
            }
            flags |= (kept_pairs.len() as u32) << KEEP_SHIFT;
        }
        heads.push(head_entry(h, kh, flags));
    }
    let qk: Vec<f32> = constant
        .into_iter()
        .flat_map(|qk| qk.unwrap_or_else(|| vec![0.0; 2 * dk]))
        .collect();
    o.qk_const = f.floats(&qk);
    o.n_heads = heads.len() as u32;
    o.heads = f.ints(&heads);
    Ok(rows)
}

/// A head's table entry: the value head in the low 8 bits, the flags above it (its kept
/// read's slot from `KEEP_SHIFT`), its key head from `KEY_HEAD_SHIFT` up.
fn head_entry(head: usize, key_head: usize, flags: u32) -> u32 {
    debug_assert!(head < 1 << KEEP_SHIFT && key_head < 1 << (32 - KEY_HEAD_SHIFT));
    head as u32 | flags | (key_head as u32) << KEY_HEAD_SHIFT
}

/// Whether a head with these flags keeps its reads: q and k are constants while nothing
/// reaches them (and q is not zero: not quiet), its decay is 1 and the chip does not
/// select its read, so on a pass where it does not write and no signal reaches its q, k
/// or z it reads what it read the last such time (the 0.8b chip's pc row and offset heads
/// in layer 0). The kernel adds that read's out_proj products again from its slot.
fn keeps_reads(flags: u32) -> bool {
    flags & (QK_CONSTANT | NO_DECAY | READ_UNLESS_Z | QUIET_UNLESS_REACHED) == QK_CONSTANT | NO_DECAY
}

/// Where the kept reads lie in S (the kernel's `kept_at`, `kept_words`, `kept_slots`):
/// a slot a keeping head, each {1 + its pairs or 0, a spare word, then up to the most
/// out_proj entries of any such head as {row, product bits}}.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeptReads {
    pub at: u32,
    pub words: u32,
    pub slots: u32,
}

impl KeptReads {
    /// Slots for heads with `pairs[i]` out_proj entries, in S.
    fn of(pairs: &[usize], f: &mut Flat) -> Self {
        let words = 2 + 2 * pairs.iter().copied().max().unwrap_or(0);
        Self {
            at: f.state(words * pairs.len()),
            words: words as u32,
            slots: pairs.len() as u32,
        }
    }
}

/// Key head `kh`'s q and k while no signal reaches them, as the kernel would normalise
/// them (q scaled by 1/sqrt(dk) too), when that is a constant it can skip: no channel has
/// delayed taps, and q and k each have at most one nonzero channel, so their sums of
/// squares are one square, the same bits in any order (a zero keeps its sign, as the
/// kernel leaves zeros alone). Returns q then k, `dk` each.
fn constant_qk(channel: &[f32], kh: usize, dk: usize, key_dim: usize) -> Option<Vec<f32>> {
    let part = |first: usize, q: bool| -> Option<Vec<f32>> {
        let chs = first + kh * dk..first + (kh + 1) * dk;
        if chs.clone().any(|ch| channel[4 * ch + 3] != 0.0) {
            return None;
        }
        let mut x: Vec<f32> = chs.map(|ch| channel[4 * ch]).collect();
        let nonzero: Vec<f32> = x.iter().copied().filter(|v| *v != 0.0).collect();
        if nonzero.len() > 1 {
            return None;
        }
        if let Some(v) = nonzero.first() {
            let inv = 1.0 / (v * v + inband_qwen35::scalar::L2NORM_EPS).sqrt();
            let qs = (dk as f32).sqrt();
            for e in x.iter_mut().filter(|e| **e != 0.0) {
                *e = if q { (*e * inv) / qs } else { *e * inv };
            }
        }
        Some(x)
    };
    let mut q = part(0, true)?;
    q.extend(part(key_dim, false)?);
    Some(q)
}

/// The MLP's tables: gate and up rows split into anchors' share and signal entries; the
/// neurons no signal reaches are constant, their share of down folded per residual row;
/// down in CSC over the compact neurons, the ones a signal can reach first (neuron t of
/// those has gate row t and up row n + t, so the kernel reads them before t's record and
/// loads the record only where a signal reached them, unless some neuron is awake at rest:
/// `n_awake`). Returns the gate/up scratch rows used.
fn mlp_tables(
    layer: &SparseLayer,
    gate_up: &mut Split,
    o: &mut LayerOffsets,
    e: &mut CscEntries,
    f: &mut Flat,
) -> anyhow::Result<usize> {
    let neurons = &layer.live_neurons;
    let n = neurons.len();
    o.n_neur = n as u32;
    gate_up.bias = vec![0.0; 2 * n];
    for (i, &r) in neurons.iter().enumerate() {
        gate_up.row(&layer.gate, r, i);
        gate_up.row(&layer.up, r, n + i);
    }
    let mut reached = vec![false; n];
    for (_, target, _) in &gate_up.entries {
        reached[*target as usize % n] = true;
    }
    let signal: Vec<usize> = (0..n).filter(|&i| reached[i]).collect();
    o.n_signal = signal.len() as u32;
    // A neuron's activation at rest (no signal reached it), exactly as the CPU computes it:
    // a constant neuron's always; a signal neuron's where nothing reached it on a pass, 0 for
    // every one of the chip's (where one is not, the kernel computes them all).
    let bias = std::mem::take(&mut gate_up.bias);
    let at_rest = |i: usize| silu(bias[i]) * bias[n + i];
    o.n_awake = signal.iter().filter(|&&i| at_rest(i) != 0.0).count() as u32;
    let place = signal_first(&reached);
    for (_, target, _) in gate_up.entries.iter_mut() {
        let i = *target as usize;
        *target = if i < n { place[i] } else { n + place[i - n] } as u32;
    }
    o.gate_up = e.csc(f, layer.config.hidden_size, std::mem::take(&mut gate_up.entries))?;
    // The constant neurons' share of each down row, folded in ascending column order.
    let compact = super::compact_neurons(layer);
    let fixed_act = |col: usize| -> Option<f32> {
        let i = *compact.get(&col)?;
        (!reached[i]).then(|| at_rest(i))
    };
    let (mut fixed_rows, mut fixed_vals, mut down) = (Vec::new(), Vec::new(), Vec::new());
    for r in written_rows(&layer.down) {
        let (cols, vals) = layer.down.row(r);
        let mut share = 0.0f32;
        for (&col, &w) in cols.iter().zip(vals) {
            match fixed_act(col as usize) {
                Some(a) => share += w * a,
                None => {
                    if let Some(&i) = compact.get(&(col as usize)) {
                        down.push((place[i], r as u32, w));
                    }
                }
            }
        }
        if share != 0.0 {
            fixed_rows.push(r as u32);
            fixed_vals.push(share);
        }
    }
    o.n_fixed = fixed_rows.len() as u32;
    o.fixed_rows = f.ints(&fixed_rows);
    o.fixed_vals = f.floats(&fixed_vals);
    o.down = e.csc(f, n, down)?;
    // Per neuron a signal can reach, one 32-byte record: gate's and up's anchor shares,
    // where its down column's entries start and end, and the column's first two entries
    // (row, weight bits; zeros past its end), so that a neuron that fires adds a short
    // column (most of the chip's have one or two entries) without a second round trip to
    // L2 for its entries.
    let starts = &f.i[o.down.start as usize..];
    let neuron: Vec<u32> = signal
        .iter()
        .enumerate()
        .flat_map(|(t, &i)| {
            let down = starts[t] as usize..starts[t + 1] as usize;
            neuron_record(bias[i], bias[n + i], down, &e.pairs)
        })
        .collect();
    o.neuron = f.ints_aligned(&neuron, NEURON_WORDS);
    Ok(2 * n)
}

/// A neuron's record: gate's and up's anchor shares, its down column's entries (`down`,
/// pair indices into `pairs`), then the column's first `INLINE_DOWN` entries, zeros past
/// its end.
fn neuron_record(gate: f32, up: f32, down: std::ops::Range<usize>, pairs: &[u32]) -> [u32; NEURON_WORDS] {
    let mut r = [0; NEURON_WORDS];
    r[..4].copy_from_slice(&[gate.to_bits(), up.to_bits(), down.start as u32, down.end as u32]);
    let inline = &pairs[2 * down.start..2 * down.end.min(down.start + INLINE_DOWN)];
    r[4..4 + inline.len()].copy_from_slice(inline);
    r
}

/// Each compact neuron's place in the kernel's order: the neurons a signal can reach
/// first, in compact order, then the constant ones.
fn signal_first(reached: &[bool]) -> Vec<usize> {
    let n = reached.len();
    let mut place = vec![0; n];
    let order = (0..n).filter(|&i| reached[i]).chain((0..n).filter(|&i| !reached[i]));
    for (t, i) in order.enumerate() {
        place[i] = t;
    }
    place
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only layers with heads, no delayed channel and every head quiet unless reached with
    /// decay 1 may be left out; a dim's byte has bit k for the k-th such layer reading it.
    #[test]
    fn gateable_layers_and_their_readers() {
        let mut f = Flat::default();
        let quiet = QUIET_UNLESS_REACHED | NO_DECAY;
        // Six residual dims; each layer's input projections read the dims named.
        let mut layer = |heads: &[u32], delayed: u32, reads: &[usize]| {
            let mut starts = vec![0u32];
            for r in 0..6 {
                starts.push(starts[r] + reads.contains(&r) as u32);
            }
            LayerOffsets {
                heads: f.ints(heads),
                n_heads: heads.len() as u32,
                n_delayed: delayed,
                xin: Csc { start: f.ints(&starts) },
                ..Default::default()
            }
        };
        let offsets = [
            layer(&[quiet, quiet | 1], 0, &[0, 1]),
            layer(&[quiet, QUIET_UNLESS_REACHED], 0, &[1]), // a head that decays
            layer(&[quiet], 3, &[1]),                       // delayed channels
            layer(&[], 0, &[1]),                            // no heads
            layer(&[quiet | READ_UNLESS_Z], 0, &[1, 5]),
        ];
        let (gateable, readers) = gateable_readers(&offsets, &f, 6);
        assert_eq!(gateable, 0b10001);
        assert_eq!(readers, [0x0000_0301, 0x0000_0200]);
    }

    /// The kernel reads the head from the low 8 bits, the flags from bits 16-19 and the
    /// key head from bit 20 up (`value_head`): value head 5 of 32 reads key head 2 of 16.
    #[test]
    fn a_heads_entry_holds_its_key_head() {
        let flags = QUIET_UNLESS_REACHED | QK_CONSTANT;
        let e = head_entry(5, 5 / (32 / 16), flags);
        assert_eq!((e & 0xff, e >> KEY_HEAD_SHIFT), (5, 2));
        assert!(!keeps_reads(flags));
        assert_eq!(e & 0xf_0000, flags);
    }

    /// Only a head with constant q and k (not quiet), decay 1 and a read the chip does not
    /// select keeps its reads; its entry names its slot (1 + slot) above its key head.
    #[test]
    fn heads_that_keep_their_reads_and_the_room_they_need() {
        let keeper = QK_CONSTANT | NO_DECAY;
        assert!(keeps_reads(keeper));
        for other in [
            QK_CONSTANT,
            NO_DECAY,
            keeper | READ_UNLESS_Z,
            keeper | QUIET_UNLESS_REACHED,
        ] {
            assert!(!keeps_reads(other), "{other:#x}");
        }
        let e = head_entry(31, 31, keeper | 3 << KEEP_SHIFT);
        assert_eq!((e & 0xff, e >> KEY_HEAD_SHIFT, (e >> KEEP_SHIFT) & 0xff), (31, 31, 3));
        assert_eq!(e & 0xf_0000, keeper);
        let mut f = Flat::default();
        f.state(10);
        // Three keeping heads with 4, 1 and 0 out_proj entries: slots of 2 + 2 * 4 words.
        let kept = KeptReads::of(&[4, 1, 0], &mut f);
        assert_eq!(
            kept,
            KeptReads {
                at: 10,
                words: 10,
                slots: 3
            }
        );
        assert_eq!(f.state_len, 40);
        assert_eq!(
            KeptReads::of(&[], &mut f),
            KeptReads {
                at: 40,
                words: 2,
                slots: 0
            }
        );
    }

    #[test]
    fn a_neurons_record_holds_its_first_down_entries() {
        let pairs = [7, 70, 8, 80, 9, 90, 10, 100];
        let r = neuron_record(1.5, -2.0, 1..4, &pairs);
        assert_eq!(r, [1.5f32.to_bits(), (-2.0f32).to_bits(), 1, 4, 8, 80, 9, 90]);
        assert_eq!(neuron_record(0.0, 0.0, 3..4, &pairs)[4..], [10, 100, 0, 0]);
        assert_eq!(neuron_record(0.0, 0.0, 2..2, &pairs)[4..], [0; 4]);
    }

    #[test]
    fn signal_neurons_take_the_first_places_in_order() {
        assert_eq!(signal_first(&[true, false, true, false, true]), [0, 3, 1, 4, 2]);
        assert_eq!(signal_first(&[true, true]), [0, 1]);
        assert_eq!(signal_first(&[false, false]), [0, 1]);
    }

    /// A channel table from (constant output, has delayed taps) per channel.
    fn table(chs: &[(f32, bool)]) -> Vec<f32> {
        chs.iter()
            .flat_map(|&(x, delayed)| [x, 1.0, 0.0, if delayed { 1.0 } else { 0.0 }])
            .collect()
    }

    /// Decodes channel (or, with `z`, value column) i of a layer's resident codes as the
    /// kernel does: its palette entry, or for a delayed channel {0, 0, 0, 1}.
    fn decode(r: &Resident, at: ResidentAt, i: usize, z: bool) -> [f32; 4] {
        let (codes, part) = if z { (at.zcodes, PALETTE) } else { (at.codes, 0) };
        let code = (r.words[codes as usize + i / 8] >> (4 * (i % 8))) & 15;
        if !z && code == DELAYED_CODE {
            return [0.0, 0.0, 0.0, 1.0];
        }
        let entry = 4 * (at.palette as usize + part + code as usize);
        r.palettes[entry..entry + 4].try_into().unwrap()
    }

    /// Looks column c up as the kernel does: (start, length).
    fn column(r: &[u32], cols: usize, c: usize) -> (u32, u32) {
        let words = cols.div_ceil(32);
        let (word, bit) = (r[c / 32], 1u32 << (c % 32));
        if word & bit == 0 {
            return (0, 0);
        }
        let k = (r[words + c / 32] + (word & (bit - 1)).count_ones()) as usize;
        (r[2 * words + k], r[2 * words + k + 1] - r[2 * words + k])
    }

    #[test]
    fn resident_columns_give_back_every_column() {
        // 70 columns over three words: empty ones at the ends, between, across a word.
        let lens: Vec<u32> = (0..70)
            .map(|c| if c % 3 == 0 || c == 33 { 0 } else { c % 5 + 1 })
            .collect();
        let mut starts = vec![1000u32];
        for l in &lens {
            starts.push(starts.last().unwrap() + l);
        }
        let r = resident_columns(&starts);
        for (c, &l) in lens.iter().enumerate() {
            let (from, len) = column(&r, 70, c);
            assert_eq!(len, l, "column {c}");
            if l > 0 {
                assert_eq!(from, starts[c], "column {c}");
            }
        }
    }

    #[test]
    fn resident_codes_give_back_every_table() {
        // 40 channels of five distinct tables, three with delayed taps, and as many z
        // gates of two.
        let n = 40;
        let mut channel = Vec::new();
        for i in 0..n {
            if [3, 17, 38].contains(&i) {
                channel.extend([0.5, 1.0, -128.0, 1.0]);
            } else {
                channel.extend([(i % 5) as f32, 1.0, -((i % 5) as f32), 0.0]);
            }
        }
        let zgate: Vec<f32> = (0..n).flat_map(|i| [128.0, 128.0, 0.25, (i % 2) as f32]).collect();
        let mut r = Resident::default();
        r.add(0, &vec![0.0; 4 * 16], &vec![0.0; 4 * 16]).unwrap();
        let at = r.add(1, &channel, &zgate).unwrap();
        for i in 0..n {
            let want: [f32; 4] = if channel[4 * i + 3] != 0.0 {
                [0.0, 0.0, 0.0, channel[4 * i + 3]]
            } else {
                channel[4 * i..4 * i + 4].try_into().unwrap()
            };
            assert_eq!(decode(&r, at, i, false), want, "channel {i}");
            assert_eq!(decode(&r, at, i, true), zgate[4 * i..4 * i + 4], "z {i}");
        }
    }

    #[test]
    fn resident_codes_refuse_a_palette_too_large() {
        let channel: Vec<f32> = (0..16).flat_map(|i| [i as f32, 1.0, 0.0, 0.0]).collect();
        let err = Resident::default().add(2, &channel, &[0.0; 64]).unwrap_err();
        assert!(format!("{err:#}").contains("layer 2's conv channels"), "{err:#}");
    }

    #[test]
    fn constant_qk_only_where_one_square_is_the_sum() {
        let (dk, key_dim) = (4, 4);
        let q_one_hot = [(128.0, false), (-0.0, false), (0.0, false), (0.0, false)];
        let k_zero = [(0.0, false); 4];
        let both: Vec<_> = q_one_hot.iter().chain(&k_zero).copied().collect();
        let qk = constant_qk(&table(&both), 0, dk, key_dim).unwrap();
        let inv = 1.0 / (128.0f32 * 128.0 + 1e-6).sqrt();
        assert_eq!(qk[0], (128.0 * inv) / 2.0);
        // Zeros keep their sign (the kernel leaves them alone).
        assert!(qk[1] == 0.0 && qk[1].is_sign_negative());
        assert!(qk[4..].iter().all(|v| *v == 0.0));
        // Two nonzero channels: their sum of squares depends on the order; delayed taps vary.
        let two: Vec<_> = [(1.0, false), (2.0, false), (0.0, false), (0.0, false)]
            .iter()
            .chain(&k_zero)
            .copied()
            .collect();
        assert!(constant_qk(&table(&two), 0, dk, key_dim).is_none());
        let mut delayed = both.clone();
        delayed[6].1 = true;
        assert!(constant_qk(&table(&delayed), 0, dk, key_dim).is_none());
    }
}

//! Activation-sparse products for the sparse path: a step that touches only the weights
//! whose input is nonzero, bit for bit what [`SparseLayer::step`] computes.
//!
//! Why it is exact: a CSR row's dot product ([`SparseMatrix::row_dot`], ascending
//! columns) folds its products from +0. A product whose input is zero is ±0, and adding
//! ±0 leaves the sum unchanged (the sum is never −0: it starts at +0, and x + (−x)
//! rounds to +0). So a row's sum is the fold of its nonzero-input products alone, in
//! ascending column order, which is what adding each nonzero input's column into
//! per-row accumulators, columns in ascending order, computes. The columns below
//! `prefix` (a chip's anchors: nonzero on every pass, with the same values while the
//! norm's scale does not move) are folded once, and those sums are reused for as long as
//! the prefix inputs repeat bit for bit.
//!
//! Chip layers have ~50 k nonzero weights but a pass's residual has ~30 nonzero dims,
//! most of them anchors: a step costs a few hundred multiply-adds and a few copies of
//! kept vectors. The CPU engine and the boot loader step with these products.

use crate::index_set::IndexSet;
use crate::scalar::silu;
use crate::sparse::{nonzero_dims, GdnState, Products, Reach, Scratch, SparseLayer, SparseMatrix, SumOrder};

/// Some rows of a matrix, by columns: each column's (row, value) entries.
#[derive(Debug, Clone)]
struct Columns {
    start: Vec<u32>,
    row: Vec<u32>,
    value: Vec<f32>,
}

impl Columns {
    /// The entries of `rows` (ascending) of `m`.
    fn of(m: &SparseMatrix, rows: &[usize]) -> Self {
        let mut start = vec![0u32; m.cols + 1];
        for &r in rows {
            for &c in m.row(r).0 {
                start[c as usize + 1] += 1;
            }
        }
        for c in 0..m.cols {
            start[c + 1] += start[c];
        }
        let mut next = start.clone();
        let n = start[m.cols] as usize;
        let (mut row, mut value) = (vec![0u32; n], vec![0.0f32; n]);
        for &r in rows {
            let (cols, vals) = m.row(r);
            for (c, v) in cols.iter().zip(vals) {
                let at = &mut next[*c as usize];
                row[*at as usize] = r as u32;
                value[*at as usize] = *v;
                *at += 1;
            }
        }
        Self { start, row, value }
    }

    /// Adds column `c` times `x` into `sums`, calling `touch` with each row reached.
    #[inline]
    fn add(&self, c: usize, x: f32, sums: &mut [f32], mut touch: impl FnMut(usize)) {
        let (s, e) = (self.start[c] as usize, self.start[c + 1] as usize);
        for (r, w) in self.row[s..e].iter().zip(&self.value[s..e]) {
            sums[*r as usize] += w * x;
            touch(*r as usize);
        }
    }
}

/// Row sums of one matrix times a mostly-zero vector, the prefix columns' fold kept.
#[derive(Debug, Clone)]
struct Sums {
    columns: Columns,
    prefix: usize,
    /// The prefix inputs (column, bits) the kept sums were folded from, once folded.
    key: Vec<(usize, u32)>,
    folded: bool,
    kept: Vec<f32>,
    sums: Vec<f32>,
    /// Rows that inputs past the prefix reached: their sums differ from the kept ones.
    touched: IndexSet,
}

impl Sums {
    fn new(m: &SparseMatrix, rows: &[usize], prefix: usize) -> Self {
        Self {
            columns: Columns::of(m, rows),
            prefix: prefix.min(m.cols),
            key: Vec::new(),
            folded: false,
            kept: vec![0.0; m.rows],
            sums: vec![0.0; m.rows],
            touched: IndexSet::new(m.rows),
        }
    }

    /// Every row's sum with `x` (nonzero at most at `nonzero`, ascending); returns true
    /// when the prefix inputs changed (the kept sums were folded again).
    fn compute(&mut self, x: &[f32], nonzero: &[u32]) -> bool {
        for &r in self.touched.as_slice() {
            self.sums[r] = self.kept[r];
        }
        self.touched.clear();
        let split = nonzero.partition_point(|&c| (c as usize) < self.prefix);
        let key = inputs(x, &nonzero[..split]).map(|(c, v)| (c, v.to_bits()));
        let refolded = !self.folded || !self.key.iter().copied().eq(key.clone());
        if refolded {
            self.key.clear();
            self.key.extend(key);
            self.kept.fill(0.0);
            for &(c, bits) in &self.key {
                self.columns.add(c, f32::from_bits(bits), &mut self.kept, |_| {});
            }
            self.sums.copy_from_slice(&self.kept);
            self.folded = true;
        }
        let touched = &mut self.touched;
        for (c, v) in inputs(x, &nonzero[split..]) {
            self.columns.add(c, v, &mut self.sums, |r| touched.insert(r));
        }
        refolded
    }
}

/// (dim, value) of `x` at `dims` where it is not ±0.
fn inputs<'a>(x: &'a [f32], dims: &'a [u32]) -> impl Iterator<Item = (usize, f32)> + Clone + 'a {
    dims.iter()
        .map(|&c| (c as usize, x[c as usize]))
        .filter(|(_, v)| *v != 0.0)
}

/// One layer's activation-sparse products, with what it keeps between steps.
#[derive(Debug, Clone)]
pub struct ActiveLayer {
    qkv: Sums,
    /// silu(conv output) of each live channel without delayed taps, from the kept qkv
    /// sums alone; the channels with delayed taps, as a list and by channel.
    kept_y: Vec<f32>,
    delayed: Vec<usize>,
    is_delayed: Vec<bool>,
    z: Sums,
    z_ready: bool,
    /// silu of each z row's kept sum.
    kept_silu_z: Vec<f32>,
    gate: Sums,
    up: Sums,
    /// silu(gate)·up of each live neuron from the kept sums alone.
    kept_neurons: Vec<f32>,
    out_proj: Columns,
    out_rows: Vec<usize>,
    down: Columns,
    down_rows: Vec<usize>,
    /// Accumulators of out_proj and down (zero between uses) and the rows they reached.
    acc: Vec<f32>,
    acc_touched: IndexSet,
    /// The nonzero inputs of out_proj or down.
    inputs: Vec<u32>,
    /// The GDN state rows (value head, key row; None: the whole head) the steps since it
    /// was last cleared wrote, in order (with repeats).
    pub written: Vec<(usize, Option<usize>)>,
    /// Heads whose state is known to be all +0 (see [`Self::state_is_zero`]): decaying
    /// them changes nothing and is skipped.
    zero_heads: Vec<bool>,
    /// False once [`Self::skip_unread_conv_state`] found the conv state unread.
    keeps_conv_state: bool,
}

impl ActiveLayer {
    /// The products of `layer`, the inputs below column `prefix` kept between steps.
    /// None when the layer sums in [`SumOrder::Reverse`] (only ascending folds are
    /// reproduced).
    pub fn new(layer: &SparseLayer, prefix: usize) -> Option<Self> {
        if layer.order != SumOrder::Forward {
            return None;
        }
        let all = |m: &SparseMatrix| (0..m.rows).collect::<Vec<_>>();
        let nonempty = |m: &SparseMatrix| (0..m.rows).filter(|&r| !m.row_is_empty(r)).collect::<Vec<_>>();
        let hidden = layer.config.hidden_size;
        Some(Self {
            qkv: Sums::new(&layer.qkv, &layer.live_channels, prefix),
            kept_y: vec![0.0; layer.qkv.rows],
            delayed: layer
                .live_channels
                .iter()
                .copied()
                .filter(|&ch| layer.has_delayed_taps(ch))
                .collect(),
            is_delayed: (0..layer.qkv.rows).map(|ch| layer.has_delayed_taps(ch)).collect(),
            z: Sums::new(&layer.z, &all(&layer.z), prefix),
            z_ready: false,
            kept_silu_z: vec![0.0; layer.z.rows],
            gate: Sums::new(&layer.gate, &layer.live_neurons, prefix),
            up: Sums::new(&layer.up, &layer.live_neurons, prefix),
            kept_neurons: vec![0.0; layer.gate.rows],
            out_proj: Columns::of(&layer.out_proj, &nonempty(&layer.out_proj)),
            out_rows: nonempty(&layer.out_proj),
            down: Columns::of(&layer.down, &nonempty(&layer.down)),
            down_rows: nonempty(&layer.down),
            acc: vec![0.0; hidden],
            acc_touched: IndexSet::new(hidden),
            inputs: Vec::new(),
            written: Vec::new(),
            zero_heads: vec![false; layer.config.linear_num_value_heads],
            keeps_conv_state: true,
        })
    }

    /// Tells the products that the state the next steps run on is all zeros (a fresh
    /// [`GdnState`], or one whose written rows were cleared): until a head is written,
    /// its decay is skipped (zero times the decay is zero).
    pub fn state_is_zero(&mut self) {
        self.zero_heads.fill(true);
    }

    /// Leaves the conv state as it is from now on when no channel of the layer reads a
    /// cached input (no delayed taps): its outputs are the same, and a machine that keeps
    /// only the GDN rows its steps write (the boot loader's replay) saves moving the
    /// whole conv state every step. A layer with delayed taps keeps it.
    pub fn skip_unread_conv_state(&mut self) {
        self.keeps_conv_state = !self.delayed.is_empty();
    }

    /// Runs one token through `layer` (the layer this was made from) as far as `reach`,
    /// exactly as [`SparseLayer::step`] does.
    pub fn step(
        &mut self,
        layer: &SparseLayer,
        hidden: &mut [f32],
        state: &mut GdnState,
        scratch: &mut Scratch,
        reach: Reach,
    ) {
        layer.step_with(hidden, state, scratch, self, reach);
    }

    /// `hidden[r]` += the fold of `columns` over the nonzero entries of `x`, for every
    /// row in `rows` (a row no input reached adds +0, as its full fold would).
    fn add_products(
        &mut self,
        columns_of: fn(&Self) -> &Columns,
        rows_of: fn(&Self) -> &[usize],
        x: &[f32],
        hidden: &mut [f32],
    ) {
        let mut acc = std::mem::take(&mut self.acc);
        let mut touched = std::mem::replace(&mut self.acc_touched, IndexSet::new(0));
        nonzero_dims(x, &mut self.inputs);
        for &c in &self.inputs {
            columns_of(self).add(c as usize, x[c as usize], &mut acc, |r| touched.insert(r));
        }
        for &r in rows_of(self) {
            hidden[r] += acc[r];
        }
        for &r in touched.as_slice() {
            acc[r] = 0.0;
        }
        touched.clear();
        self.acc = acc;
        self.acc_touched = touched;
    }
}

impl Products for ActiveLayer {
    fn qkv(&mut self, l: &SparseLayer, xn: &[f32], nonzero: &[u32], mixed: &mut [f32]) {
        if self.qkv.compute(xn, nonzero) {
            // A channel without delayed taps reads no cached input: its output is a
            // function of its kept sum (the cached inputs only ever meet zero taps).
            for &ch in &l.live_channels {
                self.kept_y[ch] = silu(l.conv_input_undelayed(ch, self.qkv.kept[ch]));
            }
        }
        if self.keeps_conv_state {
            // Every other row's sum is +0 (no columns were kept for it).
            mixed.copy_from_slice(&self.qkv.sums);
        }
        self.z_ready = false;
    }

    fn conv(&mut self, l: &SparseLayer, conv_state: &[f32], _: &[f32], y: &mut [f32]) {
        // kept_y is +0 at every channel that is not live; the qkv sums are `mixed`.
        let mixed = &self.qkv.sums;
        y.copy_from_slice(&self.kept_y);
        for &ch in self.qkv.touched.as_slice() {
            if !self.is_delayed[ch] {
                y[ch] = silu(l.conv_input_undelayed(ch, mixed[ch]));
            }
        }
        for &ch in &self.delayed {
            y[ch] = silu(l.conv_input(ch, conv_state, mixed[ch]));
        }
    }

    fn keeps_conv_state(&self) -> bool {
        self.keeps_conv_state
    }

    fn silu_z(&mut self, _: &SparseLayer, xn: &[f32], nonzero: &[u32], first: usize, gates: &mut [f32]) {
        if !self.z_ready {
            if self.z.compute(xn, nonzero) {
                for (s, z) in self.kept_silu_z.iter_mut().zip(&self.z.kept) {
                    *s = silu(*z);
                }
            }
            self.z_ready = true;
        }
        let rows = first..first + gates.len();
        gates.copy_from_slice(&self.kept_silu_z[rows.clone()]);
        for (g, r) in gates.iter_mut().zip(rows) {
            if self.z.touched.contains(r) {
                *g = silu(self.z.sums[r]);
            }
        }
    }

    fn out_proj(&mut self, _: &SparseLayer, head_out: &[f32], hidden: &mut [f32]) {
        self.add_products(|a| &a.out_proj, |a| &a.out_rows, head_out, hidden);
    }

    fn mlp(&mut self, l: &SparseLayer, xn: &[f32], nonzero: &[u32], neurons: &mut [f32], hidden: &mut [f32]) {
        let refolded = self.gate.compute(xn, nonzero) | self.up.compute(xn, nonzero);
        if refolded {
            for &n in &l.live_neurons {
                self.kept_neurons[n] = silu(self.gate.kept[n]) * self.up.kept[n];
            }
        }
        // kept_neurons is +0 at every neuron that is not live.
        neurons.copy_from_slice(&self.kept_neurons);
        for &n in self.gate.touched.as_slice().iter().chain(self.up.touched.as_slice()) {
            neurons[n] = silu(self.gate.sums[n]) * self.up.sums[n];
        }
        self.add_products(|a| &a.down, |a| &a.down_rows, neurons, hidden);
    }

    fn decay(&mut self, head: usize, s: &mut [f32], decay: f32) {
        if !self.zero_heads[head] {
            for v in s.iter_mut() {
                *v *= decay;
            }
            self.written.push((head, None));
        }
    }

    fn wrote(&mut self, head: usize, row: usize) {
        self.zero_heads[head] = false;
        self.written.push((head, Some(row)));
    }
}

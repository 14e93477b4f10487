//! Boot by loading state: the host computes the GDN memory rows the boot prefill leaves
//! (the ROM staging rows, the ROM rows, the RAM lines) and an engine writes them
//! directly, then runs only the prefill's last [`TAIL`] tokens as passes.
//!
//! The rows are computed with the same layer math as the prefill, so they are the same
//! bits; the work saved is everything a prefill pass does that leaves no trace:
//! - a pass runs only through the layers up to the memory its token writes (a staging
//!   token the first layer, `bc` the ROM's, `bl` its RAM bank's), and through that last
//!   layer only until its state is written: the layers above hold no state a boot token
//!   writes, and nothing reads the residual the last one would leave;
//! - a staging token's rows are a function of the token alone (a one-hot key, β and
//!   the gate 1, so a row is overwritten whatever it held; no conv tap on an earlier
//!   token in the layers it runs through): computed once per distinct token and kept;
//! - the last [`TAIL`] tokens run on the engine as ordinary passes, which leaves every
//!   layer's conv state as the prefill's last passes leave it;
//! - the layers step with activation-sparse products ([`inband_qwen35::active`], the
//!   same bits as the row-by-row products) and report the rows they write, so the
//!   replay machine is cleared, and its rows collected, without scanning its state; a
//!   layer that no conv channel reads a cached input of keeps no conv state.
//!
//! `tests/tests/chip_vs_golden.rs` proves the loaded state bit-identical to the prefill
//! boot's (every GDN row and conv state of every layer) for every example and ISA test.

use std::collections::BTreeSet;

use foldhash::{HashMap, HashMapExt};

use inband_firmware::ProgramImage;
use inband_qwen35::active::ActiveLayer;
use inband_qwen35::index_set::IndexSet;
use inband_qwen35::sparse::{GdnState, Reach, Scratch, SparseLayer};

use super::machine::{boot_tokens, rv32im_map, ChipError};
use super::tokens::kind;
use crate::engine::MemoryRow;
use crate::model::{ChipLayers, ChipModel};
use crate::token::ChipToken;

/// Prefill tokens run as passes after the rows are loaded: the conv kernel's length, so
/// every conv state holds exactly what the prefill's last passes leave there.
pub const TAIL: usize = 4;

/// A boot computed on the host: the rows to load, then the tokens to run.
#[derive(Debug, Clone)]
pub struct BootPlan {
    pub rows: Vec<MemoryRow>,
    /// The prefill's last tokens, run as passes after loading.
    pub tail: Vec<ChipToken>,
    /// The `x` token that jumps to the entry point (the first pass of the run consumes it).
    pub entry: ChipToken,
}

/// Where a replay wrote: GDN state rows (each listed once) and whole heads (layer,
/// value head: a decay scales every row).
struct Written {
    heads: usize,
    dk: usize,
    /// Rows by (layer · heads + value head) · dk + key row.
    rows: IndexSet,
    whole_heads: BTreeSet<(usize, usize)>,
}

impl Written {
    fn new(layers: usize, heads: usize, dk: usize) -> Self {
        Self {
            heads,
            dk,
            rows: IndexSet::new(layers * heads * dk),
            whole_heads: BTreeSet::new(),
        }
    }

    fn row(&mut self, layer: usize, head: usize, row: usize) {
        self.rows.insert((layer * self.heads + head) * self.dk + row);
    }

    /// The rows written, as (layer, value head, key row).
    fn rows(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let per_layer = self.heads * self.dk;
        self.rows
            .as_slice()
            .iter()
            .map(move |&i| (i / per_layer, i % per_layer / self.dk, i % self.dk))
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.whole_heads.clear();
    }
}

/// A machine's memories as the replay leaves them, where it wrote, and its layers'
/// activation-sparse products (None: the layer sums in an order they do not reproduce,
/// and steps row by row, its every head counted as written).
struct Replay {
    states: Vec<GdnState>,
    written: Written,
    active: Vec<Option<ActiveLayer>>,
}

impl Replay {
    /// A fresh machine of `layers`' first layers.
    fn new(config: &inband_qwen35::TextConfig, layers: &[SparseLayer], prefix: usize) -> Self {
        let mut active: Vec<Option<ActiveLayer>> = layers.iter().map(|l| ActiveLayer::new(l, prefix)).collect();
        for layer in active.iter_mut().flatten() {
            layer.state_is_zero();
            layer.skip_unread_conv_state();
        }
        Self {
            states: layers.iter().map(|_| GdnState::new(config)).collect(),
            written: Written::new(layers.len(), config.linear_num_value_heads, config.linear_key_head_dim),
            active,
        }
    }

    /// Runs `hidden` through layer `l` of `layers` as far as `reach`, noting what it
    /// writes.
    fn step(&mut self, layers: &[SparseLayer], l: usize, hidden: &mut [f32], scratch: &mut Scratch, reach: Reach) {
        let state = &mut self.states[l];
        match self.active[l].as_mut() {
            Some(active) => {
                active.written.clear();
                active.step(&layers[l], hidden, state, scratch, reach);
                for &(head, row) in &active.written {
                    match row {
                        Some(row) => self.written.row(l, head, row),
                        None => {
                            self.written.whole_heads.insert((l, head));
                        }
                    }
                }
            }
            None => {
                layers[l].step(hidden, state, scratch);
                let heads = layers[l].config.linear_num_value_heads;
                self.written.whole_heads.extend((0..heads).map(|h| (l, h)));
            }
        }
    }

    /// Every row written (a whole head: its nonzero rows), in (layer, head, row) order.
    fn rows(&self, dk: usize, dv: usize) -> Vec<MemoryRow> {
        let row = |layer: usize, head: usize, r: usize| {
            let at = (head * dk + r) * dv;
            MemoryRow {
                layer,
                head,
                row: r,
                values: self.states[layer].recurrent[at..at + dv].to_vec(),
            }
        };
        let mut rows: Vec<MemoryRow> = self.written.rows().map(|(l, h, r)| row(l, h, r)).collect();
        for &(layer, head) in &self.written.whole_heads {
            let nonzero = (0..dk).map(|r| row(layer, head, r));
            rows.extend(nonzero.filter(|m| m.values.iter().any(|v| v.to_bits() != 0)));
        }
        rows.sort_by_key(|r| (r.layer, r.head, r.row));
        rows.dedup_by_key(|r| (r.layer, r.head, r.row));
        rows
    }

    /// Back to all zeros (only what was written is cleared).
    fn clear(&mut self, dk: usize, dv: usize) {
        for (layer, head, row) in self.written.rows() {
            let at = (head * dk + row) * dv;
            self.states[layer].recurrent[at..at + dv].fill(0.0);
        }
        for &(layer, head) in &self.written.whole_heads {
            self.states[layer].recurrent[head * dk * dv..(head + 1) * dk * dv].fill(0.0);
        }
        self.written.clear();
        for state in &mut self.states {
            state.conv.fill(0.0);
        }
        self.active.iter_mut().flatten().for_each(ActiveLayer::state_is_zero);
    }
}

/// Computes boot plans for one chip, keeping what staging tokens write across boots.
pub struct BootLoader<'a> {
    model: &'a ChipModel,
    layers: &'a [SparseLayer],
    /// The layer whose memory each commit writes: `bc` the ROM's, `bl` by bank.
    rom_layer: usize,
    bank_layers: Vec<usize>,
    /// The layers a staging token runs through (the staging memory's and below).
    staging_top: usize,
    /// A staging token's rows may be kept (no conv tap on earlier tokens below them).
    keep_staged: bool,
    /// Each staging token's rows, found once: the token's index into `staged_rows`.
    staged: HashMap<ChipToken, usize>,
    staged_rows: Vec<Vec<MemoryRow>>,
    /// The machine a plan replays in, and the one a staging token's rows are found in.
    replay: Replay,
    probe: Replay,
}

impl<'a> BootLoader<'a> {
    /// A loader for `model`'s RV32IM chip (its sparse layers).
    pub fn new(model: &'a ChipModel) -> Result<Self, ChipError> {
        let map = rv32im_map(model)?;
        let ChipLayers::Sparse(layers) = &model.layers else {
            return Err(ChipError::Math(anyhow::anyhow!(
                "boot by loading state needs the sparse path of the layer math"
            )));
        };
        let layer_of = |name: &str| -> Result<usize, ChipError> {
            model
                .manifest
                .memories
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.layer)
                .ok_or_else(|| ChipError::Math(anyhow::anyhow!("the chip's manifest places no memory {name:?}")))
        };
        let staging_top = layer_of("rom_staging")?;
        let bank_layers = map
            .ram_banks
            .iter()
            .map(|&m| model.manifest.memories.get(m).map(|m| m.layer))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                ChipError::Math(anyhow::anyhow!(
                    "the chip's rv32im map names a memory it does not place"
                ))
            })?;
        let keep_staged = layers[..=staging_top]
            .iter()
            .all(|l| l.live_channels.iter().all(|&ch| !l.has_delayed_taps(ch)));
        let prefix = model.spec.anchor_prefix();
        let rom_layer = layer_of("rom")?;
        let top = rom_layer
            .max(staging_top)
            .max(bank_layers.iter().copied().max().unwrap_or(0));
        Ok(Self {
            model,
            layers,
            rom_layer,
            bank_layers,
            staging_top,
            keep_staged,
            staged: HashMap::new(),
            staged_rows: Vec::new(),
            replay: Replay::new(&model.config, &layers[..=top], prefix),
            probe: Replay::new(&model.config, &layers[..=staging_top], prefix),
        })
    }

    /// The plan that boots `image`.
    pub fn plan(&mut self, image: &ProgramImage) -> Result<BootPlan, ChipError> {
        let mut tokens = boot_tokens(image, rv32im_map(self.model)?)?;
        let entry = tokens.pop().expect("boot ends with x");
        let tail = tokens.split_off(tokens.len().saturating_sub(TAIL));
        let (dk, dv) = (
            self.model.config.linear_key_head_dim,
            self.model.config.linear_value_head_dim,
        );
        let mut replay = std::mem::replace(&mut self.replay, Replay::new(&self.model.config, &[], 0));
        let mut scratch = Scratch::default();
        for t in &tokens {
            if t.kind == kind::BP && self.keep_staged {
                let staged = self.staged(t, &mut scratch);
                for r in &self.staged_rows[staged] {
                    let at = (r.head * dk + r.row) * dv;
                    replay.states[r.layer].recurrent[at..at + dv].copy_from_slice(&r.values);
                    replay.written.row(r.layer, r.head, r.row);
                }
            } else {
                self.step(t, self.last_layer(t), &mut replay, &mut scratch);
            }
        }
        let rows = replay.rows(dk, dv);
        replay.clear(dk, dv);
        self.replay = replay;
        Ok(BootPlan { rows, tail, entry })
    }

    /// The last layer a boot token needs: the one whose memory it writes.
    fn last_layer(&self, t: &ChipToken) -> usize {
        match t.kind {
            kind::BP => self.staging_top,
            kind::BC => self.rom_layer,
            kind::BL => self
                .bank_layers
                .get(t.values[0])
                .copied()
                .unwrap_or(self.layers.len() - 1),
            _ => self.layers.len() - 1,
        }
    }

    /// Runs `t` through layers 0..=last of `replay`: the last only until its state is
    /// written (no layer above reads the residual it would leave).
    fn step(&self, t: &ChipToken, last: usize, replay: &mut Replay, scratch: &mut Scratch) {
        let mut hidden = self.model.spec.residual(t);
        let last = last.min(replay.states.len() - 1);
        for l in 0..=last {
            let reach = if l == last { Reach::State } else { Reach::Residual };
            replay.step(self.layers, l, &mut hidden, scratch, reach);
        }
    }

    /// The index in `staged_rows` of the rows a staging token writes (found on a fresh
    /// machine the first time).
    fn staged(&mut self, t: &ChipToken, scratch: &mut Scratch) -> usize {
        if let Some(&at) = self.staged.get(t) {
            return at;
        }
        let (dk, dv) = (
            self.model.config.linear_key_head_dim,
            self.model.config.linear_value_head_dim,
        );
        let mut probe = std::mem::replace(&mut self.probe, Replay::new(&self.model.config, &[], 0));
        self.step(t, self.staging_top, &mut probe, scratch);
        self.staged_rows.push(probe.rows(dk, dv));
        probe.clear(dk, dv);
        self.probe = probe;
        self.staged.insert(t.clone(), self.staged_rows.len() - 1);
        self.staged_rows.len() - 1
    }
}

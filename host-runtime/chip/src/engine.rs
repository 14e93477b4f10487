//! Engines that run chip passes. [`PassEngine`] is what a host drives: feed chip
//! tokens, get the chosen ones back, read GDN memory rows. [`ChipRunner`] is the CPU
//! engine: the project's layer math (the sparse path, with activation-sparse products
//! where the layer's sum order has them; or the dense path) over a batch of independent
//! machines; the GPU engine lives in the runtime.

use std::ops::Range;

use candle_core::{Device, Tensor};
use inband_qwen35::active::ActiveLayer;
use inband_qwen35::dense::{DenseLayer, DenseState};
use inband_qwen35::index_set::IndexSet;
use inband_qwen35::sparse::{GdnState, Reach, Scratch, SparseLayer, SumOrder};

use crate::model::{ChipLayers, ChipModel};
use crate::token::{ChipToken, TokenSpec};

/// Something that runs chip passes: the CPU layer math, or the GPU engine.
pub trait PassEngine {
    /// Runs passes that consume `inputs` in order and then the engine's own choices,
    /// until `max` passes ran or, once the inputs are used up, a chosen token's kind is
    /// in `stop_kinds`. Returns the token chosen by each pass.
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>>;
    /// Consecutive GDN memory rows (`dv` entries each, one after another): key rows
    /// `rows` of value head `head` of chip layer `layer`. A check reads a whole memory
    /// this way: the GPU answers it with one copy, where a copy per row cost the
    /// verifier most of its time (128 a retired instruction for the register file).
    fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>>;
    /// One GDN memory row (`dv` entries): key row `row` of value head `head` of chip layer `layer`.
    fn memory_row(&self, layer: usize, head: usize, row: usize) -> anyhow::Result<Vec<f32>> {
        self.memory_rows(layer, head, row..row + 1)
    }
    /// Makes the machine fresh (every GDN state and conv state zero) and writes `rows`
    /// into its GDN memories: boot by loading state (see [`crate::rv32im::load`]).
    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()>;
    /// How many passes to run ahead of the host when nothing is being verified (1: none;
    /// then a run that stops at its instruction budget can be continued exactly).
    fn lookahead(&self) -> usize {
        1
    }
    /// The machine's whole state (every GDN and conv state, and whatever else the engine
    /// carries from one pass to the next), to be written back by [`Self::restore_state`]:
    /// a long run saved and continued later.
    fn save_state(&self) -> anyhow::Result<EngineState> {
        anyhow::bail!("this engine cannot save a machine's state")
    }
    /// Makes the machine's state `state` (saved by an engine of the same layout).
    fn restore_state(&mut self, _state: &EngineState) -> anyhow::Result<()> {
        anyhow::bail!("this engine cannot restore a machine's state")
    }
}

/// A machine's state as an engine holds it ([`PassEngine::save_state`]): arrays by name,
/// exactly as the engine keeps them, so writing them back continues the run bit for bit.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineState {
    /// Which engine saved it and how its arrays are laid out; a state is written back
    /// only into an engine that gives the same text.
    pub layout: String,
    pub floats: Vec<(String, Vec<f32>)>,
    pub words: Vec<(String, Vec<u32>)>,
}

impl EngineState {
    /// The float array `name`, with `len` entries.
    pub fn floats(&self, name: &str, len: usize) -> anyhow::Result<&[f32]> {
        array(&self.floats, name, len)
    }

    /// The word array `name`, with `len` entries.
    pub fn words(&self, name: &str, len: usize) -> anyhow::Result<&[u32]> {
        array(&self.words, name, len)
    }

    /// Refuses a state saved by an engine laid out otherwise than `layout`.
    pub fn check_layout(&self, layout: &str) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.layout == layout,
            "the state was saved by another engine ({}); this one is {layout}",
            self.layout
        );
        Ok(())
    }
}

/// An engine lent out (to a machine that owns its engine for one run) stays the lender's.
impl<E: PassEngine + ?Sized> PassEngine for &mut E {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        (**self).passes(inputs, max, stop_kinds)
    }
    fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        (**self).memory_rows(layer, head, rows)
    }
    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        (**self).load_state(rows)
    }
    fn lookahead(&self) -> usize {
        (**self).lookahead()
    }
    fn save_state(&self) -> anyhow::Result<EngineState> {
        (**self).save_state()
    }
    fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        (**self).restore_state(state)
    }
}

/// What one machine of a batch runs in a round: as [`PassEngine::passes`], passes that
/// consume `inputs` and then the machine's own choices, at most `max`, stopping (once
/// the inputs are used up) after a chosen token whose kind is in `stop_kinds`.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotWork {
    pub slot: usize,
    pub inputs: Vec<ChipToken>,
    pub max: usize,
    pub stop_kinds: Vec<usize>,
}

/// Many independent machines stepped together, sharing one chip's weights: each slot
/// holds a machine's GDN and conv state. A round runs every slot given work, each on
/// its own until its work is done; the others keep their state untouched.
pub trait BatchEngine {
    /// How many machines it holds.
    fn slots(&self) -> usize;
    /// Makes `slot`'s machine fresh and writes `rows` into its memories (as
    /// [`PassEngine::load_state`]).
    fn load_slot(&mut self, slot: usize, rows: &[MemoryRow]) -> anyhow::Result<()>;
    /// Runs one round: the tokens each work item's passes chose, in `work`'s order.
    fn round(&mut self, work: &[SlotWork]) -> anyhow::Result<Vec<Vec<ChipToken>>>;
}

/// Array `name` of `arrays`, which must have `len` entries.
fn array<'s, T>(arrays: &'s [(String, Vec<T>)], name: &str, len: usize) -> anyhow::Result<&'s [T]> {
    let (_, v) = (arrays.iter())
        .find(|(n, _)| n == name)
        .ok_or_else(|| anyhow::anyhow!("the saved state has no array {name}"))?;
    anyhow::ensure!(
        v.len() == len,
        "the saved array {name} has {} entries, not {len}",
        v.len()
    );
    Ok(v)
}

/// A batch of single-machine engines stepped one after the other (the CPU's batch: the
/// specification the GPU's one launch per round is checked against).
pub struct EachOnItsOwn<E>(pub Vec<E>);

impl<E: PassEngine> BatchEngine for EachOnItsOwn<E> {
    fn slots(&self) -> usize {
        self.0.len()
    }

    fn load_slot(&mut self, slot: usize, rows: &[MemoryRow]) -> anyhow::Result<()> {
        self.0[slot].load_state(rows)
    }

    fn round(&mut self, work: &[SlotWork]) -> anyhow::Result<Vec<Vec<ChipToken>>> {
        work.iter()
            .map(|w| self.0[w.slot].passes(&w.inputs, w.max, &w.stop_kinds))
            .collect()
    }
}

/// (consumed token id, chosen token id) of every forward pass an engine ran.
pub type Trace = std::rc::Rc<std::cell::RefCell<Vec<(u32, u32)>>>;

/// The (consumed, chosen) token ids of passes that consumed `inputs` in order and then
/// their own choices, as [`PassEngine::passes`] runs them.
pub fn consumed_and_chosen<'t>(
    tokens: &'t TokenSpec,
    inputs: &'t [ChipToken],
    chosen: &'t [ChipToken],
) -> impl Iterator<Item = (u32, u32)> + 't {
    chosen.iter().enumerate().filter_map(move |(i, out)| {
        // Pass i consumed inputs[i], or once they ran out, the previous pass's choice.
        let consumed = inputs.get(i).or_else(|| i.checked_sub(1).map(|j| &chosen[j]))?;
        Some((tokens.encode(consumed) as u32, tokens.encode(out) as u32))
    })
}

/// Records every pass of the engine it wraps: the token each pass consumed and the one it
/// chose, so that another runner (stock transformers, a batch) can be checked against
/// the stream.
pub struct Traced<'a> {
    pub inner: Box<dyn PassEngine + 'a>,
    pub tokens: TokenSpec,
    pub trace: Trace,
}

impl PassEngine for Traced<'_> {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        let out = self.inner.passes(inputs, max, stop_kinds)?;
        self.trace
            .borrow_mut()
            .extend(consumed_and_chosen(&self.tokens, inputs, &out));
        Ok(out)
    }

    fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        self.inner.memory_rows(layer, head, rows)
    }

    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        self.inner.load_state(rows)
    }

    fn lookahead(&self) -> usize {
        self.inner.lookahead()
    }

    fn save_state(&self) -> anyhow::Result<EngineState> {
        self.inner.save_state()
    }

    fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        self.inner.restore_state(state)
    }
}

/// One GDN memory row: the `dv` entries key row `row` of value head `head` of chip
/// layer `layer` holds.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRow {
    pub layer: usize,
    pub head: usize,
    pub row: usize,
    pub values: Vec<f32>,
}

/// Which implementation of the layer math runs the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathPath {
    /// CSR matrices, skipping zeros, accumulating in the given order.
    Sparse(SumOrder),
    /// candle tensors on the CPU, every weight multiplied.
    Dense,
}

enum Engine<'a> {
    /// states[machine][layer].
    /// `active`: each layer's activation-sparse products (None where the layer's sum
    /// order has none: it steps row by row), shared by the machines (what they keep
    /// between steps is keyed by the inputs, not the machine).
    Sparse {
        layers: &'a [SparseLayer],
        active: Vec<Option<ActiveLayer>>,
        states: Vec<Vec<GdnState>>,
        /// dirty[machine][layer]: the state rows that may be nonzero.
        dirty: Vec<Vec<DirtyRows>>,
        scratch: Box<Scratch>,
    },
    Dense {
        layers: Vec<DenseLayer>,
        states: Vec<DenseState>,
        position: usize,
    },
}

/// A batch of machines being stepped token by token.
pub struct ChipRunner<'a> {
    pub model: &'a ChipModel,
    engine: Engine<'a>,
    batch: usize,
    /// The final residuals of the last step, one per machine.
    pub hidden: Vec<Vec<f32>>,
}

impl<'a> ChipRunner<'a> {
    /// One machine.
    pub fn new(model: &'a ChipModel) -> anyhow::Result<Self> {
        Self::batch(model, 1)
    }

    /// `batch` independent machines, all fresh.
    pub fn batch(model: &'a ChipModel, batch: usize) -> anyhow::Result<Self> {
        let config = &model.config;
        let engine = match &model.layers {
            ChipLayers::Sparse(layers) => {
                let states = (0..batch)
                    .map(|_| layers.iter().map(|_| GdnState::new(config)).collect())
                    .collect();
                let prefix = model.spec.anchor_prefix();
                let rows = config.linear_num_value_heads * config.linear_key_head_dim;
                Engine::Sparse {
                    layers,
                    active: layers.iter().map(|l| ActiveLayer::new(l, prefix)).collect(),
                    states,
                    dirty: (0..batch)
                        .map(|_| layers.iter().map(|_| DirtyRows::new(rows)).collect())
                        .collect(),
                    scratch: Box::default(),
                }
            }
            ChipLayers::Dense(layers) => {
                let device = Device::Cpu;
                let layers: Vec<DenseLayer> = layers
                    .iter()
                    .map(|l| DenseLayer::new(l, config, &device))
                    .collect::<Result<_, _>>()?;
                let states = layers
                    .iter()
                    .map(|l| l.new_state(batch, &device))
                    .collect::<Result<_, _>>()?;
                Engine::Dense {
                    layers,
                    states,
                    position: 0,
                }
            }
        };
        Ok(Self {
            model,
            engine,
            batch,
            hidden: Vec::new(),
        })
    }

    /// Runs one token through every chip layer and returns the token the chip chooses.
    pub fn step(&mut self, token: &ChipToken) -> anyhow::Result<ChipToken> {
        Ok(self.step_batch(std::slice::from_ref(token))?.remove(0))
    }

    /// Runs one token per machine; returns each machine's chosen next token.
    pub fn step_batch(&mut self, tokens: &[ChipToken]) -> anyhow::Result<Vec<ChipToken>> {
        anyhow::ensure!(
            tokens.len() == self.batch,
            "{} tokens for a batch of {}",
            tokens.len(),
            self.batch
        );
        let spec = &self.model.spec;
        let mut hidden: Vec<Vec<f32>> = tokens.iter().map(|t| spec.residual(t)).collect();
        match &mut self.engine {
            Engine::Sparse {
                layers,
                active,
                states,
                dirty,
                scratch,
            } => {
                let dk = self.model.config.linear_key_head_dim;
                for ((h, machine), dirty) in hidden.iter_mut().zip(states.iter_mut()).zip(dirty.iter_mut()) {
                    for (l, (layer, state)) in layers.iter().zip(machine.iter_mut()).enumerate() {
                        match &mut active[l] {
                            Some(active) => {
                                active.written.clear();
                                active.step(layer, h, state, scratch, Reach::Residual);
                                dirty[l].wrote(&active.written, dk);
                            }
                            None => {
                                layer.step(h, state, scratch);
                                dirty[l].all = true;
                            }
                        }
                    }
                }
            }
            Engine::Dense {
                layers,
                states,
                position,
            } => {
                let width = hidden[0].len();
                let flat: Vec<f32> = hidden.concat();
                let mut x = Tensor::from_vec(flat, (self.batch, 1, width), &Device::Cpu)?;
                for (layer, state) in layers.iter().zip(states.iter_mut()) {
                    x = layer.forward(&x, state, *position)?;
                }
                *position += 1;
                let out = x.flatten_all()?.to_vec1::<f32>()?;
                hidden = out.chunks(width).map(|c| c.to_vec()).collect();
            }
        }
        let next = hidden.iter().map(|h| spec.choose(h)).collect();
        self.hidden = hidden;
        Ok(next)
    }

    /// Key rows `rows` of value head `head` of chip layer `layer`, machine 0's, one
    /// after another (`dv` entries each).
    pub fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        let c = &self.model.config;
        let (dk, dv) = (c.linear_key_head_dim, c.linear_value_head_dim);
        anyhow::ensure!(rows.end <= dk, "rows {rows:?} past the {dk} of a GDN head");
        match &self.engine {
            Engine::Sparse { states, .. } => {
                let at = head * dk * dv;
                Ok(states[0][layer].recurrent[at + rows.start * dv..at + rows.end * dv].to_vec())
            }
            Engine::Dense { states, .. } => match &states[layer] {
                DenseState::Gdn { recurrent, .. } => {
                    let rows = recurrent.get(0)?.get(head)?.narrow(0, rows.start, rows.len())?;
                    Ok(rows.flatten_all()?.to_vec1::<f32>()?)
                }
                DenseState::Attention { .. } => anyhow::bail!("layer {layer} is not a GDN layer"),
            },
        }
    }

    /// Machine 0's GDN states, one per layer (None on the dense path).
    pub fn states(&self) -> Option<&[GdnState]> {
        match &self.engine {
            Engine::Sparse { states, .. } => Some(&states[0]),
            Engine::Dense { .. } => None,
        }
    }

    /// Every machine fresh, then `rows` written into machine 0's memories.
    pub fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        let c = &self.model.config;
        let (dk, dv) = (c.linear_key_head_dim, c.linear_value_head_dim);
        let Engine::Sparse { states, dirty, .. } = &mut self.engine else {
            anyhow::bail!("boot by loading state needs the sparse path of the layer math")
        };
        for (machine, dirty) in states.iter_mut().zip(dirty.iter_mut()) {
            for (state, dirty) in machine.iter_mut().zip(dirty.iter_mut()) {
                state.conv.fill(0.0);
                dirty.clear(&mut state.recurrent, dv);
            }
        }
        for r in rows {
            anyhow::ensure!(
                r.layer < states[0].len() && r.head < c.linear_num_value_heads && r.row < dk && r.values.len() == dv,
                "memory row {} of head {} of layer {} is outside the chip",
                r.row,
                r.head,
                r.layer
            );
            let at = (r.head * dk + r.row) * dv;
            states[0][r.layer].recurrent[at..at + dv].copy_from_slice(&r.values);
            dirty[0][r.layer].rows.insert(r.head * dk + r.row);
        }
        self.hidden.clear();
        Ok(())
    }
}

impl ChipRunner<'_> {
    /// The layout [`Self::save_state`] writes: the sparse path's GDN states, one machine.
    fn state_layout(&self) -> String {
        let c = &self.model.config;
        format!(
            "cpu: {} layers of conv {} and recurrent {} floats",
            self.model.layer_count(),
            (c.linear_conv_kernel_dim - 1) * c.conv_dim(),
            c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim
        )
    }

    /// Machine 0's GDN states (conv and recurrent, every layer).
    pub fn save_state(&self) -> anyhow::Result<EngineState> {
        let Engine::Sparse { states, .. } = &self.engine else {
            anyhow::bail!("saving a machine's state needs the sparse path of the layer math")
        };
        anyhow::ensure!(self.batch == 1, "a saved state is one machine's, not a batch's");
        let mut floats = Vec::new();
        for (l, state) in states[0].iter().enumerate() {
            floats.push((format!("layer.{l}.conv"), state.conv.clone()));
            floats.push((format!("layer.{l}.recurrent"), state.recurrent.clone()));
        }
        Ok(EngineState {
            layout: self.state_layout(),
            floats,
            words: Vec::new(),
        })
    }

    /// Writes `state` (from [`Self::save_state`] of the same chip) into machine 0.
    pub fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        state.check_layout(&self.state_layout())?;
        let Engine::Sparse { states, dirty, .. } = &mut self.engine else {
            anyhow::bail!("restoring a machine's state needs the sparse path of the layer math")
        };
        // Every array checked before any is written: a bad file leaves the machine as it was.
        let saved = (states[0].iter().enumerate())
            .map(|(l, layer)| {
                Ok((
                    state.floats(&format!("layer.{l}.conv"), layer.conv.len())?,
                    state.floats(&format!("layer.{l}.recurrent"), layer.recurrent.len())?,
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        for ((layer, dirty), (conv, recurrent)) in states[0].iter_mut().zip(dirty[0].iter_mut()).zip(saved) {
            layer.conv.copy_from_slice(conv);
            layer.recurrent.copy_from_slice(recurrent);
            dirty.all = true;
        }
        self.hidden.clear();
        Ok(())
    }
}

/// The GDN state rows of one layer that may hold nonzeros, so a reset clears only those
/// (a whole state is a megabyte per layer at the 0.8b shape; a boot writes a few hundred
/// rows).
#[derive(Debug, Clone)]
struct DirtyRows {
    /// Every row (a step that does not say where it wrote).
    all: bool,
    /// Rows (value head · dk + key row).
    rows: IndexSet,
}

impl DirtyRows {
    /// Fresh: every row zero. A new state is all zeros.
    fn new(rows: usize) -> Self {
        Self {
            all: false,
            rows: IndexSet::new(rows),
        }
    }

    /// Marks what a step wrote: (value head, key row; None: the whole head).
    fn wrote(&mut self, written: &[(usize, Option<usize>)], dk: usize) {
        for &(head, row) in written {
            match row {
                Some(row) => self.rows.insert(head * dk + row),
                None => (head * dk..(head + 1) * dk).for_each(|r| self.rows.insert(r)),
            }
        }
    }

    /// Zeroes the dirty rows of `recurrent` (rows of `dv`): all of it is zero after.
    fn clear(&mut self, recurrent: &mut [f32], dv: usize) {
        if self.all {
            recurrent.fill(0.0);
        } else {
            for &r in self.rows.as_slice() {
                recurrent[r * dv..(r + 1) * dv].fill(0.0);
            }
        }
        self.rows.clear();
        self.all = false;
    }
}

impl PassEngine for ChipRunner<'_> {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        let mut out = Vec::with_capacity(max);
        let mut token = None;
        for i in 0..max {
            let t = match inputs.get(i) {
                Some(t) => t.clone(),
                None => token.take().expect("a previous choice"),
            };
            let chosen = self.step(&t)?;
            let stop = i + 1 >= inputs.len() && stop_kinds.contains(&chosen.kind);
            out.push(chosen.clone());
            token = Some(chosen);
            if stop {
                break;
            }
        }
        Ok(out)
    }

    fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        ChipRunner::memory_rows(self, layer, head, rows)
    }

    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        ChipRunner::load_state(self, rows)
    }

    fn save_state(&self) -> anyhow::Result<EngineState> {
        ChipRunner::save_state(self)
    }

    fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        ChipRunner::restore_state(self, state)
    }
}

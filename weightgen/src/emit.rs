//! Emission: a scheduled circuit becomes the weights of stock Qwen3.5 linear-attention
//! decoder layers (full residual width, base dimensions all zero), chip-token
//! embedding rows and a final-norm slice.

use inband_chip::rv32im::Rv32Map;
use inband_chip::{ChipModel, ChipSpec, MathPath};
use inband_circuits::circuit::RowCode;
use inband_circuits::contract::{
    self, ADDRESS_ON, ANCHOR_ENTRIES, A_LOG_NEVER_FORGET, GATE_SCALE, LEVEL_UNIT, NORM_WEIGHT, VALUE_ON, Z_CLOSED,
};
use inband_circuits::primitives::{add_gated, add_identity};
use inband_circuits::{Address, Circuit, Delayed, Expr, Output, TokenSpec};
use inband_qwen35::weights::{Array, DecoderLayer, Mixer};
use inband_qwen35::{LayerType, TextConfig};
use thiserror::Error;

use crate::layout::Layout;
use crate::schedule::{schedule, Schedule, ScheduleError};

#[derive(Debug, Error)]
pub enum CompileError {
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("circuit {circuit} targets {target:?} but the base config offers {offered:?}")]
    TargetMismatch {
        circuit: String,
        target: String,
        offered: String,
    },
    #[error("address of memory {0}: a factored address needs its head and row choices at the same delay")]
    MixedDelays(String),
    #[error("address of memory {memory} has {found} elements, expected {expected}")]
    AddressSize {
        memory: String,
        found: usize,
        expected: usize,
    },
    #[error("delay {0} is beyond the 4-tap conv (at most {MAX_DELAY})")]
    Delay(usize),
}

/// The furthest back a value can come from: the 4-tap causal conv sees this token and
/// the three before it.
pub const MAX_DELAY: usize = 3;

/// The resources a base config gives each chip layer.
pub fn target_of(c: &TextConfig) -> inband_circuits::Target {
    inband_circuits::Target {
        key_heads: c.linear_num_key_heads,
        value_heads_per_key_head: c.value_heads_per_key_head(),
        rows_per_head: c.linear_key_head_dim,
        entries_per_value_head: c.linear_value_head_dim,
        mlp_neurons: c.intermediate_size,
    }
}

/// A compiled chip: layers, token map and the layout/schedule that explain them.
#[derive(Debug, Clone)]
pub struct Chip {
    pub circuit: Circuit,
    pub base: TextConfig,
    pub layout: Layout,
    pub schedule: Schedule,
    /// Decoder layers of full width (base + chip dimensions), all linear attention.
    pub layers: Vec<DecoderLayer>,
}

/// Score weight that makes the output kind beat every token of another kind: more
/// than any difference the field scores can make, rounded up to a power of two.
fn kind_weight(tokens: &TokenSpec) -> f64 {
    let max_size = tokens.fields.iter().map(|f| f.size).max().unwrap_or(1) as f64;
    let bound = contract::OUTPUT_UNIT * (max_size * max_size * tokens.fields.len() as f64 + 1.0);
    2f64.powi(bound.log2().ceil() as i32 + 1)
}

/// Turns the circuit's outputs into a final-layer block of identity neurons that
/// write quadratic scores into the token dimensions.
fn output_block(c: &mut Circuit) {
    if c.outputs.is_empty() {
        return;
    }
    let outputs = c.outputs.clone();
    let mut b = c.final_block("output");
    let mut constant_terms = Vec::new();
    for o in &outputs {
        match o {
            Output::Kind { kind, weight } => constant_terms.push((c.kind(*kind), *weight)),
            Output::FieldValue { field, value, weight } => {
                let dims = c.field(*field).to_vec();
                let linear: Vec<_> = dims
                    .iter()
                    .enumerate()
                    .map(|(v, s)| (*s, weight * 2.0 * v as f64))
                    .collect();
                add_identity(&mut b, value, &linear);
                constant_terms.extend(square_terms(&dims, *weight));
            }
            Output::KindChoice { choices, weight } => {
                for (cond, kind) in choices {
                    let range = c.expr_range(cond);
                    add_gated(&mut b, cond, range, &Expr::constant(*weight), &[(c.kind(*kind), 1.0)]);
                }
            }
            Output::FieldChoice { field, choices, weight } => {
                let dims = c.field(*field).to_vec();
                let linear: Vec<_> = dims
                    .iter()
                    .enumerate()
                    .map(|(v, s)| (*s, weight * 2.0 * v as f64))
                    .collect();
                for (cond, value) in choices {
                    let range = c.expr_range(cond);
                    add_gated(&mut b, cond, range, value, &linear);
                }
                constant_terms.extend(square_terms(&dims, *weight));
            }
        }
    }
    if !constant_terms.is_empty() {
        add_identity(&mut b, &Expr::constant(1.0), &constant_terms);
    }
    c.add_block(b);
}

/// The −weight·v² part of a field's quadratic scores.
fn square_terms(dims: &[inband_circuits::Signal], weight: f64) -> Vec<(inband_circuits::Signal, f64)> {
    dims.iter()
        .enumerate()
        .filter(|(v, _)| *v > 0)
        .map(|(v, s)| (*s, -weight * (v * v) as f64))
        .collect()
}

/// The weight that lets a chosen kind win over every token of another kind.
pub fn output_kind_weight(tokens: &TokenSpec) -> f64 {
    kind_weight(tokens)
}

/// Standard output terms: the kind wins, each field takes the nearest integer.
pub fn standard_outputs(c: &mut Circuit, kind: usize, fields: &[(usize, Expr)]) {
    let weight = kind_weight(&c.tokens);
    c.output(Output::Kind { kind, weight });
    for (field, value) in fields {
        c.output(Output::FieldValue {
            field: *field,
            value: value.clone(),
            weight: contract::OUTPUT_UNIT,
        });
    }
}

/// Sparse row writer for one projection row.
struct RowWriter<'a> {
    layout: &'a Layout,
}

impl RowWriter<'_> {
    /// Writes `scale · expr` (nominal pre-activation) into a weight row of full width.
    fn put(&self, row: &mut [f32], expr: &Expr, scale: f64) {
        for (s, c) in &expr.terms {
            row[self.layout.dim(*s)] += self.layout.signal_weight(*s, c * scale);
        }
        if expr.constant != 0.0 {
            let (anchor, _) = self.layout.constant_anchor();
            row[anchor] += self.layout.constant_weight(expr.constant * scale);
        }
    }
}

/// Per-slot (nominal pre-activation, conv delay) of an address: +128 for the selected
/// slot(s), at most −128 elsewhere. A row that is a constant is read at no delay: it is
/// the same on every pass, and a delayed tap would make its channel keep conv state.
fn address_slots(address: &Address, heads: usize, rows_per_head: usize) -> Vec<(Expr, usize)> {
    match address {
        Address::Rows(elems) => elems
            .iter()
            .map(|d| {
                let delay = if d.expr.is_constant() { 0 } else { d.delay };
                ((d.expr.clone() * 2.0 - 1.0) * ADDRESS_ON, delay)
            })
            .collect::<Vec<_>>(),
        Address::Factored { heads: hs, rows } => {
            let factors = rows.len() as f64;
            let mut out = Vec::with_capacity(heads * rows_per_head);
            for h in hs.iter().take(heads) {
                for r in 0..rows_per_head {
                    // Digits of r, most significant factor first.
                    let mut rest = r;
                    let mut sum = h.expr.clone();
                    for factor in rows.iter().rev() {
                        sum = sum + factor[rest % factor.len()].expr.clone();
                        rest /= factor.len();
                    }
                    // 2·ADDRESS_ON·(Σ − (factors + 1) + ½): +128 when all are chosen, ≤ −128 otherwise.
                    out.push(((sum - factors - 0.5) * (2.0 * ADDRESS_ON), h.delay));
                }
            }
            out
        }
    }
}

fn check_address(c: &Circuit, memory: usize, address: &Address) -> Result<(), CompileError> {
    let name = c.memories[memory].name.clone();
    let heads = c.memories[memory].key_heads;
    let rph = c.target.rows_per_head;
    let delays: Vec<&Delayed> = match address {
        Address::Rows(r) => {
            if r.len() != heads * rph {
                return Err(CompileError::AddressSize {
                    memory: name,
                    found: r.len(),
                    expected: heads * rph,
                });
            }
            r.iter().collect()
        }
        Address::Factored { heads: h, rows } => {
            let row_count: usize = rows.iter().map(|f| f.len()).product();
            if h.len() != heads || row_count != rph {
                return Err(CompileError::AddressSize {
                    memory: name,
                    found: h.len() * row_count,
                    expected: heads * rph,
                });
            }
            let all: Vec<&Delayed> = h.iter().chain(rows.iter().flatten()).collect();
            if all.iter().any(|d| d.delay != h[0].delay) {
                return Err(CompileError::MixedDelays(name));
            }
            all
        }
    };
    if let Some(d) = delays.iter().find(|d| d.delay > MAX_DELAY) {
        return Err(CompileError::Delay(d.delay));
    }
    Ok(())
}

/// Compiles `circuit` for a model with config `base`.
pub fn compile(circuit: &Circuit, base: &TextConfig) -> Result<Chip, CompileError> {
    let target = target_of(base);
    if target != circuit.target {
        return Err(CompileError::TargetMismatch {
            circuit: circuit.name.clone(),
            target: format!("{:?}", circuit.target),
            offered: format!("{target:?}"),
        });
    }
    let mut c = circuit.clone();
    output_block(&mut c);
    for w in &c.writes {
        check_address(&c, w.memory, &w.address)?;
        if let Some((_, d)) = w.entries.iter().find(|(_, d)| d.delay > MAX_DELAY) {
            return Err(CompileError::Delay(d.delay));
        }
    }
    for r in &c.reads {
        check_address(&c, r.memory, &r.address)?;
    }
    let schedule = schedule(&c)?;
    let layout = Layout::new(&c, base.hidden_size);
    let width = layout.width();
    let mut config = base.clone();
    config.hidden_size = width;
    let (dk, dv, k_taps) = (
        base.linear_key_head_dim,
        base.linear_value_head_dim,
        base.linear_conv_kernel_dim,
    );
    let group = base.value_heads_per_key_head();
    let key_dim = base.key_dim();
    let writer = RowWriter { layout: &layout };

    let mut layers = Vec::with_capacity(schedule.layers);
    for l in 0..schedule.layers {
        let mut layer = DecoderLayer::zeros(LayerType::LinearAttention, &config);
        let Mixer::Linear(g) = &mut layer.mixer else {
            unreachable!()
        };
        g.a_log.data.fill(A_LOG_NEVER_FORGET);
        g.norm.data.fill(NORM_WEIGHT);
        // Every value head is silent unless a write below enables it.
        for vh in 0..base.linear_num_value_heads {
            writer.put(g.in_proj_b.row_mut(vh), &Expr::constant(-0.5), GATE_SCALE);
        }
        for (m, mem) in c.memories.iter().enumerate() {
            let (ml, first) = schedule.memory_place[m];
            if ml != l {
                continue;
            }
            let value_heads = (first * group)..((first + mem.key_heads) * group);
            for w in c.writes.iter().filter(|w| w.memory == m) {
                for (i, (pre, delay)) in address_slots(&w.address, mem.key_heads, dk).iter().enumerate() {
                    let channel = key_dim + first * dk + i;
                    writer.put(g.in_proj_qkv.row_mut(channel), pre, 1.0);
                    g.conv1d.row_mut(channel)[k_taps - 1 - delay] = 1.0;
                }
                // Value pre-activations: ±VALUE_ON for bits, LEVEL_UNIT·level for levels.
                let mut values: Vec<(usize, Expr, usize)> = w
                    .entries
                    .iter()
                    .map(|(e, d)| match mem.code {
                        RowCode::OneHot { .. } => (*e, (d.expr.clone() * 2.0 - 1.0) * VALUE_ON, d.delay),
                        RowCode::Anchored { .. } => (*e, d.expr.clone() * LEVEL_UNIT, d.delay),
                    })
                    .collect();
                if let RowCode::Anchored { anchor, .. } = mem.code {
                    for sub in 0..group {
                        for a in 0..ANCHOR_ENTRIES {
                            values.push((sub * dv + dv - 1 - a, Expr::constant(anchor * LEVEL_UNIT), 0));
                        }
                    }
                }
                for h in 0..mem.key_heads {
                    for (entry, pre, delay) in &values {
                        let vh = (first + h) * group + entry / dv;
                        let channel = 2 * key_dim + vh * dv + entry % dv;
                        writer.put(g.in_proj_qkv.row_mut(channel), pre, 1.0);
                        g.conv1d.row_mut(channel)[k_taps - 1 - delay] = 1.0;
                    }
                }
                for vh in value_heads.clone() {
                    let row = g.in_proj_b.row_mut(vh);
                    row.fill(0.0);
                    writer.put(row, &(w.enable.clone() - 0.5), GATE_SCALE);
                }
            }
            for r in c.reads.iter().filter(|r| r.memory == m) {
                for (i, (pre, delay)) in address_slots(&r.address, mem.key_heads, dk).iter().enumerate() {
                    let channel = first * dk + i;
                    writer.put(g.in_proj_qkv.row_mut(channel), pre, 1.0);
                    g.conv1d.row_mut(channel)[k_taps - 1 - delay] = 1.0;
                }
                let gate = match mem.code {
                    RowCode::OneHot { nonzeros } => contract::read_gate(nonzeros).expect("checked at declaration"),
                    RowCode::Anchored { anchor, rows_per_read } => contract::anchored_read_gate(anchor, rows_per_read),
                };
                for vh in value_heads.clone() {
                    for ch in 0..dv {
                        let entry = (vh - first * group) % group * dv + ch;
                        let z = match r.select.as_ref().and_then(|s| s.iter().find(|(e, _)| *e == entry)) {
                            Some((_, sel)) => sel.clone() * (gate - Z_CLOSED) + Z_CLOSED,
                            None if r.select.is_some() => Expr::constant(Z_CLOSED),
                            None => Expr::constant(gate),
                        };
                        writer.put(g.in_proj_z.row_mut(vh * dv + ch), &z, 1.0);
                    }
                }
                for (signal, entries) in &r.outputs {
                    let row = g.out_proj.row_mut(layout.dim(*signal));
                    let scale = layout.scale(*signal);
                    for h in 0..mem.key_heads {
                        for (entry, coeff) in entries {
                            let vh = (first + h) * group + entry / dv;
                            row[vh * dv + entry % dv] += *coeff as f32 * scale;
                        }
                    }
                }
            }
        }
        // MLP: the blocks of this layer, neurons in order.
        let mut n = 0;
        for (b, block) in c.blocks.iter().enumerate() {
            if schedule.block_layer[b] != l {
                continue;
            }
            for neuron in &block.neurons {
                writer.put(layer.mlp.gate_proj.row_mut(n), &neuron.gate, 1.0);
                writer.put(layer.mlp.up_proj.row_mut(n), &neuron.up, 1.0);
                for (s, coeff) in &neuron.outputs {
                    layer.mlp.down_proj.row_mut(layout.dim(*s))[n] += *coeff as f32 * layout.scale(*s);
                }
                n += 1;
            }
        }
        layers.push(layer);
    }
    Ok(Chip {
        circuit: c,
        base: base.clone(),
        layout,
        schedule,
        layers,
    })
}

impl Chip {
    /// The model config of the chip layers alone (base width plus chip dimensions).
    pub fn layer_config(&self) -> TextConfig {
        let mut c = self.base.clone();
        c.hidden_size = self.layout.width();
        c.num_hidden_layers = self.layers.len();
        c.layer_types = vec![LayerType::LinearAttention; self.layers.len()];
        c
    }

    /// The chip's token map and residual layout, as a host sees them.
    pub fn spec(&self) -> ChipSpec {
        let c = &self.circuit;
        let dim = |s: inband_circuits::Signal| self.layout.signal_dim[s.0 as usize];
        ChipSpec {
            tokens: c.tokens.clone(),
            hidden: self.layout.hidden,
            chip_dims: self.layout.chip_dims,
            anchors: self.layout.anchors.clone(),
            kind_dims: (0..c.tokens.kinds.len()).map(|k| dim(c.kind(k))).collect(),
            field_dims: (0..c.tokens.fields.len())
                .map(|f| c.field(f).iter().map(|s| dim(*s)).collect())
                .collect(),
        }
    }

    /// The chip as a host drives it (`rv32im`: the RV32IM host map, for that chip), on
    /// the CPU `path`, without writing a pack.
    pub fn model(&self, rv32im: Option<Rv32Map>, path: MathPath) -> anyhow::Result<ChipModel> {
        let manifest = crate::pack::manifest_of(self, rv32im, safetensors::Dtype::F32, Default::default());
        ChipModel::from_layers(manifest, &self.layers, path)
    }

    /// Nonzero weights of every chip layer.
    pub fn nonzero_weights(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.named_tensors().iter().map(|(_, a)| a.nonzeros()).sum::<usize>())
            .sum()
    }

    /// Weights that bf16 cannot hold exactly (the chip is meant to have none).
    pub fn non_bf16_weights(&self) -> usize {
        let exact = |v: f32| half::bf16::from_f32(v).to_f32() == v;
        self.layers
            .iter()
            .flat_map(|l| l.named_tensors())
            .map(|(_, a): (String, Array)| a.data.iter().filter(|v| !exact(**v)).count())
            .sum()
    }
}

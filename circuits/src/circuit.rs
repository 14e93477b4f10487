//! The circuit IR: what a chip computes, independent of where it lands.
//!
//! A circuit is a set of *blocks* (MLP neurons that must sit in one layer's MLP),
//! GDN *memories* with their *reads* and *writes*, the chip *token* vocabulary that
//! feeds it, and the *outputs* that choose the next token. Signals are produced by
//! exactly one block or read (or the token embedding) and live in the residual
//! stream from then on. The compiler (weightgen) schedules and emits it.

use crate::contract;
use crate::expr::{Delayed, Expr, Range, Signal};
use crate::token::TokenSpec;

/// The resources of one chip layer, taken from the base model's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// GDN key heads per layer (Qwen3.5: 16 for every size).
    pub key_heads: usize,
    /// Value heads sharing each key head (1 for 0.8B/2B, 2 for 4B/9B).
    pub value_heads_per_key_head: usize,
    /// Rows a key head addresses: the key dimension (128).
    pub rows_per_head: usize,
    /// Entries per value head row: the value dimension (128).
    pub entries_per_value_head: usize,
    /// MLP neurons per layer (intermediate_size).
    pub mlp_neurons: usize,
}

impl Target {
    /// Entries in one memory row of a key head (all its value heads side by side).
    pub fn row_width(&self) -> usize {
        self.entries_per_value_head * self.value_heads_per_key_head
    }
}

/// Where a signal comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The chip token's embedding.
    Token,
    /// The MLP block with this index.
    Block(usize),
    /// The memory read with this index.
    Read(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct SignalInfo {
    pub name: String,
    pub range: Range,
    pub source: Source,
}

/// One SwiGLU neuron: adds `coefficient · silu(gate) · up` to each output signal.
/// `gate` and `up` are in nominal units; the primitives choose them so that `gate`
/// never lands inside silu's curved region (see [`contract`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Neuron {
    pub gate: Expr,
    pub up: Expr,
    pub outputs: Vec<(Signal, f64)>,
}

impl Neuron {
    /// Whether the gate is open with no signal reaching the neuron (every signal it reads
    /// 0, as on most passes): the primitives scale every gate as a decision (a nominal
    /// value never within 1/2 of 0, times [`crate::contract::GATE_SCALE`]), so its constant
    /// is either open or shut, never in silu's curved region.
    pub fn open_at_rest(&self) -> bool {
        self.gate.constant > 0.0
    }

    /// Whether the neuron reads no signal at all (a constant, such as the token scores
    /// every pass adds).
    pub fn is_constant(&self) -> bool {
        self.gate.is_constant() && self.up.is_constant()
    }

    /// Whether a neuron that reads signals adds something when none of them reaches it:
    /// its gate is open and its up's constant is not 0. It then writes its outputs on
    /// every pass (a constant signal that is not 0, listed and read by every later
    /// layer), and the GPU kernel, which skips the neurons no signal reached, computes
    /// every neuron of its layer on every pass (a first version of the division digit had
    /// such neurons and cost the H200 10–12 % of its passes a second).
    pub fn awake_at_rest(&self) -> bool {
        !self.is_constant() && self.open_at_rest() && self.up.constant != 0.0
    }
}

/// Neurons that must share one layer's MLP because they add into the same signals.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    pub name: String,
    pub neurons: Vec<Neuron>,
    pub outputs: Vec<Signal>,
    /// Placed in the final chip layer (it writes the token-choosing scores).
    pub final_layer: bool,
}

/// How a memory's rows encode their contents. Reads pass through a per-head RMSNorm
/// that discards magnitude, so every code fixes the row's norm.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RowCode {
    /// Entries are on (stored `VALUE_ON`) or off (0), with exactly `nonzeros` on per value
    /// head in every written row (2, 8, 32 or 128: the read scale is then a power of two).
    OneHot { nonzeros: usize },
    /// Entries hold small integer levels (stored `LEVEL_UNIT`·level); the last two entries
    /// of every value head hold the anchor level, which dominates the norm, so a level
    /// reads back as itself (to within level²/anchor²). A read may sum up to
    /// `rows_per_read` rows with disjoint entries (their anchors add up).
    Anchored { anchor: f64, rows_per_read: usize },
}

/// A GDN memory: rows of `row_width` entries spread over `key_heads` key heads of one
/// layer, written whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub name: String,
    pub key_heads: usize,
    pub code: RowCode,
    /// What a row holds (for the allocation report).
    pub description: String,
}

/// Which row an access touches. Every element is a 0/1 quantity; exactly one row (or
/// none, which makes a read return 0 and a write do nothing) is selected (a read of an
/// anchored memory may select several rows, which it sums).
#[derive(Debug, Clone, PartialEq)]
pub enum Address {
    /// One element per row of the memory (`key_heads × rows_per_head`).
    Rows(Vec<Delayed>),
    /// A head choice and row-digit choices (most significant first; their sizes
    /// multiply to `rows_per_head`), ANDed inside the key/query projection.
    Factored {
        heads: Vec<Delayed>,
        rows: Vec<Vec<Delayed>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub memory: usize,
    pub address: Address,
    /// (entry index in the row, value): a 0/1 bit for one-hot rows, an integer level for
    /// anchored rows (whose anchors the compiler adds). Entries not listed are written 0.
    pub entries: Vec<(usize, Delayed)>,
    /// 0/1: whether this token writes at all.
    pub enable: Expr,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub memory: usize,
    pub address: Address,
    /// Optional per-entry 0/1 selector (the gate `silu(z)` zeroes unselected entries).
    pub select: Option<Vec<(usize, Expr)>>,
    /// Each output signal is Σ coefficient · (1 if the entry is on in the row read).
    pub outputs: Vec<(Signal, Vec<(usize, f64)>)>,
}

/// One output of a read: (name, range, Σ coefficient · entry).
pub type ReadOutput = (String, Range, Vec<(usize, f64)>);

/// A contribution to the final logits.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Score added to every token of a kind (constant; makes that kind win).
    Kind { kind: usize, weight: f64 },
    /// The field takes the integer nearest to `value` (0..size): quadratic scores
    /// weight·(2v·value − v²) on the field's dims.
    FieldValue { field: usize, value: Expr, weight: f64 },
    /// As `FieldValue` with value Σ [condᵢ > 0]·valueᵢ: at most one condition holds
    /// (integer-valued conditions). The selection happens in the scoring neurons.
    FieldChoice {
        field: usize,
        choices: Vec<(Expr, Expr)>,
        weight: f64,
    },
    /// The kind whose condition holds wins (at most one holds).
    KindChoice { choices: Vec<(Expr, usize)>, weight: f64 },
}

/// A complete circuit.
#[derive(Debug, Clone)]
pub struct Circuit {
    pub name: String,
    pub target: Target,
    pub tokens: TokenSpec,
    pub signals: Vec<SignalInfo>,
    pub blocks: Vec<Block>,
    pub memories: Vec<Memory>,
    pub reads: Vec<Read>,
    pub writes: Vec<Write>,
    pub outputs: Vec<Output>,
    /// Signal of each token kind (1 when the token is of that kind).
    kind_signals: Vec<Signal>,
    /// Signals of each field: [field][value].
    field_signals: Vec<Vec<Signal>>,
}

/// Builds one block.
pub struct BlockBuilder {
    name: String,
    neurons: Vec<Neuron>,
    outputs: Vec<(String, Range)>,
    base: u32,
    final_layer: bool,
}

impl BlockBuilder {
    /// Declares an output signal of this block.
    pub fn output(&mut self, name: impl Into<String>, range: Range) -> Signal {
        self.outputs.push((name.into(), range));
        Signal(self.base + self.outputs.len() as u32 - 1)
    }

    pub fn neuron(&mut self, gate: Expr, up: Expr, outputs: &[(Signal, f64)]) {
        self.neurons.push(Neuron {
            gate,
            up,
            outputs: outputs.to_vec(),
        });
    }

    pub fn neuron_count(&self) -> usize {
        self.neurons.len()
    }
}

impl Circuit {
    /// A circuit with the token signals of `tokens` already present.
    pub fn new(name: impl Into<String>, target: Target, tokens: TokenSpec) -> Self {
        let mut c = Self {
            name: name.into(),
            target,
            tokens,
            signals: Vec::new(),
            blocks: Vec::new(),
            memories: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
            outputs: Vec::new(),
            kind_signals: Vec::new(),
            field_signals: Vec::new(),
        };
        let kinds: Vec<String> = c.tokens.kinds.iter().map(|k| k.name.clone()).collect();
        for k in kinds {
            let s = c.add_signal(format!("token.kind={k}"), Range::BIT, Source::Token);
            c.kind_signals.push(s);
        }
        let fields: Vec<(String, usize)> = c.tokens.fields.iter().map(|f| (f.name.clone(), f.size)).collect();
        for (name, size) in fields {
            let signals = (0..size)
                .map(|v| c.add_signal(format!("token.{name}={v}"), Range::BIT, Source::Token))
                .collect();
            c.field_signals.push(signals);
        }
        c
    }

    fn add_signal(&mut self, name: String, range: Range, source: Source) -> Signal {
        self.signals.push(SignalInfo { name, range, source });
        Signal(self.signals.len() as u32 - 1)
    }

    pub fn info(&self, s: Signal) -> &SignalInfo {
        &self.signals[s.0 as usize]
    }

    pub fn range(&self, s: Signal) -> Range {
        self.signals[s.0 as usize].range
    }

    /// Bounds of an expression over its signals' ranges.
    pub fn expr_range(&self, e: &Expr) -> (f64, f64) {
        e.range(|s| self.range(s))
    }

    /// 1 when the token is of kind `kind`.
    pub fn kind(&self, kind: usize) -> Signal {
        self.kind_signals[kind]
    }

    /// The one-hot signals of token field `field` (all 0 when the token's kind lacks it).
    pub fn field(&self, field: usize) -> &[Signal] {
        &self.field_signals[field]
    }

    /// The value of a field as a linear expression of its one-hot signals.
    pub fn field_value(&self, field: usize) -> Expr {
        Expr::sum(self.field(field).iter().enumerate().map(|(v, s)| (*s, v as f64)))
    }

    /// Starts a block whose signals get indices after the current ones.
    pub fn block(&self, name: impl Into<String>) -> BlockBuilder {
        BlockBuilder {
            name: name.into(),
            neurons: Vec::new(),
            outputs: Vec::new(),
            base: self.signals.len() as u32,
            final_layer: false,
        }
    }

    /// As [`Self::block`], for a block that must sit in the final layer.
    pub fn final_block(&self, name: impl Into<String>) -> BlockBuilder {
        let mut b = self.block(name);
        b.final_layer = true;
        b
    }

    /// Adds a finished block; returns its index.
    pub fn add_block(&mut self, b: BlockBuilder) -> usize {
        assert_eq!(
            b.base as usize,
            self.signals.len(),
            "blocks must be added in the order they were started"
        );
        let index = self.blocks.len();
        let outputs = b
            .outputs
            .into_iter()
            .map(|(name, range)| self.add_signal(format!("{}.{}", b.name, name), range, Source::Block(index)))
            .collect();
        self.blocks.push(Block {
            name: b.name,
            neurons: b.neurons,
            outputs,
            final_layer: b.final_layer,
        });
        index
    }

    /// Declares a memory of one-hot rows (`nonzeros` entries on per value head) spanning
    /// `key_heads` key heads.
    pub fn memory(
        &mut self,
        name: impl Into<String>,
        key_heads: usize,
        nonzeros: usize,
        description: impl Into<String>,
    ) -> usize {
        assert!(
            contract::read_gate(nonzeros).is_some(),
            "rows must have 2, 8, 32 or 128 entries on per value head"
        );
        self.add_memory(name, key_heads, RowCode::OneHot { nonzeros }, description)
    }

    /// Declares a memory with any row code.
    pub fn add_memory(
        &mut self,
        name: impl Into<String>,
        key_heads: usize,
        code: RowCode,
        description: impl Into<String>,
    ) -> usize {
        if let RowCode::Anchored { anchor, rows_per_read } = code {
            assert!(
                anchor.log2().fract() == 0.0 && rows_per_read.is_power_of_two(),
                "anchor and rows must be powers of two"
            );
        }
        self.memories.push(Memory {
            name: name.into(),
            key_heads,
            code,
            description: description.into(),
        });
        self.memories.len() - 1
    }

    /// Rows addressable in a memory.
    pub fn memory_rows(&self, memory: usize) -> usize {
        self.memories[memory].key_heads * self.target.rows_per_head
    }

    pub fn write(&mut self, w: Write) {
        self.writes.push(w);
    }

    /// Adds a read; its output signals (one per entry of `outputs`) come back in order.
    pub fn read(
        &mut self,
        name: &str,
        memory: usize,
        address: Address,
        select: Option<Vec<(usize, Expr)>>,
        outputs: Vec<ReadOutput>,
    ) -> Vec<Signal> {
        let index = self.reads.len();
        let mut signals = Vec::new();
        let mut terms = Vec::new();
        for (n, range, entries) in outputs {
            let s = self.add_signal(format!("{name}.{n}"), range, Source::Read(index));
            signals.push(s);
            terms.push((s, entries));
        }
        self.reads.push(Read {
            memory,
            address,
            select,
            outputs: terms,
        });
        signals
    }

    pub fn output(&mut self, o: Output) {
        self.outputs.push(o);
    }

    /// Total neurons.
    pub fn neuron_count(&self) -> usize {
        self.blocks.iter().map(|b| b.neurons.len()).sum()
    }
}

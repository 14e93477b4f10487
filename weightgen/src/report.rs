//! The allocation report: every residual dimension, key head and MLP neuron of a
//! compiled chip, named, layer by layer. The main debugging tool.

use std::fmt::Write as _;
use std::ops::Range;

use inband_circuits::{Address, Circuit, Expr};
use inband_qwen35::weights::{Array, DecoderLayer, Mixer};

use crate::dependencies::{layer_units, steps, unit_name, waits_for};
use crate::emit::Chip;

fn describe_expr(c: &Circuit, e: &Expr, limit: usize) -> String {
    let mut parts: Vec<String> = e
        .terms
        .iter()
        .take(limit)
        .map(|(s, k)| {
            if *k == 1.0 {
                c.info(*s).name.clone()
            } else {
                format!("{k}·{}", c.info(*s).name)
            }
        })
        .collect();
    if e.terms.len() > limit {
        parts.push(format!("… ({} terms)", e.terms.len()));
    }
    if e.constant != 0.0 || parts.is_empty() {
        parts.push(format!("{}", e.constant));
    }
    parts.join(" + ")
}

fn describe_address(c: &Circuit, a: &Address) -> String {
    let (elems, kind) = match a {
        Address::Rows(r) => (r.iter().collect::<Vec<_>>(), "row one-hot"),
        Address::Factored { heads, rows } => (
            heads.iter().chain(rows.iter().flatten()).collect(),
            "head × row-digit one-hots",
        ),
    };
    let mut signals: Vec<String> = elems
        .iter()
        .flat_map(|d| d.expr.signals())
        .map(|s| c.info(s).name.clone())
        .collect();
    signals.sort();
    signals.dedup();
    let delay = elems.first().map_or(0, |d| d.delay);
    let shown: Vec<String> = signals.iter().take(4).cloned().collect();
    let more = if signals.len() > 4 {
        format!(" … ({} signals)", signals.len())
    } else {
        String::new()
    };
    let when = if delay > 0 {
        format!(", {delay} token(s) ago")
    } else {
        String::new()
    };
    format!("{kind} from {}{more}{when}", shown.join(", "))
}

/// Nonzero weights of `a` in the anchors' columns and in the other columns.
fn split_by_anchors(a: &Array, anchors: &Range<usize>) -> (usize, usize) {
    let (rows, _) = a.dims2();
    let (mut on_anchors, mut on_signals) = (0, 0);
    for r in 0..rows {
        for (c, w) in a.row(r).iter().enumerate() {
            if *w != 0.0 {
                if anchors.contains(&c) {
                    on_anchors += 1;
                } else {
                    on_signals += 1;
                }
            }
        }
    }
    (on_anchors, on_signals)
}

/// What a pass of the layer must touch when driven by its input's nonzeros (the GPU's
/// sparse kernel): the anchors never change, so their columns' share of every row is
/// computed once; only the signal columns' weights are read on a pass, and only those of
/// signals that are nonzero. Also the conv channels that read earlier passes and the
/// neurons no signal reaches (constants).
fn sparsity(layer: &DecoderLayer, anchors: &Range<usize>) -> Option<String> {
    let Mixer::Linear(m) = &layer.mixer else { return None };
    let (mut xin_anchors, mut xin_signals) = (0, 0);
    for a in [&m.in_proj_qkv, &m.in_proj_z, &m.in_proj_b, &m.in_proj_a] {
        let (on_anchors, on_signals) = split_by_anchors(a, anchors);
        xin_anchors += on_anchors;
        xin_signals += on_signals;
    }
    let (gate_anchors, gate_signals) = split_by_anchors(&layer.mlp.gate_proj, anchors);
    let (up_anchors, up_signals) = split_by_anchors(&layer.mlp.up_proj, anchors);
    let (channels, taps) = m.conv1d.dims2();
    let delayed = (0..channels)
        .filter(|&c| m.conv1d.row(c)[..taps - 1].iter().any(|w| *w != 0.0))
        .count();
    let reached = |a: &Array, n: usize| {
        a.row(n)
            .iter()
            .enumerate()
            .any(|(c, w)| *w != 0.0 && !anchors.contains(&c))
    };
    let (gate, up) = (&layer.mlp.gate_proj, &layer.mlp.up_proj);
    let constant = (0..gate.dims2().0)
        .filter(|&n| gate.row(n).iter().any(|w| *w != 0.0) && up.row(n).iter().any(|w| *w != 0.0))
        .filter(|&n| !reached(gate, n) && !reached(up, n))
        .count();
    Some(format!(
        "sparsity: weights on signal columns (read on a pass only where the signal is nonzero) / on the \
         anchors' columns (computed once): input projections {xin_signals} / {xin_anchors}, gate/up {} / {}; \
         conv channels with delayed taps: {delayed}; live neurons no signal reaches: {constant}",
        gate_signals + up_signals,
        gate_anchors + up_anchors
    ))
}

/// Layer l's heads' and MLP's steps, and the latest earlier unit whose writes each reads.
fn waits_line(waits: &[Option<usize>], steps: &[usize], l: usize) -> String {
    let unit = |u: usize| {
        let after = waits[u].map_or("nothing".to_string(), unit_name);
        format!("step {} (after {after})", steps[u])
    };
    format!("steps: heads {}, MLP {}", unit(2 * l), unit(2 * l + 1))
}

/// The report text.
pub fn report(chip: &Chip) -> String {
    let c = &chip.circuit;
    let base = &chip.base;
    let layout = &chip.layout;
    let mut out = String::new();
    let neurons = c.neuron_count();
    let heads: usize = c.memories.iter().map(|m| m.key_heads).sum();
    let _ = writeln!(out, "inband chip pack: {}", c.name);
    let _ = writeln!(
        out,
        "base: hidden_size {}, intermediate_size {}, GDN {} key heads × {} value heads (dk {}, dv {})",
        base.hidden_size,
        base.intermediate_size,
        base.linear_num_key_heads,
        base.linear_num_value_heads,
        base.linear_key_head_dim,
        base.linear_value_head_dim
    );
    let _ = writeln!(
        out,
        "chip layers: {} (linear_attention, placed before the base model's layers)",
        chip.layers.len()
    );
    let _ = writeln!(
        out,
        "residual: {} base + {} chip dims = {} ({} anchors, {} signals, {} padding)",
        layout.hidden,
        layout.chip_dims,
        layout.width(),
        layout.anchors.len(),
        c.signals.len(),
        layout.chip_dims - layout.anchors.len() - c.signals.len()
    );
    let _ = writeln!(
        out,
        "nonzero weights: {}; MLP neurons used: {} of {}; GDN key heads used: {} of {}",
        chip.nonzero_weights(),
        neurons,
        chip.layers.len() * base.intermediate_size,
        heads,
        chip.layers.len() * base.linear_num_key_heads
    );
    let _ = writeln!(out, "chip tokens: {}", c.tokens.vocab_size());
    for (k, kind) in c.tokens.kinds.iter().enumerate() {
        let fields: Vec<String> = kind
            .fields
            .iter()
            .map(|f| format!("{}[{}]", c.tokens.fields[*f].name, c.tokens.fields[*f].size))
            .collect();
        let _ = writeln!(
            out,
            "  kind {}: {} tokens = {}",
            kind.name,
            c.tokens.kind_size(k),
            fields.join(" × ")
        );
    }
    let _ = writeln!(
        out,
        "numerics: residual mean square pinned to 4^{} by the anchors; nominal x reaches projections as x·2^-{}",
        crate::layout::NORM_EXPONENT,
        crate::layout::NORM_EXPONENT
    );

    let anchors = layout.hidden..layout.hidden + layout.anchors.len();
    let units: Vec<_> = chip
        .layers
        .iter()
        .filter_map(|l| layer_units(l, &anchors))
        .flatten()
        .collect();
    let (waits, steps) = (waits_for(&units), steps(&units));
    // (Every chip layer is linear attention; a layer that were not would have no units.)
    let every_layer = units.len() == 2 * chip.layers.len();
    if every_layer {
        let _ = writeln!(
            out,
            "units: {} (each layer's heads and MLP) in {} steps, each unit a step after every unit whose writes \
             it reads",
            units.len(),
            steps.iter().max().unwrap_or(&0)
        );
    }
    for l in 0..chip.layers.len() {
        let _ = writeln!(out, "\n== layer {l}");
        if let Some(line) = sparsity(&chip.layers[l], &anchors) {
            let _ = writeln!(out, "{line}");
        }
        if every_layer {
            let _ = writeln!(out, "{}", waits_line(&waits, &steps, l));
        }
        let _ = writeln!(out, "mixer (Gated DeltaNet):");
        let mut used = 0;
        let mut memories: Vec<usize> = (0..c.memories.len())
            .filter(|m| chip.schedule.memory_place[*m].0 == l)
            .collect();
        memories.sort_by_key(|m| chip.schedule.memory_place[*m].1);
        for m in memories {
            let mem = &c.memories[m];
            let first = chip.schedule.memory_place[m].1;
            used += mem.key_heads;
            let heads = if mem.key_heads == 1 {
                format!("key head {first}")
            } else {
                format!("key heads {first}..{}", first + mem.key_heads - 1)
            };
            let code = match mem.code {
                inband_circuits::circuit::RowCode::OneHot { nonzeros } => {
                    format!("one-hot, {nonzeros} entries on per value head")
                }
                inband_circuits::circuit::RowCode::Anchored { anchor, rows_per_read } => {
                    format!("integer levels with anchor {anchor}, reads sum {rows_per_read} row(s)")
                }
            };
            let _ = writeln!(
                out,
                "  {heads}: memory {:?}, {} rows; a row is {} ({code})",
                mem.name,
                mem.key_heads * c.target.rows_per_head,
                mem.description,
            );
            for w in c.writes.iter().filter(|w| w.memory == m) {
                let _ = writeln!(out, "    write when {}", describe_expr(c, &w.enable, 4));
                let _ = writeln!(
                    out,
                    "      at {}; {} entries",
                    describe_address(c, &w.address),
                    w.entries.len()
                );
            }
            for r in c.reads.iter().filter(|r| r.memory == m) {
                let names: Vec<String> = r.outputs.iter().map(|(s, _)| c.info(*s).name.clone()).collect();
                let shown = if names.len() > 6 {
                    format!(
                        "{} … {} ({} signals)",
                        names[..3].join(", "),
                        names[names.len() - 1],
                        names.len()
                    )
                } else {
                    names.join(", ")
                };
                let _ = writeln!(out, "    read at {} -> {}", describe_address(c, &r.address), shown);
            }
        }
        let idle = base.linear_num_key_heads - used;
        if idle > 0 {
            let _ = writeln!(out, "  {idle} key heads idle (beta 0, query 0)");
        }
        let blocks: Vec<usize> = (0..c.blocks.len())
            .filter(|b| chip.schedule.block_layer[*b] == l)
            .collect();
        let count: usize = blocks.iter().map(|b| c.blocks[*b].neurons.len()).sum();
        let awake = |b: usize| c.blocks[b].neurons.iter().filter(|n| n.awake_at_rest()).count();
        let awake_here: usize = blocks.iter().map(|b| awake(*b)).sum();
        let _ = writeln!(
            out,
            "MLP: {count} of {} neurons; awake at rest: {awake_here} (a neuron that adds something with no \
             signal reaching it writes on every pass, and the GPU then computes every neuron of its layer)",
            base.intermediate_size
        );
        let mut first = 0;
        for b in blocks {
            let block = &c.blocks[b];
            let outputs: Vec<String> = block.outputs.iter().map(|s| c.info(*s).name.clone()).collect();
            let shown = if outputs.len() > 4 {
                format!("{} … ({} signals)", outputs[..2].join(", "), outputs.len())
            } else if outputs.is_empty() {
                "token scores".to_string()
            } else {
                outputs.join(", ")
            };
            let awake = match awake(b) {
                0 => String::new(),
                n => format!(" ({n} awake at rest)"),
            };
            let _ = writeln!(
                out,
                "  neurons {}..{}: {} -> {}{awake}",
                first,
                first + block.neurons.len().max(1) - 1,
                block.name,
                shown
            );
            first += block.neurons.len();
        }
    }

    let _ = writeln!(out, "\n== residual dimensions (chip dim: residual index: name)");
    for (d, name) in layout.names.iter().enumerate() {
        let _ = writeln!(out, "  {d:5}: {:6}: {name}", layout.hidden + d);
    }
    out
}

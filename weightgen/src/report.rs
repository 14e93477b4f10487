//! The allocation report: every residual dimension, key head and MLP neuron of a
//! compiled chip, named, layer by layer. The main debugging tool.

use std::fmt::Write as _;

use inband_circuits::{Address, Circuit, Expr};

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

    for l in 0..chip.layers.len() {
        let _ = writeln!(out, "\n== layer {l}");
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
        let _ = writeln!(out, "MLP: {count} of {} neurons", base.intermediate_size);
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
            let _ = writeln!(
                out,
                "  neurons {}..{}: {} -> {}",
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

//! inspect: what a checkpoint is.

use std::path::Path;

use inband_qwen35::config::LayerType;
use inband_qwen35::presets::Shape;
use inband_qwen35::TextConfig;

use crate::{read_json, SurgeryError};
use inband_chip::spliced::InbandSection;
use inband_chip::tensor_files::TensorFiles;

fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// The preset a config matches, if any.
fn matching_shape(c: &TextConfig) -> Option<Shape> {
    Shape::ALL.into_iter().find(|s| {
        let p = s.config();
        p.hidden_size == c.hidden_size
            && p.num_hidden_layers == c.num_hidden_layers
            && p.intermediate_size == c.intermediate_size
            && p.linear_num_value_heads == c.linear_num_value_heads
    })
}

fn layer_mix(types: &[LayerType]) -> String {
    let linear = types.iter().filter(|t| **t == LayerType::LinearAttention).count();
    format!(
        "{} layers: {} linear_attention + {} full_attention",
        types.len(),
        linear,
        types.len() - linear
    )
}

/// A human-readable description of the checkpoint in `dir`.
pub fn inspect(dir: &Path) -> Result<String, SurgeryError> {
    let raw = read_json(&dir.join("config.json"))?;
    let (arch, config) = TextConfig::from_checkpoint_value(&raw)?;
    let files = TensorFiles::open(dir)?;
    let mut out = format!("checkpoint: {}\n", dir.display());
    out += &format!(
        "architecture: {} (text tensors under {})\n",
        arch.name(),
        arch.text_prefix()
    );
    let section = InbandSection::from_config(&raw)
        .transpose()
        .map_err(SurgeryError::Invalid)?;
    match &section {
        Some(s) => {
            let mut base = config.clone();
            base.hidden_size = s.base.hidden_size;
            base.num_hidden_layers = s.base.num_hidden_layers;
            base.intermediate_size = config.intermediate_size;
            let shape = matching_shape(&base).map_or("custom".to_string(), |s| s.name().to_string());
            out += &format!(
                "base: {shape} shape, hidden_size {}, {}\n",
                s.base.hidden_size,
                layer_mix(&s.base.layer_types)
            );
            out += &format!(
                "chip: {:?}, {} chip layers in front ({} layers in all), residual {} + {} chip dims = {}\n",
                s.chip,
                s.chip_layers,
                config.num_hidden_layers,
                s.base.hidden_size,
                s.chip_dims,
                s.width()
            );
            out += &format!(
                "vocabulary: {} base + {} chip tokens (ids {}..{}) = {}\n",
                s.base.vocab_size,
                s.chip_vocab,
                s.chip_token_offset,
                s.chip_token_offset + s.chip_vocab,
                config.vocab_size
            );
        }
        None => {
            let shape = matching_shape(&config).map_or("custom".to_string(), |s| s.name().to_string());
            out += &format!(
                "base: {shape} shape, hidden_size {}, {}\n",
                config.hidden_size,
                layer_mix(&config.layer_types)
            );
            out += "chip: none\n";
            out += &format!("vocabulary: {}\n", config.vocab_size);
        }
    }
    let bytes: u64 = files.tensors.values().map(|e| e.end - e.start).sum();
    let params: usize = files.tensors.values().map(|e| e.shape.iter().product::<usize>()).sum();
    let mut dtypes: std::collections::BTreeMap<String, usize> = Default::default();
    for e in files.tensors.values() {
        *dtypes.entry(format!("{:?}", e.dtype)).or_default() += 1;
    }
    let dtypes: Vec<String> = dtypes.iter().map(|(d, n)| format!("{n} {d}")).collect();
    out += &format!(
        "weights: {} tensors ({}), {:.1}M parameters, {} in {} file(s)\n",
        files.tensors.len(),
        dtypes.join(", "),
        params as f64 / 1e6,
        gib(bytes),
        files.files.len()
    );
    let visual = files.tensors.keys().filter(|n| n.starts_with("model.visual.")).count();
    let mtp = files.tensors.keys().filter(|n| n.starts_with("mtp.")).count();
    out += &format!("vision tower: {visual} tensors; MTP head: {mtp} tensors\n");
    Ok(out)
}

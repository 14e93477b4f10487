//! Opening a spliced checkpoint for VM mode: its chip layers and chip-token rows.
//!
//! The runtime also knows how to build the RV32IM chip (the layout, token map and state
//! map it needs to drive the chip come with it). Opening a checkpoint rebuilds the chip
//! for the checkpoint's base config and requires the checkpoint's chip layers and
//! chip-token embedding rows to equal it bit for bit; the layers that then run are the
//! ones read from the checkpoint.

use std::path::Path;

use anyhow::{bail, Context};
use inband_model_surgery::geometry::InbandSection;
use inband_qwen35::checkpoint::Checkpoint;
use inband_qwen35::weights::DecoderLayer;
use inband_qwen35::{LayerType, TextConfig};
use inband_weightgen::rv32im::host::Rv32Chip;

/// A spliced checkpoint opened for VM mode.
pub struct SplicedModel {
    pub checkpoint: Checkpoint,
    pub section: InbandSection,
    /// The base model's text config (before splicing).
    pub base: TextConfig,
}

impl SplicedModel {
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let checkpoint = Checkpoint::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        let section = match InbandSection::from_config(&checkpoint.raw_config) {
            Some(s) => s.map_err(anyhow::Error::msg)?,
            None => bail!(
                "{} holds no chip (its config.json has no \"inband\" section): splice one in with `weight-surgery splice`",
                dir.display()
            ),
        };
        let mut base = checkpoint.config.clone();
        base.hidden_size = section.base.hidden_size;
        base.num_hidden_layers = section.base.num_hidden_layers;
        base.layer_types = section.base.layer_types.clone();
        base.vocab_size = section.base.vocab_size;
        Ok(Self {
            checkpoint,
            section,
            base,
        })
    }

    /// The RV32IM chip with the checkpoint's own chip layers.
    pub fn chip(&self) -> anyhow::Result<Rv32Chip> {
        if self.section.chip != "rv32im" {
            bail!(
                "the chip in this checkpoint is {:?}; VM mode runs the \"rv32im\" chip",
                self.section.chip
            );
        }
        let mut chip = Rv32Chip::build(&self.base)?;
        let config = chip.chip.layer_config();
        if self.section.chip_layers != chip.chip.layers.len() || self.section.chip_dims != chip.chip.layout.chip_dims {
            bail!(
                "the checkpoint's chip ({} layers, {} dims) is not the RV32IM chip this inband builds ({} layers, {} dims): \
                 splice a pack made by this version of weightgen",
                self.section.chip_layers,
                self.section.chip_dims,
                chip.chip.layers.len(),
                chip.chip.layout.chip_dims
            );
        }
        let prefix = self.checkpoint.text_prefix();
        let mut full = self.checkpoint.config.clone();
        full.hidden_size = config.hidden_size;
        for l in 0..chip.chip.layers.len() {
            let loaded = DecoderLayer::load(
                &self.checkpoint,
                &format!("{prefix}layers.{l}."),
                LayerType::LinearAttention,
                &full,
            )?;
            if loaded != chip.chip.layers[l] {
                bail!("chip layer {l} of the checkpoint differs from the RV32IM chip this inband builds");
            }
            chip.chip.layers[l] = loaded;
        }
        self.check_token_rows(&chip)?;
        Ok(chip)
    }

    /// Every chip token's embedding row must be the chip's (its chip dimensions; base
    /// dimensions zero).
    fn check_token_rows(&self, chip: &Rv32Chip) -> anyhow::Result<()> {
        let name = format!("{}embed_tokens.weight", self.checkpoint.text_prefix());
        let (dtype, shape, bytes) = self.checkpoint.raw(&name)?;
        let spec = &chip.chip.circuit.tokens;
        let offset = self.section.chip_token_offset;
        let (rows, width) = (shape[0], shape.get(1).copied().unwrap_or(0));
        if rows < offset + spec.vocab_size() || width != chip.chip.layout.width() {
            bail!("the checkpoint's embedding ({rows} × {width}) cannot hold the chip's tokens");
        }
        let row_bytes = bytes.len() / rows;
        let hidden = chip.chip.layout.hidden;
        for id in 0..spec.vocab_size() {
            let token = spec.decode(id).expect("in range");
            let at = (offset + id) * row_bytes;
            let row =
                inband_qwen35::checkpoint::to_f32(dtype, &bytes[at..at + row_bytes]).map_err(anyhow::Error::msg)?;
            if row[..hidden].iter().any(|v| *v != 0.0) || row[hidden..] != chip.chip.embedding(&token)[..] {
                bail!("the checkpoint's embedding row for chip token {id} ({token:?}) is not the chip's");
            }
        }
        Ok(())
    }
}

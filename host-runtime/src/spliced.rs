//! Opening a spliced checkpoint for VM mode: its `inband` section and its chip.
//!
//! The chip is read, not rebuilt: the manifest in config.json says how tokens, the
//! residual and the state are laid out, and the chip layers are read straight from the
//! checkpoint's tensors into the engines' sparse form. Whether those layers are what
//! this version's compiler makes is `weight-surgery verify`'s question.

use std::path::Path;

use anyhow::{bail, Context};
use inband_chip::spliced::InbandSection;
use inband_chip::ChipModel;
use inband_qwen35::checkpoint::Checkpoint;
use inband_qwen35::TextConfig;

/// A spliced checkpoint opened for VM mode.
pub struct SplicedModel {
    pub checkpoint: Checkpoint,
    pub section: InbandSection,
    /// The base model's text config (before splicing).
    pub base: TextConfig,
}

impl SplicedModel {
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        // Every tool validates safetensors with the one reader (offsets, overlaps, stray bytes).
        inband_chip::tensor_files::TensorFiles::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        let checkpoint = Checkpoint::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        let section = match InbandSection::from_config(&checkpoint.raw_config) {
            Some(s) => s.map_err(anyhow::Error::msg)?,
            None => bail!(
                "{} holds no chip (its config.json has no \"inband\" section): splice one in with `weight-surgery splice`",
                dir.display()
            ),
        };
        let base = section.base_config(&checkpoint.config);
        Ok(Self {
            checkpoint,
            section,
            base,
        })
    }

    /// The checkpoint's chip, its layers read from the checkpoint.
    pub fn chip(&self) -> anyhow::Result<ChipModel> {
        if self.section.chip != "rv32im" {
            bail!(
                "the chip in this checkpoint is {:?}; VM mode runs the \"rv32im\" chip",
                self.section.chip
            );
        }
        ChipModel::from_checkpoint(&self.checkpoint.dir, &self.section, &self.base)
    }
}

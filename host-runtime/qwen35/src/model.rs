//! A whole Qwen3.5 text model on the dense path: embedding, decoder layers (or a range
//! of them), final norm and lm_head.

use candle_core::{Device, Tensor};

use crate::checkpoint::Checkpoint;
use crate::config::TextConfig;
use crate::dense::{tensor, DenseHead, DenseLayer, DenseState};
use crate::weights::{Array, DecoderLayer, TensorSource};

/// A text model's tensors outside its decoder layers.
pub struct OuterTensors {
    /// [vocab, H].
    pub embed: Array,
    /// [vocab, H]: the embedding again when the checkpoint ties them.
    pub lm_head: Array,
    /// [H], zero-centred.
    pub final_norm: Array,
}

/// Reads the text model `config` describes from `source` (`prefix`: the text model's
/// tensor-name prefix, e.g. `model.language_model.`): each decoder layer is handed to
/// `layer` as soon as it is read (so a device copy never waits for the whole model in
/// host memory); the tensors around the layers are returned.
pub fn load_text_model(
    config: &TextConfig,
    prefix: &str,
    source: &dyn TensorSource,
    mut layer: impl FnMut(usize, DecoderLayer) -> anyhow::Result<()>,
) -> anyhow::Result<OuterTensors> {
    let p = prefix;
    for (i, kind) in config.layer_types.iter().enumerate() {
        layer(
            i,
            DecoderLayer::load(source, &format!("{p}layers.{i}."), *kind, config)?,
        )?;
    }
    let embed = source.tensor(&format!("{p}embed_tokens.weight"))?;
    let lm_head = if config.tie_word_embeddings {
        embed.clone()
    } else {
        source.tensor("lm_head.weight")?
    };
    let final_norm = source.tensor(&format!("{p}norm.weight"))?;
    Ok(OuterTensors {
        embed,
        lm_head,
        final_norm,
    })
}

/// The dense model.
pub struct DenseModel {
    pub config: TextConfig,
    embed: Tensor,
    layers: Vec<DenseLayer>,
    head: DenseHead,
    device: Device,
}

/// Per-layer carried state plus the position of the next token.
pub struct ModelState {
    pub layers: Vec<DenseState>,
    pub position: usize,
}

impl DenseModel {
    /// Loads every layer of a checkpoint.
    pub fn from_checkpoint(ck: &Checkpoint, device: &Device) -> anyhow::Result<Self> {
        Self::from_source(&ck.config, ck.text_prefix(), ck, device)
    }

    /// Loads the model `config` describes from any tensor source (`prefix`: the text
    /// model's tensor-name prefix, e.g. `model.language_model.`).
    pub fn from_source(
        config: &TextConfig,
        prefix: &str,
        source: &dyn TensorSource,
        device: &Device,
    ) -> anyhow::Result<Self> {
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        let tensors = load_text_model(config, prefix, source, |_, layer| {
            layers.push(DenseLayer::new(&layer, config, device)?);
            Ok(())
        })?;
        Ok(Self {
            config: config.clone(),
            embed: tensor(&tensors.embed, device)?,
            layers,
            head: DenseHead::new(&tensors.final_norm, &tensors.lm_head, config, device)?,
            device: device.clone(),
        })
    }

    /// Makes every token's results independent of how tokens are batched (see
    /// `dense::linear`): a prefill then equals feeding the tokens one at a time, bit for bit.
    pub fn row_invariant(mut self) -> Self {
        for layer in &mut self.layers {
            layer.row_invariant = true;
        }
        self.head.row_invariant = true;
        self
    }

    pub fn new_state(&self) -> anyhow::Result<ModelState> {
        let layers = self
            .layers
            .iter()
            .map(|l| l.new_state(1, &self.device))
            .collect::<Result<_, _>>()?;
        Ok(ModelState { layers, position: 0 })
    }

    /// Embeddings [1, T, H] of token ids.
    pub fn embed(&self, tokens: &[u32]) -> anyhow::Result<Tensor> {
        let ids = Tensor::from_slice(tokens, tokens.len(), &self.device)?;
        Ok(self.embed.index_select(&ids, 0)?.unsqueeze(0)?)
    }

    /// Runs `tokens` through layers `range` (all by default), returning hidden states [1, T, H].
    pub fn hidden(
        &self,
        tokens: &[u32],
        state: &mut ModelState,
        range: std::ops::Range<usize>,
    ) -> anyhow::Result<Tensor> {
        let mut h = self.embed(tokens)?;
        for i in range {
            h = self.layers[i].forward(&h, &mut state.layers[i], state.position)?;
        }
        state.position += tokens.len();
        Ok(h)
    }

    /// Logits [T, vocab] for `tokens`, continuing from `state`.
    pub fn logits(&self, tokens: &[u32], state: &mut ModelState) -> anyhow::Result<Tensor> {
        self.logits_from(tokens, state, 0)
    }

    /// The last token's logits [1, vocab]: the head runs on one row only (the vocabulary
    /// projection is a third of a 0.8b token's work). With row-invariant projections the
    /// row equals the last row of [`Self::logits`] bit for bit.
    pub fn last_logits(&self, tokens: &[u32], state: &mut ModelState) -> anyhow::Result<Tensor> {
        anyhow::ensure!(!tokens.is_empty(), "no tokens to run");
        self.logits_from(tokens, state, tokens.len() - 1)
    }

    /// Runs every token; the head only on positions `first..`.
    fn logits_from(&self, tokens: &[u32], state: &mut ModelState, first: usize) -> anyhow::Result<Tensor> {
        let h = self.hidden(tokens, state, 0..self.layers.len())?;
        let h = if first == 0 {
            h
        } else {
            h.narrow(1, first, tokens.len() - first)?
        };
        Ok(self.head.logits(&h)?.squeeze(0)?)
    }
}

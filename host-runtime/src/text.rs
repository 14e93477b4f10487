//! Text mode: Qwen's own layers with the checkpoint's tokenizer, greedy or sampled.
//!
//! A spliced checkpoint is read through its base view: the chip layers are skipped and
//! every base tensor is cut back to the base width (what `weight-surgery strip` writes),
//! so text mode computes exactly what the base checkpoint computes, bit for bit.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use candle_core::Device;
use inband_chip::base_view::BaseView as SplicedBase;
use inband_qwen35::checkpoint::{to_f32, Checkpoint};
use inband_qwen35::dense::DenseState;
use inband_qwen35::model::{DenseModel, ModelState};
use inband_qwen35::weights::{Array, TensorSource, WeightError};
use rand::{Rng, SeedableRng};
use tokenizers::Tokenizer;

use crate::inband::{Execution, Executor, Region};

/// The base model's tensors as stored inside a spliced checkpoint.
struct BaseView(SplicedBase);

impl TensorSource for BaseView {
    fn tensor(&self, name: &str) -> Result<Array, WeightError> {
        let (_, dtype, shape) = self
            .0
            .base_tensors
            .get(name)
            .ok_or_else(|| WeightError::Missing(name.to_string()))?;
        let mut bytes = Vec::new();
        let read = |message: String| WeightError::Read {
            name: name.into(),
            message,
        };
        self.0.produce(name, &mut bytes).map_err(|e| read(e.to_string()))?;
        let data = to_f32(*dtype, &bytes).map_err(read)?;
        Ok(Array {
            shape: shape.clone(),
            data,
        })
    }
}

/// The lines a chat reads, without their line ends. A line that is not UTF-8 is taken
/// as it would print (invalid bytes become U+FFFD), not a reason to end the chat.
pub fn chat_lines(mut input: impl std::io::BufRead) -> impl Iterator<Item = std::io::Result<String>> {
    let mut bytes = Vec::new();
    std::iter::from_fn(move || {
        bytes.clear();
        match input.read_until(b'\n', &mut bytes) {
            Ok(0) => None,
            Ok(_) => Some(Ok(String::from_utf8_lossy(&bytes)
                .trim_end_matches(['\n', '\r'])
                .to_string())),
            Err(e) => Some(Err(e)),
        }
    })
}

/// Where Qwen's own layers run.
pub enum TextEngine {
    /// The dense path on the CPU (candle tensors, row-invariant projections).
    Cpu(Box<DenseModel>),
    /// The GPU text kernels.
    #[cfg(feature = "cuda")]
    Cuda(Box<crate::gpu::text::GpuTextModel>),
}

/// Qwen's caches and recurrent states for one sequence, where the engine keeps them.
pub enum TextState {
    Cpu(ModelState),
    #[cfg(feature = "cuda")]
    Cuda(crate::gpu::text::GpuTextState),
}

impl TextState {
    /// The position of the next token.
    pub fn position(&self) -> usize {
        match self {
            Self::Cpu(s) => s.position,
            #[cfg(feature = "cuda")]
            Self::Cuda(s) => s.position,
        }
    }
}

impl TextEngine {
    fn new_state(&self) -> anyhow::Result<TextState> {
        Ok(match self {
            Self::Cpu(m) => TextState::Cpu(m.new_state()?),
            #[cfg(feature = "cuda")]
            Self::Cuda(m) => TextState::Cuda(m.new_state()?),
        })
    }

    /// Runs `tokens` after `state`; the logits of every position, or of the last only.
    fn logits(&self, tokens: &[u32], state: &mut TextState, every_row: bool) -> anyhow::Result<Vec<Vec<f32>>> {
        match (self, state) {
            (Self::Cpu(m), TextState::Cpu(s)) => {
                let logits = if every_row {
                    m.logits(tokens, s)?
                } else {
                    m.last_logits(tokens, s)?
                };
                Ok(logits.to_vec2::<f32>()?)
            }
            #[cfg(feature = "cuda")]
            (Self::Cuda(m), TextState::Cuda(s)) => {
                let first = if every_row { 0 } else { tokens.len().saturating_sub(1) };
                m.logits_from(tokens, s, first)
            }
            #[cfg(feature = "cuda")]
            _ => bail!("a text state used with another engine"),
        }
    }

    /// Every number in the carried state (conv windows, GDN memories, attention keys and
    /// values), to compare two states bit for bit.
    pub fn state_numbers(&self, state: &TextState) -> anyhow::Result<Vec<Vec<f32>>> {
        let flat = |t: &candle_core::Tensor| -> anyhow::Result<Vec<f32>> { Ok(t.flatten_all()?.to_vec1()?) };
        match (self, state) {
            (Self::Cpu(_), TextState::Cpu(s)) => {
                let mut out = Vec::new();
                for layer in &s.layers {
                    match layer {
                        DenseState::Gdn { conv, recurrent } => {
                            out.push(flat(conv)?);
                            out.push(flat(recurrent)?);
                        }
                        DenseState::Attention { keys, values } => {
                            for t in [keys, values] {
                                out.push(t.as_ref().map(flat).transpose()?.unwrap_or_default());
                            }
                        }
                    }
                }
                Ok(out)
            }
            #[cfg(feature = "cuda")]
            (Self::Cuda(m), TextState::Cuda(s)) => s.numbers(m),
            #[cfg(feature = "cuda")]
            _ => bail!("a text state used with another engine"),
        }
    }
}

/// A checkpoint opened for text generation.
pub struct TextModel {
    pub model: TextEngine,
    pub tokenizer: Tokenizer,
    /// Token ids that end a generation (generation_config.json's eos_token_id).
    pub eos: Vec<u32>,
    /// Whether the checkpoint holds a chip (its layers are skipped in text mode).
    pub spliced: bool,
    /// Keep every position's logits in [`Generation::rows`] (to compare them); otherwise
    /// the vocabulary projection runs only where a choice reads it.
    pub all_logits: bool,
}

/// How the next token is picked.
#[derive(Debug, Clone, Copy)]
pub enum Sampling {
    Greedy,
    /// Softmax sampling at this temperature, from a seeded generator.
    Temperature(f32, u64),
}

impl TextModel {
    /// Opens the checkpoint in `dir` with Qwen's layers on `device`.
    pub fn open(dir: &Path, device: crate::vm::Device) -> anyhow::Result<Self> {
        // Every tool validates safetensors with the one reader (offsets, overlaps, stray bytes).
        inband_chip::tensor_files::TensorFiles::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        let checkpoint = Checkpoint::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        let spliced = checkpoint.raw_config.get("inband").is_some();
        let base_view;
        let (config, prefix, source): (_, _, &dyn TensorSource) = if spliced {
            let opened = crate::spliced::SplicedModel::open(dir)?;
            base_view = BaseView(SplicedBase::open(dir)?);
            (opened.base, opened.section.text_prefix, &base_view)
        } else {
            (
                checkpoint.config.clone(),
                checkpoint.text_prefix().to_string(),
                &checkpoint,
            )
        };
        let model = match device {
            // Forced and injected tokens go through as prefills: exact only if batching
            // cannot change a token's numbers.
            crate::vm::Device::Cpu => {
                let dense = DenseModel::from_source(&config, &prefix, source, &Device::Cpu)?;
                TextEngine::Cpu(Box::new(dense.row_invariant()))
            }
            #[cfg(feature = "cuda")]
            crate::vm::Device::Cuda(ordinal, _) => {
                let gpu = crate::gpu::text::GpuTextModel::from_source(&config, &prefix, source, ordinal)?;
                TextEngine::Cuda(Box::new(gpu))
            }
            #[cfg(not(feature = "cuda"))]
            crate::vm::Device::Cuda(..) => bail!(
                "this inband was built without CUDA support: build it with `scripts/build-gpu.sh` (cargo feature `cuda`)"
            ),
        };
        let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.join("tokenizer.json").display()))?;
        let eos = eos_ids(dir);
        Ok(Self {
            model,
            tokenizer,
            eos,
            spliced,
            all_logits: false,
        })
    }

    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?
            .get_ids()
            .to_vec())
    }

    pub fn decode(&self, ids: &[u32]) -> anyhow::Result<String> {
        self.tokenizer
            .decode(ids, false)
            .map_err(|e| anyhow::anyhow!("tokenizer: {e}"))
    }

    /// Tokenises a forced continuation, cut after every code region so that each
    /// region ends on a token boundary (where its result is injected).
    pub fn encode_forced(&self, text: &str) -> anyhow::Result<Vec<u32>> {
        let mut ids = Vec::new();
        let mut rest = text;
        while let Some((_, end)) = crate::inband::closed_region(rest) {
            ids.extend(self.encode(&rest[..end])?);
            rest = &rest[end..];
        }
        ids.extend(self.encode(rest)?);
        Ok(ids)
    }

    /// Runs the `pending` tokens through the model in one call, appending their logits
    /// (every row's with [`Self::all_logits`], else the last one's) and the time taken.
    fn prefill(
        &self,
        pending: &mut Vec<u32>,
        state: &mut TextState,
        rows: &mut Vec<Vec<f32>>,
        seconds: &mut f64,
    ) -> anyhow::Result<()> {
        if !pending.is_empty() {
            let start = std::time::Instant::now();
            rows.extend(self.model.logits(pending, state, self.all_logits)?);
            pending.clear();
            *seconds += start.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Generates after `prompt`: first the `forced` tokens (as if the model had chosen
    /// them), then up to `max_tokens` chosen ones; streams the text to `out`. With an
    /// executor, every code region that closes in the generated text is run in the chip
    /// and its result injected as ordinary tokens before generation goes on.
    pub fn generate(
        &self,
        prompt: &[u32],
        forced: &[u32],
        max_tokens: usize,
        sampling: Sampling,
        executor: Option<&Executor>,
        out: &mut dyn Write,
    ) -> anyhow::Result<Generation> {
        if prompt.is_empty() {
            bail!("the prompt encodes to no tokens");
        }
        let mut state = self.model.new_state()?;
        let mut rng = match sampling {
            Sampling::Temperature(_, seed) => Some(rand::rngs::StdRng::seed_from_u64(seed)),
            Sampling::Greedy => None,
        };
        let mut queue: VecDeque<u32> = forced.iter().copied().collect();
        let mut ids = prompt.to_vec();
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut model_seconds = 0.0;
        // Tokens whose logits are not computed yet: forced and injected tokens go through
        // the model together, as a prefill, when the next choice needs their logits.
        let mut pending: Vec<u32> = prompt.to_vec();
        self.prefill(&mut pending, &mut state, &mut rows, &mut model_seconds)?;
        let mut executions = Vec::new();
        // Regions of the forced text that already ran (with an earlier one), in order.
        let mut prepared: Vec<(crate::inband::Region, crate::inband::Execution)> = Vec::new();
        let mut shown = 0;
        // Byte offset in the generated text where the next region may start.
        let mut region_from = 0;
        let mut injecting_until: Option<usize> = None;
        let mut chosen = 0;
        loop {
            let next = match queue.pop_front() {
                Some(t) => t,
                None if chosen < max_tokens => {
                    self.prefill(&mut pending, &mut state, &mut rows, &mut model_seconds)?;
                    chosen += 1;
                    let last = rows.last().expect("at least one row");
                    match (sampling, rng.as_mut()) {
                        (Sampling::Temperature(t, _), Some(rng)) if t > 0.0 => sample(last, t, rng),
                        _ => argmax(last),
                    }
                }
                None => break,
            };
            ids.push(next);
            let text = self.decode(&ids[prompt.len()..])?;
            if text.len() > shown && text.is_char_boundary(shown) {
                let _ = out.write_all(&text.as_bytes()[shown..]);
                let _ = out.flush();
                shown = text.len();
            }
            pending.push(next);
            match injecting_until {
                // The injected text itself is never scanned for regions.
                Some(n) if ids.len() < n => continue,
                Some(_) => {
                    region_from = text.len();
                    injecting_until = None;
                    if executor.is_some_and(|e| e.report) {
                        // The result through the model now (its logits are the same
                        // batched or not), to say what injecting it cost.
                        let (tokens, start) = (pending.len(), std::time::Instant::now());
                        self.prefill(&mut pending, &mut state, &mut rows, &mut model_seconds)?;
                        eprintln!(
                            "\ninject: {tokens} tokens (the result and the region's end) through the model in {:.1} ms",
                            start.elapsed().as_secs_f64() * 1e3
                        );
                    }
                }
                None => {}
            }
            if let Some(executor) = executor {
                if let Some((region, end)) = text.get(region_from..).and_then(crate::inband::closed_region) {
                    let execution = match prepared.iter().position(|(r, _)| *r == region) {
                        Some(at) => prepared.remove(at).1,
                        None => {
                            // The regions the forced text still holds run with this one,
                            // as one batch; each is injected when the text reaches it.
                            let mut regions = vec![region.clone()];
                            let ahead: Vec<u32> = ids[prompt.len()..].iter().chain(&queue).copied().collect();
                            regions.extend(later_regions(&self.decode(&ahead)?, region_from + end));
                            let mut executions = executor.execute_all(&regions).into_iter();
                            let first = executions.next().expect("one execution per region");
                            prepared.extend(regions.into_iter().skip(1).zip(executions));
                            first
                        }
                    };
                    let injected = self.encode(&execution.injected)?;
                    // Injected tokens go first, then whatever was still forced.
                    for t in injected.iter().rev() {
                        queue.push_front(*t);
                    }
                    injecting_until = Some(ids.len() + injected.len());
                    if injected.is_empty() {
                        region_from = text.len();
                    }
                    executions.push((region, execution));
                    continue;
                }
            }
            if queue.is_empty() && self.eos.contains(&next) {
                break;
            }
        }
        self.prefill(&mut pending, &mut state, &mut rows, &mut model_seconds)?;
        Ok(Generation {
            ids,
            rows,
            state,
            executions,
            model_seconds,
        })
    }
}

/// The regions that close in `text` after byte `from` (the forced text still ahead).
fn later_regions(text: &str, from: usize) -> Vec<crate::inband::Region> {
    let mut regions = Vec::new();
    let mut at = from;
    while let Some((region, end)) = text.get(at..).and_then(crate::inband::closed_region) {
        regions.push(region);
        at += end;
    }
    regions
}

/// What a generation produced.
pub struct Generation {
    /// Prompt and continuation.
    pub ids: Vec<u32>,
    /// The logits after each position ([`TextModel::all_logits`]), or after each model
    /// call's last position (the rows the choices read).
    pub rows: Vec<Vec<f32>>,
    /// Qwen's caches and recurrent states at the end.
    pub state: TextState,
    /// Each code region run, with its result.
    pub executions: Vec<(Region, Execution)>,
    /// Time spent in the model's forward passes (prompt, prefills, choices).
    pub model_seconds: f64,
}

/// The first maximum (the lowest id on ties, as torch's argmax).
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn sample(row: &[f32], temperature: f32, rng: &mut impl Rng) -> u32 {
    let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = row.iter().map(|v| (((v - max) / temperature) as f64).exp()).collect();
    let total: f64 = weights.iter().sum();
    let mut x = rng.random::<f64>() * total;
    for (i, w) in weights.iter().enumerate() {
        x -= w;
        if x <= 0.0 {
            return i as u32;
        }
    }
    argmax(row)
}

/// generation_config.json's eos_token_id (a number or a list); none when absent.
fn eos_ids(dir: &Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    match value.get("eos_token_id") {
        Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_is_not_utf8_does_not_end_the_chat() {
        let input: &[u8] = b"first\n\xff\xfe bad \xc3\n/force x\r\nlast";
        let lines: Vec<String> = chat_lines(input).map(|l| l.unwrap()).collect();
        assert_eq!(lines, ["first", "\u{fffd}\u{fffd} bad \u{fffd}", "/force x", "last"]);
    }
}

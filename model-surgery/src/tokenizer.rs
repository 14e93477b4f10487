//! tokenizer.json: a synthetic byte-level BPE for synthetic checkpoints (trained with
//! the tokenizers crate on a small built-in text), and the chip tokens appended to any
//! tokenizer by splice.

use std::path::Path;

use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper, TokenizerBuilder};

use crate::SurgeryError;

/// Text the synthetic tokenizer learns its merges from.
const CORPUS: &str = include_str!("corpus.txt");

/// BPE merges learned for synthetic tokenizers (plus the 256 byte tokens).
const MERGES: usize = 700;

fn tokenizer_error(e: impl std::fmt::Display) -> SurgeryError {
    SurgeryError::Invalid(format!("tokenizer: {e}"))
}

/// Trains the synthetic tokenizer and writes tokenizer.json and tokenizer_config.json,
/// with Qwen's special tokens at the ids config.json uses.
pub fn write_synthetic(dir: &Path, vocab_size: usize) -> Result<(), SurgeryError> {
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(256 + MERGES)
        .min_frequency(2)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tokenizer =
        TokenizerBuilder::<BPE, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, DecoderWrapper>::new()
            .with_model(BPE::default())
            .with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false).into()))
            .with_decoder(Some(ByteLevel::default().into()))
            .build()
            .map_err(tokenizer_error)?;
    let lines: Vec<String> = CORPUS.lines().map(str::to_string).collect();
    tokenizer
        .train(&mut trainer, lines.into_iter())
        .map_err(tokenizer_error)?;
    let text = tokenizer.to_string(true).map_err(tokenizer_error)?;
    let mut value: serde_json::Value = serde_json::from_str(&text).map_err(tokenizer_error)?;
    // Added tokens get consecutive ids after the model's vocabulary, so the vocabulary
    // is filled up to the first special token, and every id from there to the end of
    // the embedding is a special or reserved token (as in Qwen's own tokenizers).
    let specials = crate::synth::special_tokens(vocab_size);
    let first_special = specials[0].1;
    let vocab = value["model"]["vocab"]
        .as_object_mut()
        .ok_or_else(|| tokenizer_error("BPE without vocab"))?;
    for id in vocab.len()..first_special {
        vocab.insert(format!("<|filler_{id}|>"), serde_json::json!(id));
    }
    let added: Vec<serde_json::Value> = (first_special..vocab_size)
        .map(|id| match specials.iter().find(|(_, i)| *i == id) {
            Some((content, _)) => added_token(id, content),
            None => added_token(id, &format!("<|reserved_{}|>", id - first_special)),
        })
        .collect();
    value["added_tokens"] = serde_json::Value::Array(added);
    std::fs::write(
        dir.join("tokenizer.json"),
        serde_json::to_string(&value).map_err(tokenizer_error)?,
    )
    .map_err(|source| SurgeryError::Io {
        path: dir.join("tokenizer.json"),
        source,
    })?;
    let config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 262144,
        "clean_up_tokenization_spaces": false
    });
    crate::synth::write_json(&dir.join("tokenizer_config.json"), &config)
}

fn added_token(id: usize, content: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
        "normalized": false, "special": true
    })
}

/// Appends `names` as special added tokens with ids `first_id..` to tokenizer.json
/// text. Added tokens take consecutive ids after everything the tokenizer already has,
/// so any gap up to `first_id` (embedding rows the tokenizer never produces) is filled
/// with reserved tokens first.
pub fn with_chip_tokens(text: &str, first_id: usize, names: &[String]) -> Result<String, SurgeryError> {
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(tokenizer_error)?;
    let model_size = value["model"]["vocab"].as_object().map_or(0, |v| v.len());
    let added = value
        .get_mut("added_tokens")
        .and_then(|a| a.as_array_mut())
        .ok_or_else(|| tokenizer_error("tokenizer.json has no added_tokens list"))?;
    let next = added
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .map(|i| i as usize + 1)
        .max()
        .unwrap_or(0)
        .max(model_size);
    if next > first_id {
        return Err(tokenizer_error(format!(
            "the tokenizer has {next} tokens but the embedding only {first_id} rows"
        )));
    }
    for id in next..first_id {
        added.push(added_token(id, &format!("<|inband_unused_{id}|>")));
    }
    for (i, name) in names.iter().enumerate() {
        added.push(added_token(first_id + i, name));
    }
    serde_json::to_string(&value).map_err(tokenizer_error)
}

/// Checks that a tokenizer.json loads.
pub fn check_loads(path: &Path) -> Result<usize, SurgeryError> {
    let t = tokenizers::Tokenizer::from_file(path).map_err(tokenizer_error)?;
    Ok(t.get_vocab_size(true))
}

/// The name of a chip token in the tokenizer: `<|inband:KIND:v0.v1…|>`.
pub fn chip_token_name(kind: &str, values: &[usize]) -> String {
    let v: Vec<String> = values.iter().map(|x| x.to_string()).collect();
    format!("<|inband:{kind}:{}|>", v.join("."))
}

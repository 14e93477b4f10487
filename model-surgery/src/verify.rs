//! verify: is a checkpoint intact? Its structure against its config, a chip's tensors
//! against the hashes recorded at splice time, the chip against what this `weightgen`
//! compiles (layers, token rows and manifest, bit for bit), and (given the base) every
//! original tensor recoverable bit for bit.

use std::io::Write;
use std::path::Path;

use inband_qwen35::weights::DecoderLayer;
use inband_qwen35::TextConfig;
use sha2::{Digest, Sha256};

use inband_chip::base_view::BaseView;
use inband_chip::pack::{Manifest, MANIFEST_FILE};
use inband_chip::spliced::{InbandSection, BASE_FILES, BASE_NORMS, CHIP_FILES};
use inband_chip::tensor_files::{TensorEntry, TensorFiles};
use inband_chip::ChipToken;
use inband_weightgen::emit::Chip;
use inband_weightgen::{compile, rv32im, target_of, toy};

use crate::{read_json, SurgeryError};

fn mismatch(m: impl Into<String>) -> SurgeryError {
    SurgeryError::Mismatch(m.into())
}

/// Checks every text tensor the config implies is present with its shape.
fn check_structure(files: &TensorFiles, config: &TextConfig, prefix: &str) -> Result<usize, SurgeryError> {
    let h = config.hidden_size;
    let mut expected = vec![
        (format!("{prefix}embed_tokens.weight"), vec![config.vocab_size, h]),
        (format!("{prefix}norm.weight"), vec![h]),
    ];
    if !config.tie_word_embeddings {
        expected.push(("lm_head.weight".into(), vec![config.vocab_size, h]));
    }
    for (l, kind) in config.layer_types.iter().enumerate() {
        for (name, shape) in DecoderLayer::expected_shapes(*kind, config) {
            expected.push((format!("{prefix}layers.{l}.{name}"), shape));
        }
    }
    for (name, shape) in &expected {
        let e = files
            .tensors
            .get(name)
            .ok_or_else(|| mismatch(format!("missing tensor {name}")))?;
        if &e.shape != shape {
            return Err(mismatch(format!(
                "{name} has shape {:?}, the config implies {shape:?}",
                e.shape
            )));
        }
    }
    Ok(expected.len())
}

/// Compares produced bytes with a base tensor's bytes as they arrive.
struct Comparing<'a> {
    base: &'a TensorFiles,
    entry: &'a TensorEntry,
    at: u64,
    buf: Vec<u8>,
    name: &'a str,
}

impl Write for Comparing<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let to = self.at + data.len() as u64;
        if to > self.entry.end - self.entry.start {
            return Err(std::io::Error::other(format!(
                "{}: more bytes than the base tensor",
                self.name
            )));
        }
        self.base
            .read(self.entry, self.at, to, &mut self.buf)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if self.buf != data {
            return Err(std::io::Error::other(format!(
                "{}: bytes differ from the base near offset {}",
                self.name, self.at
            )));
        }
        self.at = to;
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Verifies `dir`; returns what was checked, one line per check.
pub fn verify(
    dir: &Path,
    base: Option<&Path>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<String>, SurgeryError> {
    let mut lines = Vec::new();
    let raw = read_json(&dir.join("config.json"))?;
    let (arch, config) = TextConfig::from_checkpoint_value(&raw)?;
    let files = TensorFiles::open(dir)?;
    lines.push(format!(
        "{} shard(s) read, every header consistent with its file size",
        files.files.len()
    ));
    let n = check_structure(&files, &config, arch.text_prefix())?;
    lines.push(format!(
        "structure: all {n} text tensors present with the shapes config.json implies"
    ));

    let section = InbandSection::from_config(&raw)
        .transpose()
        .map_err(SurgeryError::Invalid)?;
    if let Some(section) = &section {
        for (name, expected) in &section.chip_tensors {
            let digest = format!("{:x}", Sha256::digest(files.bytes(name)?));
            if &digest != expected {
                return Err(mismatch(format!(
                    "chip tensor {name} does not match its recorded SHA-256"
                )));
            }
        }
        lines.push(format!(
            "chip {:?}: {} chip tensors match their SHA-256",
            section.chip,
            section.chip_tensors.len()
        ));
        let manifest_path = dir.join(CHIP_FILES).join(MANIFEST_FILE);
        let saved: Manifest = serde_json::from_value(read_json(&manifest_path)?)
            .map_err(|e| mismatch(format!("{}: {e}", manifest_path.display())))?;
        if saved != section.manifest {
            return Err(mismatch(
                "inband/chip/manifest.json differs from the manifest in config.json",
            ));
        }
        lines.push("chip manifest: the copy in inband/chip matches config.json".into());
        lines.push(check_chip_is_compiled(&files, section, &config, arch.text_prefix())?);
        if !dir.join(BASE_NORMS).is_file() {
            return Err(mismatch(format!(
                "{BASE_NORMS} is missing: the base cannot be recovered"
            )));
        }
    } else {
        lines.push("no chip in this checkpoint".into());
    }

    if let Some(base_dir) = base {
        let section = section.ok_or_else(|| mismatch("--base given but the checkpoint holds no chip"))?;
        let base_files = TensorFiles::open(base_dir)?;
        let unsplicer = BaseView::open(dir)?;
        let base_names: Vec<&String> = base_files.tensors.keys().collect();
        let recovered: Vec<&String> = unsplicer.base_tensors.keys().collect();
        if base_names != recovered {
            return Err(mismatch("the recovered tensor names differ from the base's"));
        }
        let total: u64 = base_files.tensors.values().map(|e| e.end - e.start).sum();
        let mut done = 0;
        for (name, entry) in &base_files.tensors {
            let (_, dtype, shape) = &unsplicer.base_tensors[name];
            if *dtype != entry.dtype || *shape != entry.shape {
                return Err(mismatch(format!(
                    "{name}: recovered {dtype:?} {shape:?}, base {:?} {:?}",
                    entry.dtype, entry.shape
                )));
            }
            let mut cmp = Comparing {
                base: &base_files,
                entry,
                at: 0,
                buf: Vec::new(),
                name,
            };
            unsplicer.produce(name, &mut cmp).map_err(|e| mismatch(e.to_string()))?;
            if cmp.at != entry.end - entry.start {
                return Err(mismatch(format!("{name}: fewer bytes than the base tensor")));
            }
            done += entry.end - entry.start;
            progress(done, total);
        }
        lines.push(format!(
            "base: all {} original tensors recovered bit for bit",
            base_files.tensors.len()
        ));
        for entry in std::fs::read_dir(dir.join(BASE_FILES)).map_err(|source| SurgeryError::Io {
            path: dir.join(BASE_FILES),
            source,
        })? {
            let entry = entry.map_err(|source| SurgeryError::Io {
                path: dir.join(BASE_FILES),
                source,
            })?;
            let theirs = std::fs::read(base_dir.join(entry.file_name())).map_err(|source| SurgeryError::Io {
                path: base_dir.join(entry.file_name()),
                source,
            })?;
            let ours = std::fs::read(entry.path()).map_err(|source| SurgeryError::Io {
                path: entry.path(),
                source,
            })?;
            if ours != theirs {
                return Err(mismatch(format!(
                    "{}: differs from the base's",
                    entry.file_name().to_string_lossy()
                )));
            }
        }
        lines.push(format!(
            "base files: saved copies of config, tokenizer and index match (chip {:?})",
            section.chip
        ));
    }
    Ok(lines)
}

/// Compiles the checkpoint's chip with this `weightgen` for the checkpoint's base config
/// and compares it with the checkpoint, bit for bit: the manifest, every chip-layer
/// tensor and every chip token's embedding row. The runtime trusts the manifest and
/// reads the layers as they are; this is where a chip is checked against its compiler.
fn check_chip_is_compiled(
    files: &TensorFiles,
    section: &InbandSection,
    spliced: &TextConfig,
    prefix: &str,
) -> Result<String, SurgeryError> {
    let base = section.base_config(spliced);
    let unbuilt = |e: String| {
        mismatch(format!(
            "this weightgen cannot compile the {:?} chip for this base: {e}",
            section.chip
        ))
    };
    let (chip, host_map): (Chip, _) = match section.chip.as_str() {
        "rv32im" => {
            let c = rv32im::Rv32Chip::build(&base).map_err(|e| unbuilt(e.to_string()))?;
            let map = c.host_map();
            (c.chip, Some(map))
        }
        "acc8" => (
            compile(&toy::circuit(target_of(&base)), &base).map_err(|e| unbuilt(e.to_string()))?,
            None,
        ),
        other => {
            return Err(mismatch(format!(
                "unknown chip {other:?}: this weightgen compiles rv32im and acc8"
            )))
        }
    };
    let what = format!("the {} chip this weightgen compiles", section.chip);
    let m = &section.manifest;
    let dtype = if m.dtype == "BF16" {
        safetensors::Dtype::BF16
    } else {
        safetensors::Dtype::F32
    };
    let expected = inband_weightgen::pack::manifest_of(&chip, host_map, dtype, m.files.clone());
    if expected != *m {
        return Err(mismatch(format!(
            "the checkpoint's chip manifest differs from {what}: {}",
            first_difference(m, &expected)
        )));
    }
    let mut compared = 0;
    for (l, layer) in chip.layers.iter().enumerate() {
        for (name, want) in layer.named_tensors() {
            let full = format!("{prefix}layers.{l}.{name}");
            let have = files.f32s(&full)?;
            if let Some(i) = (0..want.data.len().max(have.len()))
                .find(|&i| have.get(i).map(|v| v.to_bits()) != want.data.get(i).map(|v| v.to_bits()))
            {
                return Err(mismatch(format!(
                    "chip layer {l}'s {name} differs from {what} (first at element {i})"
                )));
            }
            compared += 1;
        }
    }
    let rows = check_token_rows(files, section, &chip, prefix, &what)?;
    Ok(format!(
        "chip: manifest, {compared} layer tensors and {rows} token embedding rows are bit for bit {what}"
    ))
}

/// Every chip token's embedding row must be the chip's: base dims zero, chip dims its
/// embedding. Read in bounded chunks (the chip's rows of a 9b embedding are GBs).
fn check_token_rows(
    files: &TensorFiles,
    section: &InbandSection,
    chip: &Chip,
    prefix: &str,
    what: &str,
) -> Result<usize, SurgeryError> {
    let spec = chip.spec();
    let entry = files.get(&format!("{prefix}embed_tokens.weight"))?;
    let width = spec.width();
    let (offset, vocab) = (section.chip_token_offset, spec.tokens.vocab_size());
    if entry.shape.len() != 2 || entry.shape[1] != width || entry.shape[0] < offset + vocab {
        return Err(mismatch(format!(
            "the embedding {:?} cannot hold the chip's {vocab} tokens of width {width}",
            entry.shape
        )));
    }
    let row_bytes = (entry.end - entry.start) / entry.shape[0] as u64;
    let batch = ((16 << 20) / row_bytes.max(1)).max(1) as usize;
    let mut buf = Vec::new();
    let mut id = 0;
    while id < vocab {
        let count = batch.min(vocab - id);
        let from = (offset + id) as u64 * row_bytes;
        files.read(entry, from, from + count as u64 * row_bytes, &mut buf)?;
        let values =
            inband_qwen35::checkpoint::to_f32(entry.dtype, &buf).map_err(|e| mismatch(format!("embedding: {e}")))?;
        for (k, row) in values.chunks(width).enumerate() {
            let token: ChipToken = spec.tokens.decode(id + k).expect("in range");
            let want = spec.residual(&token);
            if row.iter().zip(&want).any(|(a, b)| a.to_bits() != b.to_bits()) {
                return Err(mismatch(format!(
                    "the embedding row of chip token {} ({token:?}) differs from {what}",
                    id + k
                )));
            }
        }
        id += count;
    }
    Ok(vocab)
}

/// The first top-level manifest field that differs, named.
fn first_difference(have: &Manifest, want: &Manifest) -> String {
    let (a, b) = (
        serde_json::to_value(have).unwrap_or_default(),
        serde_json::to_value(want).unwrap_or_default(),
    );
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        for (key, value) in b {
            if a.get(key) != Some(value) {
                return format!("field {key:?}");
            }
        }
    }
    "a field".into()
}

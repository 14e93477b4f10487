//! verify: is a checkpoint intact? Its structure against its config, a chip's tensors
//! against the hashes recorded at splice time, and (given the base) every original
//! tensor recoverable bit for bit.

use std::io::Write;
use std::path::Path;

use inband_qwen35::weights::DecoderLayer;
use inband_qwen35::TextConfig;
use sha2::{Digest, Sha256};

use crate::geometry::{InbandSection, BASE_FILES, BASE_NORMS, CHIP_FILES};
use crate::st_read::{TensorEntry, TensorFiles};
use crate::strip::Unsplicer;
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
        let manifest_path = dir.join(CHIP_FILES).join(inband_weightgen::pack::MANIFEST_FILE);
        let saved: inband_weightgen::pack::Manifest = serde_json::from_value(read_json(&manifest_path)?)
            .map_err(|e| mismatch(format!("{}: {e}", manifest_path.display())))?;
        if saved != section.manifest {
            return Err(mismatch(
                "inband/chip/manifest.json differs from the manifest in config.json",
            ));
        }
        lines.push("chip manifest: the copy in inband/chip matches config.json".into());
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
        let unsplicer = Unsplicer::open(dir)?;
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

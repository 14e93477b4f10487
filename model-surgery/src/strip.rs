//! strip: recover the base checkpoint from a spliced one, tensor for tensor and byte
//! for byte: chip layers dropped, padding cut, layers renumbered, the original norms
//! and small files restored from what splice kept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use inband_qwen35::checkpoint::{INDEX_FILE, SINGLE_FILE};
use inband_weightgen::pack::{residual_axis, ResidualAxis};

use crate::geometry::{classify, is_residual_norm, InbandSection, TextTensor, BASE_FILES, BASE_NORMS};
use crate::st::{self, PlannedTensor, WriteError};
use crate::st_read::{element_size, TensorFiles};
use crate::{atomic_dir, read_json, SurgeryError};

/// A spliced checkpoint opened for reading its base back out.
pub struct Unsplicer {
    pub section: InbandSection,
    spliced: TensorFiles,
    norms: TensorFiles,
    /// Base tensor name -> (spliced name, base dtype, base shape).
    pub base_tensors: BTreeMap<String, (String, safetensors::Dtype, Vec<usize>)>,
}

fn invalid(m: impl Into<String>) -> SurgeryError {
    SurgeryError::Invalid(m.into())
}

fn to_write(e: SurgeryError) -> WriteError {
    WriteError::Source(e.to_string())
}

impl Unsplicer {
    pub fn open(dir: &Path) -> Result<Self, SurgeryError> {
        let config = read_json(&dir.join("config.json"))?;
        let section = InbandSection::from_config(&config)
            .ok_or_else(|| {
                invalid(format!(
                    "{} holds no chip (no inband section in config.json)",
                    dir.display()
                ))
            })?
            .map_err(invalid)?;
        let spliced = TensorFiles::open(dir)?;
        let norms = TensorFiles::open_single(&dir.join(BASE_NORMS))?;
        let (n, h, v) = (section.chip_layers, section.base.hidden_size, section.base.vocab_size);
        let prefix = section.text_prefix.clone();
        let mut base_tensors = BTreeMap::new();
        for (name, e) in &spliced.tensors {
            let kind = classify(name, &prefix);
            let (base_name, shape) = match &kind {
                TextTensor::Layer(l, _) if *l < n => continue,
                TextTensor::Layer(l, inner) => {
                    let shape = match residual_axis(inner) {
                        ResidualAxis::Vector => vec![h],
                        ResidualAxis::Columns => vec![e.shape[0], h],
                        ResidualAxis::Rows => vec![h, e.shape[1]],
                        ResidualAxis::None => e.shape.clone(),
                    };
                    (format!("{prefix}layers.{}.{inner}", l - n), shape)
                }
                TextTensor::Embedding | TextTensor::LmHead => (name.clone(), vec![v, h]),
                TextTensor::FinalNorm => (name.clone(), vec![h]),
                TextTensor::Other => (name.clone(), e.shape.clone()),
            };
            let dtype = if is_residual_norm(&kind) {
                norms.get(&base_name)?.dtype
            } else {
                e.dtype
            };
            base_tensors.insert(base_name, (name.clone(), dtype, shape));
        }
        Ok(Self {
            section,
            spliced,
            norms,
            base_tensors,
        })
    }

    /// Writes the base bytes of `base_name` into `out`.
    pub fn produce(&self, base_name: &str, out: &mut dyn Write) -> Result<(), WriteError> {
        let (spliced_name, _, shape) = &self.base_tensors[base_name];
        let kind = classify(spliced_name, &self.section.text_prefix);
        let io = |source| WriteError::Io {
            path: base_name.into(),
            source,
        };
        if is_residual_norm(&kind) {
            return out
                .write_all(&self.norms.bytes(base_name).map_err(to_write)?)
                .map_err(io);
        }
        let e = self.spliced.get(spliced_name).map_err(to_write)?;
        let esize = element_size(e.dtype);
        let axis = match &kind {
            TextTensor::Layer(_, inner) => residual_axis(inner),
            TextTensor::Embedding | TextTensor::LmHead => ResidualAxis::Columns,
            _ => ResidualAxis::None,
        };
        let mut buf = Vec::new();
        match axis {
            ResidualAxis::Columns => {
                let (rows, keep) = (shape[0], shape[1] * esize);
                let row_bytes = (e.shape[1] * esize) as u64;
                let batch = ((8 << 20) / row_bytes.max(1)).max(1) as usize;
                let mut r = 0;
                while r < rows {
                    let count = batch.min(rows - r);
                    self.spliced
                        .read(e, r as u64 * row_bytes, (r + count) as u64 * row_bytes, &mut buf)
                        .map_err(to_write)?;
                    for row in buf.chunks(row_bytes as usize) {
                        out.write_all(&row[..keep]).map_err(io)?;
                    }
                    r += count;
                }
            }
            ResidualAxis::Rows => {
                let keep = (shape[0] * shape[1] * esize) as u64;
                self.spliced.read(e, 0, keep, &mut buf).map_err(to_write)?;
                out.write_all(&buf).map_err(io)?;
            }
            ResidualAxis::Vector | ResidualAxis::None => {
                let total = e.end - e.start;
                let mut at = 0;
                while at < total {
                    let to = (at + (16 << 20)).min(total);
                    self.spliced.read(e, at, to, &mut buf).map_err(to_write)?;
                    out.write_all(&buf).map_err(io)?;
                    at = to;
                }
            }
        }
        Ok(())
    }

    /// The base's shard assignment: from its saved index, or one model.safetensors.
    pub fn base_shards(&self, dir: &Path) -> Result<Vec<(String, Vec<PlannedTensor>)>, SurgeryError> {
        let index_path = dir.join(BASE_FILES).join(INDEX_FILE);
        let mut shards: BTreeMap<String, Vec<PlannedTensor>> = BTreeMap::new();
        let weight_map = if index_path.is_file() {
            let index = read_json(&index_path)?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .cloned()
                .unwrap_or_default();
            Some(map)
        } else {
            None
        };
        for (name, (_, dtype, shape)) in &self.base_tensors {
            let file = match &weight_map {
                Some(map) => map
                    .get(name)
                    .and_then(|f| f.as_str())
                    .ok_or_else(|| invalid(format!("tensor {name} is not in the base's saved index")))?
                    .to_string(),
                None => SINGLE_FILE.to_string(),
            };
            shards.entry(file).or_default().push(PlannedTensor {
                name: name.clone(),
                dtype: *dtype,
                shape: shape.clone(),
            });
        }
        Ok(shards.into_iter().collect())
    }
}

/// Writes the base recovered from the spliced checkpoint `dir` into `out`.
pub fn strip(dir: &Path, out: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, SurgeryError> {
    let unsplicer = Unsplicer::open(dir)?;
    let shards = unsplicer.base_shards(dir)?;
    let total: u64 = shards.iter().flat_map(|(_, p)| p).map(|t| t.bytes()).sum();
    let indexed = dir.join(BASE_FILES).join(INDEX_FILE).is_file();
    atomic_dir(out, |target| {
        let mut done = 0u64;
        let mut produce = |t: &PlannedTensor, w: &mut dyn Write| unsplicer.produce(&t.name, w);
        if indexed {
            st::write_sharded(target, &shards, &mut produce, &mut |b| {
                done += b;
                progress(done, total);
            })?;
        } else {
            for (file, plan) in &shards {
                st::write_file(&target.join(file), plan, &mut produce)?;
            }
            progress(total, total);
        }
        // The base's small files, verbatim (this also restores its index byte for byte).
        let saved = dir.join(BASE_FILES);
        for entry in std::fs::read_dir(&saved).map_err(|source| SurgeryError::Io {
            path: saved.clone(),
            source,
        })? {
            let entry = entry.map_err(|source| SurgeryError::Io {
                path: saved.clone(),
                source,
            })?;
            let to = target.join(entry.file_name());
            std::fs::copy(entry.path(), &to).map_err(|source| SurgeryError::Io { path: to, source })?;
        }
        Ok(())
    })?;
    Ok(total)
}

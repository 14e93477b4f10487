//! strip: recover the base checkpoint from a spliced one, tensor for tensor and byte
//! for byte: chip layers dropped, padding cut, layers renumbered, the original norms
//! and small files restored from what splice kept.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use inband_chip::base_view::BaseView;
use inband_chip::spliced::BASE_FILES;
use inband_qwen35::checkpoint::{INDEX_FILE, SINGLE_FILE};

use crate::st::{self, PlannedTensor, WriteError};
use crate::{atomic_dir, read_json, SurgeryError};

/// The base's shard assignment: from its saved index, or one model.safetensors.
pub fn base_shards(view: &BaseView, dir: &Path) -> Result<Vec<(String, Vec<PlannedTensor>)>, SurgeryError> {
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
    for (name, (_, dtype, shape)) in &view.base_tensors {
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

fn invalid(m: impl Into<String>) -> SurgeryError {
    SurgeryError::Invalid(m.into())
}

/// Writes the base recovered from the spliced checkpoint `dir` into `out`.
pub fn strip(dir: &Path, out: &Path, progress: &mut dyn FnMut(u64, u64)) -> Result<u64, SurgeryError> {
    let view = BaseView::open(dir)?;
    let shards = base_shards(&view, dir)?;
    let total: u64 = shards.iter().flat_map(|(_, p)| p).map(|t| t.bytes()).sum();
    let indexed = dir.join(BASE_FILES).join(INDEX_FILE).is_file();
    atomic_dir(out, |target| {
        let mut done = 0u64;
        let mut produce = |t: &PlannedTensor, w: &mut dyn Write| {
            view.produce(&t.name, w)
                .map_err(|e| WriteError::Source(format!("{}: {e}", t.name)))
        };
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

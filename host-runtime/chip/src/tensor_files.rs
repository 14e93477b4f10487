//! Reading a checkpoint's safetensors without mapping it: headers are parsed and
//! checked up front (a truncated or malformed shard is refused before anything is
//! written), tensor bytes are read with positioned reads in bounded chunks, so resident
//! memory stays small however large the checkpoint. Every tool reads safetensors
//! through [`TensorFiles`] (or validates with it first), so one set of checks applies.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use inband_qwen35::checkpoint::{INDEX_FILE, SINGLE_FILE};
use safetensors::Dtype;

use thiserror::Error;

/// Why tensors could not be read.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

/// Where one tensor's bytes are.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Index into [`TensorFiles::files`].
    pub file: usize,
    /// Absolute byte range in that file.
    pub start: u64,
    pub end: u64,
}

/// All tensors of a checkpoint folder.
pub struct TensorFiles {
    pub files: Vec<(PathBuf, File)>,
    pub tensors: BTreeMap<String, TensorEntry>,
    /// The shard file each tensor came from (its name in the folder).
    pub shard_of: BTreeMap<String, String>,
    /// Whether the folder had an index (sharded) or a single model.safetensors.
    pub indexed: bool,
    /// The files' `__metadata__` (string to string; a key in two shards: the later one's).
    pub metadata: BTreeMap<String, String>,
}

/// One file's header: its tensors and its `__metadata__`.
struct Header {
    file: File,
    entries: Vec<(String, TensorEntry)>,
    metadata: BTreeMap<String, String>,
}

fn parse_dtype(s: &str) -> Option<Dtype> {
    Some(match s {
        "F32" => Dtype::F32,
        "BF16" => Dtype::BF16,
        "F16" => Dtype::F16,
        "F64" => Dtype::F64,
        "I64" => Dtype::I64,
        "I32" => Dtype::I32,
        "U32" => Dtype::U32,
        "U8" => Dtype::U8,
        "BOOL" => Dtype::BOOL,
        _ => return None,
    })
}

/// Bytes per element of any dtype a checkpoint may hold.
pub fn element_size(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F64 | Dtype::I64 => 8,
        Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
        Dtype::BF16 | Dtype::F16 => 2,
        _ => 1,
    }
}

fn invalid(path: &Path, message: impl Into<String>) -> ReadError {
    ReadError::Invalid(format!("{}: {}", path.display(), message.into()))
}

/// Parses one shard's header, checking that the file holds every byte it promises.
fn read_header(path: &Path, file_index: usize) -> Result<Header, ReadError> {
    let file = File::open(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let size = file
        .metadata()
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?
        .len();
    let mut len_bytes = [0u8; 8];
    file.read_exact_at(&mut len_bytes, 0)
        .map_err(|_| invalid(path, "truncated: no safetensors header"))?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > 100 << 20 || 8 + header_len > size {
        return Err(invalid(
            path,
            "truncated or not a safetensors file (header length out of range)",
        ));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact_at(&mut header, 8).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_slice(&header).map_err(|e| invalid(path, format!("header is not JSON ({e})")))?;
    let map = json
        .as_object()
        .ok_or_else(|| invalid(path, "header is not a JSON object"))?;
    let data_start = 8 + header_len;
    let mut out = Vec::new();
    let mut metadata = BTreeMap::new();
    for (name, v) in map {
        if name == "__metadata__" {
            let pairs = v
                .as_object()
                .ok_or_else(|| invalid(path, "__metadata__ is not a JSON object"))?;
            for (key, value) in pairs {
                let value = value
                    .as_str()
                    .ok_or_else(|| invalid(path, format!("__metadata__ entry {key} is not a string")))?;
                metadata.insert(key.clone(), value.to_string());
            }
            continue;
        }
        let bad = || invalid(path, format!("tensor {name}: malformed header entry"));
        let dtype = v
            .get("dtype")
            .and_then(|d| d.as_str())
            .and_then(parse_dtype)
            .ok_or_else(bad)?;
        let shape: Vec<usize> = v
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(bad)?
            .iter()
            .map(|d| d.as_u64().map(|x| x as usize))
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        let offsets = v.get("data_offsets").and_then(|o| o.as_array()).ok_or_else(bad)?;
        let (a, b) = match (
            offsets.first().and_then(|x| x.as_u64()),
            offsets.get(1).and_then(|x| x.as_u64()),
        ) {
            (Some(a), Some(b)) if a <= b => (a, b),
            _ => return Err(bad()),
        };
        let expected = shape
            .iter()
            .try_fold(element_size(dtype) as u64, |n, d| n.checked_mul(*d as u64))
            .ok_or_else(|| invalid(path, format!("tensor {name}: shape {shape:?} is too large")))?;
        if b - a != expected {
            return Err(invalid(
                path,
                format!("tensor {name}: {} bytes for shape {shape:?}", b - a),
            ));
        }
        // Offsets near 2^64 must not wrap around the file-size check.
        if data_start.checked_add(b).is_none_or(|end| end > size) {
            return Err(invalid(
                path,
                format!(
                    "truncated: tensor {name} ends at byte {} but the file has {size}",
                    data_start as u128 + b as u128
                ),
            ));
        }
        out.push((
            name.clone(),
            TensorEntry {
                dtype,
                shape,
                file: file_index,
                start: data_start + a,
                end: data_start + b,
            },
        ));
    }
    check_layout(path, &out, data_start, size)?;
    Ok(Header {
        file,
        entries: out,
        metadata,
    })
}

/// The data section must be the tensors laid end to end: no two tensors share a byte,
/// and no bytes lie between or after them (as the safetensors format requires).
fn check_layout(path: &Path, entries: &[(String, TensorEntry)], data_start: u64, size: u64) -> Result<(), ReadError> {
    let mut spans: Vec<(u64, u64, &str)> = entries.iter().map(|(n, e)| (e.start, e.end, n.as_str())).collect();
    spans.sort();
    let mut end = data_start;
    for (start, stop, name) in spans {
        if start < end {
            return Err(invalid(path, format!("tensor {name} overlaps another tensor's bytes")));
        }
        if start > end {
            return Err(invalid(
                path,
                format!("{} unused bytes before tensor {name}", start - end),
            ));
        }
        end = stop;
    }
    if end != size {
        return Err(invalid(path, format!("{} bytes after the last tensor", size - end)));
    }
    Ok(())
}

impl TensorFiles {
    /// Opens every shard of the checkpoint in `dir`.
    pub fn open(dir: &Path) -> Result<Self, ReadError> {
        let index_path = dir.join(INDEX_FILE);
        let (names, indexed): (Vec<String>, bool) = if index_path.is_file() {
            let text = std::fs::read_to_string(&index_path).map_err(|source| ReadError::Io {
                path: index_path.clone(),
                source,
            })?;
            let index: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| invalid(&index_path, format!("not JSON ({e})")))?;
            let map = index
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| invalid(&index_path, "no weight_map"))?;
            let mut names: Vec<String> = map.values().filter_map(|v| v.as_str().map(str::to_string)).collect();
            names.sort();
            names.dedup();
            (names, true)
        } else if dir.join(SINGLE_FILE).is_file() {
            (vec![SINGLE_FILE.to_string()], false)
        } else {
            return Err(invalid(dir, "no model.safetensors or model.safetensors.index.json"));
        };
        let mut files = Vec::new();
        let mut tensors = BTreeMap::new();
        let mut shard_of = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            let path = dir.join(name);
            let Header {
                file,
                entries,
                metadata: shard_metadata,
            } = read_header(&path, i)?;
            metadata.extend(shard_metadata);
            for (n, e) in entries {
                shard_of.insert(n.clone(), name.clone());
                if tensors.insert(n.clone(), e).is_some() {
                    return Err(invalid(&path, format!("tensor {n} appears in two shards")));
                }
            }
            files.push((path, file));
        }
        Ok(Self {
            files,
            tensors,
            shard_of,
            indexed,
            metadata,
        })
    }

    /// Opens one safetensors file (a chip pack's chip.safetensors, the saved base norms).
    pub fn open_single(path: &Path) -> Result<Self, ReadError> {
        let Header {
            file,
            entries,
            metadata,
        } = read_header(path, 0)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let shard_of = entries.iter().map(|(n, _)| (n.clone(), name.clone())).collect();
        Ok(Self {
            files: vec![(path.to_path_buf(), file)],
            tensors: entries.into_iter().collect(),
            shard_of,
            indexed: false,
            metadata,
        })
    }

    pub fn get(&self, name: &str) -> Result<&TensorEntry, ReadError> {
        self.tensors
            .get(name)
            .ok_or_else(|| ReadError::Invalid(format!("checkpoint has no tensor {name}")))
    }

    /// Reads bytes [from, to) of a tensor's data.
    pub fn read(&self, entry: &TensorEntry, from: u64, to: u64, buf: &mut Vec<u8>) -> Result<(), ReadError> {
        let (path, file) = &self.files[entry.file];
        buf.resize((to - from) as usize, 0);
        file.read_exact_at(buf, entry.start + from)
            .map_err(|source| ReadError::Io {
                path: path.clone(),
                source,
            })
    }

    /// A whole tensor's bytes (for small tensors only).
    pub fn bytes(&self, name: &str) -> Result<Vec<u8>, ReadError> {
        let e = self.get(name)?;
        let mut buf = Vec::new();
        self.read(e, 0, e.end - e.start, &mut buf)?;
        Ok(buf)
    }

    /// A whole tensor as f32 values (for small tensors only).
    pub fn f32s(&self, name: &str) -> Result<Vec<f32>, ReadError> {
        let e = self.get(name)?;
        inband_qwen35::checkpoint::to_f32(e.dtype, &self.bytes(name)?)
            .map_err(|m| ReadError::Invalid(format!("tensor {name}: {m}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file with `header` (JSON) and `data` bytes after it.
    fn file_with(dir: &Path, header: &str, data: &[u8]) -> PathBuf {
        let path = dir.join("model.safetensors");
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(data);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn refusal(header: &str, data: &[u8]) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let path = file_with(tmp.path(), header, data);
        match TensorFiles::open_single(&path) {
            Ok(_) => panic!("accepted {header}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_well_formed_file_opens() {
        let tmp = tempfile::tempdir().unwrap();
        let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}"#;
        let path = file_with(tmp.path(), header, &[0; 12]);
        let files = TensorFiles::open_single(&path).unwrap();
        assert_eq!(files.f32s("a").unwrap(), vec![0.0, 0.0]);
    }

    #[test]
    fn offsets_near_two_to_the_64_do_not_wrap_past_the_size_check() {
        let far = u64::MAX - 15;
        let header = format!(
            r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":[{far},{}]}}}}"#,
            far + 8
        );
        let err = refusal(&header, &[0; 8]);
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn overlapping_tensors_are_refused() {
        let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        let err = refusal(header, &[0; 8]);
        assert!(err.contains("overlaps"), "{err}");
    }

    #[test]
    fn trailing_and_unused_bytes_are_refused() {
        let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let err = refusal(header, &[0; 12]);
        assert!(err.contains("4 bytes after the last tensor"), "{err}");
        let header = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        let err = refusal(header, &[0; 8]);
        assert!(err.contains("4 unused bytes before tensor a"), "{err}");
    }

    #[test]
    fn shapes_whose_size_overflows_are_refused() {
        let header = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#;
        let err = refusal(header, &[0; 8]);
        assert!(err.contains("too large"), "{err}");
    }
}

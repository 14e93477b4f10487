//! Streaming safetensors output: every tensor's name, dtype and shape is planned first
//! (the header needs all offsets), then each tensor's bytes are produced one at a
//! time straight into the file. Memory stays at one tensor's worth of rows, however
//! large the checkpoint.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum WriteError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("tensor {name}: produced {produced} bytes, planned {planned}")]
    Size { name: String, produced: u64, planned: u64 },
    #[error("{0}")]
    Source(String),
}

/// One planned output tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTensor {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

/// Bytes per element of a float dtype.
pub fn dtype_size(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F32 => 4,
        Dtype::BF16 | Dtype::F16 => 2,
        Dtype::F64 => 8,
        other => panic!("unsupported dtype {other:?}"),
    }
}

/// The safetensors name of a dtype.
pub fn dtype_name(dtype: Dtype) -> &'static str {
    match dtype {
        Dtype::F32 => "F32",
        Dtype::BF16 => "BF16",
        Dtype::F16 => "F16",
        Dtype::F64 => "F64",
        other => panic!("unsupported dtype {other:?}"),
    }
}

impl PlannedTensor {
    pub fn bytes(&self) -> u64 {
        (self.shape.iter().product::<usize>() * dtype_size(self.dtype)) as u64
    }
}

/// Counts what a producer writes, so a wrong size is caught.
struct Counting<'a, W: Write> {
    inner: &'a mut W,
    written: u64,
}

impl<W: Write> Write for Counting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Produces one tensor's bytes into a writer.
pub type Producer<'a> = dyn FnMut(&PlannedTensor, &mut dyn Write) -> Result<(), WriteError> + 'a;

/// Writes one safetensors file: header, then every tensor in `plan` order.
pub fn write_file(path: &Path, plan: &[PlannedTensor], produce: &mut Producer<'_>) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
    let mut offset = 0u64;
    for t in plan {
        let end = offset + t.bytes();
        header.insert(
            t.name.clone(),
            serde_json::json!({ "dtype": dtype_name(t.dtype), "shape": t.shape, "data_offsets": [offset, end] }),
        );
        offset = end;
    }
    let mut text = serde_json::to_string(&serde_json::Value::Object(header)).expect("serialisable");
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let file = std::fs::File::create(path).map_err(io)?;
    let mut out = BufWriter::with_capacity(8 << 20, file);
    out.write_all(&(text.len() as u64).to_le_bytes()).map_err(io)?;
    out.write_all(text.as_bytes()).map_err(io)?;
    for t in plan {
        let mut counting = Counting {
            inner: &mut out,
            written: 0,
        };
        produce(t, &mut counting)?;
        if counting.written != t.bytes() {
            return Err(WriteError::Size {
                name: t.name.clone(),
                produced: counting.written,
                planned: t.bytes(),
            });
        }
    }
    out.flush().map_err(io)?;
    out.into_inner()
        .map_err(|e| io(e.into_error()))?
        .sync_all()
        .map_err(io)?;
    Ok(())
}

/// Writes `shards` (file name -> tensors) into `dir` and the index
/// model.safetensors.index.json; returns the total tensor bytes.
pub fn write_sharded(
    dir: &Path,
    shards: &[(String, Vec<PlannedTensor>)],
    produce: &mut Producer<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, WriteError> {
    let mut weight_map = BTreeMap::new();
    let mut total = 0u64;
    for (file, plan) in shards {
        let mut wrapped = |t: &PlannedTensor, w: &mut dyn Write| -> Result<(), WriteError> {
            produce(t, w)?;
            progress(t.bytes());
            Ok(())
        };
        write_file(&dir.join(file), plan, &mut wrapped)?;
        for t in plan {
            weight_map.insert(t.name.clone(), file.clone());
            total += t.bytes();
        }
    }
    let index = serde_json::json!({ "metadata": { "total_size": total }, "weight_map": weight_map });
    let path = dir.join(inband_qwen35::checkpoint::INDEX_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&index).expect("serialisable"))
        .map_err(|source| WriteError::Io { path, source })?;
    Ok(total)
}

/// Groups tensors into shards of at most `max_bytes` each (a larger tensor gets its
/// own shard), named model-0000i-of-0000n.safetensors.
pub fn shard_plan(tensors: Vec<PlannedTensor>, max_bytes: u64) -> Vec<(String, Vec<PlannedTensor>)> {
    let mut groups: Vec<Vec<PlannedTensor>> = vec![Vec::new()];
    let mut size = 0;
    for t in tensors {
        if size + t.bytes() > max_bytes && !groups.last().expect("nonempty").is_empty() {
            groups.push(Vec::new());
            size = 0;
        }
        size += t.bytes();
        groups.last_mut().expect("nonempty").push(t);
    }
    let n = groups.len();
    groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| (format!("model-{:05}-of-{:05}.safetensors", i + 1, n), g))
        .collect()
}

/// Little-endian bytes of f32 values in `dtype`.
pub fn encode(values: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::BF16 => values
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        Dtype::F16 => values
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        other => panic!("unsupported dtype {other:?}"),
    }
}

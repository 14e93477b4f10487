//! A spliced checkpoint's base, read back out: chip layers dropped, padding cut, layers
//! renumbered, the original norms taken from what splice kept. `weight-surgery strip`
//! writes these bytes as files; text mode reads them as the base model's tensors.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::pack::{residual_axis, ResidualAxis};
use crate::spliced::{classify, is_residual_norm, BaseShape, TextTensor, BASE_NORMS};
use crate::tensor_files::{element_size, ReadError, TensorFiles};

/// The part of the `inband` section that locates the base: read from checkpoints of
/// every chip-pack version, so that a base can always be recovered.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct BaseGeometry {
    pub chip_layers: usize,
    pub text_prefix: String,
    pub base: BaseShape,
}

/// A spliced checkpoint opened for reading its base tensors.
pub struct BaseView {
    pub geometry: BaseGeometry,
    spliced: TensorFiles,
    norms: TensorFiles,
    /// Base tensor name -> (spliced name, base dtype, base shape).
    pub base_tensors: BTreeMap<String, (String, safetensors::Dtype, Vec<usize>)>,
}

fn invalid(m: impl Into<String>) -> ReadError {
    ReadError::Invalid(m.into())
}

impl BaseView {
    pub fn open(dir: &Path) -> Result<Self, ReadError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ReadError::Io {
            path: path.clone(),
            source,
        })?;
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| invalid(format!("{}: not JSON ({e})", path.display())))?;
        let section = config.get("inband").ok_or_else(|| {
            invalid(format!(
                "{} holds no chip (no inband section in config.json)",
                dir.display()
            ))
        })?;
        let geometry: BaseGeometry =
            serde_json::from_value(section.clone()).map_err(|e| invalid(format!("inband section: {e}")))?;
        let spliced = TensorFiles::open(dir)?;
        let norms = TensorFiles::open_single(&dir.join(BASE_NORMS))?;
        let (n, h, v) = (
            geometry.chip_layers,
            geometry.base.hidden_size,
            geometry.base.vocab_size,
        );
        let prefix = geometry.text_prefix.clone();
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
            geometry,
            spliced,
            norms,
            base_tensors,
        })
    }

    /// Writes the base bytes of `base_name` into `out`.
    pub fn produce(&self, base_name: &str, out: &mut dyn Write) -> Result<(), ProduceError> {
        let (spliced_name, _, shape) = self
            .base_tensors
            .get(base_name)
            .ok_or_else(|| invalid(format!("the base has no tensor {base_name}")))?;
        let kind = classify(spliced_name, &self.geometry.text_prefix);
        if is_residual_norm(&kind) {
            return Ok(out.write_all(&self.norms.bytes(base_name)?)?);
        }
        let e = self.spliced.get(spliced_name)?;
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
                        .read(e, r as u64 * row_bytes, (r + count) as u64 * row_bytes, &mut buf)?;
                    for row in buf.chunks(row_bytes as usize) {
                        out.write_all(&row[..keep])?;
                    }
                    r += count;
                }
            }
            ResidualAxis::Rows => {
                let keep = (shape[0] * shape[1] * esize) as u64;
                self.spliced.read(e, 0, keep, &mut buf)?;
                out.write_all(&buf)?;
            }
            ResidualAxis::Vector | ResidualAxis::None => {
                let total = e.end - e.start;
                let mut at = 0;
                while at < total {
                    let to = (at + (16 << 20)).min(total);
                    self.spliced.read(e, at, to, &mut buf)?;
                    out.write_all(&buf)?;
                    at = to;
                }
            }
        }
        Ok(())
    }
}

/// Why a base tensor could not be produced: reading the spliced checkpoint, or writing.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

//! Writing chip packs (the format and its reader are `inband_chip::pack`).
//!
//! A folder with
//! - `chip.safetensors`: `layers.{i}.{name}` (Qwen3.5 layer tensor names; residual axes
//!   cut to the chip's dimensions, inner axes at the base model's full size),
//!   `embed_tokens` [chip tokens, chip dims], `final_norm` [chip dims];
//! - `manifest.json`: format version, the base config it fits, the residual layout,
//!   the token map, where every memory lives, figures and the SHA-256 of every file;
//! - `report.txt`: the allocation report.
//!
//! Written to a sibling folder first and renamed into place, so an interrupted run
//! never leaves something that looks complete.

use std::collections::BTreeMap;
use std::path::Path;

use inband_chip::pack::{
    digest_file, io, residual_axis, sha256_file, BaseFit, Figures, FileDigest, Manifest, MemoryPlace, PackError,
    ResidualAxis, FORMAT, FORMAT_VERSION, MANIFEST_FILE, REPORT_FILE, TENSORS_FILE,
};
use inband_chip::rv32im::Rv32Map;
use inband_chip::staging::{self, StagingError};
use inband_circuits::ChipToken;
use inband_qwen35::weights::Array;
use safetensors::Dtype;

use crate::emit::Chip;
use crate::layout::NORM_EXPONENT;

/// Converts f32 values to little-endian bytes of `dtype` (BF16 or F32).
fn to_bytes(data: &[f32], dtype: Dtype) -> Vec<u8> {
    match dtype {
        Dtype::BF16 => data
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        _ => data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// Cuts a full-width layer tensor down to the chip's residual dimensions, checking
/// that the base part is zero.
fn chip_slice(name: &str, a: &Array, hidden: usize) -> Array {
    match residual_axis(name) {
        ResidualAxis::Vector => {
            assert!(
                a.data[..hidden].iter().all(|v| *v == 0.0),
                "{name} touches base dimensions"
            );
            Array::from_vec(&[a.data.len() - hidden], a.data[hidden..].to_vec())
        }
        ResidualAxis::Columns => {
            let (r, c) = a.dims2();
            let mut data = Vec::with_capacity(r * (c - hidden));
            for row in 0..r {
                let full = a.row(row);
                assert!(full[..hidden].iter().all(|v| *v == 0.0), "{name} reads base dimensions");
                data.extend_from_slice(&full[hidden..]);
            }
            Array::from_vec(&[r, c - hidden], data)
        }
        ResidualAxis::Rows => {
            let (r, c) = a.dims2();
            assert!(
                a.data[..hidden * c].iter().all(|v| *v == 0.0),
                "{name} writes base dimensions"
            );
            Array::from_vec(&[r - hidden, c], a.data[hidden * c..].to_vec())
        }
        ResidualAxis::None => a.clone(),
    }
}

/// The pack's tensors, in name order, in memory (F32 values).
pub fn pack_tensors(chip: &Chip) -> Vec<(String, Array)> {
    let mut tensors: Vec<(String, Array)> = lazy_pack_tensors(chip, Dtype::F32)
        .into_iter()
        .map(|(name, t)| (name, Array::from_vec(&t.shape, (t.make)())))
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

/// Writes `chip` as a new pack at `dir`, with `rv32im` (the RV32IM chip's host map) in
/// its manifest. `dir` must not exist: nothing that is already there is replaced.
pub fn write_pack(
    chip: &Chip,
    rv32im: Option<Rv32Map>,
    dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<Manifest, PackError> {
    let mut manifest = None;
    staging::write_dir(dir, |staged| {
        manifest = Some(write_into(chip, rv32im, staged, progress)?);
        Ok(())
    })
    .map_err(|e| match e {
        StagingError::Exists(_) => PackError::Invalid {
            path: dir.to_path_buf(),
            message: EXISTS.into(),
        },
        StagingError::Io { path, source } => PackError::Io { path, source },
        StagingError::Fill(e) => e,
    })?;
    Ok(manifest.expect("written"))
}

/// Why a pack is never written into an existing folder.
const EXISTS: &str = "already exists; choose a new folder (weightgen never replaces anything)";

/// Refuses an output folder that exists already (weightgen never replaces anything).
pub fn refuse_existing(dir: &Path) -> Result<(), PackError> {
    if dir.exists() || dir.is_symlink() {
        return Err(PackError::Invalid {
            path: dir.to_path_buf(),
            message: EXISTS.into(),
        });
    }
    Ok(())
}

/// One pack tensor whose bytes are made only when the writer reaches it, so writing a
/// pack holds a single tensor's bytes beside the chip (a 4b or 9b chip's dense layers
/// are many GiB already).
struct LazyTensor<'a> {
    shape: Vec<usize>,
    dtype: Dtype,
    make: Box<dyn Fn() -> Vec<f32> + 'a>,
}

impl safetensors::View for LazyTensor<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Owned(to_bytes(&(self.make)(), self.dtype))
    }

    fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// A layer tensor's shape once cut to the chip's dims (see [`chip_slice`]).
fn sliced_shape(name: &str, shape: &[usize], hidden: usize) -> Vec<usize> {
    match residual_axis(name) {
        ResidualAxis::Vector => vec![shape[0] - hidden],
        ResidualAxis::Columns => vec![shape[0], shape[1] - hidden],
        ResidualAxis::Rows => vec![shape[0] - hidden, shape[1]],
        ResidualAxis::None => shape.to_vec(),
    }
}

/// The pack's tensors as lazy views (the same names and contents as [`pack_tensors`]).
fn lazy_pack_tensors(chip: &Chip, dtype: Dtype) -> Vec<(String, LazyTensor<'_>)> {
    let hidden = chip.layout.hidden;
    let mut tensors = Vec::new();
    for (i, layer) in chip.layers.iter().enumerate() {
        for (name, a, shape) in layer.named_tensor_refs() {
            let shape = sliced_shape(&name, &shape, hidden);
            let key = format!("layers.{i}.{name}");
            let make = Box::new(move || chip_slice(&name, a, hidden).data);
            tensors.push((key, LazyTensor { shape, dtype, make }));
        }
    }
    let vocab = chip.circuit.tokens.vocab_size();
    let embed = move || {
        let spec = chip.spec();
        let mut data = Vec::with_capacity(vocab * chip.layout.chip_dims);
        for t in 0..vocab {
            let token: ChipToken = spec.tokens.decode(t).expect("in range");
            data.extend(spec.embedding(&token));
        }
        data
    };
    tensors.push((
        "embed_tokens".into(),
        LazyTensor {
            shape: vec![vocab, chip.layout.chip_dims],
            dtype,
            make: Box::new(embed),
        },
    ));
    let dims = chip.layout.chip_dims;
    tensors.push((
        "final_norm".into(),
        LazyTensor {
            shape: vec![dims],
            dtype,
            make: Box::new(move || vec![0.0; dims]),
        },
    ));
    tensors
}

fn write_into(
    chip: &Chip,
    rv32im: Option<Rv32Map>,
    dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<Manifest, PackError> {
    let non_bf16 = chip.non_bf16_weights();
    let dtype = if non_bf16 == 0 { Dtype::BF16 } else { Dtype::F32 };
    progress("writing chip.safetensors");
    let views = lazy_pack_tensors(chip, dtype);
    let tensors_path = dir.join(TENSORS_FILE);
    safetensors::serialize_to_file(views, None, &tensors_path).map_err(|e| PackError::Invalid {
        path: tensors_path.clone(),
        message: e.to_string(),
    })?;
    progress("writing report.txt");
    let report_path = dir.join(REPORT_FILE);
    std::fs::write(&report_path, crate::report::report(chip)).map_err(io(&report_path))?;

    let mut files = BTreeMap::new();
    files.insert(TENSORS_FILE.to_string(), digest_file(&tensors_path)?);
    files.insert(REPORT_FILE.to_string(), sha256_file(&report_path)?);
    let manifest = manifest_of(chip, rv32im, dtype, files);
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = serde_json::to_string_pretty(&manifest).expect("serialisable");
    std::fs::write(&manifest_path, text).map_err(io(&manifest_path))?;
    Ok(manifest)
}

/// Where the schedule put each of the circuit's memories.
pub fn memory_places(chip: &Chip) -> Vec<MemoryPlace> {
    chip.circuit
        .memories
        .iter()
        .zip(&chip.schedule.memory_place)
        .map(|(m, (layer, first))| MemoryPlace {
            name: m.name.clone(),
            layer: *layer,
            first_key_head: *first,
            key_heads: m.key_heads,
        })
        .collect()
}

/// The manifest of `chip` stored as `dtype`, with `files` as its file digests.
pub fn manifest_of(
    chip: &Chip,
    rv32im: Option<Rv32Map>,
    dtype: Dtype,
    files: BTreeMap<String, FileDigest>,
) -> Manifest {
    let c = &chip.circuit;
    let spec = chip.spec();
    Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        chip: c.name.clone(),
        generator: format!("inband-weightgen {}", env!("CARGO_PKG_VERSION")),
        base: BaseFit::of(&chip.base),
        layer_config: chip.layer_config(),
        chip_layers: chip.layers.len(),
        chip_dims: chip.layout.chip_dims,
        norm_exponent: NORM_EXPONENT,
        anchors: spec.anchors,
        tokens: spec.tokens,
        chip_vocab: c.tokens.vocab_size(),
        kind_dims: spec.kind_dims,
        field_dims: spec.field_dims,
        dims: chip.layout.names.clone(),
        dtype: format!("{dtype:?}"),
        figures: Figures {
            nonzero_weights: chip.nonzero_weights(),
            mlp_neurons: c.neuron_count(),
            key_heads: c.memories.iter().map(|m| m.key_heads).sum(),
            non_bf16_weights: chip.non_bf16_weights(),
        },
        files,
        memories: memory_places(chip),
        rv32im,
    }
}

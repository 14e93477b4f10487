//! A chip as a host drives it: the token map and residual layout come from the pack
//! manifest ([`ChipSpec`]), the layers from the tensors of a spliced checkpoint or a
//! pack, read straight into the sparse form the engines run ([`ChipModel`]). Nothing
//! is compiled: opening a chip costs a scan of its tensors' chip dimensions.

use std::path::Path;

use anyhow::{bail, Context};
use inband_qwen35::sparse::{all_zero, SparseLayer, SparseMatrix, SparseParts, SparseRows};
use inband_qwen35::weights::DecoderLayer;
use inband_qwen35::{LayerType, TextConfig};
use rayon::prelude::*;

use crate::engine::MathPath;
use crate::pack::{check_files, read_manifest, residual_axis, Manifest, ResidualAxis, TENSORS_FILE};
use crate::spliced::InbandSection;
use crate::tensor_files::{TensorEntry, TensorFiles};
use crate::token::{ChipToken, TokenSpec};

/// The chip's token map and residual layout: how a token becomes a residual, and how
/// the final residual chooses the next token.
#[derive(Debug, Clone)]
pub struct ChipSpec {
    pub tokens: TokenSpec,
    /// Residual dims before the chip's (the base model's width).
    pub hidden: usize,
    pub chip_dims: usize,
    /// (chip dim, value) of each anchor.
    pub anchors: Vec<(usize, f32)>,
    /// Chip dim of each kind's indicator.
    pub kind_dims: Vec<usize>,
    /// Chip dims of each field's values.
    pub field_dims: Vec<Vec<usize>>,
}

impl ChipSpec {
    pub fn of(m: &Manifest) -> Self {
        Self {
            tokens: m.tokens.clone(),
            hidden: m.base.hidden_size,
            chip_dims: m.chip_dims,
            anchors: m.anchors.clone(),
            kind_dims: m.kind_dims.clone(),
            field_dims: m.field_dims.clone(),
        }
    }

    /// The full residual width: base plus chip dims.
    pub fn width(&self) -> usize {
        self.hidden + self.chip_dims
    }

    /// The residual dims up to the last anchor: a chip pass's nonzeros there are the
    /// anchors alone, so activation-sparse products ([`inband_qwen35::active`]) keep
    /// their fold over them while the norm's scale repeats.
    pub fn anchor_prefix(&self) -> usize {
        self.hidden + self.anchors.iter().map(|(d, _)| d + 1).max().unwrap_or(0)
    }

    /// The chip-dimension part of a chip token's embedding row: the anchors, 1 at the
    /// kind's dim and 1 at each field value's dim.
    pub fn embedding(&self, token: &ChipToken) -> Vec<f32> {
        let mut row = vec![0.0f32; self.chip_dims];
        for (dim, value) in &self.anchors {
            row[*dim] = *value;
        }
        row[self.kind_dims[token.kind]] = 1.0;
        for (f, v) in self.tokens.kinds[token.kind].fields.iter().zip(&token.values) {
            row[self.field_dims[*f][*v]] = 1.0;
        }
        row
    }

    /// A full-width residual for a chip token (base dimensions zero).
    pub fn residual(&self, token: &ChipToken) -> Vec<f32> {
        let mut r = vec![0.0f32; self.hidden];
        r.extend(self.embedding(token));
        r
    }

    /// The chip token the final residual chooses: the kind and field values with the
    /// highest scores (the argmax of the tied lm_head over chip tokens, computed per
    /// field because each token's logit is a sum of its kind and field entries).
    pub fn choose(&self, hidden: &[f32]) -> ChipToken {
        let value = |dim: usize| hidden[self.hidden + dim];
        let mut best: Option<(f32, ChipToken)> = None;
        for (k, kind) in self.tokens.kinds.iter().enumerate() {
            let mut score = value(self.kind_dims[k]);
            let mut values = Vec::new();
            for f in &kind.fields {
                let (v, s) = self.field_dims[*f]
                    .iter()
                    .enumerate()
                    .map(|(v, dim)| (v, value(*dim)))
                    .fold((0, f32::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
                score += s;
                values.push(v);
            }
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, ChipToken { kind: k, values }));
            }
        }
        best.expect("at least one kind").1
    }
}

/// The chip layers, in the form an engine runs.
#[derive(Debug, Clone)]
pub enum ChipLayers {
    /// CSR matrices (the CPU engine's sparse path; the GPU engine's tables).
    Sparse(Vec<SparseLayer>),
    /// Full decoder layers (the dense path of the compiler's checks).
    Dense(Vec<DecoderLayer>),
}

/// A chip ready to run: its manifest, token map, layer config and layers.
#[derive(Debug, Clone)]
pub struct ChipModel {
    pub manifest: Manifest,
    pub spec: ChipSpec,
    /// The chip layers' config: the base's at the full residual width.
    pub config: TextConfig,
    pub layers: ChipLayers,
}

impl ChipModel {
    /// The chip of a spliced checkpoint: its manifest from config.json, its layers read
    /// from the checkpoint's chip layers (their chip dims only, with positioned reads:
    /// nothing is mapped, so resident memory is the sparse layers and a read buffer).
    pub fn from_checkpoint(dir: &Path, section: &InbandSection, base: &TextConfig) -> anyhow::Result<Self> {
        let manifest = section.manifest.clone();
        manifest.check_base(base)?;
        if manifest.chip_layers != section.chip_layers || manifest.chip_dims != section.chip_dims {
            bail!("the checkpoint's inband section and its chip manifest disagree on the chip's size");
        }
        let files = TensorFiles::open(dir)?;
        let stored = StoredLayers {
            files: &files,
            config: &manifest.layer_config,
            hidden: manifest.base.hidden_size,
            base_stored: true,
        };
        let prefix = &section.text_prefix;
        let layers = stored.layers(&|l| format!("{prefix}layers.{l}."), manifest.chip_layers)?;
        Ok(Self::new(manifest, ChipLayers::Sparse(layers)))
    }

    /// The chip of a pack folder (made by `weightgen`), every file checked against its
    /// hash. The check runs beside the reading of the layers (each a pass over the
    /// tensors file, 6.9 GB at the 0.8b shape), and a file that fails it is refused
    /// whatever the reading found.
    pub fn from_pack(dir: &Path) -> anyhow::Result<Self> {
        let manifest = read_manifest(dir)?;
        let (checked, layers) = std::thread::scope(|s| {
            let check = s.spawn(|| check_files(dir, &manifest));
            let layers = Self::pack_layers(dir, &manifest);
            (
                check.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                layers,
            )
        });
        checked?;
        Ok(Self::new(manifest, ChipLayers::Sparse(layers?)))
    }

    /// The chip layers in a pack's tensors file.
    fn pack_layers(dir: &Path, manifest: &Manifest) -> anyhow::Result<Vec<SparseLayer>> {
        let files = TensorFiles::open_single(&dir.join(TENSORS_FILE))?;
        let stored = StoredLayers {
            files: &files,
            config: &manifest.layer_config,
            hidden: manifest.base.hidden_size,
            base_stored: false,
        };
        stored.layers(&|l| format!("layers.{l}."), manifest.chip_layers)
    }

    /// A chip from full decoder layers (the compiler's own), for the given math path.
    pub fn from_layers(manifest: Manifest, layers: &[DecoderLayer], path: MathPath) -> anyhow::Result<Self> {
        let layers = match path {
            MathPath::Dense => ChipLayers::Dense(layers.to_vec()),
            MathPath::Sparse(order) => ChipLayers::Sparse(
                layers
                    .iter()
                    .map(|l| {
                        let mut s =
                            SparseLayer::new(l, &manifest.layer_config).context("chip layers are linear attention")?;
                        s.order = order;
                        Ok(s)
                    })
                    .collect::<anyhow::Result<_>>()?,
            ),
        };
        Ok(Self::new(manifest, layers))
    }

    fn new(manifest: Manifest, layers: ChipLayers) -> Self {
        Self {
            spec: ChipSpec::of(&manifest),
            config: manifest.layer_config.clone(),
            manifest,
            layers,
        }
    }

    /// Chip layers.
    pub fn layer_count(&self) -> usize {
        self.manifest.chip_layers
    }
}

/// Bytes read at once while scanning a tensor.
const READ_CHUNK: usize = 8 << 20;

/// Chip-layer tensors as stored: in a spliced checkpoint every residual axis holds the
/// base's dims and then the chip's (`base_stored`); in a pack only the chip's. Either
/// way the layers come out at the full residual width, exactly as the compiler made them.
struct StoredLayers<'a> {
    files: &'a TensorFiles,
    /// The chip layers' config (full width).
    config: &'a TextConfig,
    hidden: usize,
    base_stored: bool,
}

impl StoredLayers<'_> {
    /// Every chip layer, read in parallel.
    fn layers(&self, prefix: &(dyn Fn(usize) -> String + Sync), count: usize) -> anyhow::Result<Vec<SparseLayer>> {
        (0..count)
            .into_par_iter()
            .map(|l| self.layer(&prefix(l)).with_context(|| format!("chip layer {l}")))
            .collect()
    }

    fn layer(&self, prefix: &str) -> anyhow::Result<SparseLayer> {
        let shapes: std::collections::HashMap<String, Vec<usize>> =
            DecoderLayer::expected_shapes(LayerType::LinearAttention, self.config)
                .into_iter()
                .collect();
        let matrix = |name: &str| self.matrix(&format!("{prefix}{name}"), name, &shapes[name]);
        let vector = |name: &str| self.vector(&format!("{prefix}{name}"), name, &shapes[name]);
        let parts = SparseParts {
            input_layernorm: vector("input_layernorm.weight")?,
            post_attention_layernorm: vector("post_attention_layernorm.weight")?,
            qkv: matrix("linear_attn.in_proj_qkv.weight")?,
            z: matrix("linear_attn.in_proj_z.weight")?,
            b: matrix("linear_attn.in_proj_b.weight")?,
            a: matrix("linear_attn.in_proj_a.weight")?,
            conv: vector("linear_attn.conv1d.weight")?,
            a_log: vector("linear_attn.A_log")?,
            dt_bias: vector("linear_attn.dt_bias")?,
            norm: vector("linear_attn.norm.weight")?,
            out_proj: matrix("linear_attn.out_proj.weight")?,
            gate: matrix("mlp.gate_proj.weight")?,
            up: matrix("mlp.up_proj.weight")?,
            down: matrix("mlp.down_proj.weight")?,
        };
        Ok(SparseLayer::from_parts(parts, self.config))
    }

    /// The stored shape of a tensor whose full-width shape is `full`.
    fn stored_shape(&self, inner: &str, full: &[usize]) -> Vec<usize> {
        let cut = if self.base_stored { 0 } else { self.hidden };
        match residual_axis(inner) {
            ResidualAxis::Vector => vec![full[0] - cut],
            ResidualAxis::Columns => vec![full[0], full[1] - cut],
            ResidualAxis::Rows => vec![full[0] - cut, full[1]],
            ResidualAxis::None => full.to_vec(),
        }
    }

    /// A tensor's entry, its shape checked against the stored shape of `full`.
    fn entry(&self, name: &str, inner: &str, full: &[usize]) -> anyhow::Result<&TensorEntry> {
        let entry = self.files.get(name)?;
        let expected = self.stored_shape(inner, full);
        if entry.shape != expected {
            bail!("{name} has shape {:?}, expected {expected:?}", entry.shape);
        }
        Ok(entry)
    }

    /// A vector (norm gains over the residual; conv taps and per-head parameters).
    fn vector(&self, name: &str, inner: &str, full: &[usize]) -> anyhow::Result<Vec<f32>> {
        self.entry(name, inner, full)?;
        let stored = self.files.f32s(name)?;
        if residual_axis(inner) == ResidualAxis::Vector && !self.base_stored {
            let mut v = vec![0.0; self.hidden];
            v.extend(stored);
            return Ok(v);
        }
        Ok(stored)
    }

    /// A projection at full width, reading only the chip's part of the residual axis.
    /// Columns of base dims are never read: in VM mode the residual's base dims are
    /// zero, and they stay zero because no chip layer writes them (checked here).
    fn matrix(&self, name: &str, inner: &str, full: &[usize]) -> anyhow::Result<SparseMatrix> {
        let entry = self.entry(name, inner, full)?;
        let esize = entry.dtype.bitsize() / 8;
        let (rows, cols) = (full[0], full[1]);
        let stored = &entry.shape;
        let mut out = SparseRows::new(cols, entry.dtype).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let bad = |e: String| anyhow::anyhow!("{name}: {e}");
        match residual_axis(inner) {
            ResidualAxis::Columns => {
                let skip = if self.base_stored { self.hidden * esize } else { 0 };
                self.scan_rows(entry, 0, stored[0], |row| {
                    out.push(self.hidden, &row[skip..]).map_err(bad)
                })?;
            }
            ResidualAxis::Rows => {
                let first_chip_row = if self.base_stored { self.hidden } else { 0 };
                if self.base_stored {
                    self.scan_rows(entry, 0, self.hidden, |row| {
                        if !all_zero(row) {
                            bail!("{name} writes the base model's dimensions: this is not a chip layer (run `weight-surgery verify`)");
                        }
                        Ok(())
                    })?;
                }
                for _ in 0..self.hidden {
                    out.push(0, &[]).map_err(bad)?;
                }
                self.scan_rows(entry, first_chip_row, stored[0], |row| out.push(0, row).map_err(bad))?;
            }
            ResidualAxis::Vector | ResidualAxis::None => bail!("{name} is not a projection"),
        }
        let m = out.finish();
        debug_assert_eq!((m.rows, m.cols), (rows, cols));
        Ok(m)
    }

    /// Calls `each` on stored rows `from..to` of a matrix, read a chunk of rows at a time.
    fn scan_rows(
        &self,
        entry: &TensorEntry,
        from: usize,
        to: usize,
        mut each: impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let row_bytes = entry.shape[1] * entry.dtype.bitsize() / 8;
        let batch = (READ_CHUNK / row_bytes.max(1)).max(1);
        let mut buf = Vec::new();
        let mut r = from;
        while r < to {
            let count = batch.min(to - r);
            self.files.read(
                entry,
                (r * row_bytes) as u64,
                ((r + count) * row_bytes) as u64,
                &mut buf,
            )?;
            for row in buf.chunks(row_bytes.max(1)) {
                each(row)?;
            }
            r += count;
        }
        Ok(())
    }
}

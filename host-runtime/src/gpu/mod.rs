//! The GPU engine: the chip layers' forward pass as one NVRTC-compiled CUDA kernel that
//! runs many passes per launch (embedding, every chip layer, the token choice, feeding
//! the choice back), so the host only reads the chosen tokens. The math is the sparse
//! path's (inband-qwen35 `sparse`); the CUDA libraries are loaded at run time (built
//! without CUDA installed).
//!
//! Two kernels: the activation-sparse one (`sparse`, the default), which only touches the
//! weights of the residual's nonzeros, and the row-by-row `reference` it is measured and
//! checked against. This module holds what they share: the token tables, the launch
//! loop, the engine interface.

use std::ops::Range;
use std::sync::Arc;

use anyhow::{bail, Context};
use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute_enum};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use inband_chip::engine::EngineState;
use inband_chip::{BatchEngine, ChipLayers, ChipModel, ChipSpec, ChipToken, MemoryRow, PassEngine, SlotWork};
use inband_qwen35::sparse::SparseLayer;

use crate::vm::CudaKernel as Kernel;

pub mod emulation;
mod reference;
mod sparse;
pub mod text;

const COMMON: &str = include_str!("chip_common.cuh");
const REFERENCE_KERNEL: &str = include_str!("chip_reference.cu");
const SPARSE_KERNEL: &str = include_str!("chip_sparse.cu");
/// The fewest threads of a machine that has an SM to itself (a single stream, or a batch
/// of at most one machine an SM): at 1,024 threads a thread holds 64 registers and the
/// value heads' chains spilled (32 bytes; the kernel of 2026-12-07, 6 KB smaller, fits in
/// 64 without spilling and is still 3.1 to 3.4 % slower there, H100), at 768 it holds 80.
/// Measured on the H200 at the 0.8b shape (16 value heads), single stream: 768 and 640
/// threads +1.8 to +2.2 % passes/s over 1,024, 512 −2.7 % (the scatters' and MLPs' loops
/// twice as long); on the H100 (2026-12-06) 640 and 704 threads +0.1 to −0.6 %, 832 and 896
/// −2.0 to −2.5 % against 768.
pub const THREADS_ALONE_MIN: u32 = 768;
/// Replaces [`threads_alone`]'s choice (32 to 1024, a multiple of 32): a tuning knob,
/// for measuring the block shape of a single stream.
pub const THREADS_ENV: &str = "INBAND_THREADS";
/// Passes one launch may run (the host reads the chosen tokens after each launch).
const LOOKAHEAD: usize = 1 << 15;
/// Extra NVRTC options for the chip kernel, whitespace-separated: a tuning and
/// diagnosis knob (`-DUNROLL=16`; `-DPROFILE` prints each phase's cycles per pass;
/// `-DKEEP_READS` builds the sparse kernel's kept reads, not yet measured on a GPU).
pub const KERNEL_OPTIONS_ENV: &str = "INBAND_KERNEL_OPTIONS";
/// A file whose CUDA source replaces the built-in activation-sparse kernel: for measuring
/// kernel variants on a GPU machine without rebuilding inband (the tables are the built-in
/// kernel's, so a variant must read them as it does).
pub const KERNEL_SOURCE_ENV: &str = "INBAND_KERNEL_SOURCE";

/// Mirrors the kernel's `Dims`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Dims {
    width: u32,
    conv_dim: u32,
    key_dim: u32,
    dk: u32,
    dv: u32,
    hk: u32,
    hv: u32,
    layers: u32,
    eps: f32,
    kinds: u32,
    fields: u32,
    anchors: u32,
    kind_dim: u32,
    kind_fields: u32,
    kind_nfields: u32,
    kind_offset: u32,
    field_size: u32,
    field_dim: u32,
    anchor_dim: u32,
    anchor_value: u32,
    chip_base: u32,
    scratch: u32,
    act: u32,
    norm_inv: f32,
    anchor_ulp: f32,
    state_floats: u32,
    resident_at: u32,
    resident_words: u32,
    palette_at: u32,
    palettes: u32,
    readers: u32,
    readers_at: u32,
    gateable: u32,
    kept_at: u32,
    kept_words: u32,
    kept_slots: u32,
}

unsafe impl DeviceRepr for Dims {}

/// Mirrors the kernels' `SlotWork`: one machine's work in a launch (a block each).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct SlotLaunch {
    machine: u32,
    input_at: u32,
    n_inputs: u32,
    max_passes: u32,
    stop_mask: u32,
    output_at: u32,
}

unsafe impl DeviceRepr for SlotLaunch {}

/// Flat arrays the kernels read: indices (I), floats (W), and the state's (S) size.
#[derive(Default)]
pub struct Flat {
    i: Vec<u32>,
    w: Vec<f32>,
    state_len: usize,
}

impl Flat {
    fn floats(&mut self, v: &[f32]) -> u32 {
        let at = self.w.len() as u32;
        self.w.extend_from_slice(v);
        at
    }

    /// `v` at an offset that is a multiple of `align` floats (the kernel loads it as
    /// float2 or float4).
    fn floats_aligned(&mut self, v: &[f32], align: usize) -> u32 {
        while !self.w.len().is_multiple_of(align) {
            self.w.push(0.0);
        }
        self.floats(v)
    }

    /// `v` at an offset that is a multiple of `align` words (loaded as uint2 or uint4).
    fn ints_aligned(&mut self, v: &[u32], align: usize) -> u32 {
        while !self.i.len().is_multiple_of(align) {
            self.i.push(0);
        }
        self.ints(v)
    }

    fn ints(&mut self, v: &[u32]) -> u32 {
        let at = self.i.len() as u32;
        self.i.extend_from_slice(v);
        at
    }

    fn state(&mut self, n: usize) -> u32 {
        let at = self.state_len as u32;
        self.state_len += n;
        at
    }
}

/// A kernel's per-layer offset tables as words, and the sizes its shared memory needs.
pub struct LayerTables {
    words: Vec<u32>,
    /// Where each layer's recurrent state starts in S.
    recurrent: Vec<u32>,
    /// Floats of the kernel's two scratch buffers.
    scratch: usize,
    act: usize,
    /// The sparse kernel's tables in shared memory.
    resident: sparse::Resident,
    /// The sparse kernel's kept reads in S.
    kept: sparse::KeptReads,
}

impl LayerTables {
    /// `offsets` (a `#[repr(C)]` struct of u32 fields only) as words.
    fn of<T: Copy>(offsets: &[T], recurrent: Vec<u32>, scratch: usize, act: usize) -> Self {
        assert_eq!(std::mem::size_of::<T>() % 4, 0);
        let n = std::mem::size_of_val(offsets) / 4;
        // SAFETY: T is a repr(C) struct of u32 fields (no padding), read as n words.
        let words = unsafe { std::slice::from_raw_parts(offsets.as_ptr() as *const u32, n) }.to_vec();
        Self {
            words,
            recurrent,
            scratch,
            act,
            resident: sparse::Resident::default(),
            kept: sparse::KeptReads::default(),
        }
    }
}

/// A layer's live neurons (gate and up rows both nonzero) numbered compactly.
fn compact_neurons(layer: &SparseLayer) -> std::collections::HashMap<usize, usize> {
    layer.live_neurons.iter().enumerate().map(|(i, &r)| (r, i)).collect()
}

/// The projection entries a kernel reads besides I and W.
enum Entries {
    /// The reference kernel's ELL columns and weights.
    Ell { cols: CudaSlice<u16>, vals: CudaSlice<f32> },
    /// The sparse kernel's CSC (row, weight bits) pairs.
    Csc(CudaSlice<u32>),
}

/// The chip on a GPU.
pub struct GpuChip {
    stream: Arc<CudaStream>,
    function: CudaFunction,
    dims: CudaSlice<Dims>,
    layers: CudaSlice<u32>,
    i: CudaSlice<u32>,
    entries: Entries,
    w: CudaSlice<f32>,
    /// Every machine's state, `state_floats` each.
    s: CudaSlice<f32>,
    state_floats: usize,
    /// Per machine: passes done, conv ring position, last token, error.
    ctl: CudaSlice<u32>,
    outputs: CudaSlice<u32>,
    shared_bytes: u32,
    /// Machines (blocks of `threads`) it holds.
    slots: usize,
    threads: u32,
    kernel: Kernel,
    /// The boot images loaded last (see [`GpuChip::load_machine`]).
    images: Vec<BootImage>,
    tokens: inband_chip::TokenSpec,
    /// Where each layer's recurrent state starts in S, and its (dk, dv).
    recurrent: Vec<u32>,
    hv: usize,
    dk: usize,
    dv: usize,
}

/// Compiles CUDA `source` with NVRTC for the H200 (with the [`KERNEL_OPTIONS_ENV`]
/// options) and loads it into `ctx`.
fn compile(ctx: &Arc<CudaContext>, source: &str, what: &str, extra: &[String]) -> anyhow::Result<Arc<CudaModule>> {
    let ptx = compile_ptx_with_opts(
        source,
        CompileOptions {
            // The CPU path neither fuses multiply-adds nor flushes denormals.
            fmad: Some(false),
            ftz: Some(false),
            prec_div: Some(true),
            prec_sqrt: Some(true),
            arch: Some("sm_90"),
            options: std::env::var(KERNEL_OPTIONS_ENV)
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .chain(extra.iter().cloned())
                .collect(),
            ..Default::default()
        },
    )
    .with_context(|| format!("NVRTC could not compile {what}"))?;
    ctx.load_module(ptx).with_context(|| format!("loading {what}"))
}

/// A chip kernel's source: the shared header pasted in place of its `#include`
/// (NVRTC is given one string); the sparse kernel's from [`KERNEL_SOURCE_ENV`]'s file
/// where that is set.
fn kernel_source(kernel: Kernel) -> anyhow::Result<String> {
    let body = match (kernel, std::env::var_os(KERNEL_SOURCE_ENV)) {
        (Kernel::Sparse, Some(path)) => std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading the kernel source {} ({KERNEL_SOURCE_ENV})",
                path.to_string_lossy()
            )
        })?,
        (Kernel::Sparse, None) => SPARSE_KERNEL.to_string(),
        (Kernel::Reference, _) => REFERENCE_KERNEL.to_string(),
    };
    Ok(body.replace("#include \"chip_common.cuh\"", COMMON))
}

/// The most fields a token kind may have: the kernels' `KIND_FIELDS`, the width of each
/// kind's row of field ids.
const KIND_FIELDS: usize = 8;

/// The sparse kernel's error code when a norm's factor is not the pinned one.
const ERR_NORM_UNPINNED: u32 = 1;
/// The sparse kernel's error code when a norm had more nonzeros than its list holds.
const ERR_TOO_MANY_NONZEROS: u32 = 2;

/// The projection entries before upload.
enum EntriesHost {
    Ell(reference::EllEntries),
    Csc(sparse::CscEntries),
}

/// The token tables (embedding and token choice) of `spec`, in I and W, as a [`Dims`]
/// whose other fields the caller fills in.
fn token_tables(spec: &ChipSpec, f: &mut Flat) -> anyhow::Result<Dims> {
    if spec.tokens.kinds.len() > 32 || spec.tokens.fields.len() > 64 {
        bail!("the GPU chip kernel handles up to 32 token kinds and 64 fields");
    }
    let kinds = &spec.tokens.kinds;
    let mut d = Dims {
        kinds: kinds.len() as u32,
        fields: spec.tokens.fields.len() as u32,
        anchors: spec.anchors.len() as u32,
        chip_base: spec.hidden as u32,
        ..Default::default()
    };
    d.kind_dim = f.ints(&spec.kind_dims.iter().map(|x| *x as u32).collect::<Vec<_>>());
    let mut kind_fields = Vec::new();
    for kind in kinds {
        if kind.fields.len() > KIND_FIELDS {
            bail!("a chip token kind has more than {KIND_FIELDS} fields");
        }
        let mut row: Vec<u32> = kind.fields.iter().map(|x| *x as u32).collect();
        row.resize(KIND_FIELDS, 0);
        kind_fields.extend(row);
    }
    d.kind_fields = f.ints(&kind_fields);
    d.kind_nfields = f.ints(&kinds.iter().map(|k| k.fields.len() as u32).collect::<Vec<_>>());
    d.kind_offset = f.ints(
        &(0..kinds.len())
            .map(|k| spec.tokens.kind_offset(k) as u32)
            .collect::<Vec<_>>(),
    );
    d.field_size = f.ints(&spec.tokens.fields.iter().map(|x| x.size as u32).collect::<Vec<_>>());
    d.field_dim = f.ints(&spec.field_dims.iter().map(|dims| dims[0] as u32).collect::<Vec<_>>());
    d.anchor_dim = f.ints(&spec.anchors.iter().map(|(dm, _)| *dm as u32).collect::<Vec<_>>());
    d.anchor_value = f.floats(&spec.anchors.iter().map(|(_, v)| *v).collect::<Vec<_>>());
    // The kernels' exact residual norm relies on the anchors being the first chip dims.
    if spec.anchors.iter().enumerate().any(|(i, (dm, _))| *dm != i) {
        bail!("the chip's anchors are not its first dimensions");
    }
    // Field values must sit in consecutive dims for the kernels' indexing.
    for (field, dims) in spec.tokens.fields.iter().zip(&spec.field_dims) {
        if dims.iter().enumerate().any(|(v, dm)| *dm != dims[0] + v) {
            bail!("field {} is not laid out contiguously", field.name);
        }
    }
    Ok(d)
}

/// Checks that the CUDA driver and NVRTC libraries can be loaded.
pub fn available() -> anyhow::Result<()> {
    // SAFETY: only probes whether the shared libraries load.
    let (driver, nvrtc) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    };
    if !driver {
        bail!("no CUDA driver library (libcuda) on this machine: --device cuda needs an NVIDIA GPU and its driver");
    }
    if !nvrtc {
        bail!("no NVRTC library (libnvrtc) on this machine: --device cuda compiles its kernel at run time with NVRTC from the CUDA toolkit");
    }
    Ok(())
}

/// The streaming multiprocessors of GPU `ordinal` (each runs one machine of
/// [`threads_alone`] threads, or several smaller ones, at a time).
pub fn multiprocessors(ordinal: usize) -> anyhow::Result<usize> {
    available()?;
    let ctx = CudaContext::new(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))?;
    Ok(ctx.attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize)
}

/// The threads per machine that the environment variable `name` sets, where it is set
/// (a tuning knob; [`GpuChip::with_slots`] checks the number).
pub fn threads_from_env(name: &str) -> Option<anyhow::Result<u32>> {
    let n = std::env::var(name).ok()?;
    Some(
        n.trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={n:?} is not a number of threads")),
    )
}

/// The threads of a machine that has an SM to itself: for the sparse kernel a warp for
/// each of a layer's value heads (a head's chain is one warp's, and a warp running two
/// heads doubles the layer's longest chain: the 4b shape's 32 heads at 512 threads ran
/// −14 %), at least [`THREADS_ALONE_MIN`]; the reference kernel 1,024, its measured
/// shape. [`THREADS_ENV`] replaces it.
pub fn threads_alone(chip: &ChipModel, kernel: Kernel) -> anyhow::Result<u32> {
    if let Some(n) = threads_from_env(THREADS_ENV) {
        return n;
    }
    let heads = u32::try_from(chip.config.linear_num_value_heads).unwrap_or(u32::MAX);
    Ok(match kernel {
        Kernel::Sparse => heads.saturating_mul(32).clamp(THREADS_ALONE_MIN, 1024),
        Kernel::Reference => 1024,
    })
}

/// What a chip kernel reads, built on the host (no GPU needed): its dimensions, the layer
/// tables, I, W and the projection entries, and the floats of its shared memory before
/// the resident words.
pub struct KernelInputs {
    d: Dims,
    tables: LayerTables,
    f: Flat,
    entries: EntriesHost,
    fixed_floats: usize,
}

impl KernelInputs {
    fn of(chip: &ChipModel, kernel: Kernel) -> anyhow::Result<Self> {
        let ChipLayers::Sparse(layers) = &chip.layers else {
            bail!("the GPU engine is built from the chip's sparse layers")
        };
        let c = &chip.config;
        let width = c.hidden_size;
        let (dk, dv, hk, hv) = (
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.linear_num_key_heads,
            c.linear_num_value_heads,
        );
        if c.linear_conv_kernel_dim != 4 || dk > 128 || dv > 128 || hv > 32 || layers.len() > 16 {
            bail!(
                "the GPU chip kernel handles conv kernel 4, key and value dims up to 128, up to 32 value heads and up to 16 chip layers"
            );
        }
        let spec = &chip.spec;
        let eps = c.rms_norm_eps as f32;
        let mut f = Flat::default();
        let (tables, entries, norm) = match kernel {
            Kernel::Reference => {
                let (t, e) = reference::tables(layers, &mut f)?;
                (t, EntriesHost::Ell(e), None)
            }
            Kernel::Sparse => {
                let norm = sparse::PinnedNorm::of(spec, width, eps)?;
                let (t, e) = sparse::tables(layers, spec, norm, &mut f)?;
                (t, EntriesHost::Csc(e), Some(norm))
            }
        };
        let mut d = token_tables(spec, &mut f)?;
        (d.width, d.conv_dim, d.key_dim) = (width as u32, c.conv_dim() as u32, c.key_dim() as u32);
        (d.dk, d.dv, d.hk, d.hv) = (dk as u32, dv as u32, hk as u32, hv as u32);
        (d.layers, d.eps) = (layers.len() as u32, eps);
        (d.scratch, d.act) = (tables.scratch as u32, tables.act as u32);
        d.resident_at = f.ints(&tables.resident.words);
        d.palette_at = f.floats_aligned(&tables.resident.palettes, 4);
        d.palettes = (tables.resident.palettes.len() / 4) as u32;
        d.readers_at = f.ints(&tables.resident.readers);
        d.gateable = tables.resident.gateable;
        (d.kept_at, d.kept_words, d.kept_slots) = (tables.kept.at, tables.kept.words, tables.kept.slots);
        if let Some(n) = norm {
            (d.norm_inv, d.anchor_ulp) = (n.inv, n.anchor_ulp);
        }
        d.state_floats = u32::try_from(f.state_len.max(1)).context("one machine's state is too large")?;
        let fixed_floats = match kernel {
            // hidden, normed, conv output, head outputs, scratch, activations.
            Kernel::Reference => 2 * width + c.conv_dim() + hv * dv + tables.scratch + tables.act,
            // hidden, the two scratch buffers (the first with a gap after every 128 rows:
            // `spread` in the kernel), the list of dims that may be nonzero and its
            // bitmap; the resident palettes.
            Kernel::Sparse => {
                let spread_rows = tables.scratch + tables.scratch / 128 + 1;
                width + spread_rows + tables.act + sparse::NZ_CAP + width.div_ceil(32) + tables.resident.palettes.len()
            }
        } + tables.words.len();
        Ok(Self {
            d,
            tables,
            f,
            entries,
            fixed_floats,
        })
    }
}

/// What the block's shared memory holds past its fixed buffers, given `most` bytes: the
/// resident words (with the column starts where they fit: the 0.8b shape's, not the
/// 4b's), and, for the sparse kernel where they fit beside the required words, each
/// residual dim's readers byte (`sparse::Resident::readers`; `Listing` in the kernel),
/// which come before the column starts: a layer left out saves more than a scatter that
/// finds its columns in shared memory. Sets `d.resident_words` and `d.readers`; returns
/// the bytes of dynamic shared memory.
fn plan_shared(d: &mut Dims, resident: &sparse::Resident, kernel: Kernel, fixed_floats: usize, most: usize) -> u32 {
    let fits = |words: usize| (fixed_floats + words) * 4 <= most;
    let (all, required) = (resident.words.len(), resident.required);
    let readers = if kernel == Kernel::Sparse && !resident.readers.is_empty() {
        resident.readers.len()
    } else {
        0
    };
    let (words, with_readers) = if readers > 0 && fits(all + readers) {
        (all, true)
    } else if readers > 0 && fits(required + readers) {
        (required, true)
    } else if fits(all) {
        (all, false)
    } else {
        (required, false)
    };
    d.resident_words = words as u32;
    d.readers = with_readers as u32;
    ((fixed_floats + words + if with_readers { readers } else { 0 }) * 4) as u32
}

impl GpuChip {
    /// Uploads `chip`'s layers to GPU `ordinal` and compiles `kernel`: one machine.
    pub fn new(chip: &ChipModel, ordinal: usize, kernel: Kernel) -> anyhow::Result<Self> {
        Self::with_slots(chip, ordinal, kernel, 1, threads_alone(chip, kernel)?)
    }

    /// As [`Self::new`], holding `slots` machines that a launch runs as blocks of
    /// `threads` (a multiple of 32 up to 1024; the kernel is compiled for it).
    pub fn with_slots(
        chip: &ChipModel,
        ordinal: usize,
        kernel: Kernel,
        slots: usize,
        threads: u32,
    ) -> anyhow::Result<Self> {
        available()?;
        if slots == 0 || threads == 0 || threads > 1024 || !threads.is_multiple_of(32) {
            bail!("a GPU chip holds at least one machine, run by 32 to 1024 threads (a multiple of 32)");
        }
        let KernelInputs {
            mut d,
            tables,
            f,
            entries,
            fixed_floats,
        } = KernelInputs::of(chip, kernel)?;
        let c = &chip.config;
        let (dk, dv, hv) = (c.linear_key_head_dim, c.linear_value_head_dim, c.linear_num_value_heads);
        let ctx = CudaContext::new(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))?;
        let stream = ctx.default_stream();
        let module = compile(
            &ctx,
            &kernel_source(kernel)?,
            "the chip kernel",
            &[format!("-DTHREADS={threads}")],
        )?;
        let function = module.load_function("chip_passes")?;
        let most = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as usize;
        let most = most.saturating_sub(function.shared_size_bytes()? as usize);
        let shared_bytes = plan_shared(&mut d, &tables.resident, kernel, fixed_floats, most);
        function.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )?;
        let entries = match entries {
            EntriesHost::Ell(e) => Entries::Ell {
                cols: stream.clone_htod(&e.cols)?,
                vals: stream.clone_htod(&e.vals)?,
            },
            EntriesHost::Csc(e) => Entries::Csc(stream.clone_htod(&e.pairs)?),
        };
        Ok(Self {
            dims: stream.clone_htod(&[d])?,
            layers: stream.clone_htod(&tables.words)?,
            i: stream.clone_htod(&f.i)?,
            w: stream.clone_htod(&f.w)?,
            s: stream
                .alloc_zeros::<f32>(slots * d.state_floats as usize)
                .with_context(|| format!("cannot hold the state of {slots} machines on the GPU"))?,
            state_floats: d.state_floats as usize,
            ctl: stream.alloc_zeros::<u32>(4 * slots)?,
            outputs: stream.alloc_zeros::<u32>(LOOKAHEAD.max(8192))?,
            slots,
            threads,
            kernel,
            images: Vec::new(),
            entries,
            stream,
            function,
            shared_bytes,
            tokens: chip.spec.tokens.clone(),
            recurrent: tables.recurrent,
            hv,
            dk,
            dv,
        })
    }

    /// Runs up to `max` passes of machine 0 (see [`PassEngine::passes`]) and returns the
    /// chosen token ids.
    fn run_ids(&mut self, inputs: &[u32], max: usize, stop_mask: u32) -> anyhow::Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut given = 0;
        while out.len() < max {
            let chunk = &inputs[given.min(inputs.len())..(given + LOOKAHEAD).min(inputs.len())];
            let n = (max - out.len()).min(LOOKAHEAD);
            let ids = self.launch(&[(0, chunk, n, stop_mask)])?.remove(0);
            let stopped = ids.len() < n;
            out.extend(ids);
            given += chunk.len();
            if stopped {
                break; // stopped on a stop kind
            }
        }
        Ok(out)
    }

    /// One launch, a block per work item (machine, inputs, most passes, stop kinds'
    /// mask): each block runs its machine's passes (consuming its inputs first; with
    /// none, its last chosen token); returns each item's chosen token ids.
    fn launch(&mut self, work: &[(usize, &[u32], usize, u32)]) -> anyhow::Result<Vec<Vec<u32>>> {
        let mut table = Vec::with_capacity(work.len());
        let mut inputs = Vec::new();
        let mut outputs_len = 0usize;
        for &(machine, given, max, stop_mask) in work {
            anyhow::ensure!(
                machine < self.slots,
                "machine {machine} of a GPU chip of {}",
                self.slots
            );
            table.push(SlotLaunch {
                machine: machine as u32,
                input_at: inputs.len() as u32,
                n_inputs: given.len() as u32,
                max_passes: max as u32,
                stop_mask,
                output_at: outputs_len as u32,
            });
            inputs.extend_from_slice(given);
            outputs_len += max;
        }
        if work.is_empty() {
            return Ok(Vec::new());
        }
        if inputs.is_empty() {
            inputs.push(0);
        }
        if self.outputs.len() < outputs_len {
            self.outputs = self.stream.alloc_zeros::<u32>(outputs_len)?;
        }
        let table_dev = self.stream.clone_htod(&table)?;
        let input_dev = self.stream.clone_htod(&inputs)?;
        let cfg = LaunchConfig {
            grid_dim: (work.len() as u32, 1, 1),
            block_dim: (self.threads, 1, 1),
            shared_mem_bytes: self.shared_bytes,
        };
        let mut launch = self.stream.launch_builder(&self.function);
        launch.arg(&self.dims).arg(&self.layers).arg(&self.i);
        match &self.entries {
            Entries::Ell { cols, vals } => launch.arg(cols).arg(vals),
            Entries::Csc(pairs) => launch.arg(pairs),
        };
        launch
            .arg(&self.w)
            .arg(&mut self.s)
            .arg(&table_dev)
            .arg(&input_dev)
            .arg(&mut self.outputs)
            .arg(&mut self.ctl);
        // SAFETY: the arguments match the kernel's signature; every block's machine, inputs
        // and outputs lie inside the buffers (checked and sized above).
        unsafe { launch.launch(cfg) }?;
        let ctl = self.stream.clone_dtoh(&self.ctl)?;
        let all = self.stream.clone_dtoh(&self.outputs.slice(0..outputs_len))?;
        work.iter()
            .zip(&table)
            .map(|(&(machine, ..), at)| {
                let c = &ctl[4 * machine..4 * machine + 4];
                Self::check_error(c[3])?;
                let start = at.output_at as usize;
                Ok(all[start..start + c[0] as usize].to_vec())
            })
            .collect()
    }

    /// A machine's error code as an error.
    fn check_error(code: u32) -> anyhow::Result<()> {
        if code == ERR_TOO_MANY_NONZEROS {
            bail!(
                "more than {} residual dims were written in one pass, more than the sparse kernel lists; \
                 run it with --kernel reference",
                sparse::NZ_CAP
            );
        }
        if code == ERR_NORM_UNPINNED {
            bail!(
                "the chip's residual norm left the value its anchors pin, which the sparse kernel relies on; \
                 run it with --kernel reference"
            );
        }
        // (A code this runtime does not know, from a kernel given by INBAND_KERNEL_SOURCE, is
        // an error too: the machine stopped.)
        if code != 0 {
            bail!("the chip kernel stopped the machine with error code {code}");
        }
        Ok(())
    }

    /// Chosen token ids as tokens.
    fn decode(&self, ids: &[u32]) -> anyhow::Result<Vec<ChipToken>> {
        ids.iter()
            .map(|id| {
                self.tokens
                    .decode(*id as usize)
                    .with_context(|| format!("the GPU chose token {id}, outside the chip vocabulary"))
            })
            .collect()
    }

    /// Bytes of GPU memory each machine takes (its state and control words, and a
    /// round's worth of its inputs and chosen tokens).
    pub fn bytes_per_machine(&self, passes_per_round: usize) -> usize {
        4 * (self.state_floats + 4 + 2 * (passes_per_round + 8)) + std::mem::size_of::<SlotLaunch>()
    }

    /// Bytes of GPU memory free now.
    pub fn free_bytes(&self) -> anyhow::Result<usize> {
        Ok(self.stream.context().mem_get_info()?.0)
    }

    /// Makes machine `slot` fresh (all its state zero, no passes, no error) and writes
    /// `rows` into its memories: each layer that holds rows copied whole from the boot
    /// image on the GPU (made and kept the first time these rows are loaded, so a batch
    /// of the same programs uploads each program's image once).
    fn load_machine(&mut self, slot: usize, rows: &[MemoryRow]) -> anyhow::Result<()> {
        anyhow::ensure!(slot < self.slots, "machine {slot} of a GPU chip of {}", self.slots);
        let at = match self.images.iter().position(|im| im.rows == rows) {
            Some(at) => at,
            None => {
                let image = self.boot_image(rows)?;
                if self.images.len() == BOOT_IMAGES {
                    self.images.remove(0);
                }
                self.images.push(image);
                self.images.len() - 1
            }
        };
        let base = slot * self.state_floats;
        self.stream
            .memset_zeros(&mut self.s.slice_mut(base..base + self.state_floats))?;
        self.stream
            .memset_zeros(&mut self.ctl.slice_mut(4 * slot..4 * slot + 4))?;
        let layer_floats = self.hv * self.dk * self.dv;
        let image = &self.images[at];
        for (i, &start) in image.starts.iter().enumerate() {
            let to = base + start;
            self.stream.memcpy_dtod(
                &image.floats.slice(i * layer_floats..(i + 1) * layer_floats),
                &mut self.s.slice_mut(to..to + layer_floats),
            )?;
        }
        Ok(())
    }

    /// The whole recurrent state of each layer `rows` write into (zero elsewhere), on the GPU.
    fn boot_image(&self, rows: &[MemoryRow]) -> anyhow::Result<BootImage> {
        let (starts, host) = recurrent_images(rows, &self.recurrent, self.hv, self.dk, self.dv)?;
        Ok(BootImage {
            rows: rows.to_vec(),
            starts,
            floats: self.stream.clone_htod(&host)?,
        })
    }
}

/// The whole recurrent state (`hv` heads of `dk` rows of `dv`) of each layer `rows` write
/// into, zero elsewhere, one after another, and where each starts in a machine's state
/// (`recurrent`: each layer's start).
fn recurrent_images(
    rows: &[MemoryRow],
    recurrent: &[u32],
    hv: usize,
    dk: usize,
    dv: usize,
) -> anyhow::Result<(Vec<usize>, Vec<f32>)> {
    let layer_floats = hv * dk * dv;
    let mut layers: Vec<usize> = rows.iter().map(|r| r.layer).collect();
    layers.sort_unstable();
    layers.dedup();
    let mut host = vec![0.0f32; layers.len() * layer_floats];
    let mut starts = Vec::with_capacity(layers.len());
    for (i, &layer) in layers.iter().enumerate() {
        starts.push(*recurrent.get(layer).context("a memory row outside the chip's layers")? as usize);
        let image = &mut host[i * layer_floats..(i + 1) * layer_floats];
        for r in rows.iter().filter(|r| r.layer == layer) {
            anyhow::ensure!(
                r.head < hv && r.row < dk && r.values.len() == dv,
                "memory row {} of head {} of layer {layer} is outside the chip",
                r.row,
                r.head
            );
            let at = (r.head * dk + r.row) * dv;
            image[at..at + dv].copy_from_slice(&r.values);
        }
    }
    Ok((starts, host))
}

/// Boot images a GPU chip keeps (the programs of a batch most recently loaded).
const BOOT_IMAGES: usize = 16;

/// The state a boot's rows leave, kept on the GPU: the recurrent state of each layer they
/// write, whole, and where each goes in a machine's state.
struct BootImage {
    rows: Vec<MemoryRow>,
    starts: Vec<usize>,
    floats: CudaSlice<f32>,
}

impl BatchEngine for GpuChip {
    fn slots(&self) -> usize {
        self.slots
    }

    fn load_slot(&mut self, slot: usize, rows: &[MemoryRow]) -> anyhow::Result<()> {
        self.load_machine(slot, rows)
    }

    fn round(&mut self, work: &[SlotWork]) -> anyhow::Result<Vec<Vec<ChipToken>>> {
        let ids: Vec<Vec<u32>> = work
            .iter()
            .map(|w| w.inputs.iter().map(|t| self.tokens.encode(t) as u32).collect())
            .collect();
        let launch: Vec<(usize, &[u32], usize, u32)> = work
            .iter()
            .zip(&ids)
            .map(|(w, ids)| (w.slot, &ids[..], w.max, stop_mask(&w.stop_kinds)))
            .collect();
        self.launch(&launch)?.iter().map(|ids| self.decode(ids)).collect()
    }
}

/// The kernels' mask of stop kinds.
fn stop_mask(kinds: &[usize]) -> u32 {
    kinds.iter().fold(0u32, |m, k| m | 1 << k)
}

impl PassEngine for GpuChip {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        let ids: Vec<u32> = inputs.iter().map(|t| self.tokens.encode(t) as u32).collect();
        let out = self.run_ids(&ids, max, stop_mask(stop_kinds))?;
        self.decode(&out)
    }

    fn memory_rows(&self, layer: usize, head: usize, rows: Range<usize>) -> anyhow::Result<Vec<f32>> {
        anyhow::ensure!(rows.end <= self.dk, "rows {rows:?} past the {} of a GDN head", self.dk);
        let at = self.recurrent[layer] as usize + head * self.dk * self.dv;
        Ok(self
            .stream
            .clone_dtoh(&self.s.slice(at + rows.start * self.dv..at + rows.end * self.dv))?)
    }

    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        self.load_machine(0, rows)
    }

    fn lookahead(&self) -> usize {
        LOOKAHEAD
    }

    /// Machine 0's state floats and control words, as the kernel keeps them.
    fn save_state(&self) -> anyhow::Result<EngineState> {
        Ok(EngineState {
            layout: self.state_layout(),
            floats: vec![(
                "state".to_string(),
                self.stream.clone_dtoh(&self.s.slice(0..self.state_floats))?,
            )],
            words: vec![("control".to_string(), self.stream.clone_dtoh(&self.ctl.slice(0..4))?)],
        })
    }

    fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        state.check_layout(&self.state_layout())?;
        let floats = state.floats("state", self.state_floats)?;
        let words = state.words("control", 4)?;
        if words[3] != 0 {
            bail!(
                "the saved machine had stopped with the chip kernel's error code {}: it cannot be continued",
                words[3]
            );
        }
        self.stream
            .memcpy_htod(floats, &mut self.s.slice_mut(0..self.state_floats))?;
        self.stream.memcpy_htod(words, &mut self.ctl.slice_mut(0..4))?;
        Ok(())
    }
}

impl GpuChip {
    /// The layout [`PassEngine::save_state`] writes: one machine's state floats (where
    /// each layer's GDN state starts) and its four control words, for this kernel.
    fn state_layout(&self) -> String {
        format!(
            "cuda, {:?} kernel: {} state floats, GDN states at {:?}, 4 control words",
            self.kernel, self.state_floats, self.recurrent
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every nonzero code a machine ends with is an error, the ones the runtime does not
    /// name too; zero is none.
    #[test]
    fn a_machines_error_code_is_an_error_unless_zero() {
        assert!(GpuChip::check_error(0).is_ok());
        let message = |code| GpuChip::check_error(code).unwrap_err().to_string();
        assert!(message(ERR_TOO_MANY_NONZEROS).contains("--kernel reference"));
        assert!(message(ERR_NORM_UNPINNED).contains("norm"));
        assert!(message(7).contains("error code 7"));
    }

    /// The readers bits come after the resident words, before the column starts where
    /// shared memory is short; the reference kernel keeps none.
    #[test]
    fn shared_memory_holds_the_readers_before_the_column_starts() {
        let resident = sparse::Resident {
            words: vec![0; 1000],
            palettes: Vec::new(),
            required: 600,
            gateable: 0b10,
            // (100 dims: 25 words of readers bits.)
            readers: vec![0; 25],
        };
        let plan = |kernel, most| {
            let mut d = Dims {
                width: 100,
                ..Dims::default()
            };
            let bytes = plan_shared(&mut d, &resident, kernel, 10, most);
            (bytes, d.resident_words, d.readers)
        };
        assert_eq!(plan(Kernel::Sparse, 4 * 1035), (4 * 1035, 1000, 1));
        assert_eq!(plan(Kernel::Sparse, 4 * 1034), (4 * 635, 600, 1));
        assert_eq!(plan(Kernel::Sparse, 4 * 634), (4 * 610, 600, 0));
        assert_eq!(plan(Kernel::Reference, 4 * 1035), (4 * 1010, 1000, 0));
    }
}

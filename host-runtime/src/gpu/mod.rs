//! The GPU engine: the chip layers' forward pass as one NVRTC-compiled CUDA kernel that
//! runs many passes per launch (embedding, every chip layer, the token choice, feeding
//! the choice back), so the host only reads the chosen tokens. The math is the sparse
//! path's (inband-qwen35 `sparse`), with the layers' nonzero weights in sliced-ELL form in
//! GPU memory; the CUDA libraries are loaded at run time (built without CUDA installed).

use std::sync::Arc;

use anyhow::{bail, Context};
use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use inband_chip::{ChipLayers, ChipModel, ChipToken, PassEngine};
use inband_qwen35::sparse::SparseMatrix;

pub mod text;

const KERNEL: &str = include_str!("chip_kernel.cu");
const THREADS: u32 = 1024;
/// Passes one launch may run (the host reads the chosen tokens after each launch).
const LOOKAHEAD: usize = 1 << 15;
/// Extra NVRTC options for the chip kernel, whitespace-separated: a tuning and
/// diagnosis knob (`-DUNROLL=16`; `-DPROFILE` prints each phase's cycles per pass).
pub const KERNEL_OPTIONS_ENV: &str = "INBAND_KERNEL_OPTIONS";

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
}

/// Mirrors the kernel's `Ell`: one sliced-ELL matrix.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Ell {
    slices: u32,
    base: u32,
    len: u32,
    row_out: u32,
    row_len: u32,
}

/// Mirrors the kernel's `Layer`: offsets into the index (I), weight (W) and state (S) arrays.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LayerOffsets {
    in_gain: u32,
    post_gain: u32,
    xin: Ell,
    n_live: u32,
    live: u32,
    taps: u32,
    conv_state: u32,
    z_at: u32,
    b_at: u32,
    a_at: u32,
    a_log: u32,
    dt_bias: u32,
    norm: u32,
    out: Ell,
    gate_up: Ell,
    n_neur: u32,
    down: Ell,
    rec: u32,
}

unsafe impl DeviceRepr for Dims {}
unsafe impl DeviceRepr for LayerOffsets {}

/// One projection row for the ELL builder: where its sum goes, and its nonzero
/// (column, weight) pairs in ascending column order.
type Row = (u32, Vec<(usize, f32)>);

/// Flat arrays the kernel reads.
#[derive(Default)]
struct Flat {
    i: Vec<u32>,
    w: Vec<f32>,
    /// ELL entries: columns and weights, index for index.
    c: Vec<u16>,
    v: Vec<f32>,
    state_len: usize,
}

impl Flat {
    fn floats(&mut self, v: &[f32]) -> u32 {
        let at = self.w.len() as u32;
        self.w.extend_from_slice(v);
        at
    }

    fn ints(&mut self, v: &[u32]) -> u32 {
        let at = self.i.len() as u32;
        self.i.extend_from_slice(v);
        at
    }

    /// Sliced ELL of `rows`: sorted by length (longest first) so each slice of 32 pads
    /// little, and stored column-major within a slice so a warp's loads are coalesced.
    fn ell(&mut self, mut rows: Vec<Row>) -> anyhow::Result<Ell> {
        rows.sort_by_key(|(_, entries)| std::cmp::Reverse(entries.len()));
        let slices = rows.len().div_ceil(32);
        let (mut base, mut len) = (Vec::new(), Vec::new());
        let (mut row_out, mut row_len) = (vec![u32::MAX; slices * 32], vec![0u32; slices * 32]);
        for (s, slice) in rows.chunks(32).enumerate() {
            let longest = slice.iter().map(|(_, e)| e.len()).max().unwrap_or(0);
            base.push(u32::try_from(self.c.len()).context("chip projections too large for the GPU kernel")?);
            len.push(longest as u32);
            for k in 0..longest {
                for lane in 0..32 {
                    let (col, val) = slice.get(lane).and_then(|(_, e)| e.get(k)).copied().unwrap_or((0, 0.0));
                    self.c
                        .push(u16::try_from(col).context("a projection input wider than 65536 for the GPU kernel")?);
                    self.v.push(val);
                }
            }
            for (lane, (target, entries)) in slice.iter().enumerate() {
                row_out[s * 32 + lane] = *target;
                row_len[s * 32 + lane] = entries.len() as u32;
            }
        }
        Ok(Ell {
            slices: slices as u32,
            base: self.ints(&base),
            len: self.ints(&len),
            row_out: self.ints(&row_out),
            row_len: self.ints(&row_len),
        })
    }

    fn state(&mut self, n: usize) -> u32 {
        let at = self.state_len as u32;
        self.state_len += n;
        at
    }
}

/// Row `r` of `m` as (target, nonzeros).
fn row(m: &SparseMatrix, r: usize, target: usize) -> Row {
    let (cols, vals) = m.row(r);
    let entries = cols.iter().zip(vals).map(|(c, v)| (*c as usize, *v)).collect();
    (target as u32, entries)
}

fn nonempty_rows(m: &SparseMatrix) -> Vec<usize> {
    (0..m.rows).filter(|&r| !m.row_is_empty(r)).collect()
}

/// The chip on a GPU.
pub struct GpuChip {
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    dims: CudaSlice<Dims>,
    layers: CudaSlice<LayerOffsets>,
    i: CudaSlice<u32>,
    ell_cols: CudaSlice<u16>,
    ell_vals: CudaSlice<f32>,
    w: CudaSlice<f32>,
    s: CudaSlice<f32>,
    /// passes done, conv ring position, last token.
    ctl: CudaSlice<u32>,
    outputs: CudaSlice<u32>,
    shared_bytes: u32,
    tokens: inband_chip::TokenSpec,
    /// Where each layer's recurrent state starts in S, and its (dk, dv).
    recurrent: Vec<u32>,
    dk: usize,
    dv: usize,
}

/// Compiles CUDA `source` with NVRTC for the H200 and loads it into `ctx`.
fn compile(ctx: &Arc<CudaContext>, source: &str, what: &str) -> anyhow::Result<Arc<CudaModule>> {
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
                .collect(),
            ..Default::default()
        },
    )
    .with_context(|| format!("NVRTC could not compile {what}"))?;
    ctx.load_module(ptx).with_context(|| format!("loading {what}"))
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

impl GpuChip {
    /// Uploads `chip`'s layers to GPU `ordinal` and compiles the kernel.
    pub fn new(chip: &ChipModel, ordinal: usize) -> anyhow::Result<Self> {
        available()?;
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
        let k = c.linear_conv_kernel_dim;
        if k != 4 || dk > 128 || dv > 128 || hv > 32 {
            bail!("the GPU chip kernel handles conv kernel 4, key and value dims up to 128 and up to 32 value heads");
        }
        let mut f = Flat::default();
        let mut offsets = Vec::new();
        let (mut scratch, mut act) = (0usize, 0usize);
        let mut recurrent = Vec::new();
        for layer in layers {
            let mut o = LayerOffsets {
                in_gain: f.floats(&layer.input_gain),
                post_gain: f.floats(&layer.post_gain),
                ..Default::default()
            };
            let live = &layer.live_channels;
            o.n_live = live.len() as u32;
            o.live = f.ints(&live.iter().map(|x| *x as u32).collect::<Vec<_>>());
            let taps: Vec<f32> = live
                .iter()
                .flat_map(|&ch| layer.conv[ch * k..(ch + 1) * k].to_vec())
                .collect();
            o.taps = f.floats(&taps);
            o.conv_state = f.state(3 * live.len());
            // Scratch for the input projections: live qkv channels | z | b | a; every row
            // is listed (empty ones write 0) because the MLP reuses the scratch.
            (o.z_at, o.b_at, o.a_at) = (
                live.len() as u32,
                (live.len() + hv * dv) as u32,
                (live.len() + hv * dv + hv) as u32,
            );
            let mut xin: Vec<Row> = live.iter().enumerate().map(|(i, &ch)| row(&layer.qkv, ch, i)).collect();
            xin.extend((0..hv * dv).map(|r| row(&layer.z, r, o.z_at as usize + r)));
            xin.extend((0..hv).map(|r| row(&layer.b, r, o.b_at as usize + r)));
            xin.extend((0..hv).map(|r| row(&layer.a, r, o.a_at as usize + r)));
            scratch = scratch.max(xin.len());
            o.xin = f.ell(xin)?;
            o.a_log = f.floats(&layer.a_log);
            o.dt_bias = f.floats(&layer.dt_bias);
            o.norm = f.floats(&layer.norm);
            o.out = f.ell(
                nonempty_rows(&layer.out_proj)
                    .into_iter()
                    .map(|r| row(&layer.out_proj, r, r))
                    .collect(),
            )?;
            // Neurons whose gate and up rows are both nonzero, numbered compactly.
            let neurons = &layer.live_neurons;
            let n = neurons.len();
            o.n_neur = n as u32;
            scratch = scratch.max(2 * n);
            act = act.max(n);
            let mut gate_up: Vec<Row> = neurons
                .iter()
                .enumerate()
                .map(|(i, &r)| row(&layer.gate, r, i))
                .collect();
            gate_up.extend(neurons.iter().enumerate().map(|(i, &r)| row(&layer.up, r, n + i)));
            o.gate_up = f.ell(gate_up)?;
            // Down over the compact numbering (a dead neuron's activation is 0: its terms are dropped).
            let compact: std::collections::HashMap<usize, usize> =
                neurons.iter().enumerate().map(|(i, &r)| (r, i)).collect();
            let down: Vec<Row> = nonempty_rows(&layer.down)
                .into_iter()
                .map(|r| {
                    let (t, e) = row(&layer.down, r, r);
                    (
                        t,
                        e.into_iter()
                            .filter_map(|(col, v)| compact.get(&col).map(|&i| (i, v)))
                            .collect(),
                    )
                })
                .collect();
            o.down = f.ell(down)?;
            o.rec = f.state(hv * dk * dv);
            recurrent.push(o.rec);
            offsets.push(o);
        }
        // Token tables.
        let spec = &chip.spec;
        let mut d = Dims {
            width: width as u32,
            conv_dim: c.conv_dim() as u32,
            key_dim: c.key_dim() as u32,
            dk: dk as u32,
            dv: dv as u32,
            hk: hk as u32,
            hv: hv as u32,
            layers: layers.len() as u32,
            eps: c.rms_norm_eps as f32,
            kinds: spec.tokens.kinds.len() as u32,
            fields: spec.tokens.fields.len() as u32,
            scratch: scratch as u32,
            act: act as u32,
            anchors: spec.anchors.len() as u32,
            chip_base: spec.hidden as u32,
            ..Default::default()
        };
        d.kind_dim = f.ints(&spec.kind_dims.iter().map(|x| *x as u32).collect::<Vec<_>>());
        let mut kf = Vec::new();
        for kind in &spec.tokens.kinds {
            if kind.fields.len() > 8 {
                bail!("a chip token kind has more than 8 fields");
            }
            let mut row: Vec<u32> = kind.fields.iter().map(|x| *x as u32).collect();
            row.resize(8, 0);
            kf.extend(row);
        }
        d.kind_fields = f.ints(&kf);
        d.kind_nfields = f.ints(
            &spec
                .tokens
                .kinds
                .iter()
                .map(|k| k.fields.len() as u32)
                .collect::<Vec<_>>(),
        );
        d.kind_offset = f.ints(
            &(0..spec.tokens.kinds.len())
                .map(|k| spec.tokens.kind_offset(k) as u32)
                .collect::<Vec<_>>(),
        );
        d.field_size = f.ints(&spec.tokens.fields.iter().map(|x| x.size as u32).collect::<Vec<_>>());
        d.field_dim = f.ints(&spec.field_dims.iter().map(|dims| dims[0] as u32).collect::<Vec<_>>());
        d.anchor_dim = f.ints(&spec.anchors.iter().map(|(dm, _)| *dm as u32).collect::<Vec<_>>());
        d.anchor_value = f.floats(&spec.anchors.iter().map(|(_, v)| *v).collect::<Vec<_>>());
        // The kernel's exact residual norm relies on the anchors being the first chip dims.
        if spec.anchors.iter().enumerate().any(|(i, (dm, _))| *dm != i) {
            bail!("the chip's anchors are not its first dimensions");
        }
        // Field values must sit in consecutive dims for the kernel's indexing.
        for (field, dims) in spec.tokens.fields.iter().zip(&spec.field_dims) {
            if dims.iter().enumerate().any(|(v, dm)| *dm != dims[0] + v) {
                bail!("field {} is not laid out contiguously", field.name);
            }
        }

        let ctx = CudaContext::new(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))?;
        let stream = ctx.default_stream();
        let module = compile(&ctx, KERNEL, "the chip kernel")?;
        let kernel = module.load_function("chip_passes")?;
        if spec.tokens.kinds.len() > 32 || spec.tokens.fields.len() > 64 {
            bail!("the GPU chip kernel handles up to 32 token kinds and 64 fields");
        }
        // hidden, normed, conv output, head outputs, scratch, activations, layer table.
        let shared_floats = 2 * width + c.conv_dim() + hv * dv + scratch + act;
        let shared_bytes = (shared_floats * 4 + offsets.len() * std::mem::size_of::<LayerOffsets>()) as u32;
        kernel.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes as i32,
        )?;
        let dims = stream.clone_htod(&[d])?;
        let layers = stream.clone_htod(&offsets)?;
        let i = stream.clone_htod(&f.i)?;
        let w = stream.clone_htod(&f.w)?;
        let ell_cols = stream.clone_htod(&f.c)?;
        let ell_vals = stream.clone_htod(&f.v)?;
        let s = stream.alloc_zeros::<f32>(f.state_len.max(1))?;
        let ctl = stream.clone_htod(&[0u32, 0, 0])?;
        let outputs = stream.alloc_zeros::<u32>(LOOKAHEAD.max(8192))?;
        Ok(Self {
            stream,
            kernel,
            dims,
            layers,
            i,
            ell_cols,
            ell_vals,
            w,
            s,
            ctl,
            outputs,
            shared_bytes,
            tokens: spec.tokens.clone(),
            recurrent,
            dk,
            dv,
        })
    }

    /// Runs up to `max` passes (see [`PassEngine::passes`]) and returns the chosen token ids.
    fn run_ids(&mut self, inputs: &[u32], max: usize, stop_mask: u32) -> anyhow::Result<Vec<u32>> {
        let cap = self.outputs.len();
        let mut out = Vec::new();
        let mut given = 0;
        while out.len() < max {
            let chunk_inputs = &inputs[given.min(inputs.len())..(given + cap).min(inputs.len())];
            let n = (max - out.len()).min(cap);
            let input_dev = self.stream.clone_htod(if chunk_inputs.is_empty() {
                &[0u32][..]
            } else {
                chunk_inputs
            })?;
            let (n_inputs, n_max) = (chunk_inputs.len() as u32, n as u32);
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: self.shared_bytes,
            };
            let mut launch = self.stream.launch_builder(&self.kernel);
            launch
                .arg(&self.dims)
                .arg(&self.layers)
                .arg(&self.i)
                .arg(&self.ell_cols)
                .arg(&self.ell_vals)
                .arg(&self.w)
                .arg(&mut self.s)
                .arg(&input_dev)
                .arg(&n_inputs)
                .arg(&n_max)
                .arg(&stop_mask)
                .arg(&mut self.outputs)
                .arg(&mut self.ctl);
            // SAFETY: the arguments match the kernel's signature and the buffers' sizes.
            unsafe { launch.launch(cfg) }?;
            let ctl = self.stream.clone_dtoh(&self.ctl)?;
            let done = ctl[0] as usize;
            let ids = self.stream.clone_dtoh(&self.outputs.slice(0..done))?;
            out.extend(ids);
            given += chunk_inputs.len();
            if done < n {
                break; // stopped on a stop kind
            }
        }
        Ok(out)
    }
}

impl PassEngine for GpuChip {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        let ids: Vec<u32> = inputs.iter().map(|t| self.tokens.encode(t) as u32).collect();
        let mask = stop_kinds.iter().fold(0u32, |m, k| m | 1 << k);
        let out = self.run_ids(&ids, max, mask)?;
        out.iter()
            .map(|id| {
                self.tokens
                    .decode(*id as usize)
                    .with_context(|| format!("the GPU chose token {id}, outside the chip vocabulary"))
            })
            .collect()
    }

    fn memory_row(&self, layer: usize, head: usize, row: usize) -> anyhow::Result<Vec<f32>> {
        let at = self.recurrent[layer] as usize + (head * self.dk + row) * self.dv;
        Ok(self.stream.clone_dtoh(&self.s.slice(at..at + self.dv))?)
    }

    fn lookahead(&self) -> usize {
        LOOKAHEAD
    }
}

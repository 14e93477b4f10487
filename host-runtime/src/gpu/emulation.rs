//! The sparse chip kernel run on the CPU: its CUDA source compiled by the system's C++
//! compiler against `host-runtime/emulator/cuda_on_cpu.hpp` (a block's threads as fibers
//! that switch where they wait on each other), on the tables [`KernelInputs`] builds for
//! the GPU. It tests the kernel's logic where no GPU is: the machine's token stream must
//! be the CPU engine's (`tests/tests/kernel_on_cpu.rs`). Speed is not its business.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};
use inband_chip::{ChipModel, MemoryRow};

use super::{kernel_source, plan_shared, recurrent_images, EntriesHost, KernelInputs};
use crate::vm::CudaKernel as Kernel;

const HEADER: &str = include_str!("../../emulator/cuda_on_cpu.hpp");
const RUNNER: &str = include_str!("../../emulator/run_kernel.cpp");

/// One launch of the kernel on the machine: the token ids it consumes first, the most
/// passes it runs, and the kinds that stop it (a mask) once its inputs are used up.
#[derive(Debug, Clone)]
pub struct Launch {
    pub inputs: Vec<u32>,
    pub max_passes: usize,
    pub stop_mask: u32,
}

/// The order the emulator's scheduler takes a block's threads in, each time round: a
/// kernel whose tokens depend on it has two threads touching the same data with no
/// barrier between them (the GPU's interleavings differ from run to run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    InOrder,
    Reversed,
    /// Shuffled from this seed (2 or more).
    Shuffled(u64),
}

/// The sparse kernel (the built-in one, or `INBAND_KERNEL_SOURCE`'s, with
/// `INBAND_KERNEL_OPTIONS`), compiled for the CPU, with the tables of the chip it runs.
pub struct EmulatedKernel {
    /// The compiled runner and, beside it, the chip's tables.
    dir: PathBuf,
    /// One machine's state floats, and where each layer's recurrent state starts.
    state_floats: usize,
    recurrent: Vec<u32>,
    /// The layers the kernel may leave out on a pass no listed dim reaches (a bit each), or
    /// `None` where shared memory has no room for the readers bits.
    pub gateable: Option<u32>,
    /// The value heads that keep their reads (`sparse::keeps_reads`): a slot each in S.
    pub kept_slots: u32,
}

impl EmulatedKernel {
    /// Compiles the kernel for blocks of `threads` into `dir` with `c++` (g++ or clang++)
    /// and writes `chip`'s tables beside it, its shared memory planned as the GPU plans it
    /// from `shared` bytes (`usize::MAX`: all it can use, as the 0.8b shape has on the GPU;
    /// the 4b shape's column starts do not fit in a GPU block's). `options` go to the
    /// compiler after `INBAND_KERNEL_OPTIONS`'s (`-DKEEP_READS`).
    pub fn build(dir: &Path, threads: u32, chip: &ChipModel, shared: usize, options: &[&str]) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // A block's `extern __shared__` array is the runner's buffer.
        const DYNAMIC: &str = "extern __shared__ float4 sh4[];";
        let source = kernel_source(Kernel::Sparse)?;
        if !source.contains(DYNAMIC) {
            bail!(
                "the kernel declares its dynamic shared memory otherwise than `{DYNAMIC}`, which the emulator replaces"
            );
        }
        let source = source.replace(DYNAMIC, "float4 *sh4 = emu::dynamic_shared<float4>();");
        for (name, text) in [
            ("kernel.cu", &source[..]),
            ("cuda_on_cpu.hpp", HEADER),
            ("run_kernel.cpp", RUNNER),
        ] {
            std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
        }
        let binary = dir.join("run_kernel");
        let from_env = std::env::var(super::KERNEL_OPTIONS_ENV).unwrap_or_default();
        let out = Command::new("c++")
            .args(["-std=c++17", "-O2", "-w", "-fno-strict-aliasing", "-ffp-contract=off"])
            .arg(format!("-DTHREADS={threads}"))
            .arg("-DKERNEL_FILE=\"kernel.cu\"")
            .args(from_env.split_whitespace())
            .args(options)
            .arg("-o")
            .arg(&binary)
            .arg(dir.join("run_kernel.cpp"))
            .output()
            .context("running c++ (the system's C++ compiler)")?;
        if !out.status.success() {
            bail!(
                "c++ could not compile the kernel for the CPU:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let (state_floats, recurrent, gateable, kept_slots) = write_tables(chip, dir, shared)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            state_floats,
            recurrent,
            gateable,
            kept_slots,
        })
    }

    /// Runs `launches` one after another on one machine of the chip whose GDN memories
    /// hold `rows` (a boot by loading state), its files in `dir`, its threads taken in the
    /// order `schedule` says; returns each launch's chosen token ids.
    pub fn run(
        &self,
        chip: &ChipModel,
        rows: &[MemoryRow],
        launches: &[Launch],
        dir: &Path,
        schedule: Schedule,
    ) -> anyhow::Result<Vec<Vec<u32>>> {
        let s = booted_state(chip, self.state_floats, &self.recurrent, rows)?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, bytes) in [("s", floats(&s)), ("launches", launches_text(launches).into_bytes())] {
            std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))?;
        }
        let schedule = match schedule {
            Schedule::InOrder => 0,
            Schedule::Reversed => 1,
            Schedule::Shuffled(seed) => seed.max(2),
        };
        let out = Command::new(self.dir.join("run_kernel"))
            .arg(&self.dir)
            .arg(dir)
            .arg(schedule.to_string())
            .output()
            .context("running the emulated kernel")?;
        if !out.status.success() {
            bail!(
                "the emulated kernel failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        chosen_tokens(&String::from_utf8_lossy(&out.stdout))
    }
}

/// Writes what the kernel reads of `chip` into `dir` (dims, layers, i, e, w: little-endian
/// words; shared: its dynamic shared memory's bytes, planned from `most`); returns one
/// machine's state floats, where each layer's recurrent state starts, the layers it may
/// leave out (`None` without the readers bits) and its kept reads' slots.
fn write_tables(chip: &ChipModel, dir: &Path, most: usize) -> anyhow::Result<(usize, Vec<u32>, Option<u32>, u32)> {
    let KernelInputs {
        mut d,
        tables,
        f,
        entries,
        fixed_floats,
    } = KernelInputs::of(chip, Kernel::Sparse)?;
    let EntriesHost::Csc(entries) = entries else {
        bail!("the sparse kernel's entries are CSC pairs")
    };
    let shared = plan_shared(&mut d, &tables.resident, Kernel::Sparse, fixed_floats, most);
    // SAFETY: Dims is a repr(C) struct of 4-byte fields, read as its bytes.
    let dims = unsafe { std::slice::from_raw_parts(&d as *const _ as *const u8, std::mem::size_of_val(&d)) };
    for (name, bytes) in [
        ("dims", dims.to_vec()),
        ("layers", words(&tables.words)),
        ("i", words(&f.i)),
        ("e", words(&entries.pairs)),
        ("w", floats(&f.w)),
        ("shared", shared.to_string().into_bytes()),
    ] {
        std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))?;
    }
    Ok((
        d.state_floats as usize,
        tables.recurrent,
        (d.readers != 0).then_some(d.gateable),
        d.kept_slots,
    ))
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One machine's state floats (`len`), its GDN memories holding `rows` (each layer's
/// recurrent state starting at `recurrent`), zero elsewhere.
fn booted_state(chip: &ChipModel, len: usize, recurrent: &[u32], rows: &[MemoryRow]) -> anyhow::Result<Vec<f32>> {
    let c = &chip.config;
    let (hv, dk, dv) = (c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim);
    let (starts, images) = recurrent_images(rows, recurrent, hv, dk, dv)?;
    let mut s = vec![0.0f32; len];
    for (image, start) in images.chunks(hv * dk * dv).zip(starts) {
        s[start..start + image.len()].copy_from_slice(image);
    }
    Ok(s)
}

/// The runner's `launches` file: a line each.
fn launches_text(launches: &[Launch]) -> String {
    let mut text = String::new();
    for l in launches {
        let _ = write!(text, "{} {} {}", l.inputs.len(), l.max_passes, l.stop_mask);
        for t in &l.inputs {
            let _ = write!(text, " {t}");
        }
        text.push('\n');
    }
    text
}

/// Each launch's chosen token ids, from the runner's lines (passes, error code, ids).
fn chosen_tokens(output: &str) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut chosen = Vec::new();
    for line in output.lines() {
        let v: Vec<u32> = line.split_whitespace().map(|w| w.parse()).collect::<Result<_, _>>()?;
        let (&passes, rest) = v.split_first().context("an empty line")?;
        let (&error, ids) = rest.split_first().context("no error code")?;
        if error != 0 {
            bail!("the emulated kernel stopped with error {error}");
        }
        anyhow::ensure!(ids.len() == passes as usize, "{passes} passes but {} tokens", ids.len());
        chosen.push(ids.to_vec());
    }
    Ok(chosen)
}

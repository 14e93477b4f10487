//! Many programs in one chip at once: `inband run --batch` and `inband bench --batch`.
//! The machines share the chip's weights, each with its own state; on a GPU a round of
//! passes is one launch with a block per machine (the single-stream kernel, run by
//! several blocks), driven by [`inband_chip::rv32im::batch`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use inband_chip::rv32im::batch::{run_batch, BatchOptions, BatchStats, Job, JobResult};
use inband_chip::rv32im::load::BootLoader;
use inband_chip::rv32im::machine::ChipError;
use inband_chip::{BatchEngine, ChipModel, ChipRunner, EachOnItsOwn};
use inband_firmware::ProgramImage;
use inband_golden::{Environment, Machine, RunEnd};

use crate::program;
use crate::vm::{ChipSource, Device};

/// Machines a CPU batch holds (it steps them one after another; each holds its own
/// state, about 11 MB at the 0.8b shape).
pub const CPU_MACHINES: usize = 16;

/// Threads per machine once machines outnumber the SMs: several machines share an SM
/// (measured on the H200 at 1,024 machines, aggregate passes/s: 512 threads 1.27–1.30 M,
/// 256 1.16–1.18 M, 192 1.06 M, 128 0.80 M, 1,024 (one machine an SM) 0.82 M).
pub const GPU_THREADS_SHARED: u32 = 512;

/// Replaces the threads per machine (32 to 1024, a multiple of 32): a tuning knob, for
/// measuring how many machines an SM runs best.
pub const GPU_THREADS_ENV: &str = "INBAND_BATCH_THREADS";

/// The threads per machine of the GPU's batch kernel for `machines` machines: while
/// every machine has an SM of its own, the single stream's block
/// ([`crate::gpu::threads_alone`]).
#[cfg(feature = "cuda")]
fn gpu_threads(
    chip: &ChipModel,
    kernel: crate::vm::CudaKernel,
    ordinal: usize,
    machines: usize,
) -> anyhow::Result<u32> {
    if let Some(n) = crate::gpu::threads_from_env(GPU_THREADS_ENV) {
        return n;
    }
    Ok(if machines <= crate::gpu::multiprocessors(ordinal)? {
        crate::gpu::threads_alone(chip, kernel)?
    } else {
        GPU_THREADS_SHARED
    })
}

/// How many machines a batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machines {
    Count(usize),
    /// As many as the device's free memory holds.
    Max,
}

impl Machines {
    /// `N` or `max`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "max" => Ok(Self::Max),
            _ => match s.parse() {
                Ok(0) | Err(_) => Err(format!("{s:?} is not a number of machines (1, 2, … or max)")),
                Ok(n) => Ok(Self::Count(n)),
            },
        }
    }
}

/// A batch engine of `machines` machines for `chip` on `device`.
pub fn engine<'a>(chip: &'a ChipModel, device: Device, machines: usize) -> anyhow::Result<Box<dyn BatchEngine + 'a>> {
    match device {
        Device::Cpu => Ok(Box::new(EachOnItsOwn(
            (0..machines)
                .map(|_| ChipRunner::new(chip))
                .collect::<anyhow::Result<Vec<_>>>()?,
        ))),
        #[cfg(feature = "cuda")]
        Device::Cuda(ordinal, kernel) => Ok(Box::new(crate::gpu::GpuChip::with_slots(
            chip,
            ordinal,
            kernel,
            machines,
            gpu_threads(chip, kernel, ordinal, machines)?,
        )?)),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(..) => anyhow::bail!(
            "this inband was built without CUDA support: build it with `scripts/build-gpu.sh` (cargo feature `cuda`)"
        ),
    }
}

/// What one machine costs on `device` and how many fit: (bytes per machine, machines).
/// On a GPU: its state, control words and a round's inputs and outputs, against the
/// memory free once the chip's weights are there (a tenth kept spare). On the CPU: the
/// state of [`CPU_MACHINES`] machines.
pub fn capacity(chip: &ChipModel, device: Device) -> anyhow::Result<(usize, usize)> {
    match device {
        Device::Cpu => {
            let c = &chip.config;
            let per_layer = c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
            Ok((4 * per_layer * chip.layer_count(), CPU_MACHINES))
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(ordinal, kernel) => {
            let one = crate::gpu::GpuChip::with_slots(chip, ordinal, kernel, 1, GPU_THREADS_SHARED)?;
            let per = one.bytes_per_machine(BatchOptions::default().passes_per_round);
            let free = one.free_bytes()?;
            Ok((per, (free / 10 * 9 / per).max(1)))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(..) => anyhow::bail!(
            "this inband was built without CUDA support: build it with `scripts/build-gpu.sh` (cargo feature `cuda`)"
        ),
    }
}

/// A program's name in tables and result lines: its file name.
pub fn program_name(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// How the golden reference ends `image` within `budget`, and its console.
fn golden(image: &ProgramImage, budget: u64) -> (RunEnd, Vec<u8>) {
    let mut g = Machine::new(image, Environment::BareMetal);
    let end = g.run(budget);
    (end, g.console)
}

/// A finished batch.
pub struct BatchRun {
    pub results: Vec<Result<JobResult, ChipError>>,
    pub stats: BatchStats,
    pub seconds: f64,
}

impl BatchRun {
    /// Passes after boot over every machine.
    pub fn passes(&self) -> u64 {
        self.results.iter().flatten().map(|r| r.counts.passes).sum()
    }
}

/// Runs `jobs` on `engine` (each machine's token stream recorded with `trace`).
pub fn run(
    chip: &ChipModel,
    engine: &mut dyn BatchEngine,
    loader: &mut BootLoader,
    jobs: &[Job],
    trace: bool,
) -> anyhow::Result<BatchRun> {
    let start = Instant::now();
    let options = BatchOptions {
        trace,
        ..Default::default()
    };
    let (results, stats) = run_batch(chip, engine, loader, jobs, options, |_, _| {})?;
    Ok(BatchRun {
        results,
        stats,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// How `inband run --batch` runs and reports.
pub struct RunBatch<'a> {
    pub programs: &'a [PathBuf],
    pub source: &'a ChipSource,
    pub device: Device,
    pub machines: Option<Machines>,
    pub budget: u64,
    /// Compare each program's end and console with the golden reference's.
    pub verify: bool,
    /// Write the token stream of each program's first machine to FOLDER/NAME.trace.
    pub trace: Option<&'a Path>,
    pub stats: bool,
    pub toolchain: Option<&'a Path>,
    /// The C library sources are built with.
    pub libc: inband_firmware::Libc,
}

/// What `inband run --batch` found: whether every program exited with 0 and whether
/// every verified one matched golden.
pub struct BatchVerdict {
    pub all_exited_zero: bool,
    pub all_match_golden: bool,
}

/// `inband run --batch`: builds every program, runs them all as one batch, then prints
/// each one's console output and a result line, in the order given.
pub fn run_programs(r: RunBatch) -> anyhow::Result<BatchVerdict> {
    let images: Vec<Arc<ProgramImage>> = r
        .programs
        .iter()
        .map(|p| Ok(Arc::new(program::load_program(p, r.toolchain, r.libc)?)))
        .collect::<anyhow::Result<_>>()?;
    let chip = r.source.open()?;
    let machines = match r.machines {
        Some(Machines::Count(n)) => n,
        Some(Machines::Max) => capacity(&chip, r.device)?.1,
        None => images.len().min(capacity(&chip, r.device)?.1),
    };
    let mut engine = engine(&chip, r.device, machines)?;
    let mut loader = BootLoader::new(&chip)?;
    let jobs: Vec<Job> = images
        .iter()
        .map(|image| Job {
            image: image.clone(),
            budget: r.budget,
        })
        .collect();
    let batch = run(&chip, engine.as_mut(), &mut loader, &jobs, r.trace.is_some())?;
    if let Some(dir) = r.trace {
        write_traces(dir, r.programs, &batch)?;
    }
    let mut verdict = BatchVerdict {
        all_exited_zero: true,
        all_match_golden: true,
    };
    for ((path, job), result) in r.programs.iter().zip(&jobs).zip(&batch.results) {
        let name = program_name(path);
        println!("== {name}");
        let line = match result {
            Ok(result) => {
                print!("{}", String::from_utf8_lossy(&result.console));
                if !result.console.is_empty() && !result.console.ends_with(b"\n") {
                    println!();
                }
                verdict.all_exited_zero &= result.end == RunEnd::Exited(0);
                let mut line = format!(
                    "{}, {} instructions, {} forward passes",
                    end_text(result.end),
                    result.counts.retired,
                    result.counts.passes
                );
                if r.verify {
                    let same = golden(&job.image, job.budget) == (result.end, result.console.clone());
                    verdict.all_match_golden &= same;
                    line += if same {
                        "; golden: same end and output"
                    } else {
                        "; golden: DIFFERENT end or output"
                    };
                }
                line
            }
            Err(e) => {
                verdict.all_exited_zero = false;
                verdict.all_match_golden = false;
                format!("failed: {e}")
            }
        };
        println!("-- {name}: {line}");
    }
    if r.stats {
        let s = batch.stats;
        eprintln!(
            "stats: machines={machines} programs={} forward_passes={} seconds={:.3} aggregate_passes_per_s={:.0} \
             (engine {:.3} s, boot {:.3} s, host {:.3} s, {} rounds)",
            jobs.len(),
            batch.passes(),
            batch.seconds,
            batch.passes() as f64 / batch.seconds.max(1e-9),
            s.engine_seconds,
            s.boot_seconds,
            s.host_seconds,
            s.rounds
        );
    }
    Ok(verdict)
}

/// How a run ended, in a result line.
fn end_text(end: RunEnd) -> String {
    match end {
        RunEnd::Exited(code) => format!("exit {code}"),
        RunEnd::Trapped(trap) => trap.to_string(),
        RunEnd::BudgetExhausted { pc } => format!("instruction budget exhausted (next pc {pc:#010x})"),
    }
}

/// Writes the token stream of each program's first machine to `dir`/STEM.trace (the
/// format of `inband run --trace`).
fn write_traces(dir: &Path, programs: &[PathBuf], batch: &BatchRun) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut written = std::collections::HashSet::new();
    for (path, result) in programs.iter().zip(&batch.results) {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let (Ok(result), true) = (result, written.insert(stem.clone())) {
            crate::vm::write_trace(&dir.join(format!("{stem}.trace")), &result.trace)?;
        }
    }
    Ok(())
}

/// Machine counts of the scaling table up to `largest`: 1, 8, 64, 512, 1,024, … and
/// `largest` itself.
fn scaling_sizes(largest: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = [1usize, 8, 64, 512]
        .into_iter()
        .chain(std::iter::successors(Some(1024usize), |n| n.checked_mul(2)))
        .take_while(|n| *n < largest)
        .collect();
    sizes.push(largest);
    sizes
}

/// `inband bench --batch`: the programs cycled over 1, 8, 64, … machines up to `machines`,
/// every machine's output checked against golden's, and the scaling table.
pub fn bench(
    programs: &[PathBuf],
    source: &ChipSource,
    device: Device,
    machines: Machines,
    toolchain: Option<&Path>,
) -> anyhow::Result<()> {
    let chip = source.open()?;
    let images: Vec<(String, Arc<ProgramImage>)> = programs
        .iter()
        .map(|p| {
            Ok((
                program_name(p),
                Arc::new(program::load_program(p, toolchain, Default::default())?),
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let (per_machine, fits) = capacity(&chip, device)?;
    let largest = match machines {
        Machines::Count(n) => n,
        Machines::Max => fits,
    };
    println!(
        "one machine: {:.1} MB on {} ({} machines fit)\n",
        per_machine as f64 / 1e6,
        crate::bench::device_name(device),
        fits
    );
    let budget = crate::bench::BENCH_BUDGET;
    let goldens: Vec<(RunEnd, Vec<u8>)> = images.iter().map(|(_, image)| golden(image, budget)).collect();
    let mut loader = BootLoader::new(&chip)?;
    println!("| machines | programs | forward passes | seconds | aggregate passes/s | passes/s per machine | engine s | boot s | host s |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for n in scaling_sizes(largest) {
        let pick: Vec<usize> = (0..n).map(|i| i % images.len()).collect();
        let jobs: Vec<Job> = pick
            .iter()
            .map(|&p| Job {
                image: images[p].1.clone(),
                budget,
            })
            .collect();
        // An engine per size: the kernel's threads per machine depend on it.
        let mut engine = engine(&chip, device, n)?;
        let batch = run(&chip, engine.as_mut(), &mut loader, &jobs, false)?;
        drop(engine);
        for (&p, result) in pick.iter().zip(&batch.results) {
            let name = &images[p].0;
            let result = result.as_ref().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            if (result.end, &result.console) != (goldens[p].0, &goldens[p].1) {
                anyhow::bail!(
                    "{name} in a batch of {n}: ended {:?} with other output than golden ({:?})",
                    result.end,
                    goldens[p].0
                );
            }
        }
        let passes = batch.passes();
        let rate = passes as f64 / batch.seconds.max(1e-9);
        let s = batch.stats;
        println!(
            "| {n} | {} | {passes} | {:.2} | {rate:.0} | {:.0} | {:.2} | {:.2} | {:.2} |",
            images.len(),
            batch.seconds,
            rate / n as f64,
            s.engine_seconds,
            s.boot_seconds,
            s.host_seconds
        );
    }
    Ok(())
}

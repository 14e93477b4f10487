//! VM mode: boot a program into the RV32IM chip layers and let the layer math run it,
//! streaming its console output, optionally in lockstep with the golden reference.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use std::time::Instant;

use inband_chip::engine::{Trace, Traced};
use inband_chip::rv32im::load::BootLoader;
use inband_chip::rv32im::machine::{ChipError, ChipMachine, RunCounts};
use inband_chip::rv32im::saved::SavedMachine;
use inband_chip::{ChipModel, ChipRunner, PassEngine};
use inband_firmware::ProgramImage;
use inband_golden::{Environment, Machine, RunEnd};

use crate::progress::RunProgress;

/// Where the chip layers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// The sparse path of the project's layer math, on the CPU.
    Cpu,
    /// A CUDA kernel, on GPU `ordinal`.
    Cuda(usize, CudaKernel),
}

/// Which CUDA kernel runs the chip layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CudaKernel {
    /// Driven by the residual's nonzeros: touches only the weights a pass uses.
    #[default]
    Sparse,
    /// Every projection row by row, in one thread block: the yardstick.
    Reference,
}

impl Device {
    /// `cpu`, `cuda` (GPU 0) or `cuda:N`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0, CudaKernel::default())),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(|n| Self::Cuda(n, CudaKernel::default()))
                .ok_or_else(|| format!("unknown device {s:?} (cpu, cuda, cuda:N)")),
        }
    }

    /// This device running `kernel` (where it is a GPU).
    pub fn with_kernel(self, kernel: CudaKernel) -> Self {
        match self {
            Self::Cuda(n, _) => Self::Cuda(n, kernel),
            Self::Cpu => Self::Cpu,
        }
    }
}

/// Where a chip comes from.
#[derive(Debug, Clone)]
pub enum ChipSource {
    /// The chip layers of a spliced checkpoint (made by `weight-surgery splice`).
    Checkpoint(PathBuf),
    /// A chip pack (made by `weightgen`).
    Pack(PathBuf),
}

impl ChipSource {
    /// The checkpoint if given, else the pack; None when neither is.
    pub fn from_options(model: Option<&Path>, chip: Option<&Path>) -> Option<Self> {
        match (model, chip) {
            (Some(dir), _) => Some(Self::Checkpoint(dir.to_path_buf())),
            (None, Some(dir)) => Some(Self::Pack(dir.to_path_buf())),
            (None, None) => None,
        }
    }

    /// Opens the chip: reads the manifest and the chip layers (nothing is compiled).
    pub fn open(&self) -> anyhow::Result<ChipModel> {
        match self {
            Self::Checkpoint(dir) => crate::spliced::SplicedModel::open(dir)?.chip(),
            Self::Pack(dir) => {
                ChipModel::from_pack(dir).with_context(|| format!("cannot open the chip pack {}", dir.display()))
            }
        }
    }
}

/// A pass engine for `chip` on `device`.
pub fn engine<'a>(chip: &'a ChipModel, device: Device) -> anyhow::Result<Box<dyn PassEngine + 'a>> {
    match device {
        Device::Cpu => Ok(Box::new(ChipRunner::new(chip)?)),
        #[cfg(feature = "cuda")]
        Device::Cuda(ordinal, kernel) => Ok(Box::new(crate::gpu::GpuChip::new(chip, ordinal, kernel)?)),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(..) => anyhow::bail!(
            "this inband was built without CUDA support: build it with `scripts/build-gpu.sh` (cargo feature `cuda`)"
        ),
    }
}

/// Writes a trace as text: one pass per line, `input chosen` token ids (chip vocabulary).
pub(crate) fn write_trace(path: &Path, trace: &[(u32, u32)]) -> std::io::Result<()> {
    let mut text = String::with_capacity(trace.len() * 14);
    for (input, chosen) in trace {
        text.push_str(&format!("{input} {chosen}\n"));
    }
    std::fs::write(path, text)
}

/// What a VM run reports.
pub struct VmRun {
    pub end: RunEnd,
    pub counts: RunCounts,
    /// Seconds spent after boot.
    pub run_seconds: f64,
    pub boot_seconds: f64,
    /// Seconds spent making the engine (uploading the chip, for the GPU) before the first pass.
    pub engine_seconds: f64,
    /// The run was stopped by its wall-clock limit or a stop asked for ([`stop_asked`]).
    pub timed_out: bool,
    /// The machine was saved where it stopped ([`RunPlan::save_state`]).
    pub saved: bool,
}

/// Instructions between console flushes and wall-clock checks on the chip: about a
/// second at the CPU engine's speed.
pub const CHIP_CHUNK: u64 = 1 << 10;

/// The same for the golden reference: about 20 ms at its ~44 M instructions/s.
pub const GOLDEN_CHUNK: u64 = 1 << 20;

/// A machine whose console output is streamed while it runs: the golden reference, or
/// the chip (checked against golden or not).
pub trait Streamed {
    type Error;
    /// Runs at most `n` more instructions.
    fn run_for(&mut self, n: u64) -> Result<RunEnd, Self::Error>;
    /// Instructions retired so far.
    fn retired(&self) -> u64;
    /// Everything printed so far.
    fn console(&self) -> &[u8];
    /// Forward passes run after boot (0 where the machine runs none).
    fn passes(&self) -> u64 {
        0
    }
}

impl Streamed for Machine {
    type Error = std::convert::Infallible;
    fn run_for(&mut self, n: u64) -> Result<RunEnd, Self::Error> {
        Ok(self.run(n))
    }
    fn retired(&self) -> u64 {
        self.instret
    }
    fn console(&self) -> &[u8] {
        &self.console
    }
}

/// The chip, with the golden reference it is checked against (if any).
struct Checked<'m, 'a> {
    machine: &'m mut ChipMachine<'a>,
    golden: Option<Machine>,
}

impl Streamed for Checked<'_, '_> {
    type Error = ChipError;
    fn run_for(&mut self, n: u64) -> Result<RunEnd, ChipError> {
        self.machine.run(n, self.golden.as_mut())
    }
    fn retired(&self) -> u64 {
        self.machine.counts.retired
    }
    fn console(&self) -> &[u8] {
        &self.machine.console
    }
    fn passes(&self) -> u64 {
        self.machine.counts.passes
    }
}

/// Set once a stop is asked for ([`stop_on_interrupt`]'s Ctrl-C, or [`ask_to_stop`]): a
/// run then stops between two chunks as at its wall-clock limit, so that a machine that
/// is to be saved is saved rather than lost.
static STOP_ASKED: AtomicBool = AtomicBool::new(false);

/// Makes Ctrl-C (and SIGTERM, SIGHUP) stop the run between two chunks, as its time limit
/// would (a second one ends the process at once, with status 130).
pub fn stop_on_interrupt() {
    let _ = ctrlc::set_handler(|| {
        if STOP_ASKED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("inband: interrupted: stopping after the current chunk of instructions (again to quit at once)");
    });
}

/// Asks the running (or next) run to stop between two chunks, as Ctrl-C does once
/// [`stop_on_interrupt`] is installed; `false` withdraws the request.
pub fn ask_to_stop(stop: bool) {
    STOP_ASKED.store(stop, Ordering::SeqCst);
}

/// Whether a stop was asked for (the run that stopped was interrupted).
pub fn stop_asked() -> bool {
    STOP_ASKED.load(Ordering::SeqCst)
}

/// Runs `machine` within `limits`, `chunk` instructions at a time, writing its new console
/// bytes to `out` and redrawing `progress` after each chunk. Returns how it ended and
/// whether the wall-clock limit or a stop asked for (checked between chunks) stopped it.
pub fn stream<M: Streamed>(
    machine: &mut M,
    limits: Limits,
    chunk: u64,
    out: &mut dyn Write,
    progress: &mut RunProgress,
) -> Result<(RunEnd, bool), M::Error> {
    let start = Instant::now();
    // A continued machine printed its earlier output in the run that saved it.
    let mut printed = machine.console().len();
    loop {
        let remaining = limits.instructions.saturating_sub(machine.retired());
        let result = machine.run_for(remaining.min(chunk));
        let new = &machine.console()[printed..];
        if !new.is_empty() {
            progress.suspend(|| {
                let _ = out.write_all(new);
                let _ = out.flush();
            });
        }
        printed = machine.console().len();
        progress.update(machine.retired(), machine.passes());
        match result? {
            RunEnd::BudgetExhausted { pc } if machine.retired() < limits.instructions => {
                if limits.wall.is_some_and(|wall| start.elapsed() > wall) || stop_asked() {
                    return Ok((RunEnd::BudgetExhausted { pc }, true));
                }
            }
            end => return Ok((end, false)),
        }
    }
}

/// How long a run may go on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Retired instructions.
    pub instructions: u64,
    /// Wall-clock time after boot (None: no limit).
    pub wall: Option<std::time::Duration>,
}

impl Limits {
    /// At most `instructions`, however long they take.
    pub fn instructions(instructions: u64) -> Self {
        Self {
            instructions,
            wall: None,
        }
    }
}

/// How a chip run starts: a program booted, or a saved machine continued.
#[derive(Debug, Clone, Copy)]
pub enum Start<'s> {
    Boot(Boot),
    /// A machine saved by an earlier run of the same program in the same chip (the
    /// engine must have the layout that saved it: the same device kind and kernel).
    Resume(&'s SavedMachine),
}

/// What a chip run does, beside the program it runs.
#[derive(Debug, Clone, Copy)]
pub struct RunPlan<'p> {
    pub start: Start<'p>,
    pub limits: Limits,
    /// Check every retired instruction against the golden reference (a continued run is
    /// first compared where it stopped: golden runs the instructions before it at its own
    /// speed, then pc and output are compared, and RAM there or, for an engine saved ahead
    /// of its host, once the host has caught up; see [`ChipMachine::check_resumed`]).
    pub verify: bool,
    /// Where to write the passes' token ids (see [`run`]).
    pub trace: Option<&'p Path>,
    /// Where to save the machine if the run stops at a limit without ending.
    pub save_state: Option<&'p Path>,
    /// Draw a progress line on stderr while the run goes on ([`RunProgress`]: on a
    /// terminal only, after its first seconds).
    pub progress: bool,
}

/// How a program gets into the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Boot {
    /// The host computes the state the prefill leaves and writes it (bit-identical,
    /// fast); only the prefill's last few tokens run as passes.
    #[default]
    Load,
    /// Every boot token runs as a forward pass (how stock runners boot a program).
    Prefill,
}

/// A chip on a device, kept between runs: the engine (on a GPU, the uploaded chip and
/// its compiled kernel) and what the boot loader keeps. Each run starts from a fresh
/// machine: the engine's state is reset completely before every boot.
pub struct Vm<'a> {
    chip: &'a ChipModel,
    engine: Box<dyn PassEngine + 'a>,
    /// Made by the first boot that loads state.
    loader: Option<BootLoader<'a>>,
    /// Seconds spent making the engine.
    pub engine_seconds: f64,
}

impl<'a> Vm<'a> {
    /// The engine for `chip` on `device`.
    pub fn new(chip: &'a ChipModel, device: Device) -> Result<Self, ChipError> {
        let start = Instant::now();
        let engine = engine(chip, device)?;
        Ok(Self {
            chip,
            engine,
            loader: None,
            engine_seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Computes (and forgets) the boot of `image`: what the loader keeps from it (the
    /// staging rows of its code) makes the next boots of similar programs faster.
    pub fn warm_up(&mut self, image: &ProgramImage) -> Result<(), ChipError> {
        self.loader()?.plan(image).map(|_| ())
    }

    /// The boot loader (made the first time).
    fn loader(&mut self) -> Result<&mut BootLoader<'a>, ChipError> {
        if self.loader.is_none() {
            self.loader = Some(BootLoader::new(self.chip)?);
        }
        Ok(self.loader.as_mut().expect("made above"))
    }

    /// Boots `image` by `boot` and runs it within `limits` (see [`run`]).
    pub fn run(
        &mut self,
        image: &ProgramImage,
        boot: Boot,
        limits: Limits,
        verify: bool,
        trace: Option<&Path>,
        out: &mut dyn Write,
    ) -> Result<VmRun, ChipError> {
        let plan = RunPlan {
            start: Start::Boot(boot),
            limits,
            verify,
            trace,
            save_state: None,
            progress: false,
        };
        self.run_plan(image, &plan, out)
    }

    /// Runs `image` as `plan` says (see [`run`]), saving the machine where a limit stops
    /// it when the plan names a file.
    pub fn run_plan(&mut self, image: &ProgramImage, plan: &RunPlan, out: &mut dyn Write) -> Result<VmRun, ChipError> {
        let start = Instant::now();
        if matches!(plan.start, Start::Boot(Boot::Load)) {
            self.loader()?;
        }
        let recorded = Trace::default();
        let lent: Box<dyn PassEngine + '_> = Box::new(&mut *self.engine);
        let engine: Box<dyn PassEngine + '_> = match plan.trace {
            Some(_) => Box::new(Traced {
                inner: lent,
                tokens: self.chip.spec.tokens.clone(),
                trace: recorded.clone(),
            }),
            None => lent,
        };
        let mut machine = match plan.start {
            Start::Boot(Boot::Load) => {
                let loader = self.loader.as_mut().expect("made before the engine was lent");
                ChipMachine::load_on(self.chip, engine, image, loader)?
            }
            Start::Boot(Boot::Prefill) => {
                let mut engine = engine;
                engine.load_state(&[])?;
                ChipMachine::boot_on(self.chip, engine, image)?
            }
            Start::Resume(saved) => ChipMachine::resume_on(self.chip, engine, image, saved)?,
        };
        machine.stop_for_good_at(plan.limits.instructions);
        let boot_seconds = start.elapsed().as_secs_f64();
        let golden = match (plan.verify, plan.start) {
            (false, _) => None,
            (true, Start::Boot(_)) => Some(Machine::new(image, Environment::BareMetal)),
            (true, Start::Resume(saved)) => Some(golden_at(image, saved, &mut machine)?),
        };
        let start = Instant::now();
        let mut checked = Checked {
            machine: &mut machine,
            golden,
        };
        let mut progress = if plan.progress {
            RunProgress::on_stderr()
        } else {
            RunProgress::none()
        };
        let streamed = stream(&mut checked, plan.limits, CHIP_CHUNK, out, &mut progress);
        progress.clear();
        let (end, timed_out) = streamed?;
        let run_seconds = start.elapsed().as_secs_f64();
        if let Some(path) = plan.trace {
            write_trace(path, &recorded.borrow()).map_err(|source| ChipError::Output {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let saved = match (end, plan.save_state) {
            (RunEnd::BudgetExhausted { pc }, Some(path)) => {
                machine.save(pc)?.write(path)?;
                true
            }
            _ => false,
        };
        Ok(VmRun {
            end,
            counts: machine.counts,
            run_seconds,
            boot_seconds,
            engine_seconds: self.engine_seconds,
            timed_out,
            saved,
        })
    }
}

/// Golden, run up to where `saved` stopped, after checking the continued `machine`
/// against it there (pc, console and, unless the engine was saved ahead of its host, all
/// of RAM; see [`ChipMachine::check_resumed`]).
fn golden_at(image: &ProgramImage, saved: &SavedMachine, machine: &mut ChipMachine) -> Result<Machine, ChipError> {
    let mut golden = Machine::new(image, Environment::BareMetal);
    let retired = saved.host.counts.retired;
    match golden.run(retired) {
        RunEnd::BudgetExhausted { .. } => {}
        end => {
            return Err(ChipError::Mismatch {
                retired,
                diff: format!("golden ended ({end:?}) before the saved machine's point"),
            })
        }
    }
    machine.check_resumed(&golden, saved.next_pc)?;
    Ok(golden)
}

/// Boots `image` in `chip` on `device` by `boot` and runs it within `limits` (a run
/// stopped by its wall-clock limit ends as an exhausted budget, with
/// [`VmRun::timed_out`] set), writing console bytes to `out` as they appear. With
/// `verify`, every retired instruction is checked against the golden reference. With
/// `trace`, every forward pass's input and chosen token ids are written there (those
/// of boot included).
#[allow(clippy::too_many_arguments)]
pub fn run(
    chip: &ChipModel,
    device: Device,
    image: &ProgramImage,
    boot: Boot,
    limits: Limits,
    verify: bool,
    trace: Option<&Path>,
    out: &mut dyn Write,
) -> Result<VmRun, ChipError> {
    Vm::new(chip, device)?.run(image, boot, limits, verify, trace, out)
}

/// Runs `image` in `chip` on `device` as `plan` says (see [`run`] and [`RunPlan`]).
pub fn run_plan(
    chip: &ChipModel,
    device: Device,
    image: &ProgramImage,
    plan: &RunPlan,
    out: &mut dyn Write,
) -> Result<VmRun, ChipError> {
    Vm::new(chip, device)?.run_plan(image, plan, out)
}

//! `inband`: build C programs for the inband machine and run them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use inband_chip::rv32im::machine::ChipError;
use inband_chip::rv32im::saved::SavedMachine;
use inband_firmware::{BuildOptions, Flavor, Libc, Toolchain};
use inband_golden::{Environment, Machine, RunEnd};
use inband_host_runtime::progress::RunProgress;
use inband_host_runtime::session::{parse_seconds, SessionOptions, TextSession};
use inband_host_runtime::vm::ChipSource;
use inband_host_runtime::{bench, program, status, vm};

#[derive(Parser)]
#[command(
    name = "inband",
    version,
    about = "A RISC-V computer inside a language model's weights",
    long_about = "inband builds C programs for an RV32IM machine and runs them: on the golden \
                  reference interpreter, or inside the chip layers of a Qwen3.5 checkpoint."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// The golden reference interpreter (written from the ISA specification).
    Golden,
    /// The RV32IM chip: Qwen3.5 decoder layers run by the project's layer math (CPU).
    Chip,
}

#[derive(Clone, Copy, ValueEnum)]
enum LibcChoice {
    /// inband's small libc when the program builds with it, else picolibc.
    Auto,
    /// inband's own small libc.
    Inband,
    /// picolibc (Debian picolibc-riscv64-unknown-elf).
    Picolibc,
}

impl From<LibcChoice> for Libc {
    fn from(choice: LibcChoice) -> Self {
        match choice {
            LibcChoice::Auto => Libc::Auto,
            LibcChoice::Inband => Libc::Inband,
            LibcChoice::Picolibc => Libc::Picolibc,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum BuildFlavor {
    /// Memory-mapped console and exit: what inband runs.
    Bare,
    /// Linux system calls: the same program for qemu-riscv32.
    Linux,
}

#[derive(Subcommand)]
enum Command {
    /// Compile C (or assembly) into an RV32IM ELF linked for the inband memory map.
    #[command(after_help = "Examples:\n  inband build firmware/examples/fib.c -o fib.elf\n  \
        inband build --libc picolibc -Iinclude -DN=10 main.c util.c -lm -o prog.elf\n\n\
        The program gets crt0, a C library (inband's small one, or picolibc) and libgcc.\n\
        main's return value is the exit code.")]
    Build {
        /// C or assembly sources (.c, .S, .s).
        #[arg(required = true)]
        sources: Vec<PathBuf>,
        /// Where to write the ELF.
        #[arg(short, long)]
        output: PathBuf,
        /// Platform layer to link.
        #[arg(long, value_enum, default_value = "bare")]
        flavor: BuildFlavor,
        /// GCC optimisation level.
        #[arg(short = 'O', long = "opt", default_value = "2")]
        opt: String,
        /// The C library: inband (small: printf of integers and strings, malloc, string
        /// functions; prints numbers without dividing, which the chip does slowly),
        /// picolibc (the whole library: math.h, float printf, qsort, strtol, setjmp,
        /// assert…; installed by scripts/setup.sh), or auto: inband's when the program
        /// builds with it, else picolibc.
        #[arg(long, value_enum, default_value = "auto")]
        libc: LibcChoice,
        /// Add a folder to the include search path (as gcc's -I).
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// Define a macro, NAME or NAME=VALUE (as gcc's -D).
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
        /// Link a library (as gcc's -l; -lm with picolibc, whose libc holds libm).
        #[arg(short = 'l', value_name = "LIB")]
        library: Vec<String>,
        /// Toolchain folder holding bin/riscv64-unknown-elf-gcc (default: $INBAND_TOOLCHAIN or PATH).
        #[arg(long)]
        toolchain: Option<PathBuf>,
    },
    /// Run a program (a .c/.S source is built first) and print its console output.
    #[command(after_help = "Exit status: the program's exit code, or\n  \
        65  the program could not be built or loaded\n  \
        66  the program trapped (illegal instruction, bad access, ecall, ebreak)\n  \
        67  the instruction budget or --max-seconds ran out (with --save-state, the machine is saved)\n  \
        68  (--verify) the chip and the golden reference disagreed\n  \
        130 (--save-state) interrupted by Ctrl-C (or SIGTERM): the machine is saved first\n\n\
        A program may itself exit with 65..68: then stderr has no `inband:` line. With\n\
        --stats the last line on stderr is always\n  \
        stats: instructions=N forward_passes=M steps_per_s=S exit=E\n\
        where E is the program's own exit code, or 'trap', 'budget' or 'interrupted': that tells them apart.\n\
        On a terminal, a run that goes on past 2 s shows a progress line on stderr (instructions\n\
        retired, forward passes and passes/s), cleared before anything else is reported.\n\n\
        Examples:\n  inband run --engine golden --stats firmware/examples/euler10.c\n  \
        inband run --engine chip --model spliced --verify --stats firmware/examples/hello.c\n  \
        inband run --engine chip --chip pack firmware/examples/hello.c   (a pack from `weightgen --out pack`)\n  \
        inband run --engine chip --chip pack --device cuda --batch --verify firmware/isa/*.S firmware/examples/*.c\n  \
        inband run --engine chip --chip pack --device cuda --max-seconds 500 --save-state s.state tests/speed/sieve10m.c\n  \
        inband run --engine chip --chip pack --device cuda --resume s.state --save-state s.state tests/speed/sieve10m.c\n    \
        (a long program in pieces: each run continues the last where it stopped, pass for pass)\n\n\
        With --batch, every program runs at once, each in its own machine (its own state, the\n\
        chip's weights shared; on a GPU one launch steps them all). Each program's output is\n\
        printed after `== NAME`, then one line `-- NAME: exit 0, N instructions, M forward\n\
        passes`. The exit status is 0 when every program exited with 0, 68 when --verify found\n\
        a program ending otherwise than on golden, else 1.")]
    Run {
        /// The program: C/assembly source or RV32IM ELF (several with --batch).
        #[arg(required = true, num_args = 1..)]
        programs: Vec<PathBuf>,
        /// (chip) Run every program given at once, each in its own machine of one batch;
        /// machines that finish take the next program waiting.
        #[arg(long)]
        batch: bool,
        /// The C library a source is built with: auto, inband or picolibc (see `inband
        /// build --help`; an ELF keeps the one it was built with).
        #[arg(long, value_enum, default_value = "auto")]
        libc: LibcChoice,
        /// (--batch) Machines the batch holds (a number or `max`: as many as the device's
        /// memory holds); default: one per program, at most what fits.
        #[arg(long, requires = "batch", value_parser = inband_host_runtime::batch::Machines::parse)]
        machines: Option<inband_host_runtime::batch::Machines>,
        /// Which engine executes the program.
        #[arg(long, value_enum, default_value = "golden")]
        engine: Engine,
        /// End stderr with a one-line summary of the run.
        #[arg(long)]
        stats: bool,
        /// Stop with an error after this many retired instructions.
        #[arg(long, default_value_t = 4_000_000_000)]
        max_instructions: u64,
        /// (chip) Stop with an error after this many seconds of running (boot not
        /// counted); the chip runs thousands, not billions, of instructions a second.
        #[arg(long, default_value_t = 3600.0, value_parser = parse_seconds)]
        max_seconds: f64,
        /// (chip) Check pc and registers against the golden reference after every retired
        /// instruction, a store's RAM line after it, all of RAM every 4096 instructions;
        /// stop at the first difference with a readable diff. With --batch: compare each
        /// program's end and output with golden's.
        #[arg(long)]
        verify: bool,
        /// (chip) Run the chip layers of this spliced checkpoint (made by `weight-surgery splice`).
        #[arg(long)]
        model: Option<PathBuf>,
        /// (chip) Run the chip layers of this chip pack (made by `weightgen --out PACK`)
        /// instead of a checkpoint's.
        #[arg(long, conflicts_with = "model")]
        chip: Option<PathBuf>,
        /// (chip) Where the chip layers run: cpu, or cuda[:N] (needs a CUDA build).
        #[arg(long, default_value = "cpu", value_parser = vm::Device::parse)]
        device: vm::Device,
        /// (chip, cuda) The CUDA kernel: sparse (driven by the residual's nonzeros) or
        /// reference (every projection row by row, the yardstick).
        #[arg(long, value_enum, default_value_t)]
        kernel: vm::CudaKernel,
        /// (chip) Write every forward pass's input and chosen chip token ids to this file,
        /// one pass per line (`input chosen`), boot included: with `--boot prefill`, the
        /// whole stream another runner (stock transformers) must reproduce. With --batch, a
        /// folder: FOLDER/NAME.trace for the first machine of each program.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// (chip) How the program gets into the chip: load (the host writes the state the
        /// boot prefill leaves, bit for bit, and runs its last 4 tokens) or prefill
        /// (every boot token a forward pass, as a stock runner boots).
        #[arg(long, value_enum, default_value_t)]
        boot: vm::Boot,
        /// (chip) If the run stops at --max-instructions, --max-seconds or Ctrl-C without ending,
        /// save the machine to FILE (its whole chip state, console output and counts), so
        /// that `--resume FILE` continues it exactly where it stopped.
        #[arg(long, value_name = "FILE")]
        save_state: Option<PathBuf>,
        /// (chip) Continue the machine saved in FILE by --save-state: the same program, in
        /// the same chip, on the same kind of device and kernel. Its earlier output is not
        /// printed again; --max-instructions counts from the program's start; with
        /// --verify, golden first runs up to that point, where the RAM, pc and output are
        /// compared, then every instruction after it.
        #[arg(long, value_name = "FILE", conflicts_with = "boot")]
        resume: Option<PathBuf>,
        /// Toolchain folder holding bin/riscv64-unknown-elf-gcc (default: $INBAND_TOOLCHAIN or PATH).
        #[arg(long)]
        toolchain: Option<PathBuf>,
    },
    /// Text mode: generate from a prompt with Qwen's own layers (a spliced checkpoint's
    /// chip layers are skipped; its base tensors are read back at the base width).
    #[command(
        after_help = "Examples:\n  inband generate --model spliced --prompt \"The answer is\" --max-tokens 16\n  \
        inband generate --model spliced --prompt \"Once\" --temperature 0.8 --seed 7\n\n\
        Runs on the CPU. --logits PREFIX writes PREFIX.json (every token id) and PREFIX.f32\n\
        (little-endian f32 logits, one row per position from the first prompt token on),\n\
        for comparison with another runner."
    )]
    Generate {
        /// The prompt text.
        #[arg(long)]
        prompt: String,
        /// Text the model is made to write first (as if it had chosen those tokens), e.g.
        /// code regions; generation continues after it.
        #[arg(long, default_value = "")]
        force: String,
        /// Write every position's logits to PREFIX.f32 and the token ids to PREFIX.json
        /// (PREFIX is a file name without extension, not a folder).
        #[arg(long, value_parser = parse_prefix)]
        logits: Option<PathBuf>,
        #[command(flatten)]
        options: SessionOptions,
    },
    /// Interactive text mode: each line you type is a prompt; the model's continuation is
    /// printed, with in-band execution of its code regions. `/force TEXT` makes the next
    /// continuation start with TEXT (a stand-in for a trained model's own code).
    #[command(after_help = "Example:\n  inband chat --model spliced --max-tokens 16\n  \
        > /force [C: 847*293]\n  > Question: 847 times 293?\n\n\
        Each line is a fresh generation with a fresh VM for every code region.")]
    Chat {
        #[command(flatten)]
        options: SessionOptions,
    },
    /// VM speed: run a set of programs in the chip and print steps/s, instructions/s and
    /// forward passes per instruction as a table (or, with --boot, boot times).
    #[command(
        after_help = "Examples:\n  inband bench --chip pack\n  inband bench --device cuda --model spliced hello.elf sort.elf\n  \
        inband bench --boot --chip pack firmware/examples/euler10.c\n\n\
        Without programs: firmware/examples/{hello,strings,int64}.c. Each program's output is\n\
        compared with the golden engine's; a difference fails the bench."
    )]
    Bench {
        /// Programs (C/assembly source or ELF).
        programs: Vec<PathBuf>,
        /// Where the chip layers run: cpu, or cuda[:N] (needs a CUDA build).
        #[arg(long, default_value = "cpu", value_parser = vm::Device::parse)]
        device: vm::Device,
        /// (cuda) The CUDA kernel: sparse or reference.
        #[arg(long, value_enum, default_value_t)]
        kernel: vm::CudaKernel,
        /// (cuda) Also run every program on the reference kernel, in the same process, and
        /// print the speed ratio.
        #[arg(long)]
        against_reference: bool,
        /// Time boot alone instead: each program loaded into the chip on a fresh VM, then
        /// 5 times more on the same VM (the loader warm, as in a text session), then by
        /// prefill; no instruction runs.
        #[arg(long, conflicts_with = "against_reference")]
        boot: bool,
        /// Run the programs as one batch, cycled over 1, 8, 64, 512, 1024, … machines up to
        /// N (a number, or `max`: as many as the device's memory holds), and print the
        /// scaling table (aggregate and per-machine passes/s); every machine's output is
        /// compared with golden's.
        #[arg(long, value_name = "N", conflicts_with_all = ["boot", "against_reference"],
              value_parser = inband_host_runtime::batch::Machines::parse)]
        batch: Option<inband_host_runtime::batch::Machines>,
        /// Run the chip layers of this spliced checkpoint.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Run the chip layers of this chip pack (made by `weightgen`) instead.
        #[arg(long, conflicts_with = "model")]
        chip: Option<PathBuf>,
        /// Toolchain folder holding bin/riscv64-unknown-elf-gcc (default: $INBAND_TOOLCHAIN or PATH).
        #[arg(long)]
        toolchain: Option<PathBuf>,
    },
}

/// `--kernel` given without a GPU to run it on.
const KERNEL_WITHOUT_CUDA: &str = "--kernel chooses the CUDA kernel: give --device cuda";

/// Prints `message` as one line on stderr.
fn report(message: impl std::fmt::Display) {
    let text = message.to_string().replace('\n', " ");
    eprintln!("inband: {text}");
}

/// Prints an anyhow error with its causes on one line (compiler output keeps its lines).
fn report_error(error: &anyhow::Error) {
    if error.chain().any(|c| c.to_string().contains("compilation failed")) {
        let chain: Vec<String> = error.chain().map(|c| c.to_string()).collect();
        eprintln!("inband: {}", chain.join(": "));
    } else {
        report(inband_chip::cli::error_line(error));
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Build {
            sources,
            output,
            flavor,
            opt,
            libc,
            include,
            define,
            library,
            toolchain,
        } => {
            let flavor = match flavor {
                BuildFlavor::Bare => Flavor::BareMetal,
                BuildFlavor::Linux => Flavor::LinuxUser,
            };
            let options = BuildOptions {
                libc: libc.into(),
                include_dirs: include,
                defines: define,
                libraries: library,
            };
            let result = Toolchain::locate(toolchain.as_deref()).and_then(|tc| {
                tc.with_options(options)
                    .build(&sources, flavor, &format!("-O{opt}"), &output)
            });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    report_error(&e.into());
                    ExitCode::from(status::BUILD_OR_LOAD_FAILED)
                }
            }
        }
        Command::Run {
            programs,
            batch,
            machines,
            libc,
            engine,
            stats,
            max_instructions,
            max_seconds,
            verify,
            model,
            chip,
            device,
            kernel,
            trace,
            boot,
            save_state,
            resume,
            toolchain,
        } => {
            if kernel != vm::CudaKernel::default() && device == vm::Device::Cpu {
                report(KERNEL_WITHOUT_CUDA);
                return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
            }
            if batch && (save_state.is_some() || resume.is_some()) {
                report("--save-state and --resume save and continue one machine: leave out --batch");
                return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
            }
            let device = device.with_kernel(kernel);
            if engine == Engine::Golden {
                let chip_only = [
                    (model.is_some(), "--model"),
                    (chip.is_some(), "--chip"),
                    (trace.is_some(), "--trace"),
                    (verify, "--verify"),
                    (boot != vm::Boot::default(), "--boot"),
                    (device != vm::Device::Cpu, "--device"),
                    (save_state.is_some(), "--save-state"),
                    (resume.is_some(), "--resume"),
                ];
                if let Some((_, flag)) = chip_only.iter().find(|(given, _)| *given) {
                    report(format!(
                        "{flag} applies to --engine chip; the golden engine runs the program by itself"
                    ));
                    return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
                }
            }
            if batch {
                let flags = BatchFlags {
                    engine,
                    boot,
                    machines,
                    verify,
                    stats,
                    trace: trace.as_deref(),
                    toolchain: toolchain.as_deref(),
                    libc: libc.into(),
                };
                return run_batch(
                    &programs,
                    model.as_deref(),
                    chip.as_deref(),
                    device,
                    max_instructions,
                    flags,
                );
            }
            let [program] = &programs[..] else {
                report("several programs run at once with --batch; without it, give one program");
                return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
            };
            let image = match program::load_program(program, toolchain.as_deref(), libc.into()) {
                Ok(image) => image,
                Err(e) => {
                    report_error(&e);
                    return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
                }
            };
            match engine {
                Engine::Golden => run_golden(&image, stats, max_instructions),
                Engine::Chip => {
                    let Some(source) = ChipSource::from_options(model.as_deref(), chip.as_deref()) else {
                        report(NO_CHIP);
                        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
                    };
                    let limits = vm::Limits {
                        instructions: max_instructions,
                        wall: Some(std::time::Duration::from_secs_f64(max_seconds)),
                    };
                    let flags = ChipRunFlags {
                        stats,
                        verify,
                        trace: trace.as_deref(),
                        boot,
                        save_state: save_state.as_deref(),
                        resume: resume.as_deref(),
                    };
                    run_chip(&image, &source, device, limits, flags)
                }
            }
        }
        Command::Generate {
            prompt,
            force,
            logits,
            options,
        } => match TextSession::open(&options, logits.is_some())
            .and_then(|t| t.generate(&prompt, &force, logits.as_deref()))
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                report_error(&e);
                ExitCode::from(status::BUILD_OR_LOAD_FAILED)
            }
        },
        Command::Chat { options } => match TextSession::open(&options, false).and_then(|t| t.chat()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                report_error(&e);
                ExitCode::from(status::BUILD_OR_LOAD_FAILED)
            }
        },
        Command::Bench {
            programs,
            device,
            kernel,
            against_reference,
            boot,
            batch,
            model,
            chip,
            toolchain,
        } => {
            if kernel != vm::CudaKernel::default() && device == vm::Device::Cpu {
                report(KERNEL_WITHOUT_CUDA);
                return ExitCode::FAILURE;
            }
            let device = device.with_kernel(kernel);
            if against_reference && !matches!(device, vm::Device::Cuda(_, vm::CudaKernel::Sparse)) {
                report(
                    "--against-reference runs the sparse CUDA kernel beside the reference one: \
                     give --device cuda (and no --kernel reference)",
                );
                return ExitCode::FAILURE;
            }
            let Some(source) = ChipSource::from_options(model.as_deref(), chip.as_deref()) else {
                report(NO_CHIP);
                return ExitCode::FAILURE;
            };
            let done = if let Some(machines) = batch {
                let programs = bench::programs_or_defaults(&programs);
                inband_host_runtime::batch::bench(&programs, &source, device, machines, toolchain.as_deref())
            } else if boot {
                bench::bench_boot(&programs, &source, device, toolchain.as_deref())
            } else {
                bench::bench(&programs, &source, device, against_reference, toolchain.as_deref())
            };
            match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    report_error(&e);
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// How a run ended, as the process exit status and the `exit=` text of --stats (reporting
/// a trap or an exhausted budget, after `retired` instructions in all, on stderr).
fn end_status(end: RunEnd, retired: u64) -> (ExitCode, String) {
    match end {
        RunEnd::Exited(code) => (ExitCode::from(status::from_program_exit(code)), code.to_string()),
        RunEnd::Trapped(trap) => {
            report(trap);
            (ExitCode::from(status::TRAPPED), "trap".to_string())
        }
        RunEnd::BudgetExhausted { pc } => {
            report(format!(
                "instruction budget exhausted: {retired} instructions retired without exiting (next pc {pc:#010x}); \
                 raise it with --max-instructions"
            ));
            (ExitCode::from(status::BUDGET_EXHAUSTED), "budget".to_string())
        }
    }
}

fn run_golden(image: &inband_firmware::ProgramImage, stats: bool, budget: u64) -> ExitCode {
    let mut machine = Machine::new(image, Environment::BareMetal);
    let start = Instant::now();
    let Ok((end, _)) = vm::stream(
        &mut machine,
        vm::Limits::instructions(budget),
        vm::GOLDEN_CHUNK,
        &mut std::io::stdout().lock(),
        &mut RunProgress::on_stderr(),
    );
    let seconds = start.elapsed().as_secs_f64();
    let (code, exit_text) = end_status(end, machine.instret);
    if stats {
        let rate = machine.instret as f64 / seconds.max(1e-9);
        eprintln!(
            "stats: instructions={} forward_passes=0 steps_per_s={:.0} exit={}",
            machine.instret, rate, exit_text
        );
    }
    code
}

/// A file prefix (`--logits`): not a folder, and not ending in a separator.
fn parse_prefix(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if s.ends_with('/') || p.is_dir() || p.file_name().is_none() {
        return Err(format!("{s:?} is a folder: give a file prefix such as {s}/logits"));
    }
    Ok(p)
}

/// What `run --engine chip` and `bench` say when given no chip.
const NO_CHIP: &str = "the chip engine runs the chip layers of a spliced checkpoint (--model DIR, made by \
    `weight-surgery splice`) or of a chip pack (--chip DIR, made by `weightgen --shape 0.8b --out DIR`)";

/// How `run --batch` runs and reports.
struct BatchFlags<'a> {
    engine: Engine,
    boot: vm::Boot,
    machines: Option<inband_host_runtime::batch::Machines>,
    verify: bool,
    stats: bool,
    trace: Option<&'a std::path::Path>,
    toolchain: Option<&'a std::path::Path>,
    libc: Libc,
}

/// `inband run --batch`: every program at once, each in its own machine.
fn run_batch(
    programs: &[PathBuf],
    model: Option<&std::path::Path>,
    chip: Option<&std::path::Path>,
    device: vm::Device,
    budget: u64,
    flags: BatchFlags,
) -> ExitCode {
    if flags.engine != Engine::Chip {
        report("--batch runs programs in the chip: give --engine chip");
        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
    }
    if flags.boot != vm::Boot::Load {
        report("a batch boots every machine by loading state: --boot prefill runs one program at a time");
        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
    }
    let Some(source) = ChipSource::from_options(model, chip) else {
        report(NO_CHIP);
        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
    };
    let run = inband_host_runtime::batch::run_programs(inband_host_runtime::batch::RunBatch {
        programs,
        source: &source,
        device,
        machines: flags.machines,
        budget,
        verify: flags.verify,
        trace: flags.trace,
        stats: flags.stats,
        toolchain: flags.toolchain,
        libc: flags.libc,
    });
    match run {
        Ok(v) if !v.all_match_golden => ExitCode::from(status::VERIFY_MISMATCH),
        Ok(v) if v.all_exited_zero => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            report_error(&e);
            ExitCode::from(status::BUILD_OR_LOAD_FAILED)
        }
    }
}

/// Why a machine could not be saved at `path` (checked before a long run, not after it).
fn unsaveable(path: &std::path::Path) -> Option<String> {
    let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
    if path.is_dir() {
        Some(format!("--save-state {}: a folder; give a file", path.display()))
    } else if folder.is_some_and(|f| !f.is_dir()) {
        Some(format!("--save-state {}: its folder does not exist", path.display()))
    } else {
        None
    }
}

/// How `run --engine chip` runs and reports.
struct ChipRunFlags<'a> {
    stats: bool,
    verify: bool,
    trace: Option<&'a std::path::Path>,
    boot: vm::Boot,
    save_state: Option<&'a std::path::Path>,
    resume: Option<&'a std::path::Path>,
}

fn run_chip(
    image: &inband_firmware::ProgramImage,
    source: &ChipSource,
    device: vm::Device,
    limits: vm::Limits,
    flags: ChipRunFlags,
) -> ExitCode {
    let ChipRunFlags {
        stats,
        verify,
        trace,
        boot,
        save_state,
        resume,
    } = flags;
    if let Some(why) = save_state.and_then(unsaveable) {
        report(why);
        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
    }
    let saved = match resume.map(SavedMachine::read).transpose() {
        Ok(saved) => saved,
        Err(e) => {
            report(e);
            return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
        }
    };
    if let Some(done) = saved
        .as_ref()
        .map(|s| s.host.counts.retired)
        .filter(|&d| d >= limits.instructions)
    {
        report(format!(
            "the saved machine has retired {done} instructions already, and --max-instructions ({}) counts \
             from the program's start: give more than {done} to continue it",
            limits.instructions
        ));
        return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
    }
    let opening = Instant::now();
    let chip = match source.open() {
        Ok(chip) => chip,
        Err(e) => {
            report_error(&e);
            return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
        }
    };
    let open_seconds = opening.elapsed().as_secs_f64();
    if save_state.is_some() {
        vm::stop_on_interrupt();
    }
    let plan = vm::RunPlan {
        start: saved.as_ref().map_or(vm::Start::Boot(boot), vm::Start::Resume),
        limits,
        verify,
        trace,
        save_state,
        progress: true,
    };
    let mut stdout = std::io::stdout().lock();
    let run = match vm::run_plan(&chip, device, image, &plan, &mut stdout) {
        Ok(run) => run,
        Err(e @ (ChipError::Mismatch { .. } | ChipError::MismatchAt { .. })) => {
            eprintln!("inband: {e}");
            return ExitCode::from(status::VERIFY_MISMATCH);
        }
        Err(e) => {
            report(e);
            return ExitCode::from(status::BUILD_OR_LOAD_FAILED);
        }
    };
    let (code, exit_text) = if run.timed_out && vm::stop_asked() {
        report(format!("interrupted after {} instructions", run.counts.retired));
        (ExitCode::from(status::INTERRUPTED), "interrupted".to_string())
    } else if run.timed_out {
        report(format!(
            "time limit reached: the program ran {:.0} s without exiting ({} instructions retired); raise it with --max-seconds",
            limits.wall.map_or(0.0, |w| w.as_secs_f64()),
            run.counts.retired
        ));
        (ExitCode::from(status::BUDGET_EXHAUSTED), "budget".to_string())
    } else {
        end_status(run.end, run.counts.retired)
    };
    if let (true, Some(path)) = (run.saved, save_state) {
        report(format!(
            "the machine is saved in {}: continue it with --resume {}",
            path.display(),
            path.display()
        ));
    }
    if stats {
        let c = run.counts;
        eprintln!(
            "chip: read in {open_seconds:.2} s, its engine ready {:.2} s later ({} layers, nothing compiled)",
            run.engine_seconds,
            chip.layer_count()
        );
        let start = match (&saved, boot) {
            (Some(s), _) => format!(
                "resumed after {} instructions and {} forward passes (its boot: {}) in {:.3} s",
                s.host.counts.retired, s.host.counts.passes, c.boot_passes, run.boot_seconds
            ),
            (None, vm::Boot::Load) => {
                format!(
                    "boot (state loaded): {} forward passes in {:.3} s",
                    c.boot_passes, run.boot_seconds
                )
            }
            (None, vm::Boot::Prefill) => format!(
                "boot (prefill): {} forward passes in {:.3} s",
                c.boot_passes, run.boot_seconds
            ),
        };
        let verified = match (verify, &saved) {
            (false, _) => "",
            (true, None) => ", every instruction verified against golden",
            (true, Some(_)) => ", every instruction since the resume verified against golden (and all of RAM, once the host had caught up with the engine)",
        };
        eprintln!(
            "{start}; run: {:.3} forward passes per instruction{verified}",
            c.passes as f64 / c.retired.max(1) as f64
        );
        eprintln!("passes by cause: {}", c.breakdown());
        eprintln!(
            "passes by instruction class (per instruction, fewest–most, how many): {}",
            c.class_breakdown()
        );
        // A continued machine's counts are the whole program's; its speed is this run's.
        let earlier = saved.as_ref().map_or(0, |s| s.host.counts.passes);
        eprintln!(
            "stats: instructions={} forward_passes={} steps_per_s={:.0} exit={}",
            c.retired,
            c.passes,
            (c.passes - earlier) as f64 / run.run_seconds.max(1e-9),
            exit_text
        );
    }
    code
}

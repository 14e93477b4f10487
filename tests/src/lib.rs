//! # inband-tests
//!
//! The exactness suites of the verification ladder live in `tests/tests/`. This library
//! holds what they share: the program corpus (examples and ISA tests), building it in
//! both flavours, the golden-versus-qemu lockstep comparison, and compiled function
//! chips for testing circuit primitives through the layer math.

pub mod function_chip;
pub mod fuzz;

use std::path::{Path, PathBuf};

use inband_chip::{ChipModel, MathPath};
use inband_firmware::{load_elf, BuildOptions, Flavor, Libc, Toolchain};
use inband_golden::{qemu, ArchState, Environment, Machine, RunEnd};
use inband_qwen35::presets::Shape;
use inband_weightgen::rv32im::Rv32Chip;

/// The RV32IM chip compiled for `shape`, as a host drives it (the sparse path of the
/// layer math); each suite keeps its own in a `OnceLock`.
pub fn rv32_chip(shape: Shape) -> ChipModel {
    Rv32Chip::build(&shape.config())
        .expect("the chip compiles")
        .model(MathPath::Sparse(Default::default()))
        .expect("the chip's sparse layers")
}

/// The examples and our ISA tests (the programs every suite runs; see also
/// [`kernel_programs`] and [`picolibc_programs`]).
pub fn corpus() -> Vec<PathBuf> {
    let mut programs = inband_firmware::sources_in(&inband_firmware::examples_dir(), &["c"]).expect("examples/");
    programs.extend(inband_firmware::sources_in(&inband_firmware::isa_tests_dir(), &["S"]).expect("isa/"));
    programs
}

/// A short name for a corpus program ("euler10", "isa/alu_rr").
pub fn program_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("?");
    if path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()) == Some("isa") {
        format!("isa/{stem}")
    } else {
        stem.to_string()
    }
}

/// The C programs in `tests/FOLDER/`.
fn programs_in(folder: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    inband_firmware::sources_in(&dir, &["c"]).unwrap_or_else(|e| panic!("tests/{folder}/: {e}"))
}

/// The programs that need picolibc (`tests/picolibc/`): libm, stdio with floats,
/// stdlib, setjmp. Built with [`picolibc`].
pub fn picolibc_programs() -> Vec<PathBuf> {
    programs_in("picolibc")
}

/// Ordinary C kernels (`tests/kernels/`: matrix multiply, CRC-32, SHA-256, a byte-string
/// search, a table-driven state machine): where passes per instruction are measured.
pub fn kernel_programs() -> Vec<PathBuf> {
    programs_in("kernels")
}

/// Build options that link picolibc (and its libm).
pub fn picolibc() -> BuildOptions {
    BuildOptions {
        libc: Libc::Picolibc,
        libraries: vec!["m".into()],
        ..Default::default()
    }
}

/// Builds `source` in `flavor` into `dir`, returning the ELF's path.
pub fn build(source: &Path, flavor: Flavor, dir: &Path) -> PathBuf {
    build_with(source, flavor, dir, BuildOptions::default())
}

/// As [`build`], with `options` (the C library, …).
pub fn build_with(source: &Path, flavor: Flavor, dir: &Path, options: BuildOptions) -> PathBuf {
    let tc = Toolchain::locate(None)
        .expect("the RISC-V toolchain (scripts/setup.sh installs it)")
        .with_options(options);
    let suffix = match flavor {
        Flavor::BareMetal => "bare",
        Flavor::LinuxUser => "linux",
    };
    let out = dir.join(format!("{}.{suffix}.elf", program_name(source).replace('/', "_")));
    tc.build(&[source.to_path_buf()], flavor, "-O2", &out)
        .unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    out
}

/// What a lockstep run of golden against qemu found.
#[derive(Debug)]
pub struct Lockstep {
    /// Instructions compared (qemu records).
    pub instructions: u64,
    /// The program's console output under qemu.
    pub qemu_console: Vec<u8>,
    /// The console output of the golden machine on the same ELF.
    pub golden_console: Vec<u8>,
    pub qemu_exit: Option<i32>,
    pub golden_exit: Option<i32>,
}

fn describe_difference(index: u64, golden: &ArchState, qemu: &ArchState) -> String {
    let mut text = format!("instruction {index}: ");
    if golden.pc != qemu.pc {
        text += &format!("pc golden {:#010x} qemu {:#010x}; ", golden.pc, qemu.pc);
    }
    for r in 0..32 {
        if golden.regs[r] != qemu.regs[r] {
            text += &format!("x{r} golden {:#010x} qemu {:#010x}; ", golden.regs[r], qemu.regs[r]);
        }
    }
    text
}

/// Runs the Linux-ABI ELF under qemu and the golden machine side by side, comparing pc
/// and x0..x31 before every instruction. The golden machine starts from qemu's first
/// record (qemu chooses the initial stack pointer); `Err` describes the first difference.
pub fn lockstep_against_qemu(linux_elf: &Path) -> Result<Lockstep, String> {
    let image = load_elf(&std::fs::read(linux_elf).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let mut golden = Machine::new(&image, Environment::LinuxUser);
    let mut mismatch: Option<String> = None;
    let mut index = 0u64;
    let mut golden_end: Option<RunEnd> = None;
    let run = qemu::trace(linux_elf, |state| {
        if index == 0 {
            golden.regs = state.regs;
            golden.pc = state.pc;
        }
        if let Some(end) = golden_end {
            mismatch = Some(format!(
                "instruction {index}: golden already ended ({end:?}) but qemu continues at {:#010x}",
                state.pc
            ));
            return false;
        }
        let mine = golden.arch_state();
        if mine != *state {
            mismatch = Some(describe_difference(index, &mine, state));
            return false;
        }
        index += 1;
        match golden.step() {
            Ok(inband_golden::Step::Retired) => {}
            Ok(inband_golden::Step::Exited(code)) => golden_end = Some(RunEnd::Exited(code)),
            Err(trap) => golden_end = Some(RunEnd::Trapped(trap)),
        }
        true
    })
    .map_err(|e| e.to_string())?;
    if let Some(m) = mismatch {
        return Err(m);
    }
    if golden_end.is_none() {
        return Err(format!("qemu ended after {index} instructions but golden did not exit"));
    }
    Ok(Lockstep {
        instructions: run.records,
        qemu_console: run.stdout,
        golden_console: golden.console.clone(),
        qemu_exit: run.exit_status,
        golden_exit: golden.exit_code(),
    })
}

/// Runs a bare-metal ELF on the golden machine to the end.
pub fn run_golden_bare(elf: &Path, budget: u64) -> (Machine, RunEnd) {
    let image = load_elf(&std::fs::read(elf).expect("ELF")).expect("loadable ELF");
    let mut machine = Machine::new(&image, Environment::BareMetal);
    let end = machine.run(budget);
    (machine, end)
}

/// One step of [`golden_steps`]: the instruction word at the pc (0 outside ROM), the pc and
/// registers before it, and the machine after it.
pub struct GoldenStep<'a> {
    pub word: u32,
    pub pc: u32,
    pub regs_before: &'a [u32; 32],
    pub after: &'a Machine,
}

impl GoldenStep<'_> {
    /// The register this instruction writes with value tokens (`s`, `u`, `l` after `m`,
    /// `h`), if any: rd ≠ x0 of lui, auipc, loads, register-immediate and register-register
    /// operations (divisions included). Links are written by `lk` passes instead.
    pub fn value_write(&self) -> Option<usize> {
        let rd = ((self.word >> 7) & 31) as usize;
        (rd != 0 && matches!(self.word & 0x7f, 0x37 | 0x17 | 0x03 | 0x13 | 0x33)).then_some(rd)
    }

    /// A jump that links (`jal`/`jalr` with rd ≠ x0): the chip writes the link in an `lk` pass.
    pub fn links(&self) -> bool {
        matches!(self.word & 0x7f, 0x6f | 0x67) && (self.word >> 7) & 31 != 0
    }
}

/// Runs the ELF at `path` bare-metal in the golden interpreter until it exits, calling
/// `each` after every instruction; the instructions run. An error if it traps or runs
/// `budget` instructions without exiting. (The analysis tools in `src/bin` classify the
/// steps as the chip would pay for them.)
pub fn golden_steps(path: &str, budget: u64, mut each: impl FnMut(GoldenStep)) -> anyhow::Result<u64> {
    use anyhow::Context;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
    let image = load_elf(&bytes).with_context(|| format!("{path} is not a program"))?;
    let mut machine = Machine::new(&image, Environment::BareMetal);
    for n in 1..=budget {
        let pc = machine.pc;
        let at = pc.wrapping_sub(inband_firmware::memory_map::ROM_BASE) as usize;
        let word = image
            .rom
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let regs_before = machine.regs;
        let step = machine.step().map_err(|trap| anyhow::anyhow!("{path}: {trap}"))?;
        each(GoldenStep {
            word,
            pc,
            regs_before: &regs_before,
            after: &machine,
        });
        if let inband_golden::Step::Exited(_) = step {
            return Ok(n);
        }
    }
    anyhow::bail!("{path}: no exit within {budget} instructions")
}

//! `inband bench`: each program run in the chip and on the golden engine (whose output it
//! must match), one table row of speed figures per program, then where each program's
//! passes went (by cause and by instruction class, read from its token stream). `--boot`:
//! how long each program takes to get into the chip, by loading state and by prefill.

use std::path::{Path, PathBuf};

use inband_chip::rv32im::classes::InstructionClass;
use inband_chip::rv32im::machine::{PassCause, RunCounts};
use inband_chip::ChipModel;
use inband_firmware::ProgramImage;
use inband_golden::{Environment, Machine, RunEnd};

use crate::program;
use crate::vm::{self, ChipSource};

/// Instructions a bench program may retire.
pub(crate) const BENCH_BUDGET: u64 = 4_000_000_000;

/// Runs each program in the chip (and on the golden engine, for its output) and prints a
/// table; with `against_reference`, each program also on the reference CUDA kernel, with
/// the speed ratio.
pub fn bench(
    programs: &[PathBuf],
    source: &ChipSource,
    device: vm::Device,
    against_reference: bool,
    toolchain: Option<&Path>,
) -> anyhow::Result<()> {
    let programs = programs_or_defaults(programs);
    let chip = source.open()?;
    println!("| program | device | instructions | forward passes | passes/instruction | steps/s | instructions/s |");
    println!("|---|---|---|---|---|---|---|");
    let (mut ratios, mut causes) = (Vec::new(), Vec::new());
    for path in &programs {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default()
            .to_string();
        let image = program::load_program(path, toolchain, Default::default())?;
        let (speed, counts) = bench_one(&chip, device, &image, &name)?;
        if against_reference {
            let (reference, _) = bench_one(&chip, device.with_kernel(vm::CudaKernel::Reference), &image, &name)?;
            ratios.push((name.clone(), speed / reference));
        }
        causes.push((name, counts));
    }
    for (name, ratio) in ratios {
        println!("{name}: the sparse kernel runs {ratio:.2}× the reference kernel's passes/s");
    }
    print_causes(&causes);
    print_classes(&causes);
    Ok(())
}

/// `programs`, or the ones a bench runs when none is named.
pub fn programs_or_defaults(programs: &[PathBuf]) -> Vec<PathBuf> {
    if !programs.is_empty() {
        return programs.to_vec();
    }
    ["hello", "strings", "int64"]
        .iter()
        .map(|p| PathBuf::from(format!("firmware/examples/{p}.c")))
        .collect()
}

/// Boots after the first that [`bench_boot`] times with the loader warm.
const WARM_BOOTS: usize = 5;

/// Boots each program by loading state on a fresh VM (the loader made and cold), then
/// [`WARM_BOOTS`] times more on the same VM (as a resident session boots its regions),
/// then once by prefill, and prints a table of boot times. No instruction runs.
pub fn bench_boot(
    programs: &[PathBuf],
    source: &ChipSource,
    device: vm::Device,
    toolchain: Option<&Path>,
) -> anyhow::Result<()> {
    let programs = programs_or_defaults(programs);
    let chip = source.open()?;
    println!("| program | device | prefill passes | load, first (ms) | load, warm (ms, median of {WARM_BOOTS}) | prefill (ms) |");
    println!("|---|---|---|---|---|---|");
    for path in &programs {
        let name = path.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default();
        let image = program::load_program(path, toolchain, Default::default())?;
        let mut vm = vm::Vm::new(&chip, device)?;
        let mut boot = |boot: vm::Boot| -> anyhow::Result<vm::VmRun> {
            Ok(vm.run(
                &image,
                boot,
                vm::Limits::instructions(0),
                false,
                None,
                &mut std::io::sink(),
            )?)
        };
        let first = boot(vm::Boot::Load)?.boot_seconds;
        let mut warm = (0..WARM_BOOTS)
            .map(|_| Ok(boot(vm::Boot::Load)?.boot_seconds))
            .collect::<anyhow::Result<Vec<f64>>>()?;
        warm.sort_by(f64::total_cmp);
        let prefill = boot(vm::Boot::Prefill)?;
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} | {:.1} |",
            device_name(device),
            prefill.counts.boot_passes,
            first * 1e3,
            warm[WARM_BOOTS / 2] * 1e3,
            prefill.boot_seconds * 1e3,
        );
    }
    Ok(())
}

/// A device as the tables name it.
pub(crate) fn device_name(device: vm::Device) -> String {
    match device {
        vm::Device::Cpu => "cpu".to_string(),
        vm::Device::Cuda(n, vm::CudaKernel::Sparse) => format!("cuda:{n}"),
        vm::Device::Cuda(n, vm::CudaKernel::Reference) => format!("cuda:{n} (reference kernel)"),
    }
}

/// The passes of each program by cause, as a table of passes per retired instruction.
fn print_causes(runs: &[(String, RunCounts)]) {
    let mut columns: Vec<&str> = PassCause::ALL.iter().map(|c| c.name()).collect();
    columns.push("all");
    print_table("passes per instruction by cause", &columns, runs, |c| {
        let per = |n: u64| format!("{:.3}", n as f64 / c.retired.max(1) as f64);
        let mut cells: Vec<String> = c.by_cause.iter().map(|n| per(*n)).collect();
        cells.push(per(c.passes));
        cells
    });
}

/// The passes of each program's instructions by class: per instruction, the fewest and
/// the most one took, how many retired.
fn print_classes(runs: &[(String, RunCounts)]) {
    let columns: Vec<&str> = InstructionClass::ALL.iter().map(|c| c.name()).collect();
    print_table(
        "passes per instruction by instruction class (mean (fewest–most, instructions))",
        &columns,
        runs,
        |c| c.by_class.iter().map(|k| k.summary()).collect(),
    );
}

/// A markdown table under `title`: a row per program, its cells from `cells`.
fn print_table(title: &str, columns: &[&str], runs: &[(String, RunCounts)], cells: impl Fn(&RunCounts) -> Vec<String>) {
    println!("\n{title}:\n");
    println!("| program | {} |", columns.join(" | "));
    println!("|---|{}", "---|".repeat(columns.len()));
    for (name, c) in runs {
        println!("| {name} | {} |", cells(c).join(" | "));
    }
}

/// One program on `device`: checks its output against golden's, prints its table row and
/// returns its passes per second and its counts.
fn bench_one(
    chip: &ChipModel,
    device: vm::Device,
    image: &ProgramImage,
    name: &str,
) -> anyhow::Result<(f64, RunCounts)> {
    let mut golden = Machine::new(image, Environment::BareMetal);
    let golden_end = golden.run(BENCH_BUDGET);
    let mut console = Vec::new();
    let run = vm::run(
        chip,
        device,
        image,
        vm::Boot::Load,
        vm::Limits::instructions(BENCH_BUDGET),
        false,
        None,
        &mut console,
    )?;
    if console != golden.console {
        anyhow::bail!("{name}: the chip's output differs from the golden engine's");
    }
    if !matches!((&run.end, &golden_end), (RunEnd::Exited(a), RunEnd::Exited(b)) if a == b) {
        anyhow::bail!(
            "{name}: the chip ended with {:?}, golden with {:?}",
            run.end,
            golden_end
        );
    }
    let c = run.counts;
    let seconds = run.run_seconds.max(1e-9);
    let passes_per_second = c.passes as f64 / seconds;
    println!(
        "| {name} | {} | {} | {} | {:.3} | {:.0} | {:.0} |",
        device_name(device),
        c.retired,
        c.passes,
        c.passes as f64 / c.retired.max(1) as f64,
        passes_per_second,
        c.retired as f64 / seconds,
    );
    Ok((passes_per_second, c))
}

//! `inband bench`: each program run in the chip and on the golden engine (whose output it
//! must match), one table row of speed figures per program, then where each program's
//! passes went (by cause, read from its token stream).

use std::path::{Path, PathBuf};

use inband_chip::rv32im::machine::{PassCause, RunCounts};
use inband_chip::ChipModel;
use inband_firmware::ProgramImage;
use inband_golden::{Environment, Machine, RunEnd};

use crate::program;
use crate::vm::{self, ChipSource};

/// Instructions a bench program may retire.
const BENCH_BUDGET: u64 = 4_000_000_000;

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
    let defaults: Vec<PathBuf> = ["hello", "strings", "int64"]
        .iter()
        .map(|p| PathBuf::from(format!("firmware/examples/{p}.c")))
        .collect();
    let programs = if programs.is_empty() { &defaults[..] } else { programs };
    let chip = source.open()?;
    println!("| program | device | instructions | forward passes | passes/instruction | steps/s | instructions/s |");
    println!("|---|---|---|---|---|---|---|");
    let (mut ratios, mut causes) = (Vec::new(), Vec::new());
    for path in programs {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default()
            .to_string();
        let image = program::load_program(path, toolchain)?;
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
    Ok(())
}

/// The passes of each program by cause, as a table of passes per retired instruction.
fn print_causes(causes: &[(String, RunCounts)]) {
    let names: Vec<&str> = PassCause::ALL.iter().map(|c| c.name()).collect();
    println!("\npasses per instruction by cause:\n");
    println!("| program | {} | all |", names.join(" | "));
    println!("|---|{}---|", "---|".repeat(names.len()));
    for (name, c) in causes {
        let per = |n: u64| format!("{:.3}", n as f64 / c.retired.max(1) as f64);
        let cells: Vec<String> = c.by_cause.iter().map(|n| per(*n)).collect();
        println!("| {name} | {} | {} |", cells.join(" | "), per(c.passes));
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
        match device {
            vm::Device::Cpu => "cpu".to_string(),
            vm::Device::Cuda(n, vm::CudaKernel::Sparse) => format!("cuda:{n}"),
            vm::Device::Cuda(n, vm::CudaKernel::Reference) => format!("cuda:{n} (reference kernel)"),
        },
        c.retired,
        c.passes,
        c.passes as f64 / c.retired.max(1) as f64,
        passes_per_second,
        c.retired as f64 / seconds,
    );
    Ok((passes_per_second, c))
}

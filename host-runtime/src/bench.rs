//! `inband bench`: each program run in the chip and on the golden engine (whose output it
//! must match), one table row of speed figures per program.

use std::path::{Path, PathBuf};

use inband_golden::{Environment, Machine, RunEnd};

use crate::program;
use crate::vm::{self, ChipSource};

/// Instructions a bench program may retire.
const BENCH_BUDGET: u64 = 4_000_000_000;

/// Runs each program in the chip (and on the golden engine, for its output) and prints a table.
pub fn bench(
    programs: &[PathBuf],
    source: &ChipSource,
    device: vm::Device,
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
    for path in programs {
        let image = program::load_program(path, toolchain)?;
        let mut golden = Machine::new(&image, Environment::BareMetal);
        let golden_end = golden.run(BENCH_BUDGET);
        let mut console = Vec::new();
        let run = vm::run(
            &chip,
            device,
            &image,
            vm::Limits::instructions(BENCH_BUDGET),
            false,
            None,
            &mut console,
        )?;
        if console != golden.console {
            anyhow::bail!("{}: the chip's output differs from the golden engine's", path.display());
        }
        if !matches!((&run.end, &golden_end), (RunEnd::Exited(a), RunEnd::Exited(b)) if a == b) {
            anyhow::bail!(
                "{}: the chip ended with {:?}, golden with {:?}",
                path.display(),
                run.end,
                golden_end
            );
        }
        let c = run.counts;
        let seconds = run.run_seconds.max(1e-9);
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.0} | {:.0} |",
            path.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default(),
            match device {
                vm::Device::Cpu => "cpu".to_string(),
                vm::Device::Cuda(n) => format!("cuda:{n}"),
            },
            c.retired,
            c.passes,
            c.passes as f64 / c.retired.max(1) as f64,
            c.passes as f64 / seconds,
            c.retired as f64 / seconds,
        );
    }
    Ok(())
}

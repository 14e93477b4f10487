//! `weightgen`: compile a chip into a chip pack for a Qwen3.5 shape or checkpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Parser, ValueEnum};
use inband_qwen35::checkpoint::Checkpoint;
use inband_qwen35::presets::Shape;
use inband_qwen35::TextConfig;
use inband_weightgen::{compile, pack, rv32im, target_of, toy};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Clone, Copy, ValueEnum)]
enum ChipName {
    /// The RV32IM CPU (64 KiB ROM, 256 KiB RAM, millicode division).
    Rv32im,
    /// The 8-bit accumulator toy machine (16-instruction ROM, 16-byte RAM).
    Acc8,
}

#[derive(Parser)]
#[command(
    name = "weightgen",
    version,
    about = "Compile a chip into stock Qwen3.5 decoder layers (a chip pack)",
    long_about = "Compiles a chip (a circuit of exact neurons and Gated DeltaNet memories) into the weights of \
                  stock Qwen3.5 linear-attention decoder layers that fit a base model, and writes a chip pack: \
                  chip.safetensors, manifest.json and report.txt (the allocation report).",
    group(ArgGroup::new("fit").required(true).args(["shape", "base"])),
    after_help = "Examples:\n  weightgen --shape 0.8b --out packs/acc8-0.8b\n  \
                  weightgen --base checkpoints/qwen3.5-0.8b --out packs/acc8-mine\n\n\
                  A pack fits one base width: splice it only into checkpoints with the same config."
)]
struct Cli {
    /// Fit a published Qwen3.5 shape.
    #[arg(long, value_parser = Shape::parse_arg)]
    shape: Option<Shape>,
    /// Fit the config of this checkpoint folder.
    #[arg(long)]
    base: Option<PathBuf>,
    /// Where to write the pack: a new folder (weightgen refuses one that exists).
    #[arg(long)]
    out: PathBuf,
    /// Which chip to compile.
    #[arg(long, value_enum, default_value = "rv32im")]
    chip: ChipName,
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let base: TextConfig = match (&cli.shape, &cli.base) {
        (Some(shape), _) => shape.config(),
        (None, Some(dir)) => Checkpoint::open(dir)?.config,
        (None, None) => unreachable!("clap requires one"),
    };
    // Refuse before the long compile, and again when the pack is renamed into place.
    pack::refuse_existing(&cli.out)?;
    let bar = ProgressBar::new_spinner();
    bar.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("valid template"));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar.set_message("building the circuit and emitting layers");
    let (chip, host_map) = match cli.chip {
        ChipName::Rv32im => {
            let chip = rv32im::Rv32Chip::build(&base)?;
            let map = chip.host_map();
            (chip.chip, Some(map))
        }
        ChipName::Acc8 => (compile(&toy::circuit(target_of(&base)), &base)?, None),
    };
    let manifest = pack::write_pack(&chip, host_map, &cli.out, &|m| bar.set_message(m.to_string()))?;
    bar.finish_and_clear();
    println!(
        "{}: {} chip layers, {} chip dims (residual {} -> {}), {} nonzero weights, {} chip tokens, stored as {}",
        manifest.chip,
        manifest.chip_layers,
        manifest.chip_dims,
        base.hidden_size,
        base.hidden_size + manifest.chip_dims,
        manifest.figures.nonzero_weights,
        manifest.chip_vocab,
        manifest.dtype
    );
    println!(
        "wrote {} (allocation report: {})",
        cli.out.display(),
        cli.out.join(inband_chip::pack::REPORT_FILE).display()
    );
    Ok(())
}

fn main() -> ExitCode {
    inband_chip::staging::remove_on_interrupt("weightgen");
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weightgen: {}", inband_chip::cli::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

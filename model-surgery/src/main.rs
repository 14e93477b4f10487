//! `weight-surgery`: make synthetic Qwen3.5 checkpoints, splice chip packs into them,
//! inspect, verify, and strip them back out.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use inband_model_surgery::{inspect, splice, strip, synth, verify};
use inband_qwen35::presets::Shape;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Parser)]
#[command(
    name = "weight-surgery",
    version,
    about = "Splice a computer into Qwen3.5 checkpoints, and take it out again",
    long_about = "weight-surgery widens a Qwen3.5 checkpoint's residual stream, puts a chip pack's layers in \
                  front of the model's own, extends the vocabulary with the chip's tokens, and keeps what it \
                  needs to recover the original bit for bit. Inputs are never modified; outputs are written \
                  to a staging folder and renamed into place."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a synthetic checkpoint with the published Qwen3.5 layout and random bf16 weights.
    #[command(after_help = "Example:\n  weight-surgery synth --shape 0.8b --out checkpoints/synth-0.8b")]
    Synth {
        /// tiny, 0.8b, 2b, 4b or 9b.
        #[arg(long, value_parser = Shape::parse_arg)]
        shape: Shape,
        /// Output folder (must not exist).
        #[arg(long)]
        out: PathBuf,
        /// Seed of the random weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Text-only Qwen3_5ForCausalLM (model.*) instead of the multimodal layout.
        #[arg(long)]
        text_only: bool,
    },
    /// Splice a chip pack (from weightgen) in front of a checkpoint's layers.
    #[command(after_help = "Example:\n  weightgen --shape 0.8b --out packs/acc8\n  \
        weight-surgery splice --base checkpoints/synth-0.8b --chip packs/acc8 --out checkpoints/inband-0.8b\n\n\
        The pack must have been built for the base's config (weightgen --base CHECKPOINT fits any).")]
    Splice {
        /// The base checkpoint folder.
        #[arg(long)]
        base: PathBuf,
        /// The chip pack folder.
        #[arg(long)]
        chip: PathBuf,
        /// Output folder (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Describe a checkpoint: base shape, chip, layers, vocabulary, sizes.
    Inspect {
        /// The checkpoint folder.
        dir: PathBuf,
    },
    /// Check a checkpoint's structure and chip hashes; with --base, that the base is recoverable bit for bit.
    Verify {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The base the checkpoint was spliced from.
        #[arg(long)]
        base: Option<PathBuf>,
    },
    /// Recover the base checkpoint from a spliced one.
    Strip {
        /// The spliced checkpoint folder.
        dir: PathBuf,
        /// Output folder (must not exist).
        #[arg(long)]
        out: PathBuf,
    },
}

fn bytes_bar(message: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Synth {
            shape,
            out,
            seed,
            text_only,
        } => {
            let bar = bytes_bar("synth");
            let options = synth::SynthOptions { shape, seed, text_only };
            let bytes = synth::synth(&options, &out, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
            bar.finish_and_clear();
            println!(
                "wrote {} ({} shape, {:.2} GiB of bf16 weights)",
                out.display(),
                shape.name(),
                bytes as f64 / (1u64 << 30) as f64
            );
        }
        Command::Splice { base, chip, out } => {
            let bar = bytes_bar("splice");
            let s = splice::splice(&base, &chip, &out, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
            bar.finish_and_clear();
            println!(
                "wrote {}: chip {:?} ({} layers) in front; residual {} -> {}; vocabulary {} -> {}",
                out.display(),
                s.chip,
                s.chip_layers,
                s.width.0,
                s.width.1,
                s.vocab.0,
                s.vocab.1
            );
        }
        Command::Inspect { dir } => print!("{}", inspect::inspect(&dir)?),
        Command::Verify { dir, base } => {
            let bar = bytes_bar("verify");
            let lines = verify::verify(&dir, base.as_deref(), &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
            bar.finish_and_clear();
            for l in lines {
                println!("ok: {l}");
            }
        }
        Command::Strip { dir, out } => {
            let bar = bytes_bar("strip");
            strip::strip(&dir, &out, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            })?;
            bar.finish_and_clear();
            println!("wrote {} (the base, recovered)", out.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    inband_chip::staging::remove_on_interrupt("weight-surgery");
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weight-surgery: {}", inband_chip::cli::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

//! A text session: a checkpoint opened for text mode with its chip for in-band
//! execution, generating after prompts (`inband generate`) or line by line (`inband chat`).

use std::io::Write;
use std::path::PathBuf;

use inband_firmware::Toolchain;

use crate::text::TextModel;
use crate::vm;

/// What text generation and in-band execution take (`generate` and `chat` on the command line).
#[derive(clap::Args)]
pub struct SessionOptions {
    /// The checkpoint (spliced or not; code regions run only in a spliced one's chip).
    #[arg(long)]
    pub model: PathBuf,
    /// Tokens to generate at most (generation also stops at the end-of-sequence token).
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// 0 for greedy decoding; otherwise softmax sampling at this temperature.
    #[arg(long, default_value_t = 0.0, value_parser = parse_temperature)]
    pub temperature: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where Qwen's own layers run: cpu, or cuda[:N] (needs a CUDA build).
    #[arg(long, default_value = "cpu", value_parser = vm::Device::parse)]
    pub device: vm::Device,
    /// Do not run code regions (`[C: expr]`, ```c blocks) in the chip.
    #[arg(long)]
    pub no_exec: bool,
    /// (in-band execution) Where the chip runs: cpu, or cuda[:N] (needs a CUDA build).
    #[arg(long, default_value = "cpu", value_parser = vm::Device::parse)]
    pub vm_device: vm::Device,
    /// (in-band execution) Instructions one code region may retire.
    #[arg(long, default_value_t = 2_000_000)]
    pub max_instructions: u64,
    /// (in-band execution) Seconds one code region may run after boot; a runaway region
    /// ends with an injected "time limit reached" line.
    #[arg(long, default_value_t = 30.0, value_parser = parse_seconds)]
    pub max_region_seconds: f64,
    /// (in-band execution) Console bytes of one region injected into the text at most.
    #[arg(long, default_value_t = 2048)]
    pub max_region_output: usize,
    /// Report each region's compile, load and run time on stderr as it finishes, and the
    /// time spent in the model's own forward passes at the end.
    #[arg(long)]
    pub stats: bool,
    /// Toolchain folder holding bin/riscv64-unknown-elf-gcc (default: $INBAND_TOOLCHAIN or PATH).
    #[arg(long)]
    pub toolchain: Option<PathBuf>,
}

/// A checkpoint opened for text mode, with its chip for in-band execution.
pub struct TextSession<'a> {
    options: &'a SessionOptions,
    pub model: TextModel,
    /// Runs the regions of every generation of the session on one resident engine.
    executor: Option<crate::inband::Executor<'static>>,
}

impl<'a> TextSession<'a> {
    /// `all_logits`: keep every position's logits (for `--logits`).
    pub fn open(options: &'a SessionOptions, all_logits: bool) -> anyhow::Result<Self> {
        let mut model = crate::text::TextModel::open(&options.model, options.device)?;
        model.all_logits = all_logits;
        // In-band execution needs the checkpoint's chip.
        let executor = if !options.no_exec && model.spliced {
            let chip = crate::spliced::SplicedModel::open(&options.model)?.chip()?;
            // The chip and its resident engine serve every generation until the process
            // ends: the model is kept for the process's life.
            let chip: &'static inband_chip::ChipModel = Box::leak(Box::new(chip));
            let o = options;
            Some(crate::inband::Executor {
                chip,
                device: o.vm_device,
                toolchain: Toolchain::locate(o.toolchain.as_deref()).ok(),
                limits: vm::Limits {
                    instructions: o.max_instructions,
                    wall: Some(std::time::Duration::from_secs_f64(o.max_region_seconds)),
                },
                max_output: o.max_region_output,
                report: o.stats,
                resident: Default::default(),
            })
        } else {
            None
        };
        if let Some(executor) = &executor {
            let seconds = executor.prepare()?;
            if options.stats {
                eprintln!("in-band: the chip's engine and the C runtime ready in {seconds:.2} s (once per session)");
            }
        }
        Ok(Self {
            options,
            model,
            executor,
        })
    }

    /// One generation after `prompt`, streamed to stdout.
    pub fn run(&self, prompt: &str, force: &str) -> anyhow::Result<crate::text::Generation> {
        use crate::text::Sampling;
        let o = self.options;
        let ids = self.model.encode(prompt)?;
        let forced = self.model.encode_forced(force)?;
        let sampling = if o.temperature > 0.0 {
            Sampling::Temperature(o.temperature, o.seed)
        } else {
            Sampling::Greedy
        };
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{prompt}");
        let generation = self.model.generate(
            &ids,
            &forced,
            o.max_tokens,
            sampling,
            self.executor.as_ref(),
            &mut stdout,
        )?;
        let _ = writeln!(stdout);
        if o.stats {
            eprintln!(
                "text: {} tokens through the model in {:.2} s",
                generation.ids.len(),
                generation.model_seconds
            );
        }
        Ok(generation)
    }

    pub fn generate(&self, prompt: &str, force: &str, logits: Option<&std::path::Path>) -> anyhow::Result<()> {
        let generation = self.run(prompt, force)?;
        if let Some(prefix) = logits {
            let rows = &generation.rows;
            let mut bytes = Vec::with_capacity(rows.len() * rows.first().map_or(0, |r| r.len()) * 4);
            for row in rows {
                for v in row {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            let json = serde_json::json!({
                "ids": generation.ids,
                "prompt_tokens": self.model.encode(prompt)?.len(),
                "rows": rows.len(),
                "vocab": rows.first().map_or(0, |r| r.len()),
            });
            std::fs::write(prefix.with_extension("f32"), bytes)?;
            std::fs::write(prefix.with_extension("json"), json.to_string())?;
        }
        Ok(())
    }

    pub fn chat(&self) -> anyhow::Result<()> {
        eprintln!("inband chat: one prompt per line; /force TEXT forces the next continuation's start; Ctrl-D ends");
        let mut force = String::new();
        for line in crate::text::chat_lines(std::io::stdin().lock()) {
            let line = line?;
            if let Some(text) = line.strip_prefix("/force ") {
                force = text.replace("\\n", "\n");
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            self.run(&line, &std::mem::take(&mut force))?;
        }
        Ok(())
    }
}

/// A sampling temperature: finite and not negative.
pub fn parse_temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!(
            "{s:?} is not a temperature (0 for greedy, or a positive number)"
        )),
    }
}

/// A positive, finite number of seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

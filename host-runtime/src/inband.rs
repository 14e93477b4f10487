//! In-band execution: code the model writes is compiled, booted in the chip and run;
//! the result re-enters the token stream as ordinary text.
//!
//! Two kinds of region are recognised in generated text:
//! - `[C: expr]`: the expression's value, printed in its type's natural format, is
//!   injected right after the closing bracket as ` = value`;
//! - a fenced block opened by ```` ```c ```` and holding a `main`: its console output is
//!   injected after the closing fence as an ```` ```output ```` block.
//!
//! Compile errors, traps and an exhausted instruction budget come back as one short line
//! of text. The chip's engine stays resident across regions (on a GPU, its uploaded
//! weights and compiled kernel); each region boots a fresh machine in it by loading
//! state. Qwen's own state is never touched (the chip runs in its own engine with Qwen's
//! layers skipped).

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use inband_chip::rv32im::batch::{run_batch, BatchOptions, Job};
use inband_chip::rv32im::load::BootLoader;
use inband_chip::{BatchEngine, ChipModel};
use inband_firmware::sandbox::REGION_LIMITS;
use inband_firmware::{load_elf, BuildOptions, Flavor, Libc, Toolchain};
use inband_golden::RunEnd;

use crate::vm::{self, Device};

/// A code region the model closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Region {
    /// `[C: expr]`
    Expression(String),
    /// A ```` ```c ```` block.
    Program(String),
}

const EXPR_OPEN: &str = "[C:";
/// How regions are optimised.
const REGION_OPT_LEVEL: &str = "-O2";
const FENCE_OPEN: &str = "```c\n";
const FENCE_CLOSE: &str = "\n```";

/// The first region that is complete in `text`, and the byte offset just after it.
pub fn closed_region(text: &str) -> Option<(Region, usize)> {
    let expr = text.find(EXPR_OPEN);
    let fence = text.find(FENCE_OPEN);
    let take_expr = match (expr, fence) {
        (Some(e), Some(f)) => e < f,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if take_expr {
        let start = expr? + EXPR_OPEN.len();
        // The closing bracket balances any brackets inside the expression (a[3]).
        let mut depth = 0usize;
        for (i, ch) in text[start..].char_indices() {
            match ch {
                '[' => depth += 1,
                ']' if depth == 0 => {
                    let body = text[start..start + i].trim().to_string();
                    return Some((Region::Expression(body), start + i + 1));
                }
                ']' => depth -= 1,
                _ => {}
            }
        }
        None
    } else {
        let start = fence? + FENCE_OPEN.len();
        let end = text[start..].find(FENCE_CLOSE)? + start;
        let after = end + FENCE_CLOSE.len();
        Some((Region::Program(text[start..end].to_string() + "\n"), after))
    }
}

/// What running a region gave: the text to inject and where the time went.
#[derive(Debug, Clone)]
pub struct Execution {
    pub injected: String,
    pub compile_seconds: f64,
    /// Making the chip's engine (the first region only: it stays resident).
    pub engine_seconds: f64,
    /// Booting the program by loading state.
    pub load_seconds: f64,
    pub run_seconds: f64,
    pub instructions: u64,
    pub forward_passes: u64,
}

impl Execution {
    /// One line: what ran and where the time went, from the closing marker to the result.
    pub fn summary(&self, region: &Region) -> String {
        let what = match region {
            Region::Expression(x) => format!("[C: {x}]"),
            Region::Program(_) => "```c block".to_string(),
        };
        let engine = if self.engine_seconds > 0.0 {
            format!("engine {:.1} ms (once), ", self.engine_seconds * 1e3)
        } else {
            String::new()
        };
        format!(
            "exec: {what}: compile {:.1} ms, {engine}load {:.1} ms, run {:.1} ms ({} instructions, {} forward passes)",
            self.compile_seconds * 1e3,
            self.load_seconds * 1e3,
            self.run_seconds * 1e3,
            self.instructions,
            self.forward_passes
        )
    }
}

/// Compiles and runs regions in the chip.
pub struct Executor<'a> {
    pub chip: &'a ChipModel,
    pub device: Device,
    /// The RISC-V compiler (None: regions come back as an error line).
    pub toolchain: Option<Toolchain>,
    /// Instructions a region may retire, and how long its run may take after boot.
    pub limits: vm::Limits,
    /// Console bytes of a region injected at most (the rest is cut, with a note).
    pub max_output: usize,
    /// Print each region's timing line on stderr as soon as it has run (`--stats`).
    pub report: bool,
    /// The chip's engines, made by the first region (or batch of regions) that needs
    /// them and kept (`Default::default()`).
    pub resident: RefCell<Resident<'a>>,
}

/// What an [`Executor`] keeps between regions.
#[derive(Default)]
pub struct Resident<'a> {
    /// The single-stream engine and its boot loader.
    vm: Option<vm::Vm<'a>>,
    /// The batch engine (regions pending at once) and its boot loader.
    batch: Option<(Box<dyn BatchEngine + 'a>, BootLoader<'a>)>,
}

/// Machines of the batch engine regions pending at once run in (more wait for a free one).
const REGION_MACHINES: usize = 8;
/// Passes per round of that batch: its wall-clock limit is checked between rounds.
const REGION_PASSES_PER_ROUND: usize = 1024;

/// A region compiled (or not) and waiting to run.
struct Compiled {
    is_expression: bool,
    execution: Execution,
    /// None when it did not compile (`execution.injected` says why).
    image: Option<inband_firmware::ProgramImage>,
}

/// How a region's program ran.
struct Outcome {
    end: RunEnd,
    timed_out: bool,
    retired: u64,
    passes: u64,
    console: Vec<u8>,
    load_seconds: f64,
    run_seconds: f64,
}

/// A region's result as the text injected after it: after an expression ` = value`,
/// after a block an ```` ```output ```` block.
fn wrap(is_expression: bool, body: &str) -> String {
    if is_expression {
        format!(" = {body}")
    } else {
        let body = if body.ends_with('\n') || body.is_empty() {
            body.to_string()
        } else {
            format!("{body}\n")
        };
        format!("\n```output\n{body}```\n")
    }
}

/// What a `[C: expr]` program writes first: its value's type, one byte.
mod value_type {
    pub const CHAR: u8 = 1;
    pub const SIGNED: u8 = 2;
    pub const UNSIGNED: u8 = 3;
    pub const BOOL: u8 = 4;
    pub const FLOAT: u8 = 5;
    pub const DOUBLE: u8 = 6;
    pub const STRING: u8 = 7;
}

/// The C program that hands `expr`'s value to the host: a type byte, then the value's
/// bytes as stored (little-endian), or a string's bytes up to its NUL. The chip computes
/// the value; the host formats it (integers in decimal, `float` and `double` as
/// `printf("%.17g")` does), so the program prints nothing through the C library and runs
/// in a few passes. It includes picolibc's maths, string and stdlib headers.
fn expression_program(expr: &str) -> String {
    use value_type::*;
    format!(
        "#include <ctype.h>\n#include <limits.h>\n#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\
         extern const char inband_expression_type_not_printable[];\n\
         #define INBAND_PUT(b) (*(volatile unsigned char *){console:#x}u = (unsigned char)(b))\n\
         int main(void) {{\n\
         __auto_type inband_value = ({expr});\n\
         const unsigned char inband_type = _Generic(inband_value, char: {CHAR}, signed char: {SIGNED}, \
         unsigned char: {UNSIGNED}, short: {SIGNED}, unsigned short: {UNSIGNED}, int: {SIGNED}, \
         unsigned int: {UNSIGNED}, long: {SIGNED}, unsigned long: {UNSIGNED}, long long: {SIGNED}, \
         unsigned long long: {UNSIGNED}, _Bool: {BOOL}, float: {FLOAT}, double: {DOUBLE}, char *: {STRING}, \
         const char *: {STRING}, default: inband_expression_type_not_printable[0]);\n\
         INBAND_PUT(inband_type);\n\
         if (inband_type == {STRING}) {{\n\
         const char *inband_s = (const char *)(unsigned long)_Generic(inband_value, char *: inband_value, \
         const char *: inband_value, default: 0);\n\
         while (*inband_s) INBAND_PUT(*inband_s++);\n\
         }} else {{\n\
         const unsigned char *inband_b = (const unsigned char *)&inband_value;\n\
         for (unsigned i = 0; i < sizeof inband_value; i++) INBAND_PUT(inband_b[i]);\n\
         }}\n\
         _Exit(0); /* nothing is buffered: skip exit()'s handlers */\n}}\n",
        console = inband_firmware::memory_map::MMIO_CONSOLE_TX,
    )
}

/// The text of the value an expression program wrote (None: not a value it could write).
fn expression_value(console: &[u8]) -> Option<String> {
    use value_type::*;
    let (&kind, bytes) = console.split_first()?;
    let int = |signed: bool| -> Option<String> {
        if bytes.is_empty() || bytes.len() > 8 {
            return None;
        }
        let mut raw = [0u8; 8];
        raw[..bytes.len()].copy_from_slice(bytes);
        let unsigned = u64::from_le_bytes(raw);
        let shift = 64 - 8 * bytes.len() as u32;
        Some(if signed {
            (((unsigned << shift) as i64) >> shift).to_string()
        } else {
            unsigned.to_string()
        })
    };
    match kind {
        CHAR if bytes.len() == 1 => Some(char::from(bytes[0]).to_string()),
        SIGNED | BOOL => int(true),
        UNSIGNED => int(false),
        FLOAT => Some(format_g17(f32::from_le_bytes(bytes.try_into().ok()?) as f64)),
        DOUBLE => Some(format_g17(f64::from_le_bytes(bytes.try_into().ok()?))),
        STRING => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    }
}

/// `x` as C's `printf("%.17g", x)` prints it: 17 significant digits, exponent form when
/// the exponent is below -4 or at least 17, trailing zeros dropped.
fn format_g17(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.into();
    }
    // Rust's exponent form rounds correctly, as glibc does: 16 digits after the point.
    let sci = format!("{x:.16e}");
    let (mantissa, exponent) = sci.split_once('e').expect("exponent form");
    let exponent: i32 = exponent.parse().expect("an exponent");
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if (-4..17).contains(&exponent) {
        trim(format!("{x:.*}", (16 - exponent) as usize))
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa.to_string()), exponent.abs())
    }
}

/// The compiler's first error, without file paths: one line a model can react to.
fn first_error(message: &str) -> String {
    let lines = || message.lines().skip_while(|l| l.starts_with("compilation failed"));
    if let Some(l) = lines().find(|l| l.contains("undefined reference to")) {
        if l.contains("inband_expression_type_not_printable") {
            return "error: only integer, floating-point, character and string expressions can be printed".into();
        }
        let what = &l[l.find("undefined reference to").unwrap_or(0)..];
        return format!("link error: {}", what.replace(['`', '\''], "'").trim());
    }
    let line = lines()
        .find(|l| l.contains("error: "))
        .or_else(|| lines().next())
        .unwrap_or("unknown error");
    let line = line.split_once("error: ").map(|(_, m)| m).unwrap_or(line);
    format!("compile error: {}", line.trim())
}

impl<'a> Executor<'a> {
    /// Runs `region` and returns the text to inject after it.
    pub fn execute(&self, region: &Region) -> Execution {
        let execution = self.execute_quietly(region);
        if self.report {
            // On its own line: the generated text on stdout is mid-line here.
            eprintln!("\n{}", execution.summary(region));
        }
        execution
    }

    fn execute_quietly(&self, region: &Region) -> Execution {
        let mut compiled = self.compile_region(region);
        if let Some(image) = compiled.image.take() {
            let mut console = Vec::new();
            let outcome = self
                .run(&image, &mut console, &mut compiled.execution)
                .map(|run| Outcome {
                    end: run.end,
                    timed_out: run.timed_out,
                    retired: run.counts.retired,
                    passes: run.counts.passes,
                    console,
                    load_seconds: run.boot_seconds,
                    run_seconds: run.run_seconds,
                })
                .map_err(|e| e.to_string());
            self.inject(&mut compiled, outcome);
        }
        compiled.execution
    }

    /// Runs `regions` together: each compiled on its own, then all booted into the
    /// machines of one batch (a GPU steps them in one launch) and run at once; returns
    /// what to inject after each, in order. Their timing lines (`report`) say so.
    pub fn execute_all(&self, regions: &[Region]) -> Vec<Execution> {
        if regions.len() < 2 {
            return regions.iter().map(|r| self.execute(r)).collect();
        }
        let mut compiled: Vec<Compiled> = regions.iter().map(|r| self.compile_region(r)).collect();
        let ready: Vec<usize> = (0..compiled.len()).filter(|&i| compiled[i].image.is_some()).collect();
        let jobs: Vec<Job> = ready
            .iter()
            .map(|&i| Job {
                image: Arc::new(compiled[i].image.take().expect("filtered")),
                budget: self.limits.instructions,
            })
            .collect();
        match self.run_together(&jobs) {
            Ok((outcomes, engine_seconds)) => {
                for (&i, outcome) in ready.iter().zip(outcomes) {
                    compiled[i].execution.engine_seconds = engine_seconds;
                    self.inject(&mut compiled[i], outcome);
                }
            }
            Err(e) => {
                for &i in &ready {
                    self.inject(&mut compiled[i], Err(e.to_string()));
                }
            }
        }
        let executions: Vec<Execution> = compiled.into_iter().map(|c| c.execution).collect();
        if self.report {
            for (region, execution) in regions.iter().zip(&executions) {
                eprintln!(
                    "\n{} (one batch of {} regions)",
                    execution.summary(region),
                    regions.len()
                );
            }
        }
        executions
    }

    /// Compiles `region`'s program (the expression's, or the block itself).
    fn compile_region(&self, region: &Region) -> Compiled {
        let (source, is_expression) = match region {
            Region::Expression(e) => (expression_program(e), true),
            Region::Program(code) => (code.clone(), false),
        };
        let mut compiled = Compiled {
            is_expression,
            execution: Execution {
                injected: String::new(),
                compile_seconds: 0.0,
                engine_seconds: 0.0,
                load_seconds: 0.0,
                run_seconds: 0.0,
                instructions: 0,
                forward_passes: 0,
            },
            image: None,
        };
        if !is_expression && !source.contains("main") {
            compiled.execution.injected = wrap(is_expression, "error: the code block has no main()");
            return compiled;
        }
        let start = Instant::now();
        match self.compile(&source, region_libc(is_expression)) {
            Ok(image) => compiled.image = Some(image),
            Err(message) => compiled.execution.injected = wrap(is_expression, &message),
        }
        compiled.execution.compile_seconds = start.elapsed().as_secs_f64();
        compiled
    }

    /// Sets what to inject after a region from how its program ran (or why it could not).
    fn inject(&self, compiled: &mut Compiled, outcome: Result<Outcome, String>) {
        let (is_expression, execution) = (compiled.is_expression, &mut compiled.execution);
        let body = match outcome {
            Ok(run) => {
                execution.load_seconds = run.load_seconds;
                execution.run_seconds = run.run_seconds;
                execution.instructions = run.retired;
                execution.forward_passes = run.passes;
                let value = match (is_expression, &run.end) {
                    (true, RunEnd::Exited(0)) => expression_value(&run.console),
                    _ => None,
                };
                let out = capped(&run.console, self.max_output);
                match run.end {
                    RunEnd::Exited(0) if value.is_some() => {
                        capped(value.unwrap_or_default().as_bytes(), self.max_output)
                    }
                    RunEnd::Exited(0) => out,
                    RunEnd::Exited(code) => format!("{out}{}exit code {code}", sep(&out)),
                    RunEnd::Trapped(trap) => format!("{out}{}error: {trap}", sep(&out)),
                    RunEnd::BudgetExhausted { .. } if run.timed_out => format!(
                        "{out}{}error: time limit reached ({} s, {} instructions run)",
                        sep(&out),
                        self.limits.wall.map_or(0.0, |w| w.as_secs_f64()),
                        run.retired
                    ),
                    RunEnd::BudgetExhausted { .. } => format!(
                        "{out}{}error: instruction budget exhausted ({} instructions)",
                        sep(&out),
                        self.limits.instructions
                    ),
                }
            }
            Err(e) => format!("error: the VM failed: {e}"),
        };
        execution.injected = wrap(is_expression, if is_expression { body.trim_end() } else { &body });
    }

    /// Runs `jobs` as one batch on the resident batch engine (made now if there is none
    /// yet: then its making's seconds come back with the outcomes, else 0).
    fn run_together(&self, jobs: &[Job]) -> anyhow::Result<(Vec<Result<Outcome, String>>, f64)> {
        let mut resident = self.resident.borrow_mut();
        let mut made_in = 0.0;
        if resident.batch.is_none() {
            let start = Instant::now();
            let engine = crate::batch::engine(self.chip, self.device, REGION_MACHINES)?;
            resident.batch = Some((engine, BootLoader::new(self.chip)?));
            made_in = start.elapsed().as_secs_f64();
        }
        let (engine, loader) = resident.batch.as_mut().expect("made above");
        let options = BatchOptions {
            passes_per_round: REGION_PASSES_PER_ROUND,
            trace: false,
            wall: self.limits.wall,
        };
        let start = Instant::now();
        let (results, stats) = run_batch(self.chip, engine.as_mut(), loader, jobs, options, |_, _| {})?;
        // The batch's boots and rounds are shared: each region is given the whole.
        let run_seconds = start.elapsed().as_secs_f64() - stats.boot_seconds;
        let outcomes = results
            .into_iter()
            .map(|r| {
                r.map(|r| Outcome {
                    end: r.end,
                    timed_out: r.timed_out,
                    retired: r.counts.retired,
                    passes: r.counts.passes,
                    console: r.console,
                    load_seconds: stats.boot_seconds,
                    run_seconds,
                })
                .map_err(|e| e.to_string())
            })
            .collect();
        Ok((outcomes, made_in))
    }

    /// Makes the resident engine and compiles the C runtime now, so that no region pays
    /// for them; returns the seconds it took.
    pub fn prepare(&self) -> Result<f64, inband_chip::rv32im::machine::ChipError> {
        let start = Instant::now();
        let mut resident = self.resident(&mut 0.0)?;
        // Compiling and booting a first expression compiles the C runtime and teaches
        // the loader the startup code every region shares. A toolchain that fails here
        // is reported by the first region instead.
        if let Ok(image) = self.compile(&expression_program("0"), region_libc(true)) {
            resident.warm_up(&image)?;
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Runs `image` on the resident engine (made first if this is the first region).
    fn run(
        &self,
        image: &inband_firmware::ProgramImage,
        console: &mut Vec<u8>,
        execution: &mut Execution,
    ) -> Result<vm::VmRun, inband_chip::rv32im::machine::ChipError> {
        self.resident(&mut execution.engine_seconds)?
            .run(image, vm::Boot::Load, self.limits, false, None, console)
    }

    /// The resident engine, made now if there is none yet (its making's seconds then
    /// go to `made_in`).
    fn resident(
        &self,
        made_in: &mut f64,
    ) -> Result<std::cell::RefMut<'_, vm::Vm<'a>>, inband_chip::rv32im::machine::ChipError> {
        let mut resident = self.resident.borrow_mut();
        if resident.vm.is_none() {
            let made = vm::Vm::new(self.chip, self.device)?;
            *made_in = made.engine_seconds;
            resident.vm = Some(made);
        }
        Ok(std::cell::RefMut::map(resident, |r| r.vm.as_mut().expect("made above")))
    }

    fn compile(&self, source: &str, libc: Libc) -> Result<inband_firmware::ProgramImage, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("error: no temporary folder: {e}"))?;
        let path: PathBuf = dir.path().join("region.c");
        std::fs::write(&path, source).map_err(|e| format!("error: cannot write the source: {e}"))?;
        let toolchain = self
            .toolchain
            .clone()
            .ok_or("error: no RISC-V compiler on this machine (scripts/setup.sh installs one)")?
            .with_options(BuildOptions {
                libc,
                ..Default::default()
            });
        // Model-written code: compiled with nothing of the host reachable (see
        // inband_firmware::sandbox).
        let elf = dir.path().join("region.elf");
        toolchain
            .build_confined(&[path], Flavor::BareMetal, REGION_OPT_LEVEL, &elf, REGION_LIMITS)
            .map_err(|e| first_error(&e.to_string()))?;
        let bytes = std::fs::read(&elf).map_err(|e| format!("error: cannot read the program: {e}"))?;
        load_elf(&bytes).map_err(|e| format!("error: {e}"))
    }
}

/// The C library a region links: an expression gets picolibc (its headers included, so
/// `sqrt(2.0)`, `abs(x)`, `strlen(s)` work; the program itself prints nothing), a code
/// block inband's small libc when it builds with it (its printf divides by nothing) and
/// picolibc when it needs more (`math.h`, `qsort`, float printf…).
fn region_libc(is_expression: bool) -> Libc {
    if is_expression {
        Libc::Picolibc
    } else {
        Libc::Auto
    }
}

/// A region's console output as text, cut after `max` bytes with a note saying so.
fn capped(console: &[u8], max: usize) -> String {
    if console.len() <= max {
        return String::from_utf8_lossy(console).into_owned();
    }
    let kept = String::from_utf8_lossy(&console[..max]);
    format!(
        "{kept}{}[output cut: {} of {} bytes shown]\n",
        sep(&kept),
        max,
        console.len()
    )
}

/// A separator before an error that follows program output on the same stream.
fn sep(out: &str) -> &'static str {
    if out.is_empty() || out.ends_with('\n') {
        ""
    } else {
        "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_expressions_with_nested_brackets() {
        let (r, end) = closed_region("so [C: a[2] + 1] and").unwrap();
        assert_eq!(r, Region::Expression("a[2] + 1".into()));
        assert_eq!(end, "so [C: a[2] + 1]".len());
        assert!(closed_region("so [C: 847*29").is_none());
    }

    #[test]
    fn finds_code_fences_only_once_closed() {
        let open = "Here:\n```c\nint main(void) { return 0; }";
        assert!(closed_region(open).is_none());
        let text = format!("{open}\n```\nafter");
        let (r, end) = closed_region(&text).unwrap();
        assert_eq!(r, Region::Program("int main(void) { return 0; }\n".into()));
        assert_eq!(&text[end..], "\nafter");
    }

    #[test]
    fn the_first_region_wins() {
        let (r, _) = closed_region("```c\nint main(){}\n``` then [C: 1+1]").unwrap();
        assert!(matches!(r, Region::Program(_)));
        let (r, _) = closed_region("[C: 1+1] then ```c\nint main(){}\n```").unwrap();
        assert_eq!(r, Region::Expression("1+1".into()));
    }

    #[test]
    fn values_print_as_c_prints_them() {
        use value_type::*;
        let value = |kind: u8, bytes: &[u8]| expression_value(&[&[kind][..], bytes].concat()).unwrap();
        assert_eq!(value(SIGNED, &248171i32.to_le_bytes()), "248171");
        assert_eq!(value(SIGNED, &(-5i16).to_le_bytes()), "-5");
        assert_eq!(value(UNSIGNED, &u64::MAX.to_le_bytes()), "18446744073709551615");
        assert_eq!(value(SIGNED, &i64::MIN.to_le_bytes()), "-9223372036854775808");
        assert_eq!(value(CHAR, b"A"), "A");
        assert_eq!(value(BOOL, &[1]), "1");
        assert_eq!(value(STRING, b"hi there"), "hi there");
        assert_eq!(value(DOUBLE, &2f64.sqrt().to_le_bytes()), "1.4142135623730951");
        assert_eq!(value(DOUBLE, &(1.0f64 / 3.0).to_le_bytes()), "0.33333333333333331");
        assert_eq!(value(DOUBLE, &0.5f64.to_le_bytes()), "0.5");
        assert_eq!(value(DOUBLE, &1e20f64.to_le_bytes()), "1e+20");
        assert_eq!(value(DOUBLE, &1.5e-7f64.to_le_bytes()), "1.4999999999999999e-07");
        assert_eq!(value(DOUBLE, &123456.0f64.to_le_bytes()), "123456");
        assert_eq!(value(DOUBLE, &0.0001f64.to_le_bytes()), "0.0001");
        assert_eq!(value(DOUBLE, &(-0.0f64).to_le_bytes()), "-0");
        assert_eq!(value(FLOAT, &0.1f32.to_le_bytes()), "0.10000000149011612");
        assert_eq!(value(DOUBLE, &f64::INFINITY.to_le_bytes()), "inf");
        assert!(expression_value(&[]).is_none());
        assert!(expression_value(&[DOUBLE, 1, 2]).is_none());
    }

    #[test]
    fn compiler_errors_become_one_line() {
        let msg = "compilation failed:\n/tmp/x/region.c: In function 'main':\n/tmp/x/region.c:3:5: error: 'y' undeclared (first use in this function)\n    3 | y;";
        assert_eq!(
            first_error(msg),
            "compile error: 'y' undeclared (first use in this function)"
        );
        let msg = "compilation failed:\n/usr/bin/ld: /tmp/x.o: in function `main':\nx.c:(.text+0x8): undefined reference to `f'\ncollect2: error: ld returned 1 exit status";
        assert_eq!(first_error(msg), "link error: undefined reference to 'f'");
    }
}

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
//! of text. Each region gets a freshly booted VM; Qwen's own state is never touched
//! (the chip runs in its own engine with Qwen's layers skipped).

use std::path::PathBuf;
use std::time::Instant;

use inband_chip::ChipModel;
use inband_firmware::sandbox::REGION_LIMITS;
use inband_firmware::{load_elf, Flavor, Toolchain};
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
    pub boot_seconds: f64,
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
        format!(
            "exec: {what}: compile {:.2} s, boot {:.2} s, run {:.2} s ({} instructions, {} forward passes)",
            self.compile_seconds, self.boot_seconds, self.run_seconds, self.instructions, self.forward_passes
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
}

/// The C program that prints `expr` in its type's natural format.
fn expression_program(expr: &str) -> String {
    format!(
        "#include <stdio.h>\n\
         extern const char inband_expression_type_not_printable[];\n\
         #define INBAND_FORMAT(x) _Generic((x), char: \"%c\", signed char: \"%d\", unsigned char: \"%u\", \
         short: \"%d\", unsigned short: \"%u\", int: \"%d\", unsigned int: \"%u\", long: \"%ld\", \
         unsigned long: \"%lu\", long long: \"%lld\", unsigned long long: \"%llu\", char *: \"%s\", \
         const char *: \"%s\", _Bool: \"%d\", default: inband_expression_type_not_printable)\n\
         int main(void) {{\n    printf(INBAND_FORMAT(({expr})), ({expr}));\n    return 0;\n}}\n"
    )
}

/// The compiler's first error, without file paths: one line a model can react to.
fn first_error(message: &str) -> String {
    let lines = || message.lines().skip_while(|l| l.starts_with("compilation failed"));
    if let Some(l) = lines().find(|l| l.contains("undefined reference to")) {
        if l.contains("inband_expression_type_not_printable") {
            return "error: only integer, character and string expressions can be printed".into();
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

impl Executor<'_> {
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
        let (source, is_expression) = match region {
            Region::Expression(e) => (expression_program(e), true),
            Region::Program(code) => (code.clone(), false),
        };
        let wrap = |body: &str| -> String {
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
        };
        let mut execution = Execution {
            injected: String::new(),
            compile_seconds: 0.0,
            boot_seconds: 0.0,
            run_seconds: 0.0,
            instructions: 0,
            forward_passes: 0,
        };
        if !is_expression && !source.contains("main") {
            execution.injected = wrap("error: the code block has no main()");
            return execution;
        }
        let start = Instant::now();
        let image = match self.compile(&source) {
            Ok(image) => image,
            Err(message) => {
                execution.compile_seconds = start.elapsed().as_secs_f64();
                execution.injected = wrap(&message);
                return execution;
            }
        };
        execution.compile_seconds = start.elapsed().as_secs_f64();
        let mut console = Vec::new();
        let body = match vm::run(self.chip, self.device, &image, self.limits, false, None, &mut console) {
            Ok(run) => {
                execution.boot_seconds = run.boot_seconds;
                execution.run_seconds = run.run_seconds;
                execution.instructions = run.counts.retired;
                execution.forward_passes = run.counts.passes;
                let out = capped(&console, self.max_output);
                match run.end {
                    RunEnd::Exited(0) => out,
                    RunEnd::Exited(code) => format!("{out}{}exit code {code}", sep(&out)),
                    RunEnd::Trapped(trap) => format!("{out}{}error: {trap}", sep(&out)),
                    RunEnd::BudgetExhausted { .. } if run.timed_out => format!(
                        "{out}{}error: time limit reached ({} s, {} instructions run)",
                        sep(&out),
                        self.limits.wall.map_or(0.0, |w| w.as_secs_f64()),
                        run.counts.retired
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
        execution.injected = wrap(if is_expression { body.trim_end() } else { &body });
        execution
    }

    fn compile(&self, source: &str) -> Result<inband_firmware::ProgramImage, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("error: no temporary folder: {e}"))?;
        let path: PathBuf = dir.path().join("region.c");
        std::fs::write(&path, source).map_err(|e| format!("error: cannot write the source: {e}"))?;
        let toolchain = self
            .toolchain
            .as_ref()
            .ok_or("error: no RISC-V compiler on this machine (scripts/setup.sh installs one)")?;
        // Model-written code: compiled with nothing of the host reachable (see
        // inband_firmware::sandbox).
        let elf = dir.path().join("region.elf");
        toolchain
            .build_confined(&[path], Flavor::BareMetal, "-O2", &elf, REGION_LIMITS)
            .map_err(|e| first_error(&e.to_string()))?;
        let bytes = std::fs::read(&elf).map_err(|e| format!("error: cannot read the program: {e}"))?;
        load_elf(&bytes).map_err(|e| format!("error: {e}"))
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

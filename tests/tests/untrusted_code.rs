//! Code a model writes is untrusted input: its compile reaches nothing of the host but
//! the toolchain (no host file's bytes ever reach the injected text, by any route), a
//! compile that would hang or exhaust memory ends with one line, and a region's output
//! and running time are bounded.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use inband_chip::ChipModel;
use inband_firmware::sandbox::REGION_LIMITS;
use inband_firmware::{Flavor, Toolchain};
use inband_host_runtime::inband::{Executor, Region};
use inband_host_runtime::vm::{Device, Limits};
use inband_qwen35::presets::Shape;
use inband_tests::rv32_chip;

fn chip() -> &'static ChipModel {
    static CHIP: OnceLock<ChipModel> = OnceLock::new();
    CHIP.get_or_init(|| rv32_chip(Shape::Tiny))
}

fn toolchain() -> Toolchain {
    Toolchain::locate(None).expect("the RISC-V toolchain (scripts/setup.sh)")
}

fn executor(limits: Limits) -> Executor<'static> {
    Executor {
        chip: chip(),
        device: Device::Cpu,
        toolchain: Some(toolchain()),
        limits,
        max_output: 256,
        report: false,
        resident: Default::default(),
    }
}

/// A host file holding a secret no compile may read.
struct Secret {
    _dir: tempfile::TempDir,
    path: PathBuf,
    text: String,
}

fn secret() -> Secret {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.txt");
    let text = format!("INBANDSECRET{}", std::process::id());
    std::fs::write(&path, format!("{text}\n")).unwrap();
    Secret { _dir: dir, path, text }
}

fn program(body: &str) -> Region {
    Region::Program(format!("#include <stdio.h>\n{body}\n"))
}

/// Every way of pulling a host file into a region's program or its compiler's messages.
fn leaking_regions(secret: &Path) -> Vec<(&'static str, Region)> {
    let p = secret.display();
    vec![
        (
            ".incbin",
            program(&format!(
                "__asm__(\".section .rodata\\n.globl leak\\nleak: .incbin \\\"{p}\\\"\\n.byte 0\\n.text\");\n\
                 extern const char leak[];\nint main(void) {{ puts(leak); return 0; }}"
            )),
        ),
        (
            "#include",
            program(&format!("#include \"{p}\"\nint main(void) {{ return 0; }}")),
        ),
        (
            "#include in a string",
            program(&format!(
                "static const char leak[] = {{\n#include \"{p}\"\n}};\nint main(void) {{ puts(leak); return 0; }}"
            )),
        ),
        (
            "#embed",
            program(&format!(
                "static const char leak[] = {{\n#embed \"{p}\"\n}};\nint main(void) {{ return 0; }}"
            )),
        ),
        ("[C: ] include", Region::Expression(format!("0\n#include \"{p}\"\n"))),
    ]
}

#[test]
fn no_host_file_reaches_the_injected_text() {
    let secret = secret();
    let exec = executor(Limits::instructions(100_000));
    for (route, region) in leaking_regions(&secret.path) {
        let out = exec.execute(&region).injected;
        assert!(!out.contains(&secret.text), "{route}: the secret leaked into {out:?}");
        assert!(out.contains("error"), "{route}: {out:?}");
        assert_eq!(
            out.trim().lines().count(),
            if matches!(region, Region::Program(_)) { 3 } else { 1 },
            "{route}: {out:?}"
        );
    }
}

#[test]
fn a_symlink_beside_the_source_reaches_nothing() {
    let secret = secret();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&secret.path, dir.path().join("secret.h")).unwrap();
    let source = dir.path().join("region.c");
    std::fs::write(&source, "#include \"secret.h\"\nint main(void) { return 0; }\n").unwrap();
    let out = dir.path().join("region.elf");
    let err = toolchain()
        .build_confined(&[source], Flavor::BareMetal, "-O2", &out, REGION_LIMITS)
        .unwrap_err()
        .to_string();
    assert!(!err.contains(&secret.text), "{err}");
    assert!(err.contains("secret.h"), "{err}");
}

#[test]
fn endless_includes_end_quickly_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let exec = executor(Limits::instructions(100_000));
    for path in [Path::new("/dev/zero"), Path::new("/dev/urandom"), fifo.as_path()] {
        let start = Instant::now();
        let out = exec
            .execute(&Region::Expression(format!("0\n#include \"{}\"\n", path.display())))
            .injected;
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}: {:?}",
            path.display(),
            start.elapsed()
        );
        assert!(out.starts_with(" = compile error:"), "{}: {out:?}", path.display());
        assert_eq!(out.lines().count(), 1, "{out:?}");
    }
}

#[test]
fn region_output_is_capped() {
    let exec = executor(Limits::instructions(200_000));
    let region = program("int main(void) { for (int i = 0; i < 1000; i++) putchar('x'); return 0; }");
    let out = exec.execute(&region).injected;
    assert!(out.contains("[output cut: 256 of 1000 bytes shown]"), "{out:?}");
    assert!(out.len() < 400, "{} bytes injected", out.len());
}

#[test]
fn a_runaway_region_ends_at_its_time_limit() {
    let exec = executor(Limits {
        instructions: u64::MAX,
        wall: Some(Duration::from_secs(2)),
    });
    let start = Instant::now();
    let out = exec
        .execute(&program("int main(void) { volatile int x = 0; for (;;) x++; }"))
        .injected;
    assert!(out.contains("error: time limit reached (2 s"), "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(60), "{:?}", start.elapsed());
}

#[test]
fn a_trace_that_cannot_be_written_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("nop.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    let elf = dir.path().join("nop.elf");
    toolchain().build(&[source], Flavor::BareMetal, "-O2", &elf).unwrap();
    let image = inband_firmware::load_elf(&std::fs::read(&elf).unwrap()).unwrap();
    let trace = dir.path().join("no-such-folder/trace");
    let err = inband_host_runtime::vm::run(
        chip(),
        Device::Cpu,
        &image,
        inband_host_runtime::vm::Boot::Load,
        Limits::instructions(1000),
        false,
        Some(&trace),
        &mut Vec::new(),
    )
    .err()
    .expect("the trace cannot be written");
    let text = err.to_string();
    assert!(
        text.starts_with("cannot write") && text.contains("no-such-folder"),
        "{text}"
    );
    assert!(!text.contains("layer math"), "{text}");
}

/// The chip's engine stays resident across regions: a region after a trapping one and
/// after one that filled memory and exited with an error runs exactly as it does in a
/// fresh process (same text, same instruction and pass counts).
#[test]
fn a_resident_engine_starts_every_region_fresh() {
    let limits = Limits::instructions(200_000);
    let trapping = program("int main(void) { *(volatile int *)0x100 = 1; return 0; }");
    let filling = program(
        "static volatile unsigned char buf[256];\n\
         int main(void) { for (int i = 0; i < 256; i++) buf[i] = 0x5a ^ i; return 7; }",
    );
    let probe = program(
        "static unsigned char buf[256];\n\
         int main(void) { unsigned s = 0; for (int i = 0; i < 256; i++) s += buf[i]; printf(\"%u\\n\", s); return 0; }",
    );
    let expression = Region::Expression("847 * 293".into());
    let resident = executor(limits);
    let first = resident.execute(&trapping);
    assert!(first.injected.contains("error:"), "{}", first.injected);
    let second = resident.execute(&filling);
    assert!(second.injected.contains("exit code 7"), "{}", second.injected);
    for region in [&probe, &expression] {
        let after = resident.execute(region);
        let fresh = executor(limits).execute(region);
        assert_eq!(after.injected, fresh.injected);
        assert_eq!(
            (after.instructions, after.forward_passes),
            (fresh.instructions, fresh.forward_passes)
        );
    }
    assert_eq!(resident.execute(&expression).injected, " = 248171");
}

/// Regions pending at once run as one batch: each comes back as it does alone (same text,
/// instructions and passes), a compile error and a trap among them included, and a
/// runaway region ends at its time limit without holding the others back.
#[test]
fn regions_pending_at_once_run_as_one_batch() {
    let limits = Limits {
        instructions: 2_000_000,
        wall: Some(Duration::from_secs(3)),
    };
    let regions = [
        Region::Expression("847 * 293".into()),
        program("int main(void) { *(volatile int *)0x100 = 1; return 0; }"),
        Region::Expression("nope".into()),
        program("int main(void) { volatile int x = 0; for (;;) x++; }"),
        program("int main(void) { printf(\"%d\\n\", 6 * 7); return 3; }"),
    ];
    let start = Instant::now();
    let together = executor(limits).execute_all(&regions);
    assert!(start.elapsed() < Duration::from_secs(90), "{:?}", start.elapsed());
    assert_eq!(together.len(), regions.len());
    assert_eq!(together[0].injected, " = 248171");
    assert!(
        together[3].injected.contains("error: time limit reached (3 s"),
        "{:?}",
        together[3].injected
    );
    for (i, (region, batched)) in regions.iter().zip(&together).enumerate() {
        if i == 3 {
            continue; // where a time limit stops a machine depends on the host's speed
        }
        let alone = executor(limits).execute(region);
        assert_eq!(batched.injected, alone.injected, "region {i}");
        assert_eq!(
            (batched.instructions, batched.forward_passes),
            (alone.instructions, alone.forward_passes),
            "region {i}"
        );
    }
}

/// An expression links picolibc with its headers: maths, string and stdlib functions
/// work in it (a libm call the compiler cannot fold included), and a double comes back
/// as C's `%.17g` prints it.
#[test]
fn an_expression_can_use_the_c_library() {
    let exec = executor(Limits::instructions(2_000_000));
    let value = |expr: &str| exec.execute(&Region::Expression(expr.into())).injected;
    assert_eq!(value("sqrt(2.0)"), " = 1.4142135623730951");
    assert_eq!(value("floor(atof(\"2.5\") * 4) + fabs(-0.5)"), " = 10.5");
    assert_eq!(value("strlen(\"inband\") + abs(-4)"), " = 10");
}

/// A code block that needs more than inband's libc (`math.h`, a float printf) is linked
/// with picolibc, confined as every region's compile is.
#[test]
fn a_code_block_that_needs_more_gets_picolibc() {
    let exec = executor(Limits::instructions(2_000_000));
    let region = program("#include <math.h>\nint main(void) { printf(\"%.3f\\n\", sqrt(2.0)); return 0; }");
    assert_eq!(exec.execute(&region).injected, "\n```output\n1.414\n```\n");
}

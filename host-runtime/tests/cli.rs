//! The `inband` command line on programs that go wrong: every failure ends with one
//! clear line on stderr and a documented non-zero status, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use inband_chip::engine::EngineState;
use inband_chip::rv32im::machine::RunCounts;
use inband_chip::rv32im::saved::{HostPlace, SavedMachine};
use inband_host_runtime::status;

const INBAND: &str = env!("CARGO_BIN_EXE_inband");

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/programs")
        .join(name)
}

fn inband(args: &[&str]) -> Output {
    Command::new(INBAND).args(args).output().expect("inband runs")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs a program expected to fail; checks the status and that stderr is exactly one
/// `inband:` line containing `needle`.
fn expect_failure(args: &[&str], expected_status: u8, needle: &str) {
    let out = inband(args);
    assert_eq!(out.status.code(), Some(expected_status as i32), "{args:?}: {out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "{args:?}: expected one line on stderr, got {lines:?}");
    assert!(lines[0].starts_with("inband: "), "{lines:?}");
    assert!(lines[0].contains(needle), "{args:?}: {:?} lacks {needle:?}", lines[0]);
}

fn run_trap(file: &str, needle: &str) {
    let p = program(file);
    expect_failure(
        &["run", "--engine", "golden", p.to_str().unwrap()],
        status::TRAPPED,
        needle,
    );
}

#[test]
fn illegal_instruction_is_one_line() {
    run_trap("illegal_instruction.S", "trap: illegal instruction 0xffffffff at pc 0x");
}

#[test]
fn misaligned_load_traps() {
    run_trap("misaligned_load.S", "misaligned load from 0x00040001");
}

#[test]
fn code_is_execute_only() {
    run_trap("load_from_rom.S", "(cause 5)");
    run_trap("store_to_rom.S", "(cause 7)");
}

#[test]
fn null_pointer_traps() {
    run_trap("null_load.S", "load from unmapped or execute-only address 0x00000000");
}

#[test]
fn ecall_and_ebreak_trap() {
    run_trap("ecall.S", "environment call (ecall)");
    run_trap("ebreak.S", "breakpoint (ebreak)");
}

#[test]
fn bad_jumps_trap() {
    run_trap("misaligned_jump.S", "(cause 0)");
    run_trap("fetch_from_ram.S", "instruction fetch outside ROM at pc 0x00040000");
}

#[test]
fn runaway_loop_hits_the_budget() {
    let p = program("runaway.c");
    expect_failure(
        &["run", "--max-instructions", "100000", p.to_str().unwrap()],
        status::BUDGET_EXHAUSTED,
        "instruction budget exhausted: 100000 instructions",
    );
}

#[test]
fn exit_code_and_stats_line() {
    let p = program("exit_code.c");
    let out = inband(&["run", "--stats", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(42));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "leaving with 42\n");
    let lines = stderr_lines(&out);
    let last = lines.last().expect("a stats line");
    assert!(last.starts_with("stats: instructions="), "{last}");
    assert!(last.contains(" forward_passes=0 steps_per_s="), "{last}");
    assert!(last.ends_with(" exit=42"), "{last}");
}

#[test]
fn trap_with_stats_ends_with_the_stats_line() {
    let p = program("illegal_instruction.S");
    let out = inband(&["run", "--stats", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(status::TRAPPED as i32));
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("illegal instruction"));
    assert!(
        lines[1].starts_with("stats: ") && lines[1].ends_with("exit=trap"),
        "{lines:?}"
    );
}

#[test]
fn malformed_elves_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.elf");
    std::fs::write(&garbage, b"this is not an executable\n").unwrap();
    expect_failure(
        &["run", garbage.to_str().unwrap()],
        status::BUILD_OR_LOAD_FAILED,
        "not an ELF file",
    );

    // A real ELF cut short.
    let full = dir.path().join("hello.elf");
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware/examples/hello.c");
    let built = inband(&["build", hello.to_str().unwrap(), "-o", full.to_str().unwrap()]);
    assert!(built.status.success(), "{built:?}");
    let bytes = std::fs::read(&full).unwrap();
    let cut = dir.path().join("cut.elf");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let out = inband(&["run", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(status::BUILD_OR_LOAD_FAILED as i32), "{out:?}");
    assert_eq!(stderr_lines(&out).len(), 1, "{out:?}");

    // This machine's own executables are 64-bit x86 ELFs.
    let host_elf = std::env::current_exe().unwrap();
    expect_failure(
        &["run", host_elf.to_str().unwrap()],
        status::BUILD_OR_LOAD_FAILED,
        "64-bit ELF",
    );

    let missing = dir.path().join("missing.elf");
    expect_failure(
        &["run", missing.to_str().unwrap()],
        status::BUILD_OR_LOAD_FAILED,
        "cannot read",
    );
}

#[test]
fn compile_errors_show_the_compiler_output() {
    let p = program("compile_error.c");
    let out = inband(&["run", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(status::BUILD_OR_LOAD_FAILED as i32));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("compilation failed"), "{text}");
    assert!(text.contains("expected ';'"), "{text}");
}

#[test]
fn build_writes_an_elf_and_refuses_unknown_sources() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("nested/fib.elf");
    let fib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../firmware/examples/fib.c");
    let out = inband(&["build", fib.to_str().unwrap(), "-o", out_path.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let run = inband(&["run", out_path.to_str().unwrap()]);
    assert!(run.status.success());
    assert!(String::from_utf8_lossy(&run.stdout).contains("fib(20) = 6765"));

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hi").unwrap();
    expect_failure(
        &[
            "build",
            text.to_str().unwrap(),
            "-o",
            dir.path().join("x.elf").to_str().unwrap(),
        ],
        status::BUILD_OR_LOAD_FAILED,
        "not a C or assembly source",
    );
}

#[test]
fn build_never_writes_over_its_source() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("x.c");
    let text = "int main(void) { return 0; }\n";
    std::fs::write(&source, text).unwrap();
    let s = source.to_str().unwrap();
    expect_failure(
        &["build", s, "-o", s],
        status::BUILD_OR_LOAD_FAILED,
        "is one of the sources",
    );
    assert_eq!(std::fs::read_to_string(&source).unwrap(), text);
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "nothing written beside it"
    );
}

#[test]
fn the_chip_engine_says_where_its_chip_comes_from() {
    let p = program("illegal_instruction.S");
    expect_failure(
        &["run", "--engine", "chip", p.to_str().unwrap()],
        status::BUILD_OR_LOAD_FAILED,
        "--model DIR",
    );
}

#[test]
fn chip_only_flags_are_refused_with_the_golden_engine() {
    let p = program("illegal_instruction.S");
    for flags in [
        &["--trace", "t"][..],
        &["--model", "m"],
        &["--verify"],
        &["--device", "cuda"],
        &["--boot", "prefill"],
        &["--save-state", "s"],
        &["--resume", "s"],
    ] {
        let mut args = vec!["run", "--engine", "golden"];
        args.extend_from_slice(flags);
        args.push(p.to_str().unwrap());
        expect_failure(&args, status::BUILD_OR_LOAD_FAILED, "applies to --engine chip");
    }
}

#[test]
fn saved_machines_that_cannot_be_continued_are_refused_in_one_line() {
    let p = program("exit_code.c");
    let dir = tempfile::tempdir().unwrap();
    let (missing, garbage) = (dir.path().join("missing.state"), dir.path().join("garbage.state"));
    std::fs::write(&garbage, b"not a saved machine").unwrap();
    let nowhere = dir.path().join("no folder").join("s.state");
    let folder = dir.path().to_path_buf();
    for (flag, state, needle) in [
        ("--resume", &missing, "No such file"),
        ("--resume", &garbage, "not a safetensors file"),
        ("--save-state", &folder, "a folder"),
        ("--save-state", &nowhere, "does not exist"),
    ] {
        let chip = ["run", "--engine", "chip", "--chip", "no-pack"];
        let args = [&chip[..], &[flag, state.to_str().unwrap(), p.to_str().unwrap()]].concat();
        expect_failure(&args, status::BUILD_OR_LOAD_FAILED, needle);
    }
    // A saved machine that has retired --max-instructions already (counted from the
    // program's start) would stop at once: refused before the chip is opened.
    let done = dir.path().join("done.state");
    saved_after(1_000).write(&done).unwrap();
    let args = [
        "run",
        "--engine",
        "chip",
        "--chip",
        "no-pack",
        "--max-instructions",
        "1000",
        "--resume",
    ];
    let args = [&args[..], &[done.to_str().unwrap(), p.to_str().unwrap()]].concat();
    expect_failure(&args, status::BUILD_OR_LOAD_FAILED, "retired 1000 instructions already");
    expect_failure(
        &[
            "run",
            "--engine",
            "chip",
            "--batch",
            "--save-state",
            "s",
            p.to_str().unwrap(),
        ],
        status::BUILD_OR_LOAD_FAILED,
        "leave out --batch",
    );
}

/// A saved machine (of no real chip) that has retired `retired` instructions.
fn saved_after(retired: u64) -> SavedMachine {
    SavedMachine {
        chip: "chip".into(),
        program: "program".into(),
        next_pc: 0x100,
        host: HostPlace {
            counts: RunCounts {
                retired,
                ..Default::default()
            },
            ..Default::default()
        },
        console: Vec::new(),
        engine: EngineState {
            layout: "none".into(),
            floats: Vec::new(),
            words: Vec::new(),
        },
    }
}

#[test]
fn bad_arguments_are_refused_before_any_work() {
    for (args, needle) in [
        (
            &["generate", "--model", "m", "--prompt", "p", "--temperature", "NaN"][..],
            "not a temperature",
        ),
        (
            &["generate", "--model", "m", "--prompt", "p", "--temperature=-1"],
            "not a temperature",
        ),
        (
            &["generate", "--model", "m", "--prompt", "p", "--logits", "out/"],
            "is a folder",
        ),
        (
            &["generate", "--model", "m", "--prompt", "p", "--max-region-seconds", "0"],
            "not a positive number",
        ),
        (&["bench", "--chip", "p", "--against-reference"], "give --device cuda"),
        (
            &[
                "bench",
                "--chip",
                "p",
                "--device",
                "cuda",
                "--kernel",
                "reference",
                "--against-reference",
            ],
            "no --kernel reference",
        ),
        (&["bench", "--chip", "p", "--kernel", "reference"], "give --device cuda"),
        (
            &["run", "--engine", "chip", "--chip", "p", "--kernel", "reference", "x.c"],
            "give --device cuda",
        ),
        (
            &["run", "--engine", "chip", "--kernel", "fastest", "x.c"],
            "invalid value",
        ),
    ] {
        let out = inband(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn an_elf_larger_than_any_program_is_refused_unread() {
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.elf");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(1 << 30).unwrap(); // sparse: no disk used
    expect_failure(
        &["run", big.to_str().unwrap()],
        status::BUILD_OR_LOAD_FAILED,
        "no program for a machine with",
    );
}

#[test]
fn a_failed_build_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("x.c");
    std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
    // The output names a folder: the final rename fails after the ELF was copied.
    let out = tmp.path().join("out.elf");
    std::fs::create_dir(&out).unwrap();
    let o = inband(&["build", source.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(!o.status.success(), "{o:?}");
    let mut names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["out.elf", "x.c"], "nothing but the source and the folder");
}

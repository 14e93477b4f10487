//! Rung 2 of the verification ladder: the golden reference agrees with
//! qemu-riscv32 on pc and all 32 registers before every instruction of every example
//! and ISA test (Linux-ABI builds), and the bare-metal build that inband runs prints
//! the same console output and exits with the same code.

use inband_firmware::{BuildOptions, Flavor};
use inband_golden::RunEnd;
use inband_tests::{
    build_with, corpus, kernel_programs, lockstep_against_qemu, picolibc, picolibc_programs, program_name,
    run_golden_bare,
};

fn check(name: &str) {
    let source = corpus()
        .into_iter()
        .find(|p| program_name(p) == name)
        .unwrap_or_else(|| panic!("no program {name} in the corpus"));
    check_built(name, &source, BuildOptions::default());
}

/// A picolibc program (`tests/picolibc/NAME.c`), built with picolibc in both flavours.
fn check_picolibc(name: &str) {
    let source = picolibc_programs()
        .into_iter()
        .find(|p| program_name(p) == name)
        .unwrap_or_else(|| panic!("no program {name} in tests/picolibc"));
    check_built(name, &source, picolibc());
}

fn check_built(name: &str, source: &std::path::Path, options: BuildOptions) {
    let dir = tempfile::tempdir().unwrap();
    let linux = build_with(source, Flavor::LinuxUser, dir.path(), options.clone());
    let report = lockstep_against_qemu(&linux).unwrap_or_else(|m| panic!("{name}: golden and qemu differ at {m}"));
    assert!(report.instructions > 0);
    assert_eq!(
        report.golden_console, report.qemu_console,
        "{name}: console output differs"
    );
    assert_eq!(report.golden_exit, report.qemu_exit, "{name}: exit code differs");

    let bare = build_with(source, Flavor::BareMetal, dir.path(), options);
    let (machine, end) = run_golden_bare(&bare, 1 << 32);
    assert_eq!(
        end,
        RunEnd::Exited(report.qemu_exit.unwrap()),
        "{name}: bare-metal build ended differently"
    );
    assert_eq!(
        machine.console, report.qemu_console,
        "{name}: bare-metal console differs from qemu's"
    );
    eprintln!("{name}: {} instructions in lockstep", report.instructions);
}

macro_rules! lockstep_tests {
    ($($test:ident => $name:literal,)*) => {
        $(#[test] fn $test() { check($name); })*

        #[test]
        fn every_corpus_program_has_a_lockstep_test() {
            let listed = [$($name),*];
            for p in corpus() {
                let n = program_name(&p);
                assert!(listed.contains(&n.as_str()), "add {n} to lockstep_tests!");
            }
        }
    };
}

lockstep_tests! {
    hello => "hello",
    fib => "fib",
    sort => "sort",
    strings => "strings",
    int64 => "int64",
    structures => "structures",
    euler10 => "euler10",
    isa_alu_rr => "isa/alu_rr",
    isa_alu_imm => "isa/alu_imm",
    isa_muldiv => "isa/muldiv",
    isa_branch => "isa/branch",
    isa_jump => "isa/jump",
    isa_memory => "isa/memory",
    isa_upper => "isa/upper",
}

/// picolibc's libm (double and float) and printf of floats, in lockstep with qemu.
#[test]
fn picolibc_math() {
    check_picolibc("math");
}

/// picolibc's assert, qsort, bsearch, strtol, strtoul, strstr, strtok, snprintf, ctype,
/// setjmp and longjmp, in lockstep with qemu.
#[test]
fn picolibc_stdlib() {
    check_picolibc("stdlib");
}

/// The C kernels of `tests/kernels/`, each in lockstep with qemu.
#[test]
fn kernels() {
    let programs = kernel_programs();
    assert_eq!(programs.len(), 5);
    for source in programs {
        check_built(&program_name(&source), &source, BuildOptions::default());
    }
}

/// inband's own memset, memcpy and memmove (word stores where the alignment allows)
/// against byte-at-a-time references, every alignment and length up to 24, in lockstep
/// with qemu; the program checks itself and prints "ok".
#[test]
fn libc_memory_functions() {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("libc/memory.c");
    let dir = tempfile::tempdir().unwrap();
    let bare = build_with(&source, Flavor::BareMetal, dir.path(), BuildOptions::default());
    let (machine, end) = run_golden_bare(&bare, 1 << 32);
    assert_eq!(String::from_utf8_lossy(&machine.console), "ok\n");
    assert_eq!(end, RunEnd::Exited(0));
    check_built("libc/memory", &source, BuildOptions::default());
}

#[test]
fn every_picolibc_program_has_a_lockstep_test() {
    for p in picolibc_programs() {
        let n = program_name(&p);
        assert!(
            ["math", "stdlib"].contains(&n.as_str()),
            "add a lockstep test for tests/picolibc/{n}.c"
        );
    }
}

/// Without `--libc`, a program that needs more than inband's libc (here `math.h` and a
/// float printf) gets picolibc, and one that builds with inband's libc keeps it.
#[test]
fn auto_libc_takes_picolibc_only_when_needed() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("root.c");
    std::fs::write(
        &source,
        "#include <math.h>\n#include <stdio.h>\nint main(void) { printf(\"%.17g\\n\", sqrt(2.0)); return 0; }\n",
    )
    .unwrap();
    let elf = build_with(&source, Flavor::BareMetal, dir.path(), BuildOptions::default());
    let (machine, end) = run_golden_bare(&elf, 1 << 24);
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(machine.console, b"1.4142135623730951\n");

    let hello = corpus().into_iter().find(|p| program_name(p) == "hello").unwrap();
    let (auto, inband) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let built = |dir: &std::path::Path, libc| {
        let options = BuildOptions {
            libc,
            ..Default::default()
        };
        std::fs::read(build_with(&hello, Flavor::BareMetal, dir, options)).unwrap()
    };
    assert_eq!(
        built(auto.path(), inband_firmware::Libc::Auto),
        built(inband.path(), inband_firmware::Libc::Inband)
    );
}

/// `tests/speed/FILE` prints `want` in more than 10 M instructions on golden (bare metal),
/// and its Linux build prints the same under qemu (too long for a lockstep trace; every
/// instruction kind it uses is in the lockstep corpus).
fn sieve_prints(file: &str, want: &str) {
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("speed")
        .join(file);
    let dir = tempfile::tempdir().unwrap();
    let bare = build_with(&source, Flavor::BareMetal, dir.path(), BuildOptions::default());
    let (machine, end) = run_golden_bare(&bare, 1 << 32);
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(String::from_utf8_lossy(&machine.console), want);
    assert!(machine.instret > 10_000_000, "{} instructions", machine.instret);
    let linux = build_with(&source, Flavor::LinuxUser, dir.path(), BuildOptions::default());
    let qemu = std::process::Command::new(inband_golden::qemu::QEMU)
        .args(["-cpu", inband_golden::qemu::QEMU_CPU])
        .arg(&linux)
        .output()
        .expect("qemu-riscv32 runs");
    assert!(qemu.status.success(), "qemu: {:?}", qemu.status);
    assert_eq!(String::from_utf8_lossy(&qemu.stdout), want);
}

/// The long sieve (the program the chip's speed was first measured with on the GPU): the
/// primes below two million.
#[test]
fn sieve_sums_the_primes_below_two_million() {
    sieve_prints("sieve.c", "148933 primes below 2000000, their sum 142913828922\n");
}

/// The ten-million-instruction sieve (the primes below 800,000, written so that nearly
/// every instruction is one pass of the chip).
#[test]
fn sieve10m_sums_the_primes_below_eight_hundred_thousand() {
    sieve_prints("sieve10m.c", "63951 primes below 800000, their sum 24465663438\n");
}

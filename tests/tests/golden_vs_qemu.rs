//! Rung 2 of the verification ladder: the golden reference agrees with
//! qemu-riscv32 on pc and all 32 registers before every instruction of every example
//! and ISA test (Linux-ABI builds), and the bare-metal build that inband runs prints
//! the same console output and exits with the same code.

use inband_firmware::Flavor;
use inband_golden::RunEnd;
use inband_tests::{build, corpus, lockstep_against_qemu, program_name, run_golden_bare};

fn check(name: &str) {
    let source = corpus()
        .into_iter()
        .find(|p| program_name(p) == name)
        .unwrap_or_else(|| panic!("no program {name} in the corpus"));
    let dir = tempfile::tempdir().unwrap();
    let linux = build(&source, Flavor::LinuxUser, dir.path());
    let report = lockstep_against_qemu(&linux).unwrap_or_else(|m| panic!("{name}: golden and qemu differ at {m}"));
    assert!(report.instructions > 0);
    assert_eq!(
        report.golden_console, report.qemu_console,
        "{name}: console output differs"
    );
    assert_eq!(report.golden_exit, report.qemu_exit, "{name}: exit code differs");

    let bare = build(&source, Flavor::BareMetal, dir.path());
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

//! The GPU's sparse chip kernel, compiled for the CPU (`inband_host_runtime::gpu::emulation`:
//! a block's threads as fibers that switch where they wait on each other), runs programs
//! with the CPU engine's token streams: the kernel's logic is checked where no GPU is (its
//! arithmetic and speed are the GPU's, checked by `scripts/gpu-checks.sh`).
//! Built with `--features cuda` (scripts/test.sh runs it so). The 0.8b shape by default;
//! `INBAND_EMULATED_SHAPE=4b` for the 4b's path (see `shape`).
#![cfg(feature = "cuda")]

use std::path::Path;
use std::sync::OnceLock;

use inband_chip::rv32im::load::BootLoader;
use inband_chip::rv32im::tokens::kind;
use inband_chip::{ChipModel, ChipRunner, ChipToken, PassEngine};
use inband_firmware::{load_elf, Flavor, ProgramImage};
use inband_host_runtime::gpu::emulation::{EmulatedKernel, Launch, Schedule};
use inband_qwen35::presets::Shape;
use inband_tests::{build, corpus, program_name, rv32_chip};

/// The shape the tests run the chip at, as the GPU runs it: the 0.8b (a block of 768
/// threads with shared memory for every resident word and the readers bits), or, with
/// `INBAND_EMULATED_SHAPE=4b`, the 4b (1,024 threads for its 32 value heads, and the
/// shared memory an H100's or H200's block has: 227 KB less the kernel's 20,912 bytes of
/// static arrays (ptxas), so that its scatters' column starts are read from global
/// memory, as on the GPU).
fn shape() -> (Shape, u32, usize) {
    match std::env::var("INBAND_EMULATED_SHAPE").as_deref() {
        Ok("4b") => (Shape::Qwen4b, 1024, 232_448 - 20_912),
        Ok("0.8b") | Err(_) => (Shape::Qwen0_8b, 768, usize::MAX),
        Ok(other) => panic!("INBAND_EMULATED_SHAPE is 0.8b or 4b, not {other}"),
    }
}

/// The chip at that shape.
fn chip() -> &'static ChipModel {
    static CHIP: OnceLock<ChipModel> = OnceLock::new();
    CHIP.get_or_init(|| rv32_chip(shape().0))
}

/// The kernel, compiled once for the tests that share it (a compile takes ~10 s).
fn kernel() -> &'static EmulatedKernel {
    static KERNEL: OnceLock<EmulatedKernel> = OnceLock::new();
    KERNEL.get_or_init(|| build_kernel(&[]))
}

/// The kernel built with `-DKEEP_READS` (its kept reads: `value_head`), once.
fn kernel_keeping_reads() -> &'static EmulatedKernel {
    static KERNEL: OnceLock<EmulatedKernel> = OnceLock::new();
    KERNEL.get_or_init(|| build_kernel(&["-DKEEP_READS"]))
}

/// The kernel compiled with `options` into cargo's folder for integration tests' files
/// (compiled again by every run of the tests), one folder per kernel source, options and
/// shape: two runs at once of different variants (a counter build beside the longer set)
/// would otherwise replace each other's runner mid-run.
fn build_kernel(options: &[&str]) -> EmulatedKernel {
    use std::hash::{Hash, Hasher};
    let mut variant = std::collections::hash_map::DefaultHasher::new();
    for name in ["INBAND_KERNEL_SOURCE", "INBAND_KERNEL_OPTIONS", "INBAND_EMULATED_SHAPE"] {
        std::env::var(name).unwrap_or_default().hash(&mut variant);
    }
    options.hash(&mut variant);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kernel_on_cpu-{:016x}", variant.finish()));
    let (_, threads, shared) = shape();
    EmulatedKernel::build(&dir, threads, chip(), shared, options).unwrap()
}

fn image(name: &str) -> ProgramImage {
    let source = corpus().into_iter().find(|p| program_name(p) == name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    load_elf(&std::fs::read(build(&source, Flavor::BareMetal, dir.path())).unwrap()).unwrap()
}

/// `name` booted by loading state, then run to its exit (or `passes`) by `kernel`: its
/// token ids against the CPU engine's, launch by launch.
fn same_stream(kernel: &EmulatedKernel, dir: &Path, name: &str, passes: usize, schedule: Schedule) {
    let chip = chip();
    let image = image(name);
    let plan = BootLoader::new(chip).unwrap().plan(&image).unwrap();
    let tokens = &chip.spec.tokens;
    let ids = |t: &[ChipToken]| t.iter().map(|t| tokens.encode(t) as u32).collect::<Vec<_>>();
    let launches = [
        Launch {
            inputs: ids(&plan.tail),
            max_passes: plan.tail.len(),
            stop_mask: 0,
        },
        Launch {
            inputs: ids(std::slice::from_ref(&plan.entry)),
            max_passes: passes,
            stop_mask: 1 << kind::T,
        },
    ];
    let mut cpu = ChipRunner::new(chip).unwrap();
    cpu.load_state(&plan.rows).unwrap();
    let expected = [
        ids(&cpu.passes(&plan.tail, plan.tail.len(), &[]).unwrap()),
        ids(&cpu
            .passes(std::slice::from_ref(&plan.entry), passes, &[kind::T])
            .unwrap()),
    ];
    assert_eq!(
        expected[1].last().map(|&t| tokens.decode(t as usize).unwrap().kind),
        Some(kind::T)
    );
    let got = kernel
        .run(chip, &plan.rows, &launches, &dir.join(name.replace('/', "_")), schedule)
        .unwrap();
    assert_eq!(got.len(), expected.len());
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        let first = g.iter().zip(e).position(|(a, b)| a != b);
        assert!(
            first.is_none() && g.len() == e.len(),
            "{name} ({schedule:?}), launch {i}: {} tokens against the CPU engine's {}, first difference at pass {first:?}",
            g.len(),
            e.len()
        );
    }
}

/// Both shapes' blocks hold the readers bits (the 4b's beside its required words, its
/// column starts left in global memory), so both leave out the chip's ROM layer (1) and
/// the layers its memory ports read (4-8) on the passes no listed dim reaches them.
#[test]
fn the_rom_and_memory_port_layers_may_be_left_out() {
    assert_eq!(kernel().gateable, Some(0b1_1111_0010));
}

/// With `-DKEEP_READS` (not yet measured on a GPU, so not the default), the heads whose
/// reads repeat while they do not write (layer 0's pc row and offset heads) keep them and
/// add them again; the tokens stay the CPU engine's. (A copy that adds a kept read's
/// products twice chooses other tokens: these runs go through the kept reads.)
#[test]
fn heads_whose_reads_repeat_keep_them() {
    let kernel = kernel_keeping_reads();
    assert_eq!(kernel.kept_slots, 2);
    let dir = tempfile::tempdir().unwrap();
    for name in ["hello", "isa/memory", "isa/jump"] {
        same_stream(kernel, dir.path(), name, 5_000, Schedule::InOrder);
    }
}

/// Programs whose runs take the kernel through every kind of pass the chip has that fits
/// a test's time (~2,000 passes at ~170 a second): the boot's last passes, fetches across
/// rows, register writes short and long, loads, stores and line fills, branches, jumps and
/// links, console output and the exit.
#[test]
fn the_emulated_kernel_chooses_the_cpu_engines_tokens() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["hello", "isa/memory", "isa/branch", "isa/jump", "isa/upper"] {
        same_stream(kernel(), dir.path(), name, 5_000, Schedule::InOrder);
    }
}

/// The same tokens whatever order the block's threads run in between two waits: no two
/// threads touch the same data without a barrier or an atomic between them (or if they
/// do, it changes no token).
#[test]
fn the_emulated_kernels_tokens_do_not_hang_on_its_threads_order() {
    let dir = tempfile::tempdir().unwrap();
    for schedule in [Schedule::Reversed, Schedule::Shuffled(31)] {
        same_stream(kernel(), dir.path(), "hello", 5_000, schedule);
    }
}

/// The longer set a kernel change is checked on before it is measured on a GPU (~5
/// minutes on two cores, so not part of the default run: `cargo test --release --features
/// cuda -p inband-tests --test kernel_on_cpu -- --ignored`): the programs whose passes
/// reach most of the chip's units (string functions, 64-bit arithmetic, multiplication
/// and division, every register-register operation, loads and stores), 40,000 passes each.
#[test]
#[ignore]
fn the_emulated_kernel_chooses_the_cpu_engines_tokens_on_longer_runs() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["strings", "int64", "isa/muldiv", "isa/alu_rr", "isa/memory"] {
        same_stream(kernel(), dir.path(), name, 40_000, Schedule::InOrder);
    }
}

//! The RV32IM chip against the golden reference: every ISA test and example program,
//! the trap programs, and random instruction streams, each checked after every retired
//! instruction (pc, x0..x31, console; RAM after stores), on the sparse path of the
//! project's layer math with the chip compiled for the 0.8b shape.

use std::path::Path;
use std::sync::OnceLock;

use inband_chip::rv32im::classes::InstructionClass;
use inband_chip::rv32im::load::BootLoader;
use inband_chip::rv32im::machine::{boot_tokens, boot_tokens_with, ChipMachine, PassCause, RunCounts};
use inband_chip::{ChipModel, ChipRunner, ChipToken, PassEngine};
use inband_firmware::{load_elf, Flavor, ProgramImage};
use inband_golden::{Environment, Machine, RunEnd};
use inband_qwen35::presets::Shape;
use inband_tests::{build, corpus, fuzz, program_name, rv32_chip};

/// The chip compiled for the 0.8b shape, as a host drives it (sparse path).
fn chip() -> &'static ChipModel {
    static CHIP: OnceLock<ChipModel> = OnceLock::new();
    CHIP.get_or_init(|| rv32_chip(Shape::Qwen0_8b))
}

fn image_of(source: &Path) -> ProgramImage {
    let dir = tempfile::tempdir().unwrap();
    let elf = build(source, Flavor::BareMetal, dir.path());
    load_elf(&std::fs::read(elf).unwrap()).unwrap()
}

/// Runs `image` on the chip in lockstep with golden; returns how it ended and the counts.
fn lockstep(name: &str, image: &ProgramImage, budget: u64) -> (RunEnd, RunCounts, Vec<u8>) {
    let mut golden = Machine::new(image, Environment::BareMetal);
    let mut machine = ChipMachine::load(chip(), image).unwrap();
    let end = machine
        .run(budget, Some(&mut golden))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (end, machine.counts, machine.console.clone())
}

/// The golden outcome of a whole run.
fn golden_end(image: &ProgramImage, budget: u64) -> (RunEnd, Vec<u8>) {
    let mut g = Machine::new(image, Environment::BareMetal);
    let end = g.run(budget);
    (end, g.console)
}

fn program(name: &str) -> std::path::PathBuf {
    corpus()
        .into_iter()
        .find(|p| program_name(p) == name)
        .unwrap_or_else(|| panic!("no program {name}"))
}

/// A whole program: same end, same console, every step checked; returns passes/instruction.
fn whole(name: &str) -> f64 {
    whole_image(name, &image_of(&program(name)))
}

/// As [`whole`], for a program already built.
fn whole_image(name: &str, image: &ProgramImage) -> f64 {
    let counts = whole_counts(name, image);
    counts.passes as f64 / counts.retired as f64
}

/// As [`whole_image`], returning the run's counts.
fn whole_counts(name: &str, image: &ProgramImage) -> RunCounts {
    let image = image.clone();
    let (want, console) = golden_end(&image, u64::MAX);
    let (end, counts, chip_console) = lockstep(name, &image, u64::MAX);
    let RunEnd::Exited(code) = want else {
        panic!("{name}: golden did not exit: {want:?}")
    };
    assert_eq!(end, RunEnd::Exited(code), "{name}");
    assert_eq!(chip_console, console, "{name}");
    let ratio = counts.passes as f64 / counts.retired as f64;
    eprintln!(
        "{name}: {} instructions, {} forward passes ({ratio:.3} per instruction), boot {} passes; by cause: {}; by instruction class: {}",
        counts.retired,
        counts.passes,
        counts.boot_passes,
        counts.breakdown(),
        counts.class_breakdown()
    );
    // Every pass has one cause; every retired instruction one class, and its passes
    // (from its start to the next start; the exit's to the end) add up to the run's.
    assert_eq!(counts.by_cause.iter().sum::<u64>(), counts.passes, "{name}");
    assert_eq!(
        counts.by_class.iter().map(|c| c.count).sum::<u64>(),
        counts.retired,
        "{name}"
    );
    assert_eq!(
        counts.by_class.iter().map(|c| c.passes).sum::<u64>(),
        counts.passes,
        "{name}"
    );
    if name == "isa/muldiv" {
        assert!(
            counts.by_cause[PassCause::Millicode as usize] > 0,
            "{name}: no millicode passes"
        );
    }
    counts
}

/// A picolibc program (`tests/picolibc/NAME.c`) built with picolibc, run whole.
fn whole_picolibc(name: &str) -> f64 {
    let source = inband_tests::picolibc_programs()
        .into_iter()
        .find(|p| program_name(p) == name)
        .unwrap_or_else(|| panic!("no program {name} in tests/picolibc"));
    let dir = tempfile::tempdir().unwrap();
    let elf = inband_tests::build_with(&source, Flavor::BareMetal, dir.path(), inband_tests::picolibc());
    whole_image(
        &format!("picolibc/{name}"),
        &load_elf(&std::fs::read(elf).unwrap()).unwrap(),
    )
}

/// The C kernels of `tests/kernels/` (matrix multiply, CRC-32, SHA-256, a byte-string
/// search, a state machine: 284 k instructions in all), whole, with their passes by cause.
#[test]
fn kernels() {
    let programs = inband_tests::kernel_programs();
    assert_eq!(programs.len(), 5);
    for source in programs {
        whole_image(&format!("kernels/{}", program_name(&source)), &image_of(&source));
    }
}

/// The division instructions' classes.
const DIVISIONS: [InstructionClass; 4] = [
    InstructionClass::Div,
    InstructionClass::Divu,
    InstructionClass::Rem,
    InstructionClass::Remu,
];

/// Every operand size of the four divisions (`tests/division/sizes.c`: dividends of 1..32
/// bits by divisors of 0..32 bits, signed forms with random signs, INT_MIN / -1), each
/// result used at once, every instruction checked; its passes per division by form.
#[test]
fn division_operand_sizes() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("division/sizes.c");
    let counts = whole_counts("division/sizes", &image_of(&source));
    for class in DIVISIONS {
        assert_eq!(counts.by_class[class as usize].count, 32 * 33 + 1, "{}", class.name());
    }
}

/// The divisions around the chip's one-pass answers (`tests/division/boundaries.c`:
/// dividends about d and 2d, wrapping, signed edges, rd the same register as an operand),
/// every instruction checked; a quotient of 0 or 1 (n < 2d, both operands non-negative for
/// DIV and REM) takes one pass, and some of every form do.
#[test]
fn division_boundaries() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("division/boundaries.c");
    let counts = whole_counts("division/boundaries", &image_of(&source));
    for class in DIVISIONS {
        let passes = &counts.by_class[class as usize];
        assert_eq!(passes.count, 28 * 18 * 3, "{}", class.name());
        assert_eq!(passes.min, 1, "{}: no division answered in its own pass", class.name());
    }
}

/// picolibc's assert, qsort, bsearch, strtol, strstr, strtok, snprintf, ctype, setjmp
/// and longjmp (27 k instructions).
#[test]
fn picolibc_stdlib() {
    whole_picolibc("stdlib");
}

/// picolibc's libm in double and float and printf of floats (142 k instructions of soft
/// float, 2.8 passes each, many of them 64-bit divisions in millicode: 2–3 minutes).
#[test]
fn picolibc_math() {
    whole_picolibc("math");
}

#[test]
fn isa_alu_imm() {
    whole("isa/alu_imm");
}

#[test]
fn isa_alu_rr() {
    whole("isa/alu_rr");
}

#[test]
fn isa_branch() {
    whole("isa/branch");
}

#[test]
fn isa_jump() {
    whole("isa/jump");
}

#[test]
fn isa_memory() {
    whole("isa/memory");
}

#[test]
fn isa_upper() {
    whole("isa/upper");
}

#[test]
fn isa_muldiv() {
    // The division digit (three instructions a radix-16 digit): 2.40 since 2026-12-04.
    let ratio = whole("isa/muldiv");
    assert!(ratio <= 2.5, "isa/muldiv: {ratio:.3} passes per instruction");
}

#[test]
fn hello() {
    assert!(whole("hello") <= 2.0);
}

#[test]
fn strings() {
    assert!(whole("strings") <= 2.0);
}

#[test]
fn sort() {
    assert!(whole("sort") <= 2.0);
}

#[test]
fn structures() {
    assert!(whole("structures") <= 2.0);
}

/// 14.7k instructions, about 240 of them divisions (each a millicode routine, half of
/// them a remainder after a quotient of the same operands): the example heaviest on
/// division, still at most 2 forward passes per instruction.
#[test]
fn int64() {
    assert!(whole("int64") <= 2.0);
}

#[test]
#[ignore = "745k instructions: about 7 minutes on the CPU path"]
fn fib() {
    assert!(whole("fib") <= 2.0);
}

#[test]
#[ignore = "921k instructions (1.4M forward passes): about 13 minutes on the CPU path"]
fn euler10() {
    assert!(whole("euler10") <= 2.0);
}

/// The 0.8b chip's size and capacity: at most 11 layers; its RAM banks hold the whole
/// 256 KiB RAM of the memory map.
#[test]
fn chip_size_and_capacity() {
    use inband_firmware::memory_map::RAM_SIZE;
    use inband_weightgen::rv32im::tokens::{LINE_WORDS, RAM_BANKS};
    let layers = chip().layer_count();
    assert!(layers <= 11, "{layers} chip layers");
    let rows = 16 * 128;
    assert_eq!((RAM_BANKS * rows * LINE_WORDS * 4) as u32, RAM_SIZE);
    const { assert!(RAM_SIZE >= 256 * 1024) };
    assert_eq!(chip().manifest.rv32im.as_ref().unwrap().ram_banks.len(), RAM_BANKS);
}

/// Boot by loading state (the runs of every other test here start from it) leaves every
/// GDN row and every conv state of every chip layer bit for bit as the prefill boot
/// does, for every example and ISA test, and the first pass after it consumes the same
/// token: so the runs after it are the prefill's runs.
#[test]
fn loaded_boot_is_the_prefill_boot() {
    let mut loader = BootLoader::new(chip()).unwrap();
    let map = chip().manifest.rv32im.as_ref().unwrap();
    for source in corpus() {
        let name = program_name(&source);
        let image = image_of(&source);
        let mut tokens = boot_tokens(&image, map).unwrap();
        let entry = tokens.pop().unwrap();
        let mut prefilled = ChipRunner::new(chip()).unwrap();
        prefilled.passes(&tokens, tokens.len(), &[]).unwrap();
        let start = std::time::Instant::now();
        let plan = loader.plan(&image).unwrap();
        let mut loaded = ChipRunner::new(chip()).unwrap();
        loaded.load_state(&plan.rows).unwrap();
        loaded.passes(&plan.tail, plan.tail.len(), &[]).unwrap();
        eprintln!(
            "{name}: {} prefill passes; loaded {} rows and ran {} passes in {:.1} ms",
            tokens.len(),
            plan.rows.len(),
            plan.tail.len(),
            start.elapsed().as_secs_f64() * 1e3
        );
        assert_eq!(plan.entry, entry, "{name}");
        let (a, b) = (prefilled.states().unwrap(), loaded.states().unwrap());
        for (layer, (x, y)) in a.iter().zip(b).enumerate() {
            let same = |p: &[f32], q: &[f32]| p.iter().zip(q).all(|(u, v)| u.to_bits() == v.to_bits());
            assert!(
                same(&x.recurrent, &y.recurrent),
                "{name}: layer {layer}'s GDN state differs"
            );
            assert!(same(&x.conv, &y.conv), "{name}: layer {layer}'s conv state differs");
        }
    }
}

/// Boot leaves out staging tokens whose values are already staged: every GDN row of
/// every chip layer ends bit for bit as with every token sent.
#[test]
fn boot_leaves_out_only_what_is_staged() {
    let image = image_of(&program("hello"));
    let map = chip().manifest.rv32im.as_ref().unwrap();
    let full = boot_tokens_with(&image, map, false).unwrap();
    let lean = boot_tokens_with(&image, map, true).unwrap();
    assert!(lean.len() < full.len());
    let booted = |tokens: &[ChipToken]| {
        let mut runner = ChipRunner::new(chip()).unwrap();
        runner.passes(tokens, tokens.len(), &[]).unwrap();
        runner
    };
    let (a, b) = (booted(&full), booted(&lean));
    let config = &chip().config;
    for layer in 0..chip().layer_count() {
        for head in 0..config.linear_num_value_heads {
            for row in 0..config.linear_key_head_dim {
                let (x, y) = (
                    a.memory_row(layer, head, row).unwrap(),
                    b.memory_row(layer, head, row).unwrap(),
                );
                assert!(
                    x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "layer {layer} head {head} row {row} differs"
                );
            }
        }
    }
    eprintln!("hello boots in {} passes instead of {}", lean.len(), full.len());
}

/// User code may fill the whole 64 KiB ROM: a program assembled flat into its last rows
/// (which the millicode shares) divides there, prints, and runs off the ROM's end; the
/// chip matches golden instruction by instruction, console and trap included.
#[test]
fn code_in_the_roms_last_rows() {
    use inband_firmware::memory_map::{RAM_SIZE, ROM_BASE, ROM_SIZE};
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("flat/rom_end.S");
    let base = ROM_BASE + ROM_SIZE - 0x1000;
    let toolchain = inband_firmware::Toolchain::locate(None).expect("the RISC-V toolchain (scripts/setup.sh)");
    let words = toolchain.assemble_flat(&source, base).expect("rom_end.S assembles");
    let mut rom = vec![0u8; ROM_SIZE as usize];
    for (i, w) in words.iter().enumerate() {
        let at = (base - ROM_BASE) as usize + 4 * i;
        rom[at..at + 4].copy_from_slice(&w.to_le_bytes());
    }
    let image = ProgramImage {
        entry: base,
        rom,
        ram: vec![0; RAM_SIZE as usize],
        code_bytes: ROM_SIZE,
    };
    let (want, console) = golden_end(&image, 1_000);
    let RunEnd::Trapped(trap) = want else {
        panic!("golden did not trap: {want:?}")
    };
    assert_eq!(console, b"9NNAB", "golden's console");
    let (end, counts, chip_console) = lockstep("rom_end", &image, 1_000);
    assert_eq!(end, RunEnd::Trapped(trap));
    assert_eq!(chip_console, console);
    assert!(counts.retired > 20, "{counts:?}");
}

/// All of RAM (256 KiB, in four banks of lines behind a 4 KiB line cache): a program
/// writes a word into every line of a 240 KiB array, refills lines through conflicting
/// strides, stores halfwords and bytes across it and reads samples back; every store's
/// line is compared with golden's as it retires, all of RAM every 4096 instructions.
#[test]
fn whole_ram() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("ram/whole_ram.c");
    let image = image_of(&source);
    let (want, console) = golden_end(&image, u64::MAX);
    assert_eq!(want, RunEnd::Exited(0));
    let (end, counts, chip_console) = lockstep("whole_ram", &image, u64::MAX);
    assert_eq!(end, RunEnd::Exited(0));
    assert_eq!(chip_console, console);
    eprintln!(
        "whole_ram: {} instructions, {} forward passes",
        counts.retired, counts.passes
    );
}

/// Traps end the same way on both engines (checked with their pc, cause and value).
#[test]
fn traps_match_golden() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let sources = inband_firmware::sources_in(&dir, &["c", "S"]).unwrap();
    assert!(!sources.is_empty());
    for source in sources {
        let name = source.file_name().unwrap().to_string_lossy().to_string();
        if name == "compile_error.c" {
            continue;
        }
        let image = image_of(&source);
        let budget = 20_000;
        let (want, _) = golden_end(&image, budget);
        let (end, _, _) = lockstep(&name, &image, budget);
        assert_eq!(end, want, "{name}");
    }
}

fn fuzz_run(seed: u64, body: usize, iterations: u32, divisions: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join(format!("fuzz{seed}.S"));
    std::fs::write(&source, fuzz::program(seed, body, iterations, divisions)).unwrap();
    let image = image_of(&source);
    let (want, _) = golden_end(&image, u64::MAX);
    let (end, counts, _) = lockstep(&format!("fuzz seed {seed}"), &image, u64::MAX);
    let RunEnd::Exited(code) = want else {
        panic!("seed {seed}: golden did not exit: {want:?}")
    };
    assert_eq!(end, RunEnd::Exited(code), "seed {seed}");
    counts.retired
}

/// Random instruction streams: about 60k instructions in CI.
#[test]
fn fuzz_random_streams() {
    let mut total = 0;
    for seed in 0..3 {
        total += fuzz_run(seed, 400, 50, seed == 0);
    }
    eprintln!("fuzz: {total} instructions agreed");
    assert!(total >= 50_000);
}

/// The 1,000,000-instruction run.
#[test]
#[ignore = "about 14 minutes on the CPU path"]
fn fuzz_one_million() {
    let mut total = 0;
    let mut seed = 100;
    while total < 1_000_000 {
        total += fuzz_run(seed, 500, 400, seed % 4 == 0);
        seed += 1;
    }
    eprintln!("fuzz: {total} instructions agreed");
}

/// A program's single-stream run on the CPU engine, booted by loading state: how it
/// ended, its console and its token stream (boot tail included).
fn single_stream(image: &ProgramImage, budget: u64) -> (RunEnd, Vec<u8>, Vec<(u32, u32)>) {
    let trace = inband_chip::engine::Trace::default();
    let engine = inband_chip::engine::Traced {
        inner: Box::new(ChipRunner::new(chip()).unwrap()),
        tokens: chip().spec.tokens.clone(),
        trace: trace.clone(),
    };
    let mut loader = BootLoader::new(chip()).unwrap();
    let mut machine = ChipMachine::load_on(chip(), Box::new(engine), image, &mut loader).unwrap();
    let end = machine.run(budget, None).unwrap();
    let console = machine.console.clone();
    drop(machine);
    let trace = trace.borrow().clone();
    (end, console, trace)
}

/// Many programs in a batch of fewer slots (each freed slot takes the next program):
/// normal exits, an exit code, traps with and without a value and a budget that runs out
/// each end with their own status and golden's console, and every machine's token stream
/// is its single-stream run's (up to where that one stopped, for the exhausted budget).
#[test]
fn a_batch_runs_each_machine_as_if_alone() {
    use inband_chip::rv32im::batch::{run_batch, BatchOptions, Job};
    use std::sync::Arc;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs");
    let hello = Arc::new(image_of(&program("hello")));
    let jobs: Vec<Job> = [
        (hello.clone(), u64::MAX),
        (Arc::new(image_of(&dir.join("exit_code.c"))), u64::MAX),
        (Arc::new(image_of(&dir.join("illegal_instruction.S"))), u64::MAX),
        (Arc::new(image_of(&dir.join("runaway.c"))), 3_000),
        (Arc::new(image_of(&program("isa/muldiv"))), u64::MAX),
        (Arc::new(image_of(&dir.join("misaligned_load.S"))), u64::MAX),
        (hello, 200),
    ]
    .into_iter()
    .map(|(image, budget)| Job { image, budget })
    .collect();
    let runners = (0..3).map(|_| ChipRunner::new(chip()).unwrap()).collect();
    let mut engine = inband_chip::EachOnItsOwn(runners);
    let mut loader = BootLoader::new(chip()).unwrap();
    // Short rounds: many round boundaries, `t` tokens among them.
    let options = BatchOptions {
        passes_per_round: 97,
        trace: true,
        wall: None,
    };
    let (results, stats) = run_batch(chip(), &mut engine, &mut loader, &jobs, options, |_, _| {}).unwrap();
    eprintln!("batch: {stats:?}");
    let mut ends = Vec::new();
    for (i, (job, result)) in jobs.iter().zip(results).enumerate() {
        let result = result.unwrap_or_else(|e| panic!("job {i}: {e}"));
        let (want, console) = golden_end(&job.image, job.budget);
        assert_eq!(result.end, want, "job {i}");
        assert_eq!(result.console, console, "job {i}");
        let (end, console, trace) = single_stream(&job.image, job.budget);
        assert_eq!((result.end, &result.console), (end, &console), "job {i}");
        match end {
            RunEnd::BudgetExhausted { .. } => assert_eq!(&result.trace[..trace.len()], &trace[..], "job {i}"),
            _ => assert_eq!(result.trace, trace, "job {i}"),
        }
        ends.push(end);
    }
    // The mix covers every way a run ends.
    assert!(ends.iter().any(|e| matches!(e, RunEnd::Exited(0))));
    assert!(ends.iter().any(|e| matches!(e, RunEnd::Exited(42))));
    assert!(ends.iter().any(|e| matches!(e, RunEnd::Trapped(_))));
    assert!(ends.iter().any(|e| matches!(e, RunEnd::BudgetExhausted { .. })));
}

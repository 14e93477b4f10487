//! A machine saved where a limit stopped it and continued in a fresh engine
//! (`inband run --save-state`, `--resume`): the continued run is the uninterrupted one,
//! pass for pass (the same token stream, console and counts), `--verify` checks it from
//! the resume on, and a saved machine is refused by another program or a damaged file.
//! The chip is the 0.8b shape's, written as a pack and opened as a user's would be.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, OnceLock};

use inband_chip::engine::EngineState;
use inband_chip::rv32im::load::BootLoader;
use inband_chip::rv32im::machine::{ChipError, ChipMachine};
use inband_chip::rv32im::saved::SavedMachine;
use inband_chip::ChipModel;
use inband_chip::{ChipRunner, ChipToken, MemoryRow, PassEngine};
use inband_firmware::{load_elf, Flavor, ProgramImage};
use inband_golden::{Environment, Machine};
use inband_host_runtime::vm::{self, Boot, Device, Limits, RunPlan, Start};
use inband_qwen35::presets::Shape;
use inband_tests::{build, corpus, program_name};
use inband_weightgen::rv32im::Rv32Chip;

/// The 0.8b chip, written as a pack (a saved machine names the pack's identity) and
/// opened from it; the pack (6 GB of f32 tensors) is removed once read: the chip is held
/// in memory and nothing reads the pack again.
fn chip() -> &'static ChipModel {
    static CHIP: OnceLock<ChipModel> = OnceLock::new();
    CHIP.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("pack");
        let chip = Rv32Chip::build(&Shape::Qwen0_8b.config()).expect("the chip compiles");
        inband_weightgen::pack::write_pack(&chip.chip, Some(chip.host_map()), &pack, &|_| {}).unwrap();
        ChipModel::from_pack(&pack).unwrap()
    })
}

fn image(name: &str) -> ProgramImage {
    let source = corpus().into_iter().find(|p| program_name(p) == name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    load_elf(&std::fs::read(build(&source, Flavor::BareMetal, dir.path())).unwrap()).unwrap()
}

/// What one run left: how it ended, its console bytes (printed by this run), its token
/// stream and its counts.
struct Piece {
    run: vm::VmRun,
    printed: Vec<u8>,
    trace: String,
}

/// Held by every test: a stop asked for (as by Ctrl-C) is the whole process's, so the
/// test that asks for one runs alone.
fn alone() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn run(
    image: &ProgramImage,
    start: Start,
    instructions: u64,
    verify: bool,
    save: Option<&Path>,
) -> Result<Piece, ChipError> {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t");
    let plan = RunPlan {
        start,
        limits: Limits::instructions(instructions),
        verify,
        trace: Some(&trace),
        save_state: save,
        progress: false,
    };
    let mut printed = Vec::new();
    let run = vm::run_plan(chip(), Device::Cpu, image, &plan, &mut printed)?;
    Ok(Piece {
        run,
        printed,
        trace: std::fs::read_to_string(&trace).unwrap(),
    })
}

/// The program run whole, then in pieces stopped after each of `stops` instructions
/// (each saved and continued in a fresh engine, the last with `verify`): the pieces'
/// streams, output and final counts are the whole run's.
fn pieces_make_the_whole(name: &str, stops: &[u64]) {
    let image = image(name);
    let whole = run(&image, Start::Boot(Boot::Load), u64::MAX, false, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("machine.state");
    let (mut trace, mut printed) = (String::new(), Vec::<u8>::new());
    let mut saved: Option<SavedMachine> = None;
    for (i, &stop) in stops.iter().chain([&u64::MAX]).enumerate() {
        let start = saved.as_ref().map_or(Start::Boot(Boot::Load), Start::Resume);
        let last = i == stops.len();
        let piece = run(&image, start, stop, last, Some(&state)).unwrap_or_else(|e| panic!("{name}: {e}"));
        trace += &piece.trace;
        printed.extend(&piece.printed);
        assert_eq!(piece.run.saved, !last, "{name}: piece {i}");
        if last {
            assert_eq!(piece.run.end, whole.run.end, "{name}");
            assert_eq!(piece.run.counts, whole.run.counts, "{name}");
        } else {
            assert_eq!(piece.run.counts.retired, stop, "{name}");
            saved = Some(SavedMachine::read(&state).unwrap());
        }
    }
    assert_eq!(trace, whole.trace, "{name}: the pieces' token stream");
    assert_eq!(printed, whole.printed, "{name}: the pieces' output");
}

#[test]
fn strings_in_three_pieces_is_strings_whole() {
    let _alone = alone();
    pieces_make_the_whole("strings", &[1_000, 6_543]);
}

#[test]
fn int64_stopped_inside_its_divisions_is_int64_whole() {
    let _alone = alone();
    // int64 divides in millicode (a division retires as one instruction, however many
    // passes its routine runs); fourteen stops spread over the run.
    let stops: Vec<u64> = (1..=14).map(|k| 997 * k).collect();
    pieces_make_the_whole("int64", &stops);
}

#[test]
fn a_saved_machine_runs_only_its_own_program() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("machine.state");
    run(&image("strings"), Start::Boot(Boot::Load), 500, false, Some(&state)).unwrap();
    let saved = SavedMachine::read(&state).unwrap();
    let e = run(&image("hello"), Start::Resume(&saved), u64::MAX, false, None)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("another program"), "{e}");
}

#[test]
fn verify_catches_a_saved_state_changed_on_disk() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("machine.state");
    let strings = image("strings");
    run(&strings, Start::Boot(Boot::Load), 2_000, false, Some(&state)).unwrap();
    let mut saved = SavedMachine::read(&state).unwrap();
    // One RAM entry of the chip's state flipped: golden's check at the resume sees it.
    change_a_ram_row(&mut saved);
    let e = run(&strings, Start::Resume(&saved), u64::MAX, true, None)
        .err()
        .expect("a mismatch");
    assert!(matches!(e, ChipError::Mismatch { .. }), "{e}");
}

/// Reverses the first RAM row of `saved`'s CPU engine state that holds data.
fn change_a_ram_row(saved: &mut SavedMachine) {
    let layout = chip()
        .manifest
        .memories
        .iter()
        .find(|m| m.name.starts_with("ram"))
        .unwrap();
    let c = &chip().config;
    let (dk, dv) = (c.linear_key_head_dim, c.linear_value_head_dim);
    let name = format!("layer.{}.recurrent", layout.layer);
    let floats = &mut saved.engine.floats.iter_mut().find(|(n, _)| *n == name).unwrap().1;
    let row = floats
        .chunks(dv)
        .enumerate()
        .position(|(r, v)| r / dk >= layout.first_key_head && v.iter().any(|x| *x != 0.0))
        .expect("a RAM row holds data");
    floats[row * dv..(row + 1) * dv].reverse();
}

#[test]
fn an_interrupted_run_is_saved_and_continues() {
    let _alone = alone();
    // What Ctrl-C does with --save-state: the run stops after its first chunk of
    // instructions and saves the machine there.
    let image = image("strings");
    let whole = run(&image, Start::Boot(Boot::Load), u64::MAX, false, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("machine.state");
    vm::ask_to_stop(true);
    let first = run(&image, Start::Boot(Boot::Load), u64::MAX, false, Some(&state));
    vm::ask_to_stop(false);
    let first = first.unwrap();
    assert!(first.run.timed_out && first.run.saved);
    assert_eq!(first.run.counts.retired, vm::CHIP_CHUNK);
    let saved = SavedMachine::read(&state).unwrap();
    let rest = run(&image, Start::Resume(&saved), u64::MAX, true, None).unwrap();
    assert_eq!((rest.run.end, rest.run.counts), (whole.run.end, whole.run.counts));
    assert_eq!(first.trace + &rest.trace, whole.trace);
    assert_eq!([first.printed, rest.printed].concat(), whole.printed);
}

#[test]
fn a_run_that_ends_saves_nothing() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("machine.state");
    let piece = run(&image("hello"), Start::Boot(Boot::Load), u64::MAX, false, Some(&state)).unwrap();
    assert!(matches!(piece.run.end, inband_golden::RunEnd::Exited(0)));
    assert!(!piece.run.saved && !state.exists());
}

/// The CPU engine running passes ahead of the host (as many as the second field), as the
/// GPU engine does when nothing is verified: a machine saved then holds tokens its engine
/// chose ahead, and its state is that many passes past the host's place.
struct RunsAhead<'a>(ChipRunner<'a>, usize);

impl PassEngine for RunsAhead<'_> {
    fn passes(&mut self, inputs: &[ChipToken], max: usize, stop_kinds: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        self.0.passes(inputs, max, stop_kinds)
    }
    fn memory_rows(&self, layer: usize, head: usize, rows: std::ops::Range<usize>) -> anyhow::Result<Vec<f32>> {
        self.0.memory_rows(layer, head, rows)
    }
    fn load_state(&mut self, rows: &[MemoryRow]) -> anyhow::Result<()> {
        self.0.load_state(rows)
    }
    fn lookahead(&self) -> usize {
        self.1
    }
    fn save_state(&self) -> anyhow::Result<EngineState> {
        self.0.save_state()
    }
    fn restore_state(&mut self, state: &EngineState) -> anyhow::Result<()> {
        self.0.restore_state(state)
    }
}

/// The CPU engine `passes` passes ahead of its host.
fn runs_ahead(passes: usize) -> Box<RunsAhead<'static>> {
    Box::new(RunsAhead(ChipRunner::new(chip()).unwrap(), passes))
}

/// `image` booted on an engine `passes` ahead of its host, stopped after `stop`
/// instructions and saved.
fn saved_ahead(image: &ProgramImage, passes: usize, stop: u64) -> SavedMachine {
    let mut loader = BootLoader::new(chip()).unwrap();
    let mut first = ChipMachine::load_on(chip(), runs_ahead(passes), image, &mut loader).unwrap();
    let inband_golden::RunEnd::BudgetExhausted { pc } = first.run(stop, None).unwrap() else {
        panic!("the program ended before {stop} instructions")
    };
    first.save(pc).unwrap()
}

#[test]
fn tokens_chosen_ahead_are_saved_with_the_machine() {
    let _alone = alone();
    let image = image("strings");
    let ahead = || runs_ahead(16);
    let mut loader = BootLoader::new(chip()).unwrap();
    let mut whole = ChipMachine::load_on(chip(), ahead(), &image, &mut loader).unwrap();
    let end = whole.run(u64::MAX, None).unwrap();
    let saved = saved_ahead(&image, 16, 3_333);
    assert!(!saved.host.ahead.is_empty(), "the engine ran no passes ahead");
    let mut rest = ChipMachine::resume_on(chip(), ahead(), &image, &saved).unwrap();
    assert_eq!(rest.run(u64::MAX, None).unwrap(), end);
    assert_eq!((rest.counts, &rest.console), (whole.counts, &whole.console));
}

/// A machine saved by an engine far ahead of its host (the GPU engine's lookahead is
/// 32,768 passes) is verified from its resume: its state is checked only once the host has
/// caught up with it (before that, the engine's RAM and registers are those of passes the
/// host has not consumed yet), then every instruction as usual.
#[test]
fn a_machine_saved_ahead_of_its_host_is_verified_once_caught_up() {
    let _alone = alone();
    let image = image("strings");
    let ahead = || runs_ahead(4_096);
    let saved = saved_ahead(&image, 4_096, 5_000);
    assert!(
        saved.host.ahead.len() > 1_000,
        "the engine ran {} passes ahead",
        saved.host.ahead.len()
    );
    let mut golden = Machine::new(&image, Environment::BareMetal);
    golden.run(saved.host.counts.retired);
    let golden_at_stop = golden.clone();
    let mut rest = ChipMachine::resume_on(chip(), ahead(), &image, &saved).unwrap();
    rest.check_resumed(&golden, saved.next_pc).unwrap();
    assert_eq!(
        rest.run(u64::MAX, Some(&mut golden)).unwrap(),
        inband_golden::RunEnd::Exited(0)
    );

    // The comparison put off is made: a RAM row changed in the saved state is found once
    // the host has caught up.
    let mut changed = saved.clone();
    change_a_ram_row(&mut changed);
    let mut golden = golden_at_stop;
    let mut rest = ChipMachine::resume_on(chip(), ahead(), &image, &changed).unwrap();
    rest.check_resumed(&golden, changed.next_pc).unwrap();
    match rest.run(u64::MAX, Some(&mut golden)) {
        Err(ChipError::Mismatch { retired, diff } | ChipError::MismatchAt { retired, diff, .. }) => {
            assert!(retired > 5_000 && diff.starts_with("RAM word"), "{retired}: {diff}")
        }
        other => panic!("the changed row went unseen: {other:?}"),
    }
}

/// A run told where it stops for good (`inband run --max-instructions`) runs no pass past
/// it, however far ahead its engine runs and in however many chunks the host runs it: the
/// machine saved there holds no token chosen ahead, its state is the host's (a continued
/// `--verify` compares RAM at the resume itself) and its continuation is the whole run.
#[test]
fn an_engine_running_ahead_stops_at_the_runs_instruction_limit() {
    let _alone = alone();
    let image = image("strings");
    let mut loader = BootLoader::new(chip()).unwrap();
    let mut first = ChipMachine::load_on(chip(), runs_ahead(4_096), &image, &mut loader).unwrap();
    first.stop_for_good_at(5_000);
    let pc = loop {
        let chunk = (5_000 - first.counts.retired).min(vm::CHIP_CHUNK);
        match first.run(chunk, None).unwrap() {
            inband_golden::RunEnd::BudgetExhausted { pc } if first.counts.retired == 5_000 => break pc,
            inband_golden::RunEnd::BudgetExhausted { .. } => {}
            end => panic!("strings ended before 5,000 instructions: {end:?}"),
        }
    };
    let saved = first.save(pc).unwrap();
    assert!(saved.host.ahead.is_empty(), "{} passes ahead", saved.host.ahead.len());

    let mut golden = Machine::new(&image, Environment::BareMetal);
    golden.run(5_000);
    let mut changed = saved.clone();
    change_a_ram_row(&mut changed);
    let mut rest = ChipMachine::resume_on(chip(), runs_ahead(4_096), &image, &changed).unwrap();
    let e = rest.check_resumed(&golden, changed.next_pc).unwrap_err().to_string();
    assert!(e.contains("RAM word"), "{e}");
    let mut rest = ChipMachine::resume_on(chip(), runs_ahead(4_096), &image, &saved).unwrap();
    rest.check_resumed(&golden, saved.next_pc).unwrap();
    assert_eq!(
        rest.run(u64::MAX, Some(&mut golden)).unwrap(),
        inband_golden::RunEnd::Exited(0)
    );
}

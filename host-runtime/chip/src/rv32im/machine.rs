//! The host side of the chip: boot a program image as a prefill of chip tokens, feed
//! each chosen token back, follow the pc, collect console bytes, stop at exit or trap,
//! and (optionally) check every retired instruction against the golden reference by
//! reading the registers and RAM out of the GDN state.

use std::ops::Range;

use inband_firmware::memory_map::{RAM_BASE, RAM_SIZE, ROM_BASE, ROM_END};
use inband_firmware::ProgramImage;
use inband_golden::decode::{decode, Instruction};
use inband_golden::{Machine, RunEnd, Step, Trap, TrapCause};
use thiserror::Error;

use super::classes::{ClassPasses, InstructionClass};
use super::load::BootLoader;
use super::saved::{program_digest, HostPlace, SavedMachine};
use super::tokens::{
    kind, nibble, row_digits, row_of, token, CAUSE_EXIT, LINE_WORDS, NEXT_ROW, REBASE, ROM_ROWS, ROW_PIECES, ROW_SLOTS,
};
use super::{cls, low};
use super::{Rv32Map, MILLICODE_FIRST_ROW};
use crate::engine::{ChipRunner, PassEngine};
use crate::model::ChipModel;
use crate::token::ChipToken;

#[derive(Debug, Error)]
pub enum ChipError {
    #[error("the chip's layer math failed: {0}")]
    Math(#[from] anyhow::Error),
    #[error("the chip {0:?} is not the RV32IM chip (its manifest has no rv32im map)")]
    NotRv32im(String),
    #[error("cannot write {path}: {source}")]
    Output {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("the program's entry point {0:#010x} is not an aligned ROM address")]
    Entry(u32),
    #[error("the chip emitted {token:?} where the host expected {expected}")]
    Protocol { token: ChipToken, expected: &'static str },
    #[error("cannot continue the saved machine: {0}")]
    Resume(String),
    #[error(transparent)]
    Saved(#[from] super::saved::SaveError),
    #[error("mismatch with the golden reference after {retired} retired instructions:\n{diff}")]
    Mismatch { retired: u64, diff: String },
    #[error("mismatch with the golden reference at instruction {retired}, pc {pc:#010x} ({instruction}):\n{diff}")]
    MismatchAt {
        retired: u64,
        pc: u32,
        instruction: String,
        diff: String,
    },
}

/// The ROM rows the chip boots (row, user words): the program's code, and the millicode's
/// rows (whose upper halves the `bc` token adds from the chip's weights).
fn rom_rows(image: &ProgramImage, millicode_rows: usize) -> Vec<(usize, [u32; ROW_SLOTS])> {
    let mut rows = Vec::new();
    let code_rows = (image.code_bytes as usize).div_ceil(4 * ROW_SLOTS);
    for r in 0..code_rows {
        let mut words = [0u32; ROW_SLOTS];
        for (s, w) in words.iter_mut().enumerate() {
            let offset = ((r * ROW_SLOTS + s) * 4) as u32;
            if (offset as usize) < image.rom.len() {
                *w = image.rom_word(offset);
            }
        }
        if words.iter().any(|w| *w != 0) {
            rows.push((r, words));
        }
    }
    // Only a division instruction enters the millicode: without one it is not booted.
    if !rows.iter().any(|(_, words)| words.iter().any(|w| is_division(*w))) {
        return rows;
    }
    for row in MILLICODE_FIRST_ROW..MILLICODE_FIRST_ROW + millicode_rows {
        if !rows.iter().any(|(r, _)| *r == row) {
            rows.push((row, [0; ROW_SLOTS]));
        }
    }
    rows.sort_by_key(|(r, _)| *r);
    rows
}

/// DIV, DIVU, REM or REMU (OP, funct7 1, funct3 4..7): the instructions that may enter the
/// millicode (all but those whose quotient is 0 or 1).
fn is_division(word: u32) -> bool {
    word & 0xfe00_407f == 0x0200_4033
}

/// The prefill that boots `image`: ROM rows and non-zero RAM lines (up to 32 pieces and
/// a commit each), then `x` to the entry point.
///
/// The staging memories keep what was last written to them, so a staging token whose
/// values are already staged (the same byte of the previous row, the same part of the
/// previous word) is left out: the state it would write is bit for bit the one there.
/// Every staging row is written at least once, as the anchored reads need.
pub fn boot_tokens(image: &ProgramImage, map: &Rv32Map) -> Result<Vec<ChipToken>, ChipError> {
    boot_tokens_with(image, map, true)
}

/// [`boot_tokens`], with `leave_out_staged` false: every staging token sent (what the
/// test of the leaving-out compares against).
pub fn boot_tokens_with(
    image: &ProgramImage,
    map: &Rv32Map,
    leave_out_staged: bool,
) -> Result<Vec<ChipToken>, ChipError> {
    let mut out = Vec::new();
    let stage = |out: &mut Vec<ChipToken>, staged: &mut Option<ChipToken>, t: ChipToken| {
        if !leave_out_staged || staged.as_ref() != Some(&t) {
            out.push(t.clone());
            *staged = Some(t);
        }
    };
    let mut staged_pieces: [Option<ChipToken>; ROW_PIECES] = std::array::from_fn(|_| None);
    for (row, words) in rom_rows(image, map.millicode_rows) {
        for (p, staged) in staged_pieces.iter_mut().enumerate() {
            let e = 2 * p;
            let nib = |e: usize| nibble(words[e / 8], e % 8);
            stage(&mut out, staged, token(kind::BP, &[p, nib(e), nib(e + 1)]));
        }
        let [h, a, b] = row_digits(row);
        out.push(token(kind::BC, &[h, a, b]));
    }
    for (line, words) in image.ram.chunks(4 * LINE_WORDS).enumerate() {
        if words.iter().all(|b| *b == 0) {
            continue;
        }
        for (p, staged) in staged_pieces.iter_mut().enumerate() {
            let nib = |e: usize| ((words[e / 2] >> (4 * (e % 2))) & 15) as usize;
            stage(&mut out, staged, token(kind::BP, &[p, nib(2 * p), nib(2 * p + 1)]));
        }
        out.push(token(kind::BL, &line_digits(line)));
    }
    let entry = image.entry;
    if !(ROM_BASE..ROM_END).contains(&entry) || !entry.is_multiple_of(4) {
        return Err(ChipError::Entry(entry));
    }
    let (row, slot) = (
        ((entry - ROM_BASE) / 32) as usize,
        ((entry - ROM_BASE) / 4 % 8) as usize,
    );
    let [h, a, b] = row_digits(row);
    out.push(token(kind::X, &[h, a, b, slot]));
    Ok(out)
}

/// RAM lines per bank head (its key rows; a line's rhi and rlo digits).
const HEAD_LINES: usize = 128;

/// A RAM line number (0 = RAM_BASE) split into the chip's (bank, head, rhi, rlo) digits.
pub fn line_digits(line: usize) -> [usize; 4] {
    [line >> 11, (line >> 7) & 15, (line >> 4) & 7, line & 15]
}

/// Where the pc is between passes, as far as a token's slot field depends on it.
#[derive(Clone, Copy)]
struct Place {
    /// The ROM row (of user code, or of millicode).
    row: usize,
    /// The last `x`/`xm` was `xm`.
    millicode: bool,
    /// The row moved on by a [`NEXT_ROW`] slot since the last `x`/`xm` (the chip's `pc_off`).
    moved: bool,
}

/// Where consuming `tok` at `at` puts the pc: its row, whether in millicode, and the slot
/// it starts (None: no instruction). A [`NEXT_ROW`] slot starts slot 0 of the next row (at
/// user code's last row it traps); a [`REBASE`] slot, chosen where the row already moved
/// since the last `x`/`xm`, only moves the row (an `x`). Either where the other belongs is
/// a protocol error: the chip chose it from the wrong `pc_off`.
fn follow(at: Place, tok: &ChipToken) -> Result<(usize, bool, Option<usize>), ChipError> {
    let here = (at.row, at.millicode, None);
    let misplaced = |expected| ChipError::Protocol {
        token: tok.clone(),
        expected,
    };
    Ok(match tok.kind {
        kind::X => (
            row_of(tok.values[0], tok.values[1], tok.values[2]),
            false,
            started_slot(tok),
        ),
        kind::XM => (MILLICODE_FIRST_ROW + tok.values[0], true, started_slot(tok)),
        _ => match slot_field(tok) {
            Some(NEXT_ROW) if at.moved => return Err(misplaced("a rebase slot")),
            Some(REBASE) if !at.moved => return Err(misplaced("a next-row slot")),
            Some(NEXT_ROW) if !at.millicode && at.row + 1 == ROM_ROWS => here,
            Some(NEXT_ROW) => (at.row + 1, at.millicode, Some(0)),
            Some(REBASE) => here,
            _ => (at.row, at.millicode, started_slot(tok)),
        },
    })
}

/// The `slot` field of the kinds that carry one (`s l u o n`: 0..7, [`NEXT_ROW`] or [`REBASE`]).
fn slot_field(t: &ChipToken) -> Option<usize> {
    match t.kind {
        kind::S | kind::L | kind::U | kind::O => Some(t.values[3.min(t.values.len() - 1)]),
        kind::N => Some(t.values[0]),
        _ => None,
    }
}

/// The slot a token starts in the row the pc is in (None: it starts no instruction
/// there; a [`NEXT_ROW`] slot may start slot 0 of the next: see [`ChipMachine::follow`]).
fn started_slot(t: &ChipToken) -> Option<usize> {
    match t.kind {
        kind::X => Some(t.values[3]),
        kind::XM => Some(t.values[1]),
        _ => slot_field(t).filter(|s| *s < ROW_SLOTS),
    }
}

/// Whether a `t` token of `cause` is followed by a `w1 w2 w3` value (the exit code, the
/// faulting address or jump target).
fn trap_has_value(cause: usize) -> bool {
    matches!(cause, 0 | 1 | 4 | 5 | 6 | 7 | CAUSE_EXIT)
}

/// The engine of a fed machine ([`ChipMachine::fed`]): its driver runs the passes, so
/// none is ever asked for; asked, it says so instead of inventing a token.
struct Unfed;

impl PassEngine for Unfed {
    fn passes(&mut self, _: &[ChipToken], _: usize, _: &[usize]) -> anyhow::Result<Vec<ChipToken>> {
        anyhow::bail!("a batch machine ran past the passes its driver fed it")
    }
    fn memory_rows(&self, _: usize, _: usize, _: Range<usize>) -> anyhow::Result<Vec<f32>> {
        anyhow::bail!("a batch machine's state lives in its batch engine")
    }
    fn load_state(&mut self, _: &[crate::MemoryRow]) -> anyhow::Result<()> {
        anyhow::bail!("a batch machine is booted by its driver")
    }
}

/// The value a `w1 w2 w3` triple spells.
fn word_of(parts: &[ChipToken]) -> u32 {
    let mut w = 0u32;
    for (i, p) in parts.iter().enumerate() {
        let count = if i == 2 { 2 } else { 3 };
        for k in 0..count {
            w |= (p.values[k] as u32) << (4 * (3 * i + k));
        }
    }
    w
}

/// Why a forward pass ran, read from the token it consumed (the token kinds grouped; see
/// the kinds table in `tokens`). Every pass after boot has exactly one cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassCause {
    /// Finishes an instruction and starts the next (`s l u n lk o`).
    Retire,
    /// Moves the pc to another ROM row (`x`): jumps, taken branches, running off a row.
    RowChange,
    /// Carries the upper bits of a long register value (`m h`).
    LongWrite,
    /// Stages a store's word (`w1 w2 w3` outside a line fill).
    StoreData,
    /// Fills a RAM line that a store missed (`fz fs f3 rr`, and the `w1 w2` inside a fill).
    LineFill,
    /// Runs in millicode (`xm` and every pass until the `x` back): the division routines.
    Millicode,
    /// Reports the exit or a trap (`t` and its value).
    End,
}

impl PassCause {
    /// Every cause, in the order [`RunCounts::by_cause`] counts them.
    pub const ALL: [PassCause; 7] = [
        PassCause::Retire,
        PassCause::RowChange,
        PassCause::LongWrite,
        PassCause::StoreData,
        PassCause::LineFill,
        PassCause::Millicode,
        PassCause::End,
    ];

    /// The cause's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PassCause::Retire => "retire",
            PassCause::RowChange => "row change",
            PassCause::LongWrite => "long write",
            PassCause::StoreData => "store data",
            PassCause::LineFill => "line fill",
            PassCause::Millicode => "millicode (division)",
            PassCause::End => "exit/trap",
        }
    }

    /// The cause of the pass that consumes a token of `kind`, with the pc in millicode or
    /// not and a line fill under way or not.
    fn of(kind: usize, in_millicode: bool, in_fill: bool) -> Self {
        match kind {
            _ if in_millicode => PassCause::Millicode,
            kind::X => PassCause::RowChange,
            kind::M | kind::H => PassCause::LongWrite,
            kind::FZ | kind::FS | kind::F3 | kind::RR => PassCause::LineFill,
            kind::W1 | kind::W2 | kind::W3 if in_fill => PassCause::LineFill,
            kind::W1 | kind::W2 | kind::W3 => PassCause::StoreData,
            kind::T => PassCause::End,
            _ => PassCause::Retire,
        }
    }
}

/// Counts and timing of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunCounts {
    /// Architectural instructions retired (a division counts once).
    pub retired: u64,
    /// Forward passes after boot.
    pub passes: u64,
    /// Forward passes of the boot prefill.
    pub boot_passes: u64,
    /// Forward passes after boot by cause, in [`PassCause::ALL`]'s order (they add up to
    /// `passes`).
    pub by_cause: [u64; PassCause::ALL.len()],
    /// The retired instructions' passes by class, in [`InstructionClass::ALL`]'s order
    /// (they add up to `retired` and to the passes up to the last one's retirement).
    pub by_class: [ClassPasses; InstructionClass::ALL.len()],
}

impl RunCounts {
    /// Counts one pass of `cause`.
    fn pass(&mut self, cause: PassCause) {
        self.passes += 1;
        self.by_cause[cause as usize] += 1;
    }

    /// Counts a retired instruction of `class` that took `passes`.
    fn retire(&mut self, class: InstructionClass, passes: u64) {
        self.retired += 1;
        self.by_class[class as usize].add(passes);
    }

    /// "alu 1.012 (1–3, 4,213×), load …": the classes that retired, passes per instruction
    /// (the fewest and the most one took, how many retired).
    pub fn class_breakdown(&self) -> String {
        InstructionClass::ALL
            .iter()
            .zip(&self.by_class)
            .filter(|(_, c)| c.count > 0)
            .map(|(class, c)| format!("{} {}", class.name(), c.summary()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// "retire 700 (86.3 %), row change 80 (9.9 %), …": the causes that occurred.
    pub fn breakdown(&self) -> String {
        let total = self.passes.max(1) as f64;
        PassCause::ALL
            .iter()
            .zip(self.by_cause)
            .filter(|(_, n)| *n > 0)
            .map(|(cause, n)| format!("{} {n} ({:.1} %)", cause.name(), 100.0 * n as f64 / total))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How far from a level (in levels) a RAM entry may read before it is reported as no
/// level at all: loads carry levels within 2·10⁻⁴, so a tenth is far outside rounding.
const LEVEL_TOLERANCE: f32 = 0.1;

/// Boot tokens handed to the engine at once.
const BOOT_CHUNK: usize = 4096;

/// Instructions between the full-RAM comparisons of `--verify`.
const RAM_CHECK_INTERVAL: u64 = 4096;

/// Every RAM line.
fn all_lines() -> Range<usize> {
    0..(RAM_SIZE as usize) / (4 * LINE_WORDS)
}

/// A program booted in a chip.
pub struct ChipMachine<'a> {
    model: &'a ChipModel,
    map: &'a Rv32Map,
    runner: Box<dyn PassEngine + 'a>,
    /// Tokens the engine chose ahead of the host (each consumed by the engine already).
    ahead: std::collections::VecDeque<ChipToken>,
    /// A continued machine whose engine was ahead of the host when checked against golden
    /// ([`Self::check_resumed`]): all of RAM is compared once the host has caught up.
    ram_check_pending: bool,
    /// The retired count at which the run stops for good (its instruction limit; u64::MAX
    /// for none): the engine runs no pass ahead of the host past it ([`Self::stop_for_good_at`]).
    final_stop: u64,
    image: ProgramImage,
    /// The token the next pass consumes.
    next: ChipToken,
    /// The ROM row the pc is in.
    base_row: usize,
    /// The row moved on by a [`NEXT_ROW`] slot since the last `x`/`xm` (the chip's
    /// `pc_off`): the next move comes as a [`REBASE`] slot, an `x` in a pass of its own.
    row_moved: bool,
    /// The pc is in millicode (the last `x`/`xm` was `xm`).
    in_millicode: bool,
    /// A line fill is under way (from its `fz` to its `rr`).
    in_fill: bool,
    /// The user instruction started and not yet retired.
    in_flight: Option<u32>,
    /// The pass (counted from the end of boot) that started it.
    started_at: u64,
    pub console: Vec<u8>,
    pub counts: RunCounts,
}

impl<'a> ChipMachine<'a> {
    /// Boots `image` on the CPU engine: runs the boot prefill through the chip.
    pub fn boot(model: &'a ChipModel, image: &ProgramImage) -> Result<Self, ChipError> {
        let runner = ChipRunner::new(model)?;
        Self::boot_on(model, Box::new(runner), image)
    }

    /// Boots `image` on any pass engine running `model`'s layers: the prefill.
    pub fn boot_on(
        model: &'a ChipModel,
        mut runner: Box<dyn PassEngine + 'a>,
        image: &ProgramImage,
    ) -> Result<Self, ChipError> {
        let mut tokens = boot_tokens(image, rv32im_map(model)?)?;
        let entry = tokens.pop().expect("boot ends with x");
        for chunk in tokens.chunks(BOOT_CHUNK) {
            runner.passes(chunk, chunk.len(), &[])?;
        }
        Self::booted(model, runner, image, entry, tokens.len())
    }

    /// Boots `image` on the CPU engine by loading state.
    pub fn load(model: &'a ChipModel, image: &ProgramImage) -> Result<Self, ChipError> {
        let runner = ChipRunner::new(model)?;
        Self::load_on(model, Box::new(runner), image, &mut BootLoader::new(model)?)
    }

    /// Boots `image` on any pass engine by loading the state the prefill would leave
    /// (computed by `loader`; see [`super::load`]) and running the prefill's last tokens.
    pub fn load_on(
        model: &'a ChipModel,
        mut runner: Box<dyn PassEngine + 'a>,
        image: &ProgramImage,
        loader: &mut BootLoader,
    ) -> Result<Self, ChipError> {
        let plan = loader.plan(image)?;
        runner.load_state(&plan.rows)?;
        runner.passes(&plan.tail, plan.tail.len(), &[])?;
        Self::booted(model, runner, image, plan.entry, plan.tail.len())
    }

    /// A machine whose boot ran `boot_passes` passes and whose next pass consumes `entry`.
    fn booted(
        model: &'a ChipModel,
        runner: Box<dyn PassEngine + 'a>,
        image: &ProgramImage,
        entry: ChipToken,
        boot_passes: usize,
    ) -> Result<Self, ChipError> {
        Ok(Self {
            model,
            map: rv32im_map(model)?,
            runner,
            ahead: Default::default(),
            ram_check_pending: false,
            final_stop: u64::MAX,
            image: image.clone(),
            next: entry,
            base_row: 0,
            row_moved: false,
            in_millicode: false,
            in_fill: false,
            in_flight: None,
            started_at: 0,
            console: Vec::new(),
            counts: RunCounts {
                boot_passes: boot_passes as u64,
                ..Default::default()
            },
        })
    }

    /// The machine as it stands between two instructions (after a run stopped at its
    /// budget), whose next instruction is at `next_pc`, for [`Self::resume_on`].
    pub fn save(&self, next_pc: u32) -> Result<SavedMachine, ChipError> {
        let tokens = &self.model.spec.tokens;
        let id = |t: &ChipToken| tokens.encode(t) as u32;
        Ok(SavedMachine {
            chip: self.identity()?,
            program: program_digest(&self.image),
            next_pc,
            host: HostPlace {
                next: id(&self.next),
                ahead: self.ahead.iter().map(id).collect(),
                base_row: self.base_row,
                row_moved: self.row_moved,
                in_millicode: self.in_millicode,
                in_fill: self.in_fill,
                in_flight: self.in_flight,
                started_at: self.started_at,
                counts: self.counts,
            },
            console: self.console.clone(),
            engine: self.runner.save_state()?,
        })
    }

    /// Continues `saved` (the same program `image` in the same chip) on `runner`, an
    /// engine of the layout that saved it: its state is written back and the host
    /// stands where it stood, so the run goes on pass for pass as if never stopped.
    pub fn resume_on(
        model: &'a ChipModel,
        mut runner: Box<dyn PassEngine + 'a>,
        image: &ProgramImage,
        saved: &SavedMachine,
    ) -> Result<Self, ChipError> {
        let refuse = |what: &str| Err(ChipError::Resume(what.to_string()));
        let tokens = &model.spec.tokens;
        let decode = |id: &u32| {
            tokens
                .decode(*id as usize)
                .ok_or_else(|| ChipError::Resume(format!("token id {id} is not in this chip's vocabulary")))
        };
        let h = &saved.host;
        let mut machine = Self::booted(model, Box::new(Unfed), image, decode(&h.next)?, 0)?;
        if saved.chip != machine.identity()? {
            return refuse("it was saved by another chip (its identity differs from this chip's)");
        }
        if saved.program != program_digest(image) {
            return refuse("it was saved running another program (or another build of this one)");
        }
        if h.base_row >= ROM_ROWS || h.in_flight.is_some_and(|pc| !(ROM_BASE..ROM_END).contains(&pc)) {
            return refuse("its place in the ROM is outside the ROM");
        }
        machine.ahead = h.ahead.iter().map(decode).collect::<Result<_, _>>()?;
        (machine.base_row, machine.row_moved) = (h.base_row, h.row_moved);
        (machine.in_millicode, machine.in_fill) = (h.in_millicode, h.in_fill);
        (machine.in_flight, machine.started_at) = (h.in_flight, h.started_at);
        machine.counts = h.counts;
        machine.console = saved.console.clone();
        runner
            .restore_state(&saved.engine)
            .map_err(|e| ChipError::Resume(e.to_string()))?;
        machine.runner = runner;
        Ok(machine)
    }

    /// Says that the run stops for good once `retired` instructions have retired (however
    /// many chunks it runs in): an engine that runs passes ahead of the host (the GPU's
    /// lookahead) then runs none past that stop, so the run ends there without passes run
    /// for nothing, and a machine saved there holds no token chosen ahead (its state is
    /// the host's own, compared at once by a continued `--verify`).
    pub fn stop_for_good_at(&mut self, retired: u64) {
        self.final_stop = retired;
    }

    /// How many passes the engine may run from the one about to run (`lookahead` at
    /// most) without passing the final stop: each instruction still to retire before it
    /// retires in a pass of its own, every one of which but the stop's consumes a token,
    /// and this pass consumes one, so the host consumes at least that many more.
    fn passes_before_stop(&self, lookahead: usize) -> usize {
        let left = self.final_stop.saturating_sub(self.counts.retired).max(1);
        usize::try_from(left).map_or(lookahead, |left| left.min(lookahead))
    }

    /// The chip's identity, which a saved machine names.
    fn identity(&self) -> Result<String, ChipError> {
        (self.model.manifest.identity())
            .map(str::to_string)
            .ok_or_else(|| ChipError::Resume("the chip's manifest gives no identity (no tensors file)".to_string()))
    }

    /// Compares pc (`pc`: the next instruction's), console and all of RAM with `golden`
    /// (which has retired as many instructions): where a continued run is checked first.
    /// Not the registers: the last instruction's register write rides on the token that
    /// starts the next one, which the machine has not consumed yet; the check of every
    /// register at the next retirement covers it. Where the engine ran passes ahead of the
    /// host (the GPU engine, when the saving run verified nothing), its RAM is that of a
    /// later place: RAM is then compared at the first retirement after the host has
    /// consumed those passes (and nothing the engine holds before it).
    pub fn check_resumed(&mut self, golden: &Machine, pc: u32) -> Result<(), ChipError> {
        self.mismatch_if_any(self.pc_console_diff(golden, pc))?;
        if !self.ahead.is_empty() {
            self.ram_check_pending = true;
            return Ok(());
        }
        self.compare_lines(golden, all_lines())
    }

    fn pc_of(row: usize, slot: usize) -> u32 {
        ROM_BASE + 32 * row as u32 + 4 * slot as u32
    }

    /// Runs up to `budget` more retired instructions. With `golden` (booted from the same
    /// image), checks pc and registers after every retired instruction, the stored line
    /// after every store and all of RAM every 4096 instructions, and stops at the first
    /// difference.
    pub fn run(&mut self, budget: u64, mut golden: Option<&mut Machine>) -> Result<RunEnd, ChipError> {
        let limit = self.counts.retired.saturating_add(budget);
        loop {
            if let Some(end) = self.pass(limit, golden.as_deref_mut())? {
                return Ok(end);
            }
        }
    }

    /// A machine of a batch (see [`super::batch`]): booted by its driver, which runs its
    /// passes elsewhere and hands it the chosen tokens ([`Self::feed`]); the machine never
    /// runs a pass itself. Its next pass consumes `entry`.
    pub fn fed(
        model: &'a ChipModel,
        image: &ProgramImage,
        entry: ChipToken,
        boot_passes: usize,
    ) -> Result<Self, ChipError> {
        Self::booted(model, Box::new(Unfed), image, entry, boot_passes)
    }

    /// Tokens the chip chose for this machine, in order, after those fed before.
    pub fn feed(&mut self, chosen: impl IntoIterator<Item = ChipToken>) {
        self.ahead.extend(chosen);
    }

    /// The last token fed and not yet followed (what the next pass run for this machine
    /// consumes), or the first token its run consumes.
    pub fn next_input(&self) -> &ChipToken {
        self.ahead.back().unwrap_or(&self.next)
    }

    /// The pc of the instruction under way (the entry point before the first).
    pub fn pc(&self) -> u32 {
        self.in_flight.unwrap_or(self.image.entry)
    }

    /// Follows the fed tokens until the run ends (Some) or the machine needs more passes
    /// (None), without retiring more than `limit` instructions in all.
    pub fn run_fed(&mut self, limit: u64) -> Result<Option<RunEnd>, ChipError> {
        while self.fed_enough() {
            if let Some(end) = self.pass(limit, None)? {
                return Ok(Some(end));
            }
        }
        Ok(None)
    }

    /// The next pass's choice has been fed, and if it ends the run, the value after it.
    fn fed_enough(&self) -> bool {
        match self.ahead.front() {
            Some(t) if t.kind == kind::T && trap_has_value(t.values[0]) => self.ahead.len() > 3,
            Some(_) => true,
            None => false,
        }
    }

    /// Follows one pass: the one consuming `self.next`. Some when the run ended.
    fn pass(&mut self, limit: u64, mut golden: Option<&mut Machine>) -> Result<Option<RunEnd>, ChipError> {
        let tok = self.next.clone();
        let (new_row, in_millicode, start) = follow(self.place(), &tok)?;
        let user_start = start.filter(|_| !in_millicode);
        let mut retiring = false;
        let retired_pc = self.in_flight.unwrap_or(0);
        let this_pass = self.counts.passes;
        if let Some(slot) = user_start {
            // The instruction in flight has finished: it retires as this token starts the next.
            if self.in_flight.is_some() {
                retiring = true;
                if let Some(g) = golden.as_deref_mut() {
                    let stored = self.stored_line(g);
                    self.golden_step(g)?;
                    // (The engine's state is the host's only where it ran no pass ahead.)
                    if self.ahead.is_empty() {
                        self.check_memory(g, stored)?;
                        self.ram_check_pending = false;
                    }
                }
                let class = InstructionClass::of(self.image.rom_word(retired_pc - ROM_BASE));
                self.counts.retire(class, this_pass - self.started_at);
            }
            if self.counts.retired >= limit {
                self.in_flight = None;
                return Ok(Some(RunEnd::BudgetExhausted {
                    pc: Self::pc_of(new_row, slot),
                }));
            }
        }
        let most = if golden.is_some() {
            1
        } else {
            self.passes_before_stop(self.runner.lookahead())
        };
        let out = self.consume(&tok, most)?;
        self.counts.pass(PassCause::of(tok.kind, in_millicode, self.in_fill));
        self.in_fill = match tok.kind {
            kind::FZ => true,
            kind::RR => false,
            _ => self.in_fill,
        };
        self.row_moved = match tok.kind {
            kind::X | kind::XM => false,
            _ => self.row_moved || slot_field(&tok) == Some(NEXT_ROW),
        };
        self.base_row = new_row;
        self.in_millicode = in_millicode;
        if let Some(slot) = user_start {
            self.in_flight = Some(Self::pc_of(new_row, slot));
            self.started_at = this_pass;
            if retiring {
                if let Some(g) = golden.as_deref_mut() {
                    let pc = Self::pc_of(new_row, slot);
                    let checked = if self.ahead.is_empty() {
                        self.check_registers(g, pc)
                    } else {
                        self.mismatch_if_any(self.pc_console_diff(g, pc))
                    };
                    checked.map_err(|e| self.locate(e, retired_pc))?;
                }
            }
        } else if start.is_some() && self.in_flight.is_none() {
            return Err(ChipError::Protocol {
                token: tok,
                expected: "a start in user code",
            });
        }
        match out.kind {
            kind::T => return self.finish(out.values[0], golden).map(Some),
            kind::O => self.console.push((out.values[0] | out.values[1] << 4) as u8),
            _ => {}
        }
        self.next = out;
        Ok(None)
    }

    fn place(&self) -> Place {
        Place {
            row: self.base_row,
            millicode: self.in_millicode,
            moved: self.row_moved,
        }
    }

    /// Adds the instruction to a mismatch report.
    fn locate(&self, e: ChipError, pc: u32) -> ChipError {
        match e {
            ChipError::Mismatch { retired, diff } => {
                let word = self.image.rom_word(pc.wrapping_sub(ROM_BASE));
                ChipError::MismatchAt {
                    retired,
                    pc,
                    instruction: format!("{word:#010x} {:?}", decode(word)),
                    diff,
                }
            }
            other => other,
        }
    }

    /// Runs the pass that consumes `token` (which the engine may have run already, ahead
    /// of the host) and returns the token it chose; where the engine has to run it, it
    /// may run up to `most` passes (this one and those after it, ahead of the host).
    fn consume(&mut self, token: &ChipToken, most: usize) -> Result<ChipToken, ChipError> {
        if let Some(next) = self.ahead.pop_front() {
            return Ok(next);
        }
        let mut out = self
            .runner
            .passes(std::slice::from_ref(token), most.max(1), &[kind::T])?;
        let first = out.remove(0);
        self.ahead.extend(out);
        Ok(first)
    }

    fn golden_step(&mut self, g: &mut Machine) -> Result<Step, ChipError> {
        g.step().map_err(|trap| ChipError::Mismatch {
            retired: self.counts.retired,
            diff: format!("the chip retired an instruction where golden trapped: {trap}"),
        })
    }

    /// A `t` token: read its value (when it has one) and end the run.
    fn finish(&mut self, cause: usize, golden: Option<&mut Machine>) -> Result<RunEnd, ChipError> {
        let pc = self.in_flight.ok_or(ChipError::Protocol {
            token: token(kind::T, &[cause]),
            expected: "a trap inside an instruction",
        })?;
        let with_value = trap_has_value(cause);
        let mut value = 0;
        if with_value {
            let mut parts = Vec::new();
            let mut t = token(kind::T, &[cause]);
            for expected in [kind::W1, kind::W2, kind::W3] {
                let out = self.consume(&t, 1)?;
                self.counts.pass(PassCause::End);
                if out.kind != expected {
                    return Err(ChipError::Protocol {
                        token: out,
                        expected: "the w1 w2 w3 value after a trap",
                    });
                }
                parts.push(out.clone());
                t = out;
            }
            value = word_of(&parts);
        }
        let word = self.image.rom_word(pc - ROM_BASE);
        let passes = self.counts.passes - self.started_at;
        let end = match cause {
            CAUSE_EXIT => {
                self.counts.retire(InstructionClass::of(word), passes);
                RunEnd::Exited(value as i32)
            }
            1 => {
                // The jump (or the last instruction of the ROM) retires; the fetch after it fails.
                self.counts.retire(InstructionClass::of(word), passes);
                let is_jump = matches!(
                    decode(word),
                    Some(Instruction::Jal { .. } | Instruction::Jalr { .. } | Instruction::Branch { .. })
                );
                let at = if is_jump { value } else { pc.wrapping_add(4) };
                RunEnd::Trapped(Trap {
                    pc: at,
                    cause: TrapCause::InstructionAccessFault,
                })
            }
            _ => {
                let cause = TrapCause::from_code(cause as u32, value, word).ok_or(ChipError::Protocol {
                    token: token(kind::T, &[cause]),
                    expected: "a trap cause 0..8 or the exit",
                })?;
                RunEnd::Trapped(Trap { pc, cause })
            }
        };
        if let Some(g) = golden {
            self.check_end(g, end)?;
        }
        Ok(end)
    }

    fn check_end(&mut self, g: &mut Machine, end: RunEnd) -> Result<(), ChipError> {
        let mismatch = |diff: String| ChipError::Mismatch {
            retired: self.counts.retired,
            diff,
        };
        let golden_end = match g.step() {
            Ok(Step::Exited(code)) => RunEnd::Exited(code),
            Ok(Step::Retired) => match g.step() {
                Err(trap) => {
                    let regs = self.registers()?;
                    if regs != g.regs {
                        return Err(mismatch(register_diff(&g.regs, &regs)));
                    }
                    RunEnd::Trapped(trap)
                }
                Ok(_) => {
                    return Err(mismatch(format!(
                        "the chip ended ({end:?}) but golden runs on at {:#010x}",
                        g.pc
                    )))
                }
            },
            Err(trap) => RunEnd::Trapped(trap),
        };
        if golden_end != end {
            return Err(mismatch(format!(
                "the chip ended with {end:?}, golden with {golden_end:?}"
            )));
        }
        if g.console != self.console {
            return Err(mismatch(format!(
                "console output differs: golden {:?}, chip {:?}",
                String::from_utf8_lossy(&g.console),
                String::from_utf8_lossy(&self.console)
            )));
        }
        // A continued run that ended before its host caught up with the engine (which
        // stops choosing ahead at an end): RAM is compared here.
        if self.ram_check_pending {
            self.compare_lines(g, all_lines())?;
        }
        Ok(())
    }

    fn check_registers(&self, g: &Machine, pc: u32) -> Result<(), ChipError> {
        let regs = self.registers()?;
        let mut diff = self.pc_console_diff(g, pc);
        if regs != g.regs {
            diff += &register_diff(&g.regs, &regs);
        }
        self.mismatch_if_any(diff)
    }

    /// Where pc or the console output differs from golden's, a line each; else empty.
    fn pc_console_diff(&self, g: &Machine, pc: u32) -> String {
        let mut diff = String::new();
        if g.pc != pc {
            diff += &format!("pc: golden {:#010x}, chip {:#010x}\n", g.pc, pc);
        }
        if g.console != self.console {
            diff += &format!(
                "console: golden {:?}, chip {:?}\n",
                String::from_utf8_lossy(&g.console),
                String::from_utf8_lossy(&self.console)
            );
        }
        diff
    }

    /// A mismatch at this retirement where `diff` says anything.
    fn mismatch_if_any(&self, diff: String) -> Result<(), ChipError> {
        if diff.is_empty() {
            return Ok(());
        }
        Err(ChipError::Mismatch {
            retired: self.counts.retired,
            diff,
        })
    }

    /// The RAM line the instruction in flight stores to (golden's registers before it runs).
    fn stored_line(&self, g: &Machine) -> Option<usize> {
        let pc = self.in_flight?;
        let Some(Instruction::Store { rs1, offset, .. }) = decode(self.image.rom_word(pc - ROM_BASE)) else {
            return None;
        };
        let addr = g.regs[rs1 as usize].wrapping_add(offset as u32);
        (RAM_BASE..RAM_BASE + RAM_SIZE)
            .contains(&addr)
            .then(|| ((addr - RAM_BASE) / (4 * LINE_WORDS as u32)) as usize)
    }

    /// After a store retires, its line; every 4096 instructions (and where a resume left
    /// the check pending), all of RAM.
    fn check_memory(&self, g: &Machine, stored: Option<usize>) -> Result<(), ChipError> {
        let lines = if self.counts.retired.is_multiple_of(RAM_CHECK_INTERVAL) || self.ram_check_pending {
            all_lines()
        } else if let Some(line) = stored {
            line..line + 1
        } else {
            return Ok(());
        };
        self.compare_lines(g, lines)
    }

    /// Compares RAM lines `lines` with golden's.
    fn compare_lines(&self, g: &Machine, lines: Range<usize>) -> Result<(), ChipError> {
        let ram = g.ram();
        for (line, have) in lines.clone().zip(self.ram_lines(lines)?) {
            for (k, have) in have.into_iter().enumerate() {
                let i = line * LINE_WORDS + k;
                let want = u32::from_le_bytes(ram[4 * i..4 * i + 4].try_into().expect("4 bytes"));
                if want != have {
                    return Err(ChipError::Mismatch {
                        retired: self.counts.retired,
                        diff: format!(
                            "RAM word {:#010x}: golden {want:#010x}, chip {have:#010x}",
                            RAM_BASE + 4 * i as u32
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Rows `rows` of one-hot memory `memory` (an index into the manifest's memories),
    /// each over all value heads of its key head: which entries are set (above half of
    /// `bit_on`, far from both ±bit_on). One read per value head.
    fn memory_rows(&self, memory: usize, rows: Range<usize>) -> Result<Vec<Vec<bool>>, ChipError> {
        let place = &self.model.manifest.memories[memory];
        let group = self.model.config.value_heads_per_key_head();
        let dv = self.model.config.linear_value_head_dim;
        let threshold = self.map.bit_on / 2.0;
        let mut entries = vec![Vec::new(); rows.len()];
        for sub in 0..group {
            let read = self
                .runner
                .memory_rows(place.layer, place.first_key_head * group + sub, rows.clone())?;
            for (row, values) in entries.iter_mut().zip(read.chunks(dv)) {
                row.extend(values.iter().map(|v| *v > threshold));
            }
        }
        Ok(entries)
    }

    /// The user registers x0..x31, read from the register file's state (each of its
    /// four memories in one read).
    pub fn registers(&self) -> Result<[u32; 32], ChipError> {
        let m = self.map;
        let [lows, classes, up34s, up567s] =
            [m.regs_low, m.regs_cls, m.regs_up34, m.regs_up567].map(|memory| self.memory_rows(memory, 0..32));
        let (lows, classes, up34s, up567s) = (lows?, classes?, up34s?, up567s?);
        let mut regs = [0u32; 32];
        for (r, reg) in regs.iter_mut().enumerate() {
            let (lo, class, u34, u567) = (&lows[r], &classes[r], &up34s[r], &up567s[r]);
            let nib = |e: &[bool], off: usize| (1..16).find(|v| e[off + v]).unwrap_or(0) as u32;
            let (sneg, lones, link) = (class[cls::SNEG], class[cls::LONES], class[cls::LINK]);
            let fill = |ones: bool| if ones { 15 } else { 0 };
            let mut v = [0u32; 8];
            for (j, n) in v.iter_mut().take(3).enumerate() {
                *n = nib(lo, low::NIBBLES + 16 * j);
            }
            v[3] = nib(u34, 0) + nib(class, cls::LINK_N3) + fill(sneg);
            v[4] = nib(u34, 16) + u32::from(link) + fill(sneg);
            for (j, n) in v.iter_mut().skip(5).enumerate() {
                *n = nib(u567, 16 * j) + fill(sneg || lones);
            }
            *reg = v.iter().enumerate().fold(0, |w, (j, n)| w | (n & 15) << (4 * j));
        }
        Ok(regs)
    }

    /// The eight words of RAM line `line` (0 = RAM_BASE), read from its bank's state:
    /// word k's nibble j is the level at entry 8k + j, stored as LEVEL_UNIT per level (an
    /// entry more than a tenth of a level off is reported, not rounded).
    pub fn ram_line(&self, line: usize) -> Result<[u32; LINE_WORDS], ChipError> {
        Ok(self.ram_lines(line..line + 1)?[0])
    }

    /// RAM lines `lines`, as [`Self::ram_line`] reads one: the lines of one bank head are
    /// consecutive rows, read at once.
    pub fn ram_lines(&self, lines: Range<usize>) -> Result<Vec<[u32; LINE_WORDS]>, ChipError> {
        let group = self.model.config.value_heads_per_key_head();
        let dv = self.model.config.linear_value_head_dim;
        let mut words = Vec::with_capacity(lines.len());
        let mut line = lines.start;
        while line < lines.end {
            let [bank, head, rhi, rlo] = line_digits(line);
            let first_row = rhi << 4 | rlo;
            let rows = first_row..(first_row + lines.end - line).min(HEAD_LINES);
            let place = &self.model.manifest.memories[self.map.ram_banks[bank]];
            let read = self
                .runner
                .memory_rows(place.layer, (place.first_key_head + head) * group, rows.clone())?;
            for row in read.chunks(dv) {
                words.push(self.line_words(line, row)?);
                line += 1;
            }
        }
        Ok(words)
    }

    /// The words of RAM line `line` from its bank row's levels.
    fn line_words(&self, line: usize, row: &[f32]) -> Result<[u32; LINE_WORDS], ChipError> {
        let unit = self.map.level_unit;
        let mut words = [0u32; LINE_WORDS];
        for (k, w) in words.iter_mut().enumerate() {
            for j in 0..8 {
                let level = row[8 * k + j] / unit;
                let nearest = level.round().clamp(0.0, 15.0);
                if (level - nearest).abs() > LEVEL_TOLERANCE {
                    return Err(ChipError::Mismatch {
                        retired: self.counts.retired,
                        diff: format!(
                            "RAM word {:#010x}: nibble {j} holds level {level}, not a nibble",
                            RAM_BASE + 4 * (line * LINE_WORDS + k) as u32
                        ),
                    });
                }
                *w |= (nearest as u32) << (4 * j);
            }
        }
        Ok(words)
    }
}

/// The chip's RV32IM map (an error for a chip without one).
pub(crate) fn rv32im_map(model: &ChipModel) -> Result<&Rv32Map, ChipError> {
    model
        .manifest
        .rv32im
        .as_ref()
        .ok_or_else(|| ChipError::NotRv32im(model.manifest.chip.clone()))
}

fn register_diff(golden: &[u32; 32], chip: &[u32; 32]) -> String {
    let mut s = String::new();
    for r in 0..32 {
        if golden[r] != chip[r] {
            s += &format!("x{r}: golden {:#010x}, chip {:#010x}\n", golden[r], chip[r]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rv32im::tokens::{NEXT_ROW, REBASE};

    #[test]
    fn pass_causes_follow_the_token_kinds() {
        let of = |kind, millicode, fill| PassCause::of(kind, millicode, fill);
        assert_eq!(of(kind::S, false, false), PassCause::Retire);
        assert_eq!(of(kind::O, false, false), PassCause::Retire);
        assert_eq!(of(kind::X, false, false), PassCause::RowChange);
        assert_eq!(of(kind::H, false, false), PassCause::LongWrite);
        assert_eq!(of(kind::W2, false, false), PassCause::StoreData);
        assert_eq!(of(kind::W2, false, true), PassCause::LineFill);
        assert_eq!(of(kind::RR, false, true), PassCause::LineFill);
        assert_eq!(of(kind::S, true, false), PassCause::Millicode);
        assert_eq!(of(kind::T, false, false), PassCause::End);
        let mut counts = RunCounts::default();
        counts.pass(PassCause::Retire);
        counts.pass(PassCause::Retire);
        counts.pass(PassCause::RowChange);
        assert_eq!(counts.passes, 3);
        assert_eq!(counts.breakdown(), "retire 2 (66.7 %), row change 1 (33.3 %)");
    }

    #[test]
    fn trap_codes_round_trip() {
        for code in 0..9 {
            let cause = TrapCause::from_code(code, 0x40, 0x13).expect("a bare-metal cause");
            assert_eq!(cause.code(), code);
        }
        assert_eq!(TrapCause::from_code(CAUSE_EXIT as u32, 0, 0), None);
    }

    #[test]
    fn divisions_are_recognised() {
        // div a0,a1,a2 / divu / rem / remu; mul, mulhu, add, sub are not divisions.
        for w in [0x02c5_c533u32, 0x02c5_d533, 0x02c5_e533, 0x02c5_f533] {
            assert!(is_division(w), "{w:#x}");
        }
        for w in [0x02c5_8533u32, 0x02c5_b533, 0x00c5_8533, 0x40c5_8533, 0x00c5_c533] {
            assert!(!is_division(w), "{w:#x}");
        }
    }

    #[test]
    fn word_tokens_spell_the_word() {
        for w in [0u32, 1, 0xdead_beef, u32::MAX] {
            let n = |i| nibble(w, i);
            let parts = [
                token(kind::W1, &[n(0), n(1), n(2)]),
                token(kind::W2, &[n(3), n(4), n(5)]),
                token(kind::W3, &[n(6), n(7), 3]),
            ];
            assert_eq!(word_of(&parts), w);
        }
        for line in [0, 1, 127, 128, 2047, 2048, 8191] {
            let [b, h, a, r] = line_digits(line);
            assert_eq!((b << 11) | (h << 7) | (a << 4) | r, line);
        }
        assert_eq!(started_slot(&token(kind::S, &[1, 2, 3, 5])), Some(5));
        assert_eq!(started_slot(&token(kind::S, &[1, 2, 3, NEXT_ROW])), None);
        assert_eq!(started_slot(&token(kind::X, &[1, 2, 3, 7])), Some(7));
        assert_eq!(started_slot(&token(kind::M, &[1, 2, 0, 7])), None);
    }

    #[test]
    fn row_moves_follow_the_slot_field() {
        let at = |row, millicode, moved| Place { row, millicode, moved };
        let s = |slot| token(kind::S, &[1, 2, 3, slot]);
        let go = |place, tok: &ChipToken| follow(place, tok).map_err(|e| e.to_string());
        assert_eq!(go(at(5, false, false), &s(3)), Ok((5, false, Some(3))));
        assert_eq!(go(at(5, false, false), &s(NEXT_ROW)), Ok((6, false, Some(0))));
        assert_eq!(go(at(6, false, true), &s(REBASE)), Ok((6, false, None)));
        assert_eq!(go(at(2, true, false), &s(NEXT_ROW)), Ok((3, true, Some(0))));
        // User code's last row: the next-row slot traps there (no start, no move).
        let last = ROM_ROWS - 1;
        assert_eq!(go(at(last, false, false), &s(NEXT_ROW)), Ok((last, false, None)));
        assert_eq!(
            go(at(9, false, true), &token(kind::X, &[0, 0, 4, 2])),
            Ok((4, false, Some(2)))
        );
        // The chip chose from the wrong pc_off: a protocol error, never a silent move.
        let wrong_next = go(at(6, false, true), &s(NEXT_ROW)).unwrap_err();
        assert!(wrong_next.contains("a rebase slot"), "{wrong_next}");
        let wrong_rebase = go(at(6, false, false), &token(kind::N, &[REBASE])).unwrap_err();
        assert!(wrong_rebase.contains("a next-row slot"), "{wrong_rebase}");
    }
}

//! Many programs in one chip at once: a [`BatchEngine`] holds many machines (each its own
//! GDN and conv state, all sharing the chip's weights); this driver boots a program into
//! each free slot by loading state, runs every busy slot a round of passes at a time
//! (one launch on a GPU), follows each machine's tokens with its own [`ChipMachine`], and
//! hands a slot whose program ended to the next program waiting.
//!
//! A machine's passes are the ones its single-stream run would make: the boot's tail,
//! then its own choices, the `w1 w2 w3` after a `t` asked for in a round of their own, so
//! its token stream is the single-stream one (checked by the tests). Budgets are in
//! retired instructions, each job its own; a trap, an exit or an exhausted budget ends
//! only its own machine.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use inband_firmware::ProgramImage;
use inband_golden::RunEnd;

use super::load::{BootLoader, BootPlan};
use super::machine::{ChipError, ChipMachine, RunCounts};
use super::tokens::kind;
use crate::engine::{consumed_and_chosen, BatchEngine, SlotWork};
use crate::model::ChipModel;
use crate::token::ChipToken;

/// A program to run, with its instruction budget.
#[derive(Debug, Clone)]
pub struct Job {
    pub image: Arc<ProgramImage>,
    /// Instructions it may retire before it is stopped.
    pub budget: u64,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub end: RunEnd,
    pub counts: RunCounts,
    pub console: Vec<u8>,
    /// (consumed, chosen) token ids of every pass, boot tail included (empty unless
    /// [`BatchOptions::trace`]).
    pub trace: Vec<(u32, u32)>,
    /// The batch's wall-clock limit stopped it (its end is then an exhausted budget).
    pub timed_out: bool,
}

/// How the driver runs a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Passes a busy machine runs per round (the host follows the tokens between rounds).
    pub passes_per_round: usize,
    /// Record every machine's token stream.
    pub trace: bool,
    /// Wall-clock time the batch may run (checked between rounds): machines still
    /// running then end as out of budget, [`JobResult::timed_out`] set.
    pub wall: Option<std::time::Duration>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            passes_per_round: 4096,
            trace: false,
            wall: None,
        }
    }
}

/// Where a batch's time went.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchStats {
    pub rounds: u64,
    /// Passes the engine ran, boot tails and passes past a budget included.
    pub engine_passes: u64,
    /// Seconds in the engine's rounds.
    pub engine_seconds: f64,
    /// Seconds computing boot plans and loading slots.
    pub boot_seconds: f64,
    /// Seconds following tokens on the host.
    pub host_seconds: f64,
}

/// A slot's machine and what it runs next.
struct Busy<'a> {
    job: usize,
    machine: ChipMachine<'a>,
    work: SlotWork,
    /// Chosen tokens of the next round that belong to the boot (not the machine's).
    boot_outputs: usize,
    trace: Vec<(u32, u32)>,
}

/// Runs every job in `engine`'s slots, the next one waiting taking a slot as soon as one
/// is free; returns each job's result in `jobs`' order (a job whose boot or token stream
/// failed gets its error; an engine failure ends the whole batch) and calls `on_done` as
/// each job ends.
pub fn run_batch<'a>(
    model: &'a ChipModel,
    engine: &mut dyn BatchEngine,
    loader: &mut BootLoader,
    jobs: &[Job],
    options: BatchOptions,
    mut on_done: impl FnMut(usize, &Result<JobResult, ChipError>),
) -> Result<(Vec<Result<JobResult, ChipError>>, BatchStats), ChipError> {
    let mut stats = BatchStats::default();
    let mut plans: HashMap<*const ProgramImage, Arc<BootPlan>> = HashMap::new();
    let mut results: Vec<Option<Result<JobResult, ChipError>>> = (0..jobs.len()).map(|_| None).collect();
    let mut slots: Vec<Option<Busy<'a>>> = (0..engine.slots()).map(|_| None).collect();
    let mut waiting = 0..jobs.len();
    let began = Instant::now();
    loop {
        if options.wall.is_some_and(|wall| began.elapsed() > wall) {
            let running = slots.iter_mut().filter_map(Option::take);
            for (job, busy) in running.map(|b| (b.job, Some(b))).chain(waiting.map(|job| (job, None))) {
                let result = Ok(out_of_time(&jobs[job], busy));
                on_done(job, &result);
                results[job] = Some(result);
            }
            break;
        }
        let start = Instant::now();
        for (slot, busy) in slots.iter_mut().enumerate().filter(|(_, b)| b.is_none()) {
            for job in waiting.by_ref() {
                match boot(model, engine, loader, &mut plans, jobs, job, slot, options) {
                    Ok(b) => {
                        *busy = Some(b);
                        break;
                    }
                    Err(e) => {
                        let result = Err(e);
                        on_done(job, &result);
                        results[job] = Some(result);
                    }
                }
            }
        }
        stats.boot_seconds += start.elapsed().as_secs_f64();
        let work: Vec<SlotWork> = slots.iter().flatten().map(|b| b.work.clone()).collect();
        if work.is_empty() {
            break;
        }
        let start = Instant::now();
        let chosen = engine.round(&work)?;
        stats.engine_seconds += start.elapsed().as_secs_f64();
        stats.rounds += 1;
        let start = Instant::now();
        for (busy, chosen) in slots.iter_mut().filter(|b| b.is_some()).zip(chosen) {
            stats.engine_passes += chosen.len() as u64;
            let b = busy.as_mut().expect("filtered");
            if let Some(end) = follow(model, b, chosen, jobs[b.job].budget, options) {
                let b = busy.take().expect("filtered");
                let result = end.map(|end| JobResult {
                    end,
                    counts: b.machine.counts,
                    console: b.machine.console,
                    trace: b.trace,
                    timed_out: false,
                });
                on_done(b.job, &result);
                results[b.job] = Some(result);
            }
        }
        stats.host_seconds += start.elapsed().as_secs_f64();
    }
    let results = results
        .into_iter()
        .map(|r| r.expect("every job ran or failed"))
        .collect();
    Ok((results, stats))
}

/// How a job the batch's time limit stopped ended: where its machine was (or its entry
/// point, if it never got a machine).
fn out_of_time(job: &Job, busy: Option<Busy>) -> JobResult {
    let (pc, counts, console, trace) = match busy {
        Some(b) => (b.machine.pc(), b.machine.counts, b.machine.console, b.trace),
        None => (job.image.entry, RunCounts::default(), Vec::new(), Vec::new()),
    };
    JobResult {
        end: RunEnd::BudgetExhausted { pc },
        counts,
        console,
        trace,
        timed_out: true,
    }
}

/// Boots `jobs[job]` into `slot`: loads the state its prefill would leave and sets up
/// the round that runs the prefill's tail and the first passes of the program.
#[allow(clippy::too_many_arguments)]
fn boot<'a>(
    model: &'a ChipModel,
    engine: &mut dyn BatchEngine,
    loader: &mut BootLoader,
    plans: &mut HashMap<*const ProgramImage, Arc<BootPlan>>,
    jobs: &[Job],
    job: usize,
    slot: usize,
    options: BatchOptions,
) -> Result<Busy<'a>, ChipError> {
    let image = &jobs[job].image;
    let plan = match plans.get(&Arc::as_ptr(image)) {
        Some(plan) => plan.clone(),
        None => {
            let plan = Arc::new(loader.plan(image)?);
            plans.insert(Arc::as_ptr(image), plan.clone());
            plan
        }
    };
    engine.load_slot(slot, &plan.rows)?;
    let machine = ChipMachine::fed(model, image, plan.entry.clone(), plan.tail.len())?;
    let mut inputs = plan.tail.clone();
    inputs.push(plan.entry.clone());
    Ok(Busy {
        job,
        machine,
        work: SlotWork {
            slot,
            inputs,
            max: plan.tail.len() + options.passes_per_round,
            stop_kinds: vec![kind::T],
        },
        boot_outputs: plan.tail.len(),
        trace: Vec::new(),
    })
}

/// Hands a round's chosen tokens to the slot's machine and follows them: Some when its
/// run ended (or failed); otherwise sets up the slot's next round.
fn follow(
    model: &ChipModel,
    b: &mut Busy,
    chosen: Vec<ChipToken>,
    budget: u64,
    options: BatchOptions,
) -> Option<Result<RunEnd, ChipError>> {
    if options.trace {
        b.trace
            .extend(consumed_and_chosen(&model.spec.tokens, &b.work.inputs, &chosen));
    }
    b.machine.feed(chosen.into_iter().skip(b.boot_outputs));
    b.boot_outputs = 0;
    match b.machine.run_fed(budget) {
        Ok(None) => {
            let next = b.machine.next_input().clone();
            // A `t` was chosen: its value follows in three passes that stop at nothing.
            let (max, stop_kinds) = if next.kind == kind::T {
                (3, vec![])
            } else {
                (options.passes_per_round, vec![kind::T])
            };
            b.work = SlotWork {
                slot: b.work.slot,
                inputs: vec![next],
                max,
                stop_kinds,
            };
            None
        }
        Ok(Some(end)) => Some(Ok(end)),
        Err(e) => Some(Err(e)),
    }
}

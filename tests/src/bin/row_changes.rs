//! What a program's control flow costs in forward passes, from the golden interpreter.
//!
//! The chip fetches from ROM rows of eight instructions (32 bytes). Moving to another row
//! is an `x` token (the "row change" of `inband bench`'s breakdown), and the pass that
//! consumes it runs the instruction it jumps to: a taken branch or jump costs no pass of
//! its own, within its row or not. Two things do cost a pass that runs no instruction:
//! - a register-writing instruction in a row's last slot that runs on into the next row
//!   a second time since the last `x`: its write token carries slot 9, whose pass only
//!   moves the row (`x`) without running anything (a "rebase" pass). The first such run-on
//!   costs nothing: its token carries slot 8, and the pass consuming it runs the next
//!   row's first instruction (the chip's `pc_off` says the row moved);
//! - a jump that links (`jal`/`jalr` with rd ≠ x0): the `lk` pass writes the link.
//!
//! A short loop (its back edge spans less than a row) that straddles a row crosses it
//! once an iteration after its jump back (an `x`), which costs no rebase pass; the tool
//! counts rebase passes inside such loops separately.
//!
//! `cargo run --release -p inband-tests --bin row_changes -- PROGRAM.elf...`

use std::collections::BTreeMap;

use anyhow::bail;
use inband_tests::golden_steps;

/// Instructions a program may run here.
const BUDGET: u64 = 100_000_000;
/// Bytes of a ROM row.
const ROW: u32 = 32;

#[derive(Default)]
struct Counts {
    instructions: u64,
    /// Passes that consume an `x` token (every change of row and taken jump).
    x_passes: u64,
    link: u64,
    /// Rebase passes by the pc of the instruction that ran past its row's end.
    rebase: BTreeMap<u32, u64>,
    /// Short loops that straddle a row: (head, back edge's pc), by the times they were
    /// jumped back to.
    straddling: BTreeMap<(u32, u32), u64>,
}

impl Counts {
    fn rebase_total(&self) -> u64 {
        self.rebase.values().sum()
    }

    /// Rebase passes inside the straddling short loops' bodies.
    fn rebase_in_short_loops(&self) -> u64 {
        self.rebase
            .iter()
            .filter(|(pc, _)| self.straddling.keys().any(|&(head, back)| (head..back).contains(pc)))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Runs `path`, counting its control flow's passes.
fn count(path: &str) -> anyhow::Result<Counts> {
    let mut c = Counts::default();
    // The row moved on by a slot-8 token since the last `x` (the chip's `pc_off`).
    let mut moved = false;
    c.instructions = golden_steps(path, BUDGET, |step| {
        let (pc, next) = (step.pc, step.after.pc);
        let sequential = next == pc.wrapping_add(4);
        let crosses = next / ROW != pc / ROW;
        if step.links() {
            c.link += 1;
        }
        if sequential && crosses && step.value_write().is_some() {
            if moved {
                *c.rebase.entry(pc).or_default() += 1;
                c.x_passes += 1;
            }
            moved = !moved;
        } else if !sequential || crosses {
            c.x_passes += 1;
            moved = false;
        }
        if next < pc && pc - next < ROW && next / ROW != pc / ROW {
            *c.straddling.entry((next, pc)).or_default() += 1;
        }
    })?;
    Ok(c)
}

fn main() -> anyhow::Result<()> {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        bail!("usage: row_changes PROGRAM.elf... (programs built by `inband build`)");
    }
    println!(
        "| program | instructions | x passes (run the instruction jumped to) | rebase passes | of them in short \
         loops that straddle a row | link passes | the busiest straddling loop heads |"
    );
    println!("|---|---|---|---|---|---|---|");
    for path in &paths {
        let c = count(path)?;
        let per = |x: u64| format!("{:.3}", x as f64 / c.instructions as f64);
        let mut heads: Vec<((u32, u32), u64)> = c.straddling.iter().map(|(k, n)| (*k, *n)).collect();
        heads.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let heads: Vec<String> = heads
            .iter()
            .take(3)
            .map(|((pc, _), n)| format!("{pc:#x} ×{n}"))
            .collect();
        println!(
            "| {path} | {} | {} | {} ({}) | {} | {} | {} |",
            c.instructions,
            per(c.x_passes),
            per(c.rebase_total()),
            c.rebase_total(),
            per(c.rebase_in_short_loops()),
            per(c.link),
            heads.join(", ")
        );
    }
    Ok(())
}

//! Where a program's `x` passes come from, and what aligning its short loops could save.
//!
//! The chip fetches from ROM rows of eight instructions (32 bytes). A pass whose next
//! instruction is not the one after it in the same row consumes an extra `x` token (the
//! "row change" of `inband bench`'s breakdown): running on past a row's end, and every
//! taken branch or jump, within its row or not (the golden counts here equal the chip's,
//! e.g. sort: 9,899 changes of row and 22,833 taken jumps within a row, 32,733 `x` passes
//! on the chip). This follows the golden interpreter and sorts them by cause: running past
//! a row's end; a taken jump within a row; a backward branch or jump to another row that
//! spans less than a row (a loop that would fit in one row, were it aligned); a longer
//! backward one; anything else (forward branches, calls, returns). A straddling short loop
//! pays for running past the row's end inside its body on every iteration, which a layout
//! that puts it inside a row would remove (its jump back would still cost its pass);
//! those are counted too, so such a layout can be judged before it is built. The padding
//! it needs, run once per entry into a loop, is not counted.
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
    sequential: u64,
    within_row: u64,
    short_loop: u64,
    long_backward: u64,
    other: u64,
    /// Short loops that straddle a row, (head, back edge's pc), by the times they were
    /// jumped back to.
    straddling: BTreeMap<(u32, u32), u64>,
    /// Runs past a row's end, by the pc that ran past.
    row_ends: BTreeMap<u32, u64>,
}

impl Counts {
    /// Runs past a row's end inside the straddling short loops' bodies: what putting each
    /// of those loops inside one row would save.
    fn row_ends_in_short_loops(&self) -> u64 {
        self.row_ends
            .iter()
            .filter(|(pc, _)| self.straddling.keys().any(|&(head, back)| (head..back).contains(pc)))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Runs `path`, counting row changes by cause.
fn count(path: &str) -> anyhow::Result<Counts> {
    let mut c = Counts::default();
    c.instructions = golden_steps(path, BUDGET, |step| {
        let (pc, next) = (step.pc, step.after.pc);
        if next / ROW == pc / ROW && next != pc.wrapping_add(4) {
            c.within_row += 1;
        } else if next / ROW != pc / ROW {
            if next == pc.wrapping_add(4) {
                c.sequential += 1;
                *c.row_ends.entry(pc).or_default() += 1;
            } else if next < pc && pc - next < ROW {
                c.short_loop += 1;
                *c.straddling.entry((next, pc)).or_default() += 1;
            } else if next < pc {
                c.long_backward += 1;
            } else {
                c.other += 1;
            }
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
        "| program | instructions | x passes per instruction | running past a row's end | taken within a row | short \
         loops jumping back across a row | longer backward jumps | forward, calls, returns | short loops in one row \
         would save | the busiest straddling loop heads |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for path in &paths {
        let c = count(path)?;
        let saved = c.row_ends_in_short_loops();
        let per = |x: u64| format!("{:.3}", x as f64 / c.instructions as f64);
        let all = c.sequential + c.within_row + c.short_loop + c.long_backward + c.other;
        let mut heads: Vec<((u32, u32), u64)> = c.straddling.into_iter().collect();
        heads.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let heads: Vec<String> = heads
            .iter()
            .take(3)
            .map(|((pc, _), n)| format!("{pc:#x} ×{n}"))
            .collect();
        println!(
            "| {path} | {} | {} ({all}) | {} | {} | {} | {} | {} | {} | {} |",
            c.instructions,
            per(all),
            per(c.sequential),
            per(c.within_row),
            per(c.short_loop),
            per(c.long_backward),
            per(c.other),
            per(saved),
            heads.join(", ")
        );
    }
    Ok(())
}

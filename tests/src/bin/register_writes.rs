//! How wide the values are that a program writes to registers, and what the chip's long
//! writes would cost if a write that keeps the upper bits of the register it overwrites
//! needed no extra token.
//!
//! The chip writes a register from the token a pass consumes: a value that fits 12 bits
//! sign-extended in one token (`s`), one whose bits 20..31 are all 0 or all 1 in two (`m`,
//! `l`), any other in three (`h`, `m`, `l`); the extra tokens are the "long write" passes of
//! `inband bench`'s breakdown. Pointer arithmetic in RAM (0x40000..0x80000) is mostly of the
//! second kind, yet most such writes leave bits 12..31 of the register as they were
//! (`addi a5, a5, 4`). This counts both, from the golden interpreter, so a chip change that
//! writes only the low bits in that case can be judged before it is built.
//!
//! `cargo run --release -p inband-tests --bin register_writes -- PROGRAM.elf...`
//!
//! Links (`jal`, `jalr`) are left out (the chip writes them with `lk`); divisions are
//! counted as the instruction's own write (the chip computes them in millicode).

use anyhow::bail;
use inband_tests::golden_steps;

/// Instructions a program may run here.
const BUDGET: u64 = 100_000_000;

/// Extra tokens (beyond the one that retires) the chip needs to write `v`.
fn extra_tokens(v: u32) -> u64 {
    if (-2048..2048).contains(&(v as i32)) {
        0
    } else if v >> 20 == 0 || v >> 20 == 0xfff {
        1
    } else {
        2
    }
}

#[derive(Default)]
struct Counts {
    instructions: u64,
    writes_by_extra: [u64; 3],
    extra: u64,
    extra_if_kept_free: u64,
}

fn count(path: &str) -> anyhow::Result<Counts> {
    let mut c = Counts::default();
    c.instructions = golden_steps(path, BUDGET, |step| {
        if let Some(rd) = step.value_write() {
            let v = step.after.regs[rd];
            let extra = extra_tokens(v);
            c.writes_by_extra[extra as usize] += 1;
            c.extra += extra;
            if v >> 12 != step.regs_before[rd] >> 12 {
                c.extra_if_kept_free += extra;
            }
        }
    })?;
    Ok(c)
}

fn main() -> anyhow::Result<()> {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        bail!("usage: register_writes PROGRAM.elf... (programs built by `inband build`)");
    }
    println!("| program | instructions | writes: 1 / 2 / 3 tokens | long-write passes per instruction | if a write keeping bits 12..31 took 1 |");
    println!("|---|---|---|---|---|");
    for path in &paths {
        let c = count(path)?;
        let per = |x: u64| x as f64 / c.instructions as f64;
        let [one, two, three] = c.writes_by_extra;
        let name = std::path::Path::new(path)
            .file_stem()
            .map_or(path.clone(), |s| s.to_string_lossy().into());
        println!(
            "| {name} | {} | {one} / {two} / {three} | {:.3} | {:.3} |",
            c.instructions,
            per(c.extra),
            per(c.extra_if_kept_free)
        );
    }
    Ok(())
}

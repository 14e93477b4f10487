//! The RV32IM chip: a CPU compiled into stock Qwen3.5 linear-attention layers.
//!
//! Stages, in the order their layers run:
//! - [`front`]: the pass's phase, the pc (`pc_base` memory + the token's slot), the ROM
//!   fetch and the instruction's bits; boot staging for ROM rows and words;
//! - [`decode`]: classes, immediates, register numbers, the millicode window;
//! - [`regs`]: the register file (written from the consumed token, read for rs1/rs2);
//! - [`alu`]: adders, comparisons, logic, shifts, the multiplier, jump targets;
//! - [`mem`]: RAM banks, loads, stores;
//! - [`retire`]: the value, its classification, the latch and the next token.
//!
//! [`tokens`] documents the token format; [`host`] boots programs and runs them.

// Circuit wiring indexes nibbles, digits and bits by position; loops over index ranges
// say that most plainly.
#![allow(clippy::needless_range_loop)]

pub mod alu;
pub mod decode;
pub mod front;
pub mod host;
pub mod mem;
pub mod millicode;
pub mod regs;
pub mod retire;
pub mod tokens;
pub mod wires;

use inband_circuits::{Circuit, Target};

/// Where the architectural state lives (memory indices of the circuit).
#[derive(Debug, Clone)]
pub struct StateMap {
    /// The rs1 port's register memories (every port holds the same rows).
    pub regs: regs::PortMemories,
    /// RAM banks in bank order.
    pub ram: Vec<usize>,
}

/// Why the chip does not fit a base model.
#[derive(Debug, thiserror::Error)]
#[error("the RV32IM chip needs 16 GDN key heads of dimension 128 per layer (every Qwen3.5 size has them); this model has {key_heads} of dimension {rows}×{entries}")]
pub struct Unfit {
    pub key_heads: usize,
    pub rows: usize,
    pub entries: usize,
}

/// Builds the chip for `target`.
pub fn circuit(target: Target) -> Result<(Circuit, StateMap), Unfit> {
    if (target.key_heads, target.rows_per_head, target.entries_per_value_head) != (16, 128, 128) {
        return Err(Unfit {
            key_heads: target.key_heads,
            rows: target.rows_per_head,
            entries: target.entries_per_value_head,
        });
    }
    let mut c = Circuit::new("rv32im", target, tokens::spec());
    let t = wires::Tok::new(&c);
    let f = front::build(&mut c, &t);
    let d = decode::build(&mut c, &f);
    let (rs1, rs2, regs) = regs::build(&mut c, &t, &f, &d.rd, &d.rs1, &d.rs2);
    let x = alu::build(&mut c, &f, &d, &rs1, &rs2);
    let m = mem::build(&mut c, &t, &f, &d.class, &rs1, &rs2, &d.imm, &x.address);
    retire::build(&mut c, &t, &f, &d, &rs2, &x, &m);
    Ok((c, StateMap { regs, ram: m.banks }))
}

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

/// Builds the chip for `target` (16 GDN heads of 128 × 128, as every Qwen3.5 size has).
pub fn circuit(target: Target) -> (Circuit, StateMap) {
    assert_eq!(
        (target.key_heads, target.rows_per_head, target.entries_per_value_head),
        (16, 128, 128),
        "the RV32IM chip needs 16 GDN key heads of dimension 128"
    );
    let mut c = Circuit::new("rv32im", target, tokens::spec());
    let t = wires::Tok::new(&c);
    let f = front::build(&mut c, &t);
    let d = decode::build(&mut c, &f);
    let (rs1, rs2, regs) = regs::build(&mut c, &t, &f, &d.rd, &d.rs1, &d.rs2);
    let x = alu::build(&mut c, &f, &d, &rs1, &rs2);
    let m = mem::build(&mut c, &t, &f, &d.class, &rs1, &rs2, &d.imm, &x.address);
    retire::build(&mut c, &t, &f, &d, &rs2, &x, &m);
    (c, StateMap { regs, ram: m.banks })
}

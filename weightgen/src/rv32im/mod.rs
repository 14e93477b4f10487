//! The RV32IM chip: a CPU compiled into stock Qwen3.5 linear-attention layers.
//!
//! Stages, in the order their layers run:
//! - [`front`]: the pass's phase, the pc (`pc_base` memory + the token's slot), the ROM
//!   fetch and the instruction's bits; boot staging for ROM rows and words;
//! - [`decode`]: classes, immediates, register numbers, the millicode window;
//! - [`regs`]: the register file (written from the consumed token, read for rs1/rs2);
//! - [`alu`]: adders, comparisons, logic, shifts, the multiplier, jump targets, and
//!   [`digit`], the millicode's radix-16 division step;
//! - [`mem`]: RAM banks, loads, stores;
//! - [`retire`]: the value, its classification, the latch and the next token.
//!
//! The token format ([`tokens`]), where the state lives for a host and the host
//! protocol are the chip's interface (`inband_chip::rv32im`); [`Rv32Chip`] is the
//! compiled chip with the map a host needs.

// Circuit wiring indexes nibbles, digits and bits by position; loops over index ranges
// say that most plainly.
#![allow(clippy::needless_range_loop)]

pub mod alu;
pub mod decode;
pub mod digit;
pub mod front;
pub mod mem;
pub mod millicode;
pub mod regs;
pub mod retire;
pub mod wires;

pub use inband_chip::rv32im::tokens;

use inband_chip::rv32im::Rv32Map;
use inband_chip::{ChipModel, MathPath};
use inband_circuits::contract::{LEVEL_UNIT, VALUE_ON};
use inband_circuits::{Circuit, Target};
use inband_qwen35::TextConfig;
use thiserror::Error;

use crate::emit::{compile, target_of, Chip, CompileError};

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
    let r = regs::build(&mut c, &t, &f, [&d.rd, &d.rs1, &d.rs2], &mem::addressing(&t, &d.class));
    let x = alu::build(&mut c, &f, &d, &r.rs1, &r.rs2);
    let m = mem::build(&mut c, &t, &f, &d.class, &r.rs1_address, &r.rs2, &d.mem_imm, &x.address);
    retire::build(&mut c, &t, &f, &d, &r, &x, &m);
    Ok((
        c,
        StateMap {
            regs: r.memories,
            ram: m.banks,
        },
    ))
}

/// A compiled RV32IM chip and where its state lives.
pub struct Rv32Chip {
    pub chip: Chip,
    pub map: StateMap,
}

#[derive(Debug, Error)]
pub enum BuildChipError {
    #[error(transparent)]
    Unfit(#[from] Unfit),
    #[error(transparent)]
    Compile(#[from] CompileError),
}

impl Rv32Chip {
    /// Builds and compiles the chip for a base model config.
    pub fn build(base: &TextConfig) -> Result<Self, BuildChipError> {
        let (c, map) = circuit(target_of(base))?;
        Ok(Self {
            chip: compile(&c, base)?,
            map,
        })
    }

    /// What a host needs to drive this chip (memory indices are the circuit's, which
    /// is also the order of the manifest's memories).
    pub fn host_map(&self) -> Rv32Map {
        Rv32Map {
            regs_low: self.map.regs.low,
            regs_cls: self.map.regs.cls,
            regs_up34: self.map.regs.up34,
            regs_up567: self.map.regs.up567,
            ram_banks: self.map.ram.clone(),
            millicode_rows: millicode::WORDS.len().div_ceil(tokens::ROW_SLOTS),
            bit_on: VALUE_ON as f32,
            level_unit: LEVEL_UNIT as f32,
        }
    }

    /// The chip as a host drives it, on the CPU `path`, without writing a pack.
    pub fn model(&self, path: MathPath) -> anyhow::Result<ChipModel> {
        self.chip.model(Some(self.host_map()), path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no signal reaching it, every neuron's gate is shut (stronger than none awake at
    /// rest): a neuron awake at rest writes its outputs on every pass, and the GPU kernel
    /// then computes every neuron of its layer on every pass (x0's register rows and the
    /// adder's signed comparison had such neurons, in layers 2 and 4).
    #[test]
    fn no_neuron_fires_at_rest() {
        let base = inband_qwen35::presets::Shape::Qwen0_8b.config();
        let (c, _) = circuit(target_of(&base)).unwrap();
        let open: Vec<String> = c
            .blocks
            .iter()
            .flat_map(|b| {
                let open = b.neurons.iter().filter(|n| !n.is_constant() && n.open_at_rest());
                open.map(|_| b.name.clone())
            })
            .collect();
        assert!(open.is_empty(), "gates open at rest in {open:?}");
    }
}

//! # inband-golden
//!
//! The golden RV32IM reference, our own, written from the ISA specification and
//! independent of everything the chip uses: [`decode`] (instruction formats and ALU
//! semantics) and [`machine`] (architectural state, the shared memory map, traps and
//! the instruction budget). [`qemu`] runs `qemu-riscv32` as an independent oracle.

pub mod decode;
pub mod machine;
pub mod qemu;

pub use machine::{ArchState, Environment, Machine, RunEnd, Step, Trap, TrapCause};

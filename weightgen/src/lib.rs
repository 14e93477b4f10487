//! # inband-weightgen
//!
//! The circuit compiler: schedules a circuit (inband-circuits) into the fewest stock
//! Qwen3.5 decoder layers and emits their weights.
//! - [`schedule`]: which layer each MLP block and GDN memory goes to;
//! - [`layout`]: the chip's residual dimensions and the anchors that pin the norm;
//! - [`emit`]: layer weights, chip-token embedding rows, token choice;
//! - [`pack`]: the chip pack on disk (safetensors, manifest with hashes, report);
//! - [`report`]: the readable allocation report;
//! - [`runner`]: stepping a compiled chip with the project's layer math;
//! - [`toy`]: an 8-bit accumulator machine compiled end to end, with its reference model.

pub mod emit;
pub mod layout;
pub mod pack;
pub mod report;
pub mod runner;
pub mod rv32im;
pub mod schedule;
pub mod toy;

pub use emit::{compile, target_of, Chip, CompileError};
pub use runner::{ChipRunner, MathPath};

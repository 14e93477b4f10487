//! # inband-weightgen
//!
//! The circuit compiler: schedules a circuit (inband-circuits) into the fewest stock
//! Qwen3.5 decoder layers and emits their weights.
//! - [`schedule`]: which layer each MLP block and GDN memory goes to;
//! - [`layout`]: the chip's residual dimensions and the anchors that pin the norm;
//! - [`emit`]: layer weights, chip-token embedding rows, token choice;
//! - [`pack`]: writing the chip pack (safetensors, manifest with hashes, report) in the
//!   format `inband_chip::pack` defines;
//! - [`report`]: the readable allocation report;
//! - [`dependencies`]: which layer's heads and MLP wait for which (in the report);
//! - [`toy`]: an 8-bit accumulator machine compiled end to end, with its reference model.

pub mod dependencies;
pub mod emit;
pub mod layout;
pub mod pack;
pub mod report;
pub mod rv32im;
pub mod schedule;
pub mod toy;

pub use emit::{compile, target_of, Chip, CompileError};

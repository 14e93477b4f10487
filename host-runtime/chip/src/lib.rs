//! # inband-chip
//!
//! The chip's interface: what the compiler writes and the runtime reads, so that the
//! runtime never depends on the compiler. The data path runs one way: `weightgen`
//! writes a pack through [`pack`], `weight-surgery` splices it (the layout of a
//! spliced checkpoint is [`spliced`]), and `inband` opens the checkpoint through
//! [`model`] and drives it through [`engine`] and [`rv32im`].
//!
//! - [`token`]: the chip token vocabulary (kinds of small one-hot fields);
//! - [`pack`]: the chip pack format and its manifest (token map, residual layout,
//!   where every memory lives), and the pack reader;
//! - [`spliced`]: a spliced checkpoint's `inband` config section and tensor geometry;
//! - [`tensor_files`]: the one validating safetensors reader of every tool;
//! - [`staging`]: writing an output folder atomically (what every writer of packs and
//!   checkpoints uses), with nothing left behind by an interrupted run;
//! - [`base_view`]: a spliced checkpoint's base tensors, read back at the base width;
//! - [`model`]: a chip as a host drives it (token map, residual, token choice, layers
//!   read straight from the checkpoint's or the pack's tensors in sparse form);
//! - [`engine`]: the [`engine::PassEngine`] and [`engine::BatchEngine`] traits and the CPU engine;
//! - [`rv32im`]: the RV32IM token format and host protocol (boot, run, read back);
//! - [`cli`]: what the three command lines (`weightgen`, `weight-surgery`, `inband`) print
//!   the same way.

pub mod base_view;
pub mod cli;
pub mod engine;
pub mod model;
pub mod pack;
pub mod rv32im;
pub mod spliced;
pub mod staging;
pub mod tensor_files;
pub mod token;

pub use engine::{BatchEngine, ChipRunner, EachOnItsOwn, MathPath, MemoryRow, PassEngine, SlotWork};
pub use model::{ChipLayers, ChipModel, ChipSpec};
pub use token::{ChipToken, FieldDef, KindDef, TokenSpec};

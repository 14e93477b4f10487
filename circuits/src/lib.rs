//! # inband-circuits
//!
//! Owns the exact neural circuit IR and its primitives:
//! - [`expr`]: signals (named residual dimensions) and affine expressions over them;
//! - [`token`]: the chip token vocabulary (kinds of small one-hot fields), defined by
//!   the chip's interface crate (`inband-chip`) that the runtime reads packs through;
//! - [`circuit`]: blocks of SwiGLU neurons, GDN memories with their reads and writes,
//!   and the outputs that choose the next token;
//! - [`primitives`]: exact gates, select, compare, add/sub with carry on 32-bit words,
//!   one-hot decode/encode and shifts, each stating its numeric contract;
//! - [`contract`]: how nominal values map onto the layer math, and why that is exact.
//!
//! The compiler that schedules a circuit into Qwen3.5 layers is `inband-weightgen`.

pub mod circuit;
pub mod contract;
pub mod expr;
pub mod primitives;
pub use inband_chip::token;

pub use circuit::{Address, Block, Circuit, Memory, Neuron, Output, Read, ReadOutput, Source, Target, Write};
pub use expr::{Delayed, Expr, Range, Signal};
pub use token::{ChipToken, FieldDef, KindDef, TokenSpec};

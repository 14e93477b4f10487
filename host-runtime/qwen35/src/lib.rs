//! # inband-qwen35
//!
//! The project's one implementation of the Qwen3.5 decoder-layer math, traced from the
//! reference implementation (see `shared/reference/qwen35-layer-math.md`). The compiler's
//! own checks, the runtime and the tests all use it.
//!
//! - [`config`]: the text configuration read from a checkpoint's config.json;
//! - [`checkpoint`]: config.json and (sharded) safetensors, memory-mapped;
//! - [`model`]: a whole text model on the dense path;
//! - [`presets`]: the published shapes (0.8b, 2b, 4b, 9b) and a tiny test shape;
//! - [`weights`]: decoder-layer tensors in host memory, named as in a checkpoint;
//! - [`scalar`]: the elementwise functions (silu, sigmoid, softplus, norms) in f32;
//! - [`dense`]: every layer type on candle tensors (CPU; CUDA with candle's feature);
//! - [`sparse`]: GDN layers on CSR matrices, skipping what provably contributes nothing;
//! - [`active`]: their activation-sparse products (only the weights whose input is nonzero);
//! - [`index_set`]: indices each listed once, cleared at the cost of what was inserted.

pub mod active;
pub mod checkpoint;
pub mod config;
pub mod dense;
pub mod index_set;
pub mod model;
pub mod presets;
pub mod scalar;
pub mod sparse;
pub mod weights;

pub use config::{Architecture, LayerType, TextConfig};
pub use weights::{Array, DecoderLayer, TensorSource};

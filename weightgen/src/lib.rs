//! # inband-weightgen
//!
//! Owns the CPU described with circuits, the scheduler that places a circuit graph into
//! the fewest stock Qwen3.5 decoder layers, and the chip pack it emits (layer tensors,
//! chip-token embedding rows, manifest and allocation report).

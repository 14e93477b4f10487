//! # inband-circuits
//!
//! Owns the exact neural circuit primitives (named residual slots, constants, boolean
//! gates, compare, select, add with carry, one-hot decode, shifts, GDN RAM ports) and
//! the residual-stream allocator that names every dimension a circuit uses.

//! # inband-model-surgery
//!
//! Owns checkpoint surgery: synthetic Qwen3.5 checkpoints with the published layout,
//! splicing a chip pack in front of a checkpoint's layers (widened residual, padded
//! tensors, compensated norms, extended vocabulary), inspecting, verifying and
//! stripping it back out bit for bit.

//! # inband-host-runtime
//!
//! The runtime side of inband: the project's one implementation of the Qwen3.5
//! decoder-layer math (CPU now, CUDA behind a feature), VM mode that boots a program
//! into the chip layers and steps it, and the `inband` command line.
//!
//! - [`program`]: turning what the user names (C source or ELF) into a bootable image;
//! - [`status`]: the process exit statuses `inband` uses, in one place;
//! - [`vm`]: VM mode: a program booted into the RV32IM chip layers and run there;
//! - [`spliced`]: a spliced checkpoint opened for VM mode;
//! - [`text`]: text mode: Qwen's own layers, the checkpoint's tokenizer, generation;
//! - [`inband`]: in-band execution: code regions in generated text run in the chip;
//! - [`session`]: a text session (`generate`, `chat`) with its chip for in-band execution;
//! - [`batch`]: many programs in one chip at once (`run --batch`, `bench --batch`);
//! - [`bench`]: `inband bench`, speed figures per program, checked against golden;
//! - `gpu` (feature `cuda`): the chip layers as one CUDA kernel; Qwen's own layers for
//!   text mode as small kernels.

pub mod batch;
pub mod bench;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod inband;
pub mod program;
pub mod progress;
pub mod session;
pub mod spliced;
pub mod status;
pub mod text;
pub mod vm;

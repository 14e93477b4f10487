#!/usr/bin/env bash
# The project's test command: prerequisites, formatting, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo clippy --release --features cuda -p inband-host-runtime -p inband-tests --all-targets -- -D warnings
cargo test --release --workspace
# The GPU's sparse chip kernel, compiled for the CPU, against the CPU engine (no GPU needed).
cargo test --release --features cuda -p inband-tests --test kernel_on_cpu

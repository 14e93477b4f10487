#!/usr/bin/env bash
# The project's test command: prerequisites, formatting, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo clippy --release --features cuda -p inband-host-runtime -p inband-tests --all-targets -- -D warnings
cargo test --release --workspace
# The GPU code's own unit tests (table layouts, shared-memory plans, error codes; no GPU
# needed), and the sparse chip kernel compiled for the CPU, against the CPU engine.
cargo test --release --features cuda -p inband-host-runtime --lib
cargo test --release --features cuda -p inband-tests --test kernel_on_cpu

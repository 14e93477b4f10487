#!/usr/bin/env bash
# The project's test command: prerequisites, formatting, lints, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo test --release --workspace

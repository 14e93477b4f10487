#!/usr/bin/env bash
# Builds the CUDA-enabled binaries into .gpu/bin (stripped, small enough to carry to the
# GPU machine) and the example programs into .gpu/elf (the GPU machine has no RISC-V
# compiler). No CUDA toolkit is needed here: the kernels are compiled at run time with
# NVRTC and the CUDA libraries are loaded dynamically.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features cuda -p inband-host-runtime --bin inband
cargo build --release -p inband-weightgen --bin weightgen -p inband-model-surgery --bin weight-surgery
mkdir -p .gpu/bin .gpu/elf
for b in inband weightgen weight-surgery; do
    strip -o ".gpu/bin/$b" "target/release/$b"
done
for p in firmware/examples/*.c firmware/isa/*.S; do
    name=$(basename "$p"); name=${name%.*}
    .gpu/bin/inband build "$p" -o ".gpu/elf/$name.elf"
done
# The CPU engine's chip token stream for hello, which the GPU machine's runs must reproduce.
mkdir -p .gpu/trace
target/release/inband run --engine chip --trace .gpu/trace/hello.trace firmware/examples/hello.c >/dev/null
du -sh .gpu

#!/usr/bin/env bash
# Installs what inband needs beyond Rust, idempotently:
#   gcc-riscv64-unknown-elf, binutils-riscv64-unknown-elf  (C -> RV32IM ELF, with libgcc)
#   qemu-user                                              (qemu-riscv32: the independent oracle)
#   picolibc-riscv64-unknown-elf                           (the C library of `inband build --libc picolibc` and of in-band expressions)
#   g++                                                    (the GPU's chip kernel compiled for the CPU: tests/tests/kernel_on_cpu.rs)
set -euo pipefail

need=()
command -v riscv64-unknown-elf-gcc >/dev/null 2>&1 || need+=(gcc-riscv64-unknown-elf binutils-riscv64-unknown-elf)
command -v qemu-riscv32 >/dev/null 2>&1 || need+=(qemu-user)
[ -f /usr/lib/picolibc/riscv64-unknown-elf/picolibc.specs ] || need+=(picolibc-riscv64-unknown-elf)
command -v mkfifo >/dev/null 2>&1 || need+=(coreutils)
command -v c++ >/dev/null 2>&1 || need+=(g++)

if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]}" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

riscv64-unknown-elf-gcc --version | head -n1 >&2
qemu-riscv32 --version | head -n1 >&2

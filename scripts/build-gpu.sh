#!/usr/bin/env bash
# Builds the CUDA-enabled binaries into .gpu/bin (stripped, small enough to carry to the
# GPU machine), the example programs into .gpu/elf, and a minimal relocatable copy of
# the RISC-V compiler into .gpu/toolchain (the GPU machine has none; in-band execution
# compiles the code a generation writes). No CUDA toolkit is needed here: the kernels
# are compiled at run time with NVRTC and the CUDA libraries are loaded dynamically.
#
# On the GPU machine: INBAND_TOOLCHAIN=$PWD/.gpu/toolchain LD_LIBRARY_PATH=$PWD/.gpu/toolchain/so
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --features cuda -p inband-host-runtime --bin inband
cargo build --release -p inband-weightgen --bin weightgen -p inband-model-surgery --bin weight-surgery
# The test that Qwen's caches stay untouched by in-band execution, built with CUDA so the
# GPU machine runs its regions there (INBAND_VM_DEVICE=cuda).
exec_test=$(cargo test --release --features cuda -p inband-tests --test inband_exec --no-run --message-format=json |
    sed -n 's/.*"executable":"\([^"]*inband_exec[^"]*\)".*/\1/p' | tail -1)
mkdir -p .gpu/bin .gpu/elf
for b in inband weightgen weight-surgery; do
    strip -o ".gpu/bin/$b" "target/release/$b"
done
# Carried compressed (the carry limit); gpu-checks.sh unpacks it.
strip -o .gpu/bin/inband_exec "$exec_test"
gzip -nf .gpu/bin/inband_exec
# (and the programs that end otherwise: a mixed batch's traps and exhausted budget)
for p in firmware/examples/*.c firmware/isa/*.S tests/kernels/*.c tests/division/*.c tests/speed/sieve.c tests/speed/sieve10m.c tests/ram/whole_ram.c tests/programs/exit_code.c \
    tests/programs/runaway.c tests/programs/illegal_instruction.S tests/programs/misaligned_load.S; do
    name=$(basename "$p"); name=${name%.*}
    .gpu/bin/inband build "$p" -o ".gpu/elf/$name.elf"
done
# The compiler: gcc's driver, cc1, collect2, its own headers and rv32im libgcc, as and
# ld, and the shared libraries they need, laid out as gcc expects relative to itself.
gcc=$(command -v riscv64-unknown-elf-gcc)
lib=$(dirname "$("$gcc" -print-libgcc-file-name)")
version=$(basename "$lib")
T=.gpu/toolchain
rm -rf "$T"
mkdir -p "$T/bin" "$T/lib/gcc/riscv64-unknown-elf/$version/rv32im/ilp32" "$T/lib/riscv64-unknown-elf/bin" "$T/so"
cp "$gcc" "$T/bin/"
cp "$lib/cc1" "$lib/collect2" "$lib/liblto_plugin.so" "$T/lib/gcc/riscv64-unknown-elf/$version/"
cp -r "$lib/include" "$lib/include-fixed" "$T/lib/gcc/riscv64-unknown-elf/$version/"
cp "$lib/rv32im/ilp32/libgcc.a" "$T/lib/gcc/riscv64-unknown-elf/$version/rv32im/ilp32/"
for tool in as ld; do cp "$("$gcc" -print-prog-name=$tool)" "$T/lib/riscv64-unknown-elf/bin/"; done
for b in "$T/lib/gcc/riscv64-unknown-elf/$version/cc1" "$T/lib/riscv64-unknown-elf/bin/as" "$T/lib/riscv64-unknown-elf/bin/ld"; do
    ldd "$b" | awk '/=> \// && $3 !~ /\/lib(c|m)\.so/ {print $3}' | xargs -r -I{} cp -L {} "$T/so/"
done
# picolibc, which in-band expressions link: its rv32im/ilp32 libc (debug information
# stripped) and libm stub, its headers, and the specs beside cc1; carried compressed (the
# carry limit) and unpacked by scripts/gpu-checks.sh into $T/lib/picolibc, where the
# toolchain looks for it (--picolibc-prefix).
P=/usr/lib/picolibc/riscv64-unknown-elf
stage=$(mktemp -d)
mkdir -p "$stage/lib/picolibc/riscv64-unknown-elf/lib/rv32im/ilp32"
cp -r "$P/include" "$stage/lib/picolibc/riscv64-unknown-elf/"
riscv64-unknown-elf-strip -g -o "$stage/lib/picolibc/riscv64-unknown-elf/lib/rv32im/ilp32/libc.a" "$P/lib/rv32im/ilp32/libc.a"
cp "$P/lib/rv32im/ilp32/libm.a" "$stage/lib/picolibc/riscv64-unknown-elf/lib/rv32im/ilp32/"
tar czf "$T/picolibc.tar.gz" -C "$stage" lib
rm -rf "$stage"
cp "$("$gcc" -print-file-name=picolibc.specs)" "$T/lib/gcc/riscv64-unknown-elf/$version/"
mkdir -p .gpu/trace
# A 0.8b chip pack (the GPU machine's checkpoint is spliced from the same weights).
pack=target/gpu-pack-0.8b
stamp=$(sha256sum target/release/weightgen | cut -d' ' -f1)
if [ "$(cat "$pack.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$pack" "$pack.stamp"
    target/release/weightgen --shape 0.8b --out "$pack"
    echo "$stamp" >"$pack.stamp"
fi
# The CPU engine's chip token streams, which the GPU kernels must reproduce (made again
# when the pack, the program or inband changed): booted by prefill (the whole stream,
# which stock transformers also step) and by loading state (the passes after it).
# Kept gzipped: the carry limit is 64 MiB.
for p in hello strings int64; do
    for boot in prefill load; do
        t=.gpu/trace/$p.$boot.trace
        if [ ! -s "$t.gz" ] || [ "$t.gz" -ot "$pack.stamp" ] || [ "$t.gz" -ot ".gpu/elf/$p.elf" ] ||
            [ "$t.gz" -ot target/release/inband ]; then
            target/release/inband run --engine chip --chip "$pack" --boot $boot --trace "$t" \
                ".gpu/elf/$p.elf" >/dev/null
            gzip -nf "$t"
        fi
    done
done
rm -f .gpu/trace/*.trace
du -sh .gpu

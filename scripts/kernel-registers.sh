#!/usr/bin/env bash
# Compiles the chip kernels here, as the runtime's NVRTC does on the GPU machine (the
# shared header pasted in, no fused multiply-adds, no flushing, IEEE division and square
# root, sm_90), and prints ptxas's registers and spills for each block shape: a variant's
# register pressure is known before a GPU run is spent on it (at 1,024 threads a thread
# holds 64 registers, and spills in a value head's chain cost the whole pass). With each,
# the code's size and how many shared-memory loads address by a uniform register (the
# layer's tables: a barrier whose condition the compiler cannot see is uniform moves them
# to ordinary registers, and a pass of the sparse kernel ran 2 % slower for it).
#
#   scripts/kernel-registers.sh [KERNEL.cu] [NVCC OPTION...]
#
# KERNEL.cu defaults to the sparse and reference kernels; options go to nvcc (-DPROFILE,
# -DTHREADS is set per shape). Each build is scripts/kernel-cubin.sh's (the first run
# fetches CUDA 13.0's compiler and a disassembler from PyPI into target/).
set -euo pipefail
cd "$(dirname "$0")/.."
DISASM=target/cuda-nvdisasm/nvidia/cu13/bin/nvdisasm
kernels=(host-runtime/src/gpu/chip_sparse.cu host-runtime/src/gpu/chip_reference.cu)
if [ $# -gt 0 ] && [[ "$1" == *.cu ]]; then
    kernels=("$1")
    shift
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for k in "${kernels[@]}"; do
    [ -f "$k" ] || { echo "no such kernel: $k" >&2; exit 1; }
    for threads in 512 768 1024; do
        printf '%-40s %4s threads: ' "$k" "$threads"
        scripts/kernel-cubin.sh "$k" "$work/k.cubin" --ptxas-options=-v -DTHREADS="$threads" "$@" 2>&1 |
            awk '/error/ { print; bad = 1 }
                 /Function properties for/ { entry = /chip_passes$/ }
                 entry && /bytes spill stores/ { spill = $0 }
                 entry && /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART, RLENGTH) }
                 END { if (!bad) { sub(/^ +/, "", spill); printf "%s, %s", regs, spill } }'
        # The disassembly's instructions (16 bytes each) and uniform-addressed shared loads.
        "$DISASM" -c "$work/k.cubin" >"$work/k.sass" 2>/dev/null || : >"$work/k.sass"
        printf '; %d KB of code, %d shared loads by a uniform register\n' \
            $(($(grep -cE '^ +/\*[0-9a-f]+\*/' "$work/k.sass") * 16 / 1024)) "$(grep -cE 'LDS[^;]*\[UR' "$work/k.sass")"
    done
done

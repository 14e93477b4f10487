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
# -DTHREADS is set per shape). The first run fetches CUDA 13.0's compiler from PyPI
# (the version the GPU machine's driver accepts) into target/cuda-nvcc and a disassembler
# into target/cuda-nvdisasm; nothing else uses them.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC_DIR=target/cuda-nvcc
C=$NVCC_DIR/nvidia/cu13
if [ ! -x "$C/bin/nvcc" ]; then
    echo "fetching CUDA 13.0's nvcc from PyPI into $NVCC_DIR ..."
    wheels=$(mktemp -d)
    PIP_ROOT_USER_ACTION=ignore python3 -m pip download -q --no-deps -d "$wheels" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 \
        nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-deps --no-index --target "$NVCC_DIR" "$wheels"/*.whl
    rm -rf "$wheels"
fi
# (Its own folder: pip does not add to a --target folder that exists.)
DISASM=target/cuda-nvdisasm/nvidia/cu13/bin/nvdisasm
if [ ! -x "$DISASM" ]; then
    echo "fetching nvdisasm from PyPI into target/cuda-nvdisasm ..."
    wheels=$(mktemp -d)
    PIP_ROOT_USER_ACTION=ignore python3 -m pip download -q --no-deps -d "$wheels" nvidia-cuda-nvdisasm==13.2.78
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-deps --no-index --target target/cuda-nvdisasm "$wheels"/*.whl
    rm -rf "$wheels"
fi
kernels=(host-runtime/src/gpu/chip_sparse.cu host-runtime/src/gpu/chip_reference.cu)
if [ $# -gt 0 ] && [[ "$1" == *.cu ]]; then
    kernels=("$1")
    shift
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for k in "${kernels[@]}"; do
    [ -f "$k" ] || { echo "no such kernel: $k" >&2; exit 1; }
    python3 - "$k" host-runtime/src/gpu/chip_common.cuh > "$work/k.cu" <<'PY'
import sys
print(open(sys.argv[1]).read().replace('#include "chip_common.cuh"', open(sys.argv[2]).read()))
PY
    for threads in 512 768 1024; do
        printf '%-40s %4s threads: ' "$k" "$threads"
        "$C/bin/nvcc" -arch=sm_90 -cubin -o "$work/k.cubin" --fmad=false -ftz=false -prec-div=true -prec-sqrt=true \
            --ptxas-options=-v -DTHREADS="$threads" "$@" "$work/k.cu" 2>&1 |
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

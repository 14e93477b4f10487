#!/usr/bin/env bash
# Compiles a chip kernel here as the runtime's NVRTC does on the GPU machine: the shared
# header pasted in, no fused multiply-adds, no flushing, IEEE division and square root,
# sm_90 (host-runtime/src/gpu/mod.rs's `compile`). For scripts/kernel-registers.sh and
# scripts/ncu-lines.py; ptxas's and nvcc's messages on standard error.
#
#   scripts/kernel-cubin.sh KERNEL.cu OUT.cubin [NVCC OPTION...]   (e.g. -DTHREADS=768 -lineinfo)
#
# The first run fetches CUDA 13.0's compiler from PyPI (the version the GPU machine's driver
# accepts) into target/cuda-nvcc and a disassembler into target/cuda-nvdisasm; nothing else
# uses them.
set -euo pipefail
cd "$(dirname "$0")/.."
C=target/cuda-nvcc/nvidia/cu13
if [ ! -x "$C/bin/nvcc" ]; then
    echo "fetching CUDA 13.0's nvcc from PyPI into target/cuda-nvcc ..." >&2
    wheels=$(mktemp -d)
    PIP_ROOT_USER_ACTION=ignore python3 -m pip download -q --no-deps -d "$wheels" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 \
        nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-deps --no-index --target target/cuda-nvcc "$wheels"/*.whl
    rm -rf "$wheels"
fi
# (Its own folder: pip does not add to a --target folder that exists.)
if [ ! -x target/cuda-nvdisasm/nvidia/cu13/bin/nvdisasm ]; then
    echo "fetching nvdisasm from PyPI into target/cuda-nvdisasm ..." >&2
    wheels=$(mktemp -d)
    PIP_ROOT_USER_ACTION=ignore python3 -m pip download -q --no-deps -d "$wheels" nvidia-cuda-nvdisasm==13.2.78
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-deps --no-index --target target/cuda-nvdisasm "$wheels"/*.whl
    rm -rf "$wheels"
fi
[ $# -ge 2 ] || { echo "usage: scripts/kernel-cubin.sh KERNEL.cu OUT.cubin [NVCC OPTION...]" >&2; exit 2; }
kernel=$1 out=$2
shift 2
[ -f "$kernel" ] || { echo "no such kernel: $kernel" >&2; exit 1; }
# The pasted source beside the cubin (OUT.cu): nvcc's line table refers to it.
python3 - "$kernel" host-runtime/src/gpu/chip_common.cuh > "${out%.cubin}.cu" <<'PY'
import sys
print(open(sys.argv[1]).read().replace('#include "chip_common.cuh"', open(sys.argv[2]).read()))
PY
"$C/bin/nvcc" -arch=sm_90 -cubin -o "$out" --fmad=false -ftz=false -prec-div=true -prec-sqrt=true "$@" "${out%.cubin}.cu"

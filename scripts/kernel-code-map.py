#!/usr/bin/env python3
"""Where a chip kernel's code goes: its SASS by the source function each instruction came from.

    scripts/kernel-code-map.py KERNEL.cu [--threads N] [--top N] [-- NVCC OPTION...]

The kernel runs more code a pass than an SM's instruction caches hold near its warps: ncu
sampled the MLP phase's warps that were not at its barrier waiting for an instruction fetch
41 % of the time, and a change that only made 6 KB of rarely run code smaller made the pass
faster (BENCHMARKS.md, the fiftieth session). So a variant's size is worth knowing by part
before a GPU run is spent on it. This compiles KERNEL.cu here as the runtime's NVRTC does
(scripts/kernel-cubin.sh, THREADS at N, default 768, with -lineinfo and the options after
--), disassembles it (nvdisasm) and gives each instruction to the function whose source line
it carries: an inlined helper's code counts as the helper's, wherever it was inlined, and
code from CUDA's own headers (intrinsics, expf, the IEEE division's slow path) as "CUDA
headers". Printed: each function's instructions and KB (16 bytes an instruction), largest
first, then the total.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISASM = os.path.join(ROOT, "target/cuda-nvdisasm/nvidia/cu13/bin/nvdisasm")
DEFINITION = re.compile(r'^(?:template <[^>]*>\s*)?(?:extern "C"\s+)?__(?:device|global)__')
CALLED = re.compile(r"(\w+)\s*\(")
NOT_A_NAME = {"__launch_bounds__", "__align__"}
LINE_MARK = re.compile(r'//## File "([^"]+)", line (\d+)')
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/")


def function_starts(source_lines):
    """(line, name) of every __device__ or __global__ definition, in order."""
    starts = []
    for number, line in enumerate(source_lines, 1):
        if DEFINITION.match(line):
            names = [n for n in CALLED.findall(line) if n not in NOT_A_NAME]
            if names:
                starts.append((number, names[0]))
    return starts


def function_at(starts, line):
    """The function whose definition is the last one at or before `line`."""
    name = "(before the first function)"
    for number, candidate in starts:
        if number > line:
            break
        name = candidate
    return name


def compile_kernel(kernel, threads, options, work):
    # kernel-cubin.sh writes the pasted source beside its output, so the output lives in
    # a folder of its own (not beside the kernel, which it would overwrite).
    cubin = os.path.join(work, "map.cubin")
    subprocess.run([os.path.join(ROOT, "scripts/kernel-cubin.sh"), kernel, cubin, f"-DTHREADS={threads}",
                    "-lineinfo", *options], check=True, stdout=subprocess.DEVNULL)
    sass = subprocess.run([DISASM, "-c", "-g", cubin], check=True, capture_output=True, text=True).stdout
    with open(os.path.join(work, "map.cu")) as pasted:
        return pasted.read().split("\n"), sass


def code_by_function(source_lines, sass, pasted_name):
    starts = function_starts(source_lines)
    counts, where = Counter(), None
    for line in sass.split("\n"):
        mark = LINE_MARK.search(line)
        if mark:
            where = int(mark.group(2)) if os.path.basename(mark.group(1)) == pasted_name else None
            continue
        if INSTRUCTION.match(line):
            counts["CUDA headers" if where is None else function_at(starts, where)] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(usage="%(prog)s KERNEL.cu [--threads N] [--top N] [-- NVCC OPTION...]",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", help="the kernel's source (host-runtime/src/gpu/chip_sparse.cu or a variant)")
    parser.add_argument("--threads", type=int, default=768, help="the block's threads (default 768)")
    parser.add_argument("--top", type=int, default=25, help="how many functions to print (default 25)")
    argv = sys.argv[1:]
    options = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not os.path.isfile(args.kernel):
        sys.exit(f"no such kernel: {args.kernel}")
    with tempfile.TemporaryDirectory() as work:
        source_lines, sass = compile_kernel(os.path.abspath(args.kernel), args.threads, options, work)
    counts = code_by_function(source_lines, sass, "map.cu")
    total = sum(counts.values())
    print(f"{args.kernel} at {args.threads} threads: {total} instructions, {total * 16 / 1024:.1f} KB")
    for name, n in counts.most_common(args.top):
        print(f"{n:7d} {n * 16 / 1024:6.1f} KB  {100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a chip kernel's code goes: its SASS by the source function each instruction came from.

    scripts/kernel-code-map.py KERNEL.cu [--threads N] [--top N] [-- NVCC OPTION...]

The kernel runs more code a pass than an SM's instruction caches hold near its warps: ncu
sampled the MLP phase's warps that were not at its barrier waiting for an instruction fetch
41 % of the time. Yet taking 5-14 KB of code off by rolled loops made no pass faster, and a
rolled loop on a head's chain made it slower (BENCHMARKS.md, the fiftieth and fifty-first
sessions): a variant's size by part is worth knowing before a GPU run is spent on it,
beside what it adds to the instructions a pass runs. This compiles KERNEL.cu here as the
runtime's NVRTC does (scripts/ncu-lines.py's build: kernel-cubin.sh, THREADS at N, default
768, -lineinfo and the options after --), disassembles it (nvdisasm) and gives each
instruction to the function whose source line it carries: an inlined helper's code counts
as the helper's, wherever it was inlined, and code from CUDA's own headers (intrinsics,
expf, the IEEE division's slow path) as "CUDA headers". Printed: the total, then each
function's instructions and KB (16 bytes an instruction), largest first. """

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFINITION = re.compile(r'^(?:template <[^>]*>\s*)?(?:extern "C"\s+)?__(?:device|global)__')
CALLED = re.compile(r"(\w+)\s*\(")
NOT_A_NAME = {"__launch_bounds__", "__align__"}


def ncu_lines_module():
    """scripts/ncu-lines.py, for its build of a kernel with a line table (`local_sass`)."""
    spec = importlib.util.spec_from_file_location("ncu_lines", os.path.join(ROOT, "scripts/ncu-lines.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def code_by_function(lines, source_lines):
    """Instructions per function, from each instruction's line (an int in the pasted source;
    `file:line` or None in CUDA's own headers)."""
    starts = function_starts(source_lines)
    return Counter(function_at(starts, line) if isinstance(line, int) else "CUDA headers" for line in lines)


def arguments():
    parser = argparse.ArgumentParser(usage="%(prog)s KERNEL.cu [--threads N] [--top N] [-- NVCC OPTION...]",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", help="the kernel's source (host-runtime/src/gpu/chip_sparse.cu or a variant)")
    parser.add_argument("--threads", type=int, default=768, help="the block's threads (default 768)")
    parser.add_argument("--top", type=int, default=25, help="how many functions to print (default 25)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.nvcc_options = argv[cut + 1 :]
    if not os.path.isfile(args.kernel):
        sys.exit(f"{args.kernel}: no such kernel source")
    return args


def main():
    args = arguments()
    with tempfile.TemporaryDirectory() as work:
        try:
            _, lines, source = ncu_lines_module().local_sass(args.kernel, args.threads, args.nvcc_options, work)
        except subprocess.CalledProcessError as e:
            sys.exit(f"{args.kernel} did not compile or disassemble here ({os.path.basename(e.cmd[0])})")
    counts = code_by_function(lines, source)
    total = sum(counts.values())
    print(f"{args.kernel} at {args.threads} threads: {total} instructions, {total * 16 / 1024:.1f} KB")
    for name, n in counts.most_common(args.top):
        print(f"{n:7d} {n * 16 / 1024:6.1f} KB  {100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Where a chip kernel's time goes by source line, from ncu's per-instruction samples.

    scripts/ncu-lines.py SOURCE.csv[.gz] KERNEL.cu PASSES [--threads N] [--rows FIRST LAST]
                         [--top N] [-- NVCC OPTION...]

SOURCE.csv is ncu's source page of a run (`ncu --import R.ncu-rep --page source --csv
--print-source sass`, as scripts/ncu-phases.py reads it); KERNEL.cu the kernel it ran
(host-runtime/src/gpu/chip_sparse.cu, or the INBAND_KERNEL_SOURCE file), PASSES the passes
of the sampled launch. The runtime compiles the kernel with NVRTC and no line table, so
the SASS ncu saw carries no source lines: this compiles the same source here with nvcc and
-lineinfo (scripts/kernel-cubin.sh: the runtime's NVRTC options, THREADS at N, default 768,
plus the options after --, e.g. -DPROFILE), aligns the two SASS listings by opcode (difflib; the two
compilers' code differs in places, so the share aligned is printed) and gives each ncu row
the source line of its aligned instruction. Printed per line: the samples of its
instructions other than waits at a block barrier (which belong to the phase the waiting
warps wait for: ncu-phases.py), the warp instructions it ran per pass, and the line.
--rows limits the rows to ncu's SASS rows FIRST..LAST (a phase, by ncu-phases.py's
barrier indices). kernel-cubin.sh fetches the compiler and disassembler on first use.
"""
import argparse
import collections
import difflib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CUBIN = os.path.join(ROOT, "scripts/kernel-cubin.sh")
NVDISASM = os.path.join(ROOT, "target/cuda-nvdisasm/nvidia/cu13/bin/nvdisasm")


def phases_module():
    """scripts/ncu-phases.py, for its reader of ncu's source page."""
    spec = importlib.util.spec_from_file_location("ncu_phases", os.path.join(ROOT, "scripts/ncu-phases.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def opcode(instruction):
    """An instruction's opcode without its predicate (`@!P0 LDS.U R4, [...]` -> `LDS.U`)."""
    text = re.sub(r"^@!?U?P\w+\s+", "", instruction.strip())
    return text.split(" ")[0].rstrip(";")


def local_sass(kernel, threads, options, work):
    """The kernel compiled here with a line table (scripts/kernel-cubin.sh, the runtime's
    options): its instructions' opcodes, each one's source line (in the pasted source, or
    `file:line` in CUDA's own headers), and the pasted source's lines."""
    cubin = os.path.join(work, "kernel.cubin")
    pasted = os.path.join(work, "kernel.cu")
    subprocess.run([CUBIN, os.path.abspath(kernel), cubin, "-lineinfo", f"-DTHREADS={threads}", *options], check=True)
    listing = subprocess.run([NVDISASM, "-c", "-g", cubin], check=True, capture_output=True, text=True).stdout
    opcodes, lines, line = [], [], None
    for text in listing.splitlines():
        m = re.search(r'//## File "([^"]*)", line (\d+)', text)
        if m:
            # (A line of CUDA's own headers, e.g. atomicAdd's loop, by its file's name.)
            line = int(m.group(2)) if m.group(1) == pasted else f"{os.path.basename(m.group(1))}:{m.group(2)}"
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,6}\*/\s+(.*)", text)
        if m:
            opcodes.append(opcode(m.group(1)))
            lines.append(line)
    with open(pasted) as f:
        return opcodes, lines, f.read().split("\n")


def line_of_rows(rows, opcodes, lines):
    """Each ncu row's source line (by index; absent where its instruction did not align)."""
    theirs = [opcode(r.get("Source", "")) for r in rows]
    match = difflib.SequenceMatcher(None, theirs, opcodes, autojunk=False)
    return {b.a + k: lines[b.b + k] for b in match.get_matching_blocks() for k in range(b.size)}


def by_line(ncu, rows, line_of, first, last):
    """Samples outside barrier waits and instructions executed, per source line, of rows
    first..last."""
    samples, executed = collections.Counter(), collections.Counter()
    for i in range(first, min(last, len(rows) - 1) + 1):
        line = line_of.get(i)
        samples[line] += ncu.count(rows[i], ncu.SAMPLES) - ncu.count(rows[i], "stall_barrier")
        executed[line] += ncu.count(rows[i], "Instructions Executed")
    return samples, executed


def arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source_csv")
    parser.add_argument("kernel")
    parser.add_argument("passes", type=int)
    parser.add_argument("--threads", type=int, default=768)
    parser.add_argument("--rows", type=int, nargs=2, metavar=("FIRST", "LAST"))
    parser.add_argument("--top", type=int, default=40)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.nvcc_options = argv[cut + 1 :]
    if not os.path.isfile(args.kernel):
        sys.exit(f"{args.kernel}: no such kernel source")
    if args.passes <= 0:
        sys.exit("PASSES is the sampled launch's passes, at least 1")
    return args


def main():
    args = arguments()
    ncu = phases_module()
    try:
        found = ncu.kernels(args.source_csv)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        sys.exit(f"{args.source_csv}: cannot be read as ncu's source page in CSV: {e}")
    rows = max(found, key=lambda k: sum(ncu.count(r, ncu.SAMPLES) for r in k), default=[])
    if not rows:
        sys.exit(f"{args.source_csv}: no kernel's SASS rows")
    with tempfile.TemporaryDirectory() as work:
        try:
            opcodes, lines, source = local_sass(args.kernel, args.threads, args.nvcc_options, work)
        except subprocess.CalledProcessError as e:
            sys.exit(f"{args.kernel} did not compile or disassemble here ({os.path.basename(e.cmd[0])})")
    line_of = line_of_rows(rows, opcodes, lines)
    first, last = args.rows or (0, len(rows) - 1)
    samples, executed = by_line(ncu, rows, line_of, first, last)
    total = sum(samples.values())
    print(f"{len(line_of)} of ncu's {len(rows)} instructions aligned with this build's {len(opcodes)}; "
          f"rows {first}..{last}: {total} samples not at a barrier")
    print("samples  share  per pass  line")
    for line, s in samples.most_common(args.top):
        if line is None:
            text = "(not aligned, or no line)"
        elif isinstance(line, str):
            text = f"({line})"
        else:
            text = f"{line:5d} {source[line - 1].strip()[:90]}"
        print(f"{s:7d} {100 * s / max(total, 1):5.1f} % {executed[line] / args.passes:8.0f}  {text}")


if __name__ == "__main__":
    main()

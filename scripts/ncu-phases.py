#!/usr/bin/env python3
"""Where a block's time goes, phase by phase, from ncu's per-instruction stall samples.

    ncu -k regex:chip_passes --section SourceCounters --section WarpStateStats -o R inband bench ...
    ncu --import R.ncu-rep --page source --csv --print-source sass > source.csv
    scripts/ncu-phases.py source.csv[.gz] [--reasons]

ncu samples every warp wherever it waits. In a kernel whose phases end at block barriers,
a phase's share of the run is the samples of its own code plus the samples of the warps
waiting at its closing barrier, which ncu charges to the instructions after that barrier
(the next phase's code). The SASS is cut at each BAR.SYNC; each row printed is one phase:
its barrier's index in the SASS, how many times the barrier ran (warps times passes), and
its share.
With --reasons, each phase's own samples (not its waits at the barrier) by stall reason,
the four largest: what the warps doing a phase's work wait on (an instruction fetch, a
shared-memory result, a fixed-latency dependency).
The kernel with the most samples in the file is the one read.
"""
import collections
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def kernels(path):
    """Each kernel's SASS rows (dicts by column name), in the file's order."""
    opener = gzip.open if path.endswith(".gz") else open
    found, header = [], None
    with opener(path, "rt") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                found.append([])
                header = None
            elif row and row[0] == "Address":
                header = row
            elif header and found:
                found[-1].append(dict(zip(header, row)))
    return found


def count(row, column):
    value = row.get(column, "") or "0"
    return int(value) if value.isdigit() else 0


def stall_reasons(rows):
    """Samples by stall reason over rows (ncu's stall_* columns), waits at a barrier included."""
    reasons = collections.Counter()
    for r in rows:
        for column in r:
            if column.startswith("stall_") and "Not Issued" not in column:
                reasons[column[6:]] += count(r, column)
    return reasons


def phases(rows):
    """(barrier row index, own samples, waits charged after it, own samples by reason) per
    barrier-closed phase, and the samples after the last barrier."""
    bars = [i for i, r in enumerate(rows) if "BAR.SYNC" in r.get("Source", "")]
    starts = [0] + [b + 1 for b in bars]
    ends = bars + [len(rows) - 1]
    own = [sum(count(r, SAMPLES) - count(r, "stall_barrier") for r in rows[a : e + 1]) for a, e in zip(starts, ends)]
    waits = [sum(count(r, "stall_barrier") for r in rows[a : e + 1]) for a, e in zip(starts, ends)]
    why = [stall_reasons(rows[a : e + 1]) for a, e in zip(starts, ends)]
    for w in why:
        w.pop("barrier", None)
    # Phase k: the code up to barrier k, and the waits at that barrier (charged in region k + 1).
    return [(bars[k], own[k], waits[k + 1], why[k]) for k in range(len(bars))], own[-1]


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return
    by_reason = "--reasons" in args
    args = [a for a in args if a != "--reasons"]
    if len(args) != 1:
        sys.exit(__doc__)
    path = args[0]
    try:
        found = kernels(path)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as e:
        sys.exit(f"{path}: cannot be read as ncu's source page in CSV: {e}")
    rows = max(found, key=lambda k: sum(count(r, SAMPLES) for r in k), default=[])
    total = sum(count(r, SAMPLES) for r in rows)
    if total == 0:
        sys.exit(f"{path}: no kernel's SASS rows with stall samples (was it written by ncu --import R "
                 "--page source --csv --print-source sass, from a run with --section SourceCounters?)")
    table, tail = phases(rows)
    print(f"{total} samples; phases closed by a block barrier (SASS index of the barrier, times run, share):")
    for bar, own, wait, why in table:
        line = f"  {bar:6d} {count(rows[bar], 'Instructions Executed'):10d}  {100 * (own + wait) / total:5.1f} %"
        line += f"  (own {own}, waiting {wait})"
        if by_reason and own > 0:
            line += "  own: " + ", ".join(f"{k} {100 * v / own:.0f} %" for k, v in why.most_common(4))
        print(line)
    print(f"  after the last barrier: {100 * tail / total:.1f} %")
    reasons = stall_reasons(rows)
    print("by reason: " + ", ".join(f"{k} {100 * v / total:.1f} %" for k, v in reasons.most_common(8)))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The main job on an embedded default: build a small synthetic Qwen3.5 checkpoint, compile
# the RV32IM chip for it, splice the chip in, and run a C program inside the spliced
# checkpoint's chip layers (CPU, fp32), checked instruction by instruction against the
# golden reference. Then a text-mode generation whose [C: ...] region runs in the chip.
#
#   scripts/demo.sh [PROGRAM.c]        (default firmware/examples/hello.c)
#
# Work lands in target/demo (about 6 GB; steps whose output exists are skipped, except that
# the chip pack and the spliced checkpoint are rebuilt when weightgen has changed).
set -euo pipefail
cd "$(dirname "$0")/.."
program=${1:-firmware/examples/hello.c}
W=target/demo
scripts/setup.sh
cargo build --release --bins
bin=target/release
mkdir -p "$W"
[ -d "$W/base" ] || $bin/weight-surgery synth --shape tiny --out "$W/base"
stamp=$(sha256sum "$bin/weightgen" | cut -d' ' -f1)
if [ "$(cat "$W/chip.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$W/chip" "$W/spliced" "$W/chip.stamp"
fi
if [ ! -d "$W/chip" ]; then
    $bin/weightgen --shape tiny --out "$W/chip"
    echo "$stamp" >"$W/chip.stamp"
fi
[ -d "$W/spliced" ] || $bin/weight-surgery splice --base "$W/base" --chip "$W/chip" --out "$W/spliced"
$bin/weight-surgery inspect "$W/spliced"
echo "--- $program inside the spliced checkpoint (every instruction verified against golden):"
$bin/inband run --engine chip --model "$W/spliced" --verify --stats "$program"
echo "--- text mode with in-band execution (the continuation is forced: the weights are random):"
$bin/inband generate --model "$W/spliced" --prompt "Question: 847 times 293? Answer:" \
    --force " [C: 847*293]" --max-tokens 4 --stats

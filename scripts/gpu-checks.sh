#!/usr/bin/env bash
# The GPU machine's checks, in one run (the device tool's machines start bare and have
# no Rust and no RISC-V compiler: build here with scripts/build-gpu.sh, carry .gpu).
#
#   device run, carry [".gpu", "tests/reference"]:  scripts/gpu-checks.sh [SECONDS]
#
# Builds a spliced 0.8b-shape checkpoint (synth, weightgen, splice), then, each step
# skipped once SECONDS (default 540) are spent:
#   1. trace: hello inside the spliced checkpoint on CUDA, its chip token stream compared
#      with the CPU engine's (.gpu/trace/hello.trace, made by build-gpu.sh);
#   2. transformers: the chip pack exported as a stand-alone Qwen3_5ForCausalLM and stepped
#      over that stream (tests/reference/chip_in_transformers.py);
#   3. text mode: stock transformers' logits, spliced vs base checkpoint;
#   4. speed: examples on CUDA without verification (output compared with golden's) and
#      stock transformers decoding the spliced checkpoint on the same token stream;
#   5. verify: ISA tests and the shorter examples under --verify on CUDA.
# Everything lands in $OUT (log, JSON, traces).
set -u
cd "$(dirname "$0")/.."
LIMIT=${1:-540}
OUT=${OUT:-/tmp/inband-gpu-out}
W=${WORK:-/tmp/inband-gpu}
B=.gpu/bin
E=.gpu/elf
mkdir -p "$OUT" "$W"
LOG="$OUT/log"
START=$(date +%s)
TIMEFORMAT='   (%R s)'
left() { echo $((LIMIT - ($(date +%s) - START))); }
step() { # step TIMEOUT CMD...: runs CMD unless time is up, logging its output and status
    step_to "$LOG" "$@"
}
step_to() { # step_to FILE TIMEOUT CMD...: as step, with CMD's stdout into FILE
    local o=$1 t=$2
    shift 2
    local l
    l=$(left)
    if [ "$l" -le 5 ]; then
        echo "== SKIPPED (time): $*" >>"$LOG"
        return 1
    fi
    [ "$t" -gt "$l" ] && t=$l
    echo "== $*" >>"$LOG"
    if [ "$o" = "$LOG" ]; then
        { time timeout "$t" "$@"; } >>"$LOG" 2>&1
    else
        { time timeout "$t" "$@" >"$o"; } 2>>"$LOG"
    fi
    local rc=$?
    echo "   rc=$rc" >>"$LOG"
    return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$LOG" 2>&1

step 120 $B/weight-surgery synth --shape 0.8b --out "$W/base"
step 120 $B/weightgen --shape 0.8b --out "$W/pack"
step 120 $B/weight-surgery splice --base "$W/base" --chip "$W/pack" --out "$W/spliced"
step 60 $B/weight-surgery inspect "$W/spliced"
M=(--engine chip --model "$W/spliced" --device cuda)

# 1. The CUDA engine's token stream equals the CPU engine's.
step 60 $B/inband run "${M[@]}" --stats --trace "$OUT/hello.cuda.trace" $E/hello.elf
step 10 cmp "$OUT/hello.cuda.trace" .gpu/trace/hello.trace && echo "   hello: CUDA and CPU chip token streams identical" >>"$LOG"

# 2. The chip in stock transformers.
step 150 python3 tests/reference/chip_in_transformers.py export "$W/pack" "$W/hf-chip"
step 200 python3 tests/reference/chip_in_transformers.py step "$W/hf-chip" .gpu/trace/hello.trace
rm -rf "$W/hf-chip"

# 3. Text mode: spliced vs base under stock transformers.
step 150 python3 tests/reference/qwen35_reference.py compare-text "$W/base" "$W/spliced"

# 4. Speed, and every example's output against golden's.
step 150 python3 tests/reference/chip_in_transformers.py decode-speed "$W/spliced" .gpu/trace/hello.trace 310
for p in hello strings int64 sort structures fib; do
    $B/inband run --engine golden $E/$p.elf >"$W/$p.golden" 2>/dev/null
    if step_to "$W/$p.cuda" 200 $B/inband run "${M[@]}" --stats $E/$p.elf; then
        cmp -s "$W/$p.golden" "$W/$p.cuda" && echo "   $p: output identical to golden's" >>"$LOG" ||
            echo "   $p: OUTPUT DIFFERS from golden's" >>"$LOG"
    fi
done

# 5. Verification, instruction by instruction.
for p in alu_imm alu_rr branch jump memory upper muldiv hello strings int64; do
    step 120 $B/inband run "${M[@]}" --verify --stats $E/$p.elf >/dev/null
done
echo "== done in $(( $(date +%s) - START )) s" >>"$LOG"
cat "$LOG"

#!/usr/bin/env bash
# The GPU machine's checks, in one run (the device tool's machines start bare and have
# no Rust and no RISC-V compiler: build here with scripts/build-gpu.sh, carry .gpu).
#
#   device run, carry [".gpu"]:  scripts/gpu-checks.sh [SECONDS [SECTION...]]
#
# Sections (default: all, in this order), each step skipped once SECONDS (default 540)
# are spent; the log and what later calls need land in $OUT, the traces the checks compare
# in $WORK (the device tool brings back a limited count of files, and with a dozen traces
# beside it the log did not come back):
#   checkpoint    a spliced 0.8b-shape checkpoint: synth, weightgen, splice
#   pack          only the 0.8b chip pack (weightgen, ~20 s; for kernel work): the
#                 sections after it run the chip from the pack where no checkpoint is made
#   trace         hello, strings and int64 inside it on CUDA, with each kernel (sparse,
#                 reference), booted by prefill and by loading state; their chip token
#                 streams compared with the CPU engine's (.gpu/trace, made by build-gpu.sh)
#   profile       each kernel built with -DPROFILE: cycles per pass by phase
#   ab            a kernel variant beside the built-in sparse kernel: inband bench of
#                 hello, strings and int64 with each in turn, AB_ROUNDS rounds (default 3),
#                 the variant being INBAND_KERNEL_OPTIONS=$AB_OPTIONS (e.g. -DKEEP_READS)
#                 and, where set, INBAND_KERNEL_SOURCE=$AB_SOURCE (an absolute path); each
#                 program's mean passes/s and the variant's change; then the variant's
#                 token streams (both boots) vs the CPU engine's and --verify of muldiv
#                 and matmul with it
#   silu          scripts/silu-exact.cu (compiled with the machine's nvcc): the sparse
#                 kernel's silu_fast (and silu_tail outside (-89, 17)) against silu_f,
#                 bit for bit, over all 2^32 inputs
#   ncu           the real build's pass by phase: ncu's stall samples of strings' run (the
#                 sparse kernel), summed between block barriers, each phase's own samples
#                 by stall reason (scripts/ncu-phases.py --reasons);
#                 the per-instruction table in $OUT/ncu-source.csv.gz (by source line
#                 where it comes back: scripts/ncu-lines.py)
#   transformers  the chip pack exported as a stand-alone Qwen3_5ForCausalLM, stepped by
#                 stock transformers over that stream (tests/reference/chip_in_transformers.py)
#   text          stock transformers' text logits, spliced vs base checkpoint
#   generate      inband generate (base and spliced; Qwen's layers on the CPU and on CUDA)
#                 vs stock transformers' logits; CPU vs CUDA logits; text speed on each
#   speed         stock transformers decoding the spliced checkpoint on hello's token stream
#   examples      every example but Euler #10 on CUDA, output compared with golden's
#   bench         inband bench --device cuda --against-reference (both kernels, the ratio):
#                 hello, strings, int64, then sort apart (its reference run takes ~65 s,
#                 and a bench prints its ratios at its end: a call's time ran out in it)
#   verify        ISA tests, the shorter examples, whole_ram, the C kernels of
#                 tests/kernels and the division tests (tests/division: sizes, boundaries)
#                 under --verify on CUDA
#   load          hello, int64 and Euler #10 booted by loading state (a fresh VM, then
#                 5 boots on the resident one) and by prefill on CUDA: inband bench --boot
#   euler10       Project Euler #10 inside the spliced checkpoint on CUDA, timed
#   inband        in-band execution in a generation from the spliced checkpoint (VM on
#                 CUDA): `[C: 847*293]` and `[C: 12345*6789]`, forced tokens
#   inband-euler10  the same with Euler #10 as a ```c block
#   fib           fib inside the spliced checkpoint on CUDA
#   sieve         tests/speed/sieve.c (31.5 M instructions) inside the spliced checkpoint
#                 on CUDA, output vs golden's (fits the call's 590 s from ~65 k passes/s)
#   sieve10m      tests/speed/sieve10m.c (11.0 M instructions, ~1.05 passes each) inside
#                 the spliced checkpoint on CUDA in one call, output vs golden's (fits the
#                 call's 590 s from ~20 k passes/s; slower, run it in pieces)
#   saved         strings stopped after 5,000 instructions and saved (--save-state), then
#                 continued by a fresh process (--resume): the two pieces' token streams
#                 together vs the CPU engine's whole stream; the continued run --verify'd
#   pieces        one piece of a program too long for one call (PIECES_PROGRAM, default
#                 sieve10m: tests/speed/sieve10m.c, 11.0 M instructions): continues
#                 the last piece (carried as .gpu/state/NAME.state and NAME.out.*, from
#                 an earlier call's $OUT, or kept in $WORK by the last call while the
#                 machine stayed warm), else boots; runs PIECE_SECONDS (default 520, at
#                 most what the call has left), then saves the machine and the piece's output (NAME.out.N) to $OUT and
#                 $WORK; when the program ends, all pieces' output together is compared
#                 with golden's
#   batch         the ISA suite and every example as one batch on CUDA (inband run --batch
#                 --verify: each compared with golden); hello's, strings' and int64's first
#                 machines' token streams vs the CPU engine's single-stream ones; a batch
#                 mixing exits, an exit code, traps and an exhausted budget; the scaling
#                 table (inband bench --batch max); BATCH_THREADS sets the threads per machine
#   untouched     tests/tests/inband_exec.rs (carried as .gpu/bin/inband_exec.gz), its
#                 code regions on CUDA, Qwen's layers on the CPU then on CUDA: Qwen's caches
#                 end as if the VM had never run
set -u
cd "$(dirname "$0")/.."
LIMIT=${1:-540}
OUT=${OUT:-/tmp/inband-gpu-out}
W=${WORK:-/tmp/inband-gpu}
B=${BIN:-.gpu/bin} # (BIN: another build's binaries, e.g. the kernel before a change)
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
stream_vs_cpu() { # stream_vs_cpu PROGRAM BOOT TRACE WHAT: TRACE (a CUDA run's) vs the CPU engine's stream
    if zcat .gpu/trace/$1.$2.trace.gz | cmp -s - "$3"; then
        echo "   $1 ($4, $2 boot): CUDA and CPU chip token streams identical" >>"$LOG"
    else
        echo "   $1 ($4, $2 boot): TOKEN STREAMS DIFFER from the CPU engine's" >>"$LOG"
    fi
}
vs_golden() { # vs_golden PROGRAM TIMEOUT: runs PROGRAM in the spliced checkpoint on CUDA, output vs golden's
    local p=$1
    $B/inband run --engine golden $E/$p.elf >"$W/$p.golden" 2>/dev/null
    if step_to "$W/$p.cuda" "$2" $B/inband run "${M[@]}" --stats $E/$p.elf; then
        cmp -s "$W/$p.golden" "$W/$p.cuda" && echo "   $p: output identical to golden's" >>"$LOG" ||
            echo "   $p: OUTPUT DIFFERS from golden's" >>"$LOG"
    else
        return 1
    fi
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >>"$LOG" 2>&1
SECTIONS=("${@:2}")
[ ${#SECTIONS[@]} -eq 0 ] && SECTIONS=(checkpoint trace transformers text generate speed bench verify examples)
# The chip the sections run: the spliced checkpoint's, else the pack's (see chip_args).
# Chosen again before each section: a section before the checkpoint's (a warm machine
# keeps an earlier call's pack) must not hold the sections after it to the pack.
chip_args() {
    if [ ! -f "$W/spliced/config.json" ] && [ -f "$W/pack/manifest.json" ]; then
        M=(--engine chip --chip "$W/pack" --device cuda)
    else
        M=(--engine chip --model "$W/spliced" --device cuda)
    fi
}
# The carried RISC-V compiler (scripts/build-gpu.sh) for in-band execution, with the
# picolibc that expressions link (carried compressed).
[ -d .gpu/toolchain/lib/picolibc ] || tar xzf .gpu/toolchain/picolibc.tar.gz -C .gpu/toolchain
# The carried RISC-V compiler (scripts/build-gpu.sh) for in-band execution.
export INBAND_TOOLCHAIN=$PWD/.gpu/toolchain LD_LIBRARY_PATH=$PWD/.gpu/toolchain/so${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PROMPT="The computer inside the model says"

for section in "${SECTIONS[@]}"; do
    echo "=== section $section" >>"$LOG"
    chip_args
    case $section in
    checkpoint)
        # A warm machine keeps $W between calls: reuse a checkpoint an earlier call finished.
        if [ -f "$W/spliced/config.json" ] && $B/weight-surgery inspect "$W/spliced" >/dev/null 2>&1; then
            echo "   reusing $W/spliced" >>"$LOG"
            continue
        fi
        # (An earlier call's base and pack, kept by a warm machine, are this binary's too:
        # both commands refuse an existing folder.)
        [ -f "$W/base/config.json" ] || step 120 $B/weight-surgery synth --shape 0.8b --out "$W/base"
        [ -f "$W/pack/manifest.json" ] || step 120 $B/weightgen --shape 0.8b --out "$W/pack"
        step 120 $B/weight-surgery splice --base "$W/base" --chip "$W/pack" --out "$W/spliced"
        step 60 $B/weight-surgery inspect "$W/spliced"
        ;;
    pack)
        [ -f "$W/pack/manifest.json" ] || step 120 $B/weightgen --shape 0.8b --out "$W/pack"
        ;;
    trace)
        # Each CUDA kernel's chip token streams vs the CPU engine's (.gpu/trace, made by build-gpu.sh).
        for k in sparse reference; do
            for boot in prefill load; do
                for p in hello strings int64; do
                    t="$W/$p.$k.$boot.trace"
                    step 120 $B/inband run "${M[@]}" --kernel $k --boot $boot --stats --trace "$t" $E/$p.elf &&
                        stream_vs_cpu $p $boot "$t" "$k kernel"
                done
            done
        done
        ;;
    silu)
        NVCC=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
        [ -n "$NVCC" ] || { echo "   silu: no nvcc on this machine" >>"$LOG"; continue; }
        step 120 "$NVCC" -arch=sm_90 --fmad=false -ftz=false -prec-div=true -prec-sqrt=true -o "$W/silu-exact" \
            scripts/silu-exact.cu && step 60 "$W/silu-exact"
        ;;
    ab)
        V=(env INBAND_KERNEL_OPTIONS="${AB_OPTIONS:-}" ${AB_SOURCE:+INBAND_KERNEL_SOURCE=$AB_SOURCE})
        echo "   variant: ${V[*]:1}" >>"$LOG"
        rm -f "$W/ab.all" # (a warm machine's, from a call cut short)
        for r in $(seq "${AB_ROUNDS:-3}"); do
            for k in built-in variant; do
                run=($B/inband)
                [ $k = variant ] && run=("${V[@]}" $B/inband)
                step_to "$W/ab.rows" 120 "${run[@]}" bench "${M[@]:2}" $E/hello.elf $E/strings.elf $E/int64.elf &&
                    grep '^| [a-z]' "$W/ab.rows" | grep -v '^| program' | sed "s/^/   $k /" | tee -a "$W/ab.all" >>"$LOG"
            done
        done
        # Each program's mean passes/s (the bench table's steps/s column) by kernel.
        awk -F'|' '{k = $1; gsub(/ /, "", k); p = $2; gsub(/ /, "", p); v = $7; gsub(/[ ,]/, "", v);
                    s[k, p] += v; n[k, p]++; ps[p] = 1}
            END {for (p in ps) if (n["built-in", p] && n["variant", p])
                printf "   %s: built-in %.0f, variant %.0f passes/s (%+.2f %%)\n", p, s["built-in", p] / n["built-in", p],
                    s["variant", p] / n["variant", p],
                    100 * (s["variant", p] / n["variant", p] / (s["built-in", p] / n["built-in", p]) - 1)}' \
            "$W/ab.all" >>"$LOG"
        rm -f "$W/ab.all"
        for boot in load prefill; do
            for p in hello strings int64; do
                t="$W/$p.variant.$boot.trace"
                step 120 "${V[@]}" $B/inband run "${M[@]}" --boot $boot --stats --trace "$t" $E/$p.elf &&
                    stream_vs_cpu $p $boot "$t" variant
            done
        done
        for p in muldiv matmul; do
            step 120 "${V[@]}" $B/inband run "${M[@]}" --verify --stats $E/$p.elf
        done
        ;;
    profile)
        for k in sparse reference; do
            INBAND_KERNEL_OPTIONS=-DPROFILE step 120 $B/inband bench "${M[@]:2}" --kernel $k $E/hello.elf $E/strings.elf
        done
        ;;
    ncu)
        N=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
        [ -n "$N" ] || { echo "   ncu: not found on this machine" >>"$LOG"; continue; }
        step 240 "$N" -k regex:chip_passes --section SourceCounters --section WarpStateStats -c 4 -f -o "$W/ncu" \
            $B/inband bench "${M[@]:2}" $E/strings.elf &&
            "$N" --import "$W/ncu.ncu-rep" --page source --csv --print-source sass >"$W/ncu-source.csv" 2>>"$LOG" &&
            python3 scripts/ncu-phases.py "$W/ncu-source.csv" --reasons >>"$LOG" 2>&1 &&
            gzip -c "$W/ncu-source.csv" >"$OUT/ncu-source.csv.gz"
        ;;
    transformers)
        step 150 python3 tests/reference/chip_in_transformers.py export "$W/pack" "$W/hf-chip"
        zcat .gpu/trace/hello.prefill.trace.gz >"$W/hello.trace"
        step 200 python3 tests/reference/chip_in_transformers.py step "$W/hf-chip" "$W/hello.trace"
        rm -rf "$W/hf-chip"
        ;;
    text)
        step 150 python3 tests/reference/qwen35_reference.py compare-text "$W/base" "$W/spliced"
        ;;
    generate)
        # Qwen's layers on the CPU (as everywhere) and on the GPU (--device cuda).
        for m in base spliced; do
            [ -d "$W/$m" ] || continue
            for d in cpu cuda; do
                step 200 $B/inband generate --model "$W/$m" --device $d --stats --prompt "$PROMPT" --max-tokens 8 \
                    --logits "$W/gen-$m-$d"
            done
        done
        for d in cpu cuda; do
            step 150 python3 tests/reference/qwen35_reference.py compare-generate "$W/base" "$W/gen-base-$d"
            [ -f "$W/gen-spliced-$d.f32" ] && step 10 cmp "$W/gen-base-$d.f32" "$W/gen-spliced-$d.f32" &&
                echo "   generate ($d): spliced checkpoint's text-mode logits bit-identical to the base's" >>"$LOG"
        done
        step 60 python3 tests/reference/qwen35_reference.py compare-runs "$W/gen-base-cpu" "$W/gen-base-cuda"
        # Text speed: a longer greedy generation on each device.
        for d in cpu cuda; do
            step 200 $B/inband generate --model "$W/base" --device $d --stats --prompt "$PROMPT" --max-tokens 64 \
                --no-exec >/dev/null
        done
        ;;
    speed)
        zcat .gpu/trace/hello.prefill.trace.gz >"$W/hello.trace"
        step 150 python3 tests/reference/chip_in_transformers.py decode-speed "$W/spliced" "$W/hello.trace" 310
        ;;
    examples)
        # About 1.4 M passes in all: ~7 minutes at ~3,400 steps/s.
        for p in hello strings int64 sort structures fib; do vs_golden $p 300; done
        ;;
    bench)
        step 120 $B/inband bench "${M[@]:2}" --against-reference $E/hello.elf $E/strings.elf $E/int64.elf
        step 200 $B/inband bench "${M[@]:2}" --against-reference $E/sort.elf
        ;;
    verify)
        V=(--engine chip --device cuda --chip "$W/pack")
        [ -d "$W/spliced" ] && V=("${M[@]}")
        for p in alu_imm alu_rr branch jump memory upper muldiv hello strings int64; do
            step 120 $B/inband run "${V[@]}" --verify --stats $E/$p.elf
        done
        step 240 $B/inband run "${V[@]}" --verify --stats $E/whole_ram.elf
        for p in matmul crc32 sha256 search fsm sizes boundaries; do
            step 120 $B/inband run "${V[@]}" --verify --stats $E/$p.elf
        done
        ;;
    load)
        step 200 $B/inband bench "${M[@]:2}" --boot $E/hello.elf $E/int64.elf $E/euler10.elf
        ;;
    euler10 | fib | sieve | sieve10m)
        vs_golden $section 590 && cat "$W/$section.cuda" >>"$LOG"
        ;;
    inband)
        G=(--model "$W/spliced" --device cuda --vm-device cuda --stats --max-tokens 4 --prompt "$PROMPT")
        # Two regions in the forced text: they run as one batch (a machine each).
        step 200 $B/inband generate "${G[@]}" --force "Question: 847*293? Answer: [C: 847*293]. And 12345*6789? [C: 12345*6789]. Root two: [C: sqrt(2.0)]"
        ;;
    inband-euler10)
        G=(--model "$W/spliced" --device cuda --vm-device cuda --stats --max-tokens 4 --prompt "$PROMPT")
        # Euler #10 as a model would write it: the example without its header comment.
        fence=$(printf '```c\n%s\n```\n' "$(grep -v -E '^ ?(/\*| \*)' firmware/examples/euler10.c)")
        step 590 $B/inband generate "${G[@]}" --max-region-seconds 560 --force "$fence"
        ;;
    batch)
        T=(${BATCH_THREADS:+env INBAND_BATCH_THREADS=$BATCH_THREADS})
        all=()
        for p in alu_imm alu_rr branch jump memory upper muldiv hello strings int64 sort structures fib euler10; do
            all+=("$E/$p.elf")
        done
        step 400 "${T[@]}" $B/inband run "${M[@]}" --batch --verify --stats --trace "$W/batch" "${all[@]}"
        for p in hello strings int64; do
            if zcat .gpu/trace/$p.load.trace.gz | cmp -s - "$W/batch/$p.trace"; then
                echo "   $p (first machine of the batch): token stream identical to the CPU engine's single stream" >>"$LOG"
            else
                echo "   $p (first machine of the batch): TOKEN STREAM DIFFERS from the CPU engine's single stream" >>"$LOG"
            fi
        done
        # Every way a run ends, side by side: only the runaway meets the budget.
        step 60 "${T[@]}" $B/inband run "${M[@]}" --batch --verify --stats --max-instructions 50000 $E/hello.elf \
            $E/runaway.elf $E/exit_code.elf $E/illegal_instruction.elf $E/misaligned_load.elf $E/upper.elf
        step 400 "${T[@]}" $B/inband bench "${M[@]:2}" --batch ${BATCH_MACHINES:-max} $E/hello.elf $E/strings.elf
        ;;
    saved)
        S=(--engine chip --device cuda --chip "$W/pack")
        [ -d "$W/spliced" ] && S=("${M[@]}")
        rm -f "$W/strings.state"
        # The first piece ends at its budget (status 67) with the machine saved.
        step 60 bash -c '"$@"; [ $? -eq 67 ]' piece $B/inband run "${S[@]}" --max-instructions 5000 \
            --save-state "$W/strings.state" --trace "$W/piece1.trace" $E/strings.elf
        step 60 $B/inband run "${S[@]}" --resume "$W/strings.state" --stats --trace "$W/piece2.trace" $E/strings.elf
        if cat "$W/piece1.trace" "$W/piece2.trace" | cmp -s - <(zcat .gpu/trace/strings.load.trace.gz); then
            echo "   strings in two pieces: token stream identical to the CPU engine's whole run" >>"$LOG"
        else
            echo "   strings in two pieces: TOKEN STREAM DIFFERS from the CPU engine's whole run" >>"$LOG"
        fi
        step 60 $B/inband run "${S[@]}" --resume "$W/strings.state" --verify --stats $E/strings.elf
        ;;
    pieces)
        P=${PIECES_PROGRAM:-sieve10m}
        D=$W/pieces
        mkdir -p "$D"
        # The pieces so far: carried in .gpu/state (an earlier call's $OUT), else kept on
        # this machine by the last call while it stayed warm.
        if [ -f .gpu/state/$P.state ]; then
            rm -f "$D/$P".*
            cp .gpu/state/$P.* "$D/"
        fi
        R=()
        [ -f "$D/$P.state" ] && R=(--resume "$D/$P.state")
        n=$(ls "$D/$P".out.* 2>/dev/null | wc -l)
        # The piece stops itself (and saves) well before the step's timeout would kill it.
        sec=${PIECE_SECONDS:-520}
        [ "$sec" -gt $(($(left) - 10)) ] && sec=$(($(left) - 10))
        step_to "$D/$P.out.$n" "$sec" $B/inband run "${M[@]}" "${R[@]}" --stats \
            --max-seconds $((sec - 25)) --save-state "$D/$P.next" $E/$P.elf
        cp "$D/$P.out.$n" "$OUT/"
        if [ -f "$D/$P.next" ]; then
            mv "$D/$P.next" "$D/$P.state"
            cp "$D/$P.state" "$OUT/"
        else
            rm -f "$D/$P.state"
            $B/inband run --engine golden $E/$P.elf >"$W/$P.golden" 2>/dev/null
            for k in $(seq 0 "$n"); do cat "$D/$P.out.$k"; done | cmp -s - "$W/$P.golden" &&
                echo "   $P ($((n + 1)) pieces): output identical to golden's" >>"$LOG" ||
                echo "   $P ($((n + 1)) pieces): OUTPUT DIFFERS from golden's" >>"$LOG"
        fi
        ;;
    untouched)
        gunzip -c .gpu/bin/inband_exec.gz >"$W/inband_exec" && chmod +x "$W/inband_exec"
        INBAND_VM_DEVICE=cuda step 200 "$W/inband_exec" --nocapture
        INBAND_VM_DEVICE=cuda INBAND_TEXT_DEVICE=cuda step 200 "$W/inband_exec" --nocapture
        ;;
    *) echo "unknown section $section" >>"$LOG" ;;
    esac
done
echo "== done in $(($(date +%s) - START)) s" >>"$LOG"
cat "$LOG"
# The verdicts last, where the device tool's output tail keeps them.
echo "== verdicts"
awk '/^== /{cmd=$0} /rc=[1-9]/{print cmd " -> " $1} /every instruction verified/{n=split(cmd, w, " "); print "   " w[n] ": every instruction verified"}
    /identical|DIFFER|SKIPPED|^== done/{print}' "$LOG"

#!/usr/bin/env bash
# Training throughput in fp32 and bf16, dbranch and PyTorch side by side, on
# the nanoGPT "baby" and "char" configs at 2 threads: four arms per config and
# round — dbranch fp32 and bf16 (train.precision; one `dbranch bench train
# --compare-precision` run, which interleaves the two step by step), PyTorch
# fp32 and PyTorch bf16 (torch_nanogpt.py --precision, forward + loss under
# CPU autocast) — over ROUNDS rounds, so a change in machine load hits all
# four alike. Prints the CPU and its bf16 units (AVX512_BF16, AMX-BF16),
# dbranch's bf16 engine and what torch reports about bf16, then median
# tokens/s per arm, the ratios, and MFU of each arm against its own measured
# GEMM rate (its own precision) and against the CPU's AMX bf16 peak when it
# has AMX (1024 bf16 FLOP/cycle/core, Intel's figure for the 4th-gen Xeon
# TMUL: a 16x16x32 TDPBF16PS every 16 cycles; clock from the brand string, else
# /proc/cpuinfo's "cpu MHz").
#
# Usage: experiments/throughput/precision.sh [--rounds R] [--steps N] [--char-steps N] [--warmup W] [--threads K]
#                                            [--presets "baby char"] [--build-dir DIR | --dbranch FILE]
#                                            [--out FILE.json]
# --steps is baby's (default 20); char runs --char-steps (default half, at least 5); every run first
# takes --warmup untimed steps (default 3, both implementations). --dbranch runs
# that binary instead of building one. The raw JSON lines of every run go to --out (default: a file
# under /tmp). A run that fails or prints malformed JSON stops the script: one line, non-zero exit.
set -euo pipefail

ME="precision.sh"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS=3
STEPS=20
CHAR_STEPS=""
WARMUP=3
THREADS=2
PRESETS="baby char"
BUILD_DIR="$ROOT/build-throughput"
DBRANCH=""
OUT=""
die() { echo "$ME: $*" >&2; exit 1; }
value() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "$ME: $1 needs a value (try --help)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds | --steps | --char-steps | --warmup | --threads | --presets | --build-dir | --dbranch | --out) value "$@" ;;&
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --char-steps) CHAR_STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --presets) PRESETS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --dbranch) DBRANCH="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "$ME: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
[ -n "$CHAR_STEPS" ] || CHAR_STEPS=$(( STEPS / 2 > 5 ? STEPS / 2 : 5 ))
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "$ME: WARMUP must be a non-negative integer, not '$WARMUP'" >&2; exit 2; }
for n in "ROUNDS=$ROUNDS" "STEPS=$STEPS" "CHAR_STEPS=$CHAR_STEPS" "THREADS=$THREADS"; do
    [[ "${n#*=}" =~ ^[1-9][0-9]*$ ]] || { echo "$ME: ${n%%=*} must be a positive integer, not '${n#*=}'" >&2; exit 2; }
done
for preset in $PRESETS; do
    case "$preset" in baby | char) ;; *) echo "$ME: unknown preset '$preset' (baby, char)" >&2; exit 2 ;; esac
done
[ -n "$OUT" ] || OUT="$(mktemp /tmp/dbranch_precision_XXXXXX.json)"
LOG="$(mktemp /tmp/dbranch_precision_XXXXXX.log)" # stderr of the current run, for the failure line
trap 'rm -f "$LOG" "$LOG.json"' EXIT

. "$ROOT/experiments/throughput/torch_python.sh" # PYTHON, with torch installed if it was missing

if [ -z "$DBRANCH" ]; then
    echo "== building dbranch in $BUILD_DIR" >&2
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null || die "cmake configure of $BUILD_DIR failed"
    cmake --build "$BUILD_DIR" --target dbranch -j2 >/dev/null || die "build of dbranch in $BUILD_DIR failed"
    DBRANCH="$BUILD_DIR/dbranch"
fi
[ -x "$DBRANCH" ] || die "dbranch binary $DBRANCH is missing or not executable"

CPU_MODEL="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
CPU_FM="$(awk -F': ' '/^cpu family/ {f=$2} /^model[[:space:]]*:/ {m=$2} END {print "family " f ", model " m}' /proc/cpuinfo)"
FLAGS=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
has() { [[ "$FLAGS" == *" $1 "* ]] && echo yes || echo no; }
AVX512_BF16="$(has avx512_bf16)"
AMX_BF16="$(has amx_bf16)"
# The clock the kernel reports: the fallback for a brand string without one (a VM's masked "Intel(R) Xeon(R) Processor").
CPU_MHZ="$(sed -n 's/^cpu MHz[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "== CPU: $CPU_MODEL ($CPU_FM); avx512_bf16 $AVX512_BF16, amx_bf16 $AMX_BF16" >&2

# run_json WHAT TAG CHECK -- COMMAND...: runs COMMAND (stdout: one JSON object), checks it with the
# Python expression CHECK (over r), adds TAG's fields (a JSON object) and appends it to $OUT; any
# failure is one line naming WHAT and a non-zero exit.
run_json() {
    local what="$1" tag="$2" check="$3"
    shift 4
    local rc=0
    "$@" >"$LOG.json" 2>"$LOG" || rc=$?
    [ "$rc" -eq 0 ] || die "$what failed (exit $rc): $(grep -v '^\s*$' "$LOG" | tail -1 || echo 'no message')"
    "$PYTHON" - "$LOG.json" "$tag" "$check" >>"$OUT" 2>"$LOG" <<'EOF' || die "$what printed malformed JSON: $(tail -1 "$LOG")"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    ok = eval(sys.argv[3], {"r": r})
except Exception as e:
    sys.exit(f"{type(e).__name__}: {e}".replace("\n", " "))
if not ok:
    sys.exit("fields missing or out of range")
r.update(json.loads(sys.argv[2]))
print(json.dumps(r))
EOF
}
OURS_CHECK='(len(r["runs"]) == 2 and [x["precision"] for x in r["runs"]] == ["fp32", "bf16"]
    and all(x["tokens_per_s"] > 0 and x["mfu"] > 0 and x["gflops"] > 0 for x in r["runs"])
    and r["gemm"]["gflops"] > 0 and r["gemm"]["gflops_bf16"] > 0 and r["gemm"]["bf16_engine"] != "")'
torch_check() { echo "r[\"precision\"] == \"$1\" and r[\"tokens_per_s\"] > 0 and r[\"gemm_gflops\"] > 0 and r[\"mfu\"] > 0"; }

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" BLIS_NUM_THREADS="$THREADS"
: >"$OUT"
for round in $(seq 1 "$ROUNDS"); do
    for preset in $PRESETS; do
        steps="$STEPS"
        [ "$preset" = char ] && steps="$CHAR_STEPS"
        echo "== round $round/$ROUNDS, $preset: dbranch fp32 + bf16 (interleaved)" >&2
        run_json "dbranch bench train --compare-precision ($preset, round $round)" \
            "{\"impl\": \"dbranch\", \"preset\": \"$preset\", \"round\": $round}" "$OURS_CHECK" -- \
            "$DBRANCH" bench train --preset "$preset" --threads "$THREADS" --steps "$steps" --warmup "$WARMUP" \
            --compare-precision --json
        for precision in fp32 bf16; do
            echo "== round $round/$ROUNDS, $preset: torch $precision" >&2
            run_json "torch_nanogpt.py --precision $precision ($preset, round $round)" \
                "{\"impl\": \"torch\", \"round\": $round}" "$(torch_check "$precision")" -- \
                "$PYTHON" "$ROOT/experiments/throughput/torch_nanogpt.py" --preset "$preset" --threads "$THREADS" \
                --steps "$steps" --warmup "$WARMUP" --precision "$precision" --json
        done
    done
done

"$PYTHON" - "$OUT" "$THREADS" "$CPU_MODEL" "$CPU_FM" "$AVX512_BF16" "$AMX_BF16" "$CPU_MHZ" <<'EOF' || die "summary of $OUT failed"
import json, re, statistics, sys
path, threads, cpu, cpu_fm, avx512_bf16, amx_bf16, cpu_mhz = sys.argv[1:8]
threads = int(threads)
rows = [json.loads(line) for line in open(path) if line.strip()]
def med(values):
    return statistics.median(values) if values else float("nan")
ours = [r for r in rows if r["impl"] == "dbranch"]
torch_rows = [r for r in rows if r["impl"] == "torch"]
print(f"\nCPU: {cpu} ({cpu_fm}); AVX512_BF16: {avx512_bf16}, AMX-BF16: {amx_bf16}")
gemm = ours[0]["gemm"]
print(f"dbranch bf16 engine: {gemm['bf16_engine']}" +
      (f" (oneDNN kernel {gemm['onednn_kernel']})" if gemm["bf16_engine"] == "onednn" else
       " (float32 GEMMs of bf16-rounded operands)"))
support = next((r["bf16_support"] for r in torch_rows if r["precision"] == "bf16"), None)
if support:
    print(f"torch {torch_rows[0]['torch']} bf16: _is_mkldnn_bf16_supported: "
          f"{support['is_mkldnn_bf16_supported'] if support['is_mkldnn_bf16_supported'] is not None else support['query']}; "
          f"oneDNN ISA: {support['onednn_isa']}; autocast bf16 matmul: {support['bf16_matmul_impl']}")
# AMX peak: 1024 bf16 FLOP/cycle/core (Intel, 4th-gen Xeon), at the brand string's nominal clock, per thread;
# without one, at /proc/cpuinfo's "cpu MHz" (what the kernel was told: in a VM, the host's nominal clock).
peak = None
clock = re.search(r"@\s*([0-9.]+)\s*GHz", cpu)
ghz, source = (float(clock.group(1)), "brand string") if clock else (None, None)
if ghz is None and re.fullmatch(r"[0-9]+(\.[0-9]+)?", cpu_mhz.strip()):
    ghz, source = float(cpu_mhz) / 1000.0, "/proc/cpuinfo cpu MHz"
if amx_bf16 == "yes" and ghz:
    peak = 1024 * ghz * threads
    print(f"AMX bf16 peak: 1024 FLOP/cycle/core x {ghz:.2f} GHz ({source}) x {threads} = {peak:.0f} GFLOP/s")
else:
    print("AMX bf16 peak: n/a (" + ("no AMX-BF16 on this CPU" if amx_bf16 != "yes" else "no clock in the brand string or /proc/cpuinfo") + ")")
print(f"\n{threads} threads, median over {len({r['round'] for r in rows})} rounds (raw runs: {path})\n")
def arms(preset):
    """(name, tokens/s, MFU against its own GEMM rate, its GEMM rate, achieved GFLOP/s) lists per round."""
    out = {}
    for r in ours:
        if r["preset"] != preset:
            continue
        for run in r["runs"]:
            gemm_rate = r["gemm"]["gflops_bf16" if run["precision"] == "bf16" else "gflops"]
            out.setdefault("dbranch " + run["precision"], []).append(
                (run["tokens_per_s"], run["mfu"], gemm_rate, run["gflops"]))
    for r in torch_rows:
        if r["preset"] == preset:
            out.setdefault("PyTorch " + r["precision"], []).append(
                (r["tokens_per_s"], r["mfu"], r["gemm_gflops"], r["gflops"]))
    return out
print("| config | arm | tok/s | GEMM rate (own precision) | MFU (own GEMM rate) | MFU (AMX peak) |")
print("|---|---|---|---|---|---|")
medians = {}
for preset in ("baby", "char"):
    per_arm = arms(preset)
    for name in ("PyTorch fp32", "PyTorch bf16", "dbranch fp32", "dbranch bf16"):
        if name not in per_arm:
            continue
        tps, mfu, rate, gflops = (med([x[i] for x in per_arm[name]]) for i in range(4))
        medians[(preset, name)] = tps
        amx = f"{100 * gflops / peak:.1f}%" if peak else "n/a"
        print(f"| {preset} | {name} | {tps:.0f} | {rate:.1f} GFLOP/s | {100 * mfu:.0f}% | {amx} |")
print("\n| config | ours bf16 / ours fp32 | ours bf16 / torch bf16 | torch bf16 / torch fp32 |")
print("|---|---|---|---|")
for preset in ("baby", "char"):
    m = lambda name: medians.get((preset, name), float("nan"))
    if (preset, "dbranch fp32") in medians:
        print(f"| {preset} | {m('dbranch bf16') / m('dbranch fp32'):.2f}x | {m('dbranch bf16') / m('PyTorch bf16'):.2f}x "
              f"| {m('PyTorch bf16') / m('PyTorch fp32'):.2f}x |")
print()
# Every round, in order: on a shared machine the spread says how much the load moved the medians.
for preset in ("baby", "char"):
    per_arm = arms(preset)
    if not per_arm:
        continue
    names = ("PyTorch fp32", "PyTorch bf16", "dbranch fp32", "dbranch bf16")
    rounds = zip(*(per_arm[n] for n in names))
    print(f"{preset} rounds, tokens/s " + " / ".join(names) + ": " +
          ", ".join(" / ".join(f"{x[0]:.0f}" for x in rnd) for rnd in rounds))
    steps = [r["ratios"]["step"] for r in ours if r["preset"] == preset]
    print(f"{preset} dbranch bf16 / fp32 step time, per round (interleaved steps): " +
          ", ".join(f"{s:.3f}x" for s in steps))
EOF

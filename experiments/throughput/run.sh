#!/usr/bin/env bash
# Training throughput of dbranch against PyTorch, side by side, on the
# nanoGPT "baby" and "char" configs (experiments/configs/nanogpt_*.ini) at 2
# threads: installs Debian's python3-torch if it is missing, builds dbranch,
# then alternates `dbranch bench train` and torch_nanogpt.py runs (ROUNDS
# rounds, so a change in machine load hits both alike) and prints a table of
# median tokens/s, the ratio, MFU against each one's own GEMM rate, the
# Decode-Branch / baseline time ratio and peak RSS against the closed form.
#
# Usage: experiments/throughput/run.sh [--rounds R] [--steps N] [--threads K] [--presets "baby char"]
#                                      [--build-dir DIR] [--out FILE.json]
# The raw JSON lines of every run go to --out (default: a file under /tmp).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS=3
STEPS=20
THREADS=2
PRESETS="baby char"
BUILD_DIR="$ROOT/build-throughput"
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --presets) PRESETS="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || OUT="$(mktemp /tmp/dbranch_throughput_XXXXXX.json)"

. "$ROOT/experiments/throughput/torch_python.sh" # PYTHON, with torch installed if it was missing

echo "== building dbranch in $BUILD_DIR" >&2
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target dbranch -j2 >/dev/null
DBRANCH="$BUILD_DIR/dbranch"

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" BLIS_NUM_THREADS="$THREADS"
: >"$OUT"
for round in $(seq 1 "$ROUNDS"); do
    for preset in $PRESETS; do
        steps="$STEPS"
        [ "$preset" = char ] && steps=$(( STEPS / 2 > 5 ? STEPS / 2 : 5 ))
        echo "== round $round/$ROUNDS, $preset: dbranch" >&2
        "$DBRANCH" bench train --preset "$preset" --set train.precision=fp32 --threads "$THREADS" --steps "$steps" --json 2>/dev/null |
            "$PYTHON" -c "import json,sys; r=json.load(sys.stdin); r['impl']='dbranch'; r['preset']='$preset'; print(json.dumps(r))" >>"$OUT"
        echo "== round $round/$ROUNDS, $preset: torch" >&2
        "$PYTHON" "$ROOT/experiments/throughput/torch_nanogpt.py" --preset "$preset" --threads "$THREADS" \
            --steps "$steps" --json |
            "$PYTHON" -c "import json,sys; r=json.load(sys.stdin); r['impl']='torch'; print(json.dumps(r))" >>"$OUT"
    done
    if [[ " $PRESETS " == *" char "* ]]; then
        echo "== round $round/$ROUNDS, char: dbranch baseline vs Decode-Branch" >&2
        "$DBRANCH" bench train --preset char --set train.precision=fp32 --threads "$THREADS" --steps 5 --warmup 2 --compare-branch \
            --no-gemm-probe --json 2>/dev/null |
            "$PYTHON" -c "import json,sys; r=json.load(sys.stdin); r['impl']='dbranch-compare'; r['preset']='char'; print(json.dumps(r))" >>"$OUT"
    fi
done

"$PYTHON" - "$OUT" "$THREADS" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
threads = sys.argv[2]
def runs(impl, preset):
    return [r for r in rows if r["impl"] == impl and r["preset"] == preset]
def med(values):
    return statistics.median(values) if values else float("nan")
print(f"\n{threads} threads, median over rounds (raw runs: {sys.argv[1]})\n")
print("| config | dbranch tok/s | PyTorch tok/s | ratio | dbranch MFU (GEMM rate) | PyTorch MFU (GEMM rate) | FLOPs/token |")
print("|---|---|---|---|---|---|---|")
for preset in ("baby", "char"):
    ours, torch = runs("dbranch", preset), runs("torch", preset)
    if not ours or not torch:
        continue
    ours_tps = med([r["runs"][0]["tokens_per_s"] for r in ours])
    torch_tps = med([r["tokens_per_s"] for r in torch])
    ours_mfu = med([r["runs"][0]["mfu"] for r in ours])
    ours_gemm = med([r["gemm"]["gflops"] for r in ours])
    torch_mfu = med([r["mfu"] for r in torch])
    torch_gemm = med([r["gemm_gflops"] for r in torch])
    flops = ours[0]["runs"][0]["flops_per_token"]
    print(f"| {preset} | {ours_tps:.0f} | {torch_tps:.0f} | {ours_tps / torch_tps:.2f}x | "
          f"{100 * ours_mfu:.0f}% ({ours_gemm:.0f} GFLOP/s) | {100 * torch_mfu:.0f}% ({torch_gemm:.0f} GFLOP/s) | "
          f"{flops / 1e6:.2f} M |")
print()
# Every round, in order: on a shared machine the spread says how much the load moved the medians.
for preset in ("baby", "char"):
    ours, torch = runs("dbranch", preset), runs("torch", preset)
    if ours and torch:
        pairs = ", ".join(f"{o['runs'][0]['tokens_per_s']:.0f} / {t['tokens_per_s']:.0f}" for o, t in zip(ours, torch))
        cpu = ", ".join(f"{o['runs'][0]['forward_backward_cpu_ms']:.1f}" for o in ours)
        print(f"{preset} rounds, tokens/s dbranch / PyTorch: {pairs}; dbranch thread 0 CPU ms in forward+backward: {cpu}")
print()
for preset in ("baby", "char"):
    ours = runs("dbranch", preset)
    if ours:
        rss = med([r["peak_rss_bytes"] for r in ours])
        closed = ours[0]["closed_form_bytes"]
        print(f"{preset}: peak RSS {rss / 1e6:.1f} MB vs closed form {closed / 1e6:.1f} MB "
              f"(params + grads + Adam + activations): {rss / closed:.2f}x")
compare = runs("dbranch-compare", "char")
if compare:
    step = med([r["ratios"]["step"] for r in compare])
    fb = med([r["ratios"]["forward_backward"] for r in compare])
    print(f"char: Decode-Branch / baseline time, forward+backward {fb:.2f}x, whole step {step:.2f}x")
EOF

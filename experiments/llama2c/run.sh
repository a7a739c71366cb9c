#!/usr/bin/env bash
# Decode speed of dbranch against llama2.c's run.c, side by side (issue 5):
# the same LLaMA shapes (experiments/configs/llama2c_{110m,15m}.ini, fp32,
# shared classifier), random weights, greedy decoding (llama2.c -t 0, so no
# top-p sampling), the same thread count. Builds run.c from a llama2.c source
# tree the way its Makefile's `runomp` target does, in a temp dir OUTSIDE the
# repo (no llama2.c code enters the repo), writes the model files with
# make_model.py, then per round and shape runs back to back (pair.py):
#   run MODEL -z TOKENIZER -t 0 -n STEPS -i PROMPT   -> its "achieved tok/s"
#   dbranch bench decode --config ... --prompt-len 1 --tokens STEPS-1 --probe-every 0 --json
# and prints a table (llama2.c tok/s, ours, ratio, read-probe GB/s, other
# load) and the medians over rounds.
#
# Matching what is timed: llama2.c runs forward() once per position, prompt
# positions included, and its tok/s is (STEPS-1) / time of positions
# 1..STEPS-1 (the timer starts after position 0). Ours: prefill position 0,
# then decode steps at positions 1..STEPS-1; "ours" is the mean over those
# steps (total time / steps), so the KV cache lengths are the same and a slow
# step counts as it does in llama2.c's total. The bench's probe passes run
# before and after decoding (--probe-every 0), so neither program is
# interrupted mid-run; the probe (best pass, GB/s) is the yardstick of the
# same run.
#
# Usage: experiments/llama2c/run.sh --llama2c DIR [--rounds N] [--steps S] [--threads K]
#            [--shapes "15m 110m"] [--dbranch BIN | --build-dir DIR] [--wrap CMD]
#            [--tsv FILE] [--quiet-wait SECONDS] [--reps R] [--weights fp32,bf16] [--summary-only]
#   --wrap CMD     prefix for each (round, shape) pair, e.g. a script that pauses
#                  background jobs while its arguments run
#   --tsv FILE     append the rows to FILE (kept across calls); the table and
#                  medians cover every row in FILE, so rounds can be run by
#                  separate calls; --summary-only just prints them.
#   --quiet-wait S before a pair, wait up to S seconds (default 60) for a
#                  second with less than 0.15 cores of other load.
#   --reps R       run each pair R times in a row (llama2.c, ours, llama2.c,
#                  ...), one row each (round N.1 .. N.R); default 1.
#   --weights LIST ours in each weight format of LIST (fp32, bf16: `bench decode
#                  --weights`), one row each after the same llama2.c run;
#                  default fp32. bf16 rows add ours bf16 / fp32 and bf16 /
#                  llama2.c to the summary (issue 12's decode targets).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/experiments/llama2c"
LLAMA2C=""
ROUNDS=3
STEPS=256
THREADS=2
SHAPES="15m 110m"
DBRANCH=""
BUILD_DIR="$ROOT/build-llama2c"
WRAP=""
TSV=""
QUIET_WAIT=60
REPS=1
WEIGHTS=fp32
SUMMARY_ONLY=0
PROMPT="Once upon a time"
while [ $# -gt 0 ]; do
    case "$1" in
    --llama2c) LLAMA2C="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --shapes) SHAPES="$2"; shift 2 ;;
    --dbranch) DBRANCH="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --wrap) WRAP="$2"; shift 2 ;;
    --tsv) TSV="$2"; shift 2 ;;
    --quiet-wait) QUIET_WAIT="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --weights) WEIGHTS="$2"; shift 2 ;;
    --summary-only) SUMMARY_ONLY=1; shift ;;
    -h | --help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done

# numpy lives in the system interpreter (a pyenv python3 on PATH may lack it).
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=python3

if [ "$SUMMARY_ONLY" = 1 ]; then
    [ -n "$TSV" ] || { echo "run.sh: --summary-only needs --tsv FILE" >&2; exit 2; }
    exec "$PYTHON" "$HERE/summarize.py" "$TSV"
fi
[ -n "$LLAMA2C" ] && [ -f "$LLAMA2C/run.c" ] || { echo "run.sh: --llama2c DIR must hold llama2.c's run.c" >&2; exit 2; }
[ "$STEPS" -ge 2 ] || { echo "run.sh: --steps must be >= 2" >&2; exit 2; }

WORK="$(mktemp -d /tmp/dbranch_llama2c_XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
[ -n "$TSV" ] || TSV="$WORK/results.tsv"
touch "$TSV"

echo "== building llama2.c run.c in $WORK (gcc -Ofast -fopenmp -march=native)" >&2
gcc -Ofast -fopenmp -march=native "$LLAMA2C/run.c" -lm -o "$WORK/run"
if [ -z "$DBRANCH" ]; then
    echo "== building dbranch in $BUILD_DIR" >&2
    cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD_DIR" --target dbranch -j2 >/dev/null
    DBRANCH="$BUILD_DIR/dbranch"
fi
for shape in $SHAPES; do
    echo "== model files, $shape" >&2
    "$PYTHON" "$HERE/make_model.py" --shape "$shape" --out "$WORK/$shape" >&2
done

for call_round in $(seq 1 "$ROUNDS"); do
    for shape in $SHAPES; do
        # rounds are numbered per shape over the whole --tsv file (calls may add to it)
        round=$(( $(awk -F'\t' -v s="$shape" '$1 == s {split($2, r, "."); print r[1]}' "$TSV" | sort -u | wc -l) + 1 ))
        echo "== round $call_round/$ROUNDS ($shape round $round): llama2.c then dbranch" >&2
        # $WRAP unquoted on purpose: empty, or a command (with arguments) to run the pair under
        row=$($WRAP "$PYTHON" "$HERE/pair.py" "$WORK" "$DBRANCH" "$ROOT" "$shape" "$round" "$STEPS" "$THREADS" \
            "$PROMPT" "$QUIET_WAIT" "$REPS" "$WEIGHTS")
        printf '%s\n' "$row" >>"$TSV"
        printf '%s\n' "$row" | awk -F'\t' '{printf "   llama2.c %.2f tok/s, ours %s %.2f tok/s (ratio %.3f), " \
            "probe %.1f GB/s; other load %.2f / %.2f cores\n", $3, $12, $4, $4 / $3, $6, $10, $11}' >&2
    done
done
echo
"$PYTHON" "$HERE/summarize.py" "$TSV"

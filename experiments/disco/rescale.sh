#!/usr/bin/env bash
# The DiscoLoop study's follow-up probe: retrains seed S of each arm exactly
# as study.sh did (its command.txt, another --out; a run is bit-for-bit
# repeatable at one thread, which the script checks against the study's
# eval_val.json) and keeps the checkpoint long enough to run today's
# `dbranch analyze --bridge`, whose last column (the state's RMS) the study's
# runs predate. The RMS says how large DiscoLoop's injection a RMSNorm(Phi)
# is against the stream it is added to.
#
# Usage: experiments/disco/rescale.sh [--seed S] [--arms "loop disco disco-learned"]
# Writes experiments/disco/rescale/<arm>_seed<S>_bridge_{val,train}.txt (the
# temporary checkpoint's path written as CKPT).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DBRANCH=${DBRANCH_BINARY:-$ROOT/build/dbranch}
SEED=1 ARMS="loop disco disco-learned"
while [ $# -gt 0 ]; do
    case $1 in
    --seed) SEED=$2; shift 2 ;;
    --arms) ARMS=$2; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rescale.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
cd "$ROOT"
OUT=experiments/disco/rescale
mkdir -p "$OUT"
for arm in $ARMS; do
    run=experiments/disco/$arm/seed$SEED
    [ -f "$OUT/${arm}_seed${SEED}_bridge_val.txt" ] && continue
    tmp=$(mktemp -d)
    read -r -a command <<<"$(sed -e 's/^dbranch //' -e "s|--out [^ ]*|--out $tmp/run|" "$run/command.txt")"
    echo "== $arm seed $SEED" >&2
    OMP_NUM_THREADS=1 "$DBRANCH" "${command[@]}" >/dev/null
    data=$(grep -o 'data.path=[^ ]*' "$run/command.txt" | cut -d= -f2)
    OMP_NUM_THREADS=1 "$DBRANCH" eval --model "$tmp/run/checkpoint.h5" --data "$data" --json --threads 1 >"$tmp/eval_val.json"
    if ! diff <(grep -o '"accuracy".*' "$tmp/eval_val.json") <(grep -o '"accuracy".*' "$run/eval_val.json") >/dev/null; then
        echo "rescale.sh: $arm seed $SEED did not reproduce $run/eval_val.json" >&2
        exit 1
    fi
    for split in val train; do
        OMP_NUM_THREADS=1 "$DBRANCH" analyze --bridge --model "$tmp/run/checkpoint.h5" --data "$data" --split $split \
            --threads 1 | sed "s|$tmp/run/checkpoint.h5|CKPT|" >"$OUT/${arm}_seed${SEED}_bridge_$split.txt"
    done
    rm -rf "$tmp"
done
grep -H 'r1' "$OUT"/*_seed"${SEED}"_bridge_val.txt

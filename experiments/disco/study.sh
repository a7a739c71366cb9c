#!/usr/bin/env bash
# The DiscoLoop study (issue 14, SPEC §6.6): a looped llama (1 layer applied
# twice) with and without DiscoLoop on the entity-disjoint two-hop task of
# `dbranch prepare --synthetic two-hop`: train on every atomic fact of graphs
# A and B plus graph A's two-hop queries, test two-hop on graph B. The file
# is labelled (--answers labels): a query's r1 position targets its bridge,
# as the atomic fact with the same prefix does, not the query's r2. Per run:
#   eval --split val      OOD accuracy (graph B two-hop, answer at input 3)
#   eval --split train    atomic-fact accuracy (input 2) and graph A two-hop (input 3)
#   analyze --bridge      the bridge-state cosines on val (B) and train (A)
# Each run is trained once: a run folder with done is skipped (the study
# resumes); the checkpoint is deleted and the log kept gzipped.
#
# Usage: experiments/disco/study.sh [--arms "loop disco disco-learned"] [--seeds "1 2 3"]
#            [--tokens N] [--entities N] [--threads K]
# Writes experiments/disco/<arm>/seed<S>/, table.md, table.tsv and runs.md (table.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DBRANCH=${DBRANCH_BINARY:-$ROOT/build/dbranch}
SEEDS="1 2 3" TOKENS=1000000 THREADS=1 ENTITIES=50 RELATIONS=4 ARMS="loop disco disco-learned"
while [ $# -gt 0 ]; do
    case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    --arms) ARMS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --entities) ENTITIES=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "study.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$DBRANCH" ] || { echo "study.sh: $DBRANCH not built (cmake --build build)" >&2; exit 1; }
cd "$ROOT"
DATA=data_out/two_hop_${ENTITIES}x${RELATIONS}_labels.h5
VOCAB=$((2 + RELATIONS + 2 * ENTITIES))
if [ ! -f "$DATA" ]; then
    mkdir -p data_out
    "$DBRANCH" prepare --synthetic two-hop --answers labels --entities "$ENTITIES" --relations "$RELATIONS" --seed 1 \
        --out "$DATA" >/dev/null
fi
OUT=experiments/disco
arm_sets() { # arm -> its --set options
    case $1 in
    loop) echo "--set model.disco=0" ;;
    disco) echo "--set model.disco=1" ;;
    disco-learned) echo "--set model.disco=1 --set model.disco_gate=learned" ;;
    *) echo "study.sh: unknown arm '$1'" >&2; exit 2 ;;
    esac
}
for arm in $ARMS; do
    read -r -a sets <<<"$(arm_sets "$arm")"
    for seed in $SEEDS; do
        dir=$OUT/$arm/seed$seed
        [ -f "$dir/done" ] && continue
        rm -rf "$dir" && mkdir -p "$dir"
        command=(train --config experiments/configs/study_disco.ini --set data.path="$DATA" --set model.vocab_size=$VOCAB
                 --set train.seed="$seed" --set train.tokens="$TOKENS" "${sets[@]}" --out "$dir" --threads "$THREADS")
        echo "== $arm seed $seed" >&2
        start=$(date +%s)
        OMP_NUM_THREADS=$THREADS "$DBRANCH" "${command[@]}" >"$dir/train.txt"
        echo $(($(date +%s) - start)) >"$dir/seconds"
        printf 'dbranch %s\n' "${command[*]}" >"$dir/command.txt"
        for split in val train; do
            OMP_NUM_THREADS=$THREADS "$DBRANCH" eval --model "$dir/checkpoint.h5" --data "$DATA" --split $split --json \
                --threads "$THREADS" >"$dir/eval_$split.json"
            OMP_NUM_THREADS=$THREADS "$DBRANCH" analyze --bridge --model "$dir/checkpoint.h5" --data "$DATA" \
                --split $split --threads "$THREADS" >"$dir/bridge_$split.txt"
        done
        rm -f "$dir/checkpoint.h5" "$dir/train.lock"
        gzip -9f "$dir/log.jsonl"
        touch "$dir/done"
    done
done

# table.tsv, table.md (per seed, then mean ± sd per arm) and runs.md.
python3 experiments/disco/table.py "$OUT" "$ENTITIES" "$ARMS" "$SEEDS"
cat "$OUT/table.md"

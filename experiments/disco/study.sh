#!/usr/bin/env bash
# The DiscoLoop study (issue 14, SPEC §6.6): a looped llama (1 layer applied
# twice) with and without DiscoLoop on the entity-disjoint two-hop task of
# `dbranch prepare --synthetic two-hop`: train on every atomic fact of graphs
# A and B plus graph A's two-hop queries, test two-hop on graph B. Per run:
#   eval --split val      OOD accuracy (graph B two-hop, answer at input 3)
#   eval --split train    atomic-fact accuracy (input 2) and graph A two-hop (input 3)
#   analyze --bridge      the bridge-state cosines on val (B) and train (A)
# Each run is trained once: a run folder with done is skipped (the study
# resumes); the checkpoint is deleted and the log kept gzipped.
#
# Usage: experiments/disco/study.sh [--arms "loop disco disco-learned"] [--seeds "1 2 3"]
#            [--tokens N] [--entities N] [--threads K]
# Writes experiments/disco/<arm>/seed<S>/, table.md, table.tsv and runs.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DBRANCH=${DBRANCH_BINARY:-$ROOT/build/dbranch}
SEEDS="1 2 3" TOKENS=2500000 THREADS=1 ENTITIES=50 RELATIONS=4 ARMS="loop disco"
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
DATA=data_out/two_hop_${ENTITIES}x${RELATIONS}.h5
VOCAB=$((2 + RELATIONS + 2 * ENTITIES))
if [ ! -f "$DATA" ]; then
    mkdir -p data_out
    "$DBRANCH" prepare --synthetic two-hop --entities "$ENTITIES" --relations "$RELATIONS" --seed 1 --out "$DATA" >/dev/null
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

# table.tsv: one row per run; table.md: the same per seed, then mean ± sd per arm.
python3 - "$OUT" "$ENTITIES" "$ARMS" "$SEEDS" <<'PY'
import json, os, statistics, sys
out, N, arms, seeds = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
cols = ["atomic", "A 2-hop", "B 2-hop (OOD)", "cos r1 after 1", "other", "lens r1 after 1",
        "cos r1 into 2", "cos r1 after 1 (A)", "other (A)"]
def acc(path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    return {t: a for t, a, n in next(l for l in lines if "per_position" in l)["per_position"]}
def bridge(path):
    rows = {}
    for l in open(path):
        if l.startswith("bridge "):
            f = l.split()
            rows[(f[1], int(f[2]), f[3])] = [float(x) for x in f[4:]]
    return rows
table = {}
for arm in arms:
    for seed in seeds:
        d = f"{out}/{arm}/seed{seed}"
        if not os.path.exists(f"{d}/done"): continue
        tr, va = acc(f"{d}/eval_train.json"), acc(f"{d}/eval_val.json")
        bv, bt = bridge(f"{d}/bridge_val.txt"), bridge(f"{d}/bridge_train.txt")
        table[(arm, seed)] = [tr[2], tr[3], va[3], bv[("after", 1, "r1")][0], bv[("after", 1, "r1")][1],
                              bv[("after", 1, "r1")][4], bv[("into", 2, "r1")][0], bt[("after", 1, "r1")][0],
                              bt[("after", 1, "r1")][1]]
with open(f"{out}/table.tsv", "w") as f:
    f.write("arm\tseed\t" + "\t".join(cols) + "\n")
    for (arm, seed), v in table.items():
        f.write(f"{arm}\t{seed}\t" + "\t".join(f"{x:.4f}" for x in v) + "\n")
with open(f"{out}/table.md", "w") as f:
    f.write(f"Accuracy: argmax over the vocabulary at the answer (chance if the graph is known: 1/{N} = {1/N:.3f}). "
            "cos: mean cosine of the stack's output after application 1 at the r1 position to tok_emb[bridge] "
            "(tied head: = W_out[bridge]); other: the mean over the bridge graph's other entities; lens: fraction "
            "whose head on Norm_f(state) is the bridge; into 2: the input of application 2 (DiscoLoop's H~). "
            "Val = graph B (OOD) unless marked (A) = graph A train queries.\n\n")
    f.write("| arm | seed | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 2) + "\n")
    for (arm, seed), v in table.items():
        f.write(f"| {arm} | {seed} | " + " | ".join(f"{x:.3f}" for x in v) + " |\n")
    for arm in arms:
        runs = [v for (a, s), v in table.items() if a == arm]
        if not runs: continue
        cells = []
        for i in range(len(cols)):
            xs = [r[i] for r in runs]
            sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
            cells.append(f"{statistics.mean(xs):.3f} ± {sd:.3f}")
        f.write(f"| **{arm}** | mean ± sd (n={len(runs)}) | " + " | ".join(cells) + " |\n")
with open(f"{out}/runs.md", "w") as f:
    f.write("# Runs of the DiscoLoop study\n\nWritten by experiments/disco/study.sh from the run folders (do not "
            "edit): every run, the command that trained it (from the repository root), its files.\n\n"
            "| arm | seed | seconds | log | command |\n|---|---|---|---|---|\n")
    for (arm, seed) in table:
        d = f"{arm}/seed{seed}"
        cmd = open(f"{out}/{d}/command.txt").read().strip()
        sec = open(f"{out}/{d}/seconds").read().strip()
        f.write(f"| {arm} | {seed} | {sec} | [log]({d}/log.jsonl.gz), [eval val]({d}/eval_val.json), "
                f"[eval train]({d}/eval_train.json), [bridge val]({d}/bridge_val.txt), "
                f"[bridge train]({d}/bridge_train.txt) | `{cmd}` |\n")
PY
cat "$OUT/table.md"

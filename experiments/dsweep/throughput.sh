#!/usr/bin/env bash
# Training throughput of the dsweep study's arms (experiments/dsweep/README.md,
# "Cost"): short one-thread runs of the recipe config on the large BPE corpus,
# baseline and twin at V 8192 and V 4096, interleaved in REPS rounds; prints
# each run's steady-state tokens/s (steps 10..STEPS from the log's step lines,
# so neither the first steps' arena growth nor the final eval counts) and the
# median per arm. Speeds on a shared machine are noisy: compare the ratios.
#   experiments/dsweep/throughput.sh [STEPS [REPS]]   (defaults 30, 2)
# Needs data_out/large_bpe8192.h5 and data_out/large_bpe4096.h5
# (dbranch prepare --preset large --tokenizer bpe --vocab V --out ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
DBRANCH=${DBRANCH_BINARY:-build/dbranch}
STEPS=${1:-30}
REPS=${2:-2}
WORK=$(mktemp -d /tmp/dbranch_dsweep_tp.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
arms="base8192 twin8192 tables8192 base4096 twin4096"
rate() { # log: tokens/s between step 10 and the last step
    grep '"type":"step"' "$1" | sed -n 's/.*"step":\([0-9]*\),"tokens":\([0-9]*\).*"elapsed":\([0-9.]*\).*/\1 \2 \3/p' |
        awk '$1 == 10 { t0 = $2; e0 = $3 } { t = $2; e = $3 } END { printf "%.0f\n", (t - t0) / (e - e0) }'
}
for rep in $(seq 1 "$REPS"); do
    for arm in $arms; do
        v=${arm#"${arm%%[0-9]*}"}
        sets=(--set "data.path=data_out/large_bpe$v.h5" --set "model.vocab_size=$v")
        case $arm in twin*) sets+=(--set model.branch=decode) ;; tables*) sets+=(--set model.tok_emb_tables=2) ;; esac
        "$DBRANCH" train --config experiments/configs/paper_recipe.ini "${sets[@]}" --set train.print_every=1 \
            --set train.eval_every=100000 --set train.eval_windows=1 --set train.checkpoint_every=0 \
            --tokens $((STEPS * 4096)) --threads 1 --out "$WORK/$arm-$rep" >"$WORK/$arm-$rep.txt" 2>&1
        r=$(rate "$WORK/$arm-$rep/log.jsonl")
        echo "$rep $arm $r" | tee -a "$WORK/rates"
    done
done
echo "median tokens/s over $REPS rounds ($STEPS steps of 16 x 256, one thread; load $(cut -d' ' -f1-3 /proc/loadavg)):"
for arm in $arms; do
    awk -v a="$arm" '$2 == a { print $3 }' "$WORK/rates" | sort -n |
        awk -v a="$arm" '{ x[NR] = $1 } END { m = NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2; printf "  %-11s %6.0f\n", a, m }'
done

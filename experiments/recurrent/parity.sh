#!/usr/bin/env bash
# The Recurrent Transformer's running-parity test (issue 14, SPEC §6.4):
# a 1-layer recurrent llama against 1- and 2-layer standard ones, answer
# accuracy by position on 500 held-out records (`dbranch eval` on the record
# file). Two formats (`dbranch prepare --synthetic prefix-sum --answers`):
#   every  ">" x0 a0 x1 a1 ... x31 a31, a_i = parity of x0..xi: each answer
#          sees the previous one, so a_i = a_(i-1) xor x_i is a local step;
#   final  ">" x0 .. x(m-1) "=" a ".", m uniform in 1..32: one answer, the
#          parity of all m digits, which has to be carried along;
#   labels x0 .. x31 with a_i the stored target of position i (a labelled
#          record file): every position supervised, no answer ever an
#          input; the paper's setting.
# Each run is trained once: a run folder with eval.json is skipped; its
# per-step training log is kept gzipped (log.jsonl.gz).
#
# Usage: experiments/recurrent/parity.sh [--answers every|final|labels] [--seeds "1 2 3"] [--tokens N] [--threads K]
# Writes experiments/recurrent/parity-<answers>/<arm>/seed<S>/ and its table.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DBRANCH=${DBRANCH_BINARY:-$ROOT/build/dbranch}
SEEDS="1 2 3" TOKENS=3000000 THREADS=1 ANSWERS=every
while [ $# -gt 0 ]; do
    case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    --answers) ANSWERS=$2; shift 2 ;;
    --tokens) TOKENS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "parity.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$DBRANCH" ] || { echo "parity.sh: $DBRANCH not built (cmake --build build)" >&2; exit 1; }
cd "$ROOT"
case $ANSWERS in
every) DATA=data_out/parity32.h5 WINDOW=64 ;; # R = 65
final) DATA=data_out/parity32_final.h5 WINDOW=34 ;; # R = 35
labels) DATA=data_out/parity32_labels.h5 WINDOW=32 ;; # R = 32, a target per position
*) echo "parity.sh: --answers must be every, final or labels" >&2; exit 2 ;;
esac
if [ ! -f "$DATA" ]; then
    mkdir -p data_out
    "$DBRANCH" prepare --synthetic prefix-sum --answers "$ANSWERS" --length 32 --modulus 2 --train-records 50000 \
        --val-records 500 --seed 1 --out "$DATA" >/dev/null
fi
OUT=experiments/recurrent/parity-$ANSWERS
ARMS=("recurrent-1L:--set model.recurrent=1 --set model.n_layer=1"
      "standard-1L:--set model.n_layer=1"
      "standard-2L:--set model.n_layer=2")
for arm_spec in "${ARMS[@]}"; do
    arm=${arm_spec%%:*}
    read -r -a sets <<<"${arm_spec#*:}"
    for seed in $SEEDS; do
        dir=$OUT/$arm/seed$seed
        [ -f "$dir/eval.json" ] && continue
        rm -rf "$dir" && mkdir -p "$(dirname "$dir")"
        command=(train --config experiments/configs/study_parity.ini --set data.path="$DATA" --set train.seed="$seed"
                 --set train.tokens="$TOKENS" --set model.block_size=$WINDOW --set train.seq_len=$WINDOW
                 "${sets[@]}" --out "$dir" --threads "$THREADS")
        echo "== $arm seed $seed" >&2
        OMP_NUM_THREADS=$THREADS "$DBRANCH" "${command[@]}" >/dev/null
        printf 'dbranch %s\n' "${command[*]}" >"$dir/command.txt"
        OMP_NUM_THREADS=$THREADS "$DBRANCH" eval --model "$dir/checkpoint.h5" --data "$DATA" --json \
            --threads "$THREADS" >"$dir/eval.json.tmp"
        rm -f "$dir/checkpoint.h5" "$dir/train.lock"
        gzip -9 "$dir/log.jsonl"
        mv "$dir/eval.json.tmp" "$dir/eval.json"
    done
done

# table.md: accuracy over all answers, over the first 8 and over the last 8
# (every: answers 0-7 and 24-31, at inputs 2i+1; final: after 1-8 and 25-32
# digits, at input m+1), per seed; per_position.tsv: arm, seed, answer (i, or
# the digit count m), accuracy.
{
    echo "| arm | seed | val loss | accuracy, all answers | first 8 | last 8 |"
    echo "|---|---|---|---|---|---|"
    for arm_spec in "${ARMS[@]}"; do
        arm=${arm_spec%%:*}
        for seed in $SEEDS; do
            f=$OUT/$arm/seed$seed/eval.json
            [ -f "$f" ] || continue
            python3 - "$f" "$arm" "$seed" "$ANSWERS" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
loss = next(l["loss"] for l in lines if "loss" in l)
acc = next(l for l in lines if "per_position" in l)
pp = {int(t): a for t, a, n in acc["per_position"]}
at = {"every": lambda i: 2 * i + 1, "final": lambda m: m + 1, "labels": lambda i: i}[sys.argv[4]]
first, last = (range(1, 9), range(25, 33)) if sys.argv[4] == "final" else (range(8), range(24, 32))
early = sum(pp[at(i)] for i in first) / 8
late = sum(pp[at(i)] for i in last) / 8
print(f"| {sys.argv[2]} | {sys.argv[3]} | {loss:.4f} | {acc['accuracy']:.4f} | {early:.4f} | {late:.4f} |")
PY
        done
    done
} >"$OUT/table.md"
{
    printf 'arm\tseed\tanswer\taccuracy\n'
    for arm_spec in "${ARMS[@]}"; do
        arm=${arm_spec%%:*}
        for seed in $SEEDS; do
            f=$OUT/$arm/seed$seed/eval.json
            [ -f "$f" ] || continue
            python3 -c '
import json, sys
acc = next(json.loads(l) for l in open(sys.argv[1]) if "per_position" in l)
for t, a, n in acc["per_position"]:
    answer = {"every": (t - 1) // 2, "final": t - 1, "labels": t}[sys.argv[4]]
    print(f"{sys.argv[2]}\t{sys.argv[3]}\t{answer}\t{a:.4f}")' "$f" "$arm" "$seed" "$ANSWERS"
        done
    done
} >"$OUT/per_position.tsv"
# accuracy_by_position.png: the seeds' mean and range per answer and arm.
python3 - "$OUT/per_position.tsv" >"$OUT/accuracy_mean.tsv" <<'PY'
import collections, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
by = collections.OrderedDict()
for arm, seed, answer, acc in rows:
    by.setdefault((arm, int(answer)), []).append(float(acc))
for (arm, answer), accs in by.items():
    print(f"{arm}\t{answer}\t{sum(accs) / len(accs):.4f}\t{min(accs):.4f}\t{max(accs):.4f}")
PY
if command -v gnuplot >/dev/null 2>&1; then
    arms=""
    for arm_spec in "${ARMS[@]}"; do arms="$arms ${arm_spec%%:*}"; done
    gnuplot -e "data='$OUT/accuracy_mean.tsv'; arms='${arms# }'; out='$OUT/accuracy_by_position.png'; plot_title='running parity ($ANSWERS): accuracy by position, ${SEEDS// /,} seeds'" \
        experiments/plot/accuracy_by_position.gp
fi
cat "$OUT/table.md"

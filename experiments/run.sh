#!/usr/bin/env bash
# The studies of the Decode-Branch research issue, from training to tables
# and plots (experiments/RESULTS.md quotes what this writes):
#
#   matched    each family (nanogpt, llama, moe) as baseline and as
#              Decode-Branch twin on both corpora (kjv, pycode bytes): same
#              data order (same seed), token budget and optimizer settings
#   control    nanogpt on kjv: the twin against a baseline given the extra
#              compute another way (twice the layers; twice the tokens)
#   ablations  nanogpt on kjv: couple off, share off, branch_emb shared,
#              detach_primary, fixed alpha 0.5, branch-only readout, against
#              the adaptive default
#   moe        expert allocation on kjv: regime A top_k = 1, top_k_branch in
#              1, 2, 4; regime B top_k + top_k_branch = 4; replay and own
#              routing; validation loss beside decode cost (dbranch info:
#              experts and weight bytes per step; dbranch bench decode on the
#              trained model: ms/token)
#   all        the four, in that order
#
# Usage: experiments/run.sh STUDY [--quick] [--seeds "1 2"] [--tokens N]
#            [--families "nanogpt llama moe"] [--corpora "kjv pycode"]
#            [--threads K] [--out DIR] [--data-dir DIR] [--set section.key=value ...]
#   --quick     toy scale (d_model 32, T 32, a few steps): every study in
#               about a minute, for tests/test_cli_experiments.c; default
#               --out is then /tmp/dbranch_experiments_quick
#   --tokens N  override every config's token budget (the control study's
#               "twice the tokens" row gets 2N)
#   --families / --corpora restrict the matched study
#   --set K=V   passed to every `dbranch train` (e.g. train.eval_every=30)
#   --tables-only  train nothing: rebuild tables and plots from the finished
#               runs under OUT (rows with no finished seed show no numbers)
# Results: OUT/<study>/<row>/seed<S>/{log.jsonl,train.txt,command.txt}, and
# OUT/<study>/{table.md,table.tsv,*.png} (default OUT: experiments/results).
# Finished (row, seed) runs are skipped, so a stopped study resumes; delete a
# run's directory to redo it. Binary: $DBRANCH_BINARY, else built in
# $BUILD_DIR (default build/). Data: DATA_DIR/{kjv,pycode}_byte.h5, prepared
# on first use (default data_out/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Sleeping rather than spinning OpenMP workers: on a shared 2-core machine a
# spinning worker steals the core its partner needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
STUDY=$1
shift
case "$STUDY" in
matched | control | ablations | moe | all) ;;
-h | --help) usage; exit 0 ;;
*) echo "run.sh: unknown study '$STUDY' (matched|control|ablations|moe|all)" >&2; exit 2 ;;
esac

QUICK=0
SEEDS="1 2"
TOKENS_OVERRIDE=""
FAMILIES="nanogpt llama moe"
CORPORA="kjv pycode"
THREADS=2
OUT=""
DATA_DIR="$ROOT/data_out"
EXTRA_SETS=()
TABLES_ONLY=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; shift ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --tokens) TOKENS_OVERRIDE="$2"; shift 2 ;;
    --families) FAMILIES="$2"; shift 2 ;;
    --corpora) CORPORA="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --data-dir) DATA_DIR="$2"; shift 2 ;;
    --set) EXTRA_SETS+=(--set "$2"); shift 2 ;;
    --tables-only) TABLES_ONLY=1; shift ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    [ -n "$OUT" ] || OUT=/tmp/dbranch_experiments_quick
    # 12 steps of 4 x 32 tokens: enough to move the loss off ln 256.
    [ -n "$TOKENS_OVERRIDE" ] || TOKENS_OVERRIDE=1536
fi
[ -n "$OUT" ] || OUT="$ROOT/experiments/results"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# Runs start from the repository root and name files relative to it, so the
# committed commands and logs hold no machine's paths and rerun anywhere.
if [ -n "${DBRANCH_BINARY:-}" ] && [ "${DBRANCH_BINARY#/}" = "$DBRANCH_BINARY" ]; then
    DBRANCH_BINARY="$PWD/$DBRANCH_BINARY"
fi
cd "$ROOT"

# shellcheck source=lib/common.sh
. "$ROOT/experiments/lib/common.sh"
# shellcheck source=lib/table.sh
. "$ROOT/experiments/lib/table.sh"
# shellcheck source=lib/plot.sh
. "$ROOT/experiments/lib/plot.sh"
exp_find_binary

# Declares a row of the current study and trains it for every seed:
#   row NAME REFERENCE CONFIG CORPUS [--set k=v ...]
# REFERENCE is the row its loss is compared against ("-": none).
row() {
    local name=$1 ref=$2 config=$3 corpus=$4
    shift 4
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$ref" "$config" "$corpus" "$*" >>"$OUT/$CURRENT/rows.tsv"
    local seed
    for seed in $SEEDS; do
        exp_train "$CURRENT" "$name" "$config" "$corpus" "$seed" "$@"
    done
}

begin_study() {
    CURRENT=$1
    mkdir -p "$OUT/$CURRENT"
    : >"$OUT/$CURRENT/rows.tsv"
    echo "== study $CURRENT -> $OUT/$CURRENT" >&2
}

end_study() {
    exp_table "$CURRENT"
    local name reference rest
    while IFS=$'\t' read -r name reference rest; do
        exp_row_curve "$CURRENT" "$name"
        [ "$reference" = - ] || exp_row_diff "$CURRENT" "$name" "$reference"
    done <"$OUT/$CURRENT/rows.tsv"
    echo "   table: $OUT/$CURRENT/table.md" >&2
}

BRANCH=(--set model.branch=decode)

study_matched() {
    begin_study matched
    local corpus family
    for corpus in $CORPORA; do
        for family in $FAMILIES; do
            row "$corpus-$family-base" - "study_$family.ini" "$corpus"
            row "$corpus-$family-branch" "$corpus-$family-base" "study_$family.ini" "$corpus" "${BRANCH[@]}"
        done
    done
    end_study
    local twins=()
    for corpus in $CORPORA; do
        for family in $FAMILIES; do
            exp_plot_curves matched "$corpus-$family" "$family on $corpus: baseline vs Decode-Branch (mean of seeds)" \
                "$corpus-$family-base" "$corpus-$family-branch"
            twins+=("$corpus-$family-branch")
        done
    done
    exp_plot_diffs matched all "Decode-Branch vs its baseline, paired by seed (below 0: the twin is better)" "${twins[@]}"
}

# The twin costs about one more pass of every shared matrix per token
# (`dbranch info`: branch row FLOPs ~ 0.8-0.9x the primary's), so the
# controls spend about twice the baseline's compute another way.
study_control() {
    begin_study control
    row base - study_nanogpt.ini kjv
    row branch base study_nanogpt.ini kjv "${BRANCH[@]}"
    row base-2x-layers base study_nanogpt.ini kjv --set model.n_layer=8
    TOKEN_FACTOR=2 row base-2x-tokens base study_nanogpt.ini kjv
    end_study
    exp_plot_curves control all "nanogpt on kjv: Decode-Branch vs compute-matched baselines" \
        base branch base-2x-layers base-2x-tokens
    # Not the 2x-tokens row: at a given token count it is mid-way down its own,
    # longer schedule, so the difference along training would mislead.
    exp_plot_diffs control all "nanogpt on kjv: each row vs the baseline, paired by seed" branch base-2x-layers
}

study_ablations() {
    begin_study ablations
    row base - study_nanogpt.ini kjv
    row branch base study_nanogpt.ini kjv "${BRANCH[@]}"
    row couple-off branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.couple=off
    row share-off branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.share=off
    row branch-emb-shared branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.branch_emb=shared
    row detach-primary branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.detach_primary=1
    row alpha-fixed-0.5 branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.mix_alpha_min=0.5 \
        --set model.mix_alpha_max=0.5
    row branch-only branch study_nanogpt.ini kjv "${BRANCH[@]}" --set model.mix_alpha_min=0 \
        --set model.mix_alpha_max=0
    end_study
    exp_plot_curves ablations all "nanogpt on kjv: Decode-Branch ablations" \
        base branch couple-off share-off branch-emb-shared detach-primary alpha-fixed-0.5 branch-only
    exp_plot_diffs ablations all "nanogpt on kjv: each ablation vs the default twin, paired by seed" \
        couple-off share-off branch-emb-shared detach-primary alpha-fixed-0.5 branch-only
}

# One MoE row: trains it, then records its decode cost from `dbranch info`
# (experts read per layer and weight bytes per decode step, grouped) and from
# `dbranch bench decode` on the first seed's trained weights (grouped
# ms/token, measured expert loads; the same process times the baseline path).
moe_row() { # name reference top_k top_k_branch routing|-
    local name=$1 ref=$2 top_k=$3 top_k_branch=$4 routing=$5
    local sets=(--set model.top_k="$top_k")
    [ "$routing" != - ] && sets+=("${BRANCH[@]}" --set model.top_k_branch="$top_k_branch" --set model.branch_routing="$routing")
    local first_seed=${SEEDS%% *}
    KEEP_CHECKPOINT=1 row "$name" "$ref" study_moe.ini kjv "${sets[@]}"
    local dir="$OUT/moe/$name" mode=grouped
    [ "$routing" = - ] && mode=baseline
    # dbranch info takes bare model keys: the row's settings (and the toy
    # shape in --quick) without the "model." prefix.
    local info_sets=() model_sets=("${sets[@]}") s
    if [ "$QUICK" = 1 ]; then
        exp_quick_sets "$ROOT/experiments/configs/study_moe.ini"
        model_sets=("${QUICK_SETS[@]}" "${sets[@]}")
    fi
    for s in "${model_sets[@]}"; do
        case "$s" in model.*) info_sets+=(--set "${s#model.}") ;; esac
    done
    if [ ! -f "$dir/cost.tsv" ]; then
        local info exact experts weight_bytes
        info=$("$DBRANCH" info "$ROOT/experiments/configs/study_moe.ini" "${info_sets[@]}")
        # "exact: ... weight bytes BASE[ / GROUPED / UNGROUPED]; ..." (one number without a branch)
        exact=$(printf '%s\n' "$info" | grep '^exact:')
        if [ "$mode" = baseline ]; then
            experts=$(printf '%s\n' "$info" | awk '$1 == "baseline" { print $NF }')
            weight_bytes=$(printf '%s\n' "$exact" | sed -n 's/.*weight bytes \([0-9]*\).*/\1/p')
        else
            experts=$(printf '%s\n' "$info" | awk '$1 == "Decode-Branch" && $2 == "grouped" { print $NF }')
            weight_bytes=$(printf '%s\n' "$exact" | sed -n 's/.*weight bytes [0-9]* \/ \([0-9]*\).*/\1/p')
        fi
        local ms="null" loads="null" ratio="null"
        local checkpoint="$dir/seed$first_seed/checkpoint.h5"
        if [ -f "$checkpoint" ]; then
            local bench_args=(bench decode --model "$(exp_relative "$checkpoint")" --threads "$THREADS" --json)
            [ "$QUICK" = 1 ] && bench_args+=(--prompt-len 4 --tokens 8 --probe-mib 8) || bench_args+=(--prompt-len 32 --tokens 64)
            if "$DBRANCH" "${bench_args[@]}" >"$dir/bench.json" 2>"$dir/bench.txt"; then
                local line
                line=$(grep "\"mode\": \"$mode\"" "$dir/bench.json" || true)
                ms=$(printf '%s' "$line" | sed -n 's/.*"decode_ms_per_token": \([^,]*\),.*/\1/p')
                loads=$(printf '%s' "$line" | sed -n 's/.*"expert_loads_per_token": \([^,]*\),.*/\1/p')
                ratio=$(printf '%s' "$line" | sed -n 's/.*"ms_ratio_to_baseline": \([^,}]*\).*/\1/p')
            else
                echo "   (bench decode failed for $name; see $dir/bench.txt)" >&2
            fi
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$experts" "$weight_bytes" "${ms:-null}" "${loads:-null}" \
            "${ratio:-null}" >"$dir/cost.tsv"
    fi
    rm -f "$dir"/seed*/checkpoint.h5
}

study_moe() {
    begin_study moe
    local k kb routing
    for k in 1 2 3; do moe_row "base-k$k" - "$k" 0 -; done
    for routing in replay own; do
        for kb in 1 2 4; do moe_row "A-k1-kb$kb-$routing" base-k1 1 "$kb" "$routing"; done
        for k in 1 2 3; do moe_row "B-k$k-kb$((4 - k))-$routing" "base-k$k" "$k" "$((4 - k))" "$routing"; done
    done
    end_study
    exp_moe_cost_table
    exp_plot_curves moe replay "MoE on kjv, replay routing" base-k1 base-k2 base-k3 \
        A-k1-kb1-replay A-k1-kb2-replay A-k1-kb4-replay B-k1-kb3-replay B-k2-kb2-replay B-k3-kb1-replay
    exp_plot_curves moe own "MoE on kjv, own routing" base-k1 base-k2 base-k3 \
        A-k1-kb1-own A-k1-kb2-own A-k1-kb4-own B-k1-kb3-own B-k2-kb2-own B-k3-kb1-own
    exp_plot_moe_tradeoff
}

# Validation loss beside decode cost: OUT/moe/cost.md (and cost.tsv).
exp_moe_cost_table() {
    local dir="$OUT/moe"
    cat "$dir"/*/cost.tsv >"$dir/cost_rows.tsv"
    awk -F'\t' -v md="$dir/cost.md" -v tsv="$dir/cost.tsv" '
        FNR == NR { if (FNR > 1) { loss[$1] = $4; sd[$1] = $5; rel[$1] = $10; relsd[$1] = $11; order[++n] = $1 }; next }
        { experts[$1] = $2; bytes[$1] = $3; ms[$1] = $4; loads[$1] = $5; ratio[$1] = $6 }
        END {
            print "| row | val loss | rel. diff vs baseline | experts/layer/step (info) | weight MB/step (info) | expert loads/step, all layers (bench) | decode ms/token (bench) | ms ratio to the baseline path of the same model (bench) |" > md
            print "|---|---|---|---|---|---|---|---|" > md
            print "row\tloss_mean\texperts_per_layer\tweight_bytes\tdecode_ms\texpert_loads\tms_ratio" > tsv
            for (i = 1; i <= n; i++) {
                r = order[i]
                printf "| %s | %.4f%s | %s | %s | %.2f | %s | %s | %s |\n", r, loss[r], sd[r] == "nan" ? "" : sprintf(" ± %.4f", sd[r]),
                    rel[r] == "nan" ? "–" : sprintf("%+.2f%%%s", rel[r], relsd[r] == "nan" ? "" : sprintf(" ± %.2f", relsd[r])),
                    experts[r], bytes[r] / 1e6, loads[r] == "null" ? "–" : loads[r],
                    ms[r] == "null" ? "–" : ms[r], ratio[r] == "null" ? "–" : ratio[r] > md
                printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r, loss[r], experts[r], bytes[r], ms[r], loads[r], ratio[r] > tsv
            }
        }' "$dir/table.tsv" "$dir/cost_rows.tsv"
    rm -f "$dir/cost_rows.tsv"
}

case "$STUDY" in
matched) study_matched ;;
control) study_control ;;
ablations) study_ablations ;;
moe) study_moe ;;
all) study_matched; study_control; study_ablations; study_moe ;;
esac
echo "== done: $OUT" >&2

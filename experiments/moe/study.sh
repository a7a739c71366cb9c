# Study (4), MoE expert allocation on kjv: regime A top_k = 1, top_k_branch
# in 1, 2, 4; regime B top_k + top_k_branch = 4; replay and own routing;
# validation loss beside decode cost (dbranch info: experts and weight bytes
# per step; dbranch bench decode on the trained model: ms/token). Sourced by
# experiments/run.sh (`experiments/run.sh moe`); see README.md beside this file.
# shellcheck shell=bash

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
    local dir="$OUT/$CURRENT/$name" mode=grouped
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
    exp_plot_curves "$CURRENT" replay "MoE on kjv, replay routing" base-k1 base-k2 base-k3 \
        A-k1-kb1-replay A-k1-kb2-replay A-k1-kb4-replay B-k1-kb3-replay B-k2-kb2-replay B-k3-kb1-replay
    exp_plot_curves "$CURRENT" own "MoE on kjv, own routing" base-k1 base-k2 base-k3 \
        A-k1-kb1-own A-k1-kb2-own A-k1-kb4-own B-k1-kb3-own B-k2-kb2-own B-k3-kb1-own
    exp_plot_moe_tradeoff "$CURRENT"
}

# Validation loss beside decode cost: OUT/moe/<scale>/cost.md (and cost.tsv).
exp_moe_cost_table() {
    local dir="$OUT/$CURRENT"
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

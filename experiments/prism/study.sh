# Study (issue 13), per-layer head counts (SPEC §6.2, Prism Transformer
# arXiv 2606.27449): uniform 4 heads against the increasing schedule
# 1,1,2,2,4,4,4,4 at equal parameters, llama, char level on the 1M-byte KJV
# prefix, 8 layers, d 128; and the schedule's Decode-Branch twin (the options
# compose). Sourced by experiments/run.sh (`KEEP_CHECKPOINT=1
# experiments/run.sh prism --seeds "1 2 3" --tokens 200000 --threads 1`: the
# kept checkpoints feed `dbranch analyze`, see README.md beside this file).
# shellcheck shell=bash

PRISM_HEADS=(--set model.layer_heads=1,1,2,2,4,4,4,4)

study_prism() {
    # --quick's 2 heads and 1 kv head leave no integer kv-head count for a
    # 1-head layer: keep 4 and 4 (head width 8 at its d_model 32)
    local heads=()
    [ "$QUICK" = 1 ] && heads=(--set model.n_head=4 --set model.n_kv_head=4)
    begin_study prism
    row uniform - study_prism.ini kjv1m "${heads[@]}"
    row prism uniform study_prism.ini kjv1m "${heads[@]}" "${PRISM_HEADS[@]}"
    row prism-branch prism study_prism.ini kjv1m "${heads[@]}" "${PRISM_HEADS[@]}" "${BRANCH[@]}"
    end_study
    exp_plot_curves "$CURRENT" all "per-layer heads, char-level KJV 1M: validation loss" \
        uniform prism prism-branch
    exp_plot_diffs "$CURRENT" all "against the reference row, paired by seed" prism prism-branch
    : >"$OUT/$CURRENT/compare.txt"
    exp_compare "$CURRENT" compare.txt model.layer_heads uniform prism
    exp_compare "$CURRENT" compare.txt model.branch prism prism-branch
    # the probes: mean attention distance per layer (the paper: early layers more local)
    exp_probe_rows "$CURRENT" 16 uniform prism prism-branch
    exp_probe_means "$CURRENT" uniform prism prism-branch
    exp_plot_probe "$CURRENT" layers.dat 1 3 4 "layer" "mean attention distance (positions back)" distance.png \
        "mean attention distance per layer, 16 val windows of 256 (mean, sd over seeds)" 0 uniform prism prism-branch
    prism_probe_md >"$OUT/$CURRENT/probe.md"
}

prism_probe_md() {
    echo "# Prism study probes ($CURRENT)"
    echo
    echo "Written by experiments/run.sh (prism/study.sh) from each seed's \`dbranch analyze\` output"
    echo "(analyze.txt: 16 validation windows of 256 tokens). Do not edit."
    echo
    echo "## Parameters (dbranch info)"
    echo
    local sets
    for sets in "" "--set model.layer_heads=1,1,2,2,4,4,4,4" "--set model.layer_heads=1,1,2,2,4,4,4,4 --set model.branch=decode"; do
        # shellcheck disable=SC2086
        printf -- '- `%s`: %s parameters\n' "dbranch info experiments/configs/study_prism.ini $sets" \
            "$("$DBRANCH" info experiments/configs/study_prism.ini $sets | awk '$1 == "total" { print $4 }')"
    done
    echo
    echo "## Mean attention distance per layer (positions; mean ± sd over seeds)"
    echo
    echo "Heads per layer: uniform 4 everywhere; prism 1,1,2,2,4,4,4,4. At init every layer attends"
    echo "almost uniformly: (T-1)/4 = 63.75 for T = 256."
    echo
    exp_probe_table "$CURRENT" layers.dat layer 3 4 "%.2f" uniform prism prism-branch
    echo
    echo "## Decode-Branch twin: decode == teacher-forced (8 val windows, 64-token prompts: 193 positions each)"
    echo
    exp_decode_table "$OUT/$CURRENT/prism-branch"
}

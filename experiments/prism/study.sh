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
    begin_study prism
    row uniform - study_prism.ini kjv1m
    row prism uniform study_prism.ini kjv1m "${PRISM_HEADS[@]}"
    row prism-branch prism study_prism.ini kjv1m "${PRISM_HEADS[@]}" "${BRANCH[@]}"
    end_study
    exp_plot_curves "$CURRENT" all "per-layer heads, char-level KJV 1M: validation loss" \
        uniform prism prism-branch
    exp_plot_diffs "$CURRENT" all "against the reference row, paired by seed" prism prism-branch
}

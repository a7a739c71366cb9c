# Study (issue 13), attention residuals (SPEC §6.3; AttnRes arXiv 2603.15031,
# MHAR arXiv 2607.27230): the plain residual stream against attn_res = full
# with one routing head (AttnRes) and eight (MHAR), and block mode (4 blocks
# of 2 sublayers); and MHAR's Decode-Branch twin (the options compose).
# llama, char level on the 1M-byte KJV prefix, 4 layers, d 128. Sourced by
# experiments/run.sh (`KEEP_CHECKPOINT=1 experiments/run.sh attnres --seeds
# "1 2 3" --tokens 200000 --threads 1`: the kept checkpoints feed
# `dbranch analyze`, see README.md beside this file).
# shellcheck shell=bash

ATTNRES_MHAR=(--set model.attn_res=full --set model.attn_res_heads=8)

study_attnres() {
    begin_study attnres
    row baseline - study_attnres.ini kjv1m
    row attnres baseline study_attnres.ini kjv1m --set model.attn_res=full
    row mhar baseline study_attnres.ini kjv1m "${ATTNRES_MHAR[@]}"
    row block baseline study_attnres.ini kjv1m --set model.attn_res=block --set model.attn_res_blocks=4
    row mhar-branch mhar study_attnres.ini kjv1m "${ATTNRES_MHAR[@]}" "${BRANCH[@]}"
    end_study
    exp_plot_curves "$CURRENT" all "attention residuals, char-level KJV 1M: validation loss" \
        baseline attnres mhar block mhar-branch
    exp_plot_diffs "$CURRENT" all "against the reference row, paired by seed" attnres mhar block mhar-branch
}

# Study (issue 13), attention residuals (SPEC §6.3; AttnRes arXiv 2603.15031,
# MHAR arXiv 2607.27230): the plain residual stream against attn_res = full
# with one routing head (AttnRes) and eight (MHAR), and block mode (4 blocks
# of 2 sublayers); and AttnRes's Decode-Branch twin (the options compose).
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
    row attnres-branch attnres study_attnres.ini kjv1m --set model.attn_res=full "${BRANCH[@]}"
    end_study
    exp_plot_curves "$CURRENT" all "attention residuals, char-level KJV 1M: validation loss" \
        baseline attnres mhar block attnres-branch
    exp_plot_diffs "$CURRENT" all "against the reference row, paired by seed" attnres mhar block attnres-branch
    : >"$OUT/$CURRENT/compare.txt"
    exp_compare "$CURRENT" compare.txt model.attn_res,model.attn_res_heads,model.attn_res_blocks baseline attnres mhar block
    exp_compare "$CURRENT" compare.txt model.branch attnres attnres-branch
    # the probes: RMS of every sublayer's input stream, routing weights (trained and at init)
    local rows=(baseline attnres mhar block attnres-branch)
    exp_probe_rows "$CURRENT" 16 "${rows[@]}"
    exp_probe_means "$CURRENT" "${rows[@]}"
    exp_plot_probe "$CURRENT" rms.dat 1 2 3 "sublayer j (2l attention, 2l+1 FFN; 8 = final norm)" \
        "RMS of the sublayer input stream" rms.png "sublayer input RMS after training (mean, sd over seeds)" 1 \
        "${rows[@]}"
    exp_plot_probe "$CURRENT" rms_init.dat 1 2 3 "sublayer j (2l attention, 2l+1 FFN; 8 = final norm)" \
        "RMS of the sublayer input stream" rms_init.png "sublayer input RMS at init (mean, sd over seeds)" 1 \
        "${rows[@]}"
    attnres_probe_md >"$OUT/$CURRENT/probe.md"
}

attnres_probe_md() {
    local row
    echo "# AttnRes study probes ($CURRENT)"
    echo
    echo "Written by experiments/run.sh (attnres/study.sh) from each seed's \`dbranch analyze\` output"
    echo "(analyze.txt trained, analyze_init.txt at init from the same seed; 16 validation windows"
    echo "of 256 tokens). Do not edit."
    echo
    echo "## RMS of the stream entering each sublayer's norm (mean ± sd over seeds)"
    echo
    echo "j = 2l: layer l's attention, 2l+1: its FFN, 8: the final norm. Without attn_res the"
    echo "residual sum; with it the route h_j."
    echo
    echo "After training:"
    echo
    exp_probe_table "$CURRENT" rms.dat j 2 3 "%.3f" baseline attnres mhar block attnres-branch
    echo
    echo "At init:"
    echo
    exp_probe_table "$CURRENT" rms_init.dat j 2 3 "%.4f" baseline attnres mhar block attnres-branch
    echo
    echo "## Routing weights at init: largest |weight - 1/n| (the uniform mean)"
    echo
    for row in attnres mhar block attnres-branch; do
        printf -- '- %s: %s\n' "$row" "$(exp_route_uniform_gap "$OUT/$CURRENT/$row" analyze_init.txt)"
    done
    echo
    echo "## Routing weights after training (mean over positions, routing heads and seeds)"
    for row in attnres mhar block attnres-branch; do
        echo
        echo "### $row"
        echo
        exp_route_table "$OUT/$CURRENT/$row" analyze.txt
    done
    echo
    echo "## Decode-Branch twin (attnres-branch): decode == teacher-forced (8 val windows, 64-token prompts: 193 positions each)"
    echo
    exp_decode_table "$OUT/$CURRENT/attnres-branch"
}

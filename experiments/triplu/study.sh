# Study (5), product FFNs (SPEC §6.1, TriPLU arXiv 2608.20360) in the
# paper's regime: llama, character level on a 1M-byte prefix of the KJV,
# 4 layers, d 128; SwiGLU against TriPLU, prod2 and prod4 at parameter-matched
# widths, at a low constant learning rate and a hot one. Sourced by
# experiments/run.sh (`experiments/run.sh triplu --seeds "1 2 3"`); see
# README.md beside this file.
# shellcheck shell=bash

TRIPLU_HOT=(--set train.lr=1e-2 --set train.min_lr=1e-2)

study_triplu() {
    begin_study triplu
    row swiglu - study_triplu.ini kjv1m
    row triplu swiglu study_triplu.ini kjv1m --set model.ffn=triplu
    row prod2 swiglu study_triplu.ini kjv1m --set model.ffn=prod2
    row prod4 swiglu study_triplu.ini kjv1m --set model.ffn=prod4
    row swiglu-hot - study_triplu.ini kjv1m "${TRIPLU_HOT[@]}"
    row triplu-hot swiglu-hot study_triplu.ini kjv1m --set model.ffn=triplu "${TRIPLU_HOT[@]}"
    row prod2-hot swiglu-hot study_triplu.ini kjv1m --set model.ffn=prod2 "${TRIPLU_HOT[@]}"
    row prod4-hot swiglu-hot study_triplu.ini kjv1m --set model.ffn=prod4 "${TRIPLU_HOT[@]}"
    row triplu-branch triplu study_triplu.ini kjv1m --set model.ffn=triplu "${BRANCH[@]}"
    end_study
    exp_plot_curves "$CURRENT" all "product FFNs, char-level KJV 1M: validation loss" \
        swiglu triplu prod2 prod4 swiglu-hot triplu-hot prod2-hot prod4-hot triplu-branch
    exp_plot_diffs "$CURRENT" all "product FFNs vs SwiGLU at the same learning rate, paired by seed" \
        triplu prod2 prod4 triplu-hot prod2-hot prod4-hot triplu-branch
    # the TriPLU arm's Decode-Branch twin (issue 13: the options compose): its
    # paired difference and, on its kept checkpoints, decode == teacher-forced
    : >"$OUT/$CURRENT/compare_branch.txt"
    exp_compare "$CURRENT" compare_branch.txt model.branch triplu triplu-branch
    exp_probe_rows "$CURRENT" 16 triplu-branch
    { echo "# TriPLU Decode-Branch twin: decode == teacher-forced (8 val windows, 64-token prompts)"; echo
      exp_decode_table "$OUT/$CURRENT/triplu-branch"; } >"$OUT/$CURRENT/decode.md"
}

# Study (issue 14), the Recurrent Transformer (SPEC §6.4, arXiv 2604.21215)
# as a language model: standard llama at 4 and 2 layers against recurrent
# ones at 4 and 2 layers (the paper at 300M: recurrent 12/6 layers 2.867 /
# 2.86 against standard 6/12/24 layers 2.917 / 2.896 / 2.892), char level on
# the 1M-byte KJV prefix, d 128, the attnres study's config and budget.
# Sourced by experiments/run.sh (`experiments/run.sh recurrent --seeds
# "1 2 3" --tokens 200000 --threads 1`); see README.md beside this file. The
# running-parity test is parity.sh beside this file.
# shellcheck shell=bash

study_recurrent() {
    begin_study recurrent
    row standard-4L - study_attnres.ini kjv1m
    row recurrent-4L standard-4L study_attnres.ini kjv1m --set model.recurrent=1
    row standard-2L standard-4L study_attnres.ini kjv1m --set model.n_layer=2
    row recurrent-2L standard-2L study_attnres.ini kjv1m --set model.n_layer=2 --set model.recurrent=1
    end_study
    exp_plot_curves "$CURRENT" all "Recurrent Transformer, char-level KJV 1M: validation loss" \
        standard-4L recurrent-4L standard-2L recurrent-2L
    exp_plot_diffs "$CURRENT" all "against the reference row, paired by seed" recurrent-4L standard-2L recurrent-2L
    : >"$OUT/$CURRENT/compare.txt"
    exp_compare "$CURRENT" compare.txt model.recurrent,model.n_layer standard-4L recurrent-4L standard-2L
    exp_compare "$CURRENT" compare.txt model.recurrent standard-2L recurrent-2L
}

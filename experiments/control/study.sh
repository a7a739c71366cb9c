# Study (2), compute-matched control: nanogpt on kjv, the twin against a
# baseline given the extra compute another way (twice the layers; twice the
# tokens). Sourced by experiments/run.sh (`experiments/run.sh control`);
# see README.md beside this file.
# shellcheck shell=bash

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
    exp_plot_curves "$CURRENT" all "nanogpt on kjv: Decode-Branch vs compute-matched baselines" \
        base branch base-2x-layers base-2x-tokens
    # Not the 2x-tokens row: at a given token count it is mid-way down its own,
    # longer schedule, so the difference along training would mislead.
    exp_plot_diffs "$CURRENT" all "nanogpt on kjv: each row vs the baseline, paired by seed" branch base-2x-layers
}

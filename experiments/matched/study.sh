# Study (1), matched tokens: each family (nanogpt, llama, moe) as baseline
# and as Decode-Branch twin on both corpora (kjv, pycode bytes), with the same
# data order (same seed), token budget and optimizer settings. Sourced by
# experiments/run.sh (run it as `experiments/run.sh matched [options]`);
# README.md beside this file says what the study asks and where its results are.
# shellcheck shell=bash

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
            exp_plot_curves "$CURRENT" "$corpus-$family" "$family on $corpus: baseline vs Decode-Branch (mean of seeds)" \
                "$corpus-$family-base" "$corpus-$family-branch"
            twins+=("$corpus-$family-branch")
        done
    done
    exp_plot_diffs "$CURRENT" all "Decode-Branch vs its baseline, paired by seed (below 0: the twin is better)" "${twins[@]}"
}

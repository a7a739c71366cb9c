# Study (3), ablations: nanogpt on kjv, each part of the Decode-Branch turned
# off in turn (coupling, weight sharing, own embedding, the primary's
# gradient from the mixture, the adaptive alpha) against the default twin.
# Sourced by experiments/run.sh (`experiments/run.sh ablations`); see
# README.md beside this file.
# shellcheck shell=bash

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
    exp_plot_curves "$CURRENT" all "nanogpt on kjv: Decode-Branch ablations" \
        base branch couple-off share-off branch-emb-shared detach-primary alpha-fixed-0.5 branch-only
    exp_plot_diffs "$CURRENT" all "nanogpt on kjv: each ablation vs the default twin, paired by seed" \
        couple-off share-off branch-emb-shared detach-primary alpha-fixed-0.5 branch-only
}

# Study (6), the noise pilot of issue 16: what lowers the paired spread of
# the twin-vs-baseline difference at a fixed token budget, before the
# data sweep spends its compute. Each variant is a (baseline, twin) pair of
# rows changing one thing from the pilot setting
# (experiments/configs/study_noise.ini); the twin row is paired with its own
# baseline, so `dbranch compare` gives each variant's paired mean, sd and
# interval. Sourced by experiments/run.sh
# (`experiments/run.sh noise --seeds "1 2 3 4"`); NOISE_VARIANTS picks a
# subset (default: all, in this order). See README.md beside this file.
# shellcheck shell=bash

# Variant name -> its --set arguments (one string; word-split on purpose).
noise_variant_sets() { # variant
    case "$1" in
    ref) echo "" ;;
    b64) echo "--set train.batch_size=64 --set train.lr=6e-3 --set train.min_lr=6e-4 --set train.warmup_steps=13" ;;
    wsd) echo "--set train.schedule=wsd --set train.decay_fraction=0.2" ;;
    clip) echo "--set train.grad_clip=0.25" ;;
    c128) echo "--set model.d_model=128 --set model.d_ff=352" ;;
    *) echo "run.sh noise: unknown variant '$1' (ref b64 wsd clip c128)" >&2; return 1 ;;
    esac
}

study_noise() {
    begin_study noise
    local variant sets names=() twins=()
    for variant in ${NOISE_VARIANTS:-ref b64 wsd clip c128}; do
        sets=$(noise_variant_sets "$variant")
        # shellcheck disable=SC2086 # the variant's settings are separate words
        row "base-$variant" - study_noise.ini kjv $sets
        # shellcheck disable=SC2086
        row "twin-$variant" "base-$variant" study_noise.ini kjv $sets "${BRANCH[@]}"
        names+=("base-$variant" "twin-$variant")
        twins+=("twin-$variant")
    done
    end_study
    exp_plot_curves "$CURRENT" all "noise pilot: validation loss, llama C 64, KJV bytes" "${names[@]}"
    exp_plot_diffs "$CURRENT" all "noise pilot: twin vs its baseline, paired by seed" "${twins[@]}"
}

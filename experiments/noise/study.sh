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

# The second pilot, on the data sweep's own recipe (NOISE_RECIPE=dsweep):
# experiments/configs/study_dsweep.ini on the large BPE corpus, where the
# D = 20 pairs showed a paired sd of 1.1% with no correlation between a
# twin and its baseline (README.md, "The sweep's recipe"). Each variant
# changes one thing of the recipe's learning-rate schedule.
noise_recipe_variant_sets() { # variant
    case "$1" in
    ref) echo "" ;;
    # decay every group to zero instead of to a tenth of its peak
    min0) echo "--set train.min_lr=0" ;;
    # every group's peak (and floor) divided by 2, 4, 8, 16: Muon and the three AdamW groups
    lr2) echo "--set train.muon_lr=0.025 --set train.lr=0.004 --set train.embed_lr=0.006 --set train.head_lr=0.004 --set train.vector_lr=0.02 --set train.min_lr=0.0004" ;;
    lr4) echo "--set train.muon_lr=0.0125 --set train.lr=0.002 --set train.embed_lr=0.003 --set train.head_lr=0.002 --set train.vector_lr=0.01 --set train.min_lr=0.0002" ;;
    lr8) echo "--set train.muon_lr=0.00625 --set train.lr=0.001 --set train.embed_lr=0.0015 --set train.head_lr=0.001 --set train.vector_lr=0.005 --set train.min_lr=0.0001" ;;
    lr16) echo "--set train.muon_lr=0.003125 --set train.lr=0.0005 --set train.embed_lr=0.00075 --set train.head_lr=0.0005 --set train.vector_lr=0.0025 --set train.min_lr=0.00005" ;;
    *) echo "run.sh noise: unknown recipe variant '$1' (ref min0 lr2 lr4 lr8 lr16)" >&2; return 1 ;;
    esac
}

# NOISE_RECIPE=dsweep: rows <arm>-<variant> in OUT/noise/dsweep/<scale>/,
# NOISE_ARMS (default "base twin") the arms; the budget by --tokens.
# NOISE_RECIPE=dsweep-nanogpt: the same on the sweep's nanogpt arm
# (study_dsweep_nanogpt.ini, the llama arm's rates), in OUT/noise/dsweep-nanogpt/:
# the learning-rate grid its own tuned series needs.
study_noise_recipe() { # config folder
    local config=$1
    begin_study "$2"
    local variant arm sets names=()
    for variant in ${NOISE_VARIANTS:-ref min0 lr2 lr4 lr8 lr16}; do
        sets=$(noise_recipe_variant_sets "$variant")
        for arm in ${NOISE_ARMS:-base twin}; do
            case "$arm" in
            base) # shellcheck disable=SC2086 # the variant's settings are separate words
                row "base-$variant" - "$config" large_bpe4096 $sets ;;
            twin) # shellcheck disable=SC2086
                row "twin-$variant" "base-$variant" "$config" large_bpe4096 $sets "${BRANCH[@]}" ;;
            *) echo "run.sh noise: NOISE_ARMS '$arm' must be base or twin" >&2; return 1 ;;
            esac
            names+=("$arm-$variant")
        done
    done
    end_study
    exp_plot_curves "$CURRENT" all "noise pilot on the dsweep recipe ($config): validation loss" "${names[@]}"
}

study_noise() {
    case "${NOISE_RECIPE:-pilot}" in
    pilot) ;;
    dsweep) study_noise_recipe study_dsweep.ini noise/dsweep; return ;;
    dsweep-nanogpt) study_noise_recipe study_dsweep_nanogpt.ini noise/dsweep-nanogpt; return ;;
    *) echo "run.sh noise: NOISE_RECIPE '$NOISE_RECIPE' must be pilot, dsweep or dsweep-nanogpt" >&2; return 1 ;;
    esac
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

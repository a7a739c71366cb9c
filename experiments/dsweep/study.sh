# Study (10), the data sweep of issue 16: the Decode-Branch twin against its
# baseline and three controls in the paper's regime, D = 10, 20, 40, 80
# training tokens per non-embedding parameter, llama with the paper's recipe
# (experiments/configs/study_dsweep.ini: paper_recipe.ini's Muon + AdamW
# groups and WSD at V 4096) on the large BPE corpus. Sourced by
# experiments/run.sh (`experiments/run.sh dsweep --seeds "1 2 3 4"
# --threads 1 [--d "10 20"] [--rows "base twin"]`); see README.md beside
# this file.
#
# One folder per D, OUT/dsweep/D<D>/, with the house table (table.md: per row
# the seeds' mean ± sd), compare.txt (`dbranch compare` of every arm against
# the baseline: paired mean difference, 95% interval, p) and, over all D,
# OUT/dsweep/gap.tsv, gap.md and gap_vs_d.png (the paper's figure: the gap
# against D). Budget of a D: D x N, N the non-embedding parameters, the
# layers' count of `dbranch info` on the config ("x n_layer" row; embeddings,
# head and final norm left out), or DSWEEP_PARAMS when set.
#
# Environment: DSWEEP_FAMILY (llama, the default, or nanogpt: the issue's
# second family, study_dsweep_nanogpt.ini, results in OUT/dsweep-nanogpt/
# instead of OUT/dsweep/), DSWEEP_PRECISION (fp32, the default, or bf16:
# every run with train.precision = bf16, results in OUT/dsweep-bf16/ or
# OUT/dsweep-nanogpt-bf16/), DSWEEP_CONFIG (default study_dsweep.ini, under
# experiments/configs/), DSWEEP_CORPUS (default large_bpe4096: `dbranch
# prepare --preset large --tokenizer bpe --vocab 4096`, made on first use;
# --quick: kjv, byte tokens; V 8192: DSWEEP_CONFIG=paper_recipe.ini
# DSWEEP_CORPUS=large_bpe8192), DSWEEP_PARAMS (--quick: 154, so D = 10 is
# 1540 tokens, about the house's quick budget).
# shellcheck shell=bash

# Arm name -> its `row` arguments after the config and corpus (the baseline
# "base" is the reference of every other arm).
dsweep_arm_sets() { # arm
    case "$1" in
    base) echo "" ;;
    twin) echo "--set model.branch=decode" ;;
    twin-shared) echo "--set model.branch=decode --set model.branch_emb=shared" ;;
    tables2) echo "--set model.tok_emb_tables=2" ;;
    # the second table before the middle block (the study models have 4): capacity one table lacks
    tables2-mid) echo "--set model.tok_emb_tables=2 --set model.tok_emb2_layer=2" ;;
    base-2x) echo "" ;; # TOKEN_FACTOR=2 (the compute control)
    *) echo "run.sh dsweep: unknown arm '$1' (base twin twin-shared tables2 tables2-mid base-2x)" >&2; return 1 ;;
    esac
}
DSWEEP_ARMS="base twin twin-shared tables2 tables2-mid base-2x"

# Non-embedding parameters of the study model as run (the config, plus the
# model keys of --set): the primary column of dbranch info's "x n_layer" row.
dsweep_params() { # config
    local sets=() i
    for ((i = 0; i < ${#EXTRA_SETS[@]}; i += 2)); do
        case "${EXTRA_SETS[i + 1]}" in model.*) sets+=(--set "${EXTRA_SETS[i + 1]}") ;; esac
    done
    "$DBRANCH" info "experiments/configs/$1" "${sets[@]}" | awk '$1 == "x" && $2 == "n_layer" { print $5 }'
}

# The arm-vs-baseline statistics of one D: compare.txt (dbranch compare's
# table per arm, the text the README quotes) and one gap.tsv line per arm:
# D arm pairs diff% lo% hi% p arm_sd% base_sd% plan (the interval in % of the
# baseline mean over the pairs; sd = the seeds' spread of each arm's loss;
# plan = the pairs that would make the interval +-DSWEEP_HALFWIDTH % at the
# measured paired sd, `dbranch compare --halfwidth`; the issue's goal is 0.5).
dsweep_compare() { # D
    local d=$1 dir="$OUT/$DSWEEP_DIR/D$1" arm
    : >"$dir/compare.txt"
    for arm in $DSWEEP_ARMS; do
        [ "$arm" != base ] || continue
        local base_runs=() arm_runs=() run
        for run in "$dir"/base/seed*; do [ -f "$run/done" ] && base_runs+=("$run"); done
        for run in "$dir/$arm"/seed*; do [ -f "$run/done" ] && arm_runs+=("$run"); done
        if [ ${#base_runs[@]} -lt 2 ] || [ ${#arm_runs[@]} -lt 2 ]; then
            printf '%s: fewer than 2 finished seeds of base or %s\n\n' "$arm" "$arm" >>"$dir/compare.txt"
            continue
        fi
        local rel_base=() rel_arm=()
        for run in "${base_runs[@]}"; do rel_base+=("$(exp_relative "$run")"); done
        for run in "${arm_runs[@]}"; do rel_arm+=("$(exp_relative "$run")"); done
        printf '## %s vs base\n' "$arm" >>"$dir/compare.txt"
        "$DBRANCH" compare --halfwidth "$DSWEEP_HALFWIDTH" --reference "${rel_base[0]}" "${rel_base[@]}" "${rel_arm[@]}" >>"$dir/compare.txt" 2>&1 ||
            true
        printf '\n' >>"$dir/compare.txt"
        # The JSON's second arm object is the arm (the first is the reference).
        "$DBRANCH" compare --json --halfwidth "$DSWEEP_HALFWIDTH" --reference "${rel_base[0]}" "${rel_base[@]}" "${rel_arm[@]}" 2>/dev/null |
            awk -v d="$d" -v arm="$arm" -v table="$dir/table.tsv" '
            function field(s, k,   r) { r = s; if (!sub(".*\"" k "\":", "", r)) return "nan"
                sub(/[,}].*/, "", r); return r }
            BEGIN { while ((getline line < table) > 0) { split(line, f, "\t"); sd[f[1]] = f[5]; mean[f[1]] = f[4] } }
            { n = split($0, parts, /\{"arm":/); s = parts[3]; ref = field(s, "reference_mean")
              p = field(s, "p"); if (p == "null") p = "nan"
              plan = field(s, "pairs_for_halfwidth"); if (plan == "null") plan = "nan"
              printf "%s\t%s\t%s\t%.4f\t%.4f\t%.4f\t%s\t%.4f\t%.4f\t%s\n", d, arm, field(s, "pairs"),
                  field(s, "mean_diff_pct"), 100 * field(s, "ci95_low") / ref, 100 * field(s, "ci95_high") / ref, p,
                  100 * sd[arm] / mean[arm], 100 * sd["base"] / mean["base"], plan }' >>"$OUT/$DSWEEP_DIR/gap.tsv"
    done
}

# gap.md from gap.tsv, and the plot of the gap against D (one line per arm,
# the 95% interval as error bars).
dsweep_gap_report() {
    local tsv="$OUT/$DSWEEP_DIR/gap.tsv"
    {
        printf '| D | arm | pairs | mean diff vs base | 95%% interval | p | arm seed sd | base seed sd | pairs for ±%s%% |\n' "$DSWEEP_HALFWIDTH"
        printf '|---|---|---|---|---|---|---|---|---|\n'
        sort -t$'\t' -k1,1n -k2,2 "$tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %+.2f%% | [%+.2f, %+.2f]%% | %s | %.2f%% | %.2f%% | %s |\n",
            $1, $2, $3, $4, $5, $6, ($7 == "nan" ? "–" : sprintf("%.3g", $7)), $8, $9, ($10 == "nan" || $10 == "" ? "–" : $10) }'
        printf '\nThe last column plans seeds: the pairs whose 95%% interval would be ±%s%% of the baseline at the paired sd measured so far (`dbranch compare --halfwidth`; an sd from few pairs is itself rough).\n' "$DSWEEP_HALFWIDTH"
    } >"$OUT/$DSWEEP_DIR/gap.md"
    exp_have_gnuplot || return 0
    [ -s "$tsv" ] || return 0
    local arms=() arm
    for arm in $DSWEEP_ARMS; do
        [ "$arm" = base ] || ! grep -q $'\t'"$arm"$'\t' "$tsv" || arms+=("$arm")
    done
    # each arm's points contiguous, so its line joins them (other arms' rows are NaN to it)
    sort -t$'\t' -k2,2 -k1,1n "$tsv" >"$OUT/$DSWEEP_DIR/gap_by_arm.tsv"
    gnuplot -e "data='$OUT/$DSWEEP_DIR/gap_by_arm.tsv'; arms='${arms[*]}'; out='$OUT/$DSWEEP_DIR/gap_vs_d.png'; plot_title='$DSWEEP_DIR: each arm vs the baseline, paired by seed ($DSWEEP_FAMILY, paper recipe)'" \
        "$ROOT/experiments/plot/gap_vs_d.gp"
}

# One markdown list item: "- LABEL: " and dbranch compare --differences of
# the per-seed numbers in FILE (one a line), or the arm's name and "1 seed,
# no interval yet"; nothing for an empty FILE. LABEL starts with the arm.
dsweep_analysis_line() { # label file
    [ -s "$2" ] || return 0
    if [ "$(wc -l <"$2")" -lt 2 ]; then
        printf -- '- %s: 1 seed, no interval yet\n' "${1%%,*}"
        return 0
    fi
    printf -- '- %s: %s\n' "$1" "$("$DBRANCH" compare --differences "$2" 2>&1 | sed 's/ from [^:]*:/:/')"
}

# trend.md / trend.tsv: does each arm's gap move with D? Per arm and pair
# of neighbouring D trained so far, per seed finished at both (the arm and
# its baseline at each D): the gap at the smaller D and at the larger (% of
# that D's baseline) and its change, larger D's minus smaller D's, in
# percentage points; negative when an arm ahead of its baseline gets
# further ahead with data (the paper's figure: the gap stays or opens). The
# change is paired within a seed (same data order and initial values at
# both D; at D >= 20 a run continues the smaller D's trunk), so a seed's
# own offset cancels. Analysis per arm and pair of D: dbranch compare
# --differences of the changes.
# trend.tsv: arm d_small d_large seed gap_small gap_large change
dsweep_trend_report() {
    local series="$OUT/$DSWEEP_DIR" tsv="$OUT/$DSWEEP_DIR/trend.tsv" md="$OUT/$DSWEEP_DIR/trend.md" dir ds=()
    for dir in "$series"/D*/; do
        dir=${dir%/}
        [ -s "$dir/final.tsv" ] && ds+=("${dir##*/D}")
    done
    [ ${#ds[@]} -ge 2 ] || return 0
    mapfile -t ds < <(printf '%s\n' "${ds[@]}" | sort -n)
    # gap_seeds.tsv: arm D seed gap (%), each seed whose arm and baseline finished at D,
    # sorted by arm (in DSWEEP_ARMS order), seed and D: one figure line per arm and seed
    local d
    for d in "${ds[@]}"; do
        # final.tsv: row seed tokens loss ...
        awk -F'\t' -v d="$d" -v arms="$DSWEEP_ARMS" '
            { loss[$1 SUBSEP $2] = $4; seeds[$2] = 1 }
            END {
                n_arms = split(arms, arm_list, " ")
                for (a = 1; a <= n_arms; a++) {
                    arm = arm_list[a]
                    for (seed = 1; seed <= 999; seed++) {
                        if (arm == "base" || !(seed in seeds)) continue
                        if (!((arm SUBSEP seed) in loss) || !(("base" SUBSEP seed) in loss)) continue
                        base = loss["base" SUBSEP seed]
                        printf "%d\t%s\t%s\t%d\t%.6f\n", a, arm, d, seed, 100 * (loss[arm SUBSEP seed] - base) / base
                    }
                }
            }' "$series/D$d/final.tsv"
    done | sort -t$'\t' -k1,1n -k4,4n -k3,3n | cut -f2- >"$series/gap_seeds.tsv" # the arm's index: DSWEEP_ARMS order
    # trend.tsv: the same seed's gaps at neighbouring D
    awk -F'\t' -v ds="${ds[*]}" '
        BEGIN { n = split(ds, d_list, " "); for (i = 1; i < n; i++) larger[d_list[i]] = d_list[i + 1] }
        { gap[$1 SUBSEP $2 SUBSEP $3] = $4; line[++n_lines] = $1 SUBSEP $2 SUBSEP $3 }
        END {
            for (l = 1; l <= n_lines; l++) {
                split(line[l], key, SUBSEP)
                arm = key[1]; small = key[2]; seed = key[3]
                if (!(small in larger) || !((arm SUBSEP larger[small] SUBSEP seed) in gap)) continue
                g_small = gap[line[l]]; g_large = gap[arm SUBSEP larger[small] SUBSEP seed]
                printf "%s\t%s\t%s\t%d\t%.4f\t%.4f\t%.4f\n", arm, small, larger[small], seed, g_small, g_large,
                    g_large - g_small
            }
        }' "$series/gap_seeds.tsv" >"$tsv"
    {
        printf '# How the gap moves with D, seed by seed: %s\n\n' "$DSWEEP_DIR"
        printf 'Per arm and pair of neighbouring D, each seed finished at both: the arm'"'"'s gap to its baseline (%% of the baseline) at each D and the **change**, larger D minus smaller, in percentage points: negative when an arm ahead of its baseline gets further ahead with data. Paired within a seed, so a seed'"'"'s own offset cancels. Analysis: `dbranch compare --differences` of the changes. Numbers: trend.tsv.\n'
        [ -s "$tsv" ] || printf '\nNo seed has finished an arm and its baseline at two D yet.\n'
        local pair arm
        for pair in $(cut -f2,3 "$tsv" | tr '\t' : | sort -t: -k1,1n -u); do
            local small=${pair%:*} large=${pair#*:}
            printf '\n## D = %s to %s\n\n' "$small" "$large"
            printf '| arm | seed | gap at D = %s | gap at D = %s | change (points) |\n|---|---|---|---|---|\n' "$small" "$large"
            awk -F'\t' -v small="$small" '$2 == small { printf "| %s | %s | %+.2f%% | %+.2f%% | %+.2f |\n", $1, $4, $5, $6, $7 }' "$tsv"
            printf '\n'
            for arm in $DSWEEP_ARMS; do
                awk -F'\t' -v small="$small" -v arm="$arm" '$2 == small && $1 == arm { print $7 }' "$tsv" >"$tsv.column"
                dsweep_analysis_line "$arm, change of the gap (points)" "$tsv.column"
            done
        done
    } >"$md"
    rm -f "$tsv.column"
    exp_have_gnuplot || return 0
    [ -s "$series/gap_seeds.tsv" ] || return 0
    local arms series_names
    arms=$(cut -f1 "$series/gap_seeds.tsv" | uniq | tr '\n' ' ')
    series_names=$(cut -f1,3 "$series/gap_seeds.tsv" | tr '\t' : | uniq | tr '\n' ' ')
    gnuplot -e "data='$series/gap_seeds.tsv'; arms='$arms'; series='$series_names'; out='$series/gap_seeds_vs_d.png'; plot_title='$DSWEEP_DIR: each seed against its own baseline'" \
        "$ROOT/experiments/plot/gap_seeds_vs_d.gp"
}

# bridge.md / bridge.tsv of a bf16 series (OUT/<dir>-bf16...), against the
# fp32 series of the same config (the folder without "-bf16"): per D, arm and
# seed finished in both, the arm's gap to its baseline (% of the baseline)
# in each precision and their difference, bf16 gap - fp32 gap in percentage
# points. That difference is an interaction: zero in expectation if bf16
# moves an arm and its baseline alike, so when its interval holds zero (and
# is narrow next to the gap) the bf16 points at larger D extend the fp32
# curve; if not, the bf16 series is its own curve. Also per seed: the
# baseline's own change, bf16 vs fp32 (% of fp32). The analysis of each
# column is `dbranch compare --differences` (n, mean, sd, 95% interval, p).
# bridge.tsv: D arm seed fp32_base fp32_arm fp32_gap bf16_base bf16_arm bf16_gap diff
# (arm "base": each arm column is its series' baseline, the gaps 0, and diff
# the baseline's change, 100 (bf16 - fp32) / fp32).
dsweep_bridge_report() {
    local fp32_dir=${DSWEEP_DIR/-bf16/}
    [ "$fp32_dir" != "$DSWEEP_DIR" ] && [ -d "$OUT/$fp32_dir" ] || return 0
    local tsv="$OUT/$DSWEEP_DIR/bridge.tsv" md="$OUT/$DSWEEP_DIR/bridge.md" dir d
    : >"$tsv"
    for dir in "$OUT/$DSWEEP_DIR"/D*/; do
        dir=${dir%/}
        d=${dir##*/D}
        [ -f "$dir/final.tsv" ] && [ -f "$OUT/$fp32_dir/D$d/final.tsv" ] || continue
        # final.tsv: row seed tokens loss ...; the fp32 file first
        awk -F'\t' -v d="$d" -v arms="$DSWEEP_ARMS" '
            FNR == NR { fp32[$1 SUBSEP $2] = $4; next }
            { bf16[$1 SUBSEP $2] = $4; seeds[$2] = 1 }
            END {
                n_arms = split(arms, arm_list, " ")
                for (a = 1; a <= n_arms; a++) {
                    arm = arm_list[a]
                    for (seed = 1; seed <= 999; seed++) {
                        if (!(seed in seeds)) continue
                        fb = "base" SUBSEP seed; fa = arm SUBSEP seed
                        if (!(fb in fp32) || !(fb in bf16) || !(fa in fp32) || !(fa in bf16)) continue
                        if (arm == "base") {
                            printf "%s\tbase\t%d\t%.6f\t%.6f\t0\t%.6f\t%.6f\t0\t%.4f\n", d, seed,
                                fp32[fb], fp32[fb], bf16[fb], bf16[fb], 100 * (bf16[fb] - fp32[fb]) / fp32[fb]
                            continue
                        }
                        gap32 = 100 * (fp32[fa] - fp32[fb]) / fp32[fb]
                        gap16 = 100 * (bf16[fa] - bf16[fb]) / bf16[fb]
                        printf "%s\t%s\t%d\t%.6f\t%.6f\t%.4f\t%.6f\t%.6f\t%.4f\t%.4f\n", d, arm, seed,
                            fp32[fb], fp32[fa], gap32, bf16[fb], bf16[fa], gap16, gap16 - gap32
                    }
                }
            }' "$OUT/$fp32_dir/D$d/final.tsv" "$dir/final.tsv" >>"$tsv"
    done
    {
        printf '# The bf16 bridge: %s against %s\n\n' "$DSWEEP_DIR" "$fp32_dir"
        printf 'Per D, arm and seed finished in both series: the arm'"'"'s gap to its baseline (%% of the baseline) in fp32 and in bf16, and **bf16 gap - fp32 gap** in percentage points, an interaction that is zero in expectation if bf16 moves an arm and its baseline alike. If its interval holds zero and is narrow beside the gap, the bf16 points extend the fp32 curve; if not, the bf16 series is its own curve. The `base` rows give the baseline'"'"'s own change, bf16 vs fp32 (%% of fp32). Analysis per arm: `dbranch compare --differences` of the last column. Numbers: bridge.tsv.\n'
        for d in $(cut -f1 "$tsv" | sort -n -u); do
            printf '\n## D = %s\n\n' "$d"
            printf '| arm | seed | fp32 base | fp32 arm | fp32 gap | bf16 base | bf16 arm | bf16 gap | bf16 - fp32 |\n'
            printf '|---|---|---|---|---|---|---|---|---|\n'
            awk -F'\t' -v d="$d" '$1 == d && $2 != "base" { printf "| %s | %s | %.4f | %.4f | %+.2f%% | %.4f | %.4f | %+.2f%% | %+.2f |\n", $2, $3, $4, $5, $6, $7, $8, $9, $10 }
                $1 == d && $2 == "base" { printf "| base: bf16 vs fp32 | %s | %.4f | | | %.4f | | | %+.2f%% |\n", $3, $4, $7, $10 }' "$tsv"
            printf '\n'
            local arm
            for arm in $DSWEEP_ARMS; do
                awk -F'\t' -v d="$d" -v arm="$arm" '$1 == d && $2 == arm { print $10 }' "$tsv" >"$tsv.column"
                dsweep_analysis_line "$arm$([ "$arm" = base ] && echo ", the baseline's change bf16 vs fp32 (%)" || echo ", bf16 gap - fp32 gap (points)")" "$tsv.column"
            done
        done
    } >"$md"
    rm -f "$tsv.column"
    dsweep_bridge_plot "$fp32_dir"
}

# gap_vs_d_both.png of a bf16 series: the gap against D of both series on
# one figure, each arm twice ("twin/fp32", "twin/bf16"), so the curve the
# bridge joins is seen whole (gap_both.tsv: the two series' gap.tsv lines,
# arm names suffixed, sorted by arm and D).
dsweep_bridge_plot() { # fp32-dir
    local both="$OUT/$DSWEEP_DIR/gap_both.tsv" fp32_gaps="$OUT/$1/gap.tsv" arms=() arm precision
    # this series' gap.tsv is written before this report; the fp32 one by its own invocations
    [ -f "$fp32_gaps" ] || return 0
    awk -F'\t' -v OFS='\t' -v fp32="$fp32_gaps" '{ $2 = $2 "/" (FILENAME == fp32 ? "fp32" : "bf16"); print }' \
        "$fp32_gaps" "$OUT/$DSWEEP_DIR/gap.tsv" | sort -t$'\t' -k2,2 -k1,1n >"$both"
    exp_have_gnuplot || return 0
    [ -s "$both" ] || return 0
    for arm in $DSWEEP_ARMS; do
        for precision in fp32 bf16; do
            ! grep -q $'\t'"$arm/$precision"$'\t' "$both" || arms+=("$arm/$precision")
        done
    done
    gnuplot -e "data='$both'; arms='${arms[*]}'; out='$OUT/$DSWEEP_DIR/gap_vs_d_both.png'; plot_title='$1 and $DSWEEP_DIR: each arm vs its own baseline, paired by seed'" \
        "$ROOT/experiments/plot/gap_vs_d.gp"
}

study_dsweep() {
    if [ -n "$TOKENS_OVERRIDE" ]; then
        echo "run.sh dsweep: the budget is D x the non-embedding parameters (--d, DSWEEP_PARAMS), not --tokens" >&2
        exit 2
    fi
    # The family arm: llama (the default, experiments/dsweep/) or nanogpt
    # (study_dsweep_nanogpt.ini, its own folder experiments/dsweep-nanogpt/).
    DSWEEP_FAMILY=${DSWEEP_FAMILY:-llama}
    local default_config
    case "$DSWEEP_FAMILY" in
    llama) default_config=study_dsweep.ini DSWEEP_DIR=dsweep ;;
    nanogpt) default_config=study_dsweep_nanogpt.ini DSWEEP_DIR=dsweep-nanogpt ;;
    *) echo "run.sh dsweep: DSWEEP_FAMILY = '$DSWEEP_FAMILY' must be llama|nanogpt" >&2; exit 2 ;;
    esac
    # The precision series: bf16 runs (train.precision = bf16 for every arm
    # and seed) go to their own folder, OUT/<dir>-bf16/, so a pair never
    # mixes precisions and the fp32 series stays as it ran. Attention stays
    # float32 (train.bf16_attention = fp32): runs resume across machines, and
    # the AMX attention exists only on some, so auto would change a run's
    # arithmetic between its legs.
    case "${DSWEEP_PRECISION:-fp32}" in
    fp32) ;;
    bf16)
        DSWEEP_DIR=$DSWEEP_DIR-bf16
        EXTRA_SETS+=(--set train.precision=bf16 --set train.bf16_attention=fp32)
        ;;
    *) echo "run.sh dsweep: DSWEEP_PRECISION = '$DSWEEP_PRECISION' must be fp32|bf16" >&2; exit 2 ;;
    esac
    local config=${DSWEEP_CONFIG:-$default_config} corpus=${DSWEEP_CORPUS:-large_bpe4096} params=${DSWEEP_PARAMS:-}
    # Another config is another series, in its own folder (OUT/dsweep-<name>/,
    # <name> the config's file name without .ini and a study_dsweep_ prefix,
    # and for the nanogpt family its nanogpt_ too: study_dsweep_nanogpt_tuned.ini
    # is dsweep-nanogpt[-bf16]-tuned):
    # sharing a folder, its runs would count as the default series' seeds, and
    # a (row, seed) finished under the other command would be trained again
    # over the finished one.
    if [ "$config" != "$default_config" ]; then
        local series=${config%.ini}
        series=${series#study_dsweep_}
        [ "$DSWEEP_FAMILY" != nanogpt ] || series=${series#nanogpt_}
        DSWEEP_DIR=$DSWEEP_DIR-$series
    fi
    if [ "$QUICK" = 1 ]; then
        corpus=${DSWEEP_CORPUS:-kjv}
        params=${DSWEEP_PARAMS:-154}
    fi
    # A twin at D >= 20 outlasts a sitting on 2 cores: checkpoints every 200
    # steps (820k tokens, about 10 minutes of a twin), and a cut run resumes
    # from its checkpoint (exp_train; commit the run folders when a sitting ends).
    EXP_CHECKPOINT_EVERY=${EXP_CHECKPOINT_EVERY:-200}
    DSWEEP_HALFWIDTH=${DSWEEP_HALFWIDTH:-0.5} # the issue's interval goal, in % (gap.md's seed plan)
    [ -n "$params" ] || params=$(dsweep_params "$config")
    [ -n "$params" ] && [ "$params" -gt 0 ] || { echo "run.sh dsweep: no non-embedding parameter count" >&2; exit 1; }
    echo "== dsweep: $config on $corpus, N = $params non-embedding parameters, D = ${DSWEEP_D:-10 20 40 80}" >&2
    mkdir -p "$OUT/$DSWEEP_DIR"
    # Trunks (train/trunk.h): every run keeps the state after its constant
    # -rate part, and a run at a larger D of the same arm and seed starts
    # from the largest smaller D's, the same run bit for bit without the
    # steps the two share (WSD's constant phase is 60% of each budget). A
    # binary from before train.save_trunk trains every run from step 0.
    if [ -z "${EXP_SAVE_TRUNK:-}" ]; then
        if "$DBRANCH" train --help 2>/dev/null | grep -q save_trunk; then
            EXP_SAVE_TRUNK=1
        else
            EXP_SAVE_TRUNK=0
            echo "run.sh dsweep: $DBRANCH has no train.save_trunk (an older build): every run trains from step 0" >&2
        fi
    fi
    local d arm sets
    for d in ${DSWEEP_D:-10 20 40 80}; do
        CURRENT=$DSWEEP_DIR/D$d
        EXP_TRUNK_DIRS=$(
            for x in "$OUT/$DSWEEP_DIR"/D*/; do
                x=${x%/}
                if [ "${x##*/D}" -lt "$d" ] 2>/dev/null; then printf '%s %s\n' "${x##*/D}" "$x"; fi
            done | sort -n | cut -d' ' -f2-
        )
        mkdir -p "$OUT/$CURRENT"
        exp_rows_begin
        echo "== study $CURRENT -> $OUT/$CURRENT ($((d * params)) tokens)" >&2
        TOKENS_OVERRIDE=$((d * params))
        for arm in $DSWEEP_ARMS; do
            sets=$(dsweep_arm_sets "$arm")
            local ref=base factor=""
            [ "$arm" != base ] || ref=-
            [ "$arm" != base-2x ] || factor=2
            # shellcheck disable=SC2086 # the arm's settings are separate words
            TOKEN_FACTOR=$factor row "$arm" "$ref" "$config" "$corpus" $sets
        done
        TOKENS_OVERRIDE="" EXP_TRUNK_DIRS=""
        end_study
        # shellcheck disable=SC2086 # one word per arm
        exp_plot_curves "$CURRENT" all "$DSWEEP_DIR D = $d: validation loss" $DSWEEP_ARMS
    done
    # The statistics of every D trained so far (this invocation's or earlier
    # ones'), one invocation at a time (gap.tsv is truncated and appended to,
    # as a table's final.tsv is: exp_table).
    { flock 8; dsweep_reports; } 8>>"$OUT/$DSWEEP_DIR/tables.lock"
}

dsweep_reports() {
    : >"$OUT/$DSWEEP_DIR/gap.tsv"
    local dir
    for dir in "$OUT/$DSWEEP_DIR"/D*/; do
        [ -f "$dir/rows.tsv" ] || continue
        dir=${dir%/}
        dsweep_compare "${dir##*/D}"
    done
    dsweep_gap_report
    dsweep_trend_report
    dsweep_bridge_report
    dsweep_fit_report
}

# fit.md / scaling.txt: the paper's way of comparing arms across D, the
# asymptote E of L(D) = E + A D^-alpha fitted per arm and seed (`dbranch
# compare --scaling`: each arm's E against the baseline's, paired by seed
# and fitted on the D both have, each curve fitted alone and the two of a
# seed with one shared alpha).
# scaling.txt: arm seed D loss, every finished run of an arm trained at 3 D
# or more (base-2x left out: its runs are the next D's baselines).
dsweep_fit_report() {
    local series="$OUT/$DSWEEP_DIR" points="$OUT/$DSWEEP_DIR/scaling.txt" dir fits
    : >"$points.all"
    for dir in "$series"/D*/; do
        dir=${dir%/}
        [ -s "$dir/final.tsv" ] || continue
        # final.tsv: row seed tokens loss ...
        awk -F'\t' -v d="${dir##*/D}" '$1 != "base-2x" { print $1, $2, d, $4 }' "$dir/final.tsv" >>"$points.all"
    done
    awk '{ if (!(($1, $3) in seen)) { seen[$1, $3] = 1; ds[$1]++ } line[NR] = $0; arm[NR] = $1 }
        END { for (i = 1; i <= NR; i++) if (ds[arm[i]] >= 3) print line[i] }' "$points.all" |
        sort -k1,1 -k2,2n -k3,3n >"$points"
    rm -f "$points.all"
    if ! grep -q '^base ' "$points" || [ "$(cut -d' ' -f1 "$points" | sort -u | wc -l)" -lt 2 ]; then
        rm -f "$points" "$series/fit.md"
        return 0
    fi
    if ! fits=$("$DBRANCH" compare --scaling "$points" --reference base 2>&1); then
        echo "run.sh dsweep: no fit.md: $fits" >&2 # a binary older than compare --scaling, say
        rm -f "$series/fit.md"
        return 0
    fi
    {
        printf '# Fitted asymptotes: %s\n\n' "$DSWEEP_DIR"
        printf 'Each arm trained at 3 D or more and each seed: L(D) = E + A D^-alpha fitted to the final validation losses (D: tokens per non-embedding parameter), and the arm'"'"'s asymptote E against the baseline'"'"'s, paired by seed (each pair fitted on the D both have). E is an extrapolation beyond the largest D trained: with 4 D and 3 parameters a fit keeps one degree of freedom, with 3 none (rms 0). "own": each curve fitted alone, so E also carries the difference of the two exponents; "shared": a seed'"'"'s two curves with one alpha. Points: scaling.txt; `dbranch compare --scaling scaling.txt --reference base`.\n\n```\n'
        printf '%s\n```\n' "${fits//"$points"/scaling.txt}"
    } >"$series/fit.md"
}


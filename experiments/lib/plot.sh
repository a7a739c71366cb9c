# PNG plots of a study (sourced by experiments/run.sh), drawn by gnuplot
# (Debian package gnuplot-nox) from the curve.dat files exp_row_curve writes
# out of the JSON-lines logs. Without gnuplot the plots are skipped with a
# note; the tables do not depend on them.
# shellcheck shell=bash

exp_have_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    echo "   (gnuplot not found: no plots; apt-get install gnuplot-nox)" >&2
    return 1
}

# One curve per row, read from OUT/STUDY/ROW/DATA ("tokens value" lines;
# rows without the file are left out), drawn by experiments/plot/SCRIPT:
#   exp_plot_rows DATA SCRIPT PNG STUDY TITLE ROW... -> OUT/STUDY/PNG
exp_plot_rows() {
    local data=$1 script=$2 png=$3 study=$4 title=$5
    shift 5
    exp_have_gnuplot || return 0
    local files="" titles="" row
    for row in "$@"; do
        local dat="$OUT/$study/$row/$data"
        [ -s "$dat" ] || continue
        files="$files $dat"
        titles="$titles $row"
    done
    [ -n "$files" ] || return 0
    gnuplot -e "files='${files# }'; titles='${titles# }'; out='$OUT/$study/$png'; plot_title='$title'" \
        "$ROOT/experiments/plot/$script"
}

# Validation loss against training tokens, one curve per row (mean of seeds):
#   exp_plot_curves STUDY NAME TITLE ROW... -> OUT/STUDY/loss_NAME.png
exp_plot_curves() { exp_plot_rows curve.dat loss_vs_tokens.gp "loss_$2.png" "$1" "$3" "${@:4}"; }

# The MoE trade-off: final validation loss against weight bytes read per
# decode step, one point per row (OUT/STUDY/cost.tsv):
#   exp_plot_moe_tradeoff STUDY -> OUT/STUDY/moe_tradeoff.png
exp_plot_moe_tradeoff() {
    exp_have_gnuplot || return 0
    local dir="$OUT/$1"
    awk -F'\t' 'NR > 1 && $2 != "nan" { printf "%s %.4f %s\n", $1, $4 / 1e6, $2 }' "$dir/cost.tsv" \
        >"$dir/tradeoff.dat"
    [ -s "$dir/tradeoff.dat" ] || return 0
    gnuplot -e "data='$dir/tradeoff.dat'; out='$dir/moe_tradeoff.png'" \
        "$ROOT/experiments/plot/moe_tradeoff.gp"
}

# The paired relative difference against the reference row along training,
# one curve per row (OUT/STUDY/ROW/diff.dat, exp_row_diff):
#   exp_plot_diffs STUDY NAME TITLE ROW... -> OUT/STUDY/diff_NAME.png
exp_plot_diffs() { exp_plot_rows diff.dat diff_vs_tokens.gp "diff_$2.png" "$1" "$3" "${@:4}"; }

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

# Validation loss against training tokens, one curve per row (mean of seeds):
#   exp_plot_curves STUDY NAME TITLE ROW... -> OUT/STUDY/loss_NAME.png
exp_plot_curves() {
    local study=$1 name=$2 title=$3
    shift 3
    exp_have_gnuplot || return 0
    local files="" titles="" row
    for row in "$@"; do
        local dat="$OUT/$study/$row/curve.dat"
        [ -s "$dat" ] || continue
        files="$files $dat"
        titles="$titles $row"
    done
    [ -n "$files" ] || return 0
    gnuplot -e "files='${files# }'; titles='${titles# }'; out='$OUT/$study/loss_$name.png'; plot_title='$title'" \
        "$ROOT/experiments/plot/loss_vs_tokens.gp"
}

# The MoE trade-off: final validation loss against weight bytes read per
# decode step, one point per row (OUT/moe/cost.tsv).
exp_plot_moe_tradeoff() {
    exp_have_gnuplot || return 0
    awk -F'\t' 'NR > 1 && $2 != "nan" { printf "%s %.4f %s\n", $1, $4 / 1e6, $2 }' "$OUT/moe/cost.tsv" \
        >"$OUT/moe/tradeoff.dat"
    [ -s "$OUT/moe/tradeoff.dat" ] || return 0
    gnuplot -e "data='$OUT/moe/tradeoff.dat'; out='$OUT/moe/moe_tradeoff.png'" \
        "$ROOT/experiments/plot/moe_tradeoff.gp"
}

# The paired relative difference against the reference row along training,
# one curve per row (OUT/STUDY/ROW/diff.dat, exp_row_diff):
#   exp_plot_diffs STUDY NAME TITLE ROW... -> OUT/STUDY/diff_NAME.png
exp_plot_diffs() {
    local study=$1 name=$2 title=$3
    shift 3
    exp_have_gnuplot || return 0
    local files="" titles="" row
    for row in "$@"; do
        local dat="$OUT/$study/$row/diff.dat"
        [ -s "$dat" ] || continue
        files="$files $dat"
        titles="$titles $row"
    done
    [ -n "$files" ] || return 0
    gnuplot -e "files='${files# }'; titles='${titles# }'; out='$OUT/$study/diff_$name.png'; plot_title='$title'" \
        "$ROOT/experiments/plot/diff_vs_tokens.gp"
}

# Each seed's gap to its own baseline against D, one line per arm and seed
# (gnuplot; called by experiments/dsweep/study.sh): the within-seed view of
# gap_vs_d.png. Lines that slope down mean the arm gets further ahead with
# data in that seed; parallel lines mean a seed offset that the trend test
# (trend.md) cancels. Below zero the arm is better. Variables, set with -e:
#   data        gap_seeds.tsv, sorted by arm, seed and D: arm D seed gap%
#   arms        space-separated arm names (one colour each)
#   series      space-separated arm:seed names, one line each
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel "D: training tokens per non-embedding parameter"
set ylabel "final val loss vs the same seed's baseline (%)"
set grid
set logscale x 2
set xrange [7 : 115]
set key outside right top
set xzeroaxis linetype -1 linewidth 1.5
set datafile separator "\t"
arm_of(s) = s[1:strstrt(s, ":") - 1]
colour(s) = sum [i = 1:words(arms)] (word(arms, i) eq arm_of(s) ? i : 0)
# the key names each arm once, at its first seed's line
first(j) = j == 1 || arm_of(word(series, j - 1)) ne arm_of(word(series, j))
plot for [j = 1:words(series)] data \
    using 2:(strcol(1) . ":" . strcol(3) eq word(series, j) ? $4 : NaN) with linespoints \
    linecolor colour(word(series, j)) pointtype 7 pointsize 0.6 \
    title (first(j) ? arm_of(word(series, j)) : "")

# The paired gap of each dsweep arm against the baseline, against D (training
# tokens per non-embedding parameter): mean relative difference of the final
# validation loss with its 95% interval (gnuplot; called by
# experiments/dsweep/study.sh). Below zero the arm is better. Variables, set
# with -e:
#   data        gap_by_arm.tsv (gap.tsv sorted by arm): D arm pairs diff% lo% hi% p arm_sd% base_sd% plan
#   arms        space-separated arm names to draw
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel "D: training tokens per non-embedding parameter"
set ylabel "final val loss vs baseline, paired by seed: mean rel. diff (%), 95% interval"
set grid
set logscale x 2
set xrange [7 : 115]
set key outside right top
set xzeroaxis linetype -1 linewidth 1.5
set datafile separator "\t"
# Arms side by side around each D (a few percent apart on the log axis).
shift(i) = 1.0 + 0.04 * (i - (words(arms) + 1) / 2.0)
plot for [i = 1:words(arms)] data \
    using ($1 * shift(i)):(strcol(2) eq word(arms, i) ? $4 : NaN):5:6 with yerrorlines pointsize 0.8 \
    title word(arms, i)

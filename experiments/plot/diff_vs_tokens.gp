# Paired relative difference of each row's validation loss against its
# reference row, along training (gnuplot; called by experiments/lib/plot.sh).
# Below zero the row is better. Variables, set with -e:
#   files       space-separated "tokens diff%" data files (diff.dat)
#   titles      one word per file (the row names)
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel "training tokens"
set ylabel "loss vs reference row, paired by seed: mean rel. diff (%)"
set grid
set key outside right top
# The first fifth of training, where the losses fall fastest and their
# differences swing by tens of percent, would flatten the rest: plot from
# 20% of the longest run on, with y scaled to what is shown.
longest = 0
do for [i = 1:words(files)] {
    stats word(files, i) using 1 nooutput
    if (STATS_max > longest) { longest = STATS_max }
}
start = 0.2 * longest
set xrange [start : longest]
set xzeroaxis linetype -1 linewidth 1.5
plot for [i = 1:words(files)] word(files, i) using 1:($1 >= start ? $2 : NaN) with linespoints pointsize 0.5 \
    title word(titles, i)

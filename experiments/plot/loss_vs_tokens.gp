# Validation loss against training tokens, one curve per file (gnuplot;
# called by experiments/lib/plot.sh). Variables, set with -e:
#   files       space-separated "tokens loss" data files (curve.dat)
#   titles      one word per file (the row names)
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel "training tokens"
set ylabel "validation loss (nats/token; mixture NLL for Decode-Branch)"
set grid
set key top right
# The first evaluations sit near ln 256 = 5.5 and would flatten the region
# where the models differ: show from the lowest loss up to 1.6x it.
stats word(files, 1) using 2 nooutput
lowest = STATS_min
do for [i = 2:words(files)] {
    stats word(files, i) using 2 nooutput
    if (STATS_min < lowest) { lowest = STATS_min }
}
set yrange [lowest * 0.97 : lowest * 1.6]
plot for [i = 1:words(files)] word(files, i) using 1:2 with linespoints pointsize 0.5 title word(titles, i)

# Answer accuracy against the answer's position, one curve per arm (gnuplot;
# called by experiments/recurrent/parity.sh). Variables, set with -e:
#   data        a TSV "arm answer mean min max" (the seeds' mean and range)
#   arms        space-separated arm names, in the file's order
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel "answer (digits summed - 1)"
set ylabel "accuracy (seeds' mean; bars: min-max)"
set yrange [0.4:1.02]
set grid
set key bottom left
plot for [i = 1:words(arms)] data using 2:(strcol(1) eq word(arms, i) ? $3 : 1/0):4:5 \
    with yerrorlines pointsize 0.5 title word(arms, i)

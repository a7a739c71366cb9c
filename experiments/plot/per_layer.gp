# A probe against depth, one curve per file with the seeds' sd as error bars
# (gnuplot; called by experiments/lib/probe.sh). Variables, set with -e:
#   files, titles   space-separated data files and one word per file
#   xcol, ycol, ecol  columns of x (layer or sublayer), the mean and its sd
#   xlab, ylab      axis labels; logy 1 for a logarithmic y axis
#   out, plot_title the PNG and its title line
set terminal pngcairo size 900,560 font ",10"
set output out
set title plot_title
set xlabel xlab
set ylabel ylab
set grid
set key outside right top
if (logy) { set logscale y }
plot for [i = 1:words(files)] word(files, i) using xcol:ycol:ecol with yerrorlines pointsize 0.7 title word(titles, i)

# Latent feedback by fused passes (experiments/feedback/): validation loss
# (left) and the state change of the last two passes (right, log scale)
# against N, one curve per row, mean over seeds with the seeds' sd as error
# bars (gnuplot; called by experiments/feedback/study.sh). Variables, -e:
#   files       space-separated data files "N loss loss_sd change change_sd"
#               (passes.dat; change "nan" at N = 0)
#   titles      one word per file (the row names)
#   out         the PNG to write
#   plot_title  the title line
set terminal pngcairo size 1200,520 font ",10"
set output out
set multiplot layout 1,2 title plot_title
# N + 1 on a log axis, labelled N: 0, 1, 2, 5, 10, 30 spread out
set logscale x
set xrange [0.8:40]
set xtics ("0" 1, "1" 2, "2" 3, "5" 6, "10" 11, "30" 31, "100" 101)
set xlabel "fused passes N (K = N + 1 passes)"
set grid
set key top left
set ylabel "validation loss of pass N + 1 (nats/token)"
plot for [i = 1:words(files)] word(files, i) using ($1 + 1):2:3 with yerrorlines pointsize 0.7 title word(titles, i)
set logscale y
set ylabel "mean ||h^(N+1) - h^(N)|| / ||h^(N)|| (top state)"
set key bottom left
plot for [i = 1:words(files)] word(files, i) using ($1 + 1):($1 > 0 ? $4 : 1/0):5 with yerrorlines pointsize 0.7 \
    title word(titles, i)
unset multiplot

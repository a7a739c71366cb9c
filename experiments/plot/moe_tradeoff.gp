# The MoE expert-allocation trade-off (gnuplot; called by
# experiments/lib/plot.sh): final validation loss against the weight bytes
# one decode step reads (dbranch info, grouped decode), one labelled point
# per row. Variables, set with -e: data ("row MB loss" lines), out (PNG).
set terminal pngcairo size 900,560 font ",10"
set output out
set title "MoE on kjv: validation loss vs decode cost (weights read per step)"
set xlabel "weight MB read per decode step (dbranch info; grouped for Decode-Branch)"
set ylabel "final validation loss (nats/token)"
set grid
set offsets graph 0.05, graph 0.2, graph 0.05, graph 0.05
plot data using 2:3 with points pointtype 7 pointsize 1 notitle, \
     data using 2:3:1 with labels offset 1, 0 left font ",8" notitle

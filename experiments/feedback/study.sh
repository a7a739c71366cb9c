# Study (issue 14), latent feedback (SPEC §6.5, arXiv 2608.08888): a llama
# trained with the paper's pass mix 1:0.75,2:0.22,3:0.03 against a one- and
# two-pass control 1:0.75,2:0.25 and a plain baseline (feedback = 1, one
# pass: its fusion weights stay at init), then every model evaluated with
# N = 0, 1, 2, 5, 10, 30 fused passes after the plain one (`dbranch eval
# --feedback-passes`). KJV bytes, 4 layers, d 64. Sourced by
# experiments/run.sh (`KEEP_CHECKPOINT=1 experiments/run.sh feedback --seeds
# "1 2 3" --tokens 1000000 --threads 1`: the kept checkpoints feed the
# evaluation; see README.md beside this file).
# shellcheck shell=bash

FEEDBACK_MIX=1:0.75,2:0.22,3:0.03
FEEDBACK_CONTROL=1:0.75,2:0.25

study_feedback() {
    begin_study feedback
    row baseline - study_feedback.ini kjv
    row mix control study_feedback.ini kjv --set train.feedback_passes=$FEEDBACK_MIX
    row control baseline study_feedback.ini kjv --set train.feedback_passes=$FEEDBACK_CONTROL
    end_study
    exp_plot_curves "$CURRENT" all "latent feedback, KJV bytes: validation loss (plain pass)" baseline mix control
    feedback_by_passes
}

# The N values every model is evaluated at, and the validation windows (the
# first FEEDBACK_WINDOWS windows of T = 128 of the val split).
FEEDBACK_LIST=0,1,2,5,10,30
FEEDBACK_WINDOWS=256

# `dbranch eval --feedback-passes` on every finished seed's kept checkpoint:
# OUT/STUDY/ROW/seed<S>/feedback.json (kept once written; delete it to redo).
#   feedback_eval_rows STUDY ROW...
feedback_eval_rows() {
    local study=$1 row seed_dir data windows=$FEEDBACK_WINDOWS
    shift
    [ "${TABLES_ONLY:-0}" = 1 ] && return 0
    [ "$QUICK" = 1 ] && windows=4
    data=$(exp_relative "$(exp_data kjv)")
    for row in "$@"; do
        for seed_dir in "$OUT/$study/$row"/seed*; do
            [ -f "$seed_dir/done" ] && [ -f "$seed_dir/checkpoint.h5" ] && [ ! -s "$seed_dir/feedback.json" ] || continue
            local rel
            rel=$(exp_relative "$seed_dir")
            echo "   eval $rel --feedback-passes $FEEDBACK_LIST" >&2
            if "$DBRANCH" eval --model "$rel/checkpoint.h5" --data "$data" --windows "$windows" \
                --feedback-passes "$FEEDBACK_LIST" --threads "$THREADS" --json >"$seed_dir/feedback.json.tmp"; then
                mv "$seed_dir/feedback.json.tmp" "$seed_dir/feedback.json"
            else
                echo "run.sh: dbranch eval --feedback-passes of $rel failed" >&2
            fi
        done
    done
}

# "row seed N loss bits_per_byte state_change seq_len" lines of every seed's feedback.json.
feedback_points() { # study row...
    local study=$1 row f
    shift
    for row in "$@"; do
        for f in "$OUT/$study/$row"/seed*/feedback.json; do
            [ -s "$f" ] || continue
            local seed=${f%/feedback.json}
            seed=${seed##*/seed}
            local T
            T=$(sed -n 's/.*"seq_len": \([0-9]*\).*/\1/p' "$f")
            grep -o '{"fused": [^}]*}' "$f" | sed 's/[{}",:]/ /g' |
                awk -v row="$row" -v seed="$seed" -v T="$T" '{ print row, seed, $2, $4, $6, $8, T }'
        done
    done
}

# Per row OUT/STUDY/ROW/passes.dat ("N loss loss_sd change change_sd", the
# plot's input) and the markdown tables of the by-passes figures on stdout.
feedback_passes_md() { # study row...
    local study=$1
    shift
    local points
    points=$(feedback_points "$study" "$@")
    [ -n "$points" ] || { echo "(no feedback.json yet)"; return 0; }
    local row
    for row in "$@"; do
        printf '%s\n' "$points" | awk -v row="$row" '$1 == row' | awk '
            { n[$3]++; s[$3] += $4; q[$3] += $4 * $4; if ($6 != "null") { c[$3] += $6; cq[$3] += $6 * $6 } }
            END { for (k in n) { m = s[k] / n[k]; v = n[k] > 1 ? (q[k] - n[k] * m * m) / (n[k] - 1) : 0
                  cm = c[k] / n[k]; cv = n[k] > 1 ? (cq[k] - n[k] * cm * cm) / (n[k] - 1) : 0
                  printf "%d %.6f %.6f %s %s\n", k, m, sqrt(v > 0 ? v : 0), (k > 0 ? sprintf("%.6g", cm) : "nan"),
                      (k > 0 ? sprintf("%.6g", sqrt(cv > 0 ? cv : 0)) : "nan") } }' | sort -n >"$OUT/$study/$row/passes.dat"
    done
    printf '%s\n' "$points" | awk -v rows="$*" '
        function stats(sum, sq, n,   m, v) { m = sum / n; v = n > 1 ? (sq - n * m * m) / (n - 1) : 0
            return sprintf("%.4f ± %.4f", m, sqrt(v > 0 ? v : 0)) }
        { loss[$1, $2, $3] = $4; change[$1, $2, $3] = $6; seeds[$2] = 1; Ns[$3] = 1; T = $7 }
        END {
            nr = split(rows, R, " "); nn = 0; for (k in Ns) L[++nn] = k + 0
            for (i = 1; i <= nn; i++) for (j = i + 1; j <= nn; j++) if (L[j] < L[i]) { t = L[i]; L[i] = L[j]; L[j] = t }
            ns = 0; for (s in seeds) S[++ns] = s + 0
            for (i = 1; i <= ns; i++) for (j = i + 1; j <= ns; j++) if (S[j] < S[i]) { t = S[i]; S[i] = S[j]; S[j] = t }
            print "### Validation loss (nats/token) of pass N + 1, per seed and mean ± sd over seeds\n"
            printf "| row | N |"; for (i = 1; i <= ns; i++) printf " seed %d |", S[i]; print " mean ± sd |"
            printf "|---|---|"; for (i = 1; i <= ns; i++) printf "---|"; print "---|"
            for (r = 1; r <= nr; r++) for (j = 1; j <= nn; j++) {
                n = 0; sum = 0; sq = 0; printf "| %s | %d |", R[r], L[j]
                for (i = 1; i <= ns; i++) { if ((R[r], S[i], L[j]) in loss) { x = loss[R[r], S[i], L[j]]; printf " %.4f |", x; n++; sum += x; sq += x * x } else printf " – |" }
                print n ? " " stats(sum, sq, n) " |" : " – |" }
            print "\n### State change ||h^(N+1) - h^(N)|| / ||h^(N)||, mean over all T = " T " positions (per seed, mean ± sd)\n"
            print "Positions t < N are fixed by then (exact zeros); the last column is the mean over the positions"
            print "t >= N that can still move: the mean × T / (T − N).\n"
            printf "| row | N |"; for (i = 1; i <= ns; i++) printf " seed %d |", S[i]; print " mean ± sd | mean over t >= N |"
            printf "|---|---|"; for (i = 1; i <= ns; i++) printf "---|"; print "---|---|"
            for (r = 1; r <= nr; r++) for (j = 1; j <= nn; j++) { if (L[j] == 0) continue
                n = 0; sum = 0; sq = 0; printf "| %s | %d |", R[r], L[j]
                for (i = 1; i <= ns; i++) { if ((R[r], S[i], L[j]) in change) { x = change[R[r], S[i], L[j]]; printf " %.4g |", x; n++; sum += x; sq += x * x } else printf " – |" }
                print n ? " " stats(sum, sq, n) " | " (T > L[j] ? sprintf("%.4g", sum / n * T / (T - L[j])) : "–") " |" : " – | – |" }
            print "\n### Paired differences of the loss by seed (nats/token; negative: the first row is lower)\n"
            printf "| pair | N |"; for (i = 1; i <= ns; i++) printf " seed %d |", S[i]; print " mean ± sd | seeds lower |"
            printf "|---|---|"; for (i = 1; i <= ns; i++) printf "---|"; print "---|---|"
            np = split("mix:control control:baseline mix:baseline", P, " ")
            for (p = 1; p <= np; p++) { split(P[p], ab, ":"); a = ab[1]; b = ab[2]
                for (j = 1; j <= nn; j++) { if (b == "baseline" && L[j] > 0) continue
                    n = 0; sum = 0; sq = 0; lower = 0; printf "| %s − %s | %d |", a, b, L[j]
                    for (i = 1; i <= ns; i++) { if (((a, S[i], L[j]) in loss) && ((b, S[i], L[j]) in loss)) {
                        d = loss[a, S[i], L[j]] - loss[b, S[i], L[j]]; printf " %+.4f |", d; n++; sum += d; sq += d * d; lower += d < 0 } else printf " – |" }
                    if (n) { m = sum / n; v = n > 1 ? (sq - n * m * m) / (n - 1) : 0; printf " %+.4f ± %.4f | %d of %d |\n", m, sqrt(v > 0 ? v : 0), lower, n } else print " – | – |" } }
        }'
}

# Signs of instability in the training logs, per (row, seed): non-finite step
# losses, updates the spike guard skipped, the largest gradient norm after
# warm-up, step losses more than 0.5 nats above the mean of the 20 steps
# before, and rises of the validation loss between evaluations.
feedback_stability_md() { # study row...
    local study=$1 row log
    shift
    echo "| row | seed | non-finite step losses | skipped updates | max grad norm (step > 50) | step-loss spikes (> +0.5 nats) | val loss rises |"
    echo "|---|---|---|---|---|---|---|"
    for row in "$@"; do
        for log in "$OUT/$study/$row"/seed*/log.jsonl; do
            [ -f "${log%/log.jsonl}/done" ] || continue
            local seed=${log%/log.jsonl}
            seed=${seed##*/seed}
            awk -v row="$row" -v seed="$seed" '
                /"type":"step"/ { match($0, /"step":[0-9]+/); step = substr($0, RSTART + 7, RLENGTH - 7) + 0
                    match($0, /"loss":[^,]*/); loss = substr($0, RSTART + 7, RLENGTH - 7)
                    match($0, /"grad_norm":[^,]*/); g = substr($0, RSTART + 12, RLENGTH - 12)
                    match($0, /"skipped_updates":[0-9]+/); skipped = substr($0, RSTART + 18, RLENGTH - 18) + 0
                    if (loss !~ /^[0-9.eE+-]+$/) { bad++; next }
                    if (step > 50 && g + 0 > gmax) gmax = g + 0
                    if (nh == 20 && loss + 0 > hs / 20 + 0.5) spikes++
                    h[i % 20] = loss + 0; i++; nh = nh < 20 ? nh + 1 : 20; hs = 0; for (k in h) hs += h[k] }
                /"type":"eval"/ { match($0, /"loss":[^,]*/); v = substr($0, RSTART + 7, RLENGTH - 7) + 0
                    if (ne++ && v > last) rises++; last = v }
                END { printf "| %s | %d | %d | %d | %.2f | %d | %d |\n", row, seed, bad, skipped, gmax, spikes, rises }' "$log"
        done
    done
}

# The by-passes part of the study: evaluations, the tables appended to
# table.md, the plot.
feedback_by_passes() {
    local rows=(baseline mix control)
    feedback_eval_rows "$CURRENT" "${rows[@]}"
    {
        echo
        echo "## By fused passes (\`dbranch eval --feedback-passes $FEEDBACK_LIST\`, first $([ "$QUICK" = 1 ] && echo 4 || echo "$FEEDBACK_WINDOWS") val windows)"
        echo
        feedback_passes_md "$CURRENT" "${rows[@]}"
        echo
        echo "## Stability (training logs)"
        echo
        echo "Parameters: $("$DBRANCH" info experiments/configs/study_feedback.ini | awk '$1 == "total" { print $4 }') (feedback = 1; the fusion's W_u, W_g and two norms included)."
        echo
        feedback_stability_md "$CURRENT" "${rows[@]}"
    } >>"$OUT/$CURRENT/table.md"
    exp_have_gnuplot || return 0
    local files="" titles="" row
    for row in "${rows[@]}"; do
        [ -s "$OUT/$CURRENT/$row/passes.dat" ] || continue
        files="$files $OUT/$CURRENT/$row/passes.dat"
        titles="$titles $row"
    done
    [ -n "$files" ] || return 0
    gnuplot -e "files='${files# }'; titles='${titles# }'; out='$OUT/$CURRENT/passes.png'; plot_title='latent feedback, KJV bytes, llama 4L d 64: by fused passes (mean ± sd over seeds)'" \
        "$ROOT/experiments/plot/loss_vs_passes.gp"
    # the trained arms alone (the baseline's untrained fusion sets the scale above)
    files=${files/"$OUT/$CURRENT/baseline/passes.dat"/}
    titles=${titles/baseline/}
    gnuplot -e "files='$(echo $files)'; titles='$(echo $titles)'; out='$OUT/$CURRENT/passes_trained.png'; plot_title='latent feedback: the trained arms by fused passes (mean ± sd over seeds)'" \
        "$ROOT/experiments/plot/loss_vs_passes.gp"
}

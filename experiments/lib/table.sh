# Result tables of a study (sourced by experiments/run.sh): reads
# OUT/<study>/rows.tsv (one line per row: name, reference row, config, corpus,
# settings) and the final {"type":"eval"} line of every seed's log, and writes
# OUT/<study>/table.md (the table RESULTS.md quotes) and table.tsv (the same
# numbers, machine-readable; tests/test_cli_experiments.c checks it).
#
# Per row: the mean and the sample standard deviation over seeds of the
# validation loss (for Decode-Branch rows the mixture NLL, the number they are
# compared on), of the primary and the branch cross-entropies and of the mean
# alpha; and the relative difference of the loss against the row's reference
# row, computed per seed (same seed = same initial draw and data order) and
# then averaged, so the spread is that of the paired differences.
# s/run is the mean wall time of a run over every sitting it took; a line
# under the table names the CPU it was measured on, and a row whose runs
# (or part of them) ran on another CPU is marked, since the machines of one
# study can differ 2x in speed.
# shellcheck shell=bash

# Two invocations of one study (two lanes) may rebuild its table at the same
# moment: final.tsv is truncated and appended to, so unserialised they
# interleaved (each seed's line twice: 8 seeds of 4, an sd 7% too small). A
# flock on tables.lock in the study folder makes the rebuilds take turns.
exp_table() { # study
    { flock 8; exp_table_locked "$1"; } 8>>"$OUT/$1/tables.lock"
}
exp_table_locked() { # study
    local study=$1 dir="$OUT/$1"
    local final="$dir/final.tsv"
    : >"$final"
    # One line per (row, seed): row seed tokens loss primary branch alpha seconds cpus
    local name
    while IFS=$'\t' read -r name _; do
        for log in "$dir/$name"/seed*/log.jsonl; do
            # Finished runs only: a stopped run's last eval is not its result.
            if [ ! -f "$log" ] || [ ! -f "$(dirname "$log")/done" ]; then continue; fi
            local seed_dir seed
            seed_dir=$(dirname "$log")
            seed=${seed_dir##*/seed}
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$seed" "$(exp_final "$log" tokens)" \
                "$(exp_final "$log" loss)" "$(exp_final "$log" loss_primary)" "$(exp_final "$log" loss_branch)" \
                "$(exp_final "$log" alpha)" "$(cat "$seed_dir/seconds" 2>/dev/null || echo null)" \
                "$(exp_run_cpus "$log")" >>"$final"
        done
    done <"$dir/rows.tsv"

    # Written aside and renamed: a report reading table.tsv meanwhile sees the old one or the new one, whole.
    awk -F'\t' -v study="$study" -v md="$dir/table.md.tmp" -v tsv="$dir/table.tsv.tmp" -v extra_dir="$dir" '
    function num(x) { return x != "" && x != "null" && x == x + 0 }
    function mean(a, n,   i, s) { s = 0; for (i = 1; i <= n; i++) s += a[i]; return s / n }
    function sd(a, n,   i, m, s) { if (n < 2) return -1; m = mean(a, n); s = 0
        for (i = 1; i <= n; i++) s += (a[i] - m) ^ 2; return sqrt(s / (n - 1)) }
    function pm(m, s, fmt) { return s < 0 ? sprintf(fmt, m) : sprintf(fmt " ± " fmt, m, s) }
    FNR == NR { key = $1 SUBSEP $2; tokens[key] = $3; loss[key] = $4; primary[key] = $5; branch[key] = $6
        alpha[key] = $7; secs[key] = $8; seeds[$1] = seeds[$1] " " $2
        cpu[key] = $9; if (num($8)) timed_on[$9]++; next }
    { order[++n_rows] = $1; reference[$1] = $2 }
    END {
        # The CPU most timed runs ran on (ties: the first by name) is the
        # one the table names; a row with a run timed elsewhere is marked.
        main_cpu = ""; for (c in timed_on) if (main_cpu == "" || timed_on[c] > timed_on[main_cpu] ||
            (timed_on[c] == timed_on[main_cpu] && c < main_cpu)) main_cpu = c
        print "| row | seeds | tokens | val loss | primary CE | branch CE | alpha | vs reference | rel. diff | s/run |" > md
        print "|---|---|---|---|---|---|---|---|---|---|" > md
        print "row\tseeds\ttokens\tloss_mean\tloss_sd\tprimary_mean\tbranch_mean\talpha_mean\treference\trel_diff_mean\trel_diff_sd" > tsv
        for (r = 1; r <= n_rows; r++) {
            row = order[r]; ref = reference[row]
            n = split(substr(seeds[row], 2), seed_list, " ")
            nl = np = nb = na = nd = nt = 0; tok = "–"
            delete L; delete P; delete Q; delete A; delete D; delete S
            for (i = 1; i <= n; i++) {
                key = row SUBSEP seed_list[i]
                tok = tokens[key]
                if (num(loss[key])) L[++nl] = loss[key]
                if (num(primary[key])) P[++np] = primary[key]
                if (num(branch[key])) Q[++nb] = branch[key]
                if (num(alpha[key])) A[++na] = alpha[key]
                if (num(secs[key])) { S[++nt] = secs[key]; if (cpu[key] != main_cpu) { elsewhere = 1; other[cpu[key]] = 1 } }
                rkey = ref SUBSEP seed_list[i]
                if (ref != "" && ref != "-" && num(loss[key]) && num(loss[rkey]))
                    D[++nd] = 100 * (loss[key] - loss[rkey]) / loss[rkey]
            }
            lm = (nl > 0) ? pm(mean(L, nl), sd(L, nl), "%.4f") : "–"
            prim = np ? pm(mean(P, np), sd(P, np), "%.4f") : "–"
            br = nb ? pm(mean(Q, nb), sd(Q, nb), "%.4f") : "–"
            al = na ? sprintf("%.3f", mean(A, na)) : "–"
            rd = nd ? sprintf("%+.2f%%", mean(D, nd)) (nd > 1 ? sprintf(" ± %.2f", sd(D, nd)) : "") : "–"
            tm = nt ? sprintf("%.0f", mean(S, nt)) (elsewhere ? " †" : "") : "–"
            elsewhere = 0
            printf "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", row, n, tok, lm, prim, br, al,
                (ref == "" || ref == "-") ? "–" : ref, rd, tm > md
            printf "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row, n, (tok == "–" ? "nan" : tok),
                nl ? sprintf("%.6f", mean(L, nl)) : "nan", (nl > 1 ? sprintf("%.6f", sd(L, nl)) : "nan"),
                np ? sprintf("%.6f", mean(P, np)) : "nan", nb ? sprintf("%.6f", mean(Q, nb)) : "nan",
                na ? sprintf("%.4f", mean(A, na)) : "nan", (ref == "" ? "-" : ref),
                nd ? sprintf("%.4f", mean(D, nd)) : "nan", (nd > 1 ? sprintf("%.4f", sd(D, nd)) : "nan") > tsv
        }
        if (main_cpu != "") {
            # by name, so a rebuild writes the same line
            n_other = 0; for (c in other) names[++n_other] = c
            for (i = 2; i <= n_other; i++) for (j = i; j > 1 && names[j] < names[j - 1]; j--) {
                t = names[j]; names[j] = names[j - 1]; names[j - 1] = t }
            others = ""; for (i = 1; i <= n_other; i++) others = others (i > 1 ? "; " : "") names[i]
            printf "\ns/run: wall seconds of a run, every sitting, on %s%s.\n", main_cpu,
                others == "" ? "" : " (†: some of its runs timed, at least in part, on " others ")" > md
        }
    }' "$final" "$dir/rows.tsv"
    mv "$dir/table.md.tmp" "$dir/table.md"
    mv "$dir/table.tsv.tmp" "$dir/table.tsv"
}

# The mean validation-loss curve of a row over its seeds: "tokens loss" lines
# in OUT/<study>/<row>/curve.dat (seeds share the schedule, so the eval points
# fall on the same token counts).
exp_row_curve() { # study row
    local dir="$OUT/$1/$2"
    [ -d "$dir" ] || return 0
    for log in "$dir"/seed*/log.jsonl; do
        if [ -f "$log" ] && [ -f "$(dirname "$log")/done" ]; then exp_curve "$log"; fi
    done | awk '{ s[$1] += $2; n[$1]++ } END { for (t in s) printf "%d %.6f\n", t, s[t] / n[t] }' |
        sort -n >"$dir/curve.dat"
}

# The paired relative difference of a row against its reference along
# training: at every eval point, 100 (loss − reference loss) / reference loss
# per seed finished in both, then the mean over those seeds, as "tokens
# diff" lines in OUT/<study>/<row>/diff.dat. The same pairing as the table's
# rel. diff column, so the curve's last point is that column's mean.
exp_row_diff() { # study row reference
    local dir="$OUT/$1/$2" ref_dir="$OUT/$1/$3"
    [ -d "$dir" ] && [ -d "$ref_dir" ] || return 0
    local seed_dir seed
    for seed_dir in "$dir"/seed*; do
        seed=${seed_dir##*/}
        [ -f "$seed_dir/done" ] && [ -f "$ref_dir/$seed/done" ] || continue
        # "tokens loss" of the reference, then of the row: join on tokens.
        { exp_curve "$ref_dir/$seed/log.jsonl" | sed 's/^/ref /'; exp_curve "$seed_dir/log.jsonl" | sed 's/^/row /'; }
    done | awk '$1 == "ref" { ref[$2] = $3; next }
        ($2 in ref) && ref[$2] > 0 { s[$2] += 100 * ($3 - ref[$2]) / ref[$2]; n[$2]++; delete ref[$2] }
        END { for (t in s) printf "%d %.4f\n", t, s[t] / n[t] }' | sort -n >"$dir/diff.dat"
}

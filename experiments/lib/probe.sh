# Probes of a study's trained models (sourced by experiments/run.sh; the
# prism and attnres studies): `dbranch analyze` on every kept checkpoint
# (KEEP_CHECKPOINT=1 when the rows were trained) and on the row's model at
# init (its config and model settings, SPEC init from the run's seed), and,
# for Decode-Branch rows, the decode engine's loss against the
# teacher-forced one on the same positions. Per seed:
#   OUT/STUDY/ROW/seed<S>/analyze.txt       the trained model's probes
#   OUT/STUDY/ROW/seed<S>/analyze_init.txt  the same at init
#   OUT/STUDY/ROW/seed<S>/decode.txt        tf | grouped | ungrouped eval JSON lines
# (kept once written: delete one to redo it), and per row the means over
# seeds that the plots and probe.md read:
#   OUT/STUDY/ROW/layers.dat      layer heads distance sd rms_attn rms_ffn (trained)
#   OUT/STUDY/ROW/rms.dat         j rms sd (trained; j = 2L the final norm's input)
#   OUT/STUDY/ROW/rms_init.dat    j rms sd (at init)
# The checkpoints themselves are not results: they are left in place but
# kept out of git (the study folder's .gitignore).
# shellcheck shell=bash

# The --set model.* words of a row's settings (rows.tsv column 5), one per line.
exp_model_sets() { # settings
    local words i
    read -ra words <<<"$1"
    for ((i = 0; i + 1 < ${#words[@]}; i++)); do
        if [ "${words[i]}" = --set ] && [[ ${words[i + 1]} == model.* ]]; then printf '%s\n' "${words[i + 1]}"; fi
    done
}

# Runs the probes of every finished seed of the rows:
#   exp_probe_rows STUDY WINDOWS ROW...
exp_probe_rows() {
    local study=$1 windows=$2
    shift 2
    [ "${TABLES_ONLY:-0}" = 1 ] && return 0
    local row name ref config corpus settings seed_dir seed data set
    for row in "$@"; do
        IFS=$'\t' read -r name ref config corpus settings < <(awk -F'\t' -v r="$row" '$1 == r' "$OUT/$study/rows.tsv")
        [ -n "${name:-}" ] || continue
        data=$(exp_relative "$(exp_data "$corpus")")
        local sets=()
        while IFS= read -r set; do sets+=(--set "$set"); done < <(exp_model_sets "$settings")
        for seed_dir in "$OUT/$study/$row"/seed*; do
            [ -f "$seed_dir/done" ] || continue
            seed=${seed_dir##*/seed}
            local rel
            rel=$(exp_relative "$seed_dir")
            if [ ! -s "$seed_dir/analyze_init.txt" ]; then
                if "$DBRANCH" analyze --config "experiments/configs/$config" "${sets[@]}" --seed "$seed" \
                    --data "$data" --windows "$windows" --threads "$THREADS" >"$seed_dir/analyze_init.txt.tmp"; then
                    mv "$seed_dir/analyze_init.txt.tmp" "$seed_dir/analyze_init.txt"
                else
                    echo "run.sh: dbranch analyze of $rel at init failed" >&2
                fi
            fi
            [ -f "$seed_dir/checkpoint.h5" ] || continue
            if [ ! -s "$seed_dir/analyze.txt" ]; then
                if "$DBRANCH" analyze --model "$rel/checkpoint.h5" --data "$data" --windows "$windows" \
                    --threads "$THREADS" >"$seed_dir/analyze.txt.tmp"; then
                    mv "$seed_dir/analyze.txt.tmp" "$seed_dir/analyze.txt"
                else
                    echo "run.sh: dbranch analyze of $rel failed" >&2
                fi
            fi
            if [[ " $settings " == *" model.branch=decode "* ]] && [ ! -s "$seed_dir/decode.txt" ]; then
                # 8 windows, 64-token prompts (8 at --quick's T 32): the same positions both ways
                local eval_args=(eval --model "$rel/checkpoint.h5" --data "$data" --windows 8
                    --prompt-len "$([ "$QUICK" = 1 ] && echo 8 || echo 64)" --threads "$THREADS" --json)
                if { "$DBRANCH" "${eval_args[@]}" --method tf &&
                    "$DBRANCH" "${eval_args[@]}" --method decode --decode grouped &&
                    "$DBRANCH" "${eval_args[@]}" --method decode --decode ungrouped; } >"$seed_dir/decode.txt.tmp"; then
                    mv "$seed_dir/decode.txt.tmp" "$seed_dir/decode.txt"
                else
                    echo "run.sh: the decode check of $rel failed" >&2
                fi
            fi
        done
    done
    return 0
}

# Mean and sample sd over seeds of column COL of the probe lines starting
# with TAG in FILE (analyze.txt | analyze_init.txt) of a row, keyed by the
# line's second word: "key mean sd" lines (sd nan with one seed).
exp_probe_mean() { # dir file tag col
    local f
    for f in "$1"/seed*/"$2"; do
        if [ -s "$f" ]; then awk -v tag="$3" -v col="$4" '$1 == tag { print $2, $col }' "$f"; fi
    done |
        awk '{ s[$1] += $2; q[$1] += $2 * $2; n[$1]++; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
        END { for (i = 1; i <= k; i++) { key = order[i]; m = s[key] / n[key]
            v = n[key] > 1 ? (q[key] - n[key] * m * m) / (n[key] - 1) : -1
            printf "%s %.6f %s\n", key, m, v < 0 ? "nan" : sprintf("%.6f", sqrt(v > 0 ? v : 0)) } }'
}

# Per row: layers.dat, rms.dat, rms_init.dat from the seeds' probe files.
#   exp_probe_means STUDY ROW...
exp_probe_means() {
    local study=$1 row dir
    shift
    for row in "$@"; do
        dir="$OUT/$study/$row"
        [ -d "$dir" ] || continue
        # the sublayer inputs: j = 2l (attention), 2l + 1 (FFN), 2L (final norm)
        local file out
        for file in analyze.txt analyze_init.txt; do
            out=$dir/rms.dat
            [ "$file" = analyze.txt ] || out=$dir/rms_init.dat
            for f in "$dir"/seed*/"$file"; do
                [ ! -s "$f" ] || awk '$1 == "layer" { print "x", 2 * $2, $5; print "x", 2 * $2 + 1, $6; L = $2 + 1 }
                    $1 == "final" { print "x", 2 * L, $2 }' "$f"
            done | awk '{ print $2, $3 }' | awk '{ s[$1] += $2; q[$1] += $2 * $2; n[$1]++ }
                END { for (j in s) { m = s[j] / n[j]; v = n[j] > 1 ? (q[j] - n[j] * m * m) / (n[j] - 1) : -1
                    printf "%d %.6f %s\n", j, m, v < 0 ? "nan" : sprintf("%.6f", sqrt(v > 0 ? v : 0)) } }' |
                sort -n >"$out"
            [ -s "$out" ] || rm -f "$out"
        done
        local heads distance
        heads=$(exp_probe_mean "$dir" analyze.txt layer 3)
        distance=$(exp_probe_mean "$dir" analyze.txt layer 4)
        if [ -n "$distance" ]; then
            join <(printf '%s\n' "$heads" | awk '{ print $1, $2 }') <(printf '%s\n' "$distance") |
                join - <(exp_probe_mean "$dir" analyze.txt layer 5 | awk '{ print $1, $2 }') |
                join - <(exp_probe_mean "$dir" analyze.txt layer 6 | awk '{ print $1, $2 }') |
                awk '{ printf "%d %d %s %s %s %s\n", $1, $2, $3, $4, $5, $6 }' | sort -n >"$dir/layers.dat"
        fi
    done
}

# Per-layer or per-sublayer curves of rows (DATA: layers.dat | rms.dat |
# rms_init.dat), drawn by experiments/plot/per_layer.gp:
#   exp_plot_probe STUDY DATA XCOL YCOL ECOL XLABEL YLABEL PNG TITLE LOGY ROW...
exp_plot_probe() {
    local study=$1 data=$2 xcol=$3 ycol=$4 ecol=$5 xlabel=$6 ylabel=$7 png=$8 title=$9 logy=${10}
    shift 10
    exp_have_gnuplot || return 0
    local files="" titles="" row
    for row in "$@"; do
        [ -s "$OUT/$study/$row/$data" ] || continue
        files="$files $OUT/$study/$row/$data"
        titles="$titles $row"
    done
    [ -n "$files" ] || return 0
    gnuplot -e "files='${files# }'; titles='${titles# }'; out='$OUT/$study/$png'; plot_title='$title'; \
        xcol=$xcol; ycol=$ycol; ecol=$ecol; xlab='$xlabel'; ylab='$ylabel'; logy=$logy" \
        "$ROOT/experiments/plot/per_layer.gp"
}

# A markdown table of a per-layer data file across rows, joined on column 1:
# "| KEYLABEL | ROW... |" with "mean ± sd" of columns MEANCOL and SDCOL.
#   exp_probe_table STUDY DATA KEYLABEL MEANCOL SDCOL FMT ROW...
exp_probe_table() {
    local study=$1 data=$2 label=$3 mcol=$4 scol=$5 fmt=$6
    shift 6
    local row files=() names=()
    for row in "$@"; do
        [ -s "$OUT/$study/$row/$data" ] || continue
        files+=("$OUT/$study/$row/$data")
        names+=("$row")
    done
    [ ${#files[@]} -gt 0 ] || return 0
    awk -v label="$label" -v mcol="$mcol" -v scol="$scol" -v fmt="$fmt" -v names="${names[*]}" '
        FNR == 1 { f++ } { key = $1; if (!(key in seen)) { seen[key] = 1; order[++k] = key }
            cell[key, f] = ($scol == "nan") ? sprintf(fmt, $mcol) : sprintf(fmt " ± " fmt, $mcol, $scol) }
        END { n = split(names, name, " "); line = "| " label; sep = "|---"
            for (i = 1; i <= n; i++) { line = line " | " name[i]; sep = sep "|---" }
            print line " |"; print sep "|"
            for (r = 1; r <= k; r++) { line = "| " order[r]
                for (i = 1; i <= n; i++) line = line " | " ((order[r], i) in cell ? cell[order[r], i] : "–")
                print line " |" } }' "${files[@]}"
}

# The mean routing weights of a row over its seeds (FILE analyze.txt |
# analyze_init.txt), as a markdown table: one line per route, its sources'
# weights, s_0 first.
exp_route_table() { # dir file
    local f
    for f in "$1"/seed*/"$2"; do
        if [ -s "$f" ]; then grep '^route ' "$f" || true; fi
    done |
        awk '{ key = $2; n[key] = $3; runs[key]++; if (!(key in seen)) { seen[key] = 1; order[++k] = key }
                for (i = 4; i <= NF; i++) s[key, i - 4] += $i; if ($3 > most) most = $3 }
            END { if (!k) exit; line = "| route | sources"; sep = "|---|---"
                for (i = 0; i < most; i++) { line = line (i ? " | s_" i : " | s_0 (emb)"); sep = sep "|---" }
                print line " |"; print sep "|"
                for (r = 1; r <= k; r++) { key = order[r]; line = "| " key " | " n[key]
                    for (i = 0; i < most; i++) line = line " | " (i < n[key] ? sprintf("%.3f", s[key, i] / runs[key]) : "")
                    print line " |" } }'
}

# The largest |weight - 1/n| over every route, source and seed of a row's
# FILE (at init: the uniform mean holds exactly when this is ~0), and the
# number of route lines read.
exp_route_uniform_gap() { # dir file
    local f
    for f in "$1"/seed*/"$2"; do
        if [ -s "$f" ]; then grep '^route ' "$f" || true; fi
    done |
        awk '{ for (i = 4; i <= NF; i++) { d = $i - 1 / $3; if (d < 0) d = -d; if (d > gap) gap = d } lines++ }
            END { printf "%.2g over %d routes\n", gap, lines }'
}

# A Decode-Branch row's decode check as a markdown table: per seed the
# loss teacher-forced and through the decode engine on the same positions.
exp_decode_table() { # dir
    local f seed
    echo "| seed | teacher-forced | decode grouped | decode un-grouped | max abs diff |"
    echo "|---|---|---|---|---|"
    for f in "$1"/seed*/decode.txt; do
        [ -s "$f" ] || continue
        seed=${f%/decode.txt}
        seed=${seed##*/seed}
        sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$f" | awk -v seed="$seed" '{ l[NR] = $1 }
            END { d = 0; for (i = 2; i <= 3; i++) { x = l[i] - l[1]; if (x < 0) x = -x; if (x > d) d = x }
                printf "| %s | %.6f | %.6f | %.6f | %.1e |\n", seed, l[1], l[2], l[3], d }'
    done
}

# `dbranch compare` of rows' finished seeds, paired by seed against REFROW's
# arm, appended to OUT/STUDY/FILE after the command line that made it (run
# from the repository root). Nothing when REFROW's seed 1 is not finished.
#   exp_compare STUDY FILE ARM_KEYS REFROW ROW...
exp_compare() {
    local study=$1 file=$2 keys=$3 ref=$4
    shift 4
    local dirs=() row seed_dir
    for row in "$ref" "$@"; do
        for seed_dir in "$OUT/$study/$row"/seed*; do
            [ -f "$seed_dir/done" ] && dirs+=("$(exp_relative "$seed_dir")")
        done
    done
    local first
    first=$(exp_relative "$OUT/$study/$ref/seed1")
    [ ${#dirs[@]} -gt 1 ] && [ -f "$first/done" ] || return 0
    {
        printf '$ dbranch compare --arm-key %s --reference %s %s\n' "$keys" "$first" "${dirs[*]}"
        "$DBRANCH" compare --arm-key "$keys" --reference "$first" "${dirs[@]}" || true
        echo
    } >>"$OUT/$study/$file"
}

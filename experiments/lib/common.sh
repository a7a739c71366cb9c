# Shared helpers of experiments/run.sh (sourced, not run): locating the
# dbranch binary and the token files, training one run of a study into
# OUT/STUDY/<row>/seed<S>/ (STUDY here and in table.sh / plot.sh is a study's
# folder for one scale, "matched/4M"), reading numbers back out of its
# JSON-lines log, and the runs manifest. Kept apart from run.sh so the study
# definitions (experiments/<study>/study.sh) read as tables.
#
# Expects from the caller: ROOT (repo root), OUT (results root), DATA_DIR,
# THREADS, QUICK (0|1), SEEDS, TOKENS_OVERRIDE (empty or a token budget).
# shellcheck shell=bash

# The binary: $DBRANCH_BINARY (set by ctest), else build $BUILD_DIR once.
exp_find_binary() {
    if [ -n "${DBRANCH_BINARY:-}" ]; then
        DBRANCH="$DBRANCH_BINARY"
    else
        local build_dir="${BUILD_DIR:-$ROOT/build}"
        echo "== building dbranch in $build_dir" >&2
        cmake -S "$ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build "$build_dir" --target dbranch -j2 >/dev/null
        DBRANCH="$build_dir/dbranch"
    fi
    [ -x "$DBRANCH" ] || { echo "run.sh: dbranch binary $DBRANCH not found" >&2; exit 1; }
}

# Path of the byte-level token file of a corpus (kjv | pycode), prepared on
# first use. Byte tokens keep every family at V = 256, so the studies compare
# models, not tokenizers.
# A corpus named <preset>1m is the first 1,000,000 bytes of the preset's text
# (the kjv preset's text is the `bible` program's output, as in dbranch prepare).
# A corpus named <preset>_bpe<V> is the preset in BPE tokens of vocabulary V,
# in DATA_DIR/<preset>_bpe<V>.h5 (the dsweep study's large_bpe8192).
exp_data() { # corpus
    local path="$DATA_DIR/$1_byte.h5"
    case "$1" in *_bpe[0-9]*) path="$DATA_DIR/$1.h5" ;; esac
    if [ ! -f "$path" ]; then
        mkdir -p "$DATA_DIR"
        echo "== prepare $path" >&2
        case "$1" in
        kjv1m)
            bible "Genesis 1:1-Revelation 22:21" | head -c 1000000 >"$DATA_DIR/kjv1m.txt"
            "$DBRANCH" prepare --input "$DATA_DIR/kjv1m.txt" --tokenizer byte --out "$path" >/dev/null
            ;;
        *_bpe[0-9]*)
            "$DBRANCH" prepare --preset "${1%_bpe*}" --tokenizer bpe --vocab "${1##*_bpe}" --out "$path" >/dev/null
            ;;
        *) "$DBRANCH" prepare --preset "$1" --tokenizer byte --out "$path" >/dev/null ;;
        esac
    fi
    printf '%s\n' "$path"
}

# Settings that shrink any study config to toy scale (--quick): the same
# code paths (every family, branch switch and MoE fan-out), a few steps each.
# nanogpt's MLP width is fixed at 4*d_model, so d_ff is set for the others only.
exp_quick_sets() { # config file
    QUICK_SETS=(--set model.d_model=32 --set model.n_head=2 --set model.block_size=32 --set train.seq_len=32
        --set train.batch_size=4 --set train.eval_every=4 --set train.eval_windows=2 --set train.warmup_steps=2)
    if ! grep -q '^[[:space:]]*family[[:space:]]*=[[:space:]]*nanogpt' "$1"; then
        QUICK_SETS+=(--set model.n_kv_head=1 --set model.d_ff=64)
    fi
}

# A path under the repository root, relative to it (run.sh runs from the
# root); any other path unchanged.
exp_relative() { # path
    case "$1" in
    "$ROOT"/*) printf '%s\n' "${1#"$ROOT"/}" ;;
    *) printf '%s\n' "$1" ;;
    esac
}

# Trains one (row, seed) of a study unless its log already holds the final
# evaluation (so an interrupted study resumes where it stopped).
#   exp_train STUDY ROW CONFIG CORPUS SEED [--set k=v ...]
# The checkpoint is deleted afterwards unless KEEP_CHECKPOINT=1 (the caller
# then deletes it): results are the logs.
# With --deadline, a run ends with its checkpoint before the deadline and the
# runs after it are not started (exp_deadline_limit); the next invocation
# resumes the stopped one as below. A run stopped by SIGINT or SIGTERM is
# treated the same way (exp_stopped_resumably).
# Runs longer than a sitting: with EXP_CHECKPOINT_EVERY=N (steps; 0, the
# default, leaves the command as it always was) the run writes its
# checkpoint every N steps (to a temporary file, renamed), and a run folder
# with the same command, a checkpoint and no `done` is continued from it
# (`dbranch train --resume`: bit for bit as if it had not stopped, at the same
# threads) instead of being started again. Commit the folder, checkpoint
# included, when a sitting ends; the checkpoint goes when the run finishes.
exp_train() {
    local study=$1 row=$2 config=$3 corpus=$4 seed=$5
    shift 5
    local dir="$OUT/$study/$row/seed$seed"
    [ "${TABLES_ONLY:-0}" = 1 ] && return 0
    local data
    data=$(exp_data "$corpus")
    local args=(train --config "experiments/configs/$config" --set "data.path=$(exp_relative "$data")"
        --set "train.seed=$seed" --set "train.checkpoint_every=${EXP_CHECKPOINT_EVERY:-0}" --out "$(exp_relative "$dir")"
        --threads "$THREADS")
    if [ "$QUICK" = 1 ]; then
        exp_quick_sets "$ROOT/experiments/configs/$config"
        args+=("${QUICK_SETS[@]}")
    fi
    [ -n "$TOKENS_OVERRIDE" ] && args+=(--tokens "$TOKENS_OVERRIDE")
    args+=("${EXTRA_SETS[@]}" "$@")
    # A multiplier of the budget (the compute-matched "twice the tokens" row)
    # is applied last, to whatever budget the config and overrides gave.
    if [ -n "${TOKEN_FACTOR:-}" ]; then
        local base
        base=$(exp_budget "${args[@]}")
        # dbranch refuses an option given twice: the new budget replaces the old.
        local kept=() i
        for ((i = 0; i < ${#args[@]}; i++)); do
            if [ "${args[i]}" = --tokens ]; then i=$((i + 1)); else kept+=("${args[i]}"); fi
        done
        args=("${kept[@]}" --tokens "$((base * TOKEN_FACTOR))")
    fi
    # Skipped only when finished with exactly this command (a changed budget
    # or setting stops the study unless --replace, below). The --out is left
    # out of the comparison: it is this directory, and runs moved with their
    # folder stay finished.
    local command
    command=$(printf '%q ' dbranch "${args[@]}")
    if [ -f "$dir/done" ] && [ "$(exp_without_out <"$dir/command.txt" 2>/dev/null)" = "$(printf '%s\n' "$command" | exp_without_out)" ]; then
        echo "   $study/$row/seed$seed: done already" >&2
        return 0
    fi
    # Another invocation is training this run (dbranch train holds an
    # exclusive flock on train.lock while it runs): leave it alone. Without
    # this the resume below fails, and a run not yet at its first checkpoint
    # was deleted by the rm -rf further down while it trained.
    if [ -f "$dir/train.lock" ] && ! flock -n "$dir/train.lock" true 2>/dev/null; then
        echo "   $study/$row/seed$seed: training in another invocation; skipped" >&2
        return 0
    fi
    if [ ! -f "$dir/done" ] && [ -f "$dir/checkpoint.h5" ] &&
        [ "$(exp_without_out <"$dir/command.txt" 2>/dev/null)" = "$(printf '%s\n' "$command" | exp_without_out)" ]; then
        exp_deadline_limit "$study/$row/seed$seed" || return 0
        echo "   $study/$row/seed$seed: resuming from its checkpoint" >&2
        local start=$SECONDS status=0
        echo "== resumed: dbranch train --resume $(exp_relative "$dir")/checkpoint.h5" >>"$dir/train.txt"
        "$DBRANCH" train --resume "$(exp_relative "$dir")/checkpoint.h5" --out "$(exp_relative "$dir")" \
            --threads "$THREADS" "${TIME_LIMIT_ARGS[@]}" >>"$dir/train.txt" 2>&1 || status=$?
        exp_stopped_resumably "$status" "$study/$row/seed$seed" "$dir" $((SECONDS - start)) && return 0
        if [ "$status" != 0 ]; then
            echo "run.sh: resuming $study/$row/seed$seed failed; see $dir/train.txt:" >&2
            tail -n 3 "$dir/train.txt" >&2
            return 1
        fi
        # Every sitting's part: the stopped ones' in seconds_so_far (runs
        # stopped before it existed count their last sitting only).
        echo "$(($(exp_seconds_so_far "$dir") + SECONDS - start))" >"$dir/seconds"
        rm -f "$dir/seconds_so_far"
        date -u +%FT%TZ >>"$dir/resumed"
        [ "${KEEP_CHECKPOINT:-0}" = 1 ] || rm -f "$dir/checkpoint.h5"
        touch "$dir/done"
        return 0
    fi
    # A finished or stopped run of another command (a changed --set, budget
    # or precision) is results, committed or not: retraining over it needs
    # --replace. Without it the study stops here, naming what differs.
    if { [ -f "$dir/done" ] || [ -f "$dir/checkpoint.h5" ]; } && [ "${EXP_REPLACE:-0}" != 1 ]; then
        echo "run.sh: $(exp_relative "$dir") holds a $(exp_run_state "$dir") run of another command ($(exp_command_change "$dir/command.txt" "$command")); --replace retrains it, or give another --out" >&2
        return 1
    fi
    # The same run finished in another study (the ablation and control
    # studies share their base and branch rows): runs are deterministic, so
    # its log is this run's; reused_from names it.
    local same
    same=$(exp_same_run "$command" "$dir")
    if [ -n "$same" ] && [ "${KEEP_CHECKPOINT:-0}" != 1 ]; then
        rm -rf "$dir"
        mkdir -p "$dir"
        cp "$same"/log.jsonl "$same"/train.txt "$same"/seconds "$dir"/
        [ ! -f "$same/provenance.json" ] || cp "$same/provenance.json" "$dir"/
        [ ! -f "$same/trunk_from" ] || cp "$same/trunk_from" "$dir"/ # its seconds are from there on
        printf '%s\n' "$command" >"$dir/command.txt"
        exp_relative "$same" >"$dir/reused_from"
        touch "$dir/done"
        echo "   $study/$row/seed$seed: the same run as $(exp_relative "$same")" >&2
        return 0
    fi
    exp_deadline_limit "$study/$row/seed$seed" || return 0
    local trunk
    trunk=$(exp_trunk_source "$command" "$row" "$seed")
    rm -rf "$dir"
    mkdir -p "$dir"
    printf '%s\n' "$command" >"$dir/command.txt"
    local start=$SECONDS status=0
    if [ -n "$trunk" ]; then
        # The same run as from scratch, bit for bit, without its constant-rate
        # part (train/trunk.h): the trunk's log up to its step is this run's.
        local from=${trunk% *} step=${trunk##* } budget
        budget=$(exp_budget "${args[@]}")
        echo "   $study/$row/seed$seed: from the trunk of $(exp_relative "$from") (step $step)" >&2
        exp_log_until "$step" <"$from/log.jsonl" >"$dir/log.jsonl"
        exp_relative "$from" >"$dir/trunk_from"
        echo "== from the trunk: dbranch train --resume $(exp_relative "$from")/trunk.h5 --tokens $budget" >"$dir/train.txt"
        "$DBRANCH" train --resume "$(exp_relative "$from")/trunk.h5" --tokens "$budget" --out "$(exp_relative "$dir")" \
            --threads "$THREADS" "${TIME_LIMIT_ARGS[@]}" >>"$dir/train.txt" 2>&1 || status=$?
    else
        echo "   $study/$row/seed$seed" >&2
        # EXP_SAVE_TRUNK=1: the run also keeps its trunk for longer runs of
        # the same row (not part of the command: it changes no weight).
        local trunk_args=()
        [ "${EXP_SAVE_TRUNK:-0}" != 1 ] || trunk_args=(--set train.save_trunk=1)
        "$DBRANCH" "${args[@]}" "${trunk_args[@]}" "${TIME_LIMIT_ARGS[@]}" >"$dir/train.txt" 2>&1 || status=$?
    fi
    exp_stopped_resumably "$status" "$study/$row/seed$seed" "$dir" $((SECONDS - start)) && return 0
    if [ "$status" != 0 ]; then
        echo "run.sh: training $study/$row/seed$seed failed; see $dir/train.txt:" >&2
        tail -n 3 "$dir/train.txt" >&2
        return 1
    fi
    echo "$((SECONDS - start))" >"$dir/seconds"
    [ "${KEEP_CHECKPOINT:-0}" = 1 ] || rm -f "$dir/checkpoint.h5"
    touch "$dir/done"
}

# --deadline (DEADLINE_EPOCH, seconds since the epoch; empty: none): sets
# TIME_LIMIT_ARGS to the `dbranch train --time-limit` that ends a run, with
# its checkpoint, before the deadline; fails (the run is not started) when
# less than DEADLINE_MIN_SECONDS would be left. DEADLINE_STARTUP_SECONDS
# covers what runs before the training loop's clock starts (reading the
# corpus and the checkpoint).
DEADLINE_MIN_SECONDS=120
DEADLINE_STARTUP_SECONDS=60
exp_deadline_limit() { # run name (for the message)
    TIME_LIMIT_ARGS=()
    if [ "${EXP_INTERRUPTED:-0}" != 0 ]; then
        echo "   $1: not started, an earlier run was stopped by a signal" >&2
        return 1
    fi
    [ -n "${DEADLINE_EPOCH:-}" ] || return 0
    local left=$((DEADLINE_EPOCH - $(date +%s) - DEADLINE_STARTUP_SECONDS))
    if [ "$left" -lt "$DEADLINE_MIN_SECONDS" ]; then
        echo "   $1: not started, the deadline is near ($left s left)" >&2
        return 1
    fi
    TIME_LIMIT_ARGS=(--time-limit "${left}s")
}

# True when STATUS is dbranch train's "stopped at its time limit" (75): the
# run folder keeps its checkpoint and no `done`, so the next invocation
# resumes it.
#
# Also true when SIGINT or SIGTERM stopped it (130, 143: dbranch train
# finishes its step and writes its checkpoint): the way to end a study
# early. No further run starts (EXP_INTERRUPTED holds the status), the
# study's tables and reports are still rebuilt from what has finished, and
# run.sh then exits with that status. The part's seconds are added to
# seconds_so_far, so a run's `seconds` count every sitting it took.
exp_stopped_resumably() { # status run-name dir seconds-of-this-part
    case "$1" in
    75) echo "   $2: stopped before the deadline at step $(exp_checkpoint_step "$3"), resumable" >&2 ;;
    130 | 143)
        [ -f "$3/checkpoint.h5" ] || return 1
        echo "   $2: stopped by a signal at step $(exp_checkpoint_step "$3"), resumable; no further run starts" >&2
        EXP_INTERRUPTED=$1
        ;;
    *) return 1 ;;
    esac
    date -u +%FT%TZ >>"$3/stopped"
    echo "$(($(exp_seconds_so_far "$3") + $4))" >"$3/seconds_so_far"
}

# The seconds a stopped run's earlier parts took (0 when none was kept).
exp_seconds_so_far() { # dir
    cat "$1/seconds_so_far" 2>/dev/null || echo 0
}

# The step of a run folder's checkpoint, from the last "stopped ... at step N/M" line of its train.txt.
exp_checkpoint_step() { # dir
    sed -n 's/.*stopped.* at step \([0-9]*\/[0-9]*\);.*/\1/p' "$1/train.txt" | tail -n 1
}

# A finished run directory under OUT whose command equals COMMAND but for
# its --out and where its --tokens stands (none: empty). Only runs without a
# kept checkpoint qualify. A row with TOKEN_FACTOR gives its --tokens last,
# so the data sweep's compute control at D (base-2x) finds the baseline at
# 2D of its seed, the same run.
exp_same_run() { # command dir
    local wanted other candidate
    wanted=$(printf '%s\n' "$1" | exp_reuse_key)
    for candidate in "$OUT"/*/*/*/seed*; do
        [ "$candidate" != "$2" ] && [ -f "$candidate/done" ] && [ ! -f "$candidate/reused_from" ] || continue
        other=$(exp_reuse_key <"$candidate/command.txt" 2>/dev/null) || continue
        if [ "$other" = "$wanted" ]; then
            printf '%s\n' "$candidate"
            return 0
        fi
    done
}

# A train command (stdin) with its --out value masked.
exp_without_out() { sed 's/ --out [^ ]* / --out - /'; }
# ... and its --tokens value too (runs that differ only in their budget).
exp_without_budget() { exp_without_out | sed 's/ --tokens [^ ]* / --tokens - /'; }
# ... with its --tokens moved last instead (dbranch train reads options in
# any order; a command that also sets train.tokens is left as it is).
exp_reuse_key() { exp_without_out | sed -E '/train\.tokens=/!s/^(.*) --tokens ([^ ]+) (.*)$/\1 \3--tokens \2 /'; }
# "finished" or "stopped" (a checkpoint and no done): for messages.
exp_run_state() { if [ -f "$1/done" ]; then echo finished; else echo stopped; fi; }
# What a new command changes of a run's command.txt, for one line: the
# words only the old one has and those only the new one has (--out aside).
exp_command_change() { # command.txt new-command
    local old new
    old=$(exp_without_out <"$1" 2>/dev/null) || old=""
    new=$(printf '%s\n' "$2" | exp_without_out)
    OLD_COMMAND=$old NEW_COMMAND=$new awk 'BEGIN {
        n = split(ENVIRON["OLD_COMMAND"], old_words, " "); m = split(ENVIRON["NEW_COMMAND"], new_words, " ")
        for (i = 1; i <= n; i++) in_old[old_words[i]] = 1
        for (i = 1; i <= m; i++) in_new[new_words[i]] = 1
        for (i = 1; i <= n; i++) if (!(old_words[i] in in_new)) gone = gone (gone == "" ? "" : " ") old_words[i]
        for (i = 1; i <= m; i++) if (!(new_words[i] in in_old)) added = added (added == "" ? "" : " ") new_words[i]
        printf "it had: %s; now: %s", (gone == "" ? "-" : gone), (added == "" ? "-" : added)
    }'
}

# Where a new run may start from a trunk (EXP_TRUNK_DIRS: study folders of
# smaller budgets, e.g. a data sweep's smaller D; each run of them trained
# with EXP_SAVE_TRUNK=1 keeps OUT/.../trunk.h5, the state after its last
# constant-rate wsd step). Prints "RUN_DIR STEP" of the latest-listed folder
# whose run of the same row and seed has a trunk, ran the same command but
# for --tokens and --out, and a smaller budget; nothing when none does.
# Trunks are a cache: they are not committed, and without one the run
# trains from step 0 to the same bits.
exp_trunk_source() { # command row seed
    local folder from="" step="" mine theirs
    mine=$(printf '%s\n' "$1" | exp_without_budget)
    for folder in ${EXP_TRUNK_DIRS:-}; do
        local run="$folder/$2/seed$3"
        [ -f "$run/trunk.h5" ] && [ -f "$run/command.txt" ] && [ -f "$run/train.txt" ] || continue
        theirs=$(exp_without_budget <"$run/command.txt")
        [ "$theirs" = "$mine" ] || continue
        local their_budget my_budget
        their_budget=$(sed -n 's/.* --tokens \([0-9][0-9]*\) .*/\1/p' "$run/command.txt")
        my_budget=$(printf '%s\n' "$1" | sed -n 's/.* --tokens \([0-9][0-9]*\) .*/\1/p')
        [ -n "$their_budget" ] && [ -n "$my_budget" ] && [ "$their_budget" -lt "$my_budget" ] || continue
        local s
        s=$(sed -n 's/.*trunk\.h5 at step \([0-9][0-9]*\),.*/\1/p' "$run/train.txt" | tail -n 1)
        [ -n "$s" ] || continue
        from=$run step=$s
    done
    [ -z "$from" ] || echo "$from $step"
}

# The lines of a JSON-lines log up to step N (records without a step, such
# as provenance, kept).
exp_log_until() { # N
    awk -v n="$1" 'match($0, /"step":[0-9]+/) { if (substr($0, RSTART + 7, RLENGTH - 7) + 0 > n) next } { print }'
}

# A token budget as a scale folder name: 4000000 -> 4M, 600000 -> 600k,
# anything not a whole number of thousands as it is (1536).
exp_scale_name() { # tokens
    awk -v n="$1" 'BEGIN {
        if (n >= 1e6 && n % 1e6 == 0) printf "%dM\n", n / 1e6
        else if (n >= 1e3 && n % 1e3 == 0) printf "%dk\n", n / 1e3
        else printf "%d\n", n }'
}

# The runs manifest of a study, OUT/<study>/runs.md: for every scale folder
# and every finished (row, seed) run in it, the command that trained it, its
# log and provenance record, and the run it reuses (reused_from), if any.
# Rebuilt from the run folders at the end of every study run. Runs still
# training or stopped by a deadline are left out: the manifest is committed
# beside the finished runs while others train, and a row linking to a log
# that is not committed would be a dead link.
exp_manifest() { # study
    local study_dir="$OUT/$1" manifest="$OUT/$1/runs.md" scale_dir run
    {
        printf '# Runs of the %s study\n\n' "$1"
        printf 'Written by experiments/run.sh from the run folders (do not edit). One line per\n'
        printf 'finished run: its row and seed, the `dbranch train` command that produced it\n'
        printf '(as run, from the repository root), and its files. Runs made before the\n'
        printf 'results moved into this folder name their old `--out` (experiments/results/\n'
        printf 'long/<study>/ is now <study>/4M/, experiments/results/reduced/<study>/ is\n'
        printf '<study>/600k/); run.sh compares commands without --out, so they count as\n'
        printf 'done. Runs still training or stopped are not listed: experiments/status.sh\n'
        printf 'lists them. See README.md for what the study asks.\n'
        for scale_dir in "$study_dir"/*/; do
            scale_dir=${scale_dir%/}
            [ -f "$scale_dir/rows.tsv" ] || continue
            local scale=${scale_dir##*/}
            printf '\n## %s tokens\n\n' "$scale"
            printf 'Table: [%s/table.md](%s/table.md).\n\n' "$scale" "$scale"
            printf '| row | seed | log | provenance | command |\n|---|---|---|---|---|\n'
            local name
            while IFS=$'\t' read -r name _; do
                for run in "$scale_dir/$name"/seed*; do
                    [ -f "$run/command.txt" ] && [ -f "$run/done" ] || continue
                    local rel=${run#"$study_dir"/} seed=${run##*/seed} log="–" provenance="–" note=""
                    [ -f "$run/log.jsonl" ] && log="[log]($rel/log.jsonl)"
                    [ -f "$run/provenance.json" ] && provenance="[json]($rel/provenance.json)"
                    [ -f "$run/reused_from" ] && note=" (reuses $(cat "$run/reused_from"))"
                    printf '| %s | %s | %s%s | %s | `%s` |\n' "$name" "$seed" "$log" "$note" "$provenance" \
                        "$(sed 's/ *$//; s/|/\\|/g' "$run/command.txt")"
                done
            done <"$scale_dir/rows.tsv"
        done
    } >"$manifest"
}

# The token budget a list of train arguments resolves to: the last --tokens,
# else the last train.tokens/tokens --set, else the config file's value.
exp_budget() {
    local budget="" config="" prev=""
    for a in "$@"; do
        case "$prev" in
        --config) config=$a ;;
        --tokens) budget=$a ;;
        --set) case "$a" in train.tokens=* | tokens=*) budget=${a#*=} ;; esac ;;
        esac
        prev=$a
    done
    if [ -z "$budget" ]; then
        budget=$(sed -n 's/^[[:space:]]*tokens[[:space:]]*=[[:space:]]*\([0-9eE.+]*\).*/\1/p' "$config" | tail -n 1)
    fi
    awk -v b="$budget" 'BEGIN { printf "%d\n", b + 0 }'
}

# A numeric field of the last {"type":"eval"} line of a log ("null" stays "null").
exp_final() { # log key
    grep '"type":"eval"' "$1" | tail -n 1 | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"
}

# The CPUs a run trained on, from the provenance lines of its log (one per
# sitting): their distinct names in order, joined by " + ".
exp_run_cpus() { # log
    grep '"type":"provenance"' "$1" | sed -n 's/.*"cpu":"\([^"]*\)".*/\1/p' |
        awk '!seen[$0]++ { printf "%s%s", (n++ ? " + " : ""), $0 } END { if (!n) printf "an unrecorded CPU" }'
}

# tokens and loss of every eval line of a log, one "tokens loss" pair per line
# (the data file a gnuplot curve reads).
exp_curve() { # log
    grep '"type":"eval"' "$1" | sed -n 's/.*"tokens":\([0-9]*\),"loss":\([^,}]*\).*/\1 \2/p'
}

#!/usr/bin/env bash
# Where the runs of the studies stand, from their run folders: which are
# training now (and where, at what speed, until when), which were stopped
# with a checkpoint (the next invocation of the study resumes them), which
# were cut off without one (the next invocation starts them again), and,
# with --all, which finished and at what validation loss. For studies that
# outlast a sitting: what to commit, what to resume, what is still running.
#
# Usage: experiments/status.sh [--all] [DIR ...]
#   DIR    study folders or any folder above run folders (default: every
#          folder under experiments/); a run folder is a seed<S> folder
#          holding command.txt and train.txt (run.sh's; recurrent/parity.sh
#          writes its own layout, which is not listed)
#   --all  list finished runs too (default: only the others, and a count)
#
# A run is "training" while a process holds its train.lock (dbranch train
# flocks it for its lifetime); its step, speed and ETA are its train.txt's
# last progress line. Exit status 0, or 2 on a bad option or folder.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
show_all=0
dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --all) show_all=1; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "status.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) [ -d "$1" ] || { echo "status.sh: $1 is not a folder" >&2; exit 2; }; dirs+=("$1"); shift ;;
    esac
done
[ ${#dirs[@]} -gt 0 ] || dirs=("$ROOT/experiments")

# The last line of train.txt that matches a pattern (empty when none).
last_line() { # file pattern
    if [ -f "$1" ]; then grep -a -E "$2" "$1" | tail -n 1 || true; fi
}

# "step N/M  ... tok/s ... ETA x" -> "step N/M, T tok/s, ETA x"
progress_of() { # progress line
    sed -E 's/^step ([0-9]+\/[0-9]+).* ([0-9.]+) tok\/s.*ETA ([^ ]+).*/step \1, \2 tok\/s, ETA \3/; t; s/^step ([0-9]+\/[0-9]+).*/step \1/' <<<"$1"
}

# A training run's position from its log.jsonl's last step record (written
# every step; train.txt's progress lines are periodic): "step N/M, T tok/s,
# ETA x" with M from the progress line and the ETA at the last step's speed.
# Falls back to the progress line when the log has no step yet.
training_position() { # run-folder progress-line
    local total record
    total=$(sed -E 's/^step [0-9]+\/([0-9]+).*/\1/' <<<"$2")
    record=""
    if [ -f "$1/log.jsonl" ]; then record=$(grep -a '"type":"step"' "$1/log.jsonl" | tail -n 1 || true); fi
    if [ -z "$record" ] || [ -z "$total" ]; then
        progress_of "$2"
        return
    fi
    awk -v record="$record" -v total="$total" 'BEGIN {
        step = record; sub(/.*"step":/, "", step); sub(/,.*/, "", step)
        tokens = record; sub(/.*"tokens":/, "", tokens); sub(/,.*/, "", tokens)
        speed = record; sub(/.*"tokens_per_s":/, "", speed); sub(/,.*/, "", speed)
        left = speed > 0 && step > 0 ? (total - step) * (tokens / step) / speed : 0
        printf "step %d/%d, %.0f tok/s, ETA %dh%02dm\n", step, total, speed, left / 3600, (left % 3600) / 60 }'
}

n_done=0 n_training=0 n_stopped=0 n_cut=0
while IFS= read -r command_file; do
    run=$(dirname "$command_file")
    name=${run#"$ROOT"/}
    log="$run/train.txt"
    [ -f "$log" ] || continue
    # A run started from a shorter run's WSD trunk (train/trunk.h) says whose.
    origin=""
    [ -f "$run/trunk_from" ] && origin=" (from the trunk of $(cat "$run/trunk_from"))"
    if [ -f "$run/done" ]; then
        n_done=$((n_done + 1))
        [ "$show_all" = 1 ] || continue
        final=$(last_line "$log" '^final: val loss')
        detail=$(sed -E 's/^final: val loss ([0-9.]+).*after ([0-9]+) steps.*/val loss \1 after \2 steps/' <<<"$final")
        [ -f "$run/reused_from" ] && detail="$detail (the same run as $(cat "$run/reused_from"))"
        printf '%-9s %s  %s%s\n' "done" "$name" "$detail" "$origin"
    elif [ -f "$run/train.lock" ] && ! flock -n "$run/train.lock" true 2>/dev/null; then
        n_training=$((n_training + 1))
        progress=$(last_line "$log" '^step [0-9]+/[0-9]+')
        printf '%-9s %s  %s%s\n' training "$name" "${progress:+$(training_position "$run" "$progress")}" "$origin"
    elif [ -f "$run/checkpoint.h5" ]; then
        n_stopped=$((n_stopped + 1))
        stop=$(last_line "$log" '^(stopped|finished|== resumed|step [0-9]+/)')
        case "$stop" in
        stopped*) detail="stopped at step $(sed -E 's/.* at step ([0-9]+\/[0-9]+).*/\1/' <<<"$stop") with its checkpoint" ;;
        "== resumed"*) detail="cut off after a resume, before its first progress line" ;;
        *) detail="cut off after $(progress_of "${stop:-step ?/?}" | sed 's/,.*//'); its checkpoint is the last periodic one" ;;
        esac
        printf '%-9s %s  %s%s; the next invocation resumes it\n' stopped "$name" "$detail" "$origin"
    else
        n_cut=$((n_cut + 1))
        printf '%-9s %s  no checkpoint: the next invocation starts it again\n' unfinished "$name"
    fi
done < <(find "${dirs[@]}" -name command.txt -path '*/seed*/command.txt' | sort)
printf '%d done, %d training, %d stopped (resumable), %d unfinished without a checkpoint\n' \
    "$n_done" "$n_training" "$n_stopped" "$n_cut"

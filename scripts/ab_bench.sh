#!/usr/bin/env bash
# A/B speed check of two dbranch binaries (before/after a change), measured
# the way the project quotes speed: both binaries run the same `bench`
# command in alternating rounds in one sitting, and the script prints each
# one's median of a JSON figure and the median of the per-round ratios.
#
#   scripts/ab_bench.sh [--rounds N] [--field NAME] BASE_BINARY NEW_BINARY -- BENCH ARGS...
#
# BENCH ARGS are passed to `dbranch bench` (add --json yourself). --field
# names the number to read from the JSON (default tokens_per_s for `train`,
# decode_ms_per_token for `decode`); with several matches per run (one per
# mode or model) the first is taken unless --nth K picks another (1-based).
# The order alternates (A B, B A, ...) so a drifting machine load does not
# favour one side.
set -euo pipefail

rounds=5
field=""
nth=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --field) field=$2; shift 2 ;;
    --nth) nth=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
if [ $# -lt 4 ] || [ "$3" != "--" ]; then
  echo "usage: scripts/ab_bench.sh [--rounds N] [--field NAME] [--nth K] BASE NEW -- BENCH ARGS..." >&2
  exit 2
fi
base=$1 new=$2
shift 3
for bin in "$base" "$new"; do
  [ -x "$bin" ] || { echo "ab_bench: $bin is not an executable" >&2; exit 2; }
done
if [ -z "$field" ]; then
  case "$1" in
    train) field=tokens_per_s ;;
    decode) field=decode_ms_per_token ;;
    *) echo "ab_bench: give --field for bench $1" >&2; exit 2 ;;
  esac
fi
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# The nth number after "field": in a JSON text on stdin.
pick() {
  grep -o "\"$field\": *[-0-9.eE+]*" | sed -n "${nth}p" | sed 's/.*: *//'
}

run_one() {
  local value
  value=$("$1" bench "${@:2}" 2>/dev/null | pick)
  [ -n "$value" ] || { echo "ab_bench: no \"$field\" in the output of $1 bench ${*:2}" >&2; exit 1; }
  echo "$value"
}

a_values=() b_values=() ratios=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    a=$(run_one "$base" "$@"); b=$(run_one "$new" "$@")
  else
    b=$(run_one "$new" "$@"); a=$(run_one "$base" "$@")
  fi
  a_values+=("$a") b_values+=("$b")
  ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.4f", b / a }')")
  echo "round $r: base $a  new $b  new/base ${ratios[-1]}"
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "median $field: base $(median "${a_values[@]}")  new $(median "${b_values[@]}")  new/base (median of rounds) $(median "${ratios[@]}")"

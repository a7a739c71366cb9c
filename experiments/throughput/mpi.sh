#!/usr/bin/env bash
# Data-parallel throughput on one machine (issue 15, docs/MPI.md): training
# tokens/s of 1 process x 2 threads against 2 processes x 1 thread (mpirun,
# the gradients summed over the processes every step), rounds interleaved so
# a change in machine load hits both alike; medians over the rounds. Then
# the allreduce itself: `mpirun -n 2 dbranch bench allreduce`.
#
# Usage: experiments/throughput/mpi.sh [--rounds R] [--steps N] [--preset baby|char] [--reduce ordered|fast]
#                                      [--build-dir DIR]
# Needs a build with -DDBRANCH_MPI=ON (default DIR: build-mpi) and mpirun.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROUNDS=5
STEPS=10
PRESET=baby
REDUCE=ordered
BUILD_DIR="$ROOT/build-mpi"
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --preset) PRESET="$2"; shift 2 ;;
    --reduce) REDUCE="$2"; shift 2 ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "mpi.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
DBRANCH="$BUILD_DIR/dbranch"
[ -x "$DBRANCH" ] || { echo "mpi.sh: no $DBRANCH (cmake -S . -B build-mpi -DDBRANCH_MPI=ON)" >&2; exit 1; }
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none -n 2 -x OMP_NUM_THREADS=1)
BENCH=(bench train --preset "$PRESET" --steps "$STEPS" --warmup 2 --no-gemm-probe --set "train.reduce=$REDUCE" --set train.precision=fp32 --json)

tokens_per_s() { sed -n 's/.*"tokens_per_s": \([0-9.]*\).*/\1/p' | head -1; }
median() { sort -g | awk '{x[NR] = $1} END {print (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2}'; }

one="" two=""
for round in $(seq 1 "$ROUNDS"); do
    a=$(OMP_NUM_THREADS=2 "$DBRANCH" "${BENCH[@]}" --threads 2 2>/dev/null | tokens_per_s)
    b=$("${MPI[@]}" "$DBRANCH" "${BENCH[@]}" --threads 1 2>/dev/null | tokens_per_s)
    echo "round $round: 1 process x 2 threads $a tokens/s, 2 processes x 1 thread $b tokens/s"
    one="$one $a" two="$two $b"
done
m1=$(echo $one | tr ' ' '\n' | median)
m2=$(echo $two | tr ' ' '\n' | median)
echo "preset $PRESET, $ROUNDS rounds of $STEPS steps, medians: 1 x 2 threads $m1 tokens/s, 2 processes x 1 thread $m2 tokens/s ($REDUCE sums), ratio $(awk -v a="$m2" -v b="$m1" 'BEGIN {printf "%.3f", a / b}')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
"${MPI[@]}" "$DBRANCH" bench allreduce --reps 10

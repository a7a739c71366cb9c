#!/usr/bin/env bash
# The MPI job through the command line (issue 15), three checks:
#  1. `mpirun -n 2 dbranch eval --json` prints one line (rank 0 alone), the
#     same bytes as one process (the windows split over the ranks, reduced
#     in window order);
#  2. a rank that dies takes the job down: `mpirun -n 2 dbranch train` is
#     stopped after step 2 (the DBRANCH_TEST_PAUSE_AFTER_STEP hook raises
#     SIGSTOP on each rank), rank 1 is killed with SIGKILL and rank 0
#     continued into the next step's gradient sum, where it would wait
#     forever for rank 1. The job must end within a minute, non-zero, with a
#     message naming the dead rank (mpirun's), not hang;
#  3. `bench train` and `bench allreduce` under mpirun -n 2 print one report;
#  and `mpirun -n 2 dbranch train > FILE` writes progress lines, not a live \r line.
# usage: test_mpi_cli.sh DBRANCH MPIRUN CORPUS_TEXT_FILE
set -u
dbranch=$1 mpirun=$2 corpus=$3
dir=$(mktemp -d "${TMPDIR:-/tmp}/dbranch_mpi_cli_XXXXXX")
rank0="" rank1=""
# Whatever happens, no rank of this job is left behind (stopped or waiting).
cleanup() {
  for pid in $rank0 $rank1; do kill -KILL "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "test_mpi_cli: $*" >&2; exit 1; }
# The pids whose parent is $1, from /proc (no procps needed).
children_of() {
  local f fields
  for f in /proc/[0-9]*/stat; do
    read -r -a fields <"$f" 2>/dev/null || continue
    [ "${fields[3]:-}" = "$1" ] && echo "${fields[0]}"
  done
}

"$dbranch" prepare --input "$corpus" --out "$dir/data.h5" >/dev/null || fail "prepare failed"
cat >"$dir/run.ini" <<INI
[model]
family = nanogpt
vocab_size = 256
block_size = 16
n_layer = 1
n_head = 2
d_model = 16
[data]
path = $dir/data.h5
[train]
batch_size = 2
seq_len = 16
tokens = 64000
eval_windows = 2
out_dir = $dir/out
threads = 1
INI

mpi=("$mpirun" --oversubscribe --allow-run-as-root --bind-to none -n 2)

# 1. eval: a model of two steps, 7 windows (an odd count: the ranks' shares differ).
OMP_NUM_THREADS=1 "$dbranch" train --config "$dir/run.ini" --tokens 64 --out "$dir/model" >/dev/null ||
  fail "training the model failed"
eval_args=(eval --model "$dir/model/checkpoint.h5" --data "$dir/data.h5" --windows 7 --json)
OMP_NUM_THREADS=1 "$dbranch" "${eval_args[@]}" >"$dir/eval1" || fail "eval in one process failed"
OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "$dbranch" "${eval_args[@]}" >"$dir/eval2" 2>"$dir/eval2.err" ||
  fail "mpirun -n 2 dbranch eval failed: $(cat "$dir/eval2.err")"
[ "$(wc -l <"$dir/eval2")" = 1 ] || fail "mpirun -n 2 dbranch eval printed $(wc -l <"$dir/eval2") lines, not 1"
cmp -s "$dir/eval1" "$dir/eval2" || fail "2 processes print $(cat "$dir/eval2"), one prints $(cat "$dir/eval1")"

# 1b. train under mpirun into a file: periodic progress lines, no live line redrawn with \r (the ranks'
# stdout is a pseudo-terminal Open MPI copies to mpirun's).
OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "$dbranch" train --config "$dir/run.ini" --tokens 64 --out "$dir/job" \
  >"$dir/train" 2>"$dir/train.err" || fail "mpirun -n 2 dbranch train failed: $(cat "$dir/train.err")"
! grep -q $'\r' "$dir/train" || fail "mpirun -n 2 dbranch train > FILE wrote a live progress line (\\r)"
grep -q "^step 2/2 " "$dir/train" || fail "mpirun -n 2 dbranch train: no 'step 2/2' line: $(cat "$dir/train")"

# 3 (before 2, which ends a job on purpose). The benchmarks under mpirun: one report, from rank 0.
OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "$dbranch" bench train --steps 2 --warmup 0 --no-gemm-probe --threads 1 \
  --json >"$dir/bench" 2>"$dir/bench.err" || fail "mpirun -n 2 dbranch bench train failed: $(cat "$dir/bench.err")"
[ "$(grep -c '"bench": "train"' "$dir/bench")" = 1 ] && grep -q '"processes": 2, "reduce": "ordered"' "$dir/bench" ||
  fail "bench train under mpirun -n 2: not one report of 2 processes: $(cat "$dir/bench")"
timeout 120 "${mpi[@]}" "$dbranch" bench allreduce --mb 0.5,1 --reps 2 --json >"$dir/allreduce" 2>&1 ||
  fail "mpirun -n 2 dbranch bench allreduce failed: $(cat "$dir/allreduce")"
[ "$(grep -c '"ms_per_mb"' "$dir/allreduce")" = 4 ] ||
  fail "bench allreduce: not 2 sizes x 2 modes: $(cat "$dir/allreduce")"

# 2. a rank that dies.
DBRANCH_TEST_PAUSE_AFTER_STEP=2 OMP_NUM_THREADS=1 timeout 120 "${mpi[@]}" "$dbranch" train --config "$dir/run.ini" >"$dir/stdout" 2>"$dir/stderr" &
job=$!

# The two ranks (mpirun's children on this machine), each stopped after step 2.
for _ in $(seq 1 600); do
  rank0="" rank1="" stopped=0
  for pid in $(children_of "$job"; for p in $(children_of "$job"); do children_of "$p"; done); do
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ "$rank" = 0 ] && rank0=$pid
    [ "$rank" = 1 ] && rank1=$pid
    [ -n "$rank" ] && [ "$state" = T ] && stopped=$((stopped + 1))
  done
  [ -n "$rank0" ] && [ -n "$rank1" ] && [ "$stopped" = 2 ] && break
  kill -0 "$job" 2>/dev/null || fail "the job ended before step 2: $(cat "$dir/stderr")"
  sleep 0.1
done
[ -n "$rank0" ] && [ -n "$rank1" ] && [ "$stopped" = 2 ] || { kill "$job"; fail "the ranks did not stop after step 2"; }

kill -KILL "$rank1"
kill -CONT "$rank0"
start=$SECONDS
wait "$job"
code=$?
seconds=$((SECONDS - start))
[ "$code" != 124 ] || fail "the job hung after rank 1 died (killed by timeout after ${seconds}s)"
[ "$code" != 0 ] || fail "the job exited 0 after rank 1 died"
[ "$seconds" -le 60 ] || fail "the job took ${seconds}s to end after rank 1 died"
grep -q "rank 1.*signal 9" "$dir/stderr" || fail "no message naming rank 1 and its signal; stderr: $(cat "$dir/stderr")"
echo "test_mpi_cli: ok (eval: one line, as one process; a killed rank ended the job: exit $code after ${seconds}s)"

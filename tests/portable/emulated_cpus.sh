#!/bin/bash
# The portable build (-DDBRANCH_NATIVE=OFF) on CPUs this machine is not:
# qemu-user emulates an x86-64 without AVX (Nehalem) and one with AVX2 but
# no AVX-512 (Haswell), and the same binary must pick the matching kernel
# level (kernels/isa.h), reproduce every reference file and train, where a
# -march=native build stops with SIGILL. Criterion suites cannot run this
# way (their workers re-exec the test program natively), so the checks go
# through the CLI. Usage: tests/portable/emulated_cpus.sh DBRANCH_BINARY
# (from the source root; needs qemu-x86_64, Debian's qemu-user).
set -euo pipefail
binary=$1
command -v qemu-x86_64 >/dev/null || { echo "emulated_cpus.sh: qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL ($cpu): $*"; failures=$((failures + 1)); }

# A tiny byte-level corpus from text in the repository (no network, no packages).
"$binary" prepare --input README.md docs/ARCHITECTURE.md --out "$work/tiny.h5" >/dev/null

for pair in Nehalem:scalar Haswell-v4:avx2; do
    cpu=${pair%%:*} level=${pair#*:}
    run() { qemu-x86_64 -cpu "$cpu" "$binary" "$@" 2> >(grep -v "TCG doesn't support" >&2); }
    echo "== $cpu: expecting kernel level $level"
    info=$(run info --cpu) || fail "info --cpu exited $?"
    grep -q "^kernel level       $level (this CPU runs up to $level;" <<<"$info" || fail "info --cpu: $(grep 'kernel level' <<<"$info")"
    grep -q "^precision = auto   fp32 (" <<<"$info" || fail "auto precision is not fp32 without AVX-512: $(grep "^precision = auto" <<<"$info")"
    for reference in tests/reference/*.h5 tests/reference/options/*.h5; do
        run check-reference "$reference" --quiet >/dev/null || fail "check-reference $reference"
    done
    rm -rf "$work/run"
    # a small model and 4 steps: emulated float code runs ~100x slower than native
    run train --config experiments/configs/quickstart_base.ini --set data.path="$work/tiny.h5" --set model.n_layer=1 \
        --set model.d_model=32 --set model.n_head=2 --set train.batch_size=4 --set train.seq_len=32 --tokens 512 \
        --set train.eval_every=0 --set train.eval_windows=4 --out "$work/run" >"$work/train.txt" ||
        fail "train ($(tail -n 1 "$work/train.txt"))"
    grep -q '"kernel_level":"'"$level"'"' "$work/run/provenance.json" || fail "provenance kernel_level"
    run eval --model "$work/run/checkpoint.h5" --data "$work/tiny.h5" --windows 4 >/dev/null || fail "eval"
done
[ "$failures" = 0 ] || { echo "emulated CPUs: $failures failure(s)"; exit 1; }
echo "emulated CPUs: the portable binary ran at scalar and avx2 levels, every reference file and a training run"

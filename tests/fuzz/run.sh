#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang-14, ASan + UBSan; build-fuzz/, apart
# from the default build) and runs each for SECONDS (default 12: the four take
# a minute, the short campaign of .ci/run). A longer campaign:
#   tests/fuzz/run.sh 3600          # an hour per harness
# Each harness starts from its committed seeds (tests/fuzz/corpus/NAME, read
# only) plus what earlier runs kept in build-fuzz/corpus/NAME; a crash, a
# sanitizer report, a leak or an oracle failure stops it, leaves the input in
# build-fuzz/crash/NAME-* and makes this script fail. Reproduce one with
#   build-fuzz/tests/fuzz/fuzz_NAME build-fuzz/crash/NAME-crash-...
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-12}
cc=${CC:-clang-14}
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (apt-get install -y clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi
CC=$cc cmake -S . -B build-fuzz -DDBRANCH_FUZZ=ON -DDBRANCH_TESTS=OFF -DDBRANCH_NATIVE=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" >/dev/null
mkdir -p build-fuzz/crash
status=0
for name in run_config tokenizer token_file model_file; do
  mkdir -p "build-fuzz/corpus/$name"
  echo "== fuzz $name (${seconds}s)"
  # One thread: the harnesses load small models; OpenMP pools would only add noise.
  if ! OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=1 "build-fuzz/tests/fuzz/fuzz_$name" \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/crash/$name-" "build-fuzz/corpus/$name" "tests/fuzz/corpus/$name" \
      >"build-fuzz/$name.log" 2>&1; then
    echo "fuzz $name: FAILED (log build-fuzz/$name.log, input in build-fuzz/crash/)" >&2
    grep -E "ERROR|SUMMARY|fuzz:|runtime error" "build-fuzz/$name.log" | head -5 >&2 || true
    status=1
  else
    grep -E "stat::number_of_executed_units|DONE" "build-fuzz/$name.log" | tail -1
  fi
done
exit $status

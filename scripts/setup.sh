#!/usr/bin/env bash
# Installs every Debian package dbranch needs (idempotent). Run as root on a
# fresh Debian 12 machine; as another user it prints the command to run.
# Usage: scripts/setup.sh [--fuzz]
set -euo pipefail

packages=(
  build-essential cmake pkg-config          # compiler and build
  libblis-openmp-dev                        # all GEMM (OpenMP-threaded BLIS)
  libdnnl-dev                               # bf16 matrix products (oneDNN: AMX, AVX512_BF16)
  libhdf5-dev hdf5-tools                    # datasets, checkpoints (C API), h5dump for inspection
  libcriterion-dev                          # tests
  libinih-dev                               # config files
  bible-kjv                                 # the default corpus (the `bible` program)
  python3                                   # the pycode corpus: the installed standard library sources
  gnuplot-nox                               # experiment plots
)

# --fuzz (CI): also clang and libFuzzer's runtime for tests/fuzz, and clang-format for CI's format check (not needed to build or test).
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang-14 libclang-rt-14-dev clang-format)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root:  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${missing[*]}"

#!/usr/bin/env bash
# Prepares the Python standard library token datasets (byte and BPE-4096) with
# `dbranch prepare --preset pycode`. Thin wrapper: every choice lives in the CLI.
#   usage: scripts/prepare_pycode.sh [OUT_DIR]  (default data_out/)
#   env:   DBRANCH=path/to/dbranch (default build/dbranch), VOCAB (default 4096)
set -euo pipefail
cd "$(dirname "$0")/.."
dbranch=${DBRANCH:-build/dbranch}
out_dir=${1:-data_out}
vocab=${VOCAB:-4096}
mkdir -p "$out_dir"
"$dbranch" prepare --preset pycode --tokenizer byte --out "$out_dir/pycode_byte.h5"
"$dbranch" prepare --preset pycode --tokenizer bpe --vocab "$vocab" --out "$out_dir/pycode_bpe$vocab.h5"

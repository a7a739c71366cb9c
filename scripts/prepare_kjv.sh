#!/usr/bin/env bash
# Prepares the King James Bible token datasets (byte and BPE-4096) with
# `dbranch prepare --preset kjv`. Thin wrapper: every choice lives in the CLI.
#   usage: scripts/prepare_kjv.sh [OUT_DIR]     (default data_out/)
#   env:   DBRANCH=path/to/dbranch (default build/dbranch), VOCAB (default 4096)
set -euo pipefail
cd "$(dirname "$0")/.."
dbranch=${DBRANCH:-build/dbranch}
out_dir=${1:-data_out}
vocab=${VOCAB:-4096}
mkdir -p "$out_dir"
"$dbranch" prepare --preset kjv --tokenizer byte --out "$out_dir/kjv_byte.h5"
"$dbranch" prepare --preset kjv --tokenizer bpe --vocab "$vocab" --out "$out_dir/kjv_bpe$vocab.h5"

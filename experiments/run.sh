#!/usr/bin/env bash
# The studies of the Decode-Branch research issue, from training to tables
# and plots (experiments/RESULTS.md quotes what this writes). Each study is a
# folder beside this script, holding its definition (study.sh), a README,
# its runs manifest (runs.md) and its results, one folder per scale:
#
#   matched    each family (nanogpt, llama, moe) as baseline and as
#              Decode-Branch twin on both corpora (kjv, pycode bytes): same
#              data order (same seed), token budget and optimizer settings
#   control    nanogpt on kjv: the twin against a baseline given the extra
#              compute another way (twice the layers; twice the tokens)
#   ablations  nanogpt on kjv: couple off, share off, branch_emb shared,
#              detach_primary, fixed alpha 0.5, branch-only readout, against
#              the adaptive default
#   moe        expert allocation on kjv: regime A top_k = 1, top_k_branch in
#              1, 2, 4; regime B top_k + top_k_branch = 4; replay and own
#              routing; validation loss beside decode cost (dbranch info:
#              experts and weight bytes per step; dbranch bench decode on the
#              trained model: ms/token)
#   triplu     product FFNs (SPEC §6.1) in the TriPLU paper's regime: llama,
#              char-level 1M-byte KJV prefix, 4 layers, d 128; SwiGLU vs
#              triplu, prod2, prod4 at a low and a hot constant lr; the
#              TriPLU arm's Decode-Branch twin
#   prism      per-layer head counts (SPEC §6.2): uniform 4 heads vs
#              1,1,2,2,4,4,4,4 at equal parameters, llama 8 layers d 128,
#              char-level kjv1m; the schedule's Decode-Branch twin
#   attnres    attention residuals (SPEC §6.3): baseline vs AttnRes (full,
#              R = 1), MHAR (full, R = 8), block (4 blocks), llama 4 layers
#              d 128, char-level kjv1m; AttnRes's Decode-Branch twin
#   recurrent  the Recurrent Transformer (SPEC §6.4) as a language model:
#              standard vs recurrent llama at 4 and 2 layers, d 128,
#              char-level kjv1m (the parity test: recurrent/parity.sh)
#   feedback   latent feedback (SPEC §6.5): the pass mix 1:0.75,2:0.22,3:0.03
#              against a 1:0.75,2:0.25 control and a one-pass baseline,
#              llama 4 layers d 64 on kjv bytes, each evaluated at 0..30
#              fused passes (dbranch eval --feedback-passes)
#   noise      the noise pilot of issue 16 (experiments/noise/): baseline and
#              twin pairs at one token budget, each variant changing batch
#              size, schedule, clipping or width (NOISE_VARIANTS: a subset)
#   dsweep     the data sweep of issue 16 (experiments/dsweep/): llama with
#              the paper's recipe on the large BPE corpus at D = 10, 20, 40,
#              80 tokens per non-embedding parameter (--d "10 20": a subset);
#              baseline, twin, twin with branch_emb = shared, two summed
#              token-embedding tables, 2x tokens; compare per arm and D
#   precision  train.precision = bf16 against fp32 (issue 12, experiments/precision/):
#              the quickstart pair at 1M KJV bytes and the nanoGPT char config
#              at 400k tokens, each row paired with its fp32 row by seed
#   all        the first four, in that order
#
# Usage: experiments/run.sh STUDY [--quick] [--seeds "1 2"] [--tokens N]
#            [--families "nanogpt llama moe"] [--corpora "kjv pycode"]
#            [--threads K] [--out DIR] [--data-dir DIR] [--set section.key=value ...]
#            [--rows "ROW ..."] [--d "D ..."] [--deadline TIME] [--replace] [--tables-only]
#   --quick     toy scale (d_model 32, T 32, a few steps): every study in
#               about a minute, for tests/test_cli_experiments.c; default
#               --out is then /tmp/dbranch_experiments_quick
#   --tokens N  override every config's token budget (the control study's
#               "twice the tokens" row gets 2N)
#   --families / --corpora restrict the matched study
#   --set K=V   passed to every `dbranch train` (e.g. train.eval_every=30)
#   --d "D ..." dsweep only: the D values (tokens per non-embedding
#               parameter) to train, default "10 20 40 80"
#   --rows R    train only these rows of the study (the others still appear
#               in its table from their finished runs): a row added to a
#               finished study trains alone, whatever --threads the others had
#   --deadline TIME  end by TIME (any `date -d` time: "23:30", "2026-12-04
#               02:00 UTC", "now + 2 hours"; a bare clock time already past
#               today is tomorrow's): each run stops with its
#               checkpoint before it (dbranch train --time-limit) and no run
#               starts within two minutes of it; the next invocation resumes
#               the stopped run. For sittings and batch-job wall times.
#               SIGTERM or SIGINT to the running `dbranch train` likewise
#               ends the study early (its tables still rebuilt; exit 143/130)
#   --replace   retrain a finished or stopped run whose command has changed
#               (a different --set, --tokens or config path): without it
#               run.sh stops at such a run, naming what changed, so results
#               are never retrained over by accident
#   --tables-only  train nothing: rebuild tables, plots and the manifest from
#               the finished runs under OUT (rows with no finished seed show
#               no numbers)
# Results: OUT/<study>/<scale>/<row>/seed<S>/{log.jsonl,provenance.json,
# train.txt,command.txt}, OUT/<study>/<scale>/{table.md,table.tsv,*.png} and
# the manifest OUT/<study>/runs.md (every run of every scale: its command and
# its log). OUT defaults to experiments/ (so a study's results sit in its
# folder); <scale> is the token budget as a number: 600k, 4M (the config's
# budget, or --tokens / --set train.tokens). Finished (row, seed) runs are
# skipped, so a stopped study resumes; delete a run's directory to redo it.
# Binary: $DBRANCH_BINARY, else built in $BUILD_DIR (default build/). Data:
# DATA_DIR/{kjv,pycode}_byte.h5, prepared on first use (default data_out/).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Sleeping rather than spinning OpenMP workers: on a shared 2-core machine a
# spinning worker steals the core its partner needs.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
STUDY=$1
shift
case "$STUDY" in
matched | control | ablations | moe | triplu | prism | attnres | recurrent | feedback | noise | dsweep | precision | all) ;;
-h | --help) usage; exit 0 ;;
*) echo "run.sh: unknown study '$STUDY' (matched|control|ablations|moe|triplu|prism|attnres|recurrent|feedback|noise|dsweep|precision|all)" >&2; exit 2 ;;
esac

QUICK=0
SEEDS="1 2"
TOKENS_OVERRIDE=""
FAMILIES="nanogpt llama moe"
CORPORA="kjv pycode"
THREADS=2
OUT=""
DATA_DIR="$ROOT/data_out"
EXTRA_SETS=()
TABLES_ONLY=0
EXP_REPLACE=0
ROWS=""
DEADLINE_EPOCH=""
EXP_INTERRUPTED=0 # the status of a run stopped by SIGINT/SIGTERM (exp_stopped_resumably)
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; shift ;;
    --seeds) SEEDS="$2"; shift 2 ;;
    --tokens) TOKENS_OVERRIDE="$2"; shift 2 ;;
    --families) FAMILIES="$2"; shift 2 ;;
    --corpora) CORPORA="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --data-dir) DATA_DIR="$2"; shift 2 ;;
    --set) EXTRA_SETS+=(--set "$2"); shift 2 ;;
    --tables-only) TABLES_ONLY=1; shift ;;
    --replace) EXP_REPLACE=1; shift ;;
    --rows) ROWS="$2"; shift 2 ;;
    --d) DSWEEP_D="$2"; shift 2 ;;
    --deadline)
        DEADLINE_EPOCH=$(date -d "$2" +%s 2>/dev/null) || { echo "run.sh: --deadline '$2' is not a time date(1) reads" >&2; exit 2; }
        # A bare clock time already past today is that time tomorrow, as
        # at(1) reads it: "--deadline 00:30" at 22:00 ends a sitting after
        # midnight. Any other past time is a mistake.
        if [ "$DEADLINE_EPOCH" -le "$(date +%s)" ] && [[ $2 =~ ^[0-9]{1,2}:[0-9]{2}(:[0-9]{2})?$ ]]; then
            DEADLINE_EPOCH=$(date -d "tomorrow $2" +%s)
        fi
        [ "$DEADLINE_EPOCH" -gt "$(date +%s)" ] || { echo "run.sh: --deadline '$2' ($(date -d "@$DEADLINE_EPOCH")) is past" >&2; exit 2; }
        shift 2 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
if [ "$QUICK" = 1 ]; then
    [ -n "$OUT" ] || OUT=/tmp/dbranch_experiments_quick
    # 12 steps of 4 x 32 tokens: enough to move the loss off ln 256 (dsweep
    # budgets by D instead: DSWEEP_PARAMS).
    [ -n "$TOKENS_OVERRIDE" ] || [ "$STUDY" = dsweep ] || TOKENS_OVERRIDE=1536
fi
[ -n "$OUT" ] || OUT="$ROOT/experiments"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# Runs start from the repository root and name files relative to it, so the
# committed commands and logs hold no machine's paths and rerun anywhere.
if [ -n "${DBRANCH_BINARY:-}" ] && [ "${DBRANCH_BINARY#/}" = "$DBRANCH_BINARY" ]; then
    DBRANCH_BINARY="$PWD/$DBRANCH_BINARY"
fi
cd "$ROOT"

# shellcheck source=lib/common.sh
. "$ROOT/experiments/lib/common.sh"
# shellcheck source=lib/table.sh
. "$ROOT/experiments/lib/table.sh"
# shellcheck source=lib/plot.sh
. "$ROOT/experiments/lib/plot.sh"
# shellcheck source=lib/probe.sh
. "$ROOT/experiments/lib/probe.sh"
exp_find_binary
# A study binary kept from before --time-limit existed would fail every run.
if [ -n "$DEADLINE_EPOCH" ] && ! "$DBRANCH" train --help 2>/dev/null | grep -q -- --time-limit; then
    echo "run.sh: --deadline needs a dbranch whose train has --time-limit; $DBRANCH has none (an older build?)" >&2
    exit 2
fi
if [ -n "$DEADLINE_EPOCH" ]; then
    left=$((DEADLINE_EPOCH - $(date +%s)))
    printf 'run.sh: deadline %s (in %d h %02d min)\n' "$(date -d "@$DEADLINE_EPOCH")" $((left / 3600)) $((left % 3600 / 60)) >&2
fi

# The scale folder of this invocation: the token budget every row starts from
# (a row's TOKEN_FACTOR multiplies its own budget, not the folder's name).
budget_args=(--config experiments/configs/study_nanogpt.ini "${EXTRA_SETS[@]}")
[ -n "$TOKENS_OVERRIDE" ] && budget_args+=(--tokens "$TOKENS_OVERRIDE")
SCALE=$(exp_scale_name "$(exp_budget "${budget_args[@]}")")

# Declares a row of the current study and trains it for every seed:
#   row NAME REFERENCE CONFIG CORPUS [--set k=v ...]
# REFERENCE is the row its loss is compared against ("-": none).
row() {
    local name=$1 ref=$2 config=$3 corpus=$4
    shift 4
    # Once per name: two invocations side by side (different --seeds) both
    # list every row, and the tables must show each row once. The check and
    # the append hold a lock on the file: two invocations started in the
    # same second had each found "base" missing and both added it (the D = 20
    # table of 2026-12-02 then counted every baseline twice).
    STUDY_ROW_LINES+=("$(printf '%s\t%s\t%s\t%s\t%s' "$name" "$ref" "$config" "$corpus" "$*")")
    {
        flock 9
        awk -F'\t' -v n="$name" '$1 == n { found = 1 } END { exit !found }' "$OUT/$CURRENT/rows.tsv" 2>/dev/null ||
            printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$ref" "$config" "$corpus" "$*" >>"$OUT/$CURRENT/rows.tsv"
    } 9>>"$OUT/$CURRENT/rows.tsv"
    [ -z "$ROWS" ] || [[ " $ROWS " == *" $name "* ]] || return 0
    local seed
    for seed in $SEEDS; do
        exp_train "$CURRENT" "$name" "$config" "$corpus" "$seed" "$@"
    done
}

# CURRENT is the study's folder for this scale, relative to OUT
# ("matched/4M"): what the table, plot and train helpers take as STUDY.
begin_study() {
    CURRENT=$1/$SCALE
    mkdir -p "$OUT/$CURRENT"
    exp_rows_begin
    echo "== study $CURRENT -> $OUT/$CURRENT" >&2
}

# rows.tsv lists a study's rows for its tables. It is not emptied when an
# invocation starts: another invocation of the same study (other seeds) may
# be building its tables from it, and an emptied file gave tables without
# the rows not yet declared. row() adds a missing row as it is declared;
# exp_rows_end replaces the file (renamed over it) by exactly the rows this
# invocation declared, in order, so a row removed from a study.sh leaves the
# tables at the next invocation's end.
exp_rows_begin() {
    STUDY_ROW_LINES=()
    touch "$OUT/$CURRENT/rows.tsv"
}
exp_rows_end() {
    local file="$OUT/$CURRENT/rows.tsv"
    {
        flock 9
        printf '%s\n' "${STUDY_ROW_LINES[@]}" >"$file.$$" && mv "$file.$$" "$file"
    } 9>>"$file"
}

end_study() {
    exp_rows_end
    exp_table "$CURRENT"
    local name reference rest
    while IFS=$'\t' read -r name reference rest; do
        exp_row_curve "$CURRENT" "$name"
        [ "$reference" = - ] || exp_row_diff "$CURRENT" "$name" "$reference"
    done <"$OUT/$CURRENT/rows.tsv"
    echo "   table: $OUT/$CURRENT/table.md" >&2
    exp_manifest "${CURRENT%/*}"
}

BRANCH=(--set model.branch=decode)

# The study definitions, one folder each.
# shellcheck source=matched/study.sh
. "$ROOT/experiments/matched/study.sh"
# shellcheck source=control/study.sh
. "$ROOT/experiments/control/study.sh"
# shellcheck source=ablations/study.sh
. "$ROOT/experiments/ablations/study.sh"
# shellcheck source=moe/study.sh
. "$ROOT/experiments/moe/study.sh"
# shellcheck source=triplu/study.sh
. "$ROOT/experiments/triplu/study.sh"
# shellcheck source=noise/study.sh
. "$ROOT/experiments/noise/study.sh"
# shellcheck source=prism/study.sh
. "$ROOT/experiments/prism/study.sh"
# shellcheck source=attnres/study.sh
. "$ROOT/experiments/attnres/study.sh"
# shellcheck source=recurrent/study.sh
. "$ROOT/experiments/recurrent/study.sh"
# shellcheck source=feedback/study.sh
. "$ROOT/experiments/feedback/study.sh"
# shellcheck source=dsweep/study.sh
. "$ROOT/experiments/dsweep/study.sh"
# shellcheck source=precision/study.sh
. "$ROOT/experiments/precision/study.sh"

# One compound command to the end of the file, closed by exit: bash parses it
# whole before running it, so editing this file while a study runs (hours)
# cannot change what the running invocation executes next (bash otherwise
# reads a script as it goes, and an edit made its end run garbage).
{
case "$STUDY" in
matched) study_matched ;;
control) study_control ;;
ablations) study_ablations ;;
moe) study_moe ;;
triplu) study_triplu ;;
noise) study_noise ;;
prism) study_prism ;;
attnres) study_attnres ;;
recurrent) study_recurrent ;;
feedback) study_feedback ;;
dsweep) study_dsweep ;;
precision) study_precision ;;
all) study_matched; study_control; study_ablations; study_moe ;;
esac
if [ "${EXP_INTERRUPTED:-0}" != 0 ]; then
    echo "== stopped by a signal: the same command resumes the stopped run; tables in $OUT" >&2
    exit "$EXP_INTERRUPTED"
fi
echo "== done: $OUT" >&2
exit 0
}

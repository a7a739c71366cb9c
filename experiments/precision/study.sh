# The bf16 numerics study of issue 12: does train.precision = bf16 (matrix
# products on bf16-rounded operands, float32 sums and masters) learn what
# float32 learns? The quickstart pair (nanoGPT baseline and its
# Decode-Branch twin, 1M KJV bytes) and the nanoGPT char config (400k
# tokens), each trained in fp32 and in bf16 from the same seed (same
# initial weights and batches), so each bf16 row is paired with its fp32 row
# by seed. Validation is float32 on the masters (docs/DECISIONS.md), every
# 260 steps for the quickstart rows (whole split) and every 20 for char (its
# config's 200 windows). Sourced by experiments/run.sh
# (`experiments/run.sh precision --seeds "1 2" --threads 1`); the token
# budgets are the rows' own (--tokens overrides both). See README.md here.
# shellcheck shell=bash

study_precision() {
    # The folder is named after the quickstart budget, not study_nanogpt.ini's.
    local budget=(--config experiments/configs/quickstart_base.ini "${EXTRA_SETS[@]}")
    [ -n "$TOKENS_OVERRIDE" ] && budget+=(--tokens "$TOKENS_OVERRIDE")
    SCALE=$(exp_scale_name "$(exp_budget "${budget[@]}")")
    begin_study precision
    local bf16=(--set train.precision=bf16)
    local quick_eval=(--set train.eval_every=260 --set train.eval_windows=0)
    local char_sets=(--set train.tokens=400000 --set train.eval_every=20)
    [ "$QUICK" = 1 ] && quick_eval=() && char_sets=()
    row base-fp32 - quickstart_base.ini kjv "${quick_eval[@]}"
    row base-bf16 base-fp32 quickstart_base.ini kjv "${quick_eval[@]}" "${bf16[@]}"
    row twin-fp32 - quickstart_branch.ini kjv "${quick_eval[@]}"
    row twin-bf16 twin-fp32 quickstart_branch.ini kjv "${quick_eval[@]}" "${bf16[@]}"
    row char-fp32 - nanogpt_char.ini kjv "${char_sets[@]}"
    row char-bf16 char-fp32 nanogpt_char.ini kjv "${char_sets[@]}" "${bf16[@]}"
    # bf16 with the attention's products on AMX tiles too (kernels/attention_amx.h,
    # train.bf16_attention = amx; under auto, the default on AMX CPUs since
    # 2026-12-02). The bf16 rows above ran before it, with float32 attention.
    # Registered only where the CPU has AMX-BF16 (elsewhere amx is an error).
    if grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
        local amx=(--set train.bf16_attention=amx)
        row base-bf16amx base-fp32 quickstart_base.ini kjv "${quick_eval[@]}" "${bf16[@]}" "${amx[@]}"
        row twin-bf16amx twin-fp32 quickstart_branch.ini kjv "${quick_eval[@]}" "${bf16[@]}" "${amx[@]}"
        row char-bf16amx char-fp32 nanogpt_char.ini kjv "${char_sets[@]}" "${bf16[@]}" "${amx[@]}"
    fi
    end_study
    exp_plot_curves "$CURRENT" quickstart "bf16 vs fp32: quickstart pair, validation loss (float32 eval)" \
        base-fp32 base-bf16 base-bf16amx twin-fp32 twin-bf16 twin-bf16amx
    exp_plot_curves "$CURRENT" char "bf16 vs fp32: nanoGPT char, validation loss (float32 eval)" char-fp32 char-bf16 \
        char-bf16amx
    exp_plot_diffs "$CURRENT" all "bf16 vs fp32, paired by seed (% of the fp32 loss)" base-bf16 twin-bf16 char-bf16
    [ -d "$OUT/$CURRENT/base-bf16amx" ] && exp_plot_diffs "$CURRENT" amx \
        "bf16 with AMX attention vs fp32, paired by seed (% of the fp32 loss)" base-bf16amx twin-bf16amx char-bf16amx
    return 0
}

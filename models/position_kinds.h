/* Position schemes (SPEC §1, §6.4): how a model tells positions apart. One
 * table entry per scheme, read through the model description (models/arch.h):
 *   learned  pos_emb [T_max, C] added to the token embedding (nanoGPT)
 *   rope     q and k rotated per head by position (LLaMA, interleaved pairs)
 *   alibi    no parameters, no rotation: a linear bias on the attention
 *            scores, -(t - s) * slope_h, which the attention kernels add
 * Each entry has its parameters, its taped form for training and a
 * single-threaded row form for the decode engine's team; a score-bias scheme
 * instead gives each layer's per-head slopes, which every executor hands to
 * the attention kernels (kernels/attention.h, the `_biased` forms). */
#ifndef MODEL_POSITION_KINDS_H
#define MODEL_POSITION_KINDS_H

#include <stdint.h>

#include "autograd/tape.h"

struct model_position_kind {
    const char *name;
    int learned_table; /* pos_emb [T_max, C] exists and is added to every embedding */
    int rotary;        /* q and k are rotated (a [T_max, hd/2, 2] table per head width) */
    /* Taped: x [B,T,n_heads*hd] -> rotated (rotary kinds only). */
    dt_tensor *(*rotate)(ag_ctx *ctx, dt_tensor *x, int64_t n_heads, double theta);
    /* Rows: x [n_heads, hd] rotated in place at position pos with table
     * [T_max, hd/2, 2] (rotary kinds only). No threads of its own. */
    void (*rotate_heads)(float *x, const float *table, int64_t pos, int64_t n_heads, int64_t hd);
    /* Score-bias kinds only: slopes [n_heads] of a layer with n_heads query
     * heads (the model description keeps one array per layer). */
    void (*head_slopes)(float *slopes, int64_t n_heads);
};

typedef struct model_position_kind model_position_kind;

/* NULL for an unknown name. */
const model_position_kind *model_position_kind_find(const char *name);

#endif

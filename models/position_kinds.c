/* The position schemes of SPEC §1 and §6.4: learned absolute positions, RoPE
 * and ALiBi. */
#include "models/position_kinds.h"

#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "kernels/rope.h"

static dt_tensor *rope_taped(ag_ctx *ctx, dt_tensor *x, int64_t n_heads, double theta) {
    return ag_rope(ctx, x, n_heads, theta);
}

/* One position on this thread: the kernel's core (the decode step rotates
 * per kv-head work item, where a wrapper would open a nested OpenMP region). */
// x [n_heads, hd]; table [T_max, hd/2, 2]
static void rope_rotate_heads(float *x, const float *table, int64_t pos, int64_t n_heads, int64_t hd) {
    k_rope_forward_range(x, table, 1, pos, n_heads, hd);
}

/* ALiBi (SPEC §6.4): head h of H gets slope 2^(-8(h+1)/H), the geometric
 * sequence of the ALiBi paper for any H (not only powers of two). */
// slopes [n_heads]
static void alibi_head_slopes(float *slopes, int64_t n_heads) {
    for (int64_t h = 0; h < n_heads; h++)
        slopes[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)n_heads);
}

static const model_position_kind kinds[] = {
    {"learned", 1, 0, NULL, NULL, NULL},
    {"rope", 0, 1, rope_taped, rope_rotate_heads, NULL},
    {"alibi", 0, 0, NULL, NULL, alibi_head_slopes},
};

const model_position_kind *model_position_kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i].name, name)) return &kinds[i];
    return NULL;
}

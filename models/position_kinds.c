/* The position schemes of SPEC §1: learned absolute positions and RoPE. */
#include "models/position_kinds.h"

#include <string.h>

#include "autograd/ops.h"

static dt_tensor *rope_taped(ag_ctx *ctx, dt_tensor *x, int64_t n_heads, double theta) {
    return ag_rope(ctx, x, n_heads, theta);
}

/* k_rope_forward's arithmetic for one position, on this thread: the decode
 * step rotates per kv-head work item, where a kernel call would open a nested
 * OpenMP region per head. */
// x [n_heads, hd]; table [T_max, hd/2, 2]
static void rope_rotate_heads(float *x, const float *table, int64_t pos, int64_t n_heads, int64_t hd) {
    const int64_t half = hd / 2;
    const float *angles = table + pos * half * 2; /* [half, 2] for this position */
    for (int64_t h = 0; h < n_heads; h++) {
        float *head = x + h * hd;
        for (int64_t j = 0; j < half; j++) {
            float c = angles[2 * j], sn = angles[2 * j + 1];
            float x0 = head[2 * j], x1 = head[2 * j + 1];
            head[2 * j] = x0 * c - x1 * sn;
            head[2 * j + 1] = x0 * sn + x1 * c;
        }
    }
}

static const model_position_kind kinds[] = {
    {"learned", 1, 0, NULL, NULL},
    {"rope", 0, 1, rope_taped, rope_rotate_heads},
};

const model_position_kind *model_position_kind_find(const char *name) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcmp(kinds[i].name, name)) return &kinds[i];
    return NULL;
}

/* Attention residuals (attn_res.h): the sources bookkeeping and the route,
 * taped from differentiable ops (each gradient-checked on its own), and the
 * same route on rows of floats for the decode engine. */
#include "models/attn_res.h"

#include <math.h>
#include <string.h>

#include "autograd/ops.h"

dt_status model_route_begin(ag_ctx *ctx, model_route_sources *src, dt_tensor *s0, int64_t n_blocks, int64_t per_block,
                            int64_t heads, float eps) {
    memset(src, 0, sizeof *src);
    if (!s0) return DT_ERR;
    const int64_t C = s0->shape[s0->ndim - 1];
    src->s0 = s0;
    src->blocks = ag_scratch(ctx, (size_t)n_blocks * sizeof *src->blocks);
    src->map = ag_tensor(ctx, DT_F32, DT_SHAPE(heads, C));
    src->map_t = ag_tensor(ctx, DT_F32, DT_SHAPE(C, heads));
    if (!src->blocks || !src->map || !src->map_t) return DT_ERR;
    const int64_t width = C / heads;
    for (int64_t r = 0; r < heads; r++)
        for (int64_t c = 0; c < C; c++) {
            dt_f32(src->map)[r * C + c] = c / width == r ? 1.0f : 0.0f;
            dt_f32(src->map_t)[c * heads + r] = c / width == r ? 1.0f : 0.0f;
        }
    src->per_block = per_block;
    src->heads = heads;
    src->eps = eps;
    return DT_OK;
}

dt_status model_route_add(ag_ctx *ctx, model_route_sources *src, dt_tensor *out) {
    if (!out) return DT_ERR;
    src->partial = src->partial ? ag_add(ctx, src->partial, out) : out;
    if (!src->partial) return DT_ERR;
    if (++src->in_block == src->per_block) { /* the block is complete: it becomes one source */
        src->blocks[src->n_blocks++] = src->partial;
        src->partial = NULL;
        src->in_block = 0;
    }
    return DT_OK;
}

// sources s_i [B,T,C] -> h [B,T,C]
dt_tensor *model_route_forward(ag_ctx *ctx, const model_route_sources *src, dt_tensor *query, dt_tensor *norm) {
    const int64_t n = 1 + src->n_blocks + (src->partial ? 1 : 0), R = src->heads;
    dt_tensor **sources = ag_scratch(ctx, (size_t)n * sizeof *sources);
    if (!sources) return NULL;
    sources[0] = src->s0;
    for (int64_t i = 0; i < src->n_blocks; i++)
        sources[1 + i] = src->blocks[i];
    if (src->partial) sources[n - 1] = src->partial;
    const int64_t B = src->s0->shape[0], T = src->s0->shape[1], rows = B * T * R;

    /* logits [B*T*R, n]: head r's score of source i = sum over its channels of w ⊙ RMSNorm_g(s_i) */
    dt_tensor *logits = NULL;
    for (int64_t i = 0; i < n; i++) {
        dt_tensor *key = ag_mul_vec(ctx, ag_rmsnorm(ctx, sources[i], norm, src->eps), query);       // [B,T,C]
        dt_tensor *score = ag_reshape(ctx, ag_linear(ctx, key, src->map, NULL), DT_SHAPE(rows, 1)); // [B*T*R,1]
        logits = logits ? ag_concat_last(ctx, logits, score) : score;
    }
    dt_tensor *alpha = ag_softmax(ctx, logits); // [B*T*R, n] over the sources
    dt_tensor *h = NULL;
    for (int64_t i = 0; i < n; i++) {
        dt_tensor *weight = ag_reshape(ctx, ag_slice_last(ctx, alpha, i, 1), DT_SHAPE(B, T, R));
        dt_tensor *term = ag_mul(ctx, ag_linear(ctx, weight, src->map_t, NULL), sources[i]); // alpha_{i,r(c)} s_i[c]
        h = h ? ag_add(ctx, h, term) : term;
    }
    return h;
}

void model_route_row(float *out, const float *history, int64_t history_stride, int64_t n_out, int64_t per_block,
                     const float *query, const float *norm, int64_t heads, int64_t C, float eps, float *gathered,
                     float *logits) {
    /* the sources: s_0, the completed blocks' sums, the current block's partial sum */
    int64_t n = 1;
    memcpy(gathered, history, (size_t)C * sizeof(float));
    for (int64_t j = 0; j < n_out; j++) {
        const float *o = history + (1 + j) * history_stride;
        float *dst = gathered + n * C;
        if (j % per_block == 0)
            memcpy(dst, o, (size_t)C * sizeof(float));
        else
            for (int64_t c = 0; c < C; c++)
                dst[c] += o[c];
        if (j % per_block == per_block - 1 || j == n_out - 1) n++;
    }
    const int64_t width = C / heads;
    for (int64_t i = 0; i < n; i++) { /* k_i = RMSNorm_g(s_i) (sums in double, as k_rmsnorm_forward) */
        const float *s = gathered + i * C;
        double sum_sq = 0.0;
        for (int64_t c = 0; c < C; c++)
            sum_sq += (double)s[c] * (double)s[c];
        const float rstd = (float)(1.0 / sqrt(sum_sq / (double)C + (double)eps));
        for (int64_t r = 0; r < heads; r++) {
            float dot = 0.0f;
            for (int64_t c = r * width; c < (r + 1) * width; c++)
                dot += query[c] * (s[c] * rstd * norm[c]);
            logits[r * n + i] = dot;
        }
    }
    for (int64_t r = 0; r < heads; r++) { /* softmax over the sources, per head */
        float *row = logits + r * n, max = row[0], sum = 0.0f;
        for (int64_t i = 1; i < n; i++)
            max = row[i] > max ? row[i] : max;
        for (int64_t i = 0; i < n; i++)
            sum += (row[i] = expf(row[i] - max));
        for (int64_t i = 0; i < n; i++)
            row[i] /= sum;
    }
    for (int64_t c = 0; c < C; c++) {
        const float *alpha = logits + (c / width) * n;
        float h = 0.0f;
        for (int64_t i = 0; i < n; i++)
            h += alpha[i] * gathered[i * C + c];
        out[c] = h;
    }
}

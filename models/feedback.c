/* Latent feedback's fusion (feedback.h): the taped form built from the
 * library's differentiable ops plus two small ops of its own (the shifted
 * sigmoid gate and the per-position select), the training draws (prefix
 * lengths and jitter, from one seeded stream per row and pass), and the row
 * form the decode engine calls. */
#include "models/feedback.h"

#include <math.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/rng.h"
#include "models/model.h"

model_feedback_run model_feedback_plain(void) {
    return (model_feedback_run){
        .passes = 1, .lambda = 1.0, .jitter = 0.0f, .prefix_mixin = 0, .seed = 0, .first_row = 0};
}

static float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* ---- shift_gate: z[b,0] = 0, z[b,t] = a[b,t-1] ⊙ sigmoid(g[b,t]) ---- */

static void shift_gate_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *a = node->in[0], *g = node->in[1];
    const int64_t B = a->shape[0], T = a->shape[1], C = a->shape[2];
    float *d_a = ag_grad(ctx, a), *d_g = ag_grad(ctx, g); /* [B,T,C] each, NULL when not needed */
    const float *d_z = node->out->grad, *av = dt_f32(a), *gv = dt_f32(g);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 1; t < T; t++) {
            const int64_t at = (b * T + t) * C, prev = at - C;
            for (int64_t c = 0; c < C; c++) {
                const float s = sigmoid(gv[at + c]);
                if (d_a) d_a[prev + c] += d_z[at + c] * s;
                if (d_g) d_g[at + c] += d_z[at + c] * av[prev + c] * s * (1.0f - s);
            }
        }
}

dt_tensor *model_feedback_shift_gate(ag_ctx *ctx, dt_tensor *a, dt_tensor *g) {
    if (!a || !g) return NULL;
    if (a->ndim != 3 || !dt_same_shape(a, g) || a->dtype != DT_F32 || g->dtype != DT_F32) {
        char sa[64], sg[64];
        dt_errorf("feedback: shift_gate needs float32 a, g of one shape [B,T,C], got %s and %s",
                  dt_shape_str(a, sa, sizeof sa), dt_shape_str(g, sg, sizeof sg));
        return NULL;
    }
    const int64_t B = a->shape[0], T = a->shape[1], C = a->shape[2];
    dt_tensor *z = ag_tensor(ctx, DT_F32, DT_SHAPE(B, T, C));
    if (!z) return NULL;
    float *zv = dt_f32(z);
    const float *av = dt_f32(a), *gv = dt_f32(g);
    for (int64_t b = 0; b < B; b++) {
        memset(zv + b * T * C, 0, (size_t)C * sizeof *zv);
        for (int64_t t = 1; t < T; t++) {
            const int64_t at = (b * T + t) * C, prev = at - C;
            for (int64_t c = 0; c < C; c++)
                zv[at + c] = av[prev + c] * sigmoid(gv[at + c]);
        }
    }
    dt_tensor *inputs[2] = {a, g};
    if (ag_needs_grad(ctx, inputs, 2) && !ag_record(ctx, "feedback_shift_gate", shift_gate_backward, z, inputs, 2))
        return NULL;
    return z;
}

/* ---- select: u[b,t] = keep[b*T+t] ? e[b,t] : f[b,t] ---- */

static void select_backward(ag_ctx *ctx, ag_node *node) {
    dt_tensor *e = node->in[0], *f = node->in[1];
    const unsigned char *keep = node->saved;
    const int64_t rows = e->shape[0] * e->shape[1], C = e->shape[2];
    float *d_e = ag_grad(ctx, e), *d_f = ag_grad(ctx, f); /* [B,T,C] */
    const float *d_u = node->out->grad;
    for (int64_t r = 0; r < rows; r++) {
        float *dst = keep[r] ? d_e : d_f;
        if (!dst) continue;
        for (int64_t c = 0; c < C; c++)
            dst[r * C + c] += d_u[r * C + c];
    }
}

static dt_tensor *select_rows(ag_ctx *ctx, dt_tensor *e, dt_tensor *f, unsigned char *keep) {
    if (!e || !f) return NULL;
    const int64_t rows = e->shape[0] * e->shape[1], C = e->shape[2];
    dt_tensor *u = ag_tensor(ctx, DT_F32, DT_SHAPE(e->shape[0], e->shape[1], C));
    if (!u) return NULL;
    for (int64_t r = 0; r < rows; r++)
        memcpy(dt_f32(u) + r * C, dt_f32(keep[r] ? e : f) + r * C, (size_t)C * sizeof(float));
    dt_tensor *inputs[2] = {e, f};
    if (ag_needs_grad(ctx, inputs, 2)) {
        ag_node *node = ag_record(ctx, "feedback_select", select_backward, u, inputs, 2);
        if (!node) return NULL;
        node->saved = keep;
    }
    return u;
}

/* One stream per (step seed, global row, pass): the same draws however the
 * batch's rows are split over threads and processes. */
static void row_stream(dt_rng *rng, uint64_t seed, int64_t row, int64_t pass) {
    dt_rng_seed(rng, seed ^ ((uint64_t)row * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)pass * 0xD1B54A32D192ED03ULL));
}

dt_tensor *model_feedback_fuse(ag_ctx *ctx, const model *m, dt_tensor *top, dt_tensor *e, const model_feedback_run *run,
                               int64_t pass) {
    if (!top || !e) return NULL;
    const int64_t B = e->shape[0], T = e->shape[1], C = e->shape[2];
    const float eps = m->arch.norm_eps;
    unsigned char *keep = ag_scratch(ctx, (size_t)(B * T)); /* positions that take u_t = e_t */
    if (!keep) return NULL;
    dt_tensor *noise = NULL; // [B,T,C] jitter, a constant
    if (run->jitter > 0.0f && !(noise = ag_tensor(ctx, DT_F32, DT_SHAPE(B, T, C)))) return NULL;
    for (int64_t b = 0; b < B; b++) {
        dt_rng rng;
        row_stream(&rng, run->seed, run->first_row + b, pass);
        /* p uniform in 0..T-1 (SPEC §6.5); p = 0 keeps only u_0 = e_0, which every pass does */
        const int64_t p = run->prefix_mixin ? (int64_t)dt_rng_below(&rng, (uint64_t)T) : 0;
        for (int64_t t = 0; t < T; t++)
            keep[b * T + t] = t <= p;
        if (noise)
            for (int64_t i = 0; i < T * C; i++)
                dt_f32(noise)[b * T * C + i] = (2.0f * dt_rng_uniform(&rng) - 1.0f) * run->jitter;
    }
    dt_tensor *h = noise ? ag_add(ctx, top, noise) : top;    // [B,T,C]
    dt_tensor *a = ag_linear(ctx, h, m->feedback_w_u, NULL); // h W_u^T
    dt_tensor *g = ag_linear(ctx, ag_rmsnorm(ctx, e, m->feedback_norm_tok, eps), m->feedback_w_g, NULL);
    dt_tensor *f = ag_rmsnorm(ctx, model_feedback_shift_gate(ctx, a, g), m->feedback_norm_in, eps);
    return select_rows(ctx, e, f, keep);
}

/* y [C] = x [C] W^T, W [C,C]: sums in double for the row form's accuracy. */
static void row_linear(float *y, const float *x, const float *w, int64_t C) {
    for (int64_t i = 0; i < C; i++) {
        double sum = 0.0;
        for (int64_t j = 0; j < C; j++)
            sum += (double)w[i * C + j] * (double)x[j];
        y[i] = (float)sum;
    }
}

/* y [C] = RMSNorm_w(x [C]) (y may alias x). */
static void row_rmsnorm(float *y, const float *x, const float *w, int64_t C, float eps) {
    double sum_sq = 0.0;
    for (int64_t c = 0; c < C; c++)
        sum_sq += (double)x[c] * (double)x[c];
    const float rstd = (float)(1.0 / sqrt(sum_sq / (double)C + (double)eps));
    for (int64_t c = 0; c < C; c++)
        y[c] = x[c] * rstd * w[c];
}

void model_feedback_fuse_row(float *u, const float *h_prev, const float *e, const model *m, float *scratch) {
    const int64_t C = m->arch.C;
    const float eps = m->arch.norm_eps;
    float *a = scratch, *g = scratch + C;
    row_linear(a, h_prev, dt_f32(m->feedback_w_u), C);
    row_rmsnorm(u, e, dt_f32(m->feedback_norm_tok), C, eps);
    row_linear(g, u, dt_f32(m->feedback_w_g), C);
    for (int64_t c = 0; c < C; c++)
        u[c] = a[c] * sigmoid(g[c]);
    row_rmsnorm(u, u, dt_f32(m->feedback_norm_in), C, eps);
}

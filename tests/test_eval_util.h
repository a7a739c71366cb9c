/* Helpers shared by the eval tests (tests/test_eval_*.c): small random models
 * built from "key=value" strings, and the teacher-forced reference logits from
 * model_forward (the models layer, an independent implementation of the same
 * SPEC) against which the decode engine is judged.
 *
 * Header-only (static functions) so each test executable stays one file. */
#ifndef TEST_EVAL_UTIL_H
#define TEST_EVAL_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "core/rng.h"
#include "models/model.h"

/* Config from "family=llama n_head=4 ..." (SPEC §4 keys), validated. */
static inline model_config eval_test_config(const char *spec) {
    model_config c = model_config_default(FAMILY_LLAMA);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        cr_assert(eq, "bad spec item '%s'", tok);
        *eq = '\0';
        cr_assert(model_config_set(&c, tok, eq + 1) == DT_OK, "%s", dt_error_message());
    }
    cr_assert(model_config_validate(&c) == DT_OK, "%s", dt_error_message());
    return c;
}

/* A model whose every parameter is random, coupling vectors and biases
 * included (the SPEC init zeroes them, which would hide coupling bugs).
 * Norm weights stay near 1. */
static inline void eval_test_model(model *m, const char *spec, uint64_t seed) {
    model_config c = eval_test_config(spec);
    cr_assert(model_create(m, &c) == DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_params; i++) {
        dt_tensor *t = m->params[i].tensor;
        float *x = dt_f32(t);
        int is_norm_weight = strstr(m->params[i].name, "norm.weight") != NULL;
        dt_rng_fill_normal(&rng, x, t->size, is_norm_weight ? 0.1f : 0.3f);
        if (is_norm_weight)
            for (int64_t j = 0; j < t->size; j++)
                x[j] += 1.0f;
    }
}

static inline void eval_test_tokens(int32_t *tokens, int64_t n, int64_t V, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++)
        tokens[i] = (int32_t)dt_rng_below(&rng, (uint64_t)V);
}

/* Teacher-forced results of model_forward on one sequence, copied to the heap. */
typedef struct eval_test_tf {
    int64_t T, V;
    int has_branch;
    float *logits_primary; /* [T,V] */
    float *logits_branch;  /* [T,V] or NULL */
    double *alpha;         /* [T]: clip(sum p^2) computed here in double (1 without a branch) */
    double *mixture;       /* [T,V]: alpha p + (1 - alpha) q in double */
} eval_test_tf;

static inline void eval_test_softmax(double *out, const float *logits, int64_t V) {
    double max = logits[0], sum = 0.0;
    for (int64_t v = 1; v < V; v++)
        max = logits[v] > max ? logits[v] : max;
    for (int64_t v = 0; v < V; v++)
        sum += (out[v] = exp((double)logits[v] - max));
    for (int64_t v = 0; v < V; v++)
        out[v] /= sum;
}

static inline void eval_test_teacher_forced(model *m, const int32_t *tokens, int64_t T, eval_test_tf *tf) {
    int64_t V = m->config.vocab_size;
    ag_ctx ctx;
    cr_assert(ag_ctx_init(&ctx, 0) == DT_OK);
    ag_set_grad_enabled(&ctx, 0);
    dt_tensor *tok = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T));
    memcpy(tok->data, tokens, (size_t)T * sizeof(int32_t));
    model_outputs out;
    memset(&out, 0, sizeof out);
    cr_assert(model_forward(m, &ctx, tok, NULL, &out) == DT_OK, "model_forward: %s", dt_error_message());
    tf->T = T;
    tf->V = V;
    tf->has_branch = m->config.branch == BRANCH_DECODE;
    tf->logits_primary = malloc((size_t)(T * V) * sizeof(float));
    memcpy(tf->logits_primary, out.logits_primary->data, (size_t)(T * V) * sizeof(float));
    tf->logits_branch = NULL;
    if (tf->has_branch) {
        cr_assert(out.logits_branch);
        tf->logits_branch = malloc((size_t)(T * V) * sizeof(float));
        memcpy(tf->logits_branch, out.logits_branch->data, (size_t)(T * V) * sizeof(float));
    }
    tf->alpha = malloc((size_t)T * sizeof(double));
    tf->mixture = malloc((size_t)(T * V) * sizeof(double));
    double *q = malloc((size_t)V * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        double *p = tf->mixture + t * V;
        eval_test_softmax(p, tf->logits_primary + t * V, V);
        double alpha = 1.0;
        if (tf->has_branch) {
            double s = 0.0;
            for (int64_t v = 0; v < V; v++)
                s += p[v] * p[v];
            alpha = fmin(fmax(s, m->config.mix_alpha_min), m->config.mix_alpha_max);
            eval_test_softmax(q, tf->logits_branch + t * V, V);
            for (int64_t v = 0; v < V; v++)
                p[v] = alpha * p[v] + (1.0 - alpha) * q[v];
        }
        tf->alpha[t] = alpha;
    }
    free(q);
    ag_ctx_free(&ctx);
}

static inline void eval_test_tf_free(eval_test_tf *tf) {
    free(tf->logits_primary);
    free(tf->logits_branch);
    free(tf->alpha);
    free(tf->mixture);
}

static inline double eval_test_max_abs(const float *x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

/* Largest |a - b| over n elements. */
static inline double eval_test_max_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

#endif

/* Helpers the interop tests share: small models with non-trivial weights,
 * their logits, whole files, and an independent safetensors reader written
 * for the tests (string search over the header, not interop's JSON reader),
 * so a writer bug cannot hide behind the same bug in a reader. */
#ifndef TEST_INTEROP_UTIL_H
#define TEST_INTEROP_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model.h"

static inline void interop_set_pairs(model_config *c, const char *pairs) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", pairs);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        cr_assert(eq, "pair '%s'", tok);
        *eq = '\0';
        cr_assert_eq(model_config_set(c, tok, eq + 1), DT_OK, "%s: %s", tok, dt_error_message());
    }
}

/* A small model of the family with every weight distinct (norms and biases too). */
static inline void interop_make_model(model *m, model_family family, const char *pairs, uint64_t seed) {
    model_config c = model_config_default(family);
    interop_set_pairs(&c, "vocab_size=40 block_size=12 n_layer=2 d_model=16 n_head=4");
    if (family != FAMILY_NANOGPT) interop_set_pairs(&c, "n_kv_head=2 d_ff=24");
    if (family == FAMILY_MOE) interop_set_pairs(&c, "n_expert=3 top_k=2");
    interop_set_pairs(&c, pairs);
    cr_assert_eq(model_create(m, &c), DT_OK, "%s", dt_error_message());
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    model_init_weights(m, &rng);
    for (int i = 0; i < m->n_params; i++) {
        float *x = dt_f32(m->params[i].tensor);
        for (int64_t j = 0; j < m->params[i].tensor->size; j++)
            x[j] += 0.01f * (float)((j * 7 + i) % 13) / 13.0f + 1e-6f * (float)i;
    }
}

/* Primary logits [T, V] of tokens[T] (caller frees). */
static inline float *interop_logits(model *m, const int32_t *tokens, int64_t T) {
    ag_ctx ctx;
    cr_assert_eq(ag_ctx_init(&ctx, 0), DT_OK);
    dt_tensor *in = ag_tensor(&ctx, DT_I32, DT_SHAPE(1, T));
    memcpy(in->data, tokens, (size_t)T * sizeof(int32_t));
    model_outputs out;
    cr_assert_eq(model_forward(m, &ctx, in, NULL, &out), DT_OK, "model_forward: %s", dt_error_message());
    const size_t n = (size_t)(T * m->config.vocab_size);
    float *logits = malloc(n * sizeof *logits);
    memcpy(logits, out.logits_primary->data, n * sizeof *logits);
    ag_ctx_free(&ctx);
    return logits;
}

/* Logits of two models on the same tokens agree within 1e-5 relative (to the largest magnitude). */
static inline void interop_assert_same_logits(model *a, model *b) {
    const int32_t tokens[6] = {1, 7, 3, 39, 0, 12};
    float *la = interop_logits(a, tokens, 6), *lb = interop_logits(b, tokens, 6);
    const int64_t n = 6 * a->config.vocab_size;
    float largest = 0;
    for (int64_t i = 0; i < n; i++)
        largest = fmaxf(largest, fabsf(la[i]));
    cr_assert(largest > 0);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabsf(la[i] - lb[i]) <= 1e-5f * largest, "logit %lld: %g vs %g", (long long)i, la[i], lb[i]);
    free(la);
    free(lb);
}

/* The whole file (caller frees); *n its size. */
static inline unsigned char *interop_read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size + 1);
    cr_assert_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    bytes[size] = 0;
    *n = (size_t)size;
    return bytes;
}

/* An independent view of a safetensors file: the header text and the body. */
typedef struct {
    unsigned char *bytes;
    size_t n;
    char *header; /* NUL-terminated copy */
    uint64_t header_length;
    const unsigned char *body;
} st_file;

static inline void st_open(st_file *f, const char *path) {
    f->bytes = interop_read_all(path, &f->n);
    cr_assert(f->n >= 8);
    f->header_length = 0;
    for (int i = 7; i >= 0; i--)
        f->header_length = f->header_length << 8 | f->bytes[i];
    cr_assert(f->header_length <= f->n - 8, "%s: header length", path);
    f->header = malloc(f->header_length + 1);
    memcpy(f->header, f->bytes + 8, f->header_length);
    f->header[f->header_length] = 0;
    f->body = f->bytes + 8 + f->header_length;
}

static inline void st_close(st_file *f) {
    free(f->bytes);
    free(f->header);
}

/* The tensor's data (NULL when absent) and its shape: found by searching the
 * header for "name":{ and reading shape and data_offsets with sscanf. */
static inline const float *st_tensor(const st_file *f, const char *name, int *ndim, int64_t shape[4]) {
    char key[200];
    snprintf(key, sizeof key, "\"%s\":{", name);
    const char *at = strstr(f->header, key);
    if (!at) return NULL;
    const char *s = strstr(at, "\"shape\":[");
    cr_assert(s, "%s: no shape", name);
    s += strlen("\"shape\":[");
    *ndim = 0;
    int64_t size = 1;
    while (*s != ']') {
        long long d;
        int used;
        cr_assert_eq(sscanf(s, "%lld%n", &d, &used), 1, "%s: shape", name);
        cr_assert_lt(*ndim, 4, "%s: more than 4 dimensions", name);
        shape[(*ndim)++] = d;
        size *= d;
        s += used;
        if (*s == ',') s++;
    }
    cr_assert(strstr(at, "\"dtype\":\"F32\"") && strstr(at, "\"dtype\":\"F32\"") < strchr(at, '}'), "%s: dtype", name);
    const char *o = strstr(at, "\"data_offsets\":[");
    unsigned long long begin, end;
    cr_assert_eq(sscanf(o, "\"data_offsets\":[%llu,%llu]", &begin, &end), 2);
    cr_assert_eq(end - begin, (unsigned long long)size * 4, "%s: offsets span the shape", name);
    cr_assert(8 + f->header_length + end <= f->n, "%s: inside the file", name);
    cr_assert_eq(begin % 4, 0);
    return (const float *)(f->body + begin);
}

/* How many tensors the header lists. */
static inline int st_count(const st_file *f) {
    int n = 0;
    for (const char *s = f->header; (s = strstr(s, "\"dtype\"")); s++)
        n++;
    return n;
}

#endif

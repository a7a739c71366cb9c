/* Tests of the attention kernels (kernels/attention.c) against independent
 * computations: a naive O(T^2) attention and its gradients in double precision,
 * central finite differences of the kernel's own forward, and the full causal
 * forward for the decode kernel. Shapes cross the 64-row tile boundary and
 * cover GQA groups, head widths that are not a multiple of the vector width,
 * and the cross form (queries from another tensor than the keys/values). */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "support/naive_attention.h"

/* ------------------------------------------------------------- helpers */

typedef naive_attention_shape shape;

static int64_t q_size(shape s) { return s.B * s.T * s.H * s.hd; }
static int64_t kv_size(shape s) { return s.B * s.T * s.Hkv * s.hd; }
static int64_t lse_size(shape s) { return s.B * s.H * s.T; }

/* Exact-size heap buffers, so ASan catches any write past the documented size. */
static float *alloc_floats(int64_t n) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    return x;
}
static double *alloc_doubles(int64_t n) {
    double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    cr_assert_not_null(x);
    return x;
}
static float *random_floats(dt_rng *rng, int64_t n, float std) {
    float *x = alloc_floats(n);
    dt_rng_fill_normal(rng, x, n, std);
    return x;
}

static double max_abs_double(const double *x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Asserts |got - want| <= tol * max(max|want|, floor) elementwise. */
static void assert_close(const char *what, const float *got, const double *want, int64_t n, double tol, double floor,
                         shape s) {
    const double bound = tol * fmax(max_abs_double(want, n), floor);
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - want[i]);
        cr_assert(err <= bound, "%s[%lld]: got %.8g want %.8g (err %.3g > %.3g) B=%lld T=%lld H=%lld Hkv=%lld hd=%lld",
                  what, (long long)i, got[i], want[i], err, bound, (long long)s.B, (long long)s.T, (long long)s.H,
                  (long long)s.Hkv, (long long)s.hd);
    }
}

/* ALiBi slopes [H] for the naive references and the kernels run below (NULL:
 * no bias); the bias tests set it and put it back. */
static const float *test_slopes = NULL;

/* The naive references (tests/support/naive_attention.h) with the slopes above. */
static void naive_forward(double *out, double *lse, const float *q, const float *k, const float *v, shape s) {
    naive_attention_forward(out, lse, q, k, v, s, test_slopes);
}
static void naive_backward(double *dq, double *dk, double *dv, const float *d_out, const float *q, const float *k,
                           const float *v, shape s) {
    naive_attention_backward(dq, dk, dv, d_out, q, k, v, s, test_slopes);
}

/* Kernel forward + backward into freshly zeroed gradients (any may be skipped). */
typedef struct {
    float *out, *lse, *dq, *dk, *dv;
} kernel_result;

static kernel_result run_kernels(const float *q, const float *k, const float *v, const float *d_out, shape s,
                                 int want_dq, int want_dk, int want_dv) {
    kernel_result r = {alloc_floats(q_size(s)), alloc_floats(lse_size(s)), NULL, NULL, NULL};
    if (test_slopes)
        k_attention_forward_biased(r.out, r.lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd, test_slopes);
    else
        k_attention_forward(r.out, r.lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd);
    if (!d_out) return r;
    if (want_dq) r.dq = calloc((size_t)q_size(s), sizeof(float));
    if (want_dk) r.dk = calloc((size_t)kv_size(s), sizeof(float));
    if (want_dv) r.dv = calloc((size_t)kv_size(s), sizeof(float));
    float *scratch = alloc_floats(k_attention_backward_scratch(s.B, s.T, s.H, s.Hkv, s.hd));
    if (test_slopes)
        k_attention_backward_biased(r.dq, 1, r.dk, 1, r.dv, 1, d_out, q, k, v, r.out, r.lse, s.B, s.T, s.H, s.Hkv, s.hd,
                                    test_slopes, scratch);
    else
        k_attention_backward(r.dq, r.dk, r.dv, d_out, q, k, v, r.out, r.lse, s.B, s.T, s.H, s.Hkv, s.hd, scratch);
    free(scratch);
    return r;
}

static void free_result(kernel_result *r) {
    free(r->out);
    free(r->lse);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

static const int64_t head_pairs[3][2] = {{2, 2}, {4, 2}, {6, 1}};

/* ------------------------------------------------------------- forward */

static void check_forward(shape s, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    /* std 1.5: scores of a few units, so the softmax is far from uniform */
    float *q = random_floats(&rng, q_size(s), 1.5f);
    float *k = random_floats(&rng, kv_size(s), 1.5f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    double *want = alloc_doubles(q_size(s)), *want_lse = alloc_doubles(lse_size(s));
    naive_forward(want, want_lse, q, k, v, s);
    kernel_result r = run_kernels(q, k, v, NULL, s, 0, 0, 0);
    assert_close("out", r.out, want, q_size(s), 1e-5, 1.0, s);
    for (int64_t i = 0; i < lse_size(s); i++)
        cr_assert(fabs(r.lse[i] - want_lse[i]) <= 2e-5 * (1.0 + fabs(want_lse[i])), "lse[%lld]: %.8g vs %.8g",
                  (long long)i, r.lse[i], want_lse[i]);
    free_result(&r);
    free(q);
    free(k);
    free(v);
    free(want);
    free(want_lse);
}

Test(attention, forward_matches_naive_double) {
    const int64_t batches[] = {1, 2}, lengths[] = {1, 7, 33, 70}, head_dims[] = {8, 16, 64};
    uint64_t seed = 1;
    for (int bi = 0; bi < 2; bi++)
        for (int ti = 0; ti < 4; ti++)
            for (int pi = 0; pi < 3; pi++)
                for (int di = 0; di < 3; di++)
                    check_forward(
                        (shape){batches[bi], lengths[ti], head_pairs[pi][0], head_pairs[pi][1], head_dims[di]}, seed++);
}

/* Widths that exercise the column tails of the tile products (24 = 16 + 8
 * padding, 96 = one 64-wide block + two 16-wide), the largest allowed width,
 * and lengths spanning three tiles, with T a multiple of the tile and not. */
Test(attention, forward_other_widths_and_lengths) {
    check_forward((shape){1, 70, 4, 2, 24}, 101);
    check_forward((shape){2, 70, 2, 1, 96}, 102);
    check_forward((shape){1, 65, 2, 2, 256}, 103);
    check_forward((shape){1, 128, 2, 2, 32}, 104);
    check_forward((shape){1, 150, 3, 1, 16}, 105);
}

/* Scores of a few hundred: the online softmax must rescale without overflow
 * when a later key tile brings a larger maximum. */
Test(attention, forward_large_scores_stable) {
    shape s = {1, 140, 2, 1, 16};
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    float *q = random_floats(&rng, q_size(s), 6.0f);
    float *k = random_floats(&rng, kv_size(s), 6.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    /* the largest keys arrive late (last tile) */
    for (int64_t t = 128; t < s.T; t++)
        for (int64_t d = 0; d < s.hd; d++)
            k[t * s.Hkv * s.hd + d] *= 3.0f;
    double *want = alloc_doubles(q_size(s));
    naive_forward(want, NULL, q, k, v, s);
    kernel_result r = run_kernels(q, k, v, NULL, s, 0, 0, 0);
    for (int64_t i = 0; i < q_size(s); i++)
        cr_assert(isfinite(r.out[i]));
    assert_close("out", r.out, want, q_size(s), 5e-5, 1.0, s);
    free_result(&r);
    free(q);
    free(k);
    free(v);
    free(want);
}

/* Self-attention with q and k the same buffer (H == Hkv) is the aliasing the
 * primary path can produce; the cross form reads q from a separate tensor. */
Test(attention, cross_form_and_aliased_self_attention) {
    shape s = {2, 70, 4, 4, 16};
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    float *q_branch = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    double *want = alloc_doubles(q_size(s));

    naive_forward(want, NULL, q_branch, k, v, s);
    kernel_result cross = run_kernels(q_branch, k, v, NULL, s, 0, 0, 0);
    assert_close("cross out", cross.out, want, q_size(s), 2e-5, 1.0, s);

    naive_forward(want, NULL, k, k, v, s);
    kernel_result self = run_kernels(k, k, v, NULL, s, 0, 0, 0);
    assert_close("self out", self.out, want, q_size(s), 2e-5, 1.0, s);

    free_result(&cross);
    free_result(&self);
    free(q_branch);
    free(k);
    free(v);
    free(want);
}

/* ------------------------------------------------------------ backward */

static void check_backward(shape s, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    float *q = random_floats(&rng, q_size(s), 1.5f);
    float *k = random_floats(&rng, kv_size(s), 1.5f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *d_out = random_floats(&rng, q_size(s), 1.0f);
    double *dq = alloc_doubles(q_size(s)), *dk = alloc_doubles(kv_size(s)), *dv = alloc_doubles(kv_size(s));
    naive_backward(dq, dk, dv, d_out, q, k, v, s);
    kernel_result r = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    assert_close("d_q", r.dq, dq, q_size(s), 5e-5, 0.1, s);
    assert_close("d_k", r.dk, dk, kv_size(s), 5e-5, 0.1, s);
    assert_close("d_v", r.dv, dv, kv_size(s), 5e-5, 0.1, s);
    free_result(&r);
    free(q);
    free(k);
    free(v);
    free(d_out);
    free(dq);
    free(dk);
    free(dv);
}

Test(attention, backward_matches_naive_double) {
    const int64_t lengths[] = {1, 7, 33, 70}, head_dims[] = {8, 16, 64};
    uint64_t seed = 200;
    for (int ti = 0; ti < 4; ti++)
        for (int pi = 0; pi < 3; pi++)
            for (int di = 0; di < 3; di++)
                check_backward(
                    (shape){1 + (ti + di) % 2, lengths[ti], head_pairs[pi][0], head_pairs[pi][1], head_dims[di]},
                    seed++);
    check_backward((shape){1, 150, 4, 2, 24}, 300);
    check_backward((shape){2, 130, 2, 1, 96}, 301);
    check_backward((shape){1, 66, 2, 2, 256}, 302);
}

/* Loss = sum(out ∘ W): its gradient is the backward with d_out = W. Central
 * differences of the kernel's own forward, in double accumulation. */
static double weighted_loss(const float *q, const float *k, const float *v, const float *w, float *out, float *lse,
                            shape s) {
    k_attention_forward(out, lse, q, k, v, s.B, s.T, s.H, s.Hkv, s.hd);
    double loss = 0.0;
    for (int64_t i = 0; i < q_size(s); i++)
        loss += (double)out[i] * w[i];
    return loss;
}

static void check_finite_differences(float *x, int64_t n, const float *grad, const char *what, const float *q,
                                     const float *k, const float *v, const float *w, shape s) {
    const float eps = 1e-2f;
    float *out = alloc_floats(q_size(s)), *lse = alloc_floats(lse_size(s));
    double max_grad = 0.0;
    for (int64_t i = 0; i < n; i++)
        max_grad = fmax(max_grad, fabs(grad[i]));
    for (int64_t i = 0; i < n; i++) {
        const float saved = x[i];
        x[i] = saved + eps;
        const double plus = weighted_loss(q, k, v, w, out, lse, s);
        x[i] = saved - eps;
        const double minus = weighted_loss(q, k, v, w, out, lse, s);
        x[i] = saved;
        const double numeric = (plus - minus) / (2.0 * (double)eps);
        cr_assert(fabs(numeric - grad[i]) <= 2e-3 * max_grad + 1e-2 * fabs(numeric),
                  "%s[%lld]: analytic %.6g, finite difference %.6g", what, (long long)i, grad[i], numeric);
    }
    free(out);
    free(lse);
}

Test(attention, backward_matches_finite_differences) {
    shape s = {1, 70, 2, 1, 8}; /* two query tiles, a GQA group of 2 */
    dt_rng rng;
    dt_rng_seed(&rng, 400);
    float *q = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *w = random_floats(&rng, q_size(s), 1.0f);
    kernel_result r = run_kernels(q, k, v, w, s, 1, 1, 1);
    check_finite_differences(q, q_size(s), r.dq, "d_q", q, k, v, w, s);
    check_finite_differences(k, kv_size(s), r.dk, "d_k", q, k, v, w, s);
    check_finite_differences(v, kv_size(s), r.dv, "d_v", q, k, v, w, s);
    free_result(&r);
    free(q);
    free(k);
    free(v);
    free(w);
}

/* Gradients ADD into what the caller holds: the primary's self-attention and
 * the branch's cross attention both write into the same d_k / d_v. */
Test(attention, backward_accumulates_primary_and_branch) {
    shape s = {2, 70, 4, 2, 16};
    dt_rng rng;
    dt_rng_seed(&rng, 500);
    float *q_primary = random_floats(&rng, q_size(s), 1.0f);
    float *q_branch = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *g_primary = random_floats(&rng, q_size(s), 1.0f);
    float *g_branch = random_floats(&rng, q_size(s), 1.0f);
    float *dq = random_floats(&rng, q_size(s), 1.0f); /* pre-filled: must be kept and added to */
    float *dk = random_floats(&rng, kv_size(s), 1.0f);
    float *dv = random_floats(&rng, kv_size(s), 1.0f);
    double *want_dq = alloc_doubles(q_size(s)), *want_dk = alloc_doubles(kv_size(s)),
           *want_dv = alloc_doubles(kv_size(s));
    double *tmp_dq = alloc_doubles(q_size(s)), *tmp_dk = alloc_doubles(kv_size(s)), *tmp_dv = alloc_doubles(kv_size(s));

    naive_backward(tmp_dq, want_dk, want_dv, g_primary, q_primary, k, v, s);
    for (int64_t i = 0; i < q_size(s); i++)
        want_dq[i] = dq[i] + tmp_dq[i];
    naive_backward(tmp_dq, tmp_dk, tmp_dv, g_branch, q_branch, k, v, s);
    for (int64_t i = 0; i < kv_size(s); i++) {
        want_dk[i] += dk[i] + tmp_dk[i];
        want_dv[i] += dv[i] + tmp_dv[i];
    }

    float *out = alloc_floats(q_size(s)), *lse = alloc_floats(lse_size(s));
    float *scratch = alloc_floats(k_attention_backward_scratch(s.B, s.T, s.H, s.Hkv, s.hd));
    k_attention_forward(out, lse, q_primary, k, v, s.B, s.T, s.H, s.Hkv, s.hd);
    k_attention_backward(dq, dk, dv, g_primary, q_primary, k, v, out, lse, s.B, s.T, s.H, s.Hkv, s.hd, scratch);
    k_attention_forward(out, lse, q_branch, k, v, s.B, s.T, s.H, s.Hkv, s.hd);
    k_attention_backward(NULL, dk, dv, g_branch, q_branch, k, v, out, lse, s.B, s.T, s.H, s.Hkv, s.hd, scratch);

    assert_close("d_q", dq, want_dq, q_size(s), 5e-5, 0.1, s);
    assert_close("d_k", dk, want_dk, kv_size(s), 5e-5, 0.1, s);
    assert_close("d_v", dv, want_dv, kv_size(s), 5e-5, 0.1, s);

    free(q_primary), free(q_branch), free(k), free(v), free(g_primary), free(g_branch);
    free(dq), free(dk), free(dv), free(want_dq), free(want_dk), free(want_dv);
    free(tmp_dq), free(tmp_dk), free(tmp_dv), free(out), free(lse), free(scratch);
}

/* Any subset of gradients may be requested; each one requested equals the
 * same gradient computed with all three. */
Test(attention, backward_null_gradients) {
    shape s = {2, 70, 6, 1, 16};
    dt_rng rng;
    dt_rng_seed(&rng, 600);
    float *q = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *d_out = random_floats(&rng, q_size(s), 1.0f);
    double *dq = alloc_doubles(q_size(s)), *dk = alloc_doubles(kv_size(s)), *dv = alloc_doubles(kv_size(s));
    naive_backward(dq, dk, dv, d_out, q, k, v, s);
    kernel_result all = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    for (int mask = 0; mask < 8; mask++) {
        kernel_result r = run_kernels(q, k, v, d_out, s, mask & 1, mask & 2, mask & 4);
        if (r.dq) {
            assert_close("d_q", r.dq, dq, q_size(s), 5e-5, 0.1, s);
            cr_assert(!memcmp(r.dq, all.dq, (size_t)q_size(s) * sizeof(float)), "d_q differs (mask %d)", mask);
        }
        if (r.dk) {
            assert_close("d_k", r.dk, dk, kv_size(s), 5e-5, 0.1, s);
            cr_assert(!memcmp(r.dk, all.dk, (size_t)kv_size(s) * sizeof(float)), "d_k differs (mask %d)", mask);
        }
        if (r.dv) {
            assert_close("d_v", r.dv, dv, kv_size(s), 5e-5, 0.1, s);
            cr_assert(!memcmp(r.dv, all.dv, (size_t)kv_size(s) * sizeof(float)), "d_v differs (mask %d)", mask);
        }
        free_result(&r);
    }
    free_result(&all);
    free(q), free(k), free(v), free(d_out), free(dq), free(dk), free(dv);
}

/* ------------------------------------------------- determinism, threads */

/* Large enough that both kernels run their parallel regions. */
static const shape parallel_shape = {2, 150, 4, 2, 32};

/* Every output of two kernel runs, bit for bit. */
static void assert_same_bits(const kernel_result *a, const kernel_result *b, shape s) {
    cr_assert(!memcmp(a->out, b->out, (size_t)q_size(s) * sizeof(float)));
    cr_assert(!memcmp(a->lse, b->lse, (size_t)lse_size(s) * sizeof(float)));
    cr_assert(!memcmp(a->dq, b->dq, (size_t)q_size(s) * sizeof(float)));
    cr_assert(!memcmp(a->dk, b->dk, (size_t)kv_size(s) * sizeof(float)));
    cr_assert(!memcmp(a->dv, b->dv, (size_t)kv_size(s) * sizeof(float)));
}

Test(attention, deterministic_bit_identical) {
    shape s = parallel_shape;
    dt_rng rng;
    dt_rng_seed(&rng, 700);
    float *q = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *d_out = random_floats(&rng, q_size(s), 1.0f);
    omp_set_num_threads(2);
    kernel_result a = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    kernel_result b = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    assert_same_bits(&a, &b, s);
    free_result(&a);
    free_result(&b);
    free(q), free(k), free(v), free(d_out);
}

static void assert_close_floats(const char *what, const float *a, const float *b, int64_t n, double tol) {
    double max = 0.0;
    for (int64_t i = 0; i < n; i++)
        max = fmax(max, fabs(b[i]));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs((double)a[i] - b[i]) <= tol * max, "%s[%lld]: %.8g vs %.8g", what, (long long)i, a[i], b[i]);
}

Test(attention, thread_count_independent) {
    shape s = parallel_shape;
    dt_rng rng;
    dt_rng_seed(&rng, 800);
    float *q = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *d_out = random_floats(&rng, q_size(s), 1.0f);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    kernel_result one = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    omp_set_num_threads(3); /* more threads than cores: still the same answer */
    kernel_result three = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    omp_set_num_threads(saved);
    assert_close_floats("out", three.out, one.out, q_size(s), 1e-6);
    assert_close_floats("lse", three.lse, one.lse, lse_size(s), 1e-6);
    assert_close_floats("d_q", three.dq, one.dq, q_size(s), 1e-6);
    assert_close_floats("d_k", three.dk, one.dk, kv_size(s), 1e-6);
    assert_close_floats("d_v", three.dv, one.dv, kv_size(s), 1e-6);
    free_result(&one);
    free_result(&three);
    free(q), free(k), free(v), free(d_out);
}

/* ---------------------------------------------------------------- decode */

/* For every position, decode over the cache k[0..pos], v[0..pos] (batch 0 of
 * the full tensors IS a cache: rows of [T, Hkv*hd]) equals row pos of the full
 * causal forward. Row 0 of the decode input takes its query from q_primary,
 * row 1 (n_rows == 2) from q_branch: the grouped primary + branch rows. */
static void check_decode(shape s, int64_t n_rows, uint64_t seed) {
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    s.B = 1;
    float *q_rows[2] = {random_floats(&rng, q_size(s), 1.5f), random_floats(&rng, q_size(s), 1.5f)};
    float *k = random_floats(&rng, kv_size(s), 1.5f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    double *want[2] = {alloc_doubles(q_size(s)), alloc_doubles(q_size(s))};
    naive_forward(want[0], NULL, q_rows[0], k, v, s);
    naive_forward(want[1], NULL, q_rows[1], k, v, s);
    kernel_result full = run_kernels(q_rows[0], k, v, NULL, s, 0, 0, 0);

    const int64_t width = s.H * s.hd;
    float *q_step = alloc_floats(n_rows * width), *out_step = alloc_floats(n_rows * width);
    float *out_blocks = alloc_floats(n_rows * width), *k_blocks = alloc_floats(kv_size(s)),
          *v_blocks = alloc_floats(kv_size(s));
    for (int64_t h = 0; h < s.Hkv; h++)
        for (int64_t t = 0; t < s.T; t++)
            for (int64_t i = 0; i < s.hd; i++) {
                k_blocks[(h * s.T + t) * s.hd + i] = k[(t * s.Hkv + h) * s.hd + i];
                v_blocks[(h * s.T + t) * s.hd + i] = v[(t * s.Hkv + h) * s.hd + i];
            }
    for (int64_t pos = 0; pos < s.T; pos++) {
        for (int64_t row = 0; row < n_rows; row++)
            memcpy(q_step + row * width, q_rows[row] + pos * width, (size_t)width * sizeof(float));
        float *scratch = alloc_floats(n_rows * s.H * (pos + 1)); /* exactly the documented size */
        if (test_slopes)
            k_attention_decode_biased(out_step, q_step, k, v, n_rows, pos, s.H, s.Hkv, s.hd, test_slopes, scratch);
        else
            k_attention_decode(out_step, q_step, k, v, n_rows, pos, s.H, s.Hkv, s.hd, scratch);
        /* the same cache as head blocks [Hkv, T, hd] (eval/decode.c's layout): the same bits */
        const k_kv_cache blocks = {.k = k_blocks, .v = v_blocks, .pos_stride = s.hd, .head_stride = s.T * s.hd};
        k_attention_decode_cache_biased(out_blocks, q_step, &blocks, n_rows, pos, s.H, s.Hkv, s.hd, test_slopes,
                                        scratch);
        cr_assert(memcmp(out_blocks, out_step, (size_t)(n_rows * width) * sizeof(float)) == 0,
                  "pos %lld: the head-block cache decodes other bits than the rows", (long long)pos);
        free(scratch);
        for (int64_t row = 0; row < n_rows; row++)
            assert_close("decode", out_step + row * width, want[row] + pos * width, width, 2e-5, 1.0, s);
        /* and the primary row agrees with the tiled forward's row */
        for (int64_t i = 0; i < width; i++)
            cr_assert(fabsf(out_step[i] - full.out[pos * width + i]) <= 2e-5f, "pos %lld: decode %.8g forward %.8g",
                      (long long)pos, out_step[i], full.out[pos * width + i]);
    }
    free(q_step), free(out_step), free(q_rows[0]), free(q_rows[1]), free(k), free(v), free(want[0]), free(want[1]);
    free(out_blocks), free(k_blocks), free(v_blocks);
    free_result(&full);
}

Test(attention, decode_one_row_matches_forward) {
    for (int pi = 0; pi < 3; pi++) {
        check_decode((shape){1, 70, head_pairs[pi][0], head_pairs[pi][1], 8}, 1, 900 + pi);
        check_decode((shape){1, 70, head_pairs[pi][0], head_pairs[pi][1], 64}, 1, 910 + pi);
    }
    check_decode((shape){1, 20, 4, 2, 24}, 1, 920);
}

Test(attention, decode_two_rows_matches_forward) {
    for (int pi = 0; pi < 3; pi++) {
        check_decode((shape){1, 70, head_pairs[pi][0], head_pairs[pi][1], 16}, 2, 930 + pi);
        check_decode((shape){1, 40, head_pairs[pi][0], head_pairs[pi][1], 64}, 2, 940 + pi);
    }
    /* large enough for the parallel path over kv heads */
    check_decode((shape){1, 210, 8, 4, 64}, 2, 950);
}

/* ----------------------------------------------------- ALiBi score bias */

/* SPEC §6.4's slopes 2^(-8(h+1)/H), written out here, or steep ones (up to 2
 * per position: the bias dominates the scores and the far keys underflow). */
static void fill_slopes(float *slopes, int64_t H, int steep) {
    for (int64_t h = 0; h < H; h++)
        slopes[h] = steep ? 2.0f / (float)(h + 1) : (float)pow(2.0, -8.0 * (double)(h + 1) / (double)H);
}

/* The biased forward and backward against the naive ones with the same bias:
 * lengths across 1-3 tiles, GQA groups (a query head's own slope, not its kv
 * head's), head widths off the vector width. */
Test(attention, bias_forward_backward_match_naive_double) {
    const shape shapes[] = {{1, 7, 4, 2, 8},    {2, 70, 6, 1, 16}, {1, 150, 4, 2, 24},
                            {1, 130, 2, 2, 64}, {1, 1, 2, 1, 8},   {2, 64, 3, 3, 32}};
    uint64_t seed = 1000;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int steep = 0; steep < 2; steep++) {
            float slopes[8];
            fill_slopes(slopes, shapes[i].H, steep);
            test_slopes = slopes;
            check_forward(shapes[i], seed++);
            check_backward(shapes[i], seed++);
            test_slopes = NULL;
        }
}

/* The decode kernel with the bias, one row and the grouped two rows, against
 * the naive forward and the tiled biased forward at every position. */
Test(attention, bias_decode_matches_forward) {
    float slopes[8];
    fill_slopes(slopes, 4, 0);
    test_slopes = slopes;
    check_decode((shape){1, 70, 4, 2, 16}, 2, 1100);
    check_decode((shape){1, 20, 4, 4, 24}, 1, 1101);
    fill_slopes(slopes, 8, 1);
    check_decode((shape){1, 210, 8, 4, 64}, 2, 1102); /* the parallel path over kv heads */
    test_slopes = NULL;
}

/* Zero slopes are no bias: the same bits as the unbiased kernels (x + 0 = x;
 * the biased exponential differs only below 2^-125.5, which scores of a few
 * units never reach), so the bias pass adds exactly its term. */
Test(attention, bias_zero_slopes_equal_unbiased) {
    shape s = {2, 100, 4, 2, 16};
    dt_rng rng;
    dt_rng_seed(&rng, 1200);
    float *q = random_floats(&rng, q_size(s), 1.0f);
    float *k = random_floats(&rng, kv_size(s), 1.0f);
    float *v = random_floats(&rng, kv_size(s), 1.0f);
    float *d_out = random_floats(&rng, q_size(s), 1.0f);
    kernel_result plain = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    const float zeros[4] = {0};
    test_slopes = zeros;
    kernel_result zero = run_kernels(q, k, v, d_out, s, 1, 1, 1);
    test_slopes = NULL;
    assert_same_bits(&plain, &zero, s);
    free_result(&plain);
    free_result(&zero);
    free(q), free(k), free(v), free(d_out);
}

/* ------------------------------------------------------------- limits */

Test(attention, check_rejects_bad_shapes) {
    cr_assert_eq(k_attention_check(6, 2, 64), DT_OK);
    cr_assert_eq(k_attention_check(6, 1, K_ATTENTION_MAX_HEAD_DIM), DT_OK);
    cr_assert_eq(k_attention_check(6, 4, 64), DT_ERR);
    cr_assert(strstr(dt_error_message(), "n_kv_head 4") != NULL, "message: %s", dt_error_message());
    cr_assert_eq(k_attention_check(2, 2, K_ATTENTION_MAX_HEAD_DIM + 1), DT_ERR);
    cr_assert(strstr(dt_error_message(), "head_dim") != NULL, "message: %s", dt_error_message());
    cr_assert_eq(k_attention_check(2, 2, 0), DT_ERR);
}

/* A shape the tiles cannot hold is answered with NaN, never with garbage. */
Test(attention, oversized_head_dim_gives_nan) {
    shape s = {1, 3, 1, 1, K_ATTENTION_MAX_HEAD_DIM + 16};
    float *x = calloc((size_t)q_size(s), sizeof(float));
    float *out = alloc_floats(q_size(s)), *lse = alloc_floats(lse_size(s));
    k_attention_forward(out, lse, x, x, x, s.B, s.T, s.H, s.Hkv, s.hd);
    for (int64_t i = 0; i < q_size(s); i++)
        cr_assert(isnan(out[i]));
    free(x), free(out), free(lse);
}

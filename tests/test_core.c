/* Tests for core/: the arena (alignment, reset, growth then fold, calloc),
 * tensor construction errors and shape helpers, the seeded RNG (reproducible
 * streams, distribution moments, unbiased bounded integers) and error values
 * (formatting, context prefixes, truncation, thread-local storage). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/arena.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

/* ---------------- arena ---------------- */

Test(arena, allocations_are_64_byte_aligned_and_disjoint) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 4096), DT_OK);
    const size_t sizes[] = {1, 3, 64, 65, 100, 7, 128, 1000};
    uint8_t *previous_end = NULL;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = dt_arena_alloc(&arena, sizes[i]);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % DT_ARENA_ALIGN, 0, "allocation %zu (%zu bytes) is not 64-byte aligned", i,
                     sizes[i]);
        if (previous_end) cr_assert(p >= previous_end, "allocation %zu overlaps the previous one", i);
        memset(p, 0x5a, sizes[i]); /* ASan catches an allocation smaller than asked */
        previous_end = p + sizes[i];
    }
    dt_arena_free(&arena);
}

Test(arena, reset_reuses_the_same_memory) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 1024), DT_OK);
    void *first = dt_arena_alloc(&arena, 100);
    dt_arena_alloc(&arena, 200);
    cr_assert_eq(arena.total_used, 128 + 256, "padding to 64 bytes: expected 384 used, got %zu", arena.total_used);
    dt_arena_reset(&arena);
    cr_assert_eq(arena.total_used, 0);
    void *again = dt_arena_alloc(&arena, 100);
    cr_assert_eq(again, first, "after reset the first allocation should start at the chunk base again");
    cr_assert_eq(dt_arena_mallocs(&arena), 1);
    dt_arena_free(&arena);
}

/* The same allocation pattern as a training step: several sizes, run twice. */
static void step_pattern(dt_arena *arena) {
    for (int i = 0; i < 20; i++) {
        size_t bytes = 200 + 97 * (size_t)i;
        uint8_t *p = dt_arena_alloc(arena, bytes);
        cr_assert_not_null(p);
        memset(p, i, bytes);
    }
}

Test(arena, grows_in_the_first_step_then_folds_into_one_chunk) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 256), DT_OK);
    step_pattern(&arena);
    cr_assert_gt(arena.n_chunks, 1, "the first step should have needed extra chunks");
    long mallocs_after_first = dt_arena_mallocs(&arena);
    size_t peak = arena.peak;
    dt_arena_reset(&arena);
    cr_assert_eq(arena.n_chunks, 1, "reset should fold the chunks into one");
    cr_assert_geq(dt_arena_capacity(&arena), peak);
    cr_assert_eq(dt_arena_mallocs(&arena), mallocs_after_first + 1, "folding costs exactly one malloc");
    long mallocs_before_second = dt_arena_mallocs(&arena);
    step_pattern(&arena);
    dt_arena_reset(&arena);
    step_pattern(&arena);
    cr_assert_eq(dt_arena_mallocs(&arena), mallocs_before_second, "steady-state steps must not malloc");
    cr_assert_eq(arena.n_chunks, 1);
    dt_arena_free(&arena);
}

Test(arena, zero_initial_capacity_sizes_the_first_chunk_on_demand) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 0), DT_OK);
    cr_assert_eq(dt_arena_capacity(&arena), 0);
    void *p = dt_arena_alloc(&arena, 5000);
    cr_assert_not_null(p);
    cr_assert_geq(dt_arena_capacity(&arena), 5000);
    dt_arena_free(&arena);
}

Test(arena, calloc_zeroes_reused_memory) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 4096), DT_OK);
    uint8_t *dirty = dt_arena_alloc(&arena, 1000);
    memset(dirty, 0xab, 1000);
    dt_arena_reset(&arena);
    uint8_t *clean = dt_arena_calloc(&arena, 1000);
    cr_assert_eq(clean, dirty, "the test needs calloc to reuse the dirtied bytes");
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(clean[i], 0, "byte %d not zeroed", i);
    dt_arena_free(&arena);
}

/* ---------------- tensors ---------------- */

Test(tensor, bad_shapes_are_error_values_not_crashes) {
    dt_error_clear();
    cr_assert_null(dt_tensor_new(DT_F32, 0, (const int64_t[]){1}));
    cr_assert(strstr(dt_error_message(), "0 dims"), "message: %s", dt_error_message());
    cr_assert_null(dt_tensor_new(DT_F32, 5, (const int64_t[]){1, 1, 1, 1, 1}));
    cr_assert(strstr(dt_error_message(), "5 dims"), "message: %s", dt_error_message());
    cr_assert_null(dt_tensor_new(DT_F32, DT_SHAPE(3, 0)));
    cr_assert(strstr(dt_error_message(), "dimension 1 is 0"), "message: %s", dt_error_message());
    cr_assert_null(dt_tensor_new(DT_I32, DT_SHAPE(-2)));
    cr_assert(strstr(dt_error_message(), "dimension 0 is -2"), "message: %s", dt_error_message());

    dt_tensor header;
    cr_assert_eq(dt_tensor_init(&header, (dt_dtype)7, DT_SHAPE(2), NULL), DT_ERR);
    cr_assert(strstr(dt_error_message(), "dtype"), "message: %s", dt_error_message());

    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 1024), DT_OK);
    cr_assert_null(dt_tensor_arena(&arena, DT_F32, DT_SHAPE(4, -1)));
    dt_arena_free(&arena);
}

Test(tensor, heap_tensor_is_zeroed_with_shape_and_grad) {
    dt_tensor *t = dt_tensor_new(DT_F32, DT_SHAPE(2, 3, 5));
    cr_assert_not_null(t);
    cr_assert_eq(t->ndim, 3);
    cr_assert_eq(t->size, 30);
    cr_assert_eq(dt_rows(t), 6);
    cr_assert_eq(dt_cols(t), 5);
    cr_assert_eq((uintptr_t)t->data % DT_ARENA_ALIGN, 0);
    for (int i = 0; i < 30; i++)
        cr_assert_eq(dt_f32(t)[i], 0.0f);
    cr_assert_null(t->grad);
    cr_assert_eq(dt_tensor_alloc_grad(t), DT_OK);
    cr_assert_not_null(t->grad);
    for (int i = 0; i < 30; i++)
        cr_assert_eq(t->grad[i], 0.0f);
    dt_tensor_free(t);

    dt_tensor *ids = dt_tensor_new(DT_I32, DT_SHAPE(4));
    cr_assert_eq(dt_tensor_alloc_grad(ids), DT_ERR, "an int32 tensor has no gradient");
    dt_tensor_free(ids);
    dt_tensor_free(NULL); /* allowed, like free(NULL) */
}

Test(tensor, shape_helpers) {
    dt_arena arena;
    cr_assert_eq(dt_arena_init(&arena, 4096), DT_OK);
    dt_tensor *a = dt_tensor_arena(&arena, DT_F32, DT_SHAPE(2, 8, 40));
    dt_tensor *b = dt_tensor_arena(&arena, DT_F32, DT_SHAPE(2, 8, 40));
    dt_tensor *c = dt_tensor_arena(&arena, DT_F32, DT_SHAPE(16, 40));
    cr_assert(a && b && c);
    cr_assert(dt_same_shape(a, b));
    cr_assert_not(dt_same_shape(a, c), "equal sizes but different shapes");
    char buf[64];
    cr_assert_str_eq(dt_shape_str(a, buf, sizeof buf), "[2, 8, 40]");
    char tiny[6];
    dt_shape_str(a, tiny, sizeof tiny); /* truncates, stays terminated */
    cr_assert_lt(strlen(tiny), sizeof tiny);
    dt_arena_free(&arena);
}

/* ---------------- RNG ---------------- */

Test(rng, same_seed_same_stream_different_seed_different_stream) {
    dt_rng a, b, c;
    dt_rng_seed(&a, 42);
    dt_rng_seed(&b, 42);
    dt_rng_seed(&c, 43);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = dt_rng_next(&a), y = dt_rng_next(&b), z = dt_rng_next(&c);
        cr_assert_eq(x, y, "draw %d differs between two generators with the same seed", i);
        differ += x != z;
    }
    cr_assert_gt(differ, 990, "seeds 42 and 43 should give unrelated streams");
}

/* splitmix64 and xoshiro256** written out from Vigna's published reference code,
 * as an independent check of the implementation. */
static uint64_t reference_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

Test(rng, matches_the_published_algorithm) {
    uint64_t sm = 0;
    cr_assert_eq(reference_splitmix64(&sm), 0xe220a8397b1dcdafULL, "splitmix64(0) known first output");
    uint64_t s[4], x = 7;
    for (int i = 0; i < 4; i++)
        s[i] = reference_splitmix64(&x);
    dt_rng rng;
    dt_rng_seed(&rng, 7);
    for (int i = 0; i < 100; i++) {
        uint64_t v = s[1] * 5;
        uint64_t expected = ((v << 7) | (v >> 57)) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = (s[3] << 45) | (s[3] >> 19);
        cr_assert_eq(dt_rng_next(&rng), expected, "xoshiro256** output %d", i);
    }
}

Test(rng, uniform_is_in_unit_interval_with_the_right_moments) {
    dt_rng rng;
    dt_rng_seed(&rng, 2024);
    const int n = 100000;
    double sum = 0.0, sum_sq = 0.0;
    for (int i = 0; i < n; i++) {
        float u = dt_rng_uniform(&rng);
        cr_assert(u >= 0.0f && u < 1.0f, "draw %d = %.9g outside [0, 1)", i, (double)u);
        double scaled = (double)u * 16777216.0;
        cr_assert_eq(scaled, floor(scaled), "uniform draws carry 24 random bits");
        sum += u;
        sum_sq += (double)u * u;
    }
    double mean = sum / n, var = sum_sq / n - mean * mean;
    /* Standard errors: mean 0.29/sqrt(n) ~ 9e-4, var ~ 2.7e-4; allow ~5 sigma. */
    cr_assert(fabs(mean - 0.5) < 5e-3, "mean %.5f", mean);
    cr_assert(fabs(var - 1.0 / 12.0) < 2e-3, "variance %.5f (expected %.5f)", var, 1.0 / 12.0);
}

Test(rng, normal_has_zero_mean_unit_variance) {
    dt_rng rng;
    dt_rng_seed(&rng, 99);
    const int n = 100000;
    double sum = 0.0, sum_sq = 0.0, sum_4 = 0.0;
    for (int i = 0; i < n; i++) {
        double z = dt_rng_normal(&rng);
        cr_assert(isfinite(z));
        sum += z;
        sum_sq += z * z;
        sum_4 += z * z * z * z;
    }
    double mean = sum / n, var = sum_sq / n - mean * mean, kurtosis = sum_4 / n;
    cr_assert(fabs(mean) < 0.02, "mean %.5f", mean);
    cr_assert(fabs(var - 1.0) < 0.03, "variance %.5f", var);
    cr_assert(fabs(kurtosis - 3.0) < 0.15, "fourth moment %.4f (a normal has 3)", kurtosis);

    float filled[20000];
    dt_rng_fill_normal(&rng, filled, 20000, 0.02f);
    double fill_sq = 0.0;
    for (int i = 0; i < 20000; i++)
        fill_sq += (double)filled[i] * filled[i];
    cr_assert(fabs(sqrt(fill_sq / 20000) - 0.02) < 0.001, "fill_normal std %.5f", sqrt(fill_sq / 20000));
}

Test(rng, state_copy_resumes_the_stream_including_the_cached_normal) {
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    dt_rng_normal(&rng); /* leaves a cached spare */
    cr_assert(rng.has_spare);
    dt_rng saved = rng; /* a checkpoint is the plain struct */
    double expected[5], resumed[5];
    for (int i = 0; i < 5; i++)
        expected[i] = dt_rng_normal(&rng);
    for (int i = 0; i < 5; i++)
        resumed[i] = dt_rng_normal(&saved);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(expected[i], resumed[i], "draw %d after restore", i);
}

Test(rng, below_stays_in_range_and_is_unbiased) {
    dt_rng rng;
    dt_rng_seed(&rng, 11);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(dt_rng_below(&rng, 1), 0);
    enum { N_BINS = 7, DRAWS = 70000 };
    long counts[N_BINS] = {0};
    for (int i = 0; i < DRAWS; i++) {
        uint64_t x = dt_rng_below(&rng, N_BINS);
        cr_assert_lt(x, N_BINS);
        counts[x]++;
    }
    /* Chi-square with 6 degrees of freedom: P(> 22.5) ~ 0.001. */
    double expected = (double)DRAWS / N_BINS, chi2 = 0.0;
    for (int b = 0; b < N_BINS; b++)
        chi2 += (counts[b] - expected) * (counts[b] - expected) / expected;
    cr_assert_lt(chi2, 22.5, "chi-square %.2f over %d bins", chi2, N_BINS);

    /* A bound just above 2^63 is where a plain modulo would be most biased:
     * the values below 2^64 - n would be hit twice as often as the rest. */
    uint64_t n = (UINT64_C(1) << 63) + (UINT64_C(1) << 62);
    int low = 0;
    for (int i = 0; i < 4000; i++) {
        uint64_t x = dt_rng_below(&rng, n);
        cr_assert_lt(x, n);
        low += x < n / 2;
    }
    /* Unbiased: P(low) = 0.5 (sd 0.008); a plain modulo would give 0.625. */
    cr_assert(fabs(low / 4000.0 - 0.5) < 0.04, "fraction in the low half %.3f", low / 4000.0);
}

/* ---------------- errors ---------------- */

Test(error, errorf_formats_and_returns_err) {
    dt_status status = dt_errorf("file %s: key '%s' = %d", "a.h5", "n_layer", -3);
    cr_assert_eq(status, DT_ERR);
    cr_assert_str_eq(dt_error_message(), "file a.h5: key 'n_layer' = -3");
    dt_error_clear();
    cr_assert_str_eq(dt_error_message(), "unknown error");
}

Test(error, context_prepends_and_nests) {
    dt_errorf("missing dataset '%s'", "/params/tok_emb.weight");
    cr_assert_eq(dt_error_context("%s", "model.h5"), DT_ERR);
    cr_assert_str_eq(dt_error_message(), "model.h5: missing dataset '/params/tok_emb.weight'");
    dt_error_context("load step %d", 3);
    cr_assert_str_eq(dt_error_message(), "load step 3: model.h5: missing dataset '/params/tok_emb.weight'");
}

Test(error, long_messages_truncate_to_one_terminated_line) {
    char long_text[3000];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    dt_errorf("%s", long_text);
    size_t n = strlen(dt_error_message());
    cr_assert(n > 500 && n < 2048, "message length %zu", n);
    dt_error_context("%s", long_text);
    n = strlen(dt_error_message());
    cr_assert(n > 500 && n < 2048, "length after an over-long context %zu", n);
    dt_errorf("short");
    dt_error_context("%s", long_text);
    cr_assert_eq(dt_error_message()[0], 'x');
}

static void *set_error_in_thread(void *arg) {
    dt_errorf("worker message");
    *(int *)arg = strcmp(dt_error_message(), "worker message") == 0;
    return NULL;
}

Test(error, messages_are_thread_local) {
    dt_errorf("main message");
    pthread_t thread;
    int worker_saw_its_own = 0;
    cr_assert_eq(pthread_create(&thread, NULL, set_error_in_thread, &worker_saw_its_own), 0);
    pthread_join(thread, NULL);
    cr_assert(worker_saw_its_own);
    cr_assert_str_eq(dt_error_message(), "main message");
}

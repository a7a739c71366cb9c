/* The update pass (optim_update) around the rules: the threads' gradient
 * copies summed and zeroed, the 1 / micro-batches scale, the global norm
 * (PyTorch's clip_grad_norm_ formula, worked out by hand), no update on a
 * non-finite norm, the same numbers at any thread count, and the sum over
 * processes through a fake two-process communicator. The clipped gradient is
 * seen through AdamW's first moment after one step: m = (1 - beta1) g. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/rng.h"
#include "optim/optim.h"
#include "support/optim_flat.h"

/* Gradients (3, 4) and (12): norm sqrt(9 + 16 + 144) = 13. */
static void two_params(optim_flat *f, optimizer *opt) {
    optim_flat_init(f, 3);
    cr_assert_not_null(optim_flat_add(f, "a", DT_SHAPE(2), 0, 0));
    cr_assert_not_null(optim_flat_add(f, "b", DT_SHAPE(1), 0, 0));
    f->grad[0] = 3, f->grad[1] = 4, f->grad[2] = 12;
    cr_assert_eq(optim_flat_optimizer(f, opt, OPTIM_ADAMW, NULL), DT_OK, "%s", dt_error_message());
}

/* m after the first step is (1 - beta1) times the gradient the rule saw. */
static void assert_seen(const optimizer *opt, const double *want, int n) {
    const float *m = opt->m;
    for (int i = 0; i < n; i++)
        cr_assert(fabs(m[i] - (1.0 - opt->hp.beta1) * want[i]) <= 1e-6 * fabs(want[i]) + 1e-9,
                  "element %d: the rule saw %.9g, want %.9g", i, m[i] / (1.0 - opt->hp.beta1), want[i]);
}

Test(optim_update, clips_global_norm) {
    optim_flat f;
    optimizer opt;
    two_params(&f, &opt);
    double norm;
    cr_assert_eq(optim_flat_step(&opt, 1e-3, 0.0, 1.0f, 1.3, &norm), DT_OK);
    cr_assert(fabs(norm - 13.0) < 1e-12, "pre-clip norm %g", norm);
    const double scale = 1.3 / (13.0 + 1e-6);
    assert_seen(&opt, (const double[]){3 * scale, 4 * scale, 12 * scale}, 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(f.grad[i], 0.0f, "gradients are zeroed");
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_update, below_threshold_or_disabled_is_unclipped) {
    for (int disabled = 0; disabled < 2; disabled++) {
        optim_flat f;
        optimizer opt;
        two_params(&f, &opt);
        double norm;
        cr_assert_eq(optim_flat_step(&opt, 1e-3, 0.0, 1.0f, disabled ? 0.0 : 13.5, &norm), DT_OK);
        cr_assert(fabs(norm - 13.0) < 1e-12);
        assert_seen(&opt, (const double[]){3, 4, 12}, 3);
        optim_free(&opt);
        optim_flat_free(&f);
    }
}

/* Two copies summed into the gradient, then scaled by 1/2 (two micro-batches). */
Test(optim_update, copies_summed_scaled_and_zeroed) {
    optim_flat f;
    optimizer opt;
    two_params(&f, &opt);
    float copy0[3] = {1, -2, 0.5f}, copy1[3] = {2, 2, -4.5f};
    float *const copies[2] = {copy0, copy1};
    const optim_update_args args = {
        .lr = 1e-3, .grad_scale = 0.5f, .max_norm = 0.0, .extra_grads = copies, .n_extra = 2, .n_threads = 1};
    double norm;
    cr_assert_eq(optim_update(&opt, &args, &norm), DT_OK);
    const double want[3] = {(3 + 1 + 2) * 0.5, (4 - 2 + 2) * 0.5, (12 + 0.5 - 4.5) * 0.5}; /* 3, 2, 4 */
    cr_assert(fabs(norm - sqrt(9 + 4 + 16)) < 1e-12, "norm %g", norm);
    assert_seen(&opt, want, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(copy0[i] == 0.0f && copy1[i] == 0.0f, "copies are zeroed");
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_update, non_finite_norm_updates_nothing) {
    optim_flat f;
    optimizer opt;
    two_params(&f, &opt);
    f.grad[1] = NAN;
    f.data[0] = 0.25f;
    double norm;
    cr_assert_eq(optim_flat_step(&opt, 1e-3, 0.0, 1.0f, 1.0, &norm), DT_OK);
    cr_assert(isnan(norm));
    cr_assert_eq(opt.step, 0, "no optimizer step was taken");
    cr_assert_eq(f.data[0], 0.25f);
    cr_assert(f.grad[0] == 3.0f && f.grad[2] == 12.0f, "the summed gradients stay for the caller");
    optim_free(&opt);
    optim_flat_free(&f);
}

/* Many chunks over several parameters: one thread and two give the same
 * norm and the same weights, bit for bit. */
Test(optim_update, same_numbers_at_any_thread_count) {
    enum { N = 5 * OPTIM_CHUNK + 100 };
    optim_flat f[2];
    optimizer opt[2];
    double norm[2];
    for (int k = 0; k < 2; k++) {
        optim_flat_init(&f[k], N);
        cr_assert_not_null(optim_flat_add(&f[k], "tok_emb.weight", DT_SHAPE(3 * OPTIM_CHUNK + 7), 0, 0));
        cr_assert_not_null(optim_flat_add(&f[k], "layers.0.attn.wq.weight", DT_SHAPE(2 * OPTIM_CHUNK + 93), 1, 0));
        dt_rng rng;
        dt_rng_seed(&rng, 5);
        dt_rng_fill_normal(&rng, f[k].data, N, 1.0f);
        dt_rng_fill_normal(&rng, f[k].grad, N, 1.0f);
        cr_assert_eq(optim_flat_optimizer(&f[k], &opt[k], OPTIM_ADAMW, NULL), DT_OK);
        cr_assert_eq(optim_reserve_threads(&opt[k], 2), DT_OK);
        const optim_update_args args = {.lr = 1e-3, .grad_scale = 1.0f, .max_norm = 1.0, .n_threads = k + 1};
        cr_assert_eq(optim_update(&opt[k], &args, &norm[k]), DT_OK);
    }
    cr_assert(norm[0] == norm[1], "norm %.17g with one thread, %.17g with two", norm[0], norm[1]);
    cr_assert(memcmp(f[0].data, f[1].data, N * sizeof(float)) == 0, "weights differ between thread counts");
    for (int k = 0; k < 2; k++) {
        optim_free(&opt[k]);
        optim_flat_free(&f[k]);
    }
}

/* A fake second process whose gradient is `other`: allreduce adds it, and
 * counts the calls and what they covered. */
typedef struct fake_process {
    const float *other;
    int calls;
    const float *data;
    int64_t n;
    int fail;
} fake_process;

static dt_status fake_allreduce_f32(const dt_comm *comm, float *data, int64_t n) {
    fake_process *fake = comm->state;
    fake->calls++;
    fake->data = data;
    fake->n = n;
    if (fake->fail) return dt_errorf("fake communicator: rank 1 is gone");
    for (int64_t i = 0; i < n; i++)
        data[i] += fake->other[i];
    return DT_OK;
}

Test(optim_update, sums_the_flat_gradient_over_processes_once) {
    optim_flat f;
    optimizer opt;
    two_params(&f, &opt);
    const float other[3] = {1, 0, 4}; /* the other rank's gradient: the sum is (4, 4, 16) */
    fake_process fake = {.other = other};
    const dt_comm comm = {.rank = 0, .size = 2, .state = &fake, .allreduce_f32 = fake_allreduce_f32};
    float copy[3] = {0, 0, 0};
    float *const copies[1] = {copy};
    const optim_update_args args = {
        .lr = 1e-3, .grad_scale = 1.0f, .extra_grads = copies, .n_extra = 1, .comm = &comm, .n_threads = 1};
    double norm;
    cr_assert_eq(optim_update(&opt, &args, &norm), DT_OK, "%s", dt_error_message());
    cr_assert_eq(fake.calls, 1, "one allreduce per step");
    cr_assert(fake.data == opt.grad && fake.n == opt.n_floats, "over the whole flat gradient buffer");
    /* The mean over the two processes: (4, 4, 16) / 2. */
    cr_assert(fabs(norm - sqrt(4 + 4 + 64)) < 1e-12, "norm %g", norm);
    assert_seen(&opt, (const double[]){2, 2, 8}, 3);
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_update, communicator_failure_is_an_error_and_updates_nothing) {
    optim_flat f;
    optimizer opt;
    two_params(&f, &opt);
    const float other[3] = {0, 0, 0};
    fake_process fake = {.other = other, .fail = 1};
    const dt_comm comm = {.rank = 0, .size = 2, .state = &fake, .allreduce_f32 = fake_allreduce_f32};
    const optim_update_args args = {.lr = 1e-3, .grad_scale = 1.0f, .comm = &comm, .n_threads = 1};
    double norm;
    cr_assert_eq(optim_update(&opt, &args, &norm), DT_ERR);
    cr_assert(strstr(dt_error_message(), "rank 1 is gone"), "%s", dt_error_message());
    cr_assert_eq(opt.step, 0);
    cr_assert_eq(f.data[0], 0.0f);
    optim_free(&opt);
    optim_flat_free(&f);
}

Test(optim_update, single_process_communicator) {
    const dt_comm *comm = dt_comm_single();
    cr_assert(comm->rank == 0 && comm->size == 1);
    float x[2] = {1, 2};
    double y[1] = {3};
    cr_assert_eq(comm->allreduce_f32(comm, x, 2), DT_OK);
    cr_assert_eq(comm->allreduce_f64(comm, y, 1), DT_OK);
    cr_assert_eq(comm->broadcast(comm, x, sizeof x, 0), DT_OK);
    cr_assert_eq(comm->barrier(comm), DT_OK);
    cr_assert(x[0] == 1 && x[1] == 2 && y[0] == 3, "one process: the identity");
}

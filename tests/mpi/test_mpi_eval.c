/* Evaluation over processes (`mpirun -n 2 dbranch eval`, eval/eval_loss.h),
 * argv[1] = ordered | fast: the windows split over the ranks (window w on
 * rank w % 2, an odd count so the shares differ) and reduced give, on every
 * rank, the figures of rank 0 evaluating every window alone, to the bit:
 * loss, primary and branch losses, alpha, bits per byte, positions and
 * bytes; teacher-forced and through the decode engine (prompt of 5), on a
 * Decode-Branch model. A plain program (see test_mpi_comm.c); exits non-zero
 * naming the first failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "eval/eval_loss.h"
#include "models/model.h"
#include "mpi_check.h"

enum { T = 16, N_WINDOWS = 7 };

/* BPE-free byte tokens over a small alphabet: bytes per token = 1. */
static void write_data(const char *path) {
    enum { N_TRAIN = 2 * T + 2, N_VAL = N_WINDOWS * T + 1 };
    static int32_t stream[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 21);
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        stream[i] = 'a' + (int32_t)dt_rng_below(&rng, 20);
    data_tokenizer tok;
    if (data_tokenizer_byte(&tok) != DT_OK ||
        data_tokens_write(path, &tok, stream, N_TRAIN, stream + N_TRAIN, N_VAL, "mpi eval test") != DT_OK)
        CHECK(0, "writing %s: %s", path, dt_error_message());
    data_tokenizer_free(&tok);
}

static int same(const eval_loss_result *a, const eval_loss_result *b) {
    return a->loss == b->loss && a->loss_primary == b->loss_primary && a->loss_branch == b->loss_branch &&
           a->alpha_mean == b->alpha_mean && a->bits_per_byte == b->bits_per_byte && a->n_windows == b->n_windows &&
           a->n_tokens == b->n_tokens && a->n_bytes == b->n_bytes && a->has_branch == b->has_branch;
}

int main(int argc, char **argv) {
    test_name = "test_mpi_eval";
    const int fast = argc > 1 && !strcmp(argv[1], "fast");
    const dt_comm *comm = NULL;
    if (dt_comm_mpi_init(&argc, &argv, fast ? DT_COMM_REDUCE_FAST : DT_COMM_REDUCE_ORDERED, &comm) != DT_OK) {
        fprintf(stderr, "%s\n", dt_error_message());
        return 1;
    }
    const int rank = comm->rank;
    CHECK(comm->size == 2, "run under mpirun -n 2 (size %d)", comm->size);
    char path[64] = "/tmp/dbranch_mpi_eval_XXXXXX";
    if (rank == 0) {
        const int fd = mkstemp(path);
        CHECK(fd >= 0, "mkstemp failed");
        if (fd >= 0) close(fd);
        write_data(path);
    }
    comm->broadcast(comm, path, sizeof path, 0);

    /* The same weights on both ranks: the same seed. */
    model_config config = model_config_default(FAMILY_NANOGPT);
    config.vocab_size = 256;
    config.block_size = T;
    config.n_layer = 2;
    config.n_head = 2;
    config.d_model = 32;
    config.branch = BRANCH_DECODE;
    model m;
    data_tokens data;
    if (model_config_validate(&config) != DT_OK || model_create(&m, &config) != DT_OK ||
        data_tokens_open(&data, path) != DT_OK) {
        fprintf(stderr, "%s: setup: %s\n", test_name, dt_error_message());
        return 1;
    }
    dt_rng rng;
    dt_rng_seed(&rng, 5);
    model_init_weights(&m, &rng);

    for (int method = 0; method < 2; method++) {
        eval_loss_options o = eval_loss_default_options();
        o.seq_len = T;
        if (method == 1) {
            o.method = EVAL_DECODE;
            o.prompt_len = 5;
        }
        const char *name = method ? "decode" : "teacher-forced";
        eval_loss_result job, alone;
        o.comm = comm;
        CHECK(eval_loss_run(&m, &data, &o, &job) == DT_OK, "%s over 2 processes: %s", name, dt_error_message());
        CHECK(job.n_windows == N_WINDOWS && job.n_tokens == N_WINDOWS * (T - (method ? 4 : 0)),
              "%s: %lld windows, %lld positions", name, (long long)job.n_windows, (long long)job.n_tokens);
        /* Every rank holds the job's figures: rank 1's against rank 0's. */
        double mine[2] = {job.loss, job.bits_per_byte}, both[4] = {0, 0, 0, 0};
        memcpy(both + 2 * rank, mine, sizeof mine);
        comm->allreduce_f64(comm, both, 4);
        CHECK(both[0] == both[2] && both[1] == both[3], "rank %d: %s: the ranks' losses differ (%.17g, %.17g)", rank,
              name, both[0], both[2]);
        if (rank == 0) {
            o.comm = NULL;
            CHECK(eval_loss_run(&m, &data, &o, &alone) == DT_OK, "%s alone: %s", name, dt_error_message());
            CHECK(same(&job, &alone),
                  "%s: 2 processes give loss %.17g (primary %.17g, branch %.17g, alpha %.17g, %lld positions), "
                  "one gives %.17g (%.17g, %.17g, %.17g, %lld)",
                  name, job.loss, job.loss_primary, job.loss_branch, job.alpha_mean, (long long)job.n_tokens,
                  alone.loss, alone.loss_primary, alone.loss_branch, alone.alpha_mean, (long long)alone.n_tokens);
        }
        comm->barrier(comm);
    }
    data_tokens_close(&data);
    model_free(&m);
    comm->barrier(comm);
    if (rank == 0) unlink(path);
    dt_comm_mpi_finalize();
    if (rank == 0 && !failures) printf("test_mpi_eval (%s): ok\n", fast ? "fast" : "ordered");
    return failures ? 1 : 0;
}

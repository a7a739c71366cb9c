/* Data-parallel training over processes, under `mpirun -n 2` (argv[1] =
 * ordered | fast): the trainer with the MPI communicator, each rank on one
 * thread and half of every batch, against one process on two threads (rank 0
 * alone, afterwards). With a split into powers of two the two sums are the
 * same float operations (0.5 g0 + 0.5 g1 per process vs (g0 + g1) / 2 over
 * processes, both exact scalings), so losses, gradient norms and weights
 * must agree bit for bit. Also: rank 0 alone writes the log and the
 * checkpoint, a job stopped and resumed at N = 2 continues bit for bit, and
 * both ranks end with the same weights; the N = 2 checkpoint resumed by one
 * process on two threads continues bit for bit too with ordered sums, and
 * with fast sums is refused with one line (train.reduce = ordered needed). A plain program (see
 * test_mpi_comm.c); exits non-zero naming the first failed check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "mpi_check.h"
#include "train/trainer.h"

enum { STEPS = 6, B = 4, T = 16 };

static dt_comm_reduce reduce_mode = DT_COMM_REDUCE_ORDERED; /* argv[1] */

static void write_tokens(const char *path) {
    enum { N_TRAIN = 4000, N_VAL = 8 * T + 1 };
    static int32_t stream[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 12);
    /* A learnable stream: each token mostly follows from the previous one. */
    int32_t previous = 0;
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        stream[i] = previous = (int32_t)((previous * 7 + 3 + (int32_t)dt_rng_below(&rng, 3)) % 64);
    data_tokenizer tok;
    if (data_tokenizer_byte(&tok) != DT_OK ||
        data_tokens_write(path, &tok, stream, N_TRAIN, stream + N_TRAIN, N_VAL, "mpi test") != DT_OK)
        CHECK(0, "writing %s: %s", path, dt_error_message());
    data_tokenizer_free(&tok);
}

static train_config config(const char *data, const char *out, int threads) {
    train_config cfg = train_config_default();
    cfg.model = model_config_default(FAMILY_NANOGPT);
    cfg.model.vocab_size = 256;
    cfg.model.block_size = T;
    cfg.model.n_layer = 2;
    cfg.model.n_head = 2;
    cfg.model.d_model = 32;
    cfg.model.branch = BRANCH_DECODE;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s", out);
    cfg.batch_size = B;
    cfg.seq_len = T;
    cfg.grad_accum = 2;
    cfg.tokens = STEPS * B * T * 2;
    cfg.lr = 3e-3;
    cfg.eval_every = 3;
    cfg.eval_windows = 8;
    cfg.checkpoint_every = 0;
    cfg.seed = 4;
    cfg.threads = threads;
    cfg.reduce = reduce_mode;
    if (train_config_validate(&cfg) != DT_OK) CHECK(0, "config: %s", dt_error_message());
    return cfg;
}

/* Runs to the budget; fills the per-step records and the final evaluation. */
static void run(const train_config *cfg, const dt_comm *comm, train_step_record *steps, train_eval_record *eval,
                float **weights, int64_t *n_floats) {
    trainer t;
    const trainer_options options = {.comm = comm};
    if (trainer_init(&t, cfg, &options) != DT_OK) {
        CHECK(0, "trainer_init: %s", dt_error_message());
        return;
    }
    for (int s = 0; s < STEPS; s++)
        if (trainer_step(&t, &steps[s]) != DT_OK) CHECK(0, "step %d: %s", s + 1, dt_error_message());
    if (trainer_evaluate(&t, eval) != DT_OK) CHECK(0, "evaluate: %s", dt_error_message());
    if (trainer_save(&t) != DT_OK) CHECK(0, "save: %s", dt_error_message());
    *n_floats = t.model.n_floats;
    *weights = malloc((size_t)t.model.n_floats * sizeof **weights);
    memcpy(*weights, t.model.params_memory, (size_t)t.model.n_floats * sizeof **weights);
    trainer_free(&t);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int main(int argc, char **argv) {
    test_name = "test_mpi_train";
    const int fast = argc > 1 && !strcmp(argv[1], "fast");
    reduce_mode = fast ? DT_COMM_REDUCE_FAST : DT_COMM_REDUCE_ORDERED;
    const dt_comm *comm = NULL;
    if (dt_comm_mpi_init(&argc, &argv, fast ? DT_COMM_REDUCE_FAST : DT_COMM_REDUCE_ORDERED, &comm) != DT_OK) {
        fprintf(stderr, "%s\n", dt_error_message());
        return 1;
    }
    const int rank = comm->rank;
    if (comm->size != 2) {
        fprintf(stderr, "run under mpirun -n 2 (size %d)\n", comm->size);
        dt_comm_mpi_finalize();
        return 1;
    }
    /* Rank 0 makes the scratch directory and the data; everyone reads them. */
    char dir[64] = "/tmp/dbranch_mpi_XXXXXX";
    if (rank == 0 && !mkdtemp(dir)) CHECK(0, "mkdtemp failed");
    comm->broadcast(comm, dir, sizeof dir, 0);
    char data[128], job_dir[128], alone_dir[128], path[256];
    snprintf(data, sizeof data, "%s/tokens.h5", dir);
    snprintf(job_dir, sizeof job_dir, "%s/job", dir);
    snprintf(alone_dir, sizeof alone_dir, "%s/alone", dir);
    if (rank == 0) write_tokens(data);
    comm->barrier(comm);

    train_step_record job[STEPS], alone[STEPS];
    train_eval_record job_eval, alone_eval;
    float *job_weights = NULL, *alone_weights = NULL;
    int64_t n = 0, n_alone = 0;
    const train_config job_cfg = config(data, job_dir, 1);
    run(&job_cfg, comm, job, &job_eval, &job_weights, &n);

    /* Stopped after 3 steps (rank 0 writes the checkpoint) and resumed by both
     * ranks: the remaining steps are the uninterrupted job's, bit for bit. */
    char part_dir[128];
    snprintf(part_dir, sizeof part_dir, "%s/part", dir);
    const train_config part_cfg = config(data, part_dir, 1);
    trainer t;
    train_step_record record;
    const trainer_options fresh = {.comm = comm};
    if (trainer_init(&t, &part_cfg, &fresh) == DT_OK) {
        for (int s = 0; s < 3; s++)
            if (trainer_step(&t, &record) != DT_OK) CHECK(0, "part step %d: %s", s + 1, dt_error_message());
        if (trainer_save(&t) != DT_OK) CHECK(0, "part save: %s", dt_error_message());
        trainer_free(&t);
    } else {
        CHECK(0, "part trainer_init: %s", dt_error_message());
    }
    comm->barrier(comm); /* the checkpoint is on disk before anyone reads it */
    snprintf(path, sizeof path, "%s/checkpoint.h5", part_dir);
    const trainer_options resumed = {.comm = comm, .resume_path = path};
    if (trainer_init(&t, &part_cfg, &resumed) == DT_OK) {
        for (int s = 3; s < STEPS; s++) {
            if (trainer_step(&t, &record) != DT_OK) CHECK(0, "resumed step %d: %s", s + 1, dt_error_message());
            CHECK(record.loss == job[s].loss && record.grad_norm == job[s].grad_norm,
                  "rank %d: resumed step %d: loss %.9g vs %.9g uninterrupted", rank, s + 1, record.loss, job[s].loss);
        }
        trainer_free(&t);
    } else {
        CHECK(0, "resumed trainer_init: %s", dt_error_message());
    }

    /* Both ranks hold the same weights: rank 1's checksum against rank 0's. */
    double sum[2] = {0, 0};
    for (int64_t i = 0; job_weights && i < n; i++)
        sum[rank] += (double)job_weights[i] * (double)(i % 101 + 1);
    comm->allreduce_f64(comm, sum, 2);
    CHECK(sum[0] == sum[1], "rank %d: the ranks' weights differ (checksums %.17g, %.17g)", rank, sum[0], sum[1]);

    /* The N = 2 checkpoint resumed by one process (rank 0 alone, two threads). */
    if (rank == 0) {
        const train_config alone_part_cfg = config(data, part_dir, 2);
        snprintf(path, sizeof path, "%s/checkpoint.h5", part_dir);
        const trainer_options alone_resumed = {.comm = dt_comm_single(), .resume_path = path};
        const dt_status status = trainer_init(&t, &alone_part_cfg, &alone_resumed);
        if (fast) {
            CHECK(status != DT_OK && strstr(dt_error_message(), "trained by 2 processes; resuming with 1 needs "
                                                                "train.reduce = ordered"),
                  "resuming a fast N = 2 checkpoint in one process: %s",
                  status == DT_OK ? "accepted" : dt_error_message());
            if (status == DT_OK) trainer_free(&t);
        } else if (status == DT_OK) {
            for (int s = 3; s < STEPS; s++) {
                if (trainer_step(&t, &record) != DT_OK) CHECK(0, "alone step %d: %s", s + 1, dt_error_message());
                CHECK(record.loss == job[s].loss && record.grad_norm == job[s].grad_norm,
                      "the N = 2 checkpoint resumed in one process: step %d: loss %.9g vs %.9g", s + 1, record.loss,
                      job[s].loss);
            }
            trainer_free(&t);
        } else {
            CHECK(0, "resuming the N = 2 checkpoint in one process (ordered): %s", dt_error_message());
        }
    }

    if (rank == 0) {
        snprintf(path, sizeof path, "%s/checkpoint.h5", job_dir);
        CHECK(exists(path), "rank 0 wrote no checkpoint %s", path);
        snprintf(path, sizeof path, "%s/log.jsonl", job_dir);
        CHECK(exists(path), "rank 0 wrote no log %s", path);
        snprintf(path, sizeof path, "%s/provenance.json", job_dir);
        FILE *provenance = fopen(path, "r");
        char record[16384] = "";
        if (provenance) {
            record[fread(record, 1, sizeof record - 1, provenance)] = '\0';
            fclose(provenance);
        }
        CHECK(strstr(record, "\"processes\":2") &&
                  strstr(record, fast ? "\"reduce\":\"fast\"" : "\"reduce\":\"ordered\""),
              "%s names neither the 2 processes nor train.reduce: %s", path, record);
        const train_config alone_cfg = config(data, alone_dir, 2);
        run(&alone_cfg, dt_comm_single(), alone, &alone_eval, &alone_weights, &n_alone);
        for (int s = 0; s < STEPS; s++) {
            CHECK(job[s].loss == alone[s].loss && job[s].objective == alone[s].objective,
                  "step %d: loss %.9g over 2 processes, %.9g in one", s + 1, job[s].loss, alone[s].loss);
            CHECK(job[s].grad_norm == alone[s].grad_norm, "step %d: gradient norm %.17g vs %.17g", s + 1,
                  job[s].grad_norm, alone[s].grad_norm);
        }
        CHECK(job[STEPS - 1].loss < job[0].loss, "the loss went down (%g -> %g)", job[0].loss, job[STEPS - 1].loss);
        CHECK(job_eval.windows == alone_eval.windows && job_eval.loss == alone_eval.loss,
              "evaluation: %.17g over %lld windows vs %.17g over %lld", job_eval.loss, (long long)job_eval.windows,
              alone_eval.loss, (long long)alone_eval.windows);
        CHECK(n == n_alone && job_weights && alone_weights &&
                  memcmp(job_weights, alone_weights, (size_t)n * sizeof(float)) == 0,
              "final weights differ between 2 processes x 1 thread and 1 process x 2 threads");
    }
    free(job_weights);
    free(alone_weights);
    comm->barrier(comm);
    if (rank == 0) {
        char command[160];
        snprintf(command, sizeof command, "rm -rf '%s'", dir);
        if (system(command) != 0) CHECK(0, "could not remove %s", dir);
    }
    dt_comm_mpi_finalize();
    if (rank == 0 && !failures) printf("test_mpi_train (%s): ok\n", fast ? "fast" : "ordered");
    return failures ? 1 : 0;
}

/* dbranch train: train a model (baseline or Decode-Branch) from a config
 * file, with overrides, resume and clean stops on SIGINT/SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/trainer.h"

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch train --config FILE [--set section.key=value ...] [--tokens N] [--resume CKPT]\n"
                 "                     [--out DIR] [--threads N] [--reduce ordered|fast]\n"
                 "\n"
                 "Trains the model of a config file ([model], [data], [train] sections; see experiments/configs/)\n"
                 "until train.tokens training tokens have been seen (steps of batch_size x seq_len x grad_accum).\n"
                 "\n"
                 "  --config FILE      the run's INI file (optional with --resume: the checkpoint stores its config)\n"
                 "  --set K=V          override one key: section.key=value, or key=value when only one section has it\n"
                 "                     (repeatable, applied in order after the file)\n"
                 "  --tokens N         token budget (same as --set train.tokens=N; 2e6 is accepted)\n"
                 "  --resume CKPT      continue from a checkpoint: weights, optimizer state, data position and RNG;\n"
                 "                     the losses continue bit for bit as if the run had never stopped (same threads)\n"
                 "  --out DIR          output directory (train.out_dir): DIR/checkpoint.h5 and the JSON-lines log\n"
                 "  --threads N        threads for BLIS and OpenMP (train.threads)\n"
                 "  --reduce R         under mpirun (a build with -DDBRANCH_MPI=ON): how gradients are summed over\n"
                 "                     the processes: ordered (default; rank order, the same bits every run) or fast\n"
                 "                     (MPI_Allreduce)\n"
                 "\n"
                 "Data parallel over processes: `mpirun -n N --bind-to none -x OMP_NUM_THREADS dbranch train ...`\n"
                 "(add --hostfile FILE for several machines): each process trains on train.batch_size / N rows of\n"
                 "every batch with train.threads threads; rank 0 alone prints, logs and writes checkpoints.\n"
                 "\n"
                 "Prints the resolved configuration, then progress (a live line on a terminal, periodic lines\n"
                 "otherwise) and the final validation loss. A checkpoint is written every train.checkpoint_every\n"
                 "steps and at the end (PATH.tmp, then renamed).\n"
                 "\n"
                 "Exit status: 0 when the budget is reached; 1 on bad input or a failure, including a NaN/Inf loss\n"
                 "(the last good checkpoint is kept, never overwritten with diverged weights); 130 after SIGINT and\n"
                 "143 after SIGTERM: the current step is finished and a checkpoint written, so\n"
                 "`dbranch train --resume DIR/checkpoint.h5` continues the run. A second signal kills at once.\n");
}

/* The job this process is part of: under mpirun (MPI builds) its MPI
 * communicator, else NULL (one process). */
static dt_status join_job(const char *reduce, const dt_comm **comm) {
    *comm = NULL;
#ifdef DBRANCH_MPI
    dt_comm_reduce mode = DT_COMM_REDUCE_ORDERED;
    if (reduce && !strcmp(reduce, "fast"))
        mode = DT_COMM_REDUCE_FAST;
    else if (reduce && strcmp(reduce, "ordered"))
        return dt_errorf("--reduce %s (must be ordered or fast)", reduce);
    if (dt_comm_mpi_launched()) return dt_comm_mpi_init(NULL, NULL, mode, comm);
    return DT_OK;
#else
    return reduce ? dt_errorf("--reduce needs a build with -DDBRANCH_MPI=ON") : DT_OK;
#endif
}

static void leave_job(const dt_comm *comm) {
#ifdef DBRANCH_MPI
    if (comm) dt_comm_mpi_finalize();
#endif
}

/* A failure on one process of several: the others may wait in a collective
 * call, so the message is printed and the whole job taken down. */
static int fail_job(const dt_comm *comm) {
    const int code = cli_fail("train");
#ifdef DBRANCH_MPI
    if (comm && comm->size > 1) {
        fflush(NULL);
        dt_comm_mpi_abort(code);
    }
#endif
    return code;
}

static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int signo) { stop_signal = signo; }

static void install_stop_handlers(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    /* SA_RESETHAND: a second Ctrl-C takes the default action (stop now); SA_RESTART: writes to a pipe are not cut
     * short. */
    action.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
}

/* The stored config of a checkpoint, as the starting point of a resumed run. */
static dt_status config_from_checkpoint(train_config *cfg, const char *path) {
    train_state state;
    char *text = NULL;
    if (train_checkpoint_read_state(path, &state, &text) != DT_OK) return DT_ERR;
    char origin[TRAIN_PATH_MAX + 32];
    snprintf(origin, sizeof origin, "%s (stored config)", path);
    dt_status status = train_config_parse_string(cfg, text, origin);
    free(text);
    return status;
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *config_path = NULL, *resume_path = NULL, *reduce = NULL;
    const dt_comm *comm = NULL;
    /* Overrides in command-line order: --set pairs and the shorthands, applied after the file. */
    const char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    char(*shorthand)[TRAIN_PATH_MAX + 32] = calloc((size_t)argc + 1, sizeof *shorthand);
    int n_overrides = 0, exit_code = 1;
    if (!overrides || !shorthand) {
        fprintf(stderr, "dbranch train: out of memory\n");
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        const char *key = !strcmp(arg, "--tokens")    ? "train.tokens"
                          : !strcmp(arg, "--out")     ? "train.out_dir"
                          : !strcmp(arg, "--threads") ? "train.threads"
                                                      : NULL;
        int takes_value = key || !strcmp(arg, "--config") || !strcmp(arg, "--set") || !strcmp(arg, "--resume") ||
                          !strcmp(arg, "--reduce");
        if (!takes_value) {
            fprintf(stderr, "dbranch train: unknown option '%s' (try dbranch train --help)\n", arg);
            exit_code = 2;
            goto done;
        }
        if (!value) {
            fprintf(stderr, "dbranch train: %s needs a value\n", arg);
            exit_code = 2;
            goto done;
        }
        i++;
        if (!strcmp(arg, "--config"))
            config_path = value;
        else if (!strcmp(arg, "--resume"))
            resume_path = value;
        else if (!strcmp(arg, "--reduce"))
            reduce = value;
        else if (!strcmp(arg, "--set"))
            overrides[n_overrides++] = value;
        else {
            snprintf(shorthand[n_overrides], sizeof shorthand[0], "%s=%s", key, value);
            overrides[n_overrides] = shorthand[n_overrides];
            n_overrides++;
        }
    }
    if (!config_path && !resume_path) {
        fprintf(stderr, "dbranch train: --config FILE is required (or --resume CKPT)\n");
        exit_code = 2;
        goto done;
    }

    train_config cfg = train_config_default();
    dt_status status = config_path ? train_config_load(&cfg, config_path) : config_from_checkpoint(&cfg, resume_path);
    for (int i = 0; status == DT_OK && i < n_overrides; i++)
        status = train_config_set(&cfg, overrides[i]);
    if (status == DT_OK) status = train_config_validate(&cfg);
    if (status != DT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }

    if (join_job(reduce, &comm) != DT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    const int speaks = !comm || comm->rank == 0; /* one voice for the job */
    install_stop_handlers();
    trainer t;
    trainer_options options = {
        .resume_path = resume_path, .progress = speaks ? stdout : NULL, .stop_flag = &stop_signal, .comm = comm};
    /* Test hook (tests/test_cli_qa.c): stop at a known step so a SIGKILL lands between checkpoints. */
    const char *pause = getenv("DBRANCH_TEST_PAUSE_AFTER_STEP");
    if (pause) options.pause_after_step = strtoll(pause, NULL, 10);
    if (trainer_init(&t, &cfg, &options) != DT_OK) {
        exit_code = fail_job(comm);
        goto done;
    }
    /* Printed once the run is set up, so a bad path or file is the only output. */
    size_t length = train_config_format(&cfg, NULL, 0);
    char *text = speaks ? malloc(length + 1) : NULL;
    if (text) {
        train_config_format(&cfg, text, length + 1);
        printf("# resolved configuration%s%s\n%s\n", config_path ? " of " : "", config_path ? config_path : "", text);
        free(text);
    }
    fflush(stdout);

    trainer_result result;
    status = trainer_run(&t, &result);
    trainer_free(&t);
    if (status != DT_OK) {
        exit_code = fail_job(comm);
        goto done;
    }
    if (result.evaluated && speaks) {
        const train_eval_record *e = &result.final_eval;
        printf("final: val loss %.4f", e->loss);
        if (cfg.model.branch == BRANCH_DECODE)
            printf(" (primary %.4f, branch %.4f, mean alpha %.3f)", e->loss_primary, e->loss_branch, e->alpha);
        printf(" after %lld steps, %lld tokens, %.1fs\n", (long long)result.steps, (long long)result.tokens,
               result.elapsed_seconds);
    }
    exit_code = result.stopped && stop_signal ? 128 + (int)stop_signal : 0;
done:
    leave_job(comm);
    free(overrides);
    free(shorthand);
    return exit_code;
}

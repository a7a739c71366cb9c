/* dbranch train: train a model (baseline or Decode-Branch) from a config
 * file, with overrides, resume and clean stops on SIGINT/SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "train/checkpoint.h"
#include "train/run_config.h"
#include "train/time_limit.h"
#include "train/trainer.h"
#include "train/trunk.h"

/* sysexits.h's EX_TEMPFAIL, "try again later": stopped by --time-limit, resumable. */
enum { EXIT_TIME_LIMIT = 75 };

static void usage(FILE *out) {
    fprintf(out, "usage: dbranch train --config FILE [--set section.key=value ...] [--tokens N] [--resume CKPT]\n"
                 "                     [--out DIR] [--threads N] [--time-limit DURATION] [--dry-run]\n"
                 "                     [--reduce ordered|fast]\n"
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
                 "  --threads N        threads for BLIS and OpenMP (train.threads, 1..1024)\n"
                 "  --time-limit D     stop with a checkpoint before a step would end past D of wall time (5400,\n"
                 "                     90m, 1.5h): the run's next step, evaluation and checkpoint are predicted\n"
                 "                     from the last ones; exit status 75, and --resume continues. For sittings,\n"
                 "                     batch-job wall times and study deadlines; not part of the run's config\n"
                 "  --dry-run          print the resolved configuration and stop (no data read, nothing written)\n"
                 "  --reduce R         train.reduce: under mpirun (-DDBRANCH_MPI=ON builds), how gradients are\n"
                 "                     summed over the processes: ordered (default; rank order, the same bits\n"
                 "                     every run and any process count) or fast (MPI_Allreduce)\n"
                 "\n"
                 "Options other than --set may be given once. With --resume, --tokens must be at least the tokens\n"
                 "already trained; resuming a trunk (train.save_trunk = 1: OUT/trunk.h5, the state where the wsd\n"
                 "decay begins) with a larger --tokens trains the run that budget gives from scratch, bit for bit.\n"
                 "train.init_from = CKPT starts a new run from a checkpoint's weights (fresh optimizer and data;\n"
                 "the model config must match).\n"
                 "\n"
                 "Data parallel over processes: `mpirun -n N --bind-to none -x OMP_NUM_THREADS dbranch train ...`\n"
                 "(add --hostfile FILE for several machines): each process trains on train.batch_size / N rows of\n"
                 "every batch with train.threads threads; rank 0 alone prints, logs and writes checkpoints.\n"
                 "A checkpoint records its process count; resuming with another needs train.reduce = ordered.\n"
                 "\n"
                 "Prints the resolved configuration, then progress (a live line on a terminal, periodic lines\n"
                 "otherwise) and the final validation loss. A checkpoint is written every train.checkpoint_every\n"
                 "steps and at the end (PATH.tmp, then renamed).\n"
                 "\n"
                 "Exit status: 0 when the budget is reached; 1 on bad input or a failure, including a NaN/Inf loss\n"
                 "(the last good checkpoint is kept, never overwritten with diverged weights); 130 after SIGINT and\n"
                 "143 after SIGTERM: the current step is finished and a checkpoint written, so\n"
                 "`dbranch train --resume DIR/checkpoint.h5` continues the run. A second signal kills at once.\n"
                 "75 (EX_TEMPFAIL) when --time-limit stopped the run: likewise resumable.\n");
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

/* A resumed run must continue the checkpoint's: a budget below what it has
 * trained is an error, and training on another dataset is said out loud (a
 * moved file is fine; a different corpus breaks the run's data order). */
static dt_status check_resume(const train_config *cfg, const char *resume_path, const train_config *stored,
                              int64_t *schedule_differs_at) {
    train_state state;
    if (train_checkpoint_read_state(resume_path, &state, NULL) != DT_OK) return DT_ERR;
    if (cfg->tokens < state.tokens_seen)
        return dt_errorf("train.tokens = %lld is below the %lld tokens %s has already trained (give a larger budget)",
                         (long long)cfg->tokens, (long long)state.tokens_seen, resume_path);
    /* A trunk (train/trunk.h) continued to a larger budget is the longer run;
     * a checkpoint already into its decay is not (said once the run is set up). */
    *schedule_differs_at = train_schedule_first_difference(stored, cfg, state.step);
    if (strcmp(cfg->data_path, stored->data_path))
        fprintf(stderr, "dbranch train: note: data.path is %s; %s was trained on %s\n", cfg->data_path, resume_path,
                stored->data_path);
    return DT_OK;
}

static void print_resolved(const train_config *cfg, const char *config_path) {
    size_t length = train_config_format(cfg, NULL, 0);
    char *text = malloc(length + 1);
    if (!text) return;
    train_config_format(cfg, text, length + 1);
    printf("# resolved configuration%s%s\n%s\n", config_path ? " of " : "", config_path ? config_path : "", text);
    free(text);
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *config_path = NULL, *resume_path = NULL, *time_limit_text = NULL;
    const dt_comm *comm = NULL;
    /* Overrides in command-line order: --set pairs and the shorthands, applied after the file. */
    const char **overrides = calloc((size_t)argc + 1, sizeof *overrides);
    char(*shorthand)[TRAIN_PATH_MAX + 32] = calloc((size_t)argc + 1, sizeof *shorthand);
    int n_overrides = 0, exit_code = 1, dry_run = 0;
    cli_seen seen = {0};
    if (!overrides || !shorthand) {
        fprintf(stderr, "dbranch train: out of memory\n");
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--dry-run")) {
            dry_run = 1;
            continue;
        }
        const char *key = !strcmp(arg, "--tokens")    ? "train.tokens"
                          : !strcmp(arg, "--out")     ? "train.out_dir"
                          : !strcmp(arg, "--threads") ? "train.threads"
                          : !strcmp(arg, "--reduce")  ? "train.reduce"
                                                      : NULL;
        int takes_value = key || !strcmp(arg, "--config") || !strcmp(arg, "--set") || !strcmp(arg, "--resume") ||
                          !strcmp(arg, "--time-limit");
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
        if (strcmp(arg, "--set") && cli_once(&seen, arg) != DT_OK) {
            fprintf(stderr, "dbranch train: %s\n", dt_error_message());
            exit_code = 2;
            goto done;
        }
        if (!strcmp(arg, "--config"))
            config_path = value;
        else if (!strcmp(arg, "--resume"))
            resume_path = value;
        else if (!strcmp(arg, "--time-limit"))
            time_limit_text = value;
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
    double time_limit_seconds = 0.0;
    if (time_limit_text && train_time_limit_parse(time_limit_text, &time_limit_seconds) != DT_OK) {
        fprintf(stderr, "dbranch train: --time-limit: %s\n", dt_error_message());
        exit_code = 2;
        goto done;
    }

    train_config cfg = train_config_default(), stored = train_config_default();
    dt_status status = resume_path ? train_checkpoint_read_config(resume_path, &stored) : DT_OK;
    if (status == DT_OK) {
        if (config_path)
            status = train_config_load(&cfg, config_path);
        else
            cfg = stored;
    }
    for (int i = 0; status == DT_OK && i < n_overrides; i++)
        status = train_config_set(&cfg, overrides[i]);
    if (status == DT_OK) status = train_config_validate(&cfg);
    int64_t schedule_differs_at = -1;
    if (status == DT_OK && resume_path) status = check_resume(&cfg, resume_path, &stored, &schedule_differs_at);
    if (status != DT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }

    if (dry_run) {
        print_resolved(&cfg, config_path);
        exit_code = 0;
        goto done;
    }

    if (cli_join_job(cfg.reduce, &comm) != DT_OK) {
        exit_code = cli_fail("train");
        goto done;
    }
    const int speaks = !comm || comm->rank == 0; /* one voice for the job */
    install_stop_handlers();
    trainer t;
    trainer_options options = {.resume_path = resume_path,
                               .progress = speaks ? stdout : NULL,
                               .stop_flag = &stop_signal,
                               .time_limit_seconds = time_limit_seconds,
                               .comm = comm};
    /* Test hook (tests/test_cli_qa.c): stop at a known step so a SIGKILL lands between checkpoints. */
    const char *pause = getenv("DBRANCH_TEST_PAUSE_AFTER_STEP");
    if (pause) options.pause_after_step = strtoll(pause, NULL, 10);
    if (trainer_init(&t, &cfg, &options) != DT_OK) {
        exit_code = cli_fail_job("train", comm);
        goto done;
    }
    if (schedule_differs_at >= 0 && speaks)
        fprintf(stderr,
                "dbranch train: note: %s trained step %lld on another learning-rate schedule than this run's "
                "(train.tokens %lld there, %lld here): the continued run is not the one a fresh start would give\n",
                resume_path, (long long)schedule_differs_at + 1, (long long)stored.tokens, (long long)cfg.tokens);
    /* Under mpirun stdout is a pseudo-terminal that Open MPI copies to mpirun's own stdout, often a file: periodic
     * lines there, not a live line redrawn with \r. */
    if (comm) t.log.progress_is_tty = 0;
    /* Printed once the run is set up, so a bad path or file is the only output. */
    if (speaks) print_resolved(&cfg, config_path);
    fflush(stdout);

    trainer_result result;
    status = trainer_run(&t, &result);
    trainer_free(&t);
    if (status != DT_OK) {
        exit_code = cli_fail_job("train", comm);
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
    exit_code = !result.stopped                               ? 0
                : result.stop_reason == TRAIN_STOP_TIME_LIMIT ? EXIT_TIME_LIMIT
                : stop_signal                                 ? 128 + (int)stop_signal
                                                              : 0;
done:
    cli_leave_job(comm);
    free(overrides);
    free(shorthand);
    return exit_code;
}

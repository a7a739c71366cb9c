/* What a training run reports: a JSON-lines log file (one object per step and
 * per evaluation, flushed as written so `tail -f` and crashed runs keep it)
 * and human progress on a stream the caller chooses (the CLI passes stdout;
 * tests pass NULL): a live one-line display redrawn with \r on a terminal,
 * plain periodic lines otherwise (pipes, nohup, CI logs).
 *
 * Step lines:  {"type":"step","step":...,"tokens":...,"lr":...,"loss":...,
 *               "loss_primary":...,"loss_branch":...,"alpha":...,"objective":...,
 *               "grad_norm":...,"skipped_updates":...,"tokens_per_s":...,"elapsed":...}
 * Eval lines:  {"type":"eval","step":...,"tokens":...,"loss":...,"loss_primary":...,
 *               "loss_branch":...,"alpha":...,"couple_q_norm":...,"couple_hidden_norm":...,
 *               "couple_out_norm":...,"branch_emb_norm":...,"windows":...,"grad_spikes":...,
 *               "grad_spike_largest":...,"elapsed":...,"load_avg_1m":...}
 *   load_avg_1m is the machine's (train/machine_load.h), beside the timings;
 *   the four norms are the weights' at that step (train/branch_norms.h): each
 *   coupling kind's L2 norm averaged over the layers that have one, and the
 *   Frobenius norm of branch.tok_emb (null without a branch or that vector).
 * `step` counts completed optimizer steps (1 after the first), `loss` is the
 * reported loss (the mixture NLL for a Decode-Branch model), `objective` the
 * optimised one (aux term, detach_primary), values that do not apply (no
 * branch) are null, and losses are printed with 9 significant digits so the
 * float32 value is exact. The first record a process writes is the run's
 * provenance ({"type":"provenance",...}, train/provenance.h). */
#ifndef TRAIN_LOG_H
#define TRAIN_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct train_step_record {
    int64_t step, total_steps, tokens;
    double lr, loss, loss_primary, loss_branch, alpha, objective, grad_norm;
    double tokens_per_s; /* this step */
    double step_seconds; /* wall time of this step */
    double elapsed;      /* seconds of training so far */
    /* updates the spike guard skipped so far, this step included (train/spike_guard.h) */
    int64_t skipped_updates;
    /* latent feedback (SPEC §6.5): the passes K this step ran; 0 for a model without feedback (no field) */
    int64_t feedback_passes;
} train_step_record;

typedef struct train_eval_record {
    int64_t step, tokens, windows;
    double loss, loss_primary, loss_branch, alpha, elapsed;
    /* train/branch_norms.h; NAN (null in the log) when absent */
    double couple_q_norm, couple_hidden_norm, couple_out_norm, branch_emb_norm;
    /* train/grad_spikes.h: the gradient-norm spikes since the previous
     * evaluation and the largest norm / median among them (0: none) */
    int64_t grad_spikes;
    double grad_spike_largest;
    /* the machine's 1-minute load average at the evaluation (train/machine_load.h; NAN: unknown) */
    double load_avg_1m;
} train_eval_record;

typedef struct train_log {
    FILE *file;      /* JSON lines, or NULL */
    char path[4096]; /* of file, for errors */
    int failed;      /* a write already failed (and was reported) */
    FILE *progress;  /* human progress, or NULL */
    int progress_is_tty;
    int64_t print_every; /* plain lines: every this many steps */
    int line_open;       /* a \r line is on screen and needs a newline before other output */
    double last_draw;    /* elapsed time of the last \r redraw */
    int64_t first_step;  /* step and elapsed of this process's first record, for the ETA */
    double first_elapsed;
} train_log;

/* path may be NULL (no file); append = 1 continues an existing log (resume).
 * Every write to the file is checked: a record that cannot be written whole
 * and flushed (a full disk) is an error naming the file and errno's text, so
 * a log is never silently truncated. */
dt_status train_log_open(train_log *log, const char *path, int append, FILE *progress, int64_t print_every);
/* Closes the file (its fclose checked; after a reported write error it closes
 * quietly, keeping that message); safe to call twice. */
dt_status train_log_close(train_log *log);

dt_status train_log_step(train_log *log, const train_step_record *record);
dt_status train_log_eval(train_log *log, const train_eval_record *record);
/* A plain line on the progress stream (closes a live line first). */
void train_log_message(train_log *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "1h02m", "3m12s", "45s" */
void train_format_duration(double seconds, char *out, int capacity);

#endif

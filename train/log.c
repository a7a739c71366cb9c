/* The JSON-lines log and the progress display (formats in log.h). */
#include "train/log.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "train/grad_spikes.h"

dt_status train_log_open(train_log *log, const char *path, int append, FILE *progress, int64_t print_every) {
    *log = (train_log){.progress = progress, .print_every = print_every > 0 ? print_every : 1, .first_step = -1};
    log->progress_is_tty = progress && isatty(fileno(progress));
    if (path) {
        snprintf(log->path, sizeof log->path, "%s", path);
        log->file = fopen(path, append ? "a" : "w");
        if (!log->file) return dt_errorf("%s: cannot open the log file for writing (%s)", path, strerror(errno));
    }
    return DT_OK;
}

/* The one check after every record: flushed whole, or an error naming the file. */
static dt_status check_written(train_log *log) {
    errno = 0;
    if (fflush(log->file) != 0 || ferror(log->file)) {
        int saved = errno;
        log->failed = 1;
        return dt_errorf("%s: cannot write the log (%s)", log->path, saved ? strerror(saved) : "write error");
    }
    return DT_OK;
}

dt_status train_log_close(train_log *log) {
    if (log->progress && log->line_open) {
        fputc('\n', log->progress);
        fflush(log->progress);
    }
    dt_status status = DT_OK;
    if (log->file && log->failed) {
        fclose(log->file);
    } else if (log->file) {
        status = check_written(log);
        errno = 0;
        if (fclose(log->file) != 0 && status == DT_OK)
            status = dt_errorf("%s: cannot write the log (%s)", log->path, errno ? strerror(errno) : "close failed");
    }
    log->file = NULL;
    log->line_open = 0;
    return status;
}

/* JSON has no NaN: values that do not apply (or diverged) are null. */
static void json_number(FILE *f, const char *key, double value, const char *format) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(value))
        fprintf(f, format, value);
    else
        fputs("null", f);
}

void train_format_duration(double seconds, char *out, int capacity) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    long s = lround(seconds);
    if (s >= 3600)
        snprintf(out, capacity, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60)
        snprintf(out, capacity, "%ldm%02lds", s / 60, s % 60);
    else
        snprintf(out, capacity, "%lds", s);
}

void train_log_message(train_log *log, const char *fmt, ...) {
    if (!log->progress) return;
    if (log->line_open) fputc('\n', log->progress);
    log->line_open = 0;
    va_list args;
    va_start(args, fmt);
    vfprintf(log->progress, fmt, args);
    va_end(args);
    fputc('\n', log->progress);
    fflush(log->progress);
}

static void print_progress(train_log *log, const train_step_record *r) {
    if (log->first_step < 0) {
        log->first_step = r->step - 1;
        log->first_elapsed = r->elapsed - r->step_seconds;
    }
    int last = r->step == r->total_steps;
    /* ETA from this process's average step time (the first step, with its allocations, included). */
    double per_step = (r->elapsed - log->first_elapsed) / (double)(r->step - log->first_step);
    char eta[32];
    train_format_duration(per_step * (double)(r->total_steps - r->step), eta, sizeof eta);
    if (log->progress_is_tty) {
        if (!last && r->elapsed - log->last_draw < 0.1) return; /* redraw at most 10 times a second */
        log->last_draw = r->elapsed;
        fprintf(log->progress, "\rstep %lld/%lld | loss %.4f | %.0f tok/s | ETA %s    ", (long long)r->step,
                (long long)r->total_steps, r->loss, r->tokens_per_s, eta);
        log->line_open = 1;
        if (last) {
            fputc('\n', log->progress);
            log->line_open = 0;
        }
    } else {
        if (!last && r->step % log->print_every != 0 && r->step != 1) return;
        fprintf(log->progress,
                "step %lld/%lld  loss %.4f  lr %.3g  grad_norm %.3g  %.0f tok/s  elapsed %.1fs  ETA %s\n",
                (long long)r->step, (long long)r->total_steps, r->loss, r->lr, r->grad_norm, r->tokens_per_s,
                r->elapsed, eta);
    }
    fflush(log->progress);
}

dt_status train_log_step(train_log *log, const train_step_record *r) {
    if (log->progress) print_progress(log, r);
    if (log->file) {
        FILE *f = log->file;
        fprintf(f, "{\"type\":\"step\",\"step\":%lld,\"tokens\":%lld", (long long)r->step, (long long)r->tokens);
        json_number(f, "lr", r->lr, "%.9g");
        json_number(f, "loss", r->loss, "%.9g");
        json_number(f, "loss_primary", r->loss_primary, "%.9g");
        json_number(f, "loss_branch", r->loss_branch, "%.9g");
        json_number(f, "alpha", r->alpha, "%.9g");
        json_number(f, "objective", r->objective, "%.9g");
        json_number(f, "grad_norm", r->grad_norm, "%.9g");
        fprintf(f, ",\"skipped_updates\":%lld", (long long)r->skipped_updates);
        if (r->feedback_passes > 0) fprintf(f, ",\"feedback_passes\":%lld", (long long)r->feedback_passes);
        json_number(f, "tokens_per_s", r->tokens_per_s, "%.1f");
        json_number(f, "elapsed", r->elapsed, "%.3f");
        fputs("}\n", f);
        return check_written(log);
    }
    return DT_OK;
}

dt_status train_log_eval(train_log *log, const train_eval_record *r) {
    if (log->progress) {
        char line[256];
        int n = snprintf(line, sizeof line, "eval step %lld: val loss %.4f", (long long)r->step, r->loss);
        if (isfinite(r->loss_branch))
            snprintf(line + n, sizeof line - (size_t)n, " (primary %.4f, branch %.4f, alpha %.3f)", r->loss_primary,
                     r->loss_branch, r->alpha);
        train_log_message(log, "%s over %lld windows", line, (long long)r->windows);
        if (r->grad_spikes > 0)
            train_log_message(log,
                              "warning: %lld step%s since the last evaluation had a gradient norm above %dx the "
                              "median of the %d steps before (largest %.0fx); many such spikes usually mean the "
                              "learning rate is too high (train.spike_zscore skips their updates)",
                              (long long)r->grad_spikes, r->grad_spikes == 1 ? "" : "s", TRAIN_GRAD_SPIKE_FACTOR,
                              TRAIN_GRAD_SPIKE_WINDOW, r->grad_spike_largest);
    }
    if (log->file) {
        FILE *f = log->file;
        fprintf(f, "{\"type\":\"eval\",\"step\":%lld,\"tokens\":%lld", (long long)r->step, (long long)r->tokens);
        json_number(f, "loss", r->loss, "%.9g");
        json_number(f, "loss_primary", r->loss_primary, "%.9g");
        json_number(f, "loss_branch", r->loss_branch, "%.9g");
        json_number(f, "alpha", r->alpha, "%.9g");
        json_number(f, "couple_q_norm", r->couple_q_norm, "%.9g");
        json_number(f, "couple_hidden_norm", r->couple_hidden_norm, "%.9g");
        json_number(f, "couple_out_norm", r->couple_out_norm, "%.9g");
        json_number(f, "branch_emb_norm", r->branch_emb_norm, "%.9g");
        fprintf(f, ",\"windows\":%lld,\"grad_spikes\":%lld", (long long)r->windows, (long long)r->grad_spikes);
        json_number(f, "grad_spike_largest", r->grad_spike_largest, "%.4g");
        /* what depends on the machine, not the run, last: comparisons of
         * two runs' records cut each line at "elapsed" */
        json_number(f, "elapsed", r->elapsed, "%.3f");
        json_number(f, "load_avg_1m", r->load_avg_1m, "%.2f");
        fputs("}\n", f);
        return check_written(log);
    }
    return DT_OK;
}

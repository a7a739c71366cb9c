/* The spike guard's window statistics and checkpoint state (see spike_guard.h). */
#include "train/spike_guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/h5.h"

dt_status train_spike_guard_init(train_spike_guard *g, double zscore, int64_t window) {
    memset(g, 0, sizeof *g);
    g->zscore = zscore;
    g->window = window;
    if (zscore <= 0) return DT_OK;
    if (window < 2) return dt_errorf("train.spike_window = %lld: needs at least 2 steps", (long long)window);
    g->objective = calloc((size_t)window, sizeof *g->objective);
    g->grad_norm = calloc((size_t)window, sizeof *g->grad_norm);
    if (!g->objective || !g->grad_norm) return dt_errorf("train.spike_window = %lld: out of memory", (long long)window);
    return DT_OK;
}

void train_spike_guard_free(train_spike_guard *g) {
    free(g->objective);
    free(g->grad_norm);
    memset(g, 0, sizeof *g);
}

/* Mean and sample sd of a full ring, summed oldest first (a fixed order, so a restored window gives the same bits). */
static void ring_stats(const train_spike_guard *g, const double *ring, double *mean, double *sd) {
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < g->count; i++)
        sum += ring[(g->next + i) % g->window];
    *mean = sum / (double)g->count;
    for (int64_t i = 0; i < g->count; i++) {
        double d = ring[(g->next + i) % g->window] - *mean;
        squares += d * d;
    }
    *sd = sqrt(squares / (double)(g->count - 1));
}

static int active(const train_spike_guard *g) { return g->zscore > 0 && g->count == g->window; }

int train_spike_guard_objective_spike(const train_spike_guard *g, double objective) {
    if (!active(g)) return 0;
    double mean, sd;
    ring_stats(g, g->objective, &mean, &sd);
    return sd > 0 && (objective - mean) / sd > g->zscore;
}

double train_spike_guard_norm_limit(const train_spike_guard *g) {
    if (!active(g)) return 0;
    double mean, sd;
    ring_stats(g, g->grad_norm, &mean, &sd);
    return sd > 0 ? mean + g->zscore * sd : 0;
}

void train_spike_guard_record(train_spike_guard *g, double objective, double grad_norm, int skipped) {
    if (g->zscore <= 0) return;
    if (skipped) {
        g->skipped++;
        return;
    }
    g->objective[g->next] = objective;
    g->grad_norm[g->next] = grad_norm;
    g->next = (g->next + 1) % g->window;
    if (g->count < g->window) g->count++;
}

dt_status train_spike_guard_write(hid_t train_group, const train_spike_guard *g) {
    if (g->zscore <= 0) return DT_OK;
    if (h5_write_attr_int(train_group, "skipped_updates", g->skipped) != DT_OK) return DT_ERR;
    if (g->count == 0) return DT_OK;
    double *rows = malloc((size_t)g->count * 2 * sizeof *rows); /* [count, 2] oldest first */
    if (!rows) return dt_errorf("/train/spike_window: out of memory");
    const int64_t oldest = (g->next - g->count + g->window) % g->window;
    for (int64_t i = 0; i < g->count; i++) {
        rows[2 * i] = g->objective[(oldest + i) % g->window];
        rows[2 * i + 1] = g->grad_norm[(oldest + i) % g->window];
    }
    dt_status status = h5_write_f64(train_group, "spike_window", rows, 2, (int64_t[]){g->count, 2});
    free(rows);
    return status;
}

dt_status train_spike_guard_read(const char *path, train_spike_guard *g) {
    g->count = g->next = g->skipped = 0;
    if (g->zscore <= 0) return DT_OK;
    hid_t file;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    hid_t group = H5Gopen2(file, "train", H5P_DEFAULT);
    dt_status status = group < 0 ? dt_errorf("%s: no /train group", path) : DT_OK;
    if (status == DT_OK && h5_has_attr(group, "skipped_updates"))
        status = h5_read_attr_int(group, "skipped_updates", &g->skipped);
    if (status == DT_OK && h5_exists(group, "spike_window")) {
        int ndim;
        int64_t shape[4];
        status = h5_dataset_shape(group, "spike_window", &ndim, shape);
        if (status == DT_OK && (ndim != 2 || shape[1] != 2 || shape[0] < 1))
            status = dt_errorf("%s: /train/spike_window is not [n, 2]", path);
        double *rows = status == DT_OK ? malloc((size_t)shape[0] * 2 * sizeof *rows) : NULL;
        if (status == DT_OK && !rows) status = dt_errorf("%s: out of memory", path);
        if (status == DT_OK) status = h5_read_f64(group, "spike_window", rows, 2, shape);
        if (status == DT_OK) /* the newest values that fit, in order */
            for (int64_t i = shape[0] > g->window ? shape[0] - g->window : 0; i < shape[0]; i++)
                train_spike_guard_record(g, rows[2 * i], rows[2 * i + 1], 0);
        free(rows);
    }
    if (group >= 0) H5Gclose(group);
    H5Fclose(file);
    return status == DT_OK ? DT_OK : dt_error_context("%s", path);
}

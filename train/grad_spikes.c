/* The gradient-norm spike watch (see grad_spikes.h). */
#include "train/grad_spikes.h"

#include <math.h>
#include <string.h>

#include "core/h5.h"

/* Median of the full window, on a copy (insertion sort: 50 values a step). */
static double window_median(const train_grad_spikes *w) {
    double sorted[TRAIN_GRAD_SPIKE_WINDOW];
    for (int i = 0; i < TRAIN_GRAD_SPIKE_WINDOW; i++) {
        const double v = w->norms[i];
        int j = i;
        for (; j > 0 && sorted[j - 1] > v; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = v;
    }
    return 0.5 * (sorted[TRAIN_GRAD_SPIKE_WINDOW / 2 - 1] + sorted[TRAIN_GRAD_SPIKE_WINDOW / 2]);
}

void train_grad_spikes_record(train_grad_spikes *w, double grad_norm) {
    if (w->count == TRAIN_GRAD_SPIKE_WINDOW) {
        const double median = window_median(w);
        if (median > 0 && grad_norm > TRAIN_GRAD_SPIKE_FACTOR * median) {
            w->spikes++;
            if (grad_norm / median > w->largest) w->largest = grad_norm / median;
        }
    }
    w->norms[w->next] = grad_norm;
    w->next = (w->next + 1) % TRAIN_GRAD_SPIKE_WINDOW;
    if (w->count < TRAIN_GRAD_SPIKE_WINDOW) w->count++;
}

void train_grad_spikes_take(train_grad_spikes *w, int64_t *spikes, double *largest) {
    *spikes = w->spikes;
    *largest = w->largest;
    w->spikes = 0;
    w->largest = 0;
}

dt_status train_grad_spikes_write(hid_t train_group, const train_grad_spikes *w) {
    if (h5_write_attr_int(train_group, "grad_spikes", w->spikes) != DT_OK ||
        h5_write_attr_double(train_group, "grad_spike_largest", w->largest) != DT_OK)
        return DT_ERR;
    if (w->count == 0) return DT_OK;
    double oldest_first[TRAIN_GRAD_SPIKE_WINDOW];
    const int oldest = (w->next - w->count + TRAIN_GRAD_SPIKE_WINDOW) % TRAIN_GRAD_SPIKE_WINDOW;
    for (int i = 0; i < w->count; i++)
        oldest_first[i] = w->norms[(oldest + i) % TRAIN_GRAD_SPIKE_WINDOW];
    return h5_write_f64(train_group, "grad_norm_window", oldest_first, 1, (int64_t[]){w->count});
}

dt_status train_grad_spikes_read(const char *path, train_grad_spikes *w) {
    memset(w, 0, sizeof *w);
    hid_t file;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    hid_t group = H5Gopen2(file, "train", H5P_DEFAULT);
    dt_status status = group < 0 ? dt_errorf("no /train group") : DT_OK;
    if (status == DT_OK && h5_has_attr(group, "grad_spikes")) {
        status = h5_read_attr_int(group, "grad_spikes", &w->spikes);
        if (status == DT_OK) status = h5_read_attr_double(group, "grad_spike_largest", &w->largest);
        if (status == DT_OK && (w->spikes < 0 || !(w->largest >= 0)))
            status = dt_errorf("/train: grad_spikes = %lld, grad_spike_largest = %g are not counts",
                               (long long)w->spikes, w->largest);
    }
    if (status == DT_OK && h5_exists(group, "grad_norm_window")) {
        int ndim;
        int64_t shape[4];
        double norms[TRAIN_GRAD_SPIKE_WINDOW];
        status = h5_dataset_shape(group, "grad_norm_window", &ndim, shape);
        if (status == DT_OK && (ndim != 1 || shape[0] < 1 || shape[0] > TRAIN_GRAD_SPIKE_WINDOW))
            status = dt_errorf("/train/grad_norm_window is not [n], 1 <= n <= %d", TRAIN_GRAD_SPIKE_WINDOW);
        if (status == DT_OK) status = h5_read_f64(group, "grad_norm_window", norms, 1, shape);
        for (int64_t i = 0; status == DT_OK && i < shape[0]; i++) {
            if (!(norms[i] >= 0) || !isfinite(norms[i]))
                status = dt_errorf("/train/grad_norm_window[%lld] = %g is not a gradient norm", (long long)i, norms[i]);
            w->norms[i] = norms[i];
            w->count++;
        }
        w->next = w->count % TRAIN_GRAD_SPIKE_WINDOW;
    }
    if (group >= 0) H5Gclose(group);
    H5Fclose(file);
    return status == DT_OK ? DT_OK : dt_error_context("%s", path);
}

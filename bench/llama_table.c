/* The llama-bench-shaped markdown table (see llama_table.h). */
#include "bench/llama_table.h"

#include <math.h>

void bench_llama_rate(const double *seconds, int n, int64_t tokens, double *mean, double *sd) {
    double sum = 0, squares = 0;
    for (int i = 0; i < n; i++)
        sum += (double)tokens / seconds[i];
    *mean = n > 0 ? sum / n : 0;
    for (int i = 0; i < n; i++) {
        double d = (double)tokens / seconds[i] - *mean;
        squares += d * d;
    }
    *sd = n > 1 ? sqrt(squares / (n - 1)) : 0;
}

/* llama-bench's units: GiB / MiB for the size, B / M for the parameters. */
static void format_size(double bytes, char *out, size_t capacity) {
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(out, capacity, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(out, capacity, "%.2f MiB", bytes / (1024.0 * 1024));
}

static void format_params(int64_t params, char *out, size_t capacity) {
    if (params >= 1000000000)
        snprintf(out, capacity, "%.2f B", (double)params / 1e9);
    else
        snprintf(out, capacity, "%.2f M", (double)params / 1e6);
}

void bench_llama_table_print(FILE *out, const bench_llama_header *h, const bench_llama_row *rows, int n_rows) {
    char size[32], params[32];
    format_size(h->size_bytes, size, sizeof size);
    format_params(h->params, params, sizeof params);
    fprintf(out, "| %-30s | %10s | %10s | %-10s | %7s | %-10s | %13s | %20s |\n", "model", "size", "params", "backend",
            "threads", "mode", "test", "t/s");
    fputs("| ------------------------------ | ---------: | ---------: | ---------- | ------: | ---------- | "
          "------------: | -------------------: |\n",
          out);
    for (int i = 0; i < n_rows; i++) {
        char rate[64];
        snprintf(rate, sizeof rate, "%.2f ± %.2f", rows[i].mean, rows[i].sd);
        /* "±" is two bytes and one column: pad by one more. */
        fprintf(out, "| %-30s | %10s | %10s | %-10s | %7d | %-10s | %13s | %21s |\n", h->model, size, params, "CPU",
                h->threads, rows[i].mode, rows[i].test, rate);
    }
    fprintf(out, "\nbuild: %s (%s)\n", h->commit, h->version);
    fprintf(out, "cpu: %s, BLIS %s\n", h->cpu, h->blis_version);
}

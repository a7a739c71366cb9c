/* The resource budget of model_budget.h. Parameter counts come from
 * model_info, the one cost model (`info`, `bench`, the decode figures and this
 * check): it walks the model description layer by layer without allocating
 * any weight, and the config's key ranges keep its int64 sums exact. */
#include "models/model_budget.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "models/model_info.h"

/* model_info of the config; 0 when the config is invalid. */
static int config_info(const model_config *config, int64_t kv_positions, model_info *info) {
    if (kv_positions > config->block_size) kv_positions = config->block_size;
    return model_info_compute(config, kv_positions > 0 ? kv_positions : 0, info) == DT_OK;
}

double model_config_param_count(const model_config *config) {
    model_info info;
    if (config->n_layer < 1 || !config_info(config, 0, &info)) return INFINITY;
    return (double)info.params_total;
}

double model_config_param_bytes(const model_config *config) { return 4.0 * model_config_param_count(config); }

double model_budget_bytes(const model_config *config, model_use use, int64_t threads, int64_t kv_positions,
                          int64_t kv_rows) {
    const double params = model_config_param_bytes(config);
    double bytes = 2.0 * params; /* weights + gradients */
    /* RoPE families keep a [block_size, head_dim] cos/sin table (block_size = 2^30 in a model file's /config
     * would otherwise be allocated and filled before anything else failed: found by tests/fuzz). */
    if (config->family != FAMILY_NANOGPT && config->n_head > 0)
        bytes += 4.0 * (double)config->block_size * (double)(config->d_model / config->n_head);
    if (use == MODEL_USE_TRAIN || use == MODEL_USE_TRAIN_BF16)
        bytes += 2.0 * params + (double)(threads > 1 ? threads - 1 : 0) * params;
    if (use == MODEL_USE_TRAIN_BF16) bytes += 0.5 * params; /* 2 of every 4 bytes */
    if (use == MODEL_USE_DECODE) {
        model_info info;
        if (!config_info(config, kv_positions, &info)) return INFINITY;
        bytes += info.kv_bytes_baseline * (double)(kv_rows > 1 ? kv_rows : 1); /* the cache: every layer's K and V */
    }
    return bytes;
}

double model_budget_memory_limit(void) {
    double limit = INFINITY;
    long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) limit = (double)pages * (double)page_size;
    struct rlimit address_space;
    if (getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY &&
        (double)address_space.rlim_cur < limit)
        limit = (double)address_space.rlim_cur;
    const char *cap = getenv("DBRANCH_MEMORY_LIMIT");
    if (cap && *cap) {
        char *end = NULL;
        double value = strtod(cap, &end);
        if (end != cap && *end == '\0' && value > 0 && value < limit) limit = value;
    }
    return limit;
}

/* "12.3 GiB" */
static void format_bytes(double bytes, char *out, size_t size) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 6) {
        bytes /= 1024.0;
        u++;
    }
    if (isinf(bytes))
        snprintf(out, size, "an unbounded amount");
    else
        snprintf(out, size, "%.1f %s", bytes, units[u]);
}

dt_status model_budget_check(const model_config *config, model_use use, int64_t threads, int64_t kv_positions,
                             int64_t kv_rows) {
    const double need = model_budget_bytes(config, use, threads, kv_positions, kv_rows);
    const double limit = model_budget_memory_limit();
    if (need <= limit) return DT_OK;
    static const char *const what[] = {"its weights and gradients", "training (weights, gradients, optimizer state)",
                                       "decode (weights, gradients, KV cache)"};
    char need_text[32], limit_text[32];
    format_bytes(need, need_text, sizeof need_text);
    format_bytes(limit, limit_text, sizeof limit_text);
    return dt_errorf("model too large for this machine: %.4g parameters (n_layer = %lld, d_model = %lld, "
                     "vocab_size = %lld) need %s for %s, more than the %s of memory available",
                     model_config_param_count(config), (long long)config->n_layer, (long long)config->d_model,
                     (long long)config->vocab_size, need_text, what[use], limit_text);
}

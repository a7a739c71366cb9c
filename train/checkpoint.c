/* Training checkpoints: layout in checkpoint.h. The model part is the models
 * layer's model_write_h5 / model_read_h5; this file adds /optim and /train. */
#include "train/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/h5.h"
#include "models/model_io.h"
#include "train/grad_spikes.h"
#include "train/spike_guard.h"

int train_model_is_finite(const model *m, const char **bad_name) {
    for (int i = 0; i < m->n_params; i++) {
        const dt_tensor *t = m->params[i].tensor;
        const float *x = dt_f32(t);
        int finite = 1;
        for (int64_t j = 0; j < t->size; j++)
            finite &= isfinite(x[j]) != 0;
        if (!finite) {
            if (bad_name) *bad_name = m->params[i].name;
            return 0;
        }
    }
    return 1;
}

/* ---- writing ---- */

static size_t element_count(int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    return n;
}

/* Optimizer moments and RNG states carry a checksum like the weights
 * (model_io.h): a corrupted moment would otherwise resume silently. */
static dt_status write_f32_checked(hid_t group, const char *name, const float *data, int ndim, const int64_t *shape) {
    if (h5_write_f32(group, name, data, ndim, shape) != DT_OK) return DT_ERR;
    return model_h5_attach_checksum(group, name, data, element_count(ndim, shape) * sizeof(float));
}

static dt_status read_f32_checked(hid_t group, const char *name, float *data, int ndim, const int64_t *shape) {
    if (h5_read_f32(group, name, data, ndim, shape) != DT_OK) return DT_ERR;
    return model_h5_verify_checksum(group, name, data, element_count(ndim, shape) * sizeof(float));
}

static dt_status write_optim(hid_t file, const optimizer *opt) {
    hid_t group;
    if (h5_group(file, "optim", &group) != DT_OK) return DT_ERR;
    dt_status status = h5_write_attr_int(group, "step", opt->step);
    if (status == DT_OK) status = h5_write_attr_string(group, "optimizer", optim_kind_name(opt->kind));
    char name[160];
    for (int i = 0; status == DT_OK && i < opt->n_params; i++) {
        const optim_param *p = &opt->params[i];
        if (optim_is_muon(opt, i)) {
            snprintf(name, sizeof name, "muon/%s", p->name);
            status = write_f32_checked(group, name, optim_muon_momentum(opt, i), p->ndim, p->shape);
        } else {
            snprintf(name, sizeof name, "m/%s", p->name);
            status = write_f32_checked(group, name, optim_adamw_m(opt, i), p->ndim, p->shape);
            snprintf(name, sizeof name, "v/%s", p->name);
            if (status == DT_OK) status = write_f32_checked(group, name, optim_adamw_v(opt, i), p->ndim, p->shape);
        }
    }
    H5Gclose(group);
    return status;
}

static dt_status write_rng(hid_t group, const char *prefix, const dt_rng *rng) {
    char name[64];
    snprintf(name, sizeof name, "%s_rng", prefix);
    if (h5_write_u64(group, name, rng->s, 1, (const int64_t[]){4}) != DT_OK ||
        model_h5_attach_checksum(group, name, rng->s, sizeof rng->s) != DT_OK)
        return DT_ERR;
    snprintf(name, sizeof name, "%s_has_spare", prefix);
    if (h5_write_attr_int(group, name, rng->has_spare) != DT_OK) return DT_ERR;
    snprintf(name, sizeof name, "%s_spare", prefix);
    return h5_write_attr_double(group, name, rng->spare);
}

/* The canonical text the run_config checksum covers: "name=value\n" for each
 * key present, in table order (a file written before a key existed lacks it
 * on both sides). */
static uint64_t run_config_checksum(const train_config *cfg, const int *present) {
    uint64_t sum = 0;
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (!stream) return 0;
    for (int i = 0; i < train_config_key_count(); i++) {
        if (present && !present[i]) continue;
        char value[TRAIN_PATH_MAX];
        train_config_get_stored(cfg, i, value, sizeof value);
        fprintf(stream, "%s=%s\n", train_config_key_name(i), value);
    }
    fclose(stream);
    sum = model_checksum(text, length);
    free(text);
    return sum;
}

static dt_status write_run_config(hid_t train, const train_config *cfg) {
    hid_t group;
    if (h5_group(train, "run_config", &group) != DT_OK) return DT_ERR;
    dt_status status = DT_OK;
    for (int i = 0; status == DT_OK && i < train_config_key_count(); i++) {
        char value[TRAIN_PATH_MAX];
        const char *name = train_config_key_name(i);
        train_config_get_stored(cfg, i, value, sizeof value);
        status = model_h5_write_attr_text(group, name, train_config_key_kind(i), value);
    }
    if (status == DT_OK) status = h5_write_attr_int(group, "checksum", (int64_t)run_config_checksum(cfg, NULL));
    H5Gclose(group);
    return status;
}

static dt_status read_run_config(hid_t train, train_config *cfg) {
    hid_t group = H5Gopen2(train, "run_config", H5P_DEFAULT);
    if (group < 0) return dt_errorf("/train/run_config is not a group");
    int present[256] = {0};
    dt_status status = DT_OK;
    /* A checkpoint without the key predates train.precision: its run was
     * float32 (the default now, auto, would follow the CPU resuming it). */
    cfg->precision = TRAIN_PRECISION_FP32;
    for (int i = 0; status == DT_OK && i < train_config_key_count() && i < 256; i++) {
        const char *name = train_config_key_name(i);
        char value[TRAIN_PATH_MAX];
        if (!h5_has_attr(group, name)) continue; /* a key added later: its default */
        present[i] = 1;
        status = model_h5_attr_as_text(group, name, value, sizeof value);
        if (status == DT_OK) status = train_config_set_stored(cfg, i, value);
    }
    int64_t stored = 0;
    if (status == DT_OK && (h5_read_attr_int(group, "checksum", &stored) != DT_OK ||
                            (uint64_t)stored != run_config_checksum(cfg, present)))
        status = dt_errorf("/train/run_config does not match its checksum (the file is corrupted)");
    H5Gclose(group);
    return status;
}

static dt_status write_state(hid_t file, const train_state *state, const train_config *run) {
    hid_t group;
    if (h5_group(file, "train", &group) != DT_OK) return DT_ERR;
    size_t length = train_config_format(run, NULL, 0);
    char *config_text = malloc(length + 1);
    if (!config_text) {
        H5Gclose(group);
        return dt_errorf("out of memory");
    }
    train_config_format(run, config_text, length + 1);
    dt_status status = DT_OK;
    if (h5_write_attr_int(group, "step", state->step) != DT_OK ||
        h5_write_attr_int(group, "tokens_seen", state->tokens_seen) != DT_OK ||
        h5_write_attr_double(group, "elapsed_seconds", state->elapsed_seconds) != DT_OK ||
        h5_write_attr_int(group, "windows_drawn", (int64_t)state->windows_drawn) != DT_OK ||
        h5_write_attr_int(group, "processes", state->processes > 0 ? state->processes : 1) != DT_OK ||
        write_rng(group, "loader", &state->loader_rng) != DT_OK ||
        write_rng(group, "trainer", &state->trainer_rng) != DT_OK ||
        h5_write_attr_string(group, "config", config_text ? config_text : "") != DT_OK ||
        h5_write_attr_int(
            group, "config_checksum",
            (int64_t)model_checksum(config_text ? config_text : "", config_text ? strlen(config_text) : 0)) != DT_OK ||
        write_run_config(group, run) != DT_OK ||
        (state->spike_guard && train_spike_guard_write(group, state->spike_guard) != DT_OK) ||
        (state->grad_spikes && train_grad_spikes_write(group, state->grad_spikes) != DT_OK))
        status = DT_ERR;
    free(config_text);
    H5Gclose(group);
    return status;
}

typedef struct checkpoint_parts {
    const model *m;
    const optimizer *opt;
    const train_state *state;
    const train_config *run;
} checkpoint_parts;

static dt_status write_checkpoint(hid_t file, const void *ctx) {
    const checkpoint_parts *parts = ctx;
    if (model_write_h5(parts->m, file) != DT_OK || write_optim(file, parts->opt) != DT_OK ||
        write_state(file, parts->state, parts->run) != DT_OK)
        return DT_ERR;
    return DT_OK;
}

dt_status train_checkpoint_save(const char *path, const model *m, const optimizer *opt, const train_state *state,
                                const train_config *run) {
    const char *bad = NULL;
    if (!train_model_is_finite(m, &bad))
        return dt_errorf("%s: checkpoint not written: parameter '%s' holds a non-finite value", path, bad);
    const checkpoint_parts parts = {m, opt, state, run};
    return h5_write_file(path, write_checkpoint, &parts);
}

/* ---- reading ---- */

/* A string attribute of any length, malloc'ed (h5_read_attr_string caps at 4 KiB). */
static dt_status read_string_attr(hid_t loc, const char *name, char **out) {
    if (H5Aexists(loc, name) <= 0) return dt_errorf("missing attribute '%s'", name);
    hid_t attr = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t type = attr >= 0 ? H5Aget_type(attr) : -1;
    dt_status status = DT_OK;
    if (type < 0 || H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) > 0) {
        status = dt_errorf("attribute '%s' is not a fixed-length string", name);
    } else {
        size_t size = H5Tget_size(type);
        char *text = calloc(size + 1, 1);
        hid_t mem = H5Tcopy(H5T_C_S1);
        H5Tset_size(mem, size + 1);
        H5Tset_strpad(mem, H5T_STR_NULLTERM);
        if (!text || H5Aread(attr, mem, text) < 0) {
            free(text);
            status = dt_errorf("cannot read attribute '%s'", name);
        } else {
            *out = text;
        }
        H5Tclose(mem);
    }
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    return status;
}

static dt_status read_rng(hid_t group, const char *prefix, dt_rng *rng, int64_t *raw_has_spare) {
    char name[64];
    int64_t has_spare = 0;
    snprintf(name, sizeof name, "%s_rng", prefix);
    if (h5_read_u64(group, name, rng->s, 1, (const int64_t[]){4}) != DT_OK ||
        model_h5_verify_checksum(group, name, rng->s, sizeof rng->s) != DT_OK)
        return DT_ERR;
    snprintf(name, sizeof name, "%s_has_spare", prefix);
    if (h5_read_attr_int(group, name, &has_spare) != DT_OK) return DT_ERR;
    *raw_has_spare = has_spare;
    rng->has_spare = has_spare == 1;
    snprintf(name, sizeof name, "%s_spare", prefix);
    return h5_read_attr_double(group, name, &rng->spare);
}

static dt_status open_group(hid_t file, const char *name, hid_t *group) {
    if (!h5_exists(file, name)) return dt_errorf("no /%s group (a model file, not a training checkpoint?)", name);
    *group = H5Gopen2(file, name, H5P_DEFAULT);
    if (*group < 0)
        return dt_errorf("/%s is not a group (a token file or other HDF5 file, not a training checkpoint?)", name);
    return DT_OK;
}

/* A training state is trusted only when it makes sense: counts are
 * non-negative and far inside int64, every step consumed at least one token
 * and drew at least one window, the RNG states are live (all-zero xoshiro
 * never leaves zero) with 0/1 flags and finite spares, and the config's
 * checksum is present. A doctored or foreign /train would otherwise run (and
 * "finish") silently. Errors name the attribute. */
static const int64_t max_count = INT64_C(1) << 50; /* ~1e15 tokens: beyond any run this code can make */

static dt_status validate_rng(const dt_rng *rng, const char *prefix) {
    if (!(rng->s[0] | rng->s[1] | rng->s[2] | rng->s[3]))
        return dt_errorf("'%s_rng' is all zeros (not a generator state)", prefix);
    if (!isfinite(rng->spare)) return dt_errorf("'%s_spare' = %g is not finite", prefix, rng->spare);
    return DT_OK;
}

static dt_status validate_state(const train_state *s, int64_t has_spare[2], int64_t windows) {
    if (s->step < 0 || s->step > max_count) return dt_errorf("'step' = %lld is outside [0, 2^50]", (long long)s->step);
    if (s->tokens_seen < 0 || s->tokens_seen > max_count)
        return dt_errorf("'tokens_seen' = %lld is outside [0, 2^50]", (long long)s->tokens_seen);
    if (s->tokens_seen < s->step)
        return dt_errorf("'tokens_seen' = %lld is less than 'step' = %lld (every step trains on tokens)",
                         (long long)s->tokens_seen, (long long)s->step);
    if (windows < s->step || windows > max_count)
        return dt_errorf("'windows_drawn' = %lld is outside [step = %lld, 2^50]", (long long)windows,
                         (long long)s->step);
    if (!(s->elapsed_seconds >= 0.0 && isfinite(s->elapsed_seconds)))
        return dt_errorf("'elapsed_seconds' = %g must be finite and >= 0", s->elapsed_seconds);
    for (int i = 0; i < 2; i++)
        if (has_spare[i] != 0 && has_spare[i] != 1)
            return dt_errorf("'%s_has_spare' = %lld must be 0 or 1", i ? "trainer" : "loader", (long long)has_spare[i]);
    if (validate_rng(&s->loader_rng, "loader") != DT_OK || validate_rng(&s->trainer_rng, "trainer") != DT_OK)
        return DT_ERR;
    return DT_OK;
}

dt_status train_checkpoint_read_state(const char *path, train_state *state, char **config_text) {
    hid_t file, group = -1;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    if (open_group(file, "train", &group) != DT_OK) {
        H5Fclose(file);
        return dt_error_context("%s", path);
    }
    memset(state, 0, sizeof *state);
    int64_t windows = 0, has_spare[2] = {0, 0};
    dt_status status = DT_OK;
    if (h5_read_attr_int(group, "step", &state->step) != DT_OK ||
        h5_read_attr_int(group, "tokens_seen", &state->tokens_seen) != DT_OK ||
        h5_read_attr_double(group, "elapsed_seconds", &state->elapsed_seconds) != DT_OK ||
        h5_read_attr_int(group, "windows_drawn", &windows) != DT_OK ||
        read_rng(group, "loader", &state->loader_rng, &has_spare[0]) != DT_OK ||
        read_rng(group, "trainer", &state->trainer_rng, &has_spare[1]) != DT_OK ||
        validate_state(state, has_spare, windows) != DT_OK)
        status = DT_ERR;
    /* Written before jobs of several processes existed: one process. */
    state->processes = 1;
    if (status == DT_OK && h5_has_attr(group, "processes") &&
        (h5_read_attr_int(group, "processes", &state->processes) != DT_OK || state->processes < 1 ||
         state->processes > max_count))
        status = dt_errorf("'processes' = %lld must be a process count >= 1", (long long)state->processes);
    if (status == DT_OK && !h5_has_attr(group, "config_checksum"))
        status = dt_errorf("missing attribute 'config_checksum' (the stored config cannot be verified)");
    state->windows_drawn = (uint64_t)windows;
    if (status == DT_OK && config_text) {
        status = read_string_attr(group, "config", config_text);
        int64_t stored = 0;
        if (status == DT_OK && (h5_read_attr_int(group, "config_checksum", &stored) != DT_OK ||
                                (uint64_t)stored != model_checksum(*config_text, strlen(*config_text)))) {
            free(*config_text);
            *config_text = NULL;
            status = dt_errorf("attribute 'config' does not match config_checksum (the file is corrupted)");
        }
    }
    H5Gclose(group);
    H5Fclose(file);
    return status == DT_OK ? DT_OK : dt_error_context("%s: /train", path);
}

dt_status train_checkpoint_read_config(const char *path, train_config *cfg) {
    if (model_load_config(&cfg->model, path) != DT_OK) return DT_ERR;
    hid_t file, group = -1;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    if (open_group(file, "train", &group) != DT_OK) {
        H5Fclose(file);
        return dt_error_context("%s", path);
    }
    dt_status status;
    if (h5_exists(group, "run_config")) {
        status = read_run_config(group, cfg);
    } else {
        /* Written before /train/run_config existed: the INI text is all there is. */
        H5Gclose(group);
        H5Fclose(file);
        train_state state;
        char *text = NULL;
        if (train_checkpoint_read_state(path, &state, &text) != DT_OK) return DT_ERR;
        char origin[TRAIN_PATH_MAX + 32];
        snprintf(origin, sizeof origin, "%s (stored config)", path);
        cfg->precision = TRAIN_PRECISION_FP32; /* older still than train.precision: float32 */
        status = train_config_parse_string(cfg, text, origin);
        free(text);
        return status;
    }
    H5Gclose(group);
    H5Fclose(file);
    return status == DT_OK ? DT_OK : dt_error_context("%s", path);
}

dt_status train_checkpoint_read_optim(const char *path, optimizer *opt) {
    hid_t file, group = -1;
    if (h5_open(path, 0, &file) != DT_OK) return DT_ERR;
    if (open_group(file, "optim", &group) != DT_OK) {
        H5Fclose(file);
        return dt_error_context("%s", path);
    }
    char kind[32] = "", name[160];
    int64_t step = 0;
    dt_status status = DT_OK;
    if (h5_read_attr_int(group, "step", &step) != DT_OK ||
        h5_read_attr_string(group, "optimizer", kind, sizeof kind) != DT_OK)
        status = DT_ERR;
    else if (strcmp(kind, optim_kind_name(opt->kind)))
        status = dt_errorf("trained with optimizer %s, the run asks for %s (train.optimizer)", kind,
                           optim_kind_name(opt->kind));
    for (int i = 0; status == DT_OK && i < opt->n_params; i++) {
        const optim_param *p = &opt->params[i];
        if (optim_is_muon(opt, i)) {
            snprintf(name, sizeof name, "muon/%s", p->name);
            status = read_f32_checked(group, name, optim_muon_momentum(opt, i), p->ndim, p->shape);
        } else {
            snprintf(name, sizeof name, "m/%s", p->name);
            status = read_f32_checked(group, name, optim_adamw_m(opt, i), p->ndim, p->shape);
            snprintf(name, sizeof name, "v/%s", p->name);
            if (status == DT_OK) status = read_f32_checked(group, name, optim_adamw_v(opt, i), p->ndim, p->shape);
        }
    }
    if (status == DT_OK) opt->step = step;
    H5Gclose(group);
    H5Fclose(file);
    return status == DT_OK ? DT_OK : dt_error_context("%s: /optim", path);
}

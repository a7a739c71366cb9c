/* Reading a run's provenance record and log back (see run_record.h). */
#include "analysis/run_record.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop/json.h"

enum { MAX_RECORD_BYTES = 16 << 20 };

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        dt_errorf("%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *text = malloc(MAX_RECORD_BYTES + 1);
    if (!text) {
        fclose(f);
        dt_errorf("%s: out of memory", path);
        return NULL;
    }
    *n = fread(text, 1, MAX_RECORD_BYTES + 1, f);
    int bad = ferror(f) || *n > MAX_RECORD_BYTES;
    fclose(f);
    if (bad) {
        free(text);
        dt_errorf("%s: cannot read it (or it is over 16 MiB)", path);
        return NULL;
    }
    text[*n] = '\0';
    return text;
}

static char *copy_text(const char *s) {
    size_t n = strlen(s) + 1;
    char *out = malloc(n);
    if (out) memcpy(out, s, n);
    return out;
}

/* A scalar as text: integers as written, other numbers in the fewest digits
 * that read back as the same double, strings verbatim. */
static void scalar_text(const json_value *v, char *out, size_t capacity) {
    switch (v->type) {
    case JSON_NUMBER:
        if (v->number_is_integer) {
            snprintf(out, capacity, "%lld", (long long)v->integer);
            return;
        }
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(out, capacity, "%.*g", digits, v->number);
            if (strtod(out, NULL) == v->number) return;
        }
        return;
    case JSON_STRING:
        snprintf(out, capacity, "%s", v->string);
        return;
    case JSON_BOOL:
        snprintf(out, capacity, "%s", v->boolean ? "true" : "false");
        return;
    default:
        snprintf(out, capacity, "%s", v->type == JSON_NULL ? "null" : "?");
    }
}

/* The provenance record's "config" object as section.key = value pairs. */
static dt_status read_config(analysis_run *run, const json_value *config, const char *path) {
    if (!config || config->type != JSON_OBJECT) return dt_errorf("%s: no \"config\" object", path);
    size_t total = 0;
    for (size_t s = 0; s < config->length; s++)
        if (config->items[s].type == JSON_OBJECT) total += config->items[s].length;
    run->keys = calloc(total + 1, sizeof *run->keys);
    run->values = calloc(total + 1, sizeof *run->values);
    if (!run->keys || !run->values) return dt_errorf("%s: out of memory", path);
    for (size_t s = 0; s < config->length; s++) {
        const json_value *section = &config->items[s];
        if (section->type != JSON_OBJECT) return dt_errorf("%s: config.%s is not an object", path, config->keys[s]);
        for (size_t k = 0; k < section->length; k++) {
            char key[256], value[4096];
            snprintf(key, sizeof key, "%s.%s", config->keys[s], section->keys[k]);
            if (section->items[k].type == JSON_ARRAY || section->items[k].type == JSON_OBJECT)
                return dt_errorf("%s: config %s is not a single value", path, key);
            scalar_text(&section->items[k], value, sizeof value);
            run->keys[run->n_keys] = copy_text(key);
            run->values[run->n_keys] = copy_text(value);
            if (!run->keys[run->n_keys] || !run->values[run->n_keys]) return dt_errorf("%s: out of memory", path);
            run->n_keys++;
        }
    }
    return DT_OK;
}

/* The record in text[n]: its total_steps (when steps is not NULL) and its config. */
static dt_status parse_record(const char *text, size_t n, const char *path, analysis_run *run, int64_t *steps_out) {
    json_value root;
    if (json_parse(text, n, &root) != DT_OK) return dt_error_context("%s", path);
    dt_status status = DT_OK;
    const json_value *type = json_get(&root, "type"), *steps = json_get(&root, "total_steps");
    if (!type || type->type != JSON_STRING || strcmp(type->string, "provenance"))
        status = dt_errorf("%s: not a provenance record (no \"type\":\"provenance\")", path);
    else if (steps_out && (!steps || steps->type != JSON_NUMBER || !steps->number_is_integer))
        status = dt_errorf("%s: no integer \"total_steps\"", path);
    else {
        if (steps_out) *steps_out = steps->integer;
        status = read_config(run, json_get(&root, "config"), path);
    }
    json_free(&root);
    return status;
}

dt_status analysis_config_parse(const char *text, size_t n, const char *name, analysis_run *run) {
    memset(run, 0, sizeof *run);
    run->dir = copy_text(name);
    if (!run->dir) return dt_errorf("%s: out of memory", name);
    return parse_record(text, n, name, run, NULL);
}

dt_status analysis_run_fill_defaults(analysis_run *run, const analysis_run *defaults, int *added) {
    *added = 0;
    int missing = 0;
    for (int k = 0; k < defaults->n_keys; k++)
        missing += !analysis_run_value(run, defaults->keys[k]);
    if (missing == 0) return DT_OK;
    char **keys = realloc(run->keys, ((size_t)run->n_keys + (size_t)missing + 1) * sizeof *keys);
    if (keys) run->keys = keys;
    char **values = keys ? realloc(run->values, ((size_t)run->n_keys + (size_t)missing + 1) * sizeof *values) : NULL;
    if (values) run->values = values;
    if (!keys || !values) return dt_errorf("%s: out of memory", run->dir);
    int n_recorded = run->n_keys;
    for (int k = 0; k < defaults->n_keys; k++) {
        int recorded = 0;
        for (int i = 0; i < n_recorded && !recorded; i++)
            recorded = !strcmp(run->keys[i], defaults->keys[k]);
        if (recorded) continue;
        run->keys[run->n_keys] = copy_text(defaults->keys[k]);
        run->values[run->n_keys] = copy_text(defaults->values[k]);
        if (!run->keys[run->n_keys] || !run->values[run->n_keys]) {
            free(run->keys[run->n_keys]);
            free(run->values[run->n_keys]);
            return dt_errorf("%s: out of memory", run->dir);
        }
        run->n_keys++;
        (*added)++;
    }
    return DT_OK;
}

static dt_status read_provenance(analysis_run *run, const char *path) {
    size_t n;
    char *text = read_file(path, &n);
    if (!text) return DT_ERR;
    dt_status status = parse_record(text, n, path, run, &run->total_steps);
    free(text);
    if (status != DT_OK) return DT_ERR;
    const char *seed = analysis_run_value(run, "train.seed");
    char *end = NULL;
    if (!seed) return dt_errorf("%s: the config has no train.seed", path);
    run->seed = strtoll(seed, &end, 10);
    if (end == seed || *end) return dt_errorf("%s: train.seed = %s is not an integer", path, seed);
    return DT_OK;
}

/* The last eval record of the log; it must be at the run's final step. */
static dt_status read_log(analysis_run *run, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return dt_errorf("%s: cannot open the run's log (%s)", path, strerror(errno));
    char *line = NULL;
    size_t capacity = 0;
    ssize_t length;
    long line_number = 0;
    int64_t last_step = -1;
    double last_loss = NAN;
    dt_status status = DT_OK;
    while (status == DT_OK && (length = getline(&line, &capacity, f)) >= 0) {
        line_number++;
        while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r'))
            line[--length] = '\0';
        if (length == 0) continue;
        json_value record;
        if (json_parse(line, (size_t)length, &record) != DT_OK) {
            status = dt_error_context("%s line %ld", path, line_number);
            break;
        }
        const json_value *type = json_get(&record, "type");
        if (type && type->type == JSON_STRING && !strcmp(type->string, "eval")) {
            const json_value *step = json_get(&record, "step"), *loss = json_get(&record, "loss");
            if (!step || step->type != JSON_NUMBER || !step->number_is_integer)
                status = dt_errorf("%s line %ld: an eval record without an integer \"step\"", path, line_number);
            else if (!loss || loss->type != JSON_NUMBER)
                status = dt_errorf("%s line %ld: an eval record without a numeric \"loss\"", path, line_number);
            else {
                last_step = step->integer;
                last_loss = loss->number;
            }
        }
        json_free(&record);
    }
    free(line);
    fclose(f);
    if (status != DT_OK) return DT_ERR;
    if (last_step < 0) return dt_errorf("%s: no eval record (the run has no validation loss)", path);
    if (last_step != run->total_steps)
        return dt_errorf("%s: the last eval is at step %lld of %lld (the run did not finish)", path,
                         (long long)last_step, (long long)run->total_steps);
    run->final_loss = last_loss;
    return DT_OK;
}

dt_status analysis_run_read(const char *dir, analysis_run *run) {
    memset(run, 0, sizeof *run);
    run->dir = copy_text(dir);
    if (!run->dir) return dt_errorf("%s: out of memory", dir);
    size_t n = strlen(dir) + 32;
    char *path = malloc(n + 4096);
    if (!path) return dt_errorf("%s: out of memory", dir);
    snprintf(path, n, "%s/provenance.json", dir);
    dt_status status = read_provenance(run, path);
    if (status == DT_OK) {
        /* The log: train.log_file, relative to the run directory (where train put it) unless absolute. */
        const char *log = analysis_run_value(run, "train.log_file");
        if (!log || !log[0]) log = "log.jsonl";
        if (log[0] == '/')
            snprintf(path, n + 4096, "%s", log);
        else
            snprintf(path, n + 4096, "%s/%s", dir, log);
        status = read_log(run, path);
    }
    free(path);
    return status;
}

void analysis_run_free(analysis_run *run) {
    for (int i = 0; i < run->n_keys; i++) {
        free(run->keys[i]);
        free(run->values[i]);
    }
    free(run->keys);
    free(run->values);
    free(run->dir);
    memset(run, 0, sizeof *run);
}

const char *analysis_run_value(const analysis_run *run, const char *key) {
    for (int i = 0; i < run->n_keys; i++)
        if (!strcmp(run->keys[i], key)) return run->values[i];
    return NULL;
}

/* The one INI reader for config files (rules in config_file.h), over Debian's
 * libinih. The file is read whole first: a directory opens but reads nothing,
 * and inih's line reader would stop each line at a NUL byte, so both would
 * parse as an empty config; and inih takes `[train]]` for [train], so headers
 * are checked here, line by line, before inih sees the text. */
#include "models/config_file.h"

#include <ctype.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/input_file.h"
#include "models/config_value.h"

/* Configs are a few hundred bytes; anything this big is the wrong file. */
#define CONFIG_FILE_MAX (1 << 20)
enum { MAX_FILE_KEYS = 256 };

typedef struct {
    config_file_entry_fn on_entry;
    void *user;
    int failed;
    char message[512]; /* the first error; inih keeps counting lines and reports the line */
    /* Keys set so far: a key given twice in one file is an error rather than
     * "the last one wins", which silently hides an edit. */
    int n_seen;
    char seen[MAX_FILE_KEYS][96];
} parse_state;

/* 1 when section.name was already set in this file (else records it). */
static int seen_before(parse_state *state, const char *section, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "%s.%s", section, name);
    for (int i = 0; i < state->n_seen; i++)
        if (!strcmp(state->seen[i], full)) return 1;
    if (state->n_seen < MAX_FILE_KEYS) snprintf(state->seen[state->n_seen++], sizeof state->seen[0], "%s", full);
    return 0;
}

static int known_section(const char *section) {
    return !strcmp(section, "model") || !strcmp(section, "data") || !strcmp(section, "train");
}

static int on_ini_entry(void *user, const char *section, const char *name, const char *value) {
    parse_state *state = user;
    if (state->failed) return 0;
    dt_status status;
    if (section[0] == '\0')
        status = dt_errorf("key '%s' outside any section (put it under [model], [data] or [train])", name);
    else if (!known_section(section))
        status = dt_errorf("unknown section [%s] (sections: model, data, train)", section);
    else if (seen_before(state, section, name))
        status = dt_errorf("%s.%s is set twice (or a value is continued on an indented line)", section, name);
    else
        status = state->on_entry(state->user, section, name, value);
    if (status != DT_OK) {
        state->failed = 1;
        snprintf(state->message, sizeof state->message, "%s", dt_error_message());
        return 0;
    }
    return 1;
}

/* Every line that starts a header is exactly `[name]`, then blanks or a comment. */
static dt_status check_headers(const char *text, const char *origin) {
    int line = 1;
    for (const char *p = text; *p; line++) {
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        const char *s = p;
        while (s < end && isspace((unsigned char)*s))
            s++;
        if (s < end && *s == '[') {
            const char *close = memchr(s, ']', (size_t)(end - s));
            const char *after = close ? close + 1 : end;
            while (after < end && isspace((unsigned char)*after))
                after++;
            int name_ok = close && close > s + 1 && !memchr(s + 1, '[', (size_t)(close - s - 1));
            if (!name_ok || (after < end && *after != ';' && *after != '#'))
                return dt_errorf("%s line %d: malformed section header '%.*s' (expected [name])", origin, line,
                                 (int)(end - s > 60 ? 60 : end - s), s);
        }
        p = *end ? end + 1 : end;
    }
    return DT_OK;
}

static dt_status parse_text(const char *text, const char *origin, config_file_entry_fn on_entry, void *user,
                            int *n_keys) {
    if (check_headers(text, origin) != DT_OK) return DT_ERR;
    parse_state *state = calloc(1, sizeof *state);
    if (!state) return dt_errorf("%s: out of memory", origin);
    state->on_entry = on_entry;
    state->user = user;
    int rc = ini_parse_string(text, on_ini_entry, state);
    dt_status status = DT_OK;
    if (rc == -2)
        status = dt_errorf("%s: out of memory while parsing", origin);
    else if (rc != 0 && state->failed)
        status = dt_errorf("%s line %d: %s", origin, rc, state->message);
    else if (rc != 0)
        status = dt_errorf("%s line %d: not a [section] or key = value line", origin, rc);
    if (n_keys) *n_keys = state->n_seen;
    free(state);
    return status;
}

dt_status config_file_parse(const char *text, const char *origin, config_file_entry_fn on_entry, void *user) {
    return parse_text(text, origin, on_entry, user, NULL);
}

dt_status config_file_read(const char *path, config_file_entry_fn on_entry, void *user) {
    if (access(path, F_OK) == 0 && dt_check_input_file(path) != DT_OK) return DT_ERR;
    FILE *file = fopen(path, "r");
    if (!file) return dt_errorf("%s: no such config file (or not readable)", path);
    char *text = malloc(CONFIG_FILE_MAX + 1);
    if (!text) {
        fclose(file);
        return dt_errorf("%s: out of memory", path);
    }
    size_t n = fread(text, 1, CONFIG_FILE_MAX + 1, file);
    int read_error = ferror(file);
    fclose(file);
    dt_status status = DT_OK;
    if (read_error)
        status = dt_errorf("%s: cannot read (a directory?)", path);
    else if (n > CONFIG_FILE_MAX)
        status = dt_errorf("%s: larger than %d bytes, not a config file", path, CONFIG_FILE_MAX);
    else if (memchr(text, '\0', n))
        status = dt_errorf("%s: contains NUL bytes, not a text config file", path);
    int n_keys = 0;
    if (status == DT_OK) {
        text[n] = '\0';
        status = parse_text(text, path, on_entry, user, &n_keys);
    }
    free(text);
    if (status == DT_OK && n_keys == 0)
        status = dt_errorf("%s: sets no keys (an empty config file?); see experiments/configs/", path);
    return status;
}

/* ---- the model part ---- */

static dt_status on_model_entry(void *user, const char *section, const char *key, const char *value) {
    if (strcmp(section, "model") != 0) return DT_OK; /* [data] and [train]: the train layer's */
    if (!model_config_has_key(key)) return dt_errorf("unknown key 'model.%s'", key);
    return model_config_set(user, key, value);
}

dt_status model_config_load_file(model_config *config, const char *path) {
    return config_file_read(path, on_model_entry, config);
}

dt_status model_config_set_assignment(model_config *config, const char *assignment) {
    const char *equals = strchr(assignment, '=');
    char key[128];
    size_t n = equals ? (size_t)(equals - assignment) : 0;
    if (!equals || n == 0 || n >= sizeof key) return dt_errorf("--set '%s': expected key=value", assignment);
    memcpy(key, assignment, n);
    key[n] = '\0';
    char trimmed[128];
    if (config_trim("--set", key, trimmed, sizeof trimmed) != DT_OK) return DT_ERR;
    const char *name = !strncmp(trimmed, "model.", 6) ? trimmed + 6 : trimmed;
    if (model_config_set(config, name, equals + 1) != DT_OK) return dt_error_context("--set");
    return DT_OK;
}

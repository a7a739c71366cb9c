/* The provenance record (train/provenance.h) of a real run: OUT/provenance.json
 * exists, is JSON (checked by a small parser written here, not the writer's
 * code), holds the run's configuration values, the build and machine fields,
 * and is also the first line of the JSON-lines log; a resumed run appends a
 * second record naming the checkpoint and step. The data path holds a quote
 * and a backslash, so the record's string escaping is exercised. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "data/tokenizer.h"
#include "data/tokens.h"
#include "kernels/attention_amx.h"
#include "kernels/isa.h"
#include "support/scratch.h"
#include "train/trainer.h"

static char work_dir[64];
static char data_path[160];

static void setup(void) {
    test_scratch_dir(work_dir, sizeof work_dir, "provenance");
    snprintf(data_path, sizeof data_path, "%s/we\"ird\\name.h5", work_dir);
    enum { N_TRAIN = 4000, N_VAL = 400 };
    static int32_t tokens[N_TRAIN + N_VAL];
    dt_rng rng;
    dt_rng_seed(&rng, 3);
    for (int i = 0; i < N_TRAIN + N_VAL; i++)
        tokens[i] = 'a' + (int32_t)dt_rng_below(&rng, 8);
    data_tokenizer tok;
    cr_assert_eq(data_tokenizer_byte(&tok), DT_OK);
    cr_assert_eq(data_tokens_write(data_path, &tok, tokens, N_TRAIN, tokens + N_TRAIN, N_VAL, "letters"), DT_OK, "%s",
                 dt_error_message());
    data_tokenizer_free(&tok);
}

static void teardown(void) { test_remove_dir(work_dir); }

/* ---- a minimal JSON reader: every scalar stored under its dotted path ---- */

enum { MAX_FIELDS = 256 };
typedef struct json_fields {
    int n;
    char path[MAX_FIELDS][96];
    char value[MAX_FIELDS][256]; /* strings unescaped; numbers, true/false/null as written */
} json_fields;

typedef struct json_reader {
    const char *s;
    json_fields *out;
} json_reader;

static void skip_space(json_reader *r) {
    while (isspace((unsigned char)*r->s))
        r->s++;
}

/* A string into out (unescaped); 0 on a syntax error. */
static int read_string(json_reader *r, char *out, size_t capacity) {
    if (*r->s != '"') return 0;
    r->s++;
    size_t n = 0;
    while (*r->s && *r->s != '"') {
        char c = *r->s++;
        if ((unsigned char)c < 0x20) return 0;
        if (c == '\\') {
            c = *r->s++;
            switch (c) {
            case '"':
            case '\\':
            case '/':
                break;
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'u': {
                unsigned code = 0;
                for (int i = 0; i < 4; i++) {
                    if (!isxdigit((unsigned char)*r->s)) return 0;
                    char digit[2] = {*r->s++, 0};
                    code = code * 16 + (unsigned)strtoul(digit, NULL, 16);
                }
                c = code < 0x80 ? (char)code : '?';
                break;
            }
            default:
                return 0;
            }
        }
        if (n + 1 < capacity) out[n++] = c;
    }
    if (*r->s != '"') return 0;
    r->s++;
    out[n] = '\0';
    return 1;
}

static int read_value(json_reader *r, const char *path);

static void store(json_reader *r, const char *path, const char *value) {
    cr_assert_lt(r->out->n, MAX_FIELDS);
    snprintf(r->out->path[r->out->n], sizeof r->out->path[0], "%s", path);
    snprintf(r->out->value[r->out->n], sizeof r->out->value[0], "%s", value);
    r->out->n++;
}

static int read_object(json_reader *r, const char *path) {
    r->s++; /* { */
    skip_space(r);
    if (*r->s == '}') return r->s++, 1;
    for (;;) {
        char key[96], child[192];
        skip_space(r);
        if (!read_string(r, key, sizeof key)) return 0;
        skip_space(r);
        if (*r->s++ != ':') return 0;
        snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", key);
        if (!read_value(r, child)) return 0;
        skip_space(r);
        if (*r->s == ',') {
            r->s++;
            continue;
        }
        if (*r->s == '}') return r->s++, 1;
        return 0;
    }
}

/* [a, b, ...] as fields path.0, path.1, ... */
static int read_array(json_reader *r, const char *path) {
    r->s++; /* [ */
    skip_space(r);
    if (*r->s == ']') return r->s++, 1;
    for (int i = 0;; i++) {
        char child[192];
        snprintf(child, sizeof child, "%s.%d", path, i);
        if (!read_value(r, child)) return 0;
        skip_space(r);
        if (*r->s == ',') {
            r->s++;
            continue;
        }
        if (*r->s == ']') return r->s++, 1;
        return 0;
    }
}

static int read_value(json_reader *r, const char *path) {
    skip_space(r);
    char text[256];
    if (*r->s == '{') return read_object(r, path);
    if (*r->s == '[') return read_array(r, path);
    if (*r->s == '"') {
        if (!read_string(r, text, sizeof text)) return 0;
        store(r, path, text);
        return 1;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (!strncmp(r->s, words[i], strlen(words[i]))) {
            r->s += strlen(words[i]);
            store(r, path, words[i]);
            return 1;
        }
    /* a number: -?digits(.digits)?([eE][+-]?digits)? */
    const char *start = r->s;
    if (*r->s == '-') r->s++;
    if (!isdigit((unsigned char)*r->s)) return 0;
    while (isdigit((unsigned char)*r->s))
        r->s++;
    if (*r->s == '.') {
        r->s++;
        if (!isdigit((unsigned char)*r->s)) return 0;
        while (isdigit((unsigned char)*r->s))
            r->s++;
    }
    if (*r->s == 'e' || *r->s == 'E') {
        r->s++;
        if (*r->s == '+' || *r->s == '-') r->s++;
        if (!isdigit((unsigned char)*r->s)) return 0;
        while (isdigit((unsigned char)*r->s))
            r->s++;
    }
    snprintf(text, sizeof text, "%.*s", (int)(r->s - start), start);
    store(r, path, text);
    return 1;
}

/* Parses one JSON object (the whole text, trailing newline allowed). */
static void parse(const char *text, json_fields *out) {
    out->n = 0;
    json_reader r = {.s = text, .out = out};
    skip_space(&r);
    cr_assert_eq(*r.s, '{', "not an object: %.80s", text);
    cr_assert(read_value(&r, ""), "not JSON near: %.60s", r.s);
    skip_space(&r);
    cr_assert_eq(*r.s, '\0', "text after the object: %.60s", r.s);
}

static const char *field(const json_fields *f, const char *path) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->path[i], path)) return f->value[i];
    cr_assert_fail("no field %s", path);
    return NULL;
}

/* ---- the runs ---- */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "missing %s", path);
    static char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* Line `index` (0-based) of a file, with its newline. */
static void read_line(const char *path, int index, char *out, size_t capacity) {
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "missing %s", path);
    for (int i = 0; i <= index; i++)
        cr_assert(fgets(out, (int)capacity, f) != NULL, "%s has no line %d", path, index);
    fclose(f);
}

static train_config tiny_config(void) {
    train_config cfg = train_config_default();
    cfg.model = model_config_default(FAMILY_LLAMA);
    cfg.model.vocab_size = 256, cfg.model.block_size = 16, cfg.model.n_layer = 1;
    cfg.model.n_head = 2, cfg.model.n_kv_head = 1, cfg.model.d_model = 16, cfg.model.d_ff = 24;
    snprintf(cfg.data_path, sizeof cfg.data_path, "%s", data_path);
    snprintf(cfg.out_dir, sizeof cfg.out_dir, "%s/run", work_dir);
    cfg.batch_size = 2, cfg.seq_len = 16, cfg.tokens = 4 * 2 * 16; /* 4 steps */
    cfg.warmup_steps = 1, cfg.eval_windows = 2, cfg.seed = 77, cfg.lr = 0.004, cfg.threads = 1;
    cfg.precision = TRAIN_PRECISION_FP32; /* not auto: the record's attention field is checked as float32's */
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    return cfg;
}

static void train(const train_config *cfg, const char *resume, int64_t stop_after) {
    trainer t;
    trainer_options options = {.resume_path = resume, .stop_after_step = stop_after};
    cr_assert_eq(trainer_init(&t, cfg, &options), DT_OK, "%s", dt_error_message());
    trainer_result result;
    cr_assert_eq(trainer_run(&t, &result), DT_OK, "%s", dt_error_message());
    trainer_free(&t);
}

/* A load average the run recorded, against /proc/loadavg read now: the
 * 15-minute figure moves by hundredths in the second a tiny run takes, the
 * 1-minute one by 8% of (running tasks - load) at most (one 5-second
 * update; a busy CI machine can run a dozen). Where the file
 * is missing the record says null. */
static void expect_load_like_the_machines(const char *one_minute, const char *fifteen_minutes) {
    FILE *f = fopen("/proc/loadavg", "r");
    double now[3];
    if (!f || fscanf(f, "%lf %lf %lf", &now[0], &now[1], &now[2]) != 3) {
        if (f) fclose(f);
        cr_expect_str_eq(one_minute, "null");
        return;
    }
    fclose(f);
    char *end = NULL;
    double recorded = strtod(one_minute, &end);
    cr_expect(end != one_minute && *end == '\0' && recorded >= 0 && fabs(recorded - now[0]) < 2.0,
              "1-minute load %s, /proc/loadavg %.2f", one_minute, now[0]);
    if (!fifteen_minutes) return;
    recorded = strtod(fifteen_minutes, &end);
    cr_expect(end != fifteen_minutes && *end == '\0' && fabs(recorded - now[2]) < 0.2,
              "15-minute load %s, /proc/loadavg %.2f", fifteen_minutes, now[2]);
}

Test(provenance, record_in_folder_and_log, .init = setup, .fini = teardown) {
    train_config cfg = tiny_config();
    cfg.eval_every = 1; /* an eval record (after each step record) to read the load from */
    train(&cfg, NULL, 2);
    char path[256], log_path[256], first[16384];
    snprintf(path, sizeof path, "%s/run/provenance.json", work_dir);
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    const char *text = read_text(path);
    static json_fields f;
    parse(text, &f);
    cr_expect_str_eq(field(&f, "type"), "provenance");
    cr_expect(strlen(field(&f, "commit")) > 0 && strlen(field(&f, "version")) > 0);
    cr_expect_eq(strlen(field(&f, "start_utc")), 20, "YYYY-MM-DDTHH:MM:SSZ: %s", field(&f, "start_utc"));
    cr_expect(strlen(field(&f, "cpu")) > 0 && strlen(field(&f, "blis_version")) > 0);
    cr_expect(!strcmp(field(&f, "bf16_engine"), "widen") || !strncmp(field(&f, "bf16_engine"), "onednn (", 8),
              "bf16_engine: %s", field(&f, "bf16_engine"));
    /* this run trains in float32: its attention is float32 whatever the CPU */
    cr_expect_str_eq(field(&f, "bf16_attention"), "fp32");
    const char *isa[] = {"isa.avx512f", "isa.avx512_bf16", "isa.amx_bf16"};
    for (int i = 0; i < 3; i++)
        cr_expect(!strcmp(field(&f, isa[i]), "true") || !strcmp(field(&f, isa[i]), "false"), "%s", isa[i]);
    cr_expect_str_eq(field(&f, "threads"), "1");
    expect_load_like_the_machines(field(&f, "load_avg.0"), field(&f, "load_avg.2"));
    /* the level the kernels ran at (ctest also runs this file under DBRANCH_ISA=avx2 and scalar) */
    cr_expect_str_eq(field(&f, "kernel_level"), k_isa_name(k_isa_active()));
    cr_expect_str_eq(field(&f, "resume"), "null");
    cr_expect_str_eq(field(&f, "total_steps"), "4");
    cr_expect_str_eq(field(&f, "tokens_per_step"), "32");
    /* the configuration's values, as set above */
    cr_expect_str_eq(field(&f, "config.model.family"), "llama");
    cr_expect_str_eq(field(&f, "config.model.d_model"), "16");
    cr_expect_str_eq(field(&f, "config.model.n_kv_head"), "1");
    cr_expect_str_eq(field(&f, "config.model.d_ff"), "24");
    cr_expect_str_eq(field(&f, "config.data.path"), data_path);
    cr_expect_str_eq(field(&f, "config.train.seed"), "77");
    cr_expect_str_eq(field(&f, "config.train.tokens"), "128");
    cr_expect(strtod(field(&f, "config.train.lr"), NULL) == 0.004, "lr %s", field(&f, "config.train.lr"));
    /* the log's first record is the same one */
    read_line(log_path, 0, first, sizeof first);
    cr_expect_str_eq(first, text);
    char second[16384];
    read_line(log_path, 1, second, sizeof second);
    cr_expect(strstr(second, "\"type\":\"step\"") != NULL, "%s", second);
    /* the final evaluation records the load too */
    static char line[16384], last_eval[16384];
    last_eval[0] = '\0';
    FILE *log = fopen(log_path, "r");
    cr_assert(log != NULL, "missing %s", log_path);
    while (fgets(line, sizeof line, log))
        if (strstr(line, "\"type\":\"eval\"")) snprintf(last_eval, sizeof last_eval, "%s", line);
    fclose(log);
    cr_assert(last_eval[0], "no eval record in %s", log_path);
    static json_fields eval;
    parse(last_eval, &eval);
    expect_load_like_the_machines(field(&eval, "load_avg_1m"), NULL);
}

/* A bf16 run records its attention engine by its whole name: the field held
 * 8 bytes, and "avx512_bf16" (a Zen 4's engine) was recorded as "avx512_". */
Test(provenance, bf16_run_names_its_attention_engine, .init = setup, .fini = teardown) {
    train_config cfg = tiny_config();
    cfg.precision = TRAIN_PRECISION_BF16;
    cr_assert_eq(train_config_validate(&cfg), DT_OK, "%s", dt_error_message());
    train(&cfg, NULL, 1);
    char path[256];
    snprintf(path, sizeof path, "%s/run/provenance.json", work_dir);
    static json_fields f;
    parse(read_text(path), &f);
    cr_expect_str_eq(field(&f, "bf16_attention"), k_bf16_attention_name(train_bf16_attention_engine(&cfg)));
    cr_expect_str_eq(field(&f, "config.train.precision"), "bf16");
}

Test(provenance, resumed_run_appends_a_record, .init = setup, .fini = teardown) {
    train_config cfg = tiny_config();
    train(&cfg, NULL, 2);
    char checkpoint[256], path[256], log_path[256], line[16384];
    snprintf(checkpoint, sizeof checkpoint, "%s/run/checkpoint.h5", work_dir);
    snprintf(path, sizeof path, "%s/run/provenance.json", work_dir);
    snprintf(log_path, sizeof log_path, "%s/run/log.jsonl", work_dir);
    train(&cfg, checkpoint, 0);
    static json_fields f;
    parse(read_text(path), &f);
    cr_expect_str_eq(field(&f, "resume.checkpoint"), checkpoint);
    cr_expect_str_eq(field(&f, "resume.step"), "2");
    /* the log: provenance, 2 steps (and whatever evaluations), then the resumed run's provenance */
    FILE *log = fopen(log_path, "r");
    cr_assert(log != NULL);
    int records = 0, steps_before = 0;
    while (fgets(line, sizeof line, log)) {
        if (strstr(line, "\"type\":\"provenance\"")) {
            records++;
            parse(line, &f);
            cr_expect_str_eq(field(&f, "config.train.seed"), "77");
        } else if (records == 1 && strstr(line, "\"type\":\"step\"")) {
            steps_before++;
        }
    }
    fclose(log);
    cr_expect_eq(records, 2);
    cr_expect_eq(steps_before, 2);
}

/* The provenance record (format and reasons in provenance.h): gathering the
 * build, machine and time fields, and writing them with the resolved config
 * as one JSON object. */
#include "train/provenance.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* blis.h is not a system header here: silence its unused static helpers and
 * range checks, just for the include (as kernels/gemm.c does). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <blis.h>
#pragma GCC diagnostic pop

#include "kernels/attention_amx.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/isa.h"
#include "train/machine_load.h"

/* DBRANCH_COMMIT: generated at build time by cmake/commit_header.cmake. */
#include "dbranch_commit.h"

#ifndef DBRANCH_VERSION
#define DBRANCH_VERSION "unknown"
#endif

/* The CPU's brand string and the three feature bits the kernels care about
 * (cpuid leaf 7: EBX 16 avx512f, EDX 22 amx_bf16; sub-leaf 1 EAX 5 avx512_bf16). */
static void read_cpu(train_provenance *p) {
    snprintf(p->cpu, sizeof p->cpu, "unknown");
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
        unsigned brand[12];
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
        char text[49];
        memcpy(text, brand, 48);
        text[48] = '\0';
        const char *start = text;
        while (*start == ' ')
            start++;
        size_t n = strlen(start);
        while (n > 0 && start[n - 1] == ' ')
            n--;
        snprintf(p->cpu, sizeof p->cpu, "%.*s", (int)n, start);
    }
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        p->avx512f = (b >> 16) & 1;
        p->amx_bf16 = (d >> 22) & 1;
        unsigned max_subleaf = a;
        if (max_subleaf >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            p->avx512_bf16 = (a >> 5) & 1;
        }
    }
#endif
#ifdef __AVX512F__
    p->built_avx512f = 1;
#endif
#ifdef __AVX512BF16__
    p->built_avx512_bf16 = 1;
#endif
#ifdef __AMX_BF16__
    p->built_amx_bf16 = 1;
#endif
}

void train_provenance_collect(train_provenance *p, int threads) {
    memset(p, 0, sizeof *p);
    snprintf(p->commit, sizeof p->commit, "%s", DBRANCH_COMMIT);
    snprintf(p->version, sizeof p->version, "%s", DBRANCH_VERSION);
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(p->start_utc, sizeof p->start_utc, "%Y-%m-%dT%H:%M:%SZ", &utc);
    read_cpu(p);
    snprintf(p->kernel_level, sizeof p->kernel_level, "%s", k_isa_name(k_isa_active()));
    train_machine_load(p->load_avg);
    p->threads = threads;
    p->processes = 1;
    snprintf(p->blis_version, sizeof p->blis_version, "%s", bli_info_get_version_str());
    const k_bf16_gemm_engine engine = k_bf16_gemm_active();
    if (engine == K_BF16_GEMM_ONEDNN)
        snprintf(p->bf16_engine, sizeof p->bf16_engine, "onednn (%s)", k_bf16_gemm_onednn_kernel());
    else
        snprintf(p->bf16_engine, sizeof p->bf16_engine, "%s", k_bf16_gemm_name(engine));
    snprintf(p->bf16_attention, sizeof p->bf16_attention, "%s", k_bf16_attention_name(k_bf16_attention_active()));
}

/* s[0..n) as a JSON string. */
static void json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Whether s[0..n) is a JSON number (so it is written bare). */
static int is_json_number(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !isdigit((unsigned char)s[i])) return 0;
    if (s[i] == '0' && i + 1 < n && isdigit((unsigned char)s[i + 1])) return 0; /* no leading zeros */
    while (i < n && isdigit((unsigned char)s[i]))
        i++;
    if (i < n && s[i] == '.') {
        i++;
        if (i >= n || !isdigit((unsigned char)s[i])) return 0;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= n || !isdigit((unsigned char)s[i])) return 0;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
    }
    return i == n;
}

/* The INI text ("[section]" lines, "key = value" lines) as
 * {"section":{"key":value,...},...}. */
static void write_config(FILE *f, const char *text) {
    fputc('{', f);
    int in_section = 0, first_key = 1;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        while (n > 0 && isspace((unsigned char)line[n - 1]))
            n--;
        const char *equals = memchr(line, '=', n);
        if (n >= 2 && line[0] == '[' && line[n - 1] == ']') {
            fputs(in_section ? "}," : "", f);
            json_string(f, line + 1, n - 2);
            fputs(":{", f);
            in_section = 1, first_key = 1;
        } else if (equals && in_section && line[0] != '#' && line[0] != ';') {
            size_t key_n = (size_t)(equals - line);
            while (key_n > 0 && isspace((unsigned char)line[key_n - 1]))
                key_n--;
            const char *value = equals + 1;
            while (value < line + n && isspace((unsigned char)*value))
                value++;
            size_t value_n = (size_t)(line + n - value);
            fputs(first_key ? "" : ",", f);
            json_string(f, line, key_n);
            fputc(':', f);
            if (is_json_number(value, value_n))
                fprintf(f, "%.*s", (int)value_n, value);
            else
                json_string(f, value, value_n);
            first_key = 0;
        }
        line = end ? end + 1 : NULL;
    }
    fputs(in_section ? "}}" : "}", f);
}

static void write_field(FILE *f, const char *key, const char *value) {
    fprintf(f, ",\"%s\":", key);
    json_string(f, value, strlen(value));
}

static void write_isa(FILE *f, const char *key, int avx512f, int avx512_bf16, int amx_bf16) {
    fprintf(f, ",\"%s\":{\"avx512f\":%s,\"avx512_bf16\":%s,\"amx_bf16\":%s}", key, avx512f ? "true" : "false",
            avx512_bf16 ? "true" : "false", amx_bf16 ? "true" : "false");
}

/* [1m, 5m, 15m], or null when unknown */
static void write_load(FILE *f, const char *key, const double load[3]) {
    if (isfinite(load[0]))
        fprintf(f, ",\"%s\":[%.2f,%.2f,%.2f]", key, load[0], load[1], load[2]);
    else
        fprintf(f, ",\"%s\":null", key);
}

dt_status train_provenance_write(FILE *f, const train_provenance *p, const char *where) {
    fputs("{\"type\":\"provenance\"", f);
    write_field(f, "commit", p->commit);
    write_field(f, "version", p->version);
    write_field(f, "start_utc", p->start_utc);
    write_field(f, "cpu", p->cpu);
    write_isa(f, "isa", p->avx512f, p->avx512_bf16, p->amx_bf16);
    write_isa(f, "compiled_for", p->built_avx512f, p->built_avx512_bf16, p->built_amx_bf16);
    write_field(f, "kernel_level", p->kernel_level);
    fprintf(f, ",\"threads\":%d,\"processes\":%d", p->threads, p->processes);
    write_load(f, "load_avg", p->load_avg);
    write_field(f, "blis_version", p->blis_version);
    write_field(f, "bf16_engine", p->bf16_engine);
    write_field(f, "bf16_attention", p->bf16_attention);
    if (p->resume_path) {
        fputs(",\"resume\":{\"checkpoint\":", f);
        json_string(f, p->resume_path, strlen(p->resume_path));
        fprintf(f, ",\"step\":%lld}", (long long)p->resume_step);
    } else {
        fputs(",\"resume\":null", f);
    }
    fprintf(f, ",\"total_steps\":%lld,\"tokens_per_step\":%lld,\"config\":", (long long)p->total_steps,
            (long long)p->tokens_per_step);
    write_config(f, p->config_text ? p->config_text : "");
    fputs("}\n", f);
    errno = 0;
    if (fflush(f) != 0 || ferror(f))
        return dt_errorf("%s: cannot write the provenance record (%s)", where, errno ? strerror(errno) : "write error");
    return DT_OK;
}

dt_status train_provenance_save(const char *path, const train_provenance *p) {
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp) return dt_errorf("%s: out of memory", path);
    snprintf(tmp, n, "%s.tmp", path);
    dt_status status = DT_OK;
    FILE *f = fopen(tmp, "w");
    if (!f)
        status = dt_errorf("%s: cannot open for writing", tmp);
    else {
        status = train_provenance_write(f, p, tmp);
        if (fclose(f) != 0 && status == DT_OK) status = dt_errorf("%s: cannot write the provenance record", tmp);
        if (status == DT_OK && rename(tmp, path) != 0) status = dt_errorf("%s: cannot rename to %s", tmp, path);
        if (status != DT_OK) remove(tmp);
    }
    free(tmp);
    return status;
}

dt_status train_provenance_record(const train_config *cfg, const char *config_text, const char *resume_path,
                                  int64_t resume_step, FILE *log_file, const char *log_path, int processes) {
    train_provenance p;
    train_provenance_collect(&p, k_get_threads());
    p.processes = processes;
    p.config_text = config_text;
    p.resume_path = resume_path;
    p.resume_step = resume_step;
    /* the run's own choice (train.bf16_attention), not only the process default */
    snprintf(p.bf16_attention, sizeof p.bf16_attention, "%s", k_bf16_attention_name(train_bf16_attention_engine(cfg)));
    p.total_steps = train_config_total_steps(cfg);
    p.tokens_per_step = train_config_tokens_per_step(cfg);
    char path[TRAIN_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/provenance.json", cfg->out_dir);
    if (train_provenance_save(path, &p) != DT_OK) return DT_ERR;
    return log_file ? train_provenance_write(log_file, &p, log_path) : DT_OK;
}

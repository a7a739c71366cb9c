/* Raw corpora for `dbranch prepare` (data/corpus.h): files, the kjv, pycode
 * and large presets, the block train/val split of the raw bytes, and the
 * seeded block sample BPE merges are learned on for a large corpus. */
#include "data/corpus.h"
#include "core/input_file.h"
#include "core/rng.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KJV_RANGE             "Genesis 1:1-Revelation 22:21"
#define KERNEL_TARBALL        "/usr/src/linux-source-6.1.tar.xz"
#define GCIDE_DICT            "/usr/share/dictd/gcide.dict.dz"
#define PYTHON_STDLIB_COMMAND "python3 -c \"import sysconfig;print(sysconfig.get_paths()['stdlib'])\""

/* A growable byte buffer. */
typedef struct {
    uint8_t *data;
    size_t size, capacity;
} byte_buffer;

static dt_status buffer_reserve(byte_buffer *buffer, size_t extra) {
    if (buffer->size + extra + 1 <= buffer->capacity) return DT_OK; /* +1: room for the final NUL */
    size_t capacity = buffer->capacity ? buffer->capacity : 1 << 16;
    while (capacity < buffer->size + extra + 1)
        capacity *= 2;
    uint8_t *grown = realloc(buffer->data, capacity);
    if (!grown) return dt_errorf("out of memory reading the corpus (%zu bytes)", capacity);
    buffer->data = grown;
    buffer->capacity = capacity;
    return DT_OK;
}

/* Appends everything readable from stream; name is for the error message. */
static dt_status buffer_append_stream(byte_buffer *buffer, FILE *stream, const char *name) {
    for (;;) {
        if (buffer_reserve(buffer, 1 << 16) != DT_OK) return DT_ERR;
        size_t got = fread(buffer->data + buffer->size, 1, buffer->capacity - buffer->size - 1, stream);
        buffer->size += got;
        if (got == 0) break;
    }
    if (ferror(stream)) return dt_errorf("%s: read error", name);
    return DT_OK;
}

static dt_status buffer_append_file(byte_buffer *buffer, const char *path) {
    if (dt_check_input_file(path) != DT_OK) return DT_ERR;
    FILE *stream = fopen(path, "rb");
    if (!stream) return dt_errorf("%s: %s", path, strerror(errno));
    dt_status status = buffer_append_stream(buffer, stream, path);
    fclose(stream);
    return status;
}

static void corpus_take(data_corpus *corpus, byte_buffer *buffer) {
    if (buffer_reserve(buffer, 0) == DT_OK) buffer->data[buffer->size] = '\0';
    corpus->bytes = buffer->data;
    corpus->n_bytes = buffer->size;
    memset(buffer, 0, sizeof *buffer);
}

void data_corpus_free(data_corpus *corpus) {
    if (!corpus) return;
    free(corpus->bytes);
    memset(corpus, 0, sizeof *corpus);
}

dt_status data_corpus_read_files(data_corpus *corpus, const char *const *paths, int n_paths) {
    memset(corpus, 0, sizeof *corpus);
    if (n_paths < 1) return dt_errorf("no input files");
    byte_buffer buffer = {0};
    for (int i = 0; i < n_paths; i++)
        if (buffer_append_file(&buffer, paths[i]) != DT_OK) {
            free(buffer.data);
            return DT_ERR;
        }
    corpus_take(corpus, &buffer);
    corpus->n_files = n_paths;
    /* Name the files; a long list is cut short with a count (attributes stay small). */
    int n = snprintf(corpus->source, sizeof corpus->source, "files:");
    for (int i = 0; i < n_paths; i++) {
        size_t room = sizeof corpus->source - (size_t)n;
        if (strlen(paths[i]) + 40 > room) {
            snprintf(corpus->source + n, room, " ... (%d files in all)", n_paths);
            break;
        }
        n += snprintf(corpus->source + n, room, " %s", paths[i]);
    }
    return DT_OK;
}

/* 1 when an executable `name` is on PATH. */
static int program_on_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char candidate[4096];
    for (const char *dir = path; *dir;) {
        const char *end = strchr(dir, ':');
        size_t length = end ? (size_t)(end - dir) : strlen(dir);
        if (length > 0 && length + strlen(name) + 2 < sizeof candidate) {
            snprintf(candidate, sizeof candidate, "%.*s/%s", (int)length, dir, name);
            if (access(candidate, X_OK) == 0) return 1;
        }
        if (!end) break;
        dir = end + 1;
    }
    return 0;
}

/* Runs a shell command and appends its stdout; a non-zero exit is an error. */
static dt_status buffer_append_command(byte_buffer *buffer, const char *command) {
    fflush(NULL); /* nothing buffered may be duplicated into the child */
    FILE *pipe = popen(command, "r");
    if (!pipe) return dt_errorf("cannot run '%s': %s", command, strerror(errno));
    dt_status status = buffer_append_stream(buffer, pipe, command);
    int exit_status = pclose(pipe);
    if (status == DT_OK && exit_status != 0) status = dt_errorf("'%s' failed (exit status %d)", command, exit_status);
    return status;
}

/* Appends the KJV (stdout of the bible program); prefix names the preset in errors. */
static dt_status buffer_append_kjv(byte_buffer *buffer, const char *preset) {
    if (!program_on_path("bible"))
        return dt_errorf("preset %s needs the 'bible' program: install Debian's bible-kjv package "
                         "(apt-get install bible-kjv)",
                         preset);
    const size_t before = buffer->size;
    if (buffer_append_command(buffer, "bible \"" KJV_RANGE "\" 2>/dev/null") != DT_OK)
        return dt_error_context("preset %s", preset);
    if (buffer->size - before < 1000000)
        return dt_errorf("preset %s: 'bible \"%s\"' printed only %zu bytes (expected about 4.3 MB)", preset, KJV_RANGE,
                         buffer->size - before);
    return DT_OK;
}

static dt_status corpus_kjv(data_corpus *corpus) {
    byte_buffer buffer = {0};
    if (buffer_append_kjv(&buffer, "kjv") != DT_OK) {
        free(buffer.data);
        return DT_ERR;
    }
    corpus_take(corpus, &buffer);
    corpus->n_files = 1;
    snprintf(corpus->source, sizeof corpus->source, "kjv: stdout of bible \"%s\" (Debian bible-kjv)", KJV_RANGE);
    return DT_OK;
}

/* ---------------------------------------------------------- python tree */

typedef struct {
    char **paths; /* relative to the root */
    size_t count, capacity;
} path_list;

static void path_list_free(path_list *list) {
    for (size_t i = 0; i < list->count; i++)
        free(list->paths[i]);
    free(list->paths);
    memset(list, 0, sizeof *list);
}

static int ends_with(const char *text, const char *suffix) {
    size_t n = strlen(text), m = strlen(suffix);
    return n >= m && strcmp(text + n - m, suffix) == 0;
}

static int excluded_directory(const char *name) {
    return !strcmp(name, "site-packages") || !strcmp(name, "dist-packages") || !strcmp(name, "test") ||
           !strcmp(name, "tests") || ends_with(name, "_test") || ends_with(name, "_tests");
}

/* Adds the *.py files below root/relative (relative is "" for the root itself). */
static dt_status collect_python_files(const char *root, const char *relative, path_list *list) {
    char directory[8192];
    snprintf(directory, sizeof directory, "%s%s%s", root, relative[0] ? "/" : "", relative);
    DIR *dir = opendir(directory);
    if (!dir) return dt_errorf("%s: %s", directory, strerror(errno));
    dt_status status = DT_OK;
    struct dirent *entry;
    while (status == DT_OK && (entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        char child_relative[4096], child_full[8192];
        if ((size_t)snprintf(child_relative, sizeof child_relative, "%s%s%s", relative, relative[0] ? "/" : "", name) >=
            sizeof child_relative)
            continue; /* a path this long is no standard-library module */
        snprintf(child_full, sizeof child_full, "%s/%s", root, child_relative);
        struct stat info;
        if (lstat(child_full, &info) != 0) continue; /* vanished meanwhile */
        if (S_ISDIR(info.st_mode)) {
            if (!excluded_directory(name)) status = collect_python_files(root, child_relative, list);
        } else if (S_ISREG(info.st_mode) && ends_with(name, ".py")) {
            if (list->count == list->capacity) {
                size_t capacity = list->capacity ? 2 * list->capacity : 256;
                char **grown = realloc(list->paths, capacity * sizeof *grown);
                if (!grown) {
                    status = dt_errorf("out of memory listing python files");
                    break;
                }
                list->paths = grown;
                list->capacity = capacity;
            }
            list->paths[list->count] = strdup(child_relative);
            if (!list->paths[list->count])
                status = dt_errorf("out of memory listing python files");
            else
                list->count++;
        }
    }
    closedir(dir);
    return status;
}

static int compare_paths(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int compare_sizes(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

dt_status data_corpus_read_python_tree(data_corpus *corpus, const char *root) {
    memset(corpus, 0, sizeof *corpus);
    struct stat info;
    if (stat(root, &info) != 0 || !S_ISDIR(info.st_mode)) return dt_errorf("%s: not a directory", root);
    path_list list = {0};
    if (collect_python_files(root, "", &list) != DT_OK) {
        path_list_free(&list);
        return DT_ERR;
    }
    if (list.count == 0) {
        path_list_free(&list);
        return dt_errorf("%s: no *.py files found", root);
    }
    qsort(list.paths, list.count, sizeof *list.paths, compare_paths); /* strcmp: bytewise, locale-free */
    byte_buffer buffer = {0};
    for (size_t i = 0; i < list.count; i++) {
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", root, list.paths[i]);
        if (buffer_append_file(&buffer, full) != DT_OK) {
            free(buffer.data);
            path_list_free(&list);
            return DT_ERR;
        }
    }
    corpus_take(corpus, &buffer);
    corpus->n_files = (int64_t)list.count;
    snprintf(corpus->source, sizeof corpus->source,
             "%zu *.py files under %s (sorted by relative path; site-packages, dist-packages and test directories "
             "skipped)",
             list.count, root);
    path_list_free(&list);
    return DT_OK;
}

static dt_status corpus_pycode(data_corpus *corpus) {
    if (!program_on_path("python3")) return dt_errorf("preset pycode needs python3 on PATH");
    byte_buffer buffer = {0};
    if (buffer_append_command(&buffer, PYTHON_STDLIB_COMMAND) != DT_OK) {
        free(buffer.data);
        return dt_error_context("preset pycode: finding the standard library");
    }
    buffer_reserve(&buffer, 0);
    while (buffer.size > 0 && (buffer.data[buffer.size - 1] == '\n' || buffer.data[buffer.size - 1] == '\r'))
        buffer.size--;
    char root[4096];
    snprintf(root, sizeof root, "%.*s", (int)buffer.size, buffer.data ? (const char *)buffer.data : "");
    free(buffer.data);
    if (data_corpus_read_python_tree(corpus, root) != DT_OK) return dt_error_context("preset pycode");
    char detail[sizeof corpus->source];
    snprintf(detail, sizeof detail, "%s", corpus->source);
    /* The prefix is short; %.960s keeps the compiler sure nothing is cut. */
    snprintf(corpus->source, sizeof corpus->source, "pycode: python3 standard library: %.960s", detail);
    return DT_OK;
}

/* ------------------------------------------------------- large preset */

const char *const data_corpus_kernel_code_dirs[] = {
    "kernel",       "mm",          "fs",          "net",           "include",      "lib",
    "block",        "crypto",      "security",    "ipc",           "init",         "virt",
    "io_uring",     "arch/x86",    "drivers/net", "drivers/usb",   "drivers/base", "drivers/block",
    "drivers/char", "drivers/pci", "drivers/tty", "drivers/input", "drivers/md",   "drivers/nvme",
};
const int data_corpus_n_kernel_code_dirs =
    (int)(sizeof data_corpus_kernel_code_dirs / sizeof *data_corpus_kernel_code_dirs);

/* Appends the members of the kernel tarball that make up `part`, streamed
 * through tar in archive order: nothing is unpacked to disk. */
static dt_status buffer_append_kernel_tar(byte_buffer *buffer, const char *archive, data_kernel_part part) {
    if (dt_check_input_file(archive) != DT_OK) return DT_ERR;
    if (strchr(archive, '\'')) return dt_errorf("%s: a path with a single quote is not supported", archive);
    if (strlen(archive) > 4096) return dt_errorf("%.64s...: the tarball's path is longer than 4096 bytes", archive);
    if (!program_on_path("tar") || !program_on_path("xz"))
        return dt_errorf("reading %s needs tar and xz on PATH (apt-get install tar xz-utils)", archive);
    /* GNU tar's inclusion wildcards match '/' too, so DIR/\*.c takes the whole subtree;
     * a pattern that matches nothing makes tar fail, which is an error here. */
    char command[8192];
    int n = snprintf(command, sizeof command, "tar -xJOf '%s' --wildcards", archive);
    if (part == DATA_KERNEL_DOCUMENTATION) {
        n += snprintf(command + n, sizeof command - (size_t)n,
                      " '" DATA_KERNEL_PREFIX "Documentation/*.rst' '" DATA_KERNEL_PREFIX "Documentation/*.txt'");
    } else {
        for (int i = 0; i < data_corpus_n_kernel_code_dirs; i++)
            n += snprintf(command + n, sizeof command - (size_t)n, " '" DATA_KERNEL_PREFIX "%s/*.[ch]'",
                          data_corpus_kernel_code_dirs[i]);
    }
    snprintf(command + n, sizeof command - (size_t)n, " 2>/dev/null");
    if (buffer_append_command(buffer, command) != DT_OK)
        return dt_error_context("%s: reading the kernel %s (is it the linux-source-6.1 tarball?)", archive,
                                part == DATA_KERNEL_DOCUMENTATION ? "Documentation" : "sources");
    return DT_OK;
}

dt_status data_corpus_read_kernel_tar(data_corpus *corpus, const char *archive, data_kernel_part part) {
    memset(corpus, 0, sizeof *corpus);
    byte_buffer buffer = {0};
    if (buffer_append_kernel_tar(&buffer, archive, part) != DT_OK) {
        free(buffer.data);
        return DT_ERR;
    }
    corpus_take(corpus, &buffer);
    corpus->n_files = 1;
    snprintf(corpus->source, sizeof corpus->source, "kernel %s of %.900s",
             part == DATA_KERNEL_DOCUMENTATION ? "Documentation" : "sources", archive);
    return DT_OK;
}

/* Appends the decompressed GCIDE dictionary (dictzip is gzip-compatible). */
static dt_status buffer_append_gcide(byte_buffer *buffer, const char *path) {
    if (dt_check_input_file(path) != DT_OK) return DT_ERR;
    if (strchr(path, '\'')) return dt_errorf("%s: a path with a single quote is not supported", path);
    if (!program_on_path("gzip")) return dt_errorf("reading %s needs gzip on PATH (apt-get install gzip)", path);
    char command[4200];
    snprintf(command, sizeof command, "gzip -dc '%s'", path);
    return buffer_append_command(buffer, command);
}

dt_status data_corpus_read_large(data_corpus *corpus, const char *kernel_tarball, const char *gcide_dict) {
    memset(corpus, 0, sizeof *corpus);
    struct stat info;
    if (stat(kernel_tarball, &info) != 0)
        return dt_errorf("preset large needs %s: install Debian's linux-source-6.1 package "
                         "(apt-get install linux-source-6.1)",
                         kernel_tarball);
    if (stat(gcide_dict, &info) != 0)
        return dt_errorf("preset large needs %s: install Debian's dict-gcide package (apt-get install dict-gcide)",
                         gcide_dict);
    byte_buffer buffer = {0};
    /* Prose first, then code: the block split takes validation text from every twentieth of the corpus. */
    size_t sizes[4] = {0};
    dt_status status = buffer_append_kjv(&buffer, "large");
    sizes[0] = buffer.size;
    if (status == DT_OK) status = buffer_append_gcide(&buffer, gcide_dict);
    sizes[1] = buffer.size;
    if (status == DT_OK) status = buffer_append_kernel_tar(&buffer, kernel_tarball, DATA_KERNEL_DOCUMENTATION);
    sizes[2] = buffer.size;
    if (status == DT_OK) status = buffer_append_kernel_tar(&buffer, kernel_tarball, DATA_KERNEL_CODE);
    sizes[3] = buffer.size;
    if (status != DT_OK) {
        free(buffer.data);
        return dt_error_context("preset large");
    }
    corpus_take(corpus, &buffer);
    corpus->n_files = 4;
    snprintf(corpus->source, sizeof corpus->source,
             "large: KJV (bible-kjv, %zu bytes) + GCIDE (%s, %zu bytes) + kernel Documentation *.rst/*.txt (%zu "
             "bytes) + kernel *.c/*.h of %d directories (%zu bytes), from %s",
             sizes[0], gcide_dict, sizes[1] - sizes[0], sizes[2] - sizes[1], data_corpus_n_kernel_code_dirs,
             sizes[3] - sizes[2], kernel_tarball);
    return DT_OK;
}

/* ------------------------------------------------------- BPE sample */

dt_status data_corpus_sample_blocks(const uint8_t *bytes, size_t n_bytes, size_t sample_bytes, uint64_t seed,
                                    uint8_t **sample, size_t *n_sample) {
    *sample = NULL;
    *n_sample = 0;
    const size_t block = DATA_SAMPLE_BLOCK;
    const size_t n_blocks = (n_bytes + block - 1) / block;
    size_t take = (sample_bytes + block - 1) / block;
    if (take > n_blocks) take = n_blocks;
    size_t *order = malloc((n_blocks > 0 ? n_blocks : 1) * sizeof *order);
    uint8_t *out = malloc((take * block < n_bytes ? take * block : n_bytes) + 1);
    if (!order || !out) {
        free(order);
        free(out);
        return dt_errorf("out of memory sampling %zu bytes", sample_bytes);
    }
    /* The first `take` entries of a seeded Fisher-Yates shuffle, then back in corpus order. */
    for (size_t i = 0; i < n_blocks; i++)
        order[i] = i;
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (size_t i = 0; i < take; i++) {
        size_t j = i + (size_t)dt_rng_below(&rng, (uint64_t)(n_blocks - i));
        size_t swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    qsort(order, take, sizeof *order, compare_sizes);
    size_t used = 0;
    for (size_t i = 0; i < take; i++) {
        size_t begin = order[i] * block, length = n_bytes - begin < block ? n_bytes - begin : block;
        memcpy(out + used, bytes + begin, length);
        used += length;
    }
    out[used] = '\0';
    free(order);
    *sample = out;
    *n_sample = used;
    return DT_OK;
}

dt_status data_corpus_preset(data_corpus *corpus, const char *name) {
    memset(corpus, 0, sizeof *corpus);
    if (!strcmp(name, "kjv")) return corpus_kjv(corpus);
    if (!strcmp(name, "pycode")) return corpus_pycode(corpus);
    if (!strcmp(name, "large")) return data_corpus_read_large(corpus, KERNEL_TARBALL, GCIDE_DICT);
    return dt_errorf("unknown preset '%s' (expected kjv, pycode or large)", name);
}

/* ------------------------------------------------------------------ split */

int64_t data_corpus_split_parts(size_t n_bytes) {
    size_t parts = n_bytes / (64 * 1024);
    return parts < 1 ? 1 : parts > 20 ? 20 : (int64_t)parts;
}

/* floor(n * p / parts) without overflow. */
static size_t part_boundary(size_t n, int64_t p, int64_t parts) {
    return n / (size_t)parts * (size_t)p + n % (size_t)parts * (size_t)p / (size_t)parts;
}

/* The first line start at or after pos (n when no line starts there). */
static size_t line_start_from(const uint8_t *bytes, size_t n, size_t pos) {
    if (pos == 0 || pos >= n) return pos < n ? pos : n;
    if (bytes[pos - 1] == '\n') return pos;
    const uint8_t *newline = memchr(bytes + pos, '\n', n - pos);
    return newline ? (size_t)(newline + 1 - bytes) : n;
}

dt_status data_corpus_split(const uint8_t *bytes, size_t n_bytes, double val_fraction, uint8_t **train, size_t *n_train,
                            uint8_t **val, size_t *n_val) {
    *train = *val = NULL;
    *n_train = *n_val = 0;
    if (!(val_fraction > 0.0 && val_fraction < 1.0)) /* also rejects NaN */
        return dt_errorf("val fraction %g is outside (0, 1)", val_fraction);
    uint8_t *train_bytes = malloc(n_bytes + 1), *val_bytes = malloc(n_bytes + 1);
    if (!train_bytes || !val_bytes) {
        free(train_bytes);
        free(val_bytes);
        return dt_errorf("out of memory splitting %zu bytes", n_bytes);
    }
    int64_t parts = data_corpus_split_parts(n_bytes);
    size_t train_used = 0, val_used = 0;
    for (int64_t p = 0; p < parts; p++) {
        /* Part boundaries and the val cut sit at line starts, so both splits hold whole lines where possible. */
        size_t begin = line_start_from(bytes, n_bytes, part_boundary(n_bytes, p, parts));
        size_t end = line_start_from(bytes, n_bytes, part_boundary(n_bytes, p + 1, parts));
        size_t val_length = (size_t)(val_fraction * (double)(end - begin) + 0.5);
        size_t cut = end - (val_length < end - begin ? val_length : end - begin);
        size_t cut_at_line = line_start_from(bytes, n_bytes, cut);
        if (cut_at_line < end) cut = cut_at_line; /* unless that would leave this part no val at all */
        memcpy(train_bytes + train_used, bytes + begin, cut - begin);
        train_used += cut - begin;
        memcpy(val_bytes + val_used, bytes + cut, end - cut);
        val_used += end - cut;
    }
    if (train_used == 0 || val_used == 0) {
        free(train_bytes);
        free(val_bytes);
        return dt_errorf("a corpus of %zu bytes with val fraction %g gives an empty %s split", n_bytes, val_fraction,
                         train_used == 0 ? "train" : "val");
    }
    train_bytes[train_used] = val_bytes[val_used] = '\0';
    *train = train_bytes;
    *n_train = train_used;
    *val = val_bytes;
    *n_val = val_used;
    return DT_OK;
}

/* Numbered checkpoints and their rotation (see checkpoint_rotation.h). */
#include "train/checkpoint_rotation.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The step of a name "checkpoint-<digits>.h5", or -1. */
static int64_t numbered_step(const char *name) {
    static const char prefix[] = "checkpoint-", suffix[] = ".h5";
    size_t n = strlen(name), p = sizeof prefix - 1, s = sizeof suffix - 1;
    if (n <= p + s || strncmp(name, prefix, p) || strcmp(name + n - s, suffix)) return -1;
    int64_t step = 0;
    for (size_t i = p; i < n - s; i++) {
        if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return -1;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

static dt_status copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) return dt_errorf("%s: cannot open (%s)", from, strerror(errno));
    FILE *out = fopen(to, "wb");
    if (!out) {
        fclose(in);
        return dt_errorf("%s: cannot create (%s)", to, strerror(errno));
    }
    char buffer[1 << 16];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buffer, 1, sizeof buffer, in)) > 0)
        bad = fwrite(buffer, 1, n, out) != n;
    bad = bad || ferror(in);
    fclose(in);
    if (fclose(out) != 0) bad = 1;
    return bad ? dt_errorf("%s: cannot copy %s into it", to, from) : DT_OK;
}

static int descending(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Removes the numbered checkpoints of dir older than its keep_last newest. */
static dt_status prune(const char *dir, int64_t keep_last) {
    DIR *d = opendir(dir);
    if (!d) return dt_errorf("%s: cannot list (%s)", dir, strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, capacity = 0;
    struct dirent *entry;
    dt_status status = DT_OK;
    while ((entry = readdir(d)) != NULL) {
        int64_t step = numbered_step(entry->d_name);
        if (step < 0) continue;
        if (n == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            int64_t *grown = realloc(steps, capacity * sizeof *steps);
            if (!grown) {
                status = dt_errorf("%s: out of memory", dir);
                break;
            }
            steps = grown;
        }
        steps[n++] = step;
    }
    closedir(d);
    if (status == DT_OK && n > (size_t)keep_last) {
        qsort(steps, n, sizeof *steps, descending);
        for (size_t i = (size_t)keep_last; i < n && status == DT_OK; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/checkpoint-%08lld.h5", dir, (long long)steps[i]);
            if (unlink(path) != 0 && errno != ENOENT)
                status = dt_errorf("%s: cannot remove an old checkpoint (%s)", path, strerror(errno));
        }
    }
    free(steps);
    return status;
}

dt_status train_checkpoint_rotate(const char *dir, const char *latest, int64_t step, int64_t keep_last) {
    if (keep_last <= 0) return DT_OK;
    char numbered[4096], tmp[4200];
    snprintf(numbered, sizeof numbered, "%s/checkpoint-%08lld.h5", dir, (long long)step);
    snprintf(tmp, sizeof tmp, "%s.tmp", numbered);
    unlink(tmp);
    /* checkpoint.h5 is replaced by a rename at the next save, so a link keeps this step's file. */
    if (link(latest, tmp) != 0 && copy_file(latest, tmp) != DT_OK) {
        unlink(tmp);
        return DT_ERR;
    }
    if (rename(tmp, numbered) != 0) {
        dt_status status = dt_errorf("cannot rename %s to %s (%s)", tmp, numbered, strerror(errno));
        unlink(tmp);
        return status;
    }
    return prune(dir, keep_last);
}

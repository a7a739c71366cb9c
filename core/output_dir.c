/* dt_make_dirs, dt_make_output_parent (output_dir.h). */
#include "core/output_dir.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dt_status dt_make_dirs(const char *dir) {
    char *path = strdup(dir);
    if (!path) return dt_errorf("%s: out of memory", dir);
    dt_status status = DT_OK;
    /* Each prefix ending before a '/', then the whole path; an existing
     * component is fine here, stat below says whether the last one is a
     * directory. */
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            status = dt_errorf("%s: cannot create directory (%s)", path, strerror(errno));
            break;
        }
        *p = saved;
        if (saved == '\0') break;
    }
    struct stat info;
    if (status == DT_OK && (stat(dir, &info) != 0 || !S_ISDIR(info.st_mode)))
        status = dt_errorf("%s: exists and is not a directory", dir);
    free(path);
    return status;
}

dt_status dt_make_output_parent(const char *option, const char *file_path) {
    char *copy = strdup(file_path);
    if (!copy) return dt_errorf("%s '%s': out of memory", option, file_path);
    const char *dir = dirname(copy); /* "." for a bare file name */
    dt_status status = DT_OK;
    if (dt_make_dirs(dir) != DT_OK)
        status = dt_error_context("%s '%s'", option, file_path);
    else if (access(dir, W_OK | X_OK) != 0)
        status = dt_errorf("%s '%s': directory '%s' is not writable", option, file_path, dir);
    free(copy);
    return status;
}

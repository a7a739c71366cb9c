/* dt_check_input_file (input_file.h). */
#include "core/input_file.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

dt_status dt_check_input_file(const char *path) {
    struct stat info;
    if (stat(path, &info) != 0) return dt_errorf("%s: %s", path, strerror(errno));
    if (S_ISREG(info.st_mode)) return DT_OK;
    const char *what = S_ISDIR(info.st_mode)    ? "a directory"
                       : S_ISFIFO(info.st_mode) ? "a FIFO (pipe)"
                       : S_ISCHR(info.st_mode)  ? "a character device"
                       : S_ISBLK(info.st_mode)  ? "a block device"
                       : S_ISSOCK(info.st_mode) ? "a socket"
                                                : "not a regular file";
    return dt_errorf("%s: is %s, not a regular file (write the data to a file first)", path, what);
}

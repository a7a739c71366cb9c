/* The one check every input file passes before it is opened: it exists and
 * is a regular file. A FIFO, a terminal or a device (/dev/zero) would block
 * or never end (issue 18: `train --config FIFO` waited forever and ignored
 * SIGTERM), and a directory is never a file; all are refused with one line
 * naming the path. */
#ifndef CORE_INPUT_FILE_H
#define CORE_INPUT_FILE_H

#include "core/error.h"

/* DT_OK for a regular file (after symlinks); otherwise an error naming path
 * and what it is. */
dt_status dt_check_input_file(const char *path);

#endif

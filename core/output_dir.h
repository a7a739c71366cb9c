/* Where a command writes: a directory made with its parents (`mkdir -p`),
 * so `train --out runs/a/b` and `prepare --out data/x.h5` work on a fresh
 * tree, as researchers expect of a tool that writes results. A component
 * that exists and is not a directory, or a directory that cannot be
 * written, is one line naming the path. */
#ifndef CORE_OUTPUT_DIR_H
#define CORE_OUTPUT_DIR_H

#include "core/error.h"

/* Makes dir and every missing parent (mode 0777 before the umask); DT_OK
 * when dir is then a directory, else an error naming the first component
 * that could not be made ("a/b: cannot create directory (Not a directory)"). */
dt_status dt_make_dirs(const char *dir);

/* For an output file: makes the directory file_path is in (dt_make_dirs)
 * and checks it is writable; commands call it before a long read of their
 * input (a prepare of the large corpus works a minute before it writes).
 * option names the flag in the error ("--out 'a/b.h5': ..."). */
dt_status dt_make_output_parent(const char *option, const char *file_path);

#endif

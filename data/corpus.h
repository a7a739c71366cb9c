/* Raw corpora for `dbranch prepare`: input files, the two default presets,
 * and the train/val split of the raw bytes.
 *
 * Presets:
 * - kjv: the King James Bible, the stdout of Debian's bible-kjv program run as
 *   `bible "Genesis 1:1-Revelation 22:21"` (4.3 MB).
 * - pycode: every *.py file under the installed python3's standard library
 *   (sysconfig's 'stdlib' path), skipping site-packages, dist-packages and test
 *   directories, in bytewise order of relative path, concatenated.
 *
 * The split is by contiguous blocks of text (see data_corpus_split), made
 * before tokenization so that BPE can be learned on the training part only. */
#ifndef DATA_CORPUS_H
#define DATA_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct data_corpus {
    uint8_t *bytes; /* [n_bytes], malloc'ed, also NUL-terminated for convenience */
    size_t n_bytes;
    int64_t n_files;   /* files read (1 for a program's output) */
    char source[1024]; /* one line naming what was read, stored in the token file */
} data_corpus;

/* Concatenates the files in the given order; a missing or unreadable file is an error naming it. */
dt_status data_corpus_read_files(data_corpus *corpus, const char *const *paths, int n_paths);
/* Reads every *.py file below root (regular files, symlinks not followed), skipping
 * directories named site-packages, dist-packages, test, tests, *_test or *_tests;
 * files are concatenated in bytewise (strcmp) order of their path relative to root. */
dt_status data_corpus_read_python_tree(data_corpus *corpus, const char *root);
/* The presets above. The name must be "kjv" or "pycode". */
dt_status data_corpus_preset(data_corpus *corpus, const char *name);
void data_corpus_free(data_corpus *corpus);

/* Train/val split of raw bytes by contiguous blocks: the corpus is cut into
 * P = clamp(n_bytes / 64 KiB, 1, 20) equal parts (boundaries moved forward to
 * the next line start); the last val_fraction of each part (its cut also moved
 * forward to a line start when one exists inside the part) goes to val, the
 * rest to train; each split is the concatenation of its pieces in corpus
 * order. val_fraction must be in (0, 1); both splits must be non-empty.
 * *train and *val are malloc'ed (caller frees). */
dt_status data_corpus_split(const uint8_t *bytes, size_t n_bytes, double val_fraction, uint8_t **train, size_t *n_train,
                            uint8_t **val, size_t *n_val);
/* The number of parts data_corpus_split uses for n_bytes. */
int64_t data_corpus_split_parts(size_t n_bytes);

#endif

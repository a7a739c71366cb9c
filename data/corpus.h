/* Raw corpora for `dbranch prepare`: input files, the presets, the seeded
 * block sample for BPE training, and the train/val split of the raw bytes.
 *
 * Presets:
 * - kjv: the King James Bible, the stdout of Debian's bible-kjv program run as
 *   `bible "Genesis 1:1-Revelation 22:21"` (4.3 MB).
 * - pycode: every *.py file under the installed python3's standard library
 *   (sysconfig's 'stdlib' path), skipping site-packages, dist-packages and test
 *   directories, in bytewise order of relative path, concatenated.
 * - large (issue 16: at least 100M BPE tokens, prose and code), in this order:
 *   the KJV as above (4.3 MB); the GNU Collaborative International Dictionary
 *   of English (Debian dict-gcide: /usr/share/dictd/gcide.dict.dz through
 *   `gzip -dc`, dictd markup kept, 40 MB); the Linux kernel's Documentation
 *   *.rst and *.txt (29 MB); the kernel's *.c and *.h files below the
 *   directories of data_corpus_kernel_code_dirs (324 MB: core kernel, mm, fs,
 *   net, include, lib, x86, and the common drivers; drivers/gpu, whose
 *   generated register headers are 470 MB of one kind of line, and the other
 *   architectures are left out). The kernel parts are streamed from Debian
 *   linux-source-6.1's /usr/src/linux-source-6.1.tar.xz by `tar -xJO` in
 *   archive order (nothing is unpacked to disk; about 25 s of xz each).
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
/* The kernel tarball's parts for preset large. Members are named
 * DATA_KERNEL_PREFIX + path; DATA_KERNEL_CODE takes DIR/ *.c and DIR/ *.h at
 * any depth below each of the directories listed, DATA_KERNEL_DOCUMENTATION
 * Documentation/ *.rst and *.txt at any depth; the bytes are the members'
 * contents concatenated in archive order. A part that matches no member, or
 * an archive tar cannot read, is an error naming the archive. */
#define DATA_KERNEL_PREFIX "linux-source-6.1/"
typedef enum { DATA_KERNEL_DOCUMENTATION = 0, DATA_KERNEL_CODE = 1 } data_kernel_part;
extern const char *const data_corpus_kernel_code_dirs[];
extern const int data_corpus_n_kernel_code_dirs;
dt_status data_corpus_read_kernel_tar(data_corpus *corpus, const char *archive, data_kernel_part part);
/* Preset large from these two files (the preset passes Debian's paths,
 * /usr/src/linux-source-6.1.tar.xz and /usr/share/dictd/gcide.dict.dz); a
 * missing one is one line naming it, its package and the apt-get command,
 * before anything is read. */
dt_status data_corpus_read_large(data_corpus *corpus, const char *kernel_tarball, const char *gcide_dict);
/* The presets above. The name must be "kjv", "pycode" or "large"; a missing
 * Debian package is one line naming it and the apt-get command. */
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

/* A seeded sample of about sample_bytes for learning BPE merges on a corpus
 * too large to train on whole: the text is cut into DATA_SAMPLE_BLOCK-byte
 * blocks, ceil(sample_bytes / block) of them are drawn without replacement
 * (a seeded Fisher-Yates prefix, core/rng.h) and concatenated in corpus
 * order; all of the text when sample_bytes covers it. *sample is malloc'ed
 * (NUL-terminated). A block edge may cut one pre-split chunk in two: a few
 * hundred chunks in a sample of millions. */
enum { DATA_SAMPLE_BLOCK = 64 * 1024 };
dt_status data_corpus_sample_blocks(const uint8_t *bytes, size_t n_bytes, size_t sample_bytes, uint64_t seed,
                                    uint8_t **sample, size_t *n_sample);

#endif

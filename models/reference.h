/* The reference checker (SPEC §5): load a reference file's model and tokens,
 * run forward + backward, and compare every expected quantity it holds
 * (losses, aux, alpha, both logits, every parameter gradient) under the SPEC
 * tolerances. Shared by `dbranch check-reference` and the test suite, so both
 * judge a file by the same code. */
#ifndef MODEL_REFERENCE_H
#define MODEL_REFERENCE_H

#include "core/error.h"

/* One compared quantity. Pass when max_abs_error <= tolerance * scale. */
typedef struct model_reference_line {
    char name[128];       /* "loss", "logits_primary", "grad layers.0.attn.wq.weight", ... */
    double max_abs_error; /* max over elements of |got - expected| (inf when missing) */
    double scale;         /* what the error is measured against (SPEC §5) */
    double tolerance;     /* relative tolerance: 1e-5 losses, 1e-4 tensors */
    int pass;
    char note[96]; /* why a line failed without numbers ("no /ref/grads entry", ...) or "" */
} model_reference_line;

typedef struct model_reference_report {
    model_reference_line *lines; /* heap array, n_lines entries */
    int n_lines;
    int n_failed;
} model_reference_report;

/* Runs the check of one reference file into *report (free with
 * model_reference_report_free). DT_ERR only when the file cannot be checked
 * at all (missing, not a model, bad /ref/tokens); mismatches are report lines. */
dt_status model_reference_check(const char *path, model_reference_report *report);
void model_reference_report_free(model_reference_report *report);

/* The line as printed by check-reference: name, max abs error, scale, error / scale, PASS/FAIL. */
const char *model_reference_line_format(const model_reference_line *line, char *buf, int buf_size);

#endif

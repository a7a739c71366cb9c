/* Answer accuracy on a record file (data/tokens.h: record_len, answer
 * marks), teacher-forced: the fraction of marked targets the model's
 * prediction (argmax of the primary distribution; of the mixture for a
 * Decode-Branch model) gets right, overall and per position in the record.
 * `dbranch eval` reports it whenever the split has answer marks. */
#ifndef EVAL_ACCURACY_H
#define EVAL_ACCURACY_H

#include <stdint.h>

#include "core/error.h"
#include "data/tokens.h"
#include "models/model.h"

typedef struct eval_accuracy_result {
    int64_t seq_len;   /* T: positions per window (record_len - 1, or record_len when labelled, unless shorter) */
    int64_t n_windows; /* records evaluated */
    int64_t n_answers; /* marked targets scored */
    int64_t n_correct;
    int64_t *per_position_answers; /* [T] marked targets of input position t (record index t + 1; t if labelled) */
    int64_t *per_position_correct; /* [T] */
} eval_accuracy_result;

/* n_windows 0: every record of the split; seq_len 0: min(block_size, the positions of a record). */
dt_status eval_accuracy_run(model *m, data_tokens *data, data_split split, int64_t n_windows, int64_t seq_len,
                            eval_accuracy_result *result);
void eval_accuracy_result_free(eval_accuracy_result *result);

#endif

/* The decode weight view (decode_weights.h): the bf16 copy at the model's
 * offsets, and the in-place rounding of the float32 tensors it twins. */
#include "eval/decode_weights.h"

#include <stdlib.h>
#include <string.h>

#include "eval/matvec.h"
#include "kernels/type_traits.h"

dt_status eval_decode_weights_parse(const char *name, dt_dtype *dtype) {
    if (!strcmp(name, "fp32")) {
        *dtype = DT_F32;
        return DT_OK;
    }
    if (!strcmp(name, "bf16")) {
        *dtype = DT_BF16;
        return DT_OK;
    }
    return dt_errorf("--weights %s: expected fp32 or bf16", name);
}

const char *eval_decode_weights_name(dt_dtype dtype) { return dtype == DT_BF16 ? "bf16" : "fp32"; }

dt_status eval_decode_weights_init(eval_decode_weights *w, model *m, dt_dtype dtype) {
    memset(w, 0, sizeof *w);
    if (dtype != DT_F32 && dtype != DT_BF16) return dt_errorf("decode weights: unsupported type %d", (int)dtype);
    w->dtype = dtype;
    w->params = m->params_memory;
    w->n_floats = m->n_floats;
    if (dtype == DT_F32) return DT_OK;
    uint16_t *copy = calloc((size_t)(m->n_floats > 0 ? m->n_floats : 1), sizeof(uint16_t));
    w->spans = calloc((size_t)(m->n_params > 0 ? m->n_params : 1), sizeof *w->spans);
    if (!copy || !w->spans) {
        free(copy);
        free(w->spans);
        w->spans = NULL;
        return dt_errorf("decode weights: out of memory for a bf16 copy of %lld parameters", (long long)m->n_floats);
    }
    for (int i = 0; i < m->n_params; i++) {
        const model_param *p = &m->params[i];
        if (!p->is_matrix && !p->is_embedding) continue; /* vectors stay float32 */
        float *x = p->tensor->data;
        const int64_t begin = x - m->params_memory, row = p->tensor->shape[p->tensor->ndim - 1];
        eval_matvec_bf16_pack(copy + begin, x, p->tensor->size / row, row);
        for (int64_t j = 0; j < p->tensor->size; j++) /* the float32 copy holds the same bf16 values */
            x[j] = k_bf16_to_float(k_bf16_from_float(x[j]));
        w->spans[w->n_spans++] = (eval_decode_span){begin, begin + p->tensor->size, row};
    }
    w->bf16 = copy;
    return DT_OK;
}

const void *eval_decode_weights_find(const eval_decode_weights *w, const float *weight, int64_t N, int64_t K,
                                     dt_dtype *dtype) {
    *dtype = DT_F32;
    if (!w || w->dtype != DT_BF16 || w->n_spans == 0 || !weight || weight < w->params ||
        weight >= w->params + w->n_floats)
        return weight;
    const int64_t offset = weight - w->params;
    int lo = 0, hi = w->n_spans; /* the last span starting at or before offset */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (w->spans[mid].begin <= offset)
            lo = mid;
        else
            hi = mid;
    }
    const eval_decode_span *span = &w->spans[lo];
    if (offset < span->begin || K != span->row || (offset - span->begin) % K != 0 || offset + N * K > span->end)
        return weight; /* not whole packed rows: the float32 weight (the same values) */
    *dtype = DT_BF16;
    return w->bf16 + offset;
}

void eval_decode_weights_free(eval_decode_weights *w) {
    free((void *)w->bf16);
    free(w->spans);
    memset(w, 0, sizeof *w);
}

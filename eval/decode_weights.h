/* The weights a decode session multiplies by, with their element type: the
 * model's own float32 matrices, or a bfloat16 copy made once at load
 * (`--weights bf16` of generate, eval and bench decode).
 *
 * Why a copy beside the model, at the model's offsets: every product of the
 * decode engine (and of the FFN kinds' decode forms) names its weight by a
 * pointer into model.params_memory; the view maps that pointer to the same
 * offset of the bf16 copy, so no caller changes and any matrix, expert slice
 * or head has its bf16 twin. Decode is bound by memory traffic, and a bf16
 * step streams half the bytes of every matrix.
 *
 * What is converted: every matrix and embedding table (model_param is_matrix
 * or is_embedding: attention and FFN matrices, routers, expert stacks,
 * tok_emb / lm_head, pos_emb, branch.tok_emb), rounded to nearest even
 * (k_bf16_from_float), each row (the tensor's last dimension) packed for
 * the matvec kernels (eval_matvec_bf16_pack, eval/matvec.h). Vectors (norm weights, biases, coupling vectors,
 * attn_res route queries, prod_norm) stay float32. The model's float32
 * copies of the converted tensors are rounded in place to the same values, so
 * everything that still reads float32 (the prefill's BLIS GEMMs, embedding
 * rows) computes with the same bf16 weights: the session is one bf16-weight
 * model, not a mixture. The float32 copy thus stays in memory (6 bytes per
 * converted parameter in all); a prefill that widened bf16 panels itself
 * could drop it. */
#ifndef EVAL_DECODE_WEIGHTS_H
#define EVAL_DECODE_WEIGHTS_H

#include <stdint.h>

#include "core/error.h"
#include "core/tensor.h"
#include "models/model.h"

/* One converted tensor: floats [begin, end) of params_memory, rows of `row` elements. */
typedef struct eval_decode_span {
    int64_t begin, end, row;
} eval_decode_span;

typedef struct eval_decode_weights {
    dt_dtype dtype;          /* DT_F32: the model's weights as they are; DT_BF16: the copy below */
    const float *params;     /* the model's params_memory [n_floats] */
    int64_t n_floats;        /* its length */
    const uint16_t *bf16;    /* [n_floats] bf16 twins of the converted tensors (zero elsewhere); NULL for DT_F32 */
    eval_decode_span *spans; /* [n_spans] the converted tensors, by increasing offset */
    int n_spans;
} eval_decode_weights;

/* Makes the view for dtype DT_F32 (nothing copied) or DT_BF16 (rounds m's
 * matrices and embedding tables in place and builds the copy). */
dt_status eval_decode_weights_init(eval_decode_weights *w, model *m, dt_dtype dtype);
void eval_decode_weights_free(eval_decode_weights *w);

/* "fp32" or "bf16" (an error naming the word otherwise); the inverse below. */
dt_status eval_decode_weights_parse(const char *name, dt_dtype *dtype);
const char *eval_decode_weights_name(dt_dtype dtype);

/* Where the view keeps weight [N,K] (a pointer into the model), and in what
 * type: the packed bf16 twin when the weight is whole rows of K elements of
 * a converted tensor, else the float32 weight itself. */
const void *eval_decode_weights_find(const eval_decode_weights *w, const float *weight, int64_t N, int64_t K,
                                     dt_dtype *dtype);

#endif

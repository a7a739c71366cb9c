/* Text generation from a model: prefill the prompt, then sample each next
 * token from the model's distribution (the Decode-Branch mixture
 * r = alpha p + (1 - alpha) q for a branch model, SPEC §2) and feed it back,
 * on the decode engine. */
#ifndef EVAL_GENERATE_H
#define EVAL_GENERATE_H

#include <stdint.h>

#include "core/error.h"
#include "core/rng.h"
#include "eval/decode.h"
#include "models/model.h"

typedef struct eval_generate_options {
    int64_t n_tokens;        /* tokens to produce */
    double temperature;      /* 0: greedy (argmax of the distribution) */
    int64_t top_k;           /* 0: no restriction; K: sample among the K most likely */
    uint64_t seed;
    eval_decode_mode mode;   /* GROUPED by default; BASELINE samples from the primary alone */
} eval_generate_options;

eval_generate_options eval_generate_default_options(void);

/* Picks a token from probs [V]: at temperature 0 the most likely (lowest id on
 * ties); otherwise a draw from probs^(1/temperature), renormalised over the
 * top_k most likely tokens (all when top_k is 0 or >= V).
 * index [V] and weight [V] are scratch. */
int32_t eval_sample(const float *probs, int64_t V, double temperature, int64_t top_k, dt_rng *rng,
                    int32_t *index, float *weight);

/* Generates options->n_tokens tokens after prompt [n_prompt] into
 * out [n_tokens] (*n_out = n_tokens on success). The model sees at most
 * block_size positions: a longer prompt keeps its last block_size tokens, and
 * when the KV cache is full the context slides: the last block_size / 2 tokens
 * are prefilled again and decoding continues from there. */
dt_status eval_generate(const model *m, const int32_t *prompt, int64_t n_prompt, const eval_generate_options *options,
                        int32_t *out, int64_t *n_out);

#endif

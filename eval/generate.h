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

/* Where the time of a generation went (llama.cpp's two timing lines). */
typedef struct eval_generate_timing {
    double prompt_seconds; /* the prompt's prefill */
    int64_t prompt_tokens; /* tokens prefilled (the prompt, cut to block_size) */
    double eval_seconds;   /* everything after it: decode steps, context slides, sampling */
    int64_t eval_runs;     /* decode steps and slides (n_tokens - 1: the first token comes from the prefill) */
} eval_generate_timing;

typedef struct eval_generate_options {
    int64_t n_tokens;   /* tokens to produce */
    double temperature; /* 0: greedy (argmax of the distribution) */
    int64_t top_k;      /* 0: no restriction; K: sample among the K most likely */
    double top_p;       /* 1: no restriction; P in (0, 1): the nucleus (see eval_sample_nucleus) */
    uint64_t seed;
    eval_decode_mode mode;              /* GROUPED by default; BASELINE samples from the primary alone */
    eval_feedback_mode feedback;        /* latent feedback decoding (feedback models; standard by default) */
    eval_generate_timing *timing;       /* filled when not NULL */
    const eval_decode_weights *weights; /* the decode matrices' stored form (NULL: the model's float32) */
} eval_generate_options;

eval_generate_options eval_generate_default_options(void);

/* Picks a token from probs [V]: at temperature 0 the most likely (lowest id on
 * ties); otherwise a draw from probs^(1/temperature), renormalised over the
 * top_k most likely tokens (all when top_k is 0 or >= V).
 * index [V] and weight [V] are scratch. */
int32_t eval_sample(const float *probs, int64_t V, double temperature, int64_t top_k, dt_rng *rng, int32_t *index,
                    float *weight);

/* eval_sample with top-p (nucleus) filtering after the temperature and
 * top-k: the most likely tokens, in descending order (lower id first on
 * ties), up to the first whose cumulative probability reaches top_p of the
 * candidates' total; at least one. top_p >= 1 is eval_sample exactly (the
 * same draws for the same seed). Allocation-free: a heap over index/weight. */
int32_t eval_sample_nucleus(const float *probs, int64_t V, double temperature, int64_t top_k, double top_p, dt_rng *rng,
                            int32_t *index, float *weight);

/* Generates options->n_tokens tokens after prompt [n_prompt] into
 * out [n_tokens] (*n_out = n_tokens on success). The model sees at most
 * block_size positions: a longer prompt keeps its last block_size tokens, and
 * when the KV cache is full the context slides: the last block_size / 2 tokens
 * are prefilled again and decoding continues from there. */
dt_status eval_generate(const model *m, const int32_t *prompt, int64_t n_prompt, const eval_generate_options *options,
                        int32_t *out, int64_t *n_out);

#endif

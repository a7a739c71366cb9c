/* Sampling loop on the decode engine (see generate.h). Everything is
 * allocated before the first token; the loop itself allocates nothing. */
#include "eval/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/topk.h"
#include "models/model_budget.h"

eval_generate_options eval_generate_default_options(void) {
    return (eval_generate_options){
        .n_tokens = 64, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 1337, .mode = EVAL_DECODE_GROUPED};
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether candidate a ranks above b: higher weight, then lower id. */
static int ranks_above(const int32_t *index, const float *weight, int64_t a, int64_t b) {
    return weight[a] > weight[b] || (weight[a] == weight[b] && index[a] < index[b]);
}

static void swap_candidates(int32_t *index, float *weight, int64_t a, int64_t b) {
    int32_t i = index[a];
    index[a] = index[b];
    index[b] = i;
    float w = weight[a];
    weight[a] = weight[b];
    weight[b] = w;
}

/* Restores the heap property (the best candidate on top) below position `at` of a heap of n. */
static void sift_down(int32_t *index, float *weight, int64_t at, int64_t n) {
    for (;;) {
        int64_t best = at, left = 2 * at + 1, right = left + 1;
        if (left < n && ranks_above(index, weight, left, best)) best = left;
        if (right < n && ranks_above(index, weight, right, best)) best = right;
        if (best == at) return;
        swap_candidates(index, weight, at, best);
        at = best;
    }
}

/* The nucleus of the n tempered candidates (total their sum): popped off a
 * heap into the tail of the arrays, best at n - 1, until they hold top_p of
 * the total; returns the first position of the nucleus, which ends at n. */
static int64_t nucleus(int32_t *index, float *weight, int64_t n, double total, double top_p) {
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        sift_down(index, weight, i, n);
    double kept = 0.0;
    int64_t heap = n;
    while (heap > 0 && (heap == n || kept < top_p * total)) {
        kept += weight[0];
        swap_candidates(index, weight, 0, heap - 1);
        heap--;
        sift_down(index, weight, 0, heap);
    }
    return heap;
}

int32_t eval_sample(const float *probs, int64_t V, double temperature, int64_t top_k, dt_rng *rng, int32_t *index,
                    float *weight) {
    return eval_sample_nucleus(probs, V, temperature, top_k, 1.0, rng, index, weight);
}

// probs [V]; index, weight [V] scratch
int32_t eval_sample_nucleus(const float *probs, int64_t V, double temperature, int64_t top_k, double top_p, dt_rng *rng,
                            int32_t *index, float *weight) {
    if (temperature <= 0.0) { /* greedy: first maximum, so ties go to the lower id */
        int32_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (probs[v] > probs[best]) best = (int32_t)v;
        return best;
    }
    int64_t n = V;
    if (top_k > 0 && top_k < V) {
        k_topk(index, weight, probs, 1, V, top_k);
        n = top_k;
    } else {
        for (int64_t v = 0; v < V; v++) {
            index[v] = (int32_t)v;
            weight[v] = probs[v];
        }
    }
    /* probs^(1/T), scaled by the largest so no power underflows to 0 needlessly */
    double max = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (weight[i] > max) max = weight[i];
    if (!(max > 0.0)) return index[0];
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double w = weight[i] > 0.0f ? exp(log((double)weight[i] / max) / temperature) : 0.0;
        weight[i] = (float)w;
        total += w;
    }
    if (top_p < 1.0) { /* the nucleus, best first */
        int64_t first = nucleus(index, weight, n, total, top_p);
        double kept = 0.0;
        for (int64_t i = n - 1; i >= first; i--)
            kept += weight[i];
        double u = (double)dt_rng_uniform(rng) * kept, cumulative = 0.0;
        for (int64_t i = n - 1; i >= first; i--) {
            cumulative += weight[i];
            if (u < cumulative) return index[i];
        }
        return index[first]; /* u landed on the rounding slack at the top */
    }
    double u = (double)dt_rng_uniform(rng) * total, cumulative = 0.0;
    int32_t last = index[0];
    for (int64_t i = 0; i < n; i++) {
        if (weight[i] <= 0.0f) continue;
        cumulative += weight[i];
        last = index[i];
        if (u < cumulative) return index[i];
    }
    return last; /* u landed on the rounding slack at the top */
}

dt_status eval_generate(const model *m, const int32_t *prompt, int64_t n_prompt, const eval_generate_options *o,
                        int32_t *out, int64_t *n_out) {
    *n_out = 0;
    int64_t V = m->config.vocab_size, block = m->config.block_size;
    if (n_prompt < 1) return dt_errorf("generate: the prompt is empty (it needs at least one token)");
    if (o->n_tokens < 0) return dt_errorf("generate: negative token count %lld", (long long)o->n_tokens);
    if (o->temperature < 0.0 || !isfinite(o->temperature))
        return dt_errorf("generate: temperature %g must be >= 0", o->temperature);
    if (o->top_k < 0) return dt_errorf("generate: top_k %lld must be >= 0", (long long)o->top_k);
    if (!(o->top_p > 0.0 && o->top_p <= 1.0)) return dt_errorf("generate: top_p %g must be in (0, 1]", o->top_p);
    /* The model sees at most block_size positions: a longer prompt keeps its
     * end, and when the cache fills up the context slides (see below). */
    if (n_prompt > block) {
        prompt += n_prompt - block;
        n_prompt = block;
    }
    int64_t keep = block / 2 > 0 ? block / 2 : 1; /* context kept when the cache is full */
    int64_t n_history = n_prompt + o->n_tokens;

    /* The KV cache of block_size positions on top of the loaded weights. */
    if (model_budget_check(&m->config, MODEL_USE_DECODE, 1, block, 1) != DT_OK) return DT_ERR;
    eval_decode_session s;
    if (eval_decode_init(&s, m, o->mode, n_prompt > keep ? n_prompt : keep) != DT_OK) return DT_ERR;
    s.weights = o->weights;
    s.feedback = o->feedback;
    float *probs = malloc((size_t)V * sizeof(float)), *weight = malloc((size_t)V * sizeof(float));
    int32_t *index = malloc((size_t)V * sizeof(int32_t)), *history = malloc((size_t)n_history * sizeof(int32_t));
    dt_status status = DT_OK;
    if (!probs || !weight || !index || !history) {
        status = dt_errorf("generate: out of memory");
        goto done;
    }
    memcpy(history, prompt, (size_t)n_prompt * sizeof(int32_t));
    dt_rng rng;
    dt_rng_seed(&rng, o->seed);
    double start = now_seconds();
    if ((status = eval_decode_prefill(&s, prompt, n_prompt, NULL)) != DT_OK) goto done;
    if (o->timing) {
        double now = now_seconds();
        *o->timing = (eval_generate_timing){.prompt_seconds = now - start, .prompt_tokens = n_prompt};
        start = now;
    }
    for (int64_t i = 0; i < o->n_tokens; i++) {
        eval_decode_mixture(&s, probs);
        int32_t token = eval_sample_nucleus(probs, V, o->temperature, o->top_k, o->top_p, &rng, index, weight);
        out[(*n_out)++] = token;
        history[n_prompt + i] = token;
        if (i + 1 == o->n_tokens) break;
        if (s.pos + 1 < s.n_pos_max) {
            status = eval_decode_step(&s, token);
        } else { /* cache full: restart from the last `keep` tokens (a sliding context) */
            status = eval_decode_prefill(&s, history + n_prompt + i + 1 - keep, keep, NULL);
        }
        if (status != DT_OK) goto done;
        if (o->timing) o->timing->eval_runs++;
    }
    if (o->timing) o->timing->eval_seconds = now_seconds() - start;
done:
    eval_decode_free(&s);
    free(probs);
    free(weight);
    free(index);
    free(history);
    return status;
}

/* The autograd tape: a record of the ops run since the last reset, walked in
 * reverse by ag_backward().
 *
 * Ownership: everything an op creates (output tensors, saved statistics, the
 * node itself, activation gradients) comes from the context's arena and dies
 * at ag_reset(). Parameters are heap tensors (dt_tensor_new) with
 * requires_grad = 1 and a persistent grad buffer; their gradients accumulate
 * across backward calls until the caller zeroes them (gradient accumulation).
 *
 * Gradient memory: the gradient of an op's output is needed only until that
 * op's backward has run, so ag_backward hands each such buffer back (the
 * output's grad becomes NULL) and ag_grad reuses it for a later one: a step
 * holds the saved activations plus a few gradient buffers at a time, not a
 * gradient for every activation. Leaves (parameters, and arena tensors no op
 * produced) keep their gradients.
 *
 * Errors: an op given a bad shape returns NULL and records a message; an op
 * given a NULL input returns NULL without overwriting the message, so a whole
 * forward pass can be written without checks and tested once at the end. */
#ifndef AG_TAPE_H
#define AG_TAPE_H

#include <stdint.h>

#include "core/arena.h"
#include "core/tensor.h"
#include "kernels/attention_amx.h"

enum { AG_MAX_INPUTS = 6 };

typedef struct ag_node ag_node;
typedef struct ag_ctx ag_ctx;
typedef void (*ag_backward_fn)(ag_ctx *ctx, ag_node *node);

struct ag_node {
    const char *op; /* op name, for debugging and tests */
    ag_backward_fn backward;
    dt_tensor *out;
    dt_tensor *in[AG_MAX_INPUTS]; /* NULL slots allowed (e.g. no bias) */
    void *saved;                  /* op-specific saved state, in the arena */
    int64_t iarg[4];
    float farg[4];
};

/* A gradient buffer in the arena, with the floats it can hold. */
typedef struct ag_grad_buffer {
    float *data;
    int64_t capacity;
} ag_grad_buffer;

struct ag_ctx {
    dt_arena arena;
    ag_node **nodes; /* heap array, grows only while capacity is discovered */
    int n_nodes;
    int cap_nodes;
    int grad_enabled; /* 0: no-grad mode, ops record nothing */
    /* 1: the linear ops' matrix products (forward and backward) round their
     * operands to bfloat16 and sum in float32 (kernels/gemm_bf16.h), reading
     * a weight's bf16 copy (dt_tensor.bf16) when it has one; train.precision
     * = bf16 sets it. Everything else stays float32. */
    int bf16_products;
    /* Under bf16_products, the engine of attention's products
     * (kernels/attention_amx.h): K_BF16_ATTENTION_FP32 (0: the float32
     * kernels), _AMX or _AVX512_BF16, as the caller resolved it (the trainer:
     * train_bf16_attention_engine). An engine this CPU lacks runs float32. */
    k_bf16_attention_engine bf16_attention;
    /* Set by an op's backward that could not finish (its error message says
     * why), and by any allocation that fails while ag_backward runs (a
     * gradient buffer, a temp, arena scratch: the op that asked skips work),
     * so ag_backward fails rather than return partial gradients. Cleared by
     * ag_reset. */
    int backward_failed;
    int in_backward; /* 1 while ag_backward runs its ops */
    /* Arena gradient buffers handed out by ag_grad (live) and handed back by
     * ag_backward (free); heap arrays that grow during the first step only. */
    ag_grad_buffer *live_grads, *free_grads;
    int n_live_grads, n_free_grads, cap_grad_buffers;
};

dt_status ag_ctx_init(ag_ctx *ctx, size_t arena_bytes);
void ag_ctx_free(ag_ctx *ctx);
/* Drops the tape and every arena tensor (start of each step). */
void ag_reset(ag_ctx *ctx);

/* No-grad mode: returns the previous setting so scopes nest. */
int ag_set_grad_enabled(ag_ctx *ctx, int enabled);

/* New arena tensor (uninitialised data, no grad). */
dt_tensor *ag_tensor(ag_ctx *ctx, dt_dtype dtype, int ndim, const int64_t *shape);
/* Arena scratch memory for ops. */
void *ag_scratch(ag_ctx *ctx, size_t bytes);

/* For op implementations: does any input need a gradient (and is grad mode on)? */
int ag_needs_grad(ag_ctx *ctx, dt_tensor *const *inputs, int n_inputs);
/* For op implementations: records a node producing `out` from `inputs`; marks
 * out->requires_grad. Returns the node (to fill saved/iarg/farg) or NULL on OOM. */
ag_node *ag_record(ag_ctx *ctx, const char *op, ag_backward_fn backward, dt_tensor *out, dt_tensor *const *inputs,
                   int n_inputs);
/* For op backward functions: the gradient buffer of t, allocated zeroed in the
 * arena the first time (parameters keep their heap buffer). NULL when t does not
 * require a gradient, so backward code can pass it straight to a kernel. */
float *ag_grad(ag_ctx *ctx, dt_tensor *t);
/* Same, for a backward that can write the gradient instead of adding to it:
 * when t has no gradient yet, the buffer comes back UNINITIALISED with
 * *accumulate = 0 and the caller must overwrite all t->size elements (no
 * zero-fill spent); otherwise *accumulate = 1 and the caller adds as usual. */
float *ag_grad_for_write(ag_ctx *ctx, dt_tensor *t, int *accumulate);
/* Hands t's arena gradient back for reuse now (t->grad becomes NULL): for a
 * backward that borrows a gradient buffer as scratch (e.g. of a tensor it
 * saved). Heap gradients and buffers ag_grad did not hand out are left alone. */
void ag_release_grad(ag_ctx *ctx, dt_tensor *t);
/* Scratch of n floats (uninitialised) from the same pool, for an op that needs
 * a buffer only while it runs (forward or backward): handed back with
 * ag_temp_release, it becomes some later gradient's buffer instead of dead
 * arena space. NULL on out-of-memory (with a message). */
float *ag_temp(ag_ctx *ctx, int64_t n);
void ag_temp_release(ag_ctx *ctx, float *data);

/* Reverse-mode sweep from a scalar (size-1) tensor: seeds d loss = 1 and runs
 * every recorded node's backward in reverse order. */
dt_status ag_backward(ag_ctx *ctx, dt_tensor *loss);

#endif

/* The autograd tape: a record of the ops run since the last reset, walked in
 * reverse by ag_backward().
 *
 * Ownership: everything an op creates (output tensors, saved statistics, the
 * node itself, activation gradients) comes from the context's arena and dies
 * at ag_reset(). Parameters are heap tensors (dt_tensor_new) with
 * requires_grad = 1 and a persistent grad buffer; their gradients accumulate
 * across backward calls until the caller zeroes them (gradient accumulation).
 *
 * Errors: an op given a bad shape returns NULL and records a message; an op
 * given a NULL input returns NULL without overwriting the message, so a whole
 * forward pass can be written without checks and tested once at the end. */
#ifndef AG_TAPE_H
#define AG_TAPE_H

#include <stdint.h>

#include "core/arena.h"
#include "core/tensor.h"

enum { AG_MAX_INPUTS = 6 };

typedef struct ag_node ag_node;
typedef struct ag_ctx ag_ctx;
typedef void (*ag_backward_fn)(ag_ctx *ctx, ag_node *node);

struct ag_node {
    const char *op;                  /* op name, for debugging and tests */
    ag_backward_fn backward;
    dt_tensor *out;
    dt_tensor *in[AG_MAX_INPUTS];    /* NULL slots allowed (e.g. no bias) */
    void *saved;                     /* op-specific saved state, in the arena */
    int64_t iarg[4];
    float farg[4];
};

struct ag_ctx {
    dt_arena arena;
    ag_node **nodes;                 /* heap array, grows only while capacity is discovered */
    int n_nodes;
    int cap_nodes;
    int grad_enabled;                /* 0: no-grad mode, ops record nothing */
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

/* Reverse-mode sweep from a scalar (size-1) tensor: seeds d loss = 1 and runs
 * every recorded node's backward in reverse order. */
dt_status ag_backward(ag_ctx *ctx, dt_tensor *loss);

#endif

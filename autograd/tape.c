/* Tape recording, the reverse sweep, and the reuse of activation-gradient
 * buffers (see tape.h). */
#include "autograd/tape.h"

#include <stdlib.h>
#include <string.h>

dt_status ag_ctx_init(ag_ctx *ctx, size_t arena_bytes) {
    memset(ctx, 0, sizeof *ctx);
    ctx->grad_enabled = 1;
    return dt_arena_init(&ctx->arena, arena_bytes);
}

void ag_ctx_free(ag_ctx *ctx) {
    dt_arena_free(&ctx->arena);
    free(ctx->nodes);
    free(ctx->live_grads);
    free(ctx->free_grads);
    memset(ctx, 0, sizeof *ctx);
}

void ag_reset(ag_ctx *ctx) {
    ctx->n_nodes = 0;
    ctx->n_live_grads = 0;
    ctx->n_free_grads = 0;
    ctx->backward_failed = 0;
    dt_arena_reset(&ctx->arena);
}

int ag_set_grad_enabled(ag_ctx *ctx, int enabled) {
    int previous = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return previous;
}

dt_tensor *ag_tensor(ag_ctx *ctx, dt_dtype dtype, int ndim, const int64_t *shape) {
    return dt_tensor_arena(&ctx->arena, dtype, ndim, shape);
}

/* An allocation failed: during backward the op that asked will skip work, so the backward must fail. */
static void note_failed_allocation(ag_ctx *ctx) {
    if (ctx->in_backward) ctx->backward_failed = 1;
}

void *ag_scratch(ag_ctx *ctx, size_t bytes) {
    void *p = dt_arena_alloc(&ctx->arena, bytes);
    if (!p) note_failed_allocation(ctx);
    return p;
}

int ag_needs_grad(ag_ctx *ctx, dt_tensor *const *inputs, int n_inputs) {
    if (!ctx->grad_enabled) return 0;
    for (int i = 0; i < n_inputs; i++)
        if (inputs[i] && inputs[i]->requires_grad) return 1;
    return 0;
}

ag_node *ag_record(ag_ctx *ctx, const char *op, ag_backward_fn backward, dt_tensor *out, dt_tensor *const *inputs,
                   int n_inputs) {
    if (n_inputs > AG_MAX_INPUTS) {
        dt_errorf("%s: %d inputs (at most %d)", op, n_inputs, AG_MAX_INPUTS);
        return NULL;
    }
    if (ctx->n_nodes == ctx->cap_nodes) {
        /* Grows during the first step only; later steps reuse the capacity. */
        int cap = ctx->cap_nodes ? 2 * ctx->cap_nodes : 256;
        ag_node **nodes = realloc(ctx->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes) {
            dt_errorf("%s: out of memory growing the tape", op);
            return NULL;
        }
        ctx->nodes = nodes;
        ctx->cap_nodes = cap;
    }
    ag_node *node = dt_arena_calloc(&ctx->arena, sizeof *node);
    if (!node) return NULL;
    node->op = op;
    node->backward = backward;
    node->out = out;
    for (int i = 0; i < n_inputs; i++)
        node->in[i] = inputs[i];
    out->requires_grad = 1;
    out->producer = node;
    ctx->nodes[ctx->n_nodes++] = node;
    return node;
}

/* Room for one more entry in both buffer lists (they never hold more than
 * the buffers ever handed out, so one capacity serves both). */
static int reserve_grad_buffer(ag_ctx *ctx) {
    if (ctx->n_live_grads + ctx->n_free_grads < ctx->cap_grad_buffers) return 1;
    int cap = ctx->cap_grad_buffers ? 2 * ctx->cap_grad_buffers : 64;
    ag_grad_buffer *live = realloc(ctx->live_grads, (size_t)cap * sizeof *live);
    if (!live) return 0;
    ctx->live_grads = live;
    ag_grad_buffer *free_list = realloc(ctx->free_grads, (size_t)cap * sizeof *free_list);
    if (!free_list) return 0;
    ctx->free_grads = free_list;
    ctx->cap_grad_buffers = cap;
    return 1;
}

/* An arena buffer of at least n floats, uninitialised: the smallest free one
 * that fits, else a new one. Recorded as live. */
static float *take_grad_buffer(ag_ctx *ctx, int64_t n) {
    if (!reserve_grad_buffer(ctx)) {
        dt_errorf("backward: out of memory for the gradient buffer list");
        note_failed_allocation(ctx);
        return NULL;
    }
    int best = -1;
    for (int i = 0; i < ctx->n_free_grads; i++)
        if (ctx->free_grads[i].capacity >= n &&
            (best < 0 || ctx->free_grads[i].capacity < ctx->free_grads[best].capacity))
            best = i;
    ag_grad_buffer buffer;
    if (best >= 0) {
        buffer = ctx->free_grads[best];
        ctx->free_grads[best] = ctx->free_grads[--ctx->n_free_grads];
    } else {
        buffer.data = dt_arena_alloc(&ctx->arena, (size_t)n * sizeof(float));
        buffer.capacity = n;
        if (!buffer.data) {
            note_failed_allocation(ctx);
            return NULL;
        }
    }
    ctx->live_grads[ctx->n_live_grads++] = buffer;
    return buffer.data;
}

/* Moves a live buffer to the free list; 0 when data is not a live buffer. */
static int release_buffer(ag_ctx *ctx, const float *data) {
    for (int i = ctx->n_live_grads - 1; i >= 0; i--) {
        if (ctx->live_grads[i].data != data) continue;
        ctx->free_grads[ctx->n_free_grads++] = ctx->live_grads[i];
        ctx->live_grads[i] = ctx->live_grads[--ctx->n_live_grads];
        return 1;
    }
    return 0;
}

/* After an op's backward: its output's gradient is dead; hand it back. */
static void release_grad_buffer(ag_ctx *ctx, dt_tensor *t) {
    if (!t->grad || t->heap_owned) return;
    if (release_buffer(ctx, t->grad)) t->grad = NULL;
    /* else not ours (a caller-provided buffer): leave it alone */
}

float *ag_temp(ag_ctx *ctx, int64_t n) { return take_grad_buffer(ctx, n > 0 ? n : 1); }

void ag_temp_release(ag_ctx *ctx, float *data) {
    if (data) release_buffer(ctx, data);
}

void ag_release_grad(ag_ctx *ctx, dt_tensor *t) {
    if (t) release_grad_buffer(ctx, t);
}

float *ag_grad_for_write(ag_ctx *ctx, dt_tensor *t, int *accumulate) {
    *accumulate = 1;
    if (!t || !t->requires_grad || t->dtype != DT_F32) return NULL;
    if (!t->grad) {
        /* A heap tensor's gradient must outlive the step (and dt_tensor_free
         * frees it): give it a heap buffer, once, never an arena one. */
        if (t->heap_owned) {
            if (dt_tensor_alloc_grad(t) != DT_OK) {
                note_failed_allocation(ctx);
                return NULL;
            }
        } else {
            t->grad = take_grad_buffer(ctx, t->size);
            if (t->grad) *accumulate = 0;
        }
    }
    return t->grad;
}

float *ag_grad(ag_ctx *ctx, dt_tensor *t) {
    int accumulate;
    float *grad = ag_grad_for_write(ctx, t, &accumulate);
    if (grad && !accumulate) memset(grad, 0, (size_t)t->size * sizeof(float));
    return grad;
}

dt_status ag_backward(ag_ctx *ctx, dt_tensor *loss) {
    if (!loss) return DT_ERR; /* the forward already recorded why */
    if (loss->size != 1) return dt_errorf("backward: loss has %lld elements (must be a scalar)", (long long)loss->size);
    if (!loss->requires_grad) return dt_errorf("backward: loss does not depend on any parameter");
    /* A second backward over the same tape must not add onto the activation
     * gradients of the first (parameters, which are no node's output, keep
     * accumulating). On a first backward no node output has a gradient yet. */
    for (int i = 0; i < ctx->n_nodes; i++) {
        dt_tensor *out = ctx->nodes[i]->out;
        if (out->grad) memset(out->grad, 0, (size_t)out->size * sizeof(float));
    }
    float *seed = ag_grad(ctx, loss);
    if (!seed) return dt_errorf("backward: out of memory");
    seed[0] += 1.0f;
    ctx->in_backward = 1;
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        ag_node *node = ctx->nodes[i];
        if (!node->out->grad) continue; /* nothing flowed into this op */
        node->backward(ctx, node);
        release_grad_buffer(ctx, node->out); /* every consumer of out ran before its producer */
    }
    ctx->in_backward = 0;
    /* An op that could not finish its gradients said why (dt_errorf) and set the flag. */
    if (ctx->backward_failed) return dt_error_context("backward");
    return DT_OK;
}

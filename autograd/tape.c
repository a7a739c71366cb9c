/* Tape recording and the reverse sweep. */
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
    memset(ctx, 0, sizeof *ctx);
}

void ag_reset(ag_ctx *ctx) {
    ctx->n_nodes = 0;
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

void *ag_scratch(ag_ctx *ctx, size_t bytes) { return dt_arena_alloc(&ctx->arena, bytes); }

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
    for (int i = 0; i < n_inputs; i++) node->in[i] = inputs[i];
    out->requires_grad = 1;
    out->producer = node;
    ctx->nodes[ctx->n_nodes++] = node;
    return node;
}

float *ag_grad(ag_ctx *ctx, dt_tensor *t) {
    if (!t || !t->requires_grad || t->dtype != DT_F32) return NULL;
    if (!t->grad) {
        /* A heap tensor's gradient must outlive the step (and dt_tensor_free
         * frees it): give it a heap buffer, once, never an arena one. */
        if (t->heap_owned) {
            if (dt_tensor_alloc_grad(t) != DT_OK) return NULL;
        } else {
            t->grad = dt_arena_calloc(&ctx->arena, (size_t)t->size * sizeof(float));
        }
    }
    return t->grad;
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
    for (int i = ctx->n_nodes - 1; i >= 0; i--) {
        ag_node *node = ctx->nodes[i];
        if (!node->out->grad) continue; /* nothing flowed into this op */
        node->backward(ctx, node);
    }
    return DT_OK;
}

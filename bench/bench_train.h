/* dbranch bench train: training throughput (forward + backward + AdamW step)
 * on random tokens or a token dataset, with the figures that say how good it
 * is: model FLOPs per token, achieved GFLOP/s beside the GEMM rate measured in
 * the same run (so MFU is a ratio of two numbers taken under the same machine
 * load), and peak RSS beside a closed-form memory estimate.
 *
 * The cost model (bench_train_cost) is exposed so tests can check it against
 * an independent count. */
#ifndef BENCH_BENCH_TRAIN_H
#define BENCH_BENCH_TRAIN_H

#include <stdint.h>

#include "models/model.h"

/* What a training step of one model at B x T costs, in closed form. */
typedef struct bench_train_cost {
    int64_t params_total;       /* every parameter (what AdamW keeps state for) */
    int64_t params_flop;        /* N of 6N: primary parameters without pos_emb, experts at top_k / E */
    int64_t params_flop_branch; /* the decode branch's matrix work in parameters (0 without a branch) */
    double flops_per_token;     /* 6N + 12 L C T (+ the branch: 6 N_branch + 12 L C T) */
    double bytes_params;        /* 4 * params_total, and the same for grads, 8 * for Adam's m and v */
    double bytes_grads;
    double bytes_adam;
    double bytes_activations; /* what the backward needs saved from the forward (see bench_train.c) */
    double bytes_total;       /* the sum of the four */
} bench_train_cost;

/* Fills *cost for model m trained at batch B, sequence length T. */
void bench_train_cost_of(const model *m, int64_t B, int64_t T, bench_train_cost *cost);

#endif

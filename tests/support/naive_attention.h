/* Naive causal GQA attention and its gradients in double precision (O(T^2)
 * per head, straight from the definitions): the references the attention
 * kernels' tests compare against. Layouts as kernels/attention.h. */
#ifndef TESTS_SUPPORT_NAIVE_ATTENTION_H
#define TESTS_SUPPORT_NAIVE_ATTENTION_H

#include <stdint.h>

typedef struct naive_attention_shape {
    int64_t B, T, H, Hkv, hd;
} naive_attention_shape;

/* out [B,T,H*hd], lse [B,H,T] (or NULL) from q [B,T,H*hd], k, v [B,T,Hkv*hd];
 * slopes [H] adds ALiBi's -(t - j) * slope, or NULL. */
void naive_attention_forward(double *out, double *lse, const float *q, const float *k, const float *v,
                             naive_attention_shape s, const float *slopes);
/* dq [B,T,H*hd], dk, dv [B,T,Hkv*hd] (overwritten) for upstream d_out. */
void naive_attention_backward(double *dq, double *dk, double *dv, const float *d_out, const float *q, const float *k,
                              const float *v, naive_attention_shape s, const float *slopes);

#endif

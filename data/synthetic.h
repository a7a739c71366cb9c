/* Synthetic tasks for the architecture studies (`dbranch prepare --synthetic`):
 * record-structured token sets whose answers are known, so a study can
 * measure per-position accuracy rather than only a loss.
 *
 *   prefix-sum  records ">" x0 a0 x1 a1 ... (byte tokens): x_i a digit in
 *               [0, k), a_i = the letter 'a' + (x_0 + ... + x_i) mod k.
 *               k = 2 is running parity (the Recurrent Transformer's task).
 *               Every answer is in the context of the next one, so a_i =
 *               a_(i-1) + x_i is a local step; with final answers only, a
 *               record is ">" x0 .. x(m-1) "=" a(m-1) "." ... with m uniform
 *               in 1..n, and the sum of all m digits has to be carried.
 *               Labelled (answers = labels): the record is x0 .. x(n-1)
 *               alone and a_i is the stored target of position i (a
 *               labelled record file, data/tokens.h), so every position is
 *               supervised and no answer is ever an input: the running sum
 *               has to be carried inside the model at every position.
 *   two-hop     entity-disjoint graphs A and B over shared relations, one
 *               edge per (entity, relation) inside its graph; atomic facts
 *               "BOS e r e' EOS" of both graphs and two-hop queries
 *               "BOS e r1 r2 e''" of graph A train; graph B's two-hop
 *               queries are the (out-of-distribution) validation split
 *               (DiscoLoop's composition test). Ids only (tokenizer
 *               'external').
 *
 * Every record has the same length R; the answer tokens (a_i; the last
 * entity) are marked so `dbranch eval` scores only them for accuracy. */
#ifndef DATA_SYNTHETIC_H
#define DATA_SYNTHETIC_H

#include <stdint.h>

#include "core/error.h"

typedef enum {
    DATA_ANSWERS_EVERY = 0, /* ">" x0 a0 x1 a1 ...: R = 2n + 1 */
    DATA_ANSWERS_FINAL,     /* one answer after m <= n digits: R = n + 3 */
    DATA_ANSWERS_LABELS     /* x0 .. x(n-1) with a_i the target of position i: R = n */
} data_answers_format;

typedef struct data_prefix_sum_options {
    int64_t length;  /* digits per record, n: R = 2n + 1 */
    int64_t modulus; /* k in [2, 10] */
    int64_t n_train; /* records in /train */
    int64_t n_val;   /* records in /val */
    uint64_t seed;
    data_answers_format answers;
} data_prefix_sum_options;

typedef struct data_two_hop_options {
    int64_t entities;  /* per graph, >= 2 */
    int64_t relations; /* >= 1 */
    uint64_t seed;
    /* 1: a labelled file (--answers labels): every position's target is the
     * next token, except the r1 position of a two-hop query, whose target is
     * its bridge r1(e), as the atomic fact with the same prefix "BOS e r1"
     * asks (without it that prefix has two targets, b and the query's r2) */
    int bridge_labels;
} data_two_hop_options;

/* The two-hop vocabulary: BOS, EOS, then the relations, then graph A's and
 * graph B's entities. */
enum { DATA_TWO_HOP_BOS = 0, DATA_TWO_HOP_EOS = 1, DATA_TWO_HOP_FIRST_RELATION = 2 };

typedef struct data_records {
    int64_t record_len; /* R */
    int64_t vocab_size; /* 256 for byte tokens */
    int byte_tokens;    /* 1: byte tokenizer; 0: external ids */
    int32_t *train;     /* [n_train] */
    int64_t n_train;
    int32_t *val; /* [n_val] */
    int64_t n_val;
    int32_t *train_answer; /* [n_train] 1 where the token (or the target, when labelled) is an answer */
    int32_t *val_answer;   /* [n_val] */
    int32_t *train_target; /* NULL, or [n_train]: each position's own target (a labelled record file) */
    int32_t *val_target;   /* NULL, or [n_val] */
    char source[256];
} data_records;

dt_status data_synthetic_prefix_sum(const data_prefix_sum_options *options, data_records *out);
dt_status data_synthetic_two_hop(const data_two_hop_options *options, data_records *out);
void data_records_free(data_records *records);

#endif

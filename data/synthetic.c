/* Synthetic record tasks (data/synthetic.h). Everything is drawn from one
 * dt_rng seeded by the options, so a seed names the data set. */
#include "data/synthetic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

void data_records_free(data_records *records) {
    if (!records) return;
    free(records->train);
    free(records->val);
    free(records->train_answer);
    free(records->val_answer);
    free(records->train_target);
    free(records->val_target);
    memset(records, 0, sizeof *records);
}

/* target: NULL, or where the split's labelled targets go. */
static dt_status alloc_split(int32_t **tokens, int32_t **answer, int32_t **target, int64_t n) {
    *tokens = calloc((size_t)n, sizeof **tokens);
    *answer = calloc((size_t)n, sizeof **answer);
    if (target) *target = calloc((size_t)n, sizeof **target);
    return *tokens && *answer && (!target || *target)
               ? DT_OK
               : dt_errorf("synthetic task: out of memory for %lld tokens", (long long)n);
}

/* One record ">" x0 a0 ... into tokens[R], its answer marks into answer[R]. */
static void prefix_sum_record(dt_rng *rng, int64_t length, int64_t modulus, int32_t *tokens, int32_t *answer,
                              int32_t *target) {
    (void)target;
    tokens[0] = '>';
    answer[0] = 0;
    int64_t sum = 0;
    for (int64_t i = 0; i < length; i++) {
        int64_t digit = (int64_t)dt_rng_below(rng, (uint64_t)modulus);
        sum = (sum + digit) % modulus;
        tokens[1 + 2 * i] = (int32_t)('0' + digit);
        answer[1 + 2 * i] = 0;
        tokens[2 + 2 * i] = (int32_t)('a' + sum);
        answer[2 + 2 * i] = 1;
    }
}

/* One record ">" x0 .. x(m-1) "=" a "." ... of R = n + 3 tokens, m uniform in 1..n, a = 'a' + sum mod k. */
static void final_sum_record(dt_rng *rng, int64_t length, int64_t modulus, int32_t *tokens, int32_t *answer,
                             int32_t *target) {
    (void)target;
    const int64_t m = 1 + (int64_t)dt_rng_below(rng, (uint64_t)length), R = length + 3;
    int64_t sum = 0;
    tokens[0] = '>';
    for (int64_t i = 0; i < m; i++) {
        int64_t digit = (int64_t)dt_rng_below(rng, (uint64_t)modulus);
        sum = (sum + digit) % modulus;
        tokens[1 + i] = (int32_t)('0' + digit);
    }
    tokens[1 + m] = '=';
    tokens[2 + m] = (int32_t)('a' + sum);
    for (int64_t i = 3 + m; i < R; i++)
        tokens[i] = '.';
    for (int64_t i = 0; i < R; i++)
        answer[i] = i == 2 + m;
}

/* One labelled record x0 .. x(n-1) into tokens[n], target[i] = 'a' + (x0 + .. + xi) mod k, every target marked. */
static void labelled_sum_record(dt_rng *rng, int64_t length, int64_t modulus, int32_t *tokens, int32_t *answer,
                                int32_t *target) {
    int64_t sum = 0;
    for (int64_t i = 0; i < length; i++) {
        int64_t digit = (int64_t)dt_rng_below(rng, (uint64_t)modulus);
        sum = (sum + digit) % modulus;
        tokens[i] = (int32_t)('0' + digit);
        target[i] = (int32_t)('a' + sum);
        answer[i] = 1;
    }
}

dt_status data_synthetic_prefix_sum(const data_prefix_sum_options *o, data_records *out) {
    memset(out, 0, sizeof *out);
    if (o->length < 1 || o->length > 1 << 20)
        return dt_errorf("--length %lld must be in [1, 2^20]", (long long)o->length);
    if (o->modulus < 2 || o->modulus > 10) return dt_errorf("--modulus %lld must be in [2, 10]", (long long)o->modulus);
    if (o->n_train < 1 || o->n_val < 1)
        return dt_errorf("--train-records %lld and --val-records %lld must be >= 1", (long long)o->n_train,
                         (long long)o->n_val);
    if (o->answers == DATA_ANSWERS_LABELS && o->length < 2)
        return dt_errorf("--length %lld must be >= 2 for labelled records", (long long)o->length);
    const int64_t R = o->answers == DATA_ANSWERS_FINAL    ? o->length + 3
                      : o->answers == DATA_ANSWERS_LABELS ? o->length
                                                          : 2 * o->length + 1;
    const int labelled = o->answers == DATA_ANSWERS_LABELS;
    if (o->n_train > (INT64_MAX / 8) / R || o->n_val > (INT64_MAX / 8) / R)
        return dt_errorf("synthetic task: too many records");
    out->record_len = R;
    out->vocab_size = 256;
    out->byte_tokens = 1;
    out->n_train = o->n_train * R;
    out->n_val = o->n_val * R;
    if (alloc_split(&out->train, &out->train_answer, labelled ? &out->train_target : NULL, out->n_train) != DT_OK ||
        alloc_split(&out->val, &out->val_answer, labelled ? &out->val_target : NULL, out->n_val) != DT_OK) {
        data_records_free(out);
        return DT_ERR;
    }
    dt_rng rng;
    dt_rng_seed(&rng, o->seed);
    void (*record)(dt_rng *, int64_t, int64_t, int32_t *, int32_t *, int32_t *) = o->answers == DATA_ANSWERS_FINAL
                                                                                      ? final_sum_record
                                                                                  : labelled ? labelled_sum_record
                                                                                             : prefix_sum_record;
    for (int64_t r = 0; r < o->n_train; r++)
        record(&rng, o->length, o->modulus, out->train + r * R, out->train_answer + r * R,
               labelled ? out->train_target + r * R : NULL);
    for (int64_t r = 0; r < o->n_val; r++)
        record(&rng, o->length, o->modulus, out->val + r * R, out->val_answer + r * R,
               labelled ? out->val_target + r * R : NULL);
    static const char *const format_words[] = {"", "final answer after up to ", "labelled targets, "};
    snprintf(out->source, sizeof out->source, "synthetic prefix-sum: %s%lld digits mod %lld, seed %llu",
             format_words[o->answers], (long long)o->length, (long long)o->modulus, (unsigned long long)o->seed);
    return DT_OK;
}

enum { TWO_HOP_R = 5 }; /* BOS e r e' EOS | BOS e r1 r2 e'' */

/* One record; the answer is token answer_at. With target (labelled): the
 * targets are the next tokens (EOS after the last), the mark moves to the
 * answer's target (answer_at - 1), and bridge >= 0 is the r1 position's target. */
static void put_record(int32_t *tokens, int32_t *answer, int32_t *target, const int32_t record[TWO_HOP_R],
                       int answer_at, int32_t bridge) {
    memcpy(tokens, record, TWO_HOP_R * sizeof *tokens);
    for (int i = 0; i < TWO_HOP_R; i++)
        answer[i] = i == (target ? answer_at - 1 : answer_at);
    if (!target) return;
    for (int i = 0; i < TWO_HOP_R; i++)
        target[i] = i + 1 < TWO_HOP_R ? record[i + 1] : DATA_TWO_HOP_EOS;
    if (bridge >= 0) target[2] = bridge;
}

dt_status data_synthetic_two_hop(const data_two_hop_options *o, data_records *out) {
    memset(out, 0, sizeof *out);
    if (o->entities < 2 || o->entities > 1 << 16)
        return dt_errorf("--entities %lld must be in [2, 65536]", (long long)o->entities);
    if (o->relations < 1 || o->relations > 256)
        return dt_errorf("--relations %lld must be in [1, 256]", (long long)o->relations);
    const int64_t N = o->entities, Rel = o->relations;
    const int64_t first_entity = DATA_TWO_HOP_FIRST_RELATION + Rel;
    /* edge[(g * N + e) * Rel + r]: the entity (0-based within graph g) that e reaches by r */
    int64_t *edge = malloc((size_t)(2 * N * Rel) * sizeof *edge);
    int64_t n_train_records = 2 * N * Rel + N * Rel * Rel, n_val_records = N * Rel * Rel;
    int64_t *order = malloc((size_t)n_train_records * sizeof *order);
    if (!edge || !order) {
        free(edge);
        free(order);
        return dt_errorf("two-hop task: out of memory");
    }
    dt_rng rng;
    dt_rng_seed(&rng, o->seed);
    for (int64_t i = 0; i < 2 * N * Rel; i++)
        edge[i] = (int64_t)dt_rng_below(&rng, (uint64_t)N);

    out->record_len = TWO_HOP_R;
    out->vocab_size = first_entity + 2 * N;
    out->byte_tokens = 0;
    out->n_train = n_train_records * TWO_HOP_R;
    out->n_val = n_val_records * TWO_HOP_R;
    const int labelled = o->bridge_labels != 0;
    if (alloc_split(&out->train, &out->train_answer, labelled ? &out->train_target : NULL, out->n_train) != DT_OK ||
        alloc_split(&out->val, &out->val_answer, labelled ? &out->val_target : NULL, out->n_val) != DT_OK) {
        free(edge);
        free(order);
        data_records_free(out);
        return DT_ERR;
    }
    /* Training records in a seeded order: record k < 2N*Rel is atomic fact k, the rest graph A's two-hop queries. */
    for (int64_t k = 0; k < n_train_records; k++)
        order[k] = k;
    for (int64_t k = n_train_records - 1; k > 0; k--) {
        int64_t j = (int64_t)dt_rng_below(&rng, (uint64_t)(k + 1)), t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    for (int64_t k = 0; k < n_train_records; k++) {
        int64_t id = order[k];
        int32_t record[TWO_HOP_R], bridge_token = -1;
        int answer_at;
        if (id < 2 * N * Rel) { /* atomic: graph g, entity e, relation r */
            int64_t g = id / (N * Rel), e = id / Rel % N, r = id % Rel;
            int32_t head = (int32_t)(first_entity + g * N + e);
            int32_t tail = (int32_t)(first_entity + g * N + edge[(g * N + e) * Rel + r]);
            int32_t atomic[TWO_HOP_R] = {DATA_TWO_HOP_BOS, head, (int32_t)(DATA_TWO_HOP_FIRST_RELATION + r), tail,
                                         DATA_TWO_HOP_EOS};
            memcpy(record, atomic, sizeof record);
            answer_at = 3;
        } else { /* graph A two-hop */
            int64_t q = id - 2 * N * Rel, e = q / (Rel * Rel), r1 = q / Rel % Rel, r2 = q % Rel;
            int64_t bridge = edge[e * Rel + r1], tail = edge[bridge * Rel + r2];
            int32_t query[TWO_HOP_R] = {DATA_TWO_HOP_BOS, (int32_t)(first_entity + e),
                                        (int32_t)(DATA_TWO_HOP_FIRST_RELATION + r1),
                                        (int32_t)(DATA_TWO_HOP_FIRST_RELATION + r2), (int32_t)(first_entity + tail)};
            memcpy(record, query, sizeof record);
            answer_at = 4;
            bridge_token = (int32_t)(first_entity + bridge);
        }
        put_record(out->train + k * TWO_HOP_R, out->train_answer + k * TWO_HOP_R,
                   labelled ? out->train_target + k * TWO_HOP_R : NULL, record, answer_at, bridge_token);
    }
    /* Validation: every two-hop query of graph B, in order. */
    for (int64_t q = 0; q < n_val_records; q++) {
        int64_t e = q / (Rel * Rel), r1 = q / Rel % Rel, r2 = q % Rel;
        int64_t bridge = edge[(N + e) * Rel + r1], tail = edge[(N + bridge) * Rel + r2];
        int32_t query[TWO_HOP_R] = {DATA_TWO_HOP_BOS, (int32_t)(first_entity + N + e),
                                    (int32_t)(DATA_TWO_HOP_FIRST_RELATION + r1),
                                    (int32_t)(DATA_TWO_HOP_FIRST_RELATION + r2), (int32_t)(first_entity + N + tail)};
        put_record(out->val + q * TWO_HOP_R, out->val_answer + q * TWO_HOP_R,
                   labelled ? out->val_target + q * TWO_HOP_R : NULL, query, 4, (int32_t)(first_entity + N + bridge));
    }
    snprintf(out->source, sizeof out->source,
             "synthetic two-hop: 2 graphs x %lld entities, %lld relations, seed %llu (val: graph B two-hop)%s",
             (long long)N, (long long)Rel, (unsigned long long)o->seed,
             labelled ? ", labelled: a query's r1 position targets its bridge" : "");
    free(edge);
    free(order);
    return DT_OK;
}

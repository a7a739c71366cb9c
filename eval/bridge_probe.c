/* The bridge-state probe (eval/bridge_probe.h): the graph read back from the
 * file's atomic facts, the two-hop queries of the split run through
 * model_forward in batches with a model_probe that keeps the r1 and r2 rows
 * of every application's output and input, and the cosines and the logit
 * lens computed from them in double. */
#include "eval/bridge_probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/tape.h"
#include "data/synthetic.h"
#include "models/norm_kinds.h"
#include "models/probe.h"

enum { RECORD = 5, WINDOW = 4, BATCH = 64 };

/* The two-hop vocabulary (data/synthetic.h) as the file's atomic facts show it. */
typedef struct bridge_graph {
    int64_t V, relations, entities, first_entity;
    int64_t *edge; /* [2N * relations] tail of (entity - first_entity, relation), -1 where unseen */
} bridge_graph;

static int is_relation(const bridge_graph *g, int32_t t) {
    return t >= DATA_TWO_HOP_FIRST_RELATION && t < DATA_TWO_HOP_FIRST_RELATION + g->relations;
}
static int is_entity(const bridge_graph *g, int32_t t) { return t >= g->first_entity && t < g->V; }
static int64_t graph_of(const bridge_graph *g, int64_t entity) { return (entity - g->first_entity) / g->entities; }
static int64_t *edge_at(const bridge_graph *g, int32_t entity, int32_t relation) {
    return &g->edge[(entity - g->first_entity) * g->relations + (relation - DATA_TWO_HOP_FIRST_RELATION)];
}

static int is_atomic(const int32_t *r) { return r[0] == DATA_TWO_HOP_BOS && r[4] == DATA_TWO_HOP_EOS; }

/* The graph from /train's atomic records train[n_records * 5]. */
static dt_status read_graph(const char *path, const int32_t *train, int64_t n_records, int64_t V, bridge_graph *g) {
    memset(g, 0, sizeof *g);
    g->V = V;
    int64_t max_relation = -1, atomic = 0;
    for (int64_t i = 0; i < n_records; i++)
        if (is_atomic(train + i * RECORD)) {
            atomic++;
            if (train[i * RECORD + 2] > max_relation) max_relation = train[i * RECORD + 2];
        }
    if (atomic == 0 || max_relation < DATA_TWO_HOP_FIRST_RELATION)
        return dt_errorf("%s: not a two-hop record file (no atomic fact \"BOS e r e' EOS\" in /train)", path);
    g->relations = max_relation - DATA_TWO_HOP_FIRST_RELATION + 1;
    g->first_entity = DATA_TWO_HOP_FIRST_RELATION + g->relations;
    g->entities = (V - g->first_entity) / 2;
    if (g->entities < 1 || g->first_entity + 2 * g->entities != V)
        return dt_errorf("%s: not a two-hop record file (vocab %lld is not 2 + %lld relations + 2 graphs of entities)",
                         path, (long long)V, (long long)g->relations);
    const int64_t n_edges = 2 * g->entities * g->relations;
    g->edge = malloc((size_t)n_edges * sizeof *g->edge);
    if (!g->edge) return dt_errorf("bridge probe: out of memory for %lld edges", (long long)n_edges);
    for (int64_t i = 0; i < n_edges; i++)
        g->edge[i] = -1;
    for (int64_t i = 0; i < n_records; i++) {
        const int32_t *r = train + i * RECORD;
        if (!is_atomic(r)) continue;
        if (!is_entity(g, r[1]) || !is_relation(g, r[2]) || !is_entity(g, r[3]) ||
            graph_of(g, r[1]) != graph_of(g, r[3]))
            return dt_errorf(
                "%s: not a two-hop record file (/train record %lld is not an atomic fact inside one graph)", path,
                (long long)i);
        int64_t *tail = edge_at(g, r[1], r[2]);
        if (*tail >= 0 && *tail != r[3])
            return dt_errorf("%s: not a two-hop record file (/train record %lld gives entity %d relation %d a second "
                             "tail)",
                             path, (long long)i, r[1], r[2]);
        *tail = r[3];
    }
    return DT_OK;
}

/* The bridge of two-hop record r, or -1 when r is not a query the graph answers. */
static int64_t bridge_of(const bridge_graph *g, const int32_t *r) {
    if (r[0] != DATA_TWO_HOP_BOS || !is_entity(g, r[1]) || !is_relation(g, r[2]) || !is_relation(g, r[3]) ||
        !is_entity(g, r[4]))
        return -1;
    const int64_t bridge = *edge_at(g, r[1], r[2]);
    if (bridge < 0 || *edge_at(g, (int32_t)bridge, r[3]) != r[4]) return -1;
    return bridge;
}

/* What the probe keeps of one batch: rows[state][b][position][C]. */
typedef struct bridge_capture {
    int64_t K, L, Bt, C, outputs, inputs;
    float *rows;
} bridge_capture;

static void keep_rows(bridge_capture *p, int64_t state, const dt_tensor *x) {
    if (x->size != p->Bt * WINDOW * p->C) return; /* not this batch's [Bt, 4, C] */
    for (int64_t b = 0; b < p->Bt; b++)
        memcpy(p->rows + ((state * p->Bt + b) * EVAL_BRIDGE_POSITIONS) * p->C, dt_f32(x) + (b * WINDOW + 2) * p->C,
               (size_t)(EVAL_BRIDGE_POSITIONS * p->C) * sizeof(float));
}

static void on_input(void *user, int64_t j, const dt_tensor *x) {
    bridge_capture *p = user;
    if (j == 2 * p->L && p->outputs < p->K) /* the final norm's input after application outputs + 1 */
        keep_rows(p, p->outputs++, x);
    else if (j == 0 && p->inputs++ > 0 && p->inputs <= p->K) /* the input of application inputs, after the first */
        keep_rows(p, p->K + p->inputs - 2, x);
}

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* Per-state sums of one row x [C] against bridge b: cosines to table[b] and
 * the mean over b's graph's other entities; table_norm [V] the rows' norms. */
static void add_cosines(const bridge_graph *g, const float *table, const double *table_norm, int64_t C, const float *x,
                        double x_norm, int64_t bridge, double *own, double *other) {
    const double denom = x_norm > 0 ? x_norm : 1.0;
    *own += dot(x, table + bridge * C, C) / (denom * (table_norm[bridge] > 0 ? table_norm[bridge] : 1.0));
    const int64_t first = g->first_entity + graph_of(g, bridge) * g->entities;
    if (g->entities < 2) return;
    double sum = 0.0;
    for (int64_t o = first; o < first + g->entities; o++)
        if (o != bridge) sum += dot(x, table + o * C, C) / (denom * (table_norm[o] > 0 ? table_norm[o] : 1.0));
    *other += sum / (double)(g->entities - 1);
}

void eval_bridge_result_free(eval_bridge_result *r) {
    if (!r) return;
    free(r->value);
    memset(r, 0, sizeof *r);
}

dt_status eval_bridge_run(model *m, data_tokens *data, data_split split, eval_bridge_result *r) {
    memset(r, 0, sizeof *r);
    const model_arch *a = &m->arch;
    const int64_t K = a->n_loop, C = a->C, V = a->V, S = 2 * K - 1;
    if (K < 2)
        return dt_errorf("bridge probe: the model has n_loop = %lld; it needs a looped stack (n_loop > 1) to have a "
                         "state between applications",
                         (long long)K);
    if (data->vocab_size != V)
        return dt_errorf("%s: vocab_size %lld differs from the model's %lld", data->path, (long long)data->vocab_size,
                         (long long)V);
    if (data->record_len != RECORD)
        return dt_errorf("%s: not a two-hop record file (record_len %lld, expected 5)", data->path,
                         (long long)data->record_len);
    if (m->config.block_size < WINDOW)
        return dt_errorf("bridge probe: block_size %lld < 4, the window of a two-hop query",
                         (long long)m->config.block_size);
    const int64_t n_train = data->split_length[SPLIT_TRAIN] / RECORD, n_split = data->split_length[split] / RECORD;
    int32_t *train = malloc((size_t)(n_train * RECORD) * sizeof *train);
    int32_t *records = malloc((size_t)(n_split * RECORD) * sizeof *records);
    int64_t *bridges = malloc((size_t)(n_split > 0 ? n_split : 1) * sizeof *bridges);
    bridge_capture capture = {.K = K, .L = a->L, .C = C};
    capture.rows = malloc((size_t)(S * BATCH * EVAL_BRIDGE_POSITIONS * C) * sizeof(float));
    double *emb_norm = malloc((size_t)V * sizeof *emb_norm), *head_norm = malloc((size_t)V * sizeof *head_norm);
    float *normed = malloc((size_t)(2 * C + 2) * sizeof *normed), *logits = malloc((size_t)V * sizeof *logits);
    r->value = calloc((size_t)(S * EVAL_BRIDGE_POSITIONS * EVAL_BRIDGE_METRICS), sizeof *r->value);
    bridge_graph g = {0};
    ag_ctx ctx;
    int have_ctx = 0;
    dt_status status = DT_OK;
    if (!train || !records || !bridges || !capture.rows || !emb_norm || !head_norm || !normed || !logits || !r->value) {
        status = dt_errorf("bridge probe: out of memory for %lld records", (long long)(n_train + n_split));
        goto done;
    }
    if ((status = data_tokens_read(data, SPLIT_TRAIN, 0, n_train * RECORD, train)) != DT_OK ||
        (status = data_tokens_read(data, split, 0, n_split * RECORD, records)) != DT_OK ||
        (status = read_graph(data->path, train, n_train, V, &g)) != DT_OK)
        goto done;
    /* The split's two-hop queries, packed to the front (train: the atomic facts are skipped). */
    int64_t n = 0;
    for (int64_t i = 0; i < n_split; i++) {
        const int32_t *rec = records + i * RECORD;
        if (split == SPLIT_TRAIN && is_atomic(rec)) continue;
        if ((bridges[n] = bridge_of(&g, rec)) < 0) {
            status = dt_errorf("%s: not a two-hop record file (%s record %lld is not a query \"BOS e r1 r2 e''\" the "
                               "atomic facts answer)",
                               data->path, split == SPLIT_VAL ? "/val" : "/train", (long long)i);
            goto done;
        }
        memmove(records + n * RECORD, rec, RECORD * sizeof *rec);
        n++;
    }
    if (n == 0) {
        status = dt_errorf("%s: the %s split holds no two-hop query", data->path, split == SPLIT_VAL ? "val" : "train");
        goto done;
    }
    r->n_loop = K;
    r->n_queries = n;
    r->entities = g.entities;
    r->relations = g.relations;
    r->tied = m->lm_head == m->tok_emb;
    const float *emb = dt_f32(m->tok_emb), *head = dt_f32(m->lm_head);
    for (int64_t v = 0; v < V; v++) {
        emb_norm[v] = sqrt(dot(emb + v * C, emb + v * C, C));
        head_norm[v] = sqrt(dot(head + v * C, head + v * C, C));
    }
    if ((status = ag_ctx_init(&ctx, 0)) != DT_OK) goto done;
    have_ctx = 1;
    ag_set_grad_enabled(&ctx, 0);
    const model_probe probe = {.user = &capture, .sublayer_input = on_input};
    const float *norm_bias = m->final_norm_bias ? dt_f32(m->final_norm_bias) : NULL;
    for (int64_t start = 0; start < n; start += BATCH) {
        const int64_t Bt = n - start < BATCH ? n - start : BATCH;
        ag_reset(&ctx);
        dt_tensor *tokens = ag_tensor(&ctx, DT_I32, DT_SHAPE(Bt, WINDOW));
        if (!tokens) {
            status = DT_ERR;
            goto done;
        }
        for (int64_t b = 0; b < Bt; b++)
            memcpy(dt_i32(tokens) + b * WINDOW, records + (start + b) * RECORD, WINDOW * sizeof(int32_t));
        capture.Bt = Bt;
        capture.outputs = capture.inputs = 0;
        model_outputs out;
        m->probe = &probe;
        status = model_forward(m, &ctx, tokens, NULL, &out);
        m->probe = NULL;
        if (status != DT_OK) goto done;
        for (int64_t s = 0; s < S; s++)
            for (int64_t b = 0; b < Bt; b++)
                for (int p = 0; p < EVAL_BRIDGE_POSITIONS; p++) {
                    const float *x = capture.rows + ((s * Bt + b) * EVAL_BRIDGE_POSITIONS + p) * C;
                    const int64_t bridge = bridges[start + b];
                    double *v = r->value + (s * EVAL_BRIDGE_POSITIONS + p) * EVAL_BRIDGE_METRICS;
                    const double x_norm = sqrt(dot(x, x, C));
                    add_cosines(&g, emb, emb_norm, C, x, x_norm, bridge, &v[EVAL_BRIDGE_EMB],
                                &v[EVAL_BRIDGE_EMB_OTHER]);
                    add_cosines(&g, head, head_norm, C, x, x_norm, bridge, &v[EVAL_BRIDGE_HEAD],
                                &v[EVAL_BRIDGE_HEAD_OTHER]);
                    /* the logit lens: the model's own final norm and head on this state */
                    a->norm->rows(normed, normed + C, normed + C + 1, x, dt_f32(m->final_norm), norm_bias, 1, C,
                                  a->norm_eps);
                    int64_t best = 0;
                    for (int64_t t = 0; t < V; t++) {
                        logits[t] = (float)dot(normed, head + t * C, C);
                        if (logits[t] > logits[best]) best = t;
                    }
                    v[EVAL_BRIDGE_LENS] += best == bridge;
                    v[EVAL_BRIDGE_RMS] += x_norm / sqrt((double)C);
                }
    }
    for (int64_t i = 0; i < S * EVAL_BRIDGE_POSITIONS * EVAL_BRIDGE_METRICS; i++)
        r->value[i] /= (double)n;
done:
    if (have_ctx) ag_ctx_free(&ctx);
    free(g.edge);
    free(train);
    free(records);
    free(bridges);
    free(capture.rows);
    free(emb_norm);
    free(head_norm);
    free(normed);
    free(logits);
    if (status != DT_OK) eval_bridge_result_free(r);
    return status;
}

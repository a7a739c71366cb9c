/* The Decode-Branch mixture readout and its negative log-likelihood (SPEC §2
 * "Mixture readout and objective"), fused so no [M,V] probabilities are stored.
 *
 * Per row: p = softmax(logits_p), q = softmax(logits_q), S = sum p^2,
 * alpha = clip(S, alpha_min, alpha_max), and
 *   nll = -logsumexp(log alpha + log p_y, log1p(-alpha) + log q_y),
 * dropping a term whose weight is exactly 0 (alpha == 0 or alpha == 1).
 *
 * The per-row scalars (log-normalisers, S, alpha, the log terms) are kept in
 * double; the per-element exponentials are float (vectorised k_exp), summed in
 * float within blocks of 256 columns and in double across blocks, so losses
 * match a float64 reference to ~1e-7 relative at vocabulary widths of tens of
 * thousands. Rows are independent and run in parallel.
 *
 * Compiled once per instruction-set level (kernels/isa_variant.h; why:
 * softmax_isa.c); mixture.c calls the active level's table.
 *
 * A confident primary (S close to 1) makes 1 - alpha and p_max - S tiny
 * differences of numbers near 1; summed in float they lose most digits, and
 * dnll/dalpha ~ 1/(1 - alpha) amplifies that into gradients off by 1e-3
 * relative (found by a held-out reference file with S = 0.99997). So the
 * exponentials are also summed without the first maximal one (R = sum of the
 * rest), and both differences are formed from R without cancellation. */
#include "kernels/isa_variant.h"
#include "kernels/mixture_ops.h"

#include <math.h>

#include "kernels/vec_math.h"

/* Columns per block of the exp sums (see above). */
#define EXP_BLOCK 256

/* Below this many elements a parallel region costs more than it saves. */
#define PARALLEL_MIN_ELEMENTS 32768

/* What one row of logits contributes: its max, the sums of exp(x - max) and of
 * exp(x - max)^2, so softmax(x)_j = exp(x_j - max) / sum_exp and
 * sum_j softmax(x)_j^2 = sum_exp_sq / sum_exp^2. */
typedef struct {
    float max;
    double sum_exp;
    double sum_exp_sq;
    double log_normaliser; /* logsumexp(x) */
    /* want_sum_sq only: the first index of the max, e_max = exp(0), and the
     * sums of exp(x - max) and its square over every other column. */
    int64_t imax;
    double e_max, rest_sum, rest_sum_sq;
} row_stats;

/* x [V] */
static row_stats compute_row_stats(const float *x, int64_t V, int want_sum_sq) {
    row_stats stats;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < V; j++)
        m = x[j] > m ? x[j] : m;
    int64_t imax = 0;
    if (want_sum_sq)
        while (imax < V - 1 && !(x[imax] >= m))
            imax++;
    double sum = 0.0, sum_sq = 0.0;
    for (int64_t j0 = 0; j0 < V; j0 += EXP_BLOCK) {
        const int64_t n = V - j0 < EXP_BLOCK ? V - j0 : EXP_BLOCK;
        float block_sum = 0.0f, block_sum_sq = 0.0f;
        if (want_sum_sq) {
#pragma omp simd reduction(+ : block_sum, block_sum_sq)
            for (int64_t j = 0; j < n; j++) {
                const float e = j0 + j == imax ? 0.0f : k_exp(x[j0 + j] - m); /* the rest, R */
                block_sum += e;
                block_sum_sq += e * e;
            }
        } else {
#pragma omp simd reduction(+ : block_sum)
            for (int64_t j = 0; j < n; j++)
                block_sum += k_exp(x[j0 + j] - m);
        }
        sum += block_sum;
        sum_sq += block_sum_sq;
    }
    stats.max = m;
    stats.imax = imax;
    stats.e_max = want_sum_sq ? (double)k_exp(0.0f) : 0.0;
    stats.rest_sum = want_sum_sq ? sum : 0.0;
    stats.rest_sum_sq = want_sum_sq ? sum_sq : 0.0;
    if (want_sum_sq) {
        sum += stats.e_max;
        sum_sq += stats.e_max * stats.e_max;
    }
    stats.sum_exp = sum;
    stats.sum_exp_sq = sum_sq;
    stats.log_normaliser = (double)m + log(sum);
    return stats;
}

/* alpha of one row from its primary's statistics (row_stats with
 * want_sum_sq): S = sum p^2, alpha = clip(S, alpha_min, alpha_max), and the
 * differences near 1 formed from R without cancellation. */
typedef struct {
    double collision;            /* S = sum_v p(v)^2 */
    double one_minus_collision;  /* 1 - S, from R without cancellation */
    double pmax_minus_collision; /* p_max - S, likewise */
    double alpha;                /* clip(S, alpha_min, alpha_max) */
    int alpha_is_collision;      /* alpha == S and 1 - S > 0: 1 - alpha is one_minus_collision */
    double one_minus_alpha;      /* 1 - alpha: one_minus_collision, or 1 - alpha at a bound */
} alpha_terms;

static alpha_terms compute_alpha(const row_stats *p, float alpha_min, float alpha_max) {
    alpha_terms a;
    a.collision = p->sum_exp_sq / (p->sum_exp * p->sum_exp);
    {
        /* Z = e + R, sum e^2 = e^2 + R2: Z^2 - sum e^2 = 2eR + R^2 - R2 and
         * e Z - sum e^2 = eR - R2, where R^2 >= R2 and eR >= R2. */
        const double e = p->e_max, R = p->rest_sum, R2 = p->rest_sum_sq, Z2 = p->sum_exp * p->sum_exp;
        a.one_minus_collision = (2.0 * e * R + R * R - R2) / Z2;
        a.pmax_minus_collision = (e * R - R2) / Z2;
    }
    double alpha = a.collision;
    if (alpha < (double)alpha_min) alpha = (double)alpha_min;
    if (alpha > (double)alpha_max) alpha = (double)alpha_max;
    a.alpha = alpha;
    a.alpha_is_collision = alpha == a.collision && a.one_minus_collision > 0.0;
    a.one_minus_alpha = a.alpha_is_collision ? a.one_minus_collision : 1.0 - alpha;
    return a;
}

/* Everything the forward and backward of one row share. */
typedef struct {
    row_stats p, q;
    alpha_terms a;
    double log_p_y;    /* log p(y) */
    double log_q_y;    /* log q(y) */
    double log_term_p; /* log alpha + log p(y)         (valid when 0 < alpha) */
    double log_term_q; /* log1p(-alpha) + log q(y)     (valid when alpha < 1) */
    double nll;        /* -log r(y) */
} mixture_row;

/* logits_p, logits_q [V]; y the target. */
static mixture_row compute_mixture_row(const float *logits_p, const float *logits_q, int32_t y, int64_t V,
                                       float alpha_min, float alpha_max) {
    mixture_row row;
    row.p = compute_row_stats(logits_p, V, 1);
    row.q = compute_row_stats(logits_q, V, 0);
    row.a = compute_alpha(&row.p, alpha_min, alpha_max);
    const double alpha = row.a.alpha;
    row.log_p_y = (double)logits_p[y] - row.p.log_normaliser;
    row.log_q_y = (double)logits_q[y] - row.q.log_normaliser;
    row.log_term_p = alpha > 0.0 ? log(alpha) + row.log_p_y : -INFINITY;
    /* log(1 - alpha): from 1 - S when alpha = S (accurate near 1), else log1p(-alpha). */
    const double log_one_minus_alpha = row.a.alpha_is_collision ? log(row.a.one_minus_collision) : log1p(-alpha);
    row.log_term_q = alpha < 1.0 ? log_one_minus_alpha + row.log_q_y : -INFINITY;
    if (alpha <= 0.0) {
        row.nll = -row.log_term_q; /* the primary's term has weight 0: dropped */
    } else if (alpha >= 1.0) {
        row.nll = -row.log_term_p; /* the branch's term has weight 0: dropped */
    } else {
        double hi = fmax(row.log_term_p, row.log_term_q), lo = fmin(row.log_term_p, row.log_term_q);
        row.nll = -(hi + log1p(exp(lo - hi)));
    }
    return row;
}

/* logits_p [rows,V]; alpha [rows]; one_minus_alpha [rows] or NULL */
static void mixture_alpha_range(float *alpha, double *one_minus_alpha, const float *logits_p, int64_t rows, int64_t V,
                                float alpha_min, float alpha_max) {
    for (int64_t m = 0; m < rows; m++) {
        const row_stats p = compute_row_stats(logits_p + m * V, V, 1);
        const alpha_terms a = compute_alpha(&p, alpha_min, alpha_max);
        alpha[m] = (float)a.alpha;
        if (one_minus_alpha) one_minus_alpha[m] = a.one_minus_alpha;
    }
}

/* logits_p [M,V]; alpha [M]: mixture_alpha_range over blocks of rows */
static void mixture_alpha(float *alpha, const float *logits_p, int64_t M, int64_t V, float alpha_min, float alpha_max) {
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t m = 0; m < M; m++)
        mixture_alpha_range(alpha + m, NULL, logits_p + m * V, 1, V, alpha_min, alpha_max);
}

static size_t mixture_saved_bytes(int64_t M) { return (size_t)(M > 0 ? M : 1) * sizeof(mixture_row); }

/* logits_p, logits_q [M,V]; targets [M]; nll, alpha, ce_p, ce_q [M] (ce_p, ce_q may be NULL); saved [M] or NULL */
static void mixture_forward_saving(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p,
                                   const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                                   float alpha_max, void *saved) {
    mixture_row *rows = saved;
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t m = 0; m < M; m++) {
        mixture_row row = compute_mixture_row(logits_p + m * V, logits_q + m * V, targets[m], V, alpha_min, alpha_max);
        if (rows) rows[m] = row;
        nll[m] = (float)row.nll;
        alpha[m] = (float)row.a.alpha;
        if (ce_p) ce_p[m] = (float)-row.log_p_y;
        if (ce_q) ce_q[m] = (float)-row.log_q_y;
    }
}

static void mixture_forward(float *nll, float *alpha, float *ce_p, float *ce_q, const float *logits_p,
                            const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                            float alpha_max) {
    mixture_forward_saving(nll, alpha, ce_p, ce_q, logits_p, logits_q, targets, M, V, alpha_min, alpha_max, NULL);
}

/* d_logits_p, d_logits_q, logits_p, logits_q [M,V]; d_nll, targets [M].
 * With r = alpha p_y + (1 - alpha) q_y and the responsibilities
 * w_p = alpha p_y / r, w_q = (1 - alpha) q_y / r:
 *   d nll / d logits_q[j] = w_q (q_j - [j == y])
 *   d nll / d logits_p[j] = w_p (p_j - [j == y])                 (through p_y)
 *                         + dnll/dalpha * 2 p_j (p_j - S)         (through alpha = S)
 * with dnll/dalpha = -(p_y - q_y) / r, the second line only where the clip
 * passes gradient, alpha is not a constant (0 or 1) and alpha_detach == 0. */
static void mixture_backward_saved(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                                   const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                                   float alpha_max, int alpha_detach, const void *saved) {
    const mixture_row *rows = saved;
#pragma omp parallel for schedule(static) if (M * V > PARALLEL_MIN_ELEMENTS)
    for (int64_t m = 0; m < M; m++) {
        const float *lp = logits_p + m * V, *lq = logits_q + m * V;
        int32_t y = targets[m];
        const mixture_row row = rows ? rows[m] : compute_mixture_row(lp, lq, y, V, alpha_min, alpha_max);
        double scale = (double)d_nll[m];

        double weight_p, weight_q; /* responsibilities w_p, w_q (sum to 1) */
        if (row.a.alpha <= 0.0) {
            weight_p = 0.0;
            weight_q = 1.0;
        } else if (row.a.alpha >= 1.0) {
            weight_p = 1.0;
            weight_q = 0.0;
        } else {
            double log_r = -row.nll;
            weight_p = exp(row.log_term_p - log_r);
            weight_q = exp(row.log_term_q - log_r);
        }

        if (d_logits_q) {
            float *d_q = d_logits_q + m * V;
            /* scale * w_q * q_j = exp(x_j - max) * (scale * w_q / sum_exp) */
            const float coef = (float)(scale * weight_q / row.q.sum_exp), q_max = row.q.max;
#pragma omp simd
            for (int64_t j = 0; j < V; j++)
                d_q[j] += k_exp(lq[j] - q_max) * coef;
            d_q[y] -= (float)(scale * weight_q);
        }

        if (d_logits_p) {
            float *d_p = d_logits_p + m * V;
            int alpha_has_gradient = !alpha_detach && alpha_min < alpha_max && row.a.collision >= (double)alpha_min &&
                                     row.a.collision <= (double)alpha_max && row.a.alpha > 0.0 && row.a.alpha < 1.0;
            double d_alpha = 0.0; /* scale * dnll/dalpha */
            if (alpha_has_gradient) {
                double log_r = -row.nll;
                d_alpha = -scale * (exp(row.log_p_y - log_r) - exp(row.log_q_y - log_r));
            }
            const float inv_sum = (float)(1.0 / row.p.sum_exp), p_max = row.p.max;
            const float coef_p = (float)(scale * weight_p), coef_alpha = (float)(2.0 * d_alpha);
            const float collision = (float)row.a.collision;
            const int64_t imax = row.p.imax;
            const float d_p_imax = d_p[imax];
#pragma omp simd
            for (int64_t j = 0; j < V; j++) {
                const float p_j = k_exp(lp[j] - p_max) * inv_sum;
                d_p[j] += p_j * (coef_p + coef_alpha * (p_j - collision));
            }
            /* The maximal column again with p_max - S formed without cancellation. */
            const double p_imax = row.p.e_max / row.p.sum_exp;
            d_p[imax] = d_p_imax + (float)(p_imax * ((double)coef_p + (double)coef_alpha * row.a.pmax_minus_collision));
            d_p[y] -= coef_p;
        }
    }
}

static void mixture_backward(float *d_logits_p, float *d_logits_q, const float *d_nll, const float *logits_p,
                             const float *logits_q, const int32_t *targets, int64_t M, int64_t V, float alpha_min,
                             float alpha_max, int alpha_detach) {
    mixture_backward_saved(d_logits_p, d_logits_q, d_nll, logits_p, logits_q, targets, M, V, alpha_min, alpha_max,
                           alpha_detach, NULL);
}

const k_mixture_ops K_ISA_VARIANT_NAME(k_mixture_ops) = {
    .mixture_forward = mixture_forward,
    .mixture_forward_saving = mixture_forward_saving,
    .mixture_saved_bytes = mixture_saved_bytes,
    .mixture_alpha_range = mixture_alpha_range,
    .mixture_alpha = mixture_alpha,
    .mixture_backward = mixture_backward,
    .mixture_backward_saved = mixture_backward_saved,
};

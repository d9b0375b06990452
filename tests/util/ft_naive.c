/*
 * Naive attention, written from the definition in flashattn.h, on dense
 * (B, S, H, D) float arrays:
 *   - ft_naive_fwd / ft_naive_bwd: the "same storage precision" baseline of
 *     the tolerance rule. It is what a plain framework implementation does in
 *     half precision: products accumulated in float32, every materialised
 *     matrix (P, dP, dS) and every result rounded to the storage dtype.
 *   - ft_exact_fwd: the same in float64, for cases the library's reference
 *     cannot express (an explicit dropout mask).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

static float effective_scale(const ft_problem *p) {
    return p->opts.scale != 0.0f ? p->opts.scale : 1.0f / sqrtf((float)p->D);
}

static int64_t diag_offset(const ft_problem *p) {
    return p->opts.align == FA_ALIGN_TOP_LEFT ? 0 : p->Sk - p->Sq;
}

int ft_visible(const ft_problem *p, int64_t i, int64_t j) {
    int64_t left = -1, right = -1;
    if (p->opts.use_window) {
        left = p->opts.window_left;
        right = p->opts.window_right;
    }
    if (p->opts.causal) right = 0; /* (L, R) intersected with causal (-1, 0): R >= 0 always clips to 0 */
    int64_t c = i + diag_offset(p);
    if (left >= 0 && j < c - left) return 0;
    if (right >= 0 && j > c + right) return 0;
    return 1;
}

uint8_t *ft_masked_rows(const ft_problem *p, const float *lse, int64_t width) {
    int64_t n = p->B * p->Sq * p->Hq * width;
    uint8_t *z = malloc((size_t)n + 1);
    for (int64_t e = 0; e < n; ++e) {
        int64_t h = (e / width) % p->Hq, i = (e / (width * p->Hq)) % p->Sq, b = e / (width * p->Hq * p->Sq);
        z[e] = lse[(b * p->Hq + h) * p->Sq + i] == -INFINITY;
    }
    return z;
}

uint8_t *ft_unseen_keys(const ft_problem *p, int64_t width) {
    int64_t n = p->B * p->Sk * p->Hk * width;
    uint8_t *z = malloc((size_t)n + 1), *unseen = malloc((size_t)p->Sk + 1);
    for (int64_t j = 0; j < p->Sk; ++j) {
        int seen = 0;
        for (int64_t i = 0; i < p->Sq && !seen; ++i) seen = ft_visible(p, i, j);
        unseen[j] = !seen;
    }
    for (int64_t e = 0; e < n; ++e) z[e] = unseen[(e / (width * p->Hk)) % p->Sk];
    free(unseen);
    return z;
}

static double alibi_slope(const ft_problem *p, int64_t b, int64_t h) {
    if (!p->alibi) return 0.0;
    return p->alibi[(p->alibi_per_batch ? (b + p->batch0) * p->Hq : 0) + h];
}

/* 1 / (1 - p) times keep, or 1 without dropout. */
static double dropout_factor(const ft_problem *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    float dp = p->opts.dropout_p;
    if (!p->keep && dp == 0.0f) return 1.0;
    int keep = p->keep ? p->keep[((b * p->Hq + h) * p->Sq + i) * p->Sk + j]
                       : fa_dropout_keep(p->opts.dropout_seed, p->opts.dropout_offset, dp, b + p->batch0, h, i, j);
    return keep ? 1.0 / (1.0 - (double)dp) : 0.0;
}

#define QI(p, b, i, h) ((((b) * (p)->Sq + (i)) * (p)->Hq + (h)))
#define KJ(p, b, j, h) ((((b) * (p)->Sk + (j)) * (p)->Hk + (h)))

/* Scores of row i in float32 (raw before softcap in raw, if non-NULL); masked
 * keys get -inf. Returns the row max (-inf if every key is masked). */
static float score_row(const ft_problem *p, const float *q, const float *k, int64_t b, int64_t h,
                       int64_t i, float *s, float *raw) {
    int64_t hk = h / (p->Hq / p->Hk);
    float scale = effective_scale(p), cap = p->opts.softcap;
    float slope = (float)alibi_slope(p, b, h);
    float m = -INFINITY;
    const float *qi = q + QI(p, b, i, h) * p->D;
    for (int64_t j = 0; j < p->Sk; ++j) {
        if (!ft_visible(p, i, j)) {
            s[j] = -INFINITY;
            continue;
        }
        const float *kj = k + KJ(p, b, j, hk) * p->D;
        float acc = 0.0f;
        for (int64_t d = 0; d < p->D; ++d) acc += qi[d] * kj[d];
        float x = scale * acc;
        if (raw) raw[j] = x;
        if (cap > 0.0f) x = cap * tanhf(x / cap);
        x -= slope * fabsf((float)(i + diag_offset(p) - j));
        s[j] = x;
        if (x > m) m = x;
    }
    return m;
}

/* Normalised softmax of the row in place (float32); returns lse. */
static float softmax_row(int64_t n, float *s, float m) {
    if (m == -INFINITY) {
        for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
        return -INFINITY;
    }
    float l = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
        s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - m);
        l += s[j];
    }
    for (int64_t j = 0; j < n; ++j) s[j] /= l;
    return m + logf(l);
}

void ft_naive_fwd(const ft_problem *p, fa_dtype t, const float *q, const float *k, const float *v,
                  float *out, float *lse) {
    float *s = malloc((size_t)(p->Sk + 1) * sizeof(float));
    float *acc = malloc((size_t)(p->Dv + 1) * sizeof(float));
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            int64_t hk = h / (p->Hq / p->Hk);
            for (int64_t i = 0; i < p->Sq; ++i) {
                float m = score_row(p, q, k, b, h, i, s, NULL);
                float row_lse = softmax_row(p->Sk, s, m);
                memset(acc, 0, (size_t)p->Dv * sizeof(float));
                for (int64_t j = 0; j < p->Sk; ++j) {
                    float pj = ft_round(t, (float)(s[j] * dropout_factor(p, b, h, i, j))); /* P in storage precision */
                    const float *vj = v + KJ(p, b, j, hk) * p->Dv;
                    for (int64_t d = 0; d < p->Dv; ++d) acc[d] += pj * vj[d];
                }
                float *o = out + QI(p, b, i, h) * p->Dv;
                for (int64_t d = 0; d < p->Dv; ++d) o[d] = ft_round(t, acc[d]);
                if (lse) lse[(b * p->Hq + h) * p->Sq + i] = row_lse;
            }
        }
    free(s);
    free(acc);
}

void ft_naive_bwd(const ft_problem *p, fa_dtype t, const float *q, const float *k, const float *v,
                  const float *dout, float *dq, float *dk, float *dv) {
    int64_t Sk = p->Sk, D = p->D, Dv = p->Dv;
    float scale = effective_scale(p), cap = p->opts.softcap;
    float *s = malloc((size_t)(Sk + 1) * sizeof(float));
    float *raw = malloc((size_t)(Sk + 1) * sizeof(float));
    float *ds = malloc((size_t)(Sk + 1) * sizeof(float));
    float *dqa = malloc((size_t)(D + 1) * sizeof(float));
    size_t nk = (size_t)(p->B * Sk * p->Hk);
    float *dka = calloc(nk * (size_t)D + 1, sizeof(float));
    float *dva = calloc(nk * (size_t)Dv + 1, sizeof(float));
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            int64_t hk = h / (p->Hq / p->Hk);
            for (int64_t i = 0; i < p->Sq; ++i) {
                float m = score_row(p, q, k, b, h, i, s, raw);
                softmax_row(Sk, s, m);
                const float *qi = q + QI(p, b, i, h) * D;
                const float *doi = dout + QI(p, b, i, h) * Dv;
                float di = 0.0f;
                for (int64_t j = 0; j < Sk; ++j) {
                    ds[j] = 0.0f;
                    if (s[j] == 0.0f) continue;
                    double f = dropout_factor(p, b, h, i, j);
                    const float *vj = v + KJ(p, b, j, hk) * Dv;
                    float *dvj = dva + KJ(p, b, j, hk) * Dv;
                    float pd = ft_round(t, (float)(s[j] * f)); /* dropped P as the forward stored it */
                    float dp = 0.0f;
                    for (int64_t d = 0; d < Dv; ++d) {
                        dvj[d] += pd * doi[d];
                        dp += doi[d] * vj[d];
                    }
                    dp = ft_round(t, ft_round(t, dp) * (float)f); /* dP, then back through the dropout */
                    ds[j] = dp;
                    di += ft_round(t, s[j]) * dp;
                }
                memset(dqa, 0, (size_t)D * sizeof(float));
                for (int64_t j = 0; j < Sk; ++j) {
                    if (s[j] == 0.0f) continue;
                    float g = ft_round(t, ft_round(t, s[j]) * (ds[j] - di)); /* softmax backward */
                    if (cap > 0.0f) {
                        float th = tanhf(raw[j] / cap);
                        g = ft_round(t, g * (1.0f - th * th)); /* through the softcap */
                    }
                    const float *kj = k + KJ(p, b, j, hk) * D;
                    float *dkj = dka + KJ(p, b, j, hk) * D;
                    for (int64_t d = 0; d < D; ++d) {
                        dqa[d] += g * kj[d];
                        dkj[d] += g * qi[d];
                    }
                }
                float *dqi = dq + QI(p, b, i, h) * D;
                for (int64_t d = 0; d < D; ++d) dqi[d] = ft_round(t, scale * dqa[d]);
            }
        }
    for (size_t e = 0; e < nk * (size_t)D; ++e) dk[e] = ft_round(t, scale * dka[e]);
    for (size_t e = 0; e < nk * (size_t)Dv; ++e) dv[e] = ft_round(t, dva[e]);
    free(s);
    free(raw);
    free(ds);
    free(dqa);
    free(dka);
    free(dva);
}

void ft_exact_fwd(const ft_problem *p, const float *q, const float *k, const float *v,
                  double *out, double *lse) {
    double scale = effective_scale(p), cap = p->opts.softcap;
    double *s = malloc((size_t)(p->Sk + 1) * sizeof(double));
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t h = 0; h < p->Hq; ++h) {
            int64_t hk = h / (p->Hq / p->Hk);
            double slope = alibi_slope(p, b, h);
            for (int64_t i = 0; i < p->Sq; ++i) {
                const float *qi = q + QI(p, b, i, h) * p->D;
                double m = -INFINITY;
                for (int64_t j = 0; j < p->Sk; ++j) {
                    s[j] = -INFINITY;
                    if (!ft_visible(p, i, j)) continue;
                    const float *kj = k + KJ(p, b, j, hk) * p->D;
                    double acc = 0.0;
                    for (int64_t d = 0; d < p->D; ++d) acc += (double)qi[d] * kj[d];
                    double x = scale * acc;
                    if (cap > 0.0) x = cap * tanh(x / cap);
                    x -= slope * fabs((double)(i + diag_offset(p) - j));
                    s[j] = x;
                    if (x > m) m = x;
                }
                double l = 0.0;
                for (int64_t j = 0; j < p->Sk; ++j) {
                    s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - m);
                    l += s[j];
                }
                double *o = out + QI(p, b, i, h) * p->Dv;
                for (int64_t d = 0; d < p->Dv; ++d) o[d] = 0.0;
                if (lse) lse[(b * p->Hq + h) * p->Sq + i] = l > 0.0 ? m + log(l) : -INFINITY;
                if (l == 0.0) continue;
                for (int64_t j = 0; j < p->Sk; ++j) {
                    double pj = s[j] / l * dropout_factor(p, b, h, i, j);
                    const float *vj = v + KJ(p, b, j, hk) * p->Dv;
                    for (int64_t d = 0; d < p->Dv; ++d) o[d] += pj * vj[d];
                }
            }
        }
    free(s);
}

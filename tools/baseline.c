#include "baseline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "convert.h"
#include "parallel.h"

/* Round a float32 value to the storage precision and back. Intermediates of
 * float32 and float8 attention stay float32 (e4m3 kernels keep scores and
 * softmax in float32), so only the half dtypes round. */
static float round_to(fa_dtype t, float x) {
    if (t == FA_BF16) return fa_bf16_to_f32(fa_f32_to_bf16(x));
    if (t == FA_F16) return fa_f16_to_f32(fa_f32_to_f16(x));
    return x;
}

static const float *q_row(const cli_attention *a, const float *base, int64_t b, int64_t i, int64_t h, int64_t d) {
    return base + ((b * a->Sq + i) * a->Hq + h) * d;
}
static const float *k_row(const cli_attention *a, const float *base, int64_t b, int64_t j, int64_t h, int64_t d) {
    return base + ((b * a->Sk + j) * a->Hk + h) * d;
}

/* Per-row scratch of one work unit. */
typedef struct row_scratch {
    float *qs;    /* q * scale, rounded (D) */
    float *th;    /* softcap: tanh(raw / c), rounded (Sk) */
    float *p;     /* probabilities, rounded (Sk) */
    float *pd;    /* probabilities after dropout (Sk) */
    float *dp;    /* gradient of the probabilities (Sk) */
} row_scratch;

/* Probability P_j of a row whose softmax denominator is l, from e = exp(s_j - m),
 * as P V reads it. An e4m3 kernel rounds the unnormalised e (at most 1) to
 * e4m3 and divides by l in float32 (here before the sum, the same up to
 * float32 rounding); a half-precision framework stores the normalised P. */
static float row_prob(fa_dtype t, float e, float l) {
    if (t == FA_F8_E4M3) return fa_e4m3_to_f32(fa_f32_to_e4m3(e)) / l;
    return round_to(t, e / l);
}

/* Rounded probabilities of row i of head h; returns the row's lse. abs_max,
 * if not NULL, gets the row's largest scale * sum_d |q_d k_d| over its
 * visible keys (0 without any). */
static float row_probs(const cli_attention *a, int64_t b, int64_t h, int64_t i, row_scratch *r, float *abs_max) {
    const int64_t group = a->Hq / a->Hk, kvh = h / group;
    const float *q = q_row(a, a->q, b, i, h, a->D);
    for (int64_t d = 0; d < a->D; ++d) r->qs[d] = round_to(a->dtype, q[d] * a->scale);
    const int64_t diag = i + (a->top_left ? 0 : a->Sk - a->Sq);
    float m = -INFINITY;
    if (abs_max) *abs_max = 0;
    for (int64_t j = 0; j < a->Sk; ++j) {
        int visible = (a->window_left < 0 || j >= diag - a->window_left) &&
                      (a->window_right < 0 || j <= diag + a->window_right);
        if (!visible) {
            r->p[j] = -INFINITY;
            continue;
        }
        const float *k = k_row(a, a->k, b, j, kvh, a->D);
        float s = 0;
        for (int64_t d = 0; d < a->D; ++d) s += r->qs[d] * k[d];
        s = round_to(a->dtype, s);
        if (abs_max) { /* qs holds q * scale */
            float sa = 0;
            for (int64_t d = 0; d < a->D; ++d) sa += fabsf(r->qs[d] * k[d]);
            if (sa > *abs_max) *abs_max = sa;
        }
        if (a->softcap > 0) {
            r->th[j] = round_to(a->dtype, tanhf(s / a->softcap));
            s = round_to(a->dtype, a->softcap * r->th[j]);
        }
        if (a->alibi) s -= a->alibi[h] * fabsf((float)(diag - j)); /* float32 bias, as a framework adds it */
        r->p[j] = s;
        if (s > m) m = s;
    }
    if (m == -INFINITY) { /* no visible key: zero probabilities */
        for (int64_t j = 0; j < a->Sk; ++j) r->p[j] = r->pd[j] = 0;
        return -INFINITY;
    }
    float l = 0;
    for (int64_t j = 0; j < a->Sk; ++j) l += (r->p[j] = expf(r->p[j] - m));
    for (int64_t j = 0; j < a->Sk; ++j) {
        r->p[j] = row_prob(a->dtype, r->p[j], l);
        int keep = a->dropout_p <= 0 ||
                   fa_dropout_keep(a->dropout_seed, a->dropout_offset, a->dropout_p, b, h, i, j);
        r->pd[j] = keep ? r->p[j] : 0;
    }
    return m + logf(l);
}

typedef struct naive_job {
    const cli_attention *a;
    float *out, *lse;          /* forward */
    float *score_abs;          /* forward, optional: the float8 lse bound's size per row */
    float *dq, *dk, *dv;       /* backward */
} naive_job;

static int scratch_alloc(const cli_attention *a, row_scratch *r) {
    size_t sk = (size_t)(a->Sk ? a->Sk : 1);
    r->qs = malloc(sizeof(float) * (size_t)a->D);
    r->th = malloc(sizeof(float) * sk);
    r->p = malloc(sizeof(float) * sk);
    r->pd = malloc(sizeof(float) * sk);
    r->dp = malloc(sizeof(float) * sk);
    return r->qs && r->th && r->p && r->pd && r->dp;
}

static void scratch_free(row_scratch *r) {
    free(r->qs); free(r->th); free(r->p); free(r->pd); free(r->dp);
}

/* v / (1 - p) rounded, the dropout-scaled values a framework multiplies by. */
static float v_scaled(const cli_attention *a, float v) {
    return a->dropout_p > 0 ? round_to(a->dtype, v * (1.0f / (1.0f - a->dropout_p))) : v;
}

/* One forward unit = one (batch, query head). */
static void fwd_unit(void *arg, int unit) {
    naive_job *job = arg;
    const cli_attention *a = job->a;
    const int64_t b = unit / a->Hq, h = unit % a->Hq, kvh = h / (a->Hq / a->Hk);
    const fa_dtype out_t = fa_out_dtype(a->dtype);
    row_scratch r;
    if (!scratch_alloc(a, &r)) abort();
    float *acc = malloc(sizeof(float) * (size_t)a->Dv);
    if (!acc) abort();
    for (int64_t i = 0; i < a->Sq; ++i) {
        const int64_t row = (b * a->Hq + h) * a->Sq + i; /* in the (B, Hq, Sq) lse layout */
        job->lse[row] = row_probs(a, b, h, i, &r, job->score_abs ? &job->score_abs[row] : NULL);
        memset(acc, 0, sizeof(float) * (size_t)a->Dv);
        for (int64_t j = 0; j < a->Sk; ++j) {
            if (r.pd[j] == 0) continue;
            const float *v = k_row(a, a->v, b, j, kvh, a->Dv);
            for (int64_t d = 0; d < a->Dv; ++d) acc[d] += r.pd[j] * v_scaled(a, v[d]);
        }
        float *o = (float *)q_row(a, job->out, b, i, h, a->Dv);
        for (int64_t d = 0; d < a->Dv; ++d) o[d] = round_to(out_t, acc[d]);
    }
    free(acc);
    scratch_free(&r);
}

void cli_naive_fwd(const cli_attention *a, float *out, float *lse, float *score_abs, int threads) {
    naive_job job = {a, out, lse, score_abs, NULL, NULL, NULL};
    cli_parallel_for((int)(a->B * a->Hq), threads, fwd_unit, &job);
}

/* One backward unit = one (batch, kv head) with all query heads of its group,
 * so the group's sums of dk and dv stay in one place. */
static void bwd_unit(void *arg, int unit) {
    naive_job *job = arg;
    const cli_attention *a = job->a;
    const int64_t group = a->Hq / a->Hk, b = unit / a->Hk, kvh = unit % a->Hk;
    const int64_t D = a->D, Dv = a->Dv, Sk = a->Sk;
    row_scratch r;
    if (!scratch_alloc(a, &r)) abort();
    /* Per-head gradient sums (float32), and the group totals they are rounded into. */
    float *dk_head = malloc(sizeof(float) * (size_t)(Sk * D + 1));
    float *dv_head = malloc(sizeof(float) * (size_t)(Sk * Dv + 1));
    float *dk_sum = calloc((size_t)(Sk * D + 1), sizeof(float));
    float *dv_sum = calloc((size_t)(Sk * Dv + 1), sizeof(float));
    float *acc = malloc(sizeof(float) * (size_t)D);
    if (!dk_head || !dv_head || !dk_sum || !dv_sum || !acc) abort();
    const float keep_scale = a->dropout_p > 0 ? 1.0f / (1.0f - a->dropout_p) : 1.0f;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        memset(dk_head, 0, sizeof(float) * (size_t)(Sk * D));
        memset(dv_head, 0, sizeof(float) * (size_t)(Sk * Dv));
        for (int64_t i = 0; i < a->Sq; ++i) {
            if (row_probs(a, b, h, i, &r, NULL) == -INFINITY) { /* no key: zero dq row, nothing to dk/dv */
                float *dq = (float *)q_row(a, job->dq, b, i, h, D);
                for (int64_t d = 0; d < D; ++d) dq[d] = 0;
                continue;
            }
            const float *dout = q_row(a, a->dout, b, i, h, Dv);
            float dsum = 0; /* sum_j P_ij dP_ij, the softmax backward's row term */
            for (int64_t j = 0; j < Sk; ++j) {
                r.dp[j] = 0;
                if (r.p[j] == 0) continue;
                const float *v = k_row(a, a->v, b, j, kvh, Dv);
                float s = 0;
                for (int64_t d = 0; d < Dv; ++d) s += dout[d] * v_scaled(a, v[d]);
                /* Gradient of the dropped probability; dropped entries get none. */
                r.dp[j] = r.pd[j] != 0 || a->dropout_p <= 0 ? round_to(a->dtype, s) : 0;
                if (r.pd[j] != 0)
                    for (int64_t d = 0; d < Dv; ++d) dv_head[j * Dv + d] += r.pd[j] * dout[d];
                dsum += r.p[j] * r.dp[j];
            }
            memset(acc, 0, sizeof(float) * (size_t)D);
            for (int64_t j = 0; j < Sk; ++j) {
                if (r.p[j] == 0) continue;
                float ds = round_to(a->dtype, r.p[j] * (r.dp[j] - dsum));
                if (a->softcap > 0) ds = round_to(a->dtype, ds * (1 - r.th[j] * r.th[j])); /* d tanh */
                const float *k = k_row(a, a->k, b, j, kvh, D);
                for (int64_t d = 0; d < D; ++d) {
                    acc[d] += ds * k[d];
                    dk_head[j * D + d] += ds * r.qs[d];
                }
            }
            float *dq = (float *)q_row(a, job->dq, b, i, h, D);
            for (int64_t d = 0; d < D; ++d) dq[d] = round_to(a->dtype, round_to(a->dtype, acc[d]) * a->scale);
        }
        /* This head's gradients, rounded as a framework stores them, join the group sum. */
        for (int64_t e = 0; e < Sk * D; ++e) dk_sum[e] += round_to(a->dtype, dk_head[e]);
        for (int64_t e = 0; e < Sk * Dv; ++e)
            dv_sum[e] += round_to(a->dtype, round_to(a->dtype, dv_head[e]) * keep_scale);
    }
    for (int64_t j = 0; j < Sk; ++j) {
        float *dk = (float *)k_row(a, job->dk, b, j, kvh, D);
        float *dv = (float *)k_row(a, job->dv, b, j, kvh, Dv);
        for (int64_t d = 0; d < D; ++d) dk[d] = round_to(a->dtype, dk_sum[j * D + d]);
        for (int64_t d = 0; d < Dv; ++d) dv[d] = round_to(a->dtype, dv_sum[j * Dv + d]);
    }
    free(dk_head); free(dv_head); free(dk_sum); free(dv_sum); free(acc);
    scratch_free(&r);
}

void cli_naive_bwd(const cli_attention *a, float *dq, float *dk, float *dv, int threads) {
    naive_job job = {a, NULL, NULL, NULL, dq, dk, dv};
    cli_parallel_for((int)(a->B * a->Hk), threads, bwd_unit, &job);
}

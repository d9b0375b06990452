/*
 * float8 e4m3 forward: q, k, v in e4m3 with per-(batch, kv head) descales,
 * bfloat16 output. Truth is the float64 reference on the exactly dequantised
 * inputs (q * q_descale, ...). The backend under test must be within twice
 * the error of a naive implementation in the same precision (float32
 * scores, P rounded to e4m3 before P V, output rounded to bfloat16) plus half
 * a bfloat16 ulp of the largest output. lse is checked against a bound on
 * the scores' accumulation error: Hopper's e4m3 tensor cores keep only about
 * 14 bits while summing Q K^T (float32 keeps 24) and truncate, so the errors
 * of one k-group share a sign; a score may be off by a few 2^-13 of
 * scale * sum_d |q_d k_d| per 128 head-dim columns (a k-group is 32 of them,
 * and each one's loss adds up). lse moves by at most the largest score
 * error, so the test allows 2^-12 of the largest such sum over the row's
 * visible keys, D / 128 times that above head dim 128, plus 1e-4 for exp and
 * log (the Hopper kernels used at most 0.66 of that bound on these cases).
 * The CPU backends compute it in float32 and float64 from the exactly
 * dequantised values; backends without float8 (sm80) skip with their
 * message.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

typedef struct f8case {
    const char *label;
    int64_t B, Sq, Sk, Hq, Hk, D;
    int causal;
    float softcap;
    double qk_scale; /* magnitude of the random q, k before quantisation */
} f8case;

/* Visible keys [lo, hi) of query i (bottom-right aligned causal, or all). */
static void key_range(const f8case *c, int64_t i, int64_t *lo, int64_t *hi) {
    *lo = 0;
    *hi = c->causal ? i + (c->Sk - c->Sq) + 1 : c->Sk;
    if (*hi > c->Sk) *hi = c->Sk;
    if (*hi < 0) *hi = 0;
}

static float round_e4m3(float v) {
    ft_tensor t = ft_alloc(FA_F8_E4M3, 1, (int64_t[]){1}, FT_CONTIG);
    float *one = &v;
    ft_from_f32(&t, one);
    float r = ft_get(&t, t.offset);
    ft_free(&t);
    return r;
}

/* Naive same-precision output (B, Sq, Hq, D) and lse (B, Hq, Sq) from
 * dequantised dense float copies; abs_dot (B, Hq, Sq) gets each row's
 * largest scale * sum_d |q_d k_d| over its visible keys, times D / 128 above
 * head dim 128 (the k-groups whose losses add up, see above). */
static void naive_fp8(const f8case *c, const float *q, const float *k, const float *v8, const float *vdesc,
                      float *out, float *lse, float *abs_dot) {
    const float scale = 1.0f / sqrtf((float)c->D);
    float *s = malloc((size_t)(c->Sk + 1) * sizeof(float));
    float *o = malloc((size_t)c->D * sizeof(float));
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t h = 0; h < c->Hq; ++h) {
            int64_t kh = h / (c->Hq / c->Hk);
            float vd = vdesc[b * c->Hk + kh];
            for (int64_t i = 0; i < c->Sq; ++i) {
                const float *qi = q + ((b * c->Sq + i) * c->Hq + h) * c->D;
                float *oi = out + ((b * c->Sq + i) * c->Hq + h) * c->D;
                int64_t lo, hi;
                key_range(c, i, &lo, &hi);
                float m = -INFINITY, amax = 0.f;
                for (int64_t j = lo; j < hi; ++j) {
                    const float *kj = k + ((b * c->Sk + j) * c->Hk + kh) * c->D;
                    float a = 0.f, aa = 0.f;
                    for (int64_t d = 0; d < c->D; ++d) a += qi[d] * kj[d], aa += fabsf(qi[d] * kj[d]);
                    a *= scale;
                    amax = fmaxf(amax, aa * scale);
                    if (c->softcap > 0.f) a = c->softcap * tanhf(a / c->softcap);
                    s[j] = a;
                    m = fmaxf(m, a);
                }
                abs_dot[(b * c->Hq + h) * c->Sq + i] = amax * fmaxf(1.f, (float)c->D / 128.f);
                if (hi <= lo) {
                    for (int64_t d = 0; d < c->D; ++d) oi[d] = 0.f;
                    lse[(b * c->Hq + h) * c->Sq + i] = -INFINITY;
                    continue;
                }
                float l = 0.f;
                for (int64_t d = 0; d < c->D; ++d) o[d] = 0.f;
                for (int64_t j = lo; j < hi; ++j) {
                    float p = expf(s[j] - m);
                    l += p;
                    float pr = round_e4m3(p); /* P in e4m3 */
                    const float *vj = v8 + ((b * c->Sk + j) * c->Hk + kh) * c->D;
                    for (int64_t d = 0; d < c->D; ++d) o[d] += pr * vj[d];
                }
                for (int64_t d = 0; d < c->D; ++d) oi[d] = ft_round(FA_BF16, o[d] * vd / l);
                lse[(b * c->Hq + h) * c->Sq + i] = m + logf(l);
            }
        }
    free(s);
    free(o);
}

/* Checks the backend's out and lse (downloaded) against the truth (ro, rl)
 * and the naive baseline's out (n_out), each row's lse bound from n_abs:
 * out within twice the naive error plus half a bfloat16 ulp of the largest
 * output, lse within its bound, rows without keys -inf, nothing unwritten
 * and the padding intact. */
static void check_outputs(const char *name, ft_tensor *out, ft_tensor *lse, const float *ro, const float *rl,
                          const float *n_out, const float *n_abs) {
    const int64_t no = ft_numel(out), nl = ft_numel(lse);
    float *got = ft_to_f32(out), *got_lse = ft_to_f32(lse);
    double err = 0, err_naive = 0, maxref = 0, err_lse = 0, lse_excess = 0; /* lse: error over its bound */
    int64_t bad_empty = 0, nan_out = 0;
    for (int64_t e = 0; e < no; ++e) {
        if (isnan(got[e])) {
            ++nan_out;
            continue;
        }
        err = fmax(err, fabs((double)got[e] - ro[e]));
        err_naive = fmax(err_naive, fabs((double)n_out[e] - ro[e]));
        maxref = fmax(maxref, fabs((double)ro[e]));
    }
    for (int64_t e = 0; e < nl; ++e) {
        if (rl[e] == -INFINITY) { /* no visible key: out 0 (checked through ro = 0), lse -inf */
            if (got_lse[e] != -INFINITY) ++bad_empty;
            continue;
        }
        if (isnan(got_lse[e])) ++nan_out;
        else {
            double d = fabs((double)got_lse[e] - rl[e]), bound = ldexp((double)n_abs[e], -12) + 1e-4;
            err_lse = fmax(err_lse, d);
            lse_excess = fmax(lse_excess, d / bound);
        }
    }
    double half_ulp = maxref > 0 ? ldexp(1.0, (int)floor(log2(maxref)) - 8) : 0.0;
    double tol = 2 * err_naive + half_ulp;
    int pad_ok = ft_padding_intact(out) && ft_padding_intact(lse);
    int ok = nan_out == 0 && bad_empty == 0 && pad_ok && err <= tol && lse_excess <= 1.0;
    ft_check(ok, name,
             "out err %.3g (naive %.3g, tol %.3g), lse err %.3g (at most %.2f of its bound), unwritten %lld, empty rows wrong %lld%s",
             err, err_naive, tol, err_lse, lse_excess, (long long)nan_out, (long long)bad_empty, pad_ok ? "" : ", padding written");
    free(got), free(got_lse);
}

/* The descales (q, k, v) of the call under test. */
static void set_descales(fa_options *opts, ft_tensor desc[3]) {
    opts->q_descale = ft_arg(&desc[0]);
    opts->k_descale = ft_arg(&desc[1]);
    opts->v_descale = ft_arg(&desc[2]);
}

/* Whether the call under test (status st) ran: then out and lse are
 * downloaded; a backend without float8 skips, any other error fails. */
static int backend_ran(const char *name, const char *call, fa_status st, ft_tensor *out, ft_tensor *lse) {
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
        return 0;
    }
    if (st != FA_OK) {
        ft_fail(name, "%s: %s %s", call, fa_status_name(st), fa_last_error());
        return 0;
    }
    ft_download(out);
    ft_download(lse);
    return 1;
}

static void run_case(const f8case *c) {
    char name[200];
    snprintf(name, sizeof name, "e4m3 %s B%lld S%lldx%lld H%lld/%lld D%lld", c->label, (long long)c->B,
             (long long)c->Sq, (long long)c->Sk, (long long)c->Hq, (long long)c->Hk, (long long)c->D);
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    ft_tensor q = ft_alloc4(FA_F8_E4M3, c->B, c->Sq, c->Hq, c->D, FT_PADDED);
    ft_tensor k = ft_alloc4(FA_F8_E4M3, c->B, c->Sk, c->Hk, c->D, FT_PADDED);
    ft_tensor v = ft_alloc4(FA_F8_E4M3, c->B, c->Sk, c->Hk, c->D, FT_PADDED);
    ft_fill_normal(&q, &r, c->qk_scale);
    ft_fill_normal(&k, &r, c->qk_scale);
    ft_fill_normal(&v, &r, 1.0);
    ft_tensor desc[3];
    for (int i = 0; i < 3; ++i) {
        desc[i] = ft_alloc(FA_F32, 2, (int64_t[]){c->B, c->Hk}, FT_CONTIG);
        for (int64_t e = 0; e < c->B * c->Hk; ++e) ((float *)desc[i].host)[e] = (float)(0.5 + 1.5 * ft_rng_uniform(&r));
    }
    const float *dq = (const float *)desc[0].host, *dk = (const float *)desc[1].host, *dv = (const float *)desc[2].host;

    /* Dense dequantised copies: raw e4m3 values, then times the descales. */
    float *qf = ft_to_f32(&q), *kf = ft_to_f32(&k), *v8 = ft_to_f32(&v);
    float *vf = malloc((size_t)ft_numel(&v) * sizeof(float));
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t s = 0; s < c->Sq; ++s)
            for (int64_t h = 0; h < c->Hq; ++h)
                for (int64_t d = 0; d < c->D; ++d)
                    qf[((b * c->Sq + s) * c->Hq + h) * c->D + d] *= dq[b * c->Hk + h / (c->Hq / c->Hk)];
    for (int64_t b = 0; b < c->B; ++b)
        for (int64_t s = 0; s < c->Sk; ++s)
            for (int64_t h = 0; h < c->Hk; ++h)
                for (int64_t d = 0; d < c->D; ++d) {
                    int64_t e = ((b * c->Sk + s) * c->Hk + h) * c->D + d;
                    kf[e] *= dk[b * c->Hk + h];
                    vf[e] = v8[e] * dv[b * c->Hk + h];
                }

    /* Truth: float64 reference on float32 tensors holding the dequantised values (exact). */
    ft_tensor tq = ft_alloc4(FA_F32, c->B, c->Sq, c->Hq, c->D, FT_CONTIG);
    ft_tensor tk = ft_alloc4(FA_F32, c->B, c->Sk, c->Hk, c->D, FT_CONTIG);
    ft_tensor tv = ft_alloc4(FA_F32, c->B, c->Sk, c->Hk, c->D, FT_CONTIG);
    ft_from_f32(&tq, qf);
    ft_from_f32(&tk, kf);
    ft_from_f32(&tv, vf);
    ft_tensor oref = ft_alloc4(FA_F32, c->B, c->Sq, c->Hq, c->D, FT_CONTIG);
    ft_tensor lref = ft_alloc(FA_F32, 3, (int64_t[]){c->B, c->Hq, c->Sq}, FT_CONTIG);
    fa_options opts;
    memset(&opts, 0, sizeof opts);
    opts.causal = c->causal;
    opts.softcap = c->softcap;
    fa_tensor a[5] = {ft_view(&tq, 0), ft_view(&tk, 0), ft_view(&tv, 0), ft_view(&oref, 0), ft_view(&lref, 0)};
    fa_status st = fa_fwd(ft_ref_ctx, &a[0], &a[1], &a[2], &opts, &a[3], &a[4]);
    ft_tensor out = ft_alloc4(FA_BF16, c->B, c->Sq, c->Hq, c->D, FT_PADDED);
    ft_tensor lse = ft_alloc(FA_F32, 3, (int64_t[]){c->B, c->Hq, c->Sq}, FT_PADDED);
    float *n_out = NULL, *n_lse = NULL, *n_abs = NULL;
    if (st != FA_OK) {
        ft_fail(name, "reference: %s %s", fa_status_name(st), fa_last_error());
        goto done;
    }

    /* The backend under test on the e4m3 tensors. */
    set_descales(&opts, desc);
    fa_tensor xq = ft_arg(&q), xk = ft_arg(&k), xv = ft_arg(&v), xo = ft_arg(&out), xl = ft_arg(&lse);
    st = fa_fwd(ft_ctx, &xq, &xk, &xv, &opts, &xo, &xl);
    if (!backend_ran(name, "fwd", st, &out, &lse)) goto done;

    int64_t no = ft_numel(&out), nl = ft_numel(&lse);
    n_out = malloc((size_t)no * sizeof(float));
    n_lse = malloc((size_t)nl * sizeof(float));
    n_abs = malloc((size_t)nl * sizeof(float));
    naive_fp8(c, qf, kf, v8, dv, n_out, n_lse, n_abs);
    check_outputs(name, &out, &lse, (const float *)oref.host, (const float *)lref.host, n_out, n_abs);

done:
    free(qf), free(kf), free(v8), free(vf), free(n_out), free(n_lse), free(n_abs);
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&tq), ft_free(&tk), ft_free(&tv), ft_free(&oref), ft_free(&lref);
    ft_free(&out), ft_free(&lse);
    for (int i = 0; i < 3; ++i) ft_free(&desc[i]);
}

/* Packed (varlen) sequences: q (total_q, Hq, D), k and v (total_k, Hk, D),
 * descales per (sequence, kv head), out (total_q, Hq, D), lse (Hq, total_q).
 * Truth is the float64 reference's varlen forward on the dequantised
 * values; the naive baseline runs naive_fp8 one sequence at a time. The
 * same tolerances as run_case. */
typedef struct f8varlen {
    const char *label;
    int nseq;
    const int *lq, *lk;
    int64_t Hq, Hk, D;
    int causal;
    float softcap;
    double qk_scale;
} f8varlen;

static void run_varlen_case(const f8varlen *c) {
    char name[200];
    snprintf(name, sizeof name, "e4m3 varlen %s, %d sequences, H%lld/%lld D%lld", c->label, c->nseq,
             (long long)c->Hq, (long long)c->Hk, (long long)c->D);
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    ft_tensor cu[2];
    int64_t total[2] = {0, 0};
    int maxlen[2] = {0, 0};
    for (int t = 0; t < 2; ++t) {
        const int *len = t ? c->lk : c->lq;
        cu[t] = ft_alloc(FA_I32, 1, (int64_t[]){c->nseq + 1}, FT_CONTIG);
        int32_t *x = (int32_t *)cu[t].host;
        x[0] = 0;
        for (int b = 0; b < c->nseq; ++b) {
            x[b + 1] = x[b] + len[b];
            if (len[b] > maxlen[t]) maxlen[t] = len[b];
        }
        total[t] = x[c->nseq];
    }
    const int32_t *cuq = (const int32_t *)cu[0].host, *cuk = (const int32_t *)cu[1].host;
    const int64_t TQ = total[0], TK = total[1], Hq = c->Hq, Hk = c->Hk, D = c->D;
    ft_tensor q = ft_alloc(FA_F8_E4M3, 3, (int64_t[]){TQ, Hq, D}, FT_PADDED);
    ft_tensor k = ft_alloc(FA_F8_E4M3, 3, (int64_t[]){TK, Hk, D}, FT_PADDED);
    ft_tensor v = ft_alloc(FA_F8_E4M3, 3, (int64_t[]){TK, Hk, D}, FT_PADDED);
    ft_fill_normal(&q, &r, c->qk_scale);
    ft_fill_normal(&k, &r, c->qk_scale);
    ft_fill_normal(&v, &r, 1.0);
    ft_tensor desc[3];
    for (int i = 0; i < 3; ++i) {
        desc[i] = ft_alloc(FA_F32, 2, (int64_t[]){c->nseq, Hk}, FT_CONTIG);
        for (int64_t e = 0; e < c->nseq * Hk; ++e) ((float *)desc[i].host)[e] = (float)(0.5 + 1.5 * ft_rng_uniform(&r));
    }
    const float *dq = (const float *)desc[0].host, *dk = (const float *)desc[1].host, *dv = (const float *)desc[2].host;

    /* Dense dequantised copies (raw e4m3 values times their sequence's descales). */
    float *qf = ft_to_f32(&q), *kf = ft_to_f32(&k), *v8 = ft_to_f32(&v);
    float *vf = malloc((size_t)(TK * Hk * D + 1) * sizeof(float));
    for (int b = 0; b < c->nseq; ++b) {
        for (int64_t s = cuq[b]; s < cuq[b + 1]; ++s)
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t d = 0; d < D; ++d) qf[(s * Hq + h) * D + d] *= dq[b * Hk + h / (Hq / Hk)];
        for (int64_t s = cuk[b]; s < cuk[b + 1]; ++s)
            for (int64_t h = 0; h < Hk; ++h)
                for (int64_t d = 0; d < D; ++d) {
                    const int64_t e = (s * Hk + h) * D + d;
                    kf[e] *= dk[b * Hk + h];
                    vf[e] = v8[e] * dv[b * Hk + h];
                }
    }

    /* Truth: the float64 reference's varlen forward on float32 tensors holding the dequantised values. */
    ft_tensor tq = ft_alloc(FA_F32, 3, (int64_t[]){TQ, Hq, D}, FT_CONTIG);
    ft_tensor tk = ft_alloc(FA_F32, 3, (int64_t[]){TK, Hk, D}, FT_CONTIG);
    ft_tensor tv = ft_alloc(FA_F32, 3, (int64_t[]){TK, Hk, D}, FT_CONTIG);
    ft_from_f32(&tq, qf);
    ft_from_f32(&tk, kf);
    ft_from_f32(&tv, vf);
    ft_tensor oref = ft_alloc(FA_F32, 3, (int64_t[]){TQ, Hq, D}, FT_CONTIG);
    ft_tensor lref = ft_alloc(FA_F32, 2, (int64_t[]){Hq, TQ}, FT_CONTIG);
    fa_options opts;
    memset(&opts, 0, sizeof opts);
    opts.causal = c->causal;
    opts.softcap = c->softcap;
    fa_tensor a[7] = {ft_view(&tq, 0), ft_view(&tk, 0),    ft_view(&tv, 0),  ft_view(&cu[0], 0),
                      ft_view(&cu[1], 0), ft_view(&oref, 0), ft_view(&lref, 0)};
    fa_status st = fa_varlen_fwd(ft_ref_ctx, &a[0], &a[1], &a[2], &a[3], &a[4], 0, 0, &opts, &a[5], &a[6]);
    ft_tensor out = ft_alloc(FA_BF16, 3, (int64_t[]){TQ, Hq, D}, FT_PADDED);
    ft_tensor lse = ft_alloc(FA_F32, 2, (int64_t[]){Hq, TQ}, FT_PADDED);
    const int64_t no = TQ * Hq * D, nl = Hq * TQ;
    float *n_out = malloc((size_t)(no + 1) * sizeof(float)), *n_lse = malloc((size_t)(nl + 1) * sizeof(float));
    float *n_abs = malloc((size_t)(nl + 1) * sizeof(float));
    if (st != FA_OK) {
        ft_fail(name, "reference: %s %s", fa_status_name(st), fa_last_error());
        goto done;
    }

    /* The backend under test on the e4m3 tensors (the longest lengths passed, as callers do). */
    set_descales(&opts, desc);
    fa_tensor xq = ft_arg(&q), xk = ft_arg(&k), xv = ft_arg(&v), xcq = ft_arg(&cu[0]), xck = ft_arg(&cu[1]);
    fa_tensor xo = ft_arg(&out), xl = ft_arg(&lse);
    st = fa_varlen_fwd(ft_ctx, &xq, &xk, &xv, &xcq, &xck, maxlen[0], maxlen[1], &opts, &xo, &xl);
    if (!backend_ran(name, "varlen fwd", st, &out, &lse)) goto done;

    /* Naive baseline, one sequence at a time, scattered into the packed layouts. */
    for (int b = 0; b < c->nseq; ++b) {
        const int64_t q0 = cuq[b], k0 = cuk[b], sq = cuq[b + 1] - q0;
        const f8case one = {c->label, 1, sq, cuk[b + 1] - k0, Hq, Hk, D, c->causal, c->softcap, c->qk_scale};
        float *l = malloc((size_t)(Hq * sq + 1) * sizeof(float)), *ab = malloc((size_t)(Hq * sq + 1) * sizeof(float));
        naive_fp8(&one, qf + q0 * Hq * D, kf + k0 * Hk * D, v8 + k0 * Hk * D, dv + b * Hk, n_out + q0 * Hq * D, l, ab);
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                n_lse[h * TQ + q0 + i] = l[h * sq + i];
                n_abs[h * TQ + q0 + i] = ab[h * sq + i];
            }
        free(l), free(ab);
    }
    check_outputs(name, &out, &lse, (const float *)oref.host, (const float *)lref.host, n_out, n_abs);

done:
    free(qf), free(kf), free(v8), free(vf), free(n_out), free(n_lse), free(n_abs);
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&tq), ft_free(&tk), ft_free(&tv), ft_free(&oref), ft_free(&lref);
    ft_free(&out), ft_free(&lse), ft_free(&cu[0]), ft_free(&cu[1]);
    for (int i = 0; i < 3; ++i) ft_free(&desc[i]);
}

/* A head dim the Hopper float8 kernels do not take (72: not a multiple of
 * 16) is refused with a message that says which ones they take, and nothing
 * is written; backends without float8 refuse the dtype and backends that
 * take the head dim compute it (skip). */
static void refused_head_dim(void) {
    const char *name = "e4m3 head dim 72 refused by name";
    if (!ft_selected(name)) return;
    ft_tensor q = ft_alloc4(FA_F8_E4M3, 1, 64, 2, 72, FT_PADDED);
    ft_tensor k = ft_alloc4(FA_F8_E4M3, 1, 64, 2, 72, FT_PADDED);
    ft_tensor v = ft_alloc4(FA_F8_E4M3, 1, 64, 2, 72, FT_PADDED);
    ft_tensor out = ft_alloc4(FA_BF16, 1, 64, 2, 72, FT_PADDED);
    ft_rng r = ft_rng_for(name);
    ft_fill_normal(&q, &r, 1.0);
    ft_fill_normal(&k, &r, 1.0);
    ft_fill_normal(&v, &r, 1.0);
    ft_poison(&out);
    fa_options opts;
    memset(&opts, 0, sizeof opts);
    fa_tensor xq = ft_arg(&q), xk = ft_arg(&k), xv = ft_arg(&v), xo = ft_arg(&out);
    fa_status st = fa_fwd(ft_ctx, &xq, &xk, &xv, &opts, &xo, NULL);
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
    } else if (st == FA_OK) {
        ft_skip(name, "this backend takes head dim 72"); /* the CPU backends take any head dim */
    } else {
        const int named = st == FA_ERR_UNSUPPORTED && strstr(fa_last_error(), "multiples of 16") != NULL;
        ft_download(&out);
        float *o = ft_to_f32(&out);
        int untouched = ft_padding_intact(&out);
        for (int64_t e = 0; e < ft_numel(&out); ++e) untouched &= isnan(o[e]) != 0;
        free(o);
        ft_check(named && untouched, name, "%s \"%s\"%s", fa_status_name(st), fa_last_error(),
                 untouched ? "" : ", output written");
    }
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&out);
}

int main(void) {
    if (!ft_init("test_fp8")) return ft_finish();
    static const f8case cases[] = {
        {"plain", 1, 1, 1, 1, 1, 128, 0, 0.f, 1.0},
        {"plain", 2, 113, 203, 4, 2, 128, 0, 0.f, 1.0},
        {"causal", 2, 130, 300, 2, 1, 128, 1, 0.f, 1.0},
        {"causal Sq>Sk (rows without keys)", 1, 203, 113, 2, 2, 128, 1, 0.f, 1.0},
        {"softcap, large scores", 1, 257, 513, 2, 2, 128, 0, 30.f, 3.0},
        {"long", 1, 1023, 1024, 2, 1, 128, 1, 0.f, 1.0},
        {"head dim 96", 2, 113, 203, 4, 2, 96, 1, 0.f, 1.0},
        {"head dim 64", 1, 300, 700, 2, 1, 64, 0, 0.f, 1.0},
        {"head dim 32, long", 1, 1500, 1700, 2, 2, 32, 1, 0.f, 1.0},
        {"head dim 256", 2, 113, 203, 4, 2, 256, 0, 0.f, 1.0},
        {"head dim 256 causal", 1, 300, 300, 2, 1, 256, 1, 0.f, 1.0},
        {"head dim 256, softcap, large scores", 1, 257, 513, 2, 2, 256, 0, 30.f, 3.0},
        {"head dim 256, long causal", 1, 1023, 1100, 2, 1, 256, 1, 0.f, 1.0},
        {"head dim 192 causal", 2, 130, 300, 2, 1, 192, 1, 0.f, 1.0},
        {"head dim 192, long", 1, 900, 1000, 2, 2, 192, 0, 0.f, 1.0},
        {"head dim 160 (on 192's kernel)", 1, 200, 333, 3, 1, 160, 1, 0.f, 1.0},
        {"head dim 240 (on 256's kernel)", 1, 200, 129, 2, 2, 240, 0, 0.f, 1.0},
        /* decode: one query row over many keys (the CPU splits the keys) */
        {"decode", 1, 1, 5000, 2, 1, 128, 0, 0.f, 1.0},
        /* query rows that are not whole 192-row tiles, no mask: tiles of
         * 64-row groups that run across heads (GQA: across kv heads too) */
        {"row groups across heads", 2, 300, 333, 3, 1, 128, 0, 0.f, 1.0},
        {"row groups, head dim 96", 1, 200, 129, 5, 1, 96, 0, 0.f, 1.0},
        {"row groups, long", 1, 1000, 1100, 3, 3, 128, 0, 0.f, 1.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (ft_quick && cases[i].Sq > 500) continue;
        run_case(&cases[i]);
    }
    /* Sequences that end inside a 32-key chunk and inside a kv block, one
     * of a single key, empty ones (no queries; no keys, whose rows get
     * zeros and lse -inf) and ones longer than a block. */
    static const int lq_mixed[] = {130, 0, 1, 257, 64, 31}, lk_mixed[] = {130, 5, 1, 257, 64, 31};
    static const int lq_cross[] = {100, 33, 300, 7}, lk_cross[] = {200, 1, 129, 0};
    static const int lq_long[] = {1000, 2100, 3}, lk_long[] = {1000, 2100, 300};
    static const f8varlen varlen_cases[] = {
        {"causal", 6, lq_mixed, lk_mixed, 4, 2, 128, 1, 0.f, 1.0},
        {"plain", 6, lq_mixed, lk_mixed, 2, 2, 64, 0, 0.f, 1.0},
        {"Sq != Sk causal", 4, lq_cross, lk_cross, 3, 1, 96, 1, 0.f, 1.0},
        {"Sq != Sk, softcap, large scores", 4, lq_cross, lk_cross, 2, 2, 128, 0, 30.f, 3.0},
        {"long causal", 3, lq_long, lk_long, 2, 1, 128, 1, 0.f, 1.0},
        {"long", 3, lq_long, lk_long, 2, 2, 32, 0, 0.f, 1.0},
        {"causal", 6, lq_mixed, lk_mixed, 2, 1, 256, 1, 0.f, 1.0},
        {"Sq != Sk, softcap, large scores", 4, lq_cross, lk_cross, 2, 2, 192, 0, 30.f, 3.0},
        {"long", 3, lq_long, lk_long, 2, 1, 208, 1, 0.f, 1.0},
    };
    for (size_t i = 0; i < sizeof varlen_cases / sizeof varlen_cases[0]; ++i) {
        if (ft_quick && varlen_cases[i].lq[0] > 500) continue;
        run_varlen_case(&varlen_cases[i]);
    }
    refused_head_dim();
    return ft_finish();
}

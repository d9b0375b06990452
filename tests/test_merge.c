/*
 * fa_merge: attention over disjoint key sets, merged, equals attention over
 * all keys; the merge formula itself against float64 (with -inf parts and
 * rows where every part is -inf); in-place merging; a single part.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

/* Keys [j0, j1) of a dense (B, Sk, H, D) tensor as a new tensor of dtype t. */
static ft_tensor key_slice(const float *src, fa_dtype t, int64_t B, int64_t Sk, int64_t H, int64_t D, int64_t j0,
                           int64_t j1) {
    ft_tensor x = ft_alloc4(t, B, j1 - j0, H, D, FT_CONTIG);
    float *v = malloc((size_t)(B * (j1 - j0) * H * D + 1) * sizeof(float));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = j0; j < j1; ++j)
            memcpy(v + ((b * (j1 - j0) + (j - j0)) * H) * D, src + ((b * Sk + j) * H) * D, (size_t)(H * D) * sizeof(float));
    ft_from_f32(&x, v);
    free(v);
    return x;
}

/* Split the keys at the given boundaries, attend to each part, merge, compare
 * with one call over all keys. */
static void split_and_merge(fa_dtype dt, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hk,
                            int64_t D, int nparts, const int64_t *bounds) {
    char name[160];
    snprintf(name, sizeof name, "split keys into %d parts, merge: %s S%lldx%lld H%lld/%lld D%lld", nparts,
             fa_dtype_name(dt), (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hk,
             (long long)D);
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    ft_tensor q = ft_alloc4(dt, B, Sq, Hq, D, FT_CONTIG), k = ft_alloc4(dt, B, Sk, Hk, D, FT_CONTIG);
    ft_tensor v = ft_alloc4(dt, B, Sk, Hk, D, FT_CONTIG);
    ft_fill_normal(&q, &r, 1.0);
    ft_fill_normal(&k, &r, 1.0);
    ft_fill_normal(&v, &r, 1.0);
    float *kf = ft_to_f32(&k), *vf = ft_to_f32(&v);
    fa_tensor tq = ft_arg(&q);
    ft_tensor outs[4], lses[4];
    fa_tensor touts[4], tlses[4];
    fa_status st = FA_OK;
    for (int i = 0; i < nparts && st == FA_OK; ++i) {
        ft_tensor kp = key_slice(kf, dt, B, Sk, Hk, D, bounds[i], bounds[i + 1]);
        ft_tensor vp = key_slice(vf, dt, B, Sk, Hk, D, bounds[i], bounds[i + 1]);
        outs[i] = ft_alloc4(dt, B, Sq, Hq, D, FT_CONTIG);
        lses[i] = ft_alloc(FA_F32, 3, (int64_t[]){B, Hq, Sq}, FT_CONTIG);
        fa_tensor tk = ft_arg(&kp), tv = ft_arg(&vp);
        touts[i] = ft_arg(&outs[i]);
        tlses[i] = ft_arg(&lses[i]);
        st = fa_fwd(ft_ctx, &tq, &tk, &tv, NULL, &touts[i], &tlses[i]);
        ft_free(&kp);
        ft_free(&vp);
    }
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
    } else if (st != FA_OK) {
        ft_fail(name, "part forward: %s %s", fa_status_name(st), fa_last_error());
    } else {
        ft_tensor out = ft_alloc4(dt, B, Sq, Hq, D, FT_PADDED), lse = ft_alloc(FA_F32, 3, (int64_t[]){B, Hq, Sq}, FT_GUARDED);
        fa_tensor to = ft_arg(&out), tl = ft_arg(&lse);
        st = fa_merge(ft_ctx, nparts, touts, tlses, &to, &tl);
        ft_download(&out);
        ft_download(&lse);
        /* Reference over all keys, and the naive baseline for the tolerance. */
        ft_tensor qf = ft_f32_copy(&q), kff = ft_f32_copy(&k), vff = ft_f32_copy(&v);
        ft_tensor oref = ft_alloc4(FA_F32, B, Sq, Hq, D, FT_CONTIG), lref = ft_alloc(FA_F32, 3, (int64_t[]){B, Hq, Sq}, FT_CONTIG);
        fa_tensor a = ft_view(&qf, 0), b2 = ft_view(&kff, 0), c = ft_view(&vff, 0), d = ft_view(&oref, 0), e = ft_view(&lref, 0);
        fa_status rs = fa_fwd(ft_ref_ctx, &a, &b2, &c, NULL, &d, &e);
        ft_problem pr;
        memset(&pr, 0, sizeof pr);
        pr.B = B, pr.Sq = Sq, pr.Sk = Sk, pr.Hq = Hq, pr.Hk = Hk, pr.D = D, pr.Dv = D;
        int64_t no = ft_numel(&out), nl = ft_numel(&lse);
        float *naive = malloc((size_t)no * sizeof(float)), *naive_lse = malloc((size_t)nl * sizeof(float));
        ft_naive_fwd(&pr, dt, (float *)qf.host, (float *)kff.host, (float *)vff.host, naive, naive_lse);
        float *got = ft_to_f32(&out), *got_lse = ft_to_f32(&lse);
        ft_err eo = ft_compare(got, (float *)oref.host, no), eb = ft_compare(naive, (float *)oref.host, no);
        ft_err el = ft_compare(got_lse, (float *)lref.host, nl), ebl = ft_compare(naive_lse, (float *)lref.host, nl);
        /* The parts are rounded to their dtype before merging: one more rounding than a single call. */
        double tol = ft_tolerance(dt, eb.max_err, eo.max_ref, 1), tol_l = ft_tolerance(FA_F32, ebl.max_err, el.max_ref, 0);
        int ok = st == FA_OK && rs == FA_OK && eo.max_err <= tol && el.max_err <= tol_l && ft_padding_intact(&out) &&
                 ft_padding_intact(&lse);
        ft_check(ok, name, "merge %s, out err %.2g (tol %.2g), lse err %.2g (tol %.2g)%s", fa_status_name(st), eo.max_err,
                 tol, el.max_err, tol_l, ft_padding_intact(&out) && ft_padding_intact(&lse) ? "" : ", padding overwritten");
        free(naive), free(naive_lse), free(got), free(got_lse);
        ft_free(&qf), ft_free(&kff), ft_free(&vff), ft_free(&oref), ft_free(&lref), ft_free(&out), ft_free(&lse);
    }
    for (int i = 0; i < nparts; ++i) {
        ft_free(&outs[i]);
        ft_free(&lses[i]);
    }
    free(kf);
    free(vf);
    ft_free(&q), ft_free(&k), ft_free(&v);
}

/* The merge formula on random parts, some rows -inf in some or all parts. */
static void formula(fa_dtype part_dt, fa_dtype out_dt, int n, int in_place) {
    char name[128];
    snprintf(name, sizeof name, "merge formula: %d parts %s -> %s%s", n, fa_dtype_name(part_dt), fa_dtype_name(out_dt),
             in_place ? ", in place into part 0" : "");
    if (!ft_selected(name)) return;
    const int64_t B = 2, S = 37, H = 3, Dv = 40;
    ft_rng r = ft_rng_for(name);
    ft_tensor outs[5], lses[5];
    fa_tensor to[5], tl[5];
    float *of[5], *lf[5];
    for (int i = 0; i < n; ++i) {
        outs[i] = ft_alloc4(part_dt, B, S, H, Dv, i == 1 ? FT_PADDED : FT_CONTIG);
        lses[i] = ft_alloc(FA_F32, 3, (int64_t[]){B, H, S}, i == 1 ? FT_PADDED : FT_CONTIG);
        ft_fill_normal(&outs[i], &r, 1.0);
        float *l = malloc((size_t)(B * H * S) * sizeof(float));
        for (int64_t e = 0; e < B * H * S; ++e) {
            int64_t s = e % S;
            l[e] = (float)(3.0 * ft_rng_normal(&r));
            if (s % 5 == i) l[e] = -INFINITY;   /* this part saw no key for the row */
            if (s == 36) l[e] = -INFINITY;      /* no part saw a key */
            if (s == 20) l[e] = 80.0f + (float)i; /* large values: the merge must subtract the max */
        }
        ft_from_f32(&lses[i], l);
        free(l);
        of[i] = ft_to_f32(&outs[i]);
        lf[i] = ft_to_f32(&lses[i]);
        to[i] = ft_arg(&outs[i]);
        tl[i] = ft_arg(&lses[i]);
    }
    /* Float64 merge and a float32 one rounded to the output dtype (the baseline). */
    int64_t no = B * S * H * Dv, nl = B * H * S;
    float *ref = malloc((size_t)no * sizeof(float)), *naive = malloc((size_t)no * sizeof(float));
    float *ref_l = malloc((size_t)nl * sizeof(float));
    uint8_t *zero = calloc((size_t)no, 1);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < S; ++s) {
                int64_t li = (b * H + h) * S + s;
                double m = -INFINITY;
                for (int i = 0; i < n; ++i) m = fmax(m, lf[i][li]);
                double sum = 0.0;
                float msf = (float)m, sumf = 0.0f;
                for (int i = 0; i < n; ++i)
                    if (lf[i][li] != -INFINITY) {
                        sum += exp(lf[i][li] - m);
                        sumf += expf(lf[i][li] - msf);
                    }
                ref_l[li] = m == -INFINITY ? -INFINITY : (float)(m + log(sum));
                for (int64_t d = 0; d < Dv; ++d) {
                    int64_t oi = ((b * S + s) * H + h) * Dv + d;
                    double acc = 0.0;
                    float accf = 0.0f;
                    for (int i = 0; i < n; ++i)
                        if (lf[i][li] != -INFINITY) {
                            acc += exp(lf[i][li] - m) / sum * of[i][oi];
                            accf += expf(lf[i][li] - msf) / sumf * of[i][oi];
                        }
                    ref[oi] = (float)acc;
                    naive[oi] = ft_round(out_dt, accf);
                    zero[oi] = m == -INFINITY;
                }
            }
    ft_tensor out = {0}, lse = {0};
    fa_tensor tout, tlse;
    if (in_place) {
        tout = to[0];
        tlse = tl[0];
    } else {
        out = ft_alloc4(out_dt, B, S, H, Dv, FT_PADDED);
        lse = ft_alloc(FA_F32, 3, (int64_t[]){B, H, S}, FT_GUARDED);
        tout = ft_arg(&out);
        tlse = ft_arg(&lse);
    }
    fa_status st = fa_merge(ft_ctx, n, to, tl, &tout, &tlse);
    ft_tensor *res = in_place ? &outs[0] : &out, *res_l = in_place ? &lses[0] : &lse;
    ft_download(res);
    ft_download(res_l);
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
    } else {
        float *g = ft_to_f32(res), *gl = ft_to_f32(res_l);
        ft_err e = ft_compare(g, ref, no), eb = ft_compare(naive, ref, no), el = ft_compare(gl, ref_l, nl);
        double tol = ft_tolerance(out_dt, eb.max_err, e.max_ref, 0), tol_l = 1e-5 * fmax(1.0, el.max_ref);
        int64_t z = ft_exact_zero_violations(g, zero, no);
        int ok = st == FA_OK && e.max_err <= tol && el.max_err <= tol_l && !z && !e.nan && !el.nan &&
                 (in_place || (ft_padding_intact(&out) && ft_padding_intact(&lse)));
        ft_check(ok, name, "%s, out err %.2g (tol %.2g), lse err %.2g (tol %.2g), %lld nonzero where all parts are -inf",
                 fa_status_name(st), e.max_err, tol, el.max_err, tol_l, (long long)z);
        free(g);
        free(gl);
    }
    if (!in_place) {
        ft_free(&out);
        ft_free(&lse);
    }
    for (int i = 0; i < n; ++i) {
        ft_free(&outs[i]);
        ft_free(&lses[i]);
        free(of[i]);
        free(lf[i]);
    }
    free(ref), free(naive), free(ref_l), free(zero);
}

int main(void) {
    if (!ft_init("test_merge")) return ft_finish();
    fa_dtype dts[3];
    int ndt = ft_backend_dtypes(dts);
    for (int i = 0; i < ndt; ++i) {
        fa_dtype dt = dts[i];
        split_and_merge(dt, 2, 33, 300, 4, 2, 64, 2, (int64_t[]){0, 128, 300});
        split_and_merge(dt, 1, 70, 257, 2, 2, 128, 3, (int64_t[]){0, 1, 200, 257});
        split_and_merge(dt, 1, 5, 90, 2, 1, 40, 4, (int64_t[]){0, 30, 30, 61, 90}); /* an empty part */
        formula(dt, dt, 3, 0);
        formula(dt, FA_F32, 2, 0);
        formula(FA_F32, dt, 4, 0);
        formula(dt, dt, 3, 1);
        formula(dt, dt, 1, 0);
    }
    return ft_finish();
}

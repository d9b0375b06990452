/*
 * Variable-length (packed) sequences, empty ones included: fa_varlen_fwd and
 * fa_varlen_bwd of the backend under test against the float64 reference's,
 * each sequence its own problem with its own mask alignment. The naive
 * baseline runs one sequence at a time.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

typedef struct vcase {
    const char *label;
    fa_dtype dt;
    int nseq;
    const int *lq, *lk;  /* lengths of each sequence */
    int64_t Hq, Hk, D, Dv;
    int alibi;           /* per (batch, head) slopes */
    int exact_max;       /* pass the true max_seqlen (else 0: the library computes it) */
    fa_options opts;
} vcase;

static ft_tensor cu_tensor(const int *len, int n, int64_t *total, int *maxlen) {
    ft_tensor cu = ft_alloc(FA_I32, 1, (int64_t[]){n + 1}, FT_CONTIG);
    int32_t *c = (int32_t *)cu.host;
    c[0] = 0;
    *maxlen = 0;
    for (int b = 0; b < n; ++b) {
        c[b + 1] = c[b] + len[b];
        if (len[b] > *maxlen) *maxlen = len[b];
    }
    *total = c[n];
    return cu;
}

/* Per-sequence naive baseline and structural zeros, scattered into packed arrays. */
static void naive_packed(const vcase *c, const ft_problem *base, const int32_t *cuq, const int32_t *cuk, const float *q,
                         const float *k, const float *v, const float *dout, int64_t TQ, float *out, float *lse,
                         float *dq, float *dk, float *dv, uint8_t *zq, uint8_t *zk, uint8_t *zv, uint8_t *zo) {
    for (int b = 0; b < c->nseq; ++b) {
        ft_problem p = *base;
        p.B = 1;
        p.Sq = cuq[b + 1] - cuq[b];
        p.Sk = cuk[b + 1] - cuk[b];
        p.batch0 = b;
        int64_t q0 = cuq[b], k0 = cuk[b];
        float *l = malloc((size_t)(c->Hq * p.Sq + 1) * sizeof(float));
        ft_naive_fwd(&p, c->dt, q + q0 * c->Hq * c->D, k + k0 * c->Hk * c->D, v + k0 * c->Hk * c->Dv,
                     out + q0 * c->Hq * c->Dv, l);
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < p.Sq; ++i) lse[h * TQ + q0 + i] = l[h * p.Sq + i];
        if (dout)
            ft_naive_bwd(&p, c->dt, q + q0 * c->Hq * c->D, k + k0 * c->Hk * c->D, v + k0 * c->Hk * c->Dv,
                         dout + q0 * c->Hq * c->Dv, dq + q0 * c->Hq * c->D, dk + k0 * c->Hk * c->D,
                         dv + k0 * c->Hk * c->Dv);
        uint8_t *m;
        m = ft_masked_rows(&p, l, c->D);
        memcpy(zq + q0 * c->Hq * c->D, m, (size_t)(p.Sq * c->Hq * c->D));
        free(m);
        m = ft_masked_rows(&p, l, c->Dv);
        memcpy(zo + q0 * c->Hq * c->Dv, m, (size_t)(p.Sq * c->Hq * c->Dv));
        free(m);
        m = ft_unseen_keys(&p, c->D);
        memcpy(zk + k0 * c->Hk * c->D, m, (size_t)(p.Sk * c->Hk * c->D));
        free(m);
        m = ft_unseen_keys(&p, c->Dv);
        memcpy(zv + k0 * c->Hk * c->Dv, m, (size_t)(p.Sk * c->Hk * c->Dv));
        free(m);
        free(l);
    }
}

static void run_case(const vcase *c) {
    char name[200];
    snprintf(name, sizeof name, "varlen %s %s, %d sequences, H%lld/%lld D%lld/%lld", c->label, fa_dtype_name(c->dt),
             c->nseq, (long long)c->Hq, (long long)c->Hk, (long long)c->D, (long long)c->Dv);
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    int64_t TQ, TK;
    int maxq, maxk;
    ft_tensor cuq = cu_tensor(c->lq, c->nseq, &TQ, &maxq), cuk = cu_tensor(c->lk, c->nseq, &TK, &maxk);
    if (!c->exact_max) maxq = maxk = 0;
    ft_tensor q = ft_alloc(c->dt, 3, (int64_t[]){TQ, c->Hq, c->D}, FT_PADDED);
    ft_tensor k = ft_alloc(c->dt, 3, (int64_t[]){TK, c->Hk, c->D}, FT_PADDED_ODD);
    ft_tensor v = ft_alloc(c->dt, 3, (int64_t[]){TK, c->Hk, c->Dv}, FT_PADDED);
    ft_tensor dout = ft_alloc(c->dt, 3, (int64_t[]){TQ, c->Hq, c->Dv}, FT_CONTIG);
    ft_fill_normal(&q, &r, 1.0);
    ft_fill_normal(&k, &r, 1.0);
    ft_fill_normal(&v, &r, 1.0);
    ft_fill_normal(&dout, &r, 1.0);
    fa_options opts = c->opts;
    ft_tensor slopes = ft_alloc(FA_F32, 2, (int64_t[]){c->nseq, c->Hq}, FT_CONTIG);
    for (int64_t e = 0; e < ft_numel(&slopes); ++e) ((float *)slopes.host)[e] = (float)(0.05 + 0.5 * ft_rng_uniform(&r));

    /* Reference: the float64 backend's own varlen entry points on float32 copies. */
    ft_tensor qf = ft_f32_copy(&q), kf = ft_f32_copy(&k), vf = ft_f32_copy(&v), df = ft_f32_copy(&dout);
    ft_tensor oref = ft_alloc(FA_F32, 3, (int64_t[]){TQ, c->Hq, c->Dv}, FT_CONTIG);
    ft_tensor lref = ft_alloc(FA_F32, 2, (int64_t[]){c->Hq, TQ}, FT_CONTIG);
    ft_tensor gref[3] = {ft_alloc(FA_F32, 3, q.shape, FT_CONTIG), ft_alloc(FA_F32, 3, k.shape, FT_CONTIG),
                         ft_alloc(FA_F32, 3, v.shape, FT_CONTIG)};
    fa_options ref_opts = opts;
    if (c->alibi) ref_opts.alibi_slopes = ft_view(&slopes, 0);
    fa_tensor a[9] = {ft_view(&qf, 0), ft_view(&kf, 0), ft_view(&vf, 0), ft_view(&cuq, 0), ft_view(&cuk, 0),
                      ft_view(&oref, 0), ft_view(&lref, 0), ft_view(&df, 0)};
    fa_status st = fa_varlen_fwd(ft_ref_ctx, &a[0], &a[1], &a[2], &a[3], &a[4], 0, 0, &ref_opts, &a[5], &a[6]);
    fa_tensor gr[3] = {ft_view(&gref[0], 0), ft_view(&gref[1], 0), ft_view(&gref[2], 0)};
    fa_status st2 = st ? st
                       : fa_varlen_bwd(ft_ref_ctx, &a[7], &a[0], &a[1], &a[2], &a[5], &a[6], &a[3], &a[4], 0, 0,
                                       &ref_opts, &gr[0], &gr[1], &gr[2]);
    if (st || st2) {
        ft_fail(name, "reference: %s %s", fa_status_name(st ? st : st2), fa_last_error());
        goto done;
    }

    /* Naive baseline and structural zeros. */
    ft_problem base;
    memset(&base, 0, sizeof base);
    base.Hq = c->Hq, base.Hk = c->Hk, base.D = c->D, base.Dv = c->Dv, base.opts = opts;
    if (c->alibi) {
        base.alibi = (const float *)slopes.host;
        base.alibi_per_batch = 1;
    }
    int64_t no = TQ * c->Hq * c->Dv, nq = TQ * c->Hq * c->D, nk = TK * c->Hk * c->D, nv = TK * c->Hk * c->Dv;
    float *n_out = malloc((size_t)(no + 1) * 4), *n_lse = malloc((size_t)(c->Hq * TQ + 1) * 4);
    float *n_dq = malloc((size_t)(nq + 1) * 4), *n_dk = malloc((size_t)(nk + 1) * 4), *n_dv = malloc((size_t)(nv + 1) * 4);
    uint8_t *zq = malloc((size_t)nq + 1), *zk = malloc((size_t)nk + 1), *zv = malloc((size_t)nv + 1), *zo = malloc((size_t)no + 1);
    naive_packed(c, &base, (int32_t *)cuq.host, (int32_t *)cuk.host, (float *)qf.host, (float *)kf.host,
                 (float *)vf.host, (float *)df.host, TQ, n_out, n_lse, n_dq, n_dk, n_dv, zq, zk, zv, zo);

    /* The backend under test. */
    ft_tensor out = ft_alloc(c->dt, 3, (int64_t[]){TQ, c->Hq, c->Dv}, FT_PADDED);
    ft_tensor lse = ft_alloc(FA_F32, 2, (int64_t[]){c->Hq, TQ}, FT_PADDED);
    if (c->alibi) opts.alibi_slopes = ft_arg(&slopes);
    fa_tensor tq = ft_arg(&q), tk = ft_arg(&k), tv = ft_arg(&v), tcq = ft_arg(&cuq), tck = ft_arg(&cuk);
    fa_tensor to = ft_arg(&out), tl = ft_arg(&lse), td = ft_arg(&dout);
    st = fa_varlen_fwd(ft_ctx, &tq, &tk, &tv, &tcq, &tck, maxq, maxk, &opts, &to, &tl);
    ft_download(&out);
    ft_download(&lse);
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
    } else if (st != FA_OK) {
        ft_fail(name, "fwd: %s %s", fa_status_name(st), fa_last_error());
    } else {
        char sum[400] = "";
        int ok = ft_check_result("out", &out, (float *)oref.host, n_out, zo, c->dt, 0, 0.0, sum, sizeof sum);
        ok &= ft_check_result("lse", &lse, (float *)lref.host, n_lse, NULL, FA_F32, 0, 0.0, sum, sizeof sum);
        ft_check(ok, name, "fwd %s", sum);

        char bname[240];
        snprintf(bname, sizeof bname, "%s [bwd]", name);
        ft_tensor g[3] = {ft_alloc(c->dt, 3, q.shape, FT_PADDED), ft_alloc(c->dt, 3, k.shape, FT_PADDED),
                          ft_alloc(c->dt, 3, v.shape, FT_GUARDED)};
        fa_tensor tg[3] = {ft_arg(&g[0]), ft_arg(&g[1]), ft_arg(&g[2])};
        st = fa_varlen_bwd(ft_ctx, &td, &tq, &tk, &tv, &to, &tl, &tcq, &tck, maxq, maxk, &opts, &tg[0], &tg[1], &tg[2]);
        for (int i = 0; i < 3; ++i) ft_download(&g[i]);
        if (st != FA_OK) {
            ft_fail(bname, "bwd: %s %s", fa_status_name(st), fa_last_error());
        } else {
            double mag = 0.0;
            for (int i = 0; i < 3; ++i)
                for (int64_t e = 0; e < ft_numel(&gref[i]); ++e) mag = fmax(mag, fabs(((float *)gref[i].host)[e]));
            char bsum[400] = "";
            ok = ft_check_result("dq", &g[0], (float *)gref[0].host, n_dq, zq, c->dt, 1, mag, bsum, sizeof bsum);
            ok &= ft_check_result("dk", &g[1], (float *)gref[1].host, n_dk, zk, c->dt, 1, mag, bsum, sizeof bsum);
            ok &= ft_check_result("dv", &g[2], (float *)gref[2].host, n_dv, zv, c->dt, 1, mag, bsum, sizeof bsum);
            ft_check(ok, bname, "bwd %s", bsum);
        }
        for (int i = 0; i < 3; ++i) ft_free(&g[i]);
    }
    ft_free(&out), ft_free(&lse);
    free(n_out), free(n_lse), free(n_dq), free(n_dk), free(n_dv), free(zq), free(zk), free(zv), free(zo);
done:
    ft_free(&qf), ft_free(&kf), ft_free(&vf), ft_free(&df), ft_free(&oref), ft_free(&lref);
    for (int i = 0; i < 3; ++i) ft_free(&gref[i]);
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&dout), ft_free(&cuq), ft_free(&cuk), ft_free(&slopes);
}

int main(void) {
    if (!ft_init("test_varlen")) return ft_finish();
    /* Empty query sequences, empty key sequences, both empty, 1-row and tile-crossing ones. */
    static const int lq[] = {5, 0, 17, 1, 113, 0, 64, 40};
    static const int lk[] = {7, 3, 0, 240, 113, 0, 64, 9};
    static const int lq2[] = {0, 200, 1};
    static const int lk2[] = {0, 129, 1};
    /* A few query rows per sequence over longer keys (decoding several
     * sequences at once): GPU backends may pack a GQA group's heads into one tile. */
    static const int lq3[] = {1, 3, 0, 2, 5, 1};
    static const int lk3[] = {40, 129, 7, 0, 300, 1};
    fa_dtype dts[3];
    int n = ft_backend_dtypes(dts);
    for (int i = 0; i < n; ++i) {
        vcase c;
        memset(&c, 0, sizeof c);
        c.dt = dts[i];
        c.nseq = 8, c.lq = lq, c.lk = lk, c.Hq = 4, c.Hk = 2, c.D = 64, c.Dv = 64;
        c.label = "plain";
        run_case(&c);
        c.label = "causal";
        c.opts.causal = 1;
        c.exact_max = 1;
        run_case(&c);
        c.label = "causal top-left";
        c.opts.align = FA_ALIGN_TOP_LEFT;
        run_case(&c);
        memset(&c.opts, 0, sizeof c.opts);
        c.label = "window + alibi per sequence";
        c.opts.use_window = 1, c.opts.window_left = 10, c.opts.window_right = 3;
        c.alibi = 1;
        run_case(&c);
        memset(&c.opts, 0, sizeof c.opts);
        c.alibi = 0;
        c.label = "dropout causal softcap";
        c.opts.dropout_p = 0.2f, c.opts.dropout_seed = 31337, c.opts.causal = 1, c.opts.softcap = 8.0f;
        run_case(&c);
        memset(&c.opts, 0, sizeof c.opts);
        c.nseq = 3, c.lq = lq2, c.lk = lk2, c.Hq = 2, c.Hk = 1, c.D = 96, c.Dv = 40;
        c.label = "D != Dv, MQA";
        c.opts.causal = 1;
        run_case(&c);
        memset(&c.opts, 0, sizeof c.opts);
        c.nseq = 6, c.lq = lq3, c.lk = lk3, c.Hq = 8, c.Hk = 2, c.D = 128, c.Dv = 128;
        c.label = "few queries per sequence, GQA, causal, alibi";
        c.opts.causal = 1;
        c.alibi = 1;
        run_case(&c);
        c.alibi = 0;
        c.label = "few queries per sequence, GQA, window top-left, softcap";
        c.opts.causal = 0, c.opts.use_window = 1, c.opts.window_left = 17, c.opts.window_right = 2;
        c.opts.align = FA_ALIGN_TOP_LEFT, c.opts.softcap = 20.0f;
        run_case(&c);
        /* the wide head dims (on sm_90, the head-dim-192 and 256 kernels) and
         * head dim 96 (rows of three 64-byte slabs there) */
        memset(&c.opts, 0, sizeof c.opts);
        c.nseq = 8, c.lq = lq, c.lk = lk, c.Hq = 2, c.Hk = 1, c.D = 256, c.Dv = 256;
        c.label = "head dim 256, causal";
        c.opts.causal = 1;
        run_case(&c);
        c.nseq = 3, c.lq = lq2, c.lk = lk2, c.D = 192, c.Dv = 192;
        c.label = "head dim 192";
        c.opts.causal = 0;
        run_case(&c);
        c.D = 96, c.Dv = 96;
        c.label = "head dim 96, causal";
        c.opts.causal = 1;
        run_case(&c);
    }
    return ft_finish();
}

/*
 * The correctness suite: forward (out, lse) and backward (dq, dk, dv) of the
 * backend under test (FA_TEST_BACKEND) against the float64 reference, over
 * shapes that do and do not divide tiles, head dims, GQA ratios, strided
 * layouts, every option, fully masked rows and every supported dtype.
 *
 * Each case: fresh random inputs; outputs poisoned with NaN bytes before the
 * call; afterwards every logical element must be written (no NaN), padding
 * outside the logical tensor untouched, exact zeros where the reference has
 * structural zeros (masked rows, unseen keys), and the max error within
 * ft_tolerance() of the naive same-precision baseline.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

enum pattern {
    PAT_NORMAL = 0, /* q, k, v ~ N(0, 1) */
    PAT_LARGE = 1,  /* q, k ~ 30 N(0, 1): huge score magnitudes, near-argmax softmax */
    PAT_GROWING = 2, /* scores grow along j: every later key block raises the row max */
    PAT_MEDIUM = 3  /* q, k ~ 4 N(0, 1): scores of a few tens */
};

enum alibi_mode { ALIBI_OFF = 0, ALIBI_HEAD = 1, ALIBI_BATCH_HEAD = 2 };

typedef struct scase {
    const char *label;
    fa_dtype dt;
    int64_t B, Sq, Sk, Hq, Hk, D, Dv;
    ft_layout layout;   /* FT_CONTIG, FT_PADDED or FT_QKV0 (q, k, v packed in one buffer) */
    int pattern;
    int alibi;
    int bwd;            /* also check the backward */
    fa_options opts;
} scase;

static scase make(const char *label, fa_dtype dt, int64_t B, int64_t Sq, int64_t Sk, int64_t Hq,
                  int64_t Hk, int64_t D, int64_t Dv) {
    scase c;
    memset(&c, 0, sizeof c);
    c.label = label;
    c.dt = dt;
    c.B = B;
    c.Sq = Sq;
    c.Sk = Sk;
    c.Hq = Hq;
    c.Hk = Hk;
    c.D = D;
    c.Dv = Dv;
    c.bwd = 1;
    return c;
}

static void fill_inputs(const scase *c, ft_rng *r, ft_tensor *q, ft_tensor *k, ft_tensor *v) {
    if (c->pattern == PAT_GROWING) {
        float *qv = malloc((size_t)ft_numel(q) * sizeof(float));
        float *kv = malloc((size_t)ft_numel(k) * sizeof(float));
        for (int64_t e = 0; e < ft_numel(q); ++e) qv[e] = (float)(0.5 + 0.5 * fabs(ft_rng_normal(r)));
        for (int64_t e = 0; e < ft_numel(k); ++e) {
            int64_t j = (e / (c->Hk * c->D)) % c->Sk; /* key index of element e */
            kv[e] = (float)(0.5 * ft_rng_normal(r) + 3.0 * (double)j / (double)c->Sk);
        }
        ft_from_f32(q, qv);
        ft_from_f32(k, kv);
        free(qv);
        free(kv);
    } else {
        double s = c->pattern == PAT_LARGE ? 30.0 : c->pattern == PAT_MEDIUM ? 4.0 : 1.0;
        ft_fill_normal(q, r, s);
        ft_fill_normal(k, r, s);
    }
    ft_fill_normal(v, r, 1.0);
}

/* Layouts of what the backend sees: guards around dense tensors too. */
static ft_layout slot(ft_layout l, int s) {
    return l == FT_QKV0 ? (ft_layout)(FT_QKV0 + s) : l == FT_CONTIG ? FT_GUARDED : l;
}
static ft_layout out_layout(ft_layout l) { return l == FT_PADDED || l == FT_PADDED_ODD ? l : FT_GUARDED; }

static fa_status call_fwd(fa_context *ctx, ft_tensor *q, ft_tensor *k, ft_tensor *v, const fa_options *o,
                          ft_tensor *out, ft_tensor *lse, int on_device) {
    fa_tensor tq, tk, tv, to, tl;
    if (on_device) {
        tq = ft_arg(q), tk = ft_arg(k), tv = ft_arg(v), to = ft_arg(out), tl = ft_arg(lse);
    } else {
        tq = ft_view(q, 0), tk = ft_view(k, 0), tv = ft_view(v, 0), to = ft_view(out, 0), tl = ft_view(lse, 0);
    }
    fa_status st = fa_fwd(ctx, &tq, &tk, &tv, o, &to, &tl);
    if (on_device) {
        ft_download(out);
        ft_download(lse);
    }
    return st;
}

static fa_status call_bwd(fa_context *ctx, ft_tensor *dout, ft_tensor *q, ft_tensor *k, ft_tensor *v,
                          ft_tensor *out, ft_tensor *lse, const fa_options *o, ft_tensor *dq, ft_tensor *dk,
                          ft_tensor *dv, int on_device) {
    ft_tensor *in[6] = {dout, q, k, v, out, lse};
    ft_tensor *res[3] = {dq, dk, dv};
    fa_tensor t[9];
    for (int i = 0; i < 6; ++i) t[i] = on_device ? ft_arg(in[i]) : ft_view(in[i], 0);
    for (int i = 0; i < 3; ++i) t[6 + i] = on_device ? ft_arg(res[i]) : ft_view(res[i], 0);
    fa_status st = fa_bwd(ctx, &t[0], &t[1], &t[2], &t[3], &t[4], &t[5], o, &t[6], &t[7], &t[8]);
    if (on_device)
        for (int i = 0; i < 3; ++i) ft_download(res[i]);
    return st;
}

static int same_bytes(const ft_tensor *a, const ft_tensor *b) {
    return a->nbuf == b->nbuf && memcmp(a->host, b->host, a->nbuf * fa_dtype_size(a->dtype)) == 0;
}

static void run_case(const scase *c) {
    char name[256];
    snprintf(name, sizeof name, "%s %s B%lld S%lldx%lld H%lld/%lld D%lld/%lld", c->label, fa_dtype_name(c->dt),
             (long long)c->B, (long long)c->Sq, (long long)c->Sk, (long long)c->Hq, (long long)c->Hk,
             (long long)c->D, (long long)c->Dv);
    if (!ft_selected(name)) return;
    ft_rng rng = ft_rng_for(name);

    ft_tensor q = ft_alloc4(c->dt, c->B, c->Sq, c->Hq, c->D, slot(c->layout, 0));
    ft_tensor k = ft_alloc4(c->dt, c->B, c->Sk, c->Hk, c->D, slot(c->layout, 1));
    ft_tensor v = ft_alloc4(c->dt, c->B, c->Sk, c->Hk, c->Dv, slot(c->layout, 2));
    fill_inputs(c, &rng, &q, &k, &v);

    /* ALiBi slopes in (0.05, 1), per head or per (batch, head). */
    ft_tensor slopes = {0};
    fa_options opts = c->opts;
    ft_problem np;
    memset(&np, 0, sizeof np);
    np.B = c->B, np.Sq = c->Sq, np.Sk = c->Sk, np.Hq = c->Hq, np.Hk = c->Hk, np.D = c->D, np.Dv = c->Dv;
    if (c->alibi) {
        int64_t shape[2] = {c->B, c->Hq};
        slopes = c->alibi == ALIBI_HEAD ? ft_alloc(FA_F32, 1, shape + 1, FT_CONTIG) : ft_alloc(FA_F32, 2, shape, FT_CONTIG);
        float *sl = (float *)slopes.host;
        for (int64_t e = 0; e < ft_numel(&slopes); ++e) sl[e] = (float)(0.05 + 0.95 * ft_rng_uniform(&rng));
        np.alibi = sl;
        np.alibi_per_batch = c->alibi == ALIBI_BATCH_HEAD;
    }
    np.opts = opts;

    /* Float64 reference on dense float32 copies of the stored inputs. */
    ft_tensor qf = ft_f32_copy(&q), kf = ft_f32_copy(&k), vf = ft_f32_copy(&v);
    ft_tensor out_ref = ft_alloc4(FA_F32, c->B, c->Sq, c->Hq, c->Dv, FT_CONTIG);
    ft_tensor lse_ref = ft_alloc(FA_F32, 3, (int64_t[]){c->B, c->Hq, c->Sq}, FT_CONTIG);
    fa_options ref_opts = opts;
    if (c->alibi) ref_opts.alibi_slopes = ft_view(&slopes, 0);
    fa_status st = call_fwd(ft_ref_ctx, &qf, &kf, &vf, &ref_opts, &out_ref, &lse_ref, 0);
    if (st != FA_OK) {
        ft_fail(name, "reference forward failed: %s %s", fa_status_name(st), fa_last_error());
        goto done_ref;
    }
    float *qv = (float *)qf.host, *kv = (float *)kf.host, *vv = (float *)vf.host;
    int64_t nout = ft_numel(&out_ref), nlse = ft_numel(&lse_ref);
    float *out_naive = malloc((size_t)(nout + 1) * sizeof(float));
    float *lse_naive = malloc((size_t)(nlse + 1) * sizeof(float));
    ft_naive_fwd(&np, c->dt, qv, kv, vv, out_naive, lse_naive);

    /* The backend under test. */
    ft_tensor out = ft_alloc4(c->dt, c->B, c->Sq, c->Hq, c->Dv, out_layout(c->layout));
    ft_tensor lse = ft_alloc(FA_F32, 3, (int64_t[]){c->B, c->Hq, c->Sq}, out_layout(c->layout));
    if (c->alibi) opts.alibi_slopes = ft_arg(&slopes);
    ft_poison(&out);
    ft_poison(&lse);
    st = call_fwd(ft_ctx, &q, &k, &v, &opts, &out, &lse, ft_on_device);
    char summary[512] = "";
    int fwd_ok = st == FA_OK;
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "fwd: %s not supported by this backend (%s)", fa_dtype_name(c->dt), fa_last_error());
        goto done_fwd;
    }
    if (!fwd_ok) {
        ft_fail(name, "fwd: %s %s", fa_status_name(st), fa_last_error());
        goto done_fwd;
    }
    {
        uint8_t *masked = ft_masked_rows(&np, (float *)lse_ref.host, c->Dv);
        fwd_ok &= ft_check_result("out", &out, (float *)out_ref.host, out_naive, masked, c->dt, 0, 0.0, summary,
                               sizeof summary);
        /* lse is float32 on every backend: the naive baseline gives the f32 accuracy. */
        fwd_ok &= ft_check_result("lse", &lse, (float *)lse_ref.host, lse_naive, NULL, FA_F32, 0, 0.0, summary,
                               sizeof summary);
        free(masked);
        ft_check(fwd_ok, name, "fwd %s", summary);
    }
    if (c->bwd && fwd_ok) {
        char bname[300];
        snprintf(bname, sizeof bname, "%s [bwd]", name);
        ft_tensor dout = ft_alloc4(c->dt, c->B, c->Sq, c->Hq, c->Dv, out_layout(c->layout));
        ft_fill_normal(&dout, &rng, 1.0);
        ft_tensor doutf = ft_f32_copy(&dout);
        ft_tensor g_ref[3], g[3], g2[3];
        const ft_tensor *like[3] = {&q, &k, &v};
        for (int i = 0; i < 3; ++i) {
            g_ref[i] = ft_alloc(FA_F32, 4, like[i]->shape, FT_CONTIG);
            g[i] = ft_alloc(c->dt, 4, like[i]->shape, slot(c->layout, i));
            g2[i] = ft_alloc(c->dt, 4, like[i]->shape, slot(c->layout, i));
            ft_poison(&g[i]);
            ft_poison(&g2[i]);
        }
        float *naive[3];
        for (int i = 0; i < 3; ++i) naive[i] = malloc((size_t)(ft_numel(&g[i]) + 1) * sizeof(float));
        ft_naive_bwd(&np, c->dt, qv, kv, vv, (float *)doutf.host, naive[0], naive[1], naive[2]);
        st = call_bwd(ft_ref_ctx, &doutf, &qf, &kf, &vf, &out_ref, &lse_ref, &ref_opts, &g_ref[0], &g_ref[1],
                      &g_ref[2], 0);
        if (st != FA_OK) {
            ft_fail(bname, "reference backward failed: %s %s", fa_status_name(st), fa_last_error());
        } else {
            st = call_bwd(ft_ctx, &dout, &q, &k, &v, &out, &lse, &opts, &g[0], &g[1], &g[2], ft_on_device);
            if (st != FA_OK) {
                ft_fail(bname, "bwd: %s %s", fa_status_name(st), fa_last_error());
            } else {
                int ok = 1;
                char bsum[512] = "";
                const char *names[3] = {"dq", "dk", "dv"};
                double magnitude = 0.0; /* largest reference gradient of the three: the floor's scale */
                for (int i = 0; i < 3; ++i) {
                    float *r = (float *)g_ref[i].host;
                    for (int64_t e = 0; e < ft_numel(&g_ref[i]); ++e)
                        if (fabs(r[e]) > magnitude) magnitude = fabs(r[e]);
                }
                uint8_t *zero[3] = {ft_masked_rows(&np, (float *)lse_ref.host, c->D), ft_unseen_keys(&np, c->D),
                                    ft_unseen_keys(&np, c->Dv)};
                for (int i = 0; i < 3; ++i) {
                    ok &= ft_check_result(names[i], &g[i], (float *)g_ref[i].host, naive[i], zero[i], c->dt, 1,
                                       magnitude, bsum, sizeof bsum);
                    free(zero[i]);
                }
                if (opts.deterministic) {
                    /* Same call again: the result must be bitwise identical. */
                    st = call_bwd(ft_ctx, &dout, &q, &k, &v, &out, &lse, &opts, &g2[0], &g2[1], &g2[2], ft_on_device);
                    if (st != FA_OK) ok = ft_note("second bwd: %s %s", fa_status_name(st), fa_last_error());
                    for (int i = 0; i < 3 && st == FA_OK; ++i)
                        if (!same_bytes(&g[i], &g2[i])) ok = ft_note("%s differs between two deterministic runs", names[i]);
                    size_t used = strlen(bsum);
                    snprintf(bsum + used, sizeof bsum - used, ", bitwise repeatable %s", ok ? "yes" : "no");
                }
                ft_check(ok, bname, "bwd %s", bsum);
            }
        }
        for (int i = 0; i < 3; ++i) {
            ft_free(&g_ref[i]);
            ft_free(&g[i]);
            ft_free(&g2[i]);
            free(naive[i]);
        }
        ft_free(&dout);
        ft_free(&doutf);
    }
done_fwd:
    ft_free(&out);
    ft_free(&lse);
    free(out_naive);
    free(lse_naive);
done_ref:
    ft_free(&out_ref);
    ft_free(&lse_ref);
    ft_free(&qf);
    ft_free(&kf);
    ft_free(&vf);
    ft_free(&q);
    ft_free(&k);
    ft_free(&v);
    if (c->alibi) ft_free(&slopes);
}

/* Lengths that do and do not divide the tiles; {130, 258} and {300, 172}
 * put the causal diagonal on 128-key block edges with Sq != Sk. */
static const int64_t k_lengths[][2] = {{1, 1},   {17, 17},  {113, 203},  {203, 113}, {1023, 1024}, {1, 239},
                                       {3, 799}, {128, 128}, {256, 512}, {130, 258}, {300, 172}};

static int big(int64_t Sq, int64_t Sk) { return Sq * Sk > 200000; }

static void shapes(fa_dtype dt, int first_dtype) {
    for (size_t s = 0; s < sizeof k_lengths / sizeof k_lengths[0]; ++s) {
        int64_t Sq = k_lengths[s][0], Sk = k_lengths[s][1];
        if (big(Sq, Sk) && ft_quick && !first_dtype) continue;
        scase c = make("lengths", dt, 1, Sq, Sk, 2, 2, 64, 64);
        run_case(&c);
        c.label = "lengths causal";
        c.opts.causal = 1;
        run_case(&c);
        if (big(Sq, Sk) && ft_quick) continue;
        c.label = "lengths causal top-left";
        c.opts.align = FA_ALIGN_TOP_LEFT;
        run_case(&c);
    }
}

static void head_dims(fa_dtype dt) {
    static const int64_t dims[] = {32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 256};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        scase c = make("head dim", dt, 1, 77, 140, 2, 1, dims[i], dims[i]);
        c.opts.causal = (i % 2) == 1;
        run_case(&c);
    }
    /* the causal diagonal on 128-key block edges, Sq != Sk */
    scase diag = make("head dim 128 causal, diagonal on block edges", dt, 1, 130, 258, 2, 1, 128, 128);
    diag.opts.causal = 1;
    run_case(&diag);
    /* Few query rows over many keys at head dims up to 64: on Hopper every
     * tile is short (at most 64 rows), and its kv blocks are split among
     * the kernel's consumers. */
    scase few = make("head dim 64, few rows over many keys", dt, 2, 50, 1000, 4, 2, 64, 64);
    run_case(&few);
    few = make("head dim 40, few rows over many keys, softcap", dt, 1, 64, 385, 3, 1, 40, 40);
    few.opts.softcap = 20.0f;
    run_case(&few);
    /* Head dims below one SIMD vector, with few query rows (decode-sized blocks)
     * and with a tail block after full ones. */
    static const int64_t tiny[] = {1, 2, 3, 5, 7};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; ++i) {
        scase c = make("tiny head dim, few rows", dt, 1, 3, 50, 4, 2, tiny[i], tiny[i]);
        c.opts.causal = (i % 2) == 0;
        run_case(&c);
        c = make("tiny head dim, tail block", dt, 1, 70, 90, 2, 1, tiny[i], 8 - tiny[i]);
        run_case(&c);
    }
    static const int64_t pairs[][2] = {{128, 64}, {64, 128}, {40, 96}, {192, 128}, {1, 7}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
        scase c = make("D != Dv", dt, 1, 70, 129, 2, 2, pairs[i][0], pairs[i][1]);
        c.opts.causal = (i % 2) == 0;
        run_case(&c);
    }
}

static void heads_and_layouts(fa_dtype dt) {
    static const int64_t ratios[][2] = {{3, 3}, {4, 2}, {8, 2}, {8, 1}};
    for (size_t i = 0; i < sizeof ratios / sizeof ratios[0]; ++i) {
        scase c = make("gqa", dt, 2, 65, 97, ratios[i][0], ratios[i][1], 64, 64);
        run_case(&c);
        c.label = "gqa causal";
        c.opts.causal = 1;
        run_case(&c);
    }
    scase c = make("batch", dt, 3, 33, 50, 2, 2, 32, 32);
    run_case(&c);
    c = make("strided padded", dt, 2, 113, 203, 4, 2, 64, 64);
    c.layout = FT_PADDED;
    run_case(&c);
    c.label = "strided padded causal";
    c.opts.causal = 1;
    run_case(&c);
    c = make("strided odd padding", dt, 2, 70, 90, 2, 1, 40, 40);
    c.layout = FT_PADDED_ODD;
    run_case(&c);
    c = make("qkv packed causal", dt, 2, 97, 97, 3, 3, 64, 64);
    c.layout = FT_QKV0;
    c.opts.causal = 1;
    run_case(&c);
    /* Head dim 64 causal: three heads a batch over 448 rows (a last query
     * block of 64 rows on 128-row tiles), then the diagonal 64 keys off the
     * 128-key block edges. */
    c = make("three heads, short last block causal", dt, 2, 448, 448, 3, 1, 64, 64);
    c.opts.causal = 1;
    run_case(&c);
    c = make("diagonal between block edges causal", dt, 1, 320, 384, 2, 2, 64, 64);
    c.opts.causal = 1;
    run_case(&c);
}

/* Scores far from the unit scale, one row per case (batch 1, D = Dv).
 * Large scores run forward only: at x30 the gradients are dominated by the
 * float32 rounding of the saved lse (scores in the thousands) and the
 * rounding of out in dout.out, errors inherent to the algorithm that a
 * naive implementation does not have; the backward is checked at x4
 * (medium). Head dim 64 unmasked runs the Hopper forward's three-consumer
 * kernel; at head dim 256 its running max lags (it moves only when a block
 * passes it by more than 2^8): maxima that rise every block or two, and
 * rows led by one key. */
static void magnitudes(fa_dtype dt) {
    static const struct {
        const char *label;
        int64_t Sq, Sk, Hq, Hk, D;
        int pattern, causal, bwd;
    } cases[] = {
        {"growing scores", 64, 700, 2, 2, 128, PAT_GROWING, 0, 1},
        {"growing scores causal", 300, 300, 1, 1, 64, PAT_GROWING, 1, 1},
        {"large scores", 113, 203, 2, 1, 64, PAT_LARGE, 0, 0},
        {"large scores causal", 113, 203, 2, 1, 64, PAT_LARGE, 1, 0},
        {"medium scores", 113, 203, 2, 1, 64, PAT_MEDIUM, 0, 1},
        {"medium scores causal", 113, 203, 2, 1, 64, PAT_MEDIUM, 1, 1},
        {"growing scores head dim 64", 64, 700, 2, 2, 64, PAT_GROWING, 0, 1},
        {"growing scores head dim 256", 64, 700, 2, 2, 256, PAT_GROWING, 0, 1},
        {"large scores head dim 256", 113, 203, 2, 1, 256, PAT_LARGE, 0, 0},
        {"medium scores head dim 256 causal", 113, 203, 2, 1, 256, PAT_MEDIUM, 1, 1},
        /* over 16 kv blocks of 64 keys: Hopper's head-dim-256 instance for
         * long unmasked problems (no top-block skip) */
        {"growing scores head dim 256, 1100 keys", 64, 1100, 2, 2, 256, PAT_GROWING, 0, 0},
        {"large scores head dim 256, 1100 keys", 113, 1100, 2, 1, 256, PAT_LARGE, 0, 0},
        /* head dims 80 and 96 (Hopper: a forward kernel of their own, the
         * paths of head dim 128 over rows of three 64-byte slabs) */
        {"growing scores head dim 96", 64, 700, 2, 2, 96, PAT_GROWING, 0, 1},
        {"medium scores head dim 80 causal", 300, 300, 2, 1, 80, PAT_MEDIUM, 1, 1},
        {"large scores head dim 96, 1100 keys", 113, 1100, 2, 1, 96, PAT_LARGE, 0, 0},
        /* head dim 192 (Hopper: a forward kernel of its own, the paths of
         * head dim 256 with O staged in a buffer of its own) */
        {"growing scores head dim 192", 64, 700, 2, 2, 192, PAT_GROWING, 0, 1},
        {"medium scores head dim 192 causal", 300, 300, 2, 1, 192, PAT_MEDIUM, 1, 1},
        {"large scores head dim 176, 1100 keys", 113, 1100, 2, 1, 176, PAT_LARGE, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        scase c = make(cases[i].label, dt, 1, cases[i].Sq, cases[i].Sk, cases[i].Hq, cases[i].Hk, cases[i].D,
                       cases[i].D);
        c.pattern = cases[i].pattern;
        c.opts.causal = cases[i].causal;
        c.bwd = cases[i].bwd;
        run_case(&c);
    }
}

static void masked_rows(fa_dtype dt) {
    scase c = make("masked rows causal Sq>Sk", dt, 2, 150, 40, 2, 1, 64, 64);
    c.opts.causal = 1;
    run_case(&c);
    c = make("masked rows window Sq>Sk", dt, 1, 90, 30, 2, 2, 40, 40);
    c.opts.use_window = 1;
    c.opts.window_left = 4;
    c.opts.window_right = 2;
    run_case(&c);
    c = make("masked rows window top-left", dt, 1, 90, 30, 2, 2, 64, 64);
    c.opts.use_window = 1;
    c.opts.window_left = 1;
    c.opts.window_right = 1;
    c.opts.align = FA_ALIGN_TOP_LEFT;
    run_case(&c);
    c = make("empty keys", dt, 2, 5, 0, 2, 1, 64, 64);
    run_case(&c);
    c = make("empty queries", dt, 2, 0, 7, 2, 1, 64, 64);
    run_case(&c);
}

static void options(fa_dtype dt) {
    scase c = make("scale 0.3", dt, 1, 113, 203, 2, 2, 64, 64);
    c.opts.scale = 0.3f;
    run_case(&c);
    c = make("softcap 5", dt, 1, 113, 203, 2, 1, 64, 64);
    c.opts.softcap = 5.0f;
    c.pattern = PAT_LARGE;
    run_case(&c);
    c = make("softcap 5 head dim 200, 1100 keys", dt, 1, 130, 1100, 2, 1, 200, 200);
    c.opts.softcap = 5.0f;
    c.bwd = 0;
    run_case(&c);
    c = make("softcap 30 causal", dt, 1, 130, 130, 2, 2, 128, 128);
    c.opts.softcap = 30.0f;
    c.opts.causal = 1;
    run_case(&c);
    c = make("softcap 10 head dim 64 causal", dt, 2, 256, 256, 1, 1, 64, 64);
    c.opts.softcap = 10.0f;
    c.pattern = PAT_LARGE;
    c.opts.causal = 1;
    run_case(&c);
    c = make("alibi per head", dt, 1, 113, 203, 4, 2, 64, 64);
    c.alibi = ALIBI_HEAD;
    run_case(&c);
    c = make("alibi per batch-head causal", dt, 2, 100, 90, 2, 2, 64, 64);
    c.alibi = ALIBI_BATCH_HEAD;
    c.opts.causal = 1;
    run_case(&c);
    c = make("alibi top-left causal", dt, 1, 60, 120, 2, 2, 64, 64);
    c.alibi = ALIBI_HEAD;
    c.opts.causal = 1;
    c.opts.align = FA_ALIGN_TOP_LEFT;
    run_case(&c);
    c = make("window left only", dt, 1, 150, 200, 2, 2, 64, 64);
    c.opts.use_window = 1;
    c.opts.window_left = 20;
    c.opts.window_right = -1;
    run_case(&c);
    c = make("window right only", dt, 1, 150, 200, 2, 2, 64, 64);
    c.opts.use_window = 1;
    c.opts.window_left = -1;
    c.opts.window_right = 15;
    run_case(&c);
    c = make("window both", dt, 1, 200, 150, 2, 1, 64, 64);
    c.opts.use_window = 1;
    c.opts.window_left = 30;
    c.opts.window_right = 7;
    run_case(&c);
    c.label = "window both top-left";
    c.opts.align = FA_ALIGN_TOP_LEFT;
    run_case(&c);
    c = make("window and causal", dt, 1, 170, 170, 2, 2, 96, 96);
    c.opts.use_window = 1;
    c.opts.window_left = 50;
    c.opts.window_right = 9; /* causal clips the right side to 0 */
    c.opts.causal = 1;
    run_case(&c);
    c = make("dropout 0.17 causal", dt, 2, 113, 203, 2, 1, 64, 64);
    c.opts.dropout_p = 0.17f;
    c.opts.dropout_seed = 0x123456789abcdefull;
    c.opts.dropout_offset = 42;
    c.opts.causal = 1;
    run_case(&c);
    c = make("dropout 0.5 gqa", dt, 1, 90, 140, 4, 2, 80, 80);
    c.opts.dropout_p = 0.5f;
    c.opts.dropout_seed = 7;
    c.opts.dropout_offset = 1ull << 40;
    run_case(&c);
    c = make("deterministic gqa", dt, 2, 129, 257, 8, 2, 64, 64);
    c.opts.deterministic = 1;
    run_case(&c);
    c = make("everything at once", dt, 2, 97, 211, 4, 1, 72, 56);
    c.opts.softcap = 12.0f;
    c.alibi = ALIBI_BATCH_HEAD;
    c.opts.use_window = 1;
    c.opts.window_left = 60;
    c.opts.window_right = 10;
    c.opts.dropout_p = 0.1f;
    c.opts.dropout_seed = 99;
    c.opts.scale = 0.2f;
    c.opts.deterministic = 1;
    c.layout = FT_PADDED;
    run_case(&c);
}

/* The CPU backend splits work by thread count: one thread and an odd count
 * must give the same answers. */
static void thread_counts(fa_dtype dt) {
    if (ft_on_device) return;
    static const int counts[] = {1, 3};
    for (int i = 0; i < 2; ++i) {
        char label[64];
        snprintf(label, sizeof label, "%d thread%s causal gqa", counts[i], counts[i] == 1 ? "" : "s");
        fa_context_set_num_threads(ft_ctx, counts[i]);
        scase c = make(label, dt, 2, 150, 260, 4, 2, 64, 64);
        c.opts.causal = 1;
        run_case(&c);
        c = make(counts[i] == 1 ? "1 thread decode" : "3 threads decode", dt, 3, 1, 700, 8, 1, 128, 128);
        run_case(&c);
    }
    const char *env = getenv("FA_TEST_THREADS");
    fa_context_set_num_threads(ft_ctx, env && *env ? atoi(env) : 0);
}

int main(void) {
    if (!ft_init("test_suite")) return ft_finish();
    fa_dtype dts[3];
    int ndt = ft_backend_dtypes(dts);
    for (int i = 0; i < ndt; ++i) {
        shapes(dts[i], i == 0);
        head_dims(dts[i]);
        heads_and_layouts(dts[i]);
        magnitudes(dts[i]);
        masked_rows(dts[i]);
        options(dts[i]);
        thread_counts(dts[i]);
    }
    return ft_finish();
}

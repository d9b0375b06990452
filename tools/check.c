#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline.h"
#include "convert.h"
#include "parallel.h"

/* Work the check may give each CPU core before a slice is taken: FLOPs of the
 * float64 reference plus the naive baseline, about two seconds of one core
 * (four times that for `flashattn check`). */
#ifndef REF_FLOPS_PER_CORE
#define REF_FLOPS_PER_CORE 8e9
#endif

struct cli_reference {
    cli_attention a;            /* the checked slice as a problem: shapes, options, float32 inputs */
    int64_t row0;               /* first checked query row of the full problem */
    int slice_top_left;         /* the row slice is aligned top-left (same diagonal as the full problem) */
    int dk_dv_checked;          /* the slice holds all a kv head's rows: dk and dv can be compared */
    int fwd_skipped, bwd_skipped;
    char scope[160];
    char skip_reason[160];
    int threads;
    float *q, *k, *v, *dout, *alibi;
    float *out, *lse, *dq, *dk, *dv;             /* float64 reference, stored as float32 */
    float *naive_out, *naive_lse;                /* same-precision baseline (half and float8 dtypes) */
};

/* ---- slices of (b, s, h, w) tensors ------------------------------------- */

/* dst (nb, ns, nh, W) <- rows [s0, s0 + ns) and heads [0, nh) of src (B, S, H, W). */
static void gather_bshw(float *dst, const void *src, fa_dtype t, int64_t S, int64_t H, int64_t W, int64_t nb,
                        int64_t s0, int64_t ns, int64_t nh) {
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t i = 0; i < ns; ++i)
            for (int64_t h = 0; h < nh; ++h) {
                int64_t from = ((b * S + s0 + i) * H + h) * W, to = ((b * ns + i) * nh + h) * W;
                for (int64_t d = 0; d < W; ++d) dst[to + d] = fa_load_f(src, t, from + d);
            }
}

/* dst (nb, nh, ns) <- lse, element (b, h, i) at b * sb + h * sh + i: (B, H, S)
 * for batched calls, (H, B * S) for packed ones. */
static void gather_lse(float *dst, const float *src, int64_t sb, int64_t sh, int64_t nb, int64_t s0, int64_t ns,
                       int64_t nh) {
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t i = 0; i < ns; ++i) dst[(b * nh + h) * ns + i] = src[b * sb + h * sh + s0 + i];
}

/* dst (nb, Sk, nk, W) <- keys of the cache or of the plain k / v tensor. */
static void gather_keys(float *dst, const cli_workload *w, const cli_buffer *cache, const cli_buffer *fresh,
                        int64_t W, int64_t nb, int64_t nk) {
    const cli_config *c = &w->cfg;
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t j = 0; j < w->Sk; ++j)
            for (int64_t h = 0; h < nk; ++h) {
                int64_t to = ((b * w->Sk + j) * nk + h) * W;
                const void *src;
                int64_t from;
                if (c->kvcache && j >= c->cache_len) { /* appended by the call: read k_new / v_new */
                    src = fresh->host;
                    from = ((b * c->new_keys + j - c->cache_len) * c->kv_heads + h) * W;
                } else {
                    src = cache->host;
                    from = (cli_workload_key_row(w, b, j) * c->kv_heads + h) * W;
                }
                for (int64_t d = 0; d < W; ++d) dst[to + d] = fa_load_f(src, c->dtype, from + d);
            }
}

/* x (nb, ns, nh, W) *= its descale: f[b * Hk + h / group] of a (B, Hk) array.
 * The slice starts at batch 0, head 0, so its b and h are the true indices. */
static void apply_descale(float *x, const float *f, int64_t nb, int64_t ns, int64_t nh, int64_t W, int64_t Hk,
                          int64_t group) {
    for (int64_t b = 0; b < nb; ++b)
        for (int64_t i = 0; i < ns; ++i)
            for (int64_t h = 0; h < nh; ++h) {
                const float s = f[b * Hk + h / group];
                float *row = x + ((b * ns + i) * nh + h) * W;
                for (int64_t d = 0; d < W; ++d) row[d] *= s;
            }
}

static float *alloc_floats(int64_t n) { return malloc(sizeof(float) * (size_t)(n > 0 ? n : 1)); }

/* ---- choosing the slice ------------------------------------------------- */

/* Fraction of (query, key) pairs the mask keeps: both the reference and the
 * naive baseline skip the others. */
static double visible_fraction(const cli_workload *w) {
    const cli_config *c = &w->cfg;
    const int64_t Sq = c->seqlen_q, Sk = w->Sk;
    int64_t left, right;
    cli_config_window(c, &left, &right);
    if (Sq == 0 || Sk == 0) return 0;
    double kept = 0;
    for (int64_t i = 0; i < Sq; ++i) {
        int64_t diag = i + (c->top_left ? 0 : Sk - Sq);
        int64_t lo = left < 0 ? 0 : diag - left, hi = right < 0 ? Sk - 1 : diag + right;
        if (lo < 0) lo = 0;
        if (hi > Sk - 1) hi = Sk - 1;
        if (hi >= lo) kept += (double)(hi - lo + 1);
    }
    return kept / ((double)Sq * (double)Sk);
}

/* FLOPs of the reference plus the naive baseline for nh heads of nb batches over ns rows. */
static double slice_cost(const cli_workload *w, int64_t nb, int64_t nh, int64_t ns, int backward) {
    const cli_config *c = &w->cfg;
    double f = 2.0 * (double)nb * (double)nh * (double)ns * (double)w->Sk * (double)(c->head_dim + c->head_dim_v);
    return 2.0 * f * (backward ? 3.5 : 1.0) * visible_fraction(w);
}

/* Work per core of checking a slice: the forward runs one unit per (batch,
 * query head), the backward one per (batch, kv head); dropout needs the true
 * indices, so the reference then runs as one call. */
static double slice_time(const cli_reference *r, const cli_workload *w, int64_t nb, int64_t nh, int64_t nk,
                         int64_t ns, int backward) {
    double units = w->cfg.dropout_p > 0 ? 1 : (double)(nb * (backward ? nk : nh));
    if (units > r->threads) units = r->threads;
    return slice_cost(w, nb, nh, ns, backward) / units;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/*
 * Pick the checked slice: everything if it fits the time budget, else batch 0
 * and enough leading heads to keep every core busy (whole GQA groups when the
 * backward is checked, since dk and dv sum over a group), and when that is
 * still too long, a block of query rows. dq and the forward outputs are
 * row-local, so a row block checks them exactly; dk and dv need every query
 * row of every head in their group, so they are compared only when the slice
 * has them.
 */
static void choose_slice(cli_reference *r, const cli_workload *w, int with_backward) {
    const cli_config *c = &w->cfg;
    const int64_t B = c->batch, Sq = c->seqlen_q, Hq = c->heads, Hk = c->kv_heads, group = Hq / Hk;
    const int64_t T = r->threads;
    /* `flashattn check` is asked for correctness alone: it may take longer. */
    const double budget = REF_FLOPS_PER_CORE * (c->thorough_check ? 4 : 1);
    int64_t nb = B, nh = Hq, nk = Hk, row0 = 0, rows = Sq;
    int whole_groups = 0;
    r->bwd_skipped = !with_backward;

    if (slice_time(r, w, B, Hq, Hk, Sq, with_backward) > budget) {
        nb = 1;
        if (with_backward) {
            /* As many whole groups as there are cores, else the fewest that still
             * test more than one head. */
            nk = min64(Hk, max64(group == 1 ? 2 : 1, (T + group - 1) / group));
            if (slice_time(r, w, nb, nk * group, nk, Sq, 1) > budget) nk = min64(Hk, group == 1 ? 2 : 1);
            nh = nk * group;
            whole_groups = slice_time(r, w, nb, nh, nk, Sq, 1) <= budget;
        }
        if (!whole_groups) {
            /* A prefix of query heads maps onto a prefix of kv heads. */
            if (group == 1) nh = nk = min64(Hq, max64(2, T));
            else if (group >= T) nk = 1, nh = min64(group, max64(2, T));
            else nk = min64(Hk, (T + group - 1) / group), nh = nk * group;
        }
        double per_row = slice_time(r, w, nb, nh, nk, 1, with_backward);
        if (per_row * (double)rows > budget) {
            int64_t fit = max64(1, (int64_t)(budget / per_row));
            /* The first rows keep a top-left diagonal (the bottom-right one too when
             * Sq == Sk, as the offset is then 0) and their dropout bits, which depend
             * on the row; the last rows keep a bottom-right diagonal. */
            if (c->top_left || Sq == w->Sk) {
                rows = fit;
                r->slice_top_left = 1;
            } else if (c->dropout_p <= 0) {
                row0 = Sq - fit;
                rows = fit;
            } else {
                r->fwd_skipped = r->bwd_skipped = 1;
                snprintf(r->skip_reason, sizeof r->skip_reason,
                         "not checked: the reference would take too long at this size");
            }
        }
    }
    /* dk and dv are complete only with every row of every head of their groups. */
    r->dk_dv_checked = rows == Sq && nh == nk * group;
    if (nb == B && nh == Hq && rows == Sq) snprintf(r->scope, sizeof r->scope, "all");
    else if (rows == Sq) snprintf(r->scope, sizeof r->scope, "batch 0, heads 0-%lld", (long long)nh - 1);
    else
        snprintf(r->scope, sizeof r->scope, "batch 0, heads 0-%lld, query rows %lld-%lld", (long long)nh - 1,
                 (long long)row0, (long long)(row0 + rows - 1));

    cli_attention *a = &r->a;
    a->B = nb;
    a->Sq = rows;
    a->Sk = w->Sk;
    a->Hq = nh;
    a->Hk = nk;
    a->D = c->head_dim;
    a->Dv = c->head_dim_v;
    a->dtype = c->dtype;
    a->scale = c->scale > 0 ? c->scale : (float)(1.0 / sqrt((double)c->head_dim));
    a->softcap = c->softcap;
    cli_config_window(c, &a->window_left, &a->window_right);
    a->top_left = c->top_left || r->slice_top_left;
    a->dropout_p = c->dropout_p;
    a->dropout_seed = w->opts.dropout_seed;
    a->dropout_offset = w->opts.dropout_offset;
    r->row0 = row0;
}

cli_reference *cli_reference_create(const cli_workload *w, int with_backward) {
    cli_reference *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->threads = cli_cpu_count();
    choose_slice(r, w, with_backward);
    const cli_config *c = &w->cfg;
    cli_attention *a = &r->a;
    r->q = alloc_floats(a->B * a->Sq * a->Hq * a->D);
    r->k = alloc_floats(a->B * a->Sk * a->Hk * a->D);
    r->v = alloc_floats(a->B * a->Sk * a->Hk * a->Dv);
    if (!r->q || !r->k || !r->v) {
        cli_reference_destroy(r);
        return NULL;
    }
    gather_bshw(r->q, w->q.host, c->dtype, c->seqlen_q, c->heads, a->D, a->B, r->row0, a->Sq, a->Hq);
    gather_keys(r->k, w, &w->k, &w->k_new, a->D, a->B, a->Hk);
    gather_keys(r->v, w, &w->v, &w->v_new, a->Dv, a->B, a->Hk);
    if (c->descale) { /* float8: the values the caller quantised, e4m3 times the factor (rounded to float32) */
        apply_descale(r->q, w->descale[0].host, a->B, a->Sq, a->Hq, a->D, c->kv_heads, c->heads / c->kv_heads);
        apply_descale(r->k, w->descale[1].host, a->B, a->Sk, a->Hk, a->D, c->kv_heads, 1);
        apply_descale(r->v, w->descale[2].host, a->B, a->Sk, a->Hk, a->Dv, c->kv_heads, 1);
    }
    if (!r->bwd_skipped) {
        if (!(r->dout = alloc_floats(a->B * a->Sq * a->Hq * a->Dv))) {
            cli_reference_destroy(r);
            return NULL;
        }
        gather_bshw(r->dout, w->dout.host, c->dtype, c->seqlen_q, c->heads, a->Dv, a->B, r->row0, a->Sq, a->Hq);
    }
    if (c->alibi) {
        if (!(r->alibi = alloc_floats(a->Hq))) {
            cli_reference_destroy(r);
            return NULL;
        }
        memcpy(r->alibi, w->alibi.host, sizeof(float) * (size_t)a->Hq);
    }
    a->q = r->q;
    a->k = r->k;
    a->v = r->v;
    a->dout = r->dout;
    a->alibi = r->alibi;
    return r;
}

void cli_reference_destroy(cli_reference *r) {
    if (!r) return;
    float *all[] = {r->q, r->k, r->v, r->dout, r->alibi, r->out, r->lse, r->dq, r->dk, r->dv,
                    r->naive_out, r->naive_lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
    free(r);
}

/* ---- the reference through the public API -------------------------------- */

static fa_tensor view4(float *base, int64_t n0, int64_t n1, int64_t n2, int64_t n3, int64_t s0, int64_t s1,
                       int64_t s2) {
    fa_tensor t = fa_tensor_4d(base, FA_F32, n0, n1, n2, n3);
    t.stride[0] = s0;
    t.stride[1] = s1;
    t.stride[2] = s2;
    return t;
}

typedef struct ref_job {
    cli_reference *r;
    fa_options opts;
    int backward;
    int whole;             /* one call for the whole slice (dropout needs true b, h indices) */
    fa_status status;      /* first failure */
    char message[256];
} ref_job;

/* One unit through fa_fwd / fa_bwd on strided views into the slice arrays: a
 * (batch, query head) for the forward, a (batch, kv head) with its whole group
 * for the backward (dk, dv sum over the group), or the whole slice. */
static void ref_unit(void *arg, int unit) {
    ref_job *job = arg;
    cli_reference *r = job->r;
    const cli_attention *a = &r->a;
    const int64_t sg = a->Hq / a->Hk; /* query heads per kv head in the slice */
    int64_t b0 = 0, nb = a->B, h0 = 0, nh = a->Hq, k0 = 0, nk = a->Hk;
    if (!job->whole && !job->backward) {
        b0 = unit / a->Hq;
        h0 = unit % a->Hq;
        k0 = h0 / sg;
        nb = nh = nk = 1;
    } else if (!job->whole) {
        b0 = unit / a->Hk;
        k0 = unit % a->Hk;
        h0 = k0 * sg;
        nh = sg;
        nb = nk = 1;
    }
    const int64_t Sq = a->Sq, Sk = a->Sk, D = a->D, Dv = a->Dv;
    const int64_t qb = Sq * a->Hq, kb = Sk * a->Hk; /* rows * heads per batch */
#define QVIEW(base, W) view4((base) + (b0 * qb + h0) * (W), nb, Sq, nh, W, qb * (W), a->Hq * (W), W)
#define KVIEW(base, W) view4((base) + (b0 * kb + k0) * (W), nb, Sk, nk, W, kb * (W), a->Hk * (W), W)
    fa_tensor q = QVIEW(r->q, D), k = KVIEW(r->k, D), v = KVIEW(r->v, Dv), out = QVIEW(r->out, Dv);
    fa_tensor lse = fa_tensor_3d(r->lse + (b0 * a->Hq + h0) * Sq, FA_F32, nb, nh, Sq);
    lse.stride[0] = a->Hq * Sq;
    fa_options o = job->opts;
    if (r->alibi) o.alibi_slopes = fa_tensor_1d(r->alibi + h0, FA_F32, nh);

    fa_context *ctx = NULL;
    fa_status s = fa_context_create(&ctx);
    if (!s) s = fa_context_set_backend(ctx, FA_BACKEND_REFERENCE);
    if (!s && !job->backward) {
        s = fa_fwd(ctx, &q, &k, &v, &o, &out, &lse);
    } else if (!s) {
        fa_tensor dout = QVIEW(r->dout, Dv), dq = QVIEW(r->dq, D), dk = KVIEW(r->dk, D), dv = KVIEW(r->dv, Dv);
        s = fa_bwd(ctx, &dout, &q, &k, &v, &out, &lse, &o, &dq, &dk, &dv);
    }
#undef QVIEW
#undef KVIEW
    if (s && !job->status) { /* racy only in which failure is reported first */
        job->status = s;
        snprintf(job->message, sizeof job->message, "reference: %s", fa_last_error());
    }
    fa_context_destroy(ctx);
}

static int run_reference(cli_reference *r, const cli_workload *w, int backward, char *err, size_t err_len) {
    ref_job job;
    memset(&job, 0, sizeof job);
    job.r = r;
    job.opts = w->opts;
    job.opts.alibi_slopes.data = NULL;
    /* The float32 copies already carry the float8 descales (which the API takes for float8 only). */
    job.opts.q_descale.data = job.opts.k_descale.data = job.opts.v_descale.data = NULL;
    if (r->slice_top_left) job.opts.align = FA_ALIGN_TOP_LEFT;
    job.backward = backward;
    job.whole = w->cfg.dropout_p > 0;
    int units = job.whole ? 1 : (int)(r->a.B * (backward ? r->a.Hk : r->a.Hq));
    cli_parallel_for(units, r->threads, ref_unit, &job);
    if (job.status) snprintf(err, err_len, "%s", job.message);
    return job.status == FA_OK;
}

/* ---- comparing ---------------------------------------------------------- */

/* Unit roundoff of a storage dtype: the rounding error of storing 1.0. */
static double unit_roundoff(fa_dtype t) {
    return t == FA_BF16 ? 1.0 / 256 : t == FA_F16 ? 1.0 / 2048 : 0x1p-24;
}

/* Max |x - ref| and max |ref|; -inf must match -inf exactly (lse of empty rows). */
static void max_error(const float *x, const float *ref, int64_t n, double *err, double *ref_max) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; ++i) {
        double a = x[i], b = ref[i];
        if (isinf(b) || isinf(a) || isnan(a)) {
            if (!(a == b)) e = INFINITY;
            continue;
        }
        if (fabs(a - b) > e) e = fabs(a - b);
        if (fabs(b) > m) m = fabs(b);
    }
    *err = e;
    *ref_max = m;
}

static long long count_nan(const cli_buffer *b, fa_dtype t) {
    long long n = 0;
    int64_t count = (int64_t)(b->bytes / fa_dtype_size(t));
    for (int64_t i = 0; i < count; ++i) n += isnan(fa_load_f(b->host, t, i));
    return n;
}

/* Fill one quantity: the kernel's slice x against ref, and the naive baseline
 * (NULL for float32) scaled by `factor`. t is x's dtype. */
static void judge(cli_quantity *q, const char *name, fa_dtype t, const float *x, const float *ref, const float *naive,
                  int64_t n, double factor, long long nan_count) {
    q->name = name;
    max_error(x, ref, n, &q->err, &q->ref_max);
    q->nan_count = nan_count;
    if (t == FA_F32 || !naive) {
        q->naive_err = -1;
        q->bound = 1e-4 * (q->ref_max > 1 ? q->ref_max : 1); /* relative, absolute below magnitude 1 */
    } else {
        double unused;
        max_error(naive, ref, n, &q->naive_err, &unused);
        /* The floor, half the unit roundoff (about twice the error of storing a
         * value near 0.3), covers outputs the naive attention gets exactly. */
        q->bound = factor * q->naive_err + 0.5 * unit_roundoff(t);
    }
    q->pass = q->err <= q->bound && nan_count == 0;
}

/*
 * The float8 lse, row by row as tests/test_fp8.c checks it: row i passes when
 * |x_i - ref_i| <= factor * max |naive - ref| + 2^-12 * max(1, D / 128) *
 * score_abs_i + 1e-4. score_abs_i is the row's largest scale * sum_d |q_d k_d|:
 * e4m3 tensor cores sum Q K^T in about 14 bits and truncate, so a score may be
 * off by a few 2^-13 of it per 128 head-dim columns (each k-group's loss adds
 * up), and lse by as much as its worst score; 1e-4 covers exp and log. err
 * and bound are those of the row nearest its bound.
 */
static void judge_rows(cli_quantity *q, const char *name, const float *x, const float *ref, const float *naive,
                       const float *score_abs, int64_t n, int64_t D, double factor, long long nan_count) {
    const double per_score = ldexp(D > 128 ? (double)D / 128 : 1.0, -12); /* bound per unit of score_abs */
    double unused, worst = -1;
    q->name = name;
    q->per_row = 1;
    q->nan_count = nan_count;
    max_error(naive, ref, n, &q->naive_err, &unused);
    max_error(x, ref, n, &unused, &q->ref_max); /* for max |ref| */
    q->err = 0;
    q->bound = factor * q->naive_err + 1e-4; /* no rows: the bound of a row with score_abs 0 */
    for (int64_t i = 0; i < n; ++i) {
        double e, b = factor * q->naive_err + per_score * score_abs[i] + 1e-4;
        max_error(x + i, ref + i, 1, &e, &unused); /* one row, with max_error's rules for -inf and NaN */
        if (e / b > worst) {
            worst = e / b;
            q->err = e;
            q->bound = b;
        }
    }
    q->pass = q->err <= q->bound && nan_count == 0;
}

static void finish(cli_check *c) {
    c->status = CLI_CHECK_PASS;
    for (int i = 0; i < c->n; ++i)
        if (!c->q[i].pass) c->status = CLI_CHECK_FAIL;
}

int cli_check_fwd(cli_reference *r, const cli_workload *w, cli_check *c, char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    const cli_attention *a = &r->a;
    const cli_config *cf = &w->cfg;
    if (r->fwd_skipped) {
        c->status = CLI_CHECK_SKIPPED;
        snprintf(c->scope, sizeof c->scope, "%s", r->skip_reason);
        return 1;
    }
    snprintf(c->scope, sizeof c->scope, "%s", r->scope);
    const int64_t n_out = a->B * a->Sq * a->Hq * a->Dv, n_lse = a->B * a->Hq * a->Sq;
    r->out = alloc_floats(n_out);
    r->lse = alloc_floats(n_lse);
    float *x_out = alloc_floats(n_out), *x_lse = alloc_floats(n_lse);
    const fa_dtype out_t = fa_out_dtype(cf->dtype);
    const int fp8 = cf->dtype == FA_F8_E4M3;
    const int with_naive = cf->dtype != FA_F32; /* the half and float8 rules need the naive baseline */
    float *score_abs = fp8 ? alloc_floats(n_lse) : NULL; /* float8: the per-row size of the lse bound */
    if (with_naive) {
        r->naive_out = alloc_floats(n_out);
        r->naive_lse = alloc_floats(n_lse);
    }
    int ok = r->out && r->lse && x_out && x_lse && (!with_naive || (r->naive_out && r->naive_lse)) &&
             (!fp8 || score_abs);
    if (!ok) snprintf(err, err_len, "out of memory for the reference check");
    if (ok) ok = run_reference(r, w, 0, err, err_len);
    if (ok) {
        if (with_naive) cli_naive_fwd(a, r->naive_out, r->naive_lse, score_abs, r->threads);
        gather_bshw(x_out, w->out.host, out_t, cf->seqlen_q, cf->heads, a->Dv, a->B, r->row0, a->Sq, a->Hq);
        const int64_t S = cf->seqlen_q;
        gather_lse(x_lse, w->lse.host, cf->varlen ? S : cf->heads * S, cf->varlen ? cf->batch * S : S, a->B, r->row0,
                   a->Sq, a->Hq);
        /* out is judged in its own dtype: bf16 for float8 inputs. */
        judge(&c->q[0], "out", out_t, x_out, r->out, r->naive_out, n_out, 2, count_nan(&w->out, out_t));
        if (fp8)
            judge_rows(&c->q[1], "lse", x_lse, r->lse, r->naive_lse, score_abs, n_lse, a->D, 2,
                       count_nan(&w->lse, FA_F32));
        else
            judge(&c->q[1], "lse", cf->dtype, x_lse, r->lse, r->naive_lse, n_lse, 2, count_nan(&w->lse, FA_F32));
        c->n = 2;
        finish(c);
    }
    free(x_out);
    free(x_lse);
    free(score_abs);
    return ok;
}

int cli_check_bwd(cli_reference *r, const cli_workload *w, cli_check *c, char *err, size_t err_len) {
    memset(c, 0, sizeof *c);
    const cli_attention *a = &r->a;
    const cli_config *cf = &w->cfg;
    if (r->bwd_skipped || r->fwd_skipped || !r->out) {
        c->status = CLI_CHECK_SKIPPED;
        snprintf(c->scope, sizeof c->scope, "%s", r->skip_reason);
        return 1;
    }
    if (r->dk_dv_checked) snprintf(c->scope, sizeof c->scope, "%s", r->scope);
    else snprintf(c->scope, sizeof c->scope, "%s; dq only (dk, dv need every query row of a group)", r->scope);
    const int64_t nq = a->B * a->Sq * a->Hq * a->D, nk = a->B * a->Sk * a->Hk * a->D,
                  nv = a->B * a->Sk * a->Hk * a->Dv;
    r->dq = alloc_floats(nq);
    r->dk = alloc_floats(nk);
    r->dv = alloc_floats(nv);
    float *x_dq = alloc_floats(nq), *x_dk = alloc_floats(nk), *x_dv = alloc_floats(nv);
    int half = cf->dtype != FA_F32;
    float *n_dq = half ? alloc_floats(nq) : NULL, *n_dk = half ? alloc_floats(nk) : NULL,
          *n_dv = half ? alloc_floats(nv) : NULL;
    int ok = r->dq && r->dk && r->dv && x_dq && x_dk && x_dv && (!half || (n_dq && n_dk && n_dv));
    if (!ok) snprintf(err, err_len, "out of memory for the reference check");
    if (ok) ok = run_reference(r, w, 1, err, err_len);
    if (ok) {
        if (half) cli_naive_bwd(a, n_dq, n_dk, n_dv, r->threads);
        gather_bshw(x_dq, w->dq.host, cf->dtype, cf->seqlen_q, cf->heads, a->D, a->B, r->row0, a->Sq, a->Hq);
        judge(&c->q[0], "dq", cf->dtype, x_dq, r->dq, n_dq, nq, 3, count_nan(&w->dq, cf->dtype));
        c->n = 1;
        if (r->dk_dv_checked) {
            gather_bshw(x_dk, w->dk.host, cf->dtype, w->Sk, cf->kv_heads, a->D, a->B, 0, a->Sk, a->Hk);
            gather_bshw(x_dv, w->dv.host, cf->dtype, w->Sk, cf->kv_heads, a->Dv, a->B, 0, a->Sk, a->Hk);
            judge(&c->q[1], "dk", cf->dtype, x_dk, r->dk, n_dk, nk, 3, count_nan(&w->dk, cf->dtype));
            judge(&c->q[2], "dv", cf->dtype, x_dv, r->dv, n_dv, nv, 3, count_nan(&w->dv, cf->dtype));
            c->n = 3;
        } else {
            /* Not compared, but still every element must have been written. */
            const cli_buffer *unchecked[2] = {&w->dk, &w->dv};
            const char *names[2] = {"dk", "dv"};
            for (int i = 0; i < 2; ++i) {
                long long nan = count_nan(unchecked[i], cf->dtype);
                if (!nan) continue;
                cli_quantity *q = &c->q[c->n++];
                memset(q, 0, sizeof *q);
                q->name = names[i];
                q->err = INFINITY;
                q->naive_err = -1;
                q->nan_count = nan;
            }
        }
        finish(c);
    }
    free(x_dq); free(x_dk); free(x_dv);
    free(n_dq); free(n_dk); free(n_dv);
    return ok;
}

const cli_quantity *cli_check_worst(const cli_check *c) {
    const cli_quantity *worst = NULL;
    double worst_ratio = -1;
    for (int i = 0; i < c->n; ++i) {
        const cli_quantity *q = &c->q[i];
        double ratio = q->nan_count ? INFINITY : q->bound > 0 ? q->err / q->bound : q->err > 0 ? INFINITY : 0;
        if (ratio > worst_ratio) {
            worst = q;
            worst_ratio = ratio;
        }
    }
    return worst;
}

/*
 * The reference backend: for each (sequence, head) gather the operands from
 * their storage dtype into plain double arrays, run the float64 core
 * (ref_core.c), and store the results back. Work items are (sequence, head)
 * pairs, spread over threads (ref_threads.c); each writes only its own
 * outputs and computes them in a fixed order, so the result is deterministic
 * by construction, whatever the thread count.
 */
#include <math.h>
#include <stdlib.h>

#include "convert.h"
#include "ref.h"

/* --- gather / scatter between a strided view and a dense (rows, width) double array --- */

/* Which side of the problem a view belongs to: query rows (q, out, dout, dq) or
 * keys (k, v, dk, dv; paged or not). */
typedef enum { QUERY_SIDE, KEY_SIDE } side;

static int64_t row_offset(const fa_problem *p, const fa_view *x, side sd, int64_t b, int64_t r, int64_t h) {
    return sd == KEY_SIDE ? fa_k_offset(p, x, b, r, h) : fa_q_offset(p, x, b, r, h);
}

/* Rows r < rows of sequence b, head h of x into dst. */
static void gather(const fa_problem *p, const fa_view *x, side sd, int64_t b, int64_t h, int64_t rows,
                   int64_t width, double *dst) {
    for (int64_t r = 0; r < rows; ++r) {
        int64_t base = row_offset(p, x, sd, b, r, h);
        for (int64_t c = 0; c < width; ++c) dst[r * width + c] = fa_load_f(x->data, p->dtype, base + c);
    }
}

/* src into rows r < rows of sequence b, head h of x, stored as dtype t. */
static void scatter_as(const fa_problem *p, const fa_view *x, side sd, int64_t b, int64_t h, int64_t rows,
                       int64_t width, const double *src, fa_dtype t) {
    for (int64_t r = 0; r < rows; ++r) {
        int64_t base = row_offset(p, x, sd, b, r, h);
        for (int64_t c = 0; c < width; ++c) fa_store_f(x->data, t, base + c, (float)src[r * width + c]);
    }
}

static void scatter(const fa_problem *p, const fa_view *x, side sd, int64_t b, int64_t h, int64_t rows,
                    int64_t width, const double *src) {
    scatter_as(p, x, sd, b, h, rows, width, src, p->dtype);
}

/* float8: multiply a gathered (rows, width) block by its descale factor of
 * (batch b, kv head hk) (absent: 1); the products are exact in double. */
static void apply_descale(const fa_problem *p, const float *descale, int64_t b, int64_t hk, int64_t n, double *a) {
    if (p->dtype != FA_F8_E4M3 || !descale) return;
    double f = descale[b * p->Hk + hk];
    for (int64_t i = 0; i < n; ++i) a[i] *= f;
}

/* --- per-head options and buffers --- */

static fa_ref_head_opts head_opts(const fa_problem *p, int64_t b, int64_t h) {
    fa_ref_head_opts o = fa_ref_head_opts_plain(p->scale);
    o.softcap = p->softcap;
    o.alibi_slope = fa_alibi_slope(p, b, h);
    o.window_left = p->window_left;
    o.window_right = p->window_right;
    o.top_left = p->top_left;
    o.dropout_p = p->dropout_p;
    o.dropout_seed = p->dropout_seed;
    o.dropout_offset = p->dropout_offset;
    o.dropout_b = b;
    o.dropout_h = h;
    return o;
}

/* Dense double copies of one head's operands, sized for the longest sequence. */
typedef struct ref_buffers {
    double *q, *k, *v, *out, *lse;  /* forward */
    double *dout, *dq, *dk, *dv;    /* backward only */
} ref_buffers;

static void ref_buffers_free(ref_buffers *w) {
    free(w->q); free(w->k); free(w->v); free(w->out); free(w->lse);
    free(w->dout); free(w->dq); free(w->dk); free(w->dv);
}

static double *alloc_doubles(int64_t n, int *failed) {
    double *a = (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!a) *failed = 1;
    return a;
}

/* The longest query and key sequence over the batch (maxima for varlen / KV cache). */
static void max_seqlens(const fa_problem *p, int64_t *sq_max, int64_t *sk_max) {
    *sq_max = 0;
    *sk_max = 0;
    for (int64_t b = 0; b < p->B; ++b) {
        if (fa_seqlen_q(p, b) > *sq_max) *sq_max = fa_seqlen_q(p, b);
        if (fa_seqlen_k(p, b) > *sk_max) *sk_max = fa_seqlen_k(p, b);
    }
}

static fa_status ref_buffers_alloc(const fa_problem *p, int backward, ref_buffers *w) {
    int64_t sq, sk;
    max_seqlens(p, &sq, &sk);
    int failed = 0;
    *w = (ref_buffers){0};
    w->q = alloc_doubles(sq * p->D, &failed);
    w->k = alloc_doubles(sk * p->D, &failed);
    w->v = alloc_doubles(sk * p->Dv, &failed);
    if (backward) {
        w->dout = alloc_doubles(sq * p->Dv, &failed);
        w->dq = alloc_doubles(sq * p->D, &failed);
        w->dk = alloc_doubles(sk * p->D, &failed);
        w->dv = alloc_doubles(sk * p->Dv, &failed);
    } else {
        w->out = alloc_doubles(sq * p->Dv, &failed);
        w->lse = alloc_doubles(sq, &failed);
    }
    if (failed) {
        ref_buffers_free(w);
        *w = (ref_buffers){0}; /* safe to free again */
        return fa_set_error(FA_ERR_OUT_OF_MEMORY, "reference backend: cannot allocate buffers for sequences of "
                            "%lld queries and %lld keys", (long long)sq, (long long)sk);
    }
    return FA_OK;
}

/* --- work items --- */

/* Forward item: sequence b, query head h. */
static fa_status fwd_item(const fa_problem *p, int64_t b, int64_t h, ref_buffers *w) {
    int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b), hk = fa_kv_head(p, h);
    gather(p, &p->k, KEY_SIDE, b, hk, sk, p->D, w->k);
    gather(p, &p->v, KEY_SIDE, b, hk, sk, p->Dv, w->v);
    gather(p, &p->q, QUERY_SIDE, b, h, sq, p->D, w->q);
    apply_descale(p, p->k_descale, b, hk, sk * p->D, w->k);
    apply_descale(p, p->v_descale, b, hk, sk * p->Dv, w->v);
    apply_descale(p, p->q_descale, b, hk, sq * p->D, w->q);
    fa_ref_head_opts o = head_opts(p, b, h);
    fa_status st = fa_ref_attention_fwd_f64(&o, sq, sk, p->D, p->Dv, w->q, w->k, w->v, w->out, w->lse);
    if (st != FA_OK) return st;
    /* float8 inputs give a bfloat16 output */
    scatter_as(p, &p->out, QUERY_SIDE, b, h, sq, p->Dv, w->out, fa_out_dtype(p->dtype));
    if (p->lse)
        for (int64_t i = 0; i < sq; ++i) p->lse[fa_lse_offset(p, b, h, i)] = (float)w->lse[i];
    return FA_OK;
}

/* Backward item: sequence b, kv head hk and every query head that reads it,
 * so that dk and dv are summed in one place, in a fixed order. */
static fa_status bwd_item(const fa_problem *p, int64_t b, int64_t hk, ref_buffers *w) {
    int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    gather(p, &p->k, KEY_SIDE, b, hk, sk, p->D, w->k);
    gather(p, &p->v, KEY_SIDE, b, hk, sk, p->Dv, w->v);
    /* dk, dv of this kv head: the sum over the query heads that read it */
    for (int64_t n = 0; n < sk * p->D; ++n) w->dk[n] = 0.0;
    for (int64_t n = 0; n < sk * p->Dv; ++n) w->dv[n] = 0.0;
    for (int64_t h = 0; h < p->Hq; ++h) {
        if (fa_kv_head(p, h) != hk) continue;
        fa_ref_head_opts o = head_opts(p, b, h);
        gather(p, &p->q, QUERY_SIDE, b, h, sq, p->D, w->q);
        gather(p, &p->dout, QUERY_SIDE, b, h, sq, p->Dv, w->dout);
        fa_status st = fa_ref_attention_bwd_f64(&o, sq, sk, p->D, p->Dv, w->q, w->k, w->v, w->dout, w->dq, w->dk,
                                                w->dv);
        if (st != FA_OK) return st;
        scatter(p, &p->dq, QUERY_SIDE, b, h, sq, p->D, w->dq);
    }
    scatter(p, &p->dk, KEY_SIDE, b, hk, sk, p->D, w->dk);
    scatter(p, &p->dv, KEY_SIDE, b, hk, sk, p->Dv, w->dv);
    return FA_OK;
}

/* One thread's share of the items, with its own buffers. Forward items are
 * (b, h), numbered b * Hq + h; backward items are (b, hk), numbered b * Hk + hk. */
typedef struct ref_job {
    const fa_problem *p;
    int backward;
} ref_job;

static fa_status ref_worker(void *arg, int64_t first, int64_t step, int64_t count) {
    const ref_job *job = (const ref_job *)arg;
    ref_buffers w;
    fa_status st = ref_buffers_alloc(job->p, job->backward, &w);
    for (int64_t t = first; t < count && st == FA_OK; t += step) {
        int64_t heads = job->backward ? job->p->Hk : job->p->Hq;
        st = job->backward ? bwd_item(job->p, t / heads, t % heads, &w) : fwd_item(job->p, t / heads, t % heads, &w);
    }
    ref_buffers_free(&w);
    return st;
}

/* --- entry points --- */

fa_status fa_ref_fwd(const fa_problem *p, const fa_exec *x) {
    ref_job job = {p, 0};
    return fa_ref_run_threads(x->num_threads, p->B * p->Hq, ref_worker, &job);
}

fa_status fa_ref_bwd(const fa_problem *p, const fa_exec *x) {
    ref_job job = {p, 1};
    return fa_ref_run_threads(x->num_threads, p->B * p->Hk, ref_worker, &job);
}

/*
 * Tensors reach this backend only from the CPU: the front end routes CUDA
 * tensors elsewhere and refuses FA_BACKEND_REFERENCE for them. float8 e4m3
 * is a forward input: the forward item dequantises it exactly (times the
 * descales) and writes a bfloat16 output.
 */
static fa_status ref_supports(const fa_problem *p, fa_op op) {
    switch (p->dtype) {
    case FA_F32:
    case FA_F16:
    case FA_BF16:
        return FA_OK;
    case FA_F8_E4M3:
        if (op == FA_OP_FWD) return FA_OK;
        return fa_set_error(FA_ERR_DTYPE, "q: float8_e4m3 is a forward input (the reference backend has no float8 %s)",
                            op == FA_OP_BWD ? "backward" : "KV cache");
    default:
        return fa_set_error(FA_ERR_DTYPE, "q: dtype %s is not supported by the reference backend "
                            "(float32, float16, bfloat16, or float8_e4m3 forward, on the CPU)", fa_dtype_name(p->dtype));
    }
}

/* The reference allocates its own scratch (a few rows of doubles per head). */
static size_t ref_workspace_size(const fa_problem *p, fa_op op, const fa_exec *x) {
    (void)p;
    (void)op;
    (void)x;
    return 0;
}

const fa_backend_ops fa_ref_backend = {
    .name = "reference",
    .supports = ref_supports,
    .workspace_size = ref_workspace_size,
    .fwd = fa_ref_fwd,
    .bwd = fa_ref_bwd,
    .kvcache = fa_ref_kvcache,
    .merge = fa_ref_merge,
    .alloc = NULL, /* no workspace: nothing for the front end to allocate */
    .release = NULL,
};

/*
 * The attention entry points: validate, resolve into an fa_problem, dispatch.
 * Nothing is written before every argument has been checked.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

static fa_status run_fwd(const fa_backend_ops *ops, const void *p, const fa_exec *x) {
    return ops->fwd((const fa_problem *)p, x);
}
static fa_status run_bwd(const fa_backend_ops *ops, const void *p, const fa_exec *x) {
    return ops->bwd((const fa_problem *)p, x);
}

static int64_t numel(const fa_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
    return n;
}

/* Layout of the q-side / k-side tensors of a call: batched (B, S, H, D) or packed (total, H, D). */
typedef struct layout {
    int ndim;          /* 4 batched, 3 packed */
    int seq_dim;       /* dimension holding the sequence (or packed rows) */
} layout;

static const layout BATCHED = {4, 1};
static const layout PACKED = {3, 0};

static fa_view view_of(const fa_tensor *t, layout l) { return l.ndim == 4 ? fa_view_of4(t) : fa_view_of3(t); }

/*
 * q, k, v: tensors, dtypes, devices, heads, head dims. Fills the shape fields
 * of p (B only for batched) and the q, k, v views.
 */
static fa_status check_qkv(const fa_tensor *q, const fa_tensor *k, const fa_tensor *v, layout l, fa_problem *p) {
    fa_status s;
    if ((s = fa_check_tensor(q, "q", l.ndim)) || (s = fa_check_tensor(k, "k", l.ndim)) ||
        (s = fa_check_tensor(v, "v", l.ndim)))
        return s;
    if ((s = fa_check_same_device(k, "k", q, "q")) || (s = fa_check_same_device(v, "v", q, "q"))) return s;
    if (!fa_is_float_storage(q->dtype) && q->dtype != FA_F8_E4M3)
        return fa_set_error(FA_ERR_DTYPE, "q: dtype must be float32, float16, bfloat16 or float8_e4m3, got %s",
                            fa_dtype_name(q->dtype));
    if ((s = fa_check_dtype(k, "k", q->dtype)) || (s = fa_check_dtype(v, "v", q->dtype))) return s;

    int hd = l.ndim - 2, dd = l.ndim - 1; /* head and head-dim dimensions */
    p->dtype = q->dtype;
    p->Hq = q->shape[hd];
    p->Hk = k->shape[hd];
    p->D = q->shape[dd];
    p->Dv = v->shape[dd];
    if ((s = fa_check_head_dim(p->D, "q")) || (s = fa_check_head_dim(p->Dv, "v"))) return s;
    if ((s = fa_check_dim(k, "k", dd, p->D, "head dim, as q"))) return s;
    if (p->Hq < 1) return fa_set_error(FA_ERR_SHAPE, "q: needs at least one head, got %lld", (long long)p->Hq);
    if (p->Hk < 1) return fa_set_error(FA_ERR_SHAPE, "k: needs at least one head, got %lld", (long long)p->Hk);
    if (p->Hq % p->Hk != 0)
        return fa_set_error(FA_ERR_SHAPE, "k: query heads (%lld) must be a multiple of kv heads (%lld)", (long long)p->Hq,
                            (long long)p->Hk);
    if ((s = fa_check_dim(v, "v", hd, p->Hk, "kv heads, as k")) ||
        (s = fa_check_dim(v, "v", l.seq_dim, k->shape[l.seq_dim], "keys, as k")))
        return s;
    if (l.ndim == 4) {
        p->B = q->shape[0];
        if ((s = fa_check_dim(k, "k", 0, p->B, "batch, as q")) || (s = fa_check_dim(v, "v", 0, p->B, "batch, as q")))
            return s;
        p->Sq = q->shape[1];
        p->Sk = k->shape[1];
    }
    p->q = view_of(q, l);
    p->k = view_of(k, l);
    p->v = view_of(v, l);
    return FA_OK;
}

/* A tensor shaped like q (or like q with Dv as last dim) in dtype dt: out, dout, dq, ... */
static fa_status check_like(const fa_tensor *t, const char *name, const fa_tensor *like, const char *like_name,
                            int64_t last, fa_dtype dt, layout l) {
    fa_status s;
    if ((s = fa_check_tensor(t, name, l.ndim)) || (s = fa_check_same_device(t, name, like, like_name))) return s;
    for (int d = 0; d < l.ndim - 1; ++d)
        if (t->shape[d] != like->shape[d])
            return fa_set_error(FA_ERR_SHAPE, "%s: dimension %d must be %lld (as %s), got %lld", name, d,
                                (long long)like->shape[d], like_name, (long long)t->shape[d]);
    if (t->shape[l.ndim - 1] != last)
        return fa_set_error(FA_ERR_SHAPE, "%s: last dimension must be %lld, got %lld", name, (long long)last,
                            (long long)t->shape[l.ndim - 1]);
    return fa_check_dtype(t, name, dt);
}

/* lse: (B, Hq, Sq) batched or (Hq, total_q) packed, float32. */
static fa_status check_lse(const fa_tensor *lse, const fa_tensor *q, layout l, fa_problem *p) {
    fa_status s;
    if (l.ndim == 4) {
        if ((s = fa_check_tensor(lse, "lse", 3)) || (s = fa_check_dim(lse, "lse", 0, p->B, "batch")) ||
            (s = fa_check_dim(lse, "lse", 1, p->Hq, "query heads")) || (s = fa_check_dim(lse, "lse", 2, p->Sq, "queries")))
            return s;
        p->lse_sb = lse->stride[0];
        p->lse_sh = lse->stride[1];
        p->lse_ss = lse->stride[2];
    } else {
        if ((s = fa_check_tensor(lse, "lse", 2)) || (s = fa_check_dim(lse, "lse", 0, p->Hq, "query heads")) ||
            (s = fa_check_dim(lse, "lse", 1, q->shape[0], "total queries")))
            return s;
        p->lse_sb = 0;
        p->lse_sh = lse->stride[0];
        p->lse_ss = lse->stride[1];
    }
    if ((s = fa_check_dtype(lse, "lse", FA_F32)) || (s = fa_check_same_device(lse, "lse", q, "q"))) return s;
    p->lse = (float *)lse->data;
    return FA_OK;
}

/* Read n int32 values of an index tensor into host memory (copying from the GPU if needed). */
static fa_status read_index(const fa_tensor *t, int64_t n, const fa_exec *x, int32_t **host, int *owned) {
    *owned = 0;
    if (t->device == FA_DEVICE_CPU) {
        *host = (int32_t *)t->data;
        return FA_OK;
    }
    int32_t *h = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!h) return fa_set_error(FA_ERR_OUT_OF_MEMORY, "cu_seqlens: host copy failed");
    fa_status s = fa_cuda_runtime_copy_to_host(h, t->data, (size_t)n * sizeof(int32_t), x);
    if (s != FA_OK) {
        free(h);
        return s;
    }
    *host = h;
    *owned = 1;
    return FA_OK;
}

/*
 * cu_seqlens: int32 (B + 1). Checked when in host memory or when the maximum
 * must be computed; *max_seqlen is set when it was 0.
 */
static fa_status check_cu_seqlens(const fa_tensor *cu, const char *name, int64_t B, int64_t total, int *max_seqlen,
                                  const char *max_name, const fa_tensor *q, const fa_exec *x) {
    fa_status s;
    if ((s = fa_check_tensor(cu, name, 1)) || (s = fa_check_dtype(cu, name, FA_I32)) ||
        (s = fa_check_same_device(cu, name, q, "q")))
        return s;
    if (cu->shape[0] != B + 1)
        return fa_set_error(FA_ERR_SHAPE, "%s: must have B + 1 = %lld entries, got %lld", name, (long long)(B + 1),
                            (long long)cu->shape[0]);
    if (*max_seqlen < 0) return fa_set_error(FA_ERR_OPTION, "%s: must be >= 0 (0 computes it), got %d", max_name, *max_seqlen);
    if (cu->device != FA_DEVICE_CPU && *max_seqlen > 0) return FA_OK; /* trusted: reading would synchronise */
    int32_t *h = NULL;
    int owned = 0;
    if ((s = read_index(cu, B + 1, x, &h, &owned))) return s;
    int64_t longest = 0;
    s = FA_OK;
    if (h[0] != 0)
        s = fa_set_error(FA_ERR_SEQLENS, "%s: must start at 0, got %d", name, h[0]);
    for (int64_t b = 0; s == FA_OK && b < B; ++b) {
        if (h[b + 1] < h[b])
            s = fa_set_error(FA_ERR_SEQLENS, "%s: must be non-decreasing, but entry %lld (%d) < entry %lld (%d)", name,
                             (long long)(b + 1), h[b + 1], (long long)b, h[b]);
        else if (h[b + 1] - h[b] > longest)
            longest = h[b + 1] - h[b];
    }
    if (s == FA_OK && h[B] != total)
        s = fa_set_error(FA_ERR_SEQLENS, "%s: last entry must equal the packed length %lld, got %d", name,
                         (long long)total, h[B]);
    if (s == FA_OK && *max_seqlen > 0 && longest > *max_seqlen)
        s = fa_set_error(FA_ERR_SEQLENS, "%s: %lld is smaller than the longest sequence in %s (%lld)", max_name,
                         (long long)*max_seqlen, name, (long long)longest);
    if (s == FA_OK && *max_seqlen == 0) *max_seqlen = (int)longest;
    if (owned) free(h);
    return s;
}

/*
 * Backend and execution resources for a call on q's device and, for packed
 * (varlen) calls, the checked sequence tables with their maximum lengths.
 */
static fa_status prepare(const fa_context *ctx, const fa_tensor *q, const fa_tensor *k, const fa_tensor *cu_q,
                         const fa_tensor *cu_k, int max_q, int max_k, layout l, fa_problem *p,
                         const fa_backend_ops **ops, fa_exec *x) {
    fa_status s;
    const fa_context *c = ctx ? ctx : fa_default_context();
    if (l.ndim == 3) {
        if (!cu_q) return fa_set_error(FA_ERR_NULL_POINTER, "cu_seqlens_q: tensor pointer is NULL");
        if (!cu_k) return fa_set_error(FA_ERR_NULL_POINTER, "cu_seqlens_k: tensor pointer is NULL");
        if ((s = fa_check_tensor(cu_q, "cu_seqlens_q", 1))) return s;
        p->B = cu_q->shape[0] - 1;
        if (p->B < 0) return fa_set_error(FA_ERR_SHAPE, "cu_seqlens_q: needs at least one entry");
    }
    fa_exec_init(c, q->device == FA_DEVICE_CUDA ? q->device_index : 0, x);
    if ((s = fa_select_backend(c, q->device, q->device_index, ops))) return s;
    if (l.ndim == 3) {
        if ((s = check_cu_seqlens(cu_q, "cu_seqlens_q", p->B, q->shape[0], &max_q, "max_seqlen_q", q, x)) ||
            (s = check_cu_seqlens(cu_k, "cu_seqlens_k", p->B, k->shape[0], &max_k, "max_seqlen_k", q, x)))
            return s;
        p->cu_seqlens_q = (const int32_t *)cu_q->data;
        p->cu_seqlens_k = (const int32_t *)cu_k->data;
        p->Sq = max_q;
        p->Sk = max_k;
        p->total_q = q->shape[0];
        p->total_k = k->shape[0];
    }
    return FA_OK;
}

/* ------------------------------------------------------------------------- */

static fa_status forward(fa_context *ctx, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                         const fa_tensor *cu_q, const fa_tensor *cu_k, int max_q, int max_k, const fa_options *opts,
                         fa_tensor *out, fa_tensor *lse) {
    fa_clear_error();
    layout l = cu_q || cu_k ? PACKED : BATCHED;
    fa_problem p;
    memset(&p, 0, sizeof p);
    fa_status s;
    if ((s = check_qkv(q, k, v, l, &p))) return s;
    if ((s = check_like(out, "out", q, "q", p.Dv, fa_out_dtype(q->dtype), l))) return s;
    p.out = view_of(out, l);

    const fa_backend_ops *ops;
    fa_exec x;
    if ((s = prepare(ctx, q, k, cu_q, cu_k, max_q, max_k, l, &p, &ops, &x))) return s;
    if (lse && (s = check_lse(lse, q, l, &p))) return s;
    if ((s = fa_resolve_options(opts, q, &p))) return s;
    if (p.dtype == FA_F8_E4M3 && p.dropout_p > 0.0f)
        return fa_set_error(FA_ERR_UNSUPPORTED, "opts.dropout_p: dropout is not supported with float8 inputs");
    if (numel(out) == 0 && (!lse || numel(lse) == 0)) return FA_OK; /* nothing to write */
    return fa_execute(ctx, ops, &p, FA_OP_FWD, &p, run_fwd, &x);
}

static fa_status backward(fa_context *ctx, const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k,
                          const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse, const fa_tensor *cu_q,
                          const fa_tensor *cu_k, int max_q, int max_k, const fa_options *opts, fa_tensor *dq,
                          fa_tensor *dk, fa_tensor *dv) {
    fa_clear_error();
    layout l = cu_q || cu_k ? PACKED : BATCHED;
    fa_problem p;
    memset(&p, 0, sizeof p);
    fa_status s;
    if ((s = check_qkv(q, k, v, l, &p))) return s;
    if (p.dtype == FA_F8_E4M3) return fa_set_error(FA_ERR_DTYPE, "q: float8 inputs have no backward");
    if ((s = check_like(out, "out", q, "q", p.Dv, p.dtype, l)) ||
        (s = check_like(dout, "dout", q, "q", p.Dv, p.dtype, l)) ||
        (s = check_like(dq, "dq", q, "q", p.D, p.dtype, l)) || (s = check_like(dk, "dk", k, "k", p.D, p.dtype, l)) ||
        (s = check_like(dv, "dv", v, "v", p.Dv, p.dtype, l)))
        return s;
    if (!lse) return fa_set_error(FA_ERR_NULL_POINTER, "lse: the backward needs the forward's lse");
    p.out = view_of(out, l);
    p.dout = view_of(dout, l);
    p.dq = view_of(dq, l);
    p.dk = view_of(dk, l);
    p.dv = view_of(dv, l);

    const fa_backend_ops *ops;
    fa_exec x;
    if ((s = prepare(ctx, q, k, cu_q, cu_k, max_q, max_k, l, &p, &ops, &x))) return s;
    if ((s = check_lse(lse, q, l, &p))) return s;
    if ((s = fa_resolve_options(opts, q, &p))) return s;
    if (numel(dq) == 0 && numel(dk) == 0 && numel(dv) == 0) return FA_OK; /* nothing to write */
    return fa_execute(ctx, ops, &p, FA_OP_BWD, &p, run_bwd, &x);
}

fa_status fa_fwd(fa_context *ctx, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v, const fa_options *opts,
                 fa_tensor *out, fa_tensor *lse) {
    return forward(ctx, q, k, v, NULL, NULL, 0, 0, opts, out, lse);
}

fa_status fa_bwd(fa_context *ctx, const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                 const fa_tensor *out, const fa_tensor *lse, const fa_options *opts, fa_tensor *dq, fa_tensor *dk,
                 fa_tensor *dv) {
    return backward(ctx, dout, q, k, v, out, lse, NULL, NULL, 0, 0, opts, dq, dk, dv);
}

/* Varlen calls take the packed path whenever either cu_seqlens is given; with
 * neither, the missing argument is reported by name. */
fa_status fa_varlen_fwd(fa_context *ctx, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                        const fa_tensor *cu_seqlens_q, const fa_tensor *cu_seqlens_k, int max_seqlen_q,
                        int max_seqlen_k, const fa_options *opts, fa_tensor *out, fa_tensor *lse) {
    if (!cu_seqlens_q && !cu_seqlens_k) {
        fa_clear_error();
        return fa_set_error(FA_ERR_NULL_POINTER, "cu_seqlens_q: tensor pointer is NULL");
    }
    return forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts, out, lse);
}

fa_status fa_varlen_bwd(fa_context *ctx, const fa_tensor *dout, const fa_tensor *q, const fa_tensor *k,
                        const fa_tensor *v, const fa_tensor *out, const fa_tensor *lse, const fa_tensor *cu_seqlens_q,
                        const fa_tensor *cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, const fa_options *opts,
                        fa_tensor *dq, fa_tensor *dk, fa_tensor *dv) {
    if (!cu_seqlens_q && !cu_seqlens_k) {
        fa_clear_error();
        return fa_set_error(FA_ERR_NULL_POINTER, "cu_seqlens_q: tensor pointer is NULL");
    }
    return backward(ctx, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts, dq,
                    dk, dv);
}

/*
 * Invalid arguments: each gets its own status and a message naming the
 * argument, and no buffer changes (outputs, and the caches an append would
 * write). A valid version of every call runs first, so each rejection is
 * caused by the one thing the case breaks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

enum op { OP_FWD, OP_BWD, OP_VARLEN_FWD, OP_VARLEN_BWD, OP_KVCACHE, OP_MERGE, OP_MASK };
static const char *op_names[] = {"fa_fwd", "fa_bwd", "fa_varlen_fwd", "fa_varlen_bwd", "fa_fwd_kvcache", "fa_merge",
                                 "fa_dropout_mask"};

/* Arguments passed as NULL (bit flags). */
enum {
    N_Q = 1 << 0, N_K = 1 << 1, N_V = 1 << 2, N_OUT = 1 << 3, N_LSE = 1 << 4, N_DOUT = 1 << 5,
    N_DQ = 1 << 6, N_CUQ = 1 << 7, N_CUK = 1 << 8, N_KNEW = 1 << 9, N_VNEW = 1 << 10, N_OUTS = 1 << 11,
    N_LSES = 1 << 12, N_SEQLENS = 1 << 13, N_MASK = 1 << 14, N_BTAB = 1 << 15
};

#define B 2
#define SQ 5
#define SK 7
#define HQ 4
#define HK 2
#define D 16
#define TQ 9   /* varlen: packed query rows, sequences of 4 and 5 */
#define TK 11  /* varlen: packed keys, sequences of 5 and 6 */
#define SC 16  /* KV cache capacity per sequence */
#define NBLK 6 /* paged cache: blocks of 4 */
#define BS 4

/* Every buffer the calls use; the bad-input cases must leave all of them as they were. */
typedef struct fixture {
    ft_tensor q, k, v, out, lse, dout, dq, dk, dv;
    ft_tensor vq, vk, vv, vout, vlse, vdout, vdq, vdk, vdv, cuq, cuk;
    ft_tensor kc, vc, pkc, pvc, seqlens, btab, knew, vnew;
    ft_tensor mout, mlse, mask;
} fixture;

#define NTENSORS (sizeof(fixture) / sizeof(ft_tensor))

/* One call: its arguments as fa_tensor values that a case may break. */
typedef struct call {
    int op;
    unsigned nulls;
    fa_tensor q, k, v, out, lse, dout, dq, dk, dv, cuq, cuk;
    int max_q, max_k;
    fa_tensor kc, vc, seqlens, btab, knew, vnew;
    int splits;
    fa_tensor outs[2], lses[2];
    int n;
    fa_tensor mask;
    float mask_p;
    fa_options o;
} call;

static fixture fx;
static fa_dtype g_dt; /* storage dtype the backend under test supports */

static void make_fixture(void) {
    ft_rng r = ft_rng_for("bad input fixture");
    fa_dtype t = g_dt;
    fx.q = ft_alloc4(t, B, SQ, HQ, D, FT_CONTIG);
    fx.k = ft_alloc4(t, B, SK, HK, D, FT_CONTIG);
    fx.v = ft_alloc4(t, B, SK, HK, D, FT_CONTIG);
    fx.out = ft_alloc4(t, B, SQ, HQ, D, FT_CONTIG);
    fx.lse = ft_alloc(FA_F32, 3, (int64_t[]){B, HQ, SQ}, FT_CONTIG);
    fx.dout = ft_alloc4(t, B, SQ, HQ, D, FT_CONTIG);
    fx.dq = ft_alloc4(t, B, SQ, HQ, D, FT_CONTIG);
    fx.dk = ft_alloc4(t, B, SK, HK, D, FT_CONTIG);
    fx.dv = ft_alloc4(t, B, SK, HK, D, FT_CONTIG);
    fx.vq = ft_alloc(t, 3, (int64_t[]){TQ, HQ, D}, FT_CONTIG);
    fx.vk = ft_alloc(t, 3, (int64_t[]){TK, HK, D}, FT_CONTIG);
    fx.vv = ft_alloc(t, 3, (int64_t[]){TK, HK, D}, FT_CONTIG);
    fx.vout = ft_alloc(t, 3, (int64_t[]){TQ, HQ, D}, FT_CONTIG);
    fx.vlse = ft_alloc(FA_F32, 2, (int64_t[]){HQ, TQ}, FT_CONTIG);
    fx.vdout = ft_alloc(t, 3, (int64_t[]){TQ, HQ, D}, FT_CONTIG);
    fx.vdq = ft_alloc(t, 3, (int64_t[]){TQ, HQ, D}, FT_CONTIG);
    fx.vdk = ft_alloc(t, 3, (int64_t[]){TK, HK, D}, FT_CONTIG);
    fx.vdv = ft_alloc(t, 3, (int64_t[]){TK, HK, D}, FT_CONTIG);
    fx.cuq = ft_alloc(FA_I32, 1, (int64_t[]){B + 1}, FT_CONTIG);
    fx.cuk = ft_alloc(FA_I32, 1, (int64_t[]){B + 1}, FT_CONTIG);
    fx.kc = ft_alloc4(t, B, SC, HK, D, FT_CONTIG);
    fx.vc = ft_alloc4(t, B, SC, HK, D, FT_CONTIG);
    fx.pkc = ft_alloc4(t, NBLK, BS, HK, D, FT_CONTIG);
    fx.pvc = ft_alloc4(t, NBLK, BS, HK, D, FT_CONTIG);
    fx.seqlens = ft_alloc(FA_I32, 1, (int64_t[]){B}, FT_CONTIG);
    fx.btab = ft_alloc(FA_I32, 2, (int64_t[]){B, 3}, FT_CONTIG);
    fx.knew = ft_alloc4(t, B, 2, HK, D, FT_CONTIG);
    fx.vnew = ft_alloc4(t, B, 2, HK, D, FT_CONTIG);
    fx.mout = ft_alloc4(t, B, SQ, HQ, D, FT_CONTIG);
    fx.mlse = ft_alloc(FA_F32, 3, (int64_t[]){B, HQ, SQ}, FT_CONTIG);
    fx.mask = ft_alloc(FA_U8, 4, (int64_t[]){B, HQ, SQ, SK}, FT_CONTIG);
    ft_tensor *in[] = {&fx.q, &fx.k, &fx.v, &fx.dout, &fx.vq, &fx.vk, &fx.vv, &fx.vdout,
                       &fx.kc, &fx.vc, &fx.pkc, &fx.pvc, &fx.knew, &fx.vnew};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) ft_fill_normal(in[i], &r, 1.0);
    int32_t *cuq = (int32_t *)fx.cuq.host, *cuk = (int32_t *)fx.cuk.host;
    cuq[0] = 0, cuq[1] = 4, cuq[2] = TQ;
    cuk[0] = 0, cuk[1] = 5, cuk[2] = TK;
    int32_t *sl = (int32_t *)fx.seqlens.host, *bt = (int32_t *)fx.btab.host;
    sl[0] = 3, sl[1] = 8;                         /* + 2 new keys: 5 and 10 of 12 paged slots */
    bt[0] = 4, bt[1] = 0, bt[2] = 5, bt[3] = 1, bt[4] = 3, bt[5] = 2;
    /* The backward and the merge read a forward's out and lse: make them valid. */
    float *lse = (float *)fx.lse.host, *mlse = (float *)fx.mlse.host;
    for (int64_t e = 0; e < ft_numel(&fx.lse); ++e) lse[e] = mlse[e] = 1.0f;
    float *vlse = (float *)fx.vlse.host;
    for (int64_t e = 0; e < ft_numel(&fx.vlse); ++e) vlse[e] = 1.0f;
    ft_fill_normal(&fx.out, &r, 0.5);
    ft_fill_normal(&fx.vout, &r, 0.5);
    ft_fill_normal(&fx.mout, &r, 0.5);
    ft_tensor *all = (ft_tensor *)&fx;
    for (size_t i = 0; i < NTENSORS; ++i)
        if (ft_on_device && &all[i] != &fx.mask) ft_upload(&all[i]); /* the dropout mask is always on the host */
}

static fa_tensor arg(ft_tensor *x) { return ft_view(x, ft_on_device && x != &fx.mask); }

static call valid_call(int op) {
    call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    int varlen = op == OP_VARLEN_FWD || op == OP_VARLEN_BWD;
    c.q = arg(varlen ? &fx.vq : &fx.q);
    c.k = arg(varlen ? &fx.vk : &fx.k);
    c.v = arg(varlen ? &fx.vv : &fx.v);
    c.out = arg(varlen ? &fx.vout : &fx.out);
    c.lse = arg(varlen ? &fx.vlse : &fx.lse);
    c.dout = arg(varlen ? &fx.vdout : &fx.dout);
    c.dq = arg(varlen ? &fx.vdq : &fx.dq);
    c.dk = arg(varlen ? &fx.vdk : &fx.dk);
    c.dv = arg(varlen ? &fx.vdv : &fx.dv);
    c.cuq = arg(&fx.cuq);
    c.cuk = arg(&fx.cuk);
    c.kc = arg(&fx.kc);
    c.vc = arg(&fx.vc);
    c.seqlens = arg(&fx.seqlens);
    c.btab = arg(&fx.btab);
    c.knew = arg(&fx.knew);
    c.vnew = arg(&fx.vnew);
    c.splits = 0;
    c.outs[0] = arg(&fx.mout);
    c.outs[1] = arg(&fx.out);
    c.lses[0] = arg(&fx.mlse);
    c.lses[1] = arg(&fx.lse);
    c.n = 2;
    c.out = op == OP_MERGE ? arg(&fx.mout) : c.out; /* in place into outs[0] is allowed */
    c.lse = op == OP_MERGE ? arg(&fx.mlse) : c.lse;
    c.mask = arg(&fx.mask);
    c.mask_p = 0.25f;
    if (op == OP_KVCACHE) c.nulls |= N_BTAB; /* contiguous cache unless a case sets a block table */
    return c;
}

/* A paged KV-cache call: block size 4, 6 blocks. */
static call paged_call(void) {
    call c = valid_call(OP_KVCACHE);
    c.nulls &= ~(unsigned)N_BTAB;
    c.kc = arg(&fx.pkc);
    c.vc = arg(&fx.pvc);
    return c;
}

#define P(flag, t) ((c->nulls & (flag)) ? NULL : &(t))

static fa_status run(call *c) {
    const fa_options *o = &c->o;
    switch (c->op) {
    case OP_FWD: return fa_fwd(ft_ctx, P(N_Q, c->q), P(N_K, c->k), P(N_V, c->v), o, P(N_OUT, c->out), P(N_LSE, c->lse));
    case OP_BWD:
        return fa_bwd(ft_ctx, P(N_DOUT, c->dout), P(N_Q, c->q), P(N_K, c->k), P(N_V, c->v), P(N_OUT, c->out),
                      P(N_LSE, c->lse), o, P(N_DQ, c->dq), &c->dk, &c->dv);
    case OP_VARLEN_FWD:
        return fa_varlen_fwd(ft_ctx, P(N_Q, c->q), P(N_K, c->k), P(N_V, c->v), P(N_CUQ, c->cuq), P(N_CUK, c->cuk),
                             c->max_q, c->max_k, o, P(N_OUT, c->out), P(N_LSE, c->lse));
    case OP_VARLEN_BWD:
        return fa_varlen_bwd(ft_ctx, P(N_DOUT, c->dout), P(N_Q, c->q), P(N_K, c->k), P(N_V, c->v), P(N_OUT, c->out),
                             P(N_LSE, c->lse), P(N_CUQ, c->cuq), P(N_CUK, c->cuk), c->max_q, c->max_k, o,
                             P(N_DQ, c->dq), &c->dk, &c->dv);
    case OP_KVCACHE:
        return fa_fwd_kvcache(ft_ctx, P(N_Q, c->q), &c->kc, &c->vc, P(N_SEQLENS, c->seqlens), P(N_BTAB, c->btab),
                              P(N_KNEW, c->knew), P(N_VNEW, c->vnew), c->splits, o, P(N_OUT, c->out), P(N_LSE, c->lse));
    case OP_MERGE:
        return fa_merge(ft_ctx, c->n, (c->nulls & N_OUTS) ? NULL : c->outs, (c->nulls & N_LSES) ? NULL : c->lses,
                        P(N_OUT, c->out), P(N_LSE, c->lse));
    default: return fa_dropout_mask(12345, 6, c->mask_p, P(N_MASK, c->mask));
    }
}

static unsigned char *snapshot[NTENSORS];

static void take_snapshot(void) {
    ft_tensor *all = (ft_tensor *)&fx;
    for (size_t i = 0; i < NTENSORS; ++i) {
        size_t bytes = all[i].nbuf * fa_dtype_size(all[i].dtype);
        ft_download(&all[i]);
        free(snapshot[i]);
        snapshot[i] = malloc(bytes + 1);
        memcpy(snapshot[i], all[i].host, bytes);
    }
}

/* Name of the first fixture buffer that changed since the snapshot, or NULL. */
static const char *changed_buffer(void) {
    static const char *names[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv",
                                  "varlen q", "varlen k", "varlen v", "varlen out", "varlen lse", "varlen dout",
                                  "varlen dq", "varlen dk", "varlen dv", "cu_seqlens_q", "cu_seqlens_k",
                                  "k_cache", "v_cache", "paged k_cache", "paged v_cache", "cache_seqlens",
                                  "block_table", "k_new", "v_new", "merge out", "merge lse", "mask"};
    ft_tensor *all = (ft_tensor *)&fx;
    for (size_t i = 0; i < NTENSORS; ++i) {
        ft_download(&all[i]);
        if (memcmp(snapshot[i], all[i].host, all[i].nbuf * fa_dtype_size(all[i].dtype)) != 0) return names[i];
    }
    return NULL;
}

/* Write host values into an index tensor (and its device copy). */
static void set_i32(ft_tensor *t, int idx, int32_t val) {
    ((int32_t *)t->host)[idx] = val;
    if (ft_on_device) ft_upload(t);
}

static void expect(const char *what, call c, fa_status want, const char *arg_name) {
    char name[200];
    snprintf(name, sizeof name, "%s: %s", op_names[c.op], what);
    if (!ft_selected(name)) return;
    take_snapshot();
    fa_status got = run(&c);
    const char *msg = fa_last_error();
    const char *changed = changed_buffer();
    int ok = got == want && strstr(msg, arg_name) != NULL && !changed;
    if (!ok) {
        if (got != want) ft_note("status %s, want %s", fa_status_name(got), fa_status_name(want));
        if (!strstr(msg, arg_name)) ft_note("message does not name \"%s\"", arg_name);
        if (changed) ft_note("%s was modified", changed);
    }
    ft_check(ok, name, "%s \"%s\"", fa_status_name(got), msg);
}

static void valid_calls(void) {
    int ops[] = {OP_FWD, OP_BWD, OP_VARLEN_FWD, OP_VARLEN_BWD, OP_KVCACHE, OP_KVCACHE, OP_MERGE, OP_MASK};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
        call c = i == 5 ? paged_call() : valid_call(ops[i]);
        char name[96];
        snprintf(name, sizeof name, "%s: valid call%s", op_names[c.op], i == 5 ? " (paged, appending)" : "");
        if (i == 4) c.nulls |= N_KNEW | N_VNEW; /* contiguous without append: leaves the cache as it is */
        fa_status st = run(&c);
        ft_check(st == FA_OK, name, "%s %s", fa_status_name(st), fa_last_error());
    }
}

static void null_pointers(void) {
    call c = valid_call(OP_FWD);
    c.nulls = N_Q;
    expect("q NULL", c, FA_ERR_NULL_POINTER, "q");
    c.nulls = N_V;
    expect("v NULL", c, FA_ERR_NULL_POINTER, "v");
    c.nulls = N_OUT;
    expect("out NULL", c, FA_ERR_NULL_POINTER, "out");
    c = valid_call(OP_FWD);
    c.k.data = NULL;
    expect("k data NULL", c, FA_ERR_NULL_POINTER, "k");
    c = valid_call(OP_BWD);
    c.nulls = N_DOUT;
    expect("dout NULL", c, FA_ERR_NULL_POINTER, "dout");
    c.nulls = N_LSE;
    expect("lse NULL", c, FA_ERR_NULL_POINTER, "lse");
    c.nulls = N_DQ;
    expect("dq NULL", c, FA_ERR_NULL_POINTER, "dq");
    c = valid_call(OP_VARLEN_FWD);
    c.nulls = N_CUQ;
    expect("cu_seqlens_q NULL", c, FA_ERR_NULL_POINTER, "cu_seqlens_q");
    c.nulls = N_CUK;
    expect("cu_seqlens_k NULL", c, FA_ERR_NULL_POINTER, "cu_seqlens_k");
    c = valid_call(OP_KVCACHE);
    c.nulls |= N_VNEW;
    expect("k_new without v_new", c, FA_ERR_NULL_POINTER, "v_new");
    c = valid_call(OP_KVCACHE);
    c.nulls |= N_KNEW;
    expect("v_new without k_new", c, FA_ERR_NULL_POINTER, "k_new");
    c = valid_call(OP_MERGE);
    c.nulls = N_OUTS;
    expect("outs NULL", c, FA_ERR_NULL_POINTER, "outs");
    c.nulls = N_LSES;
    expect("lses NULL", c, FA_ERR_NULL_POINTER, "lses");
    c = valid_call(OP_MASK);
    c.nulls = N_MASK;
    expect("mask NULL", c, FA_ERR_NULL_POINTER, "mask");
}

static void shapes(void) {
    call c = valid_call(OP_FWD);
    c.q.ndim = 3;
    expect("q with 3 dims", c, FA_ERR_SHAPE, "q");
    c = valid_call(OP_FWD);
    c.k.shape[3] = D / 2;
    expect("k head dim differs from q", c, FA_ERR_SHAPE, "k");
    c = valid_call(OP_FWD);
    c.v.shape[1] = SK - 1;
    expect("v seqlen differs from k", c, FA_ERR_SHAPE, "v");
    c = valid_call(OP_FWD);
    c.k.shape[0] = 1;
    expect("k batch differs from q", c, FA_ERR_SHAPE, "k");
    c = valid_call(OP_FWD);
    c.out.shape[2] = HQ / 2;
    expect("out heads differ from q", c, FA_ERR_SHAPE, "out");
    c = valid_call(OP_FWD);
    c.out.shape[3] = D / 2; /* out's last dim must be Dv */
    expect("out head dim differs from v", c, FA_ERR_SHAPE, "out");
    c = valid_call(OP_FWD);
    c.lse.shape[2] = SQ + 1;
    expect("lse seqlen differs from q", c, FA_ERR_SHAPE, "lse");
    c = valid_call(OP_FWD);
    c.lse.ndim = 4;
    expect("lse with 4 dims", c, FA_ERR_SHAPE, "lse");
    c = valid_call(OP_FWD);
    c.q.shape[2] = 3; /* 3 query heads over 2 kv heads */
    c.out.shape[2] = 3;
    c.lse.shape[1] = 3;
    expect("Hq % Hk != 0", c, FA_ERR_SHAPE, "k");
    c = valid_call(OP_FWD);
    c.q.shape[1] = -5;
    expect("negative query length", c, FA_ERR_SHAPE, "q");
    c = valid_call(OP_FWD);
    c.k.shape[1] = -1;
    c.v.shape[1] = -1;
    expect("negative key length", c, FA_ERR_SHAPE, "k");
    c = valid_call(OP_FWD);
    c.q.shape[0] = -2;
    expect("negative batch", c, FA_ERR_SHAPE, "q");
    c = valid_call(OP_BWD);
    c.dq.shape[1] = SQ - 1;
    expect("dq shape differs from q", c, FA_ERR_SHAPE, "dq");
    c = valid_call(OP_BWD);
    c.dk.shape[2] = 1;
    expect("dk shape differs from k", c, FA_ERR_SHAPE, "dk");
    c = valid_call(OP_BWD);
    c.dout.shape[3] = D + 1;
    expect("dout shape differs from out", c, FA_ERR_SHAPE, "dout");
}

static void strides(void) {
    call c = valid_call(OP_FWD);
    c.q.stride[3] = 2;
    expect("q last dim not contiguous", c, FA_ERR_STRIDE, "q");
    c = valid_call(OP_FWD);
    c.out.stride[3] = 0;
    expect("out last-dim stride 0", c, FA_ERR_STRIDE, "out");
    c = valid_call(OP_FWD);
    c.k.stride[1] = -c.k.stride[1];
    expect("k negative seq stride", c, FA_ERR_STRIDE, "k");
    c = valid_call(OP_FWD);
    c.v.stride[0] = -1;
    expect("v negative batch stride", c, FA_ERR_STRIDE, "v");
    c = valid_call(OP_BWD);
    c.dv.stride[3] = 3;
    expect("dv last dim not contiguous", c, FA_ERR_STRIDE, "dv");
}

static void dtypes(void) {
    call c = valid_call(OP_FWD);
    c.q.dtype = FA_I32;
    c.k.dtype = FA_I32;
    c.v.dtype = FA_I32;
    c.out.dtype = FA_I32;
    expect("int32 attention", c, FA_ERR_DTYPE, "q");
    /* A float dtype the backend lacks: float32 on CUDA (the CPU backends
     * take every float dtype forward, float8 included). */
    if (ft_on_device) {
        c = valid_call(OP_FWD);
        c.q.dtype = c.k.dtype = c.v.dtype = c.out.dtype = FA_F32;
        expect("dtype the backend does not support", c, FA_ERR_DTYPE, "q");
    }
    c = valid_call(OP_FWD);
    c.k.dtype = g_dt == FA_F16 ? FA_BF16 : FA_F16;
    expect("k dtype differs from q", c, FA_ERR_DTYPE, "k");
    c = valid_call(OP_FWD);
    c.out.dtype = g_dt == FA_F16 ? FA_BF16 : FA_F16;
    expect("out dtype differs from q", c, FA_ERR_DTYPE, "out");
    c = valid_call(OP_FWD);
    c.lse.dtype = FA_F16;
    expect("lse not float32", c, FA_ERR_DTYPE, "lse");
    c = valid_call(OP_FWD);
    c.q.dtype = (fa_dtype)42;
    expect("unknown dtype", c, FA_ERR_DTYPE, "q");
    c = valid_call(OP_BWD);
    c.dout.dtype = g_dt == FA_F16 ? FA_BF16 : FA_F16;
    expect("dout dtype differs", c, FA_ERR_DTYPE, "dout");
    c = valid_call(OP_VARLEN_FWD);
    c.cuq.dtype = FA_F32;
    expect("cu_seqlens_q float32", c, FA_ERR_DTYPE, "cu_seqlens_q");
    c = valid_call(OP_MASK);
    c.mask.dtype = FA_F32;
    expect("mask float32", c, FA_ERR_DTYPE, "mask");
}

static void head_dims(void) {
    call c = valid_call(OP_FWD);
    c.q.shape[3] = c.k.shape[3] = 0;
    expect("head dim 0", c, FA_ERR_HEAD_DIM, "q");
    c = valid_call(OP_FWD);
    c.q.shape[3] = c.k.shape[3] = 257; /* shape only: the call must fail before reading */
    c.q.stride[2] = c.k.stride[2] = 257;
    expect("head dim 257", c, FA_ERR_HEAD_DIM, "q");
    c = valid_call(OP_FWD);
    c.v.shape[3] = c.out.shape[3] = 300;
    expect("value head dim 300", c, FA_ERR_HEAD_DIM, "v");
}

static void options(void) {
    struct {
        const char *what, *arg;
        fa_options o;
    } cases[12];
    memset(cases, 0, sizeof cases);
    int n = 0;
    cases[n].what = "window_left -2", cases[n].arg = "opts.window_left";
    cases[n].o.use_window = 1, cases[n].o.window_left = -2, cases[n++].o.window_right = 3;
    cases[n].what = "window_right -7", cases[n].arg = "opts.window_right";
    cases[n].o.use_window = 1, cases[n].o.window_left = 3, cases[n++].o.window_right = -7;
    cases[n].what = "dropout_p 1", cases[n].arg = "opts.dropout_p", cases[n++].o.dropout_p = 1.0f;
    cases[n].what = "dropout_p -0.1", cases[n].arg = "opts.dropout_p", cases[n++].o.dropout_p = -0.1f;
    cases[n].what = "dropout_p NaN", cases[n].arg = "opts.dropout_p", cases[n++].o.dropout_p = NAN;
    cases[n].what = "scale -1", cases[n].arg = "opts.scale", cases[n++].o.scale = -1.0f;
    cases[n].what = "scale NaN", cases[n].arg = "opts.scale", cases[n++].o.scale = NAN;
    cases[n].what = "scale inf", cases[n].arg = "opts.scale", cases[n++].o.scale = INFINITY;
    cases[n].what = "softcap -2", cases[n].arg = "opts.softcap", cases[n++].o.softcap = -2.0f;
    cases[n].what = "softcap NaN", cases[n].arg = "opts.softcap", cases[n++].o.softcap = NAN;
    cases[n].what = "align 7", cases[n].arg = "opts.align", cases[n++].o.align = (fa_mask_align)7;
    for (int i = 0; i < n; ++i) {
        call c = valid_call(OP_FWD);
        c.o = cases[i].o;
        expect(cases[i].what, c, FA_ERR_OPTION, cases[i].arg);
    }
    call c = valid_call(OP_BWD);
    c.o.dropout_p = 2.0f;
    expect("dropout_p 2", c, FA_ERR_OPTION, "opts.dropout_p");
    /* ALiBi slopes: (Hq) or (B, Hq) float32. */
    ft_tensor slopes = ft_alloc(FA_F32, 2, (int64_t[]){B + 1, HQ + 1}, FT_CONTIG);
    memset(slopes.host, 0, slopes.nbuf * 4);
    fa_tensor s = ft_arg(&slopes);
    c = valid_call(OP_FWD);
    c.o.alibi_slopes = s;
    c.o.alibi_slopes.ndim = 1;
    c.o.alibi_slopes.shape[0] = HQ + 1;
    c.o.alibi_slopes.stride[0] = 1;
    expect("alibi (Hq + 1)", c, FA_ERR_SHAPE, "alibi");
    c = valid_call(OP_FWD);
    c.o.alibi_slopes = s;
    c.o.alibi_slopes.shape[0] = B + 1;
    c.o.alibi_slopes.shape[1] = HQ;
    expect("alibi (B + 1, Hq)", c, FA_ERR_SHAPE, "alibi");
    c = valid_call(OP_FWD);
    c.o.alibi_slopes = s;
    c.o.alibi_slopes.ndim = 3;
    c.o.alibi_slopes.shape[2] = 1;
    c.o.alibi_slopes.stride[2] = 1;
    expect("alibi with 3 dims", c, FA_ERR_SHAPE, "alibi");
    c = valid_call(OP_FWD);
    c.o.alibi_slopes = s;
    c.o.alibi_slopes.ndim = 1;
    c.o.alibi_slopes.shape[0] = HQ;
    c.o.alibi_slopes.stride[0] = 1;
    c.o.alibi_slopes.dtype = FA_F16;
    expect("alibi float16", c, FA_ERR_DTYPE, "alibi");
    c = valid_call(OP_MASK);
    c.mask_p = 1.5f;
    expect("mask p 1.5", c, FA_ERR_OPTION, "p");
    ft_free(&slopes);
}

static void varlen(void) {
    int32_t *cuq = (int32_t *)fx.cuq.host, *cuk = (int32_t *)fx.cuk.host;
    int32_t q1 = cuq[1], k0 = cuk[0];
    call c = valid_call(OP_VARLEN_FWD);
    set_i32(&fx.cuq, 0, 1);
    expect("cu_seqlens_q not starting at 0", c, FA_ERR_SEQLENS, "cu_seqlens_q");
    set_i32(&fx.cuq, 0, 0);
    set_i32(&fx.cuq, 1, TQ + 1);
    expect("cu_seqlens_q decreasing", c, FA_ERR_SEQLENS, "cu_seqlens_q");
    set_i32(&fx.cuq, 1, q1);
    set_i32(&fx.cuk, 2, TK - 1);
    expect("cu_seqlens_k not ending at total_k", c, FA_ERR_SEQLENS, "cu_seqlens_k");
    set_i32(&fx.cuk, 2, TK);
    set_i32(&fx.cuk, 0, -3);
    expect("cu_seqlens_k starting negative", c, FA_ERR_SEQLENS, "cu_seqlens_k");
    set_i32(&fx.cuk, 0, k0);
    c = valid_call(OP_VARLEN_FWD);
    c.cuk.shape[0] = B; /* B + 1 entries expected, as cu_seqlens_q */
    expect("cu_seqlens_k with B entries", c, FA_ERR_SHAPE, "cu_seqlens_k");
    c = valid_call(OP_VARLEN_FWD);
    c.max_q = -1;
    expect("max_seqlen_q negative", c, FA_ERR_OPTION, "max_seqlen_q");
    c = valid_call(OP_VARLEN_FWD);
    c.max_k = 3; /* the longest key sequence has 6 */
    if (!ft_on_device) expect("max_seqlen_k too small", c, FA_ERR_SEQLENS, "max_seqlen_k");
    c = valid_call(OP_VARLEN_FWD);
    c.lse.shape[1] = TQ - 1;
    expect("varlen lse (Hq, total_q - 1)", c, FA_ERR_SHAPE, "lse");
    c = valid_call(OP_VARLEN_BWD);
    set_i32(&fx.cuq, 1, 10);
    expect("bwd cu_seqlens_q decreasing", c, FA_ERR_SEQLENS, "cu_seqlens_q");
    set_i32(&fx.cuq, 1, q1);
}

static void kvcache(void) {
    call c = valid_call(OP_KVCACHE);
    c.o.dropout_p = 0.1f;
    expect("dropout with a KV cache", c, FA_ERR_OPTION, "opts.dropout_p");
    c = valid_call(OP_KVCACHE);
    c.splits = -1;
    expect("num_splits -1", c, FA_ERR_OPTION, "num_splits");
    c = valid_call(OP_KVCACHE);
    c.knew.shape[1] = 3; /* v_new has 2 rows */
    expect("k_new and v_new lengths differ", c, FA_ERR_SHAPE, "v_new");
    c = valid_call(OP_KVCACHE);
    c.knew.dtype = g_dt == FA_F16 ? FA_BF16 : FA_F16;
    expect("k_new dtype differs", c, FA_ERR_DTYPE, "k_new");
    c = valid_call(OP_KVCACHE);
    c.vc.shape[1] = SC - 1;
    expect("v_cache capacity differs", c, FA_ERR_SHAPE, "v_cache");
    if (ft_on_device) {
        ft_skip("fa_fwd_kvcache: cache_seqlens and block_table contents", "in device memory the library does not read them");
        return;
    }
    int32_t s0 = ((int32_t *)fx.seqlens.host)[0], s1 = ((int32_t *)fx.seqlens.host)[1];
    c = valid_call(OP_KVCACHE);
    c.nulls |= N_KNEW | N_VNEW;
    set_i32(&fx.seqlens, 1, SC + 1);
    expect("cache_seqlens > capacity", c, FA_ERR_SEQLENS, "cache_seqlens");
    set_i32(&fx.seqlens, 1, -1);
    expect("cache_seqlens negative", c, FA_ERR_SEQLENS, "cache_seqlens");
    c = valid_call(OP_KVCACHE);
    set_i32(&fx.seqlens, 1, SC - 1); /* fits, but not with 2 appended keys */
    expect("cache_seqlens + new > capacity", c, FA_ERR_SEQLENS, "cache_seqlens");
    set_i32(&fx.seqlens, 1, s1);
    c = paged_call();
    set_i32(&fx.btab, 4, NBLK);
    expect("block_table entry = num_blocks", c, FA_ERR_BLOCK_TABLE, "block_table");
    set_i32(&fx.btab, 4, -1);
    expect("block_table entry negative", c, FA_ERR_BLOCK_TABLE, "block_table");
    set_i32(&fx.btab, 4, 3);
    c = paged_call();
    c.btab.shape[0] = B + 1;
    expect("block_table rows != B", c, FA_ERR_SHAPE, "block_table");
    c = paged_call();
    c.btab.dtype = FA_F32;
    expect("block_table float32", c, FA_ERR_DTYPE, "block_table");
    c = paged_call();
    set_i32(&fx.seqlens, 0, 11); /* + 2 new = 13 keys need 4 blocks, the table has 3 */
    expect("paged sequence longer than its block table", c, FA_ERR_SEQLENS, "cache_seqlens");
    set_i32(&fx.seqlens, 0, s0);
}

static void overflow_and_merge(void) {
    /* q claims 2 x 2^55 rows of 4 x 16 elements: 2^62 elements, 2^63 bytes or more. */
    call c = valid_call(OP_FWD);
    int64_t rows = (int64_t)1 << 55;
    c.q.shape[1] = c.out.shape[1] = rows;
    c.q.stride[0] = c.out.stride[0] = rows * HQ * D;
    c.q.stride[1] = c.out.stride[1] = HQ * D;
    c.q.shape[2] = c.out.shape[2] = HQ;
    c.nulls |= N_LSE;
    expect("q byte size overflows int64", c, FA_ERR_OVERFLOW, "q");
    c = valid_call(OP_FWD);
    c.k.shape[0] = c.v.shape[0] = c.q.shape[0] = c.out.shape[0] = (int64_t)1 << 40;
    c.k.shape[1] = c.v.shape[1] = (int64_t)1 << 30;
    c.k.stride[0] = c.v.stride[0] = ((int64_t)1 << 30) * HK * D;
    c.lse.shape[0] = (int64_t)1 << 40;
    expect("k element count overflows int64", c, FA_ERR_OVERFLOW, "k");

    c = valid_call(OP_MERGE);
    c.n = 0;
    expect("merge n = 0", c, FA_ERR_OPTION, "n");
    c.n = -1;
    expect("merge n = -1", c, FA_ERR_OPTION, "n");
    c = valid_call(OP_MERGE);
    c.lses[1].shape[2] = SQ - 1;
    expect("merge lses[1] shape", c, FA_ERR_SHAPE, "lses");
    c = valid_call(OP_MERGE);
    c.outs[1].shape[3] = D / 2;
    expect("merge outs[1] shape", c, FA_ERR_SHAPE, "outs");
    c = valid_call(OP_MERGE);
    c.lse.dtype = FA_F16;
    expect("merge lse float16", c, FA_ERR_DTYPE, "lse");
}

int main(void) {
    if (!ft_init("test_bad_input")) return ft_finish();
    fa_dtype dts[3];
    ft_backend_dtypes(dts);
    g_dt = dts[0];
    make_fixture();
    valid_calls();
    null_pointers();
    shapes();
    strides();
    dtypes();
    head_dims();
    options();
    varlen();
    kvcache();
    overflow_and_merge();
    ft_tensor *all = (ft_tensor *)&fx;
    for (size_t i = 0; i < NTENSORS; ++i) {
        ft_free(&all[i]);
        free(snapshot[i]);
    }
    return ft_finish();
}

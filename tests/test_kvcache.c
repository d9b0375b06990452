/*
 * KV cache: contiguous and paged caches (block sizes 1, 16 and 5), with and
 * without appending new keys, num_splits 0 (heuristic), 1 and 3. Each
 * sequence is checked against the float64 reference over its gathered keys
 * (cached then new), and the cache against what the append must write:
 * the new rows at cache_seqlens[b], nothing anywhere else.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

#define NB 3 /* sequences */

typedef struct kcase {
    const char *label;
    fa_dtype dt;
    int64_t Sq, Hq, Hk, D, Dv;
    int64_t capacity;     /* keys per sequence the cache can hold */
    int block_size;       /* 0: contiguous cache */
    int64_t S_new;        /* appended keys (0: none) */
    int lens[NB];         /* cache_seqlens before the call */
    int no_seqlens;       /* contiguous: pass cache_seqlens NULL (every sequence full) */
    int splits;
    int alibi;
    fa_options opts;
} kcase;

/* Physical row (element offset) of key j of sequence b in a cache tensor. */
static int64_t cache_row(const ft_tensor *c, const kcase *kc, const int32_t *table, int64_t max_blocks, int64_t b,
                         int64_t j, int64_t h) {
    if (!kc->block_size) return c->offset + b * c->stride[0] + j * c->stride[1] + h * c->stride[2];
    int64_t blk = table[b * max_blocks + j / kc->block_size];
    return c->offset + blk * c->stride[0] + (j % kc->block_size) * c->stride[1] + h * c->stride[2];
}

static void run_case(const kcase *c) {
    char layout[32] = "contiguous", name[256];
    if (c->block_size) snprintf(layout, sizeof layout, "paged bs %d", c->block_size);
    snprintf(name, sizeof name, "kvcache %s %s, %s, append %lld, splits %d, Sq %lld H%lld/%lld D%lld/%lld", c->label,
             fa_dtype_name(c->dt), layout, (long long)c->S_new, c->splits, (long long)c->Sq, (long long)c->Hq,
             (long long)c->Hk, (long long)c->D, (long long)c->Dv);
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    int64_t es = (int64_t)fa_dtype_size(c->dt);

    /* Cache geometry: paged caches get every sequence's blocks in shuffled order, plus spare blocks. */
    int64_t max_blocks = 0, num_blocks = 0;
    int32_t *table = NULL;
    ft_tensor bt = {0};
    ft_tensor kc, vc;
    if (c->block_size) {
        max_blocks = (c->capacity + c->block_size - 1) / c->block_size;
        num_blocks = NB * max_blocks + 2;
        bt = ft_alloc(FA_I32, 2, (int64_t[]){NB, max_blocks}, FT_CONTIG);
        table = (int32_t *)bt.host;
        int32_t *perm = malloc((size_t)num_blocks * sizeof(int32_t));
        for (int64_t i = 0; i < num_blocks; ++i) perm[i] = (int32_t)i;
        for (int64_t i = num_blocks - 1; i > 0; --i) { /* Fisher-Yates */
            int64_t j = (int64_t)(ft_rng_uniform(&r) * (double)(i + 1));
            int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < NB * max_blocks; ++i) table[i] = perm[i];
        free(perm);
        kc = ft_alloc4(c->dt, num_blocks, c->block_size, c->Hk, c->D, FT_GUARDED);
        vc = ft_alloc4(c->dt, num_blocks, c->block_size, c->Hk, c->Dv, FT_PADDED);
    } else {
        kc = ft_alloc4(c->dt, NB, c->capacity, c->Hk, c->D, FT_PADDED);
        vc = ft_alloc4(c->dt, NB, c->capacity, c->Hk, c->Dv, FT_GUARDED);
    }
    ft_fill_normal(&kc, &r, 1.0);
    ft_fill_normal(&vc, &r, 1.0);
    ft_tensor q = ft_alloc4(c->dt, NB, c->Sq, c->Hq, c->D, FT_CONTIG);
    ft_fill_normal(&q, &r, 1.0);
    ft_tensor kn = {0}, vn = {0};
    if (c->S_new) {
        kn = ft_alloc4(c->dt, NB, c->S_new, c->Hk, c->D, FT_PADDED);
        vn = ft_alloc4(c->dt, NB, c->S_new, c->Hk, c->Dv, FT_CONTIG);
        ft_fill_normal(&kn, &r, 1.0);
        ft_fill_normal(&vn, &r, 1.0);
    }
    ft_tensor seqlens = ft_alloc(FA_I32, 1, (int64_t[]){NB}, FT_CONTIG);
    int32_t lens[NB];
    for (int b = 0; b < NB; ++b) lens[b] = c->no_seqlens ? (int32_t)c->capacity : c->lens[b];
    memcpy(seqlens.host, lens, sizeof lens);
    ft_tensor slopes = ft_alloc(FA_F32, 2, (int64_t[]){NB, c->Hq}, FT_CONTIG);
    for (int64_t e = 0; e < ft_numel(&slopes); ++e) ((float *)slopes.host)[e] = (float)(0.05 + 0.3 * ft_rng_uniform(&r));

    /* What the cache must hold afterwards: as now, plus the new rows. */
    size_t kbytes = kc.nbuf * (size_t)es, vbytes = vc.nbuf * (size_t)es;
    unsigned char *k_want = malloc(kbytes), *v_want = malloc(vbytes);
    memcpy(k_want, kc.host, kbytes);
    memcpy(v_want, vc.host, vbytes);
    for (int64_t b = 0; b < NB && c->S_new; ++b)
        for (int64_t j = 0; j < c->S_new; ++j)
            for (int64_t h = 0; h < c->Hk; ++h) {
                int64_t dst_k = cache_row(&kc, c, table, max_blocks, b, lens[b] + j, h);
                int64_t dst_v = cache_row(&vc, c, table, max_blocks, b, lens[b] + j, h);
                int64_t src_k = kn.offset + b * kn.stride[0] + j * kn.stride[1] + h * kn.stride[2];
                int64_t src_v = vn.offset + b * vn.stride[0] + j * vn.stride[1] + h * vn.stride[2];
                memcpy(k_want + dst_k * es, kn.host + src_k * es, (size_t)(c->D * es));
                memcpy(v_want + dst_v * es, vn.host + src_v * es, (size_t)(c->Dv * es));
            }

    /* Reference and naive baseline, one sequence at a time over its gathered keys. */
    int64_t no = NB * c->Sq * c->Hq * c->Dv, nl = NB * c->Hq * c->Sq, per_o = c->Sq * c->Hq * c->Dv;
    float *ref = malloc((size_t)(no + 1) * 4), *ref_lse = malloc((size_t)(nl + 1) * 4);
    float *naive = malloc((size_t)(no + 1) * 4), *naive_lse = malloc((size_t)(nl + 1) * 4);
    uint8_t *zero = malloc((size_t)no + 1);
    ft_tensor kw = kc, vw = vc; /* views of the expected caches */
    kw.host = k_want;
    vw.host = v_want;
    float *qf = ft_to_f32(&q);
    fa_status st = FA_OK;
    for (int64_t b = 0; b < NB && st == FA_OK; ++b) {
        int64_t L = lens[b] + c->S_new;
        ft_tensor kg = ft_alloc4(FA_F32, 1, L, c->Hk, c->D, FT_CONTIG), vg = ft_alloc4(FA_F32, 1, L, c->Hk, c->Dv, FT_CONTIG);
        ft_tensor qb = ft_alloc4(FA_F32, 1, c->Sq, c->Hq, c->D, FT_CONTIG);
        ft_tensor ob = ft_alloc4(FA_F32, 1, c->Sq, c->Hq, c->Dv, FT_CONTIG);
        ft_tensor lb = ft_alloc(FA_F32, 3, (int64_t[]){1, c->Hq, c->Sq}, FT_CONTIG);
        float *kgv = (float *)kg.host, *vgv = (float *)vg.host;
        for (int64_t j = 0; j < L; ++j)
            for (int64_t h = 0; h < c->Hk; ++h) {
                int64_t rk = cache_row(&kc, c, table, max_blocks, b, j, h), rv = cache_row(&vc, c, table, max_blocks, b, j, h);
                for (int64_t d = 0; d < c->D; ++d) kgv[(j * c->Hk + h) * c->D + d] = ft_get(&kw, rk + d);
                for (int64_t d = 0; d < c->Dv; ++d) vgv[(j * c->Hk + h) * c->Dv + d] = ft_get(&vw, rv + d);
            }
        memcpy(qb.host, qf + b * c->Sq * c->Hq * c->D, (size_t)(c->Sq * c->Hq * c->D) * 4);
        fa_options ro = c->opts;
        ft_problem p;
        memset(&p, 0, sizeof p);
        p.B = 1, p.Sq = c->Sq, p.Sk = L, p.Hq = c->Hq, p.Hk = c->Hk, p.D = c->D, p.Dv = c->Dv, p.opts = c->opts;
        if (c->alibi) { /* this sequence's row of the (B, Hq) slopes */
            ro.alibi_slopes = fa_tensor_1d((float *)slopes.host + b * c->Hq, FA_F32, c->Hq);
            p.alibi = (float *)slopes.host + b * c->Hq;
        }
        fa_tensor a = ft_view(&qb, 0), k2 = ft_view(&kg, 0), v2 = ft_view(&vg, 0), o2 = ft_view(&ob, 0), l2 = ft_view(&lb, 0);
        st = fa_fwd(ft_ref_ctx, &a, &k2, &v2, &ro, &o2, &l2);
        memcpy(ref + b * per_o, ob.host, (size_t)per_o * 4);
        memcpy(ref_lse + b * c->Hq * c->Sq, lb.host, (size_t)(c->Hq * c->Sq) * 4);
        ft_naive_fwd(&p, c->dt, (float *)qb.host, kgv, vgv, naive + b * per_o, naive_lse + b * c->Hq * c->Sq);
        uint8_t *z = ft_masked_rows(&p, (float *)lb.host, c->Dv);
        memcpy(zero + b * per_o, z, (size_t)per_o);
        free(z);
        ft_free(&kg), ft_free(&vg), ft_free(&qb), ft_free(&ob), ft_free(&lb);
    }
    if (st != FA_OK) {
        ft_fail(name, "reference: %s %s", fa_status_name(st), fa_last_error());
    } else {
        /* The backend under test. */
        ft_tensor out = ft_alloc4(c->dt, NB, c->Sq, c->Hq, c->Dv, FT_PADDED);
        ft_tensor lse = ft_alloc(FA_F32, 3, (int64_t[]){NB, c->Hq, c->Sq}, FT_GUARDED);
        fa_options opts = c->opts;
        if (c->alibi) opts.alibi_slopes = ft_arg(&slopes);
        fa_tensor tq = ft_arg(&q), tkc = ft_arg(&kc), tvc = ft_arg(&vc), tsl = ft_arg(&seqlens), to = ft_arg(&out),
                  tl = ft_arg(&lse);
        fa_tensor tbt = c->block_size ? ft_arg(&bt) : tq, tkn = c->S_new ? ft_arg(&kn) : tq, tvn = c->S_new ? ft_arg(&vn) : tq;
        st = fa_fwd_kvcache(ft_ctx, &tq, &tkc, &tvc, c->no_seqlens ? NULL : &tsl, c->block_size ? &tbt : NULL,
                            c->S_new ? &tkn : NULL, c->S_new ? &tvn : NULL, c->splits, &opts, &to, &tl);
        ft_download(&out), ft_download(&lse), ft_download(&kc), ft_download(&vc);
        if (st == FA_ERR_DTYPE) {
            ft_skip(name, "%s", fa_last_error());
        } else if (st != FA_OK) {
            ft_fail(name, "%s %s", fa_status_name(st), fa_last_error());
        } else {
            char sum[300] = "";
            int ok = ft_check_result("out", &out, ref, naive, zero, c->dt, 0, 0.0, sum, sizeof sum);
            ok &= ft_check_result("lse", &lse, ref_lse, naive_lse, NULL, FA_F32, 0, 0.0, sum, sizeof sum);
            if (memcmp(kc.host, k_want, kbytes) != 0) ok = ft_note("k_cache differs from the expected append");
            if (memcmp(vc.host, v_want, vbytes) != 0) ok = ft_note("v_cache differs from the expected append");
            ft_check(ok, name, "%s, cache %s", sum, c->S_new ? "appended exactly" : "untouched");
        }
        ft_free(&out), ft_free(&lse);
    }
    free(qf);
    free(ref), free(ref_lse), free(naive), free(naive_lse), free(zero), free(k_want), free(v_want);
    ft_free(&kc), ft_free(&vc), ft_free(&q), ft_free(&seqlens), ft_free(&slopes);
    if (c->S_new) ft_free(&kn), ft_free(&vn);
    if (c->block_size) ft_free(&bt);
}

static kcase make(const char *label, fa_dtype dt, int64_t Sq, int64_t Hq, int64_t Hk, int64_t D, int64_t capacity,
                  int block_size, int64_t S_new, int splits) {
    kcase c;
    memset(&c, 0, sizeof c);
    c.label = label, c.dt = dt, c.Sq = Sq, c.Hq = Hq, c.Hk = Hk, c.D = D, c.Dv = D;
    c.capacity = capacity, c.block_size = block_size, c.S_new = S_new, c.splits = splits;
    /* One empty sequence (or empty before the append), one mid-way, one nearly full. */
    c.lens[0] = 0;
    c.lens[1] = (int)(capacity / 2 + 3);
    c.lens[2] = (int)(capacity - S_new);
    return c;
}

int main(void) {
    if (!ft_init("test_kvcache")) return ft_finish();
    fa_dtype dts[3];
    int n = ft_backend_dtypes(dts);
    static const int block_sizes[] = {0, 1, 16, 5};
    static const int splits[] = {0, 1, 3};
    for (int i = 0; i < n; ++i) {
        fa_dtype dt = dts[i];
        /* Decode: every layout x append x splits. */
        for (int bs = 0; bs < 4; ++bs)
            for (int s = 0; s < 3; ++s)
                for (int app = 0; app < 2; ++app) {
                    kcase c = make("decode", dt, 1, 8, 2, 128, 300, block_sizes[bs], app ? 1 : 0, splits[s]);
                    run_case(&c);
                }
        /* Several queries with causal masks aligned to each sequence's end, appending a chunk. */
        for (int bs = 0; bs < 4; ++bs) {
            kcase c = make("chunk causal", dt, 7, 4, 4, 64, 130, block_sizes[bs], 7, bs == 2 ? 3 : 0);
            c.opts.causal = 1;
            run_case(&c);
        }
        kcase c = make("window softcap alibi", dt, 3, 6, 2, 80, 257, 5, 2, 3);
        c.opts.use_window = 1, c.opts.window_left = 50, c.opts.window_right = 0;
        c.opts.softcap = 10.0f;
        c.alibi = 1;
        run_case(&c);
        c = make("D != Dv", dt, 2, 4, 2, 128, 90, 16, 2, 3);
        c.Dv = 40;
        run_case(&c);
        c = make("long cache splits 0", dt, 1, 4, 1, 64, 3000, 16, 1, 0);
        run_case(&c);
        c = make("full cache, no cache_seqlens", dt, 2, 2, 2, 59, 77, 0, 0, 3);
        c.no_seqlens = 1;
        run_case(&c);
        c = make("more queries than keys, causal", dt, 20, 2, 1, 64, 40, 16, 0, 0);
        c.lens[1] = 5, c.lens[2] = 19;
        c.opts.causal = 1;
        run_case(&c);
    }
    return ft_finish();
}

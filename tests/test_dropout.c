/*
 * Dropout: Philox4x32-10 against the published known-answer vectors, the keep
 * rule rebuilt from its definition in flashattn.h, fa_dropout_mask against
 * fa_dropout_keep, the empirical keep rate, and the backend's dropped forward
 * against a float64 attention that applies the rebuilt mask.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

static void known_answers(void) {
    /* Random123's kat_vectors for philox4x32 with 10 rounds. */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
         0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
         0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; ++t) {
        uint32_t out[4];
        fa_philox4x32_10(kat[t], kat[t] + 4, out);
        char name[64];
        snprintf(name, sizeof name, "philox4x32-10 known answer %d", t);
        ft_check(memcmp(out, kat[t] + 6, sizeof out) == 0, name, "%08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    }
}

/* The keep rule exactly as flashattn.h writes it. */
static int keep_by_definition(uint64_t seed, uint64_t offset, float p, int64_t b, int64_t h, int64_t i, int64_t j) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h | (uint32_t)b << 16,
                       (uint32_t)offset + (uint32_t)(offset >> 32) * 0x9E3779B9u};
    uint32_t r[4];
    fa_philox4x32_10(ctr, key, r);
    uint32_t threshold = (uint32_t)floor((double)p * 4294967296.0);
    return r[j & 3] >= threshold;
}

static void mask_rule(void) {
    const float ps[] = {0.1f, 0.5f, 0.9f, 0.0f};
    const uint64_t seeds[] = {0, 0x0123456789abcdefull, 0xffffffffffffffffull};
    const uint64_t offsets[] = {0, 5, (5ull << 32) | 17};
    int64_t Bm = 3, Hm = 3, Sq = 37, Sk = 130;
    uint8_t *mask = malloc((size_t)(Bm * Hm * Sq * Sk));
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; ++pi)
        for (size_t si = 0; si < 3; ++si) {
            uint64_t seed = seeds[si], off = offsets[si];
            float p = ps[pi];
            fa_tensor t = fa_tensor_4d(mask, FA_U8, Bm, Hm, Sq, Sk);
            fa_status st = fa_dropout_mask(seed, off, p, &t);
            int64_t mismatch_keep = 0, mismatch_def = 0, kept = 0, n = Bm * Hm * Sq * Sk;
            for (int64_t b = 0; b < Bm; ++b)
                for (int64_t h = 0; h < Hm; ++h)
                    for (int64_t i = 0; i < Sq; ++i)
                        for (int64_t j = 0; j < Sk; ++j) {
                            int m = mask[((b * Hm + h) * Sq + i) * Sk + j];
                            int k = fa_dropout_keep(seed, off, p, b, h, i, j);
                            kept += m;
                            mismatch_keep += m != k;
                            mismatch_def += k != keep_by_definition(seed, off, p, b, h, i, j);
                        }
            double rate = (double)kept / (double)n, want = 1.0 - p;
            double sigma = sqrt(want * (1 - want) / (double)n);
            char name[96];
            snprintf(name, sizeof name, "dropout mask p=%.1f seed %zu", p, si);
            int ok = st == FA_OK && !mismatch_keep && !mismatch_def && fabs(rate - want) <= 5 * sigma + 1e-12;
            ft_check(ok, name, "%s, keep rate %.4f (want %.4f +- %.4f), %lld differ from fa_dropout_keep, %lld from the definition",
                     fa_status_name(st), rate, want, 5 * sigma, (long long)mismatch_keep, (long long)mismatch_def);
        }
    /* Seed and offset both change the mask; b, h, i, j each move the counter. */
    int64_t n = 4096, same_seed = 0, same_off = 0;
    for (int64_t j = 0; j < n; ++j) {
        int a = fa_dropout_keep(1, 0, 0.5f, 0, 0, 3, j);
        same_seed += a == fa_dropout_keep(2, 0, 0.5f, 0, 0, 3, j);
        same_off += a == fa_dropout_keep(1, 1, 0.5f, 0, 0, 3, j);
    }
    ft_check(same_seed < n * 0.6 && same_off < n * 0.6, "dropout mask depends on seed and offset",
             "agreement %.3f (other seed), %.3f (other offset), ~0.5 expected", (double)same_seed / n, (double)same_off / n);
    free(mask);
}

/* The backend's dropped forward equals attention with the rebuilt mask. */
static void forward_with_mask(fa_dtype dt, int64_t Bn, int64_t Sq, int64_t Sk, int64_t Hq, int64_t Hk, int64_t D,
                              float p, int causal) {
    char name[160];
    snprintf(name, sizeof name, "dropout forward p=%.2f %s B%lld S%lldx%lld H%lld/%lld D%lld%s", p, fa_dtype_name(dt),
             (long long)Bn, (long long)Sq, (long long)Sk, (long long)Hq, (long long)Hk, (long long)D,
             causal ? " causal" : "");
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    ft_tensor q = ft_alloc4(dt, Bn, Sq, Hq, D, FT_CONTIG), k = ft_alloc4(dt, Bn, Sk, Hk, D, FT_CONTIG);
    ft_tensor v = ft_alloc4(dt, Bn, Sk, Hk, D, FT_CONTIG), out = ft_alloc4(dt, Bn, Sq, Hq, D, FT_PADDED);
    ft_tensor lse = ft_alloc(FA_F32, 3, (int64_t[]){Bn, Hq, Sq}, FT_GUARDED);
    ft_fill_normal(&q, &r, 1.0);
    ft_fill_normal(&k, &r, 1.0);
    ft_fill_normal(&v, &r, 1.0);
    ft_problem pr;
    memset(&pr, 0, sizeof pr);
    pr.B = Bn, pr.Sq = Sq, pr.Sk = Sk, pr.Hq = Hq, pr.Hk = Hk, pr.D = D, pr.Dv = D;
    pr.opts.causal = causal;
    pr.opts.dropout_p = p;
    pr.opts.dropout_seed = ft_rng_u64(&r);
    pr.opts.dropout_offset = ft_rng_u64(&r) & 0xffffff;
    uint8_t *mask = malloc((size_t)(Bn * Hq * Sq * Sk));
    fa_tensor tm = fa_tensor_4d(mask, FA_U8, Bn, Hq, Sq, Sk);
    fa_dropout_mask(pr.opts.dropout_seed, pr.opts.dropout_offset, p, &tm);

    fa_tensor tq = ft_arg(&q), tk = ft_arg(&k), tv = ft_arg(&v), to = ft_arg(&out), tl = ft_arg(&lse);
    fa_status st = fa_fwd(ft_ctx, &tq, &tk, &tv, &pr.opts, &to, &tl);
    ft_download(&out);
    ft_download(&lse);
    if (st == FA_ERR_DTYPE) {
        ft_skip(name, "%s", fa_last_error());
    } else if (st != FA_OK) {
        ft_fail(name, "%s %s", fa_status_name(st), fa_last_error());
    } else {
        float *qf = ft_to_f32(&q), *kf = ft_to_f32(&k), *vf = ft_to_f32(&v), *got = ft_to_f32(&out);
        float *got_lse = ft_to_f32(&lse);
        int64_t no = ft_numel(&out), nl = ft_numel(&lse);
        double *exact = malloc((size_t)no * sizeof(double)), *exact_lse = malloc((size_t)nl * sizeof(double));
        float *exact_f = malloc((size_t)no * sizeof(float)), *exact_lse_f = malloc((size_t)nl * sizeof(float));
        float *naive = malloc((size_t)no * sizeof(float)), *naive_lse = malloc((size_t)nl * sizeof(float));
        pr.keep = mask; /* the rebuilt mask, not the rule inside the backend */
        ft_exact_fwd(&pr, qf, kf, vf, exact, exact_lse);
        ft_naive_fwd(&pr, dt, qf, kf, vf, naive, naive_lse);
        for (int64_t e = 0; e < no; ++e) exact_f[e] = (float)exact[e];
        for (int64_t e = 0; e < nl; ++e) exact_lse_f[e] = (float)exact_lse[e];
        ft_err e = ft_compare(got, exact_f, no), eb = ft_compare(naive, exact_f, no);
        ft_err el = ft_compare(got_lse, exact_lse_f, nl), ebl = ft_compare(naive_lse, exact_lse_f, nl);
        double tol = ft_tolerance(dt, eb.max_err, e.max_ref, 0), tol_l = ft_tolerance(FA_F32, ebl.max_err, el.max_ref, 0);
        int ok = e.max_err <= tol && el.max_err <= tol_l && ft_padding_intact(&out) && ft_padding_intact(&lse);
        ft_check(ok, name, "out err %.2g (tol %.2g), lse err %.2g (tol %.2g)%s", e.max_err, tol, el.max_err, tol_l,
                 ft_padding_intact(&out) && ft_padding_intact(&lse) ? "" : ", padding overwritten");
        free(qf), free(kf), free(vf), free(got), free(got_lse), free(exact), free(exact_lse);
        free(exact_f), free(exact_lse_f), free(naive), free(naive_lse);
    }
    free(mask);
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&out), ft_free(&lse);
}

int main(void) {
    if (!ft_init("test_dropout")) return ft_finish();
    known_answers();
    mask_rule();
    fa_dtype dts[3];
    int n = ft_backend_dtypes(dts);
    for (int i = 0; i < n; ++i) {
        forward_with_mask(dts[i], 2, 113, 203, 2, 1, 64, 0.17f, 1);
        forward_with_mask(dts[i], 1, 64, 64, 4, 2, 128, 0.5f, 0);
        forward_with_mask(dts[i], 1, 1, 257, 2, 2, 96, 0.9f, 0);
        forward_with_mask(dts[i], 2, 130, 70, 2, 2, 40, 0.3f, 0);
    }
    return ft_finish();
}

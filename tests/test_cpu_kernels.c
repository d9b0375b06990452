/*
 * Unit tests of the CPU micro-kernels: every SIMD kernel set this machine can
 * run is compared with the portable C kernels (and those with plain loops),
 * over awkward sizes, strides, tails, masks and -inf scores.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/cpu/cpu_attn.h"
#include "../src/cpu/cpu_kernels.h"
#include "../src/cpu/cpu_probe.h"
#include "convert.h"

static int failures, checks;

static void check(int ok, const char *what, const char *set, const char *detail) {
    ++checks;
    if (!ok) {
        ++failures;
        printf("FAIL %s [%s] %s\n", what, set, detail);
    }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static float max_rel_err(const float *a, const float *b, size_t n) {
    float worst = 0.0f, scale = 1e-6f;
    for (size_t i = 0; i < n; ++i) scale = fmaxf(scale, fabsf(b[i]));
    for (size_t i = 0; i < n; ++i) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        worst = fmaxf(worst, fabsf(a[i] - b[i]) / scale);
    }
    return worst;
}

static void test_gemm_f32(const cpu_kernels *kr) {
    const int64_t ms[] = {1, 5, 6, 7, 13, 64}, ns[] = {16, 48, 64, 80, 144}, ks[] = {1, 3, 64, 129};
    for (size_t a = 0; a < 6; ++a)
        for (size_t b = 0; b < 5; ++b)
            for (size_t c = 0; c < 4; ++c)
                for (int mode = 0; mode < 3; ++mode) { /* overwrite, accumulate, accumulate with column scale */
                    int64_t m = ms[a], n = ns[b], k = ks[c];
                    int64_t a_rs = mode == 1 ? 1 : k + 3, a_ks = mode == 1 ? m + 2 : 1; /* both A layouts */
                    size_t asz = (size_t)(m * (k + 3) + k * (m + 2)), ldb = (size_t)n + 5, ldc = (size_t)n + 7;
                    float *A = malloc(asz * 4), *B = malloc(k * ldb * 4), *C0 = malloc(m * ldc * 4), *C1 = malloc(m * ldc * 4),
                          *cs = malloc(n * 4);
                    for (size_t i = 0; i < asz; ++i) A[i] = frand();
                    for (size_t i = 0; i < k * ldb; ++i) B[i] = frand();
                    for (size_t i = 0; i < m * ldc; ++i) C0[i] = C1[i] = frand();
                    for (int64_t i = 0; i < n; ++i) cs[i] = frand();
                    cpu_gemm_f32(kr, m, n, k, A, a_rs, a_ks, B, ldb, C0, ldc, mode > 0, mode == 2 ? cs : NULL);
                    cpu_gemm_f32(&cpu_kernels_generic, m, n, k, A, a_rs, a_ks, B, ldb, C1, ldc, mode > 0, mode == 2 ? cs : NULL);
                    char d[128];
                    float e = max_rel_err(C0, C1, m * ldc);
                    snprintf(d, sizeof d, "m=%lld n=%lld k=%lld mode=%d err=%g", (long long)m, (long long)n, (long long)k, mode, e);
                    check(e < 1e-5f, "gemm_f32", kr->name, d);
                    free(A), free(B), free(C0), free(C1), free(cs);
                }
}

/* bf16 pair gemm against plain loops over the widened values. */
static void test_gemm_bf16(const cpu_kernels *kr) {
    if (!kr->gemm_bf16) return;
    const int64_t m = 13, n = 80, kp = 37, ldb = 85, ldc = 83;
    uint32_t *A = malloc(m * kp * 4), *B = malloc(kp * ldb * 4);
    float *C0 = malloc(m * ldc * 4), *C1 = malloc(m * ldc * 4), *cs = malloc(n * 4);
    for (int64_t i = 0; i < m * kp; ++i) A[i] = fa_f32_to_bf16(frand()) | (uint32_t)fa_f32_to_bf16(frand()) << 16;
    for (int64_t i = 0; i < kp * ldb; ++i) B[i] = fa_f32_to_bf16(frand()) | (uint32_t)fa_f32_to_bf16(frand()) << 16;
    for (int64_t i = 0; i < n; ++i) cs[i] = frand();
    for (int64_t i = 0; i < m * ldc; ++i) C0[i] = C1[i] = frand();
    cpu_gemm_bf16(kr, m, n, kp, A, kp, 1, B, ldb, C0, ldc, 1, cs);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) {
            double acc = C1[r * ldc + c] * cs[c];
            for (int64_t k = 0; k < kp; ++k) {
                uint32_t a = A[r * kp + k], b = B[k * ldb + c];
                acc += (double)fa_bf16_to_f32((uint16_t)a) * fa_bf16_to_f32((uint16_t)b) +
                       (double)fa_bf16_to_f32((uint16_t)(a >> 16)) * fa_bf16_to_f32((uint16_t)(b >> 16));
            }
            C1[r * ldc + c] = (float)acc;
        }
    char d[64];
    float e = max_rel_err(C0, C1, m * ldc);
    snprintf(d, sizeof d, "err=%g", e);
    check(e < 1e-5f, "gemm_bf16", kr->name, d);
    free(A), free(B), free(C0), free(C1), free(cs);
}

static void test_softmax(const cpu_kernels *kr) {
    const int64_t nj = 37, ncols = 48;
    float s0[37 * 48], s1[37 * 48], m0[48], m1[48], l0[48], l1[48], a0[48], a1[48];
    int32_t lo[48], hi[48];
    for (int masked = 0; masked < 2; ++masked)
        for (int round = 0; round < 3; ++round) { /* a second and third tile exercise the running max */
            if (round == 0)
                for (int64_t i = 0; i < ncols; ++i) {
                    m0[i] = m1[i] = -INFINITY;
                    l0[i] = l1[i] = 0.0f;
                }
            for (int64_t i = 0; i < nj * ncols; ++i) s0[i] = s1[i] = 20.0f * frand() + (round == 1 ? 30.0f : 0.0f);
            for (int64_t i = 0; i < ncols; ++i) { /* empty, partial and full ranges */
                lo[i] = (int32_t)(i % 5 == 0 ? 0 : i % 7);
                hi[i] = (int32_t)(i % 3 == 0 ? lo[i] : nj - i % 4);
            }
            kr->softmax_tile(nj, ncols, s0, ncols, 1.3f, masked ? lo : NULL, hi, m0, l0, a0);
            cpu_softmax_tile_generic(nj, ncols, s1, ncols, 1.3f, masked ? lo : NULL, hi, m1, l1, a1);
            char d[64];
            snprintf(d, sizeof d, "masked=%d round=%d", masked, round);
            float e = fmaxf(max_rel_err(s0, s1, nj * ncols), fmaxf(max_rel_err(l0, l1, ncols), max_rel_err(a0, a1, ncols)));
            int same_m = 1;
            for (int64_t i = 0; i < ncols; ++i) same_m &= (m0[i] == m1[i]) || (isinf(m0[i]) && isinf(m1[i]));
            /* SIMD kernels form c*s - m with one rounding (fused), the portable one with two */
            check(e < 1e-5f && same_m, "softmax_tile", kr->name, d);
        }
}

static void test_exp_tile(const cpu_kernels *kr) {
    const int64_t nj = 19, ncols = 32;
    float s[19 * 32], p0[19 * 32], p1[19 * 32], lse2[32];
    int32_t lo[32], hi[32];
    for (int64_t i = 0; i < nj * ncols; ++i) s[i] = 8.0f * frand();
    for (int64_t i = 0; i < ncols; ++i) {
        lse2[i] = i % 9 == 0 ? INFINITY : 12.0f + frand();
        lo[i] = (int32_t)(i % 4);
        hi[i] = (int32_t)(nj - i % 6);
    }
    kr->exp_tile(nj, ncols, s, ncols, 1.1f, lo, hi, lse2, p0, ncols);
    cpu_exp_tile_generic(nj, ncols, s, ncols, 1.1f, lo, hi, lse2, p1, ncols);
    check(max_rel_err(p0, p1, nj * ncols) < 2e-6f, "exp_tile", kr->name, "");
}

static void test_rowdot(const cpu_kernels *kr) {
    const int64_t ds[] = {1, 16, 59, 128, 256}, njs[] = {1, 15, 16, 33, 64};
    for (size_t a = 0; a < 5; ++a)
        for (size_t b = 0; b < 5; ++b) {
            int64_t d = ds[a], nj = njs[b], ldq = d + 1, ldk = d + 3;
            float *q = malloc(8 * ldq * 4), *k = malloc(nj * ldk * 4), s0[64 * 9], s1[64 * 9];
            for (int64_t i = 0; i < 8 * ldq; ++i) q[i] = frand();
            for (int64_t i = 0; i < nj * ldk; ++i) k[i] = frand();
            for (int rows = 1; rows <= 8; rows += 3) {
                for (int i = 0; i < 64 * 9; ++i) s0[i] = s1[i] = -7.0f; /* columns past rows stay as they were */
                kr->rowdot(rows, nj, d, q, ldq, k, ldk, s0, 9);
                cpu_rowdot_generic(rows, nj, d, q, ldq, k, ldk, s1, 9);
                float worst = 0.0f;
                for (int64_t j = 0; j < nj; ++j)
                    for (int r = 0; r < 9; ++r) worst = fmaxf(worst, fabsf(s0[j * 9 + r] - s1[j * 9 + r]) / (float)d);
                char det[64];
                snprintf(det, sizeof det, "d=%lld nj=%lld rows=%d", (long long)d, (long long)nj, rows);
                check(worst < 1e-6f, "rowdot", kr->name, det);
            }
            free(q), free(k);
        }
}

/* The in-place decode kernels (bf16 and f16 K and V rows) against the same
 * products on widened copies. */
static void test_half_in_place(const cpu_kernels *kr, int f16) {
    const int64_t d = 77, nj = 37, ldk = 83, n = 64, ldb = 70;
    const char *what = f16 ? "f16" : "bf16";
    cpu_rowdot_half_fn rowdot = f16 ? kr->rowdot_f16 : kr->rowdot_bf16;
    cpu_gemm_f32_halfb_fn gemm = f16 ? kr->gemm_f32_f16b : kr->gemm_f32_bf16b;
    uint16_t *k = malloc(nj * ldk * 2), *b = malloc(nj * ldb * 2);
    float *kw = malloc(nj * ldk * 4), *bw = malloc(nj * ldb * 4), q[6 * 80], s0[64 * 6], s1[64 * 6], a[6 * 40];
    float c0[6 * 64], c1[6 * 64];
    for (int64_t i = 0; i < nj * ldk; ++i) {
        k[i] = f16 ? fa_f32_to_f16(frand()) : fa_f32_to_bf16(frand());
        kw[i] = f16 ? fa_f16_to_f32(k[i]) : fa_bf16_to_f32(k[i]);
    }
    for (int64_t i = 0; i < nj * ldb; ++i) {
        b[i] = f16 ? fa_f32_to_f16(frand()) : fa_f32_to_bf16(frand());
        bw[i] = f16 ? fa_f16_to_f32(b[i]) : fa_bf16_to_f32(b[i]);
    }
    for (int i = 0; i < 6 * 80; ++i) q[i] = frand();
    for (int i = 0; i < 6 * 40; ++i) a[i] = frand();
    for (int rows = 1; rows <= 6; rows += 4) { /* two keys a step (rows <= 4) and one */
        rowdot(rows, nj, d, q, 80, k, ldk, s0, 6);
        cpu_rowdot_generic(rows, nj, d, q, 80, kw, ldk, s1, 6);
        float worst = 0.0f;
        for (int64_t j = 0; j < nj; ++j)
            for (int r = 0; r < rows; ++r) worst = fmaxf(worst, fabsf(s0[j * 6 + r] - s1[j * 6 + r]));
        char det[32];
        snprintf(det, sizeof det, "%s, rows=%d", what, rows);
        check(worst < 1e-5f, "rowdot (half)", kr->name, det);
    }
    for (int i = 0; i < 6 * 64; ++i) c0[i] = c1[i] = frand();
    cpu_gemm_f32_halfb(gemm, 6, n, nj, a, 1, 6, b, ldb, c0, 64, 1, NULL);
    cpu_gemm_f32(&cpu_kernels_generic, 6, n, nj, a, 1, 6, bw, ldb, c1, 64, 1, NULL);
    check(max_rel_err(c0, c1, 6 * 64) < 1e-5f, "gemm_f32 (half B)", kr->name, what);
    free(k), free(b), free(kw), free(bw);
}

static void test_conversions(const cpu_kernels *kr) {
    enum { N = 77 };
    uint16_t h[N], g[N];
    float f0[N], f1[N], p0[N], p1[N];
    uint32_t w0[N], w1[N];
    for (int i = 0; i < N; ++i) {
        h[i] = fa_f32_to_f16(4.0f * frand());
        g[i] = fa_f32_to_bf16(4.0f * frand());
        p0[i] = frand();
        p1[i] = frand();
    }
    h[3] = 0x0001; /* a subnormal half */
    kr->widen_f16(h, f0, N);
    cpu_widen_f16_generic(h, f1, N);
    check(memcmp(f0, f1, sizeof f0) == 0, "widen_f16", kr->name, "");
    kr->widen_bf16(g, f0, N);
    cpu_widen_bf16_generic(g, f1, N);
    check(memcmp(f0, f1, sizeof f0) == 0, "widen_bf16", kr->name, "");
    kr->pair_bf16(h, g, w0, N);
    cpu_pair_bf16_generic(h, g, w1, N);
    check(memcmp(w0, w1, sizeof w0) == 0, "pair_bf16", kr->name, "");
    kr->pair_bf16(h, NULL, w0, N);
    cpu_pair_bf16_generic(h, NULL, w1, N);
    check(memcmp(w0, w1, sizeof w0) == 0, "pair_bf16 (one row)", kr->name, "");
    kr->pair_f32(p0, p1, w0, N);
    cpu_pair_f32_generic(p0, p1, w1, N);
    check(memcmp(w0, w1, sizeof w0) == 0, "pair_f32", kr->name, "");
    /* narrow_bf16: bit-exact with fa_f32_to_bf16, ties, infinities and NaN included; a tail of 13 */
    uint16_t n0[N + 1], n1[N];
    uint32_t specials[] = {0x3F808000u, 0x3F818000u, 0x7F800000u, 0xFF800000u, 0x7FC00001u, 0x7F800001u, 0xFFFFFFFFu,
                           0x7F7FFFFFu, 0x00000001u, 0x80000000u};
    for (int i = 0; i < (int)(sizeof specials / sizeof specials[0]); ++i) memcpy(&p0[i], &specials[i], 4);
    n0[N] = 0xBEEF; /* must survive: the kernel writes n values only */
    kr->narrow_bf16(p0, 1.0f, n0, N);
    for (int i = 0; i < N; ++i) n1[i] = fa_f32_to_bf16(p0[i]);
    check(memcmp(n0, n1, sizeof n1) == 0 && n0[N] == 0xBEEF, "narrow_bf16", kr->name, "");
    kr->narrow_bf16(p1, 0.37f, n0, N);
    for (int i = 0; i < N; ++i) n1[i] = fa_f32_to_bf16(p1[i] * 0.37f);
    check(memcmp(n0, n1, sizeof n1) == 0 && n0[N] == 0xBEEF, "narrow_bf16 (scaled)", kr->name, "");
}

/*
 * End to end through the public API: the forward's few-row path (short query
 * blocks, decode) and the transposed path against the float64 reference, for
 * tiny and odd head dims (the few-row output buffer is sized by Dv rounded up
 * to 16, which exceeds the transposed one when Dv < 8).
 */
static void test_small_head_dims(void) {
    fa_context *cpu = NULL, *ref = NULL;
    if (fa_context_create(&cpu) || fa_context_create(&ref)) {
        check(0, "contexts", "api", fa_last_error());
        return;
    }
    fa_context_set_backend(cpu, FA_BACKEND_CPU);
    fa_context_set_backend(ref, FA_BACKEND_REFERENCE);
    const int64_t sqs[] = {1, 3, 70}, dims[][2] = {{1, 1}, {5, 1}, {3, 7}, {7, 2}, {40, 3}};
    for (size_t a = 0; a < 3; ++a)
        for (size_t b = 0; b < 5; ++b) {
            const int64_t B = 2, Sq = sqs[a], Sk = 130, Hq = 4, Hk = 2, D = dims[b][0], Dv = dims[b][1];
            float *q = malloc(B * Sq * Hq * D * 4), *k = malloc(B * Sk * Hk * D * 4), *v = malloc(B * Sk * Hk * Dv * 4);
            float *o0 = malloc(B * Sq * Hq * Dv * 4), *o1 = malloc(B * Sq * Hq * Dv * 4);
            float *l0 = malloc(B * Hq * Sq * 4), *l1 = malloc(B * Hq * Sq * 4);
            for (int64_t i = 0; i < B * Sq * Hq * D; ++i) q[i] = frand();
            for (int64_t i = 0; i < B * Sk * Hk * D; ++i) k[i] = frand();
            for (int64_t i = 0; i < B * Sk * Hk * Dv; ++i) v[i] = frand();
            fa_tensor tq = fa_tensor_4d(q, FA_F32, B, Sq, Hq, D), tk = fa_tensor_4d(k, FA_F32, B, Sk, Hk, D);
            fa_tensor tv = fa_tensor_4d(v, FA_F32, B, Sk, Hk, Dv);
            fa_tensor to0 = fa_tensor_4d(o0, FA_F32, B, Sq, Hq, Dv), to1 = fa_tensor_4d(o1, FA_F32, B, Sq, Hq, Dv);
            fa_tensor tl0 = fa_tensor_3d(l0, FA_F32, B, Hq, Sq), tl1 = fa_tensor_3d(l1, FA_F32, B, Hq, Sq);
            fa_options op;
            memset(&op, 0, sizeof op);
            op.causal = (int)(b & 1);
            int ok = fa_fwd(cpu, &tq, &tk, &tv, &op, &to0, &tl0) == FA_OK && fa_fwd(ref, &tq, &tk, &tv, &op, &to1, &tl1) == FA_OK;
            char d[96];
            float e = ok ? fmaxf(max_rel_err(o0, o1, B * Sq * Hq * Dv), max_rel_err(l0, l1, B * Hq * Sq)) : INFINITY;
            snprintf(d, sizeof d, "Sq=%lld D=%lld Dv=%lld err=%g %s", (long long)Sq, (long long)D, (long long)Dv, e,
                     ok ? "" : fa_last_error());
            check(e < 1e-5f, "forward vs reference", "cpu", d);
            free(q), free(k), free(v), free(o0), free(o1), free(l0), free(l1);
        }
    fa_context_destroy(cpu);
    fa_context_destroy(ref);
}

/* float8 e4m3 decoded from its fields: sign, exponent e, mantissa m. */
static float e4m3_from_fields(uint8_t v) {
    int e = (v >> 3) & 0xF, m = v & 7;
    if (e == 0xF && m == 7) return NAN;
    float mag = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (v & 0x80) ? -mag : mag;
}

/* float8 rows widen through the conversion table: each of the 256 codes as
 * its fields give it (NaN for S.1111.111). */
static void test_e4m3_widening(void) {
    uint8_t codes[256];
    float got[256];
    for (int i = 0; i < 256; ++i) codes[i] = (uint8_t)i;
    cpu_load_row_f32(cpu_kernels_select(), FA_F8_E4M3, codes, got, 256);
    int bad = 0;
    for (int i = 0; i < 256; ++i) {
        float want = e4m3_from_fields((uint8_t)i);
        bad += isnan(want) ? !isnan(got[i]) : memcmp(&want, &got[i], sizeof want) != 0;
    }
    char detail[64];
    snprintf(detail, sizeof detail, "%d of 256 codes differ", bad);
    check(bad == 0, "e4m3 widening", "table", detail);
}

static void test_set(const cpu_kernels *kr) {
    test_gemm_f32(kr);
    test_gemm_bf16(kr);
    test_softmax(kr);
    test_exp_tile(kr);
    test_rowdot(kr);
    test_half_in_place(kr, 0);
    test_half_in_place(kr, 1);
    test_conversions(kr);
}

int main(void) {
    const cpu_features *f = cpu_detect_features();
    printf("test_cpu_kernels: CPU features \"%s\", chosen kernels %s\n", fa_cpu_feature_string(), cpu_kernels_select()->name);
    test_set(&cpu_kernels_generic);
#if defined(__x86_64__) || defined(_M_X64)
    if (f->avx2 && f->fma && f->f16c) test_set(&cpu_kernels_avx2);
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl) {
        cpu_kernels k = cpu_kernels_avx512;
        if (!f->avx512bf16) k.gemm_bf16 = NULL;
        test_set(&k);
    }
#else
    (void)f;
#endif
    test_small_head_dims();
    test_e4m3_widening();
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}

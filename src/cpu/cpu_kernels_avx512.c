/*
 * AVX-512 micro-kernels (f32 FMA; bf16 pairs with vdpbf16ps from AVX512_BF16).
 * Built with -mavx512f -mavx512bf16 ...; only called after cpuid said so.
 *
 * A micro-tile keeps rows x nv accumulators in registers (at most 6 x 4 = 24
 * zmm, enough independent chains to cover the FMA latency on both ports)
 * and per k step loads nv vectors of B and broadcasts one A element per row.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

/*
 * The accumulators are 24 named variables rather than an array so the
 * compiler keeps every one in a register; with R and NV compile-time
 * constants the unused ones and their branches disappear.
 */
#define ACC_DECL(r) __m512 c##r##0 = zero, c##r##1 = zero, c##r##2 = zero, c##r##3 = zero
#define ACC_LOAD(r)                                                                                 \
    if (R > r && accumulate) {                                                                      \
        if (NV > 0) c##r##0 = _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc), s0);                      \
        if (NV > 1) c##r##1 = _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + 16), s1);                 \
        if (NV > 2) c##r##2 = _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + 32), s2);                 \
        if (NV > 3) c##r##3 = _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + 48), s3);                 \
    }
/* Column factors for the accumulator (1 when there are none). */
#define SCALE_DECL                                                                                  \
    const __m512 one = _mm512_set1_ps(1.0f);                                                        \
    __m512 s0 = one, s1 = one, s2 = one, s3 = one;                                                  \
    if (cs) {                                                                                       \
        if (NV > 0) s0 = _mm512_loadu_ps(cs);                                                       \
        if (NV > 1) s1 = _mm512_loadu_ps(cs + 16);                                                  \
        if (NV > 2) s2 = _mm512_loadu_ps(cs + 32);                                                  \
        if (NV > 3) s3 = _mm512_loadu_ps(cs + 48);                                                  \
    }
#define ACC_STORE(r)                                                                                \
    if (R > r) {                                                                                    \
        if (NV > 0) _mm512_storeu_ps(c + r * ldc, c##r##0);                                         \
        if (NV > 1) _mm512_storeu_ps(c + r * ldc + 16, c##r##1);                                    \
        if (NV > 2) _mm512_storeu_ps(c + r * ldc + 32, c##r##2);                                    \
        if (NV > 3) _mm512_storeu_ps(c + r * ldc + 48, c##r##3);                                    \
    }
#define FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* f32: one broadcast A element per row times NV vectors of B. */
#define F32_STEP(r)                                                                                 \
    if (R > r) {                                                                                    \
        __m512 av = _mm512_set1_ps(ak[r * a_rs]);                                                   \
        if (NV > 0) c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);                                     \
        if (NV > 1) c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);                                     \
        if (NV > 2) c##r##2 = _mm512_fmadd_ps(av, b2, c##r##2);                                     \
        if (NV > 3) c##r##3 = _mm512_fmadd_ps(av, b3, c##r##3);                                     \
    }

FORCE_INLINE void tile_f32(const int R, const int NV, int64_t k,
                           const float *a, int64_t a_rs, int64_t a_ks,
                           const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    const __m512 zero = _mm512_setzero_ps();
    SCALE_DECL
    ACC_DECL(0); ACC_DECL(1); ACC_DECL(2); ACC_DECL(3); ACC_DECL(4); ACC_DECL(5);
    FOR_ROWS(ACC_LOAD)
    for (int64_t kk = 0; kk < k; ++kk) {
        const float *bk = b + kk * ldb, *ak = a + kk * a_ks;
        __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero;
        if (NV > 0) b0 = _mm512_loadu_ps(bk);
        if (NV > 1) b1 = _mm512_loadu_ps(bk + 16);
        if (NV > 2) b2 = _mm512_loadu_ps(bk + 32);
        if (NV > 3) b3 = _mm512_loadu_ps(bk + 48);
        FOR_ROWS(F32_STEP)
    }
    FOR_ROWS(ACC_STORE)
}

/* 16 half-precision values to f32: a bf16 is the high half of its f32 (F16 = 0),
 * an f16 goes through vcvtph2ps (F16 = 1). */
FORCE_INLINE __m512 widen16(const int F16, const uint16_t *p) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* As tile_f32, with B in bf16 or f16 (decode: V read in place from the cache). */
FORCE_INLINE void tile_f32_halfb(const int F16, const int R, const int NV, int64_t k,
                                 const float *a, int64_t a_rs, int64_t a_ks,
                                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    const __m512 zero = _mm512_setzero_ps();
    SCALE_DECL
    ACC_DECL(0); ACC_DECL(1); ACC_DECL(2); ACC_DECL(3); ACC_DECL(4); ACC_DECL(5);
    FOR_ROWS(ACC_LOAD)
    for (int64_t kk = 0; kk < k; ++kk) {
        const uint16_t *bk = b + kk * ldb;
        const float *ak = a + kk * a_ks;
        __m512 b0 = zero, b1 = zero, b2 = zero, b3 = zero;
        if (NV > 0) b0 = widen16(F16, bk);
        if (NV > 1) b1 = widen16(F16, bk + 16);
        if (NV > 2) b2 = widen16(F16, bk + 32);
        if (NV > 3) b3 = widen16(F16, bk + 48);
        FOR_ROWS(F32_STEP)
    }
    FOR_ROWS(ACC_STORE)
}

FORCE_INLINE uint32_t load_word(const uint32_t *p) {
    uint32_t w;
    memcpy(&w, p, 4); /* A rows need not be 4-byte aligned */
    return w;
}

/* bf16 pairs: one broadcast A word (two bf16) per row, vdpbf16ps against B. */
#define BF16_STEP(r)                                                                                \
    if (R > r) {                                                                                    \
        __m512bh av = (__m512bh)_mm512_set1_epi32((int)load_word(ak + r * a_rs));                  \
        if (NV > 0) c##r##0 = _mm512_dpbf16_ps(c##r##0, av, b0);                                    \
        if (NV > 1) c##r##1 = _mm512_dpbf16_ps(c##r##1, av, b1);                                    \
        if (NV > 2) c##r##2 = _mm512_dpbf16_ps(c##r##2, av, b2);                                    \
        if (NV > 3) c##r##3 = _mm512_dpbf16_ps(c##r##3, av, b3);                                    \
    }

FORCE_INLINE void tile_bf16(const int R, const int NV, int64_t kpairs,
                            const uint32_t *a, int64_t a_rs, int64_t a_ks,
                            const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    const __m512 zero = _mm512_setzero_ps();
    SCALE_DECL
    ACC_DECL(0); ACC_DECL(1); ACC_DECL(2); ACC_DECL(3); ACC_DECL(4); ACC_DECL(5);
    FOR_ROWS(ACC_LOAD)
    for (int64_t kk = 0; kk < kpairs; ++kk) {
        const uint32_t *bk = b + kk * ldb, *ak = a + kk * a_ks;
        __m512bh b0 = (__m512bh)zero, b1 = (__m512bh)zero, b2 = (__m512bh)zero, b3 = (__m512bh)zero;
        if (NV > 0) b0 = (__m512bh)_mm512_loadu_si512((const void *)bk);
        if (NV > 1) b1 = (__m512bh)_mm512_loadu_si512((const void *)(bk + 16));
        if (NV > 2) b2 = (__m512bh)_mm512_loadu_si512((const void *)(bk + 32));
        if (NV > 3) b3 = (__m512bh)_mm512_loadu_si512((const void *)(bk + 48));
        FOR_ROWS(BF16_STEP)
    }
    FOR_ROWS(ACC_STORE)
}

/* Masked loads and stores handle the tail of every row in the same loop. */
FORCE_INLINE __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
}

/*
 * Sums the 16 lanes of each of x[0..15] into lane i of the result: two
 * in-lane steps (unpack by 32 then 64 bits) leave each 128-bit lane holding
 * partial sums of four vectors, two 128-bit shuffle steps finish them; 30
 * instructions for 16 dot products instead of one full reduction each.
 */
FORCE_INLINE __m512 reduce16(const __m512 x[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; ++i) { /* lanes of x[2i] and x[2i+1] interleaved by 64-bit pairs */
        __m512 lo = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);
        __m512 hi = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]);
        a[i] = _mm512_add_ps(lo, hi);
    }
    for (int i = 0; i < 4; ++i) {
        __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a[2 * i]), _mm512_castps_pd(a[2 * i + 1])));
        __m512 hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a[2 * i]), _mm512_castps_pd(a[2 * i + 1])));
        b[i] = _mm512_add_ps(lo, hi); /* each 128-bit lane: sums of 4 vectors, one partial per 128-bit lane */
    }
    for (int i = 0; i < 2; ++i) {
        __m512 lo = _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88); /* 128-bit lanes 0,2 of each */
        __m512 hi = _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD); /* lanes 1,3 */
        c[i] = _mm512_add_ps(lo, hi);
    }
    __m512 lo = _mm512_shuffle_f32x4(c[0], c[1], 0x88);
    __m512 hi = _mm512_shuffle_f32x4(c[0], c[1], 0xDD);
    return _mm512_add_ps(lo, hi);
}

/* 16 bf16 values as f32; masked-off lanes read nothing and give 0. */
FORCE_INLINE __m512 widen16_masked(const int F16, __mmask16 m, const uint16_t *p) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/*
 * Few-row dot products: keys go in groups of kb = 16 / rows, so each key's
 * chunk of the head dim is loaded (and widened) once and used by every row;
 * the rows * kb partial vectors are reduced together by reduce16.
 */
/* Named registers picked by a compile-time index (an array would live in memory). */
#define PICK8(v, i) ((i) == 0 ? v##0 : (i) == 1 ? v##1 : (i) == 2 ? v##2 : (i) == 3 ? v##3 :        \
                     (i) == 4 ? v##4 : (i) == 5 ? v##5 : (i) == 6 ? v##6 : v##7)
#define PICK16(v, i) ((i) < 8 ? PICK8(v, i) : PICK8(v##1, (i) - 8))
/* M(name, index) for the 16 accumulators and keys: names 0..7 and 10..17 */
#define X16(M) M(0, 0) M(1, 1) M(2, 2) M(3, 3) M(4, 4) M(5, 5) M(6, 6) M(7, 7) \
    M(10, 8) M(11, 9) M(12, 10) M(13, 11) M(14, 12) M(15, 13) M(16, 14) M(17, 15)
#define X8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)

/* KIND: K rows in f32 (0), bf16 (1) or f16 (2). */
FORCE_INLINE void rowdot_body(const int KIND, const int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                              const void *kv, int64_t ldk, float *s, int64_t lds) {
    const int kb_full = 16 / rows;
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t j = 0; j < nj;) {
        const int kb = nj - j < kb_full ? (int)(nj - j) : kb_full;
        /* accumulator i = r * kb_full + t: row r, key j + t */
#define ACC_ZERO(n, i) __m512 a##n = zero;
        X16(ACC_ZERO)
        for (int64_t dd = 0; dd < d; dd += 16) {
            __mmask16 m = tail_mask(d - dd);
#define LOAD_K(n, t)                                                                                \
    __m512 k##n = zero;                                                                             \
    if ((t) < kb_full && (t) < kb)                                                                  \
        k##n = KIND ? widen16_masked(KIND == 2, m, (const uint16_t *)kv + (j + (t)) * ldk + dd)    \
                    : _mm512_maskz_loadu_ps(m, (const float *)kv + (j + (t)) * ldk + dd);
            X16(LOAD_K)
#define LOAD_Q(r) __m512 q##r = (r) < rows ? _mm512_maskz_loadu_ps(m, q + (r) * ldq + dd) : zero;
            X8(LOAD_Q)
#define DOT_STEP(n, i)                                                                              \
    if ((i) < rows * kb_full) a##n = _mm512_fmadd_ps(PICK8(q, (i) / kb_full), PICK16(k, (i) % kb_full), a##n);
            X16(DOT_STEP)
        }
        __m512 acc[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a10, a11, a12, a13, a14, a15, a16, a17};
        float out[16];
        _mm512_storeu_ps(out, reduce16(acc));
        for (int t = 0; t < kb; ++t)
            for (int r = 0; r < rows; ++r) s[(j + t) * lds + r] = out[r * kb_full + t];
        j += kb;
    }
}

/* Compile-time row counts keep the accumulators in registers; 8 rows at a time. */
#define ROWDOT_DISPATCH(KIND)                                                                       \
    for (int r0 = 0; r0 < rows; r0 += 8) {                                                          \
        int n = rows - r0 < 8 ? rows - r0 : 8;                                                      \
        const float *qr = q + r0 * ldq;                                                             \
        float *sr = s + r0;                                                                         \
        switch (n) {                                                                                \
        case 1: rowdot_body(KIND, 1, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 2: rowdot_body(KIND, 2, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 3: rowdot_body(KIND, 3, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 4: rowdot_body(KIND, 4, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 5: rowdot_body(KIND, 5, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 6: rowdot_body(KIND, 6, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        case 7: rowdot_body(KIND, 7, nj, d, qr, ldq, k, ldk, sr, lds); break;                       \
        default: rowdot_body(KIND, 8, nj, d, qr, ldq, k, ldk, sr, lds); break;                      \
        }                                                                                           \
    }

static void rowdot_avx512(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                          const float *k, int64_t ldk, float *s, int64_t lds) {
    ROWDOT_DISPATCH(0)
}

static void rowdot_bf16_avx512(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                               const uint16_t *k, int64_t ldk, float *s, int64_t lds) {
    ROWDOT_DISPATCH(1)
}

static void rowdot_f16_avx512(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                              const uint16_t *k, int64_t ldk, float *s, int64_t lds) {
    ROWDOT_DISPATCH(2)
}

/* One function per (rows, nv) so each keeps its accumulators in registers. */
#define DEFINE_TILES(R)                                                                             \
    static void f32_##R##_1(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,      \
                            int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {                          \
        tile_f32(R, 1, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                         \
    }                                                                                               \
    static void f32_##R##_2(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,      \
                            int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {                          \
        tile_f32(R, 2, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                         \
    }                                                                                               \
    static void f32_##R##_3(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,      \
                            int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {                          \
        tile_f32(R, 3, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                         \
    }                                                                                               \
    static void f32_##R##_4(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,      \
                            int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {                          \
        tile_f32(R, 4, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                         \
    }                                                                                               \
    static void bf16_##R##_1(int64_t k, const uint32_t *a, int64_t rs, int64_t ks,                  \
                             const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {      \
        tile_bf16(R, 1, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                        \
    }                                                                                               \
    static void bf16_##R##_2(int64_t k, const uint32_t *a, int64_t rs, int64_t ks,                  \
                             const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {      \
        tile_bf16(R, 2, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                        \
    }                                                                                               \
    static void bf16_##R##_3(int64_t k, const uint32_t *a, int64_t rs, int64_t ks,                  \
                             const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {      \
        tile_bf16(R, 3, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                        \
    }                                                                                               \
    static void bf16_##R##_4(int64_t k, const uint32_t *a, int64_t rs, int64_t ks,                  \
                             const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {      \
        tile_bf16(R, 4, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                        \
    }

#define DEFINE_HALFB_NV(T, F16, R, NV)                                                              \
    static void T##_##R##_##NV(int64_t k, const float *a, int64_t rs, int64_t ks, const uint16_t *b,  \
                               int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {        \
        tile_f32_halfb(F16, R, NV, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                           \
    }
#define DEFINE_HALFB(R)                                                                             \
    DEFINE_HALFB_NV(f32b, 0, R, 1) DEFINE_HALFB_NV(f32b, 0, R, 2)                                   \
    DEFINE_HALFB_NV(f32b, 0, R, 3) DEFINE_HALFB_NV(f32b, 0, R, 4)                                   \
    DEFINE_HALFB_NV(f32h, 1, R, 1) DEFINE_HALFB_NV(f32h, 1, R, 2)                                   \
    DEFINE_HALFB_NV(f32h, 1, R, 3) DEFINE_HALFB_NV(f32h, 1, R, 4)
DEFINE_HALFB(1)
DEFINE_HALFB(2)
DEFINE_HALFB(3)
DEFINE_HALFB(4)
DEFINE_HALFB(5)
DEFINE_HALFB(6)

DEFINE_TILES(1)
DEFINE_TILES(2)
DEFINE_TILES(3)
DEFINE_TILES(4)
DEFINE_TILES(5)
DEFINE_TILES(6)

typedef void (*tile_f32_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t, float *,
                            int64_t, int, const float *);
typedef void (*tile_bf16_fn)(int64_t, const uint32_t *, int64_t, int64_t, const uint32_t *, int64_t,
                             float *, int64_t, int, const float *);

#define ROW_OF(T, R) {T##_##R##_1, T##_##R##_2, T##_##R##_3, T##_##R##_4}
static const tile_f32_fn f32_tiles[CPU_MR][CPU_NV_MAX] = {
    ROW_OF(f32, 1), ROW_OF(f32, 2), ROW_OF(f32, 3), ROW_OF(f32, 4), ROW_OF(f32, 5), ROW_OF(f32, 6)};
static const tile_bf16_fn bf16_tiles[CPU_MR][CPU_NV_MAX] = {
    ROW_OF(bf16, 1), ROW_OF(bf16, 2), ROW_OF(bf16, 3), ROW_OF(bf16, 4), ROW_OF(bf16, 5), ROW_OF(bf16, 6)};

typedef void (*tile_f32b_fn)(int64_t, const float *, int64_t, int64_t, const uint16_t *, int64_t, float *,
                             int64_t, int, const float *);
static const tile_f32b_fn f32b_tiles[CPU_MR][CPU_NV_MAX] = {
    ROW_OF(f32b, 1), ROW_OF(f32b, 2), ROW_OF(f32b, 3), ROW_OF(f32b, 4), ROW_OF(f32b, 5), ROW_OF(f32b, 6)};
static const tile_f32b_fn f32h_tiles[CPU_MR][CPU_NV_MAX] = {
    ROW_OF(f32h, 1), ROW_OF(f32h, 2), ROW_OF(f32h, 3), ROW_OF(f32h, 4), ROW_OF(f32h, 5), ROW_OF(f32h, 6)};

static void gemm_f32_bf16b_avx512(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                                  const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                  const float *cs) {
    f32b_tiles[rows - 1][nv - 1](k, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, cs);
}

static void gemm_f32_f16b_avx512(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                                 const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                 const float *cs) {
    f32h_tiles[rows - 1][nv - 1](k, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, cs);
}

static void gemm_f32_avx512(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                            const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    f32_tiles[rows - 1][nv - 1](k, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, cs);
}

static void gemm_bf16_avx512(int rows, int nv, int64_t kpairs, const uint32_t *a, int64_t a_rs,
                             int64_t a_ks, const uint32_t *b, int64_t ldb, float *c, int64_t ldc,
                             int accumulate, const float *cs) {
    bf16_tiles[rows - 1][nv - 1](kpairs, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, cs);
}

/*
 * 2^x for x <= ~0, -inf included. x = n + f with n = round(x), |f| <= 1/2;
 * 2^f by its degree-6 Taylor polynomial (relative error < 1e-7), and the
 * 2^n by scalef. Clamping at -160 makes every result below 2^-149 exactly 0.
 */
FORCE_INLINE __m512 exp2_avx512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-160.0f));
    __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(x, n);
    __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* Lanes i whose visible range [lo[i], hi[i]) holds key j. */
FORCE_INLINE __mmask16 visible_mask(int64_t j, __m512i lo, __m512i hi) {
    __m512i jv = _mm512_set1_epi32((int)j);
    return _mm512_cmpge_epi32_mask(jv, lo) & _mm512_cmplt_epi32_mask(jv, hi);
}

static void softmax_tile_avx512(int64_t nj, int64_t ncols, float *s, int64_t lds, float c,
                                const int32_t *lo, const int32_t *hi,
                                float *m, float *l, float *alpha) {
    const __m512 cv = _mm512_set1_ps(c);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < ncols; i += 16) {
        /* Pass 1: scale, mask, and the new running max. Scaled scores are
         * written back so pass 2 only exponentiates. */
        __m512 mx0 = ninf, mx1 = ninf;
        if (lo) {
            __m512i lov = _mm512_loadu_si512((const void *)(lo + i));
            __m512i hiv = _mm512_loadu_si512((const void *)(hi + i));
            for (int64_t j = 0; j < nj; ++j) {
                float *sp = s + j * lds + i;
                __m512 x = _mm512_mask_mul_ps(ninf, visible_mask(j, lov, hiv), _mm512_loadu_ps(sp), cv);
                _mm512_storeu_ps(sp, x);
                mx0 = _mm512_max_ps(mx0, x);
            }
        } else {
            int64_t j = 0;
            for (; j + 1 < nj; j += 2) { /* two chains hide the max latency */
                float *sp = s + j * lds + i;
                __m512 x0 = _mm512_mul_ps(_mm512_loadu_ps(sp), cv);
                __m512 x1 = _mm512_mul_ps(_mm512_loadu_ps(sp + lds), cv);
                _mm512_storeu_ps(sp, x0);
                _mm512_storeu_ps(sp + lds, x1);
                mx0 = _mm512_max_ps(mx0, x0);
                mx1 = _mm512_max_ps(mx1, x1);
            }
            for (; j < nj; ++j) {
                float *sp = s + j * lds + i;
                __m512 x = _mm512_mul_ps(_mm512_loadu_ps(sp), cv);
                _mm512_storeu_ps(sp, x);
                mx0 = _mm512_max_ps(mx0, x);
            }
        }
        __m512 m_old = _mm512_loadu_ps(m + i);
        __m512 m_new = _mm512_max_ps(m_old, _mm512_max_ps(mx0, mx1));
        /* No visible key yet: exponentiate against 0 so -inf - m never makes NaN. */
        __mmask16 none = _mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ);
        __m512 m_use = _mm512_mask_blend_ps(none, m_new, _mm512_setzero_ps());
        __m512 a = _mm512_mask_blend_ps(none, exp2_avx512(_mm512_sub_ps(m_old, m_use)), _mm512_set1_ps(1.0f));
        /* Pass 2: P = 2^(x - m) and its column sums. */
        __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
        int64_t j = 0;
        if (lo) { /* masked lanes (-inf) give 0 without an exp2 that underflows: underflowing
                   * results cost a microcode assist each on Intel cores */
            for (; j < nj; ++j) {
                float *sp = s + j * lds + i;
                __m512 x = _mm512_loadu_ps(sp);
                __mmask16 seen = _mm512_cmp_ps_mask(x, ninf, _CMP_NEQ_OQ);
                __m512 p0 = _mm512_maskz_mov_ps(seen, exp2_avx512(_mm512_maskz_sub_ps(seen, x, m_use)));
                _mm512_storeu_ps(sp, p0);
                sum0 = _mm512_add_ps(sum0, p0);
            }
        }
        for (; j + 1 < nj; j += 2) {
            float *sp = s + j * lds + i;
            __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(sp), m_use));
            __m512 p1 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(sp + lds), m_use));
            _mm512_storeu_ps(sp, p0);
            _mm512_storeu_ps(sp + lds, p1);
            sum0 = _mm512_add_ps(sum0, p0);
            sum1 = _mm512_add_ps(sum1, p1);
        }
        for (; j < nj; ++j) {
            float *sp = s + j * lds + i;
            __m512 p0 = exp2_avx512(_mm512_sub_ps(_mm512_loadu_ps(sp), m_use));
            _mm512_storeu_ps(sp, p0);
            sum0 = _mm512_add_ps(sum0, p0);
        }
        __m512 lv = _mm512_fmadd_ps(_mm512_loadu_ps(l + i), a, _mm512_add_ps(sum0, sum1));
        _mm512_storeu_ps(l + i, lv);
        _mm512_storeu_ps(m + i, m_new);
        _mm512_storeu_ps(alpha + i, a);
    }
}

static void exp_tile_avx512(int64_t nj, int64_t ncols, const float *s, int64_t lds, float c,
                            const int32_t *lo, const int32_t *hi, const float *lse2,
                            float *p, int64_t ldp) {
    const __m512 cv = _mm512_set1_ps(c);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < ncols; i += 16) {
        __m512 lv = _mm512_loadu_ps(lse2 + i);
        __m512i lov = lo ? _mm512_loadu_si512((const void *)(lo + i)) : _mm512_setzero_si512();
        __m512i hiv = lo ? _mm512_loadu_si512((const void *)(hi + i)) : _mm512_setzero_si512();
        for (int64_t j = 0; j < nj; ++j) {
            __m512 x = _mm512_fmsub_ps(_mm512_loadu_ps(s + j * lds + i), cv, lv);
            /* Masked keys and rows without any key (lse +inf) give 0 without an exp2
             * that underflows: underflowing results cost a microcode assist each. */
            __mmask16 seen = _mm512_cmp_ps_mask(x, ninf, _CMP_NEQ_OQ);
            if (lo) seen &= visible_mask(j, lov, hiv);
            _mm512_storeu_ps(p + j * ldp + i, _mm512_maskz_mov_ps(seen, exp2_avx512(_mm512_maskz_mov_ps(seen, x))));
        }
    }
}


static void widen_f16_avx512(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(h));
    }
}

static void widen_bf16_avx512(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
}

/* The same rounding as fa_f32_to_bf16, 16 values at a time: whole-line
 * stores let many output rows' cache misses overlap (2-byte stores do not). */
static void narrow_bf16_avx512(const float *src, float scale, uint16_t *dst, int64_t n) {
    const __m512 sv = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512i u = _mm512_castps_si512(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, src + i), sv));
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
        /* NaN (magnitude above infinity's bits): keep the top half, made quiet */
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtepi32_epi16(r));
    }
}

static void pair_bf16_avx512(const uint16_t *r0, const uint16_t *r1, uint32_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, r0 + i));
        __m512i hi = r1 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, r1 + i)) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(out + i, k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

static void pair_f32_avx512(const float *p0, const float *p1, uint32_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m256bh b0 = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, p0 + i));
        __m512i lo = _mm512_cvtepu16_epi32((__m256i)b0);
        __m512i hi = _mm512_setzero_si512();
        if (p1) hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, p1 + i)));
        _mm512_mask_storeu_epi32(out + i, k, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

const cpu_kernels cpu_kernels_avx512 = {
    .name = "avx512",
    .gemm_f32 = gemm_f32_avx512,
    .gemm_bf16 = gemm_bf16_avx512,
    .softmax_tile = softmax_tile_avx512,
    .exp_tile = exp_tile_avx512,
    .rowdot = rowdot_avx512,
    .rowdot_bf16 = rowdot_bf16_avx512,
    .gemm_f32_bf16b = gemm_f32_bf16b_avx512,
    .rowdot_f16 = rowdot_f16_avx512,
    .gemm_f32_f16b = gemm_f32_f16b_avx512,
    .widen_f16 = widen_f16_avx512,
    .widen_bf16 = widen_bf16_avx512,
    .pair_bf16 = pair_bf16_avx512,
    .pair_f32 = pair_f32_avx512,
    .narrow_bf16 = narrow_bf16_avx512,
};

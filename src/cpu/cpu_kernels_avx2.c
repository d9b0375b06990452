/*
 * AVX2 + FMA micro-kernels. A 16-column unit is two ymm registers; a
 * micro-tile of up to 6 rows by one unit keeps 12 accumulators live out of
 * the 16 registers, and wider tiles are done one unit at a time.
 */
#include <immintrin.h>
#include <math.h>

#include "convert.h"
#include "cpu_kernels.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

/* Element types of a B operand or of K rows read in place. */
enum { KIND_F32 = 0, KIND_BF16 = 1, KIND_F16 = 2 };

/* Eight elements from element i of a row of the given kind, as f32. */
FORCE_INLINE __m256 load8(const int KIND, const void *p, int64_t i) {
    if (KIND == KIND_F32) return _mm256_loadu_ps((const float *)p + i);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + i));
    if (KIND == KIND_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); /* bf16: the high half of an f32 */
}

FORCE_INLINE float value_at(const int KIND, const void *p, int64_t i) {
    if (KIND == KIND_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return KIND == KIND_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

/* Accumulators are named registers, not an array: GCC keeps an array's
 * elements in memory and stores every one of them after each FMA. */
#define ACC_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5)

FORCE_INLINE void unit_f32(const int KIND, const int R, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                           const void *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 s0 = zero, s1 = zero; /* the rescale of the accumulated C, per column */
    if (accumulate && cs) s0 = _mm256_loadu_ps(cs), s1 = _mm256_loadu_ps(cs + 8);
#define ACC_INIT(r)                                                                                 \
    __m256 c##r##0 = zero, c##r##1 = zero;                                                          \
    if ((r) < R && accumulate) {                                                                    \
        c##r##0 = _mm256_loadu_ps(c + (r) * ldc), c##r##1 = _mm256_loadu_ps(c + (r) * ldc + 8);     \
        if (cs) c##r##0 = _mm256_mul_ps(c##r##0, s0), c##r##1 = _mm256_mul_ps(c##r##1, s1);         \
    }
    ACC_ROWS(ACC_INIT)
    for (int64_t kk = 0; kk < k; ++kk) {
        const __m256 b0 = load8(KIND, b, kk * ldb), b1 = load8(KIND, b, kk * ldb + 8);
        const float *ak = a + kk * a_ks;
#define ACC_STEP(r)                                                                                 \
    if ((r) < R) {                                                                                  \
        const __m256 av = _mm256_broadcast_ss(ak + (r) * a_rs);                                     \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);                                                 \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);                                                 \
    }
        ACC_ROWS(ACC_STEP)
    }
#define ACC_STORE(r)                                                                                \
    if ((r) < R) _mm256_storeu_ps(c + (r) * ldc, c##r##0), _mm256_storeu_ps(c + (r) * ldc + 8, c##r##1);
    ACC_ROWS(ACC_STORE)
}

#define DEFINE_UNIT(T, KIND, R)                                                                     \
    static void T##_##R(int64_t k, const float *a, int64_t rs, int64_t ks, const void *b, int64_t ldb, \
                        float *c, int64_t ldc, int acc, const float *cs) {                          \
        unit_f32(KIND, R, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                  \
    }
#define DEFINE_UNITS(T, KIND)                                                                       \
    DEFINE_UNIT(T, KIND, 1) DEFINE_UNIT(T, KIND, 2) DEFINE_UNIT(T, KIND, 3)                         \
    DEFINE_UNIT(T, KIND, 4) DEFINE_UNIT(T, KIND, 5) DEFINE_UNIT(T, KIND, 6)
DEFINE_UNITS(unit, KIND_F32)
DEFINE_UNITS(unit_bf16b, KIND_BF16)
DEFINE_UNITS(unit_f16b, KIND_F16)

typedef void (*unit_fn)(int64_t, const float *, int64_t, int64_t, const void *, int64_t, float *, int64_t, int,
                        const float *);
static const unit_fn units[CPU_MR] = {unit_1, unit_2, unit_3, unit_4, unit_5, unit_6};
static const unit_fn units_bf16b[CPU_MR] = {unit_bf16b_1, unit_bf16b_2, unit_bf16b_3,
                                            unit_bf16b_4, unit_bf16b_5, unit_bf16b_6};
static const unit_fn units_f16b[CPU_MR] = {unit_f16b_1, unit_f16b_2, unit_f16b_3,
                                           unit_f16b_4, unit_f16b_5, unit_f16b_6};

/* A tile of nv 16-column units, each by the unit kernel of its row count. */
static void run_units(const unit_fn *table, int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                      const void *b, int64_t b_elem, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    for (int v = 0; v < nv; ++v)
        table[rows - 1](k, a, a_rs, a_ks, (const char *)b + 16 * v * b_elem, ldb, c + 16 * v, ldc, accumulate,
                        cs ? cs + 16 * v : NULL);
}

static void gemm_f32_avx2(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                          const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    run_units(units, rows, nv, k, a, a_rs, a_ks, b, 4, ldb, c, ldc, accumulate, cs);
}

static void gemm_f32_bf16b_avx2(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                                const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    run_units(units_bf16b, rows, nv, k, a, a_rs, a_ks, b, 2, ldb, c, ldc, accumulate, cs);
}

static void gemm_f32_f16b_avx2(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                               const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    run_units(units_f16b, rows, nv, k, a, a_rs, a_ks, b, 2, ldb, c, ldc, accumulate, cs);
}

FORCE_INLINE float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/*
 * Few-row scores (decode), s[j*lds + r]: the head dim along the lanes, each
 * chunk of a key row loaded once for all R rows; with R <= 4 two keys a step
 * (2R accumulators). A tail of d % 8 elements is done in scalar code.
 */
#define ROWS8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
FORCE_INLINE void rowdot_rows(const int KIND, const int R, int64_t nj, int64_t d, const float *q, int64_t ldq,
                              const void *kv, int64_t ldk, float *s, int64_t lds) {
    const int KB = R <= 4 ? 2 : 1;
    const int64_t es = KIND == KIND_F32 ? 4 : 2, dv = d & ~(int64_t)7;
    for (int64_t j = 0; j < nj; j += KB) {
        const int two = KB == 2 && j + 1 < nj;
        const void *k0 = (const char *)kv + j * ldk * es, *k1 = two ? (const char *)k0 + ldk * es : k0;
#define RD_INIT(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
        ROWS8(RD_INIT)
        for (int64_t dd = 0; dd < dv; dd += 8) {
            const __m256 x0 = load8(KIND, k0, dd), x1 = KB == 2 ? load8(KIND, k1, dd) : x0;
#define RD_STEP(r)                                                                                  \
    if ((r) < R) {                                                                                  \
        const __m256 qv = _mm256_loadu_ps(q + (r) * ldq + dd);                                      \
        a##r##0 = _mm256_fmadd_ps(qv, x0, a##r##0);                                                 \
        if (KB == 2) a##r##1 = _mm256_fmadd_ps(qv, x1, a##r##1);                                    \
    }
            ROWS8(RD_STEP)
        }
#define RD_OUT(r)                                                                                   \
    if ((r) < R) {                                                                                  \
        float t0 = hsum8(a##r##0), t1 = hsum8(a##r##1);                                             \
        for (int64_t dd = dv; dd < d; ++dd) {                                                       \
            t0 += q[(r) * ldq + dd] * value_at(KIND, k0, dd);                                       \
            t1 += q[(r) * ldq + dd] * value_at(KIND, k1, dd);                                       \
        }                                                                                           \
        s[j * lds + (r)] = t0;                                                                      \
        if (two) s[(j + 1) * lds + (r)] = t1;                                                       \
    }
        ROWS8(RD_OUT)
    }
}

FORCE_INLINE void rowdot_any(const int KIND, int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                             const void *kv, int64_t ldk, float *s, int64_t lds) {
    for (int r0 = 0; r0 < rows; r0 += 8) { /* compile-time row counts keep the accumulators in registers */
        const float *qr = q + r0 * ldq;
        float *sr = s + r0;
        switch (rows - r0 < 8 ? rows - r0 : 8) {
        case 1: rowdot_rows(KIND, 1, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 2: rowdot_rows(KIND, 2, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 3: rowdot_rows(KIND, 3, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 4: rowdot_rows(KIND, 4, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 5: rowdot_rows(KIND, 5, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 6: rowdot_rows(KIND, 6, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        case 7: rowdot_rows(KIND, 7, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        default: rowdot_rows(KIND, 8, nj, d, qr, ldq, kv, ldk, sr, lds); break;
        }
    }
}

static void rowdot_avx2(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const float *k, int64_t ldk,
                        float *s, int64_t lds) {
    rowdot_any(KIND_F32, rows, nj, d, q, ldq, k, ldk, s, lds);
}

static void rowdot_bf16_avx2(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                             int64_t ldk, float *s, int64_t lds) {
    rowdot_any(KIND_BF16, rows, nj, d, q, ldq, k, ldk, s, lds);
}

static void rowdot_f16_avx2(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                            int64_t ldk, float *s, int64_t lds) {
    rowdot_any(KIND_F16, rows, nj, d, q, ldq, k, ldk, s, lds);
}

/*
 * 2^x for x <= ~0 or -inf: x = n + f, |f| <= 1/2, degree-6 polynomial for 2^f
 * and 2^n built in the exponent field; anything below 2^-126 becomes 0.
 */
FORCE_INLINE __m256 exp2_avx2(__m256 x) {
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, n);
    __m256 p = _mm256_set1_ps(1.5403530393381606e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Lanes whose visible range [lo, hi) holds key j, as an all-ones mask. */
FORCE_INLINE __m256 visible_avx2(int64_t j, __m256i lo, __m256i hi) {
    __m256i jv = _mm256_set1_epi32((int)j);
    __m256i ge = _mm256_cmpgt_epi32(_mm256_add_epi32(jv, _mm256_set1_epi32(1)), lo); /* j >= lo */
    __m256i lt = _mm256_cmpgt_epi32(hi, jv);                                         /* j < hi */
    return _mm256_castsi256_ps(_mm256_and_si256(ge, lt));
}

static void softmax_tile_avx2(int64_t nj, int64_t ncols, float *s, int64_t lds, float c,
                              const int32_t *lo, const int32_t *hi,
                              float *m, float *l, float *alpha) {
    const __m256 cv = _mm256_set1_ps(c), ninf = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < ncols; i += 8) {
        __m256i lov = lo ? _mm256_loadu_si256((const __m256i *)(lo + i)) : _mm256_setzero_si256();
        __m256i hiv = lo ? _mm256_loadu_si256((const __m256i *)(hi + i)) : _mm256_setzero_si256();
        __m256 mx = ninf;
        for (int64_t j = 0; j < nj; ++j) { /* pass 1: scale, mask, running max */
            float *sp = s + j * lds + i;
            __m256 x = _mm256_mul_ps(_mm256_loadu_ps(sp), cv);
            if (lo) x = _mm256_blendv_ps(ninf, x, visible_avx2(j, lov, hiv));
            _mm256_storeu_ps(sp, x);
            mx = _mm256_max_ps(mx, x);
        }
        __m256 m_old = _mm256_loadu_ps(m + i);
        __m256 m_new = _mm256_max_ps(m_old, mx);
        __m256 none = _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ); /* no visible key yet */
        __m256 m_use = _mm256_andnot_ps(none, m_new);
        __m256 a = _mm256_blendv_ps(exp2_avx2(_mm256_sub_ps(m_old, m_use)), _mm256_set1_ps(1.0f), none);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < nj; ++j) { /* pass 2: P and its column sums */
            float *sp = s + j * lds + i;
            __m256 pv = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(sp), m_use));
            _mm256_storeu_ps(sp, pv);
            sum = _mm256_add_ps(sum, pv);
        }
        _mm256_storeu_ps(l + i, _mm256_fmadd_ps(_mm256_loadu_ps(l + i), a, sum));
        _mm256_storeu_ps(m + i, m_new);
        _mm256_storeu_ps(alpha + i, a);
    }
}

static void exp_tile_avx2(int64_t nj, int64_t ncols, const float *s, int64_t lds, float c,
                          const int32_t *lo, const int32_t *hi, const float *lse2, float *p, int64_t ldp) {
    const __m256 cv = _mm256_set1_ps(c), ninf = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < ncols; i += 8) {
        __m256 lv = _mm256_loadu_ps(lse2 + i);
        __m256i lov = lo ? _mm256_loadu_si256((const __m256i *)(lo + i)) : _mm256_setzero_si256();
        __m256i hiv = lo ? _mm256_loadu_si256((const __m256i *)(hi + i)) : _mm256_setzero_si256();
        for (int64_t j = 0; j < nj; ++j) {
            __m256 x = _mm256_fmsub_ps(_mm256_loadu_ps(s + j * lds + i), cv, lv);
            if (lo) x = _mm256_blendv_ps(ninf, x, visible_avx2(j, lov, hiv));
            _mm256_storeu_ps(p + j * ldp + i, exp2_avx2(x));
        }
    }
}

/* F16C: eight halves at a time. */
static void widen_f16_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    if (i < n) cpu_widen_f16_generic(src + i, dst + i, n - i);
}

/* bf16 rows to f32, eight at a time: a bf16 is the high half of its f32. */
static void widen_bf16_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load8(KIND_BF16, src, i));
    if (i < n) cpu_widen_bf16_generic(src + i, dst + i, n - i);
}

/* Output rows: the rounding of fa_f32_to_bf16 (to nearest even, NaN kept
 * quiet), eight values at a time. */
static void narrow_bf16_avx2(const float *src, float scale, uint16_t *dst, int64_t n) {
    const __m256 sv = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(src + i), sv));
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
        /* NaN (magnitude above infinity's bits): keep the top half, made quiet */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
        r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
        /* 32 -> 16 bits (every value fits): pack within the 128-bit lanes, then gather the two halves */
        __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_castsi256_si128(packed));
    }
    if (i < n) cpu_narrow_bf16_generic(src + i, scale, dst + i, n - i);
}

const cpu_kernels cpu_kernels_avx2 = {
    .name = "avx2",
    .gemm_f32 = gemm_f32_avx2,
    .gemm_bf16 = 0, /* bf16 storage is widened to f32 */
    .softmax_tile = softmax_tile_avx2,
    .exp_tile = exp_tile_avx2,
    .rowdot = rowdot_avx2,
    .rowdot_bf16 = rowdot_bf16_avx2,
    .rowdot_f16 = rowdot_f16_avx2,
    .gemm_f32_bf16b = gemm_f32_bf16b_avx2,
    .gemm_f32_f16b = gemm_f32_f16b_avx2,
    .widen_f16 = widen_f16_avx2,
    .widen_bf16 = widen_bf16_avx2,
    .pair_bf16 = cpu_pair_bf16_generic,
    .pair_f32 = cpu_pair_f32_generic,
    .narrow_bf16 = narrow_bf16_avx2,
};

/*
 * AVX2 + FMA micro-kernels. A 16-column unit is two ymm registers; a
 * micro-tile of up to 6 rows by one unit keeps 12 accumulators live out of
 * the 16 registers, and wider tiles are done one unit at a time.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu_kernels.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

/* Accumulators are named registers, not an array: GCC keeps an array's
 * elements in memory and stores every one of them after each FMA. */
#define ACC_ROWS(M) M(0) M(1) M(2) M(3) M(4) M(5)

FORCE_INLINE void unit_f32(const int R, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                           const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
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
        const __m256 b0 = _mm256_loadu_ps(b + kk * ldb), b1 = _mm256_loadu_ps(b + kk * ldb + 8);
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

#define DEFINE_UNIT(R)                                                                              \
    static void unit_##R(int64_t k, const float *a, int64_t rs, int64_t ks, const float *b,         \
                         int64_t ldb, float *c, int64_t ldc, int acc, const float *cs) {            \
        unit_f32(R, k, a, rs, ks, b, ldb, c, ldc, acc, cs);                                        \
    }
DEFINE_UNIT(1)
DEFINE_UNIT(2)
DEFINE_UNIT(3)
DEFINE_UNIT(4)
DEFINE_UNIT(5)
DEFINE_UNIT(6)

typedef void (*unit_fn)(int64_t, const float *, int64_t, int64_t, const float *, int64_t, float *, int64_t, int,
                        const float *);
static const unit_fn units[CPU_MR] = {unit_1, unit_2, unit_3, unit_4, unit_5, unit_6};

static void gemm_f32_avx2(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                          const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    for (int v = 0; v < nv; ++v)
        units[rows - 1](k, a, a_rs, a_ks, b + 16 * v, ldb, c + 16 * v, ldc, accumulate, cs ? cs + 16 * v : NULL);
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

const cpu_kernels cpu_kernels_avx2 = {
    .name = "avx2",
    .gemm_f32 = gemm_f32_avx2,
    .gemm_bf16 = 0, /* bf16 storage is widened to f32 */
    .softmax_tile = softmax_tile_avx2,
    .exp_tile = exp_tile_avx2,
    .rowdot = cpu_rowdot_generic,
    .rowdot_bf16 = cpu_rowdot_bf16_generic,
    .gemm_f32_bf16b = cpu_gemm_f32_bf16b_generic,
    .widen_f16 = widen_f16_avx2,
    .widen_bf16 = cpu_widen_bf16_generic,
    .pair_bf16 = cpu_pair_bf16_generic,
    .pair_f32 = cpu_pair_f32_generic,
    .narrow_bf16 = cpu_narrow_bf16_generic,
};

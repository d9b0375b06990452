/*
 * AVX2 + FMA micro-kernels. A 16-column unit is two ymm registers; a
 * micro-tile of up to 6 rows by one unit keeps 12 accumulators live out of
 * the 16 registers, and wider tiles are done one unit at a time.
 */
#include <immintrin.h>

#include "cpu_kernels.h"

#define FORCE_INLINE static inline __attribute__((always_inline))

FORCE_INLINE void unit_f32(const int R, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                           const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *cs) {
    __m256 acc[CPU_MR][2];
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < 2; ++v) {
            acc[r][v] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8 * v) : _mm256_setzero_ps();
            if (accumulate && cs) acc[r][v] = _mm256_mul_ps(acc[r][v], _mm256_loadu_ps(cs + 8 * v));
        }
    for (int64_t kk = 0; kk < k; ++kk) {
        __m256 b0 = _mm256_loadu_ps(b + kk * ldb), b1 = _mm256_loadu_ps(b + kk * ldb + 8);
        const float *ak = a + kk * a_ks;
        for (int r = 0; r < R; ++r) {
            __m256 av = _mm256_broadcast_ss(ak + r * a_rs);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int v = 0; v < 2; ++v) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
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
    .softmax_tile = cpu_softmax_tile_generic,
    .exp_tile = cpu_exp_tile_generic,
    .rowdot = cpu_rowdot_generic,
    .widen_f16 = widen_f16_avx2,
    .widen_bf16 = cpu_widen_bf16_generic,
    .pair_bf16 = cpu_pair_bf16_generic,
    .pair_f32 = cpu_pair_f32_generic,
};

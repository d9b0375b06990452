/*
 * The generic macro loops over micro-tiles, and the run-time choice of the
 * micro-kernel set.
 */
#include "cpu_kernels.h"
#include "cpu_probe.h"

void cpu_gemm_f32(const cpu_kernels *kr, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t a_rs, int64_t a_ks,
                  const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale) {
    const int64_t chunk = CPU_NV_MAX * CPU_LANES;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int nv = (int)((n - c0 < chunk ? n - c0 : chunk) / CPU_LANES);
        for (int64_t r0 = 0; r0 < m; r0 += CPU_MR) {
            int rows = (int)(m - r0 < CPU_MR ? m - r0 : CPU_MR);
            kr->gemm_f32(rows, nv, k, a + r0 * a_rs, a_rs, a_ks, b + c0, ldb, c + r0 * ldc + c0, ldc,
                         accumulate, c_scale ? c_scale + c0 : NULL);
        }
    }
}

void cpu_gemm_bf16(const cpu_kernels *kr, int64_t m, int64_t n, int64_t kpairs,
                   const uint32_t *a, int64_t a_rs, int64_t a_ks,
                   const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale) {
    const int64_t chunk = CPU_NV_MAX * CPU_LANES;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int nv = (int)((n - c0 < chunk ? n - c0 : chunk) / CPU_LANES);
        for (int64_t r0 = 0; r0 < m; r0 += CPU_MR) {
            int rows = (int)(m - r0 < CPU_MR ? m - r0 : CPU_MR);
            kr->gemm_bf16(rows, nv, kpairs, a + r0 * a_rs, a_rs, a_ks, b + c0, ldb, c + r0 * ldc + c0,
                          ldc, accumulate, c_scale ? c_scale + c0 : NULL);
        }
    }
}

#if defined(__x86_64__) || defined(_M_X64)
/* AVX-512F without AVX512_BF16: the f32 kernels, bf16 storage widened. */
static cpu_kernels avx512_no_bf16;
#endif

const cpu_kernels *cpu_kernels_select(void) {
#if defined(__x86_64__) || defined(_M_X64)
    const cpu_features *f = cpu_detect_features();
    if (f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->fma && f->f16c) {
        if (f->avx512bf16) return &cpu_kernels_avx512;
        avx512_no_bf16 = cpu_kernels_avx512;
        avx512_no_bf16.gemm_bf16 = 0;
        return &avx512_no_bf16;
    }
    if (f->avx2 && f->fma && f->f16c) return &cpu_kernels_avx2;
#endif
    return &cpu_kernels_generic;
}

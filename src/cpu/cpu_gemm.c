/*
 * The generic macro loops over micro-tiles, and the run-time choice of the
 * micro-kernel set: the widest the CPU has, or the one named by the
 * environment variable FA_CPU_KERNELS when the CPU can run it, for testing
 * and comparison: generic, avx2, avx512 (f32 products only: bf16 storage
 * widened) or avx512bf16 (bf16 storage multiplied by vdpbf16ps).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

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

void cpu_gemm_f32_halfb(cpu_gemm_f32_halfb_fn kernel, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t a_rs, int64_t a_ks,
                        const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale) {
    const int64_t chunk = CPU_NV_MAX * CPU_LANES;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int nv = (int)((n - c0 < chunk ? n - c0 : chunk) / CPU_LANES);
        for (int64_t r0 = 0; r0 < m; r0 += CPU_MR) {
            int rows = (int)(m - r0 < CPU_MR ? m - r0 : CPU_MR);
            kernel(rows, nv, k, a + r0 * a_rs, a_rs, a_ks, b + c0, ldb, c + r0 * ldc + c0, ldc,
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
#include <time.h>

/* AVX-512 with bf16 storage widened to f32 (no AVX512_BF16, or a slow one). */
static cpu_kernels avx512_f32_only;

static const cpu_kernels *avx512_without_bf16_products(void) {
    avx512_f32_only = cpu_kernels_avx512;
    avx512_f32_only.gemm_bf16 = 0;
    return &avx512_f32_only;
}

static int has_avx512(const cpu_features *f) {
    return f->avx512f && f->avx512bw && f->avx512dq && f->avx512vl && f->fma && f->f16c;
}

static double seconds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * vdpbf16ps does twice the work of an FMA per instruction, but some cores
 * issue it at a fraction of the FMA rate. Time both for about a millisecond
 * (best of three) and use the bf16 kernels only where they are clearly faster.
 */
static int bf16_dot_is_faster(void) {
    double best_fma = 1e30, best_dp = 1e30, flops_fma = 0.0, flops_dp = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
        double t0 = seconds_now();
        flops_fma = cpu_probe_fma_avx512(20000);
        double t1 = seconds_now();
        flops_dp = cpu_probe_dpbf16_avx512(20000);
        double t2 = seconds_now();
        if (t1 - t0 < best_fma) best_fma = t1 - t0;
        if (t2 - t1 < best_dp) best_dp = t2 - t1;
    }
    return flops_dp / best_dp > 1.25 * (flops_fma / best_fma);
}
#endif

static const cpu_kernels *choose(void) {
#if defined(__x86_64__) || defined(_M_X64)
    const cpu_features *f = cpu_detect_features();
    if (has_avx512(f)) return f->avx512bf16 && bf16_dot_is_faster() ? &cpu_kernels_avx512 : avx512_without_bf16_products();
    if (f->avx2 && f->fma && f->f16c) return &cpu_kernels_avx2;
#endif
    return &cpu_kernels_generic;
}

/* The set FA_CPU_KERNELS names, or NULL when the name is unknown or this CPU cannot run it. */
static const cpu_kernels *named_set(const char *name) {
    if (strcmp(name, "generic") == 0) return &cpu_kernels_generic;
#if defined(__x86_64__) || defined(_M_X64)
    const cpu_features *f = cpu_detect_features();
    if (strcmp(name, "avx2") == 0 && f->avx2 && f->fma && f->f16c) return &cpu_kernels_avx2;
    if (strcmp(name, "avx512") == 0 && has_avx512(f)) return avx512_without_bf16_products();
    if (strcmp(name, "avx512bf16") == 0 && has_avx512(f) && f->avx512bf16) return &cpu_kernels_avx512;
#endif
    return NULL;
}

int cpu_kernels_runnable(const char *name) {
    return named_set(name) != NULL;
}

static const cpu_kernels *_Atomic chosen;

const cpu_kernels *cpu_kernels_select(void) {
    const cpu_kernels *k = chosen;
    if (!k) { /* the first call decides; a racing call decides the same way */
        const char *force = getenv("FA_CPU_KERNELS");
        k = force ? named_set(force) : NULL;
        if (!k) k = choose(); /* no name, or one this CPU cannot run */
        chosen = k;
    }
    return k;
}

/*
 * What the Hopper harnesses (sm90_selftest.cu, sm90_ab.cu, sm90_l2_rate.cu) share: the
 * library's error sink reduced to a print, a CUDA status check, and device-
 * side standard normal inputs.
 */
#ifndef FA_SM90_HARNESS_CUH
#define FA_SM90_HARNESS_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* The library's error sink, reduced to a print for a harness. */
fa_status fa_set_error(fa_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fa_set_error(%d): ", (int)s);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return s;
}

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                             \
        }                                                                                        \
    } while (0)

/* Timing inputs: standard normal values drawn on the device (a hash of the
 * element index and a seed, Box-Muller), so large problems need no host work;
 * fp8 = 1: e4m3 bytes, else bf16. */
__global__ void fill_normal(void *dst, size_t n, uint32_t seed, int fp8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32);
        h ^= h >> 31;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
        float u1 = ((uint32_t)h >> 8) * (1.0f / 16777216.0f) + 1e-7f, u2 = (uint32_t)(h >> 40) * (1.0f / 16777216.0f);
        float x = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        if (fp8)
            ((__nv_fp8_e4m3 *)dst)[i] = __nv_fp8_e4m3(x);
        else
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16(x);
    }
}

static inline void fill_normal_async(void *dst, size_t n, uint32_t seed, int fp8) {
    fill_normal<<<1024, 256>>>(dst, n, seed, fp8);
    CK(cudaGetLastError());
}

/* A timing cell's problem: q, k, v and out dense (B, S, H, D), as many kv
 * heads as query heads, the default scale, causal (bottom-right) or not. */
static inline fa_problem grid_problem(fa_dtype dtype, void *q, void *k, void *v, void *out, int B, int S, int H, int D,
                               int causal) {
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = dtype;
    p.B = B;
    p.Sq = p.Sk = S;
    p.Hq = p.Hk = H;
    p.D = p.Dv = D;
    const int64_t ss = (int64_t)H * D, sb = (int64_t)S * ss;
    p.q = {q, sb, ss, D};
    p.k = {k, sb, ss, D};
    p.v = {v, sb, ss, D};
    p.out = {out, sb, ss, D};
    p.scale = 1.0f / sqrtf((float)D);
    p.window_left = FA_UNBOUNDED;
    p.window_right = causal ? 0 : FA_UNBOUNDED;
    p.has_mask = causal;
    return p;
}

#endif /* FA_SM90_HARNESS_CUH */

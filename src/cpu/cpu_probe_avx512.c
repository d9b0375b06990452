/*
 * Peak-rate loops for the probe: 24 independent accumulator chains, enough
 * to keep both 512-bit pipes busy through the instruction latency
 * (4 cycles for FMA, about 6 for vdpbf16ps).
 */
#include <immintrin.h>

#include "cpu_probe.h"

#define CHAINS 24
/* Chains are named registers (an array would live in memory). */
#define X8(M, o) M(o + 0) M(o + 1) M(o + 2) M(o + 3) M(o + 4) M(o + 5) M(o + 6) M(o + 7)
#define X24(M) X8(M, 0) X8(M, 8) X8(M, 16)

double cpu_probe_fma_avx512(long iters) {
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; ++it) {
#define FMA_STEP(c) acc[c] = _mm512_fmadd_ps(acc[c], x, y);
        X24(FMA_STEP)
    }
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; ++c) s = _mm512_add_ps(s, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(s); /* keeps the loop alive */
    (void)sink;
    return (double)iters * CHAINS * 16 * 2;
}

double cpu_probe_dpbf16_avx512(long iters) {
    __m512 acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
    const __m512i a = _mm512_set1_epi32(0x3F803F80), b = _mm512_set1_epi32(0x33803380); /* 1.0, ~6e-8 */
    for (long it = 0; it < iters; ++it) {
#define DP_STEP(c) acc[c] = _mm512_dpbf16_ps(acc[c], (__m512bh)a, (__m512bh)b);
        X24(DP_STEP)
    }
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; ++c) s = _mm512_add_ps(s, acc[c]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)iters * CHAINS * 16 * 4; /* 16 lanes, 2 products and 2 adds each */
}

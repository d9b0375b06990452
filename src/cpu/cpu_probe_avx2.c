/* Peak-rate loop for the probe on AVX2 + FMA machines (12 chains of 8 lanes). */
#include <immintrin.h>

#include "cpu_probe.h"

#define CHAINS 12

double cpu_probe_fma_avx2(long iters) {
    __m256 acc[CHAINS];
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_set1_ps((float)c);
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; ++it)
        for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_fmadd_ps(acc[c], x, y);
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS; ++c) s = _mm256_add_ps(s, acc[c]);
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    volatile float sink = lanes[0]; /* keeps the loop alive */
    (void)sink;
    return (double)iters * CHAINS * 8 * 2;
}

/*
 * The per-query-row statistics every backward needs before its main kernel,
 * shared by the portable and the Hopper preprocess kernels (which differ only
 * in where they store them): Delta = rowsum(dO * O) and lse in log2 units.
 */
#ifndef FA_CUDA_BWD_ROWS_CUH
#define FA_CUDA_BWD_ROWS_CUH

#include <math.h>
#include <stdint.h>

#include "elem.cuh"
#include "problem.h"

/* One warp, row i of query head h of sequence b (inside the sequence): lane 0
 * writes Delta to *delta and lse * log2(e) to *lse2 (+inf for a row that sees
 * no key, which makes its every P 0). vec: Dv % 8 == 0 and the out / dout
 * rows on 16 bytes, so each lane reads eight columns at a time. */
template <typename T>
__device__ __forceinline__ void bwd_row_stats(const fa_problem &p, int64_t b, int64_t h, int64_t i, int lane, int vec,
                                              float *lse2, float *delta) {
    const T *o = (const T *)p.out.data + fa_q_offset(&p, &p.out, b, i, h);
    const T *dout = (const T *)p.dout.data + fa_q_offset(&p, &p.dout, b, i, h);
    float acc = 0.0f;
    if (vec) {
        for (int d = lane * 8; d < p.Dv; d += 256) {
            union { uint4 u; T e[8]; } x, y;
            x.u = *(const uint4 *)(o + d);
            y.u = *(const uint4 *)(dout + d);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += to_f32(x.e[e]) * to_f32(y.e[e]);
        }
    } else {
        for (int d = lane; d < p.Dv; d += 32) acc += to_f32(o[d]) * to_f32(dout[d]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
        const float lse = p.lse[fa_lse_offset(&p, b, h, i)];
        *delta = acc;
        *lse2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
    }
}

#endif /* FA_CUDA_BWD_ROWS_CUH */

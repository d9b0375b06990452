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

/* Row i of query head h of sequence b, read by a group of `lanes` lanes (a
 * power of two up to 32, aligned within the warp; sub: this lane's place in
 * it): this lane's part of Delta = rowsum(dO * O). vec: Dv % 8 == 0 and the
 * out / dout rows on 16 bytes, so each lane reads eight columns at a time. */
template <typename T>
__device__ __forceinline__ float bwd_row_dot(const fa_problem &p, int64_t b, int64_t h, int64_t i, int sub, int lanes,
                                             int vec) {
    const T *o = (const T *)p.out.data + fa_q_offset(&p, &p.out, b, i, h);
    const T *dout = (const T *)p.dout.data + fa_q_offset(&p, &p.dout, b, i, h);
    float acc = 0.0f;
    if (vec) {
        for (int d = sub * 8; d < p.Dv; d += lanes * 8) {
            union { uint4 u; T e[8]; } x, y;
            x.u = *(const uint4 *)(o + d);
            y.u = *(const uint4 *)(dout + d);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc += to_f32(x.e[e]) * to_f32(y.e[e]);
        }
    } else {
        for (int d = sub; d < p.Dv; d += lanes) acc += to_f32(o[d]) * to_f32(dout[d]);
    }
    return acc;
}

/* The sum over each aligned group of `lanes` lanes; every lane of the warp
 * takes part. */
__device__ __forceinline__ float bwd_group_sum(float acc, int lanes) {
    for (int off = lanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    return acc;
}

/* Delta and lse * log2(e) of row i (+inf for a row that sees no key, which
 * makes its every P 0). */
__device__ __forceinline__ void bwd_row_store(const fa_problem &p, int64_t b, int64_t h, int64_t i, float dot,
                                              float *lse2, float *delta) {
    const float lse = p.lse[fa_lse_offset(&p, b, h, i)];
    *delta = dot;
    *lse2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

/* One warp, row i of query head h of sequence b (inside the sequence): lane 0
 * writes Delta to *delta and lse * log2(e) to *lse2. */
template <typename T>
__device__ __forceinline__ void bwd_row_stats(const fa_problem &p, int64_t b, int64_t h, int64_t i, int lane, int vec,
                                              float *lse2, float *delta) {
    const float dot = bwd_group_sum(bwd_row_dot<T>(p, b, h, i, lane, 32, vec), 32);
    if (lane == 0) bwd_row_store(p, b, h, i, dot, lse2, delta);
}

#endif /* FA_CUDA_BWD_ROWS_CUH */

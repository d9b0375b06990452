/*
 * Shared-memory tiles for the sm80 kernels: rows of HD 16-bit elements whose
 * 16-byte chunks are XOR-swizzled by the row index, so that the eight row
 * addresses of every ldmatrix hit eight different bank groups.
 */
#ifndef FA_SM80_TILE_CUH
#define FA_SM80_TILE_CUH

#include "problem.h"
#include "ptx.cuh"

/* Element offset of (row r, 16-byte chunk c) in a swizzled tile of HD columns. */
template <int HD>
__device__ __forceinline__ int tile_chunk(int r, int c) {
    static_assert(HD >= 64, "the swizzle needs at least eight chunks per row");
    return r * HD + ((c ^ (r & 7)) << 3);
}

/*
 * Load rows [r0, r0 + ROWS) of one head of a q-side (q, out, dout) or key-side
 * (k, v) view into a swizzled tile. Rows at or past nvalid and columns at or
 * past ncols become zero, so padded rows and head-dim padding contribute
 * nothing (and never a NaN) to the products. aligned: every row starts on 16
 * bytes and ncols % 8 == 0, so cp.async can move whole chunks; otherwise the
 * elements are loaded one by one (synchronously).
 */
template <typename T, int HD, int ROWS, int NT>
__device__ __forceinline__ void tile_load(T *tile, const fa_problem &p, const fa_view &v, bool key_side,
                                          int64_t b, int64_t r0, int64_t h, int64_t nvalid, int ncols,
                                          bool aligned) {
    constexpr int CH = HD / 8; /* chunks per row */
    const T *base = (const T *)v.data;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
        const int r = idx / CH, c = idx % CH;
        T *dst = tile + tile_chunk<HD>(r, c);
        const bool row_ok = r < nvalid;
        const T *src = base;
        if (row_ok) src = base + (key_side ? fa_k_offset(&p, &v, b, r0 + r, h) : fa_q_offset(&p, &v, b, r0 + r, h)) + c * 8;
        if (aligned) {
            const bool ok = row_ok && c * 8 < ncols;
            cp_async_16(smem_addr(dst), ok ? src : base, ok ? 16 : 0);
        } else {
            union { uint4 u; T e[8]; } chunk;
#pragma unroll
            for (int e = 0; e < 8; ++e) chunk.e[e] = (row_ok && c * 8 + e < ncols) ? src[e] : from_f32<T>(0.0f);
            *(uint4 *)dst = chunk.u;
        }
    }
}

#endif /* FA_SM80_TILE_CUH */

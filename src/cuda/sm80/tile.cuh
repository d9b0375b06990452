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

/* Byte offset of the 16-byte chunk pair (2 * kk + bit, kk compile-time) in a
 * swizzled row, for a lane whose row is congruent to r7 mod 8: because 2 * kk
 * and bit share no bits, (2kk + bit) ^ r7 == 2kk ^ (bit ^ r7), so the lane's
 * part x = (bit ^ r7) << 4 is computed once and each access is one XOR. */
__device__ __forceinline__ uint32_t swz(int kk, uint32_t x) { return (uint32_t)(kk * 32) ^ x; }

/* Offset of key j in a paged cache, out of line: the block-table lookup and
 * the 64-bit division by the block size stay out of the hot loops. */
static __device__ __noinline__ int64_t paged_key_offset(const fa_problem &p, const fa_view &v, int64_t b, int64_t j,
                                                        int64_t h) {
    return fa_k_offset(&p, &v, b, j, h);
}

/* Element-by-element fallback of tile_load for rows that do not start on 16
 * bytes (odd head dims or strides); kept out of line so the fast path stays small. */
template <typename T, int HD, int ROWS, int NT>
__device__ __noinline__ void tile_load_sync(T *tile, const fa_problem &p, const fa_view &v, bool key_side, int64_t b,
                                            int64_t r0, int64_t h, int64_t nvalid, int ncols) {
    constexpr int CH = HD / 8;
    const T *base = (const T *)v.data;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
        const int r = idx / CH, c = idx % CH;
        const bool row_ok = r < nvalid;
        const T *src = base;
        if (row_ok) src = base + (key_side ? fa_k_offset(&p, &v, b, r0 + r, h) : fa_q_offset(&p, &v, b, r0 + r, h)) + c * 8;
        union { uint4 u; unsigned short e[8]; } chunk;
#pragma unroll
        for (int e = 0; e < 8; ++e) chunk.e[e] = (row_ok && c * 8 + e < ncols) ? ((const unsigned short *)src)[e] : 0;
        *(uint4 *)(tile + tile_chunk<HD>(r, c)) = chunk.u;
    }
}

/*
 * Load rows [r0, r0 + ROWS) of one head of a q-side (q, out, dout) or key-side
 * (k, v) view into a swizzled tile. Rows at or past nvalid and columns at or
 * past ncols become zero, so padded rows and head-dim padding contribute
 * nothing (and never a NaN) to the products. aligned: every row starts on 16
 * bytes and ncols % 8 == 0, so cp.async moves whole chunks (each thread keeps
 * one chunk column and walks rows by a fixed stride); otherwise the elements
 * are loaded one by one (synchronously).
 */
template <typename T, int HD, int ROWS, int NT>
__device__ __forceinline__ void tile_load(T *tile, const fa_problem &p, const fa_view &v, bool key_side,
                                          int64_t b, int64_t r0, int64_t h, int64_t nvalid, int ncols,
                                          bool aligned) {
    constexpr int CH = HD / 8, STEP = NT / CH, PASSES = ROWS / STEP;
    static_assert(NT % CH == 0 && ROWS % STEP == 0, "tile shape");
    if (!aligned) {
        tile_load_sync<T, HD, ROWS, NT>(tile, p, v, key_side, b, r0, h, nvalid, ncols);
        return;
    }
    const int c = threadIdx.x % CH, rr = threadIdx.x / CH;
    const T *base = (const T *)v.data;
    const bool paged = key_side && p.block_table != NULL; /* rows are not evenly spaced */
    int64_t off = 0;
    if (!paged) off = (key_side ? fa_k_offset(&p, &v, b, r0 + rr, h) : fa_q_offset(&p, &v, b, r0 + rr, h)) + c * 8;
    const uint32_t dst = smem_addr(tile + tile_chunk<HD>(rr, c));
#pragma unroll
    for (int k = 0; k < PASSES; ++k) {
        const int r = rr + k * STEP;
        const bool ok = r < nvalid && c * 8 < ncols;
        int64_t o = off + (int64_t)k * STEP * v.ss;
        if (paged && ok) o = paged_key_offset(p, v, b, r0 + r, h) + c * 8;
        /* STEP a multiple of 8 rows: the swizzle of row r equals row rr's, so the
         * address only moves by whole rows; a one-warp CTA (STEP < 8) swizzles each row */
        const uint32_t d = STEP % 8 == 0 ? dst + k * STEP * HD * (uint32_t)sizeof(T)
                                         : smem_addr(tile + tile_chunk<HD>(r, c));
        cp_async_16(d, ok ? base + o : base, ok ? 16 : 0);
    }
}

/*
 * tile_load for keys of a paged cache, for kernels with few threads (each
 * thread then walks many rows, PASSES = ROWS * HD / 8 / NT). Instead of one
 * out-of-line lookup per row, whose table load each waits for in turn, a
 * thread divides once per tile and steps through the blocks by addition; the
 * table loads of four rows are issued together before their copies.
 */
template <typename T, int HD, int ROWS, int NT>
__device__ __forceinline__ void tile_load_paged(T *tile, const fa_problem &p, const fa_view &v, int64_t b, int64_t r0,
                                                int64_t h, int64_t nvalid, int ncols, bool aligned) {
    constexpr int CH = HD / 8, STEP = NT / CH, PASSES = ROWS / STEP, GROUP = PASSES < 4 ? PASSES : 4;
    static_assert(NT % CH == 0 && ROWS % STEP == 0 && PASSES % GROUP == 0, "tile shape");
    if (!aligned) {
        tile_load_sync<T, HD, ROWS, NT>(tile, p, v, true, b, r0, h, nvalid, ncols);
        return;
    }
    const int c = threadIdx.x % CH, rr = threadIdx.x / CH;
    const T *base = (const T *)v.data;
    const int32_t *table = p.block_table + b * p.block_table_stride;
    const int bs = (int)p.block_size;                  /* keys (< 2^31) and block sizes fit 32 bits */
    const int64_t col_off = h * v.sh + c * 8;
    const uint32_t dst = smem_addr(tile + tile_chunk<HD>(rr, c));
    int blk_i = (int)(r0 + rr) / bs;                   /* table entry and row within the block of */
    int in_blk = (int)(r0 + rr) - blk_i * bs;          /* this thread's first row */
#pragma unroll
    for (int k0 = 0; k0 < PASSES; k0 += GROUP) {
        int32_t blk[GROUP];
        int row_in[GROUP];
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
            const bool ok = rr + (k0 + k) * STEP < nvalid;
            blk[k] = ok ? table[blk_i] : 0; /* rows past the keys may lie past the table */
            row_in[k] = in_blk;
            in_blk += STEP; /* next row of this thread: carry into the next block(s) */
            if (in_blk >= bs) {
                blk_i += in_blk / bs;
                in_blk %= bs;
            }
        }
#pragma unroll
        for (int k = 0; k < GROUP; ++k) {
            const int r = rr + (k0 + k) * STEP;
            const bool ok = r < nvalid && c * 8 < ncols;
            const int64_t o = (int64_t)blk[k] * v.sb + (int64_t)row_in[k] * v.ss + col_off;
            const uint32_t d = STEP % 8 == 0 ? dst + (k0 + k) * STEP * HD * (uint32_t)sizeof(T) /* as in tile_load */
                                             : smem_addr(tile + tile_chunk<HD>(r, c));
            cp_async_16(d, ok ? base + o : base, ok ? 16 : 0);
        }
    }
}

/*
 * Load ROWS packed query rows into a swizzled tile (the forward's GQA
 * packing): the rows of a (batch, kv head) are ordered query position first,
 * then the `group` query heads that share the kv head, so packed row R is
 * query R / group of head h0 + R % group. Tile row r holds packed row r0 + r;
 * rows at or past nvalid and columns at or past ncols become zero. aligned:
 * as for tile_load (whole 16-byte chunks by cp.async); otherwise element by
 * element. Q is loaded once per CTA, so the per-row division is no concern.
 */
template <typename T, int HD, int ROWS, int NT>
__device__ __forceinline__ void tile_load_packed_q(T *tile, const fa_problem &p, const fa_view &v, int64_t b, int r0,
                                                   int h0, int group, int nvalid, int ncols, bool aligned) {
    constexpr int CH = HD / 8;
    const T *base = (const T *)v.data;
    for (int idx = threadIdx.x; idx < ROWS * CH; idx += NT) {
        const int r = idx / CH, c = idx % CH, row = r0 + r;
        const bool row_ok = r < nvalid;
        const T *src = base;
        if (row_ok) src = base + fa_q_offset(&p, &v, b, row / group, h0 + row % group) + c * 8;
        if (aligned) {
            const bool ok = row_ok && c * 8 < ncols;
            cp_async_16(smem_addr(tile + tile_chunk<HD>(r, c)), ok ? src : base, ok ? 16 : 0);
        } else {
            union { uint4 u; unsigned short e[8]; } chunk;
#pragma unroll
            for (int e = 0; e < 8; ++e) chunk.e[e] = (row_ok && c * 8 + e < ncols) ? ((const unsigned short *)src)[e] : 0;
            *(uint4 *)(tile + tile_chunk<HD>(r, c)) = chunk.u;
        }
    }
}

#endif /* FA_SM80_TILE_CUH */

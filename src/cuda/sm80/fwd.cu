/*
 * Forward attention on Ampere-class tensor cores (mma.sync m16n8k16).
 *
 * One CTA owns BM query rows of one (batch, query head) and walks the key
 * tiles of BN keys that the mask leaves visible. Each warp owns MT * 16 rows:
 *   S = Q K^T       Q and K fragments come from swizzled shared memory by ldmatrix
 *   online softmax  on the S accumulator in registers, exp2 with the scale folded in
 *   O += P V        the S accumulator, rounded to 16 bits, is the A operand as is
 * K and V are double-buffered (three stages in the packed CTAs below): the
 * next tiles' cp.async copies run during the current tile's math. Only tiles
 * that cross a mask boundary pay for the mask.
 *
 * With splits > 1 (Flash-Decoding) blockIdx.z also selects a chunk of the key
 * tiles and the CTA writes a normalised float32 partial and its lse, merged
 * afterwards by the combine kernel (kvcache.cu).
 *
 * GQA packing (PACK, chosen by sm80_fwd_packs_gqa): when a (batch, kv head)
 * has few query rows, as in decoding, one CTA takes the rows of all the query
 * heads that share kv head blockIdx.y, ordered query position first, so
 * packed row R is query R / group of head h0 + R % group. Every K/V tile is
 * then read once for the whole group, and the tile is 16 rows of one warp
 * instead of 128: few mma rows are wasted and many CTAs fit on an SM. Masks,
 * ALiBi, dropout and the outputs use each row's own query position and head;
 * positions never decrease with R, so a CTA's visible keys are still bounded
 * by its first and last rows.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "sm80.h"
#include "../smem_limit.cuh"
#include "tile.cuh"

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

typedef struct fwd_args {
    float scale_log2;   /* scale * log2(e): the plain score goes straight to exp2 */
    int mods;           /* softcap or ALiBi: scores need the general transform */
    int splits;         /* key chunks per (batch, head, row block) */
    float *o_part;      /* splits > 1: (splits, B, Hq, Sq, Dv) float32 */
    float *lse_part;    /* splits > 1: (splits, B, Hq, Sq) */
    int aligned_in;     /* q, k, v rows start on 16 bytes and D, Dv % 8 == 0 */
    int aligned_out;    /* out rows allow 4-byte pair stores */
    uint32_t drop_threshold;
    float drop_scale;   /* 1 / (1 - p) */
    float inv_softcap;
} fwd_args;

/* K or V rows [j0, j0 + BN) of kv head hk. The one-warp packed CTAs walk a
 * paged cache with batched table lookups (tile_load_paged), except at head
 * dim 256, where its registers would spill (sm_80). */
template <typename T, int HD, int BN, int NT, bool PACK>
__device__ __forceinline__ void kv_tile_load(T *tile, const fa_problem &p, const fa_view &v, int b, int j0, int hk, int sk,
                                             int ncols, bool aligned) {
    if (PACK && HD <= 128 && p.block_table) tile_load_paged<T, HD, BN, NT>(tile, p, v, b, j0, hk, sk - j0, ncols, aligned);
    else tile_load<T, HD, BN, NT>(tile, p, v, true, b, j0, hk, sk - j0, ncols, aligned);
}

/* K/V pipeline depth: the one-warp packed CTAs stream long key ranges with
 * little math per tile, so they keep two tiles in flight while computing a
 * third (at head dim 256 three stages would leave two CTAs per SM). */
template <int HD, bool PACK>
__host__ __device__ constexpr int fwd_stages() { return PACK && HD <= 128 ? 3 : 2; }

template <typename T, int HD, int NW, int MT, int BN, bool PACK>
__global__ void __launch_bounds__(NW * 32, 1)
sm80_fwd_kernel(const __grid_constant__ fa_problem p, const __grid_constant__ fwd_args a) {
    constexpr int BM = NW * MT * 16, NT = NW * 32, NS = BN / 8, ND = HD / 8, STAGES = fwd_stages<HD, PACK>();
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sQ = (T *)smem_raw;
    T *sK = sQ + BM * HD;           /* STAGES stages */
    T *sV = sK + STAGES * BN * HD;  /* STAGES stages */

    const int m_block = gridDim.x - 1 - blockIdx.x; /* longest (causal) rows first */
    const int b = blockIdx.z / a.splits, split = blockIdx.z % a.splits;
    const int sq = (int)fa_seqlen_q(&p, b), sk = (int)fa_seqlen_k(&p, b);
    /* Unpacked: the rows are the queries of head blockIdx.y (group 1 folds the
     * row -> (query, head) mapping away). Packed: blockIdx.y is the kv head. */
    const int group = PACK ? (int)(p.Hq / p.Hk) : 1;
    const int h0 = PACK ? (int)blockIdx.y * group : (int)blockIdx.y;
    const int hk = PACK ? (int)blockIdx.y : (int)fa_kv_head(&p, h0);
    const int rows = sq * group; /* packed rows of this (batch, head or kv head) */
    const int m0 = m_block * BM;
    if (m0 >= rows) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const bool aligned = a.aligned_in;

    /* Visible keys per row are [lo, hi) with lo and hi non-decreasing in the
     * row, so the block sees [lo(first row), hi(last row)). */
    const int m_last = min(m0 + BM, rows) - 1;
    int64_t lo_first, hi_first, lo_last, hi_last;
    fa_key_range(&p, sq, sk, m0 / group, &lo_first, &hi_first);
    fa_key_range(&p, sq, sk, m_last / group, &lo_last, &hi_last);
    int n_lo = (int)(lo_first / BN);
    int n_hi = hi_last > lo_first ? (int)((hi_last + BN - 1) / BN) : n_lo;
    if (a.splits > 1) { /* this split's share of the tiles: shares differ by at most one tile */
        const int count = n_hi - n_lo, per = count / a.splits, extra = count % a.splits;
        n_lo += split * per + min(split, extra); /* the first `extra` splits take one more */
        n_hi = n_lo + per + (split < extra ? 1 : 0);
    }

    /* The rows this thread holds (g and g + 8 of each m tile): visible key
     * range; packed, also query position and ALiBi slope (per query head). */
    int row_lo[MT][2], row_hi[MT][2], row_q[MT][2];
    float row_slope[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int r = m0 + warp * MT * 16 + mt * 16 + hf * 8 + g;
            int64_t lo, hi;
            fa_key_range(&p, sq, sk, r / group, &lo, &hi);
            row_lo[mt][hf] = (int)lo;
            row_hi[mt][hf] = (int)hi;
            row_q[mt][hf] = r / group;
            row_slope[mt][hf] = PACK ? fa_alibi_slope(&p, b, h0 + r % group) : 0.0f;
        }
    const int diag = (int)fa_diag_offset(&p, sq, sk);
    const float slope = fa_alibi_slope(&p, b, h0); /* unpacked: one head per CTA */

    /* Prologue: Q and the first K in one group, the first V in the next; with
     * three stages the second tile's K and V in two more (empty past the end,
     * so every tile owns two groups and the wait counts stay uniform). */
    if (PACK) tile_load_packed_q<T, HD, BM, NT>(sQ, p, p.q, b, m0, h0, group, rows - m0, (int)p.D, aligned);
    else tile_load<T, HD, BM, NT>(sQ, p, p.q, false, b, m0, h0, sq - m0, (int)p.D, aligned);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        const int j = (n_lo + s) * BN;
        if (n_lo + s < n_hi) kv_tile_load<T, HD, BN, NT, PACK>(sK + s * BN * HD, p, p.k, b, j, hk, sk, (int)p.D, aligned);
        cp_async_commit();
        if (n_lo + s < n_hi) kv_tile_load<T, HD, BN, NT, PACK>(sV + s * BN * HD, p, p.v, b, j, hk, sk, (int)p.Dv, aligned);
        cp_async_commit();
    }

    float o[MT][ND][4];
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int d = 0; d < ND; ++d) o[mt][d][0] = o[mt][d][1] = o[mt][d][2] = o[mt][d][3] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = -INFINITY;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }

    /* ldmatrix geometry of this lane (every 8x8 block starts on a row that is a
     * multiple of 8, so each lane's row is congruent to lane mod 8). */
    const uint32_t r7 = lane & 7;
    const uint32_t xa = ((lane >> 4) ^ r7) << 4;         /* A operands and V (transposed) */
    const uint32_t xb = (((lane >> 3) & 1) ^ r7) << 4;   /* K as the B operand */
    constexpr uint32_t ROWB = HD * sizeof(T);             /* bytes per tile row */
    const uint32_t q_addr = smem_addr(sQ) + (warp * MT * 16 + (lane & 15)) * ROWB;
    const uint32_t k_lane = ((lane & 7) + ((lane >> 4) << 3)) * ROWB;
    const uint32_t v_lane = (lane & 15) * ROWB;

    for (int n = n_lo; n < n_hi; ++n) {
        const int stage = (int)((unsigned)(n - n_lo) % STAGES);
        const uint32_t k_addr = smem_addr(sK) + stage * BN * ROWB + k_lane;
        const uint32_t v_addr = smem_addr(sV) + stage * BN * ROWB + v_lane;
        /* Pending groups, oldest first: K(n), V(n), then K and V of each later
         * tile already issued (STAGES - 2 of them). */
        cp_async_wait<2 * STAGES - 3>(); /* K(n) has landed; V(n) and later tiles may still be in flight */
        __syncthreads(); /* ... for every thread, and tile n - 1's stage is free again */
        if (n + STAGES - 1 < n_hi) { /* refill that stage with tile n + STAGES - 1 */
            const int j1 = (n + STAGES - 1) * BN, fill = stage == 0 ? STAGES - 1 : stage - 1;
            kv_tile_load<T, HD, BN, NT, PACK>(sK + fill * BN * HD, p, p.k, b, j1, hk, sk, (int)p.D, aligned);
            cp_async_commit();
            kv_tile_load<T, HD, BN, NT, PACK>(sV + fill * BN * HD, p, p.v, b, j1, hk, sk, (int)p.Dv, aligned);
            cp_async_commit();
        } else { /* empty groups keep the wait counts uniform */
            cp_async_commit();
            cp_async_commit();
        }

        /* S = Q K^T over the head dimension, 16 at a time (head-dim padding is
         * zero in shared memory; straight-line loops let ptxas overlap the
         * ldmatrix of one step with the mma of the previous). */
        float s[MT][NS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int j = 0; j < NS; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                ldmatrix_x4(qa[mt], q_addr + mt * 16 * ROWB + swz(kk, xa));
#pragma unroll
            for (int nn = 0; nn < BN / 16; ++nn) {
                uint32_t kb[4];
                ldmatrix_x4(kb, k_addr + nn * 16 * ROWB + swz(kk, xb));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816<T>(s[mt][2 * nn], qa[mt], kb[0], kb[1]);
                    mma_16816<T>(s[mt][2 * nn + 1], qa[mt], kb[2], kb[3]);
                }
            }
        }

        /* Scores in log2 units; masked entries -inf. Each variant is its own
         * loop so that the common case is a single multiply per element. */
        const int j0 = n * BN;
        const bool need_mask = !(j0 >= lo_last && j0 + BN <= hi_first);
        if (!a.mods) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][j][e] *= a.scale_log2;
        } else {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float u = s[mt][j][e] * p.scale;
                        if (p.softcap > 0.0f) u = p.softcap * tanhf(u * a.inv_softcap);
                        const int col = j0 + j * 8 + 2 * t + (e & 1);
                        /* unpacked rows are recomputed: fewer live registers */
                        const int row = PACK ? row_q[mt][e >> 1] : m0 + warp * MT * 16 + mt * 16 + (e >> 1) * 8 + g;
                        const float sl = PACK ? row_slope[mt][e >> 1] : slope;
                        u -= sl * fabsf((float)(row + diag - col));
                        s[mt][j][e] = u * LOG2E_F;
                    }
        }
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = j0 + j * 8 + 2 * t + (e & 1);
                        if (col < row_lo[mt][e >> 1] || col >= row_hi[mt][e >> 1]) s[mt][j][e] = -INFINITY;
                    }
        }

        /* Online softmax: new row max, rescale what was accumulated, exponentiate. */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = m_run[mt][hf];
#pragma unroll
                for (int j = 0; j < NS; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)); /* a row lives in 4 lanes */
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_use = mx == -INFINITY ? 0.0f : mx; /* fully masked so far: avoid -inf - -inf */
                const float corr = fast_exp2(m_run[mt][hf] - m_use);
                m_run[mt][hf] = mx;
                l_run[mt][hf] *= corr;
#pragma unroll
                for (int d = 0; d < ND; ++d) {
                    o[mt][d][2 * hf] *= corr;
                    o[mt][d][2 * hf + 1] *= corr;
                }
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    s[mt][j][2 * hf] = fast_exp2(s[mt][j][2 * hf] - m_use);
                    s[mt][j][2 * hf + 1] = fast_exp2(s[mt][j][2 * hf + 1] - m_use);
                    sum += s[mt][j][2 * hf] + s[mt][j][2 * hf + 1];
                }
                l_run[mt][hf] += sum; /* per-thread partial; the quad is summed at the end */
            }

        if (p.dropout_p > 0.0f) { /* the shared Philox rule: 4 columns per block of words */
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int r_packed = m0 + warp * MT * 16 + mt * 16 + hf * 8 + g;
                    const int row = r_packed / group, h = h0 + r_packed % group;
#pragma unroll
                    for (int j = 0; j < NS; ++j) {
                        const int col = j0 + j * 8 + 2 * t; /* even: col and col + 1 share a block */
                        uint32_t r[4];
                        fa_dropout_words(p.dropout_seed, p.dropout_offset, b, h, row, col >> 2, r);
                        s[mt][j][2 * hf] *= r[col & 3] >= a.drop_threshold ? a.drop_scale : 0.0f;
                        s[mt][j][2 * hf + 1] *= r[(col & 3) + 1] >= a.drop_threshold ? a.drop_scale : 0.0f;
                    }
                }
        }

        cp_async_wait<2 * STAGES - 2>(); /* V(n) has landed (the later tiles' K and V may be in flight) */
        __syncthreads();

        /* O += P V: S tiles 2c and 2c+1 form the A fragment of key chunk c. */
#pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                pa[mt][0] = pack2<T>(s[mt][2 * c][0], s[mt][2 * c][1]);
                pa[mt][1] = pack2<T>(s[mt][2 * c][2], s[mt][2 * c][3]);
                pa[mt][2] = pack2<T>(s[mt][2 * c + 1][0], s[mt][2 * c + 1][1]);
                pa[mt][3] = pack2<T>(s[mt][2 * c + 1][2], s[mt][2 * c + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < HD / 16; ++dn) {
                uint32_t vb[4];
                ldmatrix_x4_trans(vb, v_addr + c * 16 * ROWB + swz(dn, xa));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_16816<T>(o[mt][2 * dn], pa[mt], vb[0], vb[1]);
                    mma_16816<T>(o[mt][2 * dn + 1], pa[mt], vb[2], vb[3]);
                }
            }
        }
    }
    cp_async_wait<0>(); /* nothing may still write shared memory when the CTA exits */

    /* Epilogue: normalise, write out (or the split partial) and lse. */
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = l_run[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* a row with no key: out 0 */
            const float lse = l > 0.0f ? m_run[mt][hf] * LN2_F + logf(l) : -INFINITY;
            const int r_packed = m0 + warp * MT * 16 + mt * 16 + hf * 8 + g;
            if (r_packed >= rows) continue;
            const int row = r_packed / group, h = h0 + r_packed % group;
            if (a.splits > 1) {
                const int64_t prow = (((int64_t)split * p.B + b) * p.Hq + h) * p.Sq + row;
                float *dst = a.o_part + prow * p.Dv;
#pragma unroll
                for (int d = 0; d < ND; ++d)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = d * 8 + 2 * t + e;
                        if (col < p.Dv) dst[col] = o[mt][d][2 * hf + e] * inv;
                    }
                if (t == 0) a.lse_part[prow] = lse;
            } else {
                T *dst = (T *)p.out.data + fa_q_offset(&p, &p.out, b, row, h);
#pragma unroll
                for (int d = 0; d < ND; ++d) {
                    const int col = d * 8 + 2 * t;
                    const float v0 = o[mt][d][2 * hf] * inv, v1 = o[mt][d][2 * hf + 1] * inv;
                    if (a.aligned_out && col + 1 < p.Dv) {
                        *(uint32_t *)(dst + col) = pack2<T>(v0, v1);
                    } else {
                        if (col < p.Dv) dst[col] = from_f32<T>(v0);
                        if (col + 1 < p.Dv) dst[col + 1] = from_f32<T>(v1);
                    }
                }
                if (t == 0 && p.lse) p.lse[fa_lse_offset(&p, b, h, row)] = lse;
            }
        }
}

/* ------------------------------------------------------------------------- */
/* Host side                                                                  */
/* ------------------------------------------------------------------------- */

static int aligned16(const fa_view *v) {
    return ((uintptr_t)v->data % 16 == 0) && v->sb % 8 == 0 && v->ss % 8 == 0 && v->sh % 8 == 0;
}

template <typename T, int HD, int NW, int MT, int BN, bool PACK>
static fa_status launch(const fa_problem *p, const fa_exec *x, const fwd_args *a) {
    constexpr int BM = NW * MT * 16;
    const size_t smem = (size_t)(BM + 2 * fwd_stages<HD, PACK>() * BN) * HD * sizeof(T);
    static unsigned long long smem_set = 0; /* devices this instance was configured on */
    cudaError_t e = smem_limit_once(sm80_fwd_kernel<T, HD, NW, MT, BN, PACK>, smem, x->device_index, &smem_set);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 forward: %s", cudaGetErrorString(e));
    if (p->B == 0 || p->Hq == 0) return FA_OK;
    /* Packed: the query heads of a kv head share the rows of one grid row. */
    const int64_t group = PACK ? p->Hq / p->Hk : 1, heads = PACK ? p->Hk : p->Hq;
    const int64_t m_blocks = (p->Sq * group + BM - 1) / BM;
    if (m_blocks == 0) return FA_OK;
    if (m_blocks > 0x7fffffff || heads > 65535 || p->B * a->splits > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "sm80 forward: grid too large (Sq %lld, Hq %lld, B %lld)",
                            (long long)p->Sq, (long long)p->Hq, (long long)p->B);
    dim3 grid((unsigned)m_blocks, (unsigned)heads, (unsigned)(p->B * a->splits));
    sm80_fwd_kernel<T, HD, NW, MT, BN, PACK><<<grid, NW * 32, smem, (cudaStream_t)x->stream>>>(*p, *a);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 forward: %s", cudaGetErrorString(e));
    return FA_OK;
}

/*
 * Whether the forward packs the query heads of each kv head into the rows of
 * one-warp, 16-row tiles: when a (batch, kv head) has at most 64 query rows
 * (decoding, speculative decoding, short chunks; group 1 included, where only
 * the smaller tile matters). Then each K/V tile is read once per row tile of
 * the group instead of once per query head, and at most 15 of a tile's 16
 * rows are padding instead of up to 127 of 128. Dropout (training, never
 * decoding) keeps the unpacked tiles. Return 0 here to turn the packed path
 * off everywhere (the split heuristic follows).
 *
 * FA_SM80_PACK=0 in the environment never packs, FA_SM80_PACK=1 packs every
 * forward, dropout included, so that one test run covers either kernel on
 * every shape; read once, like FA_CPU_KERNELS.
 */
static int pack_override(void) {
    static int cached = -2; /* -2 not read yet, -1 no override; racing first calls agree */
    if (cached == -2) {
        const char *e = getenv("FA_SM80_PACK");
        cached = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "1") == 0 ? 1 : -1;
    }
    return cached;
}

int sm80_fwd_packs_gqa(const fa_problem *p) {
    if (p->Hk <= 0 || p->Hq <= 0) return 0;
    const int forced = pack_override();
    if (forced >= 0) return forced;
    return p->dropout_p == 0.0f && p->Sq * (p->Hq / p->Hk) <= 64;
}

/* Tile shapes per padded head dimension: (warps, m tiles per warp, keys per
 * tile); packed: one warp of 16 rows with the same key tiles (kvcache.cu's
 * split heuristic counts in those). */
template <typename T>
static fa_status dispatch(const fa_problem *p, const fa_exec *x, const fwd_args *a) {
    const int64_t hd = p->D > p->Dv ? p->D : p->Dv;
    if (sm80_fwd_packs_gqa(p)) {
        if (hd <= 64) return launch<T, 64, 1, 1, 64, true>(p, x, a);
        if (hd <= 128) return launch<T, 128, 1, 1, 32, true>(p, x, a);
        return launch<T, 256, 1, 1, 32, true>(p, x, a);
    }
    if (hd <= 64) return launch<T, 64, 4, 2, 64, false>(p, x, a);
    if (hd <= 128) return launch<T, 128, 4, 2, 32, false>(p, x, a);
    return launch<T, 256, 8, 1, 32, false>(p, x, a);
}

extern "C" fa_status sm80_fwd_launch(const fa_problem *p, const fa_exec *x, int splits, float *o_part, float *lse_part) {
    fwd_args a;
    a.scale_log2 = p->scale * LOG2E_F;
    a.mods = p->softcap > 0.0f || p->alibi != NULL;
    a.splits = splits < 1 ? 1 : splits;
    a.o_part = o_part;
    a.lse_part = lse_part;
    a.aligned_in = p->D % 8 == 0 && p->Dv % 8 == 0 && aligned16(&p->q) && aligned16(&p->k) && aligned16(&p->v);
    a.aligned_out = (uintptr_t)p->out.data % 4 == 0 && p->out.sb % 2 == 0 && p->out.ss % 2 == 0 && p->out.sh % 2 == 0;
    a.drop_threshold = fa_dropout_threshold(p->dropout_p);
    a.drop_scale = p->dropout_p > 0.0f ? 1.0f / (1.0f - p->dropout_p) : 1.0f;
    a.inv_softcap = p->softcap > 0.0f ? 1.0f / p->softcap : 0.0f;
    if (p->dtype == FA_BF16) return dispatch<__nv_bfloat16>(p, x, &a);
    return dispatch<__half>(p, x, &a);
}

extern "C" fa_status sm80_fwd(const fa_problem *p, const fa_exec *x) {
    return sm80_fwd_launch(p, x, 1, NULL, NULL);
}

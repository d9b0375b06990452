/*
 * Backward attention on Ampere-class tensor cores (mma.sync m16n8k16).
 *
 * Three kernels:
 *   preprocess  Delta_i = rowsum(dO_i * O_i) and lse in log2 units, per (row, head);
 *   main        one CTA per (key tile, kv head, batch); it walks the query heads
 *               that share the kv head and, for each, the query tiles that see its
 *               keys, keeping dK and dV in registers:
 *                 S^T = K Q^T, dP^T = V dO^T        (keys are the rows: the
 *                 P^T, dS^T                          accumulators are the A operands
 *                 dV += P^T dO, dK += dS^T Q         of the next products as is)
 *                 dQ += dS K                         (dS^T through shared memory)
 *               dQ goes to a float32 accumulator with atomics; in deterministic
 *               mode the key tiles of one (row tile, head) add in key order,
 *               ordered by a per-tile semaphore;
 *   convert     dq = dq_accum in the storage type.
 * Summing dK/dV over the query heads of a group inside the CTA keeps GQA/MQA
 * deterministic and needs no dk/dv accumulators.
 *
 * Tile shapes: for head dims up to 128, 128 keys and 64 queries with 8 warps;
 * each warp owns 16 keys and every head-dim column of their dK/dV, so S^T and
 * dP^T are computed once, and the 128-key tile halves the dq atomics per
 * FLOP against 64 keys. With 128 columns of dK and dV per warp (128 registers)
 * S^T / dP^T go in two passes of 32 queries. Head dim 256 keeps 64-key tiles
 * with two warps (column halves) per 16 keys.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "../bwd_rows.cuh"
#include "philox.h"
#include "sm80.h"
#include "../smem_limit.cuh"
#include "tile.cuh"

#define LOG2E_F 1.4426950408889634f

typedef struct bwd_ws {
    float *lse2;      /* (Hq, B*Sq): lse * log2(e); +inf for rows with no key */
    float *delta;     /* (Hq, B*Sq) */
    float *dq_accum;  /* (B*Sq, Hq, D) */
    int *sem;         /* (B, Hq, m_blocks): deterministic ordering */
} bwd_ws;

typedef struct bwd_args {
    bwd_ws ws;
    int aligned_in;
    int aligned_out;    /* convert: D % 4 == 0, dq rows on 8 bytes, dq_accum on 16: four columns at a time */
    int aligned_od;     /* preprocess: Dv % 8 == 0, out and dout rows on 16 bytes: eight columns at a time */
    int m_blocks;
    uint32_t drop_threshold;
    float drop_scale;
    float inv_softcap;
    float scale_log2;   /* scale * log2(e) */
    int plain;          /* no softcap, no ALiBi, no dropout */
    int dq_pairs;       /* D even and dq_accum on 8 bytes: column pairs add as one */
} bwd_args;

/* ------------------------------------------------------------------------- */
/* Preprocess: one warp per (row, head).                                      */
/* ------------------------------------------------------------------------- */
template <typename T>
__global__ void sm80_bwd_preprocess(const __grid_constant__ fa_problem p, const __grid_constant__ bwd_args a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * (blockDim.x / 32) + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= p.Sq) return;
    const int64_t slot = (int64_t)h * p.B * p.Sq + (int64_t)b * p.Sq + i;
    if (i >= fa_seqlen_q(&p, b)) { /* varlen padding rows: harmless values */
        if (lane == 0) { a.ws.delta[slot] = 0.0f; a.ws.lse2[slot] = INFINITY; }
        return;
    }
    bwd_row_stats<T>(p, b, h, i, lane, a.aligned_od, &a.ws.lse2[slot], &a.ws.delta[slot]);
}

/* ------------------------------------------------------------------------- */
/* Convert: dq = dq_accum (already scaled), one warp per (row, head).         */
/* ------------------------------------------------------------------------- */
template <typename T>
__global__ void sm80_bwd_convert(const __grid_constant__ fa_problem p, const __grid_constant__ bwd_args a) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = blockIdx.x * (blockDim.x / 32) + warp;
    const int h = blockIdx.y, b = blockIdx.z;
    if (i >= fa_seqlen_q(&p, b)) return; /* also rows past Sq: seqlen_q <= Sq */
    const float *src = a.ws.dq_accum + (((int64_t)b * p.Sq + i) * p.Hq + h) * p.D;
    T *dst = (T *)p.dq.data + fa_q_offset(&p, &p.dq, b, i, h);
    if (a.aligned_out) { /* 16-byte loads, 8-byte stores: four columns per lane and step */
        for (int d = lane * 4; d < p.D; d += 128) {
            const float4 x = *(const float4 *)(src + d);
            uint2 y;
            y.x = pack2<T>(x.x, x.y); /* same rounding as from_f32 */
            y.y = pack2<T>(x.z, x.w);
            *(uint2 *)(dst + d) = y;
        }
    } else {
        for (int d = lane; d < p.D; d += 32) dst[d] = from_f32<T>(src[d]);
    }
}

/* ------------------------------------------------------------------------- */
/* Main kernel                                                                */
/* ------------------------------------------------------------------------- */

/* Key j is visible from query i (both inside the sequence). */
__device__ __forceinline__ bool visible(const fa_problem &p, int64_t i, int64_t j, int sq, int sk, int diag) {
    const int64_t c = i + diag;
    return i < sq && j < sk && (p.window_left >= FA_UNBOUNDED || j >= c - p.window_left) &&
           (p.window_right >= FA_UNBOUNDED || j <= c + p.window_right);
}

/* Bounded spin on a semaphore (a broken ordering must not hang the device). */
__device__ __forceinline__ void sem_wait(const int *sem, int value) {
    for (long spins = 0; spins < (1l << 26); ++spins) {
        int v;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(sem));
        if (v == value) return;
        __nanosleep(32);
    }
}
__device__ __forceinline__ void sem_release(int *sem, int value) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(sem), "r"(value));
}

/* r[i] for a run-time i, by selects: indexing the array would put it in local memory. */
__device__ __forceinline__ uint32_t word_of4(const uint32_t r[4], int i) {
    const uint32_t lo = (i & 1) ? r[1] : r[0], hi = (i & 1) ? r[3] : r[2];
    return (i & 2) ? hi : lo;
}

/* Add (x0, x1) to dst[0], dst[1] (dst[1] only when has_second). On sm_90 one
 * vector reduction does both when the pair is 8-byte aligned (pairs): half the
 * atomic requests to L2, which is where the dq accumulation queues. */
__device__ __forceinline__ void dq_add_pair(float *dst, float x0, float x1, int pairs, bool has_second) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (pairs) {
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x0), "f"(x1) : "memory");
        return;
    }
#endif
    atomicAdd(dst, x0);
    if (has_second) atomicAdd(dst + 1, x1);
}

/* Work item w of a CTA: query head and row tile. Each key tile starts at a
 * different row tile so that concurrent CTAs add into different parts of
 * dq_accum instead of queueing on the same addresses. */
__device__ __forceinline__ void bwd_item(int w, int count, int hk, int group, int m_lo, int n_block, int &h, int &m) {
    h = hk * group + w / count;
    m = m_lo + (w % count + n_block) % count;
}

/* Start the copies of one item's rows: Q, dO, lse and Delta (rows past the
 * sequence read as zero; the mask drops them). */
/* acc[16 rows][QP cols] += A B^T over the head dimension, both operands
 * row-major [rows][HD] in swizzled shared memory: A is this warp's 16 rows
 * (a_addr: its lane's ldmatrix address), B the QP rows at b_addr (likewise).
 * Used for S^T = K Q^T and dP^T = V dO^T. k16 limits the 16-column steps for
 * head dims above 128, where the tile is zero-padded past the real one. */
template <typename T, int HD, int QP, uint32_t ROWB>
__device__ __forceinline__ void warp_rows_times_cols(float (*acc)[4], uint32_t a_addr, uint32_t b_addr, int k16,
                                                     uint32_t xa, uint32_t xb) {
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        if (HD > 128 && kk >= k16) break;
        uint32_t fa[4];
        ldmatrix_x4(fa, a_addr + swz(kk, xa));
#pragma unroll
        for (int nq = 0; nq < QP / 16; ++nq) {
            uint32_t fb[4];
            ldmatrix_x4(fb, b_addr + nq * 16 * ROWB + swz(kk, xb));
            mma_16816<T>(acc[2 * nq], fa, fb[0], fb[1]);
            mma_16816<T>(acc[2 * nq + 1], fa, fb[2], fb[3]);
        }
    }
}

template <typename T, int HD, int BM, int NT>
__device__ __forceinline__ void bwd_load_rows(T *sQ, T *sdO, float *sLse, float *sDelta, const fa_problem &p,
                                              const bwd_args &a, int b, int h, int m0, int sq, bool aligned) {
    tile_load<T, HD, BM, NT>(sQ, p, p.q, false, b, m0, h, sq - m0, (int)p.D, aligned);
    tile_load<T, HD, BM, NT>(sdO, p, p.dout, false, b, m0, h, sq - m0, (int)p.Dv, aligned);
    for (int r = threadIdx.x; r < BM; r += NT) {
        const int i = m0 + r;
        const bool ok = i < sq;
        const int64_t slot = ok ? (int64_t)h * p.B * p.Sq + (int64_t)b * p.Sq + i : 0;
        cp_async_4(smem_addr(sLse + r), a.ws.lse2 + slot, ok ? 4 : 0);
        cp_async_4(smem_addr(sDelta + r), a.ws.delta + slot, ok ? 4 : 0);
    }
    cp_async_commit();
}

template <typename T, int HD, int NW, int BN, int BM>
__global__ void __launch_bounds__(NW * 32, 1)
sm80_bwd_kernel(const __grid_constant__ fa_problem p, const __grid_constant__ bwd_args a) {
    constexpr int NT = NW * 32;
    constexpr int KG = BN / 16;        /* key groups of 16 rows */
    constexpr int DSL = NW / KG;       /* head-dim slices per key group */
    constexpr int SL = HD / DSL;       /* dK/dV columns per warp */
    constexpr int MQ = BM / 16;        /* query m tiles for dQ */
    constexpr int QC = HD / (NW / MQ); /* dQ columns per warp */
    constexpr int QP = SL >= 128 ? BM / 2 : BM; /* query columns per S^T / dP^T pass */
    constexpr int NQ = QP / 8;         /* n8 tiles of S^T (query columns) in one pass */
    static_assert(KG * DSL == NW && MQ * (NW / MQ) == NW && QC % 16 == 0 && SL % 16 == 0, "tile shape");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *sK = (T *)smem_raw;
    T *sV = sK + BN * HD;
    T *sQ = sV + BN * HD;                   /* two stages */
    T *sdO = sQ + 2 * BM * HD;              /* two stages */
    T *sdS = sdO + 2 * BM * HD;             /* (BN keys, BM queries), swizzled rows of BM */
    float *sLse = (float *)(sdS + BN * BM); /* two stages */
    float *sDelta = sLse + 2 * BM;          /* two stages */
    int *sWork = (int *)(sDelta + 2 * BM);  /* per-CTA scalars, see below */

    const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int sq = (int)fa_seqlen_q(&p, b), sk = (int)fa_seqlen_k(&p, b);
    const int n0 = n_block * BN;
    if (n0 >= sk) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int kg = warp % KG, ds = warp / KG;     /* dK/dV: key group, column slice */
    const int mq = warp % MQ, qs = warp / MQ;     /* dQ: m tile, column slice */
    const bool aligned = a.aligned_in;
    const int diag = (int)fa_diag_offset(&p, sq, sk);
    /* 16-wide head-dim steps holding data; only the widest tile stops early
     * (the branch keeps ptxas from hoisting loads it has no registers for) */
    const int kD = HD > 128 ? ((int)p.D + 15) / 16 : HD / 16, kDv = HD > 128 ? ((int)p.Dv + 15) / 16 : HD / 16;

    /* Query rows that see any key of this tile: [i_begin, i_end). */
    const int n1 = min(n0 + BN, sk);
    int64_t i_begin = p.window_right >= FA_UNBOUNDED ? 0 : (int64_t)n0 - diag - p.window_right;
    int64_t i_end = p.window_left >= FA_UNBOUNDED ? sq : (int64_t)n1 - diag + p.window_left;
    if (i_begin < 0) i_begin = 0;
    if (i_end > sq) i_end = sq;
    const int m_lo = (int)(i_begin / BM);
    const int m_hi = i_end > i_begin ? (int)((i_end + BM - 1) / BM) : m_lo;

    tile_load<T, HD, BN, NT>(sK, p, p.k, true, b, n0, hk, sk - n0, (int)p.D, aligned);
    tile_load<T, HD, BN, NT>(sV, p, p.v, true, b, n0, hk, sk - n0, (int)p.Dv, aligned);
    cp_async_commit();

    float dk[SL / 8][4], dv[SL / 8][4];
#pragma unroll
    for (int d = 0; d < SL / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.0f;

    /* ldmatrix geometry of this lane (see fwd.cu): xa for A operands and
     * transposed loads, xb for B operands. A warp's column slice (ds * SL,
     * qs * QC) enters through swz as a count of 16-column steps, so it is
     * swizzled like any other step (a 32-column slice of a 64-wide row
     * crosses the swizzled bits). */
    const uint32_t r7 = lane & 7;
    const uint32_t xa = ((lane >> 4) ^ r7) << 4, xb = (((lane >> 3) & 1) ^ r7) << 4;
    constexpr uint32_t ROWB = HD * sizeof(T), DSB = BM * sizeof(T);
    const uint32_t a_lane = (lane & 15) * ROWB;                          /* rows of A / trans tiles */
    const uint32_t b_lane = ((lane & 7) + ((lane >> 4) << 3)) * ROWB;    /* rows of B tiles */
    const uint32_t k_addr = smem_addr(sK), v_addr = smem_addr(sV);
    const uint32_t ds_addr = smem_addr(sdS) + ((lane & 7) + ((lane >> 4) << 3)) * DSB;

    /* Work items: (query head of the group, row tile), the rows double-buffered. */
    const int group = (int)(p.Hq / p.Hk);
    const int count = m_hi - m_lo, total = group * count;
    /* The item loop re-reads these per item from shared memory instead of
     * holding them in registers across it: dK and dV need every register. */
    if (threadIdx.x == 0) {
        sWork[0] = m_lo;
        sWork[1] = count;
        sWork[2] = diag;
        sWork[3] = sq;
        sWork[4] = sk;
    }
    __syncthreads();
    const volatile int *work = sWork; /* volatile: loaded where used, not hoisted */
    if (total > 0) {
        int h0, mm;
        bwd_item(0, count, hk, group, m_lo, n_block, h0, mm);
        bwd_load_rows<T, HD, BM, NT>(sQ, sdO, sLse, sDelta, p, a, b, h0, mm * BM, sq, aligned);
    }
    {
        for (int w = 0; w < total; ++w) {
            const int stage = w & 1;
            const int w_m_lo = work[0], w_count = work[1], w_diag = work[2];
            int h, m;
            bwd_item(w, w_count, hk, group, w_m_lo, n_block, h, m);
            const int m0 = m * BM;
            const uint32_t q_addr = smem_addr(sQ + stage * BM * HD), do_addr = smem_addr(sdO + stage * BM * HD);
            const float *cLse = sLse + stage * BM, *cDelta = sDelta + stage * BM;
            cp_async_wait<0>(); /* this item's rows (and K, V) have landed */
            __syncthreads();    /* ... for every thread; item w-1 is done with the other stage and sdS */
            if (w + 1 < total) { /* prefetch the next item's rows during this one's math */
                int h1, m1;
                bwd_item(w + 1, w_count, hk, group, w_m_lo, n_block, h1, m1);
                bwd_load_rows<T, HD, BM, NT>(sQ + (stage ^ 1) * BM * HD, sdO + (stage ^ 1) * BM * HD, sLse + (stage ^ 1) * BM,
                                             sDelta + (stage ^ 1) * BM, p, a, b, h1, m1 * BM, sq, aligned);
            }
            const float slope = fa_alibi_slope(&p, b, h);

            /* P^T / dS^T are built QP query columns at a time (one pass, or two when
             * the warp's dK/dV slice is 128 columns wide: the S^T and dP^T
             * accumulators of half the rows leave room for dK and dV without spills). */
            const bool full = m0 + BM <= sq && n0 + BN <= sk &&
                              (p.window_left >= FA_UNBOUNDED || (int64_t)n0 >= (int64_t)m0 + BM - 1 + w_diag - p.window_left) &&
                              (p.window_right >= FA_UNBOUNDED || (int64_t)n0 + BN - 1 <= (int64_t)m0 + w_diag + p.window_right);
#pragma unroll 1
            for (int q0 = 0; q0 < BM; q0 += QP) {
            /* S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys and the pass's queries. */
            float st[NQ][4], dpt[NQ][4];
#pragma unroll
            for (int j = 0; j < NQ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
            const uint32_t qp_addr = q_addr + q0 * ROWB, dop_addr = do_addr + q0 * ROWB; /* the pass's first query row */
            warp_rows_times_cols<T, HD, QP, ROWB>(st, k_addr + kg * 16 * ROWB + a_lane, qp_addr + b_lane, kD, xa, xb);
            warp_rows_times_cols<T, HD, QP, ROWB>(dpt, v_addr + kg * 16 * ROWB + a_lane, dop_addr + b_lane, kDv, xa, xb);

            /* P^T (dropped, into st) and dS^T (into dpt), element by element. */
            if (full && a.plain) { /* the common case: no mask, no score modifier, no dropout */
#pragma unroll
                for (int j = 0; j < NQ; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int qc = q0 + j * 8 + 2 * t + (e & 1);
                        const float pr = fast_exp2(st[j][e] * a.scale_log2 - cLse[qc]);
                        dpt[j][e] = pr * (dpt[j][e] - cDelta[qc]);
                        st[j][e] = pr;
                    }
            } else if (a.plain) { /* tiles on a mask boundary, nothing else */
#pragma unroll
                for (int j = 0; j < NQ; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = n0 + kg * 16 + g + (e >> 1) * 8;
                        const int qc = q0 + j * 8 + 2 * t + (e & 1);
                        float pr = fast_exp2(st[j][e] * a.scale_log2 - cLse[qc]);
                        if (!visible(p, m0 + qc, key, sq, sk, w_diag)) pr = 0.0f;
                        dpt[j][e] = pr * (dpt[j][e] - cDelta[qc]);
                        st[j][e] = pr;
                    }
            } else {
#pragma unroll
            for (int j = 0; j < NQ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = n0 + kg * 16 + g + (e >> 1) * 8;
                    const int qc = q0 + j * 8 + 2 * t + (e & 1);
                    const int row = m0 + qc;
                    float u = st[j][e] * p.scale, dcap = 1.0f;
                    if (p.softcap > 0.0f) {
                        const float tc = tanhf(u * a.inv_softcap);
                        u = p.softcap * tc;
                        dcap = 1.0f - tc * tc; /* d(c tanh(x/c))/dx */
                    }
                    if (p.alibi) u -= slope * fabsf((float)(row + w_diag - key));
                    float pr = fast_exp2(u * LOG2E_F - cLse[qc]);
                    if (!full && !visible(p, row, key, sq, sk, w_diag)) pr = 0.0f;
                    float z = 1.0f; /* dropout factor keep / (1 - p) */
                    if (p.dropout_p > 0.0f) {
                        uint32_t r[4];
                        fa_dropout_words(p.dropout_seed, p.dropout_offset, b, h, row, key >> 2, r);
                        z = word_of4(r, key & 3) >= a.drop_threshold ? a.drop_scale : 0.0f;
                    }
                    dpt[j][e] = pr * (dpt[j][e] * z - cDelta[qc]) * dcap;
                    st[j][e] = pr * z;
                }
            }

            /* dV += P^T dO and dK += dS^T Q over this warp's column slice. */
#pragma unroll
            for (int c = 0; c < QP / 16; ++c) {
                uint32_t pa[4], sa[4];
                pa[0] = pack2<T>(st[2 * c][0], st[2 * c][1]);
                pa[1] = pack2<T>(st[2 * c][2], st[2 * c][3]);
                pa[2] = pack2<T>(st[2 * c + 1][0], st[2 * c + 1][1]);
                pa[3] = pack2<T>(st[2 * c + 1][2], st[2 * c + 1][3]);
                sa[0] = pack2<T>(dpt[2 * c][0], dpt[2 * c][1]);
                sa[1] = pack2<T>(dpt[2 * c][2], dpt[2 * c][3]);
                sa[2] = pack2<T>(dpt[2 * c + 1][0], dpt[2 * c + 1][1]);
                sa[3] = pack2<T>(dpt[2 * c + 1][2], dpt[2 * c + 1][3]);
#pragma unroll
                for (int dn = 0; dn < SL / 16; ++dn) {
                    /* padded head-dim columns are zero and never stored */
                    if (HD <= 128 || ds * SL + dn * 16 < p.Dv) {
                        uint32_t ob[4];
                        ldmatrix_x4_trans(ob, dop_addr + c * 16 * ROWB + a_lane + swz(ds * (SL / 16) + dn, xa));
                        mma_16816<T>(dv[2 * dn], pa, ob[0], ob[1]);
                        mma_16816<T>(dv[2 * dn + 1], pa, ob[2], ob[3]);
                    }
                    if (HD <= 128 || ds * SL + dn * 16 < p.D) {
                        uint32_t qb[4];
                        ldmatrix_x4_trans(qb, qp_addr + c * 16 * ROWB + a_lane + swz(ds * (SL / 16) + dn, xa));
                        mma_16816<T>(dk[2 * dn], sa, qb[0], qb[1]);
                        mma_16816<T>(dk[2 * dn + 1], sa, qb[2], qb[3]);
                    }
                }
                /* dS^T to shared memory for dQ (one slice writes it). */
                if (ds == 0) {
#pragma unroll
                    for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                        for (int hf = 0; hf < 2; ++hf) {
                            const int key = kg * 16 + g + hf * 8, qc = q0 + (2 * c + jj) * 8 + 2 * t;
                            *(uint32_t *)(sdS + tile_chunk<BM>(key, qc / 8) + (qc % 8)) = sa[jj * 2 + hf];
                        }
                }
            }
            } /* passes */
            __syncthreads(); /* dS^T complete */

            /* dQ (BM x HD) = dS K for this warp's m tile and column slice. */
            float dq[QC / 8][4];
#pragma unroll
            for (int d = 0; d < QC / 8; ++d) dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < BN / 16; ++kc) {
                uint32_t da[4];
                ldmatrix_x4_trans(da, ds_addr + kc * 16 * DSB + swz(mq, xb));
#pragma unroll
                for (int dn = 0; dn < QC / 16; ++dn) {
                    uint32_t kb[4];
                    ldmatrix_x4_trans(kb, k_addr + kc * 16 * ROWB + a_lane + swz(qs * (QC / 16) + dn, xa));
                    mma_16816<T>(dq[2 * dn], da, kb[0], kb[1]);
                    mma_16816<T>(dq[2 * dn + 1], da, kb[2], kb[3]);
                }
            }
            int *sem = a.ws.sem + ((int64_t)b * p.Hq + h) * a.m_blocks + m;
            int rank = 0;
            if (p.deterministic) { /* key tiles add in order: rank among the tiles this row tile sees */
                int64_t lo, hi;
                fa_key_range(&p, work[3], work[4], m0, &lo, &hi);
                rank = n_block - (int)(lo / BN);
                if (threadIdx.x == 0) sem_wait(sem, rank);
                __syncthreads();
            }
#pragma unroll
            for (int d = 0; d < QC / 8; ++d)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) { /* rows g and g + 8; each lane holds two adjacent columns */
                    const int row = m0 + mq * 16 + g + hf * 8;
                    const int col = qs * QC + d * 8 + 2 * t;
                    if (row >= sq || col >= p.D) continue;
                    float *dst = a.ws.dq_accum + (((int64_t)b * p.Sq + row) * p.Hq + h) * p.D + col;
                    dq_add_pair(dst, dq[d][2 * hf] * p.scale, dq[d][2 * hf + 1] * p.scale, a.dq_pairs, col + 1 < p.D);
                }
            if (p.deterministic) {
                __threadfence();
                __syncthreads();
                if (threadIdx.x == 0) sem_release(sem, rank + 1);
            }
        }
    }

    cp_async_wait<0>(); /* with no work item the K/V copies were never waited for */

    /* dK = scale * sum dS^T Q, dV = sum P^T dO, for keys inside the sequence. */
#pragma unroll
    for (int d = 0; d < SL / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = n0 + kg * 16 + g + (e >> 1) * 8;
            const int col = ds * SL + d * 8 + 2 * t + (e & 1);
            if (key >= sk) continue;
            if (col < p.D) ((T *)p.dk.data)[fa_k_offset(&p, &p.dk, b, key, hk) + col] = from_f32<T>(dk[d][e] * p.scale);
            if (col < p.Dv) ((T *)p.dv.data)[fa_k_offset(&p, &p.dv, b, key, hk) + col] = from_f32<T>(dv[d][e]);
        }
}

/* ------------------------------------------------------------------------- */
/* Host side                                                                  */
/* ------------------------------------------------------------------------- */

#define BWD_BM 64

static size_t round_up(size_t x) { return (x + 255) & ~(size_t)255; }

static int64_t bwd_m_blocks(const fa_problem *p) { return (p->Sq + BWD_BM - 1) / BWD_BM; }

extern "C" size_t sm80_bwd_workspace(const fa_problem *p) {
    const size_t rows = (size_t)(p->B * p->Sq * p->Hq);
    return 2 * round_up(rows * sizeof(float)) + round_up(rows * (size_t)p->D * sizeof(float)) +
           round_up((size_t)(p->B * p->Hq * bwd_m_blocks(p)) * sizeof(int));
}

static int aligned16(const fa_view *v) {
    return ((uintptr_t)v->data % 16 == 0) && v->sb % 8 == 0 && v->ss % 8 == 0 && v->sh % 8 == 0;
}

template <typename T, int HD, int NW, int BN>
static fa_status run(const fa_problem *p, const fa_exec *x, const bwd_args *a) {
    cudaStream_t stream = (cudaStream_t)x->stream;
    const size_t smem = (size_t)(2 * BN * HD + 4 * BWD_BM * HD + BN * BWD_BM) * sizeof(T) + 4 * BWD_BM * sizeof(float) +
                        8 * sizeof(int); /* sWork */
    static unsigned long long smem_set = 0; /* devices this instance was configured on */
    cudaError_t e = smem_limit_once(sm80_bwd_kernel<T, HD, NW, BN, BWD_BM>, smem, x->device_index, &smem_set);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 backward: %s", cudaGetErrorString(e));
    const size_t rows = (size_t)(p->B * p->Sq * p->Hq);
    e = cudaMemsetAsync(a->ws.dq_accum, 0, rows * (size_t)p->D * sizeof(float), stream);
    if (e == cudaSuccess && p->deterministic)
        e = cudaMemsetAsync(a->ws.sem, 0, (size_t)(p->B * p->Hq * a->m_blocks) * sizeof(int), stream);
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 backward: %s", cudaGetErrorString(e));

    if (p->Sq > 0)
        sm80_bwd_preprocess<T><<<dim3((unsigned)((p->Sq + 7) / 8), (unsigned)p->Hq, (unsigned)p->B), 256, 0, stream>>>(*p, *a);
    const int64_t n_blocks = (p->Sk + BN - 1) / BN;
    if (n_blocks > 0)
        sm80_bwd_kernel<T, HD, NW, BN, BWD_BM><<<dim3((unsigned)n_blocks, (unsigned)p->Hk, (unsigned)p->B), NW * 32, smem, stream>>>(*p, *a);
    if (p->Sq > 0) /* with Sq == 0 the main kernel still writes dk = dv = 0 */
        sm80_bwd_convert<T><<<dim3((unsigned)((p->Sq + 7) / 8), (unsigned)p->Hq, (unsigned)p->B), 256, 0, stream>>>(*p, *a);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 backward: %s", cudaGetErrorString(e));
    return FA_OK;
}

template <typename T>
static fa_status dispatch(const fa_problem *p, const fa_exec *x, const bwd_args *a) {
    const int64_t hd = p->D > p->Dv ? p->D : p->Dv;
    if (hd <= 64) return run<T, 64, 8, 128>(p, x, a);
    if (hd <= 128) return run<T, 128, 8, 128>(p, x, a);
    return run<T, 256, 8, 64>(p, x, a);
}

extern "C" fa_status sm80_bwd(const fa_problem *p, const fa_exec *x) {
    if (p->B == 0 || p->Hq == 0) return FA_OK; /* no gradient has an element */
    if (p->Sq > 0x7fffffff || p->Hq > 65535 || p->B > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "sm80 backward: grid too large");
    bwd_args a;
    const size_t rows = (size_t)(p->B * p->Sq * p->Hq);
    char *w = (char *)x->workspace;
    a.ws.lse2 = (float *)w;
    w += round_up(rows * sizeof(float));
    a.ws.delta = (float *)w;
    w += round_up(rows * sizeof(float));
    a.ws.dq_accum = (float *)w;
    w += round_up(rows * (size_t)p->D * sizeof(float));
    a.ws.sem = (int *)w;
    a.m_blocks = (int)bwd_m_blocks(p);
    a.aligned_in = p->D % 8 == 0 && p->Dv % 8 == 0 && aligned16(&p->q) && aligned16(&p->k) && aligned16(&p->v) &&
                   aligned16(&p->dout);
    a.aligned_out = p->D % 4 == 0 && (uintptr_t)p->dq.data % 8 == 0 && p->dq.sb % 4 == 0 && p->dq.ss % 4 == 0 &&
                    p->dq.sh % 4 == 0 && (uintptr_t)a.ws.dq_accum % 16 == 0;
    a.aligned_od = p->Dv % 8 == 0 && aligned16(&p->out) && aligned16(&p->dout);
    a.drop_threshold = fa_dropout_threshold(p->dropout_p);
    a.drop_scale = p->dropout_p > 0.0f ? 1.0f / (1.0f - p->dropout_p) : 1.0f;
    a.inv_softcap = p->softcap > 0.0f ? 1.0f / p->softcap : 0.0f;
    a.scale_log2 = p->scale * LOG2E_F;
    a.dq_pairs = p->D % 2 == 0 && (uintptr_t)a.ws.dq_accum % 8 == 0;
    a.plain = !(p->softcap > 0.0f) && p->alibi == NULL && !(p->dropout_p > 0.0f);
    if (p->dtype == FA_BF16) return dispatch<__nv_bfloat16>(p, x, &a);
    return dispatch<__half>(p, x, &a);
}

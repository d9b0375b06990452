/*
 * Hopper backward attention kernel: TMA loads, wgmma, warp specialisation.
 *
 * One CTA per (key block, kv head, batch), 1 + 2 warpgroups:
 *   warpgroup 0    producer: one thread loads K and V once, then Q, dO, lse
 *                  and Delta of each query block through a two-stage
 *                  mbarrier ring (TMA for the tiles, bulk copies for the rows);
 *   warpgroups 1,2 consumers: keep dK and dV in registers across every query
 *                  block of every query head that reads this kv head (GQA
 *                  sums in place). Up to head dim 128 the block has 128 keys
 *                  and each consumer owns 64 of them; at head dims 192 and
 *                  256 (64 x 256 of dK and dV would not fit one warpgroup's
 *                  registers) the block has 64 keys and each consumer keeps
 *                  half of dK's and dV's columns; one computes S^T and P^T,
 *                  the other dP^T and dS^T, and they trade P^T and dS^T
 *                  through shared memory.
 *
 * Per query block of BM rows, a consumer computes (keys are the M dimension,
 * so every accumulator below is 64 keys x something):
 *   S^T  = K Q^T,  dP^T = V dO^T          SS wgmma, both from shared memory
 *   P^T  = exp2(S^T scale log2 e - lse2)  lse2 per query (column)
 *   dS^T = P^T (dP^T - Delta)
 *   dV  += P^T dO,  dK += dS^T Q          RS wgmma: P^T / dS^T straight from
 *                                         the accumulators, dO / Q MN-major
 *   dQ   = dS K                           SS wgmma with both operands MN-major:
 *                                         dS^T is staged in shared memory
 * and adds dQ into a float32 accumulator (TMA bulk reductions from shared
 * memory; at head dim 256 staged in the ring stage just used). Each
 * warpgroup forms 64 of dQ's rows (head dim 64, BM = 128) or half of its
 * columns (head dims 96 to 256, BM = 64; at 96 two overlapping 64s).
 *
 * Tiles of Q, dO, K and V lie in shared memory as column slabs of one
 * swizzle span (SW bytes) each, as TMA writes them. A consumer's columns
 * must start on a slab: at head dim 192 its half is 96 columns, one and a
 * half 128-byte spans, and at head dim 96 a row is one and a half, so there
 * the slabs are 64 bytes (32 columns).
 *
 * Accumulator layout (wgmma m64nN, f32), thread t of the warpgroup, warp
 * w = t/32, g = (t%32)/4, q = t%4: register i holds
 *     row 16w + g + 8*((i/2)%2),  column 8*(i/4) + 2q + (i%2),
 * and registers 8c..8c+7, packed pairwise to 16 bits, are the A fragment of
 * k-step c of an RS wgmma (see sm90_fwd_kernel.cuh).
 */
#ifndef FA_SM90_BWD_KERNEL_CUH
#define FA_SM90_BWD_KERNEL_CUH

#include <cuda.h>
#include <math.h>
#include <stdint.h>

#include "sm90_ptx.cuh"
#include "sm90_seq.cuh"
#include "sm90_wgmma.cuh"

/* Everything the kernel needs, passed by value as a __grid_constant__. */
struct Sm90BwdParams {
    CUtensorMap tm_q, tm_k, tm_v, tm_do; /* 4-D (D, S, H, B) maps, 128B swizzle */
    CUtensorMap tm_dq;                   /* 2-D (D, B*Hq*sq_pad) over dq_accum, boxes 32 x 64, 128B swizzle */
    /* Per (batch, query head, padded row): lse * log2(e) (+inf where a row sees
     * no key or lies past Sq, which makes its P zero) and rowsum(dO * O). */
    const float *lse2, *delta;
    float *dq_accum;                     /* (B, Hq, sq_pad, D) float32, already scaled */
    void *dk, *dv;                       /* outputs in the storage type */
    int64_t dk_sb, dk_ss, dk_sh, dv_sb, dv_ss, dv_sh; /* elements */
    int sq, sk, sq_pad, hq, hk, q_per_kv, head_dim; /* sq, sk: the lengths (varlen: maxima) */
    /* Varlen: first packed row of each sequence (B + 1 entries, device memory);
     * NULL for batched problems. The maps then span the packed rows (B = 1). */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int top_left;                        /* diagonal alignment: 0, else Sk - Sq of each sequence */
    int64_t window_left, window_right;   /* relative to the diagonal; FA_UNBOUNDED-sized when open */
    float scale, scale_log2;             /* softmax scale, and times log2(e) */
};

/* Compile-time tile shape and shared-memory plan. */
template <int D_, int BM_, bool BF16_>
struct Sm90BwdConfig {
    static constexpr int D = D_;       /* head dim (= Dv), padded: 64, 96, 128, 192 or 256 */
    static constexpr int BM = BM_;     /* query rows per block */
    static constexpr bool BF16 = BF16_;
    static constexpr int STAGES = 2;   /* query-block ring depth */
    static_assert((BM == 128 && D == 64) || (BM == 64 && (D == 96 || D == 128 || D == 192 || D == 256)),
                  "tile shapes: (D 64, BM 128), (D 96, 128, 192 or 256, BM 64)");
    /* The consumers split the keys (64 each) or, at D 192 and 256, dK's and dV's columns. */
    static constexpr bool SPLIT_KEYS = D <= 128;
    static constexpr int BN = SPLIT_KEYS ? 128 : 64; /* keys per CTA */
    static constexpr int DKV_N = SPLIT_KEYS ? D : D / 2; /* dK / dV columns per consumer */
    /* dQ per consumer: 64 rows x DQ_N columns; split by rows (D 64) or columns. */
    static constexpr bool DQ_SPLIT_COLS = BM == 64;
    /* Split by columns, consumer 1's start at DQ_COL1. At D 96 halves (48
     * columns) would start inside a slab (below), so each consumer forms 64
     * columns, consumer 1 from column 32: the middle 32 are formed twice and
     * added by consumer 0 only (DQ_SKIP1: consumer 1's 32-column boxes left
     * out). Consumer 0 paces the block either way. */
    static constexpr int DQ_N = !DQ_SPLIT_COLS ? D : D == 96 ? 64 : D / 2;
    static constexpr int DQ_COL1 = DQ_SPLIT_COLS ? D - DQ_N : 0;
    static constexpr int DQ_SKIP1 = DQ_SPLIT_COLS ? (DQ_N - DQ_COL1) / 32 : 0;
    /* The column slabs' swizzle span: 128 bytes, or 64 where a consumer's
     * columns of dK, dV or dQ would start inside a 128-byte span (head dim
     * 192: 96 columns each; head dim 96: dK and dV's 96, dQ's from 32). */
    static constexpr int SW = DKV_N % 64 == 0 && DQ_N % 64 == 0 && DQ_COL1 % 64 == 0 ? 128 : 64;
    static_assert(DKV_N % 32 == 0 && DQ_N % 32 == 0 && DQ_COL1 % 32 == 0, "consumers' columns: whole 64-byte slabs");
    static constexpr int SLAB_COLS = SW / 2; /* 16-bit columns of a slab */
    static constexpr int SLABS = D / SLAB_COLS;
    /* dQ leaves through shared memory with TMA bulk reductions (64 x DQ_N
     * per consumer, as 32-column boxes). At D 256, where the shared memory is
     * full, each consumer stages it in the ring stage it has just used (Q's
     * tile for consumer 0, dO's for consumer 1: 32 KB each, the size of a
     * staged 64 x 128 float32 block), and the stage goes back to the
     * producer once the reductions have read it. */
    static constexpr bool DQ_IN_RING = D == 256;
    static constexpr int DQ_STAGE = 64 * DQ_N * 4; /* one consumer's staged dQ */

    static constexpr int Q_SLAB = BM * SW;  /* one slab of a Q or dO tile */
    static constexpr int KV_SLAB = BN * SW; /* one slab of K or V */
    static constexpr int DS_SLAB = BN * 128; /* 64 query columns of dS^T (or P^T) for the block's keys */
    static constexpr int Q_BYTES = BM * D * 2;
    static constexpr int KV_BYTES = BN * D * 2;
    static constexpr int DS_BYTES = BN * BM * 2;
    static constexpr int ROW_BYTES = BM * 4; /* lse2 or Delta of one block */

    static constexpr int OFF_K = 0;
    static constexpr int OFF_V = OFF_K + KV_BYTES;
    static constexpr int OFF_Q = OFF_V + KV_BYTES;
    static constexpr int OFF_DO = OFF_Q + STAGES * Q_BYTES;
    /* dS^T: two buffers alternating per block when the consumers split the
     * keys; at D 192 and 256 one, plus one for P^T (see the consumer). */
    static constexpr int DS_BUFS = SPLIT_KEYS ? 2 : 1;
    static constexpr int OFF_DS = OFF_DO + STAGES * Q_BYTES;
    static constexpr int OFF_PT = OFF_DS + DS_BUFS * DS_BYTES;
    static constexpr int OFF_DQ = OFF_PT + (SPLIT_KEYS ? 0 : DS_BYTES);
    static constexpr int OFF_LSE = OFF_DQ + (DQ_IN_RING ? 0 : 2 * DQ_STAGE);
    static constexpr int OFF_DELTA = OFF_LSE + STAGES * ROW_BYTES;
    static constexpr int OFF_BAR = OFF_DELTA + STAGES * ROW_BYTES;
    static constexpr int NUM_BARS = 1 + 2 * STAGES; /* kv_full, rows_full[], rows_empty[] */
    static constexpr int SMEM_BYTES = OFF_BAR + NUM_BARS * 8 + 1024; /* + 1024: base rounded to the swizzle atom */
    static_assert(SMEM_BYTES <= 227 * 1024, "shared memory plan exceeds the opt-in limit");
    static_assert(!DQ_IN_RING || DQ_STAGE == Q_BYTES, "dQ staged in a Q or dO tile");
    /* transaction bytes of one ring stage: Q, dO, lse2, Delta */
    static constexpr uint32_t STAGE_TX = 2 * Q_BYTES + 2 * ROW_BYTES;

    static constexpr int THREADS = 384;
    static constexpr int PRODUCER_REGS = 24;
    static constexpr int CONSUMER_REGS = 240;
    static_assert(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * (65536 / THREADS / 8 * 8),
                  "register split exceeds the launch allocation");
};

/* Named barriers between the two consumer warpgroups (0 is __syncthreads),
 * each passed by both: both halves of dS^T written; and at D 192 and 256, where one
 * warpgroup forms P^T and the other dS^T: P^T written, dS^T written (there
 * the two pass each barrier at different places in the code, so not with
 * the aligned bar.sync: named_bar_sync_apart). */
enum {
    BWD_BAR_DS = 1,
    BWD_BAR_P_READY = 2,
    BWD_BAR_DS_READY = 3,
    BWD_BAR_DQ0 = 4,      /* + warpgroup: its dQ staged */
    BWD_BAR_RING_READ = 6 /* DQ_IN_RING: both consumers' products have read the stage's Q and dO */
};

/* One sequence of the batch (sm90_seq.cuh). */
__device__ __forceinline__ Sm90Seq sm90_bwd_seq(const Sm90BwdParams &p, int b) {
    return sm90_seq(p, p.cu_seqlens_q != nullptr, b);
}

/* The query blocks that see some key of a key block, and the work list. */
struct Sm90BwdWork {
    int n0;          /* first key of the block */
    int m_lo, count; /* query blocks [m_lo, m_lo + count) of each query head */
    int total;       /* count * query heads per kv head */
};

template <class Cfg>
__device__ __forceinline__ Sm90BwdWork sm90_bwd_work(const Sm90BwdParams &p, const Sm90Seq &s, int n_block) {
    Sm90BwdWork w;
    w.n0 = n_block * Cfg::BN;
    const int64_t n1 = min(w.n0 + Cfg::BN, s.seq_k);
    /* key j is visible from query i when i + diag - wl <= j <= i + diag + wr */
    int64_t i_begin = (int64_t)w.n0 - s.diag - p.window_right;
    int64_t i_end = n1 - s.diag + p.window_left; /* exclusive */
    i_begin = max(i_begin, (int64_t)0);
    i_end = min(i_end, (int64_t)s.seq_q);
    w.m_lo = (int)(i_begin / Cfg::BM);
    /* a varlen sequence shorter than the longest has no keys in its last blocks */
    w.count = i_end > i_begin && w.n0 < s.seq_k ? (int)((i_end + Cfg::BM - 1) / Cfg::BM) - w.m_lo : 0;
    w.total = w.count * p.q_per_kv;
    return w;
}

/* The work list's items in order: item k is query head hk * q_per_kv + k /
 * count and query block m_lo + (k % count + n_block) % count. Key blocks
 * start at different query blocks so that concurrent CTAs add into
 * different rows of the dQ accumulator. Stepped from one item to the next,
 * not divided out for each: the divisions sat in front of each block's
 * first products. */
struct Sm90BwdItem {
    int head, m_block; /* the current item */
    int in_head;       /* its place among its head's items */
    __device__ __forceinline__ Sm90BwdItem(const Sm90BwdWork &w, int n_block, int hk, int q_per_kv)
        : head(hk * q_per_kv), m_block(w.count > 0 ? w.m_lo + n_block % w.count : 0), in_head(0) {}
    __device__ __forceinline__ void next(const Sm90BwdWork &w) {
        if (++m_block == w.m_lo + w.count) m_block = w.m_lo; /* after count steps it is back at the start */
        if (++in_head == w.count) {
            in_head = 0;
            ++head;
        }
    }
};

/* ---- producer -------------------------------------------------------------- */

template <class Cfg>
__device__ __forceinline__ void sm90_bwd_producer(const Sm90BwdParams &p, uint8_t *smem, uint64_t *bars) {
    uint64_t *kv_full = bars, *rows_full = bars + 1, *rows_empty = bars + 1 + Cfg::STAGES;
    const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const Sm90Seq sq = sm90_bwd_seq(p, b);
    const Sm90BwdWork w = sm90_bwd_work<Cfg>(p, sq, n_block);
    if (w.total == 0) return; /* the consumers write zeros and wait for nothing */
    tma_prefetch_map(&p.tm_q);
    tma_prefetch_map(&p.tm_do);
    mbar_arrive_expect_tx(kv_full, 2 * Cfg::KV_BYTES);
    for (int s = 0; s < Cfg::SLABS; ++s) {
        /* varlen: a block crossing the sequence end also brings the next
         * sequence's first keys; the consumers mask them */
        const int col = s * Cfg::SLAB_COLS;
        tma_load_4d(smem + Cfg::OFF_K + s * Cfg::KV_SLAB, &p.tm_k, kv_full, col, sq.k_row0 + w.n0, hk, sq.map_b);
        tma_load_4d(smem + Cfg::OFF_V + s * Cfg::KV_SLAB, &p.tm_v, kv_full, col, sq.k_row0 + w.n0, hk, sq.map_b);
    }
    Sm90BwdItem item(w, n_block, hk, p.q_per_kv);
    for (int k = 0; k < w.total; ++k, item.next(w)) {
        const int head = item.head, m_block = item.m_block;
        const int stage = k % Cfg::STAGES;
        /* a fresh barrier counts as having completed the phase before phase 0 */
        mbar_wait(&rows_empty[stage], ((k / Cfg::STAGES) & 1) ^ 1);
        uint64_t *full = &rows_full[stage];
        mbar_arrive_expect_tx(full, Cfg::STAGE_TX);
        const int row0 = m_block * Cfg::BM;
        for (int s = 0; s < Cfg::SLABS; ++s) {
            const int slab = stage * Cfg::Q_BYTES + s * Cfg::Q_SLAB;
            /* rows past the sequence end have lse2 = +inf: their P is 0 */
            const int col = s * Cfg::SLAB_COLS;
            tma_load_4d(smem + Cfg::OFF_Q + slab, &p.tm_q, full, col, sq.q_row0 + row0, head, sq.map_b);
            tma_load_4d(smem + Cfg::OFF_DO + slab, &p.tm_do, full, col, sq.q_row0 + row0, head, sq.map_b);
        }
        const int64_t rows = ((int64_t)b * p.hq + head) * p.sq_pad + row0; /* padded: whole blocks exist */
        bulk_load(smem + Cfg::OFF_LSE + stage * Cfg::ROW_BYTES, p.lse2 + rows, Cfg::ROW_BYTES, full);
        bulk_load(smem + Cfg::OFF_DELTA + stage * Cfg::ROW_BYTES, p.delta + rows, Cfg::ROW_BYTES, full);
    }
}

/* ---- consumer ---------------------------------------------------------------- */

/* The descriptors of the column-slab tiles (Q, dO, K, V). */
template <class Cfg> using Sm90BwdDesc = DescSw<Cfg::SW>;

/* acc (64 keys x N) = A B^T over the head dim: A = this warpgroup's 64 rows
 * of K or V, B = the N rows of Q or dO; both K-major. */
template <class Cfg, int N>
__device__ __forceinline__ void sm90_bwd_issue_ss(float *acc, uint32_t a_addr, uint32_t b_addr, uint32_t b_slab) {
    const Sm90BwdDesc<Cfg> ad(a_addr, 16), bd(b_addr, 16);
    constexpr int STEPS = Cfg::SW / 32; /* k-steps (16 columns, 32 bytes) a slab */
#pragma unroll
    for (int k = 0; k < Cfg::D / 16; ++k) {
        const uint32_t off = (k % STEPS) * 32; /* inside slab k / STEPS */
        wgmma_ss<N, Cfg::BF16, false>(acc, ad.at((k / STEPS) * Cfg::KV_SLAB + off),
                                      bd.at((k / STEPS) * b_slab + off), k > 0);
    }
}

/* The same product issued alone and waited for (head dims 192 and 256, where each
 * consumer forms one of S^T and dP^T): acc is the caller's when it returns. */
template <class Cfg, int N>
__device__ __forceinline__ void sm90_bwd_ss_sync(float *acc, uint32_t a_addr, uint32_t b_addr, uint32_t b_slab) {
    fence_regs<N / 2>(acc);
    wgmma_fence();
    sm90_bwd_issue_ss<Cfg, N>(acc, a_addr, b_addr, b_slab);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs<N / 2>(acc);
}

/* acc (64 keys x DKV_N) += A B: A = 64 x BM from registers (P^T or dS^T),
 * B = DKV_N columns of the BM-row tile of dO or Q, MN-major: k-step c is its
 * rows 16c..16c+15, its column slabs Q_SLAB bytes apart. */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_issue_rs(float *acc, const uint32_t *a, uint32_t b_addr) {
    const Sm90BwdDesc<Cfg> bd(b_addr, Cfg::Q_SLAB);
#pragma unroll
    for (int c = 0; c < Cfg::BM / 16; ++c)
        wgmma_rs<Cfg::DKV_N, Cfg::BF16, false>(acc, a + 4 * c, bd.at(c * 16 * Cfg::SW), 1);
}

/* dV += P^T dO and dK += dS^T Q with P^T, dS^T from registers (one commit
 * group); do_cols / q_cols: the first slab of this warpgroup's columns. */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_issue_dv_dk(float *dV, float *dK, uint32_t *Pa, uint32_t *dSa,
                                                     uint32_t do_cols, uint32_t q_cols) {
    fence_regs<Cfg::DKV_N / 2>(dV);
    fence_regs<Cfg::DKV_N / 2>(dK);
    fence_regs<Cfg::BM / 4>(Pa);
    fence_regs<Cfg::BM / 4>(dSa);
    wgmma_fence();
    sm90_bwd_issue_rs<Cfg>(dV, Pa, do_cols);
    sm90_bwd_issue_rs<Cfg>(dK, dSa, q_cols);
    wgmma_commit();
}

/* Byte offset of element (key r, query c) in a [query slab][key][64 queries]
 * 128B-swizzled tile (dS^T, P^T): the 16-byte chunk index XOR (r mod 8). */
template <class Cfg>
__device__ __forceinline__ uint32_t sm90_bwd_tile_off(int r, int c) {
    return (c / 64) * Cfg::DS_SLAB + r * 128 + ((((c % 64) / 8) ^ (r % 8)) * 16) + (c % 8) * 2;
}

/* Offset of this thread's register pair 2j of a 64 x BM accumulator in such a tile. */
template <class Cfg>
__device__ __forceinline__ uint32_t sm90_bwd_pair_off(int j, int key_row, int quad_col) {
    return sm90_bwd_tile_off<Cfg>(key_row + 8 * (j % 2), 8 * (j / 2) + quad_col);
}

/* Packed pairs (16-bit values of such an accumulator) to the tile. */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_store_pairs(uint8_t *tile, const uint32_t *pairs, int key_row, int quad_col) {
#pragma unroll
    for (int j = 0; j < Cfg::BM / 4; ++j)
        *reinterpret_cast<uint32_t *>(tile + sm90_bwd_pair_off<Cfg>(j, key_row, quad_col)) = pairs[j];
}

/* P^T = exp2(S^T scale log2(e) - lse2) in place, with the mask. Rows past
 * the sequence end have lse2 = +inf (P = 0); keys past it are hidden here
 * (batched: TMA's zeros; varlen: the next sequence's keys). */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_probs(float *St, const float *lse2, const Sm90BwdParams &p,
                                               const Sm90Seq &sq, int n0, int m0, int key_row, int quad_col) {
#pragma unroll
    for (int i = 0; i < Cfg::BM / 2; i += 2) {
        const float2 l2 = *reinterpret_cast<const float2 *>(lse2 + 8 * (i / 4) + quad_col);
        St[i] = fast_exp2(fmaf(St[i], p.scale_log2, -l2.x));
        St[i + 1] = fast_exp2(fmaf(St[i + 1], p.scale_log2, -l2.y));
    }
    const int64_t d_lo = sq.diag - p.window_left, d_hi = sq.diag + p.window_right; /* of key - query */
    if ((int64_t)n0 - (m0 + Cfg::BM - 1) < d_lo || (int64_t)n0 + Cfg::BN - 1 - m0 > d_hi || n0 + Cfg::BN > sq.seq_k) {
#pragma unroll
        for (int i = 0; i < Cfg::BM / 2; ++i) {
            const int key = n0 + key_row + 8 * ((i / 2) % 2);
            const int64_t rel = (int64_t)key - (m0 + 8 * (i / 4) + quad_col + (i % 2));
            if (rel < d_lo || rel > d_hi || key >= sq.seq_k) St[i] = 0.f;
        }
    }
}

/* Issue dQ (64 x DQ_N of it) = dS K: A = dS^T as MN-major (a k-step is 16
 * keys = 16 rows), B = K's slabs as MN-major; no commit. */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_issue_dq(float *dQ, uint32_t ds_a, uint32_t k_b) {
    const DescSw128 ad(ds_a, Cfg::DS_SLAB);
    const Sm90BwdDesc<Cfg> bd(k_b, Cfg::KV_SLAB);
#pragma unroll
    for (int kk = 0; kk < Cfg::BN / 16; ++kk)
        wgmma_ss_tt<Cfg::DQ_N, Cfg::BF16>(dQ, ad.at(kk * 16 * 128), bd.at(kk * 16 * Cfg::SW), kk > 0);
}

/* dQ * scale into the accumulator through shared memory: this warpgroup's
 * 64 x DQ_N block staged as 128B-swizzled 32-column boxes (conflict-free:
 * a quad's column pairs share 16-byte chunks, its 8 rows are spread by the
 * swizzle), then one thread adds the boxes with TMA bulk reductions. The
 * caller guarantees the previous reduction has finished reading the stage. */
template <class Cfg>
__device__ __forceinline__ void sm90_bwd_reduce_dq(const Sm90BwdParams &p, const float *dQ, uint8_t *stage, int wg,
                                                   int tid, int row_in_wg, int quad_col, int64_t acc_row, int acc_col) {
    const int first = wg == 1 ? Cfg::DQ_SKIP1 : 0; /* the first box this warpgroup adds */
#pragma unroll
    for (int i = 0; i < Cfg::DQ_N / 2; i += 2) {
        const int r = row_in_wg + 8 * ((i / 2) % 2), c = 8 * (i / 4) + quad_col; /* c: 0..DQ_N-1 */
        if (c / 32 < first) continue;
        const uint32_t off = (c / 32) * (64 * 128) + r * 128 + ((((c % 32) / 4) ^ (r % 8)) * 16) + (c % 4) * 4;
        *reinterpret_cast<float2 *>(stage + off) = make_float2(dQ[i] * p.scale, dQ[i + 1] * p.scale);
    }
    fence_proxy_async_smem(); /* generic writes -> visible to the TMA engine */
    named_bar_sync(BWD_BAR_DQ0 + wg, 128);
    if (tid == 0) {
        /* the boxes one by one, not in a loop (whose form moved ptxas's
         * schedule of the head-dim-64 and 128 kernels) */
        static_assert(Cfg::DQ_N == 64 || Cfg::DQ_N == 96 || Cfg::DQ_N == 128, "dQ staged as 2-4 32-column boxes");
        static_assert(Cfg::DQ_SKIP1 <= 1, "consumer 1 leaves out its first box at most");
        if (first == 0) tma_reduce_add_2d(&p.tm_dq, stage, acc_col, (int)acc_row);
        tma_reduce_add_2d(&p.tm_dq, stage + 64 * 128, acc_col + 32, (int)acc_row);
        if constexpr (Cfg::DQ_N >= 96) /* head dims 192 and 256 */
            tma_reduce_add_2d(&p.tm_dq, stage + 2 * (64 * 128), acc_col + 64, (int)acc_row);
        if constexpr (Cfg::DQ_N == 128) /* head dim 256 */
            tma_reduce_add_2d(&p.tm_dq, stage + 3 * (64 * 128), acc_col + 96, (int)acc_row);
        tma_store_commit();
    }
}

template <class Cfg>
__device__ __forceinline__ void sm90_bwd_consumer(const Sm90BwdParams &p, uint8_t *smem, uint64_t *bars, int wg) {
    uint64_t *kv_full = bars, *rows_full = bars + 1, *rows_empty = bars + 1 + Cfg::STAGES;
    const int n_block = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, quad_col = 2 * (lane % 4);
    const int wg_keys = Cfg::SPLIT_KEYS ? wg * 64 : 0;    /* this warpgroup's first key of the block */
    const int key_row = wg_keys + warp * 16 + g;          /* this thread's keys: key_row, key_row + 8 */
    const int dkv_col0 = Cfg::SPLIT_KEYS ? 0 : wg * Cfg::DKV_N; /* this warpgroup's dK / dV columns */
    const Sm90Seq sq = sm90_bwd_seq(p, b);
    const Sm90BwdWork w = sm90_bwd_work<Cfg>(p, sq, n_block);

    const uint32_t k_addr = smem_addr(smem + Cfg::OFF_K), v_addr = smem_addr(smem + Cfg::OFF_V);
    const uint32_t kv_rows = wg_keys * Cfg::SW; /* this warpgroup's 64 rows inside each K / V slab */
    /* dQ (this warpgroup's rows at D 64, else columns of it): where its operands start */
    const uint32_t dq_a_off = Cfg::DQ_SPLIT_COLS ? 0 : wg * Cfg::DS_SLAB;
    const uint32_t dq_b = k_addr + wg * (Cfg::DQ_COL1 / Cfg::SLAB_COLS) * Cfg::KV_SLAB;

    float dK[Cfg::DKV_N / 2], dV[Cfg::DKV_N / 2];
#pragma unroll
    for (int i = 0; i < Cfg::DKV_N / 2; ++i) dK[i] = dV[i] = 0.f;

    if (w.total > 0) mbar_wait(kv_full, 0);
    Sm90BwdItem item(w, n_block, hk, p.q_per_kv);
    for (int k = 0; k < w.total; ++k, item.next(w)) {
        const int head = item.head, m_block = item.m_block;
        const int stage = k % Cfg::STAGES;
        const uint32_t q_addr = smem_addr(smem + Cfg::OFF_Q + stage * Cfg::Q_BYTES);
        const uint32_t do_addr = smem_addr(smem + Cfg::OFF_DO + stage * Cfg::Q_BYTES);
        const float *lse2 = reinterpret_cast<const float *>(smem + Cfg::OFF_LSE + stage * Cfg::ROW_BYTES);
        const float *delta = reinterpret_cast<const float *>(smem + Cfg::OFF_DELTA + stage * Cfg::ROW_BYTES);
        uint8_t *ds = smem + Cfg::OFF_DS + (k % Cfg::DS_BUFS) * Cfg::DS_BYTES; /* dS^T */
        const uint32_t cols = (dkv_col0 / Cfg::SLAB_COLS) * Cfg::Q_SLAB; /* first slab of this warpgroup's dK / dV columns */
        const int m0 = m_block * Cfg::BM;
        uint32_t Pa[Cfg::BM / 4], dSa[Cfg::BM / 4]; /* P^T, dS^T as 16-bit A fragments */
        float dQ[Cfg::DQ_N / 2];

        mbar_wait(&rows_full[stage], (k / Cfg::STAGES) & 1);
        /* The previous block's dQ reduction must have read its staging
         * before this block's dQ goes there. The thread that issued it waits
         * for that just before the dS^T barrier below (P^T's at head dim
         * 192), which tells the warpgroup's other threads: by then the
         * block's first products and its elementwise work lie between the
         * two. Waited for here, in front of those products, the reduction's
         * read delayed them. At head dim 256 (DQ_IN_RING) the staging was the
         * previous block's ring stage, whose last arrival waits for the read
         * too, so it goes back to the producer as early as it can. */
        if (Cfg::DQ_IN_RING && tid == 0) {
            tma_store_wait_read();
            if (k > 0) mbar_arrive(&rows_empty[(k - 1) % Cfg::STAGES]);
        }

        if constexpr (Cfg::SPLIT_KEYS) {
            /* S^T = K Q^T and dP^T = V dO^T for this warpgroup's keys. */
            float St[Cfg::BM / 2], dPt[Cfg::BM / 2];
            fence_regs<Cfg::BM / 2>(St);
            fence_regs<Cfg::BM / 2>(dPt);
            wgmma_fence();
            sm90_bwd_issue_ss<Cfg, Cfg::BM>(St, k_addr + kv_rows, q_addr, Cfg::Q_SLAB);
            wgmma_commit();
            sm90_bwd_issue_ss<Cfg, Cfg::BM>(dPt, v_addr + kv_rows, do_addr, Cfg::Q_SLAB);
            wgmma_commit();
            wgmma_wait<1>();
            fence_regs<Cfg::BM / 2>(St);
            sm90_bwd_probs<Cfg>(St, lse2, p, sq, w.n0, m0, key_row, quad_col);
            wgmma_wait<0>();
            fence_regs<Cfg::BM / 2>(dPt);
            /* dS^T = P^T (dP^T - Delta) */
#pragma unroll
            for (int i = 0; i < Cfg::BM / 2; i += 2) {
                const float2 dl = *reinterpret_cast<const float2 *>(delta + 8 * (i / 4) + quad_col);
                Pa[i / 2] = pack2<elem16_t<Cfg::BF16>>(St[i], St[i + 1]);
                dSa[i / 2] = pack2<elem16_t<Cfg::BF16>>(St[i] * (dPt[i] - dl.x), St[i + 1] * (dPt[i + 1] - dl.y));
            }
            /* dS^T to shared memory for dQ before its registers go to the
             * tensor cores (an in-flight wgmma's A registers may not be read).
             * The buffer alternates per block: the barrier below, one block
             * ago, ordered its last reader (the dQ of two blocks ago, waited
             * for by both warpgroups) before this write. */
            sm90_bwd_store_pairs<Cfg>(ds, dSa, key_row, quad_col);
            sm90_bwd_issue_dv_dk<Cfg>(dV, dK, Pa, dSa, do_addr + cols, q_addr + cols);
            fence_proxy_async_smem(); /* generic-proxy writes -> visible to wgmma */
            if (tid == 0) tma_store_wait_read(); /* the previous dQ staging read (above) */
            named_bar_sync(BWD_BAR_DS, 256); /* both halves of dS^T written */
            fence_regs<Cfg::DQ_N / 2>(dQ);
            wgmma_fence();
            sm90_bwd_issue_dq<Cfg>(dQ, smem_addr(ds) + dq_a_off, dq_b);
            wgmma_commit();
            wgmma_wait<1>(); /* dV, dK done */
        } else if (wg == 0) {
            /* D 192 and 256, the S warpgroup: S^T = K Q^T, P^T, shared with the other
             * warpgroup through shared memory; dV's columns from registers,
             * dK's with dS^T from shared memory. */
            uint8_t *pt = smem + Cfg::OFF_PT;
            float St[Cfg::BM / 2];
            sm90_bwd_ss_sync<Cfg, Cfg::BM>(St, k_addr, q_addr, Cfg::Q_SLAB);
            sm90_bwd_probs<Cfg>(St, lse2, p, sq, w.n0, m0, key_row, quad_col);
#pragma unroll
            for (int i = 0; i < Cfg::BM / 2; i += 2) Pa[i / 2] = pack2<elem16_t<Cfg::BF16>>(St[i], St[i + 1]);
            /* The dP warpgroup read the previous P^T before the last dS^T barrier. */
            sm90_bwd_store_pairs<Cfg>(pt, Pa, key_row, quad_col);
            if (!Cfg::DQ_IN_RING && tid == 0) tma_store_wait_read(); /* the previous dQ staging read (above) */
            named_bar_sync_apart(BWD_BAR_P_READY, 256);
            fence_regs<Cfg::DKV_N / 2>(dV);
            fence_regs<Cfg::BM / 4>(Pa);
            wgmma_fence();
            sm90_bwd_issue_rs<Cfg>(dV, Pa, do_addr + cols);
            wgmma_commit();
            named_bar_sync_apart(BWD_BAR_DS_READY, 256); /* dS^T written (and made visible to wgmma) */
            wgmma_wait<0>(); /* dV done: P^T's registers are free for dQ's */
            fence_regs<Cfg::DKV_N / 2>(dV);
            fence_regs<Cfg::DKV_N / 2>(dK);
            fence_regs<Cfg::DQ_N / 2>(dQ);
            wgmma_fence();
            /* dK += dS^T Q: A = dS^T K-major (16 queries = 32 bytes a k-step), B = Q MN-major */
            const DescSw128 dsd(smem_addr(ds), 16);
            const Sm90BwdDesc<Cfg> qd(q_addr + cols, Cfg::Q_SLAB);
#pragma unroll
            for (int c = 0; c < Cfg::BM / 16; ++c)
                wgmma_ss_kt<Cfg::DKV_N, Cfg::BF16>(dK, dsd.at(c * 32), qd.at(c * 16 * Cfg::SW), 1);
            sm90_bwd_issue_dq<Cfg>(dQ, smem_addr(ds) + dq_a_off, dq_b);
            wgmma_commit();
            wgmma_wait<0>();
        } else {
            /* D 192 and 256, the dP warpgroup: dP^T = V dO^T, P^T from the S
             * warpgroup, dS^T; dV's and dK's columns from registers. */
            const uint8_t *pt = smem + Cfg::OFF_PT;
            float dPt[Cfg::BM / 2];
            sm90_bwd_ss_sync<Cfg, Cfg::BM>(dPt, v_addr, do_addr, Cfg::Q_SLAB);
            if (!Cfg::DQ_IN_RING && tid == 0) tma_store_wait_read(); /* the previous dQ staging read (above) */
            named_bar_sync_apart(BWD_BAR_P_READY, 256);
#pragma unroll
            for (int j = 0; j < Cfg::BM / 4; ++j)
                Pa[j] = *reinterpret_cast<const uint32_t *>(pt + sm90_bwd_pair_off<Cfg>(j, key_row, quad_col));
            /* dS^T = P^T (dP^T - Delta), with P^T as the S warpgroup rounded it */
#pragma unroll
            for (int i = 0; i < Cfg::BM / 2; i += 2) {
                const float2 dl = *reinterpret_cast<const float2 *>(delta + 8 * (i / 4) + quad_col);
                const float2 pr = unpack2<elem16_t<Cfg::BF16>>(Pa[i / 2]);
                dSa[i / 2] = pack2<elem16_t<Cfg::BF16>>(pr.x * (dPt[i] - dl.x), pr.y * (dPt[i + 1] - dl.y));
            }
            /* One dS^T buffer: the S warpgroup's last reads of it (the previous
             * block's dK and dQ) finished before it passed the P^T barrier. */
            sm90_bwd_store_pairs<Cfg>(ds, dSa, key_row, quad_col);
            fence_proxy_async_smem(); /* generic-proxy writes -> visible to wgmma */
            named_bar_sync_apart(BWD_BAR_DS_READY, 256);
            sm90_bwd_issue_dv_dk<Cfg>(dV, dK, Pa, dSa, do_addr + cols, q_addr + cols);
            wgmma_wait<0>(); /* dV, dK done: P^T's and dS^T's registers are free for dQ's */
            fence_regs<Cfg::DKV_N / 2>(dV);
            fence_regs<Cfg::DKV_N / 2>(dK);
            fence_regs<Cfg::DQ_N / 2>(dQ);
            wgmma_fence();
            sm90_bwd_issue_dq<Cfg>(dQ, smem_addr(ds) + dq_a_off, dq_b);
            wgmma_commit();
        }
        fence_regs<Cfg::DKV_N / 2>(dV);
        fence_regs<Cfg::DKV_N / 2>(dK);
        /* Q, dO, lse2 and Delta of this stage are free. Every thread arrives:
         * an arrive releases only the arriving thread's own reads. With
         * DQ_IN_RING the stage also takes this block's dQ, so the thread that
         * issues its reductions arrives once they have read it. */
        if (!(Cfg::DQ_IN_RING && tid == 0)) mbar_arrive(&rows_empty[stage]);
        wgmma_wait<0>();
        fence_regs<Cfg::DQ_N / 2>(dQ);
        uint8_t *dq_stage = smem + Cfg::OFF_DQ + wg * Cfg::DQ_STAGE;
        if constexpr (Cfg::DQ_IN_RING) {
            /* the other consumer's products have read Q and dO too */
            named_bar_sync(BWD_BAR_RING_READ, 256);
            dq_stage = smem + (wg == 0 ? Cfg::OFF_Q : Cfg::OFF_DO) + stage * Cfg::Q_BYTES;
        }
        sm90_bwd_reduce_dq<Cfg>(p, dQ, dq_stage, wg, tid, warp * 16 + g, quad_col,
                                ((int64_t)b * p.hq + head) * p.sq_pad + m0 + (Cfg::DQ_SPLIT_COLS ? 0 : wg * 64),
                                wg * Cfg::DQ_COL1);
    }
    /* shared memory must outlive the last reduction (the ring's last
     * arrivals are not needed: the producer has issued every load) */
    if (tid == 0) tma_store_wait_all();

    /* dK = scale * sum dS^T Q and dV = sum P^T dO for the keys inside the
     * sequence (its lengths read again rather than kept through the loop). */
    const Sm90Seq s_end = sm90_bwd_seq(p, opaque_int(b));
#pragma unroll
    for (int i = 0; i < Cfg::DKV_N / 2; i += 2) {
        const int key = w.n0 + key_row + 8 * ((i / 2) % 2), col = dkv_col0 + 8 * (i / 4) + quad_col;
        if (key >= s_end.seq_k || col >= p.head_dim) continue;
        const int64_t row = s_end.k_row0 + key; /* varlen views have a batch stride of 0 */
        uint16_t *dk = (uint16_t *)p.dk + (int64_t)b * p.dk_sb + row * p.dk_ss + (int64_t)hk * p.dk_sh + col;
        uint16_t *dv = (uint16_t *)p.dv + (int64_t)b * p.dv_sb + row * p.dv_ss + (int64_t)hk * p.dv_sh + col;
        *reinterpret_cast<uint32_t *>(dk) = pack2<elem16_t<Cfg::BF16>>(dK[i] * p.scale, dK[i + 1] * p.scale);
        *reinterpret_cast<uint32_t *>(dv) = pack2<elem16_t<Cfg::BF16>>(dV[i], dV[i + 1]);
    }
}

/* ---- kernel ------------------------------------------------------------------- */

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) sm90_bwd_kernel(const __grid_constant__ Sm90BwdParams p) {
    extern __shared__ uint8_t smem_raw[];
    /* swizzle atoms are 1024 B and addressed absolutely: align the base */
    uint8_t *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + Cfg::OFF_BAR);
    if (threadIdx.x == 0) {
        mbar_init(&bars[0], 1); /* kv_full: the producer's expect_tx arrive */
        for (int s = 0; s < Cfg::STAGES; ++s) {
            mbar_init(&bars[1 + s], 1);                /* rows_full */
            mbar_init(&bars[1 + Cfg::STAGES + s], 256); /* rows_empty: every consumer thread */
        }
        mbar_fence_init();
        grid_launch_dependents(); /* dQ's conversion may launch; it waits for this grid */
    }
    __syncthreads();
    grid_dependency_wait(); /* launched early (bwd_run): the row statistics must be done */
    const int wg = warp_uniform((int)threadIdx.x / 128);
    if (wg == 0) {
        regs_dealloc<Cfg::PRODUCER_REGS>();
        if (threadIdx.x == 0) sm90_bwd_producer<Cfg>(p, smem, bars);
    } else {
        regs_alloc<Cfg::CONSUMER_REGS>();
        sm90_bwd_consumer<Cfg>(p, smem, bars, wg - 1);
    }
}

#endif /* FA_SM90_BWD_KERNEL_CUH */

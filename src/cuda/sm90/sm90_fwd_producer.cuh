/*
 * Hopper forward: the producer warpgroup's TMA loads of Q, K and V into the
 * shared-memory rings.
 */
#ifndef FA_SM90_FWD_PRODUCER_CUH
#define FA_SM90_FWD_PRODUCER_CUH

#include "sm90_fwd_l2.cuh"
#include "sm90_fwd_schedule.cuh"
#include "sm90_ptx.cuh"

/* Two producer threads walk the same tiles and kv blocks: one loads Q and K,
 * the other V. Each waits only on its own ring, so a K load is never queued
 * behind a V load that waits for a P V to finish: K is needed a turn before
 * V (a turn issues Q K_n^T and P_{n+1} V_{n+1}). With Q_OWN_THREAD a third
 * walks the tiles and loads Q alone (LOAD_Q), the first K alone. */
enum { LOAD_Q_K = 0, LOAD_V = 1, LOAD_Q = 2 };

/* The q_full / q_empty barrier of consumer wg's rows of Q buffer qb (the
 * producer loads on it, the consumer waits on it and frees it): the
 * buffer's, or with Q_HALVES one of the consumer's own. */
template <class Cfg> __device__ __forceinline__ uint32_t sm90_q_bar(uint32_t qb, int wg) {
    return Cfg::Q_HALVES ? qb * Cfg::CONSUMERS + wg : qb;
}

/* Consumer c's 64 rows of Q buffer qb (the box of a per-consumer map,
 * Q_BOX_ROWS = 64), read from row `row` of a head: one box a column slab,
 * completing on `bar`. */
template <class Cfg>
__device__ __forceinline__ void sm90_load_q_rows(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bar, uint32_t qb,
                                                 int c, int row, int head, int map_b) {
    for (int s = 0; s < Cfg::SLABS; ++s)
        sm90_load_q_box<Cfg>(smem + Cfg::OFF_Q + qb * Cfg::Q_BYTES + s * Cfg::Q_SLAB + c * 64 * Cfg::QK_SW, &p.tm_q,
                             bar, s * Cfg::BOX_COLS, row, head, map_b);
}

/* Kv block n's K (ROLE LOAD_Q_K) or V into ring position it, once the
 * consumers have freed that stage: K as SLABS column slabs of BN rows from
 * row k_row0 + n * BN (the sequence's first row in a varlen map), V alike,
 * or for e4m3 V^T as BN / VT_SLAB_KEYS slabs of D head-dim rows, from
 * column vt_col0 + n * BN (vt_col0: the sequence's first, sm90_fp8_vt_col0,
 * in a varlen map; else 0). */
template <class Cfg, int ROLE>
__device__ __forceinline__ void sm90_load_kv_block(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars, uint32_t it,
                                                   int n, int k_row0, int kv_head, int map_b, int vt_col0 = 0) {
    uint64_t *k_full = bars + 2 * Cfg::Q_BARS, *k_empty = k_full + Cfg::STAGES;
    uint64_t *v_full = k_empty + Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
    /* A fresh barrier counts as having completed the phase before phase 0,
     * so the first wait on an "empty" barrier uses parity 1 and passes. */
    const uint32_t stage = it % Cfg::STAGES, parity = ((it / Cfg::STAGES) & 1) ^ 1;
    if constexpr (ROLE == LOAD_Q_K) {
        mbar_wait(&k_empty[stage], parity);
        mbar_arrive_expect_tx(&k_full[stage], Cfg::KV_BYTES);
        uint8_t *k_dst = smem + Cfg::OFF_K + stage * Cfg::KV_BYTES;
        for (int s = 0; s < Cfg::SLABS; ++s)
            tma_load_4d(k_dst + s * Cfg::KV_SLAB, &p.tm_k, &k_full[stage], s * Cfg::BOX_COLS, k_row0 + n * Cfg::BN,
                        kv_head, map_b);
    } else {
        mbar_wait(&v_empty[stage], parity);
        mbar_arrive_expect_tx(&v_full[stage], Cfg::KV_BYTES);
        uint8_t *v_dst = smem + Cfg::OFF_V + stage * Cfg::KV_BYTES;
        if constexpr (Cfg::FP8) { /* V^T: D head-dim rows of BN keys, VT_SLAB_KEYS per slab */
            for (int s = 0; s < Cfg::BN / Cfg::VT_SLAB_KEYS; ++s)
                tma_load_4d(v_dst + s * Cfg::VT_SLAB, &p.tm_v, &v_full[stage],
                            vt_col0 + n * Cfg::BN + s * Cfg::VT_SLAB_KEYS, 0, kv_head, map_b);
        } else {
            for (int s = 0; s < Cfg::SLABS; ++s)
                tma_load_4d(v_dst + s * Cfg::KV_SLAB, &p.tm_v, &v_full[stage], s * Cfg::BOX_COLS, k_row0 + n * Cfg::BN,
                            kv_head, map_b);
        }
    }
}

/* One packed tile's loads (Sm90PackedRows, see sm90_decode_packed): Q as
 * one 64-row box per consumer, at that consumer's rows of the buffer; each
 * kv block of the tile's first head, and where the tile holds two heads
 * the same block of the second right after it. first: consumer 0's view;
 * it, tile_iter: the ring and Q buffer positions, advanced here. */
template <class Cfg, int ROLE>
__device__ __forceinline__ void sm90_produce_packed(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars, int t,
                                                    const Sm90Tile &first, uint32_t &it, uint32_t &tile_iter) {
    uint64_t *q_full = bars, *q_empty = bars + Cfg::Q_BARS;
    const Sm90Tile last = sm90_decode_packed<Cfg>(p, t, Cfg::CONSUMERS - 1);
    const int heads = sm90_ring_step<Cfg>(last); /* 2: the last consumer's group is in the next head */
    if constexpr (ROLE == LOAD_Q_K) {
        const uint32_t qb = tile_iter % Cfg::Q_BUFS;
        mbar_wait(&q_empty[qb], ((tile_iter / Cfg::Q_BUFS) & 1) ^ 1);
        mbar_arrive_expect_tx(&q_full[qb], Cfg::Q_BYTES);
        for (int c = 0; c < Cfg::CONSUMERS; ++c) {
            const Sm90Tile g = sm90_decode_packed<Cfg>(p, t, c);
            sm90_load_q_rows<Cfg>(p, smem, &q_full[qb], qb, c, (g.m_block + c) * 64, g.head, g.seq.map_b);
        }
    }
    const int kv_head0 = first.head / p.q_per_kv, kv_head1 = last.head / p.q_per_kv;
#pragma unroll 1
    for (int n = first.n_hi - 1; n >= first.n_lo; --n) {
#pragma unroll 1
        for (int h = 0; h < heads; ++h, ++it)
            sm90_load_kv_block<Cfg, ROLE>(p, smem, bars, it, n, 0, h ? kv_head1 : kv_head0,
                                          h ? last.seq.map_b : first.seq.map_b);
    }
    ++tile_iter;
}

template <class Cfg, int ROLE>
__device__ __forceinline__ void sm90_producer(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars) {
    uint64_t *q_full = bars, *q_empty = bars + Cfg::Q_BARS;
    if constexpr (ROLE == LOAD_Q) {
        tma_prefetch_map(&p.tm_q);
    } else if constexpr (ROLE == LOAD_Q_K) {
        if (!Cfg::Q_OWN_THREAD) tma_prefetch_map(&p.tm_q);
        tma_prefetch_map(&p.tm_k);
        tma_prefetch_map(&p.tm_o);
    } else {
        tma_prefetch_map(&p.tm_v);
        /* e4m3: V^T is written by the transpose launched just before this
         * kernel, which lets this one start early (sm90_launch); only V's
         * loads need it done */
        if constexpr (Cfg::FP8) grid_dependency_wait();
    }
    uint32_t it = 0, tile_iter = 0;
    for (int t = sm90_first_tile<Cfg>(p); t < p.num_tiles; t = sm90_tile_after<Cfg>(p, t)) {
        Sm90Tile tile = sm90_decode_any<Cfg>(p, t, 0);
        if (!sm90_tile_live<Cfg>(p, tile)) continue;
        if (tile.n_hi <= tile.n_lo) continue; /* no visible key: consumers write zeros */
        if constexpr (Cfg::PACKED_ROWS) {
            sm90_produce_packed<Cfg, ROLE>(p, smem, bars, t, tile, it, tile_iter);
        } else {
            const int kv_head = tile.head / p.q_per_kv;
            int k_ahead = 0; /* FIRST_K_BETWEEN_Q: kv blocks loaded with Q */
            /* A fresh barrier counts as having completed the phase before phase 0,
             * so the first wait on an "empty" barrier uses parity 1 and passes. */
            if constexpr (ROLE == (Cfg::Q_OWN_THREAD ? LOAD_Q : LOAD_Q_K)) { /* Q's loader */
                const uint32_t qb = tile_iter % Cfg::Q_BUFS;
                const uint32_t q_parity = ((tile_iter / Cfg::Q_BUFS) & 1) ^ 1;
                if constexpr (Cfg::Q_HALVES) {
                    /* consumer c's rows once it has freed them after its
                     * last block: 64-row boxes (Q_BOX_ROWS), consumer 0's first */
                    for (int c = 0; c < Cfg::CONSUMERS; ++c) {
                        const uint32_t bar = sm90_q_bar<Cfg>(qb, c);
                        mbar_wait(&q_empty[bar], q_parity);
                        mbar_arrive_expect_tx(&q_full[bar], Cfg::Q_BYTES / Cfg::CONSUMERS);
                        sm90_load_q_rows<Cfg>(p, smem, &q_full[bar], qb, c,
                                              tile.seq.q_row0 + tile.m_block * Cfg::BM + c * 64, tile.head,
                                              tile.seq.map_b);
                        /* FIRST_K_BETWEEN_Q: the tile's first K right behind
                         * consumer 0's rows (its stage was freed a turn before
                         * consumer 1 frees its rows) */
                        if (Cfg::FIRST_K_BETWEEN_Q && ROLE == LOAD_Q_K && c == 0) {
                            sm90_load_kv_block<Cfg, ROLE>(p, smem, bars, it, tile.n_hi - 1, tile.seq.k_row0, kv_head,
                                                          tile.seq.map_b);
                            ++it;
                            k_ahead = 1;
                        }
                    }
                } else {
                    mbar_wait(&q_empty[qb], q_parity);
                    mbar_arrive_expect_tx(&q_full[qb], Cfg::Q_BYTES);
                    bool whole_box = true;
                    if constexpr (Cfg::ROW_SHIFT) {
                        /* Shifted rows (sm90_fwd_seq): the map's boxes are 64 rows, one per
                         * consumer. A consumer's rows are all phantom or all real (row_shift
                         * is a multiple of 64); a phantom group loads the head's first rows
                         * instead, which nothing of it stores (TMA takes no negative
                         * coordinate: the kernel stopped with an illegal instruction). */
                        static_assert(Cfg::SLABS == 1, "one box a consumer");
                        whole_box = p.row_shift == 0;
                        if (!whole_box)
                            for (int c = 0; c < Cfg::CONSUMERS; ++c)
                                sm90_load_q_rows<Cfg>(p, smem, &q_full[qb], qb, c,
                                                      max(tile.seq.q_row0 + tile.m_block * Cfg::BM + c * 64, 0),
                                                      tile.head, tile.seq.map_b);
                    }
                    if (whole_box)
                        for (int s = 0; s < Cfg::SLABS; ++s)
                            sm90_load_q_box<Cfg>(smem + Cfg::OFF_Q + qb * Cfg::Q_BYTES + s * Cfg::Q_SLAB, &p.tm_q,
                                                 &q_full[qb], s * Cfg::BOX_COLS,
                                                 tile.seq.q_row0 + tile.m_block * Cfg::BM, tile.head, tile.seq.map_b);
                }
            }
            /* Varlen: a block straddling the sequence end also loads the next
             * sequence's first keys (or zeros past the tensor); the consumers mask
             * them, and their V rows meet P = 0. Not unrolled: the producer has
             * only PRODUCER_REGS registers. Q's own loader takes no block (a
             * loop that never runs: wrapped in a branch of its own, it moved
             * two instructions in other kernels' producers). */
            int vt_col0 = 0; /* e4m3 varlen: the sequence's first V^T column */
            if constexpr (Cfg::FP8 && Cfg::VARLEN)
                if (ROLE == LOAD_V && p.cu_seqlens_q) vt_col0 = (int)sm90_fp8_vt_col0(tile.seq.k_row0, tile.batch);
#pragma unroll 1
            for (int n = (ROLE == LOAD_Q ? tile.n_lo - 1 : tile.n_hi - 1) - k_ahead; n >= tile.n_lo; --n, ++it)
                sm90_load_kv_block<Cfg, ROLE>(p, smem, bars, it, n, tile.seq.k_row0, kv_head, tile.seq.map_b,
                                              vt_col0);
            ++tile_iter;
        }
    }
}

#endif /* FA_SM90_FWD_PRODUCER_CUH */

/*
 * Hopper forward attention kernel: TMA loads, wgmma, warp specialisation.
 *
 * One CTA = 1 + C warpgroups (C = 2 or 3 consumers), persistent over output
 * tiles of 64*C query rows of one (batch, head):
 *   warpgroup 0    producer: one thread issues TMA loads of Q and K, another
 *                  those of V, into 128B-swizzled shared memory through
 *                  mbarrier rings (Q double-buffered where it fits);
 *   warpgroups 1..C consumers: each owns 64 of the tile's query rows.
 *
 * Per kv block (walked from the last block down, so the masked diagonal
 * block comes first) a consumer issues S = Q K^T (SS wgmma) and, in the same
 * turn, O += P V for the previous block (RS wgmma, P straight from registers),
 * then does the online softmax of S while P V is still running on the tensor
 * cores. O's rescale to a moved max is done inside the turn, between the two
 * issues, so it runs under Q K^T. The consumers take turns issuing (one named
 * barrier each, passed round), so one warpgroup's softmax hides under the
 * others' GEMMs. The epilogue stages O in swizzled shared memory and writes it
 * with a TMA store; with JOIN (three consumers) the next tile's first Q K^T is
 * issued in the turn of this tile's last P V, ahead of the epilogue; with
 * S_JOIN (head dim 128, short problems without a mask) it is issued first in
 * that turn, and the next tile's first softmax runs under that P V, ahead of
 * the epilogue.
 *
 * wgmma m64nN accumulator layout (f32), thread t of the warpgroup, warp
 * w = t/32, g = (t%32)/4, q = t%4: register i holds
 *     row 16w + g + 8*((i/2)%2),  column 8*(i/4) + 2q + (i%2).
 * The four threads of a quad own whole rows (row reductions: shuffles 1, 2),
 * and the registers 8c..8c+7 of S are exactly the A fragment of the P V
 * k-step c once packed pairwise to 16 bits.
 *
 * This file holds the consumer's walk over its tiles and the kernel; the
 * pieces it is made of are in sm90_fwd_config.cuh (parameters and
 * compile-time plans), sm90_fwd_schedule.cuh (tile order), sm90_fwd_producer.cuh
 * (the loads), sm90_fwd_softmax.cuh (one kv block's GEMMs, masks and
 * softmax) and sm90_fwd_epilogue.cuh (a tile's end).
 */
#ifndef FA_SM90_FWD_KERNEL_CUH
#define FA_SM90_FWD_KERNEL_CUH

#include "sm90_fwd_epilogue.cuh"
#include "sm90_fwd_producer.cuh"
#include "sm90_fwd_softmax.cuh"

/* ---- consumer ---------------------------------------------------------------- */

/* The first tile at or after t (stepping by the grid) with a visible key, or
 * p.num_tiles; *found is that tile, decoded. Tiles passed on the way are
 * finished here: a varlen sequence's surplus tiles need nothing, tiles with
 * no visible key get zero rows and lse = -inf. The producer skips the same
 * tiles. */
template <class Cfg>
__device__ __forceinline__ int sm90_next_work_tile(const Sm90FwdParams &p, int t, int wg, int tid, Sm90Tile *found) {
    for (; t < p.num_tiles; t = sm90_tile_after<Cfg>(p, t)) {
        Sm90Tile tile = sm90_decode_any<Cfg>(p, t, wg);
        if (!sm90_tile_live<Cfg>(p, tile)) continue;
        if (tile.n_hi > tile.n_lo) {
            *found = tile;
            return t;
        }
        sm90_store_zero_rows<Cfg>(p, tile, wg, tid);
        const int row0 = sm90_first_row<Cfg>(tile, wg, tid);
        if (p.lse && tid % 4 == 0)
            for (int h = 0; h < 2; ++h)
                if (sm90_row_stored<Cfg>(tile, row0 + 8 * h)) *sm90_lse_at(p, tile, row0 + 8 * h) = -INFINITY;
    }
    return p.num_tiles;
}

/*
 * A consumer warpgroup walks its CTA's tiles as one stream of kv blocks. Per
 * block it takes one turn at the tensor cores: S of this block and P V of the
 * block before. At a tile boundary the turn holds the old tile's last P V and
 * (with JOIN) the new tile's first S; the old tile's epilogue then
 * runs while that S is computed, so the tensor cores see no gap between tiles.
 */
template <class Cfg>
__device__ __forceinline__ void sm90_consumer(const Sm90FwdParams &p, uint8_t *smem, uint64_t *bars, int wg) {
    static_assert(!Cfg::S_JOIN || (Cfg::Q_BUFS == 2 && !Cfg::JOIN && Cfg::EARLY_FINISH && Cfg::STORE_THREAD &&
                                   !Cfg::TOP_SKIP && !Cfg::EXP_TURN && !Cfg::LATE_PV_RETIRE && !Cfg::HALF_DIAG &&
                                   !Cfg::SHORT_SPLIT && !Cfg::PACKED_ROWS),
                  "the S-first join: two Q buffers, the rows' sums taken before the next tile's first softmax, "
                  "whose plain path it runs");
    static_assert(!Cfg::STORE_THREAD || (!Cfg::PACKED_ROWS && !Cfg::ROW_SHIFT && !Cfg::SPLIT_TAIL),
                  "the store warp's lse: a consumer's 64 rows are one head's, from its tile's first row on");
    static_assert(!Cfg::Q_HALVES || (!Cfg::SHORT_SPLIT && !Cfg::PACKED_ROWS && !Cfg::ROW_SHIFT),
                  "Q in halves: each consumer reads its own 64 rows of the buffer");
    uint64_t *q_full = bars, *q_empty = bars + Cfg::Q_BARS;
    uint64_t *k_full = bars + 2 * Cfg::Q_BARS, *k_empty = k_full + Cfg::STAGES;
    uint64_t *v_full = k_empty + Cfg::STAGES, *v_empty = v_full + Cfg::STAGES;
    const int tid = threadIdx.x % 128;
    const int quad_col = 2 * (tid % 4);
    /* descriptors of Q buffer 0 (this warpgroup's rows) and of the K and V
     * rings' stage 0; buffer or stage i is i * Q_BYTES or i * KV_BYTES further on */
    /* Q buffer 0's descriptor for warpgroup w's rows */
    auto q_desc_of = [&](int w) { return sm90_qk_desc<Cfg>(smem_addr(smem + Cfg::OFF_Q) + w * 64 * Cfg::QK_SW); };
    const Sm90QKDesc<Cfg> q_desc0 = q_desc_of(wg);
    const Sm90QKDesc<Cfg> k_ring = sm90_qk_desc<Cfg>(smem_addr(smem + Cfg::OFF_K));
    const Sm90VDesc<Cfg> v_ring = sm90_v_desc<Cfg>(smem_addr(smem + Cfg::OFF_V));
    uint8_t *o_buf = smem + Cfg::OFF_O + wg * 64 * 128; /* O staging: this warpgroup's 64 rows of each slab */
    const uint32_t p_smem = smem_addr(smem + Cfg::OFF_P) + wg * 64 * 128; /* P_SMEM: this warpgroup's P */
    const DescSw128 p_desc(p_smem, 16);
    const uint64_t ones_desc = sm90_ones_desc(smem_addr(smem + Cfg::OFF_ONES)); /* LAG_MAX */
    /* Consumers issue their GEMMs in a fixed round: wait for my turn, issue,
     * hand the turn to the next warpgroup. */
    const int my_turn = BAR_TURN0 + wg, next_turn = BAR_TURN0 + (wg + 1) % Cfg::CONSUMERS;
    const int my_exp = BAR_EXP0 + wg, next_exp = BAR_EXP0 + (wg + 1) % Cfg::CONSUMERS;
    /* STORE_THREAD: this warpgroup's mailbox and its barriers */
    Sm90Mailbox *mailbox = reinterpret_cast<Sm90Mailbox *>(smem + Cfg::OFF_MAIL) + wg;
    uint64_t *o_full = v_empty + Cfg::STAGES + wg, *o_empty = v_empty + Cfg::STAGES + Cfg::MAILBOXES + wg;
    uint32_t tiles_done = 0; /* this warpgroup's epilogues so far */
    /* EXP_TURN: what pins a tile's first exponentials inside their turn */
    const Sm90ExpPin exp_pin{reinterpret_cast<float *>(smem + Cfg::OFF_PIN) + wg * 128 + tid,
                             reinterpret_cast<const int *>(smem + Cfg::OFF_PIN) + Cfg::CONSUMERS * 128};

    Sm90Tile tile, next_tile;
    int t = sm90_next_work_tile<Cfg>(p, sm90_first_tile<Cfg>(p), wg, tid, &tile);
    if (t < p.num_tiles) {
        if (wg == Cfg::CONSUMERS - 1) named_bar_arrive(BAR_TURN0, TURN_THREADS); /* consumer 0 goes first */
        if (Cfg::EXP_TURN && wg == Cfg::CONSUMERS - 1) named_bar_arrive(BAR_EXP0, TURN_THREADS); /* and exps first */

        float O[Cfg::D / 2];
        float L[4]; /* LAG_MAX: the packed P's row sums (sm90_issue_pv) */
        /* The first P V of a tile ignores O (scale-d 0), so O needs no value
         * before it; but the ptxas of CUDA 12.8 and older, seeing O undefined
         * where the steady loop is entered with a P V in flight, serialises
         * every wgmma of the kernel (C7515). Zeroed once here (with LAG_MAX's
         * sums, the other P V accumulator), O is defined on every path.
         * Later assemblers need no help, and there the zeroing would move
         * registers around in the kernels' SASS. */
        if constexpr (FA_SM90_ZERO_ACCUMULATORS) {
#pragma unroll
            for (int i = 0; i < Cfg::D / 2; ++i) O[i] = 0.f;
            fence_regs<Cfg::D / 2>(O); /* here, not sunk below the first Q K^T (C7517) */
            if constexpr (Cfg::LAG_MAX) {
#pragma unroll
                for (int i = 0; i < 4; ++i) L[i] = 0.f;
                fence_regs<4>(L);
            }
        }
        float S[Cfg::BN / 2];
        uint32_t P[Cfg::P_BUFS][Cfg::P_REGS];
        float row_max[2], row_sum[2], rescale[2];
        uint32_t it = 0, tile_iter = 0; /* kv blocks and tiles consumed so far (ring positions) */
        /* SHORT_SPLIT: whether this tile's kv blocks are split among the
         * consumers (each then takes warpgroup 0's rows). Derived from the
         * tile at each use (held, it made ptxas spill), and false at compile
         * time in the instances without SHORT_SPLIT. */
        auto split_now = [&]() {
            if constexpr (Cfg::SHORT_SPLIT)
                return sm90_tile_split<Cfg>(p, tile);
            else
                return false;
        };
        Sm90RowSetup rows = sm90_row_setup<Cfg>(p, tile, split_now() ? 0 : wg, tid);

        /* Descriptor of Q buffer qb (see Q_DESC_UNIFORM), at warpgroup 0's
         * rows for a split tile. */
        auto q_buffer = [&](uint32_t qb, bool split_tile) {
            /* LAG_MAX (head dims 192, 256): made afresh a tile, not held across the
             * tiles (held, it spilled 4 bytes beside the row sums) */
            Sm90QKDesc<Cfg> d = (Cfg::LAG_MAX ? q_desc_of(opaque_int(wg)) : split_tile ? q_desc_of(0) : q_desc0)
                                    .shifted(qb * Cfg::Q_BYTES);
            if (!Cfg::Q_DESC_UNIFORM) opaque_u64(&d.base); /* its k-steps' derived per block, not held */
            return d;
        };

        /* A tile's first S in a turn of its own: the CTA's first tile, and
         * every tile without JOIN. q_parity: the Q buffer's phase. A split
         * tile's first block for consumer c is its c-th (ring position
         * it + c). */
        auto issue_first_s = [&](uint32_t qb, uint32_t q_parity, bool split_tile) {
            uint32_t pos = it + (split_tile ? wg : 0);
            if constexpr (Cfg::PACKED_ROWS) pos += sm90_ring_offset<Cfg>(tile);
            bool skip = false;
            if constexpr (Cfg::TOP_SKIP) {
                skip = wg == 0 && sm90_top_skip<Cfg>(p, tile);
                pos += skip;
            }
            /* TOP_SKIP: consumer 0 passes its first turn, so that both
             * consumers still read one block in consecutive turns (a block
             * apart, they would hold both stages and every load would wait),
             * and frees the stage it skips for consumer 1. Past the turn's
             * barrier consumer 1 has issued its part of the last tile, so it
             * has freed the ring's position before this one (this arrival is
             * in the stage's current phase). */
            if constexpr (Cfg::TOP_SKIP)
                if (skip) {
                    named_bar_sync(my_turn, TURN_THREADS);
                    if (tid == 0) {
                        mbar_arrive(&k_empty[it % Cfg::STAGES]);
                        mbar_arrive(&v_empty[it % Cfg::STAGES]);
                    }
                    named_bar_arrive(next_turn, TURN_THREADS);
                }
            mbar_wait(&q_full[sm90_q_bar<Cfg>(qb, wg)], q_parity);
            mbar_wait(&k_full[pos % Cfg::STAGES], (pos / Cfg::STAGES) & 1);
            named_bar_sync(my_turn, TURN_THREADS);
            sm90_issue_qk<Cfg>(S, q_buffer(qb, split_tile), k_ring.shifted((pos % Cfg::STAGES) * Cfg::KV_BYTES));
            named_bar_arrive(next_turn, TURN_THREADS);
        };
        issue_first_s(0, 0, split_now());
        /* S_JOIN: an empty group stands for the P V that a joined turn issues
         * behind its S, so that every tile's top waits alike. The tile whose
         * epilogue is due at the next tile's top (done_stage: its last V
         * stage, -1: none). The S in flight is a tile's while t is one. */
        if constexpr (Cfg::S_JOIN) wgmma_commit();
        Sm90Tile done_tile = tile;
        float done_inv[2] = {0.f, 0.f};
        int done_stage = -1;

        /* Retire the P V issued in the last turn (its V stage: pv_stage);
         * retire_pv_and_pack then packs the newest probabilities into P,
         * which that P V was reading. With LATE_PV_RETIRE this runs after a
         * barrier-wait loop, not straight after the softmax: in one basic
         * block with the softmax, ptxas hoists the wait above it (to pack P
         * early), and the softmax then waits for the P V it is meant to
         * overlap (docs/perf/sm90.md, item 30). */
        auto retire_pv = [&](uint32_t pv_stage, int pv_in_flight) {
            wgmma_wait<0>();
            fence_regs<Cfg::D / 2>(O);
            if constexpr (Cfg::LAG_MAX) fence_regs<4>(L);
            if (pv_in_flight && tid == 0) { /* (split tiles free theirs below) */
                if constexpr (Cfg::PACKED_ROWS)
                    sm90_release<Cfg>(&v_empty[pv_stage], false, sm90_ring_release<Cfg>(tile));
                else
                    mbar_arrive(&v_empty[pv_stage]);
            }
        };
        /* The newest probabilities into P (and with P_SMEM into the buffer). */
        auto pack_p = [&]() {
            sm90_pack_p<Cfg>(P[0], S);
            if constexpr (Cfg::P_SMEM) sm90_store_p<Cfg>(P[0], p_smem, tid);
        };
        /* (Two P buffers take retire_pv alone: the softmax has written the
         * other buffer.) */
        auto retire_pv_and_pack = [&](uint32_t pv_stage, int pv_in_flight) {
            retire_pv(pv_stage, pv_in_flight);
            if (!Cfg::RESCALE_IN_TURN && pv_in_flight) sm90_rescale_o<Cfg>(O, rescale, L);
            pack_p();
        };

        for (;;) {
            /* Split-tail instances: without this, ptxas keeps tile_iter in
             * a vector register (past the merge's branches) and rebuilds Q's
             * descriptors from it in every block, 17 instructions a block in
             * e4m3's kernel (docs/perf/sm90.md, item 175). Only there: the
             * other instances' SASS is the one measured. */
            if constexpr (Cfg::SPLIT_TAIL) tile_iter = warp_uniform(tile_iter);
            const uint32_t qb = tile_iter % Cfg::Q_BUFS;
            const Sm90QKDesc<Cfg> q_desc = q_buffer(qb, split_now());
            /* A split tile: this consumer takes its blocks c, c + 3, ...
             * (counted from the highest), which lie as far apart in the ring;
             * the others' blocks it passes over. In the loop below step > 1
             * says the tile is split (cheaper than split_now()). */
            const int step = split_now() ? Cfg::CONSUMERS : 1;
            if (split_now()) it += wg;
            /* Sm90PackedRows: this consumer's ring positions (step 2 where
             * the tile holds two heads' blocks) and the arrivals it owes */
            int ring_step = step;
            uint32_t release = 1;
            if constexpr (Cfg::PACKED_ROWS) {
                ring_step = sm90_ring_step<Cfg>(tile);
                release = sm90_ring_release<Cfg>(tile);
                it += sm90_ring_offset<Cfg>(tile);
            }
            /* TOP_SKIP: consumer 0 starts a block (and a ring position) lower */
            int skipped = 0;
            if constexpr (Cfg::TOP_SKIP) skipped = wg == 0 && sm90_top_skip<Cfg>(p, tile);
            it += skipped;
            /* This tile's first (highest) kv block: its S was issued in an
             * earlier turn; nothing to overlap with until the next turn. */
            int n = tile.n_hi - 1 - (split_now() ? wg : 0) - skipped;
            uint32_t stage = it % Cfg::STAGES, parity = (it / Cfg::STAGES) & 1;
            if constexpr (Cfg::S_JOIN) {
                /* S_JOIN: the S was issued ahead of the tile before's last
                 * P V (or with an empty group behind it), which may still run:
                 * this block's softmax overlaps it, the tile before's
                 * epilogue follows. Past the CTA's last tile the S is dropped. */
                wgmma_wait<1>();
                fence_regs<Cfg::BN / 2>(S);
                if (t < p.num_tiles) {
                    sm90_free_k_stage<Cfg>(&k_empty[stage], n == tile.n_lo, wg, tid);
                    row_max[0] = row_max[1] = -INFINITY;
                    row_sum[0] = row_sum[1] = 0.f;
                    sm90_scores_to_probs<Cfg>(S, p, rows, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp);
                    pack_p(); /* buffer 0: the last P V reads buffer 1 */
                }
                wgmma_wait<0>(); /* the tile before's last P V */
                fence_regs<Cfg::D / 2>(O);
                if (done_stage >= 0) {
                    if (tid == 0) mbar_arrive(&v_empty[done_stage]);
                    sm90_epilogue<Cfg>(p, done_tile, O, done_inv, o_buf, nullptr, mailbox, o_full, wg, tid);
                }
                if (t >= p.num_tiles) break;
            } else {
                wgmma_wait<0>();
                fence_regs<Cfg::BN / 2>(S);
                sm90_free_k_stage<Cfg>(&k_empty[stage], n == tile.n_lo, wg, tid, split_now(), release);
                row_max[0] = row_max[1] = -INFINITY;
                row_sum[0] = row_sum[1] = 0.f;
                const Sm90ExpPin *first_pin = Cfg::EXP_TURN ? &exp_pin : nullptr;
                /* HALF_DIAG: no row of this warp sees the block's upper half
                 * (P is packed there), or every row sees its lower half */
                if (Cfg::HALF_DIAG && rows.cap_pre == 0.f &&
                    __all_sync(0xffffffffu, max(rows.key_hi[0], rows.key_hi[1]) <= n * Cfg::BN + Cfg::BN / 2)) {
                    sm90_first_probs_half<Cfg>(S, P[0], rows, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp,
                                               first_pin);
                } else if (Cfg::HALF_DIAG && rows.cap_pre == 0.f &&
                           __all_sync(0xffffffffu, min(rows.key_hi[0], rows.key_hi[1]) >= n * Cfg::BN + Cfg::BN / 2 &&
                                                       max(rows.key_lo[0], rows.key_lo[1]) <= n * Cfg::BN)) {
                    sm90_first_probs_upper<Cfg>(S, rows, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp,
                                                first_pin);
                    if (!Cfg::LATE_PV_RETIRE) pack_p(); /* no P V in flight yet */
                } else {
                    sm90_scores_to_probs<Cfg>(S, p, rows, n, row_max, row_sum, rescale, quad_col, my_exp, next_exp,
                                              first_pin);
                    if (!Cfg::LATE_PV_RETIRE) pack_p(); /* no P V in flight yet */
                }
            }
            uint32_t prev_stage = stage, prev_parity = parity; /* block n + 1's stage: its P V comes next */
            uint32_t pv_stage = 0;                             /* the V stage of the P V in flight */
            it += ring_step;
            int o_started = 0;
            /* two P buffers: the one holding the newest P (a variable of its own:
             * deriving it from the block count made the split-tail kernel spill) */
            int newest_p = 0;

            /* Steady state: S_n = Q K_n^T and O += P_{n+1} V_{n+1} in one turn; the
             * softmax of S_n runs while P V is still on the tensor cores. */
            if constexpr (Cfg::P_BUFS == 2) {
                /* BUF: the P buffer this turn's P V reads; block n's P goes to
                 * the other. The loop is unrolled by two, so that each turn's
                 * buffer is known at compile time. */
                auto steady_block = [&](auto buf) {
                    constexpr int BUF = decltype(buf)::value;
                    /* ring positions from `it` alone (block n), fewer live registers:
                     * block n + 1's P V is issued now, block n + 2's is in flight */
                    const uint32_t st = it % Cfg::STAGES, prev = it - 1, prev_st = prev % Cfg::STAGES;
                    mbar_wait(&k_full[st], (it / Cfg::STAGES) & 1);
                    retire_pv((it - 2) % Cfg::STAGES, o_started); /* the last turn's P V: long done */
                    named_bar_sync(my_turn, TURN_THREADS);
                    sm90_issue_qk<Cfg>(S, q_desc, k_ring.shifted(st * Cfg::KV_BYTES));
                    /* O to the max of block n + 1 while Q K^T runs */
                    if (o_started) sm90_rescale_o<Cfg>(O, rescale, L);
                    mbar_wait(&v_full[prev_st], (prev / Cfg::STAGES) & 1);
                    sm90_issue_pv<Cfg>(O, P[BUF], p_desc, v_ring.shifted(prev_st * Cfg::KV_BYTES), o_started, L,
                                       ones_desc);
                    named_bar_arrive(next_turn, TURN_THREADS);
                    wgmma_wait<1>(); /* S done; P V may still run */
                    fence_regs<Cfg::BN / 2>(S);
                    sm90_free_k_stage<Cfg>(&k_empty[st], n == tile.n_lo, wg, tid);
                    sm90_scores_to_probs<Cfg, Cfg::STEADY_MASKS>(S, p, rows, n, row_max, row_sum, rescale, quad_col,
                                                                 my_exp, next_exp);
                    sm90_pack_p<Cfg>(P[BUF ^ 1], S); /* the buffer no P V reads now */
                    o_started = 1;
                    --n;
                    ++it;
                };
                for (n = tile.n_hi - 2;;) {
                    if (n < tile.n_lo) break;
                    steady_block(PBuf<0>{});
                    newest_p = 1;
                    if (n < tile.n_lo) break;
                    steady_block(PBuf<1>{});
                    newest_p = 0;
                }
                /* as the single-buffer loop leaves them: the stage of the tile's
                 * last block (its P V comes next) and of the P V in flight */
                prev_stage = (it - 1) % Cfg::STAGES;
                prev_parity = ((it - 1) / Cfg::STAGES) & 1;
                pv_stage = (it - 2) % Cfg::STAGES;
            } else { /* one P buffer: the single-buffer kernels' code, unchanged (their SASS too) */
                for (n = tile.n_hi - 1 - (split_now() ? wg : 0) - skipped - step; n >= tile.n_lo;
                     n -= step, it += ring_step) {
                    stage = it % Cfg::STAGES;
                    parity = (it / Cfg::STAGES) & 1;
                    mbar_wait(&k_full[stage], parity);
                    if (Cfg::LATE_PV_RETIRE) retire_pv_and_pack(pv_stage, o_started);
                    named_bar_sync(my_turn, TURN_THREADS);
                    sm90_issue_qk<Cfg>(S, q_desc, k_ring.shifted(stage * Cfg::KV_BYTES));
                    /* O to the max of block n + 1 while Q K^T runs: off the path
                     * from the softmax to this turn */
                    if (Cfg::RESCALE_IN_TURN && o_started) sm90_rescale_o<Cfg>(O, rescale, L);
                    mbar_wait(&v_full[prev_stage], prev_parity);
                    sm90_issue_pv<Cfg>(O, P[0], p_desc, v_ring.shifted(prev_stage * Cfg::KV_BYTES), o_started, L,
                                       ones_desc);
                    named_bar_arrive(next_turn, TURN_THREADS);
                    wgmma_wait<1>(); /* S done; P V may still run */
                    fence_regs<Cfg::BN / 2>(S);
                    sm90_free_k_stage<Cfg>(&k_empty[stage], n == tile.n_lo, wg, tid, step > 1, release);
                    /* A split tile (as many stages as consumers): all of this
                     * consumer's blocks share one stage, so its next V loads
                     * only once this P V has read the last; the P V is waited
                     * for now (O is fenced where the other path fences it), and
                     * the load runs under the softmax. */
                    if (step > 1) {
                        wgmma_wait<0>();
                        if (tid == 0) sm90_release<Cfg>(&v_empty[prev_stage], true);
                    }
                    sm90_scores_to_probs<Cfg, Cfg::STEADY_MASKS>(S, p, rows, n, row_max, row_sum, rescale, quad_col,
                                                                 my_exp, next_exp);
                    if (!Cfg::LATE_PV_RETIRE) retire_pv_and_pack(prev_stage, step > 1 ? 0 : 1);
                    o_started = 1;
                    pv_stage = prev_stage;
                    prev_stage = stage;
                    prev_parity = parity;
                }
            }

            /* Sm90PackedRows: back to the tile's first position past its blocks */
            if constexpr (Cfg::PACKED_ROWS) it -= sm90_ring_offset<Cfg>(tile);
            if (split_now()) {
                /* past every block of the tile, as the other consumers are: the
                 * loop left n three below this consumer's last block, at
                 * ring position it - 3 */
                it += n + 1 - tile.n_lo;
                /* A consumer with one block fewer passes a turn, so that every
                 * consumer takes as many turns in the tile and the round holds. */
                if ((tile.n_hi - 1 - tile.n_lo) % Cfg::CONSUMERS < wg) {
                    named_bar_sync(my_turn, TURN_THREADS);
                    named_bar_arrive(next_turn, TURN_THREADS);
                }
            }

            /* Q's last reader, the tile's last S GEMM, has completed: free Q for
             * a later tile's load while this P V and the epilogue run. */
            if (tid == 0) mbar_arrive(&q_empty[sm90_q_bar<Cfg>(qb, wg)]);
            /* O_IN_RING: consumer 0 may now stage its O in the last K stage */
            if (Cfg::O0_IN_RING && wg == 1) named_bar_arrive(BAR_K_READ, 256);

            /* The last P V. With JOIN the next tile's first S joins the
             * turn (its Q is in the other buffer), behind it; with S_JOIN ahead
             * of it. After the CTA's last tile that S runs on stale data and is
             * dropped: the turn is then the same on every path, as ptxas needs
             * to keep the wgmma pipeline open. */
            int t_next = p.num_tiles;
            if constexpr (Cfg::JOIN || Cfg::S_JOIN)
                t_next = sm90_next_work_tile<Cfg>(p, sm90_tile_after<Cfg>(p, t), wg, tid, &next_tile);
            const uint32_t next_qb = (tile_iter + 1) % Cfg::Q_BUFS;
            const uint32_t next_q_parity = ((tile_iter + 1) / Cfg::Q_BUFS) & 1;
            mbar_wait(&v_full[prev_stage], prev_parity);
            if (Cfg::LATE_PV_RETIRE) retire_pv_and_pack(pv_stage, o_started);
            if constexpr (Cfg::P_BUFS == 2) retire_pv(pv_stage, o_started); /* the last turn's P V */
            /* the ring position of the next tile's first S (this consumer's) */
            const uint32_t next_it =
                it + (Cfg::PACKED_ROWS && t_next < p.num_tiles ? sm90_ring_offset<Cfg>(next_tile) : 0);
            if ((Cfg::JOIN || Cfg::S_JOIN) && t_next < p.num_tiles) {
                mbar_wait(&q_full[sm90_q_bar<Cfg>(next_qb, wg)], next_q_parity);
                mbar_wait(&k_full[next_it % Cfg::STAGES], (next_it / Cfg::STAGES) & 1);
            }
            /* S_JOIN: the last P V reads buffer 1, so that the next tile's
             * first P can go to buffer 0, where its first steady block reads it */
            if constexpr (Cfg::S_JOIN)
                if (!newest_p)
#pragma unroll
                    for (int i = 0; i < Cfg::P_REGS; ++i) P[1][i] = P[0][i];
            named_bar_sync(my_turn, TURN_THREADS);
            /* S_JOIN: the next tile's first S ahead of the last P V, so that
             * the softmax waits for it alone */
            if constexpr (Cfg::S_JOIN)
                sm90_issue_qk<Cfg>(S, q_buffer(next_qb, false),
                                   k_ring.shifted((next_it % Cfg::STAGES) * Cfg::KV_BYTES));
            if (Cfg::RESCALE_IN_TURN && o_started) sm90_rescale_o<Cfg>(O, rescale, L);
            const auto last_v = v_ring.shifted(prev_stage * Cfg::KV_BYTES);
            /* two P buffers: the newest one by a branch (a copy into buffer 0
             * was a select per register, every tile) */
            if (Cfg::P_BUFS == 2 && (Cfg::S_JOIN || newest_p))
                sm90_issue_pv<Cfg>(O, P[Cfg::P_BUFS - 1], p_desc, last_v, o_started, L, ones_desc);
            else
                sm90_issue_pv<Cfg>(O, P[0], p_desc, last_v, o_started, L, ones_desc);
            if constexpr (Cfg::JOIN)
                sm90_issue_qk<Cfg>(S, q_buffer(next_qb, false),
                                   k_ring.shifted((next_it % Cfg::STAGES) * Cfg::KV_BYTES));
            named_bar_arrive(next_turn, TURN_THREADS);
            /* without a join: find the next tile while the last P V runs */
            if constexpr (!Cfg::JOIN && !Cfg::S_JOIN)
                t_next = sm90_next_work_tile<Cfg>(p, sm90_tile_after<Cfg>(p, t), wg, tid, &next_tile);
            /* EARLY_FINISH: the epilogue's steps that need no O, while the
             * last P V runs */
            const bool whole_tile = !Cfg::SPLIT_TAIL || t < p.tail_first;
            float inv[2];
            auto finish_rows = [&]() {
                float row_l[2];
                sm90_finish_rows<Cfg>(p, tile, row_max, row_sum, rows.s_log2, wg, tid, inv, row_l);
                if constexpr (!Cfg::O_IN_RING)
                    sm90_claim_o_buf<Cfg>(o_empty, tile_iter, wg, tid);
                else if (Cfg::O0_OWN_BUF && wg == 0) /* consumer 0's own buffer, as the others' */
                    sm90_claim_o_buf<Cfg>(o_empty, tile_iter, wg, tid);
                /* the mailbox is free with the staging buffer */
                if constexpr (Cfg::STORE_THREAD) sm90_stage_lse(p, mailbox, row_max, row_l, rows.s_log2, tid);
            };
            /* (a split tile's rows: after the merge) */
            const bool early_finish = Cfg::EARLY_FINISH && !split_now();
            if (early_finish) finish_rows();
            /* S_JOIN: the finished tile's epilogue runs at the next tile's
             * top, after that tile's first softmax */
            if constexpr (Cfg::S_JOIN) {
                done_tile = tile;
                done_inv[0] = inv[0];
                done_inv[1] = inv[1];
                done_stage = (int)prev_stage;
                ++tile_iter;
                tiles_done = tile_iter;
                t = t_next;
                if (t < p.num_tiles) {
                    tile = next_tile;
                    rows = sm90_row_setup<Cfg>(p, tile, wg, tid);
                }
                continue;
            }
            wgmma_wait<Cfg::JOIN ? 1 : 0>(); /* P V done (the joined next S may still run) */
            fence_regs<Cfg::D / 2>(O);
            if constexpr (Cfg::LAG_MAX) fence_regs<4>(L);
            uint8_t *o_stage = o_buf;
            uint64_t *stage_empty = nullptr;
            if constexpr (Cfg::O_IN_RING) {
                /* consumer 0 stages O in the last K stage (or its own buffer,
                 * O0_OWN_BUF), consumer 1 in the last V stage (kept from the
                 * producer until the store has read it) */
                if (sm90_o_in_ring<Cfg>(wg)) {
                    o_stage = smem + (wg == 0 ? Cfg::OFF_K : Cfg::OFF_V) + prev_stage * Cfg::KV_BYTES;
                    stage_empty = wg == 0 ? &k_empty[prev_stage] : &v_empty[prev_stage];
                }
                if (wg == 0) named_bar_arrive(BAR_V_READ, 256); /* consumer 1 may now use the V stage */
            }
            if (tid == 0 && !(Cfg::O_IN_RING && wg == 1))
                sm90_release<Cfg>(&v_empty[prev_stage], split_now(), sm90_ring_release<Cfg>(tile));

            /* A split tile is written by consumer 0, once it has merged the
             * others' parts into its own. */
            const bool writes = !split_now() || sm90_short_merge<Cfg>(smem + Cfg::OFF_MERGE, O, row_max, row_sum,
                                                                 rows.s_log2, wg, tid);
            /* A tail piece writes its tile only when it is the tile's last. */
            if (writes && (whole_tile || sm90_split_merge<Cfg>(p, t, O, row_max, row_sum, L, rows.s_log2, wg, tid))) {
                if (!early_finish) finish_rows();
                if constexpr (Cfg::LAG_MAX) sm90_lag_inv(L, inv); /* the packed P's sums, merged */
                sm90_epilogue<Cfg>(p, tile, O, inv, o_stage, stage_empty, mailbox, o_full, wg, tid);
            } else if constexpr (Cfg::O_IN_RING) {
                /* the staging stage goes back unused, after the same hand-over as the epilogue's */
                if (sm90_o_in_ring<Cfg>(wg)) {
                    named_bar_sync(wg == 0 ? BAR_K_READ : BAR_V_READ, 256);
                    if (tid == 0) mbar_arrive(stage_empty);
                }
            }
            ++tile_iter;
            tiles_done = tile_iter;
            if (t_next >= p.num_tiles) {
                wgmma_wait<0>(); /* with JOIN: the dropped S */
                break;
            }
            t = t_next;
            tile = next_tile;
            rows = sm90_row_setup<Cfg>(p, tile, split_now() ? 0 : wg, tid);
            if constexpr (!Cfg::JOIN) issue_first_s(tile_iter % Cfg::Q_BUFS, (tile_iter / Cfg::Q_BUFS) & 1, split_now());
        }
    }
    if constexpr (Cfg::STORE_THREAD) { /* no more tiles: the store thread may finish */
        mbar_wait(o_empty, (tiles_done & 1) ^ 1);
        sm90_post(mailbox, o_full, 0, 0, 0, SM90_MAIL_END, tid);
    } else if (tid == 0) {
        tma_store_wait_all(); /* shared memory must outlive the last store */
    }
}

/* ---- kernel ------------------------------------------------------------------- */

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) sm90_fwd_kernel(const __grid_constant__ Sm90FwdParams p) {
    extern __shared__ uint8_t smem_raw[];
    /* swizzle atoms are 1024 B and addressed absolutely: align the base */
    uint8_t *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + Cfg::OFF_BAR);
    if (threadIdx.x == 0) {
        for (int b = 0; b < Cfg::Q_BARS; ++b) {
            mbar_init(&bars[b], 1); /* q_full: producer's expect_tx arrive */
            /* q_empty: one arrive per consumer warpgroup (Q_HALVES: its own) */
            mbar_init(&bars[Cfg::Q_BARS + b], Cfg::Q_HALVES ? 1 : Cfg::CONSUMERS);
        }
        uint64_t *ring = bars + 2 * Cfg::Q_BARS;
        for (int s = 0; s < Cfg::STAGES; ++s) {
            mbar_init(&ring[s], 1);                              /* k_full */
            mbar_init(&ring[Cfg::STAGES + s], Cfg::CONSUMERS);     /* k_empty */
            mbar_init(&ring[2 * Cfg::STAGES + s], 1);            /* v_full */
            mbar_init(&ring[3 * Cfg::STAGES + s], Cfg::CONSUMERS); /* v_empty */
        }
        for (int c = 0; c < Cfg::MAILBOXES; ++c) {
            mbar_init(&ring[4 * Cfg::STAGES + c], 128);                 /* o_full: every thread of consumer c */
            mbar_init(&ring[4 * Cfg::STAGES + Cfg::MAILBOXES + c], 32); /* o_empty: every lane of the store warp */
        }
        mbar_fence_init();
    }
    if constexpr (Cfg::LAG_MAX) /* the block of ones for the row sums, seen by the tensor cores */
        if (threadIdx.x < Cfg::ONES_BYTES / 4) {
            reinterpret_cast<uint32_t *>(smem + Cfg::OFF_ONES)[threadIdx.x] = Cfg::BF16 ? 0x3F803F80u : 0x3C003C00u;
            fence_proxy_async_smem();
        }
    if (Cfg::EXP_TURN && threadIdx.x == 0) /* the zero word of Sm90ExpPin */
        reinterpret_cast<int *>(smem + Cfg::OFF_PIN)[Cfg::CONSUMERS * 128] = 0;
    __syncthreads();
    /* broadcast from lane 0: the compiler then knows the warpgroup index (and
     * the shared-memory addresses made from it) to be warp-uniform, and keeps
     * the consumers' Q descriptors in uniform registers */
    const int wg = warp_uniform((int)threadIdx.x / 128);
    if (wg == 0) {
        regs_dealloc<Cfg::PRODUCER_REGS>();
        /* lane 0 of warps 0 and 1: the Q/K and the V loader */
        if (threadIdx.x == 0) sm90_producer<Cfg, LOAD_Q_K>(p, smem, bars);
        if (threadIdx.x == 32) sm90_producer<Cfg, LOAD_V>(p, smem, bars);
        if (Cfg::Q_OWN_THREAD && threadIdx.x == 96) sm90_producer<Cfg, LOAD_Q>(p, smem, bars);
        if (Cfg::STORE_THREAD && threadIdx.x / 32 == 2) { /* the store warp */
            uint64_t *o_full = bars + 2 * Cfg::Q_BARS + 4 * Cfg::STAGES;
            sm90_store_warp<Cfg>(p, smem, o_full, o_full + Cfg::MAILBOXES);
        }
    } else {
        regs_alloc<Cfg::CONSUMER_REGS>();
        sm90_consumer<Cfg>(p, smem, bars, wg - 1);
    }
}

#endif /* FA_SM90_FWD_KERNEL_CUH */

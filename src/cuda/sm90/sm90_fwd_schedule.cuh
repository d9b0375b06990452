/*
 * Hopper forward: which tile a CTA takes next, and what a tile is (its
 * sequence, query rows and kv blocks): the plain, paired and split-tail
 * orders, and where a consumer thread's rows lie in a tile. The schedule's
 * functions compile for the host too: tests/test_sm90_schedule.cu walks
 * every CTA's tiles with them (grid_cta() and grid_ctas() then read
 * sm90_host_grid).
 */
#ifndef FA_SM90_FWD_SCHEDULE_CUH
#define FA_SM90_FWD_SCHEDULE_CUH

#include "sm90_fwd_config.cuh"
#include "sm90_ptx.cuh"
#include "sm90_seq.cuh"

/* A tile: query block m_block of one (batch, head), in its sequence. */
struct Sm90Tile {
    int m_block, head, batch;
    Sm90Seq seq; /* here, not first: the kernels' SASS is then the one measured (first changes it) */
    int n_lo, n_hi; /* kv blocks [n_lo, n_hi) hold every visible key */
    /* Sm90PackedRows: how this consumer walks the tile's ring positions
     * (sm90_ring_offset, sm90_ring_step, sm90_ring_release) */
    int ring;
};

/* Tiles that do not exist are skipped by every warpgroup alike: one past the
 * last head (paired order), and a varlen sequence's surplus query blocks (it
 * has fewer than the longest sequence). */
template <class Cfg>
__host__ __device__ __forceinline__ bool sm90_tile_live(const Sm90FwdParams &p, const Sm90Tile &t) {
    return t.batch < p.batch && (!Cfg::VARLEN || t.m_block * Cfg::BM < t.seq.seq_q);
}

/* Tile order. Consecutive tiles share a head, so the CTAs working at the same
 * time read the same K/V blocks and those come from L2, not memory (walking
 * heads in any other order measured up to 17% slower, docs/perf/sm90.md).
 *
 * Under a causal-like mask a query block's work grows with its index, so
 * there (paired) a CTA takes query blocks in pairs of equal total work: unit
 * j (0 <= j < M = num_m_blocks) of heads 2g and 2g + 1 is block M-1-j of head
 * 2g + 1, then block j of head 2g. The CTAs stay balanced while all query
 * blocks of two heads run at the same time. Tile t = 2u + h is unit u's first
 * (h = 0) or second block; with an odd number of heads the last unit's first
 * block does not exist (sm90_tile_live).
 *
 * Units go out round-robin, so with U units on G CTAs the last round holds
 * U mod G of them while the other CTAs idle for a unit's time. Where the
 * host plans it (sm90_pair_tail_plan), the units from pair_tail on (the
 * last round, and up to three before it) go out as single tiles instead,
 * largest first (pair_tail_tile), dealt in a snake: in even passes CTA c
 * takes list position pass * G + c, in odd ones pass * G + G - 1 - c, so
 * the CTAs end within about a small tile of each other. A CTA's position
 * k in the list is tile index 2 pair_tail + 2 k + (pass odd), the pass's
 * parity giving the step to its next position without a division. */
__host__ __device__ __forceinline__ int sm90_pair_tail_start(const Sm90FwdParams &p) {
    const int c = grid_cta();
    return c < p.pair_tail_count ? 2 * p.pair_tail + 2 * c : p.num_tiles;
}

template <class Cfg>
__host__ __device__ __forceinline__ int sm90_first_tile(const Sm90FwdParams &p) {
    if constexpr (Cfg::PAIR_TAIL)
        if (p.paired && grid_cta() >= p.pair_tail) return sm90_pair_tail_start(p);
    return p.paired ? 2 * grid_cta() : grid_cta();
}

template <class Cfg>
__host__ __device__ __forceinline__ int sm90_tile_after(const Sm90FwdParams &p, int t) {
    if (p.paired) {
        if constexpr (Cfg::PAIR_TAIL) {
            if (t >= 2 * p.pair_tail) { /* a tail position */
                const int k = (t - 2 * p.pair_tail) >> 1, odd = t & 1, c = grid_cta();
                const int next = k + (odd ? 2 * c + 1 : 2 * (grid_ctas() - c) - 1); /* the next pass's position */
                return next < p.pair_tail_count ? 2 * p.pair_tail + 2 * next + (odd ^ 1) : p.num_tiles;
            }
            if (t % 2 != 0 && t / 2 + grid_ctas() >= p.pair_tail) /* this CTA's next unit is in the tail */
                return sm90_pair_tail_start(p);
        }
        return t % 2 == 0 ? t + 1 : 2 * (t / 2 + grid_ctas());
    }
    if (!Cfg::SPLIT_TAIL) return t + grid_ctas();
    if (t < p.tail_first) { /* whole tiles, then this CTA's two tail pieces */
        t += grid_ctas();
        return t < p.tail_first ? t : p.tail_first + 2 * grid_cta();
    }
    return (t - p.tail_first) & 1 ? p.num_tiles : t + 1;
}

/* Tail piece t (t >= p.tail_first; non-paired order, every tile with the
 * same split_blocks kv blocks): CTA c = (t - tail_first) / 2 owns positions
 * [c W / G, (c + 1) W / G) of the W = split_work tail blocks laid end to end,
 * which fall in at most two tiles (a CTA's share is under one tile); its
 * k-th piece (k = (t - tail_first) % 2) is the part in its k-th tile. Returns
 * that tile's index within the tail and sets the piece's kv blocks [*lo, *hi)
 * (empty when the share lies in one tile only). */
__host__ __device__ __forceinline__ int sm90_split_piece(const Sm90FwdParams &p, int t, int *lo, int *hi) {
    const uint32_t c = (uint32_t)(t - p.tail_first) >> 1, g = (uint32_t)grid_ctas(), nb = (uint32_t)p.split_blocks;
    const uint32_t a = c * p.split_work / g, b = (c + 1) * p.split_work / g; /* host: split_work * G < 2^32 */
    const int r = (int)(a / nb) + ((t - p.tail_first) & 1);
    *lo = max((int)a - r * (int)nb, 0);
    *hi = min((int)b - r * (int)nb, (int)nb);
    return r;
}

/* Just the tile of tail piece t (its index within the tail). */
__host__ __device__ __forceinline__ int sm90_split_tile(const Sm90FwdParams &p, int t) {
    int lo, hi;
    return sm90_split_piece(p, t, &lo, &hi);
}

/* The CTA whose tail share holds position x (inverse of the shares above). */
__host__ __device__ __forceinline__ int sm90_split_owner(const Sm90FwdParams &p, uint32_t x) {
    return (int)(((x + 1) * (uint32_t)grid_ctas() - 1) / p.split_work);
}

/* Sequence b as the forward's tiles see it. With ROW_SHIFT (batched
 * problems; the host sets row_shift to 0 for the others) the sequence has
 * row_shift phantom queries before its first, a multiple of 64: its rows
 * start at -row_shift, and the diagonal moves with them, so each real row
 * sees the keys it saw before. A consumer's 64 rows are then all phantom
 * or all real: the producer loads a phantom group's Q from row 0 and the
 * epilogue stores none of its rows (no TMA coordinate is negative), and
 * sm90_row_stored keeps them out of the direct stores. */
template <class Cfg>
__host__ __device__ __forceinline__ Sm90Seq sm90_fwd_seq(const Sm90FwdParams &p, bool varlen, int b) {
    Sm90Seq s = sm90_seq(p, varlen, b);
    if constexpr (Cfg::ROW_SHIFT) {
        s.q_row0 -= p.row_shift;
        s.seq_q += p.row_shift;
        s.diag -= p.row_shift;
    }
    return s;
}

/* Whether row r of a tile's sequence is a real query row, whose lse is
 * stored: not past the sequence's end, nor one of ROW_SHIFT's phantom rows
 * before its start. */
template <class Cfg>
__device__ __forceinline__ bool sm90_row_stored(const Sm90Tile &t, int r) {
    if constexpr (Cfg::ROW_SHIFT) return r < t.seq.seq_q && t.seq.q_row0 + r >= 0;
    return r < t.seq.seq_q;
}

template <class Cfg>
__host__ __device__ __forceinline__ Sm90Tile sm90_decode_tile(const Sm90FwdParams &p, int t) {
    Sm90Tile tile;
    int hb, split_lo = 0, split_hi = 0;
    const bool piece = Cfg::SPLIT_TAIL && !p.paired && t >= p.tail_first;
    if (piece) t = p.tail_first + sm90_split_piece(p, t, &split_lo, &split_hi); /* decoded as its tile */
    if (p.paired) {
        if constexpr (Cfg::PAIR_TAIL) /* a tail position: its tile from the list */
            if (t >= 2 * p.pair_tail) t = 2 * p.pair_tail + p.pair_tail_tile[(t - 2 * p.pair_tail) >> 1];
        const int u = t >> 1, h = t & 1; /* t >= 0 */
        int g;
        const int j = sm90_divmod(u, p.m_div, &g); /* unit j of head pair g */
        hb = 2 * g + 1 - h;
        tile.m_block = h ? j : p.num_m_blocks - 1 - j;
    } else if (Cfg::SHORT_SPLIT && t >= p.short_first) { /* the short last query blocks, after all others */
        tile.m_block = p.num_m_blocks - 1;
        hb = t - p.short_first;
    } else {
        tile.m_block = sm90_divmod(t, Cfg::SHORT_SPLIT ? p.m_div_long : p.m_div, &hb);
    }
    /* batch = p.batch: past the last head (paired order, odd head count) */
    tile.head = sm90_divmod(hb, p.h_div, &tile.batch);
    const bool varlen = Cfg::VARLEN && p.cu_seqlens_q;
    /* (varlen: a tile past the last head is not live, but reads a real sequence) */
    tile.seq = sm90_fwd_seq<Cfg>(p, varlen, varlen ? min(tile.batch, p.batch - 1) : tile.batch);
    /* 32-bit: |i + diag| < sq + sk and the windows within +-(sq + sk) */
    const int i0 = tile.m_block * Cfg::BM;
    const int i1 = min(i0 + Cfg::BM, tile.seq.seq_q) - 1;
    const int lo = max(0, i0 + tile.seq.diag - p.window_left);
    const int hi = min(tile.seq.seq_k, i1 + tile.seq.diag + p.window_right + 1);
    if (hi <= lo) {
        tile.n_lo = tile.n_hi = 0;
    } else {
        tile.n_lo = (int)(lo / Cfg::BN);
        tile.n_hi = (int)((hi + Cfg::BN - 1) / Cfg::BN);
    }
    if (piece) { /* a tail piece: its own kv blocks; an empty one is no tile */
        tile.n_lo = split_lo;
        tile.n_hi = split_hi;
        if (split_hi <= split_lo) tile.batch = p.batch;
    }
    return tile;
}


/* Packed tile t (Sm90PackedRows) as consumer wg sees it: its 64-row group,
 * that group's head, and where its kv blocks lie in the ring. There BM is
 * 64, so that the rows m_block * BM + wg * 64 on (sm90_first_row) are the
 * group's: m_block is the group's index in its head less wg. The tile's
 * groups are 3t .. 3t + 2 of all heads' groups laid end to end; the first
 * `in_first` of them are in the first group's head. If the tile runs into the next head, the ring holds each kv block
 * of both heads in turn, and a consumer reads every other position, from
 * its head's first (ring offset 0 or 1, step 2). Otherwise (step 1) every
 * consumer reads every position; after the last head's last group the
 * remaining consumers take groups past the sequence's end, whose rows TMA
 * reads as zeros and whose stores it clips, as in a short tile. A ring
 * stage is free once each of its readers has arrived: the first reader of
 * each head arrives for the consumers that do not read it. No masks: every
 * group sees every key. */
template <class Cfg>
__host__ __device__ __forceinline__ Sm90Tile sm90_decode_packed(const Sm90FwdParams &p, int t, int wg) {
    int hb0;
    const int rg0 = sm90_divmod(Cfg::CONSUMERS * t, p.rg_div, &hb0);
    const int in_first = min(Cfg::CONSUMERS, p.rg_div.d - rg0);
    const bool two = in_first < Cfg::CONSUMERS && hb0 + 1 < p.hq * p.batch; /* the tile spans two heads */
    const bool second = two && wg >= in_first;                              /* this consumer's group: the next head's */
    const int readers = second ? Cfg::CONSUMERS - in_first : two ? in_first : Cfg::CONSUMERS;
    const bool first_reader = wg == (second ? in_first : 0);
    Sm90Tile tile;
    tile.m_block = second ? -in_first : rg0; /* the group (rg0 + wg, or wg - in_first) less wg */
    tile.head = sm90_divmod(hb0 + second, p.h_div, &tile.batch);
    tile.seq = sm90_seq(p, false, tile.batch);
    tile.n_lo = 0;
    tile.n_hi = (p.sk + Cfg::BN - 1) / Cfg::BN;
    /* bit 0: ring offset, bits 1-2: ring step, bits 3-4: arrivals on a stage it frees */
    tile.ring = (int)second | (two ? 2 : 1) << 1 | (first_reader ? Cfg::CONSUMERS + 1 - readers : 1) << 3;
    return tile;
}

/* Tile t as consumer wg sees it, in either numbering. */
template <class Cfg> __host__ __device__ __forceinline__ Sm90Tile sm90_decode_any(const Sm90FwdParams &p, int t, int wg) {
    if constexpr (Cfg::PACKED_ROWS) return sm90_decode_packed<Cfg>(p, t, wg);
    return sm90_decode_tile<Cfg>(p, t);
}

template <class Cfg> __device__ __forceinline__ int sm90_ring_offset(const Sm90Tile &t) {
    if constexpr (Cfg::PACKED_ROWS) return t.ring & 1;
    return 0;
}
template <class Cfg> __device__ __forceinline__ int sm90_ring_step(const Sm90Tile &t) {
    if constexpr (Cfg::PACKED_ROWS) return (t.ring >> 1) & 3;
    return 1;
}
template <class Cfg> __device__ __forceinline__ uint32_t sm90_ring_release(const Sm90Tile &t) {
    if constexpr (Cfg::PACKED_ROWS) return (uint32_t)t.ring >> 3;
    return 1;
}

/* TOP_SKIP: whether consumer 0 skips the tile's highest kv block, which
 * none of its rows sees (their last key, under a causal mask or window,
 * lies below it); the tile keeps a block for it. Consumer 1 (64 rows on)
 * sees at least as far, so it takes every block of the tile. */
template <class Cfg>
__device__ __forceinline__ bool sm90_top_skip(const Sm90FwdParams &p, const Sm90Tile &t) {
    if constexpr (Cfg::TOP_SKIP) {
        /* one past consumer 0's last visible key (32-bit: see sm90_decode_tile) */
        const int hi0 = min(t.seq.seq_k, t.m_block * Cfg::BM + 64 + t.seq.diag + p.window_right);
        return t.n_hi - t.n_lo >= 2 && hi0 <= (t.n_hi - 1) * Cfg::BN;
    }
    return false;
}

/* Whether the consumers split tile t's kv blocks (Sm90ShortSplit): a short
 * last query block (the host enables the instance only where that block
 * holds at most 64 rows) with a block for each consumer. */
template <class Cfg>
__device__ __forceinline__ bool sm90_tile_split(const Sm90FwdParams &p, const Sm90Tile &t) {
    return Cfg::SHORT_SPLIT && t.m_block == p.num_m_blocks - 1 && t.n_hi - t.n_lo >= Cfg::CONSUMERS;
}

/* Query row (within the warpgroup's 64) of a consumer thread's first
 * accumulator row; its second is 8 below (see the layout at the top). */
__device__ __forceinline__ int sm90_row_in_wg(int tid) { return (tid / 32) * 16 + (tid % 32) / 4; }

/* The same row within the tile's sequence. */
template <class Cfg>
__device__ __forceinline__ int sm90_first_row(const Sm90Tile &tile, int wg, int tid) {
    return tile.m_block * Cfg::BM + wg * 64 + sm90_row_in_wg(tid);
}

#endif /* FA_SM90_FWD_SCHEDULE_CUH */

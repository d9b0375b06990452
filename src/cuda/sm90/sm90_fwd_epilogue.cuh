/*
 * Hopper forward: a tile's end: its rows normalised and their lse, O staged
 * in swizzled shared memory and stored by TMA (by the consumer or by the
 * store thread), the split tail's merge, and the rows of tiles with no
 * visible key.
 */
#ifndef FA_SM90_FWD_EPILOGUE_CUH
#define FA_SM90_FWD_EPILOGUE_CUH

#include "sm90_fwd_l2.cuh"
#include "sm90_fwd_softmax.cuh"

/* Address of output row r (within the sequence) of a tile's head. */
__device__ __forceinline__ uint8_t *sm90_out_row(const Sm90FwdParams &p, const Sm90Tile &t, int r) {
    return (uint8_t *)p.out +
           2 * ((int64_t)t.batch * p.out_sb + (int64_t)(t.seq.q_row0 + r) * p.out_ss + (int64_t)t.head * p.out_sh);
}

/* Rows of a tile with no visible key: zeros straight to global memory. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_zero_rows(const Sm90FwdParams &p, const Sm90Tile &t, int wg, int tid) {
    const int chunks = p.head_dim / 8; /* 16-byte chunks per row */
    int row0 = t.m_block * Cfg::BM + wg * 64;
    for (int c = tid; c < 64 * chunks; c += 128) {
        int r = row0 + c / chunks;
        if (r >= t.seq.seq_q) continue;
        if constexpr (Cfg::ROW_SHIFT)
            if (t.seq.q_row0 + r < 0) continue; /* a phantom row (sm90_fwd_seq) */
        *reinterpret_cast<uint4 *>(sm90_out_row(p, t, r) + (c % chunks) * 16) = make_uint4(0, 0, 0, 0);
    }
}

/* The first `rows` rows of a warpgroup's staged O (64 x head_dim, 128B
 * swizzled slabs) to global memory with ordinary 16-byte stores: used where a
 * TMA box would also write the next varlen sequence's rows. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_staged_rows(const Sm90FwdParams &p, const Sm90Tile &t,
                                                       const uint8_t *o_stage, int row0, int rows, int tid) {
    const int chunks = p.head_dim / 8; /* 16-byte chunks per row */
    for (int c = tid; c < rows * chunks; c += 128) {
        int r = c / chunks, ch = c % chunks;
        /* 128B swizzle: 16-byte chunk index XOR (row mod 8) inside slab ch / 8 */
        const uint8_t *src = o_stage + (ch / 8) * Cfg::O_SLAB_STRIDE + r * 128 + (((ch % 8) ^ (r % 8)) * 16);
        *reinterpret_cast<uint4 *>(sm90_out_row(p, t, row0 + r) + ch * 16) = *reinterpret_cast<const uint4 *>(src);
    }
}

/* The lse of a row of max m and sum l (l = 0: no visible key). */
__device__ __forceinline__ float sm90_lse_of(float m, float l, float s_log2) {
    return l > 0.f ? (m * s_log2 + fast_log2(l)) * 0.69314718055994531f : -INFINITY;
}

/* lse of packed row `row` (varlen: lse_sb is 0) of a batch's head. */
__device__ __forceinline__ float *sm90_lse_row(const Sm90FwdParams &p, int batch, int head, int row) {
    return p.lse + (int64_t)batch * p.lse_sb + (int64_t)head * p.lse_sh + (int64_t)row * p.lse_ss;
}

/* lse of row r (within the sequence) of a tile's head. */
__device__ __forceinline__ float *sm90_lse_at(const Sm90FwdParams &p, const Sm90Tile &t, int r) {
    return sm90_lse_row(p, t.batch, t.head, t.seq.q_row0 + r);
}

/* The part of a tile's epilogue that needs no O, so that it can run while
 * the tile's last P V is on the tensor cores: the row sums over the quad
 * (row_l), the factors that normalise this thread's two rows of O (inv),
 * and their lse, which with STORE_THREAD the store warp writes instead
 * (sm90_stage_lse). */
template <class Cfg>
__device__ __forceinline__ void sm90_finish_rows(const Sm90FwdParams &p, const Sm90Tile &tile, const float *row_max,
                                                 const float *row_sum, float s_log2, int wg, int tid, float *inv,
                                                 float *row_l) {
    const int lane = tid % 32;
    const int row0 = sm90_first_row<Cfg>(tile, wg, tid);
    /* (the second row's lse is 8 rows on; with STORE_THREAD the store warp's) */
    float *lse_row0 = p.lse && !Cfg::STORE_THREAD ? sm90_lse_at(p, tile, row0) : nullptr;
    for (int h = 0; h < 2; ++h) {
        float l = row_sum[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        /* row with no visible key: out 0; l >= 1 otherwise (the max's own P is
         * 1, or at least 1 with LAG_MAX): never subnormal, and the approximate
         * reciprocal and log2 are within 2 ulp. LAG_MAX: O is divided by the
         * packed P's sum instead (sm90_lag_inv, once the last P V is done). */
        if constexpr (!Cfg::LAG_MAX) inv[h] = l > 0.f ? fast_rcp(l) : 0.f;
        if constexpr (Cfg::FP8) /* e4m3: V's descale, applied once to the normalised row */
            if (p.v_descale) inv[h] *= p.v_descale[tile.batch * p.hk + tile.head / p.q_per_kv];
        row_l[h] = l;
        if (!Cfg::STORE_THREAD && p.lse && lane % 4 == 0 && sm90_row_stored<Cfg>(tile, row0 + 8 * h))
            lse_row0[8 * h * p.lse_ss] = sm90_lse_of(row_max[h], l, s_log2);
    }
}

/* STORE_THREAD: a consumer's mailbox. The consumer fills it for each tile
 * (its staging buffer claimed, so the store warp has read the last tile's)
 * and arrives on o_full; each lane of the store warp reads it and arrives
 * on o_empty (lane 0 once the store has read the staged rows). */
struct Sm90Mailbox {
    int4 mail;           /* the store's row, head and batch; what | lse rows << 8 (sm90_post) */
    float s_log2, pad[3]; /* the rows' logit scale */
    float2 stats[64];     /* (max, sum) of each of the warpgroup's 64 rows */
};
static_assert(sizeof(Sm90Mailbox) == SM90_MAILBOX_BYTES, "the shared-memory plan's mailbox size");

/* STORE_THREAD: this thread's rows' max and sum (row_l, from
 * sm90_finish_rows) into the mailbox, for the store warp's lse. */
__device__ __forceinline__ void sm90_stage_lse(const Sm90FwdParams &p, Sm90Mailbox *box, const float *row_max,
                                               const float *row_l, float s_log2, int tid) {
    if (!p.lse) return;
    if (tid % 4 == 0) { /* the quad's rows g and g + 8 */
        const int r = sm90_row_in_wg(tid);
        box->stats[r] = make_float2(row_max[0], row_l[0]);
        box->stats[r + 8] = make_float2(row_max[1], row_l[1]);
    }
    if (tid == 0) box->s_log2 = s_log2;
}

/* LAG_MAX: the factors that normalise O, from the packed P's row sums (L,
 * complete once the tile's last P V is): O and L carry the same rounded P,
 * so a row led by one key gives that key's V exactly. A row with no visible
 * key has L = 0 and gets 0. */
__device__ __forceinline__ void sm90_lag_inv(const float *L, float *inv) {
    inv[0] = L[0] > 0.f ? fast_rcp(L[0]) : 0.f;
    inv[1] = L[2] > 0.f ? fast_rcp(L[2]) : 0.f;
}

/* This warpgroup's O staging buffer (not O_IN_RING) is free once the
 * previous tile's store has read it. With STORE_THREAD the store thread
 * says so on o_empty (the k-th epilogue of this warpgroup waits for phase
 * k - 1; a fresh barrier passes the parity-1 wait). */
template <class Cfg>
__device__ __forceinline__ void sm90_claim_o_buf(uint64_t *o_empty, uint32_t k, int wg, int tid) {
    if constexpr (Cfg::STORE_THREAD) {
        mbar_wait(o_empty, (k & 1) ^ 1);
    } else {
        if (tid == 0) tma_store_wait_read();
        named_bar_sync(BAR_EPI0 + wg, 128);
    }
}

/* STORE_THREAD: what a consumer posts for the store thread with its staged
 * rows: the store's row coordinate, head and batch, and what to do. */
enum { SM90_MAIL_STORE = 0, SM90_MAIL_NONE = 1, SM90_MAIL_END = 2 };

/* lse_rows: how many of the rows from `row` on get an lse from the
 * mailbox's stats (0: none). */
__device__ __forceinline__ void sm90_post(Sm90Mailbox *box, uint64_t *o_full, int row, int head, int batch, int what,
                                          int tid, int lse_rows = 0) {
    if (tid == 0) box->mail = make_int4(row, head, batch, what | lse_rows << 8);
    mbar_arrive(o_full); /* each thread: its staging writes (and thread 0's post) come first */
}

/* Warp 2 of the producer warpgroup (STORE_THREAD): the consumers' O stores
 * (issued by lane 0) and lse (every lane), in the order they come (every
 * consumer ends every tile, so in turn: 0, 1, .., 0, 1, ..). */
template <class Cfg>
__device__ __forceinline__ void sm90_store_warp(const Sm90FwdParams &p, uint8_t *smem, uint64_t *o_full,
                                                  uint64_t *o_empty) {
    const Sm90Mailbox *box = reinterpret_cast<const Sm90Mailbox *>(smem + Cfg::OFF_MAIL);
    const int lane = threadIdx.x % 32;
    if (lane == 0) tma_prefetch_map(&p.tm_o);
    for (uint32_t k = 0;; ++k) {
        bool end = false;
        for (int c = 0; c < Cfg::CONSUMERS; ++c) {
            mbar_wait(&o_full[c], k & 1);
            const int4 m = box[c].mail;
            const int what = m.w & 0xff, lse_rows = m.w >> 8;
            if (what == SM90_MAIL_END) {
                end = true;
                continue;
            }
            const bool store = what == SM90_MAIL_STORE;
            if (store && lane == 0) {
                uint8_t *o_stage = smem + Cfg::OFF_O + c * 64 * 128;
                for (int s = 0; s < Cfg::O_SLABS; ++s)
                    sm90_store_o_box<Cfg>(&p.tm_o, o_stage + s * Cfg::O_SLAB_STRIDE, s * 64, m.x, m.y, m.z);
                tma_store_commit();
            }
            /* the lse of rows m.x, m.x + 1, ... of head m.y, batch m.z (varlen: 0) */
            if (lse_rows > 0) {
                float *lse = sm90_lse_row(p, m.z, m.y, m.x + lane);
#pragma unroll
                for (int j = 0; j < 2; ++j) /* rows lane and lane + 32 */
                    if (lane + 32 * j < lse_rows) {
                        const float2 st = box[c].stats[lane + 32 * j];
                        lse[32 * j * p.lse_ss] = sm90_lse_of(st.x, st.y, box[c].s_log2);
                    }
            }
            if (store && lane == 0) tma_store_wait_read(); /* the rows are free once the store has read them */
            mbar_arrive(&o_empty[c]); /* every lane, once it has read the mailbox */
        }
        if (end) break;
    }
    if (lane == 0) tma_store_wait_all(); /* shared memory must outlive the last store */
}

/* Normalise this warpgroup's 64 rows of O (by inv, from sm90_finish_rows),
 * stage them in swizzled shared memory and store them (TMA, or row by row at
 * the end of a varlen sequence). The staging buffer has been claimed
 * (sm90_claim_o_buf), except with O_IN_RING: there o_stage is a stage of the
 * tile's last kv block, freed (stage_empty) once the store has read it. */
template <class Cfg>
__device__ __forceinline__ void sm90_epilogue(const Sm90FwdParams &p, const Sm90Tile &tile, const float *O,
                                              const float *inv, uint8_t *o_stage, uint64_t *stage_empty,
                                              Sm90Mailbox *mailbox, uint64_t *o_full, int wg, int tid) {
    const int lane = tid % 32;
    /* the other consumer has finished its last S (K stage) or P V (V stage) */
    const bool in_ring = sm90_o_in_ring<Cfg>(wg);
    if constexpr (Cfg::O_IN_RING)
        if (in_ring) named_bar_sync(wg == 0 ? BAR_K_READ : BAR_V_READ, 256);
    /* Each stmatrix stores the warp's 16 rows x 16 columns: matrices (rows
     * 0-7, 8-15) x (column blocks cb, cb + 1), O registers 4cb..4cb+7 (see
     * the layout at the top). Lane l addresses row l % 8 of matrix l / 8. */
    const int mat = lane / 8, mat_row = 16 * (tid / 32) + 8 * (mat % 2) + lane % 8;
    const uint32_t o_row = smem_addr(o_stage) + mat_row * 128;
#pragma unroll
    for (int cb = 0; cb < Cfg::D / 8; cb += 2) {
        const int c8 = cb + mat / 2; /* this lane's 8-column block */
        /* 128B swizzle: 16-byte chunk index XOR (row mod 8) */
        const uint32_t addr = o_row + (c8 / 8) * Cfg::O_SLAB_STRIDE + (((c8 % 8) ^ (lane % 8)) * 16);
        const float *o = O + 4 * cb;
        stmatrix_x4(addr, pack2<elem16_t<Cfg::BF16>>(o[0] * inv[0], o[1] * inv[0]),
                    pack2<elem16_t<Cfg::BF16>>(o[2] * inv[1], o[3] * inv[1]),
                    pack2<elem16_t<Cfg::BF16>>(o[4] * inv[0], o[5] * inv[0]),
                    pack2<elem16_t<Cfg::BF16>>(o[6] * inv[1], o[7] * inv[1]));
    }
    fence_proxy_async_smem(); /* generic writes -> visible to the TMA engine */
    const int wg_row0 = tile.m_block * Cfg::BM + wg * 64, wg_rows = min(64, tile.seq.seq_q - wg_row0);
    const bool by_rows = Cfg::VARLEN && p.cu_seqlens_q && wg_rows < 64;
    /* STORE_THREAD: the rows that get an lse from the mailbox */
    const int lse_rows = p.lse ? max(wg_rows, 0) : 0;
    if constexpr (Cfg::STORE_THREAD) {
        if (!by_rows) {
            sm90_post(mailbox, o_full, tile.seq.q_row0 + wg_row0, tile.head, tile.seq.map_b, SM90_MAIL_STORE, tid,
                      lse_rows);
            return;
        }
    }
    named_bar_sync(BAR_EPI0 + wg, 128);
    if (by_rows) {
        /* Last rows of a varlen sequence: the map's row bound is the packed
         * tensor's, not the sequence's, so store row by row. */
        if (wg_rows > 0) sm90_store_staged_rows<Cfg>(p, tile, o_stage, wg_row0, wg_rows, tid);
        if constexpr (Cfg::O_IN_RING)
            if (in_ring) {
                named_bar_sync(BAR_EPI0 + wg, 128); /* every thread has read its rows of the stage */
                if (tid == 0) mbar_arrive(stage_empty);
            }
        if constexpr (Cfg::STORE_THREAD) /* no O to store; each thread's reads come before its arrive */
            sm90_post(mailbox, o_full, tile.seq.q_row0 + wg_row0, tile.head, tile.seq.map_b, SM90_MAIL_NONE, tid,
                      lse_rows);
    } else if (tid == 0) {
        bool phantom = false; /* ROW_SHIFT: this consumer's 64 rows are phantom rows, stored nowhere */
        if constexpr (Cfg::ROW_SHIFT) phantom = tile.seq.q_row0 + wg_row0 < 0;
        if (!phantom)
            for (int s = 0; s < Cfg::O_SLABS; ++s)
                sm90_store_o_box<Cfg>(&p.tm_o, o_stage + s * Cfg::O_SLAB_STRIDE, s * 64, tile.seq.q_row0 + wg_row0,
                                      tile.head, tile.seq.map_b);
        tma_store_commit();
        if (Cfg::O_IN_RING && in_ring) {
            tma_store_wait_read(); /* the stage goes back to the producer once the store has read it */
            mbar_arrive(stage_empty);
        }
    }
}

/* Slot of the piece CTA c computes of tail tile r. In position order the
 * pieces are numbered c + r (a CTA's second piece lies in the tile after its
 * first, and CTA c + 1 starts where CTA c ends), so no two share a slot. Per
 * consumer warpgroup a slot holds D / 8 float4s of O, one of (row max, row
 * sum) and with LAG_MAX one of the packed P's row sums per thread,
 * thread-minor so that a warp's stores are contiguous. The host sizes the
 * slots by the same count (sm90_split_plan). */
template <class Cfg> __host__ __device__ constexpr int sm90_split_slot_f4s() {
    return Cfg::D / 8 + (Cfg::LAG_MAX ? 2 : 1);
}

template <class Cfg>
__device__ __forceinline__ float4 *sm90_split_slot(const Sm90FwdParams &p, int slot, int wg, int tid) {
    return p.split_partial + (size_t)(slot * Cfg::CONSUMERS + wg) * sm90_split_slot_f4s<Cfg>() * 128 + tid;
}

/* Merges a part of a row's softmax left in shared memory (Sm90ShortSplit:
 * its O in part[j * 128], j < D / 8, then (max, max, sum, sum)) into this
 * thread's rows so far (O, row_max, the partial row_sum), each scaled to
 * the larger max. The split tail below merges the same way from global
 * memory, with the packed P's sums; it keeps its own lines so that its
 * kernels' SASS stays as measured. */
template <class Cfg>
__device__ __forceinline__ void sm90_merge_smem_part(const float4 *part, float *O, float *row_max, float *row_sum,
                                                     float s_log2) {
    constexpr int CHUNKS = Cfg::D / 8; /* float4s of O per thread */
    const float4 stats = part[CHUNKS * 128];
    float keep[2], take[2]; /* factors of the merged rows so far and of this part */
    for (int h = 0; h < 2; ++h) {
        const float m = h ? stats.y : stats.x, l = h ? stats.w : stats.z;
        const float mx = fmaxf(row_max[h], m);
        const float sub = mx == -INFINITY ? 0.f : mx * s_log2; /* rows hidden in both: avoid inf - inf */
        keep[h] = fast_exp2(row_max[h] * s_log2 - sub);
        take[h] = fast_exp2(m * s_log2 - sub);
        row_sum[h] = row_sum[h] * keep[h] + l * take[h];
        row_max[h] = mx;
    }
#pragma unroll
    for (int j = 0; j < CHUNKS; ++j) { /* O[4j], O[4j+1]: the thread's first row; O[4j+2], O[4j+3]: its second */
        const float4 v = part[j * 128];
        O[4 * j] = O[4 * j] * keep[0] + v.x * take[0];
        O[4 * j + 1] = O[4 * j + 1] * keep[0] + v.y * take[0];
        O[4 * j + 2] = O[4 * j + 2] * keep[1] + v.z * take[1];
        O[4 * j + 3] = O[4 * j + 3] * keep[1] + v.w * take[1];
    }
}

/* The end of tail piece t: its O is one part of its tile's. Leaves the part
 * (unnormalised O, the row maxima and the thread's partial row sums, with
 * LAG_MAX the packed P's row sums L) in its slot; the tile's last piece to
 * get here merges every part, in position order (so the result does not
 * depend on which piece that is), into O, row_max, row_sum (and L), and
 * returns true: it writes the tile. */
template <class Cfg>
__device__ __forceinline__ bool sm90_split_merge(const Sm90FwdParams &p, int t, float *O, float *row_max,
                                                 float *row_sum, float *L, float s_log2, int wg, int tid) {
    constexpr int CHUNKS = Cfg::D / 8; /* float4s of O per thread */
    const int r = sm90_split_tile(p, t);
    float4 *mine = sm90_split_slot<Cfg>(p, ((t - p.tail_first) >> 1) + r, wg, tid);
#pragma unroll
    for (int j = 0; j < CHUNKS; ++j) mine[j * 128] = make_float4(O[4 * j], O[4 * j + 1], O[4 * j + 2], O[4 * j + 3]);
    mine[CHUNKS * 128] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
    if constexpr (Cfg::LAG_MAX) mine[(CHUNKS + 1) * 128] = make_float4(L[0], L[2], 0.f, 0.f);
    __threadfence(); /* the part is visible GPU-wide before the count says it is there */
    named_bar_sync(BAR_EPI0 + wg, 128);
    const uint32_t nb = (uint32_t)p.split_blocks;
    const int first = sm90_split_owner(p, r * nb), last = sm90_split_owner(p, (r + 1) * nb - 1);
    bool tile_done = false;
    if (tid == 0) tile_done = atomicAdd(&p.split_count[r * Cfg::CONSUMERS + wg], 1) == last - first;
    if (!named_bar_sync_or(BAR_EPI0 + wg, 128, tile_done)) return false;
    __threadfence(); /* and read after the count */
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
    L[0] = L[2] = 0.f; /* (LAG_MAX; L[1] and L[3] are not read past here) */
    for (int c = first; c <= last; ++c) {
        const float4 *part = sm90_split_slot<Cfg>(p, c + r, wg, tid);
        const float4 stats = __ldcg(part + CHUNKS * 128);
        const float4 packed_sums = Cfg::LAG_MAX ? __ldcg(part + (CHUNKS + 1) * 128) : float4{};
        float keep[2], take[2]; /* factors of the merged rows so far and of this part */
        for (int h = 0; h < 2; ++h) {
            const float m = h ? stats.y : stats.x, l = h ? stats.w : stats.z;
            const float mx = fmaxf(row_max[h], m);
            const float sub = mx == -INFINITY ? 0.f : mx * s_log2; /* rows hidden in both: avoid inf - inf */
            keep[h] = fast_exp2(row_max[h] * s_log2 - sub);      /* 0 before the first part */
            take[h] = fast_exp2(m * s_log2 - sub);
            row_sum[h] = row_sum[h] * keep[h] + l * take[h];
            if constexpr (Cfg::LAG_MAX) L[2 * h] = L[2 * h] * keep[h] + (h ? packed_sums.y : packed_sums.x) * take[h];
            row_max[h] = mx;
        }
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) { /* O[4j], O[4j+1]: the thread's first row; O[4j+2], O[4j+3]: its second */
            const float4 v = __ldcg(part + j * 128);
            O[4 * j] = O[4 * j] * keep[0] + v.x * take[0];
            O[4 * j + 1] = O[4 * j + 1] * keep[0] + v.y * take[0];
            O[4 * j + 2] = O[4 * j + 2] * keep[1] + v.z * take[1];
            O[4 * j + 3] = O[4 * j + 3] * keep[1] + v.w * take[1];
        }
    }
    return true;
}

/* The end of a split tile (Sm90ShortSplit): every consumer holds the same
 * rows over its share of the kv blocks, and each thread the same elements
 * of them. Consumers 1 and 2 leave their part in their slot of the merge
 * buffer (thread-minor float4s, as the split tail's slots) and return
 * false; consumer 0 waits for both, merges them into its own (O, row_max,
 * row_sum) and returns true: it writes the rows. A slot is written again
 * only in a later split tile, after its consumer's turns there, which
 * follow consumer 0's, which follow this merge. */
template <class Cfg>
__device__ __forceinline__ bool sm90_short_merge(uint8_t *merge, float *O, float *row_max, float *row_sum,
                                                 float s_log2, int wg, int tid) {
    constexpr int CHUNKS = Cfg::D / 8;
    float4 *slots = reinterpret_cast<float4 *>(merge) + tid;
    if (wg != 0) {
        float4 *mine = slots + (wg - 1) * Cfg::MERGE_F4S * 128;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) mine[j * 128] = make_float4(O[4 * j], O[4 * j + 1], O[4 * j + 2], O[4 * j + 3]);
        mine[CHUNKS * 128] = make_float4(row_max[0], row_max[1], row_sum[0], row_sum[1]);
        named_bar_arrive(BAR_MERGE, 128 * Cfg::CONSUMERS); /* (orders the writes before consumer 0's reads) */
        return false;
    }
    named_bar_sync(BAR_MERGE, 128 * Cfg::CONSUMERS);
    for (int c = 0; c < Cfg::CONSUMERS - 1; ++c)
        sm90_merge_smem_part<Cfg>(slots + c * Cfg::MERGE_F4S * 128, O, row_max, row_sum, s_log2);
    return true;
}

#endif /* FA_SM90_FWD_EPILOGUE_CUH */

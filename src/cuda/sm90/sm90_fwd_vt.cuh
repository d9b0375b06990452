/*
 * Hopper forward, e4m3: V^T made inside the attention kernel.
 *
 * 8-bit wgmma takes its B operand K-major only, so the P V GEMM reads V^T
 * (head-dim rows of keys, each 32-key chunk permuted to the P fragment
 * order, sm90_fp8_key_of_slot). A kernel of its own (sm90_fp8_transpose_v)
 * writing it ahead of the attention kernel costs the call the time that
 * kernel holds every SM: ~20 us for 16 heads of 16k keys at head dim 128,
 * 1% of that call and 10% of one over 1k keys (docs/perf/sm90.md, item 118).
 * Here the transpose kernel makes only the pairs the first tiles read
 * (Sm90FwdParams::vt_pre_pairs), and the producer warpgroup's idle warps
 * (warp 3, and warp 2 in the three-consumer kernels) write the rest while
 * the consumers compute: each takes units of VT_UNIT_KEYS keys of one
 * (batch, kv head) pair by a ticket (an atomic counter, so units go only to
 * CTAs that run, whatever else shares the GPU), loads the unit's V rows by
 * TMA into a scratch buffer, moves the bytes with byte permutes and writes
 * V^T rows with ordinary stores, then releases the pair's count. The V
 * loader waits for a pair's count to be whole before its first V^T load of
 * the pair (sm90_vt_wait). Units are ticketed in tile order (pair by pair),
 * so the pairs the next tiles need come first.
 */
#ifndef FA_SM90_FWD_VT_CUH
#define FA_SM90_FWD_VT_CUH

#include "sm90_fwd_config.cuh"
#include "sm90_fwd_softmax.cuh"
#include "sm90_ptx.cuh"

/* Byte r of four keys' 32-bit words of V (4 head-dim columns each) as one
 * 32-bit V^T word: four keys' values in head-dim row r of the four. */
__device__ __forceinline__ uint32_t sm90_fp8_vt_word(uint32_t a, uint32_t b, uint32_t c, uint32_t d, int r) {
    const uint32_t sel = r | (4 + r) << 4; /* byte r of the first word, byte r of the second */
    return __byte_perm(__byte_perm(a, b, sel), __byte_perm(c, d, sel), 0x5410);
}

/* Transposing warp W (0: warp 3 of the producer warpgroup, 1: warp 2):
 * V^T units until the ticket runs out. Its two scratch buffers take turns:
 * the next unit's V rows load into one while the lanes write the other's,
 * and the ticket after that is taken while they do. */
template <class Cfg, int W> __device__ __forceinline__ void sm90_vt_transposer(const Sm90FwdParams &p, uint8_t *smem) {
    static_assert(Cfg::VT_IN_KERNEL && W < Cfg::VT_WARPS && Cfg::VT_UNIT_KEYS == 32, "units of one 32-key chunk");
    static_assert(!Cfg::Q_OWN_THREAD && (W == 0 || !Cfg::STORE_THREAD), "warps 2 and 3 are idle");
    constexpr int GROUPS = Cfg::D / 4; /* 4-column groups of a V row */
    uint64_t *bars = reinterpret_cast<uint64_t *>(smem + Cfg::OFF_BAR) + Cfg::VT_BAR + 2 * W;
    uint8_t *buffers = smem + Cfg::OFF_VT + 2 * W * Cfg::VT_BUF_BYTES;
    /* with 24 registers a thread, the lane and the ticket's address are
     * made again where used rather than held (opaque: not hoisted) */
    const auto lane = [] {
        uint32_t l;
        asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
        return l;
    };
    const auto take_ticket = [&p] { return atomicAdd(p.vt_done + opaque_int(p.vt_pairs), 1); };
    /* unit u: keys 32 (u % vt_chunks) .. of pair vt_pre_pairs + u / vt_chunks */
    const auto load = [&](int u, uint32_t buf) {
        int pair, b;
        const int key0 = sm90_divmod(u, p.vt_chunk_div, &pair) * Cfg::VT_UNIT_KEYS;
        const int h = sm90_divmod(pair + p.vt_pre_pairs, p.vt_hk_div, &b);
        mbar_arrive_expect_tx(&bars[buf], Cfg::VT_BUF_BYTES); /* rows past Sk come as zeros */
        tma_load_4d(buffers + buf * Cfg::VT_BUF_BYTES, &p.tm_vsrc, &bars[buf], 0, key0, h, b);
    };
    if (lane() == 0) tma_prefetch_map(&p.tm_vsrc);
    int cur = __shfl_sync(~0u, lane() == 0 ? take_ticket() : 0, 0);
    if (lane() == 0 && cur < p.vt_units) load(cur, 0);
    int next = __shfl_sync(~0u, lane() == 0 ? take_ticket() : 0, 0);
#pragma unroll 1
    for (uint32_t n = 0; cur < p.vt_units; ++n) {
        /* tickets only grow, so every one under vt_units taken here is
         * written before the loop ends */
        const uint32_t buf = n & 1;
        int after = 0;
        if (lane() == 0) {
            if (next < p.vt_units) load(next, buf ^ 1); /* that buffer was read in the turn before */
            after = take_ticket();
        }
        mbar_wait(&bars[buf], (n >> 1) & 1);
        int pair;
        const int key0 = sm90_divmod(cur, p.vt_chunk_div, &pair) * Cfg::VT_UNIT_KEYS;
        pair += p.vt_pre_pairs;
        const uint32_t scratch = smem_addr(buffers + buf * Cfg::VT_BUF_BYTES);
        /* job: 4 head-dim rows (4 columns of V) of one 16-key half, 16 bytes a row */
#pragma unroll 1
        for (int job = (int)lane(); job < GROUPS * 2; job += 32) {
            const int group = job % GROUPS, half = job / GROUPS;
            if (4 * group >= p.head_dim) continue; /* V^T has head_dim rows */
            const uint32_t col = 4 * group;
            const uint32_t at = scratch + 16 * half * Cfg::D + col; /* the half's first key, this group's columns */
            uint8_t *row = p.vt + ((int64_t)pair * p.head_dim + col) * p.vt_cols + key0 + 16 * half;
            /* one V^T row and slot octet at a time, the 8 words loaded again
             * for each: the producer warpgroup has 24 or 32 registers a thread */
#pragma unroll 1
            for (int r = 0; r < 4; ++r, row += p.vt_cols) {
#pragma unroll 1
                for (int o = 0; o < 2; ++o) { /* slots 8o .. 8o + 7 of the half */
                    uint32_t w[8];           /* w[i]: the 4 columns of the key at slot 8o + i */
#pragma unroll
                    for (int i = 0; i < 8; ++i) /* slot 8 + i holds the key 4 past slot i's */
                        asm volatile("ld.shared.b32 %0, [%1];"
                                     : "=r"(w[i])
                                     : "r"(at + 4 * o * Cfg::D + sm90_fp8_key_of_slot(i) * Cfg::D));
                    *reinterpret_cast<uint2 *>(row + 8 * o) = make_uint2(
                        sm90_fp8_vt_word(w[0], w[1], w[2], w[3], r), sm90_fp8_vt_word(w[4], w[5], w[6], w[7], r));
                }
            }
        }
        /* the unit's stores before its count (read by other CTAs' V loaders),
         * and the buffer's reads before the TMA that refills it */
        __threadfence();
        fence_proxy_async_smem();
        __syncwarp();
        if (lane() == 0) red_release_gpu_add(p.vt_done + pair, 1);
        cur = next;
        next = __shfl_sync(~0u, after, 0);
    }
}

#endif /* FA_SM90_FWD_VT_CUH */

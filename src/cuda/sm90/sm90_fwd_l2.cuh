/*
 * Hopper forward: the L2 priority of Q's loads and O's stores. Q is read
 * once and O written once a call, while each K/V block is read by every
 * tile of its head; where Cfg::QO_EVICT_FIRST, Q's and O's lines are the
 * first to leave L2, so that K and V stay for the head's other tiles.
 */
#ifndef FA_SM90_FWD_L2_CUH
#define FA_SM90_FWD_L2_CUH

#include "sm90_ptx.cuh"

/* One TMA box of Q into shared memory. */
template <class Cfg>
__device__ __forceinline__ void sm90_load_q_box(void *dst, const void *map, uint64_t *bar, int c0, int c1, int c2,
                                                int c3) {
    if constexpr (Cfg::QO_EVICT_FIRST)
        tma_load_4d_hint(dst, map, bar, c0, c1, c2, c3, l2_policy_evict_first());
    else
        tma_load_4d(dst, map, bar, c0, c1, c2, c3);
}

/* One TMA box of O from shared memory. */
template <class Cfg>
__device__ __forceinline__ void sm90_store_o_box(const void *map, const void *src, int c0, int c1, int c2, int c3) {
    if constexpr (Cfg::QO_EVICT_FIRST)
        tma_store_4d_hint(map, src, c0, c1, c2, c3, l2_policy_evict_first());
    else
        tma_store_4d(map, src, c0, c1, c2, c3);
}

#endif /* FA_SM90_FWD_L2_CUH */

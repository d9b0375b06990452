/*
 * Small inline-PTX helpers for the Hopper (sm_90a) kernels: mbarriers, bulk
 * tensor copies (TMA), named barriers, register reallocation, warpgroup MMA
 * fences and shared-memory matrix descriptors. One instruction (or one tight
 * loop) per helper so the kernels read like the algorithm.
 */
#ifndef FA_SM90_PTX_CUH
#define FA_SM90_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "../elem.cuh" /* pack2, unpack2, elem16_t: the storage type's conversions */

/* 32-bit shared-memory address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Lane 0's value in every lane: the same value, but one ptxas then knows to
 * be warp-uniform, so what is derived from it (descriptors, ring offsets)
 * can live on the uniform datapath. */
template <class T>
__device__ __forceinline__ T warp_uniform(T v) {
    return __shfl_sync(0xffffffffu, v, 0);
}

/* ---- mbarrier ------------------------------------------------------------ */

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

/* Makes barrier initialisation visible to the async proxy (TMA) before first use. */
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* Arrive and announce `bytes` more transaction bytes (the TMA loads that follow). */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/* count arrivals at once (a thread standing in for several arrivers). */
__device__ __forceinline__ void mbar_arrive_cnt(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

/* Block until the barrier's phase with the given parity has completed. The
 * suspend-time hint (10 ms, in ns) lets the thread sleep until the phase
 * completes instead of returning after the hardware's short default and
 * spinning: without it the two producer threads issued ~18% of the forward
 * kernel's instructions in this loop, power that the capped clock then lacked
 * (docs/perf/sm90.md, item 30). */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, 10000000;\n"
        "@!done bra wait_%=;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

/* ---- TMA (bulk tensor copies) ------------------------------------------- */

__device__ __forceinline__ void tma_prefetch_map(const void *map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}

/* Load one 4-D box (coordinates innermost first) into shared memory; completion
 * is reported to `bar` as transaction bytes. */
__device__ __forceinline__ void tma_load_4d(void *dst, const void *map, uint64_t *bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

/* An L2 eviction priority for bulk copies (their cache-policy operand):
 * lines a copy brings in or writes are the first to be evicted. */
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

/* tma_load_4d with an L2 eviction priority (l2_policy_evict_first). */
__device__ __forceinline__ void tma_load_4d_hint(void *dst, const void *map, uint64_t *bar, int c0, int c1, int c2,
                                                 int c3, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4, %5, %6}], [%2], %7;" ::"r"(smem_addr(dst)),
        "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
        : "memory");
}

/* Copy `bytes` contiguous bytes (16-byte aligned, a multiple of 16) from
 * global to shared memory; completion is reported to `bar` as transaction bytes. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/* Store one 4-D box from shared memory; rows outside the tensor are clipped. */
__device__ __forceinline__ void tma_store_4d(const void *map, const void *src, int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(map),
        "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

/* Add a 2-D box from shared memory into global memory (float32 add), as
 * one bulk reduction; committed and waited for like a store. */
__device__ __forceinline__ void tma_reduce_add_2d(const void *map, const void *src, int c0, int c1) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     map),
                 "r"(smem_addr(src)), "r"(c0), "r"(c1)
                 : "memory");
}

/* tma_store_4d with an L2 eviction priority (l2_policy_evict_first). */
__device__ __forceinline__ void tma_store_4d_hint(const void *map, const void *src, int c0, int c1, int c2, int c3,
                                                  uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3, %4, %5}], [%1], %6;" ::"l"(
            map),
        "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
        : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

/* Wait until every committed store has finished reading shared memory. */
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

/* Wait until every committed store is complete in global memory. */
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

/* Programmatic dependent launch: a grid launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization may start before the
 * grid ahead of it in the stream has finished. That grid lets it start
 * (grid_launch_dependents, once per CTA); it waits for that grid's
 * completion and writes only where it reads them (grid_dependency_wait,
 * which returns at once for a grid launched without the attribute). */
__device__ __forceinline__ void grid_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* Orders this thread's ordinary shared-memory writes before later async-proxy
 * reads (TMA store, wgmma). */
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Store four 8x8 16-bit matrices from their mma fragments: lane l gives the
 * shared address of row l % 8 of matrix l / 8; register j of every lane
 * holds its two elements of matrix j (row lane / 4, columns 2 (lane % 4), +1). */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

/* ---- named barriers and register reallocation --------------------------- */

__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* The same wait for a barrier that warpgroups pass at different places in
 * the code: bar.sync is barrier.sync.aligned, which every participating
 * thread must reach through the same instruction (compute-sanitizer's
 * synccheck reports the rest as divergent); barrier.sync is not aligned. */
__device__ __forceinline__ void named_bar_sync_apart(uint32_t id, uint32_t nthreads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* bar.arrive's unaligned form (see named_bar_sync_apart). */
__device__ __forceinline__ void named_bar_arrive_apart(uint32_t id, uint32_t nthreads) {
    asm volatile("barrier.arrive %0, %1;" ::"r"(id), "r"(nthreads) : "memory");
}

/* bar.sync that also returns whether pred was true in any participating thread. */
__device__ __forceinline__ bool named_bar_sync_or(uint32_t id, uint32_t nthreads, bool pred) {
    uint32_t any;
    asm volatile(
        "{\n"
        " .reg .pred p, q;\n"
        " setp.ne.u32 p, %1, 0;\n"
        " bar.red.or.pred q, %2, %3, p;\n"
        " selp.u32 %0, 1, 0, q;\n"
        "}"
        : "=r"(any)
        : "r"((uint32_t)pred), "r"(id), "r"(nthreads)
        : "memory");
    return any != 0;
}

template <uint32_t N>
__device__ __forceinline__ void regs_dealloc() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

template <uint32_t N>
__device__ __forceinline__ void regs_alloc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}

/* ---- warpgroup MMA bookkeeping ------------------------------------------- */

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

/* Wait until at most N committed wgmma groups of this warpgroup are pending. */
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Pins register arrays in place around an async wgmma window so the compiler
 * does not move copies of accumulators into it (which would serialise wgmma). */
template <int N>
__device__ __forceinline__ void fence_regs(float *r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int N>
__device__ __forceinline__ void fence_regs(uint32_t *r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

/* ---- shared-memory matrix descriptors (swizzled, K-major rows) ------------- */

/* Descriptor of a tile swizzled in SW-byte rows (SW = 128, 64 or 32): start
 * address, leading byte offset, stride byte offset = 8 rows of SW bytes (one
 * swizzle atom), swizzle mode 1 (128 B), 2 (64 B) or 3 (32 B). The tile's
 * atoms must be aligned to their size (base offset 0).
 * Kept whole: a step inside the tile adds offset >> 4 to the low word
 * alone (shared addresses stay below 2^18, so the 14-bit address field never
 * carries into the LBO, nor the low word into the high one), and as a 64-bit
 * add that is one uniform instruction (UIADD3.64) per wgmma operand. Built
 * from a low word and a constant high word instead, each wgmma took an add and
 * a move of the high word into the operand's register pair. */
template <int SW>
struct DescSw {
    static_assert(SW == 128 || SW == 64 || SW == 32, "swizzle span: 128, 64 or 32 bytes");
    /* SBO (8 rows) in the low bits; the swizzle mode in bits 62-63 of the descriptor */
    static constexpr uint32_t HI = ((8 * SW) >> 4) | ((SW == 128 ? 1u : SW == 64 ? 2u : 3u) << 30);
    uint64_t base;
    __device__ __forceinline__ DescSw(uint32_t base_addr, uint32_t lbo_bytes)
        : base(((uint64_t)HI << 32) | ((base_addr & 0x3FFFF) >> 4) | (((lbo_bytes & 0x3FFFF) >> 4) << 16)) {}
    /* the descriptor of the tile starting `offset` bytes (a multiple of 16) past the base */
    __device__ __forceinline__ uint64_t at(uint32_t offset) const { return base + (offset >> 4); }
    /* the same layout `offset` bytes further on (another buffer or ring stage) */
    __device__ __forceinline__ DescSw shifted(uint32_t offset) const {
        DescSw d = *this;
        d.base += offset >> 4;
        return d;
    }
};
using DescSw128 = DescSw<128>;

/* A copy of x the compiler cannot see through: a value computed from it is
 * recomputed rather than kept alive from an earlier computation from x. */
__device__ __forceinline__ int opaque_int(int x) {
    asm volatile("" : "+r"(x));
    return x;
}

/* The same for a 64-bit value, in place. */
__device__ __forceinline__ void opaque_u64(uint64_t *x) { asm volatile("" : "+l"(*x)); }

/* Host builds of the forward's tile schedule (tests/test_sm90_schedule.cu)
 * walk one CTA at a time: the CTA and the grid it stands in for. */
struct Sm90HostGrid {
    int cta, ctas;
};
inline Sm90HostGrid sm90_host_grid = {0, 1};

/* gridDim.x read at the point of use (a special register), for loops that
 * cannot afford to keep it in a register (the 24-register producer). */
__host__ __device__ __forceinline__ int grid_ctas() {
#ifdef __CUDA_ARCH__
    int n;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
    return n;
#else
    return sm90_host_grid.ctas;
#endif
}

/* blockIdx.x (host builds: sm90_host_grid's CTA). */
__host__ __device__ __forceinline__ int grid_cta() {
#ifdef __CUDA_ARCH__
    return (int)blockIdx.x;
#else
    return sm90_host_grid.cta;
#endif
}

/* ---- math ------------------------------------------------------------------ */

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* 1 / x and log2(x), one MUFU instruction each: without -ftz the library's
 * approximations add a rescale for subnormal x (six instructions), which
 * callers whose x is never subnormal need not pay. */
__device__ __forceinline__ float fast_rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float fast_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The lowest n bits set, for any n >= 0: PTX's shift clamps its amount to the
 * word's width (C's shift by 32 is undefined), so n >= 32 gives all bits
 * without a compare. */
__device__ __forceinline__ uint32_t low_bits_u32(uint32_t n) {
    uint32_t high;
    asm("shl.b32 %0, %1, %2;" : "=r"(high) : "r"(0xffffffffu), "r"(n));
    return ~high;
}

#endif /* FA_SM90_PTX_CUH */

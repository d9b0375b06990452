/*
 * How fast the SMs of a Hopper GPU pull data into shared memory with bulk
 * copies (the TMA engine, as the forward's producer loads K and V), from L2
 * (a buffer that fits in it) and from HBM, with one or two CTAs per SM and
 * 16 or 32 KB a copy. It sizes one question of the forward: a kernel with two
 * CTAs per SM and one 64-row consumer each would need twice the K/V traffic
 * of today's 128-row tiles (docs/perf/sm90.md, "What is left").
 *
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc/api \
 *        -Isrc/cuda/sm90 scripts/sm90_l2_rate.cu -o sm90_l2_rate
 *   ./sm90_l2_rate
 *
 * Each CTA's one loading thread keeps STAGES copies in flight through a ring
 * of mbarriers, reading chunks spread over the buffer; nothing reads the
 * shared memory. Rate = bytes copied / kernel time (CUDA events, median of 5
 * after a warm-up).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "sm90_harness.cuh" /* CK */
#include "sm90_ptx.cuh"

constexpr int MAX_STAGES = 8;

/* One thread per CTA copies `iters` chunks of `chunk` bytes into a ring of
 * `stages` shared buffers, each reuse waiting for the copy before it. */
__global__ void l2_rate_kernel(const uint8_t *src, uint32_t chunks, uint32_t chunk, int stages, int iters) {
    extern __shared__ uint8_t smem_raw[];
    __shared__ uint64_t full[MAX_STAGES];
    if (threadIdx.x != 0) return;
    for (int s = 0; s < stages; ++s) mbar_init(&full[s], 1);
    mbar_fence_init();
    /* chunk i of this CTA: a stride through the buffer, different per CTA */
    auto chunk_of = [&](int i) { return (uint32_t)(((uint64_t)blockIdx.x * 7919u + (uint64_t)i * 131u) % chunks); };
    for (int i = 0; i < iters + stages; ++i) {
        const int s = i % stages;
        if (i >= stages) mbar_wait(&full[s], ((i / stages) - 1) & 1); /* copy i - stages has landed */
        if (i < iters) {
            mbar_arrive_expect_tx(&full[s], chunk);
            bulk_load(smem_raw + (size_t)s * chunk, src + (size_t)chunk_of(i) * chunk, chunk, &full[s]);
        }
    }
}

int main() {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("%s, %d SMs, L2 %d MB\n", prop.name, sms, prop.l2CacheSize >> 20);
    const size_t big = (size_t)1 << 30; /* 1 GB: from HBM */
    uint8_t *buf;
    CK(cudaMalloc(&buf, big));
    CK(cudaMemset(buf, 1, big));
    CK(cudaFuncSetAttribute(l2_rate_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    printf("%-6s %-8s %-9s %-7s %s\n", "source", "CTAs/SM", "chunk KB", "stages", "TB/s");
    for (size_t bytes : {(size_t)16 << 20, big}) {
        for (int per_sm : {1, 2}) {
            for (uint32_t chunk : {16u << 10, 32u << 10}) {
                /* in flight per CTA: up to 128 KB at one CTA per SM, 96 KB at two */
                const int stages = std::min(MAX_STAGES, (int)((per_sm == 1 ? 128u << 10 : 96u << 10) / chunk));
                /* ask for enough shared memory that exactly per_sm CTAs fit on an SM */
                const size_t smem = per_sm == 1 ? 200 * 1024 : std::max((size_t)stages * chunk, (size_t)100 * 1024);
                const int grid = sms * per_sm, iters = 2000;
                const uint32_t chunks = (uint32_t)(bytes / chunk);
                std::vector<float> ms;
                for (int r = 0; r < 6; ++r) {
                    CK(cudaEventRecord(a));
                    l2_rate_kernel<<<grid, 32, smem>>>(buf, chunks, chunk, stages, iters);
                    CK(cudaEventRecord(b));
                    CK(cudaEventSynchronize(b));
                    CK(cudaGetLastError());
                    float t;
                    CK(cudaEventElapsedTime(&t, a, b));
                    if (r > 0) ms.push_back(t); /* the first is a warm-up */
                }
                std::sort(ms.begin(), ms.end());
                const double tbs = (double)grid * iters * chunk / (ms[ms.size() / 2] * 1e-3) / 1e12;
                printf("%-6s %-8d %-9u %-7d %.2f\n", bytes == big ? "HBM" : "L2", per_sm, chunk >> 10, stages, tbs);
            }
        }
    }
    cudaFree(buf);
    return 0;
}

/*
 * Kernels with more than 48 KiB of dynamic shared memory must opt in once per
 * device. The call is a driver round trip, so each launcher remembers, per
 * device, that it has done it (concurrent first calls just repeat it).
 */
#ifndef FA_CUDA_SMEM_LIMIT_CUH
#define FA_CUDA_SMEM_LIMIT_CUH

#include <cuda_runtime.h>

template <typename Kernel>
static cudaError_t smem_limit_once(Kernel kernel, size_t bytes, int device, unsigned long long *done) {
    const bool tracked = device >= 0 && device < 64;
    if (tracked && ((*done >> device) & 1ull)) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && tracked) *done |= 1ull << device;
    return e;
}

#endif /* FA_CUDA_SMEM_LIMIT_CUH */

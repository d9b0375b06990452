/*
 * CUDA runtime queries for the front end. The runtime is linked statically:
 * with no driver or no device every query fails cleanly (0 devices, an error
 * status), so the library still loads and runs on the CPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "backend.h"

extern "C" int fa_cuda_runtime_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the error so later calls start clean */
        return 0;
    }
    return n;
}

extern "C" fa_status fa_cuda_runtime_device_info(int idx, char *name, size_t name_len, int *cc_major, int *cc_minor) {
    const int n = fa_cuda_runtime_device_count();
    if (idx < 0 || idx >= n) return fa_set_error(FA_ERR_DEVICE, "idx: CUDA device %d does not exist (%d found)", idx, n);
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, idx);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return fa_set_error(FA_ERR_CUDA, "idx: cannot query CUDA device %d: %s", idx, cudaGetErrorString(e));
    }
    if (name && name_len > 0) snprintf(name, name_len, "%s", prop.name);
    if (cc_major) *cc_major = prop.major;
    if (cc_minor) *cc_minor = prop.minor;
    return FA_OK;
}

extern "C" fa_status fa_cuda_runtime_copy_to_host(void *dst, const void *src, size_t bytes, const fa_exec *x) {
    if (bytes == 0) return FA_OK;
    cudaError_t e = cudaSetDevice(x->device_index);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)x->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)x->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return fa_set_error(FA_ERR_CUDA, "device copy to host: %s", cudaGetErrorString(e));
    }
    return FA_OK;
}

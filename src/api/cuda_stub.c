/* Stand-ins for the CUDA backend's entry points in a CPU-only build. */
#ifndef FA_HAVE_CUDA
#include "backend.h"

const fa_backend_ops *fa_cuda_backend(fa_backend which, int device_index) {
    (void)which;
    (void)device_index;
    return NULL;
}

int fa_cuda_runtime_device_count(void) { return 0; }

fa_status fa_cuda_runtime_device_info(int idx, char *name, size_t name_len, int *cc_major, int *cc_minor) {
    (void)idx; (void)name; (void)name_len; (void)cc_major; (void)cc_minor;
    return fa_set_error(FA_ERR_BACKEND, "device: this build has no CUDA backend");
}

fa_status fa_cuda_runtime_copy_to_host(void *dst, const void *src, size_t bytes, const fa_exec *x) {
    (void)dst; (void)src; (void)bytes; (void)x;
    return fa_set_error(FA_ERR_BACKEND, "device: this build has no CUDA backend");
}
#else
typedef int fa_cuda_stub_unused; /* ISO C forbids an empty translation unit */
#endif

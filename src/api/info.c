/* Introspection: CPU features, CUDA devices, the FLOP convention. */
#include "frontend.h"
#include "../cpu/cpu_probe.h"

const char *fa_cpu_features(void) { return fa_cpu_feature_string(); }

int fa_cuda_device_count(void) { return fa_cuda_runtime_device_count(); }

fa_status fa_cuda_device_info(int idx, char *name, size_t name_len, int *cc_major, int *cc_minor) {
    fa_clear_error();
    if (idx < 0 || idx >= fa_cuda_runtime_device_count())
        return fa_set_error(FA_ERR_DEVICE, "idx: no CUDA device %d (found %d)", idx, fa_cuda_runtime_device_count());
    return fa_cuda_runtime_device_info(idx, name, name_len, cc_major, cc_minor);
}

double fa_fwd_flops(int64_t B, int64_t Hq, int64_t Sq, int64_t Sk, int64_t D, int causal) {
    double f = 4.0 * (double)B * (double)Hq * (double)Sq * (double)Sk * (double)D;
    return (causal && Sq == Sk) ? f / 2 : f;
}

/* Choosing a backend for a call, and what is available on this machine. */
#include "frontend.h"

const char *fa_backend_name(fa_backend b) {
    switch (b) {
    case FA_BACKEND_AUTO: return "auto";
    case FA_BACKEND_REFERENCE: return "reference";
    case FA_BACKEND_CPU: return "cpu";
    case FA_BACKEND_CUDA: return "cuda";
    case FA_BACKEND_CUDA_SM80: return "cuda_sm80";
    }
    return "unknown";
}

int fa_backend_available(fa_backend b) {
    switch (b) {
    case FA_BACKEND_AUTO:
    case FA_BACKEND_REFERENCE:
    case FA_BACKEND_CPU: return 1;
    case FA_BACKEND_CUDA:
    case FA_BACKEND_CUDA_SM80: return fa_cuda_runtime_device_count() > 0 && fa_cuda_backend(b, 0) != NULL;
    }
    return 0;
}

fa_status fa_select_backend(const fa_context *ctx, fa_device_type device, int index, const fa_backend_ops **ops) {
    fa_backend want = ctx->backend;
    const char *where = device == FA_DEVICE_CPU ? "CPU memory" : "CUDA memory";
    switch (want) {
    case FA_BACKEND_REFERENCE:
    case FA_BACKEND_CPU:
        if (device != FA_DEVICE_CPU)
            return fa_set_error(FA_ERR_DEVICE, "q: the %s backend needs tensors in CPU memory, got %s",
                                fa_backend_name(want), where);
        *ops = want == FA_BACKEND_REFERENCE ? &fa_ref_backend : &fa_cpu_backend;
        return FA_OK;
    case FA_BACKEND_CUDA:
    case FA_BACKEND_CUDA_SM80:
        if (device != FA_DEVICE_CUDA)
            return fa_set_error(FA_ERR_DEVICE, "q: the %s backend needs tensors in CUDA memory, got %s",
                                fa_backend_name(want), where);
        break;
    case FA_BACKEND_AUTO:
        if (device == FA_DEVICE_CPU) {
            *ops = &fa_cpu_backend;
            return FA_OK;
        }
        want = FA_BACKEND_CUDA;
        break;
    }
    *ops = fa_cuda_backend(want, index);
    if (!*ops)
        return fa_set_error(FA_ERR_BACKEND, "q: tensors are in CUDA memory (device %d) but the %s backend is %s", index,
                            fa_backend_name(want),
                            fa_cuda_runtime_device_count() > 0 ? "not usable on this device" : "not available (no CUDA build, driver or device)");
    return FA_OK;
}

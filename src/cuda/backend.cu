/*
 * The CUDA backend: device checks, dtype support, workspace sizes, and the
 * choice between the Hopper kernels (src/cuda/sm90) and the portable
 * mma.sync kernels (src/cuda/sm80). Nothing here allocates or synchronises in
 * a call: the front end provides the workspace on x->stream.
 */
#include <cuda_runtime.h>

#include "backend.h"
#include "sm80/sm80.h"
#include "sm90/sm90.h"

#define MAX_DEVICES 64

/* What the backend needs to know about a device, read once. Concurrent first
 * reads write the same values, so no lock is needed. */
typedef struct device_caps {
    int known;
    int usable; /* compute capability 8.0 or newer */
    int major, minor;
    int sms;
} device_caps;

static device_caps caps_table[MAX_DEVICES];

static const device_caps *device_caps_get(int idx) {
    if (idx < 0 || idx >= MAX_DEVICES) return NULL;
    device_caps *c = &caps_table[idx];
    if (!c->known) {
        int n = 0, major = 0, minor = 0, sms = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || idx >= n ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, idx) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, idx) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, idx) != cudaSuccess) {
            (void)cudaGetLastError();
            return NULL; /* not cached: a later call may find the device */
        }
        c->major = major;
        c->minor = minor;
        c->sms = sms;
        c->usable = major >= 8;
        c->known = 1;
    }
    return c;
}

static int is_hopper(int idx) {
    const device_caps *c = device_caps_get(idx);
    return c && c->major == 9 && c->minor == 0;
}

static fa_status set_device(const fa_exec *x, const char *what) {
    cudaError_t e = cudaSetDevice(x->device_index);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return fa_set_error(FA_ERR_CUDA, "%s: cannot use CUDA device %d: %s", what, x->device_index, cudaGetErrorString(e));
    }
    return FA_OK;
}

/* Checks shared by both flavours; `hopper` allows the fp8 forward. */
static fa_status check_problem(const fa_problem *p, fa_op op, const char *name, int hopper) {
    if (p->dtype == FA_F8_E4M3) {
        if (hopper && op == FA_OP_FWD && fa_sm90_fwd_supports(p)) return FA_OK;
        if (hopper && op == FA_OP_FWD)
            return fa_set_error(FA_ERR_UNSUPPORTED,
                                "q: float8_e4m3 forward takes head dims that are multiples of 16 up to 256 (got %lld), "
                                "no KV cache, dropout or ALiBi, and 16-byte aligned V",
                                (long long)p->D);
        return fa_set_error(FA_ERR_DTYPE, "q: dtype float8_e4m3 is not supported by the %s backend%s", name,
                            op == FA_OP_FWD ? " on this device (float8 forward needs the Hopper kernels)"
                                            : " (float8 is forward only)");
    }
    if (p->dtype != FA_F16 && p->dtype != FA_BF16)
        return fa_set_error(FA_ERR_DTYPE, "q: dtype %s is not supported by the %s backend (float16 and bfloat16 only)",
                            fa_dtype_name(p->dtype), name);
    if (p->Hq > 65535 || p->B > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "q: the %s backend takes at most 65535 heads and 65535 sequences, got %lld and %lld",
                            name, (long long)p->Hq, (long long)p->B);
    if (p->Sq > 0x7fffffffll || p->Sk > 0x7fffffffll)
        return fa_set_error(FA_ERR_UNSUPPORTED, "q: the %s backend takes sequences shorter than 2^31", name);
    return FA_OK;
}

static int device_sms(const fa_exec *x) {
    const device_caps *c = device_caps_get(x->device_index);
    return c ? c->sms : 0;
}

/* ---- flavour: portable kernels only --------------------------------------- */

static fa_status sm80_supports(const fa_problem *p, fa_op op) { return check_problem(p, op, "cuda_sm80", 0); }

static size_t sm80_workspace_size(const fa_problem *p, fa_op op, const fa_exec *x) {
    if (op == FA_OP_BWD) return sm80_bwd_workspace(p);
    if (op == FA_OP_KVCACHE) return sm80_kvcache_workspace(p, sm80_kvcache_splits(p, device_sms(x)));
    return 0;
}

static fa_status sm80_fwd_op(const fa_problem *p, const fa_exec *x) {
    fa_status s = set_device(x, "forward");
    return s != FA_OK ? s : sm80_fwd(p, x);
}

static fa_status sm80_bwd_op(const fa_problem *p, const fa_exec *x) {
    fa_status s = set_device(x, "backward");
    return s != FA_OK ? s : sm80_bwd(p, x);
}

static fa_status sm80_kvcache_op(const fa_problem *p, const fa_exec *x) {
    fa_status s = set_device(x, "kvcache");
    return s != FA_OK ? s : sm80_kvcache(p, x, sm80_kvcache_splits(p, device_sms(x)));
}

static fa_status merge_op(const fa_merge_problem *m, const fa_exec *x) {
    fa_status s = set_device(x, "merge");
    return s != FA_OK ? s : sm80_merge(m, x);
}

static void *cuda_alloc(size_t bytes, const fa_exec *x) {
    if (set_device(x, "workspace") != FA_OK) return NULL;
    void *ptr = NULL;
    cudaError_t e = cudaMallocAsync(&ptr, bytes, (cudaStream_t)x->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fa_set_error(FA_ERR_OUT_OF_MEMORY, "workspace: cannot allocate %zu bytes on CUDA device %d: %s", bytes,
                     x->device_index, cudaGetErrorString(e));
        return NULL;
    }
    return ptr;
}

static void cuda_release(void *ptr, const fa_exec *x) {
    if (!ptr || set_device(x, "workspace") != FA_OK) return;
    if (cudaFreeAsync(ptr, (cudaStream_t)x->stream) != cudaSuccess) (void)cudaGetLastError();
}

/* ---- flavour: best kernels for a Hopper device ---------------------------- */

static fa_status hopper_supports(const fa_problem *p, fa_op op) { return check_problem(p, op, "cuda", 1); }

static size_t hopper_workspace_size(const fa_problem *p, fa_op op, const fa_exec *x) {
    if (op == FA_OP_FWD && fa_sm90_fwd_supports(p)) return fa_sm90_fwd_workspace(p, x);
    if (op == FA_OP_BWD && fa_sm90_bwd_supports(p)) return fa_sm90_bwd_workspace(p);
    return sm80_workspace_size(p, op, x);
}

static fa_status hopper_fwd_op(const fa_problem *p, const fa_exec *x) {
    fa_status s = set_device(x, "forward");
    if (s != FA_OK) return s;
    return fa_sm90_fwd_supports(p) ? fa_sm90_fwd(p, x) : sm80_fwd(p, x);
}

static fa_status hopper_bwd_op(const fa_problem *p, const fa_exec *x) {
    fa_status s = set_device(x, "backward");
    if (s != FA_OK) return s;
    return fa_sm90_bwd_supports(p) ? fa_sm90_bwd(p, x) : sm80_bwd(p, x);
}

static fa_status cuda_supports(const fa_problem *p, fa_op op) { return check_problem(p, op, "cuda", 0); }

static const fa_backend_ops ops_sm80 = {
    "cuda_sm80", sm80_supports, sm80_workspace_size, sm80_fwd_op, sm80_bwd_op, sm80_kvcache_op, merge_op,
    cuda_alloc, cuda_release,
};
/* FA_BACKEND_CUDA on a device with no specialised kernels. */
static const fa_backend_ops ops_cuda = {
    "cuda", cuda_supports, sm80_workspace_size, sm80_fwd_op, sm80_bwd_op, sm80_kvcache_op, merge_op,
    cuda_alloc, cuda_release,
};
/* FA_BACKEND_CUDA on compute capability 9.0. */
static const fa_backend_ops ops_cuda_hopper = {
    "cuda", hopper_supports, hopper_workspace_size, hopper_fwd_op, hopper_bwd_op, sm80_kvcache_op, merge_op,
    cuda_alloc, cuda_release,
};

extern "C" const fa_backend_ops *fa_cuda_backend(fa_backend which, int device_index) {
    const device_caps *c = device_caps_get(device_index);
    if (!c || !c->usable) return NULL;
    if (which == FA_BACKEND_CUDA_SM80) return &ops_sm80;
    if (which == FA_BACKEND_CUDA) return is_hopper(device_index) ? &ops_cuda_hopper : &ops_cuda;
    return NULL;
}

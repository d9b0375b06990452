/*
 * Host helpers shared by the Hopper forward and backward: the head dims the
 * kernels take, TMA tensor maps over the library's (batch, seq, head, dim)
 * views, and the SM count that sizes persistent grids.
 */
#ifndef FA_SM90_HOST_CUH
#define FA_SM90_HOST_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <stdint.h>

#include "backend.h"

/* Head dims run on the kernel of the next size up: TMA zero-fills the
 * missing columns on load and clips them on store. The 16-bit forward and
 * the backward have kernels for 64, 96, 128, 192 and 256
 * (sm90_kernel_head_dim), the e4m3 forward for 64, 128, 192 and 256
 * (sm90_pick).
 * A multiple of 8 keeps rows 16-byte aligned. */
static inline int sm90_head_dim_ok(int64_t d) { return d >= 8 && d <= 256 && d % 8 == 0; }
static inline int sm90_kernel_head_dim(int64_t d) {
    return d <= 64 ? 64 : d <= 96 ? 96 : d <= 128 ? 128 : d <= 192 ? 192 : 256;
}

/* cuTensorMapEncodeTiled, reached through the runtime so nothing links -lcuda. */
static inline PFN_cuTensorMapEncodeTiled_v12000 sm90_encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    static int tried = 0;
    if (!tried) {
        void *ptr = NULL;
        cudaDriverEntryPointQueryResult qres;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &qres) ==
                cudaSuccess &&
            qres == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)ptr;
        else
            (void)cudaGetLastError(); /* do not leave a sticky error for the caller */
        tried = 1;
    }
    return fn;
}

/* 4-D map over a (B, S, H, D) view (strides in elements), boxes of
 * box_bytes (one swizzle span, 128, 64 or 32 bytes: 64 16-bit or 128 8-bit
 * columns at 128) x box_rows rows.
 * Returns 0 if TMA cannot address the view (alignment, stride limits). With
 * map NULL it only checks that (the "does this kernel take the problem"
 * questions, which also ask for the driver's encoder: sm90_encode_fn):
 * encoding is a driver call, done once, when launching. */
static inline int sm90_make_map(CUtensorMap *map, const fa_view *v, fa_dtype dt, int64_t B, int64_t S, int64_t H,
                                int64_t D, int box_rows, int box_bytes = 128) {
    const int64_t es = dt == FA_F8_E4M3 ? 1 : 2;
    if (((uintptr_t)v->data) % 16) return 0;
    int64_t dims[4] = {D, S, H, B};
    int64_t strides[3] = {v->ss * es, v->sh * es, v->sb * es};
    /* A dimension of extent 1 is never stepped over: give it any legal stride. */
    int64_t extent = D * es;
    for (int i = 0; i < 3; ++i) extent = extent > strides[i] * dims[i + 1] ? extent : strides[i] * dims[i + 1];
    extent = (extent + 15) / 16 * 16;
    for (int i = 0; i < 3; ++i)
        if (dims[i + 1] == 1) strides[i] = extent;
    cuuint64_t gdim[4];
    cuuint64_t gstride[3];
    for (int i = 0; i < 4; ++i) {
        if (dims[i] <= 0 || dims[i] > ((int64_t)1 << 31)) return 0;
        gdim[i] = (cuuint64_t)dims[i];
    }
    for (int i = 0; i < 3; ++i) {
        if (strides[i] <= 0 || strides[i] % 16 || strides[i] >= ((int64_t)1 << 40)) return 0;
        gstride[i] = (cuuint64_t)strides[i];
    }
    if (!map) return 1;
    PFN_cuTensorMapEncodeTiled_v12000 encode = sm90_encode_fn();
    if (!encode) return 0;
    cuuint32_t box[4] = {(cuuint32_t)(box_bytes / es), (cuuint32_t)box_rows, 1, 1};
    cuuint32_t estride[4] = {1, 1, 1, 1};
    CUtensorMapDataType type = dt == FA_BF16    ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                               : dt == FA_F16   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                : CU_TENSOR_MAP_DATA_TYPE_UINT8; /* e4m3 bytes */
    CUresult r = encode(map, type, 4,
                        v->data, gdim, gstride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        box_bytes == 32   ? CU_TENSOR_MAP_SWIZZLE_32B
                        : box_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                          : CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* Multiprocessor count of a device, cached (the persistent grid size). */
static inline int sm90_num_sms(int device) {
    static int cached[64];
    if (device < 0 || device >= 64) device = 0;
    if (!cached[device]) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) n = 132;
        cached[device] = n;
    }
    return cached[device];
}

/* Launches a kernel; with early set, one that may start before the work
 * ahead of it in the stream has ended (programmatic stream serialisation):
 * its CTAs take the SMs as that work leaves them. Such a kernel must wait
 * for that work (grid_dependency_wait) before it reads what that work
 * writes, and before it writes anything; where that work lets it start
 * (grid_launch_dependents), no launch gap separates the two. */
template <typename... Params, typename... Args>
static inline cudaError_t sm90_launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                             cudaStream_t stream, bool early, Args... args) {
    cudaLaunchConfig_t launch = {};
    launch.gridDim = grid;
    launch.blockDim = block;
    launch.dynamicSmemBytes = smem;
    launch.stream = stream;
    cudaLaunchAttribute early_start;
    early_start.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early_start.val.programmaticStreamSerializationAllowed = 1;
    launch.attrs = &early_start;
    launch.numAttrs = early ? 1 : 0;
    return cudaLaunchKernelEx(&launch, kernel, args...);
}

#endif /* FA_SM90_HOST_CUH */

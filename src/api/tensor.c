/* Tensor descriptors: constructors, dtype facts, the version string. */
#include <string.h>

#include "flashattn.h"

#define FA_STR2(x) #x
#define FA_STR(x) FA_STR2(x)

const char *fa_version(void) {
    return FA_STR(FA_VERSION_MAJOR) "." FA_STR(FA_VERSION_MINOR) "." FA_STR(FA_VERSION_PATCH);
}

size_t fa_dtype_size(fa_dtype t) {
    switch (t) {
    case FA_F32: return 4;
    case FA_F16: return 2;
    case FA_BF16: return 2;
    case FA_F8_E4M3: return 1;
    case FA_I32: return 4;
    case FA_U8: return 1;
    }
    return 0;
}

const char *fa_dtype_name(fa_dtype t) {
    switch (t) {
    case FA_F32: return "float32";
    case FA_F16: return "float16";
    case FA_BF16: return "bfloat16";
    case FA_F8_E4M3: return "float8_e4m3";
    case FA_I32: return "int32";
    case FA_U8: return "uint8";
    }
    return "unknown";
}

/* Row-major contiguous strides for the first ndim entries of shape. */
static fa_tensor make_tensor(void *data, fa_dtype t, int ndim, const int64_t *shape) {
    fa_tensor x;
    memset(&x, 0, sizeof x);
    x.data = data;
    x.dtype = t;
    x.device = FA_DEVICE_CPU;
    x.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        x.shape[d] = shape[d];
        x.stride[d] = stride;
        stride *= shape[d] > 0 ? shape[d] : 1;
    }
    return x;
}

fa_tensor fa_tensor_1d(void *data, fa_dtype t, int64_t n0) {
    int64_t s[1] = {n0};
    return make_tensor(data, t, 1, s);
}

fa_tensor fa_tensor_2d(void *data, fa_dtype t, int64_t n0, int64_t n1) {
    int64_t s[2] = {n0, n1};
    return make_tensor(data, t, 2, s);
}

fa_tensor fa_tensor_3d(void *data, fa_dtype t, int64_t n0, int64_t n1, int64_t n2) {
    int64_t s[3] = {n0, n1, n2};
    return make_tensor(data, t, 3, s);
}

fa_tensor fa_tensor_4d(void *data, fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    int64_t s[4] = {n0, n1, n2, n3};
    return make_tensor(data, t, 4, s);
}

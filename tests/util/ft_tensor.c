/* Test tensors: layouts with padding, poisoning, host/device copies, conversions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "convert.h"
#include "ft.h"

#define POISON_BYTE 0xFF /* 0xFFFFFFFF and 0xFFFF are NaN in float32, float16 and bfloat16 */

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(3);
    }
    return p;
}

ft_tensor ft_alloc(fa_dtype t, int ndim, const int64_t *shape, ft_layout layout) {
    ft_tensor x;
    memset(&x, 0, sizeof x);
    x.dtype = t;
    x.ndim = ndim;
    int64_t numel = 1;
    for (int d = 0; d < ndim; ++d) {
        x.shape[d] = shape[d];
        numel *= shape[d];
    }
    int is_qkv = layout >= FT_QKV0 && layout <= FT_QKV2;
    int padded = layout == FT_PADDED || layout == FT_PADDED_ODD;
    if (layout == FT_CONTIG || (is_qkv && ndim != 4) || (padded && ndim < 2) || layout == FT_GUARDED) {
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; --d) {
            x.stride[d] = s;
            s *= shape[d] > 0 ? shape[d] : 1;
        }
        x.offset = layout == FT_CONTIG ? 0 : FT_GUARD;
        x.nbuf = (size_t)(numel + 2 * x.offset);
    } else if (padded) {
        /* Gaps after every row of every dimension. FT_PADDED keeps 16-byte
         * alignment wherever the dense layout has it; FT_PADDED_ODD uses gaps
         * of different odd sizes, so a kernel that mixes up two strides or
         * assumes alignment reads the wrong thing. */
        int64_t unit = 16 / (int64_t)fa_dtype_size(t);
        int odd = layout == FT_PADDED_ODD;
        x.stride[ndim - 1] = 1;
        x.stride[ndim - 2] = shape[ndim - 1] + (odd ? 3 : unit);
        for (int d = ndim - 3; d >= 0; --d) x.stride[d] = shape[d + 1] * x.stride[d + 1] + (odd ? 5 + 2 * d : unit * (d + 2));
        x.offset = FT_GUARD + odd;
        int64_t last = 0;
        for (int d = 0; d < ndim; ++d) last += (shape[d] > 0 ? shape[d] - 1 : 0) * x.stride[d];
        x.nbuf = (size_t)(x.offset + (numel ? last + 1 : 0) + FT_GUARD);
    } else {
        /* Slot s of a packed (B, S, 3, H, D) buffer. */
        int64_t H = shape[2], D = shape[3];
        x.stride[3] = 1;
        x.stride[2] = D;
        x.stride[1] = 3 * H * D;
        x.stride[0] = shape[1] * 3 * H * D;
        x.offset = FT_GUARD + (int64_t)(layout - FT_QKV0) * H * D;
        x.nbuf = (size_t)(shape[0] * shape[1] * 3 * H * D + 2 * FT_GUARD);
    }
    size_t bytes = x.nbuf * fa_dtype_size(t);
    x.host = xmalloc(bytes);
    memset(x.host, POISON_BYTE, bytes);
    return x;
}

ft_tensor ft_alloc4(fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3, ft_layout layout) {
    int64_t s[4] = {n0, n1, n2, n3};
    return ft_alloc(t, 4, s, layout);
}

void ft_free(ft_tensor *x) {
    free(x->host);
#ifdef FA_HAVE_CUDA
    if (x->dev) cudaFree(x->dev);
#endif
    memset(x, 0, sizeof *x);
}

int64_t ft_numel(const ft_tensor *x) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; ++d) n *= x->shape[d];
    return n;
}

int64_t ft_index(const ft_tensor *x, int64_t e) {
    int64_t idx = x->offset;
    for (int d = x->ndim - 1; d >= 0; --d) {
        idx += (e % x->shape[d]) * x->stride[d];
        e /= x->shape[d];
    }
    return idx;
}

fa_tensor ft_view(const ft_tensor *x, int on_device) {
    fa_tensor t;
    memset(&t, 0, sizeof t);
    size_t es = fa_dtype_size(x->dtype);
    int dev = on_device && x->dev;
    unsigned char *base = dev ? (unsigned char *)x->dev : x->host;
    t.data = base + (size_t)x->offset * es;
    t.dtype = x->dtype;
    t.device = dev ? FA_DEVICE_CUDA : FA_DEVICE_CPU;
    t.device_index = 0;
    t.ndim = x->ndim;
    for (int d = 0; d < x->ndim; ++d) {
        t.shape[d] = x->shape[d];
        t.stride[d] = x->stride[d];
    }
    return t;
}

int ft_upload(ft_tensor *x) {
#ifdef FA_HAVE_CUDA
    size_t bytes = x->nbuf * fa_dtype_size(x->dtype);
    if (!x->dev && cudaMalloc(&x->dev, bytes ? bytes : 1) != cudaSuccess) return 0;
    return cudaMemcpy(x->dev, x->host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
#else
    (void)x;
    return 1;
#endif
}

int ft_download(ft_tensor *x) {
#ifdef FA_HAVE_CUDA
    if (!x->dev) return 1;
    size_t bytes = x->nbuf * fa_dtype_size(x->dtype);
    return cudaMemcpy(x->host, x->dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#else
    (void)x;
    return 1;
#endif
}

fa_tensor ft_arg(ft_tensor *x) {
    if (ft_on_device) ft_upload(x);
    return ft_view(x, ft_on_device);
}

void *ft_buffer_alloc(size_t bytes) {
#ifdef FA_HAVE_CUDA
    if (ft_on_device) {
        void *p = NULL;
        return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
    }
#endif
    return xmalloc(bytes);
}

void ft_buffer_free(void *ptr) {
#ifdef FA_HAVE_CUDA
    if (ft_on_device) {
        cudaFree(ptr);
        return;
    }
#endif
    free(ptr);
}

void ft_poison(ft_tensor *x) {
    memset(x->host, POISON_BYTE, x->nbuf * fa_dtype_size(x->dtype));
    if (x->dev) ft_upload(x);
}

int ft_padding_intact(const ft_tensor *x) {
    size_t es = fa_dtype_size(x->dtype);
    unsigned char *logical = calloc(x->nbuf ? x->nbuf : 1, 1);
    if (!logical) return 0;
    int64_t n = ft_numel(x);
    for (int64_t e = 0; e < n; ++e) logical[ft_index(x, e)] = 1;
    int ok = 1;
    for (size_t i = 0; i < x->nbuf && ok; ++i) {
        if (logical[i]) continue;
        for (size_t b = 0; b < es; ++b)
            if (x->host[i * es + b] != POISON_BYTE) ok = 0;
    }
    free(logical);
    return ok;
}

float ft_round(fa_dtype t, float v) {
    uint16_t h;
    switch (t) {
    case FA_F16: fa_store_f(&h, FA_F16, 0, v); return fa_load_f(&h, FA_F16, 0);
    case FA_BF16: fa_store_f(&h, FA_BF16, 0, v); return fa_load_f(&h, FA_BF16, 0);
    default: return v;
    }
}

float *ft_to_f32(const ft_tensor *x) {
    int64_t n = ft_numel(x);
    float *v = xmalloc((size_t)n * sizeof(float));
    for (int64_t e = 0; e < n; ++e) {
        int64_t i = ft_index(x, e);
        if (x->dtype == FA_I32) v[e] = (float)((const int32_t *)x->host)[i];
        else v[e] = fa_load_f(x->host, x->dtype, i);
    }
    return v;
}

float ft_get(const ft_tensor *x, int64_t idx) { return fa_load_f(x->host, x->dtype, idx); }

void ft_from_f32(ft_tensor *x, const float *v) {
    int64_t n = ft_numel(x);
    for (int64_t e = 0; e < n; ++e) fa_store_f(x->host, x->dtype, ft_index(x, e), v[e]);
}

void ft_fill_normal(ft_tensor *x, ft_rng *r, double scale) {
    int64_t n = ft_numel(x);
    for (int64_t e = 0; e < n; ++e)
        fa_store_f(x->host, x->dtype, ft_index(x, e), (float)(scale * ft_rng_normal(r)));
}

ft_tensor ft_f32_copy(const ft_tensor *x) {
    ft_tensor c = ft_alloc(FA_F32, x->ndim, x->shape, FT_CONTIG);
    float *v = ft_to_f32(x);
    memcpy(c.host, v, (size_t)ft_numel(x) * sizeof(float));
    free(v);
    return c;
}

/* --- error measurement ------------------------------------------------------- */

ft_err ft_compare(const float *x, const float *ref, int64_t n) {
    ft_err e = {0.0, 0.0, 0, -1};
    for (int64_t i = 0; i < n; ++i) {
        double r = ref[i], v = x[i], d;
        if (isnan(v)) {
            ++e.nan;
            d = INFINITY;
        } else if (isinf(r) || isinf(v)) {
            d = (r == v) ? 0.0 : INFINITY; /* -inf lse must match exactly */
        } else {
            d = fabs(v - r);
        }
        if (isfinite(r) && fabs(r) > e.max_ref) e.max_ref = fabs(r);
        if (d > e.max_err || (e.worst < 0 && d == e.max_err)) {
            e.max_err = d;
            e.worst = i;
        }
    }
    if (e.max_err < 0) e.max_err = 0;
    return e;
}

int64_t ft_exact_zero_violations(const float *x, const uint8_t *must_be_zero, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
        if (must_be_zero[i] && x[i] != 0.0f) ++bad;
    return bad;
}

/* Compare one result tensor; returns 1 if it passes, printing why not. */
int ft_check_result(const char *what, const ft_tensor *got, const float *ref, const float *naive,
                        const uint8_t *must_be_zero, fa_dtype dt, int is_grad, double magnitude,
                        char *summary, size_t summary_len) {
    int ok = 1;
    int64_t n = ft_numel(got);
    float *g = ft_to_f32(got);
    ft_err e = ft_compare(g, ref, n);
    ft_err eb = ft_compare(naive, ref, n);
    if (magnitude < e.max_ref) magnitude = e.max_ref;
    double tol = ft_tolerance(dt, eb.max_err, magnitude, is_grad);
    if (!ft_padding_intact(got)) ok = ft_note("%s: wrote outside the logical tensor (padding changed)", what);
    if (e.nan) ok = ft_note("%s: %lld NaN (unwritten or computed)", what, (long long)e.nan);
    int64_t z = must_be_zero ? ft_exact_zero_violations(g, must_be_zero, n) : 0;
    if (z) ok = ft_note("%s: %lld elements should be exactly 0 (masked rows / unseen keys)", what, (long long)z);
    if (!(e.max_err <= tol)) {
        ok = ft_note("%s: max err %.3g > tol %.3g (naive %.3g, max|ref| %.3g) at element %lld: got %g want %g",
                     what, e.max_err, tol, eb.max_err, e.max_ref, (long long)e.worst,
                     e.worst >= 0 ? g[e.worst] : 0.0, e.worst >= 0 ? ref[e.worst] : 0.0);
    }
    size_t used = strlen(summary);
    snprintf(summary + used, summary_len - used, "%s%s %.2g/%.2g", used ? ", " : "", what, e.max_err, tol);
    free(g);
    return ok;
}

double ft_tolerance(fa_dtype t, double baseline_err, double magnitude, int is_grad) {
    double rel_floor = t == FA_F16 ? 1.0 / 2048 : t == FA_BF16 ? 1.0 / 256 : 1e-5;
    double mult = is_grad ? 3.0 : 2.0;
    return mult * baseline_err + rel_floor * magnitude;
}

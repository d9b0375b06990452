/* Argument checks shared by every entry point. Each failure names the argument. */
#include <math.h>

#include "frontend.h"

int fa_is_float_storage(fa_dtype t) { return t == FA_F32 || t == FA_F16 || t == FA_BF16; }

static const char *device_name(fa_device_type d) { return d == FA_DEVICE_CPU ? "cpu" : "cuda"; }

fa_status fa_check_tensor(const fa_tensor *t, const char *name, int ndim) {
    if (!t) return fa_set_error(FA_ERR_NULL_POINTER, "%s: tensor pointer is NULL", name);
    if (t->ndim != ndim) return fa_set_error(FA_ERR_SHAPE, "%s: expected %d dimensions, got %d", name, ndim, t->ndim);
    if (fa_dtype_size(t->dtype) == 0) return fa_set_error(FA_ERR_DTYPE, "%s: unknown dtype %d", name, (int)t->dtype);
    if (t->device != FA_DEVICE_CPU && t->device != FA_DEVICE_CUDA)
        return fa_set_error(FA_ERR_DEVICE, "%s: unknown device type %d", name, (int)t->device);
    if (t->device == FA_DEVICE_CUDA && t->device_index < 0)
        return fa_set_error(FA_ERR_DEVICE, "%s: negative CUDA device index %d", name, t->device_index);
    int64_t numel = 1, extent = 0; /* extent: largest element offset + 1 */
    for (int d = 0; d < ndim; ++d) {
        if (t->shape[d] < 0)
            return fa_set_error(FA_ERR_SHAPE, "%s: dimension %d is negative (%lld)", name, d, (long long)t->shape[d]);
        if (t->stride[d] < 0)
            return fa_set_error(FA_ERR_STRIDE, "%s: stride %d is negative (%lld)", name, d, (long long)t->stride[d]);
        if (__builtin_mul_overflow(numel, t->shape[d], &numel))
            return fa_set_error(FA_ERR_OVERFLOW, "%s: element count overflows", name);
    }
    if (t->shape[ndim - 1] > 1 && t->stride[ndim - 1] != 1)
        return fa_set_error(FA_ERR_STRIDE, "%s: last dimension must be contiguous (stride 1), got stride %lld", name,
                            (long long)t->stride[ndim - 1]);
    if (numel > 0) {
        for (int d = 0; d < ndim; ++d) {
            int64_t span;
            if (__builtin_mul_overflow(t->shape[d] - 1, t->stride[d], &span) ||
                __builtin_add_overflow(extent, span, &extent))
                return fa_set_error(FA_ERR_OVERFLOW, "%s: address range overflows (shape x stride)", name);
        }
        int64_t bytes;
        if (__builtin_add_overflow(extent, (int64_t)1, &extent) ||
            __builtin_mul_overflow(extent, (int64_t)fa_dtype_size(t->dtype), &bytes))
            return fa_set_error(FA_ERR_OVERFLOW, "%s: byte size overflows", name);
        if (!t->data) return fa_set_error(FA_ERR_NULL_POINTER, "%s: data pointer is NULL", name);
    }
    return FA_OK;
}

fa_status fa_check_same_device(const fa_tensor *t, const char *name, const fa_tensor *ref, const char *ref_name) {
    if (t->device != ref->device || (t->device == FA_DEVICE_CUDA && t->device_index != ref->device_index))
        return fa_set_error(FA_ERR_DEVICE, "%s: on %s:%d but %s is on %s:%d", name, device_name(t->device),
                            t->device == FA_DEVICE_CUDA ? t->device_index : 0, ref_name, device_name(ref->device),
                            ref->device == FA_DEVICE_CUDA ? ref->device_index : 0);
    return FA_OK;
}

fa_status fa_check_dtype(const fa_tensor *t, const char *name, fa_dtype want) {
    if (t->dtype != want)
        return fa_set_error(FA_ERR_DTYPE, "%s: dtype must be %s, got %s", name, fa_dtype_name(want), fa_dtype_name(t->dtype));
    return FA_OK;
}

fa_status fa_check_dim(const fa_tensor *t, const char *name, int dim, int64_t want, const char *what) {
    if (t->shape[dim] != want)
        return fa_set_error(FA_ERR_SHAPE, "%s: dimension %d (%s) must be %lld, got %lld", name, dim, what, (long long)want,
                            (long long)t->shape[dim]);
    return FA_OK;
}

fa_status fa_check_head_dim(int64_t d, const char *name) {
    if (d < 1 || d > FA_MAX_HEAD_DIM)
        return fa_set_error(FA_ERR_HEAD_DIM, "%s: head dimension must be in 1..%d, got %lld", name, FA_MAX_HEAD_DIM,
                            (long long)d);
    return FA_OK;
}

fa_view fa_view_of4(const fa_tensor *t) {
    fa_view v = {t->data, t->stride[0], t->stride[1], t->stride[2]};
    return v;
}

fa_view fa_view_of3(const fa_tensor *t) {
    fa_view v = {t->data, 0, t->stride[0], t->stride[1]};
    return v;
}

/* An optional float32 side tensor of the options (alibi slopes, descale factors). */
static int present(const fa_tensor *t) { return t->data != NULL; }

static fa_status check_descale(const fa_tensor *t, const char *name, const fa_tensor *q, const fa_problem *p,
                               const float **out) {
    *out = NULL;
    if (!present(t)) return FA_OK;
    fa_status s;
    if ((s = fa_check_tensor(t, name, 2)) || (s = fa_check_dtype(t, name, FA_F32)) ||
        (s = fa_check_same_device(t, name, q, "q")) || (s = fa_check_dim(t, name, 0, p->B, "batch")) ||
        (s = fa_check_dim(t, name, 1, p->Hk, "kv heads")))
        return s;
    if (p->Hk > 1 && t->stride[0] != p->Hk)
        return fa_set_error(FA_ERR_STRIDE, "%s: must be contiguous (B, Hk)", name);
    if (p->dtype != FA_F8_E4M3)
        return fa_set_error(FA_ERR_OPTION, "%s: descale factors apply only to float8 inputs", name);
    *out = (const float *)t->data;
    return FA_OK;
}

fa_status fa_resolve_options(const fa_options *opts, const fa_tensor *q, fa_problem *p) {
    static const fa_options defaults; /* zero: plain attention */
    if (!opts) opts = &defaults;

    if (!(isfinite(opts->scale) && opts->scale >= 0.0f))
        return fa_set_error(FA_ERR_OPTION, "opts.scale: must be finite and >= 0 (0 means 1/sqrt(D)), got %g",
                            (double)opts->scale);
    p->scale = opts->scale > 0.0f ? opts->scale : (float)(1.0 / sqrt((double)p->D));

    if (!(isfinite(opts->softcap) && opts->softcap >= 0.0f))
        return fa_set_error(FA_ERR_OPTION, "opts.softcap: must be finite and >= 0 (0 is off), got %g", (double)opts->softcap);
    p->softcap = opts->softcap;

    if (opts->align != FA_ALIGN_BOTTOM_RIGHT && opts->align != FA_ALIGN_TOP_LEFT)
        return fa_set_error(FA_ERR_OPTION, "opts.align: unknown alignment %d", (int)opts->align);
    p->top_left = opts->align == FA_ALIGN_TOP_LEFT;

    p->window_left = FA_UNBOUNDED;
    p->window_right = FA_UNBOUNDED;
    if (opts->use_window) {
        if (opts->window_left < -1)
            return fa_set_error(FA_ERR_OPTION, "opts.window_left: must be >= -1 (-1 is unbounded), got %lld",
                                (long long)opts->window_left);
        if (opts->window_right < -1)
            return fa_set_error(FA_ERR_OPTION, "opts.window_right: must be >= -1 (-1 is unbounded), got %lld",
                                (long long)opts->window_right);
        if (opts->window_left >= 0 && opts->window_left < FA_UNBOUNDED) p->window_left = opts->window_left;
        if (opts->window_right >= 0 && opts->window_right < FA_UNBOUNDED) p->window_right = opts->window_right;
    }
    if (opts->causal && p->window_right > 0) p->window_right = 0; /* causal is the window (-1, 0) */
    p->has_mask = p->window_left < FA_UNBOUNDED || p->window_right < FA_UNBOUNDED;

    if (!(opts->dropout_p >= 0.0f && opts->dropout_p < 1.0f))
        return fa_set_error(FA_ERR_OPTION, "opts.dropout_p: must be in [0, 1), got %g", (double)opts->dropout_p);
    p->dropout_p = opts->dropout_p;
    p->dropout_seed = opts->dropout_seed;
    p->dropout_offset = opts->dropout_offset;
    if (p->dropout_p > 0.0f && (p->B > 65536 || p->Hq > 65536))
        return fa_set_error(FA_ERR_OPTION, "opts.dropout_p: dropout supports at most 65536 batches and 65536 heads");

    p->deterministic = opts->deterministic != 0;

    fa_status s;
    p->alibi = NULL;
    p->alibi_sb = 0;
    const fa_tensor *a = &opts->alibi_slopes;
    if (present(a)) {
        const char *name = "opts.alibi_slopes";
        if (a->ndim != 1 && a->ndim != 2)
            return fa_set_error(FA_ERR_SHAPE, "%s: expected (Hq) or (B, Hq), got %d dimensions", name, a->ndim);
        if ((s = fa_check_tensor(a, name, a->ndim)) || (s = fa_check_dtype(a, name, FA_F32)) ||
            (s = fa_check_same_device(a, name, q, "q")))
            return s;
        if (a->ndim == 1) {
            if ((s = fa_check_dim(a, name, 0, p->Hq, "query heads"))) return s;
        } else {
            if ((s = fa_check_dim(a, name, 0, p->B, "batch")) || (s = fa_check_dim(a, name, 1, p->Hq, "query heads")))
                return s;
            p->alibi_sb = a->stride[0];
        }
        p->alibi = (const float *)a->data;
    }

    if ((s = check_descale(&opts->q_descale, "opts.q_descale", q, p, &p->q_descale)) ||
        (s = check_descale(&opts->k_descale, "opts.k_descale", q, p, &p->k_descale)) ||
        (s = check_descale(&opts->v_descale, "opts.v_descale", q, p, &p->v_descale)))
        return s;
    return FA_OK;
}

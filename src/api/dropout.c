/* The public face of the dropout rule defined in flashattn.h (see philox.h). */
#include <math.h>

#include "frontend.h"
#include "philox.h"

void fa_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    fa_philox_block(counter[0], counter[1], counter[2], counter[3], key[0], key[1], out);
}

int fa_dropout_keep(uint64_t seed, uint64_t offset, float p, int64_t b, int64_t h, int64_t i, int64_t j) {
    uint32_t r[4];
    fa_dropout_words(seed, offset, b, h, i, j >> 2, r);
    return r[j & 3] >= fa_dropout_threshold(p);
}

fa_status fa_dropout_mask(uint64_t seed, uint64_t offset, float p, fa_tensor *mask) {
    fa_clear_error();
    if (!mask) return fa_set_error(FA_ERR_NULL_POINTER, "mask: tensor is NULL");
    if (!(p >= 0.0f && p < 1.0f))
        return fa_set_error(FA_ERR_OPTION, "p: dropout probability must be in [0, 1), got %g", (double)p);
    if (mask->ndim != 4) return fa_set_error(FA_ERR_SHAPE, "mask: expected 4 dims (B, Hq, Sq, Sk), got %d", mask->ndim);
    if (mask->dtype != FA_U8) return fa_set_error(FA_ERR_DTYPE, "mask: dtype must be uint8, got %s", fa_dtype_name(mask->dtype));
    if (mask->device != FA_DEVICE_CPU) return fa_set_error(FA_ERR_DEVICE, "mask: must be in CPU memory");
    for (int d = 0; d < 4; ++d) {
        if (mask->shape[d] < 0) return fa_set_error(FA_ERR_SHAPE, "mask: dimension %d is negative", d);
        if (mask->stride[d] < 0) return fa_set_error(FA_ERR_STRIDE, "mask: stride %d is negative", d);
    }
    if (mask->shape[0] > 65536 || mask->shape[1] > 65536)
        return fa_set_error(FA_ERR_SHAPE, "mask: dropout supports at most 65536 batches and heads");
    int64_t numel = mask->shape[0] * mask->shape[1] * mask->shape[2] * mask->shape[3];
    if (numel > 0 && !mask->data) return fa_set_error(FA_ERR_NULL_POINTER, "mask: data is NULL");
    uint8_t *m = (uint8_t *)mask->data;
    uint32_t thr = fa_dropout_threshold(p);
    for (int64_t b = 0; b < mask->shape[0]; ++b)
        for (int64_t h = 0; h < mask->shape[1]; ++h)
            for (int64_t i = 0; i < mask->shape[2]; ++i)
                for (int64_t j0 = 0; j0 < mask->shape[3]; j0 += 4) {
                    uint32_t r[4];
                    fa_dropout_words(seed, offset, b, h, i, j0 >> 2, r);
                    for (int64_t j = j0; j < j0 + 4 && j < mask->shape[3]; ++j)
                        m[b * mask->stride[0] + h * mask->stride[1] + i * mask->stride[2] + j * mask->stride[3]] =
                            r[j & 3] >= thr;
                }
    return FA_OK;
}

/*
 * The optional steps between Q.K^T and the softmax (softcap, ALiBi) and the
 * dropout applied to P. Plain attention never enters these loops.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "cpu_attn.h"
#include "philox.h"

#define LOG2E 1.4426950408889634f

void cpu_load_row_f32(const cpu_kernels *kr, fa_dtype t, const void *src, float *dst, int64_t n) {
    switch (t) {
    case FA_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case FA_F16: kr->widen_f16(src, dst, n); break;
    case FA_BF16: kr->widen_bf16(src, dst, n); break;
    case FA_F8_E4M3:
        for (int64_t i = 0; i < n; ++i) dst[i] = fa_e4m3_to_f32(((const uint8_t *)src)[i]);
        break;
    default: break;
    }
}

void cpu_store_row(const cpu_kernels *kr, fa_dtype t, void *dst, const float *src, int64_t n, float scale) {
    switch (t) {
    case FA_F32:
        for (int64_t i = 0; i < n; ++i) ((float *)dst)[i] = src[i] * scale;
        break;
    case FA_BF16: kr->narrow_bf16(src, scale, dst, n); break;
    default:
        for (int64_t i = 0; i < n; ++i) fa_store_f(dst, t, i, src[i] * scale);
        break;
    }
}

float cpu_score_options(const fa_problem *p, int64_t b, int64_t sq, int64_t sk, int64_t j0, int64_t nj,
                        int64_t ncols, int64_t nrows, const int32_t *head, const int32_t *row,
                        float *s, float *softcap_grad) {
    if (p->softcap <= 0.0f && !p->alibi) return p->scale * LOG2E;
    const float cap = p->softcap;
    const int64_t off = fa_diag_offset(p, sq, sk);
    for (int64_t c = 0; c < nrows; ++c) {
        float slope = fa_alibi_slope(p, b, head[c]);
        int64_t diag = row[c] + off;
        for (int64_t j = 0; j < nj; ++j) {
            float v = s[j * ncols + c] * p->scale;
            if (cap > 0.0f) {
                float t = tanhf(v / cap);
                v = cap * t;
                /* d(cap * tanh(x / cap)) / dx, for the backward */
                if (softcap_grad) softcap_grad[j * ncols + c] = 1.0f - t * t;
            }
            if (p->alibi) v -= slope * (float)llabs(diag - (j0 + j));
            s[j * ncols + c] = v;
        }
    }
    return LOG2E;
}

void cpu_apply_dropout(const fa_problem *p, int64_t b, int64_t j0, int64_t nj, int64_t ncols,
                       int64_t nrows, const int32_t *head, const int32_t *row, float *pt) {
    const uint32_t threshold = fa_dropout_threshold(p->dropout_p);
    const float keep_scale = 1.0f / (1.0f - p->dropout_p);
    for (int64_t c = 0; c < nrows; ++c) {
        uint32_t r[4];
        int64_t group = -1;
        for (int64_t j = 0; j < nj; ++j) {
            int64_t jj = j0 + j;
            if ((jj >> 2) != group) { /* one Philox block covers four keys */
                group = jj >> 2;
                fa_dropout_words(p->dropout_seed, p->dropout_offset, b, head[c], row[c], group, r);
            }
            float *v = &pt[j * ncols + c];
            *v = r[jj & 3] >= threshold ? *v * keep_scale : 0.0f;
        }
    }
}

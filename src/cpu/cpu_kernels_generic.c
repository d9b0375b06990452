/*
 * Portable C micro-kernels: the fallback on any machine (aarch64 included)
 * and the definition the SIMD kernels are tested against.
 */
#include <math.h>

#include "convert.h"
#include "cpu_kernels.h"

static void gemm_f32_generic(int rows, int nv, int64_t k,
                             const float *a, int64_t a_rs, int64_t a_ks,
                             const float *b, int64_t ldb,
                             float *c, int64_t ldc, int accumulate, const float *c_scale) {
    int ncols = nv * CPU_LANES;
    for (int r = 0; r < rows; ++r) {
        float acc[CPU_NV_MAX * CPU_LANES];
        for (int col = 0; col < ncols; ++col)
            acc[col] = accumulate ? c[r * ldc + col] * (c_scale ? c_scale[col] : 1.0f) : 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) {
            float av = a[r * a_rs + kk * a_ks];
            const float *brow = b + kk * ldb;
            for (int col = 0; col < ncols; ++col) acc[col] += av * brow[col];
        }
        for (int col = 0; col < ncols; ++col) c[r * ldc + col] = acc[col];
    }
}

/* exp2 of x <= 0 (or -inf); exp2f is exact enough and this path is not hot. */
static float exp2_generic(float x) {
    return x < -150.0f ? 0.0f : exp2f(x);
}

static int visible(const int32_t *lo, const int32_t *hi, int64_t i, int64_t j) {
    return !lo || (j >= lo[i] && j < hi[i]);
}

void cpu_softmax_tile_generic(int64_t nj, int64_t ncols, float *s, int64_t lds, float c,
                                 const int32_t *lo, const int32_t *hi,
                                 float *m, float *l, float *alpha) {
    for (int64_t i = 0; i < ncols; ++i) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < nj; ++j)
            if (visible(lo, hi, i, j) && s[j * lds + i] * c > mx) mx = s[j * lds + i] * c;
        float m_new = mx > m[i] ? mx : m[i];
        /* With no visible key yet, exponents are taken against 0 so that
         * exp2(-inf - m) never becomes NaN; P is 0 there anyway. */
        float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float a = exp2_generic(m[i] - m_use);
        float sum = 0.0f;
        for (int64_t j = 0; j < nj; ++j) {
            float pv = visible(lo, hi, i, j) ? exp2_generic(s[j * lds + i] * c - m_use) : 0.0f;
            s[j * lds + i] = pv;
            sum += pv;
        }
        alpha[i] = m_new == -INFINITY ? 1.0f : a;
        l[i] = l[i] * alpha[i] + sum;
        m[i] = m_new;
    }
}

void cpu_exp_tile_generic(int64_t nj, int64_t ncols, const float *s, int64_t lds, float c,
                             const int32_t *lo, const int32_t *hi, const float *lse2,
                             float *p, int64_t ldp) {
    for (int64_t j = 0; j < nj; ++j)
        for (int64_t i = 0; i < ncols; ++i)
            p[j * ldp + i] = visible(lo, hi, i, j) ? exp2_generic(s[j * lds + i] * c - lse2[i]) : 0.0f;
}

void cpu_rowdot_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const float *k, int64_t ldk,
                        float *s, int64_t lds) {
    for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < nj; ++j) {
            float acc = 0.0f;
            for (int64_t dd = 0; dd < d; ++dd) acc += q[r * ldq + dd] * k[j * ldk + dd];
            s[j * lds + r] = acc;
        }
}

static float bf16_value(uint16_t h) { return fa_bf16_to_f32(h); }
static float f16_value(uint16_t h) { return fa_f16_to_f32(h); }

static void rowdot_half(float (*value)(uint16_t), int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                        const uint16_t *k, int64_t ldk, float *s, int64_t lds) {
    for (int r = 0; r < rows; ++r)
        for (int64_t j = 0; j < nj; ++j) {
            float acc = 0.0f;
            for (int64_t dd = 0; dd < d; ++dd) acc += q[r * ldq + dd] * value(k[j * ldk + dd]);
            s[j * lds + r] = acc;
        }
}

void cpu_rowdot_bf16_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                             int64_t ldk, float *s, int64_t lds) {
    rowdot_half(bf16_value, rows, nj, d, q, ldq, k, ldk, s, lds);
}

void cpu_rowdot_f16_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                            int64_t ldk, float *s, int64_t lds) {
    rowdot_half(f16_value, rows, nj, d, q, ldq, k, ldk, s, lds);
}

static void gemm_f32_halfb(float (*value)(uint16_t), int rows, int nv, int64_t k, const float *a, int64_t a_rs,
                           int64_t a_ks, const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                           const float *c_scale) {
    int ncols = nv * CPU_LANES;
    for (int r = 0; r < rows; ++r) {
        float acc[CPU_NV_MAX * CPU_LANES];
        for (int col = 0; col < ncols; ++col)
            acc[col] = accumulate ? c[r * ldc + col] * (c_scale ? c_scale[col] : 1.0f) : 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) {
            float av = a[r * a_rs + kk * a_ks];
            for (int col = 0; col < ncols; ++col) acc[col] += av * value(b[kk * ldb + col]);
        }
        for (int col = 0; col < ncols; ++col) c[r * ldc + col] = acc[col];
    }
}

void cpu_gemm_f32_bf16b_generic(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                                const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                const float *c_scale) {
    gemm_f32_halfb(bf16_value, rows, nv, k, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, c_scale);
}

void cpu_gemm_f32_f16b_generic(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                               const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                               const float *c_scale) {
    gemm_f32_halfb(f16_value, rows, nv, k, a, a_rs, a_ks, b, ldb, c, ldc, accumulate, c_scale);
}

void cpu_widen_f16_generic(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fa_f16_to_f32(src[i]);
}

void cpu_widen_bf16_generic(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fa_bf16_to_f32(src[i]);
}

void cpu_pair_bf16_generic(const uint16_t *r0, const uint16_t *r1, uint32_t *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = (uint32_t)r0[i] | (r1 ? (uint32_t)r1[i] << 16 : 0u);
}

void cpu_pair_f32_generic(const float *p0, const float *p1, uint32_t *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        out[i] = (uint32_t)fa_f32_to_bf16(p0[i]) | (p1 ? (uint32_t)fa_f32_to_bf16(p1[i]) << 16 : 0u);
}

void cpu_narrow_bf16_generic(const float *src, float scale, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fa_f32_to_bf16(src[i] * scale);
}

const cpu_kernels cpu_kernels_generic = {
    .name = "generic",
    .gemm_f32 = gemm_f32_generic,
    .gemm_bf16 = NULL, /* bf16 storage is widened to f32 */
    .softmax_tile = cpu_softmax_tile_generic,
    .exp_tile = cpu_exp_tile_generic,
    .rowdot = cpu_rowdot_generic,
    .rowdot_bf16 = cpu_rowdot_bf16_generic,
    .gemm_f32_bf16b = cpu_gemm_f32_bf16b_generic,
    .rowdot_f16 = cpu_rowdot_f16_generic,
    .gemm_f32_f16b = cpu_gemm_f32_f16b_generic,
    .widen_f16 = cpu_widen_f16_generic,
    .widen_bf16 = cpu_widen_bf16_generic,
    .pair_bf16 = cpu_pair_bf16_generic,
    .pair_f32 = cpu_pair_f32_generic,
    .narrow_bf16 = cpu_narrow_bf16_generic,
};

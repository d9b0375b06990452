/*
 * Scalar conversions between the storage dtypes and float (host code).
 * Round-to-nearest-even, NaN preserved. Vectorised paths live in the
 * backends; these are the reference definitions.
 */
#ifndef FA_CONVERT_H
#define FA_CONVERT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashattn.h"

static inline float fa_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t fa_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float fa_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { ++e; man <<= 1; } while (!(man & 0x400u));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3FFu) << 13;
        }
    } else if (exp == 0x1F) {
        u = sign | 0x7F800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t fa_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7FFFFFFFu;
    if (abs >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0)); /* inf / NaN */
    if (abs >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);                                     /* overflow to inf */
    if (abs < 0x38800000u) { /* result is subnormal or zero */
        if (abs < 0x33000000u) return (uint16_t)sign;
        uint32_t e = abs >> 23;
        uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return (uint16_t)(sign | r);
    }
    uint32_t r = abs - 0x38000000u; /* rebias exponent 127 -> 15 */
    r += 0xFFFu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* float8 e4m3 ("fn": no infinities; S.1111.111 is NaN; largest finite 448).
 * Exact on the way in, as a table of constant expressions: a normal value
 * (exponent field e > 0) is (1 + m/8) 2^(e-7) = (8 + m) 2^(e-10), a
 * subnormal m 2^-9. */
#define FA_E4M3_MAG(v) (((v) & 0x78) ? (float)(8 + ((v) & 7)) * (float)(1 << (((v) >> 3) & 15)) * 0x1p-10f \
                                     : (float)((v) & 7) * 0x1p-9f)
#define FA_E4M3(v) (((v) & 0x7F) == 0x7F ? NAN : ((v) & 0x80) ? -FA_E4M3_MAG(v) : FA_E4M3_MAG(v))
#define FA_E4M3_8(v) FA_E4M3(v), FA_E4M3(v + 1), FA_E4M3(v + 2), FA_E4M3(v + 3), FA_E4M3(v + 4), FA_E4M3(v + 5), \
                     FA_E4M3(v + 6), FA_E4M3(v + 7)
#define FA_E4M3_64(v) FA_E4M3_8(v), FA_E4M3_8(v + 8), FA_E4M3_8(v + 16), FA_E4M3_8(v + 24), FA_E4M3_8(v + 32), \
                      FA_E4M3_8(v + 40), FA_E4M3_8(v + 48), FA_E4M3_8(v + 56)
static const float fa_e4m3_values[256] = {FA_E4M3_64(0), FA_E4M3_64(64), FA_E4M3_64(128), FA_E4M3_64(192)};

static inline float fa_e4m3_to_f32(uint8_t v) { return fa_e4m3_values[v]; }

/* float -> e4m3, round to nearest even, saturating to +-448 (as the CUDA
 * satfinite conversion does); NaN stays NaN. */
static inline uint8_t fa_f32_to_e4m3(float f) {
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (isnan(f)) return (uint8_t)(sign | 0x7F);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7E);
    if (a < ldexpf(1.0f, -6)) { /* subnormal range: steps of 2^-9 (8 steps reach the smallest normal) */
        int q = (int)rintf(ldexpf(a, 9)); /* rintf: ties to even in the default rounding mode */
        return (uint8_t)(sign | q);       /* q == 8 is exponent 1, mantissa 0: still right */
    }
    int e;
    float fr = frexpf(a, &e);                 /* a = fr * 2^e, fr in [0.5, 1) */
    int m = (int)rintf(fr * 16.0f) - 8;      /* 3 mantissa bits */
    int be = e - 1 + 7;                      /* biased exponent */
    if (m == 8) { m = 0; ++be; }             /* rounded up to the next binade */
    if (be > 15 || (be == 15 && m == 7)) return (uint8_t)(sign | 0x7E); /* saturate */
    return (uint8_t)(sign | be << 3 | m);
}

/* Load / store element idx of an array of the given float dtype. */
static inline float fa_load_f(const void *base, fa_dtype t, int64_t idx) {
    switch (t) {
    case FA_F32: return ((const float *)base)[idx];
    case FA_F16: return fa_f16_to_f32(((const uint16_t *)base)[idx]);
    case FA_BF16: return fa_bf16_to_f32(((const uint16_t *)base)[idx]);
    case FA_F8_E4M3: return fa_e4m3_to_f32(((const uint8_t *)base)[idx]);
    default: return 0.0f;
    }
}

static inline void fa_store_f(void *base, fa_dtype t, int64_t idx, float v) {
    switch (t) {
    case FA_F32: ((float *)base)[idx] = v; break;
    case FA_F16: ((uint16_t *)base)[idx] = fa_f32_to_f16(v); break;
    case FA_BF16: ((uint16_t *)base)[idx] = fa_f32_to_bf16(v); break;
    case FA_F8_E4M3: ((uint8_t *)base)[idx] = fa_f32_to_e4m3(v); break;
    default: break;
    }
}

#endif /* FA_CONVERT_H */

/*
 * Philox4x32-10 and the dropout keep rule, shared by every backend (host and
 * device) so that dropout masks are bit-identical everywhere. The normative
 * definition is the comment above fa_dropout_keep() in flashattn.h.
 */
#ifndef FA_PHILOX_H
#define FA_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FA_PHILOX_FN __host__ __device__ __forceinline__
#else
#define FA_PHILOX_FN static inline
#endif

#define FA_PHILOX_M0 0xD2511F53u
#define FA_PHILOX_M1 0xCD9E8D57u
#define FA_PHILOX_W0 0x9E3779B9u
#define FA_PHILOX_W1 0xBB67AE85u

FA_PHILOX_FN void fa_philox_block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                  uint32_t k0, uint32_t k1, uint32_t r[4]) {
    for (int round = 0; round < 10; ++round) {
        uint64_t p0 = (uint64_t)FA_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)FA_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += FA_PHILOX_W0;
        k1 += FA_PHILOX_W1;
    }
    r[0] = c0;
    r[1] = c1;
    r[2] = c2;
    r[3] = c3;
}

/* Counter word c3 for a 64-bit offset (see flashattn.h). */
FA_PHILOX_FN uint32_t fa_philox_offset_word(uint64_t offset) {
    return (uint32_t)offset + (uint32_t)(offset >> 32) * FA_PHILOX_W0;
}

/* Keep threshold: keep iff the random word >= threshold. p in [0, 1). */
FA_PHILOX_FN uint32_t fa_dropout_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* The four random words of the group of columns j = 4g .. 4g+3 of row i. */
FA_PHILOX_FN void fa_dropout_words(uint64_t seed, uint64_t offset, int64_t b, int64_t h,
                                   int64_t i, int64_t jgroup, uint32_t r[4]) {
    fa_philox_block((uint32_t)jgroup, (uint32_t)i, (uint32_t)h | ((uint32_t)b << 16),
                    fa_philox_offset_word(offset), (uint32_t)seed, (uint32_t)(seed >> 32), r);
}

#endif /* FA_PHILOX_H */

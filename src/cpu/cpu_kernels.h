/*
 * The CPU micro-kernels: the only per-instruction-set code of the backend.
 *
 * The tile loops (cpu_fwd.c, cpu_bwd.c) keep queries along the SIMD lanes:
 * a score tile is stored transposed, S^T[j][i] (key j, query i), so the
 * online softmax is a column-wise (vertical) reduction and every product of
 * the algorithm is one shape of small matrix multiply,
 *
 *     C[r][col] (+)= sum_k A(r, k) * B[k][col]
 *
 * where A is read by broadcasting single elements (any row and k stride, so
 * K, V, P^T and dS^T are all used in place) and B is a packed panel whose
 * columns are contiguous and padded to a multiple of 16.
 */
#ifndef FA_CPU_KERNELS_H
#define FA_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* A micro-tile is up to CPU_MR rows by CPU_NV_MAX * 16 columns. */
#define CPU_MR 6
#define CPU_NV_MAX 4
#define CPU_LANES 16

/*
 * f32: for r < rows, col < 16 * nv:
 *   c[r*ldc + col] = (accumulate ? c[r*ldc + col] * cs[col] : 0) + sum_{kk<k} a[r*a_rs + kk*a_ks] * b[kk*ldb + col]
 * where cs is c_scale, or all ones when c_scale is NULL (the online-softmax
 * rescale of the output accumulator rides along with its update).
 */
typedef void (*cpu_gemm_f32_fn)(int rows, int nv, int64_t k,
                                const float *a, int64_t a_rs, int64_t a_ks,
                                const float *b, int64_t ldb,
                                float *c, int64_t ldc, int accumulate, const float *c_scale);

/*
 * bf16 pairs: each uint32 holds two bf16 values (element 2kk in the low half,
 * 2kk + 1 in the high half); the product sums both halves:
 *   c[r][col] (+)= sum_{kk<kpairs} a(r, kk).lo * b(kk, col).lo + a(r, kk).hi * b(kk, col).hi
 * with a(r, kk) the word at a[r*a_rs + kk*a_ks] and b(kk, col) at b[kk*ldb + col];
 * accumulate and c_scale as for f32.
 */
typedef void (*cpu_gemm_bf16_fn)(int rows, int nv, int64_t kpairs,
                                  const uint32_t *a, int64_t a_rs, int64_t a_ks,
                                  const uint32_t *b, int64_t ldb,
                                  float *c, int64_t ldc, int accumulate, const float *c_scale);

/*
 * Online softmax over one transposed score tile s[j*lds + i], j < nj keys,
 * i < ncols queries (ncols a multiple of 16). In place s becomes
 * P = exp2(s * c - m_new) (0 where masked); m (log2 domain), l are updated
 * per query and alpha[i] = exp2(m_old - m_new) is the factor the output
 * accumulator must be rescaled by. Key j is visible to query i iff
 * lo[i] <= j < hi[i]; lo == NULL means every key is visible.
 * A query with no visible key so far keeps m = -inf, l = 0, alpha = 1.
 */
typedef void (*cpu_softmax_tile_fn)(int64_t nj, int64_t ncols, float *s, int64_t lds, float c,
                                    const int32_t *lo, const int32_t *hi,
                                    float *m, float *l, float *alpha);

/*
 * Backward: p[j*ldp + i] = exp2(s[j*lds + i] * c - lse2[i]) where visible, else 0.
 * lse2 is the log-sum-exp in the log2 domain (+inf for a row with no key).
 */
typedef void (*cpu_exp_tile_fn)(int64_t nj, int64_t ncols, const float *s, int64_t lds, float c,
                                const int32_t *lo, const int32_t *hi, const float *lse2,
                                float *p, int64_t ldp);

/*
 * Few-row scores (decode): s[j*lds + r] = sum_{dd<d} q[r*ldq + dd] * k[j*ldk + dd]
 * for r < rows (at most 8), j < nj; the head dimension is along the lanes, and
 * the scores land transposed (key j's row of the tile), as the softmax reads
 * them. Columns r >= rows are not written.
 */
typedef void (*cpu_rowdot_fn)(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                              const float *k, int64_t ldk, float *s, int64_t lds);

/* The same with bf16 or f16 K rows, widened in registers (decode reads the cache once, in place). */
typedef void (*cpu_rowdot_half_fn)(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq,
                                   const uint16_t *k, int64_t ldk, float *s, int64_t lds);
/* gemm_f32 with B stored as bf16 or f16 rows (ldb in elements), widened in registers. */
typedef void (*cpu_gemm_f32_halfb_fn)(int rows, int nv, int64_t k,
                                      const float *a, int64_t a_rs, int64_t a_ks,
                                      const uint16_t *b, int64_t ldb,
                                      float *c, int64_t ldc, int accumulate, const float *c_scale);

/* Row conversions used when packing tiles. */
typedef void (*cpu_widen_fn)(const uint16_t *src, float *dst, int64_t n);           /* f16 or bf16 -> f32 */
/* out[i] = r0[i] | r1[i] << 16: two bf16 rows interleaved into pairs; r1 NULL means zeros. */
typedef void (*cpu_pair_bf16_fn)(const uint16_t *r0, const uint16_t *r1, uint32_t *out, int64_t n);
/* out[i] = bf16(p0[i]) | bf16(p1[i]) << 16, rounded to nearest even; p1 NULL means zeros. */
typedef void (*cpu_pair_f32_fn)(const float *p0, const float *p1, uint32_t *out, int64_t n);
/* dst[i] = bf16(src[i] * scale), rounded to nearest even (NaN stays a quiet NaN): output rows. */
typedef void (*cpu_narrow_bf16_fn)(const float *src, float scale, uint16_t *dst, int64_t n);

typedef struct cpu_kernels {
    const char *name;               /* "avx512", "avx2", "generic" */
    cpu_gemm_f32_fn gemm_f32;
    cpu_gemm_bf16_fn gemm_bf16;     /* NULL without a native bf16 dot product */
    cpu_softmax_tile_fn softmax_tile;
    cpu_exp_tile_fn exp_tile;
    cpu_rowdot_fn rowdot;
    cpu_rowdot_half_fn rowdot_bf16, rowdot_f16;
    cpu_gemm_f32_halfb_fn gemm_f32_bf16b, gemm_f32_f16b;
    cpu_widen_fn widen_f16, widen_bf16;
    cpu_pair_bf16_fn pair_bf16;
    cpu_pair_f32_fn pair_f32;
    cpu_narrow_bf16_fn narrow_bf16;
} cpu_kernels;

extern const cpu_kernels cpu_kernels_generic;
#if defined(__x86_64__) || defined(_M_X64)
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_avx512;
#endif

/* Portable softmax steps, also used by kernel sets that have no faster one. */
void cpu_softmax_tile_generic(int64_t nj, int64_t ncols, float *s, int64_t lds, float c,
                              const int32_t *lo, const int32_t *hi, float *m, float *l, float *alpha);
void cpu_exp_tile_generic(int64_t nj, int64_t ncols, const float *s, int64_t lds, float c,
                          const int32_t *lo, const int32_t *hi, const float *lse2, float *p, int64_t ldp);

void cpu_rowdot_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const float *k, int64_t ldk,
                        float *s, int64_t lds);
void cpu_rowdot_bf16_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                             int64_t ldk, float *s, int64_t lds);
void cpu_gemm_f32_bf16b_generic(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                                const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                                const float *c_scale);
void cpu_rowdot_f16_generic(int rows, int64_t nj, int64_t d, const float *q, int64_t ldq, const uint16_t *k,
                            int64_t ldk, float *s, int64_t lds);
void cpu_gemm_f32_f16b_generic(int rows, int nv, int64_t k, const float *a, int64_t a_rs, int64_t a_ks,
                               const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate,
                               const float *c_scale);
void cpu_widen_f16_generic(const uint16_t *src, float *dst, int64_t n);
void cpu_widen_bf16_generic(const uint16_t *src, float *dst, int64_t n);
void cpu_pair_bf16_generic(const uint16_t *r0, const uint16_t *r1, uint32_t *out, int64_t n);
void cpu_pair_f32_generic(const float *p0, const float *p1, uint32_t *out, int64_t n);
void cpu_narrow_bf16_generic(const float *src, float scale, uint16_t *dst, int64_t n);

/* The best kernels for this machine, picked once from cpuid, or the set the
 * environment variable FA_CPU_KERNELS names (generic, avx2, avx512,
 * avx512bf16) when this CPU can run it. */
const cpu_kernels *cpu_kernels_select(void);
/* Whether FA_CPU_KERNELS=name would be honoured on this CPU. */
int cpu_kernels_runnable(const char *name);

/* Macro loops over micro-tiles: m rows (any), n columns (a multiple of 16). */
void cpu_gemm_f32(const cpu_kernels *kr, int64_t m, int64_t n, int64_t k,
                  const float *a, int64_t a_rs, int64_t a_ks,
                  const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale);
/* gemm_f32 over B stored as bf16 or f16 rows, by a kernel set's gemm_f32_bf16b or gemm_f32_f16b. */
void cpu_gemm_f32_halfb(cpu_gemm_f32_halfb_fn kernel, int64_t m, int64_t n, int64_t k,
                        const float *a, int64_t a_rs, int64_t a_ks,
                        const uint16_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale);
void cpu_gemm_bf16(const cpu_kernels *kr, int64_t m, int64_t n, int64_t kpairs,
                   const uint32_t *a, int64_t a_rs, int64_t a_ks,
                   const uint32_t *b, int64_t ldb, float *c, int64_t ldc, int accumulate, const float *c_scale);

#endif /* FA_CPU_KERNELS_H */

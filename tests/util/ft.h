/*
 * Shared test harness: backend selection, test tensors (host and device
 * copies, poisoning, padding checks), the naive same-precision baseline and
 * the tolerance rule. Every test executable includes this one header.
 *
 * Environment:
 *   FA_TEST_BACKEND  cpu (default) | cuda | cuda_sm80 | reference
 *   FA_TEST_QUICK    1: skip the largest shapes (sanitizer builds)
 *   FA_TEST_FILTER   run only cases whose name contains this text
 *   FA_TEST_SEED     base seed of the random inputs (default 20261130)
 *   FA_TEST_THREADS  CPU threads of the backend under test (default: all cores)
 */
#ifndef FA_TEST_FT_H
#define FA_TEST_FT_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

/* ------------------------------------------------------------------------- */
/* Harness: environment, contexts, pass/fail counting                        */
/* ------------------------------------------------------------------------- */

/* Reads the environment and creates the contexts. Returns 0 when the whole
 * executable should be skipped (a CUDA backend asked for on a machine without
 * a device); the caller then returns ft_finish(). */
int ft_init(const char *program);
/* Prints "N passed, M failed[, K skipped]" and returns the exit code. */
int ft_finish(void);

extern fa_backend ft_backend;      /* backend under test */
extern fa_context *ft_ctx;         /* context forcing ft_backend */
extern fa_context *ft_ref_ctx;     /* context forcing the float64 reference */
extern int ft_on_device;           /* 1: tensors under test live in CUDA memory */
extern int ft_quick;               /* FA_TEST_QUICK set */

/* Nonzero if the case with this name should run (FA_TEST_FILTER). */
int ft_selected(const char *name);
/* Record one case. fmt describes the measurement (errors, tolerances). */
void ft_pass(const char *name, const char *fmt, ...);
void ft_fail(const char *name, const char *fmt, ...);
void ft_skip(const char *name, const char *fmt, ...);
/* Record a pass or a failure depending on ok. */
void ft_check(int ok, const char *name, const char *fmt, ...);
/* Note a sub-check failure of the current case (printed indented); returns 0. */
int ft_note(const char *fmt, ...);

/* Deterministic random numbers (splitmix64) seeded per case. */
typedef struct ft_rng {
    uint64_t s;
} ft_rng;
ft_rng ft_rng_for(const char *case_name);
uint64_t ft_rng_u64(ft_rng *r);
double ft_rng_uniform(ft_rng *r); /* [0, 1) */
double ft_rng_normal(ft_rng *r);

/* The storage dtypes the backend under test is expected to handle. */
int ft_backend_dtypes(fa_dtype out[3]);

/* ------------------------------------------------------------------------- */
/* Test tensors                                                              */
/* ------------------------------------------------------------------------- */

/* How a (B, S, H, D) tensor is laid out in its buffer. Every layout but
 * FT_CONTIG has FT_GUARD poisoned elements before and after the tensor, so a
 * write past either end shows up as changed padding (not heap corruption). */
typedef enum ft_layout {
    FT_CONTIG = 0,     /* dense row-major, no guards (host-side helpers, the reference) */
    FT_PADDED = 1,     /* every stride padded by 16 bytes: rows, heads, batches have gaps */
    FT_QKV0 = 2,       /* slot 0/1/2 of a packed (B, S, 3, H, D) buffer (flash-attn qkvpacked) */
    FT_QKV1 = 3,
    FT_QKV2 = 4,
    FT_GUARDED = 5,    /* dense row-major between guards */
    FT_PADDED_ODD = 6  /* strides padded by 3 and 5 elements, first element misaligned */
} ft_layout;

#define FT_GUARD 16

/* A tensor owned by the tests: the whole buffer (padding included) lives on
 * the host in `host`; when the backend under test runs on a GPU, `dev` is a
 * device copy of the same buffer. */
typedef struct ft_tensor {
    fa_dtype dtype;
    int ndim;
    int64_t shape[4];
    int64_t stride[4];
    int64_t offset;   /* element offset of the first logical element */
    size_t nbuf;      /* elements in the buffer */
    unsigned char *host;
    void *dev;        /* device buffer or NULL */
} ft_tensor;

/* Allocate with a layout; ndim 1..4 (padding applies to every dim but the last). */
ft_tensor ft_alloc(fa_dtype t, int ndim, const int64_t *shape, ft_layout layout);
ft_tensor ft_alloc4(fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3, ft_layout layout);
void ft_free(ft_tensor *x);
int64_t ft_numel(const ft_tensor *x);
/* Buffer index of logical element number e (row-major over shape). */
int64_t ft_index(const ft_tensor *x, int64_t e);

/* The fa_tensor for the library: device memory when on_device and dev exist. */
fa_tensor ft_view(const ft_tensor *x, int on_device);
/* Copies between host and device buffers (no-ops without a device copy). */
int ft_upload(ft_tensor *x);   /* allocates dev on first use */
int ft_download(ft_tensor *x);
/* The fa_tensor for the backend under test (uploads first if on the device). */
fa_tensor ft_arg(ft_tensor *x);

/* Raw scratch memory where the backend under test works (device memory on
 * CUDA, host memory otherwise), e.g. a caller-provided workspace. */
void *ft_buffer_alloc(size_t bytes);
void ft_buffer_free(void *ptr);

/* Fill the whole buffer with NaN bytes (0xFF), host and device. */
void ft_poison(ft_tensor *x);
/* After a download: 1 if every byte outside the logical elements is still 0xFF. */
int ft_padding_intact(const ft_tensor *x);
/* Logical elements as a dense float / double array (malloc'd). */
float *ft_to_f32(const ft_tensor *x);
/* Element at buffer index idx (not a logical index) as a float. */
float ft_get(const ft_tensor *x, int64_t idx);
/* Store dense floats into the logical elements, rounding to the dtype. */
void ft_from_f32(ft_tensor *x, const float *v);
/* Fill the logical elements with scale * N(0, 1) rounded to the dtype; padding
 * gets random junk (it must never be read). */
void ft_fill_normal(ft_tensor *x, ft_rng *r, double scale);
/* A dense float32 CPU copy holding the exact stored values (for the reference). */
ft_tensor ft_f32_copy(const ft_tensor *x);
/* Round a float to what the dtype can store. */
float ft_round(fa_dtype t, float v);

/* ------------------------------------------------------------------------- */
/* Error measurement and the tolerance rule                                  */
/* ------------------------------------------------------------------------- */

typedef struct ft_err {
    double max_err;   /* max |x - ref|, +inf if a NaN or an inf mismatch appears */
    double max_ref;   /* max |ref| over finite entries */
    int64_t nan;      /* NaNs in x */
    int64_t worst;    /* index of the worst element */
} ft_err;

/* Compare n dense values; -inf == -inf counts as exact. */
ft_err ft_compare(const float *x, const float *ref, int64_t n);
/* Number of elements flagged in must_be_zero (fully masked rows, keys no query
 * sees) that are not exactly 0 in x. */
int64_t ft_exact_zero_violations(const float *x, const uint8_t *must_be_zero, int64_t n);

/*
 * Tolerance of a backend result given the error of the naive same-precision
 * baseline (flash-attn's rule):
 *     tol = mult * baseline_err + floor,
 *     mult = 2 for outputs and lse, 3 for gradients,
 *     floor = rel_floor(dtype) * magnitude, rel_floor = 1e-5 (f32),
 *             2^-11 (f16: half an ulp at 1), 2^-8 (bf16: half an ulp at 1),
 *     magnitude = max|ref| of the tensor (outputs, lse), or of all three
 *             gradients together (a gradient can be exactly 0, e.g. dq with
 *             one key, while rounding noise scales with dout).
 * The floor covers cases where the baseline happens to be exact (Sk = 1).
 */
double ft_tolerance(fa_dtype t, double baseline_err, double magnitude, int is_grad);

/* Check one result of the backend under test: every element written (no NaN),
 * padding untouched, exact zeros where must_be_zero (may be NULL) says so, and
 * max error within ft_tolerance() of the naive baseline's error (magnitude:
 * see ft_tolerance; the tensor's own max|ref| is always included). Prints a
 * note per problem, appends "what err/tol" to summary; returns 1 if it passes. */
int ft_check_result(const char *what, const ft_tensor *got, const float *ref, const float *naive,
                    const uint8_t *must_be_zero, fa_dtype dt, int is_grad, double magnitude,
                    char *summary, size_t summary_len);

/* ------------------------------------------------------------------------- */
/* Naive attention in storage precision (the baseline) and in float64        */
/* ------------------------------------------------------------------------- */

/* One batched problem on dense float arrays (B, S, H, D); the options follow
 * fa_options (causal, window, align, softcap, alibi slopes as dense floats
 * with alibi_per_batch, dropout). */
typedef struct ft_problem {
    int64_t B, Sq, Sk, Hq, Hk, D, Dv;
    fa_options opts;          /* alibi_slopes inside is ignored; use alibi */
    const float *alibi;       /* NULL, (Hq) or (B, Hq) */
    int alibi_per_batch;
    const uint8_t *keep;      /* optional explicit dropout mask (B, Hq, Sq, Sk) */
    int64_t batch0;           /* batch index of batch 0, for dropout counters and per-batch
                                 ALiBi when one sequence of a larger call is checked alone */
} ft_problem;

/* Whether key j is visible to query i (mask only). */
int ft_visible(const ft_problem *p, int64_t i, int64_t j);

/* Elements that must be exactly 0, as dense uint8 flags (malloc'd):
 * query side (B, Sq, Hq, width): rows whose reference lse is -inf (lse dense
 * (B, Hq, Sq)); key side (B, Sk, Hk, width): keys no query row can see. */
uint8_t *ft_masked_rows(const ft_problem *p, const float *lse, int64_t width);
uint8_t *ft_unseen_keys(const ft_problem *p, int64_t width);

/* Forward in storage precision t: S in float32 from the stored inputs,
 * P rounded to t before P.V (after dropout scaling), out rounded to t.
 * lse (B, Hq, Sq) float32; fully masked rows give out 0, lse -inf. */
void ft_naive_fwd(const ft_problem *p, fa_dtype t, const float *q, const float *k, const float *v,
                  float *out, float *lse);
/* Backward in storage precision t: dP = dO V^T and dS rounded to t, the
 * products accumulated in float32 and rounded to t. */
void ft_naive_bwd(const ft_problem *p, fa_dtype t, const float *q, const float *k, const float *v,
                  const float *dout, float *dq, float *dk, float *dv);
/* Forward in float64 (used where the library's reference cannot express the
 * case, e.g. an explicit dropout mask); out and lse as doubles. */
void ft_exact_fwd(const ft_problem *p, const float *q, const float *k, const float *v,
                  double *out, double *lse);

#endif /* FA_TEST_FT_H */

/*
 * Checks poly_exp2 (src/cuda/sm90/sm90_ptx.cuh), the exponential on the FMA
 * pipe, on the host: the same source, compiled for the CPU, against exp2 in
 * double precision over every float in [-126, 0] (STEP=1, ~1.1e9 values,
 * under a minute) or every STEP-th one, and at the values the kernels rely
 * on: 2^0 = 1 exactly, -inf and anything below -127 give +0, NaN stays NaN.
 *
 *   nvcc -std=c++17 -O2 -Iinclude -Isrc/api scripts/poly_exp2_check.cu -o poly_exp2_check
 *   ./poly_exp2_check [STEP]          # no GPU needed
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/cuda/sm90/sm90_ptx.cuh"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Largest relative error over the floats in [-126, 0], every step-th. */
template <int DEGREE>
static double worst_error(uint32_t step, float *at) {
    double worst = 0;
    for (uint32_t u = 0x80000000u;; u += step) { /* -0, then down the negative floats */
        const float x = from_bits(u);
        if (!(x >= -126.f)) break;
        const double ref = exp2((double)x), err = fabs((double)poly_exp2<DEGREE>(x) - ref) / ref;
        if (err > worst) worst = err, *at = x;
    }
    return worst;
}

/* The values the kernels rely on. */
template <int DEGREE>
static int special_values_fail() {
    int fail = 0;
    fail += poly_exp2<DEGREE>(0.f) != 1.f || poly_exp2<DEGREE>(-0.f) != 1.f; /* a row's max: P = 1 */
    const float zero_at[] = {-INFINITY, -1e30f, -200.f, -127.f, -126.75f};
    for (float x : zero_at) {
        const float y = poly_exp2<DEGREE>(x);
        fail += y != 0.f || signbit(y); /* hidden keys: +0 */
    }
    fail += !isnan(poly_exp2<DEGREE>(NAN));
    return fail;
}

int main(int argc, char **argv) {
    const uint32_t step = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 1;
    if (step == 0) {
        fprintf(stderr, "STEP must be >= 1\n");
        return 2;
    }
    /* bounds: the minimax errors of the two polynomials, plus float rounding */
    const double bound2 = 2.0e-3, bound3 = 1.1e-4;
    float at2 = 0, at3 = 0;
    const double e2 = worst_error<2>(step, &at2), e3 = worst_error<3>(step, &at3);
    const int s2 = special_values_fail<2>(), s3 = special_values_fail<3>();
    printf("quadratic: max relative error %.3e at x = %g (bound %.1e), special values %s\n", e2, at2, bound2,
           s2 ? "FAIL" : "ok");
    printf("cubic:     max relative error %.3e at x = %g (bound %.1e), special values %s\n", e3, at3, bound3,
           s3 ? "FAIL" : "ok");
    const bool ok = e2 <= bound2 && e3 <= bound3 && s2 == 0 && s3 == 0;
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

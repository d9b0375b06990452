#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "timer.h"

#include <stdlib.h>
#include <time.h>

double cli_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof v[0], compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

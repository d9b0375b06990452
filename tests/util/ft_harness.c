/* Test harness: environment, contexts, counting, random numbers. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"
#include "../../src/cpu/cpu_kernels.h"

fa_backend ft_backend = FA_BACKEND_CPU;
fa_context *ft_ctx = NULL;
fa_context *ft_ref_ctx = NULL;
int ft_on_device = 0;
int ft_quick = 0;

static const char *g_program = "test";
static const char *g_filter = NULL;
static uint64_t g_seed = 20261130u;
static int g_passed, g_failed, g_skipped;

static int env_flag(const char *name) {
    const char *s = getenv(name);
    return s && *s && strcmp(s, "0") != 0;
}

static int make_context(fa_context **ctx, fa_backend b) {
    if (fa_context_create(ctx) != FA_OK) return 0;
    return fa_context_set_backend(*ctx, b) == FA_OK;
}

int ft_init(const char *program) {
    g_program = program;
    setvbuf(stdout, NULL, _IOLBF, 0); /* one line per case, even when piped */
    const char *b = getenv("FA_TEST_BACKEND");
    if (!b || !*b || strcmp(b, "cpu") == 0) ft_backend = FA_BACKEND_CPU;
    else if (strcmp(b, "cuda") == 0) ft_backend = FA_BACKEND_CUDA;
    else if (strcmp(b, "cuda_sm80") == 0) ft_backend = FA_BACKEND_CUDA_SM80;
    else if (strcmp(b, "reference") == 0) ft_backend = FA_BACKEND_REFERENCE;
    else {
        fprintf(stderr, "%s: FA_TEST_BACKEND=%s is not one of cpu, cuda, cuda_sm80, reference\n", program, b);
        exit(2);
    }
    ft_quick = env_flag("FA_TEST_QUICK");
    g_filter = getenv("FA_TEST_FILTER");
    if (g_filter && !*g_filter) g_filter = NULL;
    const char *seed = getenv("FA_TEST_SEED");
    if (seed && *seed) g_seed = strtoull(seed, NULL, 0);
    ft_on_device = ft_backend == FA_BACKEND_CUDA || ft_backend == FA_BACKEND_CUDA_SM80;

    printf("%s: backend %s, seed %llu%s%s%s\n", program, fa_backend_name(ft_backend),
           (unsigned long long)g_seed, ft_quick ? ", quick" : "", g_filter ? ", filter " : "",
           g_filter ? g_filter : "");
    if (ft_on_device) {
#ifndef FA_HAVE_CUDA
        printf("%s: skipped: this build has no CUDA backend\n", program);
        ++g_skipped;
        return 0;
#else
        if (fa_cuda_device_count() < 1 || !fa_backend_available(ft_backend)) {
            printf("%s: skipped: backend %s has no usable CUDA device here\n", program,
                   fa_backend_name(ft_backend));
            ++g_skipped;
            return 0;
        }
#endif
    }
    /* FA_CPU_KERNELS forces a CPU micro-kernel set; one this CPU cannot run
     * would silently fall back to the default: that is a skip. */
    const char *kernels = getenv("FA_CPU_KERNELS");
    if (ft_backend == FA_BACKEND_CPU && kernels && *kernels) {
        printf("%s: CPU kernels %s (FA_CPU_KERNELS)\n", program, kernels);
        if (!cpu_kernels_runnable(kernels)) {
            printf("%s: skipped: this CPU cannot run the %s kernels\n", program, kernels);
            ++g_skipped;
            return 0;
        }
    }
    if (!make_context(&ft_ctx, ft_backend) || !make_context(&ft_ref_ctx, FA_BACKEND_REFERENCE)) {
        printf("%s: cannot create contexts: %s\n", program, fa_last_error());
        ++g_failed;
        return 0;
    }
    const char *threads = getenv("FA_TEST_THREADS"); /* CPU worker threads of the backend under test */
    if (threads && *threads) fa_context_set_num_threads(ft_ctx, atoi(threads));
    return 1;
}

int ft_finish(void) {
    fa_context_destroy(ft_ctx);
    fa_context_destroy(ft_ref_ctx);
    ft_ctx = ft_ref_ctx = NULL;
    if (g_skipped) printf("%d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
    else printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}

int ft_selected(const char *name) { return !g_filter || strstr(name, g_filter) != NULL; }

static void report(const char *tag, const char *name, const char *fmt, va_list ap) {
    printf("%-4s %s", tag, name);
    if (fmt && *fmt) {
        printf("  ");
        vprintf(fmt, ap);
    }
    printf("\n");
}

void ft_pass(const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("ok", name, fmt, ap);
    va_end(ap);
    ++g_passed;
}

void ft_fail(const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("FAIL", name, fmt, ap);
    va_end(ap);
    ++g_failed;
}

void ft_skip(const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("skip", name, fmt, ap);
    va_end(ap);
    ++g_skipped;
}

void ft_check(int ok, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(ok ? "ok" : "FAIL", name, fmt, ap);
    va_end(ap);
    if (ok) ++g_passed;
    else ++g_failed;
}

int ft_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("      ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return 0;
}

/* --- random numbers --------------------------------------------------------- */

ft_rng ft_rng_for(const char *case_name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the name, so each case draws its own inputs */
    for (const char *c = case_name; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    ft_rng r = {h ^ g_seed};
    return r;
}

uint64_t ft_rng_u64(ft_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ft_rng_uniform(ft_rng *r) { return (double)(ft_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double ft_rng_normal(ft_rng *r) {
    double u1 = ft_rng_uniform(r), u2 = ft_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* Box-Muller */
}

int ft_backend_dtypes(fa_dtype out[3]) {
    if (ft_on_device) {
        out[0] = FA_F16;
        out[1] = FA_BF16;
        return 2;
    }
    out[0] = FA_F32;
    out[1] = FA_F16;
    out[2] = FA_BF16;
    return 3;
}

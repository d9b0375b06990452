/*
 * Run-time CPU feature detection and short ceiling measurements.
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu_probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_pool.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define CPU_X86 1
#endif

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef CPU_X86
/* Register state the OS saves on context switch (XCR0). */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif

static cpu_features detect(void) {
    cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef CPU_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return f;
    uint64_t xcr0 = read_xcr0();
    int ymm_ok = (xcr0 & 0x6) == 0x6;     /* SSE and AVX state */
    int zmm_ok = (xcr0 & 0xE6) == 0xE6;   /* plus opmask and both zmm halves */
    if (!ymm_ok) return f;
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f.avx2 = (b >> 5) & 1;
        if (zmm_ok) {
            f.avx512f = (b >> 16) & 1;
            f.avx512dq = (b >> 17) & 1;
            f.avx512bw = (b >> 30) & 1;
            f.avx512vl = (b >> 31) & 1;
            unsigned a1, b1, c1, d1;
            if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = (a1 >> 5) & 1;
        }
    }
#endif
    return f;
}

static cpu_features features;
static char feature_string[128];
static int detected; /* benign race: every thread computes the same values */

const cpu_features *cpu_detect_features(void) {
    if (!detected) {
        features = detect();
        char *s = feature_string;
        size_t left = sizeof feature_string;
        const struct { int on; const char *name; } list[] = {
            {features.avx2, "avx2"},         {features.fma, "fma"},
            {features.f16c, "f16c"},         {features.avx512f, "avx512f"},
            {features.avx512bw, "avx512bw"}, {features.avx512dq, "avx512dq"},
            {features.avx512vl, "avx512vl"}, {features.avx512bf16, "avx512bf16"},
        };
        for (size_t i = 0; i < sizeof list / sizeof list[0]; ++i) {
            if (!list[i].on) continue;
            size_t n = strlen(list[i].name) + (s != feature_string);
            if (n + 1 > left) break;
            if (s != feature_string) *s++ = ' ';
            memcpy(s, list[i].name, strlen(list[i].name) + 1);
            s += strlen(list[i].name);
            left -= n;
        }
        detected = 1;
    }
    return &features;
}

const char *fa_cpu_feature_string(void) {
    cpu_detect_features();
    return feature_string;
}

/* ---- peak FLOP rate ------------------------------------------------------ */

#ifdef CPU_X86 /* the rate loops are x86 SIMD; elsewhere the peak reads 0 */

typedef struct peak_job {
    double (*loop)(long iters);
    long iters;
    double flops[512];
} peak_job;

static void peak_task(void *arg, int64_t t, int worker) {
    peak_job *job = arg;
    job->flops[t] = job->loop(job->iters);
}

/* Runs `loop` on `threads` threads for about `seconds`; returns GFLOP/s. */
static double measure_rate(double (*loop)(long), int threads, double seconds) {
    if (threads < 1) threads = 1;
    if (threads > 512) threads = 512;
    peak_job job = {.loop = loop, .iters = 1000};
    /* Calibrate on one thread, growing the count until a run takes ~10 ms. */
    double t0, dt;
    for (;;) {
        t0 = now_seconds();
        loop(job.iters);
        dt = now_seconds() - t0;
        if (dt > 0.01 || job.iters > (1L << 40)) break;
        job.iters *= 4;
    }
    job.iters = (long)((double)job.iters * (seconds / 2) / (dt > 1e-6 ? dt : 1e-6)) + 1;
    double best = 0.0;
    for (int rep = 0; rep < 2; ++rep) { /* best of two, each ~seconds / 2 */
        t0 = now_seconds();
        cpu_parallel_for(threads, threads, peak_task, &job);
        dt = now_seconds() - t0;
        double total = 0.0;
        for (int t = 0; t < threads; ++t) total += job.flops[t];
        double rate = total / dt * 1e-9;
        if (rate > best) best = rate;
    }
    return best;
}

#endif

double fa_cpu_peak_gflops(int threads, int bf16) {
    const cpu_features *f = cpu_detect_features();
#ifdef CPU_X86
    if (bf16) return f->avx512bf16 ? measure_rate(cpu_probe_dpbf16_avx512, threads, 0.2) : 0.0;
    if (f->avx512f) return measure_rate(cpu_probe_fma_avx512, threads, 0.2);
    if (f->avx2 && f->fma) return measure_rate(cpu_probe_fma_avx2, threads, 0.2);
#else
    (void)f;
#endif
    return 0.0;
}

/* ---- memory read bandwidth ----------------------------------------------- */

typedef struct bw_job {
    const uint64_t *buf;
    size_t words_per_task;
    int passes;
    uint64_t sums[512];
} bw_job;

static void bw_task(void *arg, int64_t t, int worker) {
    bw_job *job = arg;
    const uint64_t *p = job->buf + (size_t)t * job->words_per_task;
    uint64_t s[8] = {0};
    for (int pass = 0; pass < job->passes; ++pass)
        for (size_t i = 0; i < job->words_per_task; i += 8)
            for (int u = 0; u < 8; ++u) s[u] += p[i + u]; /* 8 chains, vectorised by the compiler */
    job->sums[t] = s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7];
}

double fa_cpu_read_bandwidth_gbs(int threads) {
    if (threads < 1) threads = 1;
    if (threads > 512) threads = 512;
    size_t per_task = (size_t)32 << 20; /* 32 MiB a thread: far beyond the caches */
    size_t bytes = per_task * (size_t)threads;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0.0;
    memset(buf, 1, bytes); /* touch every page before timing */
    bw_job *job = calloc(1, sizeof *job);
    if (!job) {
        free(buf);
        return 0.0;
    }
    job->buf = buf;
    job->words_per_task = per_task / 8;
    job->passes = 1;
    cpu_parallel_for(threads, threads, bw_task, job); /* warm-up */
    double best = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
        double t0 = now_seconds();
        cpu_parallel_for(threads, threads, bw_task, job);
        double dt = now_seconds() - t0;
        double gbs = (double)bytes / dt * 1e-9;
        if (gbs > best) best = gbs;
    }
    free(job);
    free(buf);
    return best;
}

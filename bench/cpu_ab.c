/*
 * Best-of-N timing of the CPU backend on the performance notes' shapes, for
 * comparing two builds of the library on a machine whose medians are noisy.
 *
 *   cc -O2 -o cpu_ab bench/cpu_ab.c -Iinclude -Lbuild -lflashattn
 *   LD_LIBRARY_PATH=old/ ./cpu_ab full 5;  LD_LIBRARY_PATH=new/ ./cpu_ab full 5
 *
 * where old/ and new/ each hold a libflashattn.so.0; alternate the two a few
 * times. Modes: full, causal (forward, batch B, H heads, seqlen S, head
 * dim D, f32 or DT=bf16), bwd, bwdc (the backward, full or causal) and dec (decode: 1 query, 4096 cached keys, 32 query heads over 8
 * kv heads, bf16, batch B). Environment: T threads (2), H (8), S (4096), B (1),
 * D (128), DT (f32). The project's default bench shape: B=2 H=16 S=1024 D=64 DT=bf16 causal.
 * Prints the best and the median time and the rate of the best run.
 */
#include <flashattn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RUNS 5000

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int64_t env_int(const char *name, int64_t fallback) {
    const char *e = getenv(name);
    return e ? atoll(e) : fallback;
}

static float uniform(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

static uint16_t bf16_of(float x) { /* truncation is fine for test data */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static double times[MAX_RUNS];

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: cpu_ab full|causal|bwd|bwdc|dec RUNS\n");
        return 2;
    }
    const char *mode = argv[1];
    int runs = atoi(argv[2]);
    if (runs < 1 || runs > MAX_RUNS) runs = 5;
    fa_context *ctx;
    if (fa_context_create(&ctx) != FA_OK) return 1;
    fa_context_set_backend(ctx, FA_BACKEND_CPU);
    fa_context_set_num_threads(ctx, (int)env_int("T", 2));
    fa_options o;
    memset(&o, 0, sizeof o);
    double work; /* FLOPs, or bytes of cache read for decode */
    const char *unit;
    if (!strcmp(mode, "dec")) {
        int64_t B = env_int("B", 1), H = 32, Hk = 8, D = 128, S = 4096;
        uint16_t *q = malloc((size_t)(B * H * D) * 2), *out = malloc((size_t)(B * H * D) * 2);
        uint16_t *k = malloc((size_t)(B * S * Hk * D) * 2), *v = malloc((size_t)(B * S * Hk * D) * 2);
        int32_t *lens = malloc((size_t)B * 4);
        for (int64_t i = 0; i < B * S * Hk * D; ++i) {
            k[i] = bf16_of(uniform());
            v[i] = bf16_of(uniform());
        }
        for (int64_t i = 0; i < B * H * D; ++i) q[i] = bf16_of(uniform());
        for (int64_t b = 0; b < B; ++b) lens[b] = (int32_t)S;
        fa_tensor tq = fa_tensor_4d(q, FA_BF16, B, 1, H, D), to = fa_tensor_4d(out, FA_BF16, B, 1, H, D);
        fa_tensor tk = fa_tensor_4d(k, FA_BF16, B, S, Hk, D), tv = fa_tensor_4d(v, FA_BF16, B, S, Hk, D);
        fa_tensor tl = fa_tensor_1d(lens, FA_I32, B);
        o.causal = 1;
        work = 2.0 * (double)(B * S * Hk * D) * 2.0;
        unit = "GB/s";
        for (int r = -3; r < runs; ++r) { /* three untimed runs first */
            double t0 = now_seconds();
            if (fa_fwd_kvcache(ctx, &tq, &tk, &tv, &tl, NULL, NULL, NULL, 0, &o, &to, NULL) != FA_OK) {
                fprintf(stderr, "%s\n", fa_last_error());
                return 1;
            }
            if (r >= 0) times[r] = now_seconds() - t0;
        }
    } else {
        /* Forward (full, causal) or backward (bwd, bwdc: causal) of one shape:
         * B (1), H (8), S (4096), D (128), DT=bf16 for bf16 storage (f32). */
        int64_t B = env_int("B", 1), H = env_int("H", 8), D = env_int("D", 128), S = env_int("S", 4096);
        const char *dt = getenv("DT");
        int bf16 = dt && !strcmp(dt, "bf16");
        fa_dtype t = bf16 ? FA_BF16 : FA_F32;
        size_t es = bf16 ? 2 : 4, n = (size_t)(B * S * H * D);
        int bwd = !strncmp(mode, "bwd", 3);
        char *q = malloc(n * es), *k = malloc(n * es), *v = malloc(n * es), *out = malloc(n * es);
        char *dout = malloc(n * es), *dq = malloc(n * es), *dk = malloc(n * es), *dv = malloc(n * es);
        float *lse = malloc((size_t)(B * H * S) * 4);
        char *fill[4] = {q, k, v, dout};
        for (int a = 0; a < 4; ++a)
            for (size_t i = 0; i < n; ++i) {
                float x = uniform();
                if (bf16) ((uint16_t *)fill[a])[i] = bf16_of(x);
                else ((float *)fill[a])[i] = x;
            }
        fa_tensor tq = fa_tensor_4d(q, t, B, S, H, D), tk = fa_tensor_4d(k, t, B, S, H, D);
        fa_tensor tv = fa_tensor_4d(v, t, B, S, H, D), to = fa_tensor_4d(out, t, B, S, H, D);
        fa_tensor tdo = fa_tensor_4d(dout, t, B, S, H, D), tdq = fa_tensor_4d(dq, t, B, S, H, D);
        fa_tensor tdk = fa_tensor_4d(dk, t, B, S, H, D), tdv = fa_tensor_4d(dv, t, B, S, H, D);
        fa_tensor tl = fa_tensor_3d(lse, FA_F32, B, H, S);
        o.causal = !strcmp(mode, "causal") || !strcmp(mode, "bwdc");
        work = 4.0 * (double)(B * H * S * S * D) / (o.causal ? 2.0 : 1.0) * (bwd ? 2.5 : 1.0);
        unit = "GFLOP/s";
        if (bwd && fa_fwd(ctx, &tq, &tk, &tv, &o, &to, &tl) != FA_OK) {
            fprintf(stderr, "%s\n", fa_last_error());
            return 1;
        }
        for (int r = -1; r < runs; ++r) { /* one untimed run first */
            double t0 = now_seconds();
            fa_status st = bwd ? fa_bwd(ctx, &tdo, &tq, &tk, &tv, &to, &tl, &o, &tdq, &tdk, &tdv)
                               : fa_fwd(ctx, &tq, &tk, &tv, &o, &to, &tl);
            if (st != FA_OK) {
                fprintf(stderr, "%s\n", fa_last_error());
                return 1;
            }
            if (r >= 0) times[r] = now_seconds() - t0;
        }
    }
    qsort(times, (size_t)runs, sizeof times[0], by_value);
    printf("%s best %.3f ms median %.3f ms  %.2f %s (best)\n", mode, times[0] * 1e3, times[runs / 2] * 1e3,
           work / times[0] * 1e-9, unit);
    fa_context_destroy(ctx);
    return 0;
}

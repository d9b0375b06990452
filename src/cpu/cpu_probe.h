/*
 * What the CPU offers: instruction-set features detected at run time, and
 * short measurements of the machine's ceilings that benchmarks report
 * fractions of.
 */
#ifndef FA_CPU_PROBE_H
#define FA_CPU_PROBE_H

typedef struct cpu_features {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512dq, avx512vl, avx512bf16;
} cpu_features;

/* Detected once (cpuid and the OS's saved register state on x86-64; all zero elsewhere). */
const cpu_features *cpu_detect_features(void);

/* Space-separated features, e.g. "avx2 fma f16c avx512f avx512bf16"; "" when none. */
const char *fa_cpu_feature_string(void);

/* Peak f32 FMA rate (bf16 = 0) or vdpbf16ps rate (bf16 = 1; 0 without AVX512_BF16)
 * in GFLOP/s, measured for about 0.2 s on `threads` threads. */
double fa_cpu_peak_gflops(int threads, int bf16);

/* Memory read bandwidth in GB/s over a buffer much larger than the caches. */
double fa_cpu_read_bandwidth_gbs(int threads);

/* Per-ISA inner loops of the peak probe: FLOPs done by `iters` iterations. */
double cpu_probe_fma_avx512(long iters);
double cpu_probe_dpbf16_avx512(long iters);
double cpu_probe_fma_avx2(long iters);

#endif /* FA_CPU_PROBE_H */

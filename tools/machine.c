#include "machine.h"

#include <string.h>

#include "flashattn.h"

#if defined(__has_include)
#if __has_include("../src/cpu/cpu_probe.h")
#include "../src/cpu/cpu_probe.h"
#define CLI_HAVE_CPU_PROBE 1
#endif
#endif

void cli_machine_probe(cli_machine *m, int threads, int bf16, int bandwidth) {
    memset(m, 0, sizeof *m);
    m->threads = threads;
#ifdef CLI_HAVE_CPU_PROBE
    m->peak_f32 = fa_cpu_peak_gflops(threads, 0);
    if (bf16) m->peak_bf16 = fa_cpu_peak_gflops(threads, 1);
    if (bandwidth) m->read_gbs = fa_cpu_read_bandwidth_gbs(threads);
#else
    (void)bf16;
    (void)bandwidth;
#endif
}

static double max2(double a, double b) { return a > b ? a : b; }

void cli_machine_keep_max(cli_machine *m, const cli_machine *other) {
    m->peak_f32 = max2(m->peak_f32, other->peak_f32);
    m->peak_bf16 = max2(m->peak_bf16, other->peak_bf16);
    m->read_gbs = max2(m->read_gbs, other->read_gbs);
}

const char *cli_machine_features(void) { return fa_cpu_features(); }

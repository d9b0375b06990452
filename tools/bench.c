/*
 * flashattn bench and flashattn check: run one case on a backend, time it,
 * compare it with the float64 reference, report.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "convert.h"
#include "check.h"
#include "commands.h"
#include "device.h"
#include "machine.h"
#include "parallel.h"
#include "report.h"
#include "timer.h"
#include "workload.h"

/* Where a case runs. */
typedef struct target {
    fa_backend backend;
    int on_gpu;
} target;

static int is_cuda(fa_backend b) { return b == FA_BACKEND_CUDA || b == FA_BACKEND_CUDA_SM80; }

/* AUTO becomes CUDA when a device is there (and this build can reach it), else CPU. */
static int pick_target(fa_backend requested, target *t) {
    if (requested == FA_BACKEND_AUTO) {
        requested = FA_BACKEND_CPU;
        if (fa_backend_available(FA_BACKEND_CUDA) && fa_cuda_device_count() > 0) {
            if (cli_device_support()) requested = FA_BACKEND_CUDA;
            else fprintf(stderr, "flashattn: a GPU is present but this build of the command cannot allocate "
                                 "GPU memory; running on the CPU\n");
        }
    }
    if (!fa_backend_available(requested)) {
        fprintf(stderr, "flashattn: backend %s is not available here (see flashattn info)\n",
                fa_backend_name(requested));
        return 0;
    }
    if (is_cuda(requested) && !cli_device_support()) {
        fprintf(stderr, "flashattn: this build of the command cannot allocate GPU memory for backend %s\n",
                fa_backend_name(requested));
        return 0;
    }
    t->backend = requested;
    t->on_gpu = is_cuda(requested);
    return 1;
}

/* One call of the case in direction `backward`. */
static fa_status call_once(fa_context *ctx, cli_workload *w, int backward) {
    if (backward)
        return fa_bwd(ctx, &w->tdout, &w->tq, &w->tk, &w->tv, &w->tout, &w->tlse, &w->opts, &w->tdq, &w->tdk,
                      &w->tdv);
    if (w->cfg.kvcache)
        return fa_fwd_kvcache(ctx, &w->tq, &w->tk, &w->tv, &w->tcache_seqlens,
                              w->cfg.block_size > 0 ? &w->tblock_table : NULL,
                              w->cfg.new_keys > 0 ? &w->tk_new : NULL, w->cfg.new_keys > 0 ? &w->tv_new : NULL,
                              w->cfg.splits, &w->opts, &w->tout, &w->tlse);
    return fa_fwd(ctx, &w->tq, &w->tk, &w->tv, &w->opts, &w->tout, &w->tlse);
}

/* warmup untimed calls, then `repeat` timed ones; r->ms is their median. On a
 * GPU the timed calls are queued back to back between CUDA events, so the
 * host's launch overhead overlaps the previous call as it does in real use.
 * Returns 0 with r->error set if a call fails. */
static int time_calls(fa_context *ctx, cli_workload *w, int backward, int warmup, int repeat, cli_result *r) {
    double samples[1024];
    if (repeat > (int)(sizeof samples / sizeof samples[0])) repeat = (int)(sizeof samples / sizeof samples[0]);
    for (int i = 0; i < warmup + repeat; ++i) {
        int timed = i >= warmup, n = i - warmup; /* n: index among the timed calls */
        if (timed && n == 0 && w->on_device && !cli_device_marks_begin(repeat)) {
            snprintf(r->error, sizeof r->error, "%s", cli_device_error());
            return 0;
        }
        double t0 = cli_now();
        fa_status s = call_once(ctx, w, backward);
        if (s) {
            snprintf(r->error, sizeof r->error, "%s: %s", fa_status_name(s), fa_last_error());
            return 0;
        }
        if (!timed) continue;
        if (!w->on_device) samples[n] = (cli_now() - t0) * 1e3;
        else if (!cli_device_mark(n + 1)) {
            snprintf(r->error, sizeof r->error, "%s", cli_device_error());
            return 0;
        }
    }
    if (w->on_device && !cli_device_marks_end(samples, repeat)) {
        snprintf(r->error, sizeof r->error, "%s", cli_device_error());
        return 0;
    }
    r->runs = repeat;
    r->timed = repeat > 0;
    r->ms = cli_median(samples, repeat);
    return 1;
}

/* Fill the rate fractions of a timed result from the machine's ceilings. */
static void fill_fractions(cli_result *r, const cli_config *c, const cli_machine *m) {
    r->frac_peak = r->frac_peak_bf16 = r->frac_bandwidth = -1;
    if (!r->timed || r->ms <= 0) return;
    double s = r->ms * 1e-3;
    if (r->on_gpu) { /* the GPU's ceiling here is its copy bandwidth, for decoding */
        if (r->bytes > 0 && m->copy_gbs > 0) r->frac_bandwidth = r->bytes / s * 1e-9 / m->copy_gbs;
        return;
    }
    if (m->peak_f32 > 0) r->frac_peak = r->flops / s * 1e-9 / m->peak_f32;
    if (c->dtype == FA_BF16 && m->peak_bf16 > 0) r->frac_peak_bf16 = r->flops / s * 1e-9 / m->peak_bf16;
    if (r->bytes > 0 && m->read_gbs > 0) r->frac_bandwidth = r->bytes / s * 1e-9 / m->read_gbs;
}

/* A case run on one target: its workload (kept for comparisons) and results. */
typedef struct case_run {
    cli_workload w;
    int have_workload;
    cli_result fwd, bwd;
    int have_bwd;
} case_run;

static void init_result(cli_result *r, const char *dir, const target *t) {
    memset(r, 0, sizeof *r);
    r->direction = dir;
    r->backend = fa_backend_name(t->backend);
    r->on_gpu = t->on_gpu;
    r->frac_peak = r->frac_peak_bf16 = r->frac_bandwidth = -1;
}

/* Run, time and check the case; results in cr (errors are reported there). */
static void run_case(const cli_config *c, const target *t, case_run *cr) {
    memset(cr, 0, sizeof *cr);
    init_result(&cr->fwd, c->kvcache ? "decode" : "fwd", t);
    cr->have_bwd = !c->fwd_only;
    if (cr->have_bwd) init_result(&cr->bwd, "bwd", t);

    char err[320];
    if (!cli_workload_create(&cr->w, c, t->on_gpu, err, sizeof err)) {
        snprintf(cr->fwd.error, sizeof cr->fwd.error, "%s", err);
        if (cr->have_bwd) snprintf(cr->bwd.error, sizeof cr->bwd.error, "not run");
        return;
    }
    cr->have_workload = 1;
    cli_workload *w = &cr->w;
    int64_t Sk = w->Sk;
    double fwd_flops = fa_fwd_flops(c->batch, c->heads, c->seqlen_q, Sk, c->head_dim, cli_config_is_causal(c));
    fwd_flops *= (double)(c->head_dim + c->head_dim_v) / (double)(2 * c->head_dim); /* D != Dv: mean of the two */
    cr->fwd.flops = fwd_flops;
    if (c->kvcache) cr->fwd.bytes = cli_workload_cache_bytes(w);
    cr->bwd.flops = 2.5 * fwd_flops;

    fa_context *ctx = NULL;
    fa_status s = fa_context_create(&ctx);
    if (!s) s = fa_context_set_backend(ctx, t->backend);
    if (!s && !t->on_gpu) s = fa_context_set_num_threads(ctx, c->threads);
    if (s) {
        snprintf(cr->fwd.error, sizeof cr->fwd.error, "%s: %s", fa_status_name(s), fa_last_error());
        fa_context_destroy(ctx);
        return;
    }
    int check = c->check;
    cli_reference *ref = check ? cli_reference_create(w, cr->have_bwd) : NULL;
    if (check && !ref) snprintf(cr->fwd.error, sizeof cr->fwd.error, "out of memory for the reference check");

    int warmup = c->warmup, repeat = c->repeat > 0 ? c->repeat : 1;
    int ok = !cr->fwd.error[0] && time_calls(ctx, w, 0, warmup, repeat, &cr->fwd);
    if (ok && !(ok = cli_workload_download(w, 0)))
        snprintf(cr->fwd.error, sizeof cr->fwd.error, "%s", cli_device_error());
    if (ok && check && !(ok = cli_check_fwd(ref, w, &cr->fwd.check, err, sizeof err)))
        snprintf(cr->fwd.error, sizeof cr->fwd.error, "%s", err);

    if (cr->have_bwd) {
        if (!ok) {
            snprintf(cr->bwd.error, sizeof cr->bwd.error, "not run: the forward failed");
        } else {
            ok = time_calls(ctx, w, 1, warmup, repeat, &cr->bwd);
            if (ok && !(ok = cli_workload_download(w, 1)))
                snprintf(cr->bwd.error, sizeof cr->bwd.error, "%s", cli_device_error());
            if (ok && check && !cli_check_bwd(ref, w, &cr->bwd.check, err, sizeof err))
                snprintf(cr->bwd.error, sizeof cr->bwd.error, "%s", err);
        }
    }
    cli_reference_destroy(ref);
    fa_context_destroy(ctx);
}

static void free_case(case_run *cr) {
    if (cr->have_workload) cli_workload_destroy(&cr->w);
}

static void print_machine(FILE *f, const target *t, const cli_machine *m) {
    fprintf(f, "flashattn %s, backend %s", fa_version(), fa_backend_name(t->backend));
    if (t->on_gpu) {
        char name[256] = "?";
        int major = 0, minor = 0;
        fa_cuda_device_info(0, name, sizeof name, &major, &minor);
        fprintf(f, " on %s (sm_%d%d)\n", name, major, minor);
        if (m->copy_gbs > 0) fprintf(f, "measured in this run: device copy %.0f GB/s (read + write)\n", m->copy_gbs);
        return;
    }
    fprintf(f, ", %d thread%s, CPU features: %s\n", m->threads, m->threads == 1 ? "" : "s", cli_machine_features());
    if (m->peak_f32 > 0) {
        fprintf(f, "measured in this run: f32 FMA peak %.0f GFLOP/s", m->peak_f32);
        if (m->peak_bf16 > 0) fprintf(f, ", bf16 dot-product peak %.0f GFLOP/s", m->peak_bf16);
        if (m->read_gbs > 0) fprintf(f, ", memory read %.1f GB/s", m->read_gbs);
        fprintf(f, " (best of a probe before and after)\n");
    } else {
        fprintf(f, "(the CPU's peak was not measured: fractions of peak are not shown)\n");
    }
}

/* Parse, pick the target, probe the machine. Returns -1 to go on, else an exit status. */
static int prepare(cli_command cmd, int argc, char **argv, cli_config *c, target *t, cli_machine *m) {
    cli_parse_result p = cli_parse_args(cmd, argc, argv, c);
    if (p == CLI_HELP_SHOWN) return 0;
    if (p == CLI_BAD_FLAG) return CLI_EXIT_USAGE;
    if (!pick_target(c->backend, t)) return 1;
    memset(m, 0, sizeof *m);
    m->threads = c->threads > 0 ? c->threads : cli_cpu_count();
    if (cmd == CLI_BENCH && !t->on_gpu) cli_machine_probe(m, m->threads, c->dtype == FA_BF16, c->kvcache);
    if (cmd == CLI_BENCH && t->on_gpu && c->kvcache) m->copy_gbs = cli_device_copy_gbs();
    return -1;
}

/* The standard GPU grid (DESIGN.md §4): hidden 2048, head dim 64/128/256,
 * (batch, seqlen) from (32, 512) to (1, 16k), causal and not. Other flags
 * (dtype, --fwd-only, --no-check, --repeat, ...) apply to every case. */
static int grid_cases(const cli_config *base, cli_config *out, int max) {
    static const int64_t dims[] = {64, 128, 256};
    static const int64_t batch_seqlen[][2] = {{32, 512}, {16, 1024}, {8, 2048}, {4, 4096}, {2, 8192}, {1, 16384}};
    int n = 0;
    for (size_t d = 0; d < 3; ++d)
        for (size_t p = 0; p < 6; ++p)
            for (int causal = 0; causal <= 1 && n < max; ++causal) {
                cli_config c = *base;
                c.head_dim = c.head_dim_v = dims[d];
                c.heads = c.kv_heads = 2048 / dims[d];
                c.batch = batch_seqlen[p][0];
                c.seqlen_q = c.seqlen_k = batch_seqlen[p][1];
                c.causal = causal;
                c.use_window = 0;
                out[n++] = c;
            }
    return n;
}

#define MAX_CASES 64

int cli_bench_main(int argc, char **argv) {
    cli_config c;
    target t;
    cli_machine m;
    int rc = prepare(CLI_BENCH, argc, argv, &c, &t, &m);
    if (rc >= 0) return rc;

    static cli_config cases[MAX_CASES];
    static cli_result results[MAX_CASES][2];
    int n = c.grid ? grid_cases(&c, cases, MAX_CASES) : 1;
    if (!c.grid) cases[0] = c;
    int have_bwd = !c.fwd_only;
    for (int i = 0; i < n; ++i) {
        if (n > 1) {
            char desc[256];
            cli_describe_case(&cases[i], desc, sizeof desc);
            fprintf(stderr, "[%d/%d] %s\n", i + 1, n, desc);
        }
        case_run cr;
        run_case(&cases[i], &t, &cr);
        results[i][0] = cr.fwd;
        results[i][1] = cr.bwd;
        free_case(&cr);
    }
    if (!t.on_gpu) {
        /* Probe again after the run and keep the higher figures: the peak is a
         * ceiling, and other work on a shared machine only ever lowers a probe. */
        cli_machine again;
        cli_machine_probe(&again, m.threads, c.dtype == FA_BF16, c.kvcache);
        cli_machine_keep_max(&m, &again);
    }
    if (!c.json) print_machine(stdout, &t, &m);
    int failed = 0;
    for (int i = 0; i < n; ++i) {
        if (!c.json) cli_print_case_header(stdout, &cases[i]);
        for (int dir = 0; dir < 1 + have_bwd; ++dir) {
            cli_result *r = &results[i][dir];
            fill_fractions(r, &cases[i], &m);
            if (c.json) cli_print_result_json(stdout, &cases[i], r, &m);
            else cli_print_result_row(stdout, r);
            failed |= cli_result_failed(r);
        }
    }
    return failed ? 1 : 0;
}

/* Max |a - b| over two backends' copies of one output (whole tensors). */
static double max_difference(const cli_buffer *a, const cli_buffer *b, fa_dtype t) {
    double e = 0;
    int64_t n = (int64_t)(a->bytes / fa_dtype_size(t));
    for (int64_t i = 0; i < n; ++i) {
        double x = fa_load_f(a->host, t, i), y = fa_load_f(b->host, t, i);
        if (isinf(x) && x == y) continue; /* both -inf: an empty row in both */
        double d = fabs(x - y);
        if (!(d <= e)) e = d; /* NaN propagates */
    }
    return e;
}

/* check runs each direction once, cold: its times mean nothing, so they are not shown. */
static void print_check(const cli_config *c, case_run *cr, const cli_machine *m) {
    cr->fwd.timed = cr->bwd.timed = 0;
    const cli_result *rows[2] = {&cr->fwd, cr->have_bwd ? &cr->bwd : NULL};
    for (int i = 0; i < 2; ++i) {
        if (!rows[i]) continue;
        if (c->json) {
            cli_print_result_json(stdout, c, rows[i], m);
            continue;
        }
        cli_print_result_row(stdout, rows[i]);
        cli_print_check_detail(stdout, rows[i]);
    }
}

int cli_check_main(int argc, char **argv) {
    cli_config c;
    target t, other;
    cli_machine m;
    int rc = prepare(CLI_CHECK, argc, argv, &c, &t, &m);
    if (rc >= 0) return rc;
    if (c.has_against && !pick_target(c.against, &other)) return 1;
    if (!c.json) {
        printf("flashattn %s check\n", fa_version());
        cli_print_case_header(stdout, &c);
    }
    c.repeat = 1;
    c.warmup = 0;
    case_run a, b;
    run_case(&c, &t, &a);
    print_check(&c, &a, &m);
    int failed = cli_result_failed(&a.fwd) || (a.have_bwd && cli_result_failed(&a.bwd));
    if (c.has_against) {
        run_case(&c, &other, &b);
        print_check(&c, &b, &m);
        failed |= cli_result_failed(&b.fwd) || (b.have_bwd && cli_result_failed(&b.bwd));
        if (a.have_workload && b.have_workload && !a.fwd.error[0] && !b.fwd.error[0] && !c.json) {
            printf("%s vs %s, max |difference| over all outputs: out %.3e  lse %.3e", fa_backend_name(t.backend),
                   fa_backend_name(other.backend), max_difference(&a.w.out, &b.w.out, c.dtype),
                   max_difference(&a.w.lse, &b.w.lse, FA_F32));
            if (a.have_bwd && !a.bwd.error[0] && !b.bwd.error[0])
                printf("  dq %.3e  dk %.3e  dv %.3e", max_difference(&a.w.dq, &b.w.dq, c.dtype),
                       max_difference(&a.w.dk, &b.w.dk, c.dtype), max_difference(&a.w.dv, &b.w.dv, c.dtype));
            printf("\n");
        }
        free_case(&b);
    }
    free_case(&a);
    if (!c.json) printf("%s\n", failed ? "FAILED" : "passed");
    return failed ? 1 : 0;
}

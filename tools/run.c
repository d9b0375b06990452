#include "run.h"

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "parallel.h"
#include "timer.h"

static int is_cuda(fa_backend b) { return b == FA_BACKEND_CUDA || b == FA_BACKEND_CUDA_SM80; }

int cli_pick_target(fa_backend requested, cli_target *t) {
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
    const cli_config *c = &w->cfg;
    if (c->varlen && backward)
        return fa_varlen_bwd(ctx, &w->tdout, &w->tq, &w->tk, &w->tv, &w->tout, &w->tlse, &w->tcu_q, &w->tcu_k,
                             (int)c->seqlen_q, (int)w->Sk, &w->opts, &w->tdq, &w->tdk, &w->tdv);
    if (c->varlen)
        return fa_varlen_fwd(ctx, &w->tq, &w->tk, &w->tv, &w->tcu_q, &w->tcu_k, (int)c->seqlen_q, (int)w->Sk,
                             &w->opts, &w->tout, &w->tlse);
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

void cli_fill_fractions(cli_result *r, const cli_config *c, const cli_machine *m) {
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

static void init_result(cli_result *r, const char *dir, const cli_target *t) {
    memset(r, 0, sizeof *r);
    r->direction = dir;
    r->backend = fa_backend_name(t->backend);
    r->on_gpu = t->on_gpu;
    r->frac_peak = r->frac_peak_bf16 = r->frac_bandwidth = -1;
}

void cli_run_case(const cli_config *c, const cli_target *t, cli_case_run *cr) {
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

void cli_case_free(cli_case_run *cr) {
    if (cr->have_workload) cli_workload_destroy(&cr->w);
}

void cli_print_machine(FILE *f, const cli_target *t, const cli_machine *m) {
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

int cli_run_prepare(cli_command cmd, int argc, char **argv, cli_config *c, cli_target *t, cli_machine *m) {
    cli_parse_result p = cli_parse_args(cmd, argc, argv, c);
    if (p == CLI_HELP_SHOWN) return 0;
    if (p == CLI_BAD_FLAG) return CLI_EXIT_USAGE;
    if (!cli_pick_target(c->backend, t)) return 1;
    memset(m, 0, sizeof *m);
    m->threads = c->threads > 0 ? c->threads : cli_cpu_count();
    if (cmd == CLI_BENCH && !t->on_gpu) cli_machine_probe(m, m->threads, c->dtype == FA_BF16, c->kvcache);
    if (cmd == CLI_BENCH && t->on_gpu && c->kvcache) m->copy_gbs = cli_device_copy_gbs();
    return -1;
}


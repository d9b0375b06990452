#include "report.h"

#include <math.h>
#include <string.h>

static const char *dtype_short(fa_dtype t) {
    return t == FA_F32 ? "f32" : t == FA_F16 ? "f16" : t == FA_F8_E4M3 ? "e4m3" : "bf16";
}

void cli_describe_case(const cli_config *c, char *buf, size_t len) {
    int n = snprintf(buf, len, "B=%lld Hq=%lld Hk=%lld Sq=%lld Sk=%lld D=%lld", (long long)c->batch,
                     (long long)c->heads, (long long)c->kv_heads, (long long)c->seqlen_q,
                     (long long)cli_config_keys(c), (long long)c->head_dim);
#define ADD(...)                                                                \
    do {                                                                        \
        if (n >= 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, __VA_ARGS__); \
    } while (0)
    if (c->head_dim_v != c->head_dim) ADD(" Dv=%lld", (long long)c->head_dim_v);
    ADD(" %s", dtype_short(c->dtype));
    if (c->causal == 1) ADD(" causal");
    if (c->use_window) ADD(" window=%lld,%lld", (long long)c->window_left, (long long)c->window_right);
    if (c->top_left && (c->causal == 1 || c->use_window || c->alibi)) ADD(" top-left");
    if (c->softcap > 0) ADD(" softcap=%g", c->softcap);
    if (c->alibi) ADD(" alibi");
    if (c->dropout_p > 0) ADD(" dropout=%g", c->dropout_p);
    if (c->scale > 0) ADD(" scale=%g", c->scale);
    if (c->deterministic) ADD(" deterministic");
    if (c->descale) ADD(" descale");
    if (c->varlen) ADD(" varlen");
    if (c->kvcache) {
        ADD(" kvcache=%lld", (long long)c->cache_len);
        if (c->new_keys) ADD("+%lld", (long long)c->new_keys);
        if (c->block_size) ADD(" paged/%lld", (long long)c->block_size);
        if (c->splits) ADD(" splits=%d", c->splits);
    }
#undef ADD
}

void cli_print_case_header(FILE *f, const cli_config *c) {
    char desc[256];
    cli_describe_case(c, desc, sizeof desc);
    fprintf(f, "\ncase: %s\n", desc);
    if (c->dtype == FA_F8_E4M3) fprintf(f, "forward only: float8 e4m3 inputs have no backward (out is bf16)\n");
    fprintf(f, "%-6s %-10s %10s %14s %9s %12s %9s %-5s %s\n", "dir", "backend", "time", "rate", "of peak",
            "max err", "bound", "check", "checked");
}

static const char *check_word(const cli_check *c) {
    switch (c->status) {
    case CLI_CHECK_PASS: return "pass";
    case CLI_CHECK_FAIL: return "FAIL";
    case CLI_CHECK_SKIPPED: return "skip";
    default: return "-";
    }
}

/* "12.3 ms", "845 us" */
static void format_time(char *buf, size_t len, double ms) {
    if (ms >= 1) snprintf(buf, len, "%.3f ms", ms);
    else snprintf(buf, len, "%.1f us", ms * 1e3);
}

static void format_rate(char *buf, size_t len, const cli_result *r) {
    double s = r->ms * 1e-3;
    if (r->bytes > 0) snprintf(buf, len, "%.3g GB/s", r->bytes / s * 1e-9);
    else if (r->on_gpu) snprintf(buf, len, "%.3g TFLOP/s", r->flops / s * 1e-12);
    else snprintf(buf, len, "%.4g GFLOP/s", r->flops / s * 1e-9);
}

/* "41% f32": the fraction of the ceiling that bounds this row: read bandwidth
 * for decoding; for bf16 the higher of the bf16 dot-product and f32 FMA peaks
 * (the CPU backend widens bf16 to f32 where the dot product is the slower);
 * else the f32 FMA peak. */
static void format_fraction(char *buf, size_t len, const cli_result *r) {
    if (r->bytes > 0 && r->frac_bandwidth >= 0) snprintf(buf, len, "%.0f%% bw", 100 * r->frac_bandwidth);
    else if (r->bytes > 0) snprintf(buf, len, "-");
    else if (r->frac_peak_bf16 >= 0 && (r->frac_peak < 0 || r->frac_peak_bf16 <= r->frac_peak))
        snprintf(buf, len, "%.0f%% bf16", 100 * r->frac_peak_bf16);
    else if (r->frac_peak >= 0) snprintf(buf, len, "%.0f%% f32", 100 * r->frac_peak);
    else snprintf(buf, len, "-");
}

void cli_print_result_row(FILE *f, const cli_result *r) {
    if (r->error[0]) {
        fprintf(f, "%-6s %-10s error: %s\n", r->direction, r->backend, r->error);
        return;
    }
    char t[32] = "-", rate[32] = "-", frac[16] = "-", err[24] = "-", bound[16] = "-";
    if (r->timed) {
        format_time(t, sizeof t, r->ms);
        format_rate(rate, sizeof rate, r);
        format_fraction(frac, sizeof frac, r);
    }
    const cli_quantity *w = cli_check_worst(&r->check);
    if (w && (r->check.status == CLI_CHECK_PASS || r->check.status == CLI_CHECK_FAIL)) {
        snprintf(err, sizeof err, "%.2e %s", w->err, w->name);
        snprintf(bound, sizeof bound, "%.2e", w->bound);
        if (w->nan_count) snprintf(err, sizeof err, "%lld NaN %s", w->nan_count, w->name);
    }
    fprintf(f, "%-6s %-10s %10s %14s %9s %12s %9s %-5s %s\n", r->direction, r->backend, t, rate, frac, err, bound,
            check_word(&r->check), r->check.status ? r->check.scope : "");
}

void cli_print_check_detail(FILE *f, const cli_result *r) {
    for (int i = 0; i < r->check.n; ++i) {
        const cli_quantity *q = &r->check.q[i];
        /* A per-row bound: the error and bound shown are those of the row nearest its bound. */
        fprintf(f, "    %-4s %s %.3e  max |ref| %.3e", q->name, q->per_row ? "row err" : "max err", q->err, q->ref_max);
        if (q->naive_err >= 0) fprintf(f, "  naive same-precision err %.3e", q->naive_err);
        fprintf(f, "  bound %.3e%s  NaN %lld  %s\n", q->bound, q->per_row ? " (per row; the row nearest it)" : "",
                q->nan_count, q->pass ? "pass" : "FAIL");
    }
}

/* A JSON string literal. */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; ++s) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* A JSON number; non-finite values (an error of inf) become null. */
static void json_number(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.6g", x);
    else fprintf(f, "null");
}

void cli_print_result_json(FILE *f, const cli_config *c, const cli_result *r, const cli_machine *m) {
    int64_t wl, wr;
    cli_config_window(c, &wl, &wr);
    fprintf(f, "{\"direction\":\"%s\",\"backend\":\"%s\",\"device\":\"%s\"", r->direction, r->backend,
            r->on_gpu ? "gpu" : "cpu");
    if (!r->on_gpu) fprintf(f, ",\"threads\":%d", m->threads);
    fprintf(f, ",\"batch\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"seqlen_q\":%lld,\"seqlen_k\":%lld,"
               "\"head_dim\":%lld,\"head_dim_v\":%lld,\"dtype\":\"%s\"",
            (long long)c->batch, (long long)c->heads, (long long)c->kv_heads, (long long)c->seqlen_q,
            (long long)cli_config_keys(c), (long long)c->head_dim, (long long)c->head_dim_v, dtype_short(c->dtype));
    fprintf(f, ",\"causal\":%s,\"window_left\":%lld,\"window_right\":%lld,\"top_left\":%s,\"softcap\":",
            c->causal == 1 ? "true" : "false", (long long)wl, (long long)wr, c->top_left ? "true" : "false");
    json_number(f, c->softcap);
    fprintf(f, ",\"alibi\":%s,\"dropout\":", c->alibi ? "true" : "false");
    json_number(f, c->dropout_p);
    fprintf(f, ",\"scale\":");
    json_number(f, c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->head_dim)); /* the default resolved */
    fprintf(f, ",\"seed\":%llu,\"deterministic\":%s,\"varlen\":%s", (unsigned long long)c->seed,
            c->deterministic ? "true" : "false", c->varlen ? "true" : "false");
    if (c->dtype == FA_F8_E4M3) fprintf(f, ",\"descale\":%s", c->descale ? "true" : "false");
    if (c->kvcache)
        fprintf(f, ",\"cache_len\":%lld,\"new_keys\":%lld,\"block_size\":%lld,\"splits\":%d", (long long)c->cache_len,
                (long long)c->new_keys, (long long)c->block_size, c->splits);
    if (r->error[0]) {
        fprintf(f, ",\"error\":");
        json_string(f, r->error);
    }
    if (r->timed) {
        double s = r->ms * 1e-3;
        fprintf(f, ",\"time_ms\":");
        json_number(f, r->ms);
        fprintf(f, ",\"runs\":%d,\"flops\":", r->runs);
        json_number(f, r->flops);
        fprintf(f, r->on_gpu ? ",\"tflops\":" : ",\"gflops\":");
        json_number(f, r->flops / s * (r->on_gpu ? 1e-12 : 1e-9));
        if (r->bytes > 0) {
            fprintf(f, ",\"gbs\":");
            json_number(f, r->bytes / s * 1e-9);
        }
        if (r->frac_peak >= 0) {
            fprintf(f, ",\"peak_f32_gflops\":");
            json_number(f, m->peak_f32);
            fprintf(f, ",\"frac_peak_f32\":");
            json_number(f, r->frac_peak);
        }
        if (r->frac_peak_bf16 >= 0) {
            fprintf(f, ",\"peak_bf16_gflops\":");
            json_number(f, m->peak_bf16);
            fprintf(f, ",\"frac_peak_bf16\":");
            json_number(f, r->frac_peak_bf16);
        }
        if (r->frac_bandwidth >= 0) {
            fprintf(f, r->on_gpu ? ",\"copy_bandwidth_gbs\":" : ",\"read_bandwidth_gbs\":");
            json_number(f, r->on_gpu ? m->copy_gbs : m->read_gbs);
            fprintf(f, ",\"frac_bandwidth\":");
            json_number(f, r->frac_bandwidth);
        }
    }
    const char *status = r->check.status == CLI_CHECK_PASS ? "pass"
                       : r->check.status == CLI_CHECK_FAIL ? "fail"
                       : r->check.status == CLI_CHECK_SKIPPED ? "skipped" : "off";
    fprintf(f, ",\"check\":\"%s\"", status);
    if (r->check.status != CLI_CHECK_OFF) {
        fprintf(f, ",\"checked\":");
        json_string(f, r->check.scope);
    }
    const cli_quantity *w = cli_check_worst(&r->check);
    if (w) {
        fprintf(f, ",\"max_err\":");
        json_number(f, w->err);
        fprintf(f, ",\"bound\":");
        json_number(f, w->bound);
        fprintf(f, ",\"errors\":{");
        for (int i = 0; i < r->check.n; ++i) {
            const cli_quantity *q = &r->check.q[i];
            fprintf(f, "%s\"%s\":{\"max_err\":", i ? "," : "", q->name);
            json_number(f, q->err);
            fprintf(f, ",\"max_ref\":");
            json_number(f, q->ref_max);
            if (q->naive_err >= 0) {
                fprintf(f, ",\"naive_err\":");
                json_number(f, q->naive_err);
            }
            fprintf(f, ",\"bound\":");
            json_number(f, q->bound);
            if (q->per_row) fprintf(f, ",\"per_row\":true"); /* max_err and bound: the row nearest its bound */
            fprintf(f, ",\"nan\":%lld,\"pass\":%s}", q->nan_count, q->pass ? "true" : "false");
        }
        fprintf(f, "}");
    }
    fprintf(f, ",\"pass\":%s}\n", cli_result_failed(r) ? "false" : "true");
}

int cli_result_failed(const cli_result *r) { return r->error[0] || r->check.status == CLI_CHECK_FAIL; }

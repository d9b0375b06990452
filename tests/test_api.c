/*
 * The API around the computation: version, status and dtype names, tensor
 * constructors, contexts, workspace queries and caller workspaces, backend
 * availability, FLOP counting.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ft.h"

static void version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FA_VERSION_MAJOR, FA_VERSION_MINOR, FA_VERSION_PATCH);
    ft_check(fa_version() && strcmp(fa_version(), want) == 0, "fa_version", "\"%s\", header says %s",
             fa_version() ? fa_version() : "(null)", want);
}

static void status_names(void) {
    int ok = 1;
    for (int s = FA_OK; s <= FA_ERR_INTERNAL; ++s) {
        const char *n = fa_status_name((fa_status)s);
        if (!n || strncmp(n, "FA_", 3) != 0) ok = ft_note("status %d has name %s", s, n ? n : "(null)");
        for (int t = FA_OK; t < s && n; ++t)
            if (strcmp(n, fa_status_name((fa_status)t)) == 0) ok = ft_note("statuses %d and %d share %s", t, s, n);
    }
    ok &= strcmp(fa_status_name(FA_OK), "FA_OK") == 0 || ft_note("FA_OK is named %s", fa_status_name(FA_OK));
    ok &= strcmp(fa_status_name(FA_ERR_SHAPE), "FA_ERR_SHAPE") == 0 ||
          ft_note("FA_ERR_SHAPE is named %s", fa_status_name(FA_ERR_SHAPE));
    ok &= fa_status_name((fa_status)12345) != NULL || ft_note("unknown status gives NULL");
    ft_check(ok, "fa_status_name", "%d statuses, distinct names", FA_ERR_INTERNAL + 1);
}

static void dtypes(void) {
    static const struct { fa_dtype t; size_t size; const char *name; } want[] = {
        {FA_F32, 4, "float32"}, {FA_F16, 2, "float16"}, {FA_BF16, 2, "bfloat16"},
        {FA_F8_E4M3, 1, NULL},  {FA_I32, 4, NULL},      {FA_U8, 1, NULL}};
    int ok = 1;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
        if (fa_dtype_size(want[i].t) != want[i].size)
            ok = ft_note("dtype %d: size %zu, want %zu", (int)want[i].t, fa_dtype_size(want[i].t), want[i].size);
        const char *n = fa_dtype_name(want[i].t);
        if (!n || !*n) ok = ft_note("dtype %d has no name", (int)want[i].t);
        else if (want[i].name && strcmp(n, want[i].name) != 0) ok = ft_note("dtype %d is named %s", (int)want[i].t, n);
    }
    if (fa_dtype_size((fa_dtype)77) != 0) ok = ft_note("unknown dtype has size %zu", fa_dtype_size((fa_dtype)77));
    if (!fa_dtype_name((fa_dtype)77)) ok = ft_note("unknown dtype name is NULL");
    ft_check(ok, "fa_dtype_size / fa_dtype_name", "");
}

static int tensor_is(const fa_tensor *t, void *data, fa_dtype dt, int ndim, const int64_t *shape,
                     const int64_t *stride) {
    if (t->data != data || t->dtype != dt || t->ndim != ndim || t->device != FA_DEVICE_CPU) return 0;
    for (int d = 0; d < ndim; ++d)
        if (t->shape[d] != shape[d] || t->stride[d] != stride[d]) return 0;
    return 1;
}

static void tensors(void) {
    float buf[4];
    fa_tensor t1 = fa_tensor_1d(buf, FA_F32, 7);
    fa_tensor t2 = fa_tensor_2d(buf, FA_F16, 3, 5);
    fa_tensor t3 = fa_tensor_3d(buf, FA_BF16, 2, 3, 5);
    fa_tensor t4 = fa_tensor_4d(buf, FA_I32, 2, 3, 5, 7);
    int ok = tensor_is(&t1, buf, FA_F32, 1, (int64_t[]){7}, (int64_t[]){1}) || ft_note("fa_tensor_1d wrong");
    ok &= tensor_is(&t2, buf, FA_F16, 2, (int64_t[]){3, 5}, (int64_t[]){5, 1}) || ft_note("fa_tensor_2d wrong");
    ok &= tensor_is(&t3, buf, FA_BF16, 3, (int64_t[]){2, 3, 5}, (int64_t[]){15, 5, 1}) || ft_note("fa_tensor_3d wrong");
    ok &= tensor_is(&t4, buf, FA_I32, 4, (int64_t[]){2, 3, 5, 7}, (int64_t[]){105, 35, 7, 1}) ||
          ft_note("fa_tensor_4d wrong");
    ft_check(ok, "fa_tensor_1d..4d", "shapes and contiguous strides");
}

static void contexts(void) {
    fa_context *ctx = NULL;
    int ok = 1;
    fa_status st = fa_context_create(&ctx);
    if (st != FA_OK || !ctx) {
        ft_fail("contexts", "fa_context_create: %s %s", fa_status_name(st), fa_last_error());
        return;
    }
    if (fa_context_set_backend(ctx, FA_BACKEND_REFERENCE) != FA_OK) ok = ft_note("set_backend(reference) failed");
    if (fa_context_set_backend(ctx, FA_BACKEND_CPU) != FA_OK) ok = ft_note("set_backend(cpu) failed");
    if (fa_context_set_backend(ctx, FA_BACKEND_AUTO) != FA_OK) ok = ft_note("set_backend(auto) failed");
    if (fa_context_set_backend(ctx, (fa_backend)99) == FA_OK) ok = ft_note("set_backend(99) accepted");
    if (fa_context_set_num_threads(ctx, 1) != FA_OK) ok = ft_note("set_num_threads(1) failed");
    if (fa_context_set_num_threads(ctx, 0) != FA_OK) ok = ft_note("set_num_threads(0) failed");
    if (fa_context_set_num_threads(ctx, -3) == FA_OK) ok = ft_note("set_num_threads(-3) accepted");
    if (fa_context_set_cuda_stream(ctx, NULL) != FA_OK) ok = ft_note("set_cuda_stream(NULL) failed");
    if (fa_context_set_workspace(ctx, NULL, 0) != FA_OK) ok = ft_note("set_workspace(NULL) failed");
    if (fa_context_set_dry_run(ctx, 1) != FA_OK) ok = ft_note("set_dry_run(1) failed");
    if (fa_context_workspace_needed(ctx) != 0) ok = ft_note("fresh dry run reports a workspace");
    if (fa_context_set_dry_run(ctx, 0) != FA_OK) ok = ft_note("set_dry_run(0) failed");
    /* A NULL context is an error for the setters, and a no-op for destroy. */
    st = fa_context_set_backend(NULL, FA_BACKEND_CPU);
    if (st != FA_ERR_NULL_POINTER) ok = ft_note("set_backend(NULL ctx): %s", fa_status_name(st));
    if (fa_context_create(NULL) != FA_ERR_NULL_POINTER) ok = ft_note("fa_context_create(NULL) not rejected");
    if (fa_context_workspace_needed(NULL) != 0) ok = ft_note("workspace_needed(NULL) != 0");
    fa_context_destroy(ctx);
    fa_context_destroy(NULL);
    ft_check(ok, "contexts", "create, set_*, destroy");

    /* A context that forces the reference keeps its choice per call. */
    float q[2 * 4] = {1, 0, 0, 1, 0.5f, 0.5f, 1, -1}, k[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, v[2 * 4] = {1, 1, 2, 2, 3, 3, 4, 4};
    float o1[8], o2[8];
    fa_tensor tq = fa_tensor_4d(q, FA_F32, 1, 2, 1, 4), tk = fa_tensor_4d(k, FA_F32, 1, 2, 1, 4);
    fa_tensor tv = fa_tensor_4d(v, FA_F32, 1, 2, 1, 4), t1 = fa_tensor_4d(o1, FA_F32, 1, 2, 1, 4);
    fa_tensor t2 = fa_tensor_4d(o2, FA_F32, 1, 2, 1, 4);
    fa_status s1 = fa_fwd(ft_ref_ctx, &tq, &tk, &tv, NULL, &t1, NULL);
    fa_status s2 = fa_fwd(NULL, &tq, &tk, &tv, NULL, &t2, NULL);
    double err = 0;
    for (int i = 0; i < 8; ++i) err = fmax(err, fabs(o1[i] - o2[i]));
    ft_check(s1 == FA_OK && s2 == FA_OK && err < 1e-5 && fa_last_error()[0] == '\0',
             "default context and NULL options", "reference %s, default %s, diff %.2g, last error \"%s\"",
             fa_status_name(s1), fa_status_name(s2), err, fa_last_error());
}

static void backends(void) {
    int ok = 1;
    static const fa_backend all[] = {FA_BACKEND_AUTO, FA_BACKEND_REFERENCE, FA_BACKEND_CPU, FA_BACKEND_CUDA,
                                     FA_BACKEND_CUDA_SM80};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        const char *n = fa_backend_name(all[i]);
        if (!n || !*n) ok = ft_note("backend %d has no name", (int)all[i]);
    }
    if (!fa_backend_available(FA_BACKEND_REFERENCE)) ok = ft_note("reference not available");
    if (!fa_backend_available(FA_BACKEND_CPU)) ok = ft_note("cpu not available");
    int devices = fa_cuda_device_count();
    if (devices < 0) ok = ft_note("fa_cuda_device_count() = %d", devices);
    if (devices == 0 && fa_backend_available(FA_BACKEND_CUDA)) ok = ft_note("cuda available without a device");
    if (devices == 0 && fa_backend_available(FA_BACKEND_CUDA_SM80)) ok = ft_note("cuda_sm80 available without a device");
    if (fa_backend_available((fa_backend)99)) ok = ft_note("backend 99 available");
    char name[128] = "";
    int major = -1, minor = -1;
    if (fa_cuda_device_info(devices, name, sizeof name, &major, &minor) == FA_OK)
        ok = ft_note("fa_cuda_device_info(%d) accepted an index past the last device", devices);
    for (int d = 0; d < devices; ++d) {
        fa_status st = fa_cuda_device_info(d, name, sizeof name, &major, &minor);
        if (st != FA_OK || !name[0] || major < 1) ok = ft_note("device %d: %s \"%s\" cc %d.%d", d, fa_status_name(st), name, major, minor);
        else printf("      device %d: %s, compute capability %d.%d\n", d, name, major, minor);
    }
    const char *features = fa_cpu_features();
    if (!features) ok = ft_note("fa_cpu_features() is NULL");
    /* Without a device, forcing a CUDA backend fails cleanly. */
    if (devices == 0) {
        fa_context *ctx = NULL;
        fa_context_create(&ctx);
        fa_status st = fa_context_set_backend(ctx, FA_BACKEND_CUDA);
        if (st == FA_OK) {
            float x[4] = {1, 2, 3, 4}, o[4];
            memset(o, 0xFF, sizeof o);
            fa_tensor t = fa_tensor_4d(x, FA_F32, 1, 1, 1, 4), to = fa_tensor_4d(o, FA_F32, 1, 1, 1, 4);
            st = fa_fwd(ctx, &t, &t, &t, NULL, &to, NULL);
            unsigned char poison[sizeof o];
            memset(poison, 0xFF, sizeof poison);
            if (st == FA_OK) ok = ft_note("fa_fwd on a forced CUDA backend without a device succeeded");
            if (memcmp(o, poison, sizeof o) != 0) ok = ft_note("a failed call wrote its output");
        }
        if (st != FA_ERR_BACKEND && st != FA_ERR_DEVICE) ok = ft_note("forced CUDA without a device: %s", fa_status_name(st));
        fa_context_destroy(ctx);
    }
    ft_check(ok, "backends", "cuda devices %d, cpu features \"%s\"", devices, features ? features : "");
}

static void flops(void) {
    double f = fa_fwd_flops(2, 16, 1024, 1024, 128, 0);
    double fc = fa_fwd_flops(2, 16, 1024, 1024, 128, 1);
    double fr = fa_fwd_flops(1, 8, 1, 4096, 128, 1); /* decode: Sq != Sk, not halved */
    double want = 4.0 * 2 * 16 * 1024 * 1024 * 128;
    ft_check(f == want && fc == want / 2 && fr == 4.0 * 8 * 4096 * 128, "fa_fwd_flops", "%.4g, causal %.4g, decode %.4g", f, fc, fr);
}

/* Dry run, then a caller workspace of exactly the size needed and one byte
 * less, for the forward, the backward and a split KV-cache call. */
typedef struct small {
    ft_tensor q, k, v, out, lse, dout, dq, dk, dv, cache_k, cache_v, seqlens;
} small;

static fa_status run_op(int op, fa_context *ctx, small *s) {
    fa_tensor q = ft_arg(&s->q), k = ft_arg(&s->k), v = ft_arg(&s->v), out = ft_arg(&s->out), lse = ft_arg(&s->lse);
    fa_options o;
    memset(&o, 0, sizeof o);
    o.causal = 1;
    fa_status st;
    if (op == 0) {
        st = fa_fwd(ctx, &q, &k, &v, &o, &out, &lse);
    } else if (op == 1) {
        fa_tensor dout = ft_arg(&s->dout), dq = ft_arg(&s->dq), dk = ft_arg(&s->dk), dv = ft_arg(&s->dv);
        st = fa_bwd(ctx, &dout, &q, &k, &v, &out, &lse, &o, &dq, &dk, &dv);
        ft_download(&s->dq), ft_download(&s->dk), ft_download(&s->dv);
    } else {
        fa_tensor ck = ft_arg(&s->cache_k), cv = ft_arg(&s->cache_v), sl = ft_arg(&s->seqlens);
        st = fa_fwd_kvcache(ctx, &q, &ck, &cv, &sl, NULL, NULL, NULL, 3, &o, &out, &lse);
    }
    ft_download(&s->out), ft_download(&s->lse);
    return st;
}

static int all_written(const ft_tensor *t) {
    float *v = ft_to_f32(t);
    int ok = 1;
    for (int64_t e = 0; e < ft_numel(t); ++e)
        if (isnan(v[e])) ok = 0;
    free(v);
    return ok;
}

static int untouched(const ft_tensor *t) {
    for (size_t i = 0; i < t->nbuf * fa_dtype_size(t->dtype); ++i)
        if (t->host[i] != 0xFF) return 0;
    return 1;
}

static void workspace(fa_dtype dt) {
    static const char *ops[3] = {"fwd", "bwd", "kvcache num_splits 3"};
    small s;
    ft_rng r = ft_rng_for("workspace");
    s.q = ft_alloc4(dt, 2, 37, 4, 64, FT_CONTIG);
    s.k = ft_alloc4(dt, 2, 300, 2, 64, FT_CONTIG);
    s.v = ft_alloc4(dt, 2, 300, 2, 64, FT_CONTIG);
    s.cache_k = ft_alloc4(dt, 2, 2000, 2, 64, FT_CONTIG);
    s.cache_v = ft_alloc4(dt, 2, 2000, 2, 64, FT_CONTIG);
    s.seqlens = ft_alloc(FA_I32, 1, (int64_t[]){2}, FT_CONTIG);
    ((int32_t *)s.seqlens.host)[0] = 1999;
    ((int32_t *)s.seqlens.host)[1] = 1200;
    s.out = ft_alloc4(dt, 2, 37, 4, 64, FT_CONTIG);
    s.lse = ft_alloc(FA_F32, 3, (int64_t[]){2, 4, 37}, FT_CONTIG);
    s.dout = ft_alloc4(dt, 2, 37, 4, 64, FT_CONTIG);
    s.dq = ft_alloc4(dt, 2, 37, 4, 64, FT_CONTIG);
    s.dk = ft_alloc4(dt, 2, 300, 2, 64, FT_CONTIG);
    s.dv = ft_alloc4(dt, 2, 300, 2, 64, FT_CONTIG);
    ft_tensor *in[] = {&s.q, &s.k, &s.v, &s.cache_k, &s.cache_v, &s.dout};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; ++i) ft_fill_normal(in[i], &r, 1.0);

    for (int op = 0; op < 3; ++op) {
        char name[96];
        snprintf(name, sizeof name, "workspace %s %s", ops[op], fa_dtype_name(dt));
        if (!ft_selected(name)) continue;
        fa_context *ctx = NULL;
        fa_context_create(&ctx);
        fa_context_set_backend(ctx, ft_backend);
        int ok = 1;
        if (op == 1) { /* the backward needs a forward's out and lse */
            fa_status st = run_op(0, ctx, &s);
            if (st == FA_ERR_DTYPE) {
                ft_skip(name, "%s", fa_last_error());
                fa_context_destroy(ctx);
                continue;
            }
        }
        ft_tensor *res = op == 1 ? &s.dq : &s.out;
        /* Dry run: FA_OK, nothing written, a size recorded. */
        ft_poison(res);
        fa_context_set_dry_run(ctx, 1);
        fa_status st = run_op(op, ctx, &s);
        size_t need = fa_context_workspace_needed(ctx);
        fa_context_set_dry_run(ctx, 0);
        if (st == FA_ERR_DTYPE) {
            ft_skip(name, "%s", fa_last_error());
            fa_context_destroy(ctx);
            continue;
        }
        if (st != FA_OK) ok = ft_note("dry run: %s %s", fa_status_name(st), fa_last_error());
        if (!untouched(res)) ok = ft_note("dry run wrote the output");
        /* Exactly the size asked for. */
        void *buf = ft_buffer_alloc(need);
        fa_context_set_workspace(ctx, buf, need);
        ft_poison(res);
        st = run_op(op, ctx, &s);
        if (st != FA_OK) ok = ft_note("workspace of %zu bytes: %s %s", need, fa_status_name(st), fa_last_error());
        else if (!all_written(res)) ok = ft_note("workspace of %zu bytes: output not fully written", need);
        /* One byte less. */
        const char *small_note = "no workspace needed, one-byte-short check not applicable";
        if (need > 0) {
            fa_context_set_workspace(ctx, buf, need - 1);
            ft_poison(res);
            st = run_op(op, ctx, &s);
            if (st != FA_ERR_WORKSPACE) ok = ft_note("workspace one byte short: %s, want FA_ERR_WORKSPACE", fa_status_name(st));
            if (!strstr(fa_last_error(), "workspace")) ok = ft_note("message \"%s\" does not name the workspace", fa_last_error());
            if (!untouched(res)) ok = ft_note("a call refused for its workspace wrote the output");
            small_note = "one byte short: FA_ERR_WORKSPACE";
        }
        fa_context_set_workspace(ctx, NULL, 0);
        ft_buffer_free(buf);
        fa_context_destroy(ctx);
        ft_check(ok, name, "needs %zu bytes; %s", need, small_note);
    }
    ft_tensor *all[] = {&s.q, &s.k, &s.v, &s.out, &s.lse, &s.dout, &s.dq, &s.dk, &s.dv, &s.cache_k, &s.cache_v, &s.seqlens};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ft_free(all[i]);
}

/* lse is optional in the forward: the output must not depend on asking for it. */
static void optional_lse(fa_dtype dt) {
    char name[64];
    snprintf(name, sizeof name, "fa_fwd without lse %s", fa_dtype_name(dt));
    if (!ft_selected(name)) return;
    ft_rng r = ft_rng_for(name);
    ft_tensor q = ft_alloc4(dt, 2, 45, 4, 64, FT_GUARDED), k = ft_alloc4(dt, 2, 77, 2, 64, FT_GUARDED);
    ft_tensor v = ft_alloc4(dt, 2, 77, 2, 64, FT_GUARDED), o1 = ft_alloc4(dt, 2, 45, 4, 64, FT_GUARDED);
    ft_tensor o2 = ft_alloc4(dt, 2, 45, 4, 64, FT_GUARDED), lse = ft_alloc(FA_F32, 3, (int64_t[]){2, 4, 45}, FT_GUARDED);
    ft_fill_normal(&q, &r, 1.0);
    ft_fill_normal(&k, &r, 1.0);
    ft_fill_normal(&v, &r, 1.0);
    fa_options o;
    memset(&o, 0, sizeof o);
    o.causal = 1;
    fa_tensor tq = ft_arg(&q), tk = ft_arg(&k), tv = ft_arg(&v), t1 = ft_arg(&o1), t2 = ft_arg(&o2), tl = ft_arg(&lse);
    fa_status s1 = fa_fwd(ft_ctx, &tq, &tk, &tv, &o, &t1, &tl);
    fa_status s2 = fa_fwd(ft_ctx, &tq, &tk, &tv, &o, &t2, NULL);
    ft_download(&o1);
    ft_download(&o2);
    if (s1 == FA_ERR_DTYPE) ft_skip(name, "%s", fa_last_error());
    else
        ft_check(s1 == FA_OK && s2 == FA_OK && memcmp(o1.host, o2.host, o1.nbuf * fa_dtype_size(dt)) == 0 &&
                     all_written(&o2) && ft_padding_intact(&o2),
                 name, "with lse %s, without %s, outputs %s", fa_status_name(s1), fa_status_name(s2),
                 memcmp(o1.host, o2.host, o1.nbuf * fa_dtype_size(dt)) == 0 ? "identical" : "differ");
    ft_free(&q), ft_free(&k), ft_free(&v), ft_free(&o1), ft_free(&o2), ft_free(&lse);
}

int main(void) {
    if (!ft_init("test_api")) return ft_finish();
    version();
    status_names();
    dtypes();
    tensors();
    contexts();
    backends();
    flops();
    fa_dtype dts[3];
    int n = ft_backend_dtypes(dts);
    for (int i = 0; i < n; ++i) {
        workspace(dts[i]);
        optional_lse(dts[i]);
    }
    return ft_finish();
}

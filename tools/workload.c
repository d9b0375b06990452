#include "workload.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "convert.h"

/* splitmix64: a small, fast generator with good statistics for test data. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never exactly 0 so log() is finite. */
static double uniform01(uint64_t *state) {
    return ((double)(splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Generator state of one operand: each draws from its own stream so shapes
 * do not shift each other's data. */
static uint64_t stream_state(uint64_t seed, uint64_t stream) { return seed ^ (stream * 0xD1B54A32D192ED03ull); }

/* Standard normal values (Box-Muller), stored in the tensor's dtype (rounded
 * to nearest even; e4m3 saturates at +-448, far beyond these values). */
static void fill_normal(cli_buffer *b, fa_dtype t, uint64_t seed, uint64_t stream) {
    uint64_t state = stream_state(seed, stream);
    int64_t n = (int64_t)(b->bytes / fa_dtype_size(t));
    for (int64_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform01(&state)));
        double a = 6.283185307179586 * uniform01(&state);
        fa_store_f(b->host, t, i, (float)(r * cos(a)));
        if (i + 1 < n) fa_store_f(b->host, t, i + 1, (float)(r * sin(a)));
    }
}

static fa_tensor tensor4(const cli_buffer *b, fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                         int on_device) {
    fa_tensor x = fa_tensor_4d(b->data, t, n0, n1, n2, n3);
    x.device = on_device ? FA_DEVICE_CUDA : FA_DEVICE_CPU;
    return x;
}

static fa_tensor tensor_nd(const cli_buffer *b, fa_dtype t, int ndim, int64_t n0, int64_t n1, int64_t n2,
                           int on_device) {
    fa_tensor x = ndim == 1 ? fa_tensor_1d(b->data, t, n0)
                : ndim == 2 ? fa_tensor_2d(b->data, t, n0, n1)
                            : fa_tensor_3d(b->data, t, n0, n1, n2);
    x.device = on_device ? FA_DEVICE_CUDA : FA_DEVICE_CPU;
    return x;
}

static size_t bytes_of(fa_dtype t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return (size_t)n0 * (size_t)n1 * (size_t)n2 * (size_t)n3 * fa_dtype_size(t);
}

int cli_workload_create(cli_workload *w, const cli_config *c, int on_device, char *err, size_t err_len) {
    memset(w, 0, sizeof *w);
    w->cfg = *c;
    w->on_device = on_device;
    w->Sk = cli_config_keys(c);
    const fa_dtype t = c->dtype, ot = fa_out_dtype(t); /* inputs, out */
    const int64_t B = c->batch, Sq = c->seqlen_q, Hq = c->heads, Hk = c->kv_heads;
    const int64_t D = c->head_dim, Dv = c->head_dim_v;

    /* Key/value storage: the plain (B, Sk) tensors, or a contiguous or paged cache. */
    int64_t kv_rows0 = B, kv_rows1 = w->Sk;
    if (c->kvcache) {
        w->s_cache = w->Sk; /* room for cache_len + new keys */
        if (c->block_size > 0) {
            w->max_blocks = (w->s_cache + c->block_size - 1) / c->block_size;
            if (w->max_blocks == 0) w->max_blocks = 1;
            w->num_blocks = B * w->max_blocks;
            kv_rows0 = w->num_blocks;
            kv_rows1 = c->block_size;
        } else {
            kv_rows1 = w->s_cache;
        }
    }

    int ok = cli_buffer_alloc(&w->q, bytes_of(t, B, Sq, Hq, D), on_device) &&
             cli_buffer_alloc(&w->k, bytes_of(t, kv_rows0, kv_rows1, Hk, D), on_device) &&
             cli_buffer_alloc(&w->v, bytes_of(t, kv_rows0, kv_rows1, Hk, Dv), on_device) &&
             cli_buffer_alloc(&w->out, bytes_of(ot, B, Sq, Hq, Dv), on_device) &&
             cli_buffer_alloc(&w->lse, bytes_of(FA_F32, B, Hq, Sq, 1), on_device);
    if (ok && !c->fwd_only)
        ok = cli_buffer_alloc(&w->dout, bytes_of(t, B, Sq, Hq, Dv), on_device) &&
             cli_buffer_alloc(&w->dq, bytes_of(t, B, Sq, Hq, D), on_device) &&
             cli_buffer_alloc(&w->dk, bytes_of(t, B, w->Sk, Hk, D), on_device) &&
             cli_buffer_alloc(&w->dv, bytes_of(t, B, w->Sk, Hk, Dv), on_device);
    if (ok && c->alibi) ok = cli_buffer_alloc(&w->alibi, bytes_of(FA_F32, Hq, 1, 1, 1), on_device);
    for (int i = 0; ok && c->descale && i < 3; ++i)
        ok = cli_buffer_alloc(&w->descale[i], bytes_of(FA_F32, B, Hk, 1, 1), on_device);
    if (ok && c->varlen)
        ok = cli_buffer_alloc(&w->cu_q, bytes_of(FA_I32, B + 1, 1, 1, 1), on_device) &&
             cli_buffer_alloc(&w->cu_k, bytes_of(FA_I32, B + 1, 1, 1, 1), on_device);
    if (ok && c->kvcache) {
        ok = cli_buffer_alloc(&w->cache_seqlens, bytes_of(FA_I32, B, 1, 1, 1), on_device);
        if (ok && c->new_keys > 0)
            ok = cli_buffer_alloc(&w->k_new, bytes_of(t, B, c->new_keys, Hk, D), on_device) &&
                 cli_buffer_alloc(&w->v_new, bytes_of(t, B, c->new_keys, Hk, Dv), on_device);
        if (ok && c->block_size > 0)
            ok = cli_buffer_alloc(&w->block_table, bytes_of(FA_I32, B, w->max_blocks, 1, 1), on_device);
    }
    if (!ok) {
        snprintf(err, err_len, "%s", cli_device_error());
        cli_workload_destroy(w);
        return 0;
    }

    /* Inputs: standard normal data, so scores are O(1) like in real models. */
    fill_normal(&w->q, t, c->seed, 1);
    fill_normal(&w->k, t, c->seed, 2);
    fill_normal(&w->v, t, c->seed, 3);
    if (w->dout.host) fill_normal(&w->dout, t, c->seed, 4);
    if (w->k_new.host) fill_normal(&w->k_new, t, c->seed, 5);
    if (w->v_new.host) fill_normal(&w->v_new, t, c->seed, 6);
    if (w->alibi.host) {
        float *s = w->alibi.host;
        for (int64_t h = 0; h < Hq; ++h) s[h] = (float)exp2(-8.0 * (double)(h + 1) / (double)Hq);
    }
    for (int i = 0; c->descale && i < 3; ++i) { /* q, k, v descales: streams 7, 8, 9 */
        uint64_t state = stream_state(c->seed, (uint64_t)(7 + i));
        float *f = w->descale[i].host;
        for (int64_t e = 0; e < B * Hk; ++e) f[e] = (float)(0.5 + 1.5 * uniform01(&state));
    }
    if (w->cu_q.host) { /* equal lengths: the packed rows are the batched tensors' rows */
        int32_t *cq = w->cu_q.host, *ck = w->cu_k.host;
        for (int64_t b = 0; b <= B; ++b) {
            cq[b] = (int32_t)(b * Sq);
            ck[b] = (int32_t)(b * w->Sk);
        }
    }
    if (w->cache_seqlens.host) {
        int32_t *n = w->cache_seqlens.host;
        for (int64_t b = 0; b < B; ++b) n[b] = (int32_t)c->cache_len;
    }
    if (w->block_table.host) {
        /* A random permutation of the blocks, so the paging is really exercised. */
        int32_t *bt = w->block_table.host;
        uint64_t state = c->seed ^ 0x5DEECE66Dull;
        for (int64_t i = 0; i < w->num_blocks; ++i) bt[i] = (int32_t)i;
        for (int64_t i = w->num_blocks - 1; i > 0; --i) {
            int64_t j = (int64_t)(splitmix64(&state) % (uint64_t)(i + 1));
            int32_t tmp = bt[i];
            bt[i] = bt[j];
            bt[j] = tmp;
        }
    }
    cli_buffer *inputs[] = {&w->q, &w->k, &w->v, &w->dout, &w->alibi, &w->k_new, &w->v_new,
                            &w->cache_seqlens, &w->block_table, &w->cu_q, &w->cu_k,
                            &w->descale[0], &w->descale[1], &w->descale[2]};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; ++i) {
        if (inputs[i]->host && !cli_buffer_upload(inputs[i])) {
            snprintf(err, err_len, "%s", cli_device_error());
            cli_workload_destroy(w);
            return 0;
        }
    }
    if (!cli_workload_poison(w, 0) || (!c->fwd_only && !cli_workload_poison(w, 1))) {
        snprintf(err, err_len, "%s", cli_device_error());
        cli_workload_destroy(w);
        return 0;
    }

    w->tq = tensor4(&w->q, t, B, Sq, Hq, D, on_device);
    w->tk = tensor4(&w->k, t, kv_rows0, kv_rows1, Hk, D, on_device);
    w->tv = tensor4(&w->v, t, kv_rows0, kv_rows1, Hk, Dv, on_device);
    w->tout = tensor4(&w->out, ot, B, Sq, Hq, Dv, on_device);
    w->tlse = tensor_nd(&w->lse, FA_F32, 3, B, Hq, Sq, on_device);
    if (!c->fwd_only) {
        w->tdout = tensor4(&w->dout, t, B, Sq, Hq, Dv, on_device);
        w->tdq = tensor4(&w->dq, t, B, Sq, Hq, D, on_device);
        w->tdk = tensor4(&w->dk, t, B, w->Sk, Hk, D, on_device);
        w->tdv = tensor4(&w->dv, t, B, w->Sk, Hk, Dv, on_device);
    }
    if (c->varlen) { /* the same buffers as (total, heads, dim) and lse as (Hq, total) */
        const int64_t TQ = B * Sq, TK = B * w->Sk;
        w->tq = tensor_nd(&w->q, t, 3, TQ, Hq, D, on_device);
        w->tk = tensor_nd(&w->k, t, 3, TK, Hk, D, on_device);
        w->tv = tensor_nd(&w->v, t, 3, TK, Hk, Dv, on_device);
        w->tout = tensor_nd(&w->out, ot, 3, TQ, Hq, Dv, on_device);
        w->tlse = tensor_nd(&w->lse, FA_F32, 2, Hq, TQ, 0, on_device);
        if (!c->fwd_only) {
            w->tdout = tensor_nd(&w->dout, t, 3, TQ, Hq, Dv, on_device);
            w->tdq = tensor_nd(&w->dq, t, 3, TQ, Hq, D, on_device);
            w->tdk = tensor_nd(&w->dk, t, 3, TK, Hk, D, on_device);
            w->tdv = tensor_nd(&w->dv, t, 3, TK, Hk, Dv, on_device);
        }
        w->tcu_q = tensor_nd(&w->cu_q, FA_I32, 1, B + 1, 0, 0, on_device);
        w->tcu_k = tensor_nd(&w->cu_k, FA_I32, 1, B + 1, 0, 0, on_device);
    }
    if (c->kvcache) {
        w->tcache_seqlens = tensor_nd(&w->cache_seqlens, FA_I32, 1, B, 0, 0, on_device);
        if (c->new_keys > 0) {
            w->tk_new = tensor4(&w->k_new, t, B, c->new_keys, Hk, D, on_device);
            w->tv_new = tensor4(&w->v_new, t, B, c->new_keys, Hk, Dv, on_device);
        }
        if (c->block_size > 0) w->tblock_table = tensor_nd(&w->block_table, FA_I32, 2, B, w->max_blocks, 0, on_device);
    }

    fa_options *o = &w->opts;
    memset(o, 0, sizeof *o);
    o->scale = c->scale;
    o->causal = c->causal == 1;
    o->use_window = c->use_window;
    o->window_left = c->window_left;
    o->window_right = c->window_right;
    o->align = c->top_left ? FA_ALIGN_TOP_LEFT : FA_ALIGN_BOTTOM_RIGHT;
    o->softcap = c->softcap;
    if (c->alibi) o->alibi_slopes = tensor_nd(&w->alibi, FA_F32, 1, Hq, 0, 0, on_device);
    o->dropout_p = c->dropout_p;
    o->dropout_seed = c->seed;
    o->dropout_offset = 0;
    o->deterministic = c->deterministic;
    if (c->descale) { /* (B, Hk) in both layouts: B counts the packed sequences too */
        o->q_descale = tensor_nd(&w->descale[0], FA_F32, 2, B, Hk, 0, on_device);
        o->k_descale = tensor_nd(&w->descale[1], FA_F32, 2, B, Hk, 0, on_device);
        o->v_descale = tensor_nd(&w->descale[2], FA_F32, 2, B, Hk, 0, on_device);
    }
    return 1;
}

void cli_workload_destroy(cli_workload *w) {
    cli_buffer *all[] = {&w->q, &w->k, &w->v, &w->dout, &w->out, &w->lse, &w->dq, &w->dk, &w->dv,
                         &w->alibi, &w->k_new, &w->v_new, &w->cache_seqlens, &w->block_table, &w->cu_q, &w->cu_k,
                         &w->descale[0], &w->descale[1], &w->descale[2]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]->host) cli_buffer_free(all[i]);
}

int cli_workload_poison(cli_workload *w, int backward) {
    if (!backward) return cli_buffer_poison(&w->out) && cli_buffer_poison(&w->lse);
    return cli_buffer_poison(&w->dq) && cli_buffer_poison(&w->dk) && cli_buffer_poison(&w->dv);
}

int cli_workload_download(cli_workload *w, int backward) {
    if (!backward) return cli_buffer_download(&w->out) && cli_buffer_download(&w->lse);
    return cli_buffer_download(&w->dq) && cli_buffer_download(&w->dk) && cli_buffer_download(&w->dv);
}

int64_t cli_workload_key_row(const cli_workload *w, int64_t b, int64_t j) {
    if (!w->cfg.kvcache) return b * w->Sk + j;
    if (w->cfg.block_size > 0) {
        const int32_t *bt = w->block_table.host;
        int64_t bs = w->cfg.block_size;
        return (int64_t)bt[b * w->max_blocks + j / bs] * bs + j % bs;
    }
    return b * w->s_cache + j;
}

double cli_workload_cache_bytes(const cli_workload *w) {
    const cli_config *c = &w->cfg;
    return (double)c->batch * (double)w->Sk * (double)c->kv_heads * (double)(c->head_dim + c->head_dim_v) *
           (double)fa_dtype_size(c->dtype);
}

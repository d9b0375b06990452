/*
 * fa_fwd_kvcache: validation of the cache (contiguous or paged), the lengths,
 * the block table and the optional new keys, then dispatch.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

static fa_status run_kvcache(const fa_backend_ops *ops, const void *p, const fa_exec *x) {
    return ops->kvcache((const fa_problem *)p, x);
}

/* Host-side checks of cache_seqlens and the block table entries each sequence uses. */
static fa_status check_lengths_and_blocks(const fa_problem *p, const fa_tensor *cache_seqlens,
                                          const fa_tensor *block_table, int64_t capacity, int64_t num_blocks) {
    const int32_t *len = (const int32_t *)cache_seqlens->data;
    for (int64_t b = 0; b < p->B; ++b) {
        if (len[b] < 0)
            return fa_set_error(FA_ERR_SEQLENS, "cache_seqlens: entry %lld is negative (%d)", (long long)b, len[b]);
        if ((int64_t)len[b] + p->S_new > capacity)
            return fa_set_error(FA_ERR_SEQLENS,
                                "cache_seqlens: sequence %lld holds %d keys, plus %lld new exceeds the cache capacity %lld",
                                (long long)b, len[b], (long long)p->S_new, (long long)capacity);
        if (!block_table) continue;
        int64_t used = ((int64_t)len[b] + p->S_new + p->block_size - 1) / p->block_size;
        const int32_t *row = (const int32_t *)block_table->data + b * block_table->stride[0];
        for (int64_t i = 0; i < used; ++i)
            if (row[i] < 0 || row[i] >= num_blocks)
                return fa_set_error(FA_ERR_BLOCK_TABLE, "block_table: entry [%lld][%lld] = %d is outside 0..%lld",
                                    (long long)b, (long long)i, row[i], (long long)(num_blocks - 1));
    }
    return FA_OK;
}

fa_status fa_fwd_kvcache(fa_context *ctx, const fa_tensor *q, fa_tensor *k_cache, fa_tensor *v_cache,
                         const fa_tensor *cache_seqlens, const fa_tensor *block_table, const fa_tensor *k_new,
                         const fa_tensor *v_new, int num_splits, const fa_options *opts, fa_tensor *out,
                         fa_tensor *lse) {
    fa_clear_error();
    fa_problem p;
    memset(&p, 0, sizeof p);
    fa_status s;
    if ((s = fa_check_tensor(q, "q", 4)) || (s = fa_check_tensor(k_cache, "k_cache", 4)) ||
        (s = fa_check_tensor(v_cache, "v_cache", 4)))
        return s;
    if ((s = fa_check_same_device(k_cache, "k_cache", q, "q")) || (s = fa_check_same_device(v_cache, "v_cache", q, "q")))
        return s;
    if (!fa_is_float_storage(q->dtype))
        return fa_set_error(FA_ERR_DTYPE, "q: dtype must be float32, float16 or bfloat16 with a KV cache, got %s",
                            fa_dtype_name(q->dtype));
    if ((s = fa_check_dtype(k_cache, "k_cache", q->dtype)) || (s = fa_check_dtype(v_cache, "v_cache", q->dtype)))
        return s;
    p.dtype = q->dtype;
    p.B = q->shape[0];
    p.Sq = q->shape[1];
    p.Hq = q->shape[2];
    p.D = q->shape[3];
    p.Hk = k_cache->shape[2];
    p.Dv = v_cache->shape[3];
    if ((s = fa_check_head_dim(p.D, "q")) || (s = fa_check_head_dim(p.Dv, "v_cache")) ||
        (s = fa_check_dim(k_cache, "k_cache", 3, p.D, "head dim, as q")))
        return s;
    if (p.Hq < 1) return fa_set_error(FA_ERR_SHAPE, "q: needs at least one head");
    if (p.Hk < 1) return fa_set_error(FA_ERR_SHAPE, "k_cache: needs at least one head");
    if (p.Hq % p.Hk)
        return fa_set_error(FA_ERR_SHAPE, "k_cache: query heads (%lld) must be a multiple of kv heads (%lld)",
                            (long long)p.Hq, (long long)p.Hk);
    for (int d = 0; d < 3; ++d)
        if (v_cache->shape[d] != k_cache->shape[d])
            return fa_set_error(FA_ERR_SHAPE, "v_cache: dimension %d must be %lld (as k_cache), got %lld", d,
                                (long long)k_cache->shape[d], (long long)v_cache->shape[d]);

    /* Cache geometry: capacity per sequence and, for a paged cache, the block pool. */
    int64_t capacity, num_blocks = 0;
    if (block_table) {
        if ((s = fa_check_tensor(block_table, "block_table", 2)) || (s = fa_check_dtype(block_table, "block_table", FA_I32)) ||
            (s = fa_check_same_device(block_table, "block_table", q, "q")) ||
            (s = fa_check_dim(block_table, "block_table", 0, p.B, "batch")))
            return s;
        num_blocks = k_cache->shape[0];
        p.block_size = k_cache->shape[1];
        if (p.block_size < 1) return fa_set_error(FA_ERR_SHAPE, "k_cache: block size must be >= 1 with a block table");
        p.block_table = (const int32_t *)block_table->data;
        p.block_table_stride = block_table->stride[0];
        if (__builtin_mul_overflow(block_table->shape[1], p.block_size, &capacity))
            return fa_set_error(FA_ERR_OVERFLOW, "block_table: blocks x block size overflows");
        if (!cache_seqlens) return fa_set_error(FA_ERR_NULL_POINTER, "cache_seqlens: required with a block table");
    } else {
        if ((s = fa_check_dim(k_cache, "k_cache", 0, p.B, "batch, as q"))) return s;
        capacity = k_cache->shape[1];
    }
    p.Sk = capacity;

    if ((k_new != NULL) != (v_new != NULL))
        return fa_set_error(FA_ERR_NULL_POINTER, "%s: k_new and v_new must be given together", k_new ? "v_new" : "k_new");
    if (k_new) {
        if ((s = fa_check_tensor(k_new, "k_new", 4)) || (s = fa_check_tensor(v_new, "v_new", 4)) ||
            (s = fa_check_same_device(k_new, "k_new", q, "q")) || (s = fa_check_same_device(v_new, "v_new", q, "q")) ||
            (s = fa_check_dtype(k_new, "k_new", q->dtype)) || (s = fa_check_dtype(v_new, "v_new", q->dtype)) ||
            (s = fa_check_dim(k_new, "k_new", 0, p.B, "batch")) || (s = fa_check_dim(k_new, "k_new", 2, p.Hk, "kv heads")) ||
            (s = fa_check_dim(k_new, "k_new", 3, p.D, "head dim")) ||
            (s = fa_check_dim(v_new, "v_new", 0, p.B, "batch")) ||
            (s = fa_check_dim(v_new, "v_new", 1, k_new->shape[1], "new keys, as k_new")) ||
            (s = fa_check_dim(v_new, "v_new", 2, p.Hk, "kv heads")) || (s = fa_check_dim(v_new, "v_new", 3, p.Dv, "head dim")))
            return s;
        if (!cache_seqlens) return fa_set_error(FA_ERR_NULL_POINTER, "cache_seqlens: required when appending k_new");
        p.S_new = k_new->shape[1];
        p.k_new = fa_view_of4(k_new);
        p.v_new = fa_view_of4(v_new);
    }
    if (cache_seqlens) {
        if ((s = fa_check_tensor(cache_seqlens, "cache_seqlens", 1)) ||
            (s = fa_check_dtype(cache_seqlens, "cache_seqlens", FA_I32)) ||
            (s = fa_check_same_device(cache_seqlens, "cache_seqlens", q, "q")) ||
            (s = fa_check_dim(cache_seqlens, "cache_seqlens", 0, p.B, "batch")))
            return s;
        p.seqlens_k = (const int32_t *)cache_seqlens->data;
        if (cache_seqlens->device == FA_DEVICE_CPU &&
            (s = check_lengths_and_blocks(&p, cache_seqlens, block_table, capacity, num_blocks)))
            return s;
    }

    if ((s = fa_check_tensor(out, "out", 4)) || (s = fa_check_same_device(out, "out", q, "q")) ||
        (s = fa_check_dtype(out, "out", q->dtype)))
        return s;
    for (int d = 0; d < 3; ++d)
        if (out->shape[d] != q->shape[d])
            return fa_set_error(FA_ERR_SHAPE, "out: dimension %d must be %lld (as q), got %lld", d, (long long)q->shape[d],
                                (long long)out->shape[d]);
    if ((s = fa_check_dim(out, "out", 3, p.Dv, "head dim of v"))) return s;
    if (lse) {
        if ((s = fa_check_tensor(lse, "lse", 3)) || (s = fa_check_dtype(lse, "lse", FA_F32)) ||
            (s = fa_check_same_device(lse, "lse", q, "q")) || (s = fa_check_dim(lse, "lse", 0, p.B, "batch")) ||
            (s = fa_check_dim(lse, "lse", 1, p.Hq, "query heads")) || (s = fa_check_dim(lse, "lse", 2, p.Sq, "queries")))
            return s;
        p.lse = (float *)lse->data;
        p.lse_sb = lse->stride[0];
        p.lse_sh = lse->stride[1];
        p.lse_ss = lse->stride[2];
    }
    if (num_splits < 0) return fa_set_error(FA_ERR_OPTION, "num_splits: must be >= 0 (0 chooses), got %d", num_splits);
    p.num_splits = num_splits;
    p.q = fa_view_of4(q);
    p.k = fa_view_of4(k_cache);
    p.v = fa_view_of4(v_cache);
    p.out = fa_view_of4(out);
    if ((s = fa_resolve_options(opts, q, &p))) return s;
    if (p.dropout_p > 0.0f) return fa_set_error(FA_ERR_OPTION, "opts.dropout_p: dropout is not supported with a KV cache");

    const fa_context *c = ctx ? ctx : fa_default_context();
    fa_exec x;
    fa_exec_init(c, q->device == FA_DEVICE_CUDA ? q->device_index : 0, &x);
    const fa_backend_ops *ops;
    if ((s = fa_select_backend(c, q->device, q->device_index, &ops))) return s;
    return fa_execute(ctx, ops, &p, FA_OP_KVCACHE, &p, run_kvcache, &x);
}

/*
 * KV cache: append k_new / v_new at cache_seqlens[b] (contiguous or paged
 * cache), then the split-KV forward over cache_seqlens[b] + S_new keys.
 */
#include <string.h>

#include "cpu_attn.h"

static void append_rows(const fa_problem *p, const fa_view *cache, const fa_view *fresh, int64_t width) {
    const size_t es = fa_dtype_size(p->dtype);
    for (int64_t b = 0; b < p->B; ++b)
        for (int64_t t = 0; t < p->S_new; ++t) {
            int64_t j = (int64_t)p->seqlens_k[b] + t; /* position in the cache */
            for (int64_t h = 0; h < p->Hk; ++h) {
                char *dst = (char *)cache->data + fa_k_offset(p, cache, b, j, h) * (int64_t)es;
                const char *src = (const char *)fresh->data + (b * fresh->sb + t * fresh->ss + h * fresh->sh) * (int64_t)es;
                memmove(dst, src, (size_t)width * es);
            }
        }
}

size_t cpu_kvcache_workspace(const fa_problem *p, const fa_exec *x) {
    return cpu_forward_workspace(p, x, cpu_forward_splits(p, x, p->num_splits));
}

fa_status cpu_kvcache(const fa_problem *p, const fa_exec *x) {
    if (p->k_new.data && p->S_new > 0) {
        append_rows(p, &p->k, &p->k_new, p->D);
        append_rows(p, &p->v, &p->v_new, p->Dv);
    }
    return cpu_forward(p, x, cpu_forward_splits(p, x, p->num_splits));
}

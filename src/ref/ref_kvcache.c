/*
 * KV cache forward for the reference backend: copy the new keys and values
 * into the cache at each sequence's current length, then attend over the
 * whole cache exactly like a batched forward. The number of splits does not
 * matter here: the reference always computes the full softmax in one pass.
 */
#include <string.h>

#include "ref.h"

/* Copy rows t < S_new of k_new / v_new (B, S_new, Hk, width) into the cache view. */
static void append_rows(const fa_problem *p, const fa_view *cache, const fa_view *fresh, int64_t width) {
    size_t row_bytes = (size_t)width * fa_dtype_size(p->dtype);
    for (int64_t b = 0; b < p->B; ++b) {
        int64_t cached = fa_seqlen_k(p, b) - p->S_new; /* keys already there: new ones go after them */
        for (int64_t t = 0; t < p->S_new; ++t) {
            for (int64_t h = 0; h < p->Hk; ++h) {
                int64_t src = b * fresh->sb + t * fresh->ss + h * fresh->sh;
                int64_t dst = fa_k_offset(p, cache, b, cached + t, h);
                /* same storage dtype on both sides: a byte copy is exact */
                memcpy((char *)cache->data + (size_t)dst * fa_dtype_size(p->dtype),
                       (const char *)fresh->data + (size_t)src * fa_dtype_size(p->dtype), row_bytes);
            }
        }
    }
}

fa_status fa_ref_kvcache(const fa_problem *p, const fa_exec *x) {
    if (p->k_new.data && p->S_new > 0) {
        append_rows(p, &p->k, &p->k_new, p->D);
        append_rows(p, &p->v, &p->v_new, p->Dv);
    }
    return fa_ref_fwd(p, x);
}

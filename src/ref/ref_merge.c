/*
 * Exact merge of partial attention results over disjoint key sets, in double:
 *   lse = log(sum_i exp(lse_i)),   out = sum_i exp(lse_i - lse) * out_i.
 * Parts with lse -inf (no keys) contribute nothing; if every part is -inf the
 * row is empty: out 0, lse -inf. Each (b, s, h) row is read in full before it
 * is written, so out and lse may alias parts[0].
 */
#include <math.h>
#include <stdlib.h>

#include "convert.h"
#include "ref.h"

static int is_float_storage(fa_dtype t) { return t == FA_F32 || t == FA_F16 || t == FA_BF16; }

/* Element offset of (b, s, h) in a (B, S, H, Dv) view. */
static int64_t row_offset(const fa_view *o, int64_t b, int64_t s, int64_t h) {
    return b * o->sb + s * o->ss + h * o->sh;
}

fa_status fa_ref_merge(const fa_merge_problem *m, const fa_exec *x) {
    (void)x;
    for (int i = 0; i < m->n; ++i)
        if (!is_float_storage(m->parts[i].dtype))
            return fa_set_error(FA_ERR_DTYPE, "outs[%d]: dtype %s is not supported by the reference backend", i,
                                fa_dtype_name(m->parts[i].dtype));
    if (!is_float_storage(m->out_dtype))
        return fa_set_error(FA_ERR_DTYPE, "out: dtype %s is not supported by the reference backend",
                            fa_dtype_name(m->out_dtype));

    double *acc = (double *)malloc((size_t)(m->Dv > 0 ? m->Dv : 1) * sizeof(double));
    double *part_lse = (double *)malloc((size_t)(m->n > 0 ? m->n : 1) * sizeof(double));
    if (!acc || !part_lse) {
        free(acc);
        free(part_lse);
        return fa_set_error(FA_ERR_OUT_OF_MEMORY, "reference backend: cannot allocate merge scratch");
    }
    for (int64_t b = 0; b < m->B; ++b) {
        for (int64_t h = 0; h < m->H; ++h) {
            for (int64_t s = 0; s < m->S; ++s) {
                double mx = -INFINITY;
                for (int i = 0; i < m->n; ++i) {
                    const fa_merge_part *pt = &m->parts[i];
                    part_lse[i] = pt->lse[b * pt->lse_sb + h * pt->lse_sh + s * pt->lse_ss];
                    if (part_lse[i] > mx) mx = part_lse[i];
                }
                for (int64_t c = 0; c < m->Dv; ++c) acc[c] = 0.0;
                double lse = -INFINITY;
                if (mx > -INFINITY) {
                    double sum = 0.0; /* sum_i exp(lse_i - max), at least 1 */
                    for (int i = 0; i < m->n; ++i) sum += exp(part_lse[i] - mx);
                    lse = mx + log(sum);
                    for (int i = 0; i < m->n; ++i) {
                        if (part_lse[i] == -INFINITY) continue; /* an empty part: its out may be anything */
                        const fa_merge_part *pt = &m->parts[i];
                        double w = exp(part_lse[i] - lse);
                        int64_t base = row_offset(&pt->o, b, s, h);
                        for (int64_t c = 0; c < m->Dv; ++c) acc[c] += w * fa_load_f(pt->o.data, pt->dtype, base + c);
                    }
                }
                int64_t out_base = row_offset(&m->out, b, s, h);
                for (int64_t c = 0; c < m->Dv; ++c) fa_store_f(m->out.data, m->out_dtype, out_base + c, (float)acc[c]);
                m->lse[b * m->lse_sb + h * m->lse_sh + s * m->lse_ss] = (float)lse;
            }
        }
    }
    free(acc);
    free(part_lse);
    return FA_OK;
}

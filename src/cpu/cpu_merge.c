/*
 * Exact merge of partial attention results over disjoint key sets:
 * lse = log sum_i exp(lse_i), out = sum_i exp(lse_i - lse) out_i.
 */
#include <math.h>

#include "convert.h"
#include "cpu_attn.h"
#include "cpu_pool.h"

static void merge_row_task(void *arg, int64_t t, int worker) {
    const fa_merge_problem *m = arg;
    int64_t b = t / (m->S * m->H), r = t % (m->S * m->H);
    int64_t i = r / m->H, h = r % m->H;
    float mx = -INFINITY;
    for (int n = 0; n < m->n; ++n) {
        const fa_merge_part *pt = &m->parts[n];
        float v = pt->lse[b * pt->lse_sb + h * pt->lse_sh + i * pt->lse_ss];
        if (v > mx) mx = v;
    }
    int64_t off = b * m->out.sb + i * m->out.ss + h * m->out.sh;
    float w[64];
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int n = 0; n < m->n; ++n) {
            const fa_merge_part *pt = &m->parts[n];
            float e = expf(pt->lse[b * pt->lse_sb + h * pt->lse_sh + i * pt->lse_ss] - mx);
            if (n < 64) w[n] = e;
            sum += e;
        }
    for (int64_t d = 0; d < m->Dv; ++d) {
        float acc = 0.0f;
        if (mx != -INFINITY)
            for (int n = 0; n < m->n; ++n) {
                const fa_merge_part *pt = &m->parts[n];
                float e = n < 64 ? w[n] : expf(pt->lse[b * pt->lse_sb + h * pt->lse_sh + i * pt->lse_ss] - mx);
                if (e > 0.0f) /* a part with lse -inf adds nothing, even if its out is not finite */
                    acc += e * fa_load_f(pt->o.data, pt->dtype, b * pt->o.sb + i * pt->o.ss + h * pt->o.sh + d);
            }
        /* Parts are read before out is written: out may alias outs[0]. */
        fa_store_f(m->out.data, m->out_dtype, off + d, mx == -INFINITY ? 0.0f : acc / sum);
    }
    if (m->lse) m->lse[b * m->lse_sb + h * m->lse_sh + i * m->lse_ss] = mx == -INFINITY ? -INFINITY : mx + logf(sum);
}

fa_status cpu_merge(const fa_merge_problem *m, const fa_exec *x) {
    int64_t rows = m->B * m->S * m->H;
    if (cpu_parallel_for(rows, x->num_threads, merge_row_task, (void *)m) != 0)
        return fa_set_error(FA_ERR_INTERNAL, "CPU backend: could not start worker threads");
    return FA_OK;
}

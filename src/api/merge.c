/* fa_merge: exact combination of partial attention results. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

static fa_status run_merge(const fa_backend_ops *ops, const void *m, const fa_exec *x) {
    return ops->merge((const fa_merge_problem *)m, x);
}

enum { FA_MERGE_MAX_PARTS = 1024 };

fa_status fa_merge(fa_context *ctx, int n, const fa_tensor *outs, const fa_tensor *lses, fa_tensor *out, fa_tensor *lse) {
    fa_clear_error();
    if (n < 1 || n > FA_MERGE_MAX_PARTS)
        return fa_set_error(FA_ERR_OPTION, "n: number of parts must be in 1..%d, got %d", FA_MERGE_MAX_PARTS, n);
    if (!outs) return fa_set_error(FA_ERR_NULL_POINTER, "outs: array pointer is NULL");
    if (!lses) return fa_set_error(FA_ERR_NULL_POINTER, "lses: array pointer is NULL");
    fa_status s;
    if ((s = fa_check_tensor(out, "out", 4)) || (s = fa_check_tensor(lse, "lse", 3))) return s;
    if (!fa_is_float_storage(out->dtype))
        return fa_set_error(FA_ERR_DTYPE, "out: dtype must be float32, float16 or bfloat16, got %s", fa_dtype_name(out->dtype));
    if ((s = fa_check_dtype(lse, "lse", FA_F32)) || (s = fa_check_same_device(lse, "lse", out, "out"))) return s;
    fa_merge_problem m;
    memset(&m, 0, sizeof m);
    m.n = n;
    m.B = out->shape[0];
    m.S = out->shape[1];
    m.H = out->shape[2];
    m.Dv = out->shape[3];
    if ((s = fa_check_dim(lse, "lse", 0, m.B, "batch")) || (s = fa_check_dim(lse, "lse", 1, m.H, "heads")) ||
        (s = fa_check_dim(lse, "lse", 2, m.S, "rows")))
        return s;
    fa_merge_part *parts = (fa_merge_part *)malloc((size_t)n * sizeof *parts);
    if (!parts) return fa_set_error(FA_ERR_OUT_OF_MEMORY, "outs: allocating %d part descriptors failed", n);
    for (int i = 0; i < n && s == FA_OK; ++i) {
        char oname[32], lname[32];
        snprintf(oname, sizeof oname, "outs[%d]", i);
        snprintf(lname, sizeof lname, "lses[%d]", i);
        const fa_tensor *o = &outs[i], *l = &lses[i];
        if ((s = fa_check_tensor(o, oname, 4)) || (s = fa_check_tensor(l, lname, 3)) ||
            (s = fa_check_same_device(o, oname, out, "out")) || (s = fa_check_same_device(l, lname, out, "out")) ||
            (s = fa_check_dtype(l, lname, FA_F32)))
            break;
        if (!fa_is_float_storage(o->dtype)) {
            s = fa_set_error(FA_ERR_DTYPE, "%s: dtype must be float32, float16 or bfloat16, got %s", oname,
                             fa_dtype_name(o->dtype));
            break;
        }
        for (int d = 0; d < 4 && s == FA_OK; ++d)
            s = fa_check_dim(o, oname, d, out->shape[d], "as out");
        for (int d = 0; d < 3 && s == FA_OK; ++d)
            s = fa_check_dim(l, lname, d, lse->shape[d], "as lse");
        if (s != FA_OK) break;
        parts[i].o = fa_view_of4(o);
        parts[i].dtype = o->dtype;
        parts[i].lse = (const float *)l->data;
        parts[i].lse_sb = l->stride[0];
        parts[i].lse_sh = l->stride[1];
        parts[i].lse_ss = l->stride[2];
    }
    m.parts = parts;
    m.out = fa_view_of4(out);
    m.out_dtype = out->dtype;
    m.lse = (float *)lse->data;
    m.lse_sb = lse->stride[0];
    m.lse_sh = lse->stride[1];
    m.lse_ss = lse->stride[2];

    const fa_context *c = ctx ? ctx : fa_default_context();
    fa_exec x;
    const fa_backend_ops *ops = NULL;
    if (s == FA_OK) {
        fa_exec_init(c, out->device == FA_DEVICE_CUDA ? out->device_index : 0, &x);
        s = fa_select_backend(c, out->device, out->device_index, &ops);
    }
    if (s == FA_OK && m.B * m.S * m.H > 0) s = fa_execute(ctx, ops, NULL, FA_OP_FWD, &m, run_merge, &x);
    free(parts);
    return s;
}

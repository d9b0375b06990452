/*
 * Gradient check of the float64 reference core: on tiny problems the analytic
 * dq, dk, dv of fa_ref_attention_bwd_f64 must match central finite differences
 * of f = sum(dout * out), and the forward must match a brute-force evaluation
 * of the definition in flashattn.h written out independently below (explicit
 * mask predicate, explicit dropout rule through fa_dropout_keep).
 *
 * Every case has several query heads over one kv head, so dk and dv are the
 * GQA sums. A second part drives the reference backend through the public
 * API (every dtype, strides, varlen, KV cache, merge, thread counts) and
 * checks it against the core head by head.
 *
 * Prints one line per case and "N passed, M failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "flashattn.h"
#include "../src/ref/ref.h"

enum { D = 4, DV = 3, MAX_H = 4, MAX_S = 8 };

#define GRAD_TOL 1e-6  /* relative to the largest gradient entry */
#define FWD_TOL 1e-12  /* core forward vs brute force, absolute */
#define FD_STEP 1e-5   /* central differences: error ~ step^2, roundoff ~ 1e-16 / step */

typedef struct gc_case {
    const char *name;
    int64_t sq, sk, hq;
    double scale;
    double softcap;
    double alibi;            /* slope of head h is alibi / (h + 1); 0: off */
    int64_t left, right;     /* window; FA_UNBOUNDED: none */
    int top_left;
    double dropout_p;
    double input_scale;      /* inputs uniform in [-input_scale, input_scale] */
    int masked_rows;         /* query rows that see no key (per head) */
} gc_case;

#define UNB FA_UNBOUNDED

/* One case's data: q and dout per query head, k and v of the single kv head. */
typedef struct gc_data {
    const gc_case *c;
    fa_ref_head_opts head[MAX_H];
    double q[MAX_H][MAX_S * D], dout[MAX_H][MAX_S * DV];
    double k[MAX_S * D], v[MAX_S * DV];
} gc_data;

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static double uniform(double a) { /* xorshift64*, uniform in [-a, a] */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return a * (2.0 * (double)(r >> 11) / 9007199254740992.0 - 1.0);
}

static void gc_setup(gc_data *g, const gc_case *c) {
    memset(g, 0, sizeof *g);
    g->c = c;
    for (int64_t h = 0; h < c->hq; ++h) {
        fa_ref_head_opts o = fa_ref_head_opts_plain(c->scale);
        o.softcap = c->softcap;
        o.alibi_slope = c->alibi / (double)(h + 1);
        o.window_left = c->left;
        o.window_right = c->right;
        o.top_left = c->top_left;
        o.dropout_p = c->dropout_p;
        o.dropout_seed = 0x1234567890ABCDEFull;
        o.dropout_offset = 77;
        o.dropout_b = 1; /* an arbitrary batch coordinate, to exercise the counter */
        o.dropout_h = h;
        g->head[h] = o;
        for (int64_t n = 0; n < c->sq * D; ++n) g->q[h][n] = uniform(c->input_scale);
        for (int64_t n = 0; n < c->sq * DV; ++n) g->dout[h][n] = uniform(1.0);
    }
    for (int64_t n = 0; n < c->sk * D; ++n) g->k[n] = uniform(c->input_scale);
    for (int64_t n = 0; n < c->sk * DV; ++n) g->v[n] = uniform(1.0);
}

/* f = sum over heads of sum(dout * out), through the core forward. */
static double objective(const gc_data *g) {
    double out[MAX_S * DV], f = 0.0;
    for (int64_t h = 0; h < g->c->hq; ++h) {
        if (fa_ref_attention_fwd_f64(&g->head[h], g->c->sq, g->c->sk, D, DV, g->q[h], g->k, g->v, out, NULL) != FA_OK)
            return NAN;
        for (int64_t n = 0; n < g->c->sq * DV; ++n) f += g->dout[h][n] * out[n];
    }
    return f;
}

/* d f / d x by central differences. */
static double numeric_derivative(gc_data *g, double *x) {
    double x0 = *x;
    *x = x0 + FD_STEP;
    double fp = objective(g);
    *x = x0 - FD_STEP;
    double fm = objective(g);
    *x = x0;
    return (fp - fm) / (2.0 * FD_STEP);
}

/* The definition, spelled out: is key j visible from query i? */
static int visible(const gc_case *c, int64_t i, int64_t j) {
    int64_t off = c->top_left ? 0 : c->sk - c->sq;
    if (c->left != UNB && j < i + off - c->left) return 0;
    if (c->right != UNB && j > i + off + c->right) return 0;
    return 1;
}

/* Brute-force forward of head h straight from flashattn.h: out (sq, DV), lse (sq). */
static void brute_forward(const gc_data *g, int64_t h, double *out, double *lse) {
    const gc_case *c = g->c;
    const fa_ref_head_opts *o = &g->head[h];
    int64_t off = c->top_left ? 0 : c->sk - c->sq;
    for (int64_t i = 0; i < c->sq; ++i) {
        double s[MAX_S], m = -INFINITY, l = 0.0;
        for (int64_t j = 0; j < c->sk; ++j) {
            s[j] = -INFINITY;
            if (!visible(c, i, j)) continue;
            double dot = 0.0;
            for (int d = 0; d < D; ++d) dot += g->q[h][i * D + d] * g->k[j * D + d];
            s[j] = c->scale * dot;
            if (c->softcap > 0) s[j] = c->softcap * tanh(s[j] / c->softcap);
            s[j] -= o->alibi_slope * fabs((double)(i + off - j));
            if (s[j] > m) m = s[j];
        }
        for (int d = 0; d < DV; ++d) out[i * DV + d] = 0.0;
        if (m == -INFINITY) {
            lse[i] = -INFINITY;
            continue;
        }
        for (int64_t j = 0; j < c->sk; ++j) l += visible(c, i, j) ? exp(s[j] - m) : 0.0;
        for (int64_t j = 0; j < c->sk; ++j) {
            if (!visible(c, i, j)) continue;
            double pj = exp(s[j] - m) / l;
            if (c->dropout_p > 0)
                pj = fa_dropout_keep(o->dropout_seed, o->dropout_offset, (float)c->dropout_p, o->dropout_b,
                                     o->dropout_h, i, j) ? pj / (1.0 - c->dropout_p) : 0.0;
            for (int d = 0; d < DV; ++d) out[i * DV + d] += pj * g->v[j * DV + d];
        }
        lse[i] = m + log(l);
    }
}

static int all_finite_or_neg_inf(const double *a, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (isnan(a[i]) || a[i] == INFINITY) return 0;
    return 1;
}

/* Returns 1 on pass; prints one line. */
static int run_case(const gc_case *c) {
    static gc_data g;
    gc_setup(&g, c);
    char why[160] = "";

    /* forward: core vs brute force, and the empty-row rule */
    double fwd_err = 0.0;
    int masked_rows = 0, dropped = 0, visible_pairs = 0;
    for (int64_t h = 0; h < c->hq && !why[0]; ++h) {
        double out[MAX_S * DV], lse[MAX_S], bout[MAX_S * DV], blse[MAX_S];
        for (int n = 0; n < MAX_S * DV; ++n) out[n] = NAN; /* poison: every element must be written */
        for (int n = 0; n < MAX_S; ++n) lse[n] = NAN;
        if (fa_ref_attention_fwd_f64(&g.head[h], c->sq, c->sk, D, DV, g.q[h], g.k, g.v, out, lse) != FA_OK) {
            snprintf(why, sizeof why, "forward failed: %s", fa_last_error());
            break;
        }
        brute_forward(&g, h, bout, blse);
        if (!all_finite_or_neg_inf(out, c->sq * DV) || !all_finite_or_neg_inf(lse, c->sq)) {
            snprintf(why, sizeof why, "head %lld: NaN or +inf in out/lse", (long long)h);
            break;
        }
        for (int64_t i = 0; i < c->sq; ++i) {
            if (blse[i] == -INFINITY) {
                masked_rows += h == 0;
                if (lse[i] != -INFINITY) snprintf(why, sizeof why, "row %lld: masked row has lse %g", (long long)i, lse[i]);
            } else {
                fwd_err = fmax(fwd_err, fabs(lse[i] - blse[i]));
            }
            for (int d = 0; d < DV; ++d) fwd_err = fmax(fwd_err, fabs(out[i * DV + d] - bout[i * DV + d]));
            for (int64_t j = 0; j < c->sk && c->dropout_p > 0; ++j) {
                if (!visible(c, i, j)) continue;
                ++visible_pairs;
                dropped += !fa_dropout_keep(g.head[h].dropout_seed, g.head[h].dropout_offset, (float)c->dropout_p,
                                            g.head[h].dropout_b, g.head[h].dropout_h, i, j);
            }
        }
    }
    if (!why[0] && masked_rows != c->masked_rows)
        snprintf(why, sizeof why, "%d fully masked rows, expected %d", masked_rows, c->masked_rows);
    if (!why[0] && fwd_err > FWD_TOL) snprintf(why, sizeof why, "forward differs from brute force by %.3g", fwd_err);
    if (!why[0] && c->dropout_p > 0 && (dropped == 0 || dropped == visible_pairs))
        snprintf(why, sizeof why, "dropout mask is trivial (%d of %d dropped)", dropped, visible_pairs);

    /* analytic gradients: dq per head, dk and dv summed over the heads */
    static double dq[MAX_H][MAX_S * D], dk[MAX_S * D], dv[MAX_S * DV];
    for (int n = 0; n < MAX_S * D; ++n) dk[n] = 0.0;
    for (int n = 0; n < MAX_S * DV; ++n) dv[n] = 0.0;
    for (int64_t h = 0; h < c->hq && !why[0]; ++h) {
        for (int n = 0; n < MAX_S * D; ++n) dq[h][n] = NAN; /* poison: every row must be written */
        if (fa_ref_attention_bwd_f64(&g.head[h], c->sq, c->sk, D, DV, g.q[h], g.k, g.v, g.dout[h], dq[h], dk, dv) != FA_OK)
            snprintf(why, sizeof why, "backward failed: %s", fa_last_error());
    }

    /* numeric gradients, compared relative to the largest entry */
    double max_err = 0.0, max_grad = 0.0;
    for (int64_t h = 0; h < c->hq && !why[0]; ++h)
        for (int64_t n = 0; n < c->sq * D; ++n) {
            double num = numeric_derivative(&g, &g.q[h][n]);
            if (isnan(dq[h][n])) snprintf(why, sizeof why, "dq[%lld][%lld] not written", (long long)h, (long long)n);
            max_err = fmax(max_err, fabs(dq[h][n] - num));
            max_grad = fmax(max_grad, fabs(num));
        }
    for (int64_t n = 0; n < c->sk * D && !why[0]; ++n) {
        double num = numeric_derivative(&g, &g.k[n]);
        max_err = fmax(max_err, fabs(dk[n] - num));
        max_grad = fmax(max_grad, fabs(num));
    }
    for (int64_t n = 0; n < c->sk * DV && !why[0]; ++n) {
        double num = numeric_derivative(&g, &g.v[n]);
        max_err = fmax(max_err, fabs(dv[n] - num));
        max_grad = fmax(max_grad, fabs(num));
    }
    double rel = max_grad > 0 ? max_err / max_grad : max_err;
    if (!why[0] && !(rel <= GRAD_TOL)) snprintf(why, sizeof why, "gradient relative error %.3g > %.1g", rel, GRAD_TOL);

    /* fully masked rows: dq exactly 0 */
    for (int64_t h = 0; h < c->hq && !why[0]; ++h) {
        double bout[MAX_S * DV], blse[MAX_S];
        brute_forward(&g, h, bout, blse);
        for (int64_t i = 0; i < c->sq; ++i)
            for (int d = 0; d < D && blse[i] == -INFINITY; ++d)
                if (dq[h][i * D + d] != 0.0) snprintf(why, sizeof why, "masked row %lld has dq != 0", (long long)i);
    }

    printf("%-36s sq=%lld sk=%lld hq=%lld  fwd err %.2e  grad rel err %.2e  masked rows %d%s%s\n", c->name,
           (long long)c->sq, (long long)c->sk, (long long)c->hq, fwd_err, rel, masked_rows, why[0] ? "  FAIL: " : "  ok",
           why);
    return !why[0];
}

/* ------------------------------------------------------------------------- */
/* The backend through the public API: the glue around the core (gather and   */
/* scatter of every dtype, strides, GQA head mapping, varlen offsets, paged    */
/* and contiguous caches, merge) must reproduce the core head by head.         */
/* ------------------------------------------------------------------------- */

static fa_context *ref_ctx;

/* Element (i0, i1, i2, i3) of a float tensor of up to 4 dims, as a double. */
static double tensor_at(const fa_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    int64_t idx[4] = {i0, i1, i2, i3}, off = 0;
    for (int d = 0; d < t->ndim; ++d) off += idx[d] * t->stride[d];
    return fa_load_f(t->data, t->dtype, off);
}

static void fill_random(fa_tensor *t, int64_t n, double a) {
    for (int64_t i = 0; i < n; ++i) fa_store_f(t->data, t->dtype, i, (float)uniform(a));
}

static void fill_poison(fa_tensor *t, int64_t n) {
    for (int64_t i = 0; i < n; ++i) fa_store_f(t->data, t->dtype, i, NAN);
}

/* The head options the front end resolves from opts, spelled out for the test. */
static fa_ref_head_opts resolve_head(const fa_options *o, int64_t d, int64_t b, int64_t h) {
    fa_ref_head_opts r = fa_ref_head_opts_plain(o->scale > 0 ? o->scale : (float)(1.0 / sqrt((double)d)));
    r.softcap = o->softcap;
    if (o->use_window) {
        if (o->window_left >= 0) r.window_left = o->window_left;
        if (o->window_right >= 0) r.window_right = o->window_right;
    }
    if (o->causal && r.window_right > 0) r.window_right = 0;
    r.top_left = o->align == FA_ALIGN_TOP_LEFT;
    const fa_tensor *a = &o->alibi_slopes;
    if (a->data) r.alibi_slope = a->ndim == 1 ? tensor_at(a, h, 0, 0, 0) : tensor_at(a, b, h, 0, 0);
    r.dropout_p = o->dropout_p;
    r.dropout_seed = o->dropout_seed;
    r.dropout_offset = o->dropout_offset;
    r.dropout_b = b;
    r.dropout_h = h;
    return r;
}

/* Rows [r0, r0 + n) of head h of batch b into a dense (n, width) array; 3-D tensors ignore b. */
static void gather_rows(const fa_tensor *t, int64_t b, int64_t r0, int64_t n, int64_t h, double *dst) {
    int64_t width = t->shape[t->ndim - 1];
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < width; ++c)
            dst[i * width + c] = t->ndim == 4 ? tensor_at(t, b, r0 + i, h, c) : tensor_at(t, r0 + i, h, c, 0);
}

/* max |got - want| over rows [r0, r0 + n) of head h, relative to max(1, |want|); NaN counts as failure. */
static double rows_err(const fa_tensor *t, int64_t b, int64_t r0, int64_t n, int64_t h, const double *want) {
    int64_t width = t->shape[t->ndim - 1];
    double err = 0.0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < width; ++c) {
            double got = t->ndim == 4 ? tensor_at(t, b, r0 + i, h, c) : tensor_at(t, r0 + i, h, c, 0);
            double e = fabs(got - want[i * width + c]) / fmax(1.0, fabs(want[i * width + c]));
            err = isnan(got) ? INFINITY : fmax(err, e);
        }
    return err;
}

/* lse entries of one head against want (-inf must match exactly). */
static double lse_err(const float *lse, int64_t stride, int64_t n, const double *want) {
    double err = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double got = lse[i * stride];
        if (want[i] == -INFINITY || got == -INFINITY || isnan(got))
            err = fmax(err, (got == want[i]) ? 0.0 : INFINITY);
        else
            err = fmax(err, fabs(got - want[i]) / fmax(1.0, fabs(want[i])));
    }
    return err;
}

static int report(const char *name, double err, double tol, fa_status st) {
    int ok = st == FA_OK && err <= tol;
    if (st != FA_OK)
        printf("%-36s FAIL: %s: %s\n", name, fa_status_name(st), fa_last_error());
    else
        printf("%-36s max rel err %.2e (tol %.0e)  %s\n", name, err, tol, ok ? "ok" : "FAIL");
    return ok;
}

enum { BB = 2, BSQ = 7, BSK = 9, BHQ = 4, BHK = 2, BD = 5, BDV = 3, QPAD = 8 };

/*
 * Batched forward and backward with everything switched on: GQA 2:1, ALiBi per
 * (batch, head), softcap, a window, dropout, and q stored with padded heads.
 * Returns the number of failed checks (forward, backward).
 */
static int backend_batched(fa_dtype dt, const char *fwd_name, const char *bwd_name, double tol_fwd, double tol_bwd,
                           int *checks) {
    size_t es = fa_dtype_size(dt);
    void *qm = malloc(BB * BSQ * BHQ * QPAD * es), *km = malloc(BB * BSK * BHK * BD * es),
         *vm = malloc(BB * BSK * BHK * BDV * es), *om = malloc(BB * BSQ * BHQ * BDV * es),
         *dom = malloc(BB * BSQ * BHQ * BDV * es), *dqm = malloc(BB * BSQ * BHQ * BD * es),
         *dkm = malloc(BB * BSK * BHK * BD * es), *dvm = malloc(BB * BSK * BHK * BDV * es);
    float lse[BB * BHQ * BSQ], slopes[BB * BHQ];
    fa_tensor q = fa_tensor_4d(qm, dt, BB, BSQ, BHQ, BD);
    q.stride[2] = QPAD; /* heads padded: only the last dim is contiguous */
    q.stride[1] = BHQ * QPAD;
    q.stride[0] = BSQ * BHQ * QPAD;
    fa_tensor k = fa_tensor_4d(km, dt, BB, BSK, BHK, BD), v = fa_tensor_4d(vm, dt, BB, BSK, BHK, BDV);
    fa_tensor out = fa_tensor_4d(om, dt, BB, BSQ, BHQ, BDV), dout = fa_tensor_4d(dom, dt, BB, BSQ, BHQ, BDV);
    fa_tensor dq = fa_tensor_4d(dqm, dt, BB, BSQ, BHQ, BD), dk = fa_tensor_4d(dkm, dt, BB, BSK, BHK, BD);
    fa_tensor dv = fa_tensor_4d(dvm, dt, BB, BSK, BHK, BDV), lset = fa_tensor_3d(lse, FA_F32, BB, BHQ, BSQ);
    fill_random(&q, BB * BSQ * BHQ * QPAD, 1.5);
    fill_random(&k, BB * BSK * BHK * BD, 1.5);
    fill_random(&v, BB * BSK * BHK * BDV, 1.0);
    fill_random(&dout, BB * BSQ * BHQ * BDV, 1.0);
    for (int i = 0; i < BB * BHQ; ++i) slopes[i] = (float)(0.1 + 0.05 * i);
    fill_poison(&out, BB * BSQ * BHQ * BDV);
    for (int i = 0; i < BB * BHQ * BSQ; ++i) lse[i] = NAN;

    fa_options o;
    memset(&o, 0, sizeof o);
    o.scale = 0.4f;
    o.softcap = 2.5f;
    o.use_window = 1;
    o.window_left = 4;
    o.window_right = 1;
    o.alibi_slopes = fa_tensor_2d(slopes, FA_F32, BB, BHQ);
    o.dropout_p = 0.2f;
    o.dropout_seed = 42;
    o.dropout_offset = 0x100000007ull;

    fa_status st = fa_fwd(ref_ctx, &q, &k, &v, &o, &out, &lset);
    double ferr = 0.0, berr = 0.0;
    double qd[BSQ * BD], kd[BSK * BD], vd[BSK * BDV], od[BSQ * BDV], ld[BSQ], dod[BSQ * BDV];
    double dqd[BSQ * BD], dkd[BSK * BD], dvd[BSK * BDV];
    for (int64_t b = 0; b < BB && st == FA_OK; ++b)
        for (int64_t h = 0; h < BHQ; ++h) {
            fa_ref_head_opts ho = resolve_head(&o, BD, b, h);
            gather_rows(&q, b, 0, BSQ, h, qd);
            gather_rows(&k, b, 0, BSK, h / (BHQ / BHK), kd);
            gather_rows(&v, b, 0, BSK, h / (BHQ / BHK), vd);
            fa_ref_attention_fwd_f64(&ho, BSQ, BSK, BD, BDV, qd, kd, vd, od, ld);
            ferr = fmax(ferr, rows_err(&out, b, 0, BSQ, h, od));
            ferr = fmax(ferr, lse_err(lse + (b * BHQ + h) * BSQ, 1, BSQ, ld));
        }
    int failed = !report(fwd_name, ferr, tol_fwd, st);

    fill_poison(&dq, BB * BSQ * BHQ * BD);
    fill_poison(&dk, BB * BSK * BHK * BD);
    fill_poison(&dv, BB * BSK * BHK * BDV);
    if (st == FA_OK) st = fa_bwd(ref_ctx, &dout, &q, &k, &v, &out, &lset, &o, &dq, &dk, &dv);
    for (int64_t b = 0; b < BB && st == FA_OK; ++b)
        for (int64_t hk = 0; hk < BHK; ++hk) {
            gather_rows(&k, b, 0, BSK, hk, kd);
            gather_rows(&v, b, 0, BSK, hk, vd);
            for (int n = 0; n < BSK * BD; ++n) dkd[n] = 0.0;
            for (int n = 0; n < BSK * BDV; ++n) dvd[n] = 0.0;
            for (int64_t h = hk * (BHQ / BHK); h < (hk + 1) * (BHQ / BHK); ++h) {
                fa_ref_head_opts ho = resolve_head(&o, BD, b, h);
                gather_rows(&q, b, 0, BSQ, h, qd);
                gather_rows(&dout, b, 0, BSQ, h, dod);
                fa_ref_attention_bwd_f64(&ho, BSQ, BSK, BD, BDV, qd, kd, vd, dod, dqd, dkd, dvd);
                berr = fmax(berr, rows_err(&dq, b, 0, BSQ, h, dqd));
            }
            berr = fmax(berr, rows_err(&dk, b, 0, BSK, hk, dkd));
            berr = fmax(berr, rows_err(&dv, b, 0, BSK, hk, dvd));
        }
    failed += !report(bwd_name, berr, tol_bwd, st);
    *checks += 2;
    free(qm); free(km); free(vm); free(om); free(dom); free(dqm); free(dkm); free(dvm);
    return failed;
}

/*
 * Varlen forward and backward: three packed sequences, one with no queries
 * and one with no keys (its rows get out 0, lse -inf, dq 0), causal, GQA 2:1.
 */
enum { VB = 3, VHQ = 2, VHK = 1, VD = 6, VDV = 4, VTQ = 8, VTK = 6 };

static int backend_varlen(int *checks) {
    static const int32_t cu_q[VB + 1] = {0, 3, 3, VTQ}, cu_k[VB + 1] = {0, 4, VTK, VTK};
    float qm[VTQ * VHQ * VD], km[VTK * VHK * VD], vm[VTK * VHK * VDV], om[VTQ * VHQ * VDV], dom[VTQ * VHQ * VDV];
    float dqm[VTQ * VHQ * VD], dkm[VTK * VHK * VD], dvm[VTK * VHK * VDV], lse[VHQ * VTQ];
    fa_tensor q = fa_tensor_3d(qm, FA_F32, VTQ, VHQ, VD), k = fa_tensor_3d(km, FA_F32, VTK, VHK, VD);
    fa_tensor v = fa_tensor_3d(vm, FA_F32, VTK, VHK, VDV), out = fa_tensor_3d(om, FA_F32, VTQ, VHQ, VDV);
    fa_tensor dout = fa_tensor_3d(dom, FA_F32, VTQ, VHQ, VDV), dq = fa_tensor_3d(dqm, FA_F32, VTQ, VHQ, VD);
    fa_tensor dk = fa_tensor_3d(dkm, FA_F32, VTK, VHK, VD), dv = fa_tensor_3d(dvm, FA_F32, VTK, VHK, VDV);
    fa_tensor lset = fa_tensor_2d(lse, FA_F32, VHQ, VTQ);
    fa_tensor cuq = fa_tensor_1d((void *)cu_q, FA_I32, VB + 1), cuk = fa_tensor_1d((void *)cu_k, FA_I32, VB + 1);
    fill_random(&q, VTQ * VHQ * VD, 1.0);
    fill_random(&k, VTK * VHK * VD, 1.0);
    fill_random(&v, VTK * VHK * VDV, 1.0);
    fill_random(&dout, VTQ * VHQ * VDV, 1.0);
    fill_poison(&out, VTQ * VHQ * VDV);
    fill_poison(&dq, VTQ * VHQ * VD);
    fill_poison(&dk, VTK * VHK * VD);
    fill_poison(&dv, VTK * VHK * VDV);
    for (int i = 0; i < VHQ * VTQ; ++i) lse[i] = NAN;
    fa_options o;
    memset(&o, 0, sizeof o);
    o.causal = 1;

    fa_status st = fa_varlen_fwd(ref_ctx, &q, &k, &v, &cuq, &cuk, 0, 0, &o, &out, &lset);
    if (st == FA_OK) st = fa_varlen_bwd(ref_ctx, &dout, &q, &k, &v, &out, &lset, &cuq, &cuk, 0, 0, &o, &dq, &dk, &dv);
    double ferr = 0.0, berr = 0.0;
    double qd[VTQ * VD], kd[VTK * VD], vd[VTK * VDV], od[VTQ * VDV], ld[VTQ], dod[VTQ * VDV];
    double dqd[VTQ * VD], dkd[VTK * VD], dvd[VTK * VDV];
    for (int64_t b = 0; b < VB && st == FA_OK; ++b) {
        int64_t q0 = cu_q[b], sq = cu_q[b + 1] - q0, k0 = cu_k[b], sk = cu_k[b + 1] - k0;
        gather_rows(&k, 0, k0, sk, 0, kd);
        gather_rows(&v, 0, k0, sk, 0, vd);
        for (int n = 0; n < VTK * VD; ++n) dkd[n] = 0.0;
        for (int n = 0; n < VTK * VDV; ++n) dvd[n] = 0.0;
        for (int64_t h = 0; h < VHQ; ++h) {
            fa_ref_head_opts ho = resolve_head(&o, VD, b, h);
            gather_rows(&q, 0, q0, sq, h, qd);
            gather_rows(&dout, 0, q0, sq, h, dod);
            fa_ref_attention_fwd_f64(&ho, sq, sk, VD, VDV, qd, kd, vd, od, ld);
            fa_ref_attention_bwd_f64(&ho, sq, sk, VD, VDV, qd, kd, vd, dod, dqd, dkd, dvd);
            ferr = fmax(ferr, rows_err(&out, 0, q0, sq, h, od));
            ferr = fmax(ferr, lse_err(lse + h * VTQ + q0, 1, sq, ld));
            berr = fmax(berr, rows_err(&dq, 0, q0, sq, h, dqd));
        }
        berr = fmax(berr, rows_err(&dk, 0, k0, sk, 0, dkd));
        berr = fmax(berr, rows_err(&dv, 0, k0, sk, 0, dvd));
    }
    *checks += 2;
    return !report("backend varlen fwd f32", ferr, 1e-6, st) + !report("backend varlen bwd f32", berr, 1e-5, st);
}

/*
 * KV cache with two new keys appended: once contiguous, once paged with
 * block size 3 and a scrambled block table. Both must put the new keys where
 * they belong and give the same out as the core over the expected keys.
 */
enum { CB = 2, CSQ = 2, CHQ = 2, CHK = 1, CD = 4, CDV = 4, CCAP = 9, CNEW = 2, CBS = 3, CNB = 7, CMB = 3 };

static int backend_kvcache(int *checks) {
    static const int32_t seqlens[CB] = {4, 1};
    static const int32_t table[CB * CMB] = {5, 0, 3, 1, 6, 2};
    float qm[CB * CSQ * CHQ * CD], knm[CB * CNEW * CHK * CD], vnm[CB * CNEW * CHK * CDV];
    float kc[CB * CCAP * CHK * CD], vc[CB * CCAP * CHK * CDV], kp[CNB * CBS * CHK * CD], vp[CNB * CBS * CHK * CDV];
    float oc[CB * CSQ * CHQ * CDV], op[CB * CSQ * CHQ * CDV], lc[CB * CHQ * CSQ], lp[CB * CHQ * CSQ];
    fa_tensor q = fa_tensor_4d(qm, FA_F32, CB, CSQ, CHQ, CD);
    fa_tensor kn = fa_tensor_4d(knm, FA_F32, CB, CNEW, CHK, CD), vn = fa_tensor_4d(vnm, FA_F32, CB, CNEW, CHK, CDV);
    fa_tensor kct = fa_tensor_4d(kc, FA_F32, CB, CCAP, CHK, CD), vct = fa_tensor_4d(vc, FA_F32, CB, CCAP, CHK, CDV);
    fa_tensor kpt = fa_tensor_4d(kp, FA_F32, CNB, CBS, CHK, CD), vpt = fa_tensor_4d(vp, FA_F32, CNB, CBS, CHK, CDV);
    fa_tensor out_c = fa_tensor_4d(oc, FA_F32, CB, CSQ, CHQ, CDV), out_p = fa_tensor_4d(op, FA_F32, CB, CSQ, CHQ, CDV);
    fa_tensor lse_c = fa_tensor_3d(lc, FA_F32, CB, CHQ, CSQ), lse_p = fa_tensor_3d(lp, FA_F32, CB, CHQ, CSQ);
    fa_tensor lens = fa_tensor_1d((void *)seqlens, FA_I32, CB), bt = fa_tensor_2d((void *)table, FA_I32, CB, CMB);
    fill_random(&q, CB * CSQ * CHQ * CD, 1.0);
    fill_random(&kn, CB * CNEW * CHK * CD, 1.0);
    fill_random(&vn, CB * CNEW * CHK * CDV, 1.0);
    fill_random(&kct, CB * CCAP * CHK * CD, 1.0);
    fill_random(&vct, CB * CCAP * CHK * CDV, 1.0);
    fill_poison(&kpt, CNB * CBS * CHK * CD);
    fill_poison(&vpt, CNB * CBS * CHK * CDV);
    /* the paged cache holds the same keys as the contiguous one */
    for (int64_t b = 0; b < CB; ++b)
        for (int64_t j = 0; j < seqlens[b]; ++j) {
            int64_t blk = table[b * CMB + j / CBS], r = j % CBS;
            memcpy(&kp[(blk * CBS + r) * CD], &kc[(b * CCAP + j) * CD], CD * sizeof(float));
            memcpy(&vp[(blk * CBS + r) * CDV], &vc[(b * CCAP + j) * CDV], CDV * sizeof(float));
        }
    fill_poison(&out_c, CB * CSQ * CHQ * CDV);
    fill_poison(&out_p, CB * CSQ * CHQ * CDV);
    fa_options o;
    memset(&o, 0, sizeof o);
    o.causal = 1;

    fa_status st = fa_fwd_kvcache(ref_ctx, &q, &kct, &vct, &lens, NULL, &kn, &vn, 0, &o, &out_c, &lse_c);
    if (st == FA_OK) st = fa_fwd_kvcache(ref_ctx, &q, &kpt, &vpt, &lens, &bt, &kn, &vn, 3, &o, &out_p, &lse_p);
    double err = 0.0;
    double qd[CSQ * CD], kd[CCAP * CD], vd[CCAP * CDV], od[CSQ * CDV], ld[CSQ];
    for (int64_t b = 0; b < CB && st == FA_OK; ++b) {
        int64_t sk = seqlens[b] + CNEW;
        /* expected keys: the old cache rows, then the new ones */
        gather_rows(&kct, b, 0, seqlens[b], 0, kd);
        gather_rows(&vct, b, 0, seqlens[b], 0, vd);
        gather_rows(&kn, b, 0, CNEW, 0, kd + seqlens[b] * CD);
        gather_rows(&vn, b, 0, CNEW, 0, vd + seqlens[b] * CDV);
        /* both caches now hold them (contiguous: rows 0..sk; paged: through the table) */
        err = fmax(err, rows_err(&kct, b, 0, sk, 0, kd));
        err = fmax(err, rows_err(&vct, b, 0, sk, 0, vd));
        for (int64_t j = 0; j < sk; ++j) {
            int64_t blk = table[b * CMB + j / CBS];
            err = fmax(err, rows_err(&kpt, blk, j % CBS, 1, 0, kd + j * CD));
            err = fmax(err, rows_err(&vpt, blk, j % CBS, 1, 0, vd + j * CDV));
        }
        for (int64_t h = 0; h < CHQ; ++h) {
            fa_ref_head_opts ho = resolve_head(&o, CD, b, h);
            gather_rows(&q, b, 0, CSQ, h, qd);
            fa_ref_attention_fwd_f64(&ho, CSQ, sk, CD, CDV, qd, kd, vd, od, ld);
            err = fmax(err, rows_err(&out_c, b, 0, CSQ, h, od));
            err = fmax(err, rows_err(&out_p, b, 0, CSQ, h, od));
            err = fmax(err, lse_err(lc + (b * CHQ + h) * CSQ, 1, CSQ, ld));
            err = fmax(err, lse_err(lp + (b * CHQ + h) * CSQ, 1, CSQ, ld));
        }
    }
    *checks += 1;
    return !report("backend kvcache append, paged+contig", err, 1e-6, st);
}

/*
 * Merge: attention over keys [0, 4) and [4, 9) merged (in place into the
 * first part) equals attention over all 9; a third part with no keys
 * contributes nothing; merging only empty parts gives out 0, lse -inf.
 */
enum { MB = 2, MSQ = 3, MH = 2, MD = 4, MDV = 5, MSK = 9, MSPLIT = 4 };

static int backend_merge(int *checks) {
    float qm[MB * MSQ * MH * MD], km[MB * MSK * MH * MD], vm[MB * MSK * MH * MDV];
    float of[MB * MSQ * MH * MDV], lf[MB * MH * MSQ];
    float oa[MB * MSQ * MH * MDV], la[MB * MH * MSQ], ob[MB * MSQ * MH * MDV], lb[MB * MH * MSQ];
    float oz[MB * MSQ * MH * MDV], le[MB * MH * MSQ];
    uint16_t oe[MB * MSQ * MH * MDV]; /* the empty part's out, handed to the merge in bfloat16 */
    fa_tensor q = fa_tensor_4d(qm, FA_F32, MB, MSQ, MH, MD);
    fa_tensor k = fa_tensor_4d(km, FA_F32, MB, MSK, MH, MD), v = fa_tensor_4d(vm, FA_F32, MB, MSK, MH, MDV);
    fill_random(&q, MB * MSQ * MH * MD, 1.0);
    fill_random(&k, MB * MSK * MH * MD, 1.0);
    fill_random(&v, MB * MSK * MH * MDV, 1.0);
    /* the two key ranges as views into k and v */
    fa_tensor ka = k, va = v, kb = k, vb = v;
    ka.shape[1] = va.shape[1] = MSPLIT;
    kb.shape[1] = vb.shape[1] = MSK - MSPLIT;
    kb.data = km + MSPLIT * MH * MD;
    vb.data = vm + MSPLIT * MH * MDV;
    fa_tensor ke = k, ve = v; /* no keys at all */
    ke.shape[1] = ve.shape[1] = 0;
    fa_tensor outs[3] = {fa_tensor_4d(oa, FA_F32, MB, MSQ, MH, MDV), fa_tensor_4d(ob, FA_F32, MB, MSQ, MH, MDV),
                         fa_tensor_4d(oe, FA_BF16, MB, MSQ, MH, MDV)};
    fa_tensor lses[3] = {fa_tensor_3d(la, FA_F32, MB, MH, MSQ), fa_tensor_3d(lb, FA_F32, MB, MH, MSQ),
                         fa_tensor_3d(le, FA_F32, MB, MH, MSQ)};
    fa_tensor full = fa_tensor_4d(of, FA_F32, MB, MSQ, MH, MDV), full_lse = fa_tensor_3d(lf, FA_F32, MB, MH, MSQ);

    fa_status st = fa_fwd(ref_ctx, &q, &k, &v, NULL, &full, &full_lse);
    if (st == FA_OK) st = fa_fwd(ref_ctx, &q, &ka, &va, NULL, &outs[0], &lses[0]);
    if (st == FA_OK) st = fa_fwd(ref_ctx, &q, &kb, &vb, NULL, &outs[1], &lses[1]);
    fa_tensor empty_out = fa_tensor_4d(oz, FA_F32, MB, MSQ, MH, MDV);
    if (st == FA_OK) st = fa_fwd(ref_ctx, &q, &ke, &ve, NULL, &empty_out, &lses[2]);
    double err = 0.0, want[MSQ * MDV];
    for (int i = 0; i < MB * MSQ * MH * MDV && st == FA_OK; ++i) err = fmax(err, oz[i] == 0.0f ? 0.0 : INFINITY);
    for (int i = 0; i < MB * MH * MSQ && st == FA_OK; ++i) err = fmax(err, le[i] == -INFINITY ? 0.0 : INFINITY);
    for (int i = 0; i < MB * MSQ * MH * MDV; ++i) oe[i] = 0x7FC0; /* an empty part's out may be anything, NaN included */
    if (st == FA_OK) st = fa_merge(ref_ctx, 3, outs, lses, &outs[0], &lses[0]);
    for (int64_t b = 0; b < MB && st == FA_OK; ++b)
        for (int64_t h = 0; h < MH; ++h) {
            gather_rows(&full, b, 0, MSQ, h, want);
            err = fmax(err, rows_err(&outs[0], b, 0, MSQ, h, want));
            for (int64_t i = 0; i < MSQ; ++i) {
                double wl = lf[(b * MH + h) * MSQ + i];
                err = fmax(err, lse_err(&la[(b * MH + h) * MSQ + i], 1, 1, &wl));
            }
        }
    /* only empty parts: out 0, lse -inf */
    if (st == FA_OK) {
        for (int i = 0; i < MB * MSQ * MH * MDV; ++i) ob[i] = NAN;
        st = fa_merge(ref_ctx, 1, &outs[2], &lses[2], &outs[1], &lses[1]);
        for (int i = 0; i < MB * MSQ * MH * MDV && st == FA_OK; ++i) err = fmax(err, ob[i] == 0.0f ? 0.0 : INFINITY);
        for (int i = 0; i < MB * MH * MSQ && st == FA_OK; ++i) err = fmax(err, lb[i] == -INFINITY ? 0.0 : INFINITY);
    }
    *checks += 1;
    return !report("backend merge (alias, empty part)", err, 1e-6, st);
}

/* The same backward on 1 and on 3 threads: bitwise identical gradients. */
static int backend_thread_count_invariant(int *checks) {
    enum { TB = 2, TS = 33, THQ = 6, THK = 3, TD = 8 };
    size_t nq = TB * TS * THQ * TD, nk = TB * TS * THK * TD;
    float *m = (float *)malloc((3 * nq + 2 * nk + 2 * (nq + 2 * nk)) * sizeof(float) + TB * THQ * TS * sizeof(float));
    float *qm = m, *om = qm + nq, *dom = om + nq, *lm = dom + nq, *km = lm + TB * THQ * TS, *vm = km + nk;
    float *g1 = vm + nk, *g3 = g1 + nq + 2 * nk;
    fa_tensor q = fa_tensor_4d(qm, FA_F32, TB, TS, THQ, TD), k = fa_tensor_4d(km, FA_F32, TB, TS, THK, TD);
    fa_tensor v = fa_tensor_4d(vm, FA_F32, TB, TS, THK, TD), out = fa_tensor_4d(om, FA_F32, TB, TS, THQ, TD);
    fa_tensor dout = fa_tensor_4d(dom, FA_F32, TB, TS, THQ, TD), lse = fa_tensor_3d(lm, FA_F32, TB, THQ, TS);
    fill_random(&q, nq, 1.0);
    fill_random(&k, nk, 1.0);
    fill_random(&v, nk, 1.0);
    fill_random(&dout, nq, 1.0);
    fa_options o;
    memset(&o, 0, sizeof o);
    o.causal = 1;
    o.dropout_p = 0.1f;
    fa_status st = fa_fwd(ref_ctx, &q, &k, &v, &o, &out, &lse);
    float *grads[2] = {g1, g3};
    int threads[2] = {1, 3};
    for (int r = 0; r < 2 && st == FA_OK; ++r) {
        fa_tensor dq = fa_tensor_4d(grads[r], FA_F32, TB, TS, THQ, TD);
        fa_tensor dk = fa_tensor_4d(grads[r] + nq, FA_F32, TB, TS, THK, TD);
        fa_tensor dv = fa_tensor_4d(grads[r] + nq + nk, FA_F32, TB, TS, THK, TD);
        st = fa_context_set_num_threads(ref_ctx, threads[r]);
        if (st == FA_OK) st = fa_bwd(ref_ctx, &dout, &q, &k, &v, &out, &lse, &o, &dq, &dk, &dv);
    }
    fa_context_set_num_threads(ref_ctx, 0);
    int same = st == FA_OK && memcmp(g1, g3, (nq + 2 * nk) * sizeof(float)) == 0;
    free(m);
    *checks += 1;
    return !report("backend bwd 1 vs 3 threads, bitwise", same ? 0.0 : INFINITY, 0.0, st);
}

/* float8 is a forward input: the reference takes it there and refuses its
 * backward by name. */
static int backend_refuses_fp8(int *checks) {
    fa_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = FA_F8_E4M3;
    fa_status fwd = fa_ref_backend.supports(&p, FA_OP_FWD);
    fa_status st = fa_ref_backend.supports(&p, FA_OP_BWD);
    int ok = fwd == FA_OK && st == FA_ERR_DTYPE && strstr(fa_last_error(), "float8") != NULL;
    printf("%-36s %s (%s)  %s\n", "backend refuses float8 backward", fa_status_name(st), fa_last_error(), ok ? "ok" : "FAIL");
    *checks += 1;
    return !ok;
}

int main(void) {
    static const gc_case cases[] = {
        /* name                              sq sk hq scale cap  alibi left right tl drop  in  masked */
        {"plain",                             3, 5, 2, 0.5, 0.0, 0.0, UNB, UNB, 0, 0.0, 1.0, 0},
        {"causal, bottom-right",              3, 5, 2, 0.5, 0.0, 0.0, UNB, 0,   0, 0.0, 1.0, 0},
        {"causal, top-left",                  3, 5, 2, 0.5, 0.0, 0.0, UNB, 0,   1, 0.0, 1.0, 0},
        {"window (1, 1), bottom-right",       3, 5, 2, 0.5, 0.0, 0.0, 1,   1,   0, 0.0, 1.0, 0},
        {"window (2, 0), top-left",           5, 5, 2, 0.5, 0.0, 0.0, 2,   0,   1, 0.0, 1.0, 0},
        {"softcap 0.7",                       3, 5, 2, 0.5, 0.7, 0.0, UNB, UNB, 0, 0.0, 2.0, 0},
        {"alibi, causal",                     3, 5, 2, 0.5, 0.0, 0.8, UNB, 0,   0, 0.0, 1.0, 0},
        {"alibi, top-left, no mask",          4, 5, 2, 0.5, 0.0, 0.8, UNB, UNB, 1, 0.0, 1.0, 0},
        {"dropout 0.3 (fixed mask)",          3, 5, 2, 0.5, 0.0, 0.0, UNB, UNB, 0, 0.3, 1.0, 0},
        {"fully masked rows (causal sq>sk)",  5, 3, 2, 0.5, 0.0, 0.0, UNB, 0,   0, 0.0, 1.0, 2},
        {"fully masked rows (window)",        5, 3, 2, 0.5, 0.0, 0.0, 0,   UNB, 1, 0.0, 1.0, 2},
        {"no keys (sk = 0)",                  3, 0, 2, 0.5, 0.0, 0.0, UNB, UNB, 0, 0.0, 1.0, 3},
        {"GQA 4:1",                           3, 5, 4, 0.5, 0.0, 0.0, UNB, UNB, 0, 0.0, 1.0, 0},
        {"GQA 4:1, everything at once",       4, 6, 4, 0.3, 0.9, 0.5, 2,   1,   0, 0.2, 2.0, 0},
        {"large scores",                      3, 5, 2, 0.5, 0.0, 0.0, UNB, UNB, 0, 0.0, 4.0, 0},
    };
    int n = (int)(sizeof cases / sizeof cases[0]), failed = 0;
    for (int i = 0; i < n; ++i) failed += !run_case(&cases[i]);

    if (fa_context_create(&ref_ctx) != FA_OK || fa_context_set_backend(ref_ctx, FA_BACKEND_REFERENCE) != FA_OK) {
        printf("cannot create a context for the reference backend: %s\n", fa_last_error());
        return 1;
    }
    /* f32: rounding of the stored result only; bf16: 2^-8 relative, the storage precision */
    failed += backend_batched(FA_F32, "backend fwd f32 (all options)", "backend bwd f32 (all options)", 1e-6, 1e-5, &n);
    failed += backend_batched(FA_BF16, "backend fwd bf16 (all options)", "backend bwd bf16 (all options)", 1.0 / 256,
                              1.0 / 256, &n);
    failed += backend_batched(FA_F16, "backend fwd f16 (all options)", "backend bwd f16 (all options)", 1.0 / 1024,
                              1.0 / 1024, &n);
    failed += backend_varlen(&n);
    failed += backend_kvcache(&n);
    failed += backend_merge(&n);
    failed += backend_thread_count_invariant(&n);
    failed += backend_refuses_fp8(&n);
    fa_context_destroy(ref_ctx);

    printf("%d passed, %d failed\n", n - failed, failed);
    return failed ? 1 : 0;
}

/*
 * Gradient check of the float64 reference core: on tiny problems the analytic
 * dq, dk, dv of fa_ref_attention_bwd_f64 must match central finite differences
 * of f = sum(dout * out), and the forward must match a brute-force evaluation
 * of the definition in flashattn.h written out independently below (explicit
 * mask predicate, explicit dropout rule through fa_dropout_keep).
 *
 * Every case has several query heads over one kv head, so dk and dv are the
 * GQA sums. Prints one line per case and "N passed, M failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

    printf("%-34s sq=%lld sk=%lld hq=%lld  fwd err %.2e  grad rel err %.2e  masked rows %d%s%s\n", c->name,
           (long long)c->sq, (long long)c->sk, (long long)c->hq, fwd_err, rel, masked_rows, why[0] ? "  FAIL: " : "  ok",
           why);
    return !why[0];
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
    int n = (int)(sizeof cases / sizeof cases[0]), passed = 0;
    for (int i = 0; i < n; ++i) passed += run_case(&cases[i]);
    printf("%d passed, %d failed\n", passed, n - passed);
    return passed == n ? 0 : 1;
}

/*
 * The math of one attention head in float64, written the obvious way: for each
 * query row, score every visible key, take the softmax, and accumulate.
 * Memory is one row of scores (three in the backward), never an S x S matrix.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "philox.h"
#include "ref.h"

fa_ref_head_opts fa_ref_head_opts_plain(double scale) {
    fa_ref_head_opts o;
    memset(&o, 0, sizeof o);
    o.scale = scale;
    o.window_left = FA_UNBOUNDED;
    o.window_right = FA_UNBOUNDED;
    return o;
}

/* One head's options with what every row needs precomputed. */
typedef struct ref_head {
    const fa_ref_head_opts *o;
    fa_problem mask;          /* carries only the window and alignment, for fa_key_range */
    int64_t d;
    int64_t diag;             /* key j is on query i's diagonal when j == i + diag */
    uint32_t drop_threshold;  /* keep iff the Philox word >= this */
    double drop_scale;        /* 1 / (1 - p): kept probabilities are scaled up */
} ref_head;

static void ref_head_init(ref_head *h, const fa_ref_head_opts *o, int64_t sq, int64_t sk, int64_t d) {
    memset(h, 0, sizeof *h);
    h->o = o;
    h->mask.window_left = o->window_left;
    h->mask.window_right = o->window_right;
    h->mask.top_left = o->top_left;
    h->d = d;
    h->diag = fa_diag_offset(&h->mask, sq, sk);
    /* The threshold is defined on the float p the caller gave (flashattn.h). */
    h->drop_threshold = fa_dropout_threshold((float)o->dropout_p);
    h->drop_scale = 1.0 / (1.0 - o->dropout_p);
}

/*
 * <a, b> in double with four partial sums: the adds no longer wait on each
 * other (a serial sum is 4x slower), and in double the different order moves
 * the result by a few units of 1e-16 only.
 */
static double ref_dot(const double *a, const double *b, int64_t n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t c = 0;
    for (; c + 4 <= n; c += 4) {
        s0 += a[c] * b[c];
        s1 += a[c + 1] * b[c + 1];
        s2 += a[c + 2] * b[c + 2];
        s3 += a[c + 3] * b[c + 3];
    }
    for (; c < n; ++c) s0 += a[c] * b[c];
    return (s0 + s1) + (s2 + s3);
}

/*
 * Score s_ij = softcap(scale * <q_i, k_j>) - alibi(i, j). *chain receives
 * ds_ij / d(scale * <q_i, k_j>): the softcap derivative 1 - tanh^2, or 1.
 * ALiBi is a constant shift, so it adds nothing to the chain.
 */
static double ref_score(const ref_head *h, const double *qi, const double *kj, int64_t i, int64_t j,
                        double *chain) {
    double s = h->o->scale * ref_dot(qi, kj, h->d);
    double g = 1.0;
    if (h->o->softcap > 0.0) {
        double t = tanh(s / h->o->softcap);
        s = h->o->softcap * t;
        g = 1.0 - t * t;
    }
    if (h->o->alibi_slope != 0.0) s -= h->o->alibi_slope * fabs((double)(i + h->diag - j));
    *chain = g;
    return s;
}

/* keep_ij / (1 - p), or 1 without dropout. */
static double ref_dropout_factor(const ref_head *h, int64_t i, int64_t j) {
    if (h->o->dropout_p <= 0.0) return 1.0;
    uint32_t r[4];
    fa_dropout_words(h->o->dropout_seed, h->o->dropout_offset, h->o->dropout_b, h->o->dropout_h, i, j >> 2, r);
    return r[j & 3] >= h->drop_threshold ? h->drop_scale : 0.0;
}

/*
 * Softmax of row i over its visible keys [lo, hi): fills prob[j] (undropped)
 * and, if chain is not NULL, chain[j]; returns lse_i = m + log(l).
 */
static double ref_softmax_row(const ref_head *h, const double *qi, const double *k, int64_t i, int64_t lo,
                              int64_t hi, double *prob, double *chain) {
    double m = -INFINITY;
    for (int64_t j = lo; j < hi; ++j) {
        double g;
        prob[j] = ref_score(h, qi, k + j * h->d, i, j, &g);
        if (chain) chain[j] = g;
        if (prob[j] > m) m = prob[j];
    }
    double l = 0.0;
    for (int64_t j = lo; j < hi; ++j) {
        prob[j] = exp(prob[j] - m); /* subtract the row max so nothing overflows */
        l += prob[j];
    }
    for (int64_t j = lo; j < hi; ++j) prob[j] /= l;
    return m + log(l);
}

static double *ref_scratch(int64_t rows, int64_t sk) {
    size_t n = (size_t)(sk > 0 ? sk : 1) * (size_t)rows;
    double *s = (double *)malloc(n * sizeof(double));
    if (!s) fa_set_error(FA_ERR_OUT_OF_MEMORY, "reference backend: cannot allocate %zu bytes of scratch",
                         n * sizeof(double));
    return s;
}

fa_status fa_ref_attention_fwd_f64(const fa_ref_head_opts *o, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                   const double *q, const double *k, const double *v,
                                   double *out, double *lse) {
    ref_head h;
    ref_head_init(&h, o, sq, sk, d);
    double *prob = ref_scratch(1, sk);
    if (!prob) return FA_ERR_OUT_OF_MEMORY;

    for (int64_t i = 0; i < sq; ++i) {
        double *oi = out + i * dv;
        for (int64_t c = 0; c < dv; ++c) oi[c] = 0.0;
        int64_t lo, hi;
        fa_key_range(&h.mask, sq, sk, i, &lo, &hi);
        if (lo >= hi) { /* no visible key: out 0, lse -inf */
            if (lse) lse[i] = -INFINITY;
            continue;
        }
        double row_lse = ref_softmax_row(&h, q + i * d, k, i, lo, hi, prob, NULL);
        for (int64_t j = lo; j < hi; ++j) {
            double pj = prob[j] * ref_dropout_factor(&h, i, j);
            if (pj == 0.0) continue;
            const double *vj = v + j * dv;
            for (int64_t c = 0; c < dv; ++c) oi[c] += pj * vj[c];
        }
        if (lse) lse[i] = row_lse;
    }
    free(prob);
    return FA_OK;
}

/*
 * With P the undropped softmax, z_ij = keep_ij / (1 - p) and
 * out_i = sum_j P_ij z_ij v_j, the gradient of f = sum_i <dout_i, out_i> is
 *   dv_j  += P_ij z_ij dout_i
 *   dPz_ij = z_ij <dout_i, v_j>                   (df / dP_ij)
 *   dS_ij  = P_ij (dPz_ij - sum_k P_ik dPz_ik)    (through the softmax)
 *   dT_ij  = dS_ij * chain_ij * scale             (through softcap and scale)
 *   dq_i  += dT_ij k_j,   dk_j += dT_ij q_i.
 */
fa_status fa_ref_attention_bwd_f64(const fa_ref_head_opts *o, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                   const double *q, const double *k, const double *v, const double *dout,
                                   double *dq, double *dk, double *dv_grad) {
    ref_head h;
    ref_head_init(&h, o, sq, sk, d);
    double *scratch = ref_scratch(3, sk);
    if (!scratch) return FA_ERR_OUT_OF_MEMORY;
    int64_t row = sk > 0 ? sk : 1;
    double *prob = scratch, *chain = scratch + row, *dpz = scratch + 2 * row;

    for (int64_t i = 0; i < sq; ++i) {
        const double *qi = q + i * d, *doi = dout + i * dv;
        double *dqi = dq + i * d;
        for (int64_t c = 0; c < d; ++c) dqi[c] = 0.0;
        int64_t lo, hi;
        fa_key_range(&h.mask, sq, sk, i, &lo, &hi);
        if (lo >= hi) continue; /* a fully masked row has zero gradient */
        ref_softmax_row(&h, qi, k, i, lo, hi, prob, chain);

        double row_dot = 0.0; /* sum_j P_ij dPz_ij, equal to <dout_i, out_i> */
        for (int64_t j = lo; j < hi; ++j) {
            double z = ref_dropout_factor(&h, i, j);
            const double *vj = v + j * dv;
            double *dvj = dv_grad + j * dv;
            dpz[j] = z * ref_dot(doi, vj, dv);
            row_dot += prob[j] * dpz[j];
            double pz = prob[j] * z;
            if (pz != 0.0)
                for (int64_t c = 0; c < dv; ++c) dvj[c] += pz * doi[c];
        }
        for (int64_t j = lo; j < hi; ++j) {
            double dt = prob[j] * (dpz[j] - row_dot) * chain[j] * o->scale;
            const double *kj = k + j * d;
            double *dkj = dk + j * d;
            for (int64_t c = 0; c < d; ++c) {
                dqi[c] += dt * kj[c];
                dkj[c] += dt * qi[c];
            }
        }
    }
    free(scratch);
    return FA_OK;
}

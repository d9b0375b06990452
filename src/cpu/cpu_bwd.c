/*
 * CPU backward, recomputing P from lse (FlashAttention-2 order):
 *
 * A work unit owns one kv head of one sequence and one chunk of its keys,
 * and visits every query head that reads that kv head. For each key tile
 * (K, V packed once) and each block of queries:
 *
 *     S^T  = K Q^T,  P^T = exp(S^T - lse)       (recomputed, masked)
 *     dP^T = V dO^T
 *     dV  += P^T dO                              (P with dropout applied)
 *     dS^T = P^T * (dP^T - Delta),  Delta = rowsum(dO * O)
 *     dK  += dS^T Q,   dQ += dS K               (scale applied at the end)
 *
 * dK and dV of a tile are finished before the next tile, and dQ lives in an
 * f32 accumulator of the unit. When there are fewer (sequence, kv head)
 * pairs than threads, the keys are cut into chunks and each chunk's dQ is
 * summed afterwards in chunk order. Every sum has a fixed order, so the
 * result is bitwise reproducible for a given thread count.
 *
 * Operands: with bf16 storage and a native bf16 dot product (cpu_use_bf16)
 * the five products run on bf16 pairs, as the forward's do: Q, dO, K and V
 * are packed as stored, and P and dS are rounded to bf16 on their way into
 * dV, dK and dQ (the precision the GPU kernels and flash-attn give them).
 * Otherwise every operand is widened to f32. Accumulation is f32 either way.
 */
#include <math.h>
#include <string.h>

#include "convert.h"
#include "cpu_attn.h"
#include "cpu_pool.h"

#define LOG2E 1.4426950408889634f

typedef struct bwd_dims {
    int64_t G;           /* query heads per kv head */
    int64_t sqp;         /* longest query sequence rounded up to CPU_BM */
    int64_t dpad, dvpad; /* D and Dv rounded up to 16 (panel widths) */
    int nchunk;          /* key chunks per (sequence, kv head) */
    int64_t chunk;       /* keys per chunk, a multiple of CPU_BN */
} bwd_dims;

static bwd_dims bwd_dims_of(const fa_problem *p, const fa_exec *x) {
    bwd_dims d;
    d.G = p->Hq / p->Hk;
    d.sqp = cpu_round_up(p->Sq > 0 ? p->Sq : 1, CPU_BM);
    d.dpad = cpu_round_up(p->D, CPU_LANES);
    d.dvpad = cpu_round_up(p->Dv, CPU_LANES);
    int64_t pairs = p->B * p->Hk;
    int64_t tiles = (p->Sk + CPU_BN - 1) / CPU_BN;
    int64_t n = 1;
    if (pairs < x->num_threads) n = (x->num_threads + pairs - 1) / pairs;
    if (n > tiles) n = tiles;
    if (n < 1) n = 1;
    d.nchunk = (int)n;
    int64_t sk = p->Sk > 0 ? p->Sk : 1;
    d.chunk = cpu_round_up((sk + n - 1) / n, CPU_BN);
    return d;
}

typedef struct bwd_scratch {
    /* f32 operands (f32 and f16 storage, or bf16 without a bf16 dot product) */
    float *qt, *qn, *dot, *don; /* per head: Q^T and dO^T in blocks [sqp/BM][D][BM]; Q, dO rows [sqp][pad] */
    float *kt, *vt;             /* key tile [BN][dpad], [BN][dvpad] */
    /* bf16 pair operands: each word holds two bf16 values, the first in the low half */
    uint32_t *q_dpairs, *do_dpairs; /* per head: Q^T, dO^T paired along the head dim, blocks [sqp/BM][D/2][BM] */
    uint32_t *q_rpairs, *do_rpairs; /* per head: Q, dO with rows 2i and 2i+1 paired, [sqp/2][dpad] and [sqp/2][dvpad] */
    uint32_t *k_dpairs, *v_dpairs;  /* key tile paired along the head dim, [BN][D/2], [BN][Dv/2] */
    uint32_t *k_rpairs;             /* key tile with keys 2j and 2j+1 paired, [BN/2][dpad] */
    uint32_t *p_rows, *ds_rows;     /* P^T and dS^T rounded to bf16, [BN][BM/2] words (rows as bf16) */
    uint32_t *ds_kpairs;            /* dS^T with keys 2j and 2j+1 paired, [BN/2][BM] */
    /* both */
    float *lse2, *delta;        /* per head [sqp] */
    float *dq;                  /* per head [sqp][dpad] (this unit's share of dQ) */
    float *dk, *dv;             /* key tile gradients [BN][dpad], [BN][dvpad] */
    float *s, *pt, *pd, *dpt, *cg; /* [BN][BM] tiles: S^T, P^T, dropped P^T, dP^T then dS^T, softcap factor */
    float *row;                 /* widened rows: dO and O (Delta) */
    int32_t *lo, *hi, *lo_rel, *hi_rel, *head, *qrow;
} bwd_scratch;

/* Sizes in 4-byte words of each piece, in the order bwd_scratch_layout hands
 * them out; the operands of the other form get none. */
static size_t bwd_scratch_layout(const fa_problem *p, const bwd_dims *d, int own_dq, int bf16, bwd_scratch *w, char *base) {
    size_t G = (size_t)d->G, sqp = (size_t)d->sqp, bm = CPU_BM, bn = CPU_BN;
    size_t D = (size_t)p->D, Dv = (size_t)p->Dv, dpad = (size_t)d->dpad, dvpad = (size_t)d->dvpad;
    size_t Dp = (D + 1) / 2, Dvp = (Dv + 1) / 2;
    size_t f = bf16 ? 0 : 1, h = bf16 ? 1 : 0; /* f32 pieces, pair pieces */
    size_t sizes[] = {/* f32 operands */
                      f * G * sqp * D, f * G * sqp * dpad, f * G * sqp * Dv, f * G * sqp * dvpad, f * bn * dpad, f * bn * dvpad,
                      /* pair operands */
                      h * G * sqp * Dp, h * G * sqp * Dvp, h * G * sqp / 2 * dpad, h * G * sqp / 2 * dvpad,
                      h * bn * Dp, h * bn * Dvp, h * bn / 2 * dpad, h * bn * bm / 2, h * bn * bm / 2, h * bn / 2 * bm,
                      /* both */
                      G * sqp, G * sqp, own_dq ? G * sqp * dpad : 0, bn * dpad, bn * dvpad,
                      bn * bm, bn * bm, bn * bm, bn * bm, bn * bm, 2 * Dv + 16,
                      bm, bm, bm, bm, bm, bm};
    float **fl[] = {&w->qt, &w->qn, &w->dot, &w->don, &w->kt, &w->vt};
    uint32_t **pr[] = {&w->q_dpairs, &w->do_dpairs, &w->q_rpairs, &w->do_rpairs, &w->k_dpairs, &w->v_dpairs,
                       &w->k_rpairs, &w->p_rows, &w->ds_rows, &w->ds_kpairs};
    float **fl2[] = {&w->lse2, &w->delta, &w->dq, &w->dk, &w->dv, &w->s, &w->pt, &w->pd, &w->dpt, &w->cg, &w->row};
    int32_t **in[] = {&w->lo, &w->hi, &w->lo_rel, &w->hi_rel, &w->head, &w->qrow};
    const size_t n1 = sizeof fl / sizeof fl[0], n2 = n1 + sizeof pr / sizeof pr[0], n3 = n2 + sizeof fl2 / sizeof fl2[0];
    size_t total = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
        if (base) {
            void *at = base + total;
            if (k < n1) *fl[k] = at;
            else if (k < n2) *pr[k - n1] = at;
            else if (k < n3) *fl2[k - n2] = at;
            else *in[k - n3] = at;
        }
        total += cpu_align_up(sizes[k] * 4);
    }
    return total;
}

typedef struct bwd_job {
    const fa_problem *p;
    const cpu_kernels *kr;
    int bf16;        /* bf16 pair operands, else f32 */
    bwd_dims d;
    char *scratch;
    size_t scratch_bytes;
    float *dq_parts; /* nchunk > 1: [B][Hk][nchunk][G][sqp][dpad] */
} bwd_job;

static const void *elem(const fa_view *v, fa_dtype t, int64_t off) {
    return (const char *)v->data + off * (int64_t)fa_dtype_size(t);
}

/* lse in the log2 domain and Delta = rowsum(dO * O) of query row i of head h. */
static void row_stats(const bwd_job *job, bwd_scratch *w, int64_t b, int64_t h, int64_t i, float *lse2, float *delta) {
    const fa_problem *p = job->p;
    float lse = p->lse[fa_lse_offset(p, b, h, i)];
    *lse2 = lse == -INFINITY ? INFINITY : lse * LOG2E; /* a row with no key keeps P = 0 */
    float *dorow = w->row, *orow = w->row + p->Dv + 8;
    cpu_load_row_f32(job->kr, p->dtype, elem(&p->dout, p->dtype, fa_q_offset(p, &p->dout, b, i, h)), dorow, p->Dv);
    cpu_load_row_f32(job->kr, p->dtype, elem(&p->out, p->dtype, fa_q_offset(p, &p->out, b, i, h)), orow, p->Dv);
    float acc = 0.0f;
    for (int64_t k = 0; k < p->Dv; ++k) acc += orow[k] * dorow[k];
    *delta = acc;
}

/* Packs Q, dO (both layouts), lse and Delta of every head of the group. */
static void prepare_queries(const bwd_job *job, bwd_scratch *w, int64_t b, int64_t kvh, int64_t sq) {
    const fa_problem *p = job->p;
    const bwd_dims *d = &job->d;
    const int64_t D = p->D, Dv = p->Dv, Dp = (D + 1) / 2, Dvp = (Dv + 1) / 2;
    for (int64_t g = 0; g < d->G; ++g) {
        int64_t h = kvh * d->G + g;
        float *lse2 = w->lse2 + g * d->sqp, *delta = w->delta + g * d->sqp;
        for (int64_t i = sq; i < d->sqp; ++i) { /* padding rows: P = 0 */
            lse2[i] = INFINITY;
            delta[i] = 0.0f;
        }
        for (int64_t i = 0; i < sq; ++i) row_stats(job, w, b, h, i, lse2 + i, delta + i);
        if (job->bf16) {
            uint32_t *qt = w->q_dpairs + g * d->sqp * Dp, *dot = w->do_dpairs + g * d->sqp * Dvp;
            uint32_t *qr = w->q_rpairs + g * d->sqp / 2 * d->dpad, *dor = w->do_rpairs + g * d->sqp / 2 * d->dvpad;
            memset(qt, 0, (size_t)(d->sqp * Dp) * 4);
            memset(dot, 0, (size_t)(d->sqp * Dvp) * 4);
            memset(qr, 0, (size_t)(d->sqp / 2 * d->dpad) * 4);
            memset(dor, 0, (size_t)(d->sqp / 2 * d->dvpad) * 4);
            for (int64_t i = 0; i < sq; i += 2) {
                const uint16_t *q0 = elem(&p->q, p->dtype, fa_q_offset(p, &p->q, b, i, h));
                const uint16_t *o0 = elem(&p->dout, p->dtype, fa_q_offset(p, &p->dout, b, i, h));
                const uint16_t *q1 = i + 1 < sq ? elem(&p->q, p->dtype, fa_q_offset(p, &p->q, b, i + 1, h)) : NULL;
                const uint16_t *o1 = i + 1 < sq ? elem(&p->dout, p->dtype, fa_q_offset(p, &p->dout, b, i + 1, h)) : NULL;
                job->kr->pair_bf16(q0, q1, qr + i / 2 * d->dpad, D);
                job->kr->pair_bf16(o0, o1, dor + i / 2 * d->dvpad, Dv);
                for (int64_t r = i; r < i + 2 && r < sq; ++r) { /* the transposed forms, column r % BM of block r / BM */
                    int64_t blk = r / CPU_BM, c = r % CPU_BM;
                    cpu_pair_row(r == i ? q0 : q1, D, qt + blk * Dp * CPU_BM + c, CPU_BM);
                    cpu_pair_row(r == i ? o0 : o1, Dv, dot + blk * Dvp * CPU_BM + c, CPU_BM);
                }
            }
            continue;
        }
        float *qt = w->qt + g * d->sqp * D, *qn = w->qn + g * d->sqp * d->dpad;
        float *dot = w->dot + g * d->sqp * Dv, *don = w->don + g * d->sqp * d->dvpad;
        memset(qt, 0, (size_t)(d->sqp * D) * 4);
        memset(qn, 0, (size_t)(d->sqp * d->dpad) * 4);
        memset(dot, 0, (size_t)(d->sqp * Dv) * 4);
        memset(don, 0, (size_t)(d->sqp * d->dvpad) * 4);
        for (int64_t i = 0; i < sq; ++i) {
            int64_t blk = i / CPU_BM, c = i % CPU_BM;
            cpu_load_row_f32(job->kr, p->dtype, elem(&p->q, p->dtype, fa_q_offset(p, &p->q, b, i, h)), qn + i * d->dpad, D);
            for (int64_t k = 0; k < D; ++k) qt[(blk * D + k) * CPU_BM + c] = qn[i * d->dpad + k];
            cpu_load_row_f32(job->kr, p->dtype, elem(&p->dout, p->dtype, fa_q_offset(p, &p->dout, b, i, h)), don + i * d->dvpad, Dv);
            for (int64_t k = 0; k < Dv; ++k) dot[(blk * Dv + k) * CPU_BM + c] = don[i * d->dvpad + k];
        }
    }
}

/* Loads key tile rows j0 .. j0 + nj of K and V in the operand form of the job, with zero padding. */
static void load_key_tile(const bwd_job *job, bwd_scratch *w, int64_t b, int64_t kvh, int64_t j0, int64_t nj) {
    const fa_problem *p = job->p;
    const bwd_dims *d = &job->d;
    if (job->bf16) {
        const int64_t Dp = (p->D + 1) / 2, Dvp = (p->Dv + 1) / 2;
        memset(w->k_dpairs, 0, (size_t)(CPU_BN * Dp) * 4);
        memset(w->v_dpairs, 0, (size_t)(CPU_BN * Dvp) * 4);
        memset(w->k_rpairs, 0, (size_t)(CPU_BN / 2 * d->dpad) * 4);
        for (int64_t j = 0; j < nj; j += 2) {
            const uint16_t *k0 = elem(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0 + j, kvh));
            const uint16_t *k1 = j + 1 < nj ? elem(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0 + j + 1, kvh)) : NULL;
            job->kr->pair_bf16(k0, k1, w->k_rpairs + j / 2 * d->dpad, p->D);
            for (int64_t r = j; r < j + 2 && r < nj; ++r) {
                cpu_pair_row(r == j ? k0 : k1, p->D, w->k_dpairs + r * Dp, 1);
                cpu_pair_row(elem(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + r, kvh)), p->Dv, w->v_dpairs + r * Dvp, 1);
            }
        }
        return;
    }
    memset(w->kt, 0, (size_t)(CPU_BN * d->dpad) * 4);
    memset(w->vt, 0, (size_t)(CPU_BN * d->dvpad) * 4);
    for (int64_t j = 0; j < nj; ++j) {
        cpu_load_row_f32(job->kr, p->dtype, elem(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0 + j, kvh)), w->kt + j * d->dpad, p->D);
        cpu_load_row_f32(job->kr, p->dtype, elem(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + j, kvh)), w->vt + j * d->dvpad, p->Dv);
    }
}

static void store_row(const bwd_job *job, const fa_view *v, int64_t off, const float *src, int64_t n, float scale) {
    const fa_problem *p = job->p;
    cpu_store_row(job->kr, p->dtype, (char *)v->data + off * (int64_t)fa_dtype_size(p->dtype), src, n, scale);
}

/* One query block against the current key tile. */
static void block_step(const bwd_job *job, bwd_scratch *w, int64_t b, int64_t g, int64_t sq, int64_t sk,
                       int64_t i0, int64_t j0, int64_t nj) {
    const fa_problem *p = job->p;
    const bwd_dims *d = &job->d;
    const cpu_kernels *kr = job->kr;
    const int64_t ni = sq - i0 < CPU_BM ? sq - i0 : CPU_BM, ncols = cpu_round_up(ni, CPU_LANES);
    const int64_t head = w->head[0]; /* the query head, set by the caller */
    int64_t lo_max = 0, hi_min = sk, any = 0, kmax = j0;
    for (int64_t c = 0; c < ncols; ++c) {
        int64_t lo = 0, hi = 0;
        w->head[c] = (int32_t)head;
        w->qrow[c] = (int32_t)(i0 + (c < ni ? c : 0));
        if (c < ni) {
            fa_key_range(p, sq, sk, i0 + c, &lo, &hi);
            if (lo < j0 + nj && hi > j0 && lo < hi) any = 1;
            if (lo < hi && hi > kmax) kmax = hi;
            if (lo > lo_max) lo_max = lo;
            if (hi < hi_min) hi_min = hi;
        }
        w->lo[c] = (int32_t)lo;
        w->hi[c] = (int32_t)hi;
    }
    if (!any) return; /* no row of the block sees this tile */
    /* Keys past the block's last visible one (the causal diagonal's tile) are
     * left out, rounded up to whole micro-tile rows; the mask covers the rest. */
    if (kmax - j0 < nj) nj = cpu_round_up(kmax - j0, CPU_MR) < nj ? cpu_round_up(kmax - j0, CPU_MR) : nj;

    const float *lse2 = w->lse2 + g * d->sqp + i0, *delta = w->delta + g * d->sqp + i0;
    float *dq = w->dq + (g * d->sqp + i0) * d->dpad;
    const int64_t blk = g * d->sqp / CPU_BM + i0 / CPU_BM; /* the block's panel of the packed Q^T and dO^T */
    const int64_t Dp = (p->D + 1) / 2, Dvp = (p->Dv + 1) / 2;

    /* S^T = K Q^T and P^T */
    if (job->bf16)
        cpu_gemm_bf16(kr, nj, ncols, Dp, w->k_dpairs, Dp, 1, w->q_dpairs + blk * Dp * CPU_BM, CPU_BM, w->s, CPU_BM, 0, NULL);
    else
        cpu_gemm_f32(kr, nj, ncols, p->D, w->kt, d->dpad, 1, w->qt + blk * p->D * CPU_BM, CPU_BM, w->s, CPU_BM, 0, NULL);
    float c = cpu_score_options(p, b, sq, sk, j0, nj, CPU_BM, ni, w->head, w->qrow, w->s, p->softcap > 0.0f ? w->cg : NULL);
    int full = lo_max <= j0 && hi_min >= j0 + nj;
    if (!full)
        for (int64_t col = 0; col < ncols; ++col) {
            int64_t lo = w->lo[col] - j0, hi = w->hi[col] - j0;
            w->lo_rel[col] = (int32_t)(lo < 0 ? 0 : lo > nj ? nj : lo);
            w->hi_rel[col] = (int32_t)(hi < 0 ? 0 : hi > nj ? nj : hi);
        }
    kr->exp_tile(nj, ncols, w->s, CPU_BM, c, full ? NULL : w->lo_rel, w->hi_rel, lse2, w->pt, CPU_BM);

    /* dP^T = V dO^T */
    if (job->bf16)
        cpu_gemm_bf16(kr, nj, ncols, Dvp, w->v_dpairs, Dvp, 1, w->do_dpairs + blk * Dvp * CPU_BM, CPU_BM, w->dpt, CPU_BM, 0, NULL);
    else
        cpu_gemm_f32(kr, nj, ncols, p->Dv, w->vt, d->dvpad, 1, w->dot + blk * p->Dv * CPU_BM, CPU_BM, w->dpt, CPU_BM, 0, NULL);

    /* dV += P_dropped^T dO; with dropout dP becomes the gradient of the undropped P */
    const float *pv = w->pt;
    if (p->dropout_p > 0.0f) {
        for (int64_t j = 0; j < nj; ++j) memcpy(w->pd + j * CPU_BM, w->pt + j * CPU_BM, (size_t)ncols * 4);
        cpu_apply_dropout(p, b, j0, nj, CPU_BM, ni, w->head, w->qrow, w->pd);
        cpu_apply_dropout(p, b, j0, nj, CPU_BM, ni, w->head, w->qrow, w->dpt);
        pv = w->pd;
    }
    /* pairs along the block's query rows: ncols is even, and the padding columns hold zeros */
    const int64_t ipairs = (ni + 1) / 2;
    if (job->bf16) {
        for (int64_t j = 0; j < nj; ++j) kr->narrow_bf16(pv + j * CPU_BM, 1.0f, (uint16_t *)(void *)(w->p_rows + j * CPU_BM / 2), ncols);
        cpu_gemm_bf16(kr, nj, d->dvpad, ipairs, w->p_rows, CPU_BM / 2, 1, w->do_rpairs + (g * d->sqp + i0) / 2 * d->dvpad,
                      d->dvpad, w->dv, d->dvpad, 1, NULL);
    } else {
        cpu_gemm_f32(kr, nj, d->dvpad, ni, pv, CPU_BM, 1, w->don + (g * d->sqp + i0) * d->dvpad, d->dvpad, w->dv, d->dvpad, 1, NULL);
    }

    /* dS^T = P^T (dP^T - Delta), times the softcap derivative */
    for (int64_t j = 0; j < nj; ++j) {
        float *ds = w->dpt + j * CPU_BM;
        const float *pr = w->pt + j * CPU_BM;
        for (int64_t col = 0; col < ncols; ++col) ds[col] = pr[col] * (ds[col] - delta[col]);
        if (p->softcap > 0.0f) {
            const float *cg = w->cg + j * CPU_BM;
            for (int64_t col = 0; col < ni; ++col) ds[col] *= cg[col];
        }
    }
    /* dK += dS^T Q;  dQ += dS K */
    if (job->bf16) {
        for (int64_t j = 0; j < nj; j += 2) {
            kr->narrow_bf16(w->dpt + j * CPU_BM, 1.0f, (uint16_t *)(void *)(w->ds_rows + j * CPU_BM / 2), ncols);
            if (j + 1 < nj)
                kr->narrow_bf16(w->dpt + (j + 1) * CPU_BM, 1.0f, (uint16_t *)(void *)(w->ds_rows + (j + 1) * CPU_BM / 2), ncols);
            /* the same rounding, keys paired; an odd last key gets a zero partner */
            kr->pair_f32(w->dpt + j * CPU_BM, j + 1 < nj ? w->dpt + (j + 1) * CPU_BM : NULL, w->ds_kpairs + j / 2 * CPU_BM, ncols);
        }
        cpu_gemm_bf16(kr, nj, d->dpad, ipairs, w->ds_rows, CPU_BM / 2, 1, w->q_rpairs + (g * d->sqp + i0) / 2 * d->dpad,
                      d->dpad, w->dk, d->dpad, 1, NULL);
        cpu_gemm_bf16(kr, ni, d->dpad, (nj + 1) / 2, w->ds_kpairs, 1, CPU_BM, w->k_rpairs, d->dpad, dq, d->dpad, 1, NULL);
    } else {
        cpu_gemm_f32(kr, nj, d->dpad, ni, w->dpt, CPU_BM, 1, w->qn + (g * d->sqp + i0) * d->dpad, d->dpad, w->dk, d->dpad, 1, NULL);
        cpu_gemm_f32(kr, ni, d->dpad, nj, w->dpt, 1, CPU_BM, w->kt, d->dpad, dq, d->dpad, 1, NULL);
    }
}

static void bwd_unit_task(void *arg, int64_t t, int worker) {
    const bwd_job *job = arg;
    const fa_problem *p = job->p;
    const bwd_dims *d = &job->d;
    int64_t chunk = t % d->nchunk, r = t / d->nchunk;
    int64_t kvh = r % p->Hk, b = r / p->Hk;
    int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    bwd_scratch w;
    bwd_scratch_layout(p, d, d->nchunk == 1, job->bf16, &w, job->scratch + (size_t)worker * job->scratch_bytes);
    if (d->nchunk > 1) w.dq = job->dq_parts + ((b * p->Hk + kvh) * d->nchunk + chunk) * d->G * d->sqp * d->dpad;
    memset(w.dq, 0, (size_t)(d->G * d->sqp * d->dpad) * 4);

    int64_t kb = chunk * d->chunk, ke = kb + d->chunk < sk ? kb + d->chunk : sk;
    if (kb < ke && sq > 0) prepare_queries(job, &w, b, kvh, sq);
    for (int64_t j0 = kb; j0 < ke; j0 += CPU_BN) {
        int64_t nj = ke - j0 < CPU_BN ? ke - j0 : CPU_BN;
        load_key_tile(job, &w, b, kvh, j0, nj);
        memset(w.dk, 0, (size_t)(CPU_BN * d->dpad) * 4);
        memset(w.dv, 0, (size_t)(CPU_BN * d->dvpad) * 4);
        for (int64_t g = 0; g < d->G; ++g) {
            w.head[0] = (int32_t)(kvh * d->G + g);
            for (int64_t i0 = 0; i0 < sq; i0 += CPU_BM) block_step(job, &w, b, g, sq, sk, i0, j0, nj);
        }
        for (int64_t j = 0; j < nj; ++j) {
            store_row(job, &p->dk, fa_k_offset(p, &p->dk, b, j0 + j, kvh), w.dk + j * d->dpad, p->D, p->scale);
            store_row(job, &p->dv, fa_k_offset(p, &p->dv, b, j0 + j, kvh), w.dv + j * d->dvpad, p->Dv, 1.0f);
        }
    }
    if (d->nchunk == 1)
        for (int64_t g = 0; g < d->G; ++g)
            for (int64_t i = 0; i < sq; ++i)
                store_row(job, &p->dq, fa_q_offset(p, &p->dq, b, i, kvh * d->G + g), w.dq + (g * d->sqp + i) * d->dpad, p->D,
                          p->scale);
}

/* dQ of one (sequence, kv head) from its chunks, summed in chunk order. */
static void bwd_reduce_task(void *arg, int64_t t, int worker) {
    const bwd_job *job = arg;
    const fa_problem *p = job->p;
    const bwd_dims *d = &job->d;
    int64_t kvh = t % p->Hk, b = t / p->Hk, sq = fa_seqlen_q(p, b);
    float *row = (float *)(void *)(job->scratch + (size_t)worker * job->scratch_bytes);
    const size_t part = (size_t)(d->G * d->sqp * d->dpad);
    const float *base = job->dq_parts + (size_t)((b * p->Hk + kvh) * d->nchunk) * part;
    for (int64_t g = 0; g < d->G; ++g)
        for (int64_t i = 0; i < sq; ++i) {
            size_t off = (size_t)((g * d->sqp + i) * d->dpad);
            for (int64_t k = 0; k < p->D; ++k) {
                float acc = 0.0f;
                for (int c = 0; c < d->nchunk; ++c) acc += base[c * part + off + k];
                row[k] = acc;
            }
            store_row(job, &p->dq, fa_q_offset(p, &p->dq, b, i, kvh * d->G + g), row, p->D, p->scale);
        }
}

size_t cpu_backward_workspace(const fa_problem *p, const fa_exec *x) {
    bwd_dims d = bwd_dims_of(p, x);
    bwd_scratch w;
    size_t per = cpu_align_up(bwd_scratch_layout(p, &d, d.nchunk == 1, cpu_use_bf16(p, cpu_kernels_select()), &w, NULL));
    size_t total = per * (size_t)x->num_threads + CPU_ALIGN;
    if (d.nchunk > 1)
        total += cpu_align_up((size_t)(p->B * p->Hk * d.nchunk * d.G * d.sqp * d.dpad) * 4);
    return total;
}

fa_status cpu_backward(const fa_problem *p, const fa_exec *x) {
    bwd_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.kr = cpu_kernels_select();
    job.bf16 = cpu_use_bf16(p, job.kr);
    job.d = bwd_dims_of(p, x);
    if (!x->workspace || x->workspace_bytes < cpu_backward_workspace(p, x))
        return fa_set_error(FA_ERR_WORKSPACE, "workspace: the CPU backward needs %zu bytes, got %zu",
                            cpu_backward_workspace(p, x), x->workspace_bytes);
    bwd_scratch w;
    job.scratch_bytes = cpu_align_up(bwd_scratch_layout(p, &job.d, job.d.nchunk == 1, job.bf16, &w, NULL));
    cpu_arena a = {(char *)(uintptr_t)cpu_align_up((size_t)(uintptr_t)x->workspace)};
    job.scratch = cpu_take(&a, job.scratch_bytes * (size_t)x->num_threads);
    if (job.d.nchunk > 1)
        job.dq_parts = cpu_take(&a, (size_t)(p->B * p->Hk * job.d.nchunk * job.d.G * job.d.sqp * job.d.dpad) * 4);
    int64_t units = p->B * p->Hk * job.d.nchunk;
    if (cpu_parallel_for(units, x->num_threads, bwd_unit_task, &job) != 0)
        return fa_set_error(FA_ERR_INTERNAL, "CPU backend: could not start worker threads");
    if (job.d.nchunk > 1) cpu_parallel_for(p->B * p->Hk, x->num_threads, bwd_reduce_task, &job);
    return FA_OK;
}

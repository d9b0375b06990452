/*
 * CPU forward: tiled online softmax, queries along the SIMD lanes.
 *
 * A block is up to CPU_BM query rows of one sequence that share a kv head
 * (rows of several query heads of a GQA group when the sequence is short,
 * so a decode step reads each key once for the whole group). A work item is
 * up to CPU_QGROUP consecutive blocks of one kv head, or with such short
 * sequences one block of each of up to CPU_QGROUP kv heads, and one chunk
 * of the keys; each key tile of a kv head is copied once and used by every
 * block of that head. For every tile of CPU_BN keys and every block:
 *
 *     S^T = K_tile . Q^T          (cpu_gemm: broadcast K, Q^T packed once)
 *     P^T, m, l, alpha = online softmax of S^T, column by column
 *     O^T = O^T * alpha + V^T . P^T   (one micro-kernel pass)
 *
 * and at the end out = O / l, lse = m + log l. Key tiles outside every row's
 * visible range are never visited; only tiles that cut a row's range are
 * masked. With several key chunks (split-KV) the partial (O, lse) pairs go
 * to the workspace and are merged exactly afterwards.
 */
#include <math.h>
#include <string.h>

#include "convert.h"
#include "cpu_attn.h"
#include "cpu_pool.h"

#define LN2 0.69314718055994531f

/* How the rows of a sequence are cut into blocks. */
typedef struct fwd_geometry {
    int64_t rows_per_head; /* query rows of one head in a block */
    int64_t heads_per_block;
    int64_t head_groups;   /* blocks needed to cover the G heads of a kv head */
    int64_t q_blocks;      /* blocks along the (longest) query sequence */
    int64_t q_items;       /* groups of CPU_QGROUP blocks: one work item each */
    int64_t kv_per_item;   /* kv heads of a work item (several only with one block per kv head) */
    int64_t kv_items;      /* groups of kv_per_item kv heads */
    int nsplit;            /* key chunks */
    int64_t chunk;         /* keys per chunk, a multiple of CPU_BN */
} fwd_geometry;

static fwd_geometry fwd_geometry_of(const fa_problem *p, int nsplit) {
    fwd_geometry g;
    int64_t G = p->Hq / p->Hk;
    int64_t sq = p->Sq > 0 ? p->Sq : 1;
    g.rows_per_head = sq < CPU_BM ? sq : CPU_BM;
    g.heads_per_block = 1;
    if (sq <= CPU_BM / 2) { /* short queries: stack the group's heads into one block */
        g.heads_per_block = CPU_BM / sq;
        if (g.heads_per_block > G) g.heads_per_block = G;
    }
    g.head_groups = (G + g.heads_per_block - 1) / g.heads_per_block;
    g.q_blocks = (sq + g.rows_per_head - 1) / g.rows_per_head;
    g.q_items = (g.q_blocks + CPU_QGROUP - 1) / CPU_QGROUP;
    /* Short queries (decode): one item takes the blocks of up to CPU_QGROUP kv
     * heads and walks their keys together, so it reads the cache rows of
     * neighbouring heads (adjacent in memory) back to back. */
    g.kv_per_item = 1;
    if (g.heads_per_block > 1 && g.head_groups == 1) g.kv_per_item = p->Hk < CPU_QGROUP ? p->Hk : CPU_QGROUP;
    g.kv_items = (p->Hk + g.kv_per_item - 1) / g.kv_per_item;
    g.nsplit = nsplit;
    int64_t sk = p->Sk > 0 ? p->Sk : 1;
    g.chunk = cpu_round_up((sk + nsplit - 1) / nsplit, CPU_BN);
    return g;
}

static int64_t fwd_items(const fa_problem *p, const fwd_geometry *g) {
    return g->q_items * p->B * g->kv_items * g->head_groups;
}

int cpu_forward_splits(const fa_problem *p, const fa_exec *x, int requested) {
    int64_t tiles = (p->Sk + CPU_BN - 1) / CPU_BN;
    if (tiles < 1) tiles = 1;
    int64_t n = requested;
    if (n <= 0) {
        /* Enough items for every thread (twice over, for balance), but never
         * chunks shorter than a few tiles. */
        fwd_geometry g = fwd_geometry_of(p, 1);
        int64_t items = fwd_items(p, &g);
        n = 1;
        if (items < 2 * (int64_t)x->num_threads) n = (2 * (int64_t)x->num_threads + items - 1) / items;
        if (n > tiles / 4) n = tiles / 4;
    }
    if (n > tiles) n = tiles;
    if (n < 1) n = 1;
    return (int)n;
}

/* One block of query rows: its packed queries, accumulator and running softmax state. */
typedef struct q_block {
    int64_t nrows, ncols;       /* real rows; columns padded to the lane count */
    int64_t kmin, kmax;         /* union of the rows' visible keys */
    int64_t lo_max, hi_min;     /* intersection: tiles inside it need no mask */
    void *qt;                   /* Q^T: f32 [D][ncols] or bf16 pairs [D/2][ncols] */
    float *ot;                  /* O^T accumulator [Dv][ncols] */
    float *m, *l, *alpha;
    int32_t *lo, *hi, *head, *row;
} q_block;

/* Per-thread scratch: CPU_QGROUP blocks and the key tile they share. */
typedef struct fwd_scratch {
    q_block blk[CPU_QGROUP];
    float *s;          /* S^T, then P^T: [CPU_BN][CPU_BM] */
    uint32_t *pp;      /* P^T as bf16 pairs [CPU_BN/2][CPU_BM] */
    void *kbuf;        /* packed K tile: f32 [BN][D] or bf16 pairs [BN][D/2] */
    void *vbuf;        /* packed V tile: f32 [BN][v_rs] or bf16 pairs [BN/2][v_rs] */
    int64_t v_rs;      /* its row stride: Dv plus a line, so consecutive rows fall in different L1 sets */
    const void *ka;    /* the K tile the score kernel reads (kbuf, or K in place) */
    int64_t ka_rs;     /* its row stride in elements (f32) or words (pairs) */
    const uint16_t *kraw, *vraw; /* with job->rows_in_place: the tile's first K and V rows, k.ss / v.ss apart */
    int32_t *lo_rel, *hi_rel;
} fwd_scratch;

static size_t fwd_scratch_layout(const fa_problem *p, fwd_scratch *w, char *base) {
    size_t bm = CPU_BM, bn = CPU_BN, d = (size_t)p->D, dv = (size_t)p->Dv;
    cpu_arena a = {base};
    fwd_scratch tmp;
    if (!w) w = &tmp;
    for (int k = 0; k < CPU_QGROUP; ++k) {
        q_block *q = &w->blk[k];
        q->qt = cpu_take(&a, d * bm * 4);
        /* O^T [Dv][BM], or on the few-row path O [rows][Dv rounded up to 16] (larger when Dv < 8) */
        size_t few = (size_t)CPU_FEW_ROWS * (size_t)cpu_round_up(p->Dv, CPU_LANES);
        q->ot = cpu_take(&a, (dv * bm > few ? dv * bm : few) * 4);
        q->m = cpu_take(&a, bm * 4);
        q->l = cpu_take(&a, bm * 4);
        q->alpha = cpu_take(&a, bm * 4);
        q->lo = cpu_take(&a, bm * 4);
        q->hi = cpu_take(&a, bm * 4);
        q->head = cpu_take(&a, bm * 4);
        q->row = cpu_take(&a, bm * 4);
    }
    w->s = cpu_take(&a, bn * bm * 4);
    w->pp = cpu_take(&a, bn / 2 * bm * 4);
    w->kbuf = cpu_take(&a, bn * (d + 1) * 4);
    w->vbuf = cpu_take(&a, (bn * (dv + CPU_LANES) + 16) * 4); /* slack: padded-width reads of the last row */
    w->v_rs = (int64_t)dv + CPU_LANES;
    w->lo_rel = cpu_take(&a, bm * 4);
    w->hi_rel = cpu_take(&a, bm * 4);
    return (size_t)(a.next - base);
}

static size_t fwd_scratch_bytes(const fa_problem *p) {
    return fwd_scratch_layout(p, NULL, NULL);
}

typedef struct fwd_job {
    const fa_problem *p;
    const cpu_kernels *kr;
    fa_dtype out_dtype;   /* the output's: q's, or bf16 for float8 inputs */
    int bf16;             /* bf16 pair kernels, else f32 */
    int few_rows;         /* every block has at most CPU_FEW_ROWS rows and takes the few-row path:
                             Q [rows][D] and O [rows][dvpad], head dim along the lanes */
    int rows_in_place;    /* ... and reads a bf16 or f16 cache in place (no tile copy), with: */
    cpu_rowdot_half_fn rowdot_half;
    cpu_gemm_f32_halfb_fn gemm_halfb;
    fwd_geometry g;
    char *scratch;        /* per-thread scratch, scratch_bytes apart */
    size_t scratch_bytes;
    float *part_o;        /* split-KV partials [nsplit][B][Hq][Sq][Dv] */
    float *part_lse;      /* [nsplit][B][Hq][Sq] */
} fwd_job;

static const char *row_ptr(const fa_view *v, fa_dtype t, int64_t off) {
    return (const char *)v->data + off * (int64_t)fa_dtype_size(t);
}

/* Row `off` of q, k or v (view v) as n floats: widened, and for float8
 * inputs times its (sequence b, kv head kvh) descale (NULL: 1), which makes
 * it the exact real value the caller quantised. */
static void load_row(const fwd_job *job, const fa_view *v, int64_t off, const float *descale, int64_t b, int64_t kvh,
                     float *dst, int64_t n) {
    const fa_problem *p = job->p;
    cpu_load_row_f32(job->kr, p->dtype, row_ptr(v, p->dtype, off), dst, n);
    if (descale) {
        const float f = descale[b * p->Hk + kvh]; /* read once: dst may alias it as far as the compiler knows */
        for (int64_t i = 0; i < n; ++i) dst[i] *= f;
    }
}

/* Packs the block's queries transposed: column c is query row (head[c], row[c]). */
static void pack_q(const fwd_job *job, q_block *q, int64_t b, float *tmp) {
    const fa_problem *p = job->p;
    const int64_t ncols = q->ncols;
    if (job->bf16) {
        int64_t dp = (p->D + 1) / 2;
        uint32_t *qt = q->qt;
        for (int64_t c = 0; c < ncols; ++c) {
            if (c >= q->nrows) {
                for (int64_t k = 0; k < dp; ++k) qt[k * ncols + c] = 0;
                continue;
            }
            const uint16_t *src = (const uint16_t *)row_ptr(&p->q, p->dtype, fa_q_offset(p, &p->q, b, q->row[c], q->head[c]));
            cpu_pair_row(src, p->D, qt + c, ncols);
        }
    } else {
        float *qt = q->qt;
        for (int64_t c = 0; c < ncols; ++c) {
            if (c >= q->nrows) {
                for (int64_t d = 0; d < p->D; ++d) qt[d * ncols + c] = 0.0f;
                continue;
            }
            load_row(job, &p->q, fa_q_offset(p, &p->q, b, q->row[c], q->head[c]), p->q_descale, b,
                     fa_kv_head(p, q->head[c]), tmp, p->D);
            for (int64_t d = 0; d < p->D; ++d) qt[d * ncols + c] = tmp[d];
        }
    }
}

/* Loads the key tile shared by the group's blocks. K and V rows are copied
 * into contiguous buffers: the copy is shared by CPU_QGROUP blocks, and rows
 * that sit a power of two apart in the tensor would otherwise collide in
 * the same L1 sets. */
static void load_tile(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t kvh, int64_t j0, int64_t nj) {
    const fa_problem *p = job->p;
    if (job->bf16) {
        int64_t dp = (p->D + 1) / 2;
        const char *k0 = row_ptr(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0, kvh));
        if (!p->block_table && p->D % 2 == 0 && p->k.ss % 2 == 0 && ((uintptr_t)k0 & 3) == 0) {
            w->ka = k0; /* rows are whole bf16 pairs: read in place */
            w->ka_rs = p->k.ss / 2;
        } else {
            uint32_t *kb = w->kbuf;
            for (int64_t j = 0; j < nj; ++j) {
                const uint16_t *src = (const uint16_t *)row_ptr(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0 + j, kvh));
                cpu_pair_row(src, p->D, kb + j * dp, 1);
            }
            w->ka = kb;
            w->ka_rs = dp;
        }
        uint32_t *vb = w->vbuf;
        for (int64_t k = 0; k < (nj + 1) / 2; ++k) {
            const uint16_t *r0 = (const uint16_t *)row_ptr(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + 2 * k, kvh));
            const uint16_t *r1 = 2 * k + 1 < nj ? (const uint16_t *)row_ptr(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + 2 * k + 1, kvh)) : NULL;
            job->kr->pair_bf16(r0, r1, vb + k * w->v_rs, p->Dv); /* (v_j, v_j+1) pairs along the key axis */
        }
    } else {
        float *kb = w->kbuf, *vb = w->vbuf;
        for (int64_t j = 0; j < nj; ++j) {
            load_row(job, &p->k, fa_k_offset(p, &p->k, b, j0 + j, kvh), p->k_descale, b, kvh, kb + j * p->D, p->D);
            load_row(job, &p->v, fa_k_offset(p, &p->v, b, j0 + j, kvh), p->v_descale, b, kvh, vb + j * w->v_rs, p->Dv);
        }
        w->ka = kb;
        w->ka_rs = p->D;
    }
}

/* Asks for rows [j0, j0 + nj) of K (want_k) and V (want_v) of the next tile
 * while this one is computed: each row sits in its own page, where the
 * hardware prefetchers stop. Callers spread a tile's requests over its work:
 * a whole tile at once (~1500 lines) stalls on the few line-fill buffers. */
typedef struct tile_prefetch {
    int64_t b, kvh, j0, nj; /* the next tile; nj = 0 when there is none */
} tile_prefetch;

static void prefetch_rows(const fwd_job *job, const tile_prefetch *t, int64_t from, int64_t to, int want_k, int want_v) {
    const fa_problem *p = job->p;
    const int64_t es = (int64_t)fa_dtype_size(p->dtype);
    if (to > t->nj) to = t->nj;

    for (int64_t j = from; j < to; ++j) {
        if (want_k) {
            const char *kr = row_ptr(&p->k, p->dtype, fa_k_offset(p, &p->k, t->b, t->j0 + j, t->kvh));
            for (int64_t off = 0; off < p->D * es; off += 64) __builtin_prefetch(kr + off, 0, 2);
        }
        if (want_v) {
            const char *vr = row_ptr(&p->v, p->dtype, fa_k_offset(p, &p->v, t->b, t->j0 + j, t->kvh));
            for (int64_t off = 0; off < p->Dv * es; off += 64) __builtin_prefetch(vr + off, 0, 2);
        }
    }
}

/* S^T[j][c] = <k_{j0+j}, q_c> for the tile's nj keys. */
static void tile_scores(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t nj) {
    const fa_problem *p = job->p;
    if (job->bf16)
        cpu_gemm_bf16(job->kr, nj, q->ncols, (p->D + 1) / 2, w->ka, w->ka_rs, 1, q->qt, q->ncols, w->s, q->ncols, 0, NULL);
    else
        cpu_gemm_f32(job->kr, nj, q->ncols, p->D, w->ka, w->ka_rs, 1, q->qt, q->ncols, w->s, q->ncols, 0, NULL);
}

/* O^T += V_tile^T . P^T over the tile's nj keys. */
static void tile_update(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t nj) {
    const fa_problem *p = job->p;
    const int64_t ncols = q->ncols;
    if (job->bf16) {
        int64_t jp = (nj + 1) / 2;
        for (int64_t k = 0; k < jp; ++k)
            job->kr->pair_f32(w->s + 2 * k * ncols, 2 * k + 1 < nj ? w->s + (2 * k + 1) * ncols : NULL, w->pp + k * ncols, ncols);
        cpu_gemm_bf16(job->kr, p->Dv, ncols, jp, w->vbuf, 1, w->v_rs, w->pp, ncols, q->ot, ncols, 1, q->alpha);
    } else {
        cpu_gemm_f32(job->kr, p->Dv, ncols, nj, w->vbuf, 1, w->v_rs, w->s, ncols, q->ot, ncols, 1, q->alpha);
    }
}

/* Out = O / l and lse = m + log l for the block's rows, to the output or to a split's partial. */
static void finish_block(const fwd_job *job, q_block *q, int64_t b, int split, float *tmp) {
    const fa_problem *p = job->p;
    const int64_t ncols = q->ncols;
    /* element (row c, d) of O: transposed [Dv][ncols], or natural [rows][dvpad] */
    const int64_t d_stride = job->few_rows ? 1 : ncols, c_stride = job->few_rows ? cpu_round_up(p->Dv, CPU_LANES) : 1;
    for (int64_t c = 0; c < q->nrows; ++c) {
        int64_t h = q->head[c], i = q->row[c];
        const float *oc = q->ot + c * c_stride;
        float l = q->l[c];
        int empty = !(l > 0.0f); /* no visible key: out 0, lse -inf */
        float inv = empty ? 0.0f : 1.0f / l;
        float lse = empty ? -INFINITY : (q->m[c] + log2f(l)) * LN2;
        if (job->g.nsplit > 1) {
            int64_t idx = ((split * p->B + b) * p->Hq + h) * p->Sq + i;
            float *o = job->part_o + idx * p->Dv;
            for (int64_t d = 0; d < p->Dv; ++d) o[d] = empty ? 0.0f : oc[d * d_stride] * inv;
            job->part_lse[idx] = lse;
            continue;
        }
        int64_t off = fa_q_offset(p, &p->out, b, i, h);
        if (job->out_dtype == FA_F32) {
            float *o = (float *)p->out.data + off;
            for (int64_t d = 0; d < p->Dv; ++d) o[d] = empty ? 0.0f : oc[d * d_stride] * inv;
        } else { /* gather the row, then convert it in one pass */
            for (int64_t d = 0; d < p->Dv; ++d) tmp[d] = empty ? 0.0f : oc[d * d_stride] * inv;
            cpu_store_row(job->kr, job->out_dtype, (char *)p->out.data + off * (int64_t)fa_dtype_size(job->out_dtype), tmp,
                          p->Dv, 1.0f);
        }
        if (p->lse) p->lse[fa_lse_offset(p, b, h, i)] = lse;
    }
}

/* The scores of keys j0 .. j0 + nj in w->s (one column a row of the block) to
 * probabilities: the score options, the mask where some row's key range cuts
 * the tile, the online softmax (q->alpha: each row's rescale of O) and
 * dropout. */
static void scores_to_probs(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t b, int64_t j0, int64_t nj) {
    const fa_problem *p = job->p;
    const int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b), ncols = q->ncols;
    float c = cpu_score_options(p, b, sq, sk, j0, nj, ncols, q->nrows, q->head, q->row, w->s, NULL);
    int full = q->lo_max <= j0 && q->hi_min >= j0 + nj;
    if (!full)
        for (int64_t col = 0; col < ncols; ++col) {
            int64_t lo = q->lo[col] - j0, hi = q->hi[col] - j0;
            w->lo_rel[col] = (int32_t)(lo < 0 ? 0 : lo > nj ? nj : lo);
            w->hi_rel[col] = (int32_t)(hi < 0 ? 0 : hi > nj ? nj : hi);
        }
    job->kr->softmax_tile(nj, ncols, w->s, ncols, c, full ? NULL : w->lo_rel, w->hi_rel, q->m, q->l, q->alpha);
    if (p->dropout_p > 0.0f) cpu_apply_dropout(p, b, j0, nj, ncols, q->nrows, q->head, q->row, w->s);
}

/*
 * Blocks of at most CPU_FEW_ROWS rows (decode) would leave most SIMD lanes of
 * the transposed layout empty. They keep rows in registers instead and the
 * head dimension along the lanes: scores by cpu_rowdot (written transposed,
 * one key a row of the tile), the column softmax over them, and O += P V as a
 * gemm with P broadcast.
 */

static void pack_q_rows(const fwd_job *job, q_block *q, int64_t b) {
    const fa_problem *p = job->p;
    float *qn = q->qt;
    for (int64_t c = 0; c < q->nrows; ++c)
        load_row(job, &p->q, fa_q_offset(p, &p->q, b, q->row[c], q->head[c]), p->q_descale, b,
                 fa_kv_head(p, q->head[c]), qn + c * p->D, p->D);
}

/* Keys per chunk of the few-row path: the next tile's rows are prefetched chunk by chunk. */
#define ROWS_CHUNK 24

static void block_step_rows(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t b, int64_t j0, int64_t nj,
                            const tile_prefetch *pf) {
    const fa_problem *p = job->p;
    const int64_t ncols = q->ncols, R = q->nrows;
    const int64_t dvpad = cpu_round_up(p->Dv, CPU_LANES);
    for (int64_t jc = 0; jc < nj; jc += ROWS_CHUNK) { /* the next tile's K rows ride along */
        int64_t n = nj - jc < ROWS_CHUNK ? nj - jc : ROWS_CHUNK;
        if (job->rows_in_place)
            job->rowdot_half((int)R, n, p->D, q->qt, p->D, w->kraw + jc * p->k.ss, p->k.ss, w->s + jc * ncols, ncols);
        else
            job->kr->rowdot((int)R, n, p->D, q->qt, p->D, (const float *)w->ka + jc * w->ka_rs, w->ka_rs, w->s + jc * ncols, ncols);
        prefetch_rows(job, pf, jc, jc + ROWS_CHUNK, 1, 0);
    }
    scores_to_probs(job, w, q, b, j0, nj);
    for (int64_t r = 0; r < R; ++r) { /* rescale each row of O to its new running max */
        float *o = q->ot + r * dvpad, a = q->alpha[r];
        for (int64_t d = 0; d < dvpad; ++d) o[d] *= a;
    }
    /* O[r][:] += sum_j P^T[j][r] V[j][:]; V rows are Dv apart, the padded columns are ignored */
    for (int64_t jc = 0; jc < nj; jc += ROWS_CHUNK) { /* the next tile's V rows ride along */
        int64_t n = nj - jc < ROWS_CHUNK ? nj - jc : ROWS_CHUNK;
        if (job->rows_in_place) /* Dv is a multiple of 16 here: no read past a row */
            cpu_gemm_f32_halfb(job->gemm_halfb, R, dvpad, n, w->s + jc * ncols, 1, ncols, w->vraw + jc * p->v.ss, p->v.ss,
                               q->ot, dvpad, 1, NULL);
        else
            cpu_gemm_f32(job->kr, R, dvpad, n, w->s + jc * ncols, 1, ncols, (const float *)w->vbuf + jc * w->v_rs, w->v_rs,
                         q->ot, dvpad, 1, NULL);
        prefetch_rows(job, pf, jc, jc + ROWS_CHUNK, 0, 1);
    }
}

/* Sets up a block of rows (heads hq0 .. hq0 + nh, queries i0 .. i0 + ni) over keys [kb, ke). */
static void start_block(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t b, int64_t hq0, int64_t nh, int64_t i0,
                        int64_t ni, int64_t kb, int64_t ke) {
    const fa_problem *p = job->p;
    const int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    q->nrows = nh * ni;
    q->ncols = cpu_round_up(q->nrows, CPU_LANES);
    q->kmin = ke;
    q->kmax = kb;
    q->lo_max = kb;
    q->hi_min = ke;
    for (int64_t c = 0; c < q->ncols; ++c) {
        int64_t lo = 0, hi = 0;
        if (c < q->nrows) {
            q->head[c] = (int32_t)(hq0 + c / ni);
            q->row[c] = (int32_t)(i0 + c % ni);
            fa_key_range(p, sq, sk, q->row[c], &lo, &hi);
            if (lo < kb) lo = kb;
            if (hi > ke) hi = ke;
            if (hi < lo) hi = lo;
            if (lo < hi) {
                if (lo < q->kmin) q->kmin = lo;
                if (hi > q->kmax) q->kmax = hi;
            }
            if (lo > q->lo_max) q->lo_max = lo;
            if (hi < q->hi_min) q->hi_min = hi;
        } else { /* padding column: sees nothing */
            q->head[c] = (int32_t)hq0;
            q->row[c] = (int32_t)i0;
        }
        q->lo[c] = (int32_t)lo;
        q->hi[c] = (int32_t)hi;
        q->m[c] = -INFINITY;
        q->l[c] = 0.0f;
    }
    if (q->kmin < q->kmax) {
        if (job->few_rows) pack_q_rows(job, q, b);
        else pack_q(job, q, b, w->kbuf);
        /* O^T [Dv][ncols], or O [rows][Dv rounded up to 16] on the few-row path */
        int64_t o_size = job->few_rows ? q->nrows * cpu_round_up(p->Dv, CPU_LANES) : p->Dv * q->ncols;
        memset(q->ot, 0, (size_t)o_size * sizeof(float));
    }
}

/* One key tile for one block: scores, online softmax, accumulator update. */
static void block_step(const fwd_job *job, fwd_scratch *w, q_block *q, int64_t b, int64_t j0, int64_t nj) {
    /* Keys past the block's last visible one (the causal diagonal's tile) are
     * left out, rounded up to whole micro-tile rows; the mask covers the rest. */
    if (q->kmax - j0 < nj) nj = cpu_round_up(q->kmax - j0, CPU_MR) < nj ? cpu_round_up(q->kmax - j0, CPU_MR) : nj;
    tile_scores(job, w, q, nj);
    scores_to_probs(job, w, q, b, j0, nj);
    tile_update(job, w, q, nj); /* also rescales O^T by alpha, the running max's move */
}

static void fwd_task(void *arg, int64_t t, int worker) {
    const fwd_job *job = arg;
    const fa_problem *p = job->p;
    const fwd_geometry *g = &job->g;
    /* Biggest items first: later query blocks see the most keys under a causal mask. */
    int64_t per_item = p->B * g->kv_items * g->head_groups * g->nsplit;
    int64_t qi = g->q_items - 1 - t / per_item, r = t % per_item;
    int split = (int)(r % g->nsplit);
    r /= g->nsplit;
    int64_t grp = r % g->head_groups;
    r /= g->head_groups;
    int64_t kvh0 = r % g->kv_items * g->kv_per_item, b = r / g->kv_items;
    int64_t nkv = p->Hk - kvh0 < g->kv_per_item ? p->Hk - kvh0 : g->kv_per_item; /* kv heads of the item */

    int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    int64_t G = p->Hq / p->Hk;
    int64_t nh = G - grp * g->heads_per_block < g->heads_per_block ? G - grp * g->heads_per_block : g->heads_per_block;
    int64_t kb = split * g->chunk, ke = kb + g->chunk < sk ? kb + g->chunk : sk;
    if (ke < kb) ke = kb;
    if (nh <= 0) return;

    fwd_scratch w;
    fwd_scratch_layout(p, &w, job->scratch + (size_t)worker * job->scratch_bytes);
    int nb = 0;
    int first[CPU_QGROUP + 1]; /* blocks first[h] .. first[h + 1] belong to kv head kvh0 + h */
    int64_t kmin = ke, kmax = kb;
    for (int64_t h = 0; h < nkv; ++h) {
        first[h] = nb;
        int64_t hq0 = (kvh0 + h) * G + grp * g->heads_per_block;
        for (int k = 0; k < CPU_QGROUP; ++k) {
            int64_t i0, ni;
            if (g->heads_per_block > 1) { /* one block holds all rows of its heads */
                if (k > 0) break;
                i0 = 0;
                ni = sq;
            } else {
                i0 = (qi * CPU_QGROUP + k) * g->rows_per_head;
                ni = sq - i0 < g->rows_per_head ? sq - i0 : g->rows_per_head;
            }
            if (ni <= 0) break;
            q_block *q = &w.blk[nb++];
            start_block(job, &w, q, b, hq0, nh, i0, ni, kb, ke);
            if (q->kmin < kmin) kmin = q->kmin;
            if (q->kmax > kmax) kmax = q->kmax;
        }
    }
    first[nkv] = nb;
    /* The few-row path's scores fill columns [0, rows) of the tile; the
     * padding columns go through the softmax too and must hold numbers. */
    if (job->few_rows) memset(w.s, 0, (size_t)(CPU_BN * CPU_BM) * sizeof(float));
    for (int64_t j0 = kmin; j0 < kmax; j0 += CPU_BN) {
        int64_t nj = kmax - j0 < CPU_BN ? kmax - j0 : CPU_BN;
        for (int64_t h = 0; h < nkv; ++h) {
            int64_t kvh = kvh0 + h, nbh = first[h + 1] - first[h];
            int sees_any = 0;
            for (int k = first[h]; k < first[h + 1]; ++k) sees_any |= w.blk[k].kmin < j0 + nj && w.blk[k].kmax > j0;
            if (!sees_any) continue; /* no block of this head sees the tile */
            if (job->rows_in_place) {
                w.kraw = (const uint16_t *)p->k.data + fa_k_offset(p, &p->k, b, j0, kvh);
                w.vraw = (const uint16_t *)p->v.data + fa_k_offset(p, &p->v, b, j0, kvh);
            } else {
                load_tile(job, &w, b, kvh, j0, nj);
            }
            tile_prefetch pf = {b, kvh, j0 + CPU_BN, 0};
            if (j0 + CPU_BN < kmax) pf.nj = kmax - pf.j0 < CPU_BN ? kmax - pf.j0 : CPU_BN;
            int64_t pf_done = 0; /* rows of the next tile asked for so far: a share after each block */
            for (int k = first[h]; k < first[h + 1]; ++k) {
                q_block *q = &w.blk[k];
                int sees = q->kmin < j0 + nj && q->kmax > j0; /* else a tile the block cannot see */
                if (sees && job->few_rows) block_step_rows(job, &w, q, b, j0, nj, &pf); /* prefetches as it goes */
                else if (sees) block_step(job, &w, q, b, j0, nj);
                if (!sees || !job->few_rows) {
                    int64_t upto = pf.nj * (k - first[h] + 1) / nbh;
                    prefetch_rows(job, &pf, pf_done, upto, 1, 1);
                    pf_done = upto;
                }
            }
        }
    }
    for (int k = 0; k < nb; ++k) finish_block(job, &w.blk[k], b, split, w.vbuf); /* V tile: free now, >= Dv floats */
}

/* Exact merge of the split partials of one (b, h). */
static void merge_task(void *arg, int64_t t, int worker) {
    const fwd_job *job = arg;
    const fa_problem *p = job->p;
    int64_t b = t / p->Hq, h = t % p->Hq;
    int64_t sq = fa_seqlen_q(p, b);
    for (int64_t i = 0; i < sq; ++i) {
        float mx = -INFINITY;
        for (int s = 0; s < job->g.nsplit; ++s) {
            float v = job->part_lse[((s * p->B + b) * p->Hq + h) * p->Sq + i];
            if (v > mx) mx = v;
        }
        int64_t off = fa_q_offset(p, &p->out, b, i, h);
        if (mx == -INFINITY) {
            for (int64_t d = 0; d < p->Dv; ++d) fa_store_f(p->out.data, job->out_dtype, off + d, 0.0f);
            if (p->lse) p->lse[fa_lse_offset(p, b, h, i)] = -INFINITY;
            continue;
        }
        float sum = 0.0f;
        for (int s = 0; s < job->g.nsplit; ++s)
            sum += expf(job->part_lse[((s * p->B + b) * p->Hq + h) * p->Sq + i] - mx);
        for (int64_t d = 0; d < p->Dv; ++d) {
            float acc = 0.0f;
            for (int s = 0; s < job->g.nsplit; ++s) {
                int64_t idx = ((s * p->B + b) * p->Hq + h) * p->Sq + i;
                float wgt = expf(job->part_lse[idx] - mx); /* 0 for an empty split */
                if (wgt > 0.0f) acc += wgt * job->part_o[idx * p->Dv + d];
            }
            fa_store_f(p->out.data, job->out_dtype, off + d, acc / sum);
        }
        if (p->lse) p->lse[fa_lse_offset(p, b, h, i)] = mx + logf(sum);
    }
}

size_t cpu_forward_workspace(const fa_problem *p, const fa_exec *x, int num_splits) {
    size_t per_thread = cpu_align_up(fwd_scratch_bytes(p));
    size_t total = per_thread * (size_t)x->num_threads;
    if (num_splits > 1) {
        size_t rows = (size_t)num_splits * (size_t)p->B * (size_t)p->Hq * (size_t)p->Sq;
        total += cpu_align_up(rows * (size_t)p->Dv * 4) + cpu_align_up(rows * 4);
    }
    return total + CPU_ALIGN; /* room to align the base */
}

fa_status cpu_forward(const fa_problem *p, const fa_exec *x, int num_splits) {
    fwd_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.out_dtype = fa_out_dtype(p->dtype);
    job.kr = cpu_kernels_select();
    job.bf16 = cpu_use_bf16(p, job.kr);
    job.g = fwd_geometry_of(p, num_splits);
    /* Decode-like problems: at most CPU_FEW_ROWS rows a block, in every block
     * (the rows of a work item share its K/V tiles, so they share one path).
     * A contiguous bf16 or f16 cache is read in place, once; with the bf16
     * pair kernels that is the only way, as the path's f32 kernels cannot
     * read paired tiles. */
    const int half_in_place = (p->dtype == FA_BF16 || p->dtype == FA_F16) && !p->block_table && p->Dv % CPU_LANES == 0;
    job.few_rows = job.g.rows_per_head * job.g.heads_per_block <= CPU_FEW_ROWS && (!job.bf16 || half_in_place);
    job.rows_in_place = job.few_rows && half_in_place;
    job.rowdot_half = p->dtype == FA_F16 ? job.kr->rowdot_f16 : job.kr->rowdot_bf16;
    job.gemm_halfb = p->dtype == FA_F16 ? job.kr->gemm_f32_f16b : job.kr->gemm_f32_bf16b;
    job.scratch_bytes = cpu_align_up(fwd_scratch_bytes(p));
    if (!x->workspace || x->workspace_bytes < cpu_forward_workspace(p, x, num_splits))
        return fa_set_error(FA_ERR_WORKSPACE, "workspace: the CPU forward needs %zu bytes, got %zu",
                            cpu_forward_workspace(p, x, num_splits), x->workspace_bytes);
    cpu_arena a = {(char *)(uintptr_t)cpu_align_up((size_t)(uintptr_t)x->workspace)};
    job.scratch = cpu_take(&a, job.scratch_bytes * (size_t)x->num_threads);
    if (num_splits > 1) {
        size_t rows = (size_t)num_splits * (size_t)p->B * (size_t)p->Hq * (size_t)p->Sq;
        job.part_o = cpu_take(&a, rows * (size_t)p->Dv * 4);
        job.part_lse = cpu_take(&a, rows * 4);
    }
    int64_t items = fwd_items(p, &job.g) * num_splits;
    if (cpu_parallel_for(items, x->num_threads, fwd_task, &job) != 0)
        return fa_set_error(FA_ERR_INTERNAL, "CPU backend: could not start worker threads");
    if (num_splits > 1) cpu_parallel_for(p->B * p->Hq, x->num_threads, merge_task, &job);
    return FA_OK;
}

/*
 * CPU forward: tiled online softmax, queries along the SIMD lanes.
 *
 * A work item is one block of up to CPU_BM query rows of one sequence that
 * share a kv head (rows of several query heads of a GQA group when the
 * sequence is short, so a decode step reads each key once for the whole
 * group) and one chunk of its keys. For every tile of CPU_BN keys:
 *
 *     S^T = K_tile . Q^T          (cpu_gemm: broadcast K, Q^T packed once)
 *     P^T, m, l, alpha = online softmax of S^T, column by column
 *     O^T = O^T * alpha + V^T . P^T
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
    g.nsplit = nsplit;
    int64_t sk = p->Sk > 0 ? p->Sk : 1;
    g.chunk = cpu_round_up((sk + nsplit - 1) / nsplit, CPU_BN);
    return g;
}

static int64_t fwd_items(const fa_problem *p, const fwd_geometry *g) {
    return g->q_blocks * p->B * p->Hk * g->head_groups;
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

/* Per-thread scratch for one block. */
typedef struct fwd_scratch {
    void *qt;          /* Q^T: f32 [D][ncols] or bf16 pairs [D/2][ncols] */
    float *s;          /* S^T, then P^T: [CPU_BN][ncols] */
    uint32_t *pp;      /* P^T as bf16 pairs [CPU_BN/2][ncols] */
    float *ot;         /* O^T accumulator [Dv][ncols] */
    void *kbuf;        /* a packed K tile, when K cannot be read in place */
    void *vbuf;        /* a packed V tile */
    float *m, *l, *alpha;
    int32_t *lo, *hi, *lo_rel, *hi_rel, *head, *row;
} fwd_scratch;

static size_t fwd_scratch_bytes(const fa_problem *p) {
    size_t bm = CPU_BM, bn = CPU_BN, d = (size_t)p->D, dv = (size_t)p->Dv;
    return cpu_align_up(d * bm * 4) + cpu_align_up(bn * bm * 4) + cpu_align_up(bn / 2 * bm * 4) +
           cpu_align_up(dv * bm * 4) + cpu_align_up(bn * (d + 1) * 4) + cpu_align_up(bn * (dv + 1) * 4) +
           3 * cpu_align_up(bm * 4) + 6 * cpu_align_up(bm * 4);
}

static fwd_scratch fwd_scratch_at(const fa_problem *p, void *base) {
    cpu_arena a = {base};
    size_t bm = CPU_BM, bn = CPU_BN, d = (size_t)p->D, dv = (size_t)p->Dv;
    fwd_scratch w;
    w.qt = cpu_take(&a, d * bm * 4);
    w.s = cpu_take(&a, bn * bm * 4);
    w.pp = cpu_take(&a, bn / 2 * bm * 4);
    w.ot = cpu_take(&a, dv * bm * 4);
    w.kbuf = cpu_take(&a, bn * (d + 1) * 4);
    w.vbuf = cpu_take(&a, bn * (dv + 1) * 4);
    w.m = cpu_take(&a, bm * 4);
    w.l = cpu_take(&a, bm * 4);
    w.alpha = cpu_take(&a, bm * 4);
    w.lo = cpu_take(&a, bm * 4);
    w.hi = cpu_take(&a, bm * 4);
    w.lo_rel = cpu_take(&a, bm * 4);
    w.hi_rel = cpu_take(&a, bm * 4);
    w.head = cpu_take(&a, bm * 4);
    w.row = cpu_take(&a, bm * 4);
    return w;
}

typedef struct fwd_job {
    const fa_problem *p;
    const cpu_kernels *kr;
    int bf16;             /* bf16 pair kernels, else f32 */
    fwd_geometry g;
    char *scratch;        /* per-thread scratch, scratch_bytes apart */
    size_t scratch_bytes;
    float *part_o;        /* split-KV partials [nsplit][B][Hq][Sq][Dv] */
    float *part_lse;      /* [nsplit][B][Hq][Sq] */
} fwd_job;

static const char *row_ptr(const fa_view *v, fa_dtype t, int64_t off) {
    return (const char *)v->data + off * (int64_t)fa_dtype_size(t);
}

/* Packs the block's queries transposed: column c is query row (head[c], row[c]). */
static void pack_q(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t nrows, int64_t ncols) {
    const fa_problem *p = job->p;
    if (job->bf16) {
        int64_t dp = (p->D + 1) / 2;
        uint32_t *qt = w->qt;
        for (int64_t c = 0; c < ncols; ++c) {
            if (c >= nrows) {
                for (int64_t k = 0; k < dp; ++k) qt[k * ncols + c] = 0;
                continue;
            }
            const uint16_t *src = (const uint16_t *)row_ptr(&p->q, p->dtype, fa_q_offset(p, &p->q, b, w->row[c], w->head[c]));
            for (int64_t k = 0; k < dp; ++k) {
                uint32_t hi = 2 * k + 1 < p->D ? (uint32_t)src[2 * k + 1] : 0u;
                qt[k * ncols + c] = (uint32_t)src[2 * k] | hi << 16;
            }
        }
    } else {
        float *qt = w->qt, *tmp = w->kbuf;
        for (int64_t c = 0; c < ncols; ++c) {
            if (c >= nrows) {
                for (int64_t d = 0; d < p->D; ++d) qt[d * ncols + c] = 0.0f;
                continue;
            }
            cpu_load_row_f32(job->kr, p->dtype, row_ptr(&p->q, p->dtype, fa_q_offset(p, &p->q, b, w->row[c], w->head[c])),
                             tmp, p->D);
            for (int64_t d = 0; d < p->D; ++d) qt[d * ncols + c] = tmp[d];
        }
    }
}

/* S^T[j][c] = <k_{j0+j}, q_c> for the tile's nj keys. */
static void tile_scores(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t kvh, int64_t j0, int64_t nj,
                        int64_t ncols) {
    const fa_problem *p = job->p;
    const int paged = p->block_table != NULL;
    const size_t es = fa_dtype_size(p->dtype);
    if (job->bf16) {
        int64_t dp = (p->D + 1) / 2;
        const uint32_t *a;
        int64_t a_rs;
        const char *k0 = row_ptr(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0, kvh));
        int in_place = !paged && p->D % 2 == 0 && p->k.ss % 2 == 0 && ((uintptr_t)k0 & 3) == 0;
        if (in_place) {
            a = (const uint32_t *)(const void *)k0; /* rows are whole bf16 pairs */
            a_rs = p->k.ss / 2;
        } else {
            uint32_t *kb = w->kbuf;
            for (int64_t j = 0; j < nj; ++j) {
                const uint16_t *src = (const uint16_t *)row_ptr(&p->k, p->dtype, fa_k_offset(p, &p->k, b, j0 + j, kvh));
                for (int64_t k = 0; k < dp; ++k) {
                    uint32_t hi = 2 * k + 1 < p->D ? (uint32_t)src[2 * k + 1] : 0u;
                    kb[j * dp + k] = (uint32_t)src[2 * k] | hi << 16;
                }
            }
            a = kb;
            a_rs = dp;
        }
        cpu_gemm_bf16(job->kr, nj, ncols, dp, a, a_rs, 1, w->qt, ncols, w->s, ncols, 0);
    } else {
        const float *a;
        int64_t a_rs;
        if (p->dtype == FA_F32 && !paged) {
            a = (const float *)p->k.data + fa_k_offset(p, &p->k, b, j0, kvh);
            a_rs = p->k.ss;
        } else {
            float *kb = w->kbuf;
            for (int64_t j = 0; j < nj; ++j)
                cpu_load_row_f32(job->kr, p->dtype, (const char *)p->k.data + fa_k_offset(p, &p->k, b, j0 + j, kvh) * (int64_t)es,
                                 kb + j * p->D, p->D);
            a = kb;
            a_rs = p->D;
        }
        cpu_gemm_f32(job->kr, nj, ncols, p->D, a, a_rs, 1, w->qt, ncols, w->s, ncols, 0);
    }
}

/* O^T += V_tile^T . P^T over the tile's nj keys. */
static void tile_update(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t kvh, int64_t j0, int64_t nj,
                        int64_t ncols) {
    const fa_problem *p = job->p;
    const size_t es = fa_dtype_size(p->dtype);
    if (job->bf16) {
        int64_t jp = (nj + 1) / 2;
        uint32_t *vb = w->vbuf;
        for (int64_t k = 0; k < jp; ++k) {
            const uint16_t *r0 = (const uint16_t *)row_ptr(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + 2 * k, kvh));
            const uint16_t *r1 = 2 * k + 1 < nj ? (const uint16_t *)row_ptr(&p->v, p->dtype, fa_k_offset(p, &p->v, b, j0 + 2 * k + 1, kvh)) : NULL;
            job->kr->pair_bf16(r0, r1, vb + k * p->Dv, p->Dv); /* (v_j, v_j+1) pairs along the key axis */
            job->kr->pair_f32(w->s + 2 * k * ncols, 2 * k + 1 < nj ? w->s + (2 * k + 1) * ncols : NULL, w->pp + k * ncols, ncols);
        }
        cpu_gemm_bf16(job->kr, p->Dv, ncols, jp, vb, 1, p->Dv, w->pp, ncols, w->ot, ncols, 1);
    } else {
        const float *a;
        int64_t a_ks;
        if (p->dtype == FA_F32 && !p->block_table) {
            a = (const float *)p->v.data + fa_k_offset(p, &p->v, b, j0, kvh);
            a_ks = p->v.ss;
        } else {
            float *vb = w->vbuf;
            for (int64_t j = 0; j < nj; ++j)
                cpu_load_row_f32(job->kr, p->dtype, (const char *)p->v.data + fa_k_offset(p, &p->v, b, j0 + j, kvh) * (int64_t)es,
                                 vb + j * p->Dv, p->Dv);
            a = vb;
            a_ks = p->Dv;
        }
        cpu_gemm_f32(job->kr, p->Dv, ncols, nj, a, 1, a_ks, w->s, ncols, w->ot, ncols, 1);
    }
}

/* Out = O / l and lse = m + log l for the block's rows, to the output or to a split's partial. */
static void finish_block(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t nrows, int64_t ncols, int split) {
    const fa_problem *p = job->p;
    for (int64_t c = 0; c < nrows; ++c) {
        int64_t h = w->head[c], i = w->row[c];
        float l = w->l[c];
        int empty = !(l > 0.0f); /* no visible key: out 0, lse -inf */
        float inv = empty ? 0.0f : 1.0f / l;
        float lse = empty ? -INFINITY : (w->m[c] + log2f(l)) * LN2;
        if (job->g.nsplit > 1) {
            int64_t idx = ((split * p->B + b) * p->Hq + h) * p->Sq + i;
            float *o = job->part_o + idx * p->Dv;
            for (int64_t d = 0; d < p->Dv; ++d) o[d] = w->ot[d * ncols + c] * inv;
            job->part_lse[idx] = lse;
            continue;
        }
        int64_t off = fa_q_offset(p, &p->out, b, i, h);
        if (p->dtype == FA_F32) {
            float *o = (float *)p->out.data + off;
            for (int64_t d = 0; d < p->Dv; ++d) o[d] = w->ot[d * ncols + c] * inv;
        } else {
            for (int64_t d = 0; d < p->Dv; ++d) fa_store_f(p->out.data, p->dtype, off + d, w->ot[d * ncols + c] * inv);
        }
        if (p->lse) p->lse[fa_lse_offset(p, b, h, i)] = lse;
    }
}

/* One block: rows (heads hq0 .. hq0 + nh, queries i0 .. i0 + ni) over keys [kb, ke). */
static void attend_block(const fwd_job *job, fwd_scratch *w, int64_t b, int64_t hq0, int64_t nh, int64_t i0,
                         int64_t ni, int64_t kb, int64_t ke, int split) {
    const fa_problem *p = job->p;
    const int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    const int64_t kvh = fa_kv_head(p, hq0);
    const int64_t nrows = nh * ni, ncols = cpu_round_up(nrows, CPU_LANES);

    /* Each row's visible keys within this chunk, and the block's bounds. */
    int64_t kmin = ke, kmax = kb, lo_max = kb, hi_min = ke;
    for (int64_t c = 0; c < ncols; ++c) {
        int64_t lo = 0, hi = 0;
        if (c < nrows) {
            w->head[c] = (int32_t)(hq0 + c / ni);
            w->row[c] = (int32_t)(i0 + c % ni);
            fa_key_range(p, sq, sk, w->row[c], &lo, &hi);
            if (lo < kb) lo = kb;
            if (hi > ke) hi = ke;
            if (hi < lo) hi = lo;
            if (lo < hi) {
                if (lo < kmin) kmin = lo;
                if (hi > kmax) kmax = hi;
            }
            if (lo > lo_max) lo_max = lo;
            if (hi < hi_min) hi_min = hi;
        } else {
            w->head[c] = (int32_t)hq0;
            w->row[c] = (int32_t)i0;
        }
        w->lo[c] = (int32_t)lo;
        w->hi[c] = (int32_t)hi;
        w->m[c] = -INFINITY;
        w->l[c] = 0.0f;
    }
    if (kmin < kmax) {
        pack_q(job, w, b, nrows, ncols);
        memset(w->ot, 0, (size_t)(p->Dv * ncols) * sizeof(float));
    }
    for (int64_t j0 = kmin; j0 < kmax; j0 += CPU_BN) {
        int64_t nj = kmax - j0 < CPU_BN ? kmax - j0 : CPU_BN;
        tile_scores(job, w, b, kvh, j0, nj, ncols);
        float c = cpu_score_options(p, b, sq, sk, j0, nj, ncols, nrows, w->head, w->row, w->s, NULL);
        /* Masks only where some row's range cuts this tile. */
        int full = lo_max <= j0 && hi_min >= j0 + nj;
        if (!full) {
            for (int64_t col = 0; col < ncols; ++col) {
                int64_t lo = w->lo[col] - j0, hi = w->hi[col] - j0;
                w->lo_rel[col] = (int32_t)(lo < 0 ? 0 : lo > nj ? nj : lo);
                w->hi_rel[col] = (int32_t)(hi < 0 ? 0 : hi > nj ? nj : hi);
            }
        }
        job->kr->softmax_tile(nj, ncols, w->s, ncols, c, full ? NULL : w->lo_rel, w->hi_rel, w->m, w->l, w->alpha);
        if (p->dropout_p > 0.0f) cpu_apply_dropout(p, b, j0, nj, ncols, nrows, w->head, w->row, w->s);
        if (j0 != kmin) { /* rescale the accumulator to the new running max */
            for (int64_t d = 0; d < p->Dv; ++d) {
                float *o = w->ot + d * ncols;
                for (int64_t col = 0; col < ncols; ++col) o[col] *= w->alpha[col];
            }
        }
        tile_update(job, w, b, kvh, j0, nj, ncols);
    }
    finish_block(job, w, b, nrows, ncols, split);
}

static void fwd_task(void *arg, int64_t t, int worker) {
    const fwd_job *job = arg;
    const fa_problem *p = job->p;
    const fwd_geometry *g = &job->g;
    /* Biggest blocks first: later query blocks see the most keys under a causal mask. */
    int64_t per_block = p->B * p->Hk * g->head_groups * g->nsplit;
    int64_t qb = g->q_blocks - 1 - t / per_block, r = t % per_block;
    int split = (int)(r % g->nsplit);
    r /= g->nsplit;
    int64_t grp = r % g->head_groups;
    r /= g->head_groups;
    int64_t kvh = r % p->Hk, b = r / p->Hk;

    int64_t sq = fa_seqlen_q(p, b), sk = fa_seqlen_k(p, b);
    int64_t G = p->Hq / p->Hk;
    int64_t hq0 = kvh * G + grp * g->heads_per_block;
    int64_t nh = G - grp * g->heads_per_block < g->heads_per_block ? G - grp * g->heads_per_block : g->heads_per_block;
    int64_t i0, ni;
    if (g->heads_per_block > 1) { /* one block holds all rows of its heads */
        i0 = 0;
        ni = sq;
    } else {
        i0 = qb * g->rows_per_head;
        ni = sq - i0 < g->rows_per_head ? sq - i0 : g->rows_per_head;
    }
    if (ni <= 0 || nh <= 0) return;
    int64_t kb = split * g->chunk, ke = kb + g->chunk < sk ? kb + g->chunk : sk;
    if (ke < kb) ke = kb;
    fwd_scratch w = fwd_scratch_at(p, job->scratch + (size_t)worker * job->scratch_bytes);
    attend_block(job, &w, b, hq0, nh, i0, ni, kb, ke, split);
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
            for (int64_t d = 0; d < p->Dv; ++d) fa_store_f(p->out.data, p->dtype, off + d, 0.0f);
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
            fa_store_f(p->out.data, p->dtype, off + d, acc / sum);
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
    job.kr = cpu_kernels_select();
    job.bf16 = cpu_use_bf16(p, job.kr);
    job.g = fwd_geometry_of(p, num_splits);
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

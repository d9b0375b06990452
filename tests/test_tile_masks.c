/*
 * Unit test of fa_only_top_block_masked (problem.h), the host's test that
 * lets the Hopper forward run a problem on a kernel instance with no mask
 * code past each tile's first (highest) kv block. A wrong "yes" would show
 * hidden keys, so it is checked against a brute force over every row and
 * block of many shapes: causal in both alignments, windows, sequence ends,
 * Sq above and below Sk, several tile and block sizes. Needs no GPU.
 */
#include <stdio.h>
#include <string.h>

#include "problem.h"

static int failures, checks;

/* Row i's visible keys [lo, hi) straight from the definition (not through
 * fa_key_range): keys 0..sk-1 within [i + off - left, i + off + right]. */
static void visible_keys(const fa_problem *p, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t off = p->top_left ? 0 : p->Sk - p->Sq;
    int64_t l = 0, h = p->Sk;
    if (p->window_left < FA_UNBOUNDED && i + off - p->window_left > l) l = i + off - p->window_left;
    if (p->window_right < FA_UNBOUNDED && i + off + p->window_right + 1 < h) h = i + off + p->window_right + 1;
    *lo = l;
    *hi = h > l ? h : l;
}

/* True when every tile's kv blocks under its highest are seen whole by every
 * row of the tile. The tile's blocks are those the kernel walks
 * (sm90_decode_tile): from the first row's lower bound to the last row's
 * upper one; a tile with none is skipped. */
static int brute_only_top_block_masked(const fa_problem *p, int64_t bm, int64_t bn) {
    for (int64_t r0 = 0; r0 < p->Sq; r0 += bm) {
        const int64_t r1 = (r0 + bm < p->Sq ? r0 + bm : p->Sq) - 1;
        int64_t lo0, hi0, lo1, hi1;
        visible_keys(p, r0, &lo0, &hi0);
        visible_keys(p, r1, &lo1, &hi1);
        if (hi1 <= lo0) continue;
        const int64_t n_lo = lo0 / bn, n_hi = (hi1 + bn - 1) / bn;
        for (int64_t n = n_lo; n < n_hi - 1; ++n)
            for (int64_t r = r0; r <= r1; ++r) {
                int64_t lo, hi;
                visible_keys(p, r, &lo, &hi);
                if (lo > n * bn || hi < (n + 1) * bn) return 0;
            }
    }
    return 1;
}

int main(void) {
    static const int64_t lens[] = {1, 2, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 300, 384, 511, 513, 640, 1024};
    const int64_t U = FA_UNBOUNDED;
    static const int64_t windows[][2] = {{FA_UNBOUNDED, FA_UNBOUNDED}, {FA_UNBOUNDED, 0}, {FA_UNBOUNDED, 5},
                                         {FA_UNBOUNDED, 127},          {FA_UNBOUNDED, 128}, {FA_UNBOUNDED, 200},
                                         {0, 0},                       {10, 0},          {100, 50},
                                         {300, FA_UNBOUNDED}};
    static const int64_t tiles[][2] = {{128, 128}, {128, 64}, {192, 128}, {64, 128}, {192, 224}};
    const int nlen = (int)(sizeof lens / sizeof lens[0]);
    int yes = 0, brute_yes = 0;
    for (int a = 0; a < nlen; ++a)
        for (int b = 0; b < nlen; ++b)
            for (int tl = 0; tl < 2; ++tl)
                for (size_t w = 0; w < sizeof windows / sizeof windows[0]; ++w)
                    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; ++t) {
                        fa_problem p;
                        memset(&p, 0, sizeof p);
                        p.B = 1;
                        p.Sq = lens[a];
                        p.Sk = lens[b];
                        p.top_left = tl;
                        p.window_left = windows[w][0];
                        p.window_right = windows[w][1];
                        p.has_mask = p.window_left < U || p.window_right < U;
                        const int64_t bm = tiles[t][0], bn = tiles[t][1];
                        const int got = fa_only_top_block_masked(&p, bm, bn);
                        const int want = brute_only_top_block_masked(&p, bm, bn);
                        yes += got;
                        brute_yes += want;
                        /* a "yes" where a lower block hides a key would be a wrong result */
                        ++checks;
                        if (got && !want) {
                            ++failures;
                            printf("FAIL Sq=%lld Sk=%lld top_left=%d window=(%lld,%lld) tile %lldx%lld: "
                                   "says only the top block is masked, a lower one is too\n",
                                   (long long)p.Sq, (long long)p.Sk, tl, (long long)(p.window_left < U ? p.window_left : -1),
                                   (long long)(p.window_right < U ? p.window_right : -1), (long long)bm, (long long)bn);
                        }
                        /* the cases the fast instance exists for must take it: no mask
                         * at all, and causal with the diagonal on block edges */
                        const int64_t off = tl ? 0 : p.Sk - p.Sq;
                        const int no_mask = p.window_left >= U && p.window_right >= U;
                        const int aligned_causal = p.window_left >= U && p.window_right == 0 && bm == bn &&
                                                   off % bn == 0;
                        ++checks;
                        if ((no_mask || aligned_causal) && !got) {
                            ++failures;
                            printf("FAIL Sq=%lld Sk=%lld top_left=%d window=(%lld,%lld) tile %lldx%lld: "
                                   "expected only the top block masked\n",
                                   (long long)p.Sq, (long long)p.Sk, tl, (long long)(p.window_left < U ? p.window_left : -1),
                                   (long long)(p.window_right < U ? p.window_right : -1), (long long)bm, (long long)bn);
                        }
                    }
    /* varlen problems are never claimed (their lengths are on the device) */
    {
        static const int32_t cu[2] = {0, 128};
        fa_problem p;
        memset(&p, 0, sizeof p);
        p.B = 1;
        p.Sq = p.Sk = 128;
        p.window_left = p.window_right = FA_UNBOUNDED;
        p.cu_seqlens_q = p.cu_seqlens_k = cu;
        ++checks;
        if (fa_only_top_block_masked(&p, 128, 128)) {
            ++failures;
            printf("FAIL varlen problem claimed\n");
        }
    }
    printf("test_tile_masks: %d of the shapes take the unmasked instance (%d could by brute force)\n", yes,
           brute_yes);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures != 0;
}

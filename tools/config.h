/*
 * One benchmark/check case as the user described it on the command line,
 * and the defaults that fill in what they left out.
 */
#ifndef FA_CLI_CONFIG_H
#define FA_CLI_CONFIG_H

#include <stdint.h>

#include "flashattn.h"
#include "problem.h" /* fa_out_dtype */

/* Marks an integer setting the user did not give; resolved by cli_config_resolve(). */
#define CLI_UNSET (-1)

typedef struct cli_config {
    /* Shape. */
    int64_t batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, head_dim_v;
    fa_dtype dtype;                    /* of q, k, v (and of the gradients) */

    /* Options. causal: 1 on, 0 off, CLI_UNSET: the default (on, unless a
     * window was given). */
    int causal;
    int top_left;
    int use_window;
    int64_t window_left, window_right; /* -1: unbounded */
    float softcap;
    int alibi;                         /* per-head ALiBi slopes 2^(-8(h+1)/Hq) */
    float dropout_p;
    uint64_t seed;                     /* random inputs and the dropout seed */
    float scale;                       /* 0: 1/sqrt(D) */
    int deterministic;
    /* float8: random per-(batch, kv head) descale factors in [0.5, 2) for q, k, v
     * (0: none, i.e. all 1). */
    int descale;
    /* The batch as packed equal-length sequences: fa_varlen_fwd / fa_varlen_bwd
     * (same data and results as the batched call; lse in the (Hq, total) layout). */
    int varlen;

    /* KV cache (decode) mode. */
    int kvcache;
    int64_t cache_len;                 /* keys already in the cache per sequence */
    int64_t new_keys;                  /* keys appended by the call (k_new / v_new) */
    int64_t block_size;                /* 0: contiguous cache; else paged */
    int splits;                        /* 0: the library's heuristic */

    /* Execution and reporting. */
    fa_backend backend;                /* FA_BACKEND_AUTO: CUDA if a device is there, else CPU */
    int has_against;                   /* check: also compare with `against` */
    fa_backend against;
    int threads;                       /* 0: every core */
    int repeat, warmup;
    int fwd_only;
    int check;                         /* compare with the float64 reference */
    int thorough_check;                /* flashattn check: a larger time budget before slicing */
    int json;
    int grid;                          /* bench: the standard GPU grid instead of one case */
} cli_config;

/* The default problem: batch 2, 16 heads, seqlen 1024, head dim 64, causal, bf16. */
void cli_config_defaults(cli_config *c);

/* Fill every CLI_UNSET field from the others (seqlen_k from seqlen_q, kv_heads
 * from heads, decode defaults in KV-cache mode, ...). */
void cli_config_resolve(cli_config *c);

/* Effective mask of the case: causal folded into the window, -1 unbounded. */
void cli_config_window(const cli_config *c, int64_t *left, int64_t *right);

/* Keys each query attends over: seqlen_k, or cache_len + new_keys in KV-cache mode. */
int64_t cli_config_keys(const cli_config *c);

/* Whether the case is causal by the FLOP convention (mask (-1, 0)). */
int cli_config_is_causal(const cli_config *c);

#endif /* FA_CLI_CONFIG_H */

/*
 * The operands of one case: fresh random inputs (never zeros), poisoned
 * outputs, as fa_tensors on the host or a CUDA device, plus the fa_options the
 * configuration asks for. Host copies of everything stay available for the
 * reference check.
 */
#ifndef FA_CLI_WORKLOAD_H
#define FA_CLI_WORKLOAD_H

#include "config.h"
#include "device.h"

typedef struct cli_workload {
    cli_config cfg;       /* resolved */
    int on_device;
    int64_t Sk;           /* keys each query attends over */

    /* KV-cache layout: a contiguous cache holds s_cache rows per sequence; a
     * paged one has num_blocks blocks of block_size rows, max_blocks per sequence. */
    int64_t s_cache, num_blocks, max_blocks;

    cli_buffer q, k, v, dout;           /* inputs (k, v: the cache in KV-cache mode) */
    cli_buffer out, lse, dq, dk, dv;    /* outputs (out in fa_out_dtype of the inputs') */
    cli_buffer alibi, k_new, v_new, cache_seqlens, block_table;
    cli_buffer cu_q, cu_k;              /* varlen: sequence starts 0, Sq, 2 Sq, ... (and Sk) */
    cli_buffer descale[3];              /* --descale: float32 (B, Hk) factors of q, k, v */

    fa_tensor tq, tk, tv, tdout, tout, tlse, tdq, tdk, tdv;
    fa_tensor tk_new, tv_new, tcache_seqlens, tblock_table, tcu_q, tcu_k;
    fa_options opts;
} cli_workload;

/* Allocate and fill a case. Identical configurations give identical inputs.
 * Returns 1, or 0 with a message in err. */
int cli_workload_create(cli_workload *w, const cli_config *c, int on_device, char *err, size_t err_len);
void cli_workload_destroy(cli_workload *w);

/* Poison the forward (out, lse) or backward (dq, dk, dv) outputs. */
int cli_workload_poison(cli_workload *w, int backward);
/* Bring the forward or backward outputs back to the host copies. */
int cli_workload_download(cli_workload *w, int backward);

/* Row of key j of sequence b in the k / v buffers (units of Hk * D elements);
 * new keys (j >= cache_len in KV-cache mode) are read from k_new / v_new instead. */
int64_t cli_workload_key_row(const cli_workload *w, int64_t b, int64_t j);

/* Bytes of K and V a KV-cache call reads (the decode bandwidth figure). */
double cli_workload_cache_bytes(const cli_workload *w);

#endif /* FA_CLI_WORKLOAD_H */

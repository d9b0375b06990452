#include "config.h"

#include <string.h>

void cli_config_defaults(cli_config *c) {
    memset(c, 0, sizeof *c);
    c->batch = c->seqlen_q = c->seqlen_k = CLI_UNSET;
    c->heads = c->kv_heads = c->head_dim = c->head_dim_v = CLI_UNSET;
    c->dtype = FA_BF16;
    c->causal = CLI_UNSET;
    c->window_left = c->window_right = -1;
    c->seed = 42;
    c->cache_len = CLI_UNSET;
    c->block_size = 0;
    c->backend = FA_BACKEND_AUTO;
    c->repeat = CLI_UNSET;
    c->warmup = CLI_UNSET;
    c->check = 1;
}

static void set_default(int64_t *field, int64_t value) {
    if (*field == CLI_UNSET) *field = value;
}

void cli_config_resolve(cli_config *c) {
    if (c->kvcache) {
        /* Decode: one new query per sequence over a long cache, GQA 32/8, D 128. */
        set_default(&c->batch, 8);
        set_default(&c->seqlen_q, 1);
        set_default(&c->heads, 32);
        set_default(&c->kv_heads, c->heads == 32 ? 8 : c->heads);
        set_default(&c->head_dim, 128);
        set_default(&c->cache_len, c->seqlen_k != CLI_UNSET ? c->seqlen_k : 4096);
        c->seqlen_k = c->cache_len + c->new_keys;
    } else {
        set_default(&c->batch, 2);
        set_default(&c->seqlen_q, 1024);
        set_default(&c->seqlen_k, c->seqlen_q);
        set_default(&c->heads, 16);
        set_default(&c->kv_heads, c->heads);
        set_default(&c->head_dim, 64);
    }
    set_default(&c->head_dim_v, c->head_dim);
    /* Causal is on by default; an explicit window replaces that default. */
    if (c->causal == CLI_UNSET) c->causal = c->use_window ? 0 : 1;
    if (c->repeat == CLI_UNSET) c->repeat = 10;
    if (c->warmup == CLI_UNSET) c->warmup = 2;
}

void cli_config_window(const cli_config *c, int64_t *left, int64_t *right) {
    int64_t l = c->use_window ? c->window_left : -1;
    int64_t r = c->use_window ? c->window_right : -1;
    if (c->causal == 1) r = 0; /* causal is the window (-1, 0); intersecting leaves right = 0 */
    *left = l;
    *right = r;
}

int64_t cli_config_keys(const cli_config *c) {
    return c->kvcache ? c->cache_len + c->new_keys : c->seqlen_k;
}

int cli_config_is_causal(const cli_config *c) {
    int64_t l, r;
    cli_config_window(c, &l, &r);
    return l < 0 && r == 0;
}

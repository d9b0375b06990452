/* Causal attention forward and backward on the CPU, float32. */
#include <stdio.h>
#include <stdlib.h>

#include "flashattn.h"

int main(void) {
    enum { B = 1, S = 128, H = 4, D = 64 };
    size_t n = (size_t)B * S * H * D;
    float *q = malloc(n * sizeof(float)), *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float));
    float *out = malloc(n * sizeof(float)), *dout = malloc(n * sizeof(float));
    float *dq = malloc(n * sizeof(float)), *dk = malloc(n * sizeof(float)), *dv = malloc(n * sizeof(float));
    float *lse = malloc((size_t)B * H * S * sizeof(float));
    for (size_t i = 0; i < n; ++i) {
        q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        k[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
        v[i] = (float)((i * 3) % 17) / 17.0f - 0.5f;
        dout[i] = 1.0f;
    }

    /* (batch, seqlen, heads, head_dim) tensors; lse is (batch, heads, seqlen). */
    fa_tensor tq = fa_tensor_4d(q, FA_F32, B, S, H, D);
    fa_tensor tk = fa_tensor_4d(k, FA_F32, B, S, H, D);
    fa_tensor tv = fa_tensor_4d(v, FA_F32, B, S, H, D);
    fa_tensor tout = fa_tensor_4d(out, FA_F32, B, S, H, D);
    fa_tensor tdout = fa_tensor_4d(dout, FA_F32, B, S, H, D);
    fa_tensor tdq = fa_tensor_4d(dq, FA_F32, B, S, H, D);
    fa_tensor tdk = fa_tensor_4d(dk, FA_F32, B, S, H, D);
    fa_tensor tdv = fa_tensor_4d(dv, FA_F32, B, S, H, D);
    fa_tensor tlse = fa_tensor_3d(lse, FA_F32, B, H, S);

    fa_options opts = {0}; /* scale 1/sqrt(D), no dropout */
    opts.causal = 1;

    fa_status st = fa_fwd(NULL, &tq, &tk, &tv, &opts, &tout, &tlse);
    if (st == FA_OK) st = fa_bwd(NULL, &tdout, &tq, &tk, &tv, &tout, &tlse, &opts, &tdq, &tdk, &tdv);
    if (st != FA_OK) {
        fprintf(stderr, "flashattn: %s: %s\n", fa_status_name(st), fa_last_error());
        return 1;
    }
    printf("flashattn %s: out[0] = %.6f, lse[0] = %.6f, dv[0] = %.6f\n", fa_version(), out[0], lse[0], dv[0]);

    free(q), free(k), free(v), free(out), free(dout), free(dq), free(dk), free(dv), free(lse);
    return 0;
}

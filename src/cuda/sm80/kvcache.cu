/*
 * KV-cache forward for inference: append the new keys and values in place,
 * then run the forward over `splits` chunks of the keys (Flash-Decoding) and
 * combine the float32 partials exactly with their lse.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "sm80.h"
#include "tile.cuh"

/* One CTA per (new row, batch); threads walk kv heads x head dim. */
template <typename T>
__global__ void sm80_kv_append(const __grid_constant__ fa_problem p) {
    const int s = blockIdx.x, b = blockIdx.y;
    const int64_t j = (int64_t)p.seqlens_k[b] + s; /* destination key index */
    const T *kn = (const T *)p.k_new.data, *vn = (const T *)p.v_new.data;
    T *kc = (T *)p.k.data, *vc = (T *)p.v.data;
    for (int64_t idx = threadIdx.x; idx < p.Hk * p.D; idx += blockDim.x) {
        const int64_t h = idx / p.D, d = idx % p.D;
        kc[fa_k_offset(&p, &p.k, b, j, h) + d] = kn[b * p.k_new.sb + s * p.k_new.ss + h * p.k_new.sh + d];
    }
    for (int64_t idx = threadIdx.x; idx < p.Hk * p.Dv; idx += blockDim.x) {
        const int64_t h = idx / p.Dv, d = idx % p.Dv;
        vc[fa_k_offset(&p, &p.v, b, j, h) + d] = vn[b * p.v_new.sb + s * p.v_new.ss + h * p.v_new.sh + d];
    }
}

/* One CTA per (row, head, batch): out = sum_s exp(lse_s - lse) o_s. */
template <typename T>
__global__ void sm80_split_combine(const __grid_constant__ fa_problem p, int splits, const float *o_part, const float *lse_part) {
    const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t stride = p.B * p.Hq * p.Sq; /* between splits */
    const int64_t row = ((int64_t)b * p.Hq + h) * p.Sq + i;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lse_part[s * stride + row]);
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int s = 0; s < splits; ++s) sum += expf(lse_part[s * stride + row] - mx);
    const float lse = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    T *dst = (T *)p.out.data + fa_q_offset(&p, &p.out, b, i, h);
    for (int d = threadIdx.x; d < p.Dv; d += blockDim.x) {
        float acc = 0.0f;
        if (sum > 0.0f)
            for (int s = 0; s < splits; ++s) {
                const float l = lse_part[s * stride + row];
                if (l != -INFINITY) acc += expf(l - lse) * o_part[(s * stride + row) * p.Dv + d];
            }
        dst[d] = from_f32<T>(acc);
    }
    if (threadIdx.x == 0 && p.lse) p.lse[fa_lse_offset(&p, b, h, i)] = lse;
}

/* Key tile of the forward for this head dimension (fwd.cu's table, the same
 * for the packed and the unpacked tiles). */
static int fwd_block_n(const fa_problem *p) {
    const int64_t hd = p->D > p->Dv ? p->D : p->Dv;
    return hd <= 64 ? 64 : 32;
}

/*
 * Flash-Decoding heuristic: split only when the row blocks alone leave the
 * SMs short of work, and keep every split at least four key tiles long so the
 * merge stays cheap next to the work.
 *   unpacked (128-row CTAs of 4 or 8 warps, one or two per SM): about two
 *     waves of CTAs;
 *   packed (16-row CTAs of one warp, three K/V stages in 50-52 KiB of
 *     shared memory; two stages in 72 KiB at head dim 256): four CTAs per
 *     SM (two at 256), which fit at once on an H100/H200 SM (an A100 SM
 *     holds three), so every SM keeps about eight K/V tiles of loads in
 *     flight (~128 KiB at D 128; a streaming read needs ~50-60 KiB per SM
 *     to reach the bandwidth); the count is rounded down so that no partial
 *     second wave is left.
 */
extern "C" int sm80_kvcache_splits(const fa_problem *p, int num_sms) {
    if (p->num_splits > 0) return p->num_splits;
    if (num_sms <= 0 || p->Hk <= 0) return 1;
    const bool packed = sm80_fwd_packs_gqa(p);
    const int64_t m_blocks = packed ? (p->Sq * (p->Hq / p->Hk) + 15) / 16 : (p->Sq + 127) / 128;
    const int64_t ctas = m_blocks * (packed ? p->Hk : p->Hq) * p->B;
    const int64_t hd = p->D > p->Dv ? p->D : p->Dv;
    const int64_t target = (packed ? (hd > 128 ? 2 : 4) : 2) * (int64_t)num_sms;
    if (ctas == 0 || ctas >= (packed ? target : num_sms)) return 1;
    const int64_t tiles = (p->Sk + fwd_block_n(p) - 1) / fwd_block_n(p);
    int64_t s = packed ? target / ctas : (target + ctas - 1) / ctas;
    if (s > tiles / 4) s = tiles / 4;
    if (s > 128) s = 128;
    return s < 1 ? 1 : (int)s;
}

extern "C" size_t sm80_kvcache_workspace(const fa_problem *p, int splits) {
    if (splits <= 1) return 0;
    const size_t rows = (size_t)splits * (size_t)(p->B * p->Hq * p->Sq);
    return ((rows * (size_t)p->Dv * sizeof(float) + 255) & ~(size_t)255) + rows * sizeof(float);
}

extern "C" fa_status sm80_kvcache(const fa_problem *p, const fa_exec *x, int splits) {
    cudaStream_t stream = (cudaStream_t)x->stream;
    const bool bf16 = p->dtype == FA_BF16;
    if (p->k_new.data && p->S_new > 0 && p->B > 0) {
        dim3 grid((unsigned)p->S_new, (unsigned)p->B);
        if (bf16) sm80_kv_append<__nv_bfloat16><<<grid, 256, 0, stream>>>(*p);
        else sm80_kv_append<__half><<<grid, 256, 0, stream>>>(*p);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 kv append: %s", cudaGetErrorString(e));
    }
    if (splits <= 1) return sm80_fwd_launch(p, x, 1, NULL, NULL);

    const size_t rows = (size_t)splits * (size_t)(p->B * p->Hq * p->Sq);
    float *o_part = (float *)x->workspace;
    float *lse_part = (float *)((char *)x->workspace + ((rows * (size_t)p->Dv * sizeof(float) + 255) & ~(size_t)255));
    fa_status st = sm80_fwd_launch(p, x, splits, o_part, lse_part);
    if (st != FA_OK) return st;
    if (p->Sq == 0 || p->Hq == 0 || p->B == 0) return FA_OK;
    dim3 grid((unsigned)p->Sq, (unsigned)p->Hq, (unsigned)p->B);
    if (bf16) sm80_split_combine<__nv_bfloat16><<<grid, 128, 0, stream>>>(*p, splits, o_part, lse_part);
    else sm80_split_combine<__half><<<grid, 128, 0, stream>>>(*p, splits, o_part, lse_part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "sm80 split combine: %s", cudaGetErrorString(e));
    return FA_OK;
}

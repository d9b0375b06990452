/*
 * Exact merge of partial attention results over disjoint key sets:
 *   lse = log(sum_i exp(lse_i)),  out = sum_i exp(lse_i - lse) out_i.
 * The descriptions of the parts travel in the kernel's parameters, so no
 * workspace and no host-to-device copy is needed.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "sm80.h"
#include "tile.cuh"

#define MERGE_MAX_PARTS 96

typedef struct merge_part_dev {
    const void *o;
    int64_t sb, ss, sh;
    const float *lse;
    int64_t lse_sb, lse_sh, lse_ss;
    int dtype;
} merge_part_dev;

typedef struct merge_args {
    int n;
    int64_t S, H, Dv;
    void *out;
    int64_t sb, ss, sh;
    int out_dtype;
    float *lse;
    int64_t lse_sb, lse_sh, lse_ss;
    merge_part_dev parts[MERGE_MAX_PARTS];
} merge_args;

__device__ __forceinline__ float load_any(const void *base, int dtype, int64_t idx) {
    if (dtype == FA_F32) return ((const float *)base)[idx];
    if (dtype == FA_F16) return __half2float(((const __half *)base)[idx]);
    return __bfloat162float(((const __nv_bfloat16 *)base)[idx]);
}

__device__ __forceinline__ void store_any(void *base, int dtype, int64_t idx, float v) {
    if (dtype == FA_F32) ((float *)base)[idx] = v;
    else if (dtype == FA_F16) ((__half *)base)[idx] = __float2half_rn(v);
    else ((__nv_bfloat16 *)base)[idx] = __float2bfloat16_rn(v);
}

/* One CTA per (row, head, batch). out and lse may alias part 0: the lses are
 * read into shared memory before the barrier and lse is written after it;
 * each out element is read and written by the same thread. */
__global__ void sm80_merge_kernel(const __grid_constant__ merge_args a) {
    __shared__ float part_lse[MERGE_MAX_PARTS];
    const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    for (int k = threadIdx.x; k < a.n; k += blockDim.x) {
        const merge_part_dev &q = a.parts[k];
        part_lse[k] = q.lse[b * q.lse_sb + h * q.lse_sh + i * q.lse_ss];
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int k = 0; k < a.n; ++k) mx = fmaxf(mx, part_lse[k]);
    float sum = 0.0f;
    if (mx != -INFINITY) /* all -inf: out 0, lse -inf */
        for (int k = 0; k < a.n; ++k) sum += expf(part_lse[k] - mx);
    const float lse = sum > 0.0f ? mx + logf(sum) : -INFINITY;
    for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k < a.n; ++k) {
            const merge_part_dev &q = a.parts[k];
            if (part_lse[k] != -INFINITY) acc += expf(part_lse[k] - lse) * load_any(q.o, q.dtype, b * q.sb + i * q.ss + h * q.sh + d);
        }
        store_any(a.out, a.out_dtype, b * a.sb + i * a.ss + h * a.sh + d, acc);
    }
    if (threadIdx.x == 0 && a.lse) a.lse[b * a.lse_sb + h * a.lse_sh + i * a.lse_ss] = lse;
}

extern "C" fa_status sm80_merge(const fa_merge_problem *m, const fa_exec *x) {
    if (m->n > MERGE_MAX_PARTS)
        return fa_set_error(FA_ERR_UNSUPPORTED, "n: the CUDA merge takes at most %d parts, got %d", MERGE_MAX_PARTS, m->n);
    if (m->B == 0 || m->S == 0 || m->H == 0) return FA_OK;
    if (m->S > 0x7fffffff || m->H > 65535 || m->B > 65535)
        return fa_set_error(FA_ERR_UNSUPPORTED, "merge: grid too large");
    merge_args a;
    a.n = m->n;
    a.S = m->S;
    a.H = m->H;
    a.Dv = m->Dv;
    a.out = m->out.data;
    a.sb = m->out.sb;
    a.ss = m->out.ss;
    a.sh = m->out.sh;
    a.out_dtype = (int)m->out_dtype;
    a.lse = m->lse;
    a.lse_sb = m->lse_sb;
    a.lse_sh = m->lse_sh;
    a.lse_ss = m->lse_ss;
    for (int k = 0; k < m->n; ++k) {
        const fa_merge_part *src = &m->parts[k];
        merge_part_dev *d = &a.parts[k];
        d->o = src->o.data;
        d->sb = src->o.sb;
        d->ss = src->o.ss;
        d->sh = src->o.sh;
        d->lse = src->lse;
        d->lse_sb = src->lse_sb;
        d->lse_sh = src->lse_sh;
        d->lse_ss = src->lse_ss;
        d->dtype = (int)src->dtype;
    }
    dim3 grid((unsigned)m->S, (unsigned)m->H, (unsigned)m->B);
    sm80_merge_kernel<<<grid, 128, 0, (cudaStream_t)x->stream>>>(a);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fa_set_error(FA_ERR_CUDA, "merge: %s", cudaGetErrorString(e));
    return FA_OK;
}

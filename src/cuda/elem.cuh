/*
 * Scalar conversions between the 16-bit storage types (f16, bf16) and float,
 * shared by every CUDA kernel family.
 */
#ifndef FA_CUDA_ELEM_CUH
#define FA_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

#endif /* FA_CUDA_ELEM_CUH */

/* cuda_common.cuh — what every .cu file of the backend shares: the device
 * context, the error macro, warp reductions and f16/bf16 loads (cw_dev_*:
 * quant.h declares the host cw_f16_to_f32 / cw_bf16_to_f32 under C linkage). */
#ifndef CW_CUDA_COMMON_CUH
#define CW_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "base/err.h"
#include "cuda/cuda.h"

/* One device's context (STYLE §8): passed first to every launcher. */
struct cw_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    struct cw_cuda_device_info info;
};

/* Turns a failed CUDA runtime call into a cw_err with file:line; returns -1. */
#define CW_CUDA_TRY(err, call)                                                              \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess)                                                              \
            return cw_errf((err), CW_ERR_DEVICE, "cuda: %s:%d: %s: %s", __FILE__, __LINE__, \
                           #call, cudaGetErrorString(e_));                                  \
    } while (0)

/* After a launch: reports a bad configuration at once. */
#define CW_CUDA_LAUNCHED(err) CW_CUDA_TRY(err, cudaGetLastError())

#define CW_CUBLAS_TRY(err, call)                                                             \
    do {                                                                                     \
        cublasStatus_t s_ = (call);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return cw_errf((err), CW_ERR_DEVICE, "cublas: %s:%d: %s: status %d", __FILE__,   \
                           __LINE__, #call, (int)s_);                                        \
    } while (0)

/* Sum over a warp, in a fixed butterfly order (deterministic). */
static __device__ __forceinline__ float cw_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float cw_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float cw_dev_f16_to_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ float cw_dev_bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

#endif

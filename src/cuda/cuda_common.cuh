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
    bool pdl; /* launch kernels with programmatic dependent launch (sm_90+) */
    /* A second stream for a decode product that shares its x with the one
     * before it but not its output (cw_k_matmul_multi's second Q8_K type):
     * forked after x's quantising launch, joined before the next launch,
     * so that the two products stream at once (cw_cuda_set_fork). */
    cudaStream_t side;
    cudaEvent_t fork_ev, join_ev;
    bool fork;
};

/* Programmatic dependent launch (Hopper on): a kernel launched by cw_launch
 * may be scheduled while the launch before it still runs, so that its start
 * (launch, block setup, weight prefetch) overlaps the previous kernel's
 * tail. The contract every such kernel keeps: cw_pdl_wait() before its
 * first read of anything an earlier launch wrote and before its first write
 * (it returns once the previous grid has completed and its memory is
 * visible, so ordering stays transitive), then cw_pdl_launch_dependents(),
 * so that at most the next kernel is waiting early. Reads of weights (never
 * written on the device after upload) may come before the wait, and so may
 * reads of what the launch before the previous one (or earlier) wrote: the
 * previous kernel let this one start only after its own wait, i.e. once
 * that launch had completed; and so may reads of what the host uploaded
 * before the launch sequence (the decode position). Every such read moved
 * before the wait takes a dependent round trip off the chain of launches:
 * the decode's small kernels are bound by those chains, not by bytes.
 * Below sm_90 both are no-ops and cw_launch launches plainly. */
static __device__ __forceinline__ void cw_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void cw_pdl_launch_dependents(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Launches kernel k on stream s, with the programmatic-serialisation
 * attribute when pdl (the kernel then keeps the contract above) and in
 * clusters of cx blocks where cx > 1; returns the launch's error. */
template <typename... P, typename... A>
static cudaError_t cw_launch_cfg(cudaStream_t s, bool pdl, unsigned cx, void (*k)(P...),
                                 dim3 grid, dim3 block, size_t smem, A... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    if (pdl) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cx > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cx;
        at[n].val.clusterDim.y = 1;
        at[n++].val.clusterDim.z = 1;
    }
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, k, ((P)args)...);
}

/* cw_launch_cfg without clusters. */
template <typename... P, typename... A>
static cudaError_t cw_launch(cudaStream_t s, bool pdl, void (*k)(P...), dim3 grid, dim3 block,
                             size_t smem, A... args)
{
    return cw_launch_cfg(s, pdl, 1, k, grid, block, smem, args...);
}

/* cw_launch in clusters of cx blocks along x (sm_90+; grid.x a multiple of
 * cx). */
template <typename... P, typename... A>
static cudaError_t cw_launch_cluster(cudaStream_t s, bool pdl, unsigned cx, void (*k)(P...),
                                     dim3 grid, dim3 block, size_t smem, A... args)
{
    return cw_launch_cfg(s, pdl, cx, k, grid, block, smem, args...);
}

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
/* 16 bytes global -> shared by cp.async (sm_80+; both 16-byte aligned): no
 * register round trip, every copy in flight at once; committed in groups
 * (cw_cp_commit) and waited for per thread (cw_cp_wait<N>: all but the N
 * newest groups landed). Below sm_80 a plain copy and no-ops. */
static __device__ __forceinline__ void cw_cp16(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
    *(uint4 *)dst = *(const uint4 *)src;
#endif
}

static __device__ __forceinline__ void cw_cp_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int N>
static __device__ __forceinline__ void cw_cp_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* every cp.async of this thread landed, committed or not */
static __device__ __forceinline__ void cw_cp_wait_all(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

static __device__ __forceinline__ float cw_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The same butterfly in double (the softmax and norm sums). */
static __device__ __forceinline__ double cw_warp_sum(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The sum in unsigned integers (exact in any order): one redux on sm_80 on. */
static __device__ __forceinline__ unsigned cw_warp_sum(unsigned v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
#endif
}

static __device__ __forceinline__ float cw_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* σ(x) = 1/(1 + e^-x), the CPU's cw_sigmoid formula (CUDA's expf). */
static __device__ __forceinline__ float cw_dev_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
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

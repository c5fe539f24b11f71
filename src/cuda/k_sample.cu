/* k_sample.cu — greedy sampling on the device: the argmax of each logits
 * row, so that greedy decode reads back one id instead of V floats (see
 * kernels.h).
 *
 * One block of 1024 threads per row, 16-byte loads when the row allows. The
 * reduction compares (value, index) pairs under a strict total order (larger
 * value, then lower index), so its result is the row's first maximum
 * whatever the reduction's shape: the same id as the CPU's left-to-right
 * scan. NaN never wins (the CPU's `>` scan skips it too, except at index 0,
 * where a NaN first logit makes the CPU answer 0: a model that emits NaN is
 * broken either way); a row of NaN answers 0.
 *
 * One block per row reads 1 MB of a 248,320-entry vocabulary at one SM's
 * bandwidth; a split over several blocks would need scratch the launcher
 * does not take. */
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "cuda/kernels.h"

#define ARGMAX_THREADS 1024

static __device__ __forceinline__ void take(float v, int64_t i, float *bv, int64_t *bi)
{
    // NaN fails both comparisons; an earlier index wins a tie
    if (v > *bv || (v == *bv && i < *bi))
        *bv = v, *bi = i;
}

static __global__ void argmax_kernel(const float *logits, int64_t V, int32_t *out)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const float *x = logits + (int64_t)blockIdx.x * V;
    float bv = -INFINITY;
    int64_t bi = V; /* none yet: loses every tie */
    const int tid = threadIdx.x;
    if (((uintptr_t)x & 15) == 0) {
        const int64_t n4 = V / 4;
        const float4 *x4 = (const float4 *)x;
        for (int64_t j = tid; j < n4; j += blockDim.x) {
            const float4 q = x4[j];
            take(q.x, 4 * j, &bv, &bi);
            take(q.y, 4 * j + 1, &bv, &bi);
            take(q.z, 4 * j + 2, &bv, &bi);
            take(q.w, 4 * j + 3, &bv, &bi);
        }
        for (int64_t j = 4 * n4 + tid; j < V; j += blockDim.x)
            take(x[j], j, &bv, &bi);
    } else {
        for (int64_t j = tid; j < V; j += blockDim.x)
            take(x[j], j, &bv, &bi);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        take(ov, oi, &bv, &bi);
    }
    const int lane = tid & 31, warp = tid >> 5, n_warp = blockDim.x >> 5;
    if (lane == 0)
        sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = lane < n_warp ? sv[lane] : -INFINITY;
        bi = lane < n_warp ? si[lane] : V;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            take(ov, oi, &bv, &bi);
        }
        if (lane == 0)
            out[blockIdx.x] = (int32_t)(bi < V ? bi : 0);
    }
}

int cw_k_argmax(struct cw_cuda *c, const float *d_logits, int64_t V, int64_t n_tok,
                int32_t *d_out, struct cw_err *err)
{
    if (V <= 0 || V > INT32_MAX || n_tok <= 0 || n_tok > INT32_MAX || !d_logits || !d_out)
        return cw_errf(err, CW_ERR_INVALID, "cuda: argmax: bad shape (%lld rows of %lld)",
                       (long long)n_tok, (long long)V);
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, argmax_kernel, dim3((unsigned)n_tok),
                               dim3(ARGMAX_THREADS), 0, d_logits, V, d_out));
    return 0;
}

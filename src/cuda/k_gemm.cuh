/* k_gemm.cuh — internal entry points of the prefill products (k_moe_gemm.cu)
 * that k_gemv.cu's launchers dispatch large batches to; kernels.h holds the
 * public contract. */
#ifndef CW_K_GEMM_CUH
#define CW_K_GEMM_CUH

#include "cuda/k_quant.cuh"
#include "cuda/kernels.h"

/* Routed experts grouped by expert on the device (f16 tensor cores): the
 * same contract as cw_k_moe_gate_up / cw_k_moe_down, for batches above the
 * GEMV regime. Expert ids outside [0, CW_K_MOE_GEMM_XMAX) count as invalid
 * (act 0, no contribution), as negative ids do in the GEMV regime. */
#define CW_K_MOE_GEMM_XMAX 1024

int cw_k_moe_gemm_gate_up(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                          const float *d_x, const int32_t *d_ids, int K, int64_t n_tok,
                          float *d_act, void *d_scratch, struct cw_err *err);
/* sorted: d_scratch holds the grouping of these pairs that
 * cw_k_moe_gemm_gate_up left there (cw_k_moe_down_after_gate_up) */
int cw_k_moe_gemm_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                       const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                       float *d_h, void *d_scratch, bool sorted, struct cw_err *err);
/* Bytes of scratch both need for n_tok tokens, experts of E -> F (gate/up)
 * and F -> E (down). */
size_t cw_k_moe_gemm_scratch(int64_t E, int64_t F, int K, int64_t n_tok);

/* ---- activations to f16 (both prefill products) ---------------------------- */

/* The largest of v over the NT threads of a block (NT % 32 == 0), returned
 * to every thread; fmaxf skips NaN. */
template <int NT>
static __device__ float cw_block_max(float v)
{
    __shared__ float red[NT / 32];
    v = cw_warp_max(v);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = red[0];
#pragma unroll
    for (int w = 1; w < NT / 32; w++)
        m = fmaxf(m, red[w]);
    __syncthreads(); /* red is free again */
    return m;
}

/* max |x[i]| over a row of n floats (n % 4 == 0, 16-byte aligned) by the NT
 * threads of a block. */
template <int NT>
static __device__ float cw_row_absmax(const float *xr, int n)
{
    float m = 0.0f;
    for (int i = threadIdx.x * 4; i < n; i += NT * 4) {
        float4 v = *(const float4 *)(xr + i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    return cw_block_max<NT>(m);
}

/* The power of two 2^s that puts m in [2^14, 2^15): x·2^s (|x| <= m) cannot
 * overflow f16 and stays clear of its subnormals down to m·2^-29. s = 0 for
 * m = 0, infinite or NaN (those values pass through as they are). */
static __device__ __forceinline__ int cw_f16_shift(float m)
{
    int s = 0;
    if (m > 0.0f && m <= 3.402823466e38f) {
        int e;
        frexpf(m, &e); /* m < 2^e <= 2 m */
        s = min(max(15 - e, -60), 60);
    }
    return s;
}

/* yr[i] = f16(xr[i]·2^s) (exact scaling, one rounding) for a row of n floats
 * (n % 4 == 0, both 16/8-byte aligned) by the NT threads of a block. */
template <int NT>
static __device__ void cw_row_to_f16(const float *xr, int n, int s, __half *yr)
{
    const float sc = __int_as_float((127 + s) << 23);
    for (int i = threadIdx.x * 4; i < n; i += NT * 4) {
        float4 v = *(const float4 *)(xr + i);
        __half2 lo = __floats2half2_rn(v.x * sc, v.y * sc), hi = __floats2half2_rn(v.z * sc, v.w * sc);
        uint2 o;
        o.x = *(uint32_t *)&lo, o.y = *(uint32_t *)&hi;
        *(uint2 *)(yr + i) = o;
    }
}

#endif

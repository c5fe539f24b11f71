/* k_sample.cu — greedy sampling on the device: the argmax of each logits
 * row, so that greedy decode reads back one id instead of V floats (see
 * kernels.h).
 *
 * The reduction compares (value, index) pairs under a strict total order
 * (larger value, then lower index), so its result is the row's first
 * maximum whatever the reduction's shape: the same id as the CPU's
 * left-to-right scan. NaN never wins (the CPU's `>` scan skips it too,
 * except at index 0, where a NaN first logit makes the CPU answer 0: a
 * model that emits NaN is broken either way); a row of NaN answers 0.
 *
 * With scratch, a row is split over ARGMAX_SPLIT blocks, each of which
 * leaves its slice's best pair in scratch and counts itself in; the last
 * block of the row reduces the pairs. Without, one block of 1024 threads
 * reads the whole row: 1 MB of a 248,320-entry vocabulary at one SM's
 * bandwidth, which cost a decode step 14-21 µs (H100, the graph's time
 * with and without the launch). */
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

/* The best pair of x[j0, j1) over this thread's share (blockDim.x
 * threads; 16-byte loads where x and j0 allow). */
static __device__ __forceinline__ void scan(const float *x, int64_t j0, int64_t j1, float *bv,
                                            int64_t *bi)
{
    const int64_t tid = threadIdx.x;
    if ((((uintptr_t)(x + j0)) & 15) == 0) {
        const int64_t n4 = (j1 - j0) / 4;
        const float4 *x4 = (const float4 *)(x + j0);
        for (int64_t j = tid; j < n4; j += blockDim.x) {
            const float4 q = x4[j];
            take(q.x, j0 + 4 * j, bv, bi);
            take(q.y, j0 + 4 * j + 1, bv, bi);
            take(q.z, j0 + 4 * j + 2, bv, bi);
            take(q.w, j0 + 4 * j + 3, bv, bi);
        }
        for (int64_t j = j0 + 4 * n4 + tid; j < j1; j += blockDim.x)
            take(x[j], j, bv, bi);
    } else {
        for (int64_t j = j0 + tid; j < j1; j += blockDim.x)
            take(x[j], j, bv, bi);
    }
}

/* The warp's best pair, in every lane. */
static __device__ __forceinline__ void warp_best(float *bv, int64_t *bi)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, *bv, o);
        const int64_t oi = __shfl_xor_sync(0xffffffffu, *bi, o);
        take(ov, oi, bv, bi);
    }
}

/* The block's best pair, in warp 0 (V: the index that loses every tie). */
static __device__ __forceinline__ void block_best(float *bv, int64_t *bi, int64_t V)
{
    __shared__ float sv[32];
    __shared__ int64_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warp = blockDim.x >> 5;
    warp_best(bv, bi);
    if (lane == 0)
        sv[warp] = *bv, si[warp] = *bi;
    __syncthreads();
    if (warp == 0) {
        *bv = lane < n_warp ? sv[lane] : -INFINITY;
        *bi = lane < n_warp ? si[lane] : V;
        warp_best(bv, bi);
    }
}

/* One block per row. */
static __global__ void argmax_kernel(const float *logits, int64_t V, int32_t *out)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    float bv = -INFINITY;
    int64_t bi = V; /* none yet: loses every tie */
    scan(logits + (int64_t)blockIdx.x * V, 0, V, &bv, &bi);
    block_best(&bv, &bi, V);
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int32_t)(bi < V ? bi : 0);
}

#define ARGMAX_SPLIT 64       /* blocks per row */
#define ARGMAX_SPLIT_THREADS 256

/* Scratch: per row AM_ROW bytes, a count (zero between calls) and then
 * ARGMAX_SPLIT pairs (the value's bits, the index) 16 bytes on: the same
 * place for row r whatever the call's row count. */
#define AM_ROW (16 + ARGMAX_SPLIT * sizeof(int2))

/* Block (b, row): the best pair of slice b of the row (a multiple of 4
 * entries, so that every slice of an aligned row loads by 16 bytes) into
 * scratch, then its count; the row's last block reduces the row's pairs
 * (in any order: the same pair, see the top) and sets the count back to
 * zero for the next call. */
static __global__ void __launch_bounds__(ARGMAX_SPLIT_THREADS)
    argmax_split_kernel(const float *logits, int64_t V, int32_t *out, char *scratch)
{
    __shared__ bool last;
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int64_t row = blockIdx.y, per = (V + 4 * ARGMAX_SPLIT - 1) / (4 * ARGMAX_SPLIT) * 4;
    unsigned *count = (unsigned *)(scratch + row * AM_ROW);
    int2 *part = (int2 *)(scratch + row * AM_ROW + 16);
    const int64_t j0 = min((int64_t)blockIdx.x * per, V), j1 = min(j0 + per, V);
    float bv = -INFINITY;
    int64_t bi = V;
    scan(logits + row * V, j0, j1, &bv, &bi);
    block_best(&bv, &bi, V);
    if (threadIdx.x == 0) {
        part[blockIdx.x] =
            make_int2(__float_as_int(bv), (int)(bi < V ? bi : INT32_MAX));
        __threadfence(); /* the pair before the count */
        last = atomicAdd(count, 1u) == ARGMAX_SPLIT - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x >= 32)
        return;
    __threadfence(); /* every block's pair is in: read them past L1 */
    const int lane = threadIdx.x;
    bv = -INFINITY;
    bi = V;
    for (int b = lane; b < ARGMAX_SPLIT; b += 32) {
        const int2 q = __ldcg(&part[b]);
        take(__int_as_float(q.x), q.y < V ? q.y : V, &bv, &bi);
    }
    warp_best(&bv, &bi);
    if (lane == 0) {
        out[row] = (int32_t)(bi < V ? bi : 0);
        *count = 0;
    }
}

size_t cw_k_argmax_scratch(int64_t n_tok)
{
    return (size_t)n_tok * AM_ROW;
}

int cw_k_argmax(struct cw_cuda *c, const float *d_logits, int64_t V, int64_t n_tok,
                int32_t *d_out, void *d_scratch, struct cw_err *err)
{
    if (V <= 0 || V > INT32_MAX || n_tok <= 0 || n_tok > 65535 || !d_logits || !d_out)
        return cw_errf(err, CW_ERR_INVALID, "cuda: argmax: bad shape (%lld rows of %lld)",
                       (long long)n_tok, (long long)V);
    if (!d_scratch) {
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, argmax_kernel, dim3((unsigned)n_tok),
                                   dim3(ARGMAX_THREADS), 0, d_logits, V, d_out));
        return 0;
    }
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, argmax_split_kernel,
                               dim3(ARGMAX_SPLIT, (unsigned)n_tok), dim3(ARGMAX_SPLIT_THREADS), 0,
                               d_logits, V, d_out, (char *)d_scratch));
    return 0;
}

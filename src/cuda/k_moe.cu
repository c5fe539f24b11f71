/* k_moe.cu — the MoE router on the device: per token, softmax over the X
 * router logits, the top K (ties to the lower id, NaN last), renormalised
 * (see kernels.h). The twin of cw_moe_route in cpu_moe.c, step for step.
 *
 * Three kernels compute the same function: up to ROUTE_X_MAX experts and
 * K <= 32 (the model: 256, 8), one block per token sorts each run of 32
 * experts in a warp, then ranks the runs' top K among themselves (decode's
 * route: a few short steps); up to WARP_X_MAX, one warp per token holds its
 * logits in registers; larger routers take one block per token. The
 * softmax follows the CPU's numerics: max in f32, e^(x-max) in f32, the sum
 * in double (here a fixed tree over strided partials instead of a
 * sequential loop: both within X·2^-53 of exact, so the f32 reciprocal
 * agrees), scaled by the f32 reciprocal. CUDA's expf differs from glibc's by
 * up to 2 ulp, so probabilities and weights agree with the CPU to a few
 * ulps; the selection is exact whenever the CPU's candidates are farther
 * apart than that. The top-K follows a strict total order (probability,
 * then lower id), so K rounds of a reduction, the sorted runs' ranks, or
 * any other selection give the same slots. */
#include <math.h>

#include "cpu/cpu_moe.h"
#include "cuda/cuda_common.cuh"
#include "cuda/kernels.h"

#define ROUTE_THREADS 128
#define ROUTE_MAX_K 64

/* a ranks before b (ids, -1 = none): larger probability, then lower id; NaN
 * after every number; none after everything */
static __device__ __forceinline__ bool ranks_before(float pa, int a, float pb, int b)
{
    if (b < 0)
        return a >= 0;
    if (a < 0)
        return false;
    if (isnan(pb))
        return !isnan(pa) || a < b;
    if (isnan(pa))
        return false;
    return pa > pb || (pa == pb && a < b);
}

/* The best (id, probability) of the warp under ranks_before, in every lane:
 * a strict total order, so the butterfly's shape does not matter. */
static __device__ __forceinline__ void warp_best(int &best, float &bp)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const int ob = __shfl_xor_sync(0xffffffffu, best, o);
        const float op = __shfl_xor_sync(0xffffffffu, bp, o);
        if (ranks_before(op, ob, bp, best))
            best = ob, bp = op;
    }
}

static __global__ void route_kernel(const float *logits, int X, int K, int32_t *ids, float *wts)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float p[]; /* [X] probabilities, then int taken[X] */
    int *taken = (int *)(p + X);
    __shared__ float shf[32];
    __shared__ double shd[32];
    __shared__ int shi[32];
    __shared__ int sel[ROUTE_MAX_K];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n_warp = blockDim.x >> 5;
    const float *x = logits + (int64_t)blockIdx.x * X;

    /* max, as the CPU: comparisons skip NaN; fmaxf does the same */
    float m = -INFINITY;
    for (int i = tid; i < X; i += blockDim.x)
        m = x[i] > m ? x[i] : m;
    m = cw_warp_max(m);
    if (lane == 0)
        shf[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < n_warp ? shf[lane] : -INFINITY;
        m = cw_warp_max(m);
        if (lane == 0)
            shf[0] = m;
    }
    __syncthreads();
    m = shf[0];

    /* e^(x-max) and its sum in double, in a fixed tree */
    double s = 0.0;
    for (int i = tid; i < X; i += blockDim.x) {
        const float e = expf(x[i] - m);
        p[i] = e;
        taken[i] = 0;
        s += (double)e;
    }
    s = cw_warp_sum(s);
    if (lane == 0)
        shd[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < n_warp ? shd[lane] : 0.0;
        s = cw_warp_sum(s);
        if (lane == 0)
            shd[0] = s;
    }
    __syncthreads();
    const float inv = (float)(1.0 / shd[0]);
    for (int i = tid; i < X; i += blockDim.x)
        p[i] *= inv;
    __syncthreads();

    /* top K: one reduction per slot under the total order */
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bp = 0.0f;
        for (int i = tid; i < X; i += blockDim.x)
            if (!taken[i] && ranks_before(p[i], i, bp, best))
                best = i, bp = p[i];
        warp_best(best, bp);
        if (lane == 0) {
            shi[warp] = best;
            shf[warp] = bp;
        }
        __syncthreads();
        if (tid == 0) {
            for (int w = 1; w < n_warp; w++)
                if (ranks_before(shf[w], shi[w], bp, best))
                    best = shi[w], bp = shf[w];
            sel[k] = best;
            taken[best] = 1;
        }
        __syncthreads();
    }

    /* weights: the selected probabilities over their f32 sum, in slot order */
    if (tid == 0) {
        float sum = 0.0f;
        for (int k = 0; k < K; k++)
            sum += p[sel[k]];
        if (sum < CW_MOE_WEIGHT_SUM_MIN)
            sum = CW_MOE_WEIGHT_SUM_MIN;
        int32_t *io = ids + (int64_t)blockIdx.x * K;
        float *wo = wts + (int64_t)blockIdx.x * K;
        for (int k = 0; k < K; k++) {
            io[k] = sel[k];
            wo[k] = p[sel[k]] / sum;
        }
    }
}

/* ---- one block per token, one thread per expert ---------------------------- */

#define ROUTE_X_MAX 256 /* experts: 8 runs of 32 */
#define ROUTE_RUNS (ROUTE_X_MAX / 32)

static __device__ __forceinline__ unsigned long long route_key(float p, int i)
{
    /* p >= 0 or NaN: the bits of a non-negative float order as the float */
    const unsigned u = isnan(p) ? 0u : __float_as_uint(p) + 1u;
    return (unsigned long long)u << 32 | (unsigned)~i;
}

/* The probability a key was made from (NaN for NaN's). */
static __device__ __forceinline__ float route_key_p(unsigned long long key)
{
    const unsigned u = (unsigned)(key >> 32);
    return u ? __uint_as_float(u - 1u) : __int_as_float(0x7fc00000);
}

/* The warp's 32 keys sorted, largest in lane 0 (bitonic; keys distinct). */
static __device__ __forceinline__ unsigned long long route_warp_sort(unsigned long long v)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 2; k <= 32; k <<= 1)
#pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1) {
            const unsigned long long o = __shfl_xor_sync(0xffffffffu, v, j);
            /* the lower lane of a pair keeps the larger key in the runs
             * that end descending (lane & k == 0), the smaller in the others */
            const bool keep_max = ((lane & j) == 0) == ((lane & k) == 0);
            v = keep_max == (o > v) ? o : v;
        }
    return v;
}

/* Up to ROUTE_X_MAX experts (the model's 256) and K <= RANK_MAX_K, one block
 * per token, one thread per expert: each warp sorts its run of 32 keys, the
 * runs' top K (ROUTE_RUNS·K candidates) are each ranked among the
 * candidates, and the K of rank < K take their slots. A key of the overall
 * top K has every key above it among the candidates, so its rank there is
 * its rank overall. A few short steps: the warp kernel's K rounds of
 * butterflies cost ~20k cycles of dependent latency per token, and ranking
 * every expert against all X (this kernel's form before) ~1.3 µs more per
 * decode route than this (H200, 35B decode 376 -> 384 tok/s). */
#define RANK_MAX_K 32

static __global__ void __launch_bounds__(ROUTE_X_MAX)
    route_rank_kernel(const float *logits, int X, int K, int32_t *ids, float *wts)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    __shared__ unsigned long long cand[ROUTE_RUNS * RANK_MAX_K];
    __shared__ double shd[ROUTE_RUNS];
    __shared__ float shf[ROUTE_RUNS];
    __shared__ float selp[RANK_MAX_K];
    const int i = threadIdx.x, lane = i & 31, warp = i >> 5;
    const int64_t t = blockIdx.x;
    const bool on = i < X;
    const float v = on ? logits[t * X + i] : -INFINITY;
    /* max as the CPU: NaN never wins (fmaxf skips it) */
    float m = cw_warp_max(v);
    if (lane == 0)
        shf[warp] = m;
    __syncthreads();
    m = shf[0];
    for (int w = 1; w < ROUTE_RUNS; w++)
        m = fmaxf(m, shf[w]);
    /* e^(x-max), the sum in double: a butterfly per warp, the warps in
     * order (a warp past X adds +0.0: the same bits) */
    const float e = on ? expf(v - m) : 0.0f;
    double s = cw_warp_sum((double)e);
    if (lane == 0)
        shd[warp] = s;
    __syncthreads();
    s = shd[0];
    for (int w = 1; w < ROUTE_RUNS; w++)
        s += shd[w];
    const float p = __fmul_rn(e, (float)(1.0 / s));
    /* key 0 (past X) ranks below every expert */
    const unsigned long long key = route_warp_sort(on ? route_key(p, i) : 0ull);
    if (lane < K)
        cand[warp * K + lane] = key;
    __syncthreads();
    const int C = ROUTE_RUNS * K; /* a multiple of 8 */
    if (i < C) {
        const unsigned long long mine = cand[i];
        int r[4] = {0, 0, 0, 0}; /* four counters: no chain of dependent adds */
        for (int j = 0; j < C; j += 4)
#pragma unroll
            for (int u = 0; u < 4; u++)
                r[u] += cand[j + u] > mine;
        const int rank = r[0] + r[1] + r[2] + r[3];
        if (rank < K) {
            ids[t * K + rank] = (int32_t)~(unsigned)mine;
            selp[rank] = route_key_p(mine);
        }
    }
    __syncthreads();
    if (i == 0) { /* the selected probabilities' f32 sum, in slot order */
        float sum = 0.0f;
        for (int k = 0; k < K; k++)
            sum += selp[k];
        if (sum < CW_MOE_WEIGHT_SUM_MIN)
            sum = CW_MOE_WEIGHT_SUM_MIN;
        shf[0] = sum;
    }
    __syncthreads();
    if (i < K)
        wts[t * K + i] = selp[i] / shf[0];
}

/* ---- one warp per token ---------------------------------------------------- */

#define WARP_X_MAX 512
#define ROUTE_WARPS 4

template <int RW>
static __global__ void __launch_bounds__(ROUTE_WARPS * 32)
    route_warp_kernel(const float *logits, int X, int K, int64_t n_tok, int32_t *ids, float *wts)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int lane = threadIdx.x & 31;
    const int64_t t = (int64_t)blockIdx.x * ROUTE_WARPS + (threadIdx.x >> 5);
    if (t >= n_tok)
        return;
    const float *x = logits + t * X;
    float p[RW];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < RW; j++) {
        const int i = lane + 32 * j;
        p[j] = i < X ? x[i] : -INFINITY;
        m = p[j] > m ? p[j] : m; /* as the CPU: NaN never wins */
    }
    m = cw_warp_max(m);
    /* e^(x-max), the sum in double: each lane's in j order, then a butterfly */
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < RW; j++)
        if (lane + 32 * j < X) {
            p[j] = expf(p[j] - m);
            s += (double)p[j];
        }
    s = cw_warp_sum(s);
    const float inv = (float)(1.0 / s);
#pragma unroll
    for (int j = 0; j < RW; j++)
        p[j] *= inv;
    /* top K: per slot, the lane's best untaken value, then a butterfly under
     * the strict total order (every lane ends with the same winner) */
    unsigned taken = 0;
    float sel_p = 0.0f, sum = 0.0f;
    int sel_i = -1;
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bp = 0.0f;
#pragma unroll
        for (int j = 0; j < RW; j++) {
            const int i = lane + 32 * j;
            if (i < X && !(taken >> j & 1) && ranks_before(p[j], i, bp, best))
                best = i, bp = p[j];
        }
        warp_best(best, bp);
        if ((best & 31) == lane)
            taken |= 1u << (best >> 5);
        sum += bp; /* the selected probabilities' f32 sum, in slot order */
        if (lane == k)
            sel_i = best, sel_p = bp;
    }
    if (sum < CW_MOE_WEIGHT_SUM_MIN)
        sum = CW_MOE_WEIGHT_SUM_MIN;
    if (lane < K) {
        ids[t * K + lane] = sel_i;
        wts[t * K + lane] = sel_p / sum;
    }
}

int cw_k_moe_route(struct cw_cuda *c, const float *d_logits, int X, int K, int64_t n_tok,
                   int32_t *d_ids, float *d_wts, struct cw_err *err)
{
    if (X <= 0 || K <= 0 || K > X || K > ROUTE_MAX_K || n_tok <= 0 || n_tok > INT32_MAX)
        return cw_errf(err, CW_ERR_INVALID, "cuda: moe_route: bad routing %d of %d experts "
                       "for %lld tokens (at most %d)", K, X, (long long)n_tok, ROUTE_MAX_K);
    if (X <= ROUTE_X_MAX && K <= RANK_MAX_K) {
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, route_rank_kernel, dim3((unsigned)n_tok),
                                   dim3(ROUTE_X_MAX), 0, d_logits, X, K, d_ids, d_wts));
        return 0;
    }
    if (X <= WARP_X_MAX && K <= 32) {
        const dim3 grid((unsigned)((n_tok + ROUTE_WARPS - 1) / ROUTE_WARPS));
        /* X > ROUTE_X_MAX here: 16 logits per lane */
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, route_warp_kernel<16>, grid,
                                   dim3(ROUTE_WARPS * 32), 0, d_logits, X, K, n_tok, d_ids,
                                   d_wts));
        return 0;
    }
    const size_t shmem = (size_t)X * (sizeof(float) + sizeof(int));
    if (shmem > 48 * 1024)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: moe_route: %d experts exceed the "
                       "shared memory of one block", X);
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, route_kernel, dim3((unsigned)n_tok),
                               dim3(ROUTE_THREADS), shmem, d_logits, X, K, d_ids, d_wts));
    return 0;
}

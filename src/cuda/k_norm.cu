/* k_norm.cu — per-row and element-wise kernels: the residual add fused into
 * RMSNorm, and SwiGLU (see kernels.h). Twins of cw_add + cw_rms_norm_rows and
 * cw_swiglu in cpu_ops.c.
 *
 * RMSNorm numerics: the CPU squares in f32 and sums in double, then rounds
 * the mean to f32. Here each thread sums its strided share of the f32
 * squares in double, and the block combines the partials in a fixed tree
 * (warp butterfly, then warp 0 over the warps' sums). Both double sums carry
 * a relative error below n·2^-53 (all terms are positive), far under half an
 * f32 ulp, so the f32 mean, the scale and every output equal the CPU's bit
 * for bit unless the mean falls within ~1e-12 of an f32 rounding boundary,
 * where they differ by one ulp of the scale. */
#include "cuda/k_norm.cuh"
#include "cuda/kernels.h"

#define NORM_THREADS NORM_VTHREADS /* the tree of k_norm.cuh, one virtual thread each */

/* Sum of a double over the block, in a fixed order; every thread gets it. */
static __device__ double block_sum_double(double v, double *sh /* [32] */)
{
    v = cw_warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n_warp = (blockDim.x + 31) >> 5;
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < n_warp ? sh[lane] : 0.0;
        v = cw_warp_sum(v);
        if (lane == 0)
            sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// One block per row: the row is re-read from L1/L2 for the scale pass, which
// keeps the kernel free of per-width register arrays.
static __global__ void add_rmsnorm_kernel(float *h, const float *add, const float *w, float *y,
                                          int64_t ldy, int64_t n, float eps)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    __shared__ double sh[32];
    const int64_t row = blockIdx.x;
    float *hr = h + row * n;
    if (!add) { /* the code the decode kernels' norm epilogue shares */
        cw_rmsnorm_row<NORM_THREADS>(hr, w, y + row * ldy, n, eps, sh);
        return;
    }
    const float *ar = add + row * n;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = hr[i] + ar[i];
        hr[i] = v;
        acc += (double)(v * v);
    }
    const double sum = block_sum_double(acc, sh);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *yr = y + row * ldy;
    // (x·scale)·w, the CPU's order; two products, nothing to contract
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = hr[i] * scale * w[i];
}

int cw_k_add_rmsnorm(struct cw_cuda *c, float *d_h, const float *d_add, const float *d_w,
                     float *d_y, int64_t ldy, int64_t n, int64_t n_rows, float eps,
                     struct cw_err *err)
{
    if (n <= 0 || n_rows <= 0 || ldy < n || n_rows > INT32_MAX || !d_h || !d_w || !d_y)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda: add_rmsnorm: bad shape (%lld rows of %lld, ldy %lld)",
                       (long long)n_rows, (long long)n, (long long)ldy);
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, add_rmsnorm_kernel, dim3((unsigned)n_rows),
                               dim3(NORM_THREADS), 0, d_h, d_add, d_w, d_y, ldy, n, eps));
    return 0;
}

/* ---- SwiGLU ------------------------------------------------------------------
 * silu(g)·u = g/(1+e^-g)·u as the CPU writes it; expf here is CUDA's (max 2
 * ulp) against glibc's, so the results agree to a few ulps, not bits. */

static __global__ void swiglu_kernel(float *y, const float *g, const float *u, int64_t n)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float x = g[i];
        y[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

int cw_k_swiglu(struct cw_cuda *c, float *d_y, const float *d_g, const float *d_u, int64_t n,
                struct cw_err *err)
{
    if (n <= 0 || !d_y || !d_g || !d_u)
        return cw_errf(err, CW_ERR_INVALID, "cuda: swiglu: bad size %lld", (long long)n);
    const int threads = 256;
    int64_t blocks = (n + threads - 1) / threads;
    const int64_t cap = (int64_t)c->info.n_sm * 8; // grid-stride beyond a few waves
    if (blocks > cap)
        blocks = cap > 0 ? cap : 1;
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, swiglu_kernel, dim3((unsigned)blocks),
                               dim3(threads), 0, d_y, d_g, d_u, n));
    return 0;
}

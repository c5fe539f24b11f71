/* k_norm.cuh — RMSNorm of a row as device code that several kernels share:
 * add_rmsnorm_kernel (k_norm.cu), and the "last block normalises" epilogue
 * of the decode kernels that finish the residual stream h (the output
 * projections' GEMV, the MoE down projection), which saves the norm's own
 * launch between them and the next layer's products.
 *
 * The sum of squares runs as NORM_VTHREADS virtual threads (thread v sums
 * elements v, v+256, ... in double, in order; a butterfly per warp of 32
 * virtual threads; warp 0 folds the 8 warp sums by a butterfly), whatever
 * the real block size B (a multiple of 32 dividing 256): so every caller
 * gets the bits of add_rmsnorm_kernel. The numerics are k_norm.cu's. */
#ifndef CW_K_NORM_CUH
#define CW_K_NORM_CUH

#include "cuda/cuda_common.cuh"

#define NORM_VTHREADS 256

/* The norm's scale 1/sqrt(mean + eps) from the B threads' virtual-thread
 * sums acc (thread t holds virtual threads t, t+B, ...): a butterfly per
 * warp of 32 virtual threads, then warp 0's fold of the 8 warp sums. */
template <int B>
static __device__ __forceinline__ float cw_norm_scale(double (&acc)[NORM_VTHREADS / B],
                                                      int64_t n, float eps, double *sh)
{
    constexpr int NQ = NORM_VTHREADS / B;
    const int tid = threadIdx.x, lane = tid & 31;
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        acc[q] = cw_warp_sum(acc[q]);
        if (lane == 0)
            sh[(tid + B * q) >> 5] = acc[q];
    }
    __syncthreads();
    double tot = lane < NORM_VTHREADS / 32 ? sh[lane] : 0.0;
    tot = cw_warp_sum(tot);
    const float mean = (float)(tot / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

/* y = RMSNorm(h)·w over n values, by the B threads of the block (all must
 * call it); h is read through L2 (another block may have written it).
 * sh: 8 doubles of shared memory. Each thread issues NORM_BATCH loads per
 * virtual thread before its first add (one L2 round trip per 2048 values,
 * not one per value: this runs as the serial tail of the kernel that
 * finished h); the adds keep each virtual thread's ascending order. */
#define NORM_BATCH 8
template <int B>
static __device__ void cw_rmsnorm_row(const float *h, const float *w, float *y, int64_t n,
                                      float eps, double *sh)
{
    static_assert(B % 32 == 0 && NORM_VTHREADS % B == 0, "block size");
    constexpr int NQ = NORM_VTHREADS / B;
    const int tid = threadIdx.x;
    double acc[NQ];
#pragma unroll
    for (int q = 0; q < NQ; q++)
        acc[q] = 0.0;
    for (int64_t i0 = tid; i0 < n; i0 += (int64_t)NORM_BATCH * NORM_VTHREADS) {
        float xv[NQ][NORM_BATCH];
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int u = 0; u < NORM_BATCH; u++) {
                const int64_t i = i0 + B * q + (int64_t)NORM_VTHREADS * u;
                xv[q][u] = i < n ? __ldcg(h + i) : 0.0f;
            }
#pragma unroll
        for (int q = 0; q < NQ; q++)
#pragma unroll
            for (int u = 0; u < NORM_BATCH; u++)
                if (i0 + B * q + (int64_t)NORM_VTHREADS * u < n)
                    acc[q] += (double)(xv[q][u] * xv[q][u]);
    }
    const float scale = cw_norm_scale<B>(acc, n, eps, sh);
    /* (x·scale)·w, the CPU's order; two products, nothing to contract */
    for (int64_t i0 = tid; i0 < n; i0 += (int64_t)NORM_BATCH * B) {
        float hv[NORM_BATCH], wv[NORM_BATCH];
#pragma unroll
        for (int u = 0; u < NORM_BATCH; u++) {
            const int64_t i = i0 + (int64_t)B * u;
            hv[u] = i < n ? __ldcg(h + i) : 0.0f;
            wv[u] = i < n ? __ldg(w + i) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NORM_BATCH; u++)
            if (i0 + (int64_t)B * u < n)
                y[i0 + (int64_t)B * u] = __fmul_rn(__fmul_rn(hv[u], scale), wv[u]);
    }
    __syncthreads(); /* sh is free again */
}

/* Copies the row h (n floats) into shared memory hs and returns its norm's
 * scale from there: the virtual-thread sums of cw_rmsnorm_row in the same
 * order, so the same bits. By cp.async through L2, the whole row in one
 * round trip, where it can (sm_80 on, h 16-byte aligned, n a multiple of
 * 4), else by loads through L2; w is asked into L1 meanwhile, or (WS) is
 * already on its way into shared memory (cw_norm_w_stage), waited for here.
 * trigger: the caller's PDL dependents are let go once the row is in. All
 * B threads call it; hs is complete on return. The loop form takes a round
 * trip per batch of 2048 values, then one per 1024 to scale: on the serial
 * tail of a decode kernel, or at the head of one, that is what counts. */
template <int B, bool WS = false>
static __device__ float cw_norm_stage(const float *h, const float *w, int n, float eps,
                                      double *sh, float *hs, bool may_async = true,
                                      bool trigger = false)
{
    constexpr int NQ = NORM_VTHREADS / B;
    const int tid = threadIdx.x;
    bool async = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    async = may_async && n % 4 == 0 && ((uintptr_t)h & 15) == 0;
    if (async) {
        for (int i = 4 * tid; i < n; i += 4 * B) {
            const unsigned d = (unsigned)__cvta_generic_to_shared(hs + i);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(h + i)
                         : "memory");
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
#endif
    if (!async)
        for (int i = tid; i < n; i += B)
            hs[i] = __ldcg(h + i);
    if (!WS)
        for (int i = 32 * tid; i < n; i += 32 * B)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(w + i));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (async || WS) /* WS: cw_norm_w_stage's copies too */
        asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    if (trigger) /* the caller's dependents, once the row is in */
        cw_pdl_launch_dependents();
    __syncthreads();
    double acc[NQ];
#pragma unroll
    for (int q = 0; q < NQ; q++) {
        acc[q] = 0.0;
#pragma unroll 4
        for (int i = tid + B * q; i < n; i += NORM_VTHREADS)
            acc[q] += (double)(hs[i] * hs[i]);
    }
    return cw_norm_scale<B>(acc, n, eps, sh);
}

/* cw_rmsnorm_row through shared memory hs (n floats): the same bits. */
template <int B>
static __device__ void cw_rmsnorm_row_sm(const float *h, const float *w, float *y, int n,
                                         float eps, double *sh, float *hs)
{
    const float scale = cw_norm_stage<B>(h, w, n, eps, sh, hs);
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += B)
        y[i] = __fmul_rn(__fmul_rn(hs[i], scale), __ldg(w + i));
    __syncthreads(); /* sh and hs are free again */
}

/* The normalised row RMSNorm(h)·w left in shared memory hs (n floats), for a
 * kernel that reads x as the norm of h (cw_k_norm_in): the same bits. */
template <int B, bool WS = false>
static __device__ void cw_rmsnorm_row_to_sm(const float *h, const float *w, int n, float eps,
                                            double *sh, float *hs, bool may_async = true,
                                            bool trigger = false)
{
    const float scale = cw_norm_stage<B, WS>(h, w, n, eps, sh, hs, may_async, trigger);
#pragma unroll 4
    for (int i = threadIdx.x; i < n; i += B)
        hs[i] = __fmul_rn(__fmul_rn(hs[i], scale), WS ? w[i] : __ldg(w + i));
    __syncthreads(); /* every value of hs is final */
}

/* The norm's weights w (n floats, never written on the device) into
 * shared memory ws, for cw_rmsnorm_row_to_sm<B, true>: asked for before a
 * kernel's PDL wait, so that the norm after it reads no DRAM (where the
 * next product's first weights queue by then). By cp.async where it can:
 * cw_norm_stage's wait then covers them; else loads, complete on return.
 * The caller's barrier (cw_norm_stage's) comes before any read. */
template <int B>
static __device__ void cw_norm_w_stage(const float *w, int n, float *ws)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (n % 4 == 0 && ((uintptr_t)w & 15) == 0 && ((uintptr_t)ws & 15) == 0) {
        for (int i = 4 * (int)threadIdx.x; i < n; i += 4 * B)
            cw_cp16(ws + i, w + i);
        cw_cp_commit();
        return;
    }
#endif
    for (int i = threadIdx.x; i < n; i += B)
        ws[i] = __ldg(w + i);
}

/* What a decode kernel that finishes h normalises when its last block is
 * done: rows of h (stride ldh) into y (stride ldy). w == NULL: nothing. */
struct cw_norm_epi {
    const float *w;
    float *y;
    int64_t ldy;
    int64_t n;
    float eps;
    unsigned *count; /* zero between launches; the last block resets it */
};

/* Bytes of dynamic shared memory a decode launch with this epilogue gives
 * its blocks at least, for cw_rmsnorm_row_sm (0: no epilogue). */
static __host__ __device__ inline size_t cw_norm_epi_smem(const cw_norm_epi &e)
{
    return e.w ? (size_t)e.n * sizeof(float) : 0;
}

/* Called by every thread of every block after the block's last write of h
 * (no thread may have returned): the block that finishes last (an integer
 * count, so which block it is does not matter to the result) normalises
 * the rows. Deterministic: one block, the fixed tree above. smem: the
 * kernel's dynamic shared memory, free by now; where the launch gave it
 * cw_norm_epi_smem bytes the rows go through it (cw_rmsnorm_row_sm). */
template <int B>
static __device__ void cw_norm_epilogue(const cw_norm_epi &e, const float *h, int64_t ldh,
                                        int rows, uint8_t *smem)
{
    __shared__ unsigned last;
    __shared__ double sh[NORM_VTHREADS / 32];
    if (!e.w)
        return;
    __syncthreads(); /* this block's writes of h happen before thread 0's count */
    if (threadIdx.x == 0) {
        /* release: the block's writes of h are visible before the count
         * moves; acquire: the last block sees every block's (a release/
         * acquire pair, cheaper than the sequentially consistent fences
         * of __threadfence) */
        const unsigned total = gridDim.x * gridDim.y * gridDim.z;
        unsigned old;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(old) : "l"(e.count) : "memory");
        last = old == total - 1;
    }
    __syncthreads();
    if (!last)
        return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr bool async = true;
#else
    constexpr bool async = false;
#endif
    unsigned dyn;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    const bool sm = async && e.n % 4 == 0 && ldh % 4 == 0 &&
                    ((uintptr_t)h & 15) == 0 && (size_t)dyn >= cw_norm_epi_smem(e) &&
                    e.n <= INT32_MAX;
    for (int r = 0; r < rows; r++) {
        if (sm)
            cw_rmsnorm_row_sm<B>(h + r * ldh, e.w, e.y + r * e.ldy, (int)e.n, e.eps, sh,
                                 (float *)smem);
        else
            cw_rmsnorm_row<B>(h + r * ldh, e.w, e.y + r * e.ldy, e.n, e.eps, sh);
    }
    if (threadIdx.x == 0)
        *e.count = 0;
}

#endif

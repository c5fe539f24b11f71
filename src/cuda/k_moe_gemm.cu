/* k_moe_gemm.cu — the routed experts for prefill (batches above the GEMV
 * regime): (token, slot) pairs grouped by expert on the device, then one
 * grouped matrix product per projection on the tensor cores (see k_gemm.cuh).
 *
 * Steps of a launcher, all on the stream, no host synchronisation:
 *  1. sort (one block): a stable counting sort of the pairs by expert id —
 *     16 warps each count a contiguous segment of the pairs per expert (the
 *     16 x XMAX counts in shared memory, 64 KB), a scan turns the counts into
 *     per-(warp, expert) bases, each warp places its segment in order (ranks
 *     from __match_any_sync). The pair list is thus sorted by (expert, pair
 *     index): deterministic. Each expert's run is cut into tiles of BN pairs;
 *     the tile table (expert, first, count) and its length go to scratch.
 *  2. to_f16: the activation rows (x per token for gate/up, act per pair for
 *     down) to f16, each row scaled by a power of two 2^s (exact) that puts
 *     its largest magnitude in [2^14, 2^15): no f16 overflow whatever the
 *     activations' range, and small values stay clear of f16's subnormals.
 *  3. the grouped GEMM: a persistent grid (as many blocks as fit on the
 *     chip) walks the work items (tile, row block); a row block is BM weight
 *     rows of the tile's expert (gate/up: 64 gate rows and the same 64 up
 *     rows, SwiGLU fused in the epilogue). Per K step of 256 a block
 *     dequantises its weight tile (k_quant.cuh: exactly quant_dequant.c's
 *     f32 values) to f16 in shared memory — its loads prefetched into L2
 *     PF_AHEAD steps before — while the pairs' f16 rows arrive by cp.async
 *     one step ahead (double buffer), and 8 warps multiply with
 *     nvcuda::wmma 16x16x16 (f16 in, f32 accumulate; sm_70+), skipping the
 *     second 16 pairs of a tile that has at most 16. The epilogue
 *     multiplies by 2^-s (exact) and writes act[pair][F], or, for down,
 *     y[pair][E] into scratch.
 *  4. combine (down): per token h += Σ_k wts[k]·y[t*K+k] as an fma chain in
 *     order k = 0..K-1 (no atomics: deterministic).
 *
 * Error bound (one output, n = n_in terms): the weight w and the scaled
 * activation x' are each rounded to f16 once (relative 2^-11 each, or an
 * absolute 2^-25 for a weight below f16's normal range, 2^-25·2^-s for x'),
 * products are exact in the tensor cores and summed in f32 (2^-23 per add:
 * the accumulators may truncate rather than round):
 *   |y - Σ w x| <= (2^-10 + 2^-22 + n·2^-23)·Σ|w x| + 2^-25·Σ|x| + 2^-38·max|x|·Σ|w|
 * then the epilogue's own roundings (silu, the product, the combine chain).
 * Weights must be finite in f16 (|w| < 65504: true of the quantised
 * formats' f16 scales times their small integers). The accumulation order
 * inside a tile depends on the hardware only: a pair's result does not
 * depend on which other pairs share its tile. */
#include <mma.h>

#include "cuda/k_gemm.cuh"

using namespace nvcuda;

#define BM 128               /* weight rows per block */
#define BN 32                /* pairs per tile */
#define KS 256               /* elements per K step (a multiple of every QK) */
#define LDS (KS + 8)         /* shared row stride in halves: 16-byte pad against bank conflicts */
#define LDC (BM + 4)         /* epilogue stride in floats */
#define THREADS 256          /* 8 warps, 16 weight rows each */
#define WPT 4                /* weight rows per thread in the dequantisation (32 apart) */
#define PF_AHEAD 2           /* K steps of weights prefetched into L2 ahead of their use */
#define XMAX CW_K_MOE_GEMM_XMAX
#define SORT_THREADS 512     /* = XMAX / 2: two experts per thread in the scans */
#define SW (SORT_THREADS / 32) /* warps of the sort, one segment of the pairs each */
#define SORT_SMEM (SW * XMAX * 4)
#define XPT (BN * (KS / 8) / THREADS) /* 16-byte x granules per thread per K step */
/* Ws [BM][LDS], Xs [2][BN][LDS] (double buffered): 99 KB, what sm_86/89 allow */
#define SMEM_BYTES ((BM + 2 * BN) * LDS * 2)

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ---- scratch layout ------------------------------------------------------ */

struct mg_layout {
    size_t ntile, tiles, pairs, xe, xh, y, total;
    int64_t n_pairs, max_tiles;
};

static mg_layout mg_lay(int64_t E, int64_t F, int K, int64_t n_tok)
{
    mg_layout L;
    L.n_pairs = n_tok * K;
    L.max_tiles = L.n_pairs / BN + (L.n_pairs < XMAX ? L.n_pairs : XMAX);
    size_t o = 0;
    L.ntile = o, o += 256;
    L.tiles = o, o += align256((size_t)L.max_tiles * 16);
    L.pairs = o, o += align256((size_t)L.n_pairs * 4);
    L.xe = o, o += align256((size_t)L.n_pairs * 4); /* >= n_tok rows */
    int64_t nh = n_tok * E > L.n_pairs * F ? n_tok * E : L.n_pairs * F;
    L.xh = o, o += align256((size_t)nh * 2);
    L.y = o, o += align256((size_t)L.n_pairs * E * 4);
    L.total = o;
    return L;
}

size_t cw_k_moe_gemm_scratch(int64_t E, int64_t F, int K, int64_t n_tok)
{
    return mg_lay(E, F, K, n_tok).total;
}

/* ---- 1. sort ---------------------------------------------------------------- */

struct sort_args {
    const int32_t *ids;
    int n_pairs;
    int *ntile;  /* tiles written */
    int4 *tiles; /* (expert, first sorted index, pairs, 0) */
    int *pairs;  /* pair indices sorted by (expert, index) */
    float *zero; /* gate_up: act, whose rows of invalid pairs are zeroed */
    int64_t zero_len;
};

/* Exclusive prefix sum over the block's SORT_THREADS values (integers). */
static __device__ int block_excl_scan(int v, int *sh)
{
    int tid = threadIdx.x;
    sh[tid] = v;
    __syncthreads();
    for (int o = 1; o < SORT_THREADS; o <<= 1) {
        int t = tid >= o ? sh[tid - o] : 0;
        __syncthreads();
        sh[tid] += t;
        __syncthreads();
    }
    int r = sh[tid] - v;
    __syncthreads();
    return r;
}

static __global__ void __launch_bounds__(SORT_THREADS) sort_kernel(const sort_args a)
{
    /* wcnt [SW][XMAX]: per-warp counts, then bases; in shared memory so that
     * the per-expert loops over the warps cost no global round trips */
    extern __shared__ int wcnt[];
    __shared__ int sh[SORT_THREADS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int seg = (a.n_pairs + SW - 1) / SW, p0 = warp * seg;
    const int p1 = min(p0 + seg, a.n_pairs);
    int *wc = wcnt + warp * XMAX;
    for (int e = lane; e < XMAX; e += 32)
        wc[e] = 0;
    __syncwarp();
    for (int b = p0; b < p1; b += 32) {
        int p = b + lane, e = p < p1 ? a.ids[p] : -1;
        bool on = e >= 0 && e < XMAX;
        unsigned m = __match_any_sync(0xffffffffu, on ? e : -1);
        if (on && lane == __ffs(m) - 1)
            wc[e] += __popc(m);
        __syncwarp();
    }
    __syncthreads();
    /* thread tid owns experts 2 tid and 2 tid + 1: per-warp bases within
     * each, the experts' totals c[] */
    int c[2], off[2], nt[2], tb[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int e = 2 * tid + h;
        c[h] = 0;
        for (int w = 0; w < SW; w++) {
            int v = wcnt[w * XMAX + e];
            wcnt[w * XMAX + e] = c[h];
            c[h] += v;
        }
        nt[h] = (c[h] + BN - 1) / BN;
    }
    off[0] = block_excl_scan(c[0] + c[1], sh), off[1] = off[0] + c[0];
    tb[0] = block_excl_scan(nt[0] + nt[1], sh), tb[1] = tb[0] + nt[0];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int e = 2 * tid + h;
        for (int w = 0; w < SW; w++)
            wcnt[w * XMAX + e] += off[h];
        for (int j = 0; j < nt[h]; j++)
            a.tiles[tb[h] + j] = make_int4(e, off[h] + j * BN, min(BN, c[h] - j * BN), 0);
    }
    if (tid == SORT_THREADS - 1)
        *a.ntile = tb[1] + nt[1];
    __syncthreads();
    /* placement, each warp over its segment in order */
    for (int b = p0; b < p1; b += 32) {
        int p = b + lane, ee = p < p1 ? a.ids[p] : -1;
        bool on = ee >= 0 && ee < XMAX;
        unsigned m = __match_any_sync(0xffffffffu, on ? ee : -1);
        int base = on ? wc[ee] : 0;
        __syncwarp();
        if (on) {
            a.pairs[base + __popc(m & ((1u << lane) - 1))] = p;
            if (lane == __ffs(m) - 1)
                wc[ee] = base + __popc(m);
        } else if (p < p1 && a.zero) {
            for (int64_t i = 0; i < a.zero_len; i++)
                a.zero[(int64_t)p * a.zero_len + i] = 0.0f;
        }
        __syncwarp();
    }
}

/* ---- 2. activations to scaled f16 --------------------------------------------- */

/* Row r of x (n values, n % 8 == 0, ldx % 4 == 0) -> y[r][n] = f16(x·2^s),
 * ex[r] = s. NaN passes through; an infinite row keeps s = 0. */
static __global__ void __launch_bounds__(256) to_f16_kernel(const float *x, int64_t ldx, int n,
                                                            __half *y, int *ex)
{
    __shared__ float red[8];
    __shared__ int s_sh;
    const float *xr = x + blockIdx.x * ldx;
    float m = 0.0f;
    for (int i = threadIdx.x * 4; i < n; i += 1024) {
        float4 v = *(const float4 *)(xr + i);
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    m = cw_warp_max(m);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mm = red[0];
        for (int w = 1; w < 8; w++)
            mm = fmaxf(mm, red[w]);
        int s = 0;
        if (mm > 0.0f && mm <= 3.402823466e38f) {
            int e;
            frexpf(mm, &e); /* mm < 2^e <= 2 mm */
            s = min(max(15 - e, -60), 60);
        }
        s_sh = s;
        ex[blockIdx.x] = s;
    }
    __syncthreads();
    const float sc = __int_as_float((127 + s_sh) << 23);
    __half *yr = y + (int64_t)blockIdx.x * n;
    for (int i = threadIdx.x * 4; i < n; i += 1024) {
        float4 v = *(const float4 *)(xr + i);
        __half2 lo = __floats2half2_rn(v.x * sc, v.y * sc), hi = __floats2half2_rn(v.z * sc, v.w * sc);
        uint2 o;
        o.x = *(uint32_t *)&lo, o.y = *(uint32_t *)&hi;
        *(uint2 *)(yr + i) = o;
    }
}

/* ---- 3. grouped GEMM ---------------------------------------------------------- */

struct mg_args {
    const uint8_t *w0, *w1; /* gate_up: G, U; down: D */
    size_t rb, eb;
    int64_t n_out; /* rows per expert */
    int nb, n_in;
    int nrb;    /* row blocks per expert: work item = tile * nrb + row block */
    int nsteps; /* K steps per item */
    const __half *xh; /* [rows][n_in] scaled f16 */
    const int *xe;    /* [rows] scale exponents */
    const int *pairs;
    const int4 *tiles;
    const int *ntile;
    int K;
    float *y; /* gate_up: act [pairs][n_out]; down: y [pairs][n_out] */
    cw_k_tabs tabs;
};

/* Weight row lr (0..BM-1) of row block rb of expert e (gate_up: the first
 * BM/2 rows are gate rows, the rest the same up rows), clamped into the
 * expert (rows past n_out are computed and dropped). */
template <bool GU>
static __device__ __forceinline__ const uint8_t *mg_wrow(const mg_args &a, int e, int rb, int lr)
{
    const uint8_t *base = GU && lr >= BM / 2 ? a.w1 : a.w0;
    int64_t r = (int64_t)rb * (GU ? BM / 2 : BM) + (GU ? (lr & (BM / 2 - 1)) : lr);
    return base + (size_t)e * a.eb + (size_t)min(r, a.n_out - 1) * a.rb;
}

/* Prefetches into L2 the raw weight bytes of K step s of work item it (this
 * thread's WPT rows, 128-byte line u of each row's span), so that the
 * dequantisation's loads of that step find them there. Only a hint: no
 * result depends on it. */
template <class T, bool GU>
static __device__ __forceinline__ void mg_prefetch(const mg_args &a, int it, int s, int total)
{
    if (it >= total)
        return;
    const int4 td = a.tiles[it / a.nrb];
    const int b0 = s * (KS / T::QK), b1 = min(b0 + KS / T::QK, a.nb);
    const int u = threadIdx.x & 7;
    if (b0 >= b1)
        return;
#pragma unroll
    for (int j = 0; j < WPT; j++) {
        const uint8_t *r = mg_wrow<GU>(a, td.x, it % a.nrb, (threadIdx.x >> 3) + 32 * j);
        uintptr_t lo = (uintptr_t)(r + (size_t)b0 * T::BB), hi = (uintptr_t)(r + (size_t)b1 * T::BB);
        uintptr_t line = (lo & ~(uintptr_t)127) + 128 * u;
        if (line < hi)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
    }
}

/* cp.async (sm_80+): 16 bytes global -> shared, zeros when !on; below sm_80
 * a plain copy (the barriers order it the same). */
static __device__ __forceinline__ void mg_cp16(__half *dst, const __half *src, bool on)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                 "r"(on ? 16 : 0));
#else
    *(uint4 *)dst = on ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
#endif
}
static __device__ __forceinline__ void mg_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
/* all but the newest N commit groups of this thread have landed */
template <int N> static __device__ __forceinline__ void mg_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* Step s of K of the item's BN pair rows into Xs (zero fill for rows past
 * the tile and columns past n_in), one commit group. This thread's granules
 * are column tid % 32 of pair rows warp + 8i, whose pair indices are pr[i]
 * (-1 past the tile). */
template <bool GU>
static __device__ __forceinline__ void mg_load_x(const mg_args &a, const int pr[XPT], __half *Xs,
                                                 int s)
{
    const int g = threadIdx.x & 31, kk = s * KS + 8 * g;
#pragma unroll
    for (int i = 0; i < XPT; i++) {
        const int pi = pr[i];
        const bool on = pi >= 0 && kk < a.n_in;
        const __half *src = on ? a.xh + (int64_t)(GU ? pi / a.K : pi) * a.n_in + kk : a.xh;
        mg_cp16(Xs + ((threadIdx.x >> 5) + 8 * i) * LDS + 8 * g, src, on);
    }
    mg_commit();
}

/* Persistent: gridDim.x blocks walk the work items (tile, row block), row
 * blocks of one tile adjacent (the tile's x rows and the expert's weights
 * shared through L2). Per item and K step: the weight tile dequantised to
 * f16 in shared memory (the loads prefetched PF_AHEAD steps before), the
 * pairs' x rows arriving by cp.async one step ahead, then 8 warps x 16 rows
 * multiply with wmma (the second 16 pairs skipped when the tile has <= 16). */
template <class T, bool GU>
static __global__ void __launch_bounds__(THREADS, 2) mg_kernel(const mg_args a)
{
    extern __shared__ __align__(128) uint8_t sm[];
    __half *Ws = (__half *)sm;               /* [BM][LDS] */
    __half *Xs = Ws + BM * LDS;              /* [2][BN][LDS]: pair n's K step, col-major B */
    float *Cs = (float *)sm;                 /* epilogue [BN][LDC], over Ws */
    const int tid = threadIdx.x, warp = tid >> 5, u = tid & 7;
    const int total = *a.ntile * a.nrb;
    /* the block's first PF_AHEAD steps */
    for (int q = 0; q < PF_AHEAD; q++)
        mg_prefetch<T, GU>(a, blockIdx.x + gridDim.x * (q / a.nsteps), q % a.nsteps, total);
    for (int it = blockIdx.x; it < total; it += gridDim.x) {
        const int4 td = a.tiles[it / a.nrb];
        const int e = td.x, n = td.z, rb = it % a.nrb;
        int pr[XPT];
#pragma unroll
        for (int i = 0; i < XPT; i++)
            pr[i] = warp + 8 * i < n ? a.pairs[td.y + warp + 8 * i] : -1;
        const uint8_t *wrow[WPT];
#pragma unroll
        for (int j = 0; j < WPT; j++)
            wrow[j] = mg_wrow<GU>(a, e, rb, (tid >> 3) + 32 * j);
        mg_load_x<GU>(a, pr, Xs, 0);
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[BN / 16];
#pragma unroll
        for (int i = 0; i < BN / 16; i++)
            wmma::fill_fragment(acc[i], 0.0f);
        for (int s = 0; s < a.nsteps; s++) {
            {
                int s2 = s + PF_AHEAD, it2 = it;
                while (s2 >= a.nsteps)
                    s2 -= a.nsteps, it2 += gridDim.x;
                mg_prefetch<T, GU>(a, it2, s2, total);
            }
            if (s + 1 < a.nsteps)
                mg_load_x<GU>(a, pr, Xs + ((s + 1) & 1) * BN * LDS, s + 1);
            else
                mg_commit(); /* an empty group: one group per step */
            /* weights: unit u of each of the WPT rows, exact f32 then f16 */
            const int blk = s * (KS / T::QK) + u / T::UPB, p = u % T::UPB;
            const int eo = (u / T::UPB) * T::QK; /* the block's offset in the step */
#pragma unroll
            for (int j = 0; j < WPT; j++) {
                __half *dst = Ws + ((tid >> 3) + 32 * j) * LDS + eo;
                float w[32];
                if (blk < a.nb) {
                    T::unit(wrow[j] + (size_t)blk * T::BB, p, a.tabs, w);
                } else {
#pragma unroll
                    for (int i = 0; i < 32; i++)
                        w[i] = 0.0f;
                }
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    __half2 h[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        h[i] = __floats2half2_rn(w[8 * q + 2 * i], w[8 * q + 2 * i + 1]);
                    *(uint4 *)(dst + T::run(p, q)) = *(uint4 *)h;
                }
            }
            mg_wait<1>(); /* step s's x rows */
            __syncthreads();
            const __half *Xb = Xs + (s & 1) * BN * LDS;
#pragma unroll 4
            for (int kk = 0; kk < KS; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, Ws + 16 * warp * LDS + kk, LDS);
#pragma unroll
                for (int i = 0; i < BN / 16; i++) {
                    if (i > 0 && n <= 16 * i) /* block-uniform */
                        break;
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                    wmma::load_matrix_sync(fb, Xb + 16 * i * LDS + kk, LDS);
                    wmma::mma_sync(acc[i], fa, fb, acc[i]);
                }
            }
            __syncthreads();
        }
        /* epilogue: C[n][m] (col-major over the weight rows) */
#pragma unroll
        for (int i = 0; i < BN / 16; i++)
            wmma::store_matrix_sync(Cs + 16 * i * LDC + 16 * warp, acc[i], LDC, wmma::mem_col_major);
        __syncthreads();
        const int RW = GU ? BM / 2 : BM; /* outputs per pair */
        const int64_t r0 = (int64_t)rb * RW;
        for (int idx = tid; idx < n * RW; idx += THREADS) {
            int nn = idx / RW, i = idx % RW;
            int pi = a.pairs[td.y + nn];
            if (r0 + i >= a.n_out)
                continue;
            float us = __int_as_float((127 - a.xe[GU ? pi / a.K : pi]) << 23);
            float v;
            if (GU) {
                float g = Cs[nn * LDC + i] * us, uu = Cs[nn * LDC + BM / 2 + i] * us;
                v = __fmul_rn(g / (1.0f + expf(-g)), uu);
            } else {
                v = Cs[nn * LDC + i] * us;
            }
            a.y[(int64_t)pi * a.n_out + r0 + i] = v;
        }
        __syncthreads(); /* Cs (over Ws) is read until here */
    }
    mg_wait<0>();
}

/* ---- 4. combine ---------------------------------------------------------------- */

static __global__ void combine_kernel(float *h, const float *y, const int32_t *ids,
                                      const float *wts, int K, int64_t E)
{
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (r >= E)
        return;
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int e = ids[t * K + k];
        if (e >= 0 && e < XMAX)
            s = __fmaf_rn(wts[t * K + k], y[(t * K + k) * E + r], s);
    }
    float *hp = h + t * E + r;
    *hp = __fadd_rn(*hp, s);
}

/* ---- host side ------------------------------------------------------------------- */

namespace {
struct mg_launch {
    cudaStream_t s;
    mg_args a;
    int64_t max_items; /* the most work items the sort can produce */
    int n_sm;
    bool gu;
    cudaError_t rc;
    /* a persistent grid: as many blocks as fit on the chip, at most one per item */
    template <class T, bool GU> void launch()
    {
        int occ = 0;
        rc = cudaFuncSetAttribute(mg_kernel<T, GU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  SMEM_BYTES);
        if (rc == cudaSuccess)
            rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mg_kernel<T, GU>, THREADS,
                                                               SMEM_BYTES);
        if (rc != cudaSuccess)
            return;
        int64_t cap = (int64_t)n_sm * (occ > 0 ? occ : 1);
        unsigned g = (unsigned)(max_items < cap ? max_items : cap);
        mg_kernel<T, GU><<<g, THREADS, SMEM_BYTES, s>>>(a);
    }
    template <class T>
    int go()
    {
        if (gu)
            launch<T, true>();
        else
            launch<T, false>();
        return 0;
    }
};
} // namespace

static int mg_check(const struct cw_k_mat *M, int K, int64_t n_tok, const mg_layout &L,
                    const void *scratch, const char *what, struct cw_err *err)
{
    if (cw_k_check_mat(M, what, err))
        return -1;
    if (K < 1 || n_tok < 1 || n_tok > 65535 || L.max_tiles > 65535 || M->n_in % 8 ||
        M->n_in > (1 << 30))
        return cw_errf(err, CW_ERR_INVALID, "cuda %s (grouped): K %d, n_tok %lld, n_in %lld", what,
                       K, (long long)n_tok, (long long)M->n_in);
    if (!scratch || (uintptr_t)scratch % 256)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda %s: %lld tokens need %zu bytes of 256-byte aligned scratch", what,
                       (long long)n_tok, L.total);
    return 0;
}

/* Enqueues the sort into scratch (zeroing act rows of invalid pairs when zero). */
static int mg_sort(struct cw_cuda *c, const mg_layout &L, uint8_t *scr, const int32_t *d_ids,
                   float *zero, int64_t zero_len, struct cw_err *err)
{
    sort_args sa = {d_ids,
                    (int)L.n_pairs,
                    (int *)(scr + L.ntile),
                    (int4 *)(scr + L.tiles),
                    (int *)(scr + L.pairs),
                    zero,
                    zero_len};
    CW_CUDA_TRY(err, cudaFuncSetAttribute(sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          SORT_SMEM));
    sort_kernel<<<1, SORT_THREADS, SORT_SMEM, c->stream>>>(sa);
    CW_CUDA_LAUNCHED(err);
    return 0;
}

static int mg_gemm(struct cw_cuda *c, const struct cw_k_mat *W, const struct cw_k_mat *W1,
                   const mg_layout &L, uint8_t *scr, int K, bool gu, float *y, struct cw_err *err)
{
    mg_launch f;
    f.s = c->stream;
    f.a = mg_args{(const uint8_t *)W->d_w,
                  (const uint8_t *)(W1 ? W1->d_w : W->d_w),
                  W->row_bytes,
                  W->expert_bytes,
                  W->n_out,
                  (int)(W->n_in / cw_k_block_elems(W->type)),
                  (int)W->n_in,
                  0,
                  (int)((W->n_in + KS - 1) / KS),
                  (const __half *)(scr + L.xh),
                  (const int *)(scr + L.xe),
                  (const int *)(scr + L.pairs),
                  (const int4 *)(scr + L.tiles),
                  (const int *)(scr + L.ntile),
                  K,
                  y,
                  cw_k_tables()};
    int rows = gu ? BM / 2 : BM;
    f.a.nrb = (int)((W->n_out + rows - 1) / rows);
    f.max_items = (int64_t)f.a.nrb * L.max_tiles;
    f.n_sm = cw_cuda_info(c)->n_sm;
    if (f.max_items > 0x7fffffff)
        return cw_errf(err, CW_ERR_INVALID, "cuda grouped product: %lld work items",
                       (long long)f.max_items);
    f.gu = gu;
    f.rc = cudaSuccess;
    cw_k_dispatch(W->type, f);
    CW_CUDA_TRY(err, f.rc);
    CW_CUDA_LAUNCHED(err);
    return 0;
}

int cw_k_moe_gemm_gate_up(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                          const float *d_x, const int32_t *d_ids, int K, int64_t n_tok,
                          float *d_act, void *d_scratch, struct cw_err *err)
{
    const mg_layout L = mg_lay(G->n_in, G->n_out, K, n_tok);
    if (mg_check(G, K, n_tok, L, d_scratch, "moe_gate_up", err) ||
        mg_check(U, K, n_tok, L, d_scratch, "moe_gate_up", err))
        return -1;
    if (G->type != U->type || G->n_in != U->n_in || G->n_out != U->n_out ||
        G->row_bytes != U->row_bytes || G->expert_bytes != U->expert_bytes || (uintptr_t)d_x % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up: gate and up differ, or x unaligned");
    uint8_t *scr = (uint8_t *)d_scratch;
    if (mg_sort(c, L, scr, d_ids, d_act, G->n_out, err))
        return -1;
    to_f16_kernel<<<(unsigned)n_tok, 256, 0, c->stream>>>(d_x, G->n_in, (int)G->n_in,
                                                          (__half *)(scr + L.xh), (int *)(scr + L.xe));
    CW_CUDA_LAUNCHED(err);
    return mg_gemm(c, G, U, L, scr, K, true, d_act, err);
}

int cw_k_moe_gemm_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                       const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                       float *d_h, void *d_scratch, struct cw_err *err)
{
    const mg_layout L = mg_lay(D->n_out, D->n_in, K, n_tok);
    if (mg_check(D, K, n_tok, L, d_scratch, "moe_down", err))
        return -1;
    if ((uintptr_t)d_act % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_down: act unaligned");
    uint8_t *scr = (uint8_t *)d_scratch;
    if (mg_sort(c, L, scr, d_ids, NULL, 0, err))
        return -1;
    to_f16_kernel<<<(unsigned)L.n_pairs, 256, 0, c->stream>>>(
        d_act, D->n_in, (int)D->n_in, (__half *)(scr + L.xh), (int *)(scr + L.xe));
    CW_CUDA_LAUNCHED(err);
    float *y = (float *)(scr + L.y);
    if (mg_gemm(c, D, NULL, L, scr, K, false, y, err))
        return -1;
    dim3 grid((unsigned)((D->n_out + 255) / 256), (unsigned)n_tok);
    combine_kernel<<<grid, 256, 0, c->stream>>>(d_h, y, d_ids, d_wts, K, D->n_out);
    CW_CUDA_LAUNCHED(err);
    return 0;
}

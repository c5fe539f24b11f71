/* k_moe_gemm.cu — the routed experts for prefill (batches above the GEMV
 * regime): (token, slot) pairs grouped by expert on the device, then one
 * grouped matrix product per projection on the tensor cores (see k_gemm.cuh).
 *
 * Steps of a launcher, all on the stream, no host synchronisation:
 *  1. sort (one block): a stable counting sort of the pairs by expert id —
 *     32 warps each count a contiguous segment of the pairs per expert, a
 *     scan turns the counts into per-(warp, expert) bases, each warp places
 *     its segment in order (ranks from __match_any_sync). The pair list is
 *     thus sorted by (expert, pair index): deterministic. Each expert's run
 *     is cut into tiles of BN pairs; the tile table (expert, first, count)
 *     and its length go to scratch. The grid is sized for the worst case
 *     (n_pairs/BN + min(n_pairs, XMAX) tiles); blocks past the length exit.
 *  2. to_f16: the activation rows (x per token for gate/up, act per pair for
 *     down) to f16, each row scaled by a power of two 2^s (exact) that puts
 *     its largest magnitude in [2^14, 2^15): no f16 overflow whatever the
 *     activations' range, and small values stay clear of f16's subnormals.
 *  3. the grouped GEMM: a block takes BM weight rows of one expert (gate/up:
 *     32 gate rows and the same 32 up rows, SwiGLU fused in the epilogue) and
 *     one tile of BN pairs; per K step of 256 it dequantises its weight tile
 *     (k_quant.cuh: exactly quant_dequant.c's f32 values) to f16 in shared
 *     memory, gathers the pairs' f16 rows beside it, and 4 warps multiply
 *     with nvcuda::wmma 16x16x16 (f16 in, f32 accumulate; sm_70+). The
 *     epilogue multiplies by 2^-s (exact) and writes act[pair][F], or, for
 *     down, y[pair][E] into scratch.
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

#define BM 64                /* weight rows per block */
#define BN 32                /* pairs per tile */
#define KS 256               /* elements per K step (a multiple of every QK) */
#define LDS (KS + 8)         /* shared row stride in halves: 16-byte pad against bank conflicts */
#define LDC (BM + 4)         /* epilogue stride in floats */
#define THREADS 128          /* 4 warps, 16 weight rows each */
#define XMAX CW_K_MOE_GEMM_XMAX
#define SORT_THREADS 1024    /* = XMAX: one thread per expert in the scans */
#define SMEM_BYTES ((BM + BN) * LDS * 2 + BN * 4)

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* ---- scratch layout ------------------------------------------------------ */

struct mg_layout {
    size_t wcnt, ntile, tiles, pairs, xe, xh, y, total;
    int64_t n_pairs, max_tiles;
};

static mg_layout mg_lay(int64_t E, int64_t F, int K, int64_t n_tok)
{
    mg_layout L;
    L.n_pairs = n_tok * K;
    L.max_tiles = L.n_pairs / BN + (L.n_pairs < XMAX ? L.n_pairs : XMAX);
    size_t o = 0;
    L.wcnt = o, o += align256((size_t)32 * XMAX * 4);
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
    int *wcnt;   /* [32][XMAX] per-warp counts, then bases */
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
    __shared__ int sh[SORT_THREADS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int seg = (a.n_pairs + 31) / 32, p0 = warp * seg;
    const int p1 = min(p0 + seg, a.n_pairs);
    int *wc = a.wcnt + warp * XMAX;
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
    /* thread e: per-warp bases within expert e, the expert's total */
    int e = tid, c = 0;
    for (int w = 0; w < 32; w++) {
        int v = a.wcnt[w * XMAX + e];
        a.wcnt[w * XMAX + e] = c;
        c += v;
    }
    int off = block_excl_scan(c, sh);
    int nt = (c + BN - 1) / BN;
    int tb = block_excl_scan(nt, sh);
    for (int w = 0; w < 32; w++)
        a.wcnt[w * XMAX + e] += off;
    for (int j = 0; j < nt; j++)
        a.tiles[tb + j] = make_int4(e, off + j * BN, min(BN, c - j * BN), 0);
    if (tid == SORT_THREADS - 1)
        *a.ntile = tb + nt;
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
    const __half *xh; /* [rows][n_in] scaled f16 */
    const int *xe;    /* [rows] scale exponents */
    const int *pairs;
    const int4 *tiles;
    const int *ntile;
    int K;
    float *y; /* gate_up: act [pairs][n_out]; down: y [pairs][n_out] */
    cw_k_tabs tabs;
};

template <class T, bool GU>
static __global__ void __launch_bounds__(THREADS) mg_kernel(const mg_args a)
{
    extern __shared__ __align__(128) uint8_t sm[];
    __half *Ws = (__half *)sm;          /* [BM][LDS] */
    __half *Xs = Ws + BM * LDS;         /* [BN][LDS]: pair n's K step, col-major B */
    int *prow = (int *)(Xs + BN * LDS); /* [BN] pair index, -1 past the tile */
    if ((int)blockIdx.y >= *a.ntile)
        return;
    const int4 td = a.tiles[blockIdx.y];
    const int e = td.x, n = td.z;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * (GU ? BM / 2 : BM);
    if (tid < BN)
        prow[tid] = tid < n ? a.pairs[td.y + tid] : -1;
    /* this thread's 4 weight rows (16 apart) and its unit of each K step */
    const int u = tid & 7;
    const uint8_t *wrow[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int lr = (tid >> 3) + 16 * j;
        const uint8_t *base = GU && lr >= BM / 2 ? a.w1 : a.w0;
        int64_t r = r0 + (GU ? (lr & (BM / 2 - 1)) : lr);
        wrow[j] = base + (size_t)e * a.eb + (size_t)min(r, a.n_out - 1) * a.rb;
    }
    __syncthreads();
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[BN / 16];
#pragma unroll
    for (int i = 0; i < BN / 16; i++)
        wmma::fill_fragment(acc[i], 0.0f);
    for (int k0 = 0; k0 < a.n_in; k0 += KS) {
        /* weights: unit u of each of the 4 rows, exact f32 then f16 */
        const int blk = k0 / T::QK + u / T::UPB, p = u % T::UPB;
        const int eo = (u / T::UPB) * T::QK; /* the block's offset in the step */
#pragma unroll
        for (int j = 0; j < 4; j++) {
            __half *dst = Ws + ((tid >> 3) + 16 * j) * LDS + eo;
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
        /* activations: 16-byte granule g of pair rows (tid>>5) + 4i */
#pragma unroll
        for (int i = 0; i < BN / 4; i++) {
            int pr = (tid >> 5) + 4 * i, g = tid & 31, kk = k0 + 8 * g;
            int pi = prow[pr];
            uint4 v = make_uint4(0, 0, 0, 0);
            if (pi >= 0 && kk < a.n_in)
                v = *(const uint4 *)(a.xh + (int64_t)(GU ? pi / a.K : pi) * a.n_in + kk);
            *(uint4 *)(Xs + pr * LDS + 8 * g) = v;
        }
        __syncthreads();
#pragma unroll 4
        for (int kk = 0; kk < KS; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
            wmma::load_matrix_sync(fa, Ws + 16 * warp * LDS + kk, LDS);
#pragma unroll
            for (int i = 0; i < BN / 16; i++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
                wmma::load_matrix_sync(fb, Xs + 16 * i * LDS + kk, LDS);
                wmma::mma_sync(acc[i], fa, fb, acc[i]);
            }
        }
        __syncthreads();
    }
    /* epilogue: C[n][m] (col-major over the weight rows) over the weight tile */
    float *Cs = (float *)sm;
#pragma unroll
    for (int i = 0; i < BN / 16; i++)
        wmma::store_matrix_sync(Cs + 16 * i * LDC + 16 * warp, acc[i], LDC, wmma::mem_col_major);
    __syncthreads();
    const int RW = GU ? BM / 2 : BM; /* outputs per pair */
    for (int idx = tid; idx < BN * RW; idx += THREADS) {
        int nn = idx / RW, i = idx % RW;
        int pi = prow[nn];
        if (pi < 0 || r0 + i >= a.n_out)
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
    dim3 grid;
    bool gu;
    cudaError_t rc;
    template <class T>
    int go()
    {
        if (gu) {
            rc = cudaFuncSetAttribute(mg_kernel<T, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SMEM_BYTES);
            if (rc == cudaSuccess)
                mg_kernel<T, true><<<grid, THREADS, SMEM_BYTES, s>>>(a);
        } else {
            rc = cudaFuncSetAttribute(mg_kernel<T, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      SMEM_BYTES);
            if (rc == cudaSuccess)
                mg_kernel<T, false><<<grid, THREADS, SMEM_BYTES, s>>>(a);
        }
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
                    (int *)(scr + L.wcnt),
                    (int *)(scr + L.ntile),
                    (int4 *)(scr + L.tiles),
                    (int *)(scr + L.pairs),
                    zero,
                    zero_len};
    sort_kernel<<<1, SORT_THREADS, 0, c->stream>>>(sa);
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
                  (const __half *)(scr + L.xh),
                  (const int *)(scr + L.xe),
                  (const int *)(scr + L.pairs),
                  (const int4 *)(scr + L.tiles),
                  (const int *)(scr + L.ntile),
                  K,
                  y,
                  cw_k_tables()};
    int rows = gu ? BM / 2 : BM;
    f.grid = dim3((unsigned)((W->n_out + rows - 1) / rows), (unsigned)L.max_tiles);
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

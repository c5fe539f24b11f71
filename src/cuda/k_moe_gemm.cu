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
 *     the tile table (expert, first, count) and its length go to scratch,
 *     where the down of the same pairs finds them (sorted: one sort per
 *     layer; H200 35B pp512 11,045 -> 11,277 tok/s, pp2048 14,146 ->
 *     14,449, the same bits).
 *  2. to_f16: the activation rows (x per token for gate/up, act per pair for
 *     down) to f16, each row scaled by a power of two 2^s (exact) that puts
 *     its largest magnitude in [2^14, 2^15): no f16 overflow whatever the
 *     activations' range, and small values stay clear of f16's subnormals.
 *  3. the grouped GEMM (mma.sync m16n8k16, f16 in, f32 accumulate; sm_80+,
 *     two m16n8k8 below): a persistent grid (as many blocks as fit on the
 *     chip) walks the work items (tile, row block). A block's 8 warps own
 *     16 weight rows each (gate_up: 8 gate rows and the same 8 up rows, so
 *     SwiGLU fuses in registers); each lane decodes its share of the K step
 *     (k_quant.cuh units: exactly quant_dequant.c's f32 values, rounded to
 *     f16 once) straight into mma A fragments, so no weight goes through
 *     shared memory and the warps run independently; the loads are
 *     prefetched into L2 PF_AHEAD steps ahead. Only the tile's f16 x rows
 *     are shared: cp.async one step ahead into a double buffer (one barrier
 *     per step). The epilogue multiplies by 2^-s (exact) and writes
 *     act[pair][F], or, for down, y[pair][E] into scratch.
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
 * (a fixed permutation of k, then the hardware's order inside an mma) does
 * not depend on the other pairs of a tile: nor does a pair's result. */
#include "cuda/k_gemm.cuh"

#define NW 8                 /* warps per block, 16 weight rows each */
#define THREADS (NW * 32)
#define RW_OF(GU) ((GU) ? 8 * NW : 16 * NW) /* outputs per row block */
#define BN 64                /* pairs per tile */
#define KS 256               /* elements per K step (a multiple of every QK) */
/* x tile row stride in halves: a 16-byte pad against bank conflicts, left
 * out below sm_80 so that the double-buffered tile fits Turing's 64 KB of
 * shared memory per block (the host picks the size by the device's major:
 * mg_smem) */
#define LDS_PAD (KS + 8)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define LDS KS
#else
#define LDS LDS_PAD
#endif
#define PF_AHEAD 2           /* K steps of weights prefetched into L2 ahead of their use */
#define XPT (BN / 8)         /* 16-byte x granules per thread per K step */
#define XMAX CW_K_MOE_GEMM_XMAX
#define SORT_THREADS 512     /* = XMAX / 2: two experts per thread in the scans */
#define SW (SORT_THREADS / 32) /* warps of the sort, one segment of the pairs each */
#define SORT_SMEM (SW * XMAX * 4)
/* the x tile, double buffered, for a device of compute capability major */
static size_t mg_smem(int major)
{
    return (size_t)2 * BN * (major >= 8 ? LDS_PAD : KS) * 2;
}

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
 * ex[r] = s (k_gemm.cuh). NaN passes through; an infinite row keeps s = 0. */
static __global__ void __launch_bounds__(256) to_f16_kernel(const float *x, int64_t ldx, int n,
                                                            __half *y, int *ex)
{
    const float *xr = x + blockIdx.x * ldx;
    const int s = cw_f16_shift(cw_row_absmax<256>(xr, n));
    if (threadIdx.x == 0)
        ex[blockIdx.x] = s;
    cw_row_to_f16<256>(xr, n, s, y + (int64_t)blockIdx.x * n);
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

/* The two weight rows of this thread's mma rows g and g+8 (g = lane / 4) in
 * row block rb of expert e: gate_up, gate row o and up row o of output
 * o = rb*RW + 8*warp + g (so SwiGLU pairs up in registers); down, rows
 * rb*RW + 16*warp + g and that + 8. Clamped into the expert (rows past n_out
 * are computed and dropped). */
template <bool GU>
static __device__ __forceinline__ void mg_rows(const mg_args &a, int e, int rb,
                                               const uint8_t **ra, const uint8_t **rbp)
{
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    const uint8_t *ex0 = a.w0 + (size_t)e * a.eb, *ex1 = (GU ? a.w1 : a.w0) + (size_t)e * a.eb;
    int64_t r0 = (int64_t)rb * RW_OF(GU) + (GU ? 8 : 16) * warp + g;
    int64_t r1 = GU ? r0 : r0 + 8;
    *ra = ex0 + (size_t)min(r0, a.n_out - 1) * a.rb;
    *rbp = ex1 + (size_t)min(r1, a.n_out - 1) * a.rb;
}

/* Prefetches into L2 the raw weight bytes of K step s of work item it (this
 * thread's two rows, 128-byte lines t and t+4 of each row's span), so that
 * the decoders' loads of that step find them there. Only a hint: no result
 * depends on it. */
template <class T, bool GU>
static __device__ __forceinline__ void mg_prefetch(const mg_args &a, int it, int s, int total)
{
    if (it >= total)
        return;
    const int b0 = s * (KS / T::QK), b1 = min(b0 + KS / T::QK, a.nb);
    if (b0 >= b1)
        return;
    const int4 td = a.tiles[it / a.nrb];
    const uint8_t *r[2];
    mg_rows<GU>(a, td.x, it % a.nrb, &r[0], &r[1]);
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        uintptr_t lo = (uintptr_t)(r[j] + (size_t)b0 * T::BB), hi = (uintptr_t)(r[j] + (size_t)b1 * T::BB);
#pragma unroll
        for (int l = 0; l < 2; l++) {
            uintptr_t line = (lo & ~(uintptr_t)127) + 128 * (t + 4 * l);
            if (line < hi)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
        }
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

/* This thread's pair indices for the x loads of a tile: rows warp + 8i of
 * the tile (-1 past its n pairs). */
static __device__ __forceinline__ void mg_pair_rows(const mg_args &a, int it, int total,
                                                    int pr[XPT])
{
    const int warp = threadIdx.x >> 5;
    int4 td = make_int4(0, 0, 0, 0);
    if (it < total)
        td = a.tiles[it / a.nrb];
#pragma unroll
    for (int i = 0; i < XPT; i++)
        pr[i] = warp + 8 * i < td.z ? a.pairs[td.y + warp + 8 * i] : -1;
}

/* Where 16-byte granule G (elements 8G..8G+7 of the K step) of an x row
 * lies in shared memory: bits 1-2 of G flipped by bits 3-4, so that the 4
 * lanes t of an mma B load (granules 8t+c for the K-quant and 32-element
 * formats, 2t+c for the float ones) hit 4 distinct 16-byte bank groups. */
static __device__ __forceinline__ int mg_swz(int G)
{
    return G ^ (((G >> 3) & 3) << 1);
}

/* Step s of K of a tile's BN pair rows (pair indices pr) into Xs (zero fill
 * for rows past the tile and columns past n_in), one commit group. This
 * thread's granules: column lane of pair rows warp + 8i. */
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
        mg_cp16(Xs + ((threadIdx.x >> 5) + 8 * i) * LDS + 8 * mg_swz(g), src, on);
    }
    cw_cp_commit();
}

/* c += A·B for one m16n8k16 tile (f16 in, f32 accumulate): a0..a3 and b0, b1
 * in the PTX fragment layout. Below sm_80 as two m16n8k8 halves. */
static __device__ __forceinline__ void mg_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a2), "r"(a3), "r"(b1));
#endif
}

/* 32 decoded weights (a unit: 4 runs of 8) to 16 f16 pairs, each rounded once. */
static __device__ __forceinline__ void mg_to_h2(const float w[32], uint32_t h[16])
{
#pragma unroll
    for (int i = 0; i < 16; i++) {
        __half2 v = __floats2half2_rn(w[2 * i], w[2 * i + 1]);
        h[i] = *(uint32_t *)&v;
    }
}

/* Persistent: gridDim.x blocks walk the work items (tile, row block), row
 * blocks of one tile adjacent (the tile's x rows and the expert's weights
 * shared through L2). Warp w owns 16 weight rows (mg_rows); no weight goes
 * through shared memory: lane (g, t) decodes units 2t and 2t+1 of the K
 * step for its rows g and g+8 straight into mma A fragments. The mma's k
 * order is a permutation of the step's elements — chunk c = (unit half ui,
 * run r, half hf) gives lane t the 4 elements run(p, r) + 4hf .. +3 of its
 * unit 2t+ui as k = 2t, 2t+1, 2t+8, 2t+9 — and B is read from the x tile
 * with the same permutation, so Σ_k is the same dot product (its f32
 * accumulation order fixed: deterministic, the bound is order-free). The x
 * tile (BN pairs x KS) arrives by cp.async one step ahead (double buffer,
 * one barrier per step, the next item's first step fetched during the
 * last); tiles of n pairs run ceil(n/8) n8 columns only. SwiGLU and the
 * 2^-s scaling happen in registers. */
template <class T, bool GU>
static __global__ void __launch_bounds__(THREADS, 2) mg_kernel(const mg_args a)
{
    extern __shared__ __align__(128) uint8_t sm[];
    __half *Xs = (__half *)sm; /* [2][BN][LDS]: pair n's K step */
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int total = *a.ntile * a.nrb;
    int it = blockIdx.x;
    if (it >= total)
        return;
    for (int q = 0; q < PF_AHEAD; q++)
        mg_prefetch<T, GU>(a, it + gridDim.x * (q / a.nsteps), q % a.nsteps, total);
    int pr[XPT];
    mg_pair_rows(a, it, total, pr);
    mg_load_x<GU>(a, pr, Xs, 0);
    unsigned gs = 0; /* steps done by this block: x buffer gs & 1 */
    for (; it < total; it += gridDim.x) {
        const int4 td = a.tiles[it / a.nrb];
        const int n = td.z, rb = it % a.nrb, nj = (n + 7) >> 3;
        const uint8_t *rowp[2];
        mg_rows<GU>(a, td.x, rb, &rowp[0], &rowp[1]);
        float acc[BN / 8][4];
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
            acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        for (int s = 0; s < a.nsteps; s++, gs++) {
            {
                int s2 = s + PF_AHEAD, it2 = it;
                while (s2 >= a.nsteps)
                    s2 -= a.nsteps, it2 += gridDim.x;
                mg_prefetch<T, GU>(a, it2, s2, total);
            }
            cw_cp_wait<0>();
            __syncthreads(); /* x step s is in; every warp is done with buffer (gs+1)&1 */
            __half *Xn = Xs + ((gs + 1) & 1) * BN * LDS;
            if (s + 1 < a.nsteps) {
                mg_load_x<GU>(a, pr, Xn, s + 1);
            } else if (it + (int)gridDim.x < total) {
                mg_pair_rows(a, it + gridDim.x, total, pr);
                mg_load_x<GU>(a, pr, Xn, 0);
            }
            const __half *Xb = Xs + (gs & 1) * BN * LDS;
#pragma unroll
            for (int ui = 0; ui < 2; ui++) {
                const int u = 2 * t + ui;
                const int blk = s * (KS / T::QK) + u / T::UPB, p = u % T::UPB;
                const int eo = (u / T::UPB) * T::QK; /* the block's offset in the step */
                uint32_t h0[16], h1[16];
                {
                    float w[32];
                    if (blk < a.nb) {
                        T::unit(rowp[0] + (size_t)blk * T::BB, p, a.tabs, w);
                    } else {
#pragma unroll
                        for (int i = 0; i < 32; i++)
                            w[i] = 0.0f;
                    }
                    mg_to_h2(w, h0);
                    if (blk < a.nb) {
                        T::unit(rowp[1] + (size_t)blk * T::BB, p, a.tabs, w);
                    }
                    mg_to_h2(w, h1);
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const __half *xr = Xb + g * LDS + 8 * mg_swz((eo + T::run(p, r)) >> 3);
#pragma unroll
                    for (int j = 0; j < BN / 8; j++) {
                        if (j >= nj) /* block-uniform */
                            break;
                        const uint4 b = *(const uint4 *)(xr + 8 * j * LDS);
                        mg_mma(acc[j], h0[4 * r], h1[4 * r], h0[4 * r + 1], h1[4 * r + 1], b.x, b.y);
                        mg_mma(acc[j], h0[4 * r + 2], h1[4 * r + 2], h0[4 * r + 3], h1[4 * r + 3],
                               b.z, b.w);
                    }
                }
            }
        }
        /* epilogue from registers: acc[j] = (row g, pair 8j+2t), (g, 8j+2t+1),
         * (row g+8, 8j+2t), (g+8, 8j+2t+1) */
        const int warp = threadIdx.x >> 5;
        const int64_t o = (int64_t)rb * RW_OF(GU) + (GU ? 8 : 16) * warp + g;
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int nn = 8 * j + 2 * t + c;
                if (nn >= n)
                    continue;
                const int pi = a.pairs[td.y + nn];
                const float us = __int_as_float((127 - a.xe[GU ? pi / a.K : pi]) << 23);
                float *yp = a.y + (int64_t)pi * a.n_out;
                if (GU) {
                    if (o < a.n_out) {
                        float gg = acc[j][c] * us, uu = acc[j][2 + c] * us;
                        yp[o] = __fmul_rn(gg / (1.0f + expf(-gg)), uu);
                    }
                } else {
                    if (o < a.n_out)
                        yp[o] = acc[j][c] * us;
                    if (o + 8 < a.n_out)
                        yp[o + 8] = acc[j][2 + c] * us;
                }
            }
        }
    }
    cw_cp_wait<0>();
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
    size_t smem; /* mg_smem of the device */
    int64_t max_items; /* the most work items the sort can produce */
    int n_sm;
    bool gu;
    cudaError_t rc;
    /* a persistent grid: as many blocks as fit on the chip, at most one per item */
    template <class T, bool GU> void launch()
    {
        int occ = 0;
        rc = cudaFuncSetAttribute(mg_kernel<T, GU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem);
        if (rc == cudaSuccess)
            rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mg_kernel<T, GU>, THREADS,
                                                               smem);
        if (rc != cudaSuccess)
            return;
        int64_t cap = (int64_t)n_sm * (occ > 0 ? occ : 1);
        unsigned g = (unsigned)(max_items < cap ? max_items : cap);
        mg_kernel<T, GU><<<g, THREADS, smem, s>>>(a);
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
    int rows = RW_OF(gu);
    f.a.nrb = (int)((W->n_out + rows - 1) / rows);
    f.max_items = (int64_t)f.a.nrb * L.max_tiles;
    f.n_sm = cw_cuda_info(c)->n_sm;
    f.smem = mg_smem(cw_cuda_info(c)->major);
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
                       float *d_h, void *d_scratch, bool sorted, struct cw_err *err)
{
    const mg_layout L = mg_lay(D->n_out, D->n_in, K, n_tok);
    if (mg_check(D, K, n_tok, L, d_scratch, "moe_down", err))
        return -1;
    if ((uintptr_t)d_act % 16)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_down: act unaligned");
    uint8_t *scr = (uint8_t *)d_scratch;
    /* sorted: the gate/up's grouping, at the same place (mg_lay(E, F) is
     * the gate/up's layout and the down's) */
    if (!sorted && mg_sort(c, L, scr, d_ids, NULL, 0, err))
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

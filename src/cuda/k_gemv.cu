/* k_gemv.cu — quantised matrix × few-token products (decode, drafts) and the
 * routed-expert products, straight from the GGUF blocks (see kernels.h).
 *
 * Shape: one warp computes RR = 2 output rows (a dense pair, or an expert's
 * gate and up row, fused with SwiGLU; RR = 1 for short matrices of the
 * x-staging formats); WARPS warps per block. Lane l takes units (32 weights,
 * k_quant.cuh) l, l+32, ... of the row, so neighbouring lanes read
 * neighbouring bytes; the dequantised weights sit in registers and are used
 * for all NT tokens, so each weight byte is read once per launch. The round
 * loop is unrolled by 2 (both rounds of a 2048-wide row in flight).
 *
 * x: the formats whose lanes each own a 32-element block (Q8_0, Q4_0.., IQ4,
 * MXFP4/NVFP4: use_sx), and every format from 3 tokens on, stage x once per
 * block into shared memory, padded (kq_xpad) so that a quarter-warp's float4
 * reads hit distinct banks; those blocks then walk row groups (persistent
 * grid). The rest read x through L1 (measured faster for Q4_K/Q6_K at one
 * token: their lanes' x runs share cache lines).
 *
 * MoE down with 512-wide rows (the model's experts) and K <= 8: the 32 lanes
 * split over two experts per round (16 units each), all K experts' bytes
 * are loaded at once before any arithmetic, the token's K activation rows
 * are staged in shared memory; per expert a 16-lane butterfly, then the
 * fixed k = 0..K-1 fma combine and the fused residual add.
 *
 * Loads: 16-byte-aligned formats (Q4_K, Q5_K, F32/F16/BF16) read their unit
 * with 16-byte loads from global memory; the others (Q6_K's 210-byte blocks,
 * Q8_0's 34, ...) are staged per warp into shared memory with coalesced
 * 16-byte loads first, then read from there with their own alignment.
 *
 * Q4_K/Q5_K/Q6_K (q8k_use: every matrix whose x's Q8_K copy fits XS_MAX,
 * the routed experts' gate/up too) multiply
 * integers instead: each block quantises its tokens' x to Q8_K in
 * shared memory first (xq_stage, the CPU's quantiser operation for
 * operation), then per unit 8 dp4a against the weights' 4-6 bit values,
 * the block's sums over its 8 lanes by an integer butterfly, and the
 * block's float value as the CPU forms it (mv_dot_q8k). The dense FFN's
 * gate/up (cw_k_moe_gate_up, K = 1) and the routed experts' gate/up (with
 * the fused shared expert) take the same path; the MoE down keeps f32 x.
 *
 * Numerics (Q8_K path): the result is bit-equal to the CPU backend's
 * vec_dot (cpu_dot_ref.c / the AVX2 twin): x rounds to int8 the same way,
 * the integer sums are exact in any order, each block's v_b is the same
 * float expression, and the blocks are added in the CPU's order (slots b
 * mod 8 in block order, then cw_reduce8's tree). The error against the
 * exact Σ w x is therefore the CPU's: dominated by x's rounding to the
 * Q8_K grid, |Δx| <= d_b/2 per element (d_b = max|x|/127 of its block).
 * Deterministic and batch-invariant by construction (a token's sums never
 * meet another token's). Finite x assumed (a NaN or inf x: the CPU's
 * bits are not promised).
 *
 * Numerics (f32 path): weights exactly as quant_dequant.c (k_quant.cuh); activations
 * f32; per lane a single fma chain acc = fma(w, x, acc) over its units in
 * ascending order, runs 0..3, elements 0..7; then the fixed butterfly over
 * the 32 lanes (16 lanes in the 512-wide MoE down: 4 additions). Staged or
 * not, RR, NT: the same operations on the same values, so a token's result
 * is bit-identical for any n_tok <= CW_K_GEMV_MAX_TOK (batch invariance).
 * Error: a lane's chain has L = 32*ceil(n_in/1024) terms (n_in/32 for
 * n_in >= 1024; 32 below), the butterfly 5 more additions, so
 * |y - Σ w x| <= (L + 5) 2^-24 Σ|w x| (first order); the scale and add
 * epilogue adds a rounding of the result each. Unchanged by this layout.
 *
 * Measured on an H200 (tests/gpu/test_gpu_gemv.c, CWEN_GPU_BENCH=1; copy
 * bandwidth 4.25 TB/s; median of 200 event-timed launches, weights rotated
 * past L2; every figure includes the ~4.9 us floor of a 1-row launch, the
 * events' and launch's own cost). Q8_K path, f32 path before it:
 *   27B  q4_K 17408x5120 (gate, up)  28.8 us 41%  (36.8, 32%)
 *        q4_K gate+up in one launch  40.9 us 58%  (61.4, 38%)
 *        q4_K 5120x17408 (down)      38.6 us 31%  (42.4, 28%)
 *        q6_K 5120x17408 (down)      45.8 us 38%  (54.5, 32%)
 *        q4_K 10240x5120 (qkv)       22.0 us 32%  (28.0, 25%)
 *        q4_K 12288x5120 (q)         23.4 us 36%  (29.3, 28%)
 *        q4_K 6144x5120, 5120x6144   17.1/17.0 us 24/25%  (18.1/18.4, 23%)
 *        q6_K 248320x5120 (LM head) 301 us 82%  (417, 59%)
 *   LM heads x 2048: q4_K 99 us 68% (180, 37%), q6_K 134 us 73% (190, 52%),
 *   q8_0 174 us 73% (f32 path). The 35B's 512..2048 x 2048 stay on the f32
 *   path, unchanged (q4_K 512 6.1 us, 2048 6.7; q6_K 6.8, 7.4): latency-
 *   bound, a DRAM round trip or two per warp plus the launch. MoE (K = 8,
 *   2048 -> 512 -> 2048, Q4_K): gate_up 11.2 us, down 10.6 us (q6_K 10.2).
 *   Decode, cwen bench -p 512,2048 -n 128 -r 3 on synthetic q4_k_m files,
 *   before and after this path (one machine start each, 2026-12-01): 35B
 *   327.7 -> 331.2 tok/s (the routed gate/up and the LM head on Q8_K x;
 *   319.0 with the gate/up back on f32 x, 317.0 with every K-quant matrix
 *   on Q8_K x), 27B 78.5 -> 83.3.
 * What bounds the K-quants now: the 27B's matrices sit at 25-41% (minus the
 * launch floor: 30-50%) while the LM heads reach 73-82%: a persistent grid
 * of ~8 blocks per SM gives a 5120..17408-row matrix 1-2 row groups (8
 * rows) per block, so each block's prologue (x's quantisation, the first
 * loads' latency) and the tail are amortised over few rows; the LM head's
 * ~30 groups per block amortise them.
 * Next: one launch for the matrices sharing an x (the prologue once), x
 * quantised once per launch instead of once per block, deeper load
 * pipelines for the long rows (5120 x 17408 at 31%). */
#include <stdio.h>

#include "cuda/k_gemm.cuh" /* the grouped prefill experts */
#include "cuda/k_norm.cuh"
#include "cuda/k_quant.cuh"
#include "cuda/kernels.h"
extern "C" {
#include "gguf/quant_rows.h" /* cw_fp4_values: the MXFP4/NVFP4 levels */
}

#define WARPS 4 /* warps per block of the dense and MoE-down kernels */
#define MW 8    /* warps per block of the MoE gate/up kernel: 8 rows share x */
/* Up to this many tokens the GEMV path runs (in groups of 8 tokens; above,
 * the tensor-core GEMM of k_gemm.cu): the weights are re-read per group of 8, which
 * still costs less than dequantising the matrix for the tensor cores. */
#define NT_MAX 8
/* x staged in shared memory up to this many bytes per block, and never past
 * what the device lets a block opt in to (above: x read through L1, the
 * same arithmetic, so the same bits). */
#define XS_MAX (100 << 10)

/* Bytes of one row's stage: 32 units plus the 16-byte alignment slack. */
template <class T>
struct stage_of {
    enum { BYTES = (32 / T::UPB) * T::BB, TILE = (BYTES + 15 + 15) / 16 * 16, GMAX = (TILE / 16 + 31) / 32 };
};

/* Floats of one token's staged x (n_in plus the padding of kq_xpad). */
template <class T>
static __host__ __device__ __forceinline__ int64_t xs_len(int64_t n_in)
{
    return n_in + 4 * (n_in / T::XP);
}

/* Copies n rows of n_in floats (row i at x + i*ldx) into shared memory,
 * padded (kq_xpad), row i at xs + i*xs_len; all threads of the block. */
template <class T>
static __device__ __forceinline__ void x_stage(const float *x, int64_t ldx, int n, int n_in,
                                               float *xs)
{
    int n4 = n_in / 4, len = (int)xs_len<T>(n_in), total = n * n4;
    /* 8 loads per thread in flight before the first store */
    for (int j0 = threadIdx.x; j0 < total; j0 += 8 * blockDim.x) {
        float4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int j = j0 + u * blockDim.x, i = j / n4, k = 4 * (j - i * n4);
            if (j < total)
                v[u] = __ldg((const float4 *)(x + i * ldx + k));
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int j = j0 + u * blockDim.x, i = j / n4, k = 4 * (j - i * n4);
            if (j < total)
                *(float4 *)(xs + i * len + kq_xpad<T>(k)) = v[u];
        }
    }
}

/* Asks for a row's bytes (nb blocks from p) ahead of their loads, so that
 * the HBM latency overlaps the staging of x: into L1 (the first rows of a
 * block) or L2 (the next row group of a persistent block). */
template <class T, bool L1>
static __device__ __forceinline__ void row_prefetch(const uint8_t *p, int nb, int lane)
{
    for (int o = 16 * lane; o < nb * T::BB + 16; o += 512) {
        if (L1)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(p + o));
        else
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
    }
}

/* Staged formats: loads the 16-byte granules that cover blocks [b0, b1) of
 * round ub (units ub..ub+31) of each row; off: where block b0 starts in its
 * first granule, ng: granules. */
template <class T, int RR>
static __device__ __forceinline__ void stage_load(const uint8_t *const *rows, int ub, int nb,
                                                  int lane, uint4 (&v)[RR][stage_of<T>::GMAX],
                                                  int (&off)[RR], int (&ng)[RR])
{
    int b0 = ub / T::UPB, b1 = min(b0 + 32 / T::UPB, nb);
#pragma unroll
    for (int r = 0; r < RR; r++) {
        uintptr_t s0 = (uintptr_t)(rows[r] + (size_t)b0 * T::BB), a0 = s0 & ~(uintptr_t)15;
        uintptr_t s1 = (uintptr_t)(rows[r] + (size_t)b1 * T::BB);
        off[r] = (int)(s0 - a0);
        ng[r] = (int)((s1 - a0 + 15) / 16);
#pragma unroll
        for (int k = 0; k < stage_of<T>::GMAX; k++)
            if (lane + 32 * k < ng[r])
                v[r][k] = __ldg((const uint4 *)a0 + lane + 32 * k);
    }
}

/* Two float4 of x at element i of a token: from the padded shared copy (SX)
 * or through L1. */
template <class T, bool SX>
static __device__ __forceinline__ void x_load8(const float *xt, int64_t i, float (&xv)[8])
{
    float4 a, b;
    if (SX) {
        const float4 *p = (const float4 *)(xt + kq_xpad<T>((int)i));
        a = p[0], b = p[1];
    } else {
        const float4 *p = (const float4 *)(xt + i);
        a = __ldg(p), b = __ldg(p + 1);
    }
    xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
    xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
}

/* acc[r][t] = W_r · x_t for the RR rows and NT tokens; every lane gets the
 * sums. stg: this warp's RR*TILE bytes of shared memory (staged formats).
 * The round loop is unrolled by 2 (RR = 1: by 4) so that the next rounds'
 * weight loads are issued before this round's arithmetic (two rounds cover a
 * 2048-wide row; four a 4096-wide one, the output projections). */
template <class T, int RR, int NT, bool SX>
static __device__ __forceinline__ void mv_dot(const uint8_t *const *rows, const float *const *xs,
                                              int nb, const cw_k_tabs &tabs, uint8_t *stg,
                                              int lane, float (&acc)[RR][NT])
{
    typedef stage_of<T> S;
    const int nu = nb * T::UPB;
#pragma unroll
    for (int r = 0; r < RR; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0.0f;
    uint4 v[RR][S::GMAX];
    int off[RR], ng[RR];
    if (!T::DIRECT)
        stage_load<T, RR>(rows, 0, nb, lane, v, off, ng);
#pragma unroll(RR == 1 ? 4 : 2)
    for (int ub = 0; ub < nu; ub += 32) {
        int u = ub + lane;
        bool on = u < nu;
        int blk = (on ? u : ub) / T::UPB, p = (on ? u : ub) % T::UPB;
        const uint8_t *bp[RR];
        if (T::DIRECT) {
#pragma unroll
            for (int r = 0; r < RR; r++)
                bp[r] = rows[r] + (size_t)blk * T::BB;
        } else {
            /* this round's bytes (loaded last round) into the stage, then
             * the next round's loads go out while this one computes */
            int b0 = ub / T::UPB;
#pragma unroll
            for (int r = 0; r < RR; r++)
#pragma unroll
                for (int k = 0; k < S::GMAX; k++)
                    if (lane + 32 * k < ng[r])
                        ((uint4 *)(stg + r * S::TILE))[lane + 32 * k] = v[r][k];
            __syncwarp();
#pragma unroll
            for (int r = 0; r < RR; r++)
                bp[r] = stg + r * S::TILE + off[r] + (blk - b0) * T::BB;
            if (ub + 32 < nu)
                stage_load<T, RR>(rows, ub + 32, nb, lane, v, off, ng);
        }
        if (on) {
            float w[RR][32];
#pragma unroll
            for (int r = 0; r < RR; r++)
                T::unit(bp[r], p, tabs, w[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    float xv[8];
                    x_load8<T, SX>(xs[t], (int64_t)blk * T::QK + T::run(p, q), xv);
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int r = 0; r < RR; r++)
                            acc[r][t] = __fmaf_rn(w[r][8 * q + j], xv[j], acc[r][t]);
                }
            }
        }
        if (!T::DIRECT)
            __syncwarp(); /* the stage is rewritten next round */
    }
#pragma unroll
    for (int r = 0; r < RR; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = cw_warp_sum(acc[r][t]);
}

/* Q8_K copies of nt tokens' x (row t at x + t*ldx) into shared memory, row
 * t at xq + t*kq_xq_bytes(nb): one warp per (token, 256-block), 8 elements
 * per lane, each block by kq_xq_block (the CPU's quantiser). */
/* XQB items per warp in flight where a warp takes several (xq_stage: a
 * block's own copy): a long row's x arrives in a few round trips, not one
 * per 256 elements */
#define XQB 4

/* SM: x in shared memory (else global, read through L1). T2 other than T:
 * the same values also into xq2 in T2's layout (xq_launch's second copy).
 * RX: kq_xq_block's warp reductions (kq_signed_max_rx), where the
 * quantiser is on a launch's serial chain: the launches that only quantise
 * (xq_kernel, xqn_kernel) and the per-block copies of gemv_flat_norm_kernel,
 * gemv_stream_kernel and the routed slots kernel (the 35B's mixers,
 * out-projections, LM heads, experts). gemv_flat_kernel and the dense
 * gate/up keep the shuffles, their code as it was: with the reductions in
 * every kernel the 27B's decode lost 2.6% (H100, its products' code moved).
 * H100 tg128, the same bits: 27B 127.35, 127.21 -> 127.85, 127.72; 35B
 * 461.56, 462.25 -> 465.77, 465.62. */
template <class T, bool SM = false, class T2 = T, bool RX = false>
static __device__ __forceinline__ void xq_rows(const float *x, int64_t ldx, int nt, int nb,
                                               uint8_t *xq, int warp, int nw,
                                               uint8_t *xq2 = NULL)
{
    const int lane = threadIdx.x & 31;
    const int tb = kq_xq_bytes(nb), n = nt * nb;
    for (int i0 = warp; i0 < n; i0 += XQB * nw) {
        float4 ld[XQB][2];
#pragma unroll
        for (int k = 0; k < XQB; k++) {
            int it = min(i0 + k * nw, n - 1), t = it / nb, b = it - t * nb;
            const float4 *xp = (const float4 *)(x + t * ldx + 256 * b + 8 * lane);
            if (SM)
                ld[k][0] = xp[0], ld[k][1] = xp[1];
            else
                ld[k][0] = __ldg(xp), ld[k][1] = __ldg(xp + 1);
        }
#pragma unroll
        for (int k = 0; k < XQB; k++) {
        int it = i0 + k * nw;
        if (it >= n)
            break; /* uniform over the warp */
        int t = it / nb, b = it - t * nb;
        float4 a = ld[k][0], c = ld[k][1];
        float v[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        kq_xq_block<T, T2, RX>(v, t, b, nb, tb, xq, xq2);
        }
    }
}

/* xq_rows by the warps of one block: its own copy in shared memory. */
template <class T, bool RX = false>
static __device__ __forceinline__ void xq_stage(const float *x, int64_t ldx, int nt, int nb,
                                                uint8_t *xq)
{
    xq_rows<T, false, T, RX>(x, ldx, nt, nb, xq, threadIdx.x >> 5, blockDim.x >> 5);
}

/* Wide x quantised once (xq_once): xq_kernel writes nt tokens' Q8_K copies
 * (xq_rows over the grid's warps: the same bits as any block's own) to
 * device memory, and each block of the product then copies them into
 * shared memory (xq_load) instead of quantising x itself: for a 17408-wide
 * x that is 20 KB read per block instead of 68 KB read and quantised. */
#define XQ_THREADS 128
template <class T, class T2 = T>
static __global__ void __launch_bounds__(XQ_THREADS)
    xq_kernel(const float *x, int64_t ldx, int nt, int nb, uint8_t *xq, uint8_t *xq2)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    constexpr int nw = XQ_THREADS / 32;
    xq_rows<T, false, T2, true>(x, ldx, nt, nb, xq,
                                (int)blockIdx.x * nw + (threadIdx.x >> 5), (int)gridDim.x * nw,
                                xq2);
}

/* x given as the norm of the residual stream (cw_k_norm_in): xq_kernel's
 * output, plus the normalised x written to y for the launches that read it
 * in f32 (xqn_kernel: none where y is NULL). */
struct xq_norm {
    const float *h, *w;
    int64_t ldh;
    float eps;
    float *y;
    int64_t ldy;
};

/* xq_kernel for x = RMSNorm(h)·w, B threads a block, grid (blocks per
 * token, n_tok). Each block normalises its token's whole row into shared
 * memory (cw_rmsnorm_row_to_sm: every block the bits of cw_k_add_rmsnorm),
 * writes its own items' part of y and quantises them from there: the norm
 * that the launch finishing h would otherwise run on its serial tail (one
 * block, after all the others) runs here beside the quantisation, and
 * nothing reads y back before the quantisation. The norm's weights come
 * into shared memory before the wait, and the product after it starts
 * only once h is in: a timeline of the 27B's decode (globaltimer stamps,
 * H200) had this kernel at 6.2 µs from its wait to its end, its weights'
 * DRAM reads queued behind the product's first chunks; with both changes
 * 27B tg64 143.5 -> 146.8 tok/s, the 35B's unchanged (480.4 / 480.5), the
 * same bits. */
#define XQN_THREADS 256 /* each block reduces the whole row: more threads, shorter chains */
template <class T, int B, class T2 = T>
static __global__ void __launch_bounds__(B)
    xqn_kernel(const xq_norm nm, int nb, uint8_t *xq, uint8_t *xq2)
{
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ double sh[NORM_VTHREADS / 32];
    float *hs = (float *)smem;
    const int n = nb * T::QK;
    float *ws = hs + (n + 3) / 4 * 4;
    cw_norm_w_stage<B>(nm.w, n, ws); /* the norm's weights: before the wait */
    cw_pdl_wait();
    constexpr int nw = B / 32;
    const int64_t t = blockIdx.y;
    /* the dependents (the product, whose first weights then flood DRAM)
     * are let go once h is in shared memory */
    cw_rmsnorm_row_to_sm<B, true>(nm.h + t * nm.ldh, ws, n, nm.eps, sh, hs, true, true);
    /* the items xq_rows gives this block's warps: i ≡ warp (mod nw·grid) */
    /* y: no launch reads x in f32 where it is NULL (cw_k_norm_in's
     * x_unread; H100, 27B decode, the same bits: 123.7 -> 124.2 tok/s) */
    if (nm.y) {
        float *y = nm.y + t * nm.ldy;
        for (int i0 = (int)blockIdx.x * nw; i0 < nb; i0 += nw * (int)gridDim.x)
            for (int i = i0 * T::QK + (int)threadIdx.x; i < min(i0 + nw, nb) * T::QK; i += B)
                y[i] = hs[i];
    }
    xq_rows<T, true, T2, true>(hs, 0, 1, nb, xq + t * kq_xq_bytes(nb),
                               (int)blockIdx.x * nw + (threadIdx.x >> 5), (int)gridDim.x * nw,
                               xq2 ? xq2 + t * kq_xq_bytes(nb) : NULL);
}

/* bytes (a multiple of 16) of xq_kernel's output into shared memory, through
 * L2 (the launch before wrote them). */
static __device__ __forceinline__ void xq_load(const uint8_t *g, int bytes, uint8_t *sm)
{
#pragma unroll 4
    for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x)
        ((uint4 *)sm)[i] = __ldcg((const uint4 *)g + i);
}

/* The Q8_K types (kq_q8k): acc[r][t] = the CPU's vec_dot of row r with
 * token t's Q8_K copy (xq[t], xq_stage), bit for bit. Per round the 8 lanes
 * of a block (4 blocks per round) form their integer shares, sum them by a
 * 3-step butterfly (exact), and every lane of the block forms the block's
 * float value v_b as the CPU does. The CPU adds v_b to acc[b mod 8] in block
 * order and ends with cw_reduce8: here block b = 4*round + lane/8, so lane
 * group k keeps slot k (even rounds) and slot 4 + k (odd rounds), each in
 * block order; cw_reduce8's tree is then (slot k + slot 4+k) in the group,
 * + group k^2 (xor 16), + group k^1 (xor 8): the same additions. The weight
 * loads (direct or staged) are mv_dot's, written out again: as a helper
 * taking the stage arrays by reference they cost ptxas registers in several
 * instances (q6_K one row per warp: 48 -> 55). */
template <class T, int RR, int NT>
static __device__ __forceinline__ void mv_dot_q8k(const uint8_t *const *rows,
                                                  const uint8_t *const *xq, int nb, uint8_t *stg,
                                                  int lane, float (&acc)[RR][NT])
{
    typedef stage_of<T> S;
    typedef kq_q8k<T> I;
    const int nu = nb * T::UPB;
    float ae[RR][NT], ao[RR][NT];
#pragma unroll
    for (int r = 0; r < RR; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            ae[r][t] = ao[r][t] = 0.0f;
    uint4 v[RR][S::GMAX];
    int off[RR], ng[RR];
    if (!T::DIRECT)
        stage_load<T, RR>(rows, 0, nb, lane, v, off, ng);
#pragma unroll 2
    for (int ub = 0; ub < nu; ub += 32) {
        int u = ub + lane;
        bool on = u < nu, odd = (ub >> 5) & 1;
        int blk = (on ? u : ub) / T::UPB, p = (on ? u : ub) % T::UPB;
        const uint8_t *bp[RR];
        if (T::DIRECT) {
#pragma unroll
            for (int r = 0; r < RR; r++)
                bp[r] = rows[r] + (size_t)blk * T::BB;
        } else {
            int b0 = ub / T::UPB;
#pragma unroll
            for (int r = 0; r < RR; r++)
#pragma unroll
                for (int k = 0; k < S::GMAX; k++)
                    if (lane + 32 * k < ng[r])
                        ((uint4 *)(stg + r * S::TILE))[lane + 32 * k] = v[r][k];
            __syncwarp();
#pragma unroll
            for (int r = 0; r < RR; r++)
                bp[r] = stg + r * S::TILE + off[r] + (blk - b0) * T::BB;
            if (ub + 32 < nu)
                stage_load<T, RR>(rows, ub + 32, nb, lane, v, off, ng);
        }
        /* every lane computes (the shuffles need the whole warp); lanes
         * past the row's end leave their sums untouched */
        kq_iu w[RR];
#pragma unroll
        for (int r = 0; r < RR; r++)
            I::unit(bp[r], p, w[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const uint8_t *qb = xq[t] + 256 * blk;
            const int gq = (p + blk) & 7; /* granule p, rotated (xq_rot) */
            uint4 xa = *(const uint4 *)(qb + 16 * gq), xb = *(const uint4 *)(qb + 16 * (8 + gq));
            const int16_t *bs = (const int16_t *)(xq[t] + 256 * nb) + 16 * blk;
            float dx = ((const float *)(xq[t] + 288 * nb))[blk];
#pragma unroll
            for (int r = 0; r < RR; r++) {
                int2 s = I::dot(w[r], xa, xb, bs, p);
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) {
                    s.x += __shfl_xor_sync(0xffffffffu, s.x, o);
                    s.y += __shfl_xor_sync(0xffffffffu, s.y, o);
                }
                float vb = I::comb(w[r], dx, s);
                if (on) {
                    if (odd)
                        ao[r][t] = __fadd_rn(ao[r][t], vb);
                    else
                        ae[r][t] = __fadd_rn(ae[r][t], vb);
                }
            }
        }
        if (!T::DIRECT)
            __syncwarp(); /* the stage is rewritten next round */
    }
#pragma unroll
    for (int r = 0; r < RR; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = __fadd_rn(ae[r][t], ao[r][t]);
            s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 16));
            acc[r][t] = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 8));
        }
}

/* Bytes of the per-warp weight stages of a block (16 for direct formats). */
template <class T, int RR, int NW>
static __host__ __device__ constexpr int wstage_bytes()
{
    return T::DIRECT ? 16 : NW * RR * stage_of<T>::TILE;
}

/* One launch may cover up to MV_SEGS matrices of one type and width that
 * share x (cw_k_matmul_multi): their rows are numbered one after another,
 * segment i holding rows [seg[i-1].end, seg[i].end) of the launch. */
#define MV_SEGS 4
struct mv_seg {
    const uint8_t *w;
    size_t rb;
    int64_t end; /* one past the segment's last row, in launch rows */
    float *y;    /* this token group's output of the segment */
    int64_t ldy;
};

struct mv_args {
    mv_seg seg[MV_SEGS];
    int nseg;
    int64_t n_out; /* rows of all segments */
    int nb;        /* blocks per row */
    const float *x;
    int64_t ldx;
    int nt; /* valid tokens of this group, <= NT */
    int add;
    const float *scale_logit; /* this group's, or NULL */
    cw_k_tabs tabs;
    cw_norm_epi epi; /* one segment: its rows of this group normalised after */
    const uint8_t *xqg; /* Q8K: this group's Q8_K x from xq_kernel, or NULL */
    int fr; /* gemv_flat_kernel: rows per group */
};

/* Segment of launch row `row` (< a.n_out), and the row's bytes. */
static __device__ __forceinline__ int mv_seg_of(const mv_args &a, int64_t row)
{
    int s = 0;
#pragma unroll
    for (int i = 0; i < MV_SEGS - 1; i++)
        s += i < a.nseg - 1 && row >= a.seg[i].end;
    return s;
}

static __device__ __forceinline__ const uint8_t *mv_row(const mv_args &a, int64_t row)
{
    const int s = mv_seg_of(a, row);
    return a.seg[s].w + (size_t)(row - (s ? a.seg[s - 1].end : 0)) * a.seg[s].rb;
}

/* Stores the product v of launch row `row` for token t: σ-scaled, added. */
static __device__ __forceinline__ void mv_put(const mv_args &a, int64_t row, int t, float v)
{
    if (a.scale_logit)
        v = __fmul_rn(v, cw_dev_sigmoid(a.scale_logit[t]));
    const int sg = mv_seg_of(a, row);
    float *yp = a.seg[sg].y + t * a.seg[sg].ldy + row - (sg ? a.seg[sg - 1].end : 0);
    *yp = a.add ? __fadd_rn(*yp, v) : v;
}

/* Dense rows: each warp RR rows × NT tokens; rows past n_out repeat the last
 * row and tokens past nt repeat token 0 (computed, never written), so the
 * loops carry no predicates. The block stages x once (SX) and then walks
 * row groups blockIdx.x, +gridDim.x, ... (a grid of a few blocks per SM for
 * the LM head, so x is staged ~500 times, not once per 8 rows). */
template <class T, int RR, int NT, bool SX, bool Q8K>
static __global__ void __launch_bounds__(WARPS * 32) gemv_kernel(const mv_args a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    float *xsm = (float *)(smem + wstage_bytes<T, RR, WARPS>());
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n_in = a.nb * T::QK;
    const float *xs[NT];
    const int64_t n_grp = (a.n_out + WARPS * RR - 1) / (WARPS * RR);
    {
        /* the first group's weights are asked for before the wait: they
         * arrive while the previous kernel finishes (cuda_common.cuh) */
        int64_t row0 = ((int64_t)blockIdx.x * WARPS + warp) * RR;
        if (row0 < a.n_out)
#pragma unroll
            for (int r = 0; r < RR; r++)
                row_prefetch<T, true>(mv_row(a, min(row0 + r, a.n_out - 1)), a.nb, lane);
    }
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    /* Q8K (the kq_q8k types, q8k_use): x quantised once per block
     * (xq_stage); SX alone stages f32 x */
    static_assert(!Q8K || (SX && kq_q8k<T>::ON), "Q8K stages x");
    const uint8_t *xq[NT];
    if constexpr (Q8K) {
        if (a.xqg)
            xq_load(a.xqg, a.nt * kq_xq_bytes(a.nb), (uint8_t *)xsm);
        else
            xq_stage<T>(a.x, a.ldx, a.nt, a.nb, (uint8_t *)xsm);
        __syncthreads();
#pragma unroll
        for (int t = 0; t < NT; t++)
            xq[t] = (const uint8_t *)xsm + (t < a.nt ? t : 0) * kq_xq_bytes(a.nb);
    } else if (SX) {
        x_stage<T>(a.x, a.ldx, a.nt, n_in, xsm);
        __syncthreads();
#pragma unroll
        for (int t = 0; t < NT; t++)
            xs[t] = xsm + (t < a.nt ? t : 0) * xs_len<T>(n_in);
    } else {
#pragma unroll
        for (int t = 0; t < NT; t++)
            xs[t] = a.x + (t < a.nt ? t : 0) * a.ldx;
    }
    uint8_t *stg = smem + warp * (T::DIRECT ? 0 : RR * stage_of<T>::TILE);
    for (int64_t g = blockIdx.x; g < n_grp; g += gridDim.x) {
        int64_t row0 = (g * WARPS + warp) * RR;
        if (row0 >= a.n_out)
            break; /* later groups lie further still */

        const uint8_t *rows[RR];
#pragma unroll
        for (int r = 0; r < RR; r++)
            rows[r] = mv_row(a, min(row0 + r, a.n_out - 1));
        float acc[RR][NT];
        if constexpr (Q8K)
            mv_dot_q8k<T, RR, NT>(rows, xq, a.nb, stg, lane, acc);
        else
            mv_dot<T, RR, NT, SX>(rows, xs, a.nb, a.tabs, stg, lane, acc);
        /* lane r*NT + t writes (row r, token t) */
#pragma unroll
        for (int r = 0; r < RR; r++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (lane == r * NT + t && row0 + r < a.n_out && t < a.nt)
                    mv_put(a, row0 + r, t, acc[r][t]);
    }
    cw_norm_epilogue<WARPS * 32>(a.epi, a.seg[0].y, a.seg[0].ldy, a.nt, smem);
}

/* lpb_block of a Q6_K block read whole by its 16-byte cover (kq_k6_words),
 * its 8 units' work (kq_k6_int) done as a whole: each group of 16 (run k
 * of units p and p + 1, p even) in one dp4a chain times its scale (16
 * multiplies, not 32), and the -32 term's Σ_g sc_g bsum_g as 8 dp2a of
 * the bsum pairs with the scale bytes, a word holding four groups'
 * scales in the order of their bsums. Integers, exact: kq_k6_int's sumi,
 * so v_b is kq_k6_int::comb's bits. */
template <int NT>
static __device__ __forceinline__ void lpb_block_k6(const uint8_t *bp, const uint8_t *const *xq,
                                                    int nb, int b, float (&v)[NT])
{
    uint32_t bw[53];
    kq_k6_words(bp, bw);
    int si[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint8_t *bs = xq[t] + 256 * nb + 32 * b;
        const uint4 w[2] = {*(const uint4 *)bs, *(const uint4 *)(bs + 16)};
        int m = 0;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            m = kq_dp2a<true>((int)w[h].x, (int)bw[48 + 2 * h], m);
            m = kq_dp2a<false>((int)w[h].y, (int)bw[48 + 2 * h], m);
            m = kq_dp2a<true>((int)w[h].z, (int)bw[49 + 2 * h], m);
            m = kq_dp2a<false>((int)w[h].w, (int)bw[49 + 2 * h], m);
        }
        si[t] = -32 * m;
    }
#pragma unroll
    for (int pp = 0; pp < 4; pp++) {
        /* units p = 2pp, p + 1: half hh, groups 8hh + 2k + (pp & 1) */
        const int hh = pp >> 1;
        uint32_t q[2][8];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int j = 2 * ((2 * pp + e) & 3);
#pragma unroll
            for (int k = 0; k < 4; k++)
#pragma unroll
                for (int i = 0; i < 2; i++)
                    q[e][2 * k + i] = kq_k6_word(bw[16 * hh + j + i], bw[16 * hh + 8 + j + i],
                                                 bw[32 + 8 * hh + j + i], k);
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const uint8_t *qb = xq[t] + 256 * b;
            uint32_t xw[2][8];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int gq = (2 * pp + e + b) & 7; /* rotated */
                const uint4 xa = *(const uint4 *)(qb + 16 * gq);
                const uint4 xb = *(const uint4 *)(qb + 16 * (8 + gq));
                xw[e][0] = xa.x, xw[e][1] = xa.y, xw[e][2] = xa.z, xw[e][3] = xa.w;
                xw[e][4] = xb.x, xw[e][5] = xb.y, xw[e][6] = xb.z, xw[e][7] = xb.w;
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int dk = kq_dp4a((int)q[0][2 * k], (int)xw[0][2 * k], 0);
                dk = kq_dp4a((int)q[0][2 * k + 1], (int)xw[0][2 * k + 1], dk);
                dk = kq_dp4a((int)q[1][2 * k], (int)xw[1][2 * k], dk);
                dk = kq_dp4a((int)q[1][2 * k + 1], (int)xw[1][2 * k + 1], dk);
                const int g = 8 * hh + 2 * k + (pp & 1);
                si[t] += (int)(int8_t)(bw[48 + (g >> 2)] >> (8 * (g & 3))) * dk;
            }
        }
    }
    const float d = cw_dev_f16_to_f32((uint16_t)(bw[52] & 0xFFFFu));
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float dx = ((const float *)(xq[t] + 288 * nb))[b];
        v[t] = __fmul_rn(__fmul_rn(dx, d), __int2float_rn(si[t]));
    }
}

/* Block b's value v_b (I::comb of its integer shares, summed in the lane)
 * for each of NT tokens: the per-block step of mv_dot_q8k_lpb and of the
 * flat kernels. bp: the block's bytes, in global memory or (SM) shared;
 * CV: a Q6_K block in shared memory read whole by its 16-byte cover. */
template <class T, int NT, bool SM = false, bool CV = false>
static __device__ __forceinline__ void lpb_block(const uint8_t *bp, const uint8_t *const *xq,
                                                 int nb, int b, float (&v)[NT])
{
    if constexpr (SM && CV && kq_same<T, kt_q6_k>::V) {
        lpb_block_k6<NT>(bp, xq, nb, b, v);
    } else {
        typedef kq_q8k<T> I;
        int2 sb[NT];
#pragma unroll
        for (int t = 0; t < NT; t++)
            sb[t] = make_int2(0, 0);
        kq_iu u;
        kq_bs8 bs[NT];
#pragma unroll
        for (int p = 0; p < 8; p++) {
            I::template unit<SM>(bp, p, u);
            const int gq = (p + b) & 7; /* granule p of block b, rotated */
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const uint8_t *qb = xq[t] + 256 * b;
                const uint4 xa = *(const uint4 *)(qb + 16 * gq);
                const uint4 xb = *(const uint4 *)(qb + 16 * (8 + gq));
                /* units 0-3 read bsums 0-7, units 4-7 bsums 8-15 (kq_bs8) */
                if (p % 4 == 0)
                    bs[t] = kq_bs8{*(const uint4 *)(xq[t] + 256 * nb + 32 * b + 4 * p), 2 * p};
                const int2 d = I::dot(u, xa, xb, bs[t], p);
                sb[t].x += d.x, sb[t].y += d.y;
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float dx = ((const float *)(xq[t] + 288 * nb))[b];
            v[t] = I::comb(u, dx, sb[t]);
        }
    }
}

/* cw_reduce8's tree over 8 slots held by lanes 8k..8k+7 (slot = lane & 7):
 * the butterfly xor 4, 2, 1. All 32 lanes call it. */
static __device__ __forceinline__ float lpb_reduce8(float v)
{
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, 1));
}

/* The Q4_K/Q5_K products on Q8_K x, one lane per 256-block (lpb_use): a
 * warp's 32 lanes are 4 groups of 8, one row each; lane j of a group takes
 * the row's blocks j, j+8, j+16, ... whole (its 8 units in turn, their
 * integer shares summed in the lane: exact, so the block's sumi and summ
 * are the CPU's), forms each block's value v_b as the CPU does (I::comb)
 * and adds it to its own sum in block order. That sum is the CPU's
 * accumulator slot b mod 8 = j (cpu_dot.h), and cw_reduce8's tree over the
 * 8 slots is the butterfly xor 4, 2, 1 over the group's lanes: the CPU's
 * bits, as mv_dot_q8k. Against mv_dot_q8k (8 lanes per block, a butterfly
 * and a combination per block and lane) the per-block work is done once,
 * and each lane asks for 144 (176) bytes of weights at once. x: the
 * rotated copy (xq_rot), so the group's 8 lanes read 8 bank groups. */
template <class T, int NT>
static __device__ __forceinline__ void mv_dot_q8k_lpb(const uint8_t *row,
                                                      const uint8_t *const *xq, int nb, int j,
                                                      float (&acc)[NT])
{
    float sl[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        sl[t] = 0.0f;
    for (int b = j; b < nb; b += 8) {
        float v[NT];
        lpb_block<T, NT>(row + (size_t)b * T::BB, xq, nb, b, v);
#pragma unroll
        for (int t = 0; t < NT; t++)
            sl[t] = __fadd_rn(sl[t], v[t]);
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = lpb_reduce8(sl[t]);
}

/* gemv_kernel's Q8K path with mv_dot_q8k_lpb: LPB_ROWS rows per warp, the
 * block's x copy (xq_load, or xq_stage), row groups walked as a
 * persistent grid; lane j of group g writes (row g, token j). */
#define LPB_ROWS 4
template <class T, int NT>
static __global__ void __launch_bounds__(WARPS * 32) gemv_lpb_kernel(const mv_args a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
    const int64_t n_grp = (a.n_out + WARPS * LPB_ROWS - 1) / (WARPS * LPB_ROWS);
    {
        /* this lane's blocks of its first row, asked for before the wait */
        const int64_t row = ((int64_t)blockIdx.x * WARPS + warp) * LPB_ROWS + g;
        if (row < a.n_out) {
            const uint8_t *p = mv_row(a, row);
            for (int b = j; b < a.nb; b += 8)
                for (int o = 0; o < T::BB; o += 128)
                    asm volatile("prefetch.global.L1 [%0];" ::"l"(p + (size_t)b * T::BB + o));
        }
    }
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    if (a.xqg)
        xq_load(a.xqg, a.nt * kq_xq_bytes(a.nb), smem);
    else
        xq_stage<T>(a.x, a.ldx, a.nt, a.nb, smem);
    __syncthreads();
    const uint8_t *xq[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        xq[t] = smem + (t < a.nt ? t : 0) * kq_xq_bytes(a.nb);
    for (int64_t gr = blockIdx.x; gr < n_grp; gr += gridDim.x) {
        const int64_t row0 = (gr * WARPS + warp) * LPB_ROWS;
        if (row0 >= a.n_out)
            break; /* later groups lie further still */
        float acc[NT];
        mv_dot_q8k_lpb<T, NT>(mv_row(a, min(row0 + g, a.n_out - 1)), xq, a.nb, j, acc);
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (j == t && row0 + g < a.n_out && t < a.nt)
                mv_put(a, row0 + g, t, acc[t]);
    }
    cw_norm_epilogue<WARPS * 32>(a.epi, a.seg[0].y, a.seg[0].ldy, a.nt, smem);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
#endif

/* n barriers of one arrival each, their init visible to the copy engine. */
static __device__ __forceinline__ void mbar_init(uint64_t *bar, int n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    for (int k = 0; k < n; k++)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[k])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/* Waits for the phase of bar with this parity to complete. */
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
#endif
}

/* bar's one arrival, which also expects bytes more of the copy engine's
 * writes (issued after it) before its phase completes */
static __device__ __forceinline__ void mbar_expect(uint64_t *bar, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* bytes (a multiple of 16; both addresses 16-byte aligned) from global src
 * to shared dst by the bulk copy engine, completing on bar */
static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                                 uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

/* The Q8_K products (Q4_K, Q5_K, Q6_K) whose rows hold 8 blocks or more
 * (flat_use): the lpb kernels give a row's 8 lanes nb/8 blocks each in
 * turn, and a 5120-row matrix then fills only ~10 warps per SM of an H200
 * (ncu, 27B decode: gemv_lpb_kernel at 1.7 TB/s, long-scoreboard bound).
 * Here a block's FLAT_THREADS threads take the (row, block) units of a
 * group of a.fr rows, 32 consecutive units (a chunk) per warp at a time,
 * one per lane; each unit's v_b (lpb_block) goes to shared memory, then
 * thread (r, j) adds row r's v_b of blocks j, j+8, ... in order and the 8
 * lanes end with lpb_reduce8: the same values added in the same order as
 * mv_dot_q8k_lpb, so the CPU's bits. A chunk's bytes come into shared
 * memory by the bulk copy engine or cp.async (flat_fetch), the next
 * chunk's in flight while one is computed: lanes reading 144-byte blocks
 * straight from global memory touch ~36 lines per load instruction, and
 * an earlier form of this kernel that did so (one unit's prefetch ahead)
 * ran at 1.1 TB/s. Q6_K's 210-byte blocks come the same way (flat_slot),
 * where mv_dot_q8k's 8 lanes per block ran the 27B's Q6_K products at
 * 2.2-2.5 TB/s. The host sizes a.fr for one wave of FLAT_CPS blocks per
 * SM (flat_plan). */
#define FLAT_THREADS 256
#define FLAT_WARPS (FLAT_THREADS / 32)
#define FLAT_CPS 2
#define FLAT_FR_MAX 256        /* rows per group: few groups, few pipeline restarts */
#define FLAT_SV_MAX (32 << 10) /* shared bytes of the v_b of one group */
#define FLAT_ROWS_MAX 65536    /* launch rows: the LM heads take the other kernels */

/* From 8 blocks a row: the 35B's 2048-wide products too, where 8 lanes of
 * a row each took one block (H200, 35B decode, the same bits: 340.8 ->
 * 355.6 tok/s). Narrower rows stay with the lpb kernels, and so do the LM
 * heads' 248,320 rows (and Q6_K's 8 lanes a block), where a block walks
 * many row groups: H200, one token, q6_K 248320 x 5120 321.7 µs against
 * 344.3 flat, x 2048 153.5 against 154.2, q4_K x 2048 90.1 against 94.6. */
static bool flat_use(int nb, int64_t n_out)
{
    return nb >= 8 && n_out <= FLAT_ROWS_MAX;
}

/* Blocks whose length is not a multiple of 16 bytes (Q6_K's 210) start at
 * any even address: a chunk's copy then takes the 16-byte-aligned cover of
 * its bytes, the blocks starting at the first one's offset in its 16-byte
 * piece, and a chunk whose blocks are not back to back is copied lane by
 * lane into slots of flat_slot bytes (a block and the rest of its first
 * and last pieces). */
template <class T>
static __host__ __device__ constexpr int flat_slot()
{
    return T::BB % 16 ? (T::BB + 14 + 15) / 16 * 16 : T::BB;
}

/* Shared bytes of one chunk's stage. */
template <class T>
static __host__ __device__ constexpr int flat_chunk_bytes()
{
    return T::BB % 16 ? (32 * T::BB + 16 > 32 * flat_slot<T>() ? 32 * T::BB + 16
                                                                  : 32 * flat_slot<T>())
                      : 32 * T::BB;
}

/* Shared bytes of the weight stages: two chunks of 32 blocks per warp. */
template <class T>
static __host__ __device__ constexpr size_t flat_stage_bytes()
{
    return (size_t)FLAT_WARPS * 2 * flat_chunk_bytes<T>();
}

/* Shared bytes of a flat launch: the stages, nt tokens' Q8_K x (ql bytes
 * each), the group's v_b (per: rows of units per output row, 2 for the
 * gate/up). */
template <class T>
static size_t flat_smem(size_t ql, int nt, int fr, int per, int nb)
{
    return flat_stage_bytes<T>() + ql * nt + (size_t)nt * per * fr * nb * sizeof(float);
}

/* Where chunk c (units 32c .. 32c+31 below nun; unit_at(u): unit u's
 * bytes) lies: its first block p0, its n blocks, whether they lie back to
 * back (one matrix, unpadded rows). */
template <class T, class UnitAt>
static __device__ __forceinline__ bool flat_chunk(const UnitAt &unit_at, int c, int nun,
                                                  const uint8_t *&p0, int &n)
{
    const int u0 = 32 * c;
    n = min(32, nun - u0);
    if (n <= 0)
        return false;
    p0 = unit_at(u0);
    return unit_at(u0 + n - 1) == p0 + (size_t)(n - 1) * T::BB;
}

/* Offset of p in its 16-byte piece (0 where blocks are 16-byte multiples). */
template <class T>
static __device__ __forceinline__ int flat_off(const uint8_t *p)
{
    return T::BB % 16 ? (int)((uintptr_t)p & 15) : 0;
}

/* sm_90 on: a chunk's copy by the bulk copy engine, completing on its
 * stage's mbarrier (flat_ring), so that the weights no longer pass through
 * the SM's load path, whose wavefronts bound a chunk's compute (2026-12-06d:
 * the 16-byte cp.async writes were 36 of a Q4_K block's ~150). H100 tg128,
 * the same bits, in three calls: 27B 131.14, 131.13, 130.98, 131.10 ->
 * 132.22, 132.02, 132.19, 131.87; 35B 470.68, 469.25 -> 480.51, 479.0.
 * Asking for the warp's second chunk before the PDL wait too lost on the
 * 27B (129.06, 128.98). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLAT_BULK 1
#else
#define FLAT_BULK 0
#endif

/* Whether the NT-token flat kernels take their chunks by bulk copies: the
 * one-token ones, where it was measured. The others keep the cp.async
 * ring, their code as it was (with the barriers, ptxas gave the Q6_K
 * 8-token kernel 128 registers and 44 bytes of spills where it had 173
 * and none). */
template <int NT>
static __device__ __forceinline__ constexpr bool flat_bulk()
{
    return FLAT_BULK && NT == 1;
}

/* A warp's NS = 2 stage barriers (flat_bulk) and the parity of each one's
 * next phase (bit k: stage k), carried across the groups of a block. */
struct flat_ring {
    uint64_t *bar;
    unsigned ph;
};

/* The warp's ring: with BK its barriers in bars (FLAT_WARPS * 2 of them,
 * shared), initialised by its lane 0 before any copy. */
template <bool BK>
static __device__ __forceinline__ flat_ring flat_ring_init(uint64_t *bars)
{
    if constexpr (!BK)
        return flat_ring{bars, 0u};
    uint64_t *bar = bars + 2 * (threadIdx.x >> 5);
    if ((threadIdx.x & 31) == 0)
        mbar_init(bar, 2);
    __syncwarp();
    return flat_ring{bar, 0u};
}

/* Starts the copy of chunk c into stage k (at st, flat_slot's layout) of
 * the ring. Where the chunk's blocks lie back to back: one bulk copy of
 * their 16-byte-aligned cover (BK, flat_bulk), or the lanes' 16-byte
 * cp.async pieces, 512 bytes in a row per instruction; else lane by lane.
 * cp.async's copy is committed (an empty group past the end, so that the
 * waits count alike in every lane); with BK nothing is asked past the
 * end, and that stage is not waited for. */
template <class T, bool BK, class UnitAt>
static __device__ __forceinline__ void flat_fetch(const UnitAt &unit_at, int c, int nun,
                                                  uint8_t *st, const flat_ring &rg, int k,
                                                  int lane)
{
    const uint8_t *p0;
    int n;
    const bool run = flat_chunk<T>(unit_at, c, nun, p0, n);
    if constexpr (BK) {
        if (n <= 0)
            return;
        if (run) {
            if (lane == 0) {
                const int o = flat_off<T>(p0);
                const unsigned len = (unsigned)(o + n * T::BB + 15) / 16 * 16;
                mbar_expect(rg.bar + k, len);
                bulk_copy(st, p0 - o, len, rg.bar + k);
            }
            return;
        }
        const uint8_t *p = lane < n ? unit_at(32 * c + lane) : p0;
        const int o = flat_off<T>(p);
        const unsigned len = lane < n ? (unsigned)(o + T::BB + 15) / 16 * 16 : 0u;
        const unsigned tot = cw_warp_sum(len);
        if (lane == 0)
            mbar_expect(rg.bar + k, tot);
        __syncwarp();
        if (lane < n)
            bulk_copy(st + lane * flat_slot<T>(), p - o, len, rg.bar + k);
        return;
    }
    (void)rg, (void)k;
    if (run) {
        const int o = flat_off<T>(p0);
        for (int q = lane; q < (o + n * T::BB + 15) / 16; q += 32)
            cw_cp16(st + 16 * q, p0 - o + 16 * q);
    } else if (lane < n) {
        const uint8_t *p = unit_at(32 * c + lane);
        const int o = flat_off<T>(p);
        for (int q = 0; q < (o + T::BB + 15) / 16; q++)
            cw_cp16(st + lane * flat_slot<T>() + 16 * q, p - o + 16 * q);
    }
    cw_cp_commit();
}

/* Waits for stage k's chunk (every lane's copies). */
template <bool BK>
static __device__ __forceinline__ void flat_wait(flat_ring &rg, int k)
{
    if constexpr (BK) {
        mbar_wait(rg.bar + k, (rg.ph >> k) & 1u);
        rg.ph ^= 1u << k;
    } else {
        (void)rg, (void)k;
        cw_cp_wait<1>(); /* this lane's copies of the chunk (NS = 2) */
        __syncwarp();    /* ... and every lane's */
    }
}

/* This lane's block of chunk c in its stage st (flat_fetch's layout). */
template <class T, class UnitAt>
static __device__ __forceinline__ const uint8_t *flat_block(const UnitAt &unit_at, int c,
                                                            int nun, const uint8_t *st, int lane)
{
    const uint8_t *p0;
    int n;
    if (flat_chunk<T>(unit_at, c, nun, p0, n))
        return st + flat_off<T>(p0) + lane * T::BB;
    return st + lane * flat_slot<T>() + flat_off<T>(unit_at(32 * c + lane));
}

/* v_b of the nun units of a group (chunks warp, warp + FLAT_WARPS, ...)
 * for the nt tokens into sv[t * stride + u]. stg: this warp's NS = 2
 * stages, a ring (rg); pre: its first chunk is already fetched into the
 * first (before the PDL wait, or through the previous group's sums). Ends
 * with no copy in flight. Three stages for the 27B's Q6_K launches (one
 * block an SM: room for them) ran 147.9 tok/s against the same binary's
 * 150.0 with two (H200, 2026-12-04). This ring form itself ran the 27B at
 * 150.0 against 147.6-148.4 for the buffer flag it replaced, the same
 * bits: a change of the compiler's schedule whose cause was not found. */
template <class T, int NT, class UnitAt>
static __device__ __forceinline__ void flat_stream(const UnitAt &unit_at, int nun, int nb,
                                                   const uint8_t *const *xq, int nt, float *sv,
                                                   int stride, uint8_t *stg, flat_ring &rg,
                                                   bool pre)
{
    constexpr int NS = 2;
    constexpr bool BK = flat_bulk<NT>();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nch = (nun + 31) / 32;
    if (!pre)
        flat_fetch<T, BK>(unit_at, warp, nun, stg, rg, 0, lane);
    int buf = 0, nxt = NS - 1;
    for (int c = warp; c < nch; c += FLAT_WARPS) {
        flat_fetch<T, BK>(unit_at, c + (NS - 1) * FLAT_WARPS, nun,
                          stg + nxt * flat_chunk_bytes<T>(), rg, nxt, lane);
        nxt = nxt + 1 == NS ? 0 : nxt + 1;
        flat_wait<BK>(rg, buf); /* chunk c */
        const int u = 32 * c + lane;
        if (u < nun) {
            const int b = u % nb;
            float v[NT];
            lpb_block<T, NT, true, true>(
                flat_block<T>(unit_at, c, nun, stg + buf * flat_chunk_bytes<T>(), lane), xq, nb,
                b, v);
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < nt)
                    sv[t * stride + u] = v[t];
        }
        buf = buf + 1 == NS ? 0 : buf + 1;
        __syncwarp(); /* the stage is refilled NS chunks on */
    }
    if constexpr (!BK)
        cw_cp_wait<0>();
}

/* Row r's product for thread (r, j = lane & 7): slot j's blocks in order,
 * then lpb_reduce8. All threads call it (the shuffles); in: r is a row. */
template <int NT>
static __device__ __forceinline__ void flat_slots(const float *sv, int stride, int r, int nb,
                                                  int nt, bool in, float (&acc)[NT])
{
    const int j = threadIdx.x & 7;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = 0.0f;
        if (in && t < nt)
            for (int b = j; b < nb; b += 8)
                s = __fadd_rn(s, sv[t * stride + r * nb + b]);
        acc[t] = lpb_reduce8(s);
    }
}

/* x = RMSNorm(xn.h)·xn.w of one token, by every block of a flat launch
 * (cw_rmsnorm_row_to_sm, plain loads: a cp.async group here would also
 * wait for the warps' first weight chunks): the row in hs, each block's
 * share of it written to xn.y for the launches that read x in f32, and
 * its Q8_K copy in xqs. The bits of xqn_kernel, without its launch. */
template <class T>
static __device__ void flat_norm_x(const xq_norm &xn, int nb, float *hs, uint8_t *xqs)
{
    __shared__ double sh[NORM_VTHREADS / 32];
    const int n = nb * T::QK;
    cw_rmsnorm_row_to_sm<FLAT_THREADS>(xn.h, xn.w, n, xn.eps, sh, hs, false);
    for (int i = (int)blockIdx.x * FLAT_THREADS + (int)threadIdx.x; i < n;
         i += (int)gridDim.x * FLAT_THREADS)
        xn.y[i] = hs[i];
    xq_rows<T, true, T, true>(hs, 0, 1, nb, xqs, (int)threadIdx.x >> 5, FLAT_WARPS);
}

/* The flat kernel's body; XN: x as the norm xn of h (one token,
 * gemv_flat_norm_kernel), its own instance so that the plain kernels keep
 * their code. */
template <class T, int NT, bool XN>
static __device__ __forceinline__ void gemv_flat_body(const mv_args &a, const xq_norm &xn)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int nb = a.nb, fr = a.fr, stride = fr * nb, lane = threadIdx.x & 31;
    const int64_t n_grp = (a.n_out + fr - 1) / fr;
    uint8_t *stg = smem + (threadIdx.x >> 5) * 2 * flat_chunk_bytes<T>();
    int64_t r0 = (int64_t)blockIdx.x * fr;
    const auto unit_at = [&](int u) {
        const int r = u / nb;
        return mv_row(a, r0 + r) + (size_t)(u - r * nb) * T::BB;
    };
    auto rows_of = [&](int64_t r) { return (int)(a.n_out - r < fr ? a.n_out - r : fr); };
    __shared__ uint64_t bars[flat_bulk<NT>() ? 2 * FLAT_WARPS : 1];
    flat_ring ring = flat_ring_init<flat_bulk<NT>()>(bars);
    /* the warp's first chunk, asked for before the wait */
    flat_fetch<T, flat_bulk<NT>()>(unit_at, threadIdx.x >> 5, rows_of(r0) * nb, stg, ring, 0,
                                   lane);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const size_t ql = (size_t)kq_xq_bytes(nb);
    uint8_t *xqs = smem + flat_stage_bytes<T>();
    float *sv = (float *)(xqs + a.nt * ql);
    if constexpr (XN)
        flat_norm_x<T>(xn, nb, sv + (stride + 3) / 4 * 4, xqs);
    else if (a.xqg)
        xq_load(a.xqg, (int)(a.nt * ql), xqs);
    else
        xq_stage<T>(a.x, a.ldx, a.nt, nb, xqs);
    __syncthreads();
    const uint8_t *xq[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        xq[t] = xqs + (t < a.nt ? t : 0) * ql;
    for (int64_t gr = blockIdx.x; gr < n_grp; gr += gridDim.x) {
        const int64_t rb = gr * fr;
        const int nr = rows_of(rb);
        r0 = rb;
        flat_stream<T, NT>(unit_at, nr * nb, nb, xq, a.nt, sv, stride, stg, ring, true);
        /* the next group's first chunk, in flight through the sums below
         * (a block walks several groups where FLAT_SV_MAX bounds them:
         * long rows, several tokens) */
        if (gr + gridDim.x < n_grp) {
            r0 = rb + (int64_t)gridDim.x * fr;
            flat_fetch<T, flat_bulk<NT>()>(unit_at, threadIdx.x >> 5, rows_of(r0) * nb, stg,
                                           ring, 0, lane);
        }
        __syncthreads();
        for (int rr = 0; rr < nr; rr += FLAT_THREADS / 8) {
            const int r = rr + (int)(threadIdx.x >> 3), j = threadIdx.x & 7;
            float acc[NT];
            flat_slots<NT>(sv, stride, r, nb, a.nt, r < nr, acc);
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (j == t && r < nr && t < a.nt)
                    mv_put(a, rb + r, t, acc[t]);
        }
        __syncthreads(); /* sv is the next group's */
    }
    cw_norm_epilogue<FLAT_THREADS>(a.epi, a.seg[0].y, a.seg[0].ldy, a.nt, smem);
}

template <class T, int NT>
static __global__ void __launch_bounds__(FLAT_THREADS) gemv_flat_kernel(const mv_args a)
{
    gemv_flat_body<T, NT, false>(a, xq_norm{});
}

template <class T>
static __global__ void __launch_bounds__(FLAT_THREADS)
    gemv_flat_norm_kernel(const mv_args a, const xq_norm xn)
{
    gemv_flat_body<T, 1, true>(a, xn);
}

/* Rows per group of the flat kernels (per: rows of units per output row,
 * 2 for the gate/up): groups of at most FLAT_FR_MAX rows whose v_b fit
 * FLAT_SV_MAX, as few per block as that allows, and as many groups as
 * blocks in those waves of cps blocks per SM (no short last wave). */
static int flat_rows(int64_t n_out, int nb, int nt, int per, int n_sm, int cps)
{
    const int64_t wave = (int64_t)cps * n_sm;
    int64_t lim = FLAT_SV_MAX / ((int64_t)nt * per * nb * (int64_t)sizeof(float));
    lim = lim < FLAT_FR_MAX ? lim : FLAT_FR_MAX;
    lim = lim > 1 ? lim : 1;
    const int64_t k = (n_out + wave * lim - 1) / (wave * lim); /* groups per block */
    const int64_t fr = (n_out + wave * k - 1) / (wave * k);
    return fr > 1 ? (int)fr : 1;
}

/* Plans a flat launch of nt tokens (ql: one token's Q8_K bytes): sets fr
 * for waves of FLAT_CPS blocks per SM, or of fewer where their shared
 * memory does not fit the SM's (smem_sm; 1 KB more per block is the
 * system's), and returns the launch's shared bytes; 0 where one block's
 * do not fit smem_optin (the caller takes another kernel). */
template <class T>
static size_t flat_plan(int64_t n_out, int nb, int nt, int per, size_t ql, int n_sm,
                        size_t smem_optin, size_t smem_sm, int &fr)
{
    for (int cps = FLAT_CPS;; cps--) {
        fr = flat_rows(n_out, nb, nt, per, n_sm, cps);
        const size_t fsm = flat_smem<T>(ql, nt, fr, per, nb);
        if (fsm + 1024 > smem_optin)
            return 0;
        if (cps == 1 || (size_t)cps * (fsm + 1024) <= smem_sm)
            return fsm;
    }
}

/* One token, one segment of unpadded rows, on sm_90 (stream_go says
 * where): the LM heads (past FLAT_ROWS_MAX rows), where the flat kernel
 * restarts its pipeline at each of a block's many row groups and the
 * 8-lane and lpb kernels keep few bytes in flight per warp, and launches
 * small enough for one stage a block. Here each of n_sm blocks streams its
 * contiguous share of the rows through ST_NST stages of a.fr rows (the
 * most whole rows of at most ST_UPT·FLAT_THREADS units), each stage's
 * 16-byte-aligned cover brought by the bulk copy engine (cp.async.bulk,
 * completing on the stage's mbarrier), the next stage in flight while one
 * is computed: thread i takes units i, i + FLAT_THREADS, ... of the stage
 * (lpb_block, into sv), then thread (r, j) adds row r's v_b as the flat
 * kernels do (flat_slots), so the CPU's bits. H200, one token: q6_K
 * 248320 x 2048 154.4 -> 124.5 µs, x 5120 321.9 -> 287.2, q4_K x 2048
 * 90.2 -> 80.9 (35B decode +1.5%). Threads copying 16-byte pieces
 * (cp.async) into 4 stages of half the size reached only 149.8 µs and
 * 359.1, and the 8-lane kernel at 4 rows a warp 174.0 and 341.0. */
#define ST_NST 2
#define ST_UPT 2

static __host__ __device__ size_t stream_stage_bytes(int sr, size_t rb)
{
    return ((size_t)sr * rb + 15) / 16 * 16 + 16;
}

/* Starts the copy of rows [r, r+nr) of the launch's one segment (its
 * 16-byte-aligned cover; the rows at byte (w + r*rb) & 15 of st) by the
 * bulk copy engine, completing on bar: lanes of warp 0 each issue a piece
 * of up to 8 KB. Nothing where nr = 0 (bar then never waited on). */
static __device__ __forceinline__ void stream_fetch(const mv_args &a, int64_t r, int nr,
                                                    uint8_t *st, uint64_t *bar)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (nr <= 0 || threadIdx.x >= 32)
        return;
    const uint8_t *p = a.seg[0].w + (size_t)r * a.seg[0].rb;
    const int o = (int)((uintptr_t)p & 15);
    const unsigned n = (unsigned)((o + (size_t)nr * a.seg[0].rb + 15) / 16 * 16);
    if (threadIdx.x == 0)
        mbar_expect(bar, n);
    __syncwarp();
    for (unsigned k = threadIdx.x * 8192u; k < n; k += 32 * 8192u)
        bulk_copy(st + k, p - o + k, n - k < 8192u ? n - k : 8192u, bar);
#endif
}

template <class T>
static __global__ void __launch_bounds__(FLAT_THREADS) gemv_stream_kernel(const mv_args a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap(); /* the host launches it from sm_90 on (gemv_launch::bulk) */
#endif
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ uint64_t bar[ST_NST];
    const int nb = a.nb, sr = a.fr;
    const size_t rb = a.seg[0].rb, stb = stream_stage_bytes(sr, rb);
    const int64_t r0 = a.n_out * blockIdx.x / gridDim.x;
    const int64_t nrow = a.n_out * (blockIdx.x + 1) / gridDim.x - r0;
    const int ns = (int)((nrow + sr - 1) / sr);
    auto rows_of = [&](int s) {
        return s < ns ? (int)(nrow - (int64_t)s * sr < sr ? nrow - (int64_t)s * sr : sr) : 0;
    };
    if (threadIdx.x == 0)
        mbar_init(bar, ST_NST);
    __syncwarp();
    /* the first stages asked for before the wait (weights) */
    for (int s = 0; s < ST_NST - 1; s++)
        stream_fetch(a, r0 + (int64_t)s * sr, rows_of(s), smem + s * stb, &bar[s]);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    uint8_t *xqs = smem + ST_NST * stb;
    const int ql = kq_xq_bytes(nb);
    float *sv = (float *)(xqs + ql);
    if (a.xqg)
        xq_load(a.xqg, ql, xqs);
    else
        xq_stage<T, true>(a.x, a.ldx, 1, nb, xqs);
    __syncthreads(); /* x, and the barriers' init, seen by every thread */
    const uint8_t *xq[1] = {xqs};
    for (int s = 0; s < ns; s++) {
        /* the stage after, into the buffer whose units were computed
         * before the last iteration's second barrier */
        const int sn = s + ST_NST - 1;
        stream_fetch(a, r0 + (int64_t)sn * sr, rows_of(sn), smem + (sn % ST_NST) * stb,
                     &bar[sn % ST_NST]);
        mbar_wait(&bar[s % ST_NST], (unsigned)(s / ST_NST) & 1u);
        __syncthreads(); /* sv read by all */
        const int nr = rows_of(s);
        const uint8_t *st = smem + (s % ST_NST) * stb;
        /* where stream_fetch's cover put the stage's first row */
        const int os = (int)((uintptr_t)(a.seg[0].w + (size_t)(r0 + (int64_t)s * sr) * rb) & 15);
#pragma unroll
        for (int k = 0; k < ST_UPT; k++) {
            const int u = threadIdx.x + k * FLAT_THREADS;
            if (u < nr * nb) {
                float v[1];
                lpb_block<T, 1, true>(st + os + (size_t)u * T::BB, xq, nb, u % nb, v);
                sv[u] = v[0];
            }
        }
        __syncthreads(); /* the stage's v_b; its bytes free for the refill */
#pragma unroll
        for (int k = 0; k < ST_UPT; k++) {
            const int r = (threadIdx.x >> 3) + k * (FLAT_THREADS / 8);
            float acc[1];
            flat_slots<1>(sv, 0, r, nb, 1, r < nr, acc);
            if ((threadIdx.x & 7) == 0 && r < nr)
                mv_put(a, r0 + (int64_t)s * sr + r, 0, acc[0]);
        }
    }
    cw_norm_epilogue<FLAT_THREADS>(a.epi, a.seg[0].y, a.seg[0].ldy, 1, smem);
}

struct moe_args {
    const uint8_t *g, *u; /* gate_up: G, U; down: D in g */
    size_t rb, eb;
    int64_t n_out; /* rows per expert */
    int nb;
    const float *x; /* gate_up: x [n_tok][n_in]; down: act [n_tok*K][n_in] */
    const int32_t *ids;
    const float *wts;
    int K;
    float *y; /* gate_up: act [n_tok*S][n_out]; down: h [n_tok][n_out] */
    cw_k_tabs tabs;
    /* S slots per token: the K routed experts, and with S = K+1 the shared
     * expert in slot K (gate_up: its gate and up rows sg, su; down: its
     * rows in sg, scaled by σ(slogit[t]) and added after the routed sum) */
    int S;
    const uint8_t *sg, *su;
    size_t srb;
    const float *slogit;
    cw_norm_epi epi; /* down: the rows of h normalised after */
    const uint8_t *xqg; /* K = 1 Q8_K gate/up: the tokens' Q8_K x from xq_kernel, or NULL */
    int fr; /* moe_gate_up_flat_kernel: row pairs per group */
    int xpre; /* routed gate/up: x written two launches back or earlier (kernels.h) */
};

/* The expert of pair i (token t, slot k: i = t*K + k): ids[i], or expert 0
 * for every pair where ids is NULL (a single matrix pair: the gate/up of a
 * dense FFN, whose kernels may then read weights before their PDL wait). */
static __device__ __forceinline__ int moe_id(const moe_args &a, int64_t i)
{
    return a.ids ? a.ids[i] : 0;
}

/* Slot k's expert bytes: routed expert e (an invalid id reads expert 0:
 * callers discard it), or the shared expert. */
static __device__ __forceinline__ const uint8_t *moe_base(const moe_args &a, const uint8_t *m,
                                                          const uint8_t *shm, int k, int e)
{
    return k == a.K ? shm : m + (size_t)max(e, 0) * a.eb;
}

/* One warp per (pair, row r): expert e's gate row and up row as the warp's
 * two rows, then act = silu(g)·u, silu as the CPU's (x / (1 + e^-x)). An
 * invalid (negative) id gives act = 0. MW warps (rows) of one pair per block
 * share the staged x. grid (row blocks, n_tok*K). Q8K (the kq_q8k types,
 * q8k_use): the block quantises the token's x to Q8_K in shared memory
 * (xq_stage) and each warp forms the CPU's vec_dot of its two rows
 * (mv_dot_q8k), so g and u are the CPU's bits. */
template <class T, bool SX, bool Q8K>
static __global__ void __launch_bounds__(MW * 32) moe_gate_up_kernel(const moe_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ __align__(16) uint8_t smem[];
    float *xsm = (float *)(smem + wstage_bytes<T, 2, MW>());
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * MW + warp, pair = blockIdx.y;
    const int n_in = a.nb * T::QK;
    const int64_t t = pair / a.S;
    const int k = (int)(pair - t * a.S);
    const float *xt = a.x + t * (int64_t)n_in;
    const int e = k == a.K ? 0 : moe_id(a, t * a.K + k);
    const size_t rb = k == a.K ? a.srb : a.rb;
    const uint8_t *gb = moe_base(a, a.g, a.sg, k, e), *ub = moe_base(a, a.u, a.su, k, e);
    if constexpr (Q8K) {
        if (e >= 0 && r < a.n_out) {
            row_prefetch<T, true>(gb + (size_t)r * rb, a.nb, lane);
            row_prefetch<T, true>(ub + (size_t)r * rb, a.nb, lane);
        }
        if (e >= 0) /* the pair's e: the same for the whole block */
            xq_stage<T>(xt, 0, 1, a.nb, (uint8_t *)xsm);
        __syncthreads();
        if (r >= a.n_out)
            return;
        float *yq = a.y + pair * a.n_out + r;
        if (e < 0) {
            if (lane == 0)
                *yq = 0.0f;
            return;
        }
        const uint8_t *rows[2] = {gb + (size_t)r * rb, ub + (size_t)r * rb};
        const uint8_t *xq[1] = {(const uint8_t *)xsm};
        float acc[2][1];
        mv_dot_q8k<T, 2, 1>(rows, xq, a.nb,
                            smem + warp * (T::DIRECT ? 0 : 2 * stage_of<T>::TILE), lane, acc);
        if (lane == 0) {
            float g = acc[0][0];
            *yq = __fmul_rn(g / (1.0f + expf(-g)), acc[1][0]);
        }
        return;
    }
    if (SX) {
        if (e >= 0 && r < a.n_out) {
            row_prefetch<T, true>(gb + (size_t)r * rb, a.nb, lane);
            row_prefetch<T, true>(ub + (size_t)r * rb, a.nb, lane);
        }
        if (e >= 0)
            x_stage<T>(xt, n_in, 1, n_in, xsm);
        __syncthreads();
        xt = xsm;
    }
    if (r >= a.n_out)
        return;
    float *yp = a.y + pair * a.n_out + r;
    if (e < 0) {
        if (lane == 0)
            *yp = 0.0f;
        return;
    }
    const uint8_t *rows[2] = {gb + (size_t)r * rb, ub + (size_t)r * rb};
    const float *xs[1] = {xt};
    float acc[2][1];
    mv_dot<T, 2, 1, SX>(rows, xs, a.nb, a.tabs,
                        smem + warp * (T::DIRECT ? 0 : 2 * stage_of<T>::TILE), lane, acc);
    if (lane == 0) {
        float g = acc[0][0];
        *yp = __fmul_rn(g / (1.0f + expf(-g)), acc[1][0]);
    }
}

/* The Q8_K types with K == 1 (the dense FFN's gate and up where q8k_use
 * says so; rows of 8 blocks or more take moe_gate_up_flat_kernel below,
 * the others of Q4_K/Q5_K moe_gate_up_lpb_kernel):
 * the block quantises the pair's token once (xq_stage) and walks row
 * groups (persistent grid.x); each warp a row's gate and up as
 * mv_dot_q8k's two rows, so g and u are the bits cw_k_matmul gives (the
 * decode graph's n = 1 path and the drafts' n > 1 path agree), then act as
 * above. grid (row blocks, n_tok). */
template <class T>
static __global__ void __launch_bounds__(MW * 32) moe_gate_up_q8k_kernel(const moe_args a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *xq = smem + wstage_bytes<T, 2, MW>();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t pair = blockIdx.y;
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int e = moe_id(a, pair);
    const int64_t r0 = (int64_t)blockIdx.x * MW + warp;
    if (e < 0) {
        for (int64_t r = r0; r < a.n_out; r += (int64_t)gridDim.x * MW)
            if (lane == 0)
                a.y[pair * a.n_out + r] = 0.0f;
        return; /* the whole block: one pair */
    }
    const uint8_t *g = a.g + (size_t)e * a.eb, *u = a.u + (size_t)e * a.eb;
    if (r0 < a.n_out) {
        row_prefetch<T, true>(g + (size_t)r0 * a.rb, a.nb, lane);
        row_prefetch<T, true>(u + (size_t)r0 * a.rb, a.nb, lane);
    }
    if (a.xqg)
        xq_load(a.xqg + pair * kq_xq_bytes(a.nb), kq_xq_bytes(a.nb), xq);
    else
        xq_stage<T>(a.x + (pair / a.K) * (int64_t)a.nb * T::QK, 0, 1, a.nb, xq);
    __syncthreads();
    const uint8_t *xs[1] = {xq};
    uint8_t *stg = smem + warp * (T::DIRECT ? 0 : 2 * stage_of<T>::TILE);
    for (int64_t r = r0; r < a.n_out; r += (int64_t)gridDim.x * MW) {
        const uint8_t *rows[2] = {g + (size_t)r * a.rb, u + (size_t)r * a.rb};
        float acc[2][1];
        mv_dot_q8k<T, 2, 1>(rows, xs, a.nb, stg, lane, acc);
        if (lane == 0) {
            float gv = acc[0][0];
            a.y[pair * a.n_out + r] = __fmul_rn(gv / (1.0f + expf(-gv)), acc[1][0]);
        }
    }
}

/* moe_gate_up_q8k_kernel one lane per block (lpb_use): each warp takes
 * two rows at a time, its groups of 8 lanes the gate row, the up row, the
 * next gate row and the next up row (mv_dot_q8k_lpb: the bits cw_k_matmul
 * gives); the up value comes across by one shuffle. x: the rotated copy. */
template <class T>
static __global__ void __launch_bounds__(MW * 32) moe_gate_up_lpb_kernel(const moe_args a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 3, j = lane & 7;
    const int64_t pair = blockIdx.y, step = (int64_t)gridDim.x * MW * 2;
    const int64_t rb0 = ((int64_t)blockIdx.x * MW + warp) * 2;
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int e = moe_id(a, pair);
    if (e < 0) {
        for (int64_t r = rb0 + (g >> 1); r < a.n_out; r += step)
            if (j == 0 && !(g & 1))
                a.y[pair * a.n_out + r] = 0.0f;
        return; /* the whole block: one pair */
    }
    const uint8_t *w = ((g & 1) ? a.u : a.g) + (size_t)e * a.eb;
    if (rb0 + (g >> 1) < a.n_out)
        for (int b = j; b < a.nb; b += 8)
            for (int o = 0; o < T::BB; o += 128)
                asm volatile("prefetch.global.L1 [%0];" ::"l"(w + (size_t)(rb0 + (g >> 1)) * a.rb +
                                                              (size_t)b * T::BB + o));
    if (a.xqg)
        xq_load(a.xqg + pair * kq_xq_bytes(a.nb), kq_xq_bytes(a.nb), smem);
    else
        xq_stage<T>(a.x + (pair / a.K) * (int64_t)a.nb * T::QK, 0, 1, a.nb, smem);
    __syncthreads();
    const uint8_t *xs[1] = {smem};
    for (int64_t rb = rb0; rb < a.n_out; rb += step) {
        const int64_t r = rb + (g >> 1);
        float acc[1];
        mv_dot_q8k_lpb<T, 1>(w + (size_t)min(r, a.n_out - 1) * a.rb, xs, a.nb, j, acc);
        const float uv = __shfl_down_sync(0xffffffffu, acc[0], 8); /* group g+1's: the up row */
        if (j == 0 && !(g & 1) && r < a.n_out) {
            const float gv = acc[0];
            a.y[pair * a.n_out + r] = __fmul_rn(gv / (1.0f + expf(-gv)), uv);
        }
    }
}

/* moe_gate_up_lpb_kernel as the flat kernels (flat_use: rows of 8 blocks
 * or more): a group of a.fr rows is 2 a.fr rows of units, the gate's
 * rows then the up's (each run of rows back to back in memory, so that
 * flat_fetch copies whole chunks); thread (r, j) forms gate row r and up
 * row r (flat_slots) and writes silu(g) u. The bits of cw_k_matmul, as
 * moe_gate_up_lpb_kernel's. SL: blockIdx.y is a pair (token t, slot k) of
 * S slots per token, slot K the shared expert (moe_gate_up_flat_slots_
 * kernel, the routed decode); else blockIdx.y is pair t*K + k as the K = 1
 * gate/up of a dense FFN takes it (its own instance: that launch keeps its
 * code). */
template <class T, bool SL>
static __device__ __forceinline__ void moe_gate_up_flat_body(const moe_args &a)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const int nb = a.nb, fr = a.fr, stride = 2 * fr * nb;
    const int64_t pair = blockIdx.y, n_grp = (a.n_out + fr - 1) / fr;
    const int64_t t = SL ? pair / a.S : pair / a.K;
    const int k = SL ? (int)(pair - t * a.S) : 0;
    const bool shared = SL && k == a.K;
    const uint8_t *gw = shared ? a.sg : a.g, *uw = shared ? a.su : a.u;
    const size_t rb = shared ? a.srb : a.rb;
    int64_t r0 = (int64_t)blockIdx.x * fr;
    int nr = (int)(a.n_out - r0 < fr ? a.n_out - r0 : fr);
    const auto unit_at = [&](int u) {
        const int q = u / nb;
        return (q < nr ? gw + (size_t)(r0 + q) * rb : uw + (size_t)(r0 + q - nr) * rb) +
               (size_t)(u - q * nb) * T::BB;
    };
    uint8_t *stg = smem + (threadIdx.x >> 5) * 2 * flat_chunk_bytes<T>();
    __shared__ uint64_t bars[2 * FLAT_WARPS];
    flat_ring ring = flat_ring_init<flat_bulk<1>()>(bars);
    /* no ids (expert 0), or the shared expert: the warp's first chunk,
     * asked for before the wait */
    bool pre = !a.ids || shared;
    if (pre)
        flat_fetch<T, flat_bulk<1>()>(unit_at, threadIdx.x >> 5, 2 * nr * nb, stg, ring, 0,
                                      threadIdx.x & 31);
    const size_t ql = (size_t)kq_xq_bytes(nb);
    uint8_t *xqs = smem + flat_stage_bytes<T>();
    /* SL, x written two launches back or earlier (kernels.h: before the
     * route): quantised before the wait, so that the weights are asked for
     * as soon as the ids arrive */
    const bool xpre = SL && a.xpre && !a.xqg;
    if (xpre)
        xq_stage<T, SL>(a.x + t * (int64_t)nb * T::QK, 0, 1, nb, xqs);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const int e = shared ? 0 : moe_id(a, SL ? t * a.K + k : pair);
    if (e < 0) {
        for (int64_t r = (int64_t)blockIdx.x * fr; r < a.n_out; r += (int64_t)gridDim.x * fr)
            for (int i = threadIdx.x; i < fr && r + i < a.n_out; i += FLAT_THREADS)
                a.y[pair * a.n_out + r + i] = 0.0f;
        return; /* the whole block: one pair */
    }
    if (!shared)
        gw += (size_t)e * a.eb, uw += (size_t)e * a.eb;
    if (a.xqg)
        xq_load(a.xqg + (SL ? t : pair) * ql, (int)ql, xqs);
    else if (!xpre)
        xq_stage<T, SL>(a.x + t * (int64_t)nb * T::QK, 0, 1, nb, xqs);
    float *sv = (float *)(xqs + ql);
    __syncthreads();
    const uint8_t *xs[1] = {xqs};
    for (int64_t gr = blockIdx.x; gr < n_grp; gr += gridDim.x) {
        const int64_t rg = gr * fr;
        const int nrb = (int)(a.n_out - rg < fr ? a.n_out - rg : fr);
        r0 = rg, nr = nrb;
        flat_stream<T, 1>(unit_at, 2 * nr * nb, nb, xs, 1, sv, stride, stg, ring, pre);
        /* the next group's first chunk, in flight through the sums below */
        pre = gr + gridDim.x < n_grp;
        if (pre) {
            r0 = rg + (int64_t)gridDim.x * fr;
            nr = (int)(a.n_out - r0 < fr ? a.n_out - r0 : fr);
            flat_fetch<T, flat_bulk<1>()>(unit_at, threadIdx.x >> 5, 2 * nr * nb, stg, ring,
                                          0, threadIdx.x & 31);
        }
        __syncthreads();
        for (int rr = 0; rr < nrb; rr += FLAT_THREADS / 8) {
            const int r = rr + (int)(threadIdx.x >> 3);
            float g[1], u[1];
            flat_slots<1>(sv, stride, r, nb, 1, r < nrb, g);
            flat_slots<1>(sv, stride, nrb + r, nb, 1, r < nrb, u);
            if ((threadIdx.x & 7) == 0 && r < nrb)
                a.y[pair * a.n_out + rg + r] = __fmul_rn(g[0] / (1.0f + expf(-g[0])), u[0]);
        }
        __syncthreads();
    }
}

template <class T>
static __global__ void __launch_bounds__(FLAT_THREADS) moe_gate_up_flat_kernel(const moe_args a)
{
    moe_gate_up_flat_body<T, false>(a);
}

template <class T>
static __global__ void __launch_bounds__(FLAT_THREADS)
    moe_gate_up_flat_slots_kernel(const moe_args a)
{
    moe_gate_up_flat_body<T, true>(a);
}

/* Generic down projection (any n_in): one warp per (token t, rows r, r+1)
 * loops over the K experts in order,
 *   s = fma(wts[k], D_e[r]·act[t*K+k], s),  then h[t][r] += s;
 * no atomics, the sum order is k = 0..K-1. grid (row blocks, n_tok). */
template <class T>
static __global__ void __launch_bounds__(WARPS * 32) moe_down_kernel(const moe_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ __align__(16) uint8_t smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * WARPS + warp) * 2, t = blockIdx.y;
    int64_t n_in = (int64_t)a.nb * T::QK;
    float s[2] = {0.0f, 0.0f};
    for (int k = 0; row0 < a.n_out && k < a.S; k++) {
        const int e = k < a.K ? a.ids[t * a.K + k] : 0;
        if (e < 0)
            continue;
        const uint8_t *b = moe_base(a, a.g, a.sg, k, e);
        const size_t rb = k == a.K ? a.srb : a.rb;
        const uint8_t *rows[2];
#pragma unroll
        for (int r = 0; r < 2; r++)
            rows[r] = b + (size_t)min(row0 + r, a.n_out - 1) * rb;
        const float *xs[1] = {a.x + (t * a.S + k) * n_in};
        float acc[2][1];
        mv_dot<T, 2, 1, false>(rows, xs, a.nb, a.tabs,
                               smem + warp * (T::DIRECT ? 0 : 2 * stage_of<T>::TILE), lane, acc);
        if (k == a.K) { /* the shared expert: routed sum + σ(gate)·shared, as the CPU */
            const float g = cw_dev_sigmoid(a.slogit[t]);
#pragma unroll
            for (int r = 0; r < 2; r++)
                s[r] = __fadd_rn(s[r], __fmul_rn(acc[r][0], g));
            break;
        }
        float wk = a.wts[t * a.K + k];
#pragma unroll
        for (int r = 0; r < 2; r++)
            s[r] = __fmaf_rn(wk, acc[r][0], s[r]);
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (lane == r && row0 + r < a.n_out) {
            float *hp = a.y + t * a.n_out + row0 + r;
            *hp = __fadd_rn(*hp, s[r]);
        }
    cw_norm_epilogue<WARPS * 32>(a.epi, a.y, a.n_out, (int)gridDim.y, smem);
}

/* Down projection for 16-unit rows (n_in = 512, the model's expert width),
 * K <= DK_MAX: one warp per (token t, RW rows: 1 or 2); lanes 16h..16h+15 take
 * the 16 units of expert 2j+h in round j, so all 32 lanes work and the K
 * experts' loads are all issued before the first use: the warp first copies
 * every (expert, row) slice it needs into its shared stage (coalesced
 * 16-byte loads), the block has staged the token's K activation rows. Per
 * expert: each lane's 32-term fma chain, a butterfly over its 16 lanes, then
 * s = fma(wts[k], dot_k, s) over k = 0..K-1 in order (as the generic
 * kernel). grid (row blocks, n_tok). */
#define DK_MAX 10 /* the routed experts and the shared one */
template <class T>
struct down16 {
    /* one (expert, row) slice: 2 blocks of 256 (or 16 of 32, 8 of 64) */
    enum { SLICE = 16 / T::UPB * T::BB, TILE = (SLICE + 15 + 15) / 16 * 16, G = (TILE / 16 + 31) / 32 };
};

/* A token's routed slots in shared memory: ids and weights. */
struct down16_route {
    int32_t id[DK_MAX];
    float w[DK_MAX];
};

/* The bytes of (slot k, row row0 + r) (rt: the token's slots); an invalid
 * id reads expert 0, discarded. */
static __device__ __forceinline__ const uint8_t *down16_slice(const moe_args &a,
                                                              const down16_route &rt,
                                                              int64_t row0, int k, int r)
{
    const uint8_t *b = k == a.K ? a.sg : a.g + (size_t)max(rt.id[k], 0) * a.eb;
    return b + (size_t)min(row0 + r, a.n_out - 1) * (k == a.K ? a.srb : a.rb);
}

/* moe_down16_kernel's arithmetic for a live warp: the dots of its RW rows
 * over the S slots (lanes 16h..16h+15 on slot 2j+h in round j), their
 * weighted sum in slot order, the residual add. */
template <class T, int DKM, int RW>
static __device__ __forceinline__ void down16_dots(const moe_args &a, int64_t t, int64_t row0,
                                                   int lane, const uint8_t *stg, const float *xsm,
                                                   const down16_route &rt)
{
    typedef down16<T> D;
    const int K = a.K, S = a.S;
    const int xl = (int)xs_len<T>(512);
    auto slice = [&](int k, int r) { return down16_slice(a, rt, row0, k, r); };
    const int h = lane >> 4, u = lane & 15, blk = u / T::UPB, p = u % T::UPB;
    float dot[DKM / 2][RW];
    /* no branches between the rounds: all their loads can go out at once
     * (S < DKM: the surplus rounds repeat slot S-1, discarded) */
#pragma unroll
    for (int j = 0; j < DKM / 2; j++) {
        int k = min(2 * j + h, S - 1);
#pragma unroll
        for (int r = 0; r < RW; r++) {
            const uint8_t *sp = slice(k, r);
            const uint8_t *bp = T::DIRECT ? sp + blk * T::BB
                                          : stg + (RW * k + r) * D::TILE +
                                                ((uintptr_t)sp & 15) + blk * T::BB;
            float w[32];
            T::unit(bp, p, a.tabs, w);
            const float *xt = xsm + k * xl;
            float acc = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float xv[8];
                x_load8<T, true>(xt, blk * T::QK + T::run(p, q), xv);
#pragma unroll
                for (int jj = 0; jj < 8; jj++)
                    acc = __fmaf_rn(w[8 * q + jj], xv[jj], acc);
            }
#pragma unroll
            for (int o = 8; o > 0; o >>= 1)
                acc += __shfl_xor_sync(0xffffffffu, acc, o);
            dot[j][r] = acc;
        }
    }
    float s[RW];
#pragma unroll
    for (int r = 0; r < RW; r++)
        s[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < DKM / 2; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int kk = 2 * j + hh;
            float d[RW];
#pragma unroll
            for (int r = 0; r < RW; r++)
                d[r] = __shfl_sync(0xffffffffu, dot[j][r], 16 * hh);
            if (kk < K && rt.id[kk] >= 0) {
                float wk = rt.w[kk];
#pragma unroll
                for (int r = 0; r < RW; r++)
                    s[r] = __fmaf_rn(wk, d[r], s[r]);
            } else if (kk == K && kk < S) { /* the shared expert, last */
                const float g = cw_dev_sigmoid(a.slogit[t]);
#pragma unroll
                for (int r = 0; r < RW; r++)
                    s[r] = __fadd_rn(s[r], __fmul_rn(d[r], g));
            }
        }
#pragma unroll
    for (int r = 0; r < RW; r++)
        if (lane == r && row0 + r < a.n_out) {
            float *hp = a.y + t * a.n_out + row0 + r;
            *hp = __fadd_rn(*hp, s[r]);
        }
}

/* RW rows per warp: 1 for a short launch (more warps, each with half the
 * loads in flight: the kernel is bound by latency, not bytes), else 2; NW
 * warps per block share the staged activations (8 with one row per warp,
 * so that staging them stays one round trip and half the L2 traffic). */
template <class T, int DKM, int RW, int NW>
static __global__ void __launch_bounds__(NW * 32) moe_down16_kernel(const moe_args a)
{
    typedef down16<T> D;
    extern __shared__ __align__(16) uint8_t smem[];
    const int S = a.S;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * NW + warp) * RW, t = blockIdx.y;
    uint8_t *stg = smem + warp * (T::DIRECT ? 0 : RW * DKM * D::TILE);
    float *xsm = (float *)(smem + (T::DIRECT ? 0 : NW * RW * DKM * D::TILE));
    const bool live = row0 < a.n_out;
    /* The experts' rows are asked for before the wait: ids come from the
     * route, two launches back (route, gate/up, this), which had completed
     * before the gate/up let this kernel start (cuda_common.cuh); the
     * activations, the gate/up's, are staged after it. The token's ids and
     * weights are read once, through L2 (__ldcg), into shared memory: the
     * slices' addresses then wait on one load, not one each (H200 35B
     * decode 383 -> 394 tok/s). */
    __shared__ down16_route rt;
    if ((int)threadIdx.x < a.K) {
        rt.id[threadIdx.x] = __ldcg(a.ids + t * a.K + threadIdx.x);
        rt.w[threadIdx.x] = __ldcg(a.wts + t * a.K + threadIdx.x);
    }
    __syncthreads();
    auto slice = [&](int k, int r) { return down16_slice(a, rt, row0, k, r); };
    if (T::DIRECT && live)
#pragma unroll
        for (int i = 0; i < RW * DKM; i++)
            if (i / RW < S)
                row_prefetch<T, true>(slice(i / RW, i % RW), 16 / T::UPB, lane);
    uint4 v[RW * DKM][D::G];
    int ng[RW * DKM];
    if (!T::DIRECT && live) {
        /* every slice's granules in flight at once */
#pragma unroll
        for (int i = 0; i < RW * DKM; i++) {
            uintptr_t s0 = (uintptr_t)slice(min(i / RW, S - 1), i % RW), a0 = s0 & ~(uintptr_t)15;
            ng[i] = (int)((s0 + D::SLICE - a0 + 15) / 16);
#pragma unroll
            for (int q = 0; q < D::G; q++)
                if (i / RW < S && lane + 32 * q < ng[i])
                    v[i][q] = __ldg((const uint4 *)a0 + lane + 32 * q);
        }
    }
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    x_stage<T>(a.x + t * S * (int64_t)512, 512, S, 512, xsm);
    if (!T::DIRECT && live) {
        /* then into this warp's stage */
#pragma unroll
        for (int i = 0; i < RW * DKM; i++)
#pragma unroll
            for (int q = 0; q < D::G; q++)
                if (i / RW < S && lane + 32 * q < ng[i])
                    ((uint4 *)(stg + i * D::TILE))[lane + 32 * q] = v[i][q];
    }
    __syncthreads();
    if (live)
        down16_dots<T, DKM, RW>(a, t, row0, lane, stg, xsm, rt);
    cw_norm_epilogue<NW * 32>(a.epi, a.y, a.n_out, (int)gridDim.y, smem);
}

/* ---- host side ----------------------------------------------------------- */

struct cw_k_tabs cw_k_tables(void)
{
    struct cw_k_tabs t;
    memcpy(t.iq4nl, cw_iq4nl_values, 16);
    memcpy(t.fp4, cw_fp4_values, 16);
    return t;
}

namespace {
struct block_of {
    int qk, bb;
    template <class T>
    int go()
    {
        qk = T::QK, bb = T::BB;
        return 0;
    }
};
} // namespace

int cw_k_block_elems(enum cw_qtype type)
{
    block_of f = {0, 0};
    return cw_k_dispatch(type, f) ? 0 : f.qk;
}

extern "C" bool cw_k_supports(enum cw_qtype type)
{
    return cw_k_block_elems(type) > 0;
}

/* Rows and experts must keep every block at its format's natural alignment
 * (the largest power of two dividing the block size, at most 16): true of a
 * 16-byte aligned GGUF tensor with rows of whole blocks. */
int cw_k_check_mat(const struct cw_k_mat *W, const char *what, struct cw_err *err)
{
    block_of f = {0, 0};
    if (cw_k_dispatch(W->type, f))
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda %s: weight type %s not supported", what,
                       cw_qtype_name(W->type));
    size_t al = (size_t)(f.bb & -f.bb) < 16 ? (size_t)(f.bb & -f.bb) : 16;
    if (W->n_in <= 0 || W->n_out <= 0 || W->n_in % f.qk || W->n_in / f.qk > (1 << 24))
        return cw_errf(err, CW_ERR_INVALID, "cuda %s: %s matrix %lld x %lld: n_in must be a multiple of %d",
                       what, cw_qtype_name(W->type), (long long)W->n_out, (long long)W->n_in, f.qk);
    if (W->row_bytes < cw_qtype_row_bytes(W->type, W->n_in) || W->row_bytes % al ||
        W->expert_bytes % al || (uintptr_t)W->d_w % 16)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda %s: %s rows of %zu bytes (expert stride %zu) at %p: need >= %zu, "
                       "multiples of %zu, base 16-byte aligned",
                       what, cw_qtype_name(W->type), W->row_bytes, W->expert_bytes, W->d_w,
                       cw_qtype_row_bytes(W->type, W->n_in), al);
    return 0;
}

static int check_x(const float *p, int64_t ld, const char *what, struct cw_err *err)
{
    if ((uintptr_t)p % 16 || ld % 4)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda %s: activations at %p with row stride %lld: need 16-byte alignment",
                       what, (const void *)p, (long long)ld);
    return 0;
}

namespace {
/* Which formats stage x in shared memory: those whose lanes each read one
 * 32-element block (QK 32, IQ4_XS, NVFP4), where x through L1 costs a cache
 * line per lane and load (Q8_0 LM head 35% -> 73% of bandwidth). Q4_K/Q5_K/
 * Q6_K and the float types measured slower staged (LM head q4_K 156 -> 178
 * us, q6_K 172 -> 185): their x loads through L1 already share lines. */
template <class T>
constexpr bool use_sx()
{
    return !T::DIRECT && T::XP == 32;
}

/* Whether a Q8_K product of this type runs one lane per block
 * (gemv_lpb_kernel): the formats whose blocks start 16-byte aligned. */
template <class T>
constexpr bool lpb_use()
{
    return kq_q8k<T>::ON && T::DIRECT;
}

/* Whether a product of this type and width multiplies x quantised to Q8_K:
 * every matrix of the kq_q8k types whose one-token copy fits XS_MAX, the
 * MoE gate/up's experts too (their decode is issue-bound on f32 x: the
 * 35B's gate_up at ~70% of issue slots). With 8 lanes a block and x
 * quantised in every block, the matrices of 64 to 16 n_sm rows (the 35B's
 * out-projections) once stayed on f32 x, which was faster there (35B
 * decode, H200: 317 against 327 tok/s); with x quantised once and the flat
 * kernels they gain (355.6 -> 365.9). A function of the width alone: every
 * n_tok, the matmul and the gate/up take the same path (batch invariance). */
template <class T>
bool q8k_use(int nb)
{
    if constexpr (kq_q8k<T>::ON)
        return (size_t)kq_xq_bytes(nb) <= XS_MAX;
    return false;
}

/* Whether a Q8_K product whose caller gives scratch quantises x once
 * (xq_kernel, or xqn_kernel with the norm of h) rather than in every
 * block: from 8 blocks of 256 (n_in >= 2048), where hundreds of blocks
 * each quantised the same x and then read only a few rows. H200, same bits
 * (ids and logits hashes), before the flat kernels: 27B decode 82.5 ->
 * 99.9 tok/s (its 5120..17408-wide x), 35B 336.1 -> 341.1 (its 2048-wide
 * qkv and LM head). Narrower x: not measured, left per block. Plain x
 * (no norm) follows xq_once_plain. */
#define XQ_ONCE_NB 8
static bool xq_once(int nb) { return nb >= XQ_ONCE_NB; }

/* A matmul's x given as it is (no norm of h to compute with it) goes
 * through xq_kernel only from XQ_ONCE_PLAIN_NB blocks (the K = 1 gate/up
 * keeps xq_once: not measured there): narrower, each block of the flat
 * kernels quantises it while its first weights are in flight, and the
 * launch is saved (H200, the same bits: 35B decode, its 4096-wide
 * out-projections, 366.6 -> 376.2 tok/s; the 27B's 6144- and 17408-wide
 * x so quantised in every block: 129.9 -> 127.6, so not those). */
#define XQ_ONCE_PLAIN_NB 17
static bool xq_once_plain(int nb) { return nb >= XQ_ONCE_PLAIN_NB; }

/* cw_k_dispatch functor: the bytes per token of xq_once's copy for this
 * type and width (0 where it would not quantise once); plain: for x given
 * as it is (xq_once_plain), else for the norm of h. */
namespace {
struct xq_query {
    int64_t n_in;
    size_t per_tok;
    bool plain;
    template <class T>
    int go()
    {
        if constexpr (kq_q8k<T>::ON) {
            const int nb = (int)(n_in / T::QK);
            if (n_in % T::QK == 0 && (plain ? xq_once_plain(nb) : xq_once(nb)) &&
                (size_t)kq_xq_bytes(nb) <= XS_MAX)
                per_tok = (size_t)kq_xq_bytes(nb);
        }
        return 0;
    }
};
} // namespace

/* Scratch bytes for xq_once's copies of n_tok tokens (0 where no Q8_K
 * product of this type and width would quantise once): twice, for a
 * multi launch's second Q8_K layout (multi_run). */
static size_t xq_scratch(enum cw_qtype type, int64_t n_in, int64_t n_tok)
{
    xq_query q = {n_in, 0, false};
    cw_k_dispatch(type, q);
    return 2 * (size_t)n_tok * q.per_tok;
}

/* Whether xqn_kernel takes rows of n_in: the row and the norm's weights in
 * shared memory. */
static bool xqn_fits(int64_t n_in)
{
    return 2 * (size_t)n_in * sizeof(float) <= XS_MAX;
}

/* Launches xq_kernel: n_tok tokens of x (row stride ldx) into xq; or, with
 * nm, xqn_kernel: x as the norm of nm's h, also written to nm's y (the
 * caller checked xqn_fits). One item (token, 256-block) per warp: a grid
 * of that many warps quantises in one step what XQB items a warp would
 * take in turn (H200, 27B decode, the same bits: 129.6 -> 135.3 tok/s; its
 * 5120-wide xqn had one block, its 17408-wide xq_kernel five). T2 other
 * than T: the copies also into xq2 in T2's layout. */
template <class T, class T2 = T>
static cudaError_t xq_launch(cudaStream_t s, bool pdl, const float *x, int64_t ldx, int64_t n_tok,
                             int nb, uint8_t *xq, const xq_norm *nm, uint8_t *xq2 = NULL)
{
    if (nm) {
        constexpr int B = XQN_THREADS;
        constexpr int64_t pern = B / 32; /* each block normalises the whole row */
        const size_t smem = 2 * (((size_t)nb * T::QK + 3) / 4 * 4) * sizeof(float); /* h, w */
        cudaError_t e;
        if (smem > (48 << 10) &&
            (e = cudaFuncSetAttribute((const void *)xqn_kernel<T, B, T2>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
                cudaSuccess)
            return e;
        return cw_launch(s, pdl, xqn_kernel<T, B, T2>,
                         dim3((unsigned)((nb + pern - 1) / pern), (unsigned)n_tok), dim3(B),
                         smem, *nm, nb, xq, xq2);
    }
    constexpr int64_t per = XQ_THREADS / 32;
    const int64_t items = n_tok * nb;
    return cw_launch(s, pdl, xq_kernel<T, T2>, dim3((unsigned)((items + per - 1) / per)),
                     dim3(XQ_THREADS), 0, x, ldx, (int)n_tok, nb, xq, xq2);
}

/* xq_launch with the second layout of t2 (a Q8_K type) into xq2, or none
 * where xq2 is NULL. */
template <class T>
static cudaError_t xq_launch2(cudaStream_t s, bool pdl, const float *x, int64_t ldx,
                              int64_t n_tok, int nb, uint8_t *xq, const xq_norm *nm,
                              enum cw_qtype t2, uint8_t *xq2)
{
    if (!xq2)
        return xq_launch<T>(s, pdl, x, ldx, n_tok, nb, xq, nm);
    switch (t2) {
    case CW_TYPE_Q4_K: return xq_launch<T, kt_q4_k>(s, pdl, x, ldx, n_tok, nb, xq, nm, xq2);
    case CW_TYPE_Q5_K: return xq_launch<T, kt_q5_k>(s, pdl, x, ldx, n_tok, nb, xq, nm, xq2);
    case CW_TYPE_Q6_K: return xq_launch<T, kt_q6_k>(s, pdl, x, ldx, n_tok, nb, xq, nm, xq2);
    default: return cudaErrorInvalidValue; /* multi_run pairs these alone */
    }
}

/* Launches k with `smem` dynamic shared bytes (raising the kernel's limit
 * past 48 KB first); grid.x <= 0 asks for a persistent grid: as many blocks
 * as fit on the chip at once (min with -grid.x). */
template <class K>
cudaError_t launch_plan(K k, dim3 &grid, int persist, unsigned threads, size_t smem, int n_sm)
{
    cudaError_t e;
    if (smem > (48 << 10) &&
        (e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem)) != cudaSuccess)
        return e;
    if (persist) {
        int occ = 0;
        if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, (int)threads, smem)) !=
            cudaSuccess)
            return e;
        unsigned cap = (unsigned)(n_sm * (occ > 0 ? occ : 1));
        grid.x = grid.x < cap ? grid.x : cap;
    }
    return cudaSuccess;
}

template <class A>
cudaError_t launch_k(void (*k)(const A), dim3 grid, int persist, unsigned threads, size_t smem,
                     cudaStream_t s, bool pdl, const A &a, int n_sm)
{
    const cudaError_t e = launch_plan(k, grid, persist, threads, smem, n_sm);
    return e != cudaSuccess ? e : cw_launch(s, pdl, k, grid, dim3(threads), smem, a);
}

/* Whether a launch of this many (row, token) outputs has too few warps, at
 * two rows each, to keep every SM's loads in flight: then one row per warp. */
static bool few_rows(int64_t rows, int n_sm)
{
    return rows < (int64_t)4 * WARPS * n_sm;
}

/* Bytes of staged x a block may take next to `stage` bytes of weight stage
 * and the kernels' static shared memory (the norm epilogue's, < 1 KB). */
static size_t xs_budget(size_t smem_optin, size_t stage)
{
    const size_t dev = smem_optin > stage + 1024 ? smem_optin - stage - 1024 : 0;
    return dev < XS_MAX ? dev : XS_MAX;
}

/* One Q8_K quantisation of x for two launches of a multi (multi_run):
 * the first also writes its copies in t2's layout to xq2, the second reads
 * them there (ready) instead of quantising x again. */
struct xq_share {
    uint8_t *xq2;
    enum cw_qtype t2;
    const uint8_t *ready;
    cudaEvent_t fork; /* recorded after the launch that writes xq2, or NULL ... */
    bool *forked;     /* ... which then sets this */
    bool side;        /* the launch on c->side (the reader of ready, forked) */
};

/* nm as an xq_once launch gets it: y dropped where off (no launch reads x
 * in f32 after it, cw_k_norm_in's x_unread); a zero norm where nm is NULL. */
static xq_norm xq_norm_y(const xq_norm *nm, bool off)
{
    xq_norm q = nm ? *nm : xq_norm{};
    if (off)
        q.y = NULL;
    return q;
}

struct gemv_launch {
    cudaStream_t s;
    bool pdl;
    mv_args a;
    int64_t n_tok;
    size_t smem_optin, smem_sm;
    const float *x0, *sl0;
    float *y0[MV_SEGS], *epi_y0;
    int n_sm;
    bool q8k; /* x quantised to Q8_K (cw_k_q8k of every matrix of the launch) */
    bool bulk; /* the bulk copy engine (sm_90 on): gemv_stream_kernel */
    uint8_t *xq_scr; /* scratch for xq_once, or NULL */
    xq_share sh; /* x's Q8_K copy shared with another launch (multi_run), or all NULL */
    const xq_norm *nm; /* x as the norm of h, for the xq_once launch (norm_fuses), or NULL */
    bool y_off;        /* ... which then leaves nm's y unwritten (xq_norm_y) */
    const xq_norm *fn; /* nm, normalised in every block of the flat launch instead, or NULL */
    cudaError_t e;
    /* Shared bytes of the row of x a flat launch normalises (flat_norm_x). */
    template <class T>
    size_t norm_row_bytes() const
    {
        return fn ? (size_t)a.nb * T::QK * sizeof(float) + 16 : 0;
    }
    template <class T, int RR, int NT, bool SX, bool Q8K = false>
    void one(size_t xl)
    {
        size_t smem = wstage_bytes<T, RR, WARPS>() + (SX ? xl * a.nt : 0);
        smem = smem > cw_norm_epi_smem(a.epi) ? smem : cw_norm_epi_smem(a.epi);
        unsigned grp = (unsigned)((a.n_out + WARPS * RR - 1) / (WARPS * RR));
        e = launch_k(gemv_kernel<T, RR, NT, SX, Q8K>, dim3(grp), SX, WARPS * 32, smem, s, pdl, a,
                     n_sm);
    }
    /* One token of one unpadded segment on gemv_stream_kernel (sm_90:
     * bulk), where its stages fit: the LM heads (past FLAT_ROWS_MAX rows),
     * and launches whose every block's rows fit one stage, so that all of
     * the matrix is asked for before the PDL wait (the 35B's 4096-wide
     * out-projections: H200 35B decode 467.2-468.1 -> 479.1-481.7 tok/s,
     * the same bits; the 27B's ffn_down and out-projections on it, 2-6
     * stages a block, ran 5% slower than on the flat kernel). False where
     * it does not apply. */
    template <class T>
    bool stream_go(size_t ql)
    {
        if (!bulk || a.nt != 1 || a.nseg != 1 || fn || a.nb > FLAT_THREADS ||
            a.seg[0].rb != (size_t)a.nb * T::BB)
            return false;
        const int sr0 = ST_UPT * FLAT_THREADS / a.nb;
        int sr = sr0 < ST_UPT * FLAT_THREADS / 8 ? sr0 : ST_UPT * FLAT_THREADS / 8;
        const int64_t share = (a.n_out + n_sm - 1) / n_sm; /* a block's rows */
        if (share <= sr)
            sr = (int)share;
        else if (a.n_out <= FLAT_ROWS_MAX)
            return false;
        const size_t stb = stream_stage_bytes(sr, a.seg[0].rb);
        const size_t smem = ST_NST * stb + ql + (size_t)ST_UPT * FLAT_THREADS * sizeof(float);
        if (smem + 1024 > smem_optin || cw_norm_epi_smem(a.epi) > smem)
            return false;
        a.fr = sr;
        e = launch_k(gemv_stream_kernel<T>, dim3((unsigned)n_sm), 1, FLAT_THREADS, smem, s, pdl,
                     a, n_sm);
        return true;
    }
    /* One token group of a Q8_K product: the flat kernel for rows of 8
     * blocks or more (flat_use) where its shared memory fits, else Q4_K and
     * Q5_K one lane per block (lpb_use), Q6_K 8 lanes per block (short
     * launches one row per warp up to 2 tokens, as the f32 path). */
    template <class T, int NT>
    void q8k_one(size_t ql, bool r1)
    {
        if constexpr (NT == 1)
            if (stream_go<T>(ql))
                return;
        const size_t fsm = flat_use(a.nb, a.n_out)
                               ? flat_plan<T>(a.n_out, a.nb, a.nt, 1, ql + norm_row_bytes<T>(),
                                              n_sm, smem_optin, smem_sm, a.fr)
                               : 0;
        if (fsm) {
            const size_t smem = fsm > cw_norm_epi_smem(a.epi) ? fsm : cw_norm_epi_smem(a.epi);
            dim3 grid((unsigned)((a.n_out + a.fr - 1) / a.fr));
            if constexpr (NT == 1)
                if (fn) { /* q8k_go checked that it fits */
                    e = launch_plan(gemv_flat_norm_kernel<T>, grid, 1, FLAT_THREADS, smem, n_sm);
                    if (e == cudaSuccess)
                        e = cw_launch(s, pdl, gemv_flat_norm_kernel<T>, grid, dim3(FLAT_THREADS),
                                      smem, a, *fn);
                    return;
                }
            e = launch_k(gemv_flat_kernel<T, NT>, grid, 1, FLAT_THREADS, smem, s, pdl, a, n_sm);
        } else if constexpr (lpb_use<T>()) {
            size_t smem = ql * a.nt;
            smem = smem > cw_norm_epi_smem(a.epi) ? smem : cw_norm_epi_smem(a.epi);
            unsigned grp = (unsigned)((a.n_out + WARPS * LPB_ROWS - 1) / (WARPS * LPB_ROWS));
            e = launch_k(gemv_lpb_kernel<T, NT>, dim3(grp), 1, WARPS * 32, smem, s, pdl, a, n_sm);
        } else if constexpr (NT <= 2) {
            r1 ? one<T, 1, NT, true, true>(ql) : one<T, 2, NT, true, true>(ql);
        } else {
            one<T, 2, NT, true, true>(ql);
        }
    }
    /* The Q8_K types (kq_q8k): x quantised per block in shared memory, by
     * groups of the largest of 8, 4, 2, 1 tokens that fit XS_MAX, each
     * group's kernel as q8k_one picks it; false
     * (the f32 path) where q8k_use says no for this launch's matrices
     * (cw_k_matmul_multi groups them by that answer). */
    template <class T>
    bool q8k_go()
    {
        const size_t ql = (size_t)kq_xq_bytes(a.nb);
        if (!q8k)
            return false;
        const bool r1 = few_rows(a.n_out, n_sm);
        int ntg = NT_MAX;
        while (ntg > 1 && ql * ntg > XS_MAX)
            ntg /= 2;
        /* one token whose x is the norm of h and narrow enough to quantise
         * per block (xq_once_plain): every block of the flat kernel
         * normalises it, where it fits, instead of an xqn launch (H200 35B
         * decode, its 2048-wide mixers: 395.0 -> 403.3 tok/s, the same
         * bits; in gemv_flat_kernel's own code it had slowed every other
         * flat launch, 2026-12-02e, hence gemv_flat_norm_kernel) */
        fn = nm && n_tok == 1 && !xq_once_plain(a.nb) ? nm : NULL;
        if (fn && !(flat_use(a.nb, a.n_out) &&
                    flat_plan<T>(a.n_out, a.nb, 1, 1, ql + norm_row_bytes<T>(), n_sm, smem_optin,
                                 smem_sm, a.fr)))
            fn = NULL;
        const bool once =
            !fn && (sh.ready || (xq_scr && (nm ? xq_once(a.nb) : xq_once_plain(a.nb))));
        if (nm && !once && !fn) { /* norm_fuses said yes: not reached */
            e = cudaErrorInvalidValue;
            return true;
        }
        const xq_norm nq = xq_norm_y(nm, y_off);
        e = once && !sh.ready
                ? xq_launch2<T>(s, pdl, x0, a.ldx, n_tok, a.nb, xq_scr, nm ? &nq : NULL, sh.t2,
                                sh.xq2)
                : cudaSuccess;
        if (e == cudaSuccess && once && !sh.ready && sh.xq2 && sh.fork) {
            e = cudaEventRecord(sh.fork, s);
            *sh.forked = e == cudaSuccess;
        }
        for (int64_t t0 = 0; t0 < n_tok && e == cudaSuccess; t0 += ntg) {
            a.nt = (int)(n_tok - t0 < ntg ? n_tok - t0 : ntg);
            a.x = x0 + t0 * a.ldx;
            a.xqg = once ? (sh.ready ? sh.ready : xq_scr) + t0 * ql : NULL;
            for (int i = 0; i < a.nseg; i++)
                a.seg[i].y = y0[i] + t0 * a.seg[i].ldy;
            if (a.epi.w)
                a.epi.y = epi_y0 + t0 * a.epi.ldy;
            a.scale_logit = sl0 ? sl0 + t0 : NULL;
            if (a.nt == 1)
                q8k_one<T, 1>(ql, r1);
            else if (a.nt == 2)
                q8k_one<T, 2>(ql, r1);
            else if (a.nt <= 4)
                q8k_one<T, 4>(ql, r1);
            else
                q8k_one<T, 8>(ql, r1);
        }
        return true;
    }
    template <class T>
    int go()
    {
        const int64_t n_in = (int64_t)a.nb * T::QK;
        const size_t xl = (size_t)xs_len<T>(n_in) * sizeof(float);
        const size_t xs_max = xs_budget(smem_optin, wstage_bytes<T, 2, WARPS>());
        if constexpr (kq_q8k<T>::ON)
            if (q8k_go<T>())
                return 0;
        /* token groups: 8 (the formats staging x always: the largest of 8,
         * 4, 2, 1 whose x fits the stage) */
        int ntg = NT_MAX;
        while (use_sx<T>() && ntg > 1 && xl * ntg > xs_max)
            ntg /= 2;
        /* short matrices: one row per warp, for more warps in flight */
        const bool r1 = few_rows(a.n_out, n_sm);
        e = cudaSuccess;
        for (int64_t t0 = 0; t0 < n_tok && e == cudaSuccess; t0 += ntg) {
            a.nt = (int)(n_tok - t0 < ntg ? n_tok - t0 : ntg);
            a.x = x0 + t0 * a.ldx;
            for (int i = 0; i < a.nseg; i++)
                a.seg[i].y = y0[i] + t0 * a.seg[i].ldy;
            if (a.epi.w)
                a.epi.y = epi_y0 + t0 * a.epi.ldy;
            a.scale_logit = sl0 ? sl0 + t0 : NULL;
            /* staged x: always for use_sx formats, else from 3 tokens on
             * (q4_K 8192x2048 at 8 tokens: 41.6 us through L1, 25-28 staged) */
            const bool sx = xl * a.nt <= xs_max && (use_sx<T>() || a.nt > 2);
            if (!sx) {
                if (a.nt == 1)
                    r1 ? one<T, 1, 1, false>(xl) : one<T, 2, 1, false>(xl);
                else if (a.nt == 2)
                    r1 ? one<T, 1, 2, false>(xl) : one<T, 2, 2, false>(xl);
                else if constexpr (!use_sx<T>()) {
                    if (a.nt <= 4)
                        one<T, 2, 4, false>(xl);
                    else
                        one<T, 2, 8, false>(xl);
                }
            } else if (a.nt <= 4 && a.nt > 2) {
                one<T, 2, 4, true>(xl);
            } else if (a.nt > 4) {
                one<T, 2, 8, true>(xl);
            } else if constexpr (use_sx<T>()) {
                if (a.nt == 1)
                    r1 ? one<T, 1, 1, true>(xl) : one<T, 2, 1, true>(xl);
                else
                    r1 ? one<T, 1, 2, true>(xl) : one<T, 2, 2, true>(xl);
            }
        }
        return 0;
    }
};
struct moe_launch {
    cudaStream_t s;
    bool pdl;
    moe_args a;
    bool down;
    int64_t n_tok;
    int n_sm;
    size_t smem_optin, smem_sm;
    uint8_t *xq_scr; /* scratch for xq_once (the K = 1 Q8_K gate/up), or NULL */
    const xq_norm *nm; /* x as the norm of h, for that xq_once launch (norm_fuses), or NULL */
    bool y_off;        /* ... which then leaves nm's y unwritten (xq_norm_y) */
    cudaError_t e;
    template <class T>
    int go()
    {
        const int64_t n_in = (int64_t)a.nb * T::QK;
        const size_t xl = (size_t)xs_len<T>(n_in) * sizeof(float);
        if (down && n_in == 512 && a.S <= DK_MAX) {
            /* one row per warp while the launch has too few warps to keep
             * each SM's loads in flight (the 2048-row decode launch) */
            const int rw = few_rows(a.n_out * n_tok, n_sm) ? 1 : 2;
            const int nw = rw == 1 ? 2 * WARPS : WARPS;
            dim3 grid((unsigned)((a.n_out + nw * rw - 1) / (nw * rw)), (unsigned)n_tok);
            /* 8 slots (top-8) or 10 (top-8 + shared; top-9, 10) */
            const int dkm = a.S <= 8 ? 8 : DK_MAX;
            size_t smem = (T::DIRECT ? 0 : nw * rw * dkm * down16<T>::TILE) + xl * a.S;
            smem = smem > cw_norm_epi_smem(a.epi) ? smem : cw_norm_epi_smem(a.epi);
            void (*k)(const moe_args) =
                dkm == 8 ? (rw == 1 ? moe_down16_kernel<T, 8, 1, 2 * WARPS>
                                    : moe_down16_kernel<T, 8, 2, WARPS>)
                         : (rw == 1 ? moe_down16_kernel<T, DK_MAX, 1, 2 * WARPS>
                                    : moe_down16_kernel<T, DK_MAX, 2, WARPS>);
            e = launch_k(k, grid, 0, nw * 32, smem, s, pdl, a, n_sm);
        } else if (down) {
            dim3 grid((unsigned)((a.n_out + WARPS * 2 - 1) / (WARPS * 2)), (unsigned)n_tok);
            const size_t ws = wstage_bytes<T, 2, WARPS>();
            e = launch_k(moe_down_kernel<T>, grid, 0, WARPS * 32,
                         ws > cw_norm_epi_smem(a.epi) ? ws : cw_norm_epi_smem(a.epi), s, pdl, a,
                         n_sm);
        } else if (a.K == 1 && a.S == 1 && q8k_use<T>(a.nb)) {
            if constexpr (kq_q8k<T>::ON) {
                constexpr bool lpb = lpb_use<T>();
                const bool once = xq_scr && xq_once(a.nb);
                const xq_norm nq = xq_norm_y(nm, y_off);
                e = once ? xq_launch<T>(s, pdl, a.x, n_in, n_tok, a.nb, xq_scr, nm ? &nq : NULL)
                    : nm ? cudaErrorInvalidValue /* norm_fuses said yes: not reached */
                         : cudaSuccess;
                a.xqg = once ? xq_scr : NULL;
                const size_t ql = (size_t)kq_xq_bytes(a.nb);
                if (e != cudaSuccess)
                    return 0;
                const size_t fsm = flat_use(a.nb, a.n_out)
                                       ? flat_plan<T>(a.n_out, a.nb, 1, 2, ql, n_sm, smem_optin,
                                                      smem_sm, a.fr)
                                       : 0;
                if (fsm) {
                    e = launch_k(moe_gate_up_flat_kernel<T>,
                                 dim3((unsigned)((a.n_out + a.fr - 1) / a.fr), (unsigned)n_tok), 1,
                                 FLAT_THREADS, fsm, s, pdl, a, n_sm);
                } else if constexpr (lpb) {
                    e = launch_k(moe_gate_up_lpb_kernel<T>,
                                 dim3((unsigned)((a.n_out + 2 * MW - 1) / (2 * MW)),
                                      (unsigned)n_tok),
                                 1, MW * 32, ql, s, pdl, a, n_sm);
                } else {
                    e = launch_k(moe_gate_up_q8k_kernel<T>,
                                 dim3((unsigned)((a.n_out + MW - 1) / MW), (unsigned)n_tok), 1,
                                 MW * 32, wstage_bytes<T, 2, MW>() + ql, s, pdl, a, n_sm);
                }
            }
        } else {
            dim3 grid((unsigned)((a.n_out + MW - 1) / MW), (unsigned)(n_tok * a.S));
            size_t ws = wstage_bytes<T, 2, MW>();
            const size_t ql = (size_t)kq_xq_bytes(a.nb);
            if (q8k_use<T>(a.nb)) {
                if constexpr (kq_q8k<T>::ON) {
                    /* rows of 8 blocks or more: the flat kernel, its row
                     * groups sized for all the slots' rows at once */
                    const size_t fsm = flat_use(a.nb, a.n_out)
                                           ? flat_plan<T>(a.n_out * n_tok * a.S, a.nb, 1, 2, ql,
                                                          n_sm, smem_optin, smem_sm, a.fr)
                                           : 0;
                    if (fsm)
                        e = launch_k(moe_gate_up_flat_slots_kernel<T>,
                                     dim3((unsigned)((a.n_out + a.fr - 1) / a.fr),
                                          (unsigned)(n_tok * a.S)),
                                     1, FLAT_THREADS, fsm, s, pdl, a, n_sm);
                    else
                        e = launch_k(moe_gate_up_kernel<T, false, true>, grid, 0, MW * 32,
                                     ws + ql, s, pdl, a, n_sm);
                }
            } else if (use_sx<T>() && xl <= xs_budget(smem_optin, ws)) {
                e = launch_k(moe_gate_up_kernel<T, true, false>, grid, 0, MW * 32, ws + xl, s, pdl,
                             a, n_sm);
            } else {
                e = launch_k(moe_gate_up_kernel<T, false, false>, grid, 0, MW * 32, ws, s, pdl, a,
                             n_sm);
            }
        }
        return 0;
    }
};
} // namespace

namespace {
struct q8k_query {
    int nb;
    bool on;
    template <class T>
    int go()
    {
        on = q8k_use<T>(nb);
        return 0;
    }
};

bool q8k_ask(enum cw_qtype type, int64_t n_in)
{
    int qk = cw_k_block_elems(type);
    if (qk <= 0 || n_in % qk)
        return false;
    q8k_query f = {(int)(n_in / qk), false};
    cw_k_dispatch(type, f);
    return f.on;
}
} // namespace

extern "C" bool cw_k_q8k(const struct cw_cuda *c, enum cw_qtype type, int64_t n_in,
                         int64_t n_out)
{
    return c && n_out > 0 && q8k_ask(type, n_in);
}

extern "C" bool cw_k_moe_q8k(const struct cw_cuda *c, enum cw_qtype type, int64_t n_in,
                             int64_t n_out, int K)
{
    return c && n_out > 0 && K >= 1 && q8k_ask(type, n_in);
}

/* Whether W's GEMV launches of n_tok tokens, given scratch, quantise x once
 * into it (xq_launch) by a kernel that can take x as the norm of h
 * (xqn_kernel): the Q8_K path with xq_once, the row in shared memory. The
 * K = 1 gate/up asks the matmul's question (q8k_use). */
static bool norm_fuses(const struct cw_k_mat *W, int64_t n_tok)
{
    const int qk = cw_k_block_elems(W->type);
    return n_tok <= CW_K_GEMV_MAX_TOK && qk > 0 && W->n_in % qk == 0 &&
           q8k_ask(W->type, W->n_in) && xq_once((int)(W->n_in / qk)) &&
           xqn_fits(W->n_in);
}

extern "C" bool cw_k_norm_fuses(const struct cw_cuda *c, const struct cw_k_mat *W, int K,
                                int64_t n_tok)
{
    return c && K <= 1 && norm_fuses(W, n_tok);
}

extern "C" size_t cw_k_matmul_scratch(const struct cw_k_mat *W, int64_t n_tok)
{
    return n_tok > CW_K_GEMV_MAX_TOK ? cw_k_gemm_scratch(W, n_tok)
                                     : xq_scratch(W->type, W->n_in, n_tok);
}

static cw_norm_epi epi_of(const struct cw_k_norm_next *nrm, int64_t n)
{
    cw_norm_epi e = {NULL, NULL, 0, 0, 0.0f, NULL};
    if (nrm)
        e = cw_norm_epi{nrm->d_w, nrm->d_y, nrm->ldy, n, nrm->eps, nrm->d_count};
    return e;
}

/* The GEMV launches (n_tok <= CW_K_GEMV_MAX_TOK) of n checked matrices of
 * one type and width that share x; d_scratch (or NULL) as cw_k_matmul's;
 * sh: as xq_share, or NULL. */
static int gemv(struct cw_cuda *c, int n, const struct cw_k_mat *const *W, const float *d_x,
                int64_t ldx, int64_t n_tok, float *const *d_y, const int64_t *ldy, bool add,
                const float *d_scale_logit, const struct cw_k_norm_next *nrm, const xq_norm *nm,
                bool y_off, void *d_scratch, const xq_share *sh, struct cw_err *err)
{
    gemv_launch f;
    f.s = sh && sh->side ? c->side : c->stream;
    /* the side stream's launch starts once x is written, not early: with
     * programmatic launch the fork lost (H100, 27B tg128: 126.39 with it,
     * 126.84 unforked, 127.09-127.29 without it), likely because its
     * blocks (2 an SM in the DeltaNet mixers) then took the SMs before the
     * first product's (1 an SM); not measured further */
    f.pdl = c->pdl && !(sh && sh->side);
    f.a.nseg = n;
    int64_t rows = 0;
    for (int i = 0; i < MV_SEGS; i++) {
        const struct cw_k_mat *M = W[i < n ? i : n - 1];
        rows += i < n ? M->n_out : 0;
        f.a.seg[i] = mv_seg{(const uint8_t *)M->d_w, M->row_bytes, rows, NULL, ldy[i < n ? i : n - 1]};
        f.y0[i] = d_y[i < n ? i : n - 1];
    }
    f.a.n_out = rows;
    f.a.nb = (int)(W[0]->n_in / cw_k_block_elems(W[0]->type));
    f.a.ldx = ldx;
    f.a.add = add;
    f.a.tabs = cw_k_tables();
    f.a.epi = epi_of(nrm, W[0]->n_out);
    f.epi_y0 = f.a.epi.y;
    f.n_tok = n_tok;
    f.x0 = d_x, f.sl0 = d_scale_logit;
    f.n_sm = c->info.n_sm > 0 ? c->info.n_sm : 1;
    f.smem_optin = c->info.smem_optin;
    f.smem_sm = c->info.smem_sm;
    f.bulk = c->info.major >= 9;
    f.q8k = cw_k_q8k(c, W[0]->type, W[0]->n_in, W[0]->n_out);
    f.a.xqg = NULL;
    f.xq_scr = (uint8_t *)d_scratch;
    f.sh = sh ? *sh : xq_share{NULL, W[0]->type, NULL, NULL, NULL, false};
    f.nm = nm;
    f.y_off = y_off;
    f.fn = NULL;
    f.e = cudaSuccess;
    cw_k_dispatch(W[0]->type, f);
    CW_CUDA_TRY(err, f.e);
    return 0;
}

/* The arguments of one product y [n_tok][ldy] = W·x [n_tok][ldx]. */
static int check_matmul(const struct cw_k_mat *W, const float *d_x, int64_t ldx, int64_t n_tok,
                        int64_t ldy, const char *what, struct cw_err *err)
{
    if (cw_k_check_mat(W, what, err) || check_x(d_x, ldx, what, err))
        return -1;
    if (n_tok < 1 || ldx < W->n_in || ldy < W->n_out || W->n_out > (int64_t)1 << 36)
        return cw_errf(err, CW_ERR_INVALID, "cuda %s: n_tok %lld, ldx %lld (n_in %lld), ldy %lld (n_out %lld)",
                       what, (long long)n_tok, (long long)ldx, (long long)W->n_in, (long long)ldy,
                       (long long)W->n_out);
    return 0;
}

extern "C" int cw_k_matmul(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x,
                           int64_t ldx, int64_t n_tok, float *d_y, int64_t ldy, bool add,
                           const float *d_scale_logit, void *d_scratch, struct cw_err *err)
{
    if (check_matmul(W, d_x, ldx, n_tok, ldy, "matmul", err))
        return -1;
    const struct cw_k_mat *Ws[1] = {W};
    float *ys[1] = {d_y};
    const int64_t ldys[1] = {ldy};
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_gemm(c, 1, Ws, d_x, ldx, n_tok, ys, ldys, add, d_scale_logit, d_scratch, err);
    return gemv(c, 1, Ws, d_x, ldx, n_tok, ys, ldys, add, d_scale_logit, NULL, NULL, false,
                d_scratch, NULL, err);
}

extern "C" size_t cw_k_xq_plain(const struct cw_cuda *c, const struct cw_k_mat *W,
                                int64_t n_tok)
{
    if (n_tok < 1 || n_tok > CW_K_GEMV_MAX_TOK || !cw_k_q8k(c, W->type, W->n_in, W->n_out))
        return 0;
    xq_query q = {W->n_in, 0, true};
    cw_k_dispatch(W->type, q);
    return q.per_tok;
}

extern "C" int cw_k_matmul_add_norm(struct cw_cuda *c, const struct cw_k_mat *W,
                                    const float *d_x, int64_t ldx, int64_t n_tok, float *d_y,
                                    int64_t ldy, const float *d_scale_logit,
                                    const struct cw_k_norm_next *nrm, const void *d_xq,
                                    void *d_scratch, struct cw_err *err)
{
    if (nrm && (!nrm->d_w || nrm->ldy < W->n_out || !nrm->d_count))
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul_add_norm: the norm needs weights, a "
                       "count and rows of >= %lld", (long long)W->n_out);
    if (n_tok > CW_K_GEMV_MAX_TOK && !d_xq)
        return cw_k_matmul(c, W, d_x, ldx, n_tok, d_y, ldy, true, d_scale_logit, d_scratch, err) ||
                       (nrm && cw_k_add_rmsnorm(c, d_y, NULL, nrm->d_w, nrm->d_y, nrm->ldy,
                                                W->n_out, n_tok, nrm->eps, err))
                   ? -1
                   : 0;
    if (check_matmul(W, d_x, ldx, n_tok, ldy, "matmul_add_norm", err))
        return -1;
    if (d_xq && !cw_k_xq_plain(c, W, n_tok))
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul_add_norm: a Q8_K x given for %s "
                       "%lld x %lld at %lld tokens, which quantise x otherwise",
                       cw_qtype_name(W->type), (long long)W->n_out, (long long)W->n_in,
                       (long long)n_tok);
    const struct cw_k_mat *Ws[1] = {W};
    float *ys[1] = {d_y};
    const int64_t ldys[1] = {ldy};
    const xq_share sh = {NULL, W->type, (const uint8_t *)d_xq, NULL, NULL, false};
    return gemv(c, 1, Ws, d_x, ldx, n_tok, ys, ldys, true, d_scale_logit, nrm, NULL, false,
                d_scratch, d_xq ? &sh : NULL, err);
}

/* x as the norm of h (cw_k_norm_in) for n_tok rows of n_in into x. */
static int check_norm_in(const struct cw_k_norm_in *nin, int64_t n_in, const float *d_x,
                         int64_t ldx, const char *what, struct cw_err *err)
{
    if (!nin || !nin->d_h || !nin->d_w || !d_x || ldx < n_in)
        return cw_errf(err, CW_ERR_INVALID, "cuda %s: x as the norm of h needs h, the norm's "
                       "weights and rows of x of >= %lld", what, (long long)n_in);
    return check_x(d_x, ldx, what, err);
}

static xq_norm xq_norm_of(const struct cw_k_norm_in *nin, int64_t n_in, float *d_x, int64_t ldx)
{
    return xq_norm{nin->d_h, nin->d_w, n_in, nin->eps, d_x, ldx};
}

/* Whether a matrix of a multi launch quantises x once in a layout of its
 * own that another's launch can write for it (multi_run): a Q8_K product
 * (cw_k_q8k: Q4_K, Q5_K, Q6_K, xq_launch2's types; n_in whole blocks of
 * 256) whose x is wide enough to quantise once (xq_once_plain). */
static bool xq_shares(const struct cw_cuda *c, const struct cw_k_mat *M)
{
    return cw_k_q8k(c, M->type, M->n_in, M->n_out) && xq_once_plain((int)(M->n_in / 256));
}

/* cw_k_matmul_multi, and with nin its _norm form (x then written, not read first). */
static int multi_run(struct cw_cuda *c, int n, const struct cw_k_mat *const *W,
                     const struct cw_k_norm_in *nin, const float *d_x, int64_t ldx,
                     int64_t n_tok, float *const *d_y, const int64_t *ldy, void *d_scratch,
                     struct cw_err *err)
{
    if (n < 1 || n > CW_K_MULTI_MAX)
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul_multi: %d matrices (1..%d)", n,
                       CW_K_MULTI_MAX);
    for (int i = 0; i < n; i++)
        if (check_matmul(W[i], d_x, ldx, n_tok, ldy[i], "matmul_multi", err))
            return cw_err_prefix(err, "matrix %d", i);
    /* decode: one launch per (type, width, Q8_K decision); prefill: one
     * conversion of x per width. In the order of each group's first matrix. */
    const bool gemm = n_tok > CW_K_GEMV_MAX_TOK;
    int grp[CW_K_MULTI_MAX], first[CW_K_MULTI_MAX], ng = 0;
    for (int i = 0; i < n; i++)
        grp[i] = -1;
    for (int i = 0; i < n; i++) {
        if (grp[i] >= 0)
            continue;
        int m = 0;
        for (int j = i; j < n && m < (gemm ? CW_K_MULTI_MAX : MV_SEGS); j++)
            if (grp[j] < 0 && W[j]->n_in == W[i]->n_in &&
                (gemm || (W[j]->type == W[i]->type &&
                          cw_k_q8k(c, W[j]->type, W[j]->n_in, W[j]->n_out) ==
                              cw_k_q8k(c, W[i]->type, W[i]->n_in, W[i]->n_out))))
                grp[j] = ng, m++;
        first[ng++] = i;
    }
    /* x as the norm of h: the first group that quantises x once computes
     * it (and writes x for the others), so it goes first; else a norm
     * launch of its own first. Either way each output keeps its bits. */
    int gn = -1;
    xq_norm nm = {};
    if (nin) {
        const int64_t n_in = W[0]->n_in;
        for (int i = 0; i < n; i++)
            if (W[i]->n_in != n_in)
                return cw_errf(err, CW_ERR_INVALID, "cuda matmul_multi_norm: widths %lld and "
                               "%lld: one norm of h is one width", (long long)n_in,
                               (long long)W[i]->n_in);
        if (check_norm_in(nin, n_in, d_x, ldx, "matmul_multi_norm", err))
            return -1;
        for (int g = 0; g < ng && gn < 0 && d_scratch; g++)
            if (norm_fuses(W[first[g]], n_tok))
                gn = g;
        if (gn < 0 && cw_k_add_rmsnorm(c, nin->d_h, NULL, nin->d_w, (float *)d_x, ldx, n_in,
                                       n_tok, nin->eps, err))
            return -1;
        nm = xq_norm_of(nin, n_in, (float *)d_x, ldx);
    }
    /* Two Q8_K types that each quantise x once (the 27B's mixers: a Q6_K
     * qkv beside its q4_K gate, beta, alpha; q4_K q, k beside a Q6_K v):
     * the first one's quantising launch writes both layouts and the other
     * reads its own (the same values, so the same bits): one launch, not
     * two (H200, 27B tg64 146.3-146.7 -> 146.8-147.2 tok/s, the 35B's
     * unchanged). gq: the group launched first of those (gn where there
     * is one), g2: the other. */
    int gq = gn, g2 = -1;
    for (int g = 0; g < ng && gq < 0 && !gemm && d_scratch; g++)
        if (xq_shares(c, W[first[g]]))
            gq = g;
    if (gq >= 0 && !gemm && d_scratch && xq_shares(c, W[first[gq]]))
        for (int g = 0; g < ng && g2 < 0; g++)
            if (g != gq && xq_shares(c, W[first[g]]) && W[first[g]]->type != W[first[gq]]->type &&
                W[first[g]]->n_in == W[first[gq]]->n_in)
                g2 = g;
    /* the second layout's copies after the first's in the scratch */
    const size_t qb = g2 >= 0 ? (size_t)n_tok * kq_xq_bytes((int)(W[first[gq]]->n_in / 256)) : 0;
    const enum cw_qtype t2 = W[first[g2 >= 0 ? g2 : 0]]->type;
    /* the second layout's reader on c->side, forked once its x is written
     * and joined before whatever follows, where c->fork: the two products
     * stream at once instead of one after the other */
    bool forked = false;
    const xq_share sh_q = {(uint8_t *)d_scratch + qb, t2, NULL, c->fork ? c->fork_ev : NULL,
                           &forked, false};
    xq_share sh_2 = {NULL, t2, (const uint8_t *)d_scratch + qb, NULL, NULL, false};
    /* x not written where the caller reads none (nin->x_unread) and no
     * launch here reads it in f32: the fused group, and the one reading its
     * second layout, are all there is */
    bool y_off = nin && nin->x_unread && gn >= 0 && !gemm;
    for (int g = 0; g < ng && y_off; g++)
        y_off = g == gn || g == g2;
    for (int k = -1; k < ng; k++) {
        const int g = k < 0 ? gn : k;
        if (g < 0 || (k >= 0 && g == gn))
            continue;
        const struct cw_k_mat *gw[CW_K_MULTI_MAX];
        float *gy[CW_K_MULTI_MAX];
        int64_t gl[CW_K_MULTI_MAX];
        int m = 0;
        for (int j = 0; j < n; j++)
            if (grp[j] == g)
                gw[m] = W[j], gy[m] = d_y[j], gl[m] = ldy[j], m++;
        sh_2.side = g == g2 && forked;
        if (sh_2.side)
            CW_CUDA_TRY(err, cudaStreamWaitEvent(c->side, c->fork_ev, 0));
        const int rc =
            gemm ? cw_k_gemm(c, m, gw, d_x, ldx, n_tok, gy, gl, false, NULL, d_scratch, err)
                 : gemv(c, m, gw, d_x, ldx, n_tok, gy, gl, false, NULL, NULL,
                        g == gn ? &nm : NULL, g == gn && y_off, d_scratch,
                        g2 < 0 ? NULL : g == gq ? &sh_q : g == g2 ? &sh_2 : NULL, err);
        if (sh_2.side) { /* joined even after a failed launch: a capture ends joined */
            const cudaError_t e1 = cudaEventRecord(c->join_ev, c->side);
            const cudaError_t e2 = cudaStreamWaitEvent(c->stream, c->join_ev, 0);
            if (!rc)
                CW_CUDA_TRY(err, e1 != cudaSuccess ? e1 : e2);
        }
        if (rc)
            return -1;
    }
    return 0;
}

extern "C" int cw_k_matmul_multi(struct cw_cuda *c, int n, const struct cw_k_mat *const *W,
                                 const float *d_x, int64_t ldx, int64_t n_tok, float *const *d_y,
                                 const int64_t *ldy, void *d_scratch, struct cw_err *err)
{
    return multi_run(c, n, W, NULL, d_x, ldx, n_tok, d_y, ldy, d_scratch, err);
}

extern "C" int cw_k_matmul_multi_norm(struct cw_cuda *c, int n, const struct cw_k_mat *const *W,
                                      const struct cw_k_norm_in *nin, float *d_x, int64_t ldx,
                                      int64_t n_tok, float *const *d_y, const int64_t *ldy,
                                      void *d_scratch, struct cw_err *err)
{
    if (!nin)
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul_multi_norm: no norm");
    return multi_run(c, n, W, nin, d_x, ldx, n_tok, d_y, ldy, d_scratch, err);
}

/* Decode (n_tok <= CW_K_GEMV_MAX_TOK) needs no scratch (each launch reads
 * the selected experts' rows per (token, slot) pair), except where the
 * K = 1 gate/up quantises a wide x once (xq_scratch). Prefill groups the
 * pairs by expert (k_moe_gemm.cu) and needs the sort, the f16 activations
 * and the per-pair outputs: cw_k_moe_gemm_scratch. */
extern "C" size_t cw_k_moe_scratch(const struct cw_k_mat *G, int X, int K, int64_t n_tok)
{
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_scratch(G->n_in, G->n_out, K, n_tok);
    (void)X;
    return K == 1 ? xq_scratch(G->type, G->n_in, n_tok) : 0;
}

static int check_moe(const struct cw_k_mat *M, int K, int64_t n_tok, const char *what,
                     struct cw_err *err)
{
    if (cw_k_check_mat(M, what, err))
        return -1;
    if (K < 1 || n_tok < 1 || n_tok * K > 65535 * 64 || (n_tok > 65535))
        return cw_errf(err, CW_ERR_INVALID, "cuda %s: K %d, n_tok %lld", what, K, (long long)n_tok);
    return 0;
}

/* The decode MoE launches: S = K routed slots, or K+1 with the shared
 * expert (SG, SU / SD non-NULL, checked by cw_k_moe_shared_fusable). */
static int moe_gate_up_run(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                           const struct cw_k_mat *SG, const struct cw_k_mat *SU,
                           const struct cw_k_norm_in *nin, const float *d_x,
                           const int32_t *d_ids, int K, int64_t n_tok, float *d_act,
                           void *d_scratch, struct cw_err *err)
{
    if (check_moe(G, K, n_tok, "moe_gate_up", err) || check_moe(U, K, n_tok, "moe_gate_up", err) ||
        check_x(d_x, G->n_in, "moe_gate_up", err))
        return -1;
    if (G->type != U->type || G->n_in != U->n_in || G->n_out != U->n_out ||
        G->row_bytes != U->row_bytes || G->expert_bytes != U->expert_bytes)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up: gate (%s %lldx%lld) and up (%s %lldx%lld) differ",
                       cw_qtype_name(G->type), (long long)G->n_out, (long long)G->n_in,
                       cw_qtype_name(U->type), (long long)U->n_out, (long long)U->n_in);
    const int S = SG ? K + 1 : K;
    if (n_tok * S > 65535)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up: %lld pairs (at most 65535)",
                       (long long)(n_tok * S));
    moe_launch f;
    f.s = c->stream;
    f.pdl = c->pdl;
    f.a = moe_args{(const uint8_t *)G->d_w, (const uint8_t *)U->d_w, G->row_bytes,
                   G->expert_bytes, G->n_out, (int)(G->n_in / cw_k_block_elems(G->type)), d_x,
                   d_ids, NULL, K, d_act, cw_k_tables(), S,
                   SG ? (const uint8_t *)SG->d_w : NULL, SU ? (const uint8_t *)SU->d_w : NULL,
                   SG ? SG->row_bytes : 0, NULL, epi_of(NULL, 0), NULL, 0,
                   !nin /* with nin, the norm launch just before writes x */};
    f.down = false;
    f.n_tok = n_tok;
    f.n_sm = c->info.n_sm > 0 ? c->info.n_sm : 1;
    f.smem_optin = c->info.smem_optin;
    f.smem_sm = c->info.smem_sm;
    f.xq_scr = (uint8_t *)d_scratch;
    /* x as the norm of h: in the K = 1 launch that quantises x once, else
     * a norm launch first */
    xq_norm nm = {};
    f.nm = NULL;
    f.y_off = nin && nin->x_unread;
    if (nin) {
        if (check_norm_in(nin, G->n_in, d_x, G->n_in, "moe_gate_up_norm", err))
            return -1;
        nm = xq_norm_of(nin, G->n_in, (float *)d_x, G->n_in);
        if (!SG && K == 1 && d_scratch && norm_fuses(G, n_tok))
            f.nm = &nm; /* its products read the Q8_K copy alone */
        else if (cw_k_add_rmsnorm(c, nin->d_h, NULL, nin->d_w, (float *)d_x, G->n_in, G->n_in,
                                  n_tok, nin->eps, err))
            return -1;
    }
    f.e = cudaSuccess;
    cw_k_dispatch(G->type, f);
    CW_CUDA_TRY(err, f.e);
    return 0;
}

static int moe_down_run(struct cw_cuda *c, const struct cw_k_mat *D, const struct cw_k_mat *SD,
                        const float *d_act, const int32_t *d_ids, const float *d_wts,
                        const float *d_slogit, int K, int64_t n_tok, float *d_h,
                        const struct cw_k_norm_next *nrm, struct cw_err *err)
{
    if (check_moe(D, K, n_tok, "moe_down", err) || check_x(d_act, D->n_in, "moe_down", err))
        return -1;
    moe_launch f;
    f.s = c->stream;
    f.pdl = c->pdl;
    f.a = moe_args{(const uint8_t *)D->d_w, NULL, D->row_bytes, D->expert_bytes, D->n_out,
                   (int)(D->n_in / cw_k_block_elems(D->type)), d_act, d_ids, d_wts, K, d_h,
                   cw_k_tables(), SD ? K + 1 : K, SD ? (const uint8_t *)SD->d_w : NULL, NULL,
                   SD ? SD->row_bytes : 0, d_slogit, epi_of(nrm, D->n_out), NULL, 0, 0};
    f.down = true;
    f.n_tok = n_tok;
    f.n_sm = c->info.n_sm;
    f.smem_optin = c->info.smem_optin;
    f.smem_sm = c->info.smem_sm;
    f.xq_scr = NULL;
    f.nm = NULL;
    f.y_off = false;
    f.e = cudaSuccess;
    cw_k_dispatch(D->type, f);
    CW_CUDA_TRY(err, f.e);
    return 0;
}

/* No ids (expert 0 for every token) only for a single matrix pair in the
 * GEMV regime (kernels.h). */
static int check_ids(const int32_t *d_ids, int K, int64_t n_tok, const char *what,
                     struct cw_err *err)
{
    if (!d_ids && (K != 1 || n_tok > CW_K_GEMV_MAX_TOK))
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda %s: no ids needs K = 1 and n_tok <= %d (K %d, n_tok %lld)", what,
                       CW_K_GEMV_MAX_TOK, K, (long long)n_tok);
    return 0;
}

extern "C" int cw_k_moe_gate_up(struct cw_cuda *c, const struct cw_k_mat *G,
                                const struct cw_k_mat *U, const float *d_x,
                                const int32_t *d_ids, int K, int64_t n_tok, float *d_act,
                                void *d_scratch, struct cw_err *err)
{
    if (check_ids(d_ids, K, n_tok, "moe_gate_up", err))
        return -1;
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_gate_up(c, G, U, d_x, d_ids, K, n_tok, d_act, d_scratch, err);
    return moe_gate_up_run(c, G, U, NULL, NULL, NULL, d_x, d_ids, K, n_tok, d_act, d_scratch,
                           err);
}

extern "C" int cw_k_moe_gate_up_norm(struct cw_cuda *c, const struct cw_k_mat *G,
                                     const struct cw_k_mat *U, const struct cw_k_norm_in *nin,
                                     float *d_x, const int32_t *d_ids, int K, int64_t n_tok,
                                     float *d_act, void *d_scratch, struct cw_err *err)
{
    if (!nin)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up_norm: no norm");
    if (check_ids(d_ids, K, n_tok, "moe_gate_up_norm", err))
        return -1;
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return check_norm_in(nin, G->n_in, d_x, G->n_in, "moe_gate_up_norm", err) ||
                       cw_k_add_rmsnorm(c, nin->d_h, NULL, nin->d_w, d_x, G->n_in, G->n_in,
                                        n_tok, nin->eps, err) ||
                       cw_k_moe_gemm_gate_up(c, G, U, d_x, d_ids, K, n_tok, d_act, d_scratch,
                                             err)
                   ? -1
                   : 0;
    return moe_gate_up_run(c, G, U, NULL, NULL, nin, d_x, d_ids, K, n_tok, d_act, d_scratch,
                           err);
}

static int moe_down_any(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                        const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                        float *d_h, void *d_scratch, bool sorted, struct cw_err *err)
{
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_down(c, D, d_act, d_ids, d_wts, K, n_tok, d_h, d_scratch, sorted,
                                  err);
    return moe_down_run(c, D, NULL, d_act, d_ids, d_wts, NULL, K, n_tok, d_h, NULL, err);
}

extern "C" int cw_k_moe_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                             const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                             float *d_h, void *d_scratch, struct cw_err *err)
{
    return moe_down_any(c, D, d_act, d_ids, d_wts, K, n_tok, d_h, d_scratch, false, err);
}

extern "C" int cw_k_moe_down_after_gate_up(struct cw_cuda *c, const struct cw_k_mat *D,
                                           const float *d_act, const int32_t *d_ids,
                                           const float *d_wts, int K, int64_t n_tok, float *d_h,
                                           void *d_scratch, struct cw_err *err)
{
    return moe_down_any(c, D, d_act, d_ids, d_wts, K, n_tok, d_h, d_scratch, true, err);
}

extern "C" bool cw_k_moe_shared_fusable(const struct cw_k_mat *G, const struct cw_k_mat *D,
                                        const struct cw_k_mat *SG, const struct cw_k_mat *SU,
                                        const struct cw_k_mat *SD, int K, int64_t n_tok)
{
    return n_tok <= CW_K_GEMV_MAX_TOK && K + 1 <= DK_MAX && SG->type == G->type &&
           SU->type == G->type && SG->n_in == G->n_in && SU->n_in == G->n_in &&
           SG->n_out == G->n_out && SU->n_out == G->n_out && SG->row_bytes == SU->row_bytes &&
           SD->type == D->type && SD->n_in == D->n_in && SD->n_out == D->n_out;
}

static int shared_unfit(const char *what, const struct cw_k_mat *R, const struct cw_k_mat *Sh,
                        int K, int64_t n_tok, struct cw_err *err)
{
    return cw_errf(err, CW_ERR_INVALID, "cuda %s: the shared expert (%s %lldx%lld) does not fit "
                   "the routed experts' launch (%s %lldx%lld, K %d, %lld tokens)", what,
                   cw_qtype_name(Sh->type), (long long)Sh->n_out, (long long)Sh->n_in,
                   cw_qtype_name(R->type), (long long)R->n_out, (long long)R->n_in, K,
                   (long long)n_tok);
}

extern "C" int cw_k_moe_gate_up_sh(struct cw_cuda *c, const struct cw_k_mat *G,
                                   const struct cw_k_mat *U, const struct cw_k_mat *SG,
                                   const struct cw_k_mat *SU, const float *d_x,
                                   const int32_t *d_ids, int K, int64_t n_tok, float *d_act,
                                   struct cw_err *err)
{
    if (!cw_k_moe_shared_fusable(G, G, SG, SU, G, K, n_tok))
        return shared_unfit("moe_gate_up_sh", G, SG, K, n_tok, err);
    if (cw_k_check_mat(SG, "moe_gate_up_sh", err) || cw_k_check_mat(SU, "moe_gate_up_sh", err))
        return -1;
    return moe_gate_up_run(c, G, U, SG, SU, NULL, d_x, d_ids, K, n_tok, d_act, NULL, err);
}

extern "C" int cw_k_moe_down_sh(struct cw_cuda *c, const struct cw_k_mat *D,
                                const struct cw_k_mat *SD, const float *d_act,
                                const int32_t *d_ids, const float *d_wts,
                                const float *d_slogit, int K, int64_t n_tok, float *d_h,
                                const struct cw_k_norm_next *nrm, struct cw_err *err)
{
    if (!cw_k_moe_shared_fusable(D, D, D, D, SD, K, n_tok) || !d_slogit)
        return shared_unfit("moe_down_sh", D, SD, K, n_tok, err);
    if (cw_k_check_mat(SD, "moe_down_sh", err))
        return -1;
    if (nrm && (nrm->ldy < D->n_out || !nrm->d_count))
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_down_sh: norm rows of %lld (need %lld) or "
                       "no count", (long long)nrm->ldy, (long long)D->n_out);
    return moe_down_run(c, D, SD, d_act, d_ids, d_wts, d_slogit, K, n_tok, d_h, nrm, err);
}

/* k_gemv.cu — quantised matrix × few-token products (decode, drafts) and the
 * routed-expert products, straight from the GGUF blocks (see kernels.h).
 *
 * Shape: one warp computes R = 2 output rows (a dense pair, or an expert's
 * gate and up row, fused with SwiGLU); WARPS warps per block. Lane l takes
 * units (32 weights, k_quant.cuh) l, l+32, ... of the row, so neighbouring
 * lanes read neighbouring bytes; the dequantised weights sit in registers and
 * are used for all NT tokens, so each weight byte is read once per launch,
 * and each x load serves both rows (x comes from L1; at one row per warp
 * those loads, 7x the bytes of a 4-bit weight, would bound the kernel).
 *
 * Loads: 16-byte-aligned formats (Q4_K, Q5_K, F32/F16/BF16) read their unit
 * with 16-byte loads from global memory; the others (Q6_K's 210-byte blocks,
 * Q8_0's 34, ...) are staged per warp into shared memory with coalesced
 * 16-byte loads first, then read from there with their own alignment.
 *
 * Numerics: weights exactly as quant_dequant.c (k_quant.cuh); activations
 * f32; per lane a single fma chain acc = fma(w, x, acc) over its units in
 * ascending order, runs 0..3, elements 0..7; then the fixed butterfly over
 * the 32 lanes. Nothing depends on NT, on which tokens share the launch or on
 * R, so a token's result is bit-identical for any n_tok <= CW_K_GEMV_MAX_TOK
 * (batch invariance). Error: a lane's chain has L = 32*ceil(n_in/1024)
 * terms (n_in/32 for n_in >= 1024; 32 below), the butterfly 5 more
 * additions, so |y - Σ w x| <= (L + 5) 2^-24 Σ|w x| (first order); the scale
 * and add epilogue adds a rounding of the result each.
 *
 * Measured on an H200 (tests/gpu/test_gpu_gemv.c, CWEN_GPU_BENCH=1; copy
 * bandwidth 4.2 TB/s): LM head 248320x2048 q6_K 2.4 TB/s, q4_K 1.8, q8_0
 * 1.5; 2048-row matrices ~6.5 us (latency: 2 rounds per warp, 2-8 warps
 * per SM). What bounds the large ones: each lane's x loads cover its own 32
 * elements, so one warp-wide float4 load of x touches ~16 cache lines (L1
 * wavefronts), about 128 cycles per round against ~20 for the weights. Next
 * step: keep a unit's x in registers and loop over more rows per warp (x
 * loaded once for R = 8 rows), and split n_in over the warps of a block for
 * the short rows (MoE down, n_in = 512, uses 16 lanes of 32 today). */
#include <stdio.h>

#include "cuda/k_gemm.cuh" /* the grouped prefill experts */
#include "cuda/k_quant.cuh"
#include "cuda/kernels.h"
extern "C" {
#include "gguf/quant_rows.h" /* cw_fp4_values: the MXFP4/NVFP4 levels */
}

#define WARPS 4 /* warps per block: 8 rows per block */
#define R 2     /* rows per warp: x loads shared by 2 rows, 64 weight registers */
/* Up to this many tokens the GEMV path runs (in groups of 8 tokens; above,
 * the TF32 GEMM of k_gemm.cu): the weights are re-read per group of 8, which
 * still costs less than dequantising the matrix for the tensor cores. */
#define CW_K_GEMV_MAX_TOK 32
#define NT_MAX 8

/* Bytes of one row's stage: 32 units plus the 16-byte alignment slack. */
template <class T>
struct stage_of {
    enum { BYTES = (32 / T::UPB) * T::BB, TILE = (BYTES + 15 + 15) / 16 * 16, GMAX = (TILE / 16 + 31) / 32 };
};

/* Staged formats: loads the 16-byte granules that cover blocks [b0, b1) of
 * round ub (units ub..ub+31) of each row; off: where block b0 starts in its
 * first granule, ng: granules. */
template <class T>
static __device__ __forceinline__ void stage_load(const uint8_t *const *rows, int ub, int nb,
                                                  int lane, uint4 (&v)[R][stage_of<T>::GMAX],
                                                  int (&off)[R], int (&ng)[R])
{
    int b0 = ub / T::UPB, b1 = min(b0 + 32 / T::UPB, nb);
#pragma unroll
    for (int r = 0; r < R; r++) {
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

/* acc[r][t] = W_r · x_t for the R rows and NT tokens; every lane gets the
 * sums. stg: this warp's R*TILE bytes of shared memory (staged formats). */
template <class T, int NT>
static __device__ __forceinline__ void mv_dot(const uint8_t *const *rows, const float *const *xs,
                                              int nb, const cw_k_tabs &tabs, uint8_t *stg,
                                              int lane, float (&acc)[R][NT])
{
    typedef stage_of<T> S;
    const int nu = nb * T::UPB;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = 0.0f;
    uint4 v[R][S::GMAX];
    int off[R], ng[R];
    if (!T::DIRECT)
        stage_load<T>(rows, 0, nb, lane, v, off, ng);
    for (int ub = 0; ub < nu; ub += 32) {
        int u = ub + lane;
        bool on = u < nu;
        int blk = (on ? u : ub) / T::UPB, p = (on ? u : ub) % T::UPB;
        const uint8_t *bp[R];
        if (T::DIRECT) {
#pragma unroll
            for (int r = 0; r < R; r++)
                bp[r] = rows[r] + (size_t)blk * T::BB;
        } else {
            /* this round's bytes (loaded last round) into the stage, then
             * the next round's loads go out while this one computes */
            int b0 = ub / T::UPB;
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int k = 0; k < S::GMAX; k++)
                    if (lane + 32 * k < ng[r])
                        ((uint4 *)(stg + r * S::TILE))[lane + 32 * k] = v[r][k];
            __syncwarp();
#pragma unroll
            for (int r = 0; r < R; r++)
                bp[r] = stg + r * S::TILE + off[r] + (blk - b0) * T::BB;
            if (ub + 32 < nu)
                stage_load<T>(rows, ub + 32, nb, lane, v, off, ng);
        }
        if (on) {
            float w[R][32];
#pragma unroll
            for (int r = 0; r < R; r++)
                T::unit(bp[r], p, tabs, w[r]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const float4 *xp = (const float4 *)(xs[t] + (size_t)blk * T::QK + T::run(p, q));
                    float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
                    float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
                    for (int j = 0; j < 8; j++)
#pragma unroll
                        for (int r = 0; r < R; r++)
                            acc[r][t] = __fmaf_rn(w[r][8 * q + j], xv[j], acc[r][t]);
                }
            }
        }
        if (!T::DIRECT)
            __syncwarp(); /* the stage is rewritten next round */
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            acc[r][t] = cw_warp_sum(acc[r][t]);
}

template <class T>
struct stage_smem {
    enum { BYTES = T::DIRECT ? 16 : WARPS * R * stage_of<T>::TILE };
};

struct mv_args {
    const uint8_t *w;
    size_t rb;
    int64_t n_out;
    int nb; /* blocks per row */
    const float *x;
    int64_t ldx;
    int nt; /* valid tokens of this group, <= NT */
    float *y;
    int64_t ldy;
    int add;
    const float *scale_logit; /* this group's, or NULL */
    cw_k_tabs tabs;
};

/* Dense rows: the warp's 2 rows × NT tokens; rows past n_out repeat the last
 * row and tokens past nt repeat token 0 (computed, never written), so the
 * loops carry no predicates. */
template <class T, int NT>
static __global__ void __launch_bounds__(WARPS * 32) gemv_kernel(const mv_args a)
{
    __shared__ __align__(16) uint8_t stage[stage_smem<T>::BYTES];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * WARPS + warp) * R;
    if (row0 >= a.n_out)
        return;
    const uint8_t *rows[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        rows[r] = a.w + (size_t)min(row0 + r, a.n_out - 1) * a.rb;
    const float *xs[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        xs[t] = a.x + (t < a.nt ? t : 0) * a.ldx;
    float acc[R][NT];
    mv_dot<T, NT>(rows, xs, a.nb, a.tabs, stage + warp * (stage_smem<T>::BYTES / WARPS), lane,
                  acc);
    /* lane r*NT + t writes (row r, token t) */
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (lane == r * NT + t && row0 + r < a.n_out && t < a.nt) {
                float v = acc[r][t];
                if (a.scale_logit)
                    v = __fmul_rn(v, 1.0f / (1.0f + expf(-a.scale_logit[t])));
                float *yp = a.y + t * a.ldy + row0 + r;
                *yp = a.add ? __fadd_rn(*yp, v) : v;
            }
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
    float *y; /* gate_up: act [n_tok*K][n_out]; down: h [n_tok][n_out] */
    cw_k_tabs tabs;
};

/* One warp per (pair, row r): expert e's gate row and up row as the warp's
 * two rows, then act = silu(g)·u, silu as the CPU's (x / (1 + e^-x)). An
 * invalid (negative) id gives act = 0. grid (row blocks, n_tok*K). */
template <class T>
static __global__ void __launch_bounds__(WARPS * 32) moe_gate_up_kernel(const moe_args a)
{
    __shared__ __align__(16) uint8_t stage[stage_smem<T>::BYTES];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * WARPS + warp, pair = blockIdx.y;
    if (r >= a.n_out)
        return;
    int e = a.ids[pair];
    float *yp = a.y + pair * a.n_out + r;
    if (e < 0) {
        if (lane == 0)
            *yp = 0.0f;
        return;
    }
    const uint8_t *rows[R] = {a.g + (size_t)e * a.eb + (size_t)r * a.rb,
                              a.u + (size_t)e * a.eb + (size_t)r * a.rb};
    const float *xs[1] = {a.x + (pair / a.K) * (int64_t)a.nb * T::QK};
    float acc[R][1];
    mv_dot<T, 1>(rows, xs, a.nb, a.tabs, stage + warp * (stage_smem<T>::BYTES / WARPS), lane, acc);
    if (lane == 0) {
        float g = acc[0][0];
        *yp = __fmul_rn(g / (1.0f + expf(-g)), acc[1][0]);
    }
}

/* One warp per (token t, rows r, r+1): loops over the K experts in order,
 *   s = fma(wts[k], D_e[r]·act[t*K+k], s),  then h[t][r] += s;
 * no atomics, the sum order is k = 0..K-1. grid (row blocks, n_tok). */
template <class T>
static __global__ void __launch_bounds__(WARPS * 32) moe_down_kernel(const moe_args a)
{
    __shared__ __align__(16) uint8_t stage[stage_smem<T>::BYTES];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int64_t row0 = ((int64_t)blockIdx.x * WARPS + warp) * R, t = blockIdx.y;
    if (row0 >= a.n_out)
        return;
    int64_t n_in = (int64_t)a.nb * T::QK;
    float s[R] = {0.0f, 0.0f};
    for (int k = 0; k < a.K; k++) {
        int e = a.ids[t * a.K + k];
        if (e < 0)
            continue;
        const uint8_t *rows[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            rows[r] = a.g + (size_t)e * a.eb + (size_t)min(row0 + r, a.n_out - 1) * a.rb;
        const float *xs[1] = {a.x + (t * a.K + k) * n_in};
        float acc[R][1];
        mv_dot<T, 1>(rows, xs, a.nb, a.tabs, stage + warp * (stage_smem<T>::BYTES / WARPS), lane,
                     acc);
        float wk = a.wts[t * a.K + k];
#pragma unroll
        for (int r = 0; r < R; r++)
            s[r] = __fmaf_rn(wk, acc[r][0], s[r]);
    }
#pragma unroll
    for (int r = 0; r < R; r++)
        if (lane == r && row0 + r < a.n_out) {
            float *hp = a.y + t * a.n_out + row0 + r;
            *hp = __fadd_rn(*hp, s[r]);
        }
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
struct gemv_launch {
    cudaStream_t s;
    mv_args a;
    int nt_pow2;
    template <class T>
    int go()
    {
        unsigned grid = (unsigned)((a.n_out + WARPS * R - 1) / (WARPS * R));
        switch (nt_pow2) {
        case 1: gemv_kernel<T, 1><<<grid, WARPS * 32, 0, s>>>(a); break;
        case 2: gemv_kernel<T, 2><<<grid, WARPS * 32, 0, s>>>(a); break;
        case 4: gemv_kernel<T, 4><<<grid, WARPS * 32, 0, s>>>(a); break;
        default: gemv_kernel<T, 8><<<grid, WARPS * 32, 0, s>>>(a); break;
        }
        return 0;
    }
};
struct moe_launch {
    cudaStream_t s;
    moe_args a;
    bool down;
    int64_t n_tok;
    template <class T>
    int go()
    {
        if (down) {
            dim3 grid((unsigned)((a.n_out + WARPS * R - 1) / (WARPS * R)), (unsigned)n_tok);
            moe_down_kernel<T><<<grid, WARPS * 32, 0, s>>>(a);
        } else {
            dim3 grid((unsigned)((a.n_out + WARPS - 1) / WARPS), (unsigned)(n_tok * a.K));
            moe_gate_up_kernel<T><<<grid, WARPS * 32, 0, s>>>(a);
        }
        return 0;
    }
};
} // namespace

extern "C" size_t cw_k_matmul_scratch(const struct cw_k_mat *W, int64_t n_tok)
{
    return n_tok > CW_K_GEMV_MAX_TOK ? cw_k_gemm_scratch(W, n_tok) : 0;
}

extern "C" int cw_k_matmul(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x,
                           int64_t ldx, int64_t n_tok, float *d_y, int64_t ldy, bool add,
                           const float *d_scale_logit, void *d_scratch, struct cw_err *err)
{
    if (cw_k_check_mat(W, "matmul", err) || check_x(d_x, ldx, "matmul", err))
        return -1;
    if (n_tok < 1 || ldx < W->n_in || ldy < W->n_out || W->n_out > (int64_t)1 << 36)
        return cw_errf(err, CW_ERR_INVALID, "cuda matmul: n_tok %lld, ldx %lld (n_in %lld), ldy %lld (n_out %lld)",
                       (long long)n_tok, (long long)ldx, (long long)W->n_in, (long long)ldy,
                       (long long)W->n_out);
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_gemm(c, W, d_x, ldx, n_tok, d_y, ldy, add, d_scale_logit, d_scratch, err);
    /* groups of up to 8 tokens; a group reads the weights once */
    for (int64_t t0 = 0; t0 < n_tok; t0 += NT_MAX) {
        int nt = (int)(n_tok - t0 < NT_MAX ? n_tok - t0 : NT_MAX);
        gemv_launch f;
        f.s = c->stream;
        f.a.w = (const uint8_t *)W->d_w;
        f.a.rb = W->row_bytes;
        f.a.n_out = W->n_out;
        f.a.nb = (int)(W->n_in / cw_k_block_elems(W->type));
        f.a.x = d_x + t0 * ldx;
        f.a.ldx = ldx;
        f.a.nt = nt;
        f.a.y = d_y + t0 * ldy;
        f.a.ldy = ldy;
        f.a.add = add;
        f.a.scale_logit = d_scale_logit ? d_scale_logit + t0 : NULL;
        f.a.tabs = cw_k_tables();
        f.nt_pow2 = nt <= 1 ? 1 : nt <= 2 ? 2 : nt <= 4 ? 4 : 8;
        cw_k_dispatch(W->type, f);
        CW_CUDA_LAUNCHED(err);
    }
    return 0;
}

/* The routed experts need no scratch: every launch reads the selected
 * experts' rows per (token, slot) pair, in the decode and prefill regimes
 * alike (a prefill reads an expert once per token that picked it; grouping
 * tokens by expert is the next step for prefill speed). */
extern "C" size_t cw_k_moe_scratch(const struct cw_k_mat *G, int X, int K, int64_t n_tok)
{
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_scratch(G->n_in, G->n_out, K, n_tok);
    (void)G, (void)X, (void)K, (void)n_tok;
    return 0;
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

extern "C" int cw_k_moe_gate_up(struct cw_cuda *c, const struct cw_k_mat *G,
                                const struct cw_k_mat *U, const float *d_x,
                                const int32_t *d_ids, int K, int64_t n_tok, float *d_act,
                                void *d_scratch, struct cw_err *err)
{
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_gate_up(c, G, U, d_x, d_ids, K, n_tok, d_act, d_scratch, err);
    (void)d_scratch;
    if (check_moe(G, K, n_tok, "moe_gate_up", err) || check_moe(U, K, n_tok, "moe_gate_up", err) ||
        check_x(d_x, G->n_in, "moe_gate_up", err))
        return -1;
    if (G->type != U->type || G->n_in != U->n_in || G->n_out != U->n_out ||
        G->row_bytes != U->row_bytes || G->expert_bytes != U->expert_bytes)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up: gate (%s %lldx%lld) and up (%s %lldx%lld) differ",
                       cw_qtype_name(G->type), (long long)G->n_out, (long long)G->n_in,
                       cw_qtype_name(U->type), (long long)U->n_out, (long long)U->n_in);
    if (n_tok * K > 65535)
        return cw_errf(err, CW_ERR_INVALID, "cuda moe_gate_up: %lld pairs (at most 65535)",
                       (long long)(n_tok * K));
    moe_launch f;
    f.s = c->stream;
    f.a = moe_args{(const uint8_t *)G->d_w, (const uint8_t *)U->d_w, G->row_bytes,
                   G->expert_bytes, G->n_out, (int)(G->n_in / cw_k_block_elems(G->type)), d_x,
                   d_ids, NULL, K, d_act, cw_k_tables()};
    f.down = false;
    f.n_tok = n_tok;
    cw_k_dispatch(G->type, f);
    CW_CUDA_LAUNCHED(err);
    return 0;
}

extern "C" int cw_k_moe_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                             const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                             float *d_h, void *d_scratch, struct cw_err *err)
{
    if (n_tok > CW_K_GEMV_MAX_TOK)
        return cw_k_moe_gemm_down(c, D, d_act, d_ids, d_wts, K, n_tok, d_h, d_scratch, err);
    (void)d_scratch;
    if (check_moe(D, K, n_tok, "moe_down", err) || check_x(d_act, D->n_in, "moe_down", err))
        return -1;
    moe_launch f;
    f.s = c->stream;
    f.a = moe_args{(const uint8_t *)D->d_w, NULL, D->row_bytes, D->expert_bytes, D->n_out,
                   (int)(D->n_in / cw_k_block_elems(D->type)), d_act, d_ids, d_wts, K, d_h,
                   cw_k_tables()};
    f.down = true;
    f.n_tok = n_tok;
    cw_k_dispatch(D->type, f);
    CW_CUDA_LAUNCHED(err);
    return 0;
}

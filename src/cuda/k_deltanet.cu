/* k_deltanet.cu — the Gated DeltaNet layer core on the GPU (kernels.h:
 * cw_k_deltanet): gates, causal depthwise conv + SiLU, q/k L2 norm, the
 * delta-rule recurrence and the gated RMSNorm, for n_tok tokens of one
 * sequence. The projections around it are cw_k_matmul's. Two paths:
 *
 * Sequential (decode, short calls, or no scratch), two launches:
 * recur_kernel: one block per (v-head, slice of DN_COLS state columns). It
 *   loads its columns of S into registers once, then walks the tokens in
 *   chunks of DN_CHUNK: the conv + SiLU of the channels it needs (q and k of
 *   its k-head, v of its columns) and the L2 norms are staged in shared
 *   memory for the whole chunk, then each warp runs the recurrence on its own
 *   columns token by token (no barrier per token). It reads the conv state
 *   but never writes it: other blocks read the same channels. The raw o goes
 *   to y. One token (recur_kernel<true>, decode) reads its state columns,
 *   conv taps, conv-state inputs and gate parameters before the PDL wait,
 *   only the projection's outputs after it.
 * norm_kernel: the gated RMSNorm of every (token, head) row of y in place,
 *   and the conv-state shift (after the recurrence, by stream order); all
 *   but y is read before the PDL wait. Where the product after the core
 *   (ssm_out) would quantise y to Q8_K in a launch of its own, norm_xq_kernel
 *   instead: two heads a block, writing y and its Q8_K copy (H200, 27B
 *   decode, 48 launches a token fewer, the same bits: 149.7 -> 150.6 tok/s).
 * Each load moved before the wait took one dependent L2 round trip off the
 * chain of launches (H200 35B decode, with the MoE's flat gate/up: 404 ->
 * 426.7 tok/s; 27B 136.1 -> 140.9; the same bits).
 * One token on sm_90 with the state's counters (d_count), dv = 128, Hv even:
 * core1_kernel does both in one launch, clusters of blocks per pair of
 * v-heads (the same bits; H100: 35B tg128 +0.5 to +1.6% in four pairs of
 * runs, the 27B within its noise, -0.4 to +0.8% in six).
 * Every value a token produces is computed by the same thread mapping and
 * reduction order whatever the chunk, slice or n_tok, so n tokens in one
 * call and n single-token calls give bit-identical outputs and state.
 *
 * Chunked (n_tok >= DC_MIN_TOK with scratch, dk = dv = 128), five launches.
 * Per v-head, with S the dk×dv state (S[i][j], key i), a chunk of L <= DC
 * tokens starting from state S0, G_t = Σ_{s<=t} g_s (in-chunk cumulative log
 * decay), Γ_t = e^{G_t}, the sequential rule S_t = γ_t S_{t-1} + k_t δ_tᵀ,
 * δ_t = β_t (v_t − γ_t S_{t-1}ᵀ k_t), o_t = S_tᵀ q_t / sqrt(dk) unrolls to
 *   (I + A) Δ = diag(β) V − diag(βΓ) K S0,  A[t][s] = β_t e^{G_t−G_s} k_t·k_s (s < t)
 *   Δ = U − W S0,  T = (I + A)^{-1},  U = T diag(β) V,  W = T diag(βΓ) K
 *   O = (diag(Γ) Q S0 + P Δ) / sqrt(dk),  P[t][s] = e^{G_t−G_s} q_t·k_s (s <= t)
 *   S_L = Γ_L S0 + Σ_s e^{G_L−G_s} k_s δ_sᵀ
 * (every exponent G_t − G_s <= 0: no overflow, an underflow only drops a
 * contribution that is below f32 anyway).
 * dc_prep_kernel:  per token: conv + SiLU of all channels, the q/k L2 norms
 *   (the sequential path's arithmetic, so the same q̂/k̂ bits), β and g.
 * dc_tri_kernel:   per (chunk, v-head): G, the Grams, A, T by forward
 *   substitution, W (stored transposed), U, P and the decay scalars.
 * dc_state_kernel: per (v-head, DJ state columns): the only sequential part,
 *   chunk by chunk: stores S0, Δ = U − W S0 (into y), S ← Γ_L S0 + K̃ᵀΔ.
 * dc_out_kernel:   per (chunk, v-head, DO columns): O from q̂, S0, P and Δ,
 *   over Δ in y.
 * norm_kernel:     as in the sequential path.
 * All f32, fixed reduction orders, no atomics: same bits every run; a
 * token's bits depend on where the chunk boundaries (every DC tokens from
 * the call's first token) fall, on nothing else.
 *
 * Error of the chunked path. With ‖k̂‖ <= 1 and β ∈ (0,1) each step's map
 * S ← γ(I − β k̂k̂ᵀ)S is a contraction, so a perturbation of the state (or of
 * one δ_s, which is the perturbation k̂_s e_sᵀ) never grows. Column s of T is
 * the response of the δ's to a unit δ_s, so |T[t][s]| <= 1; likewise every
 * other intermediate (U, W S0, PΔ, Γ·QS0) is a sum of at most DC or dk terms
 * each bounded by the inputs and the state. So the chunked path's rounding
 * is a sum of per-chunk errors of relative size ~ u·sqrt(dk + DC) per dot
 * (u = 2^-24; dk-term dots with S0, DC-term dots inside the chunk, plus the
 * DC-term products with T), carried by a contracting map, instead of the
 * sequential path's dk-term dots per token. Against the CPU reference we
 * assert rel = max|gpu − cpu| / max|cpu| <= 8·u·sqrt(dk·n + dv + DC·(DC + dk))
 * (the sequential bound plus one chunk's worth of T, W and P terms; the
 * factor 8 as in the test: the max over ~1e5 values and two sides' errors),
 * and the same between the chunked and the sequential GPU paths. A formula
 * or index bug gives rel ~ 1. Measured (test_gpu_deltanet_attn, H200, 35B
 * dims): rel <= 2.0e-6 (y) and 7.4e-7 (state) from 32 to 2048 tokens,
 * correlated keys included, against bounds of 6e-5 .. 2.5e-4; the
 * sequential path's own error vs the CPU is 2e-7 .. 7e-7.
 *
 * Speed (CWEN_GPU_BENCH=1, µs per token per layer, Hv = 32): sequential
 * 1.97 at 512 and 2.33 at 2048 tokens; chunked 0.44 and 0.40. The chunked
 * call costs ~85 µs up to ~64 tokens, so it breaks even with the sequential
 * path near 48 tokens (slower at 32, faster from 64). */
#include <cooperative_groups.h>
#include <utility> /* std::move of the cluster barrier's token */

#include "cuda/cuda_common.cuh"
#include "cuda/k_quant.cuh" /* kq_xq_block: y's Q8_K copy */
#include "cuda/kernels.h"

#define DN_WARPS 4                         // warps per block
#define DN_CPW 4                           // state columns per warp (4: 256 blocks at decode)
#define DN_COLS (DN_WARPS * DN_CPW)        // state columns per block
#define DN_CHUNK 16                        // tokens staged in shared memory per pass
#define DN_MAXR 4                          // key dims per lane: d_k <= 32*DN_MAXR
#define DN_MAXCONV 8                       // conv taps supported
#define DN_NORM_THREADS 128

struct dn_args {
    int hk, hv, dk, dv, nconv;
    float eps;
    int64_t C, n_tok;
    const float *conv_w, *dt_bias, *ssm_a, *norm;
    float *conv_state, *delta;
    const float *m, *z, *beta_logit, *alpha;
    float *y;
    bool y_off; /* y's Q8_K copy only: the f32 y after the norm unwritten */
};

static __device__ __forceinline__ float dn_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* Input x of channel c for token t of the window [conv state | m]: tokens
 * before 0 come from the state (oldest first). */
static __device__ __forceinline__ float dn_conv_in(const dn_args &a, int64_t c, int64_t t)
{
    const int ns = a.nconv - 1;
    return t < 0 ? a.conv_state[c * ns + (ns + t)] : a.m[t * a.C + c];
}

/* silu(Σ_k w[c][k]·x[t-ns+k]), taps summed oldest first (the CPU's order). */
static __device__ float dn_conv(const dn_args &a, int64_t c, int64_t t)
{
    const int ns = a.nconv - 1;
    const float *w = a.conv_w + c * a.nconv;
    float acc = 0.0f;
    for (int k = 0; k <= ns; k++)
        acc = fmaf(dn_conv_in(a, c, t - ns + k), w[k], acc);
    return dn_silu(acc);
}

/* A q or k row of dk values in shared memory normalised in place by one warp,
 * as the CPU: RMSNorm with eps/dk, then the 1/sqrt(dk) scale (both paths
 * share it, so their q and k have the same bits). */
static __device__ __forceinline__ void dn_qk_norm(float *x, int dk, float eps, int lane)
{
    float ss = 0.0f;
#pragma unroll
    for (int r = 0; r < DN_MAXR; r++) {
        const int i = lane + 32 * r;
        if (i < dk)
            ss = fmaf(x[i], x[i], ss);
    }
    ss = cw_warp_sum(ss);
    const float fn = (float)dk;
    const float s = 1.0f / sqrtf(ss / fn + eps / fn);
    const float s2 = 1.0f / sqrtf(fn);
#pragma unroll
    for (int r = 0; r < DN_MAXR; r++) {
        const int i = lane + 32 * r;
        if (i < dk)
            x[i] = x[i] * s * s2;
    }
}

/* Sums DN_CPW values, each over the warp: offsets outer so that the
 * independent columns' shuffles overlap; per column the butterfly order of
 * cw_warp_sum. */
static __device__ __forceinline__ void dn_warp_sums(float (&v)[DN_CPW])
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int c = 0; c < DN_CPW; c++)
            v[c] += __shfl_xor_sync(0xffffffffu, v[c], o);
}

/* A token's gates for a head: β = σ(β logit) into *b, the decay
 * e^(softplus(α + dt_bias)·A) into *d (softplus as the CPU). */
static __device__ __forceinline__ void dn_gates(float bl, float al, float dtb, float sa,
                                                float *b, float *d)
{
    *b = cw_dev_sigmoid(bl);
    const float x = al + dtb;
    const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    *d = expf(sp * sa);
}

/* Staged channels a thread of recur_kernel takes in one token's conv
 * (2 dk + DN_COLS of them over the block's threads). */
#define DN_CPT ((2 * 32 * DN_MAXR + DN_COLS + DN_WARPS * 32 - 1) / (DN_WARPS * 32))
#define DN_D1_CONV 4 /* most taps of the one-token form */

/* Channel of staged index ci (q of the k-head, its k, the block's v
 * columns), or -1 for a column past dv. */
static __device__ __forceinline__ int64_t dn_stage_ch(const dn_args &a, int ci, int64_t q_ch,
                                                      int64_t k_ch, int64_t v_ch, int j0)
{
    if (ci < a.dk)
        return q_ch + ci;
    if (ci < 2 * a.dk)
        return k_ch + (ci - a.dk);
    return j0 + (ci - 2 * a.dk) < a.dv ? v_ch + (ci - 2 * a.dk) : -1;
}

/* A warp's DN_CPW columns of S from column jw on (S_h[i][j] at j*dk + i, key
 * i = lane + 32 r), zero past dv and dk; store: back. */
template <bool STORE>
static __device__ __forceinline__ void dn_cols(const dn_args &a, int h, int jw, int lane,
                                               float (&S)[DN_CPW][DN_MAXR])
{
    float *Sh = a.delta + (int64_t)h * a.dv * a.dk;
#pragma unroll
    for (int c = 0; c < DN_CPW; c++) {
        const int j = jw + c;
#pragma unroll
        for (int r = 0; r < DN_MAXR; r++) {
            const int i = lane + 32 * r;
            if (STORE) {
                if (j < a.dv && i < a.dk)
                    Sh[(int64_t)j * a.dk + i] = S[c][r];
            } else {
                S[c][r] = (j < a.dv && i < a.dk) ? Sh[(int64_t)j * a.dk + i] : 0.0f;
            }
        }
    }
}

/* One-token forms: this thread's staged channels (ci = threadIdx.x + j·NT
 * below n_ch, NT threads a block), their conv taps and their inputs from
 * the conv state (weights, and state last written launches ago). */
template <int CPT, int NT>
static __device__ __forceinline__ void dn_d1_taps(const dn_args &a, int n_ch, int64_t q_ch,
                                                  int64_t k_ch, int64_t v_ch, int j0,
                                                  int64_t (&cch)[CPT],
                                                  float (&cwt)[CPT][DN_D1_CONV],
                                                  float (&cst)[CPT][DN_D1_CONV])
{
    const int ns = a.nconv - 1;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        const int ci = threadIdx.x + j * NT;
        cch[j] = ci < n_ch ? dn_stage_ch(a, ci, q_ch, k_ch, v_ch, j0) : -1;
#pragma unroll
        for (int k = 0; k < DN_D1_CONV; k++) {
            const bool on = cch[j] >= 0 && k < a.nconv;
            cwt[j][k] = on ? a.conv_w[cch[j] * a.nconv + k] : 0.0f;
            cst[j][k] = on && k < ns ? a.conv_state[cch[j] * ns + k] : 0.0f;
        }
    }
}

/* One-token forms, after the wait: the projection's outputs this thread
 * reads, m of its staged channels and (thread 0) head h's gate inputs. */
template <int CPT>
static __device__ __forceinline__ void dn_d1_inputs(const dn_args &a, int h,
                                                    const int64_t (&cch)[CPT], float (&mv)[CPT],
                                                    float &bl, float &al)
{
#pragma unroll
    for (int j = 0; j < CPT; j++)
        mv[j] = cch[j] >= 0 ? a.m[cch[j]] : 0.0f;
    bl = al = 0.0f;
    if (threadIdx.x == 0)
        bl = a.beta_logit[h], al = a.alpha[h];
}

/* The one-token conv's taps over the state inputs (dn_conv's order, oldest
 * first) of this thread's staged channels: their sums pre and the last
 * tap wl, which takes m. */
template <int CPT>
static __device__ __forceinline__ void dn_d1_pre(const dn_args &a,
                                                 const float (&cwt)[CPT][DN_D1_CONV],
                                                 const float (&cst)[CPT][DN_D1_CONV],
                                                 float (&pre)[CPT], float (&wl)[CPT])
{
    const int ns = a.nconv - 1;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        pre[j] = 0.0f, wl[j] = cwt[j][0];
#pragma unroll
        for (int k = 0; k < DN_D1_CONV; k++) {
            if (k < ns)
                pre[j] = fmaf(cst[j][k], cwt[j][k], pre[j]);
            if (k == ns)
                wl[j] = cwt[j][k];
        }
    }
}

/* The one-token conv + SiLU of this thread's staged channels into s_u[ci]
 * (NT threads a block): dn_d1_pre's sums, then m's tap. */
template <int CPT, int NT>
static __device__ __forceinline__ void dn_d1_conv(const int64_t (&cch)[CPT],
                                                  const float (&pre)[CPT],
                                                  const float (&wl)[CPT],
                                                  const float (&mv)[CPT], float *s_u)
{
#pragma unroll
    for (int j = 0; j < CPT; j++)
        if (cch[j] >= 0)
            s_u[threadIdx.x + j * NT] = dn_silu(fmaf(mv[j], wl[j], pre[j]));
}

/* One token of the recurrence on a warp's columns jl0.. (local to the
 * staged v slice of u: q̂ | k̂ | v): decay, r_j = Σ_i S[i][j] k̂_i, the
 * delta update, then o_j = Σ_i S[i][j] q̂_i (unscaled) in every lane. */
static __device__ __forceinline__ void dn_step(float (&S)[DN_CPW][DN_MAXR], const float *u,
                                               int dk, int jl0, bool (&von)[DN_CPW], float b,
                                               float decay, int lane, float (&acc)[DN_CPW])
{
    float q[DN_MAXR], k[DN_MAXR];
#pragma unroll
    for (int r = 0; r < DN_MAXR; r++) {
        const int i = lane + 32 * r;
        q[r] = i < dk ? u[i] : 0.0f;
        k[r] = i < dk ? u[dk + i] : 0.0f;
    }
#pragma unroll
    for (int c = 0; c < DN_CPW; c++) {
        acc[c] = 0.0f;
#pragma unroll
        for (int r = 0; r < DN_MAXR; r++) {
            S[c][r] *= decay;
            acc[c] = fmaf(S[c][r], k[r], acc[c]);
        }
    }
    dn_warp_sums(acc); // r_j = Σ_i S[i][j] k̂_i
#pragma unroll
    for (int c = 0; c < DN_CPW; c++) {
        const float vj = von[c] ? u[2 * dk + jl0 + c] : 0.0f;
        const float delta = (vj - acc[c]) * b;
        acc[c] = 0.0f;
#pragma unroll
        for (int r = 0; r < DN_MAXR; r++) {
            S[c][r] = fmaf(k[r], delta, S[c][r]);
            acc[c] = fmaf(S[c][r], q[r], acc[c]);
        }
    }
    dn_warp_sums(acc); // o_j = Σ_i S[i][j] q̂_i
}

/* D1: one token (decode) with at most DN_D1_CONV taps: the conv's weights,
 * its inputs from the state and the gates' parameters are read before the
 * PDL wait (weights, and state last written launches ago), so that only
 * the projection's outputs are read after it; the same operations on the
 * same values as the general form, so the same bits. */
template <bool D1>
static __global__ void __launch_bounds__(DN_WARPS * 32) recur_kernel(dn_args a)
{
    extern __shared__ float sm[];
    const int h = blockIdx.x, kh = h % a.hk; // tiled v -> k head mapping (GGUF order)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j0 = blockIdx.y * DN_COLS;     // first state column of this block
    const int dk = a.dk, dv = a.dv;
    const int n_ch = 2 * dk + DN_COLS;       // staged channels per token: q | k | v slice
    float *s_u = sm;                         // [DN_CHUNK][n_ch]
    float *s_b = sm + DN_CHUNK * n_ch;       // [DN_CHUNK] beta
    float *s_d = s_b + DN_CHUNK;             // [DN_CHUNK] decay e^g

    float S[DN_CPW][DN_MAXR];
    dn_cols<false>(a, h, j0 + warp * DN_CPW, lane, S);
    bool von[DN_CPW];
#pragma unroll
    for (int c = 0; c < DN_CPW; c++)
        von[c] = j0 + warp * DN_CPW + c < dv;
    const int64_t q_ch = (int64_t)kh * dk, k_ch = (int64_t)a.hk * dk + (int64_t)kh * dk;
    const int64_t v_ch = 2 * (int64_t)a.hk * dk + (int64_t)h * dv + j0;
    float cwt[DN_CPT][DN_D1_CONV], cst[DN_CPT][DN_D1_CONV]; /* D1: taps, state inputs */
    int64_t cch[DN_CPT];
    float dtb = 0.0f, sa = 0.0f;
    if constexpr (D1) {
        dn_d1_taps<DN_CPT, DN_WARPS * 32>(a, n_ch, q_ch, k_ch, v_ch, j0, cch, cwt, cst);
        if (threadIdx.x == 0)
            dtb = a.dt_bias[h], sa = a.ssm_a[h];
    }
    /* S was last written by this layer's previous call, at least two
     * launches back, which has completed (cuda_common.cuh: a launch starts
     * only once its predecessor has waited); so its loads go out before the
     * wait, while the projection before us drains; so do D1's conv state
     * (last shifted by that call's norm_kernel) and weights */
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    const float scale = 1.0f / sqrtf((float)dk);

    for (int64_t t0 = 0; t0 < a.n_tok; t0 += DN_CHUNK) {
        const int nt = (int)min((int64_t)DN_CHUNK, a.n_tok - t0);
        // 1. conv + SiLU of the staged channels, and the gates.
        if constexpr (D1) {
            float mv[DN_CPT], bl, al;
            dn_d1_inputs(a, h, cch, mv, bl, al);
            float pre[DN_CPT], wl[DN_CPT];
            dn_d1_pre(a, cwt, cst, pre, wl);
            dn_d1_conv<DN_CPT, DN_WARPS * 32>(cch, pre, wl, mv, s_u);
            if (threadIdx.x == 0)
                dn_gates(bl, al, dtb, sa, s_b, s_d);
        } else {
        for (int idx = threadIdx.x; idx < nt * n_ch; idx += blockDim.x) {
            const int tt = idx / n_ch, ci = idx - tt * n_ch;
            const int64_t c = dn_stage_ch(a, ci, q_ch, k_ch, v_ch, j0);
            if (c < 0)
                continue; // a column past dv: never read
            s_u[tt * n_ch + ci] = dn_conv(a, c, t0 + tt);
        }
        for (int tt = threadIdx.x; tt < nt; tt += blockDim.x) {
            const int64_t r = (t0 + tt) * a.hv + h;
            dn_gates(a.beta_logit[r], a.alpha[r], a.dt_bias[h], a.ssm_a[h], s_b + tt, s_d + tt);
        }
        }
        __syncthreads(); // staged conv outputs complete before the norms read them
        // 2. L2 norm of each q and k row (one warp per row, fixed order), as
        //    the CPU: RMSNorm with eps/dk, then the 1/sqrt(dk) scale.
        for (int row = warp; row < 2 * nt; row += DN_WARPS) {
            float *x = s_u + (row >> 1) * n_ch + (row & 1) * dk;
            dn_qk_norm(x, dk, a.eps, lane);
        }
        __syncthreads(); // normed q̂/k̂ visible to every warp
        // 3. the recurrence, token by token; each warp owns its columns, so
        //    no barrier is needed between tokens.
        for (int tt = 0; tt < nt; tt++) {
            float acc[DN_CPW];
            dn_step(S, s_u + tt * n_ch, dk, warp * DN_CPW, von, s_b[tt], s_d[tt], lane, acc);
            float *o = a.y + (t0 + tt) * (int64_t)a.hv * dv + (int64_t)h * dv + j0;
#pragma unroll
            for (int c = 0; c < DN_CPW; c++) {
                const int jl = warp * DN_CPW + c;
                if (lane == c && j0 + jl < dv)
                    o[jl] = acc[c] * scale;
            }
        }
        __syncthreads(); // every warp done with the chunk before it is overwritten
    }
    dn_cols<true>(a, h, j0 + warp * DN_CPW, lane, S);
}

/* The conv-state shift of DN_NORM_THREADS channels (block blockIdx.x - first
 * of those of a norm launch), by its threads below DN_NORM_THREADS (in). What the norm
 * launches read besides y was written two launches back or earlier (m and
 * z by the projection, the conv state by the previous call: the
 * recurrence between only reads it), so it is read before the wait; the
 * state is written after it (the recurrence has read it). */
static __device__ __forceinline__ void dn_conv_shift(const dn_args &a, int64_t first, bool in)
{
    const int ns = a.nconv - 1;
    const int64_t c = ((int64_t)blockIdx.x - first) * DN_NORM_THREADS + threadIdx.x;
    const bool on = in && c < a.C && ns > 0;
    // The last ns inputs of [state | m]: read all before writing any.
    float keep[DN_MAXCONV];
    for (int j = 0; on && j < ns; j++)
        keep[j] = dn_conv_in(a, c, a.n_tok - ns + j);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    for (int j = 0; on && j < ns; j++)
        a.conv_state[c * ns + j] = keep[j];
}

/* Blocks [0, n_tok*Hv): y_row = RMSNorm(o_row; norm) ⊙ silu(z_row) in place.
 * Blocks after those: the conv-state shift of DN_NORM_THREADS channels each. */
static __global__ void __launch_bounds__(DN_NORM_THREADS) norm_kernel(dn_args a)
{
    __shared__ float s_part[DN_NORM_THREADS / 32];
    const int64_t n_rows = a.n_tok * a.hv;
    if ((int64_t)blockIdx.x >= n_rows) {
        dn_conv_shift(a, n_rows, true);
        return;
    }
    const int dv = a.dv;
    float *o = a.y + (int64_t)blockIdx.x * dv;
    const float *z = a.z + (int64_t)blockIdx.x * dv;
    /* rows of one value per thread (the model's): z and the weight first */
    const bool one = dv <= DN_NORM_THREADS;
    const bool mine = one && (int)threadIdx.x < dv;
    const float z1 = mine ? z[threadIdx.x] : 0.0f, w1 = mine ? a.norm[threadIdx.x] : 0.0f;
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        ss = fmaf(o[i], o[i], ss);
    ss = cw_warp_sum(ss);
    if ((threadIdx.x & 31) == 0)
        s_part[threadIdx.x >> 5] = ss;
    __syncthreads(); // the per-warp partial sums are in shared memory
    float tot = 0.0f;
    for (int w = 0; w < DN_NORM_THREADS / 32; w++) // fixed order
        tot += s_part[w];
    const float s = 1.0f / sqrtf(tot / (float)dv + a.eps);
    if (one) {
        if (mine)
            o[threadIdx.x] = o[threadIdx.x] * s * w1 * dn_silu(z1);
        return;
    }
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        o[i] = o[i] * s * a.norm[i] * dn_silu(z[i]);
}

/* Pair p's 256 normed values (ys, shared memory, written and synchronised)
 * as block p of the token's Q8_K copy in T's layout, by the block's first
 * warp (kq_xq_block; its warp-reduction form, RX: this is the core's serial
 * tail). */
template <class T>
static __device__ __forceinline__ void dn_pair_xq(const dn_args &a, const float *ys, int64_t p,
                                                  uint8_t *xq)
{
    if (threadIdx.x < 32) {
        const int nb = a.hv * DN_NORM_THREADS / 256, half = a.hv / 2;
        const int64_t t = p / half;
        const float4 *q = (const float4 *)(ys + 8 * threadIdx.x);
        const float4 lo = q[0], hi = q[1];
        float vv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        kq_xq_block<T, T, true>(vv, (int)t, (int)(p - t * half), nb, kq_xq_bytes(nb), xq,
                                NULL);
    }
}

/* norm_kernel for rows of dv = DN_NORM_THREADS (the models' 128), two
 * v-heads a block, which also writes the pair's 256 values of y as block p
 * of the token's Q8_K copy in T's layout (kq_xq_block) for the product
 * that reads y next, whose own quantising launch is then saved. Each
 * head's values are norm_kernel's: the same warps' sums in the same order.
 * Blocks past the pairs: the conv-state shift, as there. */
template <class T>
static __global__ void __launch_bounds__(2 * DN_NORM_THREADS) norm_xq_kernel(dn_args a, uint8_t *xq)
{
    constexpr int NW = DN_NORM_THREADS / 32; /* warps per head */
    __shared__ float s_part[2 * NW];
    __shared__ __align__(16) float ys[2 * DN_NORM_THREADS];
    const int64_t n_pairs = a.n_tok * a.hv / 2;
    if ((int64_t)blockIdx.x >= n_pairs) {
        dn_conv_shift(a, n_pairs, threadIdx.x < DN_NORM_THREADS);
        return;
    }
    const int hh = (int)threadIdx.x / DN_NORM_THREADS, e = (int)threadIdx.x % DN_NORM_THREADS;
    const int64_t row = 2 * (int64_t)blockIdx.x + hh; /* hv even: a pair is one token's */
    float *o = a.y + row * DN_NORM_THREADS;
    const float z1 = a.z[row * DN_NORM_THREADS + e], w1 = a.norm[e];
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    float ss = cw_warp_sum(fmaf(o[e], o[e], 0.0f));
    if ((threadIdx.x & 31) == 0)
        s_part[threadIdx.x >> 5] = ss;
    __syncthreads(); // the per-warp partial sums are in shared memory
    float tot = 0.0f;
    for (int w = 0; w < NW; w++) // fixed order
        tot += s_part[NW * hh + w];
    const float s = 1.0f / sqrtf(tot / (float)DN_NORM_THREADS + a.eps);
    const float v = o[e] * s * w1 * dn_silu(z1);
    if (!a.y_off)
        o[e] = v;
    ys[threadIdx.x] = v;
    __syncthreads();
    dn_pair_xq<T>(a, ys, blockIdx.x, xq);
}

/* ---- one token as one launch (sm_90 clusters) ---------------------------- */

/* core1_kernel: recur_kernel<true> and then norm_kernel (XQ false) or
 * norm_xq_kernel (XQ) as one launch, for dv = DN_NORM_THREADS and Hv even:
 * a cluster of DF_CLUSTER blocks per pair of v-heads, DF_COLS state columns
 * a block. Each block runs its columns' recurrence as recur_kernel does
 * (the same warps' sums over the same values) and puts o into the shared
 * memory of the cluster's first block, which after the cluster's barrier
 * runs the pair's gated norms (and Q8_K block) as the norm kernels do, on
 * 256 threads: the same bits, one launch boundary and y's round trip
 * through L2 fewer a layer.
 * The conv-state shift, which the norm launch did once the recurrence had
 * read the state: each block shifts its own v channels; the q and k
 * channels of a k-head are read by every block of its v-heads, so each of
 * those counts itself in at count[kh] once its reads are in (before the
 * PDL wait), and the last one in shifts them and sets the count back to 0
 * for the next call. */
#define DF_WARPS 8
#define DF_THREADS (DF_WARPS * 32)
#define DF_COLS (DF_WARPS * DN_CPW)         /* state columns a block: 32 */
#define DF_HEAD (DN_NORM_THREADS / DF_COLS) /* blocks a v-head: 4 */
#define DF_CLUSTER (2 * DF_HEAD)            /* a pair of v-heads: 8 */
#define DF_CH (2 * 32 * DN_MAXR + DF_COLS)  /* staged channels at most */
#define DF_CPT ((DF_CH + DF_THREADS - 1) / DF_THREADS)

/* Adds 1 to *c (GPU scope); the old value. Relaxed: a block counts itself
 * in only once its reads of the conv state have returned (its threads have
 * summed them before the barrier ahead of the count), and the last block's
 * writes are issued only once its count has come back. An acquire-release
 * count also holds the block's later loads behind it (H100, 27B tg64, one
 * run each: 122.99 against 123.51 tok/s). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* core1_kernel's body's only */
static __device__ __forceinline__ unsigned dn_count_in(unsigned *c)
{
    unsigned old;
    asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(c) : "memory");
    return old;
}
#endif

template <class T, bool XQ>
static __global__ void __launch_bounds__(DF_THREADS)
    core1_kernel(dn_args a, unsigned *count, uint8_t *xq)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    __shared__ float s_u[DF_CH];                         /* q̂ | k̂ | v slice */
    __shared__ __align__(16) float ys[2 * DN_NORM_THREADS]; /* first block: the pair's o, y */
    __shared__ float s_part[2 * DN_NORM_THREADS / 32];
    __shared__ float s_b[1], s_d[1];
    __shared__ int s_last;
    cg::cluster_group cl = cg::this_cluster();
    /* the cluster's blocks may take writes into each other's shared memory
     * only once all have started: arrived here, waited for before the first */
    auto started = cl.barrier_arrive();
    const int rank = (int)cl.block_rank(), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t pair = blockIdx.x / DF_CLUSTER;
    const int h = 2 * (int)pair + rank / DF_HEAD, kh = h % a.hk, dk = a.dk, ns = a.nconv - 1;
    const int j0 = (rank % DF_HEAD) * DF_COLS, n_ch = 2 * dk + DF_COLS;
    float S[DN_CPW][DN_MAXR];
    dn_cols<false>(a, h, j0 + warp * DN_CPW, lane, S);
    bool von[DN_CPW];
#pragma unroll
    for (int c = 0; c < DN_CPW; c++)
        von[c] = true; /* dv = 128: every column is one */
    const int64_t q_ch = (int64_t)kh * dk, k_ch = (int64_t)a.hk * dk + (int64_t)kh * dk;
    const int64_t v_ch = 2 * (int64_t)a.hk * dk + (int64_t)h * a.dv + j0;
    float cwt[DF_CPT][DN_D1_CONV], cst[DF_CPT][DN_D1_CONV];
    int64_t cch[DF_CPT];
    dn_d1_taps<DF_CPT, DF_THREADS>(a, n_ch, q_ch, k_ch, v_ch, j0, cch, cwt, cst);
    float dtb = 0.0f, sa = 0.0f;
    if (threadIdx.x == 0)
        dtb = a.dt_bias[h], sa = a.ssm_a[h];
    const int e = threadIdx.x % DN_NORM_THREADS;
    const float w1 = rank == 0 ? a.norm[e] : 0.0f;
    float pre[DF_CPT], wl[DF_CPT];
    dn_d1_pre(a, cwt, cst, pre, wl);
    __syncthreads(); /* the block's reads of the conv state are in (summed) */
    unsigned old = 0;
    if (threadIdx.x == 0)
        old = dn_count_in(count + kh);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    if (threadIdx.x == 0) /* after the wait: the count's round trip overlaps it */
        s_last = old == (unsigned)(a.hv / a.hk * DF_HEAD) - 1;
    float mv[DF_CPT], bl, al;
    dn_d1_inputs(a, h, cch, mv, bl, al);
    /* the pair's rows of z, one value a thread (token 0) */
    const float z1 = rank == 0 ? a.z[pair * 2 * DN_NORM_THREADS + threadIdx.x] : 0.0f;
    dn_d1_conv<DF_CPT, DF_THREADS>(cch, pre, wl, mv, s_u);
    if (threadIdx.x == 0)
        dn_gates(bl, al, dtb, sa, s_b, s_d);
    __syncthreads(); /* s_u, the gates and s_last are in */
    /* the shift: [state | m]'s last ns inputs */
    const bool last = s_last;
#pragma unroll
    for (int j = 0; j < DF_CPT; j++) {
        const int ci = threadIdx.x + j * DF_THREADS;
        if (cch[j] < 0 || (ci < 2 * dk && !last))
            continue;
#pragma unroll
        for (int k = 0; k < DN_D1_CONV; k++)
            if (k < ns)
                a.conv_state[cch[j] * ns + k] = k + 1 < ns ? cst[j][k + 1] : mv[j];
    }
    if (last && threadIdx.x == 0)
        count[kh] = 0;
    if (warp < 2)
        dn_qk_norm(s_u + warp * dk, dk, a.eps, lane);
    __syncthreads(); /* q̂, k̂ */
    float acc[DN_CPW];
    dn_step(S, s_u, dk, warp * DN_CPW, von, s_b[0], s_d[0], lane, acc);
    dn_cols<true>(a, h, j0 + warp * DN_CPW, lane, S);
    const float scale = 1.0f / sqrtf((float)dk);
    cl.barrier_wait(std::move(started));
    float *o = cl.map_shared_rank(ys, 0) + (rank / DF_HEAD) * DN_NORM_THREADS + j0;
#pragma unroll
    for (int c = 0; c < DN_CPW; c++)
        if (lane == c)
            o[warp * DN_CPW + c] = acc[c] * scale;
    cl.sync(); /* the pair's o in the first block */
    if (rank != 0)
        return;
    /* norm_xq_kernel's (norm_kernel's) gated norms of the two rows */
    constexpr int NW = DN_NORM_THREADS / 32;
    const int hh = threadIdx.x / DN_NORM_THREADS;
    const float ov = ys[threadIdx.x];
    const float ss = cw_warp_sum(fmaf(ov, ov, 0.0f));
    if (lane == 0)
        s_part[warp] = ss;
    __syncthreads(); /* the per-warp partial sums are in shared memory */
    float tot = 0.0f;
    for (int w = 0; w < NW; w++) /* fixed order */
        tot += s_part[NW * hh + w];
    const float s = 1.0f / sqrtf(tot / (float)DN_NORM_THREADS + a.eps);
    const float v = ov * s * w1 * dn_silu(z1);
    if (!XQ || !a.y_off) /* a store on the launch's serial tail */
        a.y[pair * 2 * DN_NORM_THREADS + threadIdx.x] = v;
    if constexpr (XQ) {
        ys[threadIdx.x] = v;
        __syncthreads();
        dn_pair_xq<T>(a, ys, pair, xq);
    }
#endif
}

/* ---- the chunked path ------------------------------------------------------ */

#define DC 64                 // tokens per chunk
#define DCD 128               // d_k = d_v the chunked kernels are written for
#define DC_MIN_TOK 32         // shortest call that takes the chunked path (break-even ~48)
#define KP (DCD + 4)          // padded row of a [DC][DCD] tile: rows on distinct banks
#define DJ 16                 // state columns per dc_state_kernel block
#define DO 64                 // output columns per dc_out_kernel block
#define PP (DC + 4)           // padded row of P in dc_out_kernel
#define DCS (2 * DC + 4)      // decay scalars per (chunk, head): Γ_t, Γ_L/Γ_s, Γ_L
#define DC_THREADS 256
#define DS_THREADS 128

struct dc_args {
    dn_args a;
    int64_t nc;                   // chunks
    float *u;                     // [n_tok][C] conv + SiLU, q/k normed
    float *beta, *g;              // [n_tok][Hv]
    float *wt;                    // [nc][Hv][DCD][DC] Wᵀ
    float *uu;                    // [nc][Hv][DC][DCD] U
    float *p;                     // [nc][Hv][DC][DC] P
    float *sc;                    // [nc][Hv][DCS]
    float *s0;                    // [nc][Hv][DCD i][DCD j] state at each chunk's start
};

/* Scratch segments in floats, each rounded to 64 (256-byte starts). */
struct dc_layout {
    int64_t u, beta, g, wt, uu, p, sc, s0, total;
};

static int64_t dc_round(int64_t n)
{
    return (n + 63) / 64 * 64;
}

static struct dc_layout dc_plan(int hk, int hv, int64_t n_tok)
{
    const int64_t C = 2 * (int64_t)hk * DCD + (int64_t)hv * DCD, nc = (n_tok + DC - 1) / DC;
    const int64_t nh = nc * hv;
    struct dc_layout l;
    int64_t o = 0;
    l.u = o, o += dc_round(n_tok * C);
    l.beta = o, o += dc_round(n_tok * hv);
    l.g = o, o += dc_round(n_tok * hv);
    l.wt = o, o += dc_round(nh * DCD * DC);
    l.uu = o, o += dc_round(nh * DC * DCD);
    l.p = o, o += dc_round(nh * DC * DC);
    l.sc = o, o += dc_round(nh * DCS);
    l.s0 = o, o += dc_round(nh * DCD * DCD);
    l.total = o;
    return l;
}

static bool dc_fits(const struct cw_k_deltanet_dims *d)
{
    const int64_t C = 2 * (int64_t)d->n_k_head * d->d_k + (int64_t)d->n_v_head * d->d_v;
    return d->d_k == DCD && d->d_v == DCD && C * (int64_t)sizeof(float) <= 200 * 1024;
}

/* Per token: conv + SiLU of every channel, the q/k norms as recur_kernel
 * computes them (same order, same bits), β and g = softplus(α + dt_bias)·a. */
static __global__ void __launch_bounds__(DC_THREADS) dc_prep_kernel(dc_args b)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float sm[];
    const dn_args &a = b.a;
    const int64_t t = blockIdx.x;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x)
        sm[c] = dn_conv(a, c, t);
    for (int h = threadIdx.x; h < a.hv; h += blockDim.x) {
        const int64_t r = t * a.hv + h;
        b.beta[r] = cw_dev_sigmoid(a.beta_logit[r]);
        const float x = a.alpha[r] + a.dt_bias[h];
        const float sp = x > 20.0f ? x : logf(1.0f + expf(x)); // softplus as the CPU
        b.g[r] = sp * a.ssm_a[h];
    }
    __syncthreads(); // conv outputs complete before the norms read them
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, dk = a.dk;
    for (int row = warp; row < 2 * a.hk; row += DC_THREADS / 32) {
        float *x = sm + (int64_t)row * dk; // q heads, then k heads
        dn_qk_norm(x, dk, a.eps, lane);
    }
    __syncthreads(); // normed rows visible to every thread
    float *ut = b.u + t * a.C;
    for (int64_t c = threadIdx.x; c < a.C; c += blockDim.x)
        ut[c] = sm[c];
}

/* Staging copies by cw_cp16 (cuda_common.cuh): every copy a thread issues
 * is in flight at once (plain loads followed by shared stores through
 * generic pointers serialise on the global latency); cw_cp_wait_all waits
 * for the thread's own copies, a barrier after it publishes them. */

/* Starts copying rows [0, DC) of one head's DCD channels of src (row stride
 * C) into a [DC][KP] tile; rows at or past L are zeroed. */
static __device__ __forceinline__ void dc_load_rows(float *dst, const float *src, int64_t C, int L)
{
    for (int idx = threadIdx.x; idx < DC * DCD / 4; idx += blockDim.x) {
        const int t = idx / (DCD / 4), i4 = (idx % (DCD / 4)) * 4;
        if (t < L)
            cw_cp16(dst + t * KP + i4, src + t * C + i4);
        else
            *(float4 *)(dst + t * KP + i4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

/* Per (chunk, v-head): everything of the chunk that does not need S0. */
static __global__ void __launch_bounds__(DC_THREADS) dc_tri_kernel(dc_args b)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float sm[];
    float *sk = sm;               // [DC][KP] k̂
    float *sq = sk + DC * KP;     // [DC][KP] q̂, then v
    float *sa = sq + DC * KP;     // [DC][DC+1] A
    float *st = sa + DC * (DC + 1); // [DC][DC+1] T
    float *sG = st + DC * (DC + 1); // [DC] G_t
    float *sb = sG + DC;          // [DC] β_t
    float *sbg = sb + DC;         // [DC] β_t Γ_t
    const dn_args &a = b.a;
    const int c = blockIdx.x, h = blockIdx.y, kh = h % a.hk, tid = threadIdx.x;
    const int64_t t0 = (int64_t)c * DC, ch = (int64_t)c * a.hv + h;
    const int L = (int)min((int64_t)DC, a.n_tok - t0);
    const float *u0 = b.u + t0 * a.C;
    dc_load_rows(sk, u0 + (int64_t)a.hk * DCD + (int64_t)kh * DCD, a.C, L);
    dc_load_rows(sq, u0 + (int64_t)kh * DCD, a.C, L);
    if (tid < DC) { // rows past L: g = 0, β = 0 (they change nothing)
        sG[tid] = tid < L ? b.g[(t0 + tid) * a.hv + h] : 0.0f;
        sb[tid] = tid < L ? b.beta[(t0 + tid) * a.hv + h] : 0.0f;
    }
    __syncthreads(); // g and β in shared memory
    if (tid == 0) {
        float G = 0.0f;
        for (int t = 0; t < DC; t++) { // fixed order
            G += sG[t];
            sG[t] = G;
            sbg[t] = sb[t] * expf(G);
        }
    }
    cw_cp_wait_all();
    __syncthreads(); // tiles and G ready

    // The Grams k_t·k_s and q_t·k_s: rows tg + 16r, columns sg + 16r2.
    {
        const int tg = tid >> 4, sg = tid & 15;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int r2 = 0; r2 < 4; r2++)
                kk[r][r2] = qk[r][r2] = 0.0f;
        for (int i = 0; i < DCD; i += 4) {
            float4 kt[4], qt[4], ks[4];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                kt[r] = *(const float4 *)(sk + (tg + 16 * r) * KP + i);
                qt[r] = *(const float4 *)(sq + (tg + 16 * r) * KP + i);
                ks[r] = *(const float4 *)(sk + (sg + 16 * r) * KP + i);
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int r2 = 0; r2 < 4; r2++) {
                    kk[r][r2] = fmaf(kt[r].x, ks[r2].x, kk[r][r2]);
                    kk[r][r2] = fmaf(kt[r].y, ks[r2].y, kk[r][r2]);
                    kk[r][r2] = fmaf(kt[r].z, ks[r2].z, kk[r][r2]);
                    kk[r][r2] = fmaf(kt[r].w, ks[r2].w, kk[r][r2]);
                    qk[r][r2] = fmaf(qt[r].x, ks[r2].x, qk[r][r2]);
                    qk[r][r2] = fmaf(qt[r].y, ks[r2].y, qk[r][r2]);
                    qk[r][r2] = fmaf(qt[r].z, ks[r2].z, qk[r][r2]);
                    qk[r][r2] = fmaf(qt[r].w, ks[r2].w, qk[r][r2]);
                }
        }
        float *P = b.p + ch * DC * DC;
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int r2 = 0; r2 < 4; r2++) {
                const int t = tg + 16 * r, s = sg + 16 * r2;
                const float e = s <= t ? expf(sG[t] - sG[s]) : 0.0f; // Γ_t/Γ_s <= 1
                sa[t * (DC + 1) + s] = s < t ? sb[t] * e * kk[r][r2] : 0.0f;
                P[t * DC + s] = e * qk[r][r2];
                st[t * (DC + 1) + s] = t == s ? 1.0f : 0.0f;
            }
    }
    __syncthreads(); // q̂ no longer read; A and the identity in place
    dc_load_rows(sq, u0 + 2 * (int64_t)a.hk * DCD + (int64_t)h * DCD, a.C, L); // v

    // T = (I + A)^{-1}, row by row: T[t][s] = −Σ_{s<=r<t} A[t][r] T[r][s].
    // Four threads per column s, their partial sums combined in a fixed tree.
    {
        const int s = tid >> 2, p = tid & 3;
        for (int t = 1; t < L; t++) {
            float part = 0.0f;
            if (s < t)
                for (int r = s + p; r < t; r += 4)
                    part = fmaf(sa[t * (DC + 1) + r], st[r * (DC + 1) + s], part);
            part += __shfl_xor_sync(0xffffffffu, part, 1);
            part += __shfl_xor_sync(0xffffffffu, part, 2);
            if (s < t && p == 0)
                st[t * (DC + 1) + s] = -part;
            __syncthreads(); // row t complete before row t+1 reads it
        }
    }
    cw_cp_wait_all();
    __syncthreads(); // T and v complete (also when L == 1)

    // W = T diag(βΓ) K (stored transposed) and U = T diag(β) V: rows
    // 4tq..4tq+3, columns jg + 16r; T is lower triangular, so s <= 4tq+3.
    {
        const int tq = tid >> 4, jg = tid & 15;
        float w[4][8], uv[4][8];
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
            for (int r = 0; r < 8; r++)
                w[k][r] = uv[k][r] = 0.0f;
        for (int s = 0; s < 4 * tq + 4; s++) {
            float tw[4], tu[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float T = st[(4 * tq + k) * (DC + 1) + s];
                tw[k] = T * sbg[s];
                tu[k] = T * sb[s];
            }
#pragma unroll
            for (int r = 0; r < 8; r++) {
                const float kv = sk[s * KP + jg + 16 * r], vv = sq[s * KP + jg + 16 * r];
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    w[k][r] = fmaf(tw[k], kv, w[k][r]);
                    uv[k][r] = fmaf(tu[k], vv, uv[k][r]);
                }
            }
        }
        float *Wt = b.wt + ch * DCD * DC, *U = b.uu + ch * DC * DCD;
#pragma unroll
        for (int r = 0; r < 8; r++) {
            const int i = jg + 16 * r;
            *(float4 *)(Wt + i * DC + 4 * tq) = make_float4(w[0][r], w[1][r], w[2][r], w[3][r]);
#pragma unroll
            for (int k = 0; k < 4; k++)
                U[(4 * tq + k) * DCD + i] = uv[k][r];
        }
    }
    float *sc = b.sc + ch * DCS;
    if (tid < DC) {
        const float GL = sG[L - 1];
        sc[tid] = expf(sG[tid]);                                 // Γ_t
        sc[DC + tid] = tid < L ? expf(GL - sG[tid]) : 0.0f;      // Γ_L/Γ_s
        if (tid == 0)
            sc[2 * DC] = expf(GL);                               // Γ_L
    }
}

/* Per (v-head, DJ columns): the state walk over the chunks. */
static __global__ void __launch_bounds__(DS_THREADS) dc_state_kernel(dc_args b)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float sm[];
    float *sw = sm;               // [DCD][DC] Wᵀ
    float *sk = sw + DCD * DC;    // [DC][DCD] k̂ (rows < L)
    float *su = sk + DC * DCD;    // [DC][DJ] U
    float *ss = su + DC * DJ;     // [DCD][DJ] S0
    float *sd = ss + DCD * DJ;    // [DC][DJ] Δ
    float *sx = sd + DC * DJ;     // [DCS] the chunk's decay scalars
    const dn_args &a = b.a;
    const int h = blockIdx.x, kh = h % a.hk, j0 = blockIdx.y * DJ, tid = threadIdx.x;
    const int ig = tid >> 3, jg = tid & 7; // state: keys 8ig..8ig+7, columns 2jg, 2jg+1
    float S[8][2];
    float *Sh = a.delta + (int64_t)h * DCD * DCD; // S_h[i][j] at j*dk + i
#pragma unroll
    for (int bc = 0; bc < 2; bc++) {
        const float *src = Sh + (int64_t)(j0 + 2 * jg + bc) * DCD + 8 * ig;
        const float4 x0 = *(const float4 *)src, x1 = *(const float4 *)(src + 4);
        S[0][bc] = x0.x, S[1][bc] = x0.y, S[2][bc] = x0.z, S[3][bc] = x0.w;
        S[4][bc] = x1.x, S[5][bc] = x1.y, S[6][bc] = x1.z, S[7][bc] = x1.w;
    }
    const int64_t ko = (int64_t)a.hk * DCD + (int64_t)kh * DCD, yrow = (int64_t)a.hv * DCD;
    for (int64_t c = 0; c < b.nc; c++) {
        const int64_t t0 = c * DC, ch = c * a.hv + h;
        const int L = (int)min((int64_t)DC, a.n_tok - t0);
        float *S0 = b.s0 + ch * DCD * DCD;
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const int i = 8 * ig + q;
            const float2 v = make_float2(S[q][0], S[q][1]);
            *(float2 *)(ss + i * DJ + 2 * jg) = v;
            *(float2 *)(S0 + (int64_t)i * DCD + j0 + 2 * jg) = v;
        }
        const float *gw = b.wt + ch * DCD * DC;
        for (int idx = tid; idx < DCD * DC / 4; idx += DS_THREADS)
            cw_cp16(sw + 4 * idx, gw + 4 * idx);
        for (int idx = tid; idx < L * (DCD / 4); idx += DS_THREADS) { // rows past L never read
            const int s = idx / (DCD / 4), i4 = (idx % (DCD / 4)) * 4;
            cw_cp16(sk + s * DCD + i4, b.u + (t0 + s) * a.C + ko + i4);
        }
        const float *gu = b.uu + ch * DC * DCD;
        for (int idx = tid; idx < DC * DJ / 4; idx += DS_THREADS) {
            const int t = idx / (DJ / 4), j4 = (idx % (DJ / 4)) * 4;
            cw_cp16(su + t * DJ + j4, gu + t * DCD + j0 + j4);
        }
        if (tid < DCS / 4)
            cw_cp16(sx + 4 * tid, b.sc + ch * DCS + 4 * tid);
        cw_cp_wait_all();
        __syncthreads(); // the chunk's tiles and S0 in shared memory
        const float gl = sx[2 * DC];

        // Δ = U − W S0: rows 4tq..4tq+3, columns 2jg, 2jg+1; into y.
        {
            const int tq = tid >> 3;
            float acc[4][2];
#pragma unroll
            for (int k = 0; k < 4; k++)
                acc[k][0] = acc[k][1] = 0.0f;
#pragma unroll 4
            for (int i = 0; i < DCD; i++) {
                const float4 w = *(const float4 *)(sw + i * DC + 4 * tq);
                const float2 sv = *(const float2 *)(ss + i * DJ + 2 * jg);
                acc[0][0] = fmaf(w.x, sv.x, acc[0][0]), acc[0][1] = fmaf(w.x, sv.y, acc[0][1]);
                acc[1][0] = fmaf(w.y, sv.x, acc[1][0]), acc[1][1] = fmaf(w.y, sv.y, acc[1][1]);
                acc[2][0] = fmaf(w.z, sv.x, acc[2][0]), acc[2][1] = fmaf(w.z, sv.y, acc[2][1]);
                acc[3][0] = fmaf(w.w, sv.x, acc[3][0]), acc[3][1] = fmaf(w.w, sv.y, acc[3][1]);
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int t = 4 * tq + k;
                const float2 uv = *(const float2 *)(su + t * DJ + 2 * jg);
                const float2 d = make_float2(uv.x - acc[k][0], uv.y - acc[k][1]);
                *(float2 *)(sd + t * DJ + 2 * jg) = d;
                if (t < L)
                    *(float2 *)(a.y + (t0 + t) * yrow + (int64_t)h * DCD + j0 + 2 * jg) = d;
            }
        }
        __syncthreads(); // Δ complete

        // S ← Γ_L S0 + Σ_s k̂_s ((Γ_L/Γ_s) δ_s)ᵀ, s in order.
#pragma unroll
        for (int q = 0; q < 8; q++)
            S[q][0] *= gl, S[q][1] *= gl;
        for (int s = 0; s < L; s++) {
            const float4 k0 = *(const float4 *)(sk + s * DCD + 8 * ig);
            const float4 k1 = *(const float4 *)(sk + s * DCD + 8 * ig + 4);
            float2 d = *(const float2 *)(sd + s * DJ + 2 * jg);
            const float f = sx[DC + s];
            d.x *= f, d.y *= f;
            const float kv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
            for (int q = 0; q < 8; q++) {
                S[q][0] = fmaf(kv[q], d.x, S[q][0]);
                S[q][1] = fmaf(kv[q], d.y, S[q][1]);
            }
        }
        __syncthreads(); // every thread done with the tiles before the next chunk's
    }
#pragma unroll
    for (int bc = 0; bc < 2; bc++) {
        float *dst = Sh + (int64_t)(j0 + 2 * jg + bc) * DCD + 8 * ig;
        *(float4 *)dst = make_float4(S[0][bc], S[1][bc], S[2][bc], S[3][bc]);
        *(float4 *)(dst + 4) = make_float4(S[4][bc], S[5][bc], S[6][bc], S[7][bc]);
    }
}

/* Per (chunk, v-head, DO columns): O = (diag(Γ) Q S0 + P Δ)/sqrt(dk) over Δ
 * in y (this block reads its rows and columns of Δ before writing them). */
static __global__ void __launch_bounds__(DC_THREADS) dc_out_kernel(dc_args b)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float sm[];
    float *sq = sm;               // [DC][KP] q̂
    float *s0 = sq + DC * KP;     // [DCD][DO] S0 columns jb..
    float *sp = s0 + DCD * DO;    // [DC][PP] P
    float *sd = sp + DC * PP;     // [DC][DO] Δ
    float *sg = sd + DC * DO;     // [DC] Γ_t
    const dn_args &a = b.a;
    const int c = blockIdx.x, h = blockIdx.y, jb = blockIdx.z * DO, kh = h % a.hk;
    const int tid = threadIdx.x;
    const int64_t t0 = (int64_t)c * DC, ch = (int64_t)c * a.hv + h, yrow = (int64_t)a.hv * DCD;
    const int L = (int)min((int64_t)DC, a.n_tok - t0);
    dc_load_rows(sq, b.u + t0 * a.C + (int64_t)kh * DCD, a.C, L);
    const float *gs = b.s0 + ch * DCD * DCD + jb;
    for (int idx = tid; idx < DCD * DO / 4; idx += DC_THREADS) {
        const int i = idx / (DO / 4), j4 = (idx % (DO / 4)) * 4;
        cw_cp16(s0 + i * DO + j4, gs + (int64_t)i * DCD + j4);
    }
    const float *gp = b.p + ch * DC * DC;
    for (int idx = tid; idx < DC * DC / 4; idx += DC_THREADS) {
        const int t = idx / (DC / 4), s4 = (idx % (DC / 4)) * 4;
        cw_cp16(sp + t * PP + s4, gp + t * DC + s4);
    }
    float *yb = a.y + t0 * yrow + (int64_t)h * DCD + jb;
    for (int idx = tid; idx < DC * DO / 4; idx += DC_THREADS) {
        const int t = idx / (DO / 4), j4 = (idx % (DO / 4)) * 4;
        if (t < L)
            cw_cp16(sd + t * DO + j4, yb + t * yrow + j4);
        else
            *(float4 *)(sd + t * DO + j4) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (tid < DC / 4)
        cw_cp16(sg + 4 * tid, b.sc + ch * DCS + 4 * tid);
    cw_cp_wait_all();
    __syncthreads(); // tiles ready (and every read of Δ in y done before any write)

    const int tg = tid >> 4, jg = tid & 15; // rows tg + 16r, columns 4jg..4jg+3
    float o1[4][4], o2[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            o1[r][j] = o2[r][j] = 0.0f;
    for (int i = 0; i < DCD; i += 4) {
        float4 q[4];
#pragma unroll
        for (int r = 0; r < 4; r++)
            q[r] = *(const float4 *)(sq + (tg + 16 * r) * KP + i);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const float4 sv = *(const float4 *)(s0 + (i + kk) * DO + 4 * jg);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float qv = kk == 0 ? q[r].x : kk == 1 ? q[r].y : kk == 2 ? q[r].z : q[r].w;
                o1[r][0] = fmaf(qv, sv.x, o1[r][0]);
                o1[r][1] = fmaf(qv, sv.y, o1[r][1]);
                o1[r][2] = fmaf(qv, sv.z, o1[r][2]);
                o1[r][3] = fmaf(qv, sv.w, o1[r][3]);
            }
        }
    }
    for (int s = 0; s < DC; s += 4) {
        float4 pv[4];
#pragma unroll
        for (int r = 0; r < 4; r++)
            pv[r] = *(const float4 *)(sp + (tg + 16 * r) * PP + s);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const float4 dv = *(const float4 *)(sd + (s + kk) * DO + 4 * jg);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const float p = kk == 0 ? pv[r].x : kk == 1 ? pv[r].y : kk == 2 ? pv[r].z : pv[r].w;
                o2[r][0] = fmaf(p, dv.x, o2[r][0]);
                o2[r][1] = fmaf(p, dv.y, o2[r][1]);
                o2[r][2] = fmaf(p, dv.z, o2[r][2]);
                o2[r][3] = fmaf(p, dv.w, o2[r][3]);
            }
        }
    }
    const float scale = 1.0f / sqrtf((float)DCD);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int t = tg + 16 * r;
        if (t >= L)
            continue;
        const float gt = sg[t];
        *(float4 *)(yb + t * yrow + 4 * jg) =
            make_float4(fmaf(gt, o1[r][0], o2[r][0]) * scale, fmaf(gt, o1[r][1], o2[r][1]) * scale,
                        fmaf(gt, o1[r][2], o2[r][2]) * scale, fmaf(gt, o1[r][3], o2[r][3]) * scale);
    }
}

size_t cw_k_deltanet_scratch(const struct cw_k_deltanet_dims *d, int64_t n_tok)
{
    if (!dc_fits(d) || n_tok < DC_MIN_TOK || d->n_k_head <= 0 || d->n_v_head <= 0)
        return 0;
    return (size_t)dc_plan(d->n_k_head, d->n_v_head, n_tok).total * sizeof(float);
}

/* Shared memory of the chunked kernels (dc_prep_kernel's: a.C floats). */
#define DC_SM_TRI (((size_t)2 * DC * KP + 2 * DC * (DC + 1) + 3 * DC) * sizeof(float))
#define DC_SM_STATE (((size_t)2 * DCD * DC + DC * DJ + DCD * DJ + DC * DJ + DCS) * sizeof(float))
#define DC_SM_OUT (((size_t)DC * KP + DCD * DO + DC * PP + DC * DO + DC) * sizeof(float))

/* Whether the device lets a block have the chunked kernels' shared memory
 * (the triangular solve's 99.25 KB: not on sm_75's 64 KB nor sm_86/89's
 * 99 KB; those take the token-by-token path). */
static bool dc_smem_ok(const struct cw_cuda *c, const dn_args &a)
{
    size_t need = (size_t)a.C * sizeof(float);
    need = DC_SM_TRI > need ? DC_SM_TRI : need;
    need = DC_SM_STATE > need ? DC_SM_STATE : need;
    need = DC_SM_OUT > need ? DC_SM_OUT : need;
    return need <= c->info.smem_optin;
}

/* The chunked launches (dims checked, n_tok >= DC_MIN_TOK). */
static int dc_run(struct cw_cuda *c, const dn_args &a, void *d_scratch, struct cw_err *err)
{
    const struct dc_layout l = dc_plan(a.hk, a.hv, a.n_tok);
    float *f = (float *)d_scratch;
    dc_args b;
    b.a = a;
    b.nc = (a.n_tok + DC - 1) / DC;
    b.u = f + l.u, b.beta = f + l.beta, b.g = f + l.g, b.wt = f + l.wt, b.uu = f + l.uu;
    b.p = f + l.p, b.sc = f + l.sc, b.s0 = f + l.s0;
    if (b.nc * a.hv > 0x7fffffff || a.n_tok > 0x7fffffff)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_deltanet: %lld tokens is too many for one launch",
                       (long long)a.n_tok);
    const size_t sm_prep = (size_t)a.C * sizeof(float);
    const size_t sm_tri = DC_SM_TRI, sm_state = DC_SM_STATE, sm_out = DC_SM_OUT;
    CW_CUDA_TRY(err, cudaFuncSetAttribute(dc_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)sm_prep));
    CW_CUDA_TRY(err, cudaFuncSetAttribute(dc_tri_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)sm_tri));
    CW_CUDA_TRY(err, cudaFuncSetAttribute(dc_state_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_state));
    CW_CUDA_TRY(err, cudaFuncSetAttribute(dc_out_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)sm_out));
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, dc_prep_kernel, dim3((unsigned)a.n_tok),
                               dim3(DC_THREADS), sm_prep, b));
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, dc_tri_kernel, dim3((unsigned)b.nc, (unsigned)a.hv),
                               dim3(DC_THREADS), sm_tri, b));
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, dc_state_kernel,
                               dim3((unsigned)a.hv, (unsigned)(DCD / DJ)), dim3(DS_THREADS), sm_state,
                               b));
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, dc_out_kernel,
                               dim3((unsigned)b.nc, (unsigned)a.hv, (unsigned)(DCD / DO)),
                               dim3(DC_THREADS), sm_out, b));
    return 0;
}

/* cw_k_dispatch functor: norm_xq_kernel for a type whose products read
 * Q8_K x (kq_q8k), else NULL. */
namespace {
struct norm_xq_pick {
    void (*k)(dn_args, uint8_t *);
    void (*k1)(dn_args, unsigned *, uint8_t *);
    template <class T>
    int go()
    {
        if constexpr (kq_q8k<T>::ON)
            k = norm_xq_kernel<T>, k1 = core1_kernel<T, true>;
        return 0;
    }
};
} // namespace

static void (*norm_xq_of(enum cw_qtype t))(dn_args, uint8_t *)
{
    norm_xq_pick f = {NULL, NULL};
    cw_k_dispatch(t, f);
    return f.k;
}

/* core1_kernel for y's copy in t's layout (NULL where there is none), or
 * for no copy (t < 0). */
static void (*core1_of(int t))(dn_args, unsigned *, uint8_t *)
{
    if (t < 0)
        return core1_kernel<kt_q4_k, false>;
    norm_xq_pick f = {NULL, NULL};
    cw_k_dispatch((enum cw_qtype)t, f);
    return f.k1;
}

bool cw_k_deltanet_xq(const struct cw_k_deltanet_dims *d, enum cw_qtype t)
{
    return d->d_v == DN_NORM_THREADS && d->n_v_head % 2 == 0 && norm_xq_of(t);
}

bool cw_k_deltanet_one_launch(const struct cw_cuda *c, const struct cw_k_deltanet_dims *d)
{
    if (d->d_conv > DN_D1_CONV || d->d_v != DN_NORM_THREADS || d->n_v_head % 2 ||
        c->info.major < 9)
        return false;
    /* its body is compiled for sm_90 on: not where this binary runs PTX of
     * an older one */
    cudaFuncAttributes fa;
    return cudaFuncGetAttributes(&fa, core1_kernel<kt_q4_k, false>) == cudaSuccess &&
           fa.ptxVersion >= 90;
}

int cw_k_deltanet(struct cw_cuda *c, const struct cw_k_deltanet_dims *d,
                  const struct cw_k_deltanet_w *w, float *d_conv_state, float *d_delta_state,
                  unsigned *d_count, int64_t n_tok, const float *d_m, const float *d_z,
                  const float *d_beta_logit, const float *d_alpha, float *d_y,
                  const struct cw_k_xq_out *xq, void *d_scratch, struct cw_err *err)
{
    if (d->n_k_head <= 0 || d->n_v_head <= 0 || d->d_k <= 0 || d->d_v <= 0 || d->d_conv <= 0 ||
        d->n_v_head % d->n_k_head)
        return cw_errf(err, CW_ERR_INVALID, "k_deltanet: bad dims (Hk %d Hv %d dk %d dv %d conv %d)",
                       d->n_k_head, d->n_v_head, d->d_k, d->d_v, d->d_conv);
    if (d->d_k > 32 * DN_MAXR || d->d_conv > DN_MAXCONV)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_deltanet: d_k %d > %d or d_conv %d > %d",
                       d->d_k, 32 * DN_MAXR, d->d_conv, DN_MAXCONV);
    if (n_tok < 0)
        return cw_errf(err, CW_ERR_INVALID, "k_deltanet: n_tok %lld < 0", (long long)n_tok);
    if (xq && (!xq->d_xq || !cw_k_deltanet_xq(d, xq->type)))
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_deltanet: y's Q8_K copy for %s with Hv %d, "
                       "dv %d", cw_qtype_name(xq->type), d->n_v_head, d->d_v);
    if (n_tok == 0)
        return 0;
    dn_args a;
    a.hk = d->n_k_head;
    a.hv = d->n_v_head;
    a.dk = d->d_k;
    a.dv = d->d_v;
    a.nconv = d->d_conv;
    a.eps = d->eps;
    a.C = 2 * (int64_t)a.hk * a.dk + (int64_t)a.hv * a.dv;
    a.n_tok = n_tok;
    a.conv_w = w->d_conv;
    a.dt_bias = w->d_dt_bias;
    a.ssm_a = w->d_ssm_a;
    a.norm = w->d_norm;
    a.conv_state = d_conv_state;
    a.delta = d_delta_state;
    a.m = d_m;
    a.z = d_z;
    a.beta_logit = d_beta_logit;
    a.alpha = d_alpha;
    a.y = d_y;
    a.y_off = xq && xq->x_unread;

    if (d_count && n_tok == 1 && cw_k_deltanet_one_launch(c, d)) {
        CW_CUDA_TRY(err, cw_launch_cluster(c->stream, c->pdl, DF_CLUSTER,
                                           core1_of(xq ? (int)xq->type : -1),
                                           dim3((unsigned)(a.hv / 2 * DF_CLUSTER)),
                                           dim3(DF_THREADS), 0, a, d_count,
                                           (uint8_t *)(xq ? xq->d_xq : NULL)));
        return 0;
    }
    if (d_scratch && dc_fits(d) && n_tok >= DC_MIN_TOK && dc_smem_ok(c, a)) {
        if (dc_run(c, a, d_scratch, err))
            return -1;
    } else {
        const size_t smem = ((size_t)DN_CHUNK * (2 * a.dk + DN_COLS) + 2 * DN_CHUNK) * sizeof(float);
        const dim3 grid1((unsigned)a.hv, (unsigned)((a.dv + DN_COLS - 1) / DN_COLS));
        void (*k)(dn_args) = n_tok == 1 && a.nconv <= DN_D1_CONV ? recur_kernel<true>
                                                                 : recur_kernel<false>;
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, k, grid1, dim3(DN_WARPS * 32), smem, a));
    }
    const int64_t n_rows = n_tok * a.hv;
    const int64_t n_conv_blocks = (a.C + DN_NORM_THREADS - 1) / DN_NORM_THREADS;
    if (n_rows + n_conv_blocks > 0x7fffffff)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_deltanet: %lld tokens is too many for one launch",
                       (long long)n_tok);
    if (xq) {
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, norm_xq_of(xq->type),
                                   dim3((unsigned)(n_rows / 2 + n_conv_blocks)),
                                   dim3(2 * DN_NORM_THREADS), 0, a, (uint8_t *)xq->d_xq));
        return 0;
    }
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, norm_kernel,
                               dim3((unsigned)(n_rows + n_conv_blocks)), dim3(DN_NORM_THREADS), 0,
                               a));
    return 0;
}

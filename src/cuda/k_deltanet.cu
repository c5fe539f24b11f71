/* k_deltanet.cu — the Gated DeltaNet layer core on the GPU (kernels.h:
 * cw_k_deltanet): gates, causal depthwise conv + SiLU, q/k L2 norm, the
 * delta-rule recurrence and the gated RMSNorm, for n_tok tokens of one
 * sequence, in two launches. The projections around it are cw_k_matmul's.
 *
 * recur_kernel: one block per (v-head, slice of DN_COLS state columns). It
 *   loads its columns of S into registers once, then walks the tokens in
 *   chunks of DN_CHUNK: the conv + SiLU of the channels it needs (q and k of
 *   its k-head, v of its columns) and the L2 norms are staged in shared
 *   memory for the whole chunk, then each warp runs the recurrence on its own
 *   columns token by token (no barrier per token). It reads the conv state
 *   but never writes it: other blocks read the same channels. The raw o goes
 *   to y.
 * norm_kernel: the gated RMSNorm of every (token, head) row of y in place,
 *   and the conv-state shift (after recur_kernel, by stream order).
 *
 * Determinism: every value a token produces is computed by the same thread
 * mapping and reduction order whatever the chunk, slice or n_tok, so n
 * tokens in one call and n single-token calls give bit-identical outputs
 * and state. */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels.h"

#define DN_WARPS 4                         // warps per block
#define DN_CPW 8                           // state columns per warp (ILP across columns)
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
};

static __device__ __forceinline__ float dn_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

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

static __global__ void __launch_bounds__(DN_WARPS * 32) recur_kernel(dn_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    extern __shared__ float sm[];
    const int h = blockIdx.x, kh = h % a.hk; // tiled v -> k head mapping (GGUF order)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int j0 = blockIdx.y * DN_COLS;     // first state column of this block
    const int dk = a.dk, dv = a.dv;
    const int n_ch = 2 * dk + DN_COLS;       // staged channels per token: q | k | v slice
    float *s_u = sm;                         // [DN_CHUNK][n_ch]
    float *s_b = sm + DN_CHUNK * n_ch;       // [DN_CHUNK] beta
    float *s_d = s_b + DN_CHUNK;             // [DN_CHUNK] decay e^g

    // This warp's columns of S (S_h[i][j] at j*dk + i), key i = lane + 32 r.
    float S[DN_CPW][DN_MAXR];
    float *Sh = a.delta + (int64_t)h * dv * dk;
#pragma unroll
    for (int c = 0; c < DN_CPW; c++) {
        const int j = j0 + warp * DN_CPW + c;
#pragma unroll
        for (int r = 0; r < DN_MAXR; r++) {
            const int i = lane + 32 * r;
            S[c][r] = (j < dv && i < dk) ? Sh[(int64_t)j * dk + i] : 0.0f;
        }
    }
    const float scale = 1.0f / sqrtf((float)dk);
    const int64_t q_ch = (int64_t)kh * dk, k_ch = (int64_t)a.hk * dk + (int64_t)kh * dk;
    const int64_t v_ch = 2 * (int64_t)a.hk * dk + (int64_t)h * dv + j0;

    for (int64_t t0 = 0; t0 < a.n_tok; t0 += DN_CHUNK) {
        const int nt = (int)min((int64_t)DN_CHUNK, a.n_tok - t0);
        // 1. conv + SiLU of the staged channels, and the gates.
        for (int idx = threadIdx.x; idx < nt * n_ch; idx += blockDim.x) {
            const int tt = idx / n_ch, ci = idx - tt * n_ch;
            int64_t c;
            if (ci < dk)
                c = q_ch + ci;
            else if (ci < 2 * dk)
                c = k_ch + (ci - dk);
            else if (j0 + (ci - 2 * dk) < dv)
                c = v_ch + (ci - 2 * dk);
            else
                continue; // a column past dv: never read
            s_u[tt * n_ch + ci] = dn_conv(a, c, t0 + tt);
        }
        for (int tt = threadIdx.x; tt < nt; tt += blockDim.x) {
            const int64_t r = (t0 + tt) * a.hv + h;
            s_b[tt] = dn_sigmoid(a.beta_logit[r]);
            const float x = a.alpha[r] + a.dt_bias[h];
            const float sp = x > 20.0f ? x : logf(1.0f + expf(x)); // softplus as the CPU
            s_d[tt] = expf(sp * a.ssm_a[h]);
        }
        __syncthreads(); // staged conv outputs complete before the norms read them
        // 2. L2 norm of each q and k row (one warp per row, fixed order), as
        //    the CPU: RMSNorm with eps/dk, then the 1/sqrt(dk) scale.
        for (int row = warp; row < 2 * nt; row += DN_WARPS) {
            float *x = s_u + (row >> 1) * n_ch + (row & 1) * dk;
            float ss = 0.0f;
#pragma unroll
            for (int r = 0; r < DN_MAXR; r++) {
                const int i = lane + 32 * r;
                if (i < dk)
                    ss = fmaf(x[i], x[i], ss);
            }
            ss = cw_warp_sum(ss);
            const float fn = (float)dk;
            const float s = 1.0f / sqrtf(ss / fn + a.eps / fn);
            const float s2 = 1.0f / sqrtf(fn);
#pragma unroll
            for (int r = 0; r < DN_MAXR; r++) {
                const int i = lane + 32 * r;
                if (i < dk)
                    x[i] = x[i] * s * s2;
            }
        }
        __syncthreads(); // normed q̂/k̂ visible to every warp
        // 3. the recurrence, token by token; each warp owns its columns, so
        //    no barrier is needed between tokens.
        for (int tt = 0; tt < nt; tt++) {
            const float *u = s_u + tt * n_ch;
            float q[DN_MAXR], k[DN_MAXR];
#pragma unroll
            for (int r = 0; r < DN_MAXR; r++) {
                const int i = lane + 32 * r;
                q[r] = i < dk ? u[i] : 0.0f;
                k[r] = i < dk ? u[dk + i] : 0.0f;
            }
            const float b = s_b[tt], decay = s_d[tt];
            float acc[DN_CPW];
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
                const int jl = warp * DN_CPW + c;
                const float vj = j0 + jl < dv ? u[2 * dk + jl] : 0.0f;
                const float delta = (vj - acc[c]) * b;
                acc[c] = 0.0f;
#pragma unroll
                for (int r = 0; r < DN_MAXR; r++) {
                    S[c][r] = fmaf(k[r], delta, S[c][r]);
                    acc[c] = fmaf(S[c][r], q[r], acc[c]);
                }
            }
            dn_warp_sums(acc); // o_j = Σ_i S[i][j] q̂_i
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
#pragma unroll
    for (int c = 0; c < DN_CPW; c++) {
        const int j = j0 + warp * DN_CPW + c;
#pragma unroll
        for (int r = 0; r < DN_MAXR; r++) {
            const int i = lane + 32 * r;
            if (j < dv && i < dk)
                Sh[(int64_t)j * dk + i] = S[c][r];
        }
    }
}

/* Blocks [0, n_tok*Hv): y_row = RMSNorm(o_row; norm) ⊙ silu(z_row) in place.
 * Blocks after those: the conv-state shift of DN_NORM_THREADS channels each. */
static __global__ void __launch_bounds__(DN_NORM_THREADS) norm_kernel(dn_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    __shared__ float s_part[DN_NORM_THREADS / 32];
    const int64_t n_rows = a.n_tok * a.hv;
    if ((int64_t)blockIdx.x >= n_rows) {
        const int ns = a.nconv - 1;
        const int64_t c = ((int64_t)blockIdx.x - n_rows) * DN_NORM_THREADS + threadIdx.x;
        if (c >= a.C || ns == 0)
            return;
        // The last ns inputs of [state | m]: read all before writing any.
        float keep[DN_MAXCONV];
        for (int k = 0; k < ns; k++)
            keep[k] = dn_conv_in(a, c, a.n_tok - ns + k);
        for (int k = 0; k < ns; k++)
            a.conv_state[c * ns + k] = keep[k];
        return;
    }
    const int dv = a.dv;
    float *o = a.y + (int64_t)blockIdx.x * dv;
    const float *z = a.z + (int64_t)blockIdx.x * dv;
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
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        o[i] = o[i] * s * a.norm[i] * dn_silu(z[i]);
}

int cw_k_deltanet(struct cw_cuda *c, const struct cw_k_deltanet_dims *d,
                  const struct cw_k_deltanet_w *w, float *d_conv_state, float *d_delta_state,
                  int64_t n_tok, const float *d_m, const float *d_z, const float *d_beta_logit,
                  const float *d_alpha, float *d_y, struct cw_err *err)
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

    const size_t smem = ((size_t)DN_CHUNK * (2 * a.dk + DN_COLS) + 2 * DN_CHUNK) * sizeof(float);
    const dim3 grid1((unsigned)a.hv, (unsigned)((a.dv + DN_COLS - 1) / DN_COLS));
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, recur_kernel, grid1, dim3(DN_WARPS * 32), smem,
                               a));
    const int64_t n_rows = n_tok * a.hv;
    const int64_t n_conv_blocks = (a.C + DN_NORM_THREADS - 1) / DN_NORM_THREADS;
    if (n_rows + n_conv_blocks > 0x7fffffff)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_deltanet: %lld tokens is too many for one launch",
                       (long long)n_tok);
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, norm_kernel,
                               dim3((unsigned)(n_rows + n_conv_blocks)), dim3(DN_NORM_THREADS), 0,
                               a));
    return 0;
}

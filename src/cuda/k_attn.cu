/* k_attn.cu — the gated full-attention core on the GPU (kernels.h: cw_k_attn,
 * cw_k_attn_scratch): q/k RMSNorm, partial IMROPE, K/V appended to the f16
 * cache, causal GQA softmax attention and the sigmoid output gate.
 *
 * prep_kernel: one block per (token, head row): norm, rope, then q̂ to
 *   scratch (f32) or K/V to cache row pos (f16). Positions are read from
 *   device memory, so the launches can be replayed in a CUDA graph; the
 *   host uploads them before the launches, so every kernel reads them
 *   before its PDL wait, with what else it can (prep the norm weights,
 *   combine the gate, the projection's output two launches back).
 * Attention splits the keys 0..pos of a query at position pos into chunks
 *   of at_chunk_len(pos) keys (at most AT_NC chunks, a multiple of AT_TILE,
 *   or of AT_SHORT_KEYS at short contexts):
 *   a chunk's partial (max m, sum l, Σ p·V) comes from chunk_partial(), a
 *   loop over tiles of AT_TILE keys, and partials fold in chunk order with
 *   fold(). Two schedules run that same arithmetic:
 *   - split (n_tok <= AT_SPLIT_MAX): one block per (chunk, kv head, token),
 *     at short contexts per (chunk, share of the kv head's query heads),
 *     partials to scratch, then combine_kernel folds them: many blocks for
 *     one decode token (flash-decoding);
 *   - loop (prefill): one block per (token, kv head) folding its chunks
 *     itself, no partials in scratch.
 *   The grid of either depends on n_ctx and n_tok, never on the position;
 *   blocks past a query's last chunk return at once. Since the chunking is a
 *   function of the query's own position and the arithmetic per chunk is the
 *   same code with the same thread mapping, a token's output is bit-identical
 *   whatever the schedule and however many tokens share the call.
 *
 * Precision: f32 scores and accumulation; K/V rounded to f16 when stored.
 * The q/k norms sum squares in double and the rope angles follow the CPU's
 * f32 recurrence with the host's powf for the ratio, cos/sin from double and
 * rounded once, so q̂ and K usually match the CPU bit for bit.
 *
 * Scratch: [int32 flag | pad to 256 B][q̂ n_tok*H*hd f32][split partials:
 * m,l n_tok*H*AT_NC*2, o n_tok*H*AT_NC*hd]. The flag is set to 1 when a
 * position falls outside [0, n_ctx) (nothing is written for that token). */
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "cuda/kernels.h"

#define AT_THREADS 128    // per block, every kernel
#define AT_TILE 128       // keys per tile = one key per thread in the score phase
#define AT_NC 256         // most chunks per query
#define AT_SPLIT_MAX 4    // largest n_tok that takes the split schedule
#define AT_MAX_HD 256     // head_dim limit (two dims per thread in Σ p·V)
#define AT_FLAG_BYTES 256 // the error flag, padded to keep what follows aligned

struct at_args {
    int H, Hkv, hd, n_rot;
    int sec[4];
    float eps, theta_scale, scale;
    int64_t n_ctx, n_tok;
    const int64_t *pos0;
    const float *q_norm, *k_norm;
    __half *kc, *vc;
    const float *P, *k, *v;
    float *out;
    int *flag;
    float *qbuf;      // [n_tok][H][hd]
    float *part_ml;   // [n_tok][H][AT_NC][2]
    float *part_o;    // [n_tok][H][AT_NC][hd]
};

/* Keys per chunk for a query at position pos: the fewest whole tiles that
 * cover pos+1 keys in at most AT_NC chunks; below AT_SHORT_NC·AT_TILE keys,
 * where that is one tile, a multiple of AT_SHORT_KEYS that makes up to
 * AT_SHORT_NC chunks instead, so that a short context's decode spreads
 * over that many split blocks per kv head, not one. */
#define AT_SHORT_NC 4
#define AT_SHORT_KEYS 32
static __device__ __forceinline__ int64_t at_chunk_len(int64_t pos)
{
    const int64_t per = (pos + AT_NC) / AT_NC; // ceil((pos+1)/AT_NC)
    const int64_t L = (per + AT_TILE - 1) / AT_TILE * AT_TILE;
    if (L > AT_TILE)
        return L;
    const int64_t q = (pos + AT_SHORT_NC) / AT_SHORT_NC; // ceil((pos+1)/AT_SHORT_NC)
    const int64_t s = (q + AT_SHORT_KEYS - 1) / AT_SHORT_KEYS * AT_SHORT_KEYS;
    return s < AT_TILE ? s : AT_TILE;
}

/* ---- prep: norm, rope, store ------------------------------------------- */

static __global__ void __launch_bounds__(AT_THREADS) prep_kernel(at_args a)
{
    __shared__ float x[AT_MAX_HD];
    __shared__ double part[AT_THREADS / 32];
    const int64_t t = blockIdx.x;
    const int head = blockIdx.y;
    const int hd = a.hd, tid = threadIdx.x;
    const bool is_q = head < a.H;
    /* before the wait: the position (uploaded by the host before the
     * launches) and this thread's two norm weights (hd <= 2 AT_THREADS) */
    const int64_t pos0 = *a.pos0, pos = pos0 + t;
    const float *w = is_q ? a.q_norm : a.k_norm;
    const float w0 = tid < hd ? w[tid] : 0.0f, w1 = tid + AT_THREADS < hd ? w[tid + AT_THREADS] : 0.0f;
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    if (tid == 0 && head == 0 && t == 0) /* the call's flag, set here (no memset launch) */
        *a.flag = pos0 < 0 || pos0 + a.n_tok > a.n_ctx;
    if (pos < 0 || pos >= a.n_ctx)
        return;
    const int kvh = head - a.H;
    const float *src = is_q ? a.P + t * 2 * a.H * hd + (int64_t)head * 2 * hd
                            : a.k + t * a.Hkv * hd + (int64_t)kvh * hd;
    // RMSNorm as the CPU: squares in f32, summed in double, mean rounded to f32.
    double ss = 0.0;
    for (int i = tid; i < hd; i += AT_THREADS) {
        const float xi = src[i];
        x[i] = xi;
        ss += (double)__fmul_rn(xi, xi);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((tid & 31) == 0)
        part[tid >> 5] = ss;
    __syncthreads(); // partial sums in shared memory
    double tot = 0.0;
    for (int i = 0; i < AT_THREADS / 32; i++)
        tot += part[i];
    const float mean = (float)(tot / (double)hd);
    const float s = 1.0f / sqrtf(mean + a.eps);
    for (int i = tid; i < hd; i += AT_THREADS)
        x[i] = __fmul_rn(__fmul_rn(x[i], s), i == tid ? w0 : w1);
    __syncthreads(); // normed row complete before pairs rotate
    // RoPE: pair i takes the angle pos·s^i formed by i f32 multiplications
    // (the CPU's recurrence), section rule of IMROPE with text positions
    // {pos, pos, pos, 0}.
    const int half = a.n_rot / 2;
    const int sect = a.sec[0] + a.sec[1] + a.sec[2] + a.sec[3];
    for (int i = tid; i < half; i += AT_THREADS) {
        const int sector = i % sect;
        int comp = 3;
        if (sector % 3 == 1 && sector < 3 * a.sec[1])
            comp = 1;
        else if (sector % 3 == 2 && sector < 3 * a.sec[2])
            comp = 2;
        else if (sector % 3 == 0 && sector < 3 * a.sec[0])
            comp = 0;
        float th = comp == 3 ? 0.0f : (float)pos;
        for (int k = 0; k < i; k++)
            th = __fmul_rn(th, a.theta_scale);
        double sd, cd;
        sincos((double)th, &sd, &cd); // rounded once: the correctly rounded f32 cos/sin
        const float cs = (float)cd, sn = (float)sd;
        const float x0 = x[i], x1 = x[i + half];
        x[i] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
        x[i + half] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
    __syncthreads(); // rotated row complete before it is stored
    if (is_q) {
        float *dst = a.qbuf + (t * a.H + head) * hd;
        for (int i = tid; i < hd; i += AT_THREADS)
            dst[i] = x[i];
    } else {
        const int64_t row = (pos * a.Hkv + kvh) * hd;
        const float *vs = a.v + t * a.Hkv * hd + (int64_t)kvh * hd;
        for (int i = tid; i < hd; i += AT_THREADS) {
            a.kc[row + i] = __float2half_rn(x[i]);
            a.vc[row + i] = __float2half_rn(vs[i]);
        }
    }
}

/* ---- one chunk's partial ----------------------------------------------- */

/* Running softmax state of G query heads; thread tid holds output dims
 * 2*tid, 2*tid+1 (when < hd). */
template <int G> struct at_acc {
    float m[G], l[G];
    float o[G][2];
};

template <int G> struct __align__(16) at_smem {
    float q[G][AT_MAX_HD];
    float p[G][AT_TILE];
    float red[G][AT_THREADS / 32];
};

/* Folds partial (m2, l2, o2) into (m, l, o): the one formula both schedules
 * use, written with explicit fmaf so that its rounding is fixed. */
static __device__ __forceinline__ void fold1(float &m, float &l, float *o, float m2, float l2,
                                             const float *o2)
{
    const float mn = fmaxf(m, m2);
    const float ea = expf(m - mn), eb = expf(m2 - mn);
    l = fmaf(l, ea, __fmul_rn(l2, eb));
    o[0] = fmaf(o[0], ea, __fmul_rn(o2[0], eb));
    o[1] = fmaf(o[1], ea, __fmul_rn(o2[1], eb));
    m = mn;
}

/* Block-wide reduction of G values per thread: warp butterfly, then the
 * warps' results in index order (every thread gets the same answer). */
template <int G, bool MAX>
static __device__ __forceinline__ void block_reduce(float (&v)[G], float (&red)[G][AT_THREADS / 32])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float u = __shfl_xor_sync(0xffffffffu, v[g], o);
            v[g] = MAX ? fmaxf(v[g], u) : v[g] + u;
        }
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; g++)
            red[g][warp] = v[g];
    __syncthreads(); // every warp's result written
#pragma unroll
    for (int g = 0; g < G; g++) {
        float r = red[g][0];
        for (int w = 1; w < AT_THREADS / 32; w++)
            r = MAX ? fmaxf(r, red[g][w]) : r + red[g][w];
        v[g] = r;
    }
    __syncthreads(); // red is free again
}

/* Softmax partial of the G heads of kv head kvh over keys [k0, k1), from
 * (-inf, 0, 0): tiles of AT_TILE keys, a quad of lanes per key for the
 * scores, then one key per thread for the softmax and two output dims per
 * thread for Σ p·V. sm.q holds the G rows of q̂. */
template <int G>
static __device__ void chunk_partial(const at_args &a, int kvh, int64_t k0, int64_t k1,
                                     at_smem<G> &sm, at_acc<G> &acc)
{
    const int tid = threadIdx.x, hd = a.hd;
    const int64_t row = (int64_t)a.Hkv * hd; // halves per cache row
#pragma unroll
    for (int g = 0; g < G; g++) {
        acc.m[g] = -INFINITY;
        acc.l[g] = 0.0f;
        acc.o[g][0] = acc.o[g][1] = 0.0f;
    }
    for (int64_t t0 = k0; t0 < k1; t0 += AT_TILE) {
        // Scores: a quad of lanes per key (8 keys per warp and step), lane
        // ql of the quad takes the 8-dim runs ql, ql+4, ... (16-byte loads,
        // a quad reads 64 contiguous bytes of the row and of q̂), then two
        // butterfly steps; the scaled scores go through sm.p. A few keys
        // (short contexts) cost one step, not a thread's pass over all dims.
        {
            const int warp = tid >> 5, lane = tid & 31, ql = lane & 3;
            const unsigned quad = 0xFu << (lane & ~3);
            for (int kb = warp * 8; kb < AT_TILE && t0 + kb < k1; kb += AT_THREADS / 4) {
                const int kl = kb + (lane >> 2);
                if (t0 + kl >= k1)
                    continue; // the whole quad: its shuffles stay within it
                const uint4 *kr = (const uint4 *)(a.kc + (t0 + kl) * row + (int64_t)kvh * hd);
                float s[G];
#pragma unroll
                for (int g = 0; g < G; g++)
                    s[g] = 0.0f;
                for (int c0 = ql; c0 < hd / 8; c0 += 16) {
                    uint4 raw[4];
#pragma unroll
                    for (int u = 0; u < 4; u++)
                        raw[u] = c0 + 4 * u < hd / 8 ? kr[c0 + 4 * u] : make_uint4(0, 0, 0, 0);
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        if (c0 + 4 * u >= hd / 8)
                            break;
                        const __half2 *h2 = (const __half2 *)&raw[u];
                        float kf[8];
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float2 f = __half22float2(h2[e]);
                            kf[2 * e] = f.x;
                            kf[2 * e + 1] = f.y;
                        }
                        const int d = (c0 + 4 * u) * 8;
#pragma unroll
                        for (int g = 0; g < G; g++) {
                            const float4 qa = *(const float4 *)&sm.q[g][d];
                            const float4 qb = *(const float4 *)&sm.q[g][d + 4];
                            s[g] = fmaf(qa.x, kf[0], s[g]);
                            s[g] = fmaf(qa.y, kf[1], s[g]);
                            s[g] = fmaf(qa.z, kf[2], s[g]);
                            s[g] = fmaf(qa.w, kf[3], s[g]);
                            s[g] = fmaf(qb.x, kf[4], s[g]);
                            s[g] = fmaf(qb.y, kf[5], s[g]);
                            s[g] = fmaf(qb.z, kf[6], s[g]);
                            s[g] = fmaf(qb.w, kf[7], s[g]);
                        }
                    }
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    s[g] += __shfl_xor_sync(quad, s[g], 1);
                    s[g] += __shfl_xor_sync(quad, s[g], 2);
                    if ((g & 3) == ql)
                        sm.p[g][kl] = __fmul_rn(s[g], a.scale);
                }
            }
        }
        __syncthreads(); // the tile's scores in sm.p
        const int64_t key = t0 + tid;
        const bool valid = key < k1;
        float s[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g] = valid ? sm.p[g][tid] : 0.0f;
        float mx[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            mx[g] = valid ? s[g] : -INFINITY;
        block_reduce<G, true>(mx, sm.red);
        float ps[G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float mn = fmaxf(acc.m[g], mx[g]);
            ps[g] = valid ? expf(s[g] - mn) : 0.0f;
            sm.p[g][tid] = ps[g];
            const float ea = expf(acc.m[g] - mn);
            acc.l[g] = __fmul_rn(acc.l[g], ea);
            acc.o[g][0] = __fmul_rn(acc.o[g][0], ea);
            acc.o[g][1] = __fmul_rn(acc.o[g][1], ea);
            acc.m[g] = mn;
        }
        block_reduce<G, false>(ps, sm.red); // also orders the sm.p writes before the reads below
#pragma unroll
        for (int g = 0; g < G; g++)
            acc.l[g] = __fadd_rn(acc.l[g], ps[g]);
        // Σ p·V over the tile's keys in order.
        const int n = (int)min((int64_t)AT_TILE, k1 - t0);
        if (2 * tid < hd) {
            const __half2 *vr = (const __half2 *)(a.vc + t0 * row + (int64_t)kvh * hd) + tid;
            const int64_t step = row / 2;
            int j = 0;
            for (; j + 8 <= n; j += 8) {
                __half2 vv[8];
#pragma unroll
                for (int u = 0; u < 8; u++)
                    vv[u] = vr[(j + u) * step];
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const float2 f = __half22float2(vv[u]);
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        const float p = sm.p[g][j + u];
                        acc.o[g][0] = fmaf(p, f.x, acc.o[g][0]);
                        acc.o[g][1] = fmaf(p, f.y, acc.o[g][1]);
                    }
                }
            }
            for (; j < n; j++) {
                const float2 f = __half22float2(vr[j * step]);
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float p = sm.p[g][j];
                    acc.o[g][0] = fmaf(p, f.x, acc.o[g][0]);
                    acc.o[g][1] = fmaf(p, f.y, acc.o[g][1]);
                }
            }
        }
        __syncthreads(); // sm.p read by all before the next tile writes it
    }
}

/* The G rows of q̂ of heads h0 .. h0+G-1 of token t into sm.q. */
template <int G> static __device__ void load_q(const at_args &a, int64_t t, int h0, at_smem<G> &sm)
{
    for (int i = threadIdx.x; i < G * a.hd; i += AT_THREADS) {
        const int g = i / a.hd, d = i - g * a.hd;
        sm.q[g][d] = a.qbuf[(t * a.H + (int64_t)h0 + g) * a.hd + d];
    }
    __syncthreads(); // q̂ rows complete before the score loop
}

/* The output gate's logits for dims 2*tid, 2*tid+1 of head h of token t
 * (2*tid < hd). */
static __device__ __forceinline__ void load_gate(const at_args &a, int64_t t, int h, float *g)
{
    const float *gate = a.P + t * 2 * a.H * a.hd + (int64_t)h * 2 * a.hd + a.hd;
    g[0] = gate[2 * threadIdx.x];
    g[1] = gate[2 * threadIdx.x + 1];
}

/* out = o / l ⊙ σ(g) for dims 2*tid, 2*tid+1 of head h of token t, g
 * load_gate's. */
static __device__ __forceinline__ void write_out(const at_args &a, int64_t t, int h, float l,
                                                 const float *o, const float *g)
{
    const int d = 2 * threadIdx.x;
    const float inv = 1.0f / l;
    float *dst = a.out + (t * a.H + h) * a.hd;
#pragma unroll
    for (int e = 0; e < 2; e++)
        dst[d + e] = __fmul_rn(__fmul_rn(o[e], inv), cw_dev_sigmoid(g[e]));
}

/* ---- the split schedule ------------------------------------------------ */

/* One chunk's partial of the GS heads h0.. of kv head kvh to scratch. */
template <int GS>
static __device__ __forceinline__ void split_chunk(const at_args &a, int64_t t, int kvh, int h0,
                                                   int c, int64_t k0, int64_t k1, at_smem<GS> &sm)
{
    load_q<GS>(a, t, h0, sm);
    at_acc<GS> acc;
    chunk_partial<GS>(a, kvh, k0, k1, sm, acc);
#pragma unroll
    for (int g = 0; g < GS; g++) {
        const int64_t slot = (t * a.H + (int64_t)h0 + g) * AT_NC + c;
        if (threadIdx.x == 0) {
            a.part_ml[slot * 2] = acc.m[g];
            a.part_ml[slot * 2 + 1] = acc.l[g];
        }
        if (2 * threadIdx.x < a.hd) {
            a.part_o[slot * a.hd + 2 * threadIdx.x] = acc.o[g][0];
            a.part_o[slot * a.hd + 2 * threadIdx.x + 1] = acc.o[g][1];
        }
    }
}

/* Heads per split block at short contexts: 2 where G is even (H200 35B
 * decode, G = 8: 451-454 tok/s with all 8 -> 461-463 with 2 or 1;
 * 27B, G = 6: 141.5 -> 142.4 with 2), else 1. */
static constexpr int at_short_gs(int G)
{
    return G % 2 == 0 && G > 2 ? 2 : 1;
}

/* Block x of kv head kvh: chunk x with all G heads; at short contexts
 * (at most AT_SHORT_NC chunks) chunk x % AT_SHORT_NC with the GS heads of
 * share x / AT_SHORT_NC instead, so that a few chunks still spread over
 * G/GS times the blocks. A head's arithmetic does not depend on how many
 * heads share its block, so the bits are the same. */
template <int G, int GS>
static __global__ void __launch_bounds__(AT_THREADS) split_kernel(at_args a)
{
    static_assert(G % GS == 0 && AT_SHORT_NC * (G / GS) <= AT_NC, "head shares");
    __shared__ at_smem<G> sm;
    const int kvh = blockIdx.y;
    const int64_t t = blockIdx.z;
    const int64_t pos = *a.pos0 + t; /* uploaded before the launches: read before the wait */
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    if (pos < 0 || pos >= a.n_ctx)
        return;
    const int64_t L = at_chunk_len(pos);
    const bool share = GS < G && pos < AT_SHORT_NC * L; /* at most AT_SHORT_NC chunks */
    const int c = share ? (int)blockIdx.x % AT_SHORT_NC : (int)blockIdx.x;
    const int part = share ? (int)blockIdx.x / AT_SHORT_NC : 0;
    const int64_t k0 = (int64_t)c * L;
    if (k0 > pos || part >= (share ? G / GS : 1))
        return; // past this query's last chunk, or its last share
    const int64_t k1 = min(k0 + L, pos + 1);
    if (share) /* at_smem<GS> is a prefix-sized view of at_smem<G> */
        split_chunk<GS>(a, t, kvh, kvh * G + part * GS, c, k0, k1,
                        *reinterpret_cast<at_smem<GS> *>(&sm));
    else
        split_chunk<G>(a, t, kvh, kvh * G, c, k0, k1, sm);
}

/* One block per (head, token): folds the chunks' partials in chunk order. */
static __global__ void __launch_bounds__(AT_THREADS) combine_kernel(at_args a)
{
    const int h = blockIdx.x;
    const int64_t t = blockIdx.y;
    /* before the wait: the position (uploaded before the launches) and the
     * gate (the projection's, two launches back) */
    const int64_t pos = *a.pos0 + t;
    const bool on = 2 * (int)threadIdx.x < a.hd;
    float g[2] = {0.0f, 0.0f};
    if (on)
        load_gate(a, t, h, g);
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    if (pos < 0 || pos >= a.n_ctx || !on)
        return;
    const int64_t L = at_chunk_len(pos);
    const int64_t n_ch = pos / L + 1;
    float m = -INFINITY, l = 0.0f, o[2] = {0.0f, 0.0f};
    const int64_t base = (t * a.H + h) * AT_NC;
    for (int64_t c = 0; c < n_ch; c++) {
        const float *po = a.part_o + (base + c) * a.hd + 2 * threadIdx.x;
        const float o2[2] = {po[0], po[1]};
        fold1(m, l, o, a.part_ml[(base + c) * 2], a.part_ml[(base + c) * 2 + 1], o2);
    }
    write_out(a, t, h, l, o, g);
}

/* ---- the loop schedule ------------------------------------------------- */

template <int G> static __global__ void __launch_bounds__(AT_THREADS) loop_kernel(at_args a)
{
    cw_pdl_wait();
    cw_pdl_launch_dependents();
    __shared__ at_smem<G> sm;
    const int64_t t = blockIdx.x;
    const int kvh = blockIdx.y;
    const int64_t pos = *a.pos0 + t;
    if (pos < 0 || pos >= a.n_ctx)
        return;
    const int64_t L = at_chunk_len(pos);
    load_q<G>(a, t, kvh * G, sm);
    float m[G], l[G], o[G][2];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        o[g][0] = o[g][1] = 0.0f;
    }
    for (int64_t k0 = 0; k0 <= pos; k0 += L) {
        at_acc<G> acc;
        chunk_partial<G>(a, kvh, k0, min(k0 + L, pos + 1), sm, acc);
#pragma unroll
        for (int g = 0; g < G; g++)
            fold1(m[g], l[g], o[g], acc.m[g], acc.l[g], acc.o[g]);
    }
    if (2 * (int)threadIdx.x < a.hd)
#pragma unroll
        for (int g = 0; g < G; g++) {
            float gl[2];
            load_gate(a, t, kvh * G + g, gl);
            write_out(a, t, kvh * G + g, l[g], o[g], gl);
        }
}

/* ---- launcher ---------------------------------------------------------- */

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

size_t cw_k_attn_scratch(const struct cw_k_attn_dims *d, int64_t n_tok, int64_t n_ctx)
{
    (void)n_ctx; // the chunk count is fixed (AT_NC), whatever the context
    const size_t q = (size_t)n_tok * d->n_head * d->head_dim * sizeof(float);
    // Partials for up to AT_SPLIT_MAX tokens whatever n_tok, so that the
    // size for n_tok serves every call of at most n_tok tokens.
    const size_t slots = (size_t)(n_tok < AT_SPLIT_MAX ? n_tok : AT_SPLIT_MAX) * d->n_head * AT_NC;
    return AT_FLAG_BYTES + align256(q) + align256(slots * 2 * sizeof(float)) +
           align256(slots * d->head_dim * sizeof(float));
}

template <int G> static int launch(struct cw_cuda *c, const at_args &a, struct cw_err *err)
{
    if (a.n_tok <= AT_SPLIT_MAX) {
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, split_kernel<G, at_short_gs(G)>,
                                   dim3(AT_NC, a.Hkv, (unsigned)a.n_tok), dim3(AT_THREADS), 0, a));
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, combine_kernel,
                                   dim3(a.H, (unsigned)a.n_tok), dim3(AT_THREADS), 0, a));
    } else {
        CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, loop_kernel<G>,
                                   dim3((unsigned)a.n_tok, a.Hkv), dim3(AT_THREADS), 0, a));
    }
    return 0;
}

int cw_k_attn(struct cw_cuda *c, const struct cw_k_attn_dims *d, const float *d_q_norm,
              const float *d_k_norm, cw_f16 *d_k_cache, cw_f16 *d_v_cache, int64_t n_ctx,
              const int64_t *d_pos0, int64_t n_tok, const float *d_P, const float *d_k,
              const float *d_v, float *d_out, void *d_scratch, struct cw_err *err)
{
    const int *sec = d->sections;
    if (d->n_head <= 0 || d->n_head_kv <= 0 || d->head_dim <= 0 || d->n_head % d->n_head_kv)
        return cw_errf(err, CW_ERR_INVALID, "k_attn: bad heads (H %d Hkv %d hd %d)", d->n_head,
                       d->n_head_kv, d->head_dim);
    if (d->n_rot <= 0 || d->n_rot % 2 || d->n_rot > d->head_dim ||
        sec[0] + sec[1] + sec[2] + sec[3] <= 0)
        return cw_errf(err, CW_ERR_INVALID, "k_attn: bad rope (n_rot %d, head_dim %d)", d->n_rot,
                       d->head_dim);
    // 16-byte K loads need rows and heads on 16-byte boundaries.
    if (d->head_dim % 8 || d->head_dim > AT_MAX_HD || ((uintptr_t)d_k_cache & 15))
        return cw_errf(err, CW_ERR_UNSUPPORTED,
                       "k_attn: head_dim %d must be a multiple of 8 up to %d, the cache 16-byte aligned",
                       d->head_dim, AT_MAX_HD);
    if (n_tok < 0 || n_ctx <= 0 || n_tok > 0x7fffffff)
        return cw_errf(err, CW_ERR_INVALID, "k_attn: n_tok %lld, n_ctx %lld", (long long)n_tok,
                       (long long)n_ctx);
    at_args a;
    a.H = d->n_head;
    a.Hkv = d->n_head_kv;
    a.hd = d->head_dim;
    a.n_rot = d->n_rot;
    for (int i = 0; i < 4; i++)
        a.sec[i] = sec[i];
    a.eps = d->eps;
    // The host's powf, as the CPU reference computes the same ratio.
    a.theta_scale = powf(d->freq_base, -2.0f / (float)d->n_rot);
    a.scale = 1.0f / sqrtf((float)d->head_dim);
    a.n_ctx = n_ctx;
    a.n_tok = n_tok;
    a.pos0 = d_pos0;
    a.q_norm = d_q_norm;
    a.k_norm = d_k_norm;
    a.kc = (__half *)d_k_cache;
    a.vc = (__half *)d_v_cache;
    a.P = d_P;
    a.k = d_k;
    a.v = d_v;
    a.out = d_out;
    char *s = (char *)d_scratch;
    a.flag = (int *)s;
    s += AT_FLAG_BYTES;
    a.qbuf = (float *)s;
    s += align256((size_t)n_tok * a.H * a.hd * sizeof(float));
    const size_t slots = (size_t)n_tok * a.H * AT_NC;
    a.part_ml = (float *)s;
    s += align256(slots * 2 * sizeof(float));
    a.part_o = (float *)s;
    int (*run)(struct cw_cuda *, const at_args &, struct cw_err *) = NULL;
    switch (a.H / a.Hkv) {
    case 1: run = launch<1>; break;
    case 2: run = launch<2>; break;
    case 3: run = launch<3>; break;
    case 4: run = launch<4>; break;
    case 6: run = launch<6>; break;
    case 8: run = launch<8>; break;
    default:
        return cw_errf(err, CW_ERR_UNSUPPORTED, "k_attn: GQA group %d (H %d / Hkv %d) not built",
                       a.H / a.Hkv, a.H, a.Hkv);
    }
    if (n_tok == 0) {
        CW_CUDA_TRY(err, cudaMemsetAsync(a.flag, 0, sizeof(int), c->stream));
        return 0;
    }
    CW_CUDA_TRY(err, cw_launch(c->stream, c->pdl, prep_kernel,
                               dim3((unsigned)n_tok, a.H + a.Hkv), dim3(AT_THREADS), 0, a));
    return run(c, a, err);
}

/* cpu_deltanet.h — one Gated DeltaNet layer on the CPU, between the input
 * projections and ssm_out (qwen36-model.md §3.2, steps 2–8).
 *
 * Owns: β and the log-decay g, the causal depthwise conv + SiLU with its
 * carried state, the q/k L2 norm, the delta-rule recurrence and the gated
 * RMSNorm. The projections (attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out)
 * are matrix products done by the caller. Everything is f32 and token by
 * token, so a prompt of n tokens gives bit-identical outputs and state to n
 * single-token calls, on any number of threads. Nothing allocates: the
 * caller passes scratch.
 *
 * Per-sequence state (zeroed for a new sequence), both f32:
 *   conv  [C][d_conv-1]    the last d_conv-1 raw conv inputs per channel, oldest first
 *   delta [Hv][dv][dk]     S_h[i][j] at h*dv*dk + j*dk + i (key index i contiguous)
 * Channel order of m (C = 2*Hk*dk + Hv*dv): [q: Hk×dk | k: Hk×dk | v: Hv×dv].
 * v-head j reads q/k head j mod Hk (the GGUF's tiled order). */
#ifndef CW_CPU_DELTANET_H
#define CW_CPU_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct cw_deltanet_dims {
    int n_k_head; /* Hk */
    int n_v_head; /* Hv, a multiple of Hk */
    int d_k;      /* key head dim (128) */
    int d_v;      /* value head dim (128) */
    int d_conv;   /* conv taps (4) */
    float eps;    /* RMS / L2 norm epsilon (1e-6) */
};

/* Borrowed f32 weights of one layer. */
struct cw_deltanet_weights {
    const float *conv;    /* [C][d_conv], tap d_conv-1 multiplies the current token */
    const float *dt_bias; /* [Hv] ssm_dt.bias */
    const float *ssm_a;   /* [Hv] −exp(A_log) */
    const float *norm;    /* [dv] ssm_norm, shared by all heads */
};

struct cw_deltanet_state {
    float *conv;  /* [C][d_conv-1] */
    float *delta; /* [Hv][dv][dk] */
};

/* C, the conv channel count. */
int64_t cw_deltanet_channels(const struct cw_deltanet_dims *d);
/* Floats of state per sequence and layer. */
int64_t cw_deltanet_conv_state_floats(const struct cw_deltanet_dims *d);
int64_t cw_deltanet_delta_state_floats(const struct cw_deltanet_dims *d);
/* Floats of scratch cw_deltanet_forward needs (independent of n_tok). */
int64_t cw_deltanet_scratch_floats(const struct cw_deltanet_dims *d);

/* Checks the dims (positive, Hv a multiple of Hk, d_conv >= 1). */
int cw_deltanet_check(const struct cw_deltanet_dims *d, struct cw_err *err);

/* The whole layer core for n_tok tokens of one sequence:
 *   m [n_tok][C]         attn_qkv output          z [n_tok][Hv*dv]  attn_gate output
 *   beta_logit [n_tok][Hv] ssm_beta output        alpha [n_tok][Hv] ssm_alpha output
 *   y [n_tok][Hv*dv]     OUT: input of ssm_out
 * Updates st in place. scratch: cw_deltanet_scratch_floats() floats.
 * Returns 0, or -1 with err set for bad dims. */
int cw_deltanet_forward(const struct cw_deltanet_dims *d, const struct cw_deltanet_weights *w,
                        struct cw_deltanet_state *st, int64_t n_tok, const float *m,
                        const float *z, const float *beta_logit, const float *alpha, float *y,
                        float *scratch, struct cw_err *err);

/* cw_deltanet_forward with each token's v-heads (the delta rule and the
 * gated norm) spread over the pool's threads: the same bits for any pool
 * (NULL: the caller's thread alone). */
struct cw_pool;
int cw_deltanet_forward_pool(struct cw_pool *pool, const struct cw_deltanet_dims *d,
                             const struct cw_deltanet_weights *w, struct cw_deltanet_state *st,
                             int64_t n_tok, const float *m, const float *z,
                             const float *beta_logit, const float *alpha, float *y,
                             float *scratch, struct cw_err *err);

/* ---- the steps, exposed for op-by-op checks (forward calls these) ---- */

/* beta[h] = σ(beta_logit[h]); g[h] = softplus(alpha[h] + dt_bias[h]) * ssm_a[h],
 * for n_tok rows of Hv. */
void cw_deltanet_gates(const struct cw_deltanet_dims *d, const struct cw_deltanet_weights *w,
                       int64_t n_tok, const float *beta_logit, const float *alpha, float *beta,
                       float *g);

/* Causal depthwise conv over [state | m] per channel, then SiLU:
 * u [n_tok][C] OUT. Leaves the last d_conv-1 inputs in conv_state. */
void cw_deltanet_conv(const struct cw_deltanet_dims *d, const float *conv_w, float *conv_state,
                      int64_t n_tok, const float *m, float *u);

/* L2-normalises every q and k head of n_tok rows of u in place. */
void cw_deltanet_l2norm_qk(const struct cw_deltanet_dims *d, int64_t n_tok, float *u);

/* The delta rule over n_tok tokens, u holding q̂ | k̂ | v per row:
 *   S ← e^g S;  r = Sᵀk̂;  δ = β(v − r);  S ← S + k̂ δᵀ;  o = Sᵀq̂ / sqrt(dk)
 * o [n_tok][Hv*dv] OUT; delta state updated in place. */
void cw_deltanet_recur(const struct cw_deltanet_dims *d, float *delta_state, int64_t n_tok,
                       const float *u, const float *g, const float *beta, float *o);

/* The same with the scalar loop (simd 0) or, where the CPU has AVX2 and dk,
 * dv are multiples of 8, the AVX2 one (simd 1): the same bits. */
void cw_deltanet_recur_simd(const struct cw_deltanet_dims *d, float *delta_state, int64_t n_tok,
                            const float *u, const float *g, const float *beta, float *o, int simd);

/* One v-head's delta rule with AVX2 (cpu_deltanet_avx2.c; call only when the
 * CPU has AVX2, dk and dv multiples of 8): S [dv][dk] updated in place, o
 * [dv] = Sᵀq̂·scale after S ← e^g S + k̂ δᵀ, δ = β(v − Sᵀk̂). */
void cw_deltanet_head_avx2(float *S, const float *q, const float *k, const float *v,
                           float decay, float b, float scale, int dk, int dv, float *o);

/* y = RMSNorm(o_h; norm) ⊙ silu(z_h) per head, n_tok rows of Hv*dv. y may alias o. */
void cw_deltanet_gated_norm(const struct cw_deltanet_dims *d, const float *norm, int64_t n_tok,
                            const float *o, const float *z, float *y);

#endif

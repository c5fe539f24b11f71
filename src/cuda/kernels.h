/* kernels.h — the launchers of the CUDA kernels: what cuda_forward.cu
 * sequences and what tests/gpu/ checks against the CPU reference.
 *
 * Plain C (tests include it): every pointer named d_* or documented "device"
 * is device memory; everything is enqueued on c's stream and returns 0, or
 * -1 with err set (bad shape or type, launch failure). No launcher
 * synchronises or allocates: scratch comes from the caller, so that a decode
 * step can be captured in a CUDA graph. Values that change from one decode
 * step to the next (token ids, positions) are read from device memory for
 * the same reason.
 *
 * Layouts follow the CPU backend (cpu_*.h): activations are row-major
 * [n_tok][width] f32; a weight matrix is n_out rows of n_in elements in its
 * GGUF block type, row r at W + r*row_bytes; expert e of a stacked tensor
 * starts at W + e*expert_bytes.
 *
 * Determinism (backend contract): a token's outputs never depend on how many
 * other tokens share the launch, and never on timing: every reduction runs
 * in a fixed order, no floating-point atomics. */
#ifndef CW_CUDA_KERNELS_H
#define CW_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cuda/cuda.h"
#include "gguf/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- quantised matrix products (k_gemv.cu, k_gemm.cu) -------------------- */

/* Whether the CUDA kernels read this weight type. */
bool cw_k_supports(enum cw_qtype type);

struct cw_k_mat {
    enum cw_qtype type;
    const void *d_w;    /* device */
    size_t row_bytes;   /* bytes from one row to the next */
    size_t expert_bytes;/* stacked experts: bytes from one expert to the next (else 0) */
    int64_t n_in;       /* elements per row, a multiple of the type's block */
    int64_t n_out;      /* rows (per expert) */
};

/* y[t][r] = Σ_i W[r][i]·x[t][i] for t < n_tok, r < n_out, then
 *   add:   y[t][r] += the result instead of =
 *   d_scale_logit != NULL: the result is first scaled by σ(d_scale_logit[t])
 *                          (the shared expert's gate)
 * x [n_tok][ldx], y [n_tok][ldy] device f32. Any n_tok >= 1: small n_tok
 * (decode, drafts) reads W once for all tokens; large n_tok (prefill) may go
 * through tensor cores on dequantised tiles (k_gemm.cu) — the launcher picks,
 * and a token's bits may differ between those two regimes but never within
 * one regime with the batch size. */
int cw_k_matmul(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x, int64_t ldx,
                int64_t n_tok, float *d_y, int64_t ldy, bool add, const float *d_scale_logit,
                void *d_scratch, struct cw_err *err);

/* The RMSNorm that a decode launch finishing the residual stream h applies
 * once its last block is done, instead of a launch of its own: per token row,
 * y = RMSNorm(h)·w, bit-equal to cw_k_add_rmsnorm without add. d_count: an
 * unsigned of device memory, zero before, left zero after. */
struct cw_k_norm_next {
    const float *d_w;
    float *d_y;
    int64_t ldy;
    float eps;
    unsigned *d_count;
};

/* x's Q8_K copy written by the kernel that produces x, for the product
 * that reads x next, where cw_k_xq_plain says that product quantises x
 * once: d_xq holds n_tok rows of cw_k_xq_plain's bytes, in the layout of
 * the product's weight type. x_unread: the caller reads no f32 x after
 * the call (the product reads the copy), so the kernel may leave it
 * unwritten; false (the zero value) writes it always. */
struct cw_k_xq_out {
    void *d_xq;
    enum cw_qtype type;
    bool x_unread;
};

/* Bytes per token of the Q8_K copy of x that cw_k_matmul_add_norm of W at
 * n_tok tokens (with scratch) would quantise once in a launch of its own,
 * for a Q4_K, Q5_K or Q6_K W; 0 where it would not. Given that copy
 * (d_xq), the product reads it instead, one launch fewer. */
size_t cw_k_xq_plain(const struct cw_cuda *c, const struct cw_k_mat *W, int64_t n_tok);

/* y += W·x (σ-scaled when d_scale_logit, as cw_k_matmul), then y's n_tok rows
 * normalised as nrm says (NULL: not): one launch in the GEMV regime, else
 * cw_k_matmul and cw_k_add_rmsnorm. d_xq: NULL, or x's Q8_K copy, which
 * the product then reads instead of quantising x (cw_k_xq_plain). */
int cw_k_matmul_add_norm(struct cw_cuda *c, const struct cw_k_mat *W, const float *d_x,
                         int64_t ldx, int64_t n_tok, float *d_y, int64_t ldy,
                         const float *d_scale_logit, const struct cw_k_norm_next *nrm,
                         const void *d_xq, void *d_scratch, struct cw_err *err);

/* n (1..CW_K_MULTI_MAX) products of one x: y_i[t][r] = Σ_j W_i[r][j]·x[t][j],
 * y_i [n_tok][ldy[i]]. In the GEMV regime (decode, drafts) the matrices of
 * one type and width that take the same x (cw_k_q8k) share a launch (up to
 * 4 per launch), and where two Q8_K types each quantise x once, one launch
 * quantises it for both, the second type's launch then running on c's side
 * stream beside the first's (cw_cuda_set_fork), joined into c's stream
 * before the call returns; above it, x is converted for the tensor cores
 * once per width and each matrix multiplied in turn. Each result has the
 * bits cw_k_matmul would give it. */
#define CW_K_MULTI_MAX 8
int cw_k_matmul_multi(struct cw_cuda *c, int n, const struct cw_k_mat *const *W,
                      const float *d_x, int64_t ldx, int64_t n_tok, float *const *d_y,
                      const int64_t *ldy, void *d_scratch, struct cw_err *err);

/* x given as the norm of the residual stream, to a launcher that reads x
 * (the _norm forms below): per token row, x = RMSNorm(h)·w over n_in values,
 * bit-equal to cw_k_add_rmsnorm without add, computed by the launcher and
 * written to its d_x for whatever reads x later. Where cw_k_norm_fuses
 * says so, the launch that quantises x once computes it, or for one token
 * of a narrow x every block of the product (no launch and no serial tail
 * of its own); else a cw_k_add_rmsnorm launch comes first.
 * x_unread: the caller reads no x after the call, so the launcher may
 * leave d_x unwritten where none of its own launches reads it in f32 (every
 * product on the copy quantised with the norm); false (the zero value)
 * writes it always. */
struct cw_k_norm_in {
    float *d_h;        /* [n_tok][n_in], packed rows */
    const float *d_w;  /* [n_in] */
    float eps;
    bool x_unread;
};

/* Whether a _norm launcher given scratch computes the norm inside its
 * launches for n_tok tokens: cw_k_matmul_multi_norm with W among its
 * matrices (K = 0), cw_k_moe_gate_up_norm of K experts (K = 1 only). */
bool cw_k_norm_fuses(const struct cw_cuda *c, const struct cw_k_mat *W, int K, int64_t n_tok);

/* cw_k_matmul_multi of x = the norm nin of h (all matrices one width);
 * d_x [n_tok][ldx] is written (as nin->x_unread says), not read. */
int cw_k_matmul_multi_norm(struct cw_cuda *c, int n, const struct cw_k_mat *const *W,
                           const struct cw_k_norm_in *nin, float *d_x, int64_t ldx,
                           int64_t n_tok, float *const *d_y, const int64_t *ldy,
                           void *d_scratch, struct cw_err *err);

/* Whether cw_k_matmul (n_tok <= 32) and cw_k_moe_gate_up with K = 1 of
 * this type and shape multiply x quantised to Q8_K as the CPU does, with
 * results bit-equal to the CPU's vec_dot (k_gemv.cu: Q4_K/Q5_K/Q6_K whose
 * x's Q8_K copy fits a block's shared memory, n_in up to 89600; the answer
 * depends on the type and n_in alone); otherwise f32 x. */
bool cw_k_q8k(const struct cw_cuda *c, enum cw_qtype type, int64_t n_in, int64_t n_out);

/* Whether the decode (n_tok <= 32) MoE gate/up of K routed experts, and the
 * shared expert fused as their slot K, multiply x quantised to Q8_K (g and
 * u bit-equal to the CPU's vec_dot): as cw_k_q8k. The MoE down always
 * takes f32 x. */
bool cw_k_moe_q8k(const struct cw_cuda *c, enum cw_qtype type, int64_t n_in, int64_t n_out,
                  int K);

/* Bytes of d_scratch cw_k_matmul needs for n_tok tokens of W (0 if none);
 * the caller allocates the max over its matrices once. Above the GEMV
 * regime the scratch is required; within it, it is optional: given, a
 * wide Q8_K product quantises x once for all its blocks instead of in each
 * (the same bits either way). */
size_t cw_k_matmul_scratch(const struct cw_k_mat *W, int64_t n_tok);

/* Routed experts, gate and up fused with SwiGLU:
 *   for t < n_tok, k < K: e = d_ids[t*K+k];
 *   act[t*K+k][r] = silu(G_e[r]·x[t]) · (U_e[r]·x[t]),  r < G->n_out
 * G, U: stacked experts (expert_bytes set); x [n_tok][n_in], act [n_tok*K][n_ff].
 * d_ids NULL: expert 0 for every token (a single matrix pair: K = 1 and
 * n_tok <= CW_K_GEMV_MAX_TOK), whose weights the kernel may then read
 * before the launch before it ends. With d_ids, the decode kernel reads x
 * before that launch ends: x must come from an earlier launch than that one
 * (the forward's x is written before the router's launch, and the route
 * comes between; also for cw_k_moe_gate_up_sh). */
int cw_k_moe_gate_up(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                     const float *d_x, const int32_t *d_ids, int K, int64_t n_tok,
                     float *d_act, void *d_scratch, struct cw_err *err);

/* cw_k_moe_gate_up of x = the norm nin of h; d_x [n_tok][G->n_in] is
 * written (as nin->x_unread says), not read. */
int cw_k_moe_gate_up_norm(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                          const struct cw_k_norm_in *nin, float *d_x, const int32_t *d_ids,
                          int K, int64_t n_tok, float *d_act, void *d_scratch,
                          struct cw_err *err);

/* Routed experts' down projection, weighted sum and residual add:
 *   h[t][r] += Σ_k d_wts[t*K+k] · (D_{ids[t*K+k]}[r] · act[t*K+k])
 * with the sum over k in order k = 0..K-1. h [n_tok][D->n_out].
 * With programmatic dependent launch the decode kernel reads d_ids before
 * it waits for the launch before it (to ask for the experts' rows early):
 * d_ids must come from an earlier launch than that one, as in the
 * forward's route, gate/up, down (also for cw_k_moe_down_sh). */
int cw_k_moe_down(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                  const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok, float *d_h,
                  void *d_scratch, struct cw_err *err);

/* cw_k_moe_down of the pairs of the cw_k_moe_gate_up call just before it on
 * the stream: the same d_ids, K and n_tok, D's shape that gate/up's turned
 * round (n_in = its n_out, n_out = its n_in), and the same d_scratch, which
 * nothing writes between the two. Above the GEMV regime the grouped product
 * then takes the gate/up's grouping of the pairs by expert from the scratch
 * instead of sorting them again. The same results as cw_k_moe_down. */
int cw_k_moe_down_after_gate_up(struct cw_cuda *c, const struct cw_k_mat *D, const float *d_act,
                                const int32_t *d_ids, const float *d_wts, int K, int64_t n_tok,
                                float *d_h, void *d_scratch, struct cw_err *err);

/* Decode form with the shared expert as one more slot of the same launches
 * (n_tok <= CW_K_GEMV_MAX_TOK; cw_k_moe_shared_fusable says when the shapes
 * and types allow it):
 *   gate_up_sh: act [n_tok*(K+1)][n_ff]: slot k < K as cw_k_moe_gate_up,
 *               slot K = silu(SG·x)·(SU·x);
 *   down_sh:    h[t][r] += (Σ_k wts·D_e[r]·act[t*(K+1)+k]) + σ(d_slogit[t])·(SD[r]·act[t*(K+1)+K]),
 *               the routed sum in order k = 0..K-1, then the shared term (the CPU's order);
 *               then h's rows normalised when nrm (cw_k_norm_next). */
#define CW_K_GEMV_MAX_TOK 32 /* the GEMV regime: n_tok up to this */
bool cw_k_moe_shared_fusable(const struct cw_k_mat *G, const struct cw_k_mat *D,
                             const struct cw_k_mat *SG, const struct cw_k_mat *SU,
                             const struct cw_k_mat *SD, int K, int64_t n_tok);
int cw_k_moe_gate_up_sh(struct cw_cuda *c, const struct cw_k_mat *G, const struct cw_k_mat *U,
                        const struct cw_k_mat *SG, const struct cw_k_mat *SU, const float *d_x,
                        const int32_t *d_ids, int K, int64_t n_tok, float *d_act,
                        struct cw_err *err);
int cw_k_moe_down_sh(struct cw_cuda *c, const struct cw_k_mat *D, const struct cw_k_mat *SD,
                     const float *d_act, const int32_t *d_ids, const float *d_wts,
                     const float *d_slogit, int K, int64_t n_tok, float *d_h,
                     const struct cw_k_norm_next *nrm /* NULL: none */, struct cw_err *err);

/* Bytes of d_scratch the two MoE launchers need for n_tok tokens over X
 * experts (e.g. tokens grouped by expert for prefill); 0 if none. */
size_t cw_k_moe_scratch(const struct cw_k_mat *G, int X, int K, int64_t n_tok);

/* Dequantises rows [r0, r0+n) of W (expert e) to f32 [n][n_in] (tests, embeddings). */
int cw_k_dequant_rows(struct cw_cuda *c, const struct cw_k_mat *W, int64_t e, int64_t r0,
                      int64_t n, float *d_y, struct cw_err *err);

/* ---- element-wise and per-row ops (k_norm.cu) ---------------------------- */

/* h += d_add (when d_add != NULL), then y = RMSNorm(h)·w over rows of n:
 * h, d_add [n_rows][n], y [n_rows][ldy]. eps as the model's. */
int cw_k_add_rmsnorm(struct cw_cuda *c, float *d_h, const float *d_add, const float *d_w,
                     float *d_y, int64_t ldy, int64_t n, int64_t n_rows, float eps,
                     struct cw_err *err);

/* y[i] = silu(g[i]) · u[i] over n values (y may alias g). */
int cw_k_swiglu(struct cw_cuda *c, float *d_y, const float *d_g, const float *d_u, int64_t n,
                struct cw_err *err);

/* Embedding rows: y[t] = dequant(table[d_tokens[t]]), t < n_tok. */
int cw_k_get_rows(struct cw_cuda *c, const struct cw_k_mat *table, const int32_t *d_tokens,
                  int64_t n_tok, float *d_y, struct cw_err *err);

/* ---- MoE routing and sampling (k_moe.cu, k_sample.cu) ------------------- */

/* Per token: softmax over the X router logits, the top K probabilities
 * (ties to the lower index), renormalised to sum 1. ids/wts [n_tok][K]. */
int cw_k_moe_route(struct cw_cuda *c, const float *d_logits, int X, int K, int64_t n_tok,
                   int32_t *d_ids, float *d_wts, struct cw_err *err);

/* out[t] = argmax of logits row t (V values; the lowest index wins a tie),
 * n_tok <= 65535. With d_scratch each row is split over many blocks; NULL:
 * one block a row. Either gives the same ids. cw_k_argmax_scratch(n) bytes
 * serve every call of at most n rows; they are zero before the first call,
 * and every call leaves them so. */
int cw_k_argmax(struct cw_cuda *c, const float *d_logits, int64_t V, int64_t n_tok,
                int32_t *d_out, void *d_scratch, struct cw_err *err);
size_t cw_k_argmax_scratch(int64_t n_tok);

/* ---- Gated DeltaNet core (k_deltanet.cu) --------------------------------- */

struct cw_k_deltanet_dims {
    int n_k_head, n_v_head, d_k, d_v, d_conv; /* Hk, Hv, dk, dv, taps */
    float eps;
};

struct cw_k_deltanet_w {
    const float *d_conv;    /* [C][d_conv] */
    const float *d_dt_bias; /* [Hv] */
    const float *d_ssm_a;   /* [Hv] */
    const float *d_norm;    /* [dv] */
};

/* The CPU's cw_deltanet_forward (cpu_deltanet.h: same inputs, same state
 * layout conv [C][d_conv-1], delta [Hv][dv][dk], same order of steps) for
 * n_tok consecutive tokens of one sequence; state updated in place.
 * d_count: NULL, or n_k_head counters of this state, zero before the first
 * call (they are again after each), with which a one-token call runs as one
 * launch on sm_90 (the same bits); such a call reads the state before the
 * launch before it has completed, so that launch must not be a call on
 * the same state (in the forward it is the projection).
 * d_scratch: NULL, or cw_k_deltanet_scratch(d, n) bytes for some n >= n_tok.
 * Where that size is non-zero for n_tok (long calls, dk = dv = 128) and
 * d_scratch is given, the chunked path runs (the same function within the
 * bound in k_deltanet.cu's header; its bits depend on where 64-token chunk
 * boundaries fall in the call); else the token-by-token path, for which n
 * tokens in one call and n single calls give the same bits. xq: NULL, or
 * where y's Q8_K copy goes too (cw_k_deltanet_xq said yes); with its
 * x_unread, d_y is left as scratch (holding the core's output before its
 * norm, or nothing) where only that copy is written. */
int cw_k_deltanet(struct cw_cuda *c, const struct cw_k_deltanet_dims *d,
                  const struct cw_k_deltanet_w *w, float *d_conv_state, float *d_delta_state,
                  unsigned *d_count, int64_t n_tok, const float *d_m, const float *d_z,
                  const float *d_beta_logit, const float *d_alpha, float *d_y,
                  const struct cw_k_xq_out *xq, void *d_scratch, struct cw_err *err);

/* Whether a one-token cw_k_deltanet of these dims with d_count runs as one
 * launch on c's device (dv = 128, Hv even, at most 4 conv taps, sm_90). */
bool cw_k_deltanet_one_launch(const struct cw_cuda *c, const struct cw_k_deltanet_dims *d);

/* Whether cw_k_deltanet of these dims writes y's Q8_K copy for a product
 * of weight type t (Q4_K, Q5_K, Q6_K; two v-heads of 128 per 256-block). */
bool cw_k_deltanet_xq(const struct cw_k_deltanet_dims *d, enum cw_qtype t);

/* Bytes of d_scratch for the chunked path of calls of n_tok tokens (0 where
 * a call of n_tok tokens runs token by token anyway); grows with n_tok. */
size_t cw_k_deltanet_scratch(const struct cw_k_deltanet_dims *d, int64_t n_tok);

/* ---- gated attention core (k_attn.cu) ------------------------------------ */

struct cw_k_attn_dims {
    int n_head, n_head_kv, head_dim;
    float eps;
    int n_rot;          /* rotated dims per head */
    float freq_base;
    int sections[4];    /* IMROPE sections (text: all equal to the position) */
};

/* The CPU's cw_attn_forward (cpu_attn.h) for n_tok tokens at positions
 * *d_pos0 .. *d_pos0+n_tok-1 (d_pos0: device int64): q/k RMSNorm, RoPE,
 * K/V appended as f16 to rows of k_cache/v_cache ([n_ctx][Hkv*hd]), causal
 * GQA softmax over rows 0..pos, output gated by σ(gate).
 *   P [n_tok][2*H*hd] (per head q | gate), k, v [n_tok][Hkv*hd], out [n_tok][H*hd]
 * n_ctx bounds the cache (checked on the device: a position past it writes
 * nothing). scratch: cw_k_attn_scratch bytes. */
int cw_k_attn(struct cw_cuda *c, const struct cw_k_attn_dims *d, const float *d_q_norm,
              const float *d_k_norm, cw_f16 *d_k_cache, cw_f16 *d_v_cache, int64_t n_ctx,
              const int64_t *d_pos0, int64_t n_tok, const float *d_P, const float *d_k,
              const float *d_v, float *d_out, void *d_scratch, struct cw_err *err);

/* Bytes of d_scratch for calls of at most n_tok tokens. The int32 at its
 * start is set to 1 by a call with a position outside [0, n_ctx), else 0. */
size_t cw_k_attn_scratch(const struct cw_k_attn_dims *d, int64_t n_tok, int64_t n_ctx);

#ifdef __cplusplus
}
#endif
#endif

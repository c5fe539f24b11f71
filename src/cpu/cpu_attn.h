/* cpu_attn.h — the gated full-attention core on the CPU, between the q/k/v
 * projections and attn_output (qwen36-model.md §3.3, steps 1–7).
 *
 * Owns: splitting attn_q's output into q and the output gate, the per-head
 * q/k RMSNorm, partial RoPE, appending K and V to one layer's cache, causal
 * GQA softmax attention and the sigmoid output gate. Projections are the
 * caller's. The cache is f16 (llama.cpp's default) laid out [pos][Hkv*hd];
 * the caller owns it and sizes it for n_ctx positions.
 *
 * Precision: K and V are rounded to f16 when stored (as llama.cpp), q stays
 * f32, scores and the softmax are f32 (sum in double) and Σ p·V accumulates
 * in f32. llama.cpp's CPU flash path instead rounds q to f16 and keeps Σ p·V
 * in an f16 buffer; that loses ~1e-3 relative on the output and depends on
 * key order, which a GPU kernel cannot reproduce. This reference keeps f32 so
 * that it is the accurate side of both comparisons: GPU kernels are checked
 * against it at f32 level, llama.cpp at its f16 accumulator's ~1e-3.
 *
 * Every query row attends only keys at positions <= its own, written before
 * any row is computed, so n tokens in one call equal n single-token calls
 * bit for bit. Nothing allocates: the caller passes scratch. */
#ifndef CW_CPU_ATTN_H
#define CW_CPU_ATTN_H

#include <stdint.h>

#include "base/err.h"
#include "cpu/cpu_ops.h"
#include "gguf/quant.h"

struct cw_attn_dims {
    int n_head;    /* H */
    int n_head_kv; /* Hkv, divides H; q head h reads kv head h / (H/Hkv) */
    int head_dim;  /* hd (256) for q, k and v */
    float eps;     /* q/k RMSNorm epsilon */
    struct cw_rope rope;
};

struct cw_attn_weights {
    const float *q_norm; /* [hd] attn_q_norm */
    const float *k_norm; /* [hd] attn_k_norm */
};

/* One layer's cache for one sequence: rows [pos][Hkv*hd] of f16. */
struct cw_kv_cache {
    cw_f16 *k;
    cw_f16 *v;
    int64_t n_ctx; /* rows allocated */
};

/* Floats of scratch cw_attn_forward needs for a cache of n_ctx rows. */
int64_t cw_attn_scratch_floats(const struct cw_attn_dims *d, int64_t n_ctx);

int cw_attn_check(const struct cw_attn_dims *d, struct cw_err *err);

/* Attention for n_tok tokens at positions pos0 .. pos0+n_tok-1:
 *   P [n_tok][2*H*hd]   attn_q output, per head [q hd | gate hd]
 *   k, v [n_tok][Hkv*hd] attn_k / attn_v outputs
 *   out [n_tok][H*hd]   OUT: input of attn_output
 * Writes cache rows pos0.. (all earlier rows must hold this sequence's K/V).
 * scratch: cw_attn_scratch_floats(d, kv->n_ctx) floats.
 * Returns 0, or -1 with err set (bad dims, positions outside the cache). */
int cw_attn_forward(const struct cw_attn_dims *d, const struct cw_attn_weights *w,
                    struct cw_kv_cache *kv, int64_t pos0, int64_t n_tok, const float *P,
                    const float *k, const float *v, float *out, float *scratch,
                    struct cw_err *err);

/* The same, the query rows spread over pool's threads (NULL: the calling
 * thread); scratch: cw_pool_size(pool) × cw_attn_scratch_floats(d,
 * kv->n_ctx) floats. Bit-identical to cw_attn_forward. */
struct cw_pool;
int cw_attn_forward_pool(struct cw_pool *pool, const struct cw_attn_dims *d,
                         const struct cw_attn_weights *w, struct cw_kv_cache *kv, int64_t pos0,
                         int64_t n_tok, const float *P, const float *k, const float *v,
                         float *out, float *scratch, struct cw_err *err);

/* ---- the steps, exposed for op-by-op checks (forward calls these) ---- */

/* q [H*hd] OUT = RMSNorm of each q half of P_row (one token); gate [H*hd]
 * OUT = the raw gate halves. */
void cw_attn_split_q(const struct cw_attn_dims *d, const float *q_norm, const float *P_row,
                     float *q, float *gate);

/* RMSNorm per head of x [n_head][hd] in place (q with H heads or k with Hkv). */
void cw_attn_head_norm(const struct cw_attn_dims *d, const float *w, float *x, int n_head);

/* Rotates n_head heads of x at text position pos in place. Returns -1 for a
 * malformed rope description. */
int cw_attn_rope(const struct cw_attn_dims *d, float *x, int n_head, int64_t pos);

/* Stores one token's k and v [Hkv*hd] (already normed and rotated) as f16 at row pos. */
void cw_attn_store_kv(const struct cw_attn_dims *d, struct cw_kv_cache *kv, int64_t pos,
                      const float *k, const float *v);

/* o [H*hd] OUT: softmax(q·K^T / sqrt(hd)) · V over cache rows 0..pos for one
 * query row q [H*hd]. scores: pos+1 floats of scratch. */
void cw_attn_core(const struct cw_attn_dims *d, const struct cw_kv_cache *kv, int64_t pos,
                  const float *q, float *o, float *scores);

/* The same with the scalar loops (simd 0) or, where the CPU has AVX2 and
 * hd is a multiple of 64, the AVX2 ones (simd 1): the same bits. */
void cw_attn_core_simd(const struct cw_attn_dims *d, const struct cw_kv_cache *kv, int64_t pos,
                       const float *q, float *o, float *scores, int simd);

/* The AVX2 loops (cpu_attn_avx2.c; call only when the CPU has AVX2, hd a
 * multiple of 64). scores[p] = scale·Σ_i q[i]·k_p[i] for the rows p of k
 * (row floats apart) in whole groups of 8 below n; returns how many it did.
 * o[i] = Σ_p w[p]·v_p[i] over n rows. */
int64_t cw_attn_scores_avx2(const float *q, const cw_f16 *k, int64_t row, int hd, int64_t n,
                            float scale, float *scores);
void cw_attn_values_avx2(const float *w, const cw_f16 *v, int64_t row, int hd, int64_t n,
                         float *o);

/* o[i] *= σ(gate[i]) over n values. */
void cw_attn_gate(float *o, const float *gate, int64_t n);

#endif

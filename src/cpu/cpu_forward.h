/* cpu_forward.h — the CPU forward pass of Qwen3.6 (qwen35moe, qwen35): the
 * reference every other backend is checked against.
 *
 * Owns the layer loop (embedding → per layer norm, DeltaNet or gated
 * attention, residual, norm, MoE or dense FFN, residual → output norm → LM
 * head), the MTP block's forward, and the per-sequence hybrid cache: f16 K/V
 * for the attention layers, grown with the sequence up to a ceiling, and the
 * fixed-size conv + delta state of the DeltaNet layers. The operators are
 * cpu_ops / cpu_deltanet / cpu_attn / cpu_moe / cpu_gemv; weights come bound
 * from qwen35_weights.h. Every step works token by token or through
 * batch-invariant matmuls, so a prompt in one call and the same prompt one
 * token per call give bit-identical logits. */
#ifndef CW_CPU_FORWARD_H
#define CW_CPU_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "cpu/cpu_attn.h"
#include "model/qwen35_weights.h"

/* An observer of intermediate activations (cwen debug-dump): called after
 * each labelled step with llama.cpp's name of that tensor (attn_norm,
 * ffn_moe_logits, ...; the caller appends "-<layer>" when layer >= 0) and
 * its rows data[n_rows][width]. The data is borrowed for the call only. */
typedef void (*cw_cpu_tap_fn)(void *ctx, const char *name, int layer, const float *data,
                              int64_t n_rows, int64_t width);

/* The weights (borrowed) and the threads (borrowed) the forward runs on. */
struct cw_cpu_model {
    const struct cw_qwen35_weights *w;
    struct cw_pool *pool; /* NULL: run on the calling thread */
    int64_t n_ctx_max;    /* positions a sequence may reach */
    cw_cpu_tap_fn tap;    /* NULL (set by init): off */
    void *tap_ctx;
};

/* Checks that the CPU backend has kernels for every tensor type of w (the
 * error names the tensor). n_ctx_max 0 means hp.n_ctx_train. */
int cw_cpu_model_init(struct cw_cpu_model *m, const struct cw_qwen35_weights *w,
                      struct cw_pool *pool, int64_t n_ctx_max, struct cw_err *err);

/* Per-layer cache of one sequence. */
struct cw_cpu_layer_cache {
    struct cw_kv_cache kv; /* attention layers: rows [pos][Hkv*hd] f16 */
    float *conv;           /* DeltaNet layers: [C][d_conv-1] f32 */
    float *delta;          /* DeltaNet layers: [Hv][dv][dk] f32 */
};

/* One sequence: its cache, its position, and the work buffers of a call
 * (grown to the largest batch seen, so decode after prefill never allocates;
 * K/V grows geometrically, which a decode step crossing a capacity boundary
 * pays for once). Owned by its user; one thread at a time. */
struct cw_cpu_seq {
    int64_t n_past;                   /* tokens already in the main cache */
    uint32_t n_layer;
    struct cw_cpu_layer_cache *layers; /* [n_layer] */
    int64_t mtp_n_past;               /* tokens already in the MTP block's cache */
    struct cw_cpu_layer_cache mtp;    /* the MTP block's K/V */
    /* private: work buffers */
    void *ws;
    int64_t ws_tok;        /* tokens the work buffers hold */
    float *attn_scratch;
    int64_t attn_scratch_ctx; /* cache rows attn_scratch serves */
};

int cw_cpu_seq_init(struct cw_cpu_seq *s, const struct cw_cpu_model *m, struct cw_err *err);
/* Forgets the sequence (zero state, position 0); keeps the allocations. */
void cw_cpu_seq_reset(struct cw_cpu_seq *s, const struct cw_cpu_model *m);
void cw_cpu_seq_free(struct cw_cpu_seq *s);

/* Runs n tokens of s from position s->n_past and appends them to its cache.
 *   logits OUT: all_logits ? [n][V] (one row per token) : [V] for the last token
 *   hidden OUT (may be NULL): [n][E] final-normed hidden states, the MTP input
 * Returns 0, or -1 with err set (a token outside the vocabulary, the context
 * ceiling reached, out of memory); on error the sequence is unchanged only
 * if the failure came before any layer ran (bad token / ceiling). */
int cw_cpu_forward(struct cw_cpu_model *m, struct cw_cpu_seq *s, const int32_t *tokens,
                   int64_t n, float *logits, bool all_logits, float *hidden,
                   struct cw_err *err);

/* Runs the MTP block (§3.6) over n tokens from position s->mtp_n_past:
 * token tokens[i] paired with hidden_prev[i] [E], the main model's
 * final-normed hidden at the previous position (or the MTP's own hidden_out
 * when drafting further). Appends to the MTP block's own K/V.
 *   logits OUT: all_logits ? [n][V] : [V] for the last token
 *   hidden_out OUT (may be NULL): [n][E] the block's shared_head_norm output
 * -1 with err set when the file has no MTP block. */
int cw_cpu_forward_mtp(struct cw_cpu_model *m, struct cw_cpu_seq *s, const int32_t *tokens,
                       const float *hidden_prev, int64_t n, float *logits, bool all_logits,
                       float *hidden_out, struct cw_err *err);

#endif

/* qwen35_weights.h — the bound weights of a Qwen3.6 file (qwen35moe, qwen35).
 *
 * Owns the bind step: the GGUF tensor directory becomes typed per-layer
 * structs (type, data pointer, shape, strides) for every tensor of both
 * architectures, the MTP block included, and the alternative forms llama.cpp's
 * loader accepts (ffn_gate_inp_shexp as {E} or {E,1}; fused attn_qkv in
 * attention layers; fused ffn_gate_up_exps; a missing output.weight = tied to
 * token_embd). Every name, shape and type is checked, and so is that nothing
 * in the file is left unbound. After binding no code looks a tensor up by
 * name. Data stays in the GGUF mapping (borrowed); model facts live in
 * qwen35.h, the arithmetic in the backends. Facts: qwen36-model.md §2. */
#ifndef CW_QWEN35_WEIGHTS_H
#define CW_QWEN35_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One bound tensor, or a row/expert view of one. ne is GGUF order: a matrix
 * is {n_in, n_out} (n_out rows of n_in), experts {n_in, n_out, n_expert}.
 * nb1 = bytes per row; nb2 = bytes from one expert to the next (differs from
 * ne1*nb1 only for the halves of a fused gate_up tensor). data == NULL: not
 * present (optional tensors only). */
struct cw_wt {
    enum cw_qtype type;
    const void *data;
    int64_t ne[3];
    size_t nb1, nb2;
};

/* Gated full attention (§3.3). */
struct cw_qwen35_attn_w {
    struct cw_wt q;      /* [2·H·hd, E]  per head [q(hd) | gate(hd)] */
    struct cw_wt k;      /* [Hkv·hd, E] */
    struct cw_wt v;      /* [Hkv·hd, E] */
    struct cw_wt o;      /* [E, H·hd]   attn_output */
    struct cw_wt q_norm; /* [hd] f32 */
    struct cw_wt k_norm; /* [hd] f32 */
};

/* Gated DeltaNet (§3.2); C = 2·Hk·dk + Hv·dv conv channels. */
struct cw_qwen35_ssm_w {
    struct cw_wt qkv;    /* [C, E]      attn_qkv: q | k | v channels */
    struct cw_wt gate;   /* [Hv·dv, E]  attn_gate (z) */
    struct cw_wt conv1d; /* [C][conv]   f32, tap conv-1 = current token */
    struct cw_wt dt;     /* [Hv] f32    ssm_dt.bias */
    struct cw_wt a;      /* [Hv] f32    ssm_a = −exp(A_log) */
    struct cw_wt beta;   /* [Hv, E] */
    struct cw_wt alpha;  /* [Hv, E] */
    struct cw_wt norm;   /* [dv] f32    shared by all heads, no +1 */
    struct cw_wt out;    /* [E, Hv·dv]  ssm_out */
};

/* Routed experts + gated shared expert (§3.4). */
struct cw_qwen35_moe_w {
    struct cw_wt gate_inp;       /* [n_expert, E] router */
    struct cw_wt gate_exps;      /* [n_expert][n_ff_exp, E] */
    struct cw_wt up_exps;        /* [n_expert][n_ff_exp, E] */
    struct cw_wt down_exps;      /* [n_expert][E, n_ff_exp] */
    struct cw_wt gate_inp_shexp; /* [1, E]  (stored {E} or {E,1}) */
    struct cw_wt gate_shexp;     /* [n_ff_shexp, E] */
    struct cw_wt up_shexp;       /* [n_ff_shexp, E] */
    struct cw_wt down_shexp;     /* [E, n_ff_shexp] */
};

/* Dense SwiGLU FFN (§3.5). */
struct cw_qwen35_ffn_w {
    struct cw_wt gate; /* [n_ff, E] */
    struct cw_wt up;   /* [n_ff, E] */
    struct cw_wt down; /* [E, n_ff] */
};

struct cw_qwen35_layer_w {
    enum cw_layer_kind kind;
    struct cw_wt attn_norm;      /* [E] f32 */
    struct cw_wt post_attn_norm; /* [E] f32, the pre-FFN norm */
    struct cw_qwen35_attn_w attn; /* kind == CW_LAYER_ATTENTION */
    struct cw_qwen35_ssm_w ssm;   /* kind == CW_LAYER_DELTANET */
    struct cw_qwen35_moe_w moe;   /* arch qwen35moe */
    struct cw_qwen35_ffn_w ffn;   /* arch qwen35 */
};

/* The MTP / NextN block (§3.6): a full-attention layer plus these. */
struct cw_qwen35_mtp_w {
    struct cw_qwen35_layer_w layer;
    struct cw_wt eh_proj;          /* [E, 2E] input [enorm(e) | hnorm(h)] */
    struct cw_wt enorm;            /* [E] f32 */
    struct cw_wt hnorm;            /* [E] f32 */
    struct cw_wt shared_head_norm; /* [E] f32 */
    struct cw_wt embed_tokens;     /* [V, E] optional; else token_embd */
    struct cw_wt shared_head_head; /* [V, E] optional; else output */
};

struct cw_qwen35_weights {
    struct cw_qwen35_hparams hp;
    struct cw_wt token_embd;  /* [V, E] */
    struct cw_wt output_norm; /* [E] f32 */
    struct cw_wt output;      /* [V, E] (token_embd when the file ties them) */
    struct cw_qwen35_layer_w *layers; /* n_layer main layers (owned) */
    bool has_mtp;
    struct cw_qwen35_mtp_w mtp; /* has_mtp */
};

/* Binds every tensor of g against hp (from cw_qwen35_hparams_load). On a
 * mismatch returns -1 with a message naming the tensor, the expected shape
 * and type, and what the file has; a tensor the file has but no role takes
 * is refused too. The MTP block is bound when hp->n_nextn == 1.
 * w borrows g's mapping: g must outlive w. Free with cw_qwen35_weights_free. */
int cw_qwen35_bind(struct cw_qwen35_weights *w, const struct cw_gguf *g,
                   const struct cw_qwen35_hparams *hp, struct cw_err *err);

void cw_qwen35_weights_free(struct cw_qwen35_weights *w);

/* Conv channels of a DeltaNet layer: 2·Hk·dk + Hv·dv. */
static inline int64_t cw_qwen35_conv_channels(const struct cw_qwen35_hparams *hp)
{
    return 2 * (int64_t)hp->ssm_n_k_heads * hp->ssm_d_state + (int64_t)hp->ssm_inner;
}

#ifdef __cplusplus
}
#endif

#endif

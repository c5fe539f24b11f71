/* qwen35.h — model facts of the Qwen3.6 family (GGUF archs qwen35moe, qwen35).
 *
 * Owns what a file of these archs must contain: the hyperparameters and the
 * GGUF keys they come from (cw_qwen35_hparams_load validates them as
 * llama.cpp's loader does), the known shapes (presets), the exact list of
 * tensors (names, shapes, roles) for given hparams, and budget arithmetic
 * (KV and recurrent-state bytes, weight bytes read per decoded token).
 * It computes nothing of the forward pass and binds no weights; the
 * generator (tools/mkmodel) writes exactly cw_qwen35_tensors()' list and the
 * weight binder checks files against it. Facts: qwen36-model.md §1, §2, §8. */
#ifndef CW_QWEN35_H
#define CW_QWEN35_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CW_MAX_LAYERS 256

enum cw_arch { CW_ARCH_QWEN35MOE, CW_ARCH_QWEN35 };
enum cw_layer_kind { CW_LAYER_DELTANET, CW_LAYER_ATTENTION };

/* Keys are "{a}.<key>" with {a} = general.architecture. */
struct cw_qwen35_hparams {
    enum cw_arch arch;        /* general.architecture: qwen35moe | qwen35 */
    uint32_t n_vocab;         /* rows of token_embd: length of tokenizer.ggml.tokens
                                 (else token_embd ne1) */
    uint32_t n_ctx_train;     /* {a}.context_length (required) */
    uint32_t n_embd;          /* {a}.embedding_length (required): E */
    uint32_t n_layer;         /* main layers = {a}.block_count − n_nextn */
    uint32_t n_nextn;         /* {a}.nextn_predict_layers (default 0): MTP blocks, 0 or 1 */
    uint32_t n_head;          /* {a}.attention.head_count: H */
    uint32_t n_head_kv;       /* {a}.attention.head_count_kv (default H): Hkv */
    uint32_t head_dim;        /* {a}.attention.key_length == value_length: hd */
    uint32_t n_rot;           /* {a}.rope.dimension_count: rotated dims per head */
    float rope_base;          /* {a}.rope.freq_base (default 10000) */
    int32_t rope_sections[4]; /* {a}.rope.dimension_sections (required): M-RoPE */
    float eps;                /* {a}.attention.layer_norm_rms_epsilon (required) */
    uint32_t n_expert;        /* {a}.expert_count (moe; 0 for dense) */
    uint32_t n_expert_used;   /* {a}.expert_used_count: top-k */
    uint32_t n_ff_exp;        /* {a}.expert_feed_forward_length: routed expert width */
    uint32_t n_ff_shexp;      /* {a}.expert_shared_feed_forward_length: shared expert width */
    uint32_t n_ff;            /* {a}.feed_forward_length (dense only) */
    uint32_t ssm_conv;        /* {a}.ssm.conv_kernel (required): conv taps */
    uint32_t ssm_d_state;     /* {a}.ssm.state_size (required): dk = dv */
    uint32_t ssm_n_k_heads;   /* {a}.ssm.group_count (required): Hk */
    uint32_t ssm_n_v_heads;   /* {a}.ssm.time_step_rank (required): Hv */
    uint32_t ssm_inner;       /* {a}.ssm.inner_size (required): Hv·dv */
    /* kind of each of the block_count layers, from {a}.attention.recurrent_layers
     * (true = DeltaNet) or {a}.full_attention_interval; the MTP layer is attention */
    uint8_t layer_kind[CW_MAX_LAYERS];
};

/* Reads and validates every key of §1.1 from g. Missing required keys,
 * wrong types and inconsistent shapes fail with a message naming the key
 * and the file. Returns 0 or -1. */
int cw_qwen35_hparams_load(const struct cw_gguf *g, struct cw_qwen35_hparams *hp,
                           struct cw_err *err);

/* The checks hparams_load applies after reading (also for hand-built hp). */
int cw_qwen35_hparams_check(const struct cw_qwen35_hparams *hp, struct cw_err *err);

/* Fills hp with a known shape: "35b-a3b", "27b", "3.8-27b" (= 27b),
 * "tiny-moe", "tiny-dense" (§11 test models); with_mtp adds the MTP block.
 * Layer kinds follow the every-4th-layer pattern. Returns 0 or -1. */
int cw_qwen35_preset(const char *name, bool with_mtp, struct cw_qwen35_hparams *hp,
                     struct cw_err *err);

/* Sets layer_kind[] for block_count layers: DeltaNet iff i < n_layer and
 * (i+1) % interval != 0. */
void cw_qwen35_set_layer_pattern(struct cw_qwen35_hparams *hp, uint32_t interval);

/* "qwen35moe" / "qwen35". */
const char *cw_qwen35_arch_name(enum cw_arch arch);

/* A human name for a known shape: "Qwen3.6-35B-A3B", or for the 27B shape
 * (which Qwen3.6-27B and Qwen3.8-27B share, MTP head included) the family
 * named in general_name when it says "3.8" / "3.6", else "Qwen3.6-27B-shaped".
 * general_name may be NULL. NULL for any other shape. */
const char *cw_qwen35_identify(const struct cw_qwen35_hparams *hp, const char *general_name);

/* ---- tensors ------------------------------------------------------------ */

enum cw_qwen35_role {
    CW_T_TOKEN_EMBD, CW_T_OUTPUT_NORM, CW_T_OUTPUT,
    /* every layer */
    CW_T_ATTN_NORM, CW_T_POST_ATTN_NORM,
    /* full attention */
    CW_T_ATTN_Q, CW_T_ATTN_K, CW_T_ATTN_V, CW_T_ATTN_OUTPUT, CW_T_ATTN_Q_NORM, CW_T_ATTN_K_NORM,
    /* DeltaNet */
    CW_T_SSM_QKV, CW_T_SSM_GATE, CW_T_SSM_CONV1D, CW_T_SSM_DT, CW_T_SSM_A, CW_T_SSM_BETA,
    CW_T_SSM_ALPHA, CW_T_SSM_NORM, CW_T_SSM_OUT,
    /* MoE */
    CW_T_FFN_GATE_INP, CW_T_FFN_GATE_EXPS, CW_T_FFN_UP_EXPS, CW_T_FFN_DOWN_EXPS,
    CW_T_FFN_GATE_INP_SHEXP, CW_T_FFN_GATE_SHEXP, CW_T_FFN_UP_SHEXP, CW_T_FFN_DOWN_SHEXP,
    /* dense FFN */
    CW_T_FFN_GATE, CW_T_FFN_UP, CW_T_FFN_DOWN,
    /* MTP block extras */
    CW_T_NEXTN_EH_PROJ, CW_T_NEXTN_ENORM, CW_T_NEXTN_HNORM, CW_T_NEXTN_SHARED_HEAD_NORM,
    CW_T_ROLE_COUNT,
};

struct cw_qwen35_tensor {
    char name[CW_GGUF_MAX_NAME]; /* "blk.3.attn_q.weight" */
    enum cw_qwen35_role role;
    int32_t layer;               /* block index; -1 for global tensors */
    bool is_mtp;                 /* part of the MTP block (never read by the main pass) */
    uint32_t n_dims;
    int64_t ne[CW_GGUF_MAX_DIMS]; /* {ne0, ne1, ne2, 1}; unused dims are 1 */
};

/* Every tensor of a file with these hparams, in file order: token_embd,
 * the main layers, the MTP block, output_norm, output. out may be NULL to
 * count; at most cap entries are written. Returns the total count. */
size_t cw_qwen35_tensors(const struct cw_qwen35_hparams *hp, struct cw_qwen35_tensor *out,
                         size_t cap);

/* Role name without layer prefix or suffix ("attn_q", "ffn_down_exps", ...). */
const char *cw_qwen35_role_name(enum cw_qwen35_role role);

/* ---- budgets ------------------------------------------------------------ */

/* f16 K+V bytes per token over the main attention layers. */
uint64_t cw_qwen35_kv_bytes_per_token(const struct cw_qwen35_hparams *hp);

/* f32 recurrent state per sequence over the main DeltaNet layers:
 * conv ((ssm_conv−1) × conv channels) + delta (Hv × dk × dv). */
uint64_t cw_qwen35_state_bytes_per_seq(const struct cw_qwen35_hparams *hp);

/* Bytes of a tensor (nbytes in the file, ne1 rows for token_embd) read per
 * token decoded by the main pass: one row of token_embd, n_expert_used /
 * n_expert of a routed-expert tensor, 0 for the MTP block, all otherwise. */
uint64_t cw_qwen35_decode_bytes(const struct cw_qwen35_hparams *hp,
                                const struct cw_qwen35_tensor *t, uint64_t nbytes);

#ifdef __cplusplus
}
#endif

#endif

/* qwen35.c — hyperparameters, presets, tensor list and budgets of the
 * qwen35moe / qwen35 archs (see qwen35.h). Key handling follows llama.cpp's
 * load_hparams + load_arch_hparams (qwen36-model.md §1.1): which keys are
 * required, their defaults and the layer-kind fallback. */
#include "model/qwen35.h"

#include <stdio.h>
#include <string.h>

const char *cw_qwen35_arch_name(enum cw_arch arch)
{
    return arch == CW_ARCH_QWEN35MOE ? "qwen35moe" : "qwen35";
}

/* ---- loading ------------------------------------------------------------ */

/* "{arch}.{suffix}" into buf */
static const char *akey(char *buf, size_t cap, const struct cw_qwen35_hparams *hp,
                        const char *suffix)
{
    snprintf(buf, cap, "%s.%s", cw_qwen35_arch_name(hp->arch), suffix);
    return buf;
}

static int get_u32(const struct cw_gguf *g, const struct cw_qwen35_hparams *hp,
                   const char *suffix, uint32_t *out, struct cw_err *err)
{
    char k[128];
    return cw_gguf_get_u32(g, akey(k, sizeof k, hp, suffix), out, err);
}

static int get_u32_or(const struct cw_gguf *g, const struct cw_qwen35_hparams *hp,
                      const char *suffix, uint32_t def, uint32_t *out, struct cw_err *err)
{
    char k[128];
    return cw_gguf_get_u32_or(g, akey(k, sizeof k, hp, suffix), def, out, err);
}

/* A key that llama.cpp reads with get_key_or_arr: a scalar, or a per-layer
 * array, which cwen accepts only when all entries are equal. */
static int get_u32_or_arr(const struct cw_gguf *g, const struct cw_qwen35_hparams *hp,
                          const char *suffix, uint32_t def, uint32_t *out, struct cw_err *err)
{
    char k[128];
    akey(k, sizeof k, hp, suffix);
    const struct cw_gguf_kv *kv = cw_gguf_find_kv(g, k);
    if (!kv || kv->value.type != CW_GGUF_ARRAY)
        return cw_gguf_get_u32_or(g, k, def, out, err);
    const struct cw_gguf_value *v = &kv->value;
    if (v->arr.type == CW_GGUF_STRING || v->arr.type == CW_GGUF_ARRAY || v->arr.type == CW_GGUF_F32 ||
        v->arr.type == CW_GGUF_F64 || v->arr.n == 0)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s: expected an integer array", g->path, k);
    int64_t first = cw_gguf_arr_i64(v, 0);
    for (uint64_t i = 1; i < v->arr.n; i++)
        if (cw_gguf_arr_i64(v, i) != first)
            return cw_errf(err, CW_ERR_UNSUPPORTED,
                           "qwen35: %s: key %s: per-layer values differ (unsupported)", g->path, k);
    if (first < 0 || first > UINT32_MAX)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s: value %lld out of range", g->path, k,
                       (long long)first);
    *out = (uint32_t)first;
    return 0;
}

static int load_layer_kinds(const struct cw_gguf *g, struct cw_qwen35_hparams *hp, uint32_t n_all,
                            struct cw_err *err)
{
    char k[128];
    const struct cw_gguf_kv *kv = cw_gguf_find_kv(g, akey(k, sizeof k, hp, "attention.recurrent_layers"));
    if (kv) {
        const struct cw_gguf_value *v = &kv->value;
        if (v->type != CW_GGUF_ARRAY || v->arr.type == CW_GGUF_STRING || v->arr.type == CW_GGUF_ARRAY ||
            v->arr.type == CW_GGUF_F32 || v->arr.type == CW_GGUF_F64)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s: expected a bool array", g->path, k);
        if (v->arr.n != n_all)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s: %llu entries, block_count is %u",
                           g->path, k, (unsigned long long)v->arr.n, n_all);
        for (uint32_t i = 0; i < n_all; i++)
            hp->layer_kind[i] = cw_gguf_arr_i64(v, i) ? CW_LAYER_DELTANET : CW_LAYER_ATTENTION;
        return 0;
    }
    uint32_t interval = 4;
    if (get_u32_or(g, hp, "full_attention_interval", 4, &interval, err))
        return -1;
    if (interval == 0)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s.full_attention_interval is 0", g->path,
                       cw_qwen35_arch_name(hp->arch));
    cw_qwen35_set_layer_pattern(hp, interval);
    return 0;
}

int cw_qwen35_hparams_load(const struct cw_gguf *g, struct cw_qwen35_hparams *hp, struct cw_err *err)
{
    memset(hp, 0, sizeof *hp);
    struct cw_gguf_str arch;
    if (cw_gguf_get_str(g, "general.architecture", &arch, err))
        return -1;
    if (cw_gguf_str_eq(arch, "qwen35moe"))
        hp->arch = CW_ARCH_QWEN35MOE;
    else if (cw_gguf_str_eq(arch, "qwen35"))
        hp->arch = CW_ARCH_QWEN35;
    else {
        char a[64];
        return cw_errf(err, CW_ERR_UNSUPPORTED, "qwen35: %s: architecture '%s' is not qwen35moe or qwen35",
                       g->path, cw_gguf_str_copy(arch, a, sizeof a));
    }
    const char *path = g->path;
    char k[128];
    uint32_t n_all = 0;

    /* generic keys (llama_model_base::load_hparams) */
    if (get_u32(g, hp, "context_length", &hp->n_ctx_train, err) ||
        get_u32(g, hp, "embedding_length", &hp->n_embd, err) ||
        get_u32(g, hp, "block_count", &n_all, err) ||
        get_u32_or(g, hp, "nextn_predict_layers", 0, &hp->n_nextn, err))
        return -1;
    if (n_all == 0 || n_all > CW_MAX_LAYERS)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "qwen35: %s: block_count %u out of range 1..%d", path, n_all,
                       CW_MAX_LAYERS);
    if (hp->n_nextn > 1)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "qwen35: %s: nextn_predict_layers %u (only 0 or 1 supported)",
                       path, hp->n_nextn);
    if (hp->n_nextn >= n_all)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: nextn_predict_layers %u leaves no main layer", path,
                       hp->n_nextn);
    hp->n_layer = n_all - hp->n_nextn;

    if (get_u32_or_arr(g, hp, "expert_count", 0, &hp->n_expert, err) ||
        get_u32_or_arr(g, hp, "expert_used_count", 0, &hp->n_expert_used, err) ||
        get_u32_or_arr(g, hp, "feed_forward_length", 0, &hp->n_ff, err) ||
        get_u32_or_arr(g, hp, "attention.head_count", 0, &hp->n_head, err))
        return -1;
    if (hp->n_head == 0)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s missing or 0", path,
                       akey(k, sizeof k, hp, "attention.head_count"));
    if (get_u32_or_arr(g, hp, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, err))
        return -1;
    uint32_t klen = 0, vlen = 0;
    if (get_u32_or(g, hp, "attention.key_length", hp->n_embd / hp->n_head, &klen, err) ||
        get_u32_or(g, hp, "attention.value_length", hp->n_embd / hp->n_head, &vlen, err))
        return -1;
    if (klen != vlen)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "qwen35: %s: key_length %u != value_length %u", path, klen,
                       vlen);
    hp->head_dim = klen;
    if (get_u32_or(g, hp, "rope.dimension_count", hp->head_dim, &hp->n_rot, err) ||
        cw_gguf_get_f32_or(g, akey(k, sizeof k, hp, "rope.freq_base"), 10000.0f, &hp->rope_base, err))
        return -1;

    /* arch keys (load_arch_hparams) */
    if (hp->arch == CW_ARCH_QWEN35MOE &&
        (get_u32_or_arr(g, hp, "expert_feed_forward_length", 0, &hp->n_ff_exp, err) ||
         get_u32_or(g, hp, "expert_shared_feed_forward_length", 0, &hp->n_ff_shexp, err)))
        return -1;
    if (cw_gguf_get_f32(g, akey(k, sizeof k, hp, "attention.layer_norm_rms_epsilon"), &hp->eps, err))
        return -1;
    const struct cw_gguf_kv *sec = cw_gguf_find_kv(g, akey(k, sizeof k, hp, "rope.dimension_sections"));
    if (!sec)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: required key %s is missing", path, k);
    if (sec->value.type != CW_GGUF_ARRAY || sec->value.arr.type == CW_GGUF_STRING ||
        sec->value.arr.type == CW_GGUF_ARRAY || sec->value.arr.type == CW_GGUF_F32 ||
        sec->value.arr.type == CW_GGUF_F64 || sec->value.arr.n > 4)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: key %s: expected up to 4 integers", path, k);
    for (uint64_t i = 0; i < sec->value.arr.n; i++)
        hp->rope_sections[i] = (int32_t)cw_gguf_arr_i64(&sec->value, i);
    if (get_u32(g, hp, "ssm.conv_kernel", &hp->ssm_conv, err) ||
        get_u32(g, hp, "ssm.inner_size", &hp->ssm_inner, err) ||
        get_u32(g, hp, "ssm.state_size", &hp->ssm_d_state, err) ||
        get_u32(g, hp, "ssm.time_step_rank", &hp->ssm_n_v_heads, err) ||
        get_u32(g, hp, "ssm.group_count", &hp->ssm_n_k_heads, err))
        return -1;
    if (load_layer_kinds(g, hp, n_all, err))
        return -1;

    /* llama.cpp's defaults for the MoE widths */
    if (hp->arch == CW_ARCH_QWEN35MOE) {
        if (hp->n_ff_exp == 0 && hp->n_expert_used)
            hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
        if (hp->n_ff_shexp == 0)
            hp->n_ff_shexp = hp->n_ff;
    }

    /* vocabulary: the token array, else the embedding's rows */
    const struct cw_gguf_kv *toks = cw_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const struct cw_gguf_tensor *emb = cw_gguf_find_tensor(g, "token_embd.weight");
    if (!emb)
        emb = cw_gguf_find_tensor(g, "output.weight");
    if (toks) {
        if (toks->value.type != CW_GGUF_ARRAY || toks->value.arr.type != CW_GGUF_STRING)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: tokenizer.ggml.tokens is not a string array", path);
        if (toks->value.arr.n == 0 || toks->value.arr.n > UINT32_MAX)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: tokenizer.ggml.tokens has %llu entries", path,
                           (unsigned long long)toks->value.arr.n);
        hp->n_vocab = (uint32_t)toks->value.arr.n;
    } else if (emb) {
        hp->n_vocab = (uint32_t)emb->ne[1];
    } else {
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: %s: no tokenizer.ggml.tokens and no token_embd.weight",
                       path);
    }
    if (emb && (emb->ne[0] != hp->n_embd || emb->ne[1] != hp->n_vocab))
        return cw_errf(err, CW_ERR_FORMAT,
                       "qwen35: %s: %s is {%lld, %lld}, expected {%u, %u} (n_embd, n_vocab)",
                       path, emb->name, (long long)emb->ne[0], (long long)emb->ne[1], hp->n_embd, hp->n_vocab);
    if (cw_qwen35_hparams_check(hp, err))
        return cw_err_prefix(err, "%s", path);
    return 0;
}

int cw_qwen35_hparams_check(const struct cw_qwen35_hparams *hp, struct cw_err *err)
{
    uint32_t n_all = hp->n_layer + hp->n_nextn;
    if (hp->n_layer == 0 || n_all > CW_MAX_LAYERS || hp->n_nextn > 1)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "qwen35: %u main + %u MTP layers unsupported", hp->n_layer,
                       hp->n_nextn);
    if (hp->n_embd == 0 || hp->n_vocab == 0 || hp->n_head == 0 || hp->n_head_kv == 0 || hp->head_dim == 0)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: zero n_embd, n_vocab, head_count(_kv) or key_length");
    if (hp->n_head % hp->n_head_kv)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: head_count %u is not a multiple of head_count_kv %u",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: rope.dimension_count %u must be even and <= key_length %u",
                       hp->n_rot, hp->head_dim);
    if (!(hp->eps > 0.0f) || !(hp->rope_base > 0.0f))
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: layer_norm_rms_epsilon and rope.freq_base must be > 0");
    if (hp->ssm_conv == 0 || hp->ssm_d_state == 0 || hp->ssm_n_k_heads == 0 || hp->ssm_n_v_heads == 0)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: ssm.conv_kernel/state_size/group_count/time_step_rank is 0");
    if ((uint64_t)hp->ssm_inner != (uint64_t)hp->ssm_n_v_heads * hp->ssm_d_state)
        return cw_errf(err, CW_ERR_FORMAT,
                       "qwen35: ssm.inner_size %u != ssm.time_step_rank %u x ssm.state_size %u", hp->ssm_inner,
                       hp->ssm_n_v_heads, hp->ssm_d_state);
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return cw_errf(err, CW_ERR_FORMAT, "qwen35: ssm.time_step_rank %u is not a multiple of ssm.group_count %u",
                       hp->ssm_n_v_heads, hp->ssm_n_k_heads);
    if (hp->arch == CW_ARCH_QWEN35MOE) {
        if (hp->n_expert == 0 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: expert_used_count %u / expert_count %u invalid",
                           hp->n_expert_used, hp->n_expert);
        if (hp->n_ff_exp == 0 || hp->n_ff_shexp == 0)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: expert_(shared_)feed_forward_length is 0");
    } else {
        if (hp->n_expert != 0)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: dense arch with expert_count %u", hp->n_expert);
        if (hp->n_ff == 0)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: feed_forward_length missing or 0");
    }
    for (uint32_t il = hp->n_layer; il < n_all; il++)
        if (hp->layer_kind[il] != CW_LAYER_ATTENTION)
            return cw_errf(err, CW_ERR_FORMAT, "qwen35: MTP layer %u is marked recurrent", il);
    return 0;
}

void cw_qwen35_set_layer_pattern(struct cw_qwen35_hparams *hp, uint32_t interval)
{
    uint32_t n_all = hp->n_layer + hp->n_nextn;
    for (uint32_t i = 0; i < n_all && i < CW_MAX_LAYERS; i++)
        hp->layer_kind[i] = (i < hp->n_layer && (i + 1) % interval != 0) ? CW_LAYER_DELTANET : CW_LAYER_ATTENTION;
}

/* ---- presets ------------------------------------------------------------ */

int cw_qwen35_preset(const char *name, bool with_mtp, struct cw_qwen35_hparams *hp, struct cw_err *err)
{
    memset(hp, 0, sizeof *hp);
    /* shared by every Qwen3.6 shape (§1.1) */
    hp->n_ctx_train = 262144;
    hp->head_dim = 256;
    hp->n_rot = 64;
    hp->rope_base = 10000000.0f;
    hp->rope_sections[0] = 11;
    hp->rope_sections[1] = 11;
    hp->rope_sections[2] = 10;
    hp->eps = 1e-6f;
    hp->ssm_conv = 4;
    hp->ssm_d_state = 128;
    hp->n_vocab = 248320;
    if (!strcmp(name, "35b-a3b")) {
        hp->arch = CW_ARCH_QWEN35MOE;
        hp->n_embd = 2048, hp->n_layer = 40, hp->n_head = 16, hp->n_head_kv = 2;
        hp->n_expert = 256, hp->n_expert_used = 8, hp->n_ff_exp = 512, hp->n_ff_shexp = 512;
        hp->ssm_n_k_heads = 16, hp->ssm_n_v_heads = 32;
    } else if (!strcmp(name, "27b") || !strcmp(name, "3.8-27b")) {
        hp->arch = CW_ARCH_QWEN35;
        hp->n_embd = 5120, hp->n_layer = 64, hp->n_head = 24, hp->n_head_kv = 4;
        hp->n_ff = 17408;
        hp->ssm_n_k_heads = 16, hp->ssm_n_v_heads = 48;
    } else if (!strcmp(name, "tiny-moe") || !strcmp(name, "tiny-dense")) {
        /* qwen36-model.md §11: the files llama.cpp was verified on */
        bool moe = !strcmp(name, "tiny-moe");
        hp->arch = moe ? CW_ARCH_QWEN35MOE : CW_ARCH_QWEN35;
        hp->n_vocab = 151936;
        hp->n_embd = 256, hp->n_layer = 4, hp->n_head = 2, hp->n_head_kv = 1;
        if (moe)
            hp->n_expert = 16, hp->n_expert_used = 4, hp->n_ff_exp = 256, hp->n_ff_shexp = 256;
        else
            hp->n_ff = 512;
        hp->ssm_n_k_heads = 2, hp->ssm_n_v_heads = 4;
    } else {
        return cw_errf(err, CW_ERR_INVALID,
                       "qwen35: unknown preset '%s' (35b-a3b, 27b, 3.8-27b, tiny-moe, tiny-dense)", name);
    }
    hp->ssm_inner = hp->ssm_n_v_heads * hp->ssm_d_state;
    hp->n_nextn = with_mtp ? 1 : 0;
    cw_qwen35_set_layer_pattern(hp, 4);
    return 0;
}

const char *cw_qwen35_identify(const struct cw_qwen35_hparams *hp, const char *general_name)
{
    bool common = hp->head_dim == 256 && hp->ssm_d_state == 128 && hp->ssm_n_k_heads == 16 &&
                  hp->n_vocab == 248320;
    if (!common)
        return NULL;
    if (hp->arch == CW_ARCH_QWEN35MOE && hp->n_embd == 2048 && hp->n_layer == 40 && hp->n_head == 16 &&
        hp->n_head_kv == 2 && hp->n_expert == 256 && hp->n_expert_used == 8 && hp->n_ff_exp == 512 &&
        hp->ssm_n_v_heads == 32)
        return "Qwen3.6-35B-A3B";
    if (hp->arch == CW_ARCH_QWEN35 && hp->n_embd == 5120 && hp->n_layer == 64 && hp->n_head == 24 &&
        hp->n_head_kv == 4 && hp->n_ff == 17408 && hp->ssm_n_v_heads == 48) {
        /* Qwen3.6-27B and Qwen3.8-27B share graph and MTP head: only the name tells */
        if (general_name && strstr(general_name, "3.8"))
            return "Qwen3.8-27B";
        if (general_name && strstr(general_name, "3.6"))
            return "Qwen3.6-27B";
        return "Qwen3.6-27B-shaped";
    }
    return NULL;
}

/* ---- tensors ------------------------------------------------------------ */

static const char *const role_names[CW_T_ROLE_COUNT] = {
    [CW_T_TOKEN_EMBD] = "token_embd", [CW_T_OUTPUT_NORM] = "output_norm", [CW_T_OUTPUT] = "output",
    [CW_T_ATTN_NORM] = "attn_norm", [CW_T_POST_ATTN_NORM] = "post_attention_norm",
    [CW_T_ATTN_Q] = "attn_q", [CW_T_ATTN_K] = "attn_k", [CW_T_ATTN_V] = "attn_v",
    [CW_T_ATTN_OUTPUT] = "attn_output", [CW_T_ATTN_Q_NORM] = "attn_q_norm", [CW_T_ATTN_K_NORM] = "attn_k_norm",
    [CW_T_SSM_QKV] = "attn_qkv", [CW_T_SSM_GATE] = "attn_gate", [CW_T_SSM_CONV1D] = "ssm_conv1d",
    [CW_T_SSM_DT] = "ssm_dt", [CW_T_SSM_A] = "ssm_a", [CW_T_SSM_BETA] = "ssm_beta",
    [CW_T_SSM_ALPHA] = "ssm_alpha", [CW_T_SSM_NORM] = "ssm_norm", [CW_T_SSM_OUT] = "ssm_out",
    [CW_T_FFN_GATE_INP] = "ffn_gate_inp", [CW_T_FFN_GATE_EXPS] = "ffn_gate_exps",
    [CW_T_FFN_UP_EXPS] = "ffn_up_exps", [CW_T_FFN_DOWN_EXPS] = "ffn_down_exps",
    [CW_T_FFN_GATE_INP_SHEXP] = "ffn_gate_inp_shexp", [CW_T_FFN_GATE_SHEXP] = "ffn_gate_shexp",
    [CW_T_FFN_UP_SHEXP] = "ffn_up_shexp", [CW_T_FFN_DOWN_SHEXP] = "ffn_down_shexp",
    [CW_T_FFN_GATE] = "ffn_gate", [CW_T_FFN_UP] = "ffn_up", [CW_T_FFN_DOWN] = "ffn_down",
    [CW_T_NEXTN_EH_PROJ] = "nextn.eh_proj", [CW_T_NEXTN_ENORM] = "nextn.enorm",
    [CW_T_NEXTN_HNORM] = "nextn.hnorm", [CW_T_NEXTN_SHARED_HEAD_NORM] = "nextn.shared_head_norm",
};

const char *cw_qwen35_role_name(enum cw_qwen35_role role)
{
    return (unsigned)role < CW_T_ROLE_COUNT ? role_names[role] : "?";
}

struct tlist {
    struct cw_qwen35_tensor *out;
    size_t cap, n;
};

static void add(struct tlist *l, enum cw_qwen35_role role, int32_t layer, bool is_mtp, uint32_t n_dims,
                int64_t ne0, int64_t ne1, int64_t ne2)
{
    if (l->out && l->n < l->cap) {
        struct cw_qwen35_tensor *t = &l->out[l->n];
        memset(t, 0, sizeof *t);
        /* ssm_a has no suffix, ssm_dt is a bias; everything else is a weight */
        const char *suffix = role == CW_T_SSM_A ? "" : role == CW_T_SSM_DT ? ".bias" : ".weight";
        if (layer < 0)
            snprintf(t->name, sizeof t->name, "%s%s", role_names[role], suffix);
        else
            snprintf(t->name, sizeof t->name, "blk.%d.%s%s", (int)layer, role_names[role], suffix);
        t->role = role;
        t->layer = layer;
        t->is_mtp = is_mtp;
        t->n_dims = n_dims;
        t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = 1;
    }
    l->n++;
}

size_t cw_qwen35_tensors(const struct cw_qwen35_hparams *hp, struct cw_qwen35_tensor *out, size_t cap)
{
    struct tlist l = {out, cap, 0};
    const int64_t E = hp->n_embd, V = hp->n_vocab, hd = hp->head_dim;
    const int64_t qdim = 2 * (int64_t)hp->n_head * hd, kvdim = (int64_t)hp->n_head_kv * hd;
    const int64_t key_dim = (int64_t)hp->ssm_n_k_heads * hp->ssm_d_state, value_dim = hp->ssm_inner;
    const int64_t Hv = hp->ssm_n_v_heads;
    const uint32_t n_all = hp->n_layer + hp->n_nextn;

    add(&l, CW_T_TOKEN_EMBD, -1, false, 2, E, V, 1);
    for (uint32_t u = 0; u < n_all; u++) {
        int32_t il = (int32_t)u;
        bool mtp = u >= hp->n_layer;
        add(&l, CW_T_ATTN_NORM, il, mtp, 1, E, 1, 1);
        add(&l, CW_T_POST_ATTN_NORM, il, mtp, 1, E, 1, 1);
        if (hp->layer_kind[u] == CW_LAYER_ATTENTION) {
            add(&l, CW_T_ATTN_Q, il, mtp, 2, E, qdim, 1);
            add(&l, CW_T_ATTN_K, il, mtp, 2, E, kvdim, 1);
            add(&l, CW_T_ATTN_V, il, mtp, 2, E, kvdim, 1);
            add(&l, CW_T_ATTN_OUTPUT, il, mtp, 2, (int64_t)hp->n_head * hd, E, 1);
            add(&l, CW_T_ATTN_Q_NORM, il, mtp, 1, hd, 1, 1);
            add(&l, CW_T_ATTN_K_NORM, il, mtp, 1, hd, 1, 1);
        } else {
            add(&l, CW_T_SSM_QKV, il, mtp, 2, E, 2 * key_dim + value_dim, 1);
            add(&l, CW_T_SSM_GATE, il, mtp, 2, E, value_dim, 1);
            add(&l, CW_T_SSM_CONV1D, il, mtp, 2, hp->ssm_conv, 2 * key_dim + value_dim, 1);
            add(&l, CW_T_SSM_DT, il, mtp, 1, Hv, 1, 1);
            add(&l, CW_T_SSM_A, il, mtp, 1, Hv, 1, 1);
            add(&l, CW_T_SSM_BETA, il, mtp, 2, E, Hv, 1);
            add(&l, CW_T_SSM_ALPHA, il, mtp, 2, E, Hv, 1);
            add(&l, CW_T_SSM_NORM, il, mtp, 1, hp->ssm_d_state, 1, 1);
            add(&l, CW_T_SSM_OUT, il, mtp, 2, value_dim, E, 1);
        }
        if (hp->arch == CW_ARCH_QWEN35MOE) {
            const int64_t ne = hp->n_expert, ff = hp->n_ff_exp, sh = hp->n_ff_shexp;
            add(&l, CW_T_FFN_GATE_INP, il, mtp, 2, E, ne, 1);
            add(&l, CW_T_FFN_GATE_EXPS, il, mtp, 3, E, ff, ne);
            add(&l, CW_T_FFN_UP_EXPS, il, mtp, 3, E, ff, ne);
            add(&l, CW_T_FFN_DOWN_EXPS, il, mtp, 3, ff, E, ne);
            /* the converter writes {E, 1}; llama.cpp accepts it for {E} */
            add(&l, CW_T_FFN_GATE_INP_SHEXP, il, mtp, 2, E, 1, 1);
            add(&l, CW_T_FFN_GATE_SHEXP, il, mtp, 2, E, sh, 1);
            add(&l, CW_T_FFN_UP_SHEXP, il, mtp, 2, E, sh, 1);
            add(&l, CW_T_FFN_DOWN_SHEXP, il, mtp, 2, sh, E, 1);
        } else {
            add(&l, CW_T_FFN_GATE, il, mtp, 2, E, hp->n_ff, 1);
            add(&l, CW_T_FFN_UP, il, mtp, 2, E, hp->n_ff, 1);
            add(&l, CW_T_FFN_DOWN, il, mtp, 2, hp->n_ff, E, 1);
        }
        if (mtp) {
            add(&l, CW_T_NEXTN_EH_PROJ, il, mtp, 2, 2 * E, E, 1);
            add(&l, CW_T_NEXTN_ENORM, il, mtp, 1, E, 1, 1);
            add(&l, CW_T_NEXTN_HNORM, il, mtp, 1, E, 1, 1);
            add(&l, CW_T_NEXTN_SHARED_HEAD_NORM, il, mtp, 1, E, 1, 1);
        }
    }
    add(&l, CW_T_OUTPUT_NORM, -1, false, 1, E, 1, 1);
    add(&l, CW_T_OUTPUT, -1, false, 2, E, V, 1);
    return l.n;
}

/* ---- budgets ------------------------------------------------------------ */

uint64_t cw_qwen35_kv_bytes_per_token(const struct cw_qwen35_hparams *hp)
{
    uint64_t n_attn = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        n_attn += hp->layer_kind[il] == CW_LAYER_ATTENTION;
    return n_attn * 2 /* K and V */ * (uint64_t)hp->n_head_kv * hp->head_dim * 2 /* f16 */;
}

uint64_t cw_qwen35_state_bytes_per_seq(const struct cw_qwen35_hparams *hp)
{
    uint64_t n_rec = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++)
        n_rec += hp->layer_kind[il] == CW_LAYER_DELTANET;
    uint64_t channels = 2ull * hp->ssm_n_k_heads * hp->ssm_d_state + hp->ssm_inner;
    uint64_t conv = (uint64_t)(hp->ssm_conv - 1) * channels;
    uint64_t delta = (uint64_t)hp->ssm_n_v_heads * hp->ssm_d_state * hp->ssm_d_state;
    return n_rec * (conv + delta) * 4;
}

uint64_t cw_qwen35_decode_bytes(const struct cw_qwen35_hparams *hp, const struct cw_qwen35_tensor *t,
                                uint64_t nbytes)
{
    if (t->is_mtp)
        return 0;
    switch (t->role) {
    case CW_T_TOKEN_EMBD:
        return t->ne[1] > 0 ? nbytes / (uint64_t)t->ne[1] : 0;
    case CW_T_FFN_GATE_EXPS:
    case CW_T_FFN_UP_EXPS:
    case CW_T_FFN_DOWN_EXPS:
        return hp->n_expert ? nbytes / hp->n_expert * hp->n_expert_used : nbytes;
    default:
        return nbytes;
    }
}

/* mkmodel.c — synthetic Qwen3.6 GGUF files (see mkmodel.h).
 *
 * Three phases: metadata (arch keys, tokenizer copied from a vocabulary
 * GGUF with the think/tool tokens given ids, chat template), the tensor
 * directory (cw_qwen35_tensors + the mix rules), then the data: a list of
 * (tensor, row chunk) work items that pthreads take from an atomic counter,
 * fill with seeded random values, quantise and pwrite at their offset. */
#include "mkmodel.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"

/* ---- mixes and the llama-quant rules ------------------------------------ */

static const char *const mix_names[] = {"q4_k_m", "q8_0", "q6_k", "bf16", "f32"};
/* llama.h LLAMA_FTYPE_* for general.file_type */
static const uint32_t mix_ftype[] = {15, 7, 18, 32, 0};

int cw_mix_from_name(const char *name)
{
    for (int i = 0; i < (int)(sizeof mix_names / sizeof *mix_names); i++)
        if (!strcasecmp(name, mix_names[i]))
            return i;
    return -1;
}

const char *cw_mix_name(enum cw_mix mix)
{
    return (unsigned)mix < sizeof mix_names / sizeof *mix_names ? mix_names[mix] : "?";
}

static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* tensor_allows_quantization: ≥2 real dims (ggml_n_dims ignores trailing
 * 1s), name ends in "weight", not a norm, router or conv. */
static bool quantisable(const struct cw_qwen35_tensor *t)
{
    if (t->ne[1] == 1 && t->ne[2] == 1)
        return false;
    return ends_with(t->name, "weight") && !strstr(t->name, "_norm.weight") &&
           !strstr(t->name, "ffn_gate_inp.weight") && !strstr(t->name, "ssm_conv1d");
}

/* llama-quant's fallback when ne0 is not a whole number of blocks */
static enum cw_qtype fallback(enum cw_qtype t, int64_t ne0)
{
    const struct cw_qtype_traits *tr = cw_qtype_traits(t);
    if (ne0 % tr->block_elems == 0)
        return t;
    enum cw_qtype r = t == CW_TYPE_Q4_K ? CW_TYPE_Q5_0
                    : t == CW_TYPE_Q5_K ? CW_TYPE_Q5_1
                    : t == CW_TYPE_Q6_K ? CW_TYPE_Q8_0
                                        : t;
    if (ne0 % cw_qtype_traits(r)->block_elems != 0)
        r = CW_TYPE_F16;
    return r;
}

enum cw_qtype cw_mkmodel_tensor_type(const struct cw_qwen35_hparams *hp, const struct cw_qwen35_tensor *t,
                                     enum cw_mix mix)
{
    if (!quantisable(t) || mix == CW_MIX_F32)
        return CW_TYPE_F32;
    if (mix == CW_MIX_BF16)
        return CW_TYPE_BF16;
    enum cw_qtype base = mix == CW_MIX_Q8_0 ? CW_TYPE_Q8_0 : mix == CW_MIX_Q6_K ? CW_TYPE_Q6_K : CW_TYPE_Q4_K;
    const int n_all = (int)(hp->n_layer + hp->n_nextn);
    const int il = t->layer;
    enum cw_qtype ty = base;
    switch (t->role) {
    case CW_T_OUTPUT:
        /* Q6_K unless the mix is Q8_0; Q8_0 when ne0 is not whole K blocks */
        if (t->ne[0] % cw_qtype_traits(base)->block_elems)
            return CW_TYPE_Q8_0;
        ty = base == CW_TYPE_Q8_0 ? CW_TYPE_Q8_0 : CW_TYPE_Q6_K;
        break;
    case CW_T_ATTN_V:
    case CW_T_SSM_QKV: /* "attn_qkv.weight" is attn_v-like; one per layer, so the counter is il */
        if (mix == CW_MIX_Q4_K_M && use_more_bits(il, n_all))
            ty = CW_TYPE_Q6_K;
        if (hp->n_expert == 8)
            ty = CW_TYPE_Q8_0;
        break;
    case CW_T_ATTN_K:
        if (hp->n_expert == 8)
            ty = CW_TYPE_Q8_0;
        break;
    case CW_T_ATTN_OUTPUT:
        if (hp->n_expert == 8 && mix == CW_MIX_Q4_K_M)
            ty = CW_TYPE_Q5_K;
        break;
    case CW_T_FFN_DOWN:
    case CW_T_FFN_DOWN_EXPS:
    case CW_T_FFN_DOWN_SHEXP:
        /* n_ffn_down = n_layer_all; the layer comes from the name (MoE) or
         * the running counter, which equals il (dense) */
        if (mix == CW_MIX_Q4_K_M && use_more_bits(il, n_all))
            ty = CW_TYPE_Q6_K;
        break;
    default:
        break;
    }
    return fallback(ty, t->ne[0]);
}

/* ---- defaults ----------------------------------------------------------- */

static const char *oracle_root(char *buf, size_t cap)
{
    const char *d = getenv("CWEN_ORACLE_DIR");
    int n = d && *d ? snprintf(buf, cap, "%s", d)
                    : snprintf(buf, cap, "%s/.cache/cwen-oracle", getenv("HOME") ? getenv("HOME") : "");
    if (n < 0 || (size_t)n >= cap)
        buf[0] = 0;
    return buf;
}

const char *cw_mkmodel_default_vocab(char *buf, size_t cap)
{
    char r[512];
    int n = snprintf(buf, cap, "%s/llama.cpp/models/ggml-vocab-qwen35.gguf", oracle_root(r, sizeof r));
    if (n < 0 || (size_t)n >= cap)
        buf[0] = 0;
    return buf;
}

const char *cw_mkmodel_default_template(char *buf, size_t cap)
{
    char r[512];
    int n = snprintf(buf, cap, "%s/llama.cpp/models/templates/Qwen3.5-4B.jinja", oracle_root(r, sizeof r));
    if (n < 0 || (size_t)n >= cap)
        buf[0] = 0;
    return buf;
}

/* ---- random numbers ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Approximately standard normal: the sum of four 16-bit uniforms (Irwin–Hall,
 * variance 65536²/3), cheap enough that quantisation dominates the time. */
static float gauss(uint64_t *s)
{
    uint64_t r = splitmix64(s);
    int32_t sum = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                  (int32_t)(r >> 48);
    return (float)(sum - 131070) * (1.0f / 37837.23f);
}

static float uniform01(uint64_t *s)
{
    return (float)(splitmix64(s) >> 40) * (1.0f / 16777216.0f);
}

/* Fills n values of tensor role `role`. Norm weights are stored with HF's
 * +1 folded in (≈ 1), ssm_norm is plain (≈ 1 too), ssm_a = −exp(A_log) with
 * A_log ~ U(0, ln 16) as HF initialises it, conv taps ~ U(−½, ½) (fan-in 4). */
static void fill(enum cw_qwen35_role role, float std, uint64_t *s, float *x, int64_t n)
{
    switch (role) {
    case CW_T_ATTN_NORM:
    case CW_T_POST_ATTN_NORM:
    case CW_T_OUTPUT_NORM:
    case CW_T_ATTN_Q_NORM:
    case CW_T_ATTN_K_NORM:
    case CW_T_SSM_NORM:
    case CW_T_NEXTN_ENORM:
    case CW_T_NEXTN_HNORM:
    case CW_T_NEXTN_SHARED_HEAD_NORM:
        for (int64_t i = 0; i < n; i++)
            x[i] = 1.0f + 0.05f * gauss(s);
        break;
    case CW_T_SSM_A:
        for (int64_t i = 0; i < n; i++)
            x[i] = -expf(uniform01(s) * logf(16.0f));
        break;
    case CW_T_SSM_DT:
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.1f * gauss(s);
        break;
    case CW_T_SSM_CONV1D:
        for (int64_t i = 0; i < n; i++)
            x[i] = uniform01(s) - 0.5f;
        break;
    default:
        for (int64_t i = 0; i < n; i++)
            x[i] = std * gauss(s);
        break;
    }
}

/* ---- tokenizer metadata ------------------------------------------------- */

enum { TOK_NORMAL = 1, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5 };

/* Qwen3's ids for its added non-special tokens; used when the fixture has a
 * [PAD] entry there (the qwen35 fixture is Qwen3's 151,936-entry vocab). */
static const struct {
    const char *text;
    int32_t qwen3_id;
} special_toks[6] = {
    {"<tool_call>", 151657}, {"</tool_call>", 151658}, {"<tool_response>", 151665},
    {"</tool_response>", 151666}, {"<think>", 151667}, {"</think>", 151668},
};

struct vocab {
    char **toks; /* n malloc'd strings */
    int32_t *types;
    uint64_t n;
};

static void vocab_free(struct vocab *v)
{
    if (v->toks)
        for (uint64_t i = 0; i < v->n; i++)
            free(v->toks[i]);
    free(v->toks);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static bool is_pad(const char *s)
{
    return !strncmp(s, "[PAD", 4);
}

static int64_t vocab_find(const struct vocab *v, const char *text)
{
    for (uint64_t i = 0; i < v->n; i++)
        if (!strcmp(v->toks[i], text))
            return (int64_t)i;
    return -1;
}

/* Builds the padded token list with the six think/tool tokens present.
 * They are Qwen3's added tokens with special=false, which llama.cpp's
 * converter (get_vocab_base) writes as USER_DEFINED. */
static int build_vocab(const struct cw_gguf *vg, uint64_t n_rows, struct vocab *v,
                       struct cw_mkmodel_result *res, struct cw_err *err)
{
    const struct cw_gguf_kv *tk = cw_gguf_find_kv(vg, "tokenizer.ggml.tokens");
    const struct cw_gguf_kv *tt = cw_gguf_find_kv(vg, "tokenizer.ggml.token_type");
    if (!tk || tk->value.type != CW_GGUF_ARRAY || tk->value.arr.type != CW_GGUF_STRING)
        return cw_errf(err, CW_ERR_FORMAT, "mkmodel: %s: no tokenizer.ggml.tokens", vg->path);
    uint64_t nf = tk->value.arr.n;
    if (tt && (tt->value.type != CW_GGUF_ARRAY || tt->value.arr.n != nf || tt->value.arr.type == CW_GGUF_STRING ||
               tt->value.arr.type == CW_GGUF_ARRAY))
        return cw_errf(err, CW_ERR_FORMAT, "mkmodel: %s: bad tokenizer.ggml.token_type", vg->path);
    if (n_rows < nf)
        return cw_errf(err, CW_ERR_INVALID, "mkmodel: vocabulary size %llu is below the %llu tokens of %s",
                       (unsigned long long)n_rows, (unsigned long long)nf, vg->path);
    v->n = n_rows;
    v->toks = calloc(n_rows, sizeof *v->toks);
    v->types = calloc(n_rows, sizeof *v->types);
    if (!v->toks || !v->types)
        return cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory for the vocabulary");
    for (uint64_t i = 0; i < nf; i++) {
        struct cw_gguf_str s = tk->value.arr.strs[i];
        if (!(v->toks[i] = malloc(s.len + 1)))
            return cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory for the vocabulary");
        memcpy(v->toks[i], s.ptr, s.len);
        v->toks[i][s.len] = 0;
        v->types[i] = tt ? (int32_t)cw_gguf_arr_i64(&tt->value, i) : TOK_NORMAL;
    }
    for (uint64_t i = nf; i < n_rows; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%llu]", (unsigned long long)i);
        v->toks[i] = strdup(buf);
        if (!v->toks[i])
            return cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory for the vocabulary");
        v->types[i] = TOK_UNUSED;
    }
    int32_t *ids[6] = {&res->id_tool_call, &res->id_tool_call_end, &res->id_tool_resp,
                       &res->id_tool_resp_end, &res->id_think, &res->id_think_end};
    uint64_t next_pad = 0;
    for (int k = 0; k < 6; k++) {
        int64_t id = vocab_find(v, special_toks[k].text);
        if (id < 0) {
            id = special_toks[k].qwen3_id;
            if ((uint64_t)id >= n_rows || !is_pad(v->toks[id])) {
                while (next_pad < n_rows && !is_pad(v->toks[next_pad]))
                    next_pad++;
                if (next_pad == n_rows)
                    return cw_errf(err, CW_ERR_INVALID, "mkmodel: no free [PAD] entry for %s",
                                   special_toks[k].text);
                id = (int64_t)next_pad;
            }
            free(v->toks[id]);
            v->toks[id] = strdup(special_toks[k].text);
            if (!v->toks[id])
                return cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory");
            v->types[id] = TOK_USER_DEFINED;
        }
        *ids[k] = (int32_t)id;
    }
    return 0;
}

static char *read_text(const char *path, struct cw_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cw_errf(err, CW_ERR_IO, "mkmodel: %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory reading %s", path);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096)
            break;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
}

/* ---- metadata ----------------------------------------------------------- */

static int set_metadata(struct cw_gguf_writer *w, const struct cw_mkmodel_opts *o, const struct cw_gguf *vg,
                        const struct vocab *v, const char *tmpl, struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &o->hp;
    const char *a = cw_qwen35_arch_name(hp->arch);
    char k[128], name[128];
#define K(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
    int rc = 0;
    rc |= cw_gguf_writer_set_str(w, "general.architecture", a);
    if (o->name)
        snprintf(name, sizeof name, "%s", o->name);
    else {
        const char *id = cw_qwen35_identify(hp, NULL);
        snprintf(name, sizeof name, "%s (synthetic)", id ? id : "qwen35 custom");
    }
    rc |= cw_gguf_writer_set_str(w, "general.name", name);
    rc |= cw_gguf_writer_set_u32(w, "general.file_type", mix_ftype[o->mix]);
    if (o->mix != CW_MIX_F32 && o->mix != CW_MIX_BF16)
        rc |= cw_gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= cw_gguf_writer_set_u32(w, K("context_length"), hp->n_ctx_train);
    rc |= cw_gguf_writer_set_u32(w, K("embedding_length"), hp->n_embd);
    rc |= cw_gguf_writer_set_u32(w, K("block_count"), hp->n_layer + hp->n_nextn);
    if (hp->n_nextn)
        rc |= cw_gguf_writer_set_u32(w, K("nextn_predict_layers"), hp->n_nextn);
    if (hp->arch == CW_ARCH_QWEN35)
        rc |= cw_gguf_writer_set_u32(w, K("feed_forward_length"), hp->n_ff);
    rc |= cw_gguf_writer_set_u32(w, K("attention.head_count"), hp->n_head);
    rc |= cw_gguf_writer_set_u32(w, K("attention.head_count_kv"), hp->n_head_kv);
    rc |= cw_gguf_writer_set_u32(w, K("attention.key_length"), hp->head_dim);
    rc |= cw_gguf_writer_set_u32(w, K("attention.value_length"), hp->head_dim);
    rc |= cw_gguf_writer_set_u32(w, K("rope.dimension_count"), hp->n_rot);
    rc |= cw_gguf_writer_set_f32(w, K("rope.freq_base"), hp->rope_base);
    rc |= cw_gguf_writer_set_arr(w, K("rope.dimension_sections"), CW_GGUF_I32, hp->rope_sections, 4);
    rc |= cw_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), hp->eps);
    if (hp->arch == CW_ARCH_QWEN35MOE) {
        rc |= cw_gguf_writer_set_u32(w, K("expert_count"), hp->n_expert);
        rc |= cw_gguf_writer_set_u32(w, K("expert_used_count"), hp->n_expert_used);
        rc |= cw_gguf_writer_set_u32(w, K("expert_feed_forward_length"), hp->n_ff_exp);
        rc |= cw_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), hp->n_ff_shexp);
    }
    rc |= cw_gguf_writer_set_u32(w, K("ssm.conv_kernel"), hp->ssm_conv);
    rc |= cw_gguf_writer_set_u32(w, K("ssm.state_size"), hp->ssm_d_state);
    rc |= cw_gguf_writer_set_u32(w, K("ssm.group_count"), hp->ssm_n_k_heads);
    rc |= cw_gguf_writer_set_u32(w, K("ssm.time_step_rank"), hp->ssm_n_v_heads);
    rc |= cw_gguf_writer_set_u32(w, K("ssm.inner_size"), hp->ssm_inner);
    rc |= cw_gguf_writer_set_u32(w, K("full_attention_interval"), 4);
    uint8_t rec[CW_MAX_LAYERS];
    for (uint32_t i = 0; i < hp->n_layer + hp->n_nextn; i++)
        rec[i] = hp->layer_kind[i] == CW_LAYER_DELTANET;
    rc |= cw_gguf_writer_set_arr(w, K("attention.recurrent_layers"), CW_GGUF_BOOL, rec,
                                 hp->n_layer + hp->n_nextn);
#undef K
    /* tokenizer: every tokenizer.* key of the vocabulary file, tokens and
     * types rebuilt, the template replaced */
    bool has_add_bos = false;
    for (uint64_t i = 0; i < vg->n_kv; i++) {
        const struct cw_gguf_kv *kv = &vg->kv[i];
        char key[256];
        cw_gguf_str_copy(kv->key, key, sizeof key);
        if (strncmp(key, "tokenizer.", 10))
            continue;
        if (!strcmp(key, "tokenizer.ggml.tokens")) {
            rc |= cw_gguf_writer_set_arr_str(w, key, (const char *const *)v->toks, v->n);
        } else if (!strcmp(key, "tokenizer.ggml.token_type")) {
            rc |= cw_gguf_writer_set_arr(w, key, CW_GGUF_I32, v->types, v->n);
        } else if (!strcmp(key, "tokenizer.chat_template")) {
            continue;
        } else {
            if (!strcmp(key, "tokenizer.ggml.add_bos_token"))
                has_add_bos = true;
            rc |= cw_gguf_writer_set_value(w, key, &kv->value);
        }
    }
    /* Qwen chat models end a turn with <|im_end|>; real Qwen GGUFs name it eos
     * and never add a BOS */
    int64_t im_end = vocab_find(v, "<|im_end|>");
    if (im_end >= 0)
        rc |= cw_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)im_end);
    if (!has_add_bos)
        rc |= cw_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    rc |= cw_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    if (rc)
        return cw_errf(err, CW_ERR_NOMEM, "mkmodel: could not set metadata");
    return 0;
}

/* ---- data --------------------------------------------------------------- */

#define CHUNK_ELEMS (1 << 20) /* rows per work item ≈ this many elements */

struct item {
    uint32_t tensor;
    uint32_t chunk;
    int64_t row0, n_rows;
};

struct job {
    const struct cw_mkmodel_opts *o;
    const struct cw_qwen35_tensor *ts;
    const enum cw_qtype *types;
    const uint64_t *offsets; /* absolute file offset of each tensor */
    const struct item *items;
    size_t n_items;
    atomic_size_t next;
    atomic_int failed;
    int fd;
    float std, out_std, hot_scale;
    struct cw_err err; /* first failure */
    pthread_mutex_t mu;
};

static void *worker(void *arg)
{
    struct job *j = arg;
    float *x = NULL;
    uint8_t *q = NULL;
    size_t cap = 0;
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n_items || atomic_load(&j->failed))
            break;
        const struct item *it = &j->items[i];
        const struct cw_qwen35_tensor *t = &j->ts[it->tensor];
        const int64_t n = it->n_rows * t->ne[0];
        const size_t row_bytes = cw_qtype_row_bytes(j->types[it->tensor], t->ne[0]);
        const size_t nbytes = row_bytes * (size_t)it->n_rows;
        if ((size_t)n > cap) {
            free(x);
            free(q);
            cap = (size_t)n;
            x = malloc(cap * sizeof *x);
            q = malloc(cap * sizeof *x); /* every written type is ≤ 4 bytes/element */
            if (!x || !q) {
                pthread_mutex_lock(&j->mu);
                if (!atomic_exchange(&j->failed, 1))
                    cw_errf(&j->err, CW_ERR_NOMEM, "mkmodel: out of memory");
                pthread_mutex_unlock(&j->mu);
                break;
            }
        }
        /* the seed depends on (seed, tensor name, chunk) only */
        uint64_t s = j->o->seed ^ fnv1a(t->name);
        s = splitmix64(&s) ^ ((uint64_t)it->chunk * 0xd1342543de82ef95ull);
        splitmix64(&s);
        fill(t->role, t->role == CW_T_OUTPUT ? j->out_std : j->std, &s, x, n);
        if (t->role == CW_T_OUTPUT && j->o->hot_tokens)
            for (int64_t r = 0; r < it->n_rows; r++)
                if (cw_mkmodel_is_hot_row(j->o->hp.n_vocab, j->o->hot_tokens, it->row0 + r))
                    for (int64_t e = 0; e < t->ne[0]; e++)
                        x[r * t->ne[0] + e] *= j->hot_scale;
        cw_qtype_traits(j->types[it->tensor])->quant_row(x, q, n);
        uint64_t off = j->offsets[it->tensor] + (uint64_t)it->row0 * row_bytes;
        size_t done = 0;
        while (done < nbytes) {
            ssize_t r = pwrite(j->fd, q + done, nbytes - done, (off_t)(off + done));
            if (r <= 0) {
                pthread_mutex_lock(&j->mu);
                if (!atomic_exchange(&j->failed, 1))
                    cw_errf(&j->err, CW_ERR_IO, "mkmodel: %s: write: %s", j->o->out_path,
                            r < 0 ? strerror(errno) : "short write");
                pthread_mutex_unlock(&j->mu);
                break;
            }
            done += (size_t)r;
        }
    }
    free(x);
    free(q);
    return NULL;
}

bool cw_mkmodel_is_hot_row(uint32_t n_vocab, uint32_t n_hot, int64_t row)
{
    if (n_hot == 0 || n_hot > n_vocab)
        return false;
    const int64_t stride = n_vocab / n_hot;
    return row / stride < n_hot && row % stride == stride / 2;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cw_mkmodel(const struct cw_mkmodel_opts *o, struct cw_mkmodel_result *res, struct cw_err *err)
{
    int rc = -1, fd = -1;
    struct cw_gguf vg = {0};
    struct vocab voc = {0};
    char *tmpl = NULL;
    struct cw_qwen35_tensor *ts = NULL;
    enum cw_qtype *types = NULL;
    uint64_t *offsets = NULL;
    struct item *items = NULL;
    pthread_t *th = NULL;
    struct cw_gguf_writer *w = NULL;
    char vbuf[1024], tbuf[1024];
    memset(res, 0, sizeof *res);

    if (cw_qwen35_hparams_check(&o->hp, err))
        return cw_err_prefix(err, "mkmodel");
    if ((unsigned)o->mix > CW_MIX_F32)
        return cw_errf(err, CW_ERR_INVALID, "mkmodel: bad mix %d", (int)o->mix);
    if (o->hot_tokens > o->hp.n_vocab)
        return cw_errf(err, CW_ERR_INVALID, "mkmodel: %u hot tokens > vocabulary %u", o->hot_tokens,
                       o->hp.n_vocab);
    const char *vpath = o->vocab_path ? o->vocab_path : cw_mkmodel_default_vocab(vbuf, sizeof vbuf);
    const char *tpath = o->template_path ? o->template_path : cw_mkmodel_default_template(tbuf, sizeof tbuf);
    if (cw_gguf_open(&vg, vpath, err))
        goto done;
    if (build_vocab(&vg, o->hp.n_vocab, &voc, res, err))
        goto done;
    if (!(tmpl = read_text(tpath, err)))
        goto done;

    size_t nt = cw_qwen35_tensors(&o->hp, NULL, 0);
    ts = calloc(nt, sizeof *ts);
    types = calloc(nt, sizeof *types);
    offsets = calloc(nt, sizeof *offsets);
    w = cw_gguf_writer_new(CW_GGUF_DEFAULT_ALIGNMENT);
    if (!ts || !types || !offsets || !w) {
        cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    cw_qwen35_tensors(&o->hp, ts, nt);
    if (set_metadata(w, o, &vg, &voc, tmpl, err))
        goto done;
    size_t n_items = 0;
    for (size_t i = 0; i < nt; i++) {
        types[i] = cw_mkmodel_tensor_type(&o->hp, &ts[i], o->mix);
        if (cw_gguf_writer_add_tensor(w, ts[i].name, ts[i].n_dims, ts[i].ne, types[i], err) < 0)
            goto done;
        int64_t rows = ts[i].ne[1] * ts[i].ne[2];
        int64_t per = ts[i].ne[0] >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / ts[i].ne[0];
        n_items += (size_t)((rows + per - 1) / per);
        res->n_params += (uint64_t)(rows * ts[i].ne[0]);
        res->decode_bytes +=
            cw_qwen35_decode_bytes(&o->hp, &ts[i], cw_qtype_row_bytes(types[i], ts[i].ne[0]) * (uint64_t)rows);
    }
    res->n_tensors = nt;
    res->file_size = cw_gguf_writer_total_size(w);
    if (o->dry_run) {
        rc = 0;
        goto done;
    }

    items = calloc(n_items, sizeof *items);
    if (!items) {
        cw_errf(err, CW_ERR_NOMEM, "mkmodel: out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < nt; i++) {
        offsets[i] = cw_gguf_writer_tensor_offset(w, (int64_t)i);
        int64_t rows = ts[i].ne[1] * ts[i].ne[2];
        int64_t per = ts[i].ne[0] >= CHUNK_ELEMS ? 1 : CHUNK_ELEMS / ts[i].ne[0];
        for (int64_t r = 0, c = 0; r < rows; r += per, c++)
            items[k++] = (struct item){(uint32_t)i, (uint32_t)c, r, rows - r < per ? rows - r : per};
    }

    fd = open(o->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        cw_errf(err, CW_ERR_IO, "mkmodel: %s: %s", o->out_path, strerror(errno));
        goto done;
    }
    if (cw_gguf_writer_write_header(w, fd, err))
        goto done;

    int n_threads = o->n_threads > 0 ? o->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1)
        n_threads = 1;
    struct job j = {.o = o, .ts = ts, .types = types, .offsets = offsets, .items = items,
                    .n_items = n_items, .fd = fd, .std = o->std > 0 ? o->std : CW_MKMODEL_DEFAULT_STD};
    /* The LM head is scaled apart from the rest: with the hidden state at unit
     * RMS after output_norm, logit std = out_std·√E, and only a logit spread
     * of several units gives peaked next-token distributions over ~10⁵ rows
     * (std 0.1 everywhere gives mean top-1 ≈ 0.003 at E = 256). */
    j.hot_scale = o->hot_scale > 0 ? o->hot_scale : CW_MKMODEL_DEFAULT_HOT_SCALE;
    j.out_std = (o->logit_std > 0 ? o->logit_std : CW_MKMODEL_DEFAULT_LOGIT_STD) / sqrtf((float)o->hp.n_embd);
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    th = calloc((size_t)n_threads, sizeof *th);
    double t0 = now_s();
    int started = 0;
    for (; th && started < n_threads; started++)
        if (pthread_create(&th[started], NULL, worker, &j))
            break;
    if (started == 0)
        worker(&j); /* no threads available: do it here */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.mu);
    res->seconds = now_s() - t0;
    if (atomic_load(&j.failed)) {
        *err = j.err;
        goto done;
    }
    if (cw_gguf_writer_finish(w, fd, err))
        goto done;
    if (close(fd)) {
        fd = -1;
        cw_errf(err, CW_ERR_IO, "mkmodel: %s: close: %s", o->out_path, strerror(errno));
        goto done;
    }
    fd = -1;
    rc = 0;
done:
    if (fd >= 0) {
        close(fd);
        unlink(o->out_path);
    }
    free(th);
    free(items);
    cw_gguf_writer_free(w);
    free(offsets);
    free(types);
    free(ts);
    free(tmpl);
    vocab_free(&voc);
    cw_gguf_close(&vg);
    return rc;
}

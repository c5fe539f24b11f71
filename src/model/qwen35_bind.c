/* qwen35_bind.c — GGUF tensor directory → struct cw_qwen35_weights.
 *
 * Owns name construction, the shape and type rule of every tensor role, the
 * alternative forms llama.cpp's loader accepts, and the "nothing left over"
 * check. It reads no tensor data: the structs point into the mapping. */
#include "model/qwen35_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which types a role may have: norms, conv taps and the per-head vectors are
 * read as plain floats by every backend; matrices go through the matmul
 * kernels, which dispatch on any type that has a dequantiser. */
enum want { W_F32, W_MAT };

struct binder {
    const struct cw_gguf *g;
    const struct cw_qwen35_hparams *hp;
    uint8_t *used; /* one flag per file tensor */
    struct cw_err *err;
};

static void fmt_shape(char *buf, size_t cap, const int64_t *ne, int nd)
{
    size_t o = (size_t)snprintf(buf, cap, "{");
    for (int i = 0; i < nd && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "}");
}

static int file_dims(const struct cw_gguf_tensor *t)
{
    int nd = 1;
    for (int i = 1; i < CW_GGUF_MAX_DIMS; i++)
        if (t->ne[i] != 1)
            nd = i + 1;
    return nd;
}

static bool type_ok(enum want want, enum cw_qtype type)
{
    if (want == W_F32)
        return type == CW_TYPE_F32;
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    return tr && tr->name && tr->dequant_row && type != CW_TYPE_I8 && type != CW_TYPE_I16 &&
           type != CW_TYPE_I32 && type != CW_TYPE_I64 && type != CW_TYPE_F64;
}

static const char *want_name(enum want want)
{
    return want == W_F32 ? "f32" : "a matrix type (f32, f16, bf16 or a quantised type)";
}

/* Binds tensor `name` with expected shape ne[0..nd) (trailing dims 1).
 * A tensor stored with extra trailing dims of 1 ({E, 1} for {E}) matches.
 * optional: absence leaves out zeroed and is not an error. */
static int bind_as(struct binder *b, struct cw_wt *out, const char *name, enum want want,
                   bool optional, int nd, int64_t ne0, int64_t ne1, int64_t ne2)
{
    const int64_t ne[3] = {ne0, ne1, ne2};
    char exp[96], got[96];
    fmt_shape(exp, sizeof exp, ne, nd);
    memset(out, 0, sizeof *out);
    int64_t idx = cw_gguf_find_tensor_index(b->g, name);
    if (idx < 0) {
        if (optional)
            return 0;
        return cw_errf(b->err, CW_ERR_FORMAT, "%s: tensor %s %s of %s: missing", b->g->path,
                       name, exp, want_name(want));
    }
    const struct cw_gguf_tensor *t = &b->g->tensors[idx];
    fmt_shape(got, sizeof got, t->ne, file_dims(t));
    bool shape_ok = t->ne[3] == 1;
    for (int i = 0; i < 3; i++)
        shape_ok = shape_ok && t->ne[i] == (i < nd ? ne[i] : 1);
    if (!shape_ok || !type_ok(want, t->type))
        return cw_errf(b->err, CW_ERR_FORMAT,
                       "%s: tensor %s: expected %s of %s, file has %s %s", b->g->path, name,
                       exp, want_name(want), got, cw_qtype_name(t->type));
    if (b->used[idx])
        return cw_errf(b->err, CW_ERR_FORMAT, "%s: tensor %s bound twice", b->g->path, name);
    b->used[idx] = 1;
    out->type = t->type;
    out->data = t->data;
    for (int i = 0; i < 3; i++)
        out->ne[i] = t->ne[i];
    out->nb1 = cw_qtype_row_bytes(t->type, t->ne[0]);
    out->nb2 = out->nb1 * (size_t)t->ne[1];
    return 0;
}

static bool has(const struct binder *b, const char *name)
{
    return cw_gguf_find_tensor_index(b->g, name) >= 0;
}

/* rows [r0, r0+n) of every expert slice of w */
static struct cw_wt rows(struct cw_wt w, int64_t r0, int64_t n)
{
    w.data = (const uint8_t *)w.data + (size_t)r0 * w.nb1;
    w.ne[1] = n;
    return w;
}

#define NAME(buf, il, suffix) snprintf(buf, sizeof buf, "blk.%u.%s", (unsigned)(il), suffix)

static int bind_attn(struct binder *b, unsigned il, struct cw_qwen35_attn_w *a)
{
    const struct cw_qwen35_hparams *hp = b->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim;
    const int64_t nq = 2 * (int64_t)hp->n_head * hd, nkv = (int64_t)hp->n_head_kv * hd;
    char n[CW_GGUF_MAX_NAME];
    NAME(n, il, "attn_q.weight");
    if (!has(b, n)) {
        /* fused form: rows [q+gate | k | v] */
        char nf[CW_GGUF_MAX_NAME];
        NAME(nf, il, "attn_qkv.weight");
        if (has(b, nf)) {
            struct cw_wt f;
            if (bind_as(b, &f, nf, W_MAT, false, 2, E, nq + 2 * nkv, 1))
                return -1;
            a->q = rows(f, 0, nq);
            a->k = rows(f, nq, nkv);
            a->v = rows(f, nq + nkv, nkv);
            goto rest;
        }
    }
    if (bind_as(b, &a->q, n, W_MAT, false, 2, E, nq, 1))
        return -1;
    NAME(n, il, "attn_k.weight");
    if (bind_as(b, &a->k, n, W_MAT, false, 2, E, nkv, 1))
        return -1;
    NAME(n, il, "attn_v.weight");
    if (bind_as(b, &a->v, n, W_MAT, false, 2, E, nkv, 1))
        return -1;
rest:
    NAME(n, il, "attn_output.weight");
    if (bind_as(b, &a->o, n, W_MAT, false, 2, (int64_t)hp->n_head * hd, E, 1))
        return -1;
    NAME(n, il, "attn_q_norm.weight");
    if (bind_as(b, &a->q_norm, n, W_F32, false, 1, hd, 1, 1))
        return -1;
    NAME(n, il, "attn_k_norm.weight");
    return bind_as(b, &a->k_norm, n, W_F32, false, 1, hd, 1, 1);
}

static int bind_ssm(struct binder *b, unsigned il, struct cw_qwen35_ssm_w *s)
{
    const struct cw_qwen35_hparams *hp = b->hp;
    const int64_t E = hp->n_embd, C = cw_qwen35_conv_channels(hp);
    const int64_t Hv = hp->ssm_n_v_heads, dv = hp->ssm_d_state, inner = hp->ssm_inner;
    char n[CW_GGUF_MAX_NAME];
    NAME(n, il, "attn_qkv.weight");
    if (bind_as(b, &s->qkv, n, W_MAT, false, 2, E, C, 1))
        return -1;
    NAME(n, il, "attn_gate.weight");
    if (bind_as(b, &s->gate, n, W_MAT, false, 2, E, inner, 1))
        return -1;
    NAME(n, il, "ssm_conv1d.weight");
    if (bind_as(b, &s->conv1d, n, W_F32, false, 2, hp->ssm_conv, C, 1))
        return -1;
    NAME(n, il, "ssm_dt.bias");
    if (bind_as(b, &s->dt, n, W_F32, false, 1, Hv, 1, 1))
        return -1;
    NAME(n, il, "ssm_a");
    if (bind_as(b, &s->a, n, W_F32, false, 1, Hv, 1, 1))
        return -1;
    NAME(n, il, "ssm_beta.weight");
    if (bind_as(b, &s->beta, n, W_MAT, false, 2, E, Hv, 1))
        return -1;
    NAME(n, il, "ssm_alpha.weight");
    if (bind_as(b, &s->alpha, n, W_MAT, false, 2, E, Hv, 1))
        return -1;
    NAME(n, il, "ssm_norm.weight");
    if (bind_as(b, &s->norm, n, W_F32, false, 1, dv, 1, 1))
        return -1;
    NAME(n, il, "ssm_out.weight");
    return bind_as(b, &s->out, n, W_MAT, false, 2, inner, E, 1);
}

static int bind_moe(struct binder *b, unsigned il, struct cw_qwen35_moe_w *m)
{
    const struct cw_qwen35_hparams *hp = b->hp;
    const int64_t E = hp->n_embd, X = hp->n_expert, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    char n[CW_GGUF_MAX_NAME];
    NAME(n, il, "ffn_gate_inp.weight");
    if (bind_as(b, &m->gate_inp, n, W_MAT, false, 2, E, X, 1))
        return -1;
    NAME(n, il, "ffn_gate_exps.weight");
    if (!has(b, n)) {
        /* fused form: per expert, gate rows first, then up */
        char nf[CW_GGUF_MAX_NAME];
        NAME(nf, il, "ffn_gate_up_exps.weight");
        if (has(b, nf)) {
            struct cw_wt f;
            if (bind_as(b, &f, nf, W_MAT, false, 3, E, 2 * F, X))
                return -1;
            m->gate_exps = rows(f, 0, F);
            m->up_exps = rows(f, F, F);
            goto down;
        }
    }
    if (bind_as(b, &m->gate_exps, n, W_MAT, false, 3, E, F, X))
        return -1;
    NAME(n, il, "ffn_up_exps.weight");
    if (bind_as(b, &m->up_exps, n, W_MAT, false, 3, E, F, X))
        return -1;
down:
    NAME(n, il, "ffn_down_exps.weight");
    if (bind_as(b, &m->down_exps, n, W_MAT, false, 3, F, E, X))
        return -1;
    NAME(n, il, "ffn_gate_inp_shexp.weight"); /* {E} or {E, 1}: same ne */
    if (bind_as(b, &m->gate_inp_shexp, n, W_MAT, false, 1, E, 1, 1))
        return -1;
    NAME(n, il, "ffn_gate_shexp.weight");
    if (bind_as(b, &m->gate_shexp, n, W_MAT, false, 2, E, S, 1))
        return -1;
    NAME(n, il, "ffn_up_shexp.weight");
    if (bind_as(b, &m->up_shexp, n, W_MAT, false, 2, E, S, 1))
        return -1;
    NAME(n, il, "ffn_down_shexp.weight");
    return bind_as(b, &m->down_shexp, n, W_MAT, false, 2, S, E, 1);
}

static int bind_ffn(struct binder *b, unsigned il, struct cw_qwen35_ffn_w *f)
{
    const int64_t E = b->hp->n_embd, F = b->hp->n_ff;
    char n[CW_GGUF_MAX_NAME];
    NAME(n, il, "ffn_gate.weight");
    if (bind_as(b, &f->gate, n, W_MAT, false, 2, E, F, 1))
        return -1;
    NAME(n, il, "ffn_up.weight");
    if (bind_as(b, &f->up, n, W_MAT, false, 2, E, F, 1))
        return -1;
    NAME(n, il, "ffn_down.weight");
    return bind_as(b, &f->down, n, W_MAT, false, 2, F, E, 1);
}

static int bind_layer(struct binder *b, unsigned il, enum cw_layer_kind kind,
                      struct cw_qwen35_layer_w *l)
{
    const int64_t E = b->hp->n_embd;
    char n[CW_GGUF_MAX_NAME];
    l->kind = kind;
    NAME(n, il, "attn_norm.weight");
    if (bind_as(b, &l->attn_norm, n, W_F32, false, 1, E, 1, 1))
        return -1;
    NAME(n, il, "post_attention_norm.weight");
    if (bind_as(b, &l->post_attn_norm, n, W_F32, false, 1, E, 1, 1))
        return -1;
    if (kind == CW_LAYER_ATTENTION ? bind_attn(b, il, &l->attn) : bind_ssm(b, il, &l->ssm))
        return -1;
    return b->hp->arch == CW_ARCH_QWEN35MOE ? bind_moe(b, il, &l->moe)
                                            : bind_ffn(b, il, &l->ffn);
}

static int bind_mtp(struct binder *b, unsigned il, struct cw_qwen35_mtp_w *m)
{
    const int64_t E = b->hp->n_embd, V = b->hp->n_vocab;
    char n[CW_GGUF_MAX_NAME];
    if (bind_layer(b, il, CW_LAYER_ATTENTION, &m->layer))
        return -1;
    NAME(n, il, "nextn.eh_proj.weight");
    if (bind_as(b, &m->eh_proj, n, W_MAT, false, 2, 2 * E, E, 1))
        return -1;
    NAME(n, il, "nextn.enorm.weight");
    if (bind_as(b, &m->enorm, n, W_F32, false, 1, E, 1, 1))
        return -1;
    NAME(n, il, "nextn.hnorm.weight");
    if (bind_as(b, &m->hnorm, n, W_F32, false, 1, E, 1, 1))
        return -1;
    NAME(n, il, "nextn.shared_head_norm.weight");
    if (bind_as(b, &m->shared_head_norm, n, W_F32, false, 1, E, 1, 1))
        return -1;
    NAME(n, il, "nextn.embed_tokens.weight");
    if (bind_as(b, &m->embed_tokens, n, W_MAT, true, 2, E, V, 1))
        return -1;
    NAME(n, il, "nextn.shared_head_head.weight");
    return bind_as(b, &m->shared_head_head, n, W_MAT, true, 2, E, V, 1);
}

int cw_qwen35_bind(struct cw_qwen35_weights *w, const struct cw_gguf *g,
                   const struct cw_qwen35_hparams *hp, struct cw_err *err)
{
    int rc = -1;
    memset(w, 0, sizeof *w);
    w->hp = *hp;
    if (hp->n_nextn > 1)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "%s: %u MTP layers (only 1 is supported)",
                       g->path, hp->n_nextn);
    struct binder b = {g, hp, calloc(g->n_tensors ? g->n_tensors : 1, 1), err};
    w->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *w->layers);
    if (!b.used || !w->layers) {
        cw_errf(err, CW_ERR_NOMEM, "bind: out of memory");
        goto done;
    }
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if (bind_as(&b, &w->token_embd, "token_embd.weight", W_MAT, false, 2, E, V, 1) ||
        bind_as(&b, &w->output_norm, "output_norm.weight", W_F32, false, 1, E, 1, 1) ||
        bind_as(&b, &w->output, "output.weight", W_MAT, true, 2, E, V, 1))
        goto done;
    if (!w->output.data)
        w->output = w->token_embd; /* tied embeddings, as llama.cpp's loader allows */
    for (uint32_t il = 0; il < hp->n_layer; il++)
        if (bind_layer(&b, il, (enum cw_layer_kind)hp->layer_kind[il], &w->layers[il]))
            goto done;
    if (hp->n_nextn == 1) {
        if (bind_mtp(&b, hp->n_layer, &w->mtp))
            goto done;
        w->has_mtp = true;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (b.used[i])
            continue;
        const struct cw_gguf_tensor *t = &g->tensors[i];
        char got[96];
        fmt_shape(got, sizeof got, t->ne, file_dims(t));
        cw_errf(err, CW_ERR_FORMAT,
                "%s: tensor %s %s %s is not part of a %s model with %u layers and %u MTP "
                "layers", g->path, t->name, got, cw_qtype_name(t->type),
                cw_qwen35_arch_name(hp->arch), hp->n_layer, hp->n_nextn);
        goto done;
    }
    rc = 0;
done:
    free(b.used);
    if (rc)
        cw_qwen35_weights_free(w);
    return rc;
}

void cw_qwen35_weights_free(struct cw_qwen35_weights *w)
{
    free(w->layers);
    memset(w, 0, sizeof *w);
}

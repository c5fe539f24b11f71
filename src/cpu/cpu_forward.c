/* cpu_forward.c — the CPU forward pass of Qwen3.6 (see cpu_forward.h).
 *
 * Reads top to bottom: work buffers and cache management first, then one
 * function per step of a block (DeltaNet, gated attention, MoE, dense FFN),
 * the block itself (one switch on the layer kind), the main pass and the MTP
 * pass. Facts: qwen36-model.md §3. */
#include "cpu/cpu_forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_deltanet.h"
#include "cpu/cpu_gemv.h"
#include "cpu/cpu_moe.h"
#include "cpu/cpu_ops.h"

/* ---- weights the kernels must support --------------------------------------
 * A walk over every matrix, used to refuse types without a CPU kernel (by
 * name) and to size the matmul scratch for a batch. */

typedef void (*visit_fn)(void *ctx, const char *name, const struct cw_wt *t, bool is_expert);

static void visit(visit_fn f, void *ctx, int il, const char *role, const struct cw_wt *t,
                  bool is_expert)
{
    char name[CW_GGUF_MAX_NAME];
    if (il < 0)
        snprintf(name, sizeof name, "%s", role);
    else
        snprintf(name, sizeof name, "blk.%d.%s", il, role);
    if (t->data)
        f(ctx, name, t, is_expert);
}

static void visit_layer(visit_fn f, void *ctx, int il, const struct cw_qwen35_layer_w *l)
{
    if (l->kind == CW_LAYER_ATTENTION) {
        visit(f, ctx, il, "attn_q", &l->attn.q, false);
        visit(f, ctx, il, "attn_k", &l->attn.k, false);
        visit(f, ctx, il, "attn_v", &l->attn.v, false);
        visit(f, ctx, il, "attn_output", &l->attn.o, false);
    } else {
        visit(f, ctx, il, "attn_qkv", &l->ssm.qkv, false);
        visit(f, ctx, il, "attn_gate", &l->ssm.gate, false);
        visit(f, ctx, il, "ssm_beta", &l->ssm.beta, false);
        visit(f, ctx, il, "ssm_alpha", &l->ssm.alpha, false);
        visit(f, ctx, il, "ssm_out", &l->ssm.out, false);
    }
    visit(f, ctx, il, "ffn_gate_inp", &l->moe.gate_inp, false);
    visit(f, ctx, il, "ffn_gate_exps", &l->moe.gate_exps, true);
    visit(f, ctx, il, "ffn_up_exps", &l->moe.up_exps, true);
    visit(f, ctx, il, "ffn_down_exps", &l->moe.down_exps, true);
    visit(f, ctx, il, "ffn_gate_inp_shexp", &l->moe.gate_inp_shexp, false);
    visit(f, ctx, il, "ffn_gate_shexp", &l->moe.gate_shexp, false);
    visit(f, ctx, il, "ffn_up_shexp", &l->moe.up_shexp, false);
    visit(f, ctx, il, "ffn_down_shexp", &l->moe.down_shexp, false);
    visit(f, ctx, il, "ffn_gate", &l->ffn.gate, false);
    visit(f, ctx, il, "ffn_up", &l->ffn.up, false);
    visit(f, ctx, il, "ffn_down", &l->ffn.down, false);
}

static void visit_all(visit_fn f, void *ctx, const struct cw_qwen35_weights *w)
{
    visit(f, ctx, -1, "token_embd", &w->token_embd, false);
    visit(f, ctx, -1, "output", &w->output, false);
    for (uint32_t il = 0; il < w->hp.n_layer; il++)
        visit_layer(f, ctx, (int)il, &w->layers[il]);
    if (w->has_mtp) {
        int il = (int)w->hp.n_layer;
        visit_layer(f, ctx, il, &w->mtp.layer);
        visit(f, ctx, il, "nextn.eh_proj", &w->mtp.eh_proj, false);
        visit(f, ctx, il, "nextn.embed_tokens", &w->mtp.embed_tokens, false);
        visit(f, ctx, il, "nextn.shared_head_head", &w->mtp.shared_head_head, false);
    }
}

struct support_check {
    const char *bad; /* first unsupported tensor */
    char name[CW_GGUF_MAX_NAME];
    enum cw_qtype type;
};

static void check_one(void *ctx, const char *name, const struct cw_wt *t, bool is_expert)
{
    struct support_check *c = ctx;
    if (!c->bad && !cw_cpu_supports(t->type)) {
        snprintf(c->name, sizeof c->name, "%s", name);
        c->bad = c->name;
        c->type = t->type;
    }
}

int cw_cpu_model_init(struct cw_cpu_model *m, const struct cw_qwen35_weights *w,
                      struct cw_pool *pool, int64_t n_ctx_max, struct cw_err *err)
{
    struct support_check c = {0};
    visit_all(check_one, &c, w);
    if (c.bad)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cpu: tensor %s: type %s has no CPU kernel",
                       c.bad, cw_qtype_name(c.type));
    m->w = w;
    m->pool = pool;
    m->n_ctx_max = n_ctx_max > 0 ? n_ctx_max : (int64_t)w->hp.n_ctx_train;
    m->tap = NULL;
    m->tap_ctx = NULL;
    return 0;
}

/* ---- dimensions -------------------------------------------------------------- */

static struct cw_deltanet_dims dn_dims(const struct cw_qwen35_hparams *hp)
{
    return (struct cw_deltanet_dims){(int)hp->ssm_n_k_heads, (int)hp->ssm_n_v_heads,
                                     (int)hp->ssm_d_state,   (int)hp->ssm_d_state,
                                     (int)hp->ssm_conv,      hp->eps};
}

static struct cw_attn_dims attn_dims(const struct cw_qwen35_hparams *hp)
{
    struct cw_attn_dims d = {(int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim, hp->eps,
                             {(int)hp->n_rot, hp->rope_base, {0, 0, 0, 0}}};
    for (int i = 0; i < 4; i++)
        d.rope.sections[i] = hp->rope_sections[i];
    return d;
}

/* ---- work buffers ------------------------------------------------------------
 * One set per sequence, sized for a batch of n tokens: [n][width] rows. */

struct ws {
    float *h;       /* [n][E] residual stream */
    float *x;       /* [n][E] normed input of a sub-block */
    float *sub_out; /* [n][E] output of attention / DeltaNet / FFN */
    float *hn;      /* [n][E] final-normed hidden */
    float *cat;     /* [n][2E] MTP: [enorm(e) | hnorm(h)] */
    float *P, *k, *v, *ao;              /* attention: [n][2·H·hd], [n][Hkv·hd] ×2, [n][H·hd] */
    float *m, *z, *beta, *alpha, *y;    /* DeltaNet: [n][C], [n][Hv·dv], [n][Hv] ×2, [n][Hv·dv] */
    float *rlog, *probs, *wts;          /* router: [n][X], [X], [n][K] */
    int32_t *sel;                       /* [n][K] selected experts */
    float *eg, *eu, *eo;                /* experts: [n·K][F] ×2, [n·K][E] */
    float *sg, *su, *so, *sgate;        /* shared expert: [n][S] ×2, [n][E], [n] */
    float *fg, *fu;                     /* dense FFN: [n][F] ×2 */
    float *dn_scratch;                  /* cw_deltanet_scratch_floats */
    void *mm_scratch;                   /* max over every matmul of the batch */
};

struct mm_size {
    int64_t n, k;
    size_t bytes;
};

static void mm_size_one(void *ctx, const char *name, const struct cw_wt *t, bool is_expert)
{
    struct mm_size *s = ctx;
    size_t b;
    if (is_expert) {
        /* gate/up read n rows, down reads n·K rows; both make n·K pairs */
        size_t b1 = cw_cpu_matmul_id_scratch(t->type, t->ne[0], s->n, s->n * s->k);
        size_t b2 = cw_cpu_matmul_id_scratch(t->type, t->ne[0], s->n * s->k, s->n * s->k);
        b = b1 > b2 ? b1 : b2;
    } else {
        b = cw_cpu_matmul_scratch(t->type, t->ne[0], s->n);
    }
    if (b > s->bytes)
        s->bytes = b;
}

/* ---- products of a shared input ---------------------------------------------
 * The products that read the same normed rows go through one
 * cw_cpu_matmuls call (the rows quantised once, one pool run). Each builder
 * fills ops[] from a layer's weights, with the outputs of w (NULL: only the
 * shapes, for sizing the scratch) and returns their count. */

static struct cw_cpu_mm prod(const struct cw_wt *t, float *y)
{
    return (struct cw_cpu_mm){t->type, t->data, t->ne[1], y, 0};
}

static struct cw_cpu_mm routed(const struct cw_wt *t, float *y)
{
    return (struct cw_cpu_mm){t->type, t->data, t->ne[1], y, t->nb2};
}

#define OUT(w, f) ((w) ? (w)->f : NULL)

/* cw_cpu_matmuls over ops[n] of x [n_tok][n_in], its refusal reported */
static int products(const struct cw_cpu_model *m, struct ws *w, const struct cw_cpu_mm *ops, int n,
                    const float *x, int64_t n_tok, const struct cw_cpu_route *route,
                    const char *what, struct cw_err *err)
{
    if (cw_cpu_matmuls(m->pool, ops, n, m->w->hp.n_embd, x, n_tok, route, w->mm_scratch))
        return cw_errf(err, CW_ERR_INVALID, "cpu: %s: a product's weights are missing or "
                       "of the wrong shape", what);
    return 0;
}

/* DeltaNet's projections: q | k | v channels, z, β logits, decay input */
static int dn_ops(const struct cw_qwen35_ssm_w *l, struct ws *w, struct cw_cpu_mm *ops)
{
    ops[0] = prod(&l->qkv, OUT(w, m));
    ops[1] = prod(&l->gate, OUT(w, z));
    ops[2] = prod(&l->beta, OUT(w, beta));
    ops[3] = prod(&l->alpha, OUT(w, alpha));
    return 4;
}

/* attention's projections: per head [q | gate], k, v */
static int attn_ops(const struct cw_qwen35_attn_w *l, struct ws *w, struct cw_cpu_mm *ops)
{
    ops[0] = prod(&l->q, OUT(w, P));
    ops[1] = prod(&l->k, OUT(w, k));
    ops[2] = prod(&l->v, OUT(w, v));
    return 3;
}

/* the MoE's products of its input once routed: the experts' gate and up,
 * the shared expert's gate and up and its scalar gate */
static int moe_ops(const struct cw_qwen35_moe_w *l, struct ws *w, struct cw_cpu_mm *ops)
{
    ops[0] = routed(&l->gate_exps, OUT(w, eg));
    ops[1] = routed(&l->up_exps, OUT(w, eu));
    ops[2] = prod(&l->gate_shexp, OUT(w, sg));
    ops[3] = prod(&l->up_shexp, OUT(w, su));
    ops[4] = prod(&l->gate_inp_shexp, OUT(w, sgate));
    return 5;
}

/* the dense FFN's gate and up */
static int ffn_ops(const struct cw_qwen35_ffn_w *l, struct ws *w, struct cw_cpu_mm *ops)
{
    ops[0] = prod(&l->gate, OUT(w, fg));
    ops[1] = prod(&l->up, OUT(w, fu));
    return 2;
}

/* The largest scratch of a layer's shared-input calls for n tokens. */
static size_t layer_ops_scratch(const struct cw_qwen35_hparams *hp,
                                const struct cw_qwen35_layer_w *l, int64_t n)
{
    struct cw_cpu_mm ops[CW_CPU_MM_MAX];
    const struct cw_cpu_route route = {NULL, hp->n_expert_used, 0};
    size_t sz[2];
    int k = l->kind == CW_LAYER_ATTENTION ? attn_ops(&l->attn, NULL, ops)
                                          : dn_ops(&l->ssm, NULL, ops);
    sz[0] = cw_cpu_matmuls_scratch(ops, k, hp->n_embd, n, NULL);
    if (hp->arch == CW_ARCH_QWEN35MOE)
        sz[1] = cw_cpu_matmuls_scratch(ops, moe_ops(&l->moe, NULL, ops), hp->n_embd, n, &route);
    else
        sz[1] = cw_cpu_matmuls_scratch(ops, ffn_ops(&l->ffn, NULL, ops), hp->n_embd, n, NULL);
    return sz[0] > sz[1] ? sz[0] : sz[1];
}

/* every field of struct ws is one malloc'd pointer */
static void ws_free(struct ws *w)
{
    if (!w)
        return;
    void **p = (void **)w;
    for (size_t i = 0; i < sizeof *w / sizeof(void *); i++)
        free(p[i]);
    free(w);
}

static int ws_reserve(struct cw_cpu_seq *s, const struct cw_cpu_model *m, int64_t n,
                      struct cw_err *err)
{
    if (n <= s->ws_tok)
        return 0;
    const struct cw_qwen35_hparams *hp = &m->w->hp;
    const size_t E = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim;
    const size_t C = (size_t)cw_qwen35_conv_channels(hp), inner = hp->ssm_inner;
    const size_t Hv = hp->ssm_n_v_heads, X = hp->n_expert, K = hp->n_expert_used;
    const size_t F = hp->n_ff_exp, S = hp->n_ff_shexp, Fd = hp->n_ff, N = (size_t)n;
    const struct cw_deltanet_dims dd = dn_dims(hp);
    struct mm_size mms = {n, (int64_t)K, 0};
    visit_all(mm_size_one, &mms, m->w);
    for (uint32_t il = 0; il <= hp->n_layer; il++) {
        const struct cw_qwen35_layer_w *l =
            il < hp->n_layer ? &m->w->layers[il] : m->w->has_mtp ? &m->w->mtp.layer : NULL;
        size_t b = l ? layer_ops_scratch(hp, l, n) : 0;
        if (b > mms.bytes)
            mms.bytes = b;
    }

    struct ws *w = calloc(1, sizeof *w);
    if (!w)
        return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for work buffers");
    const struct {
        void **p;
        size_t bytes;
    } plan[] = {
        {(void **)&w->h, N * E * 4},          {(void **)&w->x, N * E * 4},
        {(void **)&w->sub_out, N * E * 4},    {(void **)&w->hn, N * E * 4},
        {(void **)&w->cat, N * 2 * E * 4},    {(void **)&w->P, N * 2 * H * hd * 4},
        {(void **)&w->k, N * Hkv * hd * 4},   {(void **)&w->v, N * Hkv * hd * 4},
        {(void **)&w->ao, N * H * hd * 4},    {(void **)&w->m, N * C * 4},
        {(void **)&w->z, N * inner * 4},      {(void **)&w->beta, N * Hv * 4},
        {(void **)&w->alpha, N * Hv * 4},     {(void **)&w->y, N * inner * 4},
        {(void **)&w->rlog, N * X * 4},       {(void **)&w->probs, X * 4},
        {(void **)&w->wts, N * K * 4},        {(void **)&w->sel, N * K * 4},
        {(void **)&w->eg, N * K * F * 4},     {(void **)&w->eu, N * K * F * 4},
        {(void **)&w->eo, N * K * E * 4},     {(void **)&w->sg, N * S * 4},
        {(void **)&w->su, N * S * 4},         {(void **)&w->so, N * E * 4},
        {(void **)&w->sgate, N * 4},          {(void **)&w->fg, N * Fd * 4},
        {(void **)&w->fu, N * Fd * 4},
        {(void **)&w->dn_scratch, (size_t)cw_deltanet_scratch_floats(&dd) * 4},
        {&w->mm_scratch, mms.bytes},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        size_t b = (plan[i].bytes + 63) / 64 * 64;
        *plan[i].p = aligned_alloc(64, b ? b : 64);
        if (!*plan[i].p) {
            ws_free(w);
            return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for work buffers of %lld "
                           "tokens", (long long)n);
        }
    }
    ws_free(s->ws);
    s->ws = w;
    s->ws_tok = n;
    return 0;
}

/* ---- the hybrid cache ----------------------------------------------------------
 * K/V rows grow geometrically up to the context ceiling; the attention
 * scratch (scores over every cached row) follows the largest cache. */

static int kv_reserve(struct cw_cpu_seq *s, const struct cw_cpu_model *m,
                      struct cw_kv_cache *kv, int64_t rows, struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &m->w->hp;
    if (rows > kv->n_ctx) {
        int64_t cap = kv->n_ctx ? kv->n_ctx : 256;
        while (cap < rows)
            cap *= 2;
        if (cap > m->n_ctx_max)
            cap = m->n_ctx_max;
        size_t row = (size_t)hp->n_head_kv * hp->head_dim * sizeof(cw_f16);
        cw_f16 *k = realloc(kv->k, (size_t)cap * row);
        if (k)
            kv->k = k;
        cw_f16 *v = k ? realloc(kv->v, (size_t)cap * row) : NULL;
        if (!v)
            return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for %lld K/V rows",
                           (long long)cap);
        kv->v = v;
        kv->n_ctx = cap;
    }
    if (kv->n_ctx > s->attn_scratch_ctx) {
        struct cw_attn_dims ad = attn_dims(hp);
        const size_t nth = m->pool ? (size_t)cw_pool_size(m->pool) : 1; /* one set per thread */
        float *p = realloc(s->attn_scratch,
                           nth * (size_t)cw_attn_scratch_floats(&ad, kv->n_ctx) * sizeof(float));
        if (!p)
            return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for attention scratch");
        s->attn_scratch = p;
        s->attn_scratch_ctx = kv->n_ctx;
    }
    return 0;
}

int cw_cpu_seq_init(struct cw_cpu_seq *s, const struct cw_cpu_model *m, struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &m->w->hp;
    const struct cw_deltanet_dims dd = dn_dims(hp);
    memset(s, 0, sizeof *s);
    s->layers = calloc(hp->n_layer ? hp->n_layer : 1, sizeof *s->layers);
    if (!s->layers)
        goto nomem;
    s->n_layer = hp->n_layer;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (m->w->layers[il].kind != CW_LAYER_DELTANET)
            continue;
        s->layers[il].conv = calloc((size_t)cw_deltanet_conv_state_floats(&dd), sizeof(float));
        s->layers[il].delta = calloc((size_t)cw_deltanet_delta_state_floats(&dd), sizeof(float));
        if (!s->layers[il].conv || !s->layers[il].delta)
            goto nomem;
    }
    return 0;
nomem:
    cw_cpu_seq_free(s);
    return cw_errf(err, CW_ERR_NOMEM, "cpu: out of memory for sequence state");
}

void cw_cpu_seq_reset(struct cw_cpu_seq *s, const struct cw_cpu_model *m)
{
    const struct cw_deltanet_dims dd = dn_dims(&m->w->hp);
    for (uint32_t il = 0; il < m->w->hp.n_layer; il++) {
        struct cw_cpu_layer_cache *c = &s->layers[il];
        if (c->conv)
            memset(c->conv, 0, (size_t)cw_deltanet_conv_state_floats(&dd) * sizeof(float));
        if (c->delta)
            memset(c->delta, 0, (size_t)cw_deltanet_delta_state_floats(&dd) * sizeof(float));
    }
    s->n_past = 0; /* K/V rows past n_past are never read */
    s->mtp_n_past = 0;
}

static void cache_free(struct cw_cpu_layer_cache *c)
{
    free(c->kv.k);
    free(c->kv.v);
    free(c->conv);
    free(c->delta);
}

void cw_cpu_seq_free(struct cw_cpu_seq *s)
{
    for (uint32_t il = 0; s->layers && il < s->n_layer; il++)
        cache_free(&s->layers[il]);
    free(s->layers);
    ws_free(s->ws);
    free(s->attn_scratch);
    cache_free(&s->mtp);
    memset(s, 0, sizeof *s);
}

/* ---- steps of a block ------------------------------------------------------------
 * Each takes the sub-block input x [n][E] (already normed) and writes
 * ws->sub_out [n][E]. Matrix products go through cw_cpu_matmul, which
 * quantises activations as llama.cpp's CPU backend does and gives the same
 * bits for a token whether it comes alone or in a batch. */

/* the observer, if any: rows [n][width] under llama.cpp's name (layer -1: none) */
static inline void tap(const struct cw_cpu_model *m, const char *name, int layer,
                       const float *x, int64_t n, int64_t width)
{
    if (m->tap)
        m->tap(m->tap_ctx, name, layer, x, n, width);
}

static void mm(const struct cw_cpu_model *m, struct ws *w, const struct cw_wt *t,
               const float *x, int64_t n, float *y)
{
    cw_cpu_matmul(m->pool, t->type, t->data, t->ne[0], t->ne[1], x, n, y, w->mm_scratch);
}

/* y [ne0] = row `row` of t, dequantised (the embedding lookup) */
static void get_row(const struct cw_wt *t, int64_t row, float *y)
{
    cw_qtype_traits(t->type)->dequant_row((const uint8_t *)t->data + (size_t)row * t->nb1, y,
                                          t->ne[0]);
}

/* Gated DeltaNet, §3.2: projections, then the recurrent core, then ssm_out. */
static int deltanet(const struct cw_cpu_model *m, struct ws *w, const struct cw_qwen35_ssm_w *l,
                    struct cw_cpu_layer_cache *c, int il, int64_t n, struct cw_err *err)
{
    const struct cw_deltanet_dims dd = dn_dims(&m->w->hp);
    const int64_t C = cw_deltanet_channels(&dd), VD = (int64_t)dd.n_v_head * dd.d_v;
    const struct cw_deltanet_weights dw = {l->conv1d.data, l->dt.data, l->a.data, l->norm.data};
    struct cw_deltanet_state st = {c->conv, c->delta};
    struct cw_cpu_mm ops[CW_CPU_MM_MAX];
    if (products(m, w, ops, dn_ops(l, w, ops), w->x, n, NULL, "DeltaNet projections", err))
        return -1;
    tap(m, "linear_attn_qkv_mixed", il, w->m, n, C);
    tap(m, "z", il, w->z, n, VD);
    tap(m, "beta", il, w->beta, n, dd.n_v_head);
    tap(m, "alpha", il, w->alpha, n, dd.n_v_head);
    if (cw_deltanet_forward_pool(m->pool, &dd, &dw, &st, n, w->m, w->z, w->beta, w->alpha, w->y,
                                 w->dn_scratch, err))
        return -1;
    tap(m, "final_output", il, w->y, n, VD); /* conv, gates, delta rule, gated norm */
    mm(m, w, &l->out, w->y, n, w->sub_out);
    tap(m, "linear_attn_out", il, w->sub_out, n, m->w->hp.n_embd);
    return 0;
}

/* Gated full attention, §3.3: projections, the attention core (q/k norm,
 * RoPE, K/V append, causal GQA, sigmoid gate), then attn_output. */
static int attention(const struct cw_cpu_model *m, struct cw_cpu_seq *s, struct ws *w,
                     const struct cw_qwen35_attn_w *l, struct cw_cpu_layer_cache *c, int il,
                     int64_t pos0, int64_t n, struct cw_err *err)
{
    const struct cw_attn_dims ad = attn_dims(&m->w->hp);
    const int64_t QN = (int64_t)ad.n_head * ad.head_dim, KN = (int64_t)ad.n_head_kv * ad.head_dim;
    const struct cw_attn_weights aw = {l->q_norm.data, l->k_norm.data};
    if (kv_reserve(s, m, &c->kv, pos0 + n, err))
        return -1;
    struct cw_cpu_mm ops[CW_CPU_MM_MAX];
    if (products(m, w, ops, attn_ops(l, w, ops), w->x, n, NULL, "attention projections", err))
        return -1;
    tap(m, "Qcur_full", il, w->P, n, 2 * QN);
    tap(m, "Kcur", il, w->k, n, KN);
    tap(m, "Vcur", il, w->v, n, KN);
    if (cw_attn_forward_pool(m->pool, &ad, &aw, &c->kv, pos0, n, w->P, w->k, w->v, w->ao,
                             s->attn_scratch, err))
        return -1;
    tap(m, "attn_gated", il, w->ao, n, QN); /* norms, RoPE, softmax(QK)V, gate */
    mm(m, w, &l->o, w->ao, n, w->sub_out);
    tap(m, "attn_output", il, w->sub_out, n, m->w->hp.n_embd);
    return 0;
}

/* MoE, §3.4: router softmax over all experts, top-k renormalised, the
 * selected experts' SwiGLU through the expert matmul, the shared expert
 * scaled by its sigmoid gate, summed in llama.cpp's order. */
static int moe(const struct cw_cpu_model *m, struct ws *w, const struct cw_qwen35_moe_w *l,
               int il, int64_t n, struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &m->w->hp;
    const int64_t E = hp->n_embd, X = hp->n_expert, K = hp->n_expert_used;
    const int64_t F = hp->n_ff_exp, S = hp->n_ff_shexp;
    /* router (f32 weights: activations stay f32) */
    mm(m, w, &l->gate_inp, w->x, n, w->rlog);
    tap(m, "ffn_moe_logits", il, w->rlog, n, X);
    for (int64_t t = 0; t < n; t++)
        if (cw_moe_route((int)X, (int)K, w->rlog + t * X, w->probs, w->sel + t * K,
                         w->wts + t * K, err))
            return -1;
    tap(m, "ffn_moe_weights_norm", il, w->wts, n, K); /* top-k, renormalised */
    /* routed experts: gate and up read the token's row (with the shared
     * expert's products of it), down the slot's */
    struct cw_cpu_mm ops[CW_CPU_MM_MAX];
    const struct cw_cpu_route route = {w->sel, K, 0};
    if (products(m, w, ops, moe_ops(l, w, ops), w->x, n, &route, "MoE gate and up", err))
        return -1;
    tap(m, "ffn_moe_gate", il, w->eg, n * K, F);
    tap(m, "ffn_moe_up", il, w->eu, n * K, F);
    cw_swiglu(w->eg, w->eg, w->eu, n * K * F);
    tap(m, "ffn_moe_swiglu", il, w->eg, n * K, F);
    cw_cpu_matmul_id(m->pool, l->down_exps.type, l->down_exps.data, l->down_exps.nb2, F, E,
                     w->eg, 1, w->sel, K, n, w->eo, w->mm_scratch);
    tap(m, "ffn_moe_down", il, w->eo, n * K, E);
    /* shared expert and its scalar gate */
    tap(m, "ffn_gate", il, w->sg, n, S);
    tap(m, "ffn_up", il, w->su, n, S);
    cw_swiglu(w->sg, w->sg, w->su, n * S);
    tap(m, "ffn_swiglu", il, w->sg, n, S);
    mm(m, w, &l->down_shexp, w->sg, n, w->so);
    tap(m, "ffn_shexp", il, w->so, n, E);
    tap(m, "shared_expert_gate", il, w->sgate, n, 1);
    /* Σ_k w_k·expert_k + σ(gate)·shared */
    for (int64_t t = 0; t < n; t++)
        cw_moe_combine(E, (int)K, w->wts + t * K, w->eo + t * K * E, w->so + t * E,
                       w->sgate[t], w->sub_out + t * E);
    return 0;
}

/* Dense SwiGLU FFN, §3.5. */
static int dense_ffn(const struct cw_cpu_model *m, struct ws *w, const struct cw_qwen35_ffn_w *l,
                     int il, int64_t n, struct cw_err *err)
{
    const int64_t F = m->w->hp.n_ff;
    struct cw_cpu_mm ops[CW_CPU_MM_MAX];
    if (products(m, w, ops, ffn_ops(l, w, ops), w->x, n, NULL, "FFN gate and up", err))
        return -1;
    tap(m, "ffn_gate", il, w->fg, n, F);
    tap(m, "ffn_up", il, w->fu, n, F);
    cw_swiglu(w->fg, w->fg, w->fu, n * F);
    tap(m, "ffn_swiglu", il, w->fg, n, F);
    mm(m, w, &l->down, w->fg, n, w->sub_out);
    return 0;
}

/* ---- one block, §3.1 -------------------------------------------------------------
 * h [n][E] is the residual stream, updated in place. pos0: position of row 0. */
static int block(const struct cw_cpu_model *m, struct cw_cpu_seq *s,
                 const struct cw_qwen35_layer_w *l, struct cw_cpu_layer_cache *c, int il,
                 int64_t pos0, int64_t n, struct cw_err *err)
{
    struct ws *w = s->ws;
    const struct cw_qwen35_hparams *hp = &m->w->hp;
    const int64_t E = hp->n_embd;

    /* 1. attn_norm */
    cw_rms_norm_rows(w->x, w->h, l->attn_norm.data, E, n, hp->eps);
    tap(m, "attn_norm", il, w->x, n, E);
    /* 2. token mixer */
    switch (l->kind) {
    case CW_LAYER_DELTANET:
        if (deltanet(m, w, &l->ssm, c, il, n, err))
            return -1;
        break;
    case CW_LAYER_ATTENTION:
        if (attention(m, s, w, &l->attn, c, il, pos0, n, err))
            return -1;
        break;
    }
    /* 3. residual */
    cw_add(w->h, w->h, w->sub_out, n * E);
    tap(m, "attn_residual", il, w->h, n, E);
    /* 4. post_attention_norm: the pre-FFN norm */
    cw_rms_norm_rows(w->x, w->h, l->post_attn_norm.data, E, n, hp->eps);
    tap(m, "attn_post_norm", il, w->x, n, E);
    /* 5. FFN */
    switch (hp->arch) {
    case CW_ARCH_QWEN35MOE:
        if (moe(m, w, &l->moe, il, n, err))
            return -1;
        break;
    case CW_ARCH_QWEN35:
        if (dense_ffn(m, w, &l->ffn, il, n, err))
            return -1;
        break;
    }
    tap(m, "ffn_out", il, w->sub_out, n, E);
    /* 6. residual */
    cw_add(w->h, w->h, w->sub_out, n * E);
    tap(m, "l_out", il, w->h, n, E);
    return 0;
}

/* ---- passes ------------------------------------------------------------------------ */

static int check_call(const struct cw_cpu_model *m, const int32_t *tokens, int64_t n,
                      int64_t n_past, const char *what, struct cw_err *err)
{
    if (n <= 0)
        return cw_errf(err, CW_ERR_INVALID, "cpu: %s: %lld tokens", what, (long long)n);
    if (n_past + n > m->n_ctx_max)
        return cw_errf(err, CW_ERR_INVALID,
                       "cpu: %s: %lld + %lld tokens exceed the context limit %lld", what,
                       (long long)n_past, (long long)n, (long long)m->n_ctx_max);
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= m->w->hp.n_vocab)
            return cw_errf(err, CW_ERR_INVALID, "cpu: %s: token %d at %lld outside the "
                           "vocabulary of %u", what, tokens[t], (long long)t, m->w->hp.n_vocab);
    return 0;
}

/* final norm, hidden copy-out and the LM head */
static void head(const struct cw_cpu_model *m, struct ws *w, const struct cw_wt *norm,
                 const struct cw_wt *lm, int64_t n, float *logits, bool all_logits,
                 float *hidden)
{
    const int64_t E = m->w->hp.n_embd;
    cw_rms_norm_rows(w->hn, w->h, norm->data, E, n, m->w->hp.eps);
    tap(m, "result_norm", -1, w->hn, n, E);
    if (hidden)
        memcpy(hidden, w->hn, (size_t)(n * E) * sizeof(float));
    if (all_logits)
        mm(m, w, lm, w->hn, n, logits);
    else
        mm(m, w, lm, w->hn + (n - 1) * E, 1, logits);
    tap(m, "result_output", -1, logits, all_logits ? n : 1, lm->ne[1]);
}

int cw_cpu_forward(struct cw_cpu_model *m, struct cw_cpu_seq *s, const int32_t *tokens,
                   int64_t n, float *logits, bool all_logits, float *hidden,
                   struct cw_err *err)
{
    const struct cw_qwen35_weights *W = m->w;
    if (check_call(m, tokens, n, s->n_past, "forward", err) || ws_reserve(s, m, n, err))
        return -1;
    struct ws *w = s->ws;
    const int64_t E = W->hp.n_embd;

    /* embedding lookup: one dequantised row per token, no scaling */
    for (int64_t t = 0; t < n; t++)
        get_row(&W->token_embd, tokens[t], w->h + t * E);
    tap(m, "model.input_embed", -1, w->h, n, E);
    /* the layers */
    for (uint32_t il = 0; il < W->hp.n_layer; il++)
        if (block(m, s, &W->layers[il], &s->layers[il], (int)il, s->n_past, n, err))
            return cw_err_prefix(err, "layer %u", il);
    /* output_norm, LM head */
    head(m, w, &W->output_norm, &W->output, n, logits, all_logits, hidden);
    s->n_past += n;
    return 0;
}

int cw_cpu_forward_mtp(struct cw_cpu_model *m, struct cw_cpu_seq *s, const int32_t *tokens,
                       const float *hidden_prev, int64_t n, float *logits, bool all_logits,
                       float *hidden_out, struct cw_err *err)
{
    const struct cw_qwen35_weights *W = m->w;
    const struct cw_qwen35_mtp_w *mt = &W->mtp;
    if (!W->has_mtp)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cpu: the model has no MTP block");
    if (check_call(m, tokens, n, s->mtp_n_past, "mtp", err) || ws_reserve(s, m, n, err))
        return -1;
    struct ws *w = s->ws;
    const int64_t E = W->hp.n_embd;
    const struct cw_wt *embd = mt->embed_tokens.data ? &mt->embed_tokens : &W->token_embd;
    const struct cw_wt *lm = mt->shared_head_head.data ? &mt->shared_head_head : &W->output;

    /* u = eh_proj · [enorm(embed(x_p)) | hnorm(h_{p-1})] */
    for (int64_t t = 0; t < n; t++) {
        get_row(embd, tokens[t], w->h + t * E);
        cw_rms_norm(w->cat + t * 2 * E, w->h + t * E, mt->enorm.data, E, W->hp.eps);
        cw_rms_norm(w->cat + t * 2 * E + E, hidden_prev + t * E, mt->hnorm.data, E, W->hp.eps);
    }
    mm(m, w, &mt->eh_proj, w->cat, n, w->h);
    /* one full-attention block with its own K/V (layer index n_layer, as llama.cpp's) */
    if (block(m, s, &mt->layer, &s->mtp, (int)W->hp.n_layer, s->mtp_n_past, n, err))
        return cw_err_prefix(err, "mtp block");
    /* shared_head_norm, LM head */
    head(m, w, &mt->shared_head_norm, lm, n, logits, all_logits, hidden_out);
    s->mtp_n_past += n;
    return 0;
}

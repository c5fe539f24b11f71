/* cuda_backend.cu — the CUDA backend behind the contract (backend.h): open
 * (device, type checks, the one-time weight upload), sequences (one device
 * arena each: state, K/V for n_ctx_max rows, work buffers for a chunk), and
 * the ops table. The forward pass itself is cuda_forward.cu.
 *
 * Weights: every bound tensor is copied once from the GGUF mapping into one
 * cudaMalloc arena, each at a 256-byte boundary. Views that share bytes (the
 * halves of a fused gate_up tensor, an LM head tied to the embedding) are
 * copied once: the host ranges are merged before placement and a view's
 * device pointer keeps its offset inside its range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_forward.cuh"

#define ARENA_ALIGN 256
#define CHUNK_MAX 1024 /* tokens per launch sequence: pp2048 7,400 vs 7,502 at 2048 for 260 MB less per sequence (docs/perf/moe-prefill.md) */
#define LM_ROWS 32             /* logits rows per LM-head launch: 32·V f32 = 32 MB */
#define ATTN_SCRATCH_MAX (1ull << 30) /* the chunk shrinks until attention fits this */

static struct cw_cuda_model *model_of(struct cw_backend *b)
{
    return (struct cw_cuda_model *)b;
}

static size_t align_up(size_t x)
{
    return (x + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

/* ---- every tensor of the bound weights ----------------------------------------
 * Norm and DeltaNet vectors are read as f32 by the kernels; matrices go
 * through the quantised kernels (cw_k_supports). */

enum wt_role { WT_VEC, WT_MAT };

typedef int (*wt_fn)(void *ctx, const char *name, struct cw_wt *t, enum wt_role role,
                     struct cw_err *err);

struct layer_field {
    const char *name;
    enum wt_role role;
    size_t off; /* in struct cw_qwen35_layer_w */
};

#define LF(name, role, member) {name, role, offsetof(struct cw_qwen35_layer_w, member)}
static const struct layer_field layer_fields[] = {
    LF("attn_norm", WT_VEC, attn_norm),
    LF("post_attention_norm", WT_VEC, post_attn_norm),
    LF("attn_q", WT_MAT, attn.q),
    LF("attn_k", WT_MAT, attn.k),
    LF("attn_v", WT_MAT, attn.v),
    LF("attn_output", WT_MAT, attn.o),
    LF("attn_q_norm", WT_VEC, attn.q_norm),
    LF("attn_k_norm", WT_VEC, attn.k_norm),
    LF("attn_qkv", WT_MAT, ssm.qkv),
    LF("attn_gate", WT_MAT, ssm.gate),
    LF("ssm_conv1d", WT_VEC, ssm.conv1d),
    LF("ssm_dt", WT_VEC, ssm.dt),
    LF("ssm_a", WT_VEC, ssm.a),
    LF("ssm_beta", WT_MAT, ssm.beta),
    LF("ssm_alpha", WT_MAT, ssm.alpha),
    LF("ssm_norm", WT_VEC, ssm.norm),
    LF("ssm_out", WT_MAT, ssm.out),
    LF("ffn_gate_inp", WT_MAT, moe.gate_inp),
    LF("ffn_gate_exps", WT_MAT, moe.gate_exps),
    LF("ffn_up_exps", WT_MAT, moe.up_exps),
    LF("ffn_down_exps", WT_MAT, moe.down_exps),
    LF("ffn_gate_inp_shexp", WT_MAT, moe.gate_inp_shexp),
    LF("ffn_gate_shexp", WT_MAT, moe.gate_shexp),
    LF("ffn_up_shexp", WT_MAT, moe.up_shexp),
    LF("ffn_down_shexp", WT_MAT, moe.down_shexp),
    LF("ffn_gate", WT_MAT, ffn.gate),
    LF("ffn_up", WT_MAT, ffn.up),
    LF("ffn_down", WT_MAT, ffn.down),
};
#undef LF

static int visit(wt_fn f, void *ctx, int il, const char *role, struct cw_wt *t, enum wt_role r,
                 struct cw_err *err)
{
    char name[CW_GGUF_MAX_NAME];
    if (!t->data)
        return 0; /* optional, absent, or another layer kind's */
    if (il < 0)
        snprintf(name, sizeof name, "%s", role);
    else
        snprintf(name, sizeof name, "blk.%d.%s", il, role);
    return f(ctx, name, t, r, err);
}

static int visit_layer(wt_fn f, void *ctx, int il, struct cw_qwen35_layer_w *l,
                       struct cw_err *err)
{
    for (size_t i = 0; i < sizeof layer_fields / sizeof layer_fields[0]; i++) {
        struct cw_wt *t = (struct cw_wt *)((char *)l + layer_fields[i].off);
        if (visit(f, ctx, il, layer_fields[i].name, t, layer_fields[i].role, err))
            return -1;
    }
    return 0;
}

static int visit_all(wt_fn f, void *ctx, struct cw_qwen35_weights *w, struct cw_err *err)
{
    if (visit(f, ctx, -1, "token_embd", &w->token_embd, WT_MAT, err) ||
        visit(f, ctx, -1, "output_norm", &w->output_norm, WT_VEC, err) ||
        visit(f, ctx, -1, "output", &w->output, WT_MAT, err))
        return -1;
    for (uint32_t il = 0; il < w->hp.n_layer; il++)
        if (visit_layer(f, ctx, (int)il, &w->layers[il], err))
            return -1;
    if (!w->has_mtp)
        return 0;
    const int il = (int)w->hp.n_layer;
    struct cw_qwen35_mtp_w *m = &w->mtp;
    return visit_layer(f, ctx, il, &m->layer, err) ||
                   visit(f, ctx, il, "nextn.eh_proj", &m->eh_proj, WT_MAT, err) ||
                   visit(f, ctx, il, "nextn.enorm", &m->enorm, WT_VEC, err) ||
                   visit(f, ctx, il, "nextn.hnorm", &m->hnorm, WT_VEC, err) ||
                   visit(f, ctx, il, "nextn.shared_head_norm", &m->shared_head_norm, WT_VEC,
                         err) ||
                   visit(f, ctx, il, "nextn.embed_tokens", &m->embed_tokens, WT_MAT, err) ||
                   visit(f, ctx, il, "nextn.shared_head_head", &m->shared_head_head, WT_MAT,
                         err)
               ? -1
               : 0;
}

static int check_type(void *ctx, const char *name, struct cw_wt *t, enum wt_role role,
                      struct cw_err *err)
{
    (void)ctx;
    if (role == WT_MAT && !cw_k_supports(t->type))
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: tensor %s: type %s has no CUDA kernel",
                       name, cw_qtype_name(t->type));
    if (role == WT_VEC && t->type != CW_TYPE_F32)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: tensor %s: type %s, the kernels read "
                       "it as f32", name, cw_qtype_name(t->type));
    return 0;
}

/* ---- the weight arena ----------------------------------------------------------- */

struct range {
    const uint8_t *lo, *hi; /* host bytes [lo, hi) */
    size_t off;             /* device offset of lo */
};

struct ranges {
    struct range *r;
    size_t n, cap;
};

/* bytes a (possibly strided) view spans: the last expert's rows end it */
static size_t span(const struct cw_wt *t)
{
    const int64_t ne2 = t->ne[2] > 0 ? t->ne[2] : 1;
    return (size_t)(ne2 - 1) * t->nb2 + (size_t)t->ne[1] * t->nb1;
}

static int collect(void *ctx, const char *name, struct cw_wt *t, enum wt_role role,
                   struct cw_err *err)
{
    (void)name, (void)role;
    struct ranges *rs = (struct ranges *)ctx;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 256;
        struct range *r = (struct range *)realloc(rs->r, cap * sizeof *r);
        if (!r)
            return cw_errf(err, CW_ERR_NOMEM, "cuda: out of memory for the tensor list");
        rs->r = r;
        rs->cap = cap;
    }
    const uint8_t *p = (const uint8_t *)t->data;
    rs->r[rs->n++] = {p, p + span(t), 0};
    return 0;
}

static int by_lo(const void *a, const void *b)
{
    const uint8_t *x = ((const struct range *)a)->lo, *y = ((const struct range *)b)->lo;
    return x < y ? -1 : x > y;
}

/* sorts, merges overlapping ranges, places each at an aligned offset; returns the total */
static size_t place(struct ranges *rs)
{
    qsort(rs->r, rs->n, sizeof *rs->r, by_lo);
    size_t m = 0;
    for (size_t i = 0; i < rs->n; i++) {
        if (m && rs->r[i].lo < rs->r[m - 1].hi) {
            if (rs->r[i].hi > rs->r[m - 1].hi)
                rs->r[m - 1].hi = rs->r[i].hi;
        } else {
            rs->r[m++] = rs->r[i];
        }
    }
    rs->n = m;
    size_t off = 0;
    for (size_t i = 0; i < m; i++) {
        rs->r[i].off = off;
        off = align_up(off + (size_t)(rs->r[i].hi - rs->r[i].lo));
    }
    return off;
}

struct translate {
    const struct ranges *rs;
    uint8_t *base;
};

static int to_device(void *ctx, const char *name, struct cw_wt *t, enum wt_role role,
                     struct cw_err *err)
{
    (void)role;
    const struct translate *tr = (const struct translate *)ctx;
    const uint8_t *p = (const uint8_t *)t->data;
    size_t lo = 0, hi = tr->rs->n; /* the last range starting at or before p */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (tr->rs->r[mid].lo <= p)
            lo = mid;
        else
            hi = mid;
    }
    const struct range *r = &tr->rs->r[lo];
    if (p < r->lo || p >= r->hi)
        return cw_errf(err, CW_ERR_DEVICE, "cuda: tensor %s: not in the uploaded ranges", name);
    t->data = tr->base + r->off + (size_t)(p - r->lo);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int upload_weights(struct cw_cuda_model *M, struct cw_err *err)
{
    struct ranges rs = {NULL, 0, 0};
    int rc = -1;
    if (visit_all(collect, &rs, &M->dw, err))
        goto done;
    M->arena_bytes = place(&rs);
    if (cw_cuda_alloc(M->c, &M->arena, M->arena_bytes, err)) {
        cw_err_prefix(err, "cuda: weights (%.2f GB)", (double)M->arena_bytes / 1e9);
        goto done;
    }
    {
        const double t0 = now_s();
        for (size_t i = 0; i < rs.n; i++)
            if (cw_cuda_upload(M->c, (uint8_t *)M->arena + rs.r[i].off, rs.r[i].lo,
                               (size_t)(rs.r[i].hi - rs.r[i].lo), err))
                goto done;
        if (cw_cuda_sync(M->c, err))
            goto done;
        M->upload_s = now_s() - t0;
    }
    {
        struct translate tr = {&rs, (uint8_t *)M->arena};
        rc = visit_all(to_device, &tr, &M->dw, err);
    }
done:
    free(rs.r);
    return rc;
}

/* ---- sequences ---------------------------------------------------------------------- */

struct scratch_need {
    int64_t n[3];
    size_t bytes;
};

static int need_mat(void *ctx, const char *name, struct cw_wt *t, enum wt_role role,
                    struct cw_err *err)
{
    (void)name, (void)err;
    struct scratch_need *s = (struct scratch_need *)ctx;
    if (role != WT_MAT)
        return 0;
    const struct cw_k_mat W = cw_cuda_mat(t);
    for (int i = 0; i < 3; i++) {
        size_t b = cw_k_matmul_scratch(&W, s->n[i]);
        s->bytes = b > s->bytes ? b : s->bytes;
    }
    return 0;
}

/* Bytes of scratch one sequence needs: the max over every launcher that
 * takes scratch, at every launch size the forward uses. */
static size_t scratch_bytes(struct cw_cuda_model *M)
{
    const struct cw_qwen35_hparams *hp = &M->dw.hp;
    struct scratch_need s = {{1, M->lm_rows, M->chunk}, 0};
    struct cw_err ignore = {0, {0}};
    visit_all(need_mat, &s, &M->dw, &ignore);
    const struct cw_k_attn_dims ad = cw_cuda_attn_dims(hp);
    const struct cw_k_deltanet_dims dd = cw_cuda_dn_dims(hp);
    for (int i = 0; i < 3; i++) {
        size_t a = cw_k_attn_scratch(&ad, s.n[i], M->base.n_ctx_max);
        s.bytes = a > s.bytes ? a : s.bytes;
        a = cw_k_deltanet_scratch(&dd, s.n[i]);
        s.bytes = a > s.bytes ? a : s.bytes;
        for (uint32_t il = 0; il <= hp->n_layer && hp->arch == CW_ARCH_QWEN35MOE; il++) {
            const struct cw_qwen35_layer_w *l =
                il < hp->n_layer ? &M->dw.layers[il] : (M->dw.has_mtp ? &M->dw.mtp.layer : NULL);
            if (!l)
                continue;
            const struct cw_k_mat G = cw_cuda_mat(&l->moe.gate_exps);
            size_t b = cw_k_moe_scratch(&G, (int)hp->n_expert, (int)hp->n_expert_used, s.n[i]);
            s.bytes = b > s.bytes ? b : s.bytes;
        }
    }
    return s.bytes;
}

/* A bump allocator over one sequence arena: pass 1 sizes (base NULL), pass 2 places. */
struct bump {
    uint8_t *base;
    size_t off;
};

static void *take(struct bump *b, size_t bytes)
{
    void *p = b->base ? b->base + b->off : NULL;
    b->off = align_up(b->off + bytes);
    return p;
}

/* Bytes of a sequence's position and token ids, together (upload_chunk). */
static size_t io_bytes(const struct cw_cuda_model *M)
{
    return sizeof(int64_t) + (size_t)M->chunk * sizeof(int32_t);
}

/* Lays out a sequence in b: DeltaNet state first (the prefix reset zeroes),
 * then K/V, then the work buffers. */
static void layout(struct cw_cuda_model *M, struct cw_bseq *s, struct bump *b)
{
    const struct cw_qwen35_hparams *hp = &M->dw.hp;
    const size_t T = (size_t)M->chunk, E = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv;
    const size_t hd = hp->head_dim, C = (size_t)cw_qwen35_conv_channels(hp);
    const size_t inner = hp->ssm_inner, Hv = hp->ssm_n_v_heads, X = hp->n_expert;
    const size_t K = hp->n_expert_used, F = hp->n_ff_exp, S = hp->n_ff_shexp, Fd = hp->n_ff;
    const size_t V = hp->n_vocab, LR = (size_t)M->lm_rows;
    const size_t conv = C * (hp->ssm_conv - 1) * 4, delta = Hv * hp->ssm_d_state *
                                                            hp->ssm_d_state * 4;
    const size_t kv = (size_t)M->base.n_ctx_max * Hkv * hd * sizeof(cw_f16);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (M->dw.layers[il].kind != CW_LAYER_DELTANET)
            continue;
        s->layers[il].conv = (float *)take(b, conv);
        s->layers[il].delta = (float *)take(b, delta);
        s->layers[il].count = (unsigned *)take(b, hp->ssm_n_k_heads * sizeof(unsigned));
    }
    s->state_bytes = b->off;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        if (M->dw.layers[il].kind != CW_LAYER_ATTENTION)
            continue;
        s->layers[il].k = (cw_f16 *)take(b, kv);
        s->layers[il].v = (cw_f16 *)take(b, kv);
    }
    if (M->dw.has_mtp) {
        s->mtp.k = (cw_f16 *)take(b, kv);
        s->mtp.v = (cw_f16 *)take(b, kv);
    }
    s->h = (float *)take(b, T * E * 4);
    s->x = (float *)take(b, T * E * 4);
    s->hn = (float *)take(b, T * E * 4);
    s->cat = (float *)take(b, T * 2 * E * 4);
    s->hprev = (float *)take(b, T * E * 4);
    s->P = (float *)take(b, T * 2 * H * hd * 4);
    s->k = (float *)take(b, T * Hkv * hd * 4);
    s->v = (float *)take(b, T * Hkv * hd * 4);
    s->ao = (float *)take(b, T * H * hd * 4);
    s->m = (float *)take(b, T * C * 4);
    s->z = (float *)take(b, T * inner * 4);
    s->beta = (float *)take(b, T * Hv * 4);
    s->alpha = (float *)take(b, T * Hv * 4);
    s->y = (float *)take(b, T * inner * 4);
    s->rlog = (float *)take(b, T * X * 4);
    s->wts = (float *)take(b, T * K * 4);
    s->ids = (int32_t *)take(b, T * K * 4);
    s->act = (float *)take(b, T * (K + 1) * F * 4); /* decode: + the shared expert's slot */
    s->sg = (float *)take(b, T * S * 4);
    s->su = (float *)take(b, T * S * 4);
    s->sgate = (float *)take(b, T * 4);
    s->fg = (float *)take(b, T * Fd * 4);
    s->fu = (float *)take(b, T * Fd * 4);
    s->logits = (float *)take(b, LR * V * 4);
    s->amax = (int32_t *)take(b, LR * 4);
    s->amax_scr = take(b, cw_k_argmax_scratch((int64_t)LR)); /* zeroed with the arena */
    /* the position, then the token ids: one upload a launch sequence */
    s->pos = (int64_t *)take(b, io_bytes(M));
    s->tok = s->pos ? (int32_t *)(s->pos + 1) : NULL;
    s->norm_count = (unsigned *)take(b, 4); /* zeroed with the arena, left zero by each use */
    s->scratch = take(b, s->scratch_bytes);
}

static void cuda_seq_free(struct cw_backend *b, struct cw_bseq *s)
{
    if (!s)
        return;
    cw_cuda_graph_drop(s);
    cw_cuda_free(model_of(b)->c, s->arena);
    if (s->h_pos)
        cudaFreeHost(s->h_pos);
    free(s->layers);
    free(s);
}

static int cuda_seq_new(struct cw_backend *b, struct cw_bseq **out, struct cw_err *err)
{
    struct cw_cuda_model *M = model_of(b);
    const struct cw_qwen35_hparams *hp = &M->dw.hp;
    struct cw_bseq *s = (struct cw_bseq *)calloc(1, sizeof *s);
    if (!s || !(s->layers = (struct cw_cuda_layer_state *)calloc(hp->n_layer ? hp->n_layer : 1,
                                                                  sizeof *s->layers))) {
        free(s);
        return cw_errf(err, CW_ERR_NOMEM, "cuda: out of memory for a sequence");
    }
    s->scratch_bytes = scratch_bytes(M);
    struct bump sz = {NULL, 0};
    layout(M, s, &sz);
    s->arena_bytes = sz.off;
    if (cw_cuda_alloc(M->c, &s->arena, s->arena_bytes, err)) {
        cuda_seq_free(b, s);
        return cw_err_prefix(err, "cuda: sequence state for %lld positions",
                             (long long)b->n_ctx_max);
    }
    struct bump place_b = {(uint8_t *)s->arena, 0};
    layout(M, s, &place_b);
    /* pinned staging: the device's position and ids, then the argmax */
    cudaError_t e = cudaMallocHost((void **)&s->h_pos, io_bytes(M) + sizeof(int32_t));
    if (e == cudaSuccess) {
        s->h_tok = (int32_t *)(s->h_pos + 1);
        s->h_amax = s->h_tok + M->chunk;
    }
    if (e != cudaSuccess) {
        cuda_seq_free(b, s);
        return cw_errf(err, CW_ERR_NOMEM, "cuda: pinned staging: %s", cudaGetErrorString(e));
    }
    /* zero state, and K/V so that no row ever holds stale non-finite bits */
    if (cw_cuda_memset(M->c, s->arena, 0, s->arena_bytes, err) || cw_cuda_sync(M->c, err)) {
        cuda_seq_free(b, s);
        return -1;
    }
    if (M->verbose)
        fprintf(stderr, "cuda: sequence: %.1f MB on the device (%lld positions, chunk %lld, "
                "scratch %.1f MB)\n", (double)s->arena_bytes / 1e6, (long long)b->n_ctx_max,
                (long long)M->chunk, (double)s->scratch_bytes / 1e6);
    *out = s;
    return 0;
}

static void cuda_seq_reset(struct cw_backend *b, struct cw_bseq *s)
{
    /* ordered before the next forward on the stream; a failure there surfaces
     * at that forward's first checked call. K/V rows past n_past are never read. */
    cudaMemsetAsync(s->arena, 0, s->state_bytes, model_of(b)->c->stream);
    s->n_past = 0;
    s->mtp_n_past = 0;
}

static int64_t cuda_seq_pos(struct cw_backend *b, const struct cw_bseq *s)
{
    (void)b;
    return s->n_past;
}

static int cuda_forward(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens,
                        int64_t n, const struct cw_fwd_out *out, struct cw_err *err)
{
    return cw_cuda_forward(model_of(b), s, tokens, n, out, err);
}

static int cuda_forward_mtp(struct cw_backend *b, struct cw_bseq *s, const int32_t *tokens,
                            const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                            struct cw_err *err)
{
    return cw_cuda_forward_mtp(model_of(b), s, tokens, hidden_prev, n, out, err);
}

static void cuda_close(struct cw_backend *b)
{
    struct cw_cuda_model *M = model_of(b);
    if (M->c)
        cw_cuda_free(M->c, M->arena);
    cw_cuda_close(M->c);
    free(M->dw.layers);
    free(M);
}

static const struct cw_backend_ops cuda_ops = {
    "cuda",        cuda_close,   cuda_seq_new,     cuda_seq_free,
    cuda_seq_reset, cuda_seq_pos, cuda_forward,    cuda_forward_mtp,
};

static bool env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

/* the largest chunk (a power of two up to CHUNK_MAX, or up to CWEN_CUDA_CHUNK
 * when set: measurements) whose attention scratch fits */
static int64_t pick_chunk(const struct cw_qwen35_hparams *hp, int64_t n_ctx)
{
    const struct cw_k_attn_dims ad = cw_cuda_attn_dims(hp);
    int64_t t = CHUNK_MAX;
    const char *env = getenv("CWEN_CUDA_CHUNK");
    const long want = env ? strtol(env, NULL, 10) : 0;
    while (want > 0 && t > 16 && t > want)
        t /= 2;
    while (t > 16 && cw_k_attn_scratch(&ad, t, n_ctx) > ATTN_SCRATCH_MAX)
        t /= 2;
    return t;
}

extern "C" int cw_backend_open_cuda(struct cw_backend **out, const struct cw_qwen35_weights *w,
                                    const struct cw_backend_opts *o, struct cw_err *err)
{
    int n_dev = 0;
    struct cw_err e0 = {0, {0}};
    *out = NULL;
    if (cw_cuda_device_count(&n_dev, &e0) || n_dev == 0)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: no CUDA device here (%s)",
                       e0.msg[0] ? e0.msg : "none found");
    struct cw_cuda_model *M = (struct cw_cuda_model *)calloc(1, sizeof *M);
    if (!M)
        return cw_errf(err, CW_ERR_NOMEM, "cuda: out of memory");
    M->dw = *w;
    M->dw.layers = (struct cw_qwen35_layer_w *)malloc(
        (w->hp.n_layer ? w->hp.n_layer : 1) * sizeof *w->layers);
    if (!M->dw.layers) {
        free(M);
        return cw_errf(err, CW_ERR_NOMEM, "cuda: out of memory");
    }
    memcpy(M->dw.layers, w->layers, w->hp.n_layer * sizeof *w->layers);
    M->base.ops = &cuda_ops;
    M->base.w = w;
    M->base.n_ctx_max = o->n_ctx_max > 0 ? o->n_ctx_max : (int64_t)w->hp.n_ctx_train;
    M->chunk = pick_chunk(&w->hp, M->base.n_ctx_max);
    M->lm_rows = LM_ROWS < M->chunk ? LM_ROWS : M->chunk;
    M->use_graph = !env_is("CWEN_CUDA_GRAPH", "0");
    M->verbose = env_is("CWEN_CUDA_VERBOSE", "1");
    M->fold_xq = !env_is("CWEN_CUDA_FOLD_XQ", "0");
    M->core1 = !env_is("CWEN_CUDA_CORE1", "0");
    if (visit_all(check_type, NULL, &M->dw, err) || cw_cuda_open(&M->c, o->device, err) ||
        upload_weights(M, err)) {
        cuda_close(&M->base);
        return -1;
    }
    const bool pdl = cw_cuda_set_pdl(M->c, !env_is("CWEN_CUDA_PDL", "0"));
    const bool fork = cw_cuda_set_fork(M->c, !env_is("CWEN_CUDA_FORK", "0"));
    if (M->verbose)
        fprintf(stderr, "cuda: %s: weights %.3f GB uploaded in %.2f s (%.1f GB/s), "
                "chunk %lld tokens, decode graph %s, programmatic launch %s, side stream %s\n",
                cw_cuda_info(M->c)->name, (double)M->arena_bytes / 1e9, M->upload_s,
                (double)M->arena_bytes / 1e9 / (M->upload_s > 0 ? M->upload_s : 1e-9),
                (long long)M->chunk, M->use_graph ? "on" : "off", pdl ? "on" : "off",
                fork ? "on" : "off");
    *out = &M->base;
    return 0;
}

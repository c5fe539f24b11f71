/* cuda_forward.cu — the CUDA forward pass: the launch sequence of one chunk
 * of tokens (the same layer loop as cpu_forward.c, step for step), the
 * chunking of long calls, the LM head and device argmax, and the decode
 * graph. Launches and copies only: the arithmetic is in the k_*.cu kernels,
 * the state in cuda_forward.cuh.
 *
 * Residual adds are fused: the output projections of the mixer and of the
 * FFN accumulate into h (add = true), the routed experts' down projection
 * adds its weighted sum into h, and the shared expert's down projection adds
 * σ(gate)·its output. In decode the shared expert is one more slot of the
 * routed launches, which add h + (Σ routed + shared) as the CPU; in prefill
 * it is (h + Σ routed) + shared, an f32 reordering.
 *
 * Norms: where the step that reads the norm's output quantises it once in
 * a launch that can compute the norm itself (cw_k_norm_fuses: the decode
 * mixers' projections, the dense FFN's gate/up), the launch that finishes h
 * (a mixer's output projection, the FFN's down projection) only adds, and
 * the reader computes the norm (cw_k_norm_in) and writes s->x; else the
 * finishing launch applies it: in decode its last block does
 * (cw_k_norm_next); in prefill a norm launch follows.
 *
 * Decode (n = 1) is captured once per sequence into a CUDA graph and
 * replayed: the token id and position are uploaded from pinned staging on
 * the same stream before the replay, every buffer pointer is fixed for the
 * sequence's life, so the graph never needs updating. */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_forward.cuh"

/* ---- steps of a block ----------------------------------------------------------
 * Each reads the normed input s->x [n][E] and adds its output into s->h. */

static int mm(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *t,
              const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy, bool add,
              const float *scale_logit, struct cw_err *err)
{
    const struct cw_k_mat W = cw_cuda_mat(t);
    return cw_k_matmul(M->c, &W, x, ldx, n, y, ldy, add, scale_logit, s->scratch, err);
}

/* What the step that finishes h normalises next: rows of n_embd into y;
 * defer: not that step, the one that reads y next (its cw_k_norm_in). */
struct next_norm {
    const struct cw_wt *w;
    float *y;
    int64_t ldy;
    bool defer;
};

/* the reader's form of a deferred nx: the norm of s->h */
static struct cw_k_norm_in norm_in(const struct cw_cuda_model *M, const struct cw_bseq *s,
                                   const struct cw_wt *w)
{
    const struct cw_k_norm_in ni = {s->h, (const float *)w->data, M->dw.hp.eps, false};
    return ni;
}

/* Whether a step reading x through these matrices (K: as cw_k_norm_fuses)
 * computes a norm of h given to it inside its own launches, for n tokens. */
static bool fuses_norm(const struct cw_cuda_model *M, int n_w, const struct cw_wt *const *t,
                       int K, int64_t n)
{
    for (int i = 0; i < n_w; i++) {
        const struct cw_k_mat W = cw_cuda_mat(t[i]);
        if (cw_k_norm_fuses(M->c, &W, K, n))
            return true;
    }
    return false;
}

/* xin for a step that reads no x after its launches (cw_k_norm_in's
 * x_unread: its products' Q8_K copy is all they need of it), in *tmp;
 * NULL stays NULL. */
static const struct cw_k_norm_in *x_unread(const struct cw_k_norm_in *xin,
                                           struct cw_k_norm_in *tmp)
{
    if (!xin)
        return NULL;
    *tmp = *xin;
    tmp->x_unread = true;
    return tmp;
}

/* the launchers' form of nx */
static struct cw_k_norm_next norm_next(const struct cw_cuda_model *M, const struct cw_bseq *s,
                                       const struct next_norm *nx)
{
    const struct cw_k_norm_next nn = {(const float *)nx->w->data, nx->y, nx->ldy, M->dw.hp.eps,
                                      s->norm_count};
    return nn;
}

/* h += t·x, then h's rows normalised as nx says; xq: NULL, or x's Q8_K
 * copy, written by the launch that wrote x (cw_k_xq_plain) */
static int mm_add_norm(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *t,
                       const float *x, int64_t ldx, int64_t n, const float *scale_logit,
                       const struct next_norm *nx, const void *xq, struct cw_err *err)
{
    if (nx->defer && !xq)
        return mm(M, s, t, x, ldx, n, s->h, (int64_t)M->dw.hp.n_embd, true, scale_logit, err);
    const struct cw_k_mat W = cw_cuda_mat(t);
    const struct cw_k_norm_next nn = norm_next(M, s, nx);
    return cw_k_matmul_add_norm(M->c, &W, x, ldx, n, s->h, (int64_t)M->dw.hp.n_embd,
                                scale_logit, nx->defer ? NULL : &nn, xq, s->scratch, err);
}

/* Where the DeltaNet core writes its y's Q8_K copy for ssm_out (one launch
 * fewer, cw_k_xq_plain): the scratch, which the token-by-token core does
 * not use; NULL where that product quantises otherwise. */
static void *dn_xq(const struct cw_cuda_model *M, const struct cw_bseq *s,
                   const struct cw_k_deltanet_dims *d, const struct cw_k_mat *W, int64_t n)
{
    const size_t per = cw_k_xq_plain(M->c, W, n);
    if (!per || !cw_k_deltanet_xq(d, W->type) || cw_k_deltanet_scratch(d, n) ||
        (size_t)n * per > s->scratch_bytes)
        return NULL;
    return s->scratch;
}

/* y [n][t->ne[1]] = t·x [n][E], packed rows */
static int mm_x(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *t, float *y,
                int64_t n, struct cw_err *err)
{
    return mm(M, s, t, s->x, (int64_t)M->dw.hp.n_embd, n, y, t->ne[1], false, NULL, err);
}

/* y_i [n][t_i->ne[1]] = t_i·x [n][E] for the n_w matrices that read s->x:
 * in decode, one launch per weight type (cw_k_matmul_multi); xin: s->x is
 * that norm of h, computed here. */
static int mm_xs(struct cw_cuda_model *M, struct cw_bseq *s, int n_w,
                 const struct cw_wt *const *t, float *const *y, int64_t n,
                 const struct cw_k_norm_in *xin, struct cw_err *err)
{
    struct cw_k_mat W[CW_K_MULTI_MAX];
    const struct cw_k_mat *Wp[CW_K_MULTI_MAX];
    int64_t ldy[CW_K_MULTI_MAX];
    for (int i = 0; i < n_w; i++) {
        W[i] = cw_cuda_mat(t[i]);
        Wp[i] = &W[i];
        ldy[i] = t[i]->ne[1];
    }
    const int64_t E = M->dw.hp.n_embd;
    return xin ? cw_k_matmul_multi_norm(M->c, n_w, Wp, xin, s->x, E, n, y, ldy, s->scratch, err)
               : cw_k_matmul_multi(M->c, n_w, Wp, s->x, E, n, y, ldy, s->scratch, err);
}

/* The matrices that read a block's input x (its mixer's projections),
 * in the order of the step's outputs; returns how many. */
static int dn_in(const struct cw_qwen35_ssm_w *l, const struct cw_wt **in)
{
    in[0] = &l->qkv, in[1] = &l->gate, in[2] = &l->beta, in[3] = &l->alpha;
    return 4;
}

static int attn_in(const struct cw_qwen35_attn_w *l, const struct cw_wt **in)
{
    in[0] = &l->q, in[1] = &l->k, in[2] = &l->v;
    return 3;
}

/* Gated DeltaNet, §3.2: four projections, the recurrent core, ssm_out (+h). */
static int deltanet(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_qwen35_ssm_w *l,
                    struct cw_cuda_layer_state *st, int64_t n, const struct cw_k_norm_in *xin,
                    const struct next_norm *nx, struct cw_err *err)
{
    const struct cw_k_deltanet_dims d = cw_cuda_dn_dims(&M->dw.hp);
    const struct cw_k_deltanet_w w = {(const float *)l->conv1d.data, (const float *)l->dt.data,
                                      (const float *)l->a.data, (const float *)l->norm.data};
    const struct cw_wt *in[4];
    float *out[4] = {s->m, s->z, s->beta, s->alpha};
    struct cw_k_norm_in xu;
    if (mm_xs(M, s, dn_in(l, in), in, out, n, x_unread(xin, &xu), err))
        return -1;
    const struct cw_k_mat Wo = cw_cuda_mat(&l->out);
    void *xq = M->fold_xq ? dn_xq(M, s, &d, &Wo, n) : NULL;
    const struct cw_k_xq_out xo = {xq, Wo.type, true}; /* ssm_out reads the copy only */
    if (cw_k_deltanet(M->c, &d, &w, st->conv, st->delta, M->core1 ? st->count : NULL, n, s->m,
                      s->z, s->beta, s->alpha, s->y, xq ? &xo : NULL, s->scratch, err))
        return -1;
    return mm_add_norm(M, s, &l->out, s->y, l->out.ne[0], n, NULL, nx, xq, err);
}

/* Gated full attention, §3.3: projections, the core (norms, RoPE, K/V
 * append at *s->pos, causal GQA, gate), attn_output (+h). */
static int attention(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_qwen35_attn_w *l,
                     struct cw_cuda_layer_state *st, int64_t n, const struct cw_k_norm_in *xin,
                     const struct next_norm *nx, struct cw_err *err)
{
    const struct cw_k_attn_dims d = cw_cuda_attn_dims(&M->dw.hp);
    const struct cw_wt *in[3];
    float *out[3] = {s->P, s->k, s->v};
    struct cw_k_norm_in xu;
    if (mm_xs(M, s, attn_in(l, in), in, out, n, x_unread(xin, &xu), err))
        return -1;
    if (cw_k_attn(M->c, &d, (const float *)l->q_norm.data, (const float *)l->k_norm.data, st->k,
                  st->v, M->base.n_ctx_max, s->pos, n, s->P, s->k, s->v, s->ao, s->scratch, err))
        return -1;
    return mm_add_norm(M, s, &l->o, s->ao, l->o.ne[0], n, NULL, nx, NULL, err);
}

/* whether gate_up_swiglu runs as one K = 1 expert launch */
static bool gate_up_one(const struct cw_k_mat *G, const struct cw_k_mat *U, int64_t n)
{
    return n == 1 && G->type == U->type && G->n_in == U->n_in && G->n_out == U->n_out &&
           G->row_bytes == U->row_bytes;
}

/* g [n][F] = silu(G·x)·(U·x) for a single matrix pair (shared expert, dense
 * FFN). Decode runs it as one routed-expert launch with K = 1 and expert 0
 * (the gate and up rows read together, SwiGLU fused: three launches become
 * one); batches keep the matmuls, whose batch regimes read W once per group
 * of tokens where the expert kernel reads it once per token. xin: s->x is
 * that norm of h, computed here. */
static int gate_up_swiglu(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *gate,
                          const struct cw_wt *up, float *g, float *u, int64_t n,
                          const struct cw_k_norm_in *xin, struct cw_err *err)
{
    const struct cw_k_mat G = cw_cuda_mat(gate), U = cw_cuda_mat(up);
    const int64_t E = M->dw.hp.n_embd;
    if (gate_up_one(&G, &U, n))
        return xin ? cw_k_moe_gate_up_norm(M->c, &G, &U, xin, s->x, NULL, 1, 1, g,
                                           s->scratch, err)
                   : cw_k_moe_gate_up(M->c, &G, &U, s->x, NULL, 1, 1, g, s->scratch, err);
    if (xin && cw_k_add_rmsnorm(M->c, xin->d_h, NULL, xin->d_w, s->x, E, E, n, xin->eps, err))
        return -1;
    if (mm_x(M, s, gate, g, n, err) || mm_x(M, s, up, u, n, err))
        return -1;
    return cw_k_swiglu(M->c, g, g, u, n * G.n_out, err);
}

/* the matrices that read the MoE's input x: the router's */
static int moe_in(const struct cw_qwen35_moe_w *l, const struct cw_wt **in)
{
    in[0] = &l->gate_inp, in[1] = &l->gate_inp_shexp;
    return 2;
}

/* MoE, §3.4: router and shared gate logits, top-k, the routed experts
 * (gate/up with SwiGLU, down with the weighted sum, +h), the shared expert
 * scaled by σ(its gate logit) (+h). */
static int moe(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_qwen35_moe_w *l,
               int64_t n, const struct cw_k_norm_in *xin, const struct next_norm *nx,
               struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &M->dw.hp;
    const int64_t S = hp->n_ff_shexp;
    const int X = (int)hp->n_expert, K = (int)hp->n_expert_used;
    const struct cw_k_mat G = cw_cuda_mat(&l->gate_exps), U = cw_cuda_mat(&l->up_exps);
    const struct cw_k_mat D = cw_cuda_mat(&l->down_exps);
    const struct cw_k_mat SG = cw_cuda_mat(&l->gate_shexp), SU = cw_cuda_mat(&l->up_shexp);
    const struct cw_k_mat SD = cw_cuda_mat(&l->down_shexp);
    const struct cw_wt *in[2];
    float *out[2] = {s->rlog, s->sgate};
    if (mm_xs(M, s, moe_in(l, in), in, out, n, xin, err) ||
        cw_k_moe_route(M->c, s->rlog, X, K, n, s->ids, s->wts, err))
        return -1;
    /* decode: the shared expert as slot K of the routed launches (two
     * launches instead of four; act is sized for K+1 slots) */
    if (cw_k_moe_shared_fusable(&G, &D, &SG, &SU, &SD, K, n)) {
        const struct cw_k_norm_next nn = norm_next(M, s, nx);
        return cw_k_moe_gate_up_sh(M->c, &G, &U, &SG, &SU, s->x, s->ids, K, n, s->act, err) ||
                       cw_k_moe_down_sh(M->c, &D, &SD, s->act, s->ids, s->wts, s->sgate, K, n,
                                        s->h, nx->defer ? NULL : &nn, err)
                   ? -1
                   : 0;
    }
    if (cw_k_moe_gate_up(M->c, &G, &U, s->x, s->ids, K, n, s->act, s->scratch, err) ||
        cw_k_moe_down_after_gate_up(M->c, &D, s->act, s->ids, s->wts, K, n, s->h, s->scratch,
                                    err))
        return -1;
    if (gate_up_swiglu(M, s, &l->gate_shexp, &l->up_shexp, s->sg, s->su, n, NULL, err))
        return -1;
    return mm_add_norm(M, s, &l->down_shexp, s->sg, S, n, s->sgate, nx, NULL, err);
}

/* Dense SwiGLU FFN, §3.5 (+h). */
static int dense_ffn(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_qwen35_ffn_w *l,
                     int64_t n, const struct cw_k_norm_in *xin, const struct next_norm *nx,
                     struct cw_err *err)
{
    const int64_t F = M->dw.hp.n_ff;
    struct cw_k_norm_in xu;
    if (gate_up_swiglu(M, s, &l->gate, &l->up, s->fg, s->fu, n, x_unread(xin, &xu), err))
        return -1;
    return mm_add_norm(M, s, &l->down, s->fg, F, n, NULL, nx, NULL, err);
}

/* ---- one block, §3.1: h [n][E] updated in place ---------------------------------- */

/* Whether the block's mixer (its projections of x) computes a norm of h
 * given to it inside its own launches, for n tokens. */
static bool mixer_fuses_norm(const struct cw_cuda_model *M, const struct cw_qwen35_layer_w *l,
                             int64_t n)
{
    const struct cw_wt *in[4];
    const int k = l->kind == CW_LAYER_DELTANET ? dn_in(&l->ssm, in) : attn_in(&l->attn, in);
    return fuses_norm(M, k, in, 0, n);
}

/* The same for the block's FFN (the router's products; the dense gate/up) */
static bool ffn_fuses_norm(const struct cw_cuda_model *M, const struct cw_qwen35_layer_w *l,
                           int64_t n)
{
    const struct cw_wt *in[2];
    switch (M->dw.hp.arch) {
    case CW_ARCH_QWEN35MOE:
        return fuses_norm(M, moe_in(&l->moe, in), in, 0, n);
    case CW_ARCH_QWEN35: {
        const struct cw_k_mat G = cw_cuda_mat(&l->ffn.gate), U = cw_cuda_mat(&l->ffn.up);
        in[0] = &l->ffn.gate;
        return gate_up_one(&G, &U, n) && fuses_norm(M, 1, in, 1, n);
    }
    }
    return false;
}

/* On entry s->x = attn_norm(h) (step 1), done by the step before the block,
 * or xin: that norm, left to the block's first step; the block's last
 * launch leaves nx's norm of its output in nx->y, or leaves it to the next
 * reader (nx->defer). */
static int block(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_qwen35_layer_w *l,
                 struct cw_cuda_layer_state *st, int64_t n, const struct cw_k_norm_in *xin,
                 const struct next_norm *nx, struct cw_err *err)
{
    const struct cw_qwen35_hparams *hp = &M->dw.hp;
    /* 2.–3. token mixer, residual, 4. post_attention_norm */
    const struct next_norm post = {&l->post_attn_norm, s->x, (int64_t)hp->n_embd,
                                   ffn_fuses_norm(M, l, n)};
    const struct cw_k_norm_in post_in = norm_in(M, s, &l->post_attn_norm);
    switch (l->kind) {
    case CW_LAYER_DELTANET:
        if (deltanet(M, s, &l->ssm, st, n, xin, &post, err))
            return -1;
        break;
    case CW_LAYER_ATTENTION:
        if (attention(M, s, &l->attn, st, n, xin, &post, err))
            return -1;
        break;
    }
    /* 5.–6. FFN, residual, and the norm after the block */
    const struct cw_k_norm_in *fin = post.defer ? &post_in : NULL;
    switch (hp->arch) {
    case CW_ARCH_QWEN35MOE:
        return moe(M, s, &l->moe, n, fin, nx, err);
    case CW_ARCH_QWEN35:
        return dense_ffn(M, s, &l->ffn, n, fin, nx, err);
    }
    return 0;
}

/* ---- a chunk: body and head -------------------------------------------------------- */

/* embedding → layers → output_norm into s->hn, for the n tokens in s->tok
 * at position *s->pos */
static int main_body(struct cw_cuda_model *M, struct cw_bseq *s, int64_t n, struct cw_err *err)
{
    const struct cw_qwen35_weights *W = &M->dw;
    const int64_t E = W->hp.n_embd;
    const struct cw_k_mat embd = cw_cuda_mat(&W->token_embd);
    if (cw_k_get_rows(M->c, &embd, s->tok, n, s->h, err))
        return -1;
    if (W->hp.n_layer == 0)
        return cw_k_add_rmsnorm(M->c, s->h, NULL, (const float *)W->output_norm.data, s->hn, E,
                                E, n, W->hp.eps, err);
    if (cw_k_add_rmsnorm(M->c, s->h, NULL, (const float *)W->layers[0].attn_norm.data, s->x, E,
                         E, n, W->hp.eps, err))
        return -1;
    struct cw_k_norm_in xin;
    bool pending = false; /* s->x is xin, left to layer il's mixer */
    for (uint32_t il = 0; il < W->hp.n_layer; il++) {
        /* the next layer's attn_norm, or output_norm after the last */
        const bool more = il + 1 < W->hp.n_layer;
        const struct next_norm nx =
            more ? (struct next_norm){&W->layers[il + 1].attn_norm, s->x, E,
                                      mixer_fuses_norm(M, &W->layers[il + 1], n)}
                 : (struct next_norm){&W->output_norm, s->hn, E, false};
        if (block(M, s, &W->layers[il], &s->layers[il], n, pending ? &xin : NULL, &nx, err))
            return cw_err_prefix(err, "layer %u", il);
        pending = nx.defer;
        if (pending)
            xin = norm_in(M, s, nx.w);
    }
    return 0;
}

/* LM head and argmax over rows [r0, r0+rows) of s->hn into s->logits / s->amax */
static int lm_head(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *lm,
                   int64_t r0, int64_t rows, struct cw_err *err)
{
    const int64_t E = M->dw.hp.n_embd, V = M->dw.hp.n_vocab;
    if (mm(M, s, lm, s->hn + r0 * E, E, rows, s->logits, V, false, NULL, err))
        return -1;
    return cw_k_argmax(M->c, s->logits, V, rows, s->amax, s->amax_scr, err);
}

/* Copies back what out asks for from the chunk of n rows that holds rows
 * [base, base+n) of the call (of n_call rows): hidden rows, then the logits
 * (every row in groups of lm_rows, or only the call's last row). */
static int finish_chunk(struct cw_cuda_model *M, struct cw_bseq *s, const struct cw_wt *lm,
                        int64_t base, int64_t n, int64_t n_call, const struct cw_fwd_out *out,
                        struct cw_err *err)
{
    struct cw_cuda *c = M->c;
    const int64_t E = M->dw.hp.n_embd, V = M->dw.hp.n_vocab;
    if (out->hidden &&
        cw_cuda_download(c, out->hidden + base * E, s->hn, (size_t)(n * E) * sizeof(float), err))
        return -1;
    if (!out->logits && !out->argmax)
        return 0;
    if (!out->all_logits) {
        if (base + n < n_call)
            return 0; /* not the chunk with the call's last row */
        if (lm_head(M, s, lm, n - 1, 1, err))
            return -1;
        if (out->logits && cw_cuda_download(c, out->logits, s->logits, (size_t)V * sizeof(float),
                                            err))
            return -1;
        return out->argmax ? cw_cuda_download(c, out->argmax, s->amax, sizeof(int32_t), err) : 0;
    }
    for (int64_t r = 0; r < n; r += M->lm_rows) {
        const int64_t rows = n - r < M->lm_rows ? n - r : M->lm_rows;
        if (lm_head(M, s, lm, r, rows, err))
            return -1;
        if (out->logits && cw_cuda_download(c, out->logits + (base + r) * V, s->logits,
                                            (size_t)(rows * V) * sizeof(float), err))
            return -1;
        if (out->argmax && cw_cuda_download(c, out->argmax + base + r, s->amax,
                                            (size_t)rows * sizeof(int32_t), err))
            return -1;
    }
    return 0;
}

/* Uploads the chunk's row-0 position and token ids, which lie together on
 * both sides, through pinned staging: one copy (a decode step spent 10-13
 * µs on the two it took before, H100). The previous chunk's copies have
 * completed: every chunk ends in a synchronising download or
 * cw_cuda_sync, so the staging is free. */
static int upload_chunk(struct cw_cuda_model *M, struct cw_bseq *s, const int32_t *tokens,
                        int64_t n, int64_t pos, struct cw_err *err)
{
    *s->h_pos = pos;
    memcpy(s->h_tok, tokens, (size_t)n * sizeof(int32_t));
    return cw_cuda_upload(M->c, s->pos, s->h_pos, sizeof(int64_t) + (size_t)n * sizeof(int32_t),
                          err);
}

static int check_call(struct cw_cuda_model *M, const int32_t *tokens, int64_t n, int64_t n_past,
                      const char *what, struct cw_err *err)
{
    const uint32_t V = M->dw.hp.n_vocab;
    if (n <= 0)
        return cw_errf(err, CW_ERR_INVALID, "cuda: %s: %lld tokens", what, (long long)n);
    if (n_past + n > M->base.n_ctx_max)
        return cw_errf(err, CW_ERR_INVALID,
                       "cuda: %s: %lld + %lld tokens exceed the context limit %lld", what,
                       (long long)n_past, (long long)n, (long long)M->base.n_ctx_max);
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= V)
            return cw_errf(err, CW_ERR_INVALID, "cuda: %s: token %d at %lld outside the "
                           "vocabulary of %u", what, tokens[t], (long long)t, V);
    return 0;
}

/* ---- the decode graph -------------------------------------------------------------- */

void cw_cuda_graph_drop(struct cw_bseq *s)
{
    if (s->graph_exec)
        cudaGraphExecDestroy(s->graph_exec);
    if (s->graph)
        cudaGraphDestroy(s->graph);
    s->graph_exec = NULL;
    s->graph = NULL;
    s->graph_nodes = 0;
}

/* The whole decode step of one token, from the embedding to the argmax. */
static int decode_launches(struct cw_cuda_model *M, struct cw_bseq *s, struct cw_err *err)
{
    return main_body(M, s, 1, err) || lm_head(M, s, &M->dw.output, 0, 1, err) ? -1 : 0;
}

/* Captures decode_launches on c's stream (thread-local mode: other threads'
 * CUDA calls are not caught up in it) and instantiates it. */
static int capture(struct cw_cuda_model *M, struct cw_bseq *s, struct cw_err *err)
{
    cudaStream_t st = M->c->stream;
    CW_CUDA_TRY(err, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    int rc = decode_launches(M, s, err);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(st, &g);
    if (rc) {
        if (g)
            cudaGraphDestroy(g);
        cudaGetLastError(); /* the capture's invalidation, reported through err already */
        return cw_err_prefix(err, "decode graph capture");
    }
    if (e != cudaSuccess)
        return cw_errf(err, CW_ERR_DEVICE, "cuda: decode graph capture: %s",
                       cudaGetErrorString(e));
    s->graph = g;
    e = cudaGraphInstantiate(&s->graph_exec, g, 0);
    if (e != cudaSuccess) {
        cw_cuda_graph_drop(s);
        return cw_errf(err, CW_ERR_DEVICE, "cuda: decode graph instantiate: %s",
                       cudaGetErrorString(e));
    }
    CW_CUDA_TRY(err, cudaGraphGetNodes(g, NULL, &s->graph_nodes));
    if (M->verbose)
        fprintf(stderr, "cuda: decode graph captured: %zu nodes (kernels per token)\n",
                s->graph_nodes);
    return 0;
}

static int decode(struct cw_cuda_model *M, struct cw_bseq *s, int32_t token,
                  const struct cw_fwd_out *out, struct cw_err *err)
{
    const int64_t E = M->dw.hp.n_embd, V = M->dw.hp.n_vocab;
    if (upload_chunk(M, s, &token, 1, s->n_past, err))
        return -1;
    if (M->use_graph) {
        if (!s->graph_exec && capture(M, s, err))
            return -1;
        CW_CUDA_TRY(err, cudaGraphLaunch(s->graph_exec, M->c->stream));
    } else if (decode_launches(M, s, err)) {
        return -1;
    }
    if (out->hidden &&
        cw_cuda_download(M->c, out->hidden, s->hn, (size_t)E * sizeof(float), err))
        return -1;
    if (out->logits &&
        cw_cuda_download(M->c, out->logits, s->logits, (size_t)V * sizeof(float), err))
        return -1;
    /* through pinned staging: the caller's memory may be pageable */
    if (out->argmax) {
        if (cw_cuda_download(M->c, s->h_amax, s->amax, sizeof(int32_t), err))
            return -1;
        *out->argmax = *s->h_amax;
    }
    return cw_cuda_sync(M->c, err);
}

/* ---- passes ------------------------------------------------------------------------- */

int cw_cuda_forward(struct cw_cuda_model *M, struct cw_bseq *s, const int32_t *tokens,
                    int64_t n, const struct cw_fwd_out *out, struct cw_err *err)
{
    if (check_call(M, tokens, n, s->n_past, "forward", err))
        return -1;
    if (n == 1) {
        if (decode(M, s, tokens[0], out, err))
            return -1;
        s->n_past += 1;
        return 0;
    }
    for (int64_t b = 0; b < n; b += M->chunk) {
        const int64_t c = n - b < M->chunk ? n - b : M->chunk;
        if (upload_chunk(M, s, tokens + b, c, s->n_past, err) || main_body(M, s, c, err) ||
            finish_chunk(M, s, &M->dw.output, b, c, n, out, err) || cw_cuda_sync(M->c, err))
            return -1;
        s->n_past += c;
    }
    return 0;
}

/* The MTP block, §3.6: u = eh_proj·[enorm(embed(x)) | hnorm(h_prev)], one
 * full-attention block on the MTP cache, shared_head_norm, the LM head. */
static int mtp_body(struct cw_cuda_model *M, struct cw_bseq *s, const float *hidden_prev,
                    int64_t n, struct cw_err *err)
{
    const struct cw_qwen35_weights *W = &M->dw;
    const struct cw_qwen35_mtp_w *mt = &W->mtp;
    const int64_t E = W->hp.n_embd;
    const struct cw_wt *embd = mt->embed_tokens.data ? &mt->embed_tokens : &W->token_embd;
    const struct cw_k_mat et = cw_cuda_mat(embd);
    if (cw_cuda_upload(M->c, s->hprev, hidden_prev, (size_t)(n * E) * sizeof(float), err) ||
        cw_k_get_rows(M->c, &et, s->tok, n, s->h, err) ||
        cw_k_add_rmsnorm(M->c, s->h, NULL, (const float *)mt->enorm.data, s->cat, 2 * E, E, n,
                         W->hp.eps, err) ||
        cw_k_add_rmsnorm(M->c, s->hprev, NULL, (const float *)mt->hnorm.data, s->cat + E, 2 * E,
                         E, n, W->hp.eps, err) ||
        mm(M, s, &mt->eh_proj, s->cat, 2 * E, n, s->h, E, false, NULL, err) ||
        cw_k_add_rmsnorm(M->c, s->h, NULL, (const float *)mt->layer.attn_norm.data, s->x, E, E,
                         n, W->hp.eps, err))
        return -1;
    const struct next_norm nx = {&mt->shared_head_norm, s->hn, E, false};
    if (block(M, s, &mt->layer, &s->mtp, n, NULL, &nx, err))
        return cw_err_prefix(err, "mtp block");
    return 0;
}

int cw_cuda_forward_mtp(struct cw_cuda_model *M, struct cw_bseq *s, const int32_t *tokens,
                        const float *hidden_prev, int64_t n, const struct cw_fwd_out *out,
                        struct cw_err *err)
{
    const struct cw_qwen35_weights *W = &M->dw;
    if (!W->has_mtp)
        return cw_errf(err, CW_ERR_UNSUPPORTED, "cuda: the model has no MTP block");
    if (check_call(M, tokens, n, s->mtp_n_past, "mtp", err))
        return -1;
    const int64_t E = W->hp.n_embd;
    const struct cw_wt *lm = W->mtp.shared_head_head.data ? &W->mtp.shared_head_head : &W->output;
    for (int64_t b = 0; b < n; b += M->chunk) {
        const int64_t c = n - b < M->chunk ? n - b : M->chunk;
        if (upload_chunk(M, s, tokens + b, c, s->mtp_n_past, err) ||
            mtp_body(M, s, hidden_prev + b * E, c, err) ||
            finish_chunk(M, s, lm, b, c, n, out, err) || cw_cuda_sync(M->c, err))
            return -1;
        s->mtp_n_past += c;
    }
    return 0;
}

/* test_cpu_ops_oracle.c — cwen's CPU operators fed llama.cpp's own inputs,
 * op by op (teacher-forced), on generated tiny models.
 *
 * For each model: `cwen mkmodel` writes a GGUF; llama.cpp (prebuilt CPU
 * libraries) runs one prompt batch and a few single-token decodes with
 * cb_eval capturing every named intermediate (attn_norm-0, ...). Each of
 * cwen's ops then gets llama.cpp's inputs of that op (and weights read with
 * cw_gguf_open) and its output is compared with llama.cpp's output as
 * max |Δ| / max |llama| over the tensor. Bounds: f32 level (1e-5) except the
 * decay g (llama.cpp's f32 ln(1+e^x), 2e-4) and attention (llama.cpp's CPU
 * flash path rounds q to f16 and sums p·V in an f16 buffer; cwen keeps f32:
 * 3e-3). Carried state is checked too: cwen's conv / delta state and KV
 * cache, advanced by cwen from llama.cpp's inputs, must equal the state
 * llama.cpp reads at the next call. The LM head (and in the MTP block
 * eh_proj and attn_output) goes through cwen's matmul on llama.cpp's input:
 * same Q8 activation rows, so 1e-5. Models: the tiny presets, and the real
 * widths over 4 layers (35B-A3B with its MTP block, dense 27B) at weight
 * std 0.05. The MTP block runs in llama.cpp's MTP context (v0.5.0 has one:
 * LLAMA_CONTEXT_TYPE_MTP, tensors mtp_*), prefill and decode, checked op by
 * op the same way. Tables per model; CWEN_OPS_ONLY=label runs one model;
 * CWEN_ORACLE_VERBOSE=2 lists the graph. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_attn.h"
#include "cpu/cpu_deltanet.h"
#include "cpu/cpu_gemv.h"
#include "cpu/cpu_moe.h"
#include "cpu/cpu_ops.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf/gguf.h"
#include "llama.h"
#include "model/qwen35.h"
#include "oracle.h"
#include "../test.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- capture of named tensors ---- */
struct cap {
    char name[GGML_MAX_NAME];
    int64_t ne[4];
    float *data; /* f32 (I32 converted) */
};
struct caps {
    struct cap *v;
    int n, cap;
    int verbose;
};

static int64_t nel(const struct cap *c) { return c->ne[0] * c->ne[1] * c->ne[2] * c->ne[3]; }

static bool on_eval(struct ggml_tensor *t, bool ask, void *ud)
{
    struct caps *cs = ud;
    if (ask)
        return t->type == GGML_TYPE_F32 || t->type == GGML_TYPE_I32;
    if (!t->buffer || !ggml_backend_buffer_is_host(t->buffer))
        return true;
    if (cs->n == cs->cap) {
        cs->cap = cs->cap ? 2 * cs->cap : 256;
        cs->v = realloc(cs->v, cs->cap * sizeof *cs->v);
    }
    struct cap *c = &cs->v[cs->n++];
    snprintf(c->name, sizeof c->name, "%s", t->name);
    memcpy(c->ne, t->ne, sizeof c->ne);
    c->data = malloc((nel(c) ? nel(c) : 1) * sizeof *c->data);
    int64_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < t->ne[0]; i0++) {
                    const char *p = (const char *)t->data + i0 * t->nb[0] + i1 * t->nb[1] +
                                    i2 * t->nb[2] + i3 * t->nb[3];
                    c->data[k++] = t->type == GGML_TYPE_F32 ? *(const float *)p : (float)*(const int32_t *)p;
                }
    if (cs->verbose)
        printf("# graph: %-32s %lld %lld %lld %lld\n", c->name, (long long)c->ne[0],
               (long long)c->ne[1], (long long)c->ne[2], (long long)c->ne[3]);
    return true;
}

static void caps_clear(struct caps *cs)
{
    for (int i = 0; i < cs->n; i++)
        free(cs->v[i].data);
    cs->n = 0;
}

/* occurrence: 0 = first, -1 = last (Kcur/Vcur are named twice: raw, roped) */
static const struct cap *get(const struct caps *cs, int last, const char *fmt, int il)
{
    char name[GGML_MAX_NAME];
    if (il >= 0)
        snprintf(name, sizeof name, "%s-%d", fmt, il);
    else
        snprintf(name, sizeof name, "%s", fmt);
    const struct cap *found = NULL;
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->v[i].name, name)) {
            found = &cs->v[i];
            if (!last)
                break;
        }
    return found;
}

/* ---- per-op error bookkeeping ---- */
struct opstat {
    char op[96];
    double bound, worst;
    int n;
};
static struct opstat stats[160];
static int n_stats;

static void check(const char *op, double bound, const float *got, const struct cap *ref, int64_t n)
{
    struct opstat *s = NULL;
    for (int i = 0; i < n_stats; i++)
        if (!strcmp(stats[i].op, op))
            s = &stats[i];
    if (!s) {
        if (n_stats == (int)(sizeof stats / sizeof *stats)) {
            ok(0, "too many op kinds");
            return;
        }
        s = &stats[n_stats++];
        *s = (struct opstat){"", bound, 0, 0};
        snprintf(s->op, sizeof s->op, "%s", op);
    }
    if (!ref || nel(ref) != n) {
        ok(0, "%s: llama.cpp tensor missing or of another size (%lld vs %lld)", op,
           ref ? (long long)nel(ref) : -1LL, (long long)n);
        return;
    }
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref->data[i]);
        if (!(d <= md))
            md = d;
        mr = fmax(mr, fabs(ref->data[i]));
    }
    double e = mr > 0 ? md / mr : md;
    s->worst = fmax(s->worst, e);
    s->n++;
    ok(e <= bound, "%s (%s): rel err %.3g > %.3g", op, ref->name, e, bound);
}

/* one model's table, then a fresh one */
static void print_stats(const char *label)
{
    printf("# %s: op (phase): worst rel err over all layers and calls / bound\n", label);
    for (int i = 0; i < n_stats; i++)
        printf("#   %-44s %.3g / %.3g (%d checks)\n", stats[i].op, stats[i].worst, stats[i].bound, stats[i].n);
    n_stats = 0;
}

/* ---- weights from the GGUF ---- */
static float *weight(const struct cw_gguf *g, const char *fmt, int il, int64_t *n_out)
{
    char name[96];
    snprintf(name, sizeof name, fmt, il);
    const struct cw_gguf_tensor *t = cw_gguf_find_tensor(g, name);
    if (!t) {
        ok(0, "tensor %s missing", name);
        return NULL;
    }
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *w = malloc(n * sizeof *w);
    const struct cw_qtype_traits *tr = cw_qtype_traits(t->type);
    if (t->type == CW_TYPE_F32)
        memcpy(w, t->data, n * sizeof *w);
    else if (tr && tr->dequant_row)
        tr->dequant_row(t->data, w, n);
    else
        ok(0, "tensor %s: no dequantiser", name);
    if (n_out)
        *n_out = n;
    return w;
}

/* per-layer state cwen carries between calls */
struct layer_state {
    float *conv, *delta;      /* teacher-forced DeltaNet state (advanced from llama's inputs) */
    float *conv_f, *delta_f;  /* free-running: cw_deltanet_forward's own state */
    struct cw_kv_cache kv;    /* filled with llama.cpp's roped K and V */
    struct cw_kv_cache kv_f;  /* filled by cw_attn_forward */
};

enum { N_PROMPT = 12, N_DECODE = 3, N_CTX = 64 };
#define OP(s) (snprintf(op, sizeof op, "%s %s", s, ph), op)

/* ---- the MTP block, teacher-forced in llama.cpp's MTP context ----
 * llama.cpp v0.5.0 runs the nextn block (layer n_layer) in a context of
 * type LLAMA_CONTEXT_TYPE_MTP, its tensors named mtp_* (build_qkv's raw
 * the MoE's ffn_moe_* keep their usual names). The input
 * hidden rows are a fixed pseudo-random pattern (what the main pass gives
 * does not matter op by op). One prompt batch, then single-token decodes on
 * the block's own K/V. */
static float *mtp_weight(const struct cw_gguf *g, const char *role, int il, const char *fallback)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%%d.%s", role);
    char full[96];
    snprintf(full, sizeof full, name, il);
    if (cw_gguf_find_tensor(g, full) || !fallback)
        return weight(g, name, il, NULL);
    return weight(g, fallback, -1, NULL);
}

static void matmul_check(const char *op, const struct cw_gguf *g, const char *wname, const struct cap *x,
                         const struct cap *ref, int64_t n)
{
    const struct cw_gguf_tensor *t = cw_gguf_find_tensor(g, wname);
    if (!t || !x || !ref) {
        ok(0, "%s: %s or its input / output missing", op, wname);
        return;
    }
    float *y = malloc(sizeof(float) * t->ne[1] * n);
    void *scr = malloc(cw_cpu_matmul_scratch(t->type, t->ne[0], n) + 64);
    cw_cpu_matmul(NULL, t->type, t->data, t->ne[0], t->ne[1], x->data, n, y, scr);
    check(op, 1e-5, y, ref, t->ne[1] * n);
    free(y), free(scr);
}

static void run_mtp(const char *label, struct llama_model *model, const struct cw_gguf *g,
                    const struct cw_qwen35_hparams *hp, struct caps *cs)
{
    const int il = (int)hp->n_layer, E = (int)hp->n_embd;
    struct cw_attn_dims ad = {(int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim, hp->eps,
                              {(int)hp->n_rot, hp->rope_base, {hp->rope_sections[0], hp->rope_sections[1],
                                                               hp->rope_sections[2], hp->rope_sections[3]}}};
    const int64_t QN = (int64_t)ad.n_head * ad.head_dim, KN = (int64_t)ad.n_head_kv * ad.head_dim;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = N_CTX, cp.n_batch = N_CTX, cp.n_ubatch = N_CTX, cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.cb_eval = on_eval, cp.cb_eval_user_data = cs;
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    ok(ctx != NULL, "%s: llama.cpp's MTP context", label);
    if (!ctx)
        return;
    char nm[96];
    float *w_en = mtp_weight(g, "nextn.enorm.weight", il, NULL), *w_hn = mtp_weight(g, "nextn.hnorm.weight", il, NULL);
    float *w_an = mtp_weight(g, "attn_norm.weight", il, NULL), *w_pn = mtp_weight(g, "post_attention_norm.weight", il, NULL);
    float *w_qn = mtp_weight(g, "attn_q_norm.weight", il, NULL);
    float *w_sn = mtp_weight(g, "nextn.shared_head_norm.weight", il, "output_norm.weight");
    struct cw_kv_cache kv = {calloc(N_CTX * KN, 2), calloc(N_CTX * KN, 2), N_CTX};
    float *buf = malloc(sizeof(float) * (N_PROMPT * (4 * QN + 4 * E + hp->n_expert + 64) + 1024));
    float *scr = malloc(sizeof(float) * cw_attn_scratch_floats(&ad, N_CTX));
    int pos = 0;
    for (int call = 0; call <= N_DECODE; call++) {
        const int n = call == 0 ? N_PROMPT : 1;
        struct llama_batch b = llama_batch_init(n, E, 1); /* MTP reads tokens and hidden rows */
        b.token = malloc(n * sizeof *b.token);
        for (int i = 0; i < n; i++) {
            b.token[i] = 100 + (call * 7919 + i * 104729) % 50000;
            b.pos[i] = pos + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1;
            for (int e = 0; e < E; e++)
                b.embd[(int64_t)i * E + e] = sinf(0.37f * (float)e + 1.3f * (float)(pos + i)) *
                                             (1.0f + 0.5f * cosf(0.011f * (float)e));
        }
        b.n_tokens = n;
        caps_clear(cs);
        int rc = llama_decode(ctx, b);
        ok(rc == 0, "%s: MTP llama_decode call %d", label, call);
        const char *ph = call == 0 ? "prefill" : "decode";
        char op[96];
#define GET(s) (snprintf(nm, sizeof nm, "%s", s), get(cs, 0, nm, il))
        const struct cap *te = GET("mtp_tok_embd"), *en = GET("mtp_enorm"), *hn = GET("mtp_hnorm");
        const struct cap *cat = GET("mtp_concat"), *eh = GET("mtp_eh_proj"), *an = GET("mtp_attn_norm");
        const struct cap *P = GET("mtp_Qcur_full"), *qn = GET("mtp_Qcur_normed"), *gt = GET("mtp_gate");
        const struct cap *kn = GET("mtp_Kcur_normed"), *v0 = GET("mtp_Vcur");
        const struct cap *pg = GET("mtp_attn_pregate"), *ao = GET("mtp_attn_out"), *res = GET("mtp_attn_residual");
        const struct cap *pn = GET("mtp_attn_post_norm"), *fo = GET("mtp_ffn_out"), *pf = GET("mtp_post_ffn");
        const struct cap *hx = get(cs, 0, "h_nextn", -1), *shn = get(cs, 0, "mtp_shared_head_norm", -1);
        const struct cap *lo = get(cs, 0, "result_output", -1);
        if (getenv("CWEN_ORACLE_VERBOSE"))
            for (int i = 0; i < cs->n; i++)
                printf("# mtp graph: %s\n", cs->v[i].name);
        if (!te || !en || !hn || !cat || !eh || !an || !P || !qn || !gt || !kn || !v0 || !pg || !ao || !res ||
            !pn || !fo || !pf || !hx || !shn || !lo) {
            ok(0, "%s: MTP tensors not captured (call %d)", label, call);
            llama_batch_free(b);
            break;
        }
        float *x = buf;
        /* enorm, hnorm, concat, eh_proj */
        cw_rms_norm_rows(x, te->data, w_en, E, n, hp->eps);
        check(OP("mtp enorm"), 1e-5, x, en, (int64_t)E * n);
        cw_rms_norm_rows(x, b.embd, w_hn, E, n, hp->eps);
        check(OP("mtp hnorm"), 1e-5, x, hn, (int64_t)E * n);
        for (int t = 0; t < n; t++) {
            memcpy(x + (int64_t)t * 2 * E, en->data + (int64_t)t * E, E * 4);
            memcpy(x + (int64_t)t * 2 * E + E, hn->data + (int64_t)t * E, E * 4);
        }
        check(OP("mtp concat [enorm | hnorm]"), 0, x, cat, 2 * (int64_t)E * n);
        snprintf(nm, sizeof nm, "blk.%d.nextn.eh_proj.weight", il);
        matmul_check(OP("mtp eh_proj matmul"), g, nm, cat, eh, n);
        /* attention block */
        cw_rms_norm_rows(x, eh->data, w_an, E, n, hp->eps);
        check(OP("mtp rms_norm attn_norm"), 1e-5, x, an, (int64_t)E * n);
        float *q = buf, *gate = q + n * QN, *kk = gate + n * QN, *o = kk + n * KN;
        for (int t = 0; t < n; t++)
            cw_attn_split_q(&ad, w_qn, P->data + t * 2 * QN, q + t * QN, gate + t * QN);
        check(OP("mtp attn q split+rmsnorm"), 1e-5, q, qn, n * QN);
        check(OP("mtp attn gate split"), 0, gate, gt, n * QN);
        /* the raw K of the MTP graph has no name of its own (llama.cpp renames the
         * view), so its k norm is not checked here; the main layers check that op */
        memcpy(q, qn->data, n * QN * 4), memcpy(kk, kn->data, n * KN * 4);
        for (int t = 0; t < n; t++) {
            cw_attn_rope(&ad, q + t * QN, ad.n_head, pos + t);
            cw_attn_rope(&ad, kk + t * KN, ad.n_head_kv, pos + t);
            cw_attn_store_kv(&ad, &kv, pos + t, kk + t * KN, v0->data + t * KN);
        }
        for (int t = 0; t < n; t++)
            cw_attn_core(&ad, &kv, pos + t, q + t * QN, o + t * QN, scr);
        check(OP("mtp attn rope+softmax(QK)V vs f16 flash"), 3e-3, o, pg, n * QN);
        memcpy(o, pg->data, n * QN * 4);
        cw_attn_gate(o, gt->data, n * QN);
        struct cap gated = {"gated", {QN, n, 1, 1}, o};
        snprintf(nm, sizeof nm, "blk.%d.attn_output.weight", il);
        matmul_check(OP("mtp attn gate + attn_output matmul"), g, nm, &gated, ao, n);
        float *y = o + n * QN;
        cw_add(y, ao->data, eh->data, (int64_t)E * n);
        check(OP("mtp residual add attn"), 0, y, res, (int64_t)E * n);
        cw_rms_norm_rows(y, res->data, w_pn, E, n, hp->eps);
        check(OP("mtp rms_norm post_attention_norm"), 1e-5, y, pn, (int64_t)E * n);
        /* FFN: routed experts + sigmoid-gated shared expert */
        const struct cap *lgt = get(cs, 0, "ffn_moe_logits", il), *tk = get(cs, 0, "ffn_moe_topk", il);
        const struct cap *dn = get(cs, 0, "ffn_moe_down", il), *wn = get(cs, 0, "ffn_moe_weights_norm", il);
        const struct cap *mo = GET("mtp_ffn_moe_out"), *sh = GET("mtp_ffn_shexp");
        const struct cap *sg = GET("mtp_shared_expert_gate_sigmoid");
        if (hp->arch == CW_ARCH_QWEN35MOE && lgt && tk && dn && wn && mo && sh && sg) {
            const int NE = (int)hp->n_expert, NU = (int)hp->n_expert_used;
            float *pr = y, *wt = pr + n * NE, *self = wt + n * NU, *z = self + n * NU;
            int32_t sel[64];
            struct cw_err err = {0};
            for (int t = 0; t < n; t++) {
                cw_moe_route(NE, NU, lgt->data + t * NE, pr + t * NE, sel, wt + t * NU, &err);
                for (int s = 0; s < NU; s++)
                    self[t * NU + s] = (float)sel[s];
            }
            check(OP("mtp moe router softmax"), 1e-5, pr, get(cs, 0, "ffn_moe_probs", il), n * NE);
            check(OP("mtp moe top-k ids"), 0, self, tk, n * NU);
            check(OP("mtp moe renormalised weights"), 1e-5, wt, wn, n * NU);
            for (int t = 0; t < n; t++)
                cw_moe_combine(E, NU, wn->data + t * NU, dn->data + (int64_t)t * NU * E, NULL, 0, z + (int64_t)t * E);
            check(OP("mtp moe combine routed"), 1e-5, z, mo, (int64_t)E * n);
            for (int t = 0; t < n; t++) /* σ is llama's here: the gate logit is not named */
                for (int e = 0; e < E; e++)
                    z[(int64_t)t * E + e] = mo->data[(int64_t)t * E + e] + sh->data[(int64_t)t * E + e] * sg->data[t];
            check(OP("mtp moe + gated shared"), 1e-5, z, fo, (int64_t)E * n);
            const struct cap *mg = get(cs, 0, "ffn_moe_gate", il), *mu = get(cs, 0, "ffn_moe_up", il);
            const struct cap *fg = get(cs, 0, "ffn_gate", il), *fu = get(cs, 0, "ffn_up", il);
            if (mg && mu && fg && fu) {
                cw_swiglu(z, mg->data, mu->data, nel(mg));
                check(OP("mtp moe expert swiglu"), 1e-5, z, get(cs, 0, "ffn_moe_swiglu", il), nel(mg));
                cw_swiglu(z, fg->data, fu->data, nel(fg));
                check(OP("mtp shared expert swiglu"), 1e-5, z, get(cs, 0, "ffn_swiglu", il), nel(fg));
            }
        } else if (hp->arch == CW_ARCH_QWEN35MOE) {
            ok(0, "%s: MTP MoE tensors not captured", label);
        }
        cw_add(y, fo->data, res->data, (int64_t)E * n);
        check(OP("mtp residual add ffn"), 0, y, pf, (int64_t)E * n);
        cw_rms_norm_rows(y, pf->data, w_sn, E, n, hp->eps);
        check(OP("mtp shared_head_norm"), 1e-5, y, hx, (int64_t)E * n);
        snprintf(nm, sizeof nm, "blk.%d.nextn.shared_head_head.weight", il);
        matmul_check(OP("mtp lm head matmul"), g, cw_gguf_find_tensor(g, nm) ? nm : "output.weight", shn, lo, n);
#undef GET
        llama_batch_free(b);
        pos += n;
    }
    free(w_en), free(w_hn), free(w_an), free(w_pn), free(w_qn), free(w_sn);
    free(kv.k), free(kv.v), free(buf), free(scr);
    llama_free(ctx);
}

static void run_model(const char *label, const char *args)
{
    const char *bin = test_env("CWEN_BIN", "cwen"), *tmp = test_env("CWEN_TMP", "/tmp");
    const char *only = getenv("CWEN_OPS_ONLY"); /* diagnostic: one model by label */
    if (only && *only && strcmp(only, label))
        return;
    char path[512], cmd[2048];
    double t0 = now_s();
    snprintf(path, sizeof path, "%s/cpuops-%s.gguf", tmp, label);
    snprintf(cmd, sizeof cmd, "\"%s\" mkmodel -o \"%s\" %s --seed 7 --threads 2 >/dev/null", bin, path, args);
    if (system(cmd) != 0) {
        ok(0, "%s: %s failed", label, cmd);
        return;
    }
    struct cw_gguf g = {0};
    struct cw_err err = {0};
    struct cw_qwen35_hparams hp;
    if (cw_gguf_open(&g, path, &err) || cw_qwen35_hparams_load(&g, &hp, &err)) {
        ok(0, "%s: %s", label, err.msg);
        cw_gguf_close(&g);
        return;
    }
    note("%s: E %u, %u layers, H %u/%u, DeltaNet %u k / %u v heads, experts %u top %u, ff %u",
         label, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.ssm_n_k_heads, hp.ssm_n_v_heads,
         hp.n_expert, hp.n_expert_used, hp.n_ff);

    struct caps cs = {0};
    const char *vb = getenv("CWEN_ORACLE_VERBOSE");
    cs.verbose = vb && !strcmp(vb, "2");
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mtp = true; /* the main pass ignores the block; the MTP context runs it */
    struct llama_model *model = llama_model_load_from_file(path, mp);
    ok(model != NULL, "%s: llama.cpp loads the file", label);
    if (!model) {
        cw_gguf_close(&g);
        return;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = N_CTX, cp.n_batch = N_CTX, cp.n_ubatch = N_CTX, cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.cb_eval = on_eval, cp.cb_eval_user_data = &cs;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    ok(ctx != NULL, "%s: context", label);

    const int L = (int)hp.n_layer, E = (int)hp.n_embd;
    struct cw_deltanet_dims dd = {(int)hp.ssm_n_k_heads, (int)hp.ssm_n_v_heads, (int)hp.ssm_d_state,
                                  (int)hp.ssm_d_state, (int)hp.ssm_conv, hp.eps};
    struct cw_attn_dims ad = {(int)hp.n_head, (int)hp.n_head_kv, (int)hp.head_dim, hp.eps,
                              {(int)hp.n_rot, hp.rope_base, {hp.rope_sections[0], hp.rope_sections[1],
                                                             hp.rope_sections[2], hp.rope_sections[3]}}};
    const int64_t C = cw_deltanet_channels(&dd), VD = (int64_t)dd.n_v_head * dd.d_v;
    const int64_t QN = (int64_t)ad.n_head * ad.head_dim, KN = (int64_t)ad.n_head_kv * ad.head_dim;
    struct layer_state *ls = calloc(L, sizeof *ls);
    for (int il = 0; il < L; il++) {
        if (hp.layer_kind[il] == CW_LAYER_DELTANET) {
            ls[il].conv = calloc(cw_deltanet_conv_state_floats(&dd) + 1, 4);
            ls[il].delta = calloc(cw_deltanet_delta_state_floats(&dd), 4);
            ls[il].conv_f = calloc(cw_deltanet_conv_state_floats(&dd) + 1, 4);
            ls[il].delta_f = calloc(cw_deltanet_delta_state_floats(&dd), 4);
        } else {
            ls[il].kv = (struct cw_kv_cache){calloc(N_CTX * KN, 2), calloc(N_CTX * KN, 2), N_CTX};
            ls[il].kv_f = (struct cw_kv_cache){calloc(N_CTX * KN, 2), calloc(N_CTX * KN, 2), N_CTX};
        }
    }
    int64_t maxn = N_PROMPT;
    float *buf = malloc(sizeof(float) * maxn * (2 * QN + 4 * C + 8 * VD + 4 * E + 1024 + hp.n_expert));
    float *scr = malloc(sizeof(float) * (cw_attn_scratch_floats(&ad, N_CTX) + cw_deltanet_scratch_floats(&dd)));

    int pos = 0;
    int32_t experts_same = 1;
    for (int call = 0; call <= N_DECODE && ctx; call++) {
        const int n = call == 0 ? N_PROMPT : 1;
        struct llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; i++) {
            b.token[i] = 100 + (call * 7919 + i * 104729) % 50000;
            b.pos[i] = pos + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = 0;
            b.logits[i] = 1; /* all rows, so the last layer is not reduced to one row */
        }
        b.n_tokens = n;
        caps_clear(&cs);
        int rc = llama_decode(ctx, b);
        llama_batch_free(b);
        ok(rc == 0, "%s: llama_decode call %d", label, call);
        cs.verbose = 0;
        const char *ph = call == 0 ? "prefill" : "decode";
        char op[96];
        for (int il = 0; il < L; il++) {
            /* block input, attn_norm */
            const struct cap *in = il ? get(&cs, 0, "l_out", il - 1) : get(&cs, 0, "model.input_embed", -1);
            float *w_an = weight(&g, "blk.%d.attn_norm.weight", il, NULL);
            float *w_pn = weight(&g, "blk.%d.post_attention_norm.weight", il, NULL);
            if (in && w_an) {
                cw_rms_norm_rows(buf, in->data, w_an, E, n, hp.eps);
                check(OP("rms_norm attn_norm"), 1e-5, buf, get(&cs, 0, "attn_norm", il), (int64_t)E * n);
            }
            const struct cap *mix = NULL;
            if (hp.layer_kind[il] == CW_LAYER_DELTANET) {
                float *w_conv = weight(&g, "blk.%d.ssm_conv1d.weight", il, NULL);
                float *w_dt = weight(&g, "blk.%d.ssm_dt.bias", il, NULL);
                float *w_a = weight(&g, "blk.%d.ssm_a", il, NULL);
                float *w_norm = weight(&g, "blk.%d.ssm_norm.weight", il, NULL);
                struct cw_deltanet_weights dw = {w_conv, w_dt, w_a, w_norm};
                const struct cap *m = get(&cs, 0, "linear_attn_qkv_mixed", il), *z = get(&cs, 0, "z", il);
                const struct cap *bl = get(&cs, 0, "beta", il), *al = get(&cs, 0, "alpha", il);
                if (!m || !z || !bl || !al || !w_conv) {
                    ok(0, "%s: DeltaNet inputs of layer %d not captured", label, il);
                    continue;
                }
                float *beta = buf, *gg = beta + n * dd.n_v_head, *u = gg + n * dd.n_v_head;
                float *o = u + n * C, *y = o + n * VD;
                cw_deltanet_gates(&dd, &dw, n, bl->data, al->data, beta, gg);
                check(OP("deltanet beta sigmoid"), 1e-5, beta, get(&cs, 0, "beta_sigmoid", il), n * dd.n_v_head);
                check(OP("deltanet decay g"), 2e-4, gg, get(&cs, 0, "gate", il), n * dd.n_v_head);
                /* conv state: cwen's (advanced from llama's inputs) == what llama reads */
                check(OP("deltanet conv state in"), 0, ls[il].conv, get(&cs, 0, "conv_states_reshaped", il),
                      cw_deltanet_conv_state_floats(&dd));
                cw_deltanet_conv(&dd, w_conv, ls[il].conv, n, m->data, u);
                check(OP("deltanet conv+silu"), 1e-5, u, get(&cs, 0, "conv_output_silu", il), n * C);
                const struct cap *silu = get(&cs, 0, "conv_output_silu", il);
                if (silu)
                    memcpy(u, silu->data, n * C * sizeof *u); /* teacher-force the next step */
                cw_deltanet_l2norm_qk(&dd, n, u);
                {   /* compare the q and k parts to q_conv_predelta / k_conv_predelta */
                    const int64_t kd = (int64_t)dd.n_k_head * dd.d_k;
                    float *qq = y, *kk = y + n * kd;
                    for (int t = 0; t < n; t++) {
                        memcpy(qq + t * kd, u + t * C, kd * 4);
                        memcpy(kk + t * kd, u + t * C + kd, kd * 4);
                    }
                    check(OP("deltanet l2norm q"), 1e-5, qq, get(&cs, 0, "q_conv_predelta", il), n * kd);
                    check(OP("deltanet l2norm k"), 1e-5, kk, get(&cs, 0, "k_conv_predelta", il), n * kd);
                    /* teacher-force: llama's q̂, k̂, v, g, beta and incoming state */
                    const struct cap *cq = get(&cs, 0, "q_conv_predelta", il), *ck = get(&cs, 0, "k_conv_predelta", il);
                    const struct cap *cv = get(&cs, 0, "v_conv_predelta", il);
                    if (cq && ck && cv)
                        for (int t = 0; t < n; t++) {
                            memcpy(u + t * C, cq->data + t * kd, kd * 4);
                            memcpy(u + t * C + kd, ck->data + t * kd, kd * 4);
                            memcpy(u + t * C + 2 * kd, cv->data + t * VD, VD * 4);
                        }
                }
                const struct cap *sin_ = get(&cs, 0, "state_predelta", il);
                check(OP("deltanet delta state in"), 1e-5, ls[il].delta, sin_, cw_deltanet_delta_state_floats(&dd));
                if (sin_)
                    memcpy(ls[il].delta, sin_->data, cw_deltanet_delta_state_floats(&dd) * 4);
                const struct cap *lg = get(&cs, 0, "gate", il), *lb = get(&cs, 0, "beta_sigmoid", il);
                cw_deltanet_recur(&dd, ls[il].delta, n, u, lg ? lg->data : gg, lb ? lb->data : beta, o);
                check(OP("deltanet delta rule out"), 1e-5, o, get(&cs, 0, "attn_output", il), n * VD);
                check(OP("deltanet delta state out"), 1e-5, ls[il].delta, get(&cs, 0, "new_state", il),
                      cw_deltanet_delta_state_floats(&dd));
                const struct cap *lo = get(&cs, 0, "attn_output", il);
                cw_deltanet_gated_norm(&dd, w_norm, n, lo ? lo->data : o, z->data, y);
                check(OP("deltanet gated rmsnorm"), 1e-5, y, get(&cs, 0, "final_output", il), n * VD);
                /* the whole core, free-running on cwen's own state */
                struct cw_deltanet_state st = {ls[il].conv_f, ls[il].delta_f};
                rc = cw_deltanet_forward(&dd, &dw, &st, n, m->data, z->data, bl->data, al->data, y, scr, &err);
                check(OP("deltanet whole core (own state)"), 1e-4, y, get(&cs, 0, "final_output", il), n * VD);
                mix = get(&cs, 0, "linear_attn_out", il);
                free(w_conv), free(w_dt), free(w_a), free(w_norm);
            } else {
                float *w_qn = weight(&g, "blk.%d.attn_q_norm.weight", il, NULL);
                float *w_kn = weight(&g, "blk.%d.attn_k_norm.weight", il, NULL);
                struct cw_attn_weights aw = {w_qn, w_kn};
                const struct cap *P = get(&cs, 0, "Qcur_full", il), *k0 = get(&cs, 0, "Kcur", il);
                const struct cap *v0 = get(&cs, 0, "Vcur", il), *qr = get(&cs, -1, "Qcur", il);
                const struct cap *kr = get(&cs, -1, "Kcur", il), *qn = get(&cs, 0, "Qcur_normed", il);
                const struct cap *kn = get(&cs, 0, "Kcur_normed", il), *pg = get(&cs, 0, "attn_pregate", il);
                const struct cap *gr = get(&cs, 0, "gate_reshaped", il);
                if (!P || !k0 || !v0 || !qr || !kr || !qn || !kn || !pg || !gr) {
                    ok(0, "%s: attention inputs of layer %d not captured", label, il);
                    continue;
                }
                float *q = buf, *gate = q + n * QN, *kk = gate + n * QN, *o = kk + n * KN;
                for (int t = 0; t < n; t++)
                    cw_attn_split_q(&ad, w_qn, P->data + t * 2 * QN, q + t * QN, gate + t * QN);
                check(OP("attn q split+rmsnorm"), 1e-5, q, qn, n * QN);
                check(OP("attn gate split"), 0, gate, gr, n * QN);
                memcpy(kk, k0->data, n * KN * 4);
                cw_attn_head_norm(&ad, w_kn, kk, n * ad.n_head_kv);
                check(OP("attn k rmsnorm"), 1e-5, kk, kn, n * KN);
                memcpy(q, qn->data, n * QN * 4), memcpy(kk, kn->data, n * KN * 4);
                for (int t = 0; t < n; t++) {
                    cw_attn_rope(&ad, q + t * QN, ad.n_head, pos + t);
                    cw_attn_rope(&ad, kk + t * KN, ad.n_head_kv, pos + t);
                }
                check(OP("attn rope q"), 1e-5, q, qr, n * QN);
                check(OP("attn rope k"), 1e-5, kk, kr, n * KN);
                for (int t = 0; t < n; t++)
                    cw_attn_store_kv(&ad, &ls[il].kv, pos + t, kr->data + t * KN, v0->data + t * KN);
                for (int t = 0; t < n; t++)
                    cw_attn_core(&ad, &ls[il].kv, pos + t, qr->data + t * QN, o + t * QN, scr);
                check(OP("attn softmax(QK)V vs f16 flash"), 3e-3, o, pg, n * QN);
                memcpy(o, pg->data, n * QN * 4);
                cw_attn_gate(o, gr->data, n * QN);
                check(OP("attn sigmoid gate"), 1e-5, o, get(&cs, 0, "attn_gated", il), n * QN);
                rc = cw_attn_forward(&ad, &aw, &ls[il].kv_f, pos, n, P->data, k0->data, v0->data, o, scr, &err);
                ok(rc == 0, "attn forward: %s", err.msg);
                check(OP("attn whole core (own cache)"), 3e-3, o, get(&cs, 0, "attn_gated", il), n * QN);
                mix = get(&cs, 0, "attn_output", il);
                free(w_qn), free(w_kn);
            }
            /* residual, post-attention norm */
            const struct cap *res = get(&cs, 0, "attn_residual", il);
            if (mix && in) {
                cw_add(buf, mix->data, in->data, (int64_t)E * n);
                check(OP("residual add attn"), 0, buf, res, (int64_t)E * n);
            }
            if (res && w_pn) {
                cw_rms_norm_rows(buf, res->data, w_pn, E, n, hp.eps);
                check(OP("rms_norm post_attention_norm"), 1e-5, buf, get(&cs, 0, "attn_post_norm", il), (int64_t)E * n);
            }
            /* FFN */
            const struct cap *fo = get(&cs, 0, "ffn_out", il);
            if (hp.arch == CW_ARCH_QWEN35MOE) {
                const int NE = (int)hp.n_expert, NU = (int)hp.n_expert_used;
                const struct cap *lgt = get(&cs, 0, "ffn_moe_logits", il), *tk = get(&cs, 0, "ffn_moe_topk", il);
                const struct cap *dn = get(&cs, 0, "ffn_moe_down", il), *wn = get(&cs, 0, "ffn_moe_weights_norm", il);
                const struct cap *sh = get(&cs, 0, "ffn_shexp", il), *sg = get(&cs, 0, "shared_expert_gate", il);
                if (!lgt || !tk || !dn || !wn || !sh || !sg || !fo) {
                    ok(0, "%s: MoE tensors of layer %d not captured", label, il);
                } else {
                    float *pr = buf, *wt = pr + n * NE, *self = wt + n * NU, *y = self + n * NU;
                    int32_t sel[64];
                    for (int t = 0; t < n; t++) {
                        cw_moe_route(NE, NU, lgt->data + t * NE, pr + t * NE, sel, wt + t * NU, &err);
                        for (int s = 0; s < NU; s++) {
                            self[t * NU + s] = (float)sel[s];
                            experts_same &= sel[s] == (int32_t)tk->data[t * NU + s];
                        }
                    }
                    check(OP("moe router softmax"), 1e-5, pr, get(&cs, 0, "ffn_moe_probs", il), n * NE);
                    check(OP("moe top-k ids"), 0, self, tk, n * NU);
                    check(OP("moe renormalised weights"), 1e-5, wt, wn, n * NU);
                    for (int t = 0; t < n; t++)
                        cw_moe_combine(E, NU, wn->data + t * NU, dn->data + (int64_t)t * NU * E, NULL, 0, y + (int64_t)t * E);
                    check(OP("moe combine routed"), 1e-5, y, get(&cs, 0, "ffn_moe_out", il), (int64_t)E * n);
                    for (int t = 0; t < n; t++)
                        cw_moe_combine(E, NU, wn->data + t * NU, dn->data + (int64_t)t * NU * E,
                                       sh->data + (int64_t)t * E, sg->data[t], y + (int64_t)t * E);
                    check(OP("moe combine + gated shared"), 1e-5, y, fo, (int64_t)E * n);
                    const struct cap *mg = get(&cs, 0, "ffn_moe_gate", il), *mu = get(&cs, 0, "ffn_moe_up", il);
                    if (mg && mu && nel(mg) == nel(mu)) {
                        float *sw = malloc(nel(mg) * 4);
                        cw_swiglu(sw, mg->data, mu->data, nel(mg));
                        check(OP("moe expert swiglu"), 1e-5, sw, get(&cs, 0, "ffn_moe_swiglu", il), nel(mg));
                        free(sw);
                    }
                }
            }
            const struct cap *fg = get(&cs, 0, "ffn_gate", il), *fu = get(&cs, 0, "ffn_up", il);
            if (fg && fu && nel(fg) == nel(fu)) { /* dense FFN, or the MoE's shared expert */
                float *sw = malloc(nel(fg) * 4);
                cw_swiglu(sw, fg->data, fu->data, nel(fg));
                check(OP(hp.arch == CW_ARCH_QWEN35MOE ? "shared expert swiglu" : "dense ffn swiglu"), 1e-5, sw,
                      get(&cs, 0, "ffn_swiglu", il), nel(fg));
                free(sw);
            } else {
                ok(0, "%s: ffn_gate/ffn_up of layer %d not captured", label, il);
            }
            if (fo && res) {
                cw_add(buf, fo->data, res->data, (int64_t)E * n);
                check(OP("residual add ffn"), 0, buf, get(&cs, 0, "l_out", il), (int64_t)E * n);
            }
            free(w_an), free(w_pn);
        }
        float *w_on = weight(&g, "output_norm.weight", -1, NULL);
        const struct cap *last = get(&cs, 0, "l_out", L - 1);
        if (last && w_on) {
            cw_rms_norm_rows(buf, last->data, w_on, E, n, hp.eps);
            check(OP("rms_norm output_norm"), 1e-5, buf, get(&cs, 0, "result_norm", -1), (int64_t)E * n);
        }
        /* LM head: the same Q8_K rows of llama.cpp's result_norm through cwen's matmul */
        const struct cap *rn = get(&cs, 0, "result_norm", -1), *ro = get(&cs, 0, "result_output", -1);
        const struct cw_gguf_tensor *ow = cw_gguf_find_tensor(&g, "output.weight");
        if (rn && ro && ow) {
            float *lg = malloc(sizeof(float) * nel(ro));
            void *mscr = malloc(cw_cpu_matmul_scratch(ow->type, ow->ne[0], n) + 64);
            cw_cpu_matmul(NULL, ow->type, ow->data, ow->ne[0], ow->ne[1], rn->data, n, lg, mscr);
            check(OP("lm head matmul"), 1e-5, lg, ro, ow->ne[1] * n);
            free(lg), free(mscr);
        } else {
            ok(0, "%s: result_norm / result_output / output.weight missing", label);
        }
        free(w_on);
        pos += n;
    }
    if (hp.arch == CW_ARCH_QWEN35MOE)
        ok(experts_same, "%s: identical expert ids and order on every token", label);
    if (hp.n_nextn > 0 && ctx)
        run_mtp(label, model, &g, &hp, &cs);
    caps_clear(&cs);
    free(cs.v), free(buf), free(scr);
    for (int il = 0; il < L; il++) {
        free(ls[il].conv), free(ls[il].delta), free(ls[il].conv_f), free(ls[il].delta_f);
        free(ls[il].kv.k), free(ls[il].kv.v), free(ls[il].kv_f.k), free(ls[il].kv_f.v);
    }
    free(ls);
    if (ctx)
        llama_free(ctx);
    llama_model_free(model);
    cw_gguf_close(&g);
    remove(path);
    note("%s: %.1f s", label, now_s() - t0);
    print_stats(label);
}

int main(void)
{
    char libdir[1024];
    snprintf(libdir, sizeof libdir, "%s/cpu/package/bins/linux-x64", oracle_dir());
    oracle_init();
    ggml_backend_load_all_from_path(libdir);
    run_model("tiny-moe", "--preset tiny-moe --std 0.3");
    run_model("tiny-dense", "--preset tiny-dense --no-mtp --std 0.3");
    /* GQA 3 with 2 kv heads and 3 v-heads per k-head: tells blocked from
     * modulo mapping apart, and tiled from grouped v-heads */
    run_model("wide-dense", "--preset tiny-dense --no-mtp --std 0.3 --heads 6 --kv-heads 2 --k-heads 2 --v-heads 6");
    /* the real widths, few layers (one attention layer: the 4th), Qwen3's
     * 151,936-row vocabulary: 35B-A3B (E 2048, 256 experts top 8, H 16/2,
     * DeltaNet 16 k / 32 v heads) and dense 27B (E 5120, ff 17408, H 24/4,
     * DeltaNet 16 k / 48 v heads) */
    run_model("35b-a3b-width", "--preset 35b-a3b --layers 4 --vocab-size 151936 --std 0.05");
    run_model("27b-width", "--preset 27b --layers 4 --vocab-size 151936 --no-mtp --std 0.05");
    return done();
}

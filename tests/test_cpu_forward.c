/* test_cpu_forward.c — the CPU forward pass against itself, and the bind
 * step's refusals.
 *
 * On generated tiny MoE and dense files (cwen mkmodel): logits of a prompt in
 * one batch, token by token and in uneven chunks are bit-identical (main pass
 * and MTP block); two sequences interleaved give the same bits as each alone;
 * a file with a wrong-shaped, a wrongly typed, a missing or an extra tensor is
 * refused with a message naming that tensor. The oracle comparison is in
 * tests/parity/test_forward_oracle.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "cpu/cpu_forward.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "test.h"

#define N_PROMPT 24

struct loaded {
    struct cw_gguf g;
    struct cw_qwen35_hparams hp;
    struct cw_qwen35_weights w;
    struct cw_cpu_model m;
};

static int gen(const char *preset, const char *mix, const char *out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset %s --mix %s --seed 3 --std 0.2 -o '%s' >/dev/null",
             test_env("CWEN_BIN", "./cwen"), preset, mix, out);
    return system(cmd);
}

static int load(struct loaded *L, const char *path, struct cw_pool *pool, struct cw_err *err)
{
    memset(L, 0, sizeof *L);
    if (cw_gguf_open(&L->g, path, err) || cw_qwen35_hparams_load(&L->g, &L->hp, err) ||
        cw_qwen35_bind(&L->w, &L->g, &L->hp, err) ||
        cw_cpu_model_init(&L->m, &L->w, pool, 4096, err))
        return -1;
    return 0;
}

static void unload(struct loaded *L)
{
    cw_qwen35_weights_free(&L->w);
    cw_gguf_close(&L->g);
}

static void prompt(int32_t *t, int n, uint32_t seed, uint32_t n_vocab)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (n_vocab < 150000 ? n_vocab : 150000));
    }
}

/* runs toks in chunks of `chunk` (0: one batch) with all logits */
static int run(struct loaded *L, struct cw_cpu_seq *s, const int32_t *toks, int n, int chunk,
               float *logits, float *hidden, struct cw_err *err)
{
    const int64_t V = L->hp.n_vocab, E = L->hp.n_embd;
    if (!chunk)
        chunk = n;
    for (int i = 0; i < n; i += chunk) {
        int c = n - i < chunk ? n - i : chunk;
        if (cw_cpu_forward(&L->m, s, toks + i, c, logits + i * V, true,
                           hidden ? hidden + i * E : NULL, err))
            return -1;
    }
    return 0;
}

static int finite_and_varied(const float *x, int64_t n)
{
    float lo = x[0], hi = x[0];
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]))
            return 0;
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    return hi - lo > 1e-3f;
}

static void check_model(const char *preset, const char *mix, struct cw_pool *pool)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/fwd-%s-%s.gguf", test_env("CWEN_TMP", "."), preset, mix);
    if (gen(preset, mix, path)) {
        ok(0, "mkmodel %s %s", preset, mix);
        return;
    }
    struct loaded L;
    struct cw_err err = {0};
    if (load(&L, path, pool, &err)) {
        ok(0, "load %s: %s", path, err.msg);
        return;
    }
    const int64_t V = L.hp.n_vocab, E = L.hp.n_embd, n = N_PROMPT;
    int32_t toks[N_PROMPT], toks2[N_PROMPT];
    prompt(toks, N_PROMPT, 11, (uint32_t)V);
    prompt(toks2, N_PROMPT, 99, (uint32_t)V);
    float *a = malloc((size_t)(n * V) * sizeof(float)), *b = malloc((size_t)(n * V) * sizeof(float));
    float *c = malloc((size_t)(n * V) * sizeof(float)), *d = malloc((size_t)(n * V) * sizeof(float));
    float *ha = malloc((size_t)(n * E) * sizeof(float)), *hb = malloc((size_t)(n * E) * sizeof(float));
    struct cw_cpu_seq s1, s2;
    if (cw_cpu_seq_init(&s1, &L.m, &err) || cw_cpu_seq_init(&s2, &L.m, &err)) {
        ok(0, "seq init: %s", err.msg);
        goto out;
    }

    /* one batch vs token by token vs uneven chunks: the same bits */
    ok(run(&L, &s1, toks, (int)n, 0, a, ha, &err) == 0, "%s %s batch: %s", preset, mix, err.msg);
    ok(finite_and_varied(a, n * V), "%s %s: logits finite and not constant", preset, mix);
    ok(run(&L, &s2, toks, (int)n, 1, b, hb, &err) == 0, "%s %s single: %s", preset, mix, err.msg);
    ok(memcmp(a, b, (size_t)(n * V) * sizeof(float)) == 0,
       "%s %s: batch and token-by-token logits bit-identical", preset, mix);
    ok(memcmp(ha, hb, (size_t)(n * E) * sizeof(float)) == 0,
       "%s %s: batch and token-by-token hidden bit-identical", preset, mix);
    cw_cpu_seq_reset(&s2, &L.m);
    ok(run(&L, &s2, toks, (int)n, 7, c, NULL, &err) == 0, "%s %s chunks: %s", preset, mix, err.msg);
    ok(memcmp(a, c, (size_t)(n * V) * sizeof(float)) == 0,
       "%s %s: chunks of 7 bit-identical to one batch (after reset)", preset, mix);

    /* last-token logits equal the last row */
    cw_cpu_seq_reset(&s2, &L.m);
    ok(cw_cpu_forward(&L.m, &s2, toks, n, c, false, NULL, &err) == 0, "last only: %s", err.msg);
    ok(memcmp(c, a + (n - 1) * V, (size_t)V * sizeof(float)) == 0,
       "%s %s: last-token logits = last row", preset, mix);

    /* two sequences interleaved are independent */
    cw_cpu_seq_reset(&s1, &L.m);
    cw_cpu_seq_reset(&s2, &L.m);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bad |= cw_cpu_forward(&L.m, &s1, toks + i, 1, c + i * V, true, NULL, &err);
        bad |= cw_cpu_forward(&L.m, &s2, toks2 + i, 1, d + i * V, true, NULL, &err);
    }
    ok(!bad && memcmp(a, c, (size_t)(n * V) * sizeof(float)) == 0,
       "%s %s: sequence 1 interleaved with sequence 2 = sequence 1 alone", preset, mix);
    ok(memcmp(c, d, (size_t)(n * V) * sizeof(float)) != 0,
       "%s %s: different prompts give different logits", preset, mix);

    /* the context ceiling and bad tokens are refused */
    int32_t bad_tok = (int32_t)V;
    ok(cw_cpu_forward(&L.m, &s1, &bad_tok, 1, c, false, NULL, &err) == -1 &&
           strstr(err.msg, "vocabulary"), "token outside the vocabulary refused: %s", err.msg);

    /* MTP block: runs, batch == token by token */
    if (L.w.has_mtp) {
        /* token k pairs with the main hidden at k-1 (row 0: zeros) */
        float *hp = calloc((size_t)(n * E), sizeof(float));
        memcpy(hp + E, ha, (size_t)((n - 1) * E) * sizeof(float));
        struct cw_cpu_seq s3;
        cw_cpu_seq_init(&s3, &L.m, &err);
        ok(cw_cpu_forward_mtp(&L.m, &s1, toks, hp, n, c, true, NULL, &err) == 0,
           "mtp batch: %s", err.msg);
        ok(finite_and_varied(c, n * V), "%s %s: MTP logits finite and not constant", preset, mix);
        bad = 0;
        for (int i = 0; i < n; i++)
            bad |= cw_cpu_forward_mtp(&L.m, &s3, toks + i, hp + i * E, 1, d + i * V, true, NULL,
                                      &err);
        ok(!bad && memcmp(c, d, (size_t)(n * V) * sizeof(float)) == 0,
           "%s %s: MTP batch and token-by-token bit-identical", preset, mix);
        cw_cpu_seq_free(&s3);
        free(hp);
    } else {
        ok(cw_cpu_forward_mtp(&L.m, &s1, toks, ha, 1, c, false, NULL, &err) == -1,
           "%s %s: MTP refused without an MTP block", preset, mix);
    }
out:
    cw_cpu_seq_free(&s1);
    cw_cpu_seq_free(&s2);
    free(a), free(b), free(c), free(d), free(ha), free(hb);
    unload(&L);
}

/* ---- bind refusals: rewrite a generated file with one tensor changed ---- */

enum edit { E_SHAPE, E_TYPE, E_MISSING, E_EXTRA, E_SHEXP_2D };

static int rewrite(const struct cw_gguf *g, const char *out, const char *victim, enum edit e,
                   struct cw_err *err)
{
    struct cw_gguf_writer *w = cw_gguf_writer_new(g->alignment);
    const void **data = calloc(g->n_tensors + 1, sizeof *data);
    void *zeros = NULL;
    int rc = -1, k = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        char key[256];
        cw_gguf_str_copy(g->kv[i].key, key, sizeof key);
        if (cw_gguf_writer_set_value(w, key, &g->kv[i].value))
            goto done;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct cw_gguf_tensor *t = &g->tensors[i];
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t nd = t->n_dims;
        enum cw_qtype type = t->type;
        const void *src = t->data;
        if (!strcmp(t->name, victim)) {
            if (e == E_MISSING)
                continue;
            if (e == E_SHAPE)
                ne[1] /= 2;
            if (e == E_TYPE)
                type = CW_TYPE_F16, src = NULL;
            if (e == E_SHEXP_2D)
                nd = 2; /* {E} written as {E, 1}: same data */
        }
        if (cw_gguf_writer_add_tensor(w, t->name, nd, ne, type, err) < 0)
            goto done;
        data[k++] = src;
    }
    if (e == E_EXTRA) {
        int64_t ne[4] = {32, 1, 1, 1};
        if (cw_gguf_writer_add_tensor(w, "blk.0.stray.weight", 1, ne, CW_TYPE_F32, err) < 0)
            goto done;
        data[k++] = NULL;
    }
    /* tensors without data (new type/extra) get zeros */
    zeros = calloc(1, 1 << 24);
    for (int i = 0; i < k; i++)
        if (!data[i])
            data[i] = zeros;
    rc = cw_gguf_writer_write_file(w, out, data, err);
done:
    free(zeros);
    free(data);
    cw_gguf_writer_free(w);
    return rc;
}

static void check_bind_errors(void)
{
    char path[1024], bad[1024];
    snprintf(path, sizeof path, "%s/fwd-bind.gguf", test_env("CWEN_TMP", "."));
    snprintf(bad, sizeof bad, "%s/fwd-bind-bad.gguf", test_env("CWEN_TMP", "."));
    if (gen("tiny-moe", "q8_0", path)) {
        ok(0, "mkmodel");
        return;
    }
    struct cw_gguf g;
    struct cw_err err = {0};
    if (cw_gguf_open(&g, path, &err)) {
        ok(0, "open: %s", err.msg);
        return;
    }
    static const struct {
        const char *victim;
        enum edit e;
        const char *want; /* must appear in the message besides the name */
    } cases[] = {
        {"blk.1.attn_gate.weight", E_SHAPE, "expected"},
        {"blk.3.attn_k_norm.weight", E_TYPE, "f32"},
        {"blk.2.ssm_a", E_MISSING, "missing"},
        {"blk.0.stray.weight", E_EXTRA, "not part"},
        {"blk.3.ffn_down_exps.weight", E_SHAPE, "expected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cw_gguf b;
        struct cw_qwen35_hparams hp;
        struct cw_qwen35_weights w;
        if (rewrite(&g, bad, cases[i].victim, cases[i].e, &err) || cw_gguf_open(&b, bad, &err)) {
            ok(0, "rewrite %s: %s", cases[i].victim, err.msg);
            continue;
        }
        int rc = cw_qwen35_hparams_load(&b, &hp, &err);
        if (rc == 0)
            rc = cw_qwen35_bind(&w, &b, &hp, &err);
        ok(rc == -1 && strstr(err.msg, cases[i].victim) && strstr(err.msg, cases[i].want),
           "bind refuses %s with a message naming it: %s", cases[i].victim, err.msg);
        if (rc == 0)
            cw_qwen35_weights_free(&w);
        cw_gguf_close(&b);
    }
    /* the {E, 1} form of ffn_gate_inp_shexp is accepted */
    struct cw_gguf b;
    struct cw_qwen35_hparams hp;
    struct cw_qwen35_weights w;
    if (rewrite(&g, bad, "blk.0.ffn_gate_inp_shexp.weight", E_SHEXP_2D, &err) == 0 &&
        cw_gguf_open(&b, bad, &err) == 0) {
        ok(cw_qwen35_hparams_load(&b, &hp, &err) == 0 && cw_qwen35_bind(&w, &b, &hp, &err) == 0,
           "ffn_gate_inp_shexp as {E, 1} accepted: %s", err.msg);
        cw_qwen35_weights_free(&w);
        cw_gguf_close(&b);
    } else {
        ok(0, "rewrite shexp: %s", err.msg);
    }
    cw_gguf_close(&g);
}

int main(void)
{
    struct cw_pool pool;
    struct cw_err err = {0};
    if (cw_pool_init(&pool, 2, &err)) {
        ok(0, "pool: %s", err.msg);
        return done();
    }
    check_model("tiny-moe", "q4_k_m", &pool);
    check_model("tiny-dense", "q8_0", &pool);
    check_model("tiny-moe", "bf16", NULL);
    check_bind_errors();
    cw_pool_free(&pool);
    return done();
}

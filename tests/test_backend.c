/* test_backend.c — the backend contract (backend.h) over the CPU backend.
 *
 * On a generated tiny MoE file: the contract's forward gives the same bits
 * as cw_cpu_forward; argmax alone (no logits asked) equals the argmax of the
 * logits; all_logits rows match; seq_pos / seq_reset keep the position; the
 * MTP pass through the contract equals the direct call; names are checked
 * (unknown → invalid; "cuda" without a GPU → unsupported, or a working GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base/pool.h"
#include "cpu/cpu_forward.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "test.h"

#define N 20

int main(void)
{
    char path[1024], cmd[2048];
    snprintf(path, sizeof path, "%s/backend-tiny-moe.gguf", test_env("CWEN_TMP", "."));
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset tiny-moe --seed 5 -o '%s' >/dev/null",
             test_env("CWEN_BIN", "./cwen"), path);
    if (system(cmd)) {
        ok(0, "mkmodel failed: %s", cmd);
        return done();
    }
    struct cw_err err = {0};
    struct cw_gguf g;
    struct cw_qwen35_hparams hp;
    struct cw_qwen35_weights w;
    struct cw_pool pool;
    if (cw_gguf_open(&g, path, &err) || cw_qwen35_hparams_load(&g, &hp, &err) ||
        cw_qwen35_bind(&w, &g, &hp, &err) || cw_pool_init(&pool, 2, &err)) {
        ok(0, "load: %s", err.msg);
        return done();
    }
    const int64_t V = hp.n_vocab, E = hp.n_embd;
    int32_t toks[N];
    for (int i = 0; i < N; i++)
        toks[i] = (int32_t)((i * 7919u + 13u) % 1000u);

    struct cw_backend *b = NULL;
    const struct cw_backend_opts o = {.n_ctx_max = 256, .pool = &pool};
    ok(cw_backend_open(&b, "cpu", &w, &o, &err) == 0, "open cpu: %s", err.msg);
    ok(b && !strcmp(b->ops->name, "cpu") && b->n_ctx_max == 256, "cpu backend, n_ctx 256");

    struct cw_backend *bad = NULL;
    ok(cw_backend_open(&bad, "tpu", &w, &o, &err) == -1 && err.code == CW_ERR_INVALID &&
           strstr(err.msg, "tpu"), "unknown backend refused by name: %s", err.msg);
    struct cw_backend *cu = NULL;
    int rc = cw_backend_open(&cu, "cuda", &w, &o, &err);
    ok(rc == 0 || err.code == CW_ERR_UNSUPPORTED, "cuda opens or says unsupported: %s", err.msg);
    if (rc == 0)
        cw_backend_close(cu);
    else
        note("cuda: %s", err.msg);

    /* reference: the CPU forward called directly */
    struct cw_cpu_model m;
    struct cw_cpu_seq ref;
    float *lr = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V);
    float *hr = malloc(sizeof(float) * N * E), *hb = malloc(sizeof(float) * N * E);
    float *mr = malloc(sizeof(float) * V), *mb = malloc(sizeof(float) * V);
    ok(cw_cpu_model_init(&m, &w, &pool, 256, &err) == 0 && cw_cpu_seq_init(&ref, &m, &err) == 0,
       "cpu model: %s", err.msg);
    ok(cw_cpu_forward(&m, &ref, toks, N, lr, true, hr, &err) == 0, "direct: %s", err.msg);

    struct cw_bseq *s = NULL;
    ok(b->ops->seq_new(b, &s, &err) == 0, "seq_new: %s", err.msg);
    int32_t am[N];
    struct cw_fwd_out fo = {.logits = lb, .all_logits = true, .hidden = hb, .argmax = am};
    ok(b->ops->forward(b, s, toks, N, &fo, &err) == 0, "forward: %s", err.msg);
    ok(!memcmp(lr, lb, sizeof(float) * N * V), "all logits bit-identical to cw_cpu_forward");
    ok(!memcmp(hr, hb, sizeof(float) * N * E), "hidden bit-identical");
    int am_ok = 1;
    for (int i = 0; i < N; i++)
        am_ok &= am[i] == cw_argmax(lb + i * V, (int32_t)V);
    ok(am_ok, "argmax of every row");
    ok(b->ops->seq_pos(b, s) == N, "position %lld", (long long)b->ops->seq_pos(b, s));

    /* argmax alone after a reset: the last row's greedy token */
    b->ops->seq_reset(b, s);
    ok(b->ops->seq_pos(b, s) == 0, "reset to position 0");
    int32_t one = -1;
    struct cw_fwd_out fa = {.argmax = &one};
    ok(b->ops->forward(b, s, toks, N, &fa, &err) == 0 && one == am[N - 1],
       "argmax without logits = %d (want %d)", one, am[N - 1]);

    /* a bad token leaves the sequence where it was */
    int32_t badtok = (int32_t)V;
    ok(b->ops->forward(b, s, &badtok, 1, &fa, &err) == -1 && err.code == CW_ERR_INVALID &&
           b->ops->seq_pos(b, s) == N, "out-of-vocabulary token refused: %s", err.msg);

    /* the MTP block through the contract */
    if (w.has_mtp) {
        ok(cw_cpu_forward_mtp(&m, &ref, toks + 1, hr, N - 1, mr, false, NULL, &err) == 0,
           "direct mtp: %s", err.msg);
        struct cw_fwd_out fm = {.logits = mb};
        ok(b->ops->forward_mtp(b, s, toks + 1, hr, N - 1, &fm, &err) == 0, "mtp: %s", err.msg);
        ok(!memcmp(mr, mb, sizeof(float) * V), "MTP logits bit-identical");
    } else {
        skip("the tiny model has no MTP block");
    }

    b->ops->seq_free(b, s);
    cw_backend_close(b);
    cw_cpu_seq_free(&ref);
    free(lr), free(lb), free(hr), free(hb), free(mr), free(mb);
    cw_pool_free(&pool);
    cw_qwen35_weights_free(&w);
    cw_gguf_close(&g);
    return done();
}

/* test_forward_oracle.c — cwen's CPU forward pass against llama.cpp, end to end.
 *
 * For generated tiny MoE and dense files (with and without the MTP block; q4_k_m,
 * q8_0 and bf16 mixes): a 64-token prompt in one batch, then 64 single-token
 * decode steps forced to the same tokens (llama.cpp's greedy choices) in
 * llama.cpp and in cwen; logits at all 128 positions are compared. The same
 * 128 tokens are also run through llama.cpp one token at a time, to measure
 * llama.cpp against itself.
 *
 * Why the bounds are what they are (qwen36-model.md §11): llama.cpp's CPU
 * quantises every activation row to Q8_K/Q8_0 before a quantised matmul and
 * rounds attention to f16 (flash path, on by default). cwen quantises
 * activations the same way but keeps attention in f32 (cpu_attn.h). So row 0
 * (one key: the softmax is exact) agrees to float rounding, later rows agree
 * until one quantisation rounding decision flips or attention's ~1e-3
 * difference tips one, and from there the two drift apart as llama.cpp
 * drifts from itself between a batched and a token-by-token run. §11's table
 * gives that self-drift on tiny random-weight files as 0.009-0.26 max
 * row-relative error (row max |Δ| / row max |logit|), with top-1 mismatches
 * only at top-2 margins up to 0.26 where the row max |logit| is ~30 (0.9 %).
 * Files use weight std 0.3, as the table's s0.3 files. Per file:
 *   - row 0: row-relative error <= 1e-5 (bf16: 1e-2, since llama.cpp's own
 *     bf16 batch and single-token kernels already differ by 3e-3 there);
 *   - max row-relative error <= 0.30: the table's worst self-drift, 0.26,
 *     plus margin (MoE routing flips make isolated spikes, so a max over
 *     128 rows cannot be tied tighter to one self-run);
 *   - mean row-relative error <= 4 x llama.cpp's own mean drift on the same
 *     file and tokens + 0.005 (the factor covers f32 vs f16 attention, which
 *     the self-comparison does not contain);
 *   - top-1 identical at every position where llama.cpp's top-2 margin
 *     exceeds 2 % of the row's max |logit| (about twice the table's worst
 *     mismatch margin), and most positions (>= 55 %) clear that margin, so
 *     the check is not vacuous. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "cpu/cpu_forward.h"
#include "ggml-backend.h"
#include "gguf/gguf.h"
#include "llama.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "oracle.h"
#include "../test.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define N_PROMPT 64
#define N_DECODE 64
#define N_ROWS (N_PROMPT + N_DECODE)
#define ROW0_REL 1e-5
#define ROW0_REL_BF16 1e-2
#define MAX_REL 0.30
#define MEAN_FACTOR 4.0
#define MEAN_SLACK 0.005
#define MARGIN 0.02 /* of the row's max |logit| */
#define MIN_CLEAR 0.55

struct stats {
    double rel0, max_rel, mean_rel, mean_maxlogit;
    int first_flip; /* first row with rel > 1e-4; N_ROWS if none */
    int top1_same, n_clear, clear_mismatch;
    double worst_mismatch_margin;
};

static int argmax(const float *x, int64_t n)
{
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = (int)i;
    return b;
}

static double top2_margin(const float *x, int64_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > a)
            b = a, a = x[i];
        else if (x[i] > b)
            b = x[i];
    }
    return (double)a - b;
}

/* ref: llama.cpp's rows; x: the rows compared with them */
static struct stats compare(const float *ref, const float *x, int64_t V)
{
    struct stats s = {0, 0, 0, 0, N_ROWS, 0, 0, 0, 0};
    const char *dump = getenv("CWEN_FWD_DUMP"); /* diagnostic: per-row errors */
    for (int r = 0; r < N_ROWS; r++) {
        const float *a = ref + (int64_t)r * V, *b = x + (int64_t)r * V;
        double md = 0, ma = 0;
        for (int64_t i = 0; i < V; i++) {
            double d = fabs((double)a[i] - b[i]);
            md = d > md ? d : md;
            ma = fabs(a[i]) > ma ? fabs(a[i]) : ma;
        }
        double rel = ma > 0 ? md / ma : md;
        s.max_rel = rel > s.max_rel ? rel : s.max_rel;
        s.mean_rel += rel / N_ROWS;
        s.mean_maxlogit += ma / N_ROWS;
        if (dump && *dump == '1')
            note("    row %3d rel %.3g max|logit| %.3g top-1 %d/%d margin %.3f", r, rel, ma,
                 argmax(a, V), argmax(b, V), top2_margin(a, V));
        if (rel > 1e-4 && s.first_flip == N_ROWS)
            s.first_flip = r;
        int same = argmax(a, V) == argmax(b, V);
        double mg = top2_margin(a, V);
        s.top1_same += same;
        if (r == 0)
            s.rel0 = rel;
        if (mg > MARGIN * ma) {
            s.n_clear++;
            s.clear_mismatch += !same;
        }
        if (!same && mg > s.worst_mismatch_margin)
            s.worst_mismatch_margin = mg;
    }
    return s;
}

static void print_stats(const char *what, const struct stats *s)
{
    note("  %-28s max|logit| %.3g  row 0 rel %.2g  max rel %.3g  mean rel %.3g  1st flip @%d  top-1 %d/%d  "
         "clear %d (mismatch %d)  worst mismatch margin %.3f",
         what, s->mean_maxlogit, s->rel0, s->max_rel, s->mean_rel, s->first_flip, s->top1_same, N_ROWS, s->n_clear,
         s->clear_mismatch, s->worst_mismatch_margin);
}

/* llama.cpp: decodes toks[0..n) at positions pos0.. and copies all n logit rows */
static int llama_run(struct llama_context *ctx, struct llama_batch *b, const int32_t *toks,
                     int n, int pos0, float *out, int64_t V)
{
    b->n_tokens = n;
    for (int i = 0; i < n; i++) {
        b->token[i] = toks[i];
        b->pos[i] = pos0 + i;
        b->n_seq_id[i] = 1;
        b->seq_id[i][0] = 0;
        b->logits[i] = 1;
    }
    if (llama_decode(ctx, *b))
        return -1;
    for (int i = 0; i < n; i++)
        memcpy(out + (int64_t)i * V, llama_get_logits_ith(ctx, i), (size_t)V * sizeof(float));
    return 0;
}

static void run_file(const char *path, struct cw_pool *pool)
{
    note("%s", path);
    double t0 = now_s();
    /* ---- llama.cpp: prompt batch + greedy decode, then token by token ---- */
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *lm = llama_model_load_from_file(path, mp);
    if (!lm) {
        ok(0, "llama.cpp loads %s", path);
        return;
    }
    const int64_t V = llama_vocab_n_tokens(llama_model_get_vocab(lm));
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2 * N_ROWS;
    cp.n_batch = cp.n_ubatch = N_ROWS;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    const char *fa = getenv("CWEN_FWD_FA"); /* diagnostic: 0 off, 1 on (default: auto = on) */
    if (fa && *fa)
        cp.flash_attn_type = atoi(fa) ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(lm, cp);
    float *L = malloc((size_t)(N_ROWS * V) * sizeof(float));
    float *T = malloc((size_t)(N_ROWS * V) * sizeof(float));
    float *C = malloc((size_t)(N_ROWS * V) * sizeof(float));
    struct llama_batch b = llama_batch_init(N_ROWS, 0, 1);
    int32_t toks[N_ROWS];
    uint32_t seed = 12345;
    for (int i = 0; i < N_PROMPT; i++) {
        seed = seed * 1664525u + 1013904223u;
        toks[i] = (int32_t)((seed >> 8) % 151643u); /* ordinary tokens of the vocabulary */
    }
    int bad = !ctx || llama_run(ctx, &b, toks, N_PROMPT, 0, L, V);
    for (int i = 0; !bad && i < N_DECODE; i++) {
        toks[N_PROMPT + i] = argmax(L + (int64_t)(N_PROMPT + i - 1) * V, V);
        bad = llama_run(ctx, &b, toks + N_PROMPT + i, 1, N_PROMPT + i,
                        L + (int64_t)(N_PROMPT + i) * V, V);
    }
    if (!bad)
        llama_memory_clear(llama_get_memory(ctx), true);
    for (int i = 0; !bad && i < N_ROWS; i++)
        bad = llama_run(ctx, &b, toks + i, 1, i, T + (int64_t)i * V, V);
    ok(!bad, "llama.cpp runs %s", path);
    double t1 = now_s();

    /* ---- cwen: the same prompt in one batch, then the same 64 tokens ---- */
    struct cw_gguf g = {0};
    struct cw_qwen35_hparams hp = {0};
    struct cw_qwen35_weights w = {0};
    struct cw_cpu_model m = {0};
    struct cw_cpu_seq s = {0};
    struct cw_err err = {0};
    int rc = cw_gguf_open(&g, path, &err);
    rc = rc ? rc : cw_qwen35_hparams_load(&g, &hp, &err);
    rc = rc ? rc : cw_qwen35_bind(&w, &g, &hp, &err);
    rc = rc ? rc : cw_cpu_model_init(&m, &w, pool, 2 * N_ROWS, &err);
    rc = rc ? rc : cw_cpu_seq_init(&s, &m, &err);
    ok(rc == 0 && (int64_t)hp.n_vocab == V, "cwen loads %s (vocab %u vs %lld): %s", path,
       hp.n_vocab, (long long)V, err.msg);
    if (rc == 0) {
        rc = cw_cpu_forward(&m, &s, toks, N_PROMPT, C, true, NULL, &err);
        for (int i = 0; !rc && i < N_DECODE; i++)
            rc = cw_cpu_forward(&m, &s, toks + N_PROMPT + i, 1, C + (int64_t)(N_PROMPT + i) * V,
                                true, NULL, &err);
        ok(rc == 0, "cwen runs %s: %s", path, err.msg);
    }
    note("  time: llama.cpp %.2f s (load, 64 + 64 + 128 calls), cwen %.2f s (load, 1 + 64 calls)",
         t1 - t0, now_s() - t1);
    if (!bad && rc == 0) {
        struct stats cw = compare(L, C, V), self = compare(L, T, V);
        print_stats("cwen vs llama.cpp", &cw);
        print_stats("llama.cpp token-by-token", &self);
        double row0 = strstr(path, "bf16") ? ROW0_REL_BF16 : ROW0_REL;
        ok(cw.rel0 <= row0, "%s: row 0 row-relative error %.3g <= %g", path, cw.rel0, row0);
        ok(cw.max_rel <= MAX_REL, "%s: max row-relative error %.3g <= %.2f", path, cw.max_rel,
           MAX_REL);
        double bound = MEAN_FACTOR * self.mean_rel + MEAN_SLACK;
        ok(cw.mean_rel <= bound, "%s: mean row-relative error %.3g <= %.0f x llama.cpp's own "
           "%.3g + %.3f", path, cw.mean_rel, MEAN_FACTOR, self.mean_rel, MEAN_SLACK);
        ok(cw.clear_mismatch == 0, "%s: top-1 identical at all %d positions with margin > "
           "%.0f%% of max |logit| (%d differ)", path, cw.n_clear, 100 * MARGIN,
           cw.clear_mismatch);
        ok(cw.n_clear >= MIN_CLEAR * N_ROWS, "%s: %d of %d positions clear the margin", path,
           cw.n_clear, N_ROWS);
    }
    cw_cpu_seq_free(&s);
    cw_qwen35_weights_free(&w);
    cw_gguf_close(&g);
    llama_batch_free(b);
    if (ctx)
        llama_free(ctx);
    llama_model_free(lm);
    free(L), free(T), free(C);
}

int main(void)
{
    const char *bin = test_env("CWEN_BIN", "cwen");
    const char *tmp = test_env("CWEN_TMP", "/tmp");
    /* diagnostic: extra generator options, e.g. "--std 0.3" */
    const char *extra = test_env("CWEN_MKMODEL_EXTRA", "");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/cpu/package/bins/linux-x64", oracle_dir());
    oracle_init();
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
        ggml_backend_load_all_from_path(dir);
    struct cw_pool pool;
    struct cw_err err = {0};
    if (cw_pool_init(&pool, 2, &err)) {
        ok(0, "pool: %s", err.msg);
        return done();
    }
    const char *only = getenv("CWEN_FWD_ONLY"); /* diagnostic: one file, e.g. "tiny-moe-q8_0" */
    static const struct {
        const char *preset, *mix;
        int mtp;
        const char *opts;
    } files[] = {
        {"tiny-moe", "q4_k_m", 1, ""},   {"tiny-moe", "q4_k_m", 0, ""},
        {"tiny-moe", "q8_0", 1, ""},     {"tiny-moe", "bf16", 0, ""},
        {"tiny-dense", "q4_k_m", 1, ""}, {"tiny-dense", "q4_k_m", 0, ""},
        {"tiny-dense", "q8_0", 0, ""},   {"tiny-dense", "bf16", 1, ""},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1200], cmd[4096], tag[128];
        snprintf(tag, sizeof tag, "%s%s-%s", files[i].preset, files[i].mtp ? "" : "-nomtp",
                 files[i].mix);
        if (only && *only && strcmp(only, tag))
            continue;
        snprintf(path, sizeof path, "%s/fwd-oracle-%s%s-%s.gguf", tmp, files[i].preset,
                 files[i].mtp ? "" : "-nomtp", files[i].mix);
        snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s' --preset %s --mix %s --seed 7 --std 0.3 %s %s %s "
                 ">/dev/null", bin, path, files[i].preset, files[i].mix,
                 files[i].mtp ? "" : "--no-mtp", files[i].opts, extra);
        int rc = system(cmd);
        ok(rc == 0, "%s", cmd);
        if (rc == 0)
            run_file(path, &pool);
        remove(path);
    }
    cw_pool_free(&pool);
    return done();
}

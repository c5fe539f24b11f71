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
 *     the check is not vacuous.
 * The real-width files (the 35B-A3B's and the 27B's widths over 4 layers)
 * have a looser row-0 bound, a wider margin, generated "hot" tokens that
 * make most rows clear it, the same checks against llama.cpp run token by
 * token, and row 0 compared op by op, all justified at their definitions. */
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
/* The real-width file: `--preset 35b-a3b --layers 4 --vocab-size 151936`
 * with MTP (E 2048, 256 experts top 8, H 16/2, DeltaNet 16 k / 32 v heads;
 * layer 3 is attention), weight std 0.05, 16 hot tokens (below), in CI by
 * default (~2.9 GB, ~2 min on 2 cores, most of it llama.cpp's 128
 * token-by-token calls; 8 GB RSS).
 *
 * Why row 0 differs at real widths (it was 2.3e-2 at std 0.3 and read as
 * "3.5e-7 at std 0.05"): it is not the weight scale. `cwen debug-dump` against
 * llama_dump on the std-0.3 file (110-token prompt) shows row 0 agreeing to
 * ~1e-6 through all of layer 0 and up to attn_post_norm-1 (2.3e-6) and
 * ffn_moe_weights_norm-1 (8.5e-7: same experts, same weights); then
 * ffn_moe_gate-1 / ffn_moe_up-1 jump to 5.7e-4 on row 0. That is one Q8_K
 * rounding decision flipping: both sides quantise the expert input row to
 * int8 (one quantum = max|x|/127 of a 256-block), a ~1e-6 f32 difference
 * (llama.cpp's batched kernels, e.g. its chunked DeltaNet, sum in another
 * order than its single-token path and cwen) puts one element on the other
 * side of a rounding boundary, and that quantum times a weight column is
 * ~5e-4 of the output. The DeltaNet of layer 2 grows it to ~2e-2, and at
 * ffn_moe_gate-2 row 0 jumps to 0.99 while ffn_moe_weights_norm-2 stays at
 * 9.5e-4: a near-tie between the 8th and 9th of 256 experts flipped, the
 * swapped expert having nearly the same weight. Row 0's logits end 1.7e-2
 * apart. Such flips are discrete events, so whether one hits row 0 depends on
 * the file, not on the std: on this std-0.05 file llama.cpp's own batch and
 * token-by-token runs differ by 0.017 at row 0 too, while cwen and
 * llama.cpp's token-by-token run agree to 3.5e-7 there. So:
 *   - row 0 <= 0.05: ~2-3 x llama.cpp's own batch-vs-single gap there
 *     (0.017 on the plain file, 0.024 on the hot-token one below).
 *
 * Why its top-1 margin needs hot tokens. With the plain generator (logits ~
 * Gaussian over 151,936 rows) the top-2 gap is ~max / (2 ln V) ≈ 4 % of the
 * max |logit|, about the size of the drift between any two evaluations: only
 * 41 % of the rows cleared a 4 % margin. Comparing against llama.cpp run
 * token by token (cwen's mode: it agrees with cwen at row 0 to 3.5e-7) does
 * not help: from row 1 on, llama.cpp's f16 attention (q rounded to f16, f16
 * accumulator) differs from cwen's f32 by ~1e-3, and Q8 activation rounding
 * and 256-expert routing near-ties amplify any such difference to the same
 * percent level (cwen vs token-by-token: mean 0.033, 1st flip at row 1; with
 * an f32 KV cache even row 0 moves to 0.009, from V's f16 rounding alone). The
 * drift is the noise floor of 8-bit activations, so the logits must have
 * wider gaps: the file is made with `--hot-tokens 16 --hot-scale 8` (16 LM
 * head rows, spread over the vocabulary, 8x the others), so the max over 16
 * strong tokens decides each row (max |logit| ~100 instead of ~28; the row's
 * error scales with it, so the relative bounds keep their meaning).
 * Measured on this file (cwen vs llama.cpp batched / vs llama.cpp token by
 * token / llama.cpp batched vs token by token):
 *   - mean row-relative error 0.038 / 0.036 / 0.028, max 0.135 / 0.124 / 0.137;
 *   - top-1 mismatches at margins up to 3.3 % / 4.25 % / 1.05 % of max |logit|;
 *   - MARGIN_WIDE 6 %: ~1.4 x the widest cwen mismatch; 104 (81 %) / 110
 *     (86 %) of 128 rows clear it, so >= 70 % must (most, with room for a
 *     changed rounding order re-drawing the noise: a model of the drift,
 *     Gaussian per-token noise at the measured per-row errors, puts ~81 ± 3.5 %
 *     of rows above 6 % and one mismatch above it in ~500 rows).
 * Both comparisons get these checks: the batched one is how users run, the
 * token-by-token one is llama.cpp in cwen's mode (and must match row 0 to
 * float rounding, ROW0_REL, as cwen is batch-invariant: op by op up to its
 * first rounding of an activation that falls the other way, row0_ops says
 * why).
 * The 27B-width file (`--preset 27b --layers 4 --vocab-size 151936`, MTP;
 * the same std and hot tokens), measured: cwen vs llama.cpp batched / token
 * by token / llama.cpp against itself mean 0.0285 / 0.0284 / 0.0228, max
 * 0.079 / 0.067 / 0.081, 100 of 128 rows clear 6 % with no mismatch, the
 * widest mismatch at 1.56 (1.6 % of max |logit|); row 0 token by token 8e-3
 * apart after an 8-bit rounding (row0_ops); the MTP block's row 0 3.6e-7,
 * max 0.036. The same bounds. */
#define STD_WIDE "0.05"
#define HOT_WIDE "--hot-tokens 16 --hot-scale 8"
#define ROW0_REL_WIDE 0.05
#define MARGIN_WIDE 0.06
#define MIN_CLEAR_WIDE 0.70

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
static struct stats compare(const float *ref, const float *x, int64_t V, double margin)
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
        if (mg > margin * ma) {
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

/* Whether op (llama.cpp's name less its "-layer") is where a rounding of
 * an activation first shows: the output of a product on a row quantised to
 * 8 bits, or attention's (its K and V rounded to f16 in both caches). */
static bool rounding_op(const char *op)
{
    static const char *const names[] = {
        "linear_attn_qkv_mixed", "z",            "beta",        "alpha",
        "linear_attn_out",       "Qcur_full",    "Kcur",        "Vcur",
        "attn_output",           "ffn_gate",     "ffn_up",      "ffn_out",
        "ffn_moe_logits",        "ffn_moe_gate", "ffn_moe_up",  "ffn_moe_down",
        "ffn_shexp",             "shared_expert_gate",          "result_output",
        "attn_gated",
    };
    char base[128];
    snprintf(base, sizeof base, "%s", op);
    char *dash = strrchr(base, '-');
    if (dash && dash[1] >= '0' && dash[1] <= '9')
        *dash = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(base, names[i]))
            return true;
    return false;
}

/* Row 0 op by op (the real-width files). Row 0 has one key, so cwen and
 * llama.cpp token by token differ by float rounding only (~1e-6) until a
 * rounding decision of some activation falls the other way, and at real
 * widths that happens on row 0 too. With the test's token, on the
 * 27B-width file 41 ops agree within 2.3e-6, then ffn_out-2 is 2.8e-4 apart
 * (an element of its 8-bit activations on the other side of a rounding
 * boundary: one quantum times a weight column; with the token "Hello" the
 * same at ffn_gate-0, 4.2e-4) and the logits end 8e-3 apart; on the
 * 35B-width file 71 ops agree within 2.9e-6, then attn_gated-3 is 2.1e-5
 * apart, the size of one element of layer 3's V rounded to the next f16
 * value (2^-11 of it, over the row's 512 values). So the float-rounding
 * claim is checked where it holds: llama_dump runs tok alone, `cwen
 * debug-dump --ref` compares every op, and the first op beyond ROW0_REL, if
 * any, is one where such a rounding shows (rounding_op): an op of cwen's
 * own that went wrong would be the first instead. Returns 1 if there is one
 * (then the logits' row 0 is held to ROW0_REL_WIDE, the drift a rounding
 * starts), 0 if none (then to ROW0_REL), -1 if it did not run. */
static int row0_ops(const char *bin, const char *path, int32_t tok)
{
    const char *dump = test_env("CWEN_LLAMA_DUMP", "llama_dump");
    char ref[1200], cmd[4096];
    snprintf(ref, sizeof ref, "%s.row0.gguf", path);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -t %d -o '%s' >/dev/null 2>&1", dump, path, tok, ref);
    if (system(cmd) != 0) {
        ok(0, "%s", cmd);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "'%s' debug-dump -m '%s' --ref '%s'", bin, path, ref);
    FILE *f = popen(cmd, "r");
    if (!f) {
        ok(0, "%s", cmd);
        remove(ref);
        return -1;
    }
    char line[512], name[128], first[128] = "";
    int n_ops = 0;
    double worst = 0, e_first = 0;
    while (fgets(line, sizeof line, f)) {
        const char *r = strstr(line, " rel err ");
        double e;
        if (first[0] || line[0] == '#' || !r || sscanf(line, "%127s", name) != 1 ||
            sscanf(r + 9, "%lf", &e) != 1)
            continue; /* past the first rounding: the two runs part ways */
        if (e > ROW0_REL) {
            snprintf(first, sizeof first, "%s", name);
            e_first = e;
        } else {
            n_ops++;
            worst = e > worst ? e : worst;
        }
    }
    pclose(f);
    remove(ref);
    if (first[0])
        note("  row 0 op by op (token %d): %d ops within %.2g, then %s at %.3g", tok, n_ops,
             worst, first, e_first);
    else
        note("  row 0 op by op (token %d): all %d ops within %.2g", tok, n_ops, worst);
    ok(n_ops >= 20, "%s: row 0 op by op: %d ops compared (debug-dump ran)", path, n_ops);
    ok(!first[0] || rounding_op(first), "%s: row 0 op by op: the first op beyond %g, %s, is one "
       "where an activation's rounding shows", path, ROW0_REL, first[0] ? first : "-");
    return first[0] ? 1 : 0;
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

/* The MTP block alone, teacher-forced: token k paired with the main pass's
 * final-normed hidden at k-1 (row 0: zeros; cwen's rows, fed to both — asking
 * llama.cpp for its own makes its decode ~100x slower) in one batch of all 128 rows, in
 * llama.cpp's MTP context and in cwen. Bounds as for the main pass (§11 item
 * 4 saw 0.039 max row-relative with f16 attention emulated). */
static void mtp_file(const char *path, struct llama_model *lm, struct cw_cpu_model *m,
                     struct cw_cpu_seq *s, const int32_t *toks, const float *Lh, float *L,
                     float *C, int64_t V, int64_t E)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2 * N_ROWS;
    cp.n_batch = cp.n_ubatch = N_ROWS;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = 2;
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    struct llama_context *mc = llama_init_from_model(lm, cp);
    /* llama_batch_init gives either tokens or embeddings; MTP reads both */
    struct llama_batch b = llama_batch_init(N_ROWS, (int32_t)E, 1);
    b.token = malloc(N_ROWS * sizeof *b.token);
    b.n_tokens = N_ROWS;
    for (int i = 0; i < N_ROWS; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    memcpy(b.embd, Lh, (size_t)(N_ROWS * E) * sizeof(float));
    int bad = !mc || llama_decode(mc, b);
    for (int i = 0; !bad && i < N_ROWS; i++)
        memcpy(L + (int64_t)i * V, llama_get_logits_ith(mc, i), (size_t)V * sizeof(float));
    ok(!bad, "llama.cpp runs the MTP block of %s", path);
    struct cw_err err = {0};
    int rc = cw_cpu_forward_mtp(m, s, toks, Lh, N_ROWS, C, true, NULL, &err);
    ok(rc == 0, "cwen runs the MTP block of %s: %s", path, err.msg);
    if (!bad && rc == 0) {
        struct stats st = compare(L, C, V, MARGIN);
        print_stats("MTP cwen vs llama.cpp", &st);
        ok(st.rel0 <= ROW0_REL_BF16, "%s MTP: row 0 row-relative error %.3g", path, st.rel0);
        ok(st.max_rel <= MAX_REL, "%s MTP: max row-relative error %.3g <= %.2f", path,
           st.max_rel, MAX_REL);
        ok(st.clear_mismatch == 0, "%s MTP: top-1 identical at all %d positions with margin > "
           "%.0f%% of max |logit| (%d differ)", path, st.n_clear, 100 * MARGIN,
           st.clear_mismatch);
    }
    free(b.token);
    b.token = NULL;
    llama_batch_free(b);
    if (mc)
        llama_free(mc);
}

static void run_file(const char *bin, const char *path, struct cw_pool *pool, bool wide)
{
    note("%s", path);
    double t0 = now_s();
    /* ---- llama.cpp: prompt batch + greedy decode, then token by token ---- */
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mtp = true; /* ignored by the main pass; needed for the MTP context */
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
    const char *kv = getenv("CWEN_FWD_KV"); /* diagnostic: "f32" KV cache (default f16, as cwen) */
    if (kv && !strcmp(kv, "f32"))
        cp.type_k = cp.type_v = GGML_TYPE_F32;
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
    const int64_t E = llama_model_n_embd(lm);
    /* cwen's final-normed hidden rows, shifted by one (row 0: zeros): the MTP input */
    float *Ch = calloc((size_t)((N_ROWS + 1) * E), sizeof(float));
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
        rc = cw_cpu_forward(&m, &s, toks, N_PROMPT, C, true, Ch + E, &err);
        for (int i = 0; !rc && i < N_DECODE; i++)
            rc = cw_cpu_forward(&m, &s, toks + N_PROMPT + i, 1, C + (int64_t)(N_PROMPT + i) * V,
                                true, Ch + (int64_t)(N_PROMPT + i + 1) * E, &err);
        ok(rc == 0, "cwen runs %s: %s", path, err.msg);
    }
    note("  time: llama.cpp %.2f s (load, 64 + 64 + 128 calls), cwen %.2f s (load, 1 + 64 calls)",
         t1 - t0, now_s() - t1);
    if (!bad && rc == 0) {
        const double margin = wide ? MARGIN_WIDE : MARGIN;
        const double min_clear = wide ? MIN_CLEAR_WIDE : MIN_CLEAR;
        struct stats cw = compare(L, C, V, margin), self = compare(L, T, V, margin);
        struct stats vt = compare(T, C, V, margin);
        print_stats("cwen vs llama.cpp", &cw);
        print_stats("llama.cpp token-by-token", &self);
        print_stats("cwen vs llama.cpp tok-by-tok", &vt);
        double row0 = wide ? ROW0_REL_WIDE : strstr(path, "bf16") ? ROW0_REL_BF16 : ROW0_REL;
        ok(cw.rel0 <= row0, "%s: row 0 row-relative error %.3g <= %g", path, cw.rel0, row0);
        ok(cw.max_rel <= MAX_REL, "%s: max row-relative error %.3g <= %.2f", path, cw.max_rel,
           MAX_REL);
        double bound = MEAN_FACTOR * self.mean_rel + MEAN_SLACK;
        ok(cw.mean_rel <= bound, "%s: mean row-relative error %.3g <= %.0f x llama.cpp's own "
           "%.3g + %.3f", path, cw.mean_rel, MEAN_FACTOR, self.mean_rel, MEAN_SLACK);
        ok(cw.clear_mismatch == 0, "%s: top-1 identical at all %d positions with margin > "
           "%.0f%% of max |logit| (%d differ)", path, cw.n_clear, 100 * margin,
           cw.clear_mismatch);
        ok(cw.n_clear >= min_clear * N_ROWS, "%s: %d of %d positions (>= %.0f%%) clear the margin",
           path, cw.n_clear, N_ROWS, 100 * min_clear);
        /* llama.cpp token by token is cwen's mode, and row 0 has no attention
         * difference: float rounding only, on every file (on the real-width
         * ones up to the first rounding of an activation: row0_ops) */
        double row0_tok = strstr(path, "bf16") ? ROW0_REL_BF16 : ROW0_REL;
        const int flip0 = wide ? row0_ops(bin, path, toks[0]) : 0;
        if (flip0 == 0)
            ok(vt.rel0 <= row0_tok, "%s: row 0 vs llama.cpp token by token %.3g <= %g", path,
               vt.rel0, row0_tok);
        else if (flip0 == 1) /* past a rounding (op by op above): the batched bound */
            ok(vt.rel0 <= ROW0_REL_WIDE, "%s: row 0 vs llama.cpp token by token %.3g <= %g "
               "(past a rounding of an activation)", path, vt.rel0, ROW0_REL_WIDE);
        if (wide) { /* the other bounds as for the batched comparison */
            ok(vt.max_rel <= MAX_REL && vt.mean_rel <= bound, "%s: vs llama.cpp token by token: "
               "max row-relative error %.3g <= %.2f, mean %.3g <= %.3g", path, vt.max_rel, MAX_REL,
               vt.mean_rel, bound);
            ok(vt.clear_mismatch == 0, "%s: vs llama.cpp token by token: top-1 identical at all %d "
               "positions with margin > %.0f%% of max |logit| (%d differ)", path, vt.n_clear,
               100 * margin, vt.clear_mismatch);
            ok(vt.n_clear >= min_clear * N_ROWS, "%s: vs llama.cpp token by token: %d of %d "
               "positions (>= %.0f%%) clear the margin", path, vt.n_clear, N_ROWS, 100 * min_clear);
        }
    }
    if (!bad && rc == 0 && w.has_mtp)
        mtp_file(path, lm, &m, &s, toks, Ch, L, C, V, E);
    cw_cpu_seq_free(&s);
    cw_qwen35_weights_free(&w);
    cw_gguf_close(&g);
    llama_batch_free(b);
    if (ctx)
        llama_free(ctx);
    llama_model_free(lm);
    free(L), free(T), free(C), free(Ch);
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
        /* the real 35B-A3B widths over 4 layers + MTP, Qwen3's vocabulary (2.6 GB) */
        {"35b-a3b", "q4_k_m", 1, "--layers 4 --vocab-size 151936"},
        /* the real 27B widths likewise (E 5120, FFN 17408, DeltaNet 16 k / 48 v heads) */
        {"27b", "q4_k_m", 1, "--layers 4 --vocab-size 151936"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1200], cmd[4096], tag[128];
        const bool wide = *files[i].opts != 0;
        snprintf(tag, sizeof tag, "%s%s%s-%s", *files[i].opts ? "wide-" : "", files[i].preset,
                 files[i].mtp ? "" : "-nomtp", files[i].mix);
        if (only && *only && strcmp(only, tag))
            continue;
        snprintf(path, sizeof path, "%s/fwd-oracle-%s.gguf", tmp, tag);
        snprintf(cmd, sizeof cmd, "'%s' mkmodel -o '%s' --preset %s --mix %s --seed 7 --std %s %s %s %s %s "
                 ">/dev/null", bin, path, files[i].preset, files[i].mix, wide ? STD_WIDE : "0.3",
                 wide ? HOT_WIDE : "", files[i].mtp ? "" : "--no-mtp", files[i].opts, extra);
        int rc = system(cmd);
        ok(rc == 0, "%s", cmd);
        if (rc == 0)
            run_file(bin, path, &pool, wide);
        remove(path);
    }
    cw_pool_free(&pool);
    return done();
}

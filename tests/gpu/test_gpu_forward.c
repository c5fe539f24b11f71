/* test_gpu_forward.c — the CUDA backend against the CPU backend, over the
 * same generated files (cwen mkmodel) and the same tokens.
 *
 * Per model: a 64-token prompt in one forward, then 64 greedy decode steps
 * teacher-forced on the CPU's choices (both backends are fed the same ids),
 * logits at all 128 positions, then the MTP block over the 127 (token,
 * previous hidden) pairs, all fed the CPU's hidden states.
 *
 * Four references:
 *   cpu   the CPU backend as it runs: it quantises activations before each
 *         quantised dot product (Q8_K / Q8_0 / BF16, as llama.cpp does).
 *   twin  the CPU backend over an f32 copy of the same weights (every matrix
 *         dequantised): the same function with f32 activations, which is
 *         what the GPU computes. The difference twin − cpu is the CPU's own
 *         activation-quantisation error, measured here, not assumed.
 *   hyb   the twin, except that the matrices the GPU multiplies on x
 *         quantised to Q8_K in the GEMV regime (cw_k_q8k, cw_k_moe_q8k:
 *         Q4_K/Q5_K/Q6_K matrices by shape, where the GPU's dot products
 *         are the CPU's bit for bit) stay quantised: what the GPU computes
 *         up to 32 tokens. It is the twin where no matrix qualifies.
 *   gpu   the CUDA backend.
 * Regimes: up to 32 tokens a GPU matmul is a GEMV (f32 x; Q8_K x for the
 * cw_k_q8k matrices); above, a tensor-core GEMM (k_gemm.cu). A pass whose prompt
 * goes in chunks of 7 is in the GEMV regime throughout;
 * the prompt in one call (the engine's prefill) is a tensor-core GEMM in its
 * matmuls (f16; TF32 for the F32/BF16/FP4 types).
 * Bounds, per row r = ||a − b|| / ||b||, for the chunks-of-7 pass (GEMV)
 * of a file with no matrix on Q8_K x:
 *   gpu vs twin <= TWIN_BOUND (1e-3): the same function in a different
 *     summation order and with CUDA's expf; each op differs by ~1e-6, and
 *     1e-3 leaves three orders of magnitude for growth through the layers
 *     while staying ten times below the smallest quantisation error the cpu
 *     check allows, so a wrong kernel cannot hide under it.
 *   gpu vs cpu <= the row's measured twin-vs-cpu error + 1.1·TWIN_BOUND (the
 *     triangle inequality over the two above; printed with the measured
 *     quantisation error, which is the number that matters).
 *   top-1: the device's argmax equals the twin's wherever the twin's top-2
 *     margin exceeds 8·TWIN_BOUND·rms(row) (at least 3/4 of the rows must),
 *     and the CPU's wherever the CPU's margin exceeds top1_k(rows)·(the row's
 *     allowed gpu-cpu error)·rms(row) (top1_k: about 6; it says why). How
 *     many rows clear that second margin is printed, not asserted: the
 *     CPU's activation quantisation, measured on these files, is ~1e-2
 *     (bf16, dense) to 1e-1 and more per row (MoE: an 8-bit rounding that
 *     flips one expert choice changes the token's output, and attention and
 *     the DeltaNet state carry it on), so few rows of the MoE files clear a
 *     margin that size.
 * The chunks-of-7 pass of a file with matrices on Q8_K x: gpu-hyb within
 * hyb-twin, mean and worst row, and top-1 as below (compare_q8k says why
 * not per row). The one-call pass (GEMM) is held to the CPU's own distance
 * from the twin (plus hyb-twin where matrices take Q8_K x; mean and worst
 * row) and to top-1 where the margin exceeds both measured distances
 * (compare_gemm says why not per row).
 * Exact checks: the device argmax equals the argmax of the downloaded GPU
 * logits; two GPU runs are bit-identical; the decode graph with programmatic
 * dependent launch and the side stream equals plain launches bit for bit
 * (CWEN_CUDA_GRAPH=0, CWEN_CUDA_PDL=0, CWEN_CUDA_FORK=0). The prompt token
 * by token stays within TWIN_BOUND of chunks of 7 (bit-identical rows are
 * counted: both are the batch-invariant GEMV regime).
 *
 * CWEN_GPU_BENCH=1 also times 128 greedy decode steps on a full-size
 * 35B-A3B file (generated into CWEN_BENCH_DIR, default /dev/shm): tok/s,
 * kernels per token, GB/s of weights read against the device's copy
 * bandwidth. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cuda/kernels.h"
#include "base/pool.h"
#include "gguf/gguf.h"
#include "gguf/quant.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "gpu_test.h"

#define N_PROMPT 64
#define N_DECODE 64
#define N_ALL (N_PROMPT + N_DECODE)
#define N_MTP (N_ALL - 1)
#define TWIN_BOUND 1e-3

/* ---- models ------------------------------------------------------------------- */

struct model {
    struct cw_gguf g;
    struct cw_qwen35_hparams hp;
    struct cw_qwen35_weights w;
    struct cw_qwen35_weights twin; /* every matrix dequantised to f32 (owned) */
    struct cw_qwen35_weights hyb;  /* the twin but for the matrices cw_k_q8k keeps quantised */
    int n_q8k;                     /* how many: 0 = hyb is the twin */
    float **twin_bufs;
    size_t n_twin;
};

static int gen(const char *args, const char *out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' mkmodel %s -o '%s' >/dev/null",
             test_env("CWEN_BIN", "./cwen"), args, out);
    return system(cmd);
}

/* one matrix of the twin: rows (and experts) dequantised into an f32 copy;
 * with c, a matrix the GPU multiplies on Q8_K x in the GEMV regime
 * (cw_k_q8k: there it computes the CPU's own dot products) stays as it is */
static int twin_one(struct model *M, struct cw_wt *t, struct cw_cuda *c)
{
    if (!t->data || t->type == CW_TYPE_F32)
        return 0;
    if (c && t->ne[2] <= 1 && cw_k_q8k(c, t->type, t->ne[0], t->ne[1])) {
        M->n_q8k++;
        return 0;
    }
    const int64_t n0 = t->ne[0], n1 = t->ne[1], n2 = t->ne[2] > 0 ? t->ne[2] : 1;
    float *buf = malloc((size_t)(n0 * n1 * n2) * sizeof(float));
    if (!buf)
        return -1;
    const cw_dequant_fn dq = cw_qtype_traits(t->type)->dequant_row;
    for (int64_t e = 0; e < n2; e++)
        for (int64_t r = 0; r < n1; r++)
            dq((const uint8_t *)t->data + (size_t)e * t->nb2 + (size_t)r * t->nb1,
               buf + (e * n1 + r) * n0, n0);
    M->twin_bufs[M->n_twin++] = buf;
    t->type = CW_TYPE_F32;
    t->data = buf;
    t->nb1 = (size_t)n0 * sizeof(float);
    t->nb2 = t->nb1 * (size_t)n1;
    return 0;
}

static struct cw_k_mat mat_of(const struct cw_wt *t)
{
    return (struct cw_k_mat){t->type, t->data, t->nb1, t->nb2, t->ne[0], t->ne[1]};
}

static int twin_layer(struct model *M, struct cw_qwen35_layer_w *l, struct cw_cuda *c)
{
    /* the routed experts' gate/up take Q8_K x as their launch decides
     * (cw_k_moe_q8k), their down f32 x. The shared expert, where it rides
     * in those launches (cw_k_moe_shared_fusable, the same for every
     * GEMV-regime n), follows them; alone it is a K = 1 gate/up and a
     * matmul like the rest (cw_k_q8k). */
    const struct cw_wt *ge = &l->moe.gate_exps;
    const int K = (int)M->hp.n_expert_used;
    const bool moe_q = c && ge->data && cw_k_moe_q8k(c, ge->type, ge->ne[0], ge->ne[1], K);
    bool fused = false;
    if (ge->data && l->moe.down_shexp.data) {
        const struct cw_k_mat G = mat_of(ge), D = mat_of(&l->moe.down_exps),
                              SG = mat_of(&l->moe.gate_shexp), SU = mat_of(&l->moe.up_shexp),
                              SD = mat_of(&l->moe.down_shexp);
        fused = cw_k_moe_shared_fusable(&G, &D, &SG, &SU, &SD, K, 1);
    }
    struct cw_wt *m[] = {&l->attn.q,         &l->attn.k,         &l->attn.v,
                         &l->attn.o,         &l->ssm.qkv,        &l->ssm.gate,
                         &l->ssm.beta,       &l->ssm.alpha,      &l->ssm.out,
                         &l->moe.gate_inp,   &l->moe.gate_inp_shexp, &l->ffn.gate,
                         &l->ffn.up,         &l->ffn.down};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
        if (twin_one(M, m[i], c))
            return -1;
    if (twin_one(M, &l->moe.down_exps, NULL) ||
        twin_one(M, &l->moe.down_shexp, fused ? NULL : c))
        return -1;
    struct cw_wt *gu[] = {&l->moe.gate_exps, &l->moe.up_exps, &l->moe.gate_shexp,
                          &l->moe.up_shexp};
    for (int i = 0; i < 4; i++) {
        const bool routed = i < 2 || fused; /* in the routed experts' launch */
        if (!gu[i]->data)
            continue;
        if (routed && moe_q)
            M->n_q8k++;
        else if (twin_one(M, gu[i], routed ? NULL : c))
            return -1;
    }
    return 0;
}

/* the f32 twin (c NULL) or the hybrid one (c: the device cw_k_q8k asks) */
static int make_twin(struct model *M, struct cw_qwen35_weights *t, struct cw_cuda *c)
{
    *t = M->w;
    t->layers = malloc(M->hp.n_layer * sizeof *t->layers);
    if (!t->layers)
        return -1;
    memcpy(t->layers, M->w.layers, M->hp.n_layer * sizeof *t->layers);
    if (twin_one(M, &t->token_embd, c) || twin_one(M, &t->output, c))
        return -1;
    for (uint32_t il = 0; il < M->hp.n_layer; il++)
        if (twin_layer(M, &t->layers[il], c))
            return -1;
    if (t->has_mtp &&
        (twin_layer(M, &t->mtp.layer, c) || twin_one(M, &t->mtp.eh_proj, c) ||
         twin_one(M, &t->mtp.embed_tokens, c) || twin_one(M, &t->mtp.shared_head_head, c)))
        return -1;
    return 0;
}

/* twin: also the f32 twin and the hybrid one (c: the device cw_k_q8k asks) */
static int load(struct model *M, const char *path, bool twin, struct cw_cuda *c,
                struct cw_err *err)
{
    memset(M, 0, sizeof *M);
    if (cw_gguf_open(&M->g, path, err) || cw_qwen35_hparams_load(&M->g, &M->hp, err) ||
        cw_qwen35_bind(&M->w, &M->g, &M->hp, err))
        return -1;
    if (!twin)
        return 0;
    M->twin_bufs = calloc(2 * (64 + 32 * (size_t)M->hp.n_layer), sizeof *M->twin_bufs);
    if (!M->twin_bufs || make_twin(M, &M->twin, NULL) || make_twin(M, &M->hyb, c))
        return cw_errf(err, CW_ERR_NOMEM, "out of memory for the twins");
    return 0;
}

static void unload(struct model *M)
{
    for (size_t i = 0; i < M->n_twin; i++)
        free(M->twin_bufs[i]);
    free(M->twin_bufs);
    free(M->twin.layers);
    free(M->hyb.layers);
    cw_qwen35_weights_free(&M->w);
    cw_gguf_close(&M->g);
}

/* ---- one pass: prompt, teacher-forced decode, MTP -------------------------------- */

struct pass {
    float *logits; /* [N_ALL][V] */
    float *hidden; /* [N_ALL][E] */
    int32_t *amax; /* [N_ALL] */
    float *mtp;    /* [N_MTP][V], NULL when not run */
    double secs;
};

static void pass_free(struct pass *p)
{
    free(p->logits), free(p->hidden), free(p->amax), free(p->mtp);
    memset(p, 0, sizeof *p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs toks through a fresh sequence of b: the prompt in chunks of `chunk`
 * (0: one call), then N_DECODE single steps; the MTP block likewise: the
 * prompt's pairs in chunks, then one pair per call. choose: toks[i] for i >=
 * N_PROMPT is this pass's own argmax of row i-1 (the CPU pass). mtp_hidden
 * (NULL: no MTP): the hidden states the MTP block is fed. */
static int run_pass(struct cw_backend *b, int32_t *toks, int chunk, bool choose,
                    const float *mtp_hidden, struct pass *p, struct cw_err *err)
{
    const int64_t V = b->w->hp.n_vocab, E = b->w->hp.n_embd;
    struct cw_bseq *s = NULL;
    int rc = -1;
    memset(p, 0, sizeof *p);
    p->logits = malloc((size_t)(N_ALL * V) * sizeof(float));
    p->hidden = malloc((size_t)(N_ALL * E) * sizeof(float));
    p->amax = malloc(N_ALL * sizeof(int32_t));
    if (mtp_hidden)
        p->mtp = malloc((size_t)(N_MTP * V) * sizeof(float));
    if (!p->logits || !p->hidden || !p->amax || (mtp_hidden && !p->mtp))
        return cw_errf(err, CW_ERR_NOMEM, "out of memory for a pass");
    const double t0 = now_s();
    if (b->ops->seq_new(b, &s, err))
        return -1;
    if (!chunk)
        chunk = N_PROMPT;
    for (int i = 0; i < N_PROMPT; i += chunk) {
        const int c = N_PROMPT - i < chunk ? N_PROMPT - i : chunk;
        struct cw_fwd_out o = {p->logits + i * V, true, p->hidden + i * E, p->amax + i};
        if (b->ops->forward(b, s, toks + i, c, &o, err))
            goto done;
    }
    for (int i = N_PROMPT; i < N_ALL; i++) {
        if (choose)
            toks[i] = p->amax[i - 1];
        struct cw_fwd_out o = {p->logits + i * V, false, p->hidden + i * E, p->amax + i};
        if (b->ops->forward(b, s, toks + i, 1, &o, err))
            goto done;
    }
    if (mtp_hidden && b->w->has_mtp) {
        /* pair i: token i+1 with the hidden state of position i */
        const int n1 = N_PROMPT - 1;
        for (int i = 0; i < n1; i += chunk) {
            const int c = n1 - i < chunk ? n1 - i : chunk;
            struct cw_fwd_out o = {p->mtp + i * V, true, NULL, NULL};
            if (b->ops->forward_mtp(b, s, toks + 1 + i, mtp_hidden + i * E, c, &o, err))
                goto done;
        }
        for (int i = n1; i < N_MTP; i++) {
            struct cw_fwd_out o1 = {p->mtp + i * V, false, NULL, NULL};
            if (b->ops->forward_mtp(b, s, toks + 1 + i, mtp_hidden + i * E, 1, &o1, err))
                goto done;
        }
    }
    p->secs = now_s() - t0;
    rc = 0;
done:
    b->ops->seq_free(b, s);
    return rc;
}

/* ---- comparisons ------------------------------------------------------------------- */

static double rel_row(const float *a, const float *b, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)a[i] - (double)b[i];
        d += x * x;
        s += (double)b[i] * (double)b[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static double rms(const float *a, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * a[i];
    return sqrt(s / (double)n);
}

static int32_t argmax_of(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

static float top2_margin(const float *x, int64_t n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > a)
            b = a, a = x[i];
        else if (x[i] > b)
            b = x[i];
    }
    return a - b;
}

/* The top-2 margin, in units of a row's per-logit error, past which the
 * argmax must not move. A row's relative error e (||a − b|| / ||b||) is a
 * per-logit error of σ = e·rms(b); the files' LM heads are random, so each
 * logit's error is the hidden state's error projected on an independent
 * row, Gaussian over the vocabulary, and the top two swap only where the
 * difference of their two errors, N(0, 2σ²), exceeds the margin. A margin of
 * √2·z·σ with Φc(z) = TOP1_FALSE / rows lets a correct forward fail a check
 * of that many rows with probability about TOP1_FALSE: z = 4.32, a factor
 * 6.1 on σ at 128 rows. A factor of 4 lets up to 0.23% of the rows that
 * clear it flip: the 27B-width file, 2e-2 a row from 8-bit roundings that
 * the DeltaNet state carries on, missed at 1 of 91 (H200, 2026-12-04d).
 * The model holds on the CPU's own rounding, cpu against the f32 twin
 * (docs/perf/h200.md, 2026-12-04e): over 160 tiny files of four kinds
 * (20,480 rows) 2,904 flips where Φc of the top-2 margin predicts 2,286
 * and its sum over every competitor 4,089, none past z = 3.64 (6,764 rows
 * past 4.32); over five 27B-width files (640 rows) 93 where 72 and 104,
 * none past z = 2.28. A kernel that moves the top logits by more than
 * that margin still fails it. */
#define TOP1_FALSE 1e-3

static double top1_k(int64_t rows)
{
    const double p = TOP1_FALSE / (double)rows;
    double lo = 0.0, hi = 40.0; /* 0.5·erfc(z/√2) = p, by bisection */
    for (int i = 0; i < 100; i++) {
        const double z = 0.5 * (lo + hi);
        if (0.5 * erfc(z / sqrt(2.0)) > p)
            lo = z;
        else
            hi = z;
    }
    return sqrt(2.0) * hi;
}

struct rows_err {
    double *gc, *gt, *tc; /* per row: gpu-cpu, gpu-twin, twin-cpu */
};

static void measure(struct rows_err *e, const float *gpu, const float *cpu, const float *twin,
                    int64_t rows, int64_t V)
{
    e->gc = malloc((size_t)rows * sizeof(double));
    e->gt = malloc((size_t)rows * sizeof(double));
    e->tc = malloc((size_t)rows * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        e->gc[r] = rel_row(gpu + r * V, cpu + r * V, V);
        e->gt[r] = rel_row(gpu + r * V, twin + r * V, V);
        e->tc[r] = rel_row(twin + r * V, cpu + r * V, V);
    }
}

static void rows_err_free(struct rows_err *e)
{
    free(e->gc), free(e->gt), free(e->tc);
}

static double vmax(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static double vmean(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m += x[i];
    return m / (double)n;
}

/* The f32 (GEMV-regime) pass: per-row bounds of the header, top-1 against
 * the twin and the CPU. */
static void compare_f32(const char *what, const float *gpu, const int32_t *gpu_amax,
                        const float *cpu, const float *twin, int64_t rows, int64_t V)
{
    struct rows_err e;
    measure(&e, gpu, cpu, twin, rows, V);
    const double k = top1_k(rows);
    int64_t bad_t = 0, bad_c = 0, clear_t = 0, clear_c = 0, top1_bad_t = 0, top1_bad_c = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cpu + r * V, *t = twin + r * V;
        const int32_t ga = gpu_amax ? gpu_amax[r] : argmax_of(gpu + r * V, V);
        const double allow = e.tc[r] + 1.1 * TWIN_BOUND;
        bad_t += e.gt[r] > TWIN_BOUND;
        bad_c += e.gc[r] > allow;
        if (top2_margin(t, V) > 8.0 * TWIN_BOUND * rms(t, V)) {
            clear_t++;
            top1_bad_t += ga != argmax_of(t, V);
        }
        if (top2_margin(c, V) > k * allow * rms(c, V)) {
            clear_c++;
            top1_bad_c += ga != argmax_of(c, V);
        }
    }
    note("%s: per row gpu-twin max %.2e mean %.2e; gpu-cpu max %.2e; the cpu's activation "
         "quantisation (twin-cpu) max %.2e mean %.2e; top-2 margin cleared at %lld (twin) and "
         "%lld (cpu, %.1f sigma) of %lld rows", what, vmax(e.gt, rows), vmean(e.gt, rows),
         vmax(e.gc, rows), vmax(e.tc, rows), vmean(e.tc, rows), (long long)clear_t,
         (long long)clear_c, k, (long long)rows);
    ok(bad_t == 0, "%s: %lld rows with gpu-twin > %.0e (max %.2e)", what, (long long)bad_t,
       TWIN_BOUND, vmax(e.gt, rows));
    ok(bad_c == 0, "%s: %lld rows with gpu-cpu beyond twin-cpu + %.1e (max %.2e)", what,
       (long long)bad_c, 1.1 * TWIN_BOUND, vmax(e.gc, rows));
    ok(top1_bad_t == 0, "%s: top-1 differs from the twin's at %lld of %lld clear rows", what,
       (long long)top1_bad_t, (long long)clear_t);
    ok(4 * clear_t >= 3 * rows, "%s: %lld of %lld rows clear the twin's top-2 margin", what,
       (long long)clear_t, (long long)rows);
    ok(top1_bad_c == 0, "%s: top-1 differs from the cpu's at %lld of %lld clear rows", what,
       (long long)top1_bad_c, (long long)clear_c);
    rows_err_free(&e);
}

/* The one-call pass, whose prompt matmuls run on the tensor cores with 10
 * mantissa bits per operand (f16 or TF32, k_gemm.cu): the GPU
 * stays at least as close to the exact f32 function as the CPU with its
 * 8-bit activations, on average and in the worst row (per row is not a
 * bound here: that rounding flips an expert choice now and then, as the
 * CPU's rounding does more often); top-1 equals the CPU's wherever the
 * CPU's margin exceeds top1_k·(both sides' measured distance from the twin).
 * With hyb (matrices on Q8_K x), the decode steps after the prompt also
 * round x for those matrices as the CPU does, so the allowance adds their
 * measured rounding (hyb-twin, mean and worst row) to the CPU's: the two
 * departures from the f32 function, each bounded by its own. */
static void compare_gemm(const char *what, const float *gpu, const float *cpu,
                         const float *twin, const float *hyb, int64_t rows, int64_t V)
{
    struct rows_err e;
    measure(&e, gpu, cpu, twin, rows, V);
    const double k = top1_k(rows);
    double *ht = calloc((size_t)rows, sizeof(double));
    int64_t clear = 0, top1_bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (hyb)
            ht[r] = rel_row(hyb + r * V, twin + r * V, V);
        const float *c = cpu + r * V;
        if (top2_margin(c, V) > k * (e.tc[r] + e.gt[r]) * rms(c, V)) {
            clear++;
            top1_bad += argmax_of(gpu + r * V, V) != argmax_of(c, V);
        }
    }
    note("%s: per row gpu-twin max %.2e mean %.2e; gpu-cpu max %.2e mean %.2e; twin-cpu max "
         "%.2e mean %.2e; %lld of %lld rows clear the top-2 margin (%.1f sigma)", what,
         vmax(e.gt, rows), vmean(e.gt, rows), vmax(e.gc, rows), vmean(e.gc, rows), vmax(e.tc, rows),
         vmean(e.tc, rows), (long long)clear, (long long)rows, k);
    const double mean_ok = vmean(e.tc, rows) + vmean(ht, rows);
    const double max_ok = vmax(e.tc, rows) + vmax(ht, rows);
    ok(vmean(e.gt, rows) <= mean_ok && vmax(e.gt, rows) <= max_ok,
       "%s: gpu-twin (mean %.2e, max %.2e) within the cpu's twin-cpu%s (mean %.2e, max %.2e)",
       what, vmean(e.gt, rows), vmax(e.gt, rows), hyb ? " + hyb-twin" : "", mean_ok, max_ok);
    ok(top1_bad == 0, "%s: top-1 differs from the cpu's at %lld of %lld clear rows", what,
       (long long)top1_bad, (long long)clear);
    free(ht);
    rows_err_free(&e);
}

/* The chunks-of-7 pass of a file with matrices on Q8_K x, against hyb.
 * Per row is not a bound here either: the GPU's Q8_K copy of x comes from
 * an x ~1e-6 away from hyb's (f32 summation order upstream), so now and
 * then an element lies on the other side of a rounding boundary and moves
 * by a whole quantum, which the layers carry on (the kernels themselves are
 * bit-equal to the CPU's vec_dot: test_gpu_gemv.c). Those flips are a few
 * of the roundings by which hyb differs from the f32 twin, so gpu-hyb stays
 * within hyb-twin (the whole rounding of those matrices), on average and in
 * the worst row; top-1 equals the CPU's wherever the CPU's margin exceeds
 * top1_k·(gpu-hyb + hyb-cpu) of the row. */
static void compare_q8k(const char *what, const float *gpu, const float *cpu, const float *hyb,
                        const float *twin, int64_t rows, int64_t V)
{
    struct rows_err e; /* gt: gpu-hyb, tc: hyb-cpu */
    measure(&e, gpu, cpu, hyb, rows, V);
    const double k = top1_k(rows);
    double *ht = malloc((size_t)rows * sizeof(double));
    int64_t clear = 0, top1_bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cpu + r * V;
        ht[r] = rel_row(hyb + r * V, twin + r * V, V);
        if (top2_margin(c, V) > k * (e.tc[r] + e.gt[r]) * rms(c, V)) {
            clear++;
            top1_bad += argmax_of(gpu + r * V, V) != argmax_of(c, V);
        }
    }
    note("%s: per row gpu-hyb max %.2e mean %.2e; hyb-twin (the Q8_K matrices' rounding) max "
         "%.2e mean %.2e; gpu-cpu max %.2e; hyb-cpu max %.2e; %lld of %lld rows clear the top-2 "
         "margin (%.1f sigma)", what, vmax(e.gt, rows), vmean(e.gt, rows), vmax(ht, rows),
         vmean(ht, rows), vmax(e.gc, rows), vmax(e.tc, rows), (long long)clear, (long long)rows, k);
    ok(vmean(e.gt, rows) <= vmean(ht, rows) && vmax(e.gt, rows) <= vmax(ht, rows),
       "%s: gpu-hyb (mean %.2e, max %.2e) within hyb-twin (mean %.2e, max %.2e)", what,
       vmean(e.gt, rows), vmax(e.gt, rows), vmean(ht, rows), vmax(ht, rows));
    ok(top1_bad == 0, "%s: top-1 differs from the cpu's at %lld of %lld clear rows", what,
       (long long)top1_bad, (long long)clear);
    free(ht);
    rows_err_free(&e);
}

/* a GPU pass against another that should match it to TWIN_BOUND */
static void compare_gpu(const char *what, const struct pass *a, const struct pass *ref,
                        int64_t V)
{
    int64_t same = 0, bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < N_ALL; r++) {
        const double e = rel_row(a->logits + r * V, ref->logits + r * V, V);
        worst = e > worst ? e : worst;
        bad += e > TWIN_BOUND;
        same += memcmp(a->logits + r * V, ref->logits + r * V, (size_t)V * 4) == 0;
    }
    ok(bad == 0, "%s: %lld rows beyond %.0e (max %.2e)", what, (long long)bad, TWIN_BOUND,
       worst);
    note("%s: %lld of %d rows bit-identical", what, (long long)same, N_ALL);
}

static void prompt(int32_t *t, int n, uint32_t seed, uint32_t n_vocab)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 8) % (n_vocab < 150000 ? n_vocab : 150000));
    }
}

/* graph: the decode graph, programmatic dependent launch and the side
 * stream's products (all on by default), or none: plain launches in one
 * stream's order */
static int open_cuda(struct cw_backend **b, const struct cw_qwen35_weights *w, bool graph,
                     struct cw_err *err)
{
    struct cw_backend_opts o = {N_ALL + 8, NULL, 0};
    setenv("CWEN_CUDA_GRAPH", graph ? "1" : "0", 1);
    setenv("CWEN_CUDA_PDL", graph ? "1" : "0", 1);
    setenv("CWEN_CUDA_FORK", graph ? "1" : "0", 1);
    int rc = cw_backend_open(b, "cuda", w, &o, err);
    unsetenv("CWEN_CUDA_GRAPH");
    unsetenv("CWEN_CUDA_PDL");
    unsetenv("CWEN_CUDA_FORK");
    return rc;
}

static void check_model(struct cw_cuda *c, const char *label, const char *args,
                        struct cw_pool *pool, bool full)
{
    char path[1024], what[160];
    struct cw_err err = {0};
    snprintf(path, sizeof path, "%s/gpu-fwd-%s.gguf", test_env("CWEN_TMP", "."), label);
    if (gen(args, path)) {
        ok(0, "mkmodel %s", args);
        return;
    }
    struct model M;
    if (load(&M, path, true, c, &err)) {
        ok(0, "load %s: %s", path, err.msg);
        return;
    }
    const int64_t V = M.hp.n_vocab;
    const bool mtp = M.w.has_mtp;
    struct cw_backend_opts co = {N_ALL + 8, pool, 0};
    struct cw_backend *cpu = NULL, *twin = NULL, *hyb = NULL, *gpu = NULL, *gpu_ng = NULL;
    struct pass pc = {0}, pt = {0}, ph = {0}, g7 = {0}, g1 = {0}, px = {0};
    float *h = NULL;
    int32_t toks[N_ALL];
    prompt(toks, N_PROMPT, 7, (uint32_t)V);
    if (cw_backend_open(&cpu, "cpu", &M.w, &co, &err) ||
        cw_backend_open(&twin, "cpu", &M.twin, &co, &err) ||
        (M.n_q8k && cw_backend_open(&hyb, "cpu", &M.hyb, &co, &err)) ||
        open_cuda(&gpu, &M.w, true, &err)) {
        ok(0, "%s: open: %s", label, err.msg);
        goto out;
    }
    ok(!strcmp(gpu->ops->name, "cuda"), "%s: the cuda backend opened", label);
    /* the CPU's greedy choices, and its hidden states: the MTP passes' input */
    if (run_pass(cpu, toks, 0, true, NULL, &px, &err)) {
        ok(0, "%s: cpu pass: %s", label, err.msg);
        goto out;
    }
    h = px.hidden;
    px.hidden = NULL;
    pass_free(&px);
    /* the CPU is batch-invariant: one call stands for every chunking */
    if (run_pass(cpu, toks, 0, false, mtp ? h : NULL, &pc, &err) ||
        run_pass(twin, toks, 0, false, mtp ? h : NULL, &pt, &err) ||
        (hyb && run_pass(hyb, toks, 0, false, mtp ? h : NULL, &ph, &err)) ||
        run_pass(gpu, toks, 7, false, mtp ? h : NULL, &g7, &err) ||
        run_pass(gpu, toks, 0, false, mtp ? h : NULL, &g1, &err)) {
        ok(0, "%s: pass: %s", label, err.msg);
        goto out;
    }
    note("%s: cpu %.2f s, twin %.2f s, gpu %.2f s for %d positions%s", label, pc.secs, pt.secs,
         g1.secs, N_ALL, mtp ? " + MTP" : "");

    /* chunks of 7 keep every matmul in the GEMV regime: the sharp check,
     * per row against the f32 twin where no matrix takes Q8_K x, else
     * against hyb, the twin that multiplies those the CPU's way */
    note("%s: %d matrices on Q8_K x in the GEMV regime", label, M.n_q8k);
    snprintf(what, sizeof what, "%s chunks of 7", label);
    if (M.n_q8k)
        compare_q8k(what, g7.logits, pc.logits, ph.logits, pt.logits, N_ALL, V);
    else
        compare_f32(what, g7.logits, g7.amax, pc.logits, pt.logits, N_ALL, V);
    if (mtp) {
        snprintf(what, sizeof what, "%s mtp chunks of 7", label);
        if (M.n_q8k)
            compare_q8k(what, g7.mtp, pc.mtp, ph.mtp, pt.mtp, N_MTP, V);
        else
            compare_f32(what, g7.mtp, NULL, pc.mtp, pt.mtp, N_MTP, V);
    }
    /* the prompt in one call: the GEMM prefill */
    snprintf(what, sizeof what, "%s one call", label);
    compare_gemm(what, g1.logits, pc.logits, pt.logits, hyb ? ph.logits : NULL, N_ALL, V);
    if (mtp) {
        snprintf(what, sizeof what, "%s mtp one call", label);
        compare_gemm(what, g1.mtp, pc.mtp, pt.mtp, hyb ? ph.mtp : NULL, N_MTP, V);
    }
    {
        int64_t bad = 0;
        for (int r = 0; r < N_ALL; r++)
            bad += g1.amax[r] != argmax_of(g1.logits + r * V, V);
        ok(bad == 0, "%s: device argmax = argmax of the downloaded logits (%lld rows differ)",
           label, (long long)bad);
    }
    if (run_pass(gpu, toks, 0, false, mtp ? h : NULL, &px, &err)) {
        ok(0, "%s: second gpu pass: %s", label, err.msg);
        goto out;
    }
    ok(memcmp(g1.logits, px.logits, (size_t)(N_ALL * V) * 4) == 0 &&
           (!mtp || memcmp(g1.mtp, px.mtp, (size_t)(N_MTP * V) * 4) == 0),
       "%s: two GPU runs bit-identical", label);
    pass_free(&px);

    if (full) {
        if (run_pass(gpu, toks, 1, false, NULL, &px, &err) == 0) {
            snprintf(what, sizeof what, "%s token by token vs chunks of 7", label);
            compare_gpu(what, &px, &g7, V);
            pass_free(&px);
        } else {
            ok(0, "%s: token pass: %s", label, err.msg);
        }
        if (open_cuda(&gpu_ng, &M.w, false, &err) ||
            run_pass(gpu_ng, toks, 0, false, NULL, &px, &err)) {
            ok(0, "%s: no-graph pass: %s", label, err.msg);
        } else {
            ok(memcmp(px.logits, g1.logits, (size_t)(N_ALL * V) * 4) == 0 &&
                   memcmp(px.amax, g1.amax, N_ALL * 4) == 0 &&
                   memcmp(px.hidden, g1.hidden, (size_t)(N_ALL * M.hp.n_embd) * 4) == 0,
               "%s: decode graph with programmatic launch = plain launches, bit for bit",
               label);
        }
    }
out:
    free(h);
    pass_free(&pc), pass_free(&pt), pass_free(&ph), pass_free(&g7), pass_free(&g1),
        pass_free(&px);
    cw_backend_close(gpu_ng);
    cw_backend_close(gpu);
    cw_backend_close(hyb);
    cw_backend_close(twin);
    cw_backend_close(cpu);
    unload(&M);
    remove(path);
}

/* ---- errors ---------------------------------------------------------------------- */

static void check_errors(struct cw_pool *pool)
{
    char path[1024];
    struct cw_err err = {0};
    snprintf(path, sizeof path, "%s/gpu-fwd-err.gguf", test_env("CWEN_TMP", "."));
    if (gen("--preset tiny-dense --mix q8_0 --no-mtp --seed 5", path)) {
        ok(0, "mkmodel");
        return;
    }
    struct model M;
    if (load(&M, path, false, NULL, &err)) {
        ok(0, "load: %s", err.msg);
        return;
    }
    struct cw_backend *gpu = NULL;
    struct cw_bseq *s = NULL;
    if (open_cuda(&gpu, &M.w, true, &err) || gpu->ops->seq_new(gpu, &s, &err)) {
        ok(0, "open: %s", err.msg);
    } else {
        int32_t bad_tok = (int32_t)M.hp.n_vocab, t[N_ALL] = {0};
        struct cw_fwd_out o = {NULL, false, NULL, NULL};
        ok(gpu->ops->forward(gpu, s, &bad_tok, 1, &o, &err) == -1 && strstr(err.msg, "vocabulary"),
           "a token outside the vocabulary is refused: %s", err.msg);
        ok(gpu->ops->forward(gpu, s, t, N_ALL + 9, &o, &err) == -1 && strstr(err.msg, "context"),
           "the context ceiling is enforced: %s", err.msg);
        ok(gpu->ops->seq_pos(gpu, s) == 0, "the sequence is unchanged after refusals");
        ok(gpu->ops->forward_mtp(gpu, s, t, NULL, 1, &o, &err) == -1,
           "MTP without an MTP block is refused: %s", err.msg);
        gpu->ops->seq_free(gpu, s);
    }
    cw_backend_close(gpu);
    (void)pool;
    unload(&M);
    remove(path);
}

/* ---- decode timing on a full-size file ------------------------------------------- */

static size_t decode_bytes(const struct cw_qwen35_weights *w)
{
    /* every matrix read once per token; of the experts, K of X */
    const struct cw_qwen35_hparams *hp = &w->hp;
    size_t b = (size_t)w->output.nb1 * (size_t)w->output.ne[1];
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const struct cw_qwen35_layer_w *l = &w->layers[il];
        const struct cw_wt *m[] = {&l->attn.q,       &l->attn.k,         &l->attn.v,
                                   &l->attn.o,       &l->ssm.qkv,        &l->ssm.gate,
                                   &l->ssm.beta,     &l->ssm.alpha,      &l->ssm.out,
                                   &l->moe.gate_inp, &l->moe.gate_inp_shexp, &l->moe.gate_shexp,
                                   &l->moe.up_shexp, &l->moe.down_shexp, &l->ffn.gate,
                                   &l->ffn.up,       &l->ffn.down};
        for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
            if (m[i]->data)
                b += m[i]->nb1 * (size_t)m[i]->ne[1];
        const struct cw_wt *x[] = {&l->moe.gate_exps, &l->moe.up_exps, &l->moe.down_exps};
        for (size_t i = 0; i < 3; i++)
            if (x[i]->data)
                b += x[i]->nb1 * (size_t)x[i]->ne[1] * hp->n_expert_used;
    }
    return b;
}

static void bench(struct cw_cuda *c)
{
    char path[1024];
    struct cw_err err = {0};
    snprintf(path, sizeof path, "%s/gpu-bench-35b.gguf", test_env("CWEN_BENCH_DIR", "/dev/shm"));
    const double t0 = now_s();
    if (gen("--preset 35b-a3b --mix q4_k_m --no-mtp", path)) {
        ok(0, "bench: mkmodel 35b-a3b");
        return;
    }
    note("bench: generated %s in %.1f s", path, now_s() - t0);
    struct model M;
    if (load(&M, path, false, NULL, &err)) {
        ok(0, "bench: load: %s", err.msg);
        return;
    }
    setenv("CWEN_CUDA_VERBOSE", "1", 1);
    struct cw_backend *gpu = NULL;
    struct cw_bseq *s = NULL;
    struct cw_backend_opts o = {4096, NULL, 0};
    if (cw_backend_open(&gpu, "cuda", &M.w, &o, &err) || gpu->ops->seq_new(gpu, &s, &err)) {
        ok(0, "bench: open: %s", err.msg);
    } else {
        int32_t toks[N_PROMPT], id = 0;
        prompt(toks, N_PROMPT, 3, M.hp.n_vocab);
        struct cw_fwd_out po = {NULL, false, NULL, &id};
        double tp = now_s();
        int rc = gpu->ops->forward(gpu, s, toks, N_PROMPT, &po, &err);
        tp = now_s() - tp;
        /* one step to capture the graph, then the timed ones */
        rc = rc || gpu->ops->forward(gpu, s, &id, 1, &po, &err);
        const int steps = 128;
        uint32_t hash = 2166136261u;
        double td = now_s();
        for (int i = 0; i < steps && !rc; i++) {
            rc = gpu->ops->forward(gpu, s, &id, 1, &po, &err);
            hash = (hash ^ (uint32_t)id) * 16777619u;
        }
        td = now_s() - td;
        ok(rc == 0, "bench: decode: %s", err.msg);
        const double gb = (double)decode_bytes(&M.w) / 1e9;
        double peak = 0;
        if (cw_cuda_copy_bandwidth(c, (size_t)1 << 30, &peak, &err))
            peak = 0;
        note("bench: 35b-a3b q4_k_m: prefill %d tokens %.1f ms (%.0f tok/s); decode %.1f tok/s "
             "(%.3f ms/token), %.2f GB weights/token = %.0f GB/s (device copy %.0f GB/s); "
             "greedy ids hash %08x", N_PROMPT, tp * 1e3, N_PROMPT / tp, steps / td,
             td / steps * 1e3, gb, gb * steps / td, peak, hash);
        gpu->ops->seq_free(gpu, s);
    }
    cw_backend_close(gpu);
    unsetenv("CWEN_CUDA_VERBOSE");
    unload(&M);
    remove(path);
}

int main(void)
{
    struct cw_cuda *c = gpu_test_open(); /* skips without a GPU */
    struct cw_pool pool;
    struct cw_err err = {0};
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (cw_pool_init(&pool, ncpu > 0 ? (int)ncpu : 1, &err)) {
        ok(0, "pool: %s", err.msg);
        return done();
    }
    check_errors(&pool);
    check_model(c, "tiny-moe-q4km-mtp", "--preset tiny-moe --mix q4_k_m --seed 3 --std 0.2", &pool,
                true);
    check_model(c, "tiny-moe-q8-mtp", "--preset tiny-moe --mix q8_0 --seed 4 --std 0.2", &pool,
                false);
    check_model(c, "tiny-dense-bf16-mtp", "--preset tiny-dense --mix bf16 --seed 5 --std 0.2",
                &pool, false);
    check_model(c, "tiny-dense-q4km", "--preset tiny-dense --mix q4_k_m --no-mtp --seed 6 --std 0.2",
                &pool, true);
    check_model(c, "35b-a3b-4layers-q4km-mtp",
                "--preset 35b-a3b --layers 4 --vocab-size 151936 --mix q4_k_m --seed 8", &pool,
                true);
    /* the 27B's widths: x quantised once for a product (Q8_K copies from
     * xq_kernel, xqn and the DeltaNet core), Q6_K and Q4_K in one mixer */
    check_model(c, "27b-4layers-q4km-mtp",
                "--preset 27b --layers 4 --vocab-size 151936 --mix q4_k_m --seed 9", &pool, true);
    if (!strcmp(test_env("CWEN_GPU_BENCH", "0"), "1"))
        bench(c);
    cw_cuda_close(c);
    cw_pool_free(&pool);
    return done();
}

/* debug_dump.c — `cwen debug-dump`: per-op activations of the CPU forward
 * on one prompt, and the first op that diverges from a llama.cpp dump.
 *
 *   cwen debug-dump -m MODEL.gguf (-p PROMPT [--ref DUMP.gguf] | --ref DUMP.gguf)
 *                   [--backend cpu] [--threshold X] [--threads N]
 *
 * Runs the prompt in one batch through the CPU forward with its tap set
 * (cpu_forward.h) and prints, per op, llama.cpp's name of the tensor, its
 * shape, L2 norm and max |x|. With --ref (a GGUF of F32 tensors named as
 * llama.cpp names them, written by tests/parity/llama_dump), each op is
 * compared with the tensor of the same name: relative L2 error
 * |cwen - ref| / |ref| over all rows, and over row 0 alone. The first op
 * above the threshold is reported and the exit status is 1.
 * Why the threshold is 0.1 by default (--threshold): both sides run
 * free, and cwen and llama.cpp quantise activations alike (Q8_K/Q8_0 rows),
 * so ops agree to ~1e-6 until an f32 ordering difference flips one rounding
 * decision of an activation row; each flip puts ~1e-4..1e-3 into the next
 * matmul's output (the first such op is printed as "first rounding flip"),
 * and with f16 attention in llama.cpp the drift grows to 1e-2..5e-2 over a
 * few layers (measured: 0.022 on tiny-dense, 0.05 on a real-width file at
 * weight std 0.3). An op that is wrong gives O(1); so does an expert choice
 * that flips at a near-tie of the router (ffn_moe_gate jumps to 0.2-1 while
 * ffn_moe_weights_norm stays small): that is where the two runs part ways,
 * and the first such op is what this reports. The prompt's token ids must
 * equal the dump's (dump.tokens); without a prompt, the dump's tokens are
 * run (a dump made from token ids, whose text need not tokenize back to
 * them). Lives in tools/ because it needs the forward's internals (the
 * tap), not only the backend contract. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "cli/cli.h"
#include "cpu/cpu_forward.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#include "model/tokenizer.h"

#define DEFAULT_THRESHOLD 0.1
#define FLIP_LEVEL 1e-4 /* above f32 ordering noise (~1e-6): a rounding decision flipped */

struct dump_ctx {
    const struct cw_gguf *ref; /* NULL: norms only */
    double threshold;
    int64_t n_tok;             /* tokens of the prompt */
    int n_ops, n_compared, n_missing;
    char first_bad[CW_GGUF_MAX_NAME];
    double first_bad_err, worst_err;
    char first_flip[CW_GGUF_MAX_NAME];
    char worst[CW_GGUF_MAX_NAME];
};

/* relative L2 error of x against the ref tensor; -1 if absent, -2 if another
 * size. *row0: the same over the first token's part (row 0 of the prompt). */
static double rel_l2(const struct cw_gguf *ref, const char *name, const float *x, int64_t n,
                     int64_t n_tok, double *row0)
{
    const struct cw_gguf_tensor *t = cw_gguf_find_tensor(ref, name);
    if (!t || t->type != CW_TYPE_F32)
        return -1;
    if (t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] != n)
        return -2;
    const float *r = t->data;
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - r[i];
        d2 += d * d;
        r2 += (double)r[i] * r[i];
        if (i + 1 == n / n_tok)
            *row0 = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    }
    return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}

static void on_tap(void *vctx, const char *op, int layer, const float *x, int64_t n_rows,
                   int64_t width)
{
    struct dump_ctx *c = vctx;
    char name[CW_GGUF_MAX_NAME];
    if (layer >= 0)
        snprintf(name, sizeof name, "%s-%d", op, layer);
    else
        snprintf(name, sizeof name, "%s", op);
    const int64_t n = n_rows * width;
    double l2 = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        l2 += (double)x[i] * x[i];
        mx = fmax(mx, fabs(x[i]));
    }
    c->n_ops++;
    printf("%-28s [%5lld x %4lld]  l2 %12.5g  max|x| %11.5g", name, (long long)width,
           (long long)n_rows, sqrt(l2), mx);
    if (c->ref) {
        double e0 = 0, e = rel_l2(c->ref, name, x, n, c->n_tok, &e0);
        const double bound = c->threshold;
        if (e == -1) {
            printf("  (not in the dump)");
            c->n_missing++;
        } else if (e == -2) {
            printf("  (another size in the dump)");
            c->n_missing++;
        } else {
            c->n_compared++;
            bool bad = !(e <= bound);
            printf("  rel err %9.3g  row 0 %9.3g%s", e, e0, bad ? "  > bound" : "");
            if (bad && !c->first_bad[0]) {
                snprintf(c->first_bad, sizeof c->first_bad, "%s", name);
                c->first_bad_err = e;
            }
            if (e > FLIP_LEVEL && !c->first_flip[0])
                snprintf(c->first_flip, sizeof c->first_flip, "%s", name);
            if (!(e <= c->worst_err)) {
                c->worst_err = e;
                snprintf(c->worst, sizeof c->worst, "%s", name);
            }
        }
    }
    printf("\n");
}

static void usage(FILE *f)
{
    fprintf(f, "usage: cwen debug-dump -m MODEL.gguf (-p PROMPT [--ref DUMP.gguf] | --ref DUMP.gguf)\n"
               "                       [--backend cpu] [--threshold X] [--threads N]\n"
               "Runs PROMPT (special tokens parsed, nothing added) through the CPU forward and\n"
               "prints every op's output: llama.cpp's tensor name, shape, L2 norm, max |x|.\n"
               "  --ref DUMP.gguf  llama.cpp's intermediates of the same file and prompt\n"
               "                   (tests/parity/llama_dump): per-op relative L2 error, and the\n"
               "                   first op above the threshold (exit status 1); without -p,\n"
               "                   the dump's own tokens are run\n"
               "  --threshold X    relative L2 bound (default %g: above the drift that\n"
               "                   activation rounding flips and f16 attention build up)\n"
               "  --backend cpu    the only backend with a tap so far\n"
               "  --threads N      worker threads (default 2)\n",
            DEFAULT_THRESHOLD);
}

/* the prompt's ids, checked against the dump's when there is one; no
 * prompt: the dump's ids, each checked against the model's vocabulary */
static int tokens_of(const struct cw_gguf *g, const struct cw_qwen35_hparams *hp,
                     const struct cw_gguf *ref, const char *prompt, struct cw_tokens *toks,
                     struct cw_err *err)
{
    const struct cw_gguf_kv *kv = ref ? cw_gguf_find_kv(ref, "dump.tokens") : NULL;
    if (ref && (!kv || kv->value.type != CW_GGUF_ARRAY || kv->value.arr.type != CW_GGUF_I32))
        return cw_errf(err, CW_ERR_FORMAT, "debug-dump: %s: no dump.tokens", ref->path);
    if (!prompt) {
        const uint64_t n = kv->value.arr.n;
        if (n == 0 || n > (1u << 20))
            return cw_errf(err, CW_ERR_FORMAT, "debug-dump: %s: dump.tokens holds %llu tokens "
                           "(1 to %u run)", ref->path, (unsigned long long)n, 1u << 20);
        if (!(toks->ids = malloc(n * sizeof *toks->ids)))
            return cw_errf(err, CW_ERR_NOMEM, "debug-dump: out of memory for %llu tokens",
                           (unsigned long long)n);
        toks->n = toks->cap = (size_t)n;
        for (size_t i = 0; i < toks->n; i++) {
            const int64_t id = cw_gguf_arr_i64(&kv->value, i);
            if (id < 0 || id >= (int64_t)hp->n_vocab)
                return cw_errf(err, CW_ERR_FORMAT, "debug-dump: %s: token %lld at %zu outside "
                               "the vocabulary of %u", ref->path, (long long)id, i, hp->n_vocab);
            toks->ids[i] = (int32_t)id;
        }
        return 0;
    }
    struct cw_tokenizer tk = {0};
    int rc = cw_tokenizer_load(&tk, g, err);
    rc = rc ? rc : cw_tokenize(&tk, prompt, strlen(prompt), true, toks, err);
    cw_tokenizer_free(&tk);
    if (rc || !ref)
        return rc;
    if (toks->n == 0)
        return cw_errf(err, CW_ERR_INVALID, "debug-dump: empty prompt");
    bool same = kv->value.arr.n == toks->n;
    for (size_t i = 0; same && i < toks->n; i++)
        same = cw_gguf_arr_i64(&kv->value, i) == toks->ids[i];
    if (!same)
        return cw_errf(err, CW_ERR_INVALID, "debug-dump: the prompt's %zu tokens differ from the "
                       "%llu of %s", toks->n, (unsigned long long)kv->value.arr.n, ref->path);
    return 0;
}

int cw_cmd_debug_dump(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"ref", required_argument, 0, 'r'},   {"backend", required_argument, 0, 'b'},
        {"threshold", required_argument, 0, 't'}, {"threads", required_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    const char *model = NULL, *prompt = NULL, *ref_path = NULL, *backend = "cpu";
    double threshold = DEFAULT_THRESHOLD;
    int n_threads = 2, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'r': ref_path = optarg; break;
        case 'b': backend = optarg; break;
        case 't': threshold = atof(optarg); break;
        case 'j': n_threads = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!model || (!prompt && !ref_path) || optind != argc || n_threads < 1 || !(threshold > 0)) {
        usage(stderr);
        return 2;
    }
    if (strcmp(backend, "cpu")) {
        fprintf(stderr, "cwen debug-dump: backend '%s' has no tap (only cpu)\n", backend);
        return 2;
    }

    struct cw_gguf g = {0}, ref = {0};
    struct cw_qwen35_hparams hp = {0};
    struct cw_qwen35_weights w = {0};
    struct cw_cpu_model m = {0};
    struct cw_cpu_seq s = {0};
    struct cw_pool pool = {0};
    struct cw_tokens toks = {0};
    struct cw_err err = {0};
    float *logits = NULL;
    int rc = cw_gguf_open(&g, model, &err);
    rc = rc ? rc : ref_path ? cw_gguf_open(&ref, ref_path, &err) : 0;
    rc = rc ? rc : cw_qwen35_hparams_load(&g, &hp, &err);
    rc = rc ? rc : tokens_of(&g, &hp, ref_path ? &ref : NULL, prompt, &toks, &err);
    rc = rc ? rc : cw_qwen35_bind(&w, &g, &hp, &err);
    rc = rc ? rc : cw_pool_init(&pool, n_threads, &err);
    rc = rc ? rc : cw_cpu_model_init(&m, &w, &pool, (int64_t)toks.n, &err);
    rc = rc ? rc : cw_cpu_seq_init(&s, &m, &err);
    if (!rc && !(logits = malloc(toks.n * (size_t)hp.n_vocab * sizeof *logits)))
        rc = cw_errf(&err, CW_ERR_NOMEM, "debug-dump: out of memory for %zu logit rows", toks.n);
    struct dump_ctx dc = {ref_path ? &ref : NULL, threshold, (int64_t)toks.n, 0, 0, 0, "", 0, 0,
                          "", ""};
    if (!rc) {
        printf("# %s: %zu tokens, %u layers, E %u\n", model, toks.n, hp.n_layer, hp.n_embd);
        m.tap = on_tap, m.tap_ctx = &dc;
        rc = cw_cpu_forward(&m, &s, toks.ids, (int64_t)toks.n, logits, true, NULL, &err);
    }
    int status = 0;
    if (rc) {
        fprintf(stderr, "cwen debug-dump: %s\n", err.msg);
        status = 2;
    } else if (ref_path) {
        printf("# %d ops, %d compared with %s, %d not in it; worst rel err %.3g at %s\n",
               dc.n_ops, dc.n_compared, ref_path, dc.n_missing, dc.worst_err, dc.worst);
        printf("# first rounding flip (rel err > %g): %s\n", FLIP_LEVEL,
               dc.first_flip[0] ? dc.first_flip : "none");
        if (dc.first_bad[0]) {
            printf("first divergent op: %s (rel L2 err %.3g > %.3g)\n", dc.first_bad,
                   dc.first_bad_err, threshold);
            status = 1;
        } else if (dc.n_compared == 0) {
            printf("no op of the forward is in %s\n", ref_path);
            status = 1;
        } else {
            printf("no divergence\n");
        }
    }
    free(logits);
    cw_tokens_free(&toks);
    cw_cpu_seq_free(&s);
    cw_pool_free(&pool);
    cw_qwen35_weights_free(&w);
    cw_gguf_close(&ref);
    cw_gguf_close(&g);
    return status;
}

/* llama_peer.c — the llama.cpp peer of `cwen bench` on the CPU: the same
 * tests, measured the same way, through the oracle's prebuilt libllama (no
 * llama-bench binary ships with it). Benchmarks only; the cwen binary never
 * links llama.cpp (CMakeLists.txt builds this only where the oracle is).
 *
 * pp N: llama_decode of the N prompt tokens from an empty memory (split by
 * n_batch as llama-bench does, so one call up to 2048); tg N: N single-token
 * greedy decodes after an untimed prompt of depth d. One dropped warm-up run,
 * then R timed runs; the prompt stream is cwen bench's (same LCG and seed),
 * so the ids and hashes are comparable. Settings are llama-bench's defaults:
 * n_batch 2048, n_ubatch 512, flash attention auto, f16 K/V.
 * Output: one JSON object per test, the keys of `cwen bench --json`.
 *
 * usage: llama_peer -m FILE [-p LIST] [-n LIST] [-d LIST] [-r R] [-t THREADS]
 * Needs CWEN_ORACLE_DIR (or ~/.cache/cwen-oracle) for the CPU backend libs. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "llama.h"

#define MAX_LIST 16
#define N_BATCH 2048
#define N_UBATCH 512

static int parse_list(const char *s, int64_t *out, int *n)
{
    char *end;
    *n = 0;
    while (*s && *n < MAX_LIST) {
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || (*end && *end != ','))
            return -1;
        out[(*n)++] = v;
        s = *end ? end + 1 : end;
    }
    return *n && !*s ? 0 : -1;
}

static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

struct peer {
    struct llama_context *ctx;
    int n_vocab;
    int32_t *toks;
    int32_t *ids;
};

/* toks[0..n) from the memory's position, n_batch at a time */
static int decode_prompt(struct peer *p, int32_t *toks, int64_t n)
{
    for (int64_t i = 0; i < n; i += N_BATCH) {
        int32_t c = (int32_t)(n - i < N_BATCH ? n - i : N_BATCH);
        if (llama_decode(p->ctx, llama_batch_get_one(toks + i, c)))
            return -1;
    }
    return 0;
}

/* One run; tg when is_tg. Returns tok/s or -1; *hash: ids (tg) or argmax (pp). */
static double run_once(struct peer *p, bool is_tg, int64_t n, int64_t depth, uint64_t *hash,
                       uint64_t *logits_hash)
{
    llama_memory_clear(llama_get_memory(p->ctx), true);
    if (!is_tg) {
        double t0 = bench_now_s();
        if (decode_prompt(p, p->toks, n))
            return -1;
        llama_synchronize(p->ctx);
        double dt = bench_now_s() - t0;
        const float *l = llama_get_logits_ith(p->ctx, -1);
        int32_t am = argmax(l, p->n_vocab);
        *hash = fnv1a(FNV_INIT, &am, sizeof am);
        *logits_hash = fnv1a(FNV_INIT, l, (size_t)p->n_vocab * sizeof *l);
        return (double)n / dt;
    }
    if (depth && decode_prompt(p, p->toks, depth))
        return -1;
    int32_t tok = p->toks[depth];
    const float *l = NULL;
    double t0 = bench_now_s();
    for (int64_t i = 0; i < n; i++) {
        if (llama_decode(p->ctx, llama_batch_get_one(&tok, 1)))
            return -1;
        l = llama_get_logits_ith(p->ctx, -1);
        p->ids[i] = tok = argmax(l, p->n_vocab);
    }
    double dt = bench_now_s() - t0;
    *hash = fnv1a(FNV_INIT, p->ids, (size_t)n * sizeof *p->ids);
    *logits_hash = fnv1a(FNV_INIT, l, (size_t)p->n_vocab * sizeof *l);
    return (double)n / dt;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_test(struct peer *p, const char *model, int threads, int reps, bool is_tg,
                     int64_t n, int64_t depth)
{
    char name[64], hex[32];
    int len = snprintf(name, sizeof name, "%s%" PRId64, is_tg ? "tg" : "pp", n);
    if (depth)
        snprintf(name + len, sizeof name - (size_t)len, "@d%" PRId64, depth);
    fprintf(stderr, "llama_peer: %s ...\n", name);
    json_t *j = json_object(), *a = json_array();
    json_object_set_new(j, "model", json_string(model));
    json_object_set_new(j, "backend", json_string("llama.cpp-cpu"));
    json_object_set_new(j, "threads", json_integer(threads));
    json_object_set_new(j, "test", json_string(name));
    json_object_set_new(j, "kind", json_string(is_tg ? "tg" : "pp"));
    json_object_set_new(j, "n", json_integer(n));
    json_object_set_new(j, "depth", json_integer(depth));
    json_object_set_new(j, "reps", json_integer(reps));
    double s[64];
    uint64_t h = 0, lh = 0, first = 0;
    bool same = true;
    for (int k = 0; k <= reps; k++) {
        double tps = run_once(p, is_tg, n, depth, &h, &lh);
        if (tps < 0) {
            json_object_set_new(j, "error", json_string("llama_decode failed"));
            goto out;
        }
        if (k == 0)
            first = h;
        else
            s[k - 1] = tps, json_array_append_new(a, json_real(tps));
        same &= h == first;
    }
    qsort(s, (size_t)reps, sizeof *s, cmp_double);
    json_object_set(j, "tps", a);
    json_object_set_new(j, "tps_median",
                        json_real(reps % 2 ? s[reps / 2] : 0.5 * (s[reps / 2 - 1] + s[reps / 2])));
    json_object_set_new(j, "tps_min", json_real(s[0]));
    json_object_set_new(j, "tps_max", json_real(s[reps - 1]));
    json_object_set_new(j, "n_tokens", json_integer(n));
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    json_object_set_new(j, "ids_fnv1a64", json_string(hex));
    json_object_set_new(j, "ids_same_all_runs", json_boolean(same));
    snprintf(hex, sizeof hex, "%016" PRIx64, lh);
    json_object_set_new(j, "logits_fnv1a64", json_string(hex));
out:;
    char *str = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (str)
        printf("%s\n", str);
    fflush(stdout);
    free(str);
    json_decref(a);
    json_decref(j);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int64_t pp[MAX_LIST] = {512}, tg[MAX_LIST] = {128}, dp[MAX_LIST] = {0};
    int n_pp = 1, n_tg = 1, n_dp = 1, reps = 3, threads = 2;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = !v;
        if (!strcmp(a, "-m") && v)
            path = v;
        else if (!strcmp(a, "-p") && v)
            bad = parse_list(v, pp, &n_pp);
        else if (!strcmp(a, "-n") && v)
            bad = parse_list(v, tg, &n_tg);
        else if (!strcmp(a, "-d") && v)
            bad = parse_list(v, dp, &n_dp);
        else if (!strcmp(a, "-r") && v)
            reps = atoi(v), bad = reps < 1 || reps > 63;
        else if (!strcmp(a, "-t") && v)
            threads = atoi(v), bad = threads < 1;
        else
            bad = 1;
        if (bad) {
            fprintf(stderr, "usage: llama_peer -m FILE [-p LIST] [-n LIST] [-d LIST] [-r R] [-t N]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "llama_peer: -m FILE is required\n");
        return 2;
    }
    if (!getenv("CWEN_PEER_VERBOSE"))
        llama_log_set(quiet_log, NULL);
    llama_backend_init();
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)) {
        const char *od = getenv("CWEN_ORACLE_DIR"), *home = getenv("HOME");
        char dir[4096];
        if (od && *od)
            snprintf(dir, sizeof dir, "%s/cpu/package/bins/linux-x64", od);
        else
            snprintf(dir, sizeof dir, "%s/.cache/cwen-oracle/cpu/package/bins/linux-x64", home ? home : ".");
        ggml_backend_load_all_from_path(dir);
    }
    int64_t need = 1, max_n = 1;
    for (int i = 0; i < n_pp; i++)
        need = pp[i] > need ? pp[i] : need;
    for (int i = 0; i < n_tg; i++)
        for (int d = 0; d < n_dp; d++) {
            need = tg[i] + dp[d] > need ? tg[i] + dp[d] : need;
            max_n = tg[i] > max_n ? tg[i] : max_n;
        }
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *lm = llama_model_load_from_file(path, mp);
    if (!lm) {
        fprintf(stderr, "llama_peer: cannot load %s\n", path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)((need + 1 + 255) / 256 * 256);
    cp.n_batch = N_BATCH;
    cp.n_ubatch = N_UBATCH;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    struct peer p = {.ctx = llama_init_from_model(lm, cp),
                     .n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(lm))};
    p.toks = malloc((size_t)(need + 1) * sizeof *p.toks);
    p.ids = malloc((size_t)max_n * sizeof *p.ids);
    if (!p.ctx || !p.toks || !p.ids) {
        fprintf(stderr, "llama_peer: cannot create a context\n");
        return 1;
    }
    bench_tokens(p.toks, need + 1, (uint32_t)p.n_vocab);
    const char *slash = strrchr(path, '/');
    const char *model = slash ? slash + 1 : path;
    for (int i = 0; i < n_pp; i++)
        if (pp[i] > 0)
            run_test(&p, model, threads, reps, false, pp[i], 0);
    for (int i = 0; i < n_tg; i++)
        for (int d = 0; d < n_dp; d++)
            if (tg[i] > 0)
                run_test(&p, model, threads, reps, true, tg[i], dp[d]);
    free(p.toks);
    free(p.ids);
    llama_free(p.ctx);
    llama_model_free(lm);
    llama_backend_free();
    return 0;
}

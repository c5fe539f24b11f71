/* bench.c — `cwen bench`: a llama-bench-like speed table for one GGUF on one
 * backend (BENCHMARKS.md says what is measured and why).
 *
 * Owns the test plan (pp N: N prompt tokens into an empty sequence in one
 * forward call; tg N: N single-token greedy decode calls after an untimed
 * prompt of depth d; with --mtp also tg N with the MTP block drafting one
 * token per step), the timing (one dropped warm-up run, then R runs; median
 * and range), the bytes each decoded token reads and the bandwidth that
 * gives, and the hashes that let two runs compare in one string. The forward
 * itself is the backend's (backend.h); this file only drives and reports.
 * A tool like tools/mkmodel, so it reads gguf/ and model/ directly. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "backend.h"
#include "base/pool.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/qwen35.h"
#include "model/qwen35_weights.h"
#ifdef CWEN_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#define MAX_LIST 16
/* prompts up to this many tokens go in one forward call; longer ones in
 * CHUNK-token calls (the size of the largest batch a backend is asked for) */
#define ONE_CALL_MAX 4096
#define CHUNK 2048
/* the ordinary (non-special) tokens of the Qwen vocabulary: ids drawn below
 * this behave like text, whatever the padding of the file's vocabulary */
/* device copy buffers: large enough that the copy is bandwidth-bound */
#define COPY_BYTES ((size_t)1 << 30)

struct bench_opts {
    const char *path, *backend;
    int64_t pp[MAX_LIST], tg[MAX_LIST], depth[MAX_LIST];
    int n_pp, n_tg, n_depth;
    int reps, threads;
    bool mtp, json;
};

enum test_kind { T_PP, T_TG, T_TG_MTP };

struct test {
    enum test_kind kind;
    int64_t n, depth;
    char name[64];
};

/* What one test measured (all runs but the warm-up). */
struct result {
    bool failed;
    char err[512];
    int n_runs;
    double tps[64];
    double med, min, max;
    uint64_t logits_hash, ids_hash;
    bool ids_same; /* every run, the warm-up included, generated the same ids */
    /* tg: bytes read per decoded token */
    double w_bytes, state_bytes, kv_bytes;
};

/* The model and backend every test runs on. */
struct bench {
    const struct bench_opts *o;
    struct cw_backend *be;
    struct cw_bseq *seq;
    const struct cw_qwen35_hparams *hp;
    int32_t *toks;   /* the deterministic prompt stream */
    int64_t n_toks;
    float *logits;   /* [V] the final logits of a run */
    float *hidden;   /* [CHUNK or ONE_CALL_MAX][E]: MTP input */
    int32_t *ids;    /* [n] generated ids of a tg run */
    uint64_t w_decode_bytes;
    const char *model_name;
    uint64_t size_bytes, n_params;
    double copy_gbps; /* 0: not measured */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cwen bench -m FILE.gguf [options]\n"
            "Times prefill (pp N: N prompt tokens in one forward call) and greedy decode\n"
            "(tg N: N single-token calls after an untimed prompt of depth d) on a backend.\n"
            "  -m, --model FILE     the GGUF to run\n"
            "  -p, --prompt LIST    prefill sizes, comma-separated (default 512; 0: none)\n"
            "  -n, --gen LIST       decode lengths (default 128; 0: none)\n"
            "  -d, --depth LIST     tokens in the sequence before each tg test (default 0)\n"
            "  -r, --reps N         timed runs after one dropped warm-up run (default 3)\n"
            "  --backend NAME       cpu | cuda | auto (default auto)\n"
            "  -t, --threads N      CPU threads (default: all CPUs)\n"
            "  --mtp                also time tg with the MTP block drafting a token per step\n"
            "  --json               one JSON object per test on stdout instead of the table\n"
            "  -h, --help\n");
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "512,2048" -> {512, 2048} */
static int parse_list(const char *s, int64_t *out, int *n)
{
    char buf[256];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST || parse_i64(t, 0, 1 << 24, &out[*n]))
            return -1;
        (*n)++;
    }
    return *n ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    enum { O_BACKEND = 256, O_MTP, O_JSON };
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
        {"gen", required_argument, 0, 'n'},   {"depth", required_argument, 0, 'd'},
        {"reps", required_argument, 0, 'r'},  {"threads", required_argument, 0, 't'},
        {"backend", required_argument, 0, O_BACKEND}, {"mtp", no_argument, 0, O_MTP},
        {"json", no_argument, 0, O_JSON},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (struct bench_opts){.backend = "auto", .pp = {512}, .n_pp = 1, .tg = {128}, .n_tg = 1,
                             .depth = {0}, .n_depth = 1, .reps = 3,
                             .threads = nc > 0 ? (int)nc : 1};
    optind = 1;
    opterr = 0;
    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, ":m:p:n:d:r:t:h", longopts, NULL)) != -1) {
        const char *bad = NULL;
        switch (c) {
        case 'm': o->path = optarg; break;
        case 'p': if (parse_list(optarg, o->pp, &o->n_pp)) bad = "-p"; break;
        case 'n': if (parse_list(optarg, o->tg, &o->n_tg)) bad = "-n"; break;
        case 'd': if (parse_list(optarg, o->depth, &o->n_depth)) bad = "-d"; break;
        case 'r':
            if (parse_i64(optarg, 1, 63, &v)) bad = "-r";
            else o->reps = (int)v;
            break;
        case 't':
            if (parse_i64(optarg, 1, 1024, &v)) bad = "-t";
            else o->threads = (int)v;
            break;
        case O_BACKEND:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
                bad = "--backend";
            o->backend = optarg;
            break;
        case O_MTP: o->mtp = true; break;
        case O_JSON: o->json = true; break;
        case 'h': usage(stdout); return 1;
        case ':':
            fprintf(stderr, "cwen bench: %s needs a value\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        default:
            fprintf(stderr, "cwen bench: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "cwen bench: %s: bad value '%s'\n", bad, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "cwen bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->path) {
        fprintf(stderr, "cwen bench: -m FILE is required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* ---- one run ------------------------------------------------------------
 * The prompt stream is fixed (bench_tokens, bench_common.h), so every run, every
 * backend and the llama.cpp peer see the same ids. */

/* Runs toks[0..n) from the sequence's position, in one call when n is at
 * most ONE_CALL_MAX, else in CHUNK-token calls. out applies to the last call.
 * With mtp, the MTP block's cache is filled alongside: pairs (toks[j+1],
 * hidden_j), which needs toks[n] (the stream is one longer than any prompt). */
static int prefill(struct bench *b, const int32_t *toks, int64_t n, bool mtp,
                   const struct cw_fwd_out *out, struct cw_err *err)
{
    const int64_t chunk = n <= ONE_CALL_MAX ? n : CHUNK;
    int32_t am;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t c = n - i < chunk ? n - i : chunk;
        struct cw_fwd_out o = i + c == n && out ? *out : (struct cw_fwd_out){.argmax = &am};
        if (mtp)
            o.hidden = b->hidden, o.all_logits = false;
        if (b->be->ops->forward(b->be, b->seq, toks + i, c, &o, err))
            return -1;
        if (mtp) {
            struct cw_fwd_out mo = {.argmax = &am};
            if (b->be->ops->forward_mtp(b->be, b->seq, toks + i + 1, b->hidden, c, &mo, err))
                return -1;
        }
    }
    return 0;
}

/* One timed run of t; last asks for the final logits. Returns tok/s or -1. */
static double run_once(struct bench *b, const struct test *t, bool last, uint64_t *ids_hash,
                       struct cw_err *err)
{
    b->be->ops->seq_reset(b->be, b->seq);
    int32_t am = 0;
    if (t->kind == T_PP) {
        struct cw_fwd_out o = {.argmax = &am, .logits = last ? b->logits : NULL};
        double t0 = bench_now_s();
        if (prefill(b, b->toks, t->n, false, &o, err))
            return -1;
        double dt = bench_now_s() - t0;
        *ids_hash = fnv1a(FNV_INIT, &am, sizeof am);
        return (double)t->n / dt;
    }
    const bool mtp = t->kind == T_TG_MTP;
    if (t->depth && prefill(b, b->toks, t->depth, mtp, NULL, err))
        return -1;
    int32_t tok = b->toks[t->depth], draft;
    double t0 = bench_now_s();
    for (int64_t i = 0; i < t->n; i++) {
        /* only the argmax comes back, except the last step of the last run */
        struct cw_fwd_out o = {.argmax = &am, .logits = last && i + 1 == t->n ? b->logits : NULL,
                               .hidden = mtp ? b->hidden : NULL};
        if (b->be->ops->forward(b->be, b->seq, &tok, 1, &o, err))
            return -1;
        if (mtp) {
            struct cw_fwd_out mo = {.argmax = &draft};
            if (b->be->ops->forward_mtp(b->be, b->seq, &am, b->hidden, 1, &mo, err))
                return -1;
        }
        b->ids[i] = tok = am;
    }
    double dt = bench_now_s() - t0;
    *ids_hash = fnv1a(FNV_INIT, b->ids, (size_t)t->n * sizeof *b->ids);
    return (double)t->n / dt;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_test(struct bench *b, const struct test *t, struct result *r)
{
    struct cw_err err = {0};
    *r = (struct result){.ids_same = true};
    uint64_t first = 0;
    for (int k = 0; k <= b->o->reps; k++) {
        uint64_t h = 0;
        double tps = run_once(b, t, k == b->o->reps, &h, &err);
        if (tps < 0) {
            r->failed = true;
            snprintf(r->err, sizeof r->err, "%s", err.msg);
            return;
        }
        if (k == 0)
            first = h; /* the warm-up: its time is dropped, its ids still compare */
        else
            r->tps[r->n_runs++] = tps;
        r->ids_same &= h == first;
        r->ids_hash = h;
    }
    r->logits_hash = fnv1a(FNV_INIT, b->logits, (size_t)b->hp->n_vocab * sizeof(float));
    double s[64];
    memcpy(s, r->tps, (size_t)r->n_runs * sizeof *s);
    qsort(s, (size_t)r->n_runs, sizeof *s, cmp_double);
    int m = r->n_runs;
    r->min = s[0], r->max = s[m - 1];
    r->med = m % 2 ? s[m / 2] : 0.5 * (s[m / 2 - 1] + s[m / 2]);
    if (t->kind == T_TG) {
        /* positions depth .. depth+n-1 read on average depth + (n+1)/2 K/V rows */
        r->w_bytes = (double)b->w_decode_bytes;
        r->state_bytes = 2.0 * (double)cw_qwen35_state_bytes_per_seq(b->hp); /* read + written */
        r->kv_bytes = (double)cw_qwen35_kv_bytes_per_token(b->hp) *
                      ((double)t->depth + 0.5 * (double)(t->n + 1));
    }
}

/* ---- report --------------------------------------------------------------- */

static void print_table(const struct bench *b, const struct test *ts, const struct result *rs,
                        int n)
{
    char thr[16];
    if (!strcmp(b->be->ops->name, "cpu"))
        snprintf(thr, sizeof thr, "%d", b->o->threads);
    else
        snprintf(thr, sizeof thr, "-");
    printf("| %-24s | %10s | %8s | %-7s | %7s | %-16s | %30s |\n", "model", "size", "params",
           "backend", "threads", "test", "t/s (median [min-max])");
    printf("| %.24s | %.10s | %.8s | %.7s | %.7s | %.16s | %.30s |\n",
           "------------------------------", "-----------:", "---------:", "---------",
           "--------:", "------------------", "------------------------------:");
    for (int i = 0; i < n; i++) {
        char tps[64];
        if (rs[i].failed)
            snprintf(tps, sizeof tps, "failed");
        else
            snprintf(tps, sizeof tps, "%.2f [%.2f-%.2f]", rs[i].med, rs[i].min, rs[i].max);
        printf("| %-24.24s | %6.2f GiB | %6.2f B | %-7s | %7s | %-16s | %30s |\n", b->model_name,
               (double)b->size_bytes / (1024.0 * 1024 * 1024), (double)b->n_params / 1e9,
               b->be->ops->name, thr, ts[i].name, tps);
    }
    printf("\n");
    for (int i = 0; i < n; i++) {
        const struct result *r = &rs[i];
        if (r->failed) {
            printf("%s: error: %s\n", ts[i].name, r->err);
            continue;
        }
        if (ts[i].kind == T_PP) {
            printf("%s: %" PRId64 " tokens, last-token argmax fnv1a64 %016" PRIx64
                   ", logits fnv1a64 %016" PRIx64 "\n",
                   ts[i].name, ts[i].n, r->ids_hash, r->logits_hash);
            continue;
        }
        printf("%s: %" PRId64 " tokens, ids fnv1a64 %016" PRIx64 " (%s in all %d runs), "
               "final logits fnv1a64 %016" PRIx64 "\n",
               ts[i].name, ts[i].n, r->ids_hash, r->ids_same ? "same" : "NOT the same",
               b->o->reps + 1, r->logits_hash);
        if (ts[i].kind != T_TG)
            continue;
        double tot = r->w_bytes + r->state_bytes + r->kv_bytes, gbps = tot * r->med / 1e9;
        printf("  bytes/token %.4f GB (weights %.4f + DeltaNet state r+w %.4f + K/V %.4f); "
               "achieved %.2f GB/s",
               tot / 1e9, r->w_bytes / 1e9, r->state_bytes / 1e9, r->kv_bytes / 1e9, gbps);
        if (b->copy_gbps > 0)
            printf(" = %.1f%% of the device copy bandwidth %.1f GB/s", 100.0 * gbps / b->copy_gbps,
                   b->copy_gbps);
        printf("\n");
    }
}

static void print_json(const struct bench *b, const struct test *t, const struct result *r)
{
    json_t *j = json_object();
    char hex[32];
    json_object_set_new(j, "model", json_string(b->model_name));
    json_object_set_new(j, "path", json_string(b->o->path));
    json_object_set_new(j, "size_bytes", json_integer((json_int_t)b->size_bytes));
    json_object_set_new(j, "n_params", json_integer((json_int_t)b->n_params));
    json_object_set_new(j, "backend", json_string(b->be->ops->name));
    json_object_set_new(j, "threads", json_integer(b->o->threads));
    json_object_set_new(j, "test", json_string(t->name));
    json_object_set_new(j, "kind", json_string(t->kind == T_PP ? "pp" : t->kind == T_TG ? "tg"
                                                                                       : "tg+mtp"));
    json_object_set_new(j, "n", json_integer(t->n));
    json_object_set_new(j, "depth", json_integer(t->depth));
    json_object_set_new(j, "reps", json_integer(b->o->reps));
    if (r->failed) {
        json_object_set_new(j, "error", json_string(r->err));
    } else {
        json_t *a = json_array();
        for (int i = 0; i < r->n_runs; i++)
            json_array_append_new(a, json_real(r->tps[i]));
        json_object_set_new(j, "tps", a);
        json_object_set_new(j, "tps_median", json_real(r->med));
        json_object_set_new(j, "tps_min", json_real(r->min));
        json_object_set_new(j, "tps_max", json_real(r->max));
        json_object_set_new(j, "n_tokens", json_integer(t->n));
        snprintf(hex, sizeof hex, "%016" PRIx64, r->ids_hash);
        json_object_set_new(j, "ids_fnv1a64", json_string(hex));
        json_object_set_new(j, "ids_same_all_runs", json_boolean(r->ids_same));
        snprintf(hex, sizeof hex, "%016" PRIx64, r->logits_hash);
        json_object_set_new(j, "logits_fnv1a64", json_string(hex));
        if (t->kind == T_TG) {
            double tot = r->w_bytes + r->state_bytes + r->kv_bytes, gbps = tot * r->med / 1e9;
            json_object_set_new(j, "bytes_weights", json_real(r->w_bytes));
            json_object_set_new(j, "bytes_state", json_real(r->state_bytes));
            json_object_set_new(j, "bytes_kv", json_real(r->kv_bytes));
            json_object_set_new(j, "bytes_per_token", json_real(tot));
            json_object_set_new(j, "decode_gbps", json_real(gbps));
            if (b->copy_gbps > 0) {
                json_object_set_new(j, "copy_gbps", json_real(b->copy_gbps));
                json_object_set_new(j, "copy_pct", json_real(100.0 * gbps / b->copy_gbps));
            }
        }
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (s)
        printf("%s\n", s);
    free(s);
    json_decref(j);
    fflush(stdout);
}

/* ---- setup ---------------------------------------------------------------- */

/* Size, parameter count and weight bytes read per decoded token of the file. */
static int model_facts(struct bench *b, const struct cw_gguf *g, struct cw_err *err)
{
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct cw_gguf_tensor *t = &g->tensors[i];
        int64_t ne = 1;
        for (uint32_t d = 0; d < CW_GGUF_MAX_DIMS; d++)
            ne *= t->ne[d];
        b->n_params += (uint64_t)ne;
        b->size_bytes += t->nbytes;
    }
    size_t n = cw_qwen35_tensors(b->hp, NULL, 0);
    struct cw_qwen35_tensor *ts = calloc(n ? n : 1, sizeof *ts);
    if (!ts)
        return cw_errf(err, CW_ERR_NOMEM, "bench: out of memory");
    cw_qwen35_tensors(b->hp, ts, n);
    for (size_t i = 0; i < n; i++) {
        const struct cw_gguf_tensor *t = cw_gguf_find_tensor(g, ts[i].name);
        if (t)
            b->w_decode_bytes += cw_qwen35_decode_bytes(b->hp, &ts[i], t->nbytes);
    }
    free(ts);
    return 0;
}

static int plan(const struct bench_opts *o, bool has_mtp, struct test *ts, int cap)
{
    int n = 0;
    for (int i = 0; i < o->n_pp; i++)
        if (o->pp[i] > 0 && n < cap) {
            ts[n] = (struct test){.kind = T_PP, .n = o->pp[i]};
            snprintf(ts[n].name, sizeof ts[n].name, "pp%" PRId64, o->pp[i]);
            n++;
        }
    for (int k = 0; k < (has_mtp ? 2 : 1); k++)
        for (int i = 0; i < o->n_tg; i++)
            for (int d = 0; d < o->n_depth; d++) {
                if (o->tg[i] <= 0 || n >= cap)
                    continue;
                struct test *t = &ts[n++];
                *t = (struct test){.kind = k ? T_TG_MTP : T_TG, .n = o->tg[i], .depth = o->depth[d]};
                int len = snprintf(t->name, sizeof t->name, "tg%" PRId64 "%s", t->n, k ? "+mtp" : "");
                if (t->depth)
                    snprintf(t->name + len, sizeof t->name - (size_t)len, "@d%" PRId64, t->depth);
            }
    return n;
}

#ifdef CWEN_HAVE_CUDA
/* The device's copy bandwidth: the ceiling decode GB/s is measured against. */
static void measure_copy(struct bench *b, const struct cw_backend_opts *bo)
{
    struct cw_cuda *c = NULL;
    struct cw_err err = {0};
    if (cw_cuda_open(&c, bo->device, &err) || cw_cuda_copy_bandwidth(c, COPY_BYTES, &b->copy_gbps, &err))
        fprintf(stderr, "cwen bench: copy bandwidth not measured: %s\n", err.msg);
    cw_cuda_close(c);
}
#endif

int cw_cmd_bench(int argc, char **argv)
{
    struct bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;

    struct cw_err err = {0};
    struct cw_gguf g = {0};
    struct cw_qwen35_hparams hp;
    struct cw_qwen35_weights w = {0};
    struct cw_pool pool = {0};
    struct bench b = {.o = &o, .hp = &hp};
    struct test ts[3 * MAX_LIST + 2 * MAX_LIST * MAX_LIST];
    struct result *rs = NULL;
    bool bound = false;
    rc = 1;
    if (cw_gguf_open(&g, o.path, &err) || cw_qwen35_hparams_load(&g, &hp, &err) ||
        cw_qwen35_bind(&w, &g, &hp, &err))
        goto fail;
    bound = true;
    if (o.mtp && !w.has_mtp) {
        cw_errf(&err, CW_ERR_INVALID, "%s has no MTP block (--mtp)", o.path);
        goto fail;
    }
    const char *slash = strrchr(o.path, '/');
    b.model_name = slash ? slash + 1 : o.path;
    if (model_facts(&b, &g, &err) || cw_pool_init(&pool, o.threads, &err))
        goto fail;

    int n_tests = plan(&o, o.mtp, ts, (int)(sizeof ts / sizeof ts[0]));
    int64_t need = 1, max_n = 1;
    for (int i = 0; i < n_tests; i++) {
        int64_t end = ts[i].depth + ts[i].n;
        need = end > need ? end : need;
        max_n = ts[i].n > max_n ? ts[i].n : max_n;
    }
    struct cw_backend_opts bo = {.n_ctx_max = need + 1, .pool = &pool, .device = 0};
    if (cw_backend_open(&b.be, o.backend, &w, &bo, &err) ||
        b.be->ops->seq_new(b.be, &b.seq, &err))
        goto fail;
#ifdef CWEN_HAVE_CUDA
    if (!strcmp(b.be->ops->name, "cuda"))
        measure_copy(&b, &bo);
#endif

    /* the prompt stream: one longer than any prompt (the first decode input) */
    b.n_toks = need + 1;
    b.toks = malloc((size_t)b.n_toks * sizeof *b.toks);
    b.ids = malloc((size_t)max_n * sizeof *b.ids);
    b.logits = calloc(hp.n_vocab, sizeof *b.logits);
    b.hidden = malloc((size_t)(o.mtp ? ONE_CALL_MAX : 1) * hp.n_embd * sizeof *b.hidden);
    rs = calloc((size_t)(n_tests ? n_tests : 1), sizeof *rs);
    if (!b.toks || !b.ids || !b.logits || !b.hidden || !rs) {
        cw_errf(&err, CW_ERR_NOMEM, "bench: out of memory");
        goto fail;
    }
    bench_tokens(b.toks, b.n_toks, hp.n_vocab);

    rc = 0;
    for (int i = 0; i < n_tests; i++) {
        fprintf(stderr, "cwen bench: %s ...\n", ts[i].name);
        run_test(&b, &ts[i], &rs[i]);
        if (rs[i].failed) {
            fprintf(stderr, "cwen bench: %s: %s\n", ts[i].name, rs[i].err);
            rc = 1;
        }
        if (o.json)
            print_json(&b, &ts[i], &rs[i]);
    }
    if (!o.json)
        print_table(&b, ts, rs, n_tests);
    goto done;
fail:
    fprintf(stderr, "cwen bench: %s\n", err.msg);
done:
    free(rs);
    free(b.toks);
    free(b.ids);
    free(b.logits);
    free(b.hidden);
    if (b.seq)
        b.be->ops->seq_free(b.be, b.seq);
    cw_backend_close(b.be);
    cw_pool_free(&pool);
    if (bound)
        cw_qwen35_weights_free(&w);
    cw_gguf_close(&g);
    return rc;
}

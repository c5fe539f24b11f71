/* test_cpu_gemv_oracle.c — cwen's CPU dot products against llama.cpp's CPU
 * backend's own (ggml_get_type_traits_cpu: vec_dot, vec_dot_type and the
 * from_float of the activation type), dlopen'ed from the prebuilt variants.
 *
 * Per weight type: the activation pairing must match; the activation row
 * quantised by cwen must equal ggml's byte for byte; and the dot products,
 * each side on its own quantised activation, must agree to f32 rounding
 * (|cwen − ggml| / Σ|w·x| below BOUND). Run against the haswell (AVX2)
 * variant and the best variant this CPU runs. Also prints GB/s of weight
 * bytes streamed by cw_cpu_matmul (n_tok = 1) beside ggml's vec_dot in a
 * loop over the same rows. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "cpu/cpu_gemv.h"
#include "ggml-cpu.h"
#include "gguf/quant.h"
#include "oracle.h"
#include "../test.h"

/* 2e-6 of Σ|w·x|: ggml sums per SIMD lane with FMA where cwen sums per block
 * in order; both are exact in the integers, so only f32 rounding differs. */
#define BOUND 2e-6

typedef const struct ggml_type_traits_cpu *(*traits_fn)(enum ggml_type);
typedef int (*score_fn)(void);

struct backend {
    void *h;
    char name[32];
    traits_fn traits;
};

static int open_variant(const char *name, struct backend *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cpu/package/bins/linux-x64/libggml-cpu-%s.so", oracle_dir(),
             name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    score_fn score = (score_fn)dlsym(h, "ggml_backend_score");
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    traits_fn tr = (traits_fn)dlsym(h, "ggml_get_type_traits_cpu");
    if (!score || !init || !tr || score() <= 0) {
        dlclose(h);
        return -1;
    }
    init();
    b->h = h;
    b->traits = tr;
    snprintf(b->name, sizeof b->name, "%s", name);
    return score();
}

static uint64_t rs = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static float grand(void)
{
    return (float)(sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}
static void fill(float *x, int64_t n)
{
    float s = 1;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0)
            s = (float)exp(3 * (urand() - 0.5));
        x[i] = s * grand();
    }
}

static const enum cw_qtype types[] = {
    CW_TYPE_F32,  CW_TYPE_F16,  CW_TYPE_BF16,   CW_TYPE_Q8_0,  CW_TYPE_Q4_0,  CW_TYPE_Q4_1,
    CW_TYPE_Q5_0, CW_TYPE_Q5_1, CW_TYPE_IQ4_NL, CW_TYPE_MXFP4, CW_TYPE_NVFP4, CW_TYPE_Q2_K,
    CW_TYPE_Q3_K, CW_TYPE_Q4_K, CW_TYPE_Q5_K,   CW_TYPE_Q6_K,  CW_TYPE_IQ4_XS,
};

static void compare_type(struct backend *b, enum cw_qtype t)
{
    const char *name = cw_qtype_name(t);
    const struct ggml_type_traits_cpu *gt = b->traits((enum ggml_type)t);
    if (!gt || !gt->vec_dot) {
        skip("%s: %s has no vec_dot for %s", b->name, b->name, name);
        return;
    }
    ok((int)gt->vec_dot_type == cw_cpu_vec_dot_type(t), "%s: %s pairs with %s (cwen %s)",
       b->name, name, cw_qtype_name(gt->vec_dot_type),
       cw_qtype_name((uint32_t)cw_cpu_vec_dot_type(t)));
    const struct ggml_type_traits_cpu *at = b->traits(gt->vec_dot_type);
    int64_t n = 4096;
    size_t rb = cw_qtype_row_bytes(t, n), ab = cw_cpu_act_bytes(t, n);
    float *w = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    float *wd = malloc(n * sizeof(float));
    void *wq = malloc(rb), *xq = malloc(ab), *xg = malloc(ab);
    double worst = 0, worst_abs_rel = 0;
    int act_same = 1, reps = 40;
    for (int rep = 0; rep < reps; rep++) {
        fill(w, n);
        fill(x, n);
        cw_qtype_traits(t)->quant_row(w, wq, n);
        cw_qtype_traits(t)->dequant_row(wq, wd, n);
        cw_cpu_quantize_act(t, x, xq, n);
        if (at && at->from_float)
            at->from_float(x, xg, n);
        else
            memcpy(xg, x, ab);
        act_same &= !memcmp(xq, xg, ab);
        float mine = cw_cpu_vec_dot(t, n, wq, xq), theirs = 0;
        gt->vec_dot((int)n, &theirs, 0, wq, 0, xg, 0, 1);
        double mag = 0;
        for (int64_t i = 0; i < n; i++)
            mag += fabs((double)wd[i] * x[i]);
        double rel = fabs((double)mine - theirs) / mag;
        double arel = theirs != 0 ? fabs((double)mine - theirs) / fabs(theirs) : 0;
        worst = rel > worst ? rel : worst;
        worst_abs_rel = arel > worst_abs_rel ? arel : worst_abs_rel;
    }
    ok(act_same, "%s: %s activation (%s) bytes equal to ggml's from_float", b->name, name,
       cw_qtype_name(gt->vec_dot_type));
    ok(worst < BOUND, "%s: %s vec_dot vs ggml: max |diff|/Σ|wx| = %.3g (bound %g)", b->name,
       name, worst, BOUND);
    note("%-14s %-7s act %-5s |diff|/Σ|wx| max %.2e   |diff|/|dot| max %.2e", b->name, name,
         cw_qtype_name(gt->vec_dot_type), worst, worst_abs_rel);
    free(w), free(x), free(wd), free(wq), free(xq), free(xg);
}

/* ---- bandwidth ---------------------------------------------------------- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct gg_ctx {
    ggml_vec_dot_t dot;
    cw_vec_dot_fn cdot;
    const char *w;
    size_t rb;
    int64_t n_in, n_out;
    const void *xq;
    float *y;
};

static void gg_task(void *p, int ith, int nth)
{
    struct gg_ctx *c = p;
    for (int64_t o = c->n_out * ith / nth; o < c->n_out * (ith + 1) / nth; o++)
        if (c->dot)
            c->dot((int)c->n_in, &c->y[o], 0, c->w + o * c->rb, 0, c->xq, 0, 1);
        else
            c->y[o] = c->cdot(c->n_in, c->w + o * c->rb, c->xq);
}

static void bench(struct backend *b, enum cw_qtype t, int64_t n_out, double secs)
{
    const int64_t n_in = 2048;
    size_t rb = cw_qtype_row_bytes(t, n_in), bytes = rb * n_out;
    char *w = malloc(bytes);
    float *wf = malloc(n_in * sizeof(float)), *x = malloc(n_in * sizeof(float));
    float *y = malloc(n_out * sizeof(float)), *y2 = malloc(n_out * sizeof(float));
    for (int64_t o = 0; o < n_out; o++) {
        fill(wf, n_in);
        cw_qtype_traits(t)->quant_row(wf, w + o * rb, n_in);
    }
    fill(x, n_in);
    void *scratch = malloc(cw_cpu_matmul_scratch(t, n_in, 1));
    const struct ggml_type_traits_cpu *gt = b->traits((enum ggml_type)t);
    void *xg = malloc(cw_cpu_act_bytes(t, n_in));
    b->traits(gt->vec_dot_type)->from_float(x, xg, n_in);
    for (int nt = 1; nt <= 2; nt++) {
        struct cw_pool pool;
        struct cw_err err = {0};
        if (cw_pool_init(&pool, nt, &err) != 0)
            return;
        /* rounds alternate between the sides and the best round of each
         * counts: the fairest figure on a shared, noisy machine. Side 2 is
         * cwen's kernel in the same loop as ggml's (no matmul wrapper). */
        double gbs[3] = {0, 0, 0};
        void *xc = malloc(cw_cpu_act_bytes(t, n_in));
        cw_cpu_quantize_act(t, x, xc, n_in);
        for (int round = 0; round < 10; round++)
            for (int side = 0; side < 3; side++) {
                struct gg_ctx g = {gt->vec_dot, NULL, w, rb, n_in, n_out, xg, y2};
                struct gg_ctx g2 = {NULL, cw_cpu_vec_dot_fn(t, cw_cpu_isa_best()), w, rb, n_in,
                                    n_out, xc, y2};
                int iters = 0;
                double t0 = now(), t1;
                do {
                    if (side == 0)
                        cw_cpu_matmul(&pool, t, w, n_in, n_out, x, 1, y, scratch);
                    else
                        cw_pool_run(&pool, gg_task, side == 1 ? &g : &g2);
                    iters++;
                } while ((t1 = now()) - t0 < secs / 10);
                gbs[side] = fmax(gbs[side], (double)bytes * iters / (t1 - t0) / 1e9);
            }
        free(xc);
        note("bench %s %dx%d n_tok=1, %d thread%s: cwen matmul %.1f GB/s (its vec_dot loop %.1f), ggml(%s) vec_dot loop %.1f GB/s",
             cw_qtype_name(t), (int)n_in, (int)n_out, nt, nt > 1 ? "s" : "", gbs[0], gbs[2], b->name,
             gbs[1]);
        cw_pool_free(&pool);
    }
    double worst = 0, ymax = 0;
    for (int64_t o = 0; o < n_out; o++)
        ymax = fmax(ymax, fabs(y2[o]));
    for (int64_t o = 0; o < n_out; o++)
        worst = fmax(worst, fabs((double)y[o] - y2[o]) / ymax);
    ok(worst < 1e-5, "bench %s: cwen and ggml outputs agree (max rel %.2g)", cw_qtype_name(t), worst);
    free(w), free(wf), free(x), free(y), free(y2), free(scratch), free(xg);
}

int main(void)
{
    static const char *variants[] = {"sapphirerapids", "zen4",   "icelake", "cooperlake",
                                     "cascadelake",    "skylakex", "cannonlake", "alderlake",
                                     "haswell"};
    struct backend best = {0}, hsw = {0};
    int best_score = -1;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        struct backend b = {0};
        int s = open_variant(variants[i], &b);
        if (s < 0)
            continue;
        if (!strcmp(variants[i], "haswell"))
            hsw = b;
        if (s > best_score) {
            if (best.h && best.h != hsw.h)
                dlclose(best.h);
            best = b;
            best_score = s;
        } else if (b.h != hsw.h) {
            dlclose(b.h);
        }
    }
    if (!hsw.h && !best.h) {
        ok(0, "no llama.cpp CPU backend variant loads here (%s)", dlerror());
        return done();
    }
    note("cwen kernels: %s", cw_cpu_isa_name(cw_cpu_isa_best()));
    note("ggml CPU variants compared: %s%s%s", hsw.h ? "haswell" : "",
         best.h && best.h != hsw.h ? " and best " : "", best.h && best.h != hsw.h ? best.name : "");
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        if (hsw.h)
            compare_type(&hsw, types[i]);
        if (best.h && best.h != hsw.h)
            compare_type(&best, types[i]);
    }
    double secs = atof(test_env("CWEN_BENCH_SECS", "0.3"));
    /* against the variant ggml picks here (cwen runs its best level too),
     * and against its AVX2 one where that differs */
    struct backend *bb = best.h && best.h != hsw.h ? &best : &hsw;
    bench(bb, CW_TYPE_Q4_K, 8192, secs);
    bench(bb, CW_TYPE_Q6_K, 8192, secs);
    if (hsw.h && bb != &hsw) {
        bench(&hsw, CW_TYPE_Q4_K, 8192, secs);
        bench(&hsw, CW_TYPE_Q6_K, 8192, secs);
    }
    if (getenv("CWEN_BENCH_ALL")) /* the other types with a SIMD kernel */
        for (size_t i = 0; i < sizeof types / sizeof *types; i++)
            if (types[i] != CW_TYPE_Q4_K && types[i] != CW_TYPE_Q6_K &&
                cw_cpu_vec_dot_fn(types[i], CW_CPU_AVX2) != cw_cpu_vec_dot_fn(types[i], CW_CPU_SCALAR))
                bench(bb, types[i], 8192, secs);
    if (getenv("CWEN_BENCH_L2")) { /* kernel speed with the rows in cache */
        bench(bb, CW_TYPE_Q4_K, 256, secs);
        bench(bb, CW_TYPE_Q6_K, 256, secs);
    }
    return done();
}

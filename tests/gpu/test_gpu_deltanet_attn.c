/* test_gpu_deltanet_attn.c — cw_k_deltanet and cw_k_attn against the CPU
 * reference (cw_deltanet_forward, cw_attn_forward) on the same inputs, at
 * tiny widths and the real ones (35B-A3B, 27B), prompts of 1..300 tokens, a
 * decode run after a prompt with the state carried on the device, and
 * attention at depth ~5000. Also: n tokens in one call give bit-identical
 * outputs and state to n single-token calls, and a position past n_ctx
 * writes nothing. cw_k_deltanet's chunked path (long calls with scratch) at
 * the real widths: y, conv and delta state vs the CPU and vs the GPU's
 * sequential path, at and just above the threshold, a partial last chunk, a
 * second call from the first's state, correlated keys, 512 and 2048 tokens,
 * Hv/Hk = 2 and 3, and the same bits on a second run. At the 27B's widths,
 * the core writing y's Q8_K copy for ssm_out (cw_k_xq_out): y, the state
 * and that product bit-identical to the plain launches, and with y unread
 * (cw_k_xq_out's x_unread) the normed y not stored. Decode steps with
 * the state's counters (one launch a step on sm_90 at the models' dims):
 * y and the state bit-identical to the two launches, the counters zero
 * after, and the same for the 27B's Q8_K copy. CWEN_GPU_BENCH=1 adds
 * decode timings and prefill µs per token per layer, sequential vs chunked
 * (CUDA events, median).
 *
 * Bounds. Both sides compute in f32; they differ only in the order of the
 * sums (the GPU's warp trees vs the CPU's left-to-right loops) and in a few
 * correctly-rounded-vs-libm results (expf, cos/sin), so the gap is a sum of
 * independent roundings of relative size u = 2^-24. A sum of n terms
 * carries a random-walk error ~sqrt(n)·u relative to its magnitude. We
 * measure rel = max|gpu - cpu| / max|cpu| over the whole output and assert
 *   rel <= 8·u·sqrt(n_sum)
 * where n_sum counts the roundings that reach one output: deltanet d_k per
 * dot times the tokens whose state still reaches it (n_tok, the state
 * contracts: the delta rule never grows it) plus d_v of the gated norm, attention the keys plus the
 * head dim of a score. The factor 8 covers the maximum over ~1e5 elements
 * (about 4.5 standard deviations) and the two sides' errors adding (√2).
 * An indexing or formula bug gives rel ~ 1. The conv state holds raw inputs
 * and must match exactly; V is rounded to f16 from identical f32, so it must
 * match exactly; K goes through norm and rope (cos/sin may differ in the
 * last bit from libm's) and must match within one f16 ulp, rarely. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attn.h"
#include "cpu/cpu_deltanet.h"
#include "cuda/cuda_timer.h"
#include "cuda/kernels.h"
#include "gguf/quant.h"
#include "gpu_test.h"

#define U32 (1.0 / 16777216.0) /* 2^-24 */

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;

static double urand(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return ((rng_s >> 11) + 0.5) / 9007199254740992.0;
}

static float nrand(void)
{
    return (float)(sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()));
}

static float *randn(int64_t n, float mean, float sd)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = mean + sd * nrand();
    return x;
}

static void *dev(struct cw_cuda *c, size_t bytes)
{
    struct cw_err err = {0};
    void *p = NULL;
    if (cw_cuda_alloc(c, &p, bytes, &err)) {
        printf("not ok - alloc %zu: %s\n", bytes, err.msg);
        exit(1);
    }
    return p;
}

static void *up(struct cw_cuda *c, const void *h, size_t bytes)
{
    struct cw_err err = {0};
    void *p = dev(c, bytes);
    if (cw_cuda_upload(c, p, h, bytes, &err)) {
        printf("not ok - upload: %s\n", err.msg);
        exit(1);
    }
    return p;
}

static void put(struct cw_cuda *c, void *d, const void *h, size_t bytes)
{
    struct cw_err err = {0};
    if (cw_cuda_upload(c, d, h, bytes, &err)) {
        printf("not ok - upload: %s\n", err.msg);
        exit(1);
    }
}

static void get(struct cw_cuda *c, void *h, const void *d, size_t bytes)
{
    struct cw_err err = {0};
    if (cw_cuda_sync(c, &err) || cw_cuda_download(c, h, d, bytes, &err)) {
        printf("not ok - download: %s\n", err.msg);
        exit(1);
    }
}

static void poison(struct cw_cuda *c, void *d, size_t bytes)
{
    struct cw_err err = {0};
    if (cw_cuda_memset(c, d, 0xff, bytes, &err)) { /* all-ones floats are NaN */
        printf("not ok - memset: %s\n", err.msg);
        exit(1);
    }
}

/* max|a-b| / max|b|; NaN anywhere gives +inf. */
static double rel_err(const float *a, const float *b, int64_t n)
{
    double dmax = 0.0, rmax = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        const double dd = fabs((double)a[i] - (double)b[i]);
        dmax = dd > dmax ? dd : dmax;
        rmax = fabs((double)b[i]) > rmax ? fabs((double)b[i]) : rmax;
    }
    return rmax > 0.0 ? dmax / rmax : dmax;
}

/* ---- DeltaNet ------------------------------------------------------------ */

struct dn_case {
    struct cw_deltanet_dims d;
    float *conv, *dt_bias, *ssm_a, *norm; /* host weights */
    float *d_conv, *d_dt, *d_a, *d_norm;
    int64_t C, vd, ns, nd;                /* channels, Hv*dv, conv/delta state floats */
};

static void dn_setup(struct cw_cuda *c, struct dn_case *k, int hk, int hv, int dk, int dv)
{
    k->d = (struct cw_deltanet_dims){hk, hv, dk, dv, 4, 1e-6f};
    k->C = cw_deltanet_channels(&k->d);
    k->vd = (int64_t)hv * dv;
    k->ns = cw_deltanet_conv_state_floats(&k->d);
    k->nd = cw_deltanet_delta_state_floats(&k->d);
    k->conv = randn(k->C * 4, 0.0f, 0.5f);
    k->dt_bias = randn(hv, 0.0f, 1.0f);
    k->ssm_a = malloc((size_t)hv * sizeof(float));
    for (int h = 0; h < hv; h++) // -exp(A_log): decays from slow (0.05) to fast (2.7)
        k->ssm_a[h] = -expf((float)(urand() * 4.0 - 3.0));
    k->norm = randn(dv, 1.0f, 0.1f);
    k->d_conv = up(c, k->conv, (size_t)k->C * 4 * sizeof(float));
    k->d_dt = up(c, k->dt_bias, (size_t)hv * sizeof(float));
    k->d_a = up(c, k->ssm_a, (size_t)hv * sizeof(float));
    k->d_norm = up(c, k->norm, (size_t)dv * sizeof(float));
}

static void dn_free(struct cw_cuda *c, struct dn_case *k)
{
    free(k->conv), free(k->dt_bias), free(k->ssm_a), free(k->norm);
    cw_cuda_free(c, k->d_conv), cw_cuda_free(c, k->d_dt), cw_cuda_free(c, k->d_a);
    cw_cuda_free(c, k->d_norm);
}

/* d_cnt: the state's counters (one-token calls as one launch), or NULL */
static int dn_run(struct cw_cuda *c, const struct dn_case *k, float *d_cs, float *d_ds,
                  unsigned *d_cnt, int64_t n, const float *d_m, const float *d_z,
                  const float *d_b, const float *d_al, float *d_y, void *d_scr)
{
    struct cw_err err = {0};
    const struct cw_k_deltanet_dims kd = {k->d.n_k_head, k->d.n_v_head, k->d.d_k, k->d.d_v,
                                          k->d.d_conv, k->d.eps};
    const struct cw_k_deltanet_w w = {k->d_conv, k->d_dt, k->d_a, k->d_norm};
    if (cw_k_deltanet(c, &kd, &w, d_cs, d_ds, d_cnt, n, d_m, d_z, d_b, d_al, d_y, NULL, d_scr,
                      &err)) {
        printf("not ok - cw_k_deltanet: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* n_pre tokens in one call, then n_dec single-token calls, both sides; and
 * the same n_pre tokens as single calls on the GPU, compared bit for bit. */
static void dn_check(struct cw_cuda *c, struct dn_case *k, const char *name, int64_t n_pre,
                     int64_t n_dec)
{
    const int64_t n = n_pre + n_dec, hv = k->d.n_v_head;
    float *m = randn(n * k->C, 0.0f, 1.0f), *z = randn(n * k->vd, 0.0f, 1.0f);
    float *bl = randn(n * hv, 0.0f, 1.0f), *al = randn(n * hv, 0.0f, 1.0f);
    float *y = malloc((size_t)(n * k->vd) * sizeof *y), *gy = malloc((size_t)(n * k->vd) * sizeof *gy);
    float *cs = calloc((size_t)k->ns, sizeof *cs), *ds = calloc((size_t)k->nd, sizeof *ds);
    float *gcs = malloc((size_t)k->ns * sizeof *gcs), *gds = malloc((size_t)k->nd * sizeof *gds);
    float *scr = malloc((size_t)cw_deltanet_scratch_floats(&k->d) * sizeof *scr);
    struct cw_err err = {0};
    struct cw_deltanet_weights w = {k->conv, k->dt_bias, k->ssm_a, k->norm};
    struct cw_deltanet_state st = {cs, ds};
    ok(!cw_deltanet_forward(&k->d, &w, &st, n, m, z, bl, al, y, scr, &err), "cpu: %s", err.msg);

    float *d_m = up(c, m, (size_t)(n * k->C) * sizeof(float));
    float *d_z = up(c, z, (size_t)(n * k->vd) * sizeof(float));
    float *d_b = up(c, bl, (size_t)(n * hv) * sizeof(float));
    float *d_al = up(c, al, (size_t)(n * hv) * sizeof(float));
    float *d_y = dev(c, (size_t)(n * k->vd) * sizeof(float));
    float *d_cs = dev(c, (size_t)k->ns * sizeof(float)), *d_ds = dev(c, (size_t)k->nd * sizeof(float));
    struct cw_err e2 = {0};
    cw_cuda_memset(c, d_cs, 0, (size_t)k->ns * sizeof(float), &e2);
    cw_cuda_memset(c, d_ds, 0, (size_t)k->nd * sizeof(float), &e2);
    poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
    int rc = dn_run(c, k, d_cs, d_ds, NULL, n_pre, d_m, d_z, d_b, d_al, d_y, NULL);
    for (int64_t t = n_pre; t < n && !rc; t++)
        rc = dn_run(c, k, d_cs, d_ds, NULL, 1, d_m + t * k->C, d_z + t * k->vd, d_b + t * hv,
                    d_al + t * hv, d_y + t * k->vd, NULL);
    ok(!rc, "%s: launches", name);
    get(c, gy, d_y, (size_t)(n * k->vd) * sizeof(float));
    get(c, gcs, d_cs, (size_t)k->ns * sizeof(float));
    get(c, gds, d_ds, (size_t)k->nd * sizeof(float));
    const double bound = 8.0 * U32 * sqrt((double)k->d.d_k * (double)n + k->d.d_v);
    const double ey = rel_err(gy, y, n * k->vd), es = rel_err(gds, ds, k->nd);
    ok(ey <= bound, "%s: output rel err %.3g > bound %.3g", name, ey, bound);
    ok(es <= bound, "%s: delta state rel err %.3g > bound %.3g", name, es, bound);
    ok(!memcmp(gcs, cs, (size_t)k->ns * sizeof(float)), "%s: conv state differs", name);
    note("deltanet %-28s n=%lld+%lld: y rel %.2e, state rel %.2e (bound %.2e)", name,
         (long long)n_pre, (long long)n_dec, ey, es, bound);

    // The prompt as single-token calls: bit-identical outputs and state.
    if (n_pre > 1 && n_dec == 0) {
        float *gy1 = malloc((size_t)(n * k->vd) * sizeof *gy1);
        float *gcs1 = malloc((size_t)k->ns * sizeof *gcs1), *gds1 = malloc((size_t)k->nd * sizeof *gds1);
        cw_cuda_memset(c, d_cs, 0, (size_t)k->ns * sizeof(float), &e2);
        cw_cuda_memset(c, d_ds, 0, (size_t)k->nd * sizeof(float), &e2);
        poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
        rc = 0;
        for (int64_t t = 0; t < n && !rc; t++)
            rc = dn_run(c, k, d_cs, d_ds, NULL, 1, d_m + t * k->C, d_z + t * k->vd, d_b + t * hv,
                        d_al + t * hv, d_y + t * k->vd, NULL);
        get(c, gy1, d_y, (size_t)(n * k->vd) * sizeof(float));
        get(c, gcs1, d_cs, (size_t)k->ns * sizeof(float));
        get(c, gds1, d_ds, (size_t)k->nd * sizeof(float));
        ok(!rc && !memcmp(gy1, gy, (size_t)(n * k->vd) * sizeof(float)),
           "%s: %lld single calls: outputs not bit-identical to one call", name, (long long)n);
        ok(!memcmp(gds1, gds, (size_t)k->nd * sizeof(float)) &&
               !memcmp(gcs1, gcs, (size_t)k->ns * sizeof(float)),
           "%s: %lld single calls: state not bit-identical to one call", name, (long long)n);
        free(gy1), free(gcs1), free(gds1);
    }

    /* The decode steps again with the state's counters: one launch a step
     * where the dims allow (sm_90); the same bits, the counters zero again.
     * A memset between steps stands for the projection that precedes each
     * core in the forward (kernels.h: not a call on the same state). */
    if (n_dec > 0) {
        float *gy1 = malloc((size_t)(n * k->vd) * sizeof *gy1);
        float *gcs1 = malloc((size_t)k->ns * sizeof *gcs1);
        float *gds1 = malloc((size_t)k->nd * sizeof *gds1);
        const size_t nc = (size_t)k->d.n_k_head * sizeof(unsigned);
        unsigned *d_cnt = dev(c, nc), *cnt = malloc(nc), *zero = calloc(1, nc);
        void *d_gap = dev(c, 256);
        cw_cuda_memset(c, d_cnt, 0, nc, &e2);
        cw_cuda_memset(c, d_cs, 0, (size_t)k->ns * sizeof(float), &e2);
        cw_cuda_memset(c, d_ds, 0, (size_t)k->nd * sizeof(float), &e2);
        poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
        rc = dn_run(c, k, d_cs, d_ds, d_cnt, n_pre, d_m, d_z, d_b, d_al, d_y, NULL);
        for (int64_t t = n_pre; t < n && !rc; t++) {
            cw_cuda_memset(c, d_gap, (int)t, 256, &e2);
            rc = dn_run(c, k, d_cs, d_ds, d_cnt, 1, d_m + t * k->C, d_z + t * k->vd,
                        d_b + t * hv, d_al + t * hv, d_y + t * k->vd, NULL);
        }
        get(c, gy1, d_y, (size_t)(n * k->vd) * sizeof(float));
        get(c, gcs1, d_cs, (size_t)k->ns * sizeof(float));
        get(c, gds1, d_ds, (size_t)k->nd * sizeof(float));
        get(c, cnt, d_cnt, nc);
        ok(!rc && !memcmp(gy1, gy, (size_t)(n * k->vd) * sizeof(float)) &&
               !memcmp(gds1, gds, (size_t)k->nd * sizeof(float)) &&
               !memcmp(gcs1, gcs, (size_t)k->ns * sizeof(float)),
           "%s: %lld steps with the counters: y and state bit-identical", name, (long long)n_dec);
        ok(!memcmp(cnt, zero, nc), "%s: the counters are zero after the steps", name);
        const struct cw_k_deltanet_dims kd = {k->d.n_k_head, k->d.n_v_head, k->d.d_k,
                                              k->d.d_v, k->d.d_conv, k->d.eps};
        const bool one = cw_k_deltanet_one_launch(c, &kd);
        /* the models' dims take it wherever the device has clusters */
        ok(one == (cw_cuda_info(c)->major >= 9 && k->d.d_v == 128 && k->d.n_v_head % 2 == 0),
           "%s: one launch a step: %d", name, one);
        note("deltanet %-28s %lld steps with the counters: %s", name, (long long)n_dec,
             one ? "one launch a step" : "two launches a step");
        free(gy1), free(gcs1), free(gds1), free(cnt), free(zero);
        cw_cuda_free(c, d_cnt), cw_cuda_free(c, d_gap);
    }
    cw_cuda_free(c, d_m), cw_cuda_free(c, d_z), cw_cuda_free(c, d_b), cw_cuda_free(c, d_al);
    cw_cuda_free(c, d_y), cw_cuda_free(c, d_cs), cw_cuda_free(c, d_ds);
    free(m), free(z), free(bl), free(al), free(y), free(gy), free(cs), free(ds), free(gcs);
    free(gds), free(scr);
}

static struct cw_k_deltanet_dims dn_kdims(const struct dn_case *k)
{
    const struct cw_k_deltanet_dims kd = {k->d.n_k_head, k->d.n_v_head, k->d.d_k, k->d.d_v,
                                          k->d.d_conv, k->d.eps};
    return kd;
}

/* One run of n tokens from zero state (one call, token by token), y read
 * back into y, then h += W·y (cw_k_matmul_add_norm, no norm): y's Q8_K copy
 * written by the core for the product (xq; y on the device is then
 * poisoned, so that the product can only have read the copy) or quantised
 * by the product itself (NULL). */
static int dn_run_xq(struct cw_cuda *c, const struct dn_case *k, const struct cw_k_mat *W,
                     int64_t n, const float *const *in, float *d_cs, float *d_ds,
                     unsigned *d_cnt, float *d_y, float *y, const struct cw_k_xq_out *xq,
                     float *d_h, const float *h0, void *d_scr)
{
    struct cw_err e = {0};
    const struct cw_k_deltanet_dims kd = dn_kdims(k);
    const struct cw_k_deltanet_w w = {k->d_conv, k->d_dt, k->d_a, k->d_norm};
    cw_cuda_memset(c, d_cs, 0, (size_t)k->ns * sizeof(float), &e);
    cw_cuda_memset(c, d_ds, 0, (size_t)k->nd * sizeof(float), &e);
    poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
    put(c, d_h, h0, (size_t)(n * W->n_out) * sizeof(float));
    if (cw_k_deltanet(c, &kd, &w, d_cs, d_ds, d_cnt, n, in[0], in[1], in[2], in[3], d_y, xq,
                      NULL, &e)) {
        printf("not ok - deltanet: %s\n", e.msg);
        return -1;
    }
    get(c, y, d_y, (size_t)(n * k->vd) * sizeof(float));
    if (xq)
        poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
    if (cw_k_matmul_add_norm(c, W, d_y, k->vd, n, d_h, W->n_out, NULL, NULL,
                             xq ? xq->d_xq : NULL, d_scr, &e)) {
        printf("not ok - deltanet then its product: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The core writing y's Q8_K copy for the product that reads y next (the
 * 27B's ssm_out: its quantising launch saved): y, the state and that
 * product's output bit-identical to the core's plain launch followed by the
 * product quantising y itself. */
static void dn_check_xq(struct cw_cuda *c, struct dn_case *k, const char *name, int64_t n,
                        enum cw_qtype type)
{
    const int64_t hv = k->d.n_v_head, R = 96;
    const struct cw_k_deltanet_dims kd = dn_kdims(k);
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    const size_t rb = cw_qtype_row_bytes(type, k->vd);
    uint8_t *q = malloc(rb * R);
    for (int64_t r = 0; r < R; r++) {
        float *row = randn(k->vd, 0.0f, 0.05f);
        tr->quant_row(row, q + r * rb, k->vd);
        free(row);
    }
    const struct cw_k_mat W = {type, up(c, q, rb * R), rb, 0, k->vd, R};
    const size_t per = cw_k_xq_plain(c, &W, n);
    ok(per > 0 && cw_k_deltanet_xq(&kd, type), "%s %s: y quantised once, by the core", name,
       cw_qtype_name(type));
    float *m = randn(n * k->C, 0.0f, 1.0f), *z = randn(n * k->vd, 0.0f, 1.0f);
    float *bl = randn(n * hv, 0.0f, 1.0f), *al = randn(n * hv, 0.0f, 1.0f);
    float *h0 = randn(n * R, 0.0f, 1.0f);
    const float *in[4] = {up(c, m, (size_t)(n * k->C) * sizeof(float)),
                          up(c, z, (size_t)(n * k->vd) * sizeof(float)),
                          up(c, bl, (size_t)(n * hv) * sizeof(float)),
                          up(c, al, (size_t)(n * hv) * sizeof(float))};
    float *d_y = dev(c, (size_t)(n * k->vd) * sizeof(float)), *d_h = dev(c, (size_t)(n * R) * 4);
    float *d_cs = dev(c, (size_t)k->ns * sizeof(float)), *d_ds = dev(c, (size_t)k->nd * sizeof(float));
    void *d_scr = dev(c, cw_k_matmul_scratch(&W, n)), *d_xq = dev(c, per * (size_t)n);
    const struct cw_k_xq_out xo = {d_xq, type, false}, xu = {d_xq, type, true};
    /* runs: the plain launches, the core's copy, the copy with the
     * counters (one launch at one token), then those two with y unread */
    float *y[5], *h[5], *ds[5], *cs[5];
    const size_t nc = (size_t)k->d.n_k_head * sizeof(unsigned);
    unsigned *d_cnt = dev(c, nc);
    cw_cuda_memset(c, d_cnt, 0, nc, &(struct cw_err){0});
    int rc = 0;
    for (int i = 0; i < 5; i++) {
        y[i] = malloc((size_t)(n * k->vd) * sizeof(float)), h[i] = malloc((size_t)(n * R) * 4);
        ds[i] = malloc((size_t)k->nd * sizeof(float)), cs[i] = malloc((size_t)k->ns * sizeof(float));
        rc |= dn_run_xq(c, k, &W, n, in, d_cs, d_ds, i % 2 == 0 && i ? d_cnt : NULL, d_y, y[i],
                        i == 0 ? NULL : i < 3 ? &xo : &xu, d_h, h0, d_scr);
        get(c, h[i], d_h, (size_t)(n * R) * sizeof(float));
        get(c, ds[i], d_ds, (size_t)k->nd * sizeof(float));
        get(c, cs[i], d_cs, (size_t)k->ns * sizeof(float));
    }
    ok(!rc, "%s %s, %lld tokens: launches", name, cw_qtype_name(type), (long long)n);
    ok(!memcmp(y[0], y[1], (size_t)(n * k->vd) * sizeof(float)) &&
           !memcmp(ds[0], ds[1], (size_t)k->nd * sizeof(float)) &&
           !memcmp(cs[0], cs[1], (size_t)k->ns * sizeof(float)),
       "%s %s, %lld tokens: y and the state bit-identical with y's Q8_K copy", name,
       cw_qtype_name(type), (long long)n);
    ok(!memcmp(h[0], h[1], (size_t)(n * R) * sizeof(float)) &&
           memcmp(h[0], h0, (size_t)(n * R) * sizeof(float)),
       "%s %s, %lld tokens: the product on the core's copy (y poisoned) bit-identical to its own", name,
       cw_qtype_name(type), (long long)n);
    ok(!memcmp(y[0], y[2], (size_t)(n * k->vd) * sizeof(float)) &&
           !memcmp(ds[0], ds[2], (size_t)k->nd * sizeof(float)) &&
           !memcmp(cs[0], cs[2], (size_t)k->ns * sizeof(float)) &&
           !memcmp(h[0], h[2], (size_t)(n * R) * sizeof(float)),
       "%s %s, %lld tokens, with the counters: y, the state and the product bit-identical", name,
       cw_qtype_name(type), (long long)n);
    /* y unread: the product and the state the same, the normed y never
     * stored (the one launch leaves y as poisoned as it was) */
    const size_t yb = (size_t)(n * k->vd) * sizeof(float);
    bool y_left = true, poisoned = true;
    for (int i = 3; i < 5; i++)
        y_left &= memcmp(y[0], y[i], yb) != 0 && !memcmp(ds[0], ds[i], (size_t)k->nd * sizeof(float)) &&
                  !memcmp(cs[0], cs[i], (size_t)k->ns * sizeof(float)) &&
                  !memcmp(h[0], h[i], (size_t)(n * R) * sizeof(float));
    for (size_t b = 0; b < yb; b++)
        poisoned &= ((const uint8_t *)y[4])[b] == 0xff;
    ok(y_left && (n > 1 || !cw_k_deltanet_one_launch(c, &kd) || poisoned),
       "%s %s, %lld tokens, y unread: y not stored, the state and the product bit-identical",
       name, cw_qtype_name(type), (long long)n);
    struct cw_err e = {0};
    const struct cw_k_xq_out bad = {d_xq, CW_TYPE_Q8_0, false};
    const struct cw_k_deltanet_w w = {k->d_conv, k->d_dt, k->d_a, k->d_norm};
    ok(cw_k_deltanet(c, &kd, &w, d_cs, d_ds, d_cnt, 1, in[0], in[1], in[2], in[3], d_y, &bad,
                     NULL, &e) != 0 &&
           strstr(e.msg, "Q8_K copy"),
       "%s: a copy for q8_0 refused (%s)", name, e.msg);
    for (int i = 0; i < 5; i++)
        free(y[i]), free(h[i]), free(ds[i]), free(cs[i]);
    cw_cuda_free(c, d_cnt);
    for (int i = 0; i < 4; i++)
        cw_cuda_free(c, (void *)in[i]);
    cw_cuda_free(c, d_y), cw_cuda_free(c, d_h), cw_cuda_free(c, d_cs), cw_cuda_free(c, d_ds);
    cw_cuda_free(c, d_scr), cw_cuda_free(c, d_xq), cw_cuda_free(c, (void *)W.d_w);
    free(q), free(m), free(z), free(bl), free(al), free(h0);
}

/* The shortest call that takes the chunked path (0: none up to 4096). */
static int64_t dn_chunk_min(const struct dn_case *k)
{
    const struct cw_k_deltanet_dims kd = dn_kdims(k);
    for (int64_t n = 1; n <= 4096; n++)
        if (cw_k_deltanet_scratch(&kd, n) > 0)
            return n;
    return 0;
}

/* One run on the GPU from zero state: n1 tokens, then n2 more from the
 * state the first call left (n2 may be 0), with scratch d_scr or NULL. */
static int dn_run2(struct cw_cuda *c, const struct dn_case *k, float *d_cs, float *d_ds,
                   int64_t n1, int64_t n2, const float *d_m, const float *d_z, const float *d_b,
                   const float *d_al, float *d_y, void *d_scr, float *y, float *cs, float *ds)
{
    struct cw_err e = {0};
    const int64_t n = n1 + n2, hv = k->d.n_v_head;
    cw_cuda_memset(c, d_cs, 0, (size_t)k->ns * sizeof(float), &e);
    cw_cuda_memset(c, d_ds, 0, (size_t)k->nd * sizeof(float), &e);
    poison(c, d_y, (size_t)(n * k->vd) * sizeof(float));
    int rc = dn_run(c, k, d_cs, d_ds, NULL, n1, d_m, d_z, d_b, d_al, d_y, d_scr);
    if (!rc && n2 > 0)
        rc = dn_run(c, k, d_cs, d_ds, NULL, n2, d_m + n1 * k->C, d_z + n1 * k->vd, d_b + n1 * hv,
                    d_al + n1 * hv, d_y + n1 * k->vd, d_scr);
    get(c, y, d_y, (size_t)(n * k->vd) * sizeof(float));
    get(c, cs, d_cs, (size_t)k->ns * sizeof(float));
    get(c, ds, d_ds, (size_t)k->nd * sizeof(float));
    return rc;
}

/* The chunked path (n1 tokens, then n2 from the state left) against the CPU
 * reference and the GPU's sequential path on the same inputs, and against
 * itself run again (bit for bit). corr: m drawn around a common mean, so the
 * keys of a head point alike (k_t·k_s near 1: the intra-chunk triangular
 * system far from the identity, the case where the UT form could lose
 * accuracy). Bound (k_deltanet.cu's header): 8·u·sqrt(dk·n + dv + 64·(64 + dk)). */
static void dn_check_chunked(struct cw_cuda *c, struct dn_case *k, const char *name, int64_t n1,
                             int64_t n2, int corr)
{
    const int64_t n = n1 + n2, hv = k->d.n_v_head;
    const struct cw_k_deltanet_dims kd = dn_kdims(k);
    const size_t sb = cw_k_deltanet_scratch(&kd, n1 > n2 ? n1 : n2);
    ok(sb > 0 && cw_k_deltanet_scratch(&kd, n1) > 0, "%s: n=%lld takes no chunked path", name,
       (long long)n1);
    if (!sb)
        return;
    float *m = randn(n * k->C, corr ? 1.0f : 0.0f, corr ? 0.25f : 1.0f);
    float *z = randn(n * k->vd, 0.0f, 1.0f), *bl = randn(n * hv, 0.0f, 1.0f);
    float *al = randn(n * hv, 0.0f, 1.0f);
    const size_t yb = (size_t)(n * k->vd) * sizeof(float), cb = (size_t)k->ns * sizeof(float);
    const size_t db = (size_t)k->nd * sizeof(float);
    float *y = malloc(yb), *cs = calloc((size_t)k->ns, sizeof *cs), *ds = calloc((size_t)k->nd, sizeof *ds);
    float *scr = malloc((size_t)cw_deltanet_scratch_floats(&k->d) * sizeof *scr);
    struct cw_err err = {0};
    struct cw_deltanet_weights w = {k->conv, k->dt_bias, k->ssm_a, k->norm};
    struct cw_deltanet_state st = {cs, ds};
    ok(!cw_deltanet_forward(&k->d, &w, &st, n, m, z, bl, al, y, scr, &err), "cpu: %s", err.msg);

    float *d_m = up(c, m, (size_t)(n * k->C) * sizeof(float)), *d_z = up(c, z, yb);
    float *d_b = up(c, bl, (size_t)(n * hv) * sizeof(float));
    float *d_al = up(c, al, (size_t)(n * hv) * sizeof(float));
    float *d_y = dev(c, yb), *d_cs = dev(c, cb), *d_ds = dev(c, db);
    void *d_scr = dev(c, sb);
    float *gy[3], *gcs[3], *gds[3]; /* chunked, chunked again, sequential */
    int rc = 0;
    for (int r = 0; r < 3; r++) {
        gy[r] = malloc(yb), gcs[r] = malloc(cb), gds[r] = malloc(db);
        rc |= dn_run2(c, k, d_cs, d_ds, n1, n2, d_m, d_z, d_b, d_al, d_y, r < 2 ? d_scr : NULL,
                      gy[r], gcs[r], gds[r]);
    }
    ok(!rc, "%s: launches", name);
    const double bound = 8.0 * U32 * sqrt((double)k->d.d_k * (double)n + k->d.d_v + 64.0 * (64.0 + k->d.d_k));
    const double ey = rel_err(gy[0], y, n * k->vd), es = rel_err(gds[0], ds, k->nd);
    const double qy = rel_err(gy[0], gy[2], n * k->vd), qs = rel_err(gds[0], gds[2], k->nd);
    const double sy = rel_err(gy[2], y, n * k->vd), ss = rel_err(gds[2], ds, k->nd);
    ok(ey <= bound, "%s chunked: output rel err %.3g > bound %.3g", name, ey, bound);
    ok(es <= bound, "%s chunked: delta state rel err %.3g > bound %.3g", name, es, bound);
    ok(!memcmp(gcs[0], cs, cb), "%s chunked: conv state differs", name);
    ok(qy <= bound && qs <= bound, "%s chunked vs sequential GPU: y %.3g, state %.3g > %.3g", name,
       qy, qs, bound);
    ok(!memcmp(gy[0], gy[1], yb) && !memcmp(gds[0], gds[1], db) && !memcmp(gcs[0], gcs[1], cb),
       "%s chunked: two runs differ", name);
    note("deltanet chunked %-26s n=%lld+%lld%s: y rel %.2e state %.2e | vs seq GPU %.2e %.2e | "
         "seq vs CPU %.2e %.2e (bound %.2e)",
         name, (long long)n1, (long long)n2, corr ? " corr" : "", ey, es, qy, qs, sy, ss, bound);
    for (int r = 0; r < 3; r++)
        free(gy[r]), free(gcs[r]), free(gds[r]);
    cw_cuda_free(c, d_m), cw_cuda_free(c, d_z), cw_cuda_free(c, d_b), cw_cuda_free(c, d_al);
    cw_cuda_free(c, d_y), cw_cuda_free(c, d_cs), cw_cuda_free(c, d_ds), cw_cuda_free(c, d_scr);
    free(m), free(z), free(bl), free(al), free(y), free(cs), free(ds), free(scr);
}

/* ---- attention ----------------------------------------------------------- */

struct at_case {
    struct cw_attn_dims d;
    struct cw_k_attn_dims kd;
    int64_t n_ctx, row; /* cache rows, halves per row */
    float *qn, *kn, *d_qn, *d_kn;
    cw_f16 *kc, *vc;    /* CPU cache */
    cw_f16 *d_kc, *d_vc;/* GPU cache: n_ctx + 1 rows, the last a guard */
    int64_t *d_pos;
    void *d_scr;
    size_t scr_bytes;
    int64_t scr_tok;
};

static void at_setup(struct cw_cuda *c, struct at_case *k, int H, int Hkv, int hd, int n_rot,
                     const int sec[4], int64_t n_ctx, int64_t hist, int64_t max_tok)
{
    memset(k, 0, sizeof *k);
    k->d.n_head = H;
    k->d.n_head_kv = Hkv;
    k->d.head_dim = hd;
    k->d.eps = 1e-6f;
    k->d.rope.n_rot = n_rot;
    k->d.rope.freq_base = 1e7f;
    memcpy(k->d.rope.sections, sec, sizeof k->d.rope.sections);
    k->kd = (struct cw_k_attn_dims){H, Hkv, hd, 1e-6f, n_rot, 1e7f, {sec[0], sec[1], sec[2], sec[3]}};
    k->n_ctx = n_ctx;
    k->row = (int64_t)Hkv * hd;
    k->qn = randn(hd, 1.0f, 0.2f);
    k->kn = randn(hd, 1.0f, 0.2f);
    k->d_qn = up(c, k->qn, (size_t)hd * sizeof(float));
    k->d_kn = up(c, k->kn, (size_t)hd * sizeof(float));
    const size_t cb = (size_t)(n_ctx + 1) * k->row * sizeof(cw_f16);
    k->kc = malloc(cb);
    k->vc = malloc(cb);
    memset(k->kc, 0xff, cb);
    memset(k->vc, 0xff, cb);
    // History rows 0..hist-1 as a model would leave them: K normed (unit
    // RMS), V ~ N(0,1), both f16.
    for (int64_t i = 0; i < hist * k->row; i++) {
        k->kc[i] = cw_f32_to_f16(nrand());
        k->vc[i] = cw_f32_to_f16(nrand());
    }
    k->d_kc = up(c, k->kc, cb);
    k->d_vc = up(c, k->vc, cb);
    k->d_pos = dev(c, sizeof(int64_t));
    k->scr_tok = max_tok;
    k->scr_bytes = cw_k_attn_scratch(&k->kd, max_tok, n_ctx);
    k->d_scr = dev(c, k->scr_bytes);
}

static void at_free(struct cw_cuda *c, struct at_case *k)
{
    free(k->qn), free(k->kn), free(k->kc), free(k->vc);
    cw_cuda_free(c, k->d_qn), cw_cuda_free(c, k->d_kn), cw_cuda_free(c, k->d_kc);
    cw_cuda_free(c, k->d_vc), cw_cuda_free(c, k->d_pos), cw_cuda_free(c, k->d_scr);
}

static int at_run(struct cw_cuda *c, struct at_case *k, int64_t pos0, int64_t n,
                  const float *d_P, const float *d_k, const float *d_v, float *d_out)
{
    struct cw_err err = {0};
    if (n > k->scr_tok) {
        printf("not ok - scratch sized for %lld tokens\n", (long long)k->scr_tok);
        return -1;
    }
    put(c, k->d_pos, &pos0, sizeof pos0);
    if (cw_k_attn(c, &k->kd, k->d_qn, k->d_kn, k->d_kc, k->d_vc, k->n_ctx, k->d_pos, n, d_P, d_k,
                  d_v, d_out, k->d_scr, &err)) {
        printf("not ok - cw_k_attn: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* f16 ulps between two finite halves of the same sign (else a large number). */
static int f16_ulps(cw_f16 a, cw_f16 b)
{
    if ((a ^ b) & 0x8000)
        return (a & 0x7fff) == 0 && (b & 0x7fff) == 0 ? 0 : 1 << 20;
    return abs((int)(a & 0x7fff) - (int)(b & 0x7fff));
}

/* n_pre tokens at pos0 in one call, then n_dec single calls, on both
 * sides; then the same pre tokens as single GPU calls, bit for bit. */
static void at_check(struct cw_cuda *c, struct at_case *k, const char *name, int64_t pos0,
                     int64_t n_pre, int64_t n_dec)
{
    const int64_t n = n_pre + n_dec, H = k->d.n_head, hd = k->d.head_dim;
    const int64_t qn = H * hd, pn = 2 * qn;
    float *P = randn(n * pn, 0.0f, 1.0f), *kk = randn(n * k->row, 0.0f, 1.0f);
    float *vv = randn(n * k->row, 0.0f, 1.0f);
    float *out = malloc((size_t)(n * qn) * sizeof *out), *gout = malloc((size_t)(n * qn) * sizeof *gout);
    float *ref2 = malloc((size_t)(n * qn) * sizeof *ref2);
    float *scr = malloc((size_t)cw_attn_scratch_floats(&k->d, k->n_ctx) * sizeof *scr);
    struct cw_err err = {0};
    struct cw_attn_weights w = {k->qn, k->kn};
    // The CPU works on a copy of the initial cache; the GPU on its own.
    const size_t cb = (size_t)(k->n_ctx + 1) * k->row * sizeof(cw_f16);
    cw_f16 *kc = malloc(cb), *vc = malloc(cb), *gkc = malloc(cb), *gvc = malloc(cb);
    memcpy(kc, k->kc, cb);
    memcpy(vc, k->vc, cb);
    struct cw_kv_cache kv = {kc, vc, k->n_ctx};
    int rc = cw_attn_forward(&k->d, &w, &kv, pos0, n_pre, P, kk, vv, out, scr, &err);
    for (int64_t t = n_pre; t < n && !rc; t++)
        rc = cw_attn_forward(&k->d, &w, &kv, pos0 + t, 1, P + t * pn, kk + t * k->row,
                             vv + t * k->row, out + t * qn, scr, &err);
    ok(!rc, "cpu attn: %s", err.msg);

    put(c, k->d_kc, k->kc, cb);
    put(c, k->d_vc, k->vc, cb);
    float *d_P = up(c, P, (size_t)(n * pn) * sizeof(float));
    float *d_k = up(c, kk, (size_t)(n * k->row) * sizeof(float));
    float *d_v = up(c, vv, (size_t)(n * k->row) * sizeof(float));
    float *d_out = dev(c, (size_t)(n * qn) * sizeof(float));
    poison(c, d_out, (size_t)(n * qn) * sizeof(float));
    rc = at_run(c, k, pos0, n_pre, d_P, d_k, d_v, d_out);
    for (int64_t t = n_pre; t < n && !rc; t++)
        rc = at_run(c, k, pos0 + t, 1, d_P + t * pn, d_k + t * k->row, d_v + t * k->row,
                    d_out + t * qn);
    ok(!rc, "%s: launches", name);
    get(c, gout, d_out, (size_t)(n * qn) * sizeof(float));
    get(c, gkc, k->d_kc, cb);
    get(c, gvc, k->d_vc, cb);

    // Cache rows written: V exact, K within one f16 ulp and rarely off.
    const int64_t r0 = pos0 * k->row, nr = n * k->row;
    int64_t k_off = 0;
    int k_max = 0;
    for (int64_t i = r0; i < r0 + nr; i++) {
        const int u = f16_ulps(gkc[i], kc[i]);
        k_off += u != 0;
        k_max = u > k_max ? u : k_max;
    }
    ok(!memcmp(gvc + r0, vc + r0, (size_t)nr * sizeof(cw_f16)), "%s: V cache differs", name);
    ok(k_max <= 1 && k_off * 1000 <= nr, "%s: K cache: %lld of %lld off, max %d ulp", name,
       (long long)k_off, (long long)nr, k_max);
    ok(!memcmp(gkc, kc, (size_t)r0 * sizeof(cw_f16)), "%s: history rows changed", name);

    // Reference on the GPU's cache: the CPU steps with the K the GPU stored,
    // so the comparison isolates the attention arithmetic.
    struct cw_kv_cache gkv = {gkc, gvc, k->n_ctx};
    float *q = scr, *gate = q + qn, *sc = gate + qn;
    for (int64_t t = 0; t < n; t++) {
        cw_attn_split_q(&k->d, k->qn, P + t * pn, q, gate);
        cw_attn_rope(&k->d, q, (int)H, pos0 + t);
        cw_attn_core(&k->d, &gkv, pos0 + t, q, ref2 + t * qn, sc);
        cw_attn_gate(ref2 + t * qn, gate, qn);
    }
    const double bound = 8.0 * U32 * sqrt((double)(pos0 + n + hd));
    const double e2 = rel_err(gout, ref2, n * qn), e1 = rel_err(gout, out, n * qn);
    ok(e2 <= bound, "%s: output rel err %.3g > bound %.3g (on the GPU's cache)", name, e2, bound);
    if (k_off == 0)
        ok(e1 <= bound, "%s: output rel err %.3g > bound %.3g (CPU forward)", name, e1, bound);
    note("attn %-32s pos0=%lld n=%lld+%lld: rel %.2e (CPU forward %.2e), bound %.2e, K off %lld",
         name, (long long)pos0, (long long)n_pre, (long long)n_dec, e2, e1, bound,
         (long long)k_off);

    if (n_pre > 1 && n_dec == 0 && n_pre <= k->scr_tok) {
        float *g1 = malloc((size_t)(n * qn) * sizeof *g1);
        cw_f16 *k1 = malloc(cb);
        put(c, k->d_kc, k->kc, cb);
        put(c, k->d_vc, k->vc, cb);
        poison(c, d_out, (size_t)(n * qn) * sizeof(float));
        rc = 0;
        for (int64_t t = 0; t < n && !rc; t++)
            rc = at_run(c, k, pos0 + t, 1, d_P + t * pn, d_k + t * k->row, d_v + t * k->row,
                        d_out + t * qn);
        get(c, g1, d_out, (size_t)(n * qn) * sizeof(float));
        get(c, k1, k->d_kc, cb);
        ok(!rc && !memcmp(g1, gout, (size_t)(n * qn) * sizeof(float)),
           "%s: single calls: outputs not bit-identical to one call", name);
        ok(!memcmp(k1, gkc, cb), "%s: single calls: K cache not bit-identical", name);
        free(g1), free(k1);
    }
    cw_cuda_free(c, d_P), cw_cuda_free(c, d_k), cw_cuda_free(c, d_v), cw_cuda_free(c, d_out);
    free(P), free(kk), free(vv), free(out), free(gout), free(ref2), free(scr);
    free(kc), free(vc), free(gkc), free(gvc);
}

/* A position past n_ctx: the flag in scratch is set and nothing is written. */
static void at_check_bounds(struct cw_cuda *c, struct at_case *k)
{
    const int64_t qn = (int64_t)k->d.n_head * k->d.head_dim;
    float *P = randn(2 * 2 * qn, 0.0f, 1.0f), *kk = randn(2 * k->row, 0.0f, 1.0f);
    float *d_P = up(c, P, (size_t)(4 * qn) * sizeof(float));
    float *d_k = up(c, kk, (size_t)(2 * k->row) * sizeof(float));
    float *d_out = dev(c, (size_t)(2 * qn) * sizeof(float));
    poison(c, d_out, (size_t)(2 * qn) * sizeof(float));
    struct cw_err me = {0};
    const size_t rows = (size_t)k->n_ctx * k->row * sizeof(cw_f16);
    cw_cuda_memset(c, k->d_kc, 0, rows, &me); // a finite history for the last position
    cw_cuda_memset(c, k->d_vc, 0, rows, &me);
    poison(c, k->d_kc + k->n_ctx * k->row, (size_t)k->row * sizeof(cw_f16));
    int rc = at_run(c, k, k->n_ctx - 1, 2, d_P, d_k, d_k, d_out);
    int flag = 0;
    float *o = malloc((size_t)(2 * qn) * sizeof *o);
    cw_f16 *guard = malloc((size_t)k->row * sizeof *guard);
    get(c, &flag, k->d_scr, sizeof flag);
    get(c, o, d_out, (size_t)(2 * qn) * sizeof(float));
    get(c, guard, k->d_kc + k->n_ctx * k->row, (size_t)k->row * sizeof(cw_f16));
    int guard_ok = 1, last_ok = 1, second_nan = 1;
    for (int64_t i = 0; i < k->row; i++)
        guard_ok &= guard[i] == 0xffff;
    for (int64_t i = 0; i < qn; i++) {
        last_ok &= isfinite(o[i]);
        second_nan &= isnan(o[qn + i]);
    }
    ok(!rc && flag == 1, "bounds: flag %d after a position past n_ctx", flag);
    ok(guard_ok && second_nan, "bounds: a position past n_ctx wrote something");
    ok(last_ok, "bounds: the last valid position was not computed");
    // One token a call: past n_ctx (the flag, nothing written), then the last.
    for (int j = 0; j < 2; j++) {
        poison(c, d_out, (size_t)qn * sizeof(float));
        rc = at_run(c, k, k->n_ctx - j, 1, d_P, d_k, d_k, d_out);
        get(c, &flag, k->d_scr, sizeof flag);
        get(c, o, d_out, (size_t)qn * sizeof(float));
        get(c, guard, k->d_kc + k->n_ctx * k->row, (size_t)k->row * sizeof(cw_f16));
        int all_nan = 1, all_fin = 1;
        guard_ok = 1;
        for (int64_t i = 0; i < k->row; i++)
            guard_ok &= guard[i] == 0xffff;
        for (int64_t i = 0; i < qn; i++) {
            all_nan &= isnan(o[i]);
            all_fin &= isfinite(o[i]);
        }
        ok(!rc && flag == (j == 0) && guard_ok && (j == 0 ? all_nan : all_fin),
           "bounds: one token at n_ctx - %d: flag %d, guard %d, output %s", j, flag, guard_ok,
           all_nan ? "untouched" : all_fin ? "finite" : "mixed");
    }
    cw_cuda_free(c, d_P), cw_cuda_free(c, d_k), cw_cuda_free(c, d_out);
    free(P), free(kk), free(o), free(guard);
}

/* ---- timing mode ----------------------------------------------------------- */

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median µs per call over 25 batches of 20 back-to-back calls. */
#define BENCH(c, tm, call, us_out)                                                   \
    do {                                                                             \
        double t_[25], e_ = 0;                                                       \
        struct cw_err be_ = {0};                                                     \
        for (int w_ = 0; w_ < 5; w_++)                                               \
            (void)(call);                                                            \
        for (int r_ = 0; r_ < 25; r_++) {                                            \
            cw_cuda_timer_start(tm, &be_);                                           \
            for (int i_ = 0; i_ < 20; i_++)                                          \
                (void)(call);                                                        \
            cw_cuda_timer_stop(tm, &e_, &be_);                                       \
            t_[r_] = e_ / 20.0;                                                      \
        }                                                                            \
        qsort(t_, 25, sizeof *t_, cmp_d);                                            \
        (us_out) = t_[12];                                                           \
    } while (0)

static void bench(struct cw_cuda *c)
{
    struct cw_err err = {0};
    struct cw_cuda_timer *tm = NULL;
    if (cw_cuda_timer_open(c, &tm, &err)) {
        printf("not ok - timer: %s\n", err.msg);
        return;
    }
    double peak = 0;
    cw_cuda_copy_bandwidth(c, (size_t)256 << 20, &peak, &err);
    note("bench: device copy bandwidth %.0f GB/s (read + write)", peak);
    const int hvs[2] = {32, 48};
    for (int i = 0; i < 2; i++) {
        struct dn_case k;
        dn_setup(c, &k, 16, hvs[i], 128, 128);
        const int64_t nt = 512;
        float *d_m = dev(c, (size_t)(nt * k.C) * 4), *d_z = dev(c, (size_t)(nt * k.vd) * 4);
        float *d_b = dev(c, (size_t)nt * hvs[i] * 4), *d_y = dev(c, (size_t)(nt * k.vd) * 4);
        float *d_cs = dev(c, (size_t)k.ns * 4), *d_ds = dev(c, (size_t)k.nd * 4);
        cw_cuda_memset(c, d_m, 0, (size_t)(nt * k.C) * 4, &err);
        cw_cuda_memset(c, d_z, 0, (size_t)(nt * k.vd) * 4, &err);
        cw_cuda_memset(c, d_b, 0, (size_t)nt * hvs[i] * 4, &err);
        cw_cuda_memset(c, d_cs, 0, (size_t)k.ns * 4, &err);
        cw_cuda_memset(c, d_ds, 0, (size_t)k.nd * 4, &err);
        double us = 0, us_p = 0;
        BENCH(c, tm, dn_run(c, &k, d_cs, d_ds, NULL, 1, d_m, d_z, d_b, d_b, d_y, NULL), us);
        const double bytes = 2.0 * (k.nd + k.ns) * 4 + (k.C + 2.0 * k.vd + 2.0 * hvs[i]) * 4;
        note("bench: deltanet decode Hv=%d: %.2f us/call, %.0f GB/s (%.1f MB state r+w)", hvs[i],
             us, bytes / us * 1e-3, 2.0 * (k.nd + k.ns) * 4 / 1e6);
        BENCH(c, tm, dn_run(c, &k, d_cs, d_ds, NULL, nt, d_m, d_z, d_b, d_b, d_y, NULL), us_p);
        note("bench: deltanet prefill Hv=%d n=%lld: %.1f us/call, %.3f us/token", hvs[i],
             (long long)nt, us_p, us_p / nt);
        cw_cuda_free(c, d_m), cw_cuda_free(c, d_z), cw_cuda_free(c, d_b), cw_cuda_free(c, d_y);
        // Prefill per token per layer, sequential vs chunked, on random
        // inputs (the decay and key geometry of the test).
        const int64_t nts[7] = {16, 32, 48, 64, 128, 512, 2048};
        const struct cw_k_deltanet_dims kd = dn_kdims(&k);
        void *d_scr = dev(c, cw_k_deltanet_scratch(&kd, 2048));
        float *hm = randn(2048 * k.C, 0.0f, 1.0f), *hz = randn(2048 * k.vd, 0.0f, 1.0f);
        float *hb = randn(2048 * hvs[i], 0.0f, 1.0f);
        d_m = up(c, hm, (size_t)(2048 * k.C) * 4), d_z = up(c, hz, (size_t)(2048 * k.vd) * 4);
        d_b = up(c, hb, (size_t)2048 * hvs[i] * 4), d_y = dev(c, (size_t)(2048 * k.vd) * 4);
        for (int j = 0; j < 7; j++) {
            const int64_t n = nts[j];
            double us_s = 0, us_c = 0;
            cw_cuda_memset(c, d_ds, 0, (size_t)k.nd * 4, &err);
            BENCH(c, tm, dn_run(c, &k, d_cs, d_ds, NULL, n, d_m, d_z, d_b, d_b, d_y, NULL), us_s);
            cw_cuda_memset(c, d_ds, 0, (size_t)k.nd * 4, &err);
            if (cw_k_deltanet_scratch(&kd, n) > 0)
                BENCH(c, tm, dn_run(c, &k, d_cs, d_ds, NULL, n, d_m, d_z, d_b, d_b, d_y, d_scr),
                      us_c);
            note("bench: deltanet prefill Hv=%d n=%4lld: sequential %8.1f us = %.3f us/tok/layer,"
                 " chunked %8.1f us = %.3f us/tok/layer", hvs[i], (long long)n, us_s, us_s / n,
                 us_c, us_c / n);
        }
        free(hm), free(hz), free(hb), cw_cuda_free(c, d_scr);
        cw_cuda_free(c, d_m), cw_cuda_free(c, d_z), cw_cuda_free(c, d_b), cw_cuda_free(c, d_y);
        cw_cuda_free(c, d_cs), cw_cuda_free(c, d_ds);
        dn_free(c, &k);
    }
    const int sec[4] = {11, 11, 10, 0};
    const int Hs[2] = {16, 24}, Hkvs[2] = {2, 4};
    for (int i = 0; i < 2; i++) {
        struct at_case k;
        const int64_t n_ctx = 32768, nt = 512;
        at_setup(c, &k, Hs[i], Hkvs[i], 256, 64, sec, n_ctx, 16384 + nt, nt);
        const int64_t qn = (int64_t)Hs[i] * 256;
        float *d_P = dev(c, (size_t)(nt * 2 * qn) * 4), *d_kv = dev(c, (size_t)(nt * k.row) * 4);
        float *d_out = dev(c, (size_t)(nt * qn) * 4);
        cw_cuda_memset(c, d_P, 0, (size_t)(nt * 2 * qn) * 4, &err);
        cw_cuda_memset(c, d_kv, 0, (size_t)(nt * k.row) * 4, &err);
        const int64_t depths[3] = {0, 4096, 16384};
        for (int j = 0; j < 3; j++) {
            double us = 0;
            const int64_t p = depths[j];
            put(c, k.d_pos, &p, sizeof p);
            struct cw_err ae = {0};
            BENCH(c, tm,
                  cw_k_attn(c, &k.kd, k.d_qn, k.d_kn, k.d_kc, k.d_vc, n_ctx, k.d_pos, 1, d_P, d_kv,
                            d_kv, d_out, k.d_scr, &ae),
                  us);
            const double bytes = (double)(p + 1) * k.row * 2 * 2;
            note("bench: attn decode H=%d Hkv=%d depth %5lld: %.2f us/call, %.0f GB/s (KV %.1f MB)",
                 Hs[i], Hkvs[i], (long long)p, us, bytes / us * 1e-3, bytes / 1e6);
        }
        double us = 0;
        const int64_t p0 = 0;
        put(c, k.d_pos, &p0, sizeof p0);
        struct cw_err ae = {0};
        BENCH(c, tm,
              cw_k_attn(c, &k.kd, k.d_qn, k.d_kn, k.d_kc, k.d_vc, n_ctx, k.d_pos, nt, d_P, d_kv,
                        d_kv, d_out, k.d_scr, &ae),
              us);
        note("bench: attn prefill H=%d n=%lld at 0: %.1f us/call", Hs[i], (long long)nt, us);
        cw_cuda_free(c, d_P), cw_cuda_free(c, d_kv), cw_cuda_free(c, d_out);
        at_free(c, &k);
    }
    cw_cuda_timer_close(tm);
}

int main(void)
{
    struct cw_cuda *c = gpu_test_open();

    struct {
        const char *name;
        int hk, hv, dk, dv;
    } dns[3] = {{"tiny (2,4,16,40)", 2, 4, 16, 40},
                {"35B-A3B (16,32,128,128)", 16, 32, 128, 128},
                {"27B (16,48,128,128)", 16, 48, 128, 128}};
    const int64_t ns[5] = {1, 2, 7, 64, 300};
    for (int i = 0; i < 3; i++) {
        struct dn_case k;
        dn_setup(c, &k, dns[i].hk, dns[i].hv, dns[i].dk, dns[i].dv);
        for (int j = 0; j < 5; j++)
            if (i < 2 || ns[j] == 7)
                dn_check(c, &k, dns[i].name, ns[j], 0);
        dn_check(c, &k, dns[i].name, 100, 64); // decode after a prompt, state on the device
        const int64_t nmin = dn_chunk_min(&k);
        if (i == 0)
            ok(nmin == 0, "tiny dims take the chunked path from n=%lld", (long long)nmin);
        if (i == 1) {
            ok(nmin >= 2, "chunked threshold %lld", (long long)nmin);
            note("deltanet: chunked path from n_tok = %lld", (long long)nmin);
            dn_check_chunked(c, &k, dns[i].name, nmin, 0, 0);       // at the threshold
            dn_check_chunked(c, &k, dns[i].name, nmin + 1, 0, 0);   // just above
            dn_check_chunked(c, &k, dns[i].name, 100, 0, 0);        // a partial last chunk
            dn_check_chunked(c, &k, dns[i].name, 200, 77, 0);       // from a non-zero state
            dn_check_chunked(c, &k, dns[i].name, 130, 5, 0);        // then a sequential call
            dn_check_chunked(c, &k, dns[i].name, 300, 0, 1);        // correlated keys
            dn_check_chunked(c, &k, dns[i].name, 512, 0, 0);
            dn_check_chunked(c, &k, dns[i].name, 2048, 0, 0);
        }
        if (i == 2) {
            dn_check_chunked(c, &k, dns[i].name, 100, 0, 0); // Hv/Hk = 3
            dn_check_xq(c, &k, dns[i].name, 1, CW_TYPE_Q4_K);
            dn_check_xq(c, &k, dns[i].name, 3, CW_TYPE_Q4_K);
            dn_check_xq(c, &k, dns[i].name, 1, CW_TYPE_Q6_K);
            dn_check_xq(c, &k, dns[i].name, 2, CW_TYPE_Q5_K);
        }
        dn_free(c, &k);
    }

    const int sec_tiny[4] = {3, 3, 2, 0}, sec[4] = {11, 11, 10, 0};
    {
        struct at_case k;
        at_setup(c, &k, 4, 2, 32, 16, sec_tiny, 512, 0, 300);
        for (int j = 0; j < 5; j++)
            at_check(c, &k, "tiny (4,2,32)", 0, ns[j], 0);
        at_check(c, &k, "tiny (4,2,32) decode", 0, 100, 64);
        at_check_bounds(c, &k);
        at_free(c, &k);
    }
    {
        struct at_case k;
        at_setup(c, &k, 16, 2, 256, 64, sec, 8192, 5000, 300);
        for (int j = 0; j < 5; j++)
            at_check(c, &k, "35B-A3B (16,2,256)", 0, ns[j], 0);
        at_check(c, &k, "35B-A3B decode", 0, 100, 64);
        at_check(c, &k, "35B-A3B depth", 5000, 1, 0);
        at_check(c, &k, "35B-A3B depth", 5000, 3, 0);
        at_check(c, &k, "35B-A3B depth", 5000, 7, 0);
        at_check(c, &k, "35B-A3B depth decode", 5000, 64, 16);
        at_free(c, &k);
    }
    {
        struct at_case k;
        at_setup(c, &k, 24, 4, 256, 64, sec, 8192, 5000, 64);
        at_check(c, &k, "27B (24,4,256)", 0, 7, 0);
        at_check(c, &k, "27B depth", 5000, 7, 0);
        at_check(c, &k, "27B depth decode", 5000, 2, 8);
        at_free(c, &k);
    }

    if (atoi(test_env("CWEN_GPU_BENCH", "0")))
        bench(c);
    cw_cuda_close(c);
    return done();
}

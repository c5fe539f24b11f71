/* test_gpu_moe_prefill.c — the routed experts' prefill regime (n_tok > 32:
 * k_moe_gemm.cu, pairs grouped by expert, f16 tensor cores) at the model's
 * widths (E 2048, F 512, 256 experts, K 8) against double references.
 *
 * Ids are skewed: slot 0 of every token picks one hot expert, the other
 * slots draw from 15 more (repeats within a token too), so most of the 256
 * experts get no pair; one n_tok has invalid (-1) slots (act 0, no
 * contribution). Outputs are poisoned with NaN and every element must come
 * back finite; a sample of pairs / tokens is checked against the reference
 * with k_moe_gemm.cu's bound (f16 operands, f32 accumulation, truncating
 * accumulators allowed):
 *   |y - Σ w x| <= (2^-10 + 2^-22 + n 2^-23) Σ|w x| + 2^-25 Σ|x| + 2^-38 max|x| Σ|w|
 * and two runs must be bit-identical. CWEN_GPU_BENCH=1 times gate_up + down
 * (grouped vs the per-token kernels; each grouped projection alone) and the
 * dense prefill shapes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_timer.h"
#include "cuda/kernels.h"
#define GPU_TEST_SEED 0x2545F4914F6CDD1Dull
#include "gpu_test.h"

#define X 256
#define K 8
#define EW 2048 /* E */
#define FW 512  /* F */
#define N_USED 16


/* X experts of n_out x n_in stacked on the device; experts used[i] hold
 * quantised Gaussian rows (w: their f32 values), the others NaN scales
 * (0xFF bytes), so that reading a wrong expert shows. */
struct hexp {
    enum cw_qtype type;
    int64_t n_in, n_out;
    size_t rb, eb;
    float *w[N_USED];
    uint8_t *q[N_USED];
    void *d;
};

static void hexp_make(struct hexp *h, enum cw_qtype type, int64_t n_in, int64_t n_out,
                      const int *used)
{
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    h->type = type, h->n_in = n_in, h->n_out = n_out;
    h->rb = cw_qtype_row_bytes(type, n_in);
    h->eb = h->rb * n_out;
    h->d = dalloc(h->eb * X);
    CK(cw_cuda_memset(C, h->d, 0xFF, h->eb * X, &E));
    float *src = malloc(sizeof(float) * n_in);
    for (int i = 0; i < N_USED; i++) {
        h->w[i] = malloc(sizeof(float) * n_in * n_out);
        h->q[i] = malloc(h->eb);
        for (int64_t r = 0; r < n_out; r++) {
            float s = (float)(0.02 * exp(2.0 * unif()));
            for (int64_t j = 0; j < n_in; j++)
                src[j] = s * gauss();
            tr->quant_row(src, h->q[i] + r * h->rb, n_in);
            tr->dequant_row(h->q[i] + r * h->rb, h->w[i] + r * n_in, n_in);
        }
        up((char *)h->d + h->eb * used[i], h->q[i], h->eb);
    }
    free(src);
}

static void hexp_free(struct hexp *h)
{
    for (int i = 0; i < N_USED; i++)
        free(h->w[i]), free(h->q[i]);
    cw_cuda_free(C, h->d);
}

static int used[N_USED];
static const float *wof(const struct hexp *h, int e)
{
    for (int i = 0; i < N_USED; i++)
        if (used[i] == e)
            return h->w[i];
    return NULL;
}

/* The bound of one f16 tensor-core dot of n terms (header comment). */
static double dot_tol(double sa, double sx, double mx, double sw, int64_t n)
{
    return (ldexp(1, -10) + ldexp(1, -22) + n * ldexp(1, -23)) * sa + ldexp(sx, -25) +
           ldexp(mx * sw, -38);
}

static int all_finite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

static void check(const struct hexp *G, const struct hexp *U, const struct hexp *D, int64_t n_tok,
                  int invalid)
{
    int64_t np = n_tok * K;
    int32_t *ids = malloc(sizeof(int32_t) * np);
    float *wts = malloc(sizeof(float) * np), *x = malloc(sizeof(float) * n_tok * EW);
    for (int64_t p = 0; p < np; p++) {
        ids[p] = p % K == 0 ? used[0] : used[1 + (int)(unif() * (N_USED - 1))];
        if (invalid && p % 37 == 5)
            ids[p] = -1;
        wts[p] = (float)unif();
    }
    for (int64_t i = 0; i < n_tok * EW; i++) /* rows of different scales, some large */
        x[i] = gauss() * (float)(((i / EW) % 5 == 0) ? 300.0 : 1.0);
    float *h0 = malloc(sizeof(float) * n_tok * EW), *h = malloc(sizeof(float) * n_tok * EW);
    for (int64_t i = 0; i < n_tok * EW; i++)
        h0[i] = gauss();
    float *act = malloc(sizeof(float) * np * FW), *act2 = malloc(sizeof(float) * np * FW);
    float *hb = malloc(sizeof(float) * n_tok * EW), *hc = malloc(sizeof(float) * n_tok * EW);
    for (int64_t i = 0; i < np * FW; i++)
        act[i] = NAN;
    int32_t *d_ids = dalloc(sizeof(int32_t) * np);
    float *d_wts = dalloc(sizeof(float) * np), *d_x = dalloc(sizeof(float) * n_tok * EW);
    float *d_h = dalloc(sizeof(float) * n_tok * EW), *d_act = dalloc(sizeof(float) * np * FW);
    up(d_ids, ids, sizeof(int32_t) * np);
    up(d_wts, wts, sizeof(float) * np);
    up(d_x, x, sizeof(float) * n_tok * EW);
    struct cw_k_mat mg = {G->type, G->d, G->rb, G->eb, EW, FW};
    struct cw_k_mat mu = {U->type, U->d, U->rb, U->eb, EW, FW};
    struct cw_k_mat md = {D->type, D->d, D->rb, D->eb, FW, EW};
    size_t ns = cw_k_moe_scratch(&mg, X, K, n_tok);
    ok(ns > 0, "n_tok %lld: grouped path asks for %zu bytes of scratch", (long long)n_tok, ns);
    void *scr = dalloc(ns);
    CK(cw_cuda_memset(C, scr, 0xFF, ns, &E)); /* garbage scratch */
    /* runs 0 and 1 as cw_k_moe_down, run 2 reusing the gate/up's grouping */
    for (int run = 0; run < 3; run++) {
        up(d_act, act, sizeof(float) * np * FW); /* NaN poison */
        up(d_h, h0, sizeof(float) * n_tok * EW);
        CK(cw_k_moe_gate_up(C, &mg, &mu, d_x, d_ids, K, n_tok, d_act, scr, &E));
        if (run < 2)
            CK(cw_k_moe_down(C, &md, d_act, d_ids, d_wts, K, n_tok, d_h, scr, &E));
        else
            CK(cw_k_moe_down_after_gate_up(C, &md, d_act, d_ids, d_wts, K, n_tok, d_h, scr, &E));
        CK(cw_cuda_sync(C, &E));
        if (run < 2)
            down(run ? act2 : act, d_act, sizeof(float) * np * FW);
        down(run == 0 ? h : run == 1 ? hb : hc, d_h, sizeof(float) * n_tok * EW);
    }
    ok(!memcmp(act, act2, sizeof(float) * np * FW) && !memcmp(h, hb, sizeof(float) * n_tok * EW),
       "n_tok %lld: two runs bit-identical (act and h)", (long long)n_tok);
    ok(!memcmp(h, hc, sizeof(float) * n_tok * EW),
       "n_tok %lld: moe_down_after_gate_up (the gate/up's grouping) bit-equal to moe_down",
       (long long)n_tok);
    ok(all_finite(act, np * FW) && all_finite(h, n_tok * EW),
       "n_tok %lld: every act and h element written", (long long)n_tok);
    /* gate_up on a sample of pairs (all of them when small) */
    int64_t step = np <= 300 ? 1 : np / 97;
    int bad = 0, checked = 0;
    double worst = 0;
    for (int64_t p = 0; p < np; p = p + step < np || p == np - 1 ? p + step : np - 1) {
        const float *xt = x + (p / K) * EW;
        checked++;
        if (ids[p] < 0) {
            for (int r = 0; r < FW; r++)
                bad += act[p * FW + r] != 0.0f;
            continue;
        }
        const float *gw = wof(G, ids[p]), *uw = wof(U, ids[p]);
        double sx = 0, mx = 0;
        for (int i = 0; i < EW; i++)
            sx += fabs(xt[i]), mx = fmax(mx, fabs(xt[i]));
        for (int r = 0; r < FW; r++) {
            double g = 0, ga = 0, gs = 0, u = 0, ua = 0, us = 0;
            for (int i = 0; i < EW; i++) {
                double a = (double)gw[r * EW + i] * xt[i], b = (double)uw[r * EW + i] * xt[i];
                g += a, ga += fabs(a), gs += fabs(gw[r * EW + i]);
                u += b, ua += fabs(b), us += fabs(uw[r * EW + i]);
            }
            double eg = dot_tol(ga, sx, mx, gs, EW), eu = dot_tol(ua, sx, mx, us, EW);
            double sg = g / (1 + exp(-g)), ref = sg * u;
            /* silu' <= 1.1; silu's f32 evaluation and the product: 8 ulp */
            double tol = 1.1 * eg * (fabs(u) + eu) + (fabs(sg) + 1.1 * eg) * eu +
                         8 * ldexp(fabs(ref), -24) + 1e-30;
            double err = fabs(act[p * FW + r] - ref);
            if (!(err <= tol)) {
                if (bad < 3)
                    note("gate_up pair %lld r %d: got %.9g want %.9g (tol %.3g)", (long long)p, r,
                         act[p * FW + r], ref, tol);
                bad++;
            } else if (err / tol > worst) {
                worst = err / tol;
            }
        }
    }
    ok(bad == 0, "moe_gate_up grouped %s n_tok %lld: %d pairs checked, %d bad (worst %.3f of bound)",
       cw_qtype_name(G->type), (long long)n_tok, checked, bad, worst);
    /* down on the GPU's act, a sample of tokens */
    int64_t ts = n_tok <= 40 ? 1 : n_tok / 23;
    bad = checked = 0;
    worst = 0;
    for (int64_t t = 0; t < n_tok; t = t + ts < n_tok || t == n_tok - 1 ? t + ts : n_tok - 1) {
        checked++;
        for (int r = 0; r < EW; r++) {
            double sumw_e = 0, sumw_abs = 0, ref = h0[t * EW + r];
            for (int k = 0; k < K; k++) {
                int e = ids[t * K + k];
                if (e < 0)
                    continue;
                const float *a = act + (t * K + k) * FW, *dw = wof(D, e) + r * FW;
                double d = 0, da = 0, sw = 0, sx = 0, mx = 0;
                for (int i = 0; i < FW; i++) {
                    d += (double)dw[i] * a[i], da += fabs((double)dw[i] * a[i]);
                    sw += fabs(dw[i]), sx += fabs(a[i]), mx = fmax(mx, fabs(a[i]));
                }
                double ed = dot_tol(da, sx, mx, sw, FW);
                ref += wts[t * K + k] * d;
                sumw_e += wts[t * K + k] * ed;
                sumw_abs += wts[t * K + k] * (fabs(d) + ed);
            }
            /* dot bounds, K fma roundings of partial sums <= sumw_abs, the add */
            double tol = sumw_e + (K + 1) * ldexp(sumw_abs + fabs(h0[t * EW + r]), -24) + 1e-30;
            double err = fabs(h[t * EW + r] - ref);
            if (!(err <= tol)) {
                if (bad < 3)
                    note("down t %lld r %d: got %.9g want %.9g (tol %.3g)", (long long)t, r,
                         h[t * EW + r], ref, tol);
                bad++;
            } else if (err / tol > worst) {
                worst = err / tol;
            }
        }
    }
    ok(bad == 0, "moe_down grouped %s n_tok %lld: %d tokens checked, %d bad (worst %.3f of bound)",
       cw_qtype_name(D->type), (long long)n_tok, checked, bad, worst);
    cw_cuda_free(C, d_ids), cw_cuda_free(C, d_wts), cw_cuda_free(C, d_x), cw_cuda_free(C, d_h);
    cw_cuda_free(C, d_act), cw_cuda_free(C, scr);
    free(ids), free(wts), free(x), free(h0), free(h), free(hb), free(hc), free(act), free(act2);
}

/* ---- benchmark ---------------------------------------------------------- */

struct bmoe {
    struct cw_k_mat g, u, d;
    int64_t n_tok;
    int per_token; /* the GEMV regime in groups of 32 tokens: the old path */
    int part;      /* 0: gate_up + down, 1: gate_up only, 2: down only */
    float *x, *act, *h, *wts;
    int32_t *ids;
    void *scr;
};

static int bmoe_rep(void *ctx, int rep, struct cw_err *err)
{
    struct bmoe *b = ctx;
    (void)rep;
    int64_t step = b->per_token ? 32 : b->n_tok;
    for (int64_t t0 = 0; t0 < b->n_tok; t0 += step) {
        int64_t n = b->n_tok - t0 < step ? b->n_tok - t0 : step;
        if ((b->part != 2 && cw_k_moe_gate_up(C, &b->g, &b->u, b->x + t0 * EW, b->ids + t0 * K, K,
                                              n, b->act + t0 * K * FW, b->scr, err)) ||
            (b->part != 1 && cw_k_moe_down(C, &b->d, b->act + t0 * K * FW, b->ids + t0 * K,
                                           b->wts + t0 * K, K, n, b->h + t0 * EW, b->scr, err)))
            return -1;
    }
    return 0;
}

/* All 256 experts filled with copies of the real ones; ids uniform. */
static void bench_moe(const struct hexp *G, const struct hexp *U, const struct hexp *D)
{
    void *dg = dalloc(G->eb * X), *du = dalloc(U->eb * X), *dd = dalloc(D->eb * X);
    for (int e = 0; e < X; e++) {
        up((char *)dg + G->eb * e, G->q[e % N_USED], G->eb);
        up((char *)du + U->eb * e, U->q[e % N_USED], U->eb);
        up((char *)dd + D->eb * e, D->q[e % N_USED], D->eb);
    }
    const int64_t NT = 2048;
    struct bmoe b = {{G->type, dg, G->rb, G->eb, EW, FW}, {U->type, du, U->rb, U->eb, EW, FW},
                     {D->type, dd, D->rb, D->eb, FW, EW}, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    int32_t *ids = malloc(sizeof(int32_t) * NT * K);
    float *hx = malloc(sizeof(float) * NT * EW);
    for (int64_t t = 0; t < NT; t++)
        for (int k = 0; k < K; k++) { /* K distinct experts per token */
            int e, dup;
            do {
                e = (int)(unif() * X);
                dup = 0;
                for (int j = 0; j < k; j++)
                    dup |= ids[t * K + j] == e;
            } while (dup);
            ids[t * K + k] = e;
        }
    for (int64_t i = 0; i < NT * EW; i++)
        hx[i] = gauss();
    b.x = dalloc(sizeof(float) * NT * EW), b.h = dalloc(sizeof(float) * NT * EW);
    b.act = dalloc(sizeof(float) * NT * K * FW);
    b.wts = dalloc(sizeof(float) * NT * K), b.ids = dalloc(sizeof(int32_t) * NT * K);
    up(b.x, hx, sizeof(float) * NT * EW);
    up(b.h, hx, sizeof(float) * NT * EW);
    up(b.ids, ids, sizeof(int32_t) * NT * K);
    for (int64_t i = 0; i < NT * K; i++)
        hx[i] = 0.125f;
    up(b.wts, hx, sizeof(float) * NT * K);
    b.scr = dalloc(cw_k_moe_scratch(&b.g, X, K, NT));
    static const int64_t nts[] = {512, 2048};
    static const char *parts[] = {"gate_up+down", "gate_up", "down"};
    for (int i = 0; i < 2; i++)
        for (int pt = 0; pt < 4; pt++) { /* per-token; grouped both, gate_up, down */
            b.n_tok = nts[i], b.per_token = pt == 0, b.part = pt == 0 ? 0 : pt - 1;
            double ms = 0;
            CK(cw_cuda_time(C, bmoe_rep, &b, b.per_token ? 3 : 20, &ms, &E));
            double fl = 2.0 * (b.part == 0 ? 3 : b.part == 1 ? 2 : 1) * EW * FW * (double)(b.n_tok * K);
            note("bench moe %-12s %s/%s n_tok %4lld %-9s: %9.1f us  %6.1f TFLOP/s  %8.0f tok/s per layer",
                 parts[b.part], cw_qtype_name(G->type), cw_qtype_name(D->type), (long long)b.n_tok,
                 b.per_token ? "per-token" : "grouped", ms * 1e3, fl / (ms * 1e-3) / 1e12,
                 b.n_tok / (ms * 1e-3));
        }
    cw_cuda_free(C, dg), cw_cuda_free(C, du), cw_cuda_free(C, dd), cw_cuda_free(C, b.x);
    cw_cuda_free(C, b.h), cw_cuda_free(C, b.act), cw_cuda_free(C, b.wts), cw_cuda_free(C, b.ids);
    cw_cuda_free(C, b.scr);
    free(ids), free(hx);
}

struct bdense {
    struct cw_k_mat w[16];
    int n_copies, f16;
    int64_t n_tok;
    float *x, *y, *one;
    int32_t *zero;
    void *scr;
};

static int bdense_rep(void *ctx, int rep, struct cw_err *err)
{
    struct bdense *b = ctx;
    const struct cw_k_mat *W = &b->w[rep % b->n_copies];
    if (b->f16) /* the grouped kernel as a dense product: one expert, K = 1, y += W x */
        return cw_k_moe_down(C, W, b->x, b->zero, b->one, 1, b->n_tok, b->y, b->scr, err);
    return cw_k_matmul(C, W, b->x, W->n_in, b->n_tok, b->y, W->n_out, false, NULL, b->scr, err);
}

static void bench_dense(enum cw_qtype type, int64_t n_in, int64_t n_out, int64_t n_tok)
{
    struct bdense b = {0};
    b.n_tok = n_tok;
    size_t rb = cw_qtype_row_bytes(type, n_in), bytes = rb * n_out;
    b.n_copies = (int)(bytes >= (120u << 20) ? 1 : (120u << 20) / bytes + 1);
    b.n_copies = b.n_copies > 16 ? 16 : b.n_copies;
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    uint8_t *q = malloc(bytes);
    float *src = malloc(sizeof(float) * n_in);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            src[i] = 0.02f * gauss();
        tr->quant_row(src, q + r * rb, n_in);
    }
    for (int i = 0; i < b.n_copies; i++) {
        void *d = dalloc(bytes);
        up(d, q, bytes);
        b.w[i] = (struct cw_k_mat){type, d, rb, 0, n_in, n_out};
    }
    float *hx = malloc(sizeof(float) * n_tok * (n_in > n_out ? n_in : n_out));
    for (int64_t i = 0; i < n_tok * n_in; i++)
        hx[i] = gauss();
    b.x = dalloc(sizeof(float) * n_tok * n_in), b.y = dalloc(sizeof(float) * n_tok * n_out);
    up(b.x, hx, sizeof(float) * n_tok * n_in);
    CK(cw_cuda_memset(C, b.y, 0, sizeof(float) * n_tok * n_out, &E));
    b.one = dalloc(sizeof(float) * n_tok), b.zero = dalloc(sizeof(int32_t) * n_tok);
    for (int64_t i = 0; i < n_tok; i++)
        hx[i] = 1.0f;
    up(b.one, hx, sizeof(float) * n_tok);
    CK(cw_cuda_memset(C, b.zero, 0, sizeof(int32_t) * n_tok, &E));
    struct cw_k_mat gsz = {type, b.w[0].d_w, rb, 0, n_out, n_in}; /* sizes the "down" as gate */
    size_t s1 = cw_k_matmul_scratch(&b.w[0], n_tok), s2 = cw_k_moe_scratch(&gsz, 1, 1, n_tok);
    b.scr = dalloc(s1 > s2 ? s1 : s2);
    for (int f = 0; f < 2; f++) {
        b.f16 = f;
        double ms = 0;
        CK(cw_cuda_time(C, bdense_rep, &b, 20, &ms, &E));
        note("bench dense %s %6lld x %5lld n_tok %4lld %-22s: %8.1f us  %6.1f TFLOP/s",
             cw_qtype_name(type), (long long)n_out, (long long)n_in, (long long)n_tok,
             f ? "f16 tiles (grouped, +y)" : "dequant + cuBLAS", ms * 1e3,
             2.0 * n_out * n_in * n_tok / (ms * 1e-3) / 1e12);
    }
    for (int i = 0; i < b.n_copies; i++)
        cw_cuda_free(C, (void *)b.w[i].d_w);
    cw_cuda_free(C, b.x), cw_cuda_free(C, b.y), cw_cuda_free(C, b.one), cw_cuda_free(C, b.zero);
    cw_cuda_free(C, b.scr);
    free(q), free(src), free(hx);
}

int main(void)
{
    C = gpu_test_open();
    for (int i = 0; i < N_USED; i++)
        used[i] = (37 * i + 5) % X;
    struct hexp G, U, D;
    hexp_make(&G, CW_TYPE_Q4_K, EW, FW, used);
    hexp_make(&U, CW_TYPE_Q4_K, EW, FW, used);
    hexp_make(&D, CW_TYPE_Q6_K, FW, EW, used);
    check(&G, &U, &D, 33, 1);
    check(&G, &U, &D, 200, 0);
    check(&G, &U, &D, 512, 0);
    check(&G, &U, &D, 2048, 0);
    {
        struct hexp D4;
        hexp_make(&D4, CW_TYPE_Q4_K, FW, EW, used);
        check(&G, &U, &D4, 64, 0);
        if (getenv("CWEN_GPU_BENCH") && atoi(getenv("CWEN_GPU_BENCH")))
            bench_moe(&G, &U, &D4);
        hexp_free(&D4);
    }
    if (getenv("CWEN_GPU_BENCH") && atoi(getenv("CWEN_GPU_BENCH"))) {
        bench_moe(&G, &U, &D);
        static const int64_t shapes[][2] = {{2048, 8192}, {2048, 4096}, {4096, 2048},
                                            {2048, 512},  {512, 2048}};
        for (int s = 0; s < 5; s++)
            for (int n = 512; n <= 2048; n *= 4)
                bench_dense(CW_TYPE_Q4_K, shapes[s][0], shapes[s][1], n);
    }
    hexp_free(&G), hexp_free(&U), hexp_free(&D);
    cw_cuda_close(C);
    return done();
}

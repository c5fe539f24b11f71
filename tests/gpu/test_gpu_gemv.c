/* test_gpu_gemv.c — the CUDA quantised products (k_gemv.cu, k_gemm.cu)
 * against double references of the dequantised weights.
 *
 * Every type the CPU multiplies: weights from cwen's own quantisers, fresh
 * random x per check, outputs poisoned with NaN before each launch and every
 * element checked. Bounds (derived in k_gemv.cu / k_gemm.cu):
 *   GEMV (n_tok <= 32): (L + 5) 2^-24 Σ|w x|, L = 32 ceil(n_in / 1024) the
 *     lane's fma chain, plus 4 ulp of the result for the σ scale / add;
 *   GEMV of Q4_K/Q5_K/Q6_K: x quantised to Q8_K as the CPU does, so the
 *     product is bit-equal to the CPU's vec_dot (cpu_gemv.h; its accuracy
 *     against llama.cpp is test_cpu_gemv_oracle's), plus the same 4 ulp
 *     for the σ scale / add;
 *   GEMM (tensor cores; f16, TF32 for F32/BF16/MXFP4/NVFP4):
 *     (2^-9 + n_in 2^-24) Σ|w x| + 4 ulp, and in f16 the subnormal terms
 *     2^-25 Σ|x| + 2^-39 max|x| Σ|w| (max over the batch, whose one scale
 *     2^-s <= max·2^-14); one shape spreads its tokens' x over 2^24 (a
 *     token past f16's range beside small ones).
 * Dequantisation and get_rows are exact (bit-equal to quant_dequant.c), and
 * batch invariance is bit-exact. CWEN_GPU_BENCH=1 adds the GB/s table. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_timer.h"
#include "cpu/cpu_gemv.h"
#include "cuda/kernels.h"
#define GPU_TEST_SEED 0x9E3779B97F4A7C15ull
#include "gpu_test.h"

#define GEMV_MAX_TOK 32 /* k_gemv.cu's CW_K_GEMV_MAX_TOK */

static const enum cw_qtype TYPES[] = {
    CW_TYPE_Q4_K, CW_TYPE_Q6_K, CW_TYPE_Q5_K, CW_TYPE_Q8_0, CW_TYPE_F32, CW_TYPE_F16,
    CW_TYPE_BF16, CW_TYPE_Q4_0, CW_TYPE_Q4_1, CW_TYPE_Q5_0, CW_TYPE_Q5_1, CW_TYPE_Q2_K,
    CW_TYPE_Q3_K, CW_TYPE_IQ4_NL, CW_TYPE_IQ4_XS, CW_TYPE_MXFP4, CW_TYPE_NVFP4,
};
#define N_TYPES (int)(sizeof TYPES / sizeof TYPES[0])

/* A host matrix: quantised bytes and their dequantised f32 values. */
struct hmat {
    enum cw_qtype type;
    int64_t n_in, n_out;
    size_t rb;
    uint8_t *q;
    float *w;
};

/* Rows of Gaussian weights with a per-row scale spread (so that block scales
 * differ), quantised by cwen's quantiser and dequantised back. */
static void hmat_make(struct hmat *m, enum cw_qtype type, int64_t n_in, int64_t n_out)
{
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    m->type = type, m->n_in = n_in, m->n_out = n_out;
    m->rb = cw_qtype_row_bytes(type, n_in);
    m->q = malloc(m->rb * n_out);
    m->w = malloc(sizeof(float) * n_in * n_out);
    float *src = malloc(sizeof(float) * n_in);
    for (int64_t r = 0; r < n_out; r++) {
        float s = (float)(0.02 * exp(2.0 * unif()));
        for (int64_t i = 0; i < n_in; i++)
            src[i] = s * gauss() + (i % 97 == 0 ? 0.1f * s : 0.0f);
        tr->quant_row(src, m->q + r * m->rb, n_in);
        tr->dequant_row(m->q + r * m->rb, m->w + r * n_in, n_in);
    }
    free(src);
}

static void hmat_free(struct hmat *m)
{
    free(m->q);
    free(m->w);
}

static void fill_x(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gauss();
}

static void fill_nan(float *h, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        h[i] = NAN;
}

static double sigm(float s) { return 1.0f / (1.0f + expf(-s)); }

/* Whether k_gemm.cu multiplies this type in f16 (else TF32). */
static int gemm_f16(enum cw_qtype t)
{
    return t != CW_TYPE_F32 && t != CW_TYPE_BF16 && t != CW_TYPE_MXFP4 && t != CW_TYPE_NVFP4;
}

/* One matmul check; spread scales token t's x by 2^16, 2^-8, 1 for t % 3 =
 * 0, 1, 2. Returns the number of bad elements. */
static int check_matmul(const struct hmat *m, const void *d_w, int64_t n_tok, int64_t ldx,
                        int64_t ldy, int add, int scale, int spread, const char *tag)
{
    struct cw_k_mat W = {m->type, d_w, m->rb, 0, m->n_in, m->n_out};
    float *x = malloc(sizeof(float) * ldx * n_tok), *y0 = malloc(sizeof(float) * ldy * n_tok);
    float *y = malloc(sizeof(float) * ldy * n_tok), sl[256];
    fill_x(x, ldx * n_tok);
    double xmax = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < ldx; i++) {
            if (spread)
                x[t * ldx + i] = ldexpf(x[t * ldx + i], t % 3 == 0 ? 16 : t % 3 == 1 ? -8 : 0);
            if (i < m->n_in)
                xmax = fmax(xmax, fabs(x[t * ldx + i]));
        }
    for (int64_t i = 0; i < ldy * n_tok; i++)
        y0[i] = add ? gauss() : NAN;
    for (int t = 0; t < n_tok; t++)
        sl[t] = 2.0f * gauss();
    float *dx = dalloc(sizeof(float) * ldx * n_tok), *dy = dalloc(sizeof(float) * ldy * n_tok);
    float *ds = dalloc(sizeof sl);
    size_t ns = cw_k_matmul_scratch(&W, n_tok);
    void *scr = ns ? dalloc(ns) : NULL;
    up(dx, x, sizeof(float) * ldx * n_tok);
    up(dy, y0, sizeof(float) * ldy * n_tok);
    up(ds, sl, sizeof sl);
    CK(cw_k_matmul(C, &W, dx, ldx, n_tok, dy, ldy, add, scale ? ds : NULL, scr, &E));
    down(y, dy, sizeof(float) * ldy * n_tok);
    int gemm = n_tok > GEMV_MAX_TOK;
    double L = 32.0 * ceil(m->n_in / 1024.0);
    double rel = gemm ? ldexp(1, -9) + m->n_in * ldexp(1, -24) : (L + 5) * ldexp(1, -24);
    const int sub = gemm && gemm_f16(m->type); /* the f16 subnormal terms */
    int bad = 0;
    double worst = 0;
    const int q8k = !gemm && cw_k_q8k(C, m->type, m->n_in, m->n_out);
    void *xq = q8k ? malloc(cw_cpu_act_bytes(m->type, m->n_in)) : NULL;
    for (int64_t t = 0; t < n_tok; t++) {
        if (q8k)
            cw_cpu_quantize_act(m->type, x + t * ldx, xq, m->n_in);
        for (int64_t r = 0; r < ldy; r++) {
            float got = y[t * ldy + r];
            if (r >= m->n_out) { /* past n_out: untouched */
                float want = y0[t * ldy + r];
                if (memcmp(&got, &want, 4))
                    bad++;
                continue;
            }
            double s = 0, sa = 0, sx = 0, sw = 0;
            for (int64_t i = 0; i < m->n_in; i++) {
                double p = (double)m->w[r * m->n_in + i] * x[t * ldx + i];
                s += p, sa += fabs(p);
                sx += fabs(x[t * ldx + i]), sw += fabs(m->w[r * m->n_in + i]);
            }
            double g = scale ? sigm(sl[t]) : 1.0;
            double rl = rel;
            if (q8k) { /* the CPU's value: exact without epilogue, 4 ulp with */
                float c = cw_cpu_vec_dot(m->type, m->n_in, m->q + r * m->rb, xq);
                if (!add && !scale) {
                    if (memcmp(&c, &got, 4)) {
                        if (bad < 3)
                            note("%s: t %lld r %lld: got %.9g, the CPU %.9g", tag, (long long)t,
                                 (long long)r, got, c);
                        bad++;
                    }
                    continue;
                }
                s = c, rl = 0;
            }
            double ref = s * g + (add ? y0[t * ldy + r] : 0.0);
            double tol = rl * sa * g + 4 * ldexp(fabs(s * g) + fabs(ref), -24) + 1e-30;
            if (sub)
                tol += (ldexp(sx, -25) + ldexp(xmax * sw, -39)) * g;
            double e = fabs(got - ref);
            if (!(e <= tol)) {
                if (bad < 3)
                    note("%s: t %lld r %lld: got %.9g want %.9g (tol %.3g)", tag, (long long)t,
                         (long long)r, got, ref, tol);
                bad++;
            } else if (e / tol > worst) {
                worst = e / tol;
            }
        }
    }
    free(xq);
    ok(bad == 0, "%s %s %lldx%lld n_tok %lld ldx %lld ldy %lld%s%s%s: %d bad (worst %.2f of bound%s)",
       tag, cw_qtype_name(m->type), (long long)m->n_out, (long long)m->n_in, (long long)n_tok,
       (long long)ldx, (long long)ldy, add ? " add" : "", scale ? " scaled" : "",
       spread ? " x over 2^24" : "", bad, worst,
       q8k ? "; = the CPU's q8_K vec_dot" : "");
    cw_cuda_free(C, dx), cw_cuda_free(C, dy), cw_cuda_free(C, ds), cw_cuda_free(C, scr);
    free(x), free(y0), free(y);
    return bad;
}

/* Exact dequantisation: dequant_rows over an offset range and get_rows with
 * repeated / out-of-order tokens, bit-equal to quant_dequant.c. */
static void check_dequant(const struct hmat *m, const void *d_w)
{
    struct cw_k_mat W = {m->type, d_w, m->rb, 0, m->n_in, m->n_out};
    int64_t r0 = m->n_out > 2 ? 1 : 0, n = m->n_out - r0;
    float *dy = dalloc(sizeof(float) * m->n_in * (n + 4)), *y = malloc(sizeof(float) * m->n_in * (n + 4));
    fill_nan(y, m->n_in * n);
    up(dy, y, sizeof(float) * m->n_in * n);
    CK(cw_k_dequant_rows(C, &W, 0, r0, n, dy, &E));
    down(y, dy, sizeof(float) * m->n_in * n);
    ok(!memcmp(y, m->w + r0 * m->n_in, sizeof(float) * m->n_in * n),
       "dequant_rows %s rows [%lld, %lld): bit-equal to quant_dequant.c", cw_qtype_name(m->type),
       (long long)r0, (long long)m->n_out);
    int32_t tok[4] = {(int32_t)(m->n_out - 1), 0, (int32_t)(m->n_out - 1), (int32_t)(m->n_out / 2)};
    int32_t *dt = dalloc(sizeof tok);
    up(dt, tok, sizeof tok);
    fill_nan(y, m->n_in * 4);
    up(dy, y, sizeof(float) * m->n_in * 4);
    CK(cw_k_get_rows(C, &W, dt, 4, dy, &E));
    down(y, dy, sizeof(float) * m->n_in * 4);
    int same = 1;
    for (int t = 0; t < 4; t++)
        same &= !memcmp(y + t * m->n_in, m->w + (int64_t)tok[t] * m->n_in, sizeof(float) * m->n_in);
    ok(same, "get_rows %s: rows {last, 0, last, mid} bit-equal", cw_qtype_name(m->type));
    cw_cuda_free(C, dy), cw_cuda_free(C, dt);
    free(y);
}

/* Batch invariance: token j's bits from n_tok = 1 (alone) equal its bits at
 * every position of launches of 2, 3, 8, 9 and 32 tokens. */
static void check_invariance(const struct hmat *m, const void *d_w)
{
    struct cw_k_mat W = {m->type, d_w, m->rb, 0, m->n_in, m->n_out};
    const int NTOK = 32;
    float *x = malloc(sizeof(float) * m->n_in * NTOK);
    fill_x(x, m->n_in * NTOK);
    float *dx = dalloc(sizeof(float) * m->n_in * NTOK), *dy = dalloc(sizeof(float) * m->n_out * NTOK);
    float *solo = malloc(sizeof(float) * m->n_out * NTOK), *y = malloc(sizeof(float) * m->n_out * NTOK);
    up(dx, x, sizeof(float) * m->n_in * NTOK);
    for (int t = 0; t < NTOK; t++)
        CK(cw_k_matmul(C, &W, dx + t * m->n_in, m->n_in, 1, dy + t * m->n_out, m->n_out, false,
                       NULL, NULL, &E));
    down(solo, dy, sizeof(float) * m->n_out * NTOK);
    static const int sizes[] = {2, 3, 8, 9, 32};
    int same = 1;
    for (int s = 0; s < 5; s++)
        for (int t0 = 0; t0 + sizes[s] <= NTOK; t0 += sizes[s] == 32 ? 32 : 5) {
            CK(cw_k_matmul(C, &W, dx + t0 * m->n_in, m->n_in, sizes[s], dy, m->n_out, false, NULL,
                           NULL, &E));
            down(y, dy, sizeof(float) * m->n_out * sizes[s]);
            same &= !memcmp(y, solo + t0 * m->n_out, sizeof(float) * m->n_out * sizes[s]);
        }
    ok(same, "%s %lldx%lld: a token's bits equal alone and at every position of 2..32-token batches",
       cw_qtype_name(m->type), (long long)m->n_out, (long long)m->n_in);
    cw_cuda_free(C, dx), cw_cuda_free(C, dy);
    free(x), free(solo), free(y);
}

/* cw_k_matmul_multi: matrices of mixed types and odd row counts (grouped
 * into one launch per type; above 32 tokens sharing one f16 copy of x)
 * give each output the bits of its own cw_k_matmul, and write nothing
 * outside y_i's n_out columns of each row. */
static void check_multi(void)
{
    /* the four q4_K matrices share one Q8_K launch (cw_k_q8k), the q6_K
     * and the f32 one take theirs */
    enum { N = 6, IN = 2048, LD = 2203 };
    static const enum cw_qtype ty[N] = {CW_TYPE_Q6_K, CW_TYPE_Q4_K, CW_TYPE_Q4_K, CW_TYPE_F32,
                                        CW_TYPE_Q4_K, CW_TYPE_Q4_K};
    static const int64_t rows[N] = {96, 100, 3, 5, 33, 2200};
    struct hmat m[N];
    struct cw_k_mat W[N];
    const struct cw_k_mat *Wp[N];
    float *dy[N];
    int64_t ldy[N];
    for (int i = 0; i < N; i++) {
        hmat_make(&m[i], ty[i], IN, rows[i]);
        void *d = dalloc(m[i].rb * rows[i]);
        up(d, m[i].q, m[i].rb * rows[i]);
        W[i] = (struct cw_k_mat){ty[i], d, m[i].rb, 0, IN, rows[i]};
        Wp[i] = &W[i];
        ldy[i] = rows[i] + 3; /* a gap after each row's outputs, which must stay NaN */
    }
    /* 40 tokens: the GEMM regime, x converted once for the f16 matrices
     * (the f32 one in TF32 between them) */
    enum { MT = 40 };
    static const int ntoks[] = {1, 2, 3, 8, 32, MT};
    float *x = malloc(sizeof(float) * IN * MT), *a = malloc(sizeof(float) * LD * MT),
          *b = malloc(sizeof(float) * LD * MT), *nan = malloc(sizeof(float) * LD * MT);
    fill_nan(nan, LD * MT);
    float *dx = dalloc(sizeof(float) * IN * MT);
    for (int i = 0; i < N; i++)
        dy[i] = dalloc(sizeof(float) * LD * MT);
    float *dref = dalloc(sizeof(float) * LD * MT);
    size_t ns = 0;
    for (int i = 0; i < N; i++)
        if (cw_k_matmul_scratch(&W[i], MT) > ns)
            ns = cw_k_matmul_scratch(&W[i], MT);
    void *scr = dalloc(ns);
    int same = 1, gaps = 1;
    for (int k = 0; k < 6; k++) {
        const int nt = ntoks[k];
        fill_x(x, IN * nt);
        up(dx, x, sizeof(float) * IN * nt);
        for (int i = 0; i < N; i++)
            up(dy[i], nan, sizeof(float) * LD * MT);
        CK(cw_k_matmul_multi(C, N, Wp, dx, IN, nt, dy, ldy, scr, &E));
        for (int i = 0; i < N; i++) {
            up(dref, nan, sizeof(float) * LD * MT);
            CK(cw_k_matmul(C, &W[i], dx, IN, nt, dref, ldy[i], false, NULL, scr, &E));
            down(a, dy[i], sizeof(float) * ldy[i] * nt);
            down(b, dref, sizeof(float) * ldy[i] * nt);
            for (int t = 0; t < nt; t++) {
                same &= !memcmp(a + t * ldy[i], b + t * ldy[i], sizeof(float) * rows[i]);
                for (int64_t r = rows[i]; r < ldy[i]; r++)
                    gaps &= isnan(a[t * ldy[i] + r]);
            }
        }
    }
    ok(same, "matmul_multi (q6_K, 4 q4_K one of them long, f32; 1..32 and 40 tokens): every output bit-equal to its own matmul");
    ok(gaps, "matmul_multi writes nothing past each matrix's rows");
    const struct cw_k_mat *nine[9] = {&W[0], &W[0], &W[0], &W[0], &W[0], &W[0], &W[0], &W[0], &W[0]};
    ok(cw_k_matmul_multi(C, 9, nine, dx, IN, 1, dy, ldy, NULL, &E) == -1 &&
           cw_k_matmul_multi(C, 0, nine, dx, IN, 1, dy, ldy, NULL, &E) == -1,
       "matmul_multi refuses 0 or more than CW_K_MULTI_MAX matrices: %s", E.msg);
    for (int i = 0; i < N; i++) {
        cw_cuda_free(C, (void *)W[i].d_w), cw_cuda_free(C, dy[i]);
        hmat_free(&m[i]);
    }
    cw_cuda_free(C, dx), cw_cuda_free(C, dref), cw_cuda_free(C, scr);
    free(x), free(a), free(b), free(nan);
}

/* cw_k_matmul_add_norm: h += W x, then RMSNorm(h)·w into y: h and y bit-equal
 * to cw_k_matmul (add) then cw_k_add_rmsnorm, over token groups (1, 3, 9,
 * 32: the GEMV regime's launches of up to 8 tokens) and in the GEMM regime
 * (40, the fallback), repeated so that a count left non-zero would show. */
static void check_add_norm(enum cw_qtype type, int64_t n_in, int64_t n_out)
{
    struct hmat m;
    hmat_make(&m, type, n_in, n_out);
    void *dw = dalloc(m.rb * n_out);
    up(dw, m.q, m.rb * n_out);
    struct cw_k_mat W = {type, dw, m.rb, 0, n_in, n_out};
    enum { NT = 40 };
    float *x = malloc(sizeof(float) * n_in * NT), *h0 = malloc(sizeof(float) * n_out * NT);
    float *nw = malloc(sizeof(float) * n_out), *a = malloc(sizeof(float) * n_out * NT),
          *b = malloc(sizeof(float) * n_out * NT), *ya = malloc(sizeof(float) * n_out * NT),
          *yb = malloc(sizeof(float) * n_out * NT);
    fill_x(x, n_in * NT);
    fill_x(h0, n_out * NT);
    for (int64_t i = 0; i < n_out; i++)
        nw[i] = 1.0f + 0.1f * gauss();
    float *dx = dalloc(sizeof(float) * n_in * NT), *dh = dalloc(sizeof(float) * n_out * NT);
    float *dnw = dalloc(sizeof(float) * n_out), *dy = dalloc(sizeof(float) * n_out * NT);
    unsigned *dcnt = dalloc(sizeof(unsigned));
    size_t ns = cw_k_matmul_scratch(&W, NT);
    void *scr = ns ? dalloc(ns) : NULL;
    CK(cw_cuda_memset(C, dcnt, 0, sizeof(unsigned), &E));
    up(dx, x, sizeof(float) * n_in * NT);
    up(dnw, nw, sizeof(float) * n_out);
    const struct cw_k_norm_next nn = {dnw, dy, n_out, 1e-6f, dcnt};
    static const int ntoks[] = {1, 3, 9, 32, 40, 1};
    int same = 1;
    for (int k = 0; k < 6; k++) {
        const int nt = ntoks[k];
        up(dh, h0, sizeof(float) * n_out * nt);
        CK(cw_k_matmul_add_norm(C, &W, dx, n_in, nt, dh, n_out, NULL, &nn, NULL, scr, &E));
        down(a, dh, sizeof(float) * n_out * nt);
        down(ya, dy, sizeof(float) * n_out * nt);
        up(dh, h0, sizeof(float) * n_out * nt);
        CK(cw_k_matmul(C, &W, dx, n_in, nt, dh, n_out, true, NULL, scr, &E));
        CK(cw_k_add_rmsnorm(C, dh, NULL, dnw, dy, n_out, n_out, nt, 1e-6f, &E));
        down(b, dh, sizeof(float) * n_out * nt);
        down(yb, dy, sizeof(float) * n_out * nt);
        same &= !memcmp(a, b, sizeof(float) * n_out * nt) &&
                !memcmp(ya, yb, sizeof(float) * n_out * nt);
    }
    ok(same, "matmul_add_norm %s %lldx%lld (1..40 tokens, twice at 1): h and the norm bit-equal "
       "to matmul + add_rmsnorm", cw_qtype_name(type), (long long)n_out, (long long)n_in);
    cw_cuda_free(C, dw), cw_cuda_free(C, dx), cw_cuda_free(C, dh), cw_cuda_free(C, dnw);
    cw_cuda_free(C, dy), cw_cuda_free(C, dcnt), cw_cuda_free(C, scr);
    hmat_free(&m);
    free(x), free(h0), free(nw), free(a), free(b), free(ya), free(yb);
}

/* The inputs of a norm of h for nt tokens of n_in: h (filled) and the
 * norm's weights on the host and the device, the device's x buffers (the
 * launchers' and the reference's), host room a, b for comparisons. */
struct norm_io {
    float *h, *nw, *a, *b;
    float *dh, *dnw, *dx, *dxr;
};

static struct norm_io norm_io_make(int64_t n_in, int nt)
{
    struct norm_io o;
    const size_t row = sizeof(float) * (size_t)n_in;
    o.h = malloc(row * nt), o.nw = malloc(row), o.a = malloc(row * nt), o.b = malloc(row * nt);
    fill_x(o.h, n_in * nt);
    for (int64_t i = 0; i < n_in; i++)
        o.nw[i] = 1.0f + 0.1f * gauss();
    o.dh = dalloc(row * nt), o.dnw = dalloc(row);
    o.dx = dalloc(row * nt), o.dxr = dalloc(row * nt);
    up(o.dh, o.h, row * nt);
    up(o.dnw, o.nw, row);
    return o;
}

static void norm_io_free(struct norm_io *o)
{
    cw_cuda_free(C, o->dh), cw_cuda_free(C, o->dnw), cw_cuda_free(C, o->dx);
    cw_cuda_free(C, o->dxr);
    free(o->h), free(o->nw), free(o->a), free(o->b);
}

/* Whether n bytes of device memory at da and db are equal, through the
 * host buffers a and b. */
static int dev_same(const void *da, const void *db, size_t n, void *a, void *b)
{
    down(a, da, n);
    down(b, db, n);
    return !memcmp(a, b, n);
}

/* x given as the norm of h (cw_k_norm_in): cw_k_matmul_multi_norm and
 * cw_k_moe_gate_up_norm (K = 1) give every output, and the x they write,
 * bit-equal to cw_k_add_rmsnorm then the plain launcher, and leave h as it
 * was: with the norm inside the launch that quantises x once (1, 3, 9
 * tokens where cw_k_norm_fuses, which is asserted from 8 blocks of 256 on)
 * and as a launch of its own (40 tokens; no scratch; narrower x). The
 * multi puts an f32-path matrix first and a second Q8_K type after the
 * fused group: both read the x that group wrote. */
static void check_norm_in(enum cw_qtype tq, int64_t n_in)
{
    enum { N = 4, NT = 40 };
    const enum cw_qtype t2 = tq == CW_TYPE_Q4_K ? CW_TYPE_Q6_K : CW_TYPE_Q4_K;
    const enum cw_qtype ty[N] = {CW_TYPE_Q8_0, tq, t2, CW_TYPE_F32};
    static const int64_t rows[N] = {100, 48, 33, 5}; /* f32 x (Q8_0), Q8_K, Q8_K, f32 type */
    struct hmat m[N], u;
    struct cw_k_mat W[N], U;
    const struct cw_k_mat *Wp[N];
    float *dy[N], *dr[N];
    int64_t ldy[N];
    for (int i = 0; i < N; i++) {
        hmat_make(&m[i], ty[i], n_in, rows[i]);
        void *d = dalloc(m[i].rb * rows[i]);
        up(d, m[i].q, m[i].rb * rows[i]);
        W[i] = (struct cw_k_mat){ty[i], d, m[i].rb, 0, n_in, rows[i]};
        Wp[i] = &W[i];
        ldy[i] = rows[i];
        dy[i] = dalloc(sizeof(float) * rows[i] * NT);
        dr[i] = dalloc(sizeof(float) * rows[i] * NT);
    }
    hmat_make(&u, tq, n_in, rows[1]);
    void *du = dalloc(u.rb * rows[1]);
    up(du, u.q, u.rb * rows[1]);
    U = (struct cw_k_mat){tq, du, u.rb, 0, n_in, rows[1]};
    const int fuses = cw_k_norm_fuses(C, &W[1], 0, 1) && cw_k_norm_fuses(C, &W[1], 1, 1);
    size_t ns = cw_k_moe_scratch(&W[1], 1, 1, NT);
    for (int i = 0; i < N; i++)
        if (cw_k_matmul_scratch(&W[i], NT) > ns)
            ns = cw_k_matmul_scratch(&W[i], NT);
    void *scr = dalloc(ns);
    struct norm_io io = norm_io_make(n_in, NT);
    float *h = io.h, *a = io.a, *b = io.b, *dh = io.dh, *dnw = io.dnw, *dx = io.dx, *dxr = io.dxr;
    int32_t zero[NT] = {0};
    int32_t *dz = dalloc(sizeof zero);
    up(dz, zero, sizeof zero);
    const struct cw_k_norm_in nin = {dh, dnw, 1e-6f, false};
    static const int nts[] = {1, 3, 9, NT, 1};
    int same = 1, hsame = 1;
    for (int k = 0; k < 5; k++) {
        const int nt = nts[k];
        void *sc = k == 4 ? NULL : scr; /* the last: no scratch, so no fusion */
        CK(cw_k_add_rmsnorm(C, dh, NULL, dnw, dxr, n_in, n_in, nt, 1e-6f, &E));
        CK(cw_k_matmul_multi(C, N, Wp, dxr, n_in, nt, dr, ldy, sc, &E));
        CK(cw_k_matmul_multi_norm(C, N, Wp, &nin, dx, n_in, nt, dy, ldy, sc, &E));
        same &= dev_same(dx, dxr, sizeof(float) * n_in * nt, a, b);
        for (int i = 0; i < N; i++)
            same &= dev_same(dy[i], dr[i], sizeof(float) * rows[i] * nt, a, b);
        /* the K = 1 gate/up: act [nt][48] */
        CK(cw_k_moe_gate_up(C, &W[1], &U, dxr, dz, 1, nt, dr[1], sc, &E));
        CK(cw_cuda_memset(C, dx, 0, sizeof(float) * n_in * nt, &E));
        CK(cw_k_moe_gate_up_norm(C, &W[1], &U, &nin, dx, dz, 1, nt, dy[1], sc, &E));
        down(a, dy[1], sizeof(float) * rows[1] * nt);
        down(b, dr[1], sizeof(float) * rows[1] * nt);
        same &= !memcmp(a, b, sizeof(float) * rows[1] * nt);
        down(a, dx, sizeof(float) * n_in * nt);
        down(b, dxr, sizeof(float) * n_in * nt);
        same &= !memcmp(a, b, sizeof(float) * n_in * nt);
        down(a, dh, sizeof(float) * n_in * nt);
        hsame &= !memcmp(a, h, sizeof(float) * n_in * nt);
    }
    ok(same && hsame && fuses == (n_in >= 2048),
       "x as the norm of h, %s x %lld (norm %s): matmul_multi_norm (q4_K f32 path, %s, %s, f32) "
       "and the K = 1 gate_up_norm at 1, 3, 9, 40 tokens and without scratch: x and every "
       "output bit-equal to add_rmsnorm + the plain launcher, h untouched", cw_qtype_name(tq),
       (long long)n_in, fuses ? "fused" : "its own launch", cw_qtype_name(tq),
       cw_qtype_name(t2));
    /* x_unread: the multi holds f32 readers of x, so x is written still;
     * the K = 1 gate/up leaves it as it was where the norm is fused */
    const struct cw_k_norm_in nun = {dh, dnw, 1e-6f, true};
    int unread = 1;
    for (int k = 0; k < 5; k++) {
        const int nt = nts[k];
        void *sc = k == 4 ? NULL : scr;
        const size_t xb = sizeof(float) * n_in * nt;
        CK(cw_k_add_rmsnorm(C, dh, NULL, dnw, dxr, n_in, n_in, nt, 1e-6f, &E));
        CK(cw_k_matmul_multi(C, N, Wp, dxr, n_in, nt, dr, ldy, sc, &E));
        CK(cw_cuda_memset(C, dx, 0xFF, xb, &E));
        CK(cw_k_matmul_multi_norm(C, N, Wp, &nun, dx, n_in, nt, dy, ldy, sc, &E));
        unread &= dev_same(dx, dxr, xb, a, b);
        for (int i = 0; i < N; i++)
            unread &= dev_same(dy[i], dr[i], sizeof(float) * rows[i] * nt, a, b);
        CK(cw_k_moe_gate_up(C, &W[1], &U, dxr, dz, 1, nt, dr[1], sc, &E));
        CK(cw_cuda_memset(C, dx, 0xFF, xb, &E));
        CK(cw_k_moe_gate_up_norm(C, &W[1], &U, &nun, dx, dz, 1, nt, dy[1], sc, &E));
        unread &= dev_same(dy[1], dr[1], sizeof(float) * rows[1] * nt, a, b);
        if (sc && cw_k_norm_fuses(C, &W[1], 1, nt)) {
            down(a, dx, xb);
            memset(b, 0xFF, xb);
            unread &= !memcmp(a, b, xb);
        } else {
            unread &= dev_same(dx, dxr, xb, a, b);
        }
    }
    ok(unread, "... with x unread: the multi (f32 readers among its matrices) writes x still, "
       "the K = 1 gate_up_norm leaves it as it was where its norm is fused; every output the "
       "same");
    struct cw_k_norm_in bad = nin;
    bad.d_w = NULL;
    ok(cw_k_matmul_multi_norm(C, N, Wp, &bad, dx, n_in, 1, dy, ldy, scr, &E) == -1 &&
           cw_k_moe_gate_up_norm(C, &W[1], &U, NULL, dx, dz, 1, 1, dy[1], scr, &E) == -1,
       "a norm without weights, or none, refused: %s", E.msg);
    for (int i = 0; i < N; i++) {
        cw_cuda_free(C, (void *)W[i].d_w), cw_cuda_free(C, dy[i]), cw_cuda_free(C, dr[i]);
        hmat_free(&m[i]);
    }
    hmat_free(&u);
    cw_cuda_free(C, du), cw_cuda_free(C, scr), cw_cuda_free(C, dz);
    norm_io_free(&io);
}

/* Tokens through matrices of two types, one Q6_K group and one Q4_K
 * group, x wide enough to quantise once: one launch quantises x into both
 * layouts (k_gemv.cu multi_run), in both orders of the groups (the 27B's
 * DeltaNet mixer: Q6_K qkv before its q4_K gate, beta, alpha; its
 * attention: q4_K q, k before a Q6_K v), with x given and as the norm of
 * h, at 1 and 5 tokens. Every output, and the x written, bit-equal to
 * add_rmsnorm and each matrix's own matmul. With x_unread the outputs are
 * the same, and x is left as it was where the norm is fused (every product
 * here reads the copy quantised with it), written where it is not. */
static void check_two_layouts(int64_t n_in)
{
    enum { N = 4, MT = 5 };
    static const enum cw_qtype ty[2][N] = {
        {CW_TYPE_Q6_K, CW_TYPE_Q4_K, CW_TYPE_Q4_K, CW_TYPE_Q4_K},
        {CW_TYPE_Q4_K, CW_TYPE_Q4_K, CW_TYPE_Q6_K, CW_TYPE_Q4_K}};
    static const int64_t rows[N] = {1000, 700, 48, 37};
    struct norm_io io = norm_io_make(n_in, MT);
    float *a = io.a, *b = io.b, *dh = io.dh, *dnw = io.dnw, *dx = io.dx, *dxr = io.dxr;
    const struct cw_k_norm_in nin = {dh, dnw, 1e-6f, false}, nun = {dh, dnw, 1e-6f, true};
    int same = 1, unread = 1, fused = 1;
    for (int o = 0; o < 2; o++) {
        struct hmat m[N];
        struct cw_k_mat W[N];
        const struct cw_k_mat *Wp[N];
        float *dy[N], *dr[N];
        int64_t ldy[N];
        size_t ns = 0;
        for (int i = 0; i < N; i++) {
            hmat_make(&m[i], ty[o][i], n_in, rows[i]);
            void *d = dalloc(m[i].rb * rows[i]);
            up(d, m[i].q, m[i].rb * rows[i]);
            W[i] = (struct cw_k_mat){ty[o][i], d, m[i].rb, 0, n_in, rows[i]};
            Wp[i] = &W[i];
            ldy[i] = rows[i];
            dy[i] = dalloc(sizeof(float) * rows[i] * MT);
            dr[i] = dalloc(sizeof(float) * rows[i] * MT);
            if (cw_k_matmul_scratch(&W[i], MT) > ns)
                ns = cw_k_matmul_scratch(&W[i], MT);
        }
        void *scr = dalloc(ns);
        for (int nt = 1; nt <= MT; nt += MT - 1) {
            CK(cw_k_add_rmsnorm(C, dh, NULL, dnw, dxr, n_in, n_in, nt, 1e-6f, &E));
            for (int i = 0; i < N; i++)
                CK(cw_k_matmul(C, &W[i], dxr, n_in, nt, dr[i], ldy[i], false, NULL, scr, &E));
            /* x given, as the norm of h, the same with x unread; each
             * with the second group on the side stream and after the first */
            for (int vf = 0; vf < 6; vf++) {
                const int v = vf % 3;
                cw_cuda_set_fork(C, vf < 3);
                const size_t xb = sizeof(float) * n_in * nt;
                CK(cw_cuda_memset(C, dx, v == 2 ? 0xFF : 0, xb, &E));
                for (int i = 0; i < N; i++)
                    CK(cw_cuda_memset(C, dy[i], 0xFF, sizeof(float) * rows[i] * nt, &E));
                if (v == 0) {
                    CK(cw_k_matmul_multi(C, N, Wp, dxr, n_in, nt, dy, ldy, scr, &E));
                } else if (v == 1) {
                    CK(cw_k_matmul_multi_norm(C, N, Wp, &nin, dx, n_in, nt, dy, ldy, scr, &E));
                    same &= dev_same(dx, dxr, xb, a, b);
                } else {
                    CK(cw_k_matmul_multi_norm(C, N, Wp, &nun, dx, n_in, nt, dy, ldy, scr, &E));
                    const int f = cw_k_norm_fuses(C, &W[0], 0, nt);
                    fused &= f == (n_in <= 5120);
                    if (f) {
                        down(a, dx, xb);
                        memset(b, 0xFF, xb);
                        unread &= !memcmp(a, b, xb);
                    } else {
                        unread &= dev_same(dx, dxr, xb, a, b);
                    }
                }
                for (int i = 0; i < N; i++)
                    same &= dev_same(dy[i], dr[i], sizeof(float) * rows[i] * nt, a, b);
            }
        }
        for (int i = 0; i < N; i++) {
            cw_cuda_free(C, (void *)W[i].d_w), cw_cuda_free(C, dy[i]), cw_cuda_free(C, dr[i]);
            hmat_free(&m[i]);
        }
        cw_cuda_free(C, scr);
    }
    cw_cuda_set_fork(C, true);
    ok(same, "a q6_K group and a q4_K group x %lld, both orders, 1 and 5 tokens, x given, as "
       "the norm of h and so with x unread, the second group forked to the side stream and "
       "not: every output and x bit-equal to add_rmsnorm + each matmul", (long long)n_in);
    ok(unread && fused, "... with x unread: x left as it was where the norm is fused (%s), "
       "written otherwise", n_in <= 5120 ? "it is" : "it is not, x too wide");
    norm_io_free(&io);
}

/* The Q8_K quantiser's corner cases, bit-equal to the CPU's: an all-zero
 * block (d = 0), ties of |x| between signs (the first wins, so the scale's
 * sign follows it), a block of equal values, q rounded to even at .5, and
 * subnormals beside a tie of the largest |x| (ordered by its bits in
 * the warp reductions' form; the largest normal, so that the scale is
 * finite). At n_in 1280 each block of the product quantises x (one token:
 * on sm_90 gemv_stream_kernel, whose copy takes the reductions); at 4352
 * (17 blocks) with scratch, xq_kernel once (the reductions from sm_80 on). */
static void check_q8k_edges_at(enum cw_qtype type, int64_t n_in, int once)
{
    struct hmat m;
    const int64_t n_out = 2400;
    if (!cw_k_q8k(C, type, n_in, n_out)) {
        skip("%s %lld rows: not the Q8_K path (cw_k_q8k)", cw_qtype_name(type),
             (long long)n_out);
        return;
    }
    hmat_make(&m, type, n_in, n_out);
    float *x = malloc(sizeof(float) * n_in), *y = malloc(sizeof(float) * n_out);
    fill_x(x, n_in);
    for (int i = 0; i < 256; i++)
        x[i] = 0.0f, x[1024 + i] = 1.0f; /* block 0 zero, block 4 all equal */
    x[256 + 10] = -3.5f, x[256 + 200] = 3.5f; /* block 1: tie, negative first */
    x[512 + 0] = 4.0f, x[512 + 255] = -4.0f;  /* block 2: tie, positive first */
    x[768 + 3] = -127.0f, x[768 + 4] = 2.5f, x[768 + 5] = 3.5f, x[768 + 6] = -0.5f; /* halves */
    if (n_in >= 1536) { /* block 5: subnormals, the largest two near them, tied, negative first */
        for (int i = 0; i < 256; i++)
            x[1280 + i] = ldexpf((float)(i % 13 + 1), -140) * (i & 1 ? -1.0f : 1.0f);
        x[1280 + 77] = -ldexpf(1.0f, -120), x[1280 + 90] = ldexpf(1.0f, -120);
    }
    void *dw = dalloc(m.rb * n_out);
    float *dx = dalloc(sizeof(float) * n_in), *dy = dalloc(sizeof(float) * n_out);
    up(dw, m.q, m.rb * n_out);
    up(dx, x, sizeof(float) * n_in);
    struct cw_k_mat W = {type, dw, m.rb, 0, n_in, n_out};
    const size_t ns = once ? cw_k_matmul_scratch(&W, 1) : 0;
    void *scr = ns ? dalloc(ns) : NULL;
    CK(cw_k_matmul(C, &W, dx, n_in, 1, dy, n_out, false, NULL, scr, &E));
    down(y, dy, sizeof(float) * n_out);
    void *xq = malloc(cw_cpu_act_bytes(type, n_in));
    cw_cpu_quantize_act(type, x, xq, n_in);
    int same = 1;
    for (int64_t r = 0; r < n_out; r++) {
        float c = cw_cpu_vec_dot(type, n_in, m.q + r * m.rb, xq);
        same &= !memcmp(&c, &y[r], 4);
    }
    ok(same && (!once || ns),
       "gemv %s x %lld (%s): zero block, sign ties, equal values, halves%s: bit-equal to the CPU",
       cw_qtype_name(type), (long long)n_in, once ? "x quantised once" : "per block",
       n_in >= 1536 ? ", subnormals" : "");
    free(xq), free(x), free(y);
    cw_cuda_free(C, dw), cw_cuda_free(C, dx), cw_cuda_free(C, dy), cw_cuda_free(C, scr);
    hmat_free(&m);
}

static void check_q8k_edges(enum cw_qtype type)
{
    check_q8k_edges_at(type, 1280, 0);
    check_q8k_edges_at(type, 4352, 1);
}

/* x quantised once for all blocks (a wide Q8_K product given scratch:
 * xq_kernel) against each block quantising its own (no scratch): bit-equal,
 * for 1, 3 and 9 tokens (token groups of 8) of a matmul and of the K = 1
 * gate/up (the dense FFN's), and equal to the CPU's vec_dot. */
static void check_xq_once(enum cw_qtype type)
{
    const int64_t n_in = 5120, n_out = 2400;
    if (!cw_k_q8k(C, type, n_in, n_out)) {
        skip("%s %lld rows: not the Q8_K path (cw_k_q8k)", cw_qtype_name(type),
             (long long)n_out);
        return;
    }
    enum { NT = 9 };
    struct hmat m, u;
    hmat_make(&m, type, n_in, n_out);
    hmat_make(&u, type, n_in, n_out);
    void *dw = dalloc(m.rb * n_out), *du = dalloc(u.rb * n_out);
    up(dw, m.q, m.rb * n_out);
    up(du, u.q, u.rb * n_out);
    struct cw_k_mat W = {type, dw, m.rb, 0, n_in, n_out}, U = {type, du, u.rb, 0, n_in, n_out};
    const size_t ns = cw_k_matmul_scratch(&W, NT);
    float *x = malloc(sizeof(float) * n_in * NT), *a = malloc(sizeof(float) * n_out * NT),
          *b = malloc(sizeof(float) * n_out * NT);
    fill_x(x, n_in * NT);
    float *dx = dalloc(sizeof(float) * n_in * NT), *dy = dalloc(sizeof(float) * n_out * NT);
    int32_t zero[NT] = {0};
    int32_t *dz = dalloc(sizeof zero);
    up(dz, zero, sizeof zero);
    void *scr = ns ? dalloc(ns) : NULL;
    up(dx, x, sizeof(float) * n_in * NT);
    int same = 1, cpu = 1;
    static const int nts[] = {1, 3, NT};
    for (int k = 0; k < 3; k++) {
        const int nt = nts[k];
        for (int g = 0; g < 2; g++) { /* the matmul, then the K = 1 gate/up */
            if (g == 0)
                CK(cw_k_matmul(C, &W, dx, n_in, nt, dy, n_out, false, NULL, NULL, &E));
            else
                CK(cw_k_moe_gate_up(C, &W, &U, dx, dz, 1, nt, dy, NULL, &E));
            down(a, dy, sizeof(float) * n_out * nt);
            if (g == 0)
                CK(cw_k_matmul(C, &W, dx, n_in, nt, dy, n_out, false, NULL, scr, &E));
            else /* no ids: expert 0, its first weights read before the wait */
                CK(cw_k_moe_gate_up(C, &W, &U, dx, NULL, 1, nt, dy, scr, &E));
            down(b, dy, sizeof(float) * n_out * nt);
            same &= !memcmp(a, b, sizeof(float) * n_out * nt);
        }
    }
    /* the matmul at 9 tokens (b holds the gate/up now: redo it) against the CPU */
    CK(cw_k_matmul(C, &W, dx, n_in, NT, dy, n_out, false, NULL, scr, &E));
    down(b, dy, sizeof(float) * n_out * NT);
    void *xq = malloc(cw_cpu_act_bytes(type, n_in));
    for (int t = 0; t < NT; t++) {
        cw_cpu_quantize_act(type, x + t * n_in, xq, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            float c = cw_cpu_vec_dot(type, n_in, m.q + r * m.rb, xq);
            cpu &= !memcmp(&c, &b[t * n_out + r], 4);
        }
    }
    /* the gate/up at 9 tokens against the CPU: g and u are its vec_dot
     * bits, act = silu(g) u within act's own roundings (8 ulp, check_moe) */
    CK(cw_k_moe_gate_up(C, &W, &U, dx, NULL, 1, NT, dy, scr, &E));
    down(b, dy, sizeof(float) * n_out * NT);
    int gu_bad = 0;
    for (int t = 0; t < NT; t++) {
        cw_cpu_quantize_act(type, x + t * n_in, xq, n_in);
        for (int64_t r = 0; r < n_out; r++) {
            double g = cw_cpu_vec_dot(type, n_in, m.q + r * m.rb, xq);
            double uu = cw_cpu_vec_dot(type, n_in, u.q + r * u.rb, xq);
            double ref = g / (1 + exp(-g)) * uu, tol = 8 * ldexp(fabs(ref), -24) + 1e-30;
            if (!(fabs(b[t * n_out + r] - ref) <= tol)) {
                if (gu_bad < 3)
                    note("gate_up t %d r %lld: got %.9g want %.9g", t, (long long)r,
                         b[t * n_out + r], ref);
                gu_bad++;
            }
        }
    }
    ok(ns > 0 && same && cpu && gu_bad == 0,
       "%s %lldx%lld: x quantised once (%zu bytes of scratch) = per block, for the matmul and "
       "the K = 1 gate/up at 1, 3, 9 tokens (ids and none); = the CPU's vec_dot (gate/up: %d "
       "bad)",
       cw_qtype_name(type), (long long)n_out, (long long)n_in, ns, gu_bad);
    struct cw_err e2 = {0};
    ok(cw_k_moe_gate_up(C, &W, &U, dx, NULL, 2, 1, dy, scr, &e2) != 0 && e2.msg[0],
       "moe_gate_up without ids and K = 2: refused (%s)", e2.msg);
    free(xq), free(x), free(a), free(b);
    cw_cuda_free(C, dw), cw_cuda_free(C, du), cw_cuda_free(C, dx), cw_cuda_free(C, dy);
    cw_cuda_free(C, dz), cw_cuda_free(C, scr);
    hmat_free(&m), hmat_free(&u);
}

/* The flat kernels' chunks whose blocks do not lie back to back (copied
 * lane by lane): rows padded by 48 bytes in one launch with an unpadded
 * matrix after it, whose first rows share a chunk with the padded one's
 * last (13 blocks a row: 2200 rows end mid-chunk); each matrix's outputs
 * bit-equal to its own launch's, unpadded, at 1 and 3 tokens. */
static void check_long_scatter(enum cw_qtype type)
{
    enum { IN = 3328, R0 = 2200, R1 = 2203, PAD = 48, NT = 3 };
    struct hmat m0, m1;
    hmat_make(&m0, type, IN, R0);
    hmat_make(&m1, type, IN, R1);
    const size_t rbp = m0.rb + PAD;
    uint8_t *padded = calloc(R0, rbp);
    for (int64_t r = 0; r < R0; r++)
        memcpy(padded + r * rbp, m0.q + r * m0.rb, m0.rb);
    void *d0 = dalloc(m0.rb * R0), *dp = dalloc(rbp * R0), *d1 = dalloc(m1.rb * R1);
    up(d0, m0.q, m0.rb * R0);
    up(dp, padded, rbp * R0);
    up(d1, m1.q, m1.rb * R1);
    struct cw_k_mat W0 = {type, d0, m0.rb, 0, IN, R0}, WP = {type, dp, rbp, 0, IN, R0},
                    W1 = {type, d1, m1.rb, 0, IN, R1};
    const struct cw_k_mat *Wp[2] = {&WP, &W1};
    float *x = malloc(sizeof(float) * IN * NT), *a = malloc(sizeof(float) * R1 * NT),
          *b = malloc(sizeof(float) * R1 * NT);
    fill_x(x, IN * NT);
    float *dx = dalloc(sizeof(float) * IN * NT), *dy[2], *dr = dalloc(sizeof(float) * R1 * NT);
    dy[0] = dalloc(sizeof(float) * R0 * NT), dy[1] = dalloc(sizeof(float) * R1 * NT);
    up(dx, x, sizeof(float) * IN * NT);
    size_t ns = cw_k_matmul_scratch(&W1, NT);
    void *scr = ns ? dalloc(ns) : NULL;
    int64_t ldy[2] = {R0, R1};
    int same = 1;
    for (int nt = 1; nt <= NT; nt += NT - 1) {
        CK(cw_k_matmul_multi(C, 2, Wp, dx, IN, nt, dy, ldy, scr, &E));
        for (int i = 0; i < 2; i++) {
            const int64_t R = i ? R1 : R0;
            CK(cw_k_matmul(C, i ? &W1 : &W0, dx, IN, nt, dr, R, false, NULL, scr, &E));
            down(a, dy[i], sizeof(float) * R * nt);
            down(b, dr, sizeof(float) * R * nt);
            same &= !memcmp(a, b, sizeof(float) * R * nt);
        }
    }
    ok(same, "%s %d-wide: padded rows and a segment boundary mid-chunk = each matrix alone, at "
             "1 and 3 tokens",
       cw_qtype_name(type), IN);
    free(x), free(a), free(b), free(padded);
    cw_cuda_free(C, d0), cw_cuda_free(C, dp), cw_cuda_free(C, d1), cw_cuda_free(C, dx);
    cw_cuda_free(C, dy[0]), cw_cuda_free(C, dy[1]), cw_cuda_free(C, dr), cw_cuda_free(C, scr);
    hmat_free(&m0), hmat_free(&m1);
}

/* The flat kernels walking several row groups per block, each group's
 * first chunk asked for through the previous group's sums: 20000 rows of
 * 68 blocks (the 27B's ffn_down width), tiled from 997 distinct rows (so
 * that the CPU's reference stays cheap; a row read from a wrong group
 * shows). The K = 1 gate/up without ids (its first chunk before the PDL
 * wait) at 2 tokens: g and u the CPU's vec_dot bits, act = silu(g) u within
 * 8 ulp (check_xq_once's bound); the matmul at 8 tokens: the CPU's bits. */
static void check_row_groups(enum cw_qtype type)
{
    enum { IN = 17408, P = 997, R = 20000, NT = 8, NG = 2 };
    struct hmat g, u;
    hmat_make(&g, type, IN, P);
    hmat_make(&u, type, IN, P);
    uint8_t *tg = malloc(g.rb * R), *tu = malloc(u.rb * R);
    for (int64_t r = 0; r < R; r++) {
        memcpy(tg + r * g.rb, g.q + (r % P) * g.rb, g.rb);
        memcpy(tu + r * u.rb, u.q + (r % P) * u.rb, u.rb);
    }
    void *dg = dalloc(g.rb * R), *du = dalloc(u.rb * R);
    up(dg, tg, g.rb * R);
    up(du, tu, u.rb * R);
    struct cw_k_mat G = {type, dg, g.rb, 0, IN, R}, U = {type, du, u.rb, 0, IN, R};
    float *x = malloc(sizeof(float) * IN * NT), *y = malloc(sizeof(float) * R * NT);
    fill_x(x, IN * NT);
    float *dx = dalloc(sizeof(float) * IN * NT), *dy = dalloc(sizeof(float) * R * NT);
    up(dx, x, sizeof(float) * IN * NT);
    const size_t ns = cw_k_matmul_scratch(&G, NT);
    void *scr = ns ? dalloc(ns) : NULL;
    void *xq = malloc(cw_cpu_act_bytes(type, IN));
    float *cg = malloc(sizeof(float) * P * NT), *cu = malloc(sizeof(float) * P * NT);
    for (int t = 0; t < NT; t++) {
        cw_cpu_quantize_act(type, x + t * IN, xq, IN);
        for (int64_t r = 0; r < P; r++) {
            cg[t * P + r] = cw_cpu_vec_dot(type, IN, g.q + r * g.rb, xq);
            cu[t * P + r] = cw_cpu_vec_dot(type, IN, u.q + r * u.rb, xq);
        }
    }
    CK(cw_k_moe_gate_up(C, &G, &U, dx, NULL, 1, NG, dy, scr, &E));
    down(y, dy, sizeof(float) * R * NG);
    int gu_bad = 0, mm_bad = 0;
    for (int t = 0; t < NG; t++)
        for (int64_t r = 0; r < R; r++) {
            const double gv = cg[t * P + r % P], uv = cu[t * P + r % P];
            const double ref = gv / (1 + exp(-gv)) * uv, tol = 8 * ldexp(fabs(ref), -24) + 1e-30;
            if (!(fabs(y[t * R + r] - ref) <= tol)) {
                if (gu_bad < 3)
                    note("gate_up t %d r %lld: got %.9g want %.9g", t, (long long)r, y[t * R + r],
                         ref);
                gu_bad++;
            }
        }
    CK(cw_k_matmul(C, &G, dx, IN, NT, dy, R, false, NULL, scr, &E));
    down(y, dy, sizeof(float) * R * NT);
    for (int t = 0; t < NT; t++)
        for (int64_t r = 0; r < R; r++)
            mm_bad += memcmp(&y[t * R + r], &cg[t * P + r % P], sizeof(float)) != 0;
    ok(gu_bad == 0 && mm_bad == 0,
       "%s %d x %d, several row groups a block: gate/up without ids at %d tokens (%d bad), the "
       "matmul at %d = the CPU's bits (%d bad)",
       cw_qtype_name(type), R, IN, NG, gu_bad, NT, mm_bad);
    free(x), free(y), free(xq), free(cg), free(cu), free(tg), free(tu);
    cw_cuda_free(C, dg), cw_cuda_free(C, du), cw_cuda_free(C, dx), cw_cuda_free(C, dy);
    cw_cuda_free(C, scr);
    hmat_free(&g), hmat_free(&u);
}

/* Launches past 65,536 rows at one token (the LM heads: gemv_stream_kernel,
 * each block streaming its share of the rows through a ring of stages):
 * rows tiled from P distinct ones (the CPU's reference stays cheap; a row
 * read from a wrong stage shows), widths whose rows are 16-byte multiples
 * (8 blocks) or not (20 and 13 blocks of Q6_K: stages at any even offset),
 * rows of 2 blocks (a stage of fewer units than threads), a row count no
 * stage divides. At one token the CPU's vec_dot bits, and
 * with add and scale the bits of the same call at two tokens (another
 * kernel), token 0. */
static void check_stream(enum cw_qtype type, int64_t IN)
{
    enum { P = 997, R = 70001 };
    struct hmat m;
    hmat_make(&m, type, IN, P);
    uint8_t *tw = malloc(m.rb * R);
    for (int64_t r = 0; r < R; r++)
        memcpy(tw + r * m.rb, m.q + (r % P) * m.rb, m.rb);
    void *dw = dalloc(m.rb * R);
    up(dw, tw, m.rb * R);
    struct cw_k_mat W = {type, dw, m.rb, 0, IN, R};
    float *x = malloc(sizeof(float) * IN * 2), *y = malloc(sizeof(float) * R * 2);
    float *y2 = malloc(sizeof(float) * R * 2), *h0 = malloc(sizeof(float) * R * 2), sl[2];
    fill_x(x, IN * 2);
    for (int64_t i = 0; i < R * 2; i++)
        h0[i] = gauss();
    sl[0] = 0.7f, sl[1] = -1.3f;
    float *dx = dalloc(sizeof(float) * IN * 2), *dy = dalloc(sizeof(float) * R * 2);
    float *ds = dalloc(sizeof sl);
    up(dx, x, sizeof(float) * IN * 2);
    up(ds, sl, sizeof sl);
    const size_t ns = cw_k_matmul_scratch(&W, 2);
    void *scr = ns ? dalloc(ns) : NULL;
    void *xq = malloc(cw_cpu_act_bytes(type, IN));
    cw_cpu_quantize_act(type, x, xq, IN);
    float c[P];
    for (int64_t r = 0; r < P; r++)
        c[r] = cw_cpu_vec_dot(type, IN, m.q + r * m.rb, xq);
    CK(cw_k_matmul(C, &W, dx, IN, 1, dy, R, false, NULL, scr, &E));
    down(y, dy, sizeof(float) * R);
    int bad = 0;
    for (int64_t r = 0; r < R; r++)
        if (memcmp(&y[r], &c[r % P], 4)) {
            if (bad < 3)
                note("stream r %lld: got %.9g, the CPU %.9g", (long long)r, y[r], c[r % P]);
            bad++;
        }
    /* add and scale: one token, against token 0 of a two-token call */
    up(dy, h0, sizeof(float) * R * 2);
    CK(cw_k_matmul(C, &W, dx, IN, 1, dy, R, true, ds, scr, &E));
    down(y, dy, sizeof(float) * R);
    up(dy, h0, sizeof(float) * R * 2);
    CK(cw_k_matmul(C, &W, dx, IN, 2, dy, R, true, ds, scr, &E));
    down(y2, dy, sizeof(float) * R * 2);
    const int same = !memcmp(y, y2, sizeof(float) * R);
    ok(bad == 0 && same,
       "%s %d x %lld at one token: the CPU's bits (%d bad); added and scaled = token 0 of two",
       cw_qtype_name(type), R, (long long)IN, bad);
    free(x), free(y), free(y2), free(h0), free(xq), free(tw);
    cw_cuda_free(C, dw), cw_cuda_free(C, dx), cw_cuda_free(C, dy), cw_cuda_free(C, ds);
    cw_cuda_free(C, scr);
    hmat_free(&m);
}

/* Q8_K products whose rows hold 8 blocks or more (the flat kernels): 68
 * and 13 blocks, a row count that leaves the last row group short, one and
 * two token groups, add and scale, batch invariance; the CPU's vec_dot
 * bits where no epilogue rounds. */
static void check_long_rows(enum cw_qtype type)
{
    static const struct { int64_t n_in, n_out, n_tok; int add, scale; } S[] = {
        {17408, 2400, 3, 0, 0}, /* the 27B's ffn_down width */
        {3328, 2403, 9, 0, 0},
        {3328, 2403, 5, 1, 1},
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        struct hmat m;
        hmat_make(&m, type, S[i].n_in, S[i].n_out);
        void *dw = dalloc(m.rb * m.n_out);
        up(dw, m.q, m.rb * m.n_out);
        check_matmul(&m, dw, S[i].n_tok, m.n_in, m.n_out, S[i].add, S[i].scale, 0, "gemv");
        if (i == 1)
            check_invariance(&m, dw);
        cw_cuda_free(C, dw);
        hmat_free(&m);
    }
}

static void test_type(enum cw_qtype type)
{
    const struct cw_qtype_traits *tr = cw_qtype_traits(type);
    ok(cw_k_supports(type), "%s supported", tr->name);
    int64_t qk = tr->block_elems < 32 ? 256 : tr->block_elems; /* float types: kernel blocks of 256 */
    struct { int64_t n_in, n_out, n_tok, ldx_pad, ldy_pad; int add, scale, spread; } S[] = {
        {qk, 1, 1, 0, 0, 0, 0, 0},        /* one block, one row */
        {qk * 5, 13, 3, 8, 3, 1, 0, 0},   /* partial lane round, odd rows, strides, add */
        {2048, 37, 8, 0, 0, 0, 1, 0},     /* two lane rounds, scaled (shared expert) */
        {2048, 64, 2, 4, 0, 1, 1, 0},
        {qk * 3, 9, 9, 0, 5, 0, 0, 0},    /* two token groups */
        {1024, 19, 33, 0, 0, 1, 1, 0},    /* GEMM regime */
        {2048, 70, 72, 4, 2, 0, 0, 0},
        {qk * 4, 40, 45, 0, 0, 1, 0, 1},  /* GEMM, tokens' x spread over 2^24 */
        {qk * 4, 2300, 1, 0, 0, 1, 0, 0}, /* long matrices: two rows per warp */
        {qk * 2, 2200, 3, 0, 0, 0, 1, 0},
        {25600, 5, 2, 0, 0, 1, 0, 0},     /* x too large to stage: read through L1 */
        {90112, 3, 2, 0, 0, 0, 0, 0},     /* K-quants: x's Q8_K copy past XS_MAX, f32 x */
        {qk * 8, 600, 3, 0, 2, 1, 1, 0},  /* K-quants: Q8_K x, 600 rows, strides */
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        if (S[i].n_in % qk)
            continue;
        struct hmat m;
        hmat_make(&m, type, S[i].n_in, S[i].n_out);
        void *dw = dalloc(m.rb * m.n_out);
        up(dw, m.q, m.rb * m.n_out);
        check_matmul(&m, dw, S[i].n_tok, m.n_in + S[i].ldx_pad, m.n_out + S[i].ldy_pad, S[i].add,
                     S[i].scale, S[i].spread, S[i].n_tok > GEMV_MAX_TOK ? "gemm" : "gemv");
        if (i == 1 || i == 2)
            check_dequant(&m, dw);
        if (i == 2 || i == 9 || i == 12) /* the K-quants: Q8_K x (two), f32 x */
            check_invariance(&m, dw);
        cw_cuda_free(C, dw);
        hmat_free(&m);
    }
    if (type == CW_TYPE_Q4_K || type == CW_TYPE_Q5_K || type == CW_TYPE_Q6_K) {
        ok(cw_k_q8k(C, type, 5120, 17408) && cw_k_q8k(C, type, 2048, 32) &&
               cw_k_q8k(C, type, 2048, 512) && cw_k_q8k(C, type, 89600, 7) &&
               !cw_k_q8k(C, type, 90112, 17408) && cw_k_moe_q8k(C, type, 2048, 512, 8) &&
               !cw_k_moe_q8k(C, type, 90112, 512, 8),
           "%s: Q8_K x up to 89600 wide, any rows, experts too; f32 x past XS_MAX",
           cw_qtype_name(type));
        check_q8k_edges(type);
        check_xq_once(type);
        check_long_rows(type);
        check_long_scatter(type);
        check_row_groups(type);
        check_stream(type, 2048);
        check_stream(type, 5120);
        check_stream(type, 3328);
        check_stream(type, 512); /* 2 blocks a row: a stage's 32 rows, 64 units */
    }
}

/* ---- routed experts ----------------------------------------------------- */

/* X experts stacked; only the n_used experts in `used` hold real weights, the
 * others NaN scales (0xFF bytes), so that reading a wrong expert shows. */
struct hexp {
    struct hmat m[32];
    int used[32], n_used;
    size_t eb;
    void *d;
};

static void hexp_make(struct hexp *h, enum cw_qtype type, int X, int64_t n_in, int64_t n_out,
                      const int *used, int n_used)
{
    h->n_used = n_used;
    h->eb = cw_qtype_row_bytes(type, n_in) * n_out;
    h->d = dalloc(h->eb * X);
    CK(cw_cuda_memset(C, h->d, 0xFF, h->eb * X, &E));
    for (int i = 0; i < n_used; i++) {
        h->used[i] = used[i];
        hmat_make(&h->m[i], type, n_in, n_out);
        up((char *)h->d + h->eb * used[i], h->m[i].q, h->eb);
    }
}

static const float *hexp_w(const struct hexp *h, int e)
{
    for (int i = 0; i < h->n_used; i++)
        if (h->used[i] == e)
            return h->m[i].w;
    return NULL;
}

/* F = 512 with K <= 8 takes the experts-across-lanes down kernel, other F
 * the generic one. */
static void check_moe(enum cw_qtype tg, enum cw_qtype td, int64_t n_tok, int64_t F, int K)
{
    const int X = 256;
    const int64_t E_ = 2048;
    int used[12];
    for (int i = 0; i < 12; i++)
        used[i] = (37 * i + 5) % X;
    int n_used = n_tok == 1 || K == 1 ? 6 : 12;
    struct hexp G, U, D;
    hexp_make(&G, tg, X, E_, F, used, n_used);
    hexp_make(&U, tg, X, E_, F, used, n_used);
    hexp_make(&D, td, X, F, E_, used, n_used);
    int32_t *ids = malloc(sizeof(int32_t) * n_tok * K);
    float *wts = malloc(sizeof(float) * n_tok * K), *x = malloc(sizeof(float) * n_tok * E_);
    for (int64_t p = 0; p < n_tok * K; p++) {
        ids[p] = used[(int)(unif() * n_used)]; /* repeats within a token too */
        wts[p] = (float)unif();
    }
    fill_x(x, n_tok * E_);
    float *h0 = malloc(sizeof(float) * n_tok * E_), *h = malloc(sizeof(float) * n_tok * E_);
    fill_x(h0, n_tok * E_);
    float *act = malloc(sizeof(float) * n_tok * K * F);
    int32_t *d_ids = dalloc(sizeof(int32_t) * n_tok * K);
    float *d_wts = dalloc(sizeof(float) * n_tok * K), *d_x = dalloc(sizeof(float) * n_tok * E_);
    float *d_h = dalloc(sizeof(float) * n_tok * E_), *d_act = dalloc(sizeof(float) * n_tok * K * F);
    up(d_ids, ids, sizeof(int32_t) * n_tok * K);
    up(d_wts, wts, sizeof(float) * n_tok * K);
    up(d_x, x, sizeof(float) * n_tok * E_);
    up(d_h, h0, sizeof(float) * n_tok * E_);
    fill_nan(act, n_tok * K * F);
    up(d_act, act, sizeof(float) * n_tok * K * F);
    struct cw_k_mat mg = {tg, G.d, cw_qtype_row_bytes(tg, E_), G.eb, E_, F};
    struct cw_k_mat mu = {tg, U.d, cw_qtype_row_bytes(tg, E_), U.eb, E_, F};
    struct cw_k_mat md = {td, D.d, cw_qtype_row_bytes(td, F), D.eb, F, E_};
    size_t ns = cw_k_moe_scratch(&mg, X, K, n_tok);
    void *scr = ns ? dalloc(ns) : NULL;
    CK(cw_k_moe_gate_up(C, &mg, &mu, d_x, d_ids, K, n_tok, d_act, scr, &E));
    down(act, d_act, sizeof(float) * n_tok * K * F);
    /* gate_up: g and u each within the GEMV bound; act = silu(g) u, whose
     * error is |silu'(g)| e_g |u| + |silu(g)| e_u (silu' <= 1.1) + 4 ulp.
     * Q8_K x (cw_k_moe_q8k): g and u are the CPU's vec_dot bits, so only
     * act's own roundings remain: expf (2 ulp), 1 + e, the division, the
     * product: 8 ulp. */
    double relg = (32.0 * 2 + 5) * ldexp(1, -24);
    const int q8k = cw_k_moe_q8k(C, tg, E_, F, K);
    void *xq = q8k ? malloc(cw_cpu_act_bytes(tg, E_)) : NULL;
    int bad = 0;
    for (int64_t p = 0; p < n_tok * K; p++) {
        if (q8k) {
            const struct hmat *gm = NULL, *um = NULL;
            for (int i = 0; i < n_used; i++)
                if (used[i] == ids[p])
                    gm = &G.m[i], um = &U.m[i];
            cw_cpu_quantize_act(tg, x + (p / K) * E_, xq, E_);
            for (int64_t r = 0; r < F; r++) {
                double g = cw_cpu_vec_dot(tg, E_, gm->q + r * gm->rb, xq);
                double u = cw_cpu_vec_dot(tg, E_, um->q + r * um->rb, xq);
                double ref = g / (1 + exp(-g)) * u, tol = 8 * ldexp(fabs(ref), -24) + 1e-30;
                float got = act[p * F + r];
                if (!(fabs(got - ref) <= tol)) {
                    if (bad < 3)
                        note("gate_up (q8_K) pair %lld r %lld: got %.9g want %.9g", (long long)p,
                             (long long)r, got, ref);
                    bad++;
                }
            }
            continue;
        }
        const float *gw = hexp_w(&G, ids[p]), *uw = hexp_w(&U, ids[p]);
        const float *xt = x + (p / K) * E_;
        for (int64_t r = 0; r < F; r++) {
            double g = 0, ga = 0, u = 0, ua = 0;
            for (int64_t i = 0; i < E_; i++) {
                double a = (double)gw[r * E_ + i] * xt[i], b = (double)uw[r * E_ + i] * xt[i];
                g += a, ga += fabs(a), u += b, ua += fabs(b);
            }
            double sg = g / (1 + exp(-g)), ref = sg * u;
            double tol = 1.1 * relg * ga * (fabs(u) + relg * ua) + fabs(sg) * relg * ua +
                         8 * ldexp(fabs(ref), -24) + 1e-30;
            float got = act[p * F + r];
            if (!(fabs(got - ref) <= tol)) {
                if (bad < 3)
                    note("gate_up pair %lld r %lld: got %.9g want %.9g", (long long)p, (long long)r,
                         got, ref);
                bad++;
            }
        }
    }
    ok(bad == 0, "moe_gate_up %s K=%d X=%d %lldx%lld n_tok %lld%s: %d bad", cw_qtype_name(tg), K, X,
       (long long)F, (long long)E_, (long long)n_tok, q8k ? " (q8_K x, = the CPU's dots)" : "", bad);
    free(xq);
    /* down on the GPU's act (so only the down error is measured) */
    CK(cw_k_moe_down(C, &md, d_act, d_ids, d_wts, K, n_tok, d_h, scr, &E));
    down(h, d_h, sizeof(float) * n_tok * E_);
    double reld = (32.0 * ceil(F / 1024.0) + 5) * ldexp(1, -24);
    bad = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < E_; r++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                const float *dw = hexp_w(&D, ids[t * K + k]) + r * F;
                const float *a = act + (t * K + k) * F;
                double d = 0, da = 0;
                for (int64_t i = 0; i < F; i++)
                    d += (double)dw[i] * a[i], da += fabs((double)dw[i] * a[i]);
                s += wts[t * K + k] * d;
                sa += wts[t * K + k] * (da * (1 + reld) + fabs(d));
            }
            double ref = h0[t * E_ + r] + s;
            /* dot bounds, K fma roundings (<= 2^-24 of the partial sums) and the add */
            double tol = reld * sa + (K + 1) * ldexp(sa + fabs(h0[t * E_ + r]), -24) + 1e-30;
            float got = h[t * E_ + r];
            if (!(fabs(got - ref) <= tol)) {
                if (bad < 3)
                    note("down t %lld r %lld: got %.9g want %.9g (tol %.3g)", (long long)t,
                         (long long)r, got, ref, tol);
                bad++;
            }
        }
    ok(bad == 0, "moe_down %s K=%d %lldx%lld n_tok %lld (h += Σ_k w_k D_e act): %d bad",
       cw_qtype_name(td), K, (long long)E_, (long long)F, (long long)n_tok, bad);
    /* batch invariance of the experts: token 0 alone equals token 0 of the batch */
    if (n_tok > 1) {
        float *a1 = malloc(sizeof(float) * K * F), *ab = malloc(sizeof(float) * K * F);
        memcpy(ab, act, sizeof(float) * K * F);
        CK(cw_k_moe_gate_up(C, &mg, &mu, d_x, d_ids, K, 1, d_act, scr, &E));
        down(a1, d_act, sizeof(float) * K * F);
        ok(!memcmp(a1, ab, sizeof(float) * K * F), "moe_gate_up: token 0 alone = in the batch");
        free(ab), free(a1);
    }
    cw_cuda_free(C, d_ids), cw_cuda_free(C, d_wts), cw_cuda_free(C, d_x), cw_cuda_free(C, d_h);
    cw_cuda_free(C, d_act), cw_cuda_free(C, scr);
    cw_cuda_free(C, G.d), cw_cuda_free(C, U.d), cw_cuda_free(C, D.d);
    for (int i = 0; i < n_used; i++)
        hmat_free(&G.m[i]), hmat_free(&U.m[i]), hmat_free(&D.m[i]);
    free(ids), free(wts), free(x), free(h0), free(h), free(act);
}

/* The decode launches with the shared expert as slot K (cw_k_moe_*_sh):
 * the routed slots' act are the bits of cw_k_moe_gate_up, the shared slot's
 * the bits of the same launch over the shared expert alone (K = 1, id 0);
 * h against a double reference of h0 + Σ_k w_k D_e act_k + σ(l) SD act_K on
 * the GPU's act, within the down bound plus K + 2 roundings. */
static void check_moe_shared(enum cw_qtype tg, enum cw_qtype td, int64_t n_tok, int K)
{
    const int X = 256, S1 = K + 1;
    const int64_t E_ = 2048, F = 512;
    int used[12];
    for (int i = 0; i < 12; i++)
        used[i] = (41 * i + 3) % X;
    const int zero = 0;
    struct hexp G, U, D, SG, SU, SD;
    hexp_make(&G, tg, X, E_, F, used, 12);
    hexp_make(&U, tg, X, E_, F, used, 12);
    hexp_make(&D, td, X, F, E_, used, 12);
    hexp_make(&SG, tg, 1, E_, F, &zero, 1);
    hexp_make(&SU, tg, 1, E_, F, &zero, 1);
    hexp_make(&SD, td, 1, F, E_, &zero, 1);
    int32_t *ids = malloc(sizeof(int32_t) * n_tok * K);
    float *wts = malloc(sizeof(float) * n_tok * K), *x = malloc(sizeof(float) * n_tok * E_);
    float *sl = malloc(sizeof(float) * n_tok);
    for (int64_t p = 0; p < n_tok * K; p++) {
        ids[p] = used[(int)(unif() * 12)];
        wts[p] = (float)unif();
    }
    for (int64_t t = 0; t < n_tok; t++)
        sl[t] = 2.0f * gauss();
    fill_x(x, n_tok * E_);
    float *h0 = malloc(sizeof(float) * n_tok * E_), *h = malloc(sizeof(float) * n_tok * E_);
    fill_x(h0, n_tok * E_);
    float *act = malloc(sizeof(float) * n_tok * S1 * F), *ref = malloc(sizeof(float) * n_tok * K * F);
    float *refs = malloc(sizeof(float) * F);
    int32_t *d_ids = dalloc(sizeof(int32_t) * n_tok * K), *d_zero = dalloc(sizeof(int32_t));
    float *d_wts = dalloc(sizeof(float) * n_tok * K), *d_x = dalloc(sizeof(float) * n_tok * E_);
    float *d_sl = dalloc(sizeof(float) * n_tok), *d_h = dalloc(sizeof(float) * n_tok * E_);
    float *d_act = dalloc(sizeof(float) * n_tok * S1 * F), *d_ref = dalloc(sizeof(float) * n_tok * K * F);
    up(d_ids, ids, sizeof(int32_t) * n_tok * K);
    up(d_zero, &zero, sizeof zero);
    up(d_wts, wts, sizeof(float) * n_tok * K);
    up(d_x, x, sizeof(float) * n_tok * E_);
    up(d_sl, sl, sizeof(float) * n_tok);
    up(d_h, h0, sizeof(float) * n_tok * E_);
    struct cw_k_mat mg = {tg, G.d, cw_qtype_row_bytes(tg, E_), G.eb, E_, F};
    struct cw_k_mat mu = {tg, U.d, cw_qtype_row_bytes(tg, E_), U.eb, E_, F};
    struct cw_k_mat md = {td, D.d, cw_qtype_row_bytes(td, F), D.eb, F, E_};
    struct cw_k_mat sg = {tg, SG.d, cw_qtype_row_bytes(tg, E_), 0, E_, F};
    struct cw_k_mat su = {tg, SU.d, cw_qtype_row_bytes(tg, E_), 0, E_, F};
    struct cw_k_mat sd = {td, SD.d, cw_qtype_row_bytes(td, F), 0, F, E_};
    ok(cw_k_moe_shared_fusable(&mg, &md, &sg, &su, &sd, K, n_tok), "shared expert fusable (%s/%s K=%d)",
       cw_qtype_name(tg), cw_qtype_name(td), K);
    CK(cw_k_moe_gate_up_sh(C, &mg, &mu, &sg, &su, d_x, d_ids, K, n_tok, d_act, &E));
    down(act, d_act, sizeof(float) * n_tok * S1 * F);
    CK(cw_k_moe_gate_up(C, &mg, &mu, d_x, d_ids, K, n_tok, d_ref, NULL, &E));
    down(ref, d_ref, sizeof(float) * n_tok * K * F);
    /* the shared slot: on Q8_K x (the routed launch's path, cw_k_moe_q8k)
     * the CPU's dots through act's 8-ulp SwiGLU (as check_moe); else the
     * bits of its own K = 1 launch */
    const int q8k = cw_k_moe_q8k(C, tg, E_, F, K);
    void *xq = q8k ? malloc(cw_cpu_act_bytes(tg, E_)) : NULL;
    int same = 1, sh_bad = 0;
    for (int64_t t = 0; t < n_tok; t++) {
        same &= !memcmp(act + t * S1 * F, ref + t * K * F, sizeof(float) * K * F);
        if (q8k) {
            cw_cpu_quantize_act(tg, x + t * E_, xq, E_);
            for (int64_t r = 0; r < F; r++) {
                double g = cw_cpu_vec_dot(tg, E_, SG.m[0].q + r * SG.m[0].rb, xq);
                double u = cw_cpu_vec_dot(tg, E_, SU.m[0].q + r * SU.m[0].rb, xq);
                double want = g / (1 + exp(-g)) * u;
                sh_bad += !(fabs(act[(t * S1 + K) * F + r] - want) <=
                            8 * ldexp(fabs(want), -24) + 1e-30);
            }
            continue;
        }
        CK(cw_k_moe_gate_up(C, &sg, &su, d_x + t * E_, d_zero, 1, 1, d_ref, NULL, &E));
        down(refs, d_ref, sizeof(float) * F);
        same &= !memcmp(act + (t * S1 + K) * F, refs, sizeof(float) * F);
    }
    free(xq);
    ok(same && sh_bad == 0, "moe_gate_up_sh %s K=%d n_tok %lld: routed slots bit-equal to their "
       "own launch, the shared slot %s (%d off)", cw_qtype_name(tg), K, (long long)n_tok,
       q8k ? "within 8 ulp of the CPU's (q8_K x)" : "bit-equal to its own launch", sh_bad);
    CK(cw_k_moe_down_sh(C, &md, &sd, d_act, d_ids, d_wts, d_sl, K, n_tok, d_h, NULL, &E));
    down(h, d_h, sizeof(float) * n_tok * E_);
    {
        /* with the norm epilogue, twice (the count must come back to zero):
         * h the same bits, y = cw_k_add_rmsnorm's bits */
        float *nw = malloc(sizeof(float) * E_), *y = malloc(sizeof(float) * n_tok * E_),
              *y2 = malloc(sizeof(float) * n_tok * E_), *hh = malloc(sizeof(float) * n_tok * E_);
        for (int64_t i = 0; i < E_; i++)
            nw[i] = 1.0f + 0.1f * gauss();
        float *d_nw = dalloc(sizeof(float) * E_), *d_y = dalloc(sizeof(float) * n_tok * E_);
        float *d_y2 = dalloc(sizeof(float) * n_tok * E_);
        unsigned *d_cnt = dalloc(sizeof(unsigned));
        CK(cw_cuda_memset(C, d_cnt, 0, sizeof(unsigned), &E));
        up(d_nw, nw, sizeof(float) * E_);
        const struct cw_k_norm_next nn = {d_nw, d_y, E_, 1e-6f, d_cnt};
        int same_h = 1, same_y = 1;
        for (int rep = 0; rep < 2; rep++) {
            up(d_h, h0, sizeof(float) * n_tok * E_);
            fill_nan(y, n_tok * E_);
            up(d_y, y, sizeof(float) * n_tok * E_);
            CK(cw_k_moe_down_sh(C, &md, &sd, d_act, d_ids, d_wts, d_sl, K, n_tok, d_h, &nn, &E));
            down(hh, d_h, sizeof(float) * n_tok * E_);
            down(y, d_y, sizeof(float) * n_tok * E_);
            CK(cw_k_add_rmsnorm(C, d_h, NULL, d_nw, d_y2, E_, E_, n_tok, 1e-6f, &E));
            down(y2, d_y2, sizeof(float) * n_tok * E_);
            same_h &= !memcmp(hh, h, sizeof(float) * n_tok * E_);
            same_y &= !memcmp(y, y2, sizeof(float) * n_tok * E_);
        }
        ok(same_h && same_y, "moe_down_sh + norm epilogue (twice): h %s, y %s cw_k_add_rmsnorm's",
           same_h ? "unchanged" : "CHANGED", same_y ? "bit-equal to" : "DIFFERS from");
        cw_cuda_free(C, d_nw), cw_cuda_free(C, d_y), cw_cuda_free(C, d_y2), cw_cuda_free(C, d_cnt);
        free(nw), free(y), free(y2), free(hh);
    }
    const double reld = (32.0 + 5) * ldexp(1, -24);
    int bad = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < E_; r++) {
            double s = 0, sa = 0;
            for (int k = 0; k < S1; k++) {
                const float *dw = k < K ? hexp_w(&D, ids[t * K + k]) + r * F : SD.m[0].w + r * F;
                const float *a = act + (t * S1 + k) * F;
                const double wk = k < K ? wts[t * K + k] : 1.0 / (1.0 + exp(-(double)sl[t]));
                double d = 0, da = 0;
                for (int64_t i = 0; i < F; i++)
                    d += (double)dw[i] * a[i], da += fabs((double)dw[i] * a[i]);
                s += wk * d;
                sa += wk * (da * (1 + reld) + fabs(d));
            }
            const double want = h0[t * E_ + r] + s;
            /* the dots' bound, K fma + σ's product and add + the final add,
             * each <= 2^-24 of its partial sums; σ itself within 4 ulp */
            const double tol = reld * sa + (K + 6) * ldexp(sa + fabs(h0[t * E_ + r]), -24) + 1e-30;
            const float got = h[t * E_ + r];
            if (!(fabs(got - want) <= tol)) {
                if (bad < 3)
                    note("down_sh t %lld r %lld: got %.9g want %.9g (tol %.3g)", (long long)t,
                         (long long)r, got, want, tol);
                bad++;
            }
        }
    ok(bad == 0, "moe_down_sh %s K=%d n_tok %lld (h += Σ_k w_k D_e act + σ(l) SD act): %d bad",
       cw_qtype_name(td), K, (long long)n_tok, bad);
    cw_cuda_free(C, d_ids), cw_cuda_free(C, d_zero), cw_cuda_free(C, d_wts), cw_cuda_free(C, d_x);
    cw_cuda_free(C, d_sl), cw_cuda_free(C, d_h), cw_cuda_free(C, d_act), cw_cuda_free(C, d_ref);
    cw_cuda_free(C, G.d), cw_cuda_free(C, U.d), cw_cuda_free(C, D.d);
    cw_cuda_free(C, SG.d), cw_cuda_free(C, SU.d), cw_cuda_free(C, SD.d);
    for (int i = 0; i < 12; i++)
        hmat_free(&G.m[i]), hmat_free(&U.m[i]), hmat_free(&D.m[i]);
    hmat_free(&SG.m[0]), hmat_free(&SU.m[0]), hmat_free(&SD.m[0]);
    free(ids), free(wts), free(x), free(sl), free(h0), free(h), free(act), free(ref), free(refs);
}

static void check_refusals(void)
{
    struct cw_k_mat W = {CW_TYPE_Q4_K, (void *)(uintptr_t)256, 144, 0, 300, 4};
    float *p = (float *)(uintptr_t)256;
    ok(cw_k_matmul(C, &W, p, 300, 1, p, 4, false, NULL, NULL, &E) == -1,
       "n_in not a multiple of the block refused: %s", E.msg);
    W.n_in = 256, W.row_bytes = 100;
    ok(cw_k_matmul(C, &W, p, 256, 1, p, 4, false, NULL, NULL, &E) == -1, "short rows refused");
    W.row_bytes = 144, W.type = CW_TYPE_Q8_K;
    ok(!cw_k_supports(CW_TYPE_Q8_K) && cw_k_matmul(C, &W, p, 256, 1, p, 4, false, NULL, NULL, &E) == -1,
       "q8_K (an activation format) refused");
    W.type = CW_TYPE_Q4_K;
    ok(cw_k_matmul(C, &W, p + 1, 256, 1, p, 4, false, NULL, NULL, &E) == -1,
       "unaligned x refused");
}

/* ---- benchmark ---------------------------------------------------------- */

struct bench {
    struct cw_k_mat W[256], D[256];
    int n_copies, moe;
    int64_t n_tok;
    void *scratch;
    float *x, *y, *act, *h, *wts;
    int32_t *ids;
};

static int bench_rep(void *ctx, int rep, struct cw_err *err)
{
    struct bench *b = ctx;
    int i = rep % b->n_copies;
    const int32_t *ids = b->ids + 8 * (rep % 64); /* a fresh set of experts per rep */
    if (b->moe == 1)
        return cw_k_moe_gate_up(C, &b->W[i], &b->D[i], b->x, ids, 8, 1, b->act, NULL, err);
    if (b->moe == 2)
        return cw_k_moe_down(C, &b->W[i], b->act, ids, b->wts, 8, 1, b->h, NULL, err);
    if (b->moe == 3) /* the dense FFN's gate/up: K = 1, expert 0 */
        return cw_k_moe_gate_up(C, &b->W[i], &b->D[i], b->x, b->ids + 8 * 64, 1, 1, b->act, NULL,
                                err);
    return cw_k_matmul(C, &b->W[i], b->x, b->W[i].n_in, b->n_tok, b->y, b->W[i].n_out, false,
                       NULL, b->scratch, err);
}

/* Weights rotated over copies beyond 2x L2 (60 MB) so each rep streams from
 * HBM; bytes counted are the weight bytes read (x and y are noise). */
static void bench_one(enum cw_qtype type, int64_t n_in, int64_t n_out, int moe, int64_t n_tok,
                      double peak)
{
    struct bench b = {0};
    b.n_tok = n_tok;
    size_t rb = cw_qtype_row_bytes(type, n_in), bytes = rb * n_out;
    int X = moe == 1 || moe == 2 ? 256 : 1, two = moe == 1 || moe == 3;
    size_t total = bytes * X * (two ? 2 : 1);
    b.n_copies = (int)(total >= (120u << 20) ? 1 : ((120u << 20) / total + 1));
    if (b.n_copies > 256)
        b.n_copies = 256;
    b.moe = moe;
    for (int i = 0; i < b.n_copies; i++) {
        void *d = dalloc(bytes * X);
        CK(cw_cuda_memset(C, d, 0x11, bytes * X, &E)); /* finite scales */
        b.W[i] = (struct cw_k_mat){type, d, rb, moe ? bytes : 0, n_in, n_out};
        if (two) {
            void *u = dalloc(bytes * X);
            CK(cw_cuda_memset(C, u, 0x11, bytes * X, &E));
            b.D[i] = b.W[i];
            b.D[i].d_w = u;
        }
    }
    b.x = dalloc(sizeof(float) * 512 * 8192);
    b.y = dalloc(sizeof(float) * 512 * 8192);
    size_t ns = cw_k_matmul_scratch(&b.W[0], n_tok);
    b.scratch = ns ? dalloc(ns) : NULL;
    b.act = dalloc(sizeof(float) * 8 * 17408);
    b.h = dalloc(sizeof(float) * 8192);
    b.wts = dalloc(sizeof(float) * 8);
    b.ids = dalloc(sizeof(int32_t) * 8 * 65); /* + a zero for moe 3 */
    int32_t ids[8 * 64]; /* 64 sets of 8 walking all 256 experts: beyond L2 */
    for (int j = 0; j < 8 * 64; j++)
        ids[j] = (j * 37 + 11) % 256;
    up(b.ids, ids, sizeof ids);
    CK(cw_cuda_memset(C, b.ids + 8 * 64, 0, sizeof(int32_t) * 8, &E));
    CK(cw_cuda_memset(C, b.x, 0, sizeof(float) * 512 * 8192, &E));
    CK(cw_cuda_memset(C, b.act, 0, sizeof(float) * 8 * 8192, &E));
    CK(cw_cuda_memset(C, b.wts, 0, sizeof(float) * 8, &E));
    double ms = 0;
    CK(cw_cuda_time(C, bench_rep, &b, 200, &ms, &E));
    double read = moe == 1 ? 2.0 * 8 * bytes : moe == 2 ? 8.0 * bytes : moe == 3 ? 2.0 * bytes
                                                                             : (double)bytes;
    double gbs = read / (ms * 1e-3) / 1e9;
    if (n_tok > 1)
        note("bench matmul %s %6lld x %5lld n_tok %3lld: %8.2f us  %6.1f TFLOP/s  weights %7.1f GB/s",
             cw_qtype_name(type), (long long)n_out, (long long)n_in, (long long)n_tok, ms * 1e3,
             2.0 * n_out * n_in * n_tok / (ms * 1e-3) / 1e12, gbs);
    else
        note("bench %-12s %s %6lld x %5lld: %8.2f us  %7.1f GB/s  (%.0f%% of copy bw %.0f)",
             moe == 1 ? "moe_gate_up" : moe == 2 ? "moe_down" : moe == 3 ? "ffn_gate_up" : "gemv",
             cw_qtype_name(type),
             (long long)n_out, (long long)n_in, ms * 1e3, gbs, 100 * gbs / peak, peak);
    for (int i = 0; i < b.n_copies; i++) {
        cw_cuda_free(C, (void *)b.W[i].d_w);
        if (two)
            cw_cuda_free(C, (void *)b.D[i].d_w);
    }
    cw_cuda_free(C, b.x), cw_cuda_free(C, b.y), cw_cuda_free(C, b.act), cw_cuda_free(C, b.h);
    cw_cuda_free(C, b.wts), cw_cuda_free(C, b.ids), cw_cuda_free(C, b.scratch);
}

static void bench(void)
{
    double peak = 0;
    CK(cw_cuda_copy_bandwidth(C, (size_t)1 << 30, &peak, &E));
    note("copy bandwidth %.0f GB/s", peak);
    static const enum cw_qtype bt[] = {CW_TYPE_Q4_K, CW_TYPE_Q6_K, CW_TYPE_Q8_0, CW_TYPE_Q5_K,
                                       CW_TYPE_BF16, CW_TYPE_F16};
    static const int64_t outs[] = {512, 2048, 8192};
    for (int t = 0; t < 6; t++)
        for (int o = 0; o < 3; o++)
            bench_one(bt[t], 2048, outs[o], 0, 1, peak);
    bench_one(CW_TYPE_Q4_K, 256, 1, 0, 1, peak); /* the floor: launch + event overhead */
    bench_one(CW_TYPE_Q4_K, 8192, 2048, 0, 1, peak);
    bench_one(CW_TYPE_Q4_K, 4096, 2048, 0, 1, peak);
    bench_one(CW_TYPE_Q6_K, 4096, 2048, 0, 1, peak);
    bench_one(CW_TYPE_Q4_K, 2048, 248320, 0, 1, peak);
    bench_one(CW_TYPE_Q6_K, 2048, 248320, 0, 1, peak);
    bench_one(CW_TYPE_Q8_0, 2048, 248320, 0, 1, peak);
    /* the dense 27B's matrices (n_embd 5120, FFN 17408) and its LM head */
    bench_one(CW_TYPE_Q4_K, 5120, 17408, 0, 1, peak); /* ffn_gate, ffn_up */
    bench_one(CW_TYPE_Q4_K, 17408, 5120, 0, 1, peak); /* ffn_down */
    bench_one(CW_TYPE_Q6_K, 17408, 5120, 0, 1, peak);
    bench_one(CW_TYPE_Q4_K, 5120, 10240, 0, 1, peak); /* attn_qkv */
    bench_one(CW_TYPE_Q4_K, 5120, 12288, 0, 1, peak); /* attn_q */
    bench_one(CW_TYPE_Q4_K, 5120, 6144, 0, 1, peak);  /* attn_gate */
    bench_one(CW_TYPE_Q4_K, 6144, 5120, 0, 1, peak);  /* ssm_out, attn_output */
    bench_one(CW_TYPE_Q6_K, 5120, 1024, 0, 1, peak);  /* attn_v */
    bench_one(CW_TYPE_Q6_K, 5120, 248320, 0, 1, peak); /* output */
    bench_one(CW_TYPE_Q4_K, 5120, 17408, 3, 1, peak); /* ffn gate + up, one launch */
    bench_one(CW_TYPE_Q4_K, 2048, 512, 3, 1, peak);   /* the 35B's shared expert */
    bench_one(CW_TYPE_Q4_K, 5120, 17408, 0, 2, peak);
    bench_one(CW_TYPE_Q4_K, 5120, 17408, 0, 8, peak);
    bench_one(CW_TYPE_Q4_K, 2048, 512, 1, 1, peak);
    bench_one(CW_TYPE_Q4_K, 512, 2048, 2, 1, peak);
    bench_one(CW_TYPE_Q6_K, 512, 2048, 2, 1, peak);
    bench_one(CW_TYPE_Q4_K, 2048, 8192, 0, 8, peak);
    bench_one(CW_TYPE_Q4_K, 2048, 8192, 0, 32, peak);
    bench_one(CW_TYPE_Q4_K, 2048, 8192, 0, 512, peak);
    bench_one(CW_TYPE_Q6_K, 2048, 8192, 0, 512, peak);
}

int main(void)
{
    C = gpu_test_open();
    if (getenv("CWEN_GPU_BENCH") && atoi(getenv("CWEN_GPU_BENCH")) == 2) { /* the table alone */
        bench();
        cw_cuda_close(C);
        return done();
    }
    check_refusals();
    check_multi();
    check_add_norm(CW_TYPE_Q4_K, 4096, 2048); /* the 35B's ssm_out */
    check_add_norm(CW_TYPE_Q8_0, 512, 2048);  /* a staged-x format */
    check_add_norm(CW_TYPE_Q6_K, 17408, 5120); /* the 27B's ffn_down */
    check_add_norm(CW_TYPE_Q4_K, 512, 1030);   /* n % 4 != 0: the epilogue's loop form */
    check_norm_in(CW_TYPE_Q4_K, 2048); /* the 35B's mixer input */
    check_norm_in(CW_TYPE_Q6_K, 5120); /* the 27B's */
    check_norm_in(CW_TYPE_Q4_K, 1536); /* x too narrow to quantise once: a norm launch */
    check_two_layouts(5120);  /* the 27B's mixers */
    check_two_layouts(17408); /* x as wide as its ffn_down's */
    for (int i = 0; i < N_TYPES; i++)
        test_type(TYPES[i]);
    check_moe(CW_TYPE_Q4_K, CW_TYPE_Q6_K, 1, 512, 8);
    check_moe(CW_TYPE_Q4_K, CW_TYPE_Q4_K, 1, 512, 8);
    check_moe(CW_TYPE_Q4_K, CW_TYPE_Q6_K, GEMV_MAX_TOK, 512, 8); /* above: test_gpu_moe_prefill.c */
    check_moe(CW_TYPE_Q4_K, CW_TYPE_Q8_0, 3, 512, 5);
    check_moe(CW_TYPE_Q6_K, CW_TYPE_Q4_K, 2, 768, 8);
    check_moe_shared(CW_TYPE_Q4_K, CW_TYPE_Q6_K, 1, 8); /* the 35B's decode: 9 slots */
    check_moe_shared(CW_TYPE_Q4_K, CW_TYPE_Q4_K, 3, 8);
    check_moe_shared(CW_TYPE_Q8_0, CW_TYPE_Q8_0, 2, 4);
    check_moe(CW_TYPE_Q4_K, CW_TYPE_Q6_K, 2, 2304, 1); /* the dense FFN's gate/up: q8_K x */
    if (getenv("CWEN_GPU_BENCH") && atoi(getenv("CWEN_GPU_BENCH")))
        bench();
    cw_cuda_close(C);
    return done();
}

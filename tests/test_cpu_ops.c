/* test_cpu_ops.c — cwen's CPU operators against straightforward double-
 * precision references written here from the model description (not from
 * cwen's code), across odd shapes; plus the carried-state property: a prompt
 * of n tokens gives bit-identical outputs and state to n single-token steps
 * (DeltaNet and attention). Errors are max |Δ| / max |ref| per output. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "cpu/cpu_attn.h"
#include "cpu/cpu_deltanet.h"
#include "cpu/cpu_moe.h"
#include "cpu/cpu_ops.h"
#include "test.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float scale) /* uniform in [-scale, scale) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return scale * (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = frand(scale);
}

static double relerr(const float *got, const double *ref, int64_t n)
{
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        double dd = fabs((double)got[i] - ref[i]);
        if (!(dd <= md)) /* NaN counts as an error */
            md = dd;
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    return mr > 0 ? md / mr : md;
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu(double x) { return x * sigm(x); }

/* ---- element-wise and per-row ops ---- */
static void test_basic(void)
{
    static const int64_t ns[] = {1, 7, 128, 257, 1000};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int64_t n = ns[k];
        float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), *y = malloc(n * sizeof *y);
        float *u = malloc(n * sizeof *u);
        double *r = malloc(n * sizeof *r);
        fill(x, n, 3.0f), fill(w, n, 1.5f), fill(u, n, 2.0f);
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        for (int64_t i = 0; i < n; i++)
            r[i] = x[i] / sqrt(ss / n + 1e-6) * w[i];
        cw_rms_norm(y, x, w, n, 1e-6f);
        double e = relerr(y, r, n);
        ok(e < 1e-6, "rms_norm n=%lld: rel err %.3g", (long long)n, e);
        for (int64_t i = 0; i < n; i++)
            r[i] = x[i] / sqrt(ss + 1e-6);
        memcpy(y, x, n * sizeof *y);
        cw_l2_norm(y, y, n, 1e-6f); /* in place */
        e = relerr(y, r, n);
        ok(e < 1e-6, "l2_norm n=%lld: rel err %.3g", (long long)n, e);
        double mx = -INFINITY, se = 0;
        for (int64_t i = 0; i < n; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int64_t i = 0; i < n; i++)
            se += exp(x[i] - mx);
        for (int64_t i = 0; i < n; i++)
            r[i] = exp(x[i] - mx) / se;
        cw_softmax(y, x, n);
        e = relerr(y, r, n);
        ok(e < 2e-6, "softmax n=%lld: rel err %.3g", (long long)n, e);
        for (int64_t i = 0; i < n; i++)
            r[i] = silu(x[i]) * u[i];
        cw_swiglu(y, x, u, n);
        e = relerr(y, r, n);
        ok(e < 1e-6, "swiglu n=%lld: rel err %.3g", (long long)n, e);
        for (int64_t i = 0; i < n; i++)
            r[i] = (double)(float)((double)x[i] + u[i]); /* f32 add = rounded exact sum */
        cw_add(y, x, u, n);
        ok(relerr(y, r, n) == 0, "add n=%lld exact", (long long)n);
        free(x), free(w), free(y), free(u), free(r);
    }
    double worst = 0;
    for (int i = 0; i <= 400; i++) {
        float x = -40.0f + 0.2f * (float)i;
        double sp = x > 20 ? x : log1p(exp(x));
        double e1 = fabs(cw_sigmoid(x) - sigm(x)), e2 = fabs(cw_silu(x) - silu(x)) / (fabs(x) + 1);
        /* relative above 1, absolute below: in f32, 1 + e^x rounds to 1 for
         * x < -17 and ln gives 0 (as ggml's softplus does) */
        double e3 = fabs(cw_softplus(x) - sp) / fmax(sp, 1.0);
        worst = fmax(worst, fmax(e1, fmax(e2, e3)));
    }
    ok(worst < 2e-6, "sigmoid/silu/softplus over [-40, 40]: worst err %.3g", worst);
    ok(cw_softplus(20.5f) == 20.5f && cw_softplus(300.0f) == 300.0f,
       "softplus is the identity above 20 (no overflow at 300)");
    ok(cw_softplus(5.0f) != 5.0f && fabs(cw_softplus(5.0f) - log1p(exp(5.0))) < 1e-6, "softplus below 20 is ln(1+e^x)");
}

/* ---- RoPE ---- */
static void test_rope(void)
{
    struct cw_rope r = {.n_rot = 64, .freq_base = 1e7f, .sections = {11, 11, 10, 0}};
    float cs[64];
    int32_t p4[4];
    /* near the origin the f32 angles agree with exact ones */
    double worst = 0;
    for (int p = 0; p < 60; p += 7) {
        cw_rope_text_pos(p4, p);
        ok(cw_rope_cache(cs, &r, p4) == 0, "rope cache p=%d", p);
        for (int i = 0; i < 32; i++) {
            double th = p * pow(1e7, -2.0 * i / 64);
            worst = fmax(worst, fmax(fabs(cs[2 * i] - cos(th)), fabs(cs[2 * i + 1] - sin(th))));
        }
    }
    ok(worst < 2e-5, "rope angles at positions < 60 vs exact: %.3g", worst);
    /* far out: the angle of pair i is the f32 chain pos*s*s*.. (s = powf), not exact */
    cw_rope_text_pos(p4, 200003);
    cw_rope_cache(cs, &r, p4);
    float s = powf(1e7f, -2.0f / 64), th = 200003.0f;
    double chain = 0, exact = 0;
    for (int i = 0; i < 32; i++) {
        chain = fmax(chain, fabs(cs[2 * i] - cos((double)th)) + fabs(cs[2 * i + 1] - sin((double)th)));
        double the = 200003.0 * pow(1e7, -2.0 * i / 64);
        exact = fmax(exact, fabs(cs[2 * i] - cos(the)));
        th *= s;
    }
    ok(chain < 1e-5, "rope at 200003 follows the f32 angle chain: %.3g", chain);
    note("rope at 200003 vs exact angles: %.3g (expected: not tiny)", exact);
    ok(exact > 1e-4, "the f32 chain is distinguishable from exact angles far out");
    /* IMROPE section rule with distinct t/h/w/e positions: pair i uses
     * t if i%3==0 (i<33), h if i%3==1 (i<33), w if i%3==2 (i<30), else e */
    const int32_t q4[4] = {5, 11, 17, 23};
    cw_rope_cache(cs, &r, q4);
    worst = 0;
    for (int i = 0; i < 32; i++) {
        int c = (i % 3 == 1 && i < 33) ? 1 : (i % 3 == 2 && i < 30) ? 2 : (i % 3 == 0 && i < 33) ? 0 : 3;
        double the = q4[c] * pow(1e7, -2.0 * i / 64);
        worst = fmax(worst, fabs(cs[2 * i] - cos(the)) + fabs(cs[2 * i + 1] - sin(the)));
    }
    ok(worst < 1e-5, "imrope sections (t,h,w interleaved): %.3g", worst);
    struct cw_rope r2 = {.n_rot = 8, .freq_base = 100.0f, .sections = {1, 1, 1, 1}};
    const int32_t e4[4] = {2, 3, 4, 9};
    float c2[8];
    cw_rope_cache(c2, &r2, e4); /* sect_dims 4: pair 3 -> sector 3 -> e */
    ok(fabs(c2[6] - cos(9 * pow(100, -6.0 / 8))) < 1e-6, "imrope: sector beyond 3*sections uses the 4th position");
    struct cw_rope bad = {.n_rot = 7, .freq_base = 10, .sections = {1, 0, 0, 0}};
    ok(cw_rope_cache(cs, &bad, p4) == -1, "odd n_rot refused");
    /* apply: neox pairs (i, i+n_rot/2), tail untouched */
    int hd = 20, nh = 3, nr = 8;
    struct cw_rope r3 = {.n_rot = nr, .freq_base = 1e4f, .sections = {2, 1, 1, 0}};
    float x[60], x0[60], c3[8];
    fill(x, 60, 2.0f);
    memcpy(x0, x, sizeof x);
    cw_rope_text_pos(p4, 13);
    cw_rope_cache(c3, &r3, p4);
    cw_rope_apply(x, c3, nr, hd, nh);
    double ref[60];
    for (int h = 0; h < nh; h++)
        for (int d = 0; d < hd; d++) {
            const float *v = x0 + h * hd;
            double out = v[d];
            if (d < nr) {
                int i = d % (nr / 2);
                double an = 13 * pow(1e4, -2.0 * i / nr), a = v[i], b = v[i + nr / 2];
                out = d < nr / 2 ? a * cos(an) - b * sin(an) : a * sin(an) + b * cos(an);
            }
            ref[h * hd + d] = out;
        }
    double e = relerr(x, ref, 60);
    ok(e < 1e-6, "rope apply (3 heads of 20, 8 rotated): %.3g", e);
    int same = 1;
    for (int h = 0; h < nh; h++)
        same &= memcmp(x + h * hd + nr, x0 + h * hd + nr, (hd - nr) * sizeof *x) == 0;
    ok(same, "rope leaves dims >= n_rot bit-identical");
}

/* ---- DeltaNet: double reference of §3.2 steps 2-8 ---- */
struct dn_ref {
    double *conv, *S; /* [C][K-1], [Hv][dv][dk] */
};

static void dn_reference(const struct cw_deltanet_dims *d, const struct cw_deltanet_weights *w,
                         struct dn_ref *st, int n_tok, const float *m, const float *z,
                         const float *bl, const float *al, double *y)
{
    int Hk = d->n_k_head, Hv = d->n_v_head, dk = d->d_k, dv = d->d_v, K = d->d_conv;
    int C = 2 * Hk * dk + Hv * dv;
    double *u = malloc(C * sizeof *u), *o = malloc(dv * sizeof *o);
    for (int t = 0; t < n_tok; t++) {
        const float *mt = m + (int64_t)t * C;
        for (int c = 0; c < C; c++) {
            double acc = 0;
            for (int tau = 0; tau < K; tau++) /* tau = K-1 is the current token */
                acc += w->conv[c * K + tau] * (tau == K - 1 ? mt[c] : st->conv[c * (K - 1) + tau]);
            u[c] = silu(acc);
            for (int tau = 0; tau + 1 < K - 1; tau++)
                st->conv[c * (K - 1) + tau] = st->conv[c * (K - 1) + tau + 1];
            if (K > 1)
                st->conv[c * (K - 1) + K - 2] = mt[c];
        }
        for (int h = 0; h < 2 * Hk; h++) { /* L2 norm of q and k heads */
            double ss = 0;
            for (int i = 0; i < dk; i++)
                ss += u[h * dk + i] * u[h * dk + i];
            for (int i = 0; i < dk; i++)
                u[h * dk + i] /= sqrt(ss + d->eps);
        }
        for (int h = 0; h < Hv; h++) {
            int g_ = h % Hk;
            const double *q = u + g_ * dk, *k = u + Hk * dk + g_ * dk, *v = u + 2 * Hk * dk + h * dv;
            double beta = sigm(bl[t * Hv + h]);
            double a = (double)al[t * Hv + h] + w->dt_bias[h];
            double g = (a > 20 ? a : log1p(exp(a))) * w->ssm_a[h];
            double *S = st->S + (int64_t)h * dv * dk; /* S[i][j] at j*dk + i */
            for (int x = 0; x < dv * dk; x++)
                S[x] *= exp(g);
            for (int j = 0; j < dv; j++) {
                double r = 0;
                for (int i = 0; i < dk; i++)
                    r += S[j * dk + i] * k[i];
                double delta = beta * (v[j] - r);
                for (int i = 0; i < dk; i++)
                    S[j * dk + i] += k[i] * delta;
            }
            double ss = 0;
            for (int j = 0; j < dv; j++) {
                double acc = 0;
                for (int i = 0; i < dk; i++)
                    acc += S[j * dk + i] * q[i];
                o[j] = acc / sqrt((double)dk);
                ss += o[j] * o[j];
            }
            for (int j = 0; j < dv; j++) {
                double zz = z[(int64_t)t * Hv * dv + h * dv + j];
                y[(int64_t)t * Hv * dv + h * dv + j] = o[j] / sqrt(ss / dv + d->eps) * w->norm[j] * silu(zz);
            }
        }
    }
    free(u), free(o);
}

static void test_deltanet_shape(int Hk, int Hv, int dk, int dv, int K, int n_tok)
{
    struct cw_deltanet_dims d = {Hk, Hv, dk, dv, K, 1e-6f};
    struct cw_err err = {0};
    ok(cw_deltanet_check(&d, &err) == 0, "deltanet dims ok");
    int64_t C = cw_deltanet_channels(&d), nc = cw_deltanet_conv_state_floats(&d);
    int64_t ns = cw_deltanet_delta_state_floats(&d), vd = (int64_t)Hv * dv;
    ok(C == 2 * Hk * dk + Hv * dv && nc == C * (K - 1) && ns == (int64_t)Hv * dv * dk, "deltanet sizes");
    float *conv = malloc(C * K * 4), *dt = malloc(Hv * 4), *a = malloc(Hv * 4), *nw = malloc(dv * 4);
    fill(conv, C * K, 0.7f), fill(dt, Hv, 1.0f), fill(nw, dv, 1.2f);
    for (int h = 0; h < Hv; h++)
        a[h] = -expf(frand(1.0f)); /* ssm_a = -exp(A_log) < 0 */
    struct cw_deltanet_weights w = {conv, dt, a, nw};
    int T = n_tok + 2; /* two extra tokens make the carried state non-trivial */
    float *m = malloc(T * C * 4), *z = malloc(T * vd * 4), *bl = malloc(T * Hv * 4), *al = malloc(T * Hv * 4);
    fill(m, T * C, 2.0f), fill(z, T * vd, 2.0f), fill(bl, T * Hv, 3.0f), fill(al, T * Hv, 4.0f);
    al[0] = 23.0f; /* one softplus identity branch */
    float *y1 = malloc(T * vd * 4), *y2 = malloc(T * vd * 4), *scr = malloc(cw_deltanet_scratch_floats(&d) * 4);
    float *c1 = calloc(nc + 1, 4), *s1 = calloc(ns, 4), *c2 = calloc(nc + 1, 4), *s2 = calloc(ns, 4);
    struct cw_deltanet_state st1 = {c1, s1}, st2 = {c2, s2};
    /* run 1: two warm-up tokens then the rest as one prompt */
    int rc = cw_deltanet_forward(&d, &w, &st1, 2, m, z, bl, al, y1, scr, &err);
    rc |= cw_deltanet_forward(&d, &w, &st1, n_tok, m + 2 * C, z + 2 * vd, bl + 2 * Hv, al + 2 * Hv,
                              y1 + 2 * vd, scr, &err);
    ok(rc == 0, "deltanet forward ran");
    /* run 2: token by token */
    for (int t = 0; t < T; t++)
        rc |= cw_deltanet_forward(&d, &w, &st2, 1, m + t * C, z + t * vd, bl + t * Hv, al + t * Hv,
                                  y2 + t * vd, scr, &err);
    ok(rc == 0 && memcmp(y1, y2, T * vd * 4) == 0 && memcmp(c1, c2, nc * 4) == 0 &&
           memcmp(s1, s2, ns * 4) == 0,
       "deltanet Hk%d Hv%d dk%d dv%d K%d: prompt of %d == %d single steps, bit-identical (y, conv, delta)",
       Hk, Hv, dk, dv, K, n_tok, n_tok);
    /* the delta rule's AVX2 loop against its scalar one: the state after the
     * prompt (s1, non-trivial), T more steps on q̂ | k̂ | v rows from m */
    {
        float *sa = malloc(ns * 4), *sb = malloc(ns * 4), *oa = malloc(T * vd * 4),
              *ob = malloc(T * vd * 4), *g = malloc(T * Hv * 4), *beta = malloc(T * Hv * 4);
        memcpy(sa, s1, ns * 4), memcpy(sb, s1, ns * 4);
        for (int64_t i = 0; i < T * Hv; i++)
            g[i] = -0.1f * (float)(i % 7), beta[i] = 0.1f + 0.05f * (float)(i % 5);
        cw_deltanet_recur_simd(&d, sa, T, m, g, beta, oa, 0);
        cw_deltanet_recur_simd(&d, sb, T, m, g, beta, ob, 1);
        ok(!memcmp(sa, sb, ns * 4) && !memcmp(oa, ob, T * vd * 4),
           "deltanet Hk%d Hv%d dk%d dv%d: the delta rule's SIMD loop == scalar, bit-identical "
           "(state and outputs, %d steps)", Hk, Hv, dk, dv, T);
        free(sa), free(sb), free(oa), free(ob), free(g), free(beta);
    }
    /* run 3: the prompt again with the heads over 2 and 3 threads */
    for (int nth = 2; nth <= 3; nth++) {
        struct cw_pool pool;
        float *c3 = calloc(nc + 1, 4), *s3 = calloc(ns, 4), *y3 = malloc(T * vd * 4);
        struct cw_deltanet_state st3 = {c3, s3};
        rc = cw_pool_init(&pool, nth, &err);
        rc |= cw_deltanet_forward_pool(&pool, &d, &w, &st3, T, m, z, bl, al, y3, scr, &err);
        ok(rc == 0 && memcmp(y1, y3, T * vd * 4) == 0 && memcmp(c1, c3, nc * 4) == 0 &&
               memcmp(s1, s3, ns * 4) == 0,
           "deltanet Hk%d Hv%d: heads over %d threads == one thread, bit-identical", Hk, Hv, nth);
        cw_pool_free(&pool);
        free(c3), free(s3), free(y3);
    }
    /* against the double reference */
    struct dn_ref ref = {calloc(nc + 1, 8), calloc(ns, 8)};
    double *yr = malloc(T * vd * 8);
    dn_reference(&d, &w, &ref, T, m, z, bl, al, yr);
    double ey = relerr(y1, yr, T * vd), es = relerr(s1, ref.S, ns), ec = relerr(c1, ref.conv, nc);
    note("deltanet Hk%d Hv%d dk%d dv%d K%d T%d vs double: y %.3g, delta state %.3g", Hk, Hv, dk, dv, K, T, ey, es);
    ok(ey < 1e-5 && es < 1e-5 && ec == 0,
       "deltanet Hk%d Hv%d dk%d dv%d K%d T%d vs double: y %.3g, delta state %.3g, conv state %.3g",
       Hk, Hv, dk, dv, K, T, ey, es, ec);
    /* the tiled head mapping matters: a grouped mapping would differ */
    free(conv), free(dt), free(a), free(nw), free(m), free(z), free(bl), free(al);
    free(y1), free(y2), free(scr), free(c1), free(s1), free(c2), free(s2), free(ref.conv), free(ref.S), free(yr);
}

static void test_deltanet(void)
{
    test_deltanet_shape(2, 4, 128, 128, 4, 9);  /* tiny-moe shape */
    test_deltanet_shape(2, 6, 7, 9, 4, 11);     /* odd dims, 3 v-heads per k-head */
    test_deltanet_shape(1, 2, 16, 24, 4, 5);    /* SIMD: two 8-blocks of k, three of v */
    test_deltanet_shape(3, 3, 16, 5, 3, 5);     /* Hv == Hk, other kernel width */
    test_deltanet_shape(1, 2, 4, 4, 1, 3);      /* no conv state at all */
    struct cw_deltanet_dims bad = {2, 5, 8, 8, 4, 1e-6f};
    struct cw_err err = {0};
    ok(cw_deltanet_check(&bad, &err) == -1 && err.code == CW_ERR_INVALID, "Hv not a multiple of Hk refused: %s", err.msg);
}

/* ---- attention: double reference of §3.3 steps 1-7 ---- */
static void test_attn_shape(int H, int Hkv, int hd, int n_rot, int pos0, int n_tok)
{
    struct cw_attn_dims d = {H, Hkv, hd, 1e-6f, {n_rot, 1e4f, {n_rot / 6 + 1, n_rot / 6, n_rot / 6, 0}}};
    struct cw_err err = {0};
    ok(cw_attn_check(&d, &err) == 0, "attn dims ok %s", err.msg);
    int64_t n_ctx = pos0 + n_tok + 3, qn = (int64_t)H * hd, kn = (int64_t)Hkv * hd, T = pos0 + n_tok;
    float *qw = malloc(hd * 4), *kw = malloc(hd * 4);
    fill(qw, hd, 1.5f), fill(kw, hd, 1.5f);
    struct cw_attn_weights w = {qw, kw};
    float *P = malloc(T * 2 * qn * 4), *K = malloc(T * kn * 4), *V = malloc(T * kn * 4);
    fill(P, T * 2 * qn, 2.0f), fill(K, T * kn, 2.0f), fill(V, T * kn, 2.0f);
    cw_f16 *k1 = calloc(n_ctx * kn, 2), *v1 = calloc(n_ctx * kn, 2), *k2 = calloc(n_ctx * kn, 2), *v2 = calloc(n_ctx * kn, 2);
    struct cw_kv_cache kv1 = {k1, v1, n_ctx}, kv2 = {k2, v2, n_ctx};
    float *o1 = malloc(T * qn * 4), *o2 = malloc(T * qn * 4), *scr = malloc(cw_attn_scratch_floats(&d, n_ctx) * 4);
    int rc = 0;
    if (pos0 > 0)
        rc |= cw_attn_forward(&d, &w, &kv1, 0, pos0, P, K, V, o1, scr, &err);
    rc |= cw_attn_forward(&d, &w, &kv1, pos0, n_tok, P + pos0 * 2 * qn, K + pos0 * kn, V + pos0 * kn,
                          o1 + pos0 * qn, scr, &err);
    for (int t = 0; t < T; t++)
        rc |= cw_attn_forward(&d, &w, &kv2, t, 1, P + t * 2 * qn, K + t * kn, V + t * kn, o2 + t * qn, scr, &err);
    ok(rc == 0, "attn forward ran %s", err.msg);
    ok(memcmp(o1, o2, T * qn * 4) == 0 && memcmp(k1, k2, n_ctx * kn * 2) == 0 && memcmp(v1, v2, n_ctx * kn * 2) == 0,
       "attn H%d Hkv%d hd%d: prompt of %d at %d == single steps, bit-identical (out, K, V)", H, Hkv, hd, n_tok, pos0);
    /* the query rows over a pool of 3 threads: the same bits */
    {
        struct cw_pool pool;
        cw_f16 *k3 = calloc(n_ctx * kn, 2), *v3 = calloc(n_ctx * kn, 2);
        struct cw_kv_cache kv3 = {k3, v3, n_ctx};
        float *o3 = malloc(T * qn * 4), *scr3 = malloc(3 * cw_attn_scratch_floats(&d, n_ctx) * 4);
        const int inited = cw_pool_init(&pool, 3, &err) == 0;
        int prc = inited ? cw_attn_forward_pool(&pool, &d, &w, &kv3, 0, T, P, K, V, o3, scr3, &err)
                         : -1;
        ok(prc == 0 && memcmp(o1, o3, T * qn * 4) == 0 && memcmp(k1, k3, n_ctx * kn * 2) == 0,
           "attn over 3 threads == one thread, bit-identical (%s)", err.msg);
        if (inited)
            cw_pool_free(&pool);
        free(k3), free(v3), free(o3), free(scr3);
    }
    /* the core's AVX2 loops against its scalar ones, every query row, over
     * the cache with a few subnormal f16 values put in */
    {
        cw_f16 *k4 = malloc(n_ctx * kn * 2), *v4 = malloc(n_ctx * kn * 2);
        memcpy(k4, k1, n_ctx * kn * 2), memcpy(v4, v1, n_ctx * kn * 2);
        for (int64_t i = 0; i < T * kn; i += 7)
            k4[i] = (cw_f16)(i % 1023 + 1),
            v4[(i * 3) % (T * kn)] = (cw_f16)(0x8000 | (i % 511 + 1));
        struct cw_kv_cache kv4 = {k4, v4, n_ctx};
        float *oa = malloc(qn * 4), *ob = malloc(qn * 4), *sc = malloc(n_ctx * 4);
        int same = 1;
        for (int t = 0; t < T; t++) {
            cw_attn_core_simd(&d, &kv4, t, o1 + t * qn, oa, sc, 0);
            cw_attn_core_simd(&d, &kv4, t, o1 + t * qn, ob, sc, 1);
            same &= !memcmp(oa, ob, qn * 4);
        }
        ok(same, "attn H%d Hkv%d hd%d core: SIMD loops == scalar, bit-identical, %d rows", H, Hkv,
           hd, (int)T);
        free(k4), free(v4), free(oa), free(ob), free(sc);
    }
    /* reference: q/k norm, exact-angle NeoX rope on the first n_rot dims */
    double *qr = malloc(T * qn * 8), *kr = malloc(T * kn * 8), *gr = malloc(T * qn * 8), *ref = malloc(T * qn * 8);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H + Hkv; h++) {
            const float *src = h < H ? P + (int64_t)t * 2 * qn + 2 * h * hd : K + (int64_t)t * kn + (h - H) * hd;
            double *dst = h < H ? qr + (int64_t)t * qn + h * hd : kr + (int64_t)t * kn + (h - H) * hd;
            const float *nw = h < H ? qw : kw;
            double ss = 0, tmp[512];
            for (int i = 0; i < hd; i++)
                ss += (double)src[i] * src[i];
            for (int i = 0; i < hd; i++)
                tmp[i] = src[i] / sqrt(ss / hd + 1e-6) * nw[i];
            for (int i = 0; i < hd; i++) {
                double out = tmp[i];
                if (i < n_rot) {
                    int p = i % (n_rot / 2);
                    double th = t * pow(1e4, -2.0 * p / n_rot), a = tmp[p], b = tmp[p + n_rot / 2];
                    out = i < n_rot / 2 ? a * cos(th) - b * sin(th) : a * sin(th) + b * cos(th);
                }
                dst[i] = out;
            }
            if (h < H)
                for (int i = 0; i < hd; i++)
                    gr[(int64_t)t * qn + h * hd + i] = P[(int64_t)t * 2 * qn + 2 * h * hd + hd + i];
        }
    }
    /* the cache holds the f16 rounding of the reference K and of V */
    double ek = 0, ev = 0, mk = 0;
    for (int64_t i = 0; i < T * kn; i++) {
        ek = fmax(ek, fabs(cw_f16_to_f32(k1[i]) - kr[i]) / fmax(fabs(kr[i]), 6.1e-5));
        ev = fmax(ev, fabs(cw_f16_to_f32(v1[i]) - V[i]) / fmax(fabs((double)V[i]), 6.1e-5));
        mk = fmax(mk, fabs(kr[i]));
    }
    ok(ek < 1.0e-3 && ev < 1.0e-3, "attn cache = f16(normed, rotated K) and f16(V): rel %.3g / %.3g (f16 half-ulp 4.9e-4)", ek, ev);
    /* attention over the cached (f16) K/V, causal, blocked GQA, exact arithmetic */
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / Hkv);
            double sc[256], mx = -INFINITY, se = 0;
            for (int p = 0; p <= t; p++) {
                double s = 0;
                for (int i = 0; i < hd; i++)
                    s += qr[(int64_t)t * qn + h * hd + i] * cw_f16_to_f32(k1[(int64_t)p * kn + g * hd + i]);
                sc[p] = s / sqrt((double)hd);
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p <= t; p++)
                se += (sc[p] = exp(sc[p] - mx));
            for (int i = 0; i < hd; i++) {
                double acc = 0;
                for (int p = 0; p <= t; p++)
                    acc += sc[p] * cw_f16_to_f32(v1[(int64_t)p * kn + g * hd + i]);
                ref[(int64_t)t * qn + h * hd + i] = acc / se * sigm(gr[(int64_t)t * qn + h * hd + i]);
            }
        }
    double e = relerr(o1, ref, T * qn);
    note("attn H%d Hkv%d hd%d T%d vs double: %.3g; cache vs f16(ref) %.3g / %.3g", H, Hkv, hd, (int)T, e, ek, ev);
    ok(e < 1e-5, "attn H%d Hkv%d hd%d rot%d T%d vs double (over the f16 cache): %.3g", H, Hkv, hd, n_rot, (int)T, e);
    free(qw), free(kw), free(P), free(K), free(V), free(k1), free(v1), free(k2), free(v2);
    free(o1), free(o2), free(scr), free(qr), free(kr), free(gr), free(ref);
}

static void test_attn(void)
{
    test_attn_shape(2, 1, 256, 64, 3, 9);  /* tiny shape */
    test_attn_shape(4, 2, 64, 16, 2, 19);  /* groups of 8 rows and a tail (SIMD core) */
    test_attn_shape(6, 2, 40, 16, 0, 13);  /* GQA 3, odd-ish dims */
    test_attn_shape(8, 2, 24, 12, 5, 4);   /* GQA 4 */
    test_attn_shape(3, 3, 10, 2, 1, 6);    /* MHA, one rotated pair */
    struct cw_attn_dims d = {4, 2, 16, 1e-6f, {8, 1e4f, {1, 1, 1, 0}}};
    struct cw_kv_cache kv = {NULL, NULL, 4};
    struct cw_err err = {0};
    float dummy[4];
    ok(cw_attn_forward(&d, NULL, &kv, 2, 3, dummy, dummy, dummy, dummy, dummy, &err) == -1,
       "attn refuses positions past the cache: %s", err.msg);
    d.n_head = 5;
    ok(cw_attn_check(&d, &err) == -1, "attn refuses H %% Hkv != 0");
}

/* ---- MoE ---- */
static void test_moe(void)
{
    enum { NE = 37, NU = 5, E = 19 };
    float lg[NE], pr[NE], wt[NU];
    int32_t sel[NU];
    struct cw_err err = {0};
    for (int it = 0; it < 50; it++) {
        fill(lg, NE, 4.0f);
        if (it % 5 == 0) /* ties: equal logits must give the lower id first */
            lg[3] = lg[20] = lg[30] = 9.0f;
        ok(cw_moe_route(NE, NU, lg, pr, sel, wt, &err) == 0, "route");
        double mx = -1e30, se = 0, pd[NE];
        for (int e = 0; e < NE; e++)
            mx = fmax(mx, lg[e]);
        for (int e = 0; e < NE; e++)
            se += (pd[e] = exp(lg[e] - mx));
        for (int e = 0; e < NE; e++)
            pd[e] /= se;
        /* reference top-k: rank of e = number of experts strictly before it */
        int32_t rs[NU];
        for (int e = 0; e < NE; e++) {
            int rank = 0;
            for (int f = 0; f < NE; f++)
                rank += lg[f] > lg[e] || (lg[f] == lg[e] && f < e);
            if (rank < NU)
                rs[rank] = e;
        }
        double ssel = 0, wr[NU];
        for (int s = 0; s < NU; s++)
            ssel += pd[rs[s]];
        for (int s = 0; s < NU; s++)
            wr[s] = pd[rs[s]] / ssel;
        if (relerr(pr, pd, NE) > 2e-6 || memcmp(sel, rs, sizeof rs) || relerr(wt, wr, NU) > 2e-6) {
            ok(0, "moe route iteration %d", it);
            return;
        }
    }
    ok(1, "moe route: softmax, top-%d of %d with lower-id ties, renormalised (50 draws)", NU, NE);
    lg[3] = lg[20] = lg[30] = 9.0f;
    cw_moe_route(NE, NU, lg, pr, sel, wt, &err);
    ok(sel[0] == 3 && sel[1] == 20 && sel[2] == 30, "tie order 3, 20, 30");
    ok(cw_moe_route(NE, 0, lg, pr, sel, wt, &err) == -1 && cw_moe_route(4, 5, lg, pr, sel, wt, &err) == -1,
       "bad n_used refused");
    float out[NU * E], sh[E], y[E];
    double yr[E];
    fill(out, NU * E, 3.0f), fill(sh, E, 3.0f);
    for (int i = 0; i < E; i++) {
        yr[i] = sigm(0.3) * sh[i];
        for (int s = 0; s < NU; s++)
            yr[i] += (double)wt[s] * out[s * E + i];
    }
    cw_moe_combine(E, NU, wt, out, sh, 0.3f, y);
    double e = relerr(y, yr, E);
    ok(e < 1e-6, "moe combine with shared expert: %.3g", e);
    float y2[E];
    cw_moe_combine(E, NU, wt, out, NULL, 0.0f, y2);
    for (int i = 0; i < E; i++)
        yr[i] -= sigm(0.3) * sh[i];
    ok(relerr(y2, yr, E) < 1e-6, "moe combine without shared expert");
}

int main(void)
{
    test_basic();
    test_rope();
    test_deltanet();
    test_attn();
    test_moe();
    return done();
}

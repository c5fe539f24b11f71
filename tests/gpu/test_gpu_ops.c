/* test_gpu_ops.c — the small CUDA kernels (k_norm.cu, k_moe.cu, k_sample.cu)
 * against their CPU twins (cpu_ops.h, cpu_moe.h, the CPU backend's argmax).
 *
 * Every output buffer is poisoned (all bits set: NaN) before a launch, so a
 * value the kernel never wrote shows up; padding past a row (ldy > n) must
 * stay poisoned. Sizes cover one element, non-multiples of the block and
 * warp widths, the model's real widths, and more rows than one wave.
 *
 * Bounds (ulp = 2^-23 relative, derived where the CUDA and glibc maths
 * differ; exact where nothing differs):
 *   residual add: bit-exact (one f32 add on both sides).
 *   RMSNorm: <= 2 ulp of the CPU value. Both sides sum the f32 squares in
 *     double (relative error < n·2^-53), so the f32 mean differs only when it
 *     falls within ~1e-12 of a rounding boundary: then the scale moves by one
 *     ulp and each output by at most two. The number of bit-exact values is
 *     printed (all, in practice).
 *   SwiGLU: <= 8 ulp + 1e-35 absolute. CUDA's expf is within 2 ulp, glibc's
 *     within 1: 1+e^-x then differs by <= 4 ulp, and the division and product
 *     add one rounding each per side.
 *   MoE route: weights <= 16 ulp (e^x as above, through the f32 reciprocal of
 *     the sum and the renormalisation: ~7 ulp per probability, twice over);
 *     ids identical for every token whose CPU probabilities around the
 *     selection are either tied exactly (equal logits give equal bits on both
 *     sides) or apart by more than 16 ulp.
 *   argmax: identical ids (a total order: the first maximum). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_moe.h"
#include "cpu/cpu_ops.h"
#include "cuda/kernels.h"
#include "gpu_test.h"

#define ULP (1.0 / 8388608.0) /* 2^-23 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double urand(void) /* [0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static float nrand(void)
{
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static struct cw_err err;

static void *dalloc(struct cw_cuda *c, size_t bytes)
{
    void *p = NULL;
    if (cw_cuda_alloc(c, &p, bytes, &err)) {
        printf("not ok - alloc %zu: %s\n", bytes, err.msg);
        exit(1);
    }
    return p;
}

static void up(struct cw_cuda *c, void *d, const void *h, size_t bytes)
{
    if (cw_cuda_upload(c, d, h, bytes, &err) || cw_cuda_sync(c, &err)) {
        printf("not ok - upload: %s\n", err.msg);
        exit(1);
    }
}

static void down(struct cw_cuda *c, void *h, const void *d, size_t bytes)
{
    if (cw_cuda_download(c, h, d, bytes, &err)) {
        printf("not ok - download: %s\n", err.msg);
        exit(1);
    }
}

static void poison(struct cw_cuda *c, void *d, size_t bytes)
{
    if (cw_cuda_memset(c, d, 0xff, bytes, &err)) {
        printf("not ok - memset: %s\n", err.msg);
        exit(1);
    }
}

static int is_poison(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u == 0xffffffffu;
}

/* |a - b| <= ulps·|b| + abs_tol; NaN only matches NaN */
static int close_to(float a, float b, double ulps, double abs_tol, double *worst)
{
    if (isnan(b) || isnan(a))
        return isnan(a) && isnan(b);
    if (a == b)
        return 1;
    if (isinf(a) || isinf(b))
        return 0;
    double d = fabs((double)a - (double)b), rel = fabs((double)b) * ULP;
    if (rel > 0 && d / rel > *worst)
        *worst = d / rel;
    return d <= ulps * fabs((double)b) * ULP + abs_tol;
}

/* ---- add + RMSNorm ------------------------------------------------------------- */

static void test_rmsnorm(struct cw_cuda *c)
{
    static const int64_t widths[] = {1, 7, 31, 255, 256, 257, 1000, 2048, 4099, 5120};
    static const int64_t rows_of[] = {1, 3, 300};
    const float eps = 1e-6f;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t ri = 0; ri < sizeof rows_of / sizeof rows_of[0]; ri++)
            for (int with_add = 0; with_add < 2; with_add++) {
                const int64_t n = widths[wi], R = rows_of[ri], ldy = n + (with_add ? 5 : 0);
                float *h = malloc((size_t)(R * n) * 4), *a = malloc((size_t)(R * n) * 4);
                float *w = malloc((size_t)n * 4), *y = malloc((size_t)(R * ldy) * 4);
                float *href = malloc((size_t)(R * n) * 4), *yref = malloc((size_t)(R * n) * 4);
                float *hgot = malloc((size_t)(R * n) * 4);
                for (int64_t r = 0; r < R; r++) {
                    /* row scales from 1e-3 to 1e3; row 1 all zero when it exists */
                    const float sc = (float)pow(10.0, -3.0 + 6.0 * urand());
                    for (int64_t i = 0; i < n; i++) {
                        h[r * n + i] = r == 1 ? 0.0f : sc * nrand();
                        a[r * n + i] = r == 1 ? 0.0f : sc * nrand();
                    }
                }
                for (int64_t i = 0; i < n; i++)
                    w[i] = 1.0f + 0.5f * nrand();
                memcpy(href, h, (size_t)(R * n) * 4);
                if (with_add)
                    cw_add(href, href, a, R * n);
                cw_rms_norm_rows(yref, href, w, n, R, eps);

                float *dh = dalloc(c, (size_t)(R * n) * 4), *da = dalloc(c, (size_t)(R * n) * 4);
                float *dw = dalloc(c, (size_t)n * 4), *dy = dalloc(c, (size_t)(R * ldy) * 4);
                up(c, dh, h, (size_t)(R * n) * 4);
                up(c, da, a, (size_t)(R * n) * 4);
                up(c, dw, w, (size_t)n * 4);
                poison(c, dy, (size_t)(R * ldy) * 4);
                int rc = cw_k_add_rmsnorm(c, dh, with_add ? da : NULL, dw, dy, ldy, n, R, eps,
                                          &err);
                ok(rc == 0 && cw_cuda_sync(c, &err) == 0, "rmsnorm n=%lld: %s", (long long)n,
                   err.msg);
                down(c, y, dy, (size_t)(R * ldy) * 4);
                down(c, hgot, dh, (size_t)(R * n) * 4);
                ok(memcmp(hgot, href, (size_t)(R * n) * 4) == 0,
                   "rmsnorm n=%lld rows=%lld add=%d: h + add bit-exact", (long long)n,
                   (long long)R, with_add);
                int64_t bad = 0, exact = 0, pad_bad = 0;
                double worst = 0;
                for (int64_t r = 0; r < R; r++) {
                    for (int64_t i = 0; i < n; i++) {
                        const float g = y[r * ldy + i], e = yref[r * n + i];
                        exact += memcmp(&g, &e, 4) == 0;
                        bad += !close_to(g, e, 2.0, 0.0, &worst);
                    }
                    for (int64_t i = n; i < ldy; i++)
                        pad_bad += !is_poison(y[r * ldy + i]);
                }
                ok(bad == 0, "rmsnorm n=%lld rows=%lld add=%d: %lld values beyond 2 ulp "
                   "(worst %.2f ulp)", (long long)n, (long long)R, with_add, (long long)bad,
                   worst);
                ok(pad_bad == 0, "rmsnorm n=%lld: padding past the row untouched", (long long)n);
                if (exact != R * n)
                    note("rmsnorm n=%lld rows=%lld: %lld of %lld bit-exact (worst %.2f ulp)",
                         (long long)n, (long long)R, (long long)exact, (long long)(R * n), worst);
                cw_cuda_free(c, dh), cw_cuda_free(c, da), cw_cuda_free(c, dw), cw_cuda_free(c, dy);
                free(h), free(a), free(w), free(y), free(href), free(yref), free(hgot);
            }
    ok(cw_k_add_rmsnorm(c, NULL, NULL, NULL, NULL, 4, 8, 1, 1e-6f, &err) == -1,
       "rmsnorm: ldy < n refused");
}

/* ---- SwiGLU --------------------------------------------------------------------- */

static void test_swiglu(struct cw_cuda *c)
{
    static const int64_t sizes[] = {1, 33, 4096, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si];
        float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        float *ref = malloc((size_t)n * 4);
        static const float edge[] = {0.0f, -0.0f, 20.0f, -20.0f, 87.0f, -87.0f, 88.7f, -88.7f,
                                     89.0f, -89.0f, 1e-30f, -1e-30f, 100.0f, -100.0f};
        for (int64_t i = 0; i < n; i++) {
            g[i] = i < 14 && n > 14 ? edge[i] : 8.0f * nrand();
            u[i] = 3.0f * nrand();
        }
        cw_swiglu(ref, g, u, n);
        float *dg = dalloc(c, (size_t)n * 4), *du = dalloc(c, (size_t)n * 4);
        float *dy = dalloc(c, (size_t)n * 4);
        up(c, dg, g, (size_t)n * 4);
        up(c, du, u, (size_t)n * 4);
        poison(c, dy, (size_t)n * 4);
        ok(cw_k_swiglu(c, dy, dg, du, n, &err) == 0 && cw_cuda_sync(c, &err) == 0, "swiglu: %s",
           err.msg);
        down(c, y, dy, (size_t)n * 4);
        int64_t bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !close_to(y[i], ref[i], 8.0, 1e-35, &worst);
        ok(bad == 0, "swiglu n=%lld: %lld values beyond 8 ulp (worst %.2f ulp)", (long long)n,
           (long long)bad, worst);
        /* in place (y aliasing g), as the forward calls it */
        up(c, dg, g, (size_t)n * 4);
        ok(cw_k_swiglu(c, dg, dg, du, n, &err) == 0, "swiglu in place: %s", err.msg);
        float *y2 = malloc((size_t)n * 4);
        down(c, y2, dg, (size_t)n * 4);
        ok(memcmp(y, y2, (size_t)n * 4) == 0, "swiglu n=%lld: in place = out of place",
           (long long)n);
        cw_cuda_free(c, dg), cw_cuda_free(c, du), cw_cuda_free(c, dy);
        free(g), free(u), free(y), free(y2), free(ref);
    }
}

/* ---- MoE routing ---------------------------------------------------------------- */

/* the CPU's probabilities around the selection are tied exactly or clearly apart */
static int decisive(const float *probs, const int32_t *sel, int X, int K, double ulps)
{
    /* best unselected probability */
    float next = -1.0f;
    for (int e = 0; e < X; e++) {
        int taken = 0;
        for (int k = 0; k < K; k++)
            taken |= sel[k] == e;
        if (!taken && probs[e] > next)
            next = probs[e];
    }
    for (int k = 0; k <= K - 1; k++) {
        const float a = probs[sel[k]], b = k + 1 < K ? probs[sel[k + 1]] : next;
        if (b < 0 || isnan(a) || isnan(b))
            continue;
        const double gap = (double)a - (double)b;
        if (gap != 0.0 && gap <= ulps * ULP * (double)a)
            return 0;
    }
    return 1;
}

static void test_route(struct cw_cuda *c)
{
    /* up to 256 experts the rank kernel, 512 the warp-per-token kernel, 1024 the block kernel */
    static const int Xs[] = {16, 256, 512, 1024};
    static const int Ks[] = {1, 4, 8, 16};
    static const int64_t ns[] = {1, 5, 300};
    for (size_t xi = 0; xi < 4; xi++)
        for (size_t ki = 0; ki < 4; ki++)
            for (size_t ni = 0; ni < 3; ni++) {
                const int X = Xs[xi], K = Ks[ki];
                const int64_t n = ns[ni];
                float *lg = malloc((size_t)(n * X) * 4), *probs = malloc((size_t)X * 4);
                int32_t *sel = malloc((size_t)(n * K) * 4), *gid = malloc((size_t)(n * K) * 4);
                float *wt = malloc((size_t)(n * K) * 4), *gw = malloc((size_t)(n * K) * 4);
                uint8_t *dec = malloc((size_t)n);
                for (int64_t t = 0; t < n; t++) {
                    float *l = lg + t * X;
                    for (int e = 0; e < X; e++)
                        l[e] = 2.0f * nrand();
                    if (t % 5 == 1) /* a tie at the top: ids 3 and X-1 */
                        l[X - 1] = l[3] = 9.0f;
                    if (t % 5 == 2) /* every logit equal: ids 0..K-1 */
                        for (int e = 0; e < X; e++)
                            l[e] = 0.25f;
                    if (t % 5 == 3) /* a NaN logit: every probability NaN on both sides */
                        l[X / 2] = NAN;
                    if (cw_moe_route(X, K, l, probs, sel + t * K, wt + t * K, &err)) {
                        ok(0, "cpu route: %s", err.msg);
                        return;
                    }
                    dec[t] = (uint8_t)decisive(probs, sel + t * K, X, K, 16.0);
                }
                float *dl = dalloc(c, (size_t)(n * X) * 4), *dwt = dalloc(c, (size_t)(n * K) * 4);
                int32_t *did = dalloc(c, (size_t)(n * K) * 4);
                up(c, dl, lg, (size_t)(n * X) * 4);
                poison(c, dwt, (size_t)(n * K) * 4);
                poison(c, did, (size_t)(n * K) * 4);
                ok(cw_k_moe_route(c, dl, X, K, n, did, dwt, &err) == 0 &&
                       cw_cuda_sync(c, &err) == 0,
                   "route X=%d K=%d: %s", X, K, err.msg);
                down(c, gid, did, (size_t)(n * K) * 4);
                down(c, gw, dwt, (size_t)(n * K) * 4);
                int64_t id_bad = 0, w_bad = 0, n_dec = 0;
                double worst = 0;
                for (int64_t t = 0; t < n; t++) {
                    const int same = memcmp(gid + t * K, sel + t * K, (size_t)K * 4) == 0;
                    n_dec += dec[t];
                    id_bad += dec[t] && !same;
                    for (int k = 0; same && k < K; k++)
                        w_bad += !close_to(gw[t * K + k], wt[t * K + k], 16.0, 0.0, &worst);
                }
                ok(id_bad == 0, "route X=%d K=%d n=%lld: %lld of %lld decisive tokens chose "
                   "other experts", X, K, (long long)n, (long long)id_bad, (long long)n_dec);
                ok(n_dec >= (n * 3 + 3) / 4, "route X=%d K=%d n=%lld: %lld of %lld tokens "
                   "decisive (the check has teeth)", X, K, (long long)n, (long long)n_dec,
                   (long long)n);
                ok(w_bad == 0, "route X=%d K=%d n=%lld: %lld weights beyond 16 ulp (worst "
                   "%.2f ulp)", X, K, (long long)n, (long long)w_bad, worst);
                cw_cuda_free(c, dl), cw_cuda_free(c, dwt), cw_cuda_free(c, did);
                free(lg), free(probs), free(sel), free(gid), free(wt), free(gw), free(dec);
            }
    ok(cw_k_moe_route(c, NULL, 4, 5, 1, NULL, NULL, &err) == -1, "route: K > X refused");
    ok(cw_k_moe_route(c, NULL, 4, 2, 0, NULL, NULL, &err) == -1, "route: no tokens refused");
}

/* ---- argmax ------------------------------------------------------------------------- */

static int32_t argmax_ref(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

static void test_argmax(struct cw_cuda *c)
{
    static const int64_t Vs[] = {1, 3, 4, 1023, 248320, 248321};
    const int64_t R = 6;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        const int64_t V = Vs[vi];
        float *x = malloc((size_t)(R * V) * 4);
        int32_t ref[6], got[6];
        for (int64_t r = 0; r < R; r++) {
            float *row = x + r * V;
            for (int64_t i = 0; i < V; i++)
                row[i] = 4.0f * nrand();
            if (r == 1) /* a tie between two late indices: the first wins */
                row[V - 1] = row[V / 2] = 100.0f;
            if (r == 2) /* the maximum at index 0 */
                row[0] = 100.0f;
            if (r == 3) /* the maximum at the last index */
                row[V - 1] = 100.0f;
            if (r == 4) /* all -inf: index 0 */
                for (int64_t i = 0; i < V; i++)
                    row[i] = -INFINITY;
            if (r == 5) /* all equal: index 0 */
                for (int64_t i = 0; i < V; i++)
                    row[i] = 1.5f;
            ref[r] = argmax_ref(row, V);
        }
        float *dx = dalloc(c, (size_t)(R * V) * 4);
        int32_t *dout = dalloc(c, (size_t)R * 4);
        const size_t sb = cw_k_argmax_scratch(R);
        void *scr = dalloc(c, sb);
        ok(cw_cuda_memset(c, scr, 0, sb, &err) == 0, "argmax scratch zeroed: %s", err.msg);
        up(c, dx, x, (size_t)(R * V) * 4);
        /* one block a row, then split rows twice (the counts left at zero) */
        for (int m = 0; m < 3; m++) {
            void *ms = m ? scr : NULL;
            poison(c, dout, (size_t)R * 4);
            ok(cw_k_argmax(c, dx, V, R, dout, ms, &err) == 0 && cw_cuda_sync(c, &err) == 0,
               "argmax V=%lld (%d): %s", (long long)V, m, err.msg);
            down(c, got, dout, sizeof got);
            ok(memcmp(got, ref, sizeof ref) == 0,
               "argmax V=%lld (%d): ids %d %d %d %d %d %d, expected %d %d %d %d %d %d",
               (long long)V, m, got[0], got[1], got[2], got[3], got[4], got[5], ref[0], ref[1],
               ref[2], ref[3], ref[4], ref[5]);
            /* one row alone gives the same id as inside a batch */
            poison(c, dout, (size_t)R * 4);
            ok(cw_k_argmax(c, dx + V, V, 1, dout, ms, &err) == 0, "argmax one row: %s", err.msg);
            down(c, got, dout, 4);
            ok(got[0] == ref[1], "argmax V=%lld (%d): row 1 alone (unaligned when V %% 4) = %d",
               (long long)V, m, got[0]);
        }
        /* each row's count (the first word of its sb / R bytes) back at zero */
        unsigned *cnt = malloc(sb);
        down(c, cnt, scr, sb);
        int nz = 0;
        for (int64_t r = 0; r < R; r++)
            nz += cnt[r * (int64_t)(sb / R / sizeof *cnt)] != 0;
        ok(nz == 0, "argmax V=%lld: %d counts not back at zero", (long long)V, nz);
        free(cnt);
        cw_cuda_free(c, dx), cw_cuda_free(c, dout), cw_cuda_free(c, scr);
        free(x);
    }
    ok(cw_k_argmax(c, NULL, 0, 1, NULL, NULL, &err) == -1, "argmax: V = 0 refused");
}

int main(void)
{
    struct cw_cuda *c = gpu_test_open();
    test_rmsnorm(c);
    test_swiglu(c);
    test_route(c);
    test_argmax(c);
    cw_cuda_close(c);
    return done();
}

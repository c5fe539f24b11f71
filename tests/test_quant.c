/* test_quant.c — quant formats without an oracle: traits and row sizes,
 * round trips within a per-type error bound, exact cases worked by hand,
 * block independence, determinism, hostile inputs, and quantiser speed.
 * (Bit-exactness against llama.cpp is tests/parity/test_quant_oracle.c.) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf/quant.h"
#include "test.h"

static uint64_t rng = 12345;
static double unif(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) { return (float)(sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif())); }

/* Relative RMS error bound on Gaussian data, per type: about one quantum
 * step / sqrt(12) for the bits it has, plus headroom for the scale choice. */
static const struct {
    enum cw_qtype type;
    double bound;
} bounds[] = {
    {CW_TYPE_F32, 0.0},     {CW_TYPE_F16, 3e-4},    {CW_TYPE_BF16, 2.5e-3}, {CW_TYPE_Q8_0, 0.0075},
    {CW_TYPE_Q8_K, 0.0095}, {CW_TYPE_Q6_K, 0.024},  {CW_TYPE_Q5_K, 0.048},  {CW_TYPE_Q5_0, 0.052},
    {CW_TYPE_Q5_1, 0.047},  {CW_TYPE_Q4_K, 0.095},  {CW_TYPE_Q4_0, 0.105},  {CW_TYPE_Q4_1, 0.095},
    {CW_TYPE_IQ4_NL, 0.095}, {CW_TYPE_IQ4_XS, 0.095}, {CW_TYPE_Q3_K, 0.185}, {CW_TYPE_Q2_K, 0.38},
    {CW_TYPE_MXFP4, 0.135}, {CW_TYPE_NVFP4, 0.135},
};
#define NB (int)(sizeof bounds / sizeof bounds[0])

static void test_traits(void)
{
    int n_dq = 0;
    for (uint32_t t = 0; t < 64; t++) {
        const struct cw_qtype_traits *tr = cw_qtype_traits(t);
        if (!tr) {
            ok(!strcmp(cw_qtype_name(t), "unknown"), "id %u: no traits, named unknown", t);
            ok(cw_qtype_row_bytes(t, 256) == 0, "id %u: no row size", t);
            continue;
        }
        ok(cw_qtype_from_name(tr->name) == (int)t, "%s: name parses back", tr->name);
        ok(tr->block_elems > 0 && tr->block_bytes > 0, "%s: block sizes", tr->name);
        int64_t n = 3 * tr->block_elems;
        ok(cw_qtype_row_bytes(t, n) == 3 * tr->block_bytes, "%s: row bytes", tr->name);
        if (tr->block_elems > 1)
            ok(cw_qtype_row_bytes(t, n + 1) == 0, "%s: partial block refused", tr->name);
        ok(cw_qtype_row_bytes(t, -tr->block_elems) == 0, "%s: negative n refused", tr->name);
        ok(!tr->quant_row == !tr->dequant_row, "%s: both converters or none", tr->name);
        n_dq += tr->dequant_row != NULL;
    }
    ok(n_dq == NB, "%d types have converters (expected %d)", n_dq, NB);
    ok(cw_qtype_from_name("Q4_K") == CW_TYPE_Q4_K && cw_qtype_from_name("BF16") == CW_TYPE_BF16,
       "names parse case-insensitively");
    ok(cw_qtype_from_name("q4_k_m") == -1, "a file type name is not a tensor type");
    /* block sizes a file reader relies on (ggml-common.h) */
    ok(cw_qtype_row_bytes(CW_TYPE_Q4_K, 4096) == 16 * 144, "q4_K row of 4096");
    ok(cw_qtype_row_bytes(CW_TYPE_Q6_K, 4096) == 16 * 210, "q6_K row of 4096");
    ok(cw_qtype_row_bytes(CW_TYPE_Q8_0, 4096) == 128 * 34, "q8_0 row of 4096");
    ok(cw_qtype_row_bytes(CW_TYPE_MXFP4, 4096) == 128 * 17, "mxfp4 row of 4096");
    ok(cw_qtype_row_bytes(CW_TYPE_NVFP4, 4096) == 64 * 36, "nvfp4 row of 4096");
}

static double rel_rms(const float *x, const float *y, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t k = 0; k < n; k++) {
        e += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
        s += (double)x[k] * x[k];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void test_round_trips(void)
{
    const int64_t n = 3 * 4096; /* a multiple of every block size */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *z = malloc(n * sizeof(float));
    uint8_t *q = malloc(n * 4), *q2 = malloc(n * 4), *q3 = malloc(n * 4);
    static const float sigmas[] = {0.02f, 1.0f, 30.0f};
    for (int i = 0; i < NB; i++) {
        const struct cw_qtype_traits *t = cw_qtype_traits(bounds[i].type);
        size_t bytes = cw_qtype_row_bytes(bounds[i].type, n);
        for (int si = 0; si < 3; si++) {
            for (int64_t k = 0; k < n; k++)
                x[k] = gauss() * sigmas[si];
            memset(q, 0xAB, bytes);
            t->quant_row(x, q, n);
            t->dequant_row(q, y, n);
            double e = rel_rms(x, y, n);
            ok(e <= bounds[i].bound, "%s sigma %g: rel RMS %.5f > bound %.5f", t->name, sigmas[si], e,
               bounds[i].bound);
            if (si == 0)
                note("%-7s rel RMS %.5f (bound %.4f)", t->name, e, bounds[i].bound);
            /* determinism, and no dependence on the output buffer's contents */
            memset(q2, 0x5C, bytes);
            t->quant_row(x, q2, n);
            ok(!memcmp(q, q2, bytes), "%s: quantising twice gives the same bytes", t->name);
            /* blocks are independent: a row equals its blocks quantised one by one */
            int64_t be = t->block_elems > 256 ? t->block_elems : 256;
            for (int64_t k = 0; k < n; k += be)
                t->quant_row(x + k, q3 + cw_qtype_row_bytes(bounds[i].type, k), be);
            ok(!memcmp(q, q3, bytes), "%s: row equals its blocks", t->name);
            /* dequantising a sub-row gives the same values */
            int64_t off = t->block_elems;
            t->dequant_row(q + t->block_bytes, z, n - off);
            ok(!memcmp(z, y + off, (n - off) * sizeof(float)), "%s: sub-row dequant", t->name);
        }
        /* zero rows: all zeros back */
        memset(x, 0, n * sizeof(float));
        t->quant_row(x, q, n);
        t->dequant_row(q, y, n);
        int nz = 0;
        for (int64_t k = 0; k < n; k++)
            nz += y[k] != 0.0f;
        ok(nz == 0, "%s: zero row gives %d nonzeros", t->name, nz);
        /* hostile values must not crash or trip the sanitizers */
        for (int64_t k = 0; k < n; k++)
            x[k] = (k % 7 == 0) ? INFINITY : (k % 11 == 0) ? NAN : (k % 5 == 0) ? 3e38f : (k % 3) ? 1e-42f : -0.0f;
        t->quant_row(x, q, n);
        t->dequant_row(q, y, n);
    }
    free(x);
    free(y);
    free(z);
    free(q);
    free(q2);
    free(q3);
}

/* Values on the quantisation grid come back exactly (worked by hand). */
static void test_exact(void)
{
    float x[256], y[256];
    uint8_t q[512];
    /* Q8_0: integers up to +-127 give d = 1 and q = x */
    for (int j = 0; j < 256; j++)
        x[j] = (float)((j * 37) % 255 - 127);
    x[0] = 127.0f;
    x[32] = x[64] = x[96] = x[128] = x[160] = x[192] = x[224] = -127.0f;
    cw_qtype_traits(CW_TYPE_Q8_0)->quant_row(x, q, 256);
    const struct cw_block_q8_0 *b8 = (const void *)q;
    ok(b8->d == 0x3c00 && b8->qs[0] == 127 && b8->qs[1] == x[1], "q8_0: d = 1.0, q = x");
    cw_qtype_traits(CW_TYPE_Q8_0)->dequant_row(q, y, 256);
    ok(!memcmp(x, y, sizeof x), "q8_0: integers round-trip exactly");
    /* Q8_K: same integers, the block max -127 gives scale 1 */
    x[0] = -127.0f;
    cw_qtype_traits(CW_TYPE_Q8_K)->quant_row(x, q, 256);
    const struct cw_block_q8_k *bk = (const void *)q;
    int sum = 0;
    for (int j = 0; j < 16; j++)
        sum += (int)x[j];
    ok(bk->d == 1.0f && bk->qs[5] == x[5] && bk->bsums[0] == sum, "q8_K: d = 1, q = x, bsums");
    cw_qtype_traits(CW_TYPE_Q8_K)->dequant_row(q, y, 256);
    ok(!memcmp(x, y, sizeof x), "q8_K: integers round-trip exactly");
    /* Q8_K rounds ties to even: with scale 1, 2.5 -> 2 and -3.5 -> -4 */
    x[1] = 2.5f;
    x[2] = -3.5f;
    cw_qtype_traits(CW_TYPE_Q8_K)->quant_row(x, q, 256);
    ok(bk->qs[1] == 2 && bk->qs[2] == -4, "q8_K: ties to even (%d, %d)", bk->qs[1], bk->qs[2]);
    /* Q4_0: multiples of 0.25 in -2..1.75 with -2 present: d = 0.25 */
    for (int j = 0; j < 32; j++)
        x[j] = 0.25f * (float)(j % 16 - 8);
    cw_qtype_traits(CW_TYPE_Q4_0)->quant_row(x, q, 32);
    cw_qtype_traits(CW_TYPE_Q4_0)->dequant_row(q, y, 32);
    ok(!memcmp(x, y, 32 * sizeof(float)), "q4_0: grid values round-trip exactly");
    ok(q[2] == (0 | 0 << 4) && q[3] == (1 | 1 << 4), "q4_0: nibble layout (elements j, j+16)");
    /* Q5_0: multiples of 1/16 in -1..15/16: fifth bits in qh */
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16) / 16.0f;
    cw_qtype_traits(CW_TYPE_Q5_0)->quant_row(x, q, 32);
    cw_qtype_traits(CW_TYPE_Q5_0)->dequant_row(q, y, 32);
    ok(!memcmp(x, y, 32 * sizeof(float)), "q5_0: grid values round-trip exactly");
    ok(q[2] == 0 && q[3] == 0 && q[4] == 0xff && q[5] == 0xff, "q5_0: qh = high bits of q = j");
    /* MXFP4: E2M1 values times 2^-3; max 0.75 gives e = floor(log2 0.75) - 2 + 127 */
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 32; j++)
        x[j] = (j & 8 ? -1.0f : 1.0f) * e2m1[j & 7] / 8.0f + 0.0f; /* no -0 */
    cw_qtype_traits(CW_TYPE_MXFP4)->quant_row(x, q, 32);
    cw_qtype_traits(CW_TYPE_MXFP4)->dequant_row(q, y, 32);
    ok(!memcmp(x, y, 32 * sizeof(float)) && q[0] == 127 - 1 - 2, "mxfp4: E2M1 grid exact (e = %d)", q[0]);
}

/* Quantiser throughput, for the report (not asserted: CI machines vary). */
static void bench(void)
{
    static const enum cw_qtype fast[] = {CW_TYPE_Q4_K, CW_TYPE_Q5_K, CW_TYPE_Q6_K, CW_TYPE_Q8_0,
                                         CW_TYPE_Q5_0, CW_TYPE_BF16, CW_TYPE_F16, CW_TYPE_Q8_K};
    const int64_t n = 1 << 20;
    float *x = malloc(n * sizeof(float));
    uint8_t *q = malloc(n * 4);
    for (int64_t k = 0; k < n; k++)
        x[k] = gauss() * 0.02f;
    for (size_t i = 0; i < sizeof fast / sizeof fast[0]; i++) {
        const struct cw_qtype_traits *t = cw_qtype_traits(fast[i]);
        struct timespec a, b;
        int reps = 0;
        double s = 0;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do {
            t->quant_row(x, q, n);
            reps++;
            clock_gettime(CLOCK_MONOTONIC, &b);
            s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        } while (s < 0.05);
        note("%-5s quantise: %6.0f M elements/s (one core)", t->name, (double)n * reps / s / 1e6);
    }
    free(x);
    free(q);
}

int main(void)
{
    test_traits();
    test_round_trips();
    test_exact();
    bench();
    return done();
}

/* test_quant_oracle.c — cwen's quant formats against llama.cpp's ggml.
 *
 * Bit for bit: f16/bf16 scalar conversions (all 65536 halves; random and edge
 * floats), every dequantiser against ggml_get_type_traits(t)->to_float on
 * random blocks with edge scales, ggml's to_float of cwen's own quantised
 * blocks, and the activation quantisers Q8_K / Q8_0 against from_float_ref
 * and the CPU backend's own from_float (libggml-cpu-haswell.so, dlopen'ed). */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf/quant.h"
#include "oracle.h"
#include "../test.h"

/* ---- deterministic random numbers ---- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float unif(void) { return (float)((rnd() >> 40) + 0.5) / 16777216.0f; }
static float gauss(void) { return sqrtf(-2.0f * logf(unif())) * cosf(6.2831853f * unif()); }
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* A random finite f16 with edge values mixed in: zeros, subnormals, max. */
static uint16_t rand_f16(void)
{
    static const uint16_t edge[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0200, 0x0400,
                                    0x7bff, 0xfbff, 0x3c00, 0xbc00};
    if (rnd() % 8 == 0)
        return edge[rnd() % (sizeof edge / sizeof edge[0])];
    uint16_t h;
    do
        h = (uint16_t)rnd();
    while ((h & 0x7c00) == 0x7c00);
    return h;
}

/* ---- scalar conversions ---- */
static void test_scalars(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = cw_f16_to_f32((cw_f16)h), b = ggml_fp16_to_fp32((ggml_fp16_t)h);
        bad += fbits(a) != fbits(b);
    }
    ok(bad == 0, "f16->f32: %d of 65536 differ from ggml_fp16_to_fp32", bad);
    note("f16->f32: all 65536 values compared");

    static const uint32_t edge[] = {
        0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000, /* f32 subnormal/min */
        0x33000000, 0x33000001, 0x32ffffff, 0x33800000, 0x33c00000, 0x33400000, /* around 2^-25, 2^-24 */
        0x387fc000, 0x387fe000, 0x387fffff, 0x38800000, 0x38801000, 0x38803000, /* f16 sub/normal edge */
        0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0xc77ff000, /* f16 max / overflow */
        0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, /* inf, nan */
        0x7fbfffff, 0xff800001, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f800fff, /* ties at 1.0 */
    };
    int n = 0;
    int bad16 = 0, badb = 0;
    for (int i = 0; i < 2000000 + (int)(sizeof edge / 4); i++, n++) {
        uint32_t u;
        if (i < (int)(sizeof edge / 4))
            u = edge[i];
        else if (i % 2)
            u = (uint32_t)rnd();
        else { /* exponents near f16's range (2^-31 .. 2^17), half of them exact ties */
            u = ((uint32_t)rnd() & 0x807fffffu) | (uint32_t)(96 + rnd() % 48) << 23;
            if (rnd() & 1)
                u = (u & ~0x1fffu) | 0x1000u;
        }
        float f = bitsf(u);
        bad16 += cw_f32_to_f16(f) != ggml_fp32_to_fp16(f);
        badb += cw_f32_to_bf16(f) != ggml_fp32_to_bf16(f).bits;
        ggml_bf16_t hb = {(uint16_t)u};
        badb += fbits(cw_bf16_to_f32((cw_bf16)u)) != fbits(ggml_bf16_to_fp32(hb));
    }
    ok(bad16 == 0, "f32->f16: %d of %d differ from ggml_fp32_to_fp16", bad16, n);
    ok(badb == 0, "bf16 conversions: %d of %d differ from ggml", badb, n);
    note("f32->f16 and f32<->bf16: %d values compared (random bits, ties, edges)", n);
}

/* ---- dequantisers on random blocks ---- */

/* Where each type keeps its f16 scales (random bytes elsewhere). */
struct layout {
    enum cw_qtype type;
    int nf16;
    size_t f16_at[2];
};
#define OFF(t, f) offsetof(struct cw_block_##t, f)
static const struct layout layouts[] = {
    {CW_TYPE_F32, 0, {0}},
    {CW_TYPE_F16, 1, {0}},
    {CW_TYPE_BF16, 0, {0}},
    {CW_TYPE_Q4_0, 1, {OFF(q4_0, d)}},
    {CW_TYPE_Q4_1, 2, {OFF(q4_1, d), OFF(q4_1, m)}},
    {CW_TYPE_Q5_0, 1, {OFF(q5_0, d)}},
    {CW_TYPE_Q5_1, 2, {OFF(q5_1, d), OFF(q5_1, m)}},
    {CW_TYPE_Q8_0, 1, {OFF(q8_0, d)}},
    {CW_TYPE_Q2_K, 2, {OFF(q2_k, d), OFF(q2_k, dmin)}},
    {CW_TYPE_Q3_K, 1, {OFF(q3_k, d)}},
    {CW_TYPE_Q4_K, 2, {OFF(q4_k, d), OFF(q4_k, dmin)}},
    {CW_TYPE_Q5_K, 2, {OFF(q5_k, d), OFF(q5_k, dmin)}},
    {CW_TYPE_Q6_K, 1, {OFF(q6_k, d)}},
    {CW_TYPE_Q8_K, 0, {0}},
    {CW_TYPE_IQ4_NL, 1, {OFF(iq4_nl, d)}},
    {CW_TYPE_IQ4_XS, 1, {OFF(iq4_xs, d)}},
    {CW_TYPE_MXFP4, 0, {0}},
    {CW_TYPE_NVFP4, 0, {0}},
};
#define NTYPES (int)(sizeof layouts / sizeof layouts[0])

/* ggml-base's traits table has no to_float for F32 (its native type: the
 * identity) nor converters for Q8_K; libggml-base exports Q8_K's own
 * (declared in ggml-quants.h, which is not a public header). */
void dequantize_row_q8_K(const void *restrict x, float *restrict y, int64_t k);
void quantize_row_q8_K_ref(const float *restrict x, void *restrict y, int64_t k);
static void f32_copy(const void *restrict x, float *restrict y, int64_t n) { memcpy(y, x, n * sizeof(float)); }
static ggml_to_float_t ggml_to_float(enum cw_qtype t)
{
    const struct ggml_type_traits *gt = ggml_get_type_traits((enum ggml_type)t);
    if (gt->to_float)
        return gt->to_float;
    return t == CW_TYPE_F32 ? f32_copy : t == CW_TYPE_Q8_K ? dequantize_row_q8_K : NULL;
}

static void fill_blocks(const struct layout *L, uint8_t *buf, int nblk, size_t bb)
{
    for (size_t k = 0; k < nblk * bb; k++)
        buf[k] = (uint8_t)rnd();
    for (int i = 0; i < nblk; i++) {
        uint8_t *b = buf + i * bb;
        if (i == 1)
            memset(b, 0xff, bb); /* extreme nibbles / bits, then legal scales */
        if (i == 2)
            memset(b, 0x00, bb);
        for (int k = 0; k < L->nf16; k++) {
            uint16_t h = rand_f16();
            memcpy(b + L->f16_at[k], &h, 2);
        }
        switch (L->type) {
        case CW_TYPE_F16:
            for (size_t k = 0; k < bb; k += 2) {
                uint16_t h = rand_f16();
                memcpy(b + k, &h, 2);
            }
            break;
        case CW_TYPE_F32: { /* finite floats, subnormals included */
            uint32_t u = (uint32_t)rnd();
            if ((u & 0x7f800000u) == 0x7f800000u)
                u &= 0xbfffffffu;
            memcpy(b, &u, 4);
            break;
        }
        case CW_TYPE_Q8_K: { /* a finite f32 scale with a moderate exponent */
            float d = ldexpf(unif() - 0.5f, (int)(rnd() % 80) - 60);
            if (i % 7 == 0)
                d = 0.0f;
            memcpy(b, &d, 4);
            break;
        }
        case CW_TYPE_MXFP4: { /* e: all 256 codes, and 0/1/254 often */
            static const uint8_t ee[] = {0, 1, 254, 255, 127, 128};
            b[0] = i < 256 ? (uint8_t)i : ee[i % 6];
            break;
        }
        case CW_TYPE_NVFP4: /* the 4 scale bytes run through all 256 codes */
            for (int s = 0; s < 4; s++)
                b[s] = (uint8_t)(4 * i + s);
            break;
        default:
            break;
        }
    }
}

static void test_dequant(void)
{
    const int nblk = 4096;
    for (int t = 0; t < NTYPES; t++) {
        const struct layout *L = &layouts[t];
        const struct cw_qtype_traits *ct = cw_qtype_traits(L->type);
        const struct ggml_type_traits *gt = ggml_get_type_traits((enum ggml_type)L->type);
        ggml_to_float_t to_float = gt ? ggml_to_float(L->type) : NULL;
        ok(ct && ct->dequant_row && to_float, "%s: both have a dequantiser", cw_qtype_name(L->type));
        if (!ct || !ct->dequant_row || !to_float)
            continue;
        ok((int64_t)gt->blck_size == ct->block_elems && gt->type_size == ct->block_bytes,
           "%s: block %lld/%zu bytes, ggml %lld/%zu", ct->name, (long long)ct->block_elems,
           ct->block_bytes, (long long)gt->blck_size, gt->type_size);
        int64_t n = nblk * ct->block_elems;
        uint8_t *buf = malloc(nblk * ct->block_bytes);
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
        fill_blocks(L, buf, nblk, ct->block_bytes);
        ct->dequant_row(buf, a, n);
        to_float(buf, b, n);
        int64_t bad = 0, first = -1;
        for (int64_t k = 0; k < n; k++)
            if (fbits(a[k]) != fbits(b[k])) {
                bad++;
                first = first < 0 ? k : first;
            }
        ok(bad == 0, "%s dequant: %lld of %lld differ (first at %lld: %g vs ggml %g)", ct->name,
           (long long)bad, (long long)n, (long long)first, first >= 0 ? a[first] : 0.0,
           first >= 0 ? b[first] : 0.0);
        note("%-7s dequant: %8lld values bit-compared with ggml to_float", ct->name, (long long)n);
        free(buf);
        free(a);
        free(b);
    }
}

/* ---- quantisers ---- */

static double rel_rms(const float *x, const float *y, int64_t n)
{
    double e = 0, s = 0;
    for (int64_t k = 0; k < n; k++) {
        e += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
        s += (double)x[k] * x[k];
    }
    return sqrt(e / s);
}

/* cwen's blocks decoded by ggml equal cwen's own decoding; and, for
 * information, cwen's error next to llama.cpp's reference quantiser's. */
static void test_quant_roundtrip(void)
{
    const int64_t n = 1 << 18;
    float *x = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    uint8_t *q = malloc(n * 4 + 1024);
    for (int64_t k = 0; k < n; k++)
        x[k] = gauss() * 0.02f;
    for (int t = 0; t < NTYPES; t++) {
        enum cw_qtype ty = layouts[t].type;
        const struct cw_qtype_traits *ct = cw_qtype_traits(ty);
        const struct ggml_type_traits *gt = ggml_get_type_traits((enum ggml_type)ty);
        ct->quant_row(x, q, n);
        ct->dequant_row(q, a, n);
        ggml_to_float(ty)(q, b, n);
        ok(memcmp(a, b, n * sizeof(float)) == 0, "%s: ggml decodes cwen's blocks differently", ct->name);
        double ours = rel_rms(x, a, n), ref = -1;
        ggml_from_float_t ref_q = ty == CW_TYPE_Q8_K ? quantize_row_q8_K_ref : gt->from_float_ref;
        if (ref_q) {
            ref_q(x, q, n);
            ggml_to_float(ty)(q, b, n);
            ref = rel_rms(x, b, n);
        }
        note("%-7s quant: %lld Gaussian values; rel RMS cwen %.5f, llama.cpp ref %.5f", ct->name,
             (long long)n, ours, ref);
    }
    free(x);
    free(a);
    free(b);
    free(q);
}

/* Activation data: Gaussian blocks, blocks scaled so that max|x| = 127
 * and the rest lie on exact halves (ties for both Q8 formats), zero blocks,
 * blocks with zeros mixed in, and a few tiny / huge scales. */
static void activation_data(float *x, int64_t n)
{
    for (int64_t blk = 0; blk < n / 256; blk++) {
        float *v = x + blk * 256;
        int kind = (int)(blk % 6);
        float scale = kind == 5 ? ldexpf(1.0f, (int)(rnd() % 60) - 30) : 1.0f;
        for (int j = 0; j < 256; j++) {
            switch (kind) {
            case 0:
            case 5:
                v[j] = gauss() * scale;
                break;
            case 1: /* ties: every 32-block has max |x| = 127 exactly */
                v[j] = (j % 32 == 0) ? ((rnd() & 1) ? 127.0f : -127.0f)
                                     : (float)((int)(rnd() % 253) - 126) + 0.5f * (float)(rnd() & 1);
                break;
            case 2:
                v[j] = 0.0f;
                break;
            case 3:
                v[j] = (rnd() % 3) ? 0.0f : gauss();
                break;
            case 4: /* one nonzero per 32, or -0 */
                v[j] = (j % 32 == 5) ? gauss() : -0.0f;
                break;
            }
        }
    }
}

typedef const struct ggml_type_traits_cpu_ *(*cpu_traits_fn)(enum ggml_type);
struct ggml_type_traits_cpu_ { /* ggml-cpu.h's struct ggml_type_traits_cpu */
    ggml_from_float_t from_float;
    void *vec_dot;
    enum ggml_type vec_dot_type;
    int64_t nrows;
};

static void *open_cpu_backend(cpu_traits_fn *traits)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cpu/package/bins/linux-x64/libggml-cpu-haswell.so", oracle_dir());
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return NULL;
    void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    *traits = (cpu_traits_fn)dlsym(h, "ggml_get_type_traits_cpu");
    if (!init || !*traits)
        return NULL;
    init();
    return h;
}

static int64_t count_diff_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    int64_t d = 0;
    for (size_t k = 0; k < n; k++)
        d += a[k] != b[k];
    return d;
}

static void test_activation_quant(void)
{
    const int64_t n = 4096 * 256; /* 1,048,576 values */
    float *x = malloc(n * sizeof(float));
    activation_data(x, n);
    cpu_traits_fn cpu = NULL;
    void *h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? open_cpu_backend(&cpu) : NULL;
    if (!h)
        skip("libggml-cpu-haswell.so not loadable here (%s): CPU-backend quantiser not compared", dlerror());

    /* Q8_K: ref and the CPU backend (which calls the ref on x86) */
    {
        size_t bytes = cw_qtype_row_bytes(CW_TYPE_Q8_K, n);
        uint8_t *a = calloc(1, bytes), *b = calloc(1, bytes);
        cw_qtype_traits(CW_TYPE_Q8_K)->quant_row(x, a, n);
        quantize_row_q8_K_ref(x, b, n);
        /* the ref leaves bsums of all-zero blocks unwritten: b was zeroed */
        ok(count_diff_bytes(a, b, bytes) == 0, "q8_K vs quantize_row_q8_K_ref: %lld bytes differ",
           (long long)count_diff_bytes(a, b, bytes));
        if (h) {
            memset(b, 0, bytes);
            cpu(GGML_TYPE_Q8_K)->from_float(x, b, n);
            ok(count_diff_bytes(a, b, bytes) == 0, "q8_K vs CPU backend: %lld bytes differ",
               (long long)count_diff_bytes(a, b, bytes));
            ok(cpu(GGML_TYPE_Q4_K)->vec_dot_type == GGML_TYPE_Q8_K, "CPU pairs Q4_K with Q8_K");
        }
        note("q8_K quant: %lld values bit-compared with quantize_row_q8_K_ref%s", (long long)n,
             h ? " and the CPU backend" : "");
        free(a);
        free(b);
    }
    /* Q8_0: the CPU backend exactly; the scalar ref too except on exact
     * ties (it rounds them away from zero), by one step of q, never in d. */
    {
        size_t bytes = cw_qtype_row_bytes(CW_TYPE_Q8_0, n);
        uint8_t *a = calloc(1, bytes), *b = calloc(1, bytes);
        cw_qtype_traits(CW_TYPE_Q8_0)->quant_row(x, a, n);
        if (h) {
            cpu(GGML_TYPE_Q8_0)->from_float(x, b, n);
            ok(count_diff_bytes(a, b, bytes) == 0, "q8_0 vs CPU backend: %lld bytes differ",
               (long long)count_diff_bytes(a, b, bytes));
            ok(cpu(GGML_TYPE_Q8_0)->vec_dot_type == GGML_TYPE_Q8_0, "CPU pairs Q8_0 with Q8_0");
        }
        ggml_get_type_traits(GGML_TYPE_Q8_0)->from_float_ref(x, b, n);
        int64_t dq = 0, dd = 0, big = 0, dtie = 0;
        const struct cw_block_q8_0 *qa = (const void *)a, *qb = (const void *)b;
        for (int64_t i = 0; i < n / 32; i++) {
            dd += qa[i].d != qb[i].d;
            for (int j = 0; j < 32; j++) {
                dq += qa[i].qs[j] != qb[i].qs[j];
                dtie += qa[i].qs[j] != qb[i].qs[j] && (i / 8) % 6 == 1;
                big += abs(qa[i].qs[j] - qb[i].qs[j]) > 1;
            }
        }
        ok(dq == dtie, "q8_0 vs from_float_ref: %lld q differ outside the tie blocks", (long long)(dq - dtie));
        ok(dd == 0 && big == 0, "q8_0 vs from_float_ref: %lld scales differ, %lld q off by > 1",
           (long long)dd, (long long)big);
        note("q8_0 quant: %lld values bit-compared with the CPU backend%s; vs from_float_ref "
             "%lld q differ by one step, %lld of them exact ties (ref rounds half away from zero)",
             (long long)n, h ? "" : " (skipped)", (long long)dq, (long long)dtie);
        free(a);
        free(b);
    }
    free(x);
    if (h)
        dlclose(h);
}

int main(void)
{
    test_scalars();
    test_dequant();
    test_quant_roundtrip();
    test_activation_quant();
    return done();
}

/* test_cpu_gemv.c — the CPU dot products, matmuls and thread pool.
 *
 * For every weight type: vec_dot against a double-precision dot of the
 * dequantised weights with the dequantised activations (the integer work is
 * exact, so only f32 rounding may differ), the AVX2 kernels against the
 * scalar ones (bit-identical), matmul batch vs token by token and over
 * 1/2/3 threads (bit-identical), the MoE matmul against direct dot products,
 * several products of one input in one call against each alone,
 * and the pool's handshake under back-to-back and sleeping regions. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "cpu/cpu_gemv.h"
#include "gguf/quant.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float grand(void)
{
    double u = urand() + 1e-300, v = urand();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

/* Gaussian values whose scale changes every 32 elements, with a few outliers:
 * exercises different block scales and the full range of quant levels. */
static void fill(float *x, int64_t n)
{
    float s = 1;
    for (int64_t i = 0; i < n; i++) {
        if (i % 32 == 0)
            s = (float)exp(3 * (urand() - 0.5));
        x[i] = s * grand() * (urand() < 0.01 ? 8.0f : 1.0f);
    }
}

static const enum cw_qtype types[] = {
    CW_TYPE_F32,  CW_TYPE_F16,  CW_TYPE_BF16,   CW_TYPE_Q8_0,  CW_TYPE_Q4_0,  CW_TYPE_Q4_1,
    CW_TYPE_Q5_0, CW_TYPE_Q5_1, CW_TYPE_IQ4_NL, CW_TYPE_MXFP4, CW_TYPE_NVFP4, CW_TYPE_Q2_K,
    CW_TYPE_Q3_K, CW_TYPE_Q4_K, CW_TYPE_Q5_K,   CW_TYPE_Q6_K,  CW_TYPE_IQ4_XS,
};
#define N_TYPES (int)(sizeof(types) / sizeof(types[0]))

/* Dequantises an activation row (Q8_1 has no traits dequantiser). */
static void dequant_act(enum cw_qtype wtype, const void *xq, float *out, int64_t n)
{
    int at = cw_cpu_vec_dot_type(wtype);
    if (at == CW_TYPE_Q8_1) {
        const struct cw_block_q8_1 *b = xq;
        for (int64_t i = 0; i < n; i++)
            out[i] = cw_f16_to_f32(b[i / 32].d) * b[i / 32].qs[i % 32];
        return;
    }
    cw_qtype_traits((uint32_t)at)->dequant_row(xq, out, n);
}

static void quant_weights(enum cw_qtype t, const float *src, void *dst, int64_t rows, int64_t n)
{
    size_t rb = cw_qtype_row_bytes(t, n);
    for (int64_t r = 0; r < rows; r++)
        cw_qtype_traits(t)->quant_row(src + r * n, (char *)dst + r * rb, n);
}

/* n per type: a few blocks, odd counts; float rows get an unaligned tail. */
static int64_t size_for(enum cw_qtype t, int which)
{
    int64_t be = cw_qtype_traits(t)->block_elems;
    if (be == 1)
        return which ? 1000 : 37;
    if (be == 256)
        return which ? 256 * 11 : 256; /* 11: one group of 8 and a tail */
    return be * (which ? 23 : 3);
}

static void test_vec_dot(enum cw_qtype t)
{
    const char *name = cw_qtype_name(t);
    enum cw_cpu_isa best = cw_cpu_isa_best();
    double worst = 0;
    int bit_same = 1, n_checked = 0;
    for (int which = 0; which < 2; which++) {
        int64_t n = size_for(t, which);
        size_t rb = cw_qtype_row_bytes(t, n), ab = cw_cpu_act_bytes(t, n);
        ok(rb > 0 && ab > 0, "%s: row/act bytes for n=%lld", name, (long long)n);
        float *w = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
        float *wd = malloc(n * sizeof(float)), *xd = malloc(n * sizeof(float));
        void *wq = malloc(rb), *xq = malloc(ab);
        for (int rep = 0; rep < 20; rep++) {
            fill(w, n);
            fill(x, n);
            quant_weights(t, w, wq, 1, n);
            cw_qtype_traits(t)->dequant_row(wq, wd, n);
            cw_cpu_quantize_act(t, x, xq, n);
            dequant_act(t, xq, xd, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
            }
            if (cw_cpu_vec_dot_type(t) == CW_TYPE_Q8_1) {
                /* the min term uses the stored s = f16(d·Σq), not Σ of the
                 * dequantised activations: the format's own rounding */
                const struct cw_block_q8_1 *xb = xq;
                size_t bb = cw_qtype_traits(t)->block_bytes;
                for (int64_t b = 0; b < n / 32; b++) {
                    cw_f16 mh;
                    memcpy(&mh, (const char *)wq + b * bb + 2, 2); /* d, m first */
                    double sx = 0;
                    for (int j = 0; j < 32; j++)
                        sx += xd[32 * b + j];
                    ref += cw_f16_to_f32(mh) * (cw_f16_to_f32(xb[b].s) - sx);
                }
            }
            float got = cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR)(n, wq, xq);
            double rel = mag > 0 ? fabs(got - ref) / mag : fabs(got - ref);
            if (rel > worst)
                worst = rel;
            for (int isa = CW_CPU_AVX2; isa <= (int)best; isa++) {
                float fast = cw_cpu_vec_dot_fn(t, (enum cw_cpu_isa)isa)(n, wq, xq);
                if (memcmp(&got, &fast, sizeof(float)) != 0)
                    bit_same = 0;
            }
            n_checked++;
        }
        free(w), free(x), free(wd), free(xd), free(wq), free(xq);
    }
    /* 1e-6 of Σ|w·x|: a few f32 roundings per block, nothing more. */
    ok(worst < 1e-6, "%s: vec_dot vs double dot of dequantised rows: max rel err %.3g", name,
       worst);
    ok(bit_same, "%s: every kernel up to %s bit-identical to scalar over %d dots", name,
       cw_cpu_isa_name(best), n_checked);
    note("%-7s act=%-5s max rel err %.2e, simd==scalar %s%s", name,
         cw_qtype_name((uint32_t)cw_cpu_vec_dot_type(t)), worst, bit_same ? "yes" : "NO",
         cw_cpu_vec_dot_fn(t, best) != cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR) ? " (own SIMD kernel)"
                                                                           : " (scalar only)");
}

/* Blocks of random bytes (every bit pattern of quants and 6-bit scales),
 * with only the float scale fields set to sane values: the AVX2 kernels must
 * still equal the scalar ones bit for bit. */
static const struct {
    enum cw_qtype t;
    int off[2]; /* f16 scale offsets in the block; -1 none */
} random_cases[] = {
    {CW_TYPE_Q8_0, {0, -1}},  {CW_TYPE_Q4_0, {0, -1}}, {CW_TYPE_IQ4_NL, {0, -1}},
    {CW_TYPE_MXFP4, {-1, -1}}, {CW_TYPE_Q4_K, {0, 2}},  {CW_TYPE_Q5_K, {0, 2}},
    {CW_TYPE_Q6_K, {208, -1}}, {CW_TYPE_IQ4_XS, {0, -1}},
};

/* Random bytes for nb blocks of random_cases[c]'s type, with only the float
 * scale fields set to sane values. */
static void random_blocks(int c, uint8_t *wq, int64_t nb)
{
    const struct cw_qtype_traits *tr = cw_qtype_traits(random_cases[c].t);
    for (size_t i = 0; i < (size_t)nb * tr->block_bytes; i++)
        wq[i] = (uint8_t)(urand() * 256);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = wq + b * tr->block_bytes;
        if (random_cases[c].t == CW_TYPE_MXFP4)
            blk[0] = (uint8_t)(118 + urand() * 16);
        for (int k = 0; k < 2; k++)
            if (random_cases[c].off[k] >= 0) {
                cw_f16 h = cw_f32_to_f16((float)(urand() - 0.5) * 0.01f);
                memcpy(blk + random_cases[c].off[k], &h, 2);
            }
    }
}

static void test_random_blocks(void)
{
    enum cw_cpu_isa best = cw_cpu_isa_best();
    for (int c = 0; c < (int)(sizeof random_cases / sizeof *random_cases); c++) {
        enum cw_qtype t = random_cases[c].t;
        const struct cw_qtype_traits *tr = cw_qtype_traits(t);
        int64_t n = 256 * 11, nb = n / tr->block_elems;
        size_t rb = cw_qtype_row_bytes(t, n);
        uint8_t *wq = malloc(rb);
        float *x = malloc(n * sizeof(float));
        void *xq = malloc(cw_cpu_act_bytes(t, n));
        int same = 1, same4 = 1, n4_levels = 0;
        void *xq4[8];
        for (int i = 0; i < 8; i++)
            xq4[i] = malloc(cw_cpu_act_bytes(t, n));
        for (int rep = 0; rep < 200; rep++) {
            random_blocks(c, wq, nb);
            fill(x, n);
            cw_cpu_quantize_act(t, x, xq, n);
            float a = cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR)(n, wq, xq);
            same &= isfinite(a);
            for (int isa = CW_CPU_AVX2; isa <= (int)best; isa++) {
                float b = cw_cpu_vec_dot_fn(t, (enum cw_cpu_isa)isa)(n, wq, xq);
                same &= !memcmp(&a, &b, sizeof a);
            }
            for (int isa = CW_CPU_AVX2; isa <= (int)best; isa++)
                for (int rows = 4; rows <= 8; rows += 4) {
                    cw_vec_dotn_fn dotn = cw_cpu_vec_dotn_fn(t, (enum cw_cpu_isa)isa, rows);
                    if (!dotn)
                        continue;
                    n4_levels |= 1 << (4 * isa + rows / 4);
                    /* the row's length cut to 2 blocks now and then (the
                     * 35B's 512-wide experts: no group of 8) */
                    const int64_t n4 = rep % 4 == 3 ? 2 * tr->block_elems : n;
                    const void *xs[8];
                    float r4[8];
                    for (int i = 0; i < rows; i++) {
                        fill(x, n);
                        cw_cpu_quantize_act(t, x, xq4[i], n4);
                        xs[i] = xq4[i];
                    }
                    dotn(n4, wq, xs, r4);
                    for (int i = 0; i < rows; i++) {
                        float want = cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR)(n4, wq, xq4[i]);
                        same4 &= !memcmp(&want, &r4[i], sizeof want);
                    }
                }
        }
        ok(same, "%s: random blocks: every SIMD level == scalar bit for bit", cw_qtype_name(t));
        if (n4_levels)
            ok(same4, "%s: random blocks: multi-row kernels (mask %#x) == scalar, each row",
               cw_qtype_name(t), n4_levels);
        if (best >= CW_CPU_AVX512 && (t == CW_TYPE_Q4_K || t == CW_TYPE_Q6_K))
            ok(cw_cpu_vec_dot_fn(t, CW_CPU_AVX512) != cw_cpu_vec_dot_fn(t, CW_CPU_AVX2) &&
                   cw_cpu_vec_dotn_fn(t, CW_CPU_AVX512, 4) !=
                       cw_cpu_vec_dotn_fn(t, CW_CPU_AVX2, 4) &&
                   cw_cpu_vec_dotn_fn(t, CW_CPU_AVX512, 8) != NULL,
               "%s has its own AVX-512 kernels", cw_qtype_name(t));
        for (int i = 0; i < 8; i++)
            free(xq4[i]);
        if (best >= CW_CPU_AVX2)
            ok(cw_cpu_vec_dot_fn(t, CW_CPU_AVX2) != cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR),
               "%s has its own AVX2 kernel", cw_qtype_name(t));
        free(wq), free(x), free(xq);
    }
}

/* The prompt kernels, where this CPU has them: rows of 1 to 25 blocks
 * (whole groups of 8 and a last group of fewer), random blocks (every
 * pattern of the 6-bit scales and mins) and quantised ones, 1, 4 and 8
 * activation rows a call against one weight row, 4 and 8 against two,
 * activations with a zero block and the largest magnitude twice, signs
 * apart (either sign gives these bits: qs and d both flip): each
 * result the scalar vec_dot's on the plain row, bit for bit. */
static void test_prompt_kernels(void)
{
    enum cw_cpu_isa best = cw_cpu_isa_best();
    if (best >= CW_CPU_AVX512)
        ok(cw_cpu_prompt_kernels(CW_TYPE_Q4_K, best) && cw_cpu_prompt_kernels(CW_TYPE_Q6_K, best),
           "q4_K and q6_K have AVX-512 prompt kernels");
    else
        note("no AVX-512 here: no prompt kernels to test");
    for (int c = 0; c < (int)(sizeof random_cases / sizeof *random_cases); c++) {
        const enum cw_qtype t = random_cases[c].t;
        const struct cw_cpu_prompt *pk = cw_cpu_prompt_kernels(t, best);
        if (!pk)
            continue;
        const struct cw_qtype_traits *tr = cw_qtype_traits(t);
        const int64_t max_nb = 25, max_n = max_nb * tr->block_elems;
        const size_t pb = pk->act_bytes(max_n);
        uint8_t *wq = malloc(2 * cw_qtype_row_bytes(t, max_n));
        float *x = malloc(max_n * sizeof(float)), *w = malloc(2 * max_n * sizeof(float));
        char *plain = malloc(8 * cw_cpu_act_bytes(t, max_n)), *il = aligned_alloc(64, 8 * pb);
        int same = 1, sizes = 1, calls = 0;
        for (int64_t nb = 1; nb <= max_nb; nb++) {
            const int64_t n = nb * tr->block_elems;
            const size_t ab = cw_cpu_act_bytes(t, n), ib = pk->act_bytes(n);
            const size_t rb = cw_qtype_row_bytes(t, n);
            sizes &= ib % 64 == 0 && ib >= ab;
            for (int rep = 0; rep < 6; rep++) {
                if (rep % 2) {
                    random_blocks(c, wq, 2 * nb);
                } else {
                    fill(w, 2 * n);
                    quant_weights(t, w, wq, 2, n);
                }
                const void *xs[8];
                for (int i = 0; i < 8; i++) {
                    fill(x, n);
                    if (i == rep) { /* a zero block; the largest magnitude twice, signs apart */
                        memset(x, 0, tr->block_elems * sizeof(float));
                        /* 16 apart or more, or within 16 (one register) */
                        x[rep % 2 ? n - 13 : n - 200] = rep % 4 < 2 ? 1000.0f : -1000.0f;
                        x[n - 3] = rep % 4 < 2 ? -1000.0f : 1000.0f;
                    }
                    cw_cpu_quantize_act(t, x, plain + i * ab, n);
                    pk->quantize(x, il + i * ib, n);
                    xs[i] = il + i * ib;
                }
                float want[16], got[16];
                for (int i = 0; i < 16; i++)
                    want[i] = cw_cpu_vec_dot_fn(t, CW_CPU_SCALAR)(n, wq + i / 8 * rb,
                                                                  plain + i % 8 * ab);
                for (int i = 0; i < 8; i++)
                    got[i] = pk->dot(n, wq, xs[i]);
                same &= !memcmp(want, got, 8 * sizeof(float));
                pk->dot4(n, wq, xs, got);
                pk->dot4(n, wq, xs + 4, got + 4);
                same &= !memcmp(want, got, 8 * sizeof(float));
                pk->dot8(n, wq, xs, got);
                same &= !memcmp(want, got, 8 * sizeof(float));
                calls += 11;
                if (pk->dot8x2) {
                    pk->dot8x2(n, wq, rb, xs, got);
                    same &= !memcmp(want, got, sizeof want);
                    calls++;
                }
                if (pk->dot4x2) {
                    float got4[8];
                    pk->dot4x2(n, wq, rb, xs + 4, got4);
                    for (int i = 0; i < 8; i++)
                        same &= !memcmp(&want[(i / 4) * 8 + 4 + i % 4], &got4[i], sizeof(float));
                    calls++;
                }
            }
        }
        ok(sizes, "%s: prompt rows are whole cache lines, never shorter than plain ones",
           cw_qtype_name(t));
        ok(same, "%s: prompt kernels (%d calls) == scalar on the plain rows",
           cw_qtype_name(t), calls);
        free(wq), free(x), free(w), free(plain), free(il);
    }
}

/* n_tok 13: passes of eight, four and one; 15, 14: seven and six rows in a
 * pass of eight (AVX2: 15 ends in three rows in a pass of four); 11: three
 * in a pass of four. */
static void test_matmul(enum cw_qtype t, struct cw_pool pools[3], int64_t n_tok)
{
    const char *name = cw_qtype_name(t);
    int64_t n_in = size_for(t, 1), n_out = 37;
    size_t rb = cw_qtype_row_bytes(t, n_in);
    float *w = malloc(n_in * n_out * sizeof(float)), *x = malloc(n_in * n_tok * sizeof(float));
    char *wq = malloc(rb * n_out);
    fill(w, n_in * n_out);
    fill(x, n_in * n_tok);
    quant_weights(t, w, wq, n_out, n_in);
    void *scratch = malloc(cw_cpu_matmul_scratch(t, n_in, n_tok));
    float *y[3], *y1 = malloc(n_out * n_tok * sizeof(float));
    for (int p = 0; p < 3; p++) {
        y[p] = malloc(n_out * n_tok * sizeof(float));
        cw_cpu_matmul(&pools[p], t, wq, n_in, n_out, x, n_tok, y[p], scratch);
    }
    for (int64_t tk = 0; tk < n_tok; tk++)
        cw_cpu_matmul(&pools[1], t, wq, n_in, n_out, x + tk * n_in, 1, y1 + tk * n_out, scratch);
    size_t bytes = n_out * n_tok * sizeof(float);
    ok(!memcmp(y[0], y[1], bytes) && !memcmp(y[0], y[2], bytes),
       "%s: matmul of %d tokens bit-identical over 1/2/3 threads", name, (int)n_tok);
    ok(!memcmp(y[0], y1, bytes), "%s: matmul of %d tokens == token by token", name, (int)n_tok);
    /* and each element is the vec_dot of its row */
    void *xq = malloc(cw_cpu_act_bytes(t, n_in));
    int same = 1;
    for (int64_t tk = 0; tk < n_tok; tk++) {
        cw_cpu_quantize_act(t, x + tk * n_in, xq, n_in);
        for (int64_t o = 0; o < n_out; o++) {
            float d = cw_cpu_vec_dot(t, n_in, wq + o * rb, xq);
            same &= !memcmp(&d, &y[0][tk * n_out + o], sizeof(float));
        }
    }
    ok(same, "%s: matmul of %d tokens: elements == vec_dot", name, (int)n_tok);
    for (int p = 0; p < 3; p++)
        free(y[p]);
    free(w), free(x), free(wq), free(scratch), free(y1), free(xq);
}

static void test_matmul_id(enum cw_qtype t, struct cw_pool *pool, int which)
{
    const char *name = cw_qtype_name(t);
    int64_t n_in = size_for(t, which), n_out = 19, n_exp = 5, n_used = 3, n_tok = 8;
    size_t rb = cw_qtype_row_bytes(t, n_in), stride = rb * n_out;
    float *w = malloc(n_in * n_out * n_exp * sizeof(float));
    char *wq = malloc(stride * n_exp);
    fill(w, n_in * n_out * n_exp);
    quant_weights(t, w, wq, n_out * n_exp, n_in);
    /* expert 2 takes 13 pairs (a pass of eight, then five: four and one, or
     * eight padded), expert 0 four, 1, 3 and 4 two */
    int32_t ids[24] = {2, 0, 4, 4, 1, 2, 0, 2, -1, 3, 2, 1, 2, 2, 0, 2, 2, 3,
                       2, 2, 0, 2, 2, 2};
    float *x = malloc(n_in * n_tok * n_used * sizeof(float));
    fill(x, n_in * n_tok * n_used);
    float *y = malloc(n_out * n_tok * n_used * sizeof(float));
    void *scratch = malloc(cw_cpu_matmul_id_scratch(t, n_in, n_tok * n_used, n_tok * n_used));
    void *xq = malloc(cw_cpu_act_bytes(t, n_in));
    for (int per_slot = 0; per_slot < 2; per_slot++) {
        for (int64_t i = 0; i < n_out * n_tok * n_used; i++)
            y[i] = -12345.0f;
        cw_cpu_matmul_id(pool, t, wq, stride, n_in, n_out, x, per_slot, ids, n_used, n_tok, y,
                         scratch);
        int same = 1;
        for (int64_t p = 0; p < n_tok * n_used; p++) {
            const float *xr = x + (per_slot ? p : p / n_used) * n_in;
            cw_cpu_quantize_act(t, xr, xq, n_in);
            for (int64_t o = 0; o < n_out; o++) {
                float want = ids[p] < 0 ? -12345.0f
                                        : cw_cpu_vec_dot(t, n_in, wq + ids[p] * stride + o * rb, xq);
                same &= !memcmp(&want, &y[p * n_out + o], sizeof(float));
            }
        }
        ok(same, "%s: matmul_id (x per %s, %d wide) == direct vec_dot, skipped slot untouched",
           name, per_slot ? "slot" : "token", (int)n_in);
    }
    free(w), free(wq), free(x), free(y), free(scratch), free(xq);
}

/* Several products of one input in one call (dense and routed, of five
 * activation types) give each product's bits from its own call; so do two
 * routed products of per-slot rows. */
static void test_matmuls(struct cw_pool pools[3])
{
    enum { N_OPS = 7 };
    const enum cw_qtype ts[N_OPS] = {CW_TYPE_Q4_K, CW_TYPE_Q6_K,  CW_TYPE_Q8_0, CW_TYPE_F32,
                                     CW_TYPE_Q5_K, CW_TYPE_Q4_1, CW_TYPE_F16};
    const int routed[N_OPS] = {1, 1, 0, 0, 0, 0, 1};
    const int64_t n_in = 512, n_exp = 5, n_used = 3, n_tok = 8, n_x = n_tok * n_used;
    const int64_t n_out[N_OPS] = {19, 9, 21, 1, 17, 5, 3};
    int32_t ids[24] = {2, 0, 4, 4, 1, 2, 0, 2, -1, 3, 2, 1, 2, 2, 0, 2, 2, 3,
                       2, 2, 0, 2, 2, 2};
    struct cw_cpu_mm ops[N_OPS];
    float *want[N_OPS];
    float *x = malloc(n_in * n_x * sizeof(float));
    fill(x, n_in * n_x);
    for (int i = 0; i < N_OPS; i++) {
        const int64_t rows = n_out[i] * (routed[i] ? n_exp : 1);
        float *w = malloc(n_in * rows * sizeof(float));
        char *wq = malloc(cw_qtype_row_bytes(ts[i], n_in) * rows);
        fill(w, n_in * rows);
        quant_weights(ts[i], w, wq, rows, n_in);
        free(w);
        const size_t stride = routed[i] ? cw_qtype_row_bytes(ts[i], n_in) * n_out[i] : 0;
        ops[i] = (struct cw_cpu_mm){ts[i], wq, n_out[i], NULL, stride};
        want[i] = malloc(n_out[i] * n_x * sizeof(float));
    }
    const struct cw_cpu_route tok = {ids, n_used, 0}, slot = {ids, n_used, 1};
    for (int per_slot = 0; per_slot < 2; per_slot++) {
        /* per slot: the routed products alone (a dense one is refused) */
        struct cw_cpu_mm sel[N_OPS];
        int n = 0;
        for (int i = 0; i < N_OPS; i++)
            if (routed[i] || !per_slot)
                sel[n++] = ops[i];
        const struct cw_cpu_route *r = per_slot ? &slot : &tok;
        size_t sz = cw_cpu_matmuls_scratch(sel, n, n_in, n_tok, r), one = 0;
        void *scratch = malloc(sz);
        for (int i = 0; i < n; i++) {
            size_t b = sel[i].expert_stride
                           ? cw_cpu_matmul_id_scratch(sel[i].wtype, n_in, per_slot ? n_x : n_tok,
                                                      n_x)
                           : cw_cpu_matmul_scratch(sel[i].wtype, n_in, n_tok);
            one = b > one ? b : one;
        }
        void *scr1 = malloc(one);
        for (int i = 0; i < n; i++) {
            float *y = malloc(sel[i].n_out * n_x * sizeof(float));
            for (int64_t k = 0; k < sel[i].n_out * n_x; k++)
                y[k] = -12345.0f;
            if (sel[i].expert_stride)
                cw_cpu_matmul_id(&pools[0], sel[i].wtype, sel[i].w, sel[i].expert_stride, n_in,
                                 sel[i].n_out, x, per_slot, ids, n_used, n_tok, y, scr1);
            else
                cw_cpu_matmul(&pools[0], sel[i].wtype, sel[i].w, n_in, sel[i].n_out, x, n_tok,
                              y, scr1);
            want[i] = realloc(want[i], sel[i].n_out * n_x * sizeof(float));
            memcpy(want[i], y, sel[i].n_out * n_x * sizeof(float));
            free(y);
        }
        for (int p = 0; p < 3; p += 2) {
            for (int i = 0; i < n; i++) {
                sel[i].y = malloc(sel[i].n_out * n_x * sizeof(float));
                for (int64_t k = 0; k < sel[i].n_out * n_x; k++)
                    sel[i].y[k] = -12345.0f;
            }
            int same = cw_cpu_matmuls(&pools[p], sel, n, n_in, x, n_tok, r, scratch) == 0;
            for (int i = 0; i < n; i++) {
                const int64_t rows = sel[i].expert_stride ? n_x : n_tok;
                same &= !memcmp(sel[i].y, want[i], sel[i].n_out * rows * sizeof(float));
                free(sel[i].y);
                sel[i].y = NULL;
            }
            ok(same && sz > 0, "matmuls: %d products of x per %s, %d threads == each alone", n,
               per_slot ? "slot" : "token", p + 1);
        }
        free(scratch), free(scr1);
    }
    ok(cw_cpu_matmuls_scratch(ops, N_OPS, n_in, n_tok, &slot) == 0 &&
           cw_cpu_matmuls(&pools[0], ops, N_OPS, n_in, x, n_tok, &slot, NULL) == -1,
       "matmuls: a dense product with per-slot rows refused");
    ok(cw_cpu_matmuls_scratch(ops, N_OPS, n_in, n_tok, NULL) == 0,
       "matmuls: routed products without a route refused");
    struct cw_cpu_mm many[CW_CPU_MM_MAX + 1];
    for (int i = 0; i <= CW_CPU_MM_MAX; i++)
        many[i] = ops[2];
    ok(cw_cpu_matmuls_scratch(many, CW_CPU_MM_MAX, n_in, n_tok, NULL) > 0 &&
           cw_cpu_matmuls_scratch(many, CW_CPU_MM_MAX + 1, n_in, n_tok, NULL) == 0,
       "matmuls: at most %d products a call", CW_CPU_MM_MAX);
    for (int i = 0; i < N_OPS; i++)
        free((void *)ops[i].w), free(want[i]);
    free(x);
}

/* ---- pool --------------------------------------------------------------- */

struct pool_ctx {
    _Atomic int64_t sum;
    _Atomic int calls[8];
};

static void pool_fn(void *p, int ith, int nth)
{
    struct pool_ctx *c = p;
    atomic_fetch_add(&c->calls[ith], 1);
    atomic_fetch_add(&c->sum, (int64_t)(ith + 1) * 1000 + nth);
}

static void test_pool(void)
{
    for (int nt = 1; nt <= 4; nt++) {
        struct cw_pool pool;
        struct cw_err err = {0};
        ok(cw_pool_init(&pool, nt, &err) == 0, "pool init %d: %s", nt, err.msg);
        struct pool_ctx c = {0};
        int iters = nt <= 2 ? 20000 : 2000;
        for (int i = 0; i < iters; i++)
            cw_pool_run(&pool, pool_fn, &c);
        /* a few regions after the workers have gone to sleep (futex path) */
        for (int i = 0; i < 3; i++) {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
            cw_pool_run(&pool, pool_fn, &c);
        }
        iters += 3;
        int calls_ok = 1;
        int64_t want = 0;
        for (int i = 0; i < nt; i++) {
            calls_ok &= atomic_load(&c.calls[i]) == iters;
            want += (int64_t)iters * ((i + 1) * 1000 + nt);
        }
        ok(calls_ok && atomic_load(&c.sum) == want,
           "pool %d threads: every ith ran exactly once per region", nt);
        cw_pool_free(&pool);
        cw_pool_free(&pool); /* twice is harmless */
    }
    struct cw_pool bad;
    struct cw_err err = {0};
    ok(cw_pool_init(&bad, 0, &err) == -1 && err.code == CW_ERR_INVALID, "pool: 0 threads refused");
}

int main(void)
{
    note("ISA: %s", cw_cpu_isa_name(cw_cpu_isa_best()));
    test_pool();
    struct cw_pool pools[3];
    for (int p = 0; p < 3; p++) {
        struct cw_err err = {0};
        ok(cw_pool_init(&pools[p], p + 1, &err) == 0, "pool %d: %s", p + 1, err.msg);
    }
    test_random_blocks();
    test_prompt_kernels();
    for (int i = 0; i < N_TYPES; i++) {
        ok(cw_cpu_supports(types[i]), "%s supported", cw_qtype_name(types[i]));
        test_vec_dot(types[i]);
        for (int k = 0; k < 4; k++)
            test_matmul(types[i], pools, (const int64_t[]){13, 15, 14, 11}[k]);
        for (int which = 0; which < 2; which++)
            test_matmul_id(types[i], &pools[1], which); /* short rows; the prompt kernels' */
    }
    test_matmuls(pools);
    ok(!cw_cpu_supports(CW_TYPE_IQ2_XXS) && cw_cpu_act_bytes(CW_TYPE_IQ2_XXS, 256) == 0 &&
           cw_cpu_vec_dot_fn(CW_TYPE_IQ2_XXS, CW_CPU_SCALAR) == NULL,
       "unsupported type reported as such");
    ok(cw_cpu_act_bytes(CW_TYPE_Q4_K, 100) == 0, "act_bytes rejects a partial block");
    ok(cw_cpu_vec_dot_type(CW_TYPE_Q4_K) == CW_TYPE_Q8_K && cw_cpu_vec_dot_type(CW_TYPE_Q4_1) == CW_TYPE_Q8_1 &&
           cw_cpu_vec_dot_type(CW_TYPE_MXFP4) == CW_TYPE_Q8_0 &&
           cw_cpu_vec_dot_type(CW_TYPE_BF16) == CW_TYPE_BF16,
       "type pairing");
    for (int p = 0; p < 3; p++)
        cw_pool_free(&pools[p]);
    return done();
}

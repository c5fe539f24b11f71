/* cpu_gemv.c — the CPU matmul: type pairing, activation quantisation, and
 * the threaded loops over output rows (dense and MoE).
 *
 * Owns the one dispatch table of the CPU backend (weight type -> activation
 * type and vec_dot kernels, scalar and AVX2) and the run-time choice between
 * them. The kernels themselves are in cpu_dot_ref.c / cpu_dot_avx2.c. */
#include "cpu/cpu_gemv.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#define X86(f) f
#else
#define X86(f) NULL
#endif

struct type_ops {
    enum cw_qtype act;       /* the activation (vec_dot) type */
    cw_vec_dot_fn ref;       /* NULL: the CPU backend does not multiply this type */
    cw_vec_dot_fn avx2;      /* NULL: the scalar kernel serves AVX2 too */
    cw_vec_dotn_fn avx2_4;   /* four rows at once; NULL: none */
    cw_vec_dot_fn avx512;    /* NULL: the AVX2 kernels serve AVX-512 too */
    cw_vec_dotn_fn avx512_4, avx512_8;
};

static const struct type_ops type_ops[CW_TYPE_COUNT] = {
    [CW_TYPE_F32] = {.act = CW_TYPE_F32, .ref = cw_dot_f32_ref, .avx2 = X86(cw_dot_f32_avx2)},
    [CW_TYPE_F16] = {.act = CW_TYPE_F16, .ref = cw_dot_f16_ref, .avx2 = X86(cw_dot_f16_avx2)},
    [CW_TYPE_BF16] = {.act = CW_TYPE_BF16, .ref = cw_dot_bf16_ref, .avx2 = X86(cw_dot_bf16_avx2)},
    [CW_TYPE_Q8_0] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_q8_0_ref, .avx2 = X86(cw_dot_q8_0_avx2)},
    [CW_TYPE_Q4_0] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_q4_0_ref, .avx2 = X86(cw_dot_q4_0_avx2)},
    [CW_TYPE_Q5_0] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_q5_0_ref},
    [CW_TYPE_IQ4_NL] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_iq4_nl_ref,
                        .avx2 = X86(cw_dot_iq4_nl_avx2)},
    [CW_TYPE_MXFP4] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_mxfp4_ref,
                       .avx2 = X86(cw_dot_mxfp4_avx2)},
    [CW_TYPE_NVFP4] = {.act = CW_TYPE_Q8_0, .ref = cw_dot_nvfp4_ref},
    [CW_TYPE_Q4_1] = {.act = CW_TYPE_Q8_1, .ref = cw_dot_q4_1_ref},
    [CW_TYPE_Q5_1] = {.act = CW_TYPE_Q8_1, .ref = cw_dot_q5_1_ref},
    [CW_TYPE_Q2_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q2_k_ref},
    [CW_TYPE_Q3_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q3_k_ref},
    [CW_TYPE_Q4_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q4_k_ref,
                      .avx2 = X86(cw_dot_q4_k_avx2), .avx2_4 = X86(cw_dot4_q4_k_avx2),
                      .avx512 = X86(cw_dot_q4_k_avx512), .avx512_4 = X86(cw_dot4_q4_k_avx512),
                      .avx512_8 = X86(cw_dot8_q4_k_avx512)},
    [CW_TYPE_Q5_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q5_k_ref,
                      .avx2 = X86(cw_dot_q5_k_avx2), .avx2_4 = X86(cw_dot4_q5_k_avx2)},
    [CW_TYPE_Q6_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q6_k_ref,
                      .avx2 = X86(cw_dot_q6_k_avx2), .avx2_4 = X86(cw_dot4_q6_k_avx2),
                      .avx512 = X86(cw_dot_q6_k_avx512), .avx512_4 = X86(cw_dot4_q6_k_avx512),
                      .avx512_8 = X86(cw_dot8_q6_k_avx512)},
    [CW_TYPE_IQ4_XS] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_iq4_xs_ref,
                        .avx2 = X86(cw_dot_iq4_xs_avx2), .avx2_4 = X86(cw_dot4_iq4_xs_avx2)},
};

static const struct type_ops *ops_of(enum cw_qtype t)
{
    if ((unsigned)t >= CW_TYPE_COUNT || !type_ops[t].ref)
        return NULL;
    return &type_ops[t];
}

enum cw_cpu_isa cw_cpu_isa_best(void)
{
#if defined(__x86_64__) || defined(__i386__)
    /* F16C is not asked for: every x86 CPU with AVX2 has it (and clang's
     * builtin does not know the name); cpuid itself would trap in a VM. */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            return CW_CPU_AVX512;
        return CW_CPU_AVX2;
    }
#endif
    return CW_CPU_SCALAR;
}

const char *cw_cpu_isa_name(enum cw_cpu_isa isa)
{
    return isa >= CW_CPU_AVX512 ? "AVX-512" : isa == CW_CPU_AVX2 ? "AVX2" : "scalar";
}

int cw_cpu_supports(enum cw_qtype wtype)
{
    return ops_of(wtype) != NULL;
}

int cw_cpu_vec_dot_type(enum cw_qtype wtype)
{
    const struct type_ops *o = ops_of(wtype);
    return o ? (int)o->act : -1;
}

size_t cw_cpu_act_bytes(enum cw_qtype wtype, int64_t n)
{
    const struct type_ops *o = ops_of(wtype);
    const struct cw_qtype_traits *wt = cw_qtype_traits(wtype);
    if (!o || !wt || n <= 0 || n % wt->block_elems)
        return 0;
    return cw_qtype_row_bytes(o->act, n);
}

void cw_cpu_quantize_act(enum cw_qtype wtype, const float *x, void *xq, int64_t n)
{
    const struct type_ops *o = ops_of(wtype);
    if (!o)
        return;
    switch (o->act) {
    case CW_TYPE_F32:
        memcpy(xq, x, (size_t)n * sizeof(float));
        break;
    case CW_TYPE_Q8_1:
        cw_cpu_quant_row_q8_1(x, xq, n);
        break;
    default: /* Q8_K, Q8_0, F16, BF16: the bit-exact quantisers of gguf/ */
        cw_qtype_traits(o->act)->quant_row(x, xq, n);
        break;
    }
}

cw_vec_dot_fn cw_cpu_vec_dot_fn(enum cw_qtype wtype, enum cw_cpu_isa isa)
{
    const struct type_ops *o = ops_of(wtype);
    if (!o)
        return NULL;
    if (isa >= CW_CPU_AVX512 && o->avx512)
        return o->avx512;
    if (isa >= CW_CPU_AVX2 && o->avx2)
        return o->avx2;
    return o->ref;
}

cw_vec_dotn_fn cw_cpu_vec_dotn_fn(enum cw_qtype wtype, enum cw_cpu_isa isa, int rows)
{
    const struct type_ops *o = ops_of(wtype);
    if (!o || isa < CW_CPU_AVX2)
        return NULL;
    if (rows == 8)
        return isa >= CW_CPU_AVX512 ? o->avx512_8 : NULL;
    if (rows != 4)
        return NULL;
    if (isa >= CW_CPU_AVX512 && o->avx512_4)
        return o->avx512_4;
    return o->avx2_4;
}

float cw_cpu_vec_dot(enum cw_qtype wtype, int64_t n, const void *w_row, const void *xq)
{
    return cw_cpu_vec_dot_fn(wtype, cw_cpu_isa_best())(n, w_row, xq);
}

/* ---- dense matmul -------------------------------------------------------- */

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

struct mm_ctx {
    enum cw_qtype wtype;
    cw_vec_dot_fn dot;
    cw_vec_dotn_fn dot4, dot8; /* four, eight rows a pass; NULL: none */
    const char *w;
    size_t row_bytes, act_bytes, expert_stride;
    int64_t n_in, n_out, n_tok, n_used, n_pairs;
    const float *x;
    char *xq;
    float *y;
    int x_per_slot;
    const int64_t *order; /* matmul_id: (expert << 32 | pair), sorted */
};

static void split(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1)
{
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

static void quant_task(void *p, int ith, int nth)
{
    struct mm_ctx *c = p;
    for (int64_t t = ith; t < c->n_tok; t += nth)
        cw_cpu_quantize_act(c->wtype, c->x + t * c->n_in, c->xq + t * c->act_bytes, c->n_in);
}

/* The best level's one-, four- and eight-row kernels of c's type. */
static void pick_kernels(struct mm_ctx *c)
{
    const enum cw_cpu_isa isa = cw_cpu_isa_best();
    c->dot = cw_cpu_vec_dot_fn(c->wtype, isa);
    c->dot4 = cw_cpu_vec_dotn_fn(c->wtype, isa, 4);
    c->dot8 = cw_cpu_vec_dotn_fn(c->wtype, isa, 8);
}

/* w_row against the n activation rows xs[i] into *ys[i]: eight rows a pass,
 * then four, where the type has such kernels, then one at a time; every
 * result the bits of one vec_dot. */
static void dots(const struct mm_ctx *c, const char *w_row, const void *const *xs,
                 float *const *ys, int64_t n)
{
    int64_t i = 0;
    float r[8];
    for (; c->dot8 && i + 8 <= n; i += 8) {
        c->dot8(c->n_in, w_row, xs + i, r);
        for (int k = 0; k < 8; k++)
            *ys[i + k] = r[k];
    }
    for (; c->dot4 && i + 4 <= n; i += 4) {
        c->dot4(c->n_in, w_row, xs + i, r);
        for (int k = 0; k < 4; k++)
            *ys[i + k] = r[k];
    }
    for (; i < n; i++)
        *ys[i] = c->dot(c->n_in, w_row, xs[i]);
}

/* Rows in tiles of DENSE_ROWS: a tile's weights (18 KB of 2048-wide Q4_K)
 * stay in L1 while the tokens' activations pass, DENSE_TOKENS at a time, so
 * the activations are streamed n_out/DENSE_ROWS times instead of n_out
 * times. Each output still has the bits of one dot product of one row and
 * one token: they do not depend on the tiling or on the batch. */
#define DENSE_ROWS 16
#define DENSE_TOKENS 64 /* tokens a pass of a tile (the pointer lists' size) */

static void dense_task(void *p, int ith, int nth)
{
    struct mm_ctx *c = p;
    int64_t r0, r1;
    split(c->n_out, ith, nth, &r0, &r1);
    const void *xs[DENSE_TOKENS];
    float *ys[DENSE_TOKENS];
    for (int64_t o0 = r0; o0 < r1; o0 += DENSE_ROWS) {
        const int64_t o1 = o0 + DENSE_ROWS < r1 ? o0 + DENSE_ROWS : r1;
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += DENSE_TOKENS) {
            const int64_t nt = c->n_tok - t0 < DENSE_TOKENS ? c->n_tok - t0 : DENSE_TOKENS;
            for (int64_t i = 0; i < nt; i++)
                xs[i] = c->xq + (t0 + i) * c->act_bytes;
            for (int64_t o = o0; o < o1; o++) {
                for (int64_t i = 0; i < nt; i++)
                    ys[i] = c->y + (t0 + i) * c->n_out + o;
                dots(c, c->w + o * c->row_bytes, xs, ys, nt);
            }
        }
    }
}

size_t cw_cpu_matmul_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_tok)
{
    return ALIGN64(cw_cpu_act_bytes(wtype, n_in) * (size_t)n_tok);
}

/* Activation rows: quantised by the caller alone for a single row (one
 * handshake saved), else spread over the threads. */
static void quantize_rows(struct cw_pool *pool, struct mm_ctx *c, int64_t n_rows)
{
    int64_t saved = c->n_tok;
    c->n_tok = n_rows;
    if (n_rows == 1 || cw_pool_size(pool) == 1)
        quant_task(c, 0, 1);
    else
        cw_pool_run(pool, quant_task, c);
    c->n_tok = saved;
}

void cw_cpu_matmul(struct cw_pool *pool, enum cw_qtype wtype, const void *w, int64_t n_in,
                   int64_t n_out, const float *x, int64_t n_tok, float *y, void *scratch)
{
    struct mm_ctx c = {
        .wtype = wtype,
        .w = w,
        .row_bytes = cw_qtype_row_bytes(wtype, n_in),
        .act_bytes = cw_cpu_act_bytes(wtype, n_in),
        .n_in = n_in,
        .n_out = n_out,
        .n_tok = n_tok,
        .x = x,
        .xq = scratch,
        .y = y,
    };
    pick_kernels(&c);
    if (!c.dot || n_tok <= 0 || n_out <= 0)
        return;
    quantize_rows(pool, &c, n_tok);
    cw_pool_run(pool, dense_task, &c);
}

/* ---- MoE matmul ---------------------------------------------------------- */

size_t cw_cpu_matmul_id_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_x_rows,
                                int64_t n_pairs)
{
    return ALIGN64(cw_cpu_act_bytes(wtype, n_in) * (size_t)n_x_rows) +
           (size_t)n_pairs * sizeof(int64_t);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define ID_PAIRS 64 /* an expert's pairs a pass (the pointer lists' size) */

/* The activation row of an (expert << 32 | pair) entry of the order. */
static int64_t id_x_row(const struct mm_ctx *c, int64_t entry)
{
    const int64_t pair = entry & 0xffffffff;
    return c->x_per_slot ? pair : pair / c->n_used;
}

/* Each thread takes its share of the rows of every expert in turn, and for
 * each such row runs through the pairs routed to that expert (dots: several
 * at a time where the type has multi-row kernels), ID_PAIRS a pass. */
static void id_task(void *p, int ith, int nth)
{
    struct mm_ctx *c = p;
    int64_t r0, r1;
    split(c->n_out, ith, nth, &r0, &r1);
    for (int64_t g0 = 0; g0 < c->n_pairs;) {
        int64_t e = c->order[g0] >> 32, g1 = g0;
        while (g1 < c->n_pairs && c->order[g1] >> 32 == e)
            g1++;
        const char *we = c->w + (size_t)e * c->expert_stride;
        for (int64_t gb = g0; gb < g1; gb += ID_PAIRS) {
            const int64_t np = g1 - gb < ID_PAIRS ? g1 - gb : ID_PAIRS;
            const void *xs[ID_PAIRS];
            float *ys[ID_PAIRS];
            for (int64_t i = 0; i < np; i++)
                xs[i] = c->xq + id_x_row(c, c->order[gb + i]) * c->act_bytes;
            for (int64_t o = r0; o < r1; o++) {
                for (int64_t i = 0; i < np; i++)
                    ys[i] = c->y + (c->order[gb + i] & 0xffffffff) * c->n_out + o;
                dots(c, we + o * c->row_bytes, xs, ys, np);
            }
        }
        g0 = g1;
    }
}

void cw_cpu_matmul_id(struct cw_pool *pool, enum cw_qtype wtype, const void *w,
                      size_t expert_stride, int64_t n_in, int64_t n_out, const float *x,
                      int x_per_slot, const int32_t *ids, int64_t n_used, int64_t n_tok,
                      float *y, void *scratch)
{
    int64_t n_x_rows = x_per_slot ? n_tok * n_used : n_tok;
    struct mm_ctx c = {
        .wtype = wtype,
        .w = w,
        .row_bytes = cw_qtype_row_bytes(wtype, n_in),
        .act_bytes = cw_cpu_act_bytes(wtype, n_in),
        .expert_stride = expert_stride,
        .n_in = n_in,
        .n_out = n_out,
        .n_tok = n_tok,
        .n_used = n_used,
        .x = x,
        .xq = scratch,
        .y = y,
        .x_per_slot = x_per_slot,
    };
    pick_kernels(&c);
    if (!c.dot || n_tok <= 0 || n_out <= 0 || n_used <= 0)
        return;
    int64_t *order = (int64_t *)(c.xq + ALIGN64(c.act_bytes * (size_t)n_x_rows));
    int64_t n_pairs = 0;
    for (int64_t i = 0; i < n_tok * n_used; i++)
        if (ids[i] >= 0)
            order[n_pairs++] = (int64_t)ids[i] << 32 | i;
    qsort(order, (size_t)n_pairs, sizeof(*order), cmp_i64);
    c.order = order;
    c.n_pairs = n_pairs;
    quantize_rows(pool, &c, n_x_rows);
    cw_pool_run(pool, id_task, &c);
}

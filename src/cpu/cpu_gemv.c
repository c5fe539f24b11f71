/* cpu_gemv.c — the CPU matmul: type pairing, activation quantisation, and
 * the threaded loops over output rows (dense and MoE).
 *
 * Owns the one dispatch table of the CPU backend (weight type -> activation
 * type and vec_dot kernels, scalar and AVX2) and the run-time choice between
 * them. The kernels themselves are in the cpu_dot_*.c files. */
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
    const struct cw_cpu_prompt *avx512_prompt; /* NULL: none */
};

#if defined(__x86_64__) || defined(__i386__)
#define PROMPT_AVX512(name)                                                               \
    static const struct cw_cpu_prompt name##_prompt_avx512 = {                           \
        cw_##name##_il_act_bytes,   cw_##name##_il_quantize,    cw_dot_##name##_il_avx512, \
        cw_dot4_##name##_il_avx512, cw_dot8_##name##_il_avx512, cw_dot4x2_##name##_il_avx512, \
        cw_dot8x2_##name##_il_avx512};
PROMPT_AVX512(q4_k)
PROMPT_AVX512(q6_k)
#undef PROMPT_AVX512
#endif

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
                      .avx512_8 = X86(cw_dot8_q4_k_avx512),
                      .avx512_prompt = X86(&q4_k_prompt_avx512)},
    [CW_TYPE_Q5_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q5_k_ref,
                      .avx2 = X86(cw_dot_q5_k_avx2), .avx2_4 = X86(cw_dot4_q5_k_avx2)},
    [CW_TYPE_Q6_K] = {.act = CW_TYPE_Q8_K, .ref = cw_dot_q6_k_ref,
                      .avx2 = X86(cw_dot_q6_k_avx2), .avx2_4 = X86(cw_dot4_q6_k_avx2),
                      .avx512 = X86(cw_dot_q6_k_avx512), .avx512_4 = X86(cw_dot4_q6_k_avx512),
                      .avx512_8 = X86(cw_dot8_q6_k_avx512),
                      .avx512_prompt = X86(&q6_k_prompt_avx512)},
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

const struct cw_cpu_prompt *cw_cpu_prompt_kernels(enum cw_qtype wtype, enum cw_cpu_isa isa)
{
    const struct type_ops *o = ops_of(wtype);
    return o && isa >= CW_CPU_AVX512 ? o->avx512_prompt : NULL;
}

float cw_cpu_vec_dot(enum cw_qtype wtype, int64_t n, const void *w_row, const void *xq)
{
    return cw_cpu_vec_dot_fn(wtype, cw_cpu_isa_best())(n, w_row, xq);
}

/* ---- the matmuls ---------------------------------------------------------- */

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* one product of a call, with its kernels and its activation rows */
struct mm_op {
    enum cw_qtype wtype;
    const char *w;
    size_t row_bytes, expert_stride;
    int64_t n_out;
    float *y;
    cw_vec_dot_fn dot;
    cw_vec_dotn_fn dot4, dot8; /* four, eight rows a pass; NULL: none */
    cw_vec_dotn2_fn dot4x2, dot8x2; /* two weight rows a pass; NULL: none */
    int act;                   /* its activations: c->act[act]; -1: x itself (F32) */
    const char *xq;            /* x quantised for this type; act_bytes a row */
    size_t act_bytes;
};

/* one activation type (and layout) of a call: x quantised once for all its
 * products */
struct mm_act {
    enum cw_qtype wtype;                /* a weight type that pairs with it */
    const struct cw_cpu_prompt *prompt; /* its layout's; NULL: the plain type */
    size_t act_bytes;
    char *xq;
};

struct mm_ctx {
    int n_ops, n_acts;
    struct mm_op op[CW_CPU_MM_MAX];
    struct mm_act act[CW_CPU_MM_MAX];
    int64_t n_in, n_tok, n_x_rows, n_used, n_pairs;
    const float *x;
    int x_per_slot, quant_act; /* quant_task: the activation type it fills */
    const int64_t *order;      /* routed products: (expert << 32 | pair), sorted */
};

static void split(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1)
{
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

static void quant_task(void *p, int ith, int nth)
{
    struct mm_ctx *c = p;
    const struct mm_act *a = &c->act[c->quant_act];
    for (int64_t t = ith; t < c->n_x_rows; t += nth) {
        const float *x = c->x + t * c->n_in;
        char *xq = a->xq + t * a->act_bytes;
        if (a->prompt)
            a->prompt->quantize(x, xq, c->n_in);
        else
            cw_cpu_quantize_act(a->wtype, x, xq, c->n_in);
    }
}

/* rows rows of a multi-row kernel from xs[0..k), the last repeated to fill
 * the pass; the k real results into *ys[0..k) */
static void dotn(cw_vec_dotn_fn f, int rows, int64_t n_in, const char *w_row,
                 const void *const *xs, float *const *ys, int k)
{
    const void *xp[8];
    float r[8];
    for (int j = 0; j < rows; j++)
        xp[j] = xs[j < k ? j : k - 1];
    f(n_in, w_row, xp, r);
    for (int j = 0; j < k; j++)
        *ys[j] = r[j];
}

/* w_row against the n activation rows xs[i] into *ys[i]: eight rows a pass,
 * then four, where the type has such kernels, then one at a time; every
 * result the bits of one vec_dot. A pass costs about two rows alone
 * (2048-wide q4_K, per row: 27 ns in a pass of eight, 30 of four, 52
 * alone), so three rows left take a pass of four, six or seven one of
 * eight, a repeated row filling it. */
static void dots(const struct mm_op *op, int64_t n_in, const char *w_row, const void *const *xs,
                 float *const *ys, int64_t n)
{
    int64_t i = 0;
    for (; op->dot8 && i + 8 <= n; i += 8)
        dotn(op->dot8, 8, n_in, w_row, xs + i, ys + i, 8);
    if (op->dot8 && n - i >= 6) {
        dotn(op->dot8, 8, n_in, w_row, xs + i, ys + i, (int)(n - i));
        return;
    }
    for (; op->dot4 && i + 4 <= n; i += 4)
        dotn(op->dot4, 4, n_in, w_row, xs + i, ys + i, 4);
    if (op->dot4 && n - i == 3) {
        dotn(op->dot4, 4, n_in, w_row, xs + i, ys + i, 3);
        return;
    }
    for (; i < n; i++)
        *ys[i] = op->dot(n_in, w_row, xs[i]);
}

/* Rows w_row and the next against the n (<= 8) activation rows xs[i],
 * into ys[i][0] and ys[i][1], where the product has kernels for two rows:
 * a pass of eight from five rows, of four from two (the last row repeated,
 * as in dots); 0 (nothing done) for one row or no such kernels. */
static int dots2(const struct mm_op *op, int64_t n_in, const char *w_row, const void *const *xs,
                 float *const *ys, int64_t n)
{
    const int rows = n >= 5 ? 8 : 4;
    const cw_vec_dotn2_fn f = n >= 5 ? op->dot8x2 : n >= 2 ? op->dot4x2 : NULL;
    if (!f)
        return 0;
    const void *xp[8];
    float r[16];
    for (int j = 0; j < rows; j++)
        xp[j] = xs[j < n ? j : n - 1];
    f(n_in, w_row, op->row_bytes, xp, r);
    for (int i = 0; i < n; i++) {
        ys[i][0] = r[i];
        ys[i][1] = r[rows + i];
    }
    return 1;
}

/* A single token's product streams its weights from memory once: each
 * row (at byte from of base) asks for the row's length of bytes
 * PREFETCH_AHEAD past it (as non-temporal), up to byte end, the hardware
 * prefetchers stopping at each 4 KB page. Dense 27B widths, 4 layers, tg32
 * on 2 threads: 14.3-14.7 -> 18.8-22.1 tok/s (2 KB: 18.8-21.0, 8 KB:
 * 17.9-21.3; the 35B-A3B's 51 unchanged). */
#define PREFETCH_AHEAD 4096

static inline void prefetch_ahead(const char *base, size_t from, size_t n, size_t end)
{
    size_t a = from + PREFETCH_AHEAD, b = a + n < end ? a + n : end;
    for (; a < b; a += 64)
        __builtin_prefetch(base + a, 0, 0);
}

/* Rows in tiles of DENSE_ROWS (18 KB of 2048-wide Q4_K), each tile against
 * the tokens DENSE_TOKENS at a time, one multi-row pass: the pass's
 * activations (18 KB of 2048-wide Q8_K) stay in L1 over the tile's rows
 * instead of coming from L2 for every row (3% of a pp512 profile; tiles of
 * 8 rows did no better). Each output still has the bits of one dot product
 * of one row and one token: they do not depend on the tiling or the batch. */
#define DENSE_ROWS 16
#define DENSE_TOKENS 8 /* tokens a pass of a tile (the pointer lists' size) */

static void dense_rows(const struct mm_ctx *c, const struct mm_op *op, int ith, int nth)
{
    int64_t r0, r1;
    split(op->n_out, ith, nth, &r0, &r1);
    const void *xs[DENSE_TOKENS];
    float *ys[DENSE_TOKENS];
    for (int64_t o0 = r0; o0 < r1; o0 += DENSE_ROWS) {
        const int64_t o1 = o0 + DENSE_ROWS < r1 ? o0 + DENSE_ROWS : r1;
        for (int64_t t0 = 0; t0 < c->n_tok; t0 += DENSE_TOKENS) {
            const int64_t nt = c->n_tok - t0 < DENSE_TOKENS ? c->n_tok - t0 : DENSE_TOKENS;
            for (int64_t i = 0; i < nt; i++)
                xs[i] = op->xq + (t0 + i) * op->act_bytes;
            for (int64_t o = o0; o < o1; o++) {
                if (nt == 1)
                    prefetch_ahead(op->w, o * op->row_bytes, op->row_bytes,
                                   r1 * op->row_bytes);
                for (int64_t i = 0; i < nt; i++)
                    ys[i] = op->y + (t0 + i) * op->n_out + o;
                if (o + 1 < o1 && dots2(op, c->n_in, op->w + o * op->row_bytes, xs, ys, nt))
                    o++;
                else
                    dots(op, c->n_in, op->w + o * op->row_bytes, xs, ys, nt);
            }
        }
    }
}

/* an expert's pairs a pass, over all of the thread's rows (the pointer
 * lists' size): the pass's activations stay in L1, as in dense_rows */
#define ID_PAIRS 8

/* The activation row of an (expert << 32 | pair) entry of the order. */
static int64_t id_x_row(const struct mm_ctx *c, int64_t entry)
{
    const int64_t pair = entry & 0xffffffff;
    return c->x_per_slot ? pair : pair / c->n_used;
}

/* Each thread takes its share of the rows of every expert in turn, and for
 * each such row runs through the pairs routed to that expert (dots: several
 * at a time where the type has multi-row kernels), ID_PAIRS a pass. */
static void routed_rows(const struct mm_ctx *c, const struct mm_op *op, int64_t g0, int64_t g1,
                        int ith, int nth)
{
    int64_t r0, r1;
    split(op->n_out, ith, nth, &r0, &r1);
    const char *we = op->w + (size_t)(c->order[g0] >> 32) * op->expert_stride;
    const void *xs[ID_PAIRS];
    float *ys[ID_PAIRS];
    for (int64_t gb = g0; gb < g1; gb += ID_PAIRS) {
        const int64_t np = g1 - gb < ID_PAIRS ? g1 - gb : ID_PAIRS;
        for (int64_t i = 0; i < np; i++)
            xs[i] = op->xq + id_x_row(c, c->order[gb + i]) * op->act_bytes;
        for (int64_t o = r0; o < r1; o++) {
            if (np == 1)
                prefetch_ahead(we, o * op->row_bytes, op->row_bytes, r1 * op->row_bytes);
            for (int64_t i = 0; i < np; i++)
                ys[i] = op->y + (c->order[gb + i] & 0xffffffff) * op->n_out + o;
            if (o + 1 < r1 && dots2(op, c->n_in, we + o * op->row_bytes, xs, ys, np))
                o++;
            else
                dots(op, c->n_in, we + o * op->row_bytes, xs, ys, np);
        }
    }
}

/* Every product of the call: the dense ones, then each expert's rows of
 * every routed one (an expert's pairs are routed to all of them alike). */
static void mm_task(void *p, int ith, int nth)
{
    struct mm_ctx *c = p;
    for (int i = 0; i < c->n_ops; i++)
        if (!c->op[i].expert_stride)
            dense_rows(c, &c->op[i], ith, nth);
    for (int64_t g0 = 0; g0 < c->n_pairs;) {
        int64_t g1 = g0;
        while (g1 < c->n_pairs && c->order[g1] >> 32 == c->order[g0] >> 32)
            g1++;
        for (int i = 0; i < c->n_ops; i++)
            if (c->op[i].expert_stride)
                routed_rows(c, &c->op[i], g0, g1, ith, nth);
        g0 = g1;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The call's plan without its buffers: each product's kernels and
 * activation type, the distinct activation types, and the scratch they and
 * the order take. 0 where an argument is out of range. */
static size_t plan(struct mm_ctx *c, const struct cw_cpu_mm *ops, int n_ops, int64_t n_in,
                   int64_t n_tok, const struct cw_cpu_route *route)
{
    memset(c, 0, sizeof *c);
    if (n_ops < 1 || n_ops > CW_CPU_MM_MAX || n_in <= 0 || n_tok <= 0)
        return 0;
    c->n_ops = n_ops;
    c->n_in = n_in;
    c->n_tok = n_tok;
    c->n_used = route ? route->n_used : 0;
    c->x_per_slot = route ? route->x_per_slot : 0;
    c->n_x_rows = c->x_per_slot ? n_tok * c->n_used : n_tok;
    const enum cw_cpu_isa isa = cw_cpu_isa_best();
    size_t bytes = 0;
    for (int i = 0; i < n_ops; i++) {
        struct mm_op *o = &c->op[i];
        if (ops[i].expert_stride && (!route || route->n_used <= 0))
            return 0;
        if (!ops[i].expert_stride && c->x_per_slot)
            return 0; /* a dense product reads one row per token */
        o->wtype = ops[i].wtype;
        o->w = ops[i].w;
        o->n_out = ops[i].n_out;
        o->y = ops[i].y;
        o->expert_stride = ops[i].expert_stride;
        o->row_bytes = cw_qtype_row_bytes(o->wtype, n_in);
        o->act_bytes = cw_cpu_act_bytes(o->wtype, n_in);
        o->dot = cw_cpu_vec_dot_fn(o->wtype, isa);
        o->dot4 = cw_cpu_vec_dotn_fn(o->wtype, isa, 4);
        o->dot8 = cw_cpu_vec_dotn_fn(o->wtype, isa, 8);
        if (!o->dot || !o->act_bytes || o->n_out <= 0)
            return 0;
        /* F32 weights read x itself; every other type its activation type's
         * rows, in its prompt kernels' layout where a prompt has them */
        o->act = -1;
        if (cw_cpu_vec_dot_type(o->wtype) == CW_TYPE_F32)
            continue;
        const struct cw_cpu_prompt *pk = n_tok > 1 ? cw_cpu_prompt_kernels(o->wtype, isa) : NULL;
        if (pk) {
            o->act_bytes = pk->act_bytes(n_in);
            o->dot = pk->dot;
            o->dot4 = pk->dot4;
            o->dot8 = pk->dot8;
            o->dot4x2 = pk->dot4x2;
            o->dot8x2 = pk->dot8x2;
        }
        int a = 0;
        while (a < c->n_acts && (c->act[a].prompt != pk ||
                                 cw_cpu_vec_dot_type(c->act[a].wtype) !=
                                     cw_cpu_vec_dot_type(o->wtype)))
            a++;
        if (a == c->n_acts) {
            c->act[a].wtype = o->wtype;
            c->act[a].prompt = pk;
            c->act[a].act_bytes = o->act_bytes;
            c->n_acts++;
            bytes += ALIGN64(o->act_bytes * (size_t)c->n_x_rows);
        }
        o->act = a;
    }
    if (route)
        bytes += (size_t)(n_tok * route->n_used) * sizeof(int64_t);
    /* the activations start at the first 64-byte boundary of the scratch:
     * the prompt kernels load their rows aligned */
    return bytes ? bytes + 64 : 1;
}

size_t cw_cpu_matmuls_scratch(const struct cw_cpu_mm *ops, int n_ops, int64_t n_in,
                              int64_t n_tok, const struct cw_cpu_route *route)
{
    struct mm_ctx c;
    return plan(&c, ops, n_ops, n_in, n_tok, route);
}

int cw_cpu_matmuls(struct cw_pool *pool, const struct cw_cpu_mm *ops, int n_ops, int64_t n_in,
                   const float *x, int64_t n_tok, const struct cw_cpu_route *route,
                   void *scratch)
{
    struct mm_ctx c;
    if (!plan(&c, ops, n_ops, n_in, n_tok, route))
        return -1;
    c.x = x;
    char *p = (char *)scratch + (64 - (uintptr_t)scratch % 64) % 64;
    for (int a = 0; a < c.n_acts; a++) {
        c.act[a].xq = p;
        p += ALIGN64(c.act[a].act_bytes * (size_t)c.n_x_rows);
    }
    for (int i = 0; i < c.n_ops; i++)
        c.op[i].xq = c.op[i].act < 0 ? (const char *)x : c.act[c.op[i].act].xq;
    if (route) {
        int64_t *order = (int64_t *)p;
        for (int64_t i = 0; i < n_tok * route->n_used; i++)
            if (route->ids[i] >= 0)
                order[c.n_pairs++] = (int64_t)route->ids[i] << 32 | i;
        qsort(order, (size_t)c.n_pairs, sizeof(*order), cmp_i64);
        c.order = order;
    }
    /* activation rows: quantised by the caller alone for a single row (one
     * handshake saved), else spread over the threads */
    for (c.quant_act = 0; c.quant_act < c.n_acts; c.quant_act++) {
        if (c.n_x_rows == 1 || cw_pool_size(pool) == 1)
            quant_task(&c, 0, 1);
        else
            cw_pool_run(pool, quant_task, &c);
    }
    cw_pool_run(pool, mm_task, &c);
    return 0;
}

size_t cw_cpu_matmul_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_tok)
{
    const struct cw_cpu_mm op = {.wtype = wtype, .n_out = 1};
    return cw_cpu_matmuls_scratch(&op, 1, n_in, n_tok, NULL);
}

void cw_cpu_matmul(struct cw_pool *pool, enum cw_qtype wtype, const void *w, int64_t n_in,
                   int64_t n_out, const float *x, int64_t n_tok, float *y, void *scratch)
{
    const struct cw_cpu_mm op = {wtype, w, n_out, y, 0};
    (void)cw_cpu_matmuls(pool, &op, 1, n_in, x, n_tok, NULL, scratch);
}

size_t cw_cpu_matmul_id_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_x_rows,
                                int64_t n_pairs)
{
    /* the prompt layout's rows where the type has one: n_tok is not known */
    const struct cw_cpu_prompt *pk = cw_cpu_prompt_kernels(wtype, cw_cpu_isa_best());
    const size_t plain = cw_cpu_act_bytes(wtype, n_in);
    const size_t act = pk && plain && pk->act_bytes(n_in) > plain ? pk->act_bytes(n_in) : plain;
    return ALIGN64(act * (size_t)n_x_rows) + (size_t)n_pairs * sizeof(int64_t) + 64;
}

void cw_cpu_matmul_id(struct cw_pool *pool, enum cw_qtype wtype, const void *w,
                      size_t expert_stride, int64_t n_in, int64_t n_out, const float *x,
                      int x_per_slot, const int32_t *ids, int64_t n_used, int64_t n_tok,
                      float *y, void *scratch)
{
    const struct cw_cpu_mm op = {wtype, w, n_out, y, expert_stride};
    const struct cw_cpu_route route = {ids, n_used, x_per_slot};
    (void)cw_cpu_matmuls(pool, &op, 1, n_in, x, n_tok, &route, scratch);
}

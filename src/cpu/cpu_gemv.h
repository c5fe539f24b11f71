/* cpu_gemv.h — quantised matrix × activation products on the CPU.
 *
 * Owns the pairing of each weight type with the type its activations are
 * quantised to before a dot product (llama.cpp's CPU vec_dot_type: Q8_K for
 * the K-quants and IQ4_XS, Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4/NVFP4, Q8_1
 * for Q4_1/Q5_1, F16/BF16/F32 for themselves), the dot products straight from
 * the GGUF blocks (scalar for every type, AVX2 where it pays), and the
 * threaded matmul / MoE matmul built on them.
 *
 * Numerics: integer products are exact; each block's integer sum is scaled
 * (float ops, no FMA contraction) and added to float lane (block index mod 8),
 * and the 8 lanes are summed by a fixed tree; F32/F16/BF16 rows use 32
 * interleaved lanes reduced by a fixed tree. The AVX2 kernels follow the same
 * order, so they are bit-identical to the scalar ones (tested). Every output
 * element of a matmul has the bits of one vec_dot call (the multi-row kernels
 * included), so results do not depend on the thread count or on how tokens
 * are batched. */
#ifndef CW_CPU_GEMV_H
#define CW_CPU_GEMV_H

#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "gguf/quant.h"

/* Instruction-set level of a kernel. */
enum cw_cpu_isa {
    CW_CPU_SCALAR = 0,
    CW_CPU_AVX2 = 1,   /* AVX2 + FMA + F16C */
    CW_CPU_AVX512 = 2, /* and AVX-512 F, BW, VL, VNNI (Q4_K, Q6_K) */
};

/* w_row · xq over n elements; xq is already in the paired activation type. */
typedef float (*cw_vec_dot_fn)(int64_t n, const void *w_row, const void *xq);

/* Best level this CPU runs. */
enum cw_cpu_isa cw_cpu_isa_best(void);

/* "scalar", "AVX2", "AVX-512". */
const char *cw_cpu_isa_name(enum cw_cpu_isa isa);

/* 1 if the CPU backend can multiply with weights of this type. */
int cw_cpu_supports(enum cw_qtype wtype);

/* The activation type a weight type pairs with; -1 if unsupported. */
int cw_cpu_vec_dot_type(enum cw_qtype wtype);

/* w_row · xq[t] for t < rows into out[t]: several activation rows against
 * one weight row, whose blocks are unpacked once for all of them (prompts).
 * Each out[t] has the bits of the type's vec_dot on xq[t]. */
typedef void (*cw_vec_dotn_fn)(int64_t n, const void *w_row, const void *const *xq, float *out);

/* Bytes of one activation row of n elements quantised for wtype; 0 if the
 * type is unsupported or n is not a multiple of the block sizes. */
size_t cw_cpu_act_bytes(enum cw_qtype wtype, int64_t n);

/* Quantises one activation row x[n] into xq (cw_cpu_act_bytes bytes), exactly
 * as llama.cpp's CPU backend does (Q8_K / Q8_0 / Q8_1 / F16 / BF16 / copy). */
void cw_cpu_quantize_act(enum cw_qtype wtype, const float *x, void *xq, int64_t n);

/* The vec_dot of a type at a level (the scalar one where the level has none
 * of its own); NULL if the type is unsupported. */
cw_vec_dot_fn cw_cpu_vec_dot_fn(enum cw_qtype wtype, enum cw_cpu_isa isa);

/* The kernel of a type at a level for rows (4 or 8) activation rows at once;
 * NULL where it has none (the matmuls then take fewer rows a pass). */
cw_vec_dotn_fn cw_cpu_vec_dotn_fn(enum cw_qtype wtype, enum cw_cpu_isa isa, int rows);

/* Weight rows w_row and w_row + row_bytes against 4 (8) activation rows:
 * out[r*4 + t] (out[r*8 + t]). */
typedef void (*cw_vec_dotn2_fn)(int64_t n, const void *w_row, size_t row_bytes,
                                const void *const *xq, float *out);

/* A type's prompt kernels at a level: where it has kernels that read their
 * activations in a layout of their own (AVX-512 Q4_K and Q6_K:
 * cpu_dot_prompt_avx512.c), products of several tokens quantise x into that
 * layout (act_bytes a row, a multiple of 64, never fewer than
 * cw_cpu_act_bytes; rows 64-byte aligned) and multiply with these. Each
 * result has the bits of the type's vec_dot on the plain row. */
struct cw_cpu_prompt {
    size_t (*act_bytes)(int64_t n);
    void (*quantize)(const float *x, void *xq, int64_t n);
    cw_vec_dot_fn dot;
    cw_vec_dotn_fn dot4, dot8;
    cw_vec_dotn2_fn dot4x2, dot8x2;
};

/* NULL where the type has none at this level (its row kernels serve
 * prompts too). */
const struct cw_cpu_prompt *cw_cpu_prompt_kernels(enum cw_qtype wtype, enum cw_cpu_isa isa);

/* One dot product with the best kernel. */
float cw_cpu_vec_dot(enum cw_qtype wtype, int64_t n, const void *w_row, const void *xq);

/* One of the products of a shared input in a cw_cpu_matmuls call: n_out rows
 * of wtype, stored row after row from w. Dense (expert_stride 0): y
 * [n_tok][n_out]. Routed (expert_stride > 0, the bytes between experts):
 * the call's route picks W_e at w + e*expert_stride, and y is
 * [n_tok*n_used][n_out] as in cw_cpu_matmul_id. */
struct cw_cpu_mm {
    enum cw_qtype wtype;
    const void *w;
    int64_t n_out;
    float *y;
    size_t expert_stride;
};

/* The experts of a call's routed products (cw_cpu_matmul_id's arguments). */
struct cw_cpu_route {
    const int32_t *ids;
    int64_t n_used;
    int x_per_slot; /* 1: one input row per slot, and no dense products */
};

#define CW_CPU_MM_MAX 8 /* products a call */

/* Scratch bytes for cw_cpu_matmuls (its route's ids are not read); 0 if
 * the arguments are out of range. */
size_t cw_cpu_matmuls_scratch(const struct cw_cpu_mm *ops, int n_ops, int64_t n_in,
                              int64_t n_tok, const struct cw_cpu_route *route);

/* Up to CW_CPU_MM_MAX products of one input x [n_tok][n_in] (route: NULL
 * where none is routed). x is quantised once for each activation type
 * among them (F32 weights read it as it is; with n_tok > 1, a type's prompt
 * kernels take their own layout), and every product's rows are
 * split over the threads of one pool run. Each output has the bits it has
 * from cw_cpu_matmul / cw_cpu_matmul_id alone. -1 (nothing done) where the
 * arguments are out of range, as cw_cpu_matmuls_scratch's 0. */
int cw_cpu_matmuls(struct cw_pool *pool, const struct cw_cpu_mm *ops, int n_ops, int64_t n_in,
                   const float *x, int64_t n_tok, const struct cw_cpu_route *route,
                   void *scratch);

/* Scratch bytes that cw_cpu_matmul needs for n_tok rows of n_in. */
size_t cw_cpu_matmul_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_tok);

/* y[t*n_out + o] = W[o] · x[t*n_in ...] for t < n_tok, o < n_out, where W is
 * n_out rows of n_in elements of wtype, stored row after row. Each activation
 * row is quantised once; output rows are split over the pool's threads.
 * scratch: cw_cpu_matmul_scratch bytes (64-byte aligned preferred). Shapes
 * are the caller's invariant (n_in a multiple of the block size). */
void cw_cpu_matmul(struct cw_pool *pool, enum cw_qtype wtype, const void *w, int64_t n_in,
                   int64_t n_out, const float *x, int64_t n_tok, float *y, void *scratch);

/* Scratch bytes for cw_cpu_matmul_id. */
size_t cw_cpu_matmul_id_scratch(enum cw_qtype wtype, int64_t n_in, int64_t n_x_rows,
                                int64_t n_pairs);

/* MoE: for token t < n_tok and slot k < n_used, with e = ids[t*n_used + k],
 *   y[(t*n_used + k)*n_out + o] = W_e[o] · x_row,
 * where W_e starts at (const char *)w + e*expert_stride and x_row is
 * x[t*n_in ...] when x_per_slot is 0 (gate/up: one input per token) or
 * x[(t*n_used + k)*n_in ...] when it is 1 (down: one input per slot).
 * Work is grouped by expert, so each expert matrix is streamed once per call.
 * A negative id leaves its output row untouched. */
void cw_cpu_matmul_id(struct cw_pool *pool, enum cw_qtype wtype, const void *w,
                      size_t expert_stride, int64_t n_in, int64_t n_out, const float *x,
                      int x_per_slot, const int32_t *ids, int64_t n_used, int64_t n_tok,
                      float *y, void *scratch);

#endif

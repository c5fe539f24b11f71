/* quant.h — GGML tensor types: ids, block layouts and the traits table.
 *
 * Owns the one description of every tensor type cwen reads from GGUF files:
 * the type ids (GGUF's own numbers), the byte layout of each quantised block
 * (with a size assert, so a layout can never silently drift), and a traits
 * table {name, block size, bytes, dequantise, quantise}. Dot products and
 * kernels live with the backends; this header is also compiled by nvcc, so it
 * holds plain C declarations only. Layouts follow ggml-common.h (facts of the
 * file format); all multi-byte fields are little-endian. */
#ifndef CW_QUANT_H
#define CW_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define CW_STATIC_ASSERT(c, m) static_assert(c, m)
extern "C" {
#else
#define CW_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* GGUF tensor type ids (ggml.h numbering; gaps are retired types). */
enum cw_qtype {
    CW_TYPE_F32 = 0,
    CW_TYPE_F16 = 1,
    CW_TYPE_Q4_0 = 2,
    CW_TYPE_Q4_1 = 3,
    CW_TYPE_Q5_0 = 6,
    CW_TYPE_Q5_1 = 7,
    CW_TYPE_Q8_0 = 8,
    CW_TYPE_Q8_1 = 9,
    CW_TYPE_Q2_K = 10,
    CW_TYPE_Q3_K = 11,
    CW_TYPE_Q4_K = 12,
    CW_TYPE_Q5_K = 13,
    CW_TYPE_Q6_K = 14,
    CW_TYPE_Q8_K = 15,
    CW_TYPE_IQ2_XXS = 16,
    CW_TYPE_IQ2_XS = 17,
    CW_TYPE_IQ3_XXS = 18,
    CW_TYPE_IQ1_S = 19,
    CW_TYPE_IQ4_NL = 20,
    CW_TYPE_IQ3_S = 21,
    CW_TYPE_IQ2_S = 22,
    CW_TYPE_IQ4_XS = 23,
    CW_TYPE_I8 = 24,
    CW_TYPE_I16 = 25,
    CW_TYPE_I32 = 26,
    CW_TYPE_I64 = 27,
    CW_TYPE_F64 = 28,
    CW_TYPE_IQ1_M = 29,
    CW_TYPE_BF16 = 30,
    CW_TYPE_TQ1_0 = 34,
    CW_TYPE_TQ2_0 = 35,
    CW_TYPE_MXFP4 = 39,
    CW_TYPE_NVFP4 = 40,
    CW_TYPE_Q1_0 = 41,
    CW_TYPE_Q2_0 = 42,
    CW_TYPE_COUNT = 43,
};

#define CW_QK_K 256 /* super-block size of the K-quants and IQ4_XS */
#define CW_QK 32    /* block size of the legacy quants */

typedef uint16_t cw_f16;  /* IEEE binary16 bits */
typedef uint16_t cw_bf16; /* upper 16 bits of an IEEE binary32 */

/* ---- legacy 32-element blocks ------------------------------------------ */

/* y = d * (q - 8) */
struct cw_block_q4_0 {
    cw_f16 d;
    uint8_t qs[CW_QK / 2]; /* element j in low nibble of qs[j], j+16 in high */
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q4_0) == 18, "q4_0 block size");

/* y = d * q + m */
struct cw_block_q4_1 {
    cw_f16 d, m;
    uint8_t qs[CW_QK / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q4_1) == 20, "q4_1 block size");

/* y = d * (q5 - 16), fifth bits in qh (read as little-endian u32) */
struct cw_block_q5_0 {
    cw_f16 d;
    uint8_t qh[4];
    uint8_t qs[CW_QK / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q5_0) == 22, "q5_0 block size");

/* y = d * q5 + m */
struct cw_block_q5_1 {
    cw_f16 d, m;
    uint8_t qh[4];
    uint8_t qs[CW_QK / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q5_1) == 24, "q5_1 block size");

/* y = d * q */
struct cw_block_q8_0 {
    cw_f16 d;
    int8_t qs[CW_QK];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q8_0) == 34, "q8_0 block size");

/* activation format: d, and s = d * sum(qs) */
struct cw_block_q8_1 {
    cw_f16 d, s;
    int8_t qs[CW_QK];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q8_1) == 36, "q8_1 block size");

/* IQ4_NL: y = d * kvalues_iq4nl[nibble] */
struct cw_block_iq4_nl {
    cw_f16 d;
    uint8_t qs[CW_QK / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_iq4_nl) == 18, "iq4_nl block size");

/* MXFP4: shared E8M0 exponent, 4-bit E2M1 values */
struct cw_block_mxfp4 {
    uint8_t e;
    uint8_t qs[CW_QK / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_mxfp4) == 17, "mxfp4 block size");

/* NVFP4: 64 elements, one UE4M3 scale per 16 */
#define CW_QK_NVFP4 64
struct cw_block_nvfp4 {
    uint8_t d[4];
    uint8_t qs[CW_QK_NVFP4 / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_nvfp4) == 36, "nvfp4 block size");

/* ---- K-quants: 256-element super-blocks -------------------------------- */

/* 16 sub-blocks of 16: scales[i] = (min << 4) | scale (4 bits each) */
struct cw_block_q2_k {
    uint8_t scales[CW_QK_K / 16];
    uint8_t qs[CW_QK_K / 4];
    cw_f16 d, dmin;
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q2_k) == 84, "q2_K block size");

/* 16 sub-blocks of 16, 6-bit scales packed in 12 bytes, high bit in hmask */
struct cw_block_q3_k {
    uint8_t hmask[CW_QK_K / 8];
    uint8_t qs[CW_QK_K / 4];
    uint8_t scales[12];
    cw_f16 d;
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q3_k) == 110, "q3_K block size");

/* 8 sub-blocks of 32, 6-bit scale and min each, packed in 12 bytes */
struct cw_block_q4_k {
    cw_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qs[CW_QK_K / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q4_k) == 144, "q4_K block size");

struct cw_block_q5_k {
    cw_f16 d, dmin;
    uint8_t scales[12];
    uint8_t qh[CW_QK_K / 8];
    uint8_t qs[CW_QK_K / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q5_k) == 176, "q5_K block size");

/* 16 sub-blocks of 16, int8 scales; 6-bit values = low 4 in ql, high 2 in qh */
struct cw_block_q6_k {
    uint8_t ql[CW_QK_K / 2];
    uint8_t qh[CW_QK_K / 4];
    int8_t scales[CW_QK_K / 16];
    cw_f16 d;
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q6_k) == 210, "q6_K block size");

/* activation format for dot products with K-quants (never stored in files) */
struct cw_block_q8_k {
    float d;
    int8_t qs[CW_QK_K];
    int16_t bsums[CW_QK_K / 16]; /* sum of each group of 16 qs */
};
CW_STATIC_ASSERT(sizeof(struct cw_block_q8_k) == 292, "q8_K block size");

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (low 4 in scales_l, high 2
 * in scales_h), values from the IQ4_NL table */
struct cw_block_iq4_xs {
    cw_f16 d;
    uint16_t scales_h;
    uint8_t scales_l[CW_QK_K / 64];
    uint8_t qs[CW_QK_K / 2];
};
CW_STATIC_ASSERT(sizeof(struct cw_block_iq4_xs) == 136, "iq4_xs block size");

/* ---- traits ------------------------------------------------------------- */

typedef void (*cw_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*cw_quant_fn)(const float *src, void *dst, int64_t n);

struct cw_qtype_traits {
    const char *name;          /* "q4_K" (ggml spelling); NULL: unknown id */
    int64_t block_elems;       /* elements per block */
    size_t block_bytes;        /* bytes per block */
    cw_dequant_fn dequant_row; /* n a multiple of block_elems; NULL if unsupported */
    cw_quant_fn quant_row;     /* NULL where cwen cannot write the type */
};

/* Traits of a type id; NULL for an id GGUF does not define. */
const struct cw_qtype_traits *cw_qtype_traits(uint32_t type);

/* Name of a type id, or "unknown". */
const char *cw_qtype_name(uint32_t type);

/* Parses a type name ("q4_k", "Q4_K", "bf16", ...); -1 if none matches. */
int cw_qtype_from_name(const char *name);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
size_t cw_qtype_row_bytes(uint32_t type, int64_t n);

/* Scalar conversions, exact (round to nearest even for f32 -> f16/bf16).
 * Under nvcc, cuda/cuda_common.cuh defines the two widening ones for device
 * code under the same names, so they are not declared here. */
#ifndef __CUDACC__
float cw_f16_to_f32(cw_f16 h);
float cw_bf16_to_f32(cw_bf16 h);
#endif
cw_f16 cw_f32_to_f16(float f);
cw_bf16 cw_f32_to_bf16(float f);

/* The 16 non-linear levels shared by IQ4_NL and IQ4_XS. */
extern const int8_t cw_iq4nl_values[16];

#ifdef __cplusplus
}
#endif
#endif

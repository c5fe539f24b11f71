/* cpu_dot.h — internal to cpu/: the vec_dot kernels and the float steps they
 * share.
 *
 * Every kernel computes each block's integer sum exactly and then calls one
 * of the combine helpers below on float lane b mod 8 (b = block index; NVFP4:
 * 16-element sub-block index), lanes visited in block order; the 8 lanes are
 * summed by cw_reduce8 at the end (8 lanes break the add-latency chain and
 * match one AVX2 register). The scalar and AVX2 kernels share these helpers, and with FMA
 * contraction off (-std=c11 for gcc, the pragma for clang) the same float
 * operations run in the same order, which is what makes the two paths
 * bit-identical. Not for use outside src/cpu. */
#ifndef CW_CPU_DOT_H
#define CW_CPU_DOT_H

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/quant.h"

/* Exact f16 -> f32: place the bits in a float and rescale by 2^112, which
 * also normalises subnormals; inf/nan rebuilt by hand. */
static inline float cw_h2f(cw_f16 h)
{
    uint32_t em = (uint32_t)(h & 0x7fff) << 13;
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    float f;
    if (em >= (0x7c00u << 13)) {
        uint32_t b = sign | 0x7f800000u | (em & 0x7fffff);
        memcpy(&f, &b, 4);
        return f;
    }
    memcpy(&f, &em, 4);
    f *= 0x1p112f;
    uint32_t b;
    memcpy(&b, &f, 4);
    b |= sign;
    memcpy(&f, &b, 4);
    return f;
}

/* 2^(e-128): the E8M0 scale halved, because the FP4 levels are doubled. */
static inline float cw_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* acc + (d_w*d_x)*sumi: one scale per block. */
static inline float cw_comb1(float acc, float dw, float dx, int32_t sumi)
{
    float dd = dw * dx;
    float t = dd * (float)sumi;
    return acc + t;
}

/* acc + ((d_x*d)*sumi - (d_x*dmin)*summ): the K-quants with mins. */
static inline float cw_comb_min(float acc, float dx, float d, float dmin, int32_t sumi,
                                int32_t summ)
{
    float dd = dx * d;
    float dm = dx * dmin;
    float t = dd * (float)sumi;
    float u = dm * (float)summ;
    float v = t - u;
    return acc + v;
}

/* acc + ((d_w*d_x)*sumi + m_w*s_x): Q4_1/Q5_1 against Q8_1. */
static inline float cw_comb_q8_1(float acc, float dw, float dx, int32_t sumi, float mw,
                                 float sx)
{
    float dd = dw * dx;
    float t = dd * (float)sumi;
    float u = mw * sx;
    float v = t + u;
    return acc + v;
}

/* 8 lanes summed by a fixed tree: (l0+l4 + l2+l6) + (l1+l5 + l3+l7). */
static inline float cw_reduce8(const float l[8])
{
    float t[4], u[2];
    for (int j = 0; j < 4; j++)
        t[j] = l[j] + l[4 + j];
    for (int j = 0; j < 2; j++)
        u[j] = t[j] + t[2 + j];
    return u[0] + u[1];
}

/* Float rows: 32 lanes (lane = index mod 32) reduced by this fixed tree. */
static inline float cw_reduce32(const float l[32])
{
    float s[8];
    for (int j = 0; j < 8; j++) {
        float a = l[j] + l[8 + j];
        float b = l[16 + j] + l[24 + j];
        s[j] = a + b;
    }
    return cw_reduce8(s);
}

/* Q4_K/Q5_K: the eight 6-bit scales and mins of the 12 packed bytes, by
 * whole words (no branches): for s < 4 sc = b[s] & 63, m = b[s+4] & 63; for
 * s >= 4 the low 4 bits come from b[s+4] (low / high nibble) and the top 2
 * from the spare top bits of b[s-4] / b[s]. */
static inline void cw_k4_unpack(const uint8_t *q, uint8_t sc[8], uint8_t mn[8])
{
    uint32_t u0, u1, u2, o[4];
    memcpy(&u0, q, 4);
    memcpy(&u1, q + 4, 4);
    memcpy(&u2, q + 8, 4);
    o[0] = u0 & 0x3f3f3f3fu;
    o[1] = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    o[2] = u1 & 0x3f3f3f3fu;
    o[3] = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    memcpy(sc, o, 8);
    memcpy(mn, o + 2, 8);
}

#define CW_DOT_DECL(name) float name(int64_t n, const void *w_row, const void *xq);

/* scalar kernels, every type (cpu_dot_ref.c) */
CW_DOT_DECL(cw_dot_f32_ref)
CW_DOT_DECL(cw_dot_f16_ref)
CW_DOT_DECL(cw_dot_bf16_ref)
CW_DOT_DECL(cw_dot_q4_0_ref)
CW_DOT_DECL(cw_dot_q4_1_ref)
CW_DOT_DECL(cw_dot_q5_0_ref)
CW_DOT_DECL(cw_dot_q5_1_ref)
CW_DOT_DECL(cw_dot_q8_0_ref)
CW_DOT_DECL(cw_dot_iq4_nl_ref)
CW_DOT_DECL(cw_dot_mxfp4_ref)
CW_DOT_DECL(cw_dot_nvfp4_ref)
CW_DOT_DECL(cw_dot_q2_k_ref)
CW_DOT_DECL(cw_dot_q3_k_ref)
CW_DOT_DECL(cw_dot_q4_k_ref)
CW_DOT_DECL(cw_dot_q5_k_ref)
CW_DOT_DECL(cw_dot_q6_k_ref)
CW_DOT_DECL(cw_dot_iq4_xs_ref)

/* AVX2+FMA+F16C kernels (cpu_dot_avx2.c); call only when the CPU has them */
CW_DOT_DECL(cw_dot_f32_avx2)
CW_DOT_DECL(cw_dot_f16_avx2)
CW_DOT_DECL(cw_dot_bf16_avx2)
CW_DOT_DECL(cw_dot_q8_0_avx2)
CW_DOT_DECL(cw_dot_q4_0_avx2)
CW_DOT_DECL(cw_dot_iq4_nl_avx2)
CW_DOT_DECL(cw_dot_mxfp4_avx2)
CW_DOT_DECL(cw_dot_q4_k_avx2)
CW_DOT_DECL(cw_dot_q5_k_avx2)
CW_DOT_DECL(cw_dot_q6_k_avx2)
CW_DOT_DECL(cw_dot_iq4_xs_avx2)

/* Four (eight) activation rows against one weight row: out[t] = the
 * single-row kernel's result for xq[t], bit for bit. */
#define CW_DOTN_DECL(name) \
    void name(int64_t n, const void *w_row, const void *const *xq, float *out);
CW_DOTN_DECL(cw_dot4_q4_k_avx2)
CW_DOTN_DECL(cw_dot4_q5_k_avx2)
CW_DOTN_DECL(cw_dot4_q6_k_avx2)
CW_DOTN_DECL(cw_dot4_iq4_xs_avx2)

/* AVX-512 F+BW+VL+VNNI kernels (cpu_dot_avx512.c); call only when the CPU has them */
CW_DOT_DECL(cw_dot_q4_k_avx512)
CW_DOT_DECL(cw_dot_q6_k_avx512)
CW_DOTN_DECL(cw_dot4_q4_k_avx512)
CW_DOTN_DECL(cw_dot4_q6_k_avx512)
CW_DOTN_DECL(cw_dot8_q4_k_avx512)
CW_DOTN_DECL(cw_dot8_q6_k_avx512)

/* The AVX-512 prompt kernels of Q4_K and Q6_K and the layouts of their
 * activations (cpu_dot_prompt_avx512.c): bytes of a row of n (a multiple of
 * 64), and the quantisers, which give the values of Q8_K reordered. */
#define CW_IL_DECL(name)                                                               \
    size_t cw_##name##_il_act_bytes(int64_t n);                                         \
    void cw_##name##_il_quantize(const float *x, void *xq, int64_t n);                  \
    CW_DOT_DECL(cw_dot_##name##_il_avx512)                                              \
    CW_DOTN_DECL(cw_dot4_##name##_il_avx512)                                            \
    CW_DOTN_DECL(cw_dot8_##name##_il_avx512)                                            \
    void cw_dot4x2_##name##_il_avx512(int64_t n, const void *w_row, size_t row_bytes, \
                                      const void *const *xq, float *out);              \
    void cw_dot8x2_##name##_il_avx512(int64_t n, const void *w_row, size_t row_bytes, \
                                      const void *const *xq, float *out);
CW_IL_DECL(q4_k)
CW_IL_DECL(q6_k)
#undef CW_IL_DECL

#undef CW_DOT_DECL
#undef CW_DOTN_DECL

/* Activation quantiser for Q8_1 (the one quant_quant.c does not provide). */
void cw_cpu_quant_row_q8_1(const float *x, void *y, int64_t n);

#endif

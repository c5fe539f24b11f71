/* quant_rows.h — internal: the row converters behind the traits table, and
 * the bit-packing helpers that quant_dequant.c and quant_quant.c share.
 *
 * Only quant.c (which puts the converters in the table) and the two row
 * files include this; everyone else goes through cw_qtype_traits(). Every
 * converter takes n a multiple of the type's block size (the caller's job). */
#ifndef CW_QUANT_ROWS_H
#define CW_QUANT_ROWS_H

#include <stdint.h>
#include <string.h>

void cw_dequant_row_f32(const void *src, float *dst, int64_t n);
void cw_dequant_row_f16(const void *src, float *dst, int64_t n);
void cw_dequant_row_bf16(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_1(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_1(const void *src, float *dst, int64_t n);
void cw_dequant_row_q8_0(const void *src, float *dst, int64_t n);
void cw_dequant_row_q2_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q3_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q4_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q5_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q6_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_q8_k(const void *src, float *dst, int64_t n);
void cw_dequant_row_iq4_nl(const void *src, float *dst, int64_t n);
void cw_dequant_row_iq4_xs(const void *src, float *dst, int64_t n);
void cw_dequant_row_mxfp4(const void *src, float *dst, int64_t n);
void cw_dequant_row_nvfp4(const void *src, float *dst, int64_t n);

void cw_quant_row_f32(const float *src, void *dst, int64_t n);
void cw_quant_row_f16(const float *src, void *dst, int64_t n);
void cw_quant_row_bf16(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_1(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_1(const float *src, void *dst, int64_t n);
void cw_quant_row_q8_0(const float *src, void *dst, int64_t n);
void cw_quant_row_q2_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q3_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q4_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q5_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q6_k(const float *src, void *dst, int64_t n);
void cw_quant_row_q8_k(const float *src, void *dst, int64_t n);
void cw_quant_row_iq4_nl(const float *src, void *dst, int64_t n);
void cw_quant_row_iq4_xs(const float *src, void *dst, int64_t n);
void cw_quant_row_mxfp4(const float *src, void *dst, int64_t n);
void cw_quant_row_nvfp4(const float *src, void *dst, int64_t n);

/* MXFP4/NVFP4 element values, doubled E2M1 (so the block scales are halved). */
extern const int8_t cw_fp4_values[16];

/* Q4_K/Q5_K: 6-bit scale and min of sub-block j (0..7) in scales[12].
 * Sub-blocks 0-3 keep theirs in the low 6 bits of bytes j and j+4; 4-7 put
 * the low 4 bits in byte j+4 and the top 2 in the spare bits of bytes j-4, j. */
static inline void cw_k4_scale_get(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Inverse of cw_k4_scale_get for all 8 sub-blocks (sc, m each 0..63). */
static inline void cw_k4_scale_put(uint8_t *s, const uint8_t *sc, const uint8_t *m)
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* Q3_K: 6-bit scale j (0..15) in scales[12]: low 4 bits in a nibble of byte
 * j mod 8 (low nibble for j < 8), top 2 bits in byte 8 + j mod 4 at 2*(j/4). */
static inline int cw_k3_scale_get(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return lo | hi << 4;
}

static inline void cw_k3_scale_put(uint8_t *s, const uint8_t *v)
{
    memset(s, 0, 12);
    for (int j = 0; j < 16; j++) {
        s[j & 7] |= (uint8_t)((v[j] & 15) << (j < 8 ? 0 : 4));
        s[8 + (j & 3)] |= (uint8_t)((v[j] >> 4) << (2 * (j >> 2)));
    }
}

/* The 2-bit planes of Q2_K/Q3_K: element e of a super-block sits in byte
 * qs[32*(e/128) + e%32] at bit 2*((e/32)%4). */
static inline int cw_k2_index(int e) { return 32 * (e >> 7) + (e & 31); }
static inline int cw_k2_shift(int e) { return 2 * ((e >> 5) & 3); }

/* MXFP4 block scale: 2^(e-128) (E8M0 halved, to pair with cw_fp4_values);
 * e = 0 and 1 are f32 subnormals. */
static inline float cw_e8m0_half(uint8_t e)
{
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* NVFP4 sub-block scale: half the UE4M3 value of x (4 exponent bits, bias 7,
 * 3 mantissa bits; exponent 0 is subnormal m*2^-9). The codes 0x00 and 0x7F
 * mean 0; bit 7 is ignored otherwise, as ggml does. All results are exact. */
static inline float cw_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    int e = (x >> 3) & 15, m = x & 7;
    /* as an f32: subnormal m*2^-10 or (8+m)*2^(e-11), both exact */
    float v = e ? (float)(8 + m) : (float)m;
    int p = e ? e - 11 : -10;
    uint32_t bits = (uint32_t)(127 + p) << 23; /* 2^p, p in -11..4: normal */
    float s;
    memcpy(&s, &bits, 4);
    return v * s;
}

#endif

/* quant_dequant.c — row dequantisers: GGUF tensor blocks to f32.
 *
 * One function per type, each the exact arithmetic of ggml's to_float (same
 * operations in the same order, so results are bit-identical; the parity test
 * checks this against libggml-base). Block layouts are in quant.h, packing
 * helpers shared with the quantisers in quant_rows.h. n is a multiple of the
 * type's block size. */
#include "gguf/quant.h"
#include "gguf/quant_rows.h"

const int8_t cw_fp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#define H(x) cw_f16_to_f32(x)

void cw_dequant_row_f32(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void cw_dequant_row_f16(const void *src, float *dst, int64_t n)
{
    const cw_f16 *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = H(x[i]);
}

void cw_dequant_row_bf16(const void *src, float *dst, int64_t n)
{
    const cw_bf16 *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = cw_bf16_to_f32(x[i]);
}

/* ---- legacy 32-element blocks: element j in the low nibble of qs[j],
 * element j+16 in the high nibble; Q5's fifth bits are bit j of qh. */

static inline uint32_t qh_bits(const uint8_t qh[4])
{
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

void cw_dequant_row_q4_0(const void *src, float *y, int64_t n)
{
    const struct cw_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = ((b->qs[j] & 15) - 8) * d;
            y[j + 16] = ((b->qs[j] >> 4) - 8) * d;
        }
    }
}

void cw_dequant_row_q4_1(const void *src, float *y, int64_t n)
{
    const struct cw_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d), m = H(b->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (b->qs[j] & 15) * d + m;
            y[j + 16] = (b->qs[j] >> 4) * d + m;
        }
    }
}

void cw_dequant_row_q5_0(const void *src, float *y, int64_t n)
{
    const struct cw_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d);
        uint32_t qh = qh_bits(b->qh);
        for (int j = 0; j < 16; j++) {
            int lo = (int)((b->qs[j] & 15) | ((qh >> j) & 1) << 4);
            int hi = (int)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            y[j] = (lo - 16) * d;
            y[j + 16] = (hi - 16) * d;
        }
    }
}

void cw_dequant_row_q5_1(const void *src, float *y, int64_t n)
{
    const struct cw_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d), m = H(b->m);
        uint32_t qh = qh_bits(b->qh);
        for (int j = 0; j < 16; j++) {
            int lo = (int)((b->qs[j] & 15) | ((qh >> j) & 1) << 4);
            int hi = (int)((b->qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            y[j] = lo * d + m;
            y[j + 16] = hi * d + m;
        }
    }
}

void cw_dequant_row_q8_0(const void *src, float *y, int64_t n)
{
    const struct cw_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d);
        for (int j = 0; j < CW_QK; j++)
            y[j] = b->qs[j] * d;
    }
}

void cw_dequant_row_iq4_nl(const void *src, float *y, int64_t n)
{
    const struct cw_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = H(b->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * cw_iq4nl_values[b->qs[j] & 15];
            y[j + 16] = d * cw_iq4nl_values[b->qs[j] >> 4];
        }
    }
}

void cw_dequant_row_mxfp4(const void *src, float *y, int64_t n)
{
    const struct cw_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, y += CW_QK) {
        float d = cw_e8m0_half(b->e);
        for (int j = 0; j < 16; j++) {
            y[j] = cw_fp4_values[b->qs[j] & 15] * d;
            y[j + 16] = cw_fp4_values[b->qs[j] >> 4] * d;
        }
    }
}

/* NVFP4: four 16-element sub-blocks, each laid out like a legacy block. */
void cw_dequant_row_nvfp4(const void *src, float *y, int64_t n)
{
    const struct cw_block_nvfp4 *b = src;
    for (int64_t i = 0; i < n / CW_QK_NVFP4; i++, b++) {
        for (int s = 0; s < 4; s++, y += 16) {
            float d = cw_ue4m3_half(b->d[s]);
            const uint8_t *q = b->qs + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = cw_fp4_values[q[j] & 15] * d;
                y[j + 8] = cw_fp4_values[q[j] >> 4] * d;
            }
        }
    }
}

/* ---- K-quants: 256-element super-blocks ---- */

void cw_dequant_row_q2_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q2_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K) {
        float d = H(b->d), dmin = H(b->dmin);
        for (int s = 0; s < 16; s++) {
            float dl = d * (b->scales[s] & 15), ml = dmin * (b->scales[s] >> 4);
            for (int e = 16 * s; e < 16 * s + 16; e++)
                y[e] = dl * ((b->qs[cw_k2_index(e)] >> cw_k2_shift(e)) & 3) - ml;
        }
    }
}

void cw_dequant_row_q3_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q3_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K) {
        float d = H(b->d);
        for (int s = 0; s < 16; s++) {
            float dl = d * (cw_k3_scale_get(b->scales, s) - 32);
            for (int e = 16 * s; e < 16 * s + 16; e++) {
                int q = (b->qs[cw_k2_index(e)] >> cw_k2_shift(e)) & 3;
                int hi = (b->hmask[e & 31] >> (e >> 5)) & 1;
                y[e] = dl * (q - (hi ? 0 : 4));
            }
        }
    }
}

/* Q4_K/Q5_K: chunk c of 64 elements uses qs[32c..32c+31], low nibbles for
 * sub-block 2c, high nibbles for 2c+1; Q5_K's fifth bit of element 32s+l is
 * bit s of qh[l]. */
void cw_dequant_row_q4_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q4_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K) {
        float d = H(b->d), dmin = H(b->dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            cw_k4_scale_get(b->scales, s, &sc, &m);
            float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b->qs + 32 * (s >> 1);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++)
                y[32 * s + l] = dl * ((q[l] >> shift) & 15) - ml;
        }
    }
}

void cw_dequant_row_q5_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q5_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K) {
        float d = H(b->d), dmin = H(b->dmin);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            cw_k4_scale_get(b->scales, s, &sc, &m);
            float dl = d * sc, ml = dmin * m;
            const uint8_t *q = b->qs + 32 * (s >> 1);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 15) | ((b->qh[l] >> s) & 1) << 4;
                y[32 * s + l] = dl * v - ml;
            }
        }
    }
}

/* Q6_K: element 128h + 32k + l (k < 4, l < 32): low 4 bits in ql[64h + l +
 * 32(k&1)] (high nibble when k >= 2), top 2 bits at 2k in qh[32h + l]. */
void cw_dequant_row_q6_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q6_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K) {
        float d = H(b->d);
        for (int e = 0; e < CW_QK_K; e++) {
            int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            int lo = (b->ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
            int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
            y[e] = d * b->scales[e >> 4] * ((lo | hi << 4) - 32);
        }
    }
}

void cw_dequant_row_q8_k(const void *src, float *y, int64_t n)
{
    const struct cw_block_q8_k *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, y += CW_QK_K)
        for (int j = 0; j < CW_QK_K; j++)
            y[j] = b->d * b->qs[j];
}

void cw_dequant_row_iq4_xs(const void *src, float *y, int64_t n)
{
    const struct cw_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++) {
        float d = H(b->d);
        for (int s = 0; s < 8; s++, y += 32) {
            int ls = ((b->scales_l[s / 2] >> (4 * (s & 1))) & 15) | ((b->scales_h >> (2 * s)) & 3) << 4;
            float dl = d * (ls - 32);
            const uint8_t *q = b->qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * cw_iq4nl_values[q[j] & 15];
                y[j + 16] = dl * cw_iq4nl_values[q[j] >> 4];
            }
        }
    }
}

/* cpu_dot_ref.c — scalar vec_dot kernels for every weight type the CPU
 * backend multiplies with, each against its paired activation type.
 *
 * These are the reference: plain loops over the GGUF blocks (layouts in
 * gguf/quant.h), exact integer sums per block, then the shared combine steps
 * of cpu_dot.h in block order. The AVX2 kernels must reproduce them bit for
 * bit. Also owns the Q8_1 activation quantiser. */
#include "cpu/cpu_dot.h"

#include <math.h>

/* The MXFP4/NVFP4 levels, doubled so that they are integers (E2M1 × 2). */
static const int8_t kv_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- float rows --------------------------------------------------------- */

#define FLOAT_DOT(name, T, load)                                                       \
    float name(int64_t n, const void *w_row, const void *xq)                          \
    {                                                                                  \
        const T *w = w_row, *x = xq;                                                   \
        float l[32] = {0};                                                             \
        int64_t i = 0;                                                                 \
        for (; i + 32 <= n; i += 32)                                                   \
            for (int j = 0; j < 32; j++) {                                             \
                float p = load(w[i + j]) * load(x[i + j]);                             \
                l[j] += p;                                                             \
            }                                                                          \
        float acc = cw_reduce32(l);                                                    \
        for (; i < n; i++) {                                                           \
            float p = load(w[i]) * load(x[i]);                                         \
            acc += p;                                                                  \
        }                                                                              \
        return acc;                                                                    \
    }

#define LOAD_F32(v) (v)
FLOAT_DOT(cw_dot_f32_ref, float, LOAD_F32)
FLOAT_DOT(cw_dot_f16_ref, cw_f16, cw_h2f)
FLOAT_DOT(cw_dot_bf16_ref, cw_bf16, cw_bf16_to_f32)

/* ---- 32-element blocks against Q8_0 / Q8_1 ------------------------------ */

float cw_dot_q8_0_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q8_0 *w = w_row, *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        int32_t s = 0;
        for (int j = 0; j < CW_QK; j++)
            s += w[b].qs[j] * x[b].qs[j];
        acc[b & 7] = cw_comb1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s);
    }
    return cw_reduce8(acc);
}

float cw_dot_q4_0_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q4_0 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            s += ((w[b].qs[j] & 15) - 8) * x[b].qs[j];
            s += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
        }
        acc[b & 7] = cw_comb1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s);
    }
    return cw_reduce8(acc);
}

float cw_dot_q5_0_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q5_0 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        uint32_t qh;
        memcpy(&qh, w[b].qh, 4);
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (w[b].qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (w[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            s += (lo - 16) * x[b].qs[j] + (hi - 16) * x[b].qs[j + 16];
        }
        acc[b & 7] = cw_comb1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s);
    }
    return cw_reduce8(acc);
}

float cw_dot_q4_1_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q4_1 *w = w_row;
    const struct cw_block_q8_1 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += (w[b].qs[j] & 15) * x[b].qs[j] + (w[b].qs[j] >> 4) * x[b].qs[j + 16];
        acc[b & 7] = cw_comb_q8_1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s, cw_h2f(w[b].m),
                           cw_h2f(x[b].s));
    }
    return cw_reduce8(acc);
}

float cw_dot_q5_1_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q5_1 *w = w_row;
    const struct cw_block_q8_1 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        uint32_t qh;
        memcpy(&qh, w[b].qh, 4);
        int32_t s = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (w[b].qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (w[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            s += lo * x[b].qs[j] + hi * x[b].qs[j + 16];
        }
        acc[b & 7] = cw_comb_q8_1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s, cw_h2f(w[b].m),
                           cw_h2f(x[b].s));
    }
    return cw_reduce8(acc);
}

float cw_dot_iq4_nl_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_iq4_nl *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += cw_iq4nl_values[w[b].qs[j] & 15] * x[b].qs[j] +
                 cw_iq4nl_values[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        acc[b & 7] = cw_comb1(acc[b & 7], cw_h2f(w[b].d), cw_h2f(x[b].d), s);
    }
    return cw_reduce8(acc);
}

float cw_dot_mxfp4_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_mxfp4 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK; b++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += kv_fp4[w[b].qs[j] & 15] * x[b].qs[j] + kv_fp4[w[b].qs[j] >> 4] * x[b].qs[j + 16];
        acc[b & 7] = cw_comb1(acc[b & 7], cw_h2f(x[b].d), cw_e8m0_half(w[b].e), s);
    }
    return cw_reduce8(acc);
}

/* UE4M3 scale halved (kv_fp4 is doubled); 0x00 and 0x7f read as 0. */
static float ue4m3_half(uint8_t v)
{
    if (v == 0 || v == 0x7f)
        return 0.0f;
    int e = (v >> 3) & 15, m = v & 7;
    float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

float cw_dot_nvfp4_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_nvfp4 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_NVFP4; b++) {
        for (int s = 0; s < 4; s++) {
            const struct cw_block_q8_0 *xb = &x[2 * b + s / 2];
            const int8_t *a = xb->qs + (s % 2) * 16;
            int32_t sum = 0;
            for (int j = 0; j < 8; j++) {
                uint8_t q = w[b].qs[8 * s + j];
                sum += a[j] * kv_fp4[q & 15] + a[j + 8] * kv_fp4[q >> 4];
            }
            acc[(4 * b + s) & 7] = cw_comb1(acc[(4 * b + s) & 7], cw_h2f(xb->d), ue4m3_half(w[b].d[s]), sum);
        }
    }
    return cw_reduce8(acc);
}

/* ---- 256-element super-blocks against Q8_K ------------------------------ */

float cw_dot_q2_k_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q2_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        int32_t sumi = 0, summ = 0;
        for (int k = 0; k < 16; k++) { /* sub-block k: elements 16k..16k+15 */
            int e0 = 16 * k, half = e0 / 128, shift = 2 * ((e0 % 128) / 32);
            const uint8_t *q = w[b].qs + 32 * half + (e0 % 32);
            int32_t s = 0;
            for (int l = 0; l < 16; l++)
                s += ((q[l] >> shift) & 3) * x[b].qs[e0 + l];
            sumi += (w[b].scales[k] & 15) * s;
            summ += (w[b].scales[k] >> 4) * x[b].bsums[k];
        }
        acc[b & 7] = cw_comb_min(acc[b & 7], x[b].d, cw_h2f(w[b].d), cw_h2f(w[b].dmin), sumi, summ);
    }
    return cw_reduce8(acc);
}

float cw_dot_q3_k_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q3_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        const uint8_t *sc = w[b].scales;
        int32_t sumi = 0;
        for (int k = 0; k < 16; k++) {
            int scale = ((sc[k % 8] >> (4 * (k / 8))) & 15) | (((sc[8 + k % 4] >> (2 * (k / 4))) & 3) << 4);
            int e0 = 16 * k, half = e0 / 128, j = (e0 % 128) / 32;
            const uint8_t *q = w[b].qs + 32 * half + (e0 % 32);
            const uint8_t *hm = w[b].hmask + (e0 % 32);
            uint8_t hbit = (uint8_t)(1u << (4 * half + j));
            int32_t s = 0;
            for (int l = 0; l < 16; l++) {
                int v = ((q[l] >> (2 * j)) & 3) - ((hm[l] & hbit) ? 0 : 4);
                s += v * x[b].qs[e0 + l];
            }
            sumi += (scale - 32) * s;
        }
        acc[b & 7] = cw_comb1(acc[b & 7], x[b].d, cw_h2f(w[b].d), sumi);
    }
    return cw_reduce8(acc);
}

float cw_dot_q4_k_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q4_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        int32_t sumi = 0, summ = 0;
        uint8_t scs[8], mns[8];
        cw_k4_unpack(w[b].scales, scs, mns);
        for (int s = 0; s < 8; s++) {
            int sc = scs[s], m = mns[s];
            const uint8_t *q = w[b].qs + 32 * (s / 2);
            int shift = 4 * (s % 2);
            int32_t d = 0;
            for (int l = 0; l < 32; l++)
                d += ((q[l] >> shift) & 15) * x[b].qs[32 * s + l];
            sumi += sc * d;
            summ += m * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
        }
        acc[b & 7] = cw_comb_min(acc[b & 7], x[b].d, cw_h2f(w[b].d), cw_h2f(w[b].dmin), sumi, summ);
    }
    return cw_reduce8(acc);
}

float cw_dot_q5_k_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q5_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        int32_t sumi = 0, summ = 0;
        uint8_t scs[8], mns[8];
        cw_k4_unpack(w[b].scales, scs, mns);
        for (int s = 0; s < 8; s++) {
            int sc = scs[s], m = mns[s];
            const uint8_t *q = w[b].qs + 32 * (s / 2);
            int shift = 4 * (s % 2);
            int32_t d = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 15) | (((w[b].qh[l] >> s) & 1) << 4);
                d += v * x[b].qs[32 * s + l];
            }
            sumi += sc * d;
            summ += m * (x[b].bsums[2 * s] + x[b].bsums[2 * s + 1]);
        }
        acc[b & 7] = cw_comb_min(acc[b & 7], x[b].d, cw_h2f(w[b].d), cw_h2f(w[b].dmin), sumi, summ);
    }
    return cw_reduce8(acc);
}

float cw_dot_q6_k_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q6_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        int32_t sumi = 0;
        for (int k = 0; k < 16; k++) {
            int e0 = 16 * k, half = e0 / 128, g = (e0 % 128) / 32, l0 = e0 % 32;
            const uint8_t *ql = w[b].ql + 64 * half + 32 * (g % 2) + l0;
            const uint8_t *qh = w[b].qh + 32 * half + l0;
            int lshift = 4 * (g / 2), hshift = 2 * g;
            int32_t s = 0;
            for (int l = 0; l < 16; l++) {
                int v = (((ql[l] >> lshift) & 15) | (((qh[l] >> hshift) & 3) << 4)) - 32;
                s += v * x[b].qs[e0 + l];
            }
            sumi += w[b].scales[k] * s;
        }
        acc[b & 7] = cw_comb1(acc[b & 7], x[b].d, cw_h2f(w[b].d), sumi);
    }
    return cw_reduce8(acc);
}

float cw_dot_iq4_xs_ref(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_iq4_xs *w = w_row;
    const struct cw_block_q8_k *x = xq;
    float acc[8] = {0};
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        int32_t sumi = 0;
        for (int s = 0; s < 8; s++) {
            int ls = ((w[b].scales_l[s / 2] >> (4 * (s % 2))) & 15) |
                     (((w[b].scales_h >> (2 * s)) & 3) << 4);
            const uint8_t *q = w[b].qs + 16 * s;
            const int8_t *a = x[b].qs + 32 * s;
            int32_t d = 0;
            for (int j = 0; j < 16; j++)
                d += cw_iq4nl_values[q[j] & 15] * a[j] + cw_iq4nl_values[q[j] >> 4] * a[j + 16];
            sumi += (ls - 32) * d;
        }
        acc[b & 7] = cw_comb1(acc[b & 7], x[b].d, cw_h2f(w[b].d), sumi);
    }
    return cw_reduce8(acc);
}

/* ---- Q8_1 activations --------------------------------------------------- */

/* As llama.cpp's x86 CPU backend: d = amax/127, q = round-half-even(x*(127/amax)),
 * s = f16(d * sum(q)). */
void cw_cpu_quant_row_q8_1(const float *x, void *y, int64_t n)
{
    struct cw_block_q8_1 *out = y;
    for (int64_t b = 0; b < n / CW_QK; b++) {
        const float *v = x + b * CW_QK;
        float amax = 0;
        for (int j = 0; j < CW_QK; j++)
            amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.f;
        float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < CW_QK; j++) {
            float p = v[j] * id;
            int q = (int)nearbyintf(p);
            out[b].qs[j] = (int8_t)q;
            sum += q;
        }
        out[b].d = cw_f32_to_f16(d);
        out[b].s = cw_f32_to_f16(d * (float)sum);
    }
}

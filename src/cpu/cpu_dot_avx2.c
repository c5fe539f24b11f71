/* cpu_dot_avx2.c — AVX2 (+FMA, F16C) vec_dot kernels for the hot types:
 * F32/F16/BF16, Q8_0, Q4_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K, IQ4_XS.
 *
 * Each function is compiled for the avx2 target by attribute, so the build
 * stays portable; cpu_gemv.c calls them only after a run-time CPU check. The
 * integer work of a block is vectorised (u8 x s8 pair products with
 * maddubs, widened with madd: exact, no saturation for these value ranges);
 * the float steps are the shared ones of cpu_dot.h in the same order, so the
 * results equal the scalar kernels bit for bit. Activations never hold -128
 * (the quantisers cap at ±127), which the sign trick needs. */
#include "cpu/cpu_dot.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

AVX2 static inline float h2f(cw_f16 h)
{
    return _cvtsh_ss(h);
}

/* Sum over 16-bit pairs of w*a for signed w and a (a != -128). */
AVX2 static inline __m256i dot_s8(__m256i w, __m256i a)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

AVX2 static inline __m256i load2x128(const void *lo, const void *hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(lo)),
                                   _mm_loadu_si128(hi), 1);
}

/* ---- float rows: 4 x 8 lanes = the 32 lanes of the scalar kernels ------- */

#define FLOAT_DOT_AVX2(name, T, load8, scalar_load)                                    \
    AVX2 float name(int64_t n, const void *w_row, const void *xq)                     \
    {                                                                                  \
        const T *w = w_row, *x = xq;                                                   \
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), \
                         _mm256_setzero_ps()};                                         \
        int64_t i = 0;                                                                 \
        for (; i + 32 <= n; i += 32)                                                   \
            for (int r = 0; r < 4; r++) {                                              \
                __m256 p = _mm256_mul_ps(load8(w + i + 8 * r), load8(x + i + 8 * r));  \
                acc[r] = _mm256_add_ps(acc[r], p);                                     \
            }                                                                          \
        float l[32];                                                                   \
        for (int r = 0; r < 4; r++)                                                    \
            _mm256_storeu_ps(l + 8 * r, acc[r]);                                       \
        float s = cw_reduce32(l);                                                      \
        for (; i < n; i++) {                                                           \
            float p = scalar_load(w[i]) * scalar_load(x[i]);                           \
            s += p;                                                                    \
        }                                                                              \
        return s;                                                                      \
    }

AVX2 static inline __m256 ld_f32(const float *p)
{
    return _mm256_loadu_ps(p);
}
AVX2 static inline __m256 ld_f16(const cw_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
AVX2 static inline __m256 ld_bf16(const cw_bf16 *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
#define SC_F32(v) (v)

FLOAT_DOT_AVX2(cw_dot_f32_avx2, float, ld_f32, SC_F32)
FLOAT_DOT_AVX2(cw_dot_f16_avx2, cw_f16, ld_f16, h2f)
FLOAT_DOT_AVX2(cw_dot_bf16_avx2, cw_bf16, ld_bf16, cw_bf16_to_f32)

/* ---- 32-element blocks against Q8_0 ------------------------------------- */

AVX2 float cw_dot_q8_0_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q8_0 *w = w_row, *x = xq;
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK; b++) {
        __m256i s = dot_s8(_mm256_loadu_si256((const __m256i *)w[b].qs),
                           _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc = cw_comb1(acc, h2f(w[b].d), h2f(x[b].d), hsum_i32(s));
    }
    return acc;
}

/* 16 packed nibbles -> 32 bytes: low nibbles first, then high (the legacy
 * element order). */
AVX2 static inline __m256i nibbles32(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

AVX2 float cw_dot_q4_0_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q4_0 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK; b++) {
        __m256i q = _mm256_sub_epi8(nibbles32(w[b].qs), _mm256_set1_epi8(8));
        __m256i s = dot_s8(q, _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc = cw_comb1(acc, h2f(w[b].d), h2f(x[b].d), hsum_i32(s));
    }
    return acc;
}

AVX2 static inline __m256i iq4_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)cw_iq4nl_values);
    return _mm256_broadcastsi128_si256(t);
}

AVX2 float cw_dot_iq4_nl_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_iq4_nl *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    const __m256i tab = iq4_table();
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK; b++) {
        __m256i q = _mm256_shuffle_epi8(tab, nibbles32(w[b].qs));
        __m256i s = dot_s8(q, _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc = cw_comb1(acc, h2f(w[b].d), h2f(x[b].d), hsum_i32(s));
    }
    return acc;
}

/* MXFP4: the doubled E2M1 levels by table, the halved E8M0 scale applied in
 * the same order as the scalar kernel. */
AVX2 float cw_dot_mxfp4_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_mxfp4 *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    const __m256i tab = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK; b++) {
        __m256i q = _mm256_shuffle_epi8(tab, nibbles32(w[b].qs));
        __m256i s = dot_s8(q, _mm256_loadu_si256((const __m256i *)x[b].qs));
        acc = cw_comb1(acc, h2f(x[b].d), cw_e8m0_half(w[b].e), hsum_i32(s));
    }
    return acc;
}

/* ---- K-quants against Q8_K ---------------------------------------------- */

AVX2 static inline __m256i scale2(int lo, int hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)lo)),
                                   _mm_set1_epi16((short)hi), 1);
}

/* Unpacks the scales (OUT: sc) and returns Σ_s min_s·(bsum_2s + bsum_2s+1). */
AVX2 static inline int32_t k4_scales_summ(const uint8_t *packed, const int16_t *bsums, uint8_t sc[8])
{
    uint8_t mn[8];
    cw_k4_unpack(packed, sc, mn);
    __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    __m128i pairs = _mm_hadd_epi16(b0, b1); /* |pair| <= 4064: no overflow */
    __m128i m16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn));
    __m128i p = _mm_madd_epi16(pairs, m16);
    p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 1));
    return _mm_cvtsi128_si32(p);
}

AVX2 float cw_dot_q4_k_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q4_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    const __m256i m4 = _mm256_set1_epi8(15);
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        uint8_t sc[8];
        int32_t summ = k4_scales_summ(w[b].scales, x[b].bsums, sc);
        __m256i vs = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(x[b].qs + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x[b].qs + 64 * c + 32)));
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16((short)sc[2 * c]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16((short)sc[2 * c + 1]));
            vs = _mm256_add_epi32(vs, _mm256_add_epi32(p0, p1));
        }
        acc = cw_comb_min(acc, x[b].d, h2f(w[b].d), h2f(w[b].dmin), hsum_i32(vs), summ);
    }
    return acc;
}

AVX2 float cw_dot_q5_k_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q5_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        uint8_t sc[8];
        int32_t summ = k4_scales_summ(w[b].scales, x[b].bsums, sc);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)w[b].qh);
        __m256i vs = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            __m256i mlo = _mm256_set1_epi8((char)(1 << (2 * c)));
            __m256i mhi = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
            __m256i hlo = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, mlo), mlo), b4);
            __m256i hhi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, mhi), mhi), b4);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), hlo);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hhi);
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(x[b].qs + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x[b].qs + 64 * c + 32)));
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16((short)sc[2 * c]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16((short)sc[2 * c + 1]));
            vs = _mm256_add_epi32(vs, _mm256_add_epi32(p0, p1));
        }
        acc = cw_comb_min(acc, x[b].d, h2f(w[b].d), h2f(w[b].dmin), hsum_i32(vs), summ);
    }
    return acc;
}

/* Q6_K: the unsigned 6-bit values q+32 are multiplied (maddubs needs an
 * unsigned side) and 32·Σ scale·bsum is taken off at the end: still exact. */
AVX2 float cw_dot_q6_k_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_q6_k *w = w_row;
    const struct cw_block_q8_k *x = xq;
    const __m256i m4 = _mm256_set1_epi8(15);
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        const int8_t *sc = w[b].scales;
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[b].bsums));
        __m256i vs = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8((char)0xc0)), 2));
            for (int g = 0; g < 4; g++) {
                const int8_t *a = x[b].qs + 128 * h + 32 * g;
                __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)a));
                int k = 8 * h + 2 * g;
                vs = _mm256_add_epi32(vs, _mm256_madd_epi16(p, scale2(sc[k], sc[k + 1])));
            }
        }
        acc = cw_comb1(acc, x[b].d, h2f(w[b].d), hsum_i32(vs));
    }
    return acc;
}

AVX2 float cw_dot_iq4_xs_avx2(int64_t n, const void *w_row, const void *xq)
{
    const struct cw_block_iq4_xs *w = w_row;
    const struct cw_block_q8_k *x = xq;
    const __m256i tab = iq4_table(), m4 = _mm256_set1_epi8(15);
    float acc = 0;
    for (int64_t b = 0; b < n / CW_QK_K; b++) {
        __m256i vs = _mm256_setzero_si256();
        for (int s = 0; s < 8; s += 2) {
            int ls[2];
            for (int i = 0; i < 2; i++)
                ls[i] = (((w[b].scales_l[(s + i) / 2] >> (4 * ((s + i) % 2))) & 15) |
                         (((w[b].scales_h >> (2 * (s + i))) & 3) << 4)) - 32;
            __m256i q = _mm256_loadu_si256((const __m256i *)(w[b].qs + 16 * s));
            __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, m4));
            __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            const int8_t *a = x[b].qs + 32 * s;
            __m256i d0 = dot_s8(lo, load2x128(a, a + 32));
            __m256i d1 = dot_s8(hi, load2x128(a + 16, a + 48));
            __m256i sv = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(ls[0])),
                                                 _mm_set1_epi32(ls[1]), 1);
            vs = _mm256_add_epi32(vs, _mm256_mullo_epi32(_mm256_add_epi32(d0, d1), sv));
        }
        acc = cw_comb1(acc, x[b].d, h2f(w[b].d), hsum_i32(vs));
    }
    return acc;
}

#endif

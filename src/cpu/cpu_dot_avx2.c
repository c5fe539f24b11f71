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
#if defined(__x86_64__) || defined(__i386__)

#define X86_ATTR __attribute__((target("avx2,fma,f16c")))
#define AVX2 X86_ATTR

#include "cpu/cpu_simd_x86.h"

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

/* 16 packed nibbles -> 32 bytes: low nibbles first, then high (the legacy
 * element order). */
AVX2 static inline __m256i nibbles32(const uint8_t *q)
{
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

AVX2 static inline __m256i iq4_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)cw_iq4nl_values);
    return _mm256_broadcastsi128_si256(t);
}

AVX2 static inline __m256i fp4_table(void)
{
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3,
                            4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

/* E8M0 halved (cw_e8m0_half) of the byte at offset 0 of eight blocks. */
AVX2 static inline __m256 e8m0x8(const void *p, int stride)
{
    __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
    __m256i e = _mm256_and_si256(_mm256_i32gather_epi32((const int *)p, off, 1), _mm256_set1_epi32(0xff));
    __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i den = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, den, small));
}

enum leg { LEG_Q8_0, LEG_Q4_0, LEG_IQ4_NL, LEG_MXFP4 };

/* 8 x i32 partial sums of one block's integer dot product. */
AVX2 __attribute__((always_inline)) static inline __m256i leg_block(enum leg k, const uint8_t *blk,
                                                                    const int8_t *a, __m256i tab)
{
    __m256i q;
    switch (k) {
    case LEG_Q8_0:
        q = _mm256_loadu_si256((const __m256i *)(blk + 2));
        break;
    case LEG_Q4_0:
        q = _mm256_sub_epi8(nibbles32(blk + 2), _mm256_set1_epi8(8));
        break;
    case LEG_IQ4_NL:
        q = _mm256_shuffle_epi8(tab, nibbles32(blk + 2));
        break;
    default: /* MXFP4 */
        q = _mm256_shuffle_epi8(tab, nibbles32(blk + 1));
        break;
    }
    return dot_s8(q, _mm256_loadu_si256((const __m256i *)a));
}

/* Groups of eight blocks: eight integer sums reduced together, then lane j
 * of the float accumulator takes block 8g+j, with the same float steps as
 * cw_comb1 (d_w·d_x, times the sum, added). The tail goes block by block
 * into the same lanes, as the scalar kernel does. */
AVX2 __attribute__((always_inline)) static inline float leg_dot(enum leg k, int bb, int64_t n,
                                                                const void *w_row, const void *xq)
{
    const uint8_t *w = w_row;
    const struct cw_block_q8_0 *x = xq;
    const int64_t nb = n / CW_QK;
    const __m256i tab = k == LEG_MXFP4 ? fp4_table() : iq4_table();
    __m256 accv = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256i s[8];
        for (int j = 0; j < 8; j++)
            s[j] = leg_block(k, w + (b + j) * bb, x[b + j].qs, tab);
        __m256 sumf = _mm256_cvtepi32_ps(hsum8x8(s));
        __m256 dx = f16x8(&x[b].d, (int)sizeof(struct cw_block_q8_0));
        __m256 dd = k == LEG_MXFP4 ? _mm256_mul_ps(dx, e8m0x8(w + b * bb, bb))
                                   : _mm256_mul_ps(f16x8(w + b * bb, bb), dx);
        accv = _mm256_add_ps(accv, _mm256_mul_ps(dd, sumf));
    }
    float acc[8];
    _mm256_storeu_ps(acc, accv);
    for (; b < nb; b++) {
        const uint8_t *blk = w + b * bb;
        int32_t si = hsum_i32(leg_block(k, blk, x[b].qs, tab));
        if (k == LEG_MXFP4) {
            acc[b & 7] = cw_comb1(acc[b & 7], h2f(x[b].d), cw_e8m0_half(blk[0]), si);
        } else {
            cw_f16 dw;
            memcpy(&dw, blk, 2);
            acc[b & 7] = cw_comb1(acc[b & 7], h2f(dw), h2f(x[b].d), si);
        }
    }
    return cw_reduce8(acc);
}

AVX2 float cw_dot_q8_0_avx2(int64_t n, const void *w_row, const void *xq)
{
    return leg_dot(LEG_Q8_0, sizeof(struct cw_block_q8_0), n, w_row, xq);
}

AVX2 float cw_dot_q4_0_avx2(int64_t n, const void *w_row, const void *xq)
{
    return leg_dot(LEG_Q4_0, sizeof(struct cw_block_q4_0), n, w_row, xq);
}

AVX2 float cw_dot_iq4_nl_avx2(int64_t n, const void *w_row, const void *xq)
{
    return leg_dot(LEG_IQ4_NL, sizeof(struct cw_block_iq4_nl), n, w_row, xq);
}

AVX2 float cw_dot_mxfp4_avx2(int64_t n, const void *w_row, const void *xq)
{
    return leg_dot(LEG_MXFP4, sizeof(struct cw_block_mxfp4), n, w_row, xq);
}

/* ---- K-quants against Q8_K ---------------------------------------------- */

/* Integer parts of one Q4_K super-block, or Q5_K with its high bits qhp,
 * against nt rows' Q8_K blocks x[t]: s[t][j] (8 x i32 partials) and sm[t][j]
 * (the min sums). */
AVX2 __attribute__((always_inline)) static inline void
q45k_block(const uint8_t *scales, const uint8_t *qs, const uint8_t *qhp,
           const struct cw_block_q8_k *const *x, int nt, int j, __m256i (*s)[8], int32_t (*sm)[8])
{
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256i sc16, vs[KQ_NT];
    __m128i m16;
    k4_scales(scales, &sc16, &m16);
    for (int t = 0; t < nt; t++) {
        sm[t][j] = k4_summ(m16, x[t]->bsums);
        vs[t] = _mm256_setzero_si256();
    }
    const __m256i qh = qhp ? _mm256_loadu_si256((const __m256i *)qhp) : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qhp) {
            __m256i mlo = _mm256_set1_epi8((char)(1 << (2 * c)));
            __m256i mhi = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
            const __m256i hlo = _mm256_cmpeq_epi8(_mm256_and_si256(qh, mlo), mlo);
            const __m256i hhi = _mm256_cmpeq_epi8(_mm256_and_si256(qh, mhi), mhi);
            lo = _mm256_or_si256(lo, _mm256_and_si256(hlo, b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(hhi, b4));
        }
        const __m256i s0 = _mm256_shuffle_epi8(sc16, pick16(2 * c, 2 * c));
        const __m256i s1 = _mm256_shuffle_epi8(sc16, pick16(2 * c + 1, 2 * c + 1));
        for (int t = 0; t < nt; t++) {
            const int8_t *a = x[t]->qs + 64 * c;
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 32)));
            vs[t] = _mm256_add_epi32(vs[t], _mm256_add_epi32(_mm256_madd_epi16(p0, s0),
                                                             _mm256_madd_epi16(p1, s1)));
        }
    }
    for (int t = 0; t < nt; t++)
        s[t][j] = vs[t];
}

/* Q6_K: the unsigned 6-bit values q+32 are multiplied (maddubs needs an
 * unsigned side) and 32·Σ scale·bsum is taken off: still exact. */
AVX2 __attribute__((always_inline)) static inline void
q6k_block(const struct cw_block_q6_k *w, const struct cw_block_q8_k *const *x, int nt, int j,
          __m256i (*s)[8])
{
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
    __m256i vs[KQ_NT];
    for (int t = 0; t < nt; t++) {
        __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
        vs[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
    }
    for (int h = 0; h < 2; h++) {
        /* scales 8h..8h+7 as i16 in both lanes */
        __m256i sch = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11)
                        : _mm256_permute2x128_si256(sc16, sc16, 0x00);
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h));
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
        __m256i q[4], scv[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                               _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                               _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                               _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                               _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8((char)0xc0)), 2));
        for (int g = 0; g < 4; g++)
            scv[g] = _mm256_shuffle_epi8(sch, pick16(2 * g, 2 * g + 1));
        for (int t = 0; t < nt; t++)
            for (int g = 0; g < 4; g++) {
                const int8_t *a = x[t]->qs + 128 * h + 32 * g;
                __m256i p = _mm256_maddubs_epi16(q[g], _mm256_loadu_si256((const __m256i *)a));
                vs[t] = _mm256_add_epi32(vs[t], _mm256_madd_epi16(p, scv[g]));
            }
    }
    for (int t = 0; t < nt; t++)
        s[t][j] = vs[t];
}

AVX2 __attribute__((always_inline)) static inline void
iq4xs_block(const struct cw_block_iq4_xs *w, const struct cw_block_q8_k *const *x, int nt, int j,
            __m256i (*s)[8])
{
    const __m256i tab = iq4_table(), m4 = _mm256_set1_epi8(15);
    __m256i vs[KQ_NT];
    for (int t = 0; t < nt; t++)
        vs[t] = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; sb += 2) {
        int ls[2];
        for (int i = 0; i < 2; i++)
            ls[i] = (((w->scales_l[(sb + i) / 2] >> (4 * ((sb + i) % 2))) & 15) |
                     (((w->scales_h >> (2 * (sb + i))) & 3) << 4)) - 32;
        __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 16 * sb));
        __m256i lo = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, m4));
        __m256i hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
        __m256i sv = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(ls[0])),
                                             _mm_set1_epi32(ls[1]), 1);
        for (int t = 0; t < nt; t++) {
            const int8_t *a = x[t]->qs + 32 * sb;
            __m256i d0 = dot_s8(lo, load2x128(a, a + 32));
            __m256i d1 = dot_s8(hi, load2x128(a + 16, a + 48));
            vs[t] = _mm256_add_epi32(vs[t], _mm256_mullo_epi32(_mm256_add_epi32(d0, d1), sv));
        }
    }
    for (int t = 0; t < nt; t++)
        s[t][j] = vs[t];
}

/* One super-block against nt rows' blocks x[t], into s[t][j] and sm[t][j]
 * (0 for the types without mins). */
AVX2 __attribute__((always_inline)) static inline void
kq_block(enum kq k, const uint8_t *blk, const struct cw_block_q8_k *const *x, int nt, int j,
         __m256i (*s)[8], int32_t (*sm)[8])
{
    switch (k) {
    case KQ_Q4_K: {
        const struct cw_block_q4_k *w = (const struct cw_block_q4_k *)blk;
        q45k_block(w->scales, w->qs, NULL, x, nt, j, s, sm);
        return;
    }
    case KQ_Q5_K: {
        const struct cw_block_q5_k *w = (const struct cw_block_q5_k *)blk;
        q45k_block(w->scales, w->qs, w->qh, x, nt, j, s, sm);
        return;
    }
    case KQ_Q6_K:
        q6k_block((const struct cw_block_q6_k *)blk, x, nt, j, s);
        break;
    default:
        iq4xs_block((const struct cw_block_iq4_xs *)blk, x, nt, j, s);
        break;
    }
    for (int t = 0; t < nt; t++)
        sm[t][j] = 0;
}

#include "cpu/cpu_dot_kq.h"

KQ_DOT1(q4_k, avx2, KQ_Q4_K, struct cw_block_q4_k, offsetof(struct cw_block_q4_k, dmin))
KQ_DOTN(4, q4_k, avx2, KQ_Q4_K, struct cw_block_q4_k, offsetof(struct cw_block_q4_k, dmin))
KQ_DOT1(q5_k, avx2, KQ_Q5_K, struct cw_block_q5_k, offsetof(struct cw_block_q5_k, dmin))
KQ_DOTN(4, q5_k, avx2, KQ_Q5_K, struct cw_block_q5_k, offsetof(struct cw_block_q5_k, dmin))
KQ_DOT1(q6_k, avx2, KQ_Q6_K, struct cw_block_q6_k, -1)
KQ_DOTN(4, q6_k, avx2, KQ_Q6_K, struct cw_block_q6_k, -1)
KQ_DOT1(iq4_xs, avx2, KQ_IQ4_XS, struct cw_block_iq4_xs, -1)
KQ_DOTN(4, iq4_xs, avx2, KQ_IQ4_XS, struct cw_block_iq4_xs, -1)

#endif

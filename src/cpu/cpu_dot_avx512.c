/* cpu_dot_avx512.c — AVX-512 (F, BW, VL, VNNI) vec_dot kernels for Q4_K and
 * Q6_K, the types that carry almost all of a q4_k_m file's bytes: one row,
 * and 4 or 8 prompt rows a pass over a weight row.
 *
 * A 512-bit register holds two of the AVX2 kernels' 32-value groups: the
 * weights' u8 x activations' s8 pair products (maddubs, exact for these
 * ranges) are multiplied by their sub-block scales and summed into i32
 * lanes by one vpdpwssd, where AVX2 takes a madd and an add for each half.
 * The integer sums are exact either way, so the same float steps
 * (cpu_dot_kq.h) give the scalar kernels' bits. Compiled for the target by
 * attribute; cpu_gemv.c calls these only after a run-time CPU check. */
#if defined(__x86_64__) || defined(__i386__)

#define X86_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
/* eight prompt rows a pass: 32 registers hold their accumulators */
#define KQ_NT 8

#include "cpu/cpu_simd_x86.h"

/* pshufb mask broadcasting 16-bit element lo in the low 256 bits and hi in
 * the high 256 bits of a register holding 8 i16 in each 128-bit lane. */
X86_ATTR static inline __m512i pick16x2(int lo, int hi)
{
    const __m256i l = _mm256_set1_epi16((short)(0x0100 + 0x0202 * lo));
    const __m256i h = _mm256_set1_epi16((short)(0x0100 + 0x0202 * hi));
    return _mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1);
}

/* The two halves of a 16 x i32 register added: 8 x i32 partials. */
X86_ATTR static inline __m256i fold512(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* Integer parts of one Q4_K super-block against nt rows' Q8_K blocks x[t]:
 * s[t][j] (8 x i32 partials) and sm[t][j] (the min sums). 32 packed bytes
 * give a register of 64 values: the low nibbles (sub-block 2c) below, the
 * high ones (2c+1) above, as x's 64 bytes lie. */
X86_ATTR __attribute__((always_inline)) static inline void
q4k_block(const struct cw_block_q4_k *w, const struct cw_block_q8_k *const *x, int nt, int j,
          __m256i (*s)[8], int32_t (*sm)[8])
{
    const __m512i m4 = _mm512_set1_epi8(15);
    __m256i sc16;
    __m128i m16;
    k4_scales(w->scales, &sc16, &m16);
    const __m512i sc = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sc16));
    __m512i acc[KQ_NT];
    for (int t = 0; t < nt; t++) {
        sm[t][j] = k4_summ(m16, x[t]->bsums);
        acc[t] = _mm512_setzero_si512();
    }
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * c));
        const __m512i q2 = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
        const __m512i scv = _mm512_shuffle_epi8(sc, pick16x2(2 * c, 2 * c + 1));
        for (int t = 0; t < nt; t++) {
            __m512i p = _mm512_maddubs_epi16(q2, _mm512_loadu_si512(x[t]->qs + 64 * c));
            acc[t] = _mm512_dpwssd_epi32(acc[t], p, scv);
        }
    }
    for (int t = 0; t < nt; t++)
        s[t][j] = fold512(acc[t]);
}

/* Q6_K: as the AVX2 kernel, the unsigned values q+32 multiplied and
 * 32·Σ scale·bsum taken off. A register holds 64 values of a half: groups
 * g and g+1 (sub-blocks 8h+4k .. 8h+4k+3, one per 128-bit lane); the high
 * bits of both come from the same 32 qh bytes, shifted per half. */
X86_ATTR __attribute__((always_inline)) static inline void
q6k_block(const struct cw_block_q6_k *w, const struct cw_block_q8_k *const *x, int nt, int j,
          __m256i (*s)[8])
{
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w->scales));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    /* per 256-bit half, the qh shift of groups (0, 1) and of groups (2, 3) */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    /* each 16-bit element: the index of its 128-bit lane */
    const __m512i lane = _mm512_set_epi64(0x0003000300030003, 0x0003000300030003,
                                          0x0002000200020002, 0x0002000200020002,
                                          0x0001000100010001, 0x0001000100010001, 0, 0);
    __m512i acc[KQ_NT];
    __m256i corr[KQ_NT];
    for (int t = 0; t < nt; t++) {
        corr[t] = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)x[t]->bsums));
        acc[t] = _mm512_setzero_si512();
    }
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(w->ql + 64 * h);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(w->qh + 32 * h)));
        const __m512i q01 = _mm512_or_si512(
            _mm512_and_si512(ql, m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4));
        const __m512i q23 = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4));
        /* lane i of the register for groups (2k, 2k+1): scale 8h + 4k + i */
        const __m512i s01 =
            _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16((short)(8 * h)), lane), sc);
        const __m512i s23 = _mm512_permutexvar_epi16(
            _mm512_add_epi16(_mm512_set1_epi16((short)(8 * h + 4)), lane), sc);
        for (int t = 0; t < nt; t++) {
            const int8_t *a = x[t]->qs + 128 * h;
            __m512i p01 = _mm512_maddubs_epi16(q01, _mm512_loadu_si512(a));
            __m512i p23 = _mm512_maddubs_epi16(q23, _mm512_loadu_si512(a + 64));
            acc[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc[t], p01, s01), p23, s23);
        }
    }
    for (int t = 0; t < nt; t++)
        s[t][j] = _mm256_sub_epi32(fold512(acc[t]), _mm256_slli_epi32(corr[t], 5));
}

/* One super-block against nt rows' blocks x[t] (Q4_K and Q6_K only: the
 * other types stay on their AVX2 kernels). */
X86_ATTR __attribute__((always_inline)) static inline void
kq_block(enum kq k, const uint8_t *blk, const struct cw_block_q8_k *const *x, int nt, int j,
         __m256i (*s)[8], int32_t (*sm)[8])
{
    if (k == KQ_Q4_K) {
        q4k_block((const struct cw_block_q4_k *)blk, x, nt, j, s, sm);
        return;
    }
    q6k_block((const struct cw_block_q6_k *)blk, x, nt, j, s);
    for (int t = 0; t < nt; t++)
        sm[t][j] = 0;
}

#include "cpu/cpu_dot_kq.h"

KQ_DOT1(q4_k, avx512, KQ_Q4_K, struct cw_block_q4_k, offsetof(struct cw_block_q4_k, dmin))
KQ_DOTN(4, q4_k, avx512, KQ_Q4_K, struct cw_block_q4_k, offsetof(struct cw_block_q4_k, dmin))
KQ_DOTN(8, q4_k, avx512, KQ_Q4_K, struct cw_block_q4_k, offsetof(struct cw_block_q4_k, dmin))
KQ_DOT1(q6_k, avx512, KQ_Q6_K, struct cw_block_q6_k, -1)
KQ_DOTN(4, q6_k, avx512, KQ_Q6_K, struct cw_block_q6_k, -1)
KQ_DOTN(8, q6_k, avx512, KQ_Q6_K, struct cw_block_q6_k, -1)

#endif

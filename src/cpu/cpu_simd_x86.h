/* cpu_simd_x86.h — internal to cpu/: the x86 SIMD helpers that the AVX2 and
 * AVX-512 kernel files (products, attention, DeltaNet) share. Each includer
 * defines X86_ATTR (its target attribute) first, so every helper here is
 * compiled for that target and inlines into its kernels. */
#ifndef CW_CPU_SIMD_X86_H
#define CW_CPU_SIMD_X86_H

#ifndef X86_ATTR
#error "define X86_ATTR (the includer's target attribute) before cpu_simd_x86.h"
#endif

#include <immintrin.h>
#include <stddef.h>

#include "cpu/cpu_dot.h"

X86_ATTR static inline int32_t hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

X86_ATTR static inline float h2f(cw_f16 h)
{
    return _cvtsh_ss(h);
}

/* r[c] = column c of the 8 x 8 block whose rows are r[0..7]. */
X86_ATTR static inline void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

/* Lane j = the sum of all lanes of v[j]: eight blocks' totals at once. */
X86_ATTR static inline __m256i hsum8x8(const __m256i v[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* The f16 at byte 0 of eight blocks `stride` bytes apart (reads 4 bytes of
 * each; every block is longer than that). */
X86_ATTR static inline __m256 f16x8(const void *p, int stride)
{
    __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
    __m256i v = _mm256_and_si256(_mm256_i32gather_epi32((const int *)p, off, 1), _mm256_set1_epi32(0xffff));
    v = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(v));
}

/* Up to KQ_NT activation rows share one pass over a weight row (the
 * multi-row kernels, for prompts): each super-block's weights are unpacked
 * once and multiplied into every row's integer sums, which are exact, and
 * each row then takes the single-row kernel's float steps. The single-row
 * kernels are this code with one row. An includer may raise KQ_NT. */
#ifndef KQ_NT
#define KQ_NT 4
#endif

/* pshufb mask broadcasting 16-bit element lo (low 128-bit lane) and hi
 * (high lane) of a register that holds 8 i16 in both lanes. */
X86_ATTR static inline __m256i pick16(int lo, int hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)(0x0100 + 0x0202 * lo))),
                                   _mm_set1_epi16((short)(0x0100 + 0x0202 * hi)), 1);
}

/* The eight 6-bit scales as 8 i16 in both lanes (sc16) and the mins as 8
 * i16 (m16). */
X86_ATTR static inline void k4_scales(const uint8_t *packed, __m256i *sc16, __m128i *m16)
{
    uint8_t sm[16];
    cw_k4_unpack(packed, sm, sm + 8);
    __m128i v = _mm_loadu_si128((const __m128i *)sm);
    *sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v));
    *m16 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
}

/* Σ_s min_s·(bsum_2s + bsum_2s+1). */
X86_ATTR static inline int32_t k4_summ(__m128i m16, const int16_t *bsums)
{
    __m128i b0 = _mm_loadu_si128((const __m128i *)bsums);
    __m128i b1 = _mm_loadu_si128((const __m128i *)(bsums + 8));
    __m128i pairs = _mm_hadd_epi16(b0, b1); /* |pair| <= 4064: no overflow */
    __m128i p = _mm_madd_epi16(pairs, m16);
    p = _mm_add_epi32(p, _mm_unpackhi_epi64(p, p));
    p = _mm_add_epi32(p, _mm_shuffle_epi32(p, 1));
    return _mm_cvtsi128_si32(p);
}

enum kq { KQ_Q4_K, KQ_Q5_K, KQ_Q6_K, KQ_IQ4_XS };

#endif

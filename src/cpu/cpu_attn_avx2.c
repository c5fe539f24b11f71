/* cpu_attn_avx2.c — the attention core's two loops over the f16 cache with
 * AVX2 (see cpu_attn.h): the same float operations in the same order as
 * the scalar core, so the same bits.
 *
 * Scores: eight cache rows a register, lane j for row p+j; eight rows'
 * values at eight dimensions are loaded and transposed, so each lane still
 * adds q[i]·k[i] for i = 0, 1, ... in turn (mul then add, no FMA). Values:
 * o[i] += w_p·v_p[i] for p = 0, 1, ... with eight dimensions a register
 * and 64 a pass. f16 -> f32 (vcvtph2ps) is exact, as kv_f32 is. Compiled
 * for the target by attribute; cpu_attn.c calls these only after a
 * run-time CPU check. */
#if defined(__x86_64__) || defined(__i386__)

#define X86_ATTR __attribute__((target("avx2,fma,f16c")))
#define AVX2 X86_ATTR

#include "cpu/cpu_attn.h"
#include "cpu/cpu_simd_x86.h"

AVX2 static inline __m256 ld8h(const cw_f16 *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AVX2 int64_t cw_attn_scores_avx2(const float *q, const cw_f16 *k, int64_t row, int hd, int64_t n,
                                 float scale, float *scores)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t p = 0;
    for (; p + 8 <= n; p += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int i0 = 0; i0 < hd; i0 += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = ld8h(k + (p + j) * row + i0);
            transpose8(r);
            for (int c = 0; c < 8; c++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(q[i0 + c]), r[c]));
        }
        _mm256_storeu_ps(scores + p, _mm256_mul_ps(acc, vs));
    }
    return p;
}

AVX2 void cw_attn_values_avx2(const float *w, const cw_f16 *v, int64_t row, int hd, int64_t n,
                              float *o)
{
    for (int i0 = 0; i0 < hd; i0 += 64) {
        __m256 acc[8];
        for (int c = 0; c < 8; c++)
            acc[c] = _mm256_setzero_ps();
        for (int64_t p = 0; p < n; p++) {
            const __m256 wp = _mm256_set1_ps(w[p]);
            const cw_f16 *vr = v + p * row + i0;
            for (int c = 0; c < 8; c++)
                acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(wp, ld8h(vr + 8 * c)));
        }
        for (int c = 0; c < 8; c++)
            _mm256_storeu_ps(o + i0 + 8 * c, acc[c]);
    }
}

#endif

/* cpu_deltanet_avx2.c — one v-head's delta rule (cpu_deltanet.h) with AVX2:
 * the same float operations in the same order as the scalar loop, so the
 * same bits.
 *
 * The state's rows j (key index i contiguous) go eight at a time: each 8 x
 * 8 block is loaded, updated elementwise (the decay, then k[i]·δ_j), stored,
 * and transposed, so that lane j adds S[j][i]·k[i] (then S[j][i]·q[i]) for
 * i = 0, 1, ... in turn, as the scalar row does (mul then add, no FMA).
 * Compiled for the target by attribute; cpu_deltanet.c calls this only
 * after a run-time CPU check. */
#if defined(__x86_64__) || defined(__i386__)

#define X86_ATTR __attribute__((target("avx2,fma,f16c")))
#define AVX2 X86_ATTR

#include "cpu/cpu_deltanet.h"
#include "cpu/cpu_simd_x86.h"

AVX2 void cw_deltanet_head_avx2(float *S, const float *q, const float *k, const float *v,
                                float decay, float b, float scale, int dk, int dv, float *o)
{
    const __m256 vd = _mm256_set1_ps(decay), vb = _mm256_set1_ps(b);
    for (int j0 = 0; j0 < dv; j0 += 8) {
        float *S0 = S + (int64_t)j0 * dk;
        /* S ← e^g S and r_j = Σ_i S[j][i]·k[i] */
        __m256 r = _mm256_setzero_ps();
        for (int i0 = 0; i0 < dk; i0 += 8) {
            __m256 m[8];
            for (int j = 0; j < 8; j++) {
                m[j] = _mm256_mul_ps(_mm256_loadu_ps(S0 + (int64_t)j * dk + i0), vd);
                _mm256_storeu_ps(S0 + (int64_t)j * dk + i0, m[j]);
            }
            transpose8(m);
            for (int c = 0; c < 8; c++)
                r = _mm256_add_ps(r, _mm256_mul_ps(m[c], _mm256_set1_ps(k[i0 + c])));
        }
        /* δ_j = (v_j − r_j)·β; S[j] += k δ_j; o_j = Σ_i S[j][i]·q[i] */
        float delta[8];
        _mm256_storeu_ps(delta, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j0), r), vb));
        __m256 acc = _mm256_setzero_ps();
        for (int i0 = 0; i0 < dk; i0 += 8) {
            const __m256 kv = _mm256_loadu_ps(k + i0);
            __m256 m[8];
            for (int j = 0; j < 8; j++) {
                float *Sj = S0 + (int64_t)j * dk + i0;
                m[j] = _mm256_add_ps(_mm256_loadu_ps(Sj),
                                     _mm256_mul_ps(kv, _mm256_set1_ps(delta[j])));
                _mm256_storeu_ps(Sj, m[j]);
            }
            transpose8(m);
            for (int c = 0; c < 8; c++)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(m[c], _mm256_set1_ps(q[i0 + c])));
        }
        _mm256_storeu_ps(o + j0, _mm256_mul_ps(acc, _mm256_set1_ps(scale)));
    }
}

#endif

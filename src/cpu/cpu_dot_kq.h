/* cpu_dot_kq.h — internal to cpu/: the K-quant dot products' driver over
 * the includer's kq_block (one super-block against KQ_NT or fewer rows, its
 * integer sums exact), compiled for the includer's X86_ATTR target. The
 * float steps are here once, so every ISA level gives the scalar kernels'
 * bits. Include after cpu_simd_x86.h and the includer's kq_block. */
#ifndef CW_CPU_DOT_KQ_H
#define CW_CPU_DOT_KQ_H

/* As leg_dot (cpu_dot_avx2.c), for super-blocks and nt activation rows
 * xq[t] at once: per row, eight super-blocks' integer sums reduced
 * together, lane j of the row's float accumulator taking super-block 8g+j
 * with the float steps of cw_comb1 / cw_comb_min; the tail block by block
 * into the same lanes.
 * doff / mofs: byte offsets of the f16 d and dmin (mofs < 0: no mins). */
X86_ATTR __attribute__((always_inline)) static inline void
kq_dot(enum kq k, int bb, int doff, int mofs, int64_t n, const void *w_row,
       const void *const *xq, int nt, float *out)
{
    const uint8_t *w = w_row;
    const struct cw_block_q8_k *xr[KQ_NT];
    for (int t = 0; t < nt; t++)
        xr[t] = xq[t];
    const int64_t nb = n / CW_QK_K;
    const __m256i xoff = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32((int)sizeof(struct cw_block_q8_k)));
    __m256 accv[KQ_NT];
    for (int t = 0; t < nt; t++)
        accv[t] = _mm256_setzero_ps();
    __m256i s[KQ_NT][8];
    int32_t sm[KQ_NT][8];
    const struct cw_block_q8_k *xb[KQ_NT];
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        for (int j = 0; j < 8; j++) {
            for (int t = 0; t < nt; t++)
                xb[t] = &xr[t][b + j];
            kq_block(k, w + (b + j) * bb, xb, nt, j, s, sm);
        }
        const __m256 dw = f16x8(w + b * bb + doff, bb);
        for (int t = 0; t < nt; t++) {
            __m256 sumf = _mm256_cvtepi32_ps(hsum8x8(s[t]));
            __m256 dx = _mm256_i32gather_ps(&xr[t][b].d, xoff, 1);
            __m256 v = _mm256_mul_ps(_mm256_mul_ps(dx, dw), sumf);
            if (mofs >= 0) {
                __m256 dm = _mm256_mul_ps(dx, f16x8(w + b * bb + mofs, bb));
                __m256i si = _mm256_loadu_si256((const __m256i *)sm[t]);
                __m256 u = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(si));
                v = _mm256_sub_ps(v, u);
            }
            accv[t] = _mm256_add_ps(accv[t], v);
        }
    }
    float acc[KQ_NT][8];
    for (int t = 0; t < nt; t++)
        _mm256_storeu_ps(acc[t], accv[t]);
    for (; b < nb; b++) {
        const uint8_t *blk = w + b * bb;
        for (int t = 0; t < nt; t++)
            xb[t] = &xr[t][b];
        kq_block(k, blk, xb, nt, 0, s, sm);
        cw_f16 d, dmin;
        memcpy(&d, blk + doff, 2);
        if (mofs >= 0)
            memcpy(&dmin, blk + mofs, 2);
        for (int t = 0; t < nt; t++) {
            int32_t si = hsum_i32(s[t][0]);
            if (mofs >= 0)
                acc[t][b & 7] = cw_comb_min(acc[t][b & 7], xr[t][b].d, h2f(d), h2f(dmin), si,
                                            sm[t][0]);
            else
                acc[t][b & 7] = cw_comb1(acc[t][b & 7], xr[t][b].d, h2f(d), si);
        }
    }
    for (int t = 0; t < nt; t++)
        out[t] = cw_reduce8(acc[t]);
}

/* The single-row kernel of a K-quant type at an ISA level,
 * cw_dot_<name>_<isa>, and its form for rows (<= KQ_NT) activation rows,
 * cw_dot<rows>_<name>_<isa>. */
#define KQ_DOT1(name, isa, k, T, mofs)                                                    \
    X86_ATTR float cw_dot_##name##_##isa(int64_t n, const void *w_row, const void *xq)    \
    {                                                                                     \
        float r;                                                                          \
        kq_dot(k, sizeof(T), offsetof(T, d), mofs, n, w_row, &xq, 1, &r);                 \
        return r;                                                                         \
    }
#define KQ_DOTN(rows, name, isa, k, T, mofs)                                              \
    X86_ATTR void cw_dot##rows##_##name##_##isa(int64_t n, const void *w_row,             \
                                                const void *const *xq, float *out)        \
    {                                                                                     \
        kq_dot(k, sizeof(T), offsetof(T, d), mofs, n, w_row, xq, rows, out);              \
    }

#endif

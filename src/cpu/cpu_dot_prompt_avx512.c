/* cpu_dot_prompt_avx512.c — the AVX-512 prompt kernels of Q4_K and Q6_K:
 * weight rows against activations in a layout of their own, which the
 * quantisers here write once for a product of several tokens.
 *
 * The row kernels (cpu_dot_avx512.c) multiply each sub-block's u8 x s8
 * pairs (maddubs) and then by its scale (vpdpwssd), load x unaligned, and
 * take the Q4_K min sums block by block. Here one vpdpbusd lane (Q6_K) or
 * lane pair (Q4_K) holds one sub-block's running sum: a super-block's
 * values are reordered so that register k of four holds 4 (Q6_K) or 8
 * values of every sub-block, the weights by permutes once a row and block
 * (for every token of the pass), the activations when quantised. Four
 * vpdpbusd a token are then scaled by one vpmulld; the Q4_K min sums of
 * eight blocks take two vpmaddwd against sub-block sums stored beside x, and
 * Q6_K's -32 is x's bsums times -32, stored beside x as the sums' start.
 * The integer sums are exact and the float steps are the row kernels'
 * (cpu_dot_kq.h), so each result has the bits of the scalar kernel on the
 * plain Q8_K row. Q4_K, 2048-wide rows, 8 tokens a pass, in cache: 28 -> 16
 * ns a row and token. */
#if defined(__x86_64__) || defined(__i386__)

#define X86_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define KQ_NT 8

#include "cpu/cpu_simd_x86.h"

/* The layout of a row of nb super-blocks (offsets from the row's start,
 * which must be 64-byte aligned; nb8: nb rounded up to a multiple of 8):
 *   qs    [nb][256]  block b's values, group k (values 8k..8k+7) of
 *                    sub-block s at byte 256b + 64k + 8s
 *   bsums [nb][16]   as in Q8_K              at 256nb
 *   d     [nb]       as in Q8_K              at 288nb
 *   msum  [nb8][8]   sub-block sums (bsum pairs) at 292nb: in the group of
 *                    blocks g..g+7 (g a multiple of 8), block g+j's sub-block
 *                    s at 8g + 16(s/2) + 2j + s%2 (vpmaddwd pairs s and s+1 of
 *                    one block; lane j of the sum is block g+j); 0 past nb
 * then zeros to a multiple of 64 bytes, so that rows in a buffer keep its
 * alignment. */
#define IL_BSUMS(nb) (256 * (nb))
#define IL_D(nb) (288 * (nb))
#define IL_MSUM(nb) (292 * (nb))
#define IL_NB8(nb) (((nb) + 7) / 8 * 8)

/* One Q8_K block of x[0..256), the bits of cw_quant_row_q8_k (gguf/): the
 * same float operations lane by lane (the scale from the first element of
 * the largest magnitude, -127/max, rounding by the same 1.5·2^23 addition,
 * values truncated to 8 bits as the scalar cast does). With the reorder
 * into a layout, 512 rows of 5120 on one thread: 7.7 -> 2.0 ms. */
X86_ATTR static void quant_block_q8_k(const float *x, struct cw_block_q8_k *y)
{
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512 v[16], amax = _mm512_setzero_ps();
    for (int i = 0; i < 16; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        /* a NaN second: max returns its second operand where one is NaN */
        amax = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v[i]), absm)),
                             amax);
    }
    const float am = _mm512_reduce_max_ps(amax);
    if (am == 0.0f) {
        memset(y, 0, sizeof *y);
        return;
    }
    float max = 0.0f;
    for (int i = 0; i < 16; i++) {
        const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v[i]), absm));
        const __mmask16 hit = _mm512_cmp_ps_mask(a, _mm512_set1_ps(am), _CMP_EQ_OQ);
        if (hit) {
            max = x[16 * i + __builtin_ctz(hit)];
            break;
        }
    }
    const float iscale = -127.f / max;
    for (int i = 0; i < 16; i++) {
        const __m512 f = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(iscale), v[i]),
                                       _mm512_set1_ps(12582912.f));
        __m512i q = _mm512_sub_epi32(
            _mm512_and_si512(_mm512_castps_si512(f), _mm512_set1_epi32(0x007fffff)),
            _mm512_set1_epi32(0x00400000));
        q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
        _mm_storeu_si128((__m128i *)(y->qs + 16 * i), _mm512_cvtepi32_epi8(q));
        /* the bsum of the values as stored (8 bits, sign-extended) */
        q = _mm512_srai_epi32(_mm512_slli_epi32(q, 24), 24);
        y->bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y->d = 1 / iscale;
}

size_t cw_q4_k_il_act_bytes(int64_t n)
{
    const int64_t nb = n / CW_QK_K;
    return ((size_t)(IL_MSUM(nb) + 16 * IL_NB8(nb)) + 63) & ~(size_t)63;
}

X86_ATTR void cw_q4_k_il_quantize(const float *x, void *xq, int64_t n)
{
    const int64_t nb = n / CW_QK_K;
    char *row = xq;
    int8_t *qs = (int8_t *)row;
    int16_t *bsums = (int16_t *)(row + IL_BSUMS(nb)), *msum = (int16_t *)(row + IL_MSUM(nb));
    float *d = (float *)(row + IL_D(nb));
    memset(msum, 0, cw_q4_k_il_act_bytes(n) - (size_t)IL_MSUM(nb));
    for (int64_t b = 0; b < nb; b++) {
        struct cw_block_q8_k blk;
        quant_block_q8_k(x + b * CW_QK_K, &blk); /* Q8_K is per block: the row's bits */
        d[b] = blk.d;
        memcpy(bsums + 16 * b, blk.bsums, sizeof blk.bsums);
        for (int s = 0; s < 8; s++)
            for (int k = 0; k < 4; k++)
                memcpy(qs + 256 * b + 64 * k + 8 * s, blk.qs + 32 * s + 8 * k, 8);
        const int64_t g = b - b % 8, j = b % 8;
        for (int s = 0; s < 8; s++)
            msum[8 * g + 16 * (s / 2) + 2 * j + s % 2] =
                (int16_t)(blk.bsums[2 * s] + blk.bsums[2 * s + 1]); /* |.| <= 4096 */
    }
}

/* Q6_K's layout of a row of nb super-blocks (64-byte aligned):
 *   qs    [nb][256]  block b's values, group k (values 4k..4k+3) of
 *                    sub-block s (16 values) at byte 256b + 64k + 4p, where
 *                    p = 4(s%4) + s/4 (the position il6_block's in-lane
 *                    transposes give it)
 *   c     [nb][16]   int32: -32 times the bsum of sub-block s, at p
 *   d     [nb]       as in Q8_K              at 320nb
 * then zeros to a multiple of 64 bytes. */
#define IL6_C(nb) (256 * (nb))
#define IL6_D(nb) (320 * (nb))

size_t cw_q6_k_il_act_bytes(int64_t n)
{
    return ((size_t)(324 * (n / CW_QK_K)) + 63) & ~(size_t)63;
}

X86_ATTR void cw_q6_k_il_quantize(const float *x, void *xq, int64_t n)
{
    const int64_t nb = n / CW_QK_K;
    char *row = xq;
    int8_t *qs = (int8_t *)row;
    int32_t *c = (int32_t *)(row + IL6_C(nb));
    float *d = (float *)(row + IL6_D(nb));
    memset(d + nb, 0, cw_q6_k_il_act_bytes(n) - (size_t)IL6_D(nb) - 4 * (size_t)nb);
    for (int64_t b = 0; b < nb; b++) {
        struct cw_block_q8_k blk;
        quant_block_q8_k(x + b * CW_QK_K, &blk);
        d[b] = blk.d;
        for (int sb = 0; sb < 16; sb++) {
            const int p = 4 * (sb % 4) + sb / 4;
            c[16 * b + p] = -32 * blk.bsums[sb];
            for (int k = 0; k < 4; k++)
                memcpy(qs + 256 * b + 64 * k + 4 * p, blk.qs + 16 * sb + 4 * k, 4);
        }
    }
}

X86_ATTR static inline __m256i fold512(__m512i v)
{
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

#define IL_NR 2 /* weight rows a pass, at most */

/* Block b's products of nr weight rows, their values ordered in tk[r] and
 * their sub-block scales in sc[r] (a lane each), and nt activation rows
 * (values at qs[t]): s[r][t][j] = the 8 x i32 partials of Σ scale·q·x,
 * each sum starting at 0 or, with start, at start[t]'s block b. Each x
 * register is loaded once for the nr rows, aligned: gcc folds an aligned
 * load into vpdpbusd or loads it again, where it spills an unaligned one to
 * the stack (two rows: 26 registers live; 6144-wide rows 53 -> 46 ns a row
 * and token). */
X86_ATTR __attribute__((always_inline)) static inline void
il_products(int nr, __m512i (*tk)[4], const __m512i *sc, const int8_t *const *qs,
            const int32_t *const *start, int64_t b, int nt, int j, __m256i (*s)[KQ_NT][8])
{
    __m512i acc[IL_NR][KQ_NT];
    for (int t = 0; t < nt; t++) {
        const __m512i c0 = start ? _mm512_load_si512(start[t] + 16 * b) : _mm512_setzero_si512();
        const __m512i x = _mm512_load_si512(qs[t] + 256 * b);
        for (int r = 0; r < nr; r++)
            acc[r][t] = _mm512_dpbusd_epi32(c0, tk[r][0], x);
    }
    for (int k = 1; k < 4; k++)
        for (int t = 0; t < nt; t++) {
            const __m512i x = _mm512_load_si512(qs[t] + 256 * b + 64 * k);
            for (int r = 0; r < nr; r++)
                acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], tk[r][k], x);
        }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            s[r][t][j] = fold512(_mm512_mullo_epi32(acc[r][t], sc[r]));
}

/* Super-block b of nr weight rows (nr <= IL_NR; row r at w[r]) against nt
 * activation rows (their values at qs[t], bsums at bsums[t]): s[r][t][j]
 * (8 x i32 partials of Σ scale·q·x). With bmins, also the block's min sums
 * sm[r][t][j] from the bsums; else row r's 8 mins go to mins[r][8j..8j+8). */
X86_ATTR __attribute__((always_inline)) static inline void
il_block(int nr, const struct cw_block_q4_k *const *w, int64_t b, const int8_t *const *qs,
         const int16_t *const *bsums, int nt, int j, int bmins, __m256i (*s)[KQ_NT][8],
         __m256i (*sm)[KQ_NT][8], uint8_t (*mins)[64])
{
    __m512i sc[IL_NR], tk[IL_NR][4];
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int r = 0; r < nr; r++) {
        const struct cw_block_q4_k *wb = &w[r][b];
        uint8_t scm[16];
        cw_k4_unpack(wb->scales, scm, scm + 8);
        const __m128i v = _mm_loadu_si128((const __m128i *)scm);
        /* the mins first: nothing of them stays live beside the products */
        if (bmins) {
            /* the mins twice each: vpmaddwd pairs bsums 2s and 2s+1 */
            const __m128i m8 = _mm_srli_si128(v, 8);
            const __m256i mw = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
            for (int t = 0; t < nt; t++)
                sm[r][t][j] = _mm256_madd_epi16(
                    mw, _mm256_loadu_si256((const __m256i *)(bsums[t] + 16 * b)));
        } else {
            _mm_storel_epi64((__m128i *)(mins[r] + 8 * j), _mm_srli_si128(v, 8));
        }
        /* qword s: scale s in both halves (the lane pair of sub-block s) */
        sc[r] = _mm512_cvtepu8_epi64(v);
        sc[r] = _mm512_or_si512(sc[r], _mm512_slli_epi64(sc[r], 32));
        /* 32 packed bytes hold sub-blocks 2c (low nibbles) and 2c+1; q01
         * takes the packed groups 0 and 1 of every pair, q23 groups 2 and
         * 3, and the unpacks put sub-block s's group k in qword s of tk[k] */
        const __m512i p0 = _mm512_loadu_si512(wb->qs), p1 = _mm512_loadu_si512(wb->qs + 64);
        const __m512i q01 =
            _mm512_permutex2var_epi64(p0, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), p1);
        const __m512i q23 =
            _mm512_permutex2var_epi64(p0, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), p1);
        const __m512i l01 = _mm512_and_si512(q01, m4);
        const __m512i h01 = _mm512_and_si512(_mm512_srli_epi16(q01, 4), m4);
        const __m512i l23 = _mm512_and_si512(q23, m4);
        const __m512i h23 = _mm512_and_si512(_mm512_srli_epi16(q23, 4), m4);
        tk[r][0] = _mm512_unpacklo_epi64(l01, h01);
        tk[r][1] = _mm512_unpackhi_epi64(l01, h01);
        tk[r][2] = _mm512_unpacklo_epi64(l23, h23);
        tk[r][3] = _mm512_unpackhi_epi64(l23, h23);
    }
    il_products(nr, tk, sc, qs, NULL, b, nt, j, s);
}

/* Super-block b of nr Q6_K weight rows against nt activation rows (values
 * at qs[t], -32·bsums at c[t]): s[r][t][j] (8 x i32 partials of
 * Σ scale·(q - 32)·x). */
X86_ATTR __attribute__((always_inline)) static inline void
il6_block(int nr, const struct cw_block_q6_k *const *w, int64_t b, const int8_t *const *qs,
          const int32_t *const *c, int nt, int j, __m256i (*s)[KQ_NT][8])
{
    __m512i sc[IL_NR], tk[IL_NR][4];
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    /* per 256-bit half, the qh shift of the values 0..63 and of 64..127 of a
     * half block */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    for (int r = 0; r < nr; r++) {
        const struct cw_block_q6_k *wb = &w[r][b];
        /* position p's scale: sub-block 4(p%4) + p/4 */
        sc[r] = _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)wb->scales)));
        /* q[m]: values 64m..64m+63 in order (sub-blocks 4m..4m+3, one a
         * 128-bit lane), as the row kernel builds them */
        __m512i q[4];
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(wb->ql + 64 * h);
            const __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(wb->qh + 32 * h)));
            q[2 * h] = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4));
            q[2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4));
        }
        /* 4 x 4 dword transposes in each 128-bit lane: dword k of lane l of
         * q[m] (sub-block 4m + l's group k) to dword m of lane l of tk[k] */
        const __m512i t0 = _mm512_unpacklo_epi32(q[0], q[1]);
        const __m512i t1 = _mm512_unpackhi_epi32(q[0], q[1]);
        const __m512i t2 = _mm512_unpacklo_epi32(q[2], q[3]);
        const __m512i t3 = _mm512_unpackhi_epi32(q[2], q[3]);
        tk[r][0] = _mm512_unpacklo_epi64(t0, t2);
        tk[r][1] = _mm512_unpackhi_epi64(t0, t2);
        tk[r][2] = _mm512_unpacklo_epi64(t1, t3);
        tk[r][3] = _mm512_unpackhi_epi64(t1, t3);
    }
    /* the sums start at -32·bsum: exact, and no correction after */
    il_products(nr, tk, sc, qs, c, b, nt, j, s);
}

/* A last group of up to IL_TAIL blocks goes block by block: per row and
 * token of 8, in cache, 512-wide q4_K rows 9.3 -> 6.1 ns (a masked group's
 * fixed costs; one token's float steps at a time cost more); a last group
 * of 4 (1024- and 5120-wide) or 7 (1792) the same or better masked. */
#define IL_TAIL 3

/* The f16 at byte 0 of the first k of eight blocks `stride` bytes apart;
 * the others 0 and not read (past a row's end). */
X86_ATTR static inline __m256 f16x8_first(const void *p, int stride, __mmask8 k)
{
    const __m256i off = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(stride));
    __m256i v = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), k, off, p, 1);
    v = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    v = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(v));
}

/* As kq_dot (cpu_dot_kq.h) for Q4_K (q6: Q6_K), for nr weight rows
 * row_bytes apart, on activation rows in the type's layout above:
 * out[r*nt + t]. Blocks go eight at a time, lane j of a row's float sums
 * taking block 8g + j with the float steps of cw_comb_min (cw_comb1); a
 * last group of fewer than eight adds into its lanes only, so that the
 * others keep their bits. One Q4_K activation row takes each block's min
 * sums from its bsums (the group's vpmaddwd costs more than it saves for
 * one). */
X86_ATTR __attribute__((always_inline)) static inline void
il_dot(int q6, int nr, int64_t n, const void *w_row, size_t row_bytes, const void *const *xq,
       int nt, float *out)
{
    const struct cw_block_q4_k *w[IL_NR];
    const struct cw_block_q6_k *w6[IL_NR];
    for (int r = 0; r < nr; r++) {
        w[r] = (const struct cw_block_q4_k *)((const char *)w_row + r * row_bytes);
        w6[r] = (const struct cw_block_q6_k *)((const char *)w_row + r * row_bytes);
    }
    const int64_t nb = n / CW_QK_K;
    const int bb = q6 ? (int)sizeof(struct cw_block_q6_k) : (int)sizeof(struct cw_block_q4_k);
    const int8_t *qs[KQ_NT];
    const int16_t *bsums[KQ_NT], *msum[KQ_NT];
    const int32_t *c[KQ_NT];
    const float *dx[KQ_NT];
    for (int t = 0; t < nt; t++) {
        const char *row = xq[t];
        qs[t] = (const int8_t *)row;
        bsums[t] = (const int16_t *)(row + IL_BSUMS(nb));
        msum[t] = (const int16_t *)(row + IL_MSUM(nb));
        c[t] = (const int32_t *)(row + IL6_C(nb));
        dx[t] = (const float *)(row + (q6 ? IL6_D(nb) : IL_D(nb)));
    }
    /* in memory: a group's products take 26 of the 32 registers */
    float acc[IL_NR][KQ_NT][8];
    for (int r = 0; r < nr; r++) /* only these: 512-wide, one token 27 -> 18.5 ns */
        memset(acc[r], 0, sizeof acc[r][0] * (size_t)nt);
    __m256i s[IL_NR][KQ_NT][8], sm[IL_NR][KQ_NT][8];
    const int gmins = !q6 && nt > 1;
    for (int64_t b = 0; b < nb; b += 8) {
        const int k = nb - b < 8 ? (int)(nb - b) : 8;
        if (k <= IL_TAIL && nt == 1) {
            /* a short last group of one token block by block */
            for (int j = 0; j < k; j++) {
                if (q6)
                    il6_block(nr, w6, b + j, qs, c, nt, 0, s);
                else
                    il_block(nr, w, b + j, qs, bsums, nt, 0, 1, s, sm, NULL);
                for (int r = 0; r < nr; r++) {
                    float *a = &acc[r][0][j];
                    const int32_t si = hsum_i32(s[r][0][0]);
                    if (q6)
                        *a = cw_comb1(*a, dx[0][b + j], h2f(w6[r][b + j].d), si);
                    else
                        *a = cw_comb_min(*a, dx[0][b + j], h2f(w[r][b + j].d),
                                         h2f(w[r][b + j].dmin), si, hsum_i32(sm[r][0][0]));
                }
            }
            break;
        }
        if (k <= IL_TAIL) {
            /* of several, block by block, the float steps with the tokens in
             * the lanes (the same operations on the same values) */
            for (int j = 0; j < k; j++) {
                if (q6)
                    il6_block(nr, w6, b + j, qs, c, nt, 0, s);
                else
                    il_block(nr, w, b + j, qs, bsums, nt, 0, 1, s, sm, NULL);
                float xd[8] = {0};
                for (int t = 0; t < nt; t++)
                    xd[t] = dx[t][b + j];
                const __m256 d = _mm256_loadu_ps(xd);
                for (int r = 0; r < nr; r++) {
                    __m256i sv[8], mv[8];
                    for (int t = 0; t < 8; t++) {
                        sv[t] = t < nt ? s[r][t][0] : _mm256_setzero_si256();
                        mv[t] = t < nt && !q6 ? sm[r][t][0] : _mm256_setzero_si256();
                    }
                    const float dw = h2f(q6 ? w6[r][b + j].d : w[r][b + j].d);
                    __m256 v = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(dw)),
                                             _mm256_cvtepi32_ps(hsum8x8(sv)));
                    if (!q6) {
                        const __m256 dm = _mm256_mul_ps(d, _mm256_set1_ps(h2f(w[r][b + j].dmin)));
                        v = _mm256_sub_ps(v, _mm256_mul_ps(dm, _mm256_cvtepi32_ps(hsum8x8(mv))));
                    }
                    float vt[8];
                    _mm256_storeu_ps(vt, v);
                    for (int t = 0; t < nt; t++)
                        acc[r][t][j] += vt[t];
                }
            }
            break;
        }
        const __mmask8 lanes = (__mmask8)((1u << k) - 1);
        uint8_t mins[IL_NR][64];
        for (int j = 0; j < k; j++) {
            if (q6)
                il6_block(nr, w6, b + j, qs, c, nt, j, s);
            else
                il_block(nr, w, b + j, qs, bsums, nt, j, !gmins, s, sm, mins);
        }
        /* a last group's lanes past it: defined values, added to nothing */
        for (int j = k; j < 8; j++)
            for (int r = 0; r < nr; r++) {
                memset(mins[r] + 8 * j, 0, 8);
                for (int t = 0; t < nt; t++)
                    s[r][t][j] = sm[r][t][j] = _mm256_setzero_si256();
            }
        for (int r = 0; r < nr; r++) {
            const __m256 dw = f16x8_first(q6 ? &w6[r][b].d : &w[r][b].d, bb, lanes);
            const __m256 dmw = q6 ? dw : f16x8_first(&w[r][b].dmin, bb, lanes);
            __m512i m0 = _mm512_setzero_si512(), m1 = m0;
            if (gmins) {
                /* u16 unit (block j, min pair p) at 4j + p -> 8p + j, msum's */
                const __m512i perm = _mm512_set_epi16(
                    31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2, 29, 25, 21, 17,
                    13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
                const __m512i mp = _mm512_permutexvar_epi16(perm, _mm512_loadu_si512(mins[r]));
                m0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mp));
                m1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mp, 1));
            }
            for (int t = 0; t < nt; t++) {
                __m256i si = _mm256_setzero_si256();
                if (q6) {
                    /* no mins */
                } else if (gmins) {
                    const int16_t *g = msum[t] + 8 * b;
                    si = fold512(
                        _mm512_add_epi32(_mm512_madd_epi16(m0, _mm512_loadu_si512(g)),
                                         _mm512_madd_epi16(m1, _mm512_loadu_si512(g + 32))));
                } else {
                    si = hsum8x8(sm[r][t]);
                }
                const __m256 sumf = _mm256_cvtepi32_ps(hsum8x8(s[r][t]));
                const __m256 d = _mm256_maskz_loadu_ps(lanes, dx[t] + b);
                __m256 v = _mm256_mul_ps(_mm256_mul_ps(d, dw), sumf);
                const __m256 u = _mm256_mul_ps(_mm256_mul_ps(d, dmw), _mm256_cvtepi32_ps(si));
                if (!q6)
                    v = _mm256_sub_ps(v, u);
                const __m256 a = _mm256_loadu_ps(acc[r][t]);
                _mm256_storeu_ps(acc[r][t], _mm256_mask_add_ps(a, lanes, a, v));
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++)
            out[r * nt + t] = cw_reduce8(acc[r][t]);
}

/* A type's kernels: one weight row against 1, 4 or 8 activation rows, and
 * two weight rows a pass against 4 or 8, where each x register serves both,
 * which halves the activations' reads (from L2 once 8 rows of them outgrow
 * L1: Q4_K, 6144-wide rows 57 -> 46 ns a row and token, 18432-wide 179 ->
 * 131). */
#define IL_KERNELS(name, q6)                                                               \
    X86_ATTR float cw_dot_##name##_il_avx512(int64_t n, const void *w_row, const void *xq) \
    {                                                                                      \
        float r;                                                                           \
        il_dot(q6, 1, n, w_row, 0, &xq, 1, &r);                                            \
        return r;                                                                          \
    }                                                                                      \
    X86_ATTR void cw_dot4_##name##_il_avx512(int64_t n, const void *w_row,                 \
                                             const void *const *xq, float *out)            \
    {                                                                                      \
        il_dot(q6, 1, n, w_row, 0, xq, 4, out);                                            \
    }                                                                                      \
    X86_ATTR void cw_dot8_##name##_il_avx512(int64_t n, const void *w_row,                 \
                                             const void *const *xq, float *out)            \
    {                                                                                      \
        il_dot(q6, 1, n, w_row, 0, xq, 8, out);                                            \
    }                                                                                      \
    X86_ATTR void cw_dot4x2_##name##_il_avx512(int64_t n, const void *w_row, size_t row_bytes, \
                                               const void *const *xq, float *out)          \
    {                                                                                      \
        il_dot(q6, 2, n, w_row, row_bytes, xq, 4, out);                                    \
    }                                                                                      \
    X86_ATTR void cw_dot8x2_##name##_il_avx512(int64_t n, const void *w_row, size_t row_bytes, \
                                               const void *const *xq, float *out)          \
    {                                                                                      \
        il_dot(q6, 2, n, w_row, row_bytes, xq, 8, out);                                    \
    }

IL_KERNELS(q4_k, 0)
IL_KERNELS(q6_k, 1)

#endif

/* quant_quant.c — row quantisers: f32 to GGUF tensor blocks.
 *
 * Two kinds. Q8_K and Q8_0 are activation formats and reproduce llama.cpp's
 * x86 CPU backend bit for bit (dot products must see the same integers). The
 * weight formats use one non-iterative choice of scale per (sub-)block: fast
 * enough for the model generator (tens of billions of weights) and within a
 * bits-dependent error of the data, but not llama.cpp's iterative search, so
 * the blocks differ from llama-quantize's (their dequantisation does not: it
 * is ggml's own, see quant_dequant.c). n is a multiple of the block size. */
#include <math.h>

#include "gguf/quant.h"
#include "gguf/quant_rows.h"

#define F16(x) cw_f32_to_f16(x)

/* Round to nearest, ties to even, for |v| < 2^22 (the magic-number trick
 * ggml's nearest_int uses: adding 1.5*2^23 leaves the integer in the
 * mantissa, rounded by the FPU's default mode). */
static inline int rne(float v)
{
    float f = v + 12582912.f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static inline float inv(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* The element of x[0..n) with the largest magnitude, sign kept (first one
 * on ties). */
static inline float signed_max(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static inline void min_max(const float *x, int n, float *mn, float *mx)
{
    float a = x[0], b = x[0];
    for (int j = 1; j < n; j++) {
        a = x[j] < a ? x[j] : a;
        b = x[j] > b ? x[j] : b;
    }
    *mn = a;
    *mx = b;
}

/* Index of the level of tab[0..n) nearest to v (first on ties). */
static inline int nearest_level(const int8_t *tab, int n, float v)
{
    int best = 0;
    float err = fabsf(v - tab[0]);
    for (int i = 1; i < n; i++) {
        float e = fabsf(v - tab[i]);
        if (e < err) {
            err = e;
            best = i;
        }
    }
    return best;
}

void cw_quant_row_f32(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void cw_quant_row_f16(const float *src, void *dst, int64_t n)
{
    cw_f16 *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = F16(src[i]);
}

void cw_quant_row_bf16(const float *src, void *dst, int64_t n)
{
    cw_bf16 *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = cw_f32_to_bf16(src[i]);
}

/* ---- activation formats (bit-exact with llama.cpp's CPU backend) ---- */

/* Q8_0 as the AVX2 CPU backend quantises activations: d = max|x|/127 stored
 * as f16, q = x * (127/max|x|) rounded to nearest even. (The scalar
 * quantize_row_q8_0_ref multiplies by 1/d and rounds ties away from zero;
 * the two disagree on exact ties and on 1-ulp differences of the factor.) */
void cw_quant_row_q8_0(const float *x, void *dst, int64_t n)
{
    struct cw_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        float amax = 0.0f;
        for (int j = 0; j < CW_QK; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        b->d = F16(amax / 127.f);
        float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < CW_QK; j++)
            b->qs[j] = (int8_t)rne(x[j] * id);
    }
}

/* Q8_K: scale -127/m for the signed largest element m, q rounded to nearest
 * even and capped at 127 (only m's own sign reaches -127), d = 1/scale, and
 * bsums the sums of each 16 q. An all-zero block has d = 0. */
void cw_quant_row_q8_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q8_k *b = dst;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        float max = signed_max(x, CW_QK_K);
        memset(b->bsums, 0, sizeof b->bsums);
        if (max == 0.0f) {
            b->d = 0.0f;
            memset(b->qs, 0, sizeof b->qs);
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < CW_QK_K; j++) {
            int v = rne(iscale * x[j]);
            b->qs[j] = (int8_t)(v < 127 ? v : 127);
            b->bsums[j / 16] = (int16_t)(b->bsums[j / 16] + b->qs[j]);
        }
        b->d = 1 / iscale;
    }
}

/* ---- legacy 32-element weight formats ---- */

/* Symmetric: the signed largest element maps to the most negative level
 * -half, which uses the one extra negative level of q - half. */
static void quant_sym32(const float *x, float *d, uint8_t *q, int half)
{
    float max = signed_max(x, CW_QK);
    float dd = max / -half;
    *d = dd;
    float id = inv(cw_f16_to_f32(F16(dd)));
    for (int j = 0; j < CW_QK; j++)
        q[j] = (uint8_t)clampi(rne(x[j] * id) + half, 0, 2 * half - 1);
}

/* Asymmetric: min..max over 2^bits - 1 steps. */
static void quant_asym32(const float *x, cw_f16 *d, cw_f16 *m, uint8_t *q, int levels)
{
    float mn, mx;
    min_max(x, CW_QK, &mn, &mx);
    *d = F16((mx - mn) / levels);
    *m = F16(mn);
    float id = inv(cw_f16_to_f32(*d)), m16 = cw_f16_to_f32(*m);
    for (int j = 0; j < CW_QK; j++)
        q[j] = (uint8_t)clampi(rne((x[j] - m16) * id), 0, levels);
}

static void pack_nibbles(uint8_t *qs, const uint8_t *q, int n)
{
    for (int j = 0; j < n / 2; j++)
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + n / 2] & 15) << 4);
}

static void pack_q5_high(uint8_t qh[4], const uint8_t *q)
{
    uint32_t h = 0;
    for (int j = 0; j < CW_QK; j++)
        h |= (uint32_t)(q[j] >> 4) << j;
    for (int k = 0; k < 4; k++)
        qh[k] = (uint8_t)(h >> (8 * k));
}

void cw_quant_row_q4_0(const float *x, void *dst, int64_t n)
{
    struct cw_block_q4_0 *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        float d;
        quant_sym32(x, &d, q, 8);
        b->d = F16(d);
        pack_nibbles(b->qs, q, CW_QK);
    }
}

void cw_quant_row_q5_0(const float *x, void *dst, int64_t n)
{
    struct cw_block_q5_0 *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        float d;
        quant_sym32(x, &d, q, 16);
        b->d = F16(d);
        pack_nibbles(b->qs, q, CW_QK);
        pack_q5_high(b->qh, q);
    }
}

void cw_quant_row_q4_1(const float *x, void *dst, int64_t n)
{
    struct cw_block_q4_1 *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        quant_asym32(x, &b->d, &b->m, q, 15);
        pack_nibbles(b->qs, q, CW_QK);
    }
}

void cw_quant_row_q5_1(const float *x, void *dst, int64_t n)
{
    struct cw_block_q5_1 *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        quant_asym32(x, &b->d, &b->m, q, 31);
        pack_nibbles(b->qs, q, CW_QK);
        pack_q5_high(b->qh, q);
    }
}

void cw_quant_row_iq4_nl(const float *x, void *dst, int64_t n)
{
    struct cw_block_iq4_nl *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        b->d = F16(signed_max(x, CW_QK) / cw_iq4nl_values[0]);
        float id = inv(cw_f16_to_f32(b->d));
        for (int j = 0; j < CW_QK; j++)
            q[j] = (uint8_t)nearest_level(cw_iq4nl_values, 16, x[j] * id);
        pack_nibbles(b->qs, q, CW_QK);
    }
}

/* ---- FP4 formats ---- */

/* Scale 2^(e-128) with e = floor(log2 max|x|) + 125, so the largest element
 * lands in the top binade of the doubled E2M1 levels (as ggml chooses). */
void cw_quant_row_mxfp4(const float *x, void *dst, int64_t n)
{
    struct cw_block_mxfp4 *b = dst;
    uint8_t q[CW_QK];
    for (int64_t i = 0; i < n / CW_QK; i++, b++, x += CW_QK) {
        float amax = fabsf(signed_max(x, CW_QK));
        int e = !(amax > 0.0f) ? 0 : isfinite(amax) ? ilogbf(amax) + 125 : 254;
        b->e = (uint8_t)clampi(e, 0, 254);
        float id = inv(cw_e8m0_half(b->e));
        for (int j = 0; j < CW_QK; j++)
            q[j] = (uint8_t)nearest_level(cw_fp4_values, 16, x[j] * id);
        pack_nibbles(b->qs, q, CW_QK);
    }
}

/* UE4M3 code nearest to v >= 0 from above the scale it stands for (so the
 * block's largest element stays in range), saturating at 448. */
static uint8_t ue4m3_ceil(float v)
{
    for (int c = 1; c < 0x7F; c++)
        if (2.0f * cw_ue4m3_half((uint8_t)c) >= v)
            return (uint8_t)c;
    return 0x7E;
}

/* Sub-block scale: max|x|/6 (6 = largest E2M1 level) as UE4M3, rounded up. */
void cw_quant_row_nvfp4(const float *x, void *dst, int64_t n)
{
    struct cw_block_nvfp4 *b = dst;
    uint8_t q[16];
    for (int64_t i = 0; i < n / CW_QK_NVFP4; i++, b++) {
        for (int s = 0; s < 4; s++, x += 16) {
            float amax = fabsf(signed_max(x, 16));
            b->d[s] = amax > 0.0f ? ue4m3_ceil(amax / 6.0f) : 0;
            float id = inv(cw_ue4m3_half(b->d[s]));
            for (int j = 0; j < 16; j++)
                q[j] = (uint8_t)nearest_level(cw_fp4_values, 16, x[j] * id);
            pack_nibbles(b->qs + 8 * s, q, 16);
        }
    }
}

/* ---- K-quants ---- */

/* Super-block scale for sub-block scales sc[0..n): d = max/qmax, and each
 * sub-block's integer scale ls = round(sc/d) clamped to [lo, qmax]. The
 * per-element quantisation uses the rounded scale, so rounding the scale
 * costs nothing but a slightly different step. */
static float super_scale(const float *sc, int n, int lo, int qmax, int *ls)
{
    float mx = 0.0f;
    for (int j = 0; j < n; j++)
        mx = fabsf(sc[j]) > mx ? fabsf(sc[j]) : mx;
    float d = cw_f16_to_f32(F16(mx / qmax));
    float id = inv(d);
    for (int j = 0; j < n; j++)
        ls[j] = clampi(rne(sc[j] * id), lo, qmax);
    return d;
}

/* Q2_K/Q4_K/Q5_K share the asymmetric scheme y = d*ls*q - dmin*lm: per
 * sub-block of len elements, min = min(0, min x), step = (max - min)/levels;
 * then 4- or 6-bit ls and lm, then q = round((x + dmin*lm)/(d*ls)). */
struct kasym {
    float d, dmin;
    int ls[16], lm[16];
    uint8_t q[CW_QK_K];
};

static void quant_kasym(const float *x, int nsub, int len, int levels, int smax, struct kasym *k)
{
    float step[16], mins[16];
    for (int s = 0; s < nsub; s++) {
        float mn, mx;
        min_max(x + s * len, len, &mn, &mx);
        mn = mn < 0.0f ? mn : 0.0f;
        mx = mx > mn ? mx : mn;
        step[s] = (mx - mn) / levels;
        mins[s] = -mn;
    }
    k->d = super_scale(step, nsub, 0, smax, k->ls);
    k->dmin = super_scale(mins, nsub, 0, smax, k->lm);
    for (int s = 0; s < nsub; s++) {
        float dl = k->d * k->ls[s], ml = k->dmin * k->lm[s];
        float id = inv(dl);
        for (int j = s * len; j < s * len + len; j++)
            k->q[j] = (uint8_t)clampi(rne((x[j] + ml) * id), 0, levels);
    }
}

void cw_quant_row_q2_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q2_k *b = dst;
    struct kasym k;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        quant_kasym(x, 16, 16, 3, 15, &k);
        b->d = F16(k.d);
        b->dmin = F16(k.dmin);
        for (int s = 0; s < 16; s++)
            b->scales[s] = (uint8_t)(k.ls[s] | k.lm[s] << 4);
        memset(b->qs, 0, sizeof b->qs);
        for (int e = 0; e < CW_QK_K; e++)
            b->qs[cw_k2_index(e)] |= (uint8_t)(k.q[e] << cw_k2_shift(e));
    }
}

static void put_k4_scales(uint8_t *scales, const struct kasym *k)
{
    uint8_t sc[8], m[8];
    for (int s = 0; s < 8; s++) {
        sc[s] = (uint8_t)k->ls[s];
        m[s] = (uint8_t)k->lm[s];
    }
    cw_k4_scale_put(scales, sc, m);
}

void cw_quant_row_q4_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q4_k *b = dst;
    struct kasym k;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        quant_kasym(x, 8, 32, 15, 63, &k);
        b->d = F16(k.d);
        b->dmin = F16(k.dmin);
        put_k4_scales(b->scales, &k);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * c + l] = (uint8_t)(k.q[64 * c + l] | k.q[64 * c + 32 + l] << 4);
    }
}

void cw_quant_row_q5_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q5_k *b = dst;
    struct kasym k;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        quant_kasym(x, 8, 32, 31, 63, &k);
        b->d = F16(k.d);
        b->dmin = F16(k.dmin);
        put_k4_scales(b->scales, &k);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b->qs[32 * c + l] = (uint8_t)((k.q[64 * c + l] & 15) | (k.q[64 * c + 32 + l] & 15) << 4);
        memset(b->qh, 0, sizeof b->qh);
        for (int e = 0; e < CW_QK_K; e++)
            b->qh[e & 31] |= (uint8_t)((k.q[e] >> 4) << (e >> 5));
    }
}

/* Q3_K/Q6_K: symmetric sub-blocks of 16, the signed largest element on the
 * most negative level -half; signed integer scales. */
static float quant_ksym(const float *x, int half, int lo, int smax, int *ls, uint8_t *q)
{
    float sc[16];
    for (int s = 0; s < 16; s++)
        sc[s] = signed_max(x + 16 * s, 16) / -half;
    float d = super_scale(sc, 16, lo, smax, ls);
    for (int s = 0; s < 16; s++) {
        float id = inv(d * ls[s]);
        for (int j = 16 * s; j < 16 * s + 16; j++)
            q[j] = (uint8_t)clampi(rne(x[j] * id) + half, 0, 2 * half - 1);
    }
    return d;
}

void cw_quant_row_q3_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q3_k *b = dst;
    int ls[16];
    uint8_t q[CW_QK_K], v[16];
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        b->d = F16(quant_ksym(x, 4, -32, 31, ls, q));
        for (int s = 0; s < 16; s++)
            v[s] = (uint8_t)(ls[s] + 32);
        cw_k3_scale_put(b->scales, v);
        memset(b->qs, 0, sizeof b->qs);
        memset(b->hmask, 0, sizeof b->hmask);
        for (int e = 0; e < CW_QK_K; e++) {
            b->qs[cw_k2_index(e)] |= (uint8_t)((q[e] & 3) << cw_k2_shift(e));
            b->hmask[e & 31] |= (uint8_t)((q[e] >> 2) << (e >> 5));
        }
    }
}

void cw_quant_row_q6_k(const float *x, void *dst, int64_t n)
{
    struct cw_block_q6_k *b = dst;
    int ls[16];
    uint8_t q[CW_QK_K];
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++, x += CW_QK_K) {
        b->d = F16(quant_ksym(x, 32, -128, 127, ls, q));
        for (int s = 0; s < 16; s++)
            b->scales[s] = (int8_t)ls[s];
        memset(b->qh, 0, sizeof b->qh);
        for (int e = 0; e < CW_QK_K; e++) {
            int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            uint8_t *ql = &b->ql[64 * h + l + 32 * (k & 1)];
            if (k < 2)
                *ql = q[e] & 15;
            else
                *ql |= (uint8_t)((q[e] & 15) << 4);
            b->qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * k));
        }
    }
}

void cw_quant_row_iq4_xs(const float *x, void *dst, int64_t n)
{
    struct cw_block_iq4_xs *b = dst;
    for (int64_t i = 0; i < n / CW_QK_K; i++, b++) {
        float sc[8];
        int ls[8];
        for (int s = 0; s < 8; s++)
            sc[s] = signed_max(x + 32 * s, 32) / cw_iq4nl_values[0];
        float d = super_scale(sc, 8, -32, 31, ls);
        b->d = F16(d);
        b->scales_h = 0;
        memset(b->scales_l, 0, sizeof b->scales_l);
        for (int s = 0; s < 8; s++, x += 32) {
            int u = ls[s] + 32;
            b->scales_l[s / 2] |= (uint8_t)((u & 15) << (4 * (s & 1)));
            b->scales_h |= (uint16_t)((u >> 4) << (2 * s));
            float id = inv(d * ls[s]);
            uint8_t q[32];
            for (int j = 0; j < 32; j++)
                q[j] = (uint8_t)nearest_level(cw_iq4nl_values, 16, x[j] * id);
            pack_nibbles(b->qs + 16 * s, q, 32);
        }
    }
}

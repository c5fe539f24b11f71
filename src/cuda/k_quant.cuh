/* k_quant.cuh — the device side of the GGUF weight types, shared by
 * k_gemv.cu (decode) and k_gemm.cu (prefill, dequantisation): per type, how
 * one lane decodes its "unit" of 32 weights, and the one switch that maps
 * enum cw_qtype to these types (STYLE §5).
 *
 * A unit is 32 weights of one block, handed back in 4 runs of 8 consecutive
 * elements (element offsets run(p, 0..3) inside the block): every format's
 * packing splits that way, so the x loads are 8 aligned floats per run.
 *
 * Exactness: each decoder produces the same f32 value as quant_dequant.c,
 * operation for operation, with the rounding made explicit (__fmul_rn,
 * __fadd_rn, __fmaf_rn) so that nvcc cannot contract d*q - m into an FMA.
 * The small integers q are turned into floats without a conversion unit: the
 * byte goes into the mantissa of 2^23 (f = 2^23 + q, exact), and then
 *   fl(dl*q)   = fma(dl, f, -dl*2^23)   (the product is exact inside the
 *                                         fma; one rounding, as the CPU's)
 *   q - k      = f - (2^23 + k)         (exact: small integers)
 * Finite scales assumed (an inf or NaN block scale gives NaN here where the
 * CPU may give inf). */
#ifndef CW_K_QUANT_CUH
#define CW_K_QUANT_CUH

#include "cuda/cuda_common.cuh"
#include "gguf/quant.h"

#define CW_K_TWO23 8388608.0f

/* Lookup tables the formats define (IQ4_NL levels, doubled E2M1), packed 4
 * int8 per word; filled on the host from gguf/ (kernel argument). */
struct cw_k_tabs {
    uint32_t iq4nl[4];
    uint32_t fp4[4];
};

/* Float 2^23 + (byte k of v); v's bytes must be the small integers. */
static __device__ __forceinline__ float kq_bytef(uint32_t v, int k)
{
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540u + (uint32_t)k));
}

/* fl(dl * q) for an unsigned byte q held as f = 2^23 + q; c0 = -dl*2^23. */
static __device__ __forceinline__ float kq_mulq(float dl, float f, float c0)
{
    return __fmaf_rn(dl, f, c0);
}

static __device__ __forceinline__ uint32_t kq_u16(const uint8_t *p)
{
    return *(const uint16_t *)p;
}
/* 4 bytes from a 2-byte aligned address. */
static __device__ __forceinline__ uint32_t kq_u32a2(const uint8_t *p)
{
    return kq_u16(p) | kq_u16(p + 2) << 16;
}
static __device__ __forceinline__ uint32_t kq_u32(const uint8_t *p)
{
    return *(const uint32_t *)p;
}
static __device__ __forceinline__ float kq_h(const uint8_t *p)
{
    return cw_dev_f16_to_f32((uint16_t)kq_u16(p));
}

/* 4 table lookups at once: bytes of idx (each < 16) index the 16 int8 of t;
 * the result's bytes are the entries (two byte_perms and a bytewise select). */
static __device__ __forceinline__ uint32_t kq_lut(const uint32_t t[4], uint32_t idx)
{
    uint32_t sel = (idx & 7) | (idx >> 4 & 0x70) | (idx >> 8 & 0x700) | (idx >> 12 & 0x7000);
    uint32_t lo = __byte_perm(t[0], t[1], sel), hi = __byte_perm(t[2], t[3], sel);
    uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
    return (lo & ~m) | (hi & m);
}

/* Signed table bytes -> w = fl(d * v) for the 4 bytes of v (int8 values). */
static __device__ __forceinline__ void kq_scale_s8(uint32_t v, float d, float *w)
{
    uint32_t u = v ^ 0x80808080u; /* v + 128, unsigned */
#pragma unroll
    for (int k = 0; k < 4; k++)
        w[k] = __fmul_rn(d, __fsub_rn(kq_bytef(u, k), CW_K_TWO23 + 128.0f));
}

/* The 16 lower (or upper) nibbles of 4 words, as 16 w = fl((q - off) * d). */
static __device__ __forceinline__ void kq_nib_sub(const uint32_t q[4], int shift, float off,
                                                  float d, float *w)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t v = (q[i] >> shift) & 0x0F0F0F0Fu;
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[4 * i + k] = __fmul_rn(__fsub_rn(kq_bytef(v, k), CW_K_TWO23 + off), d);
    }
}

/* Same, w = fl(q*d) + m (Q4_1-style affine). */
static __device__ __forceinline__ void kq_nib_affine(const uint32_t q[4], int shift,
                                                     const uint32_t *hb, float d, float m,
                                                     float *w)
{
    float c0 = -d * CW_K_TWO23;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t v = ((q[i] >> shift) & 0x0F0F0F0Fu) | (hb ? hb[i] : 0u);
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[4 * i + k] = __fadd_rn(kq_mulq(d, kq_bytef(v, k), c0), m);
    }
}

/* Bit j of the 4-bit field m -> bit 4 of byte j (Q5's fifth bits). */
static __device__ __forceinline__ uint32_t kq_spread4(uint32_t m)
{
    return ((m & 15) * 0x00204081u & 0x01010101u) << 4;
}

/* ---- the types ---------------------------------------------------------
 * QK: elements per block, BB: bytes per block, UPB: units per block,
 * DIRECT: blocks are 16-byte aligned, the unit is read straight from global
 * memory with 16-byte loads; otherwise the warp stages the row's bytes in
 * shared memory (coalesced 16-byte loads) and the unit reads from there with
 * the alignment its block guarantees.
 * XP: x staged in shared memory gets 4 floats of padding after every XP
 * floats (kq_xpad), chosen so that the 8 lanes of a quarter-warp, reading
 * their runs' float4s, hit 8 distinct 4-bank groups (no bank conflicts):
 * 64 for Q4_K/Q5_K's runs at 64c + 16h, 128 for Q2_K/Q3_K/Q6_K's at
 * 128hh + 8(p%4), 32 for the rest (one 32-element unit per lane). */
template <class T>
static __device__ __forceinline__ int kq_xpad(int i)
{
    return i + 4 * (i / T::XP);
}

/* F32/F16/BF16: "blocks" of 256, unit p = 4 runs of 8 at 8p + 64r, so that
 * 8 lanes read 256 contiguous bytes (coalesced) per run. */
struct kt_f32 {
    enum { QK = 256, BB = 1024, UPB = 8, DIRECT = 1, XP = 32 };
    static __device__ int run(int p, int r) { return 8 * p + 64 * r; }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float4 *s = (const float4 *)(b + 4 * run(p, r));
            float4 a = __ldg(s), c = __ldg(s + 1);
            w[8 * r + 0] = a.x, w[8 * r + 1] = a.y, w[8 * r + 2] = a.z, w[8 * r + 3] = a.w;
            w[8 * r + 4] = c.x, w[8 * r + 5] = c.y, w[8 * r + 6] = c.z, w[8 * r + 7] = c.w;
        }
    }
};

template <bool BF>
struct kt_f16x {
    enum { QK = 256, BB = 512, UPB = 8, DIRECT = 1, XP = 32 };
    static __device__ int run(int p, int r) { return 8 * p + 64 * r; }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
#pragma unroll
        for (int r = 0; r < 4; r++) {
            uint4 a = __ldg((const uint4 *)(b + 2 * run(p, r)));
            uint32_t v[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                uint16_t lo = (uint16_t)(v[k] & 0xFFFF), hi = (uint16_t)(v[k] >> 16);
                w[8 * r + 2 * k] = BF ? cw_dev_bf16_to_f32(lo) : cw_dev_f16_to_f32(lo);
                w[8 * r + 2 * k + 1] = BF ? cw_dev_bf16_to_f32(hi) : cw_dev_f16_to_f32(hi);
            }
        }
    }
};
typedef kt_f16x<false> kt_f16;
typedef kt_f16x<true> kt_bf16;

/* Legacy 32-blocks: one unit per block, lo nibbles = elements 0..15. */
static __device__ __forceinline__ int kq_run32(int p, int r) { return 8 * r; }

struct kt_q4_0 {
    enum { QK = 32, BB = 18, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        float d = kq_h(b);
        uint32_t q[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            q[i] = kq_u32a2(b + 2 + 4 * i);
        kq_nib_sub(q, 0, 8.0f, d, w);
        kq_nib_sub(q, 4, 8.0f, d, w + 16);
    }
};

struct kt_q4_1 {
    enum { QK = 32, BB = 20, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        float d = kq_h(b), m = kq_h(b + 2);
        uint32_t q[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            q[i] = kq_u32(b + 4 + 4 * i);
        kq_nib_affine(q, 0, nullptr, d, m, w);
        kq_nib_affine(q, 4, nullptr, d, m, w + 16);
    }
};

struct kt_q5_0 {
    enum { QK = 32, BB = 22, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        float d = kq_h(b);
        uint32_t qh = kq_u32a2(b + 2), q[4], lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = kq_u32a2(b + 6 + 4 * i);
            lo[i] = (q[i] & 0x0F0F0F0Fu) | kq_spread4(qh >> (4 * i));
            hi[i] = ((q[i] >> 4) & 0x0F0F0F0Fu) | kq_spread4(qh >> (16 + 4 * i));
        }
        /* values 0..31: kq_nib_sub would mask the fifth bit away */
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                w[4 * i + k] = __fmul_rn(__fsub_rn(kq_bytef(lo[i], k), CW_K_TWO23 + 16.0f), d);
                w[16 + 4 * i + k] =
                    __fmul_rn(__fsub_rn(kq_bytef(hi[i], k), CW_K_TWO23 + 16.0f), d);
            }
    }
};

struct kt_q5_1 {
    enum { QK = 32, BB = 24, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        float d = kq_h(b), m = kq_h(b + 2);
        uint32_t qh = kq_u32(b + 4), q[4], hl[4], hh[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = kq_u32(b + 8 + 4 * i);
            hl[i] = kq_spread4(qh >> (4 * i));
            hh[i] = kq_spread4(qh >> (16 + 4 * i));
        }
        kq_nib_affine(q, 0, hl, d, m, w);
        kq_nib_affine(q, 4, hh, d, m, w + 16);
    }
};

struct kt_q8_0 {
    enum { QK = 32, BB = 34, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        float d = kq_h(b);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            uint32_t u = kq_u32a2(b + 2 + 4 * i) ^ 0x80808080u; /* q + 128 */
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[4 * i + k] = __fmul_rn(__fsub_rn(kq_bytef(u, k), CW_K_TWO23 + 128.0f), d);
        }
    }
};

struct kt_iq4_nl {
    enum { QK = 32, BB = 18, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &t, float *w)
    {
        float d = kq_h(b);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t q = kq_u32a2(b + 2 + 4 * i);
            kq_scale_s8(kq_lut(t.iq4nl, q & 0x0F0F0F0Fu), d, w + 4 * i);
            kq_scale_s8(kq_lut(t.iq4nl, (q >> 4) & 0x0F0F0F0Fu), d, w + 16 + 4 * i);
        }
    }
};

/* MXFP4 scale: 2^(e-128) as quant_rows.h's cw_e8m0_half (e < 2: subnormal). */
static __device__ __forceinline__ float kq_e8m0_half(uint32_t e)
{
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

struct kt_mxfp4 {
    enum { QK = 32, BB = 17, UPB = 1, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return kq_run32(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &t, float *w)
    {
        float d = kq_e8m0_half(b[0]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint8_t *s = b + 1 + 4 * i; /* 1-byte aligned */
            uint32_t q = s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
            kq_scale_s8(kq_lut(t.fp4, q & 0x0F0F0F0Fu), d, w + 4 * i);
            kq_scale_s8(kq_lut(t.fp4, (q >> 4) & 0x0F0F0F0Fu), d, w + 16 + 4 * i);
        }
    }
};

/* NVFP4 scale: half the UE4M3 value, as quant_rows.h's cw_ue4m3_half. */
static __device__ __forceinline__ float kq_ue4m3_half(uint32_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    int e = (x >> 3) & 15, m = x & 7;
    float v = e ? (float)(8 + m) : (float)m;
    int p = e ? e - 11 : -10;
    return __fmul_rn(v, __uint_as_float((uint32_t)(127 + p) << 23));
}

/* 64-element blocks of four 16-sub-blocks; unit p = sub-blocks 2p, 2p+1. */
struct kt_nvfp4 {
    enum { QK = 64, BB = 36, UPB = 2, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return 32 * p + 8 * r; }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &t, float *w)
    {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int s = 2 * p + h;
            float d = kq_ue4m3_half(b[s]);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t q = kq_u32(b + 4 + 8 * s + 4 * i);
                kq_scale_s8(kq_lut(t.fp4, q & 0x0F0F0F0Fu), d, w + 16 * h + 4 * i);
                kq_scale_s8(kq_lut(t.fp4, (q >> 4) & 0x0F0F0F0Fu), d, w + 16 * h + 8 + 4 * i);
            }
        }
    }
};

/* ---- K-quants ---- */

/* Q4_K/Q5_K scale and min of sub-block j from the 12 scale bytes held in
 * words s0 (bytes 0-3), s1 (4-7), s2 (8-11): cw_k4_scale_get's packing. */
static __device__ __forceinline__ void kq_k4_scale(uint32_t s0, uint32_t s1, uint32_t s2, int j,
                                                   int *sc, int *m)
{
    int jj = j & 3;
    uint32_t a = s0 >> (8 * jj) & 255, c = s1 >> (8 * jj) & 255, e = s2 >> (8 * jj) & 255;
    if (j < 4) {
        *sc = (int)(a & 63);
        *m = (int)(c & 63);
    } else {
        *sc = (int)((e & 15) | (a >> 6) << 4);
        *m = (int)((e >> 4) | (c >> 6) << 4);
    }
}

/* Q4_K/Q5_K unit p: chunk c = p/2 of 64, half hf = p%2 of its 32 qs bytes:
 * 16 low nibbles (sub-block 2c) then 16 high nibbles (sub-block 2c+1). */
static __device__ __forceinline__ int kq_run_k4(int p, int r)
{
    return 64 * (p >> 1) + 16 * (p & 1) + 8 * (r & 1) + 32 * (r >> 1);
}

/* A 16-byte load: through the read-only path from global memory, or (SM)
 * a plain load, for a block staged in shared memory. */
template <bool SM>
static __device__ __forceinline__ uint4 kq_ld16(const uint8_t *p)
{
    return SM ? *(const uint4 *)p : __ldg((const uint4 *)p);
}

/* Q4_K/Q5_K unit p's raw bytes: the block head hd (d, dmin, scales), the
 * 16 qs bytes q and (Q5) the 16 qh bytes; kq_k4_word extracts values. SM:
 * the block is in shared memory. */
template <bool Q5, bool SM = false>
static __device__ __forceinline__ void kq_k4_bytes(const uint8_t *b, int p, uint4 &hd,
                                                   uint32_t (&q)[4], uint32_t (&qh)[4])
{
    hd = kq_ld16<SM>(b);
    int c = p >> 1, hf = p & 1;
    uint4 qv = kq_ld16<SM>(b + (Q5 ? 48 : 16) + 32 * c + 16 * hf);
    uint4 hv = make_uint4(0, 0, 0, 0);
    if (Q5)
        hv = kq_ld16<SM>(b + 16 + 16 * hf);
    q[0] = qv.x, q[1] = qv.y, q[2] = qv.z, q[3] = qv.w;
    qh[0] = hv.x, qh[1] = hv.y, qh[2] = hv.z, qh[3] = hv.w;
}

/* four values (bytes) of sub-block s = 2c + h from word i of kq_k4_bytes */
template <bool Q5>
static __device__ __forceinline__ uint32_t kq_k4_word(uint32_t q, uint32_t qh, int h, int s)
{
    uint32_t v = (q >> (4 * h)) & 0x0F0F0F0Fu;
    if (Q5)
        v |= ((qh >> s) & 0x01010101u) << 4;
    return v;
}

template <bool Q5>
static __device__ __forceinline__ void kq_k4_unit(const uint8_t *b, int p, float *w)
{
    uint4 hd;
    uint32_t q[4], qh[4];
    kq_k4_bytes<Q5>(b, p, hd, q, qh);
    const int c = p >> 1;
    float d = cw_dev_f16_to_f32((uint16_t)(hd.x & 0xFFFF)), dmin = cw_dev_f16_to_f32((uint16_t)(hd.x >> 16));
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int s = 2 * c + h, sc, m;
        kq_k4_scale(hd.y, hd.z, hd.w, s, &sc, &m);
        float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)m);
        float c0 = -dl * CW_K_TWO23;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t v = kq_k4_word<Q5>(q[i], qh[i], h, s);
#pragma unroll
            for (int k = 0; k < 4; k++)
                w[16 * h + 4 * i + k] = __fsub_rn(kq_mulq(dl, kq_bytef(v, k), c0), ml);
        }
    }
}

struct kt_q4_k {
    enum { QK = 256, BB = 144, UPB = 8, DIRECT = 1, XP = 64 };
    static __device__ int run(int p, int r) { return kq_run_k4(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        kq_k4_unit<false>(b, p, w);
    }
};

struct kt_q5_k {
    enum { QK = 256, BB = 176, UPB = 8, DIRECT = 1, XP = 64 };
    static __device__ int run(int p, int r) { return kq_run_k4(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        kq_k4_unit<true>(b, p, w);
    }
};

/* Q2_K/Q3_K/Q6_K unit p: half hh = p/4 of 128, lanes l0 = 8(p%4) .. +8 of
 * each of the four 32-runs k (element 128hh + 32k + l0 + i). */
static __device__ __forceinline__ int kq_run_k6(int p, int r)
{
    return 128 * (p >> 2) + 32 * r + 8 * (p & 3);
}

/* Q6_K unit p (hh = p/4, l0 = 8(p%4)): its ql and qh words, two of each
 * run (A: ql low nibbles' bytes, B: the 32 after, C: qh); kq_k6_word
 * extracts the 6-bit values (0..63) of quarter k. A block starts 2-byte
 * aligned and these pieces lie at multiples of 8 in it. FS (the decode
 * products, their blocks staged in shared memory): three aligned words
 * and two funnel shifts per 8 bytes, where the 2-byte loads take four and
 * two merges; where b is not 4-byte aligned its words start 2 bytes before
 * the piece, in the block before (a tensor starts aligned), and the last
 * ends inside the block. */
template <bool FS = false>
static __device__ __forceinline__ void kq_k6_bytes(const uint8_t *b, int p, uint32_t (&A)[2],
                                                   uint32_t (&B)[2], uint32_t (&C)[2])
{
    const int hh = p >> 2, l0 = 8 * (p & 3);
    const int o[3] = {64 * hh + l0, 64 * hh + l0 + 32, 128 + 32 * hh + l0};
    uint32_t *dst[3][2] = {{&A[0], &A[1]}, {&B[0], &B[1]}, {&C[0], &C[1]}};
    const unsigned mis = (unsigned)(uintptr_t)b & 2u, sh = 8u * mis;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        if (FS) {
            const uint32_t *w = (const uint32_t *)(b - mis + o[i]); /* b's space: ld.shared */
            const uint32_t w0 = w[0], w1 = w[1], w2 = w[2];
            *dst[i][0] = __funnelshift_r(w0, w1, sh);
            *dst[i][1] = __funnelshift_r(w1, w2, sh);
        } else {
            *dst[i][0] = kq_u32a2(b + o[i]);
            *dst[i][1] = kq_u32a2(b + o[i] + 4);
        }
    }
}

static __device__ __forceinline__ uint32_t kq_k6_word(uint32_t A, uint32_t B, uint32_t C, int k)
{
    uint32_t lo = ((k & 1 ? B : A) >> (4 * (k >> 1))) & 0x0F0F0F0Fu;
    return lo | ((C >> (2 * k)) & 0x03030303u) << 4;
}

struct kt_q6_k {
    enum { QK = 256, BB = 210, UPB = 8, DIRECT = 0, XP = 128 };
    static __device__ int run(int p, int r) { return kq_run_k6(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        int hh = p >> 2, l0 = 8 * (p & 3);
        float d = kq_h(b + 208);
        uint32_t A[2], B[2], C[2];
        kq_k6_bytes(b, p, A, B, C);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int8_t sc = (int8_t)b[192 + 8 * hh + 2 * k + (l0 >> 4)];
            float dl = __fmul_rn(d, (float)sc);
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t v = kq_k6_word(A[i], B[i], C[i], k);
#pragma unroll
                for (int j = 0; j < 4; j++)
                    w[8 * k + 4 * i + j] =
                        __fmul_rn(dl, __fsub_rn(kq_bytef(v, j), CW_K_TWO23 + 32.0f));
            }
        }
    }
};

struct kt_q2_k {
    enum { QK = 256, BB = 84, UPB = 8, DIRECT = 0, XP = 128 };
    static __device__ int run(int p, int r) { return kq_run_k6(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        int hh = p >> 2, l0 = 8 * (p & 3);
        float d = kq_h(b + 80), dmin = kq_h(b + 82);
        uint32_t q[2] = {kq_u32(b + 16 + 32 * hh + l0), kq_u32(b + 20 + 32 * hh + l0)};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t sb = b[8 * hh + 2 * k + (l0 >> 4)];
            float dl = __fmul_rn(d, (float)(sb & 15)), ml = __fmul_rn(dmin, (float)(sb >> 4));
            float c0 = -dl * CW_K_TWO23;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                uint32_t v = (q[i] >> (2 * k)) & 0x03030303u;
#pragma unroll
                for (int j = 0; j < 4; j++)
                    w[8 * k + 4 * i + j] = __fsub_rn(kq_mulq(dl, kq_bytef(v, j), c0), ml);
            }
        }
    }
};

struct kt_q3_k {
    enum { QK = 256, BB = 110, UPB = 8, DIRECT = 0, XP = 128 };
    static __device__ int run(int p, int r) { return kq_run_k6(p, r); }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &, float *w)
    {
        int hh = p >> 2, l0 = 8 * (p & 3);
        float d = kq_h(b + 108);
        const uint8_t *sc = b + 96;
        uint32_t q[2] = {kq_u32a2(b + 32 + 32 * hh + l0), kq_u32a2(b + 36 + 32 * hh + l0)};
        uint32_t hm[2] = {kq_u32a2(b + l0), kq_u32a2(b + l0 + 4)};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int j = 8 * hh + 2 * k + (l0 >> 4); /* cw_k3_scale_get */
            int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
            int hi = (sc[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            float dl = __fmul_rn(d, (float)((lo | hi << 4) - 32));
#pragma unroll
            for (int i = 0; i < 2; i++) {
                /* q - (hbit ? 0 : 4) = (q + 4*hbit) - 4 */
                uint32_t v = ((q[i] >> (2 * k)) & 0x03030303u) |
                             ((hm[i] >> (4 * hh + k)) & 0x01010101u) << 2;
#pragma unroll
                for (int e = 0; e < 4; e++)
                    w[8 * k + 4 * i + e] =
                        __fmul_rn(dl, __fsub_rn(kq_bytef(v, e), CW_K_TWO23 + 4.0f));
            }
        }
    }
};

/* IQ4_XS: unit p = sub-block p of 32 (lo nibbles 0..15, hi 16..31). */
struct kt_iq4_xs {
    enum { QK = 256, BB = 136, UPB = 8, DIRECT = 0, XP = 32 };
    static __device__ int run(int p, int r) { return 32 * p + 8 * r; }
    static __device__ void unit(const uint8_t *b, int p, const cw_k_tabs &t, float *w)
    {
        float d = kq_h(b);
        uint32_t sh = kq_u16(b + 2), sl = b[4 + p / 2];
        int ls = (int)(((sl >> (4 * (p & 1))) & 15) | ((sh >> (2 * p)) & 3) << 4);
        float dl = __fmul_rn(d, (float)(ls - 32));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t q = kq_u32(b + 8 + 16 * p + 4 * i);
            kq_scale_s8(kq_lut(t.iq4nl, q & 0x0F0F0F0Fu), dl, w + 4 * i);
            kq_scale_s8(kq_lut(t.iq4nl, (q >> 4) & 0x0F0F0F0Fu), dl, w + 16 + 4 * i);
        }
    }
};

/* ---- Q8_K integer products (the decode GEMV of Q4_K/Q5_K/Q6_K) ---------
 * x is quantised per 256-element block to Q8_K exactly as the CPU does
 * (gguf/quant_quant.c: int8 q, f32 d, int16 sums of 16), and each block's
 * integer sums are formed with dp4a, exact in any order; the float combine
 * per block is then the CPU's (cpu_dot.h cw_comb_min / cw_comb1), so the
 * GPU's per-block values equal the CPU's bit for bit (k_gemv.cu says how
 * the blocks are summed in the CPU's order).
 *
 * The Q8_K copy of a token in shared memory (kq_xq_bytes): nb blocks of 256
 * int8 laid out for the units (xq_pos: lane p's 32 bytes are the 16-byte
 * granules p and 8 + p of its block, so the 8 lanes of a block read 8
 * distinct bank groups per load; k_gemv.cu turns them by the block's
 * index, xq_rot), then nb*16 int16 bsums in element order,
 * then nb f32 d. */
static __host__ __device__ __forceinline__ int kq_xq_bytes(int nb)
{
    return (nb * (256 + 32 + 4) + 15) / 16 * 16;
}

/* dp4a as a pure operation: CUDA's __dp4a is volatile asm, which the
 * compiler treats as a side effect, so a block's head read by each of its
 * 8 units was loaded again after every unit's products. */
static __device__ __forceinline__ int kq_dp4a(int a, int b, int c)
{
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* dp4a of unsigned bytes a with signed bytes b */
static __device__ __forceinline__ int kq_dp4a_us(int a, int b, int c)
{
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* dp2a as a pure operation (kq_dp4a): the two 16-bit halves of a times
 * bytes 0, 1 (LO) or 2, 3 of b, plus c */
template <bool LO>
static __device__ __forceinline__ int kq_dp2a(int a, int b, int c)
{
    int d;
    if (LO)
        asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else
        asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

/* One row's unit for the integer product: 8 words of weight bytes matched
 * word for word with the lane's 32 x bytes (granule p: words 0-3, granule
 * 8 + p: words 4-7), the scale of each word pair, the mins of the two
 * halves (Q4_K/Q5_K) and the block's f16 scales. */
struct kq_iu {
    uint32_t q[8];
    int sc[4], m[2];
    float d, dmin;
};

/* Eight of a Q8_K block's 16 bsums, base .. base + 7, held in registers:
 * the dots' bs[i] for i in that range (lpb_block loads them by halves).
 * One lane a block reads its bsums 32 bytes from its neighbour's, so a
 * 2-byte load from shared memory hits each bank 8 times over: 16 of them
 * took 128 wavefronts a block, more than its weights and x (36 + 64);
 * two 16-byte loads take 16. The flat products' chunks are bound
 * by shared-memory traffic, not by issue (a study computing half of each
 * block's units: 27B +4.2%; twice the dp4a work: no slower). H100 tg128,
 * the same bits: 27B 128.06, 127.88 -> 129.83, 130.17; 35B 463.28,
 * 464.24 -> 466.24, 467.79. */
struct kq_bs8 {
    uint4 v;
    int base;
    __device__ int operator[](int i) const
    {
        const int k = i - base;
        const uint32_t w = k >> 1 == 0 ? v.x : k >> 1 == 1 ? v.y : k >> 1 == 2 ? v.z : v.w;
        return k & 1 ? (int)w >> 16 : (int)(int16_t)(w & 0xFFFFu);
    }
};

/* Default: not a Q8_K type. */
template <class T>
struct kq_q8k {
    enum { ON = 0 };
};

/* Q4_K/Q5_K unit p (c = p/2, hf = p%2): words 0-3 = 16 low nibbles of
 * sub-block 2c (elements 16hf..), words 4-7 = 16 high nibbles of 2c+1
 * (Q4_K: left in their bytes' high halves, 16 times their value, which
 * dot divides out of the sum). */
template <bool Q5>
struct kq_k4_int {
    enum { ON = 1 };
    /* byte of element e (e % 8 == 0) in its block's x copy */
    static __device__ int xq_pos(int e)
    {
        int c = e >> 6, r = e & 63;
        return 16 * (8 * (r >> 5) + 2 * c + ((r >> 4) & 1)) + (r & 15);
    }
    template <bool SM = false>
    static __device__ void unit(const uint8_t *b, int p, kq_iu &u)
    {
        uint4 hd;
        uint32_t q[4], qh[4];
        kq_k4_bytes<Q5, SM>(b, p, hd, q, qh);
        const int c = p >> 1;
        u.d = cw_dev_f16_to_f32((uint16_t)(hd.x & 0xFFFF));
        u.dmin = cw_dev_f16_to_f32((uint16_t)(hd.x >> 16));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int s = 2 * c + h, sc, m;
            kq_k4_scale(hd.y, hd.z, hd.w, s, &sc, &m);
            u.sc[2 * h] = u.sc[2 * h + 1] = sc;
            u.m[h] = m;
#pragma unroll
            for (int i = 0; i < 4; i++)
                u.q[4 * h + i] = !Q5 && h ? q[i] & 0xF0F0F0F0u : kq_k4_word<Q5>(q[i], qh[i], h, s);
        }
    }
    /* this lane's share of the block's sumi and summ (cpu_dot_ref.c):
     * Σ sc_s q x over its 32 weights, and m_s times the bsums of its two
     * 16-runs (the block's 8 lanes cover each bsum once) */
    template <class BS>
    static __device__ int2 dot(const kq_iu &u, const uint4 &xa, const uint4 &xb, const BS &bs,
                               int p)
    {
        int c = p >> 1, hf = p & 1;
        int dl = kq_dp4a((int)u.q[0], (int)xa.x, 0);
        dl = kq_dp4a((int)u.q[1], (int)xa.y, dl);
        dl = kq_dp4a((int)u.q[2], (int)xa.z, dl);
        dl = kq_dp4a((int)u.q[3], (int)xa.w, dl);
        int dh;
        if (Q5) {
            dh = kq_dp4a((int)u.q[4], (int)xb.x, 0);
            dh = kq_dp4a((int)u.q[5], (int)xb.y, dh);
            dh = kq_dp4a((int)u.q[6], (int)xb.z, dh);
            dh = kq_dp4a((int)u.q[7], (int)xb.w, dh);
        } else {
            /* Q4_K's high nibbles left in place (unit) and read as
             * unsigned bytes: 16 times their sum, exactly, so one shift a
             * unit instead of one a word (H100 tg128, the same bits: 27B
             * 129.34, 129.99 -> 129.82, 130.20; 35B 463.31, 467.15 ->
             * 465.79, 467.20) */
            dh = kq_dp4a_us((int)u.q[4], (int)xb.x, 0);
            dh = kq_dp4a_us((int)u.q[5], (int)xb.y, dh);
            dh = kq_dp4a_us((int)u.q[6], (int)xb.z, dh);
            dh = kq_dp4a_us((int)u.q[7], (int)xb.w, dh) >> 4;
        }
        return make_int2(u.sc[0] * dl + u.sc[2] * dh,
                         u.m[0] * bs[4 * c + hf] + u.m[1] * bs[4 * c + 2 + hf]);
    }
    /* cw_comb_min's v: (dx*d)*sumi - (dx*dmin)*summ */
    static __device__ float comb(const kq_iu &u, float dx, int2 s)
    {
        float t = __fmul_rn(__fmul_rn(dx, u.d), __int2float_rn(s.x));
        float w = __fmul_rn(__fmul_rn(dx, u.dmin), __int2float_rn(s.y));
        return __fsub_rn(t, w);
    }
};

/* Q6_K unit p (hh = p/4, l0 = 8(p%4)): run k (elements 128hh + 32k + l0
 * ..+8) is word pair k: granule p holds runs 0, 1, granule 8 + p runs 2, 3.
 * The weights stay q in 0..63 (their top bits clear, so dp4a's signed bytes
 * read them as they are), and the -32 comes out of the block's sum once:
 * Σ sc (q - 32) x = Σ sc q x - 32 Σ_g sc_g bsum_g over its 16 groups of 16,
 * each group's term in the even unit of its pair (units p, p + 1 share
 * their scales, and a group's scale index is its bsum index). Integers,
 * exact: the block's sumi is the CPU's however it is split, and a word
 * saves its byte-wise subtraction (three instructions). */
struct kq_k6_int {
    enum { ON = 1 };
    static __device__ int xq_pos(int e)
    {
        int hh = e >> 7, k = (e >> 5) & 3, l = e & 31;
        return 16 * (8 * (k >> 1) + 4 * hh + (l >> 3)) + 8 * (k & 1);
    }
    /* SM: b in shared memory (the flat kernels' stage): the same 2-byte
     * aligned loads, which a generic address serves from either space */
    template <bool SM = false>
    static __device__ void unit(const uint8_t *b, int p, kq_iu &u)
    {
        int hh = p >> 2, l0 = 8 * (p & 3);
        u.d = kq_h(b + 208);
        u.dmin = 0.0f;
        u.m[0] = u.m[1] = 0;
        uint32_t A[2], B[2], C[2];
        kq_k6_bytes<true>(b, p, A, B, C);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            u.sc[k] = (int8_t)b[192 + 8 * hh + 2 * k + (l0 >> 4)];
#pragma unroll
            for (int i = 0; i < 2; i++)
                u.q[2 * k + i] = kq_k6_word(A[i], B[i], C[i], k);
        }
    }
    template <class BS>
    static __device__ int2 dot(const kq_iu &u, const uint4 &xa, const uint4 &xb, const BS &bs,
                               int p)
    {
        uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
        int s = 0;
#pragma unroll
        for (int k = 0; k < 4; k++)
            s += u.sc[k] * kq_dp4a((int)u.q[2 * k], (int)xw[2 * k],
                                  kq_dp4a((int)u.q[2 * k + 1], (int)xw[2 * k + 1], 0));
        if (!(p & 1)) {
            const int g0 = 8 * (p >> 2) + ((p >> 1) & 1);
            int m = 0;
#pragma unroll
            for (int k = 0; k < 4; k++)
                m += u.sc[k] * (int)bs[g0 + 2 * k];
            s -= 32 * m;
        }
        return make_int2(s, 0);
    }
    /* cw_comb1's t: (dx*d)*sumi */
    static __device__ float comb(const kq_iu &u, float dx, int2 s)
    {
        return __fmul_rn(__fmul_rn(dx, u.d), __int2float_rn(s.x));
    }
};

/* A Q6_K block at b, 2-byte aligned in shared memory (the flat kernels'
 * stage, blocks 210 bytes apart), as its 53 little-endian words (the last
 * holds only d): the 14 aligned 16-byte words that cover it, then each
 * word shifted into place. For the 8 lanes of a quarter warp, blocks 210
 * bytes apart start in 8 distinct 16-byte bank groups, so the 14 loads
 * take 56 wavefronts where the units' 4-byte and byte loads took about
 * 140 (2-way). Reads up to 14 bytes past the block: the caller's stage
 * has them. */
static __device__ __forceinline__ void kq_k6_words(const uint8_t *b, uint32_t (&bw)[53])
{
    const unsigned sh = (unsigned)(uintptr_t)b & 15u, s = sh >> 2;
    const uint4 *al = (const uint4 *)(b - sh);
    uint32_t w[56];
#pragma unroll
    for (int i = 0; i < 14; i++) {
        const uint4 v = al[i];
        w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
    /* w[s + k] for k < 54, by the two bits of s */
    uint32_t t[55];
#pragma unroll
    for (int k = 0; k < 55; k++)
        t[k] = s & 1 ? w[k + 1] : w[k];
    uint32_t v[54];
#pragma unroll
    for (int k = 0; k < 54; k++)
        v[k] = s & 2 ? (k + 2 < 55 ? t[k + 2] : 0u) : t[k];
    const unsigned f = 8 * (sh & 3); /* 0 or 16: b is 2-byte aligned */
#pragma unroll
    for (int k = 0; k < 53; k++)
        bw[k] = __funnelshift_r(v[k], v[k + 1], f);
}

template <>
struct kq_q8k<kt_q4_k> : kq_k4_int<false> {};
template <>
struct kq_q8k<kt_q5_k> : kq_k4_int<true> {};
template <>
struct kq_q8k<kt_q6_k> : kq_k6_int {};

/* Where byte pos of block b's copy goes (every Q8_K copy is so rotated):
 * granules 0-7 and 8-15 each turned by b, so that lanes reading granule p
 * of 8 different blocks at once (gemv_lpb_kernel, the flat kernels) hit 8
 * distinct bank groups; the 8 lanes of one block (mv_dot_q8k) read its 8
 * granules in some order either way. */
static __device__ __forceinline__ int xq_rot(int pos, int b)
{
    const int g = pos >> 4;
    return (((g & 8) | ((g + b) & 7)) << 4) | (pos & 15);
}

/* Whether two decoder types are one (no <type_traits> in device code). */
template <class A, class B>
struct kq_same {
    enum { V = 0 };
};
template <class A>
struct kq_same<A, A> {
    enum { V = 1 };
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* The signed largest of a warp's 256 values (lane holds 8*lane .. 8*lane+7
 * in v), the first of the largest |x| as the CPU's quantiser picks it, for
 * every lane, by sm_80's warp reductions: the largest |x| as its bits (the
 * same order for non-negative floats; a NaN counts as 0, as the float
 * compares of kq_xq_block's other form never pick one), then the first
 * index holding it, then its sign from that lane: two reductions and a
 * shuffle on the quantiser's serial chain instead of five rounds of three
 * shuffles. */
static __device__ __forceinline__ float kq_signed_max_rx(const float (&v)[8], int lane)
{
    unsigned key[8], m = 0u;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        key[j] = __float_as_uint(v[j]) & 0x7fffffffu;
        key[j] = key[j] > 0x7f800000u ? 0u : key[j];
        m = key[j] > m ? key[j] : m;
    }
    m = __reduce_max_sync(0xffffffffu, m);
    if (!m)
        return 0.0f;
    unsigned idx = 256u;
    float c = 0.0f;
#pragma unroll
    for (int j = 7; j >= 0; j--)
        if (key[j] == m)
            idx = 8u * lane + j, c = v[j];
    idx = __reduce_min_sync(0xffffffffu, idx);
    return __shfl_sync(0xffffffffu, c, (int)(idx >> 3));
}
#endif

/* Block b of token t's Q8_K copy (tb = kq_xq_bytes(nb) bytes a token from
 * xq; the layout of T's units, rotated by xq_rot) from the 256 values whose
 * elements 8*lane .. 8*lane+7 this lane holds in v; T2 other than T: the
 * same values also into xq2 in T2's layout. The CPU's quantiser
 * (quant_quant.c cw_quant_row_q8_k) operation for operation: the signed
 * largest element (first of the largest |x|), iscale = -127/max, q =
 * rne(iscale*x) by the same 1.5*2^23 trick, capped at 127, d = 1/iscale;
 * an all-zero block gives d = 0, q = 0. All 32 lanes of the warp call it.
 * Its form (t and tb apart, v writable) is the code xq_rows had inline, so
 * that xq_rows keeps its instructions: a first form of this function
 * changed them in 62 kernels and cost the 27B's decode 0.8% (H200). RX
 * (sm_80 on): the signed largest by kq_signed_max_rx instead, the same
 * value; RX off leaves the code as it was. */
template <class T, class T2 = T, bool RX = false>
static __device__ __forceinline__ void kq_xq_block(float (&v)[8], int t, int b, int nb, int tb,
                                                   uint8_t *xq, uint8_t *xq2)
{
    typedef kq_q8k<T> I;
    constexpr bool two = !kq_same<T, T2>::V;
    const int lane = threadIdx.x & 31;
    float amax = 0.0f, mx = 0.0f;
    int idx = 256;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (RX)
        mx = kq_signed_max_rx(v, lane);
    else
#endif
    {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (fabsf(v[j]) > amax)
                amax = fabsf(v[j]), mx = v[j], idx = 8 * lane + j;
        /* a total order (|x| descending, index ascending): every lane ends
         * with the CPU's pick */
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float oa = __shfl_xor_sync(0xffffffffu, amax, o);
            float om = __shfl_xor_sync(0xffffffffu, mx, o);
            int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (oa > amax || (oa == amax && oi < idx))
                amax = oa, mx = om, idx = oi;
        }
    }
    uint32_t w[2] = {0u, 0u};
    int sum = 0;
    float d = 0.0f;
    if (mx != 0.0f) {
        float is = __fdiv_rn(-127.0f, mx);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float f = __fadd_rn(__fmul_rn(is, v[j]), 12582912.0f);
            int r = (__float_as_int(f) & 0x007fffff) - 0x00400000;
            r = r < 127 ? r : 127;
            sum += (int8_t)r;
            w[j >> 2] |= (uint32_t)(r & 0xFF) << (8 * (j & 3));
        }
        d = __fdiv_rn(1.0f, is);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* bsum of 16: lanes 2g, 2g+1 */
#pragma unroll
    for (int o = 0; o < (two ? 2 : 1); o++) {
        uint8_t *q = (o ? xq2 : xq) + t * tb;
        const int pos =
            xq_rot(o ? kq_q8k<T2>::xq_pos(8 * lane) : I::xq_pos(8 * lane), b);
        *(uint2 *)(q + 256 * b + pos) = make_uint2(w[0], w[1]);
        if (!(lane & 1))
            ((int16_t *)(q + 256 * nb))[16 * b + (lane >> 1)] = (int16_t)sum;
        if (lane == 0)
            ((float *)(q + 288 * nb))[b] = d;
    }
}

/* The one switch from the enum to the template instances (STYLE §5): calls
 * f.template go<T>() for the type's decoder; returns -1 for a type
 * the kernels do not read. */
template <class F>
static int cw_k_dispatch(enum cw_qtype type, F &f)
{
    switch (type) {
    case CW_TYPE_F32: return f.template go<kt_f32>();
    case CW_TYPE_F16: return f.template go<kt_f16>();
    case CW_TYPE_BF16: return f.template go<kt_bf16>();
    case CW_TYPE_Q4_0: return f.template go<kt_q4_0>();
    case CW_TYPE_Q4_1: return f.template go<kt_q4_1>();
    case CW_TYPE_Q5_0: return f.template go<kt_q5_0>();
    case CW_TYPE_Q5_1: return f.template go<kt_q5_1>();
    case CW_TYPE_Q8_0: return f.template go<kt_q8_0>();
    case CW_TYPE_Q2_K: return f.template go<kt_q2_k>();
    case CW_TYPE_Q3_K: return f.template go<kt_q3_k>();
    case CW_TYPE_Q4_K: return f.template go<kt_q4_k>();
    case CW_TYPE_Q5_K: return f.template go<kt_q5_k>();
    case CW_TYPE_Q6_K: return f.template go<kt_q6_k>();
    case CW_TYPE_IQ4_NL: return f.template go<kt_iq4_nl>();
    case CW_TYPE_IQ4_XS: return f.template go<kt_iq4_xs>();
    case CW_TYPE_MXFP4: return f.template go<kt_mxfp4>();
    case CW_TYPE_NVFP4: return f.template go<kt_nvfp4>();
    default: return -1;
    }
}

/* Elements per kernel block of a type (256 for the float types, see kt_f32). */
int cw_k_block_elems(enum cw_qtype type);
/* The lookup tables, from gguf/. */
struct cw_k_tabs cw_k_tables(void);
/* Checks W's type, n_in, row/expert strides and pointer alignment. */
int cw_k_check_mat(const struct cw_k_mat *W, const char *what, struct cw_err *err);
/* The prefill products (k_gemm.cu): dequantised row chunks times x through
 * cuBLAS's tensor cores (f16, or TF32 for the types f16 cannot hold), for
 * n matrices of one width that read the same x (converted once). */
int cw_k_gemm(struct cw_cuda *c, int n, const struct cw_k_mat *const *W, const float *d_x,
              int64_t ldx, int64_t n_tok, float *const *d_y, const int64_t *ldy, bool add,
              const float *d_scale_logit, void *d_scratch, struct cw_err *err);
/* Bytes of scratch for one matrix; n matrices of one width need the most
 * of theirs. */
size_t cw_k_gemm_scratch(const struct cw_k_mat *W, int64_t n_tok);

#endif

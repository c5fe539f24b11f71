/* quant.c — the traits table and scalar conversions of quant.h.
 * Row dequantisers and quantisers are in quant_dequant.c / quant_quant.c;
 * this file only says which type has which. */
#include "gguf/quant.h"
#include "gguf/quant_rows.h"

#include <string.h>
#include <strings.h>

const int8_t cw_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

float cw_f16_to_f32(cw_f16 h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        /* inf / nan; a nan comes out quiet, as hardware conversion makes it */
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

cw_f16 cw_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (cw_f16)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (cw_f16)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
        if (ax < 0x33000000u) /* < 2^-25 rounds to zero */
            return (cw_f16)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24: value = m * 2^(e-150), half unit 2^-24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (cw_f16)(sign | q);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1); /* round to nearest even */
    r -= (127 - 15) << 23;
    return (cw_f16)(sign | (r >> 13));
}

float cw_bf16_to_f32(cw_bf16 h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

cw_bf16 cw_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a (quiet) nan */
        return (cw_bf16)((x >> 16) | 64);
    return (cw_bf16)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}


#define BOTH(t) .dequant_row = cw_dequant_row_##t, .quant_row = cw_quant_row_##t

static const struct cw_qtype_traits traits[CW_TYPE_COUNT] = {
    [CW_TYPE_F32] = {"f32", 1, 4, BOTH(f32)},
    [CW_TYPE_F16] = {"f16", 1, 2, BOTH(f16)},
    [CW_TYPE_Q4_0] = {"q4_0", 32, sizeof(struct cw_block_q4_0), BOTH(q4_0)},
    [CW_TYPE_Q4_1] = {"q4_1", 32, sizeof(struct cw_block_q4_1), BOTH(q4_1)},
    [CW_TYPE_Q5_0] = {"q5_0", 32, sizeof(struct cw_block_q5_0), BOTH(q5_0)},
    [CW_TYPE_Q5_1] = {"q5_1", 32, sizeof(struct cw_block_q5_1), BOTH(q5_1)},
    [CW_TYPE_Q8_0] = {"q8_0", 32, sizeof(struct cw_block_q8_0), BOTH(q8_0)},
    [CW_TYPE_Q8_1] = {"q8_1", 32, sizeof(struct cw_block_q8_1), 0, 0},
    [CW_TYPE_Q2_K] = {"q2_K", 256, sizeof(struct cw_block_q2_k), BOTH(q2_k)},
    [CW_TYPE_Q3_K] = {"q3_K", 256, sizeof(struct cw_block_q3_k), BOTH(q3_k)},
    [CW_TYPE_Q4_K] = {"q4_K", 256, sizeof(struct cw_block_q4_k), BOTH(q4_k)},
    [CW_TYPE_Q5_K] = {"q5_K", 256, sizeof(struct cw_block_q5_k), BOTH(q5_k)},
    [CW_TYPE_Q6_K] = {"q6_K", 256, sizeof(struct cw_block_q6_k), BOTH(q6_k)},
    [CW_TYPE_Q8_K] = {"q8_K", 256, sizeof(struct cw_block_q8_k), BOTH(q8_k)},
    /* The IQ1/IQ2/IQ3 lattice types: sizes known, so files holding them can be
     * inspected, but cwen does not compute with them (no dequantiser). */
    [CW_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, 0, 0},
    [CW_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, 0, 0},
    [CW_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, 0, 0},
    [CW_TYPE_IQ1_S] = {"iq1_s", 256, 50, 0, 0},
    [CW_TYPE_IQ4_NL] = {"iq4_nl", 32, sizeof(struct cw_block_iq4_nl), BOTH(iq4_nl)},
    [CW_TYPE_IQ3_S] = {"iq3_s", 256, 110, 0, 0},
    [CW_TYPE_IQ2_S] = {"iq2_s", 256, 82, 0, 0},
    [CW_TYPE_IQ4_XS] = {"iq4_xs", 256, sizeof(struct cw_block_iq4_xs), BOTH(iq4_xs)},
    [CW_TYPE_I8] = {"i8", 1, 1, 0, 0},
    [CW_TYPE_I16] = {"i16", 1, 2, 0, 0},
    [CW_TYPE_I32] = {"i32", 1, 4, 0, 0},
    [CW_TYPE_I64] = {"i64", 1, 8, 0, 0},
    [CW_TYPE_F64] = {"f64", 1, 8, 0, 0},
    [CW_TYPE_IQ1_M] = {"iq1_m", 256, 56, 0, 0},
    [CW_TYPE_BF16] = {"bf16", 1, 2, BOTH(bf16)},
    [CW_TYPE_TQ1_0] = {"tq1_0", 256, 54, 0, 0},
    [CW_TYPE_TQ2_0] = {"tq2_0", 256, 66, 0, 0},
    [CW_TYPE_MXFP4] = {"mxfp4", 32, sizeof(struct cw_block_mxfp4), BOTH(mxfp4)},
    [CW_TYPE_NVFP4] = {"nvfp4", 64, sizeof(struct cw_block_nvfp4), BOTH(nvfp4)},
    [CW_TYPE_Q1_0] = {"q1_0", 128, 18, 0, 0},
    [CW_TYPE_Q2_0] = {"q2_0", 64, 18, 0, 0},
};

const struct cw_qtype_traits *cw_qtype_traits(uint32_t type)
{
    if (type >= CW_TYPE_COUNT || !traits[type].name)
        return NULL;
    return &traits[type];
}

const char *cw_qtype_name(uint32_t type)
{
    const struct cw_qtype_traits *t = cw_qtype_traits(type);
    return t ? t->name : "unknown";
}

int cw_qtype_from_name(const char *name)
{
    for (int i = 0; i < CW_TYPE_COUNT; i++)
        if (traits[i].name && !strcasecmp(traits[i].name, name))
            return i;
    return -1;
}

size_t cw_qtype_row_bytes(uint32_t type, int64_t n)
{
    const struct cw_qtype_traits *t = cw_qtype_traits(type);
    if (!t || n < 0 || n % t->block_elems)
        return 0;
    return (size_t)(n / t->block_elems) * t->block_bytes;
}

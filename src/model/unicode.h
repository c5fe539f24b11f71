/* unicode.h — the code point facts the tokenizer needs.
 *
 * Owns UTF-8 decoding/encoding with llama.cpp's tolerance rules, general
 * category lookup (L, M, N, P, S, Z, C, unassigned) from generated range
 * tables (unicode_data.c, made by scripts/gen_unicode_tables.py from the
 * same Unicode data llama.cpp uses), the White_Space set, and lowercasing as
 * far as the pre-tokenizer's contraction rule can observe it. No state. */
#ifndef CW_UNICODE_H
#define CW_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* General category, coarse (first letter of the Unicode category). */
enum cw_ucat {
    CW_UCAT_UNDEF = 0, /* Cn: unassigned */
    CW_UCAT_N = 1,
    CW_UCAT_L = 2,
    CW_UCAT_Z = 3,
    CW_UCAT_M = 4,
    CW_UCAT_P = 5,
    CW_UCAT_S = 6,
    CW_UCAT_C = 7,
};

#define CW_UCP_REPLACEMENT 0xFFFDu

/* Decodes one code point from s[0..n) (n >= 1) and sets *len to the bytes
 * used. Like llama.cpp: a bad lead byte, a missing or bad continuation byte,
 * or a truncated sequence yields U+FFFD with *len = 1; overlong forms and
 * surrogates are accepted as decoded. Values above U+10FFFF (which llama.cpp
 * cannot re-encode) are also refused as U+FFFD with *len = 1. */
uint32_t cw_utf8_decode(const uint8_t *s, size_t n, size_t *len);

/* Writes cp (<= 0x10FFFF) as UTF-8 into out[0..4); returns the length. */
size_t cw_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Length of a UTF-8 sequence from its lead byte (1 for continuation and
 * invalid bytes), as llama.cpp's unicode_len_utf8. */
static inline size_t cw_utf8_len(uint8_t lead)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[lead >> 4];
}

enum cw_ucat cw_unicode_cat(uint32_t cp);
int cw_unicode_is_space(uint32_t cp); /* Unicode White_Space */
/* Simple lowercase where it is ASCII or the code point is ASCII; other code
 * points are returned unchanged (enough for matching 's 't 're ...). */
uint32_t cw_unicode_tolower_ascii(uint32_t cp);

/* Generated tables (unicode_data.c). */
extern const size_t cw_ucat_n_ranges;
extern const uint32_t cw_ucat_start[];
extern const uint8_t cw_ucat_value[];
extern const size_t cw_ulower_ascii_n;
extern const uint32_t cw_ulower_ascii[][2];

#endif

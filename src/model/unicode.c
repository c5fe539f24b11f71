/* unicode.c — UTF-8 coding and code point classification (see unicode.h).
 * The category tables are generated (unicode_data.c); this file only
 * searches them. */
#include "model/unicode.h"

uint32_t cw_utf8_decode(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t b = s[0];
    size_t need;
    uint32_t cp;
    if (b < 0x80) {
        *len = 1;
        return b;
    }
    if (b < 0xC0) /* stray continuation byte */
        goto bad;
    if (b < 0xE0) {
        need = 2;
        cp = b & 0x1F;
    } else if (b < 0xF0) {
        need = 3;
        cp = b & 0x0F;
    } else if (b < 0xF8) {
        need = 4;
        cp = b & 0x07;
    } else {
        goto bad;
    }
    if (n < need)
        goto bad;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xC0) != 0x80)
            goto bad;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp > 0x10FFFF)
        goto bad;
    *len = need;
    return cp;
bad:
    *len = 1;
    return CW_UCP_REPLACEMENT;
}

size_t cw_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

enum cw_ucat cw_unicode_cat(uint32_t cp)
{
    if (cp >= 0x110000)
        return CW_UCAT_UNDEF;
    /* last range whose start <= cp */
    size_t lo = 0, hi = cw_ucat_n_ranges;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (cw_ucat_start[mid] <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (enum cw_ucat)cw_ucat_value[lo];
}

int cw_unicode_is_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x1680)
        return cp == 0x85 || cp == 0xA0;
    return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t cw_unicode_tolower_ascii(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    for (size_t i = 0; i < cw_ulower_ascii_n; i++)
        if (cw_ulower_ascii[i][0] == cp)
            return cw_ulower_ascii[i][1];
    return cp;
}

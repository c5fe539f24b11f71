/* gguf_bad.h — a malformed-GGUF corpus for tests (test_gguf.c, parity).
 *
 * A tiny hand encoder builds one small valid file and variants of it that
 * each carry exactly one fault (huge counts, bad lengths, bad types, bad
 * shapes, overlapping or misplaced tensors, nesting bombs, ...). Built by
 * hand rather than by the writer, because the writer refuses to make them. */
#ifndef CW_GGUF_BAD_H
#define CW_GGUF_BAD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gb {
    uint8_t p[4096];
    size_t n;
};

static void gb_le(struct gb *b, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n && b->n < sizeof b->p; i++)
        b->p[b->n++] = (uint8_t)(v >> (8 * i));
}
static void gb_u32(struct gb *b, uint32_t v) { gb_le(b, v, 4); }
static void gb_u64(struct gb *b, uint64_t v) { gb_le(b, v, 8); }
static void gb_str(struct gb *b, const char *s)
{
    gb_u64(b, strlen(s));
    for (const char *c = s; *c && b->n < sizeof b->p; c++)
        b->p[b->n++] = (uint8_t)*c;
}
static void gb_pad(struct gb *b, size_t a)
{
    while (b->n % a)
        b->p[b->n++] = 0;
}
static void gb_hdr(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_u32(b, 0x46554747u);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
static void gb_kv_u32(struct gb *b, const char *k, uint32_t v)
{
    gb_str(b, k);
    gb_u32(b, 4);
    gb_u32(b, v);
}
static void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t off)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, off);
}
/* Data section of n zero bytes after aligning to 32. */
static void gb_data(struct gb *b, size_t n)
{
    gb_pad(b, 32);
    for (size_t i = 0; i < n && b->n < sizeof b->p; i++)
        b->p[b->n++] = 0;
}

enum { GB_OK = 0 }; /* case 0 is the valid control */

/* Builds case i into b; returns its name, or NULL past the last case. */
static const char *gb_case(int i, struct gb *b)
{
    static const uint64_t ne8[] = {8}, ne16[] = {16}, ne33[] = {33}, ne_neg[] = {(uint64_t)-8},
                          ne_big[] = {1ull << 40, 1ull << 40}, ne5[] = {8, 1, 1, 1, 1};
    b->n = 0;
    switch (i) {
    case 0: /* valid: two keys, two f32 tensors of 32 bytes each */
        gb_hdr(b, 3, 2, 2);
        gb_kv_u32(b, "a.u32", 7);
        gb_str(b, "a.str"); gb_u32(b, 8); gb_str(b, "hi");
        gb_tensor(b, "t0", 1, ne8, 0, 0);
        gb_tensor(b, "t1", 1, ne8, 0, 32);
        gb_data(b, 64);
        return "valid";
    case 1: gb_hdr(b, 3, 0, 1ull << 63); gb_kv_u32(b, "k", 1); return "huge n_kv";
    case 2: gb_hdr(b, 3, 1ull << 63, 0); gb_tensor(b, "t", 1, ne8, 0, 0); return "huge n_tensors";
    case 3:
        gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 9); gb_u32(b, 4); gb_u64(b, 1ull << 63);
        gb_u32(b, 1);
        return "huge array n";
    case 4:
        gb_hdr(b, 3, 0, 1); gb_u64(b, 1ull << 63); gb_le(b, 0x6b, 1); gb_u32(b, 4); gb_u32(b, 1);
        return "huge key length";
    case 5:
        gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 8); gb_u64(b, 1ull << 63); gb_le(b, 0x41, 1);
        return "huge string length";
    case 6:
        gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 8); gb_u64(b, 5); gb_le(b, 0x41, 4);
        return "string one byte short";
    case 7:
        gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne8, 0, 4); gb_data(b, 64);
        return "misaligned tensor offset";
    case 8: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne8, 4, 0); gb_data(b, 64); return "tensor type 4 (retired)";
    case 9: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne8, 99, 0); gb_data(b, 64); return "tensor type 99";
    case 10: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 0, ne8, 0, 0); gb_data(b, 64); return "n_dims 0";
    case 11: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 5, ne5, 0, 0); gb_data(b, 64); return "n_dims 5";
    case 12: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne33, 8, 0); gb_data(b, 64); return "ne[0] 33 for q8_0";
    case 13:
        gb_hdr(b, 3, 2, 0); gb_tensor(b, "t0", 1, ne16, 0, 0); gb_tensor(b, "t1", 1, ne8, 0, 32);
        gb_data(b, 64);
        return "overlapping tensors";
    case 14: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne16, 0, 32); gb_data(b, 64); return "tensor past end";
    case 15:
        gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne8, 0, (uint64_t)-32); gb_data(b, 64);
        return "offset + size overflows";
    case 16: gb_hdr(b, 3, 0, 2); gb_kv_u32(b, "k", 1); gb_kv_u32(b, "k", 2); return "duplicate key";
    case 17:
        gb_hdr(b, 3, 2, 0); gb_tensor(b, "t", 1, ne8, 0, 0); gb_tensor(b, "t", 1, ne8, 0, 32);
        gb_data(b, 64);
        return "duplicate tensor";
    case 18: gb_hdr(b, 3, 0, 0); b->p[0] = 'X'; return "bad magic";
    case 19: gb_hdr(b, 1, 0, 0); return "version 1";
    case 20: gb_hdr(b, 0x03000000u, 0, 0); return "big-endian version";
    case 21: gb_hdr(b, 4, 0, 0); return "version 4";
    case 22: gb_hdr(b, 3, 0, 1); gb_kv_u32(b, "general.alignment", 0); return "alignment 0";
    case 23: gb_hdr(b, 3, 0, 1); gb_kv_u32(b, "general.alignment", 48); return "alignment 48";
    case 24:
        gb_hdr(b, 3, 0, 1); gb_str(b, "general.alignment"); gb_u32(b, 10); gb_u64(b, 64);
        return "alignment as u64";
    case 25: gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 13); gb_u32(b, 0); return "metadata type 13";
    case 26: gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 0xffffffffu); gb_u32(b, 0); return "metadata type -1";
    case 27:
        gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 9); gb_u32(b, 13); gb_u64(b, 1); gb_u32(b, 0);
        return "array element type 13";
    case 28: /* arrays of arrays nested 9 deep, then 200 deep */
    case 29: {
        int depth = i == 28 ? 9 : 200;
        gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 9);
        for (int d = 0; d < depth; d++) {
            gb_u32(b, 9);
            gb_u64(b, 1);
        }
        gb_u32(b, 4); gb_u64(b, 1); gb_u32(b, 5);
        return i == 28 ? "arrays nested 9 deep" : "arrays nested 200 deep";
    }
    case 30: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne_neg, 0, 0); gb_data(b, 64); return "negative ne";
    case 31: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 2, ne_big, 30, 0); gb_data(b, 64); return "shape overflows";
    case 32:
        gb_hdr(b, 3, 1, 0);
        gb_tensor(b, "a_name_of_sixty_four_bytes_is_one_too_long_for_ggml_and_cwen__xy", 1, ne8, 0, 0);
        gb_data(b, 64);
        return "tensor name of 64 bytes";
    case 33: gb_hdr(b, 3, 0, 1); gb_str(b, "k"); gb_u32(b, 7); gb_le(b, 2, 1); return "bool value 2";
    case 34: gb_hdr(b, 3, 0, 1); gb_str(b, ""); gb_u32(b, 4); gb_u32(b, 1); return "empty key";
    case 35: gb_hdr(b, 3, 1, 0); gb_tensor(b, "t", 1, ne8, 0, 0); return "data section missing";
    default: return NULL;
    }
}

#endif

/* gguf_sample.h — a GGUF file with every metadata type, for tests.
 *
 * sample_fill() puts one key of each scalar type, arrays of each scalar type,
 * an array of strings and (if nested) arrays of arrays into a writer, plus
 * tensors of several types with patterned data (sample_data()). Used by
 * test_gguf.c and the llama.cpp parity test, which check the values below. */
#ifndef CW_GGUF_SAMPLE_H
#define CW_GGUF_SAMPLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static const uint8_t s_u8[] = {0, 1, 255};
static const int8_t s_i8[] = {-128, 0, 127};
static const uint16_t s_u16[] = {0, 65535, 1234};
static const int16_t s_i16[] = {-32768, 32767, -2};
static const uint32_t s_u32[] = {0, 4000000000u, 7};
static const int32_t s_i32[] = {-2147483647 - 1, 2147483647, -3};
static const float s_f32[] = {1.5f, -0.25f, 3.0e38f};
static const uint8_t s_bool[] = {1, 0, 1};
static const uint64_t s_u64[] = {0, UINT64_MAX, 1ull << 40};
static const int64_t s_i64[] = {INT64_MIN, INT64_MAX, -5};
static const double s_f64[] = {3.141592653589793, -1e300, 0.0};
static const char *const s_strs[] = {"", "hello", "h\xc3\xa9llo w\xc3\xb6rld", "<|im_start|>"};

static const struct {
    const char *name;
    uint32_t n_dims;
    int64_t ne[4];
    enum cw_qtype type;
} s_tensors[] = {
    {"token_embd.weight", 2, {8, 3, 1, 1}, CW_TYPE_F32},
    {"blk.0.attn_norm.weight", 1, {16, 1, 1, 1}, CW_TYPE_F16},
    {"blk.0.ffn_up.weight", 2, {64, 2, 1, 1}, CW_TYPE_Q8_0},
    {"blk.0.ffn_down.weight", 3, {256, 2, 2, 1}, CW_TYPE_Q4_K},
    {"blk.0.ssm_a", 4, {4, 1, 3, 2}, CW_TYPE_BF16},
    {"output.weight", 2, {256, 1, 1, 1}, CW_TYPE_Q6_K},
};
#define S_N_TENSORS (sizeof s_tensors / sizeof s_tensors[0])


/* Fills w; with nested, adds arrays of arrays (ggml cannot read those). */
static int sample_fill(struct cw_gguf_writer *w, int nested, struct cw_err *err)
{
    int rc = 0;
    struct cw_gguf_value v;
    rc |= cw_gguf_writer_set_str(w, "general.architecture", "qwen35");
    rc |= cw_gguf_writer_set_u8(w, "s.u8", 200);
    v = (struct cw_gguf_value){.type = CW_GGUF_I8, .i64 = -100};
    rc |= cw_gguf_writer_set_value(w, "s.i8", &v);
    v = (struct cw_gguf_value){.type = CW_GGUF_U16, .u64 = 60000};
    rc |= cw_gguf_writer_set_value(w, "s.u16", &v);
    v = (struct cw_gguf_value){.type = CW_GGUF_I16, .i64 = -30000};
    rc |= cw_gguf_writer_set_value(w, "s.i16", &v);
    rc |= cw_gguf_writer_set_u32(w, "s.u32", 4000000000u);
    rc |= cw_gguf_writer_set_i32(w, "s.i32", -2000000000);
    rc |= cw_gguf_writer_set_f32(w, "s.f32", 0.1f);
    rc |= cw_gguf_writer_set_bool(w, "s.bool", true);
    rc |= cw_gguf_writer_set_str(w, "s.str", "a string with \"quotes\" and \xe2\x82\xac");
    rc |= cw_gguf_writer_set_u64(w, "s.u64", UINT64_MAX - 1);
    v = (struct cw_gguf_value){.type = CW_GGUF_I64, .i64 = INT64_MIN + 1};
    rc |= cw_gguf_writer_set_value(w, "s.i64", &v);
    v = (struct cw_gguf_value){.type = CW_GGUF_F64, .f64 = 2.718281828459045};
    rc |= cw_gguf_writer_set_value(w, "s.f64", &v);
    rc |= cw_gguf_writer_set_arr(w, "a.u8", CW_GGUF_U8, s_u8, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.i8", CW_GGUF_I8, s_i8, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.u16", CW_GGUF_U16, s_u16, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.i16", CW_GGUF_I16, s_i16, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.u32", CW_GGUF_U32, s_u32, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.i32", CW_GGUF_I32, s_i32, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.f32", CW_GGUF_F32, s_f32, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.bool", CW_GGUF_BOOL, s_bool, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.u64", CW_GGUF_U64, s_u64, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.i64", CW_GGUF_I64, s_i64, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.f64", CW_GGUF_F64, s_f64, 3);
    rc |= cw_gguf_writer_set_arr(w, "a.empty", CW_GGUF_U32, NULL, 0);
    rc |= cw_gguf_writer_set_arr_str(w, "a.str", s_strs, 4);
    if (nested) {
        /* [[1,2,3] as u8, ["", "hello", ...], [[7,7,7] as u8]] */
        struct cw_gguf_str strs[4];
        for (int i = 0; i < 4; i++)
            strs[i] = (struct cw_gguf_str){s_strs[i], strlen(s_strs[i])};
        static const uint8_t one23[] = {1, 2, 3}, sevens[] = {7, 7, 7};
        struct cw_gguf_value inner = {.type = CW_GGUF_ARRAY,
                                      .arr = {.type = CW_GGUF_U8, .n = 3, .data = sevens}};
        struct cw_gguf_value items[3] = {
            {.type = CW_GGUF_ARRAY, .arr = {.type = CW_GGUF_U8, .n = 3, .data = one23}},
            {.type = CW_GGUF_ARRAY, .arr = {.type = CW_GGUF_STRING, .n = 4, .strs = strs}},
            {.type = CW_GGUF_ARRAY, .arr = {.type = CW_GGUF_ARRAY, .n = 1, .items = &inner}},
        };
        v = (struct cw_gguf_value){.type = CW_GGUF_ARRAY,
                                   .arr = {.type = CW_GGUF_ARRAY, .n = 3, .items = items}};
        rc |= cw_gguf_writer_set_value(w, "a.nested", &v);
    }
    for (size_t i = 0; i < S_N_TENSORS; i++)
        if (cw_gguf_writer_add_tensor(w, s_tensors[i].name, s_tensors[i].n_dims, s_tensors[i].ne,
                                      s_tensors[i].type, err) < 0)
            return -1;
    return rc ? -1 : 0;
}

/* Byte j of tensor i's data. */
static uint8_t sample_byte(size_t i, uint64_t j)
{
    return (uint8_t)(j * 31 + i * 7 + 1);
}

/* Allocates the data of every tensor (free with sample_free). */
static void **sample_data(const struct cw_gguf_writer *w)
{
    void **d = calloc(S_N_TENSORS, sizeof *d);
    for (size_t i = 0; i < S_N_TENSORS; i++) {
        uint64_t n = cw_gguf_writer_tensor_nbytes(w, (int64_t)i);
        uint8_t *p = malloc(n ? n : 1);
        for (uint64_t j = 0; j < n; j++)
            p[j] = sample_byte(i, j);
        d[i] = p;
    }
    return d;
}

static void sample_free(void **d)
{
    for (size_t i = 0; i < S_N_TENSORS; i++)
        free(d[i]);
    free(d);
}

#endif

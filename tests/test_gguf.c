/* test_gguf.c — the GGUF reader and writer: round trips of every metadata
 * type, nested arrays and tensors; getter coercions and errors; and a
 * malformed corpus (every truncation of a valid file, and gguf_bad.h's
 * single-fault files), each of which must be refused with a message that
 * names the file and an offset. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf_bad.h"
#include "gguf_sample.h"
#include "test.h"

static char tmp_path[1024];

static const char *tmp(const char *name)
{
    snprintf(tmp_path, sizeof tmp_path, "%s/%s", test_env("CWEN_TMP", "/tmp"), name);
    return tmp_path;
}

static int arr_eq(const struct cw_gguf_value *a, const struct cw_gguf_value *b);

static int val_eq(const struct cw_gguf_value *a, const struct cw_gguf_value *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case CW_GGUF_STRING: return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    case CW_GGUF_ARRAY: return arr_eq(a, b);
    case CW_GGUF_F32:
    case CW_GGUF_F64: return a->f64 == b->f64;
    default: return a->u64 == b->u64;
    }
}

static int arr_eq(const struct cw_gguf_value *a, const struct cw_gguf_value *b)
{
    if (a->arr.type != b->arr.type || a->arr.n != b->arr.n)
        return 0;
    for (uint64_t i = 0; i < a->arr.n; i++) {
        if (a->arr.type == CW_GGUF_STRING) {
            if (a->arr.strs[i].len != b->arr.strs[i].len ||
                memcmp(a->arr.strs[i].ptr, b->arr.strs[i].ptr, a->arr.strs[i].len))
                return 0;
        } else if (a->arr.type == CW_GGUF_ARRAY) {
            if (!arr_eq(&a->arr.items[i], &b->arr.items[i]))
                return 0;
        } else if (cw_gguf_arr_i64(a, i) != cw_gguf_arr_i64(b, i) ||
                   cw_gguf_arr_f64(a, i) != cw_gguf_arr_f64(b, i)) {
            return 0;
        }
    }
    return 1;
}

static void check_sample(const struct cw_gguf *g, uint64_t align, int nested)
{
    struct cw_err err = {0};
    const struct cw_gguf_kv *kv;
    ok(g->version == 3, "version %u", g->version);
    ok(g->alignment == align, "alignment %llu", (unsigned long long)g->alignment);
    ok(g->data_offset % align == 0, "data offset aligned");
    kv = cw_gguf_find_kv(g, "s.u8");
    ok(kv && kv->value.type == CW_GGUF_U8 && kv->value.u64 == 200, "u8");
    kv = cw_gguf_find_kv(g, "s.i8");
    ok(kv && kv->value.type == CW_GGUF_I8 && kv->value.i64 == -100, "i8");
    kv = cw_gguf_find_kv(g, "s.u16");
    ok(kv && kv->value.type == CW_GGUF_U16 && kv->value.u64 == 60000, "u16");
    kv = cw_gguf_find_kv(g, "s.i16");
    ok(kv && kv->value.type == CW_GGUF_I16 && kv->value.i64 == -30000, "i16");
    kv = cw_gguf_find_kv(g, "s.u32");
    ok(kv && kv->value.type == CW_GGUF_U32 && kv->value.u64 == 4000000000u, "u32");
    kv = cw_gguf_find_kv(g, "s.i32");
    ok(kv && kv->value.type == CW_GGUF_I32 && kv->value.i64 == -2000000000, "i32");
    kv = cw_gguf_find_kv(g, "s.f32");
    ok(kv && kv->value.type == CW_GGUF_F32 && kv->value.f64 == (double)0.1f, "f32");
    kv = cw_gguf_find_kv(g, "s.bool");
    ok(kv && kv->value.type == CW_GGUF_BOOL && kv->value.u64 == 1, "bool");
    kv = cw_gguf_find_kv(g, "s.str");
    ok(kv && kv->value.type == CW_GGUF_STRING &&
       cw_gguf_str_eq(kv->value.str, "a string with \"quotes\" and \xe2\x82\xac"), "string");
    kv = cw_gguf_find_kv(g, "s.u64");
    ok(kv && kv->value.type == CW_GGUF_U64 && kv->value.u64 == UINT64_MAX - 1, "u64");
    kv = cw_gguf_find_kv(g, "s.i64");
    ok(kv && kv->value.type == CW_GGUF_I64 && kv->value.i64 == INT64_MIN + 1, "i64");
    kv = cw_gguf_find_kv(g, "s.f64");
    ok(kv && kv->value.type == CW_GGUF_F64 && kv->value.f64 == 2.718281828459045, "f64");

    struct { const char *key; enum cw_gguf_type t; } arrs[] = {
        {"a.u8", CW_GGUF_U8}, {"a.i8", CW_GGUF_I8}, {"a.u16", CW_GGUF_U16}, {"a.i16", CW_GGUF_I16},
        {"a.u32", CW_GGUF_U32}, {"a.i32", CW_GGUF_I32}, {"a.bool", CW_GGUF_BOOL},
        {"a.u64", CW_GGUF_U64}, {"a.i64", CW_GGUF_I64}, {"a.f32", CW_GGUF_F32}, {"a.f64", CW_GGUF_F64},
    };
    for (size_t k = 0; k < sizeof arrs / sizeof arrs[0]; k++) {
        kv = cw_gguf_find_kv(g, arrs[k].key);
        int good = kv && kv->value.type == CW_GGUF_ARRAY && kv->value.arr.type == arrs[k].t &&
                   kv->value.arr.n == 3;
        for (uint64_t i = 0; good && i < 3; i++) {
            int64_t want = 0;
            double wantf = 0;
            switch (arrs[k].t) {
            case CW_GGUF_U8: want = s_u8[i]; break;
            case CW_GGUF_I8: want = s_i8[i]; break;
            case CW_GGUF_U16: want = s_u16[i]; break;
            case CW_GGUF_I16: want = s_i16[i]; break;
            case CW_GGUF_U32: want = s_u32[i]; break;
            case CW_GGUF_I32: want = s_i32[i]; break;
            case CW_GGUF_BOOL: want = s_bool[i]; break;
            case CW_GGUF_U64: want = (int64_t)s_u64[i]; break;
            case CW_GGUF_I64: want = s_i64[i]; break;
            case CW_GGUF_F32: wantf = s_f32[i]; break;
            default: wantf = s_f64[i]; break;
            }
            if (arrs[k].t == CW_GGUF_F32 || arrs[k].t == CW_GGUF_F64)
                good = cw_gguf_arr_f64(&kv->value, i) == wantf;
            else
                good = cw_gguf_arr_i64(&kv->value, i) == want;
        }
        ok(good, "array %s", arrs[k].key);
    }
    kv = cw_gguf_find_kv(g, "a.empty");
    ok(kv && kv->value.arr.type == CW_GGUF_U32 && kv->value.arr.n == 0, "empty array");
    kv = cw_gguf_find_kv(g, "a.str");
    int good = kv && kv->value.arr.type == CW_GGUF_STRING && kv->value.arr.n == 4;
    for (int i = 0; good && i < 4; i++)
        good = cw_gguf_str_eq(kv->value.arr.strs[i], s_strs[i]);
    ok(good, "array of strings");
    kv = cw_gguf_find_kv(g, "a.nested");
    if (nested) {
        const struct cw_gguf_value *v = kv ? &kv->value : NULL;
        ok(v && v->arr.type == CW_GGUF_ARRAY && v->arr.n == 3, "nested array");
        if (v && v->arr.n == 3) {
            const struct cw_gguf_value *it = v->arr.items;
            ok(it[0].arr.type == CW_GGUF_U8 && it[0].arr.n == 3 && cw_gguf_arr_i64(&it[0], 2) == 3,
               "nested[0] = u8[1,2,3]");
            ok(it[1].arr.type == CW_GGUF_STRING && it[1].arr.n == 4 &&
               cw_gguf_str_eq(it[1].arr.strs[1], "hello"), "nested[1] = strings");
            ok(it[2].arr.type == CW_GGUF_ARRAY && it[2].arr.n == 1 &&
               it[2].arr.items[0].arr.n == 3 && cw_gguf_arr_i64(&it[2].arr.items[0], 1) == 7,
               "nested[2] = [[7,7,7]]");
        }
    } else {
        ok(!kv, "no nested array");
    }
    ok(g->n_tensors == S_N_TENSORS, "n_tensors %llu", (unsigned long long)g->n_tensors);
    for (size_t i = 0; i < S_N_TENSORS && i < g->n_tensors; i++) {
        const struct cw_gguf_tensor *t = cw_gguf_find_tensor(g, s_tensors[i].name);
        ok(t == &g->tensors[i] && cw_gguf_find_tensor_index(g, s_tensors[i].name) == (int64_t)i,
           "find tensor %s", s_tensors[i].name);
        if (!t)
            continue;
        int same = t->type == s_tensors[i].type && t->n_dims == s_tensors[i].n_dims &&
                   !memcmp(t->ne, s_tensors[i].ne, sizeof t->ne);
        ok(same, "tensor %s shape/type", t->name);
        ok(t->offset % align == 0, "tensor %s offset aligned", t->name);
        ok(t->nbytes == cw_qtype_row_bytes(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]),
           "tensor %s nbytes", t->name);
        const uint8_t *p = t->data;
        int data_ok = p == g->base + g->data_offset + t->offset;
        for (uint64_t j = 0; data_ok && j < t->nbytes; j++)
            data_ok = p[j] == sample_byte(i, j);
        ok(data_ok, "tensor %s data", t->name);
    }
    ok(!cw_gguf_find_tensor(g, "nope") && cw_gguf_find_tensor_index(g, "nope") == -1, "absent tensor");
    ok(!cw_gguf_find_kv(g, "nope"), "absent key");
    (void)err;
}

static void test_roundtrip(void)
{
    for (int pass = 0; pass < 2; pass++) {
        uint64_t align = pass ? 64 : 32;
        struct cw_err err = {0};
        struct cw_gguf_writer *w = cw_gguf_writer_new(align);
        ok(w && sample_fill(w, 1, &err) == 0, "fill: %s", err.msg);
        void **d = sample_data(w);
        const char *path = tmp(pass ? "gguf_rt64.gguf" : "gguf_rt32.gguf");
        ok(cw_gguf_writer_write_file(w, path, (const void *const *)d, &err) == 0, "write: %s", err.msg);
        uint64_t total = cw_gguf_writer_total_size(w);
        struct cw_gguf g;
        ok(cw_gguf_open(&g, path, &err) == 0, "open: %s", err.msg);
        ok(g.size == total, "file size %llu == total %llu", (unsigned long long)g.size,
           (unsigned long long)total);
        for (size_t i = 0; i < S_N_TENSORS && i < g.n_tensors; i++)
            ok(cw_gguf_writer_tensor_offset(w, (int64_t)i) == g.data_offset + g.tensors[i].offset,
               "writer offset of tensor %zu", i);
        check_sample(&g, align, 1);

        /* keys come back in insertion order */
        ok(g.n_kv > 2 && cw_gguf_str_eq(g.kv[pass ? 1 : 0].key, "general.architecture") &&
           cw_gguf_str_eq(g.kv[g.n_kv - 1].key, "a.nested"), "insertion order");

        /* copy every parsed value into a new file: identical metadata */
        struct cw_gguf_writer *w2 = cw_gguf_writer_new(align);
        int rc = 0;
        char key[256];
        for (uint64_t i = 0; i < g.n_kv; i++)
            rc |= cw_gguf_writer_set_value(w2, cw_gguf_str_copy(g.kv[i].key, key, sizeof key),
                                           &g.kv[i].value);
        rc |= cw_gguf_writer_set_u32(w2, "s.u32", 1); /* set twice replaces, keeps position */
        rc |= cw_gguf_writer_set_u32(w2, "s.u32", 4000000000u);
        for (size_t i = 0; i < S_N_TENSORS; i++)
            rc |= cw_gguf_writer_add_tensor(w2, s_tensors[i].name, s_tensors[i].n_dims,
                                            s_tensors[i].ne, s_tensors[i].type, &err) < 0;
        const char *path2 = tmp("gguf_copy.gguf");
        ok(rc == 0 && cw_gguf_writer_write_file(w2, path2, (const void *const *)d, &err) == 0,
           "copy write: %s", err.msg);
        struct cw_gguf g2;
        ok(cw_gguf_open(&g2, path2, &err) == 0, "copy open: %s", err.msg);
        ok(g2.n_kv == g.n_kv, "copy n_kv");
        int same = g2.n_kv == g.n_kv;
        for (uint64_t i = 0; same && i < g.n_kv; i++)
            same = g.kv[i].key.len == g2.kv[i].key.len &&
                   !memcmp(g.kv[i].key.ptr, g2.kv[i].key.ptr, g.kv[i].key.len) &&
                   val_eq(&g.kv[i].value, &g2.kv[i].value);
        ok(same, "copied metadata identical, in order");
        ok(g2.size == g.size && !memcmp(g2.base, g.base, g.size), "copy is byte-identical");
        check_sample(&g2, align, 1);
        cw_gguf_close(&g2);
        cw_gguf_close(&g);
        cw_gguf_writer_free(w2);
        sample_free(d);
        cw_gguf_writer_free(w);
    }
}

static void test_writer_errors(void)
{
    struct cw_err err = {0};
    ok(!cw_gguf_writer_new(0) && !cw_gguf_writer_new(48), "bad alignment refused");
    struct cw_gguf_writer *w = cw_gguf_writer_new(32);
    int64_t ne[4] = {33, 1, 1, 1};
    ok(cw_gguf_writer_add_tensor(w, "t", 1, ne, CW_TYPE_Q8_0, &err) < 0, "q8_0 ne 33 refused");
    ne[0] = 32;
    ok(cw_gguf_writer_add_tensor(w, "t", 0, ne, CW_TYPE_F32, &err) < 0, "n_dims 0 refused");
    ok(cw_gguf_writer_add_tensor(w, "t", 5, ne, CW_TYPE_F32, &err) < 0, "n_dims 5 refused");
    ok(cw_gguf_writer_add_tensor(w, "t", 1, ne, (enum cw_qtype)4, &err) < 0, "type 4 refused");
    ok(cw_gguf_writer_add_tensor(w, "t", 1, ne, CW_TYPE_F32, &err) == 0, "add");
    ok(cw_gguf_writer_add_tensor(w, "t", 1, ne, CW_TYPE_F32, &err) < 0, "duplicate refused");
    ok(cw_gguf_writer_set_u32(w, "general.alignment", 3) < 0, "alignment 3 refused");
    ok(cw_gguf_writer_set_u64(w, "general.alignment", 64) < 0, "alignment as u64 refused");
    ok(cw_gguf_writer_set_u32(w, "general.alignment", 128) == 0 &&
       cw_gguf_writer_tensor_offset(w, 0) % 128 == 0, "alignment 128 relayouts");
    ok(cw_gguf_writer_set_arr(w, "x", CW_GGUF_STRING, "", 1) < 0, "set_arr of strings refused");
    cw_gguf_writer_free(w);
}

static void test_getters(void)
{
    struct cw_err err = {0};
    struct cw_gguf_writer *w = cw_gguf_writer_new(32);
    sample_fill(w, 0, &err);
    cw_gguf_writer_set_i32(w, "neg", -1);
    cw_gguf_writer_set_u32(w, "small", 5);
    const char *path = tmp("gguf_getters.gguf");
    ok(cw_gguf_writer_write_file(w, path, NULL, &err) == 0, "write: %s", err.msg);
    cw_gguf_writer_free(w);
    struct cw_gguf g;
    if (cw_gguf_open(&g, path, &err)) {
        ok(0, "open: %s", err.msg);
        return;
    }
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    struct cw_gguf_str s;
    ok(cw_gguf_get_u32(&g, "s.u8", &u32, &err) == 0 && u32 == 200, "u32 from u8");
    ok(cw_gguf_get_u32(&g, "s.u16", &u32, &err) == 0 && u32 == 60000, "u32 from u16");
    ok(cw_gguf_get_u32(&g, "small", &u32, &err) == 0 && u32 == 5, "u32");
    ok(cw_gguf_get_u32(&g, "neg", &u32, &err) < 0 && strstr(err.msg, "neg"), "u32 from -1 refused: %s", err.msg);
    ok(cw_gguf_get_u32(&g, "s.u64", &u32, &err) < 0, "u32 from big u64 refused");
    ok(cw_gguf_get_u64(&g, "s.u64", &u64, &err) == 0 && u64 == UINT64_MAX - 1, "u64");
    ok(cw_gguf_get_u64(&g, "s.i8", &u64, &err) < 0, "u64 from negative refused");
    ok(cw_gguf_get_i64(&g, "s.i64", &i64, &err) == 0 && i64 == INT64_MIN + 1, "i64");
    ok(cw_gguf_get_i64(&g, "s.i16", &i64, &err) == 0 && i64 == -30000, "i64 from i16");
    ok(cw_gguf_get_i64(&g, "s.u64", &i64, &err) < 0, "i64 from huge u64 refused");
    ok(cw_gguf_get_i64(&g, "s.u32", &i64, &err) == 0 && i64 == 4000000000ll, "i64 from u32");
    ok(cw_gguf_get_f32(&g, "s.f32", &f, &err) == 0 && f == 0.1f, "f32");
    ok(cw_gguf_get_f32(&g, "s.f64", &f, &err) == 0 && f == (float)2.718281828459045, "f32 from f64");
    ok(cw_gguf_get_f32(&g, "neg", &f, &err) == 0 && f == -1.0f, "f32 from i32");
    ok(cw_gguf_get_f32(&g, "s.str", &f, &err) < 0 && strstr(err.msg, "string"), "f32 from string refused: %s", err.msg);
    ok(cw_gguf_get_bool(&g, "s.bool", &b, &err) == 0 && b, "bool");
    ok(cw_gguf_get_bool(&g, "s.u8", &b, &err) < 0, "bool from u8 refused");
    ok(cw_gguf_get_u32(&g, "s.bool", &u32, &err) < 0, "u32 from bool refused");
    ok(cw_gguf_get_str(&g, "general.architecture", &s, &err) == 0 && cw_gguf_str_eq(s, "qwen35"), "str");
    ok(cw_gguf_get_str(&g, "s.u32", &s, &err) < 0, "str from u32 refused");
    ok(cw_gguf_get_u32(&g, "a.u32", &u32, &err) < 0 && strstr(err.msg, "array of u32"), "u32 from array refused: %s", err.msg);
    err.code = 0;
    ok(cw_gguf_get_u32(&g, "missing", &u32, &err) < 0 && err.code == CW_ERR_NOTFOUND &&
       strstr(err.msg, "missing") && strstr(err.msg, "gguf_getters.gguf"), "missing key: %s", err.msg);
    ok(cw_gguf_get_u32_or(&g, "missing", 9, &u32, &err) == 0 && u32 == 9, "u32_or default");
    ok(cw_gguf_get_u32_or(&g, "small", 9, &u32, &err) == 0 && u32 == 5, "u32_or present");
    ok(cw_gguf_get_u32_or(&g, "s.str", 9, &u32, &err) < 0, "u32_or wrong type fails");
    ok(cw_gguf_get_f32_or(&g, "missing", 0.5f, &f, &err) == 0 && f == 0.5f, "f32_or default");
    ok(cw_gguf_get_f32_or(&g, "s.bool", 0.5f, &f, &err) < 0, "f32_or wrong type fails");
    ok(cw_gguf_get_bool_or(&g, "missing", true, &b, &err) == 0 && b, "bool_or default");
    ok(cw_gguf_get_bool_or(&g, "s.u8", true, &b, &err) < 0, "bool_or wrong type fails");
    char small[4];
    ok(!strcmp(cw_gguf_str_copy(s, small, sizeof small), "qwe"), "str_copy truncates");
    ok(!strcmp(cw_gguf_type_name(CW_GGUF_ARRAY), "array") && !strcmp(cw_gguf_type_name(99), "unknown"),
       "type names");
    cw_gguf_close(&g);
    cw_gguf_close(&g); /* safe on a closed (zeroed) struct */
}

/* Parses a private copy of exactly n bytes (so ASan sees any overread). */
static int parse_copy(const uint8_t *p, size_t n, struct cw_err *err)
{
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, p, n);
    struct cw_gguf g;
    int rc = cw_gguf_parse(&g, c, n, "bad.gguf", err);
    if (rc == 0)
        cw_gguf_close(&g);
    free(c);
    return rc;
}

static void test_malformed(void)
{
    struct gb b;
    struct cw_err err = {0};
    gb_case(GB_OK, &b);
    ok(parse_copy(b.p, b.n, &err) == 0, "control parses: %s", err.msg);
    int n_cases = 0;
    for (int i = 1;; i++) {
        const char *name = gb_case(i, &b);
        if (!name)
            break;
        n_cases++;
        memset(&err, 0, sizeof err);
        int rc = parse_copy(b.p, b.n, &err);
        ok(rc < 0 && strstr(err.msg, "bad.gguf") && strstr(err.msg, "offset"), "%s refused: %s", name,
           err.msg);
        note("%-26s %s", name, err.msg);
    }
    ok(n_cases >= 35, "%d malformed cases", n_cases);

    /* every truncation of a valid file (from the writer) fails cleanly */
    struct cw_gguf_writer *w = cw_gguf_writer_new(32);
    int64_t ne[4] = {8, 1, 1, 1};
    cw_gguf_writer_set_str(w, "general.architecture", "qwen35");
    cw_gguf_writer_set_arr_str(w, "tok", s_strs, 4);
    cw_gguf_writer_set_arr(w, "arr", CW_GGUF_I16, s_i16, 3);
    struct cw_gguf_value items[1] = {{.type = CW_GGUF_ARRAY, .arr = {.type = CW_GGUF_U8, .n = 3, .data = s_u8}}};
    struct cw_gguf_value nested = {.type = CW_GGUF_ARRAY, .arr = {.type = CW_GGUF_ARRAY, .n = 1, .items = items}};
    cw_gguf_writer_set_value(w, "nested", &nested);
    cw_gguf_writer_set_f32(w, "f", 1.0f);
    cw_gguf_writer_add_tensor(w, "a", 1, ne, CW_TYPE_F32, &err);
    cw_gguf_writer_add_tensor(w, "b", 1, ne, CW_TYPE_F32, &err); /* 32 bytes: no tail padding */
    const char *path = tmp("gguf_small.gguf");
    ok(cw_gguf_writer_write_file(w, path, NULL, &err) == 0, "small write");
    cw_gguf_writer_free(w);
    FILE *fp = fopen(path, "rb");
    uint8_t buf[4096];
    size_t n = fp ? fread(buf, 1, sizeof buf, fp) : 0;
    if (fp)
        fclose(fp);
    ok(n > 100 && parse_copy(buf, n, &err) == 0, "small file parses (%zu bytes)", n);
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        memset(&err, 0, sizeof err);
        if (parse_copy(buf, k, &err) == 0 || !strstr(err.msg, "bad.gguf") || !strstr(err.msg, "offset")) {
            if (!bad++)
                ok(0, "truncation at %zu not refused properly: %s", k, err.msg);
        }
    }
    ok(bad == 0, "all %zu truncations refused with a message", n);

    /* open() of a missing and an empty file */
    struct cw_gguf g;
    ok(cw_gguf_open(&g, tmp("no-such.gguf"), &err) < 0 && strstr(err.msg, "no-such.gguf"), "missing file");
    fp = fopen(tmp("empty.gguf"), "wb");
    if (fp)
        fclose(fp);
    ok(cw_gguf_open(&g, tmp("empty.gguf"), &err) < 0 && strstr(err.msg, "offset"), "empty file: %s", err.msg);
}

int main(void)
{
    test_roundtrip();
    test_writer_errors();
    test_getters();
    test_malformed();
    return done();
}
